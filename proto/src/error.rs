//! The error of a configuration the core's machines refuse, one for all of them.

use thiserror::Error;

use crate::detect::MAX_MEMBERS;
use crate::engine::MAX_WINDOW;
use crate::Rank;

/// A configuration the core cannot run with: the engine's ([`crate::engine::EngineConfig`]) or the
/// failure detector's ([`crate::detect::DetectorConfig`]).
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
    #[error("ack_every, send_queue, recv_queue and outbox must be at least 1")]
    Zero,
    /// The longest message is longer than a frame can name: a message's length and a
    /// frame's offset in it travel in 32 bits.
    #[error("max_message of {0} bytes is more than a frame can name (4294967295 bytes)")]
    MaxMessage(usize),
    /// Gathering gaps for longer than half the window: the window would fill before the
    /// receiver asks for its lost frames.
    #[error("gathering gaps for {0} frames is more than half the window of {1} frames")]
    Gather(usize, usize),
    /// The detector's rank is outside the group, or the group is empty or larger than a
    /// gossip table can carry.
    #[error("rank {rank} in a group of {size} (1 ..= {MAX_MEMBERS} members): fix rank or size")]
    DetectorRank {
        /// Rank asked for.
        rank: Rank,
        /// Group size asked for.
        size: u16,
    },
    /// `t_gossip` is zero: the detector would spin.
    #[error("t_gossip must be greater than zero")]
    ZeroPeriod,
    /// `ping_attempts` is zero: a suspect could never answer.
    #[error("ping_attempts must be at least 1")]
    NoPing,
    /// A barrier's arity is 0, or its timeouts are zero or inverted.
    #[error("bad barrier configuration: arity must be >= 1 and 0 < rto <= max_rto")]
    Barrier,
}
