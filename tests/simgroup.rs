//! The group API on the simulated switch, as specifications: whatever the faults, every
//! surviving member completes every call with the root's bytes, every barrier releases, and
//! dead members are evicted by everybody within the detector's bound.

use ethbcast::link::sim::Faults;
use ethbcast::simgroup::{run_group, GroupReport, GroupScenario};

fn assert_perfect(r: &GroupReport) {
    assert!(r.perfect(), "{}\n{:?}", r.to_json(), r.first_error);
}

#[test]
fn eight_members_broadcast_with_every_algorithm_and_meet_at_barriers() {
    let r = run_group(&GroupScenario::new(8, 200)).unwrap();
    assert_perfect(&r);
    assert_eq!(r.expected, 200 * 7);
    assert_eq!(r.barriers_expected, 20 * 8);
}

#[test]
fn a_member_behind_a_broadcast_filter_is_served_point_to_point() {
    let mut sc = GroupScenario::new(6, 120);
    sc.filter = 1;
    let r = run_group(&sc).unwrap();
    assert_perfect(&r);
}

#[test]
fn when_broadcast_fails_for_many_the_roots_fall_back_to_the_tree() {
    let mut sc = GroupScenario::new(6, 120);
    sc.filter = 3;
    let r = run_group(&sc).unwrap();
    assert_perfect(&r);
    assert!(r.tree_fallbacks > 0, "{}", r.to_json());
}

#[test]
fn killed_members_are_evicted_within_the_bound_and_the_rest_go_on() {
    let mut sc = GroupScenario::new(12, 150);
    sc.kill = 2;
    let r = run_group(&sc).unwrap();
    assert_perfect(&r);
    assert_eq!(r.evicted.len(), 2);
}

#[test]
fn the_group_survives_every_fault_at_once() {
    let mut sc = GroupScenario::new(16, 200);
    sc.kill = 2;
    sc.filter = 1;
    sc.faults = Faults {
        loss: 0.02,
        burst_loss: 0.01,
        dup: 0.01,
        reorder: 0.01,
        corrupt: 0.001,
        ..Faults::NONE
    };
    let r = run_group(&sc).unwrap();
    assert_perfect(&r);
}

#[test]
fn the_same_seed_gives_the_same_report() {
    let mut sc = GroupScenario::new(8, 60);
    sc.kill = 1;
    sc.faults = Faults::lossy(0.02);
    let a = run_group(&sc).unwrap().to_json();
    let b = run_group(&sc).unwrap().to_json();
    assert_eq!(a, b);
}
