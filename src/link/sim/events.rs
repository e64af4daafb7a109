//! The switch's pending events, ordered by (due time, sequence number): earliest first, and
//! those due at the same instant in the order their sequence numbers were drawn.
//!
//! A 4-ary heap of 32-byte entries, two to a cache line. The due time and a tag make one
//! 128-bit key, compared in one go; the tag holds the sequence number above the kind of event
//! and the port, so keys are unique and order by (due time, sequence number) alone. The
//! frame a delivery carries is the rest of the entry. Why so small and so flat: with
//! thousands of ports, a broadcast puts one event per port in the heap, and each pop walks
//! from the root to a leaf, so the fewer the levels and the more entries to a cache line,
//! the fewer lines a pop touches (a general (key, sequence number, item) entry of a binary
//! heap is 56 bytes here).

use super::model::MAX_PORTS;
use dary_heap::QuaternaryHeap;
use std::collections::VecDeque;
use std::rc::Rc;

/// An Ethernet frame on its way, to the switch or to a port, behind the front of its link.
///
/// Frames on one link leave it in the order they entered (each link is a FIFO with
/// non-decreasing due times), so only the *front* of each link's queue is in the event
/// queue, its frame in the event: the queue stays as small as the number of ports plus the
/// frames held back for reordering, however long the links' queues grow under overload, and
/// a frame that finds its link idle is never written to the link's queue nor read back.
#[derive(Debug)]
pub(super) struct InFlight {
    pub(super) at: u64,
    pub(super) seq: u64,
    pub(super) pdu: Rc<[u8]>,
}

/// What happens when an event's time comes.
#[derive(Debug)]
pub(super) enum Event {
    /// The front frame of port `.0`'s uplink, `.1`, reaches the switch (it travels in the
    /// event for the reason [`Event::Downlink`]'s does).
    Uplink(usize, Rc<[u8]>),
    /// The front frame of the switch's output link to port `.0`, `.1`, reaches the port. It
    /// travels in the event, not in the port's state: no other line need be touched to
    /// deliver it.
    Downlink(usize, Rc<[u8]>),
    /// A frame held back for reordering, `.1`, reaches port `.0`.
    Late(usize, Rc<[u8]>),
    /// The transmit queue of port `.0`'s host may have drained below its bound.
    TxReady(usize),
}

/// Bits of the tag that hold the port.
const PORT_BITS: u32 = 16;
/// Bits of the tag that hold the kind of event, above the port.
const KIND_BITS: u32 = 2;
/// Sequence numbers below this fit the tag, above the kind: 2^46, days of simulation at any
/// speed the simulator reaches.
pub(super) const SEQ_LIMIT: u64 = 1 << (u64::BITS - KIND_BITS - PORT_BITS);

const _: () = assert!(MAX_PORTS <= 1 << PORT_BITS);

const UPLINK: u64 = 0;
const DOWNLINK: u64 = 1;
const LATE: u64 = 2;
const TX_READY: u64 = 3;

/// One pending event: `key` is the due time (high 64 bits) and the tag (sequence number,
/// kind, port); `frame` is the frame of an arrival or a delivery.
#[derive(Debug)]
struct Entry {
    key: u128,
    frame: Option<Rc<[u8]>>,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        self.key == o.key
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    /// Reversed, so that the max-heap pops the earliest key first.
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        o.key.cmp(&self.key)
    }
}

/// The pending events of a switch.
#[derive(Debug, Default)]
pub(super) struct Events {
    heap: QuaternaryHeap<Entry>,
}

impl Events {
    /// Queues `event`, due at `at` (nanoseconds of virtual time), in its turn by `seq` among
    /// the events due at the same instant. `seq` is unique and below [`SEQ_LIMIT`].
    pub(super) fn push(&mut self, at: u64, seq: u64, event: Event) {
        let (kind, port, frame) = match event {
            Event::Uplink(port, frame) => (UPLINK, port, Some(frame)),
            Event::Downlink(port, frame) => (DOWNLINK, port, Some(frame)),
            Event::Late(port, frame) => (LATE, port, Some(frame)),
            Event::TxReady(port) => (TX_READY, port, None),
        };
        // `port < MAX_PORTS` (a port index of the switch), so it fits its bits.
        let tag = seq << (KIND_BITS + PORT_BITS) | kind << PORT_BITS | port as u64;
        self.heap.push(Entry {
            key: u128::from(at) << 64 | u128::from(tag),
            frame,
        });
    }

