//! The receive stream's timers: one table, one deadline per [`Timer`], that answers
//! `next_timeout` (the engine keeps its set of timers in step with it).

use std::time::{Duration, Instant};

/// A timer of a receive stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Timer {
    /// The next acknowledgement (or, with a tree, report) is due. Lazy while the stream moves
    /// as the quiet timer of a tree's report (see `Receiver::quiet_from`).
    Ack,
    /// The gaps gathered so far are asked for, or the missing frames asked for again.
    Nack,
    /// The last report to the tree's parent is sent again (a lost report, or a lagging
    /// subtree's keepalive).
    Report,
    /// Messages held back for fellows' requests are released (`Config::peer_hold`). Lazy:
    /// pushed back when it fires if the stream moved since it was armed.
    Hold,
}

impl Timer {
    /// How many timers there are.
    const COUNT: usize = 4;
}

/// When each timer fires, if it is armed: nanoseconds from one instant, either side, so that
/// the table takes no more room in the receiver than three bare deadlines (the receiver's size
/// is the paper's `s_RDP`, which the memory study compares).
#[derive(Debug, Clone, Copy)]
pub(super) struct TimerTable {
    /// The instant the deadlines count from: the first deadline ever set.
    epoch: Option<Instant>,
    /// Each timer's deadline, in nanoseconds from `epoch`; [`STOPPED`] if it is not armed.
    at: [i64; Timer::COUNT],
}

/// The deadline of a timer that is not armed.
const STOPPED: i64 = i64::MIN;

impl Default for TimerTable {
    fn default() -> TimerTable {
        TimerTable {
            epoch: None,
            at: [STOPPED; Timer::COUNT],
        }
    }
}

impl TimerTable {
    /// When `timer` fires, if it is armed.
    pub(super) fn get(&self, timer: Timer) -> Option<Instant> {
        self.instant(self.at[timer as usize])
    }

    /// Arms `timer` to fire at `at` (or re-arms it). Deadlines more than 292 years from the
    /// first one are taken as 292 years.
    pub(super) fn set(&mut self, timer: Timer, at: Instant) {
        let epoch = *self.epoch.get_or_insert(at);
        let nanos = |d: Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
        self.at[timer as usize] = if at >= epoch {
            nanos(at - epoch)
        } else {
            -nanos(epoch - at)
        };
    }

    /// Arms `timer` at `at`, or stops it with `None`.
    pub(super) fn set_or_stop(&mut self, timer: Timer, at: Option<Instant>) {
        match at {
            Some(at) => self.set(timer, at),
            None => self.stop(timer),
        }
    }

    /// Stops `timer`.
    pub(super) fn stop(&mut self, timer: Timer) {
        self.at[timer as usize] = STOPPED;
    }

    /// Whether `timer` is armed.
    pub(super) fn is_armed(&self, timer: Timer) -> bool {
        self.at[timer as usize] != STOPPED
    }

    /// Whether `timer` is armed and its time has come by `now`.
    pub(super) fn is_expired(&self, timer: Timer, now: Instant) -> bool {
        self.get(timer).is_some_and(|t| t <= now)
    }

    /// The earliest deadline of any armed timer.
    pub(super) fn next_timeout(&self) -> Option<Instant> {
        let first = self.at.iter().copied().filter(|&n| n != STOPPED).min()?;
        self.instant(first)
    }

    /// The instant `nanos` from the epoch; `None` for [`STOPPED`].
    fn instant(&self, nanos: i64) -> Option<Instant> {
        if nanos == STOPPED {
            return None;
        }
        let epoch = self.epoch?;
        let d = Duration::from_nanos(nanos.unsigned_abs());
        Some(if nanos >= 0 { epoch + d } else { epoch - d })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_either_side_of_the_first_come_back_exactly() {
        let t0 = Instant::now();
        let mut t = TimerTable::default();
        assert_eq!(t.next_timeout(), None);
        t.set(Timer::Ack, t0 + Duration::from_millis(5));
        t.set(Timer::Nack, t0 + Duration::from_nanos(1));
        t.set(Timer::Hold, t0 + Duration::from_secs(100 * 365 * 86_400));
        assert_eq!(t.get(Timer::Ack), Some(t0 + Duration::from_millis(5)));
        assert_eq!(t.get(Timer::Nack), Some(t0 + Duration::from_nanos(1)));
        assert_eq!(t.next_timeout(), Some(t0 + Duration::from_nanos(1)));
        assert!(t.is_expired(Timer::Nack, t0 + Duration::from_nanos(1)));
        assert!(!t.is_expired(Timer::Ack, t0 + Duration::from_millis(4)));
        assert!(!t.is_armed(Timer::Report));
        t.stop(Timer::Nack);
        assert_eq!(t.next_timeout(), Some(t0 + Duration::from_millis(5)));
        t.set_or_stop(Timer::Ack, None);
        t.stop(Timer::Hold);
        assert_eq!(t.next_timeout(), None);
    }
}
