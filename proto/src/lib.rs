//! The sans-IO core of ethbcast: everything the protocol decides, nothing it does to a device.
//!
//! Frames and time go in, frames, timers and events come out; no module here opens a socket,
//! reads a clock or sleeps. The `ethbcast` crate drives these machines over real links or the
//! simulated switch; Cargo keeps the layering, since this crate depends on no link or
//! system code.
//!
//! The modules are private; what the crate offers is the list of names at its root, grouped
//! below as its layers, bottom up:
//! - the wire format (`wire`): a checked view ([`Frame`]) and a parsed form ([`Repr`]) of a
//!   PDU, CRC32C end to end, the control messages ([`Control`]), the Ethernet framing
//!   ([`EthernetFrame`]) and addresses ([`MacAddr`]);
//! - the leaf every machine shares (`machine`): [`Machine`], [`Transmit`], [`Clock`];
//! - the shared retransmission buffer (`eqa`): [`Eqa`] with its [`Buf`], the producer
//!   [`Hms`] and the per-destination cursors [`Lms`] (Wong & Wang, *Efficient Reliable
//!   Broadcast for Commodity Clusters*);
//! - the broadcast engine (`engine`): [`Engine`], simple and push-pull broadcast with
//!   selective go-back-16 repair;
//! - the barriers and the failure detector (`barrier`, `detect`): [`Barrier`], [`Detector`];
//! - how a group forms (`join`): [`Join`] (listed, ranked or discovered joins, keyed
//!   sessions);
//! - one group member (`member`): [`Member`], which demultiplexes frames to the engine,
//!   barriers, detector and point-to-point channels;
//! - [`spelled!`], the names of the enums users pick by name, and [`EventQueue`], the
//!   deterministic event queue of every virtual-time harness.
#![deny(unsafe_code)]
#![warn(missing_docs)]
#![warn(unreachable_pub)]
#![warn(unnameable_types)]

mod barrier;
mod detect;
mod engine;
mod eqa;
mod error;
mod join;
mod machine;
mod member;
mod names;
mod queue;
mod rank;
mod rank_map;
mod secret;
mod seq;
mod wire;

// Identifiers, keys and the error every configuration shares.
pub use error::ConfigError;
pub use rank::Rank;
pub use secret::Key;
pub use seq::Seq;

// The wire format.
pub use wire::control::control_counter;
pub use wire::ethernet::{
    group_mac, is_group_mac, parse_mac, EthernetFrame, GroupAddress, GroupAddressError, MacAddr,
    BROADCAST_MAC, ETHERTYPE, ETH_HEADER_LEN, GROUP_MAC_PREFIX, MIN_ETH_FRAME,
};
pub use wire::{
    crc32c, pdu_crc, seal, BarrierAlgo, BarrierMsg, BarrierOp, Control, Flags, Frame, FrameCipher,
    Kind, Repr, WireError, CRC_LEN, HEADER_LEN, NACK_BITS, NACK_MORE_WORDS, OVERHEAD, TAG_LEN,
    VERSION,
};

// What every machine offers its driver.
pub use machine::{BatchEnd, Clock, Frames, Held, Machine, Transmit};

// The shared retransmission buffer.
pub use eqa::{Buf, Eqa, Hms, Lms, LmsStats, PublishError, Slot, SlotRef};

// The broadcast engine.
pub use engine::{
    default_window, Dest, DropReason, DropStats, Engine, EngineConfig, EngineEvent, EngineStats,
    HardwareAlgorithm, Message, Observe, Observer, Piece, PostError, Prefetch, Receiver, SendError,
    Sender, SessionEnded, ACK_TREE_FANOUT, ACK_TREE_FROM, MAX_WINDOW,
};

// Barriers and the failure detector.
pub use barrier::{Barrier, BarrierConfig, BarrierError, BarrierStats, FrameError};
pub use detect::{
    DecodeError, Detector, DetectorConfig, DetectorEvent, DetectorMsg, Gossip, MAX_MEMBERS,
};

// How a group forms.
pub use join::{
    session, Expect, Join, JoinConfig, JoinError, JoinStats, Joined, LateRoster, Overheard,
    Session, HELLO_GAP, MAX_CHALLENGES, MIN_PDU, REPEAT,
};

// One group member.
pub use member::{
    live_tree, pair_group, tree_children, tree_parent, Algorithm, DestProgress, Done, Event,
    Member, MemberConfig, MemberError, MemberStats, BARRIER_ARITY, EVENT_BOUND, LATE_ROSTER_SERVE,
    P2P_WINDOW, TREE_CACHE,
};

// The harnesses' event queue.
pub use queue::EventQueue;

/// Test support: counters moved on as if billions of frames had been sent, for the tests of a
/// session's end (the replay window across a counter's wrap). Not part of the API.
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub mod test_hooks {
    use crate::Engine;

    /// Continues `engine`'s control counter from `ctr`, as if the control frames in between
    /// had been sent.
    pub fn skip_control_counter_to(engine: &mut Engine, ctr: u32) {
        engine.skip_control_counter_to(ctr);
    }

    /// Makes now every place `engine` makes at first use, at its bound: the receive windows'
    /// payload places, the receive queues' and the outbox's room.
    pub fn make_every_place(engine: &mut Engine) {
        engine.make_every_place();
    }

    /// Counts `frames` sequence numbers of `engine`'s broadcasts as used.
    pub fn skip_sequences(engine: &mut Engine, frames: u64) {
        engine.skip_sequences(frames);
    }
}
