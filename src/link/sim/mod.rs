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
//!   sits in a heap (4-ary), so the heap stays small even when queues grow long under
//!   overload. [`SimPort::recv`] hands over every frame that has become due and never waits:
//!   the harness owns the clock.
//!
//! # Driving it
//!
//! ```
//! use ethbcast::{Faults, SimConfig, SimNet};
//! use ethbcast::{Link, BROADCAST_MAC};
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
//! for the copies that corruption rewrites. A port can keep the frames its host read, as a
//! NIC's receive ring does ([`Link::retain`]): a member that leaves frames in the link
//! ([`ethbcast_proto::Member::leave_in_link`]) reads them there instead of copying them into
//! its receive window, and a broadcast frame a thousand ports keep is still one frame. The
//! whole simulator is single-threaded; handles
//! share it through `Rc<RefCell<..>>`, and no borrow is held while user code runs, so calling
//! back into the simulator from a receive callback is safe.

use super::{BatchEnd, Held, Link, LinkError, MacAddr, BROADCAST_MAC};
use ethbcast_proto::{is_group_mac, EthernetFrame};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;
use std::time::{Duration, Instant};

mod events;
mod model;
mod switch;

use events::Events;
pub use model::*;
use switch::*;

#[cfg(test)]
mod tests;

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
        let hot = faults
            .iter()
            .enumerate()
            .map(|(i, faults)| PortHot::new(faults, rng(i, 1)))
            .collect();
        let ports = faults
            .into_iter()
            .enumerate()
            .map(|(i, faults)| PortState {
                uplink: VecDeque::new(),
                frames_sent: 0,
                bytes_on_wire: 0,
                dead: faults.dead,
                killed: false,
                uplink_busy: false,
                host: HostLine::default(),
                faults,
                stats: SimStats::default(),
                tx_rng: rng(i, 0),
                out_queue: VecDeque::new(),
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
                burst_gap_ns: 0,
                heap: Events::default(),
                ports,
                hot,
                groups: BTreeMap::new(),
                cuts: Vec::new(),
                ready: Vec::new(),
                taps: Vec::new(),
            })),
        };
        {
            let mut inner = net.inner.borrow_mut();
            let frame = inner.ser_ns(cfg.mtu);
            inner.burst_gap_ns = switch::burst_gap_ns(frame);
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

    /// [`SimNet::take_ready`] into `out` (cleared first), without allocating: the switch keeps
    /// `out`'s buffer for its next list.
    pub fn take_ready_into(&self, out: &mut Vec<usize>) {
        out.clear();
        std::mem::swap(out, &mut self.inner.borrow_mut().ready);
    }

    /// Frames waiting in `port`'s receive queue (0 for a port that does not exist).
    pub fn rx_pending(&self, port: usize) -> usize {
        self.inner.borrow().hot.get(port).map_or(0, |p| p.rx.len())
    }

    /// When the earliest pending event is due: a frame reaching the switch or a port. Advancing
    /// to it may deliver nothing (the switch only forwarded the frame onward). `None` when the
    /// network is idle.
    pub fn next_event(&self) -> Option<Instant> {
        self.inner.borrow().heap.next_at().map(to_instant)
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
        let at = inner.heap.next_at()?;
        inner.advance_to(at);
        Some(to_instant(at))
    }

    /// Advances until nothing is in flight; the frames wait in the ports' receive queues.
    /// Returns how many frames reached a port.
    pub fn run_until_idle(&self) -> usize {
        let mut inner = self.inner.borrow_mut();
        let mut n = 0;
        while let Some(at) = inner.heap.next_at() {
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
            inner.ports[port].host.tx_free.saturating_sub(inner.now),
        ))
    }

    /// Replaces the faults of `port` (and ends any loss burst it was in).
    pub fn set_faults(&self, port: usize, faults: Faults) -> Result<(), SimError> {
        faults.validate()?;
        let mut inner = self.inner.borrow_mut();
        inner.check_port(port)?;
        inner.set_faults(port, faults);
        inner.hot[port].in_burst = false;
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
        inner.set_killed(port, true);
        inner.hot[port].rx.clear();
        inner.ports[port].host.held.clear();
        tracing::debug!(port, "sim: port killed");
        Ok(())
    }

    /// Brings a killed port back (its [`Faults::dead`] setting still applies).
    pub fn revive(&self, port: usize) -> Result<(), SimError> {
        let mut inner = self.inner.borrow_mut();
        inner.check_port(port)?;
        inner.set_killed(port, false);
        tracing::debug!(port, "sim: port revived");
        Ok(())
    }

    /// Whether `port` is up (neither killed nor configured dead).
    pub fn is_alive(&self, port: usize) -> Result<bool, SimError> {
        let inner = self.inner.borrow();
        inner.check_port(port)?;
        Ok(!inner.hot[port].dead)
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
        Ok(inner.port_stats(port))
    }

    /// The counters of every port, summed.
    pub fn stats(&self) -> SimStats {
        let inner = self.inner.borrow();
        (0..inner.ports.len()).map(|j| inner.port_stats(j)).sum()
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
        self.inner.borrow().hot[self.index].rx.len()
    }
}

