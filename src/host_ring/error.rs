//! What can go wrong between the ranks of one host, each error saying what to do.

use std::path::PathBuf;
use std::time::Duration;

use ethbcast_sys::shm::ShmError;
use thiserror::Error;

use crate::Rank;

/// Errors of the shared-memory layer, each saying what to do.
#[derive(Debug, Error)]
pub enum HostRingError {
    /// The segment could not be made, opened or accessed.
    #[error(transparent)]
    Shm(#[from] ShmError),
    /// The ranks-per-host description is unusable.
    #[error("ranks per host: {0}")]
    Topology(String),
    /// The segment found under this host's name was made for another job.
    #[error("shared-memory segment {path} {why}: is another job with the same group id running on this host?")]
    Layout {
        /// The segment's file.
        path: PathBuf,
        /// What differs.
        why: String,
    },
    /// Another process holds this rank's cursor block.
    #[error("cursor block {local} of segment {path} belongs to rank {holder}: is another job with the same group id running on this host?")]
    SlotTaken {
        /// The segment's file.
        path: PathBuf,
        /// The block.
        local: usize,
        /// The rank holding it.
        holder: u64,
    },
    /// A wait did not end in time.
    #[error("timed out after {after:?} waiting for {what} (a rank on this host is not calling, or is stuck)")]
    Timeout {
        /// What was waited for.
        what: &'static str,
        /// How long.
        after: Duration,
    },
    /// A rank of this host exited while others still needed it.
    #[error("rank {rank} on this host (process {pid}) is gone: the job cannot go on")]
    RankGone {
        /// Its rank.
        rank: u64,
        /// Its process id.
        pid: u64,
    },
    /// The host's owner could not join the network group.
    #[error(
        "the member of this host in the network group (rank {owner}) failed to join: see its error"
    )]
    OwnerFailed {
        /// The owner's rank.
        owner: u64,
    },
    /// An entry of the ring is not what this call expects: the ranks called collectives in
    /// different orders, or the segment is corrupt.
    #[error("{0}")]
    Protocol(String),
    /// The message of the root has another length than this rank's buffer. The message was
    /// consumed and the buffer left as it was.
    #[error("the message from root {root} has {got} bytes but this rank's buffer has {want}: every rank must pass the same length")]
    Length {
        /// Root of the broadcast.
        root: Rank,
        /// Length of the message.
        got: usize,
        /// Length of the buffer.
        want: usize,
    },
}
