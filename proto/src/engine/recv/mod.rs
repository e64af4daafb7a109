//! The receiver side: one receive stream per root (the paper's receive-only DP, the RDP).
//!
//! A [`Receiver`] composes the concerns of one stream, each a type that owns its state and
//! states its invariants:
//! - [`window::Window`]: the slots of the frames accepted, in order or not, and their copies;
//! - [`reassembly::Messages`]: frames consumed into whole messages, delivered in the root's
//!   order, exactly once; [`posts::Posts`]: the receives posted for them;
//! - [`ack::Acks`] and [`nack::Nacks`]: when the stream acknowledges, and how it asks for
//!   what it is missing;
//! - [`peer::PeerRepair`] and [`hold::Hold`]: asking a fellow receiver first, and serving
//!   fellows from what this member still holds;
//! - [`link::InLink`]: payloads left in the link's frames instead of copied;
//! - [`report::TreeLink`]: the stream's place in the acknowledgement tree and its reports.
//!
//! The receiver passes each what it needs of the others. Its timers are in the engine's table
//! ([`super::timer`]): every call that may arm one takes the table.
//!
//! With an acknowledgement tree ([`super::tree`]) the stream acknowledges to its parent, for
//! its whole subtree (see [`report`]). NACKs still go to the root (or the peer) directly. A
//! probe of the root (a frame asking for an acknowledgement) means the root is not hearing of
//! this member's progress, say because an ancestor died: the answer goes straight to the
//! root, besides the tree's report.

use std::collections::VecDeque;
use std::time::Instant;

use crate::machine::{self, BatchEnd};
use crate::wire::control::{nack_offsets, NackBitmap};
use crate::wire::{Control, Flags, Kind, Position, Repr};
use crate::{Rank, Seq};

use super::timer::{StreamPlace, StreamTimer, StreamTimers, TimerTable};
use super::{Dest, DropReason, EngineConfig, EngineEvent, Observer, Outgoing, PostError};

mod ack;
mod hold;
mod link;
mod nack;
mod peer;
mod posts;
mod reassembly;
mod report;
mod window;

use ack::Acks;
use hold::Hold;
#[cfg(test)]
pub(super) use hold::PEER_HOLD_WAIT;
use link::InLink;
use nack::{Nacks, Plan};
pub(crate) use peer::unheld_reply;
#[cfg(test)]
pub(super) use peer::COPY_TAIL;
use peer::{pending_reply, PeerRepair};
pub(crate) use posts::Post;
use posts::Posts;
use reassembly::{InMsg, Messages, Payload};
pub(crate) use report::TreeLink;
use window::{SlotState, Window};

/// Where a frame a fellow asks for lies (see `Receiver::held`).
enum Found<'a> {
    /// In these bytes (the window, or a message).
    Here(&'a [u8]),
    /// In a frame the link retains: its address and length.
    Link(usize, usize),
}

/// What an observer's pieces may lie in at the end of a batch: the link's frames and the
/// window's copies.
struct Memory<'a> {
    link: &'a dyn machine::Held,
    window: &'a Window,
}

impl machine::Held for Memory<'_> {
    fn find(&self, at: usize, len: usize) -> Option<&[u8]> {
        self.window
            .find_kept(at, len)
            .or_else(|| self.link.find(at, len))
    }
}

/// The header of frame `r` relayed to `asker`: a repair of the root's stream, point to point.
fn relayed(r: &Repr, asker: Rank) -> Repr {
    let mut repr = *r;
    repr.kind = Some(Kind::Repair);
    repr.dst = asker;
    repr.flags.remove(Flags::BROADCAST | Flags::ACK_REQ);
    repr.flags |= Flags::P2P;
    repr
}

/// The receive stream of one root.
#[derive(Debug)]
pub struct Receiver {
    root: Rank,
    me: Rank,
    window: Window,
    msgs: Messages,
    posts: Posts,
    acks: Acks,
    nacks: Nacks,
    peer: PeerRepair,
    hold: Hold,
    link: InLink,
    /// Where this stream reports in the acknowledgement tree (`None`: to the root directly).
    /// Boxed: most streams (groups below the tree's threshold) have none.
    tree: Option<Box<TreeLink>>,
    events: VecDeque<EngineEvent>,
    controls: VecDeque<Outgoing>,
    /// Where its timers lie in the engine's table.
    timers: StreamPlace,
}

