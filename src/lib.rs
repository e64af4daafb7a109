//! ethbcast: reliable broadcast over raw Ethernet that uses the switch's hardware broadcast.
//!
//! One broadcast frame, sent once by the root, reaches every member of the segment; a shared
//! retransmission buffer and point-to-point repair make it reliable. The design is the
//! Enhanced Queue Architecture of Wong & Wang, *Efficient Reliable Broadcast for Commodity
//! Clusters*: one buffer for all destinations, a lightweight cursor per destination.
//!
//! The protocol itself is the sans-IO crate `ethbcast-proto` (frames and time in, frames and
//! events out); this crate runs it on real media:
//! - [`link`]: the one trait every medium implements (AF_PACKET rings, plain socket, AF_XDP,
//!   pnet, the simulated switch) and the shared-memory host ring ([`smp`]);
//! - [`driver`]: the one loop that moves frames between a machine and a link with a clock;
//! - [`group`]: the blocking API a program calls (`bcast`, `barrier`, streaming);
//! - with the `sim` feature, `memory` (the paper's memory accounting, computed from the real
//!   structures) and `cluster`, `simgroup` (whole groups on the simulated switch, with a
//!   delivery checker).
//!
//! The core's modules (`wire`, `member`, `proto`, ...) are re-exported under this crate's name
//! with the `internals` feature, for tools and tests; programs depend on `ethbcast-proto`
//! directly if they drive the sans-IO machines themselves.
#![deny(unsafe_code)]
#![warn(missing_docs)]
#![warn(unreachable_pub)]

pub mod driver;
pub mod group;
pub mod keyfile;
pub mod link;
pub use link::smp;
pub mod transfer;

#[cfg(feature = "sim")]
pub mod cluster;
#[cfg(feature = "sim")]
pub mod memory;
#[cfg(feature = "sim")]
pub mod simgroup;

pub use ethbcast_proto::eqa::Rank;
/// A group key: wiped from memory when dropped, never shown by `Debug`.
pub use ethbcast_proto::secret::Key;
pub use ethbcast_proto::wire::ethernet::MacAddr;
/// What a program that broadcasts needs, at the crate root.
pub use group::{Group, GroupError, GroupOptions, Membership};
pub use link::{Backend, WaitMode};

// The core's modules: public with the `internals` feature, crate-private otherwise (the links,
// the driver and the group use them under these names).
#[cfg(feature = "internals")]
pub use ethbcast_proto::engine as proto;
#[cfg(not(feature = "internals"))]
use ethbcast_proto::engine as proto;
#[cfg(feature = "internals")]
pub use ethbcast_proto::{barrier, detect, eqa, machine, member, membership, wire};
#[cfg(not(feature = "internals"))]
use ethbcast_proto::{detect, eqa, member, membership, wire};
