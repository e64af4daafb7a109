//! `ethbcast-bench floor`: the raw floor of broadcast latency on the test-bed, what the medium
//! and the host give before any protocol runs.
//!
//! Measured exactly as [`super::latency`] measures a protocol broadcast, so that the two divide:
//! the same threads (one per host, in its namespace), the same link backend and wait mode, the
//! same group sizes (the first k hosts), message sizes, iterations and warm-up, the same clock,
//! and the same out-of-band separation of iterations (the root waits on a shared counter,
//! yielding the CPU and polling its link without blocking, receivers already wait in their next
//! receive). One iteration is
//! the root sending the message as raw broadcast frames (one frame up to the MTU, full frames
//! after that) and flushing; its latency runs from the instant before the send until the LAST
//! receiver has every frame of it. No protocol: no header beyond a tag and sequence number, no
//! acknowledgement, no reliability: a lost frame fails the run, so the floor needs a lossless
//! test-bed. A receiver that has heard nothing new of a round [`QUIET`] after the root sent
//! it says how many frames it lacks, and the error names the ports whose queues dropped
//! frames (from `tc -s`), instead of waiting out the run's timeout.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ethbcast::{Link, BROADCAST_MAC};

use super::bed::{self, BedOptions, PollBarrier, POLL};
use super::cpu::Meter;
use super::probe::{receiver_done, root_mark_probe, MemberRun, Stamp};
use crate::netns;
use crate::testbed::Testbed;

/// The name floor rows carry in place of an algorithm.
pub const FLOOR: &str = "floor";

/// How the floor rows were measured.
pub const METHOD: &str = "raw broadcast frames of the message size (one frame up to the MTU), \
same threads, link, wait mode, clock and out-of-band separation as the protocol rows; root's \
send until the LAST receiver has every frame; no protocol";

/// How long a receiver waits for the rest of a round after the root flushed it and nothing new
/// arrived, before it calls the missing frames lost: far above a 64 KiB message's wire time at
/// 10 Mbit/s (55 ms) and a busy machine's scheduling delays.
const QUIET: Duration = Duration::from_secs(2);

/// Tag at the start of every floor frame.
const MAGIC: [u8; 4] = *b"EBFL";
/// Tag, round, frame index, frame count.
const HEADER: usize = 12;

/// Frame `i` of the message of `size` bytes in round `round`, into `buf`; returns its length.
fn build(buf: &mut Vec<u8>, round: u32, i: u16, count: u16, len: usize) -> usize {
    let len = len.max(HEADER);
    buf.clear();
    buf.resize(len, (round % 251) as u8);
    buf[..4].copy_from_slice(&MAGIC);
    buf[4..8].copy_from_slice(&round.to_be_bytes());
    buf[8..10].copy_from_slice(&i.to_be_bytes());
    buf[10..12].copy_from_slice(&count.to_be_bytes());
    len
}

/// (round, frame index, frame count) of a floor frame.
fn parse(pdu: &[u8]) -> Option<(u32, u16, u16)> {
    if pdu.len() < HEADER || pdu[..4] != MAGIC {
        return None;
    }
    Some((
        u32::from_be_bytes([pdu[4], pdu[5], pdu[6], pdu[7]]),
        u16::from_be_bytes([pdu[8], pdu[9]]),
        u16::from_be_bytes([pdu[10], pdu[11]]),
    ))
}

/// Lengths of the frames that carry `size` bytes over a link of `max_pdu`.
fn frame_lens(size: usize, max_pdu: usize) -> Vec<usize> {
    if size <= max_pdu {
        return vec![size];
    }
    (0..size.div_ceil(max_pdu))
        .map(|i| max_pdu.min(size - i * max_pdu))
        .collect()
}

