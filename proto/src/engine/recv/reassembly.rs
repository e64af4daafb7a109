//! Reassembly: in-order frames are consumed into their messages (straight into a posted
//! receive's buffer, or the pushed buffer), frames behind a gap are placed into their message
//! ahead of their turn, and whole messages leave in the root's order.
//!
//! A message in progress (`cur`) takes the next expected frame; messages after it begun by
//! out-of-order frames placed into them wait in `ahead`; complete messages whose receive was
//! not posted wait in `done`, their bytes in the pushed buffer. When the pushed buffer is full,
//! consumption pauses (the frames stay in the window, unacknowledged) until a receive is
//! posted: the root's buffer then paces the stream.
//!
//! **Invariants.** Message ids are consecutive: `ahead` holds the messages right after `cur`
//! (or after `next_start - 1` when none is in progress), `next_start` is the id of the next
//! message to begin, and `done` the complete ones before it, oldest first. `ahead_bytes` is
//! the bytes the buffers of `ahead` hold, at most a window's worth; the pushed buffer holds
//! the pushed bytes of `done` then of `cur`, in that order, at most `pushed_cap`.

use std::collections::VecDeque;

use crate::wire::{Control, Flags, Repr};
use crate::Rank;

use super::posts::Posts;
use crate::engine::{DropReason, EngineConfig, EngineEvent, Message, Observer, Piece, Prefetch};

/// A message being received.
#[derive(Debug)]
pub(super) struct InMsg {
    pub(super) id: u64,
    pub(super) len: usize,
    pub(super) filled: usize,
    /// Set when a receive is posted for it: data goes here.
    pub(super) data: Option<Vec<u8>>,
    /// Bytes of it held in the pushed buffer (when not posted).
    pushed: usize,
    truncated: Option<usize>,
    designated: Rank,
    awaiting_pull: bool,
    pull_sent: bool,
}

/// Where the payload of a frame being consumed is.
#[derive(Clone, Copy)]
pub(super) enum Payload<'a> {
    /// These bytes.
    Here(&'a [u8]),
    /// Already in its message's buffer at its offset (see [`Messages::place`]); this many
    /// bytes.
    Placed(usize),
}

/// The observer of a stream's bytes (see `Engine::observe`).
struct Watch(Observer);

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Observer")
    }
}

