//! The simulated switch: the project's main test-bed.
//!
//! Reliable broadcast is only as good as its behaviour under loss, duplication, reordering,
//! corruption, dead members and congested switch ports, and a real segment shows those rarely
//! and never twice the same way. [`SimNet`] is one Ethernet switch with N ports on one
//! broadcast medium, a virtual clock, a link model and seeded fault injection, so that a
//! protocol run is a pure function of its seed: same seed, same run, bit for bit.
//!
//! # Model
//!
//! - **Ports and addresses.** Port `i` has the MAC [`port_mac`]`(i)` = `02:00:00:00:HI:LO`
//!   (locally administered). A frame to [`BROADCAST_MAC`] is copied to every *other* port; a
//!   frame to a port's MAC goes only there; a frame to any other station MAC (or to the
//!   sender's own) is dropped by the switch and counted in [`SimStats::unknown_dst`].
//! - **Multicast.** A frame to a group (multicast) address is flooded like a broadcast, so it
//!   takes its time on every other port's link, but only the hosts that joined the group
//!   ([`Link::join_group`]) receive it; the others' NICs discard it
//!   ([`SimStats::filtered`]), as a real NIC discards groups it was not told to pass up.
//! - **Link model.** Store-and-forward. A sending port's uplink serialises its frames one
//!   after the other at `rate_bps` (time on the wire: [`wire_bytes`] × 8 / rate, i.e. the PDU
//!   padded to the Ethernet minimum, plus header, FCS, preamble and inter-frame gap); after
//!   the last bit the frame reaches the switch `latency` later. The switch puts it on each
//!   destination port's output queue, which serialises again at `rate_bps`, so a port that
//!   many senders talk to at once queues (incast). With [`SimConfig::switch_buffer`] the
//!   output queue holds at most that many frames and tail-drops the rest
//!   ([`SimStats::switch_drops`]). `rate_bps: None` makes every link infinitely fast: frames
//!   arrive exactly `latency` after they are sent.
//! - **Faults** ([`Faults`]) are drawn per *receiving* port, independently, so one broadcast
//!   frame may be lost at port 3 and arrive at port 5, as on a real switch whose output
//!   buffers and cables fail separately. A sending port's [`Faults::tx_loss`] loses the frame
//!   before the switch (for everybody) and a dead sender's frames go nowhere. Each port draws
//!   from its own ChaCha8 streams (one for sending, one for receiving), derived from the seed
//!   and the port index, so changing the faults of one port does not perturb the others.
//! - **Virtual time.** Nothing moves until the harness calls [`SimNet::advance_to`]. Pending
//!   frames are ordered by (due time, sequence number), so ties resolve in the order the
//!   events were created and the run is deterministic. Each link is a FIFO whose front alone
//!   sits in a binary heap, so the heap stays small even when queues grow long under
//!   overload. [`SimPort::recv`] hands over every frame that has become due and never waits:
//!   the harness owns the clock.
//!
//! # Driving it
//!
//! ```
//! use ethbcast::link::sim::{Faults, SimConfig, SimNet};
//! use ethbcast::link::{Link, BROADCAST_MAC};
//!
//! let cfg = SimConfig { faults: Faults::lossy(0.01), ..SimConfig::new(3) };
//! let net = SimNet::new(cfg)?;
//! let mut ports = net.all_ports();
//! ports[0].send(BROADCAST_MAC, b"hello")?;
//! let mut got = 0;
//! // The harness loop: jump to the next event (or an engine timer, whichever is first),
//! // then let every host receive what is due.
//! while let Some(t) = net.next_event() {
//!     net.advance_to(t);
//!     for p in &mut ports {
//!         got += p.recv(None, &mut |_src, _pdu| {})?;
//!     }
//! }
//! assert_eq!(got + net.stats().lost as usize, 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! That loop visits every host after every event, which costs O(hosts) per event and
//! O(hosts²) per broadcast once each host answers. A harness for large groups visits only the
//! hosts an event concerns: [`SimNet::take_ready`] names the ports whose receive queue
//! became non-empty since it was last called, and the harness keeps its hosts' own timers in a priority queue; the
//! next instant to advance to is the earlier of [`SimNet::next_event`] and that queue's head.
//!
//! Broadcast frames are stored once (`Rc<[u8]>`) and shared by every receiving port, except
//! for the copies that corruption rewrites. The whole simulator is single-threaded; handles
//! share it through `Rc<RefCell<..>>`, and no borrow is held while user code runs, so calling
//! back into the simulator from a receive callback is safe.

use super::{Link, LinkError, MacAddr, BROADCAST_MAC};
use crate::wire::ethernet;
use ethbcast_proto::queue::EventQueue;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use thiserror::Error;

#[cfg(test)]
mod tests;

/// Bytes a frame occupies on the wire besides the PDU: Ethernet header (14), FCS (4),
/// preamble and start delimiter (8), inter-frame gap (12).
pub const WIRE_OVERHEAD: usize = 14 + 4 + 8 + 12;
/// Shortest Ethernet payload: shorter PDUs are padded to it on the wire.
pub const MIN_ETH_PAYLOAD: usize = 46;
/// Most ports a simulated switch can have (the port index fills the last two MAC bytes).
pub const MAX_PORTS: usize = 1 << 16;

/// The bytes one PDU of `pdu_len` bytes occupies on the wire, padding and overhead included.
pub fn wire_bytes(pdu_len: usize) -> usize {
    pdu_len.max(MIN_ETH_PAYLOAD).saturating_add(WIRE_OVERHEAD)
}

