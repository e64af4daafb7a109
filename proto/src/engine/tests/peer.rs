//! Peer repair: fellows ask each other first, keep copies or messages for it, and give up a
//! peer that does not answer.

use std::time::{Duration, Instant};

use crate::engine::recv::{COPY_TAIL, PEER_HOLD_WAIT};
use crate::engine::{Dest, DropReason, Engine, EngineConfig, EngineEvent, HardwareAlgorithm};
use crate::wire::{Control, Flags, Frame, Kind, Repr};
use crate::Rank;

use super::{
    ask_as_fellow, broadcast_all, broadcast_to_all, lose_once, message, peer_net, repair_payloads,
    Net,
};

#[test]
fn with_peer_repair_a_fellow_receiver_repairs_and_the_root_sends_nothing_again() {
    let mut net = peer_net(4);
    net.drop = Box::new(lose_once(3, 2));
    // Long enough that the peer is still assembling it when asked (a peer serves only
    // frames of messages it has not delivered yet).
    let m = message(150_000, 1);
    broadcast_to_all(&mut net, &m);
    for r in 1..4 {
        assert_eq!(net.delivered[r], vec![(Rank::new(0), 0, m.clone())]);
    }
    // Rank 2's peer is rank 3 (the next rank after it that is not the root).
    assert_eq!(net.engines[0].stats().repair_frames, 0);
    assert_eq!(net.engines[3].stats().peer_repairs, 1);
    assert_eq!(net.engines[1].stats().peer_repairs, 0);
    assert_eq!(net.engines[2].stats().peer_nacks, 1);
    assert_eq!(net.engines[2].stats().drops.total(), 0);
}

/// Root 0 broadcasts one-frame messages in `batches` (frame `i` is message `i`), each batch
/// once every member has the one before; rank 2 loses the frames in `lost` once each.
/// Returns the network after every member has them all.
fn one_frame_messages_with_losses(batches: &[u8], lost: &'static [u32]) -> Net {
    let mut net = peer_net(4);
    let mut losers: Vec<_> = lost.iter().map(|&s| lose_once(s, 2)).collect();
    net.drop = Box::new(move |r, to| losers.iter_mut().any(|l| l(r, to)));
    let mut msgs = Vec::new();
    for &count in batches {
        for _ in 0..count {
            let m = message(100, msgs.len() as u8);
            net.engines[0]
                .bcast(net.now, m.clone(), HardwareAlgorithm::Simple)
                .unwrap();
            msgs.push(m);
        }
        net.run(|n| n.all_got(0, msgs.len()));
    }
    let want: Vec<_> = (0..msgs.len())
        .map(|i| (Rank::new(0), i as u64, msgs[i].clone()))
        .collect();
    assert_eq!(net.delivered[2], want);
    net
}

#[test]
fn a_peer_nobody_asked_keeps_no_copies_so_a_frame_it_delivered_comes_from_the_root() {
    // The peer (rank 3) has handed message 3 to its application long before rank 2 finds
    // frame 3 missing (when frame 4 arrives). Without loss nobody asks it, so it kept no
    // second copy of its frames: it says so, and the root repairs.
    let net = one_frame_messages_with_losses(&[6], &[3]);
    assert_eq!(
        net.engines[3].stats().peer_repairs,
        0,
        "the peer held nothing"
    );
    assert_eq!(net.engines[2].stats().peer_nacks, 1, "the peer was asked");
    assert_eq!(net.engines[0].stats().repair_frames, 1, "the root repaired");
}

#[test]
fn once_asked_a_peer_keeps_copies_and_repairs_frames_it_delivered_already() {
    // The first request (frame 3) finds no copy; from then on the peer keeps copies, so the
    // next loss (frame 8, in a later batch, its message delivered at the peer) is repaired by
    // the peer.
    let net = one_frame_messages_with_losses(&[6, 6], &[3, 8]);
    assert_eq!(
        net.engines[3].stats().peer_repairs,
        1,
        "the peer repaired frame 8"
    );
    assert_eq!(net.engines[2].stats().peer_nacks, 2);
    assert_eq!(
        net.engines[0].stats().repair_frames,
        1,
        "the root repaired frame 3 only"
    );
}

