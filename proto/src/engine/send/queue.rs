//! The send queue and its framing: messages handed to `bcast` wait here (the SDP's send
//! queue) until slots of the retransmission buffer are free, and are cut into frames as slots
//! free up, each published into the buffer shortly before it is broadcast.
//!
//! Push-pull messages stop at the end of their push part until the designated receiver's pull
//! request arrives; a push-pull message that fits one frame is pushed whole in it (no BTP1
//! cut, no pull). A message lent with `Engine::bcast_from` is given back once all its frames
//! are in the buffer: the frames are copies, so the caller's buffer is free again then. A
//! message borrowed for the length of a call (`Engine::bcast_slice`) is published straight from
//! the caller's bytes while the buffer has room, and only what did not fit is copied, into a
//! buffer the caller lends for it.
//!
//! **Invariants.** Messages leave the queue in order, once all their frames are published;
//! `unstable` names them with their last frame until every live destination has it, then they
//! move to `stable`. `promised` bounds the sequence numbers the queued messages may take, and
//! never passes `LAST_SEQ + 1` (the session ends instead). At most [`PUBLISH_AHEAD`] frames are
//! published and not sent yet, except those of a borrowed message published as it was queued
//! (at most the buffer's room).

use std::collections::VecDeque;

use crate::eqa::Eqa;
use crate::wire::{self, Flags, Kind, Repr};
use crate::{Rank, Seq};

use crate::engine::{EngineConfig, HardwareAlgorithm, SendError, SessionEnded};

/// Frames published into the shared buffer ahead of the one sent next, at most. A frame is
/// copied twice on its way out: from its message into its slot of the buffer (which keeps it
/// for repairs), and from the slot into the link's frame. Published just before it is sent,
/// the slot is still in the cache for the second copy; published as soon as the buffer had
/// room (up to a window ahead, megabytes in bulk), it had left the cache, and on the bulk
/// sender those copies took ten times the CPU per frame of the raw blaster's copy.
pub(crate) const PUBLISH_AHEAD: u64 = 16;

/// Lent messages whose frames are all in the buffer, kept for their callers to take back: the
/// newest ones, at most this many (a caller that gave up on a call does not take its message
/// back, and the next call's is the newest).
const SENT_KEPT: usize = 2;

/// A message as its caller hands it to the send queue.
#[derive(Debug)]
pub(crate) enum Handed<'a> {
    /// The queue takes the message's buffer (see [`SendQueue::push`]); a `lent` one comes
    /// back once its frames are all in the buffer.
    Taken { data: &'a mut Vec<u8>, lent: bool },
    /// Borrowed for the call, with a buffer for what is not published at once (see
    /// [`SendQueue::push_slice`]).
    Borrowed {
        data: &'a [u8],
        spare: &'a mut Vec<u8>,
    },
}

impl<'a> Handed<'a> {
    /// The message's bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            Handed::Taken { data, .. } => data,
            Handed::Borrowed { data, .. } => data,
        }
    }

    /// The buffer the call takes: the message's own, or the spare one.
    pub(crate) fn buffer(self) -> &'a mut Vec<u8> {
        match self {
            Handed::Taken { data, .. } => data,
            Handed::Borrowed { spare, .. } => spare,
        }
    }
}

/// A message in the send queue.
#[derive(Debug)]
pub(crate) struct OutMsg {
    id: u64,
    /// The message's bytes from `base` on (all of them unless it was borrowed).
    data: Vec<u8>,
    algo: HardwareAlgorithm,
    /// Where the frame cut next starts, in the message.
    off: usize,
    started: bool,
    push_end: usize,
    pull_granted: bool,
    /// The last frame of its push part (its size counts in the paper profile's queue length).
    last_push: Option<Seq>,
    /// Lent by the caller, who takes it back once its frames are all in the buffer
    /// ([`SendQueue::take_sent`]).
    lent: bool,
    /// Bytes of a borrowed message published before the rest was copied into `data`: byte
    /// `i` of the message is `data[i - base]`. A message is at most `u32::MAX` bytes long
    /// (its length travels in 32 bits).
    base: u32,
}

