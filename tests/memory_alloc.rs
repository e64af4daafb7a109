//! What is really allocated for a group of n matches the paper's formula
//! `s_SDP + (n-1)·s_LDP + n·s_RDP`, with the sizes `memory::sizes` reports.
//!
//! A member makes some places at first use (a receive window's payload places at its first
//! copy, the receive and outbox queues as they fill): the bytes allocated at the join stay
//! within the formula, and reach it once every place is made.
//!
//! One test in this binary: the counting allocator sees every thread's allocations.

use std::time::Instant;

use ethbcast::memory::{sizes_for, Profile};
use ethbcast::Rank;
use ethbcast_proto::test_hooks::make_every_place;
use ethbcast_proto::{Engine, EngineConfig, HardwareAlgorithm};
use ethbcast_sys::alloc::CountingAlloc;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

#[test]
fn allocated_bytes_match_the_formula_for_groups_up_to_128() {
    for profile in [Profile::Paper, Profile::Default] {
        for n in [2u16, 4, 8, 16, 32, 64, 128] {
            let s = sizes_for(profile, n, Instant::now());
            let cfg = match profile {
                Profile::Paper => EngineConfig::paper(1, Rank::new(0), n),
                Profile::Default => EngineConfig::new(1, Rank::new(0), n),
            };
            let now = Instant::now();
            let before = ALLOC.live_bytes();
            // The root: its send-only DP with one LDP per destination ...
            let mut root = Box::new(Engine::new(cfg.clone()).unwrap());
            // (a member makes its LDPs at its first broadcast) ...
            root.bcast(now, Vec::new(), HardwareAlgorithm::Simple)
                .unwrap();
            // ... and n-1 receive-only DPs, one per other root ...
            for r in 1..n {
                root.post_recv(now, Rank::new(r), 0).unwrap();
            }
            let root_bytes = ALLOC.live_bytes() - before;
            // ... and the receive-only DP another member keeps for this root's broadcasts.
            let mut other = cfg.clone();
            other.rank = Rank::new(1);
            let mut member = Engine::new(other).unwrap();
            // (its own send side, made now, is its SDP, not this root's)
            make_every_place(&mut member);
            let before_member = ALLOC.live_bytes();
            member.post_recv(now, Rank::new(0), 0).unwrap();
            let joined = root_bytes + (ALLOC.live_bytes() - before_member);
            let formula = s.hb(usize::from(n));
            assert!(
                joined as f64 <= formula as f64 * 1.02,
                "{profile:?} n={n}: allocated {joined} B at the join, above the formula's {formula} B"
            );
            let before_places = ALLOC.live_bytes();
            make_every_place(&mut root);
            make_every_place(&mut member);
            let measured = joined + (ALLOC.live_bytes() - before_places);
            let err = (measured as f64 - formula as f64).abs() / formula as f64;
            assert!(
                err < 0.02,
                "{profile:?} n={n}: allocated {measured} B, formula {formula} B ({:.2}% off)",
                err * 100.0
            );
            drop(root);
            drop(member);
        }
    }
}
