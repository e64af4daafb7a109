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
//! ([`crate::driver::Driver`]) runs it over a real link with the wall clock, or over the
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
//! dropped and counted ([`MemberStats::events_dropped`]).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use thiserror::Error;

use crate::barrier::{Algorithm as BarrierAlgorithm, Barrier, BarrierConfig};
use crate::detect::{Detector, DetectorConfig, DetectorEvent, Msg};
use crate::engine::{
    self, Algo, Config, ConfigError, Dest, Engine, PostError, SendError, Stats as EngineStats,
};
use crate::eqa::Rank;
use crate::machine::Machine;
pub use crate::machine::Transmit;
use crate::membership::LateRoster;
use crate::wire::ethernet::{MacAddr, BROADCAST_MAC};
use crate::wire::{BarrierAlgo, Control, Flags, Frame, Kind, WireError};

/// Point-to-point messages a member accepts from one peer ahead of the application.
pub const P2P_WINDOW: usize = 16;

/// Events (evictions, notices, streamed deliveries) a member holds for the application.
pub const EVENT_BOUND: usize = 1024;

/// Tree broadcasts a member remembers after forwarding them, to serve members that become
/// its children when a member between them dies.
pub const TREE_CACHE: usize = 8;

/// First byte of a point-to-point message: a tree broadcast (tag and data follow) or an
/// application message.
/// Confirmations of a repeated roster waiting to be sent, at most (the coordinator repeats
/// its roster every [`crate::membership::REPEAT`]; more would only answer replays).
const MAX_RAW_OUT: usize = 4;

const P2P_TREE: u8 = b'T';
const P2P_APP: u8 = b'A';

/// The tag of a tree broadcast: (root, the root's collective count), unique per call.
type Tag = (Rank, u64);

fn encode_tree(tag: Tag, data: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(11 + data.len());
    v.push(P2P_TREE);
    v.extend_from_slice(&tag.0.to_be_bytes());
    v.extend_from_slice(&tag.1.to_be_bytes());
    v.extend_from_slice(data);
    v
}

/// Parent and children of `me` in the binomial tree rooted at `root` over the ranks of `live`
/// (sorted; both `me` and `root` in it): the tree re-forms around evicted members.
pub fn live_tree(live: &[Rank], me: Rank, root: Rank) -> (Option<Rank>, Vec<Rank>) {
    let (Ok(pm), Ok(pr)) = (live.binary_search(&me), live.binary_search(&root)) else {
        return (None, Vec::new());
    };
    let n = live.len() as u16;
    let (pm, pr) = (pm as Rank, pr as Rank);
    let parent = tree_parent(pm, pr, n).map(|p| live[usize::from(p)]);
    let children = tree_children(pm, pr, n)
        .into_iter()
        .map(|c| live[usize::from(c)])
        .collect();
    (parent, children)
}

/// How a broadcast travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum Algorithm {
    /// Hardware broadcast, push-pull (PPBCAST).
    #[default]
    PushPull,
    /// Hardware broadcast, every frame at once (SBCAST).
    Simple,
    /// Point-to-point binomial tree (MPICH-style baseline).
    Tree,
}

impl std::str::FromStr for Algorithm {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "pushpull" | "ppbcast" | "push-pull" => Ok(Algorithm::PushPull),
            "simple" | "sbcast" => Ok(Algorithm::Simple),
            "tree" | "binomial" | "mpich" => Ok(Algorithm::Tree),
            _ => Err(format!("unknown algorithm {s:?} (pushpull, simple, tree)")),
        }
    }
}

impl std::fmt::Display for Algorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Algorithm::PushPull => "ppbcast",
            Algorithm::Simple => "sbcast",
            Algorithm::Tree => "tree",
        })
    }
}

/// How a barrier travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum BarrierKind {
    /// Arrivals up a combining tree, release by one hardware broadcast.
    #[default]
    Broadcast,
    /// The dissemination barrier over point-to-point messages (the software baseline).
    Dissemination,
}

impl std::str::FromStr for BarrierKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "broadcast" | "bcast" => Ok(BarrierKind::Broadcast),
            "dissemination" => Ok(BarrierKind::Dissemination),
            _ => Err(format!("unknown barrier {s:?} (broadcast, dissemination)")),
        }
    }
}

/// Parent of `me` in the binomial tree rooted at `root` (MPICH's numbering), `None` at the root.
pub fn tree_parent(me: Rank, root: Rank, n: u16) -> Option<Rank> {
    let vr = (u32::from(me) + u32::from(n) - u32::from(root)) % u32::from(n.max(1));
    let mut mask = 1u32;
    while mask < u32::from(n) {
        if vr & mask != 0 {
            return Some((((vr - mask) + u32::from(root)) % u32::from(n)) as Rank);
        }
        mask <<= 1;
    }
    None
}

