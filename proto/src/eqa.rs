//! EQA, the Enhanced Queue Architecture: one retransmission buffer for every destination.
//!
//! Wong & Wang (section 2.3 of the EQA paper) observe that a reliable broadcast built from
//! point-to-point channels keeps a copy of every frame per destination. EQA keeps ONE copy:
//!
//! - [`Buf`] is the retransmission buffer (BUF), a fixed ring of frame slots owned by the root's
//!   send-only directed point (the SDP);
//! - [`Hms`] is the producer's management structure: head (next sequence to publish), tail
//!   (oldest sequence still held) and the list of live consumers;
//! - [`Lms`] is the per-destination lightweight structure (the paper's LDP): a cursor (the next
//!   sequence that destination still needs), its retransmission timeout and back-off (the
//!   deadline itself is in the engine's timer table), its repair queue and liveness. It holds no
//!   frame data, only references into `Buf`.
//!
//! Each slot carries a reference count: the number of live destinations whose cursor has not
//! yet passed it. A slot is freed, and the tail advances, only when that count drops to zero.
//! Adding a destination therefore costs one `Lms`, never a buffer; evicting one releases its
//! references so that the survivors are not held back by a dead peer.
//!
//! Invariants (checked by the property test against a plain oracle):
//! - `tail <= head` and `head - tail <= capacity`;
//! - for `tail <= s < head`, `refs(s)` = number of live `Lms` with `cursor <= s`;
//! - `tail` = min(cursor of live `Lms`, head), or `head` when none is live;
//! - a destination is in the pending set exactly when its repair queue is not empty.
//!
//! Cost: with a thousand destinations, work per frame or per acknowledgement must not visit
//! every destination. The pending set lets the repair scheduler find the destinations that
//! asked for something without scanning the ones that did not.

use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use crate::engine::{Retransmit, Route};
use crate::wire::Repr;

use crate::{Rank, Seq};

/// One slot of the retransmission buffer: a frame header and where its payload is.
#[derive(Debug)]
pub struct Slot {
    repr: Repr,
    len: u16,
    refs: u16,
    want: u16,
}

/// A slot of the buffer with its payload, as [`Eqa::slot`] lends it out.
#[derive(Debug, Clone, Copy)]
pub struct SlotRef<'a> {
    slot: &'a Slot,
    payload: &'a [u8],
}

impl SlotRef<'_> {
    /// Header of the frame held here.
    pub fn repr(&self) -> &Repr {
        &self.slot.repr
    }
    /// Payload of the frame held here.
    pub fn payload(&self) -> &[u8] {
        self.payload
    }
    /// Live destinations that still need this frame.
    pub fn refs(&self) -> u16 {
        self.slot.refs
    }
    /// Destinations with a pending repair request for this frame.
    pub fn want(&self) -> u16 {
        self.slot.want
    }
}

/// The payloads of a ring of slots, `cap` bytes each, in one zeroed block: the allocator maps
/// a large one as zero pages that cost memory only once written, so a member that never
/// broadcasts (most members of a file distribution, every point-to-point pair that carries no
/// data) pays nothing for its retransmission buffer. (One small allocation per slot wrote a heap header into every page:
/// 3 MiB of page faults per buffer, 51 MiB for a sender with 8 receivers and their
/// point-to-point pairs.)
///
/// The allocator does not always map such a block: once a large block was freed, glibc serves
/// the next ones from its heap and zeroes them there, every page. A root's buffer therefore
/// makes its block at its first frame ([`Payloads::none`], see `Buf::store`): in the simulator,
/// where thousands of members share one process, a buffer zeroed at every member that never
/// broadcasts was 141 KiB per member (578 MiB of 4096 members, 4 of them roots).
#[derive(Debug, Default)]
pub(crate) struct Payloads {
    data: Box<[u8]>,
    cap: usize,
}

