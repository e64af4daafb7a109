//! One group member as a sans-IO state machine: everything above the protocol engine.
//!
//! A [`Member`] owns the group's [`Engine`], the reliable point-to-point channels to single
//! peers (one two-member engine per peer, created on first use), the two barrier machines,
//! the failure detector and the collective call in progress (`bcast`, `barrier`). Like the
//! engine it has no socket and no clock: its inputs are frames
//! ([`Member::handle_frame`]), the passing of time ([`Member::handle_timeout`]) and the
//! application's calls; its outputs are frames ([`Member::poll_transmit`]), the next instant
//! it wants to be woken ([`Member::poll_timeout`]), events ([`Member::poll_event`]) and the
//! result of the call in progress ([`Member::take_result`]). One driver
//! (the driver of `ethbcast`, the crate above this one) runs it over a real link with the wall clock, or over the
//! simulated switch in virtual time, so every call a user makes is tested on the simulator.
//!
//! This follows quinn-proto's endpoint: the member is the endpoint that takes every frame,
//! checks it once ([`Frame::new_checked`]), and hands it to whichever machine it belongs to
//! (the group engine or a pair channel by its group id; barrier, detector and membership
//! messages by their typed [`Control`] kind). No header byte is read before the CRC check.
//!
//! **Bounded.** Nothing grows with the run's length: deliveries are posted on demand (a
//! `bcast` call posts one receive for its root; a streaming member keeps `prepost` receives
//! posted per root, so at most that many deliveries wait for the application),
//! point-to-point messages likewise (at most [`P2P_WINDOW`] per peer), acknowledgements of
//! this member's broadcasts fold into a counter ([`Member::stable_through`]), and the other
//! events wait in a queue of [`EVENT_BOUND`] entries, beyond which application notices are
//! dropped and counted ([`MemberStats::events_dropped`]). Control frames to send (the
//! engine's, the barriers' and the detector's answers) wait in the engine's outbox of
//! `Config::outbox` frames, beyond which they are dropped and counted
//! ([`crate::engine::Stats::outbox_full`]): a link that takes frames slower than peers ask
//! makes the member answer less, not hold more.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::barrier::{Algorithm as BarrierAlgorithm, Barrier, BarrierConfig};
use crate::detect::{Detector, DetectorConfig, DetectorEvent, Msg};
use crate::engine::{
    self, Config, ConfigError, Dest, Engine, PostError, SendError, SessionEnded,
    Stats as EngineStats,
};
pub use crate::engine::{Algorithm, Message};
use crate::join::LateRoster;
use crate::machine::Machine;
pub use crate::machine::Transmit;
use crate::wire::ethernet::{MacAddr, BROADCAST_MAC};
use crate::wire::{BarrierAlgo, Control, Flags, Frame, Kind, WireError};
use crate::Rank;

mod call;
mod config;
mod error;
mod event;
mod inbox;
mod p2p;
mod tree;

use call::Call;
pub use config::MemberConfig;
pub use error::MemberError;
pub use event::{DestProgress, Done, Event, MemberStats};
use inbox::Inboxes;
use p2p::MAX_RAW_OUT;
pub use p2p::{pair_group, P2P_WINDOW};
use tree::P2P_TREE;
pub use tree::{live_tree, tree_children, tree_parent, TREE_CACHE};

/// Events (evictions, notices, streamed deliveries) a member holds for the application.
pub const EVENT_BOUND: usize = 1024;

/// The tag of a tree broadcast: (root, the root's collective count), unique per call.
type Tag = (Rank, u64);

/// How long after its join a member stays reachable for the join's coordinator, which
/// repeats its roster every [`crate::join::REPEAT`] until every member confirmed it: a
/// member that took the roster and left the link alone (an MPI rank that went on to Open MPI's
/// own collectives) left the coordinator waiting for its join timeout when its confirmation
/// was lost. Two seconds are 200 repeats.
pub const LATE_ROSTER_SERVE: Duration = Duration::from_secs(2);

