//! Frames a member must not take: foreign, stale, forged, replayed or contradicting ones, and
//! what counts as a sign of life; fail-over to point to point.

use std::time::{Duration, Instant};

use crate::engine::{DropReason, Engine, EngineConfig, EngineEvent, HardwareAlgorithm, Message};
use crate::wire::{Flags, Frame, Kind, Repr};
use crate::{wire, Rank, Seq};

use super::{
    broadcast_all, member_with_a_stream_of_root_0, message, nack_frame, root_and_receiver, Net,
};

/// A frame of `kind` from `src` to every member of group 7, its length field `msg_len` (a
/// control frame's counter).
fn to_all(kind: Kind, src: u16, msg_len: u32) -> Repr {
    let mut r = Repr::new(kind);
    r.group = 7;
    r.src = Rank::new(src);
    r.dst = wire::ALL;
    r.msg_len = msg_len;
    r
}

#[test]
fn foreign_stale_and_garbage_frames_are_counted_and_dropped() {
    let mut e = Engine::new(EngineConfig::new(7, Rank::new(1), 3)).unwrap();
    let now = Instant::now();
    let mut r = to_all(Kind::Data, 0, 1);
    r.group = 8;
    assert_eq!(
        e.handle_frame(now, &r.to_vec(b"x").unwrap()),
        Err(DropReason::ForeignGroup(8))
    );
    r.group = 7;
    r.src = Rank::new(9);
    assert_eq!(
        e.handle_frame(now, &r.to_vec(b"x").unwrap()),
        Err(DropReason::NotMember(Rank::new(9)))
    );
    r.src = Rank::new(0);
    r.seq = 1000;
    assert!(matches!(
        e.handle_frame(now, &r.to_vec(b"x").unwrap()),
        Err(DropReason::FarFuture(s)) if s == Seq::new(1000)
    ));
    r.seq = 0;
    r.flags = Flags::LAST;
    assert_eq!(e.handle_frame(now, &r.to_vec(b"x").unwrap()), Ok(()));
    assert!(matches!(
        e.handle_frame(now, &r.to_vec(b"x").unwrap()),
        Err(DropReason::Stale(s)) if s == Seq::new(0)
    ));
    assert!(matches!(
        e.handle_frame(now, &[1, 2, 3]),
        Err(DropReason::Malformed(_))
    ));
    let d = &e.stats().drops;
    assert_eq!(
        (
            d.foreign_group,
            d.not_member,
            d.far_future,
            d.stale,
            d.truncated
        ),
        (1, 1, 1, 1, 1)
    );
    assert_eq!(e.stats().delivered, 1);
}

proptest::proptest! {
    #[test]
    fn random_bytes_never_panic_the_engine(frames in proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 0..120), 1..50)) {
        let mut e = Engine::new(EngineConfig::new(7, Rank::new(1), 3)).unwrap();
        let now = Instant::now();
        let mut buf = vec![0u8; 1500];
        for f in frames {
            let _ = e.handle_frame(now, &f);
            // Well-formed frames with random fields, too.
            let mut r = Repr::new(Kind::from_code(f.first().copied().unwrap_or(1) % 12).unwrap_or(Kind::Data));
            r.group = 7;
            r.src = Rank::new(u16::from(f.get(1).copied().unwrap_or(0) % 4));
            r.dst = if f.get(2).is_some_and(|b| b % 2 == 0) { wire::ALL } else { Rank::new(1) };
            r.seq = u32::from(f.get(3).copied().unwrap_or(0) % 40);
            r.msg_id = u32::from(f.get(4).copied().unwrap_or(0) % 3);
            r.msg_len = u32::from(f.get(5).copied().unwrap_or(0));
            r.offset = 0;
            r.bitmap = u16::from(f.get(6).copied().unwrap_or(0));
            r.flags = Flags::from_bits_truncate(u16::from(f.get(7).copied().unwrap_or(0)));
            let n = (r.msg_len as usize).min(f.len());
            if let Ok(pdu) = r.to_vec(&f[..n]) {
                let _ = e.handle_frame(now, &pdu);
            }
            e.handle_timeout(now + Duration::from_millis(5));
            while e.poll_transmit(now, &mut buf).is_some() {}
            while e.poll_event().is_some() {}
        }
    }
}

