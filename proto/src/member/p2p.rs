//! Point-to-point channels: a reliable engine per pair of members (its own group id, the
//! group's configuration otherwise, its window of frames included), used by the tree broadcast
//! and by application datagrams; at most [`P2P_WINDOW`] messages of a peer wait ahead of the
//! application. The retransmission buffer's payload block is made at the channel's first
//! frame sent (`eqa::Buf`).
//!
//! A channel is made at this member's first send to the peer, or at the first frame of the
//! peer's that passes its tag. Each keeps receives posted ahead of the application, as many as
//! fit [`P2P_WINDOW`] with the messages already waiting from that peer.
//!
//! **Invariants.** `groups` is sorted by group id, one peer per id (of two peers whose ids
//! collide, the higher rank's). Per peer, the receives posted, the application messages
//! waiting and the tree messages held (the caller's count) add up to at most [`P2P_WINDOW`].

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Instant;

use crate::engine::{self, Engine, EngineConfig, Message, SessionEnded};
use crate::Rank;

use super::inbox::Inboxes;

/// Point-to-point messages a member accepts from one peer ahead of the application.
pub const P2P_WINDOW: usize = 16;

/// First byte of a point-to-point application message (a tree broadcast's is
/// `tree::P2P_TREE`).
pub(super) const P2P_APP: u8 = b'A';

/// Group id of the point-to-point channel between ranks `a` and `b` of group `group`.
pub fn pair_group(group: u32, a: Rank, b: Rank) -> u32 {
    let (lo, hi) = (a.min(b), a.max(b));
    let x = (u64::from(group) << 32) | (u64::from(lo.get()) << 16) | u64::from(hi.get());
    // A fixed mix (splitmix64 finaliser) keeps pair ids apart from group ids in practice.
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ((z ^ (z >> 31)) as u32) | 1
}

/// The point-to-point channels of one member. See the module documentation.
#[derive(Debug)]
pub(super) struct Pairs {
    /// The channels opened so far, by peer (ordered, so that runs repeat).
    engines: BTreeMap<Rank, Engine>,
    /// The group id of the channel with each peer, sorted by id (a binary search: 8 bytes a
    /// peer, where a hash map took 18). Made at the first frame that is not the group's: a
    /// member that only broadcasts never needs it (the simulator holds thousands of members
    /// in one process).
    groups: OnceLock<Box<[(u32, Rank)]>>,
    /// The group, this member and the group's size, to make `groups`.
    of: (u32, Rank, u16),
    /// Receives posted on each open channel and not consumed yet, by peer.
    posted: BTreeMap<Rank, u8>,
    /// Application messages received and not taken, per peer.
    inbox: Inboxes,
    /// The channel that sent last, so that no channel starves the others.
    cursor: Rank,
}

impl Pairs {
    /// No channel yet, for member `me` of group `group` of `size`.
    pub(super) fn new(group: u32, me: Rank, size: u16) -> Pairs {
        Pairs {
            engines: BTreeMap::new(),
            groups: OnceLock::new(),
            of: (group, me, size),
            posted: BTreeMap::new(),
            inbox: Inboxes::default(),
            cursor: Rank::new(0),
        }
    }

    /// The peer whose channel has the group id `group`, if any.
    pub(super) fn peer(&self, group: u32) -> Option<Rank> {
        let groups = self.groups.get_or_init(|| {
            let (of, me, size) = self.of;
            let mut groups: Vec<(u32, Rank)> = Rank::all(size)
                .filter(|&r| r != me)
                .map(|r| (pair_group(of, me, r), r))
                .collect();
            // Of two peers whose channels' ids collide, the higher rank's channel is the one
            // found.
            groups.sort_unstable_by_key(|&(g, r)| (g, std::cmp::Reverse(r)));
            groups.dedup_by_key(|&mut (g, _)| g);
            groups.into_boxed_slice()
        });
        let i = groups.binary_search_by_key(&group, |&(g, _)| g).ok()?;
        Some(groups[i].1)
    }

    /// The channel with `peer`, if it is open.
    pub(super) fn get(&self, peer: Rank) -> Option<&Engine> {
        self.engines.get(&peer)
    }

    /// The channel with `peer`, if it is open, to drive.
    pub(super) fn get_mut(&mut self, peer: Rank) -> Option<&mut Engine> {
        self.engines.get_mut(&peer)
    }

    /// The channel with `peer`, made now if it is not open (from the group's configuration
    /// `group`; `held`: tree messages of the peer held for calls).
    pub(super) fn open(
        &mut self,
        now: Instant,
        group: &EngineConfig,
        peer: Rank,
        held: u8,
    ) -> &mut Engine {
        if let Entry::Vacant(slot) = self.engines.entry(peer) {
            let me = group.rank;
            let mut pc = group.clone();
            pc.group = pair_group(group.group, me, peer);
            pc.size = 2;
            pc.rank = Rank::new(u16::from(me > peer));
            pc.auto_post = false;
            // A valid group configuration gives a valid pair configuration.
            let e = Engine::new(pc)
                .expect("the pair configuration derives from a valid group configuration");
            slot.insert(e);
            self.posted.insert(peer, 0);
            self.top_up(now, me, peer, held);
        }
        self.engines
            .get_mut(&peer)
            .expect("inserted above if it was missing")
    }

