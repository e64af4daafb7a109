//! The receive window: a slot per sequence number of the root's stream, from the next
//! expected one on, and the copies of payloads the slots keep.
//!
//! Frames are accepted inside a window of `window` frames after the next expected sequence;
//! each lands in its slot (`s` modulo the window), so out-of-order frames are kept. A slot
//! keeps the header of the last frame that landed in it, and what [`SlotState`] says about the
//! frame; its payload, when it keeps one, lies in the slot's payload place: one block of places
//! made at the stream's first copy (a frame that waits or is kept), so a stream whose frames
//! arrive in order costs no window memory; or, for a stream that leaves its frames in the link
//! and copies only the few that outlive the link's hold, a place per slot made at the slot's
//! first copy, so that it pays for those slots alone.
//!
//! **Invariants.** `expected <= highest <= expected + window`: every frame before `expected`
//! was consumed, and no frame at or after `highest` was accepted. A slot with
//! [`SlotState::HAVE`] holds a frame in `expected..highest` that waits to be consumed.

use std::time::Instant;

use crate::eqa::Payloads;
use crate::machine::within;
use crate::wire::{locate, Position, Repr};
use crate::Seq;

use crate::engine::{EngineConfig, Prefetch};

bitflags::bitflags! {
    /// What a window slot holds (one byte: the slots are counted in the memory accounting).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(super) struct SlotState: u8 {
        /// The frame is here and not consumed yet.
        const HAVE = 1 << 0;
        /// Its payload was written straight into its message (see `Messages::place`), not
        /// into the slot's place.
        const PLACED = 1 << 1;
        /// It was asked of the peer already.
        const PEER_ASKED = 1 << 2;
        /// The slot's place holds its payload (a frame not placed, or the copy kept for peer
        /// repair): a peer may be served from it after its message was handed on.
        const COPY = 1 << 3;
        /// It was asked of the peer twice (the first repair was lost, or late): the next ask
        /// goes to the root.
        const PEER_ASKED_AGAIN = 1 << 4;
        /// Its payload lies in a frame the link retains (see `InLink`): read from there when
        /// consumed or asked for, and copied into the slot's place if it is still waiting
        /// when the link gives the frame back.
        const LINK = 1 << 5;
        /// With a tree: the parent said it does not hold the frame and will not (see
        /// `Receiver::on_unheld`): the next ask goes to the root.
        const ROOT_NEXT = 1 << 6;
    }
}

impl SlotState {
    /// Every mark of a request to the peer.
    pub(super) const PEER_ASKS: SlotState = SlotState::PEER_ASKED
        .union(SlotState::PEER_ASKED_AGAIN)
        .union(SlotState::ROOT_NEXT);
}

/// One slot of the window.
#[derive(Debug)]
pub(super) struct WSlot {
    /// What it holds.
    pub(super) state: SlotState,
    /// When this (missing) frame was last asked for.
    pub(super) nacked: Option<Instant>,
    /// The header of the last frame that landed here.
    pub(super) repr: Repr,
    /// Its payload's length.
    pub(super) len: u16,
}

/// The receive window of one stream. See the module documentation.
#[derive(Debug)]
pub(super) struct Window {
    /// The next sequence this member needs from the root.
    expected: Seq,
    /// One past the highest sequence accepted.
    highest: Seq,
    slots: Box<[WSlot]>,
    /// The payloads of the slots that keep a copy ([`SlotState::COPY`]), a place holding the
    /// largest frame payload accepted (`cap` bytes): one block, made whole at the first copy
    /// (empty until then), unless the window is sparse.
    block: Payloads,
    /// A sparse window's places (`Some`), by slot, each made at its slot's first copy (empty
    /// until then; the list itself empty until the stream's first copy): the stream leaves
    /// its frames in the link (see `InLink`) and copies few.
    places: Option<Box<[Box<[u8]>]>>,
    /// The cache hint for where the next frames land (`EngineConfig::prefetch`).
    prefetch: Option<Prefetch>,
}

