//! The simulated switch under random operations and faults, and under load: what it counts is
//! what its ports receive.

use super::*;

#[derive(Debug, Clone)]
enum Op {
    Send { port: usize, dst: u8, len: usize },
    Advance(u64),
    Step,
    Recv(usize),
    SetFaults(usize, Faults),
    Kill(usize),
    Revive(usize),
    Partition(Vec<usize>, Vec<usize>),
    Heal,
}

fn any_prob() -> impl Strategy<Value = f64> {
    prop_oneof![Just(0.0), Just(1.0), 0.0..=1.0, -1.0..2.0, Just(f64::NAN)]
}

fn any_faults() -> impl Strategy<Value = Faults> {
    (
        (any_prob(), any_prob(), -1.0..10.0f64, any_prob()),
        (
            any_prob(),
            0u64..10_000_000,
            any_prob(),
            any::<bool>(),
            any_prob(),
            any_prob(),
        ),
    )
        .prop_map(
            |(
                (loss, burst_loss, burst_len, dup),
                (reorder, d, corrupt, dead, tx_loss, group_loss),
            )| Faults {
                loss,
                burst_loss,
                burst_len,
                dup,
                reorder,
                reorder_delay: Duration::from_nanos(d),
                corrupt,
                dead,
                group_loss,
                tx_loss,
            },
        )
}

fn any_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..8usize, any::<u8>(), 0..2000usize)
            .prop_map(|(port, dst, len)| Op::Send { port, dst, len }),
        2 => (0..2_000_000u64).prop_map(Op::Advance),
        2 => Just(Op::Step),
        2 => (0..8usize).prop_map(Op::Recv),
        1 => (0..8usize, any_faults()).prop_map(|(p, f)| Op::SetFaults(p, f)),
        1 => (0..8usize).prop_map(Op::Kill),
        1 => (0..8usize).prop_map(Op::Revive),
        1 => (proptest::collection::vec(0..8usize, 0..4), proptest::collection::vec(0..8usize, 0..4))
            .prop_map(|(a, b)| Op::Partition(a, b)),
        1 => Just(Op::Heal),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn random_operations_never_panic(
        ports in 0..6usize,
        rate in prop_oneof![Just(None), Just(Some(0)), (1u64..10_000_000_000).prop_map(Some)],
        buffer in proptest::option::of(0..20usize),
        seed in any::<u64>(),
        ops in proptest::collection::vec(any_op(), 0..120),
    ) {
        let cfg = SimConfig {
            ports,
            rate_bps: rate,
            switch_buffer: buffer,
            seed,
            mtu: 1500,
            ..SimConfig::default()
        };
        let Ok(net) = SimNet::new(cfg) else { return Ok(()) };
        let mut last = net.now();
        for op in ops {
            match op {
                Op::Send { port, dst, len } => {
                    let Ok(mut p) = net.port(port) else { continue };
                    let mac = match dst % 4 {
                        0 => BROADCAST_MAC,
                        1 => port_mac(u16::from(dst % 8)),
                        2 => MacAddr([dst; 6]),
                        _ => MacAddr([0x02, 0, 0, 0, 0, dst]),
                    };
                    let r = p.send(mac, &vec![dst; len]);
                    prop_assert_eq!(r.is_err(), len > 1500);
                }
                Op::Advance(ns) => { net.advance_by(Duration::from_nanos(ns)); }
                Op::Step => { net.step(); }
                Op::Recv(port) => {
                    let Ok(mut p) = net.port(port) else { continue };
                    p.recv(Some(Duration::from_secs(1)), &mut |_, pdu| assert!(pdu.len() <= 1500))
                        .unwrap();
                }
                Op::SetFaults(port, f) => { let _ = net.set_faults(port, f); }
                Op::Kill(port) => { let _ = net.kill(port); }
                Op::Revive(port) => { let _ = net.revive(port); }
                Op::Partition(a, b) => { let _ = net.partition(&a, &b); }
                Op::Heal => net.heal(),
            }
            prop_assert!(net.now() >= last);
            last = net.now();
        }
        net.run_until_idle();
        prop_assert_eq!(net.next_event(), None);
        let s = net.stats();
        prop_assert!(s.frames_delivered <= s.frames_sent * (ports as u64) * 2);
    }
}