impl Receiver {
    /// The stream of `root` at the member `cfg` describes, its timers at `timers`.
    pub(crate) fn new(cfg: &EngineConfig, root: Rank, timers: StreamPlace) -> Receiver {
        Receiver {
            root,
            me: cfg.rank,
            window: Window::new(cfg),
            msgs: Messages::new(cfg),
            posts: Posts::new(cfg),
            acks: Acks::new(cfg),
            nacks: Nacks::new(cfg),
            peer: PeerRepair::new(cfg),
            hold: Hold::new(cfg),
            link: InLink::default(),
            tree: None,
            events: VecDeque::new(),
            controls: VecDeque::new(),
            timers,
        }
    }

    /// Next sequence this member needs from the root.
    pub fn expected(&self) -> Seq {
        self.window.expected()
    }
    /// Messages delivered so far (the id of the next one).
    pub fn next_msg(&self) -> u64 {
        self.msgs.next_msg()
    }
    /// Bytes held in the pushed buffer.
    pub fn pushed_bytes(&self) -> usize {
        self.msgs.pushed_bytes()
    }
    /// Complete messages held for a receive not posted yet.
    pub fn held_messages(&self) -> usize {
        self.msgs.waiting()
    }
    /// Receives posted and not yet taken.
    pub fn posted(&self) -> usize {
        self.posts.len()
    }
    /// Makes now what the stream makes at first use, at its bounds: the window's payload
    /// places and the room of the receive queue.
    #[cfg(feature = "test-hooks")]
    pub(crate) fn make_every_place(&mut self) {
        self.window.make_places();
        self.posts.make_room();
    }

    /// Heap bytes this stream owns (window slots, pushed buffer, receive queue, the messages
    /// held for receives).
    pub fn heap_bytes(&self) -> usize {
        self.window.heap_bytes()
            + self.link.heap_bytes()
            + self.msgs.heap_bytes()
            + self.posts.heap_bytes()
            + self.hold.heap_bytes()
            + self.tree.as_ref().map_or(0, |t| t.heap_bytes())
    }

    /// Where the stream's timers lie in the engine's table.
    pub(crate) fn timers(&self) -> StreamPlace {
        self.timers
    }

    pub(crate) fn set_observer(&mut self, observer: Observer) {
        self.msgs.set_observer(observer);
    }

    pub(crate) fn keep_at_most(&mut self, keep: usize) {
        self.msgs.keep_at_most(keep);
    }

    /// Posts a receive of up to `max_len` bytes; `buf`'s capacity, if any, receives a
    /// message.
    pub(crate) fn post(&mut self, max_len: usize, buf: Vec<u8>) -> Result<(), PostError> {
        self.posts.post(max_len, buf)
    }

    /// Applies posted receives to messages held in the pushed buffer and resumes consumption.
    pub(crate) fn progress(&mut self, now: Instant, table: &mut TimerTable) {
        let before = self.window.expected();
        // Complete messages waiting for a receive.
        while let Some(m) = self.msgs.take_waiting(&mut self.posts) {
            self.deliver(m);
        }
        // The message in progress becomes posted: its pushed part is copied out.
        self.msgs.post_current(&mut self.posts);
        self.drain_from(None);
        if self.window.expected() > before {
            // The root may be backing off: tell it at once.
            self.acks.ask();
        }
        self.maybe_pull();
        self.schedule(now, &mut table.stream(self.timers));
    }

