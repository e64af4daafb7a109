//! The member's timers: one table that answers
//! [`Member::poll_timeout`](super::Member::poll_timeout) and tells `Member::handle_timeout` which
//! of its machines have work.
//!
//! A member composes machines with deadlines of their own (the group engine, a point-to-point
//! engine per peer, the failure detector, the two barriers); each is a [`Timer`] here, armed at
//! that machine's next deadline. The member keeps the table in step after every call into a
//! machine that may move its deadline, so that finding the earliest is one look, and a timeout
//! visits only the machines whose time came.
//!
//! **Invariants.** The fixed machines' deadlines are in a small array, looked at whole (the
//! group engine's moves with nearly every frame, and a move costs one store); the ordered set
//! holds exactly the armed channels' timers, each once, at the deadline stored for it, and
//! the earliest of them is kept beside the array. A timer's deadline is at or before its
//! machine's next deadline (a machine whose deadline only moved later, like the detector when
//! a suspect speaks again, may be woken early, and finds nothing to do).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use crate::Rank;

/// A machine of the member with a deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Timer {
    /// The group engine.
    Group,
    /// The point-to-point engine of the channel with this peer.
    Pair(Rank),
    /// The failure detector.
    Detector,
    /// Barrier machine 0 (broadcast) or 1 (dissemination).
    Barrier(usize),
}

/// Every timer of one member. See the module documentation.
#[derive(Debug, Default)]
pub(super) struct TimerTable {
    /// The group engine's, the detector's and the barriers' deadlines.
    fixed: [Option<Instant>; 4],
    /// The point-to-point channels' deadlines, of those armed.
    pairs: BTreeMap<Rank, Instant>,
    /// Every armed channel's timer at its deadline.
    armed: BTreeSet<(Instant, Rank)>,
    /// The earliest deadline in `armed`, kept beside `fixed`: the driver asks for the next
    /// deadline after every turn, and in a group of thousands the set's node is a line the
    /// member's turn had not touched, while a channel's deadline moves far less often.
    first_pair: Option<Instant>,
    /// The timers that fired, kept between calls (see [`TimerTable::fired`]).
    fired: Vec<Timer>,
}

impl TimerTable {
    /// Arms `timer` at `at`, or stops it with `None` (nothing changes if it is there already).
    pub(super) fn set_or_stop(&mut self, timer: Timer, at: Option<Instant>) {
        let i = match timer {
            Timer::Group => 0,
            Timer::Detector => 1,
            Timer::Barrier(i) => 2 + i.min(1),
            Timer::Pair(p) => return self.set_pair(p, at),
        };
        self.fixed[i] = at;
    }

    /// Arms the timer of the channel with `p` at `at`, or stops it.
    fn set_pair(&mut self, p: Rank, at: Option<Instant>) {
        let before = match at {
            Some(t) => self.pairs.insert(p, t),
            None => self.pairs.remove(&p),
        };
        if before == at {
            return;
        }
        if let Some(b) = before {
            self.armed.remove(&(b, p));
        }
        if let Some(a) = at {
            self.armed.insert((a, p));
        }
        self.first_pair = self.armed.first().map(|&(t, _)| t);
    }

    /// The fixed machines, by their place in `fixed`.
    const FIXED: [Timer; 4] = [
        Timer::Group,
        Timer::Detector,
        Timer::Barrier(0),
        Timer::Barrier(1),
    ];

    /// The earliest deadline of any armed timer.
    pub(super) fn next_timeout(&self) -> Option<Instant> {
        self.fixed
            .iter()
            .flatten()
            .copied()
            .chain(self.first_pair)
            .min()
    }

    /// The timers due by `now`, in order: the group engine, the channels in rank order, the
    /// detector, the barriers (a list kept between calls: give it back with
    /// [`TimerTable::give_back`]).
    pub(super) fn fired(&mut self, now: Instant) -> Vec<Timer> {
        let mut fired = std::mem::take(&mut self.fired);
        fired.clear();
        fired.extend(
            Self::FIXED
                .iter()
                .zip(self.fixed)
                .filter(|&(_, at)| at.is_some_and(|t| t <= now))
                .map(|(&timer, _)| timer),
        );
        fired.extend(
            self.armed
                .iter()
                .take_while(|&&(t, _)| t <= now)
                .map(|&(_, p)| Timer::Pair(p)),
        );
        fired.sort_unstable();
        fired
    }

    /// Gives back a list of [`TimerTable::fired`].
    pub(super) fn give_back(&mut self, list: Vec<Timer>) {
        self.fired = list;
    }
}

#[cfg(test)]
mod tests {

    use std::time::{Duration, Instant};

    use crate::Rank;

    use super::{Timer, TimerTable};

    #[test]
    fn the_earliest_machine_answers_and_only_those_due_fire_in_order() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut t = TimerTable::default();
        assert_eq!(t.next_timeout(), None);
        t.set_or_stop(Timer::Detector, Some(t0 + ms(1)));
        t.set_or_stop(Timer::Pair(Rank::new(3)), Some(t0 + ms(2)));
        t.set_or_stop(Timer::Group, Some(t0 + ms(2)));
        t.set_or_stop(Timer::Barrier(1), Some(t0 + ms(9)));
        assert_eq!(t.next_timeout(), Some(t0 + ms(1)));
        let f = t.fired(t0 + ms(2));
        assert_eq!(
            f,
            [Timer::Group, Timer::Pair(Rank::new(3)), Timer::Detector]
        );
        t.give_back(f);
        // Moved, stopped, set again to the same instant: one entry each.
        t.set_or_stop(Timer::Detector, Some(t0 + ms(5)));
        t.set_or_stop(Timer::Pair(Rank::new(3)), None);
        t.set_or_stop(Timer::Group, Some(t0 + ms(2)));
        assert_eq!(t.fired(t0 + ms(4)), [Timer::Group]);
        t.set_or_stop(Timer::Group, None);
        assert_eq!(t.next_timeout(), Some(t0 + ms(5)));
        t.set_or_stop(Timer::Detector, None);
        t.set_or_stop(Timer::Barrier(1), None);
        assert_eq!(t.next_timeout(), None);
    }
}