/// Sends `frames` 1400-byte broadcasts round-robin from 16 ports, advancing the clock by
/// `per_64` every 64 frames, and returns (wall seconds, deliveries, virtual time).
fn broadcast_workload(frames: u32, per_64: Duration) -> (f64, usize, Duration) {
    let (net, mut ports) = build(SimConfig {
        rate_bps: Some(1_000_000_000),
        faults: Faults::lossy(0.01),
        ..perfect(16)
    });
    let pdu = vec![0x5A; 1400];
    let start = Instant::now();
    let mut received = 0usize;
    for i in 0..frames {
        ports[(i % 16) as usize].send(BROADCAST_MAC, &pdu).unwrap();
        if i % 64 == 63 {
            net.advance_by(per_64);
            for p in &mut ports {
                received += p
                    .recv(None, &mut |_, pdu| assert_eq!(pdu.len(), 1400))
                    .unwrap();
            }
        }
    }
    net.run_until_idle();
    for p in &mut ports {
        received += p.recv(None, &mut |_, _| {}).unwrap();
    }
    assert_eq!(received as u64, net.stats().frames_delivered);
    (start.elapsed().as_secs_f64(), received, net.elapsed())
}

/// A switch of 16 ports, every frame a broadcast, offered at 90 % of line rate (every output
/// port busy) and at 10x overload (queues grow without bound): every port receives exactly
/// the deliveries the switch counts, every frame whole. Also prints the simulator's own
/// wall-clock speed (`-- --nocapture`); the speed is measured, never asserted.
#[test]
fn a_busy_switch_delivers_exactly_what_it_counts() {
    let frames = 20_000u32;
    // One 1400-byte frame takes 11.52 us at 1 Gbit/s; each output port gets 15/16 of all.
    for (load, per_64) in [("90% load", 770), ("overload", 70)] {
        let (secs, received, virt) = broadcast_workload(frames, Duration::from_micros(per_64));
        println!(
            "sim throughput, 16 ports, {load}: {:.0} broadcast frames/s sent, {:.0} \
             deliveries/s ({frames} frames, {received} deliveries in {secs:.3} s wall, \
             {virt:?} virtual)",
            f64::from(frames) / secs,
            received as f64 / secs,
        );
    }
}

#[test]
fn a_port_that_loses_group_frames_still_gets_unicast() {
    let (net, mut ports) = build(SimConfig {
        per_port: vec![(
            1,
            Faults {
                group_loss: 1.0,
                ..Faults::NONE
            },
        )],
        ..perfect(3)
    });
    ports[0].send(BROADCAST_MAC, b"to all").unwrap();
    ports[0].send(port_mac(1), b"to one").unwrap();
    let got = drain(&net, &mut ports);
    let at1: Vec<&Rx> = got.iter().filter(|r| r.port == 1).collect();
    assert_eq!(at1.len(), 1, "{got:?}");
    assert!(carries(at1[0], b"to one"));
    assert_eq!(got.iter().filter(|r| r.port == 2).count(), 1);
    assert_eq!(net.stats().lost, 1);
}

#[test]
fn ready_ports_name_each_port_whose_queue_filled_once_and_only_those() {
    let (net, mut ports) = build(perfect(6));
    assert!(net.take_ready().is_empty());
    ports[4].send(port_mac(2), b"one").unwrap();
    ports[4].send(port_mac(2), b"two").unwrap();
    ports[1].send(port_mac(3), b"three").unwrap();
    net.run_until_idle();
    let mut ready = net.take_ready();
    ready.sort_unstable();
    assert_eq!(
        ready,
        vec![2, 3],
        "each port once, however many frames it got"
    );
    assert!(net.take_ready().is_empty(), "the list starts again");
    for p in &mut ports {
        p.recv(None, &mut |_, _| {}).unwrap();
    }
    // A broadcast lists every other port; a dead port receives nothing, so it is never ready.
    net.kill(5).unwrap();
    ports[0].send(BROADCAST_MAC, b"all").unwrap();
    net.run_until_idle();
    // Taken into a list of the caller's: what it held before is gone.
    let mut ready = vec![9, 9];
    net.take_ready_into(&mut ready);
    ready.sort_unstable();
    assert_eq!(ready, vec![1, 2, 3, 4]);
    net.take_ready_into(&mut ready);
    assert!(ready.is_empty(), "the list starts again");
}

