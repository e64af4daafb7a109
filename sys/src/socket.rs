//! The `AF_PACKET`/`SOCK_RAW` socket: one interface, one EtherType, whole Ethernet frames.
//!
//! Why these choices:
//! - bound to the ethbcast EtherType, not `ETH_P_ALL`: the kernel then hands us only our
//!   frames, and nothing of the host's IP traffic is copied to userspace;
//! - created with protocol 0 and bound afterwards: a socket created with a protocol receives
//!   from *every* interface until it is bound, and a ring must be set up before frames arrive
//!   (frames queued on the plain socket before the ring would keep `poll` readable forever),
//!   so [`PacketSocket::new`] makes a socket that receives nothing and [`PacketSocket::bind`]
//!   is the last step;
//! - `PACKET_IGNORE_OUTGOING` on by default: otherwise every frame we send to the broadcast
//!   address is also delivered back to our own socket;
//! - nonblocking: waiting is [`crate::wait`]'s business (spin, poll, or both).

use crate::filter::{Insn, MAX_INSNS};
use crate::{sockcall, Error, Result};
use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};
use std::mem::size_of;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

/// Options of a packet socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketOptions {
    /// Do not deliver frames this host sends back to this socket (`PACKET_IGNORE_OUTGOING`).
    pub ignore_outgoing: bool,
    /// Hand frames straight to the driver, skipping the qdisc layer (`PACKET_QDISC_BYPASS`).
    /// Faster, but bypasses traffic shaping and the qdisc's queue (drops when the NIC is busy).
    pub qdisc_bypass: bool,
}

impl Default for SocketOptions {
    fn default() -> Self {
        SocketOptions {
            ignore_outgoing: true,
            qdisc_bypass: false,
        }
    }
}

/// What [`PacketSocket::recv`] learned about one received frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvInfo {
    /// Length of the frame on the wire; more than the buffer if the frame was truncated.
    pub len: usize,
    /// `PACKET_HOST`, `PACKET_BROADCAST`, `PACKET_MULTICAST`, `PACKET_OTHERHOST`, ...
    pub pkttype: u8,
}

impl RecvInfo {
    /// Whether the frame was addressed to someone else (seen only in promiscuous mode).
    pub fn is_other_host(&self) -> bool {
        self.pkttype == libc::PACKET_OTHERHOST || self.pkttype == libc::PACKET_OUTGOING
    }
}

/// Counters of the kernel (`PACKET_STATISTICS`); reading them resets them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Frames the socket received (including dropped ones).
    pub packets: u32,
    /// Frames dropped because the socket buffer or ring was full.
    pub drops: u32,
}

/// Frames one [`PacketSocket::send_batch`] sends at most.
pub const SEND_BATCH_MAX: usize = 64;

/// An `AF_PACKET` raw socket. Unbound after [`PacketSocket::new`]: call [`PacketSocket::bind`].
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
    ifindex: u32,
    ethertype: u16,
    /// The receive timeout last set for a waiting [`PacketSocket::recv_batch`], in ms (0: never
    /// set, the descriptor still nonblocking).
    rcvtimeo_ms: std::cell::Cell<u64>,
}

impl PacketSocket {
    /// Creates a nonblocking packet socket that receives nothing yet and applies `opts`.
    /// Needs `CAP_NET_RAW` ([`Error::PermissionDenied`] otherwise).
    pub fn new(opts: &SocketOptions) -> Result<Self> {
        let fd = Self::new_unbound_fd()?;
        let s = PacketSocket {
            fd,
            ifindex: 0,
            ethertype: 0,
            rcvtimeo_ms: std::cell::Cell::new(0),
        };
        if opts.ignore_outgoing {
            s.set_ignore_outgoing(true)?;
        }
        if opts.qdisc_bypass {
            s.set_qdisc_bypass(true)?;
        }
        Ok(s)
    }