/// Root 0 and receiver 1 of group 7 (3 members, peer repair, a window of four copied
/// tails); `hold`: `EngineConfig::peer_hold`.
fn fellow_pair(hold: bool) -> (Engine, Engine) {
    let cfg = |rank| {
        let mut c = EngineConfig::new(7, rank, 3);
        c.window = 4 * COPY_TAIL;
        c.peer_repair = true;
        c.peer_hold = hold;
        c
    };
    (
        Engine::new(cfg(Rank::new(0))).unwrap(),
        Engine::new(cfg(Rank::new(1))).unwrap(),
    )
}

#[test]
fn once_asked_a_receiver_keeps_copies_of_the_last_frames_of_each_message_only() {
    // A window wider than the copied tail: a frame far from its message's end was in the
    // message's buffer while the fellow's request could come; only the tail outlives the
    // delivery in slot copies (one copy of the stream, not two, on a lossy segment).
    let (mut root, mut rx) = fellow_pair(false);
    let now = Instant::now();
    let mut buf = vec![0u8; 1500];
    let mut send_all = |root: &mut Engine, rx: &mut Engine, m: Vec<u8>| {
        root.bcast(now, m, HardwareAlgorithm::Simple).unwrap();
        while let Some(t) = root.poll_transmit(now, &mut buf) {
            assert_eq!(rx.handle_frame(now, &buf[..t.len]), Ok(()));
        }
        assert!(matches!(rx.poll_event(), Some(EngineEvent::Delivered(_))));
    };
    // Message 0 (frame 0), delivered before anybody asked: no copy. The request turns copies on.
    send_all(&mut root, &mut rx, vec![1; 8]);
    let unheld = |out: &[Vec<u8>], seq: u32| {
        out.iter().any(|f| {
            Frame::new_checked(&f[..])
                .ok()
                .and_then(|f| Control::parse(&f).ok())
                == Some(Control::PeerNack {
                    root: Rank::new(0),
                    base: seq,
                    missing: 1,
                    unheld: true,
                    more: vec![],
                })
        })
    };
    let out = ask_as_fellow(&mut rx, now, 0, 1);
    assert!(unheld(&out, 0), "nothing kept before anybody asked");
    // Message 1: frames 1..=frames, delivered whole.
    let per = root.config().max_payload();
    let frames = COPY_TAIL + 40;
    let m = message(frames * per, 9);
    send_all(&mut root, &mut rx, m.clone());
    // Its frame 10 (frames - 10 from the end): no copy, the fellow is sent to the root.
    let out = ask_as_fellow(&mut rx, now, 1 + 10, 2);
    assert!(unheld(&out, 11), "frame 10 of the message is not kept");
    assert!(repair_payloads(&out).is_empty());
    // Its last frame and the first within the tail: repaired from their copies, intact.
    for (k, ctr) in [(frames - 1, 3), (frames - COPY_TAIL, 4)] {
        let out = ask_as_fellow(&mut rx, now, 1 + k as u32, ctr);
        assert_eq!(
            repair_payloads(&out),
            vec![m[k * per..(k + 1) * per].to_vec()],
            "frame {k}"
        );
    }
    // One frame before the tail: not kept.
    let k = frames - COPY_TAIL - 1;
    assert!(unheld(
        &ask_as_fellow(&mut rx, now, 1 + k as u32, 5),
        1 + k as u32
    ));
    assert_eq!(rx.stats().peer_repairs, 2);
}

/// What `rx` delivered so far: (message id, bytes) of each `Delivered`, in order.
fn delivered_now(rx: &mut Engine) -> Vec<(u64, Vec<u8>)> {
    let mut got = Vec::new();
    while let Some(ev) = rx.poll_event() {
        if let EngineEvent::Delivered(m) = ev {
            got.push((m.msg_id, m.data));
        }
    }
    got
}

