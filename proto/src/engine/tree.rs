//! The acknowledgement tree of a root's stream: how a thousand receivers acknowledge without
//! a thousand acknowledgements reaching the root.
//!
//! Why: with every receiver acknowledging every `ack_every` frames, the root receives
//! `n / ack_every` control frames per data frame: 16 at 128 members, 130 at 1024, more frames
//! into the root than it sends (the ACK implosion). LA-MPI (seed 003) combines
//! acknowledgements up a tree; so does this. Each receiver reports to its parent the cumulative
//! acknowledgement of its whole subtree, the minimum of its own and its children's reports; the
//! root applies a report from a child to every member of that child's subtree, so one frame
//! advances many per-destination cursors (`Lms`). The root receives `fanout` reports per
//! `ack_every` frames, whatever the group's size. Selective repair is untouched: NACKs still
//! name their sender, and the root's per-destination timers still probe a silent member, which
//! answers directly (see [`super::recv`]).
//!
//! Layout: the live members in rank order starting at the root form a ring; position `p` of
//! the ring (the root is 0) has the children `fanout·p + 1 ..= fanout·p + fanout`, a heap.
//! Every member computes the same tree from the same view (its set of evicted members). A
//! report carries a hash of the view it was laid out in, and is applied only by a member in the
//! same view: while views differ (an eviction is spreading), reports are ignored and the
//! root's timers and probes do the work, as without a tree; nothing is ever acknowledged for a
//! member that did not report it.

use crate::Rank;

use super::recv::TreeLink;
use super::Config;

/// The view id: a hash (FNV-1a) of the evicted set, equal at every member that evicted the
/// same ranks, in whatever order.
pub(crate) fn view_of(live: &[bool]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for (r, _) in live.iter().enumerate().filter(|(_, l)| !**l) {
        for b in (r as u16).to_be_bytes() {
            h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
        }
    }
    h
}

/// Levels below the root of the tree of `n` members (the root counts) with `fanout`: the
/// hops the last member's report climbs.
pub(crate) fn depth(n: usize, fanout: usize) -> usize {
    let fanout = fanout.max(2);
    let (mut levels, mut covered, mut width) = (0, 1usize, 1usize);
    while covered < n {
        width = width.saturating_mul(fanout);
        covered = covered.saturating_add(width);
        levels += 1;
    }
    levels
}

/// The trees one member lays out: the view they are laid out in, and its own tree as a root
/// (made when first needed, per view).
///
/// **Invariants.** `view` is the hash of the current evicted set; `own`, if made, was laid out
/// in it.
#[derive(Debug)]
pub(super) struct AckTrees {
    view: u32,
    own: Option<Tree>,
}

impl AckTrees {
    /// The trees over the members `live` marks.
    pub(super) fn new(live: &[bool]) -> AckTrees {
        AckTrees {
            view: view_of(live),
            own: None,
        }
    }

    /// The view the trees are laid out in.
    pub(super) fn view(&self) -> u32 {
        self.view
    }

    /// The live set changed: the trees re-form in the new view.
    pub(super) fn relayout(&mut self, live: &[bool]) {
        self.view = view_of(live);
        self.own = None;
    }

    /// This member's own tree, as `root` of its stream.
    pub(super) fn own(&mut self, root: Rank, live: &[bool], fanout: u16) -> &Tree {
        self.own
            .get_or_insert_with(|| Tree::new(root, live, fanout))
    }

    /// The place of member `cfg.rank` in the acknowledgement tree of `root`'s stream, in the
    /// current view (`None` without trees, or at the root).
    pub(super) fn link(&self, cfg: &Config, root: Rank, live: &[bool]) -> Option<TreeLink> {
        if cfg.ack_tree == 0 {
            return None;
        }
        let t = Tree::new(root, live, cfg.ack_tree);
        let parent = t.parent(cfg.rank)?;
        Some(TreeLink::new(
            parent,
            t.children(cfg.rank),
            self.view,
            cfg.ack_delay * 3,
            cfg.rto * 3 / 4,
        ))
    }
}