#[test]
fn with_a_group_key_forged_and_unkeyed_frames_are_rejected() {
    let key = [7u8; 32];
    let mut net = Net::new(3, |c| c.key = Some([7u8; 32].into()));
    let m = message(5000, 9);
    net.engines[0]
        .bcast(net.now, m.clone(), HardwareAlgorithm::PushPull)
        .unwrap();
    net.run(|n| n.all_got(0, 1));
    assert_eq!(net.delivered[1][0].2, m, "keyed members talk normally");
    // A host outside the group forges a data frame of root 0's stream.
    let mut forged = Repr::new(Kind::Data);
    forged.group = 7;
    forged.src = Rank::new(0);
    forged.dst = wire::ALL;
    forged.seq = 4;
    forged.msg_id = 1;
    forged.msg_len = 3;
    forged.flags = Flags::LAST;
    let plain = forged.to_vec(b"bad").unwrap();
    assert_eq!(
        net.engines[1].handle_frame(net.now, &plain),
        Err(DropReason::BadMac)
    );
    let mut buf = vec![0u8; 200];
    let n = forged.emit(b"bad", &mut buf).unwrap();
    let n = wire::seal(&[8u8; 32], &mut buf, n).unwrap();
    assert_eq!(
        net.engines[1].handle_frame(net.now, &buf[..n]),
        Err(DropReason::BadMac),
        "wrong key"
    );
    assert_eq!(net.engines[1].stats().drops.bad_mac, 2);
    let n2 = forged.emit(b"bad", &mut buf).unwrap();
    let n2 = wire::seal(&key, &mut buf, n2).unwrap();
    assert!(Frame::new_checked(&buf[..n2]).unwrap().verify(&key));
}

#[test]
fn a_member_that_broadcast_does_not_reach_is_served_point_to_point() {
    let mut net = Net::new(4, |_| {});
    // Every broadcast frame towards rank 2 is lost; unicast still works.
    net.drop = Box::new(|r, to| to == 2 && r.flags.contains(Flags::BROADCAST));
    let msgs: Vec<Vec<u8>> = (0..40).map(|i| message(4000, i)).collect();
    broadcast_all(&mut net, &msgs, HardwareAlgorithm::Simple);
    assert_eq!(
        net.delivered[2]
            .iter()
            .map(|d| d.2.clone())
            .collect::<Vec<_>>(),
        msgs
    );
    assert_eq!(net.engines[0].sender().failed_over(), vec![Rank::new(2)]);
    assert_eq!(net.engines[0].stats().failovers, 1);
    let tx = net.engines[0].sender().eqa();
    assert!(
        !tx.lms(Rank::new(1)).unwrap().point_to_point()
            && !tx.lms(Rank::new(3)).unwrap().point_to_point(),
        "the others stay on broadcast"
    );
}

#[test]
fn a_member_served_point_to_point_is_polled_point_to_point() {
    let mut net = Net::new(4, |_| {});
    // Nothing sent to the whole group reaches rank 2 (data, re-broadcasts, polls).
    net.drop = Box::new(|r, to| to == 2 && r.dst == wire::ALL);
    let msgs: Vec<Vec<u8>> = (0..40).map(|i| message(4000, i)).collect();
    for m in &msgs {
        net.engines[0]
            .bcast(net.now, m.clone(), HardwareAlgorithm::Simple)
            .unwrap();
    }
    net.run(|n| n.all_got(0, msgs.len()) && n.engines[0].is_idle());
    assert_eq!(net.engines[0].sender().failed_over(), vec![Rank::new(2)]);
    let probes = |net: &Net| {
        net.engines[0]
            .sender()
            .eqa()
            .lms(Rank::new(2))
            .unwrap()
            .stats
            .probes
    };
    let before = (probes(&net), net.engines[0].stats().ack_polls);
    // One short message, acknowledged by nobody on its own: every timer fires together.
    net.engines[0]
        .bcast(net.now, vec![9; 8], HardwareAlgorithm::Simple)
        .unwrap();
    net.run(|n| n.all_got(0, msgs.len() + 1) && n.engines[0].is_idle());
    assert_eq!(
        probes(&net),
        before.0,
        "rank 2 answered its poll: no probe needed"
    );
    assert_eq!(
        net.engines[0].stats().ack_polls - before.1,
        3,
        "one poll per member, none to the group that rank 2 would miss"
    );
}

