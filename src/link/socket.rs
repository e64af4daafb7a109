//! The `socket` backend: plain `send`/`recvfrom` on an `AF_PACKET` socket bound to the ethbcast
//! EtherType, one system call per frame.
//!
//! Why keep it next to the ring backend: it is the simplest correct raw-Ethernet link (works
//! where ring memory is restricted, is easy to trace with `strace`), and it is the baseline
//! that shows what the rings buy. It also hosts what the raw backends share: the mapping of
//! [`ethbcast_sys::Error`] to [`LinkError`], interface lookup with the MTU check, frame
//! building with padding, the wait strategy, and joining multicast groups.

use super::{check_mtu, check_pdu, Groups, Link, LinkError, MacAddr, WaitMode};
use ethbcast_proto::{EthernetFrame, ETHERTYPE, ETH_HEADER_LEN, MIN_ETH_FRAME};
use ethbcast_sys::filter;
use ethbcast_sys::iface::Interface;
use ethbcast_sys::socket::{PacketSocket, RecvBatch, SocketOptions, SEND_BATCH_MAX};
use ethbcast_sys::wait::{self, Interest, Strategy};
use std::io;
use std::os::fd::AsFd;
use std::time::Duration;

/// How long `send` waits for room in a full socket buffer before giving up.
pub(crate) const SEND_STALL: Duration = Duration::from_secs(1);

/// Configuration of the `socket` backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketConfig {
    /// How `recv` waits.
    pub wait: WaitMode,
    /// Skip the qdisc layer when sending (`PACKET_QDISC_BYPASS`).
    pub qdisc_bypass: bool,
    /// Receive buffer in bytes: how much the kernel queues for us before it drops frames
    /// (default 4 MiB; the kernel's default of about 200 KiB holds only some hundred frames).
    /// Without `CAP_NET_ADMIN` the kernel caps it at `net.core.rmem_max`.
    pub recv_buffer: usize,
}

impl Default for SocketConfig {
    fn default() -> Self {
        SocketConfig {
            wait: WaitMode::default(),
            qdisc_bypass: false,
            recv_buffer: 4 << 20,
        }
    }
}

/// The configuration of a link whose kernel queues at least `rx_frames` full-size received
/// frames (0: the default), see [`super::open_sized`].
pub(crate) fn sized(wait: WaitMode, rx_frames: usize) -> SocketConfig {
    let d = SocketConfig::default();
    let recv_buffer = d.recv_buffer.max(rx_frames.saturating_mul(2048));
    SocketConfig {
        wait,
        recv_buffer,
        ..d
    }
}

/// A [`Link`] over a plain `AF_PACKET` socket.
#[derive(Debug)]
pub struct SocketLink {
    sock: PacketSocket,
    iface: Interface,
    max_pdu: usize,
    strategy: Strategy,
    /// Frames queued since the last flush.
    tx: SendBatch,
    rx: RecvBatch,
    groups: Groups,
}

impl SocketLink {
    /// Opens interface `iface` (in the calling thread's network namespace).
    pub fn open(iface: &str, cfg: &SocketConfig) -> Result<Self, LinkError> {
        let (iface, max_pdu) = lookup(iface)?;
        let opts = SocketOptions {
            ignore_outgoing: true,
            qdisc_bypass: cfg.qdisc_bypass,
        };
        // Size the buffer before binding, so no frame meets the small default.
        let mut sock = PacketSocket::new(&opts)?;
        size_recv_buffer(&sock, cfg.recv_buffer)?;
        let groups = Groups::default();
        // Filter before binding: no frame of a group not joined is ever queued to us.
        sock.attach_filter(&filter::destinations(&groups.received()))?;
        sock.bind(iface.index, ETHERTYPE)?;
        Ok(SocketLink {
            sock,
            max_pdu,
            strategy: strategy(cfg.wait),
            tx: SendBatch::with_capacity(SEND_BATCH, ETH_HEADER_LEN + max_pdu),
            rx: RecvBatch::new(RECV_CALL, ETH_HEADER_LEN + max_pdu),
            iface,
            groups,
        })
    }

    /// The interface this link sends on.
    pub fn interface(&self) -> &Interface {
        &self.iface
    }

