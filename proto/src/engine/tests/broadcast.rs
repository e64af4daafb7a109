//! Broadcast and repair: every message once, in order, under loss, with either algorithm;
//! selective repair, re-broadcast, push-pull, truncation, eviction.

use std::time::Duration;

use crate::engine::{EngineEvent, HardwareAlgorithm};
use crate::wire::{Flags, Frame, Kind, Repr};
use crate::Rank;

use super::{broadcast_all, broadcast_to_all, lose_once, message, root_frames, Net};

/// A message a byte over a megabyte (a bulk transfer's chunk behind its type byte) is
/// reserved whole by its first frame: filling it never reallocates, which would copy all of it.
#[test]
fn a_message_just_over_a_megabyte_is_filled_without_reallocating() {
    let mut net = Net::new(2, |_| {});
    let m = message((1 << 20) + 1, 3);
    broadcast_to_all(&mut net, &m);
    let (_, _, data) = &net.delivered[1][0];
    assert_eq!(data, &m);
    assert_eq!(
        data.capacity(),
        m.len(),
        "the buffer grew while it was filled"
    );
}

#[test]
fn simple_broadcast_delivers_every_message_once_in_order() {
    let mut net = Net::new(4, |_| {});
    let msgs: Vec<Vec<u8>> = (0..20).map(|i| message(i * 700, i as u8)).collect();
    broadcast_all(&mut net, &msgs, HardwareAlgorithm::Simple);
    for r in 1..4 {
        let got: Vec<&Vec<u8>> = net.delivered[r].iter().map(|d| &d.2).collect();
        assert_eq!(got, msgs.iter().collect::<Vec<_>>());
        let ids: Vec<u64> = net.delivered[r].iter().map(|d| d.1).collect();
        assert_eq!(ids, (0..20).collect::<Vec<u64>>());
    }
    assert_eq!(
        net.engines[0].stats().repair_frames,
        0,
        "no loss, no repair"
    );
}

/// A window of any size works, not only a power of two: 24 slots, a stream that wraps them
/// many times, frames lost on the way to two of the three receivers, past the first wrap. A
/// slot found wrongly (a mask of 23, say) costs 12 repairs, not 4.
/// Messages borrowed for their call (`bcast_slice`), of every length from one frame to
/// several windows and with either algorithm, mixed with owned ones, reach every member once,
/// in order and intact under loss, as if each had been handed over whole: the frames cut from
/// the caller's bytes and those cut from the copy of the rest make one message. A message
/// that fits the room copies nothing into the spare buffer.
#[test]
fn borrowed_messages_arrive_whole_in_order_under_loss_whatever_fitted_the_window() {
    let mut net = Net::new(4, |c| c.window = 8);
    let mut lost = 0u32;
    net.drop = Box::new(move |r, _| {
        lost += 1;
        r.kind == Some(Kind::Data) && lost.is_multiple_of(13)
    });
    let max = net.engines[0].config().max_payload();
    let lens = [1, max, 3 * max, 8 * max, 8 * max + 1, 25 * max - 3, 0, 5];
    let mut msgs = Vec::new();
    for (i, &len) in lens.iter().enumerate() {
        let algo = if i % 3 == 2 {
            HardwareAlgorithm::PushPull
        } else {
            HardwareAlgorithm::Simple
        };
        let m = message(len, i as u8);
        let mut spare = vec![0xEE; 16];
        let now = net.now;
        // Every earlier frame acknowledged: the whole window is room.
        let idle = net.engines[0].is_idle();
        net.engines[0]
            .bcast_slice(now, &m, &mut spare, algo)
            .unwrap();
        if idle && len <= 8 * max && algo == HardwareAlgorithm::Simple {
            assert_eq!(spare, vec![0xEE; 16], "{len} B fitted: nothing copied");
        }
        msgs.push(m.clone());
        // An owned message between borrowed ones.
        let owned = message(2 * max + i, 100 + i as u8);
        net.engines[0].bcast(now, owned.clone(), algo).unwrap();
        msgs.push(owned);
        if i % 2 == 0 {
            net.run(|n| n.all_got(0, msgs.len()) && n.engines[0].is_idle());
        }
    }
    net.run(|n| n.all_got(0, msgs.len()));
    for r in 1..4 {
        let got: Vec<&Vec<u8>> = net.delivered[r].iter().map(|d| &d.2).collect();
        assert_eq!(got, msgs.iter().collect::<Vec<_>>(), "member {r}");
    }
    assert!(net.lost > 0, "frames were lost");
}

