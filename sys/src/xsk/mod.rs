//! AF_XDP sockets: frames between the driver and us through shared memory, past the kernel's
//! network stack (no socket buffers, no packet taps, no qdisc on the way in).
//!
//! An AF_XDP socket owns a UMEM (its frame memory) and four rings:
//! - *fill*: we give the kernel empty frames to receive into;
//! - *RX*: the kernel hands back received frames (address and length);
//! - *TX*: we hand the kernel frames to send;
//! - *completion*: the kernel hands back frames it has sent.
//!
//! The UMEM is split once: the first `rx_frames` chunks circulate between fill and RX, the
//! rest between TX and completion (kept on a free list while ours), so the two directions never
//! compete for memory and a burst of sends cannot starve reception.
//!
//! Frames reach the socket only through an XDP program that redirects them into it (see
//! [`crate::bpf`]), bound to one RX queue of one interface. Binding asks for zero-copy first
//! when [`ZeroCopy::Auto`] (the NIC's DMA goes straight into the UMEM); drivers without it
//! (veth, most virtual NICs) refuse with `EOPNOTSUPP`, and the socket falls back to copy mode,
//! in which the kernel copies each frame between its own buffer and the UMEM. What was granted
//! is read back with `XDP_OPTIONS`, never assumed.
//!
//! Sending: in copy mode every `sendto` kick makes the kernel take TX descriptors and transmit
//! them in the caller's context (at most 32 per call, so [`XdpSocket::tx_flush`] kicks until
//! the ring is drained or the device pushes back); in zero-copy mode a kick is needed only
//! when the kernel sets `XDP_RING_NEED_WAKEUP`.

pub mod ring;
mod umem;

use crate::bpf::XskMap;
use crate::sockcall::{self, Pod};
use crate::{Error, Result};
use ring::{Desc, Ring};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::{null, null_mut};
use umem::Umem;

/// Room the kernel keeps in front of a received frame in copy mode (`XDP_PACKET_HEADROOM`).
pub const RX_HEADROOM: usize = 256;

/// How long [`XdpSocket::open`] waits for a queue whose previous socket is being released.
pub const QUEUE_RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether to use zero-copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ZeroCopy {
    /// Zero-copy where the driver offers it, copy mode otherwise.
    #[default]
    Auto,
    /// Copy mode only.
    Off,
    /// Zero-copy or fail.
    Require,
}

/// Geometry of a socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XskConfig {
    /// Frames for reception (fill and RX ring size): a power of two.
    pub rx_frames: u32,
    /// Frames for sending (TX and completion ring size): a power of two.
    pub tx_frames: u32,
    /// Bytes per UMEM frame: 2048 or 4096.
    pub frame_size: u32,
    /// Zero-copy policy.
    pub zero_copy: ZeroCopy,
}

impl Default for XskConfig {
    fn default() -> Self {
        XskConfig {
            rx_frames: 1024,
            tx_frames: 256,
            frame_size: 2048,
            zero_copy: ZeroCopy::Auto,
        }
    }
}

impl XskConfig {
    /// Checks the geometry before asking the kernel.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::XskConfig(m));
        for (what, n) in [("RX", self.rx_frames), ("TX", self.tx_frames)] {
            if !n.is_power_of_two() || !(16..=1 << 16).contains(&n) {
                return bad(format!(
                    "{what} frames must be a power of two between 16 and 65536, not {n}"
                ));
            }
        }
        if !matches!(self.frame_size, 2048 | 4096) {
            return bad(format!(
                "frame size must be 2048 or 4096, not {}",
                self.frame_size
            ));
        }
        Ok(())
    }

    /// Largest Ethernet frame (header included) one UMEM frame holds after the kernel's
    /// receive headroom.
    pub fn max_frame(&self) -> usize {
        self.frame_size as usize - RX_HEADROOM
    }
}

/// Counters of the kernel for one socket (`XDP_STATISTICS`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XskStats {
    /// Frames dropped for reasons other than a full ring.
    pub rx_dropped: u64,
    /// Frames dropped because the RX ring was full.
    pub rx_ring_full: u64,
    /// Times the kernel found the fill ring empty.
    pub rx_fill_ring_empty: u64,
    /// Invalid descriptors on RX.
    pub rx_invalid_descs: u64,
    /// Invalid descriptors on TX.
    pub tx_invalid_descs: u64,
}

/// Which way [`XdpSocket::wake_up`] nudges the kernel.
#[derive(Debug, Clone, Copy)]
enum Wakeup {
    /// Receive: look at the fill ring again.
    Rx,
    /// Send: take frames from the TX ring.
    Tx,
}

