//! `TPACKET_V2` memory-mapped rings: receiving and sending without a system call per frame.
//!
//! Why rings: with a plain packet socket every received frame costs a `recvfrom` (a system
//! call and a copy) and every sent frame a `send`. With `PACKET_RX_RING` the kernel writes
//! received frames straight into memory shared with us; we only make a system call (`ppoll`)
//! when the ring is empty and we want to sleep. With `PACKET_TX_RING` we write frames into
//! shared memory and one `send(fd, NULL, 0)` pushes out every queued frame.
//!
//! The protocol with the kernel, per frame slot (`struct tpacket2_hdr` at the slot's start):
//! - RX: the kernel fills a slot whose `tp_status` is `TP_STATUS_KERNEL`, then sets
//!   `TP_STATUS_USER` (after a write barrier). We read `tp_status` with *acquire* ordering, use
//!   the frame, and hand the slot back by storing `TP_STATUS_KERNEL` with *release* ordering,
//!   so that our reads happen before the kernel overwrites the slot.
//! - TX: a slot is ours when its status is `TP_STATUS_AVAILABLE` (acquire). We write the frame
//!   at `TPACKET2_HDRLEN - sizeof(sockaddr_ll)` and `tp_len`, then store
//!   `TP_STATUS_SEND_REQUEST` (release) so the kernel sees the data before the status. The
//!   kernel sets `TP_STATUS_SENDING` and, once the driver is done with the buffer,
//!   `TP_STATUS_AVAILABLE` again.
//!
//! Both sides walk the slots in order, so one index per ring ("head") is all the state we keep.
//! `TPACKET_V2` rather than `V3`: V3's block-based RX batches frames until a block fills or a
//! timer fires, which adds latency to a protocol of small, latency-bound frames; V2 hands over
//! every frame at once.

use crate::prefetch::prefetch_tail_first;
use crate::sockcall::{self, Pod};
use crate::socket::{PacketSocket, SocketOptions};
use crate::{Error, Result, ETH_HEADER_LEN, ETH_MIN_FRAME};
use memmap2::{MmapOptions, MmapRaw};
use std::mem::size_of;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicU32, Ordering};

/// Alignment of everything in a ring (`TPACKET_ALIGNMENT`).
const ALIGN: usize = libc::TPACKET_ALIGNMENT;
/// Size of the frame header plus the `sockaddr_ll` that follows it (`TPACKET2_HDRLEN`).
const HDRLEN: usize = libc::TPACKET2_HDRLEN;
/// Offset of the `sockaddr_ll` in a slot.
const SLL_OFFSET: usize = align(size_of::<libc::tpacket2_hdr>());
/// Offset of the frame data in a TX slot (without `PACKET_TX_HAS_OFF`).
const TX_DATA_OFFSET: usize = HDRLEN - size_of::<libc::sockaddr_ll>();
/// Offset of the frame data in an RX slot of a `SOCK_RAW` socket on Ethernet: the kernel puts
/// the network header at `TPACKET_ALIGN(hdrlen + 16)` and the 14-byte MAC header before it.
const RX_DATA_OFFSET: usize = align(HDRLEN + 16) - ETH_HEADER_LEN;
/// Ring memory we refuse to ask for (a typo guard, not a kernel limit).
const MAX_RING_BYTES: usize = 1 << 30;

const fn align(x: usize) -> usize {
    (x + ALIGN - 1) & !(ALIGN - 1)
}

/// `x` is a multiple of `y` (false for `y == 0`); spelled out for the 1.80 MSRV.
fn multiple_of(x: usize, y: usize) -> bool {
    x.checked_rem(y) == Some(0)
}

fn page_size() -> usize {
    // SAFETY: sysconf only reads a configuration value; it has no memory-safety preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).ok().filter(|&p| p > 0).unwrap_or(4096)
}

/// Geometry of one ring. Slots of `frame_size` bytes are packed into blocks of `block_size`
/// bytes (a frame never crosses a block).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingConfig {
    /// Bytes per block: a multiple of the page size and of `frame_size`.
    pub block_size: usize,
    /// Bytes per frame slot: a multiple of 16, large enough for the interface's frames plus
    /// the slot header (2048 holds a 1500-byte MTU frame).
    pub frame_size: usize,
    /// Number of slots: a multiple of the slots per block.
    pub frame_count: usize,
}

