//! What a member tells the application: events, how a call ended, its counters and each
//! destination's progress.

use std::time::Instant;

use crate::engine::Message;
use crate::Rank;

/// What a member tells its application besides call results.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A whole message of a root's stream (streaming members, `prepost > 0`).
    Delivered(Message),
    /// A message of a root's stream longer than the root's keep limit
    /// ([`Member::keep_at_most`](super::Member::keep_at_most)): its bytes went to the observer alone (streaming members).
    Observed {
        /// The root.
        root: Rank,
        /// The message.
        msg_id: u64,
        /// Its length.
        len: usize,
    },
    /// `rank` was declared dead (or evicted by the application) and removed from the group.
    Evicted {
        /// The rank.
        rank: Rank,
    },
    /// An application datagram ([`Member::send_notice`](super::Member::send_notice)).
    Notice {
        /// Sender.
        src: Rank,
        /// Its bytes.
        body: Vec<u8>,
    },
}

/// What a collective call gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Done {
    /// A broadcast completed: the message (the root's own at the root).
    Bcast(Vec<u8>),
    /// A barrier released.
    Barrier,
}

/// Counters of a member.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemberStats {
    /// Frames handed out by `poll_transmit`.
    pub frames_sent: u64,
    /// Frames handed in by `handle_frame`.
    pub frames_received: u64,
    /// Frames that are not valid ethbcast PDUs (runts, bad CRC, unknown version or kind).
    pub malformed: u64,
    /// Of which failed the CRC.
    pub bad_crc: u64,
    /// Frames of groups this member is not in.
    pub foreign: u64,
    /// Frames whose source MAC is not the MAC of the rank they claim.
    pub mac_mismatch: u64,
    /// Frames an engine accepted (this group's, authentic, from a member).
    pub accepted: u64,
    /// Frames the engines dropped (see their drop counters).
    pub dropped: u64,
    /// Control messages nobody here handles (evict notices, stray join frames).
    pub unhandled: u64,
    /// Heartbeats, pings and pongs the failure detector ignored because they came late
    /// (inside the replay window but not its newest): no sign of life.
    pub late_liveness: u64,
    /// Events dropped because the application did not take them ([`EVENT_BOUND`](super::EVENT_BOUND)).
    pub events_dropped: u64,
    /// Most events queued at once.
    pub peak_events: usize,
    /// Broadcasts sent down the binomial tree because hardware broadcast reached too few.
    pub tree_fallbacks: u64,
}

/// Progress of one destination of this member's broadcasts (for the layer that decides
/// whether a receiver is stalled).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DestProgress {
    /// Frames this member sent that the destination has not acknowledged yet.
    pub outstanding: u64,
    /// When the destination was last heard from.
    pub last_heard: Option<Instant>,
    /// When its acknowledgement last moved.
    pub last_progress: Option<Instant>,
}
