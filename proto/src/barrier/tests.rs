//! Barriers as a specification: a seeded in-test network of members with latency and loss runs
//! many consecutive barriers and checks that nobody leaves early and everybody leaves.

use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::engine::Dest;
use crate::queue::EventQueue;
use crate::wire::{BarrierAlgo, BarrierMsg, Control};
use crate::Rank;

use super::{log2_ceil, Barrier, BarrierConfig, BarrierError, BarrierStats, FrameError, Op};

/// A barrier algorithm with the arity of its tree (unused by dissemination).
type Algorithm = (BarrierAlgo, u16);

fn algos(n: u16) -> Vec<Algorithm> {
    vec![
        (BarrierAlgo::Broadcast, 2),
        (BarrierAlgo::Broadcast, 4),
        (BarrierAlgo::Broadcast, n.saturating_sub(1).max(1)),
        (BarrierAlgo::Dissemination, 0),
    ]
}

/// A message on its way from `src` to `dst`.
struct InFlight {
    src: Rank,
    dst: Rank,
    msg: BarrierMsg,
}

/// n members on a switch: point-to-point and broadcast frames, each copy lost independently.
struct Net {
    base: Instant,
    now: Duration,
    members: Vec<Barrier>,
    crashed: Vec<bool>,
    queue: EventQueue<Duration, InFlight>,
    rng: SmallRng,
    loss: f64,
    /// entered[e][i]: when member i entered epoch e.
    entered: Vec<Vec<Option<Duration>>>,
    /// released[e][i]: when member i saw epoch e released.
    released: Vec<Vec<Option<Duration>>>,
    /// When member i may enter its next epoch (the application's work in between).
    ready_at: Vec<Duration>,
    epochs: u32,
    frames: u64,
}

impl Net {
    fn new(n: u16, algorithm: Algorithm, loss: f64, epochs: u32, seed: u64) -> Net {
        let members = (0..n)
            .map(|r| {
                let mut c = BarrierConfig::new(Rank::new(r), n);
                (c.algorithm, c.arity) = algorithm;
                Barrier::new(c).unwrap()
            })
            .collect();
        let mut rng = SmallRng::seed_from_u64(seed);
        let ready_at = (0..n)
            .map(|_| Duration::from_micros(rng.gen_range(0..300)))
            .collect();
        let e = epochs as usize;
        Net {
            base: Instant::now(),
            now: Duration::ZERO,
            members,
            crashed: vec![false; usize::from(n)],
            queue: EventQueue::new(),
            rng,
            loss,
            entered: vec![vec![None; usize::from(n)]; e],
            released: vec![vec![None; usize::from(n)]; e],
            ready_at,
            epochs,
            frames: 0,
        }
    }

    fn send(&mut self, src: Rank, dst: Rank, msg: BarrierMsg) {
        if self.rng.gen_bool(self.loss) {
            return;
        }
        let lat = Duration::from_micros(self.rng.gen_range(10..100));
        self.queue.push(self.now + lat, InFlight { src, dst, msg });
    }

    fn drain(&mut self, i: usize) {
        while let Some((dst, c)) = self.members[i].poll_transmit() {
            let Control::Barrier(msg) = c else {
                panic!("a barrier sends only barrier frames: {c:?}")
            };
            self.frames += 1;
            match dst {
                Dest::Rank(d) => self.send(Rank::new(i as u16), d, msg.clone()),
                Dest::All => {
                    for d in 0..self.members.len() {
                        if d != i {
                            self.send(Rank::new(i as u16), Rank::new(d as u16), msg.clone());
                        }
                    }
                }
            }
        }
        // Record releases, and let the application go on to the next barrier after a while.
        let next = self.members[i].next_epoch();
        if let Some(cur) = next.checked_sub(1) {
            let cur_u = cur as usize;
            if self.members[i].is_released(cur) && self.released[cur_u][i].is_none() {
                self.released[cur_u][i] = Some(self.now);
                self.ready_at[i] = self.now + Duration::from_micros(self.rng.gen_range(0..300));
            }
        }
    }