impl RingConfig {
    /// RX default: 1024 slots of 2048 bytes in 64 KiB blocks (2 MiB), enough for a 1500-byte
    /// MTU and for bursts of about a thousand frames while the application is busy.
    pub const RX_DEFAULT: RingConfig = RingConfig {
        block_size: 1 << 16,
        frame_size: 2048,
        frame_count: 1024,
    };
    /// TX default: 256 slots of 2048 bytes in 64 KiB blocks (512 KiB).
    pub const TX_DEFAULT: RingConfig = RingConfig {
        block_size: 1 << 16,
        frame_size: 2048,
        frame_count: 256,
    };

    /// Checks the geometry against the kernel's rules, before asking the kernel.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::RingConfig(m));
        let page = page_size();
        if self.frame_size < align(RX_DATA_OFFSET + ETH_HEADER_LEN + 64) {
            return bad(format!(
                "frame size {} is too small (at least {})",
                self.frame_size,
                align(RX_DATA_OFFSET + ETH_HEADER_LEN + 64)
            ));
        }
        if !multiple_of(self.frame_size, ALIGN) {
            return bad(format!(
                "frame size {} is not a multiple of {ALIGN}",
                self.frame_size
            ));
        }
        if self.block_size == 0 || !multiple_of(self.block_size, page) {
            return bad(format!(
                "block size {} is not a multiple of the page size {page}",
                self.block_size
            ));
        }
        if !multiple_of(self.block_size, self.frame_size) {
            return bad(format!(
                "block size {} is not a multiple of the frame size {}",
                self.block_size, self.frame_size
            ));
        }
        let per_block = self.block_size / self.frame_size;
        if self.frame_count == 0 || !multiple_of(self.frame_count, per_block) {
            return bad(format!(
                "frame count {} is not a positive multiple of the {per_block} frames per block",
                self.frame_count
            ));
        }
        match self.frame_count.checked_mul(self.frame_size) {
            Some(total) if total <= MAX_RING_BYTES => Ok(()),
            _ => bad(format!(
                "{} frames of {} bytes exceed the {} MiB limit",
                self.frame_count,
                self.frame_size,
                MAX_RING_BYTES >> 20
            )),
        }
    }

    /// Largest Ethernet frame (header included) an RX slot holds whole.
    pub fn rx_frame_capacity(&self) -> usize {
        self.frame_size.saturating_sub(RX_DATA_OFFSET)
    }

    /// Largest Ethernet frame (header included) a TX slot holds.
    pub fn tx_frame_capacity(&self) -> usize {
        self.frame_size.saturating_sub(TX_DATA_OFFSET)
    }

    fn bytes(&self) -> usize {
        self.frame_count * self.frame_size
    }

    fn req(&self) -> libc::tpacket_req {
        libc::tpacket_req {
            tp_block_size: self.block_size as u32,
            tp_block_nr: (self.bytes() / self.block_size) as u32,
            tp_frame_size: self.frame_size as u32,
            tp_frame_nr: self.frame_count as u32,
        }
    }
}

impl Default for RingConfig {
    fn default() -> Self {
        Self::RX_DEFAULT
    }
}

/// One received frame, valid while the callback of [`RingSocket::rx_for_each`] runs.
#[derive(Debug)]
pub struct RxFrame<'a> {
    /// The Ethernet frame, header included (only the first `snaplen` bytes if truncated).
    pub data: &'a [u8],
    /// Length of the frame on the wire.
    pub wire_len: usize,
    /// `PACKET_HOST`, `PACKET_BROADCAST`, `PACKET_OTHERHOST`, ... (see `sockaddr_ll`).
    pub pkttype: u8,
    /// The slot's `tp_status` bits (`TP_STATUS_LOSING`, `TP_STATUS_VLAN_VALID`, ...).
    pub status: u32,
}

impl RxFrame<'_> {
    /// Whether the slot was too small for the frame (only `data.len()` bytes were kept).
    pub fn truncated(&self) -> bool {
        self.data.len() < self.wire_len
    }

    /// Whether the kernel dropped frames (ring full) since the last frame it delivered.
    pub fn losing(&self) -> bool {
        self.status & libc::TP_STATUS_LOSING != 0
    }

    /// Whether the frame was addressed to someone else or is our own outgoing frame.
    pub fn is_other_host(&self) -> bool {
        self.pkttype == libc::PACKET_OTHERHOST || self.pkttype == libc::PACKET_OUTGOING
    }
}

