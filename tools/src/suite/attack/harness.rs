//! The harness of the group scenarios: keyed members that broadcast and synchronise
//! ([`workload`]), what each saw ([`Seen`]), the checks that every survivor got every message
//! intact ([`check_all`]) and the verdict of a scenario ([`verdict`]).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use ethbcast::{
    key_from_passphrase, Algorithm, Detection, Gossip, Group, GroupError, GroupOptions, Rank,
};
// The wire format: the hostile host forges and reads frames, which the library does not
// export.
use ethbcast_proto::Kind;

use super::Scenario;
use crate::harness::group::msg;
use crate::hostile::pdu;
use crate::testbed::{Testbed, TestbedError};

/// The detector of the scenarios: the gossip period of `ethbcast-suite faults` tripled, so
/// that the bound (360 ms for 3 members) holds on a machine whose cores are shared: a tick
/// that slips by tens of milliseconds would otherwise break a 120 ms bound with or without an
/// attacker, and the scenario is about the attacker.
pub const DETECTION: Detection = Detection {
    protocol: Gossip::DoubleBinaryRoundRobin,
    t_gossip: Duration::from_millis(30),
};

/// The group key of the scenarios.
pub(super) fn group_key() -> ethbcast::Key {
    static KEY: std::sync::OnceLock<ethbcast::Key> = std::sync::OnceLock::new();
    KEY.get_or_init(|| {
        key_from_passphrase("ethbcast-bench attack", GroupOptions::default().group_id)
            .expect("the passphrase is stretched")
    })
    .clone()
}

pub(super) fn keyed(detect: bool) -> GroupOptions {
    GroupOptions {
        key: Some(group_key()),
        detector: detect.then_some(DETECTION),
        timeout: Duration::from_secs(20),
        ..GroupOptions::default()
    }
}

/// Message `i` of a session marked `salt` (sessions differ in content, so a replayed message of
/// an earlier one would show).
pub(super) fn message(i: usize, salt: u8) -> Vec<u8> {
    msg(i).into_iter().map(|b| b ^ salt).collect()
}

/// What a member saw of a workload.
#[derive(Debug, Clone)]
pub(super) struct Seen {
    pub(super) rank: Rank,
    /// Messages delivered equal to the root's.
    pub(super) intact: usize,
    /// Barriers completed.
    pub(super) barriers: usize,
    /// Ranks this member evicted, with when.
    pub(super) evicted: Vec<(Rank, Instant)>,
    /// Frames this member refused (malformed, foreign, wrong MAC, engine drops).
    pub(super) refused: u64,
}

pub(super) fn refused(g: &Group) -> u64 {
    let s = g.member_stats();
    s.malformed + s.foreign + s.mac_mismatch + s.dropped
}

/// `rounds` broadcasts from rank 0 (a barrier after every `barrier_every`-th), then a short
/// drain. With `stop`, that rank returns before round `at`, noting when.
pub(super) fn workload(
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
        evicted: g.evictions().to_vec(),
        refused: refused(g),
    })
}

/// Checks that every member delivered `rounds` intact messages and `barriers` barriers;
/// returns the problems found and the frames refused in all.
pub(super) fn check_all(
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

pub(super) fn verdict(name: &str, problems: Vec<String>, ok: String) -> Scenario {
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
pub(super) fn hub(bed: &Testbed) -> Result<(), TestbedError> {
    for i in 0..bed.hosts().len() {
        bed.set_learning(i, false)?;
    }
    Ok(())
}

pub(super) fn is_control(eth: &[u8]) -> bool {
    pdu(eth).is_some_and(|p| !p.kind().is_data() && p.kind() != Kind::Join)
}