/// A message's length and a frame's offset in it travel in 32 bits: a configuration that
/// would accept a longer message is refused, so that no message is ever cut to fit them.
#[test]
fn a_longest_message_beyond_what_a_frame_can_name_is_refused() {
    let mut c = crate::engine::EngineConfig::new(7, Rank::new(0), 2);
    c.max_message = u32::MAX as usize;
    assert!(crate::engine::Engine::new(c.clone()).is_ok());
    c.max_message += 1;
    assert_eq!(
        crate::engine::Engine::new(c).err(),
        Some(crate::ConfigError::MaxMessage(u32::MAX as usize + 1))
    );
}

/// A borrowed message the engine refuses takes nothing: the spare buffer is as it was and
/// no frame of it is published.
#[test]
fn a_refused_borrowed_message_takes_nothing() {
    let mut net = Net::new(2, |c| c.max_message = 100);
    let mut spare = vec![1u8; 10];
    let now = net.now;
    assert!(net.engines[0]
        .bcast_slice(now, &[0u8; 101], &mut spare, HardwareAlgorithm::Simple)
        .is_err());
    assert_eq!(spare, vec![1u8; 10]);
    let mut buf = vec![0u8; 1500];
    assert!(net.engines[0].poll_transmit(now, &mut buf).is_none());
}

#[test]
fn a_window_that_is_not_a_power_of_two_wraps_and_repairs_like_any_other() {
    let mut net = Net::new(4, |c| c.window = 24);
    let lost = [30u32, 31, 77, 200];
    net.drop =
        Box::new(move |r, to| r.kind == Some(Kind::Data) && lost.contains(&r.seq) && to != 1);
    let msgs: Vec<Vec<u8>> = (0..6).map(|i| message(60_000, i as u8)).collect();
    broadcast_all(&mut net, &msgs, HardwareAlgorithm::Simple);
    for r in 1..4 {
        let got: Vec<&Vec<u8>> = net.delivered[r].iter().map(|d| &d.2).collect();
        assert_eq!(got, msgs.iter().collect::<Vec<_>>(), "receiver {r}");
    }
    let tx = net.engines[0].sender().eqa();
    assert_eq!(tx.lms(Rank::new(1)).unwrap().stats.repairs, 0);
    for r in [2, 3] {
        assert_eq!(
            tx.lms(Rank::new(r)).unwrap().stats.repairs,
            4,
            "receiver {r}: its four lost frames, once each"
        );
    }
}

#[test]
fn only_the_destination_that_lost_a_frame_is_repaired() {
    let mut net = Net::new(4, |_| {});
    net.drop = Box::new(lose_once(3, 2));
    let m = message(20_000, 1);
    broadcast_to_all(&mut net, &m);
    for r in 1..4 {
        assert_eq!(net.delivered[r][0].2, m);
    }
    let tx = net.engines[0].sender().eqa();
    assert_eq!(tx.lms(Rank::new(2)).unwrap().stats.repairs, 1);
    assert_eq!(tx.lms(Rank::new(1)).unwrap().stats.repairs, 0);
    assert_eq!(tx.lms(Rank::new(3)).unwrap().stats.repairs, 0);
    assert_eq!(net.engines[0].stats().rebroadcasts, 0);
}

#[test]
fn a_frame_lost_by_several_destinations_is_rebroadcast_once() {
    let mut net = Net::new(5, |_| {});
    net.drop = Box::new(|r, to| r.kind == Some(Kind::Data) && r.seq == 2 && to != 1);
    let m = message(10_000, 2);
    net.engines[0]
        .bcast(net.now, m.clone(), HardwareAlgorithm::Simple)
        .unwrap();
    net.run(|n| n.all_got(0, 1));
    let st = net.engines[0].stats();
    assert_eq!(st.rebroadcasts, 1, "{st:?}");
    assert_eq!(st.repair_frames, 1);
}

