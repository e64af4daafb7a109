//! The receiver side: one receive stream per root (the paper's receive-only DP, the RDP).
//!
//! Frames of a root's stream are accepted inside a window of `window` frames after the next
//! expected sequence; each lands in its window slot (the receive buffer), so out-of-order
//! frames are kept. In-order frames are consumed into their message: straight into the
//! message's buffer when a receive is posted for it, otherwise into the bounded pushed buffer,
//! from which they are copied out when the receive is posted. When the pushed buffer is full,
//! consumption pauses (the frames stay in the window, unacknowledged) until a receive is
//! posted: the root's buffer then paces the stream.
//!
//! Gaps are found by sequence number; a NACK carries the first missing sequence, a bitmap of
//! the 16 frames from there, and the cumulative acknowledgement. ACKs are cumulative and
//! coalesced. Messages are delivered whole, exactly once, in the root's order.
//!
//! With an acknowledgement tree ([`super::tree`]) the stream acknowledges to its parent, for
//! its whole subtree: the minimum of its own position and its children's last reports, at
//! once when that minimum crosses a multiple of `ack_every` (aligned, so that a parent
//! forwards one report per `ack_every` frames, not one per child), `ack_delay` after it last
//! moved otherwise (the end of a stream), and every `keepalive` while the subtree lags behind
//! what the member has seen (so that the root, hearing the subtree is alive, times out only
//! the laggard). NACKs still go to the root (or the peer) directly. A probe of
//! the root (a frame asking for an acknowledgement) means the root is not hearing of this
//! member's progress, say because an ancestor died: the answer goes straight to the root,
//! besides the tree's report.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::{Config, Dest, Drop, Event, Message, Outgoing, PostError};
use crate::eqa::Payloads;
use crate::machine::{self, within, BatchEnd};
use crate::wire::control::{nack_offsets, NackBitmap, NACK_REACH};
use crate::wire::{locate, Control, Flags, Kind, Position, Repr};
use crate::{Rank, Seq};

mod ack;
mod link;
mod peer;
mod reassembly;
mod report;
mod timer;

pub(crate) use peer::unheld_reply;
use peer::Held;
#[cfg(test)]
pub(super) use peer::{COPY_TAIL, PEER_HOLD_WAIT};
use reassembly::{Payload, WHOLE_RESERVE};
pub(crate) use report::TreeLink;
use timer::{Timer, TimerTable};

/// A posted receive (an entry of the receive queue).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Post {
    max_len: usize,
}

bitflags::bitflags! {
    /// What a window slot holds (one byte: the slots are counted in the memory accounting).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    struct SlotState: u8 {
        /// The frame is here and not consumed yet.
        const HAVE = 1 << 0;
        /// Its payload was written straight into its message (see `Receiver::place`), not
        /// into `data`.
        const PLACED = 1 << 1;
        /// It was asked of the peer already.
        const PEER_ASKED = 1 << 2;
        /// `data` holds its payload (a frame not placed, or the copy kept for peer repair):
        /// a peer may be served from it after its message was handed on.
        const COPY = 1 << 3;
        /// It was asked of the peer twice (the first repair was lost, or late): the next ask
        /// goes to the root.
        const PEER_ASKED_AGAIN = 1 << 4;
        /// Its payload lies in a frame the link retains (see `Engine::leave_in_link`), at
        /// `Receiver::link_at`: read from there when consumed or asked for, and copied into `data`
        /// if it is still waiting when the link gives the frame back.
        const LINK = 1 << 5;
        /// It was asked of the peer a third time (with a tree, see `Receiver::send_nacks`): the
        /// next ask goes to the root.
        const PEER_ASKED_THIRD = 1 << 6;
    }
}

#[derive(Debug)]
struct WSlot {
    state: SlotState,
    /// When this (missing) frame was last asked for.
    nacked: Option<Instant>,
    repr: Repr,
    len: u16,
}

