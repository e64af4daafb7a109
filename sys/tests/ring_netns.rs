//! The raw sys layer over a real veth pair: ring RX/TX, plain socket, EtherType binding and
//! `PACKET_IGNORE_OUTGOING`, inside a private network namespace.
#![cfg(target_os = "linux")]

mod common;
use common::netns::{NetnsPair, END_A, END_B};

use ethbcast_sys::iface::Interface;
use ethbcast_sys::ring::{RingConfig, RingSocket};
use ethbcast_sys::socket::{write_eth_header, PacketSocket, SocketOptions};
use ethbcast_sys::wait::{wait_until, Interest, Strategy};
use std::os::fd::AsFd;
use std::time::Duration;

const ET: u16 = 0x88B5;

fn frame(dst: [u8; 6], src: [u8; 6], et: u16, fill: u8, len: usize) -> Vec<u8> {
    let mut f = vec![fill; len];
    write_eth_header(&mut f, &dst, &src, et);
    f
}

fn collect(ring: &mut RingSocket, want: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    for _ in 0..50 {
        let fd = ring.socket().as_fd().try_clone_to_owned().unwrap();
        let _ = wait_until(
            fd.as_fd(),
            Interest::Read,
            Strategy::Block,
            Duration::from_millis(20),
            || ring.rx_ready(),
        );
        ring.rx_for_each(usize::MAX, &mut |f| {
            assert!(!f.truncated());
            got.push(f.data.to_vec())
        });
        if got.len() >= want {
            break;
        }
    }
    got
}

#[test]
fn rings_carry_frames_both_ways_and_filter_by_ethertype() {
    let Some(ns) = NetnsPair::create_or_skip("sysring") else {
        return;
    };
    ns.run(|| {
        let a = Interface::lookup(END_A).unwrap();
        let b = Interface::lookup(END_B).unwrap();
        assert_eq!(a.mtu, 1500);
        let opts = SocketOptions::default();
        let mut ra = RingSocket::open(
            a.index,
            ET,
            &opts,
            &RingConfig::RX_DEFAULT,
            Some(&RingConfig::TX_DEFAULT),
        )
        .unwrap();
        let mut rb = RingSocket::open(
            b.index,
            ET,
            &opts,
            &RingConfig::RX_DEFAULT,
            Some(&RingConfig::TX_DEFAULT),
        )
        .unwrap();
        let plain = PacketSocket::open(a.index, 0x88B6, &opts).unwrap();

        // A burst larger than the TX ring: push, flush when full.
        let n = 600;
        let mut sent = Vec::new();
        for i in 0..n {
            let f = frame([0xff; 6], a.mac, ET, i as u8, 60 + (i % 1455));
            while !ra.tx_push(&f).unwrap() {
                ra.tx_flush().unwrap();
                std::thread::yield_now();
            }
            sent.push(f);
        }
        ra.tx_flush().unwrap();
        // A foreign EtherType from a plain socket must not reach the 0x88B5 ring.
        assert!(plain.send(&frame([0xff; 6], a.mac, 0x88B6, 7, 60)).unwrap());
        let got = collect(&mut rb, n);
        assert_eq!(got.len(), n, "frames lost or foreign frames delivered");
        assert!(got == sent, "frames differ or out of order");
        // Our own broadcasts do not come back.
        assert!(collect(&mut ra, 1).is_empty());

        // The other way, unicast, with the plain socket API on the sender.
        let back = PacketSocket::open(b.index, ET, &opts).unwrap();
        let f = frame(a.mac, b.mac, ET, 0x5a, 100);
        assert!(back.send(&f).unwrap());
        assert_eq!(back.send_batch(&[&f, &f]).unwrap(), 2);
        let got = collect(&mut ra, 3);
        assert_eq!(got, vec![f.clone(), f.clone(), f]);
        let st = rb.socket().stats().unwrap();
        assert_eq!(st.drops, 0);
    });
}

