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
//! The two algorithms of the EQA paper (section 3):
//! - **Simple broadcast** ([`Algo::Simple`]): every frame is broadcast as soon as a slot of the
//!   retransmission buffer is free.
//! - **Push-pull broadcast** ([`Algo::PushPull`]): the first `btp1` bytes, then the next `btp2`
//!   bytes, are pushed at once; one designated receiver sends a [`crate::wire::Kind::Pull`]
//!   when the push part is in and its receive is posted; the rest is pulled, paced by free
//!   slots of the buffer.
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

mod recv;
mod send;
#[cfg(test)]
mod tests;
mod tree;

use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::eqa::{Rank, Seq};
use crate::wire::{
    self, control::nack_offsets, Admit, Control, ControlError, Flags, Frame, Kind, ReplayWindow,
    Repr, WireError,
};

pub use recv::Receiver;
pub use send::Sender;

/// Broadcast algorithm of one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum Algo {
    /// Broadcast every frame at once (SBCAST in the paper).
    Simple,
    /// Push the first BTP1 + BTP2 bytes, pull the rest on request (PPBCAST).
    #[default]
    PushPull,
}

crate::spelled!(Algo, "algorithm", {
    Simple => "simple" | "sbcast",
    PushPull => "pushpull" | "push-pull" | "ppbcast",
});

/// A cache hint: the `len` bytes from the pointer are used soon (see [`Config::prefetch`]).
pub type Prefetch = fn(*const u8, usize);

/// Sees the bytes of a root's messages as they are consumed (see [`Engine::observe`]).
pub type Observer = Box<dyn Observe>;

/// What an [`Observer`] is told: each piece of a root's messages as it is consumed, and when
/// the frames handed in since the last time are given back to the link. A closure taking a
/// [`Piece`] is an observer that ignores the second.
pub trait Observe: Send {
    /// The next bytes of the stream, in order.
    fn piece(&mut self, piece: &Piece<'_>);
    /// The frames handed in since the last call are about to be given back to the link
    /// that holds them, and the engine's copies consumed meanwhile may be reused: `memory`
    /// names where every piece with [`Piece::held`] set since the last call lies: the
    /// frames as the link holds them, whole (link headers included), and the engine's
    /// window of copies. An observer that kept where its pieces were writes them out now;
    /// after this call they are gone. A link that holds nothing passes no frames.
    fn frames_done(&mut self, memory: &dyn crate::machine::Held) {
        let _ = memory;
    }
}

impl<F: FnMut(&Piece<'_>) + Send> Observe for F {
    fn piece(&mut self, piece: &Piece<'_>) {
        self(piece)
    }
}

/// Bytes of a message, handed to an [`Observer`] as the receiver consumes them.
#[derive(Debug, Clone, Copy)]
pub struct Piece<'a> {
    /// The message's id (its index in the root's stream).
    pub msg_id: u64,
    /// The message's length.
    pub msg_len: usize,
    /// Where `bytes` begin in the message.
    pub offset: usize,
    /// The bytes.
    pub bytes: &'a [u8],
    /// Whether `bytes` stay where they are until the next [`Observe::frames_done`], which
    /// names the memory they lie in: the frame being handed in (the frame in order, consumed
    /// as it came; a link that [holds its frames](crate::machine::Machine::frames_done)
    /// keeps it), or the engine's copy of a frame that came behind a gap, consumed while
    /// frames are handed in (its window slot is reused by no frame before the
    /// acknowledgements of this batch leave). Not set for bytes consumed at other times
    /// (a receive posted late, a timer).
    pub held: bool,
}

