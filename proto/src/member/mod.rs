//! One group member as a sans-IO state machine: everything above the protocol engine.
//!
//! A [`Member`] owns the group's [`Engine`], the reliable point-to-point channels to single
//! peers ([`p2p::Pairs`], one two-member engine per peer, created on first use), the two
//! barrier machines, the failure detector and the collective call in progress
//! ([`call::Calls`]). Like the engine it has no socket and no clock: its inputs are frames
//! ([`Member::handle_frame`]), the passing of time ([`Member::handle_timeout`]) and the
//! application's calls; its outputs are frames ([`Member::poll_transmit`]), the next instant
//! it wants to be woken ([`Member::poll_timeout`], answered by one timer table,
//! [`timer::TimerTable`]), events ([`Member::poll_event`]) and the result of the call in
//! progress ([`Member::take_result`]). One driver (the driver of `ethbcast`, the crate above
//! this one) runs it over a real link with the wall clock, or over the simulated switch in
//! virtual time, so every call a user makes is tested on the simulator.
//!
//! This follows quinn-proto's endpoint: the member is the endpoint that takes every frame,
//! checks it once ([`Frame::new_checked`]), and hands it to whichever machine it belongs to
//! (the group engine or a pair channel by its group id; barrier, detector and membership
//! messages by their typed [`Control`] kind). No header byte is read before the CRC check.
//!
//! Each concern is a type that owns its state: the channels ([`p2p`]), the tree broadcast
//! ([`tree`]), the group engine's deliveries ([`deliveries`]), the call ([`call`]), the join's
//! tail ([`late`]), the addresses ([`addresses`]) and the timers ([`timer`]); the member passes
//! one what it needs of another. The collective calls are in [`collective`].
//!
//! **Bounded.** Nothing grows with the run's length: deliveries are posted on demand (a
//! `bcast` call posts one receive for its root; a streaming member keeps `prepost` receives
//! posted per root, so at most that many deliveries wait for the application),
//! point-to-point messages likewise (at most [`P2P_WINDOW`] per peer), acknowledgements of
//! this member's broadcasts fold into a counter ([`Member::stable_through`]), and the other
//! events wait in a queue of [`EVENT_BOUND`] entries, beyond which application notices are
//! dropped and counted ([`MemberStats::events_dropped`]). Control frames to send (the
//! engine's, the barriers' and the detector's answers) wait in the engine's outbox of
//! `EngineConfig::outbox` frames, beyond which they are dropped and counted
//! ([`crate::engine::EngineStats::outbox_full`]): a link that takes frames slower than peers ask
//! makes the member answer less, not hold more.

use std::collections::VecDeque;
use std::time::Instant;

use crate::barrier::{Barrier, BarrierConfig};
use crate::detect::{Detector, DetectorEvent, DetectorMsg};
use crate::engine::{self, Dest, Engine, EngineStats, Observer, Prefetch, SessionEnded};
use crate::machine::{BatchEnd, Machine};
use crate::wire::ethernet::MacAddr;
use crate::wire::{BarrierAlgo, Control, Flags, Frame, FrameCipher, Kind, WireError};
use crate::Rank;

use crate::engine::Message;
use crate::machine::Transmit;

mod addresses;
mod algorithm;
mod call;
mod collective;
mod config;
mod deliveries;
mod error;
mod event;
mod inbox;
mod late;
mod p2p;
mod timer;
mod tree;

use addresses::Addresses;
pub use algorithm::Algorithm;
use call::Calls;
pub use config::{MemberConfig, BARRIER_ARITY};
use deliveries::Deliveries;
pub use error::MemberError;
pub use event::{DestProgress, Done, Event, MemberStats};
use late::LateJoin;
pub use late::LATE_ROSTER_SERVE;
pub use p2p::{pair_group, P2P_WINDOW};
use p2p::{Pairs, P2P_APP};
use timer::{Timer, TimerTable};
use tree::TreeBcast;
pub use tree::{live_tree, tree_children, tree_parent, TREE_CACHE};

/// Events (evictions, notices, streamed deliveries) a member holds for the application.
pub const EVENT_BOUND: usize = 1024;