    /// Handles a data or repair frame of this root's stream.
    pub(crate) fn on_data(
        &mut self,
        now: Instant,
        table: &mut TimerTable,
        repr: &Repr,
        payload: &[u8],
    ) -> Result<(), DropReason> {
        let t = &mut table.stream(self.timers);
        self.msgs.begin_batch();
        if repr.flags.contains(Flags::ACK_REQ) {
            self.acks.probed();
        }
        let s = match self.window.locate(repr.seq) {
            Position::Window(s) => s,
            Position::Behind => {
                let repair = repr.kind == Some(Kind::Repair);
                if repr.flags.contains(Flags::ACK_REQ)
                    || repr.dst == self.me
                    || (repair && self.rereport_due(now))
                {
                    // The root resent what we have: our acknowledgement was lost (with a
                    // tree, a report on the way up, maybe above us: report again, even
                    // unchanged, so that a parent holding our old position hears the new).
                    self.acks.ask();
                    self.acks.rereport();
                    self.schedule(now, t);
                }
                return Err(DropReason::Stale(Seq::new(u64::from(repr.seq))));
            }
            Position::Beyond => return Err(DropReason::FarFuture(Seq::new(u64::from(repr.seq)))),
        };
        self.msgs.check_len(repr)?;
        if repr.flags.contains(Flags::ACK_REQ) {
            self.acks.ask();
        }
        let i = self.window.idx(s);
        if self.window.slot(i).state.contains(SlotState::HAVE) {
            self.schedule(now, t);
            return Err(DropReason::Duplicate(s));
        }
        if let Some(asked) = self.window.slot_mut(i).nacked.take() {
            self.nacks.sample(now.saturating_duration_since(asked));
        }
        self.window.slot_mut(i).state.remove(SlotState::PEER_ASKS);
        if repr.kind == Some(Kind::Repair) && repr.flags.contains(Flags::P2P) {
            // Relayed by a peer: it answers.
            self.peer.answered();
        }
        if s == self.window.expected() {
            // In order (the common case): straight into its message, no stop in the window.
            let hint = self.window.prefetch();
            let r = self
                .msgs
                .consume(&mut self.posts, repr, Payload::Here(payload), true, hint);
            match self.after_consume(r) {
                Ok(()) => {
                    // Its header stays in the slot (and with peer repair its payload): a peer
                    // may ask for the frame.
                    let keep = self.keeps_copy(s, repr, payload.len())
                        && payload.len() <= self.window.slot_payload();
                    self.land(i, s, repr, payload, keep);
                    self.advance();
                    self.window.accept(s);
                    self.drain_from(None);
                    self.maybe_pull();
                    self.schedule(now, t);
                    return Ok(());
                }
                // No room to take it yet: it waits in its slot like any other frame.
                Err(DropReason::NoRoom) => {}
                Err(_) => {
                    // A frame that contradicts the stream: discard it so it is asked for again.
                    self.schedule(now, t);
                    return Ok(());
                }
            }
        }
        if payload.len() > self.window.slot_payload() {
            return Err(DropReason::Protocol("payload larger than a frame slot"));
        }
        // Behind a gap: straight into its message if it can be placed there, kept in its slot
        // otherwise.
        let reach = (s - self.window.expected()) as usize * self.window.slot_payload();
        let ahead_cap = self.window.len() as usize * self.window.slot_payload();
        let hint = self.window.prefetch();
        let placed = self
            .msgs
            .place(&mut self.posts, reach, ahead_cap, repr, payload, hint);
        let copy = !placed || self.keeps_copy(s, repr, payload.len());
        let slot = self.window.slot_mut(i);
        slot.state.insert(SlotState::HAVE);
        slot.state.set(SlotState::PLACED, placed);
        self.land(i, s, repr, payload, copy);
        if let Some(from) = self.window.accept(s) {
            // Frames between the old highest and this one were lost: say so now.
            self.nacks.found(from);
        }
        self.drain_from(None);
        self.maybe_pull();
        self.schedule(now, t);
        Ok(())
    }

    /// Notes frame `s` (`repr`, `payload`) in its slot `i`, keeping its payload (`copy`) in
    /// the window or, with frames left in the link, where the link holds it.
    fn land(&mut self, i: usize, s: Seq, repr: &Repr, payload: &[u8], copy: bool) {
        let slot = self.window.slot_mut(i);
        slot.repr = *repr;
        slot.len = payload.len() as u16;
        slot.state.set(SlotState::COPY, copy);
        slot.state.remove(SlotState::LINK);
        if copy && self.link.is_on() {
            self.link.note(&mut self.window, i, s, payload);
        } else if copy {
            self.window.keep(i, payload);
        }
        // Children that asked for it while this member lacked it too get it now, unless the
        // root re-broadcast it: then they saw it too.
        let rebroadcast = repr.kind == Some(Kind::Repair) && repr.flags.contains(Flags::BROADCAST);
        let controls = &mut self.controls;
        self.peer.settle(s, rebroadcast, |asker| {
            controls.push_back(Outgoing::Relay {
                dst: Dest::Rank(asker),
                repr: relayed(repr, asker),
                payload: payload.to_vec(),
            });
        });
    }

