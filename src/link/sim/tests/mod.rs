//! The simulated switch, specified by its behaviour.

use super::*;
use ethbcast_proto::group_mac;
use proptest::prelude::*;

/// A switch with `cfg` and handles to all its ports.
fn build(cfg: SimConfig) -> (SimNet, Vec<SimPort>) {
    let net = SimNet::new(cfg).expect("valid configuration");
    let ports = net.all_ports();
    (net, ports)
}

/// One frame as a port received it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rx {
    port: usize,
    at_ns: u64,
    src: MacAddr,
    pdu: Vec<u8>,
}

/// Hands every due frame of every port to the record.
fn collect(net: &SimNet, ports: &mut [SimPort], out: &mut Vec<Rx>) {
    let at_ns = net.elapsed().as_nanos() as u64;
    for p in ports.iter_mut() {
        let port = p.index();
        p.recv(None, &mut |src, pdu| {
            out.push(Rx {
                port,
                at_ns,
                src,
                pdu: pdu.to_vec(),
            })
        })
        .expect("sim recv never fails");
    }
}

/// True if `r` carries `want`, zero-padded to the Ethernet minimum as a real link pads it.
fn carries(r: &Rx, want: &[u8]) -> bool {
    r.pdu.len() == want.len().max(MIN_ETH_PAYLOAD)
        && r.pdu.starts_with(want)
        && r.pdu[want.len()..].iter().all(|&b| b == 0)
}

/// Runs the network until idle, receiving after every event.
fn drain(net: &SimNet, ports: &mut [SimPort]) -> Vec<Rx> {
    let mut out = Vec::new();
    collect(net, ports, &mut out);
    while net.step().is_some() {
        collect(net, ports, &mut out);
    }
    out
}

/// A PDU carrying a sequence number in its first four bytes.
fn numbered(i: u32, len: usize) -> Vec<u8> {
    let mut v = vec![0xA5; len.max(4)];
    v[..4].copy_from_slice(&i.to_be_bytes());
    v
}

fn number(pdu: &[u8]) -> u32 {
    u32::from_be_bytes([pdu[0], pdu[1], pdu[2], pdu[3]])
}

fn perfect(ports: usize) -> SimConfig {
    SimConfig {
        ports,
        ..SimConfig::default()
    }
}

#[test]
fn broadcast_reaches_every_other_port_once_and_not_the_sender() {
    let (net, mut ports) = build(perfect(5));
    ports[2].send(BROADCAST_MAC, b"hello all").unwrap();
    let got = drain(&net, &mut ports);
    let mut receivers: Vec<usize> = got.iter().map(|r| r.port).collect();
    receivers.sort();
    assert_eq!(receivers, vec![0, 1, 3, 4]);
    for r in &got {
        assert_eq!(r.src, port_mac(2));
        assert!(carries(r, b"hello all"), "{r:?}");
    }
    let s = net.stats();
    assert_eq!((s.frames_sent, s.frames_delivered, s.lost), (1, 4, 0));
}

#[test]
fn unicast_reaches_only_its_destination() {
    let (net, mut ports) = build(perfect(4));
    let dst = ports[3].local_mac();
    ports[0].send(dst, b"just you").unwrap();
    let got = drain(&net, &mut ports);
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].port, got[0].src), (3, port_mac(0)));
    assert_eq!(net.port_stats(3).unwrap().frames_delivered, 1);
}

#[test]
fn frames_to_unknown_or_own_mac_are_dropped_and_counted() {
    let (net, mut ports) = build(perfect(3));
    ports[0]
        .send(MacAddr([0x02, 0, 0, 0, 0, 7]), b"no port 7")
        .unwrap();
    ports[0]
        .send(MacAddr([0x00, 0x11, 0x22, 0x33, 0x44, 0x55]), b"stranger")
        .unwrap();
    ports[0].send(port_mac(0), b"myself").unwrap();
    assert!(drain(&net, &mut ports).is_empty());
    let s = net.stats();
    assert_eq!(
        (s.frames_sent, s.unknown_dst, s.frames_delivered),
        (3, 3, 0)
    );
}

