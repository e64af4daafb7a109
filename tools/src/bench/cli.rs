//! What the subcommands of `ethbcast-bench` share on the command line: the test-bed and link
//! options, rate parsing, and a report's plots (the report itself is printed by
//! [`crate::harness::report`]).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use ethbcast::{Backend, WaitMode};
use serde::Serialize;

use super::bed::BedOptions;
use crate::harness::report::{code, print};
use crate::testbed::Rate;

/// Test-bed and link options shared by the test-bed runs.
#[derive(clap::Args)]
pub struct LinkArgs {
    /// Link backend: ring, socket, pnet or xdp.
    #[arg(long, default_value = "ring")]
    backend: Backend,
    /// Wait mode: block, spin or adaptive.
    #[arg(long, default_value = "block")]
    wait: WaitMode,
    /// Link rate limit (tbf), e.g. 100mbit or 1gbit; none (the default) for unshaped veths.
    #[arg(long, value_parser = parse_limit)]
    rate: Option<Limit>,
    /// Random frame loss at the switch, percent.
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// GRO on every veth of the test-bed (veths then receive through NAPI, as with native XDP).
    #[arg(long)]
    gro: bool,
    /// MTU of the test-bed's interfaces (e.g. 9000 for jumbo frames; default 1500).
    #[arg(long)]
    mtu: Option<u32>,
    /// Test-bed name prefix (a-z, 0-9, -; at most 10 characters).
    #[arg(long)]
    prefix: Option<String>,
}

impl LinkArgs {
    /// The test-bed of `hosts` hosts these options describe (`default_prefix` without
    /// `--prefix`).
    pub fn bed(&self, hosts: usize, default_prefix: &str) -> BedOptions {
        let mut b = BedOptions::new(hosts, self.prefix.as_deref().unwrap_or(default_prefix));
        b.backend = self.backend;
        b.wait = self.wait;
        b.rate = self.rate.and_then(|l| l.0);
        b.loss = self.loss;
        b.gro = self.gro;
        b.mtu = self.mtu;
        b
    }
}

/// The test-bed and the groups measured on it, shared by the latency runs (`latency`, `floor`,
/// `barrier`).
#[derive(clap::Args)]
pub struct GroupArgs {
    /// Hosts on the test-bed.
    #[arg(long, default_value_t = 8)]
    pub testbed: usize,
    /// Group sizes (the first k hosts).
    #[arg(long, default_value = "2,4,8", value_delimiter = ',')]
    pub nodes: Vec<usize>,
}

/// A port rate, or none (`none`, `unlimited`): unshaped veths.
#[derive(Debug, Clone, Copy)]
pub struct Limit(pub Option<Rate>);

/// Parses a [`Limit`].
pub fn parse_limit(s: &str) -> Result<Limit, String> {
    match s.trim() {
        "none" | "unlimited" => Ok(Limit(None)),
        r => r
            .parse::<Rate>()
            .map(|r| Limit(Some(r)))
            .map_err(|e| format!("{e}; or none for no limit")),
    }
}

/// A simulated link rate: a test-bed rate (`100mbit`, `1gbit`, ...) or `0`/`inf` for an
/// infinitely fast link.
pub fn parse_rate(s: &str) -> Result<Option<u64>, String> {
    match s.trim() {
        "0" | "inf" => Ok(None),
        r => r
            .parse::<Rate>()
            .map(|r| Some(r.bits_per_sec()))
            .map_err(|e| format!("bad rate: {e}; or 0 for an infinitely fast link")),
    }
}

/// Writes plots into `out`, if given, and says which files; false if that failed.
pub fn plots(out: Option<&PathBuf>, f: impl FnOnce(&Path) -> Result<Vec<PathBuf>, String>) -> bool {
    let Some(dir) = out else { return true };
    match f(dir) {
        Ok(files) => {
            for p in files {
                eprintln!("wrote {}", p.display());
            }
            true
        }
        Err(e) => {
            eprintln!("error: plots: {e}");
            false
        }
    }
}

/// Prints the report `r` ([`print()`]), writes its plots into `out`, if given ([`plots`]), and
/// fails if that did.
pub fn print_and_plot<T: Serialize>(
    json: bool,
    r: &T,
    text: impl FnOnce(&T) -> String,
    out: Option<&PathBuf>,
    plot: impl FnOnce(&T, &Path) -> Result<Vec<PathBuf>, String>,
) -> ExitCode {
    print(json, r, text);
    code(plots(out, |d| plot(r, d)))
}
