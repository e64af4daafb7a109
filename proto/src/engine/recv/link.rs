//! Frames kept in the link: with `Engine::leave_in_link`, payloads that would be copied into the
//! window stay in the frames the link retains until the batch ends, and are copied into the
//! window only if they still wait when the link gives the frames back.
//!
//! **Invariants.** While on, `at` has a place per window slot, and a slot marked
//! [`SlotState::LINK`] has its payload's address there. `refs` names the slots so marked, in the
//! order their frames came, which is the order the link gives them back; a reference whose slot
//! was reused since is skipped. Repairs served from the link (`relays`) are made at the end of
//! the batch, while the link still holds their frames.

use std::collections::VecDeque;

use crate::machine::Held;
use crate::wire::Repr;
use crate::{Rank, Seq};

use super::window::{SlotState, Window};

/// A repair for a fellow of a frame that lies in the link: to whom, its header, and where its
/// payload lies (address and length).
pub(super) type Relay = (Rank, Repr, usize, usize);

/// The frames of one stream left in the link. See the module documentation.
#[derive(Debug, Default)]
pub(super) struct InLink {
    /// The slots whose payloads lie in the link, oldest first, with where each payload lay
    /// when it was noted (a slot reused since has another's).
    refs: VecDeque<(Seq, usize)>,
    /// Per slot: the address of its payload in the link's frame (empty: payloads are not
    /// left in the link).
    at: Vec<usize>,
    /// Repairs for fellows of frames in the link, made when the batch ends.
    relays: Vec<Relay>,
}

impl InLink {
    /// Whether payloads are left in the link.
    pub(super) fn is_on(&self) -> bool {
        !self.at.is_empty()
    }

    /// Leaves payloads in the link (or stops), for a window of `slots` slots.
    pub(super) fn set(&mut self, on: bool, slots: usize) {
        self.at = if on { vec![0; slots] } else { Vec::new() };
    }

    /// Notes that slot `i`'s payload (frame `s`), consumed or waiting, stays in the link's
    /// frame at `payload`.
    pub(super) fn note(&mut self, window: &mut Window, i: usize, s: Seq, payload: &[u8]) {
        let slot = window.slot_mut(i);
        slot.state.remove(SlotState::COPY);
        slot.state.insert(SlotState::LINK);
        self.at[i] = payload.as_ptr() as usize;
        self.refs.push_back((s, self.at[i]));
    }

    /// Where the payload of the oldest frame noted lies: until the link gives that frame back,
    /// no frame noted after it leaves either (see `leave`).
    pub(super) fn front(&self) -> Option<usize> {
        self.refs.front().map(|&(_, at)| at)
    }

    /// Where slot `i`'s payload lies in the link.
    pub(super) fn at(&self, i: usize) -> usize {
        self.at[i]
    }

    /// Forgets the notes of frames no longer left in the link (consumed and forgotten,
    /// copied, or their slot reused), and appends where the others' payloads lie to `out`:
    /// a link may let go every frame none of them lies in, and the frames noted still leave
    /// in the order they came (see `leave`).
    pub(super) fn refs(&mut self, window: &Window, out: &mut Vec<usize>) {
        self.refs.retain(|&(s, at)| {
            let i = window.idx(s);
            let slot = window.slot(i);
            slot.state.contains(SlotState::LINK) && slot.repr.seq == s.low32() && self.at[i] == at
        });
        out.extend(self.refs.iter().map(|&(_, at)| at));
    }

    /// A repair to make from the link at the batch's end.
    pub(super) fn relay(&mut self, relay: Relay) {
        self.relays.push(relay);
    }

    /// Repairs for fellows served from the link, to be made when the batch ends.
    pub(super) fn relays_waiting(&self) -> usize {
        self.relays.len()
    }

    /// The repairs to make now (the batch ends).
    pub(super) fn take_relays(&mut self) -> Vec<Relay> {
        std::mem::take(&mut self.relays)
    }

    /// The link gives back the frames `leaving` finds: a payload of one still waiting is
    /// copied into the window now; one consumed is forgotten (a fellow asking for it later
    /// is told it is not held, and asks the root), or, into a sparse window (a stream that
    /// serves fellows as without the link), copied too, to serve them until its slot is
    /// reused, as a frame never left in the link does.
    pub(super) fn leave(&mut self, window: &mut Window, leaving: &dyn Held) {
        while let Some(&(s, noted)) = self.refs.front() {
            if leaving.find(noted, 0).is_none() {
                // The oldest frame noted stays, and so does every frame after it (they leave
                // in the order they came): nothing of the window need be read.
                break;
            }
            let i = window.idx(s);
            let slot = window.slot(i);
            let live = slot.state.contains(SlotState::LINK) && slot.repr.seq == s.low32();
            if live {
                let len = usize::from(slot.len);
                let Some(bytes) = leaving.find(self.at[i], len) else {
                    // Still retained, and so is every frame after it.
                    break;
                };
                let waiting = slot.state.contains(SlotState::HAVE);
                let copy = waiting || window.is_sparse();
                if copy {
                    window.keep(i, bytes);
                }
                let slot = window.slot_mut(i);
                slot.state.remove(SlotState::LINK);
                slot.state.set(SlotState::COPY, copy);
            }
            self.refs.pop_front();
        }
    }

