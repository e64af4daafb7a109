//! The test suites of `ethbcast-suite`, one module each: `selftest` (one group on the test-bed,
//! every message checked), `faults` (failures on real hosts: kills, filtered broadcasts,
//! forged frames) and `attack` (a hostile host against the members, with and without a key).

pub mod attack;
pub mod faults;
pub mod selftest;
