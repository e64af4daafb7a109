//! The root side: the send queue, the shared buffer and the repair scheduler.
//!
//! A message handed to `bcast` waits in the send queue (the SDP's send queue) until slots of
//! the retransmission buffer are free; it is cut into frames as slots free up, each published
//! into [`Eqa`] (one copy for every destination) shortly before it is broadcast, once.
//! Push-pull messages stop at the end of their push part until the designated receiver's pull
//! request arrives; a push-pull message that fits one frame is pushed whole in it (no BTP1
//! cut, no pull).
//!
//! Feedback moves the per-destination cursors: an ACK or the cumulative part of a NACK
//! releases references; the bitmap of a NACK queues repairs for that destination only. When
//! frames go out, repairs come before fresh data, and a frame that several destinations asked
//! for is re-broadcast once instead of being unicast to each.
//!
//! Cost with many destinations: nothing that happens per acknowledgement or per timeout
//! visits every destination. Retransmission timers live in the engine's table (the earliest is
//! found at once, and a timeout visits only the timers that fired), and the repair scheduler
//! visits only the destinations that asked for something. A fresh frame visits each
//! destination once (its timer and fail-over counters), as the switch delivers it to each. A
//! member that never broadcasts never allocates its destination structures: they are made at
//! its first broadcast.
//!
//! A message lent with [`super::Engine::bcast_from`] is given back once all its frames are in
//! the buffer ([`super::Engine::take_sent`]): the frames are copies, so the caller's buffer is
//! free again then, and its capacity serves the caller's next message without an allocation.

use std::collections::VecDeque;
use std::time::Instant;

use super::timer::{Timer, TimerTable};
use super::{Algorithm, Config, Dest, SendError, SessionEnded, Stats, Transmit};
use crate::eqa::Eqa;
use crate::wire::{
    self,
    control::{behind, nack_offsets},
    Control, Flags, Kind, Repr, NACK_BITS,
};
use crate::{Rank, Seq};

/// Frames published into the shared buffer ahead of the one sent next, at most. A frame is
/// copied twice on its way out: from its message into its slot of the buffer (which keeps it
/// for repairs), and from the slot into the link's frame. Published just before it is sent,
/// the slot is still in the cache for the second copy; published as soon as the buffer had
/// room (up to a window ahead, megabytes in bulk), it had left the cache, and on the bulk
/// sender those copies took ten times the CPU per frame of the raw blaster's copy.
pub(crate) const PUBLISH_AHEAD: u64 = 16;

/// What a receiver tells the root about its stream (the root-bound control messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Feedback {
    /// Cumulative acknowledgement; with `seen`, the answer to a probe.
    Ack { next: u32, seen: Option<u32> },
    /// Missing frames from `base` (its bitmap: `missing` and `more`, see [`Control::Nack`]),
    /// and the cumulative acknowledgement.
    ///
    /// [`Control::Nack`]: crate::wire::Control::Nack
    Nack {
        base: u32,
        missing: u16,
        next: u32,
        more: Vec<u16>,
    },
    /// The designated receiver's pull request.
    Pull { msg_id: u32, next: u32 },
}

/// A message in the send queue.
#[derive(Debug)]
pub(crate) struct OutMsg {
    id: u64,
    data: Vec<u8>,
    algo: Algorithm,
    off: usize,
    started: bool,
    push_end: usize,
    pull_granted: bool,
    last_push: Option<Seq>,
    /// Lent by the caller, who takes it back once its frames are all in the buffer
    /// ([`Sender::take_sent`]).
    lent: bool,
}

/// Lent messages whose frames are all in the buffer, kept for their callers to take back: the
/// newest ones, at most this many (a caller that gave up on a call does not take its message
/// back, and the next call's is the newest).
const SENT_KEPT: usize = 2;

