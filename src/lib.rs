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
//! - [`memory`]: the paper's memory accounting, computed from the real structures;
//! - [`cluster`], [`simgroup`]: whole groups on the simulated switch, with a delivery checker.
#![deny(unsafe_code)]
#![warn(missing_docs)]

/// The broadcast engine (simple and push-pull broadcast, selective go-back-16 repair).
pub use ethbcast_proto::engine as proto;
pub use ethbcast_proto::{barrier, detect, eqa, machine, member, membership, wire};

pub mod cluster;
pub mod driver;
pub mod group;
pub mod keyfile;
pub mod link;
pub mod memory;
pub mod simgroup;
pub use link::smp;