/// Children of `me` in the binomial tree rooted at `root`, farthest subtree first.
pub fn tree_children(me: Rank, root: Rank, n: u16) -> Vec<Rank> {
    let vr = (u32::from(me) + u32::from(n) - u32::from(root)) % u32::from(n.max(1));
    let mut mask = 1u32;
    while mask < u32::from(n) && vr & mask == 0 {
        mask <<= 1;
    }
    let mut children = Vec::new();
    mask >>= 1;
    while mask > 0 {
        if vr + mask < u32::from(n) {
            children.push(((vr + mask + u32::from(root)) % u32::from(n)) as Rank);
        }
        mask >>= 1;
    }
    children
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

/// Everything a member is built from.
#[derive(Debug, Clone)]
pub struct MemberConfig {
    /// The group engine's configuration (group id, rank, size, key, window, ...).
    pub engine: Config,
    /// MAC address of every rank, in rank order (shared: the members of a simulated group
    /// hold one table, not one each).
    pub peers: Arc<[MacAddr]>,
    /// Where frames for every member go: the broadcast address, or the group's multicast
    /// address.
    pub group_mac: MacAddr,
    /// Failure detection (gossip heartbeats, confirmation ping, eviction of the dead).
    pub detector: Option<DetectorConfig>,
    /// Arity of the broadcast barrier's combining tree.
    pub barrier_arity: u16,
    /// Receives kept posted per root ahead of the application, for members that consume a
    /// stream of broadcasts as [`Event::Delivered`] (0: a receive is posted by each `bcast`
    /// call, the MPI way).
    pub prepost: usize,
    /// How to confirm the join's roster if the coordinator repeats it after this member
    /// joined (its confirmation was lost): from [`crate::membership::Joined::late`].
    pub late: Option<LateRoster>,
}

impl MemberConfig {
    /// A member of the group `engine` describes, with the MAC of every rank.
    pub fn new(engine: Config, peers: impl Into<Arc<[MacAddr]>>) -> MemberConfig {
        MemberConfig {
            engine,
            peers: peers.into(),
            group_mac: BROADCAST_MAC,
            detector: None,
            barrier_arity: 4,
            prepost: 0,
            late: None,
        }
    }
}

/// Why a member could not be built or a call could not be made.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MemberError {
    /// The engine configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The peer table does not match the group size.
    #[error("peer table has {got} MAC addresses for a group of {want}")]
    Peers {
        /// Entries given.
        got: usize,
        /// Group size.
        want: usize,
    },
    /// The failure detector configuration is invalid.
    #[error("failure detector: {0}")]
    Detector(String),
    /// The barrier configuration or call is invalid.
    #[error("barrier: {0}")]
    Barrier(String),
    /// The broadcast could not be queued.
    #[error(transparent)]
    Send(#[from] SendError),
    /// The receive could not be posted.
    #[error(transparent)]
    Post(#[from] PostError),
    /// A control message did not fit a frame.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// A collective call is still in progress: take its result first.
    #[error("a collective call is still in progress")]
    Busy,
    /// The rank given is outside the group.
    #[error("rank {rank} is not in a group of {size}")]
    BadRank {
        /// Rank.
        rank: Rank,
        /// Size.
        size: u16,
    },
    /// The member we wait for was declared dead by the failure detector and evicted; what it
    /// had sent only partly is never delivered.
    #[error("rank {0} failed (declared dead by the failure detector and evicted)")]
    PeerDead(Rank),
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

/// What a member tells its application besides call results.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A whole message of `root`'s stream (streaming members, `prepost > 0`).
    Delivered {
        /// The root.
        root: Rank,
        /// Its position in the root's stream.
        msg_id: u64,
        /// The message.
        data: Vec<u8>,
    },
    /// `rank` was declared dead (or evicted by the application) and removed from the group.
    Evicted {
        /// The rank.
        rank: Rank,
    },
    /// An application datagram ([`Member::send_notice`]).
    Notice {
        /// Sender.
        src: Rank,
        /// Its bytes.
        body: Vec<u8>,
    },
}

/// What a collective call gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Done {
    /// A broadcast completed: the message (the root's own at the root).
    Bcast(Vec<u8>),
    /// A barrier released.
    Barrier,
}

/// Counters of a member.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemberStats {
    /// Frames handed out by `poll_transmit`.
    pub frames_sent: u64,
    /// Frames handed in by `handle_frame`.
    pub frames_received: u64,
    /// Frames that are not valid ethbcast PDUs (runts, bad CRC, unknown version or kind).
    pub malformed: u64,
    /// Of which failed the CRC.
    pub bad_crc: u64,
    /// Frames of groups this member is not in.
    pub foreign: u64,
    /// Frames whose source MAC is not the MAC of the rank they claim.
    pub mac_mismatch: u64,
    /// Frames an engine accepted (this group's, authentic, from a member).
    pub accepted: u64,
    /// Frames the engines dropped (see their drop counters).
    pub dropped: u64,
    /// Control messages nobody here handles (evict notices, stray join frames).
    pub unhandled: u64,
    /// Heartbeats, pings and pongs the failure detector ignored because they came late
    /// (inside the replay window but not its newest): no sign of life.
    pub late_liveness: u64,
    /// Events dropped because the application did not take them ([`EVENT_BOUND`]).
    pub events_dropped: u64,
    /// Most events queued at once.
    pub peak_events: usize,
    /// Broadcasts sent down the binomial tree because hardware broadcast reached too few.
    pub tree_fallbacks: u64,
}

