//! The group API between real hosts of the namespace test-bed: discovery, bcast from every
//! root with every algorithm, and a clean error when a member is missing.

use std::time::Duration;

use ethbcast::group::{Algorithm, BarrierKind, Group, GroupError, GroupOptions, Membership};
use ethbcast_tools::netns;
use ethbcast_tools::testbed::{netns_available, Testbed, TestbedConfig};

fn bed(tag: &str, hosts: usize, loss: f64) -> Testbed {
    let mut cfg = TestbedConfig::new(hosts);
    cfg.prefix = format!("g{tag}{:x}", std::process::id() & 0xfff);
    if loss > 0.0 {
        cfg.loss_pct = Some(loss);
    }
    Testbed::up(&cfg).expect("test-bed")
}

fn payload(root: u16, round: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8) ^ (root as u8).wrapping_mul(37) ^ (round as u8))
        .collect()
}

#[test]
fn discovered_group_broadcasts_from_every_root_with_every_algorithm() {
    if !netns_available(
        "discovered_group_broadcasts_from_every_root_with_every_algorithm",
        true,
    ) {
        return;
    }
    let n = 6;
    let bed = bed("a", n, 2.0);
    let handles: Vec<_> = bed
        .hosts()
        .iter()
        .map(|h| {
            netns::spawn_in(
                &h.netns,
                move || -> Result<Vec<(u16, Algorithm, bool)>, GroupError> {
                    let opts = GroupOptions {
                        timeout: Duration::from_secs(20),
                        ..GroupOptions::default()
                    };
                    let mut g =
                        Group::open("eth0", Membership::Discover { expected: n as u16 }, opts)?;
                    let mut seen = Vec::new();
                    for (round, algo) in [Algorithm::PushPull, Algorithm::Simple, Algorithm::Tree]
                        .into_iter()
                        .enumerate()
                    {
                        for root in 0..g.size() {
                            for len in [8usize, 1000, 70_000] {
                                let mut buf = if g.rank() == root {
                                    payload(root, round, len)
                                } else {
                                    Vec::new()
                                };
                                g.bcast_with(root, &mut buf, algo)?;
                                seen.push((root, algo, buf == payload(root, round, len)));
                            }
                        }
                    }
                    for kind in [BarrierKind::Broadcast, BarrierKind::Dissemination] {
                        for _ in 0..5 {
                            g.barrier_with(kind)?;
                        }
                    }
                    g.flush()?;
                    // Keep answering repairs a little while others finish.
                    for _ in 0..20 {
                        g.progress(Duration::from_millis(10))?;
                    }
                    Ok(seen)
                },
            )
            .unwrap()
        })
        .collect();
    for h in handles {
        let seen = h.join().expect("member thread").expect("member");
        assert_eq!(seen.len(), 3 * n * 3);
        assert!(seen.iter().all(|&(_, _, ok)| ok), "{seen:?}");
    }
}

#[test]
fn joining_with_a_member_missing_fails_with_a_clear_timeout() {
    if !netns_available(
        "joining_with_a_member_missing_fails_with_a_clear_timeout",
        false,
    ) {
        return;
    }
    let bed = bed("b", 3, 0.0);
    let handles: Vec<_> = bed.hosts()[..2]
        .iter()
        .map(|h| {
            netns::spawn_in(&h.netns, || {
                let opts = GroupOptions {
                    timeout: Duration::from_millis(500),
                    ..GroupOptions::default()
                };
                Group::open("eth0", Membership::Discover { expected: 3 }, opts).map(|_| ())
            })
            .unwrap()
        })
        .collect();
    for h in handles {
        match h.join().unwrap() {
            Err(GroupError::JoinTimeout {
                joined: 2,
                expected: 3,
                ..
            }) => {}
            other => panic!("expected a join timeout, got {other:?}"),
        }
    }
}

