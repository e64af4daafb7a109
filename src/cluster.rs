//! A whole group on the simulated switch: N members, each run by the one driver in virtual
//! time, a workload, and a checker.
//!
//! This is the main test-bed of everything above the links. A [`SimCluster`] puts one
//! [`Member`] on each port of a [`SimNet`], each run by the driver whose clock is the
//! switch's; [`SimCluster::run`] jumps from event to event (the next frame due at some port,
//! or the earliest member timer) and lets a [`Workload`] act on each member it ran: start and
//! finish calls, broadcast, take deliveries and check them. Only the members that have a
//! frame due or a timer expired are visited, so a step costs what happens in it, not the size
//! of the group. Same seed, same run, bit for bit.
//!
//! Two workloads come with it: [`run`] streams a seeded mix of messages from several roots
//! with both hardware-broadcast algorithms and checks every delivery against what was sent
//! (corrupt, duplicated, out-of-order and missing deliveries are counted, never assumed away);
//! [`crate::simgroup`] runs the group API (`bcast` with every algorithm, barriers, dead and
//! deaf members) call by call. Both scenarios embed one [`Traffic`]: the group on its switch,
//! the links, and the messages.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::driver::{Driver, Machine};
use crate::link::sim::{Faults, SimConfig, SimError, SimNet, SimPort};
use crate::link::LinkError;
use crate::Rank;
use ethbcast_proto::{Algorithm, EngineConfig, Event, Member, MemberConfig, MemberError, Message};

