//! `ethbcast-bench`: how we (and users) judge the transport.
//!
//! Subcommands: `sim` (the protocol on the simulated switch, virtual time) and `memory` (the
//! EQA paper's memory table from the real structures). Human-readable tables by default,
//! `--json` for machines.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use ethbcast::link::{Backend, WaitMode};
use ethbcast::memory::Profile;
use ethbcast::proto::Algo;
use ethbcast_tools::bench::{distribute, memory, selftest, sim};
use ethbcast_tools::testbed::Rate;

#[derive(Parser)]
#[command(
    name = "ethbcast-bench",
    version,
    about = "Benchmarks and checks for ethbcast"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the protocol on the simulated switch and check every delivery.
    ///
    /// Example: ethbcast-bench sim --nodes 16 --messages 20000 --loss 5 --burst-loss 1 --dup 1
    /// --reorder 1 --corrupt 0.1 --json
    Sim {
        /// Members of the group.
        #[arg(long, default_value_t = 8)]
        nodes: u16,
        /// simple, pushpull or both (comma-separated).
        #[arg(long, default_value = "simple,pushpull", value_delimiter = ',')]
        algo: Vec<Algo>,
        /// Messages in all, from several roots in turn.
        #[arg(long, default_value_t = 1000)]
        messages: usize,
        /// Message sizes in bytes, drawn at random.
        #[arg(long, default_value = "8,256,4096,65536", value_delimiter = ',')]
        sizes: Vec<usize>,
        /// Roots (comma-separated ranks); default: up to four members take turns.
        #[arg(long, value_delimiter = ',')]
        roots: Option<Vec<u16>>,
        /// Independent frame loss per port, percent.
        #[arg(long, default_value_t = 0.0)]
        loss: f64,
        /// Probability of starting a loss burst, percent.
        #[arg(long, default_value_t = 0.0)]
        burst_loss: f64,
        /// Duplication, percent.
        #[arg(long, default_value_t = 0.0)]
        dup: f64,
        /// Reordering, percent.
        #[arg(long, default_value_t = 0.0)]
        reorder: f64,
        /// Corruption (bit flips), percent.
        #[arg(long, default_value_t = 0.0)]
        corrupt: f64,
        /// Seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Link rate: 100mbit, 1gbit or 0 (infinitely fast).
        #[arg(long, default_value = "1gbit")]
        rate: String,
        /// Retransmission buffer slots (= receive window in frames).
        #[arg(long)]
        window: Option<usize>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Reliable broadcast between real hosts: builds a test-bed of network namespaces, runs a
    /// mixed schedule from several roots with both algorithms, checks every byte, tears down.
    ///
    /// Example: ethbcast-bench selftest --testbed 8 --loss 5 --json
    Selftest {
        /// Hosts on the test-bed.
        #[arg(long, default_value_t = 4)]
        testbed: usize,
        /// Random frame loss at the switch, percent.
        #[arg(long, default_value_t = 0.0)]
        loss: f64,
        /// Link rate limit (tbf), e.g. 100mbit or 1gbit.
        #[arg(long)]
        rate: Option<Rate>,
        /// Messages in the schedule.
        #[arg(long, default_value_t = 40)]
        messages: usize,
        /// Message sizes, drawn at random.
        #[arg(
            long,
            default_value = "1,80,860,1460,4096,65536,1048576",
            value_delimiter = ','
        )]
        sizes: Vec<usize>,
        /// Link backend: ring, socket or pnet.
        #[arg(long, default_value = "ring")]
        backend: Backend,
        /// Wait mode: spin, block or adaptive.
        #[arg(long, default_value = "block")]
        wait: WaitMode,
        /// Seed of the schedule.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Test-bed name prefix.
        #[arg(long, default_value = "ebst")]
        prefix: String,
        /// Print the verdict as JSON.
        #[arg(long)]
        json: bool,
    },
    /// File distribution on a test-bed: ethbcast vs UDPCast vs an unreliable raw-broadcast
    /// blaster (the medium's limit). Needs root, nftables and (for UDPCast) udpcast.
    ///
    /// Example: ethbcast-bench distribute --receivers 8 --mib 256 --rate 1gbit --loss 0,1
    Distribute {
        /// Receivers.
        #[arg(long, default_value_t = 8)]
        receivers: usize,
        /// File size, MiB.
        #[arg(long, default_value_t = 256)]
        mib: usize,
        /// Port rate (tbf).
        #[arg(long, default_value = "1gbit")]
        rate: Rate,
        /// Loss rates at the switch, percent.
        #[arg(long, default_value = "0,1", value_delimiter = ',')]
        loss: Vec<f64>,
        /// Test-bed prefix.
        #[arg(long, default_value = "ebdb")]
        prefix: String,
        /// Skip UDPCast.
        #[arg(long)]
        no_udpcast: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// The EQA paper's memory table, measured from the allocated structures.
    Memory {
        /// paper or default.
        #[arg(long, default_value = "paper")]
        profile: Profile,
        /// Group sizes.
        #[arg(long, default_value = "2,4,8,16,32,64,128", value_delimiter = ',')]
        nodes: Vec<usize>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

fn parse_rate(s: &str) -> Result<Option<u64>, String> {
    let s = s.trim().to_ascii_lowercase();
    if s == "0" || s == "inf" {
        return Ok(None);
    }
    let (num, mult) = if let Some(n) = s.strip_suffix("gbit") {
        (n, 1e9)
    } else if let Some(n) = s.strip_suffix("mbit") {
        (n, 1e6)
    } else if let Some(n) = s.strip_suffix("kbit") {
        (n, 1e3)
    } else {
        (s.as_str(), 1.0)
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("bad rate {s:?} (e.g. 100mbit, 1gbit)"))?;
    if v <= 0.0 {
        return Err(format!("rate must be positive: {s:?}"));
    }
    Ok(Some((v * mult) as u64))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Sim {
            nodes,
            algo,
            messages,
            sizes,
            roots,
            loss,
            burst_loss,
            dup,
            reorder,
            corrupt,
            seed,
            rate,
            window,
            json,
        } => {
            let rate_bps = match parse_rate(&rate) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            let o = sim::SimOptions {
                nodes,
                algos: algo,
                messages,
                sizes,
                roots,
                loss,
                burst_loss,
                dup,
                reorder,
                corrupt,
                seed,
                rate_bps,
                window,
            };
            match sim::run_sim(&o) {
                Ok(r) => {
                    if json {
                        println!(
                            "{}",
                            serde_json::to_string_pretty(&r).expect("serialisable")
                        );
                    } else {
                        println!("{}", sim::render(&r));
                    }
                    let ok = r.completed
                        && r.corrupt == 0
                        && r.duplicated == 0
                        && r.out_of_order == 0
                        && r.missing == 0;
                    if ok {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::FAILURE
                    }
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Cmd::Selftest {
            testbed,
            loss,
            rate,
            messages,
            sizes,
            backend,
            wait,
            seed,
            prefix,
            json,
        } => {
            let mut o = selftest::SelftestOptions::new(testbed);
            o.loss = loss;
            o.rate = rate;
            o.messages = messages;
            o.sizes = sizes;
            o.backend = backend;
            o.wait = wait;
            o.seed = seed;
            o.prefix = prefix;
            match selftest::run(&o) {
                Ok(v) => {
                    if json {
                        println!(
                            "{}",
                            serde_json::to_string_pretty(&v).expect("serialisable")
                        );
                    } else {
                        println!("{}", selftest::render(&v));
                    }
                    if v.passed {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::FAILURE
                    }
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Cmd::Distribute {
            receivers,
            mib,
            rate,
            loss,
            prefix,
            no_udpcast,
            json,
        } => {
            let o = distribute::Opts {
                receivers,
                mib,
                rate,
                losses: loss,
                prefix,
                no_udpcast,
            };
            match distribute::run(&o) {
                Ok(rows) => {
                    if json {
                        println!("{}", serde_json::to_string_pretty(&rows).expect("json"));
                    } else {
                        println!(
                            "{receivers} receivers, {mib} MiB, {rate} ports\n{:<12} {:>6} {:>14} {:>9}  note",
                            "tool", "loss%", "goodput Mbit/s", "seconds"
                        );
                        for r in rows {
                            println!(
                                "{:<12} {:>6} {:>14.1} {:>9.2}  {}",
                                r.tool, r.loss_pct, r.goodput_mbit, r.seconds, r.note
                            );
                        }
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("ethbcast-bench distribute: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Cmd::Memory {
            profile,
            nodes,
            json,
        } => {
            let r = memory::report(profile, &nodes);
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&r).expect("serialisable")
                );
            } else {
                print!("{}", memory::render(&r));
            }
            ExitCode::SUCCESS
        }
    }
}
