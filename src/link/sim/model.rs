//! What a simulated segment is made of and what it counts: port addresses, the fault model,
//! the switch's configuration, its errors and statistics.

use super::MacAddr;
use std::time::Duration;
use thiserror::Error;

/// Bytes a frame occupies on the wire besides the PDU: Ethernet header (14), FCS (4),
/// preamble and start delimiter (8), inter-frame gap (12).
pub(crate) const WIRE_OVERHEAD: usize = 14 + 4 + 8 + 12;
/// Shortest Ethernet payload: shorter PDUs are padded to it on the wire.
pub(crate) const MIN_ETH_PAYLOAD: usize = 46;
/// Most ports a simulated switch can have (the port index fills the last two MAC bytes).
pub(crate) const MAX_PORTS: usize = 1 << 16;

/// The bytes one PDU of `pdu_len` bytes occupies on the wire, padding and overhead included.
pub(crate) fn wire_bytes(pdu_len: usize) -> usize {
    pdu_len.max(MIN_ETH_PAYLOAD).saturating_add(WIRE_OVERHEAD)
}

/// The MAC address of port `index`: `02:00:00:00:HI:LO`.
pub const fn port_mac(index: u16) -> MacAddr {
    let [hi, lo] = index.to_be_bytes();
    MacAddr([0x02, 0, 0, 0, hi, lo])
}

/// The port index a MAC address of the simulated switch names, if it is one of ours.
pub(crate) fn port_index(mac: &MacAddr) -> Option<u16> {
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
    /// Mean length of a loss burst, in frames arriving at this port (at least 1). A burst
    /// also ends when no frame reached the port for 64 full frames' time (at least 1 ms):
    /// loss bursts are close in time, and a port's traffic that stopped does not carry one
    /// into frames that come much later.
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

/// How to build a [`SimNet`](super::SimNet).
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// Number of ports (at most 65,536).
    pub ports: usize,
    /// Line rate of every link in bits per second; `None` is infinitely fast.
    pub rate_bps: Option<u64>,
    /// Propagation plus switching delay of every frame.
    pub latency: Duration,
    /// Largest PDU a port accepts ([`Link::max_pdu`](crate::link::Link::max_pdu)).
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
    /// ([`Link::tx_ready`](crate::link::Link::tx_ready); a NIC's ring, kept short as byte queue limits keep it); the
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
/// port, so [`SimNet::stats`](super::SimNet::stats) (the sum) counts each event once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Frames the port's host sent (accepted by [`Link::send`](crate::link::Link::send)).
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