/// Why a cluster could not run.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The simulated switch refused the configuration.
    #[error("simulator: {0}")]
    Sim(#[from] SimError),
    /// A simulated port refused a frame (a bug of ours: frames must fit the MTU).
    #[error("simulated link: {0}")]
    Link(#[from] LinkError),
    /// A member could not be built.
    #[error("member: {0}")]
    Member(#[from] MemberError),
    /// The engine configuration is invalid.
    #[error("engine configuration: {0}")]
    Config(#[from] ethbcast_proto::ConfigError),
    /// The scenario itself is unusable.
    #[error("scenario: {0}")]
    Scenario(String),
}

/// What drives the members of a cluster: the application of every host.
pub trait Workload<M = Member> {
    /// Member `i` has just run (frames in, timers, frames out) at `now`: act on it.
    fn visit(&mut self, i: usize, member: &mut M, now: Instant);
    /// True when the workload has everything it waited for.
    fn done(&self) -> bool;
    /// Hosts to kill now (asked after every step).
    fn kill_now(&mut self) -> Vec<usize> {
        Vec::new()
    }
    /// When the application wants every member visited again although no frame or timer
    /// calls for it (the end of a compute phase).
    fn next_wake(&self) -> Option<Instant> {
        None
    }
}

/// N members (or other machines, such as joins) on one simulated switch, each run by the
/// driver in the switch's virtual time.
#[derive(Debug)]
pub struct SimCluster<M = Member> {
    net: SimNet,
    nodes: Vec<Driver<SimPort, M>>,
    timers: BinaryHeap<Reverse<(Instant, usize)>>,
    /// The timer of each member: when it next runs without frames.
    scheduled: Vec<Option<Instant>>,
    /// The earliest of each member's entries in `timers`, at or before `scheduled` (the
    /// others are stale and skipped). A timer that moves later leaves its entry alone, which
    /// is put back at the new time when it comes up: a member's timer moves with nearly
    /// every frame it takes, and in a group of thousands each move was a push into a heap
    /// that grew with the stale entries.
    queued: Vec<Option<Instant>>,
    /// Hosts that were killed: their members never run again.
    halted: Vec<bool>,
    /// Scratch: members to visit in this step.
    mark: Vec<bool>,
    /// Receive coalescing ([`SimCluster::set_rx_coalesce`]): zero, or how long after its
    /// first frame a member's receive turn comes.
    rx_coalesce: Duration,
    /// Members' receive turns still to come (with coalescing), by when.
    rx_wakes: BinaryHeap<Reverse<(Instant, usize)>>,
    /// The receive turn each member has to come, if any.
    rx_wake_at: Vec<Option<Instant>>,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// The workload is done and every live member is idle.
    Done,
    /// Nothing is left to happen but the workload is not done.
    Stuck,
    /// The virtual-time limit was reached.
    Limit,
}

impl<M: Machine + std::fmt::Debug> SimCluster<M> {
    /// Member `i` on port `i` of `net`.
    pub fn new(net: SimNet, members: Vec<M>) -> Result<SimCluster<M>, ClusterError> {
        let n = members.len();
        if n > net.num_ports() {
            return Err(ClusterError::Scenario(format!(
                "{n} members on a switch of {} ports",
                net.num_ports()
            )));
        }
        let nodes = members
            .into_iter()
            .enumerate()
            .map(|(i, m)| Ok(Driver::new(m, net.port(i)?)))
            .collect::<Result<Vec<_>, ClusterError>>()?;
        Ok(SimCluster {
            net,
            nodes,
            timers: BinaryHeap::new(),
            scheduled: vec![None; n],
            queued: vec![None; n],
            halted: vec![false; n],
            mark: vec![false; n],
            rx_coalesce: Duration::ZERO,
            rx_wakes: BinaryHeap::new(),
            rx_wake_at: vec![None; n],
        })
    }

    /// Receive interrupt coalescing: a member whose receive queue was empty takes its
    /// frames `d` after the first of them arrived (everything due by then, in one turn), as
    /// a NIC raises its receive interrupt a set time after the first frame (`rx-usecs`)
    /// and the host takes the whole batch per wake-up. Zero (the default): a member takes
    /// its frames at the instant they arrive, one turn per instant. Timers and transmit
    /// wake-ups are not delayed; a turn for those takes the frames waiting too.
    ///
    /// Why: in a large group every broadcast frame is a turn of every member, and a turn
    /// finds the member's state cold in the caches; frames arriving a frame time apart
    /// share one turn.
    pub fn set_rx_coalesce(&mut self, d: Duration) {
        self.rx_coalesce = d;
    }

    /// Every host's port keeps up to `frames` of the frames its host read after each batch,
    /// as a NIC's receive ring holds them (see [`crate::link::Link::retain`]), for a member
    /// that leaves frames in the link ([`Member::leave_in_link`]).
    pub fn hold_frames(&mut self, frames: usize) {
        for d in &mut self.nodes {
            d.retain(frames);
        }
    }

    /// The switch.
    pub fn net(&self) -> &SimNet {
        &self.net
    }
    /// Number of members.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }
    /// True without members.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
    /// Member `i`.
    pub fn member(&self, i: usize) -> &M {
        self.nodes[i].member()
    }
    /// Member `i`, to act on it between runs.
    pub fn member_mut(&mut self, i: usize) -> &mut M {
        self.nodes[i].member_mut()
    }
    /// Every member, in port order.
    pub fn members(&self) -> impl Iterator<Item = &M> {
        self.nodes.iter().map(|d| d.member())
    }
    /// True if host `i` was killed.
    pub fn is_halted(&self, i: usize) -> bool {
        self.halted[i]
    }

    /// Kills host `i`: its port goes dead and its member never runs again.
    pub fn kill(&mut self, i: usize) -> Result<(), ClusterError> {
        self.net.kill(i)?;
        self.halted[i] = true;
        Ok(())
    }

    fn schedule(&mut self, i: usize) {
        let t = self.nodes[i].member().poll_timeout();
        if let Some(t) = t.filter(|&t| Some(t) != self.scheduled[i]) {
            self.scheduled[i] = Some(t);
            if self.queued[i].is_none_or(|q| t < q) {
                self.queued[i] = Some(t);
                self.timers.push(Reverse((t, i)));
            }
        }
    }

    /// Takes member `i`'s entry at `t` off the heap's top: returns its timer if due by `now`
    /// (and clears it), puts the entry back at the timer's time if it moved later, drops it
    /// if stale.
    fn pop_timer(&mut self, t: Instant, i: usize, now: Instant) -> Option<Instant> {
        self.timers.pop();
        if self.queued[i] != Some(t) {
            return None;
        }
        self.queued[i] = None;
        let due = self.scheduled[i]?;
        if due <= now {
            self.scheduled[i] = None;
            return Some(due);
        }
        self.queued[i] = Some(due);
        self.timers.push(Reverse((due, i)));
        None
    }

    /// The earliest live timer, dropping stale heap entries (and a halted member's) and
    /// moving those whose timer moved later.
    fn next_timer(&mut self) -> Option<Instant> {
        while let Some(&Reverse((t, i))) = self.timers.peek() {
            if self.halted[i] {
                self.timers.pop();
            } else if self.queued[i] == Some(t) && self.scheduled[i] == Some(t) {
                return Some(t);
            } else {
                // Stale, or moved later (nothing is due before `t`).
                self.pop_timer(t, i, t);
            }
        }
        None
    }

    /// Runs until the workload is done and every live member idle, nothing is left to
    /// happen, or `limit` of virtual time has passed since the call.
    pub fn run(
        &mut self,
        limit: Duration,
        w: &mut impl Workload<M>,
    ) -> Result<RunEnd, ClusterError> {
        let start = self.net.now();
        let mut ready: Vec<usize> = (0..self.nodes.len()).collect();
        loop {
            let now = self.net.now();
            for &i in &ready {
                self.mark[i] = false;
            }
            for (k, &i) in ready.iter().enumerate() {
                if self.mark[i] || self.halted[i] {
                    continue;
                }
                self.mark[i] = true;
                if let Some(&next) = ready.get(k + 1) {
                    // The next member's state is asked into the cache while this one runs.
                    // In a group of thousands it was last touched thousands of turns ago,
                    // and every line of it a turn reads would be a wait for memory.
                    let d = &self.nodes[next];
                    ethbcast_sys::prefetch::prefetch(
                        std::ptr::from_ref(d).cast(),
                        std::mem::size_of_val(d),
                    );
                    d.member().prefetch(ethbcast_sys::prefetch::prefetch);
                }
                let d = &mut self.nodes[i];
                d.turn(&self.net, None)?;
                w.visit(i, d.member_mut(), now);
                d.flush(now)?;
                self.schedule(i);
            }
            for h in w.kill_now() {
                self.kill(h)?;
            }
            if w.done() && self.all_idle() {
                return Ok(RunEnd::Done);
            }
            let wake = w.next_wake().filter(|&t| t > now);
            let rx_wake = self.rx_wakes.peek().map(|&Reverse((t, _))| t);
            let next = [self.net.next_event(), self.next_timer(), wake, rx_wake]
                .into_iter()
                .flatten()
                .min();
            let Some(next) = next else {
                return Ok(RunEnd::Stuck);
            };
            if next.saturating_duration_since(start) > limit {
                return Ok(RunEnd::Limit);
            }
            self.net.advance_to(next.max(now));
            let now = self.net.now();
            if wake.is_some_and(|t| t <= now) {
                ready.clear();
                ready.extend(0..self.nodes.len());
            } else {
                // One list for the whole run: the switch's and this one trade buffers.
                self.net.take_ready_into(&mut ready);
                // Ports beyond the members (a tap, an attacker) are the test's business.
                ready.retain(|&p| p < self.nodes.len());
                if !self.rx_coalesce.is_zero() {
                    // Frames wait for the member's receive turn; a transmit wake-up (its
                    // queue empty) is taken now.
                    let at = now + self.rx_coalesce;
                    ready.retain(|&p| {
                        if self.net.rx_pending(p) == 0 {
                            return true;
                        }
                        if self.rx_wake_at[p].is_none() {
                            self.rx_wake_at[p] = Some(at);
                            self.rx_wakes.push(Reverse((at, p)));
                        }
                        false
                    });
                }
            }
            while let Some(&Reverse((t, i))) = self.rx_wakes.peek() {
                if t > now {
                    break;
                }
                self.rx_wakes.pop();
                self.rx_wake_at[i] = None;
                // (Frames a timer's turn took meanwhile need no second turn.)
                if self.net.rx_pending(i) > 0 {
                    ready.push(i);
                }
            }
            while let Some(&Reverse((t, i))) = self.timers.peek() {
                if t > now {
                    break;
                }
                if self.pop_timer(t, i, now).is_some() {
                    ready.push(i);
                }
            }
        }
    }

    fn all_idle(&self) -> bool {
        self.nodes
            .iter()
            .zip(&self.halted)
            .all(|(d, &h)| h || d.member().is_idle())
    }
}

/// What every simulated run is made of, whatever its workload: the group on its switch, the
/// links, and the messages its roots broadcast. One type for both harnesses ([`Scenario`] and
/// [`crate::simgroup::GroupScenario`]).
#[derive(Debug, Clone)]
pub struct Traffic {
    /// Members of the group (ports of the switch).
    pub nodes: u16,
    /// Messages (broadcasts) in all.
    pub messages: usize,
    /// Message sizes to draw from.
    pub sizes: Vec<usize>,
    /// Seed of the workload, of the choices the harness makes and of the switch.
    pub seed: u64,
    /// Faults of every port.
    pub faults: Faults,
    /// Link rate (None: infinitely fast).
    pub rate_bps: Option<u64>,
    /// Link latency.
    pub latency: Duration,
}

impl Traffic {
    /// `nodes` members and `messages` messages of 8 B to 64 KiB, seed 1, no faults,
    /// 1 Gbit/s links with 5 µs latency.
    pub fn new(nodes: u16, messages: usize) -> Traffic {
        Traffic {
            nodes,
            messages,
            sizes: vec![8, 256, 4096, 65536],
            seed: 1,
            faults: Faults::NONE,
            rate_bps: Some(1_000_000_000),
            latency: Duration::from_micros(5),
        }
    }

    /// The number of members, if there are enough for a group (2).
    pub(crate) fn members(&self) -> Result<usize, ClusterError> {
        let n = usize::from(self.nodes);
        if n < 2 {
            return Err(ClusterError::Scenario(format!(
                "--nodes {n}: a group needs at least 2 members"
            )));
        }
        Ok(n)
    }

    /// The switch of a run: `ports` ports (the members first), MTU 1500, short host transmit
    /// queues ([`HOST_TX_QUEUE`]), these links and faults, `per_port` overriding the faults.
    pub(crate) fn switch(
        &self,
        ports: usize,
        per_port: Vec<(usize, Faults)>,
    ) -> Result<SimNet, SimError> {
        SimNet::new(SimConfig {
            ports,
            rate_bps: self.rate_bps,
            latency: self.latency,
            mtu: 1500,
            seed: self.seed,
            faults: self.faults,
            per_port,
            switch_buffer: None,
            tx_queue: Some(HOST_TX_QUEUE),
        })
    }
}

/// What to run: messages streamed from several roots.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The group, its links and the messages, spread over the roots.
    pub traffic: Traffic,
    /// Algorithms to draw from.
    pub algos: Vec<Algorithm>,
    /// Roots that broadcast, in turn.
    pub roots: Vec<Rank>,
    /// Per-port overrides of the faults (a dead host, a lossy cable).
    pub per_port: Vec<(usize, Faults)>,
    /// Give up (and report `completed: false`) after this much virtual time.
    pub limit: Duration,
    /// Retransmission buffer slots (= receive window) of every member, if not the default.
    pub window: Option<usize>,
    /// Fan-out of the acknowledgement tree (0: off), if not the default.
    pub ack_tree: Option<u16>,
    /// Peer repair on or off, if not the default.
    pub peer_repair: Option<bool>,
    /// Adjusts every member's engine configuration (after the options above).
    pub tweak: fn(&mut EngineConfig),
    /// Receive interrupt coalescing of every host ([`SimCluster::set_rx_coalesce`]; zero:
    /// none).
    pub rx_coalesce: Duration,
    /// Frames each host's port keeps after they were read ([`SimCluster::hold_frames`]), and
    /// every member leaves the roots' frames there ([`Member::leave_in_link_serving`])
    /// rather than copy the ones it keeps (behind a gap, or for its fellows' repair
    /// requests) into its receive window, copying only those still needed when the port
    /// lets them go. The port lets go early the frames its member no longer reads (every
    /// quarter of this many frames, see `Link::prune_held`), so this bounds the frames a
    /// member reads later, not all it was sent. [`Scenario::new`] sets [`LINK_HOLDS`]; 0: a
    /// link that keeps nothing, and every kept frame copied (what a host's socket link
    /// does).
    ///
    /// Why: a broadcast frame a thousand ports keep is one frame, where a thousand window
    /// copies are a thousand (4096 members with 1 % loss and burst loss: the receive windows'
    /// copies were about 2 GiB of the run's peak; see docs/benchmarks.md).
    pub link_holds: usize,
    /// Members observe the roots' messages as they consume them, one frame's bytes at a
    /// time, and keep none ([`Member::observe`], [`Member::keep_at_most`] 0: the messages come
    /// as [`Event::Observed`]); the checker compares every piece with the sent message at its
    /// offset, and a message counts as delivered intact when its pieces covered it, in order,
    /// each byte equal. false (what [`Scenario::new`] sets): every member reassembles each
    /// message whole and the checker compares it.
    ///
    /// Why: a group of thousands reassembling messages of 64 KiB holds one in progress per
    /// member and stream (about half the 4096-member run's peak), and copies every byte into
    /// it; a member that observes reads each byte where the port holds it, as `ethbcast
    /// recv` does.
    pub observe: bool,
}

/// Frames a simulated host's port keeps after they were read, unless a scenario says
/// otherwise (see [`Scenario::link_holds`]): more than four roots' windows at 4096 members (96 frames
/// each) and the control frames between them, so that a frame kept for fellows is mostly
/// served from the port until its window slot is reused, and few are copied.
pub const LINK_HOLDS: usize = 1024;

impl Scenario {
    /// A scenario with `nodes` members and `messages` messages ([`Traffic::new`]), both
    /// hardware-broadcast algorithms, up to 4 roots.
    pub fn new(nodes: u16, messages: usize) -> Scenario {
        Scenario {
            traffic: Traffic::new(nodes, messages),
            algos: vec![Algorithm::Simple, Algorithm::PushPull],
            roots: Rank::all(nodes.min(4)).collect(),
            per_port: Vec::new(),
            limit: Duration::from_secs(3600),
            window: None,
            ack_tree: None,
            peer_repair: None,
            tweak: |_| {},
            rx_coalesce: Duration::ZERO,
            link_holds: LINK_HOLDS,
            observe: false,
        }
    }
}

/// What the delivery checker counted: every expected delivery is exactly one of delivered,
/// corrupt, duplicated, out of order or missing. One type for every harness that checks
/// deliveries (the simulated cluster, the group API on the simulator, the tools' reports).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Deliveries {
    /// Deliveries expected (messages × receivers).
    pub expected: u64,
    /// Deliveries that arrived intact, first time, in order.
    pub delivered: u64,
    /// Deliveries whose bytes differ from what was sent.
    pub corrupt: u64,
    /// Deliveries of a message already delivered.
    pub duplicated: u64,
    /// Deliveries before an earlier message of the same root.
    pub out_of_order: u64,
    /// Expected deliveries that never happened.
    pub missing: u64,
}

impl Deliveries {
    /// Every expected delivery arrived intact, exactly once, in order.
    pub fn exact(&self) -> bool {
        self.delivered == self.expected
            && self.corrupt + self.duplicated + self.out_of_order + self.missing == 0
    }
}

/// What happened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// The checker's counts.
    pub deliveries: Deliveries,
    /// Data frames broadcast for the first time.
    pub data_frames: u64,
    /// Repair frames (point-to-point and re-broadcast).
    pub repair_frames: u64,
    /// Of which re-broadcasts.
    pub rebroadcasts: u64,
    /// Repair frames members relayed to fellow members (peer repair), besides the roots' own.
    pub peer_repairs: u64,
    /// Frames the simulator dropped (counted per receiving port).
    pub lost_frames: u64,
    /// Frames the simulator delivered to a port (each port's copy of a broadcast counts):
    /// what the members handled, the unit of the simulator's cost.
    pub frames_delivered: u64,
    /// ACK frames sent to a root directly.
    pub ack_frames: u64,
    /// Acknowledgements sent up the acknowledgement tree (to a parent, or a root).
    pub tree_ack_frames: u64,
    /// Control frames the roots received: ACKs, NACKs, pulls and tree acknowledgements.
    pub root_control_frames: u64,
    /// Of `root_control_frames`: NACKs.
    pub root_nacks: u64,
    /// Of `root_control_frames`: tree acknowledgements.
    pub root_tree_acks: u64,
    /// Of `root_control_frames`: answers to the roots' probes.
    pub root_probe_answers: u64,
    /// Bytes of the messages delivered intact, summed over every receiver (whether kept
    /// whole or observed).
    pub delivered_bytes: u64,
    /// NACK frames.
    pub nack_frames: u64,
    /// Pull requests.
    pub pull_frames: u64,
    /// Frames dropped by the engines (bad CRC, duplicates, stale, ...).
    pub dropped_by_engines: u64,
    /// Of which failed the CRC.
    pub bad_crc: u64,
    /// Frames the simulator corrupted.
    pub corrupted_frames: u64,
    /// Most events a member held for its application at once.
    pub peak_queued_events: usize,
    /// Virtual time the run took.
    pub virtual_time_us: u64,
    /// False if the limit was hit before everything was delivered.
    pub completed: bool,
}

