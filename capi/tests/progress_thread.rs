//! The C ABI's progress thread (`capi/src/endpoint.rs`) on a 2-host test-bed: it sleeps on the
//! link while there is nothing to serve, and a link in error does not make it spin.
//!
//! Needs root (network namespaces); with `ETHBCAST_REQUIRE_NETNS=1` a missing capability fails
//! the test instead of skipping it.

use std::process::Command;
use std::time::Duration;

use ethbcast::group::Membership;
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
                let ep = Endpoint::open(&iface, opts).expect("open");
                let mut buf = [ep.rank() as u8; 8];
                ep.bcast(0, &mut buf).expect("bcast");
                assert_eq!(buf, [0u8; 8]);
                ep
            })
            .expect("thread in namespace")
        })
        .collect();
    joins.into_iter().map(|j| j.join().expect("join")).collect()
}

#[test]
fn a_progress_thread_with_nothing_to_serve_sleeps_and_a_dead_link_does_not_make_it_spin() {
    if !netns_available(
        "a_progress_thread_with_nothing_to_serve_sleeps_and_a_dead_link_does_not_make_it_spin",
        false,
    ) {
        return;
    }
    let prefix = format!("pt{:x}", std::process::id() & 0xfff);
    let bed = Testbed::up(&TestbedConfig::new(2).prefix(prefix)).expect("test-bed");
    let eps = two_endpoints(&bed);
    let polls = |ep: &Endpoint| ep.counters().background_polls;
    // Nothing in flight: a look or two for the last acknowledgements, then sleep (the old
    // schedule looked about 50 times in 500 ms).
    std::thread::sleep(Duration::from_millis(100));
    let before = polls(&eps[1]);
    std::thread::sleep(Duration::from_millis(500));
    let idle = polls(&eps[1]) - before;
    assert!(idle <= 5, "{idle} looks in 500 ms with nothing to serve");
    // Host 1's interface goes away: its socket is in error from now on. The thread pauses
    // between looks (every 10 ms at most), never spins.
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
    bed.down().expect("tear down");
}
