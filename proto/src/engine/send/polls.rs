//! The root's polls: an acknowledgement poll when a destination's retransmission timer first
//! fires after its last progress (its stream merely went idle), and the poll of the designated
//! receiver when a push-pull message waits too long for its pull request.
//!
//! **Invariants.** The pull timer ([`Timer::Pull`]) is armed exactly while a push-pull message
//! waits for its pull (re-armed with back-off each time it fires); `ack_polls` names each
//! destination at most once per timeout, and has room for every member once it was first used.

use std::time::Instant;

use crate::eqa::Eqa;
use crate::wire::Control;
use crate::Rank;

use super::room_for_every_rank;
use crate::engine::timer::{Timer, TimerTable};
use crate::engine::{Dest, EngineConfig};

/// The polls one root owes. See the module documentation.
#[derive(Debug, Default)]
pub(super) struct Polls {
    /// Times the pull poll was sent for the message waiting (its interval doubles).
    pull_backoff: u32,
    /// The pull poll is due.
    pull_poll: bool,
    /// Ranks to send a [`Control::AckPoll`]: their retransmission timer fired for the first
    /// time since they last made progress.
    ack_polls: Vec<Rank>,
}

impl Polls {
    /// `rank`'s retransmission timer fired for the first time since it last made progress.
    pub(super) fn ack_poll(&mut self, cfg: &EngineConfig, rank: Rank) {
        room_for_every_rank(&mut self.ack_polls, cfg);
        self.ack_polls.push(rank);
    }

    /// The next acknowledgement poll due: one to the group when the timers of several members
    /// fired together (a group that went idle), unless one of them is served point-to-point
    /// (the broadcast does not reach it); otherwise one per member.
    pub(super) fn take_ack_poll(&mut self, eqa: &Eqa) -> Option<Dest> {
        let broadcast_reaches = |r: &Rank| eqa.lms(*r).is_some_and(|l| !l.point_to_point());
        if self.ack_polls.len() > 1 && self.ack_polls.iter().all(broadcast_reaches) {
            self.ack_polls.clear();
            return Some(Dest::All);
        }
        self.ack_polls.pop().map(Dest::Rank)
    }

    /// A push-pull message waits for its pull request from `now`: the pull timer starts, once
    /// per message.
    pub(super) fn await_pull(&mut self, cfg: &EngineConfig, now: Instant, timers: &mut TimerTable) {
        if !timers.is_armed(Timer::Pull) {
            timers.set(Timer::Pull, now + cfg.rto);
            self.pull_backoff = 0;
        }
    }

    /// The pull request came.
    pub(super) fn pulled(&mut self, timers: &mut TimerTable) {
        timers.stop(Timer::Pull);
    }

    /// Time passed: if the pull timer fired, the designated receiver is polled, and the timer
    /// re-armed, twice as long each time up to `EngineConfig::rto_max`.
    pub(super) fn on_timeout(&mut self, cfg: &EngineConfig, now: Instant, timers: &mut TimerTable) {
        if timers.is_expired(Timer::Pull, now) {
            self.pull_backoff += 1;
            let d = (cfg.rto * (1 << self.pull_backoff.min(16))).min(cfg.rto_max);
            timers.set(Timer::Pull, now + d);
            self.pull_poll = true;
        }
    }

    /// A member was evicted: if a pull is awaited, the designated receiver may have been the
    /// one evicted, so the new one is asked now.
    pub(super) fn on_evict(&mut self, now: Instant, timers: &mut TimerTable) {
        if timers.is_armed(Timer::Pull) {
            timers.set(Timer::Pull, now);
        }
    }

    /// The poll of `designated` for a pull request of message `msg` that may have been lost,
    /// when one is due: (its rank, the message).
    pub(super) fn take_pull_poll(
        &mut self,
        msg: Option<u64>,
        designated: Rank,
    ) -> Option<(Rank, Control)> {
        if !std::mem::take(&mut self.pull_poll) {
            return None;
        }
        let poll = Control::PullPoll {
            msg_id: msg? as u32,
            designated,
        };
        Some((designated, poll))
    }

    /// Whether a pull poll is due.
    pub(super) fn pull_poll_due(&self) -> bool {
        self.pull_poll
    }

    /// Whether a poll is due.
    pub(super) fn due(&self) -> bool {
        self.pull_poll || !self.ack_polls.is_empty()
    }
}

#[cfg(test)]
mod tests {

    use std::time::{Duration, Instant};

    use crate::engine::timer::Timer;
    use crate::engine::{Dest, EngineConfig, TimerTable};
    use crate::eqa::Eqa;
    use crate::wire::Control;
    use crate::Rank;

    use super::Polls;

    #[test]
    fn idle_members_are_polled_together_unless_one_is_served_point_to_point() {
        let c = EngineConfig::new(1, Rank::new(0), 4);
        let mut eqa = Eqa::new(4, 100, std::iter::empty(), 4, c.rto);
        for r in 1..4 {
            eqa.add_dest(Rank::new(r), 4, c.rto);
        }
        let mut p = Polls::default();
        assert!(!p.due());
        p.ack_poll(&c, Rank::new(1));
        assert_eq!(p.take_ack_poll(&eqa), Some(Dest::Rank(Rank::new(1))));
        p.ack_poll(&c, Rank::new(1));
        p.ack_poll(&c, Rank::new(2));
        assert_eq!(p.take_ack_poll(&eqa), Some(Dest::All));
        assert_eq!(p.take_ack_poll(&eqa), None);
        eqa.lms_mut(Rank::new(2)).unwrap().route = crate::engine::Route::failed_over();
        p.ack_poll(&c, Rank::new(1));
        p.ack_poll(&c, Rank::new(2));
        assert_eq!(p.take_ack_poll(&eqa), Some(Dest::Rank(Rank::new(2))));
        assert_eq!(p.take_ack_poll(&eqa), Some(Dest::Rank(Rank::new(1))));
    }

    #[test]
    fn a_lost_pull_is_polled_for_with_back_off() {
        let c = EngineConfig::new(1, Rank::new(0), 2);
        let mut t = TimerTable::new(2);
        let mut p = Polls::default();
        let t0 = Instant::now();
        p.await_pull(&c, t0, &mut t);
        p.await_pull(&c, t0 + Duration::from_millis(1), &mut t);
        assert_eq!(t.get(Timer::Pull), Some(t0 + c.rto), "once per message");
        p.on_timeout(&c, t0 + c.rto / 2, &mut t);
        assert!(!p.due());
        p.on_timeout(&c, t0 + c.rto, &mut t);
        assert!(p.due());
        let expect = (c.rto * 2).min(c.rto_max);
        assert_eq!(t.get(Timer::Pull), Some(t0 + c.rto + expect));
        let poll = p.take_pull_poll(Some(3), Rank::new(1));
        assert!(
            matches!(poll, Some((r, Control::PullPoll { msg_id: 3, .. })) if r == Rank::new(1))
        );
        assert!(
            p.take_pull_poll(Some(3), Rank::new(1)).is_none(),
            "once per firing"
        );
        p.on_evict(t0, &mut t);
        assert_eq!(t.get(Timer::Pull), Some(t0));
        p.pulled(&mut t);
        assert!(!t.is_armed(Timer::Pull));
    }
}