    /// Whether frame `s` keeps a copy in its slot for fellows (see `PeerRepair::keeps_copy`).
    fn keeps_copy(&self, s: Seq, repr: &Repr, len: usize) -> bool {
        self.peer.keeps_copy(
            s,
            repr,
            len,
            self.msgs.keep(),
            self.hold.enabled(),
            self.window.slot_payload(),
        )
    }

    /// Consumes the frames waiting in order; those in the link's frames only where `link`
    /// finds them (at the end of a batch: see `frames_done`).
    fn drain_from(&mut self, link: Option<&dyn machine::Held>) {
        loop {
            let i = self.window.idx(self.window.expected());
            let slot = self.window.slot(i);
            if !slot.state.contains(SlotState::HAVE) {
                break;
            }
            let (len, repr, state) = (usize::from(slot.len), slot.repr, slot.state);
            let hint = self.window.prefetch();
            let r = if state.contains(SlotState::PLACED) {
                self.msgs
                    .consume(&mut self.posts, &repr, Payload::Placed(len), false, hint)
            } else if state.contains(SlotState::LINK) {
                let Some(link) = link else {
                    break;
                };
                if let Some(hint) = hint {
                    // The next frame waiting in the link is read next: asked for now, it
                    // arrives while this one is consumed (see `EngineConfig::prefetch`).
                    let n = self.window.idx(self.window.expected() + 1);
                    let next = self.window.slot(n);
                    if next.state.contains(SlotState::LINK | SlotState::HAVE) {
                        hint(self.link.at(n) as *const u8, usize::from(next.len));
                    }
                }
                match link.find(self.link.at(i), len) {
                    Some(bytes) => {
                        self.msgs
                            .consume(&mut self.posts, &repr, Payload::Here(bytes), true, hint)
                    }
                    // Not where it was noted (cannot happen while the link keeps what it
                    // retains): asked for again.
                    None => Err(DropReason::Protocol("frame no longer in the link")),
                }
            } else {
                let held = self.msgs.in_batch();
                let bytes = self.window.kept(i, len);
                self.msgs
                    .consume(&mut self.posts, &repr, Payload::Here(bytes), held, hint)
            };
            match self.after_consume(r) {
                Ok(()) => {
                    self.window.slot_mut(i).state.remove(SlotState::HAVE);
                    self.advance();
                }
                Err(DropReason::NoRoom) => break,
                Err(_) => {
                    // A frame that contradicts the stream: discard it so it is asked for again.
                    self.window
                        .slot_mut(i)
                        .state
                        .remove(SlotState::HAVE | SlotState::COPY | SlotState::LINK);
                    break;
                }
            }
        }
    }

    /// What follows consuming a frame: the window forgets the frames of messages it
    /// contradicted, and a message it completed is delivered.
    fn after_consume(&mut self, r: Result<Option<InMsg>, DropReason>) -> Result<(), DropReason> {
        if let Some(ids) = self.msgs.take_forgotten() {
            self.window.unplace(ids);
        }
        if let Some(m) = r? {
            self.deliver(m);
        }
        Ok(())
    }

    /// The next expected frame was consumed: progress, so NACK retries start over at their
    /// shortest interval.
    fn advance(&mut self) {
        self.window.advance();
        self.peer.forget_before(self.window.expected());
        self.acks.consumed();
        self.nacks.progress();
    }

