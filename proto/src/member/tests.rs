//! The member as a specification, without sockets: what it takes from whom, and what counts as
//! a sign of life.

use std::time::Instant;

use super::{Algorithm, Done, Member, MemberConfig};
use crate::detect::DetectorConfig;
use crate::engine::EngineConfig;
use crate::wire::ethernet::MacAddr;
use crate::wire::{Control, Flags, Kind, Repr, ALL};
use crate::Rank;

/// Rank 2 of 4 with peer repair: for root 0's stream it asks rank 3. Time is the
/// simulator's virtual clock.
fn member() -> (Member, Instant) {
    // Any instant will do: the member reads no clock, every call takes `now`.
    let now = Instant::now();
    let mut cfg = EngineConfig::new(7, Rank::new(2), 4);
    cfg.peer_repair = true;
    let macs: Vec<MacAddr> = (0..4).map(port_mac).collect();
    let mut mc = MemberConfig::new(cfg, macs);
    mc.prepost = 4;
    (Member::new(now, mc).unwrap(), now)
}

/// Rank `i`'s address.
fn port_mac(i: u16) -> MacAddr {
    let [hi, lo] = i.to_be_bytes();
    MacAddr([0x02, 0, 0, 0, hi, lo])
}

fn frame(kind: Kind, seq: u32, dst: Rank, flags: Flags) -> Vec<u8> {
    let mut r = Repr::new(kind);
    r.group = 7;
    r.src = Rank::new(0);
    r.dst = dst;
    r.flags = flags;
    r.msg_id = seq;
    r.seq = seq;
    r.msg_len = 100;
    r.to_vec(&[seq as u8; 100]).unwrap()
}

#[test]
fn a_relayed_repair_is_taken_only_from_the_peer_the_stream_asks() {
    let (mut m, now) = member();
    m.handle_frame(
        now,
        port_mac(0),
        &frame(Kind::Data, 0, ALL, Flags::BROADCAST),
    );
    assert_eq!(m.stats().accepted, 1);
    // Frame 1 relayed by rank 1, which this stream never asks: a forgery.
    let relayed = frame(Kind::Repair, 1, Rank::new(2), Flags::P2P);
    m.handle_frame(now, port_mac(1), &relayed);
    assert_eq!(m.stats().mac_mismatch, 1);
    assert_eq!(m.stats().accepted, 1);
    // The same frame from rank 3, the stream's repair peer: taken.
    m.handle_frame(now, port_mac(3), &relayed);
    assert_eq!(m.stats().accepted, 2);
    assert_eq!(m.engine_stats().delivered, 2);
}

/// Liveness from replays: only what proves that a member spoke now keeps it alive.
mod liveness {
    use std::time::{Duration, Instant};

    use super::{
        Control, DetectorConfig, EngineConfig, Flags, Kind, MacAddr, Member, MemberConfig, Rank,
    };
    use crate::wire::ALL;

    const PERIOD: Duration = Duration::from_millis(10);

    use super::{frame, port_mac as mac};

    /// Rank `rank` of `size` with a failure detector of period [`PERIOD`], started at `now`.
    fn detected(rank: Rank, size: u16, peer_repair: bool, now: Instant) -> Member {
        let mut cfg = EngineConfig::new(7, rank, size);
        cfg.peer_repair = peer_repair;
        let macs: Vec<MacAddr> = (0..size).map(mac).collect();
        let mut mc = MemberConfig::new(cfg, macs);
        mc.prepost = 4;
        mc.detector = Some(DetectorConfig::new(rank, size, PERIOD));
        let mut m = Member::new(now, mc).unwrap();
        m.handle_timeout(now);
        m
    }

    fn age(m: &Member, rank: Rank) -> u16 {
        m.detector().expect("a detector").table()[rank.index()]
    }

    /// Lets `periods` gossip periods pass after `now`, sending whatever the member sends
    /// nowhere; returns the new instant.
    fn wait(m: &mut Member, now: Instant, periods: u32) -> Instant {
        let mut buf = vec![0u8; 9000];
        let end = now + PERIOD * periods;
        let mut t = now;
        while t < end {
            t += Duration::from_millis(1);
            m.handle_timeout(t);
            while m.poll_transmit(t, &mut buf).is_some() {}
        }
        end
    }

    fn ack(src: Rank, dst: Rank, ctr: u32) -> Vec<u8> {
        Control::Ack {
            next: 0,
            seen: None,
        }
        .to_vec(7, src, dst, ctr)
    }

    fn heartbeat(src: Rank, dst: Rank, ctr: u32, size: u16) -> Vec<u8> {
        Control::Heartbeat {
            table: vec![0; usize::from(size)],
        }
        .to_vec(7, src, dst, ctr)
    }