impl Payloads {
    /// Places for `slots` payloads of at most `cap` bytes.
    pub(crate) fn new(slots: usize, cap: usize) -> Payloads {
        Payloads {
            data: vec![0u8; slots * cap].into_boxed_slice(),
            cap,
        }
    }
    /// No places yet, for payloads of at most `cap` bytes.
    pub(crate) fn none(cap: usize) -> Payloads {
        Payloads {
            data: Box::default(),
            cap,
        }
    }
    /// Largest payload a place holds.
    pub(crate) fn cap(&self) -> usize {
        self.cap
    }
    /// All places, as one block.
    pub(crate) fn all(&self) -> &[u8] {
        &self.data
    }
    /// Copies `payload` (at most `cap` bytes) into place `i`.
    pub(crate) fn store(&mut self, i: usize, payload: &[u8]) {
        let at = i * self.cap;
        self.data[at..at + payload.len()].copy_from_slice(payload);
    }
    /// The first `len` bytes of place `i` (nothing for a length past the place, rather than
    /// bytes of the next one).
    pub(crate) fn get(&self, i: usize, len: usize) -> &[u8] {
        if len > self.cap {
            return &[];
        }
        let at = i * self.cap;
        self.data.get(at..at + len).unwrap_or(&[])
    }
}

/// The shared retransmission buffer: a fixed ring of frame slots, their payloads in one
/// zeroed block made at the first frame published (a member that never broadcasts pays
/// nothing for its buffer's payloads).
#[derive(Debug)]
pub struct Buf {
    slots: Box<[Slot]>,
    payloads: Payloads,
}

impl Buf {
    /// A buffer of `slots` slots of `payload_cap` payload bytes each.
    pub fn new(slots: usize, payload_cap: usize) -> Buf {
        let n = slots.max(1);
        let slots = (0..n)
            .map(|_| Slot {
                repr: Repr::default(),
                len: 0,
                refs: 0,
                want: 0,
            })
            .collect();
        Buf {
            slots,
            payloads: Payloads::none(payload_cap),
        }
    }
    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }
    /// Largest payload a slot holds.
    pub fn payload_cap(&self) -> usize {
        self.payloads.cap()
    }
    fn index(&self, seq: Seq) -> usize {
        seq.ring_index(self.slots.len())
    }
    /// Heap bytes this buffer owns once it holds a frame (its payloads are allocated then).
    pub fn heap_bytes(&self) -> usize {
        self.slots.len() * (std::mem::size_of::<Slot>() + self.payload_cap())
    }
    /// Stores `payload` as the payload of slot `i`.
    fn store(&mut self, i: usize, payload: &[u8]) {
        if self.payloads.all().is_empty() {
            // The first frame: the block is made now (see `Payloads`).
            self.payloads = Payloads::new(self.slots.len(), self.payloads.cap());
        }
        self.payloads.store(i, payload);
        self.slots[i].len = payload.len() as u16;
    }
    fn get(&self, i: usize) -> SlotRef<'_> {
        let slot = &self.slots[i];
        SlotRef {
            slot,
            payload: self.payloads.get(i, usize::from(slot.len)),
        }
    }
}

/// The producer's management structure.
#[derive(Debug, Clone, Default)]
pub struct Hms {
    head: Seq,
    tail: Seq,
    live: usize,
}

impl Hms {
    /// Next sequence to be published.
    pub fn head(&self) -> Seq {
        self.head
    }
    /// Oldest sequence still held in `Buf`.
    pub fn tail(&self) -> Seq {
        self.tail
    }
    /// Number of live consumers.
    pub fn live(&self) -> usize {
        self.live
    }
}

/// One destination's lightweight management structure (the LDP).
#[derive(Debug)]
pub struct Lms {
    rank: Rank,
    cursor: Seq,
    live: bool,
    repair: VecDeque<Seq>,
    repair_cap: usize,
    /// Its retransmission timer (the root's sender runs it).
    pub(crate) timer: Retransmit,
    /// How fresh frames and repairs reach it (the fail-over judges it).
    pub(crate) route: Route,
    /// Per-destination counters.
    pub stats: LmsStats,
}

