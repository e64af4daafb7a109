//! The send queue and its framing: messages handed to `bcast` wait here (the SDP's send
//! queue) until slots of the retransmission buffer are free, and are cut into frames as slots
//! free up, each published into the buffer shortly before it is broadcast.
//!
//! Push-pull messages stop at the end of their push part until the designated receiver's pull
//! request arrives; a push-pull message that fits one frame is pushed whole in it (no BTP1
//! cut, no pull). A message lent with `Engine::bcast_from` is given back once all its frames
//! are in the buffer: the frames are copies, so the caller's buffer is free again then.
//!
//! **Invariants.** Messages leave the queue in order, once all their frames are published;
//! `unstable` names them with their last frame until every live destination has it, then they
//! move to `stable`. `promised` bounds the sequence numbers the queued messages may take, and
//! never passes `LAST_SEQ + 1` (the session ends instead). At most [`PUBLISH_AHEAD`] frames are
//! published and not sent yet.

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

/// A message in the send queue.
#[derive(Debug)]
pub(crate) struct OutMsg {
    id: u64,
    data: Vec<u8>,
    algo: HardwareAlgorithm,
    off: usize,
    started: bool,
    push_end: usize,
    pull_granted: bool,
    /// The last frame of its push part (its size counts in the paper profile's queue length).
    last_push: Option<Seq>,
    /// Lent by the caller, who takes it back once its frames are all in the buffer
    /// ([`SendQueue::take_sent`]).
    lent: bool,
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
        self.promised = promised;
        let id = self.next_id;
        self.next_id += 1;
        let push_end = match algo {
            // A message that fits one frame is pushed whole in that frame: cutting it at BTP1
            // would cost a second frame (and above BTP1 + BTP2 a pull round trip) for bytes
            // the first frame had room for.
            HardwareAlgorithm::PushPull if data.len() <= cfg.max_payload() => data.len(),
            HardwareAlgorithm::PushPull => data.len().min(cfg.btp1 + cfg.btp2),
            HardwareAlgorithm::Simple => data.len(),
        };
        self.queue.push_back(OutMsg {
            id,
            data: std::mem::take(data),
            algo,
            off: 0,
            started: false,
            push_end,
            pull_granted: false,
            last_push: None,
            lent,
        });
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
        let max = cfg.max_payload();
        loop {
            let held_from = eqa.tail().min(sent_upto);
            let room = eqa.buf().capacity() - (eqa.head() - held_from) as usize;
            let Some(m) = self.queue.front_mut() else {
                break;
            };
            if m.started && m.off >= m.data.len() {
                let m = self.queue.pop_front().expect("front exists");
                self.unstable.push_back((m.id, eqa.head() - 1));
                if m.lent {
                    if self.sent.len() >= SENT_KEPT {
                        self.sent.pop_front();
                    }
                    self.sent.push_back((m.id, m.data));
                }
                continue;
            }
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
            if eqa.head() - sent_upto >= PUBLISH_AHEAD {
                if let Some(hint) = cfg.prefetch {
                    // The next frames' bytes, for the call that publishes them.
                    let ahead = m
                        .data
                        .get(m.off..)
                        .map_or(&[][..], |d| &d[..d.len().min(4 * max)]);
                    hint(ahead.as_ptr(), ahead.len());
                }
                break;
            }
            let len = m.data.len();
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
                hint(m.data[from..].as_ptr(), (len - from).min(max));
            }
            let seq = match eqa.publish(repr, &m.data[m.off..end]) {
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
        let mut c = EngineConfig::new(1, Rank::new(0), 2);
        c.window = 8;
        c.send_queue = 2;
        let mut eqa = Eqa::new(c.window, c.slot_payload(), std::iter::empty(), 4, c.rto);
        eqa.add_dest(Rank::new(1), 4, c.rto);
        let q = SendQueue::new(&c);
        (c, eqa, q)
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
        let (mut c, _, _) = setup();
        c.window = 64;
        let mut eqa = Eqa::new(c.window, c.slot_payload(), std::iter::empty(), 4, c.rto);
        eqa.add_dest(Rank::new(1), 4, c.rto);
        let mut q = SendQueue::new(&c);
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