/// One group member (sans-IO). See the module documentation.
#[derive(Debug)]
pub struct Member {
    engine: Engine,
    /// The point-to-point channels opened so far, by peer (ordered, so that runs repeat).
    pairs: BTreeMap<Rank, Engine>,
    /// The group id of the point-to-point channel with each peer, sorted by id (a binary
    /// search: 8 bytes a peer, where a hash map took 18).
    pair_groups: Box<[(u32, Rank)]>,
    /// Receives posted on each peer's channel and not consumed yet.
    p2p_posted: Vec<u8>,
    /// Application messages received point to point and not taken, per peer.
    p2p_inbox: Inboxes,
    /// Tree broadcasts received and not claimed by a call yet (from any peer), and how many
    /// of them each peer sent.
    tree_inbox: VecDeque<(Tag, Rank, Vec<u8>)>,
    tree_held: Vec<u8>,
    /// Tree broadcasts this member sent or forwarded, and to whom.
    tree_cache: VecDeque<(Tag, Vec<u8>, Vec<Rank>)>,
    barriers: [Barrier; 2],
    detector: Option<Detector>,
    peers: Arc<[MacAddr]>,
    group_mac: MacAddr,
    prepost: usize,
    late: Option<LateRoster>,
    /// Until when this member stays reachable for the join's coordinator, which repeats its
    /// roster until every member confirmed it (see [`LATE_ROSTER_SERVE`]).
    late_until: Option<Instant>,
    /// The coordinator's rank: once a frame of its session arrives, it has every
    /// confirmation (it enters the session only then) and `late_until` ends.
    coordinator: Option<Rank>,
    /// Whose broadcasts and point-to-point messages this member takes, by rank (see
    /// [`MemberConfig::senders`]).
    takes: Vec<bool>,
    /// Whole frames to send before the engines' (confirmations of a repeated roster).
    raw_out: VecDeque<(MacAddr, Vec<u8>)>,
    /// Receives posted on the group engine and not consumed yet, per root.
    posted: Vec<u32>,
    /// Messages delivered by the group engine and not claimed by a call yet, per root.
    inbox: Inboxes,
    /// Streamed deliveries waiting in `events`, per root.
    queued: Vec<u32>,
    /// Roots whose deliveries the application took since the last top-up.
    top_ups: Vec<Rank>,
    /// Collective calls made so far per root (MPI order makes them agree at every member).
    collectives: Vec<u64>,
    call: Option<Call>,
    result: Option<Result<Done, MemberError>>,
    evicted: Vec<(Rank, Instant)>,
    events: VecDeque<Event>,
    stable_through: Option<u64>,
    /// The pair that sent last, so that no channel starves the others.
    pair_cursor: Rank,
    stats: MemberStats,
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
            Barrier::new(c).map_err(|e| MemberError::Barrier(e.to_string()))
        };
        let barriers = [
            barrier(BarrierAlgorithm::Broadcast {
                arity: barrier_arity.max(1),
            })?,
            barrier(BarrierAlgorithm::Dissemination)?,
        ];
        let detector = match detector {
            Some(mut d) => {
                d.rank = rank;
                d.size = size;
                let mut d = Detector::new(d).map_err(|e| MemberError::Detector(e.to_string()))?;
                d.handle_timeout(now);
                Some(d)
            }
            None => None,
        };
        let mut pair_groups: Vec<(u32, Rank)> = Rank::all(size)
            .filter(|&r| r != rank)
            .map(|r| (pair_group(group, rank, r), r))
            .collect();
        // Of two peers whose channels' ids collide, the higher rank's channel is the one found.
        pair_groups.sort_unstable_by_key(|&(g, r)| (g, std::cmp::Reverse(r)));
        pair_groups.dedup_by_key(|&mut (g, _)| g);
        let coordinator = late
            .as_ref()
            .and_then(|l| peers.iter().position(|m| *m == l.coordinator()))
            .map(|r| Rank::new(r as u16));
        let mut engine = Engine::new(ecfg)?;
        if let Some(s) = &senders {
            engine.take_streams_from(s);
        }
        Ok(Member {
            engine,
            pairs: BTreeMap::new(),
            pair_groups: pair_groups.into_boxed_slice(),
            p2p_posted: vec![0; n],
            p2p_inbox: Inboxes::default(),
            tree_inbox: VecDeque::new(),
            tree_held: vec![0; n],
            tree_cache: VecDeque::new(),
            barriers,
            detector,
            peers,
            group_mac,
            prepost,
            late_until: late.as_ref().map(|_| now + LATE_ROSTER_SERVE),
            coordinator,
            late,
            takes: match senders {
                None => vec![true; n],
                Some(s) => (0..n).map(|r| s.contains(&Rank::new(r as u16))).collect(),
            },
            raw_out: VecDeque::new(),
            posted: vec![0; n],
            inbox: Inboxes::default(),
            queued: vec![0; n],
            top_ups: Vec::new(),
            collectives: vec![0; n],
            call: None,
            result: None,
            evicted: Vec::new(),
            events: VecDeque::new(),
            stable_through: None,
            pair_cursor: Rank::new(0),
            stats: MemberStats::default(),
        })
    }

    // ---- inspection ----

    /// Hands `observer` the bytes of `root`'s messages, in order, as they are consumed (see
    /// [`crate::engine::Engine::observe`]).
    pub fn observe(&mut self, now: Instant, root: Rank, observer: crate::engine::Observer) {
        self.engine.observe(now, root, observer)
    }

    /// Keeps at most `keep` bytes of `root`'s messages; longer ones go to the observer alone
    /// and come as [`Event::Observed`] (see [`crate::engine::Engine::keep_at_most`]).
    pub fn keep_at_most(&mut self, now: Instant, root: Rank, keep: usize) {
        self.engine.keep_at_most(now, root, keep)
    }

    /// Leaves in the link the frames of `root`'s stream that would be copied into the window
    /// (see [`crate::engine::Engine::leave_in_link`]).
    pub fn leave_in_link(&mut self, now: Instant, root: Rank) {
        self.engine.leave_in_link(now, root)
    }

    /// A batch of frames ends (see [`crate::engine::Engine::frames_done`]).
    pub fn frames_done(&mut self, now: Instant, end: crate::machine::BatchEnd<'_>) {
        self.engine.frames_done(now, end)
    }

    /// The peer whose point-to-point channel has the group id `group`, if any.
    fn pair_peer(&self, group: u32) -> Option<Rank> {
        let i = self
            .pair_groups
            .binary_search_by_key(&group, |&(g, _)| g)
            .ok()?;
        Some(self.pair_groups[i].1)
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
            .or_else(|| self.pairs.values().find_map(Engine::session_ended))
    }
    /// The point-to-point channels open (made by this member's sends or by a peer's frames
    /// that passed their tag), with the heap bytes of their buffers.
    pub fn channels(&self) -> Vec<(Rank, usize)> {
        self.pairs
            .iter()
            .map(|(&p, e)| (p, e.heap_bytes()))
            .collect()
    }
    /// Whether `rank` is still a live member.
    pub fn is_live(&self, rank: Rank) -> bool {
        self.engine.is_live(rank)
    }
    /// The MAC address of `rank`.
    pub fn mac_of(&self, rank: Rank) -> Option<MacAddr> {
        self.peers.get(rank.index()).copied()
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
            last_heard: l.last_heard,
            last_progress: l.last_progress,
        })
    }
    /// Until when this member should stay reachable for members that may still need it
    /// although it owes nothing it knows of: those that missed the last barrier's release
    /// ([`Barrier::serves_stragglers_until`] of either barrier), and the join's coordinator
    /// while it may be repeating its roster for a confirmation of this member that was lost
    /// ([`LATE_ROSTER_SERVE`] after the join, unless a frame of the coordinator's session
    /// came first).
    pub fn serves_stragglers_until(&self) -> Option<Instant> {
        let coordinator_in_session = self
            .coordinator
            .is_some_and(|c| self.engine.last_heard(c).is_some());
        let late = self.late_until.filter(|_| !coordinator_in_session);
        self.barriers
            .iter()
            .filter_map(Barrier::serves_stragglers_until)
            .chain(late)
            .max()
    }

    /// True when nothing this member sent (to the group or point-to-point) is unacknowledged.
    pub fn is_idle(&self) -> bool {
        self.engine.is_idle() && self.pairs.values().all(|e| e.is_idle())
    }

    /// Whether this member holds frames it has not acknowledged to their roots: they will ask
    /// (their retransmission timers' polls), so a thread that serves the member between calls
    /// stays to answer.
    pub fn owes_acks(&self) -> bool {
        self.engine.owes_acks() || self.pairs.values().any(Engine::owes_acks)
    }

    /// Acknowledges every frame held and not yet acknowledged, now (see [`Engine::ack_all`]).
    pub fn ack_all(&mut self, now: Instant) {
        self.engine.ack_all(now);
        for e in self.pairs.values_mut() {
            e.ack_all(now);
        }
    }

    /// True if frames of data (fresh or repairs, to the group or point-to-point) are waiting
    /// to be sent, as opposed to control frames only (acknowledgements, requests).
    pub fn has_data_to_send(&self) -> bool {
        self.engine.has_data_to_send() || self.pairs.values().any(Engine::has_data_to_send)
    }

    /// True when every message this member handed over (to the group or point-to-point) has
    /// all its frames in a retransmission buffer: none waits in a send queue for room in the
    /// window or for a pull. What is in the buffer leaves at the next flush.
    pub fn send_queues_empty(&self) -> bool {
        self.engine.sender().queued() == 0 && self.pairs.values().all(|e| e.sender().queued() == 0)
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
        self.pairs.remove(&rank);
        let r = rank.index();
        self.p2p_posted[r] = 0;
        self.p2p_inbox[r].clear();
        self.posted[r] = 0;
        for b in &mut self.barriers {
            b.evicted(now, rank);
        }
        self.reforward_trees(now);
        self.push_event(Event::Evicted { rank });
        self.advance(now);
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
            let claimed = frame.src();
            let relayed = frame.kind() == Kind::Repair && frame.flags().contains(Flags::P2P);
            let from = self.peers.get(claimed.index());
            // A peer repair keeps the root as its source but comes from the fellow member
            // this one asks for that root's frames.
            let relayer = self
                .engine
                .repair_peer(claimed)
                .filter(|&p| self.peers.get(p.index()) == Some(&src));
            // Who this frame proves alive: the rank whose address sent it.
            let speaker = if from == Some(&src) {
                claimed
            } else {
                match relayer.filter(|_| relayed) {
                    Some(peer) => peer,
                    None => {
                        self.stats.mac_mismatch += 1;
                        return;
                    }
                }
            };
            if frame.kind().is_data() && self.takes.get(claimed.index()) != Some(&true) {
                // A stream this member does not take: nothing is made for it.
                self.stats.dropped += 1;
                return;
            }
            match self.engine.handle_checked(now, &frame) {
                Ok(()) => {
                    self.stats.accepted += 1;
                    // New data proves its sender spoke (a duplicate is refused); a control
                    // frame does only if its counter advanced the replay window, which the
                    // engine then notes as heard now. A late one (inside the window, never
                    // seen) may have been held back and replayed by anybody on the segment.
                    let spoke =
                        frame.kind().is_data() || self.engine.last_heard(claimed) == Some(now);
                    if let Some(d) = self.detector.as_mut().filter(|_| spoke) {
                        d.mark_alive(now, speaker);
                    }
                }
                Err(_) => self.stats.dropped += 1,
            }
            if self.prepost > 0
                && frame.kind().is_data()
                && !relayed
                && self.engine.receiver(claimed).is_some()
            {
                // A stream is created when a frame of its root first passes the engine's
                // checks (its tag, with a key): post for it then, and never for a frame
                // that failed them.
                self.top_up(now, claimed);
            }
            self.collect(now);
        } else if let Some(peer) = self.pair_peer(group) {
            if self.peers[peer.index()] != src {
                self.stats.mac_mismatch += 1;
                return;
            }
            if !self.is_live(peer) || !self.takes[peer.index()] {
                self.stats.dropped += 1;
                return;
            }
            if !self.pairs.contains_key(&peer) {
                // The channel is made for a frame that passes its tag, not before: a host
                // without the key, speaking as a member, makes no channel. (Once it exists
                // its engine checks the tag, once a frame as for the group.)
                let forged = match &self.engine.config().key {
                    Some(key) => !frame.verify(key),
                    None => false,
                };
                if forged {
                    self.stats.dropped += 1;
                    return;
                }
            }
            match self.pair(now, peer).handle_checked(now, &frame) {
                Ok(()) => {
                    self.stats.accepted += 1;
                    // As above: new data, or a control counter that advanced the window.
                    let spoke = frame.kind().is_data()
                        || self
                            .pairs
                            .get(&peer)
                            .is_some_and(|e| e.last_heard(peer) == Some(now));
                    if let Some(d) = self.detector.as_mut().filter(|_| spoke) {
                        d.mark_alive(now, peer);
                    }
                }
                Err(_) => self.stats.dropped += 1,
            }
            self.collect_pair(now, peer);
        } else if frame.kind() == Kind::Join {
            // The join's coordinator repeats its roster until every member confirmed it.
            match self.late.as_ref().and_then(|l| l.answer(src, pdu)) {
                Some(confirm) if self.raw_out.len() < MAX_RAW_OUT => {
                    self.raw_out.push_back(confirm)
                }
                _ => self.stats.foreign += 1,
            }
            return;
        } else {
            self.stats.foreign += 1;
            return;
        }
        self.advance(now);
        // The barriers' and the detector's answers wait in the engine's bounded outbox, not
        // in their own queues until the link next takes a frame.
        self.pump_controls();
    }

    /// Lets time pass: fires the engines', the detector's and the barriers' timers.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.engine.handle_timeout(now);
        self.collect(now);
        let open: Vec<Rank> = self.pairs.keys().copied().collect();
        for peer in open {
            if let Some(e) = self.pairs.get_mut(&peer) {
                e.handle_timeout(now);
            }
            self.collect_pair(now, peer);
        }
        if let Some(d) = self.detector.as_mut() {
            if d.poll_timeout().is_some_and(|t| t <= now) {
                d.handle_timeout(now);
            }
        }
        self.run_detector(now);
        for b in &mut self.barriers {
            if b.poll_timeout().is_some_and(|t| t <= now) {
                b.handle_timeout(now);
            }
        }
        self.advance(now);
        self.pump_controls();
    }

    /// The earliest instant at which [`Member::handle_timeout`] has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.pairs
            .values()
            .filter_map(|e| e.poll_timeout())
            .chain(self.engine.poll_timeout())
            .chain(self.detector.as_ref().and_then(|d| d.poll_timeout()))
            .chain(self.barriers.iter().filter_map(|b| b.poll_timeout()))
            .min()
    }

    /// Writes the next frame to send into `buf` (at least the MTU long).
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        if !self.top_ups.is_empty() {
            // Posts the receives the application made room for (a message held unposted is
            // delivered by its post).
            self.collect(now);
        }
        self.pump_controls();
        if let Some((dst, frame)) = self.raw_out.pop_front() {
            let len = frame.len().min(buf.len());
            buf[..len].copy_from_slice(&frame[..len]);
            self.stats.frames_sent += 1;
            return Some(Transmit { dst, len });
        }
        if let Some(t) = self.engine.poll_transmit(now, buf) {
            self.stats.frames_sent += 1;
            let dst = match t.dst {
                Dest::All => self.group_mac,
                Dest::Rank(r) => self.peers[r.index()],
            };
            return Some(Transmit { dst, len: t.len });
        }
        // Round robin from the channel after the last one that sent.
        let cursor = self.pair_cursor;
        let mut sent = None;
        for (&peer, e) in self
            .pairs
            .range_mut(Rank::new(cursor.get().saturating_add(1))..)
        {
            if let Some(t) = e.poll_transmit(now, buf) {
                sent = Some((peer, t.len));
                break;
            }
        }
        if sent.is_none() {
            for (&peer, e) in self.pairs.range_mut(..=cursor) {
                if let Some(t) = e.poll_transmit(now, buf) {
                    sent = Some((peer, t.len));
                    break;
                }
            }
        }
        let (peer, len) = sent?;
        self.pair_cursor = peer;
        self.stats.frames_sent += 1;
        Some(Transmit {
            dst: self.peers[peer.index()],
            len,
        })
    }

    /// The next event for the application.
    pub fn poll_event(&mut self) -> Option<Event> {
        let ev = self.events.pop_front()?;
        if let Event::Delivered(Message { root, .. }) | Event::Observed { root, .. } = &ev {
            // Room for one more: the next frame or timeout posts another receive.
            let r = root.index();
            self.queued[r] = self.queued[r].saturating_sub(1);
            self.top_ups.push(*root);
        }
        Some(ev)
    }

    // ---- internals ----

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
            if self.top_ups.is_empty() {
                return;
            }
            // Posting may deliver messages held unposted: collect again.
            while let Some(root) = self.top_ups.pop() {
                self.top_up(now, root);
            }
        }
    }

    fn collect_once(&mut self, now: Instant) {
        while let Some(ev) = self.engine.poll_event() {
            match ev {
                engine::Event::Delivered(m) => {
                    let (root, r) = (m.root, m.root.index());
                    self.posted[r] = self.posted[r].saturating_sub(1);
                    if self.prepost > 0 {
                        self.queued[r] += 1;
                        self.push_event(Event::Delivered(m));
                        self.top_ups.push(root);
                    } else {
                        self.inbox[r].push_back(m.data);
                    }
                }
                engine::Event::Observed { root, msg_id, len } if self.prepost > 0 => {
                    let r = root.index();
                    self.posted[r] = self.posted[r].saturating_sub(1);
                    self.queued[r] += 1;
                    self.push_event(Event::Observed { root, msg_id, len });
                    self.top_ups.push(root);
                }
                // Not kept: a call waiting for it gets its bytes from nowhere (the keep limit
                // is for streams), so it fails as a receive that allowed none of them.
                engine::Event::Observed { root, msg_id, len } => {
                    self.not_kept(root, msg_id, len, 0)
                }
                engine::Event::Truncated {
                    root,
                    msg_id,
                    len,
                    max,
                } => self.not_kept(root, msg_id, len, max),
                engine::Event::Stable { msg_id } => {
                    self.stable_through =
                        Some(self.stable_through.map_or(msg_id, |s| s.max(msg_id)));
                }
                engine::Event::Control { src, msg, fresh } => self.route(now, src, msg, fresh),
            }
        }
    }

    /// A message of `root` that was consumed and not kept (a receive allowed `max` of its `len`
    /// bytes): a call waiting for it fails with `Truncated`.
    fn not_kept(&mut self, root: Rank, msg_id: u64, len: usize, max: usize) {
        let r = root.index();
        self.posted[r] = self.posted[r].saturating_sub(1);
        if matches!(self.call, Some(Call::Bcast { root: cr, .. }) if cr == root) {
            self.call = None;
            self.result = Some(Err(MemberError::Truncated {
                root,
                msg_id,
                len,
                max,
            }));
        }
    }

    /// Hands a control message to the machine it belongs to.
    fn route(&mut self, now: Instant, src: Rank, msg: Control, fresh: bool) {
        match msg {
            Control::Barrier(b) => {
                let i = usize::from(b.algo == BarrierAlgo::Dissemination);
                if self.barriers[i].handle_frame(now, src, &b).is_err() {
                    self.stats.dropped += 1;
                }
            }
            Control::Notice { body } => self.push_event(Event::Notice { src, body }),
            msg => {
                let size = self.size();
                match (self.detector.as_mut(), Msg::from_control(&msg, size)) {
                    // A late heartbeat, ping or pong (taken from inside the replay window)
                    // proves nothing of now: its sender's life, or the ages in its table,
                    // may be a recording played back after the sender died.
                    (Some(_), Some(Ok(_))) if !fresh => self.stats.late_liveness += 1,
                    (Some(d), Some(Ok(m))) => {
                        let _ = d.handle_msg(now, src, &m);
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
        for b in &mut self.barriers {
            while let Some((dst, msg)) = b.poll_transmit() {
                let _ = self.engine.send_control(dst, msg);
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
    fn frames_done(&mut self, now: Instant, end: crate::machine::BatchEnd<'_>) {
        Member::frames_done(self, now, end)
    }
    fn wants_frames_done(&self) -> bool {
        self.engine.is_observed()
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
}

#[cfg(test)]
mod tests;