/// The MAC address of port `index`: `02:00:00:00:HI:LO`.
pub const fn port_mac(index: u16) -> MacAddr {
    let [hi, lo] = index.to_be_bytes();
    MacAddr([0x02, 0, 0, 0, hi, lo])
}

/// The port index a MAC address of the simulated switch names, if it is one of ours.
pub fn port_index(mac: &MacAddr) -> Option<u16> {
    match mac.0 {
        [0x02, 0, 0, 0, hi, lo] => Some(u16::from_be_bytes([hi, lo])),
        _ => None,
    }
}

/// What can go wrong on one port. Probabilities are per frame, in `[0, 1]`.
///
/// Receive-side faults apply, in this order, to each frame the switch forwards to the port:
/// dead port, loss burst, independent loss, loss of group-addressed frames, corruption, reordering,
/// duplication.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Faults {
    /// Independent drop probability of each frame arriving at this port.
    pub loss: f64,
    /// Probability that a frame arriving in the good state starts a loss burst (Gilbert-Elliott
    /// with a loss-only bad state): the frame is lost, and so is each following frame with
    /// probability `1 - 1/burst_len`.
    pub burst_loss: f64,
    /// Mean length of a loss burst, in frames arriving at this port (at least 1).
    pub burst_len: f64,
    /// Probability that a frame is delivered twice (the copy is serialised right after it).
    pub dup: f64,
    /// Probability that a frame is held back by an extra uniform delay in
    /// `(0, reorder_delay]`, so that later frames overtake it.
    pub reorder: f64,
    /// Largest extra delay of a reordered frame.
    pub reorder_delay: Duration,
    /// Probability that a frame's PDU arrives with 1 to 3 distinct bits flipped.
    pub corrupt: f64,
    /// The port is dead: it sends and receives nothing.
    pub dead: bool,
    /// Probability that a frame to a group address (broadcast or multicast) arriving at this
    /// port is lost, on top of `loss`: 1 models a port behind a filter that drops broadcast
    /// but passes unicast (the fail-over case).
    pub group_loss: f64,
    /// Probability that a frame *sent* by this port is lost before the switch, i.e. for every
    /// destination at once.
    pub tx_loss: f64,
}

impl Default for Faults {
    fn default() -> Self {
        Faults::NONE
    }
}

impl Faults {
    /// A perfect port.
    pub const NONE: Faults = Faults {
        loss: 0.0,
        burst_loss: 0.0,
        burst_len: 4.0,
        dup: 0.0,
        reorder: 0.0,
        reorder_delay: Duration::from_micros(100),
        corrupt: 0.0,
        dead: false,
        group_loss: 0.0,
        tx_loss: 0.0,
    };

    /// A port that loses each arriving frame independently with probability `p`.
    pub fn lossy(p: f64) -> Faults {
        Faults {
            loss: p,
            ..Faults::NONE
        }
    }

    /// Checks that every probability lies in `[0, 1]` and `burst_len` is at least 1.
    pub fn validate(&self) -> Result<(), SimError> {
        for (field, value) in [
            ("loss", self.loss),
            ("burst_loss", self.burst_loss),
            ("dup", self.dup),
            ("reorder", self.reorder),
            ("corrupt", self.corrupt),
            ("tx_loss", self.tx_loss),
            ("group_loss", self.group_loss),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(SimError::BadProbability { field, value });
            }
        }
        if !(self.burst_len >= 1.0 && self.burst_len.is_finite()) {
            return Err(SimError::BadBurstLen(self.burst_len));
        }
        Ok(())
    }
}

/// How to build a [`SimNet`].
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// Number of ports (at most [`MAX_PORTS`]).
    pub ports: usize,
    /// Line rate of every link in bits per second; `None` is infinitely fast.
    pub rate_bps: Option<u64>,
    /// Propagation plus switching delay of every frame.
    pub latency: Duration,
    /// Largest PDU a port accepts ([`Link::max_pdu`]).
    pub mtu: usize,
    /// Seed of every random decision.
    pub seed: u64,
    /// Faults of every port without an override.
    pub faults: Faults,
    /// Per-port overrides: `(port index, faults)`.
    pub per_port: Vec<(usize, Faults)>,
    /// Capacity of each switch output queue in frames (tail drop); `None` is unbounded.
    pub switch_buffer: Option<usize>,
    /// Largest frames a host's transmit queue holds before its link says it is not ready
    /// ([`Link::tx_ready`]; a NIC's ring, kept short as byte queue limits keep it); the
    /// port's host is visited again when the queue has drained below it. `None`: the link
    /// takes everything at once (an unbounded queue).
    pub tx_queue: Option<usize>,
}

impl Default for SimConfig {
    /// Four perfect ports at 1 Gbit/s, 5 µs latency, MTU 1500, seed 0, unbounded buffers.
    fn default() -> Self {
        SimConfig {
            ports: 4,
            rate_bps: Some(1_000_000_000),
            latency: Duration::from_micros(5),
            mtu: 1500,
            seed: 0,
            faults: Faults::NONE,
            per_port: Vec::new(),
            switch_buffer: None,
            tx_queue: None,
        }
    }
}

impl SimConfig {
    /// The default configuration with `ports` ports.
    pub fn new(ports: usize) -> Self {
        SimConfig {
            ports,
            ..SimConfig::default()
        }
    }
}

