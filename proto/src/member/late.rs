//! The join's tail at a member: the join's coordinator repeats its roster until every member
//! confirmed it, so a member whose confirmation was lost confirms again, for a while after it
//! joined ([`LATE_ROSTER_SERVE`]), unless a frame of the coordinator's session shows that the
//! coordinator has every confirmation (it enters the session only then).
//!
//! **Invariants.** At most [`MAX_RAW_OUT`] confirmations wait to be sent; more would only
//! answer replays.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::join::LateRoster;
use crate::wire::ethernet::MacAddr;
use crate::Rank;

/// How long after its join a member stays reachable for the join's coordinator, which
/// repeats its roster every [`crate::join::REPEAT`] until every member confirmed it: a
/// member that took the roster and left the link alone (an MPI rank that went on to Open MPI's
/// own collectives) left the coordinator waiting for its join timeout when its confirmation
/// was lost. Two seconds are 200 repeats.
pub const LATE_ROSTER_SERVE: Duration = Duration::from_secs(2);

/// Confirmations of a repeated roster waiting to be sent, at most (the coordinator repeats
/// its roster every [`crate::join::REPEAT`]; more would only answer replays).
const MAX_RAW_OUT: usize = 4;

/// The join's tail at one member. See the module documentation.
#[derive(Debug, Default)]
pub(super) struct LateJoin {
    /// How to confirm the roster again.
    late: Option<LateRoster>,
    /// Until when this member stays reachable for the coordinator.
    until: Option<Instant>,
    /// The coordinator's rank: once a frame of its session arrives, `until` ends.
    coordinator: Option<Rank>,
    /// Whole frames to send before the engines' (confirmations of a repeated roster).
    out: VecDeque<(MacAddr, Vec<u8>)>,
}

impl LateJoin {
    /// The tail of a join finished at `now` (`late`), among members of `peers` MACs.
    pub(super) fn new(now: Instant, late: Option<LateRoster>, peers: &[MacAddr]) -> LateJoin {
        let coordinator = late
            .as_ref()
            .and_then(|l| peers.iter().position(|m| *m == l.coordinator()))
            .map(|r| Rank::new(r as u16));
        LateJoin {
            until: late.as_ref().map(|_| now + LATE_ROSTER_SERVE),
            coordinator,
            late,
            out: VecDeque::new(),
        }
    }

    /// A join frame `pdu` from `src`: if it is the coordinator's roster, a confirmation is
    /// queued (true); otherwise it is foreign to this member (false).
    pub(super) fn answer(&mut self, src: MacAddr, pdu: &[u8]) -> bool {
        match self.late.as_ref().and_then(|l| l.answer(src, pdu)) {
            Some(confirm) if self.out.len() < MAX_RAW_OUT => {
                self.out.push_back(confirm);
                true
            }
            _ => false,
        }
    }

    /// The next confirmation to send.
    pub(super) fn pop(&mut self) -> Option<(MacAddr, Vec<u8>)> {
        self.out.pop_front()
    }

    /// Until when this member should stay reachable for the coordinator; `heard` tells
    /// whether a rank's frame of the session arrived.
    pub(super) fn serves_until(&self, heard: impl Fn(Rank) -> bool) -> Option<Instant> {
        let in_session = self.coordinator.is_some_and(heard);
        self.until.filter(|_| !in_session)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_join_nothing_is_served_and_nothing_answered() {
        let mut l = LateJoin::new(Instant::now(), None, &[MacAddr([2; 6])]);
        assert_eq!(l.serves_until(|_| false), None);
        assert!(!l.answer(MacAddr([2; 6]), &[0; 64]));
        assert_eq!(l.pop(), None);
    }
}
