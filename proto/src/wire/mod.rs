//! Wire format: what an ethbcast frame looks like on the Ethernet segment.
//!
//! Every ethbcast PDU travels in an Ethernet II frame with EtherType [`ETHERTYPE`] (0x88B5, the
//! IEEE "local experimental" type), either to the broadcast address (the switch copies it to
//! every port: this is the whole point) or to one member's MAC (point-to-point repair and
//! control). The Ethernet header itself belongs to the link layer; this module describes the
//! PDU that follows it:
//!
//! ```text
//!  0        1        2                 4                                 8
//!  +--------+--------+-----------------+---------------------------------+
//!  |version |  kind  |      flags      |             group id            |
//!  +--------+--------+-----------------+---------------------------------+
//!  |    source rank  |   dest rank     |      sequence (per-root stream) |
//!  +-----------------+-----------------+---------------------------------+
//!  |            message id             |          message length         |
//!  +-----------------------------------+---------------------------------+
//!  |            offset                 |  payload len    |  nack bitmap  |
//!  +-----------------------------------+---------------------------------+
//!  |            aux                    |  payload ...                    |
//!  +-----------------------------------+---------------------------------+
//!  |  ... payload  |  CRC32C over header and payload (4 bytes)           |
//! ```
//!
//! All integers are big-endian. The CRC32C covers the whole PDU before it, end to end, as the
//! LA-MPI paper does for every broadcast: the Ethernet FCS protects one hop, ours protects from
//! the root's buffer to the receiver's buffer. A data frame flagged [`Flags::HEADER_CRC`] has
//! its CRC over the header only: its payload is covered by a check the receiver makes anyway
//! (the group key's tag, or the application's digest of the whole stream), and reading every
//! payload byte once more was a fifth of a bulk receiver's CPU.
//!
//! With a session key the engine seals every frame it sends: encrypted and authenticated with
//! AES-256-GCM ([`crypt`]; the header in the clear, as associated data), or, with encryption
//! off, authenticated by a keyed BLAKE3 tag ([`seal`]). Either tag is [`TAG_LEN`] bytes
//! between payload and CRC.
//!
//! The module follows the view + repr split: [`Frame`] is a zero-copy view over bytes whose
//! accessors cannot panic once [`Frame::new_checked`] accepted them, and [`Repr`] is the parsed
//! form that the protocol engine builds and [`Repr::emit`]s. Untrusted bytes only ever enter
//! through `new_checked`, so a truncated, corrupted or foreign frame is an error value.

use bitflags::bitflags;
use thiserror::Error;

use crate::Rank;

pub(crate) mod control;
pub(crate) mod crypt;
pub(crate) mod ethernet;
pub(crate) mod join;

pub(crate) use control::{locate, Admit, Position, ReplayWindow};
pub use control::{BarrierAlgo, BarrierMsg, BarrierOp, Control};
pub use crypt::FrameCipher;
pub(crate) use crypt::Opened;

/// Current version of the wire format: 2 encrypts the payloads of keyed sessions
/// (`wire::crypt`); 1 authenticated them only. A frame of another version is refused
/// ([`WireError::BadVersion`]), and a join names the host that sent it.
pub const VERSION: u8 = 2;
/// Length of the fixed header in bytes.
pub const HEADER_LEN: usize = 36;
/// Length of the CRC32C trailer in bytes.
pub const CRC_LEN: usize = 4;
/// Bytes of a PDU that are not payload.
pub const OVERHEAD: usize = HEADER_LEN + CRC_LEN;
/// Destination rank that means "every member" (a broadcast frame).
pub(crate) const ALL: Rank = Rank::BROADCAST;
pub use control::{NACK_BITS, NACK_MORE_WORDS};
/// Length of the tag a frame carries (between payload and CRC) when the group has a key: the
/// AES-256-GCM tag of an encrypted frame, or 128 bits of BLAKE3 in keyed mode over header and
/// payload.
pub const TAG_LEN: usize = 16;

