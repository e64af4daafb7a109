//! The software broadcast: a binomial tree (MPICH's numbering) over the live members, its
//! messages sent down point-to-point channels.
//!
//! A tree message carries its tag, (root, the root's collective count), so that a member
//! still in an earlier call never takes a later call's message. A member keeps the tree
//! messages it forwarded (the last [`TREE_CACHE`]), so that members that become its children
//! when a member between them dies still get them.
//!
//! **Invariants.** `held[p]` counts the messages of `inbox` that came from peer `p` (they take
//! room in that peer's channel window); `cache` holds at most [`TREE_CACHE`] messages, each
//! with the children it was sent to.

use std::collections::{BTreeMap, VecDeque};

use crate::Rank;

/// The tag of a tree broadcast: (root, the root's collective count), unique per call.
pub(super) type Tag = (Rank, u64);

/// First byte of a point-to-point message that is a tree broadcast (tag and data follow).
const P2P_TREE: u8 = b'T';

/// Bytes of a tree message before its data: the first byte, the root, the count.
const TREE_HEADER: usize = 11;

/// Tree broadcasts a member remembers after forwarding them, to serve members that become
/// its children when a member between them dies.
pub const TREE_CACHE: usize = 8;

/// A tree message: the first byte, the tag, the data.
pub(super) fn encode_tree(tag: Tag, data: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(TREE_HEADER + data.len());
    v.push(P2P_TREE);
    v.extend_from_slice(&tag.0.get().to_be_bytes());
    v.extend_from_slice(&tag.1.to_be_bytes());
    v.extend_from_slice(data);
    v
}

/// The tag of a point-to-point message if it is a tree message (whole header); its data
/// follows [`decoded`].
pub(super) fn decode_tree(msg: &[u8]) -> Option<Tag> {
    if msg.first() != Some(&P2P_TREE) || msg.len() < TREE_HEADER {
        return None;
    }
    let root = Rank::new(u16::from_be_bytes([msg[1], msg[2]]));
    let mut seq = [0u8; 8];
    seq.copy_from_slice(&msg[3..TREE_HEADER]);
    Some((root, u64::from_be_bytes(seq)))
}

/// Strips the header of a tree message (see [`decode_tree`]).
pub(super) fn decoded(mut msg: Vec<u8>) -> Vec<u8> {
    msg.drain(..TREE_HEADER.min(msg.len()));
    msg
}

/// Parent and children of `me` in the binomial tree rooted at `root` over the ranks of `live`
/// (sorted; both `me` and `root` in it): the tree re-forms around evicted members.
pub fn live_tree(live: &[Rank], me: Rank, root: Rank) -> (Option<Rank>, Vec<Rank>) {
    let (Ok(pm), Ok(pr)) = (live.binary_search(&me), live.binary_search(&root)) else {
        return (None, Vec::new());
    };
    let n = live.len() as u16;
    let (pm, pr) = (Rank::new(pm as u16), Rank::new(pr as u16));
    let parent = tree_parent(pm, pr, n).map(|p| live[p.index()]);
    let children = tree_children(pm, pr, n)
        .into_iter()
        .map(|c| live[c.index()])
        .collect();
    (parent, children)
}

/// Parent of `me` in the binomial tree rooted at `root` (MPICH's numbering), `None` at the root.
pub fn tree_parent(me: Rank, root: Rank, n: u16) -> Option<Rank> {
    let vr = (u32::from(me.get()) + u32::from(n) - u32::from(root.get())) % u32::from(n.max(1));
    let mut mask = 1u32;
    while mask < u32::from(n) {
        if vr & mask != 0 {
            return Some(Rank::new(
                (((vr - mask) + u32::from(root.get())) % u32::from(n)) as u16,
            ));
        }
        mask <<= 1;
    }
    None
}

/// Children of `me` in the binomial tree rooted at `root`, farthest subtree first.
pub fn tree_children(me: Rank, root: Rank, n: u16) -> Vec<Rank> {
    let vr = (u32::from(me.get()) + u32::from(n) - u32::from(root.get())) % u32::from(n.max(1));
    let mut mask = 1u32;
    while mask < u32::from(n) && vr & mask == 0 {
        mask <<= 1;
    }
    let mut children = Vec::new();
    mask >>= 1;
    while mask > 0 {
        if vr + mask < u32::from(n) {
            children.push(Rank::new(
                ((vr + mask + u32::from(root.get())) % u32::from(n)) as u16,
            ));
        }
        mask >>= 1;
    }
    children
}

/// The tree broadcasts of one member. See the module documentation.
#[derive(Debug)]
pub(super) struct TreeBcast {
    /// Tree broadcasts received and not claimed by a call yet: tag, sender, data.
    inbox: VecDeque<(Tag, Rank, Vec<u8>)>,
    /// How many of them each peer sent (the peers that sent some).
    held: BTreeMap<Rank, u8>,
    /// Tree broadcasts this member sent or forwarded, and to whom.
    cache: VecDeque<(Tag, Vec<u8>, Vec<Rank>)>,
}

