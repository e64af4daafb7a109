//! Failures on real hosts, as `ethbcast-suite faults` runs them: a receiver killed during a
//! long broadcast is evicted and the survivors complete; a killed root makes the receivers'
//! calls fail cleanly; a member that broadcast frames do not reach is failed over to
//! point-to-point, and goes back to broadcast once they reach it again; forged frames from a host outside a keyed group are rejected. Detection
//! times are checked against the detector's bound (DBRR, `T_cleanup = 3 ceil(log2 n)
//! T_gossip`, plus the confirmation ping), with slack for a shared 2-core machine.

use ethbcast_testbed::netns_available;
use ethbcast_tools::suite::faults::{self, ScenarioResult};

/// Scheduling slack on a shared 2-core machine, on top of the protocol's bound.
const SLACK_MS: f64 = 150.0;

fn prefix(tag: &str) -> String {
    format!("f{tag}{:x}", std::process::id() & 0xfff)
}

fn check_detection(r: &ScenarioResult) {
    let (d, b) = (r.detect_ms.expect("measured"), r.bound_ms.expect("bound"));
    eprintln!("{}: detected after {d:.1} ms (bound {b:.1} ms)", r.name);
    assert!(d <= b + SLACK_MS, "{r:?}");
}

#[test]
fn a_receiver_killed_during_a_long_broadcast_is_evicted_and_the_others_complete() {
    if !netns_available(
        "a_receiver_killed_during_a_long_broadcast_is_evicted_and_the_others_complete",
        true,
    ) {
        return;
    }
    let r = faults::receiver_killed(&prefix("a"), 5, 1.0).expect("test-bed");
    assert!(r.detail.contains("survivors got all 150"), "{r:?}");
    check_detection(&r);
}

#[test]
fn a_killed_root_makes_the_receivers_fail_cleanly_within_the_bound() {
    if !netns_available(
        "a_killed_root_makes_the_receivers_fail_cleanly_within_the_bound",
        false,
    ) {
        return;
    }
    let r = faults::root_killed(&prefix("b"), 4).expect("test-bed");
    assert!(r.detail.contains("failed with PeerDead(0)"), "{r:?}");
    check_detection(&r);
}

#[test]
fn a_member_whose_broadcast_frames_are_filtered_is_served_point_to_point() {
    if !netns_available(
        "a_member_whose_broadcast_frames_are_filtered_is_served_point_to_point",
        true,
    ) {
        return;
    }
    let r = faults::broadcast_filtered(&prefix("c"), 4).expect("test-bed");
    assert!(r.passed, "{r:?}");
    assert!(r.detail.contains("failed over [2]"), "{r:?}");
}

#[test]
fn a_member_whose_broadcast_filter_is_lifted_goes_back_to_broadcast() {
    if !netns_available(
        "a_member_whose_broadcast_filter_is_lifted_goes_back_to_broadcast",
        true,
    ) {
        return;
    }
    let r = faults::broadcast_filter_lifted(&prefix("f"), 4).expect("test-bed");
    assert!(r.passed, "{r:?}");
}

#[test]
fn when_broadcast_fails_for_many_the_group_falls_back_to_the_tree() {
    if !netns_available(
        "when_broadcast_fails_for_many_the_group_falls_back_to_the_tree",
        true,
    ) {
        return;
    }
    let r = faults::broadcast_filtered_for_many(&prefix("e"), 5).expect("test-bed");
    assert!(r.passed, "{r:?}");
}

#[test]
fn with_a_group_key_a_host_outside_the_group_cannot_inject() {
    if !netns_available(
        "with_a_group_key_a_host_outside_the_group_cannot_inject",
        false,
    ) {
        return;
    }
    let r = faults::forged_frames(&prefix("d"), 2).expect("test-bed");
    assert!(r.passed, "{r:?}");
}
