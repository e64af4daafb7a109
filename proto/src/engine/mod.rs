//! The protocol engine: reliable broadcast as a sans-IO state machine.
//!
//! The engine has no socket and no clock. Its inputs are frames ([`Engine::handle_frame`]),
//! the passing of time ([`Engine::handle_timeout`]) and calls of the application
//! ([`Engine::bcast`], [`Engine::post_recv`]); its outputs are frames to send
//! ([`Engine::poll_transmit`]), the next instant it wants to be woken
//! ([`Engine::poll_timeout`]) and events ([`Engine::poll_event`]). A driver calls them in this
//! order: feed every frame that is ready, `handle_timeout(now)`, drain `poll_transmit`, drain
//! `poll_event`, then sleep until `poll_timeout` or the next frame. The same engine runs on the
//! simulated switch and on raw Ethernet.
//!
//! Every member runs one engine. As a root it owns one [`crate::eqa::Eqa`] (the send-only
//! directed point with one LDP per destination); as a receiver it keeps one receive stream per
//! root, created when that root is first heard from. Each root numbers its frames in its own
//! stream, so consecutive broadcasts from different roots need no barrier between them.
//!
//! The two algorithms of the EQA paper (section 3): - **Simple broadcast**
//! ([`HardwareAlgorithm::Simple`]): every frame is broadcast as soon as a slot of the
//! retransmission buffer is free. - **Push-pull broadcast** ([`HardwareAlgorithm::PushPull`]): the
//! first `btp1` bytes, then the next `btp2` bytes, are pushed at once; one designated receiver
//! sends a [`crate::wire::Kind::Pull`] when the push part is in and its receive is posted; the rest
//! is pulled, paced by free slots of the buffer.
//!
//! Repair is **selective go-back-16**: a receiver that sees a gap NACKs with the first missing
//! sequence and a 16-bit bitmap of what is missing from there; the root repairs only that
//! destination, point-to-point, from its cursor, at most 16 frames per NACK and only what the
//! bitmap asks for. A frame asked for by `rebroadcast_min` destinations or more is broadcast
//! once instead. Acknowledgements are cumulative and coalesced, off the critical path: one
//! every `ack_every` frames (half the window of a small group) while the root keeps sending,
//! and one when the root asks; a receiver's `bcast` returns before it sends them, and it keeps
//! no timer for them. The root asks when a destination's retransmission timer first fires
//! after its last progress (the group went idle): a poll without data, answered at once with
//! how far the receiver has seen. Lost acks and lost tail frames are recovered by the later
//! timeouts, whose probe asks for an immediate answer and backs off exponentially.

mod config;
mod crypt;
mod error;
mod event;
mod fellows;
mod input;
mod observe;
mod outbox;
mod recv;
mod send;
mod stats;
#[cfg(test)]
mod tests;
mod timer;
mod tree;

use std::collections::VecDeque;
use std::time::Instant;

use crate::machine::{BatchEnd, Both, Held, Transmit};
use crate::rank_map::RankMap;
use crate::wire::{self, Control, WireError};
use crate::Rank;

use crate::error::ConfigError;
pub use config::{
    default_window, EngineConfig, Prefetch, ACK_TREE_FANOUT, ACK_TREE_FROM, MAX_WINDOW,
};
use crypt::Crypt;
pub use error::{DropReason, PostError, SendError, SessionEnded};
pub use event::{Dest, EngineEvent, Message};
use fellows::Fellows;
pub use observe::{Observe, Observer, Piece};
use outbox::Outbox;
pub(crate) use outbox::Outgoing;
pub use recv::Receiver;
pub use send::Sender;
pub(crate) use send::{Handed, Retransmit, Route};
pub use stats::{DropStats, EngineStats};
use timer::TimerTable;

/// How the engine paces a broadcast in hardware: the EQA paper's two algorithms. (A member also
/// broadcasts down a binomial tree of point-to-point channels: see `member::HardwareAlgorithm`.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum HardwareAlgorithm {
    /// Push-pull (PPBCAST): push the first BTP1 + BTP2 bytes, pull the rest on request.
    #[default]
    PushPull,
    /// Every frame at once (SBCAST).
    Simple,
}