    /// Performs the attack: a control frame whose counter lies inside the replay window but
    /// was never seen (held back by the attacker) is replayed after its sender went quiet. It
    /// is still taken (a late frame may be genuine), but it is no sign of life: the sender's
    /// age keeps growing. A counter that advances the window's top is one.
    #[test]
    fn an_in_window_never_seen_control_frame_does_not_refresh_the_age() {
        let t0 = Instant::now();
        let mut m = detected(Rank::new(0), 3, false, t0);
        for ctr in [1, 2, 3, 5] {
            m.handle_frame(t0, mac(2), &ack(Rank::new(2), Rank::new(0), ctr));
        }
        assert_eq!(m.stats().accepted, 4);
        assert_eq!(age(&m, Rank::new(2)), 0);
        let t1 = wait(&mut m, t0, 3);
        assert_eq!(age(&m, Rank::new(2)), 3);
        // Counter 4: in the window (top 5), never seen.
        m.handle_frame(t1, mac(2), &ack(Rank::new(2), Rank::new(0), 4));
        assert_eq!(m.stats().accepted, 5, "a late frame is still taken");
        assert_eq!(age(&m, Rank::new(2)), 3, "a late frame is no sign of life");
        // The same as a heartbeat, counter 4 being spent: counter 5 is the top, seen.
        m.handle_frame(t1, mac(2), &heartbeat(Rank::new(2), Rank::new(0), 5, 3));
        assert_eq!(age(&m, Rank::new(2)), 3, "a seen counter is refused");
        // A counter above the top proves the sender spoke after everything heard so far.
        m.handle_frame(t1, mac(2), &ack(Rank::new(2), Rank::new(0), 6));
        assert_eq!(age(&m, Rank::new(2)), 0);
    }

    /// Performs the attack: a relayed repair names the root of the stream as its source but
    /// comes from the repair peer. It proves that the peer spoke, not the root: a dead root
    /// must not be kept alive by its stream's repairs.
    #[test]
    fn a_relayed_repair_credits_the_relaying_peer_not_the_root() {
        let t0 = Instant::now();
        // Rank 2 of 4: for root 0's stream it asks rank 3.
        let mut m = detected(Rank::new(2), 4, true, t0);
        m.handle_frame(t0, mac(0), &frame(Kind::Data, 0, ALL, Flags::BROADCAST));
        assert_eq!(m.engine().repair_peer(Rank::new(0)), Some(Rank::new(3)));
        let t1 = wait(&mut m, t0, 3);
        assert_eq!((age(&m, Rank::new(0)), age(&m, Rank::new(3))), (3, 3));
        m.handle_frame(
            t1,
            mac(3),
            &frame(Kind::Repair, 1, Rank::new(2), Flags::P2P),
        );
        assert_eq!(m.stats().accepted, 2, "the relayed repair is taken");
        assert_eq!(age(&m, Rank::new(3)), 0, "the relaying peer spoke");
        assert_eq!(age(&m, Rank::new(0)), 3, "the root did not");
    }

    /// Performs the attack: the attacker recorded a member's heartbeats and acknowledgements,
    /// held every other one back, and after the member died replays them all, one per gossip
    /// period (the seen ones are refused, the held-back ones lie in the replay window). The
    /// dead member is still evicted within the detector's bound.
    #[test]
    fn replayed_heartbeats_and_acks_do_not_keep_a_dead_member_alive() {
        let t0 = Instant::now();
        let mut m = detected(Rank::new(0), 3, false, t0);
        let size = 3;
        let recorded: Vec<Vec<u8>> = (1..=40)
            .map(|ctr| {
                if ctr % 2 == 0 {
                    heartbeat(Rank::new(2), Rank::new(0), ctr, size)
                } else {
                    ack(Rank::new(2), Rank::new(0), ctr)
                }
            })
            .collect();
        let mut t = t0;
        for (i, f) in recorded.iter().enumerate() {
            if i % 2 == 0 {
                m.handle_frame(t, mac(2), f);
            }
            t += Duration::from_millis(1);
            m.handle_timeout(t);
        }
        let died = t;
        let cfg = DetectorConfig::new(Rank::new(0), size, PERIOD);
        let bound = cfg.cleanup() + cfg.confirm_timeout + PERIOD;
        // Rank 1 stays alive and says so with fresh counters; the attacker replays one of
        // rank 2's recorded frames (held back or not) every period.
        let (mut ctr1, mut next) = (1, 0);
        while t < died + 3 * bound && m.is_live(Rank::new(2)) {
            m.handle_frame(t, mac(1), &ack(Rank::new(1), Rank::new(0), ctr1));
            ctr1 += 1;
            let f = &recorded[(next * 2 + 1) % recorded.len()];
            m.handle_frame(t, mac(2), f);
            m.handle_frame(t, mac(2), &recorded[next % recorded.len()]);
            next += 1;
            t = wait(&mut m, t, 1);
        }
        let evicted = m
            .evicted()
            .iter()
            .find(|(r, _)| *r == Rank::new(2))
            .map(|&(_, at)| at);
        let after = evicted.map(|at| at - died);
        assert!(
            after.is_some_and(|d| d <= bound),
            "rank 2 evicted after {after:?}, bound {bound:?}"
        );
        assert!(m.is_live(Rank::new(1)));
    }
}

