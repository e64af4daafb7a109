//! ethbcast tools: the network-namespace test-bed and what the binaries share.
#![deny(unsafe_code)]

pub mod bench;
pub mod distribute;
pub mod hostile;
pub mod mpi;
pub mod netns;
pub mod packaging;
pub mod testbed;
