//! Why a member's call failed.

use thiserror::Error;

use crate::engine::{self, ConfigError, PostError, SendError};
use crate::wire::WireError;
use crate::Rank;

/// Why a member could not be built or a call could not be made.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MemberError {
    /// The engine configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The peer table does not match the group size.
    #[error("peer table has {got} MAC addresses for a group of {want}")]
    Peers {
        /// Entries given.
        got: usize,
        /// Group size.
        want: usize,
    },
    /// The failure detector configuration is invalid.
    #[error("failure detector: {0}")]
    Detector(String),
    /// The barrier configuration or call is invalid.
    #[error("barrier: {0}")]
    Barrier(String),
    /// The broadcast could not be queued.
    #[error(transparent)]
    Send(#[from] SendError),
    /// The receive could not be posted.
    #[error(transparent)]
    Post(#[from] PostError),
    /// A control message did not fit a frame.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// A collective call is still in progress: take its result first.
    #[error("a collective call is still in progress")]
    Busy,
    /// The rank given is outside the group.
    #[error("rank {rank} is not in a group of {size}")]
    BadRank {
        /// Rank.
        rank: Rank,
        /// Size.
        size: u16,
    },
    /// The member we wait for was declared dead by the failure detector and evicted; what it
    /// had sent only partly is never delivered.
    #[error("rank {0} failed (declared dead by the failure detector and evicted)")]
    PeerDead(Rank),
    /// This member's session ended before a counter of its frames could wrap: open the group
    /// again.
    #[error(transparent)]
    SessionEnded(#[from] engine::SessionEnded),
    /// A posted receive was smaller than the message.
    #[error("message {msg_id} from root {root} has {len} bytes, the receive allowed {max}")]
    Truncated {
        /// Root.
        root: Rank,
        /// Message id.
        msg_id: u64,
        /// Real length.
        len: usize,
        /// Allowed length.
        max: usize,
    },
}
