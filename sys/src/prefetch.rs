//! A hint to the CPU: bring these bytes into its cache now, because they are read or written
//! shortly.
//!
//! Why: on a host whose cores are shared by more processes than it has (the test-bed: eight
//! receivers and a sender on two cores), every frame a bulk receiver handles is cold twice: in
//! the RX ring, where the kernel wrote it from the other core, and in the message buffer it is
//! copied to, last touched long before. Each of its cache lines then costs a trip to the shared
//! cache or memory while the receiver waits. Asked for one frame ahead, the lines arrive while
//! the receiver handles the frame before. Measured on the test-bed (256 MiB to 8 receivers,
//! 12 alternated transfers), with the ring's next slot and the message buffer's next place
//! prefetched, the receivers' CPU was lower in 9 of the 12 pairs, by a tenth (median).
//!
//! A prefetch never faults and never changes memory, whatever the address (unmapped, null,
//! freed): it is a hint the CPU may drop. That is why [`prefetch`] is safe to call with any
//! pointer, and why callers outside this crate (the protocol engine, which owns its buffers
//! and has no `unsafe`) can pass the address of memory they do not yet own the bytes of, such as
//! a vector's spare capacity.

/// Bytes per cache line on the CPUs this matters for (x86-64).
const LINE: usize = 64;

/// Hints that the `len` bytes from `start` are used soon: one prefetch per cache line. A no-op
/// on other architectures than x86-64.
pub fn prefetch(start: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let end = (start as usize).saturating_add(len);
        let mut at = start as usize & !(LINE - 1);
        while at < end {
            // SAFETY: `prefetcht0` is a hint: it does not fault on any address (unmapped,
            // non-canonical or null), reads nothing the program sees and writes nothing.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(start.with_addr(at).cast()) };
            match at.checked_add(LINE) {
                Some(next) => at = next,
                None => break,
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (start, len);
    }
}

/// As [`prefetch`], the line that holds the last byte asked for first (see [`lines_tail_first`]).
///
/// Why: a received frame is checked before its payload is read, and the check reads the CRC
/// trailer at the frame's end. Asked for in address order, that line arrives last, after the
/// payload's, and the check waits for all of them: on the test-bed (8 receivers of 256 MiB,
/// `perf record`) the load of the trailer took 9-14% of a receiver's samples with the ring's
/// next slot prefetched front to back, 1% tail first, and the receivers' CPU fell by about a
/// tenth (median of 5 alternated transfers).
pub fn prefetch_tail_first(start: *const u8, len: usize) {
    for at in lines_tail_first(start as usize, len) {
        prefetch(start.with_addr(at), 1);
    }
}

/// The start of each cache line that the `len` bytes from `start` touch, once each: the line
/// of the last byte first, then the others in address order.
pub fn lines_tail_first(start: usize, len: usize) -> impl Iterator<Item = usize> {
    let first = start & !(LINE - 1);
    let last = start.saturating_add(len.saturating_sub(1)) & !(LINE - 1);
    let tail = (len > 0).then_some(last);
    let rest = (len > 0 && last > first).then(|| (first..last).step_by(LINE));
    tail.into_iter().chain(rest.into_iter().flatten())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_s_last_line_is_asked_for_first_then_every_other_line_once() {
        // A 1514-byte frame at an offset that is no multiple of a line: 24 lines touched.
        let start = 0x1000 + 0x42;
        let lines: Vec<usize> = lines_tail_first(start, 1514).collect();
        let last_byte = start + 1514 - 1;
        assert_eq!(
            lines[0],
            last_byte & !(LINE - 1),
            "the trailer's line first"
        );
        let mut sorted = lines.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), lines.len(), "each line once");
        let expected: Vec<usize> = (0x1040..=last_byte).step_by(LINE).collect();
        assert_eq!(sorted, expected, "every line the frame touches, no other");
        assert_eq!(lines.len(), 24);
        assert!(lines[1..].windows(2).all(|w| w[0] < w[1]), "then in order");
        // One line, and nothing.
        assert_eq!(lines_tail_first(0x1000, 64).collect::<Vec<_>>(), [0x1000]);
        assert_eq!(lines_tail_first(0x1000, 0).count(), 0);
        // No overflow at the top of the address space.
        assert_eq!(lines_tail_first(usize::MAX - 10, 100).count(), 1);
        prefetch_tail_first(std::ptr::null(), 4096);
        prefetch_tail_first(usize::MAX as *const u8, 256);
    }

    #[test]
    fn a_prefetch_of_memory_that_is_not_there_is_harmless() {
        prefetch(std::ptr::null(), 4096);
        prefetch(usize::MAX as *const u8, 256);
        prefetch(0xdead_0000_0000 as *const u8, 1 << 20);
        let v: Vec<u8> = Vec::with_capacity(8192);
        // Spare capacity: allocated, never written.
        prefetch(v.as_ptr(), v.capacity());
        let freed = v.as_ptr();
        drop(v);
        prefetch(freed, 8192);
    }

    #[test]
    fn a_prefetch_leaves_the_bytes_as_they_were() {
        let v: Vec<u8> = (0..=255u8).cycle().take(4096 + 3).collect();
        let before = v.clone();
        prefetch(v.as_ptr().wrapping_add(3), v.len() - 3);
        assert_eq!(v, before);
    }
}