impl OutMsg {
    /// The message's length.
    fn len(&self) -> usize {
        self.base as usize + self.data.len()
    }
}

/// What framing stopped at (see [`SendQueue::fill`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Filled {
    /// Every queued frame that could be published is.
    Done,
    /// A push-pull message waits for its pull request.
    AwaitingPull,
}

/// The send queue of one member. See the module documentation.
#[derive(Debug)]
pub(super) struct SendQueue {
    queue: VecDeque<OutMsg>,
    cap: usize,
    /// Sequence numbers the messages queued so far may take, at most.
    promised: u64,
    next_id: u64,
    /// Messages whose frames are all published, with their last frame, until every live
    /// destination has it.
    unstable: VecDeque<(u64, Seq)>,
    /// Messages every live destination has, for the engine's events.
    stable: VecDeque<u64>,
    /// Lent messages whose frames are all in the buffer, by id, for their callers to take
    /// back (at most [`SENT_KEPT`]).
    sent: VecDeque<(u64, Vec<u8>)>,
}

impl SendQueue {
    /// An empty queue of `cfg.send_queue` messages.
    pub(super) fn new(cfg: &EngineConfig) -> SendQueue {
        SendQueue {
            // Made as it fills, or whole by `make_room`: every member has a send queue, and
            // most never broadcast (made with room for 1024 messages it was 72 KiB of every
            // member, 288 MiB of a simulated group of 4096).
            queue: VecDeque::new(),
            cap: cfg.send_queue,
            promised: 0,
            next_id: 0,
            unstable: VecDeque::new(),
            stable: VecDeque::new(),
            sent: VecDeque::new(),
        }
    }

    /// Messages waiting (including the one being sent).
    pub(super) fn len(&self) -> usize {
        self.queue.len()
    }

    /// The id of the message being sent, if any.
    pub(super) fn front_id(&self) -> Option<u64> {
        self.queue.front().map(|m| m.id)
    }

    /// Test support: counts `frames` sequence numbers as promised.
    #[cfg(any(test, feature = "test-hooks"))]
    pub(super) fn skip_sequences(&mut self, frames: u64) {
        self.promised = self.promised.saturating_add(frames);
    }

    /// Whether a message of `len` bytes fits the queue and the session's sequence numbers:
    /// the sequence numbers it may take, or why not.
    pub(super) fn admit(&self, cfg: &EngineConfig, len: usize) -> Result<u64, SendError> {
        if self.queue.len() >= self.cap {
            return Err(SendError::QueueFull(self.cap));
        }
        // The frames it may take: one per payload, and up to two more where push-pull cuts
        // it at its push and pull bounds. The session ends before the sequence numbers would
        // wrap (see `SessionEnded`).
        let max = cfg.max_payload().max(1);
        let frames = match len {
            n if n <= max => 1,
            n => n.div_ceil(max) as u64 + 2,
        };
        let promised = self.promised + frames;
        if promised > (wire::control::LAST_SEQ + 1).get() {
            return Err(SendError::SessionEnded(SessionEnded::Sequence));
        }
        Ok(promised)
    }

    /// Queues the message in `data` (taking it), admitted with `promised` (see
    /// [`SendQueue::admit`]); returns its id. A `lent` message is kept for its caller when its
    /// frames are all in the buffer.
    pub(super) fn push(
        &mut self,
        cfg: &EngineConfig,
        data: &mut Vec<u8>,
        algo: HardwareAlgorithm,
        lent: bool,
        promised: u64,
    ) -> u64 {
        let len = data.len();
        self.push_msg(cfg, std::mem::take(data), len, algo, lent, promised)
    }