/// Position and walking state of one ring inside the mapping.
#[derive(Debug, Clone, Copy)]
struct Ring {
    offset: usize,
    frame_size: usize,
    frame_count: usize,
    head: usize,
}

impl Ring {
    fn slot_offset(&self, idx: usize) -> usize {
        self.offset + idx * self.frame_size
    }

    /// The slot after `idx`, round the ring. Without a division: this runs two or three times
    /// per received frame, and a division by a count the compiler cannot see costs 3 ns here.
    fn after(&self, idx: usize) -> usize {
        let next = idx + 1;
        if next == self.frame_count {
            0
        } else {
            next
        }
    }

    fn advance(&mut self) {
        self.head = self.after(self.head);
    }
}

/// What [`RingSocket::rx_for_each_held`] calls at the end of a batch: with the slots held
/// (retained ones and the batch's), and those of them given back once it returns.
type BatchEnd<'a> = &'a mut dyn FnMut(&RxHeld<'_>, &RxHeld<'_>);

/// Received frames the socket holds (slots not given back to the kernel), found by where
/// their bytes lie: valid while the call they are lent to runs (see
/// [`RingSocket::rx_for_each_held`]).
#[derive(Debug, Clone, Copy)]
pub struct RxHeld<'a> {
    map: &'a MmapRaw,
    rx: Ring,
    /// The first slot, and how many follow it round the ring.
    from: usize,
    count: usize,
}

impl<'a> RxHeld<'a> {
    /// How many slots.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The `len` bytes at address `at`, if they lie inside one of these slots, past its
    /// header (where `rx_for_each`'s callback saw its frame). The slot's header is not read:
    /// it is one more cache line to fetch per frame, and what the bytes are is for the
    /// caller, who noted where they were, to know.
    pub fn find(&self, at: usize, len: usize) -> Option<&'a [u8]> {
        let base = self.map.as_ptr() as usize;
        let off = at.checked_sub(base + self.rx.offset)?;
        // One division (this runs for every frame written out), none for the wrap.
        let idx = off / self.rx.frame_size;
        if idx >= self.rx.frame_count {
            return None;
        }
        let past_from = if idx >= self.from {
            idx - self.from
        } else {
            idx + self.rx.frame_count - self.from
        };
        if past_from >= self.count {
            return None;
        }
        let start = off - idx * self.rx.frame_size;
        if start < HDRLEN || start.checked_add(len)? > self.rx.frame_size {
            return None;
        }
        // SAFETY: [at, at+len) lies inside slot `idx`, past its header (checked above): a slot
        // the kernel handed to us (status USER) and does not write until the socket gives it
        // back, which it does not while `'a` lasts (see `rx_for_each_held`, `retained`).
        Some(unsafe {
            std::slice::from_raw_parts(self.map.as_ptr().add(self.rx.offset + off), len)
        })
    }
}

/// A packet socket with a mapped `TPACKET_V2` RX ring and optionally a TX ring.
#[derive(Debug)]
pub struct RingSocket {
    // Field order: the mapping is dropped (unmapped) before the socket is closed.
    map: MmapRaw,
    sock: PacketSocket,
    rx: Ring,
    tx: Option<Ring>,
    rx_cfg: RingConfig,
    tx_cfg: Option<RingConfig>,
    /// Slots `rx_for_each_held` keeps after a batch (see `retain`).
    retain: usize,
    /// Slots kept from earlier batches: the first, and how many (they end at `rx.head`).
    kept_from: usize,
    kept: usize,
}

