//! The group engine's deliveries at a member: receives posted per root, and messages waiting
//! for a call or for the application.
//!
//! A member posts receives itself, so that no delivery waits unbounded: a `bcast` call posts
//! one for its root (the MPI way), and a streaming member (`prepost > 0`) keeps `prepost`
//! posted per root, topped up as the application takes its deliveries.
//!
//! **Invariants.** Per root, the receives posted and the streamed deliveries queued for the
//! application add up to at most `prepost` once topped up; `top_ups` names the roots whose
//! receives are due for a top-up. A rank this member does not take is never posted for.

use crate::rank_map::RankMap;
use crate::Rank;

use super::inbox::Inboxes;

/// What one root's stream has at a member.
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    /// Receives posted on the group engine and not consumed yet.
    posted: u32,
    /// Streamed deliveries waiting for the application.
    queued: u32,
}

/// The deliveries of one member. See the module documentation.
#[derive(Debug)]
pub(super) struct Deliveries {
    /// Receives kept posted per root for a streaming member (0: one per `bcast` call).
    prepost: usize,
    /// Members in the group.
    size: usize,
    /// Whose broadcasts and point-to-point messages this member takes, in rank order (`None`:
    /// every member's).
    takes: Option<Box<[Rank]>>,
    /// Per root posted for or streamed from, its receives and its deliveries waiting for the
    /// application (counters per rank were 4 bytes per fellow at every member). Looked up for
    /// every data frame a streaming member takes: the first two roots' are kept inline.
    counts: RankMap<Counts, 2>,
    /// Messages delivered and not claimed by a call yet, per root.
    inbox: Inboxes,
    /// Roots whose deliveries the application took since the last top-up.
    top_ups: Vec<Rank>,
}

impl Deliveries {
    /// Nothing posted or waiting, for a group of `n`; `senders`: the only ranks taken, if
    /// given.
    pub(super) fn new(n: usize, prepost: usize, senders: Option<&[Rank]>) -> Deliveries {
        Deliveries {
            prepost,
            size: n,
            takes: senders.map(|s| {
                let mut s = s.to_vec();
                s.sort_unstable();
                s.dedup();
                s.into_boxed_slice()
            }),
            counts: RankMap::new(),
            inbox: Inboxes::default(),
            top_ups: Vec::new(),
        }
    }

    /// Whether this member streams (keeps receives posted ahead of the application).
    pub(super) fn streaming(&self) -> bool {
        self.prepost > 0
    }

    /// Whether this member takes `rank`'s broadcasts and point-to-point messages.
    pub(super) fn takes(&self, rank: Rank) -> bool {
        rank.index() < self.size
            && self
                .takes
                .as_ref()
                .is_none_or(|s| s.binary_search(&rank).is_ok())
    }

    /// Receives posted for `root` and not consumed yet.
    pub(super) fn posted(&self, root: Rank) -> u32 {
        self.counts.get(root).map_or(0, |c| c.posted)
    }

    /// A receive was posted for `root`.
    pub(super) fn note_posted(&mut self, root: Rank) {
        self.counts.entry_or_default(root).posted += 1;
    }

    /// A message of `root` consumed its receive.
    pub(super) fn consumed(&mut self, root: Rank) {
        if let Some(c) = self.counts.get_mut(root) {
            c.posted = c.posted.saturating_sub(1);
        }
    }

    /// Whether `root` is due another receive for a streaming member.
    pub(super) fn wants_post(&self, root: Rank) -> bool {
        let c = self.counts.get(root).copied().unwrap_or_default();
        c.posted + c.queued < self.prepost as u32
    }

    /// A streamed delivery of `root` was queued for the application (its receive is topped up).
    pub(super) fn queued(&mut self, root: Rank) {
        self.counts.entry_or_default(root).queued += 1;
        self.top_ups.push(root);
    }

    /// The application took a streamed delivery of `root`: room for one more.
    pub(super) fn taken(&mut self, root: Rank) {
        if let Some(c) = self.counts.get_mut(root) {
            c.queued = c.queued.saturating_sub(1);
        }
        self.top_ups.push(root);
    }

    /// Whether roots are due a top-up.
    pub(super) fn has_top_ups(&self) -> bool {
        !self.top_ups.is_empty()
    }

    /// The next root due a top-up.
    pub(super) fn next_top_up(&mut self) -> Option<Rank> {
        self.top_ups.pop()
    }

    /// A message of `root` waits for a call.
    pub(super) fn keep(&mut self, root: Rank, data: Vec<u8>) {
        self.inbox[root.index()].push_back(data);
    }

    /// Whether a message of `root` waits for a call.
    pub(super) fn has_message(&self, root: Rank) -> bool {
        !self.inbox[root.index()].is_empty()
    }

    /// The oldest message of `root` waiting for a call.
    pub(super) fn take_message(&mut self, root: Rank) -> Option<Vec<u8>> {
        self.inbox.get_mut(root.index())?.pop_front()
    }

    /// `rank` was evicted: its receives are gone.
    pub(super) fn evicted(&mut self, rank: Rank) {
        if let Some(c) = self.counts.get_mut(rank) {
            c.posted = 0;
        }
    }
}

#[cfg(test)]
mod tests {

    use crate::Rank;

    use super::Deliveries;

    #[test]
    fn a_streaming_member_keeps_prepost_receives_ahead_of_the_application() {
        let mut d = Deliveries::new(3, 2, None);
        let root = Rank::new(1);
        assert!(d.streaming() && d.takes(root));
        d.note_posted(root);
        assert!(d.wants_post(root));
        d.note_posted(root);
        assert!(!d.wants_post(root));
        d.consumed(root);
        d.queued(root);
        assert!(
            !d.wants_post(root),
            "one posted, one waiting for the application"
        );
        assert_eq!(d.next_top_up(), Some(root));
        d.taken(root);
        assert!(d.wants_post(root) && d.has_top_ups());
        d.evicted(root);
        assert_eq!(d.posted(root), 0);
    }

    #[test]
    fn only_the_senders_named_are_taken_and_messages_wait_per_root() {
        let mut d = Deliveries::new(3, 0, Some(&[Rank::new(0)]));
        assert!(!d.streaming());
        assert!(d.takes(Rank::new(0)) && !d.takes(Rank::new(1)) && !d.takes(Rank::new(9)));
        d.keep(Rank::new(0), vec![1]);
        assert!(d.has_message(Rank::new(0)) && !d.has_message(Rank::new(2)));
        assert_eq!(d.take_message(Rank::new(0)), Some(vec![1]));
        assert_eq!(d.take_message(Rank::new(0)), None);
        assert_eq!(d.take_message(Rank::new(2)), None);
    }
}
