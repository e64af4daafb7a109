//! The protocol on the simulated switch, as specifications: whatever the faults, every message
//! is delivered exactly once, in order, byte-identical, at every receiver, and the run ends.

use std::time::Duration;

use ethbcast::cluster::{run, Report, Scenario, LINK_HOLDS};
use ethbcast::{Faults, Rank};
use ethbcast_proto::Algorithm;
use proptest::prelude::*;

fn assert_perfect(r: &Report) {
    assert!(r.completed, "run did not finish: {r:?}");
    assert_eq!(
        (
            r.deliveries.corrupt,
            r.deliveries.duplicated,
            r.deliveries.out_of_order,
            r.deliveries.missing
        ),
        (0, 0, 0, 0),
        "{r:?}"
    );
    assert_eq!(r.deliveries.delivered, r.deliveries.expected, "{r:?}");
}

fn hostile() -> Faults {
    Faults {
        loss: 0.05,
        burst_loss: 0.01,
        dup: 0.01,
        reorder: 0.01,
        reorder_delay: Duration::from_micros(200),
        corrupt: 0.001,
        ..Faults::NONE
    }
}

#[test]
fn sixteen_nodes_under_every_fault_at_once() {
    let mut sc = Scenario::new(16, 1500);
    sc.traffic.faults = hostile();
    let r = run(&sc).unwrap();
    assert_perfect(&r);
    assert!(r.lost_frames > 1000, "the faults were really there: {r:?}");
    assert!(
        r.corrupted_frames > 0 && r.bad_crc > 0,
        "corruption was injected and caught: {r:?}"
    );
}

#[test]
fn with_peer_repair_sixteen_nodes_under_every_fault_at_once() {
    let mut sc = Scenario::new(16, 1500);
    sc.traffic.faults = hostile();
    sc.tweak = |c| c.peer_repair = true;
    let r = run(&sc).unwrap();
    assert_perfect(&r);
    assert!(r.lost_frames > 1000, "the faults were really there: {r:?}");
    assert!(
        r.peer_repairs > r.lost_frames / 4,
        "members repaired each other: {r:?}"
    );
}

#[test]
fn with_receive_coalescing_a_large_group_under_every_fault_at_once() {
    // Members take the frames that reach them within 25 us in one turn (a NIC's interrupt
    // coalescing): when they take them changes, not what they deliver. 40 members: the
    // acknowledgement tree, peer repair and NACK combining at the roots all take part.
    let mut sc = Scenario::new(40, 300);
    sc.traffic.faults = hostile();
    sc.rx_coalesce = Duration::from_micros(25);
    let r = run(&sc).unwrap();
    assert_perfect(&r);
    assert!(r.lost_frames > 1000, "the faults were really there: {r:?}");
    assert!(r.peer_repairs > 0, "members repaired each other: {r:?}");
}

#[test]
fn members_that_observe_and_keep_nothing_under_every_fault_at_once() {
    // Every member checks each piece of each message as it consumes it (what the large-group
    // benchmark runs): 40 members, so the acknowledgement tree and peer repair take part.
    let mut sc = Scenario::new(40, 300);
    sc.traffic.faults = hostile();
    sc.traffic.sizes = vec![0, 1, 80, 1460, 5000, 65_536];
    sc.rx_coalesce = Duration::from_micros(25);
    sc.observe = true;
    let r = run(&sc).unwrap();
    assert_perfect(&r);
    assert!(r.lost_frames > 1000, "the faults were really there: {r:?}");
    assert!(r.peer_repairs > 0, "members repaired each other: {r:?}");
}

#[test]
fn repair_traffic_stays_close_to_what_was_lost() {
    let mut sc = Scenario::new(8, 800);
    sc.traffic.faults = Faults::lossy(0.05);
    let r = run(&sc).unwrap();
    assert_perfect(&r);
    let ratio = r.repair_frames as f64 / r.lost_frames as f64;
    assert!(ratio <= 1.3, "repair/lost = {ratio:.3}: {r:?}");
}

#[test]
fn push_pull_alone_and_simple_alone_both_survive_loss() {
    for algo in [Algorithm::Simple, Algorithm::PushPull] {
        let mut sc = Scenario::new(5, 300);
        sc.algos = vec![algo];
        sc.traffic.sizes = vec![1, 80, 860, 861, 3000, 100_000];
        sc.traffic.faults = hostile();
        assert_perfect(&run(&sc).unwrap());
    }
}

