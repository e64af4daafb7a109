//! The root side: the shared buffer with its cursors, and what feeds and serves it.
//!
//! A [`Sender`] composes the concerns of a root, each a type that owns its state:
//! - [`queue::SendQueue`]: messages handed to `bcast`, cut into frames and published into the
//!   shared buffer ([`Eqa`], one copy for every destination) shortly before they are broadcast;
//! - [`repair::Repairs`]: which repair goes out next, to whom, and whether it is re-broadcast;
//! - [`failover::Failover`]: the copies owed to destinations that broadcast does not reach;
//! - [`polls::Polls`]: acknowledgement polls of idle destinations, and the pull poll.
//!
//! The sender itself handles what the destinations tell it (feedback moves their cursors and
//! releases references; a NACK's bitmap queues repairs for that destination only), their
//! retransmission timers (in the engine's table, [`super::timer`]), and the order frames go out
//! in: polls, repairs, copies, then fresh data.
//!
//! Cost with many destinations: nothing that happens per acknowledgement or per timeout
//! visits every destination. A timeout visits only the timers that fired, and the repair
//! scheduler only the destinations that asked for something. A fresh frame visits each
//! destination once (its timer and fail-over counters), as the switch delivers it to each. A
//! member that never broadcasts never allocates its destination structures: they are made at
//! its first broadcast.
//!
//! **Invariants.** `tail <= sent_upto <= head` of the buffer: frames before `sent_upto` were
//! broadcast once; a live destination whose cursor is before `sent_upto` has its
//! retransmission timer armed.

use std::time::Instant;

use crate::eqa::Eqa;
use crate::wire::control::behind;
use crate::wire::Control;
use crate::{Rank, Seq};

use super::timer::{Timer, TimerTable};
use super::{Dest, EngineConfig, EngineStats, HardwareAlgorithm, SendError};
use crate::machine::Transmit;

mod failover;
mod polls;
mod queue;
mod repair;
mod retransmit;

use failover::Failover;
pub(crate) use failover::Route;
use polls::Polls;
#[cfg(test)]
pub(super) use queue::PUBLISH_AHEAD;
use queue::{Filled, SendQueue};
pub(crate) use queue::{Handed, OutMsg};
use repair::Repairs;
pub(crate) use retransmit::Retransmit;

/// What a receiver tells the root about its stream (the root-bound control messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Feedback {
    /// Cumulative acknowledgement; with `seen`, the answer to a probe.
    Ack { next: u32, seen: Option<u32> },
    /// Missing frames from `base` (its bitmap: `missing` and `more`, see [`Control::Nack`]),
    /// and the cumulative acknowledgement.
    Nack {
        base: u32,
        missing: u16,
        next: u32,
        more: Vec<u16>,
    },
    /// The designated receiver's pull request.
    Pull { msg_id: u32, next: u32 },
}

/// Makes room in `v` for one entry per member of the group at its first use, so that a list
/// of ranks (members to poll, destinations a repair serves) never grows, and allocates, in
/// steady state, when more members than ever before are in it at once.
fn room_for_every_rank(v: &mut Vec<Rank>, cfg: &EngineConfig) {
    let n = usize::from(cfg.size);
    if v.capacity() < n {
        v.reserve_exact(n - v.len());
    }
}

/// The root side of one member.
#[derive(Debug)]
pub struct Sender {
    eqa: Eqa,
    /// The next frame to broadcast for the first time.
    sent_upto: Seq,
    /// Whether the destination structures exist (made at the first broadcast).
    dests_made: bool,
    queue: SendQueue,
    repairs: Repairs,
    failover: Failover,
    polls: Polls,
}

impl Sender {
    pub(crate) fn new(cfg: &EngineConfig) -> Sender {
        Sender {
            eqa: Eqa::new(
                cfg.window,
                cfg.slot_payload(),
                std::iter::empty(),
                cfg.repair_queue,
                cfg.rto,
            ),
            sent_upto: Seq::new(0),
            dests_made: false,
            queue: SendQueue::new(cfg),
            repairs: Repairs::new(cfg),
            failover: Failover::default(),
            polls: Polls::default(),
        }
    }

