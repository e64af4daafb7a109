//! Barriers over [`Control::Barrier`] frames, as sans-IO state machines.
//!
//! Two algorithms, chosen by [`BarrierAlgo`]:
//!
//! - **Broadcast barrier** ([`BarrierAlgo::Broadcast`]). Arrivals travel point-to-point up a
//!   combining tree of arity `k` over the live members (position `p` has parent `(p-1)/k`;
//!   `k >= n-1` is a flat coordinator) to the root, the lowest live rank; the release is *one*
//!   broadcast frame, which the switch copies to every port: the point of the EQA paper
//!   (Wong & Wang), here applied to synchronisation. `n - 1` arrivals and one release per
//!   barrier when nothing is lost.
//! - **Dissemination barrier** ([`BarrierAlgo::Dissemination`], Hensgen, Finkel & Manber 1988).
//!   In round `k` member `i` sends to `(i + 2^k) mod n` and waits for `(i - 2^k) mod n`;
//!   `ceil(log2 n)` rounds, `n ceil(log2 n)` point-to-point frames per barrier.
//!
//! **Why it is safe.** Every message states a fact that stays true whatever the views of the
//! members: an arrival carries the *set* of ranks known to have entered the epoch (not "my
//! subtree is done", which would be wrong once the tree re-forms), so the root releases only
//! when it holds evidence of every member it considers live; a dissemination round message is
//! only accepted from the expected partner *in the same view* (a hash of the evicted set in
//! `aux`), and a view change restarts the unreleased epoch. Two shortcuts follow from the fact
//! that nobody enters epoch `e + 1` before `e` completed: a [`Op::Release`] of `e` from anybody,
//! or any barrier frame of epoch `e + 1`, completes `e`.
//!
//! **Why it is live under loss.** Whoever waits asks again, with exponential back-off from
//! `rto` to `max_rto`: a broadcast-barrier member that has arrived but not seen the release
//! re-sends its arrival (set) to its parent; a member that sees an arrival for an epoch it
//! knows complete answers with the release (the root re-broadcasts it, at most once per `rto`,
//! others answer point-to-point). A dissemination member stuck in round `k` sends a
//! [`Op::Query`] to its round-`k` partner, which re-sends its round-`k` frame or, if it is past
//! that epoch, the release. No acknowledgements are needed.
//!
//! **Epochs.** Every frame carries its epoch (0, 1, 2, ...), the round and the [`Op`]; members enter epochs in order and only after the previous one released, so
//! members are never more than one epoch apart and consecutive barriers never mix.
//!
//! **Evictions.** [`Barrier::evicted`] removes a member: the tree and the dissemination ring
//! re-form over the survivors, and a dead member no longer blocks anybody once every survivor
//! has evicted it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::engine::Dest;
use crate::error::ConfigError;
pub(crate) use crate::wire::BarrierOp as Op;
use crate::wire::{BarrierAlgo, BarrierMsg, Control};
use crate::Rank;

/// How many of the longest waits between a straggler's asks a member stays reachable for
/// after a barrier ([`Barrier::serves_stragglers_until`]).
const STRAGGLER_WAITS: u32 = 8;

/// Configuration of one member's barrier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BarrierConfig {
    /// Our rank.
    pub rank: Rank,
    /// Members (ranks `0..size`).
    pub size: u16,
    /// Algorithm.
    pub algorithm: BarrierAlgo,
    /// Children per node of the broadcast barrier's combining tree (`>= n - 1`: a flat
    /// coordinator); the dissemination barrier has no tree.
    pub arity: u16,
    /// First retransmission (or query) timeout.
    pub rto: Duration,
    /// Largest timeout after back-off.
    pub max_rto: Duration,
}

impl BarrierConfig {
    /// Broadcast barrier of arity 4, `rto` 1 ms doubling up to 32 ms.
    pub fn new(rank: Rank, size: u16) -> BarrierConfig {
        BarrierConfig {
            rank,
            size,
            algorithm: BarrierAlgo::Broadcast,
            arity: 4,
            rto: Duration::from_millis(1),
            max_rto: Duration::from_millis(32),
        }
    }
}

