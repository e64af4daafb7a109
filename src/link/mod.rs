//! Links: the one small trait between the protocol engine and a medium that carries frames.
//!
//! The engine (the core's [`ethbcast_proto::Engine`]) never touches a socket. A driver takes
//! the PDUs the engine wants to send, hands them to a [`Link`] with the destination MAC
//! address, and feeds what the link receives back into the engine. Backends:
//!
//! - [`sim`]: the in-memory simulated switch (virtual clock, seeded faults): the main test-bed;
//! - `ring`: AF_PACKET with memory-mapped TPACKET rings (the default on Linux);
//! - `socket`: plain `send`/`recv` on the same AF_PACKET socket;
//! - `pnet`: pnet's datalink channel;
//! - `xdp`: AF_XDP sockets behind an XDP program (kernel bypass; zero-copy where the driver
//!   has it),
//!
//! so that what the rings buy is measured against the alternatives, not assumed.
//!
//! Besides the network links, the host ring (`crate::host_ring`) is the other medium: the ring
//! in shared memory through which the ranks of one host receive (its waits, on futexes and with
//! deadlines, are I/O like a link's receive).
//!
//! A link carries ethbcast PDUs ([`ethbcast_proto::Frame`]); the Ethernet header (destination,
//! source, EtherType 0x88B5) is the link's business.
//!
//! A link receives frames to its own address, to the broadcast address, and to the multicast
//! groups it joined ([`Link::join_group`]; a group's address is
//! [`crate::group_mac`] of its id), and nothing else: a host outside a group
//! never handles the group's frames.

#[cfg(target_os = "linux")]
mod mapped;
pub mod measure;
pub(crate) mod pnet;
#[cfg(target_os = "linux")]
pub(crate) mod ring;
pub(crate) mod sim;
#[cfg(target_os = "linux")]
pub(crate) mod socket;
#[cfg(target_os = "linux")]
pub(crate) mod xdp;

use std::time::Duration;
use thiserror::Error;

pub(crate) use ethbcast_proto::{
    parse_mac, BatchEnd, GroupAddress, Held, MacAddr, Transmit, BROADCAST_MAC,
};

/// Smallest interface MTU a real link accepts (the IPv4 minimum datagram size): below it the
/// protocol's fragments would be too small to be worth their headers. The same number as the
/// smallest frame size a join accepts ([`ethbcast_proto::MIN_PDU`]): a link that
/// opens can always offer its MTU.
pub const MIN_MTU: usize = ethbcast_proto::MIN_PDU as usize;

/// Checks an interface MTU against [`MIN_MTU`] and returns the largest PDU (the MTU itself).
pub fn check_mtu(mtu: usize) -> Result<usize, LinkError> {
    if mtu < MIN_MTU {
        return Err(LinkError::MtuTooSmall { mtu, need: MIN_MTU });
    }
    Ok(mtu)
}

/// Checks a PDU's length against the link's `max_pdu`.
pub(crate) fn check_pdu(pdu: &[u8], max_pdu: usize) -> Result<(), LinkError> {
    if pdu.len() > max_pdu {
        return Err(LinkError::FrameTooLong {
            len: pdu.len(),
            max: max_pdu,
        });
    }
    Ok(())
}

/// The multicast groups a link joined, and the destination check of the backends that filter
/// in userspace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Groups {
    joined: Vec<MacAddr>,
}

impl Groups {
    /// Records `group`; returns whether it is new (the kernel must be told). The broadcast
    /// address is always received and never recorded.
    pub(crate) fn join(&mut self, group: MacAddr) -> Result<bool, LinkError> {
        check_group(&group)?;
        if group == BROADCAST_MAC || self.joined.contains(&group) {
            return Ok(false);
        }
        self.joined.push(group);
        Ok(true)
    }

    /// Forgets `group`; returns whether it was joined.
    pub(crate) fn leave(&mut self, group: MacAddr) -> Result<bool, LinkError> {
        check_group(&group)?;
        let before = self.joined.len();
        self.joined.retain(|g| *g != group);
        Ok(self.joined.len() != before)
    }

