//! Fuzzing the wire parser and the protocol engine with hostile frames, under `cargo test`.
//!
//! Random bytes almost never pass the CRC32C, so most of what is fed here gets past it on
//! purpose: genuine frames captured from real engines, mutated (header fields set to edge
//! values or nudged, payload bytes flipped, bytes of the emitted frame changed, truncated or
//! extended) and emitted again with a correct CRC, and well-formed control messages
//! ([`Control`]) with random fields, which get past the control parser too. With a group key, a mutated frame is
//! either sealed with the wrong key or changed after sealing (CRC-valid, key-invalid: the key
//! check must stop it), or sealed again with the right key (key-valid: only the protocol logic
//! stands between it and the application).
//!
//! Properties:
//! - nothing panics (tests build with overflow checks on, see `[profile.test]`);
//! - whatever a member delivers is what its root sent, message for message, whenever the
//!   injected frames cannot carry forged data: garbage, frames the key rejects, replays of
//!   genuine frames, and (without a key) forged frames of every kind but data and repair;
//! - with forged data that passes every check (no key, or the right key: a frame with a valid
//!   tag comes from a member as far as anyone can tell), each root's messages are still
//!   delivered once each, in order, with no id skipped.
//!
//! The network is a queue of frames in flight on a virtual clock; the fuzzer interleaves
//! broadcasts, deliveries, losses, duplicates, reorderings, the passing of time and
//! injections. `ETHBCAST_FUZZ_CASES=N` runs N cases per property instead of the defaults
//! (a longer campaign: `ETHBCAST_FUZZ_CASES=100000 cargo test -p ethbcast-proto --test fuzz_frames`).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use ethbcast_proto::{
    control_counter, seal, BarrierAlgo, BarrierMsg, BarrierOp, Control, Dest, Engine, EngineConfig,
    EngineEvent, EthernetFrame, Flags, Frame, FrameCipher, HardwareAlgorithm, Kind, Message, Rank,
    Repr, CRC_LEN, HEADER_LEN, NACK_MORE_WORDS, OVERHEAD, TAG_LEN,
};

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config as PropConfig, TestRunner};

const GROUP: u32 = 7;
const KEY: [u8; 32] = [0x4b; 32];
const WRONG_KEY: [u8; 32] = [0x4c; 32];
const MEMBERS: u16 = 3;
/// Frame kinds on the wire (1 ..= KINDS).
const KINDS: u8 = 12;