/// Engine configuration. [`Config::new`] gives the defaults, [`Config::paper`] the queue sizes
/// of the EQA paper. Its `Debug` never shows the key.
#[derive(Clone)]
pub struct Config {
    /// Group id carried by every frame; frames of other groups are dropped.
    pub group: u32,
    /// This member's rank.
    pub rank: Rank,
    /// Number of members.
    pub size: u16,
    /// Largest PDU (header + payload + CRC) the link carries: the MTU.
    pub max_pdu: usize,
    /// Slots of the retransmission buffer, which is also the receive window in frames.
    pub window: usize,
    /// Payload bytes a buffer slot stores (at least the frame payload; the paper profile uses
    /// 1536-byte frame buffers, 24 KB / 16 frames).
    pub frame_buffer: usize,
    /// Bytes pushed in the first frame of a push-pull broadcast.
    pub btp1: usize,
    /// Bytes pushed after the first BTP1 bytes.
    pub btp2: usize,
    /// A receiver acknowledges every this many frames (and when the root asks).
    pub ack_every: usize,
    /// With an acknowledgement tree: a member reports its subtree's position once it has been
    /// quiet this long (restarted whenever it moves). Without a tree receivers keep no timer:
    /// the root's retransmission timer polls them ([`Control::AckPoll`]).
    pub ack_delay: Duration,
    /// A receiver repeats a NACK for a gap that persists this long (doubling each time).
    /// [`Config::new`] gives 2 ms, and 1 ms from [`ACK_TREE_FROM`] members: there the first
    /// repeat goes to the peer (whose link is idle), not the root, and with a thousand
    /// receivers every window waits for the member whose repair was lost (at 1024 members,
    /// 1 % loss: goodput 0.78 of 16 members' with 2 ms, 0.83 with 1 ms).
    pub nack_retry: Duration,
    /// A receiver that finds frames missing asks for them once this many frames followed the
    /// first of them, or `nack_gather_wait` after it found them, whichever comes first: one
    /// NACK (its bitmap runs on for up to 1024 frames) names every gap found meanwhile. 0 (the
    /// default): at once, as the paper's receivers do, for the lowest latency of a repair.
    ///
    /// Why gather: under steady loss a bulk stream has a gap every hundred frames, and each
    /// NACK is a frame the receiver sends and a peer or the root takes in (a system call, a
    /// pass through the switch, a wake-up), for one repair. Asking later costs only the
    /// window's room, which a bulk transfer has (`ethbcast recv` gathers a quarter window).
    pub nack_gather: usize,
    /// The longest a receiver gathers gaps before it asks (see `nack_gather`): what a repair
    /// may wait at the end of a stream, or on a slow one.
    pub nack_gather_wait: Duration,
    /// Initial retransmission timeout per destination.
    pub rto: Duration,
    /// Largest retransmission timeout after back-off.
    pub rto_max: Duration,
    /// A frame asked for by at least this many destinations is re-broadcast once.
    pub rebroadcast_min: usize,
    /// Messages the send queue holds (the SDP's send queue).
    pub send_queue: usize,
    /// Control frames the outbox holds (the SDP's pushed buffer).
    pub outbox: usize,
    /// Bytes a receiver keeps for messages whose receive is not posted yet (pushed buffer).
    pub pushed_buffer: usize,
    /// Posted receives a receive stream holds (the RDP's receive queue).
    pub recv_queue: usize,
    /// Repair requests each destination's LDP queues.
    pub repair_queue: usize,
    /// Largest message accepted from the network (guards against absurd lengths).
    pub max_message: usize,
    /// Deliver every message as it completes, without `post_recv` (streaming use).
    pub auto_post: bool,
    /// Group key: when set, every frame carries a keyed MAC and frames without a valid one
    /// are dropped, so a host on the segment outside the group cannot inject data.
    pub key: Option<crate::secret::Key>,
    /// The application checks every byte it receives end to end, with a digest of its own
    /// over the whole stream (as `ethbcast send`/`recv` do). Then, as with a key, data frames
    /// carry a CRC over their header only ([`Flags::HEADER_CRC`]) and each receiver reads
    /// every payload byte once less (a fifth of a bulk receiver's CPU). The price: a payload
    /// the Ethernet FCS let through corrupted fails the application's check at the end instead
    /// of being repaired. Every member of the group must agree: without a key, a member that
    /// does not say so refuses such frames rather than deliver bytes nobody checks.
    pub end_to_end: bool,
    /// A cache hint for memory the engine writes next: called, per data frame taken in order,
    /// with the place in its message buffer where the frame after the next lands. The I/O
    /// layer installs `ethbcast_sys::prefetch::prefetch` (this crate has no `unsafe`); the
    /// simulator leaves it `None`. Why: a bulk receiver's message buffer is cold when a frame
    /// lands on a host shared by many processes (its last use was a message ago), and the copy
    /// waits for each of its cache lines; asked for two frames ahead, they arrive in time.
    /// Measured on the test-bed (256 MiB to 8 receivers on 2 cores), with the RX ring's own
    /// prefetch, the receivers' CPU fell by a tenth (median of 12 alternated transfers). The
    /// same hint covers frames placed behind a gap and the copies kept in slots. A root hints
    /// the bytes of its message a few frames ahead of those it publishes: a bulk sender's
    /// message was read from its input megabytes ago and has left the cache (with the
    /// hint, its copies took half the samples). The pointer may be past what the buffer holds
    /// (its spare capacity): a prefetch is a hint, never a read.
    pub prefetch: Option<Prefetch>,
    /// Peer repair: a receiver asks a fellow receiver (the next live rank) for a lost frame
    /// first, and the root only if that did not help within the NACK retry interval. Why: with
    /// independent loss at `n` receivers the root's link carries `n` times the loss rate in
    /// point-to-point repairs, which caps bulk goodput; a peer's link is idle; and their NACKs
    /// (about `n` times the loss rate per data frame) would all reach the root. [`Config::new`]
    /// turns it on from [`ACK_TREE_FROM`] members, off below (the paper's model: every repair
    /// comes from the root).
    pub peer_repair: bool,
    /// With peer repair: while fellows ask this member for frames, each message it completes
    /// is held back for a window's worth of frames of its stream (or until the stream has not
    /// moved for 5 ms) before it is delivered, and a fellow's request for a frame of it is
    /// served from the message's own buffer. Without it, the last 256 frames of every message
    /// are copied into their window slots instead, to outlive the delivery: on a lossy
    /// segment, a third of a bulk stream copied twice (a megabyte message is about 720
    /// frames). The price is a later delivery, which a bulk stream does not notice and a
    /// latency-bound group would, and the held messages' memory, which the application would
    /// have freed sooner: `ethbcast send`/`recv` turn it on, [`Config::new`] leaves it off.
    pub peer_hold: bool,
    /// Fan-out of the acknowledgement tree (`proto/tree.rs`): receivers acknowledge to a parent
    /// that reports for its whole subtree, so the root receives about `ack_tree / ack_every`
    /// acknowledgements per data frame whatever the group's size. 0: every receiver
    /// acknowledges to the root, as in the EQA paper. [`Config::new`] turns it on from
    /// [`ACK_TREE_FROM`] members.
    pub ack_tree: u16,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("group", &self.group)
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("max_pdu", &self.max_pdu)
            .field("window", &self.window)
            .field("frame_buffer", &self.frame_buffer)
            .field("btp1", &self.btp1)
            .field("btp2", &self.btp2)
            .field("ack_every", &self.ack_every)
            .field("ack_delay", &self.ack_delay)
            .field("nack_retry", &self.nack_retry)
            .field("nack_gather", &self.nack_gather)
            .field("nack_gather_wait", &self.nack_gather_wait)
            .field("rto", &self.rto)
            .field("rto_max", &self.rto_max)
            .field("rebroadcast_min", &self.rebroadcast_min)
            .field("send_queue", &self.send_queue)
            .field("outbox", &self.outbox)
            .field("pushed_buffer", &self.pushed_buffer)
            .field("recv_queue", &self.recv_queue)
            .field("repair_queue", &self.repair_queue)
            .field("max_message", &self.max_message)
            .field("auto_post", &self.auto_post)
            .field("key", &crate::secret::Redacted(&self.key))
            .field("end_to_end", &self.end_to_end)
            .field("prefetch", &self.prefetch)
            .field("peer_repair", &self.peer_repair)
            .field("peer_hold", &self.peer_hold)
            .field("ack_tree", &self.ack_tree)
            .finish()
    }
}

/// Group size from which [`Config::new`] acknowledges up a tree ([`Config::ack_tree`]): below
/// it the root's acknowledgements per data frame stay few, and a tree would only add a hop.
pub const ACK_TREE_FROM: u16 = 32;

/// The tree's fan-out [`Config::new`] picks for groups of [`ACK_TREE_FROM`] members or more.
pub const ACK_TREE_FANOUT: u16 = 4;

/// The window [`Config::new`] picks: 16 frames (the EQA paper's 24 KB buffer of 1536-byte
/// frames) for groups below [`ACK_TREE_FROM`]; above, 16 frames per level of the
/// acknowledgement tree. Why: the root frees a slot when the report of the last member to
/// have the frame reaches it, one level per hop, and each hop waits in a switch queue behind
/// data; with 16 frames per hop the root still has frames to send while the reports climb.
/// Measured on the simulator (1024 members, 1 % loss, 1 Gbit/s, four roots): goodput 0.29 of
/// 16 members' with 16 frames, 0.78 with 64 (see README, the scale study).
pub fn default_window(size: u16) -> usize {
    if size < ACK_TREE_FROM {
        16
    } else {
        16 * tree::depth(usize::from(size), usize::from(ACK_TREE_FANOUT))
    }
}

/// Largest window (frames in flight per root). Sequence numbers travel as 32 bits and are
/// extended against the receiver's position, which is exact while the window stays far below
/// 2^31; the bound is about memory: each receiver keeps one slot per frame of the window (a
/// 65536-frame window is about 100 MiB per root at a 1500-byte MTU).
pub const MAX_WINDOW: usize = 1 << 16;

impl Config {
    /// Defaults for a member `rank` of a group of `size`.
    pub fn new(group: u32, rank: Rank, size: u16) -> Config {
        Config {
            group,
            rank,
            size,
            max_pdu: 1500,
            window: default_window(size),
            frame_buffer: 0,
            btp1: 80,
            btp2: 780,
            ack_every: 8,
            ack_delay: Duration::from_micros(300),
            nack_retry: if size >= ACK_TREE_FROM {
                Duration::from_millis(1)
            } else {
                Duration::from_millis(2)
            },
            nack_gather: 0,
            nack_gather_wait: Duration::from_millis(2),
            rto: Duration::from_millis(4),
            rto_max: Duration::from_millis(200),
            rebroadcast_min: 2,
            send_queue: 1024,
            outbox: 4096,
            pushed_buffer: 1 << 20,
            recv_queue: 256,
            repair_queue: 64,
            max_message: 1 << 30,
            auto_post: true,
            key: None,
            end_to_end: false,
            prefetch: None,
            peer_repair: size >= ACK_TREE_FROM,
            peer_hold: false,
            ack_tree: if size >= ACK_TREE_FROM {
                ACK_TREE_FANOUT
            } else {
                0
            },
        }
    }

