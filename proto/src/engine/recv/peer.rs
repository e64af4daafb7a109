//! Peer repair: a receiver asks a fellow receiver (its peer) for lost frames first, and serves
//! its fellows' requests from what it still holds: window copies near the end of a message,
//! message buffers, and messages held back for them (`Config::peer_hold`).

use super::*;

/// Unanswered peer requests in a row after which a receiver stops asking its peer, for a
/// while (see `Receiver::peer_off`).
pub(super) const PEER_SILENCE_LIMIT: u16 = 16;

/// Lost frames a receiver asks of the root alone after giving up its peer, before it asks the
/// peer again: the first pause; it doubles, up to 16 times this, each time the peer is given
/// up again without having answered since. Counted in requests, not frames or time, so that a
/// dead peer costs at most `PEER_SILENCE_LIMIT` requests per pause, however lossy the segment.
pub(super) const PEER_OFF_FIRST: u16 = 128;

/// The longest pause: `PEER_OFF_FIRST` doubled this many times.
pub(super) const PEER_OFF_MAX_DOUBLINGS: u8 = 4;

/// Windows' worth of frames a member keeps copies of after a fellow receiver asked it for
/// frames (peer repair). Loss that makes one fellow ask keeps copies on for every later frame
/// while it lasts; a segment without loss costs no second copy.
pub(super) const COPY_SPAN: u64 = 4;

/// Frames from the end of its message within which a frame keeps its copy (while copies are
/// on, see [`COPY_SPAN`]). A frame further from its message's end is still in the message's
/// buffer when a fellow's request for it arrives: the fellow asks once the frame after it has
/// come, within a few of its turns (a turn is a millisecond's doze, about 85 full frames at
/// 1 Gbit/s), and the message is delivered only when its last frame has come, at least this
/// many frames later (3 ms at 1 Gbit/s). A later request finds nothing and goes to the root.
/// Why: a copy of every frame was a second copy of the whole stream on every receiver once
/// the segment lost frames (a megabyte message is about 720 frames: now its last 256 only).
/// A window no wider than this keeps every frame it can be asked for, as before.
/// With `Config::peer_hold` nothing is copied: the message itself is held back a window's
/// worth of frames after its end (see [`Held`]), which serves every frame of it, not its
/// tail only.
pub(in crate::engine) const COPY_TAIL: usize = 256;

/// With `Config::peer_hold`: how long a completed message is still held for fellows'
/// requests once its stream stopped moving (the end of a transfer, a pause of the root's
/// input). A fellow asks within its gathering wait and a few of its turns of a millisecond.
pub(in crate::engine) const PEER_HOLD_WAIT: Duration = Duration::from_millis(5);

/// A message complete but held back for fellows' requests (see `Config::peer_hold`): its
/// event, delivered once the stream reached `until`, or once the stream stopped moving for
/// [`PEER_HOLD_WAIT`].
#[derive(Debug)]
pub(super) struct Held {
    pub(super) event: Event,
    pub(super) until: Seq,
}