    /// Test support: counts `frames` sequence numbers as promised (see `Engine::skip_sequences`).
    #[cfg(any(test, feature = "test-hooks"))]
    pub(crate) fn skip_sequences(&mut self, frames: u64) {
        self.queue.skip_sequences(frames);
    }

    /// Makes one `Lms` per other member (the evicted ones evicted at once), once: a member
    /// becomes a root, and pays for its destinations, at its first broadcast. Their cursors
    /// start at the head, which has not moved before.
    fn make_dests(&mut self, cfg: &EngineConfig, live: &[bool], timers: &mut TimerTable) {
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

    /// Makes room for every message the send queue may hold.
    pub(crate) fn make_room(&mut self) {
        self.queue.make_room();
    }

    /// Heap bytes owned by the send side, excluding the per-destination structures.
    pub fn heap_bytes_without_dests(&self) -> usize {
        self.eqa.buf().heap_bytes() + self.queue.heap_bytes()
    }

    /// Queues the message `msg` hands over, taking its buffer only once it is accepted: on an
    /// error nothing is taken or published. A message taken whole ([`Handed::Taken`]) is
    /// framed as the buffer has room; a borrowed one ([`Handed::Borrowed`]) is published from
    /// the caller's bytes while the buffer has room, and the rest copied into the spare
    /// buffer, which is taken then (see [`SendQueue::push_slice`]). A lent or borrowed message's
    /// buffer comes back through [`Sender::take_sent`].
    pub(crate) fn enqueue(
        &mut self,
        cfg: &EngineConfig,
        msg: Handed<'_>,
        algo: HardwareAlgorithm,
        live: &[bool],
        timers: &mut TimerTable,
    ) -> Result<u64, SendError> {
        let promised = self.queue.admit(cfg, msg.bytes().len())?;
        self.make_dests(cfg, live, timers);
        if self.eqa.hms().live() == 0 {
            return Err(SendError::NoReceivers);
        }
        Ok(match msg {
            Handed::Taken { data, lent } => self.queue.push(cfg, data, algo, lent, promised),
            Handed::Borrowed { data, spare } => {
                let designated = Sender::designated(cfg, live);
                self.queue.push_slice(
                    cfg,
                    &mut self.eqa,
                    self.sent_upto,
                    designated,
                    data,
                    spare,
                    algo,
                    promised,
                )
            }
        })
    }

    /// The buffer of lent message `id`, once all its frames are in the retransmission buffer
    /// (`None` before, or if it was not lent, or was taken already).
    pub(crate) fn take_sent(&mut self, id: u64) -> Option<Vec<u8>> {
        self.queue.take_sent(id)
    }

    /// The receiver that pulls push-pull messages: the next live member after this one.
    fn designated(cfg: &EngineConfig, live: &[bool]) -> Rank {
        (1..cfg.size)
            .map(|i| cfg.rank.ring_add(i, cfg.size))
            .find(|&r| live[r.index()])
            .unwrap_or(cfg.rank)
    }

    /// Cuts queued messages into frames while the buffer has room.
    pub(crate) fn fill(
        &mut self,
        cfg: &EngineConfig,
        now: Instant,
        live: &[bool],
        timers: &mut TimerTable,
    ) {
        let designated = Sender::designated(cfg, live);
        if self
            .queue
            .fill(cfg, &mut self.eqa, self.sent_upto, designated)
            == Filled::AwaitingPull
        {
            self.polls.await_pull(cfg, now, timers);
        }
    }

    /// Moves `rank`'s cursor to `cursor`; on progress its back-off ends and its timer starts
    /// again (or stops, once it has everything sent). Returns whether it moved.
    fn progress(
        &mut self,
        cfg: &EngineConfig,
        now: Instant,
        rank: Rank,
        cursor: Seq,
        timers: &mut TimerTable,
    ) -> bool {
        let progressed = self.eqa.ack(rank, cursor);
        if let Some(lms) = self.eqa.lms_mut(rank).filter(|_| progressed) {
            lms.timer.progressed(now, cfg.rto);
            let timer = (lms.cursor() < self.sent_upto).then_some(now + cfg.rto);
            timers.set_or_stop(Timer::Retransmit(rank), timer);
        }
        progressed
    }

    pub(crate) fn on_feedback(
        &mut self,
        cfg: &EngineConfig,
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
        self.progress(cfg, now, src, cumulative.min(self.sent_upto), timers);
        if let Some(lms) = self.eqa.lms_mut(src) {
            lms.timer.heard(now);
            lms.stats.max_lag = lms.stats.max_lag.max(head - lms.cursor());
            match fb {
                Feedback::Nack { .. } => {
                    lms.stats.nacks += 1;
                    lms.route.set_silent(false);
                }
                Feedback::Pull { .. } => lms.stats.pulls += 1,
                Feedback::Ack { .. } => lms.stats.acks += 1,
            }
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
                self.repairs.on_nack(
                    cfg,
                    now,
                    &mut self.eqa,
                    src,
                    (base, missing, more),
                    self.sent_upto,
                );
            }
            Feedback::Ack {
                seen: Some(seen), ..
            } => {
                // The answer to a probe: everything after what it has seen, up to 16 frames,
                // was sent long enough ago to be lost: go back over it.
                let seen = behind(head, seen)
                    .unwrap_or(Seq::new(0))
                    .min(self.sent_upto);
                self.repairs
                    .on_probe_answer(&mut self.eqa, src, seen, self.sent_upto);
            }
            Feedback::Pull { msg_id, .. } if self.queue.grant_pull(msg_id) => {
                self.polls.pulled(timers);
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
        cfg: &EngineConfig,
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
                if self.progress(cfg, now, r, c, timers) {
                    continue;
                }
                let Some(lms) = self.eqa.lms(r) else {
                    continue;
                };
                if r != laggard && !stale && timers.is_armed(Timer::Retransmit(r)) {
                    timers.set(Timer::Retransmit(r), now + lms.rto());
                }
            }
        }
        if let Some(lms) = self.eqa.lms_mut(reporter) {
            lms.timer.heard(now);
            lms.stats.acks += 1;
        }
        self.fill(cfg, now, live, timers);
        self.collect_stable();
    }