/// The acknowledgement tree of one root's stream in one view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tree {
    /// Live members, the root first, then in rank order after it (wrapping).
    ring: Vec<Rank>,
    /// Position of each rank in `ring`, `u32::MAX` for the evicted.
    pos: Vec<u32>,
    fanout: usize,
}

impl Tree {
    /// The tree of `root`'s stream over the members marked live (the root counts as live).
    pub(crate) fn new(root: Rank, live: &[bool], fanout: u16) -> Tree {
        let n = live.len();
        let mut pos = vec![u32::MAX; n];
        let mut ring = Vec::with_capacity(n);
        for k in 0..n {
            let r = (root.index() + k) % n;
            if k == 0 || live[r] {
                pos[r] = ring.len() as u32;
                ring.push(Rank::new(r as u16));
            }
        }
        Tree {
            ring,
            pos,
            fanout: usize::from(fanout.max(1)),
        }
    }

    fn position(&self, rank: Rank) -> Option<usize> {
        self.pos
            .get(rank.index())
            .filter(|&&p| p != u32::MAX)
            .map(|&p| p as usize)
    }

    /// The member `rank` reports to (the root for the root's children); `None` for the root
    /// itself and for members not in the tree.
    pub(crate) fn parent(&self, rank: Rank) -> Option<Rank> {
        let p = self.position(rank)?;
        (p > 0).then(|| self.ring[(p - 1) / self.fanout])
    }

    /// The members that report to `rank`.
    pub(crate) fn children(&self, rank: Rank) -> Vec<Rank> {
        let Some(p) = self.position(rank) else {
            return Vec::new();
        };
        let first = self.fanout * p + 1;
        let end = (first + self.fanout).min(self.ring.len());
        self.ring.get(first..end).unwrap_or_default().to_vec()
    }

