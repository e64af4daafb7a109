use crate::wire::{Frame, Kind, Repr, WireError};
use crate::{Rank, Seq};

use super::{
    behind, control_counter, locate, nack_offsets, nack_words, Admit, BarrierAlgo, BarrierMsg,
    BarrierOp, Control, NackBitmap, Position, ReplayWindow, LAST_SEQ, NACK_MORE_WORDS, NACK_REACH,
};

fn round_trip(c: Control) {
    let v = c.to_vec(0xEB, Rank::new(3), Rank::new(5), 77);
    let f = Frame::new_checked(&v[..]).expect("a checked frame");
    assert_eq!(
        (f.group(), f.src(), f.dst(), control_counter(&f)),
        (0xEB, Rank::new(3), Rank::new(5), 77)
    );
    assert_eq!(Control::parse(&f), Ok(c));
}

#[test]
fn only_a_counter_above_the_top_is_newest() {
    let mut w = ReplayWindow::default();
    assert_eq!(w.admit(5), Admit::Newest);
    assert_eq!(w.admit(7), Admit::Newest);
    assert_eq!(w.admit(6), Admit::Late);
    assert_eq!(w.admit(6), Admit::Refused);
    assert_eq!(w.admit(7), Admit::Refused);
    assert_eq!(w.admit(8), Admit::Newest);
}

#[test]
fn a_replay_window_accepts_each_counter_once_and_nothing_too_old() {
    let mut w = ReplayWindow::default();
    assert!(!w.accept(0), "0 is never sent");
    assert!(w.accept(10));
    assert!(!w.accept(10), "a replay");
    assert!(w.accept(12));
    assert!(w.accept(11), "late but new");
    assert!(!w.accept(11));
    assert!(w.accept(100));
    assert!(!w.accept(36), "more than 64 behind");
    assert!(w.accept(37));
    assert!(!w.accept(12), "seen long ago and now too old");
    // Up to the last counter, and nothing from early in the session after it.
    let mut w = ReplayWindow::default();
    assert!(w.accept(3));
    assert!(w.accept(u32::MAX - 1));
    assert!(!w.accept(3), "a recording from long ago");
    assert!(!w.accept(4), "never seen, and long ago");
    assert!(w.accept(u32::MAX));
    assert!(!w.accept(u32::MAX));
}

#[test]
fn a_counter_recorded_half_a_counter_range_ago_is_refused_and_moves_nothing() {
    let mut w = ReplayWindow::default();
    assert_eq!(w.admit(5), Admit::Newest);
    // The sender's counter moves on, past half the range.
    let top = (1 << 31) + 6;
    for c in [1 << 30, 1 << 31, top] {
        assert_eq!(w.admit(c), Admit::Newest);
    }
    assert_eq!(w.admit(5), Admit::Refused, "replayed across half the range");
    assert_eq!(w.admit(6), Admit::Refused, "recorded long ago");
    assert_eq!(w.admit(top + 1), Admit::Newest, "the sender's next frame");
}

#[test]
fn no_position_lies_past_the_last_sequence_number() {
    // A receiver at the end of a stream that used every number: a recording of the
    // stream's first frames would be the next ones if positions wrapped.
    let end = LAST_SEQ + 1;
    assert_eq!(locate(end, 0, 2048), Position::Beyond);
    assert_eq!(locate(end, 5, 2048), Position::Beyond);
    assert_eq!(locate(end - 10, 3, 2048), Position::Beyond);
    assert_eq!(locate(end - 10, u32::MAX, 2048), Position::Window(LAST_SEQ));
    assert_eq!(locate(end - 10, u32::MAX - 10, 2048), Position::Behind);
}

#[test]
fn every_control_message_round_trips_through_its_frame() {
    round_trip(Control::AckPoll);
    round_trip(Control::Ack {
        next: 7,
        seen: None,
    });
    round_trip(Control::Ack {
        next: 7,
        seen: Some(9),
    });
    round_trip(Control::TreeAck {
        root: Rank::new(1023),
        next: u32::MAX,
        laggard: Rank::new(77),
        view: 0x811c_9dc5,
    });
    round_trip(Control::Nack {
        base: u32::MAX,
        missing: 0b101,
        next: 4,
        more: vec![],
    });
    for unheld in [false, true] {
        round_trip(Control::PeerNack {
            root: Rank::new(2),
            base: 10,
            missing: 0xffff,
            unheld,
            more: vec![],
        });
    }
    round_trip(Control::PeerPending {
        root: Rank::new(3),
        base: 7,
        missing: 0b1001,
        more: vec![0, 2],
    });
    round_trip(Control::Pull { msg_id: 1, next: 2 });
    round_trip(Control::PullPoll {
        msg_id: 1,
        designated: Rank::new(4),
    });
    round_trip(Control::Heartbeat {
        table: vec![0, 1, 65535],
    });
    round_trip(Control::Ping { rank: Rank::new(1) });
    round_trip(Control::Pong { rank: Rank::new(1) });
    for (algo, op) in [
        (BarrierAlgo::Broadcast, BarrierOp::Arrive),
        (BarrierAlgo::Broadcast, BarrierOp::Release),
        (BarrierAlgo::Dissemination, BarrierOp::Round),
        (BarrierAlgo::Dissemination, BarrierOp::Query),
    ] {
        round_trip(Control::Barrier(BarrierMsg {
            algo,
            op,
            epoch: 9,
            round: 2,
            view: 0xdead,
            set: vec![1, 2],
        }));
    }
    round_trip(Control::Join { body: vec![1; 30] });
    round_trip(Control::Evict { rank: Rank::new(6) });
    round_trip(Control::Notice {
        body: b"x".to_vec(),
    });
}

