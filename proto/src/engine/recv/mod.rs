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
use crate::eqa::{Payloads, Rank, Seq};
use crate::machine::{self, within, BatchEnd};
use crate::wire::control::{nack_offsets, NackBitmap, NACK_REACH};
use crate::wire::{locate, Control, Flags, Kind, Position, Repr};

/// Unanswered peer requests in a row after which a receiver stops asking its peer, for a
/// while (see `Receiver::peer_off`).
const PEER_SILENCE_LIMIT: u16 = 16;

/// Lost frames a receiver asks of the root alone after giving up its peer, before it asks the
/// peer again: the first pause; it doubles, up to 16 times this, each time the peer is given
/// up again without having answered since. Counted in requests, not frames or time, so that a
/// dead peer costs at most `PEER_SILENCE_LIMIT` requests per pause, however lossy the segment.
const PEER_OFF_FIRST: u16 = 128;
/// The longest pause: `PEER_OFF_FIRST` doubled this many times.
const PEER_OFF_MAX_DOUBLINGS: u8 = 4;

/// Windows' worth of frames a member keeps copies of after a fellow receiver asked it for
/// frames (peer repair). Loss that makes one fellow ask keeps copies on for every later frame
/// while it lasts; a segment without loss costs no second copy.
const COPY_SPAN: u64 = 4;

/// Frames from the end of its message within which a frame keeps its copy (while copies are
/// on, see [`COPY_SPAN`]). A frame further from its message's end is still in the message's
/// buffer when a fellow's request for it arrives: the fellow asks once the frame after it has
/// come, within a few of its turns (a turn is a millisecond's doze, about 85 full frames at
/// 1 Gbit/s), and the message is delivered only when its last frame has come, at least this
/// many frames later (3 ms at 1 Gbit/s). A later request finds nothing and goes to the root.
/// Why: a copy of every frame was a second copy of the whole stream on every receiver once
/// the segment lost frames (a megabyte message is about 720 frames: now its last 256 only).
/// A window no wider than this keeps every frame it can be asked for, as before.
/// With `Config::peer_hold` nothing is copied: the message itself is held back a window's
/// worth of frames after its end (see [`Held`]), which serves every frame of it, not its
/// tail only.
pub(super) const COPY_TAIL: usize = 256;

/// With `Config::peer_hold`: how long a completed message is still held for fellows'
/// requests once its stream stopped moving (the end of a transfer, a pause of the root's
/// input). A fellow asks within its gathering wait and a few of its turns of a millisecond.
pub(super) const PEER_HOLD_WAIT: Duration = Duration::from_millis(5);

/// A message complete but held back for fellows' requests (see `Config::peer_hold`): its
/// event, delivered once the stream reached `until`, or once the stream stopped moving for
/// [`PEER_HOLD_WAIT`].
#[derive(Debug)]
struct Held {
    event: Event,
    until: Seq,
}

/// This stream's place in the acknowledgement tree of its root.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// When the last report is sent again, if no newer one went first.
    refresh_at: Option<Instant>,
    /// How long after a report it is sent again.
    refresh_after: Duration,
    /// While the subtree lags behind what this member has seen, how often its position is
    /// reported again, moved or not (below the root's retransmission timeout).
    keepalive: Duration,
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
            children: children.into_iter().map(|c| (c, 0, c)).collect(),
            view,
            sent: 0,
            refresh_at: None,
            refresh_after,
            keepalive,
        }
    }
}

/// The 64-bit position of `wire`, a position reported by a fellow receiver, which may be
/// ahead of or behind `reference` by up to 2^31 (checked, so no value overflows).
fn near(reference: Seq, wire: u32) -> Option<Seq> {
    let delta = wire.wrapping_sub(reference as u32) as i32;
    reference.checked_add_signed(i64::from(delta))
}