    /// Keeps the channel with `peer` posted while its messages fit [`P2P_WINDOW`] (`me`: this
    /// member; `held`: the peer's tree messages held for calls).
    pub(super) fn top_up(&mut self, now: Instant, me: Rank, peer: Rank, held: u8) {
        let p = peer.index();
        let Some(e) = self.engines.get_mut(&peer) else {
            return;
        };
        let other = Rank::new(u16::from(me < peer));
        let max = e.config().max_message;
        let posted = self.posted.entry(peer).or_default();
        while usize::from(*posted) + self.inbox[p].len() + usize::from(held) < P2P_WINDOW {
            if e.post_recv(now, other, max).is_err() {
                break;
            }
            *posted += 1;
        }
    }

    /// The messages the channel with `peer` delivered since the last call (each consumed a
    /// posted receive).
    pub(super) fn delivered(&mut self, peer: Rank) -> Vec<Vec<u8>> {
        let Some(e) = self.engines.get_mut(&peer) else {
            return Vec::new();
        };
        let mut got = Vec::new();
        while let Some(ev) = e.poll_event() {
            if let engine::EngineEvent::Delivered(Message { data, .. }) = ev {
                got.push(data);
            }
        }
        let n = u8::try_from(got.len()).unwrap_or(u8::MAX);
        if let Some(p) = self.posted.get_mut(&peer) {
            *p = p.saturating_sub(n);
        }
        got
    }

    /// An application message from `peer` waits for the application.
    pub(super) fn keep(&mut self, peer: Rank, data: Vec<u8>) {
        self.inbox[peer.index()].push_back(data);
    }

    /// The oldest application message from `peer`.
    pub(super) fn take(&mut self, peer: Rank) -> Option<Vec<u8>> {
        self.inbox.get_mut(peer.index())?.pop_front()
    }

    /// The channel with `peer` closes (the peer was evicted): what it held is dropped.
    pub(super) fn close(&mut self, peer: Rank) {
        self.engines.remove(&peer);
        let r = peer.index();
        self.posted.remove(&peer);
        self.inbox[r].clear();
    }

    /// Writes the next frame of a channel into `buf`, round robin from the channel after the
    /// last one that sent: the peer, and the frame's length.
    pub(super) fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<(Rank, usize)> {
        let cursor = self.cursor;
        let mut sent = None;
        let after = Rank::new(cursor.get().saturating_add(1));
        for (&peer, e) in self.engines.range_mut(after..) {
            if let Some(t) = e.poll_transmit(now, buf) {
                sent = Some((peer, t.len));
                break;
            }
        }
        if sent.is_none() {
            for (&peer, e) in self.engines.range_mut(..=cursor) {
                if let Some(t) = e.poll_transmit(now, buf) {
                    sent = Some((peer, t.len));
                    break;
                }
            }
        }
        let (peer, len) = sent?;
        self.cursor = peer;
        Some((peer, len))
    }

    /// The channels open, with the heap bytes of their buffers.
    pub(super) fn channels(&self) -> Vec<(Rank, usize)> {
        self.engines
            .iter()
            .map(|(&p, e)| (p, e.heap_bytes()))
            .collect()
    }

    /// Every channel.
    pub(super) fn engines(&self) -> impl Iterator<Item = &Engine> {
        self.engines.values()
    }

    /// Every channel, to drive.
    pub(super) fn engines_mut(&mut self) -> impl Iterator<Item = &mut Engine> {
        self.engines.values_mut()
    }

    /// Whether a channel's session ended, and why.
    pub(super) fn session_ended(&self) -> Option<SessionEnded> {
        self.engines.values().find_map(Engine::session_ended)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::{pair_group, Pairs, P2P_WINDOW};
    use crate::engine::EngineConfig;
    use crate::Rank;

    #[test]
    fn a_pair_has_one_id_both_ways_and_each_peer_its_own() {
        let (a, b, c) = (Rank::new(0), Rank::new(1), Rank::new(2));
        assert_eq!(pair_group(7, a, b), pair_group(7, b, a));
        assert_ne!(pair_group(7, a, b), pair_group(7, a, c));
        assert_ne!(pair_group(7, a, b), pair_group(8, a, b));
        let p = Pairs::new(7, a, 3);
        assert_eq!(p.peer(pair_group(7, a, c)), Some(c));
        assert_eq!(p.peer(7), None, "the group's own id is no pair's");
    }

    #[test]
    fn a_channel_is_made_on_first_use_with_a_window_of_receives_and_closed_on_eviction() {
        let now = Instant::now();
        let cfg = EngineConfig::new(7, Rank::new(0), 3);
        let mut p = Pairs::new(7, Rank::new(0), 3);
        let peer = Rank::new(2);
        assert!(p.get(peer).is_none());
        let e = p.open(now, &cfg, peer, 0);
        assert_eq!(e.config().size, 2);
        assert_eq!(
            e.receiver(Rank::new(1)).map(|r| r.posted()),
            Some(P2P_WINDOW)
        );
        // Messages waiting, and tree messages held, take room in the window.
        p.keep(peer, vec![1]);
        p.keep(peer, vec![2]);
        assert_eq!(p.take(peer), Some(vec![1]));
        assert_eq!(p.channels().len(), 1);
        p.close(peer);
        assert!(p.get(peer).is_none());
        assert_eq!(p.take(peer), None, "what waited is dropped");
        assert!(p.session_ended().is_none());
    }
}
