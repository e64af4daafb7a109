//! Frames encrypted and authenticated with AES-256-GCM under the session key: the payload is
//! ciphertext, the header travels in the clear as the AEAD's associated data, and the AEAD's
//! 16-byte tag sits where the keyed BLAKE3 tag of an unencrypted keyed frame does (a frame is
//! still checked once). A sealed frame carries [`Flags::KEYED`] and [`Flags::ENCRYPTED`]:
//!
//! ```text
//!  | header (36 bytes, clear, authenticated) | payload (ciphertext) | GCM tag (16) | CRC32C (4) |
//! ```
//!
//! **Keys.** Each engine (the group's, each point-to-point channel's) has a key of its own,
//! derived from the session key and its group id ([`FrameCipher::new`]): the channels number
//! their members 0 and 1 as the group does its first two, so under one key their frames would
//! meet the group's.
//!
//! **Nonces.** The 96-bit nonce is made of the header, not sent: kind, source rank, destination
//! rank, flags, and the frame's place in its sender's sequence (the stream's sequence number
//! for data and repairs, the sender's control counter, `msg_len`, for control frames):
//!
//! ```text
//!  | kind (1) | src (2) | dst (2) | flags (2) | seq or control counter (4) | 0 (1) |
//! ```
//!
//! **Invariant: a nonce never repeats under one key for two different frames.** Within one
//! engine's key, a sender's sequence number names one payload and one header for the whole
//! session (a stream's header is fixed when it is queued; the session ends before a sequence
//! number or a control counter would wrap, `SessionEnded`), and every other header field that
//! a sender changes when it sends that frame again (data or repair, the destination, the
//! broadcast, probe and point-to-point flags) is in the nonce. So two frames with one nonce
//! have one header and one payload: a repair sent twice alike, or the same frame relayed by
//! two fellow receivers, is the same ciphertext, byte for byte, which tells an onlooker
//! nothing the header does not (that this frame was sent again); and a frame sent again
//! differently (a broadcast frame repaired to one member) has a nonce of its own. Nothing
//! random goes in, so nothing has to be stored or sent for it.

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};

use super::{be16, field, pdu_crc, Flags, Frame, Kind, WireError, CRC_LEN, HEADER_LEN, OVERHEAD};
use crate::machine::{within, Held};
use crate::secret::Key;

/// The context of the key derivation (BLAKE3 `derive_key`) of an engine's frame key.
const CONTEXT: &str = "ethbcast wire 2 frame cipher";

/// AES-256-GCM under one engine's key (see the module documentation).
pub struct FrameCipher {
    aead: LessSafeKey,
}

impl std::fmt::Debug for FrameCipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FrameCipher(<redacted>)")
    }
}

impl FrameCipher {
    /// The cipher of the engine whose frames carry group id `group`, under session key `key`.
    pub fn new(key: &Key, group: u32) -> FrameCipher {
        let mut material = zeroize::Zeroizing::new([0u8; 36]);
        material[..32].copy_from_slice(key.as_bytes());
        material[32..].copy_from_slice(&group.to_be_bytes());
        let sub = Key::from(blake3::derive_key(CONTEXT, &material[..]));
        let key = UnboundKey::new(&AES_256_GCM, sub.as_bytes())
            .expect("AES-256-GCM takes a key of 32 bytes");
        FrameCipher {
            aead: LessSafeKey::new(key),
        }
    }