    fn next_event(&self) -> Option<Duration> {
        let msg = self.queue.next_at();
        let timers = (0..self.members.len())
            .filter(|i| !self.crashed[*i])
            .flat_map(|i| {
                let m = &self.members[i];
                let t = m.poll_timeout().map(|t| t - self.base);
                let e = m.next_epoch();
                let can_enter =
                    e < self.epochs && e.checked_sub(1).is_none_or(|p| m.is_released(p));
                t.into_iter().chain(can_enter.then_some(self.ready_at[i]))
            });
        msg.into_iter().chain(timers).min()
    }

    /// Runs until every live member left the last barrier; false if `limit` passed first.
    fn run(&mut self, limit: Duration) -> bool {
        while let Some(t) = self.next_event() {
            if t > limit {
                return false;
            }
            self.now = self.now.max(t);
            let now = self.base + self.now;
            while let Some((_, m)) = self.queue.pop_due(self.now) {
                let d = m.dst.index();
                if self.crashed[d] {
                    continue;
                }
                self.members[d].handle_frame(now, m.src, &m.msg).unwrap();
                self.drain(d);
            }
            for i in 0..self.members.len() {
                if self.crashed[i] {
                    continue;
                }
                let m = &mut self.members[i];
                let e = m.next_epoch();
                let can_enter =
                    e < self.epochs && e.checked_sub(1).is_none_or(|p| m.is_released(p));
                if can_enter && self.ready_at[i] <= self.now {
                    m.enter(now, e).unwrap();
                    self.entered[e as usize][i] = Some(self.now);
                }
                if m.poll_timeout().is_some_and(|t| t <= now) {
                    m.handle_timeout(now);
                }
                self.drain(i);
            }
            let done = (0..self.members.len())
                .filter(|i| !self.crashed[*i])
                .all(|i| self.released[self.epochs as usize - 1][i].is_some());
            if done {
                return true;
            }
        }
        false
    }