/// Receives for one poll period: what a member does while it waits at the start and end
/// barriers. Floor frames that arrive meanwhile (a receiver still leaving the start barrier
/// when the root sends) are kept in `early` for [`receive`].
fn idle(l: &mut dyn Link, early: &mut Vec<(u32, u16, u16)>) -> Result<(), String> {
    l.recv(Some(POLL), &mut |_, pdu| early.extend(parse(pdu)))
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// One look of the root waiting for its receivers between iterations, as
/// [`bed::spin`] has it for a group: yields the CPU, then takes what arrived without waiting.
fn spin(l: &mut dyn Link, early: &mut Vec<(u32, u16, u16)>) -> Result<(), String> {
    std::thread::yield_now();
    l.recv(None, &mut |_, pdu| early.extend(parse(pdu)))
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The floor's stamps of group size `k` on the link of `o`, `iters` measured iterations per
/// message size of `sizes` (after `warmup` unmeasured ones): `[member]` = (stamps
/// `[size index * iters + i]`, the member's work per size over the measured iterations, counted
/// if `cost`, see [`Meter`]).
pub fn stamps(
    bed: &Testbed,
    k: usize,
    o: &BedOptions,
    sizes: &[usize],
    warmup: usize,
    iters: usize,
    cost: bool,
) -> Result<Vec<MemberRun>, String> {
    if k < 2 || k > bed.hosts().len() {
        return Err(format!(
            "group of {k} on a test-bed of {} hosts",
            bed.hosts().len()
        ));
    }
    if o.loss > 0.0 {
        return Err("the raw floor has no reliability: measure it without --loss".into());
    }
    let sizes = Arc::new(sizes.to_vec());
    let timeout = o.timeout;
    let done = Arc::new(AtomicUsize::new(0));
    // Rounds the root has flushed.
    let sent = Arc::new(AtomicUsize::new(0));
    let barrier = Arc::new(PollBarrier::new(k, timeout));
    let mut handles = Vec::new();
    for h in &bed.hosts()[..k] {
        let (sizes, done, barrier) = (sizes.clone(), done.clone(), barrier.clone());
        let sent = sent.clone();
        let (rank, iface, bo) = (h.index, h.iface.clone(), o.clone());
        let handle = netns::spawn_in(&h.netns, move || -> Result<MemberRun, String> {
            bed::own_core(rank, k);
            let r = (|| {
                let mut l = bed::open_link(&bo, &iface)
                    .map_err(|e| format!("rank {rank}: open {iface}: {e}"))?;
                let l = l.as_mut();
                let mut meter = Meter::new(cost, sizes.len())?;
                let mut early = Vec::new();
                barrier.wait(|| idle(l, &mut early))?;
                let mut out = Vec::with_capacity(sizes.len() * iters);
                let mut buf = Vec::new();
                let mut round = 0u32;
                for (e, &size) in sizes.iter().enumerate() {
                    let lens = frame_lens(size, l.max_pdu());
                    let count = lens.len() as u16;
                    for it in 0..warmup + iters {
                        if it == 0 {
                            meter.stop()?;
                        }
                        if it == warmup {
                            meter.start(e)?;
                        }
                        if rank == 0 {
                            barrier.wait_for(&done, round as usize * (k - 1), || {
                                spin(l, &mut early)
                            })?;
                            root_mark_probe(&mut out);
                            let t = Instant::now();
                            for (i, &len) in lens.iter().enumerate() {
                                let n = build(&mut buf, round, i as u16, count, len);
                                l.send(BROADCAST_MAC, &buf[..n])
                                    .map_err(|e| format!("send: {e}"))?;
                            }
                            l.flush().map_err(|e| format!("flush: {e}"))?;
                            sent.store(round as usize + 1, Ordering::Release);
                            if it >= warmup {
                                out.push(Stamp::root(t));
                            }
                        } else {
                            let wait = Wait {
                                timeout,
                                barrier: &barrier,
                                sent: &sent,
                            };
                            let t = receive(l, round, count, &wait, &mut early)
                                .map_err(|e| format!("rank {rank}, {size} B: {e}"))?;
                            receiver_done(&mut out, t, &done, it >= warmup);
                        }
                        round += 1;
                    }
                }
                meter.stop()?;
                if rank == 0 {
                    barrier.wait_for(&done, round as usize * (k - 1), || spin(l, &mut early))?;
                    root_mark_probe(&mut out);
                }
                barrier.wait(|| idle(l, &mut early))?;
                Ok(MemberRun {
                    stamps: out,
                    counts: meter.into_counts(),
                    repairs: Vec::new(),
                })
            })();
            if r.is_err() {
                barrier.fail();
            }
            r
        })
        .map_err(|e| format!("could not start a host thread in {}: {e}", h.netns))?;
        handles.push(handle);
    }
    bed::join_hosts(handles, "a host thread panicked").map_err(|e| {
        let ports = match bed.port_drops() {
            Ok(d) if d.is_empty() => String::new(),
            Ok(d) => format!(
                "; port queues that dropped frames: {}",
                d.iter()
                    .map(|p| p.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Err(e) => format!("; port queues not read: {e}"),
        };
        format!("floor: {e}{ports}")
    })
}

/// What a receiver waits with.
struct Wait<'a> {
    /// The whole round's bound.
    timeout: Duration,
    /// The members' barrier, to see another's failure.
    barrier: &'a PollBarrier,
    /// Rounds the root has flushed.
    sent: &'a AtomicUsize,
}

/// Waits until every frame of `round` arrived; returns the instant the last one did.
fn receive(
    l: &mut dyn Link,
    round: u32,
    count: u16,
    w: &Wait<'_>,
    early: &mut Vec<(u32, u16, u16)>,
) -> Result<Instant, String> {
    let timeout = w.timeout;
    let deadline = Instant::now() + timeout;
    // Since when nothing new arrived of a round the root has flushed.
    let mut quiet_since: Option<Instant> = None;
    let mut got = vec![false; usize::from(count)];
    let mut have = 0u16;
    // Marks a frame of this round as seen; true if it is new.
    let mark = |got: &mut [bool], (r, i, c): (u32, u16, u16)| {
        let slot = got
            .get_mut(usize::from(i))
            .filter(|_| r == round && c == count);
        slot.is_some_and(|seen| !std::mem::replace(seen, true))
    };
    for f in early.drain(..) {
        have += u16::from(mark(&mut got, f));
    }
    while have < count {
        if w.barrier.failed() {
            return Err("another member failed".into());
        }
        let now = Instant::now();
        let left = deadline.saturating_duration_since(now);
        if left.is_zero() {
            return Err(format!(
                "{have} of {count} frames of round {round} within {timeout:?} (the floor needs a lossless test-bed)"
            ));
        }
        if w.sent.load(Ordering::Acquire) > round as usize {
            let since = *quiet_since.get_or_insert(now);
            if now.duration_since(since) >= QUIET {
                return Err(format!(
                    "lost {} of {count} frames of round {round}: nothing more arrived {QUIET:?} after the root sent it (the floor has no repair and needs a lossless test-bed)",
                    count - have
                ));
            }
        }
        // One timer per wait, as a protocol receiver waits, of at most the quiet bound so
        // that a round lost whole is seen.
        let wait = left.min(QUIET);
        let before = have;
        l.recv(Some(wait), &mut |_, pdu| {
            if let Some(f) = parse(pdu) {
                have += u16::from(mark(&mut got, f));
            }
        })
        .map_err(|e| format!("recv: {e}"))?;
        if have > before {
            quiet_since = None;
        }
    }
    Ok(Instant::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_split_into_full_frames_and_tags_round_trip() {
        assert_eq!(frame_lens(8, 1500), vec![8]);
        assert_eq!(frame_lens(1500, 1500), vec![1500]);
        assert_eq!(frame_lens(4096, 1500), vec![1500, 1500, 1096]);
        let mut b = Vec::new();
        let n = build(&mut b, 7, 2, 3, 8);
        assert_eq!(n, HEADER);
        assert_eq!(parse(&b[..n]), Some((7, 2, 3)));
        assert_eq!(parse(&b[..8]), None);
        b[0] = b'X';
        assert_eq!(parse(&b), None);
    }
}
