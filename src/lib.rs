//! ethbcast: reliable broadcast over raw Ethernet that uses the switch's hardware broadcast.
//!
//! One broadcast frame, sent once by the root, reaches every member of the segment; a shared
//! retransmission buffer ([`eqa`]) and point-to-point repair make it reliable. The design is the
//! Enhanced Queue Architecture of Wong & Wang, *Efficient Reliable Broadcast for Commodity
//! Clusters*: one buffer for all destinations, a lightweight cursor per destination.
//!
//! Layers, bottom up:
//! - [`wire`]: the frame format (view + repr, CRC32C end to end);
//! - [`eqa`]: the shared retransmission buffer `Buf`, the producer `Hms`, the per-destination
//!   cursors `Lms` with reference counts;
//! - [`proto`]: the sans-IO protocol engine (simple and push-pull broadcast, selective
//!   go-back-16 repair): frames and time in, frames, timers and events out;
//! - [`link`]: the one trait every medium implements, and the simulated switch;
//! - [`memory`]: the paper's memory accounting, computed from the real structures;
//! - [`cluster`]: a whole group on the simulated switch, with a delivery checker;
//! - [`smp`]: several ranks per host, one network member per host and a ring in shared memory
//!   (a medium like the links, so it lives beside them: [`link::smp`]).
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod barrier;
pub mod cluster;
pub mod detect;
pub mod driver;
pub mod eqa;
pub mod group;
pub mod link;
pub mod member;
pub mod membership;
pub mod memory;
pub mod proto;
pub mod simgroup;
pub use link::smp;
pub mod wire;