/// One group member (sans-IO). See the module documentation.
#[derive(Debug)]
pub struct Member {
    engine: Engine,
    pairs: Pairs,
    tree: TreeBcast,
    barriers: [Barrier; 2],
    /// Set when a barrier was given something that may have queued frames of it: looked at
    /// by [`Member::pump_controls`] only then (see [`Member::barrier_mut`]).
    barrier_sends: bool,
    /// Set when a barrier was given something that may have moved its deadline: looked at
    /// by [`Member::sync_timers`] only then.
    barrier_deadlines: bool,
    detector: Option<Detector>,
    addrs: Addresses,
    deliveries: Deliveries,
    calls: Calls,
    late: LateJoin,
    events: VecDeque<Event>,
    evicted: Vec<(Rank, Instant)>,
    /// The last of this member's broadcasts every live destination has, with all before it.
    stable_through: Option<u64>,
    stats: MemberStats,
    timers: TimerTable,
}

impl Member {
    /// Builds a member. `now` starts its timers.
    pub fn new(now: Instant, cfg: MemberConfig) -> Result<Member, MemberError> {
        let MemberConfig {
            engine: mut ecfg,
            peers,
            group_mac,
            detector,
            barrier_arity,
            prepost,
            late,
            senders,
        } = cfg;
        let n = usize::from(ecfg.size);
        if peers.len() != n {
            return Err(MemberError::Peers {
                got: peers.len(),
                want: n,
            });
        }
        // Deliveries are posted by the member, so that none waits unbounded.
        ecfg.auto_post = false;
        let (rank, size, group) = (ecfg.rank, ecfg.size, ecfg.group);
        let barrier = |algorithm| {
            let mut c = BarrierConfig::new(rank, size);
            c.algorithm = algorithm;
            c.arity = barrier_arity.max(1);
            Barrier::new(c)
        };
        let barriers = [
            barrier(BarrierAlgo::Broadcast)?,
            barrier(BarrierAlgo::Dissemination)?,
        ];
        let detector = match detector {
            Some(mut d) => {
                d.rank = rank;
                d.size = size;
                let mut d = Detector::new(d)?;
                d.handle_timeout(now);
                Some(d)
            }
            None => None,
        };
        let late = LateJoin::new(now, late, &peers);
        let mut engine = Engine::new(ecfg)?;
        if let Some(s) = &senders {
            engine.take_streams_from(s);
        }
        let mut m = Member {
            engine,
            pairs: Pairs::new(group, rank, size),
            tree: TreeBcast::new(),
            barriers,
            barrier_sends: true,
            barrier_deadlines: true,
            detector,
            addrs: Addresses::new(peers, group_mac),
            deliveries: Deliveries::new(n, prepost, senders.as_deref()),
            calls: Calls::new(n),
            late,
            events: VecDeque::new(),
            evicted: Vec::new(),
            stable_through: None,
            stats: MemberStats::default(),
            timers: TimerTable::default(),
        };
        m.sync_timers();
        m.sync_detector();
        Ok(m)
    }

    // ---- inspection ----

    /// Hands `observer` the bytes of `root`'s messages, in order, as they are consumed (see
    /// [`crate::engine::Engine::observe`]).
    pub fn observe(&mut self, now: Instant, root: Rank, observer: Observer) {
        self.engine.observe(now, root, observer);
        self.sync_timers();
    }

    /// Keeps at most `keep` bytes of `root`'s messages; longer ones go to the observer alone
    /// and come as [`Event::Observed`] (see [`crate::engine::Engine::keep_at_most`]).
    pub fn keep_at_most(&mut self, now: Instant, root: Rank, keep: usize) {
        self.engine.keep_at_most(now, root, keep);
        self.sync_timers();
    }

    /// Leaves in the link the frames of `root`'s stream that would be copied into the window
    /// (see [`crate::engine::Engine::leave_in_link`]).
    pub fn leave_in_link(&mut self, now: Instant, root: Rank) {
        self.engine.leave_in_link(now, root);
        self.sync_timers();
    }

