//! The raw AF_XDP layer over a real veth pair inside a private network namespace: the redirect
//! program takes ethbcast frames addressed to us, passes everything else to the kernel, and
//! the socket receives and sends through its rings, in native and in generic XDP mode.
#![cfg(target_os = "linux")]

mod common;
use common::netns::{NetnsPair, END_A, END_B};

use ethbcast_sys::bpf::{XdpMode, XdpRedirect};
use ethbcast_sys::iface::Interface;
use ethbcast_sys::socket::{write_eth_header, PacketSocket, SocketOptions};
use ethbcast_sys::wait::{wait_until, Interest, Strategy};
use ethbcast_sys::xsk::{XdpSocket, XskConfig};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

const ET: u16 = 0x88B5;
const BCAST: [u8; 6] = [0xff; 6];

fn frame(dst: [u8; 6], src: [u8; 6], et: u16, fill: u8, len: usize) -> Vec<u8> {
    let mut f = vec![fill; len];
    write_eth_header(&mut f, &dst, &src, et);
    f
}

fn collect(x: &mut XdpSocket, want: usize, within: Duration) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let deadline = Instant::now() + within;
    while got.len() < want && Instant::now() < deadline {
        let fd = x.as_fd().try_clone_to_owned().unwrap();
        let _ = wait_until(
            fd.as_fd(),
            Interest::Read,
            Strategy::Block,
            Duration::from_millis(20),
            || x.rx_ready(),
        );
        x.rx_for_each(usize::MAX, &mut |f| got.push(f.to_vec()))
            .unwrap();
    }
    got
}

fn round_trip(mode: XdpMode) {
    let Some(ns) = NetnsPair::create_or_skip(&format!("xdp-{mode}")) else {
        return;
    };
    ns.run(|| {
        let a = Interface::lookup(END_A).unwrap();
        let b = Interface::lookup(END_B).unwrap();
        let prog = XdpRedirect::attach(b.index, ET, &[b.mac, BCAST], 1, Some(mode))
            .unwrap_or_else(|e| panic!("attach in {mode} mode: {e}"));
        assert_eq!(prog.mode(), mode);
        let mut x = XdpSocket::open(b.index, 0, &XskConfig::default(), prog.map()).unwrap();
        // veth has no zero-copy AF_XDP: the socket fell back to copy mode and says so.
        assert!(!x.zero_copy());
        let tx_a = PacketSocket::open(a.index, ET, &SocketOptions::default()).unwrap();
        // Two listeners on b for what the program must leave to the kernel.
        let other_et = PacketSocket::open(b.index, 0x88B6, &SocketOptions::default()).unwrap();
        let same_et = PacketSocket::open(b.index, ET, &SocketOptions::default()).unwrap();

        // Ours: broadcast and unicast to b, several sizes.
        let sent = [
            frame(BCAST, a.mac, ET, 1, 60),
            frame(b.mac, a.mac, ET, 2, 777),
            frame(BCAST, a.mac, ET, 3, 1514),
        ];
        for f in &sent {
            assert!(tx_a.send(f).unwrap());
        }
        let got = collect(&mut x, sent.len(), Duration::from_secs(2));
        assert_eq!(got, sent.to_vec(), "{mode}: frames differ or are missing");

        // Not ours: another EtherType, and our EtherType to another host's MAC. Both reach
        // the kernel (the 0x88B6 listener sees the first) and never the AF_XDP socket.
        let foreign = frame(BCAST, a.mac, 0x88B6, 4, 100);
        let elsewhere = frame([2, 0, 0, 0, 0, 9], a.mac, ET, 5, 100);
        assert!(tx_a.send(&foreign).unwrap());
        assert!(tx_a.send(&elsewhere).unwrap());
        let marker = frame(BCAST, a.mac, ET, 6, 64);
        assert!(tx_a.send(&marker).unwrap());
        let got = collect(&mut x, 2, Duration::from_millis(300));
        assert_eq!(
            got,
            vec![marker],
            "{mode}: only the marker may reach the socket"
        );
        let mut buf = [0u8; 2048];
        let deadline = Instant::now() + Duration::from_secs(1);
        let info = loop {
            if let Some(i) = other_et.recv(&mut buf).unwrap() {
                break i;
            }
            assert!(
                Instant::now() < deadline,
                "{mode}: 0x88B6 frame not passed to the kernel"
            );
            std::thread::sleep(Duration::from_millis(5));
        };
        assert_eq!(&buf[..info.len], &foreign[..]);
        // The kernel never saw the redirected 0x88B5 frames.
        assert!(same_et
            .recv(&mut buf)
            .unwrap()
            .is_none_or(|i| i.is_other_host()));

        // Sending: frames queued in the TX ring leave at the flush, in order.
        let rx_a = PacketSocket::open(a.index, ET, &SocketOptions::default()).unwrap();
        for i in 0..100u8 {
            let f = frame(a.mac, b.mac, ET, i, 60 + usize::from(i) * 10);
            assert!(x.tx_push(&f).unwrap());
        }
        x.tx_flush().unwrap();
        let mut seen = 0u8;
        let deadline = Instant::now() + Duration::from_secs(2);
        while seen < 100 && Instant::now() < deadline {
            match rx_a.recv(&mut buf).unwrap() {
                Some(i) => {
                    assert_eq!(i.len, 60 + usize::from(seen) * 10, "{mode}: order");
                    assert!(buf[14..i.len].iter().all(|&v| v == seen));
                    seen += 1;
                }
                None => std::thread::sleep(Duration::from_millis(1)),
            }
        }
        assert_eq!(seen, 100, "{mode}: frames sent through the TX ring lost");
        let deadline = Instant::now() + Duration::from_secs(1);
        while !x.tx_idle() {
            x.tx_flush().unwrap();
            assert!(
                Instant::now() < deadline,
                "{mode}: TX chunks never completed"
            );
        }
        assert_eq!(x.stats().unwrap().rx_invalid_descs, 0);
    });
}

