//! Why the engine refused a call or dropped a frame.

use thiserror::Error;

use crate::wire::WireError;
use crate::{Rank, Seq};

/// Why a broadcast was refused.
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

/// Why a receive could not be posted.
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

/// Why a received frame was dropped. Every drop is counted in
/// [`EngineStats::drops`](crate::EngineStats::drops).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum DropReason {
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
    /// A frame of a message longer than this member takes
    /// ([`EngineConfig::max_message`](crate::EngineConfig::max_message)): nothing is reserved or
    /// kept for it.
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
    BadControl(WireError),
    /// A control frame whose counter was seen before or is too old: a replay.
    #[error("replayed control frame")]
    Replayed,
}
