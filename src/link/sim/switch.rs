//! The switch itself: ports, links as FIFOs whose fronts sit in one event queue, faults drawn
//! per receiving port, partitions and taps. [`super::SimNet`] and [`super::SimPort`] are the
//! handles the harness and the hosts hold on it.

use super::events::{Event, Events, InFlight, SEQ_LIMIT};
use super::model::*;
use super::{LinkError, MacAddr, BROADCAST_MAC};
use ethbcast_proto::{is_group_mac, EthernetFrame, ETH_HEADER_LEN};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The instant virtual time zero maps to, shared by every simulator of the process so that
/// two runs with the same seed produce the same `Instant`s.
pub(super) fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

pub(super) fn to_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

pub(super) fn to_instant(ns: u64) -> Instant {
    let b = base();
    b.checked_add(Duration::from_nanos(ns))
        .or_else(|| b.checked_add(Duration::from_secs(u64::from(u32::MAX))))
        .unwrap_or(b)
}

/// `p > 0` and a uniform draw falls below it; draws nothing for `p == 0`, never panics.
pub(super) fn chance(rng: &mut ChaCha8Rng, p: f64) -> bool {
    p > 0.0 && rng.gen::<f64>() < p
}

/// Full frames' time without a frame after which a port's loss burst is over (see
/// [`Inner::burst_gap_ns`]).
const BURST_GAP_FRAMES: u64 = 64;

/// The shortest quiet time that ends a loss burst, in nanoseconds (see [`Inner::burst_gap_ns`]).
const BURST_GAP_MIN_NS: u64 = 1_000_000;

/// [`Inner::burst_gap_ns`] for full frames that take `frame_ns` to serialise.
pub(super) fn burst_gap_ns(frame_ns: u64) -> u64 {
    frame_ns
        .saturating_mul(BURST_GAP_FRAMES)
        .max(BURST_GAP_MIN_NS)
}

/// Where the switch sends a frame.
#[derive(Debug, Clone, Copy)]
pub(super) enum Target {
    All,
    One(usize),
    Group(MacAddr),
}

/// What the switch reads and writes of a port for each frame it forwards or delivers there:
/// two cache lines, the first with the port's state, the faults drawn first and the
/// counters, the second with the queues of the switch's output link and of the port's
/// receive side, then the stream its receive-side faults are drawn from.
///
/// Why apart from [`PortState`]: with thousands of ports, what the hosts touch between two
/// frames to one port is far larger than the caches, so each line of a port that a frame
/// touches is a miss to memory; spread over the whole state a frame touched a dozen of them.
/// Dense and in port order, these lines are also what the hardware prefetches while a
/// broadcast walks the ports one after the other.
#[derive(Debug)]
#[repr(C, align(64))]
pub(super) struct PortHot {
    /// [`PortState::is_dead`]: sends and receives nothing.
    pub(super) dead: bool,
    pub(super) in_burst: bool,
    /// Whether a fault drawn after loss can happen at this port (group loss, corruption,
    /// reordering or duplication has a probability above zero): only then does forwarding
    /// read them in [`PortState::faults`]. Without any, those draws take nothing from the
    /// port's stream.
    pub(super) later_faults: bool,
    /// The front of the output link is in the heap.
    pub(super) downlink_busy: bool,
    /// When the last frame for this port passed its receive-side faults (a burst ends when
    /// the port has been quiet for [`Inner::burst_gap_ns`]).
    pub(super) last_rx: u64,
    /// When the switch output link to this port finishes what it has been given.
    pub(super) out_free: u64,
    /// [`Faults::loss`] of this port.
    pub(super) loss: f64,
    /// [`Faults::burst_loss`] of this port.
    pub(super) burst_loss: f64,
    /// [`Faults::burst_len`] of this port.
    pub(super) burst_len: f64,
    /// [`SimStats::frames_delivered`] of this port.
    pub(super) frames_delivered: u64,
    /// [`SimStats::lost`] of this port.
    pub(super) lost: u64,
    /// The frames the switch forwarded to this port, on their way to it, behind the front
    /// one (which is in the heap, in its [`Event::Downlink`]), not reordered ones.
    pub(super) downlink: VecDeque<InFlight>,
    /// Ethernet frames due at this port, oldest first.
    pub(super) rx: VecDeque<Rc<[u8]>>,
    pub(super) rx_rng: ChaCha8Rng,
}

