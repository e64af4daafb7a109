//! The detector as a specification: the paper's formulas, the schedules, the codec, and a small
//! virtual-time network of detectors in which members crash.

use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::queue::EventQueue;
use crate::wire::Control;
use crate::{ConfigError, Rank};

use super::{
    cycle, rounds, t_cleanup, target, DecodeError, Detector, DetectorConfig, DetectorEvent,
    DetectorMsg, Gossip, MAX_MEMBERS,
};

const ALL: [Gossip; 3] = [
    Gossip::RoundRobin,
    Gossip::BinaryRoundRobin,
    Gossip::DoubleBinaryRoundRobin,
];
const T: Duration = Duration::from_millis(10);

fn log2_ceil_f(n: u16) -> u32 {
    (f64::from(n)).log2().ceil() as u32
}

#[test]
fn rounds_follow_the_papers_formulas() {
    for n in 2..=128u16 {
        let rr = ((1.0 + 8.0 * f64::from(n)).sqrt() - 1.0) / 2.0;
        assert_eq!(rounds(Gossip::RoundRobin, n), rr.ceil() as u32, "RR n={n}");
        let r = rounds(Gossip::RoundRobin, n);
        assert!(r * (r + 1) / 2 >= u32::from(n) && (r - 1) * r / 2 < u32::from(n));
        assert_eq!(
            rounds(Gossip::BinaryRoundRobin, n),
            log2_ceil_f(n),
            "BRR n={n}"
        );
        assert_eq!(
            rounds(Gossip::DoubleBinaryRoundRobin, n),
            2 * log2_ceil_f(n),
            "DBRR n={n}"
        );
        assert_eq!(cycle(Gossip::RoundRobin, n), u32::from(n) - 1);
        assert_eq!(cycle(Gossip::BinaryRoundRobin, n), log2_ceil_f(n));
        assert_eq!(cycle(Gossip::DoubleBinaryRoundRobin, n), 2 * log2_ceil_f(n));
    }
    for g in ALL {
        assert_eq!(rounds(g, 1), 0);
    }
}

#[test]
fn cleanup_time_is_three_log2_n_gossip_periods_for_dbrr() {
    for n in 2..=128u16 {
        assert_eq!(
            t_cleanup(Gossip::DoubleBinaryRoundRobin, n, T),
            T * (3 * log2_ceil_f(n))
        );
        assert_eq!(
            t_cleanup(Gossip::BinaryRoundRobin, n, T),
            T * (3 * log2_ceil_f(n))
        );
        assert_eq!(
            t_cleanup(Gossip::RoundRobin, n, T),
            T * (2 * rounds(Gossip::RoundRobin, n))
        );
        for g in ALL {
            // Never below the paper's minimum cleanup time.
            assert!(t_cleanup(g, n, T) >= T * rounds(g, n));
        }
    }
    assert_eq!(t_cleanup(Gossip::DoubleBinaryRoundRobin, 64, T), T * 18);
}

#[test]
fn targets_follow_equations_3_to_5() {
    for n in 2..=128u32 {
        let l = log2_ceil_f(n as u16);
        for s in 0..n {
            for r in 1..n {
                assert_eq!(target(Gossip::RoundRobin, s, n, r), Some((s + r) % n));
            }
            for r in 1..=l {
                let fwd = (s + (1 << (r - 1))) % n;
                assert_eq!(target(Gossip::BinaryRoundRobin, s, n, r), Some(fwd));
                assert_eq!(target(Gossip::DoubleBinaryRoundRobin, s, n, r), Some(fwd));
                let back = (s as i64 - (1i64 << (r - 1))).rem_euclid(i64::from(n)) as u32;
                assert_eq!(
                    target(Gossip::DoubleBinaryRoundRobin, s, n, l + r),
                    Some(back)
                );
            }
            for g in ALL {
                for r in 1..=cycle(g, n as u16) {
                    assert_ne!(target(g, s, n, r), Some(s), "{g:?} n={n} gossips to itself");
                }
            }
        }
    }
    // The paper's example: with BRR and four nodes, node 2 hears from 1 then from 0 only.
    let senders_to_2: Vec<(u32, u32)> = (1..=2)
        .flat_map(|r| (0..4).map(move |s| (r, s)))
        .filter(|(r, s)| target(Gossip::BinaryRoundRobin, *s, 4, *r) == Some(2))
        .collect();
    assert_eq!(senders_to_2, vec![(1, 1), (2, 0)]);
}

