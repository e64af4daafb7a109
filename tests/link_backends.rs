//! The raw-Ethernet backends (ring, socket, pnet, xdp) over a veth pair in a private network
//! namespace: the same behaviour is required of each.
//!
//! Needs root (network namespaces, `CAP_NET_RAW`). Without it every test prints
//! `SKIPPED: ...` and passes, unless `ETHBCAST_REQUIRE_NETNS=1`, which turns that into a
//! failure.
#![cfg(target_os = "linux")]

#[path = "../sys/tests/common/netns.rs"]
mod netns;

use ethbcast::{group_mac, Backend, Link, LinkError, MacAddr, Transmit, WaitMode, BROADCAST_MAC};
use ethbcast::{PnetConfig, PnetLink};
use ethbcast::{RingConfig, RingLink, RingLinkConfig, TxMode};
use ethbcast::{SocketConfig, SocketLink};
use ethbcast::{XdpLink, XdpLinkConfig};
use ethbcast_sys::socket::{write_eth_header, PacketSocket, SocketOptions};
use ethbcast_sys::wait::{poll_fd, Interest};
use netns::{NetnsPair, END_A, END_B};
use std::process::Command;
use std::time::{Duration, Instant};

type Opener = fn(&str) -> Result<Box<dyn Link>, LinkError>;

fn open_ring(i: &str) -> Result<Box<dyn Link>, LinkError> {
    Ok(Box::new(RingLink::open(i, &RingLinkConfig::default())?))
}
fn open_ring_mmsg(i: &str) -> Result<Box<dyn Link>, LinkError> {
    let cfg = RingLinkConfig {
        tx_mode: TxMode::Batch,
        ..Default::default()
    };
    Ok(Box::new(RingLink::open(i, &cfg)?))
}
fn open_socket(i: &str) -> Result<Box<dyn Link>, LinkError> {
    Ok(Box::new(SocketLink::open(i, &SocketConfig::default())?))
}
fn open_pnet(i: &str) -> Result<Box<dyn Link>, LinkError> {
    Ok(Box::new(PnetLink::open(i, &PnetConfig::default())?))
}
fn open_xdp(i: &str) -> Result<Box<dyn Link>, LinkError> {
    Ok(Box::new(XdpLink::open(i, &XdpLinkConfig::default())?))
}

const BACKENDS: [(&str, Opener); 5] = [
    ("ring", open_ring),
    ("ring-mmsg", open_ring_mmsg),
    ("socket", open_socket),
    ("pnet", open_pnet),
    ("xdp", open_xdp),
];

/// Receives until `want` frames arrived or `timeout` passed.
fn recv_n(link: &mut dyn Link, want: usize, timeout: Duration) -> Vec<(MacAddr, Vec<u8>)> {
    let mut got = Vec::new();
    let deadline = Instant::now() + timeout;
    while got.len() < want {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        link.recv(Some(left), &mut |src, pdu| got.push((src, pdu.to_vec())))
            .unwrap();
    }
    got
}