impl RingSocket {
    /// Opens a packet socket for `ethertype` frames on interface `ifindex` with an RX ring of
    /// geometry `rx` and, if `tx` is given, a TX ring. The socket is bound only after the rings
    /// exist, so every received frame goes through the ring.
    pub fn open(
        ifindex: u32,
        ethertype: u16,
        opts: &SocketOptions,
        rx: &RingConfig,
        tx: Option<&RingConfig>,
    ) -> Result<Self> {
        rx.validate()?;
        if let Some(tx) = tx {
            tx.validate()?;
        }
        let mut sock = PacketSocket::new(opts)?;
        let version = libc::tpacket_versions::TPACKET_V2 as libc::c_int;
        set_option(&sock, libc::PACKET_VERSION, &version, "PACKET_VERSION")?;
        set_option(&sock, libc::PACKET_RX_RING, &rx.req(), "PACKET_RX_RING")?;
        if let Some(tx) = tx {
            set_option(&sock, libc::PACKET_TX_RING, &tx.req(), "PACKET_TX_RING")?;
        }
        let total = rx.bytes() + tx.map_or(0, |t| t.bytes());
        // Mapping a packet socket that has rings maps exactly those rings (RX first, then TX);
        // `total` is their combined size as configured above. The memory is shared with the
        // kernel, so we never form references to it except to frame data the ring protocol has
        // handed to us (see rx_for_each / tx_push_in_place); status words are only accessed
        // atomically. (`map_raw` hands out a raw mapping, so it is not `unsafe` itself.)
        let map = MmapOptions::new()
            .len(total)
            .map_raw(&sock.as_fd())
            .map_err(|e| Error::ring("mmap of the packet ring", e))?;
        sock.bind(ifindex, ethertype)?;
        Ok(RingSocket {
            map,
            sock,
            rx: Ring {
                offset: 0,
                frame_size: rx.frame_size,
                frame_count: rx.frame_count,
                head: 0,
            },
            tx: tx.map(|t| Ring {
                offset: rx.bytes(),
                frame_size: t.frame_size,
                frame_count: t.frame_count,
                head: 0,
            }),
            rx_cfg: *rx,
            tx_cfg: tx.copied(),
            retain: 0,
            kept_from: 0,
            kept: 0,
        })
    }

    /// The underlying socket (for its fd, options and statistics).
    pub fn socket(&self) -> &PacketSocket {
        &self.sock
    }

    /// The RX ring's geometry.
    pub fn rx_config(&self) -> &RingConfig {
        &self.rx_cfg
    }

    /// The TX ring's geometry, if there is a TX ring.
    pub fn tx_config(&self) -> Option<&RingConfig> {
        self.tx_cfg.as_ref()
    }

    /// The status word of the slot at byte `offset` of the mapping.
    fn status(&self, offset: usize) -> &AtomicU32 {
        debug_assert!(offset + HDRLEN <= self.map.len() && multiple_of(offset, ALIGN));
        // SAFETY: `offset` is the start of a slot inside the mapping (slots are laid out by
        // `Ring::slot_offset` within the configured sizes), so the pointer is in bounds and
        // 16-byte aligned; `tp_status` is the first u32 of the slot header. The kernel and we
        // access this word concurrently, which is why it is only touched as an atomic. The
        // reference lives no longer than `&self`, and the mapping lives as long as `self`.
        unsafe { AtomicU32::from_ptr(self.map.as_mut_ptr().add(offset).cast::<u32>()) }
    }

    /// Whether the next RX slot holds a frame (a cheap check for spinning).
    pub fn rx_ready(&self) -> bool {
        self.status(self.rx.slot_offset(self.rx.head))
            .load(Ordering::Acquire)
            & libc::TP_STATUS_USER
            != 0
    }

