//! The group API between real hosts of the namespace test-bed: discovery, bcast (both forms)
//! from every root with every algorithm, and a clean error when a member is missing.

use std::time::Duration;

use ethbcast::{Algorithm, BarrierAlgo, Group, GroupError, GroupOptions, Membership, Rank};
use ethbcast_testbed::netns;
use ethbcast_testbed::{netns_available, Testbed, TestbedConfig};

fn bed(tag: &str, hosts: usize, loss: f64) -> Testbed {
    let mut cfg = TestbedConfig::new(hosts);
    cfg.prefix = format!("g{tag}{:x}", std::process::id() & 0xfff);
    if loss > 0.0 {
        cfg.loss_pct = Some(loss);
    }
    Testbed::up(&cfg).expect("test-bed")
}

/// Runs `f` on a group of every host of `bed` (found by discovery, 20 s to answer), then lets
/// every member flush and serve its peers a while; fails with the first member's error.
fn every_member(
    bed: &Testbed,
    f: impl Fn(&mut Group) -> Result<(), String> + Clone + Send + 'static,
) {
    every_member_with(bed, GroupOptions::insecure(), f)
}

/// [`every_member`] with the group's options `opts` (but a 20 s timeout).
fn every_member_with(
    bed: &Testbed,
    opts: GroupOptions,
    f: impl Fn(&mut Group) -> Result<(), String> + Clone + Send + 'static,
) {
    let n = bed.hosts().len();
    let handles: Vec<_> = bed
        .hosts()
        .iter()
        .map(|h| {
            let f = f.clone();
            let opts = opts.clone();
            netns::spawn_in(&h.netns, move || -> Result<(), String> {
                let opts = GroupOptions {
                    timeout: Duration::from_secs(20),
                    ..opts
                };
                let e = |e: GroupError| e.to_string();
                let mut g = Group::open("eth0", Membership::Discover { expected: n as u16 }, opts)
                    .map_err(e)?;
                f(&mut g)?;
                g.flush().map_err(e)?;
                for _ in 0..20 {
                    g.progress(Duration::from_millis(10)).map_err(e)?;
                }
                Ok(())
            })
            .unwrap()
        })
        .collect();
    for h in handles {
        h.join().expect("member thread").expect("member");
    }
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
                        ..GroupOptions::insecure()
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
                                let mut buf = if g.rank() == Rank::new(root) {
                                    payload(root, round, len)
                                } else {
                                    Vec::new()
                                };
                                g.bcast_with(Rank::new(root), &mut buf, algo)?;
                                seen.push((root, algo, buf == payload(root, round, len)));
                                // The slice form: the root's frames cut from its slice as far
                                // as the window's room goes, the rest from a copy.
                                let mut slice = if g.rank() == Rank::new(root) {
                                    payload(root, round + 3, len)
                                } else {
                                    vec![0u8; len]
                                };
                                g.bcast_into_with(Rank::new(root), &mut slice, algo)?;
                                seen.push((root, algo, slice == payload(root, round + 3, len)));
                            }
                        }
                    }
                    for kind in [BarrierAlgo::Broadcast, BarrierAlgo::Dissemination] {
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
        assert_eq!(seen.len(), 3 * n * 3 * 2);
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
                    ..GroupOptions::insecure()
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
                let link = ethbcast::open_link(Default::default(), "eth0", Default::default())?;
                let opts = GroupOptions {
                    timeout: Duration::from_secs(20),
                    barrier_arity: 2,
                    ..GroupOptions::insecure()
                };
                let mut g = Group::from_link(link, macs, opts)?;
                let mut released = Vec::new();
                for (i, kind) in [
                    BarrierAlgo::Broadcast,
                    BarrierAlgo::Dissemination,
                    BarrierAlgo::Broadcast,
                ]
                .into_iter()
                .enumerate()
                {
                    // A different member is late each time.
                    if g.rank().index() == (i * 2 + 1) % n {
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

/// A root's call may return before its frames leave (a small message is handed over whole):
/// they must leave then, not at its next call. Here the root computes (sleeps) for two
/// seconds after each broadcast, and the receivers, whose calls time out after one, still
/// get every message.
#[test]
fn a_root_that_computes_after_its_call_does_not_hold_its_message_back() {
    if !netns_available(
        "a_root_that_computes_after_its_call_does_not_hold_its_message_back",
        true,
    ) {
        return;
    }
    let n = 3;
    let bed = bed("d", n, 0.0);
    let macs: Vec<[u8; 6]> = bed.hosts().iter().map(|h| h.mac).collect();
    let handles: Vec<_> = bed
        .hosts()
        .iter()
        .map(|h| {
            let macs = macs.clone();
            netns::spawn_in(&h.netns, move || -> Result<usize, GroupError> {
                let link = ethbcast::open_link(Default::default(), "eth0", Default::default())?;
                let opts = GroupOptions {
                    timeout: Duration::from_secs(10),
                    ..GroupOptions::insecure()
                };
                let mut g = Group::from_link(link, macs, opts)?;
                let mut got = 0;
                for (i, algo) in [Algorithm::PushPull, Algorithm::Simple]
                    .into_iter()
                    .enumerate()
                {
                    // Everybody is in step before the timed call.
                    g.barrier()?;
                    let mut buf = if g.rank() == Rank::new(0) {
                        payload(0, i, 100)
                    } else {
                        Vec::new()
                    };
                    if g.rank() == Rank::new(0) {
                        g.bcast_with(Rank::new(0), &mut buf, algo)?;
                        std::thread::sleep(Duration::from_secs(2));
                    } else {
                        let t = std::time::Instant::now();
                        g.bcast_with(Rank::new(0), &mut buf, algo)?;
                        if t.elapsed() < Duration::from_secs(1) && buf == payload(0, i, 100) {
                            got += 1;
                        }
                    }
                }
                g.barrier()?;
                g.flush()?;
                Ok(got)
            })
            .unwrap()
        })
        .collect();
    let got: Vec<usize> = handles
        .into_iter()
        .map(|h| h.join().expect("member thread").expect("member"))
        .collect();
    assert_eq!(
        got,
        vec![0, 2, 2],
        "receivers got each message within a second"
    );
}

/// Opens a discovered group of `n` on every host of `bed`, broadcasts one 64 KiB message
/// from rank 0, and returns each member's (frame size in use, data frames the root sent,
/// message intact).
fn jumbo_round(bed: &Testbed, n: usize) -> Vec<(usize, u64, bool)> {
    let handles: Vec<_> = bed
        .hosts()
        .iter()
        .map(|h| {
            netns::spawn_in(&h.netns, move || -> Result<_, GroupError> {
                let opts = GroupOptions {
                    timeout: Duration::from_secs(20),
                    ..GroupOptions::insecure()
                };
                let mut g = Group::open("eth0", Membership::Discover { expected: n as u16 }, opts)?;
                let want = payload(0, 0, 65_536);
                let mut buf = if g.rank() == Rank::new(0) {
                    want.clone()
                } else {
                    Vec::new()
                };
                g.bcast_with(Rank::new(0), &mut buf, Algorithm::Simple)?;
                g.flush()?;
                for _ in 0..20 {
                    g.progress(Duration::from_millis(10))?;
                }
                Ok((g.max_pdu(), g.stats().data_frames, buf == want))
            })
            .unwrap()
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("member thread").expect("member"))
        .collect()
}

#[test]
fn on_jumbo_frames_a_group_sends_jumbo_frames_unless_one_host_cannot_take_them() {
    if !netns_available(
        "on_jumbo_frames_a_group_sends_jumbo_frames_unless_one_host_cannot_take_them",
        true,
    ) {
        return;
    }
    let n = 3;
    let mut cfg = TestbedConfig::new(n).mtu(9000);
    cfg.prefix = format!("gj{:x}", std::process::id() & 0xfff);
    let bed = Testbed::up(&cfg).expect("test-bed");
    let got = jumbo_round(&bed, n);
    assert!(got.iter().all(|g| g.0 == 9000 && g.2), "{got:?}");
    let frames = |pdu: usize| 65_536u64.div_ceil((pdu - ethbcast_proto::OVERHEAD) as u64);
    // 64 KiB in frames of 9000 bytes less the header: 8 of them, not 45 of 1500.
    assert_eq!(frames(9000), 8);
    assert!(got.iter().any(|g| g.1 == frames(9000)), "{got:?}");
    // One host's interface at the standard MTU: its link drops every larger frame, so the
    // group must agree on 1500 to reach it.
    let host = &bed.hosts()[2].netns;
    let st = std::process::Command::new("ip")
        .args(["-n", host, "link", "set", "eth0", "mtu", "1500"])
        .status()
        .expect("ip");
    assert!(st.success());
    let got = jumbo_round(&bed, n);
    assert!(got.iter().all(|g| g.0 == 1500 && g.2), "{got:?}");
    assert!(got.iter().any(|g| g.1 == frames(1500)), "{got:?}");
}

/// Allgather between real hosts with 2% of ethbcast frames lost at the switch: parts whose
/// lengths the members learn from the call (`allgather`), parts of known lengths
/// (`allgather_into`, `allgather_in_place`), each member's part in rank order; a member whose
/// lengths disagree gets a length error, everyone else too, and the next call is right.
#[test]
fn every_member_gets_every_part_in_rank_order_and_a_wrong_length_does_not_shift_the_next() {
    if !netns_available(
        "every_member_gets_every_part_in_rank_order_and_a_wrong_length_does_not_shift_the_next",
        true,
    ) {
        return;
    }
    let n = 5;
    let bed = bed("ag", n, 2.0);
    let len_of = |r: usize, round: usize| (r * 700 + round * 37) % 3000;
    every_member(&bed, move |g| {
        let e = |e: GroupError| e.to_string();
        let me = g.rank().index();
        let want = |round: usize| -> Vec<u8> {
            (0..n)
                .flat_map(|r| payload(r as u16, round, len_of(r, round)))
                .collect()
        };
        let mut out = Vec::new();
        for round in 0..20 {
            let lens = g
                .allgather(&payload(me as u16, round, len_of(me, round)), &mut out)
                .map_err(e)?;
            let expected: Vec<usize> = (0..n).map(|r| len_of(r, round)).collect();
            if lens != expected || out != want(round) {
                return Err(format!("round {round}: lens {lens:?}, {} bytes", out.len()));
            }
            let mut into = vec![0u8; out.len()];
            g.allgather_into(
                &payload(me as u16, round, len_of(me, round)),
                &mut into,
                &lens,
            )
            .map_err(e)?;
            let mut in_place = vec![0u8; out.len()];
            let at: usize = lens[..me].iter().sum();
            in_place[at..at + lens[me]].copy_from_slice(&payload(me as u16, round, lens[me]));
            g.allgather_in_place(&mut in_place, &lens).map_err(e)?;
            if into != want(round) || in_place != want(round) {
                return Err(format!("round {round}: allgather_into or in place differs"));
            }
        }
        // Rank 1 expects 9 bytes of everyone where the others send and expect 8.
        let bad = if me == 1 { 9 } else { 8 };
        let mut out = vec![0u8; bad * n];
        match g.allgather_into(&vec![me as u8; bad], &mut out, &vec![bad; n]) {
            Err(GroupError::Length { .. }) => {}
            r => return Err(format!("a disagreeing length gave {r:?}")),
        }
        let mut out = vec![0u8; 8 * n];
        g.allgather_into(&[me as u8; 8], &mut out, &vec![8; n])
            .map_err(e)?;
        if out != (0..n).flat_map(|r| [r as u8; 8]).collect::<Vec<_>>() {
            return Err(format!("after the length error: {out:?}"));
        }
        Ok(())
    });
}

/// MPI_Gather (`gather_into`) between real hosts with 2% of ethbcast frames lost at the switch:
/// the root gets every member's part in rank order; a member other than the root returns once
/// its own part is sent, and the other members' parts, which reach it too, do not shift its
/// next calls (a broadcast from another root, an allgather, a barrier, a gather to another
/// root). A part of another length fails the root's call, and the next gather is right.
#[test]
fn a_gather_gives_the_root_every_part_in_rank_order_and_leaves_the_next_calls_in_step() {
    if !netns_available(
        "a_gather_gives_the_root_every_part_in_rank_order_and_leaves_the_next_calls_in_step",
        true,
    ) {
        return;
    }
    let n = 5;
    let bed = bed("ga", n, 2.0);
    every_member(&bed, move |g| {
        let e = |e: GroupError| e.to_string();
        let me = g.rank().index();
        for round in 0..24 {
            let root = Rank::new((round % n) as u16);
            let len = 1 + (round * 331) % 2500;
            let mut out = if root.index() == me {
                vec![0u8; n * len]
            } else {
                Vec::new()
            };
            g.gather_into(root, &payload(me as u16, round, len), &mut out)
                .map_err(e)?;
            let want: Vec<u8> = (0..n).flat_map(|r| payload(r as u16, round, len)).collect();
            if root.index() == me && out != want {
                return Err(format!("round {round}: the root's parts differ"));
            }
            // The next call, of another kind in turn.
            match round % 3 {
                0 => {
                    let from = Rank::new(((round + 1) % n) as u16);
                    let mut buf = if from.index() == me {
                        payload(from.get(), round + 100, len)
                    } else {
                        Vec::new()
                    };
                    g.bcast(from, &mut buf).map_err(e)?;
                    if buf != payload(from.get(), round + 100, len) {
                        return Err(format!("round {round}: the broadcast after differs"));
                    }
                }
                1 => {
                    let mut all = vec![0u8; n * len];
                    g.allgather_into(&payload(me as u16, round, len), &mut all, &vec![len; n])
                        .map_err(e)?;
                    if all != want {
                        return Err(format!("round {round}: the allgather after differs"));
                    }
                }
                _ => g.barrier().map_err(e)?,
            }
        }
        // Rank 1 sends 9 bytes where the others send 8: the root (rank 0) fails.
        let len = if me == 1 { 9 } else { 8 };
        let mut out = vec![0u8; if me == 0 { 8 * n } else { 0 }];
        match (
            me,
            g.gather_into(Rank::new(0), &vec![me as u8; len], &mut out),
        ) {
            (0, Err(GroupError::Length { root, .. })) if root == Rank::new(1) => {}
            (0, r) => return Err(format!("the root got {r:?} for a part of 9 bytes")),
            (_, r) => {
                r.map_err(e)?;
            }
        }
        let mut out = vec![0u8; if me == 2 { 8 * n } else { 0 }];
        g.gather_into(Rank::new(2), &[me as u8; 8], &mut out)
            .map_err(e)?;
        if me == 2 && out != (0..n).flat_map(|r| [r as u8; 8]).collect::<Vec<_>>() {
            return Err(format!("after the length error: {out:?}"));
        }
        Ok(())
    });
}

/// MPI_Gather (`gather_into`) as MPI_Reduce's usual loop runs it: a member other than the
/// root returns once its own part is sent, and then makes no call on the group until the
/// root has every part (the members meet out of band, as an MPI program's next call may be
/// another library's barrier), only driving it as a progress thread does (`progress`).
/// Every part must still reach the root, here down the binomial tree, whose relays are
/// members that have left the call: a stream of gathers to rank 0, parts of 4 B to 64 KiB.
#[test]
fn a_gathers_parts_reach_the_root_while_the_members_that_left_it_only_progress_the_group() {
    if !netns_available(
        "a_gathers_parts_reach_the_root_while_the_members_that_left_it_only_progress_the_group",
        true,
    ) {
        return;
    }
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Instant;
    let n = 5;
    let bed = bed("gt", n, 0.0);
    let arrived = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicBool::new(false));
    let opts = GroupOptions {
        algorithm: Algorithm::Tree,
        ..GroupOptions::insecure()
    };
    every_member_with(&bed, opts, move |g| {
        let e = |e: GroupError| e.to_string();
        let me = g.rank().index();
        // Out of band, as a barrier of another library: the group is only progressed while
        // the others arrive.
        let meet = |g: &mut Group, round: usize| -> Result<(), String> {
            arrived.fetch_add(1, Ordering::SeqCst);
            let start = Instant::now();
            while arrived.load(Ordering::SeqCst) < n * (round + 1) {
                if failed.load(Ordering::SeqCst) {
                    return Err("another member failed".into());
                }
                if start.elapsed() > Duration::from_secs(30) {
                    return Err(format!("round {round}: the others never arrived"));
                }
                g.progress(Duration::from_millis(1)).map_err(e)?;
            }
            Ok(())
        };
        let sizes = [4, 64, 1024, 4096, 16384, 65536];
        let rounds = 3 * sizes.len();
        for round in 0..rounds {
            meet(g, round)?;
            let len = sizes[round % sizes.len()];
            let mut out = vec![0u8; if me == 0 { n * len } else { 0 }];
            let r = g.gather_into(Rank::new(0), &payload(me as u16, round, len), &mut out);
            if let Err(err) = r {
                failed.store(true, Ordering::SeqCst);
                return Err(format!("round {round} ({len} B): {err}"));
            }
            let want: Vec<u8> = (0..n).flat_map(|r| payload(r as u16, round, len)).collect();
            if me == 0 && out != want {
                failed.store(true, Ordering::SeqCst);
                return Err(format!("round {round}: the root's parts differ"));
            }
        }
        meet(g, rounds)
    });
}