#[test]
fn plain_socket_reports_pkttype_and_truncation() {
    let Some(ns) = NetnsPair::create_or_skip("sysplain") else {
        return;
    };
    ns.run(|| {
        let a = Interface::lookup(END_A).unwrap();
        let b = Interface::lookup(END_B).unwrap();
        let opts = SocketOptions::default();
        let sa = PacketSocket::open(a.index, ET, &opts).unwrap();
        let sb = PacketSocket::open(b.index, ET, &opts).unwrap();
        sb.attach_filter(&ethbcast_sys::filter::ethertype(ET))
            .unwrap();
        assert!(sa.send(&frame([0xff; 6], a.mac, ET, 1, 200)).unwrap());
        let mut buf = [0u8; 100];
        let mut info = None;
        for _ in 0..100 {
            info = sb.recv(&mut buf).unwrap();
            if info.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let info = info.expect("frame arrives");
        assert_eq!(info.len, 200);
        assert_eq!(info.pkttype, libc::PACKET_BROADCAST);
        assert!(
            sa.recv(&mut buf).unwrap().is_none(),
            "own frame looped back"
        );
        assert!(matches!(
            sb.attach_filter(&[]),
            Err(ethbcast_sys::Error::Filter(_))
        ));
    });
}

/// A TX slot is reused without being cleared: a frame shorter than the Ethernet minimum, written
/// into a slot that last held a long frame, must leave padded with zeros (IEEE 802.3 pads a
/// short frame; the bytes of the earlier frame must not leave with it), and a fill that writes
/// nothing queues nothing.
#[test]
fn a_short_frame_in_a_slot_that_held_a_long_one_leaves_padded_with_zeros() {
    let Some(ns) = NetnsPair::create_or_skip("syspad") else {
        return;
    };
    ns.run(|| {
        let a = Interface::lookup(END_A).unwrap();
        let b = Interface::lookup(END_B).unwrap();
        let opts = SocketOptions::default();
        // Two slots: every third frame reuses the slot of the first.
        let tiny = RingConfig {
            block_size: 4096,
            frame_size: 2048,
            frame_count: 2,
        };
        let mut ra =
            RingSocket::open(a.index, ET, &opts, &RingConfig::RX_DEFAULT, Some(&tiny)).unwrap();
        let mut rb = RingSocket::open(b.index, ET, &opts, &RingConfig::RX_DEFAULT, None).unwrap();
        let long = frame([0xff; 6], a.mac, ET, 0xab, 1000);
        let mut short = frame([0xff; 6], a.mac, ET, 0x11, 20);
        let push = |ra: &mut RingSocket, f: &[u8]| {
            for _ in 0..1000 {
                let queued = ra
                    .tx_push_in_place(|d| {
                        d[..f.len()].copy_from_slice(f);
                        f.len()
                    })
                    .unwrap();
                if let Some(len) = queued {
                    return len;
                }
                ra.tx_flush().unwrap();
                std::thread::sleep(Duration::from_millis(1));
            }
            panic!("no TX slot came back");
        };
        let idle = |ra: &mut RingSocket| {
            for _ in 0..1000 {
                ra.tx_flush().unwrap();
                if ra.tx_idle() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            panic!("the TX ring did not empty");
        };
        assert_eq!(push(&mut ra, &long), 1000);
        assert_eq!(push(&mut ra, &long), 1000);
        idle(&mut ra);
        // A fill that declines takes no slot: the next frame goes where it would have.
        assert_eq!(ra.tx_push_in_place(|_| 0).unwrap(), Some(0));
        assert_eq!(push(&mut ra, &short), 60);
        short[19] = 0x22;
        assert_eq!(push(&mut ra, &short), 60);
        ra.tx_flush().unwrap();
        let got = collect(&mut rb, 4);
        assert_eq!(got.len(), 4, "frames lost");
        assert_eq!(got[0], long);
        assert_eq!(got[1], long);
        for (i, g) in got[2..].iter().enumerate() {
            assert_eq!(g.len(), 60, "short frame {i} not padded to the minimum");
            assert_eq!(&g[..19], &short[..19]);
            assert_eq!(g[19], if i == 0 { 0x11 } else { 0x22 });
            assert!(
                g[20..].iter().all(|&x| x == 0),
                "short frame {i} carries bytes of the earlier frame in its padding: {:x?}",
                &g[20..]
            );
        }
        // Lengths the slot cannot send are refused and queue nothing.
        idle(&mut ra);
        let cap = ra.tx_frame_capacity();
        assert!(matches!(
            ra.tx_push_in_place(|_| cap + 1),
            Err(ethbcast_sys::Error::FrameTooLong { .. })
        ));
        assert!(matches!(
            ra.tx_push_in_place(|_| 5),
            Err(ethbcast_sys::Error::FrameTooShort { len: 5, .. })
        ));
        ra.tx_flush().unwrap();
        assert!(collect(&mut rb, 1).is_empty(), "a refused frame was sent");
    });
}
