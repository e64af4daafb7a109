//! An MPI-style program on ethbcast: every member broadcasts in turn, then all meet at a
//! barrier. Run one copy per host; on the test-bed:
//!
//! ```text
//! cargo build --release --example bcast_barrier
//! ethbcast keygen /tmp/group.key             # the group's key, read by every member
//! export ETHBCAST_KEY_FILE=/tmp/group.key
//! ethbcast-testbed up 4                      # namespaces ebc-h0 .. ebc-h3
//! for i in 0 1 2 3; do
//!   ip netns exec ebc-h$i target/release/examples/bcast_barrier eth0 4 &
//! done; wait
//! ethbcast-testbed down
//! ```
//!
//! Arguments: interface (default `eth0`) and the number of members (default 4): members find
//! each other by discovery and get their ranks from their sorted MAC addresses. With
//! `ETHBCAST_RANK`/`ETHBCAST_SIZE` (or Slurm's and MPI launchers' variables) set, those ranks
//! are used instead. The key comes from the file `ETHBCAST_KEY_FILE` names; without one the
//! program refuses to start.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use ethbcast::Rank;
use ethbcast::{Group, GroupOptions, Membership};

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let iface = args.next().unwrap_or_else(|| "eth0".into());
    let members: u16 = match args.next().map(|s| s.parse()) {
        None => 4,
        Some(Ok(n)) if n >= 1 => n,
        Some(_) => {
            eprintln!("usage: bcast_barrier [IFACE] [MEMBERS]");
            return ExitCode::from(2);
        }
    };
    let membership = if ethbcast::rank_size_from_env(|k| std::env::var(k).ok()).is_some() {
        Membership::Env
    } else {
        Membership::Discover { expected: members }
    };
    let key =
        match ethbcast::key_from_env(|v| std::env::var_os(v), GroupOptions::default().group_id) {
            Ok(key) => key,
            Err(e) => {
                eprintln!("bcast_barrier: {e}");
                return ExitCode::FAILURE;
            }
        };
    let opts = GroupOptions {
        timeout: Duration::from_secs(30),
        key,
        ..GroupOptions::default()
    };
    let mut g = match Group::open(&iface, membership, opts) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("bcast_barrier: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (me, n) = (g.rank(), g.size());
    let mut run = || -> Result<Duration, ethbcast::GroupError> {
        let t0 = Instant::now();
        for root in 0..n {
            let mut buf = if me == Rank::new(root) {
                format!("hello from rank {root}").into_bytes()
            } else {
                Vec::new()
            };
            g.bcast(Rank::new(root), &mut buf)?;
            println!("rank {me}: from {root}: {}", String::from_utf8_lossy(&buf));
        }
        g.barrier()?;
        let took = t0.elapsed();
        // Serve late repairs before leaving.
        g.flush()?;
        for _ in 0..10 {
            g.progress(Duration::from_millis(10))?;
        }
        Ok(took)
    };
    match run() {
        Ok(took) => {
            println!("rank {me} of {n}: {n} broadcasts and a barrier in {took:?}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rank {me}: {e}");
            ExitCode::FAILURE
        }
    }
}