/// Cases per property: `default`, or `ETHBCAST_FUZZ_CASES` for a longer campaign (the
/// defaults keep the whole file to seconds in `cargo test`).
fn cases(default: u32) -> u32 {
    std::env::var("ETHBCAST_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

// ---------------------------------------------------------------------------------------
// Building hostile frames
// ---------------------------------------------------------------------------------------

/// A value for a header field.
#[derive(Debug, Clone, Copy)]
enum Val {
    Zero,
    One,
    Max,
    /// The current value plus a small signed step (wrapping).
    Near(i16),
    Any(u32),
}

impl Val {
    fn apply(self, cur: u32, max: u32) -> u32 {
        match self {
            Val::Zero => 0,
            Val::One => 1,
            Val::Max => max,
            Val::Near(d) => cur.wrapping_add_signed(i32::from(d)) & max,
            Val::Any(v) => v & max,
        }
    }
}

/// One change to a frame.
#[derive(Debug, Clone)]
enum Mutation {
    /// Sets a header field (see [`set_field`]).
    Field(u8, Val),
    /// XORs a payload byte (the index wraps) with a non-zero value.
    PayloadXor(usize, u8),
    /// Replaces the payload.
    Payload(Vec<u8>),
    /// XORs a byte of the emitted frame (header, payload, tag; the index wraps).
    ByteXor(usize, u8),
    /// Cuts the emitted frame to this many bytes.
    Truncate(usize),
    /// Appends bytes to the emitted frame (Ethernet padding, or what a forged payload
    /// length reaches into).
    Extend(Vec<u8>),
}

/// What authenticates a forged frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seal {
    /// No tag.
    None,
    /// A tag of another key.
    WrongKey,
    /// Sealed with the group key, then changed (and its CRC fixed).
    Broken,
    /// Sealed with the group key after every change: it passes authentication.
    Right,
}

fn set_field(r: &mut Repr, field: u8, v: Val) {
    match field % 11 {
        0 => {
            let k = v.apply(r.kind.map_or(0, |k| k as u32), 0xff) as u8;
            r.kind = Kind::from_code(k % (KINDS + 1)).or(r.kind);
        }
        1 => r.flags = Flags::from_bits_truncate(v.apply(u32::from(r.flags.bits()), 0xffff) as u16),
        2 => r.group = v.apply(r.group, u32::MAX),
        3 => r.src = Rank::new(v.apply(u32::from(r.src.get()), 0xffff) as u16),
        4 => r.dst = Rank::new(v.apply(u32::from(r.dst.get()), 0xffff) as u16),
        5 => r.seq = v.apply(r.seq, u32::MAX),
        6 => r.msg_id = v.apply(r.msg_id, u32::MAX),
        7 => r.msg_len = v.apply(r.msg_len, u32::MAX),
        8 => r.offset = v.apply(r.offset, u32::MAX),
        9 => r.bitmap = v.apply(u32::from(r.bitmap), 0xffff) as u16,
        _ => r.aux = v.apply(r.aux, u32::MAX),
    }
}

/// Rewrites the CRC where the (possibly mutated) header says it is, if the bytes reach it.
fn fix_crc(b: &mut [u8]) {
    if b.len() < HEADER_LEN {
        return;
    }
    let total = Frame::new_unchecked(&*b).total_len();
    if b.len() >= total {
        let crc = crc32c::crc32c(&b[..total - CRC_LEN]);
        b[total - CRC_LEN..total].copy_from_slice(&crc.to_be_bytes());
    }
}

/// Adds a tag of `key` to the unkeyed frame `b` (as far as its header says it goes).
/// Seals the frame in `b` with `key` as a keyed sender does: encrypted (AES-256-GCM under the
/// frame's group's key) or authenticated only (keyed BLAKE3), the two mixed by the header's
/// bytes, so that both reach the engine.
fn reseal(b: &mut Vec<u8>, key: &[u8; 32]) {
    if b.len() < HEADER_LEN {
        return;
    }
    let f = Frame::new_unchecked(&b[..]);
    let len = f.total_len().min(b.len());
    let encrypt = b[..HEADER_LEN].iter().fold(0u8, |a, x| a ^ x) & 1 == 0;
    let group = f.group();
    let mut out = b[..len].to_vec();
    out.resize(len + TAG_LEN, 0);
    let sealed = if encrypt {
        FrameCipher::new(&(*key).into(), group).seal(&mut out, len)
    } else {
        seal(key, &mut out, len)
    };
    if let Ok(n) = sealed {
        out.truncate(n);
        *b = out;
    }
}

/// Whether `f` carries a tag of [`KEY`] for its bytes: a keyed BLAKE3 one, or an AES-256-GCM
/// one of its group's key.
fn authentic(f: &Frame<&[u8]>) -> bool {
    let mut out = vec![0u8; f.total_len()];
    f.verify(&KEY)
        || FrameCipher::new(&KEY.into(), f.group())
            .open(f, &mut out)
            .is_some()
}

/// The payload of a frame a member sent, decrypted if it was (with [`KEY`]).
fn plain_payload(f: &Frame<&[u8]>) -> Vec<u8> {
    if !f.flags().contains(Flags::ENCRYPTED) {
        return f.payload().to_vec();
    }
    let mut out = vec![0u8; f.total_len()];
    FrameCipher::new(&KEY.into(), f.group())
        .open(f, &mut out)
        .map(|p| p.payload().to_vec())
        .unwrap_or_default()
}

fn byte_mutation(b: &mut Vec<u8>, m: &Mutation) {
    match m {
        Mutation::ByteXor(i, x) if !b.is_empty() => {
            let n = b.len();
            b[i % n] ^= x | 1;
        }
        Mutation::Truncate(n) => b.truncate(*n),
        Mutation::Extend(more) => b.extend_from_slice(more),
        _ => {}
    }
}

/// A forged frame: `base` (a genuine frame) with `muts` applied, authenticated as `seal` says.
fn forge(base: &[u8], muts: &[Mutation], seal: Seal) -> Vec<u8> {
    let Ok(f) = Frame::new_checked(base) else {
        return base.to_vec();
    };
    let mut repr = Repr::parse(&f);
    repr.flags.remove(Flags::KEYED | Flags::ENCRYPTED);
    let mut payload = plain_payload(&f);
    for m in muts {
        match m {
            Mutation::Field(k, v) => set_field(&mut repr, *k, *v),
            Mutation::PayloadXor(i, x) if !payload.is_empty() => {
                let n = payload.len();
                payload[i % n] ^= x | 1;
            }
            Mutation::Payload(p) => payload = p.clone(),
            _ => {}
        }
    }
    let Ok(mut b) = repr.to_vec(&payload) else {
        return base.to_vec();
    };
    // Changes of the emitted bytes come before the tag when the tag is to stay valid, after
    // it when the frame is to be a broken one.
    if seal != Seal::Broken {
        for m in muts {
            byte_mutation(&mut b, m);
        }
        fix_crc(&mut b);
    }
    match seal {
        Seal::None => {}
        Seal::WrongKey => reseal(&mut b, &WRONG_KEY),
        Seal::Right => reseal(&mut b, &KEY),
        Seal::Broken => {
            reseal(&mut b, &KEY);
            let sealed = b.clone();
            for m in muts {
                byte_mutation(&mut b, m);
            }
            fix_crc(&mut b);
            if b.len() >= sealed.len() && b[..sealed.len()] == sealed[..] {
                // Nothing but padding changed: it would still be the genuine frame. Break
                // it for certain.
                let i = HEADER_LEN / 2;
                b[i] ^= 0x10;
                fix_crc(&mut b);
            }
        }
    }
    b
}

fn val() -> impl Strategy<Value = Val> {
    prop_oneof![
        Just(Val::Zero),
        Just(Val::One),
        Just(Val::Max),
        (-40i16..40).prop_map(Val::Near),
        any::<i16>().prop_map(Val::Near),
        any::<u32>().prop_map(Val::Any),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        6 => (any::<u8>(), val()).prop_map(|(f, v)| Mutation::Field(f, v)),
        2 => (any::<usize>(), any::<u8>()).prop_map(|(i, x)| Mutation::PayloadXor(i, x)),
        1 => proptest::collection::vec(any::<u8>(), 0..1600).prop_map(Mutation::Payload),
        2 => (any::<usize>(), any::<u8>()).prop_map(|(i, x)| Mutation::ByteXor(i, x)),
        1 => (0usize..120).prop_map(Mutation::Truncate),
        1 => proptest::collection::vec(any::<u8>(), 0..64).prop_map(Mutation::Extend),
    ]
}

fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    proptest::collection::vec(mutation(), 1..4)
}

