//! The `xdp` backend: AF_XDP, the kernel-bypass path. An XDP program at the driver takes our
//! frames (EtherType 0x88B5, addressed to this interface's MAC or to broadcast) before the
//! kernel builds a socket buffer for them and redirects them into an AF_XDP socket; every other
//! frame (IP, ARP, other hosts' unicast) goes on to the kernel's stack untouched.
//!
//! Why next to the ring backend: TPACKET rings still take each frame through the kernel's
//! packet taps (a socket buffer, a clone per tap, the ring copy); AF_XDP takes it at the
//! driver. With a zero-copy driver (ixgbe, i40e, ice, mlx5) the NIC writes straight into our
//! memory; where the driver has none (veth, the test-bed) the socket runs in copy mode and
//! the kernel copies once, which is still past the stack. Which one runs is detected
//! ([`XdpLink::zero_copy`]), never assumed.
//!
//! Receiving: frames are read in place from the UMEM and handed to the engine without a copy,
//! their chunks going back to the fill ring after the callback. Sending: `send` writes the
//! frame straight into a free UMEM chunk and queues its descriptor; `flush` kicks the kernel
//! once for everything queued. As with the ring backend, queued frames leave at `flush`, when
//! half the TX frames are queued, or before `recv` blocks.
//!
//! Requirements, each with a clear error: CAP_BPF, CAP_NET_ADMIN, CAP_NET_RAW (root); one XDP
//! program per interface (a second ethbcast process on the same interface is refused, see
//! [`LinkError::XdpSetup`]); an interface with one receive queue, or a queue given explicitly
//! (a multi-queue NIC spreads frames over queues and the socket listens on one: `ethtool -L
//! <iface> combined 1`, or steer EtherType 0x88B5 to the queue with an ntuple rule); an MTU
//! whose frames fit a UMEM chunk after the kernel's 256-byte headroom (1792 bytes with the
//! default 2048-byte chunks, 3840 with 4096).

use super::mapped::{self, Mapped, Pending};
use super::socket::{lookup, strategy, RECV_BATCH};
use super::{Link, LinkError, MacAddr, WaitMode, BROADCAST_MAC};
use ethbcast_proto::{is_group_mac, EthernetFrame, ETHERTYPE, ETH_HEADER_LEN};
use ethbcast_sys::bpf::{XdpMode, XdpRedirect};
use ethbcast_sys::iface::{self, Interface};
use ethbcast_sys::wait::Strategy;
use ethbcast_sys::xsk::{XdpSocket, XskConfig, XskStats, ZeroCopy};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

/// While waiting for TX frames to complete, pause this long between checks (blocking wait
/// modes; there is no descriptor event for a completion in copy mode).
const TX_NAP: Duration = Duration::from_micros(20);

/// Configuration of the `xdp` backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct XdpLinkConfig {
    /// How `recv` (and a `send` that finds no free TX frame) waits.
    pub wait: WaitMode,
    /// UMEM and ring geometry, zero-copy policy.
    pub xsk: XskConfig,
    /// Where the XDP program runs; `None`: native if the driver has it, generic otherwise.
    pub mode: Option<XdpMode>,
    /// The receive queue to listen on; `None`: queue 0, and the interface must have only one.
    pub queue: Option<u32>,
}

/// A [`Link`] over an AF_XDP socket.
#[derive(Debug)]
pub struct XdpLink {
    // Field order: the socket is closed before the program is detached.
    sock: XdpSocket,
    prog: XdpRedirect,
    iface: Interface,
    queue: u32,
    max_pdu: usize,
    strategy: Strategy,
    /// Frames queued since the last flush.
    pending: Pending,
}

impl XdpLink {
    /// Opens interface `iface` (in the calling thread's network namespace): attaches the
    /// redirect program and binds an AF_XDP socket to the queue.
    pub fn open(iface: &str, cfg: &XdpLinkConfig) -> Result<Self, LinkError> {
        let (iface, max_pdu) = lookup(iface)?;
        let need = ETH_HEADER_LEN + max_pdu;
        if need > cfg.xsk.max_frame() {
            return Err(LinkError::XdpSetup(format!(
                "{}: frames of MTU {max_pdu} ({need} bytes) do not fit the {}-byte AF_XDP frames after the kernel's headroom ({} usable); use 4096-byte frames (MTU up to 3826) or the ring backend",
                iface.name,
                cfg.xsk.frame_size,
                cfg.xsk.max_frame()
            )));
        }
        let queues = iface::rx_queues(&iface.name)?.unwrap_or(1);
        let queue = match cfg.queue {
            Some(q) => q,
            None if queues > 1 => {
                return Err(LinkError::XdpSetup(format!(
                    "{name} has {queues} receive queues and an AF_XDP socket listens on one, so frames on the others would never reach it: run `ethtool -L {name} combined 1`, or steer ethbcast frames to one queue (`ethtool -N {name} flow-type ether proto 0x88b5 action 0`) and name that queue in the configuration",
                    name = iface.name
                )))
            }
            None => 0,
        };
        let prog = XdpRedirect::attach(
            iface.index,
            ETHERTYPE,
            &[iface.mac, BROADCAST_MAC.0],
            queues.max(queue + 1),
            cfg.mode,
        )?;
        let sock = XdpSocket::open(iface.index, queue, &cfg.xsk, prog.map())?;
        Ok(XdpLink {
            sock,
            prog,
            iface,
            queue,
            max_pdu,
            strategy: strategy(cfg.wait),
            pending: Pending::new(cfg.xsk.tx_frames as usize / 2),
        })
    }

