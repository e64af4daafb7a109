//! What a join is told: whom it waits for ([`Expect`]) and with what ([`JoinConfig`]).

use crate::secret::Key;
use crate::wire::ethernet::MacAddr;
use crate::Rank;

/// Whom a join waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// Exactly these members, in rank order (an explicit list, a hostfile); rank 0
    /// coordinates.
    List(Vec<MacAddr>),
    /// `size` members that each claim their rank (a launcher's environment); rank 0
    /// coordinates.
    Ranks {
        /// Members.
        size: u16,
        /// This member's rank.
        rank: Rank,
    },
    /// `expected` members announce themselves; ranked by sorted MAC, the lowest MAC
    /// coordinates.
    Discover {
        /// Members expected, this one included.
        expected: u16,
    },
    /// This member coordinates as rank 0 and takes the first `receivers` members that answer
    /// (only those of `only` if given, in its order), in the order they answered.
    FirstCome {
        /// Members besides this one.
        receivers: usize,
        /// The only acceptable members, in rank order (a hostfile).
        only: Option<Vec<MacAddr>>,
    },
    /// This member answers any coordinator and joins the first roster that names it.
    Invited,
    /// As [`Expect::Invited`], from the coordinator with this MAC only: challenges (and so
    /// rosters) of any other are ignored. Without a key a MAC can be forged, so this keeps
    /// out strangers by mistake, not by attack.
    InvitedBy(MacAddr),
}

/// What a join needs. Its `Debug` never shows the key.
#[derive(Debug, Clone)]
pub struct JoinConfig {
    /// Group id (join frames of other groups are ignored).
    pub group: u32,
    /// This member's MAC.
    pub mac: MacAddr,
    /// Group key: every join frame is sealed.
    pub key: Option<Key>,
    /// Whom to wait for.
    pub expect: Expect,
    /// The largest frame this member's link carries (its MTU): offered in its hello. The group's
    /// frames are no larger than the smallest offer of its members
    /// ([`Joined::max_pdu`](crate::Joined::max_pdu)), so that a host with a smaller MTU on the
    /// segment lowers the frame size instead of losing every large frame.
    pub max_pdu: usize,
}
