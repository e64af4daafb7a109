//! `ethbcast-bench mpi`'s measuring program (`tools/mpi/mpi_bench.c`) under Open MPI, with and
//! without the interposer, on a 2-host test-bed: every operation it measures runs, every rank
//! checks every byte, and every run of every (operation, size) gives its samples. Structure and
//! correctness only: no timed asserts (the ratios are the benchmark's, not a test's).
//!
//! Needs root and both MPIs (`.ci/run` installs them): with `ETHBCAST_REQUIRE_NETNS=1`
//! anything missing fails the test instead of skipping it.

use std::time::Duration;

use ethbcast_testbed::mpi::MpiImpl;
use ethbcast_testbed::netns_available;
use ethbcast_tools::bench::mpi::{run, MpiBenchOptions};

// The MPI tests share this module; this one uses only its checks and the static library.
#[allow(dead_code)]
mod mpi_common;
use mpi_common::{mpis_available, staticlib};

#[test]
fn the_point_to_point_latency_and_the_collectives_run_checked_with_and_without_the_interposer() {
    let test = "the_point_to_point_latency_and_the_collectives_run_checked_with_and_without_the_interposer";
    if !netns_available(test, false) || !mpis_available(test) {
        return;
    }
    let mut o = MpiBenchOptions::new(2);
    o.impls = vec![MpiImpl::OpenMpi];
    o.ops = ["latency", "alltoall", "allgather", "reduce"]
        .map(String::from)
        .to_vec();
    o.sizes = vec![0, 8, 1500];
    o.iters = 20;
    o.warmup = 2;
    o.rounds = 1;
    o.osu = true;
    o.prefix = format!("mb{:x}", std::process::id() & 0xffff);
    o.job_timeout = Duration::from_secs(120);
    o.capi_lib = Some(staticlib());
    // Both routes of an allgather: over ethbcast, and passed through to Open MPI's own.
    o.also = vec![vec![(
        "ETHBCAST_MPI_ALLGATHER_MAX_BYTES".into(),
        "0".into(),
    )]];
    let r = run(&o).unwrap_or_else(|e| panic!("mpi bench: {e}"));
    for op in ["latency", "alltoall", "allgather", "reduce"] {
        for size in [0, 8, 1500] {
            let rows: Vec<_> = r
                .rows
                .iter()
                .filter(|x| x.op == op && x.size == size)
                .collect();
            // Open MPI alone, the interposer, the interposer passing allgathers through.
            assert_eq!(rows.len(), 3, "{op} {size}: {rows:?}\nnotes: {:?}", r.notes);
            for x in rows {
                assert!(x.verified, "{op} {size} {}: a byte differed", x.path);
                assert_eq!(x.ranks, 2, "{x:?}");
                assert!(x.median_us > 0.0 && x.median_us.is_finite(), "{x:?}");
                // OSU's loop: how far apart the ranks entered each call, and each rank's
                // mean lag behind the first (a ping-pong has no separating barrier).
                if op != "latency" {
                    let skew = x.entry_skew_median_us.expect("entry skew");
                    let lag = x.entry_lag_us.as_deref().expect("entry lags");
                    assert!(skew >= 0.0 && skew.is_finite(), "{x:?}");
                    assert_eq!(lag.len(), 2, "{x:?}");
                    assert!(lag.iter().all(|&l| l >= 0.0 && l.is_finite()), "{x:?}");
                }
            }
        }
    }
    assert!(
        r.rows.iter().any(|x| x.interposer) && r.rows.iter().any(|x| !x.interposer),
        "{:?}",
        r.rows
    );
}