#[derive(Debug)]
struct InMsg {
    id: u64,
    len: usize,
    filled: usize,
    /// Set when a receive is posted for it: data goes here.
    data: Option<Vec<u8>>,
    /// Bytes of it held in the pushed buffer (when not posted).
    pushed: usize,
    truncated: Option<usize>,
    designated: Rank,
    awaiting_pull: bool,
    pull_sent: bool,
}

/// The observer of a stream's bytes (see `Engine::observe`).
struct Watch(super::Observer);

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Observer")
    }
}

/// The receive stream of one root.
#[derive(Debug)]
pub struct Receiver {
    root: Rank,
    me: Rank,
    expected: Seq,
    highest: Seq,
    slots: Box<[WSlot]>,
    /// The payloads of the slots that keep a copy ([`SlotState::COPY`]); a place holds the
    /// largest frame payload accepted. Written only when a frame waits or is kept, so a
    /// stream whose frames arrive in order costs no window memory (see `eqa::Payloads`).
    slot_data: Payloads,
    cur: Option<InMsg>,
    /// Messages after `cur` (consecutive ids) begun by out-of-order frames placed into them.
    ahead: VecDeque<InMsg>,
    /// Bytes held by the buffers of `ahead` (bounded by the window's worth of frames).
    ahead_bytes: usize,
    /// Complete messages waiting for their receive, their bytes in `pushed`: at most
    /// `posts_cap` of them (the bytes alone would not bound empty messages).
    done: VecDeque<InMsg>,
    /// Complete messages held back for fellows' requests, in order (`Config::peer_hold`).
    holding: VecDeque<Held>,
    /// `expected`, and when it last moved, as the held messages' release last saw them.
    hold_seen: Seq,
    hold_moved: Option<Instant>,
    peer_hold: bool,
    pushed: Vec<u8>,
    pushed_cap: u32,
    posts: VecDeque<Post>,
    posts_cap: u32,
    /// A buffer lent by a posted receive (`Engine::post_recv_into`): the next message is
    /// received into it before anything is allocated. Boxed, the box kept once made: a stream
    /// that is never lent one costs a pointer (the receiver's size is the paper's `s_RDP`).
    #[allow(
        clippy::box_collection,
        reason = "a pointer in the receiver, not a Vec's three words"
    )]
    spare: Option<Box<Vec<u8>>>,
    auto_post: bool,
    /// The cache hint for where the next frames land: the message buffer, the slot copies
    /// (`Config::prefetch`).
    prefetch: Option<super::Prefetch>,
    observer: Option<Watch>,
    /// Messages longer than this are observed and not kept (`Engine::keep_at_most`).
    keep: usize,
    /// Frames were handed in since the last `frames_done`: the window's copies consumed now
    /// stay until then (see `Piece::held`).
    in_batch: bool,
    /// Payloads that would be copied into the window stay in the link's frames, which it
    /// retains (`Engine::leave_in_link`).
    in_link: bool,
    /// The slots whose payloads lie in the link (`SlotState::LINK`), in the order their
    /// frames came, which is the order the link gives them back (their addresses are in
    /// `link_at`).
    link_refs: VecDeque<Seq>,
    /// Per slot, with `SlotState::LINK`: the address of its payload in the link's frame
    /// (allocated when frames are left in the link, empty otherwise).
    link_at: Vec<usize>,
    /// Repairs for fellows of frames in the link, made when the batch ends (the frames are
    /// read there): to whom, the repair's header, and where its payload lies.
    link_relays: Vec<(Rank, Repr, usize, usize)>,
    next_msg: u64,
    next_start: u64,
    acked: Seq,
    unacked: usize,
    /// While the ACK timer is the quiet timer of a tree's report: when the subtree last moved. The
    /// timer is lazy: each frame moves this, not the timer, so the engine's set of timers is
    /// not touched per frame; a timer that fires before `quiet_from + ack_delay` is pushed
    /// back to it.
    quiet_from: Option<Instant>,
    ack_now: bool,
    /// The stream's timers: acknowledgement, NACK, tree report, held messages' release
    /// ([`Timer`]).
    timers: TimerTable,
    /// Frames from here on were found missing since the last NACK: ask for them now (the
    /// older gaps wait for the retry timer, so a new gap costs a scan of itself only).
    nack_from: Option<Seq>,
    nack_backoff: u32,
    /// Smoothed time from a NACK to the repair it asked for.
    repair_rtt: Option<Duration>,
    /// The fellow receiver asked first for lost frames (peer repair), if any.
    peer: Option<Rank>,
    /// With peer repair: a fellow receiver asked this member for frames lately, so frames
    /// before this sequence near the end of their message ([`COPY_TAIL`]) keep a copy in their
    /// slot until the slot is reused, and a request can still be served after the frame's
    /// message was delivered. A member nobody asks (no loss on the segment) copies nothing:
    /// each frame is copied once, into its message.
    /// The low 32 bits of that sequence (the receiver's size is the paper's `s_RDP`), compared
    /// as the wire compares sequences; meaningful once `asked`.
    copies_until: u32,
    /// A fellow receiver asked this member for frames (peer repair) at least once.
    asked: bool,
    peer_repair: bool,
    /// Frames the peer was asked for and never answered (neither repair nor "not held"), in
    /// a row: a dead or stalled peer is given up after `PEER_SILENCE_LIMIT`.
    peer_silence: u16,
    /// The peer given up for its silence, and how many more lost frames are asked of the root
    /// alone before it is asked again. A peer stalled for a moment (a busy host) answers
    /// again; given up for good, it left the root every later loss of the stream (7 466 of
    /// 14 725 lost frames, once, in the 8-receiver file test at 1% loss on a busy machine).
    /// A dead peer costs a few requests per pause, and eviction replaces it.
    /// (Small fields: the receiver's size is the paper's `s_RDP`.)
    peer_off: Option<(Rank, u16)>,
    /// How many times the next pause doubles `PEER_OFF_FIRST` (up to
    /// `PEER_OFF_MAX_DOUBLINGS`; none again once the peer answers).
    peer_off_doublings: u8,
    ack_every: usize,
    ack_delay: Duration,
    nack_retry: Duration,
    nack_gather: u64,
    nack_gather_wait: Duration,
    max_message: usize,
    pull_override: Option<(u32, Rank)>,
    probe_answer: bool,
    /// The root repaired a frame this member has: its report is sent again, even unchanged.
    rereport: bool,
    /// Where this stream reports in the acknowledgement tree (`None`: to the root directly).
    /// Boxed: most streams (groups below the tree's threshold) have none.
    tree: Option<Box<TreeLink>>,
    events: VecDeque<Event>,
    controls: VecDeque<Outgoing>,
    /// The deadline under which the engine's timer set holds this stream (the engine keeps
    /// it in step with `next_timeout`).
    pub(crate) armed: Option<Instant>,
}