    /// Hands the first `got` frames of the last receive to `f`, those that are whole and ours;
    /// returns how many it handed over.
    fn hand_over(&self, got: usize, f: &mut dyn FnMut(MacAddr, &[u8])) -> usize {
        let mut n = 0;
        for i in 0..got {
            let (info, bytes) = self.rx.frame(i);
            if info.is_other_host() || info.len > self.rx.frame_len() {
                continue;
            }
            if let Ok(fr) = EthernetFrame::new_checked(bytes) {
                f(fr.src(), fr.payload());
                n += 1;
            }
        }
        n
    }
}

/// The shortest wait a blocking socket link spends in the receive itself: a receive's timeout
/// has the kernel's tick as its grain (up to 10 ms at 100 Hz), so a shorter wait, bounded by a
/// protocol timer, polls with a precise timeout instead. The receive's timeout is the wait
/// less half of this, so that the tick never makes it late.
const RECV_BLOCKS: Duration = Duration::from_millis(20);
/// Longest timeout of one blocking receive: a longer wait takes several, and the receive's
/// timeout is set once and kept.
const RECV_TIMEOUT_MAX: Duration = Duration::from_secs(1);

/// Frames queued for one `sendmmsg` at most: the driver stops handing frames over once this
/// many wait ([`Link::tx_ready`]), and a flush sends them.
const SEND_BATCH: usize = 32;

/// Frames one receive call (`recvmmsg`) takes at most.
const RECV_CALL: usize = 32;

/// Most frames one `recv` call hands over.
pub(crate) const RECV_BATCH: usize = 1024;

impl Link for SocketLink {
    fn local_mac(&self) -> MacAddr {
        MacAddr(self.iface.mac)
    }

    fn max_pdu(&self) -> usize {
        self.max_pdu
    }

    fn send(&mut self, dst: MacAddr, pdu: &[u8]) -> Result<(), LinkError> {
        check_pdu(pdu, self.max_pdu)?;
        if self.tx.len() >= SEND_BATCH {
            self.flush()?;
        }
        let src = MacAddr(self.iface.mac);
        // The PDU was checked against `max_pdu`, so emit cannot fail.
        let most = EthernetFrame::len_for(pdu.len());
        self.tx
            .push_in_place(most, &mut |buf| {
                EthernetFrame::emit(buf, dst, src, pdu).unwrap_or(0)
            })
            .map(drop)
    }

    /// Sends the queued frames with one `sendmmsg` (or a few, if the socket fills up).
    fn flush(&mut self) -> Result<(), LinkError> {
        self.tx.send_all(&self.sock, self.strategy)
    }

    fn tx_ready(&self) -> bool {
        self.tx.len() < SEND_BATCH
    }

    fn join_group(&mut self, group: MacAddr) -> Result<(), LinkError> {
        join_group(&self.sock, &mut self.groups, group)
    }

    fn leave_group(&mut self, group: MacAddr) -> Result<(), LinkError> {
        leave_group(&self.sock, &mut self.groups, group)
    }

    fn recv_ready(&mut self, f: &mut dyn FnMut(MacAddr, &[u8])) -> Result<usize, LinkError> {
        let mut n = 0;
        // Bounded, so that a flood cannot keep one call busy forever.
        let mut taken = 0;
        while taken < RECV_BATCH {
            let got = self.sock.recv_batch(&mut self.rx, None)?;
            n += self.hand_over(got, f);
            taken += got;
            if got < self.rx.capacity() {
                break;
            }
        }
        Ok(n)
    }