    /// Whether a frame to `dst` is for a link with address `own`.
    pub(crate) fn accepts(&self, own: &MacAddr, dst: &MacAddr) -> bool {
        dst == own || *dst == BROADCAST_MAC || self.joined.contains(dst)
    }

    /// The group addresses received: broadcast and the joined ones (for a socket filter).
    pub(crate) fn received(&self) -> Vec<[u8; 6]> {
        std::iter::once(BROADCAST_MAC)
            .chain(self.joined.iter().copied())
            .map(MacAddr::octets)
            .collect()
    }
}

/// Refuses station (unicast) addresses as groups.
fn check_group(group: &MacAddr) -> Result<(), LinkError> {
    if ethbcast_proto::is_group_mac(group) {
        Ok(())
    } else {
        Err(LinkError::NotGroupAddress(*group))
    }
}

/// How long a link in [`WaitMode::Doze`] sleeps between checks.
pub const DOZE_INTERVAL: Duration = ethbcast_sys::wait::Strategy::DEFAULT_DOZE;

/// How a link waits for frames when none are ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WaitMode {
    /// Busy-poll: lowest latency, burns a core. For dedicated nodes.
    Spin,
    /// Block in `poll(2)`: kind to shared machines, adds a wake-up.
    Block,
    /// Spin for a short while, then block: the default.
    #[default]
    Adaptive,
    /// Check every millisecond ([`DOZE_INTERVAL`]) and sleep in between, taking what arrived
    /// as one batch: for bulk receivers on hosts with more busy processes than cores.
    Doze,
    /// Spin, yielding the CPU between checks, for up to 2 ms, then block: for a caller that
    /// has nothing else to do while it waits, as an MPI rank in a collective call (MPI's own
    /// collectives spin the whole wait). The frame that ends a short wait finds it running, not
    /// asleep; with more processes than cores it yields to them.
    Patient,
}

impl WaitMode {
    /// The shortest quiet period worth timing for a member that waits this way: one that
    /// looks at its queue once per [`DOZE_INTERVAL`] cannot tell a quiet stream from a busy one
    /// any sooner, so a shorter acknowledgement timer only wakes it between its looks (at
    /// 300 µs, 8 dozing receivers took a fifth more CPU per GiB). Zero for the other modes.
    pub fn quiet_floor(self) -> Duration {
        match self {
            WaitMode::Doze => DOZE_INTERVAL,
            WaitMode::Spin | WaitMode::Block | WaitMode::Adaptive | WaitMode::Patient => {
                Duration::ZERO
            }
        }
    }
}

ethbcast_proto::spelled!(WaitMode, "wait mode", {
    Spin => "spin",
    Block => "block",
    Adaptive => "adaptive",
    Doze => "doze",
    Patient => "patient",
});

/// Which real-link backend to open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum Backend {
    /// AF_PACKET with memory-mapped TPACKET_V2 rings (the default).
    #[default]
    Ring,
    /// Plain `send`/`recv` on an AF_PACKET socket.
    Socket,
    /// pnet's datalink channel.
    Pnet,
    /// AF_XDP sockets fed by an XDP program: the kernel-bypass path (root or CAP_BPF +
    /// CAP_NET_ADMIN; one process per interface).
    Xdp,
}

/// The environment variable that overrides the backend a program asks for.
pub const BACKEND_ENV: &str = "ETHBCAST_BACKEND";

impl Backend {
    /// Every backend, in the order they are listed to users.
    pub const ALL: [Backend; 4] = [Backend::Ring, Backend::Socket, Backend::Pnet, Backend::Xdp];

    /// The backend [`open`] really opens when asked for `self`: the one named by
    /// `ETHBCAST_BACKEND` if that is set (so that a deployed program can be switched, e.g. to
    /// `xdp`, without being rebuilt), else `self`. A value that names no backend is an error
    /// rather than silently ignored.
    pub fn resolve(self) -> Result<Backend, LinkError> {
        Self::resolve_with(self, std::env::var(BACKEND_ENV).ok().as_deref())
    }

    fn resolve_with(self, env: Option<&str>) -> Result<Backend, LinkError> {
        match env.map(str::trim).filter(|v| !v.is_empty()) {
            None => Ok(self),
            Some(v) => v
                .parse()
                .map_err(|why: String| LinkError::BadBackendEnv(why)),
        }
    }
}