/// Progress of one destination of this member's broadcasts (for the layer that decides
/// whether a receiver is stalled).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DestProgress {
    /// Frames this member sent that the destination has not acknowledged yet.
    pub outstanding: u64,
    /// When the destination was last heard from.
    pub last_heard: Option<Instant>,
    /// When its acknowledgement last moved.
    pub last_progress: Option<Instant>,
}

/// The collective call in progress.
#[derive(Debug)]
enum Call {
    /// A broadcast: the root waits for every live member's acknowledgement (with failure
    /// detection) or nothing; the others for the message by hardware broadcast (or, when the
    /// root fell back to the tree, from their tree parent) or from their tree parent.
    Bcast {
        root: Rank,
        algo: Algorithm,
        tag: Tag,
        /// At the root: its message, until every live member acknowledged it.
        own: Option<Vec<u8>>,
    },
    /// A barrier of machine `which`, epoch `epoch`.
    Barrier { which: usize, epoch: u32 },
}

/// One group member (sans-IO). See the module documentation.
#[derive(Debug)]
pub struct Member {
    engine: Engine,
    /// The point-to-point channels opened so far, by peer (ordered, so that runs repeat).
    pairs: BTreeMap<Rank, Engine>,
    pair_groups: HashMap<u32, Rank>,
    /// Receives posted on each peer's channel and not consumed yet.
    p2p_posted: Vec<u8>,
    /// Application messages received point to point and not taken, per peer.
    p2p_inbox: Vec<VecDeque<Vec<u8>>>,
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
    /// Whole frames to send before the engines' (confirmations of a repeated roster).
    raw_out: VecDeque<(MacAddr, Vec<u8>)>,
    /// Receives posted on the group engine and not consumed yet, per root.
    posted: Vec<u32>,
    /// Messages delivered by the group engine and not claimed by a call yet, per root.
    inbox: Vec<VecDeque<Vec<u8>>>,
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
        let pair_groups = (0..size)
            .filter(|&r| r != rank)
            .map(|r| (pair_group(group, rank, r), r))
            .collect();
        Ok(Member {
            engine: Engine::new(ecfg)?,
            pairs: BTreeMap::new(),
            pair_groups,
            p2p_posted: vec![0; n],
            p2p_inbox: vec![VecDeque::new(); n],
            tree_inbox: VecDeque::new(),
            tree_held: vec![0; n],
            tree_cache: VecDeque::new(),
            barriers,
            detector,
            peers,
            group_mac,
            prepost,
            late,
            raw_out: VecDeque::new(),
            posted: vec![0; n],
            inbox: vec![VecDeque::new(); n],
            queued: vec![0; n],
            top_ups: Vec::new(),
            collectives: vec![0; n],
            call: None,
            result: None,
            evicted: Vec::new(),
            events: VecDeque::new(),
            stable_through: None,
            pair_cursor: 0,
            stats: MemberStats::default(),
        })
    }

    // ---- inspection ----

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
    /// Whether `rank` is still a live member.
    pub fn is_live(&self, rank: Rank) -> bool {
        self.engine.is_live(rank)
    }
    /// The MAC address of `rank`.
    pub fn mac_of(&self, rank: Rank) -> Option<MacAddr> {
        self.peers.get(usize::from(rank)).copied()
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
            outstanding: eqa.head().saturating_sub(l.cursor()),
            last_heard: l.last_heard,
            last_progress: l.last_progress,
        })
    }
    /// True when nothing this member sent (to the group or point-to-point) is unacknowledged.
    pub fn is_idle(&self) -> bool {
        self.engine.is_idle() && self.pairs.values().all(|e| e.is_idle())
    }

    // ---- calls ----

    /// Starts `MPI_Bcast` from `root` with `algo`: at the root `data` is sent, elsewhere it
    /// is ignored and the root's message is the result. Every member must call it in the
    /// same order. The result arrives through [`Member::take_result`].
    pub fn bcast(
        &mut self,
        now: Instant,
        root: Rank,
        data: Vec<u8>,
        algo: Algorithm,
    ) -> Result<(), MemberError> {
        let n = self.size();
        if root >= n {
            return Err(MemberError::BadRank {
                rank: root,
                size: n,
            });
        }
        if self.call.is_some() || self.result.is_some() {
            return Err(MemberError::Busy);
        }
        let me = self.rank();
        // Tree messages of this call carry (root, the root's collective count), so that a
        // member still in an earlier call never takes a later call's message.
        let tag = (root, self.collectives[usize::from(root)]);
        self.collectives[usize::from(root)] += 1;
        let mut own = None;
        if me == root {
            let failed = self.engine.sender().failed_over().len();
            let live = self.engine.sender().eqa().hms().live();
            if algo == Algorithm::Tree || (failed > 0 && failed * 2 >= live) {
                // The tree, or the fail-over of the group (LA-MPI 4.4): broadcast reaches too
                // few members, so this message goes down the binomial tree instead.
                if algo != Algorithm::Tree {
                    self.stats.tree_fallbacks += 1;
                }
                self.forward_tree(now, tag, &data)?;
            } else {
                let a = if algo == Algorithm::Simple {
                    Algo::Simple
                } else {
                    Algo::PushPull
                };
                self.engine.bcast(now, data.clone(), a)?;
            }
            own = Some(data);
        } else if algo != Algorithm::Tree
            && self.inbox[usize::from(root)].is_empty()
            && self.posted[usize::from(root)] == 0
        {
            // The receive of this call (the MPI way: posted when the call is made). A receive
            // left by a call the root served down the tree serves this one. A message already
            // held in the pushed buffer is delivered by the post.
            self.post(now, root)?;
            self.collect(now);
        }
        self.call = Some(Call::Bcast {
            root,
            algo,
            tag,
            own,
        });
        self.advance(now);
        Ok(())
    }

    /// Starts a barrier of `kind`; the result arrives through [`Member::take_result`].
    pub fn barrier(&mut self, now: Instant, kind: BarrierKind) -> Result<(), MemberError> {
        if self.call.is_some() || self.result.is_some() {
            return Err(MemberError::Busy);
        }
        let which = match kind {
            BarrierKind::Broadcast => 0,
            BarrierKind::Dissemination => 1,
        };
        let b = &mut self.barriers[which];
        let epoch = b.next_epoch();
        b.enter(now, epoch)
            .map_err(|e| MemberError::Barrier(e.to_string()))?;
        self.call = Some(Call::Barrier { which, epoch });
        self.advance(now);
        Ok(())
    }

    /// The result of the collective call, once it completed (or failed).
    pub fn take_result(&mut self) -> Option<Result<Done, MemberError>> {
        self.result.take()
    }

    /// True while a collective call waits for its result.
    pub fn in_call(&self) -> bool {
        self.call.is_some()
    }

    /// Abandons the call in progress (its caller gave up, e.g. on a timeout). A broadcast
    /// already handed to the engine still completes in the background.
    pub fn cancel_call(&mut self) {
        self.call = None;
        self.result = None;
    }

    /// Broadcasts one message of this member's stream outside any collective call (streaming
    /// use); returns its id. Receivers with `prepost > 0` get it as [`Event::Delivered`].
    pub fn send_stream(
        &mut self,
        now: Instant,
        data: Vec<u8>,
        algo: Algo,
    ) -> Result<u64, MemberError> {
        Ok(self.engine.bcast(now, data, algo)?)
    }

    /// Sends `data` to `peer` alone over the reliable point-to-point channel.
    pub fn send_to(&mut self, now: Instant, peer: Rank, data: Vec<u8>) -> Result<(), MemberError> {
        if usize::from(peer) >= self.peers.len() || peer == self.rank() {
            return Err(MemberError::Post(PostError::NotMember(peer)));
        }
        self.send_to_live(now, peer, data)
    }

    fn send_to_live(&mut self, now: Instant, peer: Rank, data: Vec<u8>) -> Result<(), MemberError> {
        let mut v = Vec::with_capacity(1 + data.len());
        v.push(P2P_APP);
        v.extend_from_slice(&data);
        self.send_raw(now, peer, v)
    }

    fn send_raw(&mut self, now: Instant, peer: Rank, msg: Vec<u8>) -> Result<(), MemberError> {
        if !self.is_live(peer) {
            return Err(MemberError::PeerDead(peer));
        }
        self.pair(now, peer).bcast(now, msg, Algo::Simple)?;
        Ok(())
    }

    /// The ranks still in the group, sorted.
    fn live_ranks(&self) -> Vec<Rank> {
        (0..self.size()).filter(|&r| self.is_live(r)).collect()
    }

    /// Sends a tree broadcast to this member's children in the tree over the live members,
    /// and remembers it (see [`TREE_CACHE`]).
    fn forward_tree(&mut self, now: Instant, tag: Tag, data: &[u8]) -> Result<(), MemberError> {
        let (_, children) = live_tree(&self.live_ranks(), self.rank(), tag.0);
        let msg = encode_tree(tag, data);
        for &c in &children {
            self.send_raw(now, c, msg.clone())?;
        }
        if self.tree_cache.len() >= TREE_CACHE {
            self.tree_cache.pop_front();
        }
        self.tree_cache.push_back((tag, data.to_vec(), children));
        Ok(())
    }

    /// After an eviction: members that became this member's children in a remembered tree
    /// broadcast get it now (their old parent may have died before forwarding it).
    fn reforward_trees(&mut self, now: Instant) {
        let live = self.live_ranks();
        let me = self.rank();
        let mut sends = Vec::new();
        for (tag, data, sent) in self.tree_cache.iter_mut() {
            if !live.contains(&tag.0) {
                continue;
            }
            let (_, children) = live_tree(&live, me, tag.0);
            for c in children {
                if !sent.contains(&c) {
                    sent.push(c);
                    sends.push((c, encode_tree(*tag, data)));
                }
            }
        }
        for (c, msg) in sends {
            let _ = self.send_raw(now, c, msg);
        }
    }

    /// Takes the oldest point-to-point message from `peer`.
    pub fn take_p2p(&mut self, now: Instant, peer: Rank) -> Option<Vec<u8>> {
        let m = self.p2p_inbox.get_mut(usize::from(peer))?.pop_front()?;
        self.top_up_pair(now, peer);
        Some(m)
    }

    /// Takes the tree broadcast tagged `tag`, if it arrived.
    fn take_tree(&mut self, now: Instant, tag: Tag) -> Option<Vec<u8>> {
        let p = self.tree_inbox.iter().position(|(t, _, _)| *t == tag)?;
        let (_, from, data) = self.tree_inbox.remove(p)?;
        let f = usize::from(from);
        self.tree_held[f] = self.tree_held[f].saturating_sub(1);
        self.top_up_pair(now, from);
        Some(data)
    }

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
        tracing::warn!(rank, "member evicted");
        self.evicted.push((rank, now));
        if let Some(d) = self.detector.as_mut() {
            d.evicted(rank);
        }
        self.pairs.remove(&rank);
        let r = usize::from(rank);
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
            let from = self.peers.get(usize::from(claimed));
            // A peer repair keeps the root as its source but comes from the fellow member
            // this one asks for that root's frames.
            let relayer = self
                .engine
                .repair_peer(claimed)
                .filter(|&p| self.peers.get(usize::from(p)) == Some(&src));
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
            if self.prepost > 0 && frame.kind().is_data() && !relayed {
                // A stream is created when its root is first heard: post for it then.
                self.top_up(now, claimed);
            }
            self.collect(now);
        } else if let Some(&peer) = self.pair_groups.get(&group) {
            if self.peers[usize::from(peer)] != src {
                self.stats.mac_mismatch += 1;
                return;
            }
            if !self.is_live(peer) {
                self.stats.dropped += 1;
                return;
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
                Dest::Rank(r) => self.peers[usize::from(r)],
            };
            return Some(Transmit { dst, len: t.len });
        }
        // Round robin from the channel after the last one that sent.
        let cursor = self.pair_cursor;
        let mut sent = None;
        for (&peer, e) in self.pairs.range_mut(cursor.saturating_add(1)..) {
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
            dst: self.peers[usize::from(peer)],
            len,
        })
    }

    /// The next event for the application.
    pub fn poll_event(&mut self) -> Option<Event> {
        let ev = self.events.pop_front()?;
        if let Event::Delivered { root, .. } = &ev {
            // Room for one more: the next frame or timeout posts another receive.
            let r = usize::from(*root);
            self.queued[r] = self.queued[r].saturating_sub(1);
            self.top_ups.push(*root);
        }
        Some(ev)
    }

    // ---- internals ----

    fn push_event(&mut self, ev: Event) {
        if self.events.len() >= EVENT_BOUND && !matches!(ev, Event::Delivered { .. }) {
            self.stats.events_dropped += 1;
            return;
        }
        self.events.push_back(ev);
        self.stats.peak_events = self.stats.peak_events.max(self.events.len());
    }

    fn post(&mut self, now: Instant, root: Rank) -> Result<(), MemberError> {
        let max = self.engine.config().max_message;
        self.engine.post_recv(now, root, max)?;
        self.posted[usize::from(root)] += 1;
        Ok(())
    }

    /// Keeps `prepost` receives posted for `root` while deliveries of it fit.
    fn top_up(&mut self, now: Instant, root: Rank) {
        let r = usize::from(root);
        if root == self.rank() || !self.is_live(root) {
            return;
        }
        while (self.posted[r] + self.queued[r]) < self.prepost as u32 {
            if self.post(now, root).is_err() {
                break;
            }
        }
    }

    fn pair(&mut self, now: Instant, peer: Rank) -> &mut Engine {
        let p = usize::from(peer);
        if !self.pairs.contains_key(&peer) {
            let cfg = self.engine.config();
            let (me, group) = (cfg.rank, cfg.group);
            let mut pc = cfg.clone();
            pc.group = pair_group(group, me, peer);
            pc.size = 2;
            pc.rank = u16::from(me > peer);
            pc.auto_post = false;
            // A valid group configuration gives a valid pair configuration.
            let e = Engine::new(pc)
                .expect("the pair configuration derives from a valid group configuration");
            self.pairs.insert(peer, e);
            self.p2p_posted[p] = 0;
            self.top_up_pair(now, peer);
        }
        self.pairs
            .get_mut(&peer)
            .expect("inserted above if it was missing")
    }

    /// Keeps the peer's channel posted while its messages fit [`P2P_WINDOW`].
    fn top_up_pair(&mut self, now: Instant, peer: Rank) {
        let p = usize::from(peer);
        let me = self.rank();
        let Some(e) = self.pairs.get_mut(&peer) else {
            return;
        };
        let other = u16::from(me < peer);
        let max = e.config().max_message;
        while usize::from(self.p2p_posted[p])
            + self.p2p_inbox[p].len()
            + usize::from(self.tree_held[p])
            < P2P_WINDOW
        {
            if e.post_recv(now, other, max).is_err() {
                break;
            }
            self.p2p_posted[p] += 1;
        }
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
                engine::Event::Delivered { root, msg_id, data } => {
                    let r = usize::from(root);
                    self.posted[r] = self.posted[r].saturating_sub(1);
                    if self.prepost > 0 {
                        self.queued[r] += 1;
                        self.push_event(Event::Delivered { root, msg_id, data });
                        self.top_ups.push(root);
                    } else {
                        self.inbox[r].push_back(data);
                    }
                }
                engine::Event::Truncated {
                    root,
                    msg_id,
                    len,
                    max,
                } => {
                    let r = usize::from(root);
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
                engine::Event::Stable { msg_id } => {
                    self.stable_through =
                        Some(self.stable_through.map_or(msg_id, |s| s.max(msg_id)));
                }
                engine::Event::Control { src, msg, fresh } => self.route(now, src, msg, fresh),
            }
        }
    }

    fn collect_pair(&mut self, now: Instant, peer: Rank) {
        let p = usize::from(peer);
        let Some(e) = self.pairs.get_mut(&peer) else {
            return;
        };
        let mut got = Vec::new();
        while let Some(ev) = e.poll_event() {
            if let engine::Event::Delivered { data, .. } = ev {
                got.push(data);
            }
        }
        if got.is_empty() {
            return;
        }
        for mut data in got {
            self.p2p_posted[p] = self.p2p_posted[p].saturating_sub(1);
            match data.first() {
                Some(&P2P_APP) => {
                    data.remove(0);
                    self.p2p_inbox[p].push_back(data);
                }
                Some(&P2P_TREE) if data.len() >= 11 => {
                    let root = u16::from_be_bytes([data[1], data[2]]);
                    let mut seq = [0u8; 8];
                    seq.copy_from_slice(&data[3..11]);
                    let tag = (root, u64::from_be_bytes(seq));
                    let current = matches!(self.call, Some(Call::Bcast { tag: t, .. }) if t == tag);
                    let done = self
                        .collectives
                        .get(usize::from(root))
                        .is_none_or(|&c| tag.1 < c);
                    if done && !current {
                        // A call this member finished (or a root that does not exist): a
                        // late or repeated copy.
                        self.stats.dropped += 1;
                        continue;
                    }
                    data.drain(..11);
                    self.tree_held[p] += 1;
                    self.tree_inbox.push_back((tag, peer, data));
                }
                _ => self.stats.dropped += 1,
            }
        }
        self.top_up_pair(now, peer);
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

    /// Moves the barriers' and the detector's frames into the engine's outbox.
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
                DetectorEvent::Suspect(r) => tracing::info!(rank = r, "member suspected"),
                DetectorEvent::Cleared(r) => tracing::info!(rank = r, "suspicion cleared"),
            }
        }
        for r in dead {
            self.evict(now, r);
        }
    }

    /// Completes the call in progress if it can.
    fn advance(&mut self, now: Instant) {
        let Some(call) = self.call.take() else {
            return;
        };
        let me = self.rank();
        let outcome = match &call {
            Call::Barrier { which, epoch } => self.barriers[*which]
                .is_released(*epoch)
                .then_some(Ok(Done::Barrier)),
            Call::Bcast {
                root,
                own: Some(data),
                ..
            } if *root == me => {
                // With failure detection the root's call returns when every live member has
                // the message, so that a member that died during it is evicted and reported
                // by this call.
                (self.detector.is_none() || self.is_idle()).then(|| Ok(Done::Bcast(data.clone())))
            }
            Call::Bcast {
                root, algo, tag, ..
            } => {
                let (root, algo, tag) = (*root, *algo, *tag);
                let hw = (algo != Algorithm::Tree)
                    .then(|| self.inbox[usize::from(root)].pop_front())
                    .flatten();
                match hw {
                    Some(data) => Some(Ok(Done::Bcast(data))),
                    None => match self.take_tree(now, tag) {
                        Some(data) => Some(
                            self.forward_tree(now, tag, &data)
                                .map(|()| Done::Bcast(data)),
                        ),
                        None if !self.is_live(root) => Some(Err(MemberError::PeerDead(root))),
                        None => None,
                    },
                }
            }
        };
        match outcome {
            Some(r) => self.result = Some(r),
            None => self.call = Some(call),
        }
    }
}

