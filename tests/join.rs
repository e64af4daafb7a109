//! Joins as specifications, on the simulated switch: every way of forming a group ends with
//! the same roster and session at every member, and hostile hosts can neither join nor replay
//! an earlier session's join.

use std::time::{Duration, Instant};

use ethbcast::cluster::{RunEnd, SimCluster, Workload};
use ethbcast::{port_mac, Faults, Rank, SimConfig, SimNet, SimPort};
use ethbcast_proto::{
    EngineConfig, Expect, Frame, Join, JoinConfig, JoinError, JoinStats, Joined, Kind, MacAddr,
    Member, MemberConfig,
};

const GROUP: u32 = 0x10_1E;
const KEY: [u8; 32] = [7; 32];

/// Collects every join's outcome.
struct Outcomes(Vec<Option<Result<Joined, JoinError>>>);

impl Workload<Join> for Outcomes {
    fn visit(&mut self, i: usize, j: &mut Join, _now: Instant) {
        if let Some(r) = j.take_result() {
            self.0[i] = Some(r);
        }
    }
    fn done(&self) -> bool {
        self.0.iter().all(Option::is_some)
    }
}

fn cfg(i: usize, expect: Expect, key: Option<[u8; 32]>) -> JoinConfig {
    JoinConfig {
        group: GROUP,
        mac: port_mac(i as u16),
        key: key.map(Into::into),
        expect,
        max_pdu: 1500,
    }
}

/// Runs one join per entry of `expects` (port i) on a switch with `faults`; `nonce_base`
/// makes sessions differ.
fn run_joins(
    expects: Vec<Expect>,
    key: Option<[u8; 32]>,
    faults: Faults,
    nonce_base: u64,
) -> (Vec<Option<Result<Joined, JoinError>>>, RunEnd) {
    let cfgs = expects
        .into_iter()
        .enumerate()
        .map(|(i, e)| cfg(i, e, key))
        .collect();
    run_configs(cfgs, faults, nonce_base)
}

/// Runs one join per configuration (port i).
fn run_configs(
    cfgs: Vec<JoinConfig>,
    faults: Faults,
    nonce_base: u64,
) -> (Vec<Option<Result<Joined, JoinError>>>, RunEnd) {
    let n = cfgs.len();
    let net = SimNet::new(SimConfig {
        faults,
        ..SimConfig::new(n)
    })
    .unwrap();
    let joins = cfgs
        .into_iter()
        .enumerate()
        .map(|(i, c)| Join::new(c, net.now(), nonce_base + i as u64).unwrap())
        .collect();
    let mut c = SimCluster::new(net, joins).unwrap();
    let mut w = Outcomes(vec![None; n]);
    let end = c.run(Duration::from_secs(5), &mut w).unwrap();
    (w.0, end)
}

fn all_joined(out: &[Option<Result<Joined, JoinError>>]) -> Vec<Joined> {
    out.iter()
        .map(|o| o.clone().expect("an outcome").expect("joined"))
        .collect()
}

fn assert_agree(joined: &[Joined]) {
    for (i, j) in joined.iter().enumerate() {
        assert_eq!(j.peers, joined[0].peers, "member {i}");
        assert_eq!(j.session, joined[0].session, "member {i}");
        assert_eq!(j.max_pdu, joined[0].max_pdu, "member {i}");
        assert_eq!(j.peers[j.rank.index()], port_mac(i as u16));
    }
}

#[test]
fn a_listed_group_joins_in_list_order_under_loss() {
    let list: Vec<MacAddr> = [3u16, 0, 4, 1, 2].iter().map(|&i| port_mac(i)).collect();
    let (out, end) = run_joins(
        vec![Expect::List(list.clone()); 5],
        Some(KEY),
        Faults::lossy(0.1),
        100,
    );
    assert_eq!(end, RunEnd::Done);
    let joined = all_joined(&out);
    assert_agree(&joined);
    assert_eq!(joined[0].peers, list);
    assert!(joined[0].session.key.is_some());
}