    /// The interface this link sends on.
    pub fn interface(&self) -> &Interface {
        &self.iface
    }

    /// Whether the socket runs zero-copy (the driver DMAs into our memory) rather than in copy
    /// mode.
    pub fn zero_copy(&self) -> bool {
        self.sock.zero_copy()
    }

    /// Where the XDP program runs.
    pub fn xdp_mode(&self) -> XdpMode {
        self.prog.mode()
    }

    /// The receive queue the socket is bound to.
    pub fn queue(&self) -> u32 {
        self.queue
    }

    /// The kernel's counters for the socket (drops because the RX ring was full, ...).
    pub fn stats(&self) -> Result<XskStats, LinkError> {
        Ok(self.sock.stats()?)
    }

    /// Kicks the kernel until `done` holds or `timeout` passed; returns whether it holds.
    fn wait_tx(
        &mut self,
        timeout: Duration,
        done: impl Fn(&mut XdpSocket) -> bool,
    ) -> Result<bool, LinkError> {
        let deadline = Instant::now() + timeout;
        self.pending.queued = 0;
        loop {
            self.sock.tx_flush()?;
            if done(&mut self.sock) {
                return Ok(true);
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
            match self.strategy {
                Strategy::Spin => std::hint::spin_loop(),
                Strategy::Adaptive { .. } => std::thread::yield_now(),
                Strategy::Block | Strategy::Doze { .. } => std::thread::sleep(TX_NAP),
            }
        }
    }
}

impl Link for XdpLink {
    fn local_mac(&self) -> MacAddr {
        MacAddr(self.iface.mac)
    }

    fn max_pdu(&self) -> usize {
        self.max_pdu
    }

    /// The redirect program passes only frames to this host's address and to broadcast to
    /// the socket: a multicast group is refused with a typed error (the broadcast address,
    /// always received, is accepted).
    fn join_group(&mut self, group: MacAddr) -> Result<(), LinkError> {
        if !is_group_mac(&group) {
            return Err(LinkError::NotGroupAddress(group));
        }
        if group == BROADCAST_MAC {
            return Ok(());
        }
        Err(LinkError::GroupsUnsupported { backend: "xdp" })
    }

    fn leave_group(&mut self, group: MacAddr) -> Result<(), LinkError> {
        if !is_group_mac(&group) {
            return Err(LinkError::NotGroupAddress(group));
        }
        Ok(())
    }

    fn send(&mut self, dst: MacAddr, pdu: &[u8]) -> Result<(), LinkError> {
        mapped::send(self, dst, pdu, "the AF_XDP TX ring")
    }

    fn flush(&mut self) -> Result<(), LinkError> {
        // Frames the device refused at the last kick are still in the TX ring: kick again
        // even when nothing new was queued.
        self.sock.tx_flush()?;
        self.pending.queued = 0;
        Ok(())
    }

    fn drain(&mut self, timeout: Duration) -> Result<bool, LinkError> {
        self.flush()?;
        self.wait_tx(timeout, XdpSocket::tx_idle)
    }

    fn recv_ready(&mut self, f: &mut dyn FnMut(MacAddr, &[u8])) -> Result<usize, LinkError> {
        let mut n = 0;
        self.sock.rx_for_each(RECV_BATCH, &mut |data| {
            if let Ok(eth) = EthernetFrame::new_checked(data) {
                f(eth.src(), eth.payload());
                n += 1;
            }
        })?;
        Ok(n)
    }

    fn readiness_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(Mapped::fd(self))
    }

    fn wait_ready(&mut self, wait: Duration) -> Result<bool, LinkError> {
        mapped::wait_ready(self, wait)
    }
}

/// The socket geometry for a link that must queue at least `rx_frames` received frames (0:
/// the default), see [`super::open_sized`].
pub(crate) fn sized(wait: WaitMode, rx_frames: usize) -> XdpLinkConfig {
    let mut cfg = XdpLinkConfig {
        wait,
        ..Default::default()
    };
    let want = rx_frames.clamp(cfg.xsk.rx_frames as usize, 1 << 16);
    cfg.xsk.rx_frames = want.next_power_of_two() as u32;
    cfg.xsk.zero_copy = ZeroCopy::Auto;
    cfg
}

impl Mapped for XdpLink {
    fn fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }

    fn strategy(&self) -> Strategy {
        self.strategy
    }

    fn rx_ready(&self) -> bool {
        self.sock.rx_ready()
    }

    fn push_in_place(
        &mut self,
        fill: &mut dyn FnMut(&mut [u8]) -> usize,
    ) -> Result<Option<usize>, LinkError> {
        Ok(self.sock.tx_push_in_place(fill)?)
    }

    /// Every TX frame is queued or in flight: push them out, wait for one to complete.
    fn wait_slot(&mut self, timeout: Duration) -> Result<bool, LinkError> {
        self.wait_tx(timeout, XdpSocket::tx_slot_free)
    }

    fn pending(&mut self) -> &mut Pending {
        &mut self.pending
    }
}
