//! The group API on the simulated switch, as specifications: whatever the faults, every
//! surviving member completes every call with the root's bytes, every barrier releases, and
//! dead members are evicted by everybody within the detector's bound.

use ethbcast::simgroup::{run_group, GroupReport, GroupScenario};
use ethbcast::{Faults, Rank};
use ethbcast_proto::{
    Algorithm, DetectorConfig, Done, EngineConfig, Gossip, Member, MemberConfig, MemberError,
};

fn assert_perfect(r: &GroupReport) {
    assert!(r.perfect(), "{r:?}");
}

#[test]
fn eight_members_broadcast_with_every_algorithm_and_meet_at_barriers() {
    let r = run_group(&GroupScenario::new(8, 200)).unwrap();
    assert_perfect(&r);
    assert_eq!(r.deliveries.expected, 200 * 7);
    assert_eq!(r.barriers_expected, 20 * 8);
}

#[test]
fn a_member_behind_a_broadcast_filter_is_served_point_to_point() {
    let mut sc = GroupScenario::new(6, 120);
    sc.filter = 1;
    let r = run_group(&sc).unwrap();
    assert_perfect(&r);
}

#[test]
fn when_broadcast_fails_for_many_the_roots_fall_back_to_the_tree() {
    let mut sc = GroupScenario::new(6, 120);
    sc.filter = 3;
    let r = run_group(&sc).unwrap();
    assert_perfect(&r);
    assert!(r.tree_fallbacks > 0, "{r:?}");
}

#[test]
fn killed_members_are_evicted_within_the_bound_and_the_rest_go_on() {
    let mut sc = GroupScenario::new(12, 150);
    sc.kill = 2;
    let r = run_group(&sc).unwrap();
    assert_perfect(&r);
    assert_eq!(r.evicted.len(), 2);
}

#[test]
fn the_group_survives_every_fault_at_once() {
    let mut sc = GroupScenario::new(16, 200);
    sc.kill = 2;
    sc.filter = 1;
    sc.traffic.faults = Faults {
        loss: 0.02,
        burst_loss: 0.01,
        dup: 0.01,
        reorder: 0.01,
        corrupt: 0.001,
        ..Faults::NONE
    };
    let r = run_group(&sc).unwrap();
    assert_perfect(&r);
}

/// The default algorithm in groups of two and of three, with loss, duplicates and reordering:
/// every call completes with the root's bytes at every member, every barrier releases.
#[test]
fn the_default_algorithm_delivers_in_groups_of_two_and_three_under_faults() {
    for nodes in [2, 3] {
        let mut sc = GroupScenario::new(nodes, 150);
        sc.algos = vec![Algorithm::default()];
        sc.traffic.faults = Faults {
            loss: 0.03,
            dup: 0.01,
            reorder: 0.01,
            ..Faults::NONE
        };
        let r = run_group(&sc).unwrap();
        assert_perfect(&r);
        assert_eq!(r.deliveries.expected, 150 * u64::from(nodes - 1));
    }
}

#[test]
fn the_same_seed_gives_the_same_report() {
    let mut sc = GroupScenario::new(8, 60);
    sc.kill = 1;
    sc.traffic.faults = Faults::lossy(0.02);
    let a = run_group(&sc).unwrap();
    let b = run_group(&sc).unwrap();
    assert_eq!(a, b);
    assert!(a.perfect(), "{a:?}");
}

/// A root that returns at once from each call runs far ahead of receivers that enter their
/// calls late: the messages wait (pushed buffer, then the root's window) and every receiver
/// still gets each of them, in order.
#[test]
fn a_root_far_ahead_of_late_receivers_loses_nothing() {
    use ethbcast::cluster::{SimCluster, Workload};
    use ethbcast::{port_mac, SimConfig, SimNet};
    use std::time::{Duration, Instant};

    struct Ahead {
        calls: u64,
        at: Vec<u64>,
        in_call: Vec<bool>,
        /// Receivers start only after this instant.
        late: Option<Instant>,
        wrong: u64,
    }
    impl Workload for Ahead {
        fn visit(&mut self, i: usize, m: &mut Member, now: Instant) {
            let late = *self.late.get_or_insert(now + Duration::from_millis(20));
            loop {
                if self.in_call[i] {
                    match m.take_result() {
                        None => return,
                        Some(Ok(Done::Bcast(d))) if d == self.at[i].to_be_bytes() => {}
                        Some(_) => self.wrong += 1,
                    }
                    self.in_call[i] = false;
                    self.at[i] += 1;
                }
                if self.at[i] >= self.calls || (i != 0 && now < late) {
                    return;
                }
                let data = if i == 0 {
                    self.at[i].to_be_bytes().to_vec()
                } else {
                    Vec::new()
                };
                m.bcast(now, Rank::new(0), data, Algorithm::Simple).unwrap();
                self.in_call[i] = true;
            }
        }
        fn done(&self) -> bool {
            self.at.iter().all(|&a| a >= self.calls)
        }
        fn next_wake(&self) -> Option<Instant> {
            self.late
        }
    }
    for window in [16, 64] {
        let n = 4;
        let net = SimNet::new(SimConfig::new(n)).unwrap();
        let macs: Vec<_> = (0..n).map(|i| port_mac(i as u16)).collect();
        let members = (0..n)
            .map(|i| {
                let mut cfg = EngineConfig::new(1, Rank::new(i as u16), n as u16);
                cfg.window = window;
                cfg.ack_delay = Duration::ZERO;
                Member::new(net.now(), MemberConfig::new(cfg, macs.clone())).unwrap()
            })
            .collect();
        let mut c = SimCluster::new(net, members).unwrap();
        let mut w = Ahead {
            calls: 200,
            at: vec![0; n],
            in_call: vec![false; n],
            late: None,
            wrong: 0,
        };
        let end = c.run(Duration::from_secs(60), &mut w).unwrap();
        assert_eq!(
            end,
            ethbcast::cluster::RunEnd::Done,
            "window {window}: {:?}",
            w.at
        );
        assert_eq!(w.wrong, 0);
    }
}