#[test]
fn launcher_ranks_discovery_and_first_come_all_agree() {
    let ranks = [2, 0, 1, 3].map(Rank::new);
    let (out, _) = run_joins(
        ranks
            .iter()
            .map(|&rank| Expect::Ranks { size: 4, rank })
            .collect(),
        None,
        Faults::NONE,
        200,
    );
    let joined = all_joined(&out);
    assert_agree(&joined);
    for (i, j) in joined.iter().enumerate() {
        assert_eq!(j.rank, ranks[i]);
    }
    let (out, _) = run_joins(
        vec![Expect::Discover { expected: 6 }; 6],
        Some(KEY),
        Faults::lossy(0.05),
        300,
    );
    let joined = all_joined(&out);
    assert_agree(&joined);
    let mut sorted = joined[0].peers.clone();
    sorted.sort();
    assert_eq!(joined[0].peers, sorted);
    let mut e = vec![Expect::Invited; 5];
    e[0] = Expect::FirstCome {
        receivers: 4,
        only: None,
    };
    let (out, _) = run_joins(e, Some(KEY), Faults::NONE, 400);
    let joined = all_joined(&out);
    assert_agree(&joined);
    assert_eq!(joined[0].rank, Rank::new(0));
}

#[test]
fn the_group_frames_are_no_larger_than_the_smallest_mtu_of_its_members() {
    // Jumbo frames everywhere: the group uses them.
    let jumbo = |i: usize, e: Expect| JoinConfig {
        max_pdu: 9000,
        ..cfg(i, e, Some(KEY))
    };
    let ranks = |n: u16| Rank::all(n).map(move |rank| Expect::Ranks { size: n, rank });
    let cfgs = ranks(4).enumerate().map(|(i, e)| jumbo(i, e)).collect();
    let joined = all_joined(&run_configs(cfgs, Faults::lossy(0.05), 500).0);
    assert_agree(&joined);
    assert_eq!(joined[0].max_pdu, 9000);
    // One host of the segment with the standard MTU: every member sends frames it can take,
    // whichever rank it has and whoever coordinates.
    for odd in [0, 2] {
        let cfgs = ranks(4)
            .enumerate()
            .map(|(i, e)| match i == odd {
                true => cfg(i, e, Some(KEY)),
                false => jumbo(i, e),
            })
            .collect();
        let joined = all_joined(&run_configs(cfgs, Faults::NONE, 600).0);
        assert_agree(&joined);
        assert_eq!(joined[0].max_pdu, 1500, "host {odd} at 1500");
    }
    // A file distribution's first-come receivers: only those taken count.
    let mut cfgs = vec![jumbo(
        0,
        Expect::FirstCome {
            receivers: 2,
            only: None,
        },
    )];
    cfgs.extend((1..3).map(|i| jumbo(i, Expect::Invited)));
    let joined = all_joined(&run_configs(cfgs, Faults::NONE, 700).0);
    assert_agree(&joined);
    assert_eq!(joined[0].max_pdu, 9000);
}

#[test]
fn a_keyed_join_of_200_members_fits_its_roster_in_frames_of_a_1400_byte_mtu() {
    // Every port takes frames of at most 1400 bytes, and every member offers that: the roster
    // of 200 members comes in parts, each sealed with its tag, none of them larger.
    let n = 200;
    let net = SimNet::new(SimConfig {
        mtu: 1400,
        ..SimConfig::new(n)
    })
    .unwrap();
    let joins = (0..n)
        .map(|i| {
            let c = JoinConfig {
                max_pdu: 1400,
                ..cfg(
                    i,
                    Expect::Ranks {
                        size: n as u16,
                        rank: Rank::new(i as u16),
                    },
                    Some(KEY),
                )
            };
            Join::new(c, net.now(), 1_400 + i as u64).unwrap()
        })
        .collect();
    let mut c = SimCluster::new(net, joins).unwrap();
    let mut w = Outcomes(vec![None; n]);
    let end = c.run(Duration::from_secs(5), &mut w).unwrap();
    assert_eq!(end, RunEnd::Done);
    let joined = all_joined(&w.0);
    assert_agree(&joined);
    assert_eq!(joined[0].max_pdu, 1400);
    assert!(joined[0].session.key.is_some());
}

