//! `ethbcast-bench`: how we (and users) judge the transport.
//!
//! Subcommands: `demo` (the one command: everything below on an 8-host test-bed, with plots),
//! `latency`, `barrier` and `throughput` (the EQA paper's runs on a test-bed of network
//! namespaces), `sim` (the protocol on the simulated switch, virtual time) and `memory` (the
//! paper's memory table from the real structures). Human-readable tables by default, `--json`
//! for machines. Each subcommand's options and run live in its module of
//! `ethbcast_tools::bench`. The test suites (`selftest`, `faults`, `attack`) are
//! `ethbcast-suite`'s.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use ethbcast_tools::bench::{
    barrier, demo, distribute, latency, memory, mpi, scale, sim, throughput,
};

/// The simulator (`sim`, `scale`) holds every member of a group of thousands in this process,
/// each allocating and freeing its messages' buffers: mimalloc keeps that cheap where glibc's
/// malloc took a fifth of the run's user time (docs/benchmarks.md, "Thousands of members with
/// burst loss").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "ethbcast-bench",
    version,
    about = "Benchmarks and checks for ethbcast"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    #[command(flatten)]
    log: ethbcast_tools::logging::Verbosity,
}

#[derive(Subcommand)]
enum Cmd {
    Sim(sim::Args),
    Latency(latency::Args),
    Floor(latency::FloorArgs),
    Barrier(barrier::Args),
    Mpi(mpi::Args),
    Throughput(throughput::Args),
    Demo(demo::Args),
    Distribute(distribute::Args),
    Scale(scale::Args),
    Memory(memory::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    cli.log.init();
    match cli.cmd {
        Cmd::Sim(a) => a.run(),
        Cmd::Latency(a) => a.run(),
        Cmd::Floor(a) => a.run(),
        Cmd::Barrier(a) => a.run(),
        Cmd::Mpi(a) => a.run(),
        Cmd::Throughput(a) => a.run(),
        Cmd::Demo(a) => a.run(),
        Cmd::Distribute(a) => a.run(),
        Cmd::Scale(a) => a.run(),
        Cmd::Memory(a) => a.run(),
    }
}