mod field {
    use core::ops::Range;
    pub(super) const VERSION: usize = 0;
    pub(super) const KIND: usize = 1;
    pub(super) const FLAGS: Range<usize> = 2..4;
    pub(super) const GROUP: Range<usize> = 4..8;
    pub(super) const SRC: Range<usize> = 8..10;
    pub(super) const DST: Range<usize> = 10..12;
    pub(super) const SEQ: Range<usize> = 12..16;
    pub(super) const MSG_ID: Range<usize> = 16..20;
    pub(super) const MSG_LEN: Range<usize> = 20..24;
    pub(super) const OFFSET: Range<usize> = 24..28;
    pub(super) const PAYLOAD_LEN: Range<usize> = 28..30;
    pub(super) const BITMAP: Range<usize> = 30..32;
    pub(super) const AUX: Range<usize> = 32..36;
}

/// The CRC32C (Castagnoli) of `bytes`, as every frame carries it.
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc_fast::crc32_iscsi(bytes)
}

/// How many leading bytes of a PDU of kind `kind` (`None`: a code no kind has) whose CRC
/// trailer starts at `body` its CRC covers: the header alone for a data frame with
/// [`Flags::HEADER_CRC`], else everything before the trailer (a control frame's payload is
/// always covered). A flag flipped in transit changes the span, so the CRC fails as for any
/// other corrupted bit.
fn crc_span(kind: Option<Kind>, flags: Flags, body: usize) -> usize {
    if flags.contains(Flags::HEADER_CRC) && kind.is_some_and(Kind::is_data) {
        HEADER_LEN.min(body)
    } else {
        body
    }
}

/// The CRC trailer of the PDU in `pdu` whose first `body` bytes (header, payload, tag) come
/// before it: over the span its own kind and flags give (see `crc_span`). `pdu` holds a whole
/// header and `body` bytes at least. For whoever writes a frame: [`Repr::emit`], [`seal`], a
/// tool that rewrites one.
pub fn pdu_crc(pdu: &[u8], body: usize) -> u32 {
    let kind = Kind::from_code(pdu[field::KIND]);
    let flags = Flags::from_bits_truncate(be16(&pdu[field::FLAGS]));
    crc32c(&pdu[..crc_span(kind, flags, body)])
}

/// The version of `pdu` if it is a frame of another version of this format (a peer running
/// another release of ethbcast): its version byte differs and its CRC holds as this version
/// computes it, so that a frame corrupted in transit is not taken for one. `None` otherwise.
pub(crate) fn other_version(pdu: &[u8]) -> Option<u8> {
    if pdu.len() < OVERHEAD || pdu[field::VERSION] == VERSION {
        return None;
    }
    let flags = Flags::from_bits_truncate(be16(&pdu[field::FLAGS]));
    let tag = if flags.contains(Flags::KEYED) {
        TAG_LEN
    } else {
        0
    };
    let need = OVERHEAD + usize::from(be16(&pdu[field::PAYLOAD_LEN])) + tag;
    let body = need.checked_sub(CRC_LEN).filter(|_| pdu.len() >= need)?;
    let kind = Kind::from_code(pdu[field::KIND]);
    (crc32c(&pdu[..crc_span(kind, flags, body)]) == be32(&pdu[body..need]))
        .then_some(pdu[field::VERSION])
}

/// What a frame is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A fragment of a broadcast message, sent by its root (usually broadcast).
    Data,
    /// A retransmitted fragment (point-to-point to one member, or re-broadcast).
    Repair,
    /// Cumulative acknowledgement ([`Control::Ack`]).
    Ack,
    /// Negative acknowledgement ([`Control::Nack`], [`Control::PeerNack`],
    /// [`Control::PeerPending`]).
    Nack,
    /// Push-pull pull request or its poll ([`Control::Pull`], [`Control::PullPoll`]).
    Pull,
    /// Liveness beacon (failure detection).
    Heartbeat,
    /// Membership announcement (discovery).
    Join,
    /// Barrier arrival or release.
    Barrier,
    /// A member has been evicted from the group.
    Evict,
    /// Liveness probe that asks for a [`Kind::Pong`].
    Ping,
    /// Answer to a [`Kind::Ping`].
    Pong,
    /// An unreliable application datagram ([`Control::Notice`]).
    Notice,
}