/// Performs the spoofed-liveness attack: a host outside the group records what the members
/// about to die send, and once they are dead it sends it again under their MACs, with forged
/// copies (fresh control counters, a tag of its own key). The replay windows refuse the
/// recordings, the key refuses the forgeries: the dead are evicted within the bound and the
/// survivors complete every call.
#[test]
fn a_dead_member_is_evicted_although_an_impostor_speaks_for_it() {
    let mut sc = GroupScenario::new(6, 120);
    sc.kill = 1;
    sc.key = Some([0x42; 32].into());
    sc.impostor = true;
    let r = run_group(&sc).unwrap();
    assert_perfect(&r);
    assert!(r.impostor_frames > 1000, "{r:?}");
}

/// What the key is for: without one, the impostor's forgeries (fresh counters, no tag to
/// check) pass for the dead member's own frames, and it is not evicted in time.
#[test]
fn without_a_key_an_impostor_keeps_a_dead_member_alive() {
    let mut sc = GroupScenario::new(6, 120);
    sc.kill = 1;
    sc.impostor = true;
    sc.limit = std::time::Duration::from_secs(5);
    let r = run_group(&sc).unwrap();
    assert!(r.impostor_frames > 1000, "{r:?}");
    assert!(!r.perfect(), "{r:?}");
    assert!(
        r.evicted.is_empty() || r.max_detect_ms > r.bound_ms,
        "{r:?}"
    );
}