/// Counters kept per destination.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LmsStats {
    /// Frames sent to this destination point-to-point as repair.
    pub repairs: u64,
    /// NACK frames received from it.
    pub nacks: u64,
    /// ACK frames received from it.
    pub acks: u64,
    /// Retransmission timer expiries.
    pub timeouts: u64,
    /// Repair requests dropped because the repair queue was full.
    pub repair_queue_full: u64,
    /// Retransmission-timer probes sent.
    pub probes: u64,
    /// Acknowledgement polls sent at a first timeout (no retransmission).
    pub polls: u64,
    /// Repairs served to it by a re-broadcast.
    pub rebroadcasts: u64,
    /// Largest distance seen between the head and its cursor (frames).
    pub max_lag: u64,
    /// Pull requests received from it.
    pub pulls: u64,
    /// Payload bytes repaired to it.
    pub repaired_bytes: u64,
    /// Times it was switched to point-to-point delivery.
    pub failovers: u64,
    /// Times it was switched back to broadcast after a trial showed that broadcast reaches it.
    pub failbacks: u64,
}

impl Lms {
    /// Rank of the destination.
    pub fn rank(&self) -> Rank {
        self.rank
    }
    /// Next sequence this destination still needs.
    pub fn cursor(&self) -> Seq {
        self.cursor
    }
    /// False once evicted.
    pub fn is_live(&self) -> bool {
        self.live
    }
    /// Its current retransmission timeout (the configured one, doubled per expiry without
    /// progress).
    pub fn rto(&self) -> Duration {
        self.timer.rto()
    }
    /// When its cursor last moved (never, since it was added: `None`).
    pub fn last_progress(&self) -> Option<Instant> {
        self.timer.last_progress()
    }
    /// When a frame last came from it.
    pub fn last_heard(&self) -> Option<Instant> {
        self.timer.last_heard()
    }
    /// Whether it is served point to point, because broadcast does not reach it (fail-over).
    pub fn point_to_point(&self) -> bool {
        self.route.point_to_point()
    }
    /// Pending repair requests (sequences), oldest first.
    pub fn repair_queue(&self) -> &VecDeque<Seq> {
        &self.repair
    }
    /// Heap bytes owned (the repair queue, the LDP's send queue).
    pub fn heap_bytes(&self) -> usize {
        self.repair.capacity() * std::mem::size_of::<Seq>()
    }
}

/// Why a frame could not be published.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PublishError {
    /// Every slot is held by some destination: wait for acknowledgements.
    #[error("retransmission buffer full")]
    Full,
    /// The payload is larger than a slot.
    #[error("payload of {0} bytes exceeds the slot size")]
    TooLong(usize),
}

/// The retransmission buffer with its producer and per-destination consumers.
#[derive(Debug)]
pub struct Eqa {
    buf: Buf,
    hms: Hms,
    lms: Vec<Lms>,
    by_rank: Vec<Option<u32>>,
    /// Indices (into `lms`) of the destinations whose repair queue is not empty.
    pending: BTreeSet<u32>,
}

impl Eqa {
    /// Creates the buffer and one `Lms` per destination rank. `repair_cap` bounds each
    /// destination's repair queue (its LDP send queue).
    pub fn new(
        slots: usize,
        payload_cap: usize,
        dests: impl IntoIterator<Item = Rank>,
        repair_cap: usize,
        rto: Duration,
    ) -> Eqa {
        let mut eqa = Eqa {
            buf: Buf::new(slots, payload_cap),
            hms: Hms::default(),
            lms: Vec::new(),
            by_rank: Vec::new(),
            pending: BTreeSet::new(),
        };
        for r in dests {
            eqa.add_dest(r, repair_cap, rto);
        }
        eqa
    }

    /// Adds a destination whose cursor starts at the current head (it needs what is published
    /// from now on). Costs one `Lms`.
    pub fn add_dest(&mut self, rank: Rank, repair_cap: usize, rto: Duration) {
        if self.index(rank).is_some() {
            return;
        }
        let idx = self.lms.len() as u32;
        self.lms.push(Lms {
            rank,
            cursor: self.hms.head,
            live: true,
            repair: VecDeque::with_capacity(repair_cap),
            repair_cap,
            timer: Retransmit::new(rto),
            route: Route::default(),
            stats: LmsStats::default(),
        });
        let r = rank.index();
        if self.by_rank.len() <= r {
            self.by_rank.resize(r + 1, None);
        }
        self.by_rank[r] = Some(idx);
        self.hms.live += 1;
    }