impl SimPort {
    /// Sends a whole Ethernet frame as it is, whatever source address it carries (a recorded
    /// or forged frame, in tests of hostile hosts). Frames that are not ethbcast's are
    /// refused.
    pub fn send_frame(&mut self, frame: &[u8]) -> Result<(), LinkError> {
        let eth = EthernetFrame::new_checked(frame)
            .map_err(|e| LinkError::Io(std::io::Error::other(e)))?;
        self.inner
            .borrow_mut()
            .send_as(self.index, eth.src(), eth.dst(), eth.payload())
    }

    /// Hands over every due frame whole (Ethernet header included); never waits.
    pub fn recv_frames(&mut self, f: &mut dyn FnMut(&[u8])) -> usize {
        let mut q = std::mem::take(&mut self.inner.borrow_mut().hot[self.index].rx);
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
        if !is_group_mac(&group) {
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
        if !is_group_mac(&group) {
            return Err(LinkError::NotGroupAddress(group));
        }
        let mut inner = self.inner.borrow_mut();
        if let Some(members) = inner.groups.get_mut(&group) {
            members.retain(|&p| p != self.index);
        }
        Ok(())
    }

    /// Hands over every frame that has become due. There is no `wait_ready`: the harness moves
    /// the clock, so a port never waits. Ends the retention of the frames kept before.
    fn recv_ready(&mut self, f: &mut dyn FnMut(MacAddr, &[u8])) -> Result<usize, LinkError> {
        self.inner.borrow_mut().ports[self.index].host.held.clear();
        self.take_due(f, &mut |_| {})
    }

    fn holds_frames(&self) -> bool {
        true
    }

    /// As `recv_ready`, then `done` with the frames the port holds: those it kept from
    /// earlier batches and this batch's, the oldest of them leaving unless `retain` keeps
    /// them. They leave in the order they came, as from a NIC's ring (a member that left
    /// frames in the link counts on it).
    fn recv_ready_held(
        &mut self,
        f: &mut dyn FnMut(MacAddr, &[u8]),
        done: &mut dyn FnMut(BatchEnd<'_>),
    ) -> Result<usize, LinkError> {
        // Out of the switch while the host's code runs (no borrow is held then).
        let (mut held, retain) = {
            let mut inner = self.inner.borrow_mut();
            let batch = inner.hot[self.index].rx.len();
            let p = &mut inner.ports[self.index].host;
            let mut held = std::mem::take(&mut p.held);
            // Room for this batch and a margin, no more: grown by doubling, the queue of every
            // port would reach twice what it keeps (16 KiB of pointers more per port).
            let room = held.capacity() - held.len();
            if room < batch {
                held.reserve_exact(batch + p.retain / HELD_MARGIN);
            }
            (held, p.retain)
        };
        let n = self.take_due(f, &mut |frame| held.push_back(frame))?;
        let leaving = held.len().saturating_sub(retain);
        done(BatchEnd {
            held: &Kept(&held, 0..held.len()),
            leaving: &Leaving(&held, 0..leaving),
        });
        held.drain(..leaving);
        self.inner.borrow_mut().ports[self.index].host.held = held;
        Ok(n)
    }

    fn retain(&mut self, frames: usize) -> usize {
        self.inner.borrow_mut().ports[self.index].host.retain = frames;
        frames
    }

    /// Once a quarter of what it retains has come since the last time (`PRUNE_EVERY`).
    fn wants_prune(&self) -> bool {
        let inner = self.inner.borrow();
        let p = &inner.ports[self.index].host;
        p.retain > 0 && p.held.len() >= p.prune_at
    }

    /// The frames its host reads later stay, in the order they came; the others go now.
    /// Why: a frame sent to this port alone (a fellow's repair, a report) is this port's
    /// memory as long as it is retained, and most are read once, in their batch: at 4096
    /// members with loss, the repairs ports retained were about 350 MiB of the run's peak.
    fn prune_held(&mut self, refs: &[usize]) {
        let mut inner = self.inner.borrow_mut();
        let p = &mut inner.ports[self.index].host;
        p.held.retain(|f| {
            let start = f.as_ptr() as usize;
            // The first address at or after the frame's start lies in it, if any does.
            let k = refs.partition_point(|&a| a < start);
            refs.get(k).is_some_and(|&a| a < start + f.len())
        });
        p.prune_at = p.held.len() + (p.retain / PRUNE_EVERY).max(1);
    }

    fn with_held(&self, f: &mut dyn FnMut(BatchEnd<'_>)) {
        let held = std::mem::take(&mut self.inner.borrow_mut().ports[self.index].host.held);
        f(BatchEnd {
            held: &Kept(&held, 0..held.len()),
            leaving: BatchEnd::NOTHING.leaving,
        });
        self.inner.borrow_mut().ports[self.index].host.held = held;
    }
}

impl SimPort {
    /// Hands `f` every due frame, then gives it to `keep`.
    fn take_due(
        &mut self,
        f: &mut dyn FnMut(MacAddr, &[u8]),
        keep: &mut dyn FnMut(Rc<[u8]>),
    ) -> Result<usize, LinkError> {
        // Take the queue out so that no borrow is held while `f` runs.
        let mut q = std::mem::take(&mut self.inner.borrow_mut().hot[self.index].rx);
        let n = q.len();
        for frame in q.drain(..) {
            // Every frame in the queue was built by `ethernet::to_vec` and its header is never
            // corrupted, so the check only guards against our own bugs.
            if let Ok(eth) = EthernetFrame::new_checked(&frame[..]) {
                f(eth.src(), eth.payload());
            }
            keep(frame);
        }
        let mut inner = self.inner.borrow_mut();
        let rx = &mut inner.hot[self.index].rx;
        if rx.is_empty() {
            // Give the allocation back.
            *rx = q;
        }
        Ok(n)
    }
}

/// A port lets go the frames its host no longer reads each time this fraction of what it
/// retains has come since (see `SimPort::prune_held`).
const PRUNE_EVERY: usize = 4;

/// A port's queue of held frames grows by what a batch needs plus this fraction of what it
/// retains, so that it is seldom reallocated.
const HELD_MARGIN: usize = 16;

/// Frames a port holds (`range` of them, oldest first), found by where their bytes lie.
struct Kept<'a>(&'a VecDeque<Rc<[u8]>>, std::ops::Range<usize>);

impl Held for Kept<'_> {
    fn find(&self, at: usize, len: usize) -> Option<&[u8]> {
        // Newest first: what a member reads again is mostly recent.
        self.0
            .range(self.1.clone())
            .rev()
            .find_map(|f| within(f, at, len))
    }
}

/// The frames a port lets go at the end of a batch (`range` of those it holds, the oldest).
struct Leaving<'a>(&'a VecDeque<Rc<[u8]>>, std::ops::Range<usize>);

impl Held for Leaving<'_> {
    fn find(&self, at: usize, len: usize) -> Option<&[u8]> {
        // Oldest first: a member asks after its oldest frames left in the link first, and
        // they leave in the order they came (at 1024 members, looking newest first was 4 %
        // of the run).
        self.0
            .range(self.1.clone())
            .find_map(|f| within(f, at, len))
    }
}

/// The `len` bytes at address `at`, if they lie inside `frame`.
fn within(frame: &[u8], at: usize, len: usize) -> Option<&[u8]> {
    let off = at.checked_sub(frame.as_ptr() as usize)?;
    frame.get(off..off.checked_add(len)?)
}