    /// Creates, configures and binds in one step: the socket receives `ethertype` frames of
    /// interface `ifindex`.
    pub fn open(ifindex: u32, ethertype: u16, opts: &SocketOptions) -> Result<Self> {
        let mut s = Self::new(opts)?;
        s.bind(ifindex, ethertype)?;
        Ok(s)
    }

    /// A bare nonblocking `AF_PACKET`/`SOCK_RAW` socket with protocol 0 (receives nothing),
    /// for handing to code that binds it itself (e.g. pnet's `Config::socket_fd`).
    pub fn new_unbound_fd() -> Result<OwnedFd> {
        socket(
            AddressFamily::Packet,
            SockType::Raw,
            SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
            None,
        )
        .map_err(|e| Error::from_errno("socket(AF_PACKET, SOCK_RAW)", e as i32))
    }

    /// Binds to interface `ifindex` and EtherType `ethertype`: from now on the socket receives
    /// those frames, and sends on that interface.
    pub fn bind(&mut self, ifindex: u32, ethertype: u16) -> Result<()> {
        sockcall::bind(
            self.fd.as_fd(),
            &sockaddr_ll(ifindex, ethertype),
            ifindex,
            |e| Error::from_io("bind(AF_PACKET)", e),
        )?;
        self.ifindex = ifindex;
        self.ethertype = ethertype;
        Ok(())
    }

    /// Gives up the socket as a plain descriptor (e.g. for a library that binds it itself).
    pub fn into_fd(self) -> OwnedFd {
        self.fd
    }

    /// The interface index bound to (0 before [`PacketSocket::bind`]).
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The EtherType bound to (0 before [`PacketSocket::bind`]).
    pub fn ethertype(&self) -> u16 {
        self.ethertype
    }

    /// Turns `PACKET_IGNORE_OUTGOING` on or off.
    pub fn set_ignore_outgoing(&self, on: bool) -> Result<()> {
        self.setsockopt_int(
            libc::SOL_PACKET,
            libc::PACKET_IGNORE_OUTGOING,
            on.into(),
            "PACKET_IGNORE_OUTGOING",
        )
    }

    /// Turns `PACKET_QDISC_BYPASS` on or off.
    pub fn set_qdisc_bypass(&self, on: bool) -> Result<()> {
        self.setsockopt_int(
            libc::SOL_PACKET,
            libc::PACKET_QDISC_BYPASS,
            on.into(),
            "PACKET_QDISC_BYPASS",
        )
    }