impl Machine for Member {
    fn handle_frame(&mut self, now: Instant, src: MacAddr, pdu: &[u8]) {
        Member::handle_frame(self, now, src, pdu)
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Kind, Repr, ALL};

    /// Rank 2 of 4 with peer repair: for root 0's stream it asks rank 3. Time is the
    /// simulator's virtual clock.
    fn member() -> (Member, Instant) {
        // Any instant will do: the member reads no clock, every call takes `now`.
        let now = Instant::now();
        let mut cfg = Config::new(7, 2, 4);
        cfg.peer_repair = true;
        let macs: Vec<MacAddr> = (0..4).map(port_mac).collect();
        let mut mc = MemberConfig::new(cfg, macs);
        mc.prepost = 4;
        (Member::new(now, mc).unwrap(), now)
    }

    /// Rank `i`'s address.
    fn port_mac(i: u16) -> MacAddr {
        let [hi, lo] = i.to_be_bytes();
        MacAddr([0x02, 0, 0, 0, hi, lo])
    }

    fn frame(kind: Kind, seq: u32, dst: Rank, flags: Flags) -> Vec<u8> {
        let mut r = Repr::new(kind);
        r.group = 7;
        r.src = 0;
        r.dst = dst;
        r.flags = flags;
        r.msg_id = seq;
        r.seq = seq;
        r.msg_len = 100;
        r.to_vec(&[seq as u8; 100]).unwrap()
    }