    fn index(&self, rank: Rank) -> Option<usize> {
        self.by_rank
            .get(rank.index())
            .copied()
            .flatten()
            .map(|i| i as usize)
    }

    /// The buffer.
    pub fn buf(&self) -> &Buf {
        &self.buf
    }
    /// The producer structure.
    pub fn hms(&self) -> &Hms {
        &self.hms
    }
    /// Next sequence to publish.
    pub fn head(&self) -> Seq {
        self.hms.head
    }
    /// Oldest sequence still held.
    pub fn tail(&self) -> Seq {
        self.hms.tail
    }
    /// Slots free for publishing.
    pub fn free_slots(&self) -> usize {
        self.buf.capacity() - (self.hms.head - self.hms.tail) as usize
    }
    /// Every destination structure, live or evicted.
    pub fn dests(&self) -> &[Lms] {
        &self.lms
    }
    /// Mutable access to every destination structure.
    pub fn dests_mut(&mut self) -> &mut [Lms] {
        &mut self.lms
    }
    /// The structure of one destination.
    pub fn lms(&self, rank: Rank) -> Option<&Lms> {
        self.index(rank).map(|i| &self.lms[i])
    }
    /// Mutable structure of one destination.
    pub fn lms_mut(&mut self, rank: Rank) -> Option<&mut Lms> {
        self.index(rank).map(move |i| &mut self.lms[i])
    }

    /// Stores a frame in the next slot and returns its sequence; the header's `seq` is set.
    /// Every live destination takes a reference.
    pub fn publish(&mut self, mut repr: Repr, payload: &[u8]) -> Result<Seq, PublishError> {
        if payload.len() > self.buf.payload_cap() {
            return Err(PublishError::TooLong(payload.len()));
        }
        if self.free_slots() == 0 {
            return Err(PublishError::Full);
        }
        let seq = self.hms.head;
        repr.seq = seq.low32();
        let i = self.buf.index(seq);
        self.buf.store(i, payload);
        let slot = &mut self.buf.slots[i];
        slot.repr = repr;
        slot.refs = self.hms.live as u16;
        slot.want = 0;
        self.hms.head += 1;
        self.advance_tail();
        Ok(seq)
    }

