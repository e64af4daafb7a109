use crate::Rank;

use super::{
    crc32c, field, other_version, seal, Flags, Frame, Kind, Repr, WireError, ALL, CRC_LEN,
    HEADER_LEN, OVERHEAD,
};

fn sample() -> (Repr, Vec<u8>) {
    let repr = Repr {
        kind: Some(Kind::Data),
        flags: Flags::LAST | Flags::BROADCAST,
        group: 0xdead_beef,
        src: Rank::new(3),
        dst: ALL,
        seq: 77,
        msg_id: 5,
        msg_len: 10,
        offset: 6,
        bitmap: 0,
        aux: 9,
    };
    (repr, b"abcd".to_vec())
}

#[test]
fn emit_then_parse_round_trips() {
    let (repr, payload) = sample();
    let bytes = repr.to_vec(&payload).unwrap();
    assert_eq!(bytes.len(), OVERHEAD + 4);
    let frame = Frame::new_checked(&bytes[..]).unwrap();
    assert_eq!(Repr::parse(&frame), repr);
    assert_eq!(frame.payload(), b"abcd");
}

#[test]
fn literal_bytes_parse_as_documented() {
    // An ACK from rank 1 to root 2 acknowledging everything before sequence 0x0102_0304.
    let mut bytes = vec![
        2, 3, 0, 0, // version, kind = Ack, flags
        0, 0, 0, 7, // group 7
        0, 1, 0, 2, // src 1, dst 2
        1, 2, 3, 4, // seq
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // msg id, msg len, offset
        0, 0, 0, 0, // payload len 0, bitmap 0
        0, 0, 0, 0, // aux
    ];
    let crc = crc32c::crc32c(&bytes);
    bytes.extend_from_slice(&crc.to_be_bytes());
    let f = Frame::new_checked(&bytes[..]).unwrap();
    assert_eq!(f.kind(), Kind::Ack);
    assert_eq!(
        (f.group(), f.src(), f.dst(), f.seq()),
        (7, Rank::new(1), Rank::new(2), 0x0102_0304)
    );
}

#[test]
fn ethernet_padding_after_the_crc_is_ignored() {
    let (repr, payload) = sample();
    let mut bytes = repr.to_vec(&payload).unwrap();
    bytes.resize(60, 0);
    assert!(Frame::new_checked(&bytes[..]).is_ok());
}

#[test]
fn every_truncation_is_an_error() {
    let (repr, payload) = sample();
    let bytes = repr.to_vec(&payload).unwrap();
    for n in 0..bytes.len() {
        assert!(
            matches!(
                Frame::new_checked(&bytes[..n]),
                Err(WireError::Truncated { .. }) | Err(WireError::BadCrc)
            ),
            "prefix of {n} bytes accepted"
        );
    }
}

#[test]
fn every_single_bit_flip_is_detected() {
    let (repr, payload) = sample();
    let bytes = repr.to_vec(&payload).unwrap();
    for bit in 0..bytes.len() * 8 {
        let mut b = bytes.clone();
        b[bit / 8] ^= 1 << (bit % 8);
        assert!(
            Frame::new_checked(&b[..]).is_err(),
            "flip of bit {bit} accepted"
        );
    }
}

#[test]
fn unknown_version_and_kind_are_rejected() {
    let (repr, payload) = sample();
    // The version before this one (keyed frames authenticated, not encrypted), and the next.
    for v in [1, 3] {
        let mut b = repr.to_vec(&payload).unwrap();
        b[0] = v;
        let e = Frame::new_checked(&b[..]).unwrap_err();
        assert_eq!(e, WireError::BadVersion(v));
        assert!(
            e.to_string()
                .starts_with(&format!("wire version {v}, this build speaks version 2")),
            "{e}"
        );
    }
    let mut b = repr.to_vec(&payload).unwrap();
    b[1] = 200;
    let body = b.len() - CRC_LEN;
    let crc = crc32c::crc32c(&b[..body]);
    b[body..].copy_from_slice(&crc.to_be_bytes());
    assert_eq!(
        Frame::new_checked(&b[..]).unwrap_err(),
        WireError::UnknownKind(200)
    );
}

/// A frame of another release (its version byte differs, its CRC holds) is told apart from
/// a corrupted one, whose version byte changed in transit.
#[test]
fn a_frame_of_another_version_is_told_from_a_corrupted_one() {
    let (repr, payload) = sample();
    let ours = repr.to_vec(&payload).unwrap();
    assert_eq!(other_version(&ours), None);
    let mut old = ours.clone();
    old[0] = 1;
    let body = old.len() - CRC_LEN;
    let crc = crc32c::crc32c(&old[..body]);
    old[body..].copy_from_slice(&crc.to_be_bytes());
    assert_eq!(other_version(&old), Some(1));
    let mut corrupted = ours;
    corrupted[0] = 1;
    assert_eq!(other_version(&corrupted), None);
    assert_eq!(other_version(&old[..10]), None);
}

#[test]
fn payload_beyond_message_length_is_rejected() {
    let (mut repr, payload) = sample();
    repr.offset = 8; // 8 + 4 > 10
    let b = repr.to_vec(&payload).unwrap();
    assert!(matches!(
        Frame::new_checked(&b[..]),
        Err(WireError::BadGeometry { .. })
    ));
}