#[test]
fn nobody_leaves_a_barrier_before_the_last_member_enters() {
    if !netns_available(
        "nobody_leaves_a_barrier_before_the_last_member_enters",
        true,
    ) {
        return;
    }
    use std::sync::{Arc, Mutex};
    use std::time::Instant;
    let n = 5;
    let bed = bed("c", n, 5.0);
    let macs: Vec<[u8; 6]> = bed.hosts().iter().map(|h| h.mac).collect();
    let late_entry: Arc<Mutex<Vec<Instant>>> = Arc::new(Mutex::new(Vec::new()));
    let handles: Vec<_> = bed
        .hosts()
        .iter()
        .map(|h| {
            let (macs, late_entry) = (macs.clone(), late_entry.clone());
            netns::spawn_in(&h.netns, move || -> Result<Vec<Instant>, GroupError> {
                let link = ethbcast::link::open(Default::default(), "eth0", Default::default())?;
                let opts = GroupOptions {
                    timeout: Duration::from_secs(20),
                    barrier_arity: 2,
                    ..GroupOptions::default()
                };
                let mut g = Group::from_link(link, macs, opts)?;
                let mut released = Vec::new();
                for (i, kind) in [
                    BarrierKind::Broadcast,
                    BarrierKind::Dissemination,
                    BarrierKind::Broadcast,
                ]
                .into_iter()
                .enumerate()
                {
                    // A different member is late each time.
                    if usize::from(g.rank()) == (i * 2 + 1) % n {
                        let t = Instant::now() + Duration::from_millis(150);
                        while Instant::now() < t {
                            g.progress(Duration::from_millis(5))?;
                        }
                        late_entry.lock().unwrap().push(Instant::now());
                    }
                    g.barrier_with(kind)?;
                    released.push(Instant::now());
                }
                g.flush()?;
                for _ in 0..20 {
                    g.progress(Duration::from_millis(10))?;
                }
                Ok(released)
            })
            .unwrap()
        })
        .collect();
    let released: Vec<Vec<Instant>> = handles
        .into_iter()
        .map(|h| h.join().unwrap().expect("member"))
        .collect();
    let late = late_entry.lock().unwrap().clone();
    assert_eq!(late.len(), 3);
    for r in &released {
        for (i, t) in r.iter().enumerate() {
            assert!(
                *t >= late[i],
                "barrier {i} released a member before the late one entered"
            );
        }
    }
}

