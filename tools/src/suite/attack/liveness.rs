//! Liveness: a member dies and the hostile host speaks for it (forged control frames,
//! replays of its recorded ones, replays of held-back ones inside the receivers' replay
//! window). The root must evict it within the detector's bound all the same.

use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ethbcast::Rank;
// The wire format: the hostile host forges and reads frames, which the library does not
// export.
use ethbcast_proto::{Control, Kind, ETHERTYPE};
use rand::{RngCore, SeedableRng};

use super::harness::{check_all, hub, is_control, keyed, verdict, workload, Seen, DETECTION};
use super::{io, AttackError, Scenario};
use crate::harness::group::{bed, join_all, ms, spawn_members};
use crate::hostile::{self, pdu, Counter, Spoof};
use crate::netns;
use crate::testbed::Testbed;

/// The keyed members `0..m` broadcast 150 messages; `victim` stops dead after 30 and notes
/// when in `killed_at`. What each member saw.
pub(super) fn run_with_victim(
    bed: &Testbed,
    m: usize,
    victim: u16,
    killed_at: &Arc<Mutex<Option<Instant>>>,
) -> Result<Vec<Result<Seen, String>>, AttackError> {
    let k = Arc::clone(killed_at);
    let handles = spawn_members(
        bed,
        0..m,
        move |mut g| workload(&mut g, 150, 0, 0, Some((victim, 30, &*k))),
        keyed(true),
    )?;
    Ok(join_all(handles))
}

/// The checks of a liveness scenario: every survivor got its 150 messages intact, and the root
/// evicted the dead `victim` within `bound` of its death at `killed`; returns the problems and
/// the time the eviction took.
pub(super) fn judge_eviction(
    results: &[Result<Seen, String>],
    victim: u16,
    killed: Instant,
    bound: Duration,
) -> (Vec<String>, Option<Duration>) {
    let (mut problems, _) = check_all(results, 150, 0, Some(Rank::new(victim)));
    let detect = results.iter().find_map(|r| match r {
        Ok(s) if s.rank == Rank::new(0) => s
            .evicted
            .iter()
            .find(|(r, _)| *r == Rank::new(victim))
            .map(|&(_, at)| at.saturating_duration_since(killed)),
        _ => None,
    });
    match detect {
        Some(d) if d <= bound => {}
        Some(d) => problems.push(format!(
            "rank {victim} evicted after {:.1} ms, beyond the bound of {:.1} ms",
            ms(d),
            ms(bound)
        )),
        None => problems.push(format!("the root never evicted the dead rank {victim}")),
    }
    (problems, detect)
}

