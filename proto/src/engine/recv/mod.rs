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
//! ([`super::timer`]): every call that may arm one takes the table. Its own methods are in
//! three files: frames in and delivery here, its feedback to the root in [`feedback`], its
//! part in peer repair in [`repair`].
//!
//! With an acknowledgement tree ([`super::tree`]) the stream acknowledges to its parent, for
//! its whole subtree (see [`report`]). NACKs still go to the root (or the peer) directly. A
//! probe of the root (a frame asking for an acknowledgement) means the root is not hearing of
//! this member's progress, say because an ancestor died: the answer goes straight to the
//! root, besides the tree's report.

use std::collections::VecDeque;
use std::time::Instant;

use crate::machine::{self, BatchEnd};
use crate::wire::control::NackBitmap;
use crate::wire::{Flags, Kind, Position, Repr};
use crate::{Rank, Seq};

use super::timer::{StreamPlace, TimerTable};
use super::{Dest, DropReason, EngineConfig, EngineEvent, Observer, Outgoing, PostError, Prefetch};

mod ack;
mod feedback;
mod hold;
mod link;
mod nack;
mod peer;
mod posts;
mod reassembly;
mod repair;
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
        self.make_room();
    }

    /// Makes the room the stream may need: its pushed buffer and its window's places (see
    /// `Engine::reserve_queues`).
    pub(crate) fn make_room(&mut self) {
        self.msgs.make_room();
        self.window.make_places();
    }

    /// Hints the stream's state and the slot its next frame lands in (see
    /// `Machine::prefetch`).
    pub(crate) fn prefetch(&self, hint: Prefetch) {
        hint(std::ptr::from_ref(self).cast(), std::mem::size_of_val(self));
        self.window.prefetch_next(hint);
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
        // Behind a gap: left where the link holds it, if frames are left in the link (consumed
        // from there once the gap fills, copied once as ever, and the message is not begun
        // ahead of its turn); else straight into its message if it can be placed there, kept
        // in its slot otherwise.
        let placed = !self.link.is_on() && {
            let reach = (s - self.window.expected()) as usize * self.window.slot_payload();
            let ahead_cap = self.window.len() as usize * self.window.slot_payload();
            let hint = self.window.prefetch();
            self.msgs
                .place(&mut self.posts, reach, ahead_cap, repr, payload, hint)
        };
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
        let deferred = self.msgs.take_deferred_plan();
        if self.window.expected() > before || deferred {
            self.maybe_pull();
            self.schedule(now, &mut table.stream(self.timers));
        }
    }

    /// Where the payload of the oldest frame this stream left in the link lies, if any: the
    /// end of a batch that gives it back is the first at which the stream has frames leaving.
    pub(crate) fn link_front(&self) -> Option<usize> {
        self.link.front()
    }

    /// Appends where this stream's payloads left in the link lie, its stale notes forgotten
    /// (see `InLink::refs`).
    pub(crate) fn link_refs(&mut self, out: &mut Vec<usize>) {
        if self.link.is_on() {
            self.link.refs(&self.window, out);
        }
    }

    /// Repairs for fellows served from the link, to be made when the batch ends.
    pub(crate) fn relays_waiting(&self) -> usize {
        self.link.relays_waiting()
    }

    /// Leaves payloads in the link's frames instead of copying them into the window; with
    /// `copy_consumed`, the consumed ones kept for fellows are copied when the link gives
    /// them back (see `InLink::leave`).
    pub(crate) fn set_in_link(&mut self, on: bool, copy_consumed: bool) {
        self.link.set(on, self.window.len() as usize);
        self.window.set_sparse(on && copy_consumed);
    }
}
