//! Rosters being collected from their parts: one per challenge held at most.
//!
//! **Invariants.** A roster is kept only for a challenge held (the caller drops it with its
//! challenge); its parts agree on their count and frame size (parts that disagree start it
//! over), and together name at most [`MAX_ROSTER`] members.

use std::collections::BTreeMap;

use crate::wire::ethernet::MacAddr;

/// Members of a roster, at most (a group has at most 65534).
const MAX_ROSTER: usize = u16::MAX as usize - 1;

/// A roster being collected from its parts.
#[derive(Debug, Default)]
struct Parts {
    parts: u16,
    pdu: u16,
    got: BTreeMap<u16, Vec<(MacAddr, u64)>>,
}

/// The rosters one member collects. See the module documentation.
#[derive(Debug, Default)]
pub(super) struct Rosters {
    /// By (coordinator, nonce).
    parts: BTreeMap<(MacAddr, u64), Parts>,
    /// The most held at once.
    peak: usize,
}

impl Rosters {
    /// Rosters being collected now.
    pub(super) fn len(&self) -> usize {
        self.parts.len()
    }

    /// The most rosters held at once.
    pub(super) fn peak(&self) -> usize {
        self.peak
    }

    /// Drops the roster of the challenge `key` (it lost its place).
    pub(super) fn remove(&mut self, key: (MacAddr, u64)) {
        self.parts.remove(&key);
    }

    /// Part `part` of `parts` of the roster of the challenge `key`, for frames of `pdu` bytes:
    /// the whole roster, in rank order, once every part is in.
    pub(super) fn add(
        &mut self,
        key: (MacAddr, u64),
        (part, parts, pdu): (u16, u16, u16),
        entries: Vec<(MacAddr, u64)>,
    ) -> Option<Vec<(MacAddr, u64)>> {
        if let std::collections::btree_map::Entry::Vacant(e) = self.parts.entry(key) {
            e.insert(Parts::default());
            self.peak = self.peak.max(self.parts.len());
        }
        let p = self.parts.get_mut(&key)?;
        if p.parts != parts || p.pdu != pdu {
            p.parts = parts;
            p.pdu = pdu;
            p.got.clear();
        }
        p.got.insert(part, entries);
        if p.got.values().map(Vec::len).sum::<usize>() > MAX_ROSTER {
            p.got.clear();
            return None;
        }
        (p.got.len() == usize::from(parts)).then(|| p.got.values().flatten().copied().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_roster_is_whole_once_every_part_agreeing_on_the_count_is_in() {
        let mut r = Rosters::default();
        let (a, b) = ((MacAddr([2; 6]), 1), (MacAddr([2; 6]), 2));
        let e = |i: u8| vec![(MacAddr([2, 0, 0, 0, 0, i]), u64::from(i))];
        assert_eq!(r.add(a, (1, 2, 1500), e(1)), None);
        // A part that disagrees on the count starts over.
        assert_eq!(r.add(a, (0, 3, 1500), e(0)), None);
        assert_eq!(r.add(a, (1, 3, 1500), e(1)), None);
        let whole = r.add(a, (2, 3, 1500), e(2)).expect("every part");
        assert_eq!(whole, [e(0), e(1), e(2)].concat());
        r.add(b, (0, 2, 1500), e(5));
        assert_eq!((r.len(), r.peak()), (2, 2));
        r.remove(a);
        assert_eq!((r.len(), r.peak()), (1, 2));
    }
}