#[test]
fn every_session_has_its_own_identity() {
    let list: Vec<MacAddr> = (0..3).map(port_mac).collect();
    let a = all_joined(
        &run_joins(
            vec![Expect::List(list.clone()); 3],
            Some(KEY),
            Faults::NONE,
            1,
        )
        .0,
    );
    let b = all_joined(&run_joins(vec![Expect::List(list); 3], Some(KEY), Faults::NONE, 2).0);
    assert_eq!(a[0].peers, b[0].peers);
    assert_ne!(a[0].session.nonce, b[0].session.nonce);
    assert_ne!(a[0].session.group, b[0].session.group);
    assert_ne!(a[0].session.key, b[0].session.key);
}

/// A host outside the group (port `n`) joins with the wrong key, or none: with a key on the
/// group, it never gets into the roster, and cannot abort the join by claiming a taken rank.
#[test]
fn a_host_without_the_key_cannot_join_or_claim_a_rank() {
    for (expects, stranger) in [
        (
            {
                let mut e = vec![Expect::Invited; 3];
                e[0] = Expect::FirstCome {
                    receivers: 2,
                    only: None,
                };
                e
            },
            Expect::Invited,
        ),
        (
            Rank::all(3)
                .map(|rank| Expect::Ranks { size: 3, rank })
                .collect(),
            Expect::Ranks {
                size: 3,
                rank: Rank::new(1),
            },
        ),
    ] {
        let n = expects.len();
        let net = SimNet::new(SimConfig::new(n + 1)).unwrap();
        let mut joins: Vec<Join> = expects
            .into_iter()
            .enumerate()
            .map(|(i, e)| Join::new(cfg(i, e, Some(KEY)), net.now(), 50 + i as u64).unwrap())
            .collect();
        // The stranger starts first, so that a first-come coordinator would take it.
        joins.insert(
            0,
            Join::new(cfg(n, stranger, Some([9; 32])), net.now(), 99).unwrap(),
        );
        joins.rotate_left(1);
        let mut c = SimCluster::new(net, joins).unwrap();
        let mut w = Outcomes(vec![None; n + 1]);
        w.0[n] = Some(Err(JoinError::RosterMismatch)); // the stranger's own outcome is moot
        assert_eq!(c.run(Duration::from_secs(5), &mut w).unwrap(), RunEnd::Done);
        let joined = all_joined(&w.0[..n]);
        assert_agree(&joined);
        assert!(!joined[0].peers.contains(&port_mac(n as u16)));
    }
}

/// One keyed join per port `0..n`, all expecting the list of those ports in order, with
/// nonces from `nonce_base` up.
fn listed_joins(net: &SimNet, n: usize, nonce_base: u64) -> Vec<Join> {
    let list: Vec<MacAddr> = (0..n as u16).map(port_mac).collect();
    (0..n)
        .map(|i| {
            Join::new(
                cfg(i, Expect::List(list.clone()), Some(KEY)),
                net.now(),
                nonce_base + i as u64,
            )
            .unwrap()
        })
        .collect()
}

/// Runs a keyed listed join of `n` members (nonces from `nonce_base`) with a tap on one more
/// port; returns what each member joined and every frame the tap saw.
fn recorded_join(n: usize, nonce_base: u64) -> (Vec<Joined>, Vec<Vec<u8>>) {
    let net = SimNet::new(SimConfig::new(n + 1)).unwrap();
    net.set_promiscuous(n, true).unwrap();
    let joins = listed_joins(&net, n, nonce_base);
    let mut tap: SimPort = net.port(n).unwrap();
    let mut c = SimCluster::new(net, joins).unwrap();
    let mut w = Outcomes(vec![None; n]);
    assert_eq!(c.run(Duration::from_secs(5), &mut w).unwrap(), RunEnd::Done);
    let mut frames = Vec::new();
    tap.recv_frames(&mut |f| frames.push(f.to_vec()));
    (all_joined(&w.0), frames)
}

