//! `ethbcast-bench throughput`: one large broadcast from rank 0 to N receivers on the
//! test-bed, sent as a sequence of chunk-sized `bcast`s (MPI programs broadcast large data the
//! same way). Goodput = bytes / (instant the last receiver had the last chunk - instant the
//! root started), with the same shared clock as the latency run; overhead = frames beyond the
//! data frames, from the engines' counters. CPU: every member thread's user + system time
//! (`getrusage(RUSAGE_THREAD)`) from its start to its last chunk, as seconds per GiB
//! ([`super::cpu`]).

use super::plot::{draw, Chart, Series};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use ethbcast::Algorithm;
use ethbcast_proto::engine::Stats;
use serde::Serialize;

use super::bed::{self, BedOptions};
use super::cli::{print_and_plot, LinkArgs};
use super::cpu::{self, CpuCost};
use crate::harness::report::fail;
use crate::harness::table::Table;
use crate::testbed::Testbed;
use ethbcast::Rank;

/// Options of a throughput run.
#[derive(Debug, Clone)]
pub struct ThroughputOptions {
    /// The test-bed and link (rate limit, loss).
    pub bed: BedOptions,
    /// Receivers (the group is receivers + 1 hosts).
    pub receivers: usize,
    /// Bytes in all.
    pub size: usize,
    /// Bytes per `bcast`.
    pub chunk: usize,
    /// ppbcast or sbcast (tree too, as a baseline).
    pub algo: Algorithm,
}

impl ThroughputOptions {
    /// Defaults on an N-host test-bed: N - 1 receivers, 64 MiB in 1 MiB chunks, push-pull.
    pub fn new(hosts: usize) -> ThroughputOptions {
        ThroughputOptions {
            bed: BedOptions::new(hosts, "ebtp"),
            receivers: hosts.saturating_sub(1),
            size: 64 << 20,
            chunk: 1 << 20,
            algo: Algorithm::PushPull,
        }
    }
}

/// The report.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ThroughputReport {
    /// Algorithm.
    pub algo: String,
    /// Receivers.
    pub receivers: usize,
    /// Bytes broadcast.
    pub bytes: usize,
    /// Bytes per bcast.
    pub chunk: usize,
    /// Seconds until the last receiver had everything.
    pub seconds: f64,
    /// Goodput, MB/s (10^6 bytes per second).
    pub goodput_mb_s: f64,
    /// Link rate limit, if any.
    pub rate: Option<String>,
    /// Goodput as a fraction of the link rate (with a rate limit).
    pub fraction_of_link: Option<f64>,
    /// Loss at the switch, percent.
    pub loss_pct: f64,
    /// Data frames sent (first transmissions).
    pub data_frames: u64,
    /// Repair frames (retransmissions and re-broadcasts).
    pub repair_frames: u64,
    /// ACK frames.
    pub ack_frames: u64,
    /// NACK frames.
    pub nack_frames: u64,
    /// Pull requests (push-pull).
    pub pull_frames: u64,
    /// (repair + ack + nack + pull) / data, percent.
    pub overhead_pct: f64,
    /// Frames the switch dropped (nftables counter), with loss.
    pub dropped_by_switch: u64,
    /// Link backend.
    pub backend: String,
    /// CPU seconds of the sender and the receivers, and per GiB.
    pub cpu: CpuCost,
}

/// A size as [`crate::testbed::units::parse_size`] reads it (`64MiB`, `4096`, `2MB`).
pub fn parse_size(s: &str) -> Result<usize, String> {
    let v = crate::testbed::units::parse_size(s).map_err(|e| e.to_string())?;
    usize::try_from(v).map_err(|_| "too large".into())
}

/// Builds a test-bed, runs, tears down.
pub fn run(o: &ThroughputOptions) -> Result<ThroughputReport, String> {
    let bed = o.bed.up()?;
    let r = run_on(&bed, o);
    drop(bed);
    r
}

