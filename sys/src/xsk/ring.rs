//! The four single-producer, single-consumer rings of an AF_XDP socket, mapped from the kernel.
//!
//! Each ring is a power-of-two array of descriptors with a producer and a consumer index
//! (free-running `u32`s; the slot is `index & mask`) and a flags word. The protocol is the
//! kernel's (`net/xdp/xsk_queue.h`): whoever produces writes descriptors, then publishes them
//! by storing the producer index with *release* ordering; the consumer reads the producer
//! index with *acquire* ordering before reading descriptors, and hands slots back by storing
//! the consumer index with *release* ordering once it read them. We produce into the fill and
//! TX rings and consume from the RX and completion rings.
//!
//! Both indices are cached: the side we own never needs a load, and the other side's index is
//! loaded only when the cached value says the ring is full (producer) or empty (consumer).

use crate::{Error, Result};
use memmap2::{MmapOptions, MmapRaw};
use std::marker::PhantomData;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU32, Ordering};

/// A descriptor of the RX and TX rings (`struct xdp_desc`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Desc {
    /// Address of the frame in the UMEM (offset from its start).
    pub addr: u64,
    /// Length of the frame.
    pub len: u32,
    /// Option bits (`XDP_PKT_CONTD` for multi-buffer frames; 0 here).
    pub options: u32,
}

/// What a ring's slots hold: [`Desc`] (RX, TX) or a UMEM address (fill, completion).
pub trait Slot: Copy {}
impl Slot for Desc {}
impl Slot for u64 {}

/// One mapped ring.
#[derive(Debug)]
pub(crate) struct Ring<T: Slot> {
    map: MmapRaw,
    producer: usize,
    consumer: usize,
    flags: usize,
    desc: usize,
    size: u32,
    cached_prod: u32,
    cached_cons: u32,
    _slot: PhantomData<T>,
}

impl<T: Slot> Ring<T> {
    /// Maps the ring of `size` slots that socket `fd` exposes at page offset `pgoff`, with the
    /// field offsets the kernel reported (`XDP_MMAP_OFFSETS`).
    pub(crate) fn map(
        fd: BorrowedFd<'_>,
        pgoff: u64,
        off: &libc::xdp_ring_offset,
        size: u32,
        what: &'static str,
    ) -> Result<Self> {
        let len = off.desc as usize + size as usize * std::mem::size_of::<T>();
        // Mapping the socket at a ring's page offset maps exactly that ring, of the size set
        // with its setsockopt; we only touch it through the offsets the kernel reported
        // (`map_raw` hands out a raw mapping, so it is not `unsafe` itself).
        let map = MmapOptions::new()
            .offset(pgoff)
            .len(len)
            .populate()
            .map_raw(&fd)
            .map_err(|e| Error::xsk(what, e))?;
        let ring = Ring {
            map,
            producer: off.producer as usize,
            consumer: off.consumer as usize,
            flags: off.flags as usize,
            desc: off.desc as usize,
            size,
            cached_prod: 0,
            cached_cons: 0,
            _slot: PhantomData,
        };
        ring.check_offsets()?;
        Ok(ring)
    }

    fn check_offsets(&self) -> Result<()> {
        let words = [self.producer, self.consumer, self.flags];
        let in_map = |o: usize| o + 4 <= self.map.len() && o & 3 == 0;
        if !words.iter().all(|&o| in_map(o)) || self.desc & 7 != 0 {
            return Err(Error::Xsk {
                op: "XDP_MMAP_OFFSETS",
                source: std::io::Error::other("the kernel reported ring offsets outside the ring"),
            });
        }
        Ok(())
    }

    fn word(&self, offset: usize) -> &AtomicU32 {
        // SAFETY: `offset` is one of the producer/consumer/flags offsets, checked in `map` to
        // lie inside the mapping and to be 4-byte aligned; the kernel and we access these
        // words concurrently, so they are only touched as atomics. The reference lives no
        // longer than `&self`, and the mapping lives as long as `self`.
        unsafe { AtomicU32::from_ptr(self.map.as_mut_ptr().add(offset).cast::<u32>()) }
    }

    fn slot_ptr(&self, index: u32) -> *mut T {
        let i = (index & (self.size - 1)) as usize;
        // SAFETY: `i < size`, and the mapping holds `size` slots of `T` from `desc` on (its
        // length was computed that way in `map`), so the pointer is in bounds; `desc` is
        // 8-byte aligned (checked), as `T` needs.
        unsafe { self.map.as_mut_ptr().add(self.desc).cast::<T>().add(i) }
    }

    /// Whether the kernel asks to be woken up (`XDP_RING_NEED_WAKEUP`) to process this ring.
    pub(crate) fn needs_wakeup(&self) -> bool {
        self.word(self.flags).load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }

    // --- Producer side (fill, TX) ---

    /// Free slots, at least `want` if there are that many (reloads the consumer index only
    /// when the cached one says otherwise).
    pub(crate) fn free(&mut self, want: u32) -> u32 {
        let mut free = self.size - self.cached_prod.wrapping_sub(self.cached_cons);
        if free < want {
            self.cached_cons = self.word(self.consumer).load(Ordering::Acquire);
            free = self.size - self.cached_prod.wrapping_sub(self.cached_cons);
        }
        free
    }

    /// Writes slot `i` past the last published one (the caller checked [`Ring::free`]).
    pub(crate) fn write(&mut self, i: u32, value: T) {
        let p = self.slot_ptr(self.cached_prod.wrapping_add(i));
        // SAFETY: the slot is in bounds (`slot_ptr`) and not yet published: the kernel reads
        // it only after the release store in `submit`, and we hold `&mut self`.
        unsafe { p.write(value) }
    }

    /// Publishes `n` written slots to the kernel.
    pub(crate) fn submit(&mut self, n: u32) {
        self.cached_prod = self.cached_prod.wrapping_add(n);
        self.word(self.producer)
            .store(self.cached_prod, Ordering::Release);
    }

    /// Slots published but not yet taken by the kernel.
    pub(crate) fn pending(&mut self) -> u32 {
        self.cached_cons = self.word(self.consumer).load(Ordering::Acquire);
        self.cached_prod.wrapping_sub(self.cached_cons)
    }

    // --- Consumer side (RX, completion) ---

    /// Slots ready to read (reloads the producer index only when the cache is drained).
    pub(crate) fn available(&mut self) -> u32 {
        if self.cached_prod == self.cached_cons {
            self.cached_prod = self.word(self.producer).load(Ordering::Acquire);
        }
        self.cached_prod.wrapping_sub(self.cached_cons)
    }

    /// Whether a slot is ready, without changing the cache (a cheap check for spinning).
    pub(crate) fn peek_ready(&self) -> bool {
        self.cached_prod != self.cached_cons
            || self.word(self.producer).load(Ordering::Acquire) != self.cached_cons
    }

    /// Reads ready slot `i` (the caller checked [`Ring::available`]).
    pub(crate) fn read(&self, i: u32) -> T {
        let p = self.slot_ptr(self.cached_cons.wrapping_add(i));
        // SAFETY: the slot is in bounds and was published by the kernel (acquire load of the
        // producer index in `available`); it does not rewrite it before we release it.
        unsafe { p.read() }
    }

    /// Hands `n` read slots back to the kernel.
    pub(crate) fn release(&mut self, n: u32) {
        self.cached_cons = self.cached_cons.wrapping_add(n);
        self.word(self.consumer)
            .store(self.cached_cons, Ordering::Release);
    }
}