crate::coded!(Kind: u8 {
    Data = 1, Repair = 2, Ack = 3, Nack = 4, Pull = 5, Heartbeat = 6,
    Join = 7, Barrier = 8, Evict = 9, Ping = 10, Pong = 11, Notice = 12,
});

impl Kind {
    /// True for the kinds that carry message data.
    pub fn is_data(self) -> bool {
        matches!(self, Kind::Data | Kind::Repair)
    }
}

bitflags! {
    /// Per-frame flags.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct Flags: u16 {
        /// Last fragment of its message.
        const LAST = 1 << 0;
        /// Fragment of the push phase of a push-pull broadcast.
        const PUSH = 1 << 1;
        /// The root asks for an immediate ACK/NACK (a retransmission-timer probe).
        const ACK_REQ = 1 << 2;
        /// The message is a push-pull broadcast whose rest waits for a pull request.
        const PULL_WAIT = 1 << 3;
        /// Set by the sender on frames sent to the broadcast address.
        const BROADCAST = 1 << 4;
        /// The frame carries a keyed MAC after the payload (group key).
        const KEYED = 1 << 5;
        /// Fragment of a message sent by point-to-point fail-over or the tree algorithm.
        const P2P = 1 << 6;
        /// A NACK addressed to a fellow receiver instead of the root (peer repair); its
        /// `msg_id` names the root whose stream it is about.
        const PEER = 1 << 7;
        /// With `PEER`: the answer of a peer that does not hold the frames of the bitmap (any
        /// more), so that the asker turns to the root at once instead of after its retry
        /// interval.
        const UNHELD = 1 << 8;
        /// An acknowledgement up the acknowledgement tree: it speaks for the sender's whole
        /// subtree, and its `msg_id` names the root whose stream it is about.
        const TREE = 1 << 9;
        /// From a root: acknowledge at once ([`Control::AckPoll`]).
        const POLL = 1 << 10;
        /// On data: the CRC covers the header only. The payload is covered by something the
        /// receiver checks anyway, the group key's tag or the application's digest of the
        /// whole stream (`EngineConfig::end_to_end`), so a receiver makes one pass less over it.
        const HEADER_CRC = 1 << 11;
        /// With `KEYED`: the payload is AES-256-GCM ciphertext and the tag GCM's ([`crypt`]).
        const ENCRYPTED = 1 << 12;
        /// With `PEER`: the answer of a parent in the acknowledgement tree that lacks the
        /// frames of the bitmap too and relays each to the asker when it comes
        /// ([`Control::PeerPending`]).
        const PENDING = 1 << 13;
    }
}

/// Why bytes were not accepted as a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum WireError {
    /// Fewer bytes than a header and CRC, or than the header's payload length says.
    #[error("truncated frame: {len} bytes, need {need}")]
    Truncated {
        /// Bytes received.
        len: usize,
        /// Bytes the header requires.
        need: usize,
    },
    /// A version this build does not speak (a newer or older peer on the segment).
    #[error("wire version {0}, this build speaks version {VERSION}: run one release of ethbcast on every host")]
    BadVersion(u8),
    /// The kind byte is not one we know.
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    /// The CRC32C does not match: the frame was corrupted somewhere between the two buffers.
    #[error("CRC mismatch: frame corrupted in transit")]
    BadCrc,
    /// Offset and length in the header contradict each other.
    #[error("inconsistent header: offset {offset} + payload {payload} > message length {msg_len}")]
    BadGeometry {
        /// Offset of the payload within its message.
        offset: u32,
        /// Payload length.
        payload: u16,
        /// Message length.
        msg_len: u32,
    },
    /// The output buffer is too small for the frame being emitted.
    #[error("buffer of {have} bytes too small for a {need}-byte frame")]
    BufferTooSmall {
        /// Bytes available.
        have: usize,
        /// Bytes needed.
        need: usize,
    },
    /// The payload does not fit a frame (more than 65535 bytes).
    #[error("payload of {0} bytes does not fit one frame")]
    PayloadTooLong(usize),
    // A control frame's body (`Control::parse`).
    /// A data frame handed to the control parser.
    #[error("data frame, not a control frame")]
    NotControl,
    /// A field holds a value the message cannot have.
    #[error("bad {field} in a {kind:?} frame")]
    BadField {
        /// The kind.
        kind: Kind,
        /// The field.
        field: &'static str,
    },
    /// The payload has the wrong length.
    #[error("payload of {len} bytes in a {kind:?} frame")]
    BadPayload {
        /// The kind.
        kind: Kind,
        /// Its length.
        len: usize,
    },
    // The Ethernet header (`ethernet::Frame`).
    /// Shorter than an Ethernet header.
    #[error("runt Ethernet frame of {0} bytes")]
    Runt(usize),
    /// Another protocol's frame (the links filter by EtherType, so this is a stray).
    #[error("EtherType {0:#06x} is not ethbcast's")]
    OtherEtherType(u16),
}

