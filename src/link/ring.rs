//! The `ring` backend (the default on Linux): `AF_PACKET` with memory-mapped `TPACKET_V2` RX
//! and TX rings.
//!
//! Why: receiving costs no system call while frames keep arriving (the kernel writes them into
//! shared memory, we read them in place and hand the PDU to the engine without a copy), and
//! sending costs one system call per burst: `send_with` lends the machine the PDU's place in a
//! TX slot, so the frame is written there and nowhere else (`send` copies a PDU into one),
//! `flush` kicks the kernel once for everything queued. The unsafe half (mapping, slot status
//! protocol, memory ordering) is in `ethbcast_sys::ring`; this file only speaks [`Link`].
//!
//! Sending has two modes ([`TxMode`]): the TX ring (default), or frames copied into a userspace
//! batch and sent with one `sendmmsg(2)` per 64 frames, for kernels or setups where the TX
//! ring is slower (the pingpong example measures both). Either way, queued frames leave at
//! `flush`, when the queue is half full, or before `recv` blocks (so a driver that forgets to
//! flush before waiting for an answer cannot deadlock).

use super::mapped::{self, Mapped, Pending};
use super::socket::{self, lookup, strategy, SendBatch, RECV_BATCH};
use super::{BatchEnd, Groups, Held, Link, LinkError, MacAddr, Transmit, WaitMode};
use ethbcast_proto::{EthernetFrame, ETHERTYPE, ETH_HEADER_LEN};
use ethbcast_sys::iface::Interface;
pub use ethbcast_sys::ring::RingConfig;
use ethbcast_sys::ring::{RingSocket, RxFrame, RxHeld};
use ethbcast_sys::socket::SocketOptions;
use ethbcast_sys::wait::{self, Interest, Strategy};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

/// Hands a received frame's source and payload to `f`, unless it is not for this host, cut
/// short or not Ethernet; returns how many frames it handed over (0 or 1).
fn hand_over(fr: &RxFrame<'_>, f: &mut dyn FnMut(MacAddr, &[u8])) -> usize {
    if fr.is_other_host() || fr.truncated() {
        return 0;
    }
    match EthernetFrame::new_checked(fr.data) {
        Ok(eth) => {
            f(eth.src(), eth.payload());
            1
        }
        Err(_) => 0,
    }
}

/// Frames the ring holds, as the machine finds them (see [`BatchEnd`]).
struct InRing<'a>(RxHeld<'a>);

impl Held for InRing<'_> {
    fn find(&self, at: usize, len: usize) -> Option<&[u8]> {
        self.0.find(at, len)
    }
}

/// Frames a held batch takes at most ([`Link::recv_ready_held`]): an eighth of the default
/// 2048-slot ring, under `IOV_MAX` (1024) pieces for one `writev` of their payloads.
const HELD_BATCH: usize = 256;

/// While waiting for the TX ring, kick it this often (see [`RingSocket::tx_flush`]).
const KICK_EVERY: Duration = Duration::from_millis(1);

/// How the ring backend sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TxMode {
    /// Frames are written into the mapped TX ring; `flush` is one `send(fd, NULL, 0)`.
    #[default]
    Ring,
    /// Frames are written into a batch; `flush` sends it with `sendmmsg` (64 frames a call).
    Batch,
}

impl TxMode {
    /// The queue a frame goes into, as errors name it.
    fn queue(self) -> &'static str {
        match self {
            TxMode::Ring => "the TX ring",
            TxMode::Batch => "the send batch",
        }
    }
}

/// Largest `sendmmsg` batch.
const BATCH: usize = 64;

/// Configuration of the `ring` backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingLinkConfig {
    /// How `recv` (and a `send` that finds the TX ring full) waits.
    pub wait: WaitMode,
    /// RX ring geometry (default: 1024 slots of 2048 bytes).
    pub rx: RingConfig,
    /// TX ring geometry (default: 256 slots of 2048 bytes); unused with [`TxMode::Batch`].
    pub tx: RingConfig,
    /// How frames are sent.
    pub tx_mode: TxMode,
    /// Skip the qdisc layer when sending (`PACKET_QDISC_BYPASS`).
    pub qdisc_bypass: bool,
}

