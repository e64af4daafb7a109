//! Forgeries against a running keyed group: barrier epochs, a flood of random and mutated
//! frames, and data frames as every member that must allocate nothing before their tag fails.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ethbcast::{BarrierAlgo, Group, Rank, BROADCAST_MAC};
// The wire format and the pair channels' ids: the hostile host forges frames of the group
// and of its point-to-point channels, which the library does not export.
use ethbcast_proto::{pair_group, BarrierMsg, BarrierOp, Control, Kind};
use rand::{RngCore, SeedableRng};

use super::harness::{check_all, hub, keyed, verdict, workload, Seen};
use super::{AttackError, Scenario};
use crate::harness::group::{bed, join_all, ms, spawn_members};
use crate::hostile::{self, pdu, Counter, Spoof};

/// Forged barrier epochs: the hostile host replays barrier frames and forges releases and
/// arrivals of later and far epochs. One member enters every barrier 150 ms late, so a barrier
/// a forgery completed early would show in the others' wait.
pub(super) fn forged_barrier_epoch(prefix: &str, hosts: usize) -> Result<Scenario, AttackError> {
    let bed = bed(prefix, hosts, 0.0)?;
    let m = hosts - 1;
    bed.set_learning(m, false)?;
    let macs: Vec<[u8; 6]> = bed.hosts().iter().map(|h| h.mac).collect();
    let attacker = hostile::Hostile::spawn(
        &bed.hosts()[m].netns,
        Duration::from_micros(500),
        move |port, stop: &AtomicBool| {
            let mut rng = rand::rngs::SmallRng::seed_from_u64(5);
            let mut ctr = Counter::default();
            let mut barriers: Vec<Vec<u8>> = Vec::new();
            let mut last = Instant::now();
            while !stop.load(Ordering::SeqCst) {
                if let Some(f) = port.next_frame() {
                    if pdu(&f).is_some_and(|p| p.kind() == Kind::Barrier) && barriers.len() < 4096 {
                        barriers.push(f);
                    }
                }
                if last.elapsed() < Duration::from_millis(2) {
                    continue;
                }
                last = Instant::now();
                let Some(f) = hostile::pick(&barriers, &mut rng).cloned() else {
                    continue;
                };
                port.send(&f);
                if let Some(x) = hostile::mutate(&f, &mut rng) {
                    port.send(&x);
                }
                // Encrypted, the epoch is guessed from the barrier frames seen (a few per
                // member and epoch); the spread below covers the guess.
                let guess = (barriers.len() / (4 * m)) as u32;
                let Some(b) = pdu(&f).and_then(|p| hostile::barrier_of(&p, guess)) else {
                    continue;
                };
                for epoch in [b.epoch + 1, b.epoch + 2, b.epoch + 1000, 1 << 30] {
                    for tag in [true, false] {
                        let release = Control::Barrier(BarrierMsg {
                            algo: BarrierAlgo::Broadcast,
                            op: BarrierOp::Release,
                            epoch,
                            ..b.clone()
                        });
                        let spoof = Spoof::from_root(macs[0], tag);
                        if let Some(x) = hostile::forge_control(&f, &release, spoof, &mut ctr) {
                            port.send(&x);
                        }
                        let arrive = Control::Barrier(BarrierMsg {
                            algo: BarrierAlgo::Broadcast,
                            op: BarrierOp::Arrive,
                            epoch,
                            set: vec![0xFF; m.div_ceil(8)],
                            ..b.clone()
                        });
                        for src in 1..m as u16 {
                            let spoof = Spoof {
                                src: Rank::new(src),
                                dst: Rank::new(0),
                                src_mac: macs[src as usize],
                                dst_mac: macs[0],
                                tag,
                            };
                            if let Some(x) = hostile::forge_control(&f, &arrive, spoof, &mut ctr) {
                                port.send(&x);
                            }
                        }
                    }
                }
            }
            (port.sent, barriers.len())
        },
    )?;
    let late = (m - 1) as u16;
    let results = join_all(spawn_members(
        &bed,
        0..m,
        move |mut g| {
            let mut waits = Vec::new();
            for _ in 0..8 {
                if g.rank() == Rank::new(late) {
                    std::thread::sleep(Duration::from_millis(150));
                }
                let t = Instant::now();
                g.barrier()?;
                waits.push(t.elapsed());
            }
            Ok((g.rank(), waits))
        },
        keyed(false),
    )?);
    let (sent, seen) = attacker.stop()?;
    let mut problems = Vec::new();
    let mut shortest = Duration::MAX;
    for r in &results {
        match r {
            Ok((rank, _)) if *rank == Rank::new(late) => {}
            Ok((rank, waits)) => {
                // The first barrier also waits for the others to start; the late member's
                // 150 ms bound every later one from below.
                for (k, w) in waits.iter().enumerate().skip(1) {
                    shortest = shortest.min(*w);
                    if *w < Duration::from_millis(100) {
                        problems.push(format!(
                            "rank {rank}'s barrier {k} returned after {:.1} ms, before the late member entered",
                            ms(*w)
                        ));
                    }
                }
            }
            Err(e) => problems.push(e.clone()),
        }
    }
    if seen == 0 || sent == 0 {
        problems.push(format!(
            "the attack did not happen: {seen} barrier frames seen, {sent} sent"
        ));
    }
    Ok(verdict(
        "forged-barrier-epoch",
        problems,
        format!("{sent} barrier frames replayed, mutated or forged (releases and arrivals of epochs +1, +2, +1000 and 2^30, with and without a tag); every barrier still waited for the member 150 ms late (shortest wait {:.1} ms)", ms(shortest)),
    ))
}

