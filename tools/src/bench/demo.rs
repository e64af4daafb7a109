//! `ethbcast-bench demo`: the README's one command. With the privilege to create network
//! namespaces it builds an 8-host test-bed and runs the paper's latency comparison (PPBCAST,
//! SBCAST and the binomial tree at 2, 4 and 8 nodes, each over the raw floor measured in the
//! same run) on unshaped veths and again with every port shaped to 100 Mbit/s and 1 Gbit/s
//! (tbf, as switch ports of those speeds), the barrier comparison, a short
//! throughput run and the memory table, prints the tables, writes the plots and tears down.
//! Without the privilege it says so loudly and runs the broadcast comparison on the simulated
//! switch in virtual time instead (hardware-broadcast algorithms only).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use ethbcast::memory::Profile;
use ethbcast::Algorithm;
use serde::Serialize;

use super::barrier::{self, BarrierOptions, BarrierReport};
use super::bed::{BedOptions, Frames};
use super::latency::{self, LatencyOptions, LatencyReport};
use super::memory::{self, MemoryReport};
use super::simlat;
use super::throughput::{self, ThroughputOptions, ThroughputReport};
use crate::harness::report::fail;
use crate::testbed;

/// Options of the demo.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Where plots and `demo.json` go.
    pub out: PathBuf,
    /// Few iterations (and a shorter throughput run) over the full demo's hosts, group sizes,
    /// message sizes and phases: what CI runs, and a first look.
    pub quick: bool,
    /// Show progress bars.
    pub progress: bool,
    /// Test-bed prefix.
    pub prefix: String,
    /// Run on the simulator even if namespaces could be created.
    pub force_sim: bool,
}

/// Everything the demo measured.
#[derive(Debug, Serialize)]
pub struct DemoReport {
    /// "testbed" or "simulator".
    pub mode: String,
    /// Why the simulator was used, if it was.
    pub fallback_reason: Option<String>,
    /// Broadcast latency on unshaped veths.
    pub latency: LatencyReport,
    /// Broadcast latency with every port shaped (test-bed only): 100 Mbit/s and 1 Gbit/s.
    pub shaped: Vec<ShapedLatency>,
    /// Barrier latency (test-bed only).
    pub barrier: Option<BarrierReport>,
    /// Throughput runs (test-bed only).
    pub throughput: Vec<ThroughputReport>,
    /// Memory table.
    pub memory: MemoryReport,
    /// Files written.
    pub files: Vec<PathBuf>,
    /// Seconds the demo took.
    pub seconds: f64,
}

/// The latency comparison on ports shaped to one rate.
#[derive(Debug, Serialize)]
pub struct ShapedLatency {
    /// The ports' rate, e.g. `1gbit`.
    pub rate: String,
    /// The comparison, its floor measured on the same shaped ports.
    pub latency: LatencyReport,
}

/// The rates the demo shapes the ports to, after its unshaped run.
pub const SHAPED_RATES: [&str; 2] = ["100mbit", "1gbit"];

/// Runs the demo, printing tables as it goes. Errors end it (after teardown).
pub fn run(o: &DemoOptions) -> Result<DemoReport, String> {
    let start = std::time::Instant::now();
    let fallback = if o.force_sim {
        Some("--sim was given".to_string())
    } else {
        testbed::can_create_netns().err().map(|e| e.to_string())
    };
    let mut r = match fallback {
        None => on_testbed(o)?,
        Some(reason) => on_simulator(reason)?,
    };
    let mem = memory::report(Profile::Paper, &[2, 4, 8, 16, 32, 64, 128]);
    println!(
        "\n== memory (EQA paper, section 4) ==\n{}",
        memory::render(&mem)
    );
    let mut files = r.files.clone();
    files.extend(memory::plot(&mem, &o.out)?);
    files.extend(latency::plot(&r.latency, &o.out)?);
    for sh in &r.shaped {
        // One folder per rate: the plots keep their names.
        let dir = o.out.join(&sh.rate);
        std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        files.extend(latency::plot(&sh.latency, &dir)?);
        let csv = dir.join("latency.csv");
        latency::write_csv(&sh.latency, &csv)
            .map_err(|e| format!("write {}: {e}", csv.display()))?;
        files.push(csv);
    }
    if let Some(b) = &r.barrier {
        files.extend(barrier::plot(b, &o.out)?);
    }
    if !r.throughput.is_empty() {
        files.extend(throughput::plot(&r.throughput, &o.out)?);
    }
    r.memory = mem;
    r.files = files;
    r.seconds = start.elapsed().as_secs_f64();
    let json = o.out.join("demo.json");
    std::fs::write(
        &json,
        serde_json::to_string_pretty(&r).expect("serialisable"),
    )
    .map_err(|e| format!("write {}: {e}", json.display()))?;
    let csv = o.out.join("latency.csv");
    latency::write_csv(&r.latency, &csv).map_err(|e| format!("write {}: {e}", csv.display()))?;
    println!(
        "\nwrote {} files to {}:",
        r.files.len() + 2,
        o.out.display()
    );
    for f in r.files.iter().chain([&json, &csv]) {
        println!("  {}", f.display());
    }
    println!("demo took {:.1} s", r.seconds);
    Ok(r)
}