/// A frame made up from nothing but a kind and random fields, with a valid CRC.
fn fresh_frame(kind: u8, fields: &[u32; 10], payload: &[u8]) -> Vec<u8> {
    let mut r = Repr::new(Kind::from_code(kind % KINDS + 1).unwrap_or(Kind::Data));
    r.group = GROUP;
    for (k, v) in fields.iter().enumerate() {
        // Small values land inside the group's ranks and windows more often than not.
        let v = if v & 0x8000_0000 != 0 { v & 0xf } else { *v };
        if k != 0 && k != 2 {
            set_field(&mut r, k as u8, Val::Any(v));
        }
    }
    r.to_vec(payload).unwrap_or_default()
}

/// A well-formed control message with random fields: it passes the control parser, so the
/// engine's handling of what it means is what gets exercised.
fn control() -> impl Strategy<Value = Control> {
    let small = prop_oneof![0u32..40, any::<u32>()];
    let rank = prop_oneof![0u16..4, any::<u16>()].prop_map(Rank::new);
    prop_oneof![
        (small.clone(), proptest::option::of(small.clone()))
            .prop_map(|(next, seen)| Control::Ack { next, seen }),
        (
            small.clone(),
            any::<u16>(),
            small.clone(),
            proptest::collection::vec(any::<u16>(), 0..=NACK_MORE_WORDS)
        )
            .prop_map(|(base, missing, next, more)| Control::Nack {
                base,
                missing,
                next,
                more,
            }),
        (
            rank.clone(),
            small.clone(),
            any::<u16>(),
            any::<bool>(),
            proptest::collection::vec(any::<u16>(), 0..=NACK_MORE_WORDS)
        )
            .prop_map(|(root, base, missing, unheld, more)| Control::PeerNack {
                root,
                base,
                missing,
                unheld,
                more,
            }),
        (
            rank.clone(),
            small.clone(),
            any::<u16>(),
            proptest::collection::vec(any::<u16>(), 0..=NACK_MORE_WORDS)
        )
            .prop_map(|(root, base, missing, more)| Control::PeerPending {
                root,
                base,
                missing,
                more,
            }),
        (small.clone(), small.clone()).prop_map(|(msg_id, next)| Control::Pull { msg_id, next }),
        (small.clone(), rank.clone())
            .prop_map(|(msg_id, designated)| Control::PullPoll { msg_id, designated }),
        proptest::collection::vec(any::<u16>(), 0..5)
            .prop_map(|table| Control::Heartbeat { table }),
        rank.clone().prop_map(|rank| Control::Ping { rank }),
        rank.clone().prop_map(|rank| Control::Pong { rank }),
        rank.clone().prop_map(|rank| Control::Evict { rank }),
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(|body| Control::Join { body }),
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(|body| Control::Notice { body }),
        (
            any::<bool>(),
            0u8..4,
            small.clone(),
            small,
            any::<u32>(),
            proptest::collection::vec(any::<u8>(), 0..4)
        )
            .prop_map(
                |(tree, op, epoch, round, view, set)| Control::Barrier(BarrierMsg {
                    algo: if tree {
                        BarrierAlgo::Broadcast
                    } else {
                        BarrierAlgo::Dissemination
                    },
                    op: [
                        BarrierOp::Arrive,
                        BarrierOp::Release,
                        BarrierOp::Round,
                        BarrierOp::Query
                    ][usize::from(op)],
                    epoch,
                    round,
                    view,
                    set,
                })
            ),
    ]
}