/// An AF_XDP socket bound to one queue of one interface, with its UMEM and rings.
#[derive(Debug)]
pub struct XdpSocket {
    // Field order: the rings are unmapped, then the socket is closed, then the UMEM unmapped.
    rx: Ring<Desc>,
    tx: Ring<Desc>,
    fill: Ring<u64>,
    comp: Ring<u64>,
    fd: OwnedFd,
    umem: Umem,
    /// TX chunks that are ours (not in the TX ring, not awaiting completion).
    tx_free: Chunks,
    tx_frames: u32,
    zero_copy: bool,
    /// Chunks taken from the RX ring, to be put back into the fill ring.
    refill: Chunks,
}

/// Addresses of UMEM chunks that are ours. Its `Debug` gives only their number: a socket
/// holds up to 65536 of them.
struct Chunks(Vec<u64>);

impl std::fmt::Debug for Chunks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} chunks", self.0.len())
    }
}

impl std::ops::Deref for Chunks {
    type Target = Vec<u64>;

    fn deref(&self) -> &Vec<u64> {
        &self.0
    }
}

impl std::ops::DerefMut for Chunks {
    fn deref_mut(&mut self) -> &mut Vec<u64> {
        &mut self.0
    }
}

impl XdpSocket {
    /// Creates a socket with a UMEM and rings of geometry `cfg`, binds it to queue `queue` of
    /// interface `ifindex` (zero-copy as `cfg` says) and puts it into `map` at `queue`.
    ///
    /// A queue whose previous socket was closed moments ago stays taken until the kernel has
    /// released that socket's memory (deferred work, usually within milliseconds), so `EBUSY`
    /// is retried for up to [`QUEUE_RELEASE_WAIT`] before it becomes
    /// [`Error::XskQueueBusy`].
    pub fn open(ifindex: u32, queue: u32, cfg: &XskConfig, map: &XskMap) -> Result<Self> {
        cfg.validate()?;
        let deadline = std::time::Instant::now() + QUEUE_RELEASE_WAIT;
        let sock = loop {
            match Self::open_policy(ifindex, queue, cfg) {
                Err(Error::XskQueueBusy { .. }) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
                other => break other?,
            }
        };
        map.set(queue, sock.fd.as_fd())?;
        Ok(sock)
    }

    fn open_policy(ifindex: u32, queue: u32, cfg: &XskConfig) -> Result<Self> {
        Ok(match cfg.zero_copy {
            ZeroCopy::Off => Self::open_mode(ifindex, queue, cfg, false)?,
            ZeroCopy::Require => Self::open_mode(ifindex, queue, cfg, true)?,
            ZeroCopy::Auto => match Self::open_mode(ifindex, queue, cfg, true) {
                Ok(s) => s,
                Err(Error::ZeroCopyUnsupported { .. }) => {
                    Self::open_mode(ifindex, queue, cfg, false)?
                }
                Err(e) => return Err(e),
            },
        })
    }