/// Runs on an existing test-bed.
pub fn run_on(bed: &Testbed, o: &ThroughputOptions) -> Result<ThroughputReport, String> {
    let k = o.receivers + 1;
    if o.receivers == 0 || k > bed.hosts().len() {
        return Err(format!(
            "{} receivers need {k} hosts; the test-bed has {}",
            o.receivers,
            bed.hosts().len()
        ));
    }
    if o.size == 0 || o.chunk == 0 {
        return Err("size and chunk must be positive".into());
    }
    let (size, chunk, algo) = (o.size, o.chunk, o.algo);
    let k_start = cpu::ksoftirqd_seconds();
    let res = bed::run_group(bed, k, 0x00EB_3000 | k as u32, &o.bed, move |rank, g, b| {
        let chunks: Vec<usize> = (0..size.div_ceil(chunk))
            .map(|i| chunk.min(size - i * chunk))
            .collect();
        let c0 = cpu::thread_seconds();
        let t = if rank == 0 {
            let data: Vec<u8> = (0..chunk).map(|i| (i % 253) as u8).collect();
            let t0 = Instant::now();
            for &c in &chunks {
                let mut buf = data[..c].to_vec();
                g.bcast_with(Rank::new(0), &mut buf, algo)
                    .map_err(|e| format!("bcast: {e}"))?;
            }
            g.flush().map_err(|e| format!("flush: {e}"))?;
            t0
        } else {
            let mut buf = Vec::new();
            for (i, &c) in chunks.iter().enumerate() {
                g.bcast_with(Rank::new(0), &mut buf, algo)
                    .map_err(|e| format!("receive of chunk {i}: {e}"))?;
                if buf.len() != c {
                    return Err(format!("chunk {i}: {} bytes, expected {c}", buf.len()));
                }
            }
            Instant::now()
        };
        let cpu_s = cpu::thread_seconds() - c0;
        // Let the last acknowledgements land before reading the counters.
        b.wait(|| bed::poll(g))?;
        Ok((t, g.member().engine_stats().clone(), cpu_s))
    })?;
    let t0 = res[0].0;
    let last = res[1..].iter().map(|r| r.0).max().expect("receivers");
    let seconds = last.saturating_duration_since(t0).as_secs_f64();
    let sum = |f: fn(&Stats) -> u64| res.iter().map(|r| f(&r.1)).sum::<u64>();
    let goodput = if seconds > 0.0 {
        o.size as f64 / seconds
    } else {
        0.0
    };
    let mut r = ThroughputReport {
        algo: o.algo.to_string(),
        receivers: o.receivers,
        bytes: o.size,
        chunk: o.chunk,
        seconds,
        goodput_mb_s: goodput / 1e6,
        rate: o.bed.rate.map(|r| r.to_string()),
        fraction_of_link: o.bed.rate.map(|r| goodput / r.bytes_per_sec() as f64),
        loss_pct: o.bed.loss,
        data_frames: sum(|s| s.data_frames),
        repair_frames: sum(|s| s.repair_frames),
        ack_frames: sum(|s| s.ack_frames),
        nack_frames: sum(|s| s.nack_frames),
        pull_frames: sum(|s| s.pull_frames),
        dropped_by_switch: if o.bed.loss > 0.0 {
            bed.loss_counter().unwrap_or(0)
        } else {
            0
        },
        backend: o.bed.backend.resolve().unwrap_or(o.bed.backend).to_string(),
        cpu: CpuCost::new(res[0].2, res[1..].iter().map(|r| r.2).sum(), o.size as u64)
            .with_ksoftirqd(cpu::ksoftirqd_seconds() - k_start),
        ..Default::default()
    };
    if r.data_frames > 0 {
        r.overhead_pct = (r.repair_frames + r.ack_frames + r.nack_frames + r.pull_frames) as f64
            / r.data_frames as f64
            * 100.0;
    }
    Ok(r)
}

