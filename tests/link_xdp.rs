//! The xdp backend (AF_XDP behind the redirect program) on the test-bed: broadcast to several
//! hosts and unicast to one, through a real bridge; frames of another EtherType go to the
//! kernel and never to the socket; and the errors a user can meet say what to do.
//!
//! Needs root. In CI (`ETHBCAST_REQUIRE_NETNS=1`) a missing privilege fails; elsewhere the
//! tests say loudly that they were skipped.
#![cfg(target_os = "linux")]

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use ethbcast::{Link, LinkError, MacAddr, BROADCAST_MAC};
use ethbcast::{XdpLink, XdpLinkConfig};
use ethbcast_sys::iface::Interface;
use ethbcast_sys::socket::{write_eth_header, PacketSocket, SocketOptions};
use ethbcast_sys::xsk::ZeroCopy;
use ethbcast_testbed::netns;
use ethbcast_testbed::{netns_available, Testbed, TestbedConfig};

fn prefix(tag: &str) -> String {
    format!("x{tag}{:x}", std::process::id() & 0xfff)
}

fn bed(test: &str, tag: &str, hosts: usize) -> Option<Testbed> {
    if !netns_available(test, false) {
        return None;
    }
    let cfg = TestbedConfig::new(hosts).prefix(prefix(tag));
    Some(Testbed::up(&cfg).unwrap_or_else(|e| panic!("{test}: test-bed: {e}")))
}

fn open(iface: &str) -> Result<XdpLink, LinkError> {
    XdpLink::open(iface, &XdpLinkConfig::default())
}

/// Receives until `want` frames arrived or `within` passed.
fn recv_n(l: &mut dyn Link, want: usize, within: Duration) -> Vec<(MacAddr, Vec<u8>)> {
    let mut got = Vec::new();
    let deadline = Instant::now() + within;
    while got.len() < want {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        l.recv(Some(left), &mut |src, pdu| got.push((src, pdu.to_vec())))
            .unwrap();
    }
    got
}

fn pdu(i: u32, len: usize) -> Vec<u8> {
    let mut p: Vec<u8> = (0..len)
        .map(|j| (j as u8).wrapping_mul(7) ^ i as u8)
        .collect();
    p[..4].copy_from_slice(&i.to_be_bytes());
    p
}