    /// Hands each ready frame, at most `max`, to `f`, returning each slot to the kernel right
    /// after `f` returns. Returns how many frames were handed over. Never waits.
    pub fn rx_for_each(&mut self, max: usize, f: &mut dyn FnMut(&RxFrame<'_>)) -> usize {
        self.rx_batch(max, f, None)
    }

    /// As [`RingSocket::rx_for_each`], but the slots are returned to the kernel only after
    /// the whole batch: once every frame went to `f`, `done` is called with the slots held
    /// (this batch's, and those retained from earlier ones: see [`RingSocket::retain`]) and
    /// those of them given back when it returns (the oldest, beyond what is retained). What
    /// `f` noted about where its frames lie can be used there: a receiver writes the frames'
    /// payloads out of the ring without copying them first. Holding a batch takes up to `max`
    /// slots from the kernel for the time `done` takes, retaining takes more for longer:
    /// frames that come meanwhile find that much less room. `done` is called for an empty
    /// batch too.
    pub fn rx_for_each_held(
        &mut self,
        max: usize,
        f: &mut dyn FnMut(&RxFrame<'_>),
        done: &mut dyn FnMut(&RxHeld<'_>, &RxHeld<'_>),
    ) -> usize {
        self.rx_batch(max, f, Some(done))
    }

    /// Keeps up to `slots` slots (at most half the ring) after each batch of
    /// [`RingSocket::rx_for_each_held`], the newest, so that what was noted about their frames
    /// can be used in later batches: a receiver reads frames that came behind a gap when the
    /// gap is filled, where they are, instead of copying them. Returns how many it keeps.
    /// [`RingSocket::rx_for_each`] gives back what is kept first.
    pub fn retain(&mut self, slots: usize) -> usize {
        self.retain = slots.min(self.rx.frame_count / 2);
        self.retain
    }

    /// The slots kept from earlier batches (see [`RingSocket::retain`]), while `self` is
    /// borrowed.
    pub fn retained(&self) -> RxHeld<'_> {
        self.held(self.kept)
    }

    /// The `count` slots held from `kept_from` on.
    fn held(&self, count: usize) -> RxHeld<'_> {
        RxHeld {
            map: &self.map,
            rx: self.rx,
            from: self.kept_from,
            count,
        }
    }

    /// Gives `count` slots back from `kept_from` on.
    fn give_back(&mut self, count: usize) {
        let mut idx = self.kept_from;
        for _ in 0..count {
            self.status(self.rx.slot_offset(idx))
                .store(libc::TP_STATUS_KERNEL, Ordering::Release);
            idx = self.rx.after(idx);
        }
        self.kept_from = idx;
    }