#[test]
fn members_that_broadcast_does_not_reach_are_probed_point_to_point_and_fail_over() {
    // Two members miss every broadcast frame, re-broadcasts included: the frame each one lacks
    // is wanted by both, and a re-broadcast would never reach them. A member whose timer
    // fired is repaired point to point, which reaches it, until it NACKs again.
    let mut net = Net::new(5, |_| {});
    net.drop = Box::new(|r, to| (to == 1 || to == 3) && r.flags.contains(Flags::BROADCAST));
    let msgs: Vec<Vec<u8>> = (0..10).map(|i| message(20_000, i)).collect();
    broadcast_all(&mut net, &msgs, HardwareAlgorithm::Simple);
    for r in 1..5 {
        let got: Vec<Vec<u8>> = net.delivered[r].iter().map(|d| d.2.clone()).collect();
        assert_eq!(got, msgs, "rank {r}");
    }
    assert_eq!(
        net.engines[0].sender().failed_over(),
        vec![Rank::new(1), Rank::new(3)]
    );
}
#[test]
fn frames_placed_ahead_into_a_message_that_contradicts_its_start_are_asked_for_again() {
    let mut rx = Engine::new({
        let mut c = EngineConfig::new(7, Rank::new(1), 2);
        c.window = 64;
        c
    })
    .unwrap();
    let now = Instant::now();
    let frame = |seq: u32, msg_id: u32, msg_len: u32, offset: u32, len: usize, last: bool| {
        let mut r = Repr::new(Kind::Data);
        r.group = 7;
        r.src = Rank::new(0);
        r.dst = wire::ALL;
        r.seq = seq;
        r.msg_id = msg_id;
        r.msg_len = msg_len;
        r.offset = offset;
        if last {
            r.flags |= Flags::LAST;
        }
        let payload: Vec<u8> = (0..len)
            .map(|i| (i as u32 + offset + 7 * msg_id) as u8)
            .collect();
        r.to_vec(&payload).unwrap()
    };
    // Message 0 is in progress when a frame of message 1 arrives ahead, claiming a length
    // that its first frame will contradict.
    rx.handle_frame(now, &frame(0, 0, 2000, 0, 1000, false))
        .unwrap();
    rx.handle_frame(now, &frame(3, 1, 500, 0, 100, false))
        .unwrap();
    rx.handle_frame(now, &frame(1, 0, 2000, 1000, 1000, true))
        .unwrap();
    rx.handle_frame(now, &frame(2, 1, 1000, 0, 500, false))
        .unwrap();
    // The contradicting frame was forgotten: its sequence is taken again.
    rx.handle_frame(now, &frame(3, 1, 1000, 500, 500, true))
        .unwrap();
    let mut got = Vec::new();
    while let Some(ev) = rx.poll_event() {
        if let EngineEvent::Delivered(Message { msg_id, data, .. }) = ev {
            got.push((msg_id, data));
        }
    }
    let want = |id: u32, len: u32| -> Vec<u8> { (0..len).map(|i| (i + 7 * id) as u8).collect() };
    assert_eq!(got, vec![(0, want(0, 2000)), (1, want(1, 1000))]);
}

