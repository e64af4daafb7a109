//! The engine's configuration: window, queues, timers, acknowledgement tree, and how they are
//! checked ([`ConfigError`]); the EQA paper's queue sizes ([`paper`]).

use std::time::Duration;

use crate::wire;
use crate::{ConfigError, Rank, Seq};

use super::{recv, send, tree, Outgoing};

/// A cache hint: the `len` bytes from the pointer are used soon (see [`EngineConfig::prefetch`]).
pub type Prefetch = fn(*const u8, usize);

/// Engine configuration. [`EngineConfig::new`] gives the defaults, [`EngineConfig::paper`] the
/// queue sizes of the EQA paper. Its `Debug` never shows the key.
#[derive(Debug, Clone)]
pub struct EngineConfig {
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
    /// the root's retransmission timer polls them ([`Control::AckPoll`](crate::Control::AckPoll)).
    pub ack_delay: Duration,
    /// A receiver repeats a NACK for a gap that persists this long (doubling each time).
    /// [`EngineConfig::new`] gives 2 ms, and 1 ms from [`ACK_TREE_FROM`] members: there the first
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
    /// Posted receives a receive stream holds (the RDP's receive queue), and complete
    /// messages it holds for receives not posted yet.
    pub recv_queue: usize,
    /// Repair requests each destination's LDP queues.
    pub repair_queue: usize,
    /// Largest message accepted from the network (guards against absurd lengths) and
    /// broadcast; at most `u32::MAX` bytes, what a frame can name.
    pub max_message: usize,
    /// Deliver every message as it completes, without `post_recv` (streaming use).
    pub auto_post: bool,
    /// Group key: when set, every frame carries a keyed MAC and frames without a valid one
    /// are dropped, so a host on the segment outside the group cannot inject data.
    pub key: Option<crate::secret::Key>,
    /// With a key: encrypt the payload of every frame this member sends (AES-256-GCM under a
    /// key derived from the session key, `wire::crypt`) rather than only authenticate
    /// it. On by default. Each sender chooses for its own frames: a member takes encrypted and
    /// authenticated frames alike, and refuses any other without the key's tag.
    pub encrypt: bool,
    /// The application checks every byte it receives end to end, with a digest of its own
    /// over the whole stream (as `ethbcast send`/`recv` do). Then, as with a key, data frames
    /// carry a CRC over their header only ([`Flags::HEADER_CRC`](crate::Flags::HEADER_CRC)) and each receiver reads
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
    /// Peer repair: a receiver asks a fellow receiver (the next live rank) for a lost frame first,
    /// and the root only if that did not help within the NACK retry interval. Why: with independent
    /// loss at `n` receivers the root's link carries `n` times the loss rate in point-to-point
    /// repairs, which caps bulk goodput; a peer's link is idle; and their NACKs (about `n` times
    /// the loss rate per data frame) would all reach the root. [`EngineConfig::new`] turns it on
    /// from [`ACK_TREE_FROM`] members, off below (the paper's model: every repair comes from the
    /// root).
    pub peer_repair: bool,
    /// With peer repair: while fellows ask this member for frames, each message it completes
    /// is held back for a window's worth of frames of its stream (or until the stream has not
    /// moved for 5 ms) before it is delivered, and a fellow's request for a frame of it is
    /// served from the message's own buffer. Without it, the last 256 frames of every message
    /// are copied into their window slots instead, to outlive the delivery: on a lossy
    /// segment, a third of a bulk stream copied twice (a megabyte message is about 720
    /// frames). The price is a later delivery, which a bulk stream does not notice and a
    /// latency-bound group would, and the held messages' memory, which the application would
    /// have freed sooner: `ethbcast send`/`recv` turn it on, [`EngineConfig::new`] leaves it off.
    pub peer_hold: bool,
    /// Fan-out of the acknowledgement tree (`proto/tree.rs`): receivers acknowledge to a parent
    /// that reports for its whole subtree, so the root receives about `ack_tree / ack_every`
    /// acknowledgements per data frame whatever the group's size. 0: every receiver
    /// acknowledges to the root, as in the EQA paper. [`EngineConfig::new`] turns it on from
    /// [`ACK_TREE_FROM`] members.
    pub ack_tree: u16,
}

/// Group size from which [`EngineConfig::new`] acknowledges up a tree ([`EngineConfig::ack_tree`]):
/// below it the root's acknowledgements per data frame stay few, and a tree would only add a hop.
pub const ACK_TREE_FROM: u16 = 32;

/// The tree's fan-out [`EngineConfig::new`] picks for groups of [`ACK_TREE_FROM`] members or more.
pub const ACK_TREE_FANOUT: u16 = 4;

/// The window [`EngineConfig::new`] picks: 16 frames (the EQA paper's 24 KB buffer of 1536-byte
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

impl EngineConfig {
    /// Defaults for a member `rank` of a group of `size`.
    pub fn new(group: u32, rank: Rank, size: u16) -> EngineConfig {
        EngineConfig {
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
            encrypt: true,
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
    /// only ([`Flags::HEADER_CRC`](crate::Flags::HEADER_CRC)).
    pub fn payload_covered(&self) -> bool {
        self.end_to_end || self.key.is_some()
    }

    /// The queue sizes of the EQA paper (section 4): send queue 4 KB, pushed buffer 4 KB on the
    /// send side and 12 KB on the receive side, retransmission buffer 24 KB, receive queue 4 KB,
    /// LDP send queue 4 KB.
    pub fn paper(group: u32, rank: Rank, size: u16) -> EngineConfig {
        let mut c = EngineConfig::new(group, rank, size);
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

    /// Whether an engine can run with this configuration (an engine checks it when made): for a
    /// caller that wants to refuse bad options before it waits for peers.
    pub fn check(&self) -> Result<(), ConfigError> {
        if self.size == 0 || self.size == wire::ALL.get() || self.rank.get() >= self.size {
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
        if self.ack_every == 0 || self.send_queue == 0 || self.recv_queue == 0 || self.outbox == 0 {
            return Err(ConfigError::Zero);
        }
        if self.nack_gather > self.window / 2 {
            return Err(ConfigError::Gather(self.nack_gather, self.window));
        }
        if u32::try_from(self.max_message).is_err() {
            return Err(ConfigError::MaxMessage(self.max_message));
        }
        Ok(())
    }
}

/// The queue sizes of the EQA paper (section 4), in bytes; [`EngineConfig::paper`] turns them into
/// entry counts and the memory study compares them with this crate's defaults.
pub(crate) mod paper {
    /// The paper's retransmission buffer: 24 KB.
    pub(crate) const BUF_BYTES: usize = 24 * 1024;
    /// The paper's send queue: 4 KB.
    pub(crate) const SEND_QUEUE_BYTES: usize = 4 * 1024;
    /// The paper's send-side pushed buffer: 4 KB.
    pub(crate) const SEND_PUSHED_BYTES: usize = 4 * 1024;
    /// The paper's receive queue: 4 KB.
    pub(crate) const RECV_QUEUE_BYTES: usize = 4 * 1024;
    /// The paper's receive-side pushed buffer: 12 KB.
    pub(crate) const RECV_PUSHED_BYTES: usize = 12 * 1024;
    /// The paper's LDP send queue: 4 KB.
    pub(crate) const LDP_QUEUE_BYTES: usize = 4 * 1024;

    /// The paper's frame buffers: 24 KB hold 16 frames of 1536 bytes (a 1514-byte Ethernet frame
    /// rounded up to a 64-byte boundary).
    pub(crate) const FRAME_BUFFER: usize = 1536;
}
