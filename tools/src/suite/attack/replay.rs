//! Replays: frames recorded in an earlier session with the same key, control frames of the
//! running session, and frames recorded early in a session replayed across its counter's
//! range.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ethbcast::{Dest, Rank, SessionEnded};
// The wire format and the engine itself, with its test hook: this scenario forges control
// frames and runs two engines in-process, below the library's API.
use ethbcast_proto::{test_hooks, Control, Engine};
use rand::SeedableRng;

use super::harness::{check_all, group_key, hub, is_control, keyed, verdict, workload};
use super::{AttackError, Scenario};
use crate::harness::group::{bed, join_all, spawn_members};
use crate::hostile;

/// Replay from an earlier session with the same key: everything recorded in session 1 is
/// replayed (with mutated copies) during session 2.
pub(super) fn replay_earlier_session(prefix: &str, hosts: usize) -> Result<Scenario, AttackError> {
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
pub(super) fn replay_control_in_session(
    prefix: &str,
    hosts: usize,
) -> Result<Scenario, AttackError> {
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

/// A replay across a counter's wrap, in-process: 2^31 control frames are hours on the wire,
/// so two keyed engines exchange notices through this function, the sender's control counter
/// moved on with `test_hooks::skip_control_counter_to` as if the frames in between had been sent
/// (the receiver's replay window sees only the counters, as on the wire). The hostile side
/// records the sender's first frames and replays them half a counter range later and at the
/// counter's end. Every replay must be refused, every genuine frame taken, and the session
/// must end with a typed error at the last counter rather than wrap.
pub(super) fn replay_across_counter_wrap() -> Result<Scenario, AttackError> {
    let engine = |rank| {
        let mut cfg = ethbcast::EngineConfig::new(0x5e55_0004, rank, 2);
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
        test_hooks::skip_control_counter_to(&mut a, at);
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