    /// Sets the socket's receive buffer to `bytes` (what the plain socket can queue before the
    /// kernel drops frames). Tries `SO_RCVBUFFORCE` (needs `CAP_NET_ADMIN`, ignores the
    /// `net.core.rmem_max` limit) first, then `SO_RCVBUF` (capped at `rmem_max`). Returns the
    /// size the kernel granted (it doubles the request for its bookkeeping).
    pub fn set_recv_buffer(&self, bytes: usize) -> Result<usize> {
        let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX / 2);
        if self
            .setsockopt_int(libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, v, "SO_RCVBUFFORCE")
            .is_err()
        {
            self.setsockopt_int(libc::SOL_SOCKET, libc::SO_RCVBUF, v, "SO_RCVBUF")?;
        }
        nix::sys::socket::getsockopt(&self.fd, nix::sys::socket::sockopt::RcvBuf)
            .map_err(|e| Error::from_errno("SO_RCVBUF", e as i32))
    }

    /// Attaches a classic BPF program (see [`crate::filter`]) that runs on every frame before
    /// it is queued to this socket.
    pub fn attach_filter(&self, prog: &[Insn]) -> Result<()> {
        if prog.is_empty() || prog.len() > MAX_INSNS {
            return Err(Error::Filter(format!(
                "a program has 1 to {MAX_INSNS} instructions, not {}",
                prog.len()
            )));
        }
        let fprog = libc::sock_fprog {
            len: prog.len() as u16,
            filter: prog.as_ptr().cast_mut(),
        };
        // The kernel copies the program during the call; `prog` outlives it.
        sockcall::setsockopt(
            self.fd.as_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            &fprog,
        )
        .map_err(|err| match err.raw_os_error() {
            Some(libc::EINVAL) => Error::Filter(format!("the kernel refused it: {err}")),
            _ => Error::from_io("SO_ATTACH_FILTER", err),
        })?;
        Ok(())
    }

    /// Joins the link-layer multicast group `mac` on the bound interface
    /// (`PACKET_ADD_MEMBERSHIP` with `PACKET_MR_MULTICAST`): the kernel adds it to the
    /// device's multicast list, so the NIC passes frames to it up. The membership lasts until
    /// [`PacketSocket::drop_membership`] or until the socket is closed; joining twice counts
    /// twice. Frames of joined groups still pass a socket filter only if it accepts them.
    pub fn add_membership(&self, mac: &[u8; 6]) -> Result<()> {
        set_membership(self.as_fd(), self.ifindex, mac, true)
    }

    /// Leaves a group joined with [`PacketSocket::add_membership`].
    pub fn drop_membership(&self, mac: &[u8; 6]) -> Result<()> {
        set_membership(self.as_fd(), self.ifindex, mac, false)
    }

    /// Removes an attached BPF program.
    pub fn detach_filter(&self) -> Result<()> {
        self.setsockopt_int(
            libc::SOL_SOCKET,
            libc::SO_DETACH_FILTER,
            0,
            "SO_DETACH_FILTER",
        )
    }

    /// Sends one whole Ethernet frame (header included) on the bound interface. Returns
    /// `Ok(false)` if the socket cannot take it now (`EAGAIN`/`ENOBUFS`): wait for writability
    /// and retry.
    pub fn send(&self, frame: &[u8]) -> Result<bool> {
        // SAFETY: the pointer and length describe the readable slice `frame`; the socket is
        // bound, so no destination address is needed.
        let rc = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if rc >= 0 {
            return Ok(true);
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::ENOBUFS) => Ok(false),
            Some(libc::EMSGSIZE) => Err(Error::FrameTooLong {
                len: frame.len(),
                max: 0,
            }),
            _ => Err(Error::from_io("send(AF_PACKET)", err)),
        }
    }

    /// Sends several whole Ethernet frames with one `sendmmsg(2)`: up to [`SEND_BATCH_MAX`] of
    /// them, with headers on the stack (nothing allocated). Returns how many the kernel took
    /// (fewer than `frames.len()` if the socket filled up: wait and send the rest).
    pub fn send_batch(&self, frames: &[&[u8]]) -> Result<usize> {
        let frames = &frames[..frames.len().min(SEND_BATCH_MAX)];
        if frames.is_empty() {
            return Ok(0);
        }
        // SAFETY: `iovec` and `mmsghdr` are plain old data; all-zero is a valid value of each
        // (null pointers, zero lengths).
        let (mut iovs, mut msgs) = unsafe {
            (
                [std::mem::zeroed::<libc::iovec>(); SEND_BATCH_MAX],
                [std::mem::zeroed::<libc::mmsghdr>(); SEND_BATCH_MAX],
            )
        };
        for ((f, iov), msg) in frames.iter().zip(&mut iovs).zip(&mut msgs) {
            iov.iov_base = f.as_ptr().cast_mut().cast();
            iov.iov_len = f.len();
            msg.msg_hdr.msg_iov = iov;
            msg.msg_hdr.msg_iovlen = 1;
        }
        let msgs = &mut msgs[..frames.len()];
        // SAFETY: `msgs` holds `msgs.len()` initialised headers, each pointing to one iovec of
        // `iovs`, which point into the caller's frames; all outlive the call. The kernel only
        // reads the frames and writes `msg_len`.
        let rc = unsafe {
            libc::sendmmsg(
                self.fd.as_raw_fd(),
                msgs.as_mut_ptr(),
                msgs.len() as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        };
        if rc >= 0 {
            return Ok(rc as usize);
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::ENOBUFS) => Ok(0),
            _ => Err(Error::from_io("sendmmsg(AF_PACKET)", err)),
        }
    }

    /// Receives up to [`RecvBatch::capacity`] whole Ethernet frames with one `recvmmsg(2)`;
    /// returns how many ([`RecvBatch::frame`] gives each). `wait: None` takes only what is
    /// queued; `Some(t)` waits for the first frame in the kernel's receive for up to `t`
    /// (rounded down to a millisecond, at least one; 0 frames if none came) and then takes
    /// what else is queued without waiting (`MSG_WAITFORONE`).
    ///
    /// Why wait in the receive rather than `ppoll` and then receive: a thread asleep in the
    /// receive itself is woken straight into its frames, in one system call, with no poll table
    /// set up and torn down per wait (the timer is not the cost: a `ppoll` without a timeout
    /// measured as one with). On the 8-host test-bed
    /// (2 cores) a raw fan-out whose receivers block in `recv` took about 0.75x the time of the
    /// same program whose receivers `ppoll` first. A first wait takes the descriptor out of
    /// nonblocking mode for good: every other call on it passes `MSG_DONTWAIT` itself.
    pub fn recv_batch(
        &self,
        batch: &mut RecvBatch,
        wait: Option<std::time::Duration>,
    ) -> Result<usize> {
        let flags = match wait {
            None => libc::MSG_DONTWAIT,
            Some(t) => {
                self.set_recv_timeout(t)?;
                libc::MSG_WAITFORONE
            }
        };
        let n = batch.prepare();
        // SAFETY: `prepare` pointed each of the `n` headers at its own iovec and address, and
        // each iovec at its own `stride` bytes of `batch.data`, all owned by `batch`, which is
        // borrowed mutably for the call; the kernel writes at most `stride` bytes per frame
        // (MSG_TRUNC only changes the length it reports), the addresses and `msg_len`. A null
        // timeout: the receive timeout of the socket applies.
        let rc = unsafe {
            libc::recvmmsg(
                self.fd.as_raw_fd(),
                batch.hdrs.as_mut_ptr(),
                n as libc::c_uint,
                flags | libc::MSG_TRUNC,
                std::ptr::null_mut(),
            )
        };
        if rc >= 0 {
            batch.got = rc as usize;
            return Ok(batch.got);
        }
        batch.got = 0;
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(0),
            _ => Err(Error::from_io("recvmmsg(AF_PACKET)", err)),
        }
    }

    /// Sets the receive timeout of a waiting [`PacketSocket::recv_batch`] (kept while unchanged).
    fn set_recv_timeout(&self, t: std::time::Duration) -> Result<()> {
        let ms = t.as_millis().clamp(1, i32::MAX as u128) as u64;
        if self.rcvtimeo_ms.get() == ms {
            return Ok(());
        }
        self.set_blocking()?;
        let tv = libc::timeval {
            tv_sec: (ms / 1000) as libc::time_t,
            tv_usec: ((ms % 1000) * 1000) as libc::suseconds_t,
        };
        sockcall::setsockopt(self.fd.as_fd(), libc::SOL_SOCKET, libc::SO_RCVTIMEO, &tv)
            .map_err(|e| Error::from_io("SO_RCVTIMEO", e))?;
        self.rcvtimeo_ms.set(ms);
        Ok(())
    }

    /// Clears `O_NONBLOCK` (once).
    fn set_blocking(&self) -> Result<()> {
        if self.rcvtimeo_ms.get() != 0 {
            return Ok(());
        }
        use nix::fcntl::{fcntl, FcntlArg, OFlag};
        let flags = fcntl(self.fd.as_raw_fd(), FcntlArg::F_GETFL)
            .map_err(|e| Error::from_errno("fcntl(F_GETFL)", e as i32))?;
        let flags = OFlag::from_bits_retain(flags) & !OFlag::O_NONBLOCK;
        fcntl(self.fd.as_raw_fd(), FcntlArg::F_SETFL(flags))
            .map_err(|e| Error::from_errno("fcntl(F_SETFL)", e as i32))?;
        Ok(())
    }

    /// Receives one whole Ethernet frame into `buf` without waiting. `Ok(None)`: nothing is
    /// ready. If [`RecvInfo::len`] exceeds `buf.len()` the frame was truncated.
    pub fn recv(&self, buf: &mut [u8]) -> Result<Option<RecvInfo>> {
        // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let mut alen = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        // SAFETY: `buf` is writable for `buf.len()` bytes, `addr`/`alen` describe a writable
        // sockaddr_ll; MSG_TRUNC makes the kernel return the full length but never write more
        // than `buf.len()` bytes.
        let rc = unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                (&mut addr as *mut libc::sockaddr_ll).cast(),
                &mut alen,
            )
        };
        if rc >= 0 {
            return Ok(Some(RecvInfo {
                len: rc as usize,
                pkttype: addr.sll_pkttype,
            }));
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(None),
            _ => Err(Error::from_io("recvfrom(AF_PACKET)", err)),
        }
    }

    /// Reads (and resets) the kernel's counters of this socket.
    pub fn stats(&self) -> Result<Stats> {
        let st: libc::tpacket_stats =
            sockcall::getsockopt(self.fd.as_fd(), libc::SOL_PACKET, libc::PACKET_STATISTICS)
                .map_err(|e| Error::from_io("PACKET_STATISTICS", e))?;
        Ok(Stats {
            packets: st.tp_packets,
            drops: st.tp_drops,
        })
    }

    /// Sets an integer socket option.
    fn setsockopt_int(
        &self,
        level: libc::c_int,
        name: libc::c_int,
        value: libc::c_int,
        op: &'static str,
    ) -> Result<()> {
        sockcall::setsockopt(self.fd.as_fd(), level, name, &value)
            .map_err(|e| Error::from_io(op, e))
    }
}