/// Records every join frame of a session at a tap port.
fn record_session(n: usize) -> Vec<Vec<u8>> {
    let (_, frames) = recorded_join(n, 10);
    assert!(
        frames.len() >= 2 * (n - 1) + 2,
        "hellos, rosters and confirmations were heard: {}",
        frames.len()
    );
    frames
}

/// Replays the recorded frames from a tap port while `joins` run; returns the outcomes.
struct Replaying {
    out: Outcomes,
    attacker: SimPort,
    frames: Vec<Vec<u8>>,
    next: usize,
    last: Option<Instant>,
}

impl Workload<Join> for Replaying {
    fn visit(&mut self, i: usize, j: &mut Join, now: Instant) {
        self.out.visit(i, j, now);
        // A burst of recorded frames every millisecond, round and round.
        if self
            .last
            .is_some_and(|t| now < t + Duration::from_millis(1))
        {
            return;
        }
        self.last = Some(now);
        for _ in 0..self.frames.len() {
            let f = &self.frames[self.next % self.frames.len()];
            self.next += 1;
            let _ = self.attacker.send_frame(f);
        }
    }
    fn done(&self) -> bool {
        self.out.done()
    }
}

/// Performs the attack: the join frames of an earlier session with the same key, sent again
/// during a new one, join nobody. With every member present the new session forms as if
/// nothing happened; with one member missing, its recorded hello does not stand in for it.
#[test]
fn a_recorded_join_does_not_replay() {
    let n = 4;
    let frames = record_session(n);
    for missing in [None, Some(2usize)] {
        let net = SimNet::new(SimConfig::new(n + 1)).unwrap();
        let joins = listed_joins(&net, n, 1000);
        let attacker = net.port(n).unwrap();
        let mut c = SimCluster::new(net, joins).unwrap();
        if let Some(m) = missing {
            c.kill(m).unwrap();
        }
        let mut w = Replaying {
            out: Outcomes(vec![None; n]),
            attacker,
            frames: frames.clone(),
            next: 0,
            last: None,
        };
        if let Some(m) = missing {
            w.out.0[m] = Some(Err(JoinError::RosterMismatch));
        }
        let end = c.run(Duration::from_millis(500), &mut w).unwrap();
        match missing {
            None => {
                assert_eq!(end, RunEnd::Done);
                let joined = all_joined(&w.out.0);
                assert_agree(&joined);
                assert_eq!(joined[0].session.nonce, 1000, "the new session's own nonce");
            }
            Some(m) => {
                assert_ne!(end, RunEnd::Done, "the join waits for the missing member");
                assert!(w
                    .out
                    .0
                    .iter()
                    .enumerate()
                    .all(|(i, o)| i == m || o.is_none()));
                assert!(!c.member(0).heard().contains(&port_mac(m as u16)));
            }
        }
    }
}