ethbcast_proto::spelled!(Backend, "backend", {
    Ring => "ring",
    Socket => "socket",
    Pnet => "pnet",
    Xdp => "xdp",
});

/// Opens interface `iface` with `backend` (or the one `ETHBCAST_BACKEND` names, see
/// [`Backend::resolve`]), waiting in `wait` mode, with default sizes.
pub fn open(
    backend: Backend,
    iface: &str,
    wait: WaitMode,
) -> Result<Box<dyn Link + Send>, LinkError> {
    open_sized(backend, iface, wait, 0)
}

/// Like [`open`], but the kernel queues at least `rx_frames` full-size received frames for us
/// (the RX ring's slots, or the socket's receive buffer) before it drops any; 0 keeps the
/// defaults (about a thousand frames).
///
/// Why: a bulk receiver that is descheduled for a few milliseconds on a busy host must not
/// lose the frames that arrive meanwhile, or every such pause turns into repairs. A window
/// of `W` frames in flight can arrive as one burst, so bulk transfers ask for `W` slots.
pub fn open_sized(
    backend: Backend,
    iface: &str,
    wait: WaitMode,
    rx_frames: usize,
) -> Result<Box<dyn Link + Send>, LinkError> {
    use pnet::PnetLink;
    #[cfg(target_os = "linux")]
    use {ring::RingLink, socket::SocketLink, xdp::XdpLink};
    let backend = backend.resolve()?;
    Ok(match backend {
        #[cfg(target_os = "linux")]
        Backend::Ring => Box::new(RingLink::open_sized(iface, wait, rx_frames)?),
        #[cfg(target_os = "linux")]
        Backend::Socket => Box::new(SocketLink::open(iface, &socket::sized(wait, rx_frames))?),
        Backend::Pnet => Box::new(PnetLink::open(iface, &pnet::sized(wait, rx_frames))?),
        #[cfg(target_os = "linux")]
        Backend::Xdp => Box::new(XdpLink::open(iface, &xdp::sized(wait, rx_frames))?),
        #[cfg(not(target_os = "linux"))]
        _ => {
            return Err(LinkError::NoSuchInterface(format!(
                "{iface} ({backend} needs Linux)"
            )))
        }
    })
}

/// Checks that interface `iface` exists, has an MTU ethbcast can use, and that this process
/// may open a raw packet socket on it, without opening a link: a packet socket is bound to
/// the interface with protocol 0, so it receives nothing, and closed again.
///
/// Why not open the link and drop it: a ring link is megabytes of kernel memory, allocated,
/// cleared, mapped and freed, for an answer a bare socket gives. An MPI job asks this of
/// every rank at `MPI_Init`, and on the 8-host test-bed opening and closing a ring there made
/// the TCP broadcasts that Open MPI ran next measurably slower (64 KiB `MPI_Bcast` in short
/// jobs, over Open MPI alone: 1.10-1.13x with a ring, 0.99-1.04x with a bare socket, in 4 runs
/// with both side by side; 1.13x on average in 16 runs before the change, 1.055x in 10 after).
pub fn probe(iface: &str) -> Result<(), LinkError> {
    #[cfg(target_os = "linux")]
    {
        use ethbcast_sys::socket::{PacketSocket, SocketOptions};
        let (iface, _) = socket::lookup(iface)?;
        // No options: a socket that receives nothing and sends nothing needs none.
        let none = SocketOptions {
            ignore_outgoing: false,
            qdisc_bypass: false,
        };
        let mut sock = PacketSocket::new(&none)?;
        sock.bind(iface.index, 0)?;
        Ok(())
    }
    #[cfg(not(target_os = "linux"))]
    open(Backend::Pnet, iface, WaitMode::Block).map(drop)
}