    /// The slot holding `seq`, if it is still in the buffer.
    pub fn slot(&self, seq: Seq) -> Option<SlotRef<'_>> {
        (seq >= self.hms.tail && seq < self.hms.head).then(|| self.buf.get(self.buf.index(seq)))
    }

    fn release(&mut self, seq: Seq) {
        let i = self.buf.index(seq);
        let slot = &mut self.buf.slots[i];
        slot.refs = slot.refs.saturating_sub(1);
    }

    fn advance_tail(&mut self) {
        while self.hms.tail < self.hms.head
            && self.buf.slots[self.buf.index(self.hms.tail)].refs == 0
        {
            self.hms.tail += 1;
        }
    }

    /// A cumulative acknowledgement from `rank`: it has everything before `cursor`.
    /// Returns true if the cursor advanced. Stale acknowledgements change nothing; a cursor
    /// beyond the head (a confused or forged peer) is clamped to the head.
    pub fn ack(&mut self, rank: Rank, cursor: Seq) -> bool {
        let Some(i) = self.index(rank) else {
            return false;
        };
        let head = self.hms.head;
        let lms = &mut self.lms[i];
        let new = cursor.min(head);
        if !lms.live || new <= lms.cursor {
            return false;
        }
        let old = std::mem::replace(&mut lms.cursor, new);
        // Repair requests for what it now has are void (and no longer want their slot).
        let (buf, held) = (&mut self.buf, self.hms.tail..self.hms.head);
        lms.repair.retain(|&s| {
            if s >= new {
                return true;
            }
            if held.contains(&s) {
                let j = buf.index(s);
                buf.slots[j].want = buf.slots[j].want.saturating_sub(1);
            }
            false
        });
        if lms.repair.is_empty() {
            self.pending.remove(&(i as u32));
        }
        for s in old.max(self.hms.tail).up_to(new) {
            self.release(s);
        }
        self.advance_tail();
        true
    }

    fn unwant(&mut self, seq: Seq) {
        if seq >= self.hms.tail && seq < self.hms.head {
            let i = self.buf.index(seq);
            let slot = &mut self.buf.slots[i];
            slot.want = slot.want.saturating_sub(1);
        }
    }

    /// Evicts a destination: releases every reference it holds and forgets its repairs.
    /// Returns false if it was unknown or already evicted.
    pub fn evict(&mut self, rank: Rank) -> bool {
        let Some(i) = self.index(rank) else {
            return false;
        };
        if !self.lms[i].live {
            return false;
        }
        self.lms[i].live = false;
        self.hms.live -= 1;
        let cursor = self.lms[i].cursor;
        let pending: Vec<Seq> = self.lms[i].repair.drain(..).collect();
        self.pending.remove(&(i as u32));
        for s in pending {
            self.unwant(s);
        }
        for s in cursor.max(self.hms.tail).up_to(self.hms.head) {
            self.release(s);
        }
        self.advance_tail();
        true
    }

    /// Queues `seq` for repair to `rank`. Ignored if it is not held any more, if the
    /// destination already has it, or if it is already queued; returns true if queued.
    pub fn request_repair(&mut self, rank: Rank, seq: Seq) -> bool {
        let Some(i) = self.index(rank) else {
            return false;
        };
        let (tail, head) = (self.hms.tail, self.hms.head);
        let lms = &mut self.lms[i];
        if !lms.live || seq < lms.cursor.max(tail) || seq >= head || lms.repair.contains(&seq) {
            return false;
        }
        if lms.repair.len() >= lms.repair_cap {
            lms.stats.repair_queue_full += 1;
            return false;
        }
        lms.repair.push_back(seq);
        self.pending.insert(i as u32);
        let idx = self.buf.index(seq);
        self.buf.slots[idx].want += 1;
        true
    }

    /// Takes the oldest still-valid repair request of `rank`.
    pub fn pop_repair(&mut self, rank: Rank) -> Option<Seq> {
        let i = self.index(rank)?;
        let mut found = None;
        while let Some(s) = self.lms[i].repair.pop_front() {
            self.unwant(s);
            if s >= self.lms[i].cursor && s >= self.hms.tail && s < self.hms.head {
                found = Some(s);
                break;
            }
        }
        if self.lms[i].repair.is_empty() {
            self.pending.remove(&(i as u32));
        }
        found
    }

    /// Whether any destination has a repair request queued.
    pub fn has_repairs(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The first destination at index `from` or after it (wrapping around) in
    /// [`Eqa::dests`] whose repair queue is not empty: the round-robin repair scheduler's next
    /// turn, found without visiting the destinations that asked for nothing.
    pub fn next_with_repairs(&self, from: usize) -> Option<usize> {
        let from = u32::try_from(from).unwrap_or(u32::MAX);
        self.pending
            .range(from..)
            .next()
            .or_else(|| self.pending.iter().next())
            .map(|&i| i as usize)
    }

    /// Withdraws `seq` from every destination's repair queue (it is being re-broadcast).
    /// Appends the ranks that had asked for it to `ranks`.
    pub fn withdraw_repair(&mut self, seq: Seq, ranks: &mut Vec<Rank>) {
        for &i in &self.pending {
            let lms = &mut self.lms[i as usize];
            if let Some(p) = lms.repair.iter().position(|&s| s == seq) {
                lms.repair.remove(p);
                ranks.push(lms.rank);
            }
        }
        let lms = &self.lms;
        self.pending.retain(|&i| !lms[i as usize].repair.is_empty());
        if seq >= self.hms.tail && seq < self.hms.head {
            let i = self.buf.index(seq);
            self.buf.slots[i].want = 0;
        }
    }
}

#[cfg(test)]
mod tests {

    use std::time::Duration;