    /// Encrypts the frame of `len` bytes emitted in `buf` (header, payload, CRC) in place:
    /// sets [`Flags::KEYED`] and [`Flags::ENCRYPTED`], turns the payload into ciphertext,
    /// appends the tag and rewrites the CRC. Returns the new length.
    pub fn seal(&self, buf: &mut [u8], len: usize) -> Result<usize, WireError> {
        if len < OVERHEAD {
            return Err(WireError::Truncated {
                len,
                need: OVERHEAD,
            });
        }
        let need = len + super::TAG_LEN;
        if buf.len() < need {
            return Err(WireError::BufferTooSmall {
                have: buf.len(),
                need,
            });
        }
        let flags =
            Flags::from_bits_truncate(be16(&buf[field::FLAGS])) | Flags::KEYED | Flags::ENCRYPTED;
        buf[field::FLAGS].copy_from_slice(&flags.bits().to_be_bytes());
        let body = len - CRC_LEN;
        let nonce = nonce(&buf[..HEADER_LEN]);
        let (header, rest) = buf.split_at_mut(HEADER_LEN);
        let payload = &mut rest[..body - HEADER_LEN];
        let tag = self
            .aead
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&*header),
                payload,
            )
            .map_err(|_| WireError::PayloadTooLong(body - HEADER_LEN))?;
        buf[body..body + super::TAG_LEN].copy_from_slice(tag.as_ref());
        let crc = pdu_crc(buf, body + super::TAG_LEN);
        buf[body + super::TAG_LEN..need].copy_from_slice(&crc.to_be_bytes());
        Ok(need)
    }

    /// Checks a checked frame flagged [`Flags::KEYED`] and [`Flags::ENCRYPTED`] and decrypts it into `out`, which
    /// must hold [`Frame::total_len`] bytes: the frame as sent with its payload in the clear
    /// (tag and CRC as they were). `None` if the tag does not verify: the frame was not sealed
    /// under this key for this header, or was changed since.
    pub fn open<'b>(&self, frame: &Frame<&[u8]>, out: &'b mut [u8]) -> Option<Frame<&'b [u8]>> {
        // Without KEYED a frame has no room for a tag: refused as one whose tag fails.
        if !frame.flags().contains(Flags::KEYED | Flags::ENCRYPTED) {
            return None;
        }
        let total = frame.total_len();
        let bytes: &[u8] = frame.buffer;
        let bytes = bytes.get(..total)?;
        let out = out.get_mut(..total)?;
        let body = HEADER_LEN + frame.payload().len();
        let tag = bytes.get(body..body + super::TAG_LEN)?;
        // The header and what follows the payload (tag, CRC) as they were; the payload
        // decrypted straight from the frame into its place, each byte written once.
        out[..HEADER_LEN].copy_from_slice(&bytes[..HEADER_LEN]);
        out[body..].copy_from_slice(&bytes[body..]);
        let (header, rest) = out.split_at_mut(HEADER_LEN);
        self.aead
            .open_separate_gather(
                Nonce::assume_unique_for_key(nonce(header)),
                Aad::from(&*header),
                &bytes[HEADER_LEN..body],
                tag,
                &mut rest[..body - HEADER_LEN],
            )
            .ok()?;
        Some(Frame::new_unchecked(&*out))
    }
}

/// The nonce of the frame whose header is `header` (see the module documentation).
fn nonce(header: &[u8]) -> [u8; 12] {
    let kind = Kind::from_code(header[field::KIND]);
    let place = if kind.is_some_and(Kind::is_data) {
        field::SEQ
    } else {
        field::MSG_LEN
    };
    let mut n = [0u8; 12];
    n[0] = header[field::KIND];
    n[1..3].copy_from_slice(&header[field::SRC]);
    n[3..5].copy_from_slice(&header[field::DST]);
    n[5..7].copy_from_slice(&header[field::FLAGS]);
    n[7..11].copy_from_slice(&header[place]);
    n
}

/// Bytes of one block of [`Opened`].
const BLOCK: usize = 64 * 1024;

/// Frames decrypted in a batch, each at an address that stays put until [`Opened::clear`]:
/// what a receiver consumes of a frame in order, or leaves in the link, may be read there
/// until the batch ends (as in the frames a link holds; see [`crate::machine::BatchEnd`]).
/// Blocks are kept for the next batch.
#[derive(Debug, Default)]
pub(crate) struct Opened {
    blocks: Vec<Vec<u8>>,
    /// Blocks in use, and bytes used of the last of them.
    used: (usize, usize),
}