    /// Heap bytes of the addresses.
    pub(super) fn heap_bytes(&self) -> usize {
        self.at.len() * std::mem::size_of::<usize>()
    }
}

#[cfg(test)]
mod tests {

    use crate::engine::recv::{SlotState, Window};
    use crate::machine::Frames;
    use crate::wire::Repr;
    use crate::{Rank, Seq};

    use super::InLink;
    use crate::engine::EngineConfig;

    /// A window of 4 slots and its frames left in the link, on.
    fn window_and_link() -> (Window, InLink) {
        let mut c = EngineConfig::new(1, Rank::new(1), 2);
        c.window = 4;
        let mut l = InLink::default();
        l.set(true, 4);
        (Window::new(&c), l)
    }

    /// Frame `s` (payload `f`) lands in its slot, received (`have`) or not, and is left in the
    /// link; returns its slot.
    fn land_in_link(w: &mut Window, l: &mut InLink, s: u64, f: &[u8], have: bool) -> usize {
        let i = w.idx(Seq::new(s));
        let slot = w.slot_mut(i);
        slot.repr.seq = s as u32;
        slot.len = f.len() as u16;
        slot.state = SlotState::empty();
        slot.state.set(SlotState::HAVE, have);
        l.note(w, i, Seq::new(s), f);
        i
    }

    #[test]
    fn a_waiting_payload_is_copied_when_its_frame_leaves_and_a_consumed_one_forgotten() {
        let (mut w, mut l) = window_and_link();
        let (f0, f1) = (b"frame zero".to_vec(), b"frame one".to_vec());
        for (s, f, have) in [(0u64, &f0, false), (1, &f1, true)] {
            let i = land_in_link(&mut w, &mut l, s, f, have);
            assert_eq!(l.at(i), f.as_ptr() as usize);
        }
        // Frame 0 is still retained: nothing after it leaves either.
        l.leave(&mut w, &Frames(&[&f1]));
        assert!(w.slot(0).state.contains(SlotState::LINK), "0 has not left");
        l.leave(&mut w, &Frames(&[&f0[..], &f1[..]]));
        assert!(w.slot(0).state.is_empty(), "consumed: forgotten");
        let s1 = w.slot(1).state;
        assert!(s1.contains(SlotState::HAVE | SlotState::COPY) && !s1.contains(SlotState::LINK));
        assert_eq!(w.kept(1, f1.len()), &f1[..]);
        // Into a sparse window (a stream that serves fellows as without the link) the consumed
        // ones are copied too: frame 2, consumed and kept for fellows, is copied when it
        // leaves, and serves them from the window until its slot is reused.
        let (mut w, _) = window_and_link();
        w.set_sparse(true);
        let f2 = b"frame two".to_vec();
        let i = land_in_link(&mut w, &mut l, 2, &f2, false);
        l.leave(&mut w, &Frames(&[&f2[..]]));
        let s2 = w.slot(i).state;
        assert!(s2.contains(SlotState::COPY) && !s2.contains(SlotState::LINK | SlotState::HAVE));
        assert_eq!(w.kept(i, f2.len()), &f2[..]);
        l.relay((Rank::new(0), Repr::default(), 0, 0));
        assert_eq!(l.relays_waiting(), 1);
        assert_eq!(l.take_relays().len(), 1);
        assert_eq!(l.relays_waiting(), 0);
    }

    /// The addresses a link may not let go of are those of the payloads still left there:
    /// notes whose slot no longer holds their frame in the link (copied, forgotten, or
    /// reused by a later frame) are forgotten, and the oldest note left is the front.
    #[test]
    fn only_payloads_still_left_in_the_link_are_referred_to() {
        let (mut w, mut l) = window_and_link();
        let frames: Vec<Vec<u8>> = (0..3u8).map(|k| vec![k; 32]).collect();
        for (s, f) in frames.iter().enumerate() {
            land_in_link(&mut w, &mut l, s as u64, f, true);
        }
        let mut out = Vec::new();
        l.refs(&w, &mut out);
        let at: Vec<usize> = frames.iter().map(|f| f.as_ptr() as usize).collect();
        assert_eq!(out, at);
        // Frame 0 was copied into the window (no longer in the link), frame 2's slot was
        // reused by frame 6.
        w.slot_mut(0).state.remove(SlotState::LINK);
        w.slot_mut(2).repr.seq = 6;
        out.clear();
        l.refs(&w, &mut out);
        assert_eq!(out, vec![at[1]]);
        assert_eq!(l.front(), Some(at[1]));
    }
}
