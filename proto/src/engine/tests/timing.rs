//! Timers: the protocol does not depend on how often timeouts are handled; destinations made
//! at the first broadcast; acknowledgement trees; acknowledgements off the critical path.

use std::time::{Duration, Instant};

use crate::engine::{Engine, EngineConfig, EngineEvent, EngineStats, HardwareAlgorithm, Message};
use crate::wire::{Control, Frame, Kind, Repr};
use crate::Rank;

use super::{
    assert_exact, drain, frames_of, lossy, lossy_stream, message, root_and_receiver, Net, LOSSY_LEN,
};

#[test]
fn the_protocol_does_not_depend_on_how_often_timeouts_are_handled() {
    // A driver that wakes only for due timers (one that schedules the members an event
    // concerns) and one that calls `handle_timeout` on every member after every frame must see
    // the same frames: a timer's effects happen when it fires, never again on a later call.
    let run = |eager: bool| {
        let mut net = Net::new(8, |_| {});
        net.eager_timeouts = eager;
        net.drop = lossy(1, 0.2);
        for i in 0..40 {
            net.engines[0]
                .bcast(
                    net.now,
                    message(1000 + 97 * i, i as u8),
                    HardwareAlgorithm::Simple,
                )
                .unwrap();
        }
        net.run(|n| n.all_got(0, 40) && n.engines[0].is_idle());
        let stats: Vec<EngineStats> = net.engines.iter().map(|e| e.stats().clone()).collect();
        (stats, net.sent, net.delivered)
    };
    let (lazy, eager) = (run(false), run(true));
    assert!(lazy.0[0].repair_frames > 0, "the loss must cause repairs");
    assert!(
        lazy.0.iter().map(|s| s.drops.stale).sum::<u64>() > 0,
        "and stale repairs, as when a probe crosses an acknowledgement"
    );
    assert!(
        lazy == eager,
        "root's counters, driven lazily then eagerly: {:?} / {:?}",
        lazy.0[0],
        eager.0[0]
    );
}

#[test]
fn a_member_makes_its_destination_structures_at_its_first_broadcast() {
    let mut net = Net::new(200, |_| {});
    net.engines[0]
        .bcast(net.now, message(3000, 9), HardwareAlgorithm::Simple)
        .unwrap();
    net.run(|n| n.all_got(0, 1));
    assert_eq!(net.engines[0].sender().eqa().dests().len(), 199);
    for e in &net.engines[1..] {
        assert!(
            e.sender().eqa().dests().is_empty(),
            "a receiver holds no LDPs"
        );
    }
    // A member evicted before the first broadcast starts out evicted.
    assert!(net.engines[1].evict(net.now, Rank::new(7)));
    net.engines[1]
        .bcast(net.now, message(10, 1), HardwareAlgorithm::Simple)
        .unwrap();
    let eqa = net.engines[1].sender().eqa();
    assert_eq!(eqa.dests().len(), 199);
    assert!(!eqa.lms(Rank::new(7)).unwrap().is_live());
    assert_eq!(eqa.hms().live(), 198);
}

#[test]
fn with_an_acknowledgement_tree_the_root_hears_a_few_reports_not_every_receiver() {
    let (n, count) = (48, 40);
    let (flat_net, flat) = lossy_stream(
        n,
        |c| {
            c.ack_tree = 0;
            c.peer_repair = true;
        },
        count,
    );
    assert_exact(&flat_net, 0, count, LOSSY_LEN, &[]);
    let (tree_net, tree) = lossy_stream(
        n,
        |c| {
            c.ack_tree = 4;
            c.peer_repair = true;
        },
        count,
    );
    assert_exact(&tree_net, 0, count, LOSSY_LEN, &[]);
    let members: Vec<&EngineStats> = tree_net.engines[1..].iter().map(|e| e.stats()).collect();
    assert!(
        members.iter().map(|s| s.tree_ack_frames).sum::<u64>() > 0,
        "receivers report up the tree"
    );
    assert_eq!(tree.tree_acks_ignored, 0, "one view: every report is taken");
    // Without the tree every receiver acknowledges every 8 frames: about n/8 per data frame.
    assert!(
        flat.acks_handled > 3 * flat.data_frames,
        "flat: {} control frames for {} data frames",
        flat.acks_handled,
        flat.data_frames
    );
    assert!(
        tree.acks_handled <= tree.data_frames,
        "tree: {} control frames for {} data frames",
        tree.acks_handled,
        tree.data_frames
    );
}

