//! What the test suites (`ethbcast-suite`) and the benchmarks (`ethbcast-bench`) share: members
//! of a group as threads in the hosts of a test-bed ([`group`]), and a report printed as JSON
//! or as an aligned table, with the exit code that says whether it passed ([`report`],
//! [`table`]).

pub mod group;
pub mod report;
pub mod table;