    /// Leaves in the link the frames of `root`'s stream that would be copied into the window,
    /// serving fellows as without the link (see
    /// [`crate::engine::Engine::leave_in_link_serving`]).
    pub fn leave_in_link_serving(&mut self, now: Instant, root: Rank) {
        self.engine.leave_in_link_serving(now, root);
        self.sync_timers();
    }

    /// A batch of frames ends (see [`crate::engine::Engine::frames_done`]). What the engine
    /// did then (messages completed by frames that waited in the link, repairs served from
    /// it, control messages) is taken from it now, as after a frame: a member whose last
    /// messages complete at a batch's end may get no frame nor timer after it.
    pub fn frames_done(&mut self, now: Instant, end: BatchEnd<'_>) {
        self.engine.frames_done(now, end);
        self.collect(now);
        self.advance(now);
        self.pump_controls();
        self.sync_timers();
    }

    /// This member's rank.
    pub fn rank(&self) -> Rank {
        self.engine.config().rank
    }
    /// Number of members.
    pub fn size(&self) -> u16 {
        self.engine.config().size
    }
    /// The group engine (configuration, counters, buffer), read-only.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }
    /// Makes the queues that grow with use at their bounds now (see
    /// [`Engine::reserve_queues`]): a host's member allocates nothing in steady state.
    pub fn reserve_queues(&mut self) {
        self.engine.reserve_queues();
    }
    /// The group engine's counters.
    pub fn engine_stats(&self) -> &EngineStats {
        self.engine.stats()
    }
    /// This member's counters.
    pub fn stats(&self) -> MemberStats {
        self.stats
    }
    /// The failure detector, if enabled.
    pub fn detector(&self) -> Option<&Detector> {
        self.detector.as_ref()
    }
    /// Members evicted so far, with the instant of their eviction.
    pub fn evicted(&self) -> &[(Rank, Instant)] {
        &self.evicted
    }
    /// Whether this member's session ended (its engine's or a point-to-point channel's
    /// counters reached their last value, see [`SessionEnded`]): calls fail with
    /// [`MemberError::SessionEnded`] then, and the group must be opened again.
    pub fn session_ended(&self) -> Option<SessionEnded> {
        self.engine
            .session_ended()
            .or_else(|| self.pairs.session_ended())
    }
    /// The point-to-point channels open (made by this member's sends or by a peer's frames
    /// that passed their tag), with the heap bytes of their buffers.
    pub fn channels(&self) -> Vec<(Rank, usize)> {
        self.pairs.channels()
    }
    /// Whether `rank` is still a live member.
    pub fn is_live(&self, rank: Rank) -> bool {
        self.engine.is_live(rank)
    }
    /// The MAC address of `rank`.
    pub fn mac_of(&self, rank: Rank) -> Option<MacAddr> {
        self.addrs.mac_of(rank)
    }
    /// Events waiting for the application.
    pub fn queued_events(&self) -> usize {
        self.events.len()
    }
    /// The last of this member's broadcasts (by id) that every live destination has
    /// acknowledged, with all before it.
    pub fn stable_through(&self) -> Option<u64> {
        self.stable_through
    }
    /// Members this member's broadcasts are served point-to-point because hardware broadcast
    /// does not reach them (fail-over).
    pub fn failed_over(&self) -> Vec<Rank> {
        self.engine.sender().failed_over()
    }
    /// How far destination `rank` is with this member's broadcasts.
    pub fn dest_progress(&self, rank: Rank) -> Option<DestProgress> {
        let eqa = self.engine.sender().eqa();
        let l = eqa.lms(rank)?;
        Some(DestProgress {
            outstanding: eqa.head().get().saturating_sub(l.cursor().get()),
            last_heard: l.last_heard(),
            last_progress: l.last_progress(),
        })
    }
    /// Until when this member should stay reachable for members that may still need it
    /// although it owes nothing it knows of: those that missed the last barrier's release
    /// ([`Barrier::serves_stragglers_until`] of either barrier), and the join's coordinator
    /// while it may be repeating its roster for a confirmation of this member that was lost
    /// ([`LATE_ROSTER_SERVE`] after the join, unless a frame of the coordinator's session
    /// came first).
    pub fn serves_stragglers_until(&self) -> Option<Instant> {
        let late = self
            .late
            .serves_until(|c| self.engine.last_heard(c).is_some());
        self.barriers
            .iter()
            .filter_map(Barrier::serves_stragglers_until)
            .chain(late)
            .max()
    }