#[test]
fn a_lost_tail_frame_is_recovered_by_the_retransmission_timer() {
    let mut net = Net::new(3, |_| {});
    let mut first = true;
    net.drop = Box::new(move |r, to| {
        if first && r.kind == Some(Kind::Data) && r.flags.contains(Flags::LAST) && to == 2 {
            first = false;
            return true;
        }
        false
    });
    net.engines[0]
        .bcast(net.now, message(3000, 3), HardwareAlgorithm::Simple)
        .unwrap();
    net.run(|n| n.all_got(0, 1));
    assert!(
        net.engines[0]
            .sender()
            .eqa()
            .lms(Rank::new(2))
            .unwrap()
            .stats
            .timeouts
            >= 1
    );
}

#[test]
fn lost_acks_are_recovered_and_the_buffer_drains() {
    let mut net = Net::new(3, |_| {});
    let mut k = 0;
    net.drop = Box::new(move |r, _| {
        if r.kind != Some(Kind::Ack) {
            return false;
        }
        k += 1;
        k % 2 == 0
    });
    for i in 0..50 {
        net.engines[0]
            .bcast(net.now, message(2000, i), HardwareAlgorithm::Simple)
            .unwrap();
    }
    net.run(|n| n.all_got(0, 50) && n.engines[0].is_idle());
    assert_eq!(net.stable[0].len(), 50);
}

#[test]
fn push_pull_waits_for_the_designated_receiver() {
    let mut net = Net::new(4, |_| {});
    let m = message(50_000, 4);
    // Before any pull, only the push part (two frames) may leave.
    let firsts: Vec<Repr> = root_frames(&mut net, &m, HardwareAlgorithm::PushPull)
        .iter()
        .map(|pdu| Repr::parse(&Frame::new_checked(&pdu[..]).unwrap()))
        .collect();
    assert_eq!(firsts.len(), 2);
    assert_eq!((firsts[0].offset, firsts[1].offset), (0, 80));
    assert!(firsts[1].flags.contains(Flags::PULL_WAIT));
    assert_eq!(firsts[1].aux, 1, "rank 1 is designated");
    // Hand them over; only rank 1 may ask for the rest.
    for r in &firsts {
        let off = r.offset as usize;
        let end = if off == 0 { 80 } else { 860 };
        let pdu = r.to_vec(&m[off..end]).unwrap();
        for j in 1..4 {
            net.engines[j].handle_frame(net.now, &pdu).unwrap();
        }
    }
    let pulls: Vec<usize> = (1..4)
        .filter(|&j| {
            let mut b = vec![0u8; 1500];
            let mut pulled = false;
            while let Some(t) = net.engines[j].poll_transmit(net.now, &mut b) {
                pulled |= Frame::new_checked(&b[..t.len]).unwrap().kind() == Kind::Pull;
            }
            pulled
        })
        .collect();
    assert_eq!(pulls, vec![1]);
}

#[test]
fn push_pull_completes_under_loss_of_pulls_and_push_frames() {
    let mut net = Net::new(4, |_| {});
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
    let mut pulls = 0u32;
    net.drop = Box::new(move |r, _| {
        if r.kind == Some(Kind::Pull) {
            // The first pull request is always lost, later ones half of the time.
            pulls += 1;
            return pulls == 1 || rng.gen_bool(0.5);
        }
        r.flags.contains(Flags::PUSH) && rng.gen_bool(0.3)
    });
    let msgs: Vec<Vec<u8>> = (0..30)
        .map(|i| message([4, 100, 900, 5000, 40_000][i % 5], i as u8))
        .collect();
    broadcast_all(&mut net, &msgs, HardwareAlgorithm::PushPull);
    for r in 1..4 {
        let got: Vec<&Vec<u8>> = net.delivered[r].iter().map(|d| &d.2).collect();
        assert_eq!(got, msgs.iter().collect::<Vec<_>>());
    }
}