/// Misuse of the simulator: bad configuration or a port that does not exist.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum SimError {
    /// The port index is out of range.
    #[error("no port {port}: the simulated switch has {ports} ports")]
    NoSuchPort {
        /// The index asked for.
        port: usize,
        /// How many ports the switch has.
        ports: usize,
    },
    /// More ports than MAC addresses to give them.
    #[error("{0} ports requested: a simulated switch has at most {MAX_PORTS}")]
    TooManyPorts(usize),
    /// A line rate of zero would never send anything.
    #[error("rate_bps is 0: use None for an infinitely fast link")]
    ZeroRate,
    /// A fault probability outside `[0, 1]` (or NaN).
    #[error("fault probability {field} = {value} is not in [0, 1]")]
    BadProbability {
        /// Which field of [`Faults`].
        field: &'static str,
        /// Its value.
        value: f64,
    },
    /// A mean burst length below one frame (or not finite).
    #[error("burst_len = {0} must be a finite number of frames >= 1")]
    BadBurstLen(f64),
}

/// Counters of what the simulated switch did. Sender-side counters (`frames_sent`,
/// `bytes_on_wire`, `unknown_dst`) belong to the sending port, the others to the receiving
/// port, so [`SimNet::stats`] (the sum) counts each event once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Frames the port's host sent (accepted by [`Link::send`]).
    pub frames_sent: u64,
    /// Frames that reached the port's receive queue (duplicates included).
    pub frames_delivered: u64,
    /// Frames for this port dropped by loss, a burst, a dead port, a dead or lossy sender, or
    /// a partition.
    pub lost: u64,
    /// Extra copies delivered.
    pub duplicated: u64,
    /// Frames held back for reordering.
    pub reordered: u64,
    /// Frames delivered with flipped bits.
    pub corrupted: u64,
    /// Frames tail-dropped by a full switch output queue.
    pub switch_drops: u64,
    /// Frames sent to a MAC address that is not another port of the switch.
    pub unknown_dst: u64,
    /// Multicast frames that reached the port for a group its host had not joined (discarded
    /// by its NIC; they still took their time on the link).
    pub filtered: u64,
    /// Bytes the port put on its uplink, padding, header, FCS, preamble and gap included.
    pub bytes_on_wire: u64,
}

impl std::ops::AddAssign for SimStats {
    fn add_assign(&mut self, o: SimStats) {
        self.frames_sent += o.frames_sent;
        self.frames_delivered += o.frames_delivered;
        self.lost += o.lost;
        self.duplicated += o.duplicated;
        self.reordered += o.reordered;
        self.corrupted += o.corrupted;
        self.switch_drops += o.switch_drops;
        self.unknown_dst += o.unknown_dst;
        self.filtered += o.filtered;
        self.bytes_on_wire += o.bytes_on_wire;
    }
}

impl std::ops::Add for SimStats {
    type Output = SimStats;
    fn add(mut self, o: SimStats) -> SimStats {
        self += o;
        self
    }
}

impl std::iter::Sum for SimStats {
    fn sum<I: Iterator<Item = SimStats>>(iter: I) -> SimStats {
        iter.fold(SimStats::default(), |a, b| a + b)
    }
}

/// The instant virtual time zero maps to, shared by every simulator of the process so that
/// two runs with the same seed produce the same `Instant`s.
fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

fn to_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn to_instant(ns: u64) -> Instant {
    let b = base();
    b.checked_add(Duration::from_nanos(ns))
        .or_else(|| b.checked_add(Duration::from_secs(u64::from(u32::MAX))))
        .unwrap_or(b)
}

/// `p > 0` and a uniform draw falls below it; draws nothing for `p == 0`, never panics.
fn chance(rng: &mut ChaCha8Rng, p: f64) -> bool {
    p > 0.0 && rng.gen::<f64>() < p
}

/// Where the switch sends a frame.
#[derive(Debug, Clone, Copy)]
enum Target {
    All,
    One(usize),
    Group(MacAddr),
}

/// An Ethernet frame on its way: to the switch (`peer` is where it is addressed) or to a
/// port (`peer` is `()`: the frame's header names its source).
#[derive(Debug)]
struct InFlight<P> {
    at: u64,
    seq: u64,
    peer: P,
    pdu: Rc<[u8]>,
}

/// What the event queue orders, by (due time, creation order of the frame or event). Frames on one link leave it in the order they entered (each link is
/// a FIFO with non-decreasing due times), so only the *front* of each link's queue needs to
/// be in the heap: it stays as small as the number of ports plus the frames held back for
/// reordering, however long the queues grow under overload.
#[derive(Debug)]
enum EventKind {
    /// The front frame of this port's uplink reaches the switch.
    Uplink(usize),
    /// The front frame of the switch's output queue to this port reaches the port.
    Downlink(usize),
    /// A frame held back for reordering reaches `port`.
    Late { port: usize, pdu: Rc<[u8]> },
    /// The transmit queue of `port`'s host may have drained below its bound.
    TxReady(usize),
}

#[derive(Debug)]
struct PortState {
    faults: Faults,
    killed: bool,
    tx_rng: ChaCha8Rng,
    rx_rng: ChaCha8Rng,
    in_burst: bool,
    /// When the uplink finishes serialising what it has been given.
    tx_free: u64,
    /// Its host was told the link is not ready; it is woken when the queue drains.
    tx_blocked: bool,
    /// When the switch output link to this port finishes what it has been given.
    out_free: u64,
    /// Completion times of the frames in the switch output queue (only with a bounded buffer).
    out_queue: VecDeque<u64>,
    /// Frames sent by this port, on their way to the switch.
    uplink: VecDeque<InFlight<Target>>,
    /// Frames the switch forwarded to this port, on their way to it (not reordered ones).
    downlink: VecDeque<InFlight<()>>,
    /// Ethernet frames due at this port, oldest first.
    rx: VecDeque<Rc<[u8]>>,
    stats: SimStats,
}

impl PortState {
    fn dead(&self) -> bool {
        self.killed || self.faults.dead
    }
}