// ---------------------------------------------------------------------------------------
// The wire parser
// ---------------------------------------------------------------------------------------

/// Every accessor of a checked frame, what must hold between them, and the control parser.
fn exercise(b: &[u8]) {
    let Ok(f) = Frame::new_checked(b) else { return };
    let total = f.total_len();
    assert!(total <= b.len());
    let keyed = f.flags().contains(Flags::KEYED);
    let tag = if keyed { TAG_LEN } else { 0 };
    assert_eq!(f.payload().len() + OVERHEAD + tag, total);
    assert_eq!(f.tag().is_some(), keyed);
    let _ = (f.kind(), f.group(), f.src(), f.dst(), f.seq(), f.msg_id());
    let _ = (f.msg_len(), f.offset(), f.bitmap(), f.aux(), f.verify(&KEY));
    if f.kind().is_data() {
        assert!(u64::from(f.offset()) + f.payload().len() as u64 <= u64::from(f.msg_len()));
    }
    // What parses, emits back to the same thing.
    let repr = Repr::parse(&f);
    let mut plain = repr;
    plain.flags.remove(Flags::KEYED);
    let again = plain.to_vec(f.payload()).expect("a parsed frame emits");
    let g = Frame::new_checked(&again[..]).expect("an emitted frame parses");
    assert_eq!(Repr::parse(&g), plain);
    assert_eq!(g.payload(), f.payload());
    // A control frame that parses as a message emits back to the same message.
    if !f.kind().is_data() {
        if let Ok(c) = Control::parse(&f) {
            let again = c.to_vec(f.group(), f.src(), f.dst(), control_counter(&f));
            let g = Frame::new_checked(&again[..]).expect("an emitted control frame parses");
            assert_eq!(Control::parse(&g), Ok(c));
        }
    }
}

fn genuine_frame() -> impl Strategy<Value = Vec<u8>> {
    (
        1u8..=KINDS,
        any::<[u32; 10]>(),
        proptest::collection::vec(any::<u8>(), 0..300),
        any::<bool>(),
    )
        .prop_map(|(kind, fields, payload, keyed)| {
            let mut b = fresh_frame(kind, &fields, &payload);
            if keyed {
                reseal(&mut b, &KEY);
            }
            b
        })
}

proptest! {
    #![proptest_config(PropConfig { cases: cases(10_000), ..PropConfig::default() })]

    /// CRC-valid mutated frames, keyed and not: no accessor panics, what parses emits back
    /// the same, and a tag verifies only on the bytes it was made for.
    #[test]
    fn the_wire_parser_takes_mutated_crc_valid_frames(
        base in genuine_frame(),
        muts in mutations(),
        seal in prop_oneof![Just(Seal::None), Just(Seal::WrongKey), Just(Seal::Broken), Just(Seal::Right)],
    ) {
        let b = forge(&base, &muts, seal);
        exercise(&b);
        if let Ok(f) = Frame::new_checked(&b[..]) {
            // Only what was sealed with the key after its last change verifies.
            prop_assert!(seal == Seal::Right || !authentic(&f), "{seal:?} frame verifies");
        }
    }

    /// Well-formed control messages, mutated like captured frames.
    #[test]
    fn the_control_parser_takes_mutated_control_frames(c in control(), muts in mutations(), keyed in any::<bool>()) {
        let mut base = c.to_vec(GROUP, Rank::new(1), Rank::new(2), 1);
        if keyed {
            reseal(&mut base, &KEY);
        }
        exercise(&base);
        exercise(&forge(&base, &muts, Seal::None));
    }

    /// Random bytes, and random bytes with a CRC fixed where their header says it is.
    #[test]
    fn the_wire_parser_takes_random_bytes(mut b in proptest::collection::vec(any::<u8>(), 0..200), fix in any::<bool>()) {
        if fix {
            fix_crc(&mut b);
        }
        exercise(&b);
        let _ = EthernetFrame::new_checked(&b[..]).map(|e| (e.dst(), e.src(), e.payload().len()));
        let len = b.len();
        let mut sealed = b.clone();
        sealed.resize(len + TAG_LEN, 0);
        let _ = seal(&KEY, &mut sealed, len);
    }
}