#[test]
fn pdu_larger_than_the_mtu_is_refused() {
    let (net, mut ports) = build(SimConfig {
        mtu: 1000,
        ..perfect(2)
    });
    assert_eq!(ports[0].max_pdu(), 1000);
    let err = ports[0].send(BROADCAST_MAC, &[0; 1001]).unwrap_err();
    assert!(matches!(
        err,
        LinkError::FrameTooLong {
            len: 1001,
            max: 1000
        }
    ));
    ports[0].send(BROADCAST_MAC, &[0; 1000]).unwrap();
    assert_eq!(drain(&net, &mut ports).len(), 1);
    assert_eq!(net.stats().frames_sent, 1);
}

#[test]
fn macs_are_deterministic_and_map_back_to_ports() {
    assert_eq!(port_mac(0x0102), [0x02, 0, 0, 0, 0x01, 0x02]);
    assert_eq!(port_index(&port_mac(513)), Some(513));
    assert_eq!(port_index(&BROADCAST_MAC), None);
    let (_net, ports) = build(perfect(3));
    assert_eq!(ports[2].local_mac(), port_mac(2));
}

/// A busy faulty run: several senders, broadcast and unicast, every fault enabled.
fn faulty_trace(seed: u64) -> (Vec<Rx>, SimStats) {
    let faults = Faults {
        loss: 0.05,
        burst_loss: 0.01,
        dup: 0.05,
        reorder: 0.1,
        corrupt: 0.05,
        tx_loss: 0.01,
        ..Faults::NONE
    };
    let (net, mut ports) = build(SimConfig {
        ports: 6,
        seed,
        faults,
        rate_bps: Some(100_000_000),
        switch_buffer: Some(16),
        ..SimConfig::default()
    });
    let mut out = Vec::new();
    for i in 0..600u32 {
        let src = (i % 6) as usize;
        let dst = if i % 3 == 0 {
            port_mac(((i / 3) % 6) as u16)
        } else {
            BROADCAST_MAC
        };
        ports[src].send(dst, &numbered(i, 64 + i as usize)).unwrap();
        if i % 7 == 0 {
            net.advance_by(Duration::from_micros(30));
            collect(&net, &mut ports, &mut out);
        }
    }
    out.extend(drain(&net, &mut ports));
    (out, net.stats())
}

#[test]
fn same_seed_gives_the_same_run_bit_for_bit() {
    let (a, sa) = faulty_trace(42);
    let (b, sb) = faulty_trace(42);
    assert!(a.len() > 500, "the run should deliver plenty: {}", a.len());
    // Every kind of fault struck, so the trace exercises every random decision.
    assert!(sa.lost > 0 && sa.duplicated > 0 && sa.reordered > 0 && sa.corrupted > 0);
    assert!(sa.switch_drops > 0 && sa.unknown_dst > 0, "{sa:?}");
    assert_eq!(a, b);
    assert_eq!(sa, sb);
}

#[test]
fn different_seeds_give_different_runs() {
    let (a, _) = faulty_trace(1);
    let (b, _) = faulty_trace(2);
    assert_ne!(a, b);
}

#[test]
fn independent_loss_rate_matches_the_configuration() {
    let p = 0.1;
    let n = 100_000u32;
    let (net, mut ports) = build(SimConfig {
        rate_bps: None,
        per_port: vec![(1, Faults::lossy(p))],
        ..perfect(2)
    });
    let dst = ports[1].local_mac();
    for i in 0..n {
        ports[0].send(dst, &numbered(i, 64)).unwrap();
    }
    let got = drain(&net, &mut ports).len() as f64;
    let measured = 1.0 - got / f64::from(n);
    // Standard deviation of the estimate is sqrt(p(1-p)/n) ~ 0.001: allow five of them.
    assert!((measured - p).abs() < 0.005, "measured loss {measured}");
    assert_eq!(net.stats().lost + got as u64, u64::from(n));
}

#[test]
fn loss_bursts_have_the_configured_mean_length() {
    let n = 200_000u32;
    let (net, mut ports) = build(SimConfig {
        rate_bps: None,
        per_port: vec![(
            1,
            Faults {
                burst_loss: 0.01,
                burst_len: 4.0,
                ..Faults::NONE
            },
        )],
        ..perfect(2)
    });
    let dst = ports[1].local_mac();
    for i in 0..n {
        ports[0].send(dst, &numbered(i, 64)).unwrap();
    }
    let got: Vec<u32> = drain(&net, &mut ports)
        .iter()
        .map(|r| number(&r.pdu))
        .collect();
    // Gaps between consecutive received numbers are the bursts.
    let bursts: Vec<u32> = got
        .windows(2)
        .map(|w| w[1] - w[0] - 1)
        .filter(|&g| g > 0)
        .collect();
    let mean = bursts.iter().map(|&b| f64::from(b)).sum::<f64>() / bursts.len() as f64;
    assert!(bursts.len() > 1000, "{} bursts", bursts.len());
    assert!((mean - 4.0).abs() < 0.4, "mean burst length {mean}");
    assert!(bursts.contains(&1) && bursts.iter().any(|&b| b >= 8));
}

