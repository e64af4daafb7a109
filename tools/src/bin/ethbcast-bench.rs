//! `ethbcast-bench`: how we (and users) judge the transport.
//!
//! Subcommands: `demo` (the one command: everything below on an 8-host test-bed, with plots),
//! `latency`, `barrier` and `throughput` (the EQA paper's runs on a test-bed of network
//! namespaces), `selftest`, `sim` (the protocol on the simulated switch, virtual time) and
//! `memory` (the paper's memory table from the real structures). Human-readable tables by
//! default, `--json` for machines.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use ethbcast::group::Algorithm;
use ethbcast::link::{Backend, WaitMode};
use ethbcast::memory::Profile;
use ethbcast::proto::Algo;
use ethbcast_tools::bench::bed::BedOptions;
use ethbcast_tools::bench::{
    barrier, demo, distribute, latency, memory, mpi, plot, selftest, sim, throughput,
};
use ethbcast_tools::mpi::MpiImpl;
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

/// Which layer `sim` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum SimApi {
    /// Streams of broadcasts from several roots.
    Stream,
    /// The group API, call by call.
    Group,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the protocol on the simulated switch and check every delivery.
    ///
    /// Example: ethbcast-bench sim --nodes 16 --messages 20000 --loss 5 --burst-loss 1 --dup 1
    /// --reorder 1 --corrupt 0.1 --json
    ///
    /// With `--api group`, the group API call by call (bcast from rotating roots with every
    /// algorithm, barriers, killed and filtered members, failure detection):
    /// ethbcast-bench sim --api group --nodes 64 --messages 5000 --barrier-every 20 --kill 2
    /// --filter 1 --loss 2 --burst-loss 1 --dup 1 --reorder 1 --corrupt 0.1 --seed 7 --json
    Sim {
        /// stream: roots broadcast streams of messages (the engine under every member);
        /// group: the group API, call by call.
        #[arg(long, default_value = "stream")]
        api: SimApi,
        /// Members of the group.
        #[arg(long, default_value_t = 8)]
        nodes: u16,
        /// Algorithms (comma-separated): simple, pushpull, and with --api group also tree.
        /// Default: simple,pushpull (stream); pushpull,simple,tree (group).
        #[arg(long, value_delimiter = ',')]
        algo: Option<Vec<Algorithm>>,
        /// With --api group: a barrier after every this many broadcasts (0: none).
        #[arg(long, default_value_t = 10)]
        barrier_every: usize,
        /// With --api group: members killed a third of the way through.
        #[arg(long, default_value_t = 0)]
        kill: usize,
        /// With --api group: members behind a filter that drops broadcast frames.
        #[arg(long, default_value_t = 0)]
        filter: usize,
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
        /// Fan-out of the acknowledgement tree; 0: every receiver acknowledges to the root.
        /// Default: a tree of fan-out 4 from 32 members on.
        #[arg(long)]
        ack_tree: Option<u16>,
        /// Peer repair (a receiver asks a fellow receiver before the root): on or off.
        /// Default: on from 32 members.
        #[arg(long, value_parser = parse_on_off)]
        peer_repair: Option<bool>,
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
        /// Link backend: ring, socket, pnet or xdp.
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
    /// Broadcast latency on real hosts (the EQA paper, section 4): PPBCAST, SBCAST and the
    /// binomial tree, groups of the first k hosts of one test-bed, root = rank 0.
    ///
    /// Latency of one broadcast = from the root's call until the LAST receiver has the whole
    /// message (all members are threads of this process: one clock); iterations are separated
    /// out of band so they never overlap. Reports the mean of the middle 80%, median, p99, max.
    ///
    /// Example: ethbcast-bench latency --testbed 8 --nodes 2,4,8 --iters 500 --out bench-out
    Latency {
        /// Hosts on the test-bed.
        #[arg(long, default_value_t = 8)]
        testbed: usize,
        /// Group sizes (the first k hosts).
        #[arg(long, default_value = "2,4,8", value_delimiter = ',')]
        nodes: Vec<usize>,
        /// Message sizes in bytes.
        #[arg(
            long,
            default_value = "4,8,256,1024,4096,16384,65536",
            value_delimiter = ','
        )]
        sizes: Vec<usize>,
        /// Measured broadcasts per (algorithm, group size, size).
        #[arg(long, default_value_t = 500)]
        iters: usize,
        /// Unmeasured broadcasts before them.
        #[arg(long, default_value_t = 50)]
        warmup: usize,
        /// Algorithms: ppbcast, sbcast, tree.
        #[arg(long, default_value = "ppbcast,sbcast,tree", value_delimiter = ',')]
        algos: Vec<Algorithm>,
        /// Skip the raw floor (measured by default before each group size, for the ratios).
        #[arg(long)]
        no_floor: bool,
        /// Split the iterations into this many blocks, each floor then protocol, so that a
        /// busy phase of a shared machine hits both alike.
        #[arg(long, default_value_t = 4)]
        blocks: usize,
        /// Also say where the time goes: root call, root's first send, its flush, the last
        /// receiver's first frame and return (medians).
        #[arg(long)]
        breakdown: bool,
        #[command(flatten)]
        link: LinkArgs,
        /// Write the rows as CSV to this file.
        #[arg(long)]
        csv: Option<PathBuf>,
        /// Write plots (PNG and SVG) into this directory.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Print one JSON object (no progress bar).
        #[arg(long)]
        json: bool,
    },
    /// The raw floor of broadcast latency: raw broadcast frames, no protocol, measured exactly
    /// as `latency` measures (same threads, clock, link, wait modes, sizes, group sizes).
    ///
    /// Latency of one iteration = from the root's send until the LAST receiver has every frame.
    ///
    /// Example: ethbcast-bench floor --testbed 8 --nodes 2,8 --sizes 8,256 --iters 2000
    Floor {
        /// Hosts on the test-bed.
        #[arg(long, default_value_t = 8)]
        testbed: usize,
        /// Group sizes (the first k hosts).
        #[arg(long, default_value = "2,4,8", value_delimiter = ',')]
        nodes: Vec<usize>,
        /// Message sizes in bytes.
        #[arg(
            long,
            default_value = "4,8,256,1024,4096,16384,65536",
            value_delimiter = ','
        )]
        sizes: Vec<usize>,
        /// Measured iterations per (group size, size).
        #[arg(long, default_value_t = 500)]
        iters: usize,
        /// Unmeasured iterations before them.
        #[arg(long, default_value_t = 50)]
        warmup: usize,
        /// Also say where the time goes (see `latency --breakdown`).
        #[arg(long)]
        breakdown: bool,
        #[command(flatten)]
        link: LinkArgs,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Barrier latency on real hosts: broadcast barrier vs dissemination barrier.
    ///
    /// Latency of one barrier = from the last member entering to the last member leaving.
    ///
    /// Example: ethbcast-bench barrier --testbed 8 --nodes 2,4,8 --iters 500
    Barrier {
        /// Hosts on the test-bed.
        #[arg(long, default_value_t = 8)]
        testbed: usize,
        /// Group sizes (the first k hosts).
        #[arg(long, default_value = "2,4,8", value_delimiter = ',')]
        nodes: Vec<usize>,
        /// Measured barriers per kind and group size.
        #[arg(long, default_value_t = 500)]
        iters: usize,
        /// Unmeasured barriers before them.
        #[arg(long, default_value_t = 50)]
        warmup: usize,
        #[command(flatten)]
        link: LinkArgs,
        /// Write the plot (PNG and SVG) into this directory.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Print one JSON object (no progress bar).
        #[arg(long)]
        json: bool,
    },
    /// MPI_Bcast and MPI_Barrier latency of a C MPI program under Open MPI and MPICH, with and
    /// without the ethbcast interposer (LD_PRELOAD), one rank per test-bed host (or K).
    ///
    /// Builds the benchmark with each mpicc and the interposer with capi/mpi/build.sh (run it
    /// from the checkout). Latency of one broadcast = root's call until the LAST rank returned;
    /// of a barrier = last rank entering to last rank leaving; every rank checks every byte.
    ///
    /// Example: ethbcast-bench mpi --testbed 8 --impl openmpi,mpich --json
    Mpi {
        /// Hosts on the test-bed.
        #[arg(long, default_value_t = 8)]
        testbed: usize,
        /// MPI implementations: openmpi, mpich.
        #[arg(long = "impl", default_value = "openmpi,mpich", value_delimiter = ',')]
        impls: Vec<MpiImpl>,
        /// Ranks per host.
        #[arg(long, default_value_t = 1)]
        ranks_per_host: usize,
        /// Broadcast sizes in bytes.
        #[arg(
            long,
            default_value = "8,64,256,1024,4096,16384,65536",
            value_delimiter = ','
        )]
        sizes: Vec<usize>,
        /// Measured iterations per size and of the barrier.
        #[arg(long, default_value_t = 500)]
        iters: usize,
        /// Unmeasured iterations before them.
        #[arg(long, default_value_t = 50)]
        warmup: usize,
        /// The interposer's wait mode: adaptive, block, spin, doze.
        #[arg(long, default_value = "adaptive")]
        wait: WaitMode,
        /// Test-bed name prefix.
        #[arg(long, default_value = "ebmpi")]
        prefix: String,
        /// Seconds after which a job that has not finished is killed (its rows so far count).
        #[arg(long, default_value_t = 240)]
        job_timeout: u64,
        /// One more interposer run with this environment added, as KEY=VALUE[,KEY=VALUE...]
        /// (repeatable), e.g. --also ETHBCAST_HOST_SPIN_US=forever.
        #[arg(long, value_parser = parse_env_list)]
        also: Vec<EnvList>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Goodput of one large broadcast from rank 0 to N receivers on the test-bed, and the
    /// repair/acknowledgement overhead in frames.
    ///
    /// Example: ethbcast-bench throughput --testbed 8 --receivers 7 --size 64MiB --rate 1gbit
    Throughput {
        /// Hosts on the test-bed.
        #[arg(long, default_value_t = 8)]
        testbed: usize,
        /// Receivers (default: all other hosts).
        #[arg(long)]
        receivers: Option<usize>,
        /// Bytes in all (B, KiB, MiB, GiB, KB, MB, GB).
        #[arg(long, default_value = "64MiB", value_parser = throughput::parse_size)]
        size: usize,
        /// Bytes per bcast.
        #[arg(long, default_value = "1MiB", value_parser = throughput::parse_size)]
        chunk: usize,
        /// ppbcast or sbcast (tree as a baseline).
        #[arg(long, default_value = "ppbcast")]
        algo: Algorithm,
        #[command(flatten)]
        link: LinkArgs,
        /// Write the plot (PNG and SVG) into this directory.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// The one command: builds an 8-host test-bed (as root), runs the latency comparison of
    /// PPBCAST, SBCAST and the binomial tree at 2, 4 and 8 nodes, the barrier comparison, a
    /// short throughput run and the memory table, prints the tables, writes plots, tears down.
    /// Without the privilege it says so and runs the comparison on the simulator instead.
    ///
    /// Example: sudo ethbcast-bench demo --out bench-out
    Demo {
        /// Directory for plots, demo.json and latency.csv.
        #[arg(long, default_value = "bench-out")]
        out: PathBuf,
        /// Tiny settings (4 hosts, 2 sizes, 20 iterations); the full demo uses the paper's 500 after 50 warm-up.
        #[arg(long)]
        quick: bool,
        /// Use the simulator even with the privilege.
        #[arg(long)]
        sim: bool,
        /// Test-bed name prefix.
        #[arg(long, default_value = "ebdemo")]
        prefix: String,
    },
    /// The failure scenarios (receiver killed, root killed, broadcast filtered, forged frames)
    /// on a test-bed of their own, with detection times against the detector's bound.
    ///
    /// Example: ethbcast-bench faults --testbed 8 --json
    Faults {
        /// Members per scenario (at least 3).
        #[arg(long, default_value_t = 8)]
        testbed: usize,
        /// Test-bed name prefix.
        #[arg(long, default_value = "ebflt")]
        prefix: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// The attacks of a host without the key (spoofed liveness, replays from an earlier
    /// session and in-session, forged join, forged barrier epochs, a flood of random and
    /// mutated frames, forged abort/evict/report on a transfer) against a keyed group and a
    /// keyed `ethbcast send/recv` transfer, on a test-bed whose last host is hostile. Exits 1
    /// if any scenario failed.
    ///
    /// Example: ethbcast-bench attack --testbed 6 --json
    Attack {
        /// Hosts per scenario, the hostile one included (at least 4).
        #[arg(long, default_value_t = 6)]
        testbed: usize,
        /// Test-bed name prefix.
        #[arg(long, default_value = "ebatk")]
        prefix: String,
        /// The ethbcast binary for the transfers (default: next to this one).
        #[arg(long)]
        ethbcast: Option<std::path::PathBuf>,
        /// Run only these scenarios (repeat or comma-separate; default: all).
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        /// Print JSON.
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
        /// Port rate (tbf), or none for unshaped veths (then every tool also reports its CPU
        /// seconds per GiB).
        #[arg(long, default_value = "1gbit", value_parser = parse_limit)]
        rate: Limit,
        /// Link backends of ethbcast and the raw blaster, each measured (ring, socket, pnet,
        /// xdp).
        #[arg(long, default_value = "ring", value_delimiter = ',')]
        backend: Vec<Backend>,
        /// Loss rates at the switch, percent.
        #[arg(long, default_value = "0,1", value_delimiter = ',')]
        loss: Vec<f64>,
        /// Test-bed prefix.
        #[arg(long, default_value = "ebdb")]
        prefix: String,
        /// Skip UDPCast.
        #[arg(long)]
        no_udpcast: bool,
        /// Runs of each tool per loss rate, interleaved; the table gives the median run.
        #[arg(long, default_value_t = 3)]
        repeat: usize,
        /// GRO on every veth of the test-bed (NAPI receive, as with native XDP).
        #[arg(long)]
        gro: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// The scale study on the simulator: one root broadcasting to groups of every size
    /// asked, at each link rate and loss: completion time, goodput, control frames into the
    /// root per data frame, repairs per lost frame, root and member memory. Writes
    /// scale.json, scale.csv and two plots into --out.
    ///
    /// Example: ethbcast-bench scale --nodes 16,64,256,1024 --rates 100mbit,1gbit --loss 0,1
    Scale {
        /// Group sizes. (1024 members on 100 Mbit/s links with 1 % loss currently exhaust the
        /// simulator's memory, more than 10 GB: run that point alone, if at all.)
        #[arg(long, default_value = "16,64,256,1024", value_delimiter = ',')]
        nodes: Vec<u16>,
        /// Link rates (100mbit, 1gbit, ...).
        #[arg(long, default_value = "100mbit,1gbit", value_delimiter = ',')]
        rates: Vec<String>,
        /// Independent loss per port, percent.
        #[arg(long, default_value = "0,1", value_delimiter = ',')]
        loss: Vec<f64>,
        /// Messages per run.
        #[arg(long, default_value_t = 200)]
        messages: usize,
        /// Message sizes drawn from.
        #[arg(long, default_value = "8,4096,65536", value_delimiter = ',')]
        sizes: Vec<usize>,
        /// Seed.
        #[arg(long, default_value_t = 3)]
        seed: u64,
        /// Directory for the JSON, CSV and plots.
        #[arg(long, default_value = "bench-out")]
        out: PathBuf,
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
        /// Plot measured M_save(n) against 0.386(1 - 1/n) into this directory.
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

/// Test-bed and link options shared by the test-bed runs.
#[derive(clap::Args)]
struct LinkArgs {
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
    /// Test-bed name prefix (a-z, 0-9, -; at most 10 characters).
    #[arg(long)]
    prefix: Option<String>,
}

impl LinkArgs {
    fn bed(&self, hosts: usize, default_prefix: &str) -> BedOptions {
        let mut b = BedOptions::new(hosts, self.prefix.as_deref().unwrap_or(default_prefix));
        b.backend = self.backend;
        b.wait = self.wait;
        b.rate = self.rate.and_then(|l| l.0);
        b.loss = self.loss;
        b.gro = self.gro;
        b
    }
}

/// A port rate, or none (`none`, `unlimited`): unshaped veths.
#[derive(Debug, Clone, Copy)]
struct Limit(Option<Rate>);

fn parse_limit(s: &str) -> Result<Limit, String> {
    match s.trim() {
        "none" | "unlimited" => Ok(Limit(None)),
        r => r
            .parse::<Rate>()
            .map(|r| Limit(Some(r)))
            .map_err(|e| format!("{e}; or none for no limit")),
    }
}

/// Environment variables given as `KEY=VALUE[,KEY=VALUE...]`.
#[derive(Debug, Clone)]
struct EnvList(Vec<(String, String)>);

fn parse_env_list(s: &str) -> Result<EnvList, String> {
    s.split(',')
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
            _ => Err(format!("{kv:?} is not KEY=VALUE")),
        })
        .collect::<Result<Vec<_>, String>>()
        .map(EnvList)
}

fn print_json<T: serde::Serialize>(v: &T) {
    println!("{}", serde_json::to_string_pretty(v).expect("serialisable"));
}

fn plots(
    out: Option<&PathBuf>,
    f: impl FnOnce(&std::path::Path) -> Result<Vec<PathBuf>, String>,
) -> bool {
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

fn code(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// A simulated link rate: a test-bed rate (`100mbit`, `1gbit`, ...) or `0`/`inf` for an
/// infinitely fast link.
fn parse_rate(s: &str) -> Result<Option<u64>, String> {
    match s.trim() {
        "0" | "inf" => Ok(None),
        r => r
            .parse::<Rate>()
            .map(|r| Some(r.bits_per_sec()))
            .map_err(|e| format!("bad rate: {e}; or 0 for an infinitely fast link")),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Sim {
            api,
            nodes,
            algo,
            barrier_every,
            kill,
            filter,
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
            ack_tree,
            peer_repair,
            json,
        } => {
            let rate_bps = match parse_rate(&rate) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            let stream_algos: Result<Vec<Algo>, String> = algo
                .clone()
                .unwrap_or(vec![Algorithm::Simple, Algorithm::PushPull])
                .into_iter()
                .map(|a| match a {
                    Algorithm::Simple => Ok(Algo::Simple),
                    Algorithm::PushPull => Ok(Algo::PushPull),
                    Algorithm::Tree => Err("--algo tree needs --api group".to_string()),
                })
                .collect();
            let stream_algos = match (api, stream_algos) {
                (SimApi::Stream, Err(e)) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
                (_, a) => a.unwrap_or_default(),
            };
            let o = sim::SimOptions {
                nodes,
                algos: stream_algos,
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
                ack_tree,
                peer_repair,
            };
            if api == SimApi::Group {
                let g = sim::GroupOptions {
                    sim: o,
                    algos: algo.unwrap_or(vec![
                        Algorithm::PushPull,
                        Algorithm::Simple,
                        Algorithm::Tree,
                    ]),
                    barrier_every,
                    kill,
                    filter,
                };
                return match sim::run_group_sim(&g) {
                    Ok(r) => {
                        if json {
                            println!(
                                "{}",
                                serde_json::to_string_pretty(&r).expect("serialisable")
                            );
                        } else {
                            println!("{}", sim::render_group(&r));
                        }
                        if r.perfect {
                            ExitCode::SUCCESS
                        } else {
                            ExitCode::FAILURE
                        }
                    }
                    Err(e) => {
                        eprintln!("error: {e}");
                        ExitCode::from(2)
                    }
                };
            }
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
        Cmd::Faults {
            testbed,
            prefix,
            json,
        } => {
            if let Err(e) = ethbcast_tools::testbed::can_create_netns() {
                eprintln!("error: the fault scenarios need a test-bed: {e}");
                return ExitCode::FAILURE;
            }
            match ethbcast_tools::bench::faults::run_all(&prefix, testbed) {
                Ok(r) => {
                    if json {
                        println!(
                            "{}",
                            serde_json::to_string_pretty(&r).expect("serialisable")
                        );
                    } else {
                        print!("{}", ethbcast_tools::bench::faults::render(&r));
                    }
                    if r.scenarios.iter().all(|s| s.passed) {
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
        Cmd::Attack {
            testbed,
            prefix,
            ethbcast,
            only,
            json,
        } => {
            use ethbcast_tools::bench::attack;
            if let Some(bad) = only
                .iter()
                .find(|o| !attack::SCENARIOS.contains(&o.as_str()))
            {
                eprintln!(
                    "error: no scenario {bad}; the scenarios are {}",
                    attack::SCENARIOS.join(", ")
                );
                return ExitCode::from(2);
            }
            if let Err(e) = ethbcast_tools::testbed::can_create_netns() {
                eprintln!("error: the attacks need a test-bed: {e}");
                return ExitCode::FAILURE;
            }
            let bin = ethbcast.unwrap_or_else(attack::default_ethbcast);
            match attack::run_all(&prefix, testbed, &bin, &only) {
                Ok(r) => {
                    if json {
                        println!(
                            "{}",
                            serde_json::to_string_pretty(&r).expect("serialisable")
                        );
                    } else {
                        print!("{}", attack::render(&r));
                    }
                    if r.scenarios.iter().all(|s| s.passed) {
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
            backend,
            loss,
            prefix,
            no_udpcast,
            repeat,
            gro,
            json,
        } => {
            let o = distribute::Opts {
                gro,
                receivers,
                mib,
                rate: rate.0,
                backends: backend,
                losses: loss,
                prefix,
                no_udpcast,
                repeat,
            };
            match distribute::run(&o) {
                Ok(rows) => {
                    if json {
                        println!("{}", serde_json::to_string_pretty(&rows).expect("json"));
                    } else {
                        print!("{}", distribute::render(&o, &rows));
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("ethbcast-bench distribute: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Cmd::Scale {
            nodes,
            rates,
            loss,
            messages,
            sizes,
            seed,
            out,
            json,
        } => {
            let mut rates_bps = Vec::new();
            for r in &rates {
                match parse_rate(r) {
                    Ok(Some(b)) => rates_bps.push(b),
                    Ok(None) => {
                        eprintln!(
                            "ethbcast-bench: --rates {r}: a scale study needs a finite link rate"
                        );
                        return ExitCode::from(2);
                    }
                    Err(e) => {
                        eprintln!("ethbcast-bench: --rates {r}: {e}");
                        return ExitCode::from(2);
                    }
                }
            }
            let o = ethbcast_tools::bench::scale::ScaleOptions {
                nodes,
                rates: rates_bps,
                losses: loss,
                messages,
                sizes,
                seed,
            };
            match ethbcast_tools::bench::scale::run(&o) {
                Ok(r) => {
                    if json {
                        print_json(&r);
                    } else {
                        print!("{}", ethbcast_tools::bench::scale::render(&r));
                    }
                    match ethbcast_tools::bench::scale::write(&r, &out) {
                        Ok(files) => {
                            for f in files {
                                eprintln!("wrote {}", f.display());
                            }
                        }
                        Err(e) => {
                            eprintln!("ethbcast-bench: {e}");
                            return ExitCode::from(1);
                        }
                    }
                    if r.rows.iter().all(|w| w.exact) {
                        ExitCode::SUCCESS
                    } else {
                        eprintln!("ethbcast-bench: some run did not deliver every message exactly");
                        ExitCode::from(1)
                    }
                }
                Err(e) => {
                    eprintln!("ethbcast-bench: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Cmd::Memory {
            profile,
            nodes,
            json,
            out,
        } => {
            let r = memory::report(profile, &nodes);
            if json {
                print_json(&r);
            } else {
                print!("{}", memory::render(&r));
            }
            code(plots(out.as_ref(), |d| plot::memory(&r, d)))
        }
        Cmd::Latency {
            testbed,
            nodes,
            sizes,
            iters,
            warmup,
            algos,
            no_floor,
            blocks,
            breakdown,
            link,
            csv,
            out,
            json,
        } => {
            let mut bed = link.bed(testbed, "eblat");
            bed.probe = breakdown;
            let o = latency::LatencyOptions {
                bed,
                nodes,
                sizes,
                iters,
                warmup,
                algos,
                progress: !json,
                floor: !no_floor,
                blocks,
            };
            match latency::run(&o) {
                Ok(r) => {
                    if json {
                        print_json(&r);
                    } else {
                        print!("{}", latency::render(&r));
                    }
                    let mut ok = true;
                    if let Some(p) = csv {
                        if let Err(e) = latency::write_csv(&r, &p) {
                            eprintln!("error: write {}: {e}", p.display());
                            ok = false;
                        }
                    }
                    code(ok && plots(out.as_ref(), |d| plot::latency(&r, d)))
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Cmd::Floor {
            testbed,
            nodes,
            sizes,
            iters,
            warmup,
            breakdown,
            link,
            json,
        } => {
            let mut bed = link.bed(testbed, "ebfl");
            bed.probe = breakdown;
            let o = latency::LatencyOptions {
                bed,
                nodes,
                sizes,
                iters,
                warmup,
                algos: Vec::new(),
                progress: false,
                floor: true,
                blocks: 1,
            };
            match latency::run(&o) {
                Ok(mut r) => {
                    r.method = ethbcast_tools::bench::floor::METHOD.into();
                    if json {
                        print_json(&r);
                    } else {
                        print!("{}", latency::render(&r));
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Cmd::Barrier {
            testbed,
            nodes,
            iters,
            warmup,
            link,
            out,
            json,
        } => {
            let o = barrier::BarrierOptions {
                bed: link.bed(testbed, "ebbar"),
                nodes,
                iters,
                warmup,
                progress: !json,
            };
            match barrier::run(&o) {
                Ok(r) => {
                    if json {
                        print_json(&r);
                    } else {
                        print!("{}", barrier::render(&r));
                    }
                    code(plots(out.as_ref(), |d| plot::barrier(&r, d)))
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Cmd::Throughput {
            testbed,
            receivers,
            size,
            chunk,
            algo,
            link,
            out,
            json,
        } => {
            let mut o = throughput::ThroughputOptions::new(testbed);
            o.bed = link.bed(testbed, "ebtp");
            o.receivers = receivers.unwrap_or(testbed.saturating_sub(1));
            o.size = size;
            o.chunk = chunk;
            o.algo = algo;
            match throughput::run(&o) {
                Ok(r) => {
                    if json {
                        print_json(&r);
                    } else {
                        print!("{}", throughput::render(&r));
                    }
                    code(plots(out.as_ref(), |d| {
                        plot::throughput(std::slice::from_ref(&r), d)
                    }))
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Cmd::Mpi {
            testbed,
            impls,
            ranks_per_host,
            sizes,
            iters,
            warmup,
            wait,
            prefix,
            job_timeout,
            also,
            json,
        } => {
            let mut o = mpi::MpiBenchOptions::new(testbed);
            o.also = also.into_iter().map(|e| e.0).collect();
            o.impls = impls;
            o.ranks_per_host = ranks_per_host;
            o.sizes = sizes;
            o.iters = iters;
            o.warmup = warmup;
            o.wait = format!("{wait:?}").to_ascii_lowercase();
            o.prefix = prefix;
            o.job_timeout = std::time::Duration::from_secs(job_timeout);
            match mpi::run(&o) {
                Ok(r) => {
                    if json {
                        print_json(&r);
                    } else {
                        print!("{}", mpi::render(&r));
                    }
                    code(r.rows.iter().all(|x| x.verified))
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Cmd::Demo {
            out,
            quick,
            sim,
            prefix,
        } => {
            let o = demo::DemoOptions {
                out,
                quick,
                progress: true,
                prefix,
                force_sim: sim,
            };
            match demo::run(&o) {
                Ok(_) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: demo failed: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// `on` or `off`.
fn parse_on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("{s:?}: on or off")),
    }
}
