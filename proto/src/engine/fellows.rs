//! What one member knows of each of its fellows: whether it is still a member, whether this
//! member takes its stream, when it last gave a sign of life, and which of its control
//! counters were seen (to refuse replays).
//!
//! **Invariants.** Every list has one entry per rank of the group. A rank once evicted is
//! never live again. A sign of life is noted only for a frame that passed every check and
//! proved its sender spoke (see `Engine::last_heard`).

use std::time::Instant;

use crate::wire::{Admit, ReplayWindow};
use crate::Rank;

/// The fellows of one member. See the module documentation.
#[derive(Debug)]
pub(super) struct Fellows {
    live: Vec<bool>,
    /// Whose streams this member takes, by rank (`Engine::take_streams_from`).
    takes: Vec<bool>,
    /// When each member last gave a sign of life.
    heard: Vec<Option<Instant>>,
    /// The control counters seen lately from each member.
    replay: Vec<ReplayWindow>,
}

impl Fellows {
    /// `n` members, all live, every stream taken, none heard from yet.
    pub(super) fn new(n: usize) -> Fellows {
        Fellows {
            live: vec![true; n],
            takes: vec![true; n],
            heard: vec![None; n],
            replay: vec![ReplayWindow::default(); n],
        }
    }

    /// Liveness by rank.
    pub(super) fn live(&self) -> &[bool] {
        &self.live
    }

    /// Whether `rank` is still a live member.
    pub(super) fn is_live(&self, rank: Rank) -> bool {
        self.live.get(rank.index()).copied().unwrap_or(false)
    }

    /// Removes `rank`: returns false if it is not a member or was evicted already.
    pub(super) fn evict(&mut self, rank: Rank) -> bool {
        match self.live.get_mut(rank.index()) {
            Some(l) if *l => {
                *l = false;
                true
            }
            _ => false,
        }
    }

    /// Takes the streams of `roots` alone.
    pub(super) fn take_streams_from(&mut self, roots: &[Rank]) {
        for (r, t) in self.takes.iter_mut().enumerate() {
            *t = roots.contains(&Rank::new(r as u16));
        }
    }

    /// Whether this member takes `rank`'s stream.
    pub(super) fn takes(&self, rank: Rank) -> bool {
        self.takes[rank.index()]
    }

    /// When `rank` last gave a sign of life.
    pub(super) fn last_heard(&self, rank: Rank) -> Option<Instant> {
        self.heard.get(rank.index()).copied().flatten()
    }

    /// `rank` gave a sign of life at `now`.
    pub(super) fn heard(&mut self, rank: Rank, now: Instant) {
        self.heard[rank.index()] = Some(now);
    }

    /// Where control counter `ctr` of `rank` falls in its replay window (and notes it).
    pub(super) fn admit(&mut self, rank: Rank, ctr: u32) -> Admit {
        self.replay[rank.index()].admit(ctr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_evicted_member_stays_evicted_and_replays_are_refused() {
        let mut f = Fellows::new(3);
        assert!(f.is_live(Rank::new(2)) && !f.is_live(Rank::new(3)));
        assert!(f.evict(Rank::new(2)));
        assert!(!f.evict(Rank::new(2)) && !f.evict(Rank::new(9)));
        assert_eq!(f.live(), [true, true, false]);
        f.take_streams_from(&[Rank::new(0)]);
        assert!(f.takes(Rank::new(0)) && !f.takes(Rank::new(1)));
        assert_eq!(f.admit(Rank::new(1), 5), Admit::Newest);
        assert_eq!(f.admit(Rank::new(1), 5), Admit::Refused);
        assert_eq!(f.admit(Rank::new(1), 4), Admit::Late);
        let t = Instant::now();
        assert_eq!(f.last_heard(Rank::new(1)), None);
        f.heard(Rank::new(1), t);
        assert_eq!(f.last_heard(Rank::new(1)), Some(t));
        assert_eq!(f.last_heard(Rank::new(7)), None);
    }
}