    /// Whether something this member checks anyway covers the payload of data frames (the
    /// key's tag, or the application's end-to-end digest): then their CRC covers the header
    /// only ([`Flags::HEADER_CRC`]).
    pub fn payload_covered(&self) -> bool {
        self.end_to_end || self.key.is_some()
    }

    /// The queue sizes of the EQA paper (section 4): send queue 4 KB, pushed buffer 4 KB on the
    /// send side and 12 KB on the receive side, retransmission buffer 24 KB, receive queue 4 KB,
    /// LDP send queue 4 KB.
    pub fn paper(group: u32, rank: Rank, size: u16) -> Config {
        let mut c = Config::new(group, rank, size);
        c.frame_buffer = paper::FRAME_BUFFER;
        c.window = paper::BUF_BYTES / c.frame_buffer;
        c.send_queue = paper::SEND_QUEUE_BYTES / std::mem::size_of::<send::OutMsg>();
        c.outbox = paper::SEND_PUSHED_BYTES / std::mem::size_of::<Outgoing>();
        c.pushed_buffer = paper::RECV_PUSHED_BYTES;
        c.recv_queue = paper::RECV_QUEUE_BYTES / std::mem::size_of::<recv::Post>();
        c.repair_queue = paper::LDP_QUEUE_BYTES / std::mem::size_of::<Seq>();
        c
    }

    /// Largest payload of one frame.
    pub fn max_payload(&self) -> usize {
        let tag = if self.key.is_some() { wire::TAG_LEN } else { 0 };
        self.max_pdu.saturating_sub(wire::OVERHEAD + tag)
    }

    /// Payload bytes of one buffer slot.
    pub fn slot_payload(&self) -> usize {
        self.frame_buffer.max(self.max_payload())
    }

    /// Whether an engine can run with this configuration ([`Engine::new`] checks it): for a
    /// caller that wants to refuse bad options before it waits for peers.
    pub fn check(&self) -> Result<(), ConfigError> {
        if self.size == 0 || self.size == wire::ALL || self.rank >= self.size {
            return Err(ConfigError::Rank {
                rank: self.rank,
                size: self.size,
            });
        }
        if self.max_payload() < 64 || self.max_payload() > usize::from(u16::MAX) {
            return Err(ConfigError::Mtu(self.max_pdu));
        }
        if self.window == 0 || self.window > MAX_WINDOW {
            return Err(ConfigError::Window(self.window));
        }
        if self.btp1 == 0 || self.btp1 > self.max_payload() {
            return Err(ConfigError::Btp(self.btp1, self.max_payload()));
        }
        if self.ack_every == 0 || self.send_queue == 0 || self.recv_queue == 0 {
            return Err(ConfigError::Zero);
        }
        if self.nack_gather > self.window / 2 {
            return Err(ConfigError::Gather(self.nack_gather, self.window));
        }
        Ok(())
    }
}

/// A configuration the engine cannot run with.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConfigError {
    /// Rank outside the group, or an empty group.
    #[error("rank {rank} is not in a group of {size} (ranks are 0..size, size < 65535)")]
    Rank {
        /// Rank given.
        rank: Rank,
        /// Group size given.
        size: u16,
    },
    /// MTU too small or too large.
    #[error("MTU {0} gives no usable payload (need 104..=65575 bytes)")]
    Mtu(usize),
    /// Window size out of range.
    #[error("window of {0} frames is out of range 1..={MAX_WINDOW}")]
    Window(usize),
    /// BTP1 must fit one frame.
    #[error("BTP1 of {0} bytes must be between 1 and the frame payload of {1} bytes")]
    Btp(usize, usize),
    /// A queue or threshold set to zero.
    #[error("ack_every, send_queue and recv_queue must be at least 1")]
    Zero,
    /// Gathering gaps for longer than half the window: the window would fill before the
    /// receiver asks for its lost frames.
    #[error("gathering gaps for {0} frames is more than half the window of {1} frames")]
    Gather(usize, usize),
}

/// Why [`Engine::bcast`] refused a message.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SendError {
    /// The send queue is full: drive the engine until earlier messages leave it.
    #[error("send queue full ({0} messages): let earlier broadcasts progress first")]
    QueueFull(usize),
    /// Larger than `max_message`.
    #[error("message of {len} bytes exceeds the maximum of {max}")]
    TooLong {
        /// Message length.
        len: usize,
        /// Configured maximum.
        max: usize,
    },
    /// Every other member has been evicted.
    #[error("no live receivers left in the group")]
    NoReceivers,
    /// The session ended: a counter of this member's frames reached its last value.
    #[error(transparent)]
    SessionEnded(#[from] SessionEnded),
}

/// Why a member's session ended: one of the counters that frames of the session carry, which
/// receivers compare to refuse replays, reached its last value. A session ends instead of
/// letting a counter wrap, after which a recording from early in the session would pass for
/// a new frame. Open the group again (a new join, a new session): the new session's id and
/// key make every recording of this one foreign.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum SessionEnded {
    /// This member sent the last control counter of the session (`u32::MAX`).
    #[error(
        "the session ended: this member's control counter reached its last value \
         (2^32 - 1 control frames); open the group again for a new session"
    )]
    ControlCounter,
    /// This member's broadcasts used the last sequence number of the session.
    #[error(
        "the session ended: this member's broadcasts used every sequence number \
         (2^32 frames); open the group again for a new session"
    )]
    Sequence,
}

/// Why [`Engine::post_recv`] refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PostError {
    /// The rank is not a member (or is this member).
    #[error("rank {0} is not another member of the group")]
    NotMember(Rank),
    /// Too many receives posted for this root.
    #[error("receive queue full ({0} posted receives)")]
    QueueFull(usize),
    /// The root has been evicted.
    #[error("root {0} has been evicted")]
    Evicted(Rank),
}

