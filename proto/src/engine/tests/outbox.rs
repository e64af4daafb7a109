//! Bounds: a receive queue of tiny messages, repairs served from the link, and the outbox.

use std::time::{Duration, Instant};

use crate::engine::{Engine, EngineConfig, HardwareAlgorithm, Piece, SendError};
use crate::machine::{BatchEnd, Frames};
use crate::wire::Control;
use crate::{ConfigError, Rank};

use super::{ask_as_fellow, drain, fellow_asks, message, repair_payloads, Net};

/// A receiver that posts no receive keeps complete messages for the receive to come, within
/// its pushed buffer's bytes and the receive queue's count: a root that sends empty or tiny
/// messages cannot make it hold more. Then the root waits (the paper's stopped broadcast),
/// and once receives are posted every message arrives, in order.
#[test]
fn an_unposted_receiver_holds_at_most_a_receive_queue_of_tiny_messages() {
    const QUEUE: usize = 16;
    const SENT: usize = 200;
    let mut net = Net::new(3, |c| {
        c.auto_post = false;
        c.pushed_buffer = 4096;
        c.recv_queue = QUEUE;
    });
    for r in 1..3 {
        for _ in 0..QUEUE {
            net.engines[r].post_recv(net.now, Rank::new(0), 64).unwrap();
        }
    }
    let msgs: Vec<Vec<u8>> = (0..SENT).map(|i| message(i % 2, i as u8)).collect();
    let mut queued = 0;
    let until = net.now + Duration::from_millis(200);
    while queued < SENT && net.now < until {
        while queued < SENT {
            match net.engines[0].bcast(net.now, msgs[queued].clone(), HardwareAlgorithm::Simple) {
                Ok(_) => queued += 1,
                Err(SendError::QueueFull(_)) => break,
                Err(e) => panic!("{e}"),
            }
        }
        let step = net.now + Duration::from_millis(5);
        net.run(|n| n.now >= step);
    }
    // Each has its first receives' messages, and holds at most a receive queue's more.
    let held = |net: &Net| {
        net.engines[2]
            .receiver(Rank::new(0))
            .unwrap()
            .held_messages()
    };
    assert_eq!(net.delivered[2].len(), QUEUE);
    assert!(held(&net) <= QUEUE, "holds {} messages", held(&net));
    for _ in 0..(SENT / QUEUE + 1) {
        for r in 1..3 {
            for _ in net.engines[r].receiver(Rank::new(0)).unwrap().posted()..QUEUE {
                net.engines[r].post_recv(net.now, Rank::new(0), 64).unwrap();
            }
        }
        while queued < SENT {
            match net.engines[0].bcast(net.now, msgs[queued].clone(), HardwareAlgorithm::Simple) {
                Ok(_) => queued += 1,
                Err(_) => break,
            }
        }
        let step = net.now + Duration::from_millis(20);
        net.run(|n| n.now >= step);
        assert!(held(&net) <= QUEUE, "holds {} messages", held(&net));
    }
    net.run(|n| n.delivered[1].len() == SENT && n.delivered[2].len() == SENT);
    for r in 1..3 {
        let got: Vec<&Vec<u8>> = net.delivered[r].iter().map(|d| &d.2).collect();
        assert_eq!(got, msgs.iter().collect::<Vec<_>>(), "rank {r}");
    }
}