/// A read-only view over the bytes of one PDU.
#[derive(Debug, Clone, Copy)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

/// The getters of [`Frame`] for the plain integer fields of the header: name, type, and the
/// big-endian read of the field's bytes.
macro_rules! header_getters {
    ($($(#[$doc:meta])* $name:ident: $t:ty = $read:ident($place:ident);)+) => {$(
        $(#[$doc])*
        pub fn $name(&self) -> $t {
            $read(&self.buffer.as_ref()[field::$place])
        }
    )+};
}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}
fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wraps bytes without checking them. Accessors may panic on short buffers; use
    /// [`Frame::new_checked`] for anything that came from the network.
    pub fn new_unchecked(buffer: T) -> Frame<T> {
        Frame { buffer }
    }

    /// Wraps bytes from the network after checking length, version, kind, geometry and CRC.
    /// After this no accessor can panic.
    pub fn new_checked(buffer: T) -> Result<Frame<T>, WireError> {
        let frame = Frame { buffer };
        frame.check()?;
        Ok(frame)
    }

    fn check(&self) -> Result<(), WireError> {
        let b = self.buffer.as_ref();
        if b.len() < OVERHEAD {
            return Err(WireError::Truncated {
                len: b.len(),
                need: OVERHEAD,
            });
        }
        if b[field::VERSION] != VERSION {
            return Err(WireError::BadVersion(b[field::VERSION]));
        }
        let flags = Flags::from_bits_truncate(be16(&b[field::FLAGS]));
        let tag = if flags.contains(Flags::KEYED) {
            TAG_LEN
        } else {
            0
        };
        let need = OVERHEAD + usize::from(be16(&b[field::PAYLOAD_LEN])) + tag;
        if b.len() < need {
            return Err(WireError::Truncated { len: b.len(), need });
        }
        // Ethernet pads short frames to 60 bytes: trailing bytes past the CRC are ignored.
        let body = need - CRC_LEN;
        let crc = be32(&b[body..need]);
        let kind = Kind::from_code(b[field::KIND]);
        if crc32c(&b[..crc_span(kind, flags, body)]) != crc {
            return Err(WireError::BadCrc);
        }
        let Some(kind) = kind else {
            return Err(WireError::UnknownKind(b[field::KIND]));
        };
        let offset = be32(&b[field::OFFSET]);
        let payload = be16(&b[field::PAYLOAD_LEN]);
        let msg_len = be32(&b[field::MSG_LEN]);
        if kind.is_data() && u64::from(offset) + u64::from(payload) > u64::from(msg_len) {
            return Err(WireError::BadGeometry {
                offset,
                payload,
                msg_len,
            });
        }
        Ok(())
    }

    /// Frame kind. Only meaningful on a checked frame.
    pub fn kind(&self) -> Kind {
        Kind::from_code(self.buffer.as_ref()[field::KIND]).unwrap_or(Kind::Heartbeat)
    }
    /// Flags; unknown bits are dropped.
    pub fn flags(&self) -> Flags {
        Flags::from_bits_truncate(be16(&self.buffer.as_ref()[field::FLAGS]))
    }
    /// Rank of the sender of this frame.
    pub fn src(&self) -> Rank {
        Rank::new(be16(&self.buffer.as_ref()[field::SRC]))
    }
    /// Rank of the destination, or [`Rank::BROADCAST`].
    pub fn dst(&self) -> Rank {
        Rank::new(be16(&self.buffer.as_ref()[field::DST]))
    }
    header_getters! {
        /// Group id.
        group: u32 = be32(GROUP);
        /// Sequence number (wire width; the engine extends it to 64 bits).
        seq: u32 = be32(SEQ);
        /// Message id within the root's stream.
        msg_id: u32 = be32(MSG_ID);
        /// Length of the whole message.
        msg_len: u32 = be32(MSG_LEN);
        /// Offset of this payload within its message.
        offset: u32 = be32(OFFSET);
        /// NACK bitmap.
        bitmap: u16 = be16(BITMAP);
        /// Kind-specific extra field.
        aux: u32 = be32(AUX);
    }
    /// The payload bytes.
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let len = usize::from(be16(&b[field::PAYLOAD_LEN]));
        &b[HEADER_LEN..HEADER_LEN + len]
    }
    /// The keyed MAC, if the frame carries one.
    pub fn tag(&self) -> Option<&[u8]> {
        let b = self.buffer.as_ref();
        let end = HEADER_LEN + usize::from(be16(&b[field::PAYLOAD_LEN]));
        self.flags()
            .contains(Flags::KEYED)
            .then(|| &b[end..end + TAG_LEN])
    }

    /// Total PDU length including the tag and the CRC.
    pub fn total_len(&self) -> usize {
        let tag = if self.flags().contains(Flags::KEYED) {
            TAG_LEN
        } else {
            0
        };
        OVERHEAD + usize::from(be16(&self.buffer.as_ref()[field::PAYLOAD_LEN])) + tag
    }

    /// True if the frame carries a keyed BLAKE3 tag that `key` produced for these header and
    /// payload bytes (an encrypted frame's tag is checked by [`FrameCipher::open`]).
    pub fn verify(&self, key: &[u8; 32]) -> bool {
        if self.flags().contains(Flags::ENCRYPTED) {
            return false;
        }
        let Some(tag) = self.tag() else { return false };
        let b = self.buffer.as_ref();
        let body = HEADER_LEN + usize::from(be16(&b[field::PAYLOAD_LEN]));
        let want = blake3::keyed_hash(key, &b[..body]);
        // Constant-time comparison of the truncated tag.
        want.as_bytes()[..TAG_LEN]
            .iter()
            .zip(tag)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

/// The parsed header of a frame (everything but the payload bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Repr {
    /// Frame kind. `None` is never emitted; it only makes `Default` possible.
    pub kind: Option<Kind>,
    /// Flags.
    pub flags: Flags,
    /// Group id: frames of other groups on the same segment are dropped.
    pub group: u32,
    /// Sender rank.
    pub src: Rank,
    /// Destination rank or [`Rank::BROADCAST`].
    pub dst: Rank,
    /// Sequence number in the root's stream (data), or the acknowledged / missing base.
    pub seq: u32,
    /// Message id.
    pub msg_id: u32,
    /// Message length.
    pub msg_len: u32,
    /// Offset of the payload in the message.
    pub offset: u32,
    /// NACK bitmap.
    pub bitmap: u16,
    /// Kind-specific extra field.
    pub aux: u32,
}