    /// True when nothing this member sent (to the group or point-to-point) is unacknowledged.
    pub fn is_idle(&self) -> bool {
        self.engine.is_idle() && self.pairs.engines().all(Engine::is_idle)
    }

    /// Whether this member holds frames it has not acknowledged to their roots: they will ask
    /// (their retransmission timers' polls), so a thread that serves the member between calls
    /// stays to answer.
    pub fn owes_acks(&self) -> bool {
        self.engine.owes_acks() || self.pairs.engines().any(Engine::owes_acks)
    }

    /// Acknowledges every frame held and not yet acknowledged, now (see [`Engine::ack_all`]).
    pub fn ack_all(&mut self, now: Instant) {
        self.engine.ack_all(now);
        for e in self.pairs.engines_mut() {
            e.ack_all(now);
        }
        self.sync_timers();
        self.sync_pairs();
    }

    /// True if frames of data (fresh or repairs, to the group or point-to-point) are waiting
    /// to be sent, as opposed to control frames only (acknowledgements, requests).
    pub fn has_data_to_send(&self) -> bool {
        self.engine.has_data_to_send() || self.pairs.engines().any(Engine::has_data_to_send)
    }

    /// True when every message this member handed over (to the group or point-to-point) has
    /// all its frames in a retransmission buffer: none waits in a send queue for room in the
    /// window or for a pull. What is in the buffer leaves at the next flush.
    pub fn send_queues_empty(&self) -> bool {
        self.engine.sender().queued() == 0 && self.pairs.engines().all(|e| e.sender().queued() == 0)
    }

    // ---- calls ----

    /// Sends a control message of a layer above (membership) to `dst`.
    pub fn send_control(&mut self, dst: Dest, msg: Control) -> Result<(), MemberError> {
        Ok(self.engine.send_control(dst, msg)?)
    }

    /// Sends an unreliable application datagram to `dst` (a rank or everybody).
    pub fn send_notice(&mut self, dst: Dest, body: Vec<u8>) -> Result<(), MemberError> {
        Ok(self.engine.send_control(dst, Control::Notice { body })?)
    }

    /// Stops sending broadcast data and repairs for good (an aborting root): only control
    /// frames leave from now on.
    pub fn abandon(&mut self) {
        self.engine.abandon();
    }

    /// Removes `rank` from the group now (the failure detector does the same for the dead):
    /// its buffer references are released so that broadcasts complete for the survivors, its
    /// channel is closed, and the barriers re-form without it.
    pub fn evict(&mut self, now: Instant, rank: Rank) {
        if !self.engine.evict(now, rank) {
            return;
        }
        // The caller that evicts says why (`ethbcast send` prints its own line); only the
        // failure detector's verdict is this layer's to warn of (see `run_detector`).
        tracing::debug!(rank = rank.get(), "member evicted");
        self.evicted.push((rank, now));
        if let Some(d) = self.detector.as_mut() {
            d.evicted(rank);
        }
        self.pairs.close(rank);
        self.timers.set_or_stop(Timer::Pair(rank), None);
        self.deliveries.evicted(rank);
        for i in 0..self.barriers.len() {
            self.barrier_mut(i).evicted(now, rank);
        }
        self.reforward_trees(now);
        self.push_event(Event::Evicted { rank });
        self.advance(now);
        self.sync_timers();
        self.sync_detector();
    }

    // ---- the sans-IO interface ----