/// Rounds until news of member 0 reaches everybody, in synchronous rounds starting at `start`.
fn spread(g: Gossip, n: u32, start: u32) -> u32 {
    let c = cycle(g, n as u16);
    let mut informed = vec![false; n as usize];
    informed[0] = true;
    let (mut r, mut t) = (start, 0);
    while informed.iter().any(|i| !i) {
        let now: Vec<u32> = (0..n).filter(|s| informed[*s as usize]).collect();
        for s in now {
            if let Some(d) = target(g, s, n, r) {
                informed[d as usize] = true;
            }
        }
        t += 1;
        r = r % c + 1;
    }
    t
}

#[test]
fn news_spreads_in_d_rounds_from_round_one_and_before_cleanup_from_any_round() {
    for g in ALL {
        let mut worst_margin = u32::MAX;
        for n in 2..=128u16 {
            let d = rounds(g, n);
            // From round 1 the paper's d is enough (RR: the triangular-number bound).
            assert!(spread(g, u32::from(n), 1) <= d, "{g:?} n={n}");
            let worst = (1..=cycle(g, n))
                .map(|s| spread(g, u32::from(n), s))
                .max()
                .unwrap_or(0);
            let threshold = (t_cleanup(g, n, T).as_nanos() / T.as_nanos()) as u32;
            assert!(
                worst < threshold,
                "{g:?} n={n}: worst spread {worst} >= threshold {threshold}"
            );
            worst_margin = worst_margin.min(threshold - worst);
        }
        assert!(worst_margin >= 1);
    }
}

#[test]
fn detector_messages_round_trip_and_bad_ones_are_errors() {
    let t = vec![0, 1, 2, u16::MAX, 7];
    for m in [
        DetectorMsg::Gossip(t.clone()),
        DetectorMsg::Ping(Rank::new(3)),
        DetectorMsg::Pong(Rank::new(4)),
    ] {
        assert_eq!(DetectorMsg::from_control(&m.to_control(), 5), Some(Ok(m)));
    }
    let short = Control::Heartbeat { table: vec![0; 4] };
    assert!(matches!(
        DetectorMsg::from_control(&short, 5),
        Some(Err(DecodeError::Length { .. }))
    ));
    let huge = Control::Heartbeat {
        table: vec![0; 600],
    };
    assert!(
        DetectorMsg::from_control(&huge, 600).unwrap().is_err(),
        "beyond MAX_MEMBERS"
    );
    assert_eq!(
        DetectorMsg::from_control(&Control::Ping { rank: Rank::new(5) }, 5),
        Some(Err(DecodeError::Rank(5)))
    );
    assert_eq!(
        DetectorMsg::from_control(&Control::Evict { rank: Rank::new(1) }, 5),
        None
    );
}

#[test]
fn config_is_checked() {
    let c = |rank, size| DetectorConfig::new(rank, size, T);
    assert!(Detector::new(c(Rank::new(3), 3)).is_err());
    assert!(Detector::new(c(Rank::new(0), 0)).is_err());
    assert!(Detector::new(c(Rank::new(0), MAX_MEMBERS + 1)).is_err());
    assert!(Detector::new(DetectorConfig::new(Rank::new(0), 2, Duration::ZERO)).is_err());
    let mut no_ping = c(Rank::new(0), 2);
    no_ping.ping_attempts = 0;
    assert_eq!(Detector::new(no_ping).err(), Some(ConfigError::NoPing));
    assert!(Detector::new(c(Rank::new(0), 1)).is_ok());
}