// ---------------------------------------------------------------------------------------
// The engine
// ---------------------------------------------------------------------------------------

/// How the fuzzed frames may lie, and which property holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Keyed group; forged frames are unsealed, sealed with another key or broken after
    /// sealing; replays are genuine. Deliveries are exactly the roots' messages.
    KeyRejects,
    /// No key; forged frames of every kind but data and repair, and replays. Deliveries are
    /// exactly the roots' messages.
    ControlOnly,
    /// Keyed group; forged frames sealed with the right key. Each root's messages arrive
    /// once each, in order.
    KeyValid,
    /// Keyed group; forged frames sealed with the right key, data only for sequences the
    /// target has consumed already: the protocol alone must keep them out. Deliveries are
    /// exactly the roots' messages.
    LateData,
    /// No key; forged frames of every kind. Each root's messages arrive once each, in order.
    Unkeyed,
}

impl Mode {
    fn keyed(self) -> bool {
        matches!(self, Mode::KeyRejects | Mode::KeyValid | Mode::LateData)
    }
    fn exact(self) -> bool {
        matches!(self, Mode::KeyRejects | Mode::ControlOnly | Mode::LateData)
    }
}

/// One move of the fuzzer.
#[derive(Debug, Clone)]
enum Action {
    /// Delivers the frame at the front of the network.
    Deliver,
    /// Loses it.
    Lose,
    /// Delivers it and keeps a copy in flight.
    Duplicate,
    /// Moves it back this many places.
    Reorder(usize),
    /// Lets this many tenths of a millisecond pass.
    Tick(u16),
    /// A root (rank 0, or 1 when the selector is odd and small) broadcasts a message.
    Bcast(u8, u16, bool),
    /// A genuine frame seen earlier (index wraps), replayed to a member.
    Replay(usize, u8),
    /// A genuine frame seen earlier, mutated, to a member.
    Forge(usize, u8, Vec<Mutation>, u8),
    /// A frame made up from random fields, to a member.
    Fresh(u8, [u32; 10], Vec<u8>, u8),
    /// A well-formed control message from a member (source, destination, control counter)
    /// to a member.
    Typed(Control, u8, u8, u32, u8),
    /// Random bytes, to a member.
    Garbage(Vec<u8>, u8),
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        30 => Just(Action::Deliver),
        3 => Just(Action::Lose),
        2 => Just(Action::Duplicate),
        3 => (1usize..20).prop_map(Action::Reorder),
        4 => (1u16..40).prop_map(Action::Tick),
        3 => (any::<u8>(), 0u16..5000, any::<bool>()).prop_map(|(r, l, p)| Action::Bcast(r, l, p)),
        3 => (any::<usize>(), any::<u8>()).prop_map(|(i, t)| Action::Replay(i, t)),
        12 => (any::<usize>(), any::<u8>(), mutations(), any::<u8>()).prop_map(|(i, t, m, s)| Action::Forge(i, t, m, s)),
        3 => (any::<u8>(), any::<[u32; 10]>(), proptest::collection::vec(any::<u8>(), 0..200), any::<u8>())
            .prop_map(|(k, f, p, t)| Action::Fresh(k, f, p, t)),
        1 => (proptest::collection::vec(any::<u8>(), 0..120), any::<u8>()).prop_map(|(b, t)| Action::Garbage(b, t)),
        6 => (control(), any::<u8>(), any::<u8>(), prop_oneof![1u32..300, any::<u32>()], any::<u8>())
            .prop_map(|(c, s, d, ctr, t)| Action::Typed(c, s, d, ctr, t)),
    ]
}