    /// A blocking or adaptive link waits for frames in the receive itself when no timer is near
    /// (see `PacketSocket::recv_batch`; an adaptive one spins first), and hands over what that
    /// one call brought.
    fn recv(
        &mut self,
        wait: Option<Duration>,
        f: &mut dyn FnMut(MacAddr, &[u8]),
    ) -> Result<usize, LinkError> {
        let spin = match self.strategy {
            Strategy::Block => Duration::ZERO,
            Strategy::Adaptive { spin } => spin,
            _ => return super::recv_with(self, wait, |l| l.recv_ready(f)),
        };
        let Some(wait) = wait.filter(|&w| w >= RECV_BLOCKS + spin) else {
            return super::recv_with(self, wait, |l| l.recv_ready(f));
        };
        // An adaptive link looks without waiting for its spin; a blocking one does not look
        // first: the receive returns at once with what is already queued.
        if !spin.is_zero() {
            let start = std::time::Instant::now();
            loop {
                let n = self.recv_ready(f)?;
                if n > 0 {
                    return Ok(n);
                }
                if start.elapsed() >= spin {
                    break;
                }
                std::thread::yield_now();
            }
        }
        let timeout = (wait - spin - RECV_BLOCKS / 2).min(RECV_TIMEOUT_MAX);
        let start = std::time::Instant::now();
        loop {
            let got = self.sock.recv_batch(&mut self.rx, Some(timeout))?;
            let n = self.hand_over(got, f);
            if n > 0 || got == 0 || start.elapsed() >= timeout {
                return Ok(n);
            }
        }
    }

    fn readiness_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        Some(self.sock.as_fd())
    }

    fn wait_ready(&mut self, wait: Duration) -> Result<bool, LinkError> {
        Ok(wait::wait_fd(
            self.sock.as_fd(),
            Interest::Read,
            self.strategy,
            wait,
        )?)
    }
}

impl From<ethbcast_sys::Error> for LinkError {
    fn from(e: ethbcast_sys::Error) -> Self {
        use ethbcast_sys::Error as E;
        match e {
            E::NoSuchInterface(name) => LinkError::NoSuchInterface(name),
            E::PermissionDenied { .. } => LinkError::PermissionDenied,
            E::RingConfig(_) | E::RingSetup { .. } => LinkError::RingSetup(e.to_string()),
            E::FrameTooLong { len, max } => LinkError::FrameTooLong { len, max },
            E::BpfPermission { .. } => LinkError::XdpPermissionDenied,
            E::Bpf(_)
            | E::XdpBusy { .. }
            | E::XskUnsupported
            | E::XskConfig(_)
            | E::ZeroCopyUnsupported { .. }
            | E::XskBind { .. }
            | E::XskQueueBusy { .. }
            | E::Xsk { .. } => LinkError::XdpSetup(e.to_string()),
            ref io if io.is_link_gone() => LinkError::Closed,
            other => {
                let kind = match &other {
                    E::InvalidInterfaceName { .. } | E::NotEthernet { .. } | E::Filter(_) => {
                        io::ErrorKind::InvalidInput
                    }
                    E::Io { source, .. } => source.kind(),
                    _ => io::ErrorKind::Other,
                };
                LinkError::Io(io::Error::new(kind, other))
            }
        }
    }
}

/// Asks for a receive buffer of `bytes` and warns when the kernel granted less: without
/// `CAP_NET_ADMIN` it caps the buffer at `net.core.rmem_max`, and a receiver that is busy
/// elsewhere for a moment then drops frames that must be repaired.
pub(crate) fn size_recv_buffer(sock: &PacketSocket, bytes: usize) -> Result<(), LinkError> {
    let granted = sock.set_recv_buffer(bytes)?;
    // The kernel doubles what it grants (for its bookkeeping).
    if granted < bytes.saturating_mul(2) {
        use ethbcast_sys::caps::{Advice, Capability, ProcessCaps};
        let why = if ProcessCaps::current().is_some_and(|p| p.has(Capability::NetAdmin)) {
            "raise net.core.rmem_max".to_owned()
        } else {
            format!(
                "for a larger buffer {}; or raise net.core.rmem_max",
                Advice::for_missing(Capability::NetAdmin)
            )
        };
        tracing::warn!(
            asked = bytes,
            granted = granted / 2,
            "the kernel capped the packet socket's receive buffer; {why}"
        );
    }
    Ok(())
}

