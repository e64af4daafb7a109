//! `latency --reference PROGRAM`: an independent floor, measured by a program this project did
//! not write, on the same test-bed, in the same blocks as the floor and the protocol rows.
//!
//! The bench's own floor runs on the same link code as the protocol, so a cost they share (a
//! wait that arms a timer, a ring walk) hides in both and the ratio over the floor does not
//! show it. A reference fan-out written against the bare system calls does: one plain packet
//! socket per host, a blocking `recv`, the root yielding while it waits for the receivers.
//!
//! The contract of the program (that of `rawfanout.c`): `PROGRAM NODES ITERS block PAYLOAD`,
//! with `NETNS_FORMAT` naming host `i`'s namespace (`{prefix}-h%d`), the interface `eth0` in
//! each; it prints one line with `mean80_us=`, `median_us=` and `p99_us=` (microseconds, from
//! the root's send until the last of NODES-1 receivers has the frame). It sends one frame per
//! iteration, so it is run only for message sizes that fit one frame.

use std::path::Path;
use std::process::Command;

use super::bed::Summary;
use crate::testbed::Testbed;

/// The largest message the reference measures: what one 1500-byte frame carries.
pub const MAX_SIZE: usize = 1500;

/// The name reference rows carry in place of an algorithm.
pub const REFERENCE: &str = "reference";

/// How the reference rows were measured.
pub const METHOD: &str = "an independent raw fan-out (e.g. rawfanout.c) run by the bench in \
every block on the same hosts: root's send until the LAST receiver has the frame; mean80 and \
median are the means over the blocks, p99 the largest block's; it reports no maximum";

/// One block of the reference for group size `k` and `size`-byte messages, `iters` iterations.
pub fn measure(
    bed: &Testbed,
    program: &Path,
    k: usize,
    size: usize,
    iters: usize,
) -> Result<Summary, String> {
    let out = Command::new(program)
        .args([
            k.to_string(),
            iters.to_string(),
            "block".into(),
            size.to_string(),
        ])
        .env("NETNS_FORMAT", format!("{}-h%d", bed.prefix()))
        .output()
        .map_err(|e| format!("reference {}: {e}", program.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "reference {} {k} {iters} block {size}: {}: {}",
            program.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    parse(&text).ok_or_else(|| {
        format!(
            "reference {}: no mean80_us=, median_us= and p99_us= in its output: {}",
            program.display(),
            text.trim()
        )
    })
}

/// The statistics of the program's output line (no maximum: NaN).
fn parse(text: &str) -> Option<Summary> {
    let field = |key: &str| -> Option<f64> {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))?
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite() && *v >= 0.0)
    };
    Some(Summary {
        mean80_us: field("mean80_us")?,
        median_us: field("median_us")?,
        p99_us: field("p99_us")?,
        max_us: f64::NAN,
    })
}

/// The blocks' statistics as one row: mean80 and median averaged over the blocks (weighted by
/// their iterations), the largest p99, no maximum.
pub fn combine(blocks: &[(Summary, usize)]) -> Option<Summary> {
    let total: usize = blocks.iter().map(|b| b.1).sum();
    if total == 0 {
        return None;
    }
    let mean = |f: fn(&Summary) -> f64| {
        blocks.iter().map(|(s, n)| f(s) * *n as f64).sum::<f64>() / total as f64
    };
    Some(Summary {
        mean80_us: mean(|s| s.mean80_us),
        median_us: mean(|s| s.median_us),
        p99_us: blocks.iter().map(|b| b.0.p99_us).fold(0.0, f64::max),
        max_us: f64::NAN,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_programs_line_is_read_and_a_line_without_it_is_refused() {
        let s = parse("nodes=8 mode=block payload=46 mean80_us=41.5 median_us=40.9 p99_us=88.0\n")
            .unwrap();
        assert_eq!((s.mean80_us, s.median_us, s.p99_us), (41.5, 40.9, 88.0));
        assert!(s.max_us.is_nan());
        assert!(parse("nodes=8 mean80_us=41.5 median_us=40.9").is_none());
        assert!(parse("mean80_us=x median_us=1 p99_us=2").is_none());
        assert!(parse("mean80_us=-1 median_us=1 p99_us=2").is_none());
        assert!(parse("").is_none());
    }

    #[test]
    fn blocks_combine_weighted_by_their_iterations() {
        let s = |m: f64, p: f64| Summary {
            mean80_us: m,
            median_us: m,
            p99_us: p,
            max_us: f64::NAN,
        };
        let c = combine(&[(s(10.0, 50.0), 100), (s(40.0, 20.0), 50)]).unwrap();
        assert_eq!(c.mean80_us, 20.0);
        assert_eq!(c.median_us, 20.0);
        assert_eq!(c.p99_us, 50.0);
        assert!(combine(&[]).is_none());
    }
}