    /// Puts `frame` on a link whose front alone is queued here (see [`InFlight`]): here now,
    /// as `event` of it, if the link is idle (`busy` false), else `behind` the front.
    pub(super) fn onto_link(
        &mut self,
        busy: &mut bool,
        behind: &mut VecDeque<InFlight>,
        frame: InFlight,
        event: impl FnOnce(Rc<[u8]>) -> Event,
    ) {
        if std::mem::replace(busy, true) {
            behind.push_back(frame);
        } else {
            self.push(frame.at, frame.seq, event(frame.pdu));
        }
    }

    /// The front of a link left it (its event came): the next frame `behind` it is queued
    /// here, as `event` of it, or the link is idle.
    pub(super) fn next_on_link(
        &mut self,
        busy: &mut bool,
        behind: &mut VecDeque<InFlight>,
        event: impl FnOnce(Rc<[u8]>) -> Event,
    ) {
        match behind.pop_front() {
            Some(next) => self.push(next.at, next.seq, event(next.pdu)),
            None => *busy = false,
        }
    }

    /// When the earliest event is due.
    pub(super) fn next_at(&self) -> Option<u64> {
        self.heap.peek().map(|e| (e.key >> 64) as u64)
    }

    /// The earliest event and when it is due, if that is at or before `now`.
    pub(super) fn pop_due(&mut self, now: u64) -> Option<(u64, Event)> {
        if self.next_at()? > now {
            return None;
        }
        let Entry { key, frame } = self.heap.pop()?;
        let tag = key as u64;
        let port = (tag & ((1 << PORT_BITS) - 1)) as usize;
        let event = match (tag >> PORT_BITS & ((1 << KIND_BITS) - 1), frame) {
            (DOWNLINK, Some(frame)) => Event::Downlink(port, frame),
            (LATE, Some(frame)) => Event::Late(port, frame),
            (UPLINK, Some(frame)) => Event::Uplink(port, frame),
            _ => Event::TxReady(port),
        };
        Some(((key >> 64) as u64, event))
    }
}

#[cfg(test)]
mod tests {
    use super::{Event, Events, SEQ_LIMIT};

    /// The ports of the events `q` hands out due at or before `now`, with their instants.
    fn drain(q: &mut Events, now: u64) -> Vec<(u64, usize)> {
        std::iter::from_fn(|| q.pop_due(now))
            .map(|(at, e)| match e {
                Event::Uplink(p, _)
                | Event::Downlink(p, _)
                | Event::Late(p, _)
                | Event::TxReady(p) => (at, p),
            })
            .collect()
    }

    #[test]
    fn the_earliest_comes_first_and_ties_by_sequence_number_whatever_the_kind_and_port() {
        let frame: std::rc::Rc<[u8]> = vec![1, 2, 3].into();
        let mut q = Events::default();
        q.push(5, 7, Event::TxReady(0));
        q.push(5, 3, Event::Late(65_535, frame.clone()));
        q.push(1, 9, Event::Downlink(2, frame.clone()));
        q.push(5, SEQ_LIMIT - 1, Event::Uplink(1, frame.clone()));
        q.push(3, 0, Event::Uplink(4, frame.clone()));
        assert_eq!(q.next_at(), Some(1));
        assert!(q.pop_due(0).is_none());
        assert_eq!(drain(&mut q, 4), [(1, 2), (3, 4)]);
        assert_eq!(drain(&mut q, u64::MAX), [(5, 65_535), (5, 0), (5, 1)]);
        assert_eq!(q.next_at(), None);
    }

    #[test]
    fn a_delivery_comes_out_with_its_frame() {
        let mut q = Events::default();
        q.push(u64::MAX, 0, Event::Downlink(3, vec![9u8; 4].into()));
        q.push(u64::MAX, 1, Event::Late(4, vec![8u8; 2].into()));
        match q.pop_due(u64::MAX) {
            Some((u64::MAX, Event::Downlink(3, f))) => assert_eq!(&f[..], [9; 4]),
            other => panic!("{other:?}"),
        }
        match q.pop_due(u64::MAX) {
            Some((u64::MAX, Event::Late(4, f))) => assert_eq!(&f[..], [8; 2]),
            other => panic!("{other:?}"),
        }
    }
}
