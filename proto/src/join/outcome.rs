//! What a join ends with: the group joined ([`Joined`]), its counters, or why it failed.

use thiserror::Error;

use crate::secret::Key;
use crate::wire::ethernet::MacAddr;
use crate::wire::join::JoinMsg;
use crate::wire::{Control, Frame, Kind};
use crate::Rank;

use super::session::join_key;
use super::{seal, Session, NO_RANK};

/// A finished join.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Joined {
    /// The members' MACs, in rank order.
    pub peers: Vec<MacAddr>,
    /// This member's rank.
    pub rank: Rank,
    /// The session they share.
    pub session: Session,
    /// The largest frame every member's link carries: the smallest MTU offered in the join (see
    /// [`JoinConfig::max_pdu`](crate::JoinConfig::max_pdu)), decided by the coordinator and carried
    /// in its roster.
    pub max_pdu: usize,
    /// What a member needs to confirm a roster it hears again after it joined (its
    /// confirmation was lost): see [`LateRoster`].
    pub late: LateRoster,
    /// What the join held and sent, as it finished (see [`Join::stats`](crate::Join::stats)): a
    /// join finished holds and sends nothing more.
    pub stats: JoinStats,
}

/// Lets a member that already joined answer the coordinator's repeated roster. Its `Debug`
/// never shows the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LateRoster {
    pub(super) group: u32,
    pub(super) nonce: u64,
    pub(super) member_nonce: u64,
    pub(super) member: MacAddr,
    pub(super) coordinator: MacAddr,
    pub(super) key: Option<Key>,
}

impl LateRoster {
    /// The coordinator whose repeated roster this answers.
    pub fn coordinator(&self) -> MacAddr {
        self.coordinator
    }

    /// If `pdu` (from `src`) is the coordinator's roster of this session, the confirmation to
    /// send back: (destination, frame).
    pub fn answer(&self, src: MacAddr, pdu: &[u8]) -> Option<(MacAddr, Vec<u8>)> {
        if src != self.coordinator {
            return None;
        }
        let f = Frame::new_checked(pdu).ok()?;
        if f.kind() != Kind::Join || f.group() != self.group {
            return None;
        }
        if let Some(k) = &self.key {
            if !f.verify(&join_key(k, self.nonce)) {
                return None;
            }
        }
        match JoinMsg::decode(f.payload())? {
            JoinMsg::Roster { nonce, .. } if nonce == self.nonce => {}
            _ => return None,
        }
        let confirm = JoinMsg::Confirm {
            nonce: self.nonce,
            member: self.member_nonce,
            mac: self.member,
        };
        let frame = seal(
            self.key.as_ref().map(|k| join_key(k, self.nonce)).as_ref(),
            &Control::Join {
                body: confirm.encode(),
            }
            .to_vec(self.group, NO_RANK, NO_RANK, 0),
        )?;
        Some((self.coordinator, frame))
    }
}

/// What a join holds and has sent, for tests and reports: the state a stranger could try to
/// grow, and the hellos it could try to multiply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JoinStats {
    /// Hellos sent so far.
    pub hellos: u64,
    /// Challenges held now.
    pub challenges: usize,
    /// Rosters being collected now.
    pub rosters: usize,
    /// Most rosters held at once.
    pub peak_rosters: usize,
}

/// Why a join failed (timeouts are the caller's: see [`Join::progress`](crate::Join::progress)).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum JoinError {
    /// The configuration cannot work.
    #[error("membership: {0}")]
    Config(String),
    /// Two members claim one rank.
    #[error("rank {rank} claimed by both {a} and {b}")]
    RankClaimedTwice {
        /// The rank.
        rank: Rank,
        /// One claimant.
        a: String,
        /// The other.
        b: String,
    },
    /// The coordinator's roster contradicts this member's list.
    #[error("the coordinator's roster differs from this member's list of members")]
    RosterMismatch,
}