/// Joins `group` on `sock` (`PACKET_ADD_MEMBERSHIP`) and lets the socket filter accept it.
pub(crate) fn join_group(
    sock: &PacketSocket,
    groups: &mut Groups,
    group: MacAddr,
) -> Result<(), LinkError> {
    if !groups.join(group)? {
        return Ok(());
    }
    let installed = if groups.received().len() > filter::MAX_GROUPS {
        Err(LinkError::TooManyGroups(filter::MAX_GROUPS - 1))
    } else {
        sock.add_membership(&group).map_err(LinkError::from)
    };
    if let Err(e) = installed {
        groups.leave(group)?;
        return Err(e);
    }
    if let Err(e) = sock.attach_filter(&filter::destinations(&groups.received())) {
        groups.leave(group)?;
        let _ = sock.drop_membership(&group);
        return Err(e.into());
    }
    Ok(())
}

/// Leaves `group` on `sock`: the socket filter drops its frames again, then the membership goes.
pub(crate) fn leave_group(
    sock: &PacketSocket,
    groups: &mut Groups,
    group: MacAddr,
) -> Result<(), LinkError> {
    if groups.leave(group)? {
        sock.attach_filter(&filter::destinations(&groups.received()))?;
        sock.drop_membership(&group)?;
    }
    Ok(())
}

/// The error of a send that found no room for [`SEND_STALL`].
pub(crate) fn stalled(what: &str) -> LinkError {
    LinkError::Io(io::Error::new(
        io::ErrorKind::TimedOut,
        format!("{what} had no room to send for {SEND_STALL:?}: is the interface up and its queue draining?"),
    ))
}

/// Looks the interface up and applies the MTU check; returns it with the largest PDU.
pub(crate) fn lookup(name: &str) -> Result<(Interface, usize), LinkError> {
    let iface = Interface::lookup(name)?;
    let max_pdu = check_mtu(iface.mtu)?;
    Ok((iface, max_pdu))
}

/// Frames queued back to back for `sendmmsg`, and where each ends: the socket link's send
/// queue, and the ring link's in its batch mode.
#[derive(Debug, Default)]
pub(crate) struct SendBatch {
    /// The queued frames in `bytes[..used]`; past `used`, room kept from earlier batches
    /// (their stale bytes are lent to the next frames' makers and never sent).
    bytes: Vec<u8>,
    used: usize,
    ends: Vec<usize>,
}

impl SendBatch {
    /// Room for `frames` frames of `frame_len` bytes before the queue grows.
    pub(crate) fn with_capacity(frames: usize, frame_len: usize) -> SendBatch {
        SendBatch {
            bytes: Vec::with_capacity(frames * frame_len),
            used: 0,
            ends: Vec::with_capacity(frames),
        }
    }

    /// Frames queued.
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    /// Queues the frame `fill` writes into the `most` bytes lent to it, as into a ring's TX
    /// slot: they may hold an earlier frame's bytes, so a frame shorter than the Ethernet
    /// minimum is padded with zeros, and nothing is cleared before `fill` writes (the room
    /// is zeroed once, when the queue first grows to it). Returns the length queued, padded
    /// (0: `fill` wrote none, and nothing is queued).
    pub(crate) fn push_in_place(
        &mut self,
        most: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> usize,
    ) -> Result<usize, LinkError> {
        let start = self.used;
        if self.bytes.len() < start + most {
            self.bytes.resize(start + most, 0);
        }
        let len = fill(&mut self.bytes[start..start + most]);
        if len > most {
            return Err(LinkError::FrameTooLong { len, max: most });
        }
        if len == 0 {
            return Ok(0);
        }
        let padded = len.max(MIN_ETH_FRAME.min(most));
        self.bytes[start + len..start + padded].fill(0);
        self.used = start + padded;
        self.ends.push(self.used);
        Ok(padded)
    }

    /// Sends every queued frame on `sock` with `sendmmsg`, waiting (the way `strategy` says)
    /// for room while the socket is full, and empties the queue.
    pub(crate) fn send_all(
        &mut self,
        sock: &PacketSocket,
        strategy: Strategy,
    ) -> Result<(), LinkError> {
        // The frames go in chunks of what one `sendmmsg` takes, their slices on the stack.
        let (mut sent, mut start) = (0, 0);
        while sent < self.ends.len() {
            let mut frames: [&[u8]; SEND_BATCH_MAX] = [&[]; SEND_BATCH_MAX];
            let ends = &self.ends[sent..self.ends.len().min(sent + SEND_BATCH_MAX)];
            let mut from = start;
            for (frame, &end) in frames.iter_mut().zip(ends) {
                *frame = &self.bytes[from..end];
                from = end;
            }
            let n = sock.send_batch(&frames[..ends.len()])?;
            if n == 0 && !wait::wait_fd(sock.as_fd(), Interest::Write, strategy, SEND_STALL)? {
                return Err(stalled("the packet socket"));
            }
            if n > 0 {
                start = ends[n - 1];
                sent += n;
            }
        }
        self.used = 0;
        self.ends.clear();
        Ok(())
    }
}