/// Hints where the frame after the next lands in message buffer `v`, one just written ending at
/// `end` and `len` long (see [`EngineConfig::prefetch`]): `len` bytes from `end + len`, as far as
/// the buffer's reservation reaches. Frames of a message mostly come in order, also behind a gap.
fn hint_ahead(hint: Option<Prefetch>, v: &Vec<u8>, end: usize, len: usize) {
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
fn first_reserve(repr: &Repr) -> usize {
    (repr.msg_len as usize).min(WHOLE_RESERVE)
}

/// Messages up to this long are reserved whole by their first frame. Above a megabyte, a
/// reservation that falls short by even a byte (a bulk transfer's chunk behind its one-byte
/// type) costs a reallocation that copies the whole message: measured, 8 receivers of 1 MiB
/// chunks spent a fifth of their CPU in that copy. 64 MiB is `ethbcast send`'s largest chunk.
const WHOLE_RESERVE: usize = (64 << 20) + 64;

/// The messages of one stream being reassembled. See the module documentation.
#[derive(Debug)]
pub(super) struct Messages {
    cur: Option<InMsg>,
    /// Messages after `cur` (consecutive ids) begun by out-of-order frames placed into them.
    ahead: VecDeque<InMsg>,
    /// Bytes held by the buffers of `ahead` (bounded by the window's worth of frames).
    ahead_bytes: usize,
    /// Complete messages waiting for their receive, their bytes in `pushed`: at most a
    /// receive queue's worth of them (the bytes alone would not bound empty messages).
    done: VecDeque<InMsg>,
    pushed: Vec<u8>,
    pushed_cap: u32,
    /// The id of the next message to deliver.
    next_msg: u64,
    /// The id of the next message to begin.
    next_start: u64,
    /// Messages longer than this are observed and not kept (`Engine::keep_at_most`).
    keep: usize,
    /// Messages longer than this are refused (`EngineConfig::max_message`).
    max_message: usize,
    /// The root's repeated pull poll: (message, its designated receiver).
    pull_override: Option<(u32, Rank)>,
    observer: Option<Watch>,
    /// Frames were handed in since the last batch's end: the window's copies consumed now
    /// stay until then (see `Piece::held`).
    in_batch: bool,
    /// The stream's NACKs were not planned while its next frames waited in the link: they
    /// are when the batch ends (beside `in_batch`, where a flag costs the receive stream no
    /// byte: its size is the paper's `s_RDP`).
    plan_deferred: bool,
    /// The ids of messages begun ahead that a frame contradicted (consecutive: the first and
    /// how many, in the wire's 32 bits): the window forgets the frames placed into them (see
    /// [`Messages::take_forgotten`]).
    forgotten: Option<(u32, u32)>,
}

impl Messages {
    /// No message yet, with `cfg`'s pushed buffer and limits.
    pub(super) fn new(cfg: &EngineConfig) -> Messages {
        Messages {
            cur: None,
            ahead: VecDeque::new(),
            ahead_bytes: 0,
            done: VecDeque::new(),
            // Made as it fills, or whole by `make_room`: a stream whose receives are posted in
            // time pushes nothing (reserved whole, it was a mebibyte of address space per
            // stream, 16 GiB of a simulated group of 4096 with four roots).
            pushed: Vec::new(),
            pushed_cap: u32::try_from(cfg.pushed_buffer).unwrap_or(u32::MAX),
            next_msg: 0,
            next_start: 0,
            keep: usize::MAX,
            max_message: cfg.max_message,
            pull_override: None,
            observer: None,
            in_batch: false,
            plan_deferred: false,
            forgotten: None,
        }
    }

    /// Messages delivered so far (the id of the next one).
    pub(super) fn next_msg(&self) -> u64 {
        self.next_msg
    }

    /// Bytes held in the pushed buffer.
    pub(super) fn pushed_bytes(&self) -> usize {
        self.pushed.len()
    }

    /// Complete messages held for a receive not posted yet.
    pub(super) fn waiting(&self) -> usize {
        self.done.len()
    }

    /// The keep limit (`Engine::keep_at_most`).
    pub(super) fn keep(&self) -> usize {
        self.keep
    }

    pub(super) fn keep_at_most(&mut self, keep: usize) {
        self.keep = keep;
    }

    pub(super) fn set_observer(&mut self, observer: Observer) {
        self.observer = Some(Watch(observer));
    }

    /// The observer, if any.
    pub(super) fn observer(&mut self) -> Option<&mut Observer> {
        self.observer.as_mut().map(|w| &mut w.0)
    }

    /// Frames are handed in: the window's copies consumed until the batch ends stay there.
    pub(super) fn begin_batch(&mut self) {
        self.in_batch = true;
    }

    /// The batch ended.
    pub(super) fn end_batch(&mut self) {
        self.in_batch = false;
    }

    /// The stream's NACKs are to be planned when the batch ends.
    pub(super) fn defer_plan(&mut self) {
        self.plan_deferred = true;
    }

    /// Whether the stream's NACKs are to be planned now (the batch ends); cleared.
    pub(super) fn take_deferred_plan(&mut self) -> bool {
        std::mem::take(&mut self.plan_deferred)
    }

    /// Whether frames were handed in since the last batch's end.
    pub(super) fn in_batch(&self) -> bool {
        self.in_batch
    }

    /// Refuses a frame of a message longer than this member takes.
    pub(super) fn check_len(&self, repr: &Repr) -> Result<(), DropReason> {
        if repr.msg_len as usize > self.max_message {
            return Err(DropReason::TooLong {
                len: repr.msg_len,
                max: self.max_message,
            });
        }
        Ok(())
    }

    /// The largest length the receive posted for the `k`th message from the one in progress
    /// accepts, if one is posted (see [`Posts::post_for`]).
    pub(super) fn post_for(&self, posts: &Posts, k: usize) -> Option<usize> {
        posts.post_for(k, !self.done.is_empty())
    }

    /// A message that `repr` (its first frame to arrive) begins, the `k`th from the one in
    /// progress (see `post_for`), with `reserve` bytes of its buffer allocated up front if a
    /// receive is posted for it (none if the receive is too small for it: its bytes are never
    /// kept). The buffer is one a posted receive lent, if there is one.
    fn new_msg(&self, posts: &mut Posts, id: u64, repr: &Repr, reserve: usize, k: usize) -> InMsg {
        let post = self.post_for(posts, k);
        let posted = post.is_some();
        let max = post.unwrap_or(usize::MAX).min(self.keep);
        let truncated = (posted && repr.msg_len as usize > max).then_some(max);
        let data = match (posted, truncated) {
            (false, _) => None,
            (true, Some(_)) => Some(Vec::new()),
            (true, None) => Some(posts.take_spare(reserve)),
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

    /// Writes an out-of-order frame straight into the buffer of its message, so that it is
    /// copied once instead of twice (into its slot, then out of it): under steady loss nearly
    /// every frame arrives behind a gap. The message is the one in progress, or one after it,
    /// begun here (consecutive ids only, and only where a receive is posted for it: a
    /// streaming member keeps several posted, so the next message's frames behind a gap are
    /// placed too). The frame is checked against its message again when its turn comes; a
    /// frame that does not fit is left to its slot (false).
    ///
    /// `reach`: how far past the first byte still missing an honest root's frame can lie;
    /// `ahead_cap`: the bytes the messages begun ahead may hold (a window's worth).
    /// `hint`: the stream's cache hint (`EngineConfig::prefetch`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn place(
        &mut self,
        posts: &mut Posts,
        reach: usize,
        ahead_cap: usize,
        repr: &Repr,
        payload: &[u8],
        hint: Option<Prefetch>,
    ) -> bool {
        let (off, len) = (repr.offset as usize, repr.msg_len as usize);
        let end = off + payload.len();
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
                        if id as u32 != repr.msg_id || self.post_for(posts, nth).is_none() {
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
                        let m = self.new_msg(posts, id, repr, reserve, nth);
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

    /// Drops the messages begun ahead and notes their ids, whose frames placed into them the
    /// window must forget (they are asked for again like any missing frame).
    fn forget_ahead(&mut self) {
        if let Some(first) = self.ahead.front() {
            let n = self.ahead.len() as u32;
            self.forgotten = Some(match self.forgotten {
                // Not taken since: one range still (messages begun ahead are consecutive,
                // and the next begins after the last).
                Some((f, m)) => (f, m + n),
                None => (first.id as u32, n),
            });
        }
        self.ahead.clear();
        self.ahead_bytes = 0;
    }

    /// The ids of the messages forgotten since the last call (see `forget_ahead`), as the
    /// first and how many (consecutive, in the wire's 32 bits): the window forgets the frames
    /// placed into them.
    pub(super) fn take_forgotten(&mut self) -> Option<(u32, u32)> {
        self.forgotten.take()
    }

    /// Appends the next expected frame to the message it belongs to; `held`: its payload
    /// stays where it is until the batch's end (see `Piece::held`). A message the frame
    /// completes is returned to deliver if a receive was posted for it, and waits in `done`
    /// otherwise. [`DropReason::NoRoom`]: the frame cannot be taken yet (it waits in its slot).
    /// Messages begun ahead that the frame contradicts are forgotten, whatever the result
    /// (see [`Messages::take_forgotten`]). `hint`: the stream's cache hint.
    pub(super) fn consume(
        &mut self,
        posts: &mut Posts,
        repr: &Repr,
        payload: Payload<'_>,
        held: bool,
        hint: Option<Prefetch>,
    ) -> Result<Option<InMsg>, DropReason> {
        if self.cur.is_none() {
            if repr.offset != 0 || repr.msg_id != self.next_start as u32 {
                return Err(DropReason::Protocol("message does not start at offset 0"));
            }
            if self.post_for(posts, 0).is_none() && self.done.len() >= posts.cap() {
                // A receive queue's worth of complete messages waits for receives already:
                // the frame waits in its slot (bytes alone would not bound empty messages).
                return Err(DropReason::NoRoom);
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
                        return Err(DropReason::Protocol("placed frame contradicts its message"));
                    }
                    self.new_msg(posts, self.next_start, repr, first_reserve(repr), 0)
                }
                None if matches!(payload, Payload::Placed(_)) => {
                    return Err(DropReason::Protocol("placed frame without its message"))
                }
                None => self.new_msg(posts, self.next_start, repr, first_reserve(repr), 0),
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
            return Err(DropReason::Protocol("frame does not continue its message"));
        }
        match (m.data.as_mut(), payload) {
            // Placed: already in `v` at its offset.
            (Some(_), Payload::Placed(_)) => {}
            (Some(v), Payload::Here(p)) => {
                if m.truncated.is_none() {
                    let end = m.filled + len;
                    if v.len() == m.filled {
                        v.extend_from_slice(p);
                        hint_ahead(hint, v, end, len);
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
                return Err(DropReason::Protocol("placed frame without its buffer"));
            }
            (None, Payload::Here(p)) => {
                if self.pushed.len() + len > self.pushed_cap as usize {
                    return Err(DropReason::NoRoom);
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
                see.piece(&Piece {
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
                return Ok(Some(m));
            }
            self.done.push_back(m);
        }
        Ok(None)
    }

    /// The oldest complete message that waited for its receive, now that one is posted (or
    /// every message counts as posted), its bytes moved out of the pushed buffer: to deliver.
    pub(super) fn take_waiting(&mut self, posts: &mut Posts) -> Option<InMsg> {
        if self.done.is_empty() || !posts.ready() {
            return None;
        }
        let mut m = self.done.pop_front().expect("not empty");
        let mut bytes = posts.take_spare(m.pushed);
        bytes.extend(self.pushed.drain(..m.pushed));
        m.data = Some(bytes);
        m.pushed = 0;
        Some(m)
    }

    /// A receive was posted for the message in progress, which had none: its pushed part is
    /// copied out into its buffer, and the rest goes there as it comes.
    pub(super) fn post_current(&mut self, posts: &mut Posts) {
        let unposted = self
            .cur
            .as_ref()
            .filter(|m| m.data.is_none())
            .map(|m| m.len);
        let Some(len) = unposted.filter(|_| self.post_for(posts, 0).is_some()) else {
            return;
        };
        let max = posts.front_max().min(self.keep);
        let mut v = posts.take_spare(len.min(WHOLE_RESERVE));
        let m = self
            .cur
            .as_mut()
            .expect("unposted is the message in progress");
        v.extend(self.pushed.drain(..m.pushed));
        m.pushed = 0;
        if m.len > max {
            m.truncated = Some(max);
            v = Vec::new();
        }
        m.data = Some(v);
    }

    /// What the application is told of complete message `m` of `root`'s stream, whose receive
    /// allowed `max` bytes: it is delivered, truncated, or observed and not kept.
    pub(super) fn finish(&mut self, root: Rank, m: InMsg, max: usize) -> EngineEvent {
        self.next_msg = m.id + 1;
        if m.len > self.keep && max >= m.len {
            EngineEvent::Observed {
                root,
                msg_id: m.id,
                len: m.len,
            }
        } else if m.len > max || m.truncated.is_some() {
            EngineEvent::Truncated {
                root,
                msg_id: m.id,
                len: m.len,
                max,
            }
        } else {
            EngineEvent::Delivered(Message {
                root,
                msg_id: m.id,
                data: m.data.unwrap_or_default(),
            })
        }
    }

    /// The pull request this member, designated for the message in progress, owes the root
    /// now (its push part is in and its receive is posted; once per message unless the root
    /// polls again). `next`: the stream's next expected frame.
    pub(super) fn pull_due(&mut self, posts: &Posts, me: Rank, next: u32) -> Option<Control> {
        let posted = self.post_for(posts, 0).is_some();
        let m = self.cur.as_mut()?;
        if !(m.awaiting_pull && posted && m.designated == me && !m.pull_sent) {
            return None;
        }
        m.pull_sent = true;
        Some(Control::Pull {
            msg_id: m.id as u32,
            next,
        })
    }

    /// The root asks `designated` to repeat a pull request for `msg_id` that may have been
    /// lost.
    pub(super) fn on_pull_poll(&mut self, msg_id: u32, designated: Rank) {
        self.pull_override = Some((msg_id, designated));
        if let Some(m) = self.cur.as_mut() {
            if m.id as u32 == msg_id {
                m.designated = designated;
                m.pull_sent = false;
            }
        }
    }

    /// The buffer of the message in progress or begun ahead with id `msg_id` (its low 32
    /// bits) and length `len`, and how far it was filled in order, if one is and it has a
    /// buffer (`Some(None)`: it has none).
    pub(super) fn find(&self, msg_id: u32, len: usize) -> Option<(Option<&Vec<u8>>, usize)> {
        self.cur
            .iter()
            .chain(self.ahead.iter())
            .find(|m| m.id as u32 == msg_id && m.len == len)
            .map(|m| (m.data.as_ref(), m.filled))
    }

    /// Makes room for every byte the pushed buffer may hold.
    pub(super) fn make_room(&mut self) {
        let cap = self.pushed_cap as usize;
        self.pushed
            .reserve_exact(cap.saturating_sub(self.pushed.len()));
    }

    /// Heap bytes of the pushed buffer when full and of the message records.
    pub(super) fn heap_bytes(&self) -> usize {
        self.pushed_cap as usize
            + (self.done.capacity() + self.ahead.capacity()) * std::mem::size_of::<InMsg>()
    }
}

#[cfg(test)]
mod tests {

    use crate::engine::recv::Posts;
    use crate::engine::{DropReason, EngineConfig, EngineEvent};
    use crate::wire::{Control, Flags, Kind, Repr};
    use crate::Rank;

    use super::{Messages, Payload};

    fn config() -> EngineConfig {
        let mut c = EngineConfig::new(1, Rank::new(1), 2);
        c.recv_queue = 2;
        c.pushed_buffer = 8;
        c.auto_post = false;
        c
    }

    /// Frame `offset..offset + len` of message `id` of `msg_len` bytes.
    fn frame(id: u32, msg_len: u32, offset: u32, flags: Flags) -> Repr {
        Repr {
            kind: Some(Kind::Data),
            flags,
            msg_id: id,
            msg_len,
            offset,
            aux: 1,
            ..Repr::default()
        }
    }

    #[test]
    fn a_posted_message_fills_its_buffer_and_comes_out_whole() {
        let cfg = config();
        let (mut m, mut p) = (Messages::new(&cfg), Posts::new(&cfg));
        p.post(100, Vec::new()).unwrap();
        let r = m.consume(
            &mut p,
            &frame(0, 6, 0, Flags::empty()),
            Payload::Here(b"abc"),
            true,
            None,
        );
        assert!(r.unwrap().is_none());
        let r = m.consume(
            &mut p,
            &frame(0, 6, 3, Flags::LAST),
            Payload::Here(b"def"),
            true,
            None,
        );
        let done = r.unwrap().expect("complete");
        let max = p.take();
        match m.finish(Rank::new(0), done, max) {
            EngineEvent::Delivered(msg) => {
                assert_eq!((msg.msg_id, &msg.data[..]), (0, &b"abcdef"[..]))
            }
            e => panic!("{e:?}"),
        }
        assert_eq!(m.next_msg(), 1);
        // A frame that does not continue its message, or begins one mid-way, is refused.
        let r = m.consume(
            &mut p,
            &frame(1, 6, 3, Flags::empty()),
            Payload::Here(b"x"),
            true,
            None,
        );
        assert_eq!(
            r.unwrap_err(),
            DropReason::Protocol("message does not start at offset 0")
        );
    }

    #[test]
    fn unposted_messages_wait_in_the_bounded_pushed_buffer() {
        let cfg = config();
        let (mut m, mut p) = (Messages::new(&cfg), Posts::new(&cfg));
        let r = m.consume(
            &mut p,
            &frame(0, 4, 0, Flags::LAST),
            Payload::Here(b"wxyz"),
            true,
            None,
        );
        assert!(r.unwrap().is_none(), "no receive: it waits");
        assert_eq!((m.waiting(), m.pushed_bytes()), (1, 4));
        // The pushed buffer (8 bytes) has room for 4 more, not 5.
        let r = m.consume(
            &mut p,
            &frame(1, 5, 0, Flags::LAST),
            Payload::Here(b"12345"),
            true,
            None,
        );
        assert_eq!(r.unwrap_err(), DropReason::NoRoom);
        assert!(m.take_waiting(&mut p).is_none(), "no receive posted yet");
        p.post(10, Vec::new()).unwrap();
        let w = m.take_waiting(&mut p).expect("posted now");
        assert_eq!(w.data.as_deref(), Some(&b"wxyz"[..]));
        assert_eq!(m.pushed_bytes(), 0);
    }

    #[test]
    fn frames_behind_a_gap_are_placed_and_a_contradiction_forgets_them() {
        let cfg = config();
        let (mut m, mut p) = (Messages::new(&cfg), Posts::new(&cfg));
        p.post(100, Vec::new()).unwrap();
        p.post(100, Vec::new()).unwrap();
        // Message 0's second half comes first: beyond what an honest root could have sent
        // with 2 bytes missing, it is not placed; with a frame's reach, it is placed into the
        // message begun ahead.
        assert!(!m.place(&mut p, 2, 4096, &frame(0, 6, 3, Flags::LAST), b"def", None));
        assert!(m.place(
            &mut p,
            1500,
            4096,
            &frame(0, 6, 3, Flags::LAST),
            b"def",
            None
        ));
        assert!(m.find(0, 6).is_some());
        let r = m.consume(
            &mut p,
            &frame(0, 6, 0, Flags::empty()),
            Payload::Here(b"abc"),
            true,
            None,
        );
        assert!(r.unwrap().is_none());
        let r = m.consume(
            &mut p,
            &frame(0, 6, 3, Flags::LAST),
            Payload::Placed(3),
            true,
            None,
        );
        let done = r.unwrap().expect("complete");
        assert_eq!(done.data.as_deref(), Some(&b"abcdef"[..]));
        // Messages 1 and 2 begun ahead, 1 with a length its first frame contradicts: what was
        // begun after it is forgotten (its own placed frames fail their check in turn).
        assert!(m.place(
            &mut p,
            1500,
            4096,
            &frame(1, 9, 3, Flags::empty()),
            b"zzz",
            None
        ));
        assert!(m.place(
            &mut p,
            1500,
            4096,
            &frame(2, 4, 1, Flags::LAST),
            b"zzz",
            None
        ));
        let r = m.consume(
            &mut p,
            &frame(1, 6, 0, Flags::empty()),
            Payload::Here(b"abc"),
            true,
            None,
        );
        assert!(r.is_ok());
        assert_eq!(m.take_forgotten(), Some((2, 1)));
        assert_eq!(m.take_forgotten(), None);
    }

    #[test]
    fn the_designated_receiver_pulls_once_its_push_part_is_in() {
        let cfg = config();
        let (mut m, mut p) = (Messages::new(&cfg), Posts::new(&cfg));
        p.post(100, Vec::new()).unwrap();
        let push = frame(0, 10, 0, Flags::PUSH | Flags::PULL_WAIT);
        m.consume(&mut p, &push, Payload::Here(b"abc"), true, None)
            .unwrap();
        assert_eq!(m.pull_due(&p, Rank::new(2), 1), None, "not designated");
        match m.pull_due(&p, Rank::new(1), 1) {
            Some(Control::Pull { msg_id: 0, next: 1 }) => {}
            other => panic!("{other:?}"),
        }
        assert_eq!(m.pull_due(&p, Rank::new(1), 1), None, "once");
        // The root polls again, naming another designated receiver.
        m.on_pull_poll(0, Rank::new(2));
        assert!(m.pull_due(&p, Rank::new(2), 1).is_some());
    }
}