#[test]
fn native_xdp_redirects_only_our_frames_and_the_socket_sends() {
    round_trip(XdpMode::Native);
}

#[test]
fn generic_xdp_redirects_only_our_frames_and_the_socket_sends() {
    round_trip(XdpMode::Generic);
}

#[test]
fn a_second_program_on_the_same_interface_is_refused_with_a_fix() {
    let Some(ns) = NetnsPair::create_or_skip("xdp-busy") else {
        return;
    };
    ns.run(|| {
        let b = Interface::lookup(END_B).unwrap();
        let first = XdpRedirect::attach(b.index, ET, &[BCAST], 1, None).unwrap();
        let e = XdpRedirect::attach(b.index, ET, &[BCAST], 1, None).unwrap_err();
        assert!(e.to_string().contains("xdp off"), "{e}");
        drop(first);
        // The link held the attachment: once it is closed the interface is free again.
        XdpRedirect::attach(b.index, ET, &[BCAST], 1, None).unwrap();
    });
}

/// A copy of the link's descriptor elsewhere (a child forked by another thread between its
/// fork and its exec holds one) must not keep the program attached: dropping the redirect
/// detaches it, and the interface is free at once.
#[test]
fn a_dropped_program_is_detached_while_a_copy_of_its_link_is_still_open() {
    let Some(ns) = NetnsPair::create_or_skip("xdp-held") else {
        return;
    };
    ns.run(|| {
        let b = Interface::lookup(END_B).unwrap();
        let first = XdpRedirect::attach(b.index, ET, &[BCAST], 1, None).unwrap();
        let held = first.link().try_clone_to_owned().unwrap();
        drop(first);
        let again = XdpRedirect::attach(b.index, ET, &[BCAST], 1, None)
            .unwrap_or_else(|e| panic!("reattach while a copy of the old link is open: {e}"));
        drop(held);
        drop(again);
    });
}