#[test]
fn a_dead_member_inside_the_tree_is_evicted_and_its_subtree_completes() {
    // Fan-out 2 over 20 members, root 0: rank 1 reports for ranks 3, 4, 7-10, 15-18.
    let mut net = Net::new(20, |c| c.ack_tree = 2);
    net.drop = Box::new(|_, to| to == 1); // rank 1 is dead
    let count = 30;
    for i in 0..count {
        net.engines[0]
            .bcast(net.now, message(3000, i as u8), HardwareAlgorithm::Simple)
            .unwrap();
    }
    // Its subtree's reports do not reach the root, which probes them and hears their answers
    // directly: they keep receiving while rank 1 is still a member.
    let t0 = net.now;
    net.run(|n| n.now >= t0 + Duration::from_millis(100));
    assert!(net.delivered[9].len() < count, "the root waits for rank 1");
    let probes: u64 = net.engines[0]
        .sender()
        .eqa()
        .dests()
        .iter()
        .map(|l| l.stats.probes)
        .sum();
    assert!(probes > 0, "the silent subtree is probed");
    let now = net.now;
    for e in &mut net.engines {
        e.evict(now, Rank::new(1));
    }
    net.run(|n| (0..20).all(|i| i <= 1 || n.delivered[i].len() == count) && n.engines[0].is_idle());
    assert_exact(&net, 0, count, 3000, &[1]);
    assert!(
        net.engines[3].stats().tree_ack_frames > 0,
        "rank 3 reports up the new tree"
    );
}

/// A push-pull message that fits one frame (the root side).
mod one_frame_push_pull {
    use crate::engine::{Dest, Engine, EngineConfig, EngineEvent, HardwareAlgorithm, Message};
    use crate::wire::{Flags, Frame, Kind, Repr};
    use crate::Rank;
    use std::time::Instant;

    /// What the root sends for one push-pull message of `len` bytes before any answer.
    fn first_frames(len: usize) -> (Vec<Repr>, Vec<Vec<u8>>) {
        let mut root = Engine::new(EngineConfig::new(7, Rank::new(0), 3)).unwrap();
        let now = Instant::now();
        root.bcast(now, vec![5; len], HardwareAlgorithm::PushPull)
            .unwrap();
        let (mut reprs, mut pdus) = (Vec::new(), Vec::new());
        let mut buf = vec![0u8; 1500];
        while let Some(t) = root.poll_transmit(now, &mut buf) {
            assert_eq!(t.dst, Dest::All);
            reprs.push(Repr::parse(&Frame::new_checked(&buf[..t.len]).unwrap()));
            pdus.push(buf[..t.len].to_vec());
        }
        (reprs, pdus)
    }

    #[test]
    fn a_message_that_fits_one_frame_is_pushed_whole_and_needs_no_pull() {
        let max = EngineConfig::new(7, Rank::new(0), 3).max_payload();
        for len in [1, 80, 81, 256, 860, 861, max] {
            let (reprs, pdus) = first_frames(len);
            assert_eq!(reprs.len(), 1, "{len} B: one frame");
            let f = reprs[0].flags;
            assert!(f.contains(Flags::PUSH | Flags::LAST), "{len} B: {f:?}");
            assert!(!f.contains(Flags::PULL_WAIT), "{len} B: waits for a pull");
            // A receiver delivers it from that frame alone and asks for nothing.
            let mut rx = Engine::new(EngineConfig::new(7, Rank::new(1), 3)).unwrap();
            let now = Instant::now();
            rx.handle_frame(now, &pdus[0]).unwrap();
            match rx.poll_event() {
                Some(EngineEvent::Delivered(Message { data, .. })) => {
                    assert_eq!(data, vec![5; len])
                }
                other => panic!("{len} B: {other:?}"),
            }
            let mut buf = vec![0u8; 1500];
            while let Some(t) = rx.poll_transmit(now, &mut buf) {
                let kind = Frame::new_checked(&buf[..t.len]).unwrap().kind();
                assert_ne!(kind, Kind::Pull, "{len} B: pulled");
            }
        }
    }

    #[test]
    fn a_longer_message_still_pushes_btp1_then_btp2_and_waits() {
        let max = EngineConfig::new(7, Rank::new(0), 3).max_payload();
        let (reprs, _) = first_frames(max + 1);
        assert_eq!(reprs.len(), 2);
        assert_eq!((reprs[0].offset, reprs[1].offset), (0, 80));
        assert!(reprs[1].flags.contains(Flags::PULL_WAIT));
    }
}

