//! Window and reassembly: frames of the root's stream land in their window slots, in-order
//! frames are consumed into their messages (straight into a posted receive's buffer, or the
//! pushed buffer), and whole messages are delivered in the root's order.

use super::*;

/// Where the payload of a frame being consumed is.
#[derive(Clone, Copy)]
pub(super) enum Payload<'a> {
    /// These bytes.
    Here(&'a [u8]),
    /// Already in its message's buffer at its offset (see `Receiver::place`); this many bytes.
    Placed(usize),
}

/// Hints where the frame after the next lands in message buffer `v`, one just written ending
/// at `end` and `len` long (see [`Config::prefetch`]): `len` bytes from `end + len`, as far as
/// the buffer's reservation reaches. Frames of a message mostly come in order, also behind a
/// gap.
pub(super) fn hint_ahead(
    hint: Option<crate::engine::Prefetch>,
    v: &Vec<u8>,
    end: usize,
    len: usize,
) {
    if let Some(hint) = hint {
        let at = end + len;
        let ahead = len.min(v.capacity().saturating_sub(at));
        if ahead > 0 {
            hint(v.as_ptr().wrapping_add(at), ahead);
        }
    }
}

/// Bytes reserved for a message begun by its first frame, in order: its whole length up to
/// [`WHOLE_RESERVE`], so that it is filled without reallocating. One message per root is in
/// progress at a time, so this bounds what a forged length can reserve (the one after it,
/// begun by a frame placed ahead, is reserved up to a window's worth only, see `place`); the
/// reservation is address space, the pages come as data fills them.
pub(super) fn first_reserve(repr: &Repr) -> usize {
    (repr.msg_len as usize).min(WHOLE_RESERVE)
}

/// Messages up to this long are reserved whole by their first frame. Above a megabyte, a
/// reservation that falls short by even a byte (a bulk transfer's chunk behind its one-byte
/// type) costs a reallocation that copies the whole message: measured, 8 receivers of 1 MiB
/// chunks spent a fifth of their CPU in that copy. 64 MiB is `ethbcast send`'s largest chunk.
pub(super) const WHOLE_RESERVE: usize = (64 << 20) + 64;

impl Receiver {
    pub(super) fn drain(&mut self) {
        self.drain_from(None)
    }

    /// Consumes the frames waiting in order; those in the link's frames only where `link`
    /// finds them (at the end of a batch: see `frames_done`).
    pub(super) fn drain_from(&mut self, link: Option<&dyn machine::Held>) {
        loop {
            let i = self.idx(self.expected);
            if !self.slots[i].state.contains(SlotState::HAVE) {
                break;
            }
            let len = usize::from(self.slots[i].len);
            let repr = self.slots[i].repr;
            let r = if self.slots[i].state.contains(SlotState::PLACED) {
                self.consume(&repr, Payload::Placed(len), false)
            } else if self.slots[i].state.contains(SlotState::LINK) {
                let Some(link) = link else {
                    break;
                };
                if let Some(hint) = self.prefetch {
                    // The next frame waiting in the link is read next: asked for now, it
                    // arrives while this one is consumed (see `Config::prefetch`).
                    let n = self.idx(self.expected + 1);
                    let next = &self.slots[n];
                    if next.state.contains(SlotState::LINK | SlotState::HAVE) {
                        hint(self.link_at[n] as *const u8, usize::from(next.len));
                    }
                }
                match link.find(self.link_at[i], len) {
                    Some(bytes) => self.consume(&repr, Payload::Here(bytes), true),
                    // Not where it was noted (cannot happen while the link keeps what it
                    // retains): asked for again.
                    None => Err(Drop::Protocol("frame no longer in the link")),
                }
            } else {
                // Lend the block out for the call (a pointer swap, not a copy; `consume`
                // never looks at the window's payloads).
                let data = std::mem::take(&mut self.slot_data);
                let r = self.consume(&repr, Payload::Here(data.get(i, len)), self.in_batch);
                self.slot_data = data;
                r
            };
            match r {
                Ok(()) => {
                    self.slots[i].state.remove(SlotState::HAVE);
                    self.advance();
                }
                Err(Drop::NoRoom) => break,
                Err(_) => {
                    // A frame that contradicts the stream: discard it so it is asked for again.
                    self.slots[i]
                        .state
                        .remove(SlotState::HAVE | SlotState::COPY | SlotState::LINK);
                    break;
                }
            }
        }
    }

