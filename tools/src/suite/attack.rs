//! `ethbcast-suite attack`: the attacks of a host on the segment without the key, against a
//! keyed library group and a keyed `ethbcast send/recv` transfer, on a test-bed of their own.
//!
//! The test-bed has N hosts; the last one is hostile ([`crate::hostile`]): it has no key, reads
//! what its port sees, replays it and forges frames from frames of the running session (each
//! session has its own wire group id and key, derived at join, so a forgery must start from a
//! live frame to reach the session's checks at all). The others are members: threads in
//! their namespaces for the library group, `ethbcast send/recv` processes for the transfer.
//! Where the attacker sends with other hosts' source MACs, MAC learning is off on the bridge
//! ports (switch port security; layer-2 MAC spoofing of unicast is outside the threat model).
//! Where it must see unicast between members, learning is off on every port: the bridge then
//! floods every frame, as a hub would, and the attacker sees everything.
//!
//! A scenario passes when the victims completed with the right bytes (or a dead member was
//! evicted within the detector's bound) and nothing forged was accepted.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ethbcast::{key_from_passphrase, Algorithm, Group, GroupError, GroupOptions, Membership};
use ethbcast_proto::wire::{self, BarrierAlgo, BarrierOp, Control, Kind};
use rand::{RngCore, SeedableRng};
use serde::Serialize;

use ethbcast::Detection;
use ethbcast_proto::detect::Gossip;

use crate::bench::bed::{bed, join_all, ms, msg, spawn_members};
use crate::hostile::{self, pdu, Counter, HostileError, Spoof};
use crate::netns;
use crate::testbed::{Testbed, TestbedError};
use ethbcast::Rank;

mod keys;

/// Outcome of one attack.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Scenario {
    /// Scenario name.
    pub name: String,
    /// Whether the victims completed with the right bytes and nothing forged was accepted.
    pub passed: bool,
    /// What was done and what was seen.
    pub detail: String,
    /// Liveness scenarios: how long after the victim died the root evicted it (ms; absent if
    /// it never did).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detection_ms: Option<f64>,
    /// Liveness scenarios: the detector's bound that `detection_ms` must meet (ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bound_ms: Option<f64>,
}

/// Every scenario.
#[derive(Debug, Clone, Serialize)]
pub struct AttackReport {
    /// One entry per scenario.
    pub scenarios: Vec<Scenario>,
}