    fn rx_batch(
        &mut self,
        max: usize,
        f: &mut dyn FnMut(&RxFrame<'_>),
        mut done: Option<BatchEnd<'_>>,
    ) -> usize {
        let mut n = 0;
        if done.is_none() && self.kept > 0 {
            self.give_back(self.kept);
            self.kept = 0;
        }
        if self.kept == 0 {
            self.kept_from = self.rx.head;
        }
        let mut taken = 0;
        while taken < max {
            let off = self.rx.slot_offset(self.rx.head);
            let status = self.status(off).load(Ordering::Acquire);
            if status & libc::TP_STATUS_USER == 0 {
                break;
            }
            taken += 1;
            // SAFETY: the acquire load saw TP_STATUS_USER: the kernel has finished writing this
            // slot (it publishes the status after a write barrier) and will not touch it until
            // we store TP_STATUS_KERNEL below. The slot starts at `off`, in bounds and aligned
            // for tpacket2_hdr; read_unaligned would not be needed but costs nothing.
            let hdr: libc::tpacket2_hdr = unsafe {
                std::ptr::read_unaligned(self.map.as_ptr().add(off).cast::<libc::tpacket2_hdr>())
            };
            // SAFETY: as above; the sockaddr_ll follows the aligned header inside the slot.
            let sll: libc::sockaddr_ll = unsafe {
                std::ptr::read_unaligned(
                    self.map
                        .as_ptr()
                        .add(off + SLL_OFFSET)
                        .cast::<libc::sockaddr_ll>(),
                )
            };
            let mac = usize::from(hdr.tp_mac);
            let snap = hdr.tp_snaplen as usize;
            // The next slot, its header and as many bytes as this frame has, is read next:
            // asked for now, it arrives while `f` handles this one (see `prefetch`). Its
            // last line first: the frame's check reads the CRC trailer at its end before the
            // payload between (see `prefetch_tail_first`).
            let next = self.rx.slot_offset(self.rx.after(self.rx.head));
            prefetch_tail_first(
                self.map.as_ptr().wrapping_add(next),
                (mac + snap).min(self.rx.frame_size),
            );
            // Never trust offsets blindly: a slot whose data would leave the slot is skipped.
            if mac >= HDRLEN && mac + snap <= self.rx.frame_size {
                // SAFETY: [off+mac, off+mac+snap) lies inside this slot (checked above), which
                // the kernel handed to us (status USER) and will not write until we give it
                // back: after `f` returns, or when held, after `done` returns (or later, when
                // retained). The slice lives in `f`'s call only (`f` cannot keep what it is
                // lent).
                let data =
                    unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(off + mac), snap) };
                f(&RxFrame {
                    data,
                    wire_len: hdr.tp_len as usize,
                    pkttype: sll.sll_pkttype,
                    status,
                });
                n += 1;
            }
            if done.is_none() {
                self.status(off)
                    .store(libc::TP_STATUS_KERNEL, Ordering::Release);
            }
            self.rx.advance();
        }
        if let Some(done) = done.as_mut() {
            let held = self.kept + taken;
            let leaving = held.saturating_sub(self.retain);
            done(&self.held(held), &self.held(leaving));
            self.give_back(leaving);
            self.kept = held - leaving;
        }
        n
    }

    /// Largest frame (Ethernet header included) [`RingSocket::tx_push_in_place`] takes; 0 without
    /// a TX ring.
    pub fn tx_frame_capacity(&self) -> usize {
        self.tx_cfg.map_or(0, |t| t.tx_frame_capacity())
    }

    /// Whether the next TX slot is free.
    pub fn tx_slot_free(&self) -> bool {
        self.tx.is_some_and(|tx| {
            self.status(tx.slot_offset(tx.head)).load(Ordering::Acquire)
                == libc::TP_STATUS_AVAILABLE
        })
    }

    /// Whether the kernel has taken every queued TX frame: it sends in ring order, so the
    /// most recently queued slot being free means all are. True without a TX ring.
    pub fn tx_idle(&self) -> bool {
        self.tx.is_none_or(|tx| {
            let last = (tx.head + tx.frame_count - 1) % tx.frame_count;
            self.status(tx.slot_offset(last)).load(Ordering::Acquire) == libc::TP_STATUS_AVAILABLE
        })
    }

    /// Queues one frame written in place into the next TX slot, the way the frame's maker
    /// writes it, with no copy in between. `fill` is lent the slot's whole data area
    /// ([`RingSocket::tx_frame_capacity`] bytes), which still holds whatever an earlier frame
    /// left there; it writes the frame (Ethernet header included) at the start and returns its
    /// length, or 0 to queue nothing. A frame shorter than [`ETH_MIN_FRAME`] is padded with
    /// zeros to that length, so no byte of an earlier frame leaves with it; the bytes past the
    /// frame are never sent, so they are not cleared (clearing the frame first would write
    /// every byte sent twice).
    ///
    /// Returns `Ok(None)`, without calling `fill`, while the slot is still in use (flush with
    /// [`RingSocket::tx_flush`] and wait), else `Ok(Some(length queued))` (0: nothing was).
    /// A length beyond the slot or shorter than an Ethernet header is an error and queues
    /// nothing. Nothing is sent before `tx_flush`.
    pub fn tx_push_in_place(
        &mut self,
        fill: impl FnOnce(&mut [u8]) -> usize,
    ) -> Result<Option<usize>> {
        let Some(mut tx) = self.tx else {
            return Err(Error::RingConfig("this socket has no TX ring".into()));
        };
        let max = self.tx_frame_capacity();
        let off = tx.slot_offset(tx.head);
        match self.status(off).load(Ordering::Acquire) {
            libc::TP_STATUS_AVAILABLE => {}
            libc::TP_STATUS_WRONG_FORMAT => {
                // Give the slot back so the ring does not wedge, and report the rejection.
                self.status(off)
                    .store(libc::TP_STATUS_AVAILABLE, Ordering::Release);
                return Err(Error::TxWrongFormat);
            }
            _ => return Ok(None),
        }
        // SAFETY: the acquire load saw TP_STATUS_AVAILABLE, so the kernel neither reads nor
        // writes this slot until we store TP_STATUS_SEND_REQUEST. [off+TX_DATA_OFFSET, +max)
        // is inside the slot because max = frame_size - TX_DATA_OFFSET. No other reference to
        // this memory exists while `data` lives (`&mut self`).
        let data = unsafe {
            std::slice::from_raw_parts_mut(self.map.as_mut_ptr().add(off + TX_DATA_OFFSET), max)
        };
        let len = match fill(data) {
            0 => return Ok(Some(0)),
            len if len > max => return Err(Error::FrameTooLong { len, max }),
            len if len < ETH_HEADER_LEN => {
                return Err(Error::FrameTooShort {
                    len,
                    min: ETH_HEADER_LEN,
                })
            }
            len => len,
        };
        // The slots hold at least a minimal frame (`RingConfig::validate`).
        let len = if len < ETH_MIN_FRAME {
            data[len..ETH_MIN_FRAME].fill(0);
            ETH_MIN_FRAME
        } else {
            len
        };
        // SAFETY: same slot, still ours; tp_len is a u32 field of the (aligned) slot header.
        unsafe {
            let hdr = self.map.as_mut_ptr().add(off).cast::<libc::tpacket2_hdr>();
            std::ptr::addr_of_mut!((*hdr).tp_len).write(len as u32);
        }
        self.status(off)
            .store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
        tx.advance();
        self.tx = Some(tx);
        Ok(Some(len))
    }

    /// Queues a copy of `frame` (see [`RingSocket::tx_push_in_place`]; padded like it).
    /// Returns `Ok(false)` while the slot is still in use.
    pub fn tx_push(&mut self, frame: &[u8]) -> Result<bool> {
        let fill = crate::copy_fill(frame, self.tx_frame_capacity())?;
        Ok(self.tx_push_in_place(fill)?.is_some())
    }

    /// Asks the kernel to send every queued TX frame (`send(fd, NULL, 0, MSG_DONTWAIT)`).
    /// When the device's queue refuses a frame (`ENOBUFS`), the kernel stops there and leaves
    /// that frame and the ones after it queued: they go out only at a later kick, so whoever
    /// waits for TX slots must keep kicking.
    pub fn tx_flush(&self) -> Result<()> {
        if self.tx.is_none() {
            return Ok(());
        }
        // SAFETY: a zero-length send with a null buffer is the documented TX ring kick; the
        // kernel reads the frames from the ring, not from the (absent) buffer.
        let rc = unsafe {
            libc::send(
                self.sock.as_fd().as_raw_fd(),
                std::ptr::null(),
                0,
                libc::MSG_DONTWAIT,
            )
        };
        if rc >= 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::ENOBUFS) | Some(libc::EINTR) => Ok(()),
            _ => Err(Error::from_io("send(TX ring)", err)),
        }
    }
}