impl Opened {
    /// Room for a frame of `len` bytes: with `hold`, room that stays where it is until
    /// [`Opened::clear`]; without, the room of the last frame, grown to `len` if need be (a
    /// frame nobody reads after its turn takes no more than its own size, forged or not).
    pub(crate) fn room(&mut self, len: usize, hold: bool) -> &mut [u8] {
        if !hold {
            self.used = (1, len);
            match self.blocks.first_mut() {
                Some(b) if b.len() >= len => {}
                Some(b) => b.resize(len, 0),
                None => self.blocks.push(vec![0; len]),
            }
            return &mut self.blocks[0][..len];
        }
        let size = len.max(BLOCK);
        let (mut blocks, mut at) = self.used;
        if blocks == 0 || at + len > self.blocks[blocks - 1].len() {
            blocks += 1;
            at = 0;
            if self.blocks.len() < blocks {
                self.blocks.push(vec![0; size]);
            } else if self.blocks[blocks - 1].len() < len {
                self.blocks[blocks - 1] = vec![0; size];
            }
        }
        self.used = (blocks, at + len);
        &mut self.blocks[blocks - 1][at..at + len]
    }

    /// Forgets every frame: their room is reused.
    pub(crate) fn clear(&mut self) {
        self.used = (0, 0);
    }

    /// Bytes held for frames (for the memory accounting).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.blocks.iter().map(Vec::capacity).sum()
    }
}

impl Held for Opened {
    fn find(&self, at: usize, len: usize) -> Option<&[u8]> {
        self.blocks[..self.used.0]
            .iter()
            .find_map(|b| within(b, at, len))
    }
}

#[cfg(test)]
mod tests {
    use super::{FrameCipher, Opened, BLOCK};
    use crate::machine::Held;
    use crate::secret::Key;
    use crate::wire::{pdu_crc, Flags, Frame, Kind, Repr, ALL, CRC_LEN, HEADER_LEN, TAG_LEN};
    use crate::Rank;

    fn data(seq: u32, dst: Rank, kind: Kind, payload: &[u8]) -> Vec<u8> {
        let mut r = Repr::new(kind);
        r.group = 9;
        r.src = Rank::new(2);
        r.dst = dst;
        r.seq = seq;
        r.msg_len = 4096;
        r.flags = Flags::BROADCAST;
        let mut v = vec![0u8; 1600];
        let n = r.emit(payload, &mut v).unwrap();
        v.truncate(n + TAG_LEN);
        v
    }

    fn sealed(c: &FrameCipher, mut v: Vec<u8>) -> Vec<u8> {
        let n = v.len() - TAG_LEN;
        let n = c.seal(&mut v, n).unwrap();
        v.truncate(n);
        v
    }

    /// The wire format is standard AES-256-GCM (NIST SP 800-38D) as the module documentation
    /// lays it out: under the key `derive_key(CONTEXT, session key || group id)`, with the
    /// nonce made of the header and the header as associated data, an independent
    /// implementation computes the same ciphertext and tag, and opens the frame.
    #[test]
    fn a_sealed_frame_is_aes_256_gcm_as_another_implementation_computes_it() {
        use aes_gcm::aead::AeadInPlace;
        use aes_gcm::{Aes256Gcm, KeyInit};
        let key = Key::from([0x3c; 32]);
        let c = FrameCipher::new(&key, 9);
        let mut material = [0u8; 36];
        material[..32].copy_from_slice(key.as_bytes());
        material[32..].copy_from_slice(&9u32.to_be_bytes());
        let other = Aes256Gcm::new(&blake3::derive_key(super::CONTEXT, &material).into());
        for payload in [&b""[..], b"eight by", &[0xa5; 1444][..]] {
            let plain = data(77, Rank::BROADCAST, Kind::Data, payload);
            let wire = sealed(&c, plain.clone());
            let body = wire.len() - TAG_LEN - CRC_LEN;
            let header = &wire[..HEADER_LEN];
            let mut theirs = payload.to_vec();
            let tag = other
                .encrypt_in_place_detached(&super::nonce(header).into(), header, &mut theirs)
                .unwrap();
            assert_eq!(
                &wire[HEADER_LEN..body],
                &theirs[..],
                "{} bytes",
                payload.len()
            );
            assert_eq!(
                &wire[body..body + TAG_LEN],
                &tag[..],
                "{} bytes",
                payload.len()
            );
            // And a frame they seal, this cipher opens to the payload.
            let f = Frame::new_checked(&wire[..]).unwrap();
            let mut out = vec![0u8; wire.len()];
            let opened = c.open(&f, &mut out).expect("opens");
            assert_eq!(opened.payload(), payload);
        }
    }

