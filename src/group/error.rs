//! The errors of group calls.

use std::time::Duration;

use thiserror::Error;

use crate::link::LinkError;
use crate::Rank;
use ethbcast_proto::{JoinError, MemberError};

use super::JoinSeen;

/// Errors of group calls.
#[derive(Debug, Error)]
pub enum GroupError {
    /// The link could not be opened or failed.
    #[error(transparent)]
    Link(#[from] LinkError),
    /// The member refused the call or it failed (configuration, a dead peer).
    #[error(transparent)]
    Member(#[from] MemberError),
    /// The call did not complete in time.
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout {
        /// What we waited for.
        what: &'static str,
        /// How long.
        after: Duration,
    },
    /// The options carry no key and do not set `insecure`.
    #[error("no group key: without one any host of the segment can join, inject frames and broadcast data the members deliver; give the group a key (GroupOptions::key, from a file written by `ethbcast keygen`), or set GroupOptions::insecure to join without one")]
    NoKey,
    /// Not everyone joined in time.
    #[error("only {joined} of {expected} members joined within {timeout:?} ({waiting}): check that every member runs, on the same segment, with the same group id and key")]
    JoinTimeout {
        /// Members heard from (this one included).
        joined: usize,
        /// Members expected.
        expected: usize,
        /// How long we waited.
        timeout: Duration,
        /// What this member was waiting for, and hosts it heard that the membership excludes.
        waiting: String,
        /// What the join knew when it timed out (boxed: it is large beside the other errors).
        seen: Box<JoinSeen>,
    },
    /// The join failed (two members claim one rank, rosters disagree, a bad configuration).
    #[error(transparent)]
    Join(#[from] JoinError),
    /// The caller asked to stop while waiting.
    #[error("interrupted")]
    Interrupted,
    /// The membership source is unusable.
    #[error("membership: {0}")]
    Membership(String),
    /// This host's MAC is not in the member list.
    #[error("this interface's MAC {0} is not in the member list")]
    NotAMember(String),
    /// The rank given is outside the group.
    #[error("rank {rank} is not in a group of {size}")]
    BadRank {
        /// Rank.
        rank: Rank,
        /// Size.
        size: u16,
    },
    /// An allgather's part lengths do not describe its buffer ([`Group::allgather_into`](crate::Group::allgather_into)):
    /// nothing was sent.
    #[error("allgather: {lens} part lengths for a group of {size}, adding up to {total} bytes for a buffer of {out}: pass one length per member, adding up to the buffer's length")]
    Parts {
        /// Lengths given.
        lens: usize,
        /// Members.
        size: u16,
        /// What they add up to (saturating).
        total: usize,
        /// Length of the buffer.
        out: usize,
    },
    /// The root's message does not have the length of this member's buffer
    /// ([`Group::bcast_into`](crate::Group::bcast_into); in an allgather, the length given for that member's part): the
    /// buffer is left as it was.
    #[error("the message from root {root} has {got} bytes but this member's buffer has {want}: every member must pass the same length")]
    Length {
        /// Root of the broadcast.
        root: Rank,
        /// Length of the message.
        got: usize,
        /// Length of the caller's buffer.
        want: usize,
    },
}
