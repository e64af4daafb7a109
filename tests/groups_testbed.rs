//! Several groups on one segment, on the test-bed (network namespaces on a Linux bridge that
//! floods multicast frames as it floods broadcast ones): each group sends to its own multicast
//! address (`group_mac` of its id), and its members join that address.
//!
//! Two groups transfer at the same time; a host of one group never sees a frame of the other
//! (its engine counts no foreign-group frame), and a host in neither group counts none of their
//! frames at its socket (the kernel's counter of frames queued to it).
//!
//! Needs root. In CI (`ETHBCAST_REQUIRE_NETNS=1`) a missing privilege fails; elsewhere the test
//! says loudly that it was skipped.
#![cfg(target_os = "linux")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use ethbcast::{group_mac, Link, MacAddr, Rank, RingLink, RingLinkConfig};
use ethbcast_proto::{Dest, Engine, EngineConfig, EngineEvent, HardwareAlgorithm, Message};
use ethbcast_testbed::netns;
use ethbcast_testbed::{netns_available, Testbed, TestbedConfig};

const MESSAGES: usize = 40;
const LIMIT: Duration = Duration::from_secs(60);

/// Message `i` of group `gid`: its own length and bytes.
fn message(gid: u32, i: usize) -> Vec<u8> {
    let len = 1000 + (i * 7919) % 60_000;
    (0..len)
        .map(|k| (k as u32 ^ gid ^ (i as u32).wrapping_mul(31)) as u8)
        .collect()
}

/// What one member saw.
#[derive(Debug, Default)]
struct Outcome {
    /// Messages delivered intact, in order.
    delivered: usize,
    /// Deliveries that were wrong (bytes, order).
    wrong: usize,
    /// Frames of another group that reached the engine.
    foreign: u64,
    /// As root: when the first frame left and when the last message was stable.
    span: Option<(Instant, Instant)>,
}

/// One member of group `gid` (rank `rank` of the hosts `macs`), driving its engine over a ring
/// link until every member of its group has finished (`finished` counts them).
fn member(
    gid: u32,
    rank: u16,
    macs: Vec<MacAddr>,
    start: Arc<Barrier>,
    finished: Arc<AtomicUsize>,
) -> Result<Outcome, String> {
    let size = macs.len() as u16;
    let setup = || -> Result<(RingLink, Engine), String> {
        let mut link =
            RingLink::open("eth0", &RingLinkConfig::default()).map_err(|e| e.to_string())?;
        link.join_group(group_mac(gid)).map_err(|e| e.to_string())?;
        let e = Engine::new(EngineConfig::new(gid, Rank::new(rank), size))
            .map_err(|e| e.to_string())?;
        Ok((link, e))
    };
    let setup = setup();
    // Everybody passes the barrier, so that one failure cannot hang the others.
    start.wait();
    let (mut link, mut e) = setup.inspect_err(|_| {
        finished.fetch_add(1, Ordering::SeqCst);
    })?;
    let mut out = Outcome::default();
    let mut buf = vec![0u8; 1500];
    let t0 = Instant::now();
    if rank == 0 {
        for i in 0..MESSAGES {
            e.bcast(t0, message(gid, i), HardwareAlgorithm::Simple)
                .map_err(|e| e.to_string())?;
        }
    }
    let mut stable = 0;
    let mut done = false;
    while finished.load(Ordering::SeqCst) < usize::from(size) {
        if t0.elapsed() > LIMIT {
            return Err(format!(
                "group {gid:#x} rank {rank}: no end after {LIMIT:?}: {out:?}"
            ));
        }
        let now = Instant::now();
        let wait = e
            .poll_timeout()
            .map_or(Duration::from_millis(1), |t| {
                t.saturating_duration_since(now)
            })
            .min(Duration::from_millis(1));
        link.recv(Some(wait), &mut |_, pdu| {
            let _ = e.handle_frame(Instant::now(), pdu);
        })
        .map_err(|e| e.to_string())?;
        let now = Instant::now();
        e.handle_timeout(now);
        while let Some(t) = e.poll_transmit(now, &mut buf) {
            let dst = match t.dst {
                Dest::All => group_mac(gid),
                Dest::Rank(r) => macs[r.index()],
            };
            link.send(dst, &buf[..t.len]).map_err(|e| e.to_string())?;
        }
        link.flush().map_err(|e| e.to_string())?;
        while let Some(ev) = e.poll_event() {
            match ev {
                EngineEvent::Delivered(Message { msg_id, data, .. }) => {
                    if msg_id as usize == out.delivered && data == message(gid, out.delivered) {
                        out.delivered += 1;
                    } else {
                        out.wrong += 1;
                    }
                }
                EngineEvent::Stable { .. } => stable += 1,
                _ => {}
            }
        }
        let mine = if rank == 0 {
            stable == MESSAGES
        } else {
            out.delivered == MESSAGES
        };
        if mine && !done {
            done = true;
            if rank == 0 {
                out.span = Some((t0, Instant::now()));
            }
            finished.fetch_add(1, Ordering::SeqCst);
        }
    }
    out.foreign = e.stats().drops.foreign_group;
    Ok(out)
}