/// Performs the attack: a recorded acknowledgement sent again is refused (its control counter
/// was seen), so it can neither keep a dead receiver alive nor move a cursor.
#[test]
fn a_replayed_control_frame_is_refused() {
    let (mut root, mut rx) = root_and_receiver();
    let now = Instant::now();
    let mut buf = vec![0u8; 1500];
    root.bcast(now, vec![1; 10], HardwareAlgorithm::Simple)
        .unwrap();
    let t = root.poll_transmit(now, &mut buf).unwrap();
    rx.handle_frame(now, &buf[..t.len]).unwrap();
    // The root's timer fires: its poll asks for the acknowledgement.
    let later = now + Duration::from_secs(1);
    root.handle_timeout(later);
    let t = root
        .poll_transmit(later, &mut buf)
        .expect("the root's poll");
    rx.handle_frame(later, &buf[..t.len]).unwrap();
    let t = rx
        .poll_transmit(later, &mut buf)
        .expect("an acknowledgement");
    let ack = buf[..t.len].to_vec();
    assert_eq!(Frame::new_checked(&ack[..]).unwrap().kind(), Kind::Ack);
    assert_eq!(root.handle_frame(now, &ack), Ok(()));
    assert_eq!(root.handle_frame(now, &ack), Err(DropReason::Replayed));
    assert_eq!(root.stats().drops.replayed, 1);
    assert_eq!(root.stats().acks_handled, 1);
}

#[test]
fn only_frames_that_pass_every_check_are_a_sign_of_life() {
    let key = [3u8; 32];
    let mut e = Engine::new({
        let mut c = EngineConfig::new(7, Rank::new(1), 3);
        c.key = Some(key.into());
        c
    })
    .unwrap();
    let t0 = Instant::now();
    // The sender's control counter 1: a fresh frame, not a replay.
    let mut r = to_all(Kind::Heartbeat, 0, 1);
    let sealed = |r: &Repr, k: &[u8; 32]| {
        let mut buf = vec![0u8; 200];
        let n = r.emit(b"", &mut buf).unwrap();
        let n = wire::seal(k, &mut buf, n).unwrap();
        buf.truncate(n);
        buf
    };
    r.group = 8; // another group on the segment
    let _ = e.handle_frame(t0, &sealed(&r, &key));
    r.group = 7;
    let _ = e.handle_frame(t0, &r.to_vec(b"").unwrap()); // no tag
    let _ = e.handle_frame(t0, &sealed(&r, &[4u8; 32])); // wrong key
    let mut garbage = sealed(&r, &key);
    garbage[20] ^= 1;
    let _ = e.handle_frame(t0, &garbage);
    assert_eq!(e.last_heard(Rank::new(0)), None);
    let t1 = t0 + Duration::from_millis(5);
    e.handle_frame(t1, &sealed(&r, &key)).unwrap();
    assert_eq!(e.last_heard(Rank::new(0)), Some(t1));
    assert_eq!(e.last_heard(Rank::new(2)), None);
}

