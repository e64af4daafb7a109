//! Frames kept in the link: with `Engine::leave_in_link`, payloads stay in the frames the link
//! retains until the batch ends, and are copied into the window only if they still wait when
//! the link gives the frames back.

use super::*;

/// What an observer's pieces may lie in at the end of a batch: the link's frames and the
/// window's copies.
struct Memory<'a> {
    link: &'a dyn machine::Held,
    window: &'a [u8],
}

impl machine::Held for Memory<'_> {
    fn find(&self, at: usize, len: usize) -> Option<&[u8]> {
        within(self.window, at, len).or_else(|| self.link.find(at, len))
    }
}

impl Receiver {
    pub(crate) fn frames_done(&mut self, now: Instant, end: BatchEnd<'_>) {
        let before = self.expected;
        if self.in_link {
            // Frames that waited in the link are consumed now, and fellows served from it.
            self.drain_from(Some(end.held));
            for (asker, repr, at, len) in std::mem::take(&mut self.link_relays) {
                match end.held.find(at, len) {
                    Some(p) => self.controls.push_back(Outgoing::Relay {
                        dst: Dest::Rank(asker),
                        repr,
                        payload: p.to_vec(),
                    }),
                    None => {
                        let mut unheld = NackBitmap::default();
                        unheld.set(0);
                        if let Some((first, more)) = unheld.take() {
                            self.controls
                                .push_back(unheld_reply(asker, self.root, repr.seq, first, more));
                        }
                    }
                }
            }
        }
        if let Some(Watch(o)) = self.observer.as_mut() {
            // Where held pieces lie: the link's frames, and the window's copies.
            o.frames_done(&Memory {
                link: end.held,
                window: self.slot_data.all(),
            });
        }
        if self.in_link {
            self.leave(end.leaving);
        }
        self.in_batch = false;
        if self.expected > before {
            self.maybe_pull();
            self.schedule(now);
        }
    }

    /// The link gives back the frames `leaving` finds: a payload of one still waiting is
    /// copied into the window now; one consumed is forgotten (a fellow asking for it later
    /// is told it is not held, and asks the root).
    pub(super) fn leave(&mut self, leaving: &dyn machine::Held) {
        while let Some(&s) = self.link_refs.front() {
            let i = self.idx(s);
            let slot = &self.slots[i];
            let at = self.link_at[i];
            let live = slot.state.contains(SlotState::LINK) && slot.repr.seq == s.low32();
            if live {
                let len = usize::from(slot.len);
                let Some(bytes) = leaving.find(at, len) else {
                    // Still retained, and so is every frame after it.
                    break;
                };
                let waiting = slot.state.contains(SlotState::HAVE);
                if waiting {
                    self.keep(i, bytes);
                }
                let slot = &mut self.slots[i];
                slot.state.remove(SlotState::LINK);
                slot.state.set(SlotState::COPY, waiting);
            }
            self.link_refs.pop_front();
        }
    }

    /// Notes that slot `i`'s payload, consumed or waiting, stays in the link's frame, at
    /// `payload`.
    pub(super) fn leave_in_link(&mut self, i: usize, s: Seq, payload: &[u8]) {
        let at = payload.as_ptr() as usize;
        let slot = &mut self.slots[i];
        slot.state.remove(SlotState::COPY);
        slot.state.insert(SlotState::LINK);
        self.link_at[i] = at;
        self.link_refs.push_back(s);
    }

    /// Repairs for fellows served from the link, to be made when the batch ends.
    pub(crate) fn relays_waiting(&self) -> usize {
        self.link_relays.len()
    }

    pub(crate) fn set_in_link(&mut self, on: bool) {
        self.in_link = on;
        self.link_at = if on {
            vec![0; self.slots.len()]
        } else {
            Vec::new()
        };
    }
}