#[test]
fn with_peer_hold_a_message_is_held_back_for_fellows_instead_of_copied() {
    let (mut root, mut rx) = fellow_pair(true);
    let now = Instant::now();
    // Rank 2 only asks (as a fellow): the root does not wait for its acknowledgements.
    assert!(root.evict(now, Rank::new(2)));
    let mut buf = vec![0u8; 1500];
    // Root 0 broadcasts `m` at `at`; rank 1's acknowledgements go back to it.
    let mut send = |root: &mut Engine, rx: &mut Engine, at: Instant, m: &[u8]| {
        root.bcast(at, m.to_vec(), HardwareAlgorithm::Simple)
            .unwrap();
        loop {
            let mut moved = false;
            while let Some(t) = root.poll_transmit(at, &mut buf) {
                moved = true;
                assert_eq!(rx.handle_frame(at, &buf[..t.len]), Ok(()));
            }
            while let Some(t) = rx.poll_transmit(at, &mut buf) {
                moved = true;
                let _ = root.handle_frame(at, &buf[..t.len]);
            }
            if !moved {
                break;
            }
        }
    };
    // Before any fellow asked: delivered at once.
    send(&mut root, &mut rx, now, &[1; 8]);
    assert_eq!(delivered_now(&mut rx), vec![(0, vec![1; 8])]);
    assert!(repair_payloads(&ask_as_fellow(&mut rx, now, 0, 1)).is_empty());
    // A fellow asked: the next message (frames 1..=frames) is complete but held back.
    let per = root.config().max_payload();
    let frames = COPY_TAIL + 40;
    let m1 = message(frames * per, 9);
    send(&mut root, &mut rx, now, &m1);
    assert!(delivered_now(&mut rx).is_empty(), "held for fellows");
    // Any frame of it is served from the message itself: the first (which a copy of the
    // tail would not have kept), the last.
    for (k, ctr) in [(0, 2), (frames - 1, 3)] {
        let out = ask_as_fellow(&mut rx, now, 1 + k as u32, ctr);
        assert_eq!(
            repair_payloads(&out),
            vec![m1[k * per..(k + 1) * per].to_vec()],
            "frame {k}"
        );
    }
    // A message completed meanwhile waits behind it: delivery stays in order.
    send(&mut root, &mut rx, now, &[2; 8]);
    assert!(delivered_now(&mut rx).is_empty());
    assert_eq!(rx.poll_timeout(), Some(now + PEER_HOLD_WAIT));
    rx.handle_timeout(now + PEER_HOLD_WAIT);
    assert_eq!(delivered_now(&mut rx), vec![(1, m1), (2, vec![2; 8])]);
    // Delivered, the message is gone: no copy of its tail stayed in the window.
    let out = ask_as_fellow(&mut rx, now, frames as u32, 4);
    assert!(
        repair_payloads(&out).is_empty(),
        "the last frame of message 1 was not copied"
    );
    // The wait runs from the stream's last move: a frame 4 ms later puts it off.
    let t0 = now + PEER_HOLD_WAIT;
    let t1 = t0 + Duration::from_millis(4);
    send(&mut root, &mut rx, t0, &[3; 8]);
    send(&mut root, &mut rx, t1, &[4; 8]);
    rx.handle_timeout(t0 + PEER_HOLD_WAIT);
    assert!(delivered_now(&mut rx).is_empty(), "the stream moved at t1");
    rx.handle_timeout(t1 + PEER_HOLD_WAIT);
    assert_eq!(
        delivered_now(&mut rx),
        vec![(3, vec![3; 8]), (4, vec![4; 8])]
    );
    // A window's worth of frames after its end releases a held message without the timer.
    let t2 = t1 + PEER_HOLD_WAIT;
    let m5 = message(2 * per, 5);
    send(&mut root, &mut rx, t2, &m5);
    assert!(delivered_now(&mut rx).is_empty());
    let m6 = message((4 * COPY_TAIL + 1) * per, 6);
    send(&mut root, &mut rx, t2, &m6);
    assert_eq!(delivered_now(&mut rx), vec![(5, m5)]);
    // The root evicted, its complete message is still delivered.
    assert!(rx.evict(t2, Rank::new(0)));
    assert_eq!(delivered_now(&mut rx), vec![(6, m6)]);
}

#[test]
fn when_the_peer_cannot_help_the_root_repairs_after_the_retry_interval() {
    let mut net = peer_net(4);
    // Rank 2 loses frame 3, and every repair a peer sends it is lost too.
    let mut lose = lose_once(3, 2);
    net.drop = Box::new(move |r, to| {
        let peer_repair = r.kind == Some(Kind::Repair) && r.flags.contains(Flags::P2P);
        (to == 2 && peer_repair) || lose(r, to)
    });
    let m = message(150_000, 4);
    broadcast_to_all(&mut net, &m);
    assert_eq!(net.delivered[2], vec![(Rank::new(0), 0, m)]);
    assert_eq!(net.engines[2].stats().peer_nacks, 2, "asked the peer twice");
    assert_eq!(
        net.engines[3].stats().peer_repairs,
        2,
        "the peer tried twice"
    );
    let tx = net.engines[0].sender().eqa();
    assert_eq!(
        tx.lms(Rank::new(2)).unwrap().stats.repairs,
        1,
        "then the root repaired"
    );
}