    /// Queues a message of `len` bytes whose last `data.len()` are in `data` (the others are
    /// published before anything else happens to the queue: see [`SendQueue::push_slice`]),
    /// and returns its id.
    fn push_msg(
        &mut self,
        cfg: &EngineConfig,
        data: Vec<u8>,
        len: usize,
        algo: HardwareAlgorithm,
        lent: bool,
        promised: u64,
    ) -> u64 {
        self.promised = promised;
        let id = self.next_id;
        self.next_id += 1;
        let push_end = match algo {
            // A message that fits one frame is pushed whole in that frame: cutting it at BTP1
            // would cost a second frame (and above BTP1 + BTP2 a pull round trip) for bytes
            // the first frame had room for.
            HardwareAlgorithm::PushPull if len <= cfg.max_payload() => len,
            HardwareAlgorithm::PushPull => len.min(cfg.btp1 + cfg.btp2),
            HardwareAlgorithm::Simple => len,
        };
        let base = (len - data.len()) as u32;
        self.queue.push_back(OutMsg {
            id,
            data,
            algo,
            off: 0,
            started: false,
            push_end,
            pull_granted: false,
            last_push: None,
            lent,
            base,
        });
        id
    }

    /// Queues the message in `data`, borrowed for this call only, admitted with `promised`
    /// (see [`SendQueue::admit`]), and returns its id. When no other message waits, its
    /// frames are published into `eqa` at once, straight from `data`, while the buffer has
    /// room (and a push-pull message up to its pull). What is left is copied into `spare`,
    /// which the queue takes, leaving it empty, and gives back as the lent message
    /// ([`SendQueue::take_sent`]); a message published whole leaves `spare` as it was, and
    /// gives back an empty buffer.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn push_slice(
        &mut self,
        cfg: &EngineConfig,
        eqa: &mut Eqa,
        sent_upto: Seq,
        designated: Rank,
        data: &[u8],
        spare: &mut Vec<u8>,
        algo: HardwareAlgorithm,
        promised: u64,
    ) -> u64 {
        let id = self.push_msg(cfg, Vec::new(), data.len(), algo, true, promised);
        if self.queue.len() == 1 {
            self.frame(cfg, eqa, sent_upto, designated, Some(data));
        }
        if let Some(m) = self.queue.back_mut().filter(|m| m.id == id) {
            let rest = &data[m.off..];
            m.base = m.off as u32;
            spare.clear();
            spare.extend_from_slice(rest);
            m.data = std::mem::take(spare);
        }
        id
    }

    /// The buffer of lent message `id`, once all its frames are in the retransmission buffer
    /// (`None` before, or if it was not lent, or was taken already, or was one of more than
    /// [`SENT_KEPT`] lent messages nobody took back).
    pub(super) fn take_sent(&mut self, id: u64) -> Option<Vec<u8>> {
        let i = self.sent.iter().position(|(m, _)| *m == id)?;
        self.sent.remove(i).map(|(_, data)| data)
    }

    /// The designated receiver's pull request for message `msg_id` (its low 32 bits) came:
    /// whether it was the one the message at the front waited for.
    pub(super) fn grant_pull(&mut self, msg_id: u32) -> bool {
        match self.queue.front_mut() {
            Some(m) if m.id as u32 == msg_id && m.algo == HardwareAlgorithm::PushPull => {
                m.pull_granted = true;
                true
            }
            _ => false,
        }
    }

    /// Cuts queued messages into frames published into `eqa` while it has room, up to
    /// [`PUBLISH_AHEAD`] frames past `sent_upto` (the next frame to broadcast); `designated`
    /// is named in each frame as the receiver that pulls.
    pub(super) fn fill(
        &mut self,
        cfg: &EngineConfig,
        eqa: &mut Eqa,
        sent_upto: Seq,
        designated: Rank,
    ) -> Filled {
        self.frame(cfg, eqa, sent_upto, designated, None)
    }

    /// [`SendQueue::fill`]; `borrowed`: the whole of the front message, which is the only one
    /// queued and was borrowed by [`SendQueue::push_slice`] (its frames are then published
    /// while the buffer has room, not [`PUBLISH_AHEAD`] only: what is not published now must
    /// be copied).
    fn frame(
        &mut self,
        cfg: &EngineConfig,
        eqa: &mut Eqa,
        sent_upto: Seq,
        designated: Rank,
        borrowed: Option<&[u8]>,
    ) -> Filled {
        let max = cfg.max_payload();
        loop {
            let held_from = eqa.tail().min(sent_upto);
            let room = eqa.buf().capacity() - (eqa.head() - held_from) as usize;
            let Some(m) = self.queue.front_mut() else {
                break;
            };
            if m.started && m.off >= m.len() {
                let m = self.queue.pop_front().expect("front exists");
                self.unstable.push_back((m.id, eqa.head() - 1));
                if m.lent {
                    if self.sent.len() >= SENT_KEPT {
                        self.sent.pop_front();
                    }
                    self.sent.push_back((m.id, m.data));
                }
                if borrowed.is_some() {
                    // The borrowed bytes were this message's only.
                    return Filled::Done;
                }
                continue;
            }
            // The message's bytes, and where they start in it.
            let (bytes, base) = match borrowed {
                Some(b) => (b, 0),
                None => (&m.data[..], m.base as usize),
            };
            if m.algo == HardwareAlgorithm::PushPull
                && m.started
                && m.off >= m.push_end
                && !m.pull_granted
            {
                return Filled::AwaitingPull;
            }
            if room == 0 {
                break;
            }
            if borrowed.is_none() && eqa.head() - sent_upto >= PUBLISH_AHEAD {
                if let Some(hint) = cfg.prefetch {
                    // The next frames' bytes, for the call that publishes them.
                    let ahead = bytes
                        .get(m.off - base..)
                        .map_or(&[][..], |d| &d[..d.len().min(4 * max)]);
                    hint(ahead.as_ptr(), ahead.len());
                }
                break;
            }
            let len = m.len();
            let end = if m.algo == HardwareAlgorithm::PushPull && m.off < cfg.btp1 && len > max {
                cfg.btp1.min(len)
            } else if m.off < m.push_end {
                m.push_end.min(m.off + max)
            } else {
                len.min(m.off + max)
            };
            let mut flags = Flags::BROADCAST;
            if cfg.payload_covered() {
                flags |= Flags::HEADER_CRC;
            }
            if end == len {
                flags |= Flags::LAST;
            }
            if m.algo == HardwareAlgorithm::PushPull && m.off < m.push_end {
                flags |= Flags::PUSH;
                if end == m.push_end && m.push_end < len {
                    flags |= Flags::PULL_WAIT;
                }
            }
            let repr = Repr {
                kind: Some(Kind::Data),
                flags,
                group: cfg.group,
                src: cfg.rank,
                dst: wire::ALL,
                seq: 0,
                msg_id: m.id as u32,
                msg_len: len as u32,
                offset: m.off as u32,
                bitmap: 0,
                aux: u32::from(designated.get()),
            };
            if let Some(hint) = cfg.prefetch {
                let from = (end + 3 * max).min(len);
                hint(bytes[from - base..].as_ptr(), (len - from).min(max));
            }
            let seq = match eqa.publish(repr, &bytes[m.off - base..end - base]) {
                Ok(s) => s,
                Err(_) => break,
            };
            if flags.contains(Flags::PULL_WAIT) {
                m.last_push = Some(seq);
            }
            m.off = end;
            m.started = true;
        }
        Filled::Done
    }

    /// Moves the messages every live destination has (`tail`: the oldest frame still held;
    /// `sent_upto`: the next to broadcast) to the stable ones.
    pub(super) fn collect_stable(&mut self, tail: Seq, sent_upto: Seq) {
        while let Some(&(id, last)) = self.unstable.front() {
            if last >= tail || last >= sent_upto {
                break;
            }
            self.unstable.pop_front();
            self.stable.push_back(id);
        }
    }

    /// The next message every live destination has.
    pub(super) fn take_stable(&mut self) -> Option<u64> {
        self.stable.pop_front()
    }

    /// Makes room for every message the queue may hold (the queue grows to it).
    pub(super) fn make_room(&mut self) {
        self.queue
            .reserve_exact(self.cap.saturating_sub(self.queue.len()));
    }

    /// Heap bytes of the queue's records when full.
    pub(super) fn heap_bytes(&self) -> usize {
        self.cap * std::mem::size_of::<OutMsg>()
    }

    /// Whether no message waits.
    pub(super) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