/// Errors of link set-up and I/O, each with what the user can do about it.
#[derive(Debug, Error)]
pub enum LinkError {
    /// The named interface does not exist (in this network namespace).
    #[error("no such network interface {0:?}: check `ip link` (and the network namespace)")]
    NoSuchInterface(String),
    /// Opening a packet socket needs CAP_NET_RAW. The message says why this process lacks it
    /// and gives the `setcap` command for this program.
    #[error(
        "permission denied opening a raw packet socket: {}",
        raw_socket_advice()
    )]
    PermissionDenied,
    /// The interface MTU cannot carry the frames we need.
    #[error("interface MTU {mtu} is too small: ethbcast needs at least {need} bytes")]
    MtuTooSmall {
        /// The interface MTU.
        mtu: usize,
        /// The minimum ethbcast needs.
        need: usize,
    },
    /// The kernel refused the memory-mapped ring (size, version, or memory limits).
    #[error("packet ring setup refused: {0}; try a smaller ring or the `socket` backend")]
    RingSetup(String),
    /// A PDU larger than the link can carry.
    #[error("frame of {len} bytes exceeds the link's maximum of {max}")]
    FrameTooLong {
        /// PDU length.
        len: usize,
        /// Largest PDU the link carries.
        max: usize,
    },
    /// The kernel or the interface refused the AF_XDP set-up; the message says why and what to
    /// do (another XDP program attached, too many queues, MTU, locked memory, ...).
    #[error("xdp backend: {0}")]
    XdpSetup(String),
    /// The xdp backend needs privileges for eBPF.
    #[error("permission denied setting up the xdp backend: it needs CAP_BPF, CAP_NET_ADMIN, CAP_NET_RAW and CAP_IPC_LOCK; run as root or `sudo setcap cap_bpf,cap_net_admin,cap_net_raw,cap_ipc_lock+ep <binary>`, or use the ring backend")]
    XdpPermissionDenied,
    /// `ETHBCAST_BACKEND` names no backend.
    #[error("ETHBCAST_BACKEND: {0}")]
    BadBackendEnv(String),
    /// [`Link::join_group`] or [`Link::leave_group`] was given a station address.
    #[error("{} is a station address, not a group: a group address has the multicast bit (the lowest bit of the first byte) set, e.g. 03:eb:00:00:00:01", .0)]
    NotGroupAddress(MacAddr),
    /// The backend receives only its own address and broadcast (its kernel filter knows no
    /// multicast groups).
    #[error("the {backend} backend cannot join a multicast group: use the broadcast group address (--group-address broadcast) or the ring backend")]
    GroupsUnsupported {
        /// The backend.
        backend: &'static str,
    },
    /// The link cannot take more group addresses.
    #[error("too many multicast groups joined on one link (at most {0}): leave some first")]
    TooManyGroups(usize),
    /// The medium is gone (simulated switch dropped, interface down).
    #[error("link closed")]
    Closed,
    /// Any other operating-system error.
    #[error("link I/O error: {0}")]
    Io(#[from] std::io::Error),
}

/// What to tell a user whom the kernel refused a raw packet socket: the missing capability,
/// why it is missing, and the exact `setcap` command (see [`ethbcast_sys::caps`]).
fn raw_socket_advice() -> String {
    #[cfg(target_os = "linux")]
    {
        use ethbcast_sys::caps::{Advice, Capability};
        Advice::for_missing(Capability::NetRaw).to_string()
    }
    #[cfg(not(target_os = "linux"))]
    {
        "raw packet sockets need root".to_owned()
    }
}