    #[test]
    fn a_relayed_repair_is_taken_only_from_the_peer_the_stream_asks() {
        let (mut m, now) = member();
        m.handle_frame(
            now,
            port_mac(0),
            &frame(Kind::Data, 0, ALL, Flags::BROADCAST),
        );
        assert_eq!(m.stats().accepted, 1);
        // Frame 1 relayed by rank 1, which this stream never asks: a forgery.
        let relayed = frame(Kind::Repair, 1, 2, Flags::P2P);
        m.handle_frame(now, port_mac(1), &relayed);
        assert_eq!(m.stats().mac_mismatch, 1);
        assert_eq!(m.stats().accepted, 1);
        // The same frame from rank 3, the stream's repair peer: taken.
        m.handle_frame(now, port_mac(3), &relayed);
        assert_eq!(m.stats().accepted, 2);
        assert_eq!(m.engine_stats().delivered, 2);
    }
}

/// Liveness from replays: only what proves that a member spoke now keeps it alive.
#[cfg(test)]
mod liveness_tests {
    use std::time::Duration;

    use super::*;
    use crate::wire::{Repr, ALL};

    const PERIOD: Duration = Duration::from_millis(10);

    fn mac(i: u16) -> MacAddr {
        let [hi, lo] = i.to_be_bytes();
        MacAddr([0x02, 0, 0, 0, hi, lo])
    }