/// Why a received frame was dropped. Every drop is counted in [`Stats::drops`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum Drop {
    /// The bytes are not a valid frame.
    #[error("malformed frame: {0}")]
    Malformed(#[from] WireError),
    /// A frame of another group on the same segment.
    #[error("frame of foreign group {0:#x}")]
    ForeignGroup(u32),
    /// Source rank outside the group.
    #[error("source rank {0} is not a member")]
    NotMember(Rank),
    /// Our own frame looped back.
    #[error("own frame")]
    Own,
    /// Addressed to another member.
    #[error("frame for rank {0}")]
    NotForMe(Rank),
    /// From a member that has been evicted.
    #[error("frame from evicted rank {0}")]
    Evicted(Rank),
    /// Data already delivered (a duplicate or a late repair).
    #[error("stale sequence {0}")]
    Stale(Seq),
    /// Data beyond the receive window: a confused or forged root.
    #[error("sequence {0} beyond the receive window")]
    FarFuture(Seq),
    /// Already held in the receive window.
    #[error("duplicate sequence {0}")]
    Duplicate(Seq),
    /// Contradicts the stream (message boundaries, lengths): counted and discarded.
    #[error("frame contradicts the stream: {0}")]
    Protocol(&'static str),
    /// The receive window slot cannot be filled now (pushed buffer full): repaired later.
    #[error("no room for unposted data")]
    NoRoom,
    /// A frame of a message longer than this member takes ([`Config::max_message`]): nothing
    /// is reserved or kept for it.
    #[error("a message of {len} bytes, longer than the {max} this member takes")]
    TooLong {
        /// The length the frame claims.
        len: u32,
        /// The longest message taken.
        max: usize,
    },
    /// The group has a key and the frame's keyed MAC is missing or wrong.
    #[error("missing or invalid keyed MAC")]
    BadMac,
    /// A control frame whose fields contradict its kind.
    #[error("bad control frame: {0}")]
    BadControl(#[from] ControlError),
    /// A control frame whose counter was seen before or is too old: a replay.
    #[error("replayed control frame")]
    Replayed,
}

/// Counters of one engine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Data frames broadcast for the first time.
    pub data_frames: u64,
    /// Repair frames sent (point-to-point or re-broadcast).
    pub repair_frames: u64,
    /// Of which re-broadcasts.
    pub rebroadcasts: u64,
    /// Members switched to point-to-point delivery (fail-over).
    pub failovers: u64,
    /// ACK frames sent.
    pub ack_frames: u64,
    /// NACK frames sent.
    pub nack_frames: u64,
    /// Pull requests sent.
    pub pull_frames: u64,
    /// ACK, NACK, pull and tree acknowledgement frames received as root: the root's inbound
    /// control traffic.
    pub acks_handled: u64,
    /// Of `acks_handled`: NACKs (repair requests that reached the root).
    pub nacks_handled: u64,
    /// Of `acks_handled`: acknowledgements up the tree (from the root's children).
    pub tree_acks_handled: u64,
    /// Of `acks_handled`: answers to the root's probes and polls (acknowledgements sent
    /// straight to it).
    pub probe_answers_handled: u64,
    /// Acknowledgement polls sent as root ([`Control::AckPoll`]).
    pub ack_polls: u64,
    /// Acknowledgements sent up the acknowledgement tree (besides `ack_frames`, the ones
    /// sent to a root directly).
    pub tree_ack_frames: u64,
    /// Tree acknowledgements received from a member in another view or not a child here,
    /// and ignored.
    pub tree_acks_ignored: u64,
    /// Of the NACK frames sent, those sent to a peer (peer repair).
    pub peer_nacks: u64,
    /// Repair frames served to peers from this member's copy of a root's stream.
    pub peer_repairs: u64,
    /// Messages delivered to the application.
    pub delivered: u64,
    /// Bytes delivered to the application.
    pub delivered_bytes: u64,
    /// Messages handed to `bcast`.
    pub sent_msgs: u64,
    /// Dropped frames by reason.
    pub drops: DropStats,
}

/// Dropped frames by reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DropStats {
    /// Truncated frames.
    pub truncated: u64,
    /// CRC mismatches.
    pub bad_crc: u64,
    /// Unknown version.
    pub bad_version: u64,
    /// Unknown kind.
    pub unknown_kind: u64,
    /// Inconsistent header.
    pub bad_geometry: u64,
    /// Other groups' frames.
    pub foreign_group: u64,
    /// Not from a member.
    pub not_member: u64,
    /// Own frames.
    pub own: u64,
    /// Addressed to someone else.
    pub not_for_me: u64,
    /// From evicted members.
    pub evicted: u64,
    /// Already delivered.
    pub stale: u64,
    /// Beyond the window.
    pub far_future: u64,
    /// Already held.
    pub duplicate: u64,
    /// Contradicting the stream.
    pub protocol: u64,
    /// No room for unposted data.
    pub no_room: u64,
    /// Frames of messages longer than `max_message`.
    pub too_long: u64,
    /// Missing or invalid keyed MAC.
    pub bad_mac: u64,
    /// Control frames whose fields contradict their kind.
    pub bad_control: u64,
    /// Control frames refused as replays.
    pub replayed: u64,
}

impl DropStats {
    fn count(&mut self, d: &Drop) {
        let c = match d {
            Drop::Malformed(WireError::Truncated { .. }) => &mut self.truncated,
            Drop::Malformed(WireError::BadCrc) => &mut self.bad_crc,
            Drop::Malformed(WireError::BadVersion(_)) => &mut self.bad_version,
            Drop::Malformed(WireError::UnknownKind(_)) => &mut self.unknown_kind,
            Drop::Malformed(_) => &mut self.bad_geometry,
            Drop::ForeignGroup(_) => &mut self.foreign_group,
            Drop::NotMember(_) => &mut self.not_member,
            Drop::Own => &mut self.own,
            Drop::NotForMe(_) => &mut self.not_for_me,
            Drop::Evicted(_) => &mut self.evicted,
            Drop::Stale(_) => &mut self.stale,
            Drop::FarFuture(_) => &mut self.far_future,
            Drop::Duplicate(_) => &mut self.duplicate,
            Drop::Protocol(_) => &mut self.protocol,
            Drop::NoRoom => &mut self.no_room,
            Drop::TooLong { .. } => &mut self.too_long,
            Drop::BadMac => &mut self.bad_mac,
            Drop::BadControl(_) => &mut self.bad_control,
            Drop::Replayed => &mut self.replayed,
        };
        *c += 1;
    }

    /// Sum of all drops.
    pub fn total(&self) -> u64 {
        self.truncated
            + self.bad_crc
            + self.bad_version
            + self.unknown_kind
            + self.bad_geometry
            + self.foreign_group
            + self.not_member
            + self.own
            + self.not_for_me
            + self.evicted
            + self.stale
            + self.far_future
            + self.duplicate
            + self.protocol
            + self.no_room
            + self.too_long
            + self.bad_mac
            + self.bad_control
            + self.replayed
    }
}

/// Where a frame goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dest {
    /// The broadcast address: every member.
    All,
    /// One member.
    Rank(Rank),
}

/// A frame [`Engine::poll_transmit`] wrote into the caller's buffer, addressed by rank.
pub type Transmit = crate::machine::Transmit<Dest>;

/// A whole message of a root's stream, as it is delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The root that broadcast it.
    pub root: Rank,
    /// Its position in the root's stream (0, 1, 2, ...).
    pub msg_id: u64,
    /// The message.
    pub data: Vec<u8>,
}

/// What the engine tells the application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A whole message from its root, exactly once and in the root's order.
    Delivered(Message),
    /// Every live destination has acknowledged this member's message `msg_id`.
    Stable {
        /// The message id returned by `bcast`.
        msg_id: u64,
    },
    /// A posted receive was too small for the message (MPI's truncation error). The message
    /// is consumed.
    Truncated {
        /// The root.
        root: Rank,
        /// The message.
        msg_id: u64,
        /// Its real length.
        len: usize,
        /// What the posted receive allowed.
        max: usize,
    },
    /// A message longer than its root's keep limit ([`Engine::keep_at_most`]): consumed,
    /// its bytes handed to the observer alone, in order, exactly once.
    Observed {
        /// The root.
        root: Rank,
        /// The message.
        msg_id: u64,
        /// Its length.
        len: usize,
    },
    /// A control message for the layers above (heartbeat, join, barrier, evict, ping, pong,
    /// notice).
    Control {
        /// Sender rank.
        src: Rank,
        /// The message.
        msg: Control,
        /// Whether its control counter advanced the sender's replay window (a sign that the
        /// sender spoke lately); `false` for a late frame taken once from inside the window,
        /// which a third party may have held back and replayed.
        fresh: bool,
    },
}