    use crate::wire::{Kind, Repr};
    use crate::{Rank, Seq};

    use super::{Eqa, Payloads, PublishError};

    #[test]
    fn payload_places_hold_their_own_bytes_only() {
        let mut p = Payloads::new(3, 4);
        p.store(1, b"abc");
        p.store(2, b"wxyz");
        assert_eq!(p.get(1, 3), b"abc");
        assert_eq!(p.get(0, 4), [0u8; 4], "untouched places read as zeros");
        assert!(p.get(1, 5).is_empty(), "never the next place's bytes");
        assert!(p.get(3, 1).is_empty(), "no place past the last");
    }
    use proptest::prelude::*;

    fn eqa(dests: &[Rank]) -> Eqa {
        Eqa::new(4, 8, dests.iter().copied(), 16, Duration::from_millis(1))
    }

    fn data() -> Repr {
        Repr::new(Kind::Data)
    }

    #[test]
    fn a_slot_is_freed_only_when_every_live_destination_has_passed_it() {
        let mut e = eqa(&[Rank::new(1), Rank::new(2)]);
        let s = e.publish(data(), b"x").unwrap();
        assert_eq!(e.slot(s).unwrap().refs(), 2);
        e.ack(Rank::new(1), s + 1);
        assert_eq!(e.tail(), s, "rank 2 still needs it");
        e.ack(Rank::new(2), s + 1);
        assert_eq!(e.tail(), s + 1);
        assert!(e.slot(s).is_none());
    }

    #[test]
    fn the_buffer_refuses_to_overwrite_held_frames() {
        let mut e = eqa(&[Rank::new(1)]);
        for _ in 0..4 {
            e.publish(data(), b"x").unwrap();
        }
        assert_eq!(e.publish(data(), b"x"), Err(PublishError::Full));
        e.ack(Rank::new(1), Seq::new(1));
        assert!(e.publish(data(), b"y").is_ok());
    }

    #[test]
    fn eviction_releases_the_references_of_the_dead() {
        let mut e = eqa(&[Rank::new(1), Rank::new(2)]);
        for _ in 0..4 {
            e.publish(data(), b"x").unwrap();
        }
        e.ack(Rank::new(1), Seq::new(4));
        assert_eq!(e.free_slots(), 0);
        assert!(e.evict(Rank::new(2)));
        assert_eq!(e.free_slots(), 4);
        assert!(!e.evict(Rank::new(2)), "evicting twice is a no-op");
    }

    #[test]
    fn adding_a_destination_costs_no_buffer() {
        let a = eqa(&[Rank::new(1)]);
        let b = eqa(&Rank::all(100).skip(1).collect::<Vec<_>>());
        assert_eq!(a.buf().heap_bytes(), b.buf().heap_bytes());
    }

    #[test]
    fn stale_and_future_acks_are_harmless() {
        let mut e = eqa(&[Rank::new(1)]);
        e.publish(data(), b"x").unwrap();
        assert!(e.ack(Rank::new(1), Seq::new(1)));
        assert!(!e.ack(Rank::new(1), Seq::new(0)), "stale");
        e.publish(data(), b"x").unwrap();
        assert!(e.ack(Rank::new(1), Seq::new(1_000_000)), "clamped to head");
        assert_eq!(e.lms(Rank::new(1)).unwrap().cursor(), Seq::new(2));
        assert!(!e.ack(Rank::new(9), Seq::new(1)), "unknown rank");
    }

    #[test]
    fn repair_requests_are_deduplicated_and_voided_by_acks() {
        let mut e = eqa(&[Rank::new(1), Rank::new(2)]);
        for _ in 0..3 {
            e.publish(data(), b"x").unwrap();
        }
        assert!(e.request_repair(Rank::new(1), Seq::new(1)));
        assert!(!e.request_repair(Rank::new(1), Seq::new(1)));
        assert!(e.request_repair(Rank::new(2), Seq::new(1)));
        assert_eq!(e.slot(Seq::new(1)).unwrap().want(), 2);
        let mut asked = Vec::new();
        e.withdraw_repair(Seq::new(1), &mut asked);
        assert_eq!(asked, vec![Rank::new(1), Rank::new(2)]);
        assert!(e.request_repair(Rank::new(1), Seq::new(2)));
        e.ack(Rank::new(1), Seq::new(3));
        assert_eq!(e.pop_repair(Rank::new(1)), None);
        assert!(
            !e.request_repair(Rank::new(1), Seq::new(7)),
            "not published"
        );
    }