#[test]
fn fast_ethernet_links_and_the_paper_profile_work_too() {
    let mut sc = Scenario::new(8, 200);
    sc.traffic.rate_bps = Some(100_000_000);
    sc.traffic.faults = Faults::lossy(0.02);
    sc.tweak = |c| {
        let p = ethbcast_proto::EngineConfig::paper(c.group, c.rank, c.size);
        *c = p;
    };
    assert_perfect(&run(&sc).unwrap());
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let mut sc = Scenario::new(6, 200);
    sc.traffic.faults = hostile();
    sc.traffic.seed = 42;
    assert_eq!(run(&sc).unwrap(), run(&sc).unwrap());
}

#[test]
fn a_dead_receiver_stalls_the_root_but_nothing_wrong_is_delivered() {
    // Without failure detection and eviction (the group layer) a dead receiver holds the
    // shared buffer: the run must hit its limit, never deliver anything wrong.
    let mut sc = Scenario::new(4, 200);
    sc.roots = vec![Rank::new(0)];
    sc.per_port = vec![(
        3,
        Faults {
            dead: true,
            ..Faults::NONE
        },
    )];
    sc.limit = Duration::from_secs(2);
    let r = run(&sc).unwrap();
    assert!(!r.completed);
    assert_eq!(
        (
            r.deliveries.corrupt,
            r.deliveries.duplicated,
            r.deliveries.out_of_order
        ),
        (0, 0, 0)
    );
    assert!(r.deliveries.missing >= 200, "rank 3 got nothing: {r:?}");
}

/// Cases of the property test: 24, or `PROPTEST_CASES` to sweep more seeds (proptest draws
/// new ones each run; `PROPTEST_RNG_SEED` repeats a sweep).
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), .. ProptestConfig::default() })]
    #[test]
    fn any_seed_any_faults_every_message_exactly_once(
        seed in any::<u64>(),
        nodes in 2u16..9,
        loss in 0.0f64..0.15,
        burst in 0.0f64..0.02,
        dup in 0.0f64..0.05,
        reorder in 0.0f64..0.05,
        corrupt in 0.0f64..0.01,
        window in prop_oneof![Just(4usize), Just(16), Just(64)],
        peer_repair in any::<bool>(),
        // Ports that keep what their hosts read (the default), that keep so few that frames
        // waiting behind a gap leave them and are copied, and that keep nothing.
        link_holds in prop_oneof![2 => Just(LINK_HOLDS), 1 => Just(8usize), 1 => Just(0usize)],
        observe in any::<bool>(),
    ) {
        let mut sc = Scenario::new(nodes, 120);
        sc.traffic.seed = seed;
        sc.traffic.sizes = vec![0, 1, 79, 80, 81, 859, 860, 861, 1460, 5000, 40_000];
        sc.traffic.faults = Faults { loss, burst_loss: burst, dup, reorder, reorder_delay: Duration::from_micros(300), corrupt, ..Faults::NONE };
        sc.window = Some(window);
        sc.link_holds = link_holds;
        sc.observe = observe;
        if peer_repair {
            sc.tweak = |c| c.peer_repair = true;
        }
        let r = run(&sc).unwrap();
        prop_assert!(r.completed, "{:?}", r);
        prop_assert_eq!((r.deliveries.corrupt, r.deliveries.duplicated, r.deliveries.out_of_order, r.deliveries.missing), (0, 0, 0, 0));
    }
}

/// Four members under heavy loss with peer repair, every port keeping the frames its host read
/// and every member leaving the roots' frames there: every message is delivered.
#[test]
fn frames_left_in_the_ports_four_members_heavy_loss_seed_5512095000133342378() {
    let mut sc = Scenario::new(4, 120);
    sc.traffic.seed = 5512095000133342378;
    sc.traffic.sizes = vec![0, 1, 79, 80, 81, 859, 860, 861, 1460, 5000, 40_000];
    sc.traffic.faults = Faults {
        loss: 0.132387891301167,
        burst_loss: 0.015252392423559484,
        dup: 0.022905056205613863,
        reorder: 0.0025411957907434455,
        reorder_delay: Duration::from_micros(300),
        corrupt: 0.005982677650425295,
        ..Faults::NONE
    };
    sc.window = Some(64);
    sc.tweak = |c| c.peer_repair = true;
    sc.link_holds = LINK_HOLDS;
    assert_perfect(&run(&sc).unwrap());
}