/// The root side of one member.
#[derive(Debug)]
pub struct Sender {
    eqa: Eqa,
    /// Sequence numbers the messages queued so far may take, at most (never more than
    /// `LAST_SEQ + 1`: the session ends instead).
    promised: u64,
    queue: VecDeque<OutMsg>,
    queue_cap: usize,
    next_id: u64,
    sent_upto: Seq,
    unstable: VecDeque<(u64, Seq)>,
    stable: VecDeque<u64>,
    pull_backoff: u32,
    rr: usize,
    /// Per rank: its retransmission timer fired and the next repair to it is a probe (asks
    /// for an immediate acknowledgement).
    probing: Vec<bool>,
    pull_poll: bool,
    /// Ranks to send a [`Control::AckPoll`]: their retransmission timer fired for the first
    /// time since they last made progress.
    ack_polls: Vec<Rank>,
    p2p_copies: VecDeque<(Rank, Seq)>,
    /// Whether the destination structures exist (made at the first broadcast).
    dests_made: bool,
    /// Lent messages whose frames are all in the buffer, by id, for their callers to take
    /// back (at most [`SENT_KEPT`]).
    sent: VecDeque<(u64, Vec<u8>)>,
    /// A list of ranks for the timers that fired and the destinations a repair serves, kept
    /// so that neither allocates.
    ranks: Vec<Rank>,
    /// When frames were last re-broadcast as repairs, by sequence number modulo its length
    /// (the buffer's slots; made at the first re-broadcast): see [`Sender::recently_rebroadcast`].
    rebroadcast_at: Vec<Option<(Seq, Instant)>>,
    /// With a tree: the stream's last frame is to be re-broadcast (see `Sender::on_timeout`),
    /// and when it last was.
    tail_due: bool,
    tail_at: Option<Instant>,
}

/// How long after a frame's re-broadcast the root takes no NACK for it, as a fraction of the receivers' retry interval
/// (`Config::nack_retry`): see [`Sender::recently_rebroadcast`].
const REBROADCAST_HOLD_DIV: u32 = 2;

/// Fresh frames over which the fail-over check judges a destination.
const FAILOVER_WINDOW: u32 = 32;

impl Sender {
    /// Test support: counts `frames` sequence numbers as promised (see `Engine::skip_sequences`).
    pub(crate) fn skip_sequences(&mut self, frames: u64) {
        self.promised = self.promised.saturating_add(frames);
    }

    pub(crate) fn new(cfg: &Config) -> Sender {
        Sender {
            promised: 0,
            eqa: Eqa::new(
                cfg.window,
                cfg.slot_payload(),
                std::iter::empty(),
                cfg.repair_queue,
                cfg.rto,
            ),
            queue: VecDeque::with_capacity(cfg.send_queue),
            queue_cap: cfg.send_queue,
            next_id: 0,
            sent_upto: Seq::new(0),
            unstable: VecDeque::new(),
            stable: VecDeque::new(),
            pull_backoff: 0,
            rr: 0,
            probing: vec![false; usize::from(cfg.size)],
            pull_poll: false,
            ack_polls: Vec::new(),
            p2p_copies: VecDeque::new(),
            dests_made: false,
            sent: VecDeque::new(),
            ranks: Vec::new(),
            rebroadcast_at: Vec::new(),
            tail_due: false,
            tail_at: None,
        }
    }

    /// Makes one `Lms` per other member (the evicted ones evicted at once), once: a member
    /// becomes a root, and pays for its destinations, at its first broadcast. Their cursors
    /// start at the head, which has not moved before.
    pub(crate) fn make_dests(&mut self, cfg: &Config, live: &[bool], timers: &mut TimerTable) {
        if self.dests_made {
            return;
        }
        self.dests_made = true;
        timers.add_retransmit();
        for r in Rank::all(cfg.size).filter(|&r| r != cfg.rank) {
            self.eqa.add_dest(r, cfg.repair_queue, cfg.rto);
            if !live.get(r.index()).copied().unwrap_or(true) {
                self.eqa.evict(r);
            }
        }
    }

    /// The shared buffer with its cursors.
    pub fn eqa(&self) -> &Eqa {
        &self.eqa
    }

    /// Messages waiting in the send queue (including the one being sent).
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Heap bytes owned by the send side, excluding the per-destination structures.
    pub fn heap_bytes_without_dests(&self) -> usize {
        self.eqa.buf().heap_bytes() + self.queue.capacity() * std::mem::size_of::<OutMsg>()
    }