#[test]
fn a_peer_nack_whose_base_lies_before_the_stream_is_answered_without_overflow() {
    // Extended against sequence 0, base 0xffff_ffff is "one before the start", which wraps
    // to the top of the 64-bit sequence space; base + bit overflowed (found by fuzzing).
    let (mut e, now) = member_with_a_stream_of_root_0();
    let nack = nack_frame(Rank::new(2), Rank::new(1), Flags::PEER, 0, u32::MAX, 0xffff);
    assert!(e.handle_frame(now, &nack).is_ok());
    let mut buf = vec![0u8; 1500];
    let t = e.poll_transmit(now, &mut buf).expect("a reply");
    let reply = Repr::parse(&Frame::new_checked(&buf[..t.len]).unwrap());
    assert!(reply.flags.contains(Flags::PEER | Flags::UNHELD));
}
#[test]
fn a_not_held_reply_whose_base_lies_before_the_stream_is_ignored_without_overflow() {
    // Rank 2 is rank 1's peer for root 0's stream; its "not held" reply names base
    // 0xffff_ffff (found by fuzzing).
    let (mut e, now) = member_with_a_stream_of_root_0();
    let reply = nack_frame(
        Rank::new(2),
        Rank::new(1),
        Flags::PEER | Flags::UNHELD,
        0,
        u32::MAX,
        0xffff,
    );
    assert!(e.handle_frame(now, &reply).is_ok());
}
#[test]
fn a_nack_to_the_root_whose_base_lies_before_the_stream_asks_for_nothing() {
    let mut root = Engine::new(EngineConfig::new(7, Rank::new(0), 3)).unwrap();
    let now = Instant::now();
    root.bcast(now, vec![5; 100], HardwareAlgorithm::Simple)
        .unwrap();
    let mut buf = vec![0u8; 1500];
    while root.poll_transmit(now, &mut buf).is_some() {}
    let nack = nack_frame(
        Rank::new(1),
        Rank::new(0),
        Flags::empty(),
        0,
        u32::MAX,
        0xffff,
    );
    assert!(root.handle_frame(now, &nack).is_ok());
    assert!(
        root.poll_transmit(now, &mut buf).is_none(),
        "nothing repaired"
    );
}

/// Performs the attack: a recorded data frame sent again is a duplicate, no sign of its root's
/// life (a receiver that waits for a dead sender must not be kept waiting by replays).
#[test]
fn a_replayed_data_frame_is_no_sign_of_life() {
    let (mut root, mut rx) = root_and_receiver();
    let t0 = Instant::now();
    let mut buf = vec![0u8; 1500];
    root.bcast(t0, vec![1; 10], HardwareAlgorithm::Simple)
        .unwrap();
    let t = root.poll_transmit(t0, &mut buf).unwrap();
    let data = buf[..t.len].to_vec();
    rx.handle_frame(t0, &data).unwrap();
    assert_eq!(rx.last_heard(Rank::new(0)), Some(t0));
    let t1 = t0 + Duration::from_secs(1);
    assert!(rx.handle_frame(t1, &data).is_err(), "a duplicate");
    assert_eq!(
        rx.last_heard(Rank::new(0)),
        Some(t0),
        "the replay is not a sign of life"
    );
}

/// The first data frame `root` (of a group of 3, id 7) broadcasts.
fn first_data_frame(root: u16) -> Vec<u8> {
    let mut e = Engine::new(EngineConfig::new(7, Rank::new(root), 3)).unwrap();
    let now = Instant::now();
    e.bcast(now, vec![root as u8; 10], HardwareAlgorithm::Simple)
        .unwrap();
    let mut buf = vec![0u8; 1500];
    let t = e.poll_transmit(now, &mut buf).unwrap();
    buf.truncate(t.len);
    assert_eq!(Frame::new_checked(&buf[..]).unwrap().kind(), Kind::Data);
    buf
}

/// Performs the attack: frames in the name of a member this one evicted (its address forged,
/// or the member back after it was declared dead) are refused, before and after its
/// fellows' frames, while every live member's are taken.
#[test]
fn frames_of_an_evicted_member_are_refused_and_the_others_taken() {
    let mut rx = Engine::new(EngineConfig::new(7, Rank::new(1), 3)).unwrap();
    let now = Instant::now();
    let (from0, from2) = (first_data_frame(0), first_data_frame(2));
    assert_eq!(rx.handle_frame(now, &from2), Ok(()), "live until evicted");
    assert!(rx.evict(now, Rank::new(2)));
    assert!(!rx.is_live(Rank::new(2)) && rx.is_live(Rank::new(0)));
    assert_eq!(
        rx.handle_frame(now, &from2),
        Err(DropReason::Evicted(Rank::new(2)))
    );
    assert_eq!(rx.handle_frame(now, &from0), Ok(()), "a live root's stream");
    let heartbeat = to_all(Kind::Heartbeat, 2, 1);
    assert_eq!(
        rx.handle_frame(now, &heartbeat.to_vec(b"").unwrap()),
        Err(DropReason::Evicted(Rank::new(2))),
        "its control frames too"
    );
}

