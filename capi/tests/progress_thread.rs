//! The C ABI's progress thread (`capi/src/endpoint.rs`) on a 2-host test-bed: it runs only
//! while its member owes peers something, and a link in error does not make it spin.
//!
//! Needs root (network namespaces); with `ETHBCAST_REQUIRE_NETNS=1` a missing capability fails
//! the test instead of skipping it.

use std::process::Command;
use std::time::{Duration, Instant};

use ethbcast::Membership;
use ethbcast::Rank;
use ethbcast_capi::endpoint::{Endpoint, EndpointOptions};
use ethbcast_testbed::{netns, netns_available, Testbed, TestbedConfig};

/// Both hosts join and broadcast once; the endpoints come back to the test's thread.
fn two_endpoints(bed: &Testbed) -> Vec<Endpoint> {
    let joins: Vec<_> = bed
        .hosts()
        .iter()
        .map(|h| {
            let iface = h.iface.clone();
            netns::spawn_in(&h.netns, move || {
                let mut opts = EndpointOptions::default();
                opts.host.membership = Membership::Discover { expected: 2 };
                opts.host.group.timeout = Duration::from_secs(20);
                // Keyless on the test's own namespaces.
                opts.host.group.insecure = true;
                let ep = Endpoint::open(&iface, opts).expect("open");
                let mut buf = [ep.rank().get() as u8; 8];
                ep.bcast(Rank::new(0), &mut buf).expect("bcast");
                assert_eq!(buf, [0u8; 8]);
                ep
            })
            .expect("thread in namespace")
        })
        .collect();
    joins.into_iter().map(|j| j.join().expect("join")).collect()
}

/// Progress threads of this process (the kernel keeps 15 bytes of a thread's name).
fn progress_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("list this process's threads")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim_end() == "ethbcast-progre")
        .count()
}

/// Waits up to 5 s for this process to have `n` progress threads; how many it has then. (A
/// new thread names itself once it runs.)
fn until_progress_threads(n: usize) -> usize {
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        let now = progress_threads();
        if now == n || Instant::now() > end {
            return now;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits up to 5 s until no endpoint of `eps` has a progress thread, whether the thread has
/// run and named itself yet or not; the progress threads this process has then.
fn until_no_progress_thread(eps: &[Endpoint]) -> usize {
    let end = Instant::now() + Duration::from_secs(5);
    while eps.iter().any(Endpoint::progress_thread_running) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(10));
    }
    until_progress_threads(0)
}

#[test]
fn a_progress_thread_runs_only_while_its_member_owes_peers_and_a_dead_link_does_not_make_it_spin() {
    if !netns_available(
        "a_progress_thread_runs_only_while_its_member_owes_peers_and_a_dead_link_does_not_make_it_spin",
        false,
    ) {
        return;
    }
    let prefix = format!("pt{:x}", std::process::id() & 0xfff);
    let bed = Testbed::up(&TestbedConfig::new(2).prefix(prefix)).expect("test-bed");
    let eps = two_endpoints(&bed);
    let polls = |ep: &Endpoint| ep.counters().background_polls;
    // A second after the last acknowledgements are out, no thread is left (a
    // sleeping thread in every rank made Open MPI's own 8 KiB `MPI_Bcast` about 25% slower),
    // and nothing looks at the link (the first schedule looked about 50 times in 500 ms).
    assert_eq!(until_no_progress_thread(&eps), 0, "progress threads left");
    let before = polls(&eps[1]);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(polls(&eps[1]) - before, 0, "looks with nothing to serve");
    // Host 1 broadcasts while host 0 is away: until host 0 acknowledges, host 1 owes it
    // repairs, so a call that returns leaves a thread behind.
    let mut msg = [7u8; 8];
    eps[1].bcast(Rank::new(1), &mut msg).expect("bcast as root");
    assert_eq!(
        until_progress_threads(1),
        1,
        "host 1 owes host 0 its message"
    );
    // Host 0 takes the message; its acknowledgement goes out from its own thread and host 1's
    // thread takes it: both leave.
    let mut got = [0u8; 8];
    eps[0]
        .bcast(Rank::new(1), &mut got)
        .expect("bcast as receiver");
    assert_eq!(got, msg);
    assert_eq!(until_no_progress_thread(&eps), 0, "progress threads left");
    // Host 1 owes again, then its interface goes away: its socket is in error from now on. Its
    // thread pauses between looks (every 10 ms at most), never spins.
    eps[1].bcast(Rank::new(1), &mut msg).expect("bcast as root");
    assert_eq!(until_progress_threads(1), 1);
    let h = &bed.hosts()[1];
    let out = Command::new("ip")
        .args(["-n", &h.netns, "link", "del", &h.iface])
        .output()
        .expect("run ip");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let before = polls(&eps[1]);
    std::thread::sleep(Duration::from_millis(500));
    let dead = polls(&eps[1]) - before;
    assert!(dead <= 80, "{dead} looks in 500 ms at a dead link");
    drop(eps);
    assert_eq!(progress_threads(), 0, "closing joins the thread");
    bed.down().expect("tear down");
}