/// Whether `link`'s readiness descriptor polls readable within `ms` (`None`: it has none).
fn readable(link: &dyn Link, ms: u64) -> Option<bool> {
    let fd = link.readiness_fd()?;
    Some(poll_fd(fd, Interest::Read, Some(Duration::from_millis(ms))).expect("poll"))
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

/// Round `round` of `n` frames of `len` bytes to `to`, numbered on from the rounds before
/// (frame `round * n + k` is `pattern(len, that)`), sent as one flush.
fn send_round(link: &mut dyn Link, to: MacAddr, len: usize, round: u8, n: u8) {
    for k in 0..n {
        link.send(to, &pattern(len, round.wrapping_mul(n).wrapping_add(k)))
            .unwrap();
    }
    link.flush().unwrap();
}

fn exercise(name: &str, open: Opener) {
    let Some(ns) = NetnsPair::create_or_skip(&format!("lb-{name}")) else {
        return;
    };
    ns.run(|| {
        let mut a = open(END_A).unwrap_or_else(|e| panic!("{name}: open {END_A}: {e}"));
        let mut b = open(END_B).unwrap_or_else(|e| panic!("{name}: open {END_B}: {e}"));
        assert_eq!(a.max_pdu(), 1500, "{name}");
        assert_ne!(a.local_mac(), b.local_mac());

        // Broadcast, several sizes up to the MTU: byte-identical, in order, with the source.
        let sent: Vec<Vec<u8>> = [46, 100, 777, 1500]
            .iter()
            .enumerate()
            .map(|(i, &l)| pattern(l, i as u8))
            .collect();
        // The readiness descriptor (a thread serving the link while its owner is away sleeps
        // on it) is readable exactly while frames wait; pnet has none.
        let has_fd = name != "pnet";
        let ready = if has_fd { Some(false) } else { None };
        assert_eq!(readable(&*b, 0), ready, "{name}: readable before any frame");
        for p in &sent {
            a.send(BROADCAST_MAC, p).unwrap();
        }
        a.flush().unwrap();
        let ready = if has_fd { Some(true) } else { None };
        assert_eq!(
            readable(&*b, 1000),
            ready,
            "{name}: not readable with frames waiting"
        );
        let got = recv_n(&mut *b, sent.len(), Duration::from_secs(2));
        let ready = if has_fd { Some(false) } else { None };
        assert_eq!(
            readable(&*b, 0),
            ready,
            "{name}: readable after every frame was taken"
        );
        assert_eq!(got.len(), sent.len(), "{name}: broadcast frames lost");
        for ((src, pdu), p) in got.iter().zip(&sent) {
            assert_eq!(*src, a.local_mac(), "{name}");
            assert!(
                pdu == p,
                "{name}: broadcast PDU of {} bytes differs",
                p.len()
            );
        }
        // Our own broadcasts are not delivered back to us.
        let echo = recv_n(&mut *a, 1, Duration::from_millis(100));
        assert!(
            echo.is_empty(),
            "{name}: own frames looped back: {}",
            echo.len()
        );

        // Unicast the other way.
        let p = pattern(300, 9);
        b.send(a.local_mac(), &p).unwrap();
        b.flush().unwrap();
        let got = recv_n(&mut *a, 1, Duration::from_secs(2));
        assert_eq!(got, vec![(b.local_mac(), p)], "{name}: unicast");

        // A frame of another EtherType is not delivered; the next ethbcast frame is.
        let idx = ethbcast_sys::iface::Interface::lookup(END_A).unwrap().index;
        let foreign = PacketSocket::open(idx, 0x88B6, &SocketOptions::default()).unwrap();
        let mut f = vec![0x42u8; 100];
        write_eth_header(&mut f, &BROADCAST_MAC, &a.local_mac(), 0x88B6);
        assert!(foreign.send(&f).unwrap());
        let marker = pattern(64, 0x77);
        a.send(BROADCAST_MAC, &marker).unwrap();
        a.flush().unwrap();
        let got = recv_n(&mut *b, 2, Duration::from_millis(300));
        assert_eq!(got.len(), 1, "{name}: foreign EtherType delivered");
        assert_eq!(got[0].1, marker);

        // A short PDU arrives padded to the Ethernet minimum (46 bytes), padding zeroed.
        a.send(b.local_mac(), b"short").unwrap();
        a.flush().unwrap();
        let got = recv_n(&mut *b, 1, Duration::from_secs(2));
        assert_eq!(got.len(), 1, "{name}: short frame lost");
        let pdu = &got[0].1;
        assert_eq!(pdu.len(), 46, "{name}");
        assert_eq!(&pdu[..5], b"short");
        assert!(pdu[5..].iter().all(|&x| x == 0), "{name}: padding not zero");

        // Frames written in place (`send_with`, what the driver uses): whole, and a short
        // one written where a long one was (more frames than the TX ring has slots) leaves
        // padded with zeros, not with the long frame's bytes.
        let n = 300;
        for len in [1500, 5] {
            for k in 0..n {
                let p = pattern(len, k as u8);
                let t = Transmit {
                    dst: b.local_mac(),
                    len,
                };
                let mut scratch = vec![0u8; a.max_pdu()];
                let sent = a
                    .send_with(&mut scratch, &mut |out| {
                        out[..len].copy_from_slice(&p);
                        Some(t)
                    })
                    .unwrap();
                assert!(sent, "{name}");
            }
            a.flush().unwrap();
            let got = recv_n(&mut *b, n, Duration::from_secs(5));
            assert_eq!(got.len(), n, "{name}: frames of {len} bytes lost");
            for (k, (src, pdu)) in got.iter().enumerate() {
                assert_eq!(*src, a.local_mac(), "{name}");
                assert_eq!(pdu.len(), len.max(46), "{name}: frame {k} of {len} bytes");
                assert!(
                    pdu[..len] == pattern(len, k as u8),
                    "{name}: frame {k} differs"
                );
                assert!(
                    pdu[len..].iter().all(|&x| x == 0),
                    "{name}: frame {k}'s padding holds an earlier frame's bytes"
                );
            }
        }
        // A fill with nothing to send sends nothing; one longer than the link's PDU is an error.
        let mut scratch = vec![0u8; a.max_pdu()];
        assert!(!a.send_with(&mut scratch, &mut |_| None).unwrap(), "{name}");
        let too_long = a.send_with(&mut scratch, &mut |_| {
            Some(Transmit {
                dst: b.local_mac(),
                len: 1501,
            })
        });
        assert!(
            matches!(too_long, Err(LinkError::FrameTooLong { len: 1501, .. })),
            "{name}: {too_long:?}"
        );
        a.flush().unwrap();
        let got = recv_n(&mut *b, 1, Duration::from_millis(200));
        assert!(got.is_empty(), "{name}: a frame left that no fill wrote");

        // Too long is an error, not a panic, and the link stays usable.
        assert!(matches!(
            a.send(BROADCAST_MAC, &vec![0; 1501]),
            Err(LinkError::FrameTooLong {
                len: 1501,
                max: 1500
            })
        ));
        // Non-blocking receive with nothing pending returns 0 at once.
        let t = Instant::now();
        assert_eq!(b.recv(None, &mut |_, _| {}).unwrap(), 0);
        assert!(t.elapsed() < Duration::from_millis(50));
    });
}

#[test]
fn ring_backend_over_veth() {
    exercise(BACKENDS[0].0, BACKENDS[0].1);
}

#[test]
fn ring_backend_with_sendmmsg_over_veth() {
    exercise(BACKENDS[1].0, BACKENDS[1].1);
}

#[test]
fn socket_backend_over_veth() {
    exercise(BACKENDS[2].0, BACKENDS[2].1);
}

#[test]
fn pnet_backend_over_veth() {
    exercise(BACKENDS[3].0, BACKENDS[3].1);
}

#[test]
fn xdp_backend_over_veth() {
    exercise(BACKENDS[4].0, BACKENDS[4].1);
}

/// Bursts larger than the TX ring and the sendmmsg batch arrive complete and in order.
#[test]
fn bursts_larger_than_the_queues_arrive_in_order() {
    let Some(ns) = NetnsPair::create_or_skip("lb-burst") else {
        return;
    };
    ns.run(|| {
        for (name, open) in BACKENDS {
            let mut a = open(END_A).unwrap();
            let mut b = open(END_B).unwrap();
            let n = 700u32;
            for i in 0..n {
                let mut p = pattern(64 + (i as usize % 900), i as u8);
                p[..4].copy_from_slice(&i.to_be_bytes());
                a.send(b.local_mac(), &p).unwrap();
                // Keep the receiver's queue from overflowing: this checks ordering and
                // completeness, not loss under overload.
                if i % 100 == 99 {
                    a.flush().unwrap();
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            a.flush().unwrap();
            let got = recv_n(&mut *b, n as usize, Duration::from_secs(5));
            assert_eq!(got.len(), n as usize, "{name}: frames lost");
            for (i, (_, p)) in got.iter().enumerate() {
                assert_eq!(p[..4], (i as u32).to_be_bytes(), "{name}: out of order");
            }
        }
    });
}

fn set_mtu(ns: &NetnsPair, mtu: u32) {
    for dev in [END_A, END_B] {
        let ok = Command::new("ip")
            .args(["-n", &ns.name, "link", "set", dev, "mtu", &mtu.to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "cannot set MTU {mtu} on {dev}");
    }
}

#[test]
fn an_mtu_below_576_is_refused_by_every_backend() {
    let Some(ns) = NetnsPair::create_or_skip("lb-mtu") else {
        return;
    };
    set_mtu(&ns, 500);
    ns.run(|| {
        for (name, open) in BACKENDS {
            match open(END_A) {
                Err(LinkError::MtuTooSmall {
                    mtu: 500,
                    need: 576,
                }) => {}
                Err(e) => panic!("{name}: expected MtuTooSmall, got {e}"),
                Ok(_) => panic!("{name}: accepted MTU 500"),
            }
        }
        assert!(
            matches!(
                ethbcast::probe_link(END_A),
                Err(LinkError::MtuTooSmall {
                    mtu: 500,
                    need: 576
                })
            ),
            "the probe accepted MTU 500"
        );
    });
}

/// An explicit configuration is taken as given, and its slots must hold the MTU's frames;
/// what users open (`link::open`, as `Group`, `Stream` and the tools do) sizes the ring's
/// slots for the interface itself, so the default backend opens on jumbo frames too.
#[test]
fn jumbo_frames_need_large_ring_slots_and_then_work() {
    let Some(ns) = NetnsPair::create_or_skip("lb-jumbo") else {
        return;
    };
    set_mtu(&ns, 9000);
    ns.run(|| {
        assert!(matches!(
            RingLink::open(END_A, &RingLinkConfig::default()),
            Err(LinkError::RingSetup(_))
        ));
        let (mut a, mut b) = small_ring_and_socket(16384);
        assert_eq!(a.max_pdu(), 9000);
        assert_eq!(b.max_pdu(), 9000);
        arrives_whole(&mut *a, &mut *b, BROADCAST_MAC, 3);
        let to_a = a.local_mac();
        arrives_whole(&mut *b, &mut *a, to_a, 3);
        drop((a, b));
        let mut a = ethbcast::open_link(Backend::Ring, END_A, WaitMode::Block).unwrap();
        let mut b = ethbcast::open_link(Backend::Ring, END_B, WaitMode::Block).unwrap();
        assert_eq!(a.max_pdu(), 9000);
        arrives_whole(&mut *a, &mut *b, BROADCAST_MAC, 5);
    });
}

/// A ring link on end A with 64 slots of `frame_size` bytes each way, and a socket link on
/// end B.
fn small_ring_and_socket(frame_size: usize) -> (Box<dyn Link>, Box<dyn Link>) {
    let slots = RingConfig {
        block_size: 1 << 16,
        frame_size,
        frame_count: 64,
    };
    let cfg = RingLinkConfig {
        rx: slots,
        tx: slots,
        ..Default::default()
    };
    (
        Box::new(RingLink::open(END_A, &cfg).unwrap()),
        Box::new(SocketLink::open(END_B, &SocketConfig::default()).unwrap()),
    )
}

/// Sends a PDU of the whole MTU from `from` to `dst` and checks that `to` gets it, neither cut
/// nor changed.
fn arrives_whole(from: &mut dyn Link, to: &mut dyn Link, dst: MacAddr, salt: u8) {
    let big = pattern(from.max_pdu(), salt);
    from.send(dst, &big).unwrap();
    from.flush().unwrap();
    let got = recv_n(to, 1, Duration::from_secs(2));
    assert_eq!(got.len(), 1);
    assert!(got[0].1 == big, "the frame arrived cut or changed");
}

/// The backends can be moved to the thread that drives them.
#[test]
fn backends_are_send() {
    fn send<T: Send>() {}
    send::<RingLink>();
    send::<SocketLink>();
    send::<PnetLink>();
    send::<XdpLink>();
}

#[test]
fn a_missing_interface_is_named_by_every_backend() {
    for (name, open) in BACKENDS {
        match open("ebnope0") {
            Err(LinkError::NoSuchInterface(n)) => assert_eq!(n, "ebnope0", "{name}"),
            Err(e) => panic!("{name}: expected NoSuchInterface, got {e}"),
            Ok(_) => panic!("{name}: opened a missing interface"),
        }
    }
    match ethbcast::probe_link("ebnope0") {
        Err(LinkError::NoSuchInterface(n)) => assert_eq!(n, "ebnope0", "probe"),
        other => panic!("probe: expected NoSuchInterface, got {other:?}"),
    }
}

/// The probe (what the C ABI's `ethbcast_probe` and the MPI interposer ask of every rank
/// before joining) says yes for a present, usable interface, and a link opened afterwards
/// works as if it had not run.
#[test]
fn the_probe_accepts_a_usable_interface_and_leaves_it_as_it_was() {
    let Some(ns) = NetnsPair::create_or_skip("lb-probe") else {
        return;
    };
    ns.run(|| {
        ethbcast::probe_link(END_A).unwrap();
        ethbcast::probe_link(END_B).unwrap();
        let mut a = open_ring(END_A).unwrap();
        let mut b = open_ring(END_B).unwrap();
        // A probe while the links are open takes none of their frames.
        ethbcast::probe_link(END_B).unwrap();
        let p = pattern(200, 7);
        a.send(b.local_mac(), &p).unwrap();
        a.flush().unwrap();
        let got = recv_n(&mut *b, 1, Duration::from_secs(2));
        assert_eq!(got.len(), 1);
        assert!(
            got[0].1 == p,
            "the frame after the probe arrived cut or changed"
        );
    });
}

#[test]
fn ring_sizes_too_small_for_the_mtu_are_refused() {
    let Some(ns) = NetnsPair::create_or_skip("lb-ringcfg") else {
        return;
    };
    ns.run(|| {
        let mut cfg = RingLinkConfig::default();
        cfg.rx.frame_size = 1024;
        cfg.rx.frame_count = 1024;
        match RingLink::open(END_A, &cfg) {
            Err(LinkError::RingSetup(m)) => assert!(m.contains("frame size"), "{m}"),
            other => panic!("expected RingSetup, got {other:?}"),
        }
        let mut cfg = RingLinkConfig::default();
        cfg.tx.frame_count = 3;
        assert!(matches!(
            RingLink::open(END_A, &cfg),
            Err(LinkError::RingSetup(_))
        ));
    });
}

/// Re-runs this test binary without any capability (`setpriv --bounding-set=-all`) inside the
/// namespace; the child checks that every backend explains the missing CAP_NET_RAW.
#[test]
fn without_cap_net_raw_every_backend_says_so() {
    if std::env::var("EBSYS_NOCAP_CHILD").is_ok() {
        for (name, open) in BACKENDS {
            match open(END_A) {
                Err(e @ (LinkError::PermissionDenied | LinkError::XdpPermissionDenied)) => {
                    assert!(e.to_string().contains("CAP_NET_RAW"), "{name}")
                }
                Err(e) => panic!("{name}: expected PermissionDenied, got {e}"),
                Ok(_) => panic!("{name}: opened a raw socket without CAP_NET_RAW"),
            }
        }
        match ethbcast::probe_link(END_A) {
            Err(e @ LinkError::PermissionDenied) => {
                assert!(e.to_string().contains("CAP_NET_RAW"), "probe")
            }
            other => panic!("probe: expected PermissionDenied, got {other:?}"),
        }
        return;
    }
    let Some(ns) = NetnsPair::create_or_skip("lb-nocap") else {
        return;
    };
    let exe = std::env::current_exe().unwrap();
    let out = ns.run(|| {
        Command::new("setpriv")
            .args(["--bounding-set=-all", "--inh-caps=-all", "--"])
            .arg(&exe)
            .args([
                "--exact",
                "without_cap_net_raw_every_backend_says_so",
                "--test-threads=1",
            ])
            .env("EBSYS_NOCAP_CHILD", "1")
            .output()
    });
    match out {
        Err(e) => eprintln!("SKIPPED: without_cap_net_raw: cannot run setpriv ({e})"),
        Ok(o) => assert!(
            o.status.success(),
            "child without capabilities failed:\n{}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    }
}

/// A link receives a multicast group's frames only while it has joined the group, on every
/// backend: the veth device passes every multicast frame up, so this is the backends' own
/// filter (the socket filter in the kernel for ring and socket, userspace for pnet). The xdp
/// backend refuses multicast groups.
#[test]
fn group_frames_arrive_only_while_the_group_is_joined() {
    let Some(ns) = NetnsPair::create_or_skip("lb-groups") else {
        return;
    };
    ns.run(|| {
        let (g, other) = (group_mac(0xA1), group_mac(0xB2));
        for (name, open) in BACKENDS {
            let mut a = open(END_A).unwrap();
            let mut b = open(END_B).unwrap();
            let mut send = |dst: MacAddr, tag: u8| {
                a.send(dst, &pattern(200, tag)).unwrap();
                a.flush().unwrap();
            };
            // Not joined: nothing; a broadcast sent after it still arrives (alone).
            send(g, 1);
            send(BROADCAST_MAC, 2);
            let got = recv_n(&mut *b, 2, Duration::from_millis(300));
            assert_eq!(got.len(), 1, "{name}: a group not joined was received");
            assert_eq!(got[0].1, pattern(200, 2), "{name}");
            if name == "xdp" {
                // Its redirect program passes only this host's address and broadcast: a
                // multicast group is refused with a typed error, a station address too.
                assert!(matches!(
                    b.join_group(g),
                    Err(LinkError::GroupsUnsupported { backend: "xdp" })
                ));
                b.join_group(BROADCAST_MAC).unwrap();
                assert!(matches!(
                    b.join_group(a.local_mac()),
                    Err(LinkError::NotGroupAddress(_))
                ));
                continue;
            }
            // Joined (twice is once): its frames arrive, another group's do not.
            b.join_group(g).unwrap();
            b.join_group(g).unwrap();
            send(other, 3);
            send(g, 4);
            let got = recv_n(&mut *b, 2, Duration::from_millis(300));
            assert_eq!(got.len(), 1, "{name}: {} frames after joining", got.len());
            assert_eq!(got[0].1, pattern(200, 4), "{name}");
            // Left: nothing again.
            b.leave_group(g).unwrap();
            send(g, 5);
            assert!(
                recv_n(&mut *b, 1, Duration::from_millis(200)).is_empty(),
                "{name}: left"
            );
            // A station address is not a group.
            assert!(matches!(
                b.join_group(a.local_mac()),
                Err(LinkError::NotGroupAddress(m)) if m == a.local_mac()
            ));
        }
    });
}

/// Frames of a group not joined never reach the socket: the kernel's counter of frames queued
/// to the ring socket stays at zero.
#[test]
fn a_ring_link_outside_the_group_counts_none_of_its_frames() {
    let Some(ns) = NetnsPair::create_or_skip("lb-gcount") else {
        return;
    };
    ns.run(|| {
        let mut a = open_socket(END_A).unwrap();
        let mut b = RingLink::open(END_B, &RingLinkConfig::default()).unwrap();
        let _ = b.stats().unwrap(); // reading resets
        for i in 0..50u8 {
            a.send(group_mac(7), &pattern(300, i)).unwrap();
        }
        a.flush().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(
            b.stats().unwrap().packets,
            0,
            "frames of group 7 reached the socket"
        );
        b.join_group(group_mac(7)).unwrap();
        for i in 0..50u8 {
            a.send(group_mac(7), &pattern(300, i)).unwrap();
        }
        a.flush().unwrap();
        let got = recv_n(&mut b, 50, Duration::from_secs(2));
        assert_eq!(got.len(), 50);
        assert_eq!(b.stats().unwrap().packets, 50);
    });
}

/// A ring link holds the frames of a batch until the batch's end (`recv_held`'s `done`): the
/// payloads handed in lie, unchanged, in the frames `done` is given; then the slots go back to
/// the kernel, so that a ring of 64 slots carries many times that many frames. A link that
/// holds nothing says so and gives `done` no frames.
#[test]
fn a_ring_link_holds_a_batch_until_its_end_and_then_gives_the_slots_back() {
    let Some(ns) = NetnsPair::create_or_skip("lb-held") else {
        return;
    };
    ns.run(|| {
        let (mut a, mut b) = small_ring_and_socket(2048);
        assert!(a.holds_frames());
        assert!(!b.holds_frames());
        let to_a = a.local_mac();
        let (mut got, mut batches, mut astray) = (0usize, 0usize, 0usize);
        // 10 rounds of 40 frames: 400 through 64 slots.
        for round in 0..10u8 {
            send_round(b.as_mut(), to_a, 1000, round, 40);
            let want = got + 40;
            let deadline = Instant::now() + Duration::from_secs(2);
            while got < want && Instant::now() < deadline {
                // What `f` was handed: where, and a copy to compare with at the batch's end.
                let seen: std::cell::RefCell<Vec<(usize, Vec<u8>)>> = Default::default();
                a.recv_held(
                    Some(Duration::from_millis(200)),
                    &mut |_, pdu| {
                        seen.borrow_mut()
                            .push((pdu.as_ptr() as usize, pdu.to_vec()))
                    },
                    &mut |end| {
                        batches += 1;
                        for (at, bytes) in seen.borrow().iter() {
                            match end.held.find(*at, bytes.len()) {
                                Some(f) => assert_eq!(f, &bytes[..]),
                                None => astray += 1,
                            }
                            // Nothing retained: all of the batch goes back.
                            assert!(end.leaving.find(*at, bytes.len()).is_some());
                        }
                    },
                )
                .unwrap();
                let seen = seen.into_inner();
                for (i, (_, bytes)) in seen.iter().enumerate() {
                    let k = (got + i) as u8;
                    assert_eq!(
                        bytes,
                        &pattern(1000, k),
                        "frame {} changed or out of order",
                        got + i
                    );
                }
                got += seen.len();
            }
            assert_eq!(
                got, want,
                "round {round}: frames lost (slots not given back?)"
            );
        }
        assert_eq!(astray, 0, "payloads that were not in the batch's frames");
        assert!(batches > 0);
        // The socket link holds nothing: `done` finds nothing, and nothing is retained.
        assert_eq!(b.retain(16), 0);
        let to_b = b.local_mac();
        a.send(to_b, &pattern(100, 1)).unwrap();
        a.flush().unwrap();
        let (mut n, mut found) = (0, false);
        let deadline = Instant::now() + Duration::from_secs(2);
        while n == 0 && Instant::now() < deadline {
            n += b
                .recv_held(
                    Some(Duration::from_millis(200)),
                    &mut |_, _| {},
                    &mut |end| found = end.held.find(0, 0).is_some(),
                )
                .unwrap();
        }
        assert_eq!((n, found), (1, false));
    });
}

/// A ring link asked to retain frames keeps the newest of them after each batch (at most half
/// its slots), finds them where `f` saw them, unchanged, in later batches and between batches,
/// and gives them back oldest first, each named as leaving in the batch end that gives it
/// back; 300 frames pass through 64 slots without loss. A plain receive gives back what it
/// retained.
#[test]
fn a_ring_link_retains_its_newest_frames_and_gives_them_back_oldest_first() {
    let Some(ns) = NetnsPair::create_or_skip("lb-keep") else {
        return;
    };
    ns.run(|| {
        let (mut a, mut b) = small_ring_and_socket(2048);
        assert_eq!(a.retain(1000), 32, "more than half the ring");
        assert_eq!(a.retain(20), 20);
        let to_a = a.local_mac();
        // Every frame seen: where, and its bytes; and how many of the oldest have left.
        let seen: std::cell::RefCell<Vec<(usize, Vec<u8>)>> = Default::default();
        let mut left = 0usize;
        for round in 0..10u8 {
            send_round(b.as_mut(), to_a, 900, round, 30);
            let want = seen.borrow().len() + 30;
            let deadline = Instant::now() + Duration::from_secs(2);
            while seen.borrow().len() < want && Instant::now() < deadline {
                a.recv_held(
                    Some(Duration::from_millis(200)),
                    &mut |_, pdu| {
                        seen.borrow_mut()
                            .push((pdu.as_ptr() as usize, pdu.to_vec()))
                    },
                    &mut |end| {
                        let seen = seen.borrow();
                        // The frames not given back yet are all held, unchanged; the oldest
                        // of them leave, in order, as many as exceed what is retained.
                        let mut leaving = 0;
                        for (i, (at, bytes)) in seen.iter().enumerate().skip(left) {
                            assert_eq!(end.held.find(*at, bytes.len()), Some(&bytes[..]));
                            if end.leaving.find(*at, bytes.len()).is_some() {
                                assert_eq!(i, left + leaving, "frame {i} left out of order");
                                leaving += 1;
                            }
                        }
                        assert_eq!(seen.len() - left - leaving, (seen.len() - left).min(20));
                        left += leaving;
                    },
                )
                .unwrap();
            }
            let seen = seen.borrow();
            assert_eq!(seen.len(), want, "round {round}: frames lost");
            // Between batches, the retained frames are there, none leaving.
            let mut kept = 0;
            a.with_held(&mut |end| {
                for (at, bytes) in &seen[left..] {
                    assert_eq!(end.held.find(*at, bytes.len()), Some(&bytes[..]));
                    assert!(end.leaving.find(*at, bytes.len()).is_none());
                    kept += 1;
                }
            });
            assert_eq!(kept, 20);
        }
        for (i, (_, bytes)) in seen.borrow().iter().enumerate() {
            assert_eq!(
                bytes,
                &pattern(900, i as u8),
                "frame {i} changed or out of order"
            );
        }
        // A plain receive gives back what was retained.
        b.send(to_a, &pattern(900, 7)).unwrap();
        b.flush().unwrap();
        assert_eq!(recv_n(a.as_mut(), 1, Duration::from_secs(2)).len(), 1);
        let last = seen.borrow().last().cloned().unwrap();
        a.with_held(&mut |end| assert!(end.held.find(last.0, last.1.len()).is_none()));
    });
}

/// A socket link that blocks (or spins and then blocks) waits for a frame in the receive
/// itself: it returns when the frame comes, not at its timeout, and a wait in which nothing
/// comes lasts about its time (its receive timeout has a millisecond grain and ends before the
/// wait would). A short wait, bounded by a protocol timer, polls with a precise timeout.
#[test]
fn a_waiting_socket_link_wakes_for_its_frame_and_times_out_without_one() {
    let Some(ns) = NetnsPair::create_or_skip("lb-wait") else {
        return;
    };
    ns.run(|| {
        for wait in [WaitMode::Block, WaitMode::Adaptive] {
            let cfg = SocketConfig {
                wait,
                ..Default::default()
            };
            let mut a = SocketLink::open(END_A, &cfg).unwrap();
            let mut b = SocketLink::open(END_B, &cfg).unwrap();
            let to = b.local_mac();
            for wait_for in [Duration::from_millis(100), Duration::from_millis(5)] {
                let t = Instant::now();
                assert_eq!(b.recv(Some(wait_for), &mut |_, _| {}).unwrap(), 0);
                let took = t.elapsed();
                assert!(took >= wait_for / 2, "{wait:?}: {took:?} of {wait_for:?}");
                assert!(
                    took < wait_for + Duration::from_secs(1),
                    "{wait:?}: {took:?}"
                );
            }
            let p = pattern(200, 3);
            let sent = p.clone();
            let t = Instant::now();
            std::thread::scope(|s| {
                s.spawn(move || {
                    std::thread::sleep(Duration::from_millis(50));
                    a.send(to, &sent).unwrap();
                    a.flush().unwrap();
                });
                let mut got = Vec::new();
                while got.is_empty() && t.elapsed() < Duration::from_secs(10) {
                    b.recv(Some(Duration::from_secs(10)), &mut |_, pdu| {
                        got.push(pdu.to_vec())
                    })
                    .unwrap();
                }
                assert_eq!(got, vec![p.clone()], "{wait:?}");
            });
            let took = t.elapsed();
            assert!(took >= Duration::from_millis(50), "{wait:?}: {took:?}");
            // Woken by the frame: nowhere near the 10 s wait (or the 1 s receive timeout).
            assert!(took < Duration::from_millis(900), "{wait:?}: {took:?}");
        }
    });
}