/// Buffers for [`PacketSocket::recv_batch`]: room for `capacity` frames of up to `frame_len`
/// bytes each, and the headers `recvmmsg(2)` fills.
pub struct RecvBatch {
    /// Bytes per frame's buffer: `frame_len` and one more, so that a frame that fills its
    /// buffer is known to be truncated.
    stride: usize,
    data: Vec<u8>,
    iovs: Vec<libc::iovec>,
    addrs: Vec<libc::sockaddr_ll>,
    hdrs: Vec<libc::mmsghdr>,
    got: usize,
}

// SAFETY: the raw pointers in `iovs` and `hdrs` point only into the batch's own `data`, `iovs`
// and `addrs` (heap buffers that move with it), and are rewritten before every use
// (`RecvBatch::prepare`); nothing else refers to them.
unsafe impl Send for RecvBatch {}

impl std::fmt::Debug for RecvBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvBatch")
            .field("capacity", &self.hdrs.len())
            .field("frame_len", &(self.stride - 1))
            .field("got", &self.got)
            .finish()
    }
}

impl RecvBatch {
    /// Room for `capacity` frames (at least one) of up to `frame_len` bytes.
    pub fn new(capacity: usize, frame_len: usize) -> RecvBatch {
        let capacity = capacity.max(1);
        let stride = frame_len + 1;
        // SAFETY: `sockaddr_ll`, `iovec`, `msghdr` and `mmsghdr` are plain old data; all-zero
        // is a valid value of each (null pointers, zero lengths).
        let (addr, iov, hdr) = unsafe {
            (
                std::mem::zeroed::<libc::sockaddr_ll>(),
                std::mem::zeroed::<libc::iovec>(),
                std::mem::zeroed::<libc::mmsghdr>(),
            )
        };
        RecvBatch {
            stride,
            data: vec![0; capacity * stride],
            iovs: vec![iov; capacity],
            addrs: vec![addr; capacity],
            hdrs: vec![hdr; capacity],
            got: 0,
        }
    }