#[test]
fn a_loss_burst_ends_when_the_port_goes_quiet() {
    // Bursts that, counted in frames, would never end: each round's frames are lost from
    // the first burst on, and the first frame after a quiet spell (2 ms) starts afresh.
    let (net, mut ports) = build(SimConfig {
        rate_bps: None,
        per_port: vec![(
            1,
            Faults {
                burst_loss: 0.05,
                burst_len: 1e9,
                ..Faults::NONE
            },
        )],
        ..perfect(2)
    });
    let dst = ports[1].local_mac();
    let mut first_of_round = 0;
    for round in 0..20u32 {
        for i in 0..200 {
            ports[0].send(dst, &numbered(round * 1000 + i, 64)).unwrap();
        }
        let got: Vec<u32> = drain(&net, &mut ports)
            .iter()
            .map(|r| number(&r.pdu) - round * 1000)
            .collect();
        // Never a frame after a lost one within the round: the burst went on.
        assert_eq!(
            got,
            (0..got.len() as u32).collect::<Vec<_>>(),
            "round {round}"
        );
        assert!(got.len() < 200, "round {round}: a burst began");
        if got.first() == Some(&0) {
            first_of_round += 1;
        }
        net.advance_by(Duration::from_millis(2));
    }
    assert!(
        first_of_round >= 17,
        "{first_of_round} of 20 rounds began without loss"
    );
}

#[test]
fn every_copy_is_delivered_lost_or_dropped_exactly_once() {
    let faults = Faults {
        loss: 0.05,
        burst_loss: 0.02,
        dup: 0.05,
        reorder: 0.1,
        corrupt: 0.05,
        tx_loss: 0.02,
        ..Faults::NONE
    };
    let (net, mut ports) = build(SimConfig {
        ports: 5,
        faults,
        per_port: vec![(
            4,
            Faults {
                dead: true,
                ..faults
            },
        )],
        switch_buffer: Some(4),
        ..SimConfig::default()
    });
    net.partition(&[0], &[3]).unwrap();
    let mut copies = 0u64;
    for i in 0..5000u32 {
        let src = (i % 5) as usize;
        if i % 4 == 0 {
            let dst = (src + 1 + (i as usize / 5) % 4) % 5;
            ports[src]
                .send(port_mac(dst as u16), &numbered(i, 100))
                .unwrap();
            copies += 1;
        } else {
            ports[src].send(BROADCAST_MAC, &numbered(i, 100)).unwrap();
            copies += 4;
        }
        if i % 10 == 0 {
            net.advance_by(Duration::from_micros(20));
        }
    }
    let got = drain(&net, &mut ports).len() as u64;
    let s = net.stats();
    assert_eq!(got, s.frames_delivered);
    assert_eq!(
        s.frames_delivered - s.duplicated + s.lost + s.switch_drops,
        copies
    );
    assert_eq!(net.port_stats(4).unwrap().frames_delivered, 0);
}

#[test]
fn without_reordering_a_link_keeps_frame_order() {
    let (net, mut ports) = build(SimConfig {
        faults: Faults {
            loss: 0.1,
            dup: 0.1,
            ..Faults::NONE
        },
        ..perfect(3)
    });
    for i in 0..2000 {
        ports[(i % 2) as usize]
            .send(BROADCAST_MAC, &numbered(i, 300))
            .unwrap();
    }
    let got: Vec<u32> = drain(&net, &mut ports)
        .iter()
        .filter(|r| r.port == 2 && r.src == port_mac(0))
        .map(|r| number(&r.pdu))
        .collect();
    assert!(got.len() > 900);
    assert!(got.windows(2).all(|w| w[0] <= w[1]), "out of order");
}