/// Deterministic content of message `index` of `root`.
pub fn message_bytes(seed: u64, root: Rank, index: u64, len: usize) -> Vec<u8> {
    let mut rng = ChaCha8Rng::seed_from_u64(
        seed ^ (u64::from(root.get()) << 48) ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15),
    );
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    v
}

/// Receives a streaming member keeps posted per root in a scenario.
const SCENARIO_PREPOST: usize = 64;

/// Frames a simulated host's transmit queue holds before its link says it is not ready
/// ([`SimConfig::tx_queue`]): a short NIC queue, as byte queue limits keep it. Without a
/// bound a root handed a whole window of data to its link at once, and a repair asked for
/// meanwhile waited behind it (80 frames, 10 ms at 100 Mbit/s): the NACK was repeated, the
/// root's timers fired for whole subtrees, and at 1024 members on 100 Mbit/s links with 1 %
/// loss the queue grew without end (the simulator ran out of memory past 12 GB).
pub const HOST_TX_QUEUE: usize = 4;

/// A message a root handed over: its bytes, kept until every receiver has checked its copy
/// (generated once, not once per receiver).
#[derive(Debug, Clone)]
struct Sent {
    data: Option<Vec<u8>>,
    /// Receivers that have not delivered it yet.
    left: u64,
}