    /// Rank `rank` of `size` with a failure detector of period [`PERIOD`], started at `now`.
    fn detected(rank: Rank, size: u16, peer_repair: bool, now: Instant) -> Member {
        let mut cfg = Config::new(7, rank, size);
        cfg.peer_repair = peer_repair;
        let macs: Vec<MacAddr> = (0..size).map(mac).collect();
        let mut mc = MemberConfig::new(cfg, macs);
        mc.prepost = 4;
        mc.detector = Some(DetectorConfig::new(rank, size, PERIOD));
        let mut m = Member::new(now, mc).unwrap();
        m.handle_timeout(now);
        m
    }

    fn age(m: &Member, rank: Rank) -> u16 {
        m.detector().expect("a detector").table()[usize::from(rank)]
    }

    /// Lets `periods` gossip periods pass after `now`, sending whatever the member sends
    /// nowhere; returns the new instant.
    fn wait(m: &mut Member, now: Instant, periods: u32) -> Instant {
        let mut buf = vec![0u8; 9000];
        let end = now + PERIOD * periods;
        let mut t = now;
        while t < end {
            t += Duration::from_millis(1);
            m.handle_timeout(t);
            while m.poll_transmit(t, &mut buf).is_some() {}
        }
        end
    }

    fn ack(src: Rank, dst: Rank, ctr: u32) -> Vec<u8> {
        Control::Ack {
            next: 0,
            seen: None,
        }
        .to_vec(7, src, dst, ctr)
    }