#[test]
fn frames_due_at_one_instant_reach_their_ports_in_the_order_they_were_forwarded() {
    // Infinitely fast links: every frame below is due at the same instant, the latency.
    let (net, mut ports) = build(SimConfig {
        per_port: vec![
            (
                2,
                Faults {
                    dup: 1.0,
                    ..Faults::NONE
                },
            ),
            (
                4,
                Faults {
                    corrupt: 1.0,
                    ..Faults::NONE
                },
            ),
        ],
        rate_bps: None,
        ..perfect(6)
    });
    let to_3 = ports[3].local_mac();
    ports[1].send(to_3, &numbered(1, 64)).unwrap();
    ports[0].send(BROADCAST_MAC, &numbered(2, 64)).unwrap();
    assert_eq!(net.step(), Some(net.now()));
    assert_eq!(net.elapsed(), Duration::from_micros(5), "one latency");
    assert_eq!(net.next_event(), None, "everything came at that instant");
    // The unicast reached the switch first, then the broadcast went out port by port; port
    // 2's copy and its duplicate, and port 4's damaged copy, take their places among them.
    assert_eq!(net.take_ready(), vec![3, 1, 2, 4, 5]);
    let got = drain(&net, &mut ports);
    let at = |p: usize| -> Vec<u32> {
        got.iter()
            .filter(|r| r.port == p)
            .map(|r| number(&r.pdu))
            .collect()
    };
    assert_eq!(at(1), vec![2]);
    assert_eq!(at(2), vec![2, 2]);
    assert_eq!(at(3), vec![1, 2]);
    assert_eq!(at(4).len(), 1);
    assert_eq!(at(5), vec![2]);
}

#[test]
fn duplication_delivers_a_frame_twice() {
    let (net, mut ports) = build(SimConfig {
        per_port: vec![(
            1,
            Faults {
                dup: 1.0,
                ..Faults::NONE
            },
        )],
        ..perfect(3)
    });
    ports[0].send(BROADCAST_MAC, b"twice at 1").unwrap();
    let got = drain(&net, &mut ports);
    assert_eq!(got.iter().filter(|r| r.port == 1).count(), 2);
    assert_eq!(got.iter().filter(|r| r.port == 2).count(), 1);
    assert!(got.iter().all(|r| carries(r, b"twice at 1")));
    assert_eq!(net.stats().duplicated, 1);
}

#[test]
fn reordering_lets_later_frames_overtake() {
    let (net, mut ports) = build(SimConfig {
        per_port: vec![(
            1,
            Faults {
                reorder: 0.2,
                reorder_delay: Duration::from_millis(1),
                ..Faults::NONE
            },
        )],
        ..perfect(2)
    });
    let dst = ports[1].local_mac();
    for i in 0..1000 {
        ports[0].send(dst, &numbered(i, 100)).unwrap();
    }
    let got: Vec<u32> = drain(&net, &mut ports)
        .iter()
        .map(|r| number(&r.pdu))
        .collect();
    assert_eq!(got.len(), 1000, "reordering loses nothing");
    let inversions = got.windows(2).filter(|w| w[0] > w[1]).count();
    assert!(inversions > 50, "{inversions} inversions");
    let mut sorted = got.clone();
    sorted.sort();
    assert_eq!(sorted, (0..1000).collect::<Vec<_>>());
    assert!(net.stats().reordered > 100);
}

#[test]
fn corruption_flips_one_to_three_bits() {
    let (net, mut ports) = build(SimConfig {
        faults: Faults {
            corrupt: 1.0,
            ..Faults::NONE
        },
        ..perfect(4)
    });
    let sent = numbered(7, 200);
    for _ in 0..50 {
        ports[0].send(BROADCAST_MAC, &sent).unwrap();
    }
    let got = drain(&net, &mut ports);
    assert_eq!(got.len(), 150);
    for r in &got {
        let flipped: u32 = r
            .pdu
            .iter()
            .zip(&sent)
            .map(|(a, b)| (a ^ b).count_ones())
            .sum();
        assert!((1..=3).contains(&flipped), "{flipped} bits flipped");
    }
    assert_eq!(net.stats().corrupted, 150);
}