    /// Handles one received PDU from `src` (its Ethernet source address).
    pub fn handle_frame(&mut self, now: Instant, src: MacAddr, pdu: &[u8]) {
        self.stats.frames_received += 1;
        let frame = match Frame::new_checked(pdu) {
            Ok(f) => f,
            Err(e) => {
                self.stats.malformed += 1;
                if e == WireError::BadCrc {
                    self.stats.bad_crc += 1;
                }
                return;
            }
        };
        let group = frame.group();
        if group == self.engine.config().group {
            if !self.handle_group_frame(now, src, &frame) {
                return;
            }
        } else if let Some(peer) = self.pairs.peer(group) {
            if !self.handle_pair_frame(now, src, peer, &frame) {
                return;
            }
        } else {
            // The join's coordinator repeats its roster until every member confirmed it.
            if frame.kind() != Kind::Join || !self.late.answer(src, pdu) {
                self.stats.foreign += 1;
            }
            return;
        }
        self.advance(now);
        // The barriers' and the detector's answers wait in the engine's bounded outbox, not
        // in their own queues until the link next takes a frame.
        self.pump_controls();
        self.sync_timers();
    }

    /// A frame of the group's own (see `handle_frame`); false if it was refused before the
    /// engine saw it.
    fn handle_group_frame(&mut self, now: Instant, src: MacAddr, frame: &Frame<&[u8]>) -> bool {
        let claimed = frame.src();
        let relayed = frame.kind() == Kind::Repair && frame.flags().contains(Flags::P2P);
        // Who this frame proves alive: the rank whose address sent it. A peer repair keeps the
        // root as its source but comes from the fellow member this one asks for that root's
        // frames (looked up only for a frame whose address is not its source's: nearly every
        // frame is, and the lookup reads the stream's state).
        let speaker = if self.addrs.is(claimed, src) {
            claimed
        } else {
            let relayer = self
                .engine
                .repair_peer(claimed)
                .filter(|&p| self.addrs.is(p, src));
            match relayer.filter(|_| relayed) {
                Some(peer) => peer,
                None => {
                    self.stats.mac_mismatch += 1;
                    return false;
                }
            }
        };
        if frame.kind().is_data() && !self.deliveries.takes(claimed) {
            // A stream this member does not take: nothing is made for it.
            self.stats.dropped += 1;
            return false;
        }
        match self.engine.handle_checked(now, frame) {
            Ok(()) => {
                self.stats.accepted += 1;
                // New data proves its sender spoke (a duplicate is refused); a control frame
                // does only if its counter advanced the replay window, which the engine then
                // notes as heard now. A late one (inside the window, never seen) may have
                // been held back and replayed by anybody on the segment.
                let spoke = frame.kind().is_data() || self.engine.last_heard(claimed) == Some(now);
                if let Some(d) = self.detector.as_mut().filter(|_| spoke) {
                    d.mark_alive(now, speaker);
                }
            }
            Err(_) => self.stats.dropped += 1,
        }
        if self.deliveries.streaming()
            && frame.kind().is_data()
            && !relayed
            && self.engine.receiver(claimed).is_some()
        {
            // A stream is created when a frame of its root first passes the engine's checks
            // (its tag, with a key): post for it then, and never for a frame that failed them.
            self.top_up(now, claimed);
        }
        self.collect(now);
        true
    }

    /// A frame of the point-to-point channel with `peer` (see `handle_frame`); false if it
    /// was refused before the channel saw it.
    fn handle_pair_frame(
        &mut self,
        now: Instant,
        src: MacAddr,
        peer: Rank,
        frame: &Frame<&[u8]>,
    ) -> bool {
        if !self.addrs.is(peer, src) {
            self.stats.mac_mismatch += 1;
            return false;
        }
        if !self.is_live(peer) || !self.deliveries.takes(peer) {
            self.stats.dropped += 1;
            return false;
        }
        if self.pairs.get(peer).is_none() {
            // The channel is made for a frame that passes its tag, not before: a host without
            // the key, speaking as a member, makes no channel. (Once it exists its engine
            // checks the tag, once a frame as for the group.)
            let forged = match &self.engine.config().key {
                Some(key) if frame.flags().contains(Flags::ENCRYPTED) => {
                    let mut plain = vec![0; frame.total_len()];
                    FrameCipher::new(key, frame.group())
                        .open(frame, &mut plain)
                        .is_none()
                }
                Some(key) => !frame.verify(key),
                None => false,
            };
            if forged {
                self.stats.dropped += 1;
                return false;
            }
        }
        match self.pair(now, peer).handle_checked(now, frame) {
            Ok(()) => {
                self.stats.accepted += 1;
                // As above: new data, or a control counter that advanced the window.
                let spoke = frame.kind().is_data()
                    || self
                        .pairs
                        .get(peer)
                        .is_some_and(|e| e.last_heard(peer) == Some(now));
                if let Some(d) = self.detector.as_mut().filter(|_| spoke) {
                    d.mark_alive(now, peer);
                }
            }
            Err(_) => self.stats.dropped += 1,
        }
        self.collect_pair(now, peer);
        true
    }