impl Repr {
    /// A header of the given kind with every other field zero.
    pub fn new(kind: Kind) -> Repr {
        Repr {
            kind: Some(kind),
            ..Repr::default()
        }
    }

    /// Parses a checked frame.
    pub fn parse<T: AsRef<[u8]>>(frame: &Frame<T>) -> Repr {
        Repr {
            kind: Some(frame.kind()),
            flags: frame.flags(),
            group: frame.group(),
            src: frame.src(),
            dst: frame.dst(),
            seq: frame.seq(),
            msg_id: frame.msg_id(),
            msg_len: frame.msg_len(),
            offset: frame.offset(),
            bitmap: frame.bitmap(),
            aux: frame.aux(),
        }
    }

    /// Bytes a frame with `payload_len` bytes of payload occupies.
    pub fn frame_len(payload_len: usize) -> usize {
        OVERHEAD + payload_len
    }

    /// Writes header, payload and CRC into `buf`; returns the frame length.
    pub fn emit(&self, payload: &[u8], buf: &mut [u8]) -> Result<usize, WireError> {
        let plen =
            u16::try_from(payload.len()).map_err(|_| WireError::PayloadTooLong(payload.len()))?;
        let need = OVERHEAD + payload.len();
        if buf.len() < need {
            return Err(WireError::BufferTooSmall {
                have: buf.len(),
                need,
            });
        }
        let kind = self.kind.unwrap_or(Kind::Heartbeat);
        buf[field::VERSION] = VERSION;
        buf[field::KIND] = kind.code();
        buf[field::FLAGS].copy_from_slice(&self.flags.bits().to_be_bytes());
        buf[field::GROUP].copy_from_slice(&self.group.to_be_bytes());
        buf[field::SRC].copy_from_slice(&self.src.get().to_be_bytes());
        buf[field::DST].copy_from_slice(&self.dst.get().to_be_bytes());
        buf[field::SEQ].copy_from_slice(&self.seq.to_be_bytes());
        buf[field::MSG_ID].copy_from_slice(&self.msg_id.to_be_bytes());
        buf[field::MSG_LEN].copy_from_slice(&self.msg_len.to_be_bytes());
        buf[field::OFFSET].copy_from_slice(&self.offset.to_be_bytes());
        buf[field::PAYLOAD_LEN].copy_from_slice(&plen.to_be_bytes());
        buf[field::BITMAP].copy_from_slice(&self.bitmap.to_be_bytes());
        buf[field::AUX].copy_from_slice(&self.aux.to_be_bytes());
        buf[HEADER_LEN..HEADER_LEN + payload.len()].copy_from_slice(payload);
        let body = HEADER_LEN + payload.len();
        let crc = pdu_crc(buf, body);
        buf[body..need].copy_from_slice(&crc.to_be_bytes());
        Ok(need)
    }