/// Performs the attack: a member that takes one root's stream alone (a stream's receiver)
/// refuses the data frames of any other member, which may be a host without the key speaking
/// as one, and makes no receive stream for them.
#[test]
fn a_member_that_takes_one_stream_refuses_anothers_data() {
    let mut rx = Engine::new(EngineConfig::new(7, Rank::new(1), 3)).unwrap();
    let now = Instant::now();
    assert_eq!(
        rx.handle_frame(now, &first_data_frame(2)),
        Ok(()),
        "every stream by default"
    );
    let mut rx = Engine::new(EngineConfig::new(7, Rank::new(1), 3)).unwrap();
    rx.take_streams_from(&[Rank::new(0)]);
    assert_eq!(
        rx.handle_frame(now, &first_data_frame(2)),
        Err(DropReason::Protocol("a stream this member does not take"))
    );
    assert!(rx.receiver(Rank::new(2)).is_none(), "nothing made for it");
    assert_eq!(rx.handle_frame(now, &first_data_frame(0)), Ok(()));
    assert!(rx.receiver(Rank::new(0)).is_some());
}

/// Data frames sent to rank `to` alone as fail-over copies, counted by a drop rule that drops
/// frames to `to` sent to everyone while `broken` says so.
fn copies_counted(
    to: usize,
    broken: std::rc::Rc<std::cell::Cell<bool>>,
    copies: std::rc::Rc<std::cell::Cell<usize>>,
) -> super::DropRule {
    Box::new(move |r, j| {
        if j != to {
            return false;
        }
        if r.kind == Some(Kind::Data) && r.flags.contains(Flags::P2P) {
            copies.set(copies.get() + 1);
        }
        broken.get() && r.flags.contains(Flags::BROADCAST)
    })
}

/// Rank 0 broadcasts `more`, `before` messages after its first: every member gets them all.
fn broadcast_more(net: &mut Net, before: usize, more: &[Vec<u8>]) {
    for m in more {
        net.engines[0]
            .bcast(net.now, m.clone(), HardwareAlgorithm::Simple)
            .unwrap();
    }
    net.run(|n| n.all_got(0, before + more.len()));
}

/// Every member but rank 0 got `msgs`, once each, in order, intact.
fn assert_all_delivered(net: &Net, msgs: &[Vec<u8>]) {
    for r in 1..net.engines.len() {
        let got = &net.delivered[r];
        assert_eq!(got.len(), msgs.len(), "rank {r}: messages delivered");
        let wrong = got.iter().zip(msgs).position(|(d, m)| d.2 != *m);
        assert_eq!(wrong, None, "rank {r}: the first message that differs");
    }
}

#[test]
fn a_member_served_point_to_point_goes_back_to_broadcast_once_broadcast_reaches_it_again() {
    use std::cell::Cell;
    use std::rc::Rc;
    let mut net = Net::new(4, |_| {});
    let (broken, copies) = (Rc::new(Cell::new(true)), Rc::new(Cell::new(0)));
    net.drop = copies_counted(2, broken.clone(), copies.clone());
    // Broadcast towards rank 2 is broken (a port's filter): it is served point to point.
    let mut msgs: Vec<Vec<u8>> = (0..40).map(|i| message(4000, i)).collect();
    broadcast_more(&mut net, 0, &msgs);
    assert_eq!(net.engines[0].sender().failed_over(), vec![Rank::new(2)]);
    // The path is put right. The copies go on until broadcast is tried again, and the trial
    // keeps it on broadcast.
    broken.set(false);
    let more: Vec<Vec<u8>> = (0..200).map(|i| message(14_000, i as u8)).collect();
    broadcast_more(&mut net, msgs.len(), &more);
    msgs.extend(more);
    assert_eq!(net.engines[0].sender().failed_over(), Vec::<Rank>::new());
    assert_eq!(net.engines[0].stats().failbacks, 1);
    assert_eq!(net.engines[0].stats().failovers, 1);
    // From now on rank 2 gets broadcast frames alone, no copies.
    let before = copies.get();
    assert!(before > 0, "it was served point to point");
    let more: Vec<Vec<u8>> = (0..50).map(|i| message(14_000, i as u8 ^ 0x55)).collect();
    broadcast_more(&mut net, msgs.len(), &more);
    msgs.extend(more);
    assert_eq!(
        copies.get(),
        before,
        "no copies after it went back to broadcast"
    );
    assert_all_delivered(&net, &msgs);
}