/// A receiver of a busy stream of one-frame messages: how many acknowledgements it sends
/// while `count` messages arrive `every` apart, and after the stream went quiet.
fn acks_of_a_stream(count: usize, every: Duration) -> (usize, usize, Engine, Engine) {
    let (mut root, mut rx) = root_and_receiver();
    let mut now = Instant::now();
    let mut buf = vec![0u8; 1500];
    let mut acks = 0;
    let mut pump = |root: &mut Engine, rx: &mut Engine, now: Instant| {
        let mut n = 0;
        while let Some(t) = root.poll_transmit(now, &mut buf) {
            let _ = rx.handle_frame(now, &buf[..t.len]);
        }
        while let Some(t) = rx.poll_transmit(now, &mut buf) {
            if Frame::new_checked(&buf[..t.len]).unwrap().kind() == Kind::Ack {
                n += 1;
            }
            let _ = root.handle_frame(now, &buf[..t.len]);
        }
        n
    };
    for i in 0..count {
        root.bcast(now, vec![i as u8; 8], HardwareAlgorithm::Simple)
            .unwrap();
        acks += pump(&mut root, &mut rx, now);
        now += every;
        for e in [&mut root, &mut rx] {
            if e.poll_timeout().is_some_and(|t| t <= now) {
                e.handle_timeout(now);
            }
        }
        acks += pump(&mut root, &mut rx, now);
    }
    let mut quiet = 0;
    for _ in 0..100 {
        now += Duration::from_micros(100);
        for e in [&mut root, &mut rx] {
            if e.poll_timeout().is_some_and(|t| t <= now) {
                e.handle_timeout(now);
            }
        }
        quiet += pump(&mut root, &mut rx, now);
    }
    assert!(root.is_idle(), "the root heard every acknowledgement");
    assert_eq!(
        root.stats().repair_frames,
        0,
        "no spurious repair: {:?}",
        root.stats()
    );
    while rx.poll_event().is_some() {}
    (acks, quiet, rx, root)
}

#[test]
fn a_busy_stream_of_small_messages_is_acknowledged_once_per_half_window_and_once_when_the_root_asks(
) {
    let cfg = EngineConfig::new(7, Rank::new(1), 2);
    assert_eq!(cfg.ack_every, cfg.window / 2);
    // Messages 100 µs apart: one acknowledgement per ack_every frames while they come; the
    // rest once the root's timer fires on the idle stream and it asks (one poll).
    let (acks, quiet, _, root) = acks_of_a_stream(20, Duration::from_micros(100));
    assert_eq!(acks, 20 / cfg.ack_every);
    assert_eq!(quiet, 1);
    assert_eq!(root.stats().ack_polls, 1);
    // Messages further apart, fewer than ack_every: nothing while they come, one answer to
    // the root's poll for all of them.
    let (acks, quiet, _, root) = acks_of_a_stream(5, Duration::from_micros(400));
    assert_eq!((acks, quiet), (0, 1));
    assert_eq!(root.stats().ack_polls, 1);
}

#[test]
fn a_receiver_arms_no_timer_of_its_own_and_answers_the_roots_poll_at_once() {
    // Why it matters: a receiver that sleeps with a sub-millisecond deadline re-armed per
    // message pays for a clock-event reprogramming each time (an exit to the hypervisor on a
    // virtual machine); the root's one timer per idle period does the asking instead.
    let msgs: Vec<Vec<u8>> = (0..6).map(|i| vec![i as u8; 8]).collect();
    let frames = frames_of(&msgs);
    let c = EngineConfig::new(7, Rank::new(1), 2);
    assert!(frames.len() < c.ack_every);
    let mut rx = Engine::new(c).unwrap();
    let mut now = Instant::now();
    let mut buf = vec![0u8; 1500];
    for f in &frames {
        rx.handle_frame(now, f).unwrap();
        assert!(
            rx.poll_transmit(now, &mut buf).is_none(),
            "nothing while frames come"
        );
        assert_eq!(rx.poll_timeout(), None, "no timer of the receiver's own");
        now += Duration::from_micros(100);
    }
    assert!(rx.owes_acks(), "it holds frames the root has not heard of");
    let poll = Control::AckPoll
        .emit(7, Rank::new(0), Rank::new(1), 1, &mut buf)
        .unwrap();
    let poll = buf[..poll].to_vec();
    rx.handle_frame(now, &poll).unwrap();
    let t = rx
        .poll_transmit(now, &mut buf)
        .expect("the answer, at once");
    let f = Frame::new_checked(&buf[..t.len]).unwrap();
    let want = frames.len() as u32;
    assert_eq!(
        Control::parse(&f).unwrap(),
        Control::Ack {
            next: want,
            seen: Some(want)
        }
    );
    assert!(rx.poll_transmit(now, &mut buf).is_none());
    assert!(!rx.owes_acks());
    while rx.poll_event().is_some() {}
}