/// Why a barrier could not be entered (a configuration it cannot run with is a
/// [`ConfigError`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum BarrierError {
    /// Epochs are entered in order 0, 1, 2, ...: enter the expected one.
    #[error("entered epoch {got}, expected {expected}")]
    Epoch {
        /// The next epoch to enter.
        expected: u32,
        /// The epoch asked for.
        got: u32,
    },
    /// The previous epoch has not released yet: wait for [`Barrier::is_released`].
    #[error("epoch {0} has not released yet")]
    NotReleased(u32),
}

/// Why a barrier frame was refused (nothing from the network makes the barrier panic).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum FrameError {
    /// A frame of the other barrier machine.
    #[error("frame of the other barrier algorithm")]
    Algo,
    /// The arrival set has the wrong length or names ranks outside the group.
    #[error("malformed arrival set of {0} bytes")]
    Set(usize),
    /// Round number beyond `ceil(log2 n)`.
    #[error("round {0} out of range")]
    Round(u32),
    /// Sender outside the group.
    #[error("sender {0} outside the group")]
    Src(Rank),
    /// An epoch no member can be in while this one is where it is (members are never more
    /// than one epoch apart): a confused or forged frame, which must not complete epochs.
    #[error("epoch {0} is not within one epoch of ours")]
    Epoch(u32),
}

/// Frames sent, by operation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BarrierStats {
    /// Arrivals (point-to-point), first sends and retransmissions.
    pub arrive: u64,
    /// Releases sent to the broadcast address.
    pub release_bcast: u64,
    /// Releases sent point-to-point (answers to late frames).
    pub release_p2p: u64,
    /// Dissemination round frames.
    pub round: u64,
    /// Dissemination queries.
    pub query: u64,
}

impl BarrierStats {
    /// All frames.
    pub fn total(&self) -> u64 {
        self.arrive + self.release_bcast + self.release_p2p + self.round + self.query
    }
}

fn log2_ceil(n: usize) -> u32 {
    if n <= 1 {
        0
    } else {
        usize::BITS - (n - 1).leading_zeros()
    }
}

/// One member's barrier (sans-IO).
///
/// Call [`Barrier::enter`] when the application reaches the barrier, feed every received
/// barrier frame to [`Barrier::handle_frame`], call [`Barrier::handle_timeout`] when
/// [`Barrier::poll_timeout`] is due, drain [`Barrier::poll_transmit`] (hand the frames to
/// `Engine::send_control`), and leave the barrier when [`Barrier::is_released`].
#[derive(Debug)]
pub struct Barrier {
    cfg: BarrierConfig,
    evicted: Vec<bool>,
    view: u32,
    /// Next epoch to enter; epochs `< next` have been entered.
    next: u32,
    /// Highest epoch known complete.
    complete: Option<u32>,
    /// When this member last learnt of an epoch's completion.
    completed_at: Option<Instant>,
    /// Broadcast: ranks known to have entered, per epoch not yet complete.
    sets: BTreeMap<u32, Vec<bool>>,
    /// Broadcast: members in the set last sent up for the current epoch.
    sent_up: usize,
    /// Dissemination: (epoch, round) frames received from the right partner in this view.
    got: BTreeSet<(u32, u32)>,
    /// Dissemination: rounds completed in the current epoch.
    round: u32,
    /// Dissemination: rounds whose frame went out in the current epoch.
    sent_rounds: u32,
    retx_at: Option<Instant>,
    rto: Duration,
    last_rebroadcast: Option<(u32, Instant)>,
    transmits: VecDeque<(Dest, Control)>,
    stats: BarrierStats,
}

impl Barrier {
    /// Creates the barrier of `cfg.rank`.
    pub fn new(cfg: BarrierConfig) -> Result<Barrier, ConfigError> {
        if cfg.size == 0 || cfg.rank.get() >= cfg.size || cfg.size == crate::wire::ALL.get() {
            return Err(ConfigError::Rank {
                rank: cfg.rank,
                size: cfg.size,
            });
        }
        if cfg.rto.is_zero()
            || cfg.rto > cfg.max_rto
            || (cfg.algorithm == BarrierAlgo::Broadcast && cfg.arity == 0)
        {
            return Err(ConfigError::Barrier);
        }
        Ok(Barrier {
            evicted: vec![false; usize::from(cfg.size)],
            view: 0,
            next: 0,
            complete: None,
            completed_at: None,
            sets: BTreeMap::new(),
            sent_up: 0,
            got: BTreeSet::new(),
            round: 0,
            sent_rounds: 0,
            retx_at: None,
            rto: cfg.rto,
            last_rebroadcast: None,
            transmits: VecDeque::new(),
            stats: BarrierStats::default(),
            cfg,
        })
    }