#[test]
fn after_an_eviction_the_next_live_member_is_the_peer() {
    let mut net = peer_net(4);
    let now = net.now;
    for e in 0..3 {
        assert!(net.engines[e].evict(now, Rank::new(3)));
    }
    let mut lose = lose_once(2, 2);
    // Rank 3 is gone.
    net.drop = Box::new(move |r, to| to == 3 || lose(r, to));
    let m = message(150_000, 5);
    net.engines[0]
        .bcast(net.now, m.clone(), HardwareAlgorithm::Simple)
        .unwrap();
    net.run(|n| n.delivered[1].len() == 1 && n.delivered[2].len() == 1);
    assert_eq!(net.delivered[2], vec![(Rank::new(0), 0, m)]);
    // Rank 2's peer was 3; with 3 evicted it wraps around past the root to rank 1.
    assert_eq!(net.engines[1].stats().peer_repairs, 1);
    assert_eq!(net.engines[0].stats().repair_frames, 0);
}

#[test]
fn a_peer_nack_naming_a_bad_root_is_dropped() {
    let mut e = Engine::new({
        let mut c = EngineConfig::new(7, Rank::new(1), 3);
        c.peer_repair = true;
        c
    })
    .unwrap();
    let now = Instant::now();
    // Rank 2 asks rank 1 for frames of `root`'s stream (each with a fresh control counter).
    let ctr = std::cell::Cell::new(0);
    let peer_nack = |root: u32, seq: u32, bitmap: u16| {
        let mut r = Repr::new(Kind::Nack);
        r.group = 7;
        r.src = Rank::new(2);
        r.dst = Rank::new(1);
        r.flags = Flags::PEER;
        r.msg_id = root;
        r.seq = seq;
        r.bitmap = bitmap;
        ctr.set(ctr.get() + 1);
        r.msg_len = ctr.get();
        r.to_vec(&[]).unwrap()
    };
    for root in [1u32, 3, 99] {
        assert!(
            matches!(
                e.handle_frame(now, &peer_nack(root, 0, 1)),
                Err(DropReason::Protocol(_))
            ),
            "root {root}"
        );
    }
    // A root this member has no stream of yet: nothing held, and the asker is told so.
    assert!(e.handle_frame(now, &peer_nack(0, 5, 0xffff)).is_ok());
    let mut buf = vec![0u8; 1500];
    let t = e.poll_transmit(now, &mut buf).expect("a reply");
    assert_eq!(t.dst, Dest::Rank(Rank::new(2)));
    let reply = Repr::parse(&Frame::new_checked(&buf[..t.len]).unwrap());
    assert_eq!(reply.kind, Some(Kind::Nack));
    assert!(reply.flags.contains(Flags::PEER | Flags::UNHELD));
    assert_eq!((reply.seq, reply.bitmap, reply.msg_id), (5, 0xffff, 0));
    assert!(e.poll_transmit(now, &mut buf).is_none());
}

#[test]
fn a_peer_that_lost_the_frame_too_says_so_and_the_root_is_asked_at_once() {
    // Ranks 1 and 2 are each other's peer, and both lose frame 3.
    let mut net = peer_net(3);
    let mut lost = [false; 3];
    net.drop = Box::new(move |r, to| {
        if r.kind == Some(Kind::Data) && r.seq == 3 && !lost[to] {
            lost[to] = true;
            return true;
        }
        false
    });
    let start = net.now;
    let m = message(150_000, 6);
    net.engines[0]
        .bcast(net.now, m.clone(), HardwareAlgorithm::Simple)
        .unwrap();
    net.run(|n| n.all_got(0, 1));
    assert_eq!(net.delivered[1], vec![(Rank::new(0), 0, m.clone())]);
    assert_eq!(net.delivered[2], vec![(Rank::new(0), 0, m)]);
    assert_eq!(net.engines[1].stats().peer_repairs, 0);
    assert_eq!(net.engines[2].stats().peer_repairs, 0);
    assert!(net.engines[0].stats().repair_frames >= 1);
    // Without the answer, each would have waited out its retry interval before asking the root.
    let retry = EngineConfig::new(7, Rank::new(0), 3).nack_retry;
    assert!(net.now - start < retry, "took {:?}", net.now - start);
}