#[cfg(test)]
mod tests {

    use crate::engine::{EngineConfig, HardwareAlgorithm, SendError, SessionEnded};
    use crate::eqa::Eqa;
    use crate::wire::{self, Flags};
    use crate::{Rank, Seq};

    use super::{Filled, SendQueue, PUBLISH_AHEAD};

    fn setup() -> (EngineConfig, Eqa, SendQueue) {
        setup_window(8)
    }

    /// A root of two members, with a buffer of `window` slots and room for two messages.
    fn setup_window(window: usize) -> (EngineConfig, Eqa, SendQueue) {
        let mut c = EngineConfig::new(1, Rank::new(0), 2);
        c.window = window;
        c.send_queue = 2;
        let mut eqa = Eqa::new(c.window, c.slot_payload(), std::iter::empty(), 4, c.rto);
        eqa.add_dest(Rank::new(1), 4, c.rto);
        let q = SendQueue::new(&c);
        (c, eqa, q)
    }

    /// Queues `m` borrowed, with `sent` frames sent so far and rank 1 designated.
    fn borrow(
        (c, eqa, q): (&EngineConfig, &mut Eqa, &mut SendQueue),
        sent: u64,
        m: &[u8],
        spare: &mut Vec<u8>,
        algo: HardwareAlgorithm,
    ) -> u64 {
        let p = q.admit(c, m.len()).unwrap();
        q.push_slice(c, eqa, Seq::new(sent), Rank::new(1), m, spare, algo, p)
    }