    /// Most frames one call receives.
    pub fn capacity(&self) -> usize {
        self.hdrs.len()
    }

    /// The longest frame received whole.
    pub fn frame_len(&self) -> usize {
        self.stride - 1
    }

    /// Frame `i` of the last call (`i` below what it returned): what the kernel said of it,
    /// and its bytes (no more than the buffer holds: [`RecvInfo::len`] larger than
    /// `frame_len` means it was truncated).
    pub fn frame(&self, i: usize) -> (RecvInfo, &[u8]) {
        assert!(i < self.got, "frame {i} of {} received", self.got);
        let len = self.hdrs[i].msg_len as usize;
        let info = RecvInfo {
            len,
            pkttype: self.addrs[i].sll_pkttype,
        };
        let at = i * self.stride;
        (info, &self.data[at..at + len.min(self.stride)])
    }

    /// Points every header at its buffer and address; returns how many there are.
    fn prepare(&mut self) -> usize {
        let base = self.data.as_mut_ptr();
        for i in 0..self.hdrs.len() {
            self.iovs[i] = libc::iovec {
                // In bounds: `data` holds `capacity * stride` bytes.
                iov_base: base.wrapping_add(i * self.stride).cast(),
                iov_len: self.stride,
            };
            let h = &mut self.hdrs[i].msg_hdr;
            h.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_ll).cast();
            h.msg_namelen = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            h.msg_iov = &mut self.iovs[i];
            h.msg_iovlen = 1;
            h.msg_control = std::ptr::null_mut();
            h.msg_controllen = 0;
            h.msg_flags = 0;
            self.hdrs[i].msg_len = 0;
        }
        self.got = 0;
        self.hdrs.len()
    }
}