    /// Delivers complete message `m`, taking its receive, or holds it for fellows.
    fn deliver(&mut self, m: InMsg) {
        let max = self.posts.take();
        let event = self.msgs.finish(self.root, m, max);
        // Its last frame is the one being consumed, `expected`. Held while fellows ask, and
        // behind any message held before it, whatever it is: delivery stays in order. For a
        // window's worth of frames: any request a slot copy could serve (until the slot was
        // reused) finds the message. The price is memory the application would have freed
        // sooner: up to a window's worth of bytes and the message itself (at 1% loss a bulk
        // receiver's message buffers, held and in progress, grew from about 3.4 to 7 MiB:
        // docs/benchmarks.md).
        let expected = self.window.expected();
        if self.hold.takes(self.peer.copying(expected)) {
            self.hold.push(event, expected + 1 + self.window.len());
        } else {
            self.events.push_back(event);
        }
    }

    /// Sends the pull request this member owes, if any.
    fn maybe_pull(&mut self) {
        let expected = self.window.expected();
        if let Some(pull) = self.msgs.pull_due(&self.posts, self.me, expected.low32()) {
            self.controls.push_back(Outgoing::to(self.root, pull));
            if self.tree.is_none() {
                self.acks.pulled(expected);
            }
        }
    }

    /// The root's retransmission timer fired with frames of this stream not acknowledged by
    /// this member: answer at once, saying how far it has seen (as a probe's answer), so that
    /// the root goes back over any tail this member lost.
    pub(crate) fn on_ack_poll(&mut self, now: Instant, table: &mut TimerTable) {
        self.acks.probed();
        self.acks.ask();
        self.schedule(now, &mut table.stream(self.timers));
    }

    /// The root asks its designated receiver to repeat a pull request that may have been lost.
    pub(crate) fn on_pull_poll(&mut self, msg_id: u32, designated: Rank) {
        self.msgs.on_pull_poll(msg_id, designated);
        self.maybe_pull();
    }

    pub(crate) fn take_event(&mut self) -> Option<EngineEvent> {
        self.events.pop_front()
    }

    pub(crate) fn take_control(&mut self) -> Option<Outgoing> {
        self.controls.pop_front()
    }

    // ---- acknowledgements, NACKs and the tree's reports ----