impl Default for RingLinkConfig {
    fn default() -> Self {
        RingLinkConfig {
            wait: WaitMode::default(),
            rx: RingConfig::RX_DEFAULT,
            tx: RingConfig::TX_DEFAULT,
            tx_mode: TxMode::Ring,
            qdisc_bypass: false,
        }
    }
}

/// The configuration of a link on an interface of MTU `mtu` whose RX ring holds at least
/// `rx_frames` full-size received frames (0: the default), in whole blocks of slots, see
/// [`super::open_sized`].
///
/// Slots hold the interface's largest frames: the default 2048 bytes up to an MTU of about
/// 1 980, and above it the next power of two that holds a frame (16 KiB at a 9000-byte MTU,
/// the jumbo frames of many cluster networks), so that the default backend opens on any
/// interface. [`RingLink::open`] takes a configuration as given and refuses slots too small.
fn sized(wait: WaitMode, rx_frames: usize, mtu: usize) -> RingLinkConfig {
    let mut cfg = RingLinkConfig {
        wait,
        ..Default::default()
    };
    let frame = ETH_HEADER_LEN + mtu;
    fit(&mut cfg.rx, |r| r.rx_frame_capacity() >= frame);
    fit(&mut cfg.tx, |r| r.tx_frame_capacity() >= frame);
    if rx_frames > cfg.rx.frame_count {
        let per_block = cfg.rx.block_size / cfg.rx.frame_size;
        cfg.rx.frame_count = rx_frames.div_ceil(per_block) * per_block;
    }
    cfg
}

/// Doubles `ring`'s slots until `holds` says one holds a frame, keeping its number of slots
/// (in whole blocks, a block at least a slot).
fn fit(ring: &mut RingConfig, holds: impl Fn(&RingConfig) -> bool) {
    while !holds(ring) && ring.frame_size < MAX_SLOT {
        ring.frame_size *= 2;
        ring.block_size = ring.block_size.max(ring.frame_size);
        let per_block = ring.block_size / ring.frame_size;
        ring.frame_count = ring.frame_count.div_ceil(per_block) * per_block;
    }
}

/// The largest slot [`sized`] grows to: a frame of the largest MTU (65 535 bytes) fits.
const MAX_SLOT: usize = 128 << 10;

/// A [`Link`] over mapped packet rings.
#[derive(Debug)]
pub struct RingLink {
    ring: RingSocket,
    iface: Interface,
    max_pdu: usize,
    strategy: Strategy,
    /// Frames queued since the last flush.
    pending: Pending,
    tx_mode: TxMode,
    /// [`TxMode::Batch`]: queued frames, back to back, and their end offsets.
    batch: SendBatch,
    groups: Groups,
}

impl RingLink {
    /// Opens interface `iface` (in the calling thread's network namespace) with rings as
    /// configured. Fails with [`LinkError::RingSetup`] if a ring slot cannot hold a frame of the
    /// interface's MTU or the kernel refuses the rings.
    pub fn open(iface: &str, cfg: &RingLinkConfig) -> Result<Self, LinkError> {
        let (iface, max_pdu) = lookup(iface)?;
        Self::open_on(iface, max_pdu, cfg)
    }

    /// Opens `iface` with rings sized for its MTU and at least `rx_frames` receive slots (see
    /// [`sized`]): what [`super::open_sized`] opens.
    pub(crate) fn open_sized(
        iface: &str,
        wait: WaitMode,
        rx_frames: usize,
    ) -> Result<Self, LinkError> {
        let (iface, max_pdu) = lookup(iface)?;
        let cfg = sized(wait, rx_frames, max_pdu);
        Self::open_on(iface, max_pdu, &cfg)
    }