/// Spoofed liveness: a member dies; the hostile host replays its recorded control frames
/// (heartbeats, pongs, acknowledgements) and forges new ones with its MAC and rank. The dead
/// member must still be evicted within the detector's bound and the others complete.
///
/// With `replay` the hostile host replays the dead member's recorded control frames (and
/// mutated copies); without, it forges heartbeats, pongs and acknowledgements as the dead
/// member, tagged with its own key and untagged.
pub(super) fn spoofed_liveness(
    prefix: &str,
    hosts: usize,
    replay: bool,
) -> Result<Scenario, AttackError> {
    let name = if replay {
        "spoofed-liveness-replayed"
    } else {
        "spoofed-liveness-forged"
    };
    let bed = bed(prefix, hosts, 0.0)?;
    hub(&bed)?;
    let m = hosts - 1;
    let victim = (m - 1) as u16;
    let macs: Vec<[u8; 6]> = bed.hosts().iter().map(|h| h.mac).collect();
    let killed_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let k = killed_at.clone();
    let attacker = hostile::Hostile::spawn(
        &bed.hosts()[m].netns,
        Duration::from_millis(1),
        move |port, stop: &AtomicBool| {
            let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
            let mut ctr = Counter::default();
            let vmac = macs[victim as usize];
            let (mut template, mut recorded) = (None::<Vec<u8>>, Vec::<Vec<u8>>::new());
            let (mut spoofed, mut last) = (0usize, Instant::now());
            while !stop.load(Ordering::SeqCst) {
                if let Some(f) = port.next_frame() {
                    if f[6..12] == vmac && is_control(&f) {
                        if recorded.len() < 1024 {
                            recorded.push(f);
                        } else {
                            let at = rng.next_u32() as usize % recorded.len();
                            recorded[at] = f;
                        }
                    } else if template.is_none() && pdu(&f).is_some_and(|p| p.kind() == Kind::Data)
                    {
                        template = Some(f);
                    }
                }
                let dead = k.lock().expect("lock").is_some();
                if !dead || last.elapsed() < Duration::from_millis(5) {
                    continue;
                }
                last = Instant::now();
                let before = port.sent;
                if let Some(f) = hostile::pick(&recorded, &mut rng).filter(|_| replay) {
                    port.send(f);
                    if let Some(x) = hostile::mutate(f, &mut rng) {
                        port.send(&x);
                    }
                }
                if replay {
                    spoofed += port.sent - before;
                    continue;
                }
                let Some(t) = &template else { continue };
                for dst in (0..m as u16).filter(|&r| r != victim) {
                    for tag in [true, false] {
                        let spoof = Spoof {
                            src: Rank::new(victim),
                            dst: Rank::new(dst),
                            src_mac: vmac,
                            dst_mac: macs[dst as usize],
                            tag,
                        };
                        for c in [
                            Control::Heartbeat {
                                table: vec![u16::MAX / 2; m],
                            },
                            Control::Pong {
                                rank: Rank::new(victim),
                            },
                            Control::Ack {
                                next: 1 << 20,
                                seen: None,
                            },
                        ] {
                            if let Some(x) = hostile::forge_control(t, &c, spoof, &mut ctr) {
                                port.send(&x);
                            }
                        }
                    }
                }
                spoofed += port.sent - before;
            }
            (spoofed, recorded.len())
        },
    )?;
    let results = run_with_victim(&bed, m, victim, &killed_at)?;
    let (spoofed, recorded) = attacker.stop()?;
    let bound = DETECTION.bound(m as u16);
    let killed = killed_at.lock().expect("lock").unwrap_or_else(Instant::now);
    let (mut problems, detect) = judge_eviction(&results, victim, killed, bound);
    if spoofed == 0 || (replay && recorded == 0) {
        problems.push(format!(
            "the attack did not happen: {recorded} of the victim's frames recorded, {spoofed} spoofed frames sent"
        ));
    }
    if !problems.is_empty() && detect.is_some_and(|d| d <= bound) {
        problems.push(format!(
            "the root evicted rank {victim} after {:.1} ms (bound {:.1} ms)",
            detect.map_or(f64::NAN, ms),
            ms(bound)
        ));
    }
    let what = if replay {
        format!("replays of {recorded} recorded control frames and mutated copies")
    } else {
        "forged heartbeats, pongs and acks, with the attacker's tag and without".to_string()
    };
    Ok(Scenario {
        detection_ms: detect.map(ms),
        bound_ms: Some(ms(bound)),
        ..verdict(
            name,
            problems,
            format!(
                "rank {victim} stopped after 30 of 150 messages; the hostile host sent {spoofed} frames as rank {victim} ({what}); the root evicted it after {:.1} ms (bound {:.1} ms); the others got 150/150",
                detect.map_or(f64::NAN, ms),
                ms(bound)
            ),
        )
    })
}

/// Control counters of the dead member that the switch keeps from the other members (a
/// quarter of them: counter = 1 mod 4) while the hostile host records them all.
pub(super) const HELD_BACK: (u32, u32) = (4, 1);

/// Replayed liveness from inside the replay window: while a member lives, the switch keeps a
/// quarter of its control frames from the other members (an nft rule on the bridge: the
/// stand-in for an attacker who jams or delays them) but not from the hostile host, which
/// records them all. Once the member died, the hostile host replays the held-back ones that
/// lie inside each receiver's replay window (at least 8 and less than 64 counters below the
/// newest it saw reach that receiver): authentic frames, never seen, that the window takes
/// once. One every 60 ms, a third of the suspicion threshold, so that each one accepted as a
/// sign of life would keep the member alive. It must still be evicted within the bound.
pub(super) fn spoofed_liveness_in_window(
    prefix: &str,
    hosts: usize,
) -> Result<Scenario, AttackError> {
    let name = "spoofed-liveness-in-window";
    let bed = bed(prefix, hosts, 0.0)?;
    hub(&bed)?;
    let m = hosts - 1;
    let victim = (m - 1) as u16;
    let macs: Vec<[u8; 6]> = bed.hosts().iter().map(|h| h.mac).collect();
    let vmac = macs[victim as usize];
    hold_back(&bed, usize::from(victim), m)?;
    let killed_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let k = killed_at.clone();
    let attacker = hostile::Hostile::spawn(
        &bed.hosts()[m].netns,
        Duration::from_millis(1),
        move |port, stop: &AtomicBool| {
            // (group, destination, control counter, frame), most recent last.
            let mut recorded = std::collections::VecDeque::<(u32, Rank, u32, Vec<u8>)>::new();
            let mut plan: Option<std::collections::VecDeque<Vec<u8>>> = None;
            let (mut replayed, mut planned, mut last) = (0usize, 0usize, Instant::now());
            while !stop.load(Ordering::SeqCst) {
                if let Some(f) = port.next_frame() {
                    if plan.is_none() && f[6..12] == vmac && is_control(&f) {
                        if let Some(p) = pdu(&f) {
                            // A control frame's `msg_len` is its sender's control counter.
                            let key = (p.group(), p.dst(), p.msg_len());
                            recorded.push_back((key.0, Rank::new(key.1.get()), key.2, f));
                            if recorded.len() > 4096 {
                                recorded.pop_front();
                            }
                        }
                    }
                }
                let died = *k.lock().expect("lock");
                let Some(died) = died else { continue };
                // Frames the member had in flight when it stopped are recorded first.
                if died.elapsed() < Duration::from_millis(5) {
                    continue;
                }
                let plan = plan.get_or_insert_with(|| {
                    let p = in_window_held_back(&recorded);
                    planned = p.len();
                    p
                });
                if last.elapsed() >= Duration::from_millis(60) {
                    if let Some(f) = plan.pop_front() {
                        port.send(&f);
                        replayed += 1;
                        last = Instant::now();
                    }
                }
            }
            (replayed, planned, recorded.len())
        },
    )?;
    let results = run_with_victim(&bed, m, victim, &killed_at)?;
    let (replayed, planned, recorded) = attacker.stop()?;
    let bound = DETECTION.bound(m as u16);
    let killed = killed_at.lock().expect("lock").unwrap_or_else(Instant::now);
    let (mut problems, detect) = judge_eviction(&results, victim, killed, bound);
    if replayed == 0 {
        problems.push(format!(
            "the attack did not happen: {recorded} of the victim's control frames recorded, {planned} held back inside a window, {replayed} replayed"
        ));
    }
    Ok(Scenario {
        detection_ms: detect.map(ms),
        bound_ms: Some(ms(bound)),
        ..verdict(
            name,
            problems,
            format!(
                "rank {victim} stopped after 30 of 150 messages; the switch kept its control counters = {} mod {} from the members; the hostile host recorded {recorded} of its control frames and replayed {replayed} of the {planned} held back inside a receiver's replay window, one per 60 ms; the root evicted it after {:.1} ms (bound {:.1} ms); the others got 150/150",
                HELD_BACK.1,
                HELD_BACK.0,
                detect.map_or(f64::NAN, ms),
                ms(bound)
            ),
        )
    })
}

