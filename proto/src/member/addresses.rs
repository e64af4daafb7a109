//! Where a member's frames go on the wire: the MAC address of every rank, and the group's
//! address for frames to every member.
//!
//! **Invariants.** One MAC per rank of the group, in rank order (shared: the members of a
//! simulated group hold one table, not one each).

use std::sync::Arc;

use crate::engine::Dest;
use crate::wire::ethernet::MacAddr;
use crate::Rank;

/// The addresses of one group. See the module documentation.
#[derive(Debug)]
pub(super) struct Addresses {
    peers: Arc<[MacAddr]>,
    group: MacAddr,
}

impl Addresses {
    /// The addresses `peers` (one per rank) and `group`.
    pub(super) fn new(peers: Arc<[MacAddr]>, group: MacAddr) -> Addresses {
        Addresses { peers, group }
    }

    /// The MAC address of `rank`.
    pub(super) fn mac_of(&self, rank: Rank) -> Option<MacAddr> {
        self.peers.get(rank.index()).copied()
    }

    /// Whether `mac` is `rank`'s address.
    pub(super) fn is(&self, rank: Rank, mac: MacAddr) -> bool {
        self.peers.get(rank.index()) == Some(&mac)
    }

    /// Where a frame for `dst` goes.
    pub(super) fn of(&self, dst: Dest) -> MacAddr {
        match dst {
            Dest::All => self.group,
            Dest::Rank(r) => self.peers[r.index()],
        }
    }

    /// Members in the group.
    pub(super) fn len(&self) -> usize {
        self.peers.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ethernet::BROADCAST_MAC;

    #[test]
    fn frames_to_everyone_go_to_the_group_address_and_others_to_their_rank() {
        let macs: Arc<[MacAddr]> =
            vec![MacAddr([2, 0, 0, 0, 0, 1]), MacAddr([2, 0, 0, 0, 0, 2])].into();
        let a = Addresses::new(macs, BROADCAST_MAC);
        assert_eq!(a.of(Dest::All), BROADCAST_MAC);
        assert_eq!(a.of(Dest::Rank(Rank::new(1))), MacAddr([2, 0, 0, 0, 0, 2]));
        assert!(a.is(Rank::new(0), MacAddr([2, 0, 0, 0, 0, 1])));
        assert!(!a.is(Rank::new(2), MacAddr([2, 0, 0, 0, 0, 1])));
        assert_eq!(a.mac_of(Rank::new(5)), None);
        assert_eq!(a.len(), 2);
    }
}