/// A stream that takes the end of each batch of frames, and what says whether this batch's
/// end has work for it, known without a look at the stream itself (in a simulated group of
/// thousands, the stream's state is out of the caches at most batches' ends).
#[derive(Debug, Clone, Copy)]
struct Batched {
    root: Rank,
    /// The stream was handed something since its last batch end: frames, receives, requests,
    /// timeouts (see `Engine::collect_rx`).
    touched: bool,
    /// Where the payload of the oldest frame it left in the link lies (`Receiver::link_front`):
    /// a batch's end at which the link gives that frame back has frames of the stream leaving.
    front: Option<usize>,
}

/// One member's protocol engine.
#[derive(Debug)]
pub struct Engine {
    cfg: EngineConfig,
    tx: Sender,
    /// The receive streams, by root: those heard from alone (a slot per rank was 8 bytes
    /// per fellow at every member, 128 MiB of a simulated group of 4096). Every data frame
    /// looks its stream up: a member that takes one root's stream finds it in the engine
    /// itself, with no node or vector of its own to read first.
    rx: RankMap<Box<Receiver>, 1>,
    /// The streams that take the end of each batch of frames ([`Engine::frames_done`]):
    /// those with an observer ([`Engine::observe`]) or left in the link
    /// ([`Engine::leave_in_link`]).
    batched: Vec<Batched>,
    /// Every timer of the engine: the receive streams' and the sender's.
    timers: TimerTable,
    /// What this member knows of each fellow member.
    fellows: Fellows,
    /// The acknowledgement trees' view, and this member's own tree as a root.
    trees: tree::AckTrees,
    outbox: Outbox,
    /// Set by [`Engine::reserve_queues`]: queues are made at their bounds, streams' too.
    reserved: bool,
    /// Set by [`Engine::abandon`]: only control frames leave from then on.
    abandoned: bool,
    /// Set when the send side is first given something: a message, feedback on this
    /// member's stream, an eviction. Until then nothing of it can be due, and what the
    /// engine asks of it after every frame and every turn (frames to send, timers, stable
    /// messages) is skipped ([`Engine::tx_untouched`]).
    ///
    /// Why: in a group of thousands all but a few members never broadcast, and those
    /// questions read several lines of the send side for nothing, each a miss.
    sending: bool,
    /// Set once a counter of this member's frames reached its last value.
    ended: Option<SessionEnded>,
    events: VecDeque<EngineEvent>,
    stats: EngineStats,
    /// The frame cipher of a keyed engine and the frames it decrypted.
    crypt: Crypt,
}