#[test]
fn a_suspect_that_answers_the_ping_is_cleared_and_one_that_does_not_is_dead() {
    let t0 = Instant::now();
    let mut cfg = DetectorConfig::new(Rank::new(0), 2, T);
    cfg.protocol = Gossip::BinaryRoundRobin;
    let mut d = Detector::new(cfg).unwrap();
    assert_eq!(d.threshold(), 3, "3 ceil(log2 2)");
    let mut now = t0;
    d.handle_timeout(now);
    assert!(matches!(d.poll_transmit(), Some((r, DetectorMsg::Gossip(_))) if r == Rank::new(1)));
    for _ in 0..2 {
        now += T;
        d.handle_timeout(now);
        assert_eq!(d.poll_event(), None);
    }
    now += T;
    d.handle_timeout(now);
    assert_eq!(d.poll_event(), Some(DetectorEvent::Suspect(Rank::new(1))));
    let sent: Vec<_> = std::iter::from_fn(|| d.poll_transmit()).collect();
    assert!(sent.contains(&(Rank::new(1), DetectorMsg::Ping(Rank::new(1)))));
    d.handle_pong(now, Rank::new(1));
    assert_eq!(d.poll_event(), Some(DetectorEvent::Cleared(Rank::new(1))));
    assert!(!d.is_suspected(Rank::new(1)));
    // Silent again: suspected, pinged ping_attempts times, dead at the deadline.
    while d.poll_event() != Some(DetectorEvent::Suspect(Rank::new(1))) {
        now = d.poll_timeout().unwrap();
        d.handle_timeout(now);
    }
    let suspected_at = now;
    let mut pings = 0;
    loop {
        while let Some((_, m)) = d.poll_transmit() {
            pings += usize::from(m == DetectorMsg::Ping(Rank::new(1)));
        }
        if let Some(e) = d.poll_event() {
            assert_eq!(e, DetectorEvent::Dead(Rank::new(1)));
            break;
        }
        now = d.poll_timeout().unwrap();
        d.handle_timeout(now);
    }
    assert_eq!(pings as u32, d.config().ping_attempts);
    assert_eq!(now - suspected_at, d.config().confirm_timeout);
    assert!(d.is_dead(Rank::new(1)));
    // Dead is final until evicted.
    d.mark_alive(now, Rank::new(1));
    assert!(d.is_dead(Rank::new(1)));
    d.evicted(Rank::new(1));
    assert_eq!(d.table()[1], u16::MAX);
}

#[test]
fn ping_is_answered_with_pong() {
    let mut d = Detector::new(DetectorConfig::new(Rank::new(2), 4, T)).unwrap();
    d.handle_ping(Instant::now(), Rank::new(1));
    assert_eq!(
        d.poll_transmit(),
        Some((Rank::new(1), DetectorMsg::Pong(Rank::new(2))))
    );
}

// ---- a small network of detectors in virtual time ----

/// A message on its way from `src` to `dst`.
struct InFlight {
    src: Rank,
    dst: Rank,
    msg: DetectorMsg,
}

struct Net {
    base: Instant,
    now: Duration,
    nodes: Vec<Detector>,
    wake: Vec<Option<Duration>>,
    crashed: Vec<Option<Duration>>,
    queue: EventQueue<Duration, InFlight>,
    rng: SmallRng,
    loss: f64,
    /// (time, observer, event)
    events: Vec<(Duration, Rank, DetectorEvent)>,
    /// Survivors evict a member as soon as they declare it dead.
    evict_on_dead: bool,
    sent: u64,
    /// Largest age of a live member seen at any tick.
    max_age: u16,
}

impl Net {
    fn new(n: u16, g: Gossip, loss: f64, seed: u64) -> Net {
        let nodes: Vec<Detector> = (0..n)
            .map(|r| {
                let mut c = DetectorConfig::new(Rank::new(r), n, T);
                c.protocol = g;
                Detector::new(c).unwrap()
            })
            .collect();
        // Members start at random points of the first period: rounds are not aligned.
        let mut rng = SmallRng::seed_from_u64(seed);
        let wake = (0..n)
            .map(|_| Some(Duration::from_micros(rng.gen_range(0..10_000))))
            .collect();
        Net {
            base: Instant::now(),
            now: Duration::ZERO,
            nodes,
            wake,
            crashed: vec![None; usize::from(n)],
            queue: EventQueue::new(),
            rng,
            loss,
            events: Vec::new(),
            evict_on_dead: true,
            sent: 0,
            max_age: 0,
        }
    }

