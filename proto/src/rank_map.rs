//! A map from ranks to values for the few ranks one member keeps something for: the roots
//! it receives from, the roots it posted receives for.
//!
//! Why not a `BTreeMap`: a member of a large group looks such a map up for every data frame
//! it takes, and a `BTreeMap` keeps even one entry in a node of its own, a cache line the
//! lookup misses when the member's turn comes again after thousands of others'. Here the
//! entries are a vector sorted by rank whose first `N` entries are kept inline, in the
//! struct that owns the map: with as many ranks as a member usually has, a lookup reads
//! only lines its owner's work touches anyway. Iteration is in rank order, as a
//! `BTreeMap`'s.

use smallvec::SmallVec;

use crate::Rank;

/// Values of type `V` by rank, the first `N` inline. See the module documentation.
#[derive(Debug, Clone)]
pub(crate) struct RankMap<V, const N: usize> {
    /// Sorted by rank, each rank at most once.
    entries: SmallVec<[(Rank, V); N]>,
}

impl<V, const N: usize> Default for RankMap<V, N> {
    fn default() -> Self {
        RankMap {
            entries: SmallVec::new(),
        }
    }
}

impl<V, const N: usize> RankMap<V, N> {
    /// An empty map.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Where `rank`'s entry is (`Ok`), or where it would go (`Err`).
    fn find(&self, rank: Rank) -> Result<usize, usize> {
        self.entries.binary_search_by_key(&rank, |&(r, _)| r)
    }

    /// The value of `rank`.
    pub(crate) fn get(&self, rank: Rank) -> Option<&V> {
        let i = self.find(rank).ok()?;
        Some(&self.entries[i].1)
    }

    /// The value of `rank`, to change.
    pub(crate) fn get_mut(&mut self, rank: Rank) -> Option<&mut V> {
        let i = self.find(rank).ok()?;
        Some(&mut self.entries[i].1)
    }

    /// Whether `rank` has a value.
    pub(crate) fn contains_key(&self, rank: Rank) -> bool {
        self.find(rank).is_ok()
    }

    /// The value of `rank`, made by `make` first if it has none.
    pub(crate) fn get_or_insert_with(&mut self, rank: Rank, make: impl FnOnce() -> V) -> &mut V {
        let i = match self.find(rank) {
            Ok(i) => i,
            Err(i) => {
                self.entries.insert(i, (rank, make()));
                i
            }
        };
        &mut self.entries[i].1
    }

    /// Sets the value of `rank`; the one it had, if any.
    pub(crate) fn insert(&mut self, rank: Rank, value: V) -> Option<V> {
        match self.find(rank) {
            Ok(i) => Some(std::mem::replace(&mut self.entries[i].1, value)),
            Err(i) => {
                self.entries.insert(i, (rank, value));
                None
            }
        }
    }

    /// Takes `rank`'s value out of the map.
    pub(crate) fn remove(&mut self, rank: Rank) -> Option<V> {
        let i = self.find(rank).ok()?;
        Some(self.entries.remove(i).1)
    }

    /// The ranks with a value, in order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = Rank> + '_ {
        self.entries.iter().map(|&(r, _)| r)
    }

    /// The values, in rank order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &V> + '_ {
        self.entries.iter().map(|(_, v)| v)
    }

    /// The values, in rank order, to change.
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut V> + '_ {
        self.entries.iter_mut().map(|(_, v)| v)
    }

    /// Ranks with a value.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

impl<V: Default, const N: usize> RankMap<V, N> {
    /// The value of `rank`, the default first if it has none.
    pub(crate) fn entry_or_default(&mut self, rank: Rank) -> &mut V {
        self.get_or_insert_with(rank, V::default)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::RankMap;
    use crate::Rank;

    /// One change to a map.
    #[derive(Debug, Clone)]
    enum Op {
        Insert(u16, u32),
        Remove(u16),
        Bump(u16),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Few ranks, so that the same ones come back: the cases a member meets.
        prop_oneof![
            (0u16..6, any::<u32>()).prop_map(|(r, v)| Op::Insert(r, v)),
            (0u16..6).prop_map(Op::Remove),
            (0u16..6).prop_map(Op::Bump),
        ]
    }

    proptest! {
        /// Whatever the changes, the map answers as an ordered map does: the same values by
        /// rank, the same ranks in the same order.
        #[test]
        fn it_answers_as_an_ordered_map(ops in proptest::collection::vec(op(), 0..64)) {
            let mut map: RankMap<u32, 2> = RankMap::new();
            let mut model: BTreeMap<Rank, u32> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Insert(r, v) => {
                        let r = Rank::new(r);
                        prop_assert_eq!(map.insert(r, v), model.insert(r, v));
                    }
                    Op::Remove(r) => {
                        let r = Rank::new(r);
                        prop_assert_eq!(map.remove(r), model.remove(&r));
                    }
                    Op::Bump(r) => {
                        let r = Rank::new(r);
                        *map.entry_or_default(r) += 1;
                        *model.entry(r).or_default() += 1;
                    }
                }
                prop_assert_eq!(map.len(), model.len());
                prop_assert!(map.keys().eq(model.keys().copied()));
                prop_assert!(map.values().eq(model.values()));
                for r in 0..6 {
                    let r = Rank::new(r);
                    prop_assert_eq!(map.get(r), model.get(&r));
                    prop_assert_eq!(map.contains_key(r), model.contains_key(&r));
                }
            }
        }
    }
}