// Its state and its queues fill one cache line each.
#[cfg(target_pointer_width = "64")]
const _: () = {
    assert!(std::mem::offset_of!(PortHot, downlink) == 64);
    assert!(std::mem::offset_of!(PortHot, rx_rng) == 128);
};

impl PortHot {
    /// A port with `faults` drawn from `rx_rng`, up, idle and out of any loss burst.
    pub(super) fn new(faults: &Faults, rx_rng: ChaCha8Rng) -> PortHot {
        let mut hot = PortHot {
            dead: false,
            in_burst: false,
            later_faults: false,
            downlink_busy: false,
            last_rx: 0,
            out_free: 0,
            loss: 0.0,
            burst_loss: 0.0,
            burst_len: 1.0,
            frames_delivered: 0,
            lost: 0,
            downlink: VecDeque::new(),
            rx: VecDeque::new(),
            rx_rng,
        };
        hot.set_faults(faults, faults.dead);
        hot
    }

    /// Takes the copies of `faults` it keeps, and whether the port is `dead`
    /// ([`PortState::is_dead`]).
    pub(super) fn set_faults(&mut self, faults: &Faults, dead: bool) {
        self.dead = dead;
        self.loss = faults.loss;
        self.burst_loss = faults.burst_loss;
        self.burst_len = faults.burst_len;
        let later = [
            faults.group_loss,
            faults.corrupt,
            faults.reorder,
            faults.dup,
        ];
        self.later_faults = later.iter().any(|&p| p > 0.0);
    }
}

/// What the switch keeps of a port besides its [`PortHot`] lines: what sending touches and
/// what each turn of its host touches, a cache line each (for the reasons of [`PortHot`]),
/// then what only the faults after loss, the counters and rarer events touch.
#[derive(Debug)]
#[repr(C, align(64))]
pub(super) struct PortState {
    /// Frames sent by this port, on their way to the switch, behind the front one (which is
    /// in the heap, in its [`Event::Uplink`]).
    pub(super) uplink: VecDeque<InFlight>,
    /// [`SimStats::frames_sent`] of this port.
    pub(super) frames_sent: u64,
    /// [`SimStats::bytes_on_wire`] of this port.
    pub(super) bytes_on_wire: u64,
    /// [`PortState::is_dead`], beside what sending a frame touches (a copy, as
    /// [`PortHot::dead`] is: [`Inner::set_faults`] and [`Inner::set_killed`] renew both).
    pub(super) dead: bool,
    /// Its host was killed ([`super::SimNet::kill`]).
    pub(super) killed: bool,
    /// The front of the uplink is in the heap.
    pub(super) uplink_busy: bool,
    pub(super) host: HostLine,
    pub(super) faults: Faults,
    /// Its counters but those kept apart (`frames_sent`, `bytes_on_wire` above,
    /// `frames_delivered`, `lost` in [`PortHot`]), which are zero here.
    pub(super) stats: SimStats,
    pub(super) tx_rng: ChaCha8Rng,
    /// Completion times of the frames in the switch output queue (only with a bounded buffer).
    pub(super) out_queue: VecDeque<u64>,
}

/// What each turn of a port's host touches besides its receive queue, in a cache line of its
/// own: whether it may send, the frames the port keeps for it and how many.
#[derive(Debug, Default)]
#[repr(C, align(64))]
pub(super) struct HostLine {
    /// When the uplink finishes serialising what it has been given.
    pub(super) tx_free: u64,
    /// Frames its host read and the port keeps for it (see [`super::SimPort`]'s
    /// `Link::retain`), oldest first: the `retain` newest after each batch.
    pub(super) held: VecDeque<Rc<[u8]>>,
    /// How many frames the port keeps after each batch (0: none).
    pub(super) retain: usize,
    /// How many frames it holds when it next lets go those its host no longer reads (see
    /// `SimPort::prune_held`).
    pub(super) prune_at: usize,
    /// Its host was told the link is not ready; it is woken when the queue drains.
    pub(super) tx_blocked: bool,
}