    /// Until when this member should stay reachable for stragglers of the last barrier: a
    /// member that missed the release asks again (its parent, or its partner), and only a
    /// member past that epoch can answer. Nobody acknowledges a release, so nobody knows when
    /// the last straggler got it; eight of the longest waits between asks (a straggler asks
    /// about ten times in that span) make a miss need about ten losses in a row. After it,
    /// a straggler waits for its peer's next barrier call.
    pub fn serves_stragglers_until(&self) -> Option<Instant> {
        self.completed_at
            .map(|t| t + self.cfg.max_rto * STRAGGLER_WAITS)
    }

    /// The configuration.
    pub fn config(&self) -> &BarrierConfig {
        &self.cfg
    }

    /// Frames sent so far.
    pub fn stats(&self) -> &BarrierStats {
        &self.stats
    }

    /// The next epoch [`Barrier::enter`] accepts.
    pub fn next_epoch(&self) -> u32 {
        self.next
    }

    /// True once we entered `epoch` and everybody live did too.
    pub fn is_released(&self, epoch: u32) -> bool {
        epoch < self.next && self.complete.is_some_and(|c| c >= epoch)
    }

    /// The epoch we are in and waiting for, if any.
    fn waiting(&self) -> Option<u32> {
        let cur = self.next.checked_sub(1)?;
        (!self.is_released(cur)).then_some(cur)
    }

    /// Enters barrier `epoch` (0, 1, 2, ... in order, each after the previous released).
    pub fn enter(&mut self, now: Instant, epoch: u32) -> Result<(), BarrierError> {
        if epoch != self.next {
            return Err(BarrierError::Epoch {
                expected: self.next,
                got: epoch,
            });
        }
        if let Some(prev) = epoch.checked_sub(1) {
            if !self.is_released(prev) {
                return Err(BarrierError::NotReleased(prev));
            }
        }
        self.next = epoch + 1;
        self.rto = self.cfg.rto;
        self.sent_up = 0;
        self.round = 0;
        self.sent_rounds = 0;
        self.retx_at = Some(now + self.rto);
        let me = self.cfg.rank.index();
        let n = self.evicted.len();
        self.sets.entry(epoch).or_insert_with(|| vec![false; n])[me] = true;
        self.progress(now);
        Ok(())
    }

    // ---- views ----

    fn ring(&self) -> Vec<Rank> {
        Rank::all(self.cfg.size)
            .filter(|r| !self.evicted[r.index()])
            .collect()
    }

    fn position(&self, ring: &[Rank]) -> usize {
        ring.iter()
            .position(|r| *r == self.cfg.rank)
            .unwrap_or_default()
    }

    /// Ranks in the subtree rooted at position `p` of the tree over `ring`.
    fn subtree(ring: &[Rank], arity: usize, p: usize) -> Vec<Rank> {
        let mut out = Vec::new();
        let mut stack = vec![p];
        while let Some(q) = stack.pop() {
            if let Some(r) = ring.get(q) {
                out.push(*r);
                stack.extend((1..=arity).map(|c| arity * q + c));
            }
        }
        out
    }

    // ---- output helpers ----

    fn algo(&self) -> BarrierAlgo {
        self.cfg.algorithm
    }

    fn push(&mut self, dst: Dest, op: Op, epoch: u32, round: u32, set: Vec<u8>) {
        let msg = BarrierMsg {
            algo: self.algo(),
            op,
            epoch,
            round,
            view: self.view,
            set,
        };
        match (op, dst) {
            (Op::Arrive, _) => self.stats.arrive += 1,
            (Op::Release, Dest::All) => self.stats.release_bcast += 1,
            (Op::Release, Dest::Rank(_)) => self.stats.release_p2p += 1,
            (Op::Round, _) => self.stats.round += 1,
            (Op::Query, _) => self.stats.query += 1,
        }
        self.transmits.push_back((dst, Control::Barrier(msg)));
    }

    fn encode_set(set: &[bool]) -> Vec<u8> {
        let mut b = vec![0u8; set.len().div_ceil(8)];
        for (i, s) in set.iter().enumerate() {
            if *s {
                b[i / 8] |= 1 << (i % 8);
            }
        }
        b
    }

