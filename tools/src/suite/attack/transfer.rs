//! Attacks on a keyed `ethbcast send/recv` transfer: a replay of an earlier transfer, and
//! forged control (abort, eviction, progress, final reports) from the hosts' MACs and ranks.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ethbcast::{Rank, BROADCAST_MAC};
// The wire format and the pair channels' ids: the hostile host forges frames of the group
// and of its point-to-point channels, which the library does not export.
use ethbcast_proto::{pair_group, Control, Kind};

use super::harness::verdict;
use super::process::{scratch, Transfer};
use super::{AttackError, Scenario};
use crate::harness::group::bed;
use crate::hostile::{self, pdu, Counter, Spoof};

/// Replay of an earlier keyed transfer: the hostile host records one, then replays it with
/// mutated copies, data ahead of the sender's and abort notices during a second one.
pub(super) fn send_recv_replay(
    prefix: &str,
    hosts: usize,
    bin: &Path,
) -> Result<Scenario, AttackError> {
    let bed = bed(prefix, hosts, 0.0)?;
    let m = hosts - 1;
    let (dir, key) = scratch(prefix)?;
    let t = Transfer {
        bed: &bed,
        bin,
        dir: dir.clone(),
        key,
        receivers: m - 1,
    };
    let netns = bed.hosts()[m].netns.clone();
    let rec = hostile::record(&netns, 50_000)?;
    let mut problems = t.run(1 << 20, 1)?;
    problems
        .iter_mut()
        .for_each(|p| p.insert_str(0, "first transfer: "));
    let frames = rec.stop()?;
    let recorded = frames.len();
    bed.set_learning(m, false)?;
    let attacker = hostile::replay_and_forge(&netns, frames)?;
    std::thread::sleep(Duration::from_millis(100));
    let second = t.run(1 << 20, 2);
    let sent = attacker.stop()?;
    problems.extend(second?);
    let _ = std::fs::remove_dir_all(&dir);
    if recorded < 100 || sent < 100 {
        problems.push(format!(
            "the attack did not happen: {recorded} frames recorded, {sent} sent"
        ));
    }
    Ok(verdict(
        "send-recv-replay-earlier-transfer",
        problems,
        format!("{recorded} frames of a keyed 1 MiB transfer recorded; during a second one with the same key {sent} were replayed, mutated or forged (data ahead of the sender's, abort notices); both transfers byte-identical at {} receivers, every process exited 0", m - 1),
    ))
}

/// Forged control of a keyed transfer: the sender's abort and eviction notices, evict frames,
/// receivers' progress notices and final reports (failed and completed), with and without a
/// tag, from the MACs and ranks of the real hosts.
pub(super) fn send_recv_forged_control(
    prefix: &str,
    hosts: usize,
    bin: &Path,
) -> Result<Scenario, AttackError> {
    use crate::transfer::{Final, Progress, ABORT, EVICTED};
    let bed = bed(prefix, hosts, 0.0)?;
    let m = hosts - 1;
    bed.set_learning(m, false)?;
    let (dir, key) = scratch(prefix)?;
    let macs: Vec<[u8; 6]> = bed.hosts().iter().map(|h| h.mac).collect();
    let bcast = BROADCAST_MAC;
    let attacker = hostile::Hostile::spawn(
        &bed.hosts()[m].netns,
        Duration::from_micros(500),
        move |port, stop: &AtomicBool| {
            let mut template: Option<Vec<u8>> = None;
            let mut ctr = Counter::default();
            let mut last = Instant::now();
            while !stop.load(Ordering::SeqCst) {
                if let Some(f) = port.next_frame() {
                    if pdu(&f).is_some_and(|p| p.kind() == Kind::Data && p.src() == Rank::new(0)) {
                        template = Some(f);
                    }
                }
                if last.elapsed() < Duration::from_millis(3) {
                    continue;
                }
                last = Instant::now();
                let Some(t) = &template else { continue };
                let Some(group) = pdu(t).map(|p| p.group()) else {
                    continue;
                };
                for tag in [true, false] {
                    let from_sender = |dst: Rank, dst_mac| Spoof {
                        src: Rank::new(0),
                        dst,
                        src_mac: macs[0],
                        dst_mac,
                        tag,
                    };
                    let abort = Control::Notice {
                        body: ABORT.to_vec(),
                    };
                    if let Some(x) = hostile::forge_control(
                        t,
                        &abort,
                        from_sender(Rank::BROADCAST, bcast.0),
                        &mut ctr,
                    ) {
                        port.send(&x);
                    }
                    for r in 1..m as u16 {
                        let to = from_sender(Rank::new(r), macs[r as usize]);
                        let evicted = Control::Notice {
                            body: EVICTED.to_vec(),
                        };
                        let evict = Control::Evict { rank: Rank::new(r) };
                        for c in [&evicted, &evict] {
                            if let Some(x) = hostile::forge_control(t, c, to, &mut ctr) {
                                port.send(&x);
                            }
                        }
                        let from_receiver = Spoof {
                            src: Rank::new(r),
                            dst: Rank::new(0),
                            src_mac: macs[r as usize],
                            dst_mac: macs[0],
                            tag,
                        };
                        let progress = Control::Notice {
                            body: Progress {
                                took: 0,
                                all_taken: false,
                            }
                            .encode(),
                        };
                        if let Some(x) =
                            hostile::forge_control(t, &progress, from_receiver, &mut ctr)
                        {
                            port.send(&x);
                        }
                        let pair = pair_group(group, Rank::new(0), Rank::new(r));
                        for ok in [false, true] {
                            let report = Final {
                                ok,
                                bytes: 1 << 20,
                                error: if ok { String::new() } else { "forged".into() },
                            }
                            .encode();
                            for seq in 0..4 {
                                if let Some(x) =
                                    hostile::forge_data(t, pair, from_receiver, seq, seq, &report)
                                {
                                    port.send(&x);
                                }
                            }
                        }
                    }
                }
            }
            port.sent
        },
    )?;
    let t = Transfer {
        bed: &bed,
        bin,
        dir: dir.clone(),
        key,
        receivers: m - 1,
    };
    let run = t.run(1 << 20, 3);
    let sent = attacker.stop()?;
    let mut problems = run?;
    let _ = std::fs::remove_dir_all(&dir);
    if sent < 100 {
        problems.push(format!("the attack did not happen: {sent} frames forged"));
    }
    Ok(verdict(
        "send-recv-forged-abort-evict-report",
        problems,
        format!("{sent} forged frames (the sender's abort and eviction notices, evict frames, receivers' progress notices and final reports, with the attacker's tag and without) during a keyed 1 MiB transfer; byte-identical at {} receivers, every process exited 0", m - 1),
    ))
}
