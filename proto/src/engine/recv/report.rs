//! The stream's place in the acknowledgement tree of its root ([`crate::engine::tree`]), and its
//! reports: the position of its subtree (the minimum of its own and its children's last
//! reports), sent to its parent when it crosses a multiple of `ack_every` (aligned, so that a
//! parent forwards one report per `ack_every` frames, not one per child), after a quiet
//! period otherwise, and every `keepalive` while the subtree lags behind what the member has
//! seen (so that the root, hearing the subtree is alive, times out only the laggard).
//!
//! **Invariants.** `sent` only grows. A report is repeated `refresh_after` after it was sent
//! ([`StreamTimer::Report`]) unless a newer one goes first; a child's position only grows,
//! and reports from other members, or of another view, are not taken.

use std::time::{Duration, Instant};

use crate::wire::Control;
use crate::{Rank, Seq};

use crate::engine::timer::{StreamTimer, StreamTimers};
use crate::engine::Outgoing;

/// This stream's place in the acknowledgement tree of its root.
#[derive(Debug, Clone)]
pub(crate) struct TreeLink {
    /// Whom it reports to.
    parent: Rank,
    /// Who reports to it: each child, the last position it reported for its subtree, and
    /// the member of its subtree at that position.
    children: Vec<(Rank, Seq, Rank)>,
    /// The view the tree was laid out in.
    view: u32,
    /// The position last reported to the parent.
    sent: Seq,
    /// How long after a report it is sent again.
    refresh_after: Duration,
    /// While the subtree lags behind what this member has seen, how often its position is
    /// reported again, moved or not (below the root's retransmission timeout).
    keepalive: Duration,
    /// When a re-broadcast repair last made this stream report again (see
    /// [`TreeLink::rereport_due`]). Here rather than in the receiver, whose size is the
    /// paper's `s_RDP`: only a stream with a tree needs it.
    rereported: Option<Instant>,
}

/// Two links are the same place in the same tree, whatever they last reported.
impl PartialEq for TreeLink {
    fn eq(&self, other: &TreeLink) -> bool {
        self.parent == other.parent
            && self.children == other.children
            && self.view == other.view
            && self.sent == other.sent
            && self.refresh_after == other.refresh_after
            && self.keepalive == other.keepalive
    }
}

impl Eq for TreeLink {}

/// The 64-bit position of `wire`, a position reported by a fellow receiver, which may be
/// ahead of or behind `reference` by up to 2^31 (checked, so no value overflows).
fn near(reference: Seq, wire: u32) -> Option<Seq> {
    let delta = wire.wrapping_sub(reference.low32()) as i32;
    reference.checked_add_signed(i64::from(delta))
}

impl TreeLink {
    /// A link to `parent`, with `children` reporting, in view `view`.
    pub(crate) fn new(
        parent: Rank,
        children: Vec<Rank>,
        view: u32,
        refresh_after: Duration,
        keepalive: Duration,
    ) -> TreeLink {
        TreeLink {
            parent,
            children: children.into_iter().map(|c| (c, Seq::new(0), c)).collect(),
            view,
            sent: Seq::new(0),
            refresh_after,
            keepalive,
            rereported: None,
        }
    }

    /// Whom it reports to (and, with peer repair, asks for lost frames first).
    pub(crate) fn parent(&self) -> Rank {
        self.parent
    }

    /// Whether any member reports to this one.
    pub(crate) fn has_children(&self) -> bool {
        !self.children.is_empty()
    }

    /// Whether `rank` reports to this member (and asks it for lost frames).
    pub(super) fn is_child(&self, rank: Rank) -> bool {
        self.children.iter().any(|c| c.0 == rank)
    }

    /// The position last reported to the parent.
    pub(super) fn sent(&self) -> Seq {
        self.sent
    }

    /// How often a lagging subtree is reported again.
    pub(super) fn keepalive(&self) -> Duration {
        self.keepalive
    }

    /// The position the subtree has reached (`own`, this member's, or a child's report if
    /// lower), and the member at it.
    pub(super) fn subtree_next(&self, own: (Seq, Rank)) -> (Seq, Rank) {
        self.children
            .iter()
            .map(|c| (c.1, c.2))
            .fold(own, |a, b| if b.0 < a.0 { b } else { a })
    }

    /// Whether a repair of a frame this member has, sent to every member (a re-broadcast),
    /// makes it report again, even unchanged: at most once per `keepalive`.
    /// The root re-broadcasts a frame that several members asked for, or that a subtree
    /// whose report was lost on the way up did not acknowledge; every member that has the
    /// frame cannot tell which. Reporting at each one made the whole group report at every
    /// re-broadcast: at 1024 members with 1 % random and 1 % burst loss, 437 reports per data
    /// frame where the aligned ones are 128, and the root's children's among them (with the
    /// peer asked again, `on_unheld`, 184). Once per `keepalive` still puts a lost report right
    /// before the root's next timeout.
    pub(super) fn rereport_due(&mut self, now: Instant) -> bool {
        if self.rereported.is_some_and(|at| now < at + self.keepalive) {
            return false;
        }
        self.rereported = Some(now);
        true
    }