    fn open_mode(ifindex: u32, queue: u32, cfg: &XskConfig, zc: bool) -> Result<Self> {
        // SAFETY: socket(2) with constant arguments; the result is checked below.
        let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            let err = std::io::Error::last_os_error();
            return Err(match err.raw_os_error() {
                Some(libc::EAFNOSUPPORT) => Error::XskUnsupported,
                Some(libc::EPERM) | Some(libc::EACCES) => Error::BpfPermission {
                    op: "socket(AF_XDP)",
                },
                _ => Error::xsk("socket(AF_XDP)", err),
            });
        }
        // SAFETY: `raw` is a socket the kernel just created for us; nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let frames = cfg.rx_frames + cfg.tx_frames;
        let umem = Umem::new(frames, cfg.frame_size)?;
        let reg = libc::xdp_umem_reg {
            addr: umem.addr(),
            len: umem.len() as u64,
            chunk_size: cfg.frame_size,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        set_option(fd.as_fd(), libc::XDP_UMEM_REG, &reg, "XDP_UMEM_REG")?;
        let sizes = [
            (
                libc::XDP_UMEM_FILL_RING,
                cfg.rx_frames,
                "XDP_UMEM_FILL_RING",
            ),
            (
                libc::XDP_UMEM_COMPLETION_RING,
                cfg.tx_frames,
                "XDP_UMEM_COMPLETION_RING",
            ),
            (libc::XDP_RX_RING, cfg.rx_frames, "XDP_RX_RING"),
            (libc::XDP_TX_RING, cfg.tx_frames, "XDP_TX_RING"),
        ];
        for (opt, n, what) in sizes {
            set_option(fd.as_fd(), opt, &(n as libc::c_int), what)?;
        }
        let off: libc::xdp_mmap_offsets =
            get_option(fd.as_fd(), libc::XDP_MMAP_OFFSETS, "XDP_MMAP_OFFSETS")?;
        let fd_b = fd.as_fd();
        let rx = Ring::map(
            fd_b,
            libc::XDP_PGOFF_RX_RING as u64,
            &off.rx,
            cfg.rx_frames,
            "mmap of the RX ring",
        )?;
        let tx = Ring::map(
            fd_b,
            libc::XDP_PGOFF_TX_RING as u32 as u64,
            &off.tx,
            cfg.tx_frames,
            "mmap of the TX ring",
        )?;
        let fill = Ring::map(
            fd_b,
            libc::XDP_UMEM_PGOFF_FILL_RING,
            &off.fr,
            cfg.rx_frames,
            "mmap of the fill ring",
        )?;
        let comp = Ring::map(
            fd_b,
            libc::XDP_UMEM_PGOFF_COMPLETION_RING,
            &off.cr,
            cfg.tx_frames,
            "mmap of the completion ring",
        )?;
        let fs = u64::from(cfg.frame_size);
        let mut s = XdpSocket {
            rx,
            tx,
            fill,
            comp,
            fd,
            tx_free: Chunks(
                (cfg.rx_frames..frames)
                    .rev()
                    .map(|i| u64::from(i) * fs)
                    .collect(),
            ),
            tx_frames: cfg.tx_frames,
            zero_copy: zc,
            refill: Chunks((0..cfg.rx_frames).map(|i| u64::from(i) * fs).collect()),
            umem,
        };
        // Every RX chunk into the fill ring before binding, so the first frame finds room.
        s.refill_rx();
        let flags = if zc {
            libc::XDP_ZEROCOPY | libc::XDP_USE_NEED_WAKEUP
        } else {
            libc::XDP_COPY | libc::XDP_USE_NEED_WAKEUP
        };
        let addr = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: flags,
            sxdp_ifindex: ifindex,
            sxdp_queue_id: queue,
            sxdp_shared_umem_fd: 0,
        };
        sockcall::bind(s.fd.as_fd(), &addr, ifindex, |err| {
            match err.raw_os_error() {
                Some(libc::EOPNOTSUPP) if zc => Error::ZeroCopyUnsupported { ifindex },
                Some(libc::EINVAL) => Error::XskBind {
                    ifindex,
                    queue,
                    source: err,
                },
                Some(libc::EBUSY) => Error::XskQueueBusy { ifindex, queue },
                _ => Error::xsk("bind(AF_XDP)", err),
            }
        })?;
        s.zero_copy = s.query_zero_copy().unwrap_or(zc);
        Ok(s)
    }

    fn query_zero_copy(&self) -> Result<bool> {
        let opts: libc::xdp_options =
            get_option(self.fd.as_fd(), libc::XDP_OPTIONS, "XDP_OPTIONS")?;
        Ok(opts.flags & libc::XDP_OPTIONS_ZEROCOPY != 0)
    }

    /// Whether the kernel runs this socket in zero-copy mode.
    pub fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// Largest frame (Ethernet header included) this socket receives or sends whole.
    pub fn max_frame(&self) -> usize {
        self.umem.frame_size() as usize - RX_HEADROOM
    }

    /// Puts every chunk taken from the RX ring back into the fill ring.
    fn refill_rx(&mut self) {
        let n = self.refill.len() as u32;
        if n == 0 {
            return;
        }
        // The fill ring has a slot for every RX chunk, and only chunks we hold are in
        // `refill`, so there is always room.
        let room = self.fill.free(n).min(n);
        for (i, &addr) in self.refill.iter().take(room as usize).enumerate() {
            self.fill.write(i as u32, addr);
        }
        self.fill.submit(room);
        self.refill.drain(..room as usize);
    }

    /// Whether a received frame is waiting (a cheap check for spinning).
    pub fn rx_ready(&self) -> bool {
        self.rx.peek_ready()
    }

    /// Hands each ready frame, at most `max`, to `f` (the whole Ethernet frame), then gives
    /// the chunks back to the kernel. Returns how many frames were handed over. Never waits.
    pub fn rx_for_each(&mut self, max: usize, f: &mut dyn FnMut(&[u8])) -> Result<usize> {
        let n = self.rx.available().min(max.min(u32::MAX as usize) as u32);
        for i in 0..n {
            let d = self.rx.read(i);
            if let Some(frame) = self.umem.frame(d.addr, d.len as usize) {
                f(frame);
            }
            self.refill.push(self.umem.chunk_of(d.addr));
        }
        if n > 0 {
            self.rx.release(n);
            self.refill_rx();
            if self.fill.needs_wakeup() {
                self.wake_up(Wakeup::Rx)?;
            }
        }
        Ok(n as usize)
    }

    /// Nudges the kernel with a zero-length, non-blocking system call: for [`Wakeup::Rx`] a
    /// `recvfrom`, which makes the driver look at the fill ring again (zero-copy drivers sleep
    /// when it ran empty); for [`Wakeup::Tx`] a `sendto`, which makes the kernel send from the
    /// TX ring. `EAGAIN`, `EBUSY`, `ENOBUFS` and `EINTR` mean "not now" (no room yet, more
    /// left, interrupted) and are no error: whoever waits kicks again.
    fn wake_up(&self, side: Wakeup) -> Result<()> {
        let fd = self.fd.as_raw_fd();
        let flags = libc::MSG_DONTWAIT;
        let (rc, op) = match side {
            Wakeup::Rx => (
                // SAFETY: a zero-length recvfrom with null buffers is the documented AF_XDP
                // wake-up; the kernel reads and writes no user memory for it.
                unsafe { libc::recvfrom(fd, null_mut(), 0, flags, null_mut(), null_mut()) },
                "recvfrom(AF_XDP)",
            ),
            Wakeup::Tx => (
                // SAFETY: a zero-length sendto with a null buffer and no address is the
                // documented AF_XDP TX kick; the kernel reads the frames from the TX ring and
                // the UMEM, no other user memory.
                unsafe { libc::sendto(fd, null(), 0, flags, null(), 0) },
                "sendto(AF_XDP)",
            ),
        };
        if rc < 0 {
            let err = std::io::Error::last_os_error();
            if !matches!(
                err.raw_os_error(),
                Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS | libc::EINTR)
            ) {
                return Err(Error::from_io(op, err));
            }
        }
        Ok(())
    }

    /// Takes the chunks of sent frames back from the completion ring.
    fn reclaim_tx(&mut self) {
        let n = self.comp.available();
        for i in 0..n {
            let addr = self.comp.read(i);
            self.tx_free.push(self.umem.chunk_of(addr));
        }
        if n > 0 {
            self.comp.release(n);
        }
    }

    /// Whether a frame can be queued now (a free TX chunk and a free TX slot).
    pub fn tx_slot_free(&mut self) -> bool {
        if self.tx_free.is_empty() {
            self.reclaim_tx();
        }
        !self.tx_free.is_empty() && self.tx.free(1) > 0
    }

    /// Whether every queued frame has been sent and its chunk returned.
    pub fn tx_idle(&mut self) -> bool {
        self.reclaim_tx();
        self.tx_free.len() == self.tx_frames as usize
    }

    /// Frames queued or in flight (not yet completed).
    pub fn tx_in_flight(&mut self) -> usize {
        self.reclaim_tx();
        self.tx_frames as usize - self.tx_free.len()
    }

    /// Queues a copy of `frame` (Ethernet header included; see [`XdpSocket::tx_push_in_place`],
    /// padded like it). Returns `Ok(false)` if no chunk or TX slot is free (kick with
    /// [`XdpSocket::tx_flush`] and wait). Nothing is sent before `tx_flush`.
    pub fn tx_push(&mut self, frame: &[u8]) -> Result<bool> {
        let fill = crate::copy_fill(frame, self.max_frame())?;
        Ok(self.tx_push_in_place(fill)?.is_some())
    }

    /// Queues one frame written in place into a free TX chunk, as
    /// [`RingSocket::tx_push_in_place`](crate::ring::RingSocket::tx_push_in_place) does into a
    /// ring slot: `fill` is lent the chunk ([`XdpSocket::max_frame`] bytes, holding what an
    /// earlier frame left there), writes the frame at its start and returns its length (0:
    /// queue nothing); a frame shorter than [`ETH_MIN_FRAME`](crate::ETH_MIN_FRAME) is padded
    /// with zeros to it. Returns `Ok(None)`, without calling `fill`, if no chunk or TX slot is
    /// free, else the length queued. A length beyond the chunk or shorter than an Ethernet
    /// header is an error and queues nothing.
    pub fn tx_push_in_place(
        &mut self,
        fill: impl FnOnce(&mut [u8]) -> usize,
    ) -> Result<Option<usize>> {
        let max = self.max_frame();
        if !self.tx_slot_free() {
            return Ok(None);
        }
        let Some(addr) = self.tx_free.pop() else {
            return Ok(None);
        };
        let Some(data) = self.umem.frame_mut(addr, max) else {
            // Cannot happen: TX chunks are whole chunks inside the UMEM.
            self.tx_free.push(addr);
            return Err(Error::FrameTooLong { len: max, max });
        };
        let len = match fill(data) {
            len if (crate::ETH_HEADER_LEN..=max).contains(&len) => len,
            refused => {
                self.tx_free.push(addr);
                return match refused {
                    0 => Ok(Some(0)),
                    len if len > max => Err(Error::FrameTooLong { len, max }),
                    len => Err(Error::FrameTooShort {
                        len,
                        min: crate::ETH_HEADER_LEN,
                    }),
                };
            }
        };
        let len = if len < crate::ETH_MIN_FRAME {
            data[len..crate::ETH_MIN_FRAME].fill(0);
            crate::ETH_MIN_FRAME
        } else {
            len
        };
        self.tx.write(
            0,
            Desc {
                addr,
                len: len as u32,
                options: 0,
            },
        );
        self.tx.submit(1);
        Ok(Some(len))
    }

    /// Asks the kernel to send the queued TX frames. In copy mode the kernel sends at most 32
    /// frames per kick, so this kicks until the TX ring is drained or the device pushes back
    /// (then frames stay queued for the next kick). Returns whether the TX ring is empty.
    pub fn tx_flush(&mut self) -> Result<bool> {
        loop {
            let pending = self.tx.pending();
            if pending == 0 {
                return Ok(true);
            }
            if self.zero_copy && !self.tx.needs_wakeup() {
                return Ok(false);
            }
            // The kernel takes at most 32 frames a kick and stops early when the device has no
            // room: go again if it took something, else leave the rest for the next kick.
            self.wake_up(Wakeup::Tx)?;
            if self.tx.pending() >= pending {
                return Ok(false);
            }
        }
    }

    /// The kernel's counters for this socket.
    pub fn stats(&self) -> Result<XskStats> {
        let st: libc::xdp_statistics =
            get_option(self.fd.as_fd(), libc::XDP_STATISTICS, "XDP_STATISTICS")?;
        Ok(XskStats {
            rx_dropped: st.rx_dropped,
            rx_ring_full: st.rx_ring_full,
            rx_fill_ring_empty: st.rx_fill_ring_empty_descs,
            rx_invalid_descs: st.rx_invalid_descs,
            tx_invalid_descs: st.tx_invalid_descs,
        })
    }

    /// Number of UMEM frames (RX and TX).
    pub fn umem_frames(&self) -> u32 {
        self.umem.frames()
    }
}