    #[test]
    fn messages_are_framed_in_order_and_the_queue_is_bounded() {
        let (c, mut eqa, mut q) = setup();
        let max = c.max_payload();
        let p = q.admit(&c, 2 * max + 1).unwrap();
        let id = q.push(
            &c,
            &mut vec![1; 2 * max + 1],
            HardwareAlgorithm::Simple,
            true,
            p,
        );
        assert_eq!(id, 0);
        let p = q.admit(&c, 1).unwrap();
        q.push(&c, &mut vec![2], HardwareAlgorithm::Simple, false, p);
        assert_eq!(q.admit(&c, 1), Err(SendError::QueueFull(2)));
        assert_eq!(
            q.fill(&c, &mut eqa, Seq::new(0), Rank::new(1)),
            Filled::Done
        );
        // Three frames for the first, one for the second.
        assert_eq!(eqa.head(), Seq::new(4));
        let last = eqa.slot(Seq::new(2)).unwrap().repr().flags;
        assert!(last.contains(Flags::LAST));
        assert_eq!(q.len(), 0, "each left the queue once framed");
        assert_eq!(
            q.take_sent(0).map(|v| v.len()),
            Some(2 * max + 1),
            "lent, given back"
        );
        assert_eq!(q.take_sent(0), None, "once");
        assert_eq!(q.take_sent(1), None, "not lent");
        // Stable once the destination has the message's last frame and it was sent.
        q.collect_stable(Seq::new(3), Seq::new(3));
        assert_eq!(q.take_stable(), Some(0));
        assert_eq!(q.take_stable(), None);
    }

