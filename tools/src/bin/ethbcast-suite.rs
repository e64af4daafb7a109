//! `ethbcast-suite`: the test suites that check the transport on a test-bed of network
//! namespaces: `selftest` (one group, every message checked byte for byte), `faults` (killed
//! members, filtered broadcasts, forged frames, with the detection time against its bound) and
//! `attack` (a hostile host without the key against a keyed group and a keyed transfer). Each
//! exits 0 when every check passed; `--json` for machines. Each subcommand's options and run
//! live in its module of `ethbcast_tools::suite`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use ethbcast_tools::suite::{attack, faults, selftest};

#[derive(Parser)]
#[command(
    name = "ethbcast-suite",
    version,
    about = "Test suites of ethbcast on a test-bed"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    #[command(flatten)]
    log: ethbcast_tools::logging::Verbosity,
}

#[derive(Subcommand)]
enum Cmd {
    Selftest(selftest::Args),
    Faults(faults::Args),
    Attack(attack::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    cli.log.init();
    match cli.cmd {
        Cmd::Selftest(a) => a.run(),
        Cmd::Faults(a) => a.run(),
        Cmd::Attack(a) => a.run(),
    }
}