    /// Lets time pass: fires the timers of the machines whose time came (the group engine,
    /// the channels, the detector, the barriers).
    pub fn handle_timeout(&mut self, now: Instant) {
        let fired = self.timers.fired(now);
        for &timer in &fired {
            match timer {
                Timer::Group => {
                    self.engine.handle_timeout(now);
                    self.collect(now);
                }
                Timer::Pair(peer) => {
                    if let Some(e) = self.pairs.get_mut(peer) {
                        e.handle_timeout(now);
                    }
                    self.collect_pair(now, peer);
                }
                Timer::Detector => {
                    if let Some(d) = self.detector.as_mut() {
                        // Woken early only if the deadline moved later meanwhile.
                        if d.poll_timeout().is_some_and(|t| t <= now) {
                            d.handle_timeout(now);
                        }
                    }
                }
                Timer::Barrier(i) => {
                    let b = self.barrier_mut(i);
                    if b.poll_timeout().is_some_and(|t| t <= now) {
                        b.handle_timeout(now);
                    }
                }
            }
        }
        self.timers.give_back(fired);
        self.run_detector(now);
        self.advance(now);
        self.pump_controls();
        self.sync_timers();
        self.sync_detector();
    }

    /// The earliest instant at which [`Member::handle_timeout`] has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next_timeout()
    }

    /// Writes the next frame to send into `buf` (at least the MTU long).
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        if self.deliveries.has_top_ups() {
            // Posts the receives the application made room for (a message held unposted is
            // delivered by its post).
            self.collect(now);
            self.sync_timers();
        }
        self.pump_controls();
        if let Some((dst, frame)) = self.late.pop() {
            let len = frame.len().min(buf.len());
            buf[..len].copy_from_slice(&frame[..len]);
            self.stats.frames_sent += 1;
            return Some(Transmit { dst, len });
        }
        let sent = self.engine.poll_transmit(now, buf);
        self.sync_timers();
        if let Some(t) = sent {
            self.stats.frames_sent += 1;
            return Some(Transmit {
                dst: self.addrs.of(t.dst),
                len: t.len,
            });
        }
        let (peer, len) = self.pairs.poll_transmit(now, buf)?;
        self.sync_pair(peer);
        self.stats.frames_sent += 1;
        Some(Transmit {
            dst: self.addrs.of(Dest::Rank(peer)),
            len,
        })
    }

    /// The next event for the application.
    pub fn poll_event(&mut self) -> Option<Event> {
        let ev = self.events.pop_front()?;
        if let Event::Delivered(Message { root, .. }) | Event::Observed { root, .. } = &ev {
            // Room for one more: the next frame or timeout posts another receive.
            self.deliveries.taken(*root);
        }
        Some(ev)
    }

    // ---- internals ----

    /// Keeps the timers of the group engine and the barriers in step with them.
    fn sync_timers(&mut self) {
        self.timers
            .set_or_stop(Timer::Group, self.engine.poll_timeout());
        if std::mem::take(&mut self.barrier_deadlines) {
            for (i, b) in self.barriers.iter().enumerate() {
                self.timers.set_or_stop(Timer::Barrier(i), b.poll_timeout());
            }
        }
    }

    /// Barrier `i`, to be given a call, a frame, a timeout or an eviction: the one way to
    /// change a barrier, so that its frames are pumped and its deadline is read again after.
    ///
    /// Why: a member takes thousands of frames for every one of a barrier, and looking at
    /// both barriers' queues and deadlines after each frame was two or three cache lines
    /// read for nothing per frame, each a miss in a group of thousands.
    fn barrier_mut(&mut self, i: usize) -> &mut Barrier {
        self.barrier_sends = true;
        self.barrier_deadlines = true;
        &mut self.barriers[i]
    }

    /// Keeps the detector's timer in step with it (its deadline is found by a look at every
    /// member's state, so this is done after the calls that may bring it forward only: a
    /// sign of life can only put it off).
    fn sync_detector(&mut self) {
        let at = self.detector.as_ref().and_then(Detector::poll_timeout);
        self.timers.set_or_stop(Timer::Detector, at);
    }

    /// Keeps the timer of the channel with `peer` in step with it.
    fn sync_pair(&mut self, peer: Rank) {
        let at = self.pairs.get(peer).and_then(Engine::poll_timeout);
        self.timers.set_or_stop(Timer::Pair(peer), at);
    }

    /// Keeps every channel's timer in step.
    fn sync_pairs(&mut self) {
        let open: Vec<Rank> = self.pairs.channels().into_iter().map(|(p, _)| p).collect();
        for peer in open {
            self.sync_pair(peer);
        }
    }

    fn push_event(&mut self, ev: Event) {
        if self.events.len() >= EVENT_BOUND
            && !matches!(ev, Event::Delivered(_) | Event::Observed { .. })
        {
            self.stats.events_dropped += 1;
            return;
        }
        self.events.push_back(ev);
        self.stats.peak_events = self.stats.peak_events.max(self.events.len());
    }

    /// Takes the group engine's events: deliveries to the call or the application, control
    /// messages to their machines, stability into the counter.
    fn collect(&mut self, now: Instant) {
        loop {
            self.collect_once(now);
            if !self.deliveries.has_top_ups() {
                return;
            }
            // Posting may deliver messages held unposted: collect again.
            while let Some(root) = self.deliveries.next_top_up() {
                self.top_up(now, root);
            }
        }
    }

    fn collect_once(&mut self, now: Instant) {
        while let Some(ev) = self.engine.poll_event() {
            match ev {
                engine::EngineEvent::Delivered(m) => {
                    self.deliveries.consumed(m.root);
                    if self.deliveries.streaming() {
                        self.deliveries.queued(m.root);
                        self.push_event(Event::Delivered(m));
                    } else {
                        self.deliveries.keep(m.root, m.data);
                    }
                }
                engine::EngineEvent::Observed { root, msg_id, len }
                    if self.deliveries.streaming() =>
                {
                    self.deliveries.consumed(root);
                    self.deliveries.queued(root);
                    self.push_event(Event::Observed { root, msg_id, len });
                }
                // Not kept: a call waiting for it gets its bytes from nowhere (the keep limit
                // is for streams), so it fails as a receive that allowed none of them.
                engine::EngineEvent::Observed { root, msg_id, len } => {
                    self.not_kept(root, msg_id, len, 0)
                }
                engine::EngineEvent::Truncated {
                    root,
                    msg_id,
                    len,
                    max,
                } => self.not_kept(root, msg_id, len, max),
                engine::EngineEvent::Stable { msg_id } => {
                    self.stable_through =
                        Some(self.stable_through.map_or(msg_id, |s| s.max(msg_id)));
                }
                engine::EngineEvent::Control { src, msg, fresh } => {
                    self.route(now, src, msg, fresh)
                }
            }
        }
    }

    /// A message of `root` that was consumed and not kept (a receive allowed `max` of its `len`
    /// bytes): a call waiting for it fails with `Truncated`.
    fn not_kept(&mut self, root: Rank, msg_id: u64, len: usize, max: usize) {
        self.deliveries.consumed(root);
        if self.calls.bcast_from(root) {
            self.calls.finish(Err(MemberError::Truncated {
                root,
                msg_id,
                len,
                max,
            }));
        }
    }

    /// The messages the channel with `peer` delivered: application messages to its inbox,
    /// tree messages to the calls that claim them.
    fn collect_pair(&mut self, now: Instant, peer: Rank) {
        let got = self.pairs.delivered(peer);
        if !got.is_empty() {
            for data in got {
                if data.first() == Some(&P2P_APP) {
                    let mut data = data;
                    data.remove(0);
                    self.pairs.keep(peer, data);
                    continue;
                }
                match tree::decode_tree(&data) {
                    // A call this member finished (or a root that does not exist): a late
                    // or repeated copy.
                    Some(tag) if self.calls.is_stale(tag) => self.stats.dropped += 1,
                    Some(tag) => self.tree.accept(tag, peer, tree::decoded(data)),
                    None => self.stats.dropped += 1,
                }
            }
            let me = self.rank();
            self.pairs.top_up(now, me, peer, self.tree.held(peer));
        }
        self.sync_pair(peer);
    }

    /// Hands a control message to the machine it belongs to.
    fn route(&mut self, now: Instant, src: Rank, msg: Control, fresh: bool) {
        match msg {
            Control::Barrier(b) => {
                let i = usize::from(b.algo == BarrierAlgo::Dissemination);
                if self.barrier_mut(i).handle_frame(now, src, &b).is_err() {
                    self.stats.dropped += 1;
                }
            }
            Control::Notice { body } => self.push_event(Event::Notice { src, body }),
            msg => {
                let size = self.size();
                match (
                    self.detector.as_mut(),
                    DetectorMsg::from_control(&msg, size),
                ) {
                    // A late heartbeat, ping or pong (taken from inside the replay window)
                    // proves nothing of now: its sender's life, or the ages in its table,
                    // may be a recording played back after the sender died.
                    (Some(_), Some(Ok(_))) if !fresh => self.stats.late_liveness += 1,
                    (Some(d), Some(Ok(m))) => {
                        let _ = d.handle_msg(now, src, &m);
                        self.sync_detector();
                    }
                    (_, Some(Err(_))) => self.stats.dropped += 1,
                    _ => self.stats.unhandled += 1,
                }
            }
        }
    }

    /// Moves the barriers' and the detector's frames into the engine's outbox (which drops
    /// and counts what it has no room for, see [`Engine::send_control`]).
    fn pump_controls(&mut self) {
        if std::mem::take(&mut self.barrier_sends) {
            for b in &mut self.barriers {
                while let Some((dst, msg)) = b.poll_transmit() {
                    let _ = self.engine.send_control(dst, msg);
                }
            }
        }
        if let Some(d) = self.detector.as_mut() {
            while let Some((target, m)) = d.poll_transmit() {
                let _ = self.engine.send_control(Dest::Rank(target), m.to_control());
            }
        }
    }

    fn run_detector(&mut self, now: Instant) {
        let Some(d) = self.detector.as_mut() else {
            return;
        };
        let mut dead = Vec::new();
        while let Some(ev) = d.poll_event() {
            match ev {
                DetectorEvent::Dead(r) => dead.push(r),
                DetectorEvent::Suspect(r) => tracing::info!(rank = r.get(), "member suspected"),
                DetectorEvent::Cleared(r) => tracing::info!(rank = r.get(), "suspicion cleared"),
            }
        }
        for r in dead {
            if self.engine.is_live(r) {
                tracing::warn!(
                    rank = r.get(),
                    "member declared dead by the failure detector and evicted"
                );
            }
            self.evict(now, r);
        }
    }
}

impl Machine for Member {
    fn handle_frame(&mut self, now: Instant, src: MacAddr, pdu: &[u8]) {
        Member::handle_frame(self, now, src, pdu)
    }
    fn frames_done(&mut self, now: Instant, end: BatchEnd<'_>) {
        Member::frames_done(self, now, end)
    }
    fn wants_frames_done(&self) -> bool {
        self.engine.wants_frames_done()
    }
    fn link_refs(&mut self, out: &mut Vec<usize>) {
        self.engine.link_refs(out)
    }
    fn handle_timeout(&mut self, now: Instant) {
        Member::handle_timeout(self, now)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        Member::poll_timeout(self)
    }
    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        Member::poll_transmit(self, now, buf)
    }
    fn is_idle(&self) -> bool {
        Member::is_idle(self)
    }
    fn has_data_to_send(&self) -> bool {
        Member::has_data_to_send(self)
    }
    fn prefetch(&self, hint: Prefetch) {
        self.engine.prefetch(hint);
    }
}

#[cfg(test)]
mod tests;