/// A member whose confirmation was lost has left its join: the coordinator still repeats the
/// roster, and the member, now running the group, confirms it from there (to the
/// coordinator only, and only the roster of its own session).
#[test]
fn a_member_confirms_a_roster_repeated_after_it_joined() {
    let n = 3;
    let (joined, frames) = recorded_join(n, 50);
    let from_coordinator: Vec<Vec<u8>> = frames
        .iter()
        .filter(|f| f[6..12] == port_mac(0).0)
        .map(|f| f[ethbcast_proto::ETH_HEADER_LEN..].to_vec())
        .collect();
    assert!(!from_coordinator.is_empty());

    let member = |late: bool| {
        let j = &joined[1];
        let mut ecfg = EngineConfig::new(j.session.group, j.rank, n as u16);
        ecfg.key = j.session.key.clone();
        let mut mc = MemberConfig::new(ecfg, j.peers.clone());
        if late {
            mc.late = Some(j.late.clone());
        }
        Member::new(Instant::now(), mc).unwrap()
    };
    let answers = |m: &mut Member, src: MacAddr| {
        let now = Instant::now();
        for f in &from_coordinator {
            m.handle_frame(now, src, f);
        }
        let mut buf = vec![0u8; 1600];
        let mut out = Vec::new();
        while let Some(t) = m.poll_transmit(now, &mut buf) {
            let f = Frame::new_checked(&buf[..t.len]).unwrap();
            if f.kind() == Kind::Join {
                out.push((t.dst, f.group()));
            }
        }
        out
    };
    let confirms = answers(&mut member(true), port_mac(0));
    assert!(!confirms.is_empty(), "the repeated roster is confirmed");
    assert!(confirms.len() <= 4, "at most a few at once: {confirms:?}");
    assert!(confirms
        .iter()
        .all(|&(dst, g)| dst == port_mac(0) && g == GROUP));
    assert!(
        answers(&mut member(true), port_mac(2)).is_empty(),
        "a roster from another host"
    );
    assert!(
        answers(&mut member(false), port_mac(0)).is_empty(),
        "a member that was not told how"
    );
}

/// A listed member behind a filter that drops every broadcast frame to it (the test-bed's
/// nftables rule; a switch that does not flood) still joins: after two broadcast rounds the
/// coordinator sends the challenge and the roster to the members it has not heard from
/// point to point as well.
#[test]
fn a_listed_member_that_hears_no_broadcast_still_joins() {
    let n = 5;
    for deaf in [vec![2usize], vec![1, 3]] {
        let net = SimNet::new(SimConfig {
            per_port: deaf
                .iter()
                .map(|&d| {
                    (
                        d,
                        Faults {
                            group_loss: 1.0,
                            ..Faults::NONE
                        },
                    )
                })
                .collect(),
            ..SimConfig::new(n)
        })
        .unwrap();
        let joins = listed_joins(&net, n, 700);
        let mut c = SimCluster::new(net, joins).unwrap();
        let mut w = Outcomes(vec![None; n]);
        let end = c.run(Duration::from_secs(2), &mut w).unwrap();
        assert_eq!(end, RunEnd::Done, "deaf {deaf:?}");
        assert_agree(&all_joined(&w.0));
    }
}

/// Runs one join per entry of `expects` (port i), with `key`, and a tap on one more port;
/// returns every frame the tap saw.
fn record(expects: Vec<Expect>, key: Option<[u8; 32]>, nonce_base: u64) -> Vec<Vec<u8>> {
    let n = expects.len();
    let net = SimNet::new(SimConfig::new(n + 1)).unwrap();
    net.set_promiscuous(n, true).unwrap();
    let joins = expects
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            Join::new(cfg(i, e, key), net.now(), nonce_base + i as u64)
                .unwrap()
                .with_clock(nonce_base)
        })
        .collect();
    let mut tap: SimPort = net.port(n).unwrap();
    let mut c = SimCluster::new(net, joins).unwrap();
    let mut w = Outcomes(vec![None; n]);
    assert_eq!(c.run(Duration::from_secs(5), &mut w).unwrap(), RunEnd::Done);
    all_joined(&w.0);
    let mut frames = Vec::new();
    tap.recv_frames(&mut |f| frames.push(f.to_vec()));
    frames
}

/// The join message type of an Ethernet frame (1 challenge, 2 hello, 3 roster, 4 confirm).
fn join_type(eth: &[u8]) -> Option<u8> {
    let f = Frame::new_checked(eth.get(ethbcast_proto::ETH_HEADER_LEN..)?).ok()?;
    (f.kind() == Kind::Join)
        .then(|| f.payload().first().copied())
        .flatten()
}

fn src_of(eth: &[u8]) -> MacAddr {
    let mut m = [0u8; 6];
    m.copy_from_slice(&eth[6..12]);
    MacAddr(m)
}