    /// Emits into a new vector.
    pub fn to_vec(&self, payload: &[u8]) -> Result<Vec<u8>, WireError> {
        let mut v = vec![0u8; OVERHEAD + payload.len()];
        self.emit(payload, &mut v)?;
        Ok(v)
    }
}

/// Adds the keyed MAC to an emitted frame of `len` bytes in `buf`: sets [`Flags::KEYED`],
/// appends the tag after the payload and rewrites the CRC. Returns the new length.
pub fn seal(key: &[u8; 32], buf: &mut [u8], len: usize) -> Result<usize, WireError> {
    if len < OVERHEAD {
        return Err(WireError::Truncated {
            len,
            need: OVERHEAD,
        });
    }
    let need = len + TAG_LEN;
    if buf.len() < need {
        return Err(WireError::BufferTooSmall {
            have: buf.len(),
            need,
        });
    }
    let flags = Flags::from_bits_truncate(be16(&buf[field::FLAGS])) | Flags::KEYED;
    buf[field::FLAGS].copy_from_slice(&flags.bits().to_be_bytes());
    let body = len - CRC_LEN;
    let tag = blake3::keyed_hash(key, &buf[..body]);
    buf[body..body + TAG_LEN].copy_from_slice(&tag.as_bytes()[..TAG_LEN]);
    let crc = pdu_crc(buf, body + TAG_LEN);
    buf[body + TAG_LEN..need].copy_from_slice(&crc.to_be_bytes());
    Ok(need)
}

#[cfg(test)]
mod tests;