    #[derive(Debug, Clone)]
    enum Op {
        Publish,
        Ack(u16, u8),
        Evict(u16),
        Request(u16, u8),
        Pop(u16),
        Withdraw(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => Just(Op::Publish),
            3 => (0u16..5, 0u8..6).prop_map(|(r, d)| Op::Ack(r, d)),
            1 => (0u16..5).prop_map(Op::Evict),
            2 => (0u16..5, 0u8..8).prop_map(|(r, d)| Op::Request(r, d)),
            1 => (0u16..5).prop_map(Op::Pop),
            1 => (0u8..8).prop_map(Op::Withdraw),
        ]
    }

    /// The repair bookkeeping against the queues themselves: the pending set names exactly
    /// the destinations with a queued request, the round robin finds the first of them from
    /// any index on, and each held frame's `want` counts the queues that hold it.
    fn check_repairs(e: &Eqa) -> Result<(), TestCaseError> {
        let nonempty: Vec<usize> = (0..e.dests().len())
            .filter(|&i| !e.dests()[i].repair_queue().is_empty())
            .collect();
        prop_assert_eq!(e.has_repairs(), !nonempty.is_empty());
        for from in 0..=e.dests().len() {
            let want = nonempty
                .iter()
                .find(|&&i| i >= from)
                .or(nonempty.first())
                .copied();
            prop_assert_eq!(e.next_with_repairs(from), want);
        }
        for s in e.tail().up_to(e.head()) {
            let queued = e
                .dests()
                .iter()
                .filter(|l| l.repair_queue().contains(&s))
                .count() as u16;
            prop_assert_eq!(e.slot(s).unwrap().want(), queued);
        }
        Ok(())
    }

    proptest! {
        /// Random operation sequences against a plain oracle of cursors.
        #[test]
        fn reference_counts_match_the_oracle(ops in proptest::collection::vec(op(), 0..200)) {
            let mut e = Eqa::new(8, 4, Rank::all(5), 8, Duration::from_millis(1));
            let mut cursors = [0u64; 5];
            let mut live = [true; 5];
            let mut head = 0u64;
            for op in ops {
                match op {
                    Op::Publish => {
                        let oracle_tail = (0..5).filter(|&r| live[r]).map(|r| cursors[r]).min().unwrap_or(head);
                        let full = head - oracle_tail >= 8;
                        prop_assert_eq!(e.publish(data(), b"ab").is_err(), full);
                        if !full { head += 1; }
                    }
                    Op::Ack(r, d) => {
                        let c = (cursors[r as usize] + u64::from(d)).min(head);
                        e.ack(Rank::new(r), Seq::new(c));
                        if live[r as usize] { cursors[r as usize] = cursors[r as usize].max(c); }
                    }
                    Op::Evict(r) => { e.evict(Rank::new(r)); live[r as usize] = false; }
                    Op::Request(r, d) => { e.request_repair(Rank::new(r), e.tail() + u64::from(d)); }
                    Op::Pop(r) => { e.pop_repair(Rank::new(r)); }
                    Op::Withdraw(d) => { e.withdraw_repair(e.tail() + u64::from(d), &mut Vec::new()); }
                }
                check_repairs(&e)?;
                let tail = (0..5).filter(|&r| live[r]).map(|r| cursors[r]).min().unwrap_or(head);
                prop_assert_eq!(e.tail().get(), tail);
                prop_assert_eq!(e.head().get(), head);
                for s in e.tail().up_to(e.head()) {
                    let want = (0..5).filter(|&r| live[r] && cursors[r] <= s.get()).count() as u16;
                    prop_assert_eq!(e.slot(s).unwrap().refs(), want);
                }
            }
        }
    }
}