#[test]
fn two_groups_transfer_at_once_and_no_host_sees_another_groups_frames() {
    let test = "two_groups_transfer_at_once_and_no_host_sees_another_groups_frames";
    if !netns_available(test, false) {
        return;
    }
    let prefix = format!("egm{:x}", std::process::id() & 0xfff);
    let bed = Testbed::up(&TestbedConfig::new(6).prefix(prefix)).unwrap();
    let hosts = bed.hosts().to_vec();
    // Group 0xA1 on hosts 0, 1, 2; group 0xB2 on hosts 3, 4; host 5 in neither.
    let groups: [(u32, Vec<usize>); 2] = [(0xA1, vec![0, 1, 2]), (0xB2, vec![3, 4])];
    let start = Arc::new(Barrier::new(6));
    let mut handles = Vec::new();
    for (gid, members) in &groups {
        let macs: Vec<MacAddr> = members.iter().map(|&h| MacAddr(hosts[h].mac)).collect();
        let finished = Arc::new(AtomicUsize::new(0));
        for (rank, &h) in members.iter().enumerate() {
            let (macs, start, finished, gid) =
                (macs.clone(), start.clone(), finished.clone(), *gid);
            let handle = netns::spawn_in(&hosts[h].netns, move || {
                member(gid, rank as u16, macs, start, finished)
            })
            .unwrap();
            handles.push((gid, rank, handle));
        }
    }
    // The outsider keeps a link open (joined to nothing) for the whole transfer.
    let outsider_start = start.clone();
    let all_done = Arc::new(AtomicUsize::new(0));
    let outsider_done = all_done.clone();
    let outsider = netns::spawn_in(&hosts[5].netns, move || {
        let link = RingLink::open("eth0", &RingLinkConfig::default());
        outsider_start.wait();
        let mut link = link.unwrap();
        let _ = link.stats().unwrap();
        let mut frames = 0;
        while outsider_done.load(Ordering::SeqCst) == 0 {
            frames += link
                .recv(Some(Duration::from_millis(5)), &mut |_, _| {})
                .unwrap();
        }
        (frames, link.stats().unwrap().packets)
    })
    .unwrap();
    let mut outcomes = Vec::new();
    for (gid, rank, h) in handles {
        let r = h.join().expect("member thread panicked");
        outcomes.push((gid, rank, r));
    }
    all_done.store(1, Ordering::SeqCst);
    let (outsider_frames, outsider_packets) = outsider.join().expect("outsider panicked");
    drop(bed);

    let mut spans = Vec::new();
    for (gid, rank, r) in outcomes {
        let o = r.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(o.wrong, 0, "group {gid:#x} rank {rank}: {o:?}");
        assert_eq!(
            o.foreign, 0,
            "group {gid:#x} rank {rank} saw the other group: {o:?}"
        );
        if rank == 0 {
            spans.push(o.span.expect("the root finished"));
        } else {
            assert_eq!(o.delivered, MESSAGES, "group {gid:#x} rank {rank}: {o:?}");
        }
    }
    assert_eq!(
        (outsider_frames, outsider_packets),
        (0, 0),
        "the host in neither group received frames"
    );
    let [(a0, a1), (b0, b1)] = [spans[0], spans[1]];
    assert!(
        a0 < b1 && b0 < a1,
        "the two transfers overlapped in time: {:?} and {:?}",
        (a0, a1),
        (b0, b1)
    );
}