#[test]
fn a_nack_bitmap_runs_on_in_the_payload_up_to_1024_frames() {
    let more: Vec<u16> = (1..=NACK_MORE_WORDS as u16).collect();
    round_trip(Control::Nack {
        base: 5,
        missing: 0,
        next: 5,
        more: more.clone(),
    });
    round_trip(Control::PeerNack {
        root: Rank::new(0),
        base: 5,
        missing: 1,
        unheld: true,
        more,
    });
    // Word `w` of the bitmap names frames from 16·w; empty words are skipped.
    let words: Vec<(u32, u16)> = nack_words(0b1, &[0, 0b100, 0]).collect();
    assert_eq!(words, vec![(0, 0b1), (32, 0b100)]);
    let frames: Vec<u32> = nack_offsets(0b1, &[0, 0b100, 0x8000]).collect();
    assert_eq!(frames, vec![0, 34, 63]);
    // What a builder takes is what the reader gives back; trailing empty words are not sent.
    let mut b = NackBitmap::default();
    for off in [3, 34, NACK_REACH - 1] {
        b.set(off);
    }
    let (first, more) = b.take().expect("frames named");
    assert_eq!(more.len(), NACK_MORE_WORDS);
    let back: Vec<u32> = nack_offsets(first, &more).collect();
    assert_eq!(back, vec![3, 34, NACK_REACH - 1]);
    assert_eq!(b.take(), None);
    b.set(40);
    assert_eq!(b.take(), Some((0, vec![0, 0x100])));
    // An odd byte, or a word too many, is no NACK.
    for len in [3, 2 * NACK_MORE_WORDS + 2] {
        let v = Repr::new(Kind::Nack).to_vec(&vec![0xff; len]).unwrap();
        assert_eq!(
            Control::parse(&Frame::new_checked(&v[..]).unwrap()),
            Err(WireError::BadPayload {
                kind: Kind::Nack,
                len
            })
        );
    }
}

#[test]
fn fields_a_message_cannot_have_are_errors() {
    let mut r = Control::Ping { rank: Rank::new(1) }.header();
    r.aux = 70_000;
    let v = r.to_vec(&[]).unwrap();
    assert!(matches!(
        Control::parse(&Frame::new_checked(&v[..]).unwrap()),
        Err(WireError::BadField { .. })
    ));
    let r = Control::Heartbeat { table: vec![1, 2] }.header();
    let v = r.to_vec(&[0; 3]).unwrap();
    assert!(matches!(
        Control::parse(&Frame::new_checked(&v[..]).unwrap()),
        Err(WireError::BadPayload { len: 3, .. })
    ));
    let mut r = Control::Barrier(BarrierMsg {
        algo: BarrierAlgo::Broadcast,
        op: BarrierOp::Release,
        epoch: 0,
        round: 0,
        view: 0,
        set: vec![],
    })
    .header();
    r.msg_id = 99;
    let v = r.to_vec(&[]).unwrap();
    assert!(Control::parse(&Frame::new_checked(&v[..]).unwrap()).is_err());
    let v = Repr::new(Kind::Data).to_vec(&[]).unwrap();
    assert_eq!(
        Control::parse(&Frame::new_checked(&v[..]).unwrap()),
        Err(WireError::NotControl)
    );
    let v = Repr::new(Kind::Ack).to_vec(b"junk").unwrap();
    assert!(Control::parse(&Frame::new_checked(&v[..]).unwrap()).is_err());
}

#[test]
fn sequence_numbers_are_placed_relative_to_the_window_without_overflow() {
    assert_eq!(locate(Seq::new(10), 10, 16), Position::Window(Seq::new(10)));
    assert_eq!(locate(Seq::new(10), 25, 16), Position::Window(Seq::new(25)));
    assert_eq!(locate(Seq::new(10), 26, 16), Position::Beyond);
    assert_eq!(locate(Seq::new(10), 9, 16), Position::Behind);
    // Not across the 32-bit end: no stream goes past it.
    let e = (1u64 << 32) - 2;
    assert_eq!(locate(Seq::new(e), 1, 16), Position::Beyond);
    assert_eq!(
        locate(Seq::new(e), u32::MAX, 16),
        Position::Window(LAST_SEQ)
    );
    assert_eq!(locate(Seq::new(e), u32::MAX - 5, 16), Position::Behind);
    // Near the end of the 64-bit space nothing overflows.
    assert_eq!(
        locate(Seq::new(u64::MAX - 1), u32::MAX, 16),
        Position::Beyond
    );
    assert_eq!(locate(Seq::new(u64::MAX), 0, 16), Position::Beyond);
    assert_eq!(behind(Seq::new(100), 90), Some(Seq::new(90)));
    assert_eq!(behind(Seq::new(100), 100), Some(Seq::new(100)));
    assert_eq!(behind(Seq::new(5), 6), None, "before the stream's start");
    assert_eq!(
        behind(Seq::new((1 << 32) + 3), u32::MAX),
        Some(Seq::new((1 << 32) - 1))
    );
}