/// The answer to a peer NACK from `asker` for frames of `root`'s stream this member does not
/// hold (`missing` and `more`, from `base`).
pub(crate) fn unheld_reply(
    asker: Rank,
    root: Rank,
    base: u32,
    missing: u16,
    more: Vec<u16>,
) -> Outgoing {
    Outgoing::to(
        asker,
        Control::PeerNack {
            root,
            base,
            missing,
            unheld: true,
            more,
        },
    )
}

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
        self.peer
    }

    /// Whether frame `s` (`repr`, with a payload of `len` bytes) keeps a copy in its slot after
    /// it was placed: copies are on (see `copies_until`) and it is among the last
    /// [`COPY_TAIL`] frames of its message. A frame of a message longer than the keep limit
    /// (`Engine::keep_at_most`) has no message buffer to be served from: it keeps a copy once
    /// any fellow ever asked. (Kept only while copies are on, `copies_until`, the fellows of
    /// receivers keeping no messages turned to the root for up to 9400 of 14700 lost frames
    /// on the 1 Gbit/s test-bed at 1% loss, against at most 900 when served from messages.
    /// Kept once asked: at most 94, in 5 runs.)
    pub(super) fn keeps_copy(&self, s: Seq, repr: &Repr, len: usize) -> bool {
        if repr.msg_len as usize > self.keep {
            return self.asked;
        }
        // Bytes of its message after this frame.
        let after = || (repr.msg_len as usize).saturating_sub(repr.offset as usize + len);
        !self.peer_hold && self.copying(s) && after() < COPY_TAIL * self.slot_payload()
    }

    /// Whether frame `s` comes while fellows ask this member for frames (see
    /// `copies_until`).
    pub(super) fn copying(&self, s: Seq) -> bool {
        self.asked && (self.copies_until.wrapping_sub(s.low32()) as i32) > 0
    }

    /// Sets the fellow receiver asked first for lost frames (`None`: ask the root only).
    pub(crate) fn set_peer(&mut self, peer: Option<Rank>) {
        self.peer = peer;
        self.peer_silence = 0;
        self.peer_off = None;
        self.peer_off_doublings = 0;
    }

    /// The peer answered: its silence is over, and so is any back-off.
    pub(super) fn peer_answered(&mut self) {
        self.peer_silence = 0;
        self.peer_off_doublings = 0;
    }

    /// The payload of frame `s` of this stream, if this member still holds it: in its slot
    /// (a frame not placed, or the copy kept for peer repair), or in the buffer of a message
    /// not delivered yet. Otherwise the asking peer is told, and turns to the root.
    fn held(&self, s: Seq) -> Option<(Repr, Found<'_>)> {
        // Frame `s + window` lands in the same slot: until it has arrived (`expected` past it),
        // the slot still holds `s` (the sequence check below confirms it).
        if s + self.window() < self.expected || s >= self.expected + self.window() {
            return None;
        }
        let slot = &self.slots[self.idx(s)];
        let r = slot.repr;
        if r.kind.is_none() || r.seq != s.low32() {
            return None;
        }
        let (off, len) = (r.offset as usize, usize::from(slot.len));
        if s >= self.expected && !slot.state.contains(SlotState::HAVE) {
            return None;
        }
        if slot.state.contains(SlotState::COPY) {
            return Some((r, Found::Here(self.kept(self.idx(s), len))));
        }
        if slot.state.contains(SlotState::LINK) {
            return Some((r, Found::Link(self.link_at[self.idx(s)], len)));
        }
        // Consumed (`s < expected`) or placed: in its message's buffer, or in the message,
        // complete, while it is held back for fellows' requests.
        let same = |id: u64, l: usize| id as u32 == r.msg_id && l == r.msg_len as usize;
        let data = match self
            .cur
            .iter()
            .chain(self.ahead.iter())
            .find(|m| same(m.id, m.len))
        {
            Some(m) if s < self.expected && off + len > m.filled => return None,
            Some(m) => m.data.as_ref()?,
            None => self.holding.iter().find_map(|h| match &h.event {
                Event::Delivered(m) if same(m.msg_id, m.data.len()) => Some(&m.data),
                _ => None,
            })?,
        };
        Some((r, Found::Here(data.get(off..off + len)?)))
    }

    /// A peer (`asker`) lost the frames of `missing` and `more` (bit `k` of word `w`:
    /// `wire_base + 16·w + k`): sends it, point to point, those this member still holds, as
    /// repairs of the root's stream, at most `budget` (the outbox's room) less those served
    /// from the link and still waiting for the batch's end; the others it is told are not
    /// held, in one answer.
    pub(crate) fn serve_peer(
        &mut self,
        wire_base: u32,
        missing: u16,
        more: &[u16],
        asker: Rank,
        budget: usize,
    ) {
        if self.peer_repair {
            // Fellows lose frames: keep copies for the next windows' worth of frames.
            let until = self.highest.max(self.expected) + COPY_SPAN * self.window();
            self.copies_until = until.low32();
            self.asked = true;
        }
        let base = self.near(wire_base);
        // Repairs served from the link leave at the batch's end (`frames_done`): until then
        // they take room in the outbox as much as the ones sent at once.
        let budget = budget.saturating_sub(self.link_relays.len());
        let mut served = 0;
        let mut unheld = NackBitmap::default();
        for off in nack_offsets(missing, more) {
            let held = match base {
                Some(b) if served < budget => self.held(b + u64::from(off)),
                _ => None,
            };
            let Some((r, payload)) = held else {
                unheld.set(off);
                continue;
            };
            let mut repr = r;
            repr.kind = Some(Kind::Repair);
            repr.dst = asker;
            repr.flags.remove(Flags::BROADCAST | Flags::ACK_REQ);
            repr.flags |= Flags::P2P;
            match payload {
                Found::Here(p) => {
                    let payload = p.to_vec();
                    self.controls.push_back(Outgoing::Relay {
                        dst: Dest::Rank(asker),
                        repr,
                        payload,
                    });
                }
                Found::Link(at, len) => self.link_relays.push((asker, repr, at, len)),
            }
            served += 1;
        }
        if let Some((first, more)) = unheld.take() {
            self.controls
                .push_back(unheld_reply(asker, self.root, wire_base, first, more));
        }
    }

    /// The stream position of a sequence number a peer names in a repair request: within a
    /// window of the next expected one, either side; `None` otherwise.
    pub(super) fn near(&self, wire: u32) -> Option<Seq> {
        let w = self.window() as u32;
        match locate(self.expected.saturating_sub(u64::from(w)), wire, 2 * w) {
            Position::Window(s) => Some(s),
            _ => None,
        }
    }

    /// The peer (`from`) does not hold the frames of `reply` (base and bitmap): those still
    /// missing here are asked of the root now. In a group with an acknowledgement tree, the
    /// first time, they are asked of the peer once more when their retry interval has passed
    /// instead: the peer most likely lost them too, and has got them back by then (it asks its
    /// own peer). Sent to the root at once, such frames made the root's NACKs grow with the
    /// group (a lost frame the peer lost too is one NACK: 5 % of the lost frames with 1 %
    /// random and 1 % burst loss), 0.46 per data frame at 256 members and 1.8 at 1024; asked
    /// again, 0.22 at 256. A small group's root takes them at once, one retry interval sooner.
    pub(crate) fn on_unheld(
        &mut self,
        now: Instant,
        wire_base: u32,
        missing: u16,
        more: &[u16],
        from: Rank,
    ) {
        if self.peer != Some(from) {
            return;
        }
        self.peer_answered();
        let Some(base) = self.near(wire_base) else {
            return;
        };
        let mut first = None;
        let again = if self.tree.is_some() {
            SlotState::PEER_ASKED | SlotState::PEER_ASKED_AGAIN
        } else {
            SlotState::PEER_ASKED
        };
        for off in nack_offsets(missing, more) {
            let s = base + u64::from(off);
            if s < self.expected || s >= self.highest {
                continue;
            }
            let i = self.idx(s);
            let slot = &mut self.slots[i];
            if !slot.state.contains(SlotState::HAVE) && slot.state.contains(again) {
                slot.nacked = None;
                first.get_or_insert(s);
            }
        }
        if let Some(s) = first {
            self.nack_from = Some(self.nack_from.map_or(s, |f| f.min(s)));
            self.schedule(now);
        }
    }

    /// Delivers the held messages whose time came (see `Config::peer_hold`), in order.
    pub(super) fn release_held(&mut self, now: Instant) {
        if self.holding.is_empty() {
            // Every frame comes here: a stream without loss holds nothing.
            return;
        }
        if self.expected != self.hold_seen {
            self.hold_seen = self.expected;
            self.hold_moved = Some(now);
        }
        // The wait runs from the stream's last move: a slow stream (a busy host) holds by
        // frames, not by time.
        let quiet_at = self.hold_moved.unwrap_or(now) + PEER_HOLD_WAIT;
        while let Some(h) = self.holding.front() {
            if self.expected < h.until && quiet_at > now {
                break;
            }
            let h = self.holding.pop_front().expect("not empty");
            self.events.push_back(h.event);
        }
        let at = match self.timers.get(Timer::Hold) {
            _ if self.holding.is_empty() => None,
            Some(t) if t > now => Some(t),
            _ => Some(quiet_at),
        };
        self.timers.set_or_stop(Timer::Hold, at);
    }

    /// Delivers every held message now: the stream is going away (its root was evicted),
    /// and what was complete is still delivered.
    pub(crate) fn release_all(&mut self) {
        self.events.extend(self.holding.drain(..).map(|h| h.event));
        self.timers.stop(Timer::Hold);
    }
}