impl PortState {
    /// Killed or configured dead ([`Faults::dead`]): the port sends and receives nothing.
    pub(super) fn is_dead(&self) -> bool {
        self.killed || self.faults.dead
    }
}

// What sending touches fills the first line, what a turn of the host touches the second.
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::offset_of!(PortState, host) == 64);

#[derive(Debug)]
pub(super) struct Inner {
    pub(super) now: u64,
    pub(super) seq: u64,
    pub(super) rate_bps: Option<u64>,
    pub(super) latency: u64,
    pub(super) mtu: usize,
    pub(super) switch_buffer: Option<usize>,
    /// Serialisation time of the transmit queue's bound ([`SimConfig::tx_queue`]).
    pub(super) tx_queue_ns: Option<u64>,
    /// How long a port must go without frames for a loss burst to end ([`Faults::burst_len`]
    /// counts the frames of a burst while frames come): 64 full frames' time, at least 1 ms.
    /// Without it a burst that began as a port's traffic ended went on into the frames that
    /// came long after (a root's probes at the end of its stream, backed off to 200 ms
    /// apart): 15 probes in a row lost at one member of 256 held the whole run for 2.2 s of
    /// virtual time. Fixed with the rate and the MTU (see [`burst_gap_ns`]).
    pub(super) burst_gap_ns: u64,
    pub(super) heap: Events,
    pub(super) ports: Vec<PortState>,
    /// The per-frame lines of the ports, by the same index as `ports`.
    pub(super) hot: Vec<PortHot>,
    /// The ports that joined each multicast group, in index order.
    pub(super) groups: BTreeMap<MacAddr, Vec<usize>>,
    /// Partitions: frames between a port with `true` in one and a port with `true` in the
    /// other are dropped.
    pub(super) cuts: Vec<(Vec<bool>, Vec<bool>)>,
    /// Ports whose receive queue became non-empty since [`SimNet::take_ready`] last ran, so
    /// that a harness visits only the hosts that have something to receive.
    pub(super) ready: Vec<usize>,
    /// Ports that receive copies of unicast frames between other ports (taps).
    pub(super) taps: Vec<usize>,
}