#[derive(Debug)]
struct Inner {
    now: u64,
    seq: u64,
    rate_bps: Option<u64>,
    latency: u64,
    mtu: usize,
    switch_buffer: Option<usize>,
    /// Serialisation time of the transmit queue's bound ([`SimConfig::tx_queue`]).
    tx_queue_ns: Option<u64>,
    heap: EventQueue<(u64, u64), EventKind>,
    ports: Vec<PortState>,
    /// The ports that joined each multicast group, in index order.
    groups: BTreeMap<MacAddr, Vec<usize>>,
    /// Partitions: frames between a port with `true` in one and a port with `true` in the
    /// other are dropped.
    cuts: Vec<(Vec<bool>, Vec<bool>)>,
    /// Ports whose receive queue became non-empty since [`SimNet::take_ready`] last ran, so
    /// that a harness visits only the hosts that have something to receive.
    ready: Vec<usize>,
    /// Ports that receive copies of unicast frames between other ports (taps).
    taps: Vec<usize>,
}

impl Inner {
    fn check_port(&self, port: usize) -> Result<(), SimError> {
        if port < self.ports.len() {
            Ok(())
        } else {
            Err(SimError::NoSuchPort {
                port,
                ports: self.ports.len(),
            })
        }
    }

    /// Serialisation time of a PDU in nanoseconds (rounded up).
    fn ser_ns(&self, pdu_len: usize) -> u64 {
        match self.rate_bps {
            None | Some(0) => 0,
            Some(rate) => {
                let bits = wire_bytes(pdu_len) as u128 * 8;
                let ns = (bits * 1_000_000_000).div_ceil(u128::from(rate));
                u64::try_from(ns).unwrap_or(u64::MAX)
            }
        }
    }

    /// Whether `port`'s host may hand over another frame without queueing it behind more
    /// than the transmit queue's bound.
    fn tx_ready(&self, port: usize) -> bool {
        self.tx_queue_ns
            .is_none_or(|q| self.ports[port].tx_free.saturating_sub(self.now) < q)
    }

    /// Tells `port`'s host whether it may send; when not, wakes it (puts it on the ready
    /// list) once the queue has drained below the bound.
    fn poll_tx_ready(&mut self, port: usize) -> bool {
        if self.tx_ready(port) {
            return true;
        }
        if !self.ports[port].tx_blocked {
            self.ports[port].tx_blocked = true;
            self.schedule_tx_wake(port);
        }
        false
    }

    fn schedule_tx_wake(&mut self, port: usize) {
        let q = self.tx_queue_ns.unwrap_or(0);
        let at = (self.ports[port].tx_free.saturating_sub(q) + 1).max(self.now);
        let seq = self.next_seq();
        self.heap.push((at, seq), EventKind::TxReady(port));
    }

    fn next_seq(&mut self) -> u64 {
        let seq = self.seq;
        self.seq += 1;
        seq
    }

    /// Puts a frame on `src`'s uplink, due at the switch at `at` (not before the frames
    /// already on it).
    fn push_uplink(&mut self, src: usize, at: u64, target: Target, pdu: Rc<[u8]>) {
        let seq = self.next_seq();
        let q = &mut self.ports[src].uplink;
        if q.is_empty() {
            self.heap.push((at, seq), EventKind::Uplink(src));
        }
        q.push_back(InFlight {
            at,
            seq,
            peer: target,
            pdu,
        });
    }

    /// Puts a frame on the switch's output link to `port`, due at `at` (not before the frames
    /// already on it).
    fn push_downlink(&mut self, port: usize, at: u64, pdu: Rc<[u8]>) {
        let seq = self.next_seq();
        let q = &mut self.ports[port].downlink;
        if q.is_empty() {
            self.heap.push((at, seq), EventKind::Downlink(port));
        }
        q.push_back(InFlight {
            at,
            seq,
            peer: (),
            pdu,
        });
    }

    fn cut(&self, a: usize, b: usize) -> bool {
        self.cuts
            .iter()
            .any(|(x, y)| (x[a] && y[b]) || (y[a] && x[b]))
    }

    /// Counts a frame from `src` to `target` as lost at every port it was meant for.
    fn lose_everywhere(&mut self, src: usize, target: Target) {
        match target {
            Target::One(j) => self.ports[j].stats.lost += 1,
            Target::Group(g) => {
                for &j in self.groups.get(&g).into_iter().flatten() {
                    if j != src {
                        self.ports[j].stats.lost += 1;
                    }
                }
            }
            Target::All => {
                for (j, p) in self.ports.iter_mut().enumerate() {
                    if j != src {
                        p.stats.lost += 1;
                    }
                }
            }
        }
    }

    fn send(&mut self, src: usize, dst: MacAddr, pdu: &[u8]) -> Result<(), LinkError> {
        // `src < ports <= MAX_PORTS`, so the index fits.
        self.send_as(src, port_mac(src as u16), dst, pdu)
    }