impl Engine {
    /// Creates the engine of member `cfg.rank`.
    pub fn new(cfg: EngineConfig) -> Result<Engine, ConfigError> {
        cfg.check()?;
        let n = usize::from(cfg.size);
        Ok(Engine {
            tx: Sender::new(&cfg),
            rx: RankMap::new(),
            batched: Vec::new(),
            timers: TimerTable::new(cfg.size),
            fellows: Fellows::new(n),
            trees: tree::AckTrees::new(&vec![true; n]),
            outbox: Outbox::new(cfg.outbox),
            reserved: false,
            sending: false,
            abandoned: false,
            ended: None,
            events: VecDeque::new(),
            stats: EngineStats::default(),
            crypt: Crypt::new(&cfg),
            cfg,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }
    /// Counters.
    pub fn stats(&self) -> &EngineStats {
        &self.stats
    }
    /// The root side (buffer, cursors), for inspection.
    pub fn sender(&self) -> &Sender {
        &self.tx
    }
    /// Whether broadcast reaches at most half the live members (the others failed over), so
    /// that this member's next message should go down a tree instead. After a run of such
    /// messages it answers no once and tries every failed-over member on broadcast again
    /// (with back-off). Ask once per message.
    pub fn broadcast_reaches_too_few(&mut self) -> bool {
        self.tx.too_few_reached()
    }
    /// Whether some stream holds frames this member has not acknowledged to their root (see
    /// [`Control::AckPoll`]).
    pub fn owes_acks(&self) -> bool {
        self.rx.values().any(|r| r.owes_ack())
    }

    /// Acknowledges to every root what this member holds of its stream and has not
    /// acknowledged yet, now rather than when the root asks: for a member about to leave.
    pub fn ack_all(&mut self, now: Instant) {
        let roots: Vec<Rank> = self.rx.keys().collect();
        for root in roots {
            if let Some(rx) = self.rx.get_mut(root) {
                rx.ack_held(now, &mut self.timers);
            }
            self.collect_rx(root);
        }
    }
    /// Hints what the engine's next frame reads first beside the engine itself: its receive
    /// streams (see [`crate::Machine::prefetch`]).
    pub fn prefetch(&self, hint: Prefetch) {
        for rx in self.rx.values() {
            rx.prefetch(hint);
        }
    }

    /// Heap bytes of the engine's buffers: its receive streams ([`Receiver::heap_bytes`]) and
    /// its send side without the per-destination cursors.
    pub fn heap_bytes(&self) -> usize {
        self.crypt.heap_bytes()
            + self.tx.heap_bytes_without_dests()
            + self.rx.values().map(|r| r.heap_bytes()).sum::<usize>()
    }
    /// The receive stream of `root`, if it has been heard from.
    pub fn receiver(&self, root: Rank) -> Option<&Receiver> {
        self.rx.get(root).map(Box::as_ref)
    }
    /// The fellow receiver this member asks for lost frames of `root`'s stream (peer repair),
    /// if any: the one member whose relayed repairs of that stream are expected.
    pub fn repair_peer(&self, root: Rank) -> Option<Rank> {
        self.receiver(root).and_then(Receiver::peer)
    }
    /// When `rank` last gave a sign of life: a frame of it passed every check of
    /// [`Engine::handle_frame`] (CRC, group, key, membership, destination) and proved that it spoke
    /// then. Frames of other groups, garbage and forgeries the key rejects are no such sign; nor
    /// are replays that pass the checks: a control frame whose counter does not advance the replay
    /// window (a late counter, taken once from inside the window) or a duplicate data frame. A
    /// repair sent point to point counts for nobody here: a fellow member may have relayed it with
    /// the root as its source, and only the layer that sees the Ethernet source can tell who spoke
    /// (see `Member::handle_frame`).
    pub fn last_heard(&self, rank: Rank) -> Option<Instant> {
        self.fellows.last_heard(rank)
    }
    /// Whether this member's session ended, and why: its control counter reached its last
    /// value (no control frame leaves any more) or its broadcasts used every sequence number
    /// (no broadcast is taken any more).
    pub fn session_ended(&self) -> Option<SessionEnded> {
        self.ended
    }

    /// Test support: continues this member's control counter from `ctr`, as if the control
    /// frames in between had been sent (a session's end is otherwise billions of frames away).
    #[cfg(feature = "test-hooks")]
    pub(crate) fn skip_control_counter_to(&mut self, ctr: u32) {
        self.outbox.skip_counter_to(ctr);
    }

    /// Makes the queues at their bounds now, rather than as they fill: the outbox's, the send
    /// queue, and the pushed buffer of every receive stream (those made later too). A member
    /// then allocates nothing in steady state when a burst leaves more waiting than any
    /// before. For a host's member (one per process); a simulated group of thousands leaves
    /// them to grow with use.
    pub fn reserve_queues(&mut self) {
        self.reserved = true;
        self.outbox.make_room();
        self.tx.make_room();
        for rx in self.rx.values_mut() {
            rx.make_room();
        }
    }

    /// Test support: makes now what the engine makes at first use, at its bounds (the receive
    /// streams' window places and receive queues, the outbox's queue), so that what it
    /// allocates can be set against the sizes it reports.
    #[cfg(feature = "test-hooks")]
    pub(crate) fn make_every_place(&mut self) {
        self.reserve_queues();
        for rx in self.rx.values_mut() {
            rx.make_every_place();
        }
    }

    /// Test support: counts `frames` sequence numbers as used, as if broadcasts had used them.
    #[cfg(feature = "test-hooks")]
    pub(crate) fn skip_sequences(&mut self, frames: u64) {
        self.sending = true;
        self.tx.skip_sequences(frames);
    }

    /// Takes the streams of `roots` alone (every member's by default): a data frame, an
    /// acknowledgement poll or a pull poll of another rank's stream is dropped before any
    /// receive stream is made for it. For a member that receives from one root (a stream's
    /// receivers): without a key, a host speaking as a fellow member makes it reserve nothing.
    pub fn take_streams_from(&mut self, roots: &[Rank]) {
        self.fellows.take_streams_from(roots);
    }

    /// Whether `rank` is still a live member.
    pub fn is_live(&self, rank: Rank) -> bool {
        self.fellows.is_live(rank)
    }

    /// Broadcasts `data` to every other member; returns its message id. The message is queued
    /// and its frames go out as [`Engine::poll_transmit`] is called.
    pub fn bcast(
        &mut self,
        now: Instant,
        data: Vec<u8>,
        algo: HardwareAlgorithm,
    ) -> Result<u64, SendError> {
        let data = &mut { data };
        self.enqueue(now, Handed::Taken { data, lent: false }, algo)
    }

    /// [`Engine::bcast`] of the message in `buf`, lent: the engine takes it (leaving `buf`
    /// empty) once it is accepted, and gives it back through [`Engine::take_sent`] once all
    /// its frames are in the retransmission buffer, so that its capacity serves the caller's
    /// next message. On an error `buf` keeps the message.
    pub fn bcast_from(
        &mut self,
        now: Instant,
        buf: &mut Vec<u8>,
        algo: HardwareAlgorithm,
    ) -> Result<u64, SendError> {
        self.enqueue(
            now,
            Handed::Taken {
                data: buf,
                lent: true,
            },
            algo,
        )
    }

    /// [`Engine::bcast`] of the message in `data`, borrowed until this returns: while the
    /// retransmission buffer has room (and no earlier message waits) its frames are published
    /// into it straight from `data`, and only what does not fit is copied, into `spare`, which
    /// the engine then takes and lends back through [`Engine::take_sent`] as for
    /// [`Engine::bcast_from`] (holding the message's unpublished tail, or nothing). A message
    /// published whole leaves `spare` untouched, and [`Engine::take_sent`] gives back an empty
    /// buffer. On an error nothing is taken or published.
    pub fn bcast_slice(
        &mut self,
        now: Instant,
        data: &[u8],
        spare: &mut Vec<u8>,
        algo: HardwareAlgorithm,
    ) -> Result<u64, SendError> {
        self.enqueue(now, Handed::Borrowed { data, spare }, algo)
    }

    /// The buffer of message `id` lent with [`Engine::bcast_from`], once all its frames are in
    /// the retransmission buffer ([`Sender::queued`] is 0 then, if no later message waits).
    /// Kept for the newest two such messages only; `None` before, or once taken.
    pub fn take_sent(&mut self, id: u64) -> Option<Vec<u8>> {
        self.tx.take_sent(id)
    }

    /// Queues the message `msg` hands over (see [`Sender::enqueue`]); returns its id.
    pub(crate) fn enqueue(
        &mut self,
        now: Instant,
        msg: Handed<'_>,
        algo: HardwareAlgorithm,
    ) -> Result<u64, SendError> {
        if let Some(e) = self.ended {
            return Err(e.into());
        }
        let len = msg.bytes().len();
        if len > self.cfg.max_message {
            return Err(SendError::TooLong {
                len,
                max: self.cfg.max_message,
            });
        }
        self.sending = true;
        let id = self
            .tx
            .enqueue(&self.cfg, msg, algo, self.fellows.live(), &mut self.timers)
            .inspect_err(|e| {
                if let SendError::SessionEnded(e) = e {
                    self.ended = Some(*e);
                }
            })?;
        self.stats.sent_msgs += 1;
        self.tx
            .fill(&self.cfg, now, self.fellows.live(), &mut self.timers);
        Ok(id)
    }

    /// Posts a receive for the next message of `root` that has not been posted for yet,
    /// accepting up to `max_len` bytes. Needed unless `auto_post` is set.
    pub fn post_recv(&mut self, now: Instant, root: Rank, max_len: usize) -> Result<(), PostError> {
        self.post_recv_into(now, root, max_len, Vec::new())
    }

    /// [`Engine::post_recv`] with a buffer to receive into: a message of `root` is received
    /// into its capacity (its contents are dropped) and delivered in it, so that a caller who
    /// hands back the buffer of its last message receives without an allocation.
    pub fn post_recv_into(
        &mut self,
        now: Instant,
        root: Rank,
        max_len: usize,
        buf: Vec<u8>,
    ) -> Result<(), PostError> {
        if root.get() >= self.cfg.size || root == self.cfg.rank {
            return Err(PostError::NotMember(root));
        }
        if !self.fellows.is_live(root) {
            return Err(PostError::Evicted(root));
        }
        let (rx, timers) = self.stream(now, root);
        rx.post(max_len, buf)?;
        rx.progress(now, timers);
        self.collect_rx(root);
        Ok(())
    }

    /// Hands `observer` the bytes of `root`'s messages as this member consumes them: in stream
    /// order, each byte once, every message from offset 0 to its end, one frame's payload per call,
    /// whether a receive is posted for the message or not. The payload is still in the cache then:
    /// a digest of the stream taken here reads each byte warm, where one taken of the delivered
    /// message reads it again from memory (measured on the test-bed, 8 bulk receivers: the digest's
    /// samples fell by two fifths, and their CPU by 7%, median of 10 alternated transfers). What is
    /// observed is what is consumed, which is what is delivered, in the same order, except a
    /// message delivered [`EngineEvent::Truncated`] or [`EngineEvent::Observed`] (its bytes are
    /// observed, not kept) and the end of a stream cut short (a member that leaves).
    pub fn observe(&mut self, now: Instant, root: Rank, observer: Observer) {
        self.stream(now, root).0.set_observer(observer);
        self.crypt.hold();
        self.batch(root);
    }

    /// `root`'s stream takes the end of each batch of frames ([`Engine::frames_done`]).
    fn batch(&mut self, root: Rank) {
        if !self.batched.iter().any(|b| b.root == root) {
            self.batched.push(Batched {
                root,
                touched: true,
                front: None,
            });
        }
    }

    /// Keeps at most `keep` bytes of `root`'s messages: a longer one is consumed and handed
    /// to the observer (see [`Engine::observe`]) and not kept, and is delivered as
    /// [`EngineEvent::Observed`], its length alone. For an application that takes a stream's bytes
    /// from its observer (a file receiver writing straight from the link's frames): the copy
    /// into a message buffer it would never read is not made.
    pub fn keep_at_most(&mut self, now: Instant, root: Rank, keep: usize) {
        self.stream(now, root).0.keep_at_most(keep);
    }

    /// Whether some root's stream takes the end of each batch of frames
    /// ([`Engine::frames_done`]): it has an observer ([`Engine::observe`]), or its frames are
    /// left in the link ([`Engine::leave_in_link`]).
    pub fn wants_frames_done(&self) -> bool {
        !self.batched.is_empty()
    }

    /// Frames of `root`'s stream that would be copied into the window (behind a gap, or kept
    /// for fellows' requests) stay in the link instead, for a link that retains its frames
    /// after a batch (see [`crate::machine::BatchEnd`]): they are read there when their turn
    /// comes or a fellow asks, and copied only if still waiting when the link gives them
    /// back. For a receiver whose observer writes from the link's frames (a bulk receiver
    /// into `/dev/null`): under steady loss nearly every frame comes behind a gap, and the
    /// copy of each was most of its cost.
    pub fn leave_in_link(&mut self, now: Instant, root: Rank) {
        self.leave_in_link_as(now, root, false);
    }

    /// As [`Engine::leave_in_link`], except that a frame kept for fellows' requests is copied
    /// into the window when the link gives it back after it was consumed (rather than
    /// forgotten), and serves them until its slot is reused, as it would without the link:
    /// the stream's repairs are those it makes without the link, whatever the link retains.
    /// For a simulated group (whose links keep shared frames): the copies a member makes are
    /// the few frames that outlive the link's retention.
    pub fn leave_in_link_serving(&mut self, now: Instant, root: Rank) {
        self.leave_in_link_as(now, root, true);
    }

    fn leave_in_link_as(&mut self, now: Instant, root: Rank, copy_consumed: bool) {
        self.stream(now, root).0.set_in_link(true, copy_consumed);
        self.crypt.hold();
        self.batch(root);
    }

    /// A batch of frames ends (see [`crate::machine::Machine::frames_done`]): frames left in
    /// the link are consumed and served, the observers told, and what leaves the link and is
    /// still needed copied.
    pub fn frames_done(&mut self, now: Instant, end: crate::machine::BatchEnd<'_>) {
        // Frames this engine decrypted are held as the link's are, and all leave now.
        let opened = self.crypt.take_opened();
        let (held, leaving) = (Both(end.held, &opened), Both(end.leaving, &opened));
        let end = BatchEnd {
            held: &held,
            leaving: &leaving,
        };
        for k in 0..self.batched.len() {
            let Batched {
                root,
                touched,
                front,
            } = self.batched[k];
            // A stream handed nothing since its last batch end, whose oldest frame in the
            // link stays there, has nothing to do: whatever it left in the link stays, and
            // what waits there waited at its last batch end too.
            if !touched && front.is_none_or(|at| leaving.find(at, 0).is_none()) {
                continue;
            }
            if let Some(rx) = self.rx.get_mut(root).map(Box::as_mut) {
                rx.frames_done(now, &mut self.timers, end);
                // What it delivered, served and scheduled leaves now, not at the stream's
                // next frame or timer.
                self.collect_rx(root);
            }
            let front = self.rx.get(root).and_then(|rx| rx.link_front());
            self.batched[k] = Batched {
                root,
                touched: false,
                front,
            };
        }
        let mut opened = opened;
        opened.clear();
        self.crypt.put_back(opened);
    }

    /// Appends to `out` where every payload the streams left in the link lies, the notes of
    /// those no longer there (consumed and forgotten, copied, or their slot reused)
    /// forgotten first (see [`crate::Machine::link_refs`]): the link may let every frame go
    /// that none of these lies in.
    pub fn link_refs(&mut self, out: &mut Vec<usize>) {
        for k in 0..self.batched.len() {
            let root = self.batched[k].root;
            if let Some(rx) = self.rx.get_mut(root).map(Box::as_mut) {
                rx.link_refs(out);
                // The oldest note may have been a stale one.
                self.batched[k].front = rx.link_front();
            }
        }
    }

    /// The receive stream of `root` (made now if it was never heard from), and the timers.
    fn stream(&mut self, now: Instant, root: Rank) -> (&mut Receiver, &mut TimerTable) {
        if !self.rx.contains_key(root) {
            let place = self.timers.add_stream(root);
            let mut rx = Receiver::new(&self.cfg, root, place);
            let link = self.trees.link(&self.cfg, root, self.fellows.live());
            rx.set_peer(self.peer_for(root, link.as_ref()));
            rx.set_tree(now, &mut self.timers, link);
            if self.reserved {
                rx.make_room();
            }
            self.rx.insert(root, Box::new(rx));
        }
        let rx = self.rx.get_mut(root).map(Box::as_mut).expect("just made");
        (rx, &mut self.timers)
    }

    /// The fellow receiver this member asks first for frames of `root`'s stream lost here
    /// (peer repair): with an acknowledgement tree (`link`, this member's place in it), its
    /// parent, and none for the root's children, who ask the root; without, the next live
    /// rank after this one, other than the root.
    ///
    /// Why the parent: a parent that lacks a frame too is getting it itself (it asks its own
    /// parent), and relays it to the children that asked when it comes
    /// ([`Control::PeerPending`]), so that a lost frame is asked of the root once per subtree
    /// of the root's children at most, however large the group, not once per member whose
    /// fellow happened to lack it (at 4096 members with burst loss, 1.94 NACKs into the root
    /// per data frame with the next rank as the peer).
    fn peer_for(&self, root: Rank, link: Option<&recv::TreeLink>) -> Option<Rank> {
        if !self.cfg.peer_repair {
            return None;
        }
        if let Some(link) = link {
            return Some(link.parent()).filter(|&p| p != root);
        }
        let n = self.cfg.size;
        (1..n)
            .map(|k| self.cfg.rank.ring_add(k, n))
            .find(|&r| r != root && self.fellows.is_live(r))
    }

    fn collect_rx(&mut self, root: Rank) {
        // Every call into a stream ends here: its next batch end has work.
        if let Some(b) = self.batched.iter_mut().find(|b| b.root == root) {
            b.touched = true;
        }
        if let Some(rx) = self.rx.get_mut(root).map(Box::as_mut) {
            while let Some(ev) = rx.take_event() {
                if let EngineEvent::Delivered(Message { data, .. }) = &ev {
                    self.stats.delivered += 1;
                    self.stats.delivered_bytes += data.len() as u64;
                }
                self.events.push_back(ev);
            }
            // Repairs a fellow was served from the link come at the batch's end: their room
            // is kept for them.
            let room = self.cfg.outbox.saturating_sub(rx.relays_waiting());
            while let Some(c) = rx.take_control() {
                if self.outbox.len() >= room {
                    // Made faster than the link takes them (a root polling, a fellow asking,
                    // while the link is full): dropped as the link would lose it; its timer
                    // repeats it.
                    self.stats.outbox_full += 1;
                    continue;
                }
                c.count(&mut self.stats);
                self.outbox.push(c);
            }
        }
    }

    /// Queues a control message of the layers above (heartbeat, barrier, ...). When the
    /// outbox holds `EngineConfig::outbox` frames already (they were made faster than the link took
    /// them: a fellow's pings or a straggler's barrier queries, say), the message is dropped
    /// and counted ([`EngineStats::outbox_full`]), as a link would lose it: every one of them is
    /// repeated by its own timer, or unreliable (a notice).
    pub fn send_control(&mut self, dst: Dest, msg: Control) -> Result<(), WireError> {
        if msg.payload_len() > self.cfg.max_payload() {
            return Err(WireError::PayloadTooLong(msg.payload_len()));
        }
        if self.outbox.room() == 0 {
            self.stats.outbox_full += 1;
            return Ok(());
        }
        self.outbox.push(Outgoing::Own { dst, msg });
        Ok(())
    }

    fn collect_tx(&mut self) {
        if self.tx_untouched() {
            return;
        }
        while let Some(id) = self.tx.take_stable() {
            self.events.push_back(EngineEvent::Stable { msg_id: id });
        }
    }

    /// Lets time pass: fires due acknowledgement, NACK and retransmission timers.
    pub fn handle_timeout(&mut self, now: Instant) {
        // The streams whose timer is due, in rank order.
        let due = self.timers.fired_streams(now);
        for &root in &due {
            if let Some(rx) = self.rx.get_mut(root).map(Box::as_mut) {
                rx.on_timeout(now, &mut self.timers);
            }
            self.collect_rx(root);
        }
        self.timers.give_back(due);
        if !self.tx_untouched() {
            self.tx
                .on_timeout(&self.cfg, now, self.fellows.live(), &mut self.timers);
        }
    }

    /// The earliest instant at which [`Engine::handle_timeout`] has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next_timeout()
    }

    /// True if frames are waiting to be sent.
    pub fn has_transmit(&self) -> bool {
        !self.outbox.is_empty() || self.has_data_to_send()
    }

    /// True if frames of this member's own stream (fresh data or repairs) are waiting to be
    /// sent, as opposed to control frames only (acknowledgements, requests).
    pub fn has_data_to_send(&self) -> bool {
        !self.tx_untouched() && self.tx.has_transmit()
    }

    /// Whether the send side was never given anything (see `sending`).
    fn tx_untouched(&self) -> bool {
        debug_assert!(self.sending || (self.tx.is_idle() && !self.tx.has_transmit()));
        !self.sending
    }

    /// Writes the next frame to send into `buf` (at least `max_pdu` bytes). Control frames go
    /// first, then repairs, then fresh data.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit<Dest>> {
        let mut t = self.poll_transmit_plain(now, buf)?;
        t.len = self.crypt.seal(&self.cfg, buf, t.len).ok()?;
        Some(t)
    }