    /// Queues the message in `data`, taking it (leaving `data` empty) only once it is
    /// accepted: on an error `data` keeps it. A `lent` message is kept for its caller when its
    /// frames are all in the buffer ([`Sender::take_sent`]).
    pub(crate) fn enqueue(
        &mut self,
        cfg: &Config,
        data: &mut Vec<u8>,
        algo: Algorithm,
        live: &[bool],
        lent: bool,
        timers: &mut TimerTable,
    ) -> Result<u64, SendError> {
        if self.queue.len() >= self.queue_cap {
            return Err(SendError::QueueFull(self.queue_cap));
        }
        // The frames it may take: one per payload, and up to two more where push-pull cuts
        // it at its push and pull bounds. The session ends before the sequence numbers would
        // wrap (see `SessionEnded`).
        let max = cfg.max_payload().max(1);
        let frames = match data.len() {
            n if n <= max => 1,
            n => n.div_ceil(max) as u64 + 2,
        };
        let promised = self.promised + frames;
        if promised > (wire::control::LAST_SEQ + 1).get() {
            return Err(SendError::SessionEnded(SessionEnded::Sequence));
        }
        self.make_dests(cfg, live, timers);
        if self.eqa.hms().live() == 0 {
            return Err(SendError::NoReceivers);
        }
        self.promised = promised;
        let id = self.next_id;
        self.next_id += 1;
        let push_end = match algo {
            // A message that fits one frame is pushed whole in that frame: cutting it at BTP1
            // would cost a second frame (and above BTP1 + BTP2 a pull round trip) for bytes
            // the first frame had room for.
            Algorithm::PushPull if data.len() <= cfg.max_payload() => data.len(),
            Algorithm::PushPull => data.len().min(cfg.btp1 + cfg.btp2),
            // The engine broadcasts in hardware only: a tree's message goes out as `Simple`.
            Algorithm::Simple | Algorithm::Tree => data.len(),
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
        Ok(id)
    }

    /// The buffer of lent message `id`, once all its frames are in the retransmission buffer
    /// (`None` before, or if it was not lent, or was taken already, or was one of more than
    /// [`SENT_KEPT`] lent messages nobody took back).
    pub(crate) fn take_sent(&mut self, id: u64) -> Option<Vec<u8>> {
        let i = self.sent.iter().position(|(m, _)| *m == id)?;
        self.sent.remove(i).map(|(_, data)| data)
    }

    fn room(&self) -> usize {
        let held_from = self.eqa.tail().min(self.sent_upto);
        self.eqa.buf().capacity() - (self.eqa.head() - held_from) as usize
    }

    fn designated(&self, cfg: &Config, live: &[bool]) -> Rank {
        (1..cfg.size)
            .map(|i| cfg.rank.ring_add(i, cfg.size))
            .find(|&r| live[r.index()])
            .unwrap_or(cfg.rank)
    }

    /// Cuts queued messages into frames while the buffer has room.
    pub(crate) fn fill(
        &mut self,
        cfg: &Config,
        now: Instant,
        live: &[bool],
        timers: &mut TimerTable,
    ) {
        let max = cfg.max_payload();
        let designated = self.designated(cfg, live);
        loop {
            let room = self.room();
            let Some(m) = self.queue.front_mut() else {
                break;
            };
            if m.started && m.off >= m.data.len() {
                let m = self.queue.pop_front().expect("front exists");
                self.unstable.push_back((m.id, self.eqa.head() - 1));
                if m.lent {
                    if self.sent.len() >= SENT_KEPT {
                        self.sent.pop_front();
                    }
                    self.sent.push_back((m.id, m.data));
                }
                continue;
            }
            if m.algo == Algorithm::PushPull && m.started && m.off >= m.push_end && !m.pull_granted
            {
                if !timers.is_armed(Timer::Pull) {
                    timers.set(Timer::Pull, now + cfg.rto);
                    self.pull_backoff = 0;
                }
                break;
            }
            if room == 0 {
                break;
            }
            if self.eqa.head() - self.sent_upto >= PUBLISH_AHEAD {
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
            let end = if m.algo == Algorithm::PushPull && m.off < cfg.btp1 && len > max {
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
            if m.algo == Algorithm::PushPull && m.off < m.push_end {
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
            let seq = match self.eqa.publish(repr, &m.data[m.off..end]) {
                Ok(s) => s,
                Err(_) => break,
            };
            if flags.contains(Flags::PULL_WAIT) {
                m.last_push = Some(seq);
            }
            m.off = end;
            m.started = true;
        }
    }

    /// NACK combining: whether frame `seq` was re-broadcast less than half a retry interval
    /// (`Config::nack_retry`) ago. A request for it then crossed the re-broadcast on its way
    /// (asked before the re-broadcast reached its sender, which takes it), and is not
    /// answered: a receiver that lost the re-broadcast too asks again after its retry
    /// interval, past this hold. Without it, every batch of NACKs for a frame lost at many
    /// receivers re-broadcast it again: at 4096 members with burst loss, 10 re-broadcasts per
    /// data frame, each a frame to every member.
    pub(crate) fn recently_rebroadcast(&self, cfg: &Config, seq: Seq, now: Instant) -> bool {
        let Some(&Some((s, at))) = self.rebroadcast_slot(seq).map(|i| &self.rebroadcast_at[i])
        else {
            return false;
        };
        s == seq && now.saturating_duration_since(at) < cfg.nack_retry / REBROADCAST_HOLD_DIV
    }

    /// Counts a re-broadcast of frame `seq` and notes when it was made (for
    /// [`Sender::recently_rebroadcast`]).
    fn rebroadcast_made(&mut self, cfg: &Config, seq: Seq, now: Instant, stats: &mut Stats) {
        stats.rebroadcasts += 1;
        if self.rebroadcast_at.is_empty() {
            self.rebroadcast_at = vec![None; cfg.window.max(1)];
        }
        if let Some(i) = self.rebroadcast_slot(seq) {
            self.rebroadcast_at[i] = Some((seq, now));
        }
    }

    fn rebroadcast_slot(&self, seq: Seq) -> Option<usize> {
        let n = self.rebroadcast_at.len() as u64;
        (n > 0).then(|| (seq.get() % n) as usize)
    }

    pub(crate) fn on_feedback(
        &mut self,
        cfg: &Config,
        now: Instant,
        src: Rank,
        fb: &Feedback,
        live: &[bool],
        timers: &mut TimerTable,
    ) {
        let head = self.eqa.head();
        let next = match *fb {
            Feedback::Ack { next, .. }
            | Feedback::Nack { next, .. }
            | Feedback::Pull { next, .. } => next,
        };
        // A number before the stream's start acknowledges nothing.
        let cumulative = behind(head, next).unwrap_or(Seq::new(0));
        let progressed = self.eqa.ack(src, cumulative.min(self.sent_upto));
        let sent_upto = self.sent_upto;
        let mut timer = None;
        if let Some(lms) = self.eqa.lms_mut(src) {
            lms.last_heard = Some(now);
            lms.stats.max_lag = lms.stats.max_lag.max(head - lms.cursor());
            match fb {
                Feedback::Nack { .. } => {
                    lms.stats.nacks += 1;
                    lms.unicast_repairs = false;
                }
                Feedback::Pull { .. } => lms.stats.pulls += 1,
                Feedback::Ack { .. } => lms.stats.acks += 1,
            }
            if progressed {
                lms.backoffs = 0;
                lms.rto = cfg.rto;
                lms.last_progress = Some(now);
                timer = Some((lms.cursor() < sent_upto).then_some(now + cfg.rto));
            }
        }
        if let Some(t) = timer {
            timers.set_or_stop(Timer::Retransmit(src), t);
        }
        match *fb {
            Feedback::Nack {
                base,
                missing,
                ref more,
                ..
            } => {
                let Some(base) = behind(head, base) else {
                    self.fill(cfg, now, live, timers);
                    return;
                };
                for off in nack_offsets(missing, more) {
                    let s = base + u64::from(off);
                    if s < self.sent_upto && !self.recently_rebroadcast(cfg, s, now) {
                        self.eqa.request_repair(src, s);
                    }
                }
            }
            Feedback::Ack {
                seen: Some(seen), ..
            } => {
                // The answer to a probe: everything after what it has seen, up to 16 frames,
                // was sent long enough ago to be lost: go back over it.
                let seen = behind(head, seen)
                    .unwrap_or(Seq::new(0))
                    .min(self.sent_upto);
                let cursor = self.eqa.lms(src).map_or(seen, |l| l.cursor());
                let end = self.sent_upto.min(cursor + u64::from(NACK_BITS));
                for s in seen.max(cursor).up_to(end) {
                    self.eqa.request_repair(src, s);
                }
            }
            Feedback::Pull { msg_id, .. } => {
                if let Some(m) = self.queue.front_mut() {
                    if m.id as u32 == msg_id && m.algo == Algorithm::PushPull {
                        m.pull_granted = true;
                        timers.stop(Timer::Pull);
                    }
                }
            }
            _ => {}
        }
        self.fill(cfg, now, live, timers);
        self.collect_stable();
    }

    /// A report up the acknowledgement tree from `reporter`, a child of this root: every
    /// member of `covered` (its subtree, the reporter included) has everything before `next`,
    /// and `laggard` is at `next`. Each cursor moves as an acknowledgement of its own would
    /// move it. The subtree is alive and waits for the laggard: the other members' timers
    /// start again, so that only the laggard is probed if the subtree stays stuck.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_tree_ack(
        &mut self,
        cfg: &Config,
        now: Instant,
        reporter: Rank,
        covered: &[Rank],
        next: u32,
        laggard: Rank,
        live: &[bool],
        timers: &mut TimerTable,
    ) {
        let head = self.eqa.head();
        let sent_upto = self.sent_upto;
        if let Some(c) = behind(head, next) {
            let c = c.min(sent_upto);
            // A report naming as laggard a member this root knows to have everything sent is
            // stale (a newer report from below was lost on the way, and the subtree, done, no
            // longer reports): it restarts no timer, so that the subtree's timers fire, the
            // root's repairs of frames they have make them report again, and the stale
            // position above is replaced.
            let stale = c < sent_upto
                && self
                    .eqa
                    .lms(laggard)
                    .is_some_and(|l| l.cursor() >= sent_upto);
            for &r in covered {
                let progressed = self.eqa.ack(r, c);
                let Some(lms) = self.eqa.lms_mut(r) else {
                    continue;
                };
                if progressed {
                    lms.backoffs = 0;
                    lms.rto = cfg.rto;
                    lms.last_progress = Some(now);
                    let timer = (lms.cursor() < sent_upto).then_some(now + cfg.rto);
                    timers.set_or_stop(Timer::Retransmit(r), timer);
                } else if r != laggard && !stale && timers.is_armed(Timer::Retransmit(r)) {
                    timers.set(Timer::Retransmit(r), now + lms.rto);
                }
            }
        }
        if let Some(lms) = self.eqa.lms_mut(reporter) {
            lms.last_heard = Some(now);
            lms.stats.acks += 1;
        }
        self.fill(cfg, now, live, timers);
        self.collect_stable();
    }

    fn collect_stable(&mut self) {
        while let Some(&(id, last)) = self.unstable.front() {
            if last >= self.eqa.tail() || last >= self.sent_upto {
                break;
            }
            self.unstable.pop_front();
            self.stable.push_back(id);
        }
    }

    pub(crate) fn take_stable(&mut self) -> Option<u64> {
        self.collect_stable();
        self.stable.pop_front()
    }

    pub(crate) fn on_timeout(
        &mut self,
        cfg: &Config,
        now: Instant,
        live: &[bool],
        timers: &mut TimerTable,
    ) {
        let sent_upto = self.sent_upto;
        // The timers that fired, in rank order.
        let fired = timers.fired_retransmits(now);
        for &rank in &fired {
            // Stopped: set again below, or left stopped.
            timers.stop(Timer::Retransmit(rank));
            let Some(lms) = self.eqa.lms_mut(rank) else {
                continue;
            };
            if !lms.is_live() || lms.cursor() >= sent_upto {
                continue;
            }
            lms.stats.timeouts += 1;
            // The first timeout since the member last made progress is the gentle one, with
            // or without a tree.
            let first = lms.backoffs == 0;
            lms.backoffs += 1;
            if first && cfg.ack_tree == 0 {
                // Most often its stream merely went idle with frames not yet acknowledged
                // (receivers answer every `ack_every` frames and when asked, never on a timer
                // of their own, so that a sleeping receiver arms no sub-millisecond timer per
                // message). Ask, without a retransmission, at the same interval; the answer
                // says how far it has seen and the root goes back over what it lacks. A poll
                // or answer that is lost leaves the next timeout to the probes below.
                lms.stats.polls += 1;
                timers.set(Timer::Retransmit(rank), now + lms.rto);
                room_for_every_rank(&mut self.ack_polls, cfg);
                self.ack_polls.push(rank);
                continue;
            }
            // With an acknowledgement tree a whole subtree waits for one member's frame (the
            // last of a stream, lost there, which nothing else reveals), and every cursor of
            // the subtree times out at once: the first timeout only repairs the frame at the
            // cursor, re-broadcast once when many wait for it, and the member's report comes
            // up the tree. Probes (an answer straight from each) start at the second.
            lms.rto = (lms.rto * 2).min(cfg.rto_max);
            let (next, cursor) = (now + lms.rto, lms.cursor());
            if !first {
                lms.stats.probes += 1;
                lms.unicast_repairs = true;
                if let Some(p) = self.probing.get_mut(rank.index()) {
                    *p = true;
                }
            }
            timers.set(Timer::Retransmit(rank), next);
            // Go back to its cursor (the probe). A timer acts once, when it fires: however
            // often a driver calls this, the protocol is the same.
            self.eqa.request_repair(rank, cursor);
        }
        // With a tree, at the end of the stream (everything queued sent): members that lost
        // its last frames cannot tell, and a subtree's report names one laggard only, so the
        // root found them one after another, a timeout each (at 2048 members with burst loss,
        // about 100 of them over 360 ms). The last frame, re-broadcast, shows every one of
        // them its gap at once; they ask for it as for any other. At most once per `rto`.
        let tail = cfg.ack_tree > 0
            && self.queue.is_empty()
            && sent_upto > Seq::new(0)
            && sent_upto == self.eqa.head()
            && self
                .tail_at
                .is_none_or(|t| now.saturating_duration_since(t) >= cfg.rto)
            && fired.iter().any(|&r| {
                self.eqa
                    .lms(r)
                    .is_some_and(|l| l.is_live() && l.cursor() < sent_upto)
            });
        if tail {
            self.tail_due = true;
            self.tail_at = Some(now);
        }
        timers.give_back(fired);
        if timers.is_expired(Timer::Pull, now) {
            self.pull_backoff += 1;
            let d = (cfg.rto * (1 << self.pull_backoff.min(16))).min(cfg.rto_max);
            timers.set(Timer::Pull, now + d);
            self.pull_poll = true;
        }
        self.fill(cfg, now, live, timers);
    }

    /// Destinations served point-to-point because broadcast does not reach them.
    pub fn failed_over(&self) -> Vec<Rank> {
        self.eqa
            .dests()
            .iter()
            .filter(|l| l.is_live() && l.p2p)
            .map(|l| l.rank())
            .collect()
    }

    pub(crate) fn has_transmit(&self) -> bool {
        !self.p2p_copies.is_empty()
            || self.pull_poll
            || !self.ack_polls.is_empty()
            || self.sent_upto < self.eqa.head()
            || self.eqa.has_repairs()
    }

    pub(crate) fn is_idle(&self) -> bool {
        self.queue.is_empty()
            && self.sent_upto == self.eqa.head()
            && self.eqa.tail() == self.eqa.head()
    }

    pub(crate) fn evict(
        &mut self,
        cfg: &Config,
        now: Instant,
        rank: Rank,
        live: &[bool],
        timers: &mut TimerTable,
    ) {
        timers.stop(Timer::Retransmit(rank));
        self.eqa.evict(rank);
        if timers.is_armed(Timer::Pull) {
            // The designated receiver may have been the one evicted: ask the new one now.
            timers.set(Timer::Pull, now);
        }
        self.fill(cfg, now, live, timers);
    }

    /// The next acknowledgement poll due: one to the group when the timers of several members
    /// fired together (a group that went idle), unless one of them is served point-to-point
    /// (the broadcast does not reach it); otherwise one per member.
    pub(crate) fn take_ack_poll(&mut self) -> Option<Dest> {
        let broadcast_reaches = |r: &Rank| self.eqa.lms(*r).is_some_and(|l| !l.p2p);
        if self.ack_polls.len() > 1 && self.ack_polls.iter().all(broadcast_reaches) {
            self.ack_polls.clear();
            return Some(Dest::All);
        }
        self.ack_polls.pop().map(Dest::Rank)
    }

    /// The poll of the designated receiver for a pull request that may have been lost, when
    /// one is due: (its rank, the message).
    pub(crate) fn take_pull_poll(
        &mut self,
        cfg: &Config,
        live: &[bool],
    ) -> Option<(Rank, Control)> {
        if !std::mem::take(&mut self.pull_poll) {
            return None;
        }
        let m = self.queue.front()?;
        let designated = self.designated(cfg, live);
        let poll = Control::PullPoll {
            msg_id: m.id as u32,
            designated,
        };
        Some((designated, poll))
    }

    pub(crate) fn poll_transmit(
        &mut self,
        cfg: &Config,
        now: Instant,
        buf: &mut [u8],
        live: &[bool],
        stats: &mut Stats,
        timers: &mut TimerTable,
    ) -> Option<Transmit> {
        if let Some(t) = self.poll_repair(cfg, now, buf, stats) {
            return Some(t);
        }
        while let Some((rank, seq)) = self.p2p_copies.pop_front() {
            let Some(lms) = self.eqa.lms(rank) else {
                continue;
            };
            if !lms.is_live() || seq < lms.cursor() {
                continue;
            }
            let Some(slot) = self.eqa.slot(seq) else {
                continue;
            };
            let mut repr = *slot.repr();
            repr.dst = rank;
            repr.flags.remove(Flags::BROADCAST);
            repr.flags |= Flags::P2P;
            let len = repr.emit(slot.payload(), buf).ok()?;
            return Some(Transmit {
                dst: Dest::Rank(rank),
                len,
            });
        }
        if self.sent_upto < self.eqa.head() {
            let seq = self.sent_upto;
            let slot = self.eqa.slot(seq)?;
            let len = slot.repr().emit(slot.payload(), buf).ok()?;
            self.sent_upto += 1;
            stats.data_frames += 1;
            let at = now + cfg.rto;
            for lms in self.eqa.dests_mut() {
                if !lms.is_live() {
                    continue;
                }
                let timer = Timer::Retransmit(lms.rank());
                if !timers.is_armed(timer) {
                    timers.set(timer, at);
                }
                if lms.p2p {
                    self.p2p_copies.push_back((lms.rank(), seq));
                    continue;
                }
                lms.recent_sent = lms.recent_sent.saturating_add(1);
                // Frames of the window it has not acknowledged yet may still be repaired:
                // judge only those settled, and only once there are enough of them.
                let outstanding = (self.sent_upto - lms.cursor()).min(u64::from(lms.recent_sent));
                let settled = lms.recent_sent - outstanding as u32;
                if lms.recent_sent >= FAILOVER_WINDOW && settled >= FAILOVER_WINDOW / 2 {
                    // Fail-over (LA-MPI 4.4): nearly every broadcast frame had to be repaired,
                    // so broadcast does not reach it; serve it point-to-point from now on.
                    // Two windows in a row, so that a burst of loss at a busy receiver is
                    // not mistaken for a broken broadcast path.
                    if u64::from(lms.recent_repaired) * 10 >= u64::from(settled) * 9 {
                        lms.strikes = lms.strikes.saturating_add(1);
                    } else {
                        lms.strikes = 0;
                    }
                    if lms.strikes >= 2 {
                        lms.p2p = true;
                        lms.stats.failovers += 1;
                        stats.failovers += 1;
                        tracing::warn!(
                            rank = lms.rank().get(),
                            "broadcast does not reach this member: serving it point-to-point"
                        );
                    }
                    lms.recent_sent = 0;
                    lms.recent_repaired = 0;
                }
            }
            if self.eqa.hms().live() == 0 || self.sent_upto == self.eqa.head() {
                // The next frames are published as the last published one leaves (see
                // `PUBLISH_AHEAD`).
                self.fill(cfg, now, live, timers);
            }
            return Some(Transmit {
                dst: Dest::All,
                len,
            });
        }
        None
    }

    fn poll_repair(
        &mut self,
        cfg: &Config,
        now: Instant,
        buf: &mut [u8],
        stats: &mut Stats,
    ) -> Option<Transmit> {
        if std::mem::take(&mut self.tail_due) {
            let seq = self.sent_upto - 1;
            if let Some(slot) = self.eqa.slot(seq) {
                let mut repr = *slot.repr();
                repr.kind = Some(Kind::Repair);
                repr.dst = wire::ALL;
                repr.flags |= Flags::BROADCAST;
                let len = repr.emit(slot.payload(), buf).ok()?;
                self.rebroadcast_made(cfg, seq, now, stats);
                stats.repair_frames += 1;
                return Some(Transmit {
                    dst: Dest::All,
                    len,
                });
            }
        }
        let n = self.eqa.dests().len();
        // Round robin over the destinations with queued repairs only.
        while let Some(i) = self.eqa.next_with_repairs(self.rr) {
            let rank = self.eqa.dests()[i].rank();
            let Some(seq) = self.eqa.pop_repair(rank) else {
                continue;
            };
            self.rr = (i + 1) % n;
            let probe = self
                .probing
                .get_mut(rank.index())
                .is_some_and(std::mem::take);
            let others = self.eqa.slot(seq).map_or(0, |s| usize::from(s.want()));
            let unicast = self
                .eqa
                .lms(rank)
                .is_some_and(|l| l.unicast_repairs || l.p2p);
            // A probe asks its destination alone for an acknowledgement: re-broadcast, it asked
            // every member, and each answered the root directly (at 4096 members with burst
            // loss, a million answers: 63 control frames into the roots per data frame).
            let rebroadcast = !unicast && !probe && others + 1 >= cfg.rebroadcast_min;
            let slot = self.eqa.slot(seq)?;
            let mut repr = *slot.repr();
            repr.kind = Some(Kind::Repair);
            if probe {
                repr.flags |= Flags::ACK_REQ;
            }
            let dst = if rebroadcast {
                repr.dst = wire::ALL;
                repr.flags |= Flags::BROADCAST;
                Dest::All
            } else {
                repr.dst = rank;
                repr.flags.remove(Flags::BROADCAST);
                Dest::Rank(rank)
            };
            let len = repr.emit(slot.payload(), buf).ok()?;
            let bytes = slot.payload().len() as u64;
            let mut served = std::mem::take(&mut self.ranks);
            served.clear();
            room_for_every_rank(&mut served, cfg);
            served.push(rank);
            if rebroadcast {
                self.eqa.withdraw_repair(seq, &mut served);
                let mut k = 1;
                while let Some(&r) = served.get(k) {
                    if self.eqa.lms(r).is_some_and(|l| l.unicast_repairs || l.p2p) {
                        // The re-broadcast may not reach it: it keeps its own request.
                        self.eqa.request_repair(r, seq);
                        served.swap_remove(k);
                    } else {
                        k += 1;
                    }
                }
                self.rebroadcast_made(cfg, seq, now, stats);
            }
            for &r in &served {
                if let Some(l) = self.eqa.lms_mut(r) {
                    l.recent_repaired = l.recent_repaired.saturating_add(1);
                    l.stats.repairs += 1;
                    l.stats.repaired_bytes += bytes;
                    if rebroadcast {
                        l.stats.rebroadcasts += 1;
                    }
                }
            }
            self.ranks = served;
            stats.repair_frames += 1;
            return Some(Transmit { dst, len });
        }
        None
    }
}

/// Makes room in `v` for one entry per member of the group at its first use, so that a list
/// of ranks (timers fired, members to poll) never grows, and allocates, in steady state, when
/// more members than ever before are in it at once.
pub(super) fn room_for_every_rank(v: &mut Vec<Rank>, cfg: &Config) {
    let n = usize::from(cfg.size);
    if v.capacity() < n {
        v.reserve_exact(n - v.len());
    }
}