    /// Sends from port `src` a frame whose Ethernet source is `src_mac` (its own, or a
    /// spoofed one).
    fn send_as(
        &mut self,
        src: usize,
        src_mac: MacAddr,
        dst: MacAddr,
        pdu: &[u8],
    ) -> Result<(), LinkError> {
        if pdu.len() > self.mtu {
            return Err(LinkError::FrameTooLong {
                len: pdu.len(),
                max: self.mtu,
            });
        }
        let n = self.ports.len();
        let target = if dst == BROADCAST_MAC {
            Some(Target::All)
        } else if ethernet::is_group_mac(&dst) {
            Some(Target::Group(dst))
        } else {
            port_index(&dst)
                .map(usize::from)
                .filter(|&j| j < n && j != src)
                .map(Target::One)
        };
        let ser = self.ser_ns(pdu.len());
        let now = self.now;
        let sender = &mut self.ports[src];
        sender.stats.frames_sent += 1;
        if sender.dead() {
            if let Some(t) = target {
                self.lose_everywhere(src, t);
            }
            return Ok(());
        }
        let done = sender.tx_free.max(now).saturating_add(ser);
        sender.tx_free = done;
        sender.stats.bytes_on_wire += wire_bytes(pdu.len()) as u64;
        let Some(target) = target else {
            sender.stats.unknown_dst += 1;
            return Ok(());
        };
        if chance(&mut sender.tx_rng, sender.faults.tx_loss) {
            self.lose_everywhere(src, target);
            return Ok(());
        }
        let at = done.saturating_add(self.latency);
        let frame = ethernet::to_vec(dst, src_mac, pdu);
        self.push_uplink(src, at, target, Rc::from(frame));
        Ok(())
    }

    /// The switch received a whole frame at `self.now`: forward it to its output ports.
    fn arrive(&mut self, src: usize, target: Target, pdu: Rc<[u8]>) {
        if self.ports[src].dead() {
            self.lose_everywhere(src, target);
            return;
        }
        let ser = self.ser_ns(pdu.len().saturating_sub(ethernet::HEADER_LEN));
        match target {
            Target::One(j) => {
                for k in self.taps.clone() {
                    if k != src && k != j {
                        self.forward(src, k, Rc::clone(&pdu), ser);
                    }
                }
                self.forward(src, j, pdu, ser)
            }
            Target::Group(g) => {
                // Flooded: every other port's link carries it, the members' hosts take it.
                let members = self.groups.get(&g).cloned().unwrap_or_default();
                let mut next = members.iter().copied().peekable();
                for j in 0..self.ports.len() {
                    let member = next.next_if_eq(&j).is_some();
                    if j == src {
                        continue;
                    }
                    if member {
                        self.forward(src, j, Rc::clone(&pdu), ser);
                    } else {
                        self.occupy(src, j, ser);
                    }
                }
            }
            Target::All => {
                for j in 0..self.ports.len() {
                    if j != src {
                        self.forward(src, j, Rc::clone(&pdu), ser);
                    }
                }
            }
        }
    }

    /// One output port's share of a frame (`ser` ns on the wire): queueing, serialisation,
    /// receive-side faults.
    fn forward(&mut self, src: usize, j: usize, pdu: Rc<[u8]>, ser: u64) {
        if self.cut(src, j) || self.ports[j].dead() {
            self.ports[j].stats.lost += 1;
            return;
        }
        let Some(done) = self.queue_out(j, ser) else {
            return;
        };
        let cap = self.switch_buffer;
        let p = &mut self.ports[j];

        // Receive-side faults, drawn from this port's own stream.
        let f = p.faults;
        let rng = &mut p.rx_rng;
        // Gilbert-Elliott: a frame in (or starting) a burst is lost, and the burst goes on past
        // it with probability 1 - 1/burst_len, so burst lengths are geometric with that mean.
        let lost = if p.in_burst || chance(rng, f.burst_loss) {
            p.in_burst = !chance(rng, 1.0 / f.burst_len);
            true
        } else {
            chance(rng, f.loss)
        };
        let to_group = pdu.first().is_some_and(|b| b & 1 == 1);
        let lost = lost || (to_group && chance(rng, f.group_loss));
        if lost {
            p.stats.lost += 1;
            return;
        }
        let pdu = if pdu.len() > ethernet::HEADER_LEN && chance(rng, f.corrupt) {
            p.stats.corrupted += 1;
            corrupt(rng, &pdu)
        } else {
            pdu
        };
        let late = chance(rng, f.reorder).then(|| {
            p.stats.reordered += 1;
            let max = to_ns(f.reorder_delay).max(1);
            done.saturating_add(rng.gen_range(1..=max))
        });
        let dup_at = chance(rng, f.dup).then(|| {
            p.stats.duplicated += 1;
            let d = p.out_free.saturating_add(ser);
            p.out_free = d;
            if cap.is_some() {
                p.out_queue.push_back(d);
            }
            d
        });
        let dup = dup_at.map(|d| (d, Rc::clone(&pdu)));
        match late {
            Some(at) => {
                let seq = self.next_seq();
                let kind = EventKind::Late { port: j, pdu };
                self.heap.push((at, seq), kind);
            }
            None => self.push_downlink(j, done, pdu),
        }
        if let Some((d, pdu)) = dup {
            self.push_downlink(j, d, pdu);
        }
    }

    /// Puts a frame of `ser` ns on the switch's output queue to port `j`: when its last bit
    /// will have left, or `None` if the queue is full (tail drop, counted).
    fn queue_out(&mut self, j: usize, ser: u64) -> Option<u64> {
        let now = self.now;
        let cap = self.switch_buffer;
        let p = &mut self.ports[j];
        if let Some(cap) = cap {
            while p.out_queue.front().is_some_and(|&done| done <= now) {
                p.out_queue.pop_front();
            }
            if p.out_queue.len() >= cap {
                p.stats.switch_drops += 1;
                return None;
            }
        }
        let done = p.out_free.max(now).saturating_add(ser);
        p.out_free = done;
        if cap.is_some() {
            p.out_queue.push_back(done);
        }
        Some(done)
    }

    /// A flooded multicast frame for a group port `j`'s host did not join: it takes its time
    /// on the link, and the NIC discards it.
    fn occupy(&mut self, src: usize, j: usize, ser: u64) {
        if self.cut(src, j) || self.ports[j].dead() {
            return;
        }
        if self.queue_out(j, ser).is_some() {
            self.ports[j].stats.filtered += 1;
        }
    }

