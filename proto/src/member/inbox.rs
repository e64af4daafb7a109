//! Messages waiting for the application, per sender, kept for the senders that have some.
//!
//! A member keeps an inbox per root (group broadcasts) and per peer (point-to-point
//! messages). As a vector of queues that was 64 bytes per rank at every member whether anyone
//! ever sent: 256 KiB per member of a group of 4096, a gigabyte for the whole group on the
//! simulator. Here a rank costs something only once a message of it waited.

use std::collections::{BTreeMap, VecDeque};
use std::ops::{Index, IndexMut};

/// Messages waiting per sender rank (an index, as for a vector of queues).
#[derive(Debug, Default)]
pub(super) struct Inboxes(BTreeMap<usize, VecDeque<Vec<u8>>>);

/// The inbox of a rank nothing waits from.
static EMPTY: VecDeque<Vec<u8>> = VecDeque::new();

impl Inboxes {
    /// The inbox of `rank`, if a message of it ever waited.
    pub(super) fn get_mut(&mut self, rank: usize) -> Option<&mut VecDeque<Vec<u8>>> {
        self.0.get_mut(&rank)
    }
}

impl Index<usize> for Inboxes {
    type Output = VecDeque<Vec<u8>>;
    fn index(&self, rank: usize) -> &VecDeque<Vec<u8>> {
        self.0.get(&rank).unwrap_or(&EMPTY)
    }
}

impl IndexMut<usize> for Inboxes {
    fn index_mut(&mut self, rank: usize) -> &mut VecDeque<Vec<u8>> {
        self.0.entry(rank).or_default()
    }
}