/// Engine settings the fuzzer varies.
#[derive(Debug, Clone, Copy)]
struct Setup {
    window: usize,
    auto_post: bool,
    peer_repair: bool,
    /// Largest message a posted receive takes (receives posted by hand).
    post_max: usize,
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        // 24: a window that is not a power of two.
        prop_oneof![Just(4usize), Just(16), Just(24), Just(64)],
        any::<bool>(),
        any::<bool>(),
        prop_oneof![Just(usize::MAX), Just(100usize), Just(3000)],
    )
        .prop_map(|(window, auto_post, peer_repair, post_max)| Setup {
            window,
            auto_post,
            peer_repair,
            post_max,
        })
}

/// What a member delivered: (root, message id, Ok(data) or Err(length of a truncated one)).
type Delivery = (Rank, u64, Result<Vec<u8>, usize>);

struct World {
    mode: Mode,
    engines: Vec<Engine>,
    now: Instant,
    /// Frames in flight: (destination index, bytes).
    net: VecDeque<(usize, Vec<u8>)>,
    /// Genuine frames seen on the network (the last few hundred).
    seen: VecDeque<Vec<u8>>,
    /// Per root, the messages it broadcast, by id.
    sent: Vec<Vec<Vec<u8>>>,
    delivered: Vec<Vec<Delivery>>,
}

impl World {
    fn new(mode: Mode, s: Setup) -> World {
        let now = Instant::now();
        let engines = Rank::all(MEMBERS)
            .map(|r| {
                let mut c = EngineConfig::new(GROUP, r, MEMBERS);
                c.window = s.window;
                c.auto_post = s.auto_post;
                c.peer_repair = s.peer_repair;
                c.max_message = 1 << 20;
                if mode.keyed() {
                    c.key = Some(KEY.into());
                }
                let mut e = Engine::new(c).unwrap();
                if !s.auto_post {
                    for root in Rank::all(MEMBERS).filter(|&x| x != r) {
                        for _ in 0..12 {
                            e.post_recv(now, root, s.post_max).unwrap();
                        }
                    }
                }
                e
            })
            .collect();
        World {
            mode,
            engines,
            now,
            net: VecDeque::new(),
            seen: VecDeque::new(),
            sent: vec![Vec::new(); usize::from(MEMBERS)],
            delivered: vec![Vec::new(); usize::from(MEMBERS)],
        }
    }

    /// Moves every frame the engines have to send onto the network, and every event into
    /// the record.
    fn pump(&mut self) {
        let mut buf = vec![0u8; 1600];
        for i in 0..self.engines.len() {
            while let Some(t) = self.engines[i].poll_transmit(self.now, &mut buf) {
                let pdu = buf[..t.len].to_vec();
                if self.seen.len() == 256 {
                    self.seen.pop_front();
                }
                self.seen.push_back(pdu.clone());
                match t.dst {
                    Dest::All => {
                        for j in (0..self.engines.len()).filter(|&j| j != i) {
                            self.net.push_back((j, pdu.clone()));
                        }
                    }
                    Dest::Rank(r) => self.net.push_back((r.index(), pdu)),
                }
            }
            while let Some(ev) = self.engines[i].poll_event() {
                match ev {
                    EngineEvent::Delivered(Message { root, msg_id, data }) => {
                        self.delivered[i].push((root, msg_id, Ok(data)))
                    }
                    EngineEvent::Truncated {
                        root, msg_id, len, ..
                    } => self.delivered[i].push((root, msg_id, Err(len))),
                    _ => {}
                }
            }
            let _ = self.engines[i].poll_timeout();
        }
    }

    fn to(&self, t: u8) -> usize {
        usize::from(t) % self.engines.len()
    }

    fn inject(&mut self, to: usize, pdu: Vec<u8>) {
        let _ = self.engines[to].handle_frame(self.now, &pdu);
    }

    fn seal_for(&self, s: u8) -> Seal {
        match self.mode {
            Mode::KeyRejects => [Seal::None, Seal::WrongKey, Seal::Broken][usize::from(s) % 3],
            Mode::KeyValid | Mode::LateData => Seal::Right,
            Mode::ControlOnly | Mode::Unkeyed => Seal::None,
        }
    }

