//! What one member knows of each of its fellows: whether it is still a member, whether this
//! member takes its stream, when it last gave a sign of life, and which of its control
//! counters were seen (to refuse replays).
//!
//! **Layout.** Liveness is a byte per rank, and so are the streams taken once a member takes
//! some alone; the sign of life and the replay window are kept for the fellows heard from
//! alone, in rank order (a member hears from its roots, its parent, its children and those
//! that ask it for frames, a handful in a group of thousands). Why: kept per rank they were
//! 32 bytes per fellow at every member, and the simulator holds every member of a group in
//! one process: at 4096 members, 512 MiB. Every frame asks whether its sender is live, and
//! every data frame whether its stream is taken: while nobody was evicted and every stream
//! is taken (the common case) neither answer reads a per-rank table, whose line for the
//! sender is seldom in the cache in a large group.
//!
//! **Invariants.** `live` has one entry per rank of the group, and `evicted` is set once one
//! of them is false; `takes` is empty (every stream taken) or has one entry per rank; `heard`
//! is sorted by rank, one entry per fellow heard from. A rank once evicted is never live
//! again. A sign of life is noted only for a frame that passed every check and proved its
//! sender spoke (see `Engine::last_heard`).

use std::time::Instant;

use crate::wire::{Admit, ReplayWindow};
use crate::Rank;

/// What this member heard from one fellow.
#[derive(Debug, Clone)]
struct Heard {
    rank: Rank,
    /// When it last gave a sign of life.
    at: Option<Instant>,
    /// The control counters seen lately from it.
    replay: ReplayWindow,
}

/// The fellows of one member. See the module documentation.
#[derive(Debug)]
pub(super) struct Fellows {
    live: Vec<bool>,
    /// Whether a fellow was evicted: while none was, every rank is live without a look at
    /// `live`.
    evicted: bool,
    /// Whose streams this member takes, by rank (`Engine::take_streams_from`); empty: every
    /// stream.
    takes: Vec<bool>,
    /// The fellows heard from, by rank.
    heard: Vec<Heard>,
}

impl Fellows {
    /// `n` members, all live, every stream taken, none heard from yet.
    pub(super) fn new(n: usize) -> Fellows {
        Fellows {
            live: vec![true; n],
            evicted: false,
            takes: Vec::new(),
            heard: Vec::new(),
        }
    }

    /// Liveness by rank.
    pub(super) fn live(&self) -> &[bool] {
        &self.live
    }

    /// Whether `rank` is still a live member.
    pub(super) fn is_live(&self, rank: Rank) -> bool {
        let i = rank.index();
        i < self.live.len() && (!self.evicted || self.live[i])
    }

    /// Removes `rank`: returns false if it is not a member or was evicted already.
    pub(super) fn evict(&mut self, rank: Rank) -> bool {
        match self.live.get_mut(rank.index()) {
            Some(l) if *l => {
                *l = false;
                self.evicted = true;
                true
            }
            _ => false,
        }
    }

    /// Takes the streams of `roots` alone.
    pub(super) fn take_streams_from(&mut self, roots: &[Rank]) {
        self.takes = (0..self.live.len())
            .map(|r| roots.contains(&Rank::new(r as u16)))
            .collect();
    }

    /// Whether this member takes `rank`'s stream.
    pub(super) fn takes(&self, rank: Rank) -> bool {
        self.takes.is_empty() || self.takes[rank.index()]
    }

    /// When `rank` last gave a sign of life.
    pub(super) fn last_heard(&self, rank: Rank) -> Option<Instant> {
        let i = self.heard.binary_search_by_key(&rank, |h| h.rank).ok()?;
        self.heard[i].at
    }

    /// What was heard from `rank` (made now if nothing was).
    fn entry(&mut self, rank: Rank) -> &mut Heard {
        let i = match self.heard.binary_search_by_key(&rank, |h| h.rank) {
            Ok(i) => i,
            Err(i) => {
                self.heard.insert(
                    i,
                    Heard {
                        rank,
                        at: None,
                        replay: ReplayWindow::default(),
                    },
                );
                i
            }
        };
        &mut self.heard[i]
    }

    /// `rank` gave a sign of life at `now`.
    pub(super) fn heard(&mut self, rank: Rank, now: Instant) {
        self.entry(rank).at = Some(now);
    }

    /// Where control counter `ctr` of `rank` falls in its replay window (and notes it).
    pub(super) fn admit(&mut self, rank: Rank, ctr: u32) -> Admit {
        self.entry(rank).replay.admit(ctr)
    }
}

#[cfg(test)]
mod tests {

    use std::time::Instant;

    use crate::wire::Admit;
    use crate::Rank;

    use super::Fellows;

    #[test]
    fn an_evicted_member_stays_evicted_and_replays_are_refused() {
        let mut f = Fellows::new(3);
        assert!(f.is_live(Rank::new(2)) && !f.is_live(Rank::new(3)));
        assert!(
            (0..3).all(|r| f.takes(Rank::new(r))),
            "every stream, until told"
        );
        assert!(f.evict(Rank::new(2)));
        assert!(!f.evict(Rank::new(2)) && !f.evict(Rank::new(9)));
        assert_eq!(f.live(), [true, true, false]);
        assert!(f.is_live(Rank::new(1)) && !f.is_live(Rank::new(2)) && !f.is_live(Rank::new(3)));
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