/// A flood of random CRC-valid frames of the session, mutated copies of live frames and plain
/// noise while the group broadcasts and synchronises.
pub(super) fn flood(prefix: &str, hosts: usize) -> Result<Scenario, AttackError> {
    let bed = bed(prefix, hosts, 0.0)?;
    let m = hosts - 1;
    bed.set_learning(m, false)?;
    let hmac = bed.hosts()[m].mac;
    let attacker = hostile::Hostile::spawn(
        &bed.hosts()[m].netns,
        Duration::from_micros(200),
        move |port, stop: &AtomicBool| {
            let mut rng = rand::rngs::SmallRng::seed_from_u64(6);
            let mut live: Vec<Vec<u8>> = Vec::new();
            let mut burst = 0u32;
            while !stop.load(Ordering::SeqCst) {
                if let Some(f) = port.next_frame() {
                    if live.len() < 1024 {
                        live.push(f);
                    } else {
                        let at = rng.next_u32() as usize % live.len();
                        live[at] = f;
                    }
                }
                port.send(&hostile::noise(hmac, &mut rng));
                if let Some(t) = hostile::pick(&live, &mut rng).cloned() {
                    if let Some(x) = hostile::random_from(&t, &mut rng) {
                        port.send(&x);
                    }
                    if let Some(x) = hostile::mutate(&t, &mut rng) {
                        port.send(&x);
                    }
                }
                // Bounded, so that the two cores stay with the members rather than the flood.
                burst += 1;
                if burst.is_multiple_of(16) {
                    std::thread::sleep(Duration::from_micros(500));
                }
            }
            port.sent
        },
    )?;
    let results = join_all(spawn_members(
        &bed,
        0..m,
        |mut g| workload(&mut g, 60, 6, 10, None),
        keyed(false),
    )?);
    let sent = attacker.stop()?;
    let (mut problems, refused) = check_all(&results, 60, 6, None);
    if sent < 1000 || refused == 0 {
        problems.push(format!(
            "the attack did not happen: {sent} frames sent, {refused} refused"
        ));
    }
    Ok(verdict(
        "flood-random-and-mutated",
        problems,
        format!("{sent} frames flooded (noise, random CRC-valid frames of the session, mutated copies of live ones); the members refused {refused} and got 60/60 messages intact and 6 barriers"),
    ))
}

/// Frames a member took in from the hostile host's forgeries before the tag (pre-tag
/// allocation): the heap bytes of the receive streams of ranks that never broadcast and of
/// the point-to-point channels, none of which the workload opens.
pub(super) fn pre_tag_bytes(g: &Group) -> (usize, usize) {
    let f = g.footprint();
    let streams = f
        .streams
        .iter()
        .filter(|&&(r, _)| r != Rank::new(0))
        .map(|&(_, b)| b)
        .sum();
    let channels = f.channels.iter().map(|&(_, b)| b).sum();
    (streams, channels)
}

