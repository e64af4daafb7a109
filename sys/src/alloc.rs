//! A counting global allocator, for tests that check what the library really allocates
//! (the EQA memory accounting is verified against it), and the C allocator's reuse of freed
//! blocks for processes that move large buffers ([`keep_freed_memory`]).
//!
//! It forwards to the system allocator and keeps the number of bytes currently allocated and
//! the number of allocations made (a reallocation is one), by every thread and by the calling
//! thread. Install it in a test binary with `#[global_allocator]`; the test binary then needs
//! no `unsafe` of its own.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

thread_local! {
    /// Allocations made by this thread through a [`CountingAlloc`]. Constant-initialised and
    /// without a destructor, so reading it allocates nothing.
    static THREAD_ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

/// Asks the C allocator to keep freed blocks of up to `bytes` for reuse: it serves them from
/// its heap rather than mapping fresh pages (`M_MMAP_THRESHOLD`), and it returns the heap's
/// free top to the kernel only beyond twice that (`M_TRIM_THRESHOLD`). For a process that
/// allocates and frees one buffer of that size per message (a bulk transfer's chunks):
/// otherwise every buffer is a new mapping whose pages fault in and are zeroed, then unmapped.
/// glibc takes at most 32 MiB ([`MAX_KEPT_BLOCK`]); a larger `bytes` is taken as that. Returns
/// whether the allocator took both settings (false where it is not glibc's).
pub fn keep_freed_memory(bytes: usize) -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let bytes = bytes.min(MAX_KEPT_BLOCK);
        let mmap = bytes as libc::c_int;
        let trim = (2 * bytes) as libc::c_int;
        // SAFETY: mallopt only changes the allocator's tunables; it takes plain integers and
        // touches no memory of ours. glibc documents both parameters.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, mmap) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, trim) == 1
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        let _ = bytes;
        false
    }
}

/// The largest block size glibc's `M_MMAP_THRESHOLD` accepts on 64-bit machines.
pub const MAX_KEPT_BLOCK: usize = 32 << 20;

/// The system allocator with counters of live bytes and of allocations.
#[derive(Debug, Default)]
pub struct CountingAlloc {
    live: AtomicUsize,
    allocations: AtomicU64,
}

impl CountingAlloc {
    /// A new counter at zero.
    pub const fn new() -> CountingAlloc {
        CountingAlloc {
            live: AtomicUsize::new(0),
            allocations: AtomicU64::new(0),
        }
    }

    /// Bytes allocated and not yet freed (by every thread).
    pub fn live_bytes(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }

    /// Allocations and reallocations made so far (by every thread).
    pub fn allocations(&self) -> u64 {
        self.allocations.load(Ordering::SeqCst)
    }

    /// Allocations and reallocations the calling thread has made so far.
    pub fn thread_allocations() -> u64 {
        THREAD_ALLOCATIONS.try_with(Cell::get).unwrap_or(0)
    }

    fn count(&self) {
        self.allocations.fetch_add(1, Ordering::Relaxed);
        // A thread being torn down has no counter left: its allocations count globally only.
        let _ = THREAD_ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
    }
}

// SAFETY: every method forwards to `System` with the caller's layout and pointer unchanged, so
// the GlobalAlloc contract is System's; the counter is only bookkeeping.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `alloc`'s contract (non-zero size), passed on unchanged.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            self.live.fetch_add(layout.size(), Ordering::SeqCst);
            self.count();
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            self.live.fetch_add(layout.size(), Ordering::SeqCst);
            self.count();
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout` (every allocation goes through us).
        unsafe { System.dealloc(ptr, layout) };
        self.live.fetch_sub(layout.size(), Ordering::SeqCst);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr`/`layout` come from a previous allocation of ours; `new_size` is the
        // caller's, passed on unchanged.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            self.live.fetch_sub(layout.size(), Ordering::SeqCst);
            self.live.fetch_add(new_size, Ordering::SeqCst);
            self.count();
        }
        p
    }
}
