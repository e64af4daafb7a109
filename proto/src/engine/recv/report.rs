//! The stream's reports in the acknowledgement tree ([`crate::engine::tree`]): the position of
//! its subtree, sent to its parent when it crosses a multiple of `ack_every`, after a quiet
//! period, and again while the subtree lags behind.

use super::*;

/// This stream's place in the acknowledgement tree of its root.
#[derive(Debug, Clone)]
pub(crate) struct TreeLink {
    /// Whom it reports to.
    pub(super) parent: Rank,
    /// Who reports to it: each child, the last position it reported for its subtree, and
    /// the member of its subtree at that position.
    pub(super) children: Vec<(Rank, Seq, Rank)>,
    /// The view the tree was laid out in.
    pub(super) view: u32,
    /// The position last reported to the parent.
    pub(super) sent: Seq,
    /// How long after a report it is sent again.
    pub(super) refresh_after: Duration,
    /// While the subtree lags behind what this member has seen, how often its position is
    /// reported again, moved or not (below the root's retransmission timeout).
    pub(super) keepalive: Duration,
    /// When a re-broadcast repair last made this stream report again (see
    /// `Receiver::rereport_due`). Here rather than in the receiver, whose size is the paper's
    /// `s_RDP`: only a stream with a tree needs it.
    pub(super) rereported: Option<Instant>,
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
}

/// The 64-bit position of `wire`, a position reported by a fellow receiver, which may be
/// ahead of or behind `reference` by up to 2^31 (checked, so no value overflows).
pub(super) fn near(reference: Seq, wire: u32) -> Option<Seq> {
    let delta = wire.wrapping_sub(reference.low32()) as i32;
    reference.checked_add_signed(i64::from(delta))
}

impl Receiver {
    /// With a tree: reports at once when the subtree's position crosses a multiple of
    /// `ack_every` (aligned, so that a parent forwards one report per `ack_every` frames of
    /// its subtree, not one per child), and otherwise `ack_delay` after the subtree last moved
    /// (a quiet period: the end of a stream, where no multiple is crossed; while frames keep
    /// coming the aligned reports do the work). `sent`: the position last reported.
    pub(super) fn schedule_report(&mut self, now: Instant, sent: Seq) {
        let every = self.ack_every as u64;
        let (moved, _) = self.subtree_next();
        if moved.get() / every > sent.get() / every {
            self.send_ack(now);
        } else if moved > sent {
            self.quiet(now);
        }
    }

    /// Whether a repair of a frame this member has, sent to every member (a re-broadcast),
    /// makes it report again, even unchanged: with a tree, at most once per `keepalive`.
    /// The root re-broadcasts a frame that several members asked for, or that a subtree
    /// whose report was lost on the way up did not acknowledge; every member that has the
    /// frame cannot tell which. Reporting at each one made the whole group report at every
    /// re-broadcast: at 1024 members with 1 % random and 1 % burst loss, 437 reports per data
    /// frame where the aligned ones are 128, and the root's children's among them (with the
    /// peer asked again, `on_unheld`, 184). Once per `keepalive` still puts a lost report right
    /// before the root's next timeout.
    pub(super) fn rereport_due(&mut self, now: Instant) -> bool {
        let Some(t) = self.tree.as_mut() else {
            return false;
        };
        if t.rereported.is_some_and(|at| now < at + t.keepalive) {
            return false;
        }
        t.rereported = Some(now);
        true
    }

    /// The position this stream's subtree has reached (its own, or a child's report if
    /// lower), and the member at it.
    pub(super) fn subtree_next(&self) -> (Seq, Rank) {
        let own = (self.expected, self.me);
        self.tree.as_ref().map_or(own, |t| {
            t.children
                .iter()
                .map(|c| (c.1, c.2))
                .fold(own, |a, b| if b.0 < a.0 { b } else { a })
        })
    }

    /// Reports the subtree's position to the parent if it moved since the last report, or in
    /// any case with `always` (a probe's answer: the report on the way up may have been lost).
    pub(super) fn report(&mut self, now: Instant, always: bool) {
        let (next, laggard) = self.subtree_next();
        let root = self.root;
        let Some(t) = self.tree.as_mut() else { return };
        if next <= t.sent && !always {
            return;
        }
        t.sent = t.sent.max(next);
        // Sent once more after a while unless a newer report goes first: a lost report is
        // otherwise repeated only when the subtree moves on, which at the end of a stream it
        // does not (the root would wait for its timeouts and probe the whole subtree).
        self.timers.set(Timer::Report, now + t.refresh_after);
        let msg = Control::TreeAck {
            root,
            next: next.low32(),
            laggard,
            view: t.view,
        };
        self.controls.push_back(Outgoing::to(t.parent, msg));
    }

    /// Places this stream in the acknowledgement tree (`None`: acknowledge to the root).
    /// After a change the first report goes out at the next timeout.
    pub(crate) fn set_tree(&mut self, now: Instant, link: Option<TreeLink>) {
        // A new link's report timer is not armed: an armed one is another link's.
        if self.tree.as_deref() == link.as_ref() && !self.timers.is_armed(Timer::Report) {
            return;
        }
        self.tree = link.map(Box::new);
        self.timers.stop(Timer::Report);
        if self.tree.is_some() {
            self.timers.set(Timer::Ack, now);
            self.quiet_from = None;
        }
    }

    /// A child's report of its subtree's position (`next`, in view `view`). Reports from
    /// members that are not this stream's children in this view are ignored; returns whether
    /// it was taken.
    pub(crate) fn on_report(
        &mut self,
        now: Instant,
        child: Rank,
        next: u32,
        laggard: Rank,
        view: u32,
    ) -> bool {
        let expected = self.expected;
        let Some(t) = self.tree.as_mut() else {
            return false;
        };
        if t.view != view {
            return false;
        }
        let Some(c) = t.children.iter_mut().find(|c| c.0 == child) else {
            return false;
        };
        let Some(next) = near(expected, next) else {
            return false;
        };
        if next >= c.1 {
            (c.1, c.2) = (next, laggard);
        }
        let sent = t.sent;
        // Forwarded at once when the subtree crosses a multiple of `ack_every` (so a laggard
        // that catches up is heard without waiting), after a quiet period otherwise.
        self.schedule_report(now, sent);
        true
    }
}