/// Why a scenario could not be run.
#[derive(Debug, thiserror::Error)]
pub enum AttackError {
    /// The test-bed failed.
    #[error(transparent)]
    Testbed(#[from] TestbedError),
    /// The hostile host failed.
    #[error(transparent)]
    Hostile(#[from] HostileError),
    /// A file or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The `ethbcast` binary was not found.
    #[error("no ethbcast binary at {0} (build it, or pass --ethbcast PATH)")]
    NoBinary(PathBuf),
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> AttackError {
    let context = context.into();
    move |source| AttackError::Io { context, source }
}

/// Names of the scenarios, in the order they run.
pub const SCENARIOS: [&str; 18] = [
    "spoofed-liveness-forged",
    "spoofed-liveness-replayed",
    "replay-earlier-session",
    "replay-control-in-session",
    "forged-join",
    "forged-barrier-epoch",
    "flood-random-and-mutated",
    "send-recv-replay-earlier-transfer",
    "send-recv-forged-abort-evict-report",
    "spoofed-liveness-in-window",
    "join-challenge-flood",
    "join-replayed-rosters",
    "join-resent-hellos",
    "capi-keyed-forgery",
    "pre-tag-allocation",
    "replay-across-counter-wrap",
    "keyless-stranger-sender",
    "passphrase-dictionary",
];

/// The detector of the scenarios: the gossip period of `ethbcast-suite faults` tripled, so
/// that the bound (360 ms for 3 members) holds on a machine whose cores are shared: a tick
/// that slips by tens of milliseconds would otherwise break a 120 ms bound with or without an
/// attacker, and the scenario is about the attacker.
pub const DETECTION: Detection = Detection {
    protocol: Gossip::DoubleBinaryRoundRobin,
    t_gossip: Duration::from_millis(30),
};

/// The group key of the scenarios.
fn group_key() -> ethbcast::Key {
    static KEY: std::sync::OnceLock<ethbcast::Key> = std::sync::OnceLock::new();
    KEY.get_or_init(|| {
        key_from_passphrase("ethbcast-bench attack", GroupOptions::default().group_id)
            .expect("the passphrase is stretched")
    })
    .clone()
}

fn keyed(detect: bool) -> GroupOptions {
    GroupOptions {
        key: Some(group_key()),
        detector: detect.then_some(DETECTION),
        timeout: Duration::from_secs(20),
        ..GroupOptions::default()
    }
}

/// Message `i` of a session marked `salt` (sessions differ in content, so a replayed message of
/// an earlier one would show).
fn message(i: usize, salt: u8) -> Vec<u8> {
    msg(i).into_iter().map(|b| b ^ salt).collect()
}

/// What a member saw of a workload.
#[derive(Debug, Clone)]
struct Seen {
    rank: Rank,
    /// Messages delivered equal to the root's.
    intact: usize,
    /// Barriers completed.
    barriers: usize,
    /// Ranks this member evicted, with when.
    evicted: Vec<(Rank, Instant)>,
    /// Frames this member refused (malformed, foreign, wrong MAC, engine drops).
    refused: u64,
}

fn refused(g: &Group) -> u64 {
    let s = g.member().stats();
    s.malformed + s.foreign + s.mac_mismatch + s.dropped
}

/// `rounds` broadcasts from rank 0 (a barrier after every `barrier_every`-th), then a short
/// drain. With `stop`, that rank returns before round `at`, noting when.
fn workload(
    g: &mut Group,
    rounds: usize,
    salt: u8,
    barrier_every: usize,
    stop: Option<(u16, usize, &Mutex<Option<Instant>>)>,
) -> Result<Seen, GroupError> {
    let me = g.rank();
    let (mut intact, mut barriers) = (0, 0);
    for i in 0..rounds {
        if let Some((victim, at, when)) = stop {
            if me == Rank::new(victim) && i == at {
                *when.lock().expect("lock") = Some(Instant::now());
                return Ok(Seen {
                    rank: me,
                    intact,
                    barriers,
                    evicted: Vec::new(),
                    refused: 0,
                });
            }
        }
        let mut buf = if me == Rank::new(0) {
            message(i, salt)
        } else {
            Vec::new()
        };
        g.bcast_with(Rank::new(0), &mut buf, Algorithm::Simple)?;
        intact += usize::from(buf == message(i, salt));
        if barrier_every > 0 && i % barrier_every == barrier_every - 1 {
            g.barrier()?;
            barriers += 1;
        }
    }
    g.flush()?;
    for _ in 0..20 {
        g.progress(Duration::from_millis(10))?;
    }
    Ok(Seen {
        rank: me,
        intact,
        barriers,
        evicted: g.member().evicted().to_vec(),
        refused: refused(g),
    })
}

/// Checks that every member delivered `rounds` intact messages and `barriers` barriers;
/// returns the problems found and the frames refused in all.
fn check_all(
    results: &[Result<Seen, String>],
    rounds: usize,
    barriers: usize,
    skip: Option<Rank>,
) -> (Vec<String>, u64) {
    let mut problems = Vec::new();
    let mut total = 0;
    for r in results {
        match r {
            Ok(s) if Some(s.rank) == skip => {}
            Ok(s) => {
                total += s.refused;
                if s.intact != rounds || s.barriers != barriers {
                    problems.push(format!(
                        "rank {} delivered {}/{rounds} intact messages and {}/{barriers} barriers",
                        s.rank, s.intact, s.barriers
                    ));
                }
            }
            Err(e) => problems.push(e.clone()),
        }
    }
    (problems, total)
}

fn verdict(name: &str, problems: Vec<String>, ok: String) -> Scenario {
    Scenario {
        name: name.into(),
        passed: problems.is_empty(),
        detail: if problems.is_empty() {
            ok
        } else {
            problems.join("; ")
        },
        ..Scenario::default()
    }
}

/// MAC learning off on every port: the bridge floods every frame (a hub), so the hostile host
/// sees the members' unicast and cannot divert anybody's.
fn hub(bed: &Testbed) -> Result<(), TestbedError> {
    for i in 0..bed.hosts().len() {
        bed.set_learning(i, false)?;
    }
    Ok(())
}

fn is_control(eth: &[u8]) -> bool {
    pdu(eth).is_some_and(|p| !p.kind().is_data() && p.kind() != Kind::Join)
}

/// The keyed members `0..m` broadcast 150 messages; `victim` stops dead after 30 and notes
/// when in `killed_at`. What each member saw.
fn run_with_victim(
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
fn judge_eviction(
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
pub fn spoofed_liveness(prefix: &str, hosts: usize, replay: bool) -> Result<Scenario, AttackError> {
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
const HELD_BACK: (u32, u32) = (4, 1);

/// Replayed liveness from inside the replay window: while a member lives, the switch keeps a
/// quarter of its control frames from the other members (an nft rule on the bridge: the
/// stand-in for an attacker who jams or delays them) but not from the hostile host, which
/// records them all. Once the member died, the hostile host replays the held-back ones that
/// lie inside each receiver's replay window (at least 8 and less than 64 counters below the
/// newest it saw reach that receiver): authentic frames, never seen, that the window takes
/// once. One every 60 ms, a third of the suspicion threshold, so that each one accepted as a
/// sign of life would keep the member alive. It must still be evicted within the bound.
pub fn spoofed_liveness_in_window(prefix: &str, hosts: usize) -> Result<Scenario, AttackError> {
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
fn hold_back(bed: &Testbed, victim: usize, hostile: usize) -> Result<(), AttackError> {
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
        wire::ETHERTYPE,
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
fn in_window_held_back(
    recorded: &std::collections::VecDeque<(u32, Rank, u32, Vec<u8>)>,
) -> std::collections::VecDeque<Vec<u8>> {
    let (of, held) = (HELD_BACK.0, HELD_BACK.1);
    let top = |group: u32, dst: Rank| {
        recorded
            .iter()
            .filter(|(g, d, c, _)| *g == group && (*d == dst || *d == wire::ALL) && c % of != held)
            .map(|(_, _, c, _)| *c)
            .max()
    };
    let mut out: Vec<(u32, Vec<u8>)> = recorded
        .iter()
        .filter(|(_, d, c, _)| *d != wire::ALL && c % of == held)
        .filter(|(g, d, c, _)| top(*g, *d).is_some_and(|t| t >= c.saturating_add(8) && t - c < 64))
        .map(|(_, _, c, f)| (*c, f.clone()))
        .collect();
    out.sort_by_key(|(c, _)| *c);
    out.into_iter().map(|(_, f)| f).collect()
}

/// Replay from an earlier session with the same key: everything recorded in session 1 is
/// replayed (with mutated copies) during session 2.
pub fn replay_earlier_session(prefix: &str, hosts: usize) -> Result<Scenario, AttackError> {
    let bed = bed(prefix, hosts, 0.0)?;
    hub(&bed)?;
    let m = hosts - 1;
    let netns = bed.hosts()[m].netns.clone();
    let rec = hostile::record(&netns, 100_000)?;
    let first = join_all(spawn_members(
        &bed,
        0..m,
        |mut g| workload(&mut g, 60, 1, 10, None),
        keyed(false),
    )?);
    let frames = rec.stop()?;
    let recorded = frames.len();
    let (mut problems, _) = check_all(&first, 60, 6, None);
    problems
        .iter_mut()
        .for_each(|p| p.insert_str(0, "session 1: "));
    let attacker = hostile::replay_and_forge(&netns, frames)?;
    std::thread::sleep(Duration::from_millis(100));
    let second = join_all(spawn_members(
        &bed,
        0..m,
        |mut g| workload(&mut g, 60, 2, 10, None),
        keyed(false),
    )?);
    let sent = attacker.stop()?;
    let (p2, refused) = check_all(&second, 60, 6, None);
    problems.extend(p2);
    if recorded < 100 || sent < 100 {
        problems.push(format!(
            "the attack did not happen: {recorded} frames recorded, {sent} sent"
        ));
    }
    Ok(verdict(
        "replay-earlier-session",
        problems,
        format!("{recorded} frames of session 1 recorded; {sent} replayed, mutated or forged during session 2 with the same key; every member got session 2's 60 messages intact and 6 barriers; {refused} frames refused"),
    ))
}

/// In-session replay of control frames: the hostile host replays (and mutates) the members'
/// acknowledgements, heartbeats, barrier and repair frames of the running session.
pub fn replay_control_in_session(prefix: &str, hosts: usize) -> Result<Scenario, AttackError> {
    let bed = bed(prefix, hosts, 0.0)?;
    hub(&bed)?;
    let m = hosts - 1;
    let attacker = hostile::Hostile::spawn(
        &bed.hosts()[m].netns,
        Duration::from_micros(500),
        |port, stop: &AtomicBool| {
            let mut rng = rand::rngs::SmallRng::seed_from_u64(3);
            let mut seen: Vec<(Instant, Vec<u8>)> = Vec::new();
            let mut last = Instant::now();
            while !stop.load(Ordering::SeqCst) {
                if let Some(f) = port.next_frame() {
                    if is_control(&f) {
                        if seen.len() >= 512 {
                            seen.remove(0);
                        }
                        seen.push((Instant::now(), f));
                    }
                }
                if last.elapsed() < Duration::from_millis(1) {
                    continue;
                }
                last = Instant::now();
                // The newest frame old enough to have been taken, and a random older one.
                let old: Vec<&Vec<u8>> = seen
                    .iter()
                    .filter(|(t, _)| t.elapsed() > Duration::from_millis(5))
                    .map(|(_, f)| f)
                    .collect();
                for f in [old.last().copied(), hostile::pick(&old, &mut rng).copied()]
                    .into_iter()
                    .flatten()
                {
                    port.send(f);
                    if let Some(x) = hostile::mutate(f, &mut rng) {
                        port.send(&x);
                    }
                }
            }
            port.sent
        },
    )?;
    let results = join_all(spawn_members(
        &bed,
        0..m,
        |mut g| workload(&mut g, 80, 3, 5, None),
        keyed(true),
    )?);
    let sent = attacker.stop()?;
    let (mut problems, refused) = check_all(&results, 80, 16, None);
    for s in results.iter().flatten() {
        if !s.evicted.is_empty() {
            problems.push(format!("rank {} evicted {:?}", s.rank, s.evicted));
        }
    }
    if sent < 100 {
        problems.push(format!("the attack did not happen: {sent} frames replayed"));
    }
    Ok(verdict(
        "replay-control-in-session",
        problems,
        format!("{sent} control frames of the running session replayed or mutated; every member got 80/80 messages and 16 barriers, nobody was evicted; {refused} frames refused"),
    ))
}

/// Forged join: the members discover each other with the key; the hostile host runs a member
/// of its own with another key, and replays and mutates every join frame it sees.
pub fn forged_join(prefix: &str, hosts: usize) -> Result<Scenario, AttackError> {
    let bed = bed(prefix, hosts, 0.0)?;
    let m = hosts - 1;
    bed.set_learning(m, false)?;
    let netns = bed.hosts()[m].netns.clone();
    let replayer = hostile::Hostile::spawn(
        &netns,
        Duration::from_micros(500),
        |port, stop: &AtomicBool| {
            let mut rng = rand::rngs::SmallRng::seed_from_u64(4);
            let mut joins: Vec<Vec<u8>> = Vec::new();
            let mut last = Instant::now();
            while !stop.load(Ordering::SeqCst) {
                if let Some(f) = port.next_frame() {
                    if pdu(&f).is_some_and(|p| p.kind() == Kind::Join) && joins.len() < 4096 {
                        joins.push(f);
                    }
                }
                if last.elapsed() >= Duration::from_millis(1) {
                    last = Instant::now();
                    if let Some(f) = hostile::pick(&joins, &mut rng) {
                        port.send(f);
                        if let Some(x) = hostile::mutate(f, &mut rng) {
                            port.send(&x);
                        }
                    }
                }
            }
            (port.sent, joins.len())
        },
    )?;
    let intruder = netns::spawn_in(&netns, move || {
        let opts = GroupOptions {
            key: key_from_passphrase("not the group's key", GroupOptions::default().group_id).ok(),
            timeout: Duration::from_secs(4),
            ..GroupOptions::default()
        };
        Group::open("eth0", Membership::Discover { expected: m as u16 }, opts).map(|g| g.rank())
    })
    .map_err(io("spawn the intruder"))?;
    let members: Vec<_> = bed.hosts()[..m]
        .iter()
        .map(|h| {
            netns::spawn_in(&h.netns, move || -> Result<_, GroupError> {
                let mut g = Group::open(
                    "eth0",
                    Membership::Discover { expected: m as u16 },
                    keyed(false),
                )?;
                let roster: Vec<[u8; 6]> = (0..g.size())
                    .filter_map(|r| g.member().mac_of(Rank::new(r)))
                    .map(|m| m.octets())
                    .collect();
                let seen = workload(&mut g, 10, 4, 5, None)?;
                Ok((seen, roster))
            })
            .map_err(io("spawn a member"))
        })
        .collect::<Result<_, _>>()?;
    let results = join_all(members);
    let intruder = intruder.join().map_err(|_| HostileError::Panicked)?;
    let (sent, joins) = replayer.stop()?;
    let mut expected: Vec<[u8; 6]> = bed.hosts()[..m].iter().map(|h| h.mac).collect();
    expected.sort();
    let seen: Vec<Result<Seen, String>> =
        results.iter().map(|r| r.clone().map(|(s, _)| s)).collect();
    let (mut problems, _) = check_all(&seen, 10, 2, None);
    let mut ranks: Vec<Rank> = seen.iter().flatten().map(|s| s.rank).collect();
    ranks.sort();
    if ranks != Rank::all(m as u16).collect::<Vec<_>>() {
        problems.push(format!("ranks {ranks:?}, expected 0..{m}"));
    }
    for (s, roster) in results.iter().flatten() {
        let mut r = roster.clone();
        r.sort();
        if r != expected {
            problems.push(format!(
                "rank {}'s roster {:?} is not the {m} members",
                s.rank,
                r.iter().map(crate::testbed::format_mac).collect::<Vec<_>>()
            ));
        }
    }
    if let Ok(rank) = intruder {
        problems.push(format!(
            "the intruder without the key joined as rank {rank}"
        ));
    }
    if joins == 0 || sent == 0 {
        problems.push(format!(
            "the attack did not happen: {joins} join frames seen, {sent} sent"
        ));
    }
    Ok(verdict(
        "forged-join",
        problems,
        format!("{m} members discovered each other with the key while a host with another key tried to join and {sent} recorded or mutated join frames (of {joins} seen) were replayed; the roster is exactly the {m} members, ranks 0..{m}, the intruder's join failed, 10 broadcasts and 2 barriers went through"),
    ))
}

/// Forged barrier epochs: the hostile host replays barrier frames and forges releases and
/// arrivals of later and far epochs. One member enters every barrier 150 ms late, so a barrier
/// a forgery completed early would show in the others' wait.
pub fn forged_barrier_epoch(prefix: &str, hosts: usize) -> Result<Scenario, AttackError> {
    let bed = bed(prefix, hosts, 0.0)?;
    let m = hosts - 1;
    bed.set_learning(m, false)?;
    let macs: Vec<[u8; 6]> = bed.hosts().iter().map(|h| h.mac).collect();
    let attacker = hostile::Hostile::spawn(
        &bed.hosts()[m].netns,
        Duration::from_micros(500),
        move |port, stop: &AtomicBool| {
            let mut rng = rand::rngs::SmallRng::seed_from_u64(5);
            let mut ctr = Counter::default();
            let mut barriers: Vec<Vec<u8>> = Vec::new();
            let mut last = Instant::now();
            while !stop.load(Ordering::SeqCst) {
                if let Some(f) = port.next_frame() {
                    if pdu(&f).is_some_and(|p| p.kind() == Kind::Barrier) && barriers.len() < 4096 {
                        barriers.push(f);
                    }
                }
                if last.elapsed() < Duration::from_millis(2) {
                    continue;
                }
                last = Instant::now();
                let Some(f) = hostile::pick(&barriers, &mut rng).cloned() else {
                    continue;
                };
                port.send(&f);
                if let Some(x) = hostile::mutate(&f, &mut rng) {
                    port.send(&x);
                }
                let Some(Control::Barrier(b)) = pdu(&f).and_then(|p| Control::parse(&p).ok())
                else {
                    continue;
                };
                for epoch in [b.epoch + 1, b.epoch + 2, b.epoch + 1000, 1 << 30] {
                    for tag in [true, false] {
                        let release = Control::Barrier(wire::BarrierMsg {
                            algo: BarrierAlgo::Broadcast,
                            op: BarrierOp::Release,
                            epoch,
                            ..b.clone()
                        });
                        let spoof = Spoof::from_root(macs[0], tag);
                        if let Some(x) = hostile::forge_control(&f, &release, spoof, &mut ctr) {
                            port.send(&x);
                        }
                        let arrive = Control::Barrier(wire::BarrierMsg {
                            algo: BarrierAlgo::Broadcast,
                            op: BarrierOp::Arrive,
                            epoch,
                            set: vec![0xFF; m.div_ceil(8)],
                            ..b.clone()
                        });
                        for src in 1..m as u16 {
                            let spoof = Spoof {
                                src: Rank::new(src),
                                dst: Rank::new(0),
                                src_mac: macs[src as usize],
                                dst_mac: macs[0],
                                tag,
                            };
                            if let Some(x) = hostile::forge_control(&f, &arrive, spoof, &mut ctr) {
                                port.send(&x);
                            }
                        }
                    }
                }
            }
            (port.sent, barriers.len())
        },
    )?;
    let late = (m - 1) as u16;
    let results = join_all(spawn_members(
        &bed,
        0..m,
        move |mut g| {
            let mut waits = Vec::new();
            for _ in 0..8 {
                if g.rank() == Rank::new(late) {
                    std::thread::sleep(Duration::from_millis(150));
                }
                let t = Instant::now();
                g.barrier()?;
                waits.push(t.elapsed());
            }
            Ok((g.rank(), waits))
        },
        keyed(false),
    )?);
    let (sent, seen) = attacker.stop()?;
    let mut problems = Vec::new();
    let mut shortest = Duration::MAX;
    for r in &results {
        match r {
            Ok((rank, _)) if *rank == Rank::new(late) => {}
            Ok((rank, waits)) => {
                // The first barrier also waits for the others to start; the late member's
                // 150 ms bound every later one from below.
                for (k, w) in waits.iter().enumerate().skip(1) {
                    shortest = shortest.min(*w);
                    if *w < Duration::from_millis(100) {
                        problems.push(format!(
                            "rank {rank}'s barrier {k} returned after {:.1} ms, before the late member entered",
                            ms(*w)
                        ));
                    }
                }
            }
            Err(e) => problems.push(e.clone()),
        }
    }
    if seen == 0 || sent == 0 {
        problems.push(format!(
            "the attack did not happen: {seen} barrier frames seen, {sent} sent"
        ));
    }
    Ok(verdict(
        "forged-barrier-epoch",
        problems,
        format!("{sent} barrier frames replayed, mutated or forged (releases and arrivals of epochs +1, +2, +1000 and 2^30, with and without a tag); every barrier still waited for the member 150 ms late (shortest wait {:.1} ms)", ms(shortest)),
    ))
}

/// A flood of random CRC-valid frames of the session, mutated copies of live frames and plain
/// noise while the group broadcasts and synchronises.
pub fn flood(prefix: &str, hosts: usize) -> Result<Scenario, AttackError> {
    let bed = bed(prefix, hosts, 0.0)?;
    let m = hosts - 1;
    bed.set_learning(m, false)?;
    let hmac = bed.hosts()[m].mac;
    let attacker = hostile::Hostile::spawn(
        &bed.hosts()[m].netns,
        Duration::from_micros(200),
        move |port, stop: &AtomicBool| {
            let mut rng = rand::rngs::SmallRng::seed_from_u64(6);
            let mut live: Vec<Vec<u8>> = Vec::new();
            let mut burst = 0u32;
            while !stop.load(Ordering::SeqCst) {
                if let Some(f) = port.next_frame() {
                    if live.len() < 1024 {
                        live.push(f);
                    } else {
                        let at = rng.next_u32() as usize % live.len();
                        live[at] = f;
                    }
                }
                port.send(&hostile::noise(hmac, &mut rng));
                if let Some(t) = hostile::pick(&live, &mut rng).cloned() {
                    if let Some(x) = hostile::random_from(&t, &mut rng) {
                        port.send(&x);
                    }
                    if let Some(x) = hostile::mutate(&t, &mut rng) {
                        port.send(&x);
                    }
                }
                // Bounded, so that the two cores stay with the members rather than the flood.
                burst += 1;
                if burst.is_multiple_of(16) {
                    std::thread::sleep(Duration::from_micros(500));
                }
            }
            port.sent
        },
    )?;
    let results = join_all(spawn_members(
        &bed,
        0..m,
        |mut g| workload(&mut g, 60, 6, 10, None),
        keyed(false),
    )?);
    let sent = attacker.stop()?;
    let (mut problems, refused) = check_all(&results, 60, 6, None);
    if sent < 1000 || refused == 0 {
        problems.push(format!(
            "the attack did not happen: {sent} frames sent, {refused} refused"
        ));
    }
    Ok(verdict(
        "flood-random-and-mutated",
        problems,
        format!("{sent} frames flooded (noise, random CRC-valid frames of the session, mutated copies of live ones); the members refused {refused} and got 60/60 messages intact and 6 barriers"),
    ))
}

/// A child process killed and reaped when dropped.
struct Proc(Option<Child>);

impl Proc {
    /// Waits up to `limit`; the exit code (None: killed or timed out) and stderr.
    fn wait(&mut self, limit: Duration) -> (Option<i32>, String) {
        let Some(mut c) = self.0.take() else {
            return (None, String::new());
        };
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = c.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if !matches!(c.try_wait(), Ok(Some(_))) {
            let _ = c.kill();
        }
        match c.wait_with_output() {
            Ok(o) => (
                o.status.code(),
                String::from_utf8_lossy(&o.stderr).into_owned(),
            ),
            Err(e) => (None, e.to_string()),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A keyed `ethbcast send/recv` transfer on a test-bed.
struct Transfer<'a> {
    bed: &'a Testbed,
    bin: &'a Path,
    dir: PathBuf,
    key: PathBuf,
    receivers: usize,
}

impl Transfer<'_> {
    fn spawn(&self, host: usize, args: &[&str]) -> Result<Proc, AttackError> {
        let mut c: Command =
            netns::command_in(&self.bed.hosts()[host].netns, &self.bin.to_string_lossy())
                .map_err(io("netns"))?;
        c.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        Ok(Proc(Some(c.spawn().map_err(io("spawn ethbcast"))?)))
    }

    /// Sends `len` random bytes (seeded by `seed`) from host 0 to hosts 1..=receivers;
    /// returns the problems found.
    fn run(&self, len: usize, seed: u64) -> Result<Vec<String>, AttackError> {
        let input = self.dir.join(format!("in{seed}.bin"));
        let mut data = vec![0u8; len];
        rand::rngs::SmallRng::seed_from_u64(seed).fill_bytes(&mut data);
        std::fs::write(&input, &data).map_err(io("write the input"))?;
        let key = self.key.to_string_lossy().into_owned();
        let outs: Vec<PathBuf> = (1..=self.receivers)
            .map(|i| self.dir.join(format!("out{seed}-{i}.bin")))
            .collect();
        let mut rs = Vec::new();
        for (i, out) in outs.iter().enumerate() {
            let out = out.to_string_lossy();
            rs.push(self.spawn(
                i + 1,
                &[
                    "recv",
                    "--iface",
                    "eth0",
                    "--quiet",
                    "--wait",
                    "30",
                    "--timeout",
                    "10",
                    "--key-file",
                    &key,
                    "-o",
                    &out,
                ],
            )?);
        }
        let n = self.receivers.to_string();
        let mut s = self.spawn(
            0,
            &[
                "send",
                "--iface",
                "eth0",
                "--wait-mode",
                "block",
                "--key-file",
                &key,
                "-i",
                &input.to_string_lossy(),
                "--receivers",
                &n,
                "--wait",
                "30",
                "--quiet",
            ],
        )?;
        let mut problems = Vec::new();
        let (code, err) = s.wait(Duration::from_secs(60));
        if code != Some(0) {
            problems.push(format!("sender exited {code:?}: {}", err.trim()));
        }
        for (i, r) in rs.iter_mut().enumerate() {
            let (code, err) = r.wait(Duration::from_secs(15));
            if code != Some(0) {
                problems.push(format!(
                    "receiver {} exited {code:?}: {}",
                    i + 1,
                    err.trim()
                ));
            }
        }
        for out in &outs {
            match std::fs::read(out) {
                Ok(got) if got == data => {}
                Ok(got) => problems.push(format!(
                    "{} differs from the input ({} of {len} bytes)",
                    out.display(),
                    got.len()
                )),
                Err(e) => problems.push(format!("{}: {e}", out.display())),
            }
            let _ = std::fs::remove_file(out);
        }
        let _ = std::fs::remove_file(&input);
        Ok(problems)
    }
}

/// Makes a key file readable by its owner only, as key files must be.
fn private(path: &Path) -> Result<(), AttackError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(io("chmod 600 the key file"))
}

fn scratch(prefix: &str) -> Result<(PathBuf, PathBuf), AttackError> {
    let dir = std::env::temp_dir().join(format!("ethbcast-attack-{prefix}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(io(format!("create {}", dir.display())))?;
    let key = dir.join("key");
    std::fs::write(&key, "ethbcast-bench attack transfer key\n").map_err(io("write the key"))?;
    private(&key)?;
    Ok((dir, key))
}

/// Replay of an earlier keyed transfer: the hostile host records one, then replays it with
/// mutated copies, data ahead of the sender's and abort notices during a second one.
pub fn send_recv_replay(prefix: &str, hosts: usize, bin: &Path) -> Result<Scenario, AttackError> {
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
pub fn send_recv_forged_control(
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
    let bcast = wire::ethernet::BROADCAST_MAC;
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
                    if let Some(x) =
                        hostile::forge_control(t, &abort, from_sender(wire::ALL, bcast.0), &mut ctr)
                    {
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
                        let pair =
                            ethbcast_proto::member::pair_group(group, Rank::new(0), Rank::new(r));
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

/// The `ethbcast` binary next to this one (both are built by `cargo build -p ethbcast-tools`).
pub fn default_ethbcast() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("ethbcast")))
        .unwrap_or_else(|| PathBuf::from("ethbcast"))
}

/// Runs the scenarios named in `only` (all if empty) on test-beds of `hosts` hosts (the last
/// one hostile; at least 4), with the `ethbcast` binary `bin` for the transfers. A scenario
/// that cannot be run is reported failed with the reason.
pub fn run_all(
    prefix: &str,
    hosts: usize,
    bin: &Path,
    only: &[String],
) -> Result<AttackReport, AttackError> {
    let hosts = hosts.max(4);
    let wanted = |name: &str| only.is_empty() || only.iter().any(|o| o == name);
    if (wanted(SCENARIOS[7]) || wanted(SCENARIOS[8])) && !bin.is_file() {
        return Err(AttackError::NoBinary(bin.to_path_buf()));
    }
    let mut scenarios = Vec::new();
    for (i, name) in SCENARIOS.iter().enumerate() {
        if !wanted(name) {
            continue;
        }
        let p = format!("{prefix}{}", (b'a' + i as u8) as char);
        let r = match i {
            0 => spoofed_liveness(&p, hosts, false),
            1 => spoofed_liveness(&p, hosts, true),
            2 => replay_earlier_session(&p, hosts),
            3 => replay_control_in_session(&p, hosts),
            4 => forged_join(&p, hosts),
            5 => forged_barrier_epoch(&p, hosts),
            6 => flood(&p, hosts),
            7 => send_recv_replay(&p, hosts, bin),
            8 => send_recv_forged_control(&p, hosts, bin),
            9 => spoofed_liveness_in_window(&p, hosts),
            10 => join_challenge_flood(&p, hosts),
            11 => join_replayed_rosters(&p, hosts),
            12 => join_resent_hellos(&p, hosts),
            13 => capi_keyed_forgery(&p, hosts),
            14 => pre_tag_allocation(&p, hosts),
            15 => replay_across_counter_wrap(),
            16 => keys::keyless_stranger_sender(&p, hosts, bin),
            _ => keys::passphrase_dictionary(&p, hosts, bin),
        };
        scenarios.push(r.unwrap_or_else(|e| Scenario {
            name: name.to_string(),
            passed: false,
            detail: format!("could not run: {e}"),
            ..Scenario::default()
        }));
    }
    Ok(AttackReport { scenarios })
}

/// Renders the report for a terminal.
pub fn render(r: &AttackReport) -> String {
    let mut t = crate::bench::table::Table::new(&["scenario", "result", "detail"]);
    for s in &r.scenarios {
        t.row(vec![
            s.name.clone(),
            if s.passed { "PASS" } else { "FAIL" }.into(),
            s.detail.clone(),
        ]);
    }
    t.render()
}

/// The attacks of a host without the key (spoofed liveness, replays from an earlier
/// session and in-session, forged join, forged barrier epochs, a flood of random and
/// mutated frames, forged abort/evict/report on a transfer; during keyed joins a challenge
/// flood from many MACs, replayed rosters from new MACs, hellos re-sent from foreign MACs;
/// forgeries against a group keyed as the C ABI keys it) against a keyed group and a keyed
/// `ethbcast send/recv` transfer, on a test-bed whose last host is hostile. Exits 1 if any
/// scenario failed.
///
/// Example: ethbcast-suite attack --testbed 6 --json
#[derive(clap::Args)]
pub struct Args {
    /// Hosts per scenario, the hostile one included (at least 4).
    #[arg(long, default_value_t = 6)]
    testbed: usize,
    /// Test-bed name prefix.
    #[arg(long, default_value = "ebatk")]
    prefix: String,
    /// The ethbcast binary for the transfers (default: next to this one).
    #[arg(long)]
    ethbcast: Option<PathBuf>,
    /// Run only these scenarios (repeat or comma-separate; default: all).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

impl Args {
    /// Runs the attacks; exits 1 unless every one failed to do harm, 2 on an unknown name.
    pub fn run(self) -> std::process::ExitCode {
        use crate::bench::cli::{code, fail, print};
        if let Some(bad) = self.only.iter().find(|o| !SCENARIOS.contains(&o.as_str())) {
            let all = SCENARIOS.join(", ");
            fail(format!("no scenario {bad}; the scenarios are {all}"));
            return std::process::ExitCode::from(2);
        }
        if let Err(e) = crate::testbed::can_create_netns() {
            return fail(format!("the attacks need a test-bed: {e}"));
        }
        let bin = self.ethbcast.unwrap_or_else(default_ethbcast);
        match run_all(&self.prefix, self.testbed, &bin, &self.only) {
            Ok(r) => {
                print(self.json, &r, render);
                code(r.scenarios.iter().all(|s| s.passed))
            }
            Err(e) => fail(e),
        }
    }
}

/// How long a member of the join scenarios may take to join: far above a join's tens of
/// milliseconds, so that a join the attack stalls fails the scenario rather than the run.
const JOIN_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the last member of the join scenarios waits before it joins: the others' join
/// stays open (challenging, answering) that long, under attack.
const LATE_JOINER: Duration = Duration::from_millis(400);

/// How a join scenario's members join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JoinKind {
    /// An explicit list of MACs (rank = host), rank 0 coordinates.
    List,
    /// Each claims its rank (rank = host), as from a launcher's environment; rank 0
    /// coordinates.
    Ranks,
    /// Discovery: ranks by sorted MAC, the lowest coordinates.
    Discover,
}

/// What a member of a join scenario saw of its join.
#[derive(Debug, Clone)]
struct JoinSeen {
    rank: u16,
    /// Every rank's MAC, in rank order.
    roster: Vec<[u8; 6]>,
    /// What the join held and sent ([`Group::join_stats`]).
    stats: ethbcast_proto::join::JoinStats,
    /// From the call to the group.
    took: Duration,
}

/// A keyed join of hosts `0..m` as `kind` says (host `m - 1` starts [`LATE_JOINER`] late),
/// then one barrier; each member's view of the join, in host order.
fn keyed_joins(
    bed: &Testbed,
    m: usize,
    kind: JoinKind,
) -> Result<Vec<Result<JoinSeen, String>>, AttackError> {
    use ethbcast_proto::join::{Expect, JoinConfig};
    let macs: Vec<ethbcast::MacAddr> = bed.hosts()[..m]
        .iter()
        .map(|h| ethbcast::MacAddr(h.mac))
        .collect();
    let handles: Vec<crate::bench::bed::Member<JoinSeen>> = (0..m)
        .map(|i| {
            let macs = macs.clone();
            netns::spawn_in(&bed.hosts()[i].netns, move || -> Result<_, GroupError> {
                if i == m - 1 {
                    std::thread::sleep(LATE_JOINER);
                }
                let opts = GroupOptions {
                    timeout: JOIN_TIMEOUT,
                    ..keyed(false)
                };
                let t = Instant::now();
                let mut g = match kind {
                    JoinKind::List => Group::open("eth0", Membership::Explicit(macs), opts)?,
                    JoinKind::Discover => {
                        Group::open("eth0", Membership::Discover { expected: m as u16 }, opts)?
                    }
                    JoinKind::Ranks => {
                        let link = ethbcast::open_link(opts.backend, "eth0", opts.wait)?;
                        let cfg = JoinConfig {
                            group: opts.group_id,
                            mac: link.local_mac(),
                            key: opts.key.clone(),
                            expect: Expect::Ranks {
                                size: m as u16,
                                rank: Rank::new(i as u16),
                            },
                            max_pdu: link.max_pdu(),
                        };
                        let (joined, link) = ethbcast::join(link, cfg, opts.timeout, || false)?;
                        Group::joined(link, joined, opts)?
                    }
                };
                let took = t.elapsed();
                let roster = (0..g.size())
                    .filter_map(|r| g.member().mac_of(Rank::new(r)))
                    .map(|mac| mac.octets())
                    .collect();
                let stats = g.join_stats();
                g.barrier()?;
                Ok(JoinSeen {
                    rank: g.rank().get(),
                    roster,
                    stats,
                    took,
                })
            })
            .map_err(io("spawn a member"))
        })
        .collect::<Result<_, _>>()?;
    Ok(join_all(handles))
}

/// Checks the members' joins of hosts `0..m` of `bed`: every one joined, with the rank
/// `kind` gives it and the roster of exactly the members; returns the problems, each starting
/// with `what`.
fn check_joins(
    bed: &Testbed,
    m: usize,
    kind: JoinKind,
    results: &[Result<JoinSeen, String>],
    what: &str,
) -> Vec<String> {
    let mut expected: Vec<[u8; 6]> = bed.hosts()[..m].iter().map(|h| h.mac).collect();
    if kind == JoinKind::Discover {
        expected.sort();
    }
    let mut problems = Vec::new();
    for (i, r) in results.iter().enumerate() {
        let mac = bed.hosts()[i].mac;
        match r {
            Ok(s) => {
                let rank = expected.iter().position(|x| *x == mac);
                if rank != Some(usize::from(s.rank)) {
                    problems.push(format!(
                        "{what}host {i} is rank {}, expected {rank:?}",
                        s.rank
                    ));
                }
                if s.roster != expected {
                    problems.push(format!(
                        "{what}host {i}'s roster {:?} is not the {m} members",
                        s.roster
                            .iter()
                            .map(crate::testbed::format_mac)
                            .collect::<Vec<_>>()
                    ));
                }
                if s.took > JOIN_TIMEOUT {
                    problems.push(format!("{what}host {i} joined after {:.0} ms", ms(s.took)));
                }
            }
            Err(e) => problems.push(format!("{what}host {i}: {e}")),
        }
    }
    problems
}

/// The join message type of a captured frame (1 challenge, 2 hello, 3 roster, 4 confirm).
fn join_type(eth: &[u8]) -> Option<u8> {
    let p = pdu(eth)?;
    if p.kind() != Kind::Join {
        return None;
    }
    p.payload().first().copied()
}

/// The `k`-th of the hostile host's made-up source MACs.
fn stranger(k: usize) -> [u8; 6] {
    [
        0x02,
        0xEE,
        (k >> 24) as u8,
        (k >> 16) as u8,
        (k >> 8) as u8,
        k as u8,
    ]
}

/// `eth` sent again, unchanged, from `from`.
fn resent_from(eth: &[u8], from: [u8; 6]) -> Vec<u8> {
    let mut v = eth.to_vec();
    v[6..12].copy_from_slice(&from);
    v
}

/// A challenge of the hostile host's own, from `from` and naming it as the coordinator, with
/// nonce `nonce`, `size` members and the latest time there is (it would displace any real
/// challenge held), sealed with [`hostile::ATTACKER_KEY`]; header fields from `template` (a
/// real challenge).
fn forged_challenge(template: &[u8], from: [u8; 6], nonce: u64, size: u16) -> Option<Vec<u8>> {
    let p = pdu(template)?;
    let mut body = vec![1u8];
    body.extend_from_slice(&nonce.to_be_bytes());
    body.extend_from_slice(&size.to_be_bytes());
    body.extend_from_slice(&from);
    body.extend_from_slice(&u64::MAX.to_be_bytes());
    let mut v = Control::Join { body }.to_vec(p.group(), p.src(), p.dst(), 0);
    let n = v.len();
    v.resize(n + wire::TAG_LEN, 0);
    let n = wire::seal(&hostile::ATTACKER_KEY, &mut v, n).ok()?;
    v.truncate(n);
    let mut f = template[..wire::ETH_HEADER_LEN].to_vec();
    f[6..12].copy_from_slice(&from);
    f.extend_from_slice(&v);
    Some(f)
}

/// Distinct join frames of type `kind` sent by one of `from` in `frames`.
fn join_frames(frames: &[Vec<u8>], kind: u8, from: &[[u8; 6]]) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    for f in frames {
        if join_type(f) == Some(kind) && from.iter().any(|m| f[6..12] == *m) && !out.contains(f) {
            out.push(f.clone());
        }
    }
    out
}

/// Hellos a member may send in `t` ([`ethbcast_proto::membership`]): a round of at most
/// `MAX_CHALLENGES` (one per challenge held) every `HELLO_GAP` at most, however many
/// challenges arrive, and one more round when its roster is decided.
fn hello_bound(t: Duration) -> u64 {
    use ethbcast_proto::join::{HELLO_GAP, MAX_CHALLENGES};
    MAX_CHALLENGES as u64 * (t.as_micros() / HELLO_GAP.as_micros() + 2) as u64
}

/// What the challenge flood sent and saw.
#[derive(Debug, Default)]
struct Flooded {
    /// Challenges re-sent (recorded in session 1 or live) from made-up MACs, and unchanged.
    resent: usize,
    /// Challenges of the attacker's own (its key, its MACs, the latest time).
    forged: usize,
    /// Made-up source MACs used.
    macs: usize,
    /// Distinct challenges re-sent.
    challenges: usize,
    /// Hellos seen from each member (host order).
    hellos: Vec<u64>,
    /// From the first frame sent to the last.
    span: Duration,
}

/// Challenge flood during a keyed join (issue item 2): the members discover each other with
/// the key, twice. The hostile host records the first join, and during the second it re-sends
/// every challenge of both (the recorded ones and the live ones it sees) from 64 made-up
/// source MACs and unchanged from their coordinators, and challenges of its own (its own key,
/// the latest time), some 20 a millisecond, while the last member joins 400 ms late. It sees
/// every frame (the bridge floods, as a hub), so it counts every member's hellos. Each member
/// must join within its timeout with the roster of exactly the members, and send no more
/// hellos than the join's rate bound (a round of at most `MAX_CHALLENGES` per `HELLO_GAP`).
pub fn join_challenge_flood(prefix: &str, hosts: usize) -> Result<Scenario, AttackError> {
    let bed = bed(prefix, hosts, 0.0)?;
    hub(&bed)?;
    let m = hosts - 1;
    let netns = bed.hosts()[m].netns.clone();
    let members: Vec<[u8; 6]> = bed.hosts()[..m].iter().map(|h| h.mac).collect();
    let rec = hostile::record(&netns, 100_000)?;
    let first = keyed_joins(&bed, m, JoinKind::Discover)?;
    let frames = rec.stop()?;
    let mut problems = check_joins(&bed, m, JoinKind::Discover, &first, "join 1: ");
    let recorded = join_frames(&frames, 1, &members);
    let n = recorded.len();
    let attacker = hostile::Hostile::spawn(&netns, Duration::from_micros(200), {
        let members = members.clone();
        move |port, stop: &AtomicBool| {
            let mut rng = rand::rngs::SmallRng::seed_from_u64(10);
            let mut challenges = recorded;
            let mut out = Flooded {
                hellos: vec![0; members.len()],
                ..Flooded::default()
            };
            let (mut k, mut last, mut begun) = (0usize, Instant::now(), None::<Instant>);
            while !stop.load(Ordering::SeqCst) {
                for _ in 0..256 {
                    let Some(f) = port.next_frame() else { break };
                    let Some(who) = members.iter().position(|x| f[6..12] == *x) else {
                        continue;
                    };
                    match join_type(&f) {
                        Some(1) if challenges.len() < 64 && !challenges.contains(&f) => {
                            challenges.push(f)
                        }
                        Some(2) => out.hellos[who] += 1,
                        _ => {}
                    }
                }
                if challenges.is_empty() || last.elapsed() < Duration::from_millis(1) {
                    continue;
                }
                last = Instant::now();
                begun.get_or_insert(last);
                for _ in 0..16 {
                    k += 1;
                    let c = &challenges[k % challenges.len()];
                    port.send(&resent_from(c, stranger(k % 64)));
                    out.resent += 1;
                    if k % 4 == 0 {
                        port.send(c);
                        out.resent += 1;
                        let size = members.len() as u16;
                        if let Some(x) = forged_challenge(c, stranger(k % 64), rng.next_u64(), size)
                        {
                            port.send(&x);
                            out.forged += 1;
                        }
                    }
                }
            }
            out.macs = k.min(64);
            out.challenges = challenges.len();
            out.span = begun.map_or(Duration::ZERO, |b| last.duration_since(b));
            out
        }
    })?;
    let second = keyed_joins(&bed, m, JoinKind::Discover);
    // Hellos still in flight reach the hostile host.
    std::thread::sleep(Duration::from_millis(20));
    let flood = attacker.stop()?;
    let second = second?;
    problems.extend(check_joins(
        &bed,
        m,
        JoinKind::Discover,
        &second,
        "join 2: ",
    ));
    let mut worst = (0u64, 0u64, 0.0f64);
    for (i, r) in second.iter().enumerate() {
        let Ok(s) = r else { continue };
        let bound = hello_bound(s.took);
        let seen = flood.hellos[i];
        if s.stats.hellos > bound || seen > bound {
            problems.push(format!(
                "host {i} sent {} hellos ({seen} seen by the hostile host) in its join of {:.0} ms, above the bound of {bound}",
                s.stats.hellos,
                ms(s.took)
            ));
        }
        if s.stats.challenges > ethbcast_proto::join::MAX_CHALLENGES {
            problems.push(format!("host {i} held {} challenges", s.stats.challenges));
        }
        if seen.max(s.stats.hellos) > worst.0.max(worst.1) {
            worst = (s.stats.hellos, seen, ms(s.took));
        }
    }
    let sent = flood.resent + flood.forged;
    if n == 0 || flood.macs < 32 || sent < 1000 || flood.forged == 0 {
        problems.push(format!(
            "the attack did not happen: {n} challenges recorded, {sent} sent ({} forged) from {} MACs",
            flood.forged, flood.macs
        ));
    }
    let rate = sent as f64 / flood.span.as_secs_f64().max(1e-3);
    Ok(verdict(
        "join-challenge-flood",
        problems,
        format!(
            "{n} challenges of a first keyed discovery recorded; during a second one (the last of {m} members 400 ms late) the hostile host sent {sent} challenges ({:.0}/s): {} of {} distinct real ones re-sent from {} made-up MACs and from their coordinators, {} of its own; every member joined with the roster of the {m} members; most hellos of a member {} ({} seen by the hostile host) in {:.0} ms, bound {} (at most {} per {:?})",
            rate,
            flood.resent,
            flood.challenges,
            flood.macs,
            flood.forged,
            worst.0,
            worst.1,
            worst.2,
            hello_bound(Duration::from_secs_f64(worst.2 / 1e3)),
            ethbcast_proto::join::MAX_CHALLENGES,
            ethbcast_proto::join::HELLO_GAP
        ),
    ))
}

/// Replayed rosters from new MACs during a keyed join (issue item 3): the members join by an
/// explicit list with the key, twice. The hostile host records the first join's challenges
/// and rosters, and during the second it sends challenge/roster pairs (the recorded ones and
/// the live ones it sees) each from a MAC never used before, and the recorded ones unchanged
/// from the coordinator, while the last member joins 400 ms late. What each member's join
/// held ([`Group::join_stats`]) must stay within `MAX_CHALLENGES` challenges and rosters,
/// however many MACs sent pairs, and the join complete with the members alone.
pub fn join_replayed_rosters(prefix: &str, hosts: usize) -> Result<Scenario, AttackError> {
    use ethbcast_proto::join::MAX_CHALLENGES;
    let bed = bed(prefix, hosts, 0.0)?;
    hub(&bed)?;
    let m = hosts - 1;
    let netns = bed.hosts()[m].netns.clone();
    let members: Vec<[u8; 6]> = bed.hosts()[..m].iter().map(|h| h.mac).collect();
    let coordinator = members[0];
    let rec = hostile::record(&netns, 100_000)?;
    let first = keyed_joins(&bed, m, JoinKind::List)?;
    let frames = rec.stop()?;
    let mut problems = check_joins(&bed, m, JoinKind::List, &first, "join 1: ");
    let challenges = join_frames(&frames, 1, &[coordinator]);
    let rosters = join_frames(&frames, 3, &[coordinator]);
    let recorded = (challenges.len(), rosters.len());
    let attacker = hostile::Hostile::spawn(&netns, Duration::from_micros(200), {
        move |port, stop: &AtomicBool| {
            let (old_c, old_r) = (challenges, rosters);
            let (mut live_c, mut live_r) = (None::<Vec<u8>>, None::<Vec<u8>>);
            let (mut k, mut sent, mut last) = (0usize, 0usize, Instant::now());
            while !stop.load(Ordering::SeqCst) {
                for _ in 0..256 {
                    let Some(f) = port.next_frame() else { break };
                    if f[6..12] != coordinator || old_c.contains(&f) || old_r.contains(&f) {
                        continue;
                    }
                    match join_type(&f) {
                        Some(1) => live_c = Some(f),
                        Some(3) => live_r = Some(f),
                        _ => {}
                    }
                }
                if old_c.is_empty() || old_r.is_empty() || last.elapsed() < Duration::from_millis(1)
                {
                    continue;
                }
                last = Instant::now();
                for _ in 0..8 {
                    k += 1;
                    let (c, r) = match (&live_c, &live_r) {
                        (Some(c), Some(r)) if k % 2 == 0 => (c, r),
                        _ => (&old_c[k % old_c.len()], &old_r[k % old_r.len()]),
                    };
                    port.send(&resent_from(c, stranger(k)));
                    port.send(&resent_from(r, stranger(k)));
                    sent += 2;
                    if k % 8 == 0 {
                        port.send(&old_c[k % old_c.len()]);
                        port.send(&old_r[k % old_r.len()]);
                        sent += 2;
                    }
                }
            }
            (sent, k, live_c.is_some() && live_r.is_some())
        }
    })?;
    let second = keyed_joins(&bed, m, JoinKind::List);
    let (sent, macs, live) = attacker.stop()?;
    let second = second?;
    problems.extend(check_joins(&bed, m, JoinKind::List, &second, "join 2: "));
    let (mut peak, mut held) = (0, 0);
    for (i, r) in second.iter().enumerate() {
        let Ok(s) = r else { continue };
        if s.stats.peak_rosters > MAX_CHALLENGES || s.stats.challenges > MAX_CHALLENGES {
            problems.push(format!(
                "host {i}'s join held {} challenges and up to {} rosters (bound {MAX_CHALLENGES}) under pairs from {macs} MACs",
                s.stats.challenges, s.stats.peak_rosters
            ));
        }
        peak = peak.max(s.stats.peak_rosters);
        held = held.max(s.stats.challenges);
    }
    if recorded.0 == 0 || recorded.1 == 0 || macs < 16 * MAX_CHALLENGES || !live {
        problems.push(format!(
            "the attack did not happen: {} challenges and {} rosters recorded, pairs from {macs} MACs, live pair seen: {live}",
            recorded.0, recorded.1
        ));
    }
    Ok(verdict(
        "join-replayed-rosters",
        problems,
        format!(
            "{} challenges and {} rosters of a first keyed join by list recorded; during a second one (the last of {m} members 400 ms late) the hostile host sent {sent} frames: recorded and live challenge/roster pairs from {macs} MACs never used before, recorded ones from the coordinator; every member joined with the roster of the {m} members, holding at most {held} challenges and {peak} rosters at once (bound {MAX_CHALLENGES})",
            recorded.0, recorded.1
        ),
    ))
}

/// Hellos and confirmations re-sent from foreign MACs (issue item 4): a host that sees the
/// members' unicast (the bridge floods, as a hub) re-sends every hello and confirmation of
/// the members, unchanged, from its own MAC and from 8 made-up ones, during a keyed join with
/// ranks claimed (as from a launcher) and a keyed discovery, the last member 400 ms late.
/// Before the fix a re-sent hello claimed a rank twice (`RankClaimedTwice`), announced a
/// member too many ("N members announced") or took a place; each join must complete with
/// the members alone.
pub fn join_resent_hellos(prefix: &str, hosts: usize) -> Result<Scenario, AttackError> {
    let bed = bed(prefix, hosts, 0.0)?;
    hub(&bed)?;
    let m = hosts - 1;
    let netns = bed.hosts()[m].netns.clone();
    let own = bed.hosts()[m].mac;
    let members: Vec<[u8; 6]> = bed.hosts()[..m].iter().map(|h| h.mac).collect();
    let mut problems = Vec::new();
    let mut done = Vec::new();
    for kind in [JoinKind::Ranks, JoinKind::Discover] {
        let attacker = hostile::Hostile::spawn(&netns, Duration::from_micros(200), {
            let members = members.clone();
            move |port, stop: &AtomicBool| {
                let (mut hellos, mut confirms, mut k) = (0usize, 0usize, 0usize);
                while !stop.load(Ordering::SeqCst) {
                    let Some(f) = port.next_frame() else { continue };
                    if !members.iter().any(|x| f[6..12] == *x) {
                        continue;
                    }
                    let t = join_type(&f);
                    if !matches!(t, Some(2) | Some(4)) {
                        continue;
                    }
                    k += 1;
                    for from in [own, stranger(k % 8)] {
                        port.send(&resent_from(&f, from));
                        if t == Some(2) {
                            hellos += 1;
                        } else {
                            confirms += 1;
                        }
                    }
                }
                (hellos, confirms)
            }
        })?;
        let results = keyed_joins(&bed, m, kind);
        let (hellos, confirms) = attacker.stop()?;
        let what = format!("{kind:?}: ");
        let results = results?;
        problems.extend(check_joins(&bed, m, kind, &results, &what));
        for s in results.iter().flatten() {
            if s.roster.iter().any(|x| *x == own || x[..2] == [0x02, 0xEE]) {
                problems.push(format!("{what}a foreign MAC in rank {}'s roster", s.rank));
            }
        }
        if hellos == 0 {
            problems.push(format!("{what}the attack did not happen: no hello re-sent"));
        }
        done.push(format!(
            "{} ({hellos} hellos and {confirms} confirmations re-sent)",
            match kind {
                JoinKind::Ranks => "ranks claimed",
                JoinKind::Discover => "discovery",
                JoinKind::List => "list",
            }
        ));
    }
    Ok(verdict(
        "join-resent-hellos",
        problems,
        format!(
            "the hostile host re-sent every hello and confirmation of the members from its own MAC and 8 made-up ones during keyed joins of {m} members (the last 400 ms late): {}; each completed with the roster of the {m} members, ranks as claimed or by MAC, no foreign MAC, no rank claimed twice, no member too many",
            done.join(", ")
        ),
    ))
}

/// What the forger of the C-ABI scenario (and of capi/tests/c_abi_key.rs) forged.
#[derive(Debug, Default, Clone, Copy)]
pub struct Forged {
    /// Data frames of the root's next message, ahead of the root.
    pub data: usize,
    /// Barrier releases of the current and the next epoch.
    pub releases: usize,
    /// Evictions of rank 1.
    pub evictions: usize,
}

/// The forgeries the C ABI's key test and this scenario share, from the hostile host `hostile` of `bed` against
/// a group whose rank 0 is host 0: the root's next broadcast message ahead of the root, barrier
/// releases of the current and next epoch, and an eviction of rank 1 every 50 ms, all from
/// the root's MAC and rank (with the attacker's tag if the session is keyed).
pub fn forge_session(
    bed: &Testbed,
    hostile: usize,
) -> Result<hostile::Hostile<Forged>, AttackError> {
    let root_mac = bed.hosts()[0].mac;
    Ok(hostile::Hostile::spawn(
        &bed.hosts()[hostile].netns,
        Duration::from_micros(500),
        move |port, stop: &AtomicBool| {
            let mut ctr = Counter::default();
            let mut forged = Forged::default();
            let mut last_evict = Instant::now();
            let mut template: Option<Vec<u8>> = None;
            let from_root = Spoof::from_root(root_mac, true);
            while !stop.load(Ordering::SeqCst) {
                if let (Some(t), true) =
                    (&template, last_evict.elapsed() > Duration::from_millis(50))
                {
                    let evict = Control::Evict { rank: Rank::new(1) };
                    if let Some(x) = hostile::forge_control(t, &evict, from_root, &mut ctr) {
                        port.send(&x);
                        forged.evictions += 1;
                    }
                    last_evict = Instant::now();
                }
                let Some(f) = port.next_frame() else { continue };
                let Some(p) = pdu(&f) else { continue };
                if p.kind() == Kind::Join {
                    continue;
                }
                template.get_or_insert_with(|| f.clone());
                if p.kind().is_data() && p.src() == Rank::new(0) {
                    let junk = vec![0x66; p.msg_len() as usize];
                    for (dseq, dmsg) in [(1, 1), (1, 0), (2, 1)] {
                        if let Some(x) = hostile::forge_data(
                            &f,
                            p.group(),
                            from_root,
                            p.seq().wrapping_add(dseq),
                            p.msg_id().wrapping_add(dmsg),
                            &junk,
                        ) {
                            port.send(&x);
                            forged.data += 1;
                        }
                    }
                }
                if let Ok(Control::Barrier(b)) = Control::parse(&p) {
                    for epoch in [b.epoch, b.epoch + 1] {
                        let release = Control::Barrier(wire::BarrierMsg {
                            op: BarrierOp::Release,
                            epoch,
                            ..b.clone()
                        });
                        if let Some(x) = hostile::forge_control(&f, &release, from_root, &mut ctr) {
                            port.send(&x);
                            forged.releases += 1;
                        }
                    }
                }
            }
            forged
        },
    )?)
}

/// Rounds of the C-ABI scenario (capi/c/key_check.c has 6).
const C_ROUNDS: usize = 4;

/// One rank of the C-ABI scenario, as capi/c/key_check.c: each round rank 0 enters a barrier
/// 300 ms late, then broadcasts 64 bytes after another 300 ms. (barriers left early, broadcasts
/// with wrong bytes, failed calls); stops at the first failed call.
fn c_abi_rank(g: &mut ethbcast::HostGroup) -> (u32, u32, Vec<String>) {
    let pattern = |round: usize, i: usize| (round * 37 + i * 11 + 1) as u8;
    let me = g.rank();
    let (mut early, mut corrupt) = (0, 0);
    for round in 0..C_ROUNDS {
        if me == Rank::new(0) {
            std::thread::sleep(Duration::from_millis(300));
        }
        let t = Instant::now();
        if let Err(e) = g.barrier() {
            return (early, corrupt, vec![format!("barrier {round}: {e}")]);
        }
        if me != Rank::new(0) && t.elapsed() < Duration::from_millis(150) {
            early += 1;
        }
        if me == Rank::new(0) {
            std::thread::sleep(Duration::from_millis(300));
        }
        let mut buf: Vec<u8> = (0..64)
            .map(|i| {
                if me == Rank::new(0) {
                    pattern(round, i)
                } else {
                    0
                }
            })
            .collect();
        if let Err(e) = g.bcast(Rank::new(0), &mut buf) {
            return (early, corrupt, vec![format!("bcast {round}: {e}")]);
        }
        if buf.iter().enumerate().any(|(i, b)| *b != pattern(round, i)) {
            corrupt += 1;
        }
    }
    match g.barrier() {
        Ok(()) => (early, corrupt, Vec::new()),
        Err(e) => (early, corrupt, vec![format!("last barrier: {e}")]),
    }
}

/// Per rank: whether its group had a key, (barriers left early, corrupt broadcasts, errors).
type CRun = Vec<Result<(bool, u32, u32, Vec<String>), String>>;

/// Ranks 0..m on hosts 0..m open a [`ethbcast::HostGroup`] the way the C ABI opens
/// one: the key from `ETHBCAST_KEY_FILE` of `env` (read by [`ethbcast::key_from_env`],
/// as `ethbcast_open` does), waiting in blocking mode, then run [`c_abi_rank`] while the
/// hostile host forges. The members are threads of one process, so the membership is the list
/// of the hosts rather than the launcher's rank variables.
fn c_abi_run(
    bed: &Testbed,
    m: usize,
    env: &[(&'static str, std::ffi::OsString)],
    timeout: Duration,
) -> Result<(CRun, Forged), AttackError> {
    use ethbcast::{HostGroup, HostOptions};
    let macs: Vec<ethbcast::MacAddr> = bed.hosts()[..m]
        .iter()
        .map(|h| ethbcast::MacAddr(h.mac))
        .collect();
    let forger = forge_session(bed, m)?;
    let handles: Vec<_> = (0..m)
        .map(|i| {
            let (macs, env) = (macs.clone(), env.to_vec());
            netns::spawn_in(&bed.hosts()[i].netns, move || -> Result<_, String> {
                let group_id = GroupOptions::default().group_id;
                let get = |v: &str| env.iter().find(|(k, _)| *k == v).map(|(_, x)| x.clone());
                let key = ethbcast::key_from_env(get, group_id).map_err(|e| e.to_string())?;
                let keyed = key.is_some();
                let opts = HostOptions {
                    group: GroupOptions {
                        insecure: !keyed,
                        key,
                        wait: ethbcast::WaitMode::Block,
                        timeout,
                        ..GroupOptions::default()
                    },
                    membership: Membership::Explicit(macs),
                    ..HostOptions::default()
                };
                let mut g = HostGroup::open("eth0", opts).map_err(|e| e.to_string())?;
                let (early, corrupt, errors) = c_abi_rank(&mut g);
                Ok((keyed, early, corrupt, errors))
            })
            .map_err(io("spawn a rank"))
        })
        .collect::<Result<_, _>>()?;
    let results = handles
        .into_iter()
        .map(|h| h.join().unwrap_or_else(|_| Err("rank panicked".into())))
        .collect();
    Ok((results, forger.stop()?))
}

/// The C ABI and MPI interposer with a key (issue item 1): ranks open their group as
/// `ethbcast_open` does, the key from `ETHBCAST_KEY_FILE` naming a passphrase file, and
/// broadcast and synchronise while the hostile host forges the root's next message ahead of
/// it, barrier releases and evictions of rank 1 (the forgeries of capi/tests/c_abi_key.rs;
/// the root enters every call 300 ms late, so forgeries come first). Keyed, every rank's
/// buffers hold the root's bytes, no barrier returns early, no call fails. Then the same
/// without `ETHBCAST_KEY_FILE` (and without `ETHBCAST_REQUIRE_KEY`, so `ethbcast_open` opens
/// a group without a key): there the forgeries must land, which shows the attack is real.
pub fn capi_keyed_forgery(prefix: &str, hosts: usize) -> Result<Scenario, AttackError> {
    let bed = bed(prefix, hosts, 0.0)?;
    hub(&bed)?;
    let m = hosts - 1;
    let (dir, _) = scratch(prefix)?;
    let key_file = dir.join("group.key");
    std::fs::write(&key_file, "a passphrase the hostile host does not know\n")
        .map_err(io("write the key file"))?;
    private(&key_file)?;
    let keyed_env = [(ethbcast::KEY_FILE_ENV, key_file.clone().into_os_string())];
    let keyed_run = c_abi_run(&bed, m, &keyed_env, Duration::from_secs(20));
    let keyless_run = c_abi_run(&bed, m, &[], Duration::from_secs(3));
    let _ = std::fs::remove_dir_all(&dir);
    let (keyed_ranks, keyed_forged) = keyed_run?;
    let (keyless_ranks, keyless_forged) = keyless_run?;
    let mut problems = Vec::new();
    for (i, r) in keyed_ranks.iter().enumerate() {
        match r {
            Ok((true, 0, 0, e)) if e.is_empty() => {}
            Ok((keyed, early, corrupt, errors)) => problems.push(format!(
                "keyed: rank {i} (key {keyed}) left {early} barriers early, got {corrupt} corrupt broadcasts, failed {errors:?}"
            )),
            Err(e) => problems.push(format!("keyed: rank {i}: {e}")),
        }
    }
    let f = keyed_forged;
    if f.data == 0 || f.releases == 0 || f.evictions == 0 {
        problems.push(format!("keyed: the attack did not happen: {f:?}"));
    }
    let (mut landed, mut keyless_keyed) = (Vec::new(), false);
    for (i, r) in keyless_ranks.iter().enumerate() {
        match r {
            Ok((keyed, early, corrupt, errors)) => {
                keyless_keyed |= *keyed;
                if *early > 0 || *corrupt > 0 || !errors.is_empty() {
                    landed.push(format!(
                        "rank {i}: {early} early barriers, {corrupt} corrupt broadcasts{}",
                        errors.first().map(|e| format!(", {e}")).unwrap_or_default()
                    ));
                }
            }
            Err(e) => landed.push(format!("rank {i}: {e}")),
        }
    }
    if keyless_keyed {
        problems.push("keyless: a group had a key without ETHBCAST_KEY_FILE".into());
    }
    if landed.is_empty() {
        problems.push(format!(
            "keyless: no forgery landed ({keyless_forged:?}): the attack shows nothing"
        ));
    }
    Ok(verdict(
        "capi-keyed-forgery",
        problems,
        format!(
            "{m} ranks opened their group as ethbcast_open does; with ETHBCAST_KEY_FILE (a passphrase) the hostile host forged {} broadcast data frames ahead of the root, {} barrier releases and {} evictions of rank 1, and every rank got {C_ROUNDS}/{C_ROUNDS} broadcasts intact, no barrier returned before the late root, no call failed; without a key ({} data, {} releases, {} evictions forged) they landed: {}",
            f.data,
            f.releases,
            f.evictions,
            keyless_forged.data,
            keyless_forged.releases,
            keyless_forged.evictions,
            landed.join("; ")
        ),
    ))
}

/// Frames a member took in from the hostile host's forgeries before the tag (pre-tag
/// allocation): the heap bytes of the receive streams of ranks that never broadcast and of
/// the point-to-point channels, none of which the workload opens.
fn pre_tag_bytes(g: &Group) -> (usize, usize) {
    let m = g.member();
    let streams = (1..m.size())
        .filter_map(|r| m.engine().receiver(Rank::new(r)))
        .map(|r| r.heap_bytes())
        .sum();
    let channels = m.channels().iter().map(|&(_, b)| b).sum();
    (streams, channels)
}

/// Pre-tag allocation: the hostile host, without the key, learns the session's group id and
/// every member's MAC and rank from their frames, and speaks as each of them: data frames of
/// the session from every rank, and of every pair's point-to-point channel (its id derives
/// from the session's), tagged with another key and untagged. The members must take none of
/// it: no receive stream of a rank that never broadcasts, no channel, measured in heap bytes;
/// and get their 60 messages intact.
pub fn pre_tag_allocation(prefix: &str, hosts: usize) -> Result<Scenario, AttackError> {
    let bed = bed(prefix, hosts, 0.0)?;
    hub(&bed)?;
    let m = hosts - 1;
    let attacker = hostile::Hostile::spawn(
        &bed.hosts()[m].netns,
        Duration::from_micros(300),
        |port, stop: &AtomicBool| {
            // The latest keyed frame of the session, and each member heard: rank -> MAC.
            let mut template: Option<Vec<u8>> = None;
            let mut members: std::collections::BTreeMap<u16, [u8; 6]> = Default::default();
            let mut seq = 0u32;
            let mut last = Instant::now();
            while !stop.load(Ordering::SeqCst) {
                if let Some(f) = port.next_frame() {
                    if let Some(p) = pdu(&f).filter(|p| p.kind() != Kind::Join) {
                        let mut mac = [0u8; 6];
                        mac.copy_from_slice(&f[6..12]);
                        members.insert(p.src().get(), mac);
                        template = Some(f.clone());
                    }
                }
                let Some(t) = template.as_ref().filter(|_| members.len() > 1) else {
                    continue;
                };
                if last.elapsed() < Duration::from_millis(1) {
                    continue;
                }
                last = Instant::now();
                let group = pdu(t).map_or(0, |p| p.group());
                seq = seq.wrapping_add(1);
                for (&a, &mac_a) in &members {
                    for tag in [true, false] {
                        // As rank `a`, a message of the session's own stream.
                        let spoof = Spoof {
                            src: Rank::new(a),
                            dst: wire::ALL,
                            src_mac: mac_a,
                            dst_mac: wire::ethernet::BROADCAST_MAC.0,
                            tag,
                        };
                        if let Some(x) = hostile::forge_data(t, group, spoof, seq, seq, &[7; 1000])
                        {
                            port.send(&x);
                        }
                        // As rank `a`, on its channel to every other member.
                        for (&b, &mac_b) in members.iter().filter(|(&b, _)| b != a) {
                            let spoof = Spoof {
                                src: Rank::new(u16::from(a > b)),
                                dst: wire::ALL,
                                src_mac: mac_a,
                                dst_mac: mac_b,
                                tag,
                            };
                            let pair = ethbcast_proto::member::pair_group(
                                group,
                                Rank::new(a),
                                Rank::new(b),
                            );
                            if let Some(x) = hostile::forge_data(t, pair, spoof, 0, 0, &[7; 1000]) {
                                port.send(&x);
                            }
                        }
                    }
                }
            }
            port.sent
        },
    )?;
    let results = join_all(spawn_members(
        &bed,
        0..m,
        |mut g| {
            let seen = workload(&mut g, 60, 9, 0, None)?;
            Ok((seen, pre_tag_bytes(&g)))
        },
        keyed(false),
    )?);
    let sent = attacker.stop()?;
    let seen: Vec<Result<Seen, String>> = results
        .iter()
        .map(|r| r.as_ref().map(|(s, _)| s.clone()).map_err(Clone::clone))
        .collect();
    let (mut problems, refused) = check_all(&seen, 60, 0, None);
    let mut took = 0usize;
    for (s, (streams, channels)) in results.iter().flatten() {
        took += streams + channels;
        if streams + channels > 0 {
            problems.push(format!(
                "rank {} holds {streams} bytes of receive streams and {channels} bytes of channels for frames that failed their tag",
                s.rank
            ));
        }
    }
    if sent < 1000 {
        problems.push(format!("the attack did not happen: {sent} frames forged"));
    }
    Ok(verdict(
        "pre-tag-allocation",
        problems,
        format!("{sent} data frames forged as every member (the session's stream and every pair's channel, tagged with another key and untagged); the members hold {took} bytes for them (no receive stream of a rank that never broadcast, no channel), refused {refused} frames and got 60/60 messages intact"),
    ))
}

/// A replay across a counter's wrap, in-process: 2^31 control frames are hours on the wire,
/// so two keyed engines exchange notices through this function, the sender's control counter
/// moved on with `Engine::skip_control_counter_to` as if the frames in between had been sent
/// (the receiver's replay window sees only the counters, as on the wire). The hostile side
/// records the sender's first frames and replays them half a counter range later and at the
/// counter's end. Every replay must be refused, every genuine frame taken, and the session
/// must end with a typed error at the last counter rather than wrap.
pub fn replay_across_counter_wrap() -> Result<Scenario, AttackError> {
    use ethbcast_proto::engine::{Dest, Engine, SessionEnded};
    let engine = |rank| {
        let mut cfg = ethbcast_proto::engine::Config::new(0x5e55_0004, rank, 2);
        cfg.key = Some(group_key());
        Engine::new(cfg).expect("a valid configuration")
    };
    let (mut a, mut b) = (engine(Rank::new(0)), engine(Rank::new(1)));
    let now = Instant::now();
    let send = |a: &mut Engine, n: u32| -> Option<Vec<u8>> {
        let body = n.to_be_bytes().to_vec();
        a.send_control(Dest::Rank(Rank::new(1)), Control::Notice { body })
            .ok()?;
        let mut buf = vec![0u8; 1600];
        let t = a.poll_transmit(now, &mut buf)?;
        buf.truncate(t.len);
        Some(buf)
    };
    // Whether `b` took `frame` as a notice.
    let take = |b: &mut Engine, frame: &[u8]| -> bool {
        let ok = b.handle_frame(now, frame).is_ok();
        while b.poll_event().is_some() {}
        ok
    };
    let mut problems = Vec::new();
    let (mut genuine, mut refused_genuine) = (0u32, 0u32);
    let mut exchange = |a: &mut Engine, b: &mut Engine, k: u32| -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for _ in 0..k {
            genuine += 1;
            match send(a, genuine) {
                Some(f) => {
                    if !take(b, &f) {
                        refused_genuine += 1;
                    }
                    out.push(f);
                }
                None => refused_genuine += 1,
            }
        }
        out
    };
    let recorded = exchange(&mut a, &mut b, 8);
    let mut replays = 0;
    let mut accepted = 0;
    for (at, label) in [((1u32 << 31) + 3, "half"), (u32::MAX - 8, "end")] {
        a.skip_control_counter_to(at);
        exchange(&mut a, &mut b, 8);
        for f in &recorded {
            replays += 1;
            if take(&mut b, f) {
                accepted += 1;
                problems.push(format!(
                    "a frame recorded early was taken at the counter's {label}"
                ));
            }
        }
    }
    if send(&mut a, 0).is_some() {
        problems.push("a control frame left past the last counter".into());
    }
    match a.session_ended() {
        Some(SessionEnded::ControlCounter) => {}
        other => problems.push(format!(
            "the session did not end at the last counter: {other:?}"
        )),
    }
    if refused_genuine > 0 {
        problems.push(format!("{refused_genuine} genuine frames refused"));
    }
    Ok(verdict(
        "replay-across-counter-wrap",
        problems,
        format!("in-process (the counter moved on, not 2^31 frames sent): {genuine} genuine notices all taken, {replays} replays of the first 8 frames at half the counter range and at its end, {accepted} taken; the session ended at the last counter ({})", a.session_ended().map_or("no end".into(), |e| e.to_string())),
    ))
}
