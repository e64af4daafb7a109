//! What a join overhears besides its own exchange, for the messages of a join that does not
//! complete: hosts whose join frames fail authentication under this member's key (a host with
//! another key), other coordinators challenging on this group (a second sender), and hosts
//! sending frames of another session (a transfer already running on this group's address).
//! Each set is bounded, so a flood of forged sources costs bounded memory.

use std::collections::{BTreeMap, BTreeSet};

use crate::wire::ethernet::MacAddr;

/// Sources remembered per set, at most.
const MAX_SOURCES: usize = 64;

/// What a join overheard (see the module's doc).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overheard {
    /// Join frames that failed authentication, by source.
    unauthenticated: BTreeMap<MacAddr, u64>,
    /// Coordinators whose authenticated challenges this member heard.
    coordinators: BTreeSet<MacAddr>,
    /// Sources of frames of another session's rank 0.
    others: BTreeSet<MacAddr>,
    /// Sources of frames of another version of the wire format (another release), with it.
    versions: BTreeMap<MacAddr, u8>,
}

impl Overheard {
    /// A join frame from `src` failed authentication.
    pub(super) fn failed_authentication(&mut self, src: MacAddr) {
        if let Some(n) = self.unauthenticated.get_mut(&src) {
            *n = n.saturating_add(1);
        } else if self.unauthenticated.len() < MAX_SOURCES {
            self.unauthenticated.insert(src, 1);
        }
    }

    /// An authenticated challenge of `src` (a coordinator) was heard.
    pub(super) fn challenge_from(&mut self, src: MacAddr) {
        if self.coordinators.len() < MAX_SOURCES {
            self.coordinators.insert(src);
        }
    }

    /// A frame of another session's rank 0 came from `src`.
    pub(super) fn other_session(&mut self, src: MacAddr) {
        if self.others.len() < MAX_SOURCES {
            self.others.insert(src);
        }
    }

    /// A frame of wire version `v` (not this build's, its CRC whole) came from `src`; true
    /// the first time for `src` and `v`.
    pub(super) fn other_version(&mut self, src: MacAddr, v: u8) -> bool {
        if self.versions.get(&src) == Some(&v) || self.versions.len() >= MAX_SOURCES {
            return false;
        }
        self.versions.insert(src, v);
        true
    }

    /// Hosts that sent frames of another version of the wire format, with the version.
    pub fn other_versions(&self) -> Vec<(MacAddr, u8)> {
        self.versions.iter().map(|(m, v)| (*m, *v)).collect()
    }

    /// Hosts whose join frames failed authentication, with how many frames each.
    pub fn unauthenticated(&self) -> Vec<(MacAddr, u64)> {
        self.unauthenticated.iter().map(|(m, n)| (*m, *n)).collect()
    }

    /// Coordinators heard challenging on this group.
    pub fn coordinators(&self) -> Vec<MacAddr> {
        self.coordinators.iter().copied().collect()
    }

    /// Hosts that sent frames as rank 0 of another session.
    pub fn others(&self) -> Vec<MacAddr> {
        self.others.iter().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::{Overheard, MAX_SOURCES};
    use crate::wire::ethernet::MacAddr;

    #[test]
    fn each_source_is_counted_and_the_sets_are_bounded() {
        let mut o = Overheard::default();
        let a = MacAddr([2, 0, 0, 0, 0, 1]);
        for _ in 0..3 {
            o.failed_authentication(a);
        }
        assert_eq!(o.unauthenticated(), vec![(a, 3)]);
        for i in 0..200u8 {
            let m = MacAddr([2, 0, 0, 0, 1, i]);
            o.failed_authentication(m);
            o.challenge_from(m);
            o.other_session(m);
            o.other_version(m, 1);
        }
        assert_eq!(o.unauthenticated().len(), MAX_SOURCES);
        assert_eq!(o.coordinators().len(), MAX_SOURCES);
        assert_eq!(o.others().len(), MAX_SOURCES);
        assert_eq!(o.other_versions().len(), MAX_SOURCES);
        // A source already counted is still counted once the set is full.
        o.failed_authentication(a);
        assert!(o.unauthenticated().contains(&(a, 4)));
    }
}