#[test]
fn faults_strike_each_receiving_port_independently() {
    let (net, mut ports) = build(SimConfig {
        faults: Faults::lossy(0.5),
        ..perfect(3)
    });
    for i in 0..1000 {
        ports[0].send(BROADCAST_MAC, &numbered(i, 64)).unwrap();
    }
    let got = drain(&net, &mut ports);
    let at = |port| -> std::collections::HashSet<u32> {
        got.iter()
            .filter(|r| r.port == port)
            .map(|r| number(&r.pdu))
            .collect()
    };
    let (one, two) = (at(1), at(2));
    assert!(one.difference(&two).count() > 100);
    assert!(two.difference(&one).count() > 100);
    assert!(one.intersection(&two).count() > 100);
}

#[test]
fn a_dead_port_neither_receives_nor_sends() {
    let (net, mut ports) = build(SimConfig {
        per_port: vec![(
            2,
            Faults {
                dead: true,
                ..Faults::NONE
            },
        )],
        ..perfect(4)
    });
    ports[0].send(BROADCAST_MAC, b"from 0").unwrap();
    ports[2].send(BROADCAST_MAC, b"from the dead").unwrap();
    let got = drain(&net, &mut ports);
    assert!(got.iter().all(|r| r.port != 2));
    assert!(got.iter().all(|r| carries(r, b"from 0")));
    assert_eq!(got.len(), 2);
    // One loss at port 2, three for the dead sender's broadcast.
    assert_eq!(net.stats().lost, 4);
    assert!(!net.is_alive(2).unwrap());
}

#[test]
fn kill_drops_queued_and_in_flight_frames_and_revive_restores() {
    let (net, mut ports) = build(perfect(3));
    ports[0].send(BROADCAST_MAC, b"queued").unwrap();
    net.run_until_idle();
    assert_eq!(ports[1].pending(), 1);
    ports[1].send(BROADCAST_MAC, b"in flight").unwrap();
    net.kill(1).unwrap();
    assert_eq!(ports[1].pending(), 0);
    ports[0].send(BROADCAST_MAC, b"while dead").unwrap();
    let got = drain(&net, &mut ports);
    assert!(got.iter().all(|r| r.port != 1 && r.pdu != b"in flight"));
    net.revive(1).unwrap();
    ports[0].send(BROADCAST_MAC, b"back").unwrap();
    let got = drain(&net, &mut ports);
    assert_eq!(got.iter().filter(|r| r.port == 1).count(), 1);
}

#[test]
fn back_to_back_frames_take_their_serialisation_time() {
    let rate = 100_000_000;
    let latency = Duration::from_micros(5);
    let (net, mut ports) = build(SimConfig {
        rate_bps: Some(rate),
        latency,
        ..perfect(2)
    });
    let dst = ports[1].local_mac();
    for i in 0..1000 {
        ports[0].send(dst, &numbered(i, 1500)).unwrap();
    }
    assert!(net.tx_backlog(0).unwrap() > Duration::from_millis(100));
    let got = drain(&net, &mut ports);
    assert_eq!(got.len(), 1000);
    // 1000 frames on the uplink, then latency, then the last one on the downlink.
    let per_frame = 1538.0 * 8.0 / rate as f64;
    let expected = 1001.0 * per_frame + latency.as_secs_f64();
    let took = got.last().unwrap().at_ns as f64 * 1e-9;
    assert!(
        (took / expected - 1.0).abs() < 0.001,
        "{took} s vs {expected} s"
    );
    assert!((took / (1000.0 * per_frame) - 1.0).abs() < 0.01);
    // Arrivals are spaced by exactly one frame time.
    let gap = (got[1].at_ns - got[0].at_ns) as f64 * 1e-9;
    assert!((gap / per_frame - 1.0).abs() < 1e-6);
    assert_eq!(net.stats().bytes_on_wire, 1000 * 1538);
}

#[test]
fn infinitely_fast_links_deliver_after_exactly_the_latency() {
    let (net, mut ports) = build(SimConfig {
        rate_bps: None,
        latency: Duration::from_micros(7),
        ..perfect(3)
    });
    for _ in 0..100 {
        ports[0].send(BROADCAST_MAC, &[1; 1500]).unwrap();
    }
    let got = drain(&net, &mut ports);
    assert_eq!(got.len(), 200);
    assert!(got.iter().all(|r| r.at_ns == 7_000));
}

#[test]
fn short_pdus_are_padded_on_the_wire() {
    assert_eq!(wire_bytes(0), 84);
    assert_eq!(wire_bytes(46), 84);
    assert_eq!(wire_bytes(1500), 1538);
}

