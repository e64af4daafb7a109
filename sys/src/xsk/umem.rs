//! The UMEM: the one memory area an AF_XDP socket's frames live in, shared with the kernel.
//!
//! It is an anonymous mapping cut into equal chunks ("frames"); descriptors in the rings name
//! a frame by its byte offset in the UMEM. A chunk is ours while we hold its address (taken
//! from the RX or completion ring, not yet put into the fill or TX ring) and the kernel's
//! otherwise; we only form slices over chunks that are ours, and always through
//! [`Umem::frame`] / [`Umem::frame_mut`], which check the bounds the kernel's descriptor
//! claims.

use crate::{Error, Result};
use memmap2::{MmapOptions, MmapRaw};

/// The UMEM mapping.
#[derive(Debug)]
pub(crate) struct Umem {
    map: MmapRaw,
    frame_size: u32,
    frames: u32,
}

impl Umem {
    /// Maps `frames` chunks of `frame_size` bytes (a power of two between 2048 and the page
    /// size), zeroed and populated.
    pub(crate) fn new(frames: u32, frame_size: u32) -> Result<Self> {
        let len = frames as usize * frame_size as usize;
        let map = MmapOptions::new()
            .len(len)
            .populate()
            .map_anon()
            .map_err(|e| Error::xsk("mmap of the UMEM", e))?;
        Ok(Umem {
            map: MmapRaw::from(map),
            frame_size,
            frames,
        })
    }

    /// Start address of the mapping (for `XDP_UMEM_REG`).
    pub(crate) fn addr(&self) -> u64 {
        self.map.as_ptr() as u64
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Bytes per frame.
    pub(crate) fn frame_size(&self) -> u32 {
        self.frame_size
    }

    /// Number of frames.
    pub(crate) fn frames(&self) -> u32 {
        self.frames
    }

    /// The chunk an address inside it belongs to (its first byte).
    pub(crate) fn chunk_of(&self, addr: u64) -> u64 {
        addr & !(u64::from(self.frame_size) - 1)
    }

    /// Whether `[addr, addr + len)` lies inside one chunk.
    fn in_one_chunk(&self, addr: u64, len: usize) -> bool {
        let end = addr.checked_add(len as u64);
        end.is_some_and(|e| e <= self.map.len() as u64)
            && (len == 0 || self.chunk_of(addr) == self.chunk_of(addr + len as u64 - 1))
    }

    /// The `len` bytes at `addr` of a chunk we own, or `None` if they do not lie inside one
    /// chunk (a descriptor we cannot trust).
    pub(crate) fn frame(&self, addr: u64, len: usize) -> Option<&[u8]> {
        if !self.in_one_chunk(addr, len) {
            return None;
        }
        // SAFETY: the range is inside the mapping (checked), the mapping lives as long as
        // `&self`, and the caller owns the chunk (took its address from the RX ring and has
        // not given it back), so the kernel does not write it while the slice lives.
        Some(unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(addr as usize), len) })
    }

    /// The `len` bytes at `addr` of a chunk we own, writable; `None` as for [`Umem::frame`].
    pub(crate) fn frame_mut(&mut self, addr: u64, len: usize) -> Option<&mut [u8]> {
        if !self.in_one_chunk(addr, len) {
            return None;
        }
        // SAFETY: as in `frame`; the chunk is a free TX chunk, which the kernel neither reads
        // nor writes until we put its descriptor into the TX ring, and `&mut self` makes this
        // the only slice over it.
        Some(unsafe {
            std::slice::from_raw_parts_mut(self.map.as_mut_ptr().add(addr as usize), len)
        })
    }
}
