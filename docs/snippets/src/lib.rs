//! The Rust snippets of README.md and docs/*.md as doctests, so that what a reader copies
//! compiles: `build.rs` collects them into `OUT_DIR/snippets.md`, which is this crate's
//! documentation under `cargo test` (rustdoc's `cfg(doctest)`).
//!
//! A crate of its own, which nothing depends on: editing the docs re-runs its build script and
//! rebuilds it alone, not the library and everything built on it.
#![cfg_attr(doctest, doc = include_str!(concat!(env!("OUT_DIR"), "/snippets.md")))]