/// The root dies after its tenth broadcast (the test-bed's `faults` scenario `root-killed`),
/// under loss, for many seeds: every receiver got the ten messages intact and in order, and
/// its eleventh call fails with `PeerDead(0)` within the detector's bound of the death;
/// nothing half-received is delivered.
#[test]
fn when_the_root_dies_every_receivers_next_call_fails_with_peer_dead_in_time() {
    use ethbcast::cluster::{RunEnd, SimCluster, Workload};
    use ethbcast::Detection;
    use ethbcast::{port_mac, SimConfig, SimNet};

    use std::time::{Duration, Instant};

    const BEFORE: u64 = 10;
    struct RootDies {
        at: Vec<u64>,
        in_call: Vec<bool>,
        /// Per receiver: how its call after the root's death ended, and when.
        ended: Vec<Option<(Result<(), String>, Instant)>>,
        wrong: u64,
        killed_at: Option<Instant>,
        /// The switch, whose clock stamps the death.
        net: SimNet,
    }
    impl Workload for RootDies {
        fn visit(&mut self, i: usize, m: &mut Member, now: Instant) {
            loop {
                if self.in_call[i] {
                    match m.take_result() {
                        None => return,
                        Some(Ok(Done::Bcast(d))) if i == 0 || d == self.at[i].to_be_bytes() => {}
                        Some(Ok(_)) => self.wrong += 1,
                        Some(Err(MemberError::PeerDead(r)))
                            if r == Rank::new(0) && self.at[i] == BEFORE =>
                        {
                            self.ended[i] = Some((Ok(()), now));
                        }
                        Some(Err(e)) => self.ended[i] = Some((Err(e.to_string()), now)),
                    }
                    self.in_call[i] = false;
                    self.at[i] += 1;
                }
                if self.ended[i].is_some() || (i == 0 && self.at[i] >= BEFORE) {
                    return;
                }
                if i != 0 && self.at[i] > BEFORE {
                    self.ended[i] = Some((Err("the call after the death completed".into()), now));
                    return;
                }
                let data = if i == 0 {
                    self.at[i].to_be_bytes().to_vec()
                } else {
                    Vec::new()
                };
                m.bcast(now, Rank::new(0), data, Algorithm::PushPull)
                    .unwrap();
                self.in_call[i] = true;
            }
        }
        fn done(&self) -> bool {
            self.ended[1..].iter().all(Option::is_some)
        }
        fn kill_now(&mut self) -> Vec<usize> {
            // The root has handed its tenth message over and is idle: it dies.
            if self.killed_at.is_none() && self.at[0] >= BEFORE {
                self.killed_at = Some(self.net.now());
                return vec![0];
            }
            Vec::new()
        }
    }
    let n = 6u16;
    let detection = Detection {
        protocol: Gossip::DoubleBinaryRoundRobin,
        t_gossip: Duration::from_millis(10),
    };
    for seed in 1..=8 {
        let net = SimNet::new(SimConfig {
            seed,
            faults: ethbcast::Faults::lossy(0.02),
            ..SimConfig::new(usize::from(n))
        })
        .unwrap();
        let macs: Vec<_> = (0..n).map(port_mac).collect();
        let members = (0..n)
            .map(|i| {
                let mut mc = MemberConfig::new(EngineConfig::new(3, Rank::new(i), n), macs.clone());
                let mut dc = DetectorConfig::new(Rank::new(i), n, detection.t_gossip);
                dc.protocol = detection.protocol;
                mc.detector = Some(dc);
                Member::new(net.now(), mc).unwrap()
            })
            .collect();
        let clock = net.clone();
        let mut c = SimCluster::new(net, members).unwrap();
        let bound = detection.bound(n);
        let mut w = RootDies {
            at: vec![0; usize::from(n)],
            in_call: vec![false; usize::from(n)],
            ended: vec![None; usize::from(n)],
            wrong: 0,
            killed_at: None,
            net: clock,
        };
        let end = c.run(Duration::from_secs(10), &mut w).unwrap();
        assert_eq!(end, RunEnd::Done, "seed {seed}: {:?}", w.ended);
        assert_eq!(w.wrong, 0, "seed {seed}");
        let killed = w.killed_at.expect("the root died");
        for (i, e) in w.ended.iter().enumerate().skip(1) {
            let (r, when) = e.as_ref().unwrap();
            assert_eq!(r, &Ok(()), "seed {seed}, member {i}");
            let took = when.duration_since(killed);
            assert!(
                took <= bound,
                "seed {seed}, member {i}: {took:?} > {bound:?}"
            );
            assert_eq!(w.at[i], BEFORE + 1, "seed {seed}, member {i}");
        }
    }
}

/// The ports' faults of the allgather tests: loss, burst loss, duplication and reordering.
const ALLGATHER_FAULTS: Faults = Faults {
    loss: 0.03,
    burst_loss: 0.01,
    dup: 0.01,
    reorder: 0.01,
    ..Faults::NONE
};

/// Allgather (MPI_Allgatherv) on every member's broadcast stream at once, parts of lengths
/// that differ per member and call, with loss, duplication and reordering on every port:
/// every survivor gets every part, whole, in rank order, every time.
#[test]
fn allgathers_under_loss_give_every_member_every_part_whole() {
    let mut sc = GroupScenario::new(8, 60);
    sc.allgather_every = 1;
    sc.traffic.faults = ALLGATHER_FAULTS;
    let r = run_group(&sc).unwrap();
    assert_perfect(&r);
    assert_eq!(r.allgathers_expected, 60 * 8);
    assert_eq!(r.allgathers_exact, 60 * 8, "{r:?}");
}

/// Parts of 64 KiB from 8 members: the roots take turns in rank order (all at once, their
/// windows of frames would flood every port), under the same faults: every part whole, every
/// time.
#[test]
fn allgathers_of_large_parts_take_turns_and_give_every_part_whole() {
    let mut sc = GroupScenario::new(8, 12);
    sc.allgather_every = 1;
    sc.traffic.sizes = vec![65536, 60000];
    sc.traffic.faults = ALLGATHER_FAULTS;
    let r = run_group(&sc).unwrap();
    assert_perfect(&r);
    assert_eq!(r.allgathers_expected, 12 * 8);
    assert_eq!(r.allgathers_exact, 12 * 8, "{r:?}");
}

/// A member that dies in the middle of a stream of allgathers: every survivor's allgather
/// that needs it fails with the dead member named, within the detector's bound, never hangs
/// and never returns a partial result; the broadcasts and barriers of the survivors go on.
#[test]
fn a_member_dying_during_allgathers_fails_them_everywhere_within_the_bound() {
    let mut sc = GroupScenario::new(8, 90);
    sc.allgather_every = 1;
    sc.kill = 1;
    sc.traffic.faults = Faults::lossy(0.01);
    let r = run_group(&sc).unwrap();
    assert_perfect(&r);
    assert!(r.allgathers_exact > 0, "{r:?}");
    assert!(r.allgathers_failed_dead > 0, "{r:?}");
    assert!(r.max_allgather_fail_ms > 0.0, "{r:?}");
}