impl Inner {
    pub(super) fn check_port(&self, port: usize) -> Result<(), SimError> {
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
    pub(super) fn ser_ns(&self, pdu_len: usize) -> u64 {
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
    pub(super) fn tx_ready(&self, port: usize) -> bool {
        self.tx_queue_ns
            .is_none_or(|q| self.ports[port].host.tx_free.saturating_sub(self.now) < q)
    }

    /// Tells `port`'s host whether it may send; when not, wakes it (puts it on the ready
    /// list) once the queue has drained below the bound.
    pub(super) fn poll_tx_ready(&mut self, port: usize) -> bool {
        if self.tx_ready(port) {
            return true;
        }
        if !self.ports[port].host.tx_blocked {
            self.ports[port].host.tx_blocked = true;
            self.schedule_tx_wake(port);
        }
        false
    }

    pub(super) fn schedule_tx_wake(&mut self, port: usize) {
        let q = self.tx_queue_ns.unwrap_or(0);
        let at = (self.ports[port].host.tx_free.saturating_sub(q) + 1).max(self.now);
        let seq = self.next_seq();
        self.heap.push(at, seq, Event::TxReady(port));
    }

    pub(super) fn next_seq(&mut self) -> u64 {
        let seq = self.seq;
        assert!(
            seq < SEQ_LIMIT,
            "the simulated switch ran out of event sequence numbers"
        );
        self.seq += 1;
        seq
    }

    /// Puts a frame on `src`'s uplink, due at the switch at `at` (not before the frames
    /// already on it).
    pub(super) fn push_uplink(&mut self, src: usize, at: u64, pdu: Rc<[u8]>) {
        let frame = InFlight {
            at,
            seq: self.next_seq(),
            pdu,
        };
        let p = &mut self.ports[src];
        self.heap
            .onto_link(&mut p.uplink_busy, &mut p.uplink, frame, |f| {
                Event::Uplink(src, f)
            });
    }

    /// Puts a frame on the switch's output link to `port`, due at `at` (not before the frames
    /// already on it).
    pub(super) fn push_downlink(&mut self, port: usize, at: u64, pdu: Rc<[u8]>) {
        let frame = InFlight {
            at,
            seq: self.next_seq(),
            pdu,
        };
        let h = &mut self.hot[port];
        self.heap
            .onto_link(&mut h.downlink_busy, &mut h.downlink, frame, |f| {
                Event::Downlink(port, f)
            });
    }

    /// The front frame of the switch's output link to `port` left it (its turn in the heap
    /// just came): puts the next one's turn in the heap.
    fn pop_downlink(&mut self, port: usize) {
        let h = &mut self.hot[port];
        self.heap
            .next_on_link(&mut h.downlink_busy, &mut h.downlink, |f| {
                Event::Downlink(port, f)
            });
    }

    /// Counters of `port`: those kept with it and those in its [`PortHot`] line.
    pub(super) fn port_stats(&self, port: usize) -> SimStats {
        let (h, p) = (&self.hot[port], &self.ports[port]);
        SimStats {
            frames_delivered: h.frames_delivered,
            lost: h.lost,
            frames_sent: p.frames_sent,
            bytes_on_wire: p.bytes_on_wire,
            ..p.stats
        }
    }

    /// Sets the faults of `port` (a loss burst it is in goes on).
    pub(super) fn set_faults(&mut self, port: usize, faults: Faults) {
        self.ports[port].faults = faults;
        self.copy_faults(port);
    }

    /// Kills `port`'s host (`true`) or brings it back.
    pub(super) fn set_killed(&mut self, port: usize, killed: bool) {
        self.ports[port].killed = killed;
        self.copy_faults(port);
    }

    /// Renews the copies of `port`'s faults and deadness kept where frames read them.
    fn copy_faults(&mut self, port: usize) {
        let p = &mut self.ports[port];
        p.dead = p.is_dead();
        self.hot[port].set_faults(&p.faults, p.dead);
    }

    pub(super) fn cut(&self, a: usize, b: usize) -> bool {
        self.cuts
            .iter()
            .any(|(x, y)| (x[a] && y[b]) || (y[a] && x[b]))
    }

    /// Counts a frame from `src` to `target` as lost at every port it was meant for.
    pub(super) fn lose_everywhere(&mut self, src: usize, target: Target) {
        match target {
            Target::One(j) => self.hot[j].lost += 1,
            Target::Group(g) => {
                for &j in self.groups.get(&g).into_iter().flatten() {
                    if j != src {
                        self.hot[j].lost += 1;
                    }
                }
            }
            Target::All => {
                for (j, h) in self.hot.iter_mut().enumerate() {
                    if j != src {
                        h.lost += 1;
                    }
                }
            }
        }
    }

    /// Where the switch sends a frame from port `src` to `dst`: nowhere (`None`) for a station
    /// address that is not another port's.
    fn target(&self, src: usize, dst: MacAddr) -> Option<Target> {
        if dst == BROADCAST_MAC {
            Some(Target::All)
        } else if is_group_mac(&dst) {
            Some(Target::Group(dst))
        } else {
            port_index(&dst)
                .map(usize::from)
                .filter(|&j| j < self.ports.len() && j != src)
                .map(Target::One)
        }
    }

    pub(super) fn send(&mut self, src: usize, dst: MacAddr, pdu: &[u8]) -> Result<(), LinkError> {
        // `src < ports <= MAX_PORTS`, so the index fits.
        self.send_as(src, port_mac(src as u16), dst, pdu)
    }

    /// Sends from port `src` a frame whose Ethernet source is `src_mac` (its own, or a
    /// spoofed one).
    pub(super) fn send_as(
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
        let target = self.target(src, dst);
        let ser = self.ser_ns(pdu.len());
        let now = self.now;
        let sender = &mut self.ports[src];
        sender.frames_sent += 1;
        if sender.dead {
            if let Some(t) = target {
                self.lose_everywhere(src, t);
            }
            return Ok(());
        }
        let done = sender.host.tx_free.max(now).saturating_add(ser);
        sender.host.tx_free = done;
        sender.bytes_on_wire += wire_bytes(pdu.len()) as u64;
        let Some(target) = target else {
            sender.stats.unknown_dst += 1;
            return Ok(());
        };
        if chance(&mut sender.tx_rng, sender.faults.tx_loss) {
            self.lose_everywhere(src, target);
            return Ok(());
        }
        let at = done.saturating_add(self.latency);
        // Built in place, once: every receiving port shares it.
        let mut frame: Rc<[u8]> =
            std::iter::repeat_n(0u8, EthernetFrame::len_for(pdu.len())).collect();
        if let Some(out) = Rc::get_mut(&mut frame) {
            // Exactly `frame_len` long: the frame fits.
            let _ = EthernetFrame::emit(out, dst, src_mac, pdu);
        }
        self.push_uplink(src, at, frame);
        Ok(())
    }

    /// The switch received a whole frame from `src` at `self.now`: forward it to its output
    /// ports, found again from its header (a frame for nowhere never left its port; the header
    /// shares its cache line with the count that forwarding increments anyway).
    pub(super) fn arrive(&mut self, src: usize, pdu: Rc<[u8]>) {
        let Some(target) = EthernetFrame::new_checked(&pdu[..])
            .ok()
            .and_then(|eth| self.target(src, eth.dst()))
        else {
            return;
        };
        if self.ports[src].dead {
            self.lose_everywhere(src, target);
            return;
        }
        let ser = self.ser_ns(pdu.len().saturating_sub(ETH_HEADER_LEN));
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
                // The list is lent out of the map meanwhile, not copied (forwarding never
                // reads it).
                let members = self.groups.get_mut(&g).map(std::mem::take);
                let mut next = members.iter().flatten().copied().peekable();
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
                if let (Some(members), Some(slot)) = (members, self.groups.get_mut(&g)) {
                    *slot = members;
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
    pub(super) fn forward(&mut self, src: usize, j: usize, pdu: Rc<[u8]>, ser: u64) {
        if self.cut(src, j) || self.hot[j].dead {
            self.hot[j].lost += 1;
            return;
        }
        let Some(done) = self.queue_out(j, ser) else {
            return;
        };
        let (now, burst_gap) = (self.now, self.burst_gap_ns);
        let h = &mut self.hot[j];

        // Receive-side faults, drawn from this port's own stream.
        let rng = &mut h.rx_rng;
        let quiet = now.saturating_sub(std::mem::replace(&mut h.last_rx, now));
        if quiet > burst_gap {
            // A burst is loss close in time: one that began before a quiet spell is over.
            h.in_burst = false;
        }
        // Gilbert-Elliott: a frame in (or starting) a burst is lost, and the burst goes on past
        // it with probability 1 - 1/burst_len, so burst lengths are geometric with that mean.
        let lost = if h.in_burst || chance(rng, h.burst_loss) {
            h.in_burst = !chance(rng, 1.0 / h.burst_len);
            true
        } else {
            chance(rng, h.loss)
        };
        if h.later_faults {
            self.later_faults(j, pdu, ser, done, lost);
        } else if lost {
            h.lost += 1;
        } else {
            self.push_downlink(j, done, pdu);
        }
    }

    /// The rest of [`Inner::forward`] at a port with faults after loss (see
    /// [`PortHot::later_faults`]), for a frame loss took (`lost`) or not and whose last bit
    /// leaves the output queue at `done`.
    fn later_faults(&mut self, j: usize, pdu: Rc<[u8]>, ser: u64, done: u64, lost: bool) {
        let cap = self.switch_buffer;
        let (h, p) = (&mut self.hot[j], &mut self.ports[j]);
        let f = p.faults;
        let rng = &mut h.rx_rng;
        let to_group = pdu.first().is_some_and(|b| b & 1 == 1);
        let lost = lost || (to_group && chance(rng, f.group_loss));
        if lost {
            h.lost += 1;
            return;
        }
        let pdu = if pdu.len() > ETH_HEADER_LEN && chance(rng, f.corrupt) {
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
            let d = h.out_free.saturating_add(ser);
            h.out_free = d;
            if cap.is_some() {
                p.out_queue.push_back(d);
            }
            d
        });
        let dup = dup_at.map(|d| (d, Rc::clone(&pdu)));
        match late {
            Some(at) => {
                let seq = self.next_seq();
                self.heap.push(at, seq, Event::Late(j, pdu));
            }
            None => self.push_downlink(j, done, pdu),
        }
        if let Some((d, pdu)) = dup {
            self.push_downlink(j, d, pdu);
        }
    }

    /// Puts a frame of `ser` ns on the switch's output queue to port `j`: when its last bit
    /// will have left, or `None` if the queue is full (tail drop, counted).
    pub(super) fn queue_out(&mut self, j: usize, ser: u64) -> Option<u64> {
        let now = self.now;
        let h = &mut self.hot[j];
        let Some(cap) = self.switch_buffer else {
            let done = h.out_free.max(now).saturating_add(ser);
            h.out_free = done;
            return Some(done);
        };
        let p = &mut self.ports[j];
        while p.out_queue.front().is_some_and(|&done| done <= now) {
            p.out_queue.pop_front();
        }
        if p.out_queue.len() >= cap {
            p.stats.switch_drops += 1;
            return None;
        }
        let done = h.out_free.max(now).saturating_add(ser);
        h.out_free = done;
        p.out_queue.push_back(done);
        Some(done)
    }

    /// A flooded multicast frame for a group port `j`'s host did not join: it takes its time
    /// on the link, and the NIC discards it.
    pub(super) fn occupy(&mut self, src: usize, j: usize, ser: u64) {
        if self.cut(src, j) || self.hot[j].dead {
            return;
        }
        if self.queue_out(j, ser).is_some() {
            self.ports[j].stats.filtered += 1;
        }
    }

    pub(super) fn deliver(&mut self, port: usize, pdu: Rc<[u8]>) {
        let h = &mut self.hot[port];
        if h.dead {
            h.lost += 1;
        } else {
            h.frames_delivered += 1;
            if h.rx.is_empty() {
                self.ready.push(port);
            }
            h.rx.push_back(pdu);
        }
    }

    /// The front frame of `port`'s uplink reached the switch (its turn in the heap just came):
    /// puts the next one's turn in the heap.
    fn pop_uplink(&mut self, port: usize) {
        let p = &mut self.ports[port];
        self.heap
            .next_on_link(&mut p.uplink_busy, &mut p.uplink, |f| {
                Event::Uplink(port, f)
            });
    }

    pub(super) fn advance_to(&mut self, target: u64) -> usize {
        if target < self.now {
            return 0;
        }
        let mut delivered = 0;
        while let Some((at, event)) = self.heap.pop_due(target) {
            self.now = at.max(self.now);
            match event {
                Event::Uplink(src, pdu) => {
                    self.pop_uplink(src);
                    self.arrive(src, pdu);
                }
                Event::Downlink(port, pdu) => {
                    self.pop_downlink(port);
                    delivered += 1;
                    self.deliver(port, pdu);
                }
                Event::Late(port, pdu) => {
                    delivered += 1;
                    self.deliver(port, pdu);
                }
                Event::TxReady(port) => {
                    if !self.tx_ready(port) {
                        self.schedule_tx_wake(port);
                    } else if std::mem::take(&mut self.ports[port].host.tx_blocked)
                        && self.hot[port].rx.is_empty()
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
pub(super) fn corrupt(rng: &mut ChaCha8Rng, frame: &[u8]) -> Rc<[u8]> {
    let mut bytes = frame.to_vec();
    let bits = (bytes.len() - ETH_HEADER_LEN) * 8;
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
        if let Some(b) = bytes.get_mut(ETH_HEADER_LEN + bit / 8) {
            *b ^= 1 << (bit % 8);
        }
    }
    Rc::from(bytes)
}
