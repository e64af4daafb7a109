//! Attacks on the keyed join: a member with another key and replayed join frames, a flood of
//! challenges from many MACs, replayed rosters from new MACs, hellos and confirmations re-sent
//! from foreign MACs; and the harness that joins the members in each way ([`keyed_joins`]) and
//! checks their rosters ([`check_joins`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ethbcast::{
    key_from_passphrase, Expect, Group, GroupError, GroupOptions, JoinConfig, Membership, Rank,
};
// The wire format and the join's bounds: the join scenarios forge join frames and check
// what a member held against the limits the core sets, which the library does not export.
use ethbcast_proto::{seal, Control, Kind, ETH_HEADER_LEN, HELLO_GAP, MAX_CHALLENGES, TAG_LEN};
use rand::{RngCore, SeedableRng};

use super::harness::{check_all, hub, keyed, verdict, workload, Seen};
use super::{io, AttackError, Scenario};
use crate::harness::group::{bed, join_all, ms, Member};
use crate::hostile::{self, pdu, HostileError};
use crate::netns;
use crate::testbed::Testbed;

/// Forged join: the members discover each other with the key; the hostile host runs a member
/// of its own with another key, and replays and mutates every join frame it sees.
pub(super) fn forged_join(prefix: &str, hosts: usize) -> Result<Scenario, AttackError> {
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
                    .filter_map(|r| g.mac_of(Rank::new(r)))
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

/// How long a member of the join scenarios may take to join: far above a join's tens of
/// milliseconds, so that a join the attack stalls fails the scenario rather than the run.
pub(super) const JOIN_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the last member of the join scenarios waits before it joins: the others' join
/// stays open (challenging, answering) that long, under attack.
pub(super) const LATE_JOINER: Duration = Duration::from_millis(400);

/// How a join scenario's members join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum JoinKind {
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
pub(super) struct JoinSeen {
    pub(super) rank: u16,
    /// Every rank's MAC, in rank order.
    pub(super) roster: Vec<[u8; 6]>,
    /// What the join held and sent ([`Group::join_stats`]).
    pub(super) stats: ethbcast::JoinStats,
    /// From the call to the group.
    pub(super) took: Duration,
}

/// A keyed join of hosts `0..m` as `kind` says (host `m - 1` starts [`LATE_JOINER`] late),
/// then one barrier; each member's view of the join, in host order.
pub(super) fn keyed_joins(
    bed: &Testbed,
    m: usize,
    kind: JoinKind,
) -> Result<Vec<Result<JoinSeen, String>>, AttackError> {
    let macs: Vec<ethbcast::MacAddr> = bed.hosts()[..m]
        .iter()
        .map(|h| ethbcast::MacAddr(h.mac))
        .collect();
    let handles: Vec<Member<JoinSeen>> = (0..m)
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
                    .filter_map(|r| g.mac_of(Rank::new(r)))
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
pub(super) fn check_joins(
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
pub(super) fn join_type(eth: &[u8]) -> Option<u8> {
    let p = pdu(eth)?;
    if p.kind() != Kind::Join {
        return None;
    }
    p.payload().first().copied()
}

/// The `k`-th of the hostile host's made-up source MACs.
pub(super) fn stranger(k: usize) -> [u8; 6] {
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
pub(super) fn resent_from(eth: &[u8], from: [u8; 6]) -> Vec<u8> {
    let mut v = eth.to_vec();
    v[6..12].copy_from_slice(&from);
    v
}

/// A challenge of the hostile host's own, from `from` and naming it as the coordinator, with
/// nonce `nonce`, `size` members and the latest time there is (it would displace any real
/// challenge held), sealed with [`hostile::ATTACKER_KEY`]; header fields from `template` (a
/// real challenge).
pub(super) fn forged_challenge(
    template: &[u8],
    from: [u8; 6],
    nonce: u64,
    size: u16,
) -> Option<Vec<u8>> {
    let p = pdu(template)?;
    let mut body = vec![1u8];
    body.extend_from_slice(&nonce.to_be_bytes());
    body.extend_from_slice(&size.to_be_bytes());
    body.extend_from_slice(&from);
    body.extend_from_slice(&u64::MAX.to_be_bytes());
    let mut v = Control::Join { body }.to_vec(p.group(), p.src(), p.dst(), 0);
    let n = v.len();
    v.resize(n + TAG_LEN, 0);
    let n = seal(&hostile::ATTACKER_KEY, &mut v, n).ok()?;
    v.truncate(n);
    let mut f = template[..ETH_HEADER_LEN].to_vec();
    f[6..12].copy_from_slice(&from);
    f.extend_from_slice(&v);
    Some(f)
}

/// Distinct join frames of type `kind` sent by one of `from` in `frames`.
pub(super) fn join_frames(frames: &[Vec<u8>], kind: u8, from: &[[u8; 6]]) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    for f in frames {
        if join_type(f) == Some(kind) && from.iter().any(|m| f[6..12] == *m) && !out.contains(f) {
            out.push(f.clone());
        }
    }
    out
}

/// Hellos a member may send in `t` ([`ethbcast_proto::Join`]): a round of at most
/// `MAX_CHALLENGES` (one per challenge held) every `HELLO_GAP` at most, however many
/// challenges arrive, and one more round when its roster is decided.
pub(super) fn hello_bound(t: Duration) -> u64 {
    MAX_CHALLENGES as u64 * (t.as_micros() / HELLO_GAP.as_micros() + 2) as u64
}

/// What the challenge flood sent and saw.
#[derive(Debug, Default)]
pub(super) struct Flooded {
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
pub(super) fn join_challenge_flood(prefix: &str, hosts: usize) -> Result<Scenario, AttackError> {
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
        if s.stats.challenges > MAX_CHALLENGES {
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
            MAX_CHALLENGES,
            HELLO_GAP
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
pub(super) fn join_replayed_rosters(prefix: &str, hosts: usize) -> Result<Scenario, AttackError> {
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
pub(super) fn join_resent_hellos(prefix: &str, hosts: usize) -> Result<Scenario, AttackError> {
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