    /// The next expected frame was consumed: progress, so NACK retries start over at their
    /// shortest interval.
    pub(super) fn advance(&mut self) {
        self.expected += 1;
        self.unacked += 1;
        self.nack_backoff = 0;
    }

    /// A message that `repr` (its first frame to arrive) begins, the `k`th from the one in
    /// progress (see `post_for`), with `reserve` bytes of its buffer allocated up front if a
    /// receive is posted for it (none if the receive is too small for it: its bytes are never
    /// kept). The buffer is one a posted receive lent, if there is one.
    pub(super) fn new_msg(&mut self, id: u64, repr: &Repr, reserve: usize, k: usize) -> InMsg {
        let post = self.post_for(k);
        let posted = post.is_some();
        let max = post.unwrap_or(usize::MAX).min(self.keep);
        let truncated = (posted && repr.msg_len as usize > max).then_some(max);
        let data = match (posted, truncated) {
            (false, _) => None,
            (true, Some(_)) => Some(Vec::new()),
            (true, None) => Some(self.take_spare(reserve)),
        };
        InMsg {
            id,
            len: repr.msg_len as usize,
            filled: 0,
            data,
            pushed: 0,
            truncated,
            designated: Rank::new(repr.aux as u16),
            awaiting_pull: false,
            pull_sent: false,
        }
    }

    /// Writes the out-of-order frame `s` straight into the buffer of its message, so that it
    /// is copied once instead of twice (into its slot, then out of it): under steady loss
    /// nearly every frame arrives behind a gap. The message is the one in progress, or one
    /// after it, begun here (consecutive ids only, and only where a receive is posted for
    /// it: a streaming member keeps several posted, so the next message's frames behind a
    /// gap are placed too). The frame is checked against its message again when its turn
    /// comes; a frame that does not fit is left to its slot.
    pub(super) fn place(&mut self, s: Seq, repr: &Repr, payload: &[u8]) -> bool {
        let hint = self.prefetch;
        let (off, len) = (repr.offset as usize, repr.msg_len as usize);
        let end = off + payload.len();
        // An honest root's frame `s` lies at most this far past the first byte still missing.
        let reach = (s - self.expected) as usize * self.slot_payload();
        let ahead_cap = self.slots.len() * self.slot_payload();
        if end > len {
            return false;
        }
        let cur_id = self.cur.as_ref().map(|m| m.id);
        let mut k = match cur_id {
            Some(id) if id as u32 == repr.msg_id => None,
            _ => {
                let first = cur_id.map_or(self.next_start, |id| id + 1);
                match self.ahead.iter().position(|m| m.id as u32 == repr.msg_id) {
                    Some(k) => Some(k),
                    None => {
                        let id = first + self.ahead.len() as u64;
                        let nth = self.ahead.len() + usize::from(cur_id.is_some());
                        if id as u32 != repr.msg_id || self.post_for(nth).is_none() {
                            return false;
                        }
                        // Under steady loss most messages begin behind a gap, and a buffer
                        // that grew from nothing would reallocate, copying what it holds, all
                        // the way to its length. So the message right after the one in
                        // progress is reserved up front as far as frames can be placed ahead
                        // (`ahead_cap`, a window's worth: a message that long or shorter is
                        // filled without reallocating; a longer one is reserved whole when its
                        // turn comes, in `consume`). Later ones get nothing up front: their
                        // buffers grow with the data placed (bounded by `ahead_cap` too), so
                        // forged frames, one per window slot, cannot each reserve a message.
                        let reserve = if self.ahead.is_empty() {
                            first_reserve(repr).min(ahead_cap)
                        } else {
                            0
                        };
                        let m = self.new_msg(id, repr, reserve, nth);
                        self.ahead.push_back(m);
                        Some(self.ahead.len() - 1)
                    }
                }
            }
        };
        let m = match k.as_mut() {
            None => self.cur.as_mut().expect("current message"),
            Some(k) => &mut self.ahead[*k],
        };
        if m.len != len || m.truncated.is_some() || off < m.filled || off - m.filled > reach {
            return false;
        }
        let Some(v) = m.data.as_mut() else {
            return false;
        };
        if v.len() < end {
            let grow = end - v.len();
            if k.is_some() {
                if self.ahead_bytes + grow > ahead_cap {
                    return false;
                }
                self.ahead_bytes += grow;
            }
            if v.len() <= off {
                // Past the end (the common case behind a gap): zeroes for the gap only, then
                // the frame, written once.
                v.resize(off, 0);
                v.extend_from_slice(payload);
                hint_ahead(hint, v, end, payload.len());
                return true;
            }
            v.resize(end, 0);
        }
        v[off..end].copy_from_slice(payload);
        hint_ahead(hint, v, end, payload.len());
        true
    }