impl TreeBcast {
    /// Nothing received or sent.
    pub(super) fn new() -> TreeBcast {
        TreeBcast {
            inbox: VecDeque::new(),
            held: BTreeMap::new(),
            cache: VecDeque::new(),
        }
    }

    /// Tree messages of `peer` held for calls.
    pub(super) fn held(&self, peer: Rank) -> u8 {
        self.held.get(&peer).copied().unwrap_or(0)
    }

    /// A tree message tagged `tag` came from `from`, for a call to claim.
    pub(super) fn accept(&mut self, tag: Tag, from: Rank, data: Vec<u8>) {
        *self.held.entry(from).or_default() += 1;
        self.inbox.push_back((tag, from, data));
    }

    /// Takes the tree broadcast tagged `tag`, if it arrived: the peer it came from (whose
    /// window it no longer takes room in), and its data.
    pub(super) fn take(&mut self, tag: Tag) -> Option<(Rank, Vec<u8>)> {
        let p = self.inbox.iter().position(|(t, _, _)| *t == tag)?;
        let (_, from, data) = self.inbox.remove(p)?;
        if let Some(h) = self.held.get_mut(&from) {
            *h = h.saturating_sub(1);
        }
        Some((from, data))
    }

    /// Remembers a tree broadcast this member sent to `children` (see [`TREE_CACHE`]).
    pub(super) fn remember(&mut self, tag: Tag, data: &[u8], children: Vec<Rank>) {
        if self.cache.len() >= TREE_CACHE {
            self.cache.pop_front();
        }
        self.cache.push_back((tag, data.to_vec(), children));
    }

    /// After an eviction: the messages owed to members that became this member's (`me`)
    /// children in a remembered tree broadcast over the members now `live` (their old parent
    /// may have died before forwarding it), each to whom, noted as sent.
    pub(super) fn reforward(&mut self, live: &[Rank], me: Rank) -> Vec<(Rank, Vec<u8>)> {
        let mut sends = Vec::new();
        for (tag, data, sent) in self.cache.iter_mut() {
            if !live.contains(&tag.0) {
                continue;
            }
            let (_, children) = live_tree(live, me, tag.0);
            for c in children {
                if !sent.contains(&c) {
                    sent.push(c);
                    sends.push((c, encode_tree(*tag, data)));
                }
            }
        }
        sends
    }
}

#[cfg(test)]
mod tests {

    use crate::Rank;

    use super::{decode_tree, decoded, encode_tree, live_tree, TreeBcast, P2P_TREE, TREE_CACHE};

    #[test]
    fn a_tree_message_carries_its_tag() {
        let tag = (Rank::new(3), 0x0102_0304_0506_0708);
        let m = encode_tree(tag, b"data");
        assert_eq!(decode_tree(&m), Some(tag));
        assert_eq!(decoded(m), b"data");
        assert_eq!(decode_tree(&[P2P_TREE, 0, 1]), None, "a truncated header");
        assert_eq!(decode_tree(b"Axxxxxxxxxxxx"), None);
    }

    #[test]
    fn held_messages_are_counted_per_peer_and_claimed_by_tag() {
        let mut t = TreeBcast::new();
        let (a, b) = ((Rank::new(0), 1), (Rank::new(0), 2));
        t.accept(a, Rank::new(1), vec![1]);
        t.accept(b, Rank::new(1), vec![2]);
        assert_eq!(t.held(Rank::new(1)), 2);
        assert_eq!(t.take(b), Some((Rank::new(1), vec![2])));
        assert_eq!(t.take(b), None);
        assert_eq!(t.held(Rank::new(1)), 1);
    }

    #[test]
    fn a_member_whose_parent_died_gets_the_message_from_the_next_up() {
        let mut t = TreeBcast::new();
        let all: Vec<Rank> = Rank::all(4).collect();
        // Root 0 of 4: children 2 and 1; 2's child is 3.
        let (_, children) = live_tree(&all, Rank::new(0), Rank::new(0));
        assert_eq!(children, [Rank::new(2), Rank::new(1)]);
        t.remember((Rank::new(0), 0), b"m", children);
        // Rank 2 dies: over 0, 1, 3 the root's children are 3 and 1.
        let live = [Rank::new(0), Rank::new(1), Rank::new(3)];
        let sends = t.reforward(&live, Rank::new(0));
        assert_eq!(sends.len(), 1);
        assert_eq!(sends[0].0, Rank::new(3));
        assert!(t.reforward(&live, Rank::new(0)).is_empty(), "once");
        // Only the last few are remembered.
        let mut t = TreeBcast::new();
        for k in 0..=TREE_CACHE as u64 {
            t.remember((Rank::new(0), k), b"m", vec![Rank::new(2), Rank::new(1)]);
        }
        let sends = t.reforward(&live, Rank::new(0));
        assert_eq!(sends.len(), TREE_CACHE);
        let first = (Rank::new(0), 0);
        assert!(sends.iter().all(|(_, m)| decode_tree(m) != Some(first)));
    }
}