impl Receiver {
    pub(crate) fn new(cfg: &Config, root: Rank) -> Receiver {
        let slots = (0..cfg.window)
            .map(|_| WSlot {
                state: SlotState::empty(),
                nacked: None,
                repr: Repr::default(),
                len: 0,
            })
            .collect();
        Receiver {
            root,
            me: cfg.rank,
            expected: Seq::new(0),
            highest: Seq::new(0),
            slots,
            slot_data: Payloads::new(cfg.window, cfg.slot_payload()),
            cur: None,
            ahead: VecDeque::new(),
            ahead_bytes: 0,
            done: VecDeque::new(),
            holding: VecDeque::new(),
            hold_seen: Seq::new(0),
            hold_moved: None,
            peer_hold: cfg.peer_hold,
            pushed: Vec::with_capacity(cfg.pushed_buffer),
            pushed_cap: u32::try_from(cfg.pushed_buffer).unwrap_or(u32::MAX),
            posts: VecDeque::with_capacity(cfg.recv_queue),
            posts_cap: u32::try_from(cfg.recv_queue).unwrap_or(u32::MAX),
            spare: None,
            auto_post: cfg.auto_post,
            prefetch: cfg.prefetch,
            observer: None,
            keep: usize::MAX,
            in_batch: false,
            in_link: false,
            link_refs: VecDeque::new(),
            link_at: Vec::new(),
            link_relays: Vec::new(),
            next_msg: 0,
            next_start: 0,
            acked: Seq::new(0),
            unacked: 0,
            quiet_from: None,
            ack_now: false,
            timers: TimerTable::default(),
            nack_from: None,
            nack_backoff: 0,
            repair_rtt: None,
            peer: None,
            copies_until: 0,
            asked: false,
            peer_repair: cfg.peer_repair,
            peer_silence: 0,
            peer_off: None,
            peer_off_doublings: 0,
            ack_every: cfg.ack_every,
            ack_delay: cfg.ack_delay,
            tree: None,
            nack_retry: cfg.nack_retry,
            nack_gather: cfg.nack_gather as u64,
            nack_gather_wait: cfg.nack_gather_wait,
            max_message: cfg.max_message,
            pull_override: None,
            probe_answer: false,
            rereport: false,
            events: VecDeque::new(),
            controls: VecDeque::new(),
            armed: None,
        }
    }