#[test]
fn a_host_whose_transmit_queue_is_full_is_told_so_and_woken_when_it_drains() {
    // 100 Mbit/s: a 1000-byte frame takes about 82 us; the queue holds two of the largest.
    let (net, mut ports) = build(SimConfig {
        rate_bps: Some(100_000_000),
        tx_queue: Some(2),
        ..perfect(3)
    });
    let mut sent = 0;
    while ports[0].tx_ready() {
        ports[0].send(port_mac(1), &numbered(sent, 1000)).unwrap();
        sent += 1;
        assert!(sent < 10, "the queue is bounded");
    }
    assert!(sent >= 2, "it took {sent} frames");
    assert!(!ports[0].tx_ready(), "asked again: still full");
    // Nothing arrives at port 0, yet it is woken once its queue has drained.
    let mut woken = false;
    while let Some(t) = net.next_event() {
        net.advance_to(t);
        if net.take_ready().contains(&0) {
            woken = true;
            break;
        }
    }
    assert!(woken, "port 0 was never woken");
    assert!(ports[0].tx_ready());
    // Without a bound the link takes everything.
    let (_, unbounded) = build(perfect(2));
    assert!(unbounded[0].tx_ready());
}

#[test]
fn a_group_frame_reaches_only_the_ports_that_joined_but_occupies_every_link() {
    let (net, mut ports) = build(SimConfig {
        rate_bps: Some(100_000_000),
        ..perfect(5)
    });
    let g = group_mac(0xA1);
    for p in [1, 3, 0] {
        ports[p].join_group(g).unwrap();
    }
    ports[3].join_group(g).unwrap(); // twice is once
    ports[0].send(g, &numbered(1, 1000)).unwrap();
    // Right behind it, a frame from another host to port 4 (which did not join): it waits on
    // port 4's link while the group frame, which port 4's NIC discards, passes.
    ports[2].send(port_mac(4), &numbered(2, 1000)).unwrap();
    let got = drain(&net, &mut ports);
    let mut receivers: Vec<usize> = got
        .iter()
        .filter(|r| number(&r.pdu) == 1)
        .map(|r| r.port)
        .collect();
    receivers.sort_unstable();
    assert_eq!(receivers, vec![1, 3], "the members but the sender");
    assert_eq!(net.port_stats(2).unwrap().filtered, 1);
    assert_eq!(net.port_stats(4).unwrap().filtered, 1);
    assert_eq!(net.stats().filtered, 2);
    let at = |port: usize, n: u32| {
        got.iter()
            .find(|r| r.port == port && number(&r.pdu) == n)
            .unwrap()
            .at_ns
    };
    let frame_ns = (1038u64 * 8 * 1_000_000_000).div_ceil(100_000_000);
    assert_eq!(
        at(4, 2),
        at(1, 1) + frame_ns,
        "port 4's link carried the group frame first"
    );
    // After leaving, nothing more; a station address is not a group.
    ports[3].leave_group(g).unwrap();
    ports[0].send(g, b"again").unwrap();
    let got = drain(&net, &mut ports);
    assert_eq!(got.iter().map(|r| r.port).collect::<Vec<_>>(), vec![1]);
    assert!(matches!(
        ports[1].join_group(port_mac(2)),
        Err(LinkError::NotGroupAddress(_))
    ));
    // Lost everywhere it was meant for when the sender is dead: at the members only.
    net.kill(0).unwrap();
    ports[0].send(g, b"from the dead").unwrap();
    net.run_until_idle();
    assert_eq!(net.port_stats(1).unwrap().lost, 1);
    assert_eq!(net.port_stats(4).unwrap().lost, 0);
}

#[test]
fn two_groups_on_one_switch_never_see_each_others_frames() {
    let (net, mut ports) = build(perfect(6));
    let (a, b) = (group_mac(1), group_mac(2));
    for (i, p) in ports.iter_mut().enumerate() {
        p.join_group(if i < 3 { a } else { b }).unwrap();
    }
    for i in 0..10 {
        ports[0].send(a, &numbered(i, 100)).unwrap();
        ports[3].send(b, &numbered(100 + i, 100)).unwrap();
    }
    let got = drain(&net, &mut ports);
    assert_eq!(got.len(), 40);
    for r in &got {
        let in_a = r.port < 3;
        assert_eq!(number(&r.pdu) < 100, in_a, "{r:?}");
    }
    assert_eq!(
        net.stats().filtered,
        60,
        "each frame reached the other group's 3 ports"
    );
}