    fn deliver(&mut self, port: usize, pdu: Rc<[u8]>) {
        let p = &mut self.ports[port];
        if p.dead() {
            p.stats.lost += 1;
        } else {
            p.stats.frames_delivered += 1;
            if p.rx.is_empty() {
                self.ready.push(port);
            }
            p.rx.push_back(pdu);
        }
    }

    /// Takes the front frame off one of `port`'s link queues (whose turn in the heap just came)
    /// and puts the next one's turn in the heap.
    fn pop_front<P>(
        &mut self,
        port: usize,
        queue: fn(&mut PortState) -> &mut VecDeque<InFlight<P>>,
        token: fn(usize) -> EventKind,
    ) -> Option<InFlight<P>> {
        let q = queue(&mut self.ports[port]);
        let front = q.pop_front();
        if let Some(next) = q.front() {
            let (at, seq) = (next.at, next.seq);
            self.heap.push((at, seq), token(port));
        }
        front
    }

    fn advance_to(&mut self, target: u64) -> usize {
        if target < self.now {
            return 0;
        }
        let mut delivered = 0;
        while let Some(((at, _), kind)) = self.heap.pop_due((target, u64::MAX)) {
            self.now = at.max(self.now);
            match kind {
                EventKind::Uplink(src) => {
                    if let Some(f) = self.pop_front(src, |p| &mut p.uplink, EventKind::Uplink) {
                        self.arrive(src, f.peer, f.pdu);
                    }
                }
                EventKind::Downlink(port) => {
                    if let Some(f) = self.pop_front(port, |p| &mut p.downlink, EventKind::Downlink)
                    {
                        delivered += 1;
                        self.deliver(port, f.pdu);
                    }
                }
                EventKind::Late { port, pdu } => {
                    delivered += 1;
                    self.deliver(port, pdu);
                }
                EventKind::TxReady(port) => {
                    if !self.tx_ready(port) {
                        self.schedule_tx_wake(port);
                    } else if std::mem::take(&mut self.ports[port].tx_blocked)
                        && self.ports[port].rx.is_empty()
                    {
                        // (A port with frames waiting is on the list already.)
                        self.ready.push(port);
                    }
                }
            }
        }
        self.now = target;
        delivered
    }
}

/// A copy of the Ethernet frame `frame` with 1 to 3 distinct bits of its PDU flipped (the
/// frame is longer than its header). The header stays intact: a real switch delivers the frame
/// to the port its header names, and the PDU's CRC is what must catch the damage.
fn corrupt(rng: &mut ChaCha8Rng, frame: &[u8]) -> Rc<[u8]> {
    let mut bytes = frame.to_vec();
    let bits = (bytes.len() - ethernet::HEADER_LEN) * 8;
    let flips = rng.gen_range(1..=3usize).min(bits);
    let mut chosen = [usize::MAX; 3];
    let mut k = 0;
    while k < flips {
        let bit = rng.gen_range(0..bits);
        if !chosen[..k].contains(&bit) {
            chosen[k] = bit;
            k += 1;
        }
    }
    for &bit in &chosen[..flips] {
        if let Some(b) = bytes.get_mut(ethernet::HEADER_LEN + bit / 8) {
            *b ^= 1 << (bit % 8);
        }
    }
    Rc::from(bytes)
}

/// The simulated switch and its virtual clock. Cloning gives another handle to the same
/// switch.
#[derive(Debug, Clone)]
pub struct SimNet {
    inner: Rc<RefCell<Inner>>,
}

impl SimNet {
    /// Builds a switch from `cfg`, with the clock at virtual time zero.
    pub fn new(cfg: SimConfig) -> Result<SimNet, SimError> {
        if cfg.ports > MAX_PORTS {
            return Err(SimError::TooManyPorts(cfg.ports));
        }
        if cfg.rate_bps == Some(0) {
            return Err(SimError::ZeroRate);
        }
        cfg.faults.validate()?;
        let mut faults = vec![cfg.faults; cfg.ports];
        for &(port, f) in &cfg.per_port {
            f.validate()?;
            *faults.get_mut(port).ok_or(SimError::NoSuchPort {
                port,
                ports: cfg.ports,
            })? = f;
        }
        let rng = |port: usize, dir: u64| {
            let mut r = ChaCha8Rng::seed_from_u64(cfg.seed);
            r.set_stream(port as u64 * 2 + dir);
            r
        };
        let ports = faults
            .into_iter()
            .enumerate()
            .map(|(i, faults)| PortState {
                faults,
                killed: false,
                tx_rng: rng(i, 0),
                rx_rng: rng(i, 1),
                in_burst: false,
                tx_free: 0,
                tx_blocked: false,
                out_free: 0,
                out_queue: VecDeque::new(),
                uplink: VecDeque::new(),
                downlink: VecDeque::new(),
                rx: VecDeque::new(),
                stats: SimStats::default(),
            })
            .collect();
        // Pin the shared base instant now, before anybody asks for the time.
        let _ = base();
        let net = SimNet {
            inner: Rc::new(RefCell::new(Inner {
                now: 0,
                seq: 0,
                rate_bps: cfg.rate_bps,
                latency: to_ns(cfg.latency),
                mtu: cfg.mtu,
                switch_buffer: cfg.switch_buffer,
                tx_queue_ns: None,
                heap: EventQueue::new(),
                ports,
                groups: BTreeMap::new(),
                cuts: Vec::new(),
                ready: Vec::new(),
                taps: Vec::new(),
            })),
        };
        {
            let mut inner = net.inner.borrow_mut();
            let frame = inner.ser_ns(cfg.mtu);
            inner.tx_queue_ns = cfg
                .tx_queue
                .map(|k| frame.saturating_mul(k as u64))
                .filter(|&q| q > 0);
        }
        Ok(net)
    }