    /// The report of `root`'s stream to the parent, the subtree being at `next` with
    /// `laggard` there, if it moved since the last report or in any case with `always` (a
    /// probe's answer: the report on the way up may have been lost). It is sent again after
    /// a while unless a newer report goes first: a lost report is otherwise repeated only when
    /// the subtree moves on, which at the end of a stream it does not (the root would wait for
    /// its timeouts and probe the whole subtree).
    pub(super) fn report(
        &mut self,
        now: Instant,
        root: Rank,
        (next, laggard): (Seq, Rank),
        always: bool,
        timers: &mut StreamTimers<'_>,
    ) -> Option<Outgoing> {
        if next <= self.sent && !always {
            return None;
        }
        self.sent = self.sent.max(next);
        timers.set(StreamTimer::Report, now + self.refresh_after);
        let msg = Control::TreeAck {
            root,
            next: next.low32(),
            laggard,
            view: self.view,
        };
        Some(Outgoing::to(self.parent, msg))
    }

    /// A child's report of its subtree's position (`next`, in view `view`), the stream being
    /// at `expected`. Reports from members that are not this stream's children in this view
    /// are ignored; returns whether it was taken.
    pub(super) fn take_report(
        &mut self,
        child: Rank,
        next: u32,
        laggard: Rank,
        view: u32,
        expected: Seq,
    ) -> bool {
        if self.view != view {
            return false;
        }
        let Some(c) = self.children.iter_mut().find(|c| c.0 == child) else {
            return false;
        };
        let Some(next) = near(expected, next) else {
            return false;
        };
        if next >= c.1 {
            (c.1, c.2) = (next, laggard);
        }
        true
    }

    /// Heap bytes of the link (boxed) and its children.
    pub(super) fn heap_bytes(&self) -> usize {
        std::mem::size_of::<TreeLink>()
            + self.children.capacity() * std::mem::size_of::<(Rank, Seq, Rank)>()
    }
}

#[cfg(test)]
mod tests {

    use std::time::{Duration, Instant};

    use crate::engine::timer::StreamTimer;
    use crate::engine::Outgoing;
    use crate::wire::Control;
    use crate::{Rank, Seq};

    use super::TreeLink;
    use crate::engine::timer::TimerTable;
    use crate::engine::Dest;

    fn link() -> TreeLink {
        let ms = Duration::from_millis;
        TreeLink::new(
            Rank::new(1),
            vec![Rank::new(4), Rank::new(5)],
            7,
            ms(3),
            ms(10),
        )
    }

    #[test]
    fn the_subtree_is_as_far_as_its_slowest_child_in_the_same_view() {
        let mut t = link();
        let me = Rank::new(2);
        assert_eq!(
            t.subtree_next((Seq::new(9), me)),
            (Seq::new(0), Rank::new(4))
        );
        assert!(t.take_report(Rank::new(4), 8, Rank::new(4), 7, Seq::new(9)));
        assert!(t.take_report(Rank::new(5), 6, Rank::new(6), 7, Seq::new(9)));
        assert_eq!(
            t.subtree_next((Seq::new(9), me)),
            (Seq::new(6), Rank::new(6))
        );
        assert!(
            !t.take_report(Rank::new(5), 9, Rank::new(5), 8, Seq::new(9)),
            "other view"
        );
        assert!(
            !t.take_report(Rank::new(3), 9, Rank::new(3), 7, Seq::new(9)),
            "no child"
        );
        // A report behind an earlier one moves nothing.
        assert!(t.take_report(Rank::new(5), 2, Rank::new(5), 7, Seq::new(9)));
        assert_eq!(
            t.subtree_next((Seq::new(9), me)),
            (Seq::new(6), Rank::new(6))
        );
        assert_eq!(t.subtree_next((Seq::new(5), me)), (Seq::new(5), me));
    }

    #[test]
    fn a_report_goes_once_per_move_and_is_repeated_later() {
        let t0 = Instant::now();
        let mut table = TimerTable::new(8);
        let place = table.add_stream(Rank::new(0));
        let mut t = link();
        let root = Rank::new(0);
        let at = (Seq::new(3), Rank::new(4));
        let r = t.report(t0, root, at, false, &mut table.stream(place));
        match r {
            Some(Outgoing::Own {
                dst: Dest::Rank(p),
                msg: Control::TreeAck { next, view, .. },
            }) => assert_eq!((p, next, view), (Rank::new(1), 3, 7)),
            other => panic!("{other:?}"),
        }
        assert_eq!(t.sent(), Seq::new(3));
        assert_eq!(
            table.stream(place).get(StreamTimer::Report),
            Some(t0 + Duration::from_millis(3))
        );
        assert!(t
            .report(t0, root, at, false, &mut table.stream(place))
            .is_none());
        assert!(t
            .report(t0, root, at, true, &mut table.stream(place))
            .is_some());
        // Re-broadcasts make it report again once per keepalive.
        assert!(t.rereport_due(t0));
        assert!(!t.rereport_due(t0 + Duration::from_millis(9)));
        assert!(t.rereport_due(t0 + Duration::from_millis(10)));
    }
}
