//! The sans-IO core of ethbcast: everything the protocol decides, nothing it does to a device.
//!
//! Frames and time go in, frames, timers and events come out; no module here opens a socket,
//! reads a clock or sleeps. The `ethbcast` crate drives these machines over real links or the
//! simulated switch; Cargo keeps the layering, since this crate depends on no link or
//! system code.
//!
//! Modules, bottom up:
//! - [`wire`]: the frame format (view + repr, CRC32C end to end) and Ethernet addresses;
//! - [`machine`]: the leaf every machine shares: [`machine::Machine`], [`machine::Transmit`],
//!   [`machine::Clock`];
//! - [`eqa`]: the shared retransmission buffer `Buf`, the producer `Hms`, the per-destination
//!   cursors `Lms` with reference counts (Wong & Wang, *Efficient Reliable Broadcast for
//!   Commodity Clusters*);
//! - [`engine`]: simple and push-pull broadcast with selective go-back-16 repair;
//! - [`barrier`], [`detect`]: the barrier algorithms and the failure detector;
//! - [`join`]: how a group forms (listed, ranked or discovered joins, keyed sessions);
//! - [`spelled!`]: the names of the enums users pick by name;
//! - [`queue`]: the deterministic event queue of every virtual-time harness;
//! - [`member`]: one group member: demultiplexes frames to the engine, barriers, detector and
//!   point-to-point channels.
#![deny(unsafe_code)]
#![warn(missing_docs)]
#![warn(unreachable_pub)]

pub mod barrier;
pub mod detect;
pub mod engine;
pub mod eqa;
mod error;
pub mod join;
pub mod machine;
pub mod member;
mod names;
pub mod queue;
mod rank;
pub mod secret;
mod seq;
pub mod wire;

pub use error::ConfigError;
pub use rank::Rank;
pub use seq::Seq;