/// What the workload and the members' observers ([`Scenario::observe`]) share: the messages
/// handed over, and what each observer saw. (An observer is `Send`; the simulator runs on one
/// thread, so the lock is never contended.)
#[derive(Debug, Default)]
struct Ledger {
    /// Per root: the messages handed over, by message id.
    sent: Vec<Vec<Sent>>,
    /// Per member and root (in the order of `Stream::roots`): the messages its observer saw
    /// to their end, in the order it saw them, and whether every byte equalled the sent one.
    seen: Vec<Vec<VecDeque<(u64, bool)>>>,
}

type SharedLedger = std::sync::Arc<std::sync::Mutex<Ledger>>;

/// The ledger, locked.
fn open(ledger: &SharedLedger) -> std::sync::MutexGuard<'_, Ledger> {
    // Nothing panics while holding it: a poisoned lock still holds what was recorded.
    ledger
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A member's observer of one root's stream: compares each piece with the sent message at its
/// offset, and records each message it saw to its end in the ledger.
struct PieceCheck {
    ledger: SharedLedger,
    member: usize,
    root: Rank,
    /// The root's place in `Stream::roots`.
    k: usize,
    /// The message in progress, the bytes seen of it, and whether all of them matched.
    msg_id: u64,
    filled: usize,
    intact: bool,
}