impl Window {
    /// The window of `cfg.window` slots, empty, expecting the stream's first frame.
    pub(super) fn new(cfg: &EngineConfig) -> Window {
        let slots = (0..cfg.window)
            .map(|_| WSlot {
                state: SlotState::empty(),
                nacked: None,
                repr: Repr::default(),
                len: 0,
            })
            .collect();
        Window {
            expected: Seq::new(0),
            highest: Seq::new(0),
            slots,
            // Made at the first copy kept (see `Window::keep`).
            places: None,
            block: Payloads::none(cfg.slot_payload()),
            prefetch: cfg.prefetch,
        }
    }

    /// The next sequence this member needs from the root.
    pub(super) fn expected(&self) -> Seq {
        self.expected
    }

    /// One past the highest sequence accepted.
    pub(super) fn highest(&self) -> Seq {
        self.highest
    }

    /// The window's length in frames.
    pub(super) fn len(&self) -> u64 {
        self.slots.len() as u64
    }

    /// Payload bytes a slot's place holds (the largest frame payload accepted).
    pub(super) fn slot_payload(&self) -> usize {
        self.block.cap()
    }

    /// The cache hint of the stream (`EngineConfig::prefetch`).
    pub(super) fn prefetch(&self) -> Option<Prefetch> {
        self.prefetch
    }

    /// The slot of sequence `s`.
    pub(super) fn idx(&self, s: Seq) -> usize {
        s.ring_index(self.slots.len())
    }

    /// Hints the slot the next new frame lands in (see `Machine::prefetch`).
    pub(super) fn prefetch_next(&self, hint: Prefetch) {
        let slot = &self.slots[self.idx(self.highest)];
        hint(std::ptr::from_ref(slot).cast(), std::mem::size_of_val(slot));
    }

    /// Slot `i`.
    pub(super) fn slot(&self, i: usize) -> &WSlot {
        &self.slots[i]
    }

    /// Slot `i`, to change.
    pub(super) fn slot_mut(&mut self, i: usize) -> &mut WSlot {
        &mut self.slots[i]
    }

    /// Where the frame with wire sequence `seq` falls: in the window, behind it or beyond.
    pub(super) fn locate(&self, seq: u32) -> Position {
        locate(self.expected, seq, self.len() as u32)
    }

    /// The stream position of a sequence number a peer names in a repair request: within a
    /// window of the next expected one, either side; `None` otherwise.
    pub(super) fn near(&self, wire: u32) -> Option<Seq> {
        let w = self.len() as u32;
        match locate(self.expected.saturating_sub(u64::from(w)), wire, 2 * w) {
            Position::Window(s) => Some(s),
            _ => None,
        }
    }

    /// Frame `s` was accepted: returns the old highest if frames between it and `s` are
    /// missing (a new gap).
    pub(super) fn accept(&mut self, s: Seq) -> Option<Seq> {
        let gap = (s > self.highest).then_some(self.highest);
        self.highest = self.highest.max(s + 1);
        gap
    }

    /// The next expected frame was consumed.
    pub(super) fn advance(&mut self) {
        self.expected += 1;
    }

    /// Whether the next expected frame is missing while later ones came.
    pub(super) fn gap(&self) -> bool {
        self.expected < self.highest
            && !self.slots[self.idx(self.expected)]
                .state
                .contains(SlotState::HAVE)
    }

    /// Whether the next expected frame is here and its payload in the link, consumed at the
    /// batch's end (see `InLink`).
    pub(super) fn waits_in_link(&self) -> bool {
        let state = self.slots[self.idx(self.expected)].state;
        state.contains(SlotState::HAVE | SlotState::LINK) && !state.contains(SlotState::PLACED)
    }

    /// Makes the places slot by slot from now on (see `places`), unless a copy was kept.
    pub(super) fn set_sparse(&mut self, sparse: bool) {
        let made = self.places.as_ref().is_some_and(|p| !p.is_empty());
        if self.block.all().is_empty() && !made {
            self.places = sparse.then(Box::default);
        }
    }