#[test]
fn a_member_that_broadcast_still_does_not_reach_stays_point_to_point_and_is_tried_ever_less_often()
{
    let mut net = Net::new(4, |_| {});
    net.drop = Box::new(|r, to| to == 2 && r.flags.contains(Flags::BROADCAST));
    // About 3600 frames: the fail-over, a trial after 1024 copies that fails, another after
    // 2048 that fails; the next would wait for 4096.
    let msgs: Vec<Vec<u8>> = (0..360).map(|i| message(14_000, i as u8)).collect();
    broadcast_more(&mut net, 0, &msgs);
    assert_eq!(net.engines[0].sender().failed_over(), vec![Rank::new(2)]);
    assert_eq!(
        net.engines[0].stats().failovers,
        3,
        "switched once, and again after each of two trials"
    );
    assert_eq!(net.engines[0].stats().failbacks, 0);
    assert_all_delivered(&net, &msgs);
}

#[test]
fn a_root_whose_broadcast_reaches_too_few_tries_it_again_after_a_run_of_messages_down_the_tree() {
    use std::cell::Cell;
    use std::rc::Rc;
    let mut net = Net::new(4, |_| {});
    let broken = Rc::new(Cell::new(true));
    let b = broken.clone();
    // Broadcast reaches neither rank 1 nor rank 2: two of three receivers.
    net.drop = Box::new(move |r, to| {
        b.get() && (to == 1 || to == 2) && r.flags.contains(Flags::BROADCAST)
    });
    let batch = |salt: u8| -> Vec<Vec<u8>> { (0..40).map(|i| message(4000, i ^ salt)).collect() };
    let mut msgs = batch(0);
    broadcast_more(&mut net, 0, &msgs);
    let both = vec![Rank::new(1), Rank::new(2)];
    assert_eq!(net.engines[0].sender().failed_over(), both);
    // Asked once per message: the tree, 63 times; then broadcast is tried again, to everybody.
    for i in 0..63 {
        assert!(net.engines[0].broadcast_reaches_too_few(), "message {i}");
    }
    assert!(!net.engines[0].broadcast_reaches_too_few());
    assert_eq!(net.engines[0].sender().failed_over(), Vec::<Rank>::new());
    // Still broken: the trial's broadcasts send both back, and the next trial waits for 128.
    let more = batch(0x11);
    broadcast_more(&mut net, msgs.len(), &more);
    msgs.extend(more);
    assert_eq!(net.engines[0].sender().failed_over(), both);
    for i in 0..127 {
        assert!(net.engines[0].broadcast_reaches_too_few(), "message {i}");
    }
    assert!(!net.engines[0].broadcast_reaches_too_few());
    // Put right: the trial keeps both on broadcast, and the root broadcasts from now on.
    broken.set(false);
    let more = batch(0x22);
    broadcast_more(&mut net, msgs.len(), &more);
    msgs.extend(more);
    assert_eq!(net.engines[0].sender().failed_over(), Vec::<Rank>::new());
    assert_eq!(net.engines[0].stats().failbacks, 2);
    assert!(!net.engines[0].broadcast_reaches_too_few());
    assert_all_delivered(&net, &msgs);
}