    /// Whether this mode lets `pdu` in as a forgery to member `to` (see [`Mode`]).
    fn admits(&self, pdu: &[u8], to: usize) -> bool {
        let Ok(f) = Frame::new_checked(pdu) else {
            return true;
        };
        match self.mode {
            Mode::ControlOnly => !f.kind().is_data(),
            Mode::LateData if f.kind().is_data() => {
                // Behind the next sequence `to` expects from that root, by serial arithmetic.
                self.engines[to].receiver(f.src()).is_some_and(|rx| {
                    let behind = rx.expected().low32().wrapping_sub(f.seq()) as i32;
                    behind > 0
                })
            }
            _ => true,
        }
    }

    fn step(&mut self, a: &Action) {
        match a {
            Action::Deliver | Action::Duplicate => {
                if let Some((to, pdu)) = self.net.pop_front() {
                    let _ = self.engines[to].handle_frame(self.now, &pdu);
                    if matches!(a, Action::Duplicate) {
                        self.net.push_back((to, pdu));
                    }
                }
            }
            Action::Lose => {
                self.net.pop_front();
            }
            Action::Reorder(k) => {
                if let Some(f) = self.net.pop_front() {
                    let at = (*k).min(self.net.len());
                    self.net.insert(at, f);
                }
            }
            Action::Tick(t) => {
                self.now += Duration::from_micros(100 * u64::from(*t));
                for e in &mut self.engines {
                    e.handle_timeout(self.now);
                }
            }
            Action::Bcast(r, len, pushpull) => {
                let root = usize::from(r % 4 == 1);
                let id = self.sent[root].len();
                let data: Vec<u8> = (0..usize::from(*len))
                    .map(|i| (i as u8).wrapping_mul(31) ^ (id as u8) ^ (root as u8 * 0x80))
                    .collect();
                let algo = if *pushpull {
                    HardwareAlgorithm::PushPull
                } else {
                    HardwareAlgorithm::Simple
                };
                if let Ok(got) = self.engines[root].bcast(self.now, data.clone(), algo) {
                    assert_eq!(got, id as u64, "message ids count from 0");
                    self.sent[root].push(data);
                }
            }
            Action::Replay(i, t) => {
                if !self.seen.is_empty() {
                    let pdu = self.seen[i % self.seen.len()].clone();
                    let to = self.to(*t);
                    self.inject(to, pdu);
                }
            }
            Action::Forge(i, t, muts, s) => {
                if !self.seen.is_empty() {
                    let base = self.seen[i % self.seen.len()].clone();
                    let pdu = forge(&base, muts, self.seal_for(*s));
                    let to = self.to(*t);
                    if self.admits(&pdu, to) {
                        self.inject(to, pdu);
                    }
                }
            }
            Action::Fresh(k, fields, payload, t) => {
                let mut pdu = fresh_frame(*k, fields, payload);
                match self.seal_for(*t) {
                    Seal::Right => reseal(&mut pdu, &KEY),
                    Seal::WrongKey => reseal(&mut pdu, &WRONG_KEY),
                    _ => {}
                }
                let to = self.to(*t);
                if self.admits(&pdu, to) {
                    self.inject(to, pdu);
                }
            }
            Action::Garbage(b, t) => {
                let to = self.to(*t);
                self.inject(to, b.clone());
            }
            Action::Typed(c, src, dst, ctr, t) => {
                let src = Rank::new(u16::from(*src) % (MEMBERS + 1));
                // Mostly to the member it is injected into, sometimes to all or another.
                let to = self.to(*t);
                let dst = match dst % 4 {
                    0 => Rank::BROADCAST,
                    1 => Rank::new(u16::from(*dst) % MEMBERS),
                    _ => Rank::new(to as u16),
                };
                let mut pdu = c.to_vec(GROUP, src, dst, *ctr);
                match self.seal_for(*t) {
                    Seal::Right | Seal::Broken => reseal(&mut pdu, &KEY),
                    Seal::WrongKey => reseal(&mut pdu, &WRONG_KEY),
                    Seal::None => {}
                }
                if self.seal_for(*t) == Seal::Broken {
                    let i = pdu.len() / 2;
                    pdu[i] ^= 0x20;
                    fix_crc(&mut pdu);
                }
                self.inject(to, pdu);
            }
        }
        self.pump();
    }

    /// After the fuzzing: the network delivers everything and time passes, so that what
    /// the genuine traffic can still complete, completes.
    fn settle(&mut self) {
        for _ in 0..3000 {
            if self.net.is_empty() {
                let next = self.engines.iter().filter_map(|e| e.poll_timeout()).min();
                match next {
                    Some(t) if t <= self.now + Duration::from_secs(2) => self.now = self.now.max(t),
                    _ => return,
                }
                for e in &mut self.engines {
                    e.handle_timeout(self.now);
                }
            } else {
                self.step(&Action::Deliver);
                self.now += Duration::from_micros(10);
            }
            self.pump();
        }
    }

