//! The binomial tree of the software broadcast (MPICH's numbering) over the live members, and
//! the forwarding of a tree message down it.

use super::*;

pub(super) const P2P_TREE: u8 = b'T';

pub(super) fn encode_tree(tag: Tag, data: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(11 + data.len());
    v.push(P2P_TREE);
    v.extend_from_slice(&tag.0.get().to_be_bytes());
    v.extend_from_slice(&tag.1.to_be_bytes());
    v.extend_from_slice(data);
    v
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

/// Tree broadcasts a member remembers after forwarding them, to serve members that become
/// its children when a member between them dies.
pub const TREE_CACHE: usize = 8;

impl Member {
    /// The ranks still in the group, sorted.
    pub(super) fn live_ranks(&self) -> Vec<Rank> {
        Rank::all(self.size())
            .filter(|&r| self.is_live(r))
            .collect()
    }

    /// Sends a tree broadcast to this member's children in the tree over the live members,
    /// and remembers it (see [`TREE_CACHE`]).
    pub(super) fn forward_tree(
        &mut self,
        now: Instant,
        tag: Tag,
        data: &[u8],
    ) -> Result<(), MemberError> {
        let (_, children) = live_tree(&self.live_ranks(), self.rank(), tag.0);
        let msg = encode_tree(tag, data);
        for &c in &children {
            self.send_raw(now, c, msg.clone())?;
        }
        if self.tree_cache.len() >= TREE_CACHE {
            self.tree_cache.pop_front();
        }
        self.tree_cache.push_back((tag, data.to_vec(), children));
        Ok(())
    }

    /// After an eviction: members that became this member's children in a remembered tree
    /// broadcast get it now (their old parent may have died before forwarding it).
    pub(super) fn reforward_trees(&mut self, now: Instant) {
        let live = self.live_ranks();
        let me = self.rank();
        let mut sends = Vec::new();
        for (tag, data, sent) in self.tree_cache.iter_mut() {
            if !live.contains(&tag.0) {
                continue;
            }
            let (_, children) = live_tree(&live, me, tag.0);
            for c in children {
                if !sent.contains(&c) {
                    sent.push(c);
                    sends.push((c, encode_tree(*tag, data)));
                }
            }
        }
        for (c, msg) in sends {
            let _ = self.send_raw(now, c, msg);
        }
    }

    /// Takes the tree broadcast tagged `tag`, if it arrived.
    pub(super) fn take_tree(&mut self, now: Instant, tag: Tag) -> Option<Vec<u8>> {
        let p = self.tree_inbox.iter().position(|(t, _, _)| *t == tag)?;
        let (_, from, data) = self.tree_inbox.remove(p)?;
        let f = from.index();
        self.tree_held[f] = self.tree_held[f].saturating_sub(1);
        self.top_up_pair(now, from);
        Some(data)
    }
}