    /// `rank` and every member below it: whom a report of `rank` speaks for.
    pub(crate) fn subtree(&self, rank: Rank) -> Vec<Rank> {
        let Some(p) = self.position(rank) else {
            return Vec::new();
        };
        let n = self.ring.len();
        let mut out = Vec::new();
        // Level by level: positions lo..=hi, then fanout·lo + 1 ..= fanout·hi + fanout.
        let (mut lo, mut hi) = (p, p);
        while lo < n {
            out.extend_from_slice(&self.ring[lo..=hi.min(n - 1)]);
            lo = lo.saturating_mul(self.fanout).saturating_add(1);
            hi = hi.saturating_mul(self.fanout).saturating_add(self.fanout);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_members_place_follows_the_view() {
        let mut c = Config::new(1, Rank::new(3), 8);
        c.ack_tree = 2;
        let mut live = vec![true; 8];
        let mut trees = AckTrees::new(&live);
        let before = trees.view();
        // Ring from root 2: 2 3 4 5 ...; 3 is the root's child, with children 5 and 6.
        let link = trees
            .link(&c, Rank::new(2), &live)
            .expect("a member of the tree");
        assert_eq!(
            link,
            TreeLink::new(
                Rank::new(2),
                vec![Rank::new(5), Rank::new(6)],
                before,
                c.ack_delay * 3,
                c.rto * 3 / 4
            )
        );
        assert!(
            trees.link(&c, Rank::new(3), &live).is_none(),
            "the root has no parent"
        );
        live[5] = false;
        trees.relayout(&live);
        assert_ne!(trees.view(), before);
        let link = trees.link(&c, Rank::new(2), &live).unwrap();
        assert_eq!(
            link,
            TreeLink::new(
                Rank::new(2),
                vec![Rank::new(6), Rank::new(7)],
                trees.view(),
                c.ack_delay * 3,
                c.rto * 3 / 4
            )
        );
        assert_eq!(
            trees.own(Rank::new(3), &live, 2).parent(Rank::new(4)),
            Some(Rank::new(3))
        );
        c.ack_tree = 0;
        assert!(trees.link(&c, Rank::new(2), &live).is_none(), "no trees");
    }

    #[test]
    fn a_small_tree_by_hand() {
        // Root 2 of 8, rank 5 evicted: ring 2 3 4 6 7 0 1; fanout 2.
        let mut live = vec![true; 8];
        live[5] = false;
        let t = Tree::new(Rank::new(2), &live, 2);
        assert_eq!(t.children(Rank::new(2)), vec![Rank::new(3), Rank::new(4)]);
        assert_eq!(t.children(Rank::new(3)), vec![Rank::new(6), Rank::new(7)]);
        assert_eq!(t.children(Rank::new(4)), vec![Rank::new(0), Rank::new(1)]);
        assert_eq!(t.parent(Rank::new(6)), Some(Rank::new(3)));
        assert_eq!(t.parent(Rank::new(3)), Some(Rank::new(2)));
        assert_eq!(t.parent(Rank::new(2)), None);
        assert_eq!(t.parent(Rank::new(5)), None, "evicted: not in the tree");
        assert_eq!(
            t.subtree(Rank::new(3)),
            vec![Rank::new(3), Rank::new(6), Rank::new(7)]
        );
        assert_eq!(t.subtree(Rank::new(2)).len(), 7);
        assert!(t.subtree(Rank::new(5)).is_empty());
    }

    #[test]
    fn depth_counts_the_levels_below_the_root() {
        assert_eq!(depth(1, 4), 0);
        assert_eq!(depth(2, 4), 1);
        assert_eq!(depth(5, 4), 1);
        assert_eq!(depth(6, 4), 2);
        assert_eq!(depth(21, 4), 2);
        assert_eq!(depth(22, 4), 3);
        assert_eq!(depth(1024, 4), 5);
        for n in [2usize, 7, 100, 1024, 65534] {
            let t = Tree::new(Rank::new(0), &vec![true; n], 4);
            let (mut x, mut hops) = (Rank::new((n - 1) as u16), 0);
            while let Some(p) = t.parent(x) {
                x = p;
                hops += 1;
            }
            assert_eq!(hops, depth(n, 4), "the last rank of {n} is deepest");
        }
    }

    #[test]
    fn views_differ_exactly_when_the_evicted_sets_do() {
        let mut a = vec![true; 10];
        let b = a.clone();
        assert_eq!(view_of(&a), view_of(&b));
        a[3] = false;
        assert_ne!(view_of(&a), view_of(&b));
        let mut c = vec![true; 10];
        c[4] = false;
        assert_ne!(view_of(&a), view_of(&c));
    }

    proptest! {
        /// Every live member but the root has one parent; following parents reaches the root;
        /// a member's subtree is itself plus its children's subtrees, disjoint; the root's
        /// subtree is every live member.
        #[test]
        fn the_tree_covers_every_live_member_once(
            n in 2usize..300,
            root_seed in any::<u16>(),
            dead in proptest::collection::vec(any::<u16>(), 0..20),
            fanout in 1u16..9,
        ) {
            let root = Rank::new((usize::from(root_seed) % n) as u16);
            let mut live = vec![true; n];
            for d in dead {
                let d = usize::from(d) % n;
                if d != root.index() {
                    live[d] = false;
                }
            }
            let t = Tree::new(root, &live, fanout);
            let mut all = t.subtree(root);
            all.sort_unstable();
            let want: Vec<Rank> = (0..n).filter(|&r| live[r]).map(|r| Rank::new(r as u16)).collect();
            prop_assert_eq!(&all, &want);
            for &r in &want {
                let mut s = t.subtree(r);
                let mut parts = vec![r];
                for c in t.children(r) {
                    prop_assert_eq!(t.parent(c), Some(r));
                    parts.extend(t.subtree(c));
                }
                s.sort_unstable();
                parts.sort_unstable();
                prop_assert_eq!(s, parts);
                let (mut x, mut hops) = (r, 0);
                while let Some(p) = t.parent(x) {
                    x = p;
                    hops += 1;
                    prop_assert!(hops <= n);
                }
                prop_assert_eq!(x, root);
            }
        }
    }
}