#[test]
fn incast_queues_at_the_receiving_port() {
    let (net, mut ports) = build(SimConfig {
        rate_bps: Some(1_000_000_000),
        latency: Duration::ZERO,
        ..perfect(4)
    });
    let dst = ports[0].local_mac();
    for p in &mut ports[1..] {
        for i in 0..100 {
            p.send(dst, &numbered(i, 1500)).unwrap();
        }
    }
    let got = drain(&net, &mut ports);
    assert_eq!(got.len(), 300);
    // Three senders share one output link: it takes 300 frame times, not 100.
    let frame_ns = 12_304;
    let last = got.last().unwrap().at_ns;
    assert!(last >= 300 * frame_ns && last <= 301 * frame_ns, "{last}");
}

#[test]
fn a_bounded_switch_buffer_tail_drops_under_incast() {
    let (net, mut ports) = build(SimConfig {
        rate_bps: Some(1_000_000_000),
        switch_buffer: Some(8),
        ..perfect(4)
    });
    let dst = ports[0].local_mac();
    for p in &mut ports[1..] {
        for i in 0..100 {
            p.send(dst, &numbered(i, 1500)).unwrap();
        }
    }
    let got = drain(&net, &mut ports).len() as u64;
    let s = net.stats();
    assert!(s.switch_drops > 100, "{s:?}");
    assert_eq!(got + s.switch_drops, 300);
    assert_eq!(s.lost, 0);
}

#[test]
fn a_partition_separates_its_sides_until_healed() {
    let (net, mut ports) = build(perfect(4));
    net.partition(&[0, 1], &[2]).unwrap();
    ports[0].send(BROADCAST_MAC, b"split").unwrap();
    let mut got: Vec<usize> = drain(&net, &mut ports).iter().map(|r| r.port).collect();
    got.sort();
    assert_eq!(got, vec![1, 3]);
    net.heal();
    ports[2].send(BROADCAST_MAC, b"whole").unwrap();
    assert_eq!(drain(&net, &mut ports).len(), 3);
}

#[test]
fn virtual_time_starts_at_zero_and_never_goes_back() {
    let (net, mut ports) = build(perfect(2));
    let t0 = net.now();
    assert_eq!(net.elapsed(), Duration::ZERO);
    assert_eq!(net.next_event(), None);
    ports[0].send(BROADCAST_MAC, b"x").unwrap();
    let due = net.next_event().unwrap();
    assert!(due > t0);
    net.advance_to(t0 + Duration::from_secs(1));
    assert_eq!(net.elapsed(), Duration::from_secs(1));
    net.advance_to(t0);
    assert_eq!(net.now(), t0 + Duration::from_secs(1));
    assert_eq!(net.next_event(), None);
    assert_eq!(ports[1].pending(), 1);
}

#[test]
fn recv_callbacks_may_call_back_into_the_simulator() {
    let (net, mut ports) = build(perfect(3));
    ports[0].send(BROADCAST_MAC, b"ping").unwrap();
    net.run_until_idle();
    let mut echo = ports[1].clone();
    let n = ports[1]
        .recv(None, &mut |src, _| {
            echo.send(src, b"pong").unwrap();
            net.advance_by(Duration::from_millis(1));
        })
        .unwrap();
    assert_eq!(n, 1);
    let got = drain(&net, &mut ports);
    assert_eq!(got.len(), 2, "{got:?}"); // ping at 2 (queued earlier), pong at 0
    assert!(got.iter().any(|r| r.port == 0 && carries(r, b"pong")));
}

#[test]
fn bad_configuration_is_a_typed_error() {
    let bad = |cfg: SimConfig| SimNet::new(cfg).unwrap_err();
    assert_eq!(
        bad(SimConfig {
            rate_bps: Some(0),
            ..perfect(2)
        }),
        SimError::ZeroRate
    );
    assert_eq!(
        bad(perfect(MAX_PORTS + 1)),
        SimError::TooManyPorts(MAX_PORTS + 1)
    );
    assert!(matches!(
        bad(SimConfig {
            faults: Faults::lossy(1.5),
            ..perfect(2)
        }),
        SimError::BadProbability { field: "loss", .. }
    ));
    assert!(matches!(
        bad(SimConfig {
            faults: Faults::lossy(f64::NAN),
            ..perfect(2)
        }),
        SimError::BadProbability { .. }
    ));
    assert_eq!(
        bad(SimConfig {
            per_port: vec![(5, Faults::NONE)],
            ..perfect(2)
        }),
        SimError::NoSuchPort { port: 5, ports: 2 }
    );
    let net = SimNet::new(perfect(2)).unwrap();
    assert!(net.port(2).is_err());
    assert!(net.kill(9).is_err());
    assert!(net.partition(&[0], &[3]).is_err());
    assert_eq!(
        net.set_faults(
            0,
            Faults {
                burst_len: 0.5,
                ..Faults::NONE
            }
        ),
        Err(SimError::BadBurstLen(0.5))
    );
}