#[test]
fn an_unposted_receiver_keeps_pushed_data_and_delivers_when_posted() {
    let mut net = Net::new(3, |c| {
        c.auto_post = false;
        c.pushed_buffer = 4096;
    });
    let now = net.now;
    net.engines[1]
        .post_recv(now, Rank::new(0), 1 << 20)
        .unwrap();
    net.engines[1]
        .post_recv(now, Rank::new(0), 1 << 20)
        .unwrap();
    let m = message(30_000, 5);
    let small = message(500, 6);
    net.engines[0]
        .bcast(now, small.clone(), HardwareAlgorithm::PushPull)
        .unwrap();
    net.engines[0]
        .bcast(now, m.clone(), HardwareAlgorithm::PushPull)
        .unwrap();
    // Rank 2 has not posted: it holds at most 4096 bytes, and the shared buffer makes the
    // root wait for it (the paper's "the broadcast operation may be stopped").
    let until = now + Duration::from_millis(100);
    net.run(|n| n.now >= until);
    assert!(net.delivered[2].is_empty());
    assert_eq!(net.delivered[1].len(), 1);
    assert!(
        net.engines[2]
            .receiver(Rank::new(0))
            .unwrap()
            .pushed_bytes()
            <= 4096
    );
    let now = net.now;
    net.engines[2]
        .post_recv(now, Rank::new(0), 1 << 20)
        .unwrap();
    net.engines[2]
        .post_recv(now, Rank::new(0), 1 << 20)
        .unwrap();
    net.run(|n| n.delivered[2].len() == 2 && n.delivered[1].len() == 2);
    assert_eq!(net.delivered[1][1].2, m);
    assert_eq!(net.delivered[2][0].2, small);
    assert_eq!(net.delivered[2][1].2, m);
}

#[test]
fn a_too_small_receive_reports_truncation() {
    let mut net = Net::new(2, |c| c.auto_post = false);
    let now = net.now;
    net.engines[1].post_recv(now, Rank::new(0), 10).unwrap();
    net.engines[0]
        .bcast(now, message(100, 1), HardwareAlgorithm::Simple)
        .unwrap();
    let mut truncated = false;
    net.run(|_| false);
    while let Some(ev) = net.engines[1].poll_event() {
        truncated |= matches!(
            ev,
            EngineEvent::Truncated {
                len: 100,
                max: 10,
                ..
            }
        );
    }
    assert!(truncated || net.delivered[1].is_empty());
}

#[test]
fn any_member_can_be_root_and_streams_interleave() {
    let mut net = Net::new(4, |_| {});
    for round in 0..10u8 {
        for root in 0..4usize {
            let m = message(100 + usize::from(round) * 300, round ^ root as u8);
            let algo = if round % 2 == 0 {
                HardwareAlgorithm::Simple
            } else {
                HardwareAlgorithm::PushPull
            };
            net.engines[root].bcast(net.now, m, algo).unwrap();
        }
    }
    net.run(|n| (0..4).all(|r| n.all_got(r, 10)));
    for me in 0..4 {
        for root in 0..4 {
            if me == root {
                continue;
            }
            let ids: Vec<u64> = net.delivered[me]
                .iter()
                .filter(|d| d.0.index() == root)
                .map(|d| d.1)
                .collect();
            assert_eq!(ids, (0..10).collect::<Vec<_>>());
        }
    }
}

#[test]
fn eviction_lets_the_survivors_complete() {
    let mut net = Net::new(4, |_| {});
    net.drop = Box::new(|_, to| to == 3); // rank 3 is dead
    for i in 0..40 {
        net.engines[0]
            .bcast(net.now, message(3000, i), HardwareAlgorithm::Simple)
            .unwrap();
    }
    net.run(|n| n.all_got(0, 0) && n.delivered[1].len() >= 5);
    let now = net.now;
    assert!(net.engines[0].evict(now, Rank::new(3)));
    net.run(|n| n.delivered[1].len() == 40 && n.delivered[2].len() == 40 && n.engines[0].is_idle());
    assert!(net.delivered[3].is_empty());
}