/// Pre-tag allocation: the hostile host, without the key, learns the session's group id and
/// every member's MAC and rank from their frames, and speaks as each of them: data frames of
/// the session from every rank, and of every pair's point-to-point channel (its id derives
/// from the session's), tagged with another key and untagged. The members must take none of
/// it: no receive stream of a rank that never broadcasts, no channel, measured in heap bytes;
/// and get their 60 messages intact.
pub(super) fn pre_tag_allocation(prefix: &str, hosts: usize) -> Result<Scenario, AttackError> {
    let bed = bed(prefix, hosts, 0.0)?;
    hub(&bed)?;
    let m = hosts - 1;
    let attacker = hostile::Hostile::spawn(
        &bed.hosts()[m].netns,
        Duration::from_micros(300),
        |port, stop: &AtomicBool| {
            // The latest keyed frame of the session, and each member heard: rank -> MAC.
            let mut template: Option<Vec<u8>> = None;
            let mut members: std::collections::BTreeMap<u16, [u8; 6]> = Default::default();
            let mut seq = 0u32;
            let mut last = Instant::now();
            while !stop.load(Ordering::SeqCst) {
                if let Some(f) = port.next_frame() {
                    if let Some(p) = pdu(&f).filter(|p| p.kind() != Kind::Join) {
                        let mut mac = [0u8; 6];
                        mac.copy_from_slice(&f[6..12]);
                        members.insert(p.src().get(), mac);
                        template = Some(f.clone());
                    }
                }
                let Some(t) = template.as_ref().filter(|_| members.len() > 1) else {
                    continue;
                };
                if last.elapsed() < Duration::from_millis(1) {
                    continue;
                }
                last = Instant::now();
                let group = pdu(t).map_or(0, |p| p.group());
                seq = seq.wrapping_add(1);
                for (&a, &mac_a) in &members {
                    for tag in [true, false] {
                        // As rank `a`, a message of the session's own stream.
                        let spoof = Spoof {
                            src: Rank::new(a),
                            dst: Rank::BROADCAST,
                            src_mac: mac_a,
                            dst_mac: BROADCAST_MAC.0,
                            tag,
                        };
                        if let Some(x) = hostile::forge_data(t, group, spoof, seq, seq, &[7; 1000])
                        {
                            port.send(&x);
                        }
                        // As rank `a`, on its channel to every other member.
                        for (&b, &mac_b) in members.iter().filter(|(&b, _)| b != a) {
                            let spoof = Spoof {
                                src: Rank::new(u16::from(a > b)),
                                dst: Rank::BROADCAST,
                                src_mac: mac_a,
                                dst_mac: mac_b,
                                tag,
                            };
                            let pair = pair_group(group, Rank::new(a), Rank::new(b));
                            if let Some(x) = hostile::forge_data(t, pair, spoof, 0, 0, &[7; 1000]) {
                                port.send(&x);
                            }
                        }
                    }
                }
            }
            port.sent
        },
    )?;
    let results = join_all(spawn_members(
        &bed,
        0..m,
        |mut g| {
            let seen = workload(&mut g, 60, 9, 0, None)?;
            Ok((seen, pre_tag_bytes(&g)))
        },
        keyed(false),
    )?);
    let sent = attacker.stop()?;
    let seen: Vec<Result<Seen, String>> = results
        .iter()
        .map(|r| r.as_ref().map(|(s, _)| s.clone()).map_err(Clone::clone))
        .collect();
    let (mut problems, refused) = check_all(&seen, 60, 0, None);
    let mut took = 0usize;
    for (s, (streams, channels)) in results.iter().flatten() {
        took += streams + channels;
        if streams + channels > 0 {
            problems.push(format!(
                "rank {} holds {streams} bytes of receive streams and {channels} bytes of channels for frames that failed their tag",
                s.rank
            ));
        }
    }
    if sent < 1000 {
        problems.push(format!("the attack did not happen: {sent} frames forged"));
    }
    Ok(verdict(
        "pre-tag-allocation",
        problems,
        format!("{sent} data frames forged as every member (the session's stream and every pair's channel, tagged with another key and untagged); the members hold {took} bytes for them (no receive stream of a rank that never broadcast, no channel), refused {refused} frames and got 60/60 messages intact"),
    ))
}