mod properties;

/// A port that keeps the frames its host read (`Link::retain`) holds room for what it keeps
/// and a batch's worth, not twice that: the queue of every port of a simulated group of
/// thousands is memory the group's size multiplies.
#[test]
fn a_port_keeping_frames_holds_room_for_what_it_keeps_and_a_batch() {
    let (net, mut ports) = build(perfect(2));
    let (keep, batch) = (64, 3);
    assert_eq!(ports[1].retain(keep), keep);
    let mut got = 0;
    for b in 0..100u32 {
        for i in 0..batch {
            ports[0]
                .send(BROADCAST_MAC, &numbered(b * batch + i, 60))
                .unwrap();
        }
        net.run_until_idle();
        got += ports[1]
            .recv_ready_held(&mut |_, _| {}, &mut |_| {})
            .unwrap();
    }
    assert_eq!(got, 300);
    let held = &net.inner.borrow().ports[1].host.held;
    assert_eq!(held.len(), keep);
    assert!(
        held.capacity() <= keep + batch as usize + keep / HELD_MARGIN,
        "room for {} frames",
        held.capacity()
    );
}

/// A port that keeps the frames its host read lets go, when pruned, every frame in which
/// none of the host's addresses lies, and keeps the others in the order they came: those
/// its host reads later (found where they were, by any address inside them) stay, and they
/// still leave oldest first once more than it retains have come.
#[test]
fn a_pruned_port_keeps_only_the_frames_its_host_still_reads_in_their_order() {
    let (net, mut ports) = build(perfect(2));
    let keep = 8;
    assert_eq!(ports[1].retain(keep), keep);
    for i in 0..6 {
        ports[0].send(BROADCAST_MAC, &numbered(i, 60)).unwrap();
    }
    net.run_until_idle();
    // The host notes an address inside frames 1 and 4 (not their first byte).
    let mut noted = Vec::new();
    let mut payloads = Vec::new();
    ports[1]
        .recv_ready_held(
            &mut |_, pdu| {
                payloads.push(pdu.to_vec());
                if [1, 4].contains(&(payloads.len() - 1)) {
                    noted.push((pdu.as_ptr() as usize + 10, pdu[10..20].to_vec()));
                }
            },
            &mut |_| {},
        )
        .unwrap();
    assert_eq!(payloads.len(), 6);
    assert!(ports[1].wants_prune(), "never pruned: due at once");
    let mut refs: Vec<usize> = noted.iter().map(|&(at, _)| at).collect();
    refs.sort_unstable();
    ports[1].prune_held(&refs);
    assert!(!ports[1].wants_prune(), "pruned just now");
    assert_eq!(net.inner.borrow().ports[1].host.held.len(), 2);
    ports[1].with_held(&mut |end| {
        for (at, bytes) in &noted {
            assert_eq!(
                end.held.find(*at, 10),
                Some(&bytes[..]),
                "kept where it was"
            );
        }
    });
    // Seven more frames: nine held, one more than it retains; the oldest kept one (frame
    // 1) leaves first.
    for i in 6..13 {
        ports[0].send(BROADCAST_MAC, &numbered(i, 60)).unwrap();
    }
    net.run_until_idle();
    let (first, second) = (noted[0].clone(), noted[1].clone());
    ports[1]
        .recv_ready_held(&mut |_, _| {}, &mut |end| {
            assert_eq!(end.leaving.find(first.0, 10), Some(&first.1[..]));
            assert_eq!(end.leaving.find(second.0, 10), None, "frame 4 stays");
            assert_eq!(end.held.find(second.0, 10), Some(&second.1[..]));
        })
        .unwrap();
    assert_eq!(net.inner.borrow().ports[1].host.held.len(), keep);
}