    fn decode_set(&self, payload: &[u8]) -> Result<Vec<bool>, FrameError> {
        let n = self.evicted.len();
        if payload.len() != n.div_ceil(8) {
            return Err(FrameError::Set(payload.len()));
        }
        let set: Vec<bool> = (0..payload.len() * 8)
            .map(|i| payload[i / 8] & (1 << (i % 8)) != 0)
            .collect();
        if set[n..].iter().any(|b| *b) {
            return Err(FrameError::Set(payload.len()));
        }
        Ok(set[..n].to_vec())
    }

    // ---- state changes ----

    fn mark_complete(&mut self, now: Instant, epoch: u32) {
        if self.complete.is_none_or(|c| c < epoch) {
            self.complete = Some(epoch);
            self.completed_at = Some(now);
        }
        self.sets.retain(|e, _| *e > epoch);
        self.got.retain(|(e, _)| *e > epoch);
        if self.waiting().is_none() {
            self.retx_at = None;
        }
    }

    fn progress(&mut self, now: Instant) {
        let Some(e) = self.waiting() else { return };
        match self.cfg.algorithm {
            BarrierAlgo::Broadcast => self.progress_tree(now, e, usize::from(self.cfg.arity)),
            BarrierAlgo::Dissemination => self.progress_dissemination(now, e),
        }
    }

    fn progress_tree(&mut self, now: Instant, e: u32, arity: usize) {
        let ring = self.ring();
        let p = self.position(&ring);
        let n = self.evicted.len();
        let set = self.sets.entry(e).or_insert_with(|| vec![false; n]).clone();
        let covered = |ranks: &[Rank]| ranks.iter().all(|r| set[r.index()]);
        if p == 0 {
            if covered(&ring) {
                self.mark_complete(now, e);
                if ring.len() > 1 {
                    self.push(Dest::All, Op::Release, e, 0, Vec::new());
                    self.last_rebroadcast = Some((e, now));
                }
            }
        } else if covered(&Self::subtree(&ring, arity, p)) {
            let count = set.iter().filter(|b| **b).count();
            if count > self.sent_up {
                self.sent_up = count;
                let parent = ring[(p - 1) / arity];
                self.push(Dest::Rank(parent), Op::Arrive, e, 0, Self::encode_set(&set));
            }
        }
    }

    fn partners(&self, round: u32) -> Option<(Rank, Rank)> {
        let ring = self.ring();
        let m = ring.len();
        if m < 2 {
            return None;
        }
        let p = self.position(&ring);
        let step = (1usize << round) % m;
        Some((ring[(p + step) % m], ring[(p + m - step) % m]))
    }

    fn progress_dissemination(&mut self, now: Instant, e: u32) {
        let rounds = log2_ceil(self.ring().len());
        loop {
            if self.round >= rounds {
                self.mark_complete(now, e);
                return;
            }
            if self.sent_rounds <= self.round {
                if let Some((to, _)) = self.partners(self.round) {
                    self.push(Dest::Rank(to), Op::Round, e, self.round, Vec::new());
                }
                self.sent_rounds = self.round + 1;
            }
            if self.got.contains(&(e, self.round)) {
                self.round += 1;
                self.rto = self.cfg.rto;
            } else {
                return;
            }
        }
    }