impl ethbcast_proto::Observe for PieceCheck {
    fn piece(&mut self, p: &ethbcast_proto::Piece<'_>) {
        if p.offset == 0 {
            (self.msg_id, self.filled, self.intact) = (p.msg_id, 0, true);
        }
        let mut ledger = open(&self.ledger);
        let sent = ledger.sent[self.root.index()]
            .get(p.msg_id as usize)
            .and_then(|s| s.data.as_deref());
        let end = p.offset + p.bytes.len();
        let same =
            sent.is_some_and(|d| d.len() == p.msg_len && d.get(p.offset..end) == Some(p.bytes));
        self.intact &= same && p.msg_id == self.msg_id && p.offset == self.filled;
        self.filled = end;
        if end >= p.msg_len {
            let whole = self.intact && end == p.msg_len;
            ledger.seen[self.member][self.k].push_back((p.msg_id, whole));
        }
    }
}

/// The streaming workload: roots broadcast their queue; every member checks what it gets.
struct Stream {
    seed: u64,
    /// Per root (in the order of `roots`): (size, algo) still to hand to the root.
    pending: Vec<VecDeque<(usize, Algorithm)>>,
    /// Messages in `pending`, all roots together: what `done` asks after every step, which
    /// a look at every member's queue made cost the group's size.
    unsent: usize,
    /// The messages handed over, and what observers saw.
    ledger: SharedLedger,
    /// The roots, in rank order: a member's expectations are kept for these alone (one per
    /// member of 4096 was 128 MiB).
    roots: Vec<Rank>,
    /// Per member and root, member after member (root `k` of member `i` at
    /// `i * roots.len() + k`): next message id expected.
    next: Vec<u64>,
    report: Report,
    /// Messages that reached a member other than their root, whatever the checker said.
    arrived: u64,
    /// Members that receive each message (all but its root).
    receivers: u64,
    /// Whether members observe and keep nothing ([`Scenario::observe`]).
    observe: bool,
}