    /// Next sequence this member needs from the root.
    pub fn expected(&self) -> Seq {
        self.expected
    }
    /// Messages delivered so far (the id of the next one).
    pub fn next_msg(&self) -> u64 {
        self.next_msg
    }
    /// Bytes held in the pushed buffer.
    pub fn pushed_bytes(&self) -> usize {
        self.pushed.len()
    }
    /// Complete messages held for a receive not posted yet.
    pub fn held_messages(&self) -> usize {
        self.done.len()
    }
    /// Receives posted and not yet taken.
    pub fn posted(&self) -> usize {
        self.posts.len()
    }
    /// Heap bytes this stream owns (window slots, pushed buffer, receive queue, the messages
    /// held for receives).
    pub fn heap_bytes(&self) -> usize {
        self.slots.len() * (std::mem::size_of::<WSlot>() + self.slot_payload())
            + self.link_at.len() * std::mem::size_of::<usize>()
            + self.pushed.capacity()
            + self.posts.capacity() * std::mem::size_of::<Post>()
            + (self.done.capacity() + self.ahead.capacity()) * std::mem::size_of::<InMsg>()
            + self.spare.as_ref().map_or(0, |v| v.capacity())
            + self
                .holding
                .iter()
                .map(|h| match &h.event {
                    Event::Delivered(m) => m.data.capacity(),
                    _ => 0,
                })
                .sum::<usize>()
            + self.tree.as_ref().map_or(0, |t| {
                std::mem::size_of::<TreeLink>()
                    + t.children.capacity() * std::mem::size_of::<(Rank, Seq, Rank)>()
            })
    }

    fn window(&self) -> u64 {
        self.slots.len() as u64
    }

    /// Payload bytes a window slot holds (the largest frame payload accepted).
    fn slot_payload(&self) -> usize {
        self.slot_data.cap()
    }

    /// Copies `payload` into slot `i`'s place in the block.
    fn keep(&mut self, i: usize, payload: &[u8]) {
        self.slot_data.store(i, payload);
        if let Some(hint) = self.prefetch {
            // Frames are kept in slot order: hint the place of the frame after the next (see
            // `Config::prefetch`), as for the message buffer.
            let ahead = (i + 2) % self.slots.len();
            hint(self.slot_data.place(ahead), payload.len());
        }
    }

    /// The copy slot `i` keeps, `len` bytes.
    fn kept(&self, i: usize, len: usize) -> &[u8] {
        self.slot_data.get(i, len)
    }

    fn idx(&self, s: Seq) -> usize {
        s.ring_index(self.slots.len())
    }

    pub(crate) fn set_observer(&mut self, observer: super::Observer) {
        self.observer = Some(Watch(observer));
    }

    pub(crate) fn keep_at_most(&mut self, keep: usize) {
        self.keep = keep;
    }