    fn collect_stable(&mut self) {
        self.queue.collect_stable(self.eqa.tail(), self.sent_upto);
    }

    pub(crate) fn take_stable(&mut self) -> Option<u64> {
        self.collect_stable();
        self.queue.take_stable()
    }

    /// Lets time pass: fires the retransmission timers that are due (a first timeout polls,
    /// later ones probe and back off), notes the tail's re-broadcast, and the pull poll.
    pub(crate) fn on_timeout(
        &mut self,
        cfg: &EngineConfig,
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
            let first = lms.timer.expired();
            if first && cfg.ack_tree == 0 {
                // Most often its stream merely went idle with frames not yet acknowledged
                // (receivers answer every `ack_every` frames and when asked, never on a timer
                // of their own, so that a sleeping receiver arms no sub-millisecond timer per
                // message). Ask, without a retransmission, at the same interval; the answer
                // says how far it has seen and the root goes back over what it lacks. A poll
                // or answer that is lost leaves the next timeout to the probes below.
                lms.stats.polls += 1;
                timers.set(Timer::Retransmit(rank), now + lms.rto());
                self.polls.ack_poll(cfg, rank);
                self.repairs.asked(rank, sent_upto);
                continue;
            }
            // With an acknowledgement tree a whole subtree waits for one member's frame (the
            // last of a stream, lost there, which nothing else reveals), and every cursor of
            // the subtree times out at once: the first timeout only repairs the frame at the
            // cursor, re-broadcast once when many wait for it, and the member's report comes
            // up the tree. Probes (an answer straight from each) start at the second.
            let (next, cursor) = (now + lms.timer.back_off(cfg.rto_max), lms.cursor());
            if !first {
                lms.stats.probes += 1;
                lms.route.set_silent(true);
                self.repairs.probe(rank, sent_upto);
            }
            timers.set(Timer::Retransmit(rank), next);
            // Go back to its cursor (the probe). A timer acts once, when it fires: however
            // often a driver calls this, the protocol is the same.
            self.eqa.request_repair(rank, cursor);
        }
        let idle = self.queue.is_empty();
        self.repairs
            .note_tail(cfg, now, idle, &self.eqa, sent_upto, &fired);
        timers.give_back(fired);
        self.polls.on_timeout(cfg, now, timers);
        self.fill(cfg, now, live, timers);
    }

    /// Destinations served point-to-point because broadcast does not reach them.
    pub fn failed_over(&self) -> Vec<Rank> {
        Failover::failed_over(&self.eqa)
    }

    /// Whether broadcast reaches at most half the live destinations, so that the next message
    /// should go down a tree instead; now and then it answers no, to try broadcast again
    /// (asked once per message: see `failover`).
    pub(crate) fn too_few_reached(&mut self) -> bool {
        self.failover.too_few_reached(&mut self.eqa)
    }

    pub(crate) fn has_transmit(&self) -> bool {
        self.failover.has_copies()
            || self.polls.due()
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
        cfg: &EngineConfig,
        now: Instant,
        rank: Rank,
        live: &[bool],
        timers: &mut TimerTable,
    ) {
        timers.stop(Timer::Retransmit(rank));
        self.eqa.evict(rank);
        self.polls.on_evict(now, timers);
        self.fill(cfg, now, live, timers);
    }

    /// The next acknowledgement poll due (see `Polls::take_ack_poll`).
    pub(crate) fn take_ack_poll(&mut self) -> Option<Dest> {
        self.polls.take_ack_poll(&self.eqa)
    }

    /// The poll of the designated receiver for a pull request that may have been lost, when
    /// one is due: (its rank, the message).
    pub(crate) fn take_pull_poll(
        &mut self,
        cfg: &EngineConfig,
        live: &[bool],
    ) -> Option<(Rank, Control)> {
        // Asked at every transmit of every member: the designated receiver (a walk of the
        // liveness table) is found only when a poll is due.
        if !self.polls.pull_poll_due() {
            return None;
        }
        let designated = Sender::designated(cfg, live);
        self.polls.take_pull_poll(self.queue.front_id(), designated)
    }

    /// Writes the next frame of this member's stream into `buf`: a repair, a copy owed to a
    /// destination served point to point, or the next fresh frame.
    pub(crate) fn poll_transmit(
        &mut self,
        cfg: &EngineConfig,
        now: Instant,
        buf: &mut [u8],
        live: &[bool],
        stats: &mut EngineStats,
        timers: &mut TimerTable,
    ) -> Option<Transmit<Dest>> {
        let t = self
            .repairs
            .poll(cfg, now, buf, &mut self.eqa, self.sent_upto, stats);
        if t.is_some() {
            return t;
        }
        if let Some(t) = self.failover.poll(&self.eqa, buf) {
            return Some(t);
        }
        if self.sent_upto >= self.eqa.head() {
            return None;
        }
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
            self.failover.on_fresh(lms, seq, self.sent_upto, stats);
        }
        if self.eqa.hms().live() == 0 || self.sent_upto == self.eqa.head() {
            // The next frames are published as the last published one leaves (see
            // `PUBLISH_AHEAD`).
            self.fill(cfg, now, live, timers);
        }
        Some(Transmit {
            dst: Dest::All,
            len,
        })
    }
}