    fn heartbeat(src: Rank, dst: Rank, ctr: u32, size: u16) -> Vec<u8> {
        Control::Heartbeat {
            table: vec![0; usize::from(size)],
        }
        .to_vec(7, src, dst, ctr)
    }

    /// Performs the attack: a control frame whose counter lies inside the replay window but
    /// was never seen (held back by the attacker) is replayed after its sender went quiet. It
    /// is still taken (a late frame may be genuine), but it is no sign of life: the sender's
    /// age keeps growing. A counter that advances the window's top is one.
    #[test]
    fn an_in_window_never_seen_control_frame_does_not_refresh_the_age() {
        let t0 = Instant::now();
        let mut m = detected(0, 3, false, t0);
        for ctr in [1, 2, 3, 5] {
            m.handle_frame(t0, mac(2), &ack(2, 0, ctr));
        }
        assert_eq!(m.stats().accepted, 4);
        assert_eq!(age(&m, 2), 0);
        let t1 = wait(&mut m, t0, 3);
        assert_eq!(age(&m, 2), 3);
        // Counter 4: in the window (top 5), never seen.
        m.handle_frame(t1, mac(2), &ack(2, 0, 4));
        assert_eq!(m.stats().accepted, 5, "a late frame is still taken");
        assert_eq!(age(&m, 2), 3, "a late frame is no sign of life");
        // The same as a heartbeat, counter 4 being spent: counter 5 is the top, seen.
        m.handle_frame(t1, mac(2), &heartbeat(2, 0, 5, 3));
        assert_eq!(age(&m, 2), 3, "a seen counter is refused");
        // A counter above the top proves the sender spoke after everything heard so far.
        m.handle_frame(t1, mac(2), &ack(2, 0, 6));
        assert_eq!(age(&m, 2), 0);
    }

