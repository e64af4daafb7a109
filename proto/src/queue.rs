//! A deterministic event queue: items come out earliest first, and items due at the same
//! instant in the order they went in.
//!
//! Why here: a harness that drives the sans-IO machines in virtual time (the barrier's and
//! the detector's specifications, a user's own) needs exactly this ordering, and a run is
//! reproducible from its seed only if ties never depend on the heap's internals. The sequence
//! number each push takes makes the order total. (The simulated switch keeps its own queue
//! of the same order, `src/link/sim/events.rs`, in entries a third the size: thousands of
//! ports' events wait in it at once.)

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Items of type `T` due at instants of type `A` (an `Instant`, a `Duration` since a base, or
/// nanoseconds), popped earliest first, first in first out among equal instants.
#[derive(Debug, Clone)]
pub struct EventQueue<A, T> {
    heap: BinaryHeap<Entry<A, T>>,
    seq: u64,
}

#[derive(Debug, Clone)]
struct Entry<A, T> {
    at: A,
    seq: u64,
    item: T,
}

impl<A: Ord, T> PartialEq for Entry<A, T> {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl<A: Ord, T> Eq for Entry<A, T> {}
impl<A: Ord, T> PartialOrd for Entry<A, T> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<A: Ord, T> Ord for Entry<A, T> {
    /// Reversed, so that `BinaryHeap` (a max-heap) pops the earliest entry first.
    fn cmp(&self, o: &Self) -> Ordering {
        (&o.at, o.seq).cmp(&(&self.at, self.seq))
    }
}

impl<A: Ord, T> Default for EventQueue<A, T> {
    fn default() -> Self {
        EventQueue {
            heap: BinaryHeap::new(),
            seq: 0,
        }
    }
}

impl<A: Ord + Copy, T> EventQueue<A, T> {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `item`, due at `at`.
    pub fn push(&mut self, at: A, item: T) {
        self.heap.push(Entry {
            at,
            seq: self.seq,
            item,
        });
        self.seq += 1;
    }

    /// When the earliest item is due.
    pub fn next_at(&self) -> Option<A> {
        self.heap.peek().map(|e| e.at)
    }

    /// The earliest item and its instant.
    pub fn pop(&mut self) -> Option<(A, T)> {
        self.heap.pop().map(|e| (e.at, e.item))
    }

    /// The earliest item, if it is due at or before `now`.
    pub fn pop_due(&mut self, now: A) -> Option<(A, T)> {
        if self.next_at()? <= now {
            self.pop()
        } else {
            None
        }
    }

    /// Items waiting.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// True when no item waits.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {

    use super::EventQueue;

    #[test]
    fn the_earliest_comes_first_and_ties_in_the_order_they_went_in() {
        let mut q = EventQueue::new();
        q.push(5u64, "c");
        q.push(1, "a");
        q.push(5, "d");
        q.push(3, "b");
        assert_eq!(q.len(), 4);
        assert_eq!(q.next_at(), Some(1));
        assert_eq!(q.pop_due(0), None);
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order, [(1, "a"), (3, "b"), (5, "c"), (5, "d")]);
        assert!(q.is_empty());
    }
}