/// A group of 8 with a tree of fan-out 2 and peer repair: from root 0, ranks 1 and 2 are the
/// root's children, 3 and 4 rank 1's, 5 and 6 rank 2's, 7 rank 3's.
fn tree_net() -> Net {
    Net::new(8, |c| {
        c.peer_repair = true;
        c.ack_tree = 2;
        c.nack_retry = Duration::from_millis(1);
    })
}

#[test]
fn with_a_tree_a_member_asks_its_parent_which_relays_a_frame_it_lacked_too_when_it_comes() {
    // Ranks 3 and 7 (3's child) lose frame 3. Rank 7 asks its parent, which lacks it too and
    // says so; rank 3 asks its own parent (rank 1), and relays the frame to rank 7 as soon as
    // it comes: rank 7 asks once, and the root repairs nothing.
    let mut net = tree_net();
    let mut losers: Vec<_> = [3, 7].into_iter().map(|r| lose_once(3, r)).collect();
    net.drop = Box::new(move |r, to| losers.iter_mut().any(|l| l(r, to)));
    let m = message(150_000, 6);
    broadcast_to_all(&mut net, &m);
    for r in 1..8 {
        assert_eq!(net.delivered[r], vec![(Rank::new(0), 0, m.clone())]);
    }
    assert_eq!(net.engines[0].stats().repair_frames, 0, "the root repaired");
    assert_eq!(net.engines[1].stats().peer_repairs, 1, "1 repaired 3");
    assert_eq!(net.engines[3].stats().peer_repairs, 1, "3 relayed to 7");
    assert_eq!(net.engines[7].stats().peer_nacks, 1, "7 asked once");
    let others: u64 = [2, 4, 5, 6]
        .iter()
        .map(|&r| net.engines[r].stats().peer_repairs)
        .sum();
    assert_eq!(others, 0, "members outside the branch repaired");
}

#[test]
fn with_a_tree_a_frame_every_member_lost_is_asked_of_the_root_by_its_children_alone() {
    // Every receiver loses frame 3 (as when the root's own port drops it). The root's two
    // children ask the root; every other member asks its parent, which lacks it too. The root
    // hears two NACKs, not seven, and re-broadcasts once; the parents, which saw the
    // re-broadcast their children saw, relay nothing.
    let mut net = tree_net();
    let mut losers: Vec<_> = (1..8).map(|r| lose_once(3, r)).collect();
    net.drop = Box::new(move |r, to| losers.iter_mut().any(|l| l(r, to)));
    let m = message(150_000, 8);
    broadcast_to_all(&mut net, &m);
    for r in 1..8 {
        assert_eq!(net.delivered[r], vec![(Rank::new(0), 0, m.clone())]);
    }
    let root = net.engines[0].stats();
    assert_eq!(root.nacks_handled, 2, "NACKs into the root");
    assert_eq!((root.repair_frames, root.rebroadcasts), (1, 1));
    let relayed: u64 = (1..8).map(|r| net.engines[r].stats().peer_repairs).sum();
    assert_eq!(relayed, 0, "relays of a re-broadcast frame");
}

#[test]
fn with_a_tree_a_member_whose_parent_is_dead_gets_every_frame_from_the_root() {
    // Rank 3 is dead, and only the root knows it: rank 7 still asks it first. Every tenth data
    // frame to rank 7 is lost; it gets each from the root, once, in order.
    let mut net = tree_net();
    let now = net.now;
    assert!(net.engines[0].evict(now, Rank::new(3)));
    net.drop = Box::new(|r, to| {
        to == 3
            || r.src == Rank::new(3)
            || (to == 7 && r.kind == Some(Kind::Data) && r.seq % 10 == 5)
    });
    let msgs: Vec<Vec<u8>> = (0..10).map(|i| message(150_000, i)).collect();
    for m in &msgs {
        net.engines[0]
            .bcast(net.now, m.clone(), HardwareAlgorithm::Simple)
            .unwrap();
    }
    net.run(|n| {
        [1, 2, 4, 5, 6, 7]
            .iter()
            .all(|&r| n.delivered[r].len() == 10)
    });
    for r in [1, 2, 4, 5, 6, 7] {
        let got: Vec<&Vec<u8>> = net.delivered[r].iter().map(|d| &d.2).collect();
        assert_eq!(got, msgs.iter().collect::<Vec<_>>(), "rank {r}");
    }
    let repairs = net.engines[0]
        .sender()
        .eqa()
        .lms(Rank::new(7))
        .unwrap()
        .stats
        .repairs;
    assert!(repairs >= 90, "{repairs} repairs of rank 7 by the root");
}

