//! Failures on real hosts: a receiver killed during a long broadcast is evicted and the
//! survivors complete; a killed root makes the receivers' call fail cleanly; both within the
//! failure detector's bound (gossip DBRR, `T_cleanup = 3 ceil(log2 n) T_gossip`, plus the
//! confirmation ping).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ethbcast::detect::Gossip;
use ethbcast::group::{Algorithm, Detection, Group, GroupError, GroupOptions};
use ethbcast::node::NodeError;
use ethbcast_tools::netns;
use ethbcast_tools::testbed::{netns_available, Testbed, TestbedConfig};

const DETECTION: Detection = Detection {
    protocol: Gossip::DoubleBinaryRoundRobin,
    t_gossip: Duration::from_millis(10),
};
/// Scheduling slack on a shared 2-core machine, on top of the protocol's bound.
const SLACK: Duration = Duration::from_millis(150);

fn bed(tag: &str, hosts: usize, loss: f64) -> Testbed {
    let mut cfg = TestbedConfig::new(hosts);
    cfg.prefix = format!("f{tag}{:x}", std::process::id() & 0xfff);
    if loss > 0.0 {
        cfg.loss_pct = Some(loss);
    }
    Testbed::up(&cfg).expect("test-bed")
}

/// Rank, intact messages, evictions the calls reported, evictions with their instants.
type Survivor = (u16, usize, Vec<u16>, Vec<(u16, Instant)>);
/// Rank, message index reached, the error and when it came.
type Receiver = (u16, usize, Option<(GroupError, Instant)>);

fn opts() -> GroupOptions {
    GroupOptions {
        detector: Some(DETECTION),
        timeout: Duration::from_secs(20),
        ..GroupOptions::default()
    }
}

fn msg(i: usize) -> Vec<u8> {
    (0..20_000).map(|k| (k as u8) ^ (i as u8)).collect()
}

#[test]
fn a_receiver_killed_during_a_long_broadcast_is_evicted_and_the_others_complete() {
    if !netns_available(
        "a_receiver_killed_during_a_long_broadcast_is_evicted_and_the_others_complete",
        true,
    ) {
        return;
    }
    let n = 5;
    let victim = 3u16;
    let bed = bed("a", n, 1.0);
    let macs: Vec<[u8; 6]> = bed.hosts().iter().map(|h| h.mac).collect();
    let killed_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let handles: Vec<_> = bed
        .hosts()
        .iter()
        .map(|h| {
            let (macs, killed_at) = (macs.clone(), killed_at.clone());
            netns::spawn_in(&h.netns, move || -> Result<Survivor, GroupError> {
                let link = ethbcast::link::open(Default::default(), "eth0", Default::default())?;
                let mut g = Group::from_link(link, macs, opts())?;
                let me = g.rank();
                let mut intact = 0;
                let mut reported = Vec::new();
                for i in 0..150 {
                    if me == victim && i == 30 {
                        // Killed: the thread stops and its socket closes; nothing more is sent.
                        *killed_at.lock().unwrap() = Some(Instant::now());
                        return Ok((me, intact, reported, Vec::new()));
                    }
                    let mut buf = if me == 0 { msg(i) } else { Vec::new() };
                    let out = g.bcast_with(0, &mut buf, Algorithm::Simple)?;
                    reported.extend(out.evicted);
                    intact += usize::from(buf == msg(i));
                }
                g.flush()?;
                for _ in 0..30 {
                    g.progress(Duration::from_millis(10))?;
                }
                let ev = g.node().evicted().to_vec();
                Ok((me, intact, reported, ev))
            })
            .unwrap()
        })
        .collect();
    let results: Vec<_> = handles
        .into_iter()
        .map(|h| h.join().unwrap().expect("member"))
        .collect();
    let killed = killed_at.lock().unwrap().expect("victim ran");
    let bound = DETECTION.bound(n as u16);
    for (me, intact, reported, evicted) in &results {
        if *me == victim {
            continue;
        }
        assert_eq!(*intact, 150, "rank {me} got every message");
        if *me == 0 {
            assert_eq!(
                reported,
                &vec![victim],
                "the root's calls report the eviction"
            );
            let (rank, at) = evicted[0];
            assert_eq!(rank, victim);
            let detect = at.duration_since(killed);
            eprintln!("detected rank {victim} dead after {detect:?} (bound {bound:?})");
            assert!(
                detect <= bound + SLACK,
                "detection took {detect:?}, bound {bound:?}"
            );
        }
    }
}

#[test]
fn a_killed_root_makes_the_receivers_fail_cleanly_within_the_bound() {
    if !netns_available(
        "a_killed_root_makes_the_receivers_fail_cleanly_within_the_bound",
        false,
    ) {
        return;
    }
    let n = 4;
    let bed = bed("b", n, 0.0);
    let macs: Vec<[u8; 6]> = bed.hosts().iter().map(|h| h.mac).collect();
    let killed_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let handles: Vec<_> = bed
        .hosts()
        .iter()
        .map(|h| {
            let (macs, killed_at) = (macs.clone(), killed_at.clone());
            netns::spawn_in(&h.netns, move || -> Result<Receiver, GroupError> {
                let link = ethbcast::link::open(Default::default(), "eth0", Default::default())?;
                let mut g = Group::from_link(link, macs, opts())?;
                let me = g.rank();
                for i in 0..1000 {
                    if me == 0 && i == 10 {
                        *killed_at.lock().unwrap() = Some(Instant::now());
                        return Ok((me, i, None));
                    }
                    let mut buf = if me == 0 { msg(i) } else { Vec::new() };
                    if let Err(e) = g.bcast_with(0, &mut buf, Algorithm::PushPull) {
                        return Ok((me, i, Some((e, Instant::now()))));
                    }
                    assert_eq!(buf, msg(i), "nothing half-received is delivered");
                }
                Ok((me, 1000, None))
            })
            .unwrap()
        })
        .collect();
    let results: Vec<_> = handles
        .into_iter()
        .map(|h| h.join().unwrap().expect("member"))
        .collect();
    let killed = killed_at.lock().unwrap().expect("root ran");
    let bound = DETECTION.bound(n as u16);
    for (me, at, failure) in results.into_iter().skip(1) {
        let (err, when) =
            failure.unwrap_or_else(|| panic!("rank {me} did not notice the dead root"));
        assert_eq!(
            at, 10,
            "rank {me} failed at the first message the root never sent"
        );
        assert!(
            matches!(err, GroupError::Node(NodeError::PeerDead(0))),
            "rank {me}: {err}"
        );
        let detect = when.duration_since(killed);
        eprintln!("rank {me}: root declared dead after {detect:?} (bound {bound:?})");
        assert!(detect <= bound + SLACK, "rank {me}: {detect:?} > {bound:?}");
    }
}