    /// The property of the mode, for every member's deliveries.
    fn check(&self) -> Result<(), TestCaseError> {
        for (m, got) in self.delivered.iter().enumerate() {
            let mut next = vec![0u64; usize::from(MEMBERS)];
            for (root, id, data) in got {
                let r = root.index();
                prop_assert!(
                    r < usize::from(MEMBERS) && r != m,
                    "member {m} delivered from {root}"
                );
                prop_assert_eq!(
                    *id,
                    next[r],
                    "member {} skipped or repeated a message of root {}",
                    m,
                    root
                );
                next[r] += 1;
                if self.mode.exact() {
                    let sent = self.sent[r].get(*id as usize);
                    prop_assert!(
                        sent.is_some(),
                        "member {m} delivered message {id} that root {root} never sent"
                    );
                    let sent = sent.unwrap();
                    match data {
                        Ok(d) => prop_assert!(d == sent, "member {m}: message {id} of root {root} differs from what it sent ({} vs {} bytes)", d.len(), sent.len()),
                        Err(len) => prop_assert_eq!(*len, sent.len(), "member {} truncated message {} of root {}", m, id, root),
                    }
                }
            }
        }
        Ok(())
    }
}

fn run_world(mode: Mode, s: Setup, actions: &[Action]) -> Result<(), TestCaseError> {
    let mut w = World::new(mode, s);
    w.step(&Action::Bcast(0, 3000, false));
    for a in actions {
        w.step(a);
    }
    w.settle();
    w.check()
}

fn actions() -> impl Strategy<Value = Vec<Action>> {
    proptest::collection::vec(action(), 20..250)
}

fn engine_config() -> PropConfig {
    PropConfig {
        cases: cases(1000),
        ..PropConfig::default()
    }
}

proptest! {
    #![proptest_config(engine_config())]

    #[test]
    fn with_a_key_forged_frames_the_key_rejects_change_no_delivery(s in setup(), a in actions()) {
        run_world(Mode::KeyRejects, s, &a)?;
    }

    #[test]
    fn without_a_key_forged_control_frames_change_no_delivery(s in setup(), a in actions()) {
        run_world(Mode::ControlOnly, s, &a)?;
    }

    #[test]
    fn key_valid_forged_frames_never_break_the_order_of_deliveries(s in setup(), a in actions()) {
        run_world(Mode::KeyValid, s, &a)?;
    }

    #[test]
    fn unkeyed_forged_frames_never_break_the_order_of_deliveries(s in setup(), a in actions()) {
        run_world(Mode::Unkeyed, s, &a)?;
    }

    #[test]
    fn key_valid_forged_data_for_frames_already_consumed_changes_no_delivery(s in setup(), a in actions()) {
        run_world(Mode::LateData, s, &a)?;
    }
}

/// The fuzzer is only worth its time if its frames get past the door: most key-valid forged
/// frames must pass the CRC and the key check and reach the protocol logic.
#[test]
fn key_valid_forged_frames_reach_the_protocol_logic() {
    let mut runner = TestRunner::deterministic();
    let mut w = World::new(
        Mode::KeyValid,
        Setup {
            window: 16,
            auto_post: true,
            peer_repair: true,
            post_max: usize::MAX,
        },
    );
    for _ in 0..4 {
        w.step(&Action::Bcast(0, 2000, false));
        w.step(&Action::Bcast(1, 500, true));
    }
    w.settle();
    let (mut tried, mut past_the_door) = (0, 0);
    for _ in 0..500 {
        let muts = mutations().new_tree(&mut runner).unwrap().current();
        let i = (0usize..w.seen.len())
            .new_tree(&mut runner)
            .unwrap()
            .current();
        let pdu = forge(&w.seen[i], &muts, Seal::Right);
        tried += 1;
        let r = w.engines[1].handle_frame(w.now, &pdu);
        if !matches!(
            r,
            Err(ethbcast_proto::DropReason::Malformed(_) | ethbcast_proto::DropReason::BadMac)
        ) {
            past_the_door += 1;
        }
    }
    assert!(
        past_the_door * 2 > tried,
        "only {past_the_door} of {tried} key-valid forged frames got past the CRC and the key"
    );
}