#[test]
fn with_a_group_key_a_host_outside_the_group_cannot_inject() {
    if !netns_available(
        "with_a_group_key_a_host_outside_the_group_cannot_inject",
        false,
    ) {
        return;
    }
    use ethbcast::group::key_from_passphrase;
    use ethbcast::link::BROADCAST_MAC;
    use ethbcast::wire::{Flags, Kind, Repr, ALL};
    let bed = bed("d", 3, 0.0);
    let members: Vec<[u8; 6]> = bed.hosts()[..2].iter().map(|h| h.mac).collect();
    let opts = GroupOptions {
        key: Some(key_from_passphrase("s3cret")),
        timeout: Duration::from_secs(10),
        ..GroupOptions::default()
    };
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Host 2 is not a member: it takes root 0's MAC address and blasts forged data frames
    // claiming to be root 0, so only the keyed MAC can tell them apart.
    let spoof = ethbcast::link::format_mac(&members[0]);
    let st = std::process::Command::new("ip")
        .args([
            "-n",
            &bed.hosts()[2].netns,
            "link",
            "set",
            "eth0",
            "address",
            &spoof,
        ])
        .status()
        .unwrap();
    assert!(st.success());
    let attacker = {
        let stop = stop.clone();
        let gid = opts.group_id;
        netns::spawn_in(&bed.hosts()[2].netns, move || {
            let mut link =
                ethbcast::link::open(Default::default(), "eth0", Default::default()).unwrap();
            let mut sent = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for seq in 0..8u32 {
                    let mut r = Repr::new(Kind::Data);
                    r.group = gid;
                    r.src = 0;
                    r.dst = ALL;
                    r.seq = seq;
                    r.msg_id = seq;
                    r.msg_len = 4;
                    r.flags = Flags::LAST | Flags::BROADCAST;
                    link.send(BROADCAST_MAC, &r.to_vec(b"EVIL").unwrap())
                        .unwrap();
                    sent += 1;
                }
                link.flush().unwrap();
                std::thread::sleep(Duration::from_millis(2));
            }
            sent
        })
        .unwrap()
    };
    let handles: Vec<_> = bed.hosts()[..2]
        .iter()
        .map(|h| {
            let (members, opts) = (members.clone(), opts.clone());
            netns::spawn_in(
                &h.netns,
                move || -> Result<(Vec<Vec<u8>>, u64), GroupError> {
                    let link =
                        ethbcast::link::open(Default::default(), "eth0", Default::default())?;
                    let mut g = Group::from_link(link, members, opts)?;
                    let mut got = Vec::new();
                    for i in 0..20u8 {
                        let mut buf = if g.rank() == 0 {
                            vec![i; 100]
                        } else {
                            Vec::new()
                        };
                        g.bcast(0, &mut buf)?;
                        got.push(buf);
                    }
                    g.flush()?;
                    for _ in 0..10 {
                        g.progress(Duration::from_millis(10))?;
                    }
                    Ok((got, g.node().engine().stats().drops.bad_mac))
                },
            )
            .unwrap()
        })
        .collect();
    let results: Vec<_> = handles
        .into_iter()
        .map(|h| h.join().unwrap().expect("member"))
        .collect();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let forged = attacker.join().unwrap();
    assert!(forged > 0);
    let (got, bad_mac) = &results[1];
    assert_eq!(
        got,
        &(0..20u8).map(|i| vec![i; 100]).collect::<Vec<_>>(),
        "only the root's real messages"
    );
    assert!(*bad_mac > 0, "forged frames were seen and rejected");
}

#[test]
fn a_member_whose_broadcast_frames_are_filtered_is_served_point_to_point() {
    if !netns_available(
        "a_member_whose_broadcast_frames_are_filtered_is_served_point_to_point",
        true,
    ) {
        return;
    }
    let mut bed = bed("e", 4, 0.0);
    bed.drop_broadcast_to(2, true).expect("nft rule");
    let macs: Vec<[u8; 6]> = bed.hosts().iter().map(|h| h.mac).collect();
    let handles: Vec<_> = bed
        .hosts()
        .iter()
        .map(|h| {
            let macs = macs.clone();
            netns::spawn_in(&h.netns, move || -> Result<(bool, Vec<u16>), GroupError> {
                let link = ethbcast::link::open(Default::default(), "eth0", Default::default())?;
                let opts = GroupOptions {
                    timeout: Duration::from_secs(30),
                    ..GroupOptions::default()
                };
                let mut g = Group::from_link(link, macs, opts)?;
                let mut ok = true;
                for round in 0..60 {
                    let mut buf = if g.rank() == 0 {
                        payload(0, round, 3000)
                    } else {
                        Vec::new()
                    };
                    g.bcast_with(0, &mut buf, Algorithm::Simple)?;
                    ok &= buf == payload(0, round, 3000);
                }
                g.flush()?;
                for _ in 0..20 {
                    g.progress(Duration::from_millis(10))?;
                }
                Ok((ok, g.node().engine().sender().failed_over()))
            })
            .unwrap()
        })
        .collect();
    let results: Vec<_> = handles
        .into_iter()
        .map(|h| h.join().unwrap().expect("member"))
        .collect();
    assert!(
        results.iter().all(|r| r.0),
        "every member got every message intact"
    );
    assert_eq!(
        results[0].1,
        vec![2],
        "the root serves rank 2 point-to-point"
    );
    assert!(
        bed.drop_counters().expect("nft counters").isolated > 0,
        "broadcasts to rank 2 really were dropped"
    );
}