/// `eth` sent again, unchanged, from `from` (a host that has only the recording).
fn resent_from(eth: &[u8], from: MacAddr) -> Vec<u8> {
    let mut v = eth.to_vec();
    v[6..12].copy_from_slice(&from.0);
    v
}

/// A keyless join frame rebuilt as if `from` had sent it: its sender's MAC replaced by `from`
/// wherever it appears (a host without a key can write any join message).
fn forged_from(eth: &[u8], from: MacAddr) -> Vec<u8> {
    let orig = src_of(eth);
    let f = Frame::new_checked(&eth[ethbcast_proto::ETH_HEADER_LEN..]).unwrap();
    let mut body = f.payload().to_vec();
    for i in 0..body.len().saturating_sub(5) {
        if body[i..i + 6] == orig.0 {
            body[i..i + 6].copy_from_slice(&from.0);
        }
    }
    let pdu = ethbcast_proto::Control::Join { body }.to_vec(f.group(), f.src(), f.dst(), 0);
    let mut v = eth[..ethbcast_proto::ETH_HEADER_LEN].to_vec();
    v[6..12].copy_from_slice(&from.0);
    v.extend_from_slice(&pdu);
    v
}

/// The `k`-th MAC of a hostile host that sends from as many addresses as it likes.
fn stranger(k: usize) -> MacAddr {
    MacAddr([0x02, 0xEE, 0, (k >> 16) as u8, (k >> 8) as u8, k as u8])
}

/// Joins with a hostile host on the last port: every millisecond it gets what its port
/// received since (everything, if promiscuous) and sends what `attack` makes of it.
struct Attacked<F> {
    out: Outcomes,
    port: SimPort,
    attack: F,
    last: Option<Instant>,
    every: Duration,
    sent: usize,
}

impl<F: FnMut(&[Vec<u8>]) -> Vec<Vec<u8>>> Workload<Join> for Attacked<F> {
    fn visit(&mut self, i: usize, j: &mut Join, now: Instant) {
        self.out.visit(i, j, now);
        if self.last.is_some_and(|t| now < t + self.every) {
            return;
        }
        self.last = Some(now);
        let mut got = Vec::new();
        self.port.recv_frames(&mut |f| got.push(f.to_vec()));
        for f in (self.attack)(&got) {
            if self.port.send_frame(&f).is_ok() {
                self.sent += 1;
            }
        }
    }
    fn done(&self) -> bool {
        self.out.done()
    }
}

/// Outcomes, how the run ended, how long it took, frames the hostile host sent, and each
/// join's statistics.
type AttackedRun = (
    Vec<Option<Result<Joined, JoinError>>>,
    RunEnd,
    Duration,
    usize,
    Vec<JoinStats>,
);

/// Runs `expects` (ports 0..n, nonces from `nonce_base`) against a hostile host on port n
/// (promiscuous if `tap`, acting every millisecond, or on every step if `tap`; port 2 loses
/// 80% of what it should receive if `slow`, so that its hello comes late) for up to `limit`;
/// returns the outcomes, how the run ended, how
/// long it took, the frames the hostile host sent, and each join's statistics.
fn attacked_join<F: FnMut(&[Vec<u8>]) -> Vec<Vec<u8>>>(
    expects: Vec<Expect>,
    key: Option<[u8; 32]>,
    nonce_base: u64,
    tap: bool,
    slow: bool,
    limit: Duration,
    attack: F,
) -> AttackedRun {
    let n = expects.len();
    let net = SimNet::new(SimConfig {
        per_port: if slow {
            vec![(2, Faults::lossy(0.8))]
        } else {
            Vec::new()
        },
        ..SimConfig::new(n + 1)
    })
    .unwrap();
    net.set_promiscuous(n, tap).unwrap();
    let start = net.now();
    let joins = expects
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            Join::new(cfg(i, e, key), start, nonce_base + i as u64)
                .unwrap()
                .with_clock(nonce_base)
        })
        .collect();
    let port = net.port(n).unwrap();
    let mut c = SimCluster::new(net, joins).unwrap();
    let mut w = Attacked {
        out: Outcomes(vec![None; n]),
        port,
        attack,
        last: None,
        every: if tap {
            Duration::ZERO
        } else {
            Duration::from_millis(1)
        },
        sent: 0,
    };
    let end = c.run(limit, &mut w).unwrap();
    let took = c.net().now() - start;
    let stats = c.members().map(Join::stats).collect();
    (w.out.0, end, took, w.sent, stats)
}