    fn open_on(iface: Interface, max_pdu: usize, cfg: &RingLinkConfig) -> Result<Self, LinkError> {
        let need = ETH_HEADER_LEN + max_pdu;
        let with_tx_ring = cfg.tx_mode == TxMode::Ring;
        let tx_cap = if with_tx_ring {
            cfg.tx.tx_frame_capacity()
        } else {
            usize::MAX
        };
        for (name, cap) in [("RX", cfg.rx.rx_frame_capacity()), ("TX", tx_cap)] {
            if cap < need {
                return Err(LinkError::RingSetup(format!(
                    "{name} ring frames of {cap} usable bytes cannot hold the {need}-byte frames of MTU {max_pdu}; raise the frame size (e.g. to the next power of two above {})",
                    need + 80
                )));
            }
        }
        let opts = SocketOptions {
            ignore_outgoing: true,
            qdisc_bypass: cfg.qdisc_bypass,
        };
        let tx = with_tx_ring.then_some(&cfg.tx);
        let ring = RingSocket::open(iface.index, ETHERTYPE, &opts, &cfg.rx, tx)?;
        let groups = Groups::default();
        // Frames of groups not joined never take a ring slot. (The ring is bound when this
        // is attached: a stray multicast frame that arrived in between is passed over by no
        // one but the engine, which drops other groups' frames.)
        ring.socket()
            .attach_filter(&ethbcast_sys::filter::destinations(&groups.received()))?;
        Ok(RingLink {
            ring,
            iface,
            max_pdu,
            strategy: strategy(cfg.wait),
            pending: Pending::new(if with_tx_ring {
                cfg.tx.frame_count / 2
            } else {
                BATCH
            }),
            tx_mode: cfg.tx_mode,
            batch: SendBatch::default(),
            groups,
        })
    }

    /// The interface this link sends on.
    pub fn interface(&self) -> &Interface {
        &self.iface
    }

    /// The kernel's counters for this socket (received, dropped because the RX ring was
    /// full); reading them resets them.
    pub fn stats(&self) -> Result<ethbcast_sys::socket::Stats, LinkError> {
        Ok(self.ring.socket().stats()?)
    }

    /// Kicks the TX ring every [`KICK_EVERY`] until `done` holds or `timeout` passed; returns
    /// whether it holds. One kick is not enough: the kernel leaves frames that a full device
    /// queue refused in the ring until the next kick, and only a kick frees their slots.
    fn wait_tx(
        &mut self,
        timeout: Duration,
        done: impl Fn(&RingSocket) -> bool,
    ) -> Result<bool, LinkError> {
        let deadline = Instant::now() + timeout;
        self.pending.queued = 0;
        loop {
            self.ring.tx_flush()?;
            let ring = &self.ring;
            let round = KICK_EVERY.min(deadline.saturating_duration_since(Instant::now()));
            if wait::wait_until(
                ring.socket().as_fd(),
                Interest::Write,
                self.strategy,
                round,
                || done(ring),
            )? {
                return Ok(true);
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
        }
    }

    /// Sends the userspace batch with `sendmmsg`, waiting for room when the socket is full.
    fn flush_batch(&mut self) -> Result<(), LinkError> {
        self.batch.send_all(self.ring.socket(), self.strategy)
    }
}

impl Link for RingLink {
    fn local_mac(&self) -> MacAddr {
        MacAddr(self.iface.mac)
    }

    fn max_pdu(&self) -> usize {
        self.max_pdu
    }

    fn send(&mut self, dst: MacAddr, pdu: &[u8]) -> Result<(), LinkError> {
        mapped::send(self, dst, pdu, self.tx_mode.queue())
    }

    /// Both modes write the frame in place: into a TX slot, or at the end of the send batch.
    fn send_with(
        &mut self,
        _scratch: &mut [u8],
        fill: &mut dyn FnMut(&mut [u8]) -> Option<Transmit>,
    ) -> Result<bool, LinkError> {
        mapped::send_with(self, self.tx_mode.queue(), fill)
    }

    fn flush(&mut self) -> Result<(), LinkError> {
        // A ring that still holds frames the device refused at the last kick is kicked again
        // even when nothing new was queued.
        let refused = self.tx_mode == TxMode::Ring && !self.ring.tx_idle();
        if self.pending.queued > 0 || refused {
            match self.tx_mode {
                TxMode::Ring => self.ring.tx_flush()?,
                TxMode::Batch => self.flush_batch()?,
            }
            self.pending.queued = 0;
        }
        Ok(())
    }

    fn drain(&mut self, timeout: Duration) -> Result<bool, LinkError> {
        self.flush()?;
        match self.tx_mode {
            TxMode::Ring => self.wait_tx(timeout, RingSocket::tx_idle),
            // `flush_batch` returns once the kernel took every frame.
            TxMode::Batch => Ok(true),
        }
    }

    fn join_group(&mut self, group: MacAddr) -> Result<(), LinkError> {
        socket::join_group(self.ring.socket(), &mut self.groups, group)
    }

