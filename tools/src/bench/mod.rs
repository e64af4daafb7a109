//! The subcommands of `ethbcast-bench`, one module each, and what they share.

pub mod distribute;
pub mod memory;
pub mod selftest;
pub mod sim;
pub mod table;