/// Sets a `SOL_PACKET` option of the ring setup; a refusal is [`Error::RingSetup`] (or
/// [`Error::PermissionDenied`]).
fn set_option<T: Pod>(
    sock: &PacketSocket,
    name: libc::c_int,
    value: &T,
    op: &'static str,
) -> Result<()> {
    sockcall::setsockopt(sock.as_fd(), libc::SOL_PACKET, name, value)
        .map_err(|e| Error::ring(op, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_constants_match_the_kernel() {
        assert_eq!(HDRLEN, 52);
        assert_eq!(SLL_OFFSET, 32);
        assert_eq!(TX_DATA_OFFSET, 32);
        assert_eq!(RX_DATA_OFFSET, 66);
        // A 1500-byte MTU frame fits the default slots.
        assert!(RingConfig::RX_DEFAULT.rx_frame_capacity() >= 1514);
        assert!(RingConfig::TX_DEFAULT.tx_frame_capacity() >= 1514);
    }

    #[test]
    fn defaults_are_valid_and_bad_geometry_is_explained() {
        RingConfig::RX_DEFAULT.validate().unwrap();
        RingConfig::TX_DEFAULT.validate().unwrap();
        let bad = [
            RingConfig {
                frame_size: 2000,
                ..RingConfig::RX_DEFAULT
            },
            RingConfig {
                frame_size: 64,
                ..RingConfig::RX_DEFAULT
            },
            RingConfig {
                block_size: 5000,
                ..RingConfig::RX_DEFAULT
            },
            RingConfig {
                block_size: 4096,
                frame_size: 4096 * 2,
                ..RingConfig::RX_DEFAULT
            },
            RingConfig {
                frame_count: 33,
                ..RingConfig::RX_DEFAULT
            },
            RingConfig {
                frame_count: 0,
                ..RingConfig::RX_DEFAULT
            },
            RingConfig {
                frame_count: 1 << 40,
                ..RingConfig::RX_DEFAULT
            },
        ];
        for cfg in bad {
            match cfg.validate() {
                Err(Error::RingConfig(msg)) => assert!(!msg.is_empty()),
                other => panic!("{cfg:?} gave {other:?}"),
            }
        }
    }
}