/// A frame waiting in the outbox: a control message of this member's own, or a frame of a
/// root's stream that this member relays (peer repair), whose source stays the root.
#[derive(Debug, Clone)]
pub(crate) enum Outgoing {
    /// A control message from this member.
    Own {
        /// Destination.
        dst: Dest,
        /// The message.
        msg: Control,
    },
    /// A data frame of another root's stream, relayed point to point.
    Relay {
        /// Destination.
        dst: Dest,
        /// Its header (source: the root).
        repr: Repr,
        /// Its payload.
        payload: Vec<u8>,
    },
}

impl Outgoing {
    /// A control message to `rank`.
    pub(crate) fn to(rank: Rank, msg: Control) -> Outgoing {
        Outgoing::Own {
            dst: Dest::Rank(rank),
            msg,
        }
    }

    /// Counts this frame, about to be queued, in `stats`.
    fn count(&self, stats: &mut Stats) {
        match self {
            Outgoing::Relay { .. } => stats.peer_repairs += 1,
            Outgoing::Own { msg, .. } => match msg {
                Control::Ack { .. } => stats.ack_frames += 1,
                Control::TreeAck { .. } => stats.tree_ack_frames += 1,
                Control::Nack { .. } => stats.nack_frames += 1,
                Control::PeerNack { unheld, .. } => {
                    stats.nack_frames += 1;
                    if !unheld {
                        stats.peer_nacks += 1;
                    }
                }
                Control::Pull { .. } => stats.pull_frames += 1,
                _ => {}
            },
        }
    }
}

/// One member's protocol engine.
#[derive(Debug)]
pub struct Engine {
    cfg: Config,
    tx: Sender,
    rx: Vec<Option<Box<Receiver>>>,
    /// The roots whose streams have an observer ([`Engine::observe`]).
    observed: Vec<Rank>,
    /// The next timeout of every receive stream that has one: `(deadline, root)`, kept in step
    /// with the streams after each call into them, so that finding the earliest timer and
    /// firing the due ones never visits the streams that are quiet.
    rx_timers: BTreeSet<(Instant, Rank)>,
    live: Vec<bool>,
    /// Whose streams this member takes, by rank ([`Engine::take_streams_from`]).
    takes: Vec<bool>,
    /// When each member last gave a sign of life ([`Engine::last_heard`]).
    heard: Vec<Option<Instant>>,
    /// The view (a hash of the evicted set) the acknowledgement trees are laid out in.
    view: u32,
    /// This member's acknowledgement tree as a root (made when first needed, per view).
    root_tree: Option<tree::Tree>,
    outbox: VecDeque<Outgoing>,
    /// The control counter of the last control frame sent (see [`wire::control::counter`]).
    ctl_ctr: u32,
    /// The control counters seen lately from each member, to refuse replays.
    replay: Vec<ReplayWindow>,
    /// Set by [`Engine::abandon`]: only control frames leave from then on.
    abandoned: bool,
    /// Set once a counter of this member's frames reached its last value.
    ended: Option<SessionEnded>,
    events: VecDeque<Event>,
    stats: Stats,
}

