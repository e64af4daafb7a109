//! A keyed session ends before a counter of its frames wraps: a recording from early in the
//! session is refused however late it is replayed, and no genuine frame is refused.
//!
//! The control counter of a member's frames is driven to just below its last value with
//! `test_hooks::skip_control_counter_to` (2^32 frames are hours on a wire), the sequence numbers
//! of its broadcasts with `test_hooks::skip_sequences`.

use std::time::Instant;

use ethbcast_proto::{
    Control, Dest, DropReason, Engine, EngineConfig, EngineEvent, HardwareAlgorithm, Rank,
    SendError, SessionEnded,
};

const KEY: [u8; 32] = [0x11; 32];

fn engine(rank: u16) -> Engine {
    let mut cfg = EngineConfig::new(0x600d, Rank::new(rank), 2);
    cfg.key = Some(KEY.into());
    Engine::new(cfg).unwrap()
}

/// Queues a notice from `a` to rank 1 and returns its frame.
fn notice(a: &mut Engine, now: Instant, n: u32) -> Option<Vec<u8>> {
    a.send_control(
        Dest::Rank(Rank::new(1)),
        Control::Notice {
            body: n.to_be_bytes().to_vec(),
        },
    )
    .unwrap();
    let mut buf = vec![0u8; 1600];
    let t = a.poll_transmit(now, &mut buf)?;
    buf.truncate(t.len);
    Some(buf)
}

/// Hands `frame` to `b`; the notice it took, if any.
fn take(b: &mut Engine, now: Instant, frame: &[u8]) -> Result<(Vec<u8>, bool), DropReason> {
    b.handle_frame(now, frame)?;
    loop {
        match b.poll_event().expect("a notice") {
            EngineEvent::Control {
                msg: Control::Notice { body },
                fresh,
                ..
            } => return Ok((body, fresh)),
            _ => continue,
        }
    }
}

#[test]
fn a_control_frame_recorded_early_is_refused_after_half_and_after_all_of_the_counter_range() {
    let now = Instant::now();
    let (mut a, mut b) = (engine(0), engine(1));
    let mut n = 0u32;
    let mut genuine = |a: &mut Engine, b: &mut Engine| {
        n += 1;
        let f = notice(a, now, n).expect("a frame");
        assert_eq!(take(b, now, &f), Ok((n.to_be_bytes().to_vec(), true)));
        f
    };
    let recorded: Vec<Vec<u8>> = (0..5).map(|_| genuine(&mut a, &mut b)).collect();

    // Half the counter range later, where counters compared modulo 2^32 turn around.
    ethbcast_proto::test_hooks::skip_control_counter_to(&mut a, (1 << 31) + 3);
    for _ in 0..3 {
        genuine(&mut a, &mut b);
    }
    for f in &recorded {
        assert_eq!(take(&mut b, now, f), Err(DropReason::Replayed));
    }
    // The window did not move back: the sender's next frames are taken.
    for _ in 0..3 {
        genuine(&mut a, &mut b);
    }

    // Up to the last counter: every genuine frame is taken, then the session ends.
    ethbcast_proto::test_hooks::skip_control_counter_to(&mut a, u32::MAX - 3);
    for _ in 0..3 {
        genuine(&mut a, &mut b);
    }
    assert_eq!(a.session_ended(), None);
    assert_eq!(
        notice(&mut a, now, 0),
        None,
        "a frame past the last counter"
    );
    assert_eq!(a.session_ended(), Some(SessionEnded::ControlCounter));
    assert_eq!(
        a.bcast(now, vec![1], HardwareAlgorithm::Simple),
        Err(SendError::SessionEnded(SessionEnded::ControlCounter))
    );
    assert!(a
        .session_ended()
        .unwrap()
        .to_string()
        .contains("open the group again"));
    for f in &recorded {
        assert_eq!(take(&mut b, now, f), Err(DropReason::Replayed));
    }
}

#[test]
fn broadcasts_end_with_the_session_before_their_sequence_numbers_wrap() {
    let now = Instant::now();
    let mut a = engine(0);
    // Three sequence numbers left: one-frame messages take two, a message of three frames'
    // payload does not fit, and the session ends.
    ethbcast_proto::test_hooks::skip_sequences(&mut a, (1 << 32) - 3);
    a.bcast(now, vec![7; 10], HardwareAlgorithm::Simple)
        .unwrap();
    a.bcast(now, vec![7; 10], HardwareAlgorithm::Simple)
        .unwrap();
    assert_eq!(a.session_ended(), None);
    let three = vec![7; 3 * a.config().max_payload()];
    assert_eq!(
        a.bcast(now, three, HardwareAlgorithm::Simple),
        Err(SendError::SessionEnded(SessionEnded::Sequence))
    );
    assert_eq!(
        a.bcast(now, vec![7; 10], HardwareAlgorithm::Simple),
        Err(SendError::SessionEnded(SessionEnded::Sequence))
    );
    assert_eq!(a.session_ended(), Some(SessionEnded::Sequence));
}