    /// Performs the attack: a relayed repair names the root of the stream as its source but
    /// comes from the repair peer. It proves that the peer spoke, not the root: a dead root
    /// must not be kept alive by its stream's repairs.
    #[test]
    fn a_relayed_repair_credits_the_relaying_peer_not_the_root() {
        let t0 = Instant::now();
        // Rank 2 of 4: for root 0's stream it asks rank 3.
        let mut m = detected(2, 4, true, t0);
        let data = |kind: Kind, seq: u32, dst: Rank, flags: Flags| {
            let mut r = Repr::new(kind);
            r.group = 7;
            r.src = 0;
            r.dst = dst;
            r.flags = flags;
            r.msg_id = seq;
            r.seq = seq;
            r.msg_len = 100;
            r.to_vec(&[seq as u8; 100]).unwrap()
        };
        m.handle_frame(t0, mac(0), &data(Kind::Data, 0, ALL, Flags::BROADCAST));
        assert_eq!(m.engine().repair_peer(0), Some(3));
        let t1 = wait(&mut m, t0, 3);
        assert_eq!((age(&m, 0), age(&m, 3)), (3, 3));
        m.handle_frame(t1, mac(3), &data(Kind::Repair, 1, 2, Flags::P2P));
        assert_eq!(m.stats().accepted, 2, "the relayed repair is taken");
        assert_eq!(age(&m, 3), 0, "the relaying peer spoke");
        assert_eq!(age(&m, 0), 3, "the root did not");
    }

    /// Performs the attack: the attacker recorded a member's heartbeats and acknowledgements,
    /// held every other one back, and after the member died replays them all, one per gossip
    /// period (the seen ones are refused, the held-back ones lie in the replay window). The
    /// dead member is still evicted within the detector's bound.
    #[test]
    fn replayed_heartbeats_and_acks_do_not_keep_a_dead_member_alive() {
        let t0 = Instant::now();
        let mut m = detected(0, 3, false, t0);
        let size = 3;
        let recorded: Vec<Vec<u8>> = (1..=40)
            .map(|ctr| {
                if ctr % 2 == 0 {
                    heartbeat(2, 0, ctr, size)
                } else {
                    ack(2, 0, ctr)
                }
            })
            .collect();
        let mut t = t0;
        for (i, f) in recorded.iter().enumerate() {
            if i % 2 == 0 {
                m.handle_frame(t, mac(2), f);
            }
            t += Duration::from_millis(1);
            m.handle_timeout(t);
        }
        let died = t;
        let cfg = DetectorConfig::new(0, size, PERIOD);
        let bound = cfg.cleanup() + cfg.confirm_timeout + PERIOD;
        // Rank 1 stays alive and says so with fresh counters; the attacker replays one of
        // rank 2's recorded frames (held back or not) every period.
        let (mut ctr1, mut next) = (1, 0);
        while t < died + 3 * bound && m.is_live(2) {
            m.handle_frame(t, mac(1), &ack(1, 0, ctr1));
            ctr1 += 1;
            let f = &recorded[(next * 2 + 1) % recorded.len()];
            m.handle_frame(t, mac(2), f);
            m.handle_frame(t, mac(2), &recorded[next % recorded.len()]);
            next += 1;
            t = wait(&mut m, t, 1);
        }
        let evicted = m.evicted().iter().find(|(r, _)| *r == 2).map(|&(_, at)| at);
        let after = evicted.map(|at| at - died);
        assert!(
            after.is_some_and(|d| d <= bound),
            "rank 2 evicted after {after:?}, bound {bound:?}"
        );
        assert!(m.is_live(1));
    }
}