impl AsFd for PacketSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Joins (`join`) or leaves the link-layer multicast group `mac` on interface `ifindex` for
/// the packet socket `fd` (which need not be a [`PacketSocket`]: pnet owns its own).
pub fn set_membership(fd: BorrowedFd<'_>, ifindex: u32, mac: &[u8; 6], join: bool) -> Result<()> {
    let (name, op) = if join {
        (libc::PACKET_ADD_MEMBERSHIP, "PACKET_ADD_MEMBERSHIP")
    } else {
        (libc::PACKET_DROP_MEMBERSHIP, "PACKET_DROP_MEMBERSHIP")
    };
    let mut address = [0u8; 8];
    address[..6].copy_from_slice(mac);
    let mreq = libc::packet_mreq {
        mr_ifindex: ifindex as libc::c_int,
        mr_type: libc::PACKET_MR_MULTICAST as libc::c_ushort,
        mr_alen: 6,
        mr_address: address,
    };
    sockcall::setsockopt(fd, libc::SOL_PACKET, name, &mreq).map_err(|e| Error::from_io(op, e))
}

/// A `sockaddr_ll` for interface `ifindex` and EtherType `ethertype`.
fn sockaddr_ll(ifindex: u32, ethertype: u16) -> libc::sockaddr_ll {
    // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
    let mut a: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    a.sll_family = libc::AF_PACKET as u16;
    a.sll_protocol = ethertype.to_be();
    a.sll_ifindex = ifindex as i32;
    a
}

/// Writes an Ethernet II header (destination, source, EtherType) into `buf[..14]`.
pub fn write_eth_header(buf: &mut [u8], dst: &[u8; 6], src: &[u8; 6], ethertype: u16) {
    buf[0..6].copy_from_slice(dst);
    buf[6..12].copy_from_slice(src);
    buf[12..14].copy_from_slice(&ethertype.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receive_batch_has_room_for_its_frames_and_hands_out_only_what_came() {
        let b = RecvBatch::new(4, 1514);
        assert_eq!(b.capacity(), 4);
        assert_eq!(b.frame_len(), 1514);
        assert_eq!(RecvBatch::new(0, 60).capacity(), 1);
        let r = std::panic::catch_unwind(|| b.frame(0).0.len);
        assert!(r.is_err(), "a frame of an empty batch");
    }
}