    fn poll_transmit_plain(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit<Dest>> {
        if let Some(c) = self.outbox.pop() {
            return match c {
                Outgoing::Own { dst, msg } => self.emit_control(dst, &msg, buf),
                Outgoing::Relay {
                    dst,
                    mut repr,
                    payload,
                } => {
                    repr.group = self.cfg.group;
                    let len = repr.emit(&payload, buf).ok()?;
                    Some(Transmit { dst, len })
                }
            };
        }
        if self.abandoned || self.tx_untouched() {
            return None;
        }
        if let Some((designated, poll)) = self.tx.take_pull_poll(&self.cfg, self.fellows.live()) {
            return self.emit_control(Dest::Rank(designated), &poll, buf);
        }
        if let Some(dst) = self.tx.take_ack_poll() {
            self.stats.ack_polls += 1;
            return self.emit_control(dst, &Control::AckPoll, buf);
        }
        let t = self.tx.poll_transmit(
            &self.cfg,
            now,
            buf,
            self.fellows.live(),
            &mut self.stats,
            &mut self.timers,
        );
        self.collect_tx();
        t
    }

    /// Writes a control message of this member's own, with the next control counter.
    fn emit_control(&mut self, dst: Dest, msg: &Control, buf: &mut [u8]) -> Option<Transmit<Dest>> {
        let to = match dst {
            Dest::All => wire::ALL,
            Dest::Rank(r) => r,
        };
        // Counters start at 1 and end the session at `u32::MAX` rather than wrap.
        let Some(ctr) = self.outbox.next_counter() else {
            self.ended.get_or_insert(SessionEnded::ControlCounter);
            return None;
        };
        let len = msg.emit(self.cfg.group, self.cfg.rank, to, ctr, buf).ok()?;
        Some(Transmit { dst, len })
    }

    /// Stops sending broadcast data and repairs for good: only control frames leave from now
    /// on. Why: a root that aborts must tell its receivers so, and on a saturated link its
    /// last data frames would crowd that tell out of the switch's queues.
    pub fn abandon(&mut self) {
        self.abandoned = true;
    }

    /// The next event for the application.
    pub fn poll_event(&mut self) -> Option<EngineEvent> {
        self.events.pop_front()
    }

    /// Removes `rank` from the group: its references in the buffer are released so that
    /// broadcasts complete for the survivors, and its frames are dropped from now on.
    /// A message from it that was not complete is never delivered.
    pub fn evict(&mut self, now: Instant, rank: Rank) -> bool {
        if rank == self.cfg.rank || !self.fellows.evict(rank) {
            return false;
        }
        // Its messages that were complete (held back for fellows' requests) are still
        // delivered.
        if let Some(rx) = self.rx.get_mut(rank).map(Box::as_mut) {
            rx.release_all(&mut self.timers);
        }
        self.collect_rx(rank);
        if let Some(rx) = self.rx.remove(rank) {
            self.timers.remove_stream(rx.timers());
        }
        // The trees re-form in the new view.
        self.trees.relayout(self.fellows.live());
        let roots: Vec<Rank> = self.rx.keys().collect();
        for root in roots {
            let link = self.trees.link(&self.cfg, root, self.fellows.live());
            let peer = self.peer_for(root, link.as_ref());
            if let Some(rx) = self.rx.get_mut(root).map(Box::as_mut) {
                rx.set_peer(peer);
                rx.set_tree(now, &mut self.timers, link);
            }
            self.collect_rx(root);
        }
        self.sending = true;
        self.tx
            .evict(&self.cfg, now, rank, self.fellows.live(), &mut self.timers);
        self.collect_tx();
        true
    }

    /// Heap bytes of the control outbox (the send side's pushed buffer).
    pub fn outbox_bytes(&self) -> usize {
        self.outbox.heap_bytes()
    }

    /// True when this member, as root, has nothing queued, unsent or unacknowledged.
    pub fn is_idle(&self) -> bool {
        (self.tx_untouched() || self.tx.is_idle()) && self.outbox.is_empty()
    }

    /// Messages of `root` delivered so far.
    pub fn delivered_from(&self, root: Rank) -> u64 {
        self.receiver(root).map_or(0, |r| r.next_msg())
    }
}