    /// A sealed frame hides its payload, passes the wire checks, and opens under its key to
    /// the payload; under another key, another group's key, or with any byte of header,
    /// ciphertext or tag changed (CRC fixed), it does not open.
    #[test]
    fn a_sealed_frame_opens_under_its_key_only_and_any_change_is_refused() {
        let key = Key::from([3; 32]);
        let c = FrameCipher::new(&key, 9);
        let secret = b"a payload nobody else may read, 48 bytes long!!";
        let f = sealed(&c, data(5, ALL, Kind::Data, secret));
        assert!(!f.windows(8).any(|w| secret.windows(8).any(|s| s == w)));
        let frame = Frame::new_checked(&f[..]).unwrap();
        assert!(frame.flags().contains(Flags::KEYED | Flags::ENCRYPTED));
        let mut out = vec![0u8; 1600];
        let open = c.open(&frame, &mut out).expect("opens");
        assert_eq!(open.payload(), secret);
        for other in [
            FrameCipher::new(&Key::from([4; 32]), 9),
            FrameCipher::new(&key, 10),
        ] {
            assert!(other.open(&frame, &mut out).is_none());
        }
        for i in 0..f.len() - CRC_LEN {
            let mut g = f.clone();
            g[i] ^= 0x01;
            let body = g.len() - CRC_LEN;
            let crc = pdu_crc(&g, body);
            g[body..].copy_from_slice(&crc.to_be_bytes());
            let Ok(frame) = Frame::new_checked(&g[..]) else {
                continue;
            };
            assert!(c.open(&frame, &mut out).is_none(), "byte {i} changed");
        }
    }

    /// The same frame sealed twice is the same bytes (a repair sent again alike); frames that
    /// differ in any field of the nonce have different ciphertexts of one payload.
    #[test]
    fn one_frame_seals_alike_and_frames_sent_differently_do_not_share_a_keystream() {
        let c = FrameCipher::new(&Key::from([3; 32]), 9);
        let p = [0u8; 64];
        let a = sealed(&c, data(5, ALL, Kind::Data, &p));
        assert_eq!(a, sealed(&c, data(5, ALL, Kind::Data, &p)));
        let payload = |f: &[u8]| f[HEADER_LEN..HEADER_LEN + 64].to_vec();
        let others = [
            data(6, ALL, Kind::Data, &p),
            data(5, Rank::new(1), Kind::Data, &p),
            data(5, ALL, Kind::Repair, &p),
        ];
        for o in others {
            assert_ne!(payload(&a), payload(&sealed(&c, o)));
        }
    }

    #[test]
    fn opened_frames_stay_put_until_cleared() {
        let mut o = Opened::default();
        let a = o.room(1000, true);
        a.fill(1);
        let at = a.as_ptr() as usize;
        for _ in 0..200 {
            o.room(1500, true).fill(2);
        }
        assert_eq!(o.find(at, 1000), Some(&[1u8; 1000][..]));
        o.clear();
        assert_eq!(o.find(at, 1000), None);
        let b = o.room(1000, true).as_ptr() as usize;
        assert_eq!(b, at, "blocks are reused");
        assert_eq!(o.room(BLOCK * 2, true).len(), BLOCK * 2);
        // Without holding: one frame's room, reused.
        let mut o = Opened::default();
        let a = o.room(1500, false).as_ptr() as usize;
        assert_eq!(o.room(1200, false).as_ptr() as usize, a);
        assert_eq!(o.heap_bytes(), 1500);
    }
}
