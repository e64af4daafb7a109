//! End to end on real hosts: network namespaces joined by a Linux bridge, raw Ethernet
//! broadcast through the kernel, loss injected by nftables at the bridge. Every delivery at
//! every host is checked byte for byte by the self-test.
//!
//! Needs root. In CI (`ETHBCAST_REQUIRE_NETNS=1`) a missing privilege fails; elsewhere the
//! tests say loudly that they were skipped.

use ethbcast::{Algorithm, Backend};
use ethbcast_testbed::{netns_available, Rate};
use ethbcast_tools::suite::selftest::{run, SelftestOptions, Verdict};

fn prefix(tag: &str) -> String {
    format!("e{tag}{:x}", std::process::id() & 0xfff)
}

fn check(test: &str, o: SelftestOptions) -> Option<Verdict> {
    if !netns_available(test, o.loss > 0.0) {
        return None;
    }
    let v = run(&o).unwrap_or_else(|e| panic!("{test}: {e}"));
    assert!(v.errors.is_empty(), "{test}: {:?}", v.errors);
    assert_eq!(v.delivered, v.expected, "{test}: {v:?}");
    assert_eq!(
        (v.corrupt, v.missing, v.duplicated),
        (0, 0, 0),
        "{test}: {v:?}"
    );
    assert!(v.passed);
    Some(v)
}

#[test]
fn two_hosts_without_loss() {
    let mut o = SelftestOptions::new(2);
    o.prefix = prefix("a");
    o.messages = 30;
    if let Some(v) = check("two_hosts_without_loss", o) {
        // Without loss repairs only come from timers firing late on a busy machine.
        assert_eq!(v.dropped_by_switch, 0, "{v:?}");
        assert!(
            v.repair_frames * 10 <= v.data_frames,
            "repairs without loss stay rare: {v:?}"
        );
    }
}

#[test]
fn four_hosts_one_percent_loss_both_algorithms() {
    let mut o = SelftestOptions::new(4);
    o.prefix = prefix("b");
    o.loss = 1.0;
    o.messages = 40;
    check("four_hosts_one_percent_loss_both_algorithms", o);
}

#[test]
fn eight_hosts_five_percent_loss_messages_of_many_frames() {
    let mut o = SelftestOptions::new(8);
    o.prefix = prefix("c");
    o.loss = 5.0;
    o.messages = 40;
    if let Some(v) = check("eight_hosts_five_percent_loss_messages_of_many_frames", o) {
        assert!(
            v.dropped_by_switch > 0 && v.repair_frames > 0,
            "loss was real and repaired: {v:?}"
        );
    }
}

#[test]
fn eight_hosts_one_percent_loss_each_algorithm_alone() {
    for (tag, algo) in [("d", Algorithm::Simple), ("e", Algorithm::PushPull)] {
        let mut o = SelftestOptions::new(8);
        o.prefix = prefix(tag);
        o.loss = 1.0;
        o.algos = vec![algo];
        o.messages = 30;
        check("eight_hosts_one_percent_loss_each_algorithm_alone", o);
    }
}

#[test]
fn socket_and_pnet_backends_are_reliable_too() {
    for (tag, backend) in [("f", Backend::Socket), ("g", Backend::Pnet)] {
        let mut o = SelftestOptions::new(4);
        o.prefix = prefix(tag);
        o.loss = 1.0;
        o.backend = backend;
        o.messages = 20;
        check("socket_and_pnet_backends_are_reliable_too", o);
    }
}

#[test]
fn fast_ethernet_rate_limit() {
    let mut o = SelftestOptions::new(4);
    o.prefix = prefix("h");
    o.rate = Some("100mbit".parse::<Rate>().unwrap());
    o.loss = 1.0;
    o.messages = 20;
    o.sizes = vec![8, 256, 4096, 65536, 300_000];
    check("fast_ethernet_rate_limit", o);
}

#[test]
fn xdp_backend_is_reliable_under_loss() {
    let mut o = SelftestOptions::new(4);
    o.prefix = prefix("x");
    o.loss = 5.0;
    o.backend = Backend::Xdp;
    o.messages = 20;
    if let Some(v) = check("xdp_backend_is_reliable_under_loss", o) {
        assert!(
            v.dropped_by_switch > 0 && v.repair_frames > 0,
            "loss was real and repaired: {v:?}"
        );
    }
}