#[test]
fn emit_refuses_small_buffers() {
    let (repr, payload) = sample();
    let mut buf = [0u8; 10];
    assert!(matches!(
        repr.emit(&payload, &mut buf),
        Err(WireError::BufferTooSmall { .. })
    ));
}

proptest::proptest! {
    /// The frame CRC is CRC32C (Castagnoli), whatever the length and alignment: the fast
    /// implementation agrees with an independent one.
    #[test]
    fn the_frame_crc_is_crc32c(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..3000), skip in 0usize..16) {
        let b = &bytes[skip.min(bytes.len())..];
        proptest::prop_assert_eq!(crc32c(b), crc32c::crc32c(b));
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
        if let Ok(f) = Frame::new_checked(&bytes[..]) {
            // Every accessor of an accepted frame is safe to call.
            let _ = (Repr::parse(&f), f.payload().len(), f.total_len());
        }
    }
}

#[test]
fn sealed_frames_verify_only_with_their_key_and_survive_parsing() {
    let (repr, payload) = sample();
    let mut buf = vec![0u8; 200];
    let n = repr.emit(&payload, &mut buf).unwrap();
    let n = seal(&[1; 32], &mut buf, n).unwrap();
    let f = Frame::new_checked(&buf[..n]).unwrap();
    assert!(f.flags().contains(Flags::KEYED));
    assert_eq!(f.payload(), b"abcd");
    assert_eq!(f.total_len(), n);
    assert!(f.verify(&[1; 32]));
    assert!(!f.verify(&[2; 32]));
    // Flipping a payload bit and fixing the CRC is still caught by the tag.
    let mut b = buf[..n].to_vec();
    b[HEADER_LEN] ^= 1;
    let body = n - CRC_LEN;
    let crc = crc32c::crc32c(&b[..body]);
    b[body..].copy_from_slice(&crc.to_be_bytes());
    assert!(!Frame::new_checked(&b[..]).unwrap().verify(&[1; 32]));
}

#[test]
fn kind_codes_are_one_to_twelve_and_nothing_else() {
    for code in 0..=u8::MAX {
        match Kind::from_code(code) {
            Some(kind) => {
                assert!((1..=12).contains(&code), "{kind:?} has code {code}");
                assert_eq!(kind.code(), code);
            }
            None => assert!(!(1..=12).contains(&code), "code {code} names no kind"),
        }
    }
    assert_eq!((Kind::Data.code(), Kind::Notice.code()), (1, 12));
}

#[test]
fn a_header_crc_covers_the_header_and_its_own_flag_but_not_the_payload() {
    let (mut repr, payload) = sample();
    repr.flags |= Flags::HEADER_CRC;
    let good = repr.to_vec(&payload).unwrap();
    let crc_at = good.len() - CRC_LEN;
    assert_eq!(
        good[crc_at..],
        crc32c::crc32c(&good[..HEADER_LEN]).to_be_bytes(),
        "the trailer is the CRC32C of the 36 header bytes"
    );
    // The payload is left to the key's tag or the application's digest.
    let mut b = good.clone();
    b[HEADER_LEN] ^= 1;
    let f = Frame::new_checked(&b[..]).expect("the payload is not this CRC's to check");
    assert_eq!(f.payload(), b"`bcd");
    // Every header bit is still covered, the flag's own included, either way it flips.
    for bit in 0..HEADER_LEN * 8 {
        let mut b = good.clone();
        b[bit / 8] ^= 1 << (bit % 8);
        assert!(
            Frame::new_checked(&b[..]).is_err(),
            "header bit {bit} flipped unnoticed"
        );
    }
    let mut plain = repr;
    plain.flags.remove(Flags::HEADER_CRC);
    let mut b = plain.to_vec(&payload).unwrap();
    b[HEADER_LEN] ^= 1;
    b[field::FLAGS.start] |= (Flags::HEADER_CRC.bits() >> 8) as u8;
    assert_eq!(
        Frame::new_checked(&b[..]).unwrap_err(),
        WireError::BadCrc,
        "a frame that gains the flag in transit does not shed its payload check"
    );
}

#[test]
fn a_control_frame_is_checked_whole_whatever_its_flags_say() {
    let mut ack = Repr::new(Kind::Notice);
    ack.flags = Flags::HEADER_CRC;
    let mut b = ack.to_vec(b"datagram").unwrap();
    Frame::new_checked(&b[..]).expect("emitted with its payload covered");
    b[HEADER_LEN] ^= 1;
    assert_eq!(Frame::new_checked(&b[..]).unwrap_err(), WireError::BadCrc);
}

#[test]
fn a_sealed_header_crc_frame_keeps_its_crc_over_the_header() {
    let (mut repr, payload) = sample();
    repr.flags |= Flags::HEADER_CRC;
    let key = [7u8; 32];
    let mut b = vec![0u8; 200];
    let n = repr.emit(&payload, &mut b).unwrap();
    let n = seal(&key, &mut b, n).unwrap();
    let f = Frame::new_checked(&b[..n]).unwrap();
    assert!(f.verify(&key));
    b[HEADER_LEN] ^= 1;
    let f = Frame::new_checked(&b[..n]).expect("the CRC leaves the payload to the tag");
    assert!(!f.verify(&key), "and the tag refuses the corrupted payload");
}