impl Engine {
    /// Creates the engine of member `cfg.rank`.
    pub fn new(cfg: Config) -> Result<Engine, ConfigError> {
        cfg.check()?;
        let n = usize::from(cfg.size);
        Ok(Engine {
            tx: Sender::new(&cfg),
            rx: (0..n).map(|_| None).collect(),
            observed: Vec::new(),
            rx_timers: BTreeSet::new(),
            view: tree::view_of(&vec![true; n]),
            root_tree: None,
            live: vec![true; n],
            takes: vec![true; n],
            heard: vec![None; n],
            outbox: VecDeque::with_capacity(cfg.outbox),
            ctl_ctr: 0,
            replay: vec![ReplayWindow::default(); n],
            abandoned: false,
            ended: None,
            events: VecDeque::new(),
            stats: Stats::default(),
            cfg,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }
    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }
    /// The root side (buffer, cursors), for inspection.
    pub fn sender(&self) -> &Sender {
        &self.tx
    }
    /// Whether some stream holds frames this member has not acknowledged to their root (see
    /// [`Control::AckPoll`]).
    pub fn owes_acks(&self) -> bool {
        self.rx.iter().flatten().any(|r| r.owes_ack())
    }

    /// Acknowledges to every root what this member holds of its stream and has not
    /// acknowledged yet, now rather than when the root asks: for a member about to leave.
    pub fn ack_all(&mut self, now: Instant) {
        for root in 0..self.rx.len() {
            if let Some(rx) = self.rx[root].as_deref_mut() {
                rx.ack_held(now);
                self.collect_rx(root as Rank);
            }
        }
    }
    /// Heap bytes of the engine's buffers: its receive streams ([`Receiver::heap_bytes`]) and
    /// its send side without the per-destination cursors.
    pub fn heap_bytes(&self) -> usize {
        self.tx.heap_bytes_without_dests()
            + self
                .rx
                .iter()
                .flatten()
                .map(|r| r.heap_bytes())
                .sum::<usize>()
    }
    /// The receive stream of `root`, if it has been heard from.
    pub fn receiver(&self, root: Rank) -> Option<&Receiver> {
        self.rx.get(usize::from(root)).and_then(|r| r.as_deref())
    }
    /// The fellow receiver this member asks for lost frames of `root`'s stream (peer repair),
    /// if any: the one member whose relayed repairs of that stream are expected.
    pub fn repair_peer(&self, root: Rank) -> Option<Rank> {
        self.receiver(root).and_then(Receiver::peer)
    }
    /// When `rank` last gave a sign of life: a frame of it passed every check of
    /// [`Engine::handle_frame`] (CRC, group, key, membership, destination) and proved that it
    /// spoke then. Frames of other groups, garbage and forgeries the key rejects are no such
    /// sign; nor are replays that pass the checks: a control frame whose counter does not
    /// advance the replay window ([`crate::wire::Admit::Late`]) or a duplicate data frame. A
    /// repair sent point to point counts for nobody here: a fellow member may have relayed it
    /// with the root as its source, and only the layer that sees the Ethernet source can tell
    /// who spoke (see `Member::handle_frame`).
    pub fn last_heard(&self, rank: Rank) -> Option<Instant> {
        self.heard.get(usize::from(rank)).copied().flatten()
    }
    /// Whether this member's session ended, and why: its control counter reached its last
    /// value (no control frame leaves any more) or its broadcasts used every sequence number
    /// (no broadcast is taken any more).
    pub fn session_ended(&self) -> Option<SessionEnded> {
        self.ended
    }

    /// Test support: continues this member's control counter from `ctr`, as if the control
    /// frames in between had been sent (a session's end is otherwise billions of frames away).
    #[doc(hidden)]
    pub fn skip_control_counter_to(&mut self, ctr: u32) {
        self.ctl_ctr = self.ctl_ctr.max(ctr);
    }

    /// Test support: counts `frames` sequence numbers as used, as if broadcasts had used them.
    #[doc(hidden)]
    pub fn skip_sequences(&mut self, frames: u64) {
        self.tx.skip_sequences(frames);
    }

    /// Takes the streams of `roots` alone (every member's by default): a data frame, an
    /// acknowledgement poll or a pull poll of another rank's stream is dropped before any
    /// receive stream is made for it. For a member that receives from one root (a stream's
    /// receivers): without a key, a host speaking as a fellow member makes it reserve nothing.
    pub fn take_streams_from(&mut self, roots: &[Rank]) {
        for (r, t) in self.takes.iter_mut().enumerate() {
            *t = roots.contains(&(r as Rank));
        }
    }

    /// Whether `rank` is still a live member.
    pub fn is_live(&self, rank: Rank) -> bool {
        self.live.get(usize::from(rank)).copied().unwrap_or(false)
    }

    /// Broadcasts `data` to every other member; returns its message id. The message is queued
    /// and its frames go out as [`Engine::poll_transmit`] is called.
    pub fn bcast(&mut self, now: Instant, data: Vec<u8>, algo: Algo) -> Result<u64, SendError> {
        if let Some(e) = self.ended {
            return Err(e.into());
        }
        if data.len() > self.cfg.max_message {
            return Err(SendError::TooLong {
                len: data.len(),
                max: self.cfg.max_message,
            });
        }
        let id = self
            .tx
            .enqueue(&self.cfg, data, algo, &self.live)
            .inspect_err(|e| {
                if let SendError::SessionEnded(e) = e {
                    self.ended = Some(*e);
                }
            })?;
        self.stats.sent_msgs += 1;
        self.tx.fill(&self.cfg, now, &self.live);
        Ok(id)
    }

    /// Posts a receive for the next message of `root` that has not been posted for yet,
    /// accepting up to `max_len` bytes. Needed unless `auto_post` is set.
    pub fn post_recv(&mut self, now: Instant, root: Rank, max_len: usize) -> Result<(), PostError> {
        if root >= self.cfg.size || root == self.cfg.rank {
            return Err(PostError::NotMember(root));
        }
        if !self.live[usize::from(root)] {
            return Err(PostError::Evicted(root));
        }
        let rx = self.rx_mut(now, root);
        rx.post(max_len)?;
        rx.progress(now);
        self.collect_rx(root);
        Ok(())
    }

    /// Hands `observer` the bytes of `root`'s messages as this member consumes them: in
    /// stream order, each byte once, every message from offset 0 to its end, one frame's
    /// payload per call, whether a receive is posted for the message or not. The payload is
    /// still in the cache then: a digest of the stream taken here reads each byte warm, where
    /// one taken of the delivered message reads it again from memory (measured on the
    /// test-bed, 8 bulk receivers: the digest's samples fell by two fifths, and their CPU by
    /// 7%, median of 10 alternated transfers). What is observed is what is
    /// consumed, which is what is delivered, in the same order, except a message delivered
    /// [`Event::Truncated`] or [`Event::Observed`] (its bytes are observed, not kept) and the
    /// end of a stream cut short (a member that leaves).
    pub fn observe(&mut self, now: Instant, root: Rank, observer: Observer) {
        self.rx_mut(now, root).set_observer(observer);
        if !self.observed.contains(&root) {
            self.observed.push(root);
        }
    }

    /// Keeps at most `keep` bytes of `root`'s messages: a longer one is consumed and handed
    /// to the observer (see [`Engine::observe`]) and not kept, and is delivered as
    /// [`Event::Observed`], its length alone. For an application that takes a stream's bytes
    /// from its observer (a file receiver writing straight from the link's frames): the copy
    /// into a message buffer it would never read is not made.
    pub fn keep_at_most(&mut self, now: Instant, root: Rank, keep: usize) {
        self.rx_mut(now, root).keep_at_most(keep);
    }

    /// Whether some root's stream has an observer ([`Engine::observe`]).
    pub fn is_observed(&self) -> bool {
        !self.observed.is_empty()
    }

    /// Frames of `root`'s stream that would be copied into the window (behind a gap, or kept
    /// for fellows' requests) stay in the link instead, for a link that retains its frames
    /// after a batch (see [`crate::machine::BatchEnd`]): they are read there when their turn
    /// comes or a fellow asks, and copied only if still waiting when the link gives them
    /// back. For a receiver whose observer writes from the link's frames (a bulk receiver
    /// into `/dev/null`): under steady loss nearly every frame comes behind a gap, and the
    /// copy of each was most of its cost.
    pub fn leave_in_link(&mut self, now: Instant, root: Rank) {
        self.rx_mut(now, root).set_in_link(true);
    }

    /// A batch of frames ends (see [`crate::machine::Machine::frames_done`]): frames left in
    /// the link are consumed and served, the observers told, and what leaves the link and is
    /// still needed copied.
    pub fn frames_done(&mut self, now: Instant, end: crate::machine::BatchEnd<'_>) {
        for &root in &self.observed {
            if let Some(rx) = self.rx[usize::from(root)].as_deref_mut() {
                rx.frames_done(now, end);
            }
        }
    }

    fn rx_mut(&mut self, now: Instant, root: Rank) -> &mut Receiver {
        if self.rx[usize::from(root)].is_none() {
            let mut rx = Receiver::new(&self.cfg, root);
            rx.set_peer(self.peer_for(root));
            rx.set_tree(now, self.tree_link(root));
            self.rx[usize::from(root)] = Some(Box::new(rx));
        }
        self.rx[usize::from(root)]
            .as_deref_mut()
            .expect("just made")
    }

    /// This member's place in the acknowledgement tree of `root`'s stream, in the current view.
    fn tree_link(&self, root: Rank) -> Option<recv::TreeLink> {
        if self.cfg.ack_tree == 0 {
            return None;
        }
        let t = tree::Tree::new(root, &self.live, self.cfg.ack_tree);
        let parent = t.parent(self.cfg.rank)?;
        Some(recv::TreeLink::new(
            parent,
            t.children(self.cfg.rank),
            self.view,
            self.cfg.ack_delay * 3,
            self.cfg.rto * 3 / 4,
        ))
    }

    /// The fellow receiver this member asks first for frames of `root`'s stream lost here:
    /// the next live rank after this one, other than the root (peer repair).
    fn peer_for(&self, root: Rank) -> Option<Rank> {
        if !self.cfg.peer_repair {
            return None;
        }
        let n = self.cfg.size;
        (1..n)
            .map(|k| ((u32::from(self.cfg.rank) + u32::from(k)) % u32::from(n)) as Rank)
            .find(|&r| r != root && self.live[usize::from(r)])
    }

    fn collect_rx(&mut self, root: Rank) {
        if let Some(rx) = self.rx[usize::from(root)].as_deref_mut() {
            while let Some(ev) = rx.take_event() {
                if let Event::Delivered(Message { data, .. }) = &ev {
                    self.stats.delivered += 1;
                    self.stats.delivered_bytes += data.len() as u64;
                }
                self.events.push_back(ev);
            }
            while let Some(c) = rx.take_control() {
                c.count(&mut self.stats);
                self.outbox.push_back(c);
            }
            let next = rx.next_timeout();
            if next != rx.armed {
                if let Some(t) = rx.armed {
                    self.rx_timers.remove(&(t, root));
                }
                if let Some(t) = next {
                    self.rx_timers.insert((t, root));
                }
                rx.armed = next;
            }
        }
    }

    /// Queues a control message of the layers above (heartbeat, barrier, ...).
    pub fn send_control(&mut self, dst: Dest, msg: Control) -> Result<(), WireError> {
        if msg.payload_len() > self.cfg.max_payload() {
            return Err(WireError::PayloadTooLong(msg.payload_len()));
        }
        self.outbox.push_back(Outgoing::Own { dst, msg });
        Ok(())
    }

    /// Handles one received PDU. Drops are counted and returned; they are never fatal.
    pub fn handle_frame(&mut self, now: Instant, pdu: &[u8]) -> Result<(), Drop> {
        let r = Frame::new_checked(pdu)
            .map_err(Drop::from)
            .and_then(|f| self.handle_checked_inner(now, &f));
        if let Err(d) = &r {
            self.stats.drops.count(d);
        }
        r
    }

    /// Handles a frame its caller already checked ([`Frame::new_checked`]), so that a layer
    /// that demultiplexes frames by their header checks each one once.
    pub fn handle_checked(&mut self, now: Instant, frame: &Frame<&[u8]>) -> Result<(), Drop> {
        let r = self.handle_checked_inner(now, frame);
        if let Err(d) = &r {
            self.stats.drops.count(d);
        }
        r
    }

    fn handle_checked_inner(&mut self, now: Instant, frame: &Frame<&[u8]>) -> Result<(), Drop> {
        if frame.group() != self.cfg.group {
            return Err(Drop::ForeignGroup(frame.group()));
        }
        if let Some(key) = &self.cfg.key {
            if !frame.verify(key) {
                return Err(Drop::BadMac);
            }
        }
        let src = frame.src();
        if src >= self.cfg.size {
            return Err(Drop::NotMember(src));
        }
        if src == self.cfg.rank {
            return Err(Drop::Own);
        }
        let dst = frame.dst();
        if dst != wire::ALL && dst != self.cfg.rank {
            return Err(Drop::NotForMe(dst));
        }
        if !self.live[usize::from(src)] {
            return Err(Drop::Evicted(src));
        }
        if frame.kind().is_data() {
            if frame.flags().contains(Flags::HEADER_CRC) && !self.cfg.payload_covered() {
                // Nothing this member checks covers the payload: delivering it would hand
                // the application bytes no check has seen.
                return Err(Drop::Protocol(
                    "payload covered by neither a key nor an end-to-end check",
                ));
            }
            if !self.takes[usize::from(src)] {
                return Err(Drop::Protocol("a stream this member does not take"));
            }
            let repr = Repr::parse(frame);
            let r = self.rx_mut(now, src).on_data(now, &repr, frame.payload());
            self.collect_rx(src);
            // A duplicate or stale data frame (a replay, say) is no sign of the root's life,
            // nor is a point-to-point repair: a fellow member may have relayed it.
            let relayed = frame.kind() == Kind::Repair && frame.flags().contains(Flags::P2P);
            if r.is_ok() && !relayed {
                self.heard[usize::from(src)] = Some(now);
            }
            return r;
        }
        let fresh = match self.replay[usize::from(src)].admit(wire::control::counter(frame)) {
            Admit::Refused => return Err(Drop::Replayed),
            Admit::Late => false,
            Admit::Newest => true,
        };
        if fresh {
            self.heard[usize::from(src)] = Some(now);
        }
        let msg = Control::parse(frame)?;
        self.handle_control(now, src, dst, msg, fresh)
    }

    /// Handles a parsed control message from `src` addressed to `dst` (this member or all).
    fn handle_control(
        &mut self,
        now: Instant,
        src: Rank,
        dst: Rank,
        msg: Control,
        fresh: bool,
    ) -> Result<(), Drop> {
        let to_me = dst == self.cfg.rank;
        if matches!(msg, Control::AckPoll | Control::PullPoll { .. })
            && !self.takes[usize::from(src)]
        {
            // Polls for a stream: its root's alone.
            return Err(Drop::Protocol("a stream this member does not take"));
        }
        let feedback = match msg {
            Control::AckPoll => {
                // The root's timer fired with frames of its stream not acknowledged by us.
                let rx = self.rx_mut(now, src);
                rx.on_ack_poll(now);
                self.collect_rx(src);
                return Ok(());
            }
            Control::PullPoll { msg_id, designated } => {
                // The root polls its designated receiver for a lost pull request.
                let rx = self.rx_mut(now, src);
                rx.on_pull_poll(msg_id, designated);
                self.collect_rx(src);
                return Ok(());
            }
            Control::PeerNack {
                root,
                base,
                missing,
                unheld,
                more,
            } => {
                // A fellow receiver lost frames of a root's stream: serve those still held.
                if !to_me || root >= self.cfg.size || root == self.cfg.rank {
                    return Err(Drop::Protocol("peer NACK for a bad root or member"));
                }
                let budget = self.cfg.outbox.saturating_sub(self.outbox.len());
                if let Some(rx) = self.rx[usize::from(root)].as_deref_mut() {
                    if unheld {
                        rx.on_unheld(now, base, missing, &more, src);
                    } else {
                        rx.serve_peer(base, missing, &more, src, budget);
                    }
                    self.collect_rx(root);
                } else if !unheld
                    && nack_offsets(missing, &more).next().is_some()
                    && self.outbox.len() < self.cfg.outbox
                {
                    // No stream of that root here: nothing held.
                    let reply = recv::unheld_reply(src, root, base, missing, more);
                    reply.count(&mut self.stats);
                    self.outbox.push_back(reply);
                }
                return Ok(());
            }
            Control::TreeAck {
                root,
                next,
                laggard,
                view,
            } => {
                if !to_me {
                    return Err(Drop::NotForMe(dst));
                }
                self.on_tree_ack(now, src, root, next, laggard, view);
                return Ok(());
            }
            Control::Ack { next, seen } => send::Feedback::Ack { next, seen },
            Control::Nack {
                base,
                missing,
                next,
                more,
            } => send::Feedback::Nack {
                base,
                missing,
                next,
                more,
            },
            Control::Pull { msg_id, next } => send::Feedback::Pull { msg_id, next },
            msg => {
                self.events.push_back(Event::Control { src, msg, fresh });
                return Ok(());
            }
        };
        if !to_me {
            return Err(Drop::NotForMe(dst));
        }
        self.stats.acks_handled += 1;
        match feedback {
            send::Feedback::Nack { .. } => self.stats.nacks_handled += 1,
            send::Feedback::Ack { seen: Some(_), .. } => self.stats.probe_answers_handled += 1,
            _ => {}
        }
        self.tx
            .on_feedback(&self.cfg, now, src, &feedback, &self.live);
        self.collect_tx();
        Ok(())
    }

    /// A report of `src` up the acknowledgement tree of `root`'s stream: as the root, every
    /// member of its subtree has everything before `next`; as a parent, one of the children's
    /// reports.
    fn on_tree_ack(
        &mut self,
        now: Instant,
        src: Rank,
        root: Rank,
        next: u32,
        laggard: Rank,
        view: u32,
    ) {
        if root == self.cfg.rank {
            self.stats.acks_handled += 1;
            self.stats.tree_acks_handled += 1;
            if view != self.view || self.cfg.ack_tree == 0 {
                self.stats.tree_acks_ignored += 1;
                return;
            }
            let t = self
                .root_tree
                .get_or_insert_with(|| tree::Tree::new(root, &self.live, self.cfg.ack_tree));
            if t.parent(src) != Some(root) {
                self.stats.tree_acks_ignored += 1;
                return;
            }
            let covered = t.subtree(src);
            self.tx
                .on_tree_ack(&self.cfg, now, src, &covered, next, laggard, &self.live);
            self.collect_tx();
            return;
        }
        let taken = match self.rx.get_mut(usize::from(root)) {
            Some(Some(rx)) => rx.on_report(now, src, next, laggard, view),
            _ => false,
        };
        if taken {
            self.collect_rx(root);
        } else {
            self.stats.tree_acks_ignored += 1;
        }
    }

    fn collect_tx(&mut self) {
        while let Some(id) = self.tx.take_stable() {
            self.events.push_back(Event::Stable { msg_id: id });
        }
    }

    /// Lets time pass: fires due acknowledgement, NACK and retransmission timers.
    pub fn handle_timeout(&mut self, now: Instant) {
        // The streams whose timer is due, in rank order.
        let mut due = Vec::new();
        while let Some(&(t, root)) = self.rx_timers.first() {
            if t > now {
                break;
            }
            self.rx_timers.pop_first();
            due.push(root);
        }
        due.sort_unstable();
        for root in due {
            if let Some(rx) = self.rx[usize::from(root)].as_deref_mut() {
                rx.armed = None;
                rx.on_timeout(now);
            }
            self.collect_rx(root);
        }
        self.tx.on_timeout(&self.cfg, now, &self.live);
    }

    /// The earliest instant at which [`Engine::handle_timeout`] has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let rx = self.rx_timers.first().map(|&(t, _)| t);
        match (rx, self.tx.next_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// True if frames are waiting to be sent.
    pub fn has_transmit(&self) -> bool {
        !self.outbox.is_empty() || self.tx.has_transmit()
    }

    /// True if frames of this member's own stream (fresh data or repairs) are waiting to be
    /// sent, as opposed to control frames only (acknowledgements, requests).
    pub fn has_data_to_send(&self) -> bool {
        self.tx.has_transmit()
    }

    /// Writes the next frame to send into `buf` (at least `max_pdu` bytes). Control frames go
    /// first, then repairs, then fresh data.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let mut t = self.poll_transmit_plain(now, buf)?;
        if let Some(key) = &self.cfg.key {
            t.len = wire::seal(key, buf, t.len).ok()?;
        }
        Some(t)
    }

    fn poll_transmit_plain(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        if let Some(c) = self.outbox.pop_front() {
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
        if self.abandoned {
            return None;
        }
        if let Some((designated, poll)) = self.tx.take_pull_poll(&self.cfg, &self.live) {
            return self.emit_control(Dest::Rank(designated), &poll, buf);
        }
        if let Some(dst) = self.tx.take_ack_poll() {
            self.stats.ack_polls += 1;
            return self.emit_control(dst, &Control::AckPoll, buf);
        }
        let t = self
            .tx
            .poll_transmit(&self.cfg, now, buf, &self.live, &mut self.stats);
        self.collect_tx();
        t
    }

    /// Writes a control message of this member's own, with the next control counter.
    fn emit_control(&mut self, dst: Dest, msg: &Control, buf: &mut [u8]) -> Option<Transmit> {
        let to = match dst {
            Dest::All => wire::ALL,
            Dest::Rank(r) => r,
        };
        // Counters start at 1 and end the session at `u32::MAX` rather than wrap.
        let Some(ctr) = self.ctl_ctr.checked_add(1) else {
            self.ended.get_or_insert(SessionEnded::ControlCounter);
            return None;
        };
        self.ctl_ctr = ctr;
        let len = msg
            .emit(self.cfg.group, self.cfg.rank, to, self.ctl_ctr, buf)
            .ok()?;
        Some(Transmit { dst, len })
    }

    /// Stops sending broadcast data and repairs for good: only control frames leave from now
    /// on. Why: a root that aborts must tell its receivers so, and on a saturated link its
    /// last data frames would crowd that tell out of the switch's queues.
    pub fn abandon(&mut self) {
        self.abandoned = true;
    }

    /// The next event for the application.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Removes `rank` from the group: its references in the buffer are released so that
    /// broadcasts complete for the survivors, and its frames are dropped from now on.
    /// A message from it that was not complete is never delivered.
    pub fn evict(&mut self, now: Instant, rank: Rank) -> bool {
        let Some(l) = self.live.get_mut(usize::from(rank)) else {
            return false;
        };
        if !*l || rank == self.cfg.rank {
            return false;
        }
        *l = false;
        // Its messages that were complete (held back for fellows' requests) are still
        // delivered.
        if let Some(rx) = self.rx[usize::from(rank)].as_deref_mut() {
            rx.release_all();
        }
        self.collect_rx(rank);
        if let Some(t) = self.rx[usize::from(rank)].take().and_then(|rx| rx.armed) {
            self.rx_timers.remove(&(t, rank));
        }
        // The trees re-form in the new view.
        self.view = tree::view_of(&self.live);
        self.root_tree = None;
        for root in 0..self.cfg.size {
            if self.rx[usize::from(root)].is_none() {
                continue;
            }
            let (peer, link) = (self.peer_for(root), self.tree_link(root));
            if let Some(rx) = self.rx[usize::from(root)].as_deref_mut() {
                rx.set_peer(peer);
                rx.set_tree(now, link);
            }
            self.collect_rx(root);
        }
        self.tx.evict(&self.cfg, now, rank, &self.live);
        self.collect_tx();
        true
    }

    /// Heap bytes of the control outbox (the send side's pushed buffer).
    pub fn outbox_bytes(&self) -> usize {
        self.outbox.capacity() * std::mem::size_of::<Outgoing>()
    }

    /// True when this member, as root, has nothing queued, unsent or unacknowledged.
    pub fn is_idle(&self) -> bool {
        self.tx.is_idle() && self.outbox.is_empty()
    }

    /// Messages of `root` delivered so far.
    pub fn delivered_from(&self, root: Rank) -> u64 {
        self.receiver(root).map_or(0, |r| r.next_msg())
    }
}

/// The queue sizes of the EQA paper (section 4), in bytes; [`Config::paper`] turns them into
/// entry counts and the memory study compares them with this crate's defaults.
pub mod paper {
    /// The paper's retransmission buffer: 24 KB.
    pub const BUF_BYTES: usize = 24 * 1024;
    /// The paper's send queue: 4 KB.
    pub const SEND_QUEUE_BYTES: usize = 4 * 1024;
    /// The paper's send-side pushed buffer: 4 KB.
    pub const SEND_PUSHED_BYTES: usize = 4 * 1024;
    /// The paper's receive queue: 4 KB.
    pub const RECV_QUEUE_BYTES: usize = 4 * 1024;
    /// The paper's receive-side pushed buffer: 12 KB.
    pub const RECV_PUSHED_BYTES: usize = 12 * 1024;
    /// The paper's LDP send queue: 4 KB.
    pub const LDP_QUEUE_BYTES: usize = 4 * 1024;

    /// The paper's frame buffers: 24 KB hold 16 frames of 1536 bytes (a 1514-byte Ethernet frame
    /// rounded up to a 64-byte boundary).
    pub const FRAME_BUFFER: usize = 1536;
}
