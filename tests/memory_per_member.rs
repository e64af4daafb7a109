//! What a member allocates for each fellow member, before anyone sends: the state every member
//! keeps per rank is what makes a whole group's memory grow with the square of its size (the
//! simulator holds every member of a group of 4096 in one process), and a member that never
//! broadcasts pays nothing for its retransmission buffer's payloads.
//!
//! One test in this binary: the counting allocator sees every thread's allocations.

use std::sync::Arc;
use std::time::Instant;

use ethbcast::{port_mac, MacAddr};
use ethbcast_proto::{Engine, EngineConfig, HardwareAlgorithm, Member, MemberConfig, Rank};
use ethbcast_sys::alloc::CountingAlloc;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

/// Bytes a member keeps per fellow member at most: its liveness, and the barriers' view of
/// who was evicted (4 measured). The rest of what a member knows of its fellows (receive
/// streams, receives posted, collectives counted, point-to-point channels, signs of life) is
/// kept for the fellows it hears from or talks to alone.
const BYTES_PER_RANK: usize = 8;

#[test]
fn a_member_allocates_little_per_fellow_and_no_buffer_before_it_broadcasts() {
    let now = Instant::now();
    let member_bytes = |n: u16| {
        let macs: Arc<[MacAddr]> = (0..n).map(port_mac).collect();
        let before = ALLOC.live_bytes();
        let m = Member::new(
            now,
            MemberConfig::new(EngineConfig::new(1, Rank::new(1), n), macs),
        )
        .unwrap();
        let bytes = ALLOC.live_bytes() - before;
        drop(m);
        bytes
    };
    let (small, large) = (member_bytes(1024), member_bytes(4096));
    let per_rank = large.saturating_sub(small) / (4096 - 1024);
    assert!(
        per_rank <= BYTES_PER_RANK,
        "a member of 4096 allocated {large} B, of 1024 {small} B: {per_rank} B per rank"
    );

    // The retransmission buffer's payloads come with the first broadcast.
    let cfg = EngineConfig::new(1, Rank::new(0), 4096);
    let block = cfg.window * cfg.slot_payload();
    let before = ALLOC.live_bytes();
    let mut e = Engine::new(cfg).unwrap();
    let idle = ALLOC.live_bytes() - before;
    e.bcast(now, vec![7; 100], HardwareAlgorithm::Simple)
        .unwrap();
    let sending = ALLOC.live_bytes() - before;
    assert!(
        sending - idle >= block,
        "the first broadcast allocated {} B, the buffer's payloads are {block} B",
        sending - idle
    );
}