    /// Whether the places are made slot by slot (see `places`).
    pub(super) fn is_sparse(&self) -> bool {
        self.places.is_some()
    }

    /// Copies `payload` (at most a place's bytes) into slot `i`'s place. The places are made
    /// at the first copy: a stream whose frames all arrive in order, and that no fellow asks
    /// for frames, keeps none. A sparse window's are made slot by slot: a stream that leaves
    /// its frames in the link copies only the few that leave it while still needed. Why: in
    /// the simulator, where a group's members share one process, a window's places made
    /// whole at its first copy were 141 KiB written per stream (2.3 GiB of 4096 members with
    /// 4 roots; the allocator zeroes a large block it serves from its heap).
    pub(super) fn keep(&mut self, i: usize, payload: &[u8]) {
        if self.is_sparse() {
            let place = self.place(i);
            place[..payload.len()].copy_from_slice(payload);
            return;
        }
        self.make_places();
        self.block.store(i, payload);
        if let Some(hint) = self.prefetch {
            // Frames are kept in slot order: hint the place of the frame after the next (see
            // `EngineConfig::prefetch`), as for the message buffer.
            let ahead = (i + 2) % self.slots.len();
            hint(self.block.get(ahead, 0).as_ptr(), payload.len());
        }
    }

    /// Slot `i`'s place in a sparse window, made now if it was not.
    fn place(&mut self, i: usize) -> &mut [u8] {
        let (slots, cap) = (self.slots.len(), self.block.cap());
        let places = self.places.get_or_insert_with(Box::default);
        if places.is_empty() {
            *places = (0..slots).map(|_| Box::default()).collect();
        }
        let place = &mut places[i];
        if place.is_empty() {
            *place = vec![0; cap].into_boxed_slice();
        }
        place
    }

    /// Makes every slot's payload place, unless made already (else made at each slot's first
    /// copy).
    pub(super) fn make_places(&mut self) {
        if !self.is_sparse() {
            if self.block.all().is_empty() {
                self.block = Payloads::new(self.slots.len(), self.block.cap());
            }
            return;
        }
        for i in 0..self.slots.len() {
            self.place(i);
        }
    }

    /// The copy slot `i` keeps, `len` bytes (nothing for a slot that kept none, or a length
    /// past its place).
    pub(super) fn kept(&self, i: usize, len: usize) -> &[u8] {
        match &self.places {
            None => self.block.get(i, len),
            Some(p) => p.get(i).and_then(|p| p.get(..len)).unwrap_or(&[]),
        }
    }

    /// Where a copy the window keeps lies, given its address (for an observer at the end of a
    /// batch).
    pub(super) fn find_kept(&self, at: usize, len: usize) -> Option<&[u8]> {
        within(self.block.all(), at, len).or_else(|| {
            self.places
                .iter()
                .flatten()
                .find_map(|p| within(p, at, len))
        })
    }

    /// Forgets the frames placed into the `n` messages from id `first` (their ids' low 32
    /// bits, consecutive): they are asked for again like any missing frame.
    pub(super) fn unplace(&mut self, (first, n): (u32, u32)) {
        for slot in self.slots.iter_mut() {
            if slot.state.contains(SlotState::HAVE | SlotState::PLACED)
                && slot.repr.msg_id.wrapping_sub(first) < n
            {
                slot.state.remove(
                    SlotState::HAVE | SlotState::PLACED | SlotState::COPY | SlotState::LINK,
                );
            }
        }
    }

    /// Heap bytes of the slots and their places once every slot kept a copy (the places are
    /// made then).
    pub(super) fn heap_bytes(&self) -> usize {
        let place = if self.is_sparse() {
            std::mem::size_of::<Box<[u8]>>()
        } else {
            0
        };
        self.slots.len() * (std::mem::size_of::<WSlot>() + place + self.slot_payload())
    }
}

#[cfg(test)]
mod tests {