/// Receiver 1 of root 0 (3 members, peer repair, an outbox of `outbox` frames), a bulk
/// receiver: an observer takes the stream's bytes and frames stay in the link. Rank 2 asked it
/// for a frame once (copies are on); then frames 1..=15 of a message came in a batch that has
/// not ended. Returns the receiver, the link's frames of the batch, and the instant.
fn in_link_fellow(outbox: usize) -> (Engine, Vec<Vec<u8>>, Instant) {
    let cfg = |rank| {
        let mut c = EngineConfig::new(7, Rank::new(rank), 3);
        c.peer_repair = true;
        c.outbox = outbox;
        c
    };
    let mut root = Engine::new(cfg(0)).unwrap();
    let mut rx = Engine::new(cfg(1)).unwrap();
    let now = Instant::now();
    let mut buf = vec![0u8; 1500];
    rx.observe(now, Rank::new(0), Box::new(|_: &Piece<'_>| {}));
    rx.leave_in_link(now, Rank::new(0));
    // The link's frames, kept where they were handed in until the batch ends.
    let mut link: Vec<Vec<u8>> = Vec::new();
    let mut send = |root: &mut Engine, rx: &mut Engine, link: &mut Vec<Vec<u8>>, m: Vec<u8>| {
        root.bcast(now, m, HardwareAlgorithm::Simple).unwrap();
        while let Some(t) = root.poll_transmit(now, &mut buf) {
            link.push(buf[..t.len].to_vec());
            assert_eq!(rx.handle_frame(now, link.last().unwrap()), Ok(()));
        }
    };
    // Frame 0, then a first request: copies (here, in the link) are on from now.
    send(&mut root, &mut rx, &mut link, vec![1; 8]);
    batch_end(&mut rx, now, &link);
    link.clear();
    let _ = ask_as_fellow(&mut rx, now, 0, 1);
    // The next message's frames: 15 of its 16 (the root's window holds frame 0 too).
    let per = root.config().max_payload();
    send(&mut root, &mut rx, &mut link, message(16 * per, 3));
    assert_eq!(link.len(), 15);
    (rx, link, now)
}

/// The batch of `link`'s frames ends at `rx`: all of them go back to the link.
fn batch_end(rx: &mut Engine, now: Instant, link: &[Vec<u8>]) {
    let frames: Vec<&[u8]> = link.iter().map(|f| &f[..]).collect();
    let all = Frames(&frames);
    rx.frames_done(
        now,
        BatchEnd {
            held: &all,
            leaving: &all,
        },
    );
}

/// Rank 2 asks `rx` for the 16 frames from 1 (`ctr`: its control counter).
fn ask_for_16(rx: &mut Engine, now: Instant, ctr: u32) {
    let nack = Control::PeerNack {
        root: Rank::new(0),
        base: 1,
        missing: 0xffff,
        unheld: false,
        more: vec![],
    };
    fellow_asks(rx, now, &nack, ctr);
}

/// What a batch's end does for a stream (frames consumed from the link, fellows served from
/// it) leaves the engine at once: a fellow's repairs served from the link are sent when the
/// batch ends, not when the stream next receives a frame or its timer fires (which at the end
/// of a stream may be the root's poll, a retransmission timeout later).
#[test]
fn repairs_served_from_the_link_leave_when_the_batch_ends() {
    let (mut rx, link, now) = in_link_fellow(4096);
    ask_for_16(&mut rx, now, 2);
    batch_end(&mut rx, now, &link);
    let out = drain(&mut rx, now);
    assert_eq!(repair_payloads(&out).len(), 15, "frames 1..=15 served");
}

/// Performs the misbehaviour: a fellow that asks, again and again within one batch of the
/// link, for frames a receiver left in the link (`Engine::leave_in_link`). Repairs it serves
/// from the link wait for the batch's end; they count against the outbox as the ones served
/// at once do, so that a batch of requests makes it hold at most `EngineConfig::outbox` of them,
/// not one per frame asked for in every request.
#[test]
fn repairs_served_from_the_link_are_bounded_by_the_outbox_whatever_a_fellow_asks() {
    const OUTBOX: usize = 32;
    const ASKS: u32 = 50;
    let (mut rx, link, now) = in_link_fellow(OUTBOX);
    for ctr in 2..2 + ASKS {
        ask_for_16(&mut rx, now, ctr);
    }
    batch_end(&mut rx, now, &link);
    let out = drain(&mut rx, now);
    let repairs = repair_payloads(&out).len();
    assert!(repairs > 0, "nothing served");
    assert!(
        repairs <= OUTBOX,
        "{repairs} repairs for {} frames asked ({ASKS} requests of 16): the outbox holds {OUTBOX}",
        16 * ASKS
    );
}

/// Performs the misbehaviour: a root that polls a receiver for its acknowledgement over and
/// over (each poll with a fresh control counter) while the receiver's link takes nothing (a
/// driver flushes only what the link takes; the rest waits in the engine). Each poll is
/// answered, but what waits to be sent is at most `EngineConfig::outbox` control frames: beyond it
/// a control frame is dropped and counted, as a link would lose it (acknowledgements,
/// requests and reports are all repeated by their timers). Once the link takes frames again
/// the next poll is answered.
#[test]
fn a_receiver_polled_faster_than_its_link_sends_holds_at_most_an_outbox_of_answers() {
    const OUTBOX: usize = 64;
    const POLLS: u32 = 1000;
    let mut rx = Engine::new({
        let mut c = EngineConfig::new(7, Rank::new(1), 2);
        c.outbox = OUTBOX;
        c
    })
    .unwrap();
    let now = Instant::now();
    let mut buf = vec![0u8; 1500];
    let mut poll = |rx: &mut Engine, ctr: u32| {
        let n = Control::AckPoll
            .emit(7, Rank::new(0), Rank::new(1), ctr, &mut buf)
            .unwrap();
        assert_eq!(rx.handle_frame(now, &buf[..n]), Ok(()));
    };
    let bytes = rx.outbox_bytes();
    for ctr in 1..=POLLS {
        poll(&mut rx, ctr);
    }
    let out = drain(&mut rx, now);
    assert!(
        out.len() <= OUTBOX,
        "{} answers waited for {POLLS} polls: the outbox holds {OUTBOX}",
        out.len()
    );
    assert_eq!(rx.outbox_bytes(), bytes, "the outbox grew");
    assert_eq!(
        rx.stats().outbox_full,
        u64::from(POLLS) - out.len() as u64,
        "every answer dropped is counted"
    );
    poll(&mut rx, POLLS + 1);
    assert_eq!(drain(&mut rx, now).len(), 1, "answered again");
}

/// An outbox of no frames would drop every control frame (no acknowledgement would ever
/// leave, see `EngineStats::outbox_full`): such an engine is refused.
#[test]
fn an_engine_without_room_in_its_outbox_is_refused() {
    let mut c = EngineConfig::new(7, Rank::new(0), 2);
    c.outbox = 0;
    assert_eq!(Engine::new(c).err(), Some(ConfigError::Zero));
}
