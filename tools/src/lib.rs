//! ethbcast tools: what the `ethbcast` CLI and `ethbcast-bench` share (the test-bed is its own
//! crate, `ethbcast-testbed`, re-exported here).
#![deny(unsafe_code)]
#![warn(unreachable_pub)]

pub use ethbcast_testbed as testbed;
pub use ethbcast_testbed::{mpi, netns};

/// The unit tests count what the code under test allocates (`ethbcast_sys::alloc`).
#[cfg(test)]
#[global_allocator]
static ALLOC: ethbcast_sys::alloc::CountingAlloc = ethbcast_sys::alloc::CountingAlloc::new();

pub mod bench;
pub mod distribute;
pub mod doctor;
pub mod harness;
pub mod hostile;
pub mod logging;
pub mod packaging;
pub mod suite;
pub mod transfer;
pub mod tree;