/// Where the payload of a frame being consumed is.
#[derive(Clone, Copy)]
enum Payload<'a> {
    /// These bytes.
    Here(&'a [u8]),
    /// Already in its message's buffer at its offset (see `Receiver::place`); this many bytes.
    Placed(usize),
}

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
    done: VecDeque<InMsg>,
    /// Complete messages held back for fellows' requests, in order (`Config::peer_hold`).
    holding: VecDeque<Held>,
    /// `expected`, and when it last moved, as the held messages' release last saw them.
    hold_seen: Seq,
    hold_moved: Option<Instant>,
    /// While messages are held: when their timer fires. Lazy, so that the engine's timers
    /// are not touched per frame: [`PEER_HOLD_WAIT`] after the stream moved when it was
    /// armed, pushed back when it fires if the stream moved since.
    hold_timer: Option<Instant>,
    peer_hold: bool,
    pushed: Vec<u8>,
    pushed_cap: usize,
    posts: VecDeque<Post>,
    posts_cap: usize,
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
    /// When the next acknowledgement (or, with a tree, report) is due, if one is.
    ack_at: Option<Instant>,
    /// While `ack_at` is the quiet timer of a tree's report: when the subtree last moved. The
    /// timer is lazy: each frame moves this, not `ack_at`, so the engine's set of timers is
    /// not touched per frame; a timer that fires before `quiet_from + ack_delay` is pushed
    /// back to it.
    quiet_from: Option<Instant>,
    ack_now: bool,
    nack_at: Option<Instant>,
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
            expected: 0,
            highest: 0,
            slots,
            slot_data: Payloads::new(cfg.window, cfg.slot_payload()),
            cur: None,
            ahead: VecDeque::new(),
            ahead_bytes: 0,
            done: VecDeque::new(),
            holding: VecDeque::new(),
            hold_seen: 0,
            hold_moved: None,
            hold_timer: None,
            peer_hold: cfg.peer_hold,
            pushed: Vec::with_capacity(cfg.pushed_buffer),
            pushed_cap: cfg.pushed_buffer,
            posts: VecDeque::with_capacity(cfg.recv_queue),
            posts_cap: cfg.recv_queue,
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
            acked: 0,
            unacked: 0,
            ack_at: None,
            quiet_from: None,
            ack_now: false,
            nack_at: None,
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
    /// Heap bytes this stream owns (window slots, pushed buffer, receive queue).
    pub fn heap_bytes(&self) -> usize {
        self.slots.len() * (std::mem::size_of::<WSlot>() + self.slot_payload())
            + self.link_at.len() * std::mem::size_of::<usize>()
            + self.pushed.capacity()
            + self.posts.capacity() * std::mem::size_of::<Post>()
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

    /// The fellow receiver this stream asks for lost frames (and the only one whose relayed
    /// repairs it takes).
    pub(crate) fn peer(&self) -> Option<Rank> {
        self.peer
    }

    /// Whether frame `s` (`repr`, with a payload of `len` bytes) keeps a copy in its slot after
    /// it was placed: copies are on (see `copies_until`) and it is among the last
    /// [`COPY_TAIL`] frames of its message. A frame of a message longer than the keep limit
    /// (`Engine::keep_at_most`) has no message buffer to be served from: it keeps a copy once
    /// any fellow ever asked. (Kept only while copies are on, `copies_until`, the fellows of
    /// receivers keeping no messages turned to the root for up to 9400 of 14700 lost frames
    /// on the 1 Gbit/s test-bed at 1% loss, against at most 900 when served from messages.
    /// Kept once asked: at most 94, in 5 runs.)
    fn keeps_copy(&self, s: Seq, repr: &Repr, len: usize) -> bool {
        if repr.msg_len as usize > self.keep {
            return self.asked;
        }
        // Bytes of its message after this frame.
        let after = || (repr.msg_len as usize).saturating_sub(repr.offset as usize + len);
        !self.peer_hold && self.copying(s) && after() < COPY_TAIL * self.slot_payload()
    }

    /// Whether frame `s` comes while fellows ask this member for frames (see
    /// `copies_until`).
    fn copying(&self, s: Seq) -> bool {
        self.asked && (self.copies_until.wrapping_sub(s as u32) as i32) > 0
    }

    /// Sets the fellow receiver asked first for lost frames (`None`: ask the root only).
    pub(crate) fn set_peer(&mut self, peer: Option<Rank>) {
        self.peer = peer;
        self.peer_silence = 0;
        self.peer_off = None;
        self.peer_off_doublings = 0;
    }

    /// The peer answered: its silence is over, and so is any back-off.
    fn peer_answered(&mut self) {
        self.peer_silence = 0;
        self.peer_off_doublings = 0;
    }

    /// The payload of frame `s` of this stream, if this member still holds it: in its slot
    /// (a frame not placed, or the copy kept for peer repair), or in the buffer of a message
    /// not delivered yet. Otherwise the asking peer is told, and turns to the root.
    fn held(&self, s: Seq) -> Option<(Repr, Found<'_>)> {
        // Frame `s + window` lands in the same slot: until it has arrived (`expected` past it),
        // the slot still holds `s` (the sequence check below confirms it).
        if s + self.window() < self.expected || s >= self.expected + self.window() {
            return None;
        }
        let slot = &self.slots[self.idx(s)];
        let r = slot.repr;
        if r.kind.is_none() || r.seq != s as u32 {
            return None;
        }
        let (off, len) = (r.offset as usize, usize::from(slot.len));
        if s >= self.expected && !slot.state.contains(SlotState::HAVE) {
            return None;
        }
        if slot.state.contains(SlotState::COPY) {
            return Some((r, Found::Here(self.kept(self.idx(s), len))));
        }
        if slot.state.contains(SlotState::LINK) {
            return Some((r, Found::Link(self.link_at[self.idx(s)], len)));
        }
        // Consumed (`s < expected`) or placed: in its message's buffer, or in the message,
        // complete, while it is held back for fellows' requests.
        let same = |id: u64, l: usize| id as u32 == r.msg_id && l == r.msg_len as usize;
        let data = match self
            .cur
            .iter()
            .chain(self.ahead.iter())
            .find(|m| same(m.id, m.len))
        {
            Some(m) if s < self.expected && off + len > m.filled => return None,
            Some(m) => m.data.as_ref()?,
            None => self.holding.iter().find_map(|h| match &h.event {
                Event::Delivered(m) if same(m.msg_id, m.data.len()) => Some(&m.data),
                _ => None,
            })?,
        };
        Some((r, Found::Here(data.get(off..off + len)?)))
    }

    /// A peer (`asker`) lost the frames of `missing` and `more` (bit `k` of word `w`:
    /// `wire_base + 16·w + k`): sends it, point to point, those this member still holds, as
    /// repairs of the root's stream, at most `budget`; the others it is told are not held, in
    /// one answer.
    pub(crate) fn serve_peer(
        &mut self,
        wire_base: u32,
        missing: u16,
        more: &[u16],
        asker: Rank,
        budget: usize,
    ) {
        if self.peer_repair {
            // Fellows lose frames: keep copies for the next windows' worth of frames.
            let until = self.highest.max(self.expected) + COPY_SPAN * self.window();
            self.copies_until = until as u32;
            self.asked = true;
        }
        let base = self.near(wire_base);
        let mut served = 0;
        let mut unheld = NackBitmap::default();
        for off in nack_offsets(missing, more) {
            let held = match base {
                Some(b) if served < budget => self.held(b + u64::from(off)),
                _ => None,
            };
            let Some((r, payload)) = held else {
                unheld.set(off);
                continue;
            };
            let mut repr = r;
            repr.kind = Some(Kind::Repair);
            repr.dst = asker;
            repr.flags.remove(Flags::BROADCAST | Flags::ACK_REQ);
            repr.flags |= Flags::P2P;
            match payload {
                Found::Here(p) => {
                    let payload = p.to_vec();
                    self.controls.push_back(Outgoing::Relay {
                        dst: Dest::Rank(asker),
                        repr,
                        payload,
                    });
                }
                Found::Link(at, len) => self.link_relays.push((asker, repr, at, len)),
            }
            served += 1;
        }
        if let Some((first, more)) = unheld.take() {
            self.controls
                .push_back(unheld_reply(asker, self.root, wire_base, first, more));
        }
    }

    /// The stream position of a sequence number a peer names in a repair request: within a
    /// window of the next expected one, either side; `None` otherwise.
    fn near(&self, wire: u32) -> Option<Seq> {
        let w = self.window() as u32;
        match locate(self.expected.saturating_sub(u64::from(w)), wire, 2 * w) {
            Position::Window(s) => Some(s),
            _ => None,
        }
    }

    /// The peer (`from`) does not hold the frames of `reply` (base and bitmap): those still
    /// missing here are asked of the root now.
    pub(crate) fn on_unheld(
        &mut self,
        now: Instant,
        wire_base: u32,
        missing: u16,
        more: &[u16],
        from: Rank,
    ) {
        if self.peer != Some(from) {
            return;
        }
        self.peer_answered();
        let Some(base) = self.near(wire_base) else {
            return;
        };
        let mut first = None;
        for off in nack_offsets(missing, more) {
            let s = base + u64::from(off);
            if s < self.expected || s >= self.highest {
                continue;
            }
            let i = self.idx(s);
            let slot = &mut self.slots[i];
            if !slot.state.contains(SlotState::HAVE) && slot.state.contains(SlotState::PEER_ASKED) {
                slot.nacked = None;
                first.get_or_insert(s);
            }
        }
        if let Some(s) = first {
            self.nack_from = Some(self.nack_from.map_or(s, |f| f.min(s)));
            self.schedule(now);
        }
    }
    fn idx(&self, s: Seq) -> usize {
        (s % self.window()) as usize
    }

    pub(crate) fn set_observer(&mut self, observer: super::Observer) {
        self.observer = Some(Watch(observer));
    }

    pub(crate) fn keep_at_most(&mut self, keep: usize) {
        self.keep = keep;
    }

    pub(crate) fn frames_done(&mut self, now: Instant, end: BatchEnd<'_>) {
        let before = self.expected;
        if self.in_link {
            // Frames that waited in the link are consumed now, and fellows served from it.
            self.drain_from(Some(end.held));
            for (asker, repr, at, len) in std::mem::take(&mut self.link_relays) {
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
        if let Some(Watch(o)) = self.observer.as_mut() {
            // Where held pieces lie: the link's frames, and the window's copies.
            o.frames_done(&Memory {
                link: end.held,
                window: self.slot_data.all(),
            });
        }
        if self.in_link {
            self.leave(end.leaving);
        }
        self.in_batch = false;
        if self.expected > before {
            self.maybe_pull();
            self.schedule(now);
        }
    }

    /// The link gives back the frames `leaving` finds: a payload of one still waiting is
    /// copied into the window now; one consumed is forgotten (a fellow asking for it later
    /// is told it is not held, and asks the root).
    fn leave(&mut self, leaving: &dyn machine::Held) {
        while let Some(&s) = self.link_refs.front() {
            let i = self.idx(s);
            let slot = &self.slots[i];
            let at = self.link_at[i];
            let live = slot.state.contains(SlotState::LINK) && slot.repr.seq == s as u32;
            if live {
                let len = usize::from(slot.len);
                let Some(bytes) = leaving.find(at, len) else {
                    // Still retained, and so is every frame after it.
                    break;
                };
                let waiting = slot.state.contains(SlotState::HAVE);
                if waiting {
                    self.keep(i, bytes);
                }
                let slot = &mut self.slots[i];
                slot.state.remove(SlotState::LINK);
                slot.state.set(SlotState::COPY, waiting);
            }
            self.link_refs.pop_front();
        }
    }

    /// Notes that slot `i`'s payload, consumed or waiting, stays in the link's frame, at
    /// `payload`.
    fn leave_in_link(&mut self, i: usize, s: Seq, payload: &[u8]) {
        let at = payload.as_ptr() as usize;
        let slot = &mut self.slots[i];
        slot.state.remove(SlotState::COPY);
        slot.state.insert(SlotState::LINK);
        self.link_at[i] = at;
        self.link_refs.push_back(s);
    }

    pub(crate) fn set_in_link(&mut self, on: bool) {
        self.in_link = on;
        self.link_at = if on {
            vec![0; self.slots.len()]
        } else {
            Vec::new()
        };
    }

    pub(crate) fn post(&mut self, max_len: usize) -> Result<(), PostError> {
        if self.posts.len() >= self.posts_cap {
            return Err(PostError::QueueFull(self.posts_cap));
        }
        self.posts.push_back(Post { max_len });
        Ok(())
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
            let bytes: Vec<u8> = self.pushed.drain(..m.pushed).collect();
            m.data = Some(bytes);
            m.pushed = 0;
            self.deliver(m);
        }
        // The message in progress becomes posted: copy its pushed part out.
        if self.cur_posted() {
            if let Some(m) = self.cur.as_mut() {
                if m.data.is_none() {
                    let max = self
                        .posts
                        .front()
                        .map_or(usize::MAX, |p| p.max_len)
                        .min(self.keep);
                    let mut v = Vec::with_capacity(m.len.min(WHOLE_RESERVE));
                    v.extend(self.pushed.drain(..m.pushed));
                    m.pushed = 0;
                    if m.len > max {
                        m.truncated = Some(max);
                        v = Vec::new();
                    }
                    m.data = Some(v);
                }
            }
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
                    || (repair && self.tree.is_some())
                {
                    // The root resent what we have: our acknowledgement was lost (with a
                    // tree, a report on the way up, maybe above us: report again, even
                    // unchanged, so that a parent holding our old position hears the new).
                    self.ack_now = true;
                    self.rereport = true;
                    self.schedule(now);
                }
                return Err(Drop::Stale(u64::from(repr.seq)));
            }
            Position::Beyond => return Err(Drop::FarFuture(u64::from(repr.seq))),
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
        self.slots[i]
            .state
            .remove(SlotState::PEER_ASKED | SlotState::PEER_ASKED_AGAIN);
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

    fn drain(&mut self) {
        self.drain_from(None)
    }

    /// Consumes the frames waiting in order; those in the link's frames only where `link`
    /// finds them (at the end of a batch: see `frames_done`).
    fn drain_from(&mut self, link: Option<&dyn machine::Held>) {
        loop {
            let i = self.idx(self.expected);
            if !self.slots[i].state.contains(SlotState::HAVE) {
                break;
            }
            let len = usize::from(self.slots[i].len);
            let repr = self.slots[i].repr;
            let r = if self.slots[i].state.contains(SlotState::PLACED) {
                self.consume(&repr, Payload::Placed(len), false)
            } else if self.slots[i].state.contains(SlotState::LINK) {
                let Some(link) = link else {
                    break;
                };
                if let Some(hint) = self.prefetch {
                    // The next frame waiting in the link is read next: asked for now, it
                    // arrives while this one is consumed (see `Config::prefetch`).
                    let n = self.idx(self.expected + 1);
                    let next = &self.slots[n];
                    if next.state.contains(SlotState::LINK | SlotState::HAVE) {
                        hint(self.link_at[n] as *const u8, usize::from(next.len));
                    }
                }
                match link.find(self.link_at[i], len) {
                    Some(bytes) => self.consume(&repr, Payload::Here(bytes), true),
                    // Not where it was noted (cannot happen while the link keeps what it
                    // retains): asked for again.
                    None => Err(Drop::Protocol("frame no longer in the link")),
                }
            } else {
                // Lend the block out for the call (a pointer swap, not a copy; `consume`
                // never looks at the window's payloads).
                let data = std::mem::take(&mut self.slot_data);
                let r = self.consume(&repr, Payload::Here(data.get(i, len)), self.in_batch);
                self.slot_data = data;
                r
            };
            match r {
                Ok(()) => {
                    self.slots[i].state.remove(SlotState::HAVE);
                    self.advance();
                }
                Err(Drop::NoRoom) => break,
                Err(_) => {
                    // A frame that contradicts the stream: discard it so it is asked for again.
                    self.slots[i]
                        .state
                        .remove(SlotState::HAVE | SlotState::COPY | SlotState::LINK);
                    break;
                }
            }
        }
    }

    /// The next expected frame was consumed: progress, so NACK retries start over at their
    /// shortest interval.
    fn advance(&mut self) {
        self.expected += 1;
        self.unacked += 1;
        self.nack_backoff = 0;
    }

    /// A repair arrived `rtt` after it was asked for.
    fn repair_sample(&mut self, rtt: Duration) {
        self.repair_rtt = Some(match self.repair_rtt {
            None => rtt,
            Some(s) => (s * 7 + rtt) / 8,
        });
    }

    /// How long a NACKed frame is given to arrive before it is asked for again: the configured
    /// retry, or one and a half repair round trips when those are longer (a busy root, or
    /// repairs queued behind data in the switch), doubled per retry without progress.
    fn nack_interval(&self) -> Duration {
        let rtt = self.repair_rtt.map_or(Duration::ZERO, |r| r + r / 2);
        self.nack_retry.max(rtt) * (1 << self.nack_backoff)
    }

    /// A message that `repr` (its first frame to arrive) begins, the `k`th from the one in
    /// progress (see `post_for`), with `reserve` bytes of its buffer allocated up front if a
    /// receive is posted for it (none if the receive is too small for it: its bytes are never
    /// kept).
    fn new_msg(&self, id: u64, repr: &Repr, reserve: usize, k: usize) -> InMsg {
        let post = self.post_for(k);
        let posted = post.is_some();
        let max = post.unwrap_or(usize::MAX).min(self.keep);
        let truncated = (posted && repr.msg_len as usize > max).then_some(max);
        InMsg {
            id,
            len: repr.msg_len as usize,
            filled: 0,
            data: posted.then(|| Vec::with_capacity(if truncated.is_some() { 0 } else { reserve })),
            pushed: 0,
            truncated,
            designated: repr.aux as Rank,
            awaiting_pull: false,
            pull_sent: false,
        }
    }

    /// Writes the out-of-order frame `s` straight into the buffer of its message, so that it
    /// is copied once instead of twice (into its slot, then out of it): under steady loss
    /// nearly every frame arrives behind a gap. The message is the one in progress, or one
    /// after it, begun here (consecutive ids only, and only where a receive is posted for
    /// it: a streaming member keeps several posted, so the next message's frames behind a
    /// gap are placed too). The frame is checked against its message again when its turn
    /// comes; a frame that does not fit is left to its slot.
    fn place(&mut self, s: Seq, repr: &Repr, payload: &[u8]) -> bool {
        let hint = self.prefetch;
        let (off, len) = (repr.offset as usize, repr.msg_len as usize);
        let end = off + payload.len();
        // An honest root's frame `s` lies at most this far past the first byte still missing.
        let reach = (s - self.expected) as usize * self.slot_payload();
        let ahead_cap = self.slots.len() * self.slot_payload();
        if end > len {
            return false;
        }
        let cur_id = self.cur.as_ref().map(|m| m.id);
        let mut k = match cur_id {
            Some(id) if id as u32 == repr.msg_id => None,
            _ => {
                let first = cur_id.map_or(self.next_start, |id| id + 1);
                match self.ahead.iter().position(|m| m.id as u32 == repr.msg_id) {
                    Some(k) => Some(k),
                    None => {
                        let id = first + self.ahead.len() as u64;
                        let nth = self.ahead.len() + usize::from(cur_id.is_some());
                        if id as u32 != repr.msg_id || self.post_for(nth).is_none() {
                            return false;
                        }
                        // Under steady loss most messages begin behind a gap, and a buffer
                        // that grew from nothing would reallocate, copying what it holds, all
                        // the way to its length. So the message right after the one in
                        // progress is reserved up front as far as frames can be placed ahead
                        // (`ahead_cap`, a window's worth: a message that long or shorter is
                        // filled without reallocating; a longer one is reserved whole when its
                        // turn comes, in `consume`). Later ones get nothing up front: their
                        // buffers grow with the data placed (bounded by `ahead_cap` too), so
                        // forged frames, one per window slot, cannot each reserve a message.
                        let reserve = if self.ahead.is_empty() {
                            first_reserve(repr).min(ahead_cap)
                        } else {
                            0
                        };
                        let m = self.new_msg(id, repr, reserve, nth);
                        self.ahead.push_back(m);
                        Some(self.ahead.len() - 1)
                    }
                }
            }
        };
        let m = match k.as_mut() {
            None => self.cur.as_mut().expect("current message"),
            Some(k) => &mut self.ahead[*k],
        };
        if m.len != len || m.truncated.is_some() || off < m.filled || off - m.filled > reach {
            return false;
        }
        let Some(v) = m.data.as_mut() else {
            return false;
        };
        if v.len() < end {
            let grow = end - v.len();
            if k.is_some() {
                if self.ahead_bytes + grow > ahead_cap {
                    return false;
                }
                self.ahead_bytes += grow;
            }
            if v.len() <= off {
                // Past the end (the common case behind a gap): zeroes for the gap only, then
                // the frame, written once.
                v.resize(off, 0);
                v.extend_from_slice(payload);
                hint_ahead(hint, v, end, payload.len());
                return true;
            }
            v.resize(end, 0);
        }
        v[off..end].copy_from_slice(payload);
        hint_ahead(hint, v, end, payload.len());
        true
    }

    /// Drops the messages begun ahead and the frames placed into them (they are asked for
    /// again like any missing frame).
    fn forget_ahead(&mut self) {
        let ids: Vec<u32> = self.ahead.drain(..).map(|m| m.id as u32).collect();
        self.ahead_bytes = 0;
        for slot in self.slots.iter_mut() {
            if slot.state.contains(SlotState::HAVE | SlotState::PLACED)
                && ids.contains(&slot.repr.msg_id)
            {
                slot.state.remove(
                    SlotState::HAVE | SlotState::PLACED | SlotState::COPY | SlotState::LINK,
                );
            }
        }
    }

    /// Appends the next expected frame to the message it belongs to; `held`: its payload
    /// stays where it is until the batch's end (see `Piece::held`).
    fn consume(&mut self, repr: &Repr, payload: Payload<'_>, held: bool) -> Result<(), Drop> {
        if self.cur.is_none() {
            if repr.offset != 0 || repr.msg_id != self.next_start as u32 {
                return Err(Drop::Protocol("message does not start at offset 0"));
            }
            let m = match self.ahead.pop_front() {
                Some(mut m) if m.id == self.next_start && m.len == repr.msg_len as usize => {
                    if let Some(v) = m.data.as_mut() {
                        self.ahead_bytes -= v.len();
                        if m.truncated.is_none() {
                            // Its turn: reserved whole now, as a message begun in order is.
                            v.reserve_exact(first_reserve(repr).saturating_sub(v.len()));
                        }
                    }
                    m
                }
                Some(_) => {
                    // Begun by frames that contradict this one: what was placed ahead is
                    // forgotten and asked for again.
                    self.forget_ahead();
                    if let Payload::Placed(_) = payload {
                        return Err(Drop::Protocol("placed frame contradicts its message"));
                    }
                    self.new_msg(self.next_start, repr, first_reserve(repr), 0)
                }
                None if matches!(payload, Payload::Placed(_)) => {
                    return Err(Drop::Protocol("placed frame without its message"))
                }
                None => self.new_msg(self.next_start, repr, first_reserve(repr), 0),
            };
            self.cur = Some(m);
            self.next_start += 1;
        }
        let len = match payload {
            Payload::Placed(len) => len,
            Payload::Here(p) => p.len(),
        };
        let m = self.cur.as_mut().expect("just set");
        let start = m.filled;
        if repr.msg_id != m.id as u32
            || repr.msg_len as usize != m.len
            || repr.offset as usize != m.filled
        {
            return Err(Drop::Protocol("frame does not continue its message"));
        }
        match (m.data.as_mut(), payload) {
            // Placed: already in `v` at its offset.
            (Some(_), Payload::Placed(_)) => {}
            (Some(v), Payload::Here(p)) => {
                if m.truncated.is_none() {
                    let end = m.filled + len;
                    if v.len() == m.filled {
                        v.extend_from_slice(p);
                        hint_ahead(self.prefetch, v, end, len);
                    } else {
                        // Frames after this one were placed already.
                        if v.len() < end {
                            v.resize(end, 0);
                        }
                        v[m.filled..end].copy_from_slice(p);
                    }
                }
            }
            (None, Payload::Placed(_)) => {
                return Err(Drop::Protocol("placed frame without its buffer"))
            }
            (None, Payload::Here(p)) => {
                if self.pushed.len() + len > self.pushed_cap {
                    return Err(Drop::NoRoom);
                }
                self.pushed.extend_from_slice(p);
                m.pushed += len;
            }
        }
        if let Some(Watch(see)) = self.observer.as_mut() {
            // A placed frame is in its message's buffer already (checked above).
            let bytes = match payload {
                Payload::Here(p) => Some(p),
                Payload::Placed(_) => m.data.as_ref().and_then(|v| v.get(start..start + len)),
            };
            if let Some(bytes) = bytes {
                see.piece(&super::Piece {
                    msg_id: m.id,
                    msg_len: m.len,
                    offset: start,
                    bytes,
                    held: held && matches!(payload, Payload::Here(_)),
                });
            }
        }
        m.filled += len;
        if repr.flags.contains(Flags::PULL_WAIT) {
            m.awaiting_pull = true;
            m.designated = match self.pull_override {
                Some((id, d)) if id == repr.msg_id => d,
                _ => repr.aux as Rank,
            };
        } else if !repr.flags.contains(Flags::PUSH) {
            m.awaiting_pull = false;
        }
        if m.filled >= m.len {
            let m = self.cur.take().expect("current message");
            if m.data.is_some() {
                self.deliver(m);
            } else {
                self.done.push_back(m);
            }
        }
        Ok(())
    }

    fn deliver(&mut self, m: InMsg) {
        let post = if self.auto_post {
            None
        } else {
            self.posts.pop_front()
        };
        let max = post.map_or(usize::MAX, |p| p.max_len);
        let event = if m.len > self.keep && max >= m.len {
            Event::Observed {
                root: self.root,
                msg_id: m.id,
                len: m.len,
            }
        } else if m.len > max || m.truncated.is_some() {
            Event::Truncated {
                root: self.root,
                msg_id: m.id,
                len: m.len,
                max,
            }
        } else {
            Event::Delivered(Message {
                root: self.root,
                msg_id: m.id,
                data: m.data.unwrap_or_default(),
            })
        };
        self.next_msg = m.id + 1;
        // Its last frame is the one being consumed, `expected`. Held while fellows ask, and
        // behind any message held before it, whatever it is: delivery stays in order. For a
        // window's worth of frames: any request a slot copy could serve (until the slot was
        // reused) finds the message. The price is memory the application would have freed
        // sooner: up to a window's worth of bytes and the message itself (at 1% loss a bulk
        // receiver's message buffers, held and in progress, grew from about 3.4 to 7 MiB:
        // docs/benchmarks.md).
        if self.peer_hold && (self.copying(self.expected) || !self.holding.is_empty()) {
            self.holding.push_back(Held {
                event,
                until: self.expected + 1 + self.window(),
            });
        } else {
            self.events.push_back(event);
        }
    }

    /// Delivers the held messages whose time came (see `Config::peer_hold`), in order.
    fn release_held(&mut self, now: Instant) {
        if self.holding.is_empty() {
            // Every frame comes here: a stream without loss holds nothing.
            return;
        }
        if self.expected != self.hold_seen {
            self.hold_seen = self.expected;
            self.hold_moved = Some(now);
        }
        // The wait runs from the stream's last move: a slow stream (a busy host) holds by
        // frames, not by time.
        let quiet_at = self.hold_moved.unwrap_or(now) + PEER_HOLD_WAIT;
        while let Some(h) = self.holding.front() {
            if self.expected < h.until && quiet_at > now {
                break;
            }
            let h = self.holding.pop_front().expect("not empty");
            self.events.push_back(h.event);
        }
        self.hold_timer = match self.hold_timer {
            _ if self.holding.is_empty() => None,
            Some(t) if t > now => Some(t),
            _ => Some(quiet_at),
        };
    }

    /// Delivers every held message now: the stream is going away (its root was evicted),
    /// and what was complete is still delivered.
    pub(crate) fn release_all(&mut self) {
        self.events.extend(self.holding.drain(..).map(|h| h.event));
        self.hold_timer = None;
    }

    fn maybe_pull(&mut self) {
        let posted = self.cur_posted();
        let me = self.me;
        let Some(m) = self.cur.as_mut() else { return };
        if m.awaiting_pull && posted && m.designated == me && !m.pull_sent {
            m.pull_sent = true;
            let pull = Control::Pull {
                msg_id: m.id as u32,
                next: self.expected as u32,
            };
            self.controls.push_back(Outgoing::to(self.root, pull));
            if self.tree.is_none() {
                self.acked = self.expected;
                self.unacked = 0;
            }
        }
    }

    fn schedule(&mut self, now: Instant) {
        self.release_held(now);
        if let Some(sent) = self.tree.as_ref().map(|t| t.sent).filter(|_| !self.ack_now) {
            self.schedule_report(now, sent);
        } else if self.ack_now || self.unacked >= self.ack_every {
            self.send_ack(now);
        }
        // Off the critical path: one acknowledgement per `ack_every` frames (half the window)
        // while the root keeps sending, and the rest when the root asks (its poll or a probe,
        // when its retransmission timer fires on an idle stream). No timer of the receiver's
        // own: a sleep bounded by a sub-millisecond quiet timer re-armed per message cost a
        // virtual machine's receivers a third of their CPU per broadcast (clock-event
        // reprogramming); the root's timer runs once per idle period instead.
        let gap = self.expected < self.highest
            && !self.slots[self.idx(self.expected)]
                .state
                .contains(SlotState::HAVE);
        match self.nack_from {
            // Gathering (`Config::nack_gather`): asked once enough frames followed the first
            // gap, or at the timer; `nack_from` stays until then.
            Some(from) if gap && self.highest < from + self.nack_gather => {
                let t = now + self.nack_gather_wait;
                self.nack_at = Some(self.nack_at.map_or(t, |a| a.min(t)));
                return;
            }
            Some(from) if gap => {
                self.send_nacks(now, from);
                self.nack_at = Some(now + self.nack_interval());
            }
            _ if gap && self.nack_at.is_none() => {
                self.nack_at = Some(now + self.nack_interval());
            }
            _ if !gap => self.nack_at = None,
            _ => {}
        }
        self.nack_from = None;
    }

    /// (Re)starts the quiet timer at `now`: due `ack_delay` from now, lazily (see
    /// `quiet_from`). An earlier deadline that is not the quiet timer (a new tree's first
    /// report) stands.
    fn quiet(&mut self, now: Instant) {
        match self.ack_at {
            None => {
                self.ack_at = Some(now + self.ack_delay);
                self.quiet_from = Some(now);
            }
            Some(_) if self.quiet_from.is_some() => self.quiet_from = Some(now),
            Some(_) => {}
        }
    }

    fn send_ack(&mut self, now: Instant) {
        self.ack_now = false;
        self.ack_at = None;
        self.quiet_from = None;
        self.acked = self.expected;
        self.unacked = 0;
        // Answering a probe: say how far we have seen, so that the root can go back over
        // everything after it (go-back-16) instead of probing frame by frame.
        let seen =
            std::mem::take(&mut self.probe_answer).then(|| self.highest.max(self.expected) as u32);
        // A probe's answer goes straight to the root, which is not hearing of this member's
        // progress through the tree (an ancestor may have died).
        let direct = self.tree.is_none() || seen.is_some();
        if direct {
            let ack = Control::Ack {
                next: self.expected as u32,
                seen,
            };
            self.controls.push_back(Outgoing::to(self.root, ack));
        }
        // The root's children report on their own schedule even when their subtree did not
        // move: the root learns which member it waits for, and stops probing the others.
        // A probe's answer also reports again to the parent, even unchanged: a report on the
        // way up may have been lost.
        let again = std::mem::take(&mut self.rereport);
        self.report(now, seen.is_some() || again);
    }

    /// With a tree: reports at once when the subtree's position crosses a multiple of
    /// `ack_every` (aligned, so that a parent forwards one report per `ack_every` frames of
    /// its subtree, not one per child), and otherwise `ack_delay` after the subtree last moved
    /// (a quiet period: the end of a stream, where no multiple is crossed; while frames keep
    /// coming the aligned reports do the work). `sent`: the position last reported.
    fn schedule_report(&mut self, now: Instant, sent: Seq) {
        let every = self.ack_every as u64;
        let (moved, _) = self.subtree_next();
        if moved / every > sent / every {
            self.send_ack(now);
        } else if moved > sent {
            self.quiet(now);
        }
    }

    /// The position this stream's subtree has reached (its own, or a child's report if
    /// lower), and the member at it.
    fn subtree_next(&self) -> (Seq, Rank) {
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
    fn report(&mut self, now: Instant, always: bool) {
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
        t.refresh_at = Some(now + t.refresh_after);
        let msg = Control::TreeAck {
            root,
            next: next as u32,
            laggard,
            view: t.view,
        };
        self.controls.push_back(Outgoing::to(t.parent, msg));
    }

    /// Places this stream in the acknowledgement tree (`None`: acknowledge to the root).
    /// After a change the first report goes out at the next timeout.
    pub(crate) fn set_tree(&mut self, now: Instant, link: Option<TreeLink>) {
        if self.tree.as_deref() == link.as_ref() {
            return;
        }
        self.tree = link.map(Box::new);
        if self.tree.is_some() {
            self.ack_at = Some(now);
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

    /// Asks for the missing frames from `from` on that were never asked for, or not within the
    /// retry interval: a repair already on its way is not asked for again. Returns whether a
    /// NACK went out.
    fn send_nacks(&mut self, now: Instant, from: Seq) -> bool {
        if let Some((peer, 0)) = self.peer_off {
            // Its pause is over: ask it again.
            self.peer = Some(peer);
            self.peer_off = None;
            self.peer_silence = 0;
        }
        let retry = self.nack_interval();
        let end = self.highest.min(self.expected + self.window());
        let due = |slot: &WSlot| {
            !slot.state.contains(SlotState::HAVE)
                && slot
                    .nacked
                    .is_none_or(|t| now.saturating_duration_since(t) >= retry)
        };
        let mut b = self.expected.max(from);
        let mut sent = false;
        let mut sent_root = false;
        while b < end {
            let Some(base) = (b..end).find(|&s| due(&self.slots[self.idx(s)])) else {
                break;
            };
            // A frame is asked of the peer once, then of the root. One NACK to each names
            // every frame due within its reach from `base`.
            let stop = end.min(base + u64::from(NACK_REACH));
            let (mut to_peer, mut to_root) = (NackBitmap::default(), NackBitmap::default());
            for s in base..stop {
                let k = (s - base) as u32;
                let i = self.idx(s);
                if due(&self.slots[i]) {
                    let slot = &mut self.slots[i];
                    let retry = slot.nacked.is_some();
                    if self.peer.is_some() && !slot.state.contains(SlotState::PEER_ASKED) {
                        slot.state.insert(SlotState::PEER_ASKED);
                        to_peer.set(k);
                    } else if self.peer.is_some()
                        && retry
                        && !slot.state.contains(SlotState::PEER_ASKED_AGAIN)
                    {
                        // The peer has it (it did not say otherwise) and its repair did not
                        // come in time: most likely lost. Asked once more before the root.
                        self.peer_silence += 1;
                        slot.state.insert(SlotState::PEER_ASKED_AGAIN);
                        to_peer.set(k);
                    } else {
                        if slot.state.contains(SlotState::PEER_ASKED) && slot.nacked.is_some() {
                            // Asked of the peer, and its retry interval passed unanswered.
                            self.peer_silence += 1;
                        }
                        to_root.set(k);
                        if let Some((_, left)) = self.peer_off.as_mut() {
                            *left = left.saturating_sub(1);
                        }
                    }
                    slot.nacked = Some(now);
                }
            }
            if let (Some(peer), Some((missing, more))) = (self.peer, to_peer.take()) {
                let ask = Control::PeerNack {
                    root: self.root,
                    base: base as u32,
                    missing,
                    unheld: false,
                    more,
                };
                self.controls.push_back(Outgoing::to(peer, ask));
            }
            if let Some((missing, more)) = to_root.take() {
                let nack = Control::Nack {
                    base: base as u32,
                    missing,
                    next: self.expected as u32,
                    more,
                };
                self.controls.push_back(Outgoing::to(self.root, nack));
                sent_root = true;
            }
            b = stop;
            sent = true;
        }
        if let Some(peer) = self
            .peer
            .filter(|_| self.peer_silence >= PEER_SILENCE_LIMIT)
        {
            let frames = PEER_OFF_FIRST << self.peer_off_doublings;
            tracing::warn!(
                root = self.root,
                peer,
                frames,
                "the peer does not answer repair requests: asking the root for the next lost frames"
            );
            self.peer = None;
            self.peer_off = Some((peer, frames));
            self.peer_off_doublings = (self.peer_off_doublings + 1).min(PEER_OFF_MAX_DOUBLINGS);
            self.peer_silence = 0;
        }
        if sent_root && self.tree.is_none() {
            // A NACK carries the cumulative acknowledgement too (but for this member only:
            // with a tree its subtree's report is still due).
            self.acked = self.expected;
            self.unacked = 0;
            self.ack_at = None;
            self.quiet_from = None;
        }
        sent
    }

    pub(crate) fn on_timeout(&mut self, now: Instant) {
        self.release_held(now);
        if self.ack_at.is_some_and(|t| t <= now) {
            match self.quiet_from.map(|q| q + self.ack_delay) {
                // The stream moved since the timer was armed: not quiet yet.
                Some(due) if due > now => self.ack_at = Some(due),
                _ => self.send_ack(now),
            }
        }
        if let Some(t) = self.tree.as_mut() {
            if t.refresh_at.is_some_and(|r| r <= now) {
                t.refresh_at = None;
                self.report(now, true);
                // Once, unless the subtree lags behind what this member has seen (a member
                // below waits for a repair): then again every `keepalive`, so that the root
                // hears the subtree is alive and waits for one laggard, and times out that
                // one only, not every member of the subtree at once.
                let stuck = self.subtree_next().0 < self.highest;
                if let Some(t) = self.tree.as_mut() {
                    t.refresh_at = stuck.then(|| now + t.keepalive);
                }
            }
        }
        if self.nack_at.is_some_and(|t| t <= now) {
            let gap = self.expected < self.highest;
            if gap {
                // Gaps gathered until now are asked for the first time: no back-off for them.
                let first = self.nack_from.take().is_some();
                if self.send_nacks(now, self.expected) && !first {
                    self.nack_backoff = (self.nack_backoff + 1).min(6);
                }
                self.nack_at = Some(now + self.nack_interval());
            } else {
                self.nack_at = None;
                self.nack_from = None;
            }
        }
    }

    /// Acknowledges what it holds now, if the root has not heard of all of it (a member that
    /// flushes before it leaves does not leave the root to ask an empty link).
    pub(crate) fn ack_held(&mut self, now: Instant) {
        if self.owes_ack() {
            self.ack_now = true;
            self.schedule(now);
        }
    }

    /// Whether this member holds frames of the stream it has not acknowledged: the root will
    /// ask for them (its poll), so a member serving the group between calls stays to answer.
    pub(crate) fn owes_ack(&self) -> bool {
        self.expected > self.acked
    }

    pub(crate) fn next_timeout(&self) -> Option<Instant> {
        let refresh = self.tree.as_ref().and_then(|t| t.refresh_at);
        [self.ack_at, self.nack_at, refresh, self.hold_timer]
            .into_iter()
            .flatten()
            .min()
    }

    pub(crate) fn take_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    pub(crate) fn take_control(&mut self) -> Option<Outgoing> {
        self.controls.pop_front()
    }
}

/// Hints where the frame after the next lands in message buffer `v`, one just written ending
/// at `end` and `len` long (see [`Config::prefetch`]): `len` bytes from `end + len`, as far as
/// the buffer's reservation reaches. Frames of a message mostly come in order, also behind a
/// gap.
fn hint_ahead(hint: Option<super::Prefetch>, v: &Vec<u8>, end: usize, len: usize) {
    if let Some(hint) = hint {
        let at = end + len;
        let ahead = len.min(v.capacity().saturating_sub(at));
        if ahead > 0 {
            hint(v.as_ptr().wrapping_add(at), ahead);
        }
    }
}

/// Bytes reserved for a message begun by its first frame, in order: its whole length up to
/// [`WHOLE_RESERVE`], so that it is filled without reallocating. One message per root is in
/// progress at a time, so this bounds what a forged length can reserve (the one after it,
/// begun by a frame placed ahead, is reserved up to a window's worth only, see `place`); the
/// reservation is address space, the pages come as data fills them.
fn first_reserve(repr: &Repr) -> usize {
    (repr.msg_len as usize).min(WHOLE_RESERVE)
}

/// Messages up to this long are reserved whole by their first frame. Above a megabyte, a
/// reservation that falls short by even a byte (a bulk transfer's chunk behind its one-byte
/// type) costs a reallocation that copies the whole message: measured, 8 receivers of 1 MiB
/// chunks spent a fifth of their CPU in that copy. 64 MiB is `ethbcast send`'s largest chunk.
const WHOLE_RESERVE: usize = (64 << 20) + 64;

/// The answer to a peer NACK from `asker` for frames of `root`'s stream this member does not
/// hold (`missing` and `more`, from `base`).
pub(crate) fn unheld_reply(
    asker: Rank,
    root: Rank,
    base: u32,
    missing: u16,
    more: Vec<u16>,
) -> Outgoing {
    Outgoing::to(
        asker,
        Control::PeerNack {
            root,
            base,
            missing,
            unheld: true,
            more,
        },
    )
}

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
    window: &'a [u8],
}

impl machine::Held for Memory<'_> {
    fn find(&self, at: usize, len: usize) -> Option<&[u8]> {
        within(self.window, at, len).or_else(|| self.link.find(at, len))
    }
}
