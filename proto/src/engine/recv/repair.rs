//! Peer repair as a stream takes part in it ([`super::peer::PeerRepair`] keeps its state):
//! serving a fellow's request from what this member still holds, and taking the answers of the
//! fellow this member asks.

use std::time::Instant;

use crate::engine::timer::TimerTable;
use crate::wire::control::{nack_offsets, NackBitmap};
use crate::wire::Repr;
use crate::{Rank, Seq};

use super::window::WSlot;
use super::{pending_reply, relayed, unheld_reply, Dest, Outgoing, Receiver, SlotState};

/// Where a frame a fellow asks for lies (see `Receiver::held`).
enum Found<'a> {
    /// In these bytes (the window, or a message).
    Here(&'a [u8]),
    /// In a frame the link retains: its address and length.
    Link(usize, usize),
}

impl Receiver {
    /// The fellow receiver this stream asks for lost frames (and the only one whose relayed
    /// repairs it takes).
    pub(crate) fn peer(&self) -> Option<Rank> {
        self.peer.peer()
    }

    /// Sets the fellow receiver asked first for lost frames (`None`: ask the root only).
    pub(crate) fn set_peer(&mut self, peer: Option<Rank>) {
        self.peer.set_peer(peer);
    }

    /// The payload of frame `s` of this stream, if this member still holds it: in its slot
    /// (a frame not placed, or the copy kept for peer repair), or in the buffer of a message
    /// not delivered yet, or held back for fellows. Otherwise the asking peer is told, and
    /// turns to the root.
    fn held(&self, s: Seq) -> Option<(Repr, Found<'_>)> {
        let (expected, w) = (self.window.expected(), self.window.len());
        // Frame `s + window` lands in the same slot: until it has arrived (`expected` past it),
        // the slot still holds `s` (the sequence check below confirms it).
        if s + w < expected || s >= expected + w {
            return None;
        }
        let i = self.window.idx(s);
        let slot = self.window.slot(i);
        let r = slot.repr;
        if r.kind.is_none() || r.seq != s.low32() {
            return None;
        }
        let (off, len) = (r.offset as usize, usize::from(slot.len));
        if s >= expected && !slot.state.contains(SlotState::HAVE) {
            return None;
        }
        if slot.state.contains(SlotState::COPY) {
            return Some((r, Found::Here(self.window.kept(i, len))));
        }
        if slot.state.contains(SlotState::LINK) {
            return Some((r, Found::Link(self.link.at(i), len)));
        }
        // Consumed (`s < expected`) or placed: in its message's buffer, or in the message,
        // complete, while it is held back for fellows' requests.
        let data = match self.msgs.find(r.msg_id, r.msg_len as usize) {
            Some((_, filled)) if s < expected && off + len > filled => return None,
            Some((data, _)) => data?,
            None => self.hold.find(r.msg_id, r.msg_len as usize)?,
        };
        Some((r, Found::Here(data.get(off..off + len)?)))
    }