impl Workload for Stream {
    fn visit(&mut self, i: usize, m: &mut Member, now: Instant) {
        // What is looked at for every member's turn is the member's own events and the few
        // roots' list: a member with nothing to take costs no line of the workload's tables.
        let own = self
            .roots
            .binary_search(&Rank::new(i as u16))
            .ok()
            .filter(|&k| !self.pending[k].is_empty());
        if own.is_none() && m.queued_events() == 0 {
            return;
        }
        let mut ledger = open(&self.ledger);
        if let Some(k) = own {
            while let Some(&(size, algo)) = self.pending[k].front() {
                let idx = ledger.sent[i].len() as u64;
                let data = message_bytes(self.seed, Rank::new(i as u16), idx, size);
                if m.send_stream(now, data.clone(), algo).is_err() {
                    break;
                }
                ledger.sent[i].push(Sent {
                    data: Some(data),
                    left: self.receivers,
                });
                self.pending[k].pop_front();
                self.unsent -= 1;
            }
        }
        self.report.peak_queued_events = self.report.peak_queued_events.max(m.queued_events());
        while let Some(ev) = m.poll_event() {
            let (root, msg_id, len, data) = match ev {
                Event::Delivered(Message { root, msg_id, data }) => {
                    (root, msg_id, data.len(), Some(data))
                }
                Event::Observed { root, msg_id, len } => (root, msg_id, len, None),
                _ => continue,
            };
            let r = root.index();
            let Ok(k) = self.roots.binary_search(&root) else {
                // Nobody broadcasts as this root in the scenario.
                self.report.deliveries.corrupt += 1;
                continue;
            };
            // What the observer saw of it, if it observes: every byte, in order, equal.
            let seen = &mut ledger.seen[i][k];
            while seen.front().is_some_and(|&(id, _)| id < msg_id) {
                seen.pop_front();
            }
            let observed = match seen.front() {
                Some(&(id, whole)) if id == msg_id => {
                    seen.pop_front();
                    Some(whole)
                }
                _ => None,
            };
            let at = i * self.roots.len() + k;
            let expect = self.next[at];
            if msg_id < expect {
                self.report.deliveries.duplicated += 1;
                continue;
            }
            if msg_id > expect {
                self.report.deliveries.out_of_order += 1;
            }
            self.next[at] = msg_id + 1;
            let sent = ledger.sent[r].get_mut(msg_id as usize);
            let sent_data = sent.as_ref().and_then(|s| s.data.as_ref());
            let ok = match (&data, observed) {
                // Kept whole: its bytes are the sent ones (and the observer's pieces were).
                (Some(data), _) => sent_data.is_some_and(|d| d == data) && observed != Some(false),
                // Observed alone: its pieces covered it, each byte equal.
                (None, Some(whole)) => whole && self.observe,
                (None, None) => false,
            };
            if let Some(s) = sent {
                s.left = s.left.saturating_sub(1);
                if s.left == 0 {
                    s.data = None;
                }
            }
            if ok && msg_id == expect {
                self.report.deliveries.delivered += 1;
                self.report.delivered_bytes += len as u64;
            } else if !ok {
                self.report.deliveries.corrupt += 1;
            }
            if i != r {
                self.arrived += 1;
            }
        }
    }