/// The sys wait strategy of a [`WaitMode`].
pub(crate) fn strategy(mode: WaitMode) -> Strategy {
    match mode {
        WaitMode::Spin => Strategy::Spin,
        WaitMode::Block => Strategy::Block,
        WaitMode::Adaptive => Strategy::default(),
        WaitMode::Patient => Strategy::Adaptive {
            spin: Strategy::PATIENT_SPIN,
        },
        WaitMode::Doze => Strategy::Doze {
            interval: super::DOZE_INTERVAL,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The batch lends its room without clearing it, as a ring lends a TX slot: a frame
    /// shorter than the Ethernet minimum, written where a long one lay, goes out padded with
    /// zeros (IEEE 802.3), not with the earlier frame's bytes; a fill that writes nothing
    /// queues nothing.
    #[test]
    fn a_short_frame_where_a_long_one_lay_is_padded_with_zeros() {
        let mut b = SendBatch::default();
        let long = b
            .push_in_place(1514, &mut |d| {
                d.fill(0xaa);
                1514
            })
            .unwrap();
        assert_eq!(long, 1514);
        // As `send_all` leaves it: empty, its room kept.
        b.used = 0;
        b.ends.clear();
        assert_eq!(b.push_in_place(1514, &mut |_| 0).unwrap(), 0);
        assert_eq!(b.len(), 0);
        let short = b
            .push_in_place(1514, &mut |d| {
                d[..20].fill(0x55);
                20
            })
            .unwrap();
        assert_eq!(short, MIN_ETH_FRAME);
        assert_eq!(b.ends, [MIN_ETH_FRAME]);
        assert!(b.bytes[..20].iter().all(|&x| x == 0x55));
        assert!(b.bytes[20..MIN_ETH_FRAME].iter().all(|&x| x == 0));
        assert!(matches!(
            b.push_in_place(100, &mut |_| 101),
            Err(LinkError::FrameTooLong { len: 101, max: 100 })
        ));
    }

    #[test]
    fn sys_errors_map_to_link_errors_that_say_what_to_do() {
        let e: LinkError = ethbcast_sys::Error::from_errno("socket", 1).into();
        assert!(matches!(e, LinkError::PermissionDenied));
        assert!(e.to_string().contains("CAP_NET_RAW"));
        let e: LinkError = ethbcast_sys::Error::NoSuchInterface("x0".into()).into();
        assert!(matches!(e, LinkError::NoSuchInterface(ref n) if n == "x0"));
        let e: LinkError = ethbcast_sys::Error::RingConfig("bad".into()).into();
        assert!(matches!(e, LinkError::RingSetup(_)));
        let e: LinkError = ethbcast_sys::Error::InvalidInterfaceName {
            name: "a/b".into(),
            why: "slash",
        }
        .into();
        assert!(matches!(e, LinkError::Io(ref io) if io.kind() == io::ErrorKind::InvalidInput));
    }

    #[test]
    fn pdus_longer_than_the_link_carries_are_refused() {
        assert!(check_pdu(&[0; 1500], 1500).is_ok());
        assert!(matches!(
            check_pdu(&[0; 1501], 1500),
            Err(LinkError::FrameTooLong {
                len: 1501,
                max: 1500
            })
        ));
    }

    #[test]
    fn mtu_below_the_minimum_is_refused() {
        assert!(matches!(
            check_mtu(500),
            Err(LinkError::MtuTooSmall {
                mtu: 500,
                need: 576
            })
        ));
        assert_eq!(check_mtu(1500).unwrap(), 1500);
    }
}