/// The demo's group sizes, on a test-bed of as many hosts as the largest.
const NODES: [usize; 3] = [2, 4, 8];
/// The demo's message sizes: the EQA paper's small messages, one that push-pull pulls, and
/// the largest a benchmark sends.
const SIZES: [usize; 4] = [8, 256, 4096, 65536];

/// (measured iterations, warm-up) of the latency and barrier runs.
fn iterations(quick: bool, shaped: bool) -> (usize, usize) {
    match (quick, shaped) {
        (true, _) => (20, 5),
        (false, false) => (500, 50),
        (false, true) => (200, 50),
    }
}

fn on_testbed(o: &DemoOptions) -> Result<DemoReport, String> {
    let nodes = NODES.to_vec();
    let hosts = NODES[NODES.len() - 1];
    let (iters, warmup) = iterations(o.quick, false);
    let mut bo = BedOptions::new(hosts, &o.prefix);
    bo.timeout = std::time::Duration::from_secs(60);
    println!(
        "== demo on a {hosts}-host test-bed of network namespaces ({}) ==",
        o.prefix
    );
    let bed = bo.up()?;
    let lo = LatencyOptions {
        bed: bo.clone(),
        nodes: nodes.clone(),
        sizes: SIZES.to_vec(),
        iters,
        warmup,
        algos: vec![Algorithm::PushPull, Algorithm::Simple, Algorithm::Tree],
        progress: o.progress,
        floor: true,
        blocks: 4,
        cost: false,
        reference: None,
        frames: vec![Frames::Plain],
    };
    let lat = latency::run_on(&bed, &lo)?;
    println!("\n== broadcast latency ==\n{}", latency::render(&lat));
    let bar = barrier::run_on(
        &bed,
        &BarrierOptions {
            bed: bo.clone(),
            nodes: nodes.clone(),
            iters,
            warmup,
            progress: o.progress,
        },
    )?;
    println!("\n== barrier latency ==\n{}", barrier::render(&bar));
    let mut tps = Vec::new();
    for &k in &nodes {
        for algo in [Algorithm::PushPull, Algorithm::Simple] {
            let mut to = ThroughputOptions::new(hosts);
            to.bed = bo.clone();
            to.receivers = k - 1;
            to.size = if o.quick { 2 << 20 } else { 16 << 20 };
            to.algo = algo;
            tps.push(throughput::run_on(&bed, &to)?);
        }
    }
    println!("\n== throughput (unlimited veth links) ==");
    let mut t = crate::harness::table::Table::new(&[
        "algo",
        "receivers",
        "MiB",
        "goodput MB/s",
        "data frames",
        "repair",
        "ack",
        "nack",
        "pull",
    ]);
    for r in &tps {
        t.row(vec![
            r.algo.clone(),
            r.receivers.to_string(),
            format!("{}", r.bytes >> 20),
            format!("{:.1}", r.goodput_mb_s),
            r.data_frames.to_string(),
            r.repair_frames.to_string(),
            r.ack_frames.to_string(),
            r.nack_frames.to_string(),
            r.pull_frames.to_string(),
        ]);
    }
    print!("{}", t.render());
    drop(bed);
    let mut shaped = Vec::new();
    for rate in SHAPED_RATES {
        let mut so = lo.clone();
        so.bed.rate = Some(rate.parse().map_err(|e| format!("rate {rate}: {e}"))?);
        (so.iters, so.warmup) = iterations(o.quick, true);
        println!("\n== broadcast latency, every port shaped to {rate} ==");
        let bed = so.bed.up()?;
        let l = latency::run_on(&bed, &so)?;
        drop(bed);
        println!("{}", latency::render(&l));
        shaped.push(ShapedLatency {
            rate: rate.to_string(),
            latency: l,
        });
    }
    Ok(DemoReport {
        mode: "testbed".into(),
        fallback_reason: None,
        latency: lat,
        shaped,
        barrier: Some(bar),
        throughput: tps,
        memory: memory::report(Profile::Paper, &[]),
        files: Vec::new(),
        seconds: 0.0,
    })
}