/// The root's call and the window: a root (or a relay of the tree) returns only once its
/// whole message is in its retransmission buffers, from where the driver's flush sends it
/// without waiting for anyone.
mod root_call {
    use std::time::Instant;

    use super::{port_mac, Algorithm, Done, EngineConfig, MacAddr, Member, MemberConfig, Rank};

    /// `n` members, default configuration (16-frame windows, also point to point).
    fn group(n: u16) -> Vec<Member> {
        let now = Instant::now();
        let macs: Vec<MacAddr> = (0..n).map(port_mac).collect();
        (0..n)
            .map(|r| {
                Member::new(
                    now,
                    MemberConfig::new(EngineConfig::new(7, Rank::new(r), n), macs.clone()),
                )
            })
            .collect::<Result<_, _>>()
            .unwrap()
    }

    /// Sends every frame member `from` has to the members it is addressed to (a member's own
    /// address: that one; the group's: every other member); returns how many it sent.
    fn deliver(ms: &mut [Member], from: usize, now: Instant) -> usize {
        let mut buf = vec![0u8; 9000];
        let mut sent = 0;
        while let Some(t) = ms[from].poll_transmit(now, &mut buf) {
            let to = (0..ms.len()).find(|&j| port_mac(j as u16) == t.dst);
            for j in (0..ms.len()).filter(|&j| j != from && to.is_none_or(|to| to == j)) {
                ms[j].handle_frame(now, port_mac(from as u16), &buf[..t.len]);
            }
            sent += 1;
        }
        sent
    }

    fn message(round: u8, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ round)
            .collect()
    }

    /// Four rounds of 16 KiB broadcasts from rank 0 of `n` with `algo`, run the way the MPI
    /// program behind the C ABI's interposer runs them: every rank calls bcast, and a member
    /// is driven only while its call runs. A receiver's call returns as its message
    /// completes, and what the completing frames made stays with it until its next call
    /// (its acknowledgements; data to forward leaves as the call returns, as `Group` sends
    /// it). 16 KiB is 12 frames of a 16-frame window, so the second message finds the window
    /// holding the first one's 12 unacknowledged frames: room for 4. A member that returned
    /// then would leave the other 8 in its send queue until its next call (or its progress
    /// thread, a millisecond later and then backing off), while the members below it wait for
    /// them. Time does not move: every round must end without a timer.
    fn rounds(n: u16, algo: Algorithm) {
        let mut ms = group(n);
        let now = Instant::now();
        let len: usize = 16 * 1024;
        let max_payload = EngineConfig::new(7, Rank::new(0), n).max_payload();
        assert_eq!(
            len.div_ceil(max_payload),
            12,
            "12 frames of a 16-frame window"
        );
        for round in 0..4u8 {
            let data = message(round, len);
            // The root's call starts first: the receivers' acknowledgements of the previous
            // message leave only as they enter their calls.
            ms[0].bcast(now, Rank::new(0), data.clone(), algo).unwrap();
            let (mut done, mut sent) = (vec![false; ms.len()], vec![0; ms.len()]);
            for step in 0..16 {
                for r in 0..ms.len() {
                    if done[r] {
                        continue;
                    }
                    if step == 0 && r > 0 {
                        // The driver's first flush of a call sends what the previous call
                        // left (its acknowledgements).
                        ms[r].bcast(now, Rank::new(0), Vec::new(), algo).unwrap();
                    }
                    match ms[r].take_result() {
                        None => sent[r] += deliver(&mut ms, r, now),
                        Some(Ok(Done::Bcast(d))) => {
                            assert!(d == data, "round {round}: rank {r}'s message");
                            // The root's driver flushes once more as the call returns, and so
                            // does a receiver's when it has data to send. Then the member is
                            // away (computing, or waiting for the others out of band).
                            if r == 0 || ms[r].has_data_to_send() {
                                sent[r] += deliver(&mut ms, r, now);
                            }
                            done[r] = true;
                        }
                        Some(other) => panic!("round {round}: rank {r}: {other:?}"),
                    }
                }
            }
            assert!(
                done.iter().all(|&d| d),
                "round {round}: returned {done:?} after sending {sent:?} frames"
            );
        }
    }

    #[test]
    fn a_root_returns_only_once_its_whole_message_is_in_the_window() {
        rounds(3, Algorithm::Simple);
        rounds(3, Algorithm::PushPull);
    }

    /// In a binomial tree of 4 from rank 0, rank 0 sends to 1 and 2 and rank 2 relays to 3,
    /// each copy through the pair's own 16-frame window.
    #[test]
    fn a_tree_relay_returns_only_once_its_copies_are_in_their_windows() {
        rounds(4, Algorithm::Tree);
    }
}