    /// Handles a received barrier frame (the engine's `Event::Control` of kind Barrier).
    pub fn handle_frame(
        &mut self,
        now: Instant,
        src: Rank,
        msg: &BarrierMsg,
    ) -> Result<(), FrameError> {
        if msg.algo != self.algo() {
            return Err(FrameError::Algo);
        }
        if src.get() >= self.cfg.size {
            return Err(FrameError::Src(src));
        }
        let op = msg.op;
        let e = msg.epoch;
        // Nobody is ever more than one epoch ahead of us (it could not leave our last epoch
        // without our arrival), and frames of older epochs than our previous one are stale.
        if e > self.next || e.saturating_add(2) < self.next {
            return Err(FrameError::Epoch(e));
        }
        let set = match op {
            Op::Arrive => Some(self.decode_set(&msg.set)?),
            _ => None,
        };
        if matches!(op, Op::Round | Op::Query) && msg.round >= 16 {
            return Err(FrameError::Round(msg.round));
        }
        if self.evicted[src.index()] {
            return Ok(());
        }
        // Nobody sends for epoch e before e - 1 completed.
        if let Some(prev) = e.checked_sub(1) {
            self.mark_complete(now, prev);
        }
        let known_complete = self.complete.is_some_and(|c| c >= e);
        match op {
            Op::Release => self.mark_complete(now, e),
            Op::Arrive if known_complete => {
                // A late arrival: its sender missed the release. It gets one point to point
                // (a member that broadcast does not reach would miss a re-broadcast too); the
                // root also re-broadcasts it, once per epoch, for others that missed it.
                let rebroadcast = self.position(&self.ring()) == 0
                    && self.last_rebroadcast.is_none_or(|(le, _)| le != e);
                if rebroadcast {
                    self.last_rebroadcast = Some((e, now));
                    self.push(Dest::All, Op::Release, e, 0, Vec::new());
                }
                self.push(Dest::Rank(src), Op::Release, e, 0, Vec::new());
            }
            Op::Arrive => {
                let n = self.evicted.len();
                let mine = self.sets.entry(e).or_insert_with(|| vec![false; n]);
                for (m, s) in mine.iter_mut().zip(set.unwrap_or_default()) {
                    *m |= s;
                }
            }
            Op::Round | Op::Query if known_complete && e < self.next => {
                if op == Op::Query {
                    self.push(Dest::Rank(src), Op::Release, e, 0, Vec::new());
                }
            }
            Op::Round => {
                let from = self.partners(msg.round).map(|(_, from)| from);
                if msg.view == self.view && from == Some(src) {
                    self.got.insert((e, msg.round));
                }
            }
            Op::Query => {
                let to = self.partners(msg.round).map(|(to, _)| to);
                let sent = self.waiting() == Some(e) && self.sent_rounds > msg.round;
                if msg.view == self.view && to == Some(src) && sent {
                    self.push(Dest::Rank(src), Op::Round, e, msg.round, Vec::new());
                }
            }
        }
        self.progress(now);
        Ok(())
    }

    /// Lets time pass: re-sends arrivals (broadcast) or queries the awaited partner
    /// (dissemination), with back-off.
    pub fn handle_timeout(&mut self, now: Instant) {
        let Some(at) = self.retx_at else { return };
        if at > now {
            return;
        }
        let Some(e) = self.waiting() else {
            self.retx_at = None;
            return;
        };
        match self.cfg.algorithm {
            BarrierAlgo::Broadcast => {
                // Re-send what we have (if our subtree is in): it also asks for the release.
                self.sent_up = 0;
                self.progress(now);
            }
            BarrierAlgo::Dissemination => {
                if let Some((_, from)) = self.partners(self.round) {
                    self.push(Dest::Rank(from), Op::Query, e, self.round, Vec::new());
                }
            }
        }
        self.rto = (self.rto * 2).min(self.cfg.max_rto);
        self.retx_at = Some(now + self.rto);
    }

    /// The group agreed that `rank` is gone: the tree and the ring re-form without it.
    pub fn evicted(&mut self, now: Instant, rank: Rank) {
        let r = rank.index();
        if r >= self.evicted.len() || rank == self.cfg.rank || self.evicted[r] {
            return;
        }
        self.evicted[r] = true;
        // The view id: a hash (FNV-1a) of the evicted set, the same at every member that
        // evicted the same ranks in any order.
        let mut h: u32 = 0x811c_9dc5;
        for (i, _) in self.evicted.iter().enumerate().filter(|(_, e)| **e) {
            for b in (i as u16).to_be_bytes() {
                h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
            }
        }
        self.view = h;
        if self.waiting().is_some() {
            // Restart the epoch in the new view; arrival sets stay (they are facts).
            self.got.clear();
            self.round = 0;
            self.sent_rounds = 0;
            self.sent_up = 0;
            self.rto = self.cfg.rto;
            self.retx_at = Some(now + self.rto);
            self.progress(now);
        }
    }

    /// The next frame to send: destination, header (group and source are filled in by the
    /// engine) and payload.
    pub fn poll_transmit(&mut self) -> Option<(Dest, Control)> {
        self.transmits.pop_front()
    }

    /// When [`Barrier::handle_timeout`] has work next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.retx_at
    }
}

#[cfg(test)]
mod tests;