#[test]
fn a_peer_that_never_answers_is_given_up_and_the_root_is_asked_directly() {
    let mut net = peer_net(4);
    let now = net.now;
    // Rank 3 is gone, but only the root and rank 1 know it: rank 2 still takes it as its
    // peer. Every tenth data frame to rank 2 is lost.
    assert!(net.engines[0].evict(now, Rank::new(3)));
    assert!(net.engines[1].evict(now, Rank::new(3)));
    net.drop = Box::new(|r, to| {
        let from_peer = (r.kind == Some(Kind::Repair) && r.flags.contains(Flags::P2P))
            || r.flags.contains(Flags::PEER);
        to == 3
            || (to == 2 && from_peer)
            || (to == 2 && r.kind == Some(Kind::Data) && r.seq % 10 == 5)
    });
    let msgs: Vec<Vec<u8>> = (0..10).map(|i| message(150_000, i)).collect();
    for m in &msgs {
        net.engines[0]
            .bcast(net.now, m.clone(), HardwareAlgorithm::Simple)
            .unwrap();
    }
    net.run(|n| n.delivered[1].len() == 10 && n.delivered[2].len() == 10);
    let got: Vec<&Vec<u8>> = net.delivered[2].iter().map(|d| &d.2).collect();
    assert_eq!(got, msgs.iter().collect::<Vec<_>>());
    let lost = net.engines[0]
        .sender()
        .eqa()
        .lms(Rank::new(2))
        .unwrap()
        .stats
        .repairs;
    let asked_peer = net.engines[2].stats().peer_nacks;
    assert!(lost >= 90, "{lost} repairs");
    // Asked until it left 16 requests unanswered (a request that repeats frames asked before,
    // or sends them on to the root, counts once), then not for the next 128 losses: about
    // 200 requests if it were never given up.
    assert!(asked_peer <= 40, "asked the silent peer {asked_peer} times");
}

/// A peer silent for a while (a stalled host) is given up for a pause, not for good: once the
/// stream has moved on, the receiver asks it again, and the later losses are repaired by it,
/// not by the root.
#[test]
fn a_peer_silent_for_a_while_is_asked_again_after_a_pause() {
    let mut net = peer_net(4);
    // Every fifth data frame to rank 2 is lost; whatever its peer (rank 3) sends it is lost
    // too until the root has sent frame 500.
    let mut highest = 0u32;
    net.drop = Box::new(move |r, to| {
        if r.kind == Some(Kind::Data) {
            highest = highest.max(r.seq);
        }
        let from_peer = (r.kind == Some(Kind::Repair) && r.flags.contains(Flags::P2P))
            || r.flags.contains(Flags::PEER);
        (to == 2 && from_peer && highest < 500)
            || (to == 2 && r.kind == Some(Kind::Data) && r.seq % 5 == 2)
    });
    let msgs: Vec<Vec<u8>> = (0..40).map(|i| message(150_000, i)).collect();
    broadcast_all(&mut net, &msgs, HardwareAlgorithm::Simple);
    let got: Vec<&Vec<u8>> = net.delivered[2].iter().map(|d| &d.2).collect();
    assert_eq!(got, msgs.iter().collect::<Vec<_>>());
    let frames = net.engines[0].sender().eqa().head().get();
    let lost = frames / 5;
    let root = net.engines[0]
        .sender()
        .eqa()
        .lms(Rank::new(2))
        .unwrap()
        .stats
        .repairs;
    assert!(lost > 700, "{lost} losses");
    assert!(
        root < lost / 2,
        "the root repaired {root} of {lost} lost frames: the peer was never asked again"
    );
}
