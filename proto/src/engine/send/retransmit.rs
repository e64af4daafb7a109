//! The root's retransmission timer for one destination: its timeout, doubled at each expiry
//! that found no progress (up to the configured ceiling) and reset to the configured value
//! when the destination's cursor moves, and when the destination last moved or spoke.
//!
//! The timer's deadline itself is in the engine's timer table (`Timer::Retransmit`); this is
//! what the sender decides it from. It lives in the destination's `Lms`, owned and changed
//! here only.

use std::time::{Duration, Instant};

/// What the retransmission timer keeps of one destination. See the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Retransmit {
    /// Current timeout: the configured one, doubled per expiry without progress.
    rto: Duration,
    /// Expiries in a row without progress.
    backoffs: u32,
    /// When its cursor last moved (or it was added: never).
    last_progress: Option<Instant>,
    /// When a frame last came from it.
    last_heard: Option<Instant>,
}

impl Retransmit {
    /// A destination's timer, at timeout `rto`, never fired, never heard.
    pub(crate) fn new(rto: Duration) -> Retransmit {
        Retransmit {
            rto,
            backoffs: 0,
            last_progress: None,
            last_heard: None,
        }
    }

    /// Current timeout.
    pub(crate) fn rto(&self) -> Duration {
        self.rto
    }
    /// When its cursor last moved.
    pub(crate) fn last_progress(&self) -> Option<Instant> {
        self.last_progress
    }
    /// When a frame last came from it.
    pub(crate) fn last_heard(&self) -> Option<Instant> {
        self.last_heard
    }

    /// Its cursor moved at `now`: the back-off ends, the timeout is `rto` (the configured)
    /// again.
    pub(crate) fn progressed(&mut self, now: Instant, rto: Duration) {
        self.backoffs = 0;
        self.rto = rto;
        self.last_progress = Some(now);
    }

    /// A frame came from it at `now`.
    pub(crate) fn heard(&mut self, now: Instant) {
        self.last_heard = Some(now);
    }

    /// The timer fired without progress: returns whether it is the first expiry since the
    /// last progress.
    pub(crate) fn expired(&mut self) -> bool {
        let first = self.backoffs == 0;
        self.backoffs = self.backoffs.saturating_add(1);
        first
    }

    /// Doubles the timeout, to `max` at most; returns the new timeout.
    pub(crate) fn back_off(&mut self, max: Duration) -> Duration {
        self.rto = (self.rto * 2).min(max);
        self.rto
    }
}

#[cfg(test)]
mod tests {
    use super::Retransmit;
    use std::time::{Duration, Instant};

    #[test]
    fn the_timeout_doubles_per_expiry_up_to_its_ceiling_and_progress_resets_it() {
        let base = Duration::from_millis(4);
        let max = Duration::from_millis(20);
        let mut t = Retransmit::new(base);
        assert!(t.expired(), "the first expiry");
        assert!(!t.expired(), "a second in a row is not the first");
        assert_eq!(t.back_off(max), base * 2);
        assert_eq!(t.back_off(max), base * 4);
        assert_eq!(t.back_off(max), max, "never above the ceiling");
        assert_eq!(t.rto(), max);
        let now = Instant::now();
        t.progressed(now, base);
        assert_eq!((t.rto(), t.last_progress()), (base, Some(now)));
        assert!(t.expired(), "the first expiry since progress again");
        assert_eq!(t.last_heard(), None, "progress is not hearing from it");
        t.heard(now);
        assert_eq!(t.last_heard(), Some(now));
    }
}