    fn crash(&mut self, r: Rank) {
        self.crashed[r.index()] = Some(self.now);
        self.wake[r.index()] = None;
    }

    fn drain(&mut self, i: usize) {
        while let Some((dst, msg)) = self.nodes[i].poll_transmit() {
            self.sent += 1;
            if self.rng.gen_bool(self.loss) {
                continue;
            }
            let lat = Duration::from_micros(self.rng.gen_range(50..500));
            self.queue.push(
                self.now + lat,
                InFlight {
                    src: Rank::new(i as u16),
                    dst,
                    msg,
                },
            );
        }
        let mut dead = Vec::new();
        while let Some(e) = self.nodes[i].poll_event() {
            self.events.push((self.now, Rank::new(i as u16), e));
            if let DetectorEvent::Dead(r) = e {
                dead.push(r);
            }
        }
        if self.evict_on_dead {
            for r in dead {
                self.nodes[i].evicted(r);
            }
        }
        // A member not started yet keeps its start time.
        if self.crashed[i].is_some() {
            self.wake[i] = None;
        } else if let Some(t) = self.nodes[i].poll_timeout() {
            self.wake[i] = Some(t - self.base);
        }
    }

    fn run_until(&mut self, end: Duration) {
        loop {
            let next_msg = self.queue.next_at();
            let next_wake = self.wake.iter().flatten().min().copied();
            let Some(t) = next_msg.into_iter().chain(next_wake).min() else {
                break;
            };
            if t > end {
                break;
            }
            self.now = t;
            let now = self.base + t;
            while let Some((_, m)) = self.queue.pop_due(t) {
                let d = m.dst.index();
                if self.crashed[d].is_some() {
                    continue;
                }
                self.nodes[d].handle_msg(now, m.src, &m.msg).unwrap();
                self.drain(d);
            }
            for i in 0..self.nodes.len() {
                if self.wake[i].is_some_and(|w| w <= t) {
                    self.nodes[i].handle_timeout(now);
                    for (j, a) in self.nodes[i].table().iter().enumerate() {
                        if self.crashed[j].is_none() && *a != u16::MAX {
                            self.max_age = self.max_age.max(*a);
                        }
                    }
                    self.drain(i);
                }
            }
        }
        self.now = end;
    }
}

#[test]
fn with_everybody_alive_nobody_is_ever_suspected() {
    for g in ALL {
        for n in [2u16, 3, 4, 5, 8, 13, 16, 33] {
            let mut net = Net::new(n, g, 0.0, u64::from(n));
            net.run_until(T * 2000);
            assert!(
                net.events.is_empty(),
                "{g:?} n={n}: {:?}",
                &net.events[..net.events.len().min(5)]
            );
            // One gossip message per member per period.
            let expect = u64::from(n) * 2000;
            assert!(net.sent.abs_diff(expect) <= u64::from(n), "{}", net.sent);
        }
    }
}

/// Crashes one member mid-run; returns every survivor's detection time.
fn detection_times(n: u16, g: Gossip, loss: f64, seed: u64) -> Vec<Duration> {
    let mut net = Net::new(n, g, loss, seed);
    net.run_until(T * 200 + T / 3);
    let victim = n / 2;
    net.crash(Rank::new(victim));
    let crashed_at = net.now;
    net.run_until(crashed_at + T * 400);
    let mut times = vec![None; usize::from(n)];
    for (t, obs, e) in &net.events {
        match e {
            DetectorEvent::Dead(r) if *r == Rank::new(victim) => {
                assert!(times[obs.index()].is_none());
                times[obs.index()] = Some(*t - crashed_at);
            }
            DetectorEvent::Dead(r) => panic!("{g:?} n={n}: {obs} declared live {r} dead"),
            _ => {}
        }
    }
    (0..n)
        .filter(|r| *r != victim)
        .map(|r| times[usize::from(r)].unwrap_or_else(|| panic!("{g:?} n={n}: {r} never knew")))
        .collect()
}