    #[test]
    fn publishing_stays_a_few_frames_ahead_of_sending() {
        let (c, mut eqa, mut q) = setup_window(64);
        let len = 40 * c.max_payload();
        let p = q.admit(&c, len).unwrap();
        q.push(&c, &mut vec![0; len], HardwareAlgorithm::Simple, false, p);
        q.fill(&c, &mut eqa, Seq::new(0), Rank::new(1));
        assert_eq!(eqa.head().get(), PUBLISH_AHEAD);
        q.fill(&c, &mut eqa, Seq::new(10), Rank::new(1));
        assert_eq!(eqa.head().get(), 10 + PUBLISH_AHEAD);
    }

    #[test]
    fn a_push_pull_message_waits_for_its_pull_after_its_push_part() {
        let (c, mut eqa, mut q) = setup();
        let len = c.btp1 + c.btp2 + 3 * c.max_payload();
        let p = q.admit(&c, len).unwrap();
        q.push(&c, &mut vec![0; len], HardwareAlgorithm::PushPull, false, p);
        assert_eq!(
            q.fill(&c, &mut eqa, Seq::new(0), Rank::new(1)),
            Filled::AwaitingPull
        );
        let pushed = eqa.head();
        let waits = eqa.slot(pushed - 1).unwrap().repr().flags;
        assert!(waits.contains(Flags::PULL_WAIT | Flags::PUSH));
        assert!(!q.grant_pull(7), "not the message waiting");
        assert!(q.grant_pull(0));
        q.fill(&c, &mut eqa, pushed, Rank::new(1));
        assert!(eqa.head() > pushed, "the pull part follows");
    }

    /// The payload of every frame in `eqa` from `from` to its head, back to back.
    fn published(eqa: &Eqa, from: u64) -> Vec<u8> {
        (from..eqa.head().get())
            .flat_map(|s| eqa.slot(Seq::new(s)).unwrap().payload().to_vec())
            .collect()
    }

