//! A counting global allocator, for tests that check what the library really allocates
//! (the EQA memory accounting is verified against it).
//!
//! It forwards to the system allocator and keeps the number of bytes currently allocated.
//! Install it in a test binary with `#[global_allocator]`; the test binary then needs no
//! `unsafe` of its own.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator with a counter of live bytes.
#[derive(Debug, Default)]
pub struct CountingAlloc {
    live: AtomicUsize,
}

impl CountingAlloc {
    /// A new counter at zero.
    pub const fn new() -> CountingAlloc {
        CountingAlloc {
            live: AtomicUsize::new(0),
        }
    }

    /// Bytes allocated and not yet freed (by every thread).
    pub fn live_bytes(&self) -> usize {
        self.live.load(Ordering::SeqCst)
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
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            self.live.fetch_add(layout.size(), Ordering::SeqCst);
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
        }
        p
    }
}
