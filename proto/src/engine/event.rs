//! What the engine gives out: events for the application, frames for the link.

use super::*;

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
