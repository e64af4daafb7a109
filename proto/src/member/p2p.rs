//! Point-to-point channels: a reliable engine per pair of members (its own group id, a window of
//! [`P2P_WINDOW`] frames), used by the tree broadcast and by application datagrams.

use super::*;

/// Point-to-point messages a member accepts from one peer ahead of the application.
pub const P2P_WINDOW: usize = 16;

/// First byte of a point-to-point message: a tree broadcast (tag and data follow) or an
/// application message.
/// Confirmations of a repeated roster waiting to be sent, at most (the coordinator repeats
/// its roster every [`crate::join::REPEAT`]; more would only answer replays).
pub(super) const MAX_RAW_OUT: usize = 4;

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

impl Member {
    /// Sends `data` to `peer` alone over the reliable point-to-point channel.
    pub fn send_to(&mut self, now: Instant, peer: Rank, data: Vec<u8>) -> Result<(), MemberError> {
        if peer.index() >= self.peers.len() || peer == self.rank() {
            return Err(MemberError::Post(PostError::NotMember(peer)));
        }
        self.send_to_live(now, peer, data)
    }

    pub(super) fn send_to_live(
        &mut self,
        now: Instant,
        peer: Rank,
        data: Vec<u8>,
    ) -> Result<(), MemberError> {
        let mut v = Vec::with_capacity(1 + data.len());
        v.push(P2P_APP);
        v.extend_from_slice(&data);
        self.send_raw(now, peer, v)
    }

    pub(super) fn send_raw(
        &mut self,
        now: Instant,
        peer: Rank,
        msg: Vec<u8>,
    ) -> Result<(), MemberError> {
        if !self.is_live(peer) {
            return Err(MemberError::PeerDead(peer));
        }
        self.pair(now, peer).bcast(now, msg, Algorithm::Simple)?;
        Ok(())
    }

    /// Takes the oldest point-to-point message from `peer`.
    pub fn take_p2p(&mut self, now: Instant, peer: Rank) -> Option<Vec<u8>> {
        let m = self.p2p_inbox.get_mut(peer.index())?.pop_front()?;
        self.top_up_pair(now, peer);
        Some(m)
    }

    pub(super) fn pair(&mut self, now: Instant, peer: Rank) -> &mut Engine {
        let p = peer.index();
        if !self.pairs.contains_key(&peer) {
            let cfg = self.engine.config();
            let (me, group) = (cfg.rank, cfg.group);
            let mut pc = cfg.clone();
            pc.group = pair_group(group, me, peer);
            pc.size = 2;
            pc.rank = Rank::new(u16::from(me > peer));
            pc.auto_post = false;
            // A valid group configuration gives a valid pair configuration.
            let e = Engine::new(pc)
                .expect("the pair configuration derives from a valid group configuration");
            self.pairs.insert(peer, e);
            self.p2p_posted[p] = 0;
            self.top_up_pair(now, peer);
        }
        self.pairs
            .get_mut(&peer)
            .expect("inserted above if it was missing")
    }

    /// Keeps the peer's channel posted while its messages fit [`P2P_WINDOW`].
    pub(super) fn top_up_pair(&mut self, now: Instant, peer: Rank) {
        let p = peer.index();
        let me = self.rank();
        let Some(e) = self.pairs.get_mut(&peer) else {
            return;
        };
        let other = Rank::new(u16::from(me < peer));
        let max = e.config().max_message;
        while usize::from(self.p2p_posted[p])
            + self.p2p_inbox[p].len()
            + usize::from(self.tree_held[p])
            < P2P_WINDOW
        {
            if e.post_recv(now, other, max).is_err() {
                break;
            }
            self.p2p_posted[p] += 1;
        }
    }

    pub(super) fn collect_pair(&mut self, now: Instant, peer: Rank) {
        let p = peer.index();
        let Some(e) = self.pairs.get_mut(&peer) else {
            return;
        };
        let mut got = Vec::new();
        while let Some(ev) = e.poll_event() {
            if let engine::Event::Delivered(Message { data, .. }) = ev {
                got.push(data);
            }
        }
        if got.is_empty() {
            return;
        }
        for mut data in got {
            self.p2p_posted[p] = self.p2p_posted[p].saturating_sub(1);
            match data.first() {
                Some(&P2P_APP) => {
                    data.remove(0);
                    self.p2p_inbox[p].push_back(data);
                }
                Some(&P2P_TREE) if data.len() >= 11 => {
                    let root = Rank::new(u16::from_be_bytes([data[1], data[2]]));
                    let mut seq = [0u8; 8];
                    seq.copy_from_slice(&data[3..11]);
                    let tag = (root, u64::from_be_bytes(seq));
                    let current = matches!(self.call, Some(Call::Bcast { tag: t, .. }) if t == tag);
                    let done = self
                        .collectives
                        .get(root.index())
                        .is_none_or(|&c| tag.1 < c);
                    if done && !current {
                        // A call this member finished (or a root that does not exist): a
                        // late or repeated copy.
                        self.stats.dropped += 1;
                        continue;
                    }
                    data.drain(..11);
                    self.tree_held[p] += 1;
                    self.tree_inbox.push_back((tag, peer, data));
                }
                _ => self.stats.dropped += 1,
            }
        }
        self.top_up_pair(now, peer);
    }
}