fn bound(g: Gossip, n: u16) -> Duration {
    let c = DetectorConfig::new(Rank::new(0), n, T);
    t_cleanup(g, n, T) + c.confirm_timeout + T
}

#[test]
fn a_crashed_member_is_declared_dead_by_every_survivor_within_the_bound() {
    for g in ALL {
        for n in [2u16, 3, 4, 8, 16, 64] {
            let times = detection_times(n, g, 0.0, 7);
            let b = bound(g, n);
            let max = times.iter().max().copied().unwrap_or_default();
            assert!(max <= b, "{g:?} n={n}: {max:?} > {b:?}");
            // Not earlier than the paper's minimum cleanup time either.
            let min = times.iter().min().copied().unwrap_or_default();
            assert!(min >= T * rounds(g, n), "{g:?} n={n}: {min:?}");
        }
    }
}

#[test]
fn with_two_percent_loss_a_crash_is_still_found_in_time_and_nobody_else_dies() {
    for g in ALL {
        for n in [4u16, 8, 16] {
            for seed in 0..3 {
                let times = detection_times(n, g, 0.02, seed);
                let max = times.iter().max().copied().unwrap_or_default();
                assert!(max <= bound(g, n), "{g:?} n={n} seed={seed}: {max:?}");
            }
        }
    }
}

#[test]
fn after_an_eviction_the_ring_reforms_and_a_second_crash_is_found() {
    for g in ALL {
        let n = 8;
        let mut net = Net::new(n, g, 0.0, 3);
        net.run_until(T * 50);
        net.crash(Rank::new(5));
        net.run_until(T * 150);
        net.crash(Rank::new(2));
        let at = net.now;
        net.run_until(T * 400);
        let dead: Vec<_> = net
            .events
            .iter()
            .filter_map(|(t, o, e)| match e {
                DetectorEvent::Dead(r) => Some((*t, *o, *r)),
                _ => None,
            })
            .collect();
        assert!(
            dead.iter()
                .all(|(_, _, r)| *r == Rank::new(5) || *r == Rank::new(2)),
            "{dead:?}"
        );
        for obs in [0u16, 1, 3, 4, 6, 7] {
            let t2 = dead
                .iter()
                .find(|(_, o, r)| *o == Rank::new(obs) && *r == Rank::new(2))
                .map(|(t, _, _)| *t - at);
            let t2 = t2.unwrap_or_else(|| panic!("{g:?}: {obs} missed the second crash"));
            assert!(t2 <= bound(g, 7), "{g:?}: {t2:?}");
        }
    }
}

/// Prints measured detection times (run with `--nocapture`), for the record.
#[test]
fn report_detection_times() {
    for g in ALL {
        for n in [4u16, 8, 16, 64] {
            let times = detection_times(n, g, 0.0, 11);
            let max = times.iter().max().copied().unwrap_or_default();
            let min = times.iter().min().copied().unwrap_or_default();
            let mean = times.iter().sum::<Duration>() / times.len() as u32;
            println!(
                "{g:?} n={n}: T_cleanup={:?} bound={:?} detection min={min:?} mean={mean:?} max={max:?}",
                t_cleanup(g, n, T),
                bound(g, n)
            );
        }
    }
}

#[test]
fn steady_state_ages_stay_below_threshold() {
    for g in ALL {
        for n in [2u16, 3, 4, 5, 8, 13, 16, 33, 64] {
            let mut worst = 0;
            for seed in 0..4 {
                let mut net = Net::new(n, g, 0.0, seed);
                net.run_until(T * 300);
                worst = worst.max(net.max_age);
            }
            let threshold = net_threshold(g, n);
            assert!(worst < threshold, "{g:?} n={n}: age {worst} >= {threshold}");
            println!(
                "{g:?} n={n} d={} threshold={threshold} max_age={worst}",
                rounds(g, n)
            );
        }
    }
}

fn net_threshold(g: Gossip, n: u16) -> u16 {
    let mut c = DetectorConfig::new(Rank::new(0), n, T);
    c.protocol = g;
    Detector::new(c).map(|d| d.threshold()).unwrap_or(0)
}