impl AsFd for XdpSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Sets an `SOL_XDP` option; a refusal is classified by [`Error::xsk`].
fn set_option<T: Pod>(
    fd: BorrowedFd<'_>,
    name: libc::c_int,
    value: &T,
    op: &'static str,
) -> Result<()> {
    sockcall::setsockopt(fd, libc::SOL_XDP, name, value).map_err(|e| Error::xsk(op, e))
}

/// Reads an `SOL_XDP` option; a refusal is classified by [`Error::xsk`].
fn get_option<T: Pod>(fd: BorrowedFd<'_>, name: libc::c_int, op: &'static str) -> Result<T> {
    sockcall::getsockopt(fd, libc::SOL_XDP, name).map_err(|e| Error::xsk(op, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::size_of;

    #[test]
    fn geometries_the_kernel_would_refuse_are_refused_first() {
        assert!(XskConfig::default().validate().is_ok());
        for cfg in [
            XskConfig {
                rx_frames: 1000,
                ..Default::default()
            },
            XskConfig {
                tx_frames: 8,
                ..Default::default()
            },
            XskConfig {
                frame_size: 3000,
                ..Default::default()
            },
        ] {
            assert!(
                matches!(cfg.validate(), Err(Error::XskConfig(_))),
                "{cfg:?}"
            );
        }
        assert_eq!(XskConfig::default().max_frame(), 2048 - 256);
    }

    #[test]
    fn desc_has_the_kernel_layout() {
        assert_eq!(size_of::<Desc>(), 16);
        assert_eq!(size_of::<libc::xdp_umem_reg>(), 32);
    }
}