    fn leave_group(&mut self, group: MacAddr) -> Result<(), LinkError> {
        socket::leave_group(self.ring.socket(), &mut self.groups, group)
    }

    fn recv_ready(&mut self, f: &mut dyn FnMut(MacAddr, &[u8])) -> Result<usize, LinkError> {
        let mut n = 0;
        self.ring
            .rx_for_each(RECV_BATCH, &mut |fr| n += hand_over(fr, f));
        Ok(n)
    }

    fn holds_frames(&self) -> bool {
        true
    }

    fn recv_ready_held(
        &mut self,
        f: &mut dyn FnMut(MacAddr, &[u8]),
        done: &mut dyn FnMut(BatchEnd<'_>),
    ) -> Result<usize, LinkError> {
        let mut n = 0;
        // Fewer than `recv_ready` takes: the slots are out of the kernel's hands until `done`
        // returns (which may write them out to a file).
        self.ring.rx_for_each_held(
            HELD_BATCH,
            &mut |fr| n += hand_over(fr, f),
            &mut |held, leaving| {
                done(BatchEnd {
                    held: &InRing(*held),
                    leaving: &InRing(*leaving),
                })
            },
        );
        Ok(n)
    }

    fn retain(&mut self, frames: usize) -> usize {
        self.ring.retain(frames)
    }

    fn with_held(&self, f: &mut dyn FnMut(BatchEnd<'_>)) {
        f(BatchEnd {
            held: &InRing(self.ring.retained()),
            leaving: BatchEnd::NOTHING.leaving,
        })
    }

    fn readiness_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(Mapped::fd(self))
    }

    fn wait_ready(&mut self, wait: Duration) -> Result<bool, LinkError> {
        mapped::wait_ready(self, wait)
    }
}

impl Mapped for RingLink {
    fn fd(&self) -> BorrowedFd<'_> {
        self.ring.socket().as_fd()
    }

    fn strategy(&self) -> Strategy {
        self.strategy
    }

    fn rx_ready(&self) -> bool {
        self.ring.rx_ready()
    }

    fn push_in_place(
        &mut self,
        fill: &mut dyn FnMut(&mut [u8]) -> usize,
    ) -> Result<Option<usize>, LinkError> {
        if self.tx_mode == TxMode::Batch {
            let most = ETH_HEADER_LEN + self.max_pdu;
            return self.batch.push_in_place(most, fill).map(Some);
        }
        Ok(self.ring.tx_push_in_place(fill)?)
    }

    /// Only the TX ring runs out of slots (the batch grows, and `flush_batch` waits for room).
    fn wait_slot(&mut self, timeout: Duration) -> Result<bool, LinkError> {
        self.wait_tx(timeout, RingSocket::tx_slot_free)
    }

    fn pending(&mut self) -> &mut Pending {
        &mut self.pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_stay_at_the_default_up_to_a_1500_byte_mtu() {
        let cfg = sized(WaitMode::Doze, 0, 1500);
        assert_eq!(
            (cfg.rx, cfg.tx),
            (RingConfig::RX_DEFAULT, RingConfig::TX_DEFAULT)
        );
        let bulk = sized(WaitMode::Doze, 2048, 1500);
        assert_eq!(bulk.rx.frame_size, 2048);
        assert_eq!(bulk.rx.frame_count, 2048);
    }

    #[test]
    fn slots_grow_to_hold_jumbo_frames_and_keep_their_number() {
        for (mtu, slot) in [(9000, 16 << 10), (65535, 128 << 10)] {
            let cfg = sized(WaitMode::Doze, 2048, mtu);
            assert_eq!(cfg.rx.frame_size, slot, "MTU {mtu}");
            assert_eq!(cfg.tx.frame_size, slot, "MTU {mtu}");
            assert!(cfg.rx.rx_frame_capacity() >= ETH_HEADER_LEN + mtu);
            assert!(cfg.tx.tx_frame_capacity() >= ETH_HEADER_LEN + mtu);
            assert_eq!(cfg.rx.frame_count, 2048, "MTU {mtu}");
            assert_eq!(cfg.tx.frame_count, RingConfig::TX_DEFAULT.frame_count);
            cfg.rx.validate().unwrap();
            cfg.tx.validate().unwrap();
        }
    }
}
