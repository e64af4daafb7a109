//! The stream's feedback to its root: when it acknowledges ([`super::ack::Acks`]), how it asks
//! for what it is missing ([`super::nack::Nacks`]), and, with an acknowledgement tree, its
//! reports to its parent ([`TreeLink`]); and the stream's timers, which drive all three.

use std::time::Instant;

use crate::engine::timer::{StreamTimer, StreamTimers, TimerTable};
use crate::wire::Control;
use crate::{Rank, Seq};

use super::{Outgoing, Plan, Receiver, TreeLink};

impl Receiver {
    /// After the stream changed: releases held messages, acknowledges or reports if due, and
    /// asks for or keeps waiting for what is missing.
    pub(super) fn schedule(&mut self, now: Instant, t: &mut StreamTimers<'_>) {
        self.hold
            .release(now, self.window.expected(), t, &mut self.events);
        match self.tree.as_ref().map(|t| t.sent()) {
            Some(sent) if !self.acks.asked() => self.schedule_report(now, sent, t),
            _ if self.acks.due() => self.send_ack(now, t),
            _ => {}
        }
        if self.msgs.in_batch() && self.window.waits_in_link() {
            // The next frames are here, in the link, and consumed at the batch's end: what is
            // missing after them is planned then (`frames_done`), where the batch leaves the
            // stream, as it is without the link. Planned now, the stream would look whole, and
            // a gap found in this batch would be forgotten until the NACK retry.
            self.msgs.defer_plan();
            return;
        }
        let gap = self.window.gap();
        if let Plan::Ask(from) = self.nacks.plan(now, gap, self.window.highest(), t) {
            self.send_nacks(now, from, t);
            self.nacks.rearm(now, t);
        }
    }

    fn send_ack(&mut self, now: Instant, t: &mut StreamTimers<'_>) {
        let expected = self.window.expected();
        self.acks.sent(expected, t);
        // Answering a probe: say how far we have seen, so that the root can go back over
        // everything after it (go-back-16) instead of probing frame by frame.
        let seen = self
            .acks
            .take_probe()
            .then(|| self.window.highest().max(expected).low32());
        // A probe's answer goes straight to the root, which is not hearing of this member's
        // progress through the tree (an ancestor may have died).
        if self.tree.is_none() || seen.is_some() {
            let ack = Control::Ack {
                next: expected.low32(),
                seen,
            };
            self.controls.push_back(Outgoing::to(self.root, ack));
        }
        // The root's children report on their own schedule even when their subtree did not
        // move: the root learns which member it waits for, and stops probing the others.
        // A probe's answer also reports again to the parent, even unchanged: a report on the
        // way up may have been lost.
        let again = self.acks.take_rereport();
        self.report(now, seen.is_some() || again, t);
    }

    /// Asks for the missing frames from `from` on (see `Nacks::ask`); returns whether a NACK
    /// went out.
    fn send_nacks(&mut self, now: Instant, from: Seq, t: &mut StreamTimers<'_>) -> bool {
        let asked = self.nacks.ask(
            now,
            from,
            &mut self.window,
            &mut self.peer,
            self.tree.is_some(),
            self.root,
            &mut self.controls,
        );
        if asked.root && self.tree.is_none() {
            // A NACK carries the cumulative acknowledgement too (but for this member only:
            // with a tree its subtree's report is still due).
            self.acks.covered(self.window.expected(), t);
        }
        asked.any
    }

    /// With a tree: reports at once when the subtree's position crosses a multiple of
    /// `ack_every` (aligned, so that a parent forwards one report per `ack_every` frames of
    /// its subtree, not one per child), and otherwise `ack_delay` after the subtree last moved
    /// (a quiet period: the end of a stream, where no multiple is crossed; while frames keep
    /// coming the aligned reports do the work). `sent`: the position last reported.
    fn schedule_report(&mut self, now: Instant, sent: Seq, t: &mut StreamTimers<'_>) {
        let every = self.acks.every();
        let (moved, _) = self.subtree_next();
        if moved.get() / every > sent.get() / every {
            self.send_ack(now, t);
        } else if moved > sent {
            self.acks.quiet(now, t);
        }
    }

    /// The position this stream's subtree has reached (its own, or a child's report if
    /// lower), and the member at it.
    fn subtree_next(&self) -> (Seq, Rank) {
        let own = (self.window.expected(), self.me);
        self.tree.as_ref().map_or(own, |t| t.subtree_next(own))
    }