/// Host 0 broadcasts 300 frames of every size and unicasts to host 2; hosts 1..4 each get
/// every broadcast, intact and in order, and only host 2 the unicast. Between them, host 0
/// broadcasts a frame of EtherType 0x88B6: a kernel socket of host 1 receives it, the AF_XDP
/// sockets never do.
#[test]
fn broadcast_reaches_every_host_and_other_ethertypes_stay_with_the_kernel() {
    let test = "broadcast_reaches_every_host_and_other_ethertypes_stay_with_the_kernel";
    let Some(tb) = bed(test, "b", 4) else { return };
    let n = 300u32;
    let h = tb.hosts().to_vec();
    let mut receivers = Vec::new();
    let (ready_tx, ready_rx) = mpsc::channel();
    for host in &h[1..] {
        let (iface, index, ready) = (host.iface.clone(), host.index, ready_tx.clone());
        receivers.push(
            netns::spawn_in(&host.netns, move || {
                let mut l = open(&iface).unwrap_or_else(|e| panic!("host {index}: {e}"));
                assert!(!l.zero_copy(), "veth has no zero-copy AF_XDP");
                // A kernel socket for the foreign EtherType, beside the AF_XDP socket.
                let idx = Interface::lookup(&iface).unwrap().index;
                let kernel = PacketSocket::open(idx, 0x88B6, &SocketOptions::default()).unwrap();
                ready.send(()).unwrap();
                let want = n as usize + usize::from(index == 2);
                let mut got = recv_n(&mut l, want, Duration::from_secs(10));
                // Nothing more may come (the foreign frame, a duplicate).
                got.extend(recv_n(&mut l, 1, Duration::from_millis(200)));
                let mut buf = [0u8; 2048];
                let foreign = kernel
                    .recv(&mut buf)
                    .unwrap()
                    .map(|i| buf[..i.len].to_vec());
                (index, got, foreign)
            })
            .unwrap(),
        );
    }
    for _ in 1..h.len() {
        ready_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    }
    let (src_mac, unicast_to) = (h[0].mac, h[2].mac);
    let iface0 = h[0].iface.clone();
    netns::run_in(&h[0].netns, move || {
        let mut l = open(&iface0).unwrap();
        let idx = Interface::lookup(&iface0).unwrap().index;
        let raw = PacketSocket::open(idx, 0x88B6, &SocketOptions::default()).unwrap();
        for i in 0..n {
            l.send(BROADCAST_MAC, &pdu(i, 46 + (i as usize * 37) % 1455))
                .unwrap();
            if i == n / 2 {
                l.flush().unwrap();
                let mut f = vec![0x42u8; 100];
                write_eth_header(&mut f, &BROADCAST_MAC, &src_mac, 0x88B6);
                assert!(raw.send(&f).unwrap());
            }
            if i % 50 == 49 {
                // Receivers' queues hold far more; this only keeps the test from measuring
                // overload.
                l.flush().unwrap();
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        l.send(MacAddr(unicast_to), &pdu(n, 200)).unwrap();
        assert!(l.drain(Duration::from_secs(2)).unwrap(), "TX never drained");
    })
    .unwrap();
    for r in receivers {
        let (index, got, foreign) = r.join().unwrap();
        let want = n as usize + usize::from(index == 2);
        assert_eq!(got.len(), want, "host {index}: frames lost or extra");
        for (i, (src, p)) in got.iter().enumerate() {
            assert_eq!(*src, src_mac, "host {index}");
            let len = if i as u32 == n {
                200
            } else {
                46 + (i * 37) % 1455
            };
            assert_eq!(p[..len], pdu(i as u32, len)[..], "host {index}: frame {i}");
        }
        if index == 1 {
            let f = foreign.expect("the 0x88B6 frame reached the kernel's socket");
            assert_eq!(&f[12..14], &[0x88, 0xB6]);
        }
    }
}

/// One AF_XDP user per interface: the second open says what is in the way and how to clear
/// it; zero-copy where the driver has none, and an interface with several receive queues,
/// are refused with the fix.
#[test]
fn refusals_name_the_cause_and_the_fix() {
    let test = "refusals_name_the_cause_and_the_fix";
    let Some(tb) = bed(test, "e", 1) else { return };
    let host = tb.hosts()[0].clone();
    let iface = host.iface.clone();
    netns::run_in(&host.netns, move || {
        let first = open(&iface).unwrap();
        match open(&iface) {
            Err(e @ LinkError::XdpSetup(_)) => {
                assert!(e.to_string().contains("xdp off"), "{e}")
            }
            other => panic!("a second xdp link on {iface}: {other:?}"),
        }
        drop(first);
        // Closed: the interface is free again.
        drop(open(&iface).unwrap());
        let cfg = XdpLinkConfig {
            xsk: ethbcast_sys::xsk::XskConfig {
                zero_copy: ZeroCopy::Require,
                ..Default::default()
            },
            ..Default::default()
        };
        match XdpLink::open(&iface, &cfg) {
            Err(e @ LinkError::XdpSetup(_)) => {
                assert!(e.to_string().contains("zero-copy"), "{e}")
            }
            other => panic!("zero-copy on veth: {other:?}"),
        }
    })
    .unwrap();
    // A veth with two receive queues in the host's namespace.
    let ok = Command::new("ip")
        .args(["-n", &host.netns, "link", "add", "mq0", "numrxqueues", "2"])
        .args(["numtxqueues", "2", "type", "veth", "peer", "name", "mq1"])
        .status()
        .unwrap()
        .success();
    assert!(ok, "cannot create a two-queue veth");
    netns::run_in(&host.netns, || {
        for dev in ["mq0", "mq1"] {
            let up = Command::new("ip").args(["link", "set", dev, "up"]).status();
            assert!(up.unwrap().success());
        }
        match open("mq0") {
            Err(e @ LinkError::XdpSetup(_)) => {
                let m = e.to_string();
                assert!(
                    m.contains("2 receive queues") && m.contains("ethtool -L"),
                    "{m}"
                );
            }
            other => panic!("two queues: {other:?}"),
        }
        // Naming the queue explicitly is the user saying the frames are steered there.
        let cfg = XdpLinkConfig {
            queue: Some(1),
            ..Default::default()
        };
        let l = XdpLink::open("mq0", &cfg).unwrap();
        assert_eq!(l.queue(), 1);
    })
    .unwrap();
}

/// GRO on the test-bed's veths (`TestbedConfig::gro`) is on at both ends of every link.
#[test]
fn the_test_bed_turns_gro_on_at_both_ends_when_asked() {
    let test = "the_test_bed_turns_gro_on_at_both_ends_when_asked";
    if !netns_available(test, false) {
        return;
    }
    let cfg = TestbedConfig::new(2).prefix(prefix("g")).gro(true);
    let tb = Testbed::up(&cfg).unwrap();
    let ports = netns::run_in(tb.switch_netns(), || {
        ["p0", "p1"].map(|p| ethbcast_sys::iface::gro(p).unwrap())
    })
    .unwrap();
    assert_eq!(ports, [true, true]);
    for h in tb.hosts() {
        let iface = h.iface.clone();
        assert!(
            netns::run_in(&h.netns, move || ethbcast_sys::iface::gro(&iface).unwrap()).unwrap()
        );
    }
    tb.set_gro(false).unwrap();
    let off = netns::run_in(tb.switch_netns(), || {
        ethbcast_sys::iface::gro("p0").unwrap()
    });
    assert!(!off.unwrap());
}

/// Every wait mode times out when nothing comes and wakes for a frame that does.
#[test]
fn every_wait_mode_times_out_and_wakes_for_a_frame() {
    use ethbcast::WaitMode;
    let test = "every_wait_mode_times_out_and_wakes_for_a_frame";
    let Some(tb) = bed(test, "w", 2) else { return };
    let h = tb.hosts().to_vec();
    for mode in [
        WaitMode::Spin,
        WaitMode::Block,
        WaitMode::Adaptive,
        WaitMode::Doze,
    ] {
        let cfg = XdpLinkConfig {
            wait: mode,
            ..Default::default()
        };
        let (tx, rx) = mpsc::channel::<()>();
        let iface1 = h[1].iface.clone();
        let r = netns::spawn_in(&h[1].netns, move || {
            let mut l = XdpLink::open(&iface1, &cfg).unwrap();
            let t = Instant::now();
            let n = l
                .recv(Some(Duration::from_millis(20)), &mut |_, _| {})
                .unwrap();
            let idle = t.elapsed();
            tx.send(()).unwrap();
            let got = recv_n(&mut l, 1, Duration::from_secs(2));
            (n, idle, got)
        })
        .unwrap();
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        let iface0 = h[0].iface.clone();
        netns::run_in(&h[0].netns, move || {
            let mut l = XdpLink::open(&iface0, &cfg).unwrap();
            l.send(BROADCAST_MAC, &pdu(7, 64)).unwrap();
            assert!(l.drain(Duration::from_secs(1)).unwrap());
        })
        .unwrap();
        let (n, idle, got) = r.join().unwrap();
        assert_eq!(n, 0, "{mode:?}");
        assert!(
            idle >= Duration::from_millis(20) && idle < Duration::from_millis(500),
            "{mode:?}: {idle:?}"
        );
        assert_eq!(
            got.len(),
            1,
            "{mode:?}: the frame did not wake the receiver"
        );
        assert_eq!(got[0].1, pdu(7, 64), "{mode:?}");
    }
}

/// A link let go frees its interface at once, even while another thread starts processes
/// (each child holds copies of our descriptors from its fork to its exec): a program that
/// closes and reopens its link never meets its own ghost.
#[test]
fn a_closed_link_frees_the_interface_while_other_threads_start_processes() {
    let test = "a_closed_link_frees_the_interface_while_other_threads_start_processes";
    let Some(tb) = bed(test, "f", 1) else { return };
    let host = tb.hosts()[0].clone();
    let iface = host.iface.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let spawner = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) {
                Command::new("true").status().unwrap();
                n += 1;
            }
            n
        })
    };
    let reopened = netns::run_in(&host.netns, move || {
        for round in 0..200 {
            match open(&iface) {
                Ok(link) => drop(link),
                Err(e) => return Err(format!("round {round}: {e}")),
            }
        }
        Ok(())
    })
    .unwrap();
    stop.store(true, Ordering::Relaxed);
    let children = spawner.join().unwrap();
    assert!(children > 0, "the spawner started no process");
    reopened.unwrap();
}
