//! A receiver that leaves frames in a link that retains them (`Engine::leave_in_link`) does
//! not begin a message behind a gap: the frames after a loss stay where the link holds them
//! and are consumed from there once the gap fills, so a group of thousands holds each such
//! frame once, in the link its ports share, not once per member in a message begun ahead.
//!
//! One test in this binary: the counting allocator sees every thread's allocations.

use std::time::Instant;

use ethbcast_proto::{
    BatchEnd, Engine, EngineConfig, EngineEvent, Frames, HardwareAlgorithm, Rank,
};
use ethbcast_sys::alloc::CountingAlloc;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

#[test]
fn frames_behind_a_gap_stay_in_the_link_until_it_fills() {
    let now = Instant::now();
    let cfg = |rank: u16| {
        let mut c = EngineConfig::new(1, Rank::new(rank), 2);
        c.window = 64;
        c.key = None;
        c
    };
    let mut root = Engine::new(cfg(0)).unwrap();
    let mut rx = Engine::new(cfg(1)).unwrap();
    rx.leave_in_link(now, Rank::new(0));
    let msg: Vec<u8> = (0..40_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    root.bcast(now, msg.clone(), HardwareAlgorithm::Simple)
        .unwrap();
    let mut frames = Vec::new();
    let mut buf = vec![0u8; 1600];
    while let Some(t) = root.poll_transmit(now, &mut buf) {
        frames.push(buf[..t.len].to_vec());
    }
    assert!(frames.len() > 20, "{} frames", frames.len());
    let all: Vec<&[u8]> = frames.iter().map(|f| &f[..]).collect();

    // Every frame but the first, in one batch: nothing is delivered, and the receiver's
    // heap grows by far less than the message (its bytes stay in the link).
    let before = ALLOC.live_bytes();
    for f in &frames[1..] {
        rx.handle_frame(now, f).unwrap();
    }
    rx.frames_done(
        now,
        BatchEnd {
            held: &Frames(&all),
            leaving: &Frames(&[]),
        },
    );
    let grown = ALLOC.live_bytes().saturating_sub(before);
    assert!(
        grown < msg.len() / 4,
        "{grown} bytes allocated for frames behind the gap, message of {}",
        msg.len()
    );
    assert!(
        rx.poll_event().is_none(),
        "delivered with its first frame missing"
    );

    // The first frame comes: the message is consumed from the link, whole and intact.
    rx.handle_frame(now, &frames[0]).unwrap();
    rx.frames_done(
        now,
        BatchEnd {
            held: &Frames(&all),
            leaving: &Frames(&all),
        },
    );
    let mut got = None;
    while let Some(ev) = rx.poll_event() {
        if let EngineEvent::Delivered(m) = ev {
            assert!(got.is_none(), "delivered twice");
            got = Some(m.data);
        }
    }
    assert_eq!(got.as_deref(), Some(&msg[..]), "the message, intact");
}