    /// Number of ports.
    pub fn num_ports(&self) -> usize {
        self.inner.borrow().ports.len()
    }

    /// A handle to port `index`, implementing [`Link`].
    pub fn port(&self, index: usize) -> Result<SimPort, SimError> {
        self.inner.borrow().check_port(index)?;
        Ok(SimPort {
            inner: Rc::clone(&self.inner),
            index,
        })
    }

    /// Handles to every port, in index order.
    pub fn all_ports(&self) -> Vec<SimPort> {
        (0..self.num_ports())
            .map(|index| SimPort {
                inner: Rc::clone(&self.inner),
                index,
            })
            .collect()
    }

    /// The current virtual time.
    pub fn now(&self) -> Instant {
        to_instant(self.inner.borrow().now)
    }

    /// Virtual time elapsed since the switch was built.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.inner.borrow().now)
    }

    /// Takes the ports whose receive queue became non-empty since the last call, each once,
    /// in the order their first frame arrived.
    pub fn take_ready(&self) -> Vec<usize> {
        std::mem::take(&mut self.inner.borrow_mut().ready)
    }

    /// When the earliest pending event is due: a frame reaching the switch or a port. Advancing
    /// to it may deliver nothing (the switch only forwarded the frame onward). `None` when the
    /// network is idle.
    pub fn next_event(&self) -> Option<Instant> {
        self.inner
            .borrow()
            .heap
            .next_at()
            .map(|(at, _)| to_instant(at))
    }

    /// Moves the clock to `t`: every frame due at or before `t` becomes receivable at its port,
    /// in due-time order (ties in the order the events were created). A `t` in the past does
    /// nothing: the clock never goes back. Returns how many frames reached a port (delivered
    /// or lost at a dead port).
    pub fn advance_to(&self, t: Instant) -> usize {
        let ns = t.checked_duration_since(base()).map(to_ns).unwrap_or(0);
        self.inner.borrow_mut().advance_to(ns)
    }

    /// Moves the clock forward by `d`; see [`SimNet::advance_to`].
    pub fn advance_by(&self, d: Duration) -> usize {
        let mut inner = self.inner.borrow_mut();
        let target = inner.now.saturating_add(to_ns(d));
        inner.advance_to(target)
    }

    /// Advances to the next pending event, if any, and returns the new time.
    pub fn step(&self) -> Option<Instant> {
        let mut inner = self.inner.borrow_mut();
        let (at, _) = inner.heap.next_at()?;
        inner.advance_to(at);
        Some(to_instant(at))
    }

    /// Advances until nothing is in flight; the frames wait in the ports' receive queues.
    /// Returns how many frames reached a port.
    pub fn run_until_idle(&self) -> usize {
        let mut inner = self.inner.borrow_mut();
        let mut n = 0;
        while let Some((at, _)) = inner.heap.next_at() {
            n += inner.advance_to(at);
        }
        n
    }

    /// How long until `port`'s uplink has serialised everything it was given (zero when idle):
    /// what a pacing sender would wait for.
    pub fn tx_backlog(&self, port: usize) -> Result<Duration, SimError> {
        let inner = self.inner.borrow();
        inner.check_port(port)?;
        Ok(Duration::from_nanos(
            inner.ports[port].tx_free.saturating_sub(inner.now),
        ))
    }

    /// Replaces the faults of `port` (and ends any loss burst it was in).
    pub fn set_faults(&self, port: usize, faults: Faults) -> Result<(), SimError> {
        faults.validate()?;
        let mut inner = self.inner.borrow_mut();
        inner.check_port(port)?;
        let p = &mut inner.ports[port];
        p.faults = faults;
        p.in_burst = false;
        Ok(())
    }

    /// The faults of `port`.
    pub fn faults(&self, port: usize) -> Result<Faults, SimError> {
        let inner = self.inner.borrow();
        inner.check_port(port)?;
        Ok(inner.ports[port].faults)
    }

    /// Makes `port` a tap: it also receives copies of unicast frames between other ports (an
    /// attacker's recorder in tests).
    pub fn set_promiscuous(&self, port: usize, on: bool) -> Result<(), SimError> {
        let mut inner = self.inner.borrow_mut();
        inner.check_port(port)?;
        inner.taps.retain(|&t| t != port);
        if on {
            inner.taps.push(port);
        }
        Ok(())
    }

    /// Crashes the host on `port`: it sends and receives nothing, frames waiting in its receive
    /// queue are gone, and its frames still on the way to the switch are lost.
    pub fn kill(&self, port: usize) -> Result<(), SimError> {
        let mut inner = self.inner.borrow_mut();
        inner.check_port(port)?;
        let p = &mut inner.ports[port];
        p.killed = true;
        p.rx.clear();
        tracing::debug!(port, "sim: port killed");
        Ok(())
    }

    /// Brings a killed port back (its [`Faults::dead`] setting still applies).
    pub fn revive(&self, port: usize) -> Result<(), SimError> {
        let mut inner = self.inner.borrow_mut();
        inner.check_port(port)?;
        inner.ports[port].killed = false;
        tracing::debug!(port, "sim: port revived");
        Ok(())
    }

    /// Whether `port` is up (neither killed nor configured dead).
    pub fn is_alive(&self, port: usize) -> Result<bool, SimError> {
        let inner = self.inner.borrow();
        inner.check_port(port)?;
        Ok(!inner.ports[port].dead())
    }

    /// Cuts the network between the ports in `a` and the ports in `b`, both ways: frames that
    /// reach the switch from one side for the other are lost. Cuts accumulate until
    /// [`SimNet::heal`]. Ports in neither set are unaffected.
    pub fn partition(&self, a: &[usize], b: &[usize]) -> Result<(), SimError> {
        let mut inner = self.inner.borrow_mut();
        let n = inner.ports.len();
        let mut sets = (vec![false; n], vec![false; n]);
        for (set, members) in [(&mut sets.0, a), (&mut sets.1, b)] {
            for &i in members {
                inner.check_port(i)?;
                set[i] = true;
            }
        }
        inner.cuts.push(sets);
        tracing::debug!(?a, ?b, "sim: partition");
        Ok(())
    }

    /// Removes every partition.
    pub fn heal(&self) {
        self.inner.borrow_mut().cuts.clear();
    }

    /// The counters of `port`.
    pub fn port_stats(&self, port: usize) -> Result<SimStats, SimError> {
        let inner = self.inner.borrow();
        inner.check_port(port)?;
        Ok(inner.ports[port].stats)
    }

    /// The counters of every port, summed.
    pub fn stats(&self) -> SimStats {
        self.inner.borrow().ports.iter().map(|p| p.stats).sum()
    }
}