/// Keeps the control frames of host `victim` whose counter is [`HELD_BACK`] from every host
/// but the hostile one (`hostile`): an nft rule in the switch, gone with the test-bed.
pub(super) fn hold_back(bed: &Testbed, victim: usize, hostile: usize) -> Result<(), AttackError> {
    use crate::testbed::bridge_port_name;
    // Offsets in bits from the start of the Ethernet header (14 bytes): the PDU's kind (byte
    // 1) and the low two bits of its control counter (`msg_len`, bytes 20..24, big-endian).
    let kind = (14 + 1) * 8;
    let low_bits = (14 + 23) * 8 + 6;
    let (of, held) = HELD_BACK;
    debug_assert_eq!(of, 4, "two bits of the counter");
    let script = format!(
        "add table bridge ebattack\n\
         add chain bridge ebattack hold {{ type filter hook forward priority -2; policy accept; }}\n\
         add rule bridge ebattack hold iifname \"{}\" oifname != \"{}\" ether type {:#06x} @ll,{kind},8 > {} @ll,{kind},8 != {} @ll,{low_bits},2 {held} counter drop\n",
        bridge_port_name(victim),
        bridge_port_name(hostile),
        ETHERTYPE,
        Kind::Repair.code(),
        Kind::Join.code(),
    );
    let mut child = netns::command_in(bed.switch_netns(), "nft")
        .map_err(io("the switch namespace"))?
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(io("nft"))?;
    if let Some(mut stdin) = child.stdin.take() {
        use std::io::Write;
        stdin.write_all(script.as_bytes()).map_err(io("nft"))?;
    }
    let out = child.wait_with_output().map_err(io("nft"))?;
    if !out.status.success() {
        return Err(AttackError::Io {
            context: format!("nft rule holding back rank {victim}'s control frames"),
            source: std::io::Error::other(String::from_utf8_lossy(&out.stderr).into_owned()),
        });
    }
    Ok(())
}

/// Of the recorded control frames (group, destination, counter, frame), those the switch held
/// back ([`HELD_BACK`]) that lie inside the replay window of their receiver: at least 8 and
/// less than 64 counters below the newest frame that reached it (addressed to it or to all,
/// and not held back). Oldest first.
pub(super) fn in_window_held_back(
    recorded: &std::collections::VecDeque<(u32, Rank, u32, Vec<u8>)>,
) -> std::collections::VecDeque<Vec<u8>> {
    let (of, held) = (HELD_BACK.0, HELD_BACK.1);
    let top = |group: u32, dst: Rank| {
        recorded
            .iter()
            .filter(|(g, d, c, _)| {
                *g == group && (*d == dst || *d == Rank::BROADCAST) && c % of != held
            })
            .map(|(_, _, c, _)| *c)
            .max()
    };
    let mut out: Vec<(u32, Vec<u8>)> = recorded
        .iter()
        .filter(|(_, d, c, _)| *d != Rank::BROADCAST && c % of == held)
        .filter(|(g, d, c, _)| top(*g, *d).is_some_and(|t| t >= c.saturating_add(8) && t - c < 64))
        .map(|(_, _, c, f)| (*c, f.clone()))
        .collect();
    out.sort_by_key(|(c, _)| *c);
    out.into_iter().map(|(_, f)| f).collect()
}