    /// After the stream changed: releases held messages, acknowledges or reports if due, and
    /// asks for or keeps waiting for what is missing.
    fn schedule(&mut self, now: Instant, t: &mut StreamTimers<'_>) {
        self.hold
            .release(now, self.window.expected(), t, &mut self.events);
        match self.tree.as_ref().map(|t| t.sent()) {
            Some(sent) if !self.acks.asked() => self.schedule_report(now, sent, t),
            _ if self.acks.due() => self.send_ack(now, t),
            _ => {}
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
    fn rereport_due(&mut self, now: Instant) -> bool {
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

    // ---- peer repair ----

    /// The fellow receiver this stream asks for lost frames (and the only one whose relayed
    /// repairs it takes).
    pub(crate) fn peer(&self) -> Option<Rank> {
        self.peer.peer()
    }

    /// Sets the fellow receiver asked first for lost frames (`None`: ask the root only).
    pub(crate) fn set_peer(&mut self, peer: Option<Rank>) {
        self.peer.set_peer(peer);
    }

    /// The payload of frame `s` of this stream, if this member still holds it: in its slot
    /// (a frame not placed, or the copy kept for peer repair), or in the buffer of a message
    /// not delivered yet, or held back for fellows. Otherwise the asking peer is told, and
    /// turns to the root.
    fn held(&self, s: Seq) -> Option<(Repr, Found<'_>)> {
        let (expected, w) = (self.window.expected(), self.window.len());
        // Frame `s + window` lands in the same slot: until it has arrived (`expected` past it),
        // the slot still holds `s` (the sequence check below confirms it).
        if s + w < expected || s >= expected + w {
            return None;
        }
        let i = self.window.idx(s);
        let slot = self.window.slot(i);
        let r = slot.repr;
        if r.kind.is_none() || r.seq != s.low32() {
            return None;
        }
        let (off, len) = (r.offset as usize, usize::from(slot.len));
        if s >= expected && !slot.state.contains(SlotState::HAVE) {
            return None;
        }
        if slot.state.contains(SlotState::COPY) {
            return Some((r, Found::Here(self.window.kept(i, len))));
        }
        if slot.state.contains(SlotState::LINK) {
            return Some((r, Found::Link(self.link.at(i), len)));
        }
        // Consumed (`s < expected`) or placed: in its message's buffer, or in the message,
        // complete, while it is held back for fellows' requests.
        let data = match self.msgs.find(r.msg_id, r.msg_len as usize) {
            Some((_, filled)) if s < expected && off + len > filled => return None,
            Some((data, _)) => data?,
            None => self.hold.find(r.msg_id, r.msg_len as usize)?,
        };
        Some((r, Found::Here(data.get(off..off + len)?)))
    }

    /// A peer (`asker`) lost the frames of `missing` and `more` (bit `k` of word `w`:
    /// `wire_base + 16·w + k`): sends it, point to point, those this member still holds, as
    /// repairs of the root's stream, at most `budget` (the outbox's room) less those served
    /// from the link and still waiting for the batch's end. A child in the acknowledgement
    /// tree is told in one answer which of the others this member lacks too and relays when
    /// they come ([`Control::PeerPending`]; it asks for them itself, and learns of them from
    /// the request if it had not seen the stream get that far); any other asker, and a child
    /// for frames this member will not get again, is told in one answer that they are not
    /// held.
    pub(crate) fn serve_peer(
        &mut self,
        now: Instant,
        table: &mut TimerTable,
        (wire_base, missing, more): (u32, u16, &[u16]),
        asker: Rank,
        budget: usize,
    ) {
        // Fellows lose frames: keep copies for the next windows' worth of frames.
        let edge = self.window.highest().max(self.window.expected());
        self.peer.on_request(edge, self.window.len());
        let base = self.window.near(wire_base);
        let child = self.tree.as_ref().is_some_and(|t| t.is_child(asker));
        // Repairs served from the link leave at the batch's end (`frames_done`): until then
        // they take room in the outbox as much as the ones sent at once.
        let budget = budget.saturating_sub(self.link.relays_waiting());
        let mut served = 0;
        let (mut unheld, mut pending) = (NackBitmap::default(), NackBitmap::default());
        let mut learned = None;
        for off in nack_offsets(missing, more) {
            let Some(s) = base.map(|b| b + u64::from(off)) else {
                unheld.set(off);
                continue;
            };
            if served >= budget {
                unheld.set(off);
                continue;
            }
            let Some((r, payload)) = self.held(s) else {
                let expected = self.window.expected();
                let coming = s >= expected
                    && s < expected + self.window.len()
                    && !self
                        .window
                        .slot(self.window.idx(s))
                        .state
                        .contains(SlotState::HAVE);
                if child && coming && self.peer.owe(s, asker) {
                    pending.set(off);
                    if let Some(from) = self.window.accept(s) {
                        // The child has seen the stream get further than this member.
                        learned.get_or_insert(from);
                    }
                } else {
                    unheld.set(off);
                }
                continue;
            };
            let repr = relayed(&r, asker);
            match payload {
                Found::Here(p) => {
                    let payload = p.to_vec();
                    self.controls.push_back(Outgoing::Relay {
                        dst: Dest::Rank(asker),
                        repr,
                        payload,
                    });
                }
                Found::Link(at, len) => self.link.relay((asker, repr, at, len)),
            }
            served += 1;
        }
        if let Some((first, more)) = pending.take() {
            self.controls
                .push_back(pending_reply(asker, self.root, wire_base, first, more));
        }
        if let Some((first, more)) = unheld.take() {
            self.controls
                .push_back(unheld_reply(asker, self.root, wire_base, first, more));
        }
        if let Some(from) = learned {
            self.nacks.found(from);
            self.schedule(now, &mut table.stream(self.timers));
        }
    }

    /// The parent (`from`) lacks the frames of `reply` (base and bitmap) too and relays each
    /// when it comes: they are asked of it again after the retry interval (if the relay was
    /// lost), never of the root on its account. Its answer shows it is alive.
    pub(crate) fn on_pending(
        &mut self,
        now: Instant,
        table: &mut TimerTable,
        wire_base: u32,
        missing: u16,
        more: &[u16],
        from: Rank,
    ) {
        if self.peer.peer() != Some(from) {
            return;
        }
        self.peer.answered();
        let Some(base) = self.window.near(wire_base) else {
            return;
        };
        let (expected, highest) = (self.window.expected(), self.window.highest());
        for off in nack_offsets(missing, more) {
            let s = base + u64::from(off);
            if s < expected || s >= highest {
                continue;
            }
            let i = self.window.idx(s);
            let slot = self.window.slot_mut(i);
            if !slot.state.contains(SlotState::HAVE) {
                // Asked of the parent again, as for the first time.
                slot.state.remove(SlotState::PEER_ASKS);
            }
        }
        self.schedule(now, &mut table.stream(self.timers));
    }

    /// The peer (`from`) does not hold the frames of `reply` (base and bitmap), and will not
    /// (a parent in the acknowledgement tree answers [`Control::PeerPending`] for frames it
    /// is getting itself): those still missing here are asked of the root now.
    pub(crate) fn on_unheld(
        &mut self,
        now: Instant,
        table: &mut TimerTable,
        wire_base: u32,
        missing: u16,
        more: &[u16],
        from: Rank,
    ) {
        if self.peer.peer() != Some(from) {
            return;
        }
        self.peer.answered();
        let Some(base) = self.window.near(wire_base) else {
            return;
        };
        let mut first = None;
        // With a tree the peer is the parent, which says so only of frames it will not get
        // again (it relays the others when they come, see `on_pending`): they are asked of
        // the root at once.
        let tree = self.tree.is_some();
        let (expected, highest) = (self.window.expected(), self.window.highest());
        for off in nack_offsets(missing, more) {
            let s = base + u64::from(off);
            if s < expected || s >= highest {
                continue;
            }
            let i = self.window.idx(s);
            let slot = self.window.slot_mut(i);
            if slot.state.contains(SlotState::HAVE) || !slot.state.contains(SlotState::PEER_ASKED) {
                continue;
            }
            if tree {
                slot.state.insert(SlotState::PEER_ASKS);
            }
            slot.nacked = None;
            first.get_or_insert(s);
        }
        if let Some(s) = first {
            self.nacks.found(s);
            self.schedule(now, &mut table.stream(self.timers));
        }
    }

    /// Delivers every held message now: the stream is going away (its root was evicted),
    /// and what was complete is still delivered.
    pub(crate) fn release_all(&mut self, table: &mut TimerTable) {
        self.hold
            .release_all(&mut table.stream(self.timers), &mut self.events);
    }

    // ---- frames left in the link ----

    /// The batch of frames ends (see `Engine::frames_done`): frames that waited in the link
    /// are consumed and fellows served from it, the observer told, and what leaves the link
    /// and is still needed copied.
    pub(crate) fn frames_done(&mut self, now: Instant, table: &mut TimerTable, end: BatchEnd<'_>) {
        let before = self.window.expected();
        if self.link.is_on() {
            self.drain_from(Some(end.held));
            for (asker, repr, at, len) in self.link.take_relays() {
                match end.held.find(at, len) {
                    Some(p) => self.controls.push_back(Outgoing::Relay {
                        dst: Dest::Rank(asker),
                        repr,
                        payload: p.to_vec(),
                    }),
                    None => {
                        let mut unheld = NackBitmap::default();
                        unheld.set(0);
                        if let Some((first, more)) = unheld.take() {
                            self.controls
                                .push_back(unheld_reply(asker, self.root, repr.seq, first, more));
                        }
                    }
                }
            }
        }
        if let Some(o) = self.msgs.observer() {
            // Where held pieces lie: the link's frames, and the window's copies.
            o.frames_done(&Memory {
                link: end.held,
                window: &self.window,
            });
        }
        if self.link.is_on() {
            self.link.leave(&mut self.window, end.leaving);
        }
        self.msgs.end_batch();
        if self.window.expected() > before {
            self.maybe_pull();
            self.schedule(now, &mut table.stream(self.timers));
        }
    }

    /// Repairs for fellows served from the link, to be made when the batch ends.
    pub(crate) fn relays_waiting(&self) -> usize {
        self.link.relays_waiting()
    }

    /// Leaves payloads in the link's frames instead of copying them into the window.
    pub(crate) fn set_in_link(&mut self, on: bool) {
        self.link.set(on, self.window.len() as usize);
    }
}