/// A medium that carries ethbcast PDUs between MAC addresses.
pub trait Link {
    /// This end's MAC address.
    fn local_mac(&self) -> MacAddr;
    /// Largest PDU (ethbcast header + payload + CRC) one frame can carry.
    fn max_pdu(&self) -> usize;
    /// Queues (or sends) one PDU to `dst` (a member's MAC, a group's address or
    /// [`BROADCAST_MAC`]).
    fn send(&mut self, dst: MacAddr, pdu: &[u8]) -> Result<(), LinkError>;
    /// Sends the frame `fill` writes, written where the link sends it from if it can (a TX
    /// slot of a mapped ring), else into `scratch` (at least [`Link::max_pdu`] long) and sent
    /// from there with [`Link::send`]. `fill` is lent a buffer of [`Link::max_pdu`] bytes or
    /// more that may hold an earlier frame's bytes; it writes a PDU at its start and says where
    /// it goes and how long it is, or `None` when it has nothing to send: then nothing is sent
    /// and this returns `false`. `fill` is called once at most.
    ///
    /// Why: a root's data frame is cut from the shared retransmission buffer; written straight
    /// into the slot, it is copied once on its way to the device instead of twice, and the
    /// slot is not cleared first.
    fn send_with(
        &mut self,
        scratch: &mut [u8],
        fill: &mut dyn FnMut(&mut [u8]) -> Option<Transmit>,
    ) -> Result<bool, LinkError> {
        let Some(t) = fill(scratch) else {
            return Ok(false);
        };
        let pdu = scratch.get(..t.len).ok_or(LinkError::FrameTooLong {
            len: t.len,
            max: scratch.len(),
        })?;
        self.send(t.dst, pdu)?;
        Ok(true)
    }
    /// Receives frames sent to the multicast address `group` from now on, besides those to
    /// this link's own address and to [`BROADCAST_MAC`] (always received). Joining twice is
    /// joining once. A real link joins with `PACKET_ADD_MEMBERSHIP`, so the NIC passes the
    /// group's frames up, and filters in the kernel, so frames of groups not joined never
    /// reach it. Fails with [`LinkError::NotGroupAddress`] for a station address.
    fn join_group(&mut self, group: MacAddr) -> Result<(), LinkError>;
    /// Stops receiving frames sent to `group` (a no-op if it was not joined).
    fn leave_group(&mut self, group: MacAddr) -> Result<(), LinkError>;
    /// Pushes out anything `send` queued. Backends that send at once do nothing.
    fn flush(&mut self) -> Result<(), LinkError> {
        Ok(())
    }
    /// A descriptor that polls readable while received frames wait, for a thread that serves
    /// the link while its owner is away and should sleep until there is something to serve;
    /// `None` where there is none (the simulated switch): then that thread must look on a
    /// schedule.
    fn readiness_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }
    /// Whether the link takes another frame now without putting it behind more than a few
    /// frames the device has yet to send. A driver stops asking its machine for frames while
    /// this is false and asks again at its next turn, so that what the machine sends next (a
    /// repair, an acknowledgement) goes out soon instead of waiting behind a window of data
    /// in a queue the protocol cannot see. Backends whose `send` waits for room say `true`.
    fn tx_ready(&self) -> bool {
        true
    }
    /// Pushes out anything queued and waits up to `timeout` until the device has taken all of
    /// it; returns whether it did. Frames still queued when a link is dropped are lost, so a
    /// program that sends its last words (an abort, a final report) and exits drains first.
    fn drain(&mut self, timeout: Duration) -> Result<bool, LinkError> {
        let _ = timeout;
        self.flush()?;
        Ok(true)
    }
    /// Calls `f(source MAC, PDU)` for every frame that is ready now, without waiting; returns
    /// how many frames were handed to `f`.
    fn recv_ready(&mut self, f: &mut dyn FnMut(MacAddr, &[u8])) -> Result<usize, LinkError>;
    /// Waits up to `wait` until a frame may be ready; false when the time ran out. A backend
    /// that queues sends pushes them out first, so that nothing it holds waits with it. The
    /// default never waits: the simulated switch, whose harness moves the clock.
    fn wait_ready(&mut self, wait: Duration) -> Result<bool, LinkError> {
        let _ = wait;
        Ok(false)
    }
    /// Calls `f(source MAC, PDU)` for every frame that is ready. If none is ready, waits up
    /// to `wait` (`None`: do not wait). Returns how many frames were handed to `f`.
    ///
    /// A wake-up that brings nothing for us (a foreign frame, one of our own) is not the end of
    /// the wait: it goes on until a frame comes or the time is up.
    fn recv(
        &mut self,
        wait: Option<Duration>,
        f: &mut dyn FnMut(MacAddr, &[u8]),
    ) -> Result<usize, LinkError> {
        recv_with(self, wait, |l| l.recv_ready(f))
    }
    /// Whether this link holds the frames it hands to [`Link::recv_ready_held`]'s `f` until
    /// its `done` returns (a mapped ring, whose slots go back to the kernel after the
    /// batch), so that `done` can use them in place: write their payloads out, say, without
    /// copying them first.
    fn holds_frames(&self) -> bool {
        false
    }
    /// As [`Link::recv_ready`], then calls `done` with the frames the link holds, if it
    /// [holds them](Link::holds_frames) until then: those handed to `f`, whole (Ethernet
    /// header included), and those [retained](Link::retain) from earlier batches; or with
    /// [`BatchEnd::NOTHING`] if it does not (the default).
    fn recv_ready_held(
        &mut self,
        f: &mut dyn FnMut(MacAddr, &[u8]),
        done: &mut dyn FnMut(BatchEnd<'_>),
    ) -> Result<usize, LinkError> {
        let n = self.recv_ready(f)?;
        done(BatchEnd::NOTHING);
        Ok(n)
    }
    /// Keeps up to `frames` received frames held after each batch of
    /// [`Link::recv_ready_held`] (the newest), for a machine to read in later batches
    /// instead of copying them (see [`BatchEnd`]). Returns how many it keeps: 0 for a link
    /// that does not hold its frames (the default). Frames read with [`Link::recv`] or
    /// [`Link::recv_ready`] afterwards end the retention of the earlier ones.
    fn retain(&mut self, frames: usize) -> usize {
        let _ = frames;
        0
    }
    /// Whether the link would now let go, of the frames it [retains](Link::retain), those the
    /// machine no longer reads ([`Link::prune_held`]): a link whose retained frames are its own
    /// memory (a simulated port's, not a ring's fixed slots) asks from time to time. No by
    /// default.
    fn wants_prune(&self) -> bool {
        false
    }
    /// Keeps, of the frames it retains, only those in which one of `refs` (addresses, sorted)
    /// lies (see [`ethbcast_proto::Machine::link_refs`]); the others go now. Nothing by
    /// default.
    fn prune_held(&mut self, refs: &[usize]) {
        let _ = refs;
    }
    /// Calls `f` with what the link holds between batches: the frames it
    /// [retains](Link::retain), none leaving.
    fn with_held(&self, f: &mut dyn FnMut(BatchEnd<'_>)) {
        f(BatchEnd::NOTHING)
    }
    /// As [`Link::recv`], with [`Link::recv_ready_held`]'s `done`, called once per batch of
    /// frames (also an empty one).
    fn recv_held(
        &mut self,
        wait: Option<Duration>,
        f: &mut dyn FnMut(MacAddr, &[u8]),
        done: &mut dyn FnMut(BatchEnd<'_>),
    ) -> Result<usize, LinkError> {
        recv_with(self, wait, |l| l.recv_ready_held(f, done))
    }
}

/// [`Link::recv`]'s wait, around `batch` (one look at what is ready).
pub(crate) fn recv_with<L: Link + ?Sized>(
    link: &mut L,
    wait: Option<Duration>,
    mut batch: impl FnMut(&mut L) -> Result<usize, LinkError>,
) -> Result<usize, LinkError> {
    let n = batch(link)?;
    let Some(wait) = wait.filter(|_| n == 0) else {
        return Ok(n);
    };
    let start = std::time::Instant::now();
    let mut left = wait;
    loop {
        if left.is_zero() || !link.wait_ready(left)? {
            return Ok(0);
        }
        let n = batch(link)?;
        if n > 0 {
            return Ok(n);
        }
        left = wait.saturating_sub(start.elapsed());
    }
}

impl<L: Link + ?Sized> Link for Box<L> {
    fn local_mac(&self) -> MacAddr {
        (**self).local_mac()
    }
    fn max_pdu(&self) -> usize {
        (**self).max_pdu()
    }
    fn send(&mut self, dst: MacAddr, pdu: &[u8]) -> Result<(), LinkError> {
        (**self).send(dst, pdu)
    }
    fn send_with(
        &mut self,
        scratch: &mut [u8],
        fill: &mut dyn FnMut(&mut [u8]) -> Option<Transmit>,
    ) -> Result<bool, LinkError> {
        (**self).send_with(scratch, fill)
    }
    fn flush(&mut self) -> Result<(), LinkError> {
        (**self).flush()
    }
    fn readiness_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        (**self).readiness_fd()
    }
    fn tx_ready(&self) -> bool {
        (**self).tx_ready()
    }
    fn drain(&mut self, timeout: Duration) -> Result<bool, LinkError> {
        (**self).drain(timeout)
    }
    fn join_group(&mut self, group: MacAddr) -> Result<(), LinkError> {
        (**self).join_group(group)
    }
    fn leave_group(&mut self, group: MacAddr) -> Result<(), LinkError> {
        (**self).leave_group(group)
    }
    fn recv_ready(&mut self, f: &mut dyn FnMut(MacAddr, &[u8])) -> Result<usize, LinkError> {
        (**self).recv_ready(f)
    }
    fn holds_frames(&self) -> bool {
        (**self).holds_frames()
    }
    fn recv_ready_held(
        &mut self,
        f: &mut dyn FnMut(MacAddr, &[u8]),
        done: &mut dyn FnMut(BatchEnd<'_>),
    ) -> Result<usize, LinkError> {
        (**self).recv_ready_held(f, done)
    }
    fn recv_held(
        &mut self,
        wait: Option<Duration>,
        f: &mut dyn FnMut(MacAddr, &[u8]),
        done: &mut dyn FnMut(BatchEnd<'_>),
    ) -> Result<usize, LinkError> {
        (**self).recv_held(wait, f, done)
    }
    fn retain(&mut self, frames: usize) -> usize {
        (**self).retain(frames)
    }
    fn with_held(&self, f: &mut dyn FnMut(BatchEnd<'_>)) {
        (**self).with_held(f)
    }
    fn wait_ready(&mut self, wait: Duration) -> Result<bool, LinkError> {
        (**self).wait_ready(wait)
    }
    fn recv(
        &mut self,
        wait: Option<Duration>,
        f: &mut dyn FnMut(MacAddr, &[u8]),
    ) -> Result<usize, LinkError> {
        (**self).recv(wait, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_addresses_round_trip_and_reject_garbage() {
        let m = MacAddr([0x02, 0, 0xab, 1, 2, 0xff]);
        assert_eq!(parse_mac(&m.to_string()), Some(m));
        assert_eq!(parse_mac("02:00:ab"), None);
        assert_eq!(parse_mac("02:00:ab:01:02:03:04"), None);
        assert_eq!(parse_mac("zz:00:ab:01:02:03"), None);
    }

    #[test]
    fn wait_modes_parse_by_name_and_unknown_names_list_the_choices() {
        for (name, mode) in [
            ("spin", WaitMode::Spin),
            ("block", WaitMode::Block),
            ("adaptive", WaitMode::Adaptive),
            ("doze", WaitMode::Doze),
            ("patient", WaitMode::Patient),
        ] {
            assert_eq!(name.parse::<WaitMode>(), Ok(mode));
        }
        let err = "nap".parse::<WaitMode>().unwrap_err();
        assert!(err.contains("doze") && err.contains("nap"), "{err}");
    }

    #[test]
    fn backends_parse_by_name_and_the_environment_overrides_the_request() {
        for b in Backend::ALL {
            assert_eq!(b.to_string().parse::<Backend>(), Ok(b));
        }
        assert!("dpdk".parse::<Backend>().unwrap_err().contains("xdp"));
        assert_eq!(Backend::Ring.resolve_with(None).unwrap(), Backend::Ring);
        assert_eq!(
            Backend::Ring.resolve_with(Some(" ")).unwrap(),
            Backend::Ring
        );
        assert_eq!(
            Backend::Ring.resolve_with(Some("xdp")).unwrap(),
            Backend::Xdp
        );
        assert_eq!(
            Backend::Xdp.resolve_with(Some("socket")).unwrap(),
            Backend::Socket
        );
        let e = Backend::Ring.resolve_with(Some("fast")).unwrap_err();
        assert!(matches!(e, LinkError::BadBackendEnv(_)), "{e}");
        assert!(e.to_string().contains("ETHBCAST_BACKEND") && e.to_string().contains("xdp"));
    }
}
