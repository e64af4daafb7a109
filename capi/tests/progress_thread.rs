//! The C ABI's progress thread (`capi/src/endpoint.rs`) on a 2-host test-bed: it runs only
//! while its member owes peers something, a link in error does not make it spin, and a caller
//! that keeps calling wakes it ever less often.
//!
//! Needs root (network namespaces); with `ETHBCAST_REQUIRE_NETNS=1` a missing capability fails
//! the test instead of skipping it.

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ethbcast::Membership;
use ethbcast::Rank;
use ethbcast_capi::endpoint::{Endpoint, EndpointOptions};
use ethbcast_testbed::{netns, netns_available, Testbed, TestbedConfig};

/// The tests count this process's progress threads, so they run one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The test `test`'s 2-host test-bed (namespaces named from `tag`) and its endpoints, with the
/// turn of this file's tests held; `None` where namespaces are unavailable and not required.
fn two_hosts(test: &str, tag: &str) -> Option<(MutexGuard<'static, ()>, Testbed, Vec<Endpoint>)> {
    let one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    if !netns_available(test, false) {
        return None;
    }
    let prefix = format!("{tag}{:x}", std::process::id() & 0xfff);
    let bed = Testbed::up(&TestbedConfig::new(2).prefix(prefix)).expect("test-bed");
    let eps = two_endpoints(&bed);
    Some((one, bed, eps))
}

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

/// The `/proc` directories of this process's progress threads (the kernel keeps 15 bytes of
/// a thread's name).
fn progress_thread_dirs() -> Vec<PathBuf> {
    std::fs::read_dir("/proc/self/task")
        .expect("list this process's threads")
        .filter_map(|t| {
            let dir = t.ok()?.path();
            let name = std::fs::read_to_string(dir.join("comm")).ok()?;
            (name.trim_end() == "ethbcast-progre").then_some(dir)
        })
        .collect()
}

/// Progress threads of this process.
fn progress_threads() -> usize {
    progress_thread_dirs().len()
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
    let Some((_one, bed, eps)) = two_hosts(
        "a_progress_thread_runs_only_while_its_member_owes_peers_and_a_dead_link_does_not_make_it_spin",
        "pt",
    ) else {
        return;
    };
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

/// The voluntary context switches of this process's progress threads, summed: each is a sleep
/// the thread began, so each wake-up but the last ends one.
fn progress_thread_sleeps() -> u64 {
    progress_thread_dirs()
        .iter()
        .filter_map(|dir| {
            let status = std::fs::read_to_string(dir.join("status")).ok()?;
            status
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .sum()
}

#[test]
fn a_caller_that_keeps_calling_wakes_its_progress_thread_ever_less_often() {
    let Some((_one, bed, eps)) = two_hosts(
        "a_caller_that_keeps_calling_wakes_its_progress_thread_ever_less_often",
        "pw",
    ) else {
        return;
    };
    // Both hosts call barriers a millisecond apart, as a program's loop of collectives does.
    // Each barrier leaves its member owing the barrier's stragglers an answer, so both keep a
    // progress thread; the callers serve the group themselves, and the threads only look
    // whether their caller went away.
    let barriers = |ep: &Endpoint, n: usize| {
        for _ in 0..n {
            ep.barrier().expect("barrier");
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    let run = |n: usize| {
        std::thread::scope(|s| {
            for ep in &eps {
                s.spawn(move || barriers(ep, n));
            }
        })
    };
    run(50);
    assert_eq!(until_progress_threads(2), 2, "both members owe stragglers");
    let (before, t0) = (progress_thread_sleeps(), Instant::now());
    run(1000);
    let (sleeps, secs) = (
        progress_thread_sleeps() - before,
        t0.elapsed().as_secs_f64(),
    );
    // Looking once per 10 ms would be 100 sleeps a second per thread; doubling the look's
    // interval up to 80 ms while the caller keeps coming back makes it about 13. (A caller
    // descheduled for the whole grace is served once, and the looks start at 10 ms again.)
    assert!(
        sleeps as f64 <= 2.0 * 40.0 * secs,
        "{sleeps} sleeps of 2 progress threads in {secs:.2} s of calls"
    );
    assert_eq!(until_progress_threads(2), 2, "the threads stayed");
    drop(eps);
    bed.down().expect("tear down");
}
