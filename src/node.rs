//! A member on a real link: the sans-IO engine driven by a [`Link`] and the wall clock.
//!
//! This is the thin I/O layer. [`Node::poll`] does one turn of the loop the engine asks for:
//! send what the engine wants sent, wait for frames no longer than the engine's next timer,
//! feed every frame in, fire due timers, send again. The blocking calls ([`Node::recv_from`],
//! [`Node::wait_idle`], [`Node::next_event`]) are loops of `poll` with a deadline, so no call
//! waits forever.
//!
//! Ranks map to MAC addresses through the peer table given at construction. A frame whose
//! source MAC is not the MAC of the rank it claims is dropped and counted: on a shared segment
//! that is the cheapest defence against a confused or spoofing host (the group key is the real
//! one).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::barrier::{Algorithm as BarrierAlgorithm, Barrier, BarrierConfig};
use crate::detect::{Detector, DetectorConfig, DetectorEvent, Msg};
use crate::eqa::Rank;
use crate::link::{Link, LinkError, MacAddr, BROADCAST_MAC};
use crate::proto::{Algo, Config, ConfigError, Dest, Engine, Event, PostError, SendError};
use crate::wire::{BarrierAlgo, Control, Flags, Kind};

/// Errors of a member on a real link.
#[derive(Debug, Error)]
pub enum NodeError {
    /// The link failed.
    #[error(transparent)]
    Link(#[from] LinkError),
    /// The engine configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The broadcast could not be queued.
    #[error(transparent)]
    Send(#[from] SendError),
    /// The receive could not be posted.
    #[error(transparent)]
    Post(#[from] PostError),
    /// The peer table does not match the group size.
    #[error("peer table has {got} MAC addresses for a group of {want}")]
    Peers {
        /// Entries given.
        got: usize,
        /// Group size.
        want: usize,
    },
    /// Nothing arrived before the deadline.
    #[error("timed out after {0:?} waiting for {1}")]
    Timeout(Duration, &'static str),
    /// The member we wait for was declared dead by the failure detector and evicted; what it
    /// had sent only partly is never delivered.
    #[error("rank {0} failed (declared dead by the failure detector and evicted)")]
    PeerDead(Rank),
    /// The failure detector configuration is invalid.
    #[error("failure detector: {0}")]
    Detector(String),
    /// The barrier configuration or call is invalid.
    #[error("barrier: {0}")]
    Barrier(String),
    /// A posted receive was smaller than the message.
    #[error("message {msg_id} from root {root} has {len} bytes, the receive allowed {max}")]
    Truncated {
        /// Root.
        root: Rank,
        /// Message id.
        msg_id: u64,
        /// Real length.
        len: usize,
        /// Allowed length.
        max: usize,
    },
}

/// Counters of the I/O layer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// Frames handed to the link.
    pub frames_sent: u64,
    /// Frames received from the link.
    pub frames_received: u64,
    /// Frames whose source MAC did not match the rank they claim.
    pub mac_mismatch: u64,
}

/// One member: an engine, a link and the rank-to-MAC table.
///
/// Besides the group's engine, a node keeps one two-member engine per peer it exchanges
/// point-to-point messages with (created on first use, by either side): a reliable
/// point-to-point channel built from the same protocol, whose "broadcast" goes to that peer's
/// MAC only. The binomial-tree broadcast and fail-over ride on these channels.
pub struct Node {
    engine: Engine,
    detector: Option<Detector>,
    /// Barrier state machines: [0] the broadcast barrier, [1] the dissemination barrier.
    barriers: [Barrier; 2],
    evicted: Vec<(Rank, Instant)>,
    pairs: Vec<Option<Engine>>,
    pair_groups: HashMap<u32, Rank>,
    link: Box<dyn Link + Send>,
    peers: Vec<MacAddr>,
    buf: Vec<u8>,
    events: VecDeque<Event>,
    pair_events: VecDeque<(Rank, Event)>,
    stats: NodeStats,
}

/// Group id of the point-to-point channel between ranks `a` and `b` of group `group`.
pub fn pair_group(group: u32, a: Rank, b: Rank) -> u32 {
    let (lo, hi) = (a.min(b), a.max(b));
    let x = (u64::from(group) << 32) | (u64::from(lo) << 16) | u64::from(hi);
    // A fixed mix (splitmix64 finaliser) keeps pair ids apart from group ids in practice.
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ((z ^ (z >> 31)) as u32) | 1
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("rank", &self.engine.config().rank)
            .field("stats", &self.stats)
            .finish()
    }
}

impl Node {
    /// A member with `cfg` on `link`; `peers[r]` is the MAC address of rank `r`.
    pub fn new(
        mut cfg: Config,
        link: Box<dyn Link + Send>,
        peers: Vec<MacAddr>,
    ) -> Result<Node, NodeError> {
        if peers.len() != usize::from(cfg.size) {
            return Err(NodeError::Peers {
                got: peers.len(),
                want: usize::from(cfg.size),
            });
        }
        cfg.max_pdu = cfg.max_pdu.min(link.max_pdu());
        let buf = vec![0u8; cfg.max_pdu.max(crate::wire::OVERHEAD)];
        let pair_groups = (0..cfg.size)
            .filter(|&r| r != cfg.rank)
            .map(|r| (pair_group(cfg.group, cfg.rank, r), r))
            .collect();
        let mut bc = BarrierConfig::new(cfg.rank, cfg.size);
        bc.algorithm = BarrierAlgorithm::Broadcast { arity: 4 };
        let mut dc = BarrierConfig::new(cfg.rank, cfg.size);
        dc.algorithm = BarrierAlgorithm::Dissemination;
        let barriers = [
            Barrier::new(bc).map_err(|e| NodeError::Barrier(e.to_string()))?,
            Barrier::new(dc).map_err(|e| NodeError::Barrier(e.to_string()))?,
        ];
        Ok(Node {
            detector: None,
            barriers,
            evicted: Vec::new(),
            pairs: (0..cfg.size).map(|_| None).collect(),
            pair_groups,
            engine: Engine::new(cfg)?,
            link,
            peers,
            buf,
            events: VecDeque::new(),
            pair_events: VecDeque::new(),
            stats: NodeStats::default(),
        })
    }

    /// Turns on failure detection: gossip heartbeats, a confirmation ping, then eviction of
    /// members declared dead (from every LDP, so broadcasts complete for the survivors).
    pub fn enable_detector(&mut self, mut cfg: DetectorConfig) -> Result<(), NodeError> {
        cfg.rank = self.rank();
        cfg.size = self.engine.config().size;
        let mut d = Detector::new(cfg).map_err(|e| NodeError::Detector(e.to_string()))?;
        d.handle_timeout(Instant::now());
        self.detector = Some(d);
        Ok(())
    }

    /// The failure detector, if enabled.
    pub fn detector(&self) -> Option<&Detector> {
        self.detector.as_ref()
    }

    /// Members evicted so far, with the instant of their eviction.
    pub fn evicted(&self) -> &[(Rank, Instant)] {
        &self.evicted
    }

    /// Evicts `rank` now (also called by the failure detector).
    pub fn evict(&mut self, rank: Rank) {
        let now = Instant::now();
        if self.engine.evict(now, rank) {
            self.evicted.push((rank, now));
            tracing::warn!(rank, "member evicted");
        }
        if let Some(d) = self.detector.as_mut() {
            d.evicted(rank);
        }
        if let Some(p) = self.pairs.get_mut(usize::from(rank)) {
            *p = None;
        }
        for b in &mut self.barriers {
            b.evicted(now, rank);
        }
    }

    /// Sets the arity of the broadcast barrier's combining tree (before the first barrier).
    pub fn set_barrier_arity(&mut self, arity: u16) -> Result<(), NodeError> {
        let cfg = self.engine.config();
        let mut bc = BarrierConfig::new(cfg.rank, cfg.size);
        bc.algorithm = BarrierAlgorithm::Broadcast {
            arity: arity.max(1),
        };
        self.barriers[0] = Barrier::new(bc).map_err(|e| NodeError::Barrier(e.to_string()))?;
        Ok(())
    }

    /// Enters the next barrier of kind `which` (0: broadcast, 1: dissemination) and waits until
    /// it is released. Barrier frames are handled in every `poll`, so a member that left a
    /// barrier keeps answering late members whatever call it is in.
    pub fn barrier(&mut self, which: usize, timeout: Duration) -> Result<(), NodeError> {
        let b = &mut self.barriers[which.min(1)];
        let epoch = b.next_epoch();
        b.enter(Instant::now(), epoch)
            .map_err(|e| NodeError::Barrier(e.to_string()))?;
        self.pump_barriers();
        self.flush()?;
        self.wait_for(timeout, "the barrier release", None, |n| {
            n.barriers[which.min(1)]
                .is_released(epoch)
                .then_some(Ok(()))
        })
    }

    fn pump_barriers(&mut self) {
        for b in self.barriers.iter_mut() {
            while let Some((dst, msg)) = b.poll_transmit() {
                let _ = self.engine.send_control(dst, msg);
            }
        }
    }

    /// Hands control frames of the detector and the barriers to them (they never reach the
    /// application) and queues every other event.
    fn route(&mut self, now: Instant, ev: Event) {
        if let Event::Control { src, msg } = &ev {
            if let Control::Barrier(b) = msg {
                let i = usize::from(b.algo == BarrierAlgo::Dissemination);
                let _ = self.barriers[i].handle_frame(now, *src, b);
                return;
            }
            if let Some(d) = self.detector.as_mut() {
                if let Some(m) = Msg::from_control(msg, self.engine.config().size) {
                    if let Ok(m) = m {
                        let _ = d.handle_msg(now, *src, &m);
                    }
                    return;
                }
            }
        }
        self.events.push_back(ev);
    }

    fn run_barriers(&mut self, now: Instant) {
        for b in &mut self.barriers {
            if b.poll_timeout().is_some_and(|t| t <= now) {
                b.handle_timeout(now);
            }
        }
        self.pump_barriers();
    }

    fn is_evicted(&self, rank: Rank) -> bool {
        !self.engine.is_live(rank)
    }

    fn run_detector(&mut self, now: Instant) {
        let Some(d) = self.detector.as_mut() else {
            return;
        };
        if d.poll_timeout().is_some_and(|t| t <= now) {
            d.handle_timeout(now);
        }
        let mut out = Vec::new();
        while let Some(t) = d.poll_transmit() {
            out.push(t);
        }
        let mut dead = Vec::new();
        while let Some(ev) = d.poll_event() {
            match ev {
                DetectorEvent::Dead(r) => dead.push(r),
                DetectorEvent::Suspect(r) => tracing::info!(rank = r, "member suspected"),
                DetectorEvent::Cleared(r) => tracing::info!(rank = r, "suspicion cleared"),
            }
        }
        for (target, m) in out {
            let _ = self.engine.send_control(Dest::Rank(target), m.to_control());
        }
        for r in dead {
            self.evict(r);
        }
    }

    /// The engine (configuration, counters, cursors).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }
    /// Mutable access to the engine, for the layers above (control frames, eviction).
    pub fn engine_mut(&mut self) -> &mut Engine {
        &mut self.engine
    }
    /// I/O counters.
    pub fn stats(&self) -> NodeStats {
        self.stats
    }
    /// This member's rank.
    pub fn rank(&self) -> Rank {
        self.engine.config().rank
    }

    /// Queues a broadcast; frames leave on the next `poll`.
    pub fn bcast(&mut self, data: Vec<u8>, algo: Algo) -> Result<u64, NodeError> {
        let id = self.engine.bcast(Instant::now(), data, algo)?;
        self.flush()?;
        Ok(id)
    }

    fn pair_mut(&mut self, peer: Rank) -> &mut Engine {
        let cfg = self.engine.config();
        let (me, group) = (cfg.rank, cfg.group);
        let mut pc = cfg.clone();
        pc.group = pair_group(group, me, peer);
        pc.size = 2;
        pc.rank = u16::from(me > peer);
        pc.auto_post = true;
        self.pairs[usize::from(peer)].get_or_insert_with(|| {
            Engine::new(pc).expect("a valid group config gives a valid pair config")
        })
    }

    /// Sends `data` to `peer` alone over the reliable point-to-point channel.
    pub fn send_to(&mut self, peer: Rank, data: Vec<u8>) -> Result<u64, NodeError> {
        if usize::from(peer) >= self.peers.len() || peer == self.rank() {
            return Err(NodeError::Post(PostError::NotMember(peer)));
        }
        if self.is_evicted(peer) {
            return Err(NodeError::PeerDead(peer));
        }
        let id = self
            .pair_mut(peer)
            .bcast(Instant::now(), data, Algo::Simple)?;
        self.flush()?;
        Ok(id)
    }

    /// Waits for the next point-to-point message from `peer`.
    pub fn recv_p2p_from(
        &mut self,
        peer: Rank,
        timeout: Duration,
    ) -> Result<(u64, Vec<u8>), NodeError> {
        self.wait_for(timeout, "a point-to-point message", Some(peer), |n| {
            n.take_pair_delivery(peer).map(|(id, data)| Ok((id, data)))
        })
    }

    fn take_pair_delivery(&mut self, peer: Rank) -> Option<(u64, Vec<u8>)> {
        self.take_pair_delivery_tagged(peer, &[])
    }

    /// Takes the oldest point-to-point message of `peer` that starts with `tag`, and returns it
    /// without the tag. Messages with other tags stay queued for the calls they belong to.
    fn take_pair_delivery_tagged(&mut self, peer: Rank, tag: &[u8]) -> Option<(u64, Vec<u8>)> {
        let p = self.pair_events.iter().position(|(r, e)| {
            *r == peer && matches!(e, Event::Delivered { data, .. } if data.starts_with(tag))
        })?;
        match self.pair_events.remove(p) {
            Some((
                _,
                Event::Delivered {
                    msg_id, mut data, ..
                },
            )) => {
                data.drain(..tag.len());
                Some((msg_id, data))
            }
            _ => None,
        }
    }

    /// Waits for the next point-to-point message from `peer` that starts with `tag` and returns
    /// it without the tag (collectives tag their messages so that consecutive ones never mix).
    pub fn recv_p2p_tagged(
        &mut self,
        peer: Rank,
        tag: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>, NodeError> {
        self.wait_for(timeout, "a point-to-point message", Some(peer), |n| {
            n.take_pair_delivery_tagged(peer, tag)
                .map(|(_, data)| Ok(data))
        })
    }

    /// Polls until `ready` gives a result, `watched` is evicted, or `timeout` passes: the one
    /// loop behind every blocking call, so none waits forever.
    fn wait_for<T>(
        &mut self,
        timeout: Duration,
        what: &'static str,
        watched: Option<Rank>,
        mut ready: impl FnMut(&mut Node) -> Option<Result<T, NodeError>>,
    ) -> Result<T, NodeError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(r) = ready(self) {
                return r;
            }
            if let Some(w) = watched.filter(|&w| self.is_evicted(w)) {
                return Err(NodeError::PeerDead(w));
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(NodeError::Timeout(timeout, what));
            }
            self.poll((deadline - now).min(Duration::from_millis(50)))?;
        }
    }

    fn flush(&mut self) -> Result<(), NodeError> {
        let now = Instant::now();
        while let Some(t) = self.engine.poll_transmit(now, &mut self.buf) {
            let dst = match t.dst {
                Dest::All => BROADCAST_MAC,
                Dest::Rank(r) => self.peers[usize::from(r)],
            };
            self.link.send(dst, &self.buf[..t.len])?;
            self.stats.frames_sent += 1;
        }
        for (peer, pair) in self.pairs.iter_mut().enumerate() {
            if let Some(e) = pair {
                while let Some(t) = e.poll_transmit(now, &mut self.buf) {
                    self.link.send(self.peers[peer], &self.buf[..t.len])?;
                    self.stats.frames_sent += 1;
                }
            }
        }
        self.link.flush()?;
        Ok(())
    }

    /// Sends whatever the engines have to send and waits up to `timeout` until the link has
    /// handed all of it to the device (see [`crate::link::Link::drain`]); returns whether it
    /// did. For a member that sends its last words and exits.
    pub fn drain(&mut self, timeout: Duration) -> Result<bool, NodeError> {
        self.flush()?;
        Ok(self.link.drain(timeout)?)
    }

    /// One turn: send, wait up to `wait` (or the engine's next timer, if sooner) for frames,
    /// handle them and the timers, send again.
    pub fn poll(&mut self, wait: Duration) -> Result<(), NodeError> {
        self.flush()?;
        let now = Instant::now();
        let next = self
            .pairs
            .iter()
            .flatten()
            .filter_map(|e| e.poll_timeout())
            .chain(self.engine.poll_timeout())
            .chain(self.detector.as_ref().and_then(|d| d.poll_timeout()))
            .chain(self.barriers.iter().filter_map(|b| b.poll_timeout()))
            .min();
        let wait = match next {
            Some(t) => wait.min(t.saturating_duration_since(now)),
            None => wait,
        };
        let main_group = self.engine.config().group;
        let mut heard: Vec<Rank> = Vec::new();
        let mut pair_frames: Vec<(Rank, Vec<u8>)> = Vec::new();
        let engine = &mut self.engine;
        let peers = &self.peers;
        let stats = &mut self.stats;
        let pair_groups = &self.pair_groups;
        // One clock reading per 64 frames of a batch (a few tens of microseconds of work),
        // not one per frame: at line rate the readings were a visible share of a receiver's
        // time, and timers need no finer grain.
        let mut clock = (Instant::now(), 0u32);
        self.link.recv(Some(wait), &mut |src, pdu| {
            stats.frames_received += 1;
            if clock.1.is_multiple_of(64) {
                clock.0 = Instant::now();
            }
            clock.1 = clock.1.wrapping_add(1);
            let now = clock.0;
            if pdu.len() < 10 {
                let _ = engine.handle_frame(now, pdu);
                return;
            }
            let group = u32::from_be_bytes([pdu[4], pdu[5], pdu[6], pdu[7]]);
            if group != main_group {
                if let Some(&peer) = pair_groups.get(&group) {
                    if peers[usize::from(peer)] == src {
                        pair_frames.push((peer, pdu.to_vec()));
                    } else {
                        stats.mac_mismatch += 1;
                    }
                    return;
                }
            }
            // Bytes 8..10 of a PDU are the claimed source rank (checked properly by the engine).
            let rank = usize::from(u16::from_be_bytes([pdu[8], pdu[9]]));
            if peers.get(rank).is_some_and(|m| *m != src) && !(relayed(pdu) && peers.contains(&src))
            {
                stats.mac_mismatch += 1;
                return;
            }
            if engine.handle_frame(now, pdu).is_ok() && !heard.contains(&(rank as Rank)) {
                heard.push(rank as Rank);
            }
        })?;
        let now = Instant::now();
        if let Some(d) = self.detector.as_mut() {
            for r in heard
                .iter()
                .copied()
                .chain(pair_frames.iter().map(|(p, _)| *p))
            {
                d.mark_alive(now, r);
            }
        }
        for (peer, pdu) in pair_frames {
            let _ = self.pair_mut(peer).handle_frame(now, &pdu);
        }
        self.engine.handle_timeout(now);
        while let Some(ev) = self.engine.poll_event() {
            self.route(now, ev);
        }
        for (peer, pair) in self.pairs.iter_mut().enumerate() {
            if let Some(e) = pair {
                e.handle_timeout(now);
                while let Some(ev) = e.poll_event() {
                    self.pair_events.push_back((peer as Rank, ev));
                }
            }
        }
        self.run_detector(now);
        self.run_barriers(now);
        self.flush()
    }

    /// The next event, polling until `deadline`.
    pub fn next_event(&mut self, deadline: Instant) -> Result<Option<Event>, NodeError> {
        loop {
            if let Some(ev) = self.events.pop_front() {
                return Ok(Some(ev));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            self.poll((deadline - now).min(Duration::from_millis(50)))?;
        }
    }

    /// Events already received and not yet taken.
    pub fn take_events(&mut self) -> impl Iterator<Item = Event> + '_ {
        self.events.drain(..)
    }

    /// Waits for the next message of `root` and returns its id and bytes. Other events stay
    /// queued.
    pub fn recv_from(
        &mut self,
        root: Rank,
        timeout: Duration,
    ) -> Result<(u64, Vec<u8>), NodeError> {
        self.wait_for(timeout, "a message from the root", Some(root), |n| {
            let p = n.events.iter().position(|e| match e {
                Event::Delivered { root: r, .. } | Event::Truncated { root: r, .. } => *r == root,
                _ => false,
            })?;
            match n.events.remove(p)? {
                Event::Delivered { msg_id, data, .. } => Some(Ok((msg_id, data))),
                Event::Truncated {
                    root,
                    msg_id,
                    len,
                    max,
                } => Some(Err(NodeError::Truncated {
                    root,
                    msg_id,
                    len,
                    max,
                })),
                _ => None,
            }
        })
    }

    /// True when nothing this member sent (to the group or point-to-point) is unacknowledged.
    pub fn is_idle(&self) -> bool {
        self.engine.is_idle() && self.pairs.iter().flatten().all(|e| e.is_idle())
    }

    /// Waits for the next message of `root`, whether it comes by the group's broadcast or, when
    /// the root fell back to the binomial tree, point-to-point from `parent` with `tag` in front.
    /// Returns whether it came by the tree, and the bytes.
    pub fn recv_either(
        &mut self,
        root: Rank,
        parent: Rank,
        tag: &[u8],
        timeout: Duration,
    ) -> Result<(bool, Vec<u8>), NodeError> {
        self.wait_for(timeout, "a message from the root", Some(root), |n| {
            let pos = n
                .events
                .iter()
                .position(|e| matches!(e, Event::Delivered { root: r, .. } if *r == root));
            if let Some(Some(Event::Delivered { data, .. })) = pos.map(|p| n.events.remove(p)) {
                return Some(Ok((false, data)));
            }
            n.take_pair_delivery_tagged(parent, tag)
                .map(|(_, data)| Ok((true, data)))
        })
    }

    /// Waits until every live destination has acknowledged everything this member sent.
    pub fn wait_idle(&mut self, timeout: Duration) -> Result<(), NodeError> {
        self.wait_for(timeout, "acknowledgements of our broadcasts", None, |n| {
            n.is_idle().then_some(Ok(()))
        })
    }
}

/// A peer repair: a frame of a root's stream that a fellow member relays point to point, so
/// its Ethernet source is that member's, not the root's (bytes 1 and 2..4 of a PDU are the
/// kind and the flags).
fn relayed(pdu: &[u8]) -> bool {
    let flags = u16::from_be_bytes([pdu[2], pdu[3]]);
    pdu[1] == Kind::Repair as u8 && Flags::from_bits_truncate(flags).contains(Flags::P2P)
}

#[cfg(test)]
mod relay_tests {
    use super::relayed;
    use crate::wire::{Flags, Kind, Repr};

    fn pdu(kind: Kind, flags: Flags) -> Vec<u8> {
        let mut r = Repr::new(kind);
        r.flags = flags;
        r.to_vec(b"x").unwrap()
    }

    /// Only a peer repair may come from another member's MAC than its claimed source's.
    #[test]
    fn only_peer_repairs_count_as_relayed() {
        assert!(relayed(&pdu(Kind::Repair, Flags::P2P)));
        assert!(!relayed(&pdu(Kind::Repair, Flags::empty())));
        assert!(!relayed(&pdu(Kind::Data, Flags::P2P)));
        assert!(!relayed(&pdu(Kind::Nack, Flags::PEER | Flags::P2P)));
        assert!(!relayed(&pdu(Kind::Ack, Flags::P2P)));
    }
}