    /// Posts a receive of up to `max_len` bytes; `buf`'s capacity, if any, receives a
    /// message (see `take_spare`).
    pub(crate) fn post(&mut self, max_len: usize, buf: Vec<u8>) -> Result<(), PostError> {
        if self.posts.len() >= self.posts_cap as usize {
            return Err(PostError::QueueFull(self.posts_cap as usize));
        }
        self.posts.push_back(Post { max_len });
        if buf.capacity() > 0 {
            match self.spare.as_deref_mut() {
                Some(spare) if spare.capacity() == 0 => *spare = buf,
                Some(_) => {}
                None => self.spare = Some(Box::new(buf)),
            }
        }
        Ok(())
    }

    /// An empty buffer for a message, with room for `reserve` bytes: the one a posted receive
    /// lent if there is one (allocating only if it is smaller), else a new one.
    pub(super) fn take_spare(&mut self, reserve: usize) -> Vec<u8> {
        let mut v = self
            .spare
            .as_deref_mut()
            .map(std::mem::take)
            .unwrap_or_default();
        v.clear();
        v.reserve_exact(reserve);
        v
    }

    fn cur_posted(&self) -> bool {
        self.post_for(0).is_some()
    }

    /// The largest length the receive posted for the `k`th message from the one in progress
    /// (0: that one, or the next to begin) accepts, if one is posted. Receives are taken in
    /// message order, and none is taken while a message delivered unposted waits for one.
    fn post_for(&self, k: usize) -> Option<usize> {
        if self.auto_post {
            return Some(usize::MAX);
        }
        if !self.done.is_empty() {
            return None;
        }
        self.posts.get(k).map(|p| p.max_len)
    }

    /// Applies posted receives to messages held in the pushed buffer and resumes consumption.
    pub(crate) fn progress(&mut self, now: Instant) {
        let before = self.expected;
        // Complete messages waiting for a receive.
        while !self.done.is_empty() && (self.auto_post || !self.posts.is_empty()) {
            let mut m = self.done.pop_front().expect("not empty");
            let mut bytes = self.take_spare(m.pushed);
            bytes.extend(self.pushed.drain(..m.pushed));
            m.data = Some(bytes);
            m.pushed = 0;
            self.deliver(m);
        }
        // The message in progress becomes posted: copy its pushed part out.
        let unposted = self
            .cur
            .as_ref()
            .filter(|m| m.data.is_none())
            .map(|m| m.len);
        if let Some(len) = unposted.filter(|_| self.cur_posted()) {
            let max = self
                .posts
                .front()
                .map_or(usize::MAX, |p| p.max_len)
                .min(self.keep);
            let mut v = self.take_spare(len.min(WHOLE_RESERVE));
            let m = self
                .cur
                .as_mut()
                .expect("unposted is the message in progress");
            v.extend(self.pushed.drain(..m.pushed));
            m.pushed = 0;
            if m.len > max {
                m.truncated = Some(max);
                v = Vec::new();
            }
            m.data = Some(v);
        }
        self.drain();
        if self.expected > before {
            // The root may be backing off: tell it at once.
            self.ack_now = true;
        }
        self.maybe_pull();
        self.schedule(now);
    }