    use crate::engine::recv::SlotState;
    use crate::engine::EngineConfig;
    use crate::wire::Position;
    use crate::{Rank, Seq};

    use super::Window;

    fn window(frames: usize) -> Window {
        let mut c = EngineConfig::new(1, Rank::new(1), 2);
        c.window = frames;
        Window::new(&c)
    }

    #[test]
    fn frames_fall_in_behind_or_beyond_the_window() {
        let mut w = window(8);
        assert_eq!(w.locate(0), Position::Window(Seq::new(0)));
        assert_eq!(w.locate(7), Position::Window(Seq::new(7)));
        assert_eq!(w.locate(8), Position::Beyond);
        w.advance();
        assert_eq!(w.locate(0), Position::Behind);
        assert_eq!(w.locate(8), Position::Window(Seq::new(8)));
        // A peer's request may name frames a window either side.
        for _ in 0..10 {
            w.advance();
        }
        assert_eq!(w.near(3), Some(Seq::new(3)));
        assert_eq!(w.near(18), Some(Seq::new(18)));
        assert_eq!(w.near(2), None);
        assert_eq!(w.near(19), None);
    }

    #[test]
    fn a_gap_is_a_missing_expected_frame_with_later_ones_in() {
        let mut w = window(8);
        assert!(!w.gap());
        assert_eq!(w.accept(Seq::new(0)), None);
        w.advance();
        assert_eq!(
            w.accept(Seq::new(3)),
            Some(Seq::new(1)),
            "1 and 2 are missing"
        );
        let i = w.idx(Seq::new(3));
        w.slot_mut(i).state.insert(SlotState::HAVE);
        assert_eq!((w.expected(), w.highest()), (Seq::new(1), Seq::new(4)));
        assert!(w.gap());
        assert_eq!(
            w.accept(Seq::new(1)),
            None,
            "a frame behind the highest is no new gap"
        );
        let i = w.idx(Seq::new(1));
        w.slot_mut(i).state.insert(SlotState::HAVE);
        assert!(!w.gap());
    }

    #[test]
    fn kept_copies_come_back_and_are_found_by_address() {
        let mut w = window(4);
        let i = w.idx(Seq::new(6));
        assert_eq!(i, 2);
        w.keep(i, b"hello");
        assert_eq!(w.kept(i, 5), b"hello");
        let at = w.kept(i, 5).as_ptr() as usize;
        assert_eq!(w.find_kept(at, 5), Some(&b"hello"[..]));
        assert_eq!(w.find_kept(1, 5), None, "not in the window");
    }

    #[test]
    fn a_sparse_window_makes_the_places_of_the_slots_it_copies_into_alone() {
        let mut w = window(4);
        w.set_sparse(true);
        let i = w.idx(Seq::new(6));
        w.keep(i, b"hello");
        assert_eq!(w.kept(i, 5), b"hello");
        let at = w.kept(i, 5).as_ptr() as usize;
        assert_eq!(w.find_kept(at, 5), Some(&b"hello"[..]));
        assert_eq!(w.kept(3, 5), b"", "slot 3 copied nothing");
        let made = w.places.iter().flatten().filter(|p| !p.is_empty()).count();
        assert_eq!((made, w.block.all().len()), (1, 0), "one place, no block");
        // Once a copy was kept, the layout stays.
        w.set_sparse(false);
        assert!(w.is_sparse());
    }

    #[test]
    fn forgetting_placed_frames_leaves_the_others() {
        let mut w = window(4);
        for (i, id) in [(0, 1), (1, 3), (2, 2)] {
            let s = w.slot_mut(i);
            s.state = SlotState::HAVE | SlotState::PLACED | SlotState::COPY;
            s.repr.msg_id = id;
        }
        w.unplace((1, 2));
        assert!(w.slot(0).state.is_empty());
        assert!(w.slot(2).state.is_empty());
        assert!(w
            .slot(1)
            .state
            .contains(SlotState::HAVE | SlotState::PLACED));
    }
}