/// Renders the report for a terminal.
pub fn render(r: &ThroughputReport) -> String {
    let mut t = Table::new(&["metric", "value"]);
    let mut add = |k: &str, v: String| t.row(vec![k.to_string(), v]);
    add("algorithm", r.algo.clone());
    add("backend", r.backend.clone());
    add("receivers", r.receivers.to_string());
    add(
        "bytes",
        format!("{} ({:.1} MiB)", r.bytes, r.bytes as f64 / 1048576.0),
    );
    add("bytes per bcast", r.chunk.to_string());
    add("link rate", r.rate.clone().unwrap_or("unlimited".into()));
    add("loss at the switch", format!("{}%", r.loss_pct));
    add("time to the last receiver", format!("{:.3} s", r.seconds));
    add("goodput", format!("{:.2} MB/s", r.goodput_mb_s));
    if let Some(f) = r.fraction_of_link {
        add("of the link rate", format!("{:.1}%", f * 100.0));
    }
    add("data frames", r.data_frames.to_string());
    add("repair frames", r.repair_frames.to_string());
    add("ack frames", r.ack_frames.to_string());
    add("nack frames", r.nack_frames.to_string());
    add("pull frames", r.pull_frames.to_string());
    add(
        "overhead (frames)",
        format!("{:.2}% of data", r.overhead_pct),
    );
    if r.loss_pct > 0.0 {
        add("dropped by the switch", r.dropped_by_switch.to_string());
    }
    add(
        "CPU (sender / receivers)",
        format!("{:.2} s / {:.2} s", r.cpu.sender_s, r.cpu.receivers_s),
    );
    add("CPU per GiB delivered", format!("{:.2} s", r.cpu.per_gib_s));
    add(
        "ksoftirqd meanwhile (machine)",
        format!("{:.2} s", r.cpu.ksoftirqd_s),
    );
    let mut out = t.render();
    let _ = writeln!(
        out,
        "\nmethod: one root (rank 0) broadcasts the bytes as consecutive bcasts of the chunk size; \
         time from the root's first call until the last receiver returned from its last bcast \
         (one process, one clock); frame counts summed over all members; CPU = user + system \
         time of every member thread (getrusage) per GiB given to each receiver"
    );
    out
}

/// Goodput of one or more throughput runs (x = receivers, one line per algorithm).
pub fn plot(runs: &[ThroughputReport], dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut algos: Vec<String> = Vec::new();
    for r in runs {
        if !algos.contains(&r.algo) {
            algos.push(r.algo.clone());
        }
    }
    let c = Chart {
        title: "Goodput of a large broadcast".into(),
        x_label: "receivers".into(),
        y_label: "goodput (MB/s)".into(),
        log_x: false,
        log_y: false,
        series: algos
            .iter()
            .map(|a| Series {
                limit: false,
                name: a.to_uppercase(),
                points: runs
                    .iter()
                    .filter(|r| &r.algo == a)
                    .map(|r| (r.receivers as f64, r.goodput_mb_s))
                    .collect(),
            })
            .collect(),
    };
    draw(&c, dir, "throughput")
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse_with_units() {
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("512KiB"), Ok(512 << 10));
        assert_eq!(parse_size("2MB"), Ok(2_000_000));
        assert!(parse_size("3 parsecs").is_err());
    }
}

/// Goodput of one large broadcast from rank 0 to N receivers on the test-bed, and the
/// repair/acknowledgement overhead in frames.
///
/// Example: ethbcast-bench throughput --testbed 8 --receivers 7 --size 64MiB --rate 1gbit
#[derive(clap::Args)]
pub struct Args {
    /// Hosts on the test-bed.
    #[arg(long, default_value_t = 8)]
    testbed: usize,
    /// Receivers (default: all other hosts).
    #[arg(long)]
    receivers: Option<usize>,
    /// Bytes in all (B, KiB, MiB, GiB, KB, MB, GB).
    #[arg(long, default_value = "64MiB", value_parser = parse_size)]
    size: usize,
    /// Bytes per bcast.
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
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
}

impl Args {
    /// Runs the broadcast (and plots it).
    pub fn run(self) -> ExitCode {
        let mut o = ThroughputOptions::new(self.testbed);
        o.bed = self.link.bed(self.testbed, "ebtp");
        o.receivers = self.receivers.unwrap_or(self.testbed.saturating_sub(1));
        o.size = self.size;
        o.chunk = self.chunk;
        o.algo = self.algo;
        match run(&o) {
            Ok(r) => print_and_plot(self.json, &r, render, self.out.as_ref(), |r, d| {
                plot(std::slice::from_ref(r), d)
            }),
            Err(e) => fail(e),
        }
    }
}