/// Performs the misbehaviour: a fellow pings a member (each ping with a fresh control
/// counter) faster than the member's link sends, so that no flush comes between them. Each
/// ping is answered, but what the member holds to send is at most its engine's outbox
/// (`EngineConfig::outbox`) at any time, the detector's and the barriers' answers included: beyond
/// it an answer is dropped and counted, as the link would lose it.
#[test]
fn a_member_pinged_faster_than_its_link_sends_holds_at_most_an_outbox_of_pongs() {
    const OUTBOX: usize = 64;
    const PINGS: u32 = 1000;
    let now = Instant::now();
    let mut cfg = EngineConfig::new(7, Rank::new(0), 3);
    cfg.outbox = OUTBOX;
    let macs: Vec<MacAddr> = (0..3).map(port_mac).collect();
    let mut mc = MemberConfig::new(cfg, macs);
    mc.detector = Some(DetectorConfig::new(
        Rank::new(0),
        3,
        std::time::Duration::from_millis(10),
    ));
    let mut m = Member::new(now, mc).unwrap();
    let mut buf = vec![0u8; 1500];
    while m.poll_transmit(now, &mut buf).is_some() {}
    for ctr in 1..=PINGS {
        let ping = Control::Ping { rank: Rank::new(0) }.to_vec(7, Rank::new(2), Rank::new(0), ctr);
        m.handle_frame(now, port_mac(2), &ping);
    }
    let dropped = m.engine_stats().outbox_full;
    let held = u64::from(PINGS) - dropped;
    assert!(
        held <= OUTBOX as u64,
        "{held} pongs held for {PINGS} pings before the link took any: the outbox holds {OUTBOX}"
    );
    let mut sent = 0;
    while m.poll_transmit(now, &mut buf).is_some() {
        sent += 1;
    }
    assert_eq!(sent, held, "every pong held is sent");
}

/// A member whose stream leaves frames in the link asks its driver for the end of every batch
/// (`Machine::wants_frames_done`), observer or not: the frames it left there are read, served
/// and let go only then, and a driver that does not ask reads with the link's frames gone.
#[test]
fn a_member_leaving_frames_in_the_link_wants_each_batch_ended() {
    for serving in [false, true] {
        let (mut m, now) = member();
        assert!(!crate::machine::Machine::wants_frames_done(&m));
        if serving {
            m.leave_in_link_serving(now, Rank::new(0));
        } else {
            m.leave_in_link(now, Rank::new(0));
        }
        assert!(
            crate::machine::Machine::wants_frames_done(&m),
            "serving fellows: {serving}"
        );
    }
}

/// A message that the end of a batch completes (its frame waited in the link behind a gap, and
/// is read only then) is the application's at once: the member takes it from its engine at the
/// batch's end, as it takes a message a frame completes, not at its next frame or timer, which
/// may never come (every frame is in; nothing is lost, nothing is due).
#[test]
fn a_message_completed_at_the_end_of_a_batch_is_delivered_then() {
    for serving in [false, true] {
        let (mut m, now) = member();
        if serving {
            m.leave_in_link_serving(now, Rank::new(0));
        } else {
            m.leave_in_link(now, Rank::new(0));
        }
        // Frame 1 comes first: it waits behind the gap, in the link's frame.
        let f1 = frame(Kind::Data, 1, ALL, Flags::BROADCAST);
        let f0 = frame(Kind::Data, 0, ALL, Flags::BROADCAST);
        m.handle_frame(now, port_mac(0), &f1);
        m.handle_frame(now, port_mac(0), &f0);
        let held = crate::machine::Frames(&[&f1[..], &f0[..]]);
        m.frames_done(
            now,
            crate::machine::BatchEnd {
                held: &held,
                leaving: &held,
            },
        );
        let mut got = Vec::new();
        while let Some(ev) = m.poll_event() {
            if let super::Event::Delivered(msg) = ev {
                got.push((msg.msg_id, msg.data));
            }
        }
        assert_eq!(
            got,
            vec![(0, vec![0u8; 100]), (1, vec![1u8; 100])],
            "serving fellows: {serving}"
        );
    }
}