    fn done(&self) -> bool {
        self.unsent == 0 && self.arrived >= self.report.deliveries.expected
    }
}

/// Runs a scenario to completion (or its limit) and reports.
pub fn run(sc: &Scenario) -> Result<Report, ClusterError> {
    let t = &sc.traffic;
    let n = t.members()?;
    if let Some(r) = sc.roots.iter().find(|&&r| r.index() >= n) {
        return Err(ClusterError::Scenario(format!(
            "root {r} is not a member of a group of {n} (ranks 0..{})",
            n - 1
        )));
    }
    if sc.roots.is_empty() || t.sizes.is_empty() || sc.algos.is_empty() {
        return Err(ClusterError::Scenario(
            "roots, sizes and algorithms must not be empty".into(),
        ));
    }
    let net = t.switch(n, sc.per_port.clone())?;
    let macs: std::sync::Arc<[_]> = (0..n)
        .map(|i| crate::link::sim::port_mac(i as u16))
        .collect();
    let start = net.now();
    let members = (0..n)
        .map(|i| {
            let mut cfg = EngineConfig::new(0xEB, Rank::new(i as u16), t.nodes);
            if let Some(w) = sc.window {
                cfg.window = w;
            }
            if let Some(k) = sc.ack_tree {
                cfg.ack_tree = k;
            }
            if let Some(p) = sc.peer_repair {
                cfg.peer_repair = p;
            }
            (sc.tweak)(&mut cfg);
            let mut mc = MemberConfig::new(cfg, macs.clone());
            mc.prepost = SCENARIO_PREPOST;
            Ok(Member::new(start, mc)?)
        })
        .collect::<Result<Vec<_>, ClusterError>>()?;
    let mut cluster = SimCluster::new(net, members)?;
    cluster.set_rx_coalesce(sc.rx_coalesce);
    if sc.link_holds > 0 {
        cluster.hold_frames(sc.link_holds);
        for i in 0..n {
            for &r in sc.roots.iter().filter(|r| r.index() != i) {
                cluster.member_mut(i).leave_in_link_serving(start, r);
            }
        }
    }

    // The workload: per root, a queue of (size, algo).
    let mut rng = ChaCha8Rng::seed_from_u64(t.seed);
    let mut roots = sc.roots.clone();
    roots.sort_unstable();
    roots.dedup();
    let mut pending: Vec<VecDeque<(usize, Algorithm)>> = vec![VecDeque::new(); roots.len()];
    for i in 0..t.messages {
        let root = sc.roots[i % sc.roots.len()];
        let size = t.sizes[rng.gen_range(0..t.sizes.len())];
        let algo = sc.algos[rng.gen_range(0..sc.algos.len())];
        if let Ok(k) = roots.binary_search(&root) {
            pending[k].push_back((size, algo));
        }
    }
    let total: u64 = pending.iter().map(|p| p.len() as u64).sum();
    let ledger = SharedLedger::new(std::sync::Mutex::new(Ledger {
        sent: vec![Vec::new(); n],
        seen: vec![vec![VecDeque::new(); roots.len()]; n],
    }));
    if sc.observe {
        for i in 0..n {
            for (k, &root) in roots.iter().enumerate().filter(|(_, r)| r.index() != i) {
                let check = PieceCheck {
                    ledger: ledger.clone(),
                    member: i,
                    root,
                    k,
                    msg_id: 0,
                    filled: 0,
                    intact: true,
                };
                let m = cluster.member_mut(i);
                m.observe(start, root, Box::new(check));
                m.keep_at_most(start, root, 0);
            }
        }
    }
    let mut w = Stream {
        seed: t.seed,
        pending,
        unsent: total as usize,
        ledger,
        next: vec![0; roots.len() * n],
        roots,
        report: Report {
            deliveries: Deliveries {
                expected: total * (n as u64 - 1),
                ..Deliveries::default()
            },
            ..Report::default()
        },
        arrived: 0,
        receivers: n as u64 - 1,
        observe: sc.observe,
    };
    let end = cluster.run(sc.limit, &mut w)?;
    let mut report = w.report;
    report.completed = end == RunEnd::Done;
    report.deliveries.missing = report
        .deliveries
        .expected
        .saturating_sub(report.deliveries.delivered + report.deliveries.corrupt);
    for m in cluster.members() {
        let s = m.engine_stats();
        report.data_frames += s.data_frames;
        report.repair_frames += s.repair_frames;
        report.peer_repairs += s.peer_repairs;
        report.rebroadcasts += s.rebroadcasts;
        report.ack_frames += s.ack_frames;
        report.tree_ack_frames += s.tree_ack_frames;
        report.root_control_frames += s.acks_handled;
        report.root_nacks += s.nacks_handled;
        report.root_tree_acks += s.tree_acks_handled;
        report.root_probe_answers += s.probe_answers_handled;
        report.nack_frames += s.nack_frames;
        report.pull_frames += s.pull_frames;
        report.dropped_by_engines += s.drops.total() + m.stats().malformed;
        report.bad_crc += s.drops.bad_crc + m.stats().bad_crc;
    }
    let st = cluster.net().stats();
    report.lost_frames = st.lost;
    report.frames_delivered = st.frames_delivered;
    report.corrupted_frames = st.corrupted;
    report.virtual_time_us = cluster.net().now().duration_since(start).as_micros() as u64;
    Ok(report)
}