    /// A peer (`asker`) lost the frames of `missing` and `more` (bit `k` of word `w`:
    /// `wire_base + 16·w + k`): sends it, point to point, those this member still holds, as
    /// repairs of the root's stream, at most `budget` (the outbox's room) less those served
    /// from the link and still waiting for the batch's end. A child in the acknowledgement
    /// tree is told in one answer which of the others this member lacks too and relays when
    /// they come ([`Control::PeerPending`]; it asks for them itself, and learns of them from
    /// the request if it had not seen the stream get that far); any other asker, and a child
    /// for frames this member will not get again, is told in one answer that they are not
    /// held.
    pub(crate) fn serve_peer(
        &mut self,
        now: Instant,
        table: &mut TimerTable,
        (wire_base, missing, more): (u32, u16, &[u16]),
        asker: Rank,
        budget: usize,
    ) {
        // Fellows lose frames: keep copies for the next windows' worth of frames.
        let edge = self.window.highest().max(self.window.expected());
        self.peer.on_request(edge, self.window.len());
        let base = self.window.near(wire_base);
        let child = self.tree.as_ref().is_some_and(|t| t.is_child(asker));
        // Repairs served from the link leave at the batch's end (`frames_done`): until then
        // they take room in the outbox as much as the ones sent at once.
        let budget = budget.saturating_sub(self.link.relays_waiting());
        let mut served = 0;
        let (mut unheld, mut pending) = (NackBitmap::default(), NackBitmap::default());
        let mut learned = None;
        for off in nack_offsets(missing, more) {
            let Some(s) = base.map(|b| b + u64::from(off)) else {
                unheld.set(off);
                continue;
            };
            if served >= budget {
                unheld.set(off);
                continue;
            }
            let Some((r, payload)) = self.held(s) else {
                let expected = self.window.expected();
                let coming = s >= expected
                    && s < expected + self.window.len()
                    && !self
                        .window
                        .slot(self.window.idx(s))
                        .state
                        .contains(SlotState::HAVE);
                if child && coming && self.peer.owe(s, asker) {
                    pending.set(off);
                    if let Some(from) = self.window.accept(s) {
                        // The child has seen the stream get further than this member.
                        learned.get_or_insert(from);
                    }
                } else {
                    unheld.set(off);
                }
                continue;
            };
            let repr = relayed(&r, asker);
            match payload {
                Found::Here(p) => {
                    let payload = p.to_vec();
                    self.controls.push_back(Outgoing::Relay {
                        dst: Dest::Rank(asker),
                        repr,
                        payload,
                    });
                }
                Found::Link(at, len) => self.link.relay((asker, repr, at, len)),
            }
            served += 1;
        }
        if let Some((first, more)) = pending.take() {
            self.controls
                .push_back(pending_reply(asker, self.root, wire_base, first, more));
        }
        if let Some((first, more)) = unheld.take() {
            self.controls
                .push_back(unheld_reply(asker, self.root, wire_base, first, more));
        }
        if let Some(from) = learned {
            self.nacks.found(from);
            self.schedule(now, &mut table.stream(self.timers));
        }
    }

    /// The parent (`from`) lacks the frames of `reply` (base and bitmap) too and relays each
    /// when it comes: they are asked of it again after the retry interval (if the relay was
    /// lost), never of the root on its account. Its answer shows it is alive.
    pub(crate) fn on_pending(
        &mut self,
        now: Instant,
        table: &mut TimerTable,
        wire_base: u32,
        missing: u16,
        more: &[u16],
        from: Rank,
    ) {
        let answered = self.each_slot_answered(from, wire_base, missing, more, |_, slot| {
            if !slot.state.contains(SlotState::HAVE) {
                // Asked of the parent again, as for the first time.
                slot.state.remove(SlotState::PEER_ASKS);
            }
        });
        if answered {
            self.schedule(now, &mut table.stream(self.timers));
        }
    }

    /// The peer (`from`) does not hold the frames of `reply` (base and bitmap), and will not
    /// (a parent in the acknowledgement tree answers [`Control::PeerPending`] for frames it
    /// is getting itself): those still missing here are asked of the root now.
    pub(crate) fn on_unheld(
        &mut self,
        now: Instant,
        table: &mut TimerTable,
        wire_base: u32,
        missing: u16,
        more: &[u16],
        from: Rank,
    ) {
        let mut first = None;
        // With a tree the peer is the parent, which says so only of frames it will not get
        // again (it relays the others when they come, see `on_pending`): they are asked of
        // the root at once.
        let tree = self.tree.is_some();
        self.each_slot_answered(from, wire_base, missing, more, |s, slot| {
            if slot.state.contains(SlotState::HAVE) || !slot.state.contains(SlotState::PEER_ASKED) {
                return;
            }
            if tree {
                slot.state.insert(SlotState::PEER_ASKS);
            }
            slot.nacked = None;
            first.get_or_insert(s);
        });
        if let Some(s) = first {
            self.nacks.found(s);
            self.schedule(now, &mut table.stream(self.timers));
        }
    }

    /// An answer of the peer `from` about the frames of a request (base and bitmap): the
    /// peer is alive, and `f` sees each of those frames still in the window, with its slot.
    /// False (and nothing seen) if `from` is not this stream's peer or the base is not near.
    fn each_slot_answered(
        &mut self,
        from: Rank,
        wire_base: u32,
        missing: u16,
        more: &[u16],
        mut f: impl FnMut(Seq, &mut WSlot),
    ) -> bool {
        if self.peer.peer() != Some(from) {
            return false;
        }
        self.peer.answered();
        let Some(base) = self.window.near(wire_base) else {
            return false;
        };
        let (expected, highest) = (self.window.expected(), self.window.highest());
        for off in nack_offsets(missing, more) {
            let s = base + u64::from(off);
            if s < expected || s >= highest {
                continue;
            }
            let i = self.window.idx(s);
            f(s, self.window.slot_mut(i));
        }
        true
    }
}