    fn bytes(len: usize, salt: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(13).wrapping_add(salt))
            .collect()
    }

    #[test]
    fn a_borrowed_message_that_fits_is_published_from_the_callers_bytes_and_copies_nothing() {
        let (c, mut eqa, mut q) = setup();
        let m = bytes(3 * c.max_payload() - 5, 1);
        let mut spare = vec![0xEE; 40];
        let id = borrow(
            (&c, &mut eqa, &mut q),
            0,
            &m,
            &mut spare,
            HardwareAlgorithm::Simple,
        );
        assert_eq!(
            eqa.head(),
            Seq::new(3),
            "all three frames, before any is sent"
        );
        assert_eq!(published(&eqa, 0), m);
        assert!(eqa
            .slot(Seq::new(2))
            .unwrap()
            .repr()
            .flags
            .contains(Flags::LAST));
        assert_eq!(spare, vec![0xEE; 40], "the spare buffer was not touched");
        assert_eq!(q.len(), 0, "the message left the queue");
        assert_eq!(q.take_sent(id), Some(Vec::new()), "nothing of it was kept");
    }

    #[test]
    fn a_borrowed_message_longer_than_the_room_copies_only_what_did_not_fit() {
        let (c, mut eqa, mut q) = setup();
        let max = c.max_payload();
        // Two slots of the eight hold an earlier message's unacknowledged frames.
        let p = q.admit(&c, 2 * max).unwrap();
        q.push(
            &c,
            &mut bytes(2 * max, 9),
            HardwareAlgorithm::Simple,
            false,
            p,
        );
        q.fill(&c, &mut eqa, Seq::new(0), Rank::new(1));
        assert_eq!(eqa.head(), Seq::new(2));
        let m = bytes(10 * max + 7, 2);
        let mut spare = Vec::with_capacity(64 * 1024);
        let id = borrow(
            (&c, &mut eqa, &mut q),
            2,
            &m,
            &mut spare,
            HardwareAlgorithm::Simple,
        );
        assert_eq!(
            eqa.head(),
            Seq::new(8),
            "the six free slots, from the caller's bytes"
        );
        assert_eq!(published(&eqa, 2), m[..6 * max]);
        assert_eq!(spare.capacity(), 0, "the spare buffer went with the rest");
        assert_eq!(q.take_sent(id), None, "not all framed yet");
        // The destination acknowledges everything so far: the rest follows from the copy.
        eqa.ack(Rank::new(1), Seq::new(8));
        q.fill(&c, &mut eqa, Seq::new(8), Rank::new(1));
        assert_eq!(eqa.head(), Seq::new(13));
        assert_eq!(published(&eqa, 8), m[6 * max..]);
        let back = q.take_sent(id).expect("framed whole");
        assert_eq!(back, m[6 * max..], "the copy held the rest only");
        assert_eq!(back.capacity(), 64 * 1024, "in the spare buffer");
    }

    #[test]
    fn a_borrowed_message_behind_another_is_copied_whole_and_keeps_its_turn() {
        let (c, mut eqa, mut q) = setup_window(64);
        let max = c.max_payload();
        let first = bytes(20 * max, 3);
        let p = q.admit(&c, first.len()).unwrap();
        q.push(&c, &mut first.clone(), HardwareAlgorithm::Simple, false, p);
        q.fill(&c, &mut eqa, Seq::new(0), Rank::new(1));
        assert_eq!(
            eqa.head().get(),
            PUBLISH_AHEAD,
            "the first still has frames queued"
        );
        let m = bytes(2 * max, 4);
        let mut spare = Vec::new();
        let id = borrow(
            (&c, &mut eqa, &mut q),
            0,
            &m,
            &mut spare,
            HardwareAlgorithm::Simple,
        );
        assert_eq!(
            eqa.head().get(),
            PUBLISH_AHEAD,
            "nothing of it jumped the queue"
        );
        // Sending keeps up with publishing.
        for _ in 0..3 {
            let sent = eqa.head();
            q.fill(&c, &mut eqa, sent, Rank::new(1));
        }
        assert_eq!(eqa.head().get(), 22);
        let all: Vec<u8> = first.iter().chain(&m).copied().collect();
        assert_eq!(published(&eqa, 0), all, "in order, each byte once");
        assert_eq!(q.take_sent(id), Some(m), "its copy, given back");
    }

    #[test]
    fn a_borrowed_push_pull_message_is_published_up_to_its_pull_and_copied_after() {
        let (c, mut eqa, mut q) = setup_window(64);
        let m = bytes(c.btp1 + c.btp2 + 3 * c.max_payload(), 5);
        let mut spare = Vec::new();
        let id = borrow(
            (&c, &mut eqa, &mut q),
            0,
            &m,
            &mut spare,
            HardwareAlgorithm::PushPull,
        );
        let pushed = eqa.head();
        assert!(eqa
            .slot(pushed - 1)
            .unwrap()
            .repr()
            .flags
            .contains(Flags::PULL_WAIT | Flags::PUSH));
        assert_eq!(published(&eqa, 0), m[..c.btp1 + c.btp2]);
        assert!(q.grant_pull(id as u32));
        assert_eq!(q.fill(&c, &mut eqa, pushed, Rank::new(1)), Filled::Done);
        assert_eq!(published(&eqa, 0), m, "the pull part from the copy");
    }

    #[test]
    fn the_session_ends_before_sequence_numbers_wrap() {
        let (c, _, mut q) = setup();
        q.skip_sequences(wire::control::LAST_SEQ.get());
        assert_eq!(q.admit(&c, 1), Ok(wire::control::LAST_SEQ.get() + 1));
        assert_eq!(
            q.admit(&c, 2 * c.max_payload()),
            Err(SendError::SessionEnded(SessionEnded::Sequence))
        );
    }
}