#[test]
fn a_lost_last_frame_is_repaired_after_the_answer_to_the_roots_poll() {
    let (mut root, mut rx) = root_and_receiver();
    let t0 = Instant::now();
    let mut buf = vec![0u8; 1500];
    for i in 0..3u8 {
        root.bcast(t0, vec![i; 8], HardwareAlgorithm::Simple)
            .unwrap();
    }
    for i in 0..3 {
        let t = root.poll_transmit(t0, &mut buf).unwrap();
        if i < 2 {
            rx.handle_frame(t0, &buf[..t.len]).unwrap();
        }
    }
    assert_eq!(
        rx.poll_timeout(),
        None,
        "nothing tells the receiver the last frame exists"
    );
    let fired = root
        .poll_timeout()
        .expect("the root's retransmission timer");
    root.handle_timeout(fired);
    let t = root.poll_transmit(fired, &mut buf).expect("the poll");
    let f = Frame::new_checked(&buf[..t.len]).unwrap();
    assert_eq!(
        Control::parse(&f).unwrap(),
        Control::AckPoll,
        "a poll, not a retransmission"
    );
    assert_eq!(root.stats().repair_frames, 0);
    rx.handle_frame(fired, &buf[..t.len]).unwrap();
    let t = rx.poll_transmit(fired, &mut buf).expect("the answer");
    root.handle_frame(fired, &buf[..t.len]).unwrap();
    let t = root
        .poll_transmit(fired, &mut buf)
        .expect("the lost frame again");
    assert_eq!(
        Frame::new_checked(&buf[..t.len]).unwrap().kind(),
        Kind::Repair
    );
    rx.handle_frame(fired, &buf[..t.len]).unwrap();
    let got: Vec<u64> = std::iter::from_fn(|| rx.poll_event())
        .filter_map(|e| match e {
            EngineEvent::Delivered(Message { msg_id, .. }) => Some(msg_id),
            _ => None,
        })
        .collect();
    assert_eq!(got, vec![0, 1, 2]);
    assert_eq!(root.stats().repair_frames, 1, "only the lost frame");
}

/// A poll reaches its receiver behind every frame sent before it (one path, in order), so its
/// answer speaks for those frames only. A receiver busy with a batch answers after the root
/// has sent more: those frames are still on their way, and the root sends none of them again;
/// a frame sent before the poll and missing from the answer was lost, and goes again.
#[test]
fn a_polls_answer_repairs_what_was_sent_before_the_poll_never_what_followed_it() {
    let (mut root, mut rx) = root_and_receiver();
    let t0 = Instant::now();
    for i in 0..3u8 {
        root.bcast(t0, vec![i; 8], HardwareAlgorithm::Simple)
            .unwrap();
    }
    let mut sent = drain(&mut root, t0);
    assert_eq!(sent.len(), 3);
    // The receiver has the first frame; the second is lost; the third is on its way.
    rx.handle_frame(t0, &sent[0]).unwrap();
    let fired = root
        .poll_timeout()
        .expect("the root's retransmission timer");
    root.handle_timeout(fired);
    let poll = drain(&mut root, fired);
    assert_eq!(poll.len(), 1);
    assert_eq!(
        Control::parse(&Frame::new_checked(&poll[0][..]).unwrap()).unwrap(),
        Control::AckPoll
    );
    // Two more messages go out after the poll.
    for i in 3..5u8 {
        root.bcast(fired, vec![i; 8], HardwareAlgorithm::Simple)
            .unwrap();
    }
    sent.extend(drain(&mut root, fired));
    assert_eq!(sent.len(), 5);
    // The third frame, then the poll, reach the receiver; it answers.
    rx.handle_frame(fired, &sent[2]).unwrap();
    rx.handle_frame(fired, &poll[0]).unwrap();
    let mut answered = false;
    for f in drain(&mut rx, fired) {
        answered |= matches!(
            Control::parse(&Frame::new_checked(&f[..]).unwrap()),
            Ok(Control::Ack { seen: Some(_), .. })
        );
        root.handle_frame(fired, &f).unwrap();
    }
    assert!(answered, "the poll's answer says how far it has seen");
    let mut again = Vec::new();
    for f in drain(&mut root, fired) {
        let frame = Frame::new_checked(&f[..]).unwrap();
        if frame.kind() == Kind::Repair {
            again.push(Repr::parse(&frame).seq);
        }
        rx.handle_frame(fired, &f).unwrap();
    }
    assert_eq!(
        again,
        vec![1],
        "the lost frame, not the two sent after the poll"
    );
    for f in &sent[3..] {
        rx.handle_frame(fired, f).unwrap();
    }
    let got: Vec<u64> = std::iter::from_fn(|| rx.poll_event())
        .filter_map(|e| match e {
            EngineEvent::Delivered(Message { msg_id, .. }) => Some(msg_id),
            _ => None,
        })
        .collect();
    assert_eq!(got, vec![0, 1, 2, 3, 4]);
}
