//! The subcommands of `ethbcast-bench`, one module each, and what they share.

pub mod barrier;
pub mod bed;
pub mod cli;
pub mod cpu;
pub mod demo;
pub mod distribute;
pub mod floor;
pub mod goodput;
pub mod latency;
pub mod memory;
pub mod mpi;
pub mod plot;
pub mod probe;
pub mod reference;
pub mod scale;
pub mod sim;
pub mod simlat;
pub mod throughput;
