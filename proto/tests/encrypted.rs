//! A keyed session's frames on the wire: their payloads are AES-256-GCM ciphertext (no byte of
//! what the members broadcast, notices included, shows), the members deliver what was sent,
//! a frame with one byte of its ciphertext or tag changed (its CRC made right again) is
//! refused, and a frame sent again alike is the same bytes. With encryption off the same
//! bytes show on the wire (the control), and a member takes both kinds of frame.

use std::time::{Duration, Instant};

use ethbcast_proto::{
    pdu_crc, Control, Dest, DropReason, Engine, EngineConfig, EngineEvent, Flags, Frame,
    HardwareAlgorithm, Rank, CRC_LEN, HEADER_LEN,
};

const KEY: [u8; 32] = [0x2a; 32];
const MARKER: &[u8; 32] = b"ethbcast test marker 0123456789!";

fn engine(rank: u16, encrypt: bool) -> Engine {
    let mut cfg = EngineConfig::new(0x5eed, Rank::new(rank), 2);
    cfg.key = Some(KEY.into());
    cfg.encrypt = encrypt;
    Engine::new(cfg).unwrap()
}

/// A message holding the marker many times, at odd offsets so that frames cut it anywhere.
fn message() -> Vec<u8> {
    let mut m = Vec::new();
    for i in 0..400u32 {
        m.extend_from_slice(MARKER);
        m.extend_from_slice(&i.to_be_bytes()[..(i % 3) as usize]);
    }
    m
}

/// Every frame `a` has to send now.
fn drain(a: &mut Engine, now: Instant) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1600];
    while let Some(t) = a.poll_transmit(now, &mut buf) {
        out.push(buf[..t.len].to_vec());
    }
    out
}

fn shows_marker(frames: &[Vec<u8>]) -> bool {
    frames
        .iter()
        .any(|f| f.windows(8).any(|w| MARKER.windows(8).any(|m| m == w)))
}

/// Rank 0 broadcasts the message and a notice holding the marker; rank 1 takes every frame.
/// The frames sent and what rank 1 delivered.
fn session(encrypt: bool) -> (Vec<Vec<u8>>, Vec<u8>, Vec<u8>) {
    let now = Instant::now();
    let (mut a, mut b) = (engine(0, encrypt), engine(1, true));
    a.bcast(now, message(), HardwareAlgorithm::Simple).unwrap();
    a.send_control(
        Dest::Rank(Rank::new(1)),
        Control::Notice {
            body: MARKER.to_vec(),
        },
    )
    .unwrap();
    let frames = drain(&mut a, now);
    for f in &frames {
        b.handle_frame(now, f).unwrap();
    }
    let (mut got, mut notice) = (Vec::new(), Vec::new());
    while let Some(ev) = b.poll_event() {
        match ev {
            EngineEvent::Delivered(m) => got = m.data,
            EngineEvent::Control {
                msg: Control::Notice { body },
                ..
            } => notice = body,
            _ => {}
        }
    }
    (frames, got, notice)
}

#[test]
fn an_encrypted_session_shows_no_byte_it_carries_and_delivers_them() {
    let (frames, got, notice) = session(true);
    assert!(frames.len() > 10);
    assert!(!shows_marker(&frames), "the marker crossed the wire");
    for f in &frames {
        let f = Frame::new_checked(&f[..]).unwrap();
        assert!(f.flags().contains(Flags::KEYED | Flags::ENCRYPTED));
    }
    assert!(got == message(), "delivered {} bytes", got.len());
    assert_eq!(notice, MARKER);
    // The control: authenticated only, the marker crosses in the clear, and a member with
    // encryption on takes it all the same.
    let (plain, got, notice) = session(false);
    assert!(shows_marker(&plain));
    assert!(plain.iter().all(|f| !Frame::new_checked(&f[..])
        .unwrap()
        .flags()
        .contains(Flags::ENCRYPTED)));
    assert!(got == message());
    assert_eq!(notice, MARKER);
}

/// One byte of a frame's ciphertext or tag changed, its CRC made right again (what a host on
/// the segment without the key can send): refused, and nothing is delivered.
#[test]
fn a_frame_with_one_byte_of_ciphertext_or_tag_changed_is_refused() {
    let now = Instant::now();
    let mut a = engine(0, true);
    a.bcast(now, MARKER.to_vec(), HardwareAlgorithm::Simple)
        .unwrap();
    let frames = drain(&mut a, now);
    let f = &frames[0];
    let total = Frame::new_checked(&f[..]).unwrap().total_len();
    let body = total - CRC_LEN;
    for i in HEADER_LEN..body {
        let mut g = f.clone();
        g[i] ^= 0x20;
        let crc = pdu_crc(&g, body);
        g[body..total].copy_from_slice(&crc.to_be_bytes());
        let mut b = engine(1, true);
        assert_eq!(b.handle_frame(now, &g), Err(DropReason::BadMac), "byte {i}");
        assert!(b.poll_event().is_none());
        assert_eq!(b.stats().drops.bad_mac, 1);
    }
    let mut b = engine(1, true);
    b.handle_frame(now, f).unwrap();
    assert!(matches!(b.poll_event(), Some(EngineEvent::Delivered(m)) if m.data == MARKER));
}

/// A frame lost on the way to the receiver is asked for and sent again as a repair: a frame
/// of its own (its kind differs, so its nonce does), and each time it is repaired to the
/// same member, the same bytes.
#[test]
fn a_frame_repaired_twice_alike_is_the_same_ciphertext() {
    let now = Instant::now();
    let (mut a, mut b) = (engine(0, true), engine(1, true));
    a.bcast(now, message(), HardwareAlgorithm::Simple).unwrap();
    let first = drain(&mut a, now);
    let lost = 3;
    for (i, f) in first.iter().enumerate() {
        if i != lost {
            let _ = b.handle_frame(now, f);
        }
    }
    let seq = Frame::new_checked(&first[lost][..]).unwrap().seq();
    let mut copies = Vec::new();
    let mut t = now;
    for _ in 0..200 {
        t += Duration::from_millis(5);
        b.handle_timeout(t);
        for f in drain(&mut b, t) {
            let _ = a.handle_frame(t, &f);
        }
        a.handle_timeout(t);
        for f in drain(&mut a, t) {
            let g = Frame::new_checked(&f[..]).unwrap();
            if g.kind().is_data() && g.seq() == seq {
                copies.push(f.clone());
                if copies.len() == 2 {
                    break;
                }
                // Lost again, so that it is asked for once more.
                continue;
            }
            let _ = b.handle_frame(t, &f);
        }
        if copies.len() == 2 {
            break;
        }
    }
    assert_eq!(copies.len(), 2, "repairs of the lost frame");
    assert_ne!(
        copies[0], first[lost],
        "a repair has a header, so a nonce, of its own"
    );
    assert_eq!(copies[0], copies[1], "two repairs alike differ");
    b.handle_frame(t, &copies[1]).unwrap();
}