    /// Handles a data or repair frame of this root's stream.
    pub(crate) fn on_data(
        &mut self,
        now: Instant,
        repr: &Repr,
        payload: &[u8],
    ) -> Result<(), Drop> {
        self.in_batch = true;
        if repr.flags.contains(Flags::ACK_REQ) {
            self.probe_answer = true;
        }
        let s = match locate(self.expected, repr.seq, self.window() as u32) {
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
                    self.ack_now = true;
                    self.rereport = true;
                    self.schedule(now);
                }
                return Err(Drop::Stale(Seq::new(u64::from(repr.seq))));
            }
            Position::Beyond => return Err(Drop::FarFuture(Seq::new(u64::from(repr.seq)))),
        };
        if repr.msg_len as usize > self.max_message {
            return Err(Drop::TooLong {
                len: repr.msg_len,
                max: self.max_message,
            });
        }
        if repr.flags.contains(Flags::ACK_REQ) {
            self.ack_now = true;
        }
        let i = self.idx(s);
        if self.slots[i].state.contains(SlotState::HAVE) {
            self.schedule(now);
            return Err(Drop::Duplicate(s));
        }
        if let Some(t) = self.slots[i].nacked.take() {
            self.repair_sample(now.saturating_duration_since(t));
        }
        self.slots[i].state.remove(
            SlotState::PEER_ASKED | SlotState::PEER_ASKED_AGAIN | SlotState::PEER_ASKED_THIRD,
        );
        if repr.kind == Some(Kind::Repair) && repr.flags.contains(Flags::P2P) {
            // Relayed by a peer: it answers.
            self.peer_answered();
        }
        if s == self.expected {
            // In order (the common case): straight into its message, no stop in the window.
            match self.consume(repr, Payload::Here(payload), true) {
                Ok(()) => {
                    // Its header stays in the slot (and with peer repair its payload): a peer
                    // may ask for the frame.
                    let keep = self.keeps_copy(s, repr, payload.len())
                        && payload.len() <= self.slot_payload();
                    let slot = &mut self.slots[i];
                    slot.repr = *repr;
                    slot.len = payload.len() as u16;
                    slot.state.set(SlotState::COPY, keep);
                    slot.state.remove(SlotState::LINK);
                    if keep && self.in_link {
                        self.leave_in_link(i, s, payload);
                    } else if keep {
                        self.keep(i, payload);
                    }
                    self.advance();
                    self.highest = self.highest.max(s + 1);
                    self.drain();
                    self.maybe_pull();
                    self.schedule(now);
                    return Ok(());
                }
                // No room to take it yet: it waits in its slot like any other frame.
                Err(Drop::NoRoom) => {}
                Err(_) => {
                    // A frame that contradicts the stream: discard it so it is asked for again.
                    self.schedule(now);
                    return Ok(());
                }
            }
        }
        if payload.len() > self.slot_payload() {
            return Err(Drop::Protocol("payload larger than a frame slot"));
        }
        let placed = self.place(s, repr, payload);
        let copy = !placed || self.keeps_copy(s, repr, payload.len());
        let slot = &mut self.slots[i];
        slot.state.insert(SlotState::HAVE);
        slot.state.set(SlotState::PLACED, placed);
        slot.repr = *repr;
        slot.len = payload.len() as u16;
        slot.state.set(SlotState::COPY, copy);
        slot.state.remove(SlotState::LINK);
        if copy && self.in_link {
            self.leave_in_link(i, s, payload);
        } else if copy {
            self.keep(i, payload);
        }
        if s > self.highest {
            // Frames between the old highest and this one were lost: say so now.
            self.nack_from = Some(self.nack_from.map_or(self.highest, |f| f.min(self.highest)));
        }
        self.highest = self.highest.max(s + 1);
        self.drain();
        self.maybe_pull();
        self.schedule(now);
        Ok(())
    }

    /// The root's retransmission timer fired with frames of this stream not acknowledged by
    /// this member: answer at once, saying how far it has seen (as a probe's answer), so that
    /// the root goes back over any tail this member lost.
    pub(crate) fn on_ack_poll(&mut self, now: Instant) {
        self.probe_answer = true;
        self.ack_now = true;
        self.schedule(now);
    }

    /// The root asks its designated receiver to repeat a pull request that may have been lost.
    pub(crate) fn on_pull_poll(&mut self, msg_id: u32, designated: Rank) {
        self.pull_override = Some((msg_id, designated));
        if let Some(m) = self.cur.as_mut() {
            if m.id as u32 == msg_id {
                m.designated = designated;
                m.pull_sent = false;
            }
        }
        self.maybe_pull();
    }

    pub(crate) fn take_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    pub(crate) fn take_control(&mut self) -> Option<Outgoing> {
        self.controls.pop_front()
    }
}