fn ranked(n: u16) -> Vec<Expect> {
    Rank::all(n)
        .map(|rank| Expect::Ranks { size: n, rank })
        .collect()
}

fn first_come(n: usize) -> Vec<Expect> {
    let mut e = vec![Expect::Invited; n];
    e[0] = Expect::FirstCome {
        receivers: n - 1,
        only: None,
    };
    e
}

/// Hellos a member may send in `t`: a round of at most 8 (one per challenge held) every
/// 5 ms at most, however many challenges arrive (and one more round when its roster is
/// decided).
fn hello_bound(t: Duration) -> u64 {
    8 * (t.as_micros() / 5_000 + 2) as u64
}

/// Performs the attack: a hostile host without the key re-sends every challenge of an earlier
/// keyed session from 64 MACs of its own, 64 times a millisecond, during a new one. The join
/// completes anyway (the challenge seals its coordinator's MAC and its time, and a member
/// keeps the newest one of each coordinator), with the same roster, and no member's hello
/// rate grows with the flood.
#[test]
fn a_challenge_flood_from_many_macs_neither_stalls_a_keyed_join_nor_multiplies_hellos() {
    for expects in [
        ranked(3),
        vec![Expect::Discover { expected: 3 }; 3],
        first_come(3),
    ] {
        let recorded = record(expects.clone(), Some(KEY), 10);
        let mut challenges: Vec<Vec<u8>> = Vec::new();
        for f in recorded.iter().filter(|f| join_type(f) == Some(1)) {
            if !challenges.contains(f) {
                challenges.push(f.clone());
            }
        }
        assert!(!challenges.is_empty(), "{expects:?}: challenges recorded");
        let mut k = 0;
        let (out, end, took, sent, stats) = attacked_join(
            expects.clone(),
            Some(KEY),
            1000,
            false,
            true,
            Duration::from_secs(3),
            |_| {
                let mut v = Vec::new();
                for _ in 0..64 {
                    k += 1;
                    let c = &challenges[k % challenges.len()];
                    v.push(resent_from(c, stranger(k % 64)));
                    if k % 8 == 0 {
                        v.push(c.clone());
                    }
                }
                v
            },
        );
        assert_eq!(end, RunEnd::Done, "{expects:?}: the join completes");
        assert!(sent >= 256, "the attack happened: {sent}");
        let joined = all_joined(&out);
        assert_agree(&joined);
        assert_eq!(joined[0].session.nonce, 1000, "{expects:?}");
        assert!(joined[0].peers.iter().all(|m| m.0[1] != 0xEE));
        for (i, s) in stats.iter().enumerate() {
            assert!(
                s.hellos <= hello_bound(took),
                "{expects:?}: member {i} sent {} hellos in {took:?}",
                s.hellos
            );
        }
    }
}