    /// Drops the messages begun ahead and the frames placed into them (they are asked for
    /// again like any missing frame).
    pub(super) fn forget_ahead(&mut self) {
        let ids: Vec<u32> = self.ahead.drain(..).map(|m| m.id as u32).collect();
        self.ahead_bytes = 0;
        for slot in self.slots.iter_mut() {
            if slot.state.contains(SlotState::HAVE | SlotState::PLACED)
                && ids.contains(&slot.repr.msg_id)
            {
                slot.state.remove(
                    SlotState::HAVE | SlotState::PLACED | SlotState::COPY | SlotState::LINK,
                );
            }
        }
    }

    /// Appends the next expected frame to the message it belongs to; `held`: its payload
    /// stays where it is until the batch's end (see `Piece::held`).
    pub(super) fn consume(
        &mut self,
        repr: &Repr,
        payload: Payload<'_>,
        held: bool,
    ) -> Result<(), Drop> {
        if self.cur.is_none() {
            if repr.offset != 0 || repr.msg_id != self.next_start as u32 {
                return Err(Drop::Protocol("message does not start at offset 0"));
            }
            if self.post_for(0).is_none() && self.done.len() >= self.posts_cap as usize {
                // A receive queue's worth of complete messages waits for receives already:
                // the frame waits in its slot (bytes alone would not bound empty messages).
                return Err(Drop::NoRoom);
            }
            let m = match self.ahead.pop_front() {
                Some(mut m) if m.id == self.next_start && m.len == repr.msg_len as usize => {
                    if let Some(v) = m.data.as_mut() {
                        self.ahead_bytes -= v.len();
                        if m.truncated.is_none() {
                            // Its turn: reserved whole now, as a message begun in order is.
                            v.reserve_exact(first_reserve(repr).saturating_sub(v.len()));
                        }
                    }
                    m
                }
                Some(_) => {
                    // Begun by frames that contradict this one: what was placed ahead is
                    // forgotten and asked for again.
                    self.forget_ahead();
                    if let Payload::Placed(_) = payload {
                        return Err(Drop::Protocol("placed frame contradicts its message"));
                    }
                    self.new_msg(self.next_start, repr, first_reserve(repr), 0)
                }
                None if matches!(payload, Payload::Placed(_)) => {
                    return Err(Drop::Protocol("placed frame without its message"))
                }
                None => self.new_msg(self.next_start, repr, first_reserve(repr), 0),
            };
            self.cur = Some(m);
            self.next_start += 1;
        }
        let len = match payload {
            Payload::Placed(len) => len,
            Payload::Here(p) => p.len(),
        };
        let m = self.cur.as_mut().expect("just set");
        let start = m.filled;
        if repr.msg_id != m.id as u32
            || repr.msg_len as usize != m.len
            || repr.offset as usize != m.filled
        {
            return Err(Drop::Protocol("frame does not continue its message"));
        }
        match (m.data.as_mut(), payload) {
            // Placed: already in `v` at its offset.
            (Some(_), Payload::Placed(_)) => {}
            (Some(v), Payload::Here(p)) => {
                if m.truncated.is_none() {
                    let end = m.filled + len;
                    if v.len() == m.filled {
                        v.extend_from_slice(p);
                        hint_ahead(self.prefetch, v, end, len);
                    } else {
                        // Frames after this one were placed already.
                        if v.len() < end {
                            v.resize(end, 0);
                        }
                        v[m.filled..end].copy_from_slice(p);
                    }
                }
            }
            (None, Payload::Placed(_)) => {
                return Err(Drop::Protocol("placed frame without its buffer"))
            }
            (None, Payload::Here(p)) => {
                if self.pushed.len() + len > self.pushed_cap as usize {
                    return Err(Drop::NoRoom);
                }
                self.pushed.extend_from_slice(p);
                m.pushed += len;
            }
        }
        if let Some(Watch(see)) = self.observer.as_mut() {
            // A placed frame is in its message's buffer already (checked above).
            let bytes = match payload {
                Payload::Here(p) => Some(p),
                Payload::Placed(_) => m.data.as_ref().and_then(|v| v.get(start..start + len)),
            };
            if let Some(bytes) = bytes {
                see.piece(&crate::engine::Piece {
                    msg_id: m.id,
                    msg_len: m.len,
                    offset: start,
                    bytes,
                    held: held && matches!(payload, Payload::Here(_)),
                });
            }
        }
        m.filled += len;
        if repr.flags.contains(Flags::PULL_WAIT) {
            m.awaiting_pull = true;
            m.designated = match self.pull_override {
                Some((id, d)) if id == repr.msg_id => d,
                _ => Rank::new(repr.aux as u16),
            };
        } else if !repr.flags.contains(Flags::PUSH) {
            m.awaiting_pull = false;
        }
        if m.filled >= m.len {
            let m = self.cur.take().expect("current message");
            if m.data.is_some() {
                self.deliver(m);
            } else {
                self.done.push_back(m);
            }
        }
        Ok(())
    }