/// One port of a [`SimNet`]: the [`Link`] a simulated host uses.
#[derive(Debug, Clone)]
pub struct SimPort {
    inner: Rc<RefCell<Inner>>,
    index: usize,
}

impl SimPort {
    /// This port's index on the switch.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Frames waiting in this port's receive queue.
    pub fn pending(&self) -> usize {
        self.inner.borrow().ports[self.index].rx.len()
    }
}

impl SimPort {
    /// Sends a whole Ethernet frame as it is, whatever source address it carries (a recorded
    /// or forged frame, in tests of hostile hosts). Frames that are not ethbcast's are
    /// refused.
    pub fn send_frame(&mut self, frame: &[u8]) -> Result<(), LinkError> {
        let eth = ethernet::Frame::new_checked(frame)
            .map_err(|e| LinkError::Io(std::io::Error::other(e)))?;
        self.inner
            .borrow_mut()
            .send_as(self.index, eth.src(), eth.dst(), eth.payload())
    }

    /// Hands over every due frame whole (Ethernet header included); never waits.
    pub fn recv_frames(&mut self, f: &mut dyn FnMut(&[u8])) -> usize {
        let mut q = std::mem::take(&mut self.inner.borrow_mut().ports[self.index].rx);
        let n = q.len();
        for frame in q.drain(..) {
            f(&frame);
        }
        n
    }
}

impl Link for SimPort {
    fn local_mac(&self) -> MacAddr {
        // `index < ports <= MAX_PORTS`, so it fits.
        port_mac(self.index as u16)
    }

    fn max_pdu(&self) -> usize {
        self.inner.borrow().mtu
    }

    /// False while the host's transmit queue holds [`SimConfig::tx_queue`] frames' worth or
    /// more; the port is then put on the ready list ([`SimNet::take_ready`]) when it drains.
    fn tx_ready(&self) -> bool {
        self.inner.borrow_mut().poll_tx_ready(self.index)
    }

    /// Puts the PDU on this port's uplink at the current virtual time. A dead port accepts it
    /// and loses it. Refuses PDUs larger than the MTU.
    fn send(&mut self, dst: MacAddr, pdu: &[u8]) -> Result<(), LinkError> {
        self.inner.borrow_mut().send(self.index, dst, pdu)
    }

    /// The switch floods the group's frames to every port; from now on this port's host
    /// takes them instead of discarding them.
    fn join_group(&mut self, group: MacAddr) -> Result<(), LinkError> {
        if !ethernet::is_group_mac(&group) {
            return Err(LinkError::NotGroupAddress(group));
        }
        if group == BROADCAST_MAC {
            return Ok(());
        }
        let mut inner = self.inner.borrow_mut();
        let members = inner.groups.entry(group).or_default();
        if let Err(at) = members.binary_search(&self.index) {
            members.insert(at, self.index);
        }
        Ok(())
    }

    fn leave_group(&mut self, group: MacAddr) -> Result<(), LinkError> {
        if !ethernet::is_group_mac(&group) {
            return Err(LinkError::NotGroupAddress(group));
        }
        let mut inner = self.inner.borrow_mut();
        if let Some(members) = inner.groups.get_mut(&group) {
            members.retain(|&p| p != self.index);
        }
        Ok(())
    }

    /// Hands over every frame that has become due; never waits (`wait` is ignored: the harness
    /// moves the clock).
    fn recv(
        &mut self,
        _wait: Option<Duration>,
        f: &mut dyn FnMut(MacAddr, &[u8]),
    ) -> Result<usize, LinkError> {
        // Take the queue out so that no borrow is held while `f` runs.
        let mut q = std::mem::take(&mut self.inner.borrow_mut().ports[self.index].rx);
        let n = q.len();
        for frame in q.drain(..) {
            // Every frame in the queue was built by `ethernet::to_vec` and its header is never
            // corrupted, so the check only guards against our own bugs.
            if let Ok(eth) = ethernet::Frame::new_checked(&frame[..]) {
                f(eth.src(), eth.payload());
            }
        }
        let mut inner = self.inner.borrow_mut();
        let rx = &mut inner.ports[self.index].rx;
        if rx.is_empty() {
            // Give the allocation back.
            *rx = q;
        }
        Ok(n)
    }
}