/// Performs the attack on a keyless join (where anybody can write a challenge): challenges
/// and rosters from hundreds of MACs, each a new coordinator. A member keeps a bounded number
/// of challenges and rosters, and answers at a bounded rate rather than once per challenge.
#[test]
fn forged_challenges_and_rosters_from_many_macs_hold_bounded_state_and_hellos() {
    let expects = first_come(3);
    let recorded = record(expects.clone(), None, 10);
    let pairs: Vec<Vec<u8>> = recorded
        .iter()
        .filter(|f| matches!(join_type(f), Some(1) | Some(3)) && src_of(f) == port_mac(0))
        .take(8)
        .cloned()
        .collect();
    assert!(pairs.iter().any(|f| join_type(f) == Some(3)), "a roster");
    let mut k = 0;
    let (_, _, took, sent, stats) = attacked_join(
        vec![Expect::Invited; 2],
        None,
        1000,
        false,
        false,
        Duration::from_millis(500),
        |_| {
            let mut v = Vec::new();
            for _ in 0..16 {
                k += 1;
                for f in &pairs {
                    v.push(forged_from(f, stranger(k)));
                }
            }
            v
        },
    );
    assert!(sent > 1000, "the attack happened: {sent}");
    for (i, s) in stats.iter().enumerate() {
        assert!(s.challenges <= 8, "member {i}: {s:?}");
        assert!(s.peak_rosters <= 8, "member {i}: {s:?}");
        assert!(
            s.hellos <= hello_bound(took),
            "member {i} sent {} hellos in {took:?}",
            s.hellos
        );
    }
}

/// Performs the attack: recorded challenge/roster pairs of an earlier keyed session, re-sent
/// from a new MAC each time, during a new join of invited members. The rosters a member
/// collects stay bounded (before, one per MAC, never removed), and the join completes.
#[test]
fn replayed_rosters_from_new_macs_do_not_grow_a_keyed_join() {
    let expects = first_come(3);
    let recorded = record(expects.clone(), Some(KEY), 10);
    let challenge = recorded
        .iter()
        .find(|f| join_type(f) == Some(1))
        .unwrap()
        .clone();
    let roster = recorded
        .iter()
        .find(|f| join_type(f) == Some(3))
        .unwrap()
        .clone();
    let mut k = 0;
    let (out, end, _, sent, stats) = attacked_join(
        expects,
        Some(KEY),
        1000,
        false,
        true,
        Duration::from_secs(3),
        |_| {
            let mut v = Vec::new();
            for _ in 0..16 {
                k += 1;
                v.push(resent_from(&challenge, stranger(k)));
                v.push(resent_from(&roster, stranger(k)));
            }
            v
        },
    );
    assert!(sent >= 256, "the attack happened: {sent}");
    for (i, s) in stats.iter().enumerate() {
        assert!(s.peak_rosters <= 8, "member {i}: {s:?}");
    }
    assert_eq!(end, RunEnd::Done);
    let joined = all_joined(&out);
    assert_agree(&joined);
    // What a group reports of its join (`Group::join_stats`) is the join's, as it finished.
    for (i, (j, s)) in joined.iter().zip(&stats).enumerate() {
        assert_eq!(j.stats, *s, "member {i}");
    }
}

/// Performs the attack: a host that sees the members' unicast re-sends every hello and
/// confirmation from its own MAC. The tags seal the member's MAC, so it neither takes a
/// first-come slot nor aborts a discovery ("4 members announced") or a ranked join
/// (`RankClaimedTwice`): every kind of join completes with the members alone.
#[test]
fn hellos_and_confirmations_resent_from_a_foreign_mac_change_nothing() {
    for expects in [
        ranked(3),
        vec![Expect::Discover { expected: 3 }; 3],
        first_come(3),
    ] {
        let n = expects.len();
        let me = port_mac(n as u16);
        let (out, end, _, sent, _) = attacked_join(
            expects.clone(),
            Some(KEY),
            1000,
            true,
            true,
            Duration::from_secs(3),
            |got| {
                got.iter()
                    .filter(|f| matches!(join_type(f), Some(2) | Some(4)) && src_of(f) != me)
                    .map(|f| resent_from(f, me))
                    .collect()
            },
        );
        assert!(sent > 0, "{expects:?}: the attack happened");
        let results: Vec<_> = out.iter().flatten().collect();
        assert!(
            results.iter().all(|r| r.is_ok()),
            "{expects:?}: {results:?}"
        );
        assert_eq!(end, RunEnd::Done, "{expects:?}");
        let joined = all_joined(&out);
        assert_agree(&joined);
        assert!(!joined[0].peers.contains(&me), "{expects:?}");
    }
}