    /// Reports the subtree's position to the parent if it moved since the last report, or in
    /// any case with `always`.
    fn report(&mut self, now: Instant, always: bool, t: &mut StreamTimers<'_>) {
        let next = self.subtree_next();
        let Some(tree) = self.tree.as_mut() else {
            return;
        };
        if let Some(out) = tree.report(now, self.root, next, always, t) {
            self.controls.push_back(out);
        }
    }

    /// Whether a re-broadcast repair of a frame this member has makes it report again (with a
    /// tree, see `TreeLink::rereport_due`).
    pub(super) fn rereport_due(&mut self, now: Instant) -> bool {
        self.tree.as_mut().is_some_and(|t| t.rereport_due(now))
    }

    /// Places this stream in the acknowledgement tree (`None`: acknowledge to the root).
    /// After a change the first report goes out at the next timeout.
    pub(crate) fn set_tree(
        &mut self,
        now: Instant,
        table: &mut TimerTable,
        link: Option<TreeLink>,
    ) {
        let t = &mut table.stream(self.timers);
        // A new link's report timer is not armed: an armed one is another link's.
        if self.tree.as_deref() == link.as_ref() && !t.is_armed(StreamTimer::Report) {
            return;
        }
        self.peer
            .set_parent(link.as_ref().is_some_and(TreeLink::has_children));
        self.tree = link.map(Box::new);
        t.stop(StreamTimer::Report);
        if self.tree.is_some() {
            self.acks.report_at(now, t);
        }
    }

    /// A child's report of its subtree's position (`next`, in view `view`). Reports from
    /// members that are not this stream's children in this view are ignored; returns whether
    /// it was taken.
    pub(crate) fn on_report(
        &mut self,
        now: Instant,
        table: &mut TimerTable,
        child: Rank,
        next: u32,
        laggard: Rank,
        view: u32,
    ) -> bool {
        let expected = self.window.expected();
        let Some(tree) = self.tree.as_mut() else {
            return false;
        };
        if !tree.take_report(child, next, laggard, view, expected) {
            return false;
        }
        let sent = tree.sent();
        // Forwarded at once when the subtree crosses a multiple of `ack_every` (so a laggard
        // that catches up is heard without waiting), after a quiet period otherwise.
        self.schedule_report(now, sent, &mut table.stream(self.timers));
        true
    }

    pub(crate) fn on_timeout(&mut self, now: Instant, table: &mut TimerTable) {
        let t = &mut table.stream(self.timers);
        self.hold
            .release(now, self.window.expected(), t, &mut self.events);
        if t.is_expired(StreamTimer::Ack, now) && self.acks.on_timer(now, t) {
            self.send_ack(now, t);
        }
        if self.tree.is_some() && t.is_expired(StreamTimer::Report, now) {
            t.stop(StreamTimer::Report);
            self.report(now, true, t);
            // Once, unless the subtree lags behind what this member has seen (a member
            // below waits for a repair): then again every `keepalive`, so that the root
            // hears the subtree is alive and waits for one laggard, and times out that
            // one only, not every member of the subtree at once.
            let stuck = self.subtree_next().0 < self.window.highest();
            if let Some(tree) = self.tree.as_ref() {
                let again = stuck.then(|| now + tree.keepalive());
                t.set_or_stop(StreamTimer::Report, again);
            }
        }
        if t.is_expired(StreamTimer::Nack, now) {
            let expected = self.window.expected();
            let gap = expected < self.window.highest();
            if let Some(retry) = self.nacks.on_timer(gap, t) {
                if self.send_nacks(now, expected, t) && retry {
                    self.nacks.back_off();
                }
                self.nacks.rearm(now, t);
            }
        }
    }

    /// Acknowledges what it holds now, if the root has not heard of all of it (a member that
    /// flushes before it leaves does not leave the root to ask an empty link).
    pub(crate) fn ack_held(&mut self, now: Instant, table: &mut TimerTable) {
        if self.owes_ack() {
            self.acks.ask();
            self.schedule(now, &mut table.stream(self.timers));
        }
    }

    /// Whether this member holds frames of the stream it has not acknowledged: the root will
    /// ask for them (its poll), so a member serving the group between calls stays to answer.
    pub(crate) fn owes_ack(&self) -> bool {
        self.acks.owes(self.window.expected())
    }
}