    pub(super) fn deliver(&mut self, m: InMsg) {
        let post = if self.auto_post {
            None
        } else {
            self.posts.pop_front()
        };
        let max = post.map_or(usize::MAX, |p| p.max_len);
        let event = if m.len > self.keep && max >= m.len {
            Event::Observed {
                root: self.root,
                msg_id: m.id,
                len: m.len,
            }
        } else if m.len > max || m.truncated.is_some() {
            Event::Truncated {
                root: self.root,
                msg_id: m.id,
                len: m.len,
                max,
            }
        } else {
            Event::Delivered(Message {
                root: self.root,
                msg_id: m.id,
                data: m.data.unwrap_or_default(),
            })
        };
        self.next_msg = m.id + 1;
        // Its last frame is the one being consumed, `expected`. Held while fellows ask, and
        // behind any message held before it, whatever it is: delivery stays in order. For a
        // window's worth of frames: any request a slot copy could serve (until the slot was
        // reused) finds the message. The price is memory the application would have freed
        // sooner: up to a window's worth of bytes and the message itself (at 1% loss a bulk
        // receiver's message buffers, held and in progress, grew from about 3.4 to 7 MiB:
        // docs/benchmarks.md).
        if self.peer_hold && (self.copying(self.expected) || !self.holding.is_empty()) {
            self.holding.push_back(Held {
                event,
                until: self.expected + 1 + self.window(),
            });
        } else {
            self.events.push_back(event);
        }
    }

    pub(super) fn maybe_pull(&mut self) {
        let posted = self.cur_posted();
        let me = self.me;
        let Some(m) = self.cur.as_mut() else { return };
        if m.awaiting_pull && posted && m.designated == me && !m.pull_sent {
            m.pull_sent = true;
            let pull = Control::Pull {
                msg_id: m.id as u32,
                next: self.expected.low32(),
            };
            self.controls.push_back(Outgoing::to(self.root, pull));
            if self.tree.is_none() {
                self.acked = self.expected;
                self.unacked = 0;
            }
        }
    }
}