    /// Nobody saw an epoch released before every member counted in it had entered.
    fn check_safety(&self, counted: impl Fn(u32, usize) -> bool) {
        for e in 0..self.epochs as usize {
            let last_entry = (0..self.members.len())
                .filter(|i| counted(e as u32, *i))
                .map(|i| self.entered[e][i].unwrap_or(Duration::MAX))
                .max()
                .unwrap_or_default();
            for (i, r) in self.released[e].iter().enumerate() {
                if let Some(r) = r {
                    assert!(
                        *r >= last_entry,
                        "epoch {e}: member {i} released at {r:?} before the last entry at {last_entry:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn without_loss_every_barrier_releases_everybody_and_nobody_early() {
    for n in 1..=16u16 {
        for a in algos(n) {
            let mut net = Net::new(n, a, 0.0, 20, u64::from(n));
            assert!(net.run(Duration::from_secs(10)), "{a:?} n={n} stuck");
            net.check_safety(|_, _| true);
        }
    }
}

#[test]
fn with_ten_percent_loss_a_hundred_barriers_complete_safely() {
    for n in 2..=16u16 {
        for a in algos(n) {
            for seed in 0..2 {
                let mut net = Net::new(n, a, 0.10, 100, seed * 1000 + u64::from(n));
                assert!(
                    net.run(Duration::from_secs(60)),
                    "{a:?} n={n} seed={seed} stuck"
                );
                net.check_safety(|_, _| true);
            }
        }
    }
}

#[test]
fn without_loss_the_broadcast_barrier_costs_n_frames_and_dissemination_n_log2_n() {
    for n in [2u16, 5, 8, 16] {
        let mut net = Net::new(n, (BarrierAlgo::Broadcast, 4), 0.0, 10, 1);
        assert!(net.run(Duration::from_secs(10)));
        // n - 1 arrivals and one broadcast release, plus a retransmission when a member's
        // timer beats a slow release.
        let per = net.frames as f64 / 10.0;
        assert!(
            per >= f64::from(n) && per <= f64::from(n) * 1.5,
            "n={n}: {per}"
        );
        let mut net = Net::new(n, (BarrierAlgo::Dissemination, 0), 0.0, 10, 1);
        assert!(net.run(Duration::from_secs(10)));
        let l = log2_ceil(usize::from(n)) as f64;
        let per = net.frames as f64 / 10.0;
        // At most n log2 n; a little less when a member learns from a frame of the next epoch
        // that the current one completed and skips its last rounds.
        assert!(
            per >= f64::from(n) * l * 0.9 && per <= f64::from(n) * l,
            "n={n}: {per}"
        );
    }
}

#[test]
fn an_evicted_member_no_longer_blocks_the_barrier() {
    for a in algos(8) {
        for victim in [0u16, 1, 5] {
            let mut net = Net::new(8, a, 0.05, 40, 9);
            net.run(Duration::from_millis(5));
            net.crashed[usize::from(victim)] = true;
            let crash_epoch = net.members[usize::from(victim)].next_epoch();
            // The failure detector's verdict reaches the survivors at different times.
            let mut evict_at: Vec<Duration> = (0..8)
                .map(|_| net.now + Duration::from_millis(net.rng.gen_range(1..20)))
                .collect();
            evict_at[usize::from(victim)] = Duration::MAX;
            while let Some(t) = evict_at
                .iter()
                .min()
                .copied()
                .filter(|t| *t != Duration::MAX)
            {
                net.run(t);
                net.now = net.now.max(t);
                let now = net.base + net.now;
                for (i, at) in evict_at.iter_mut().enumerate() {
                    if *at <= t {
                        *at = Duration::MAX;
                        net.members[i].evicted(now, Rank::new(victim));
                        net.drain(i);
                    }
                }
            }
            assert!(
                net.run(Duration::from_secs(60)),
                "{a:?} victim {victim}: stuck"
            );
            // The victim counts in the epochs it entered, the survivors in all.
            net.check_safety(|e, i| i != usize::from(victim) || e < crash_epoch);
        }
    }
}

fn barrier_msg(algo: BarrierAlgo, op: Op, round: u32, set: &[u8]) -> BarrierMsg {
    BarrierMsg {
        algo,
        op,
        epoch: 0,
        round,
        view: 0,
        set: set.to_vec(),
    }
}

#[test]
fn malformed_frames_are_errors() {
    let mut b = Barrier::new(BarrierConfig::new(Rank::new(1), 10)).unwrap();
    let now = Instant::now();
    let arrive = |set: &[u8]| barrier_msg(BarrierAlgo::Broadcast, Op::Arrive, 0, set);
    assert_eq!(
        b.handle_frame(now, Rank::new(2), &arrive(&[0])),
        Err(FrameError::Set(1))
    );
    assert_eq!(
        b.handle_frame(now, Rank::new(2), &arrive(&[0, 0x04])),
        Err(FrameError::Set(2)),
        "rank 10"
    );
    assert_eq!(
        b.handle_frame(now, Rank::new(2), &arrive(&[0, 0x02])),
        Ok(())
    );
    assert_eq!(
        b.handle_frame(now, Rank::new(10), &arrive(&[0, 0])),
        Err(FrameError::Src(Rank::new(10)))
    );
    let query = barrier_msg(BarrierAlgo::Broadcast, Op::Query, 99, &[]);
    assert_eq!(
        b.handle_frame(now, Rank::new(2), &query),
        Err(FrameError::Round(99))
    );
    let other = barrier_msg(BarrierAlgo::Dissemination, Op::Round, 0, &[]);
    assert_eq!(
        b.handle_frame(now, Rank::new(2), &other),
        Err(FrameError::Algo)
    );
}

/// Nobody acknowledges a release, so a member stays reachable for a while after a barrier: a
/// member that missed the release asks again, and is answered, until eight of the longest
/// waits between asks have passed.
#[test]
fn after_a_barrier_a_member_stays_reachable_for_stragglers_for_eight_longest_waits() {
    let t0 = Instant::now();
    let cfg = BarrierConfig::new(Rank::new(1), 2);
    let linger = cfg.max_rto * 8;
    let mut b = Barrier::new(cfg).unwrap();
    assert_eq!(b.serves_stragglers_until(), None, "no barrier yet");
    b.enter(t0, 0).unwrap();
    assert_eq!(b.serves_stragglers_until(), None, "not released yet");
    let t1 = t0 + Duration::from_millis(3);
    let rel = barrier_msg(BarrierAlgo::Broadcast, Op::Release, 0, &[]);
    b.handle_frame(t1, Rank::new(0), &rel).unwrap();
    assert!(b.is_released(0));
    assert_eq!(b.serves_stragglers_until(), Some(t1 + linger));
    // A straggler that asks within that time gets the release.
    while b.poll_transmit().is_some() {}
    let late = barrier_msg(BarrierAlgo::Broadcast, Op::Arrive, 0, &[0x03]);
    b.handle_frame(t1 + linger / 2, Rank::new(0), &late)
        .unwrap();
    let (dst, msg) = b.poll_transmit().expect("an answer to the straggler");
    assert_eq!(dst, Dest::Rank(Rank::new(0)));
    assert!(matches!(
        msg,
        Control::Barrier(BarrierMsg {
            op: Op::Release,
            ..
        })
    ));
    // A release heard again does not move the time: it counts from the barrier's end.
    b.handle_frame(t1 + linger / 2, Rank::new(0), &rel).unwrap();
    assert_eq!(b.serves_stragglers_until(), Some(t1 + linger));
}

/// Performs the attack: one spoofed frame with a huge epoch would complete every epoch below
/// it ("nobody sends for e before e - 1 completed"), turning later barriers into no-ops. It is
/// refused, and the next barrier still waits for its members.
#[test]
fn a_frame_from_a_far_epoch_completes_nothing() {
    let now = Instant::now();
    let mut b = Barrier::new(BarrierConfig::new(Rank::new(1), 3)).unwrap();
    let mut forged = barrier_msg(BarrierAlgo::Broadcast, Op::Release, 0, &[]);
    forged.epoch = 1_000_000;
    assert_eq!(
        b.handle_frame(now, Rank::new(2), &forged),
        Err(FrameError::Epoch(1_000_000))
    );
    b.enter(now, 0).unwrap();
    assert!(!b.is_released(0), "epoch 0 waits for the other members");
    forged.epoch = 1;
    assert_eq!(
        b.handle_frame(now, Rank::new(2), &forged),
        Ok(()),
        "one epoch ahead is possible"
    );
}

#[test]
fn epochs_are_entered_in_order_after_release() {
    let now = Instant::now();
    let mut b = Barrier::new(BarrierConfig::new(Rank::new(1), 2)).unwrap();
    assert_eq!(
        b.enter(now, 1),
        Err(BarrierError::Epoch {
            expected: 0,
            got: 1
        })
    );
    b.enter(now, 0).unwrap();
    assert_eq!(b.enter(now, 1), Err(BarrierError::NotReleased(0)));
    // Rank 1 sends its arrival to the root, rank 0.
    let (dst, msg) = b.poll_transmit().unwrap();
    assert_eq!(dst, Dest::Rank(Rank::new(0)));
    assert!(matches!(
        msg,
        Control::Barrier(BarrierMsg { op: Op::Arrive, .. })
    ));
    let rel = barrier_msg(BarrierAlgo::Broadcast, Op::Release, 0, &[]);
    b.handle_frame(now, Rank::new(0), &rel).unwrap();
    assert!(b.is_released(0));
    assert!(!b.is_released(1));
    b.enter(now, 1).unwrap();
    assert!(Barrier::new(BarrierConfig {
        arity: 0,
        ..BarrierConfig::new(Rank::new(0), 2)
    })
    .is_err());
}

#[test]
fn report_frames_per_barrier() {
    for loss in [0.0, 0.1] {
        for a in [
            (BarrierAlgo::Broadcast, 4),
            (BarrierAlgo::Broadcast, 7),
            (BarrierAlgo::Dissemination, 0),
        ] {
            let mut net = Net::new(8, a, loss, 100, 5);
            assert!(net.run(Duration::from_secs(60)));
            let s = net
                .members
                .iter()
                .fold(BarrierStats::default(), |mut acc, m| {
                    let s = m.stats();
                    acc.arrive += s.arrive;
                    acc.release_bcast += s.release_bcast;
                    acc.release_p2p += s.release_p2p;
                    acc.round += s.round;
                    acc.query += s.query;
                    acc
                });
            let last = net.released[99]
                .iter()
                .flatten()
                .max()
                .copied()
                .unwrap_or_default();
            println!(
                "n=8 loss={loss} {a:?}: {:.2} frames/barrier ({s:?}), {:?} per barrier",
                net.frames as f64 / 100.0,
                last / 100
            );
        }
    }
}