fn on_simulator(reason: String) -> Result<DemoReport, String> {
    let bar = "!".repeat(78);
    eprintln!("{bar}\n!! NO TEST-BED: cannot create network namespaces here: {reason}\n!! Running the broadcast comparison on the SIMULATED switch instead (virtual time,\n!! 1 Gbit/s links, 5 µs switch latency): PPBCAST, SBCAST and the binomial tree; the\n!! barrier benchmark needs real links. Run as root (CAP_NET_ADMIN + CAP_SYS_ADMIN) for\n!! the real measurement.\n{bar}");
    let nodes = NODES.to_vec();
    let sizes = SIZES.to_vec();
    let algos = [Algorithm::PushPull, Algorithm::Simple, Algorithm::Tree];
    let rows = simlat::rows(&nodes, &sizes, &algos)?;
    let mut lo = LatencyOptions::new(8);
    lo.nodes = nodes;
    lo.sizes = sizes;
    lo.iters = 1;
    lo.warmup = 2;
    lo.algos = algos.to_vec();
    lo.floor = false;
    let mut lat = latency::analyse(rows, &lo);
    lat.method = "SIMULATOR, virtual time: latency of one warm broadcast (the third of three) \
                  from the root's call until the last receiver's call returned; deterministic, \
                  so all statistics are the same value"
        .into();
    lat.backend = "sim".into();
    println!(
        "\n== broadcast latency (simulated switch) ==\n{}",
        latency::render(&lat)
    );
    Ok(DemoReport {
        mode: "simulator".into(),
        fallback_reason: Some(reason),
        latency: lat,
        shaped: Vec::new(),
        barrier: None,
        throughput: Vec::new(),
        memory: memory::report(Profile::Paper, &[]),
        files: Vec::new(),
        seconds: 0.0,
    })
}

/// True if `path` starts with the PNG signature.
pub fn is_png(path: &Path) -> bool {
    std::fs::read(path).is_ok_and(|b| b.starts_with(b"\x89PNG\r\n\x1a\n"))
}

/// The one command: builds an 8-host test-bed (as root), runs the latency comparison of
/// PPBCAST, SBCAST and the binomial tree at 2, 4 and 8 nodes, the barrier comparison, a
/// short throughput run and the memory table, prints the tables, writes plots, tears down.
/// Without the privilege it says so and runs the comparison on the simulator instead.
///
/// Example: sudo ethbcast-bench demo --out bench-out
#[derive(clap::Args)]
pub struct Args {
    /// Directory for plots, demo.json and latency.csv.
    #[arg(long, default_value = "bench-out")]
    out: PathBuf,
    /// 20 iterations after 5 warm-up and a 2 MiB throughput run, with every phase, host, group
    /// size and message size of the full demo (which uses the paper's 500 after 50 warm-up,
    /// 200 on shaped ports, and 16 MiB).
    #[arg(long)]
    quick: bool,
    /// Use the simulator even with the privilege.
    #[arg(long)]
    sim: bool,
    /// Test-bed name prefix.
    #[arg(long, default_value = "ebdemo")]
    prefix: String,
}

impl Args {
    /// Runs the demo.
    pub fn run(self) -> ExitCode {
        let o = DemoOptions {
            out: self.out,
            quick: self.quick,
            progress: true,
            prefix: self.prefix,
            force_sim: self.sim,
        };
        match run(&o) {
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => fail(format!("demo failed: {e}")),
        }
    }
}
