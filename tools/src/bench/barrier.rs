//! `ethbcast-bench barrier`: barrier latency on real hosts, the broadcast barrier (arrivals up
//! a combining tree, release by one hardware broadcast) against the dissemination barrier.
//!
//! Same clock and method as the latency run: every member records the instant it entered and
//! the instant it left; the latency of one barrier = (last member leaving) - (last member
//! entering). Between iterations all members meet out of band (a barrier between the threads
//! that keeps polling the protocol), so barriers never overlap.

use super::plot::{draw, Chart, Series};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use ethbcast::BarrierAlgo;
use serde::Serialize;

use super::bed::{self, summarize, BedOptions, Summary};
use super::cli::{print_and_plot, GroupArgs, LinkArgs};
use crate::harness::report::fail;
use crate::harness::table::Table;
use crate::testbed::Testbed;

/// The method, as printed with every report.
pub const METHOD: &str = "latency of one barrier = (instant the LAST member left) - (instant the \
LAST member entered), all members being threads of one process sharing one clock, each on a \
core of its own where the group has no more hosts than the machine has cores; members meet \
out of band (a barrier between the threads, not the network) before each iteration; warm-up \
iterations are not counted; mean80 = mean of the middle 80%";

/// Options of a barrier run.
#[derive(Debug, Clone)]
pub struct BarrierOptions {
    /// The test-bed and link.
    pub bed: BedOptions,
    /// Group sizes.
    pub nodes: Vec<usize>,
    /// Measured barriers per kind and group size.
    pub iters: usize,
    /// Unmeasured barriers before them.
    pub warmup: usize,
    /// Show a progress bar.
    pub progress: bool,
}

impl BarrierOptions {
    /// Defaults on an N-host test-bed.
    pub fn new(hosts: usize) -> BarrierOptions {
        BarrierOptions {
            bed: BedOptions::new(hosts, "ebbar"),
            nodes: vec![2, 4, 8],
            iters: 500,
            warmup: 50,
            progress: false,
        }
    }
}

/// One (kind, group size).
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// broadcast or dissemination.
    pub kind: String,
    /// Group size.
    pub nodes: usize,
    /// Latency statistics, µs (flattened: the keys `mean80_us`, `median_us`, `p99_us`, `max_us`).
    #[serde(flatten)]
    pub stats: Summary,
}

/// The report.
#[derive(Debug, Clone, Serialize)]
pub struct BarrierReport {
    /// Rows.
    pub rows: Vec<Row>,
    /// How it was measured.
    pub method: String,
    /// Hosts on the test-bed.
    pub hosts: usize,
    /// Measured iterations.
    pub iters: usize,
    /// Link backend.
    pub backend: String,
    /// Wait mode.
    pub wait: String,
}

const KINDS: [(BarrierAlgo, &str); 2] = [
    (BarrierAlgo::Broadcast, "broadcast"),
    (BarrierAlgo::Dissemination, "dissemination"),
];

/// Builds a test-bed, runs, tears down.
pub fn run(o: &BarrierOptions) -> Result<BarrierReport, String> {
    let bed = o.bed.up()?;
    let r = run_on(&bed, o);
    drop(bed);
    r
}

/// Runs on an existing test-bed.
pub fn run_on(bed: &Testbed, o: &BarrierOptions) -> Result<BarrierReport, String> {
    if o.iters == 0 || o.nodes.is_empty() {
        return Err("nothing to measure (iters and nodes must be non-empty)".into());
    }
    let per = (KINDS.len() * (o.iters + o.warmup)) as u64;
    let pb = bed::progress_bar(per * o.nodes.len() as u64, o.progress, "barrier");
    let mut rows = Vec::new();
    for &k in &o.nodes {
        let (iters, warmup, pb2) = (o.iters, o.warmup, pb.clone());
        let res = bed::run_group(bed, k, 0x00EB_2000 | k as u32, &o.bed, move |rank, g, b| {
            let mut out: Vec<(Instant, Instant)> = Vec::with_capacity(KINDS.len() * iters);
            for (kind, name) in KINDS {
                for it in 0..warmup + iters {
                    b.wait(|| bed::poll(g))?;
                    let enter = Instant::now();
                    g.barrier_with(kind)
                        .map_err(|e| format!("{name} barrier: {e}"))?;
                    let leave = Instant::now();
                    if it >= warmup {
                        out.push((enter, leave));
                    }
                    if rank == 0 {
                        pb2.inc(1);
                    }
                }
            }
            Ok(out)
        })
        .inspect_err(|_| pb.abandon())?;
        let res = Arc::new(res);
        for (ki, (_, name)) in KINDS.iter().enumerate() {
            let samples: Vec<f64> = (0..o.iters)
                .map(|i| {
                    let j = ki * o.iters + i;
                    let last_in = res.iter().map(|v| v[j].0).max().expect("members");
                    let last_out = res.iter().map(|v| v[j].1).max().expect("members");
                    bed::us(last_in, last_out)
                })
                .collect();
            rows.push(Row {
                kind: name.to_string(),
                nodes: k,
                stats: summarize(&samples),
            });
        }
    }
    pb.finish_and_clear();
    Ok(BarrierReport {
        rows,
        method: METHOD.into(),
        hosts: o.bed.hosts,
        iters: o.iters,
        backend: format!("{:?}", o.bed.backend).to_lowercase(),
        wait: format!("{:?}", o.bed.wait).to_lowercase(),
    })
}

/// Renders the report for a terminal.
pub fn render(r: &BarrierReport) -> String {
    let mut out = format!(
        "barrier latency on a {}-host test-bed (backend {}, wait {}), {} iterations\n\n",
        r.hosts, r.backend, r.wait, r.iters
    );
    let mut head = vec!["barrier", "nodes"];
    head.extend(Summary::HEADERS);
    let mut t = Table::new(&head);
    for row in &r.rows {
        let mut cells = vec![row.kind.clone(), row.nodes.to_string()];
        cells.extend(row.stats.cells());
        t.row(cells);
    }
    out.push_str(&t.render());
    let _ = writeln!(out, "\nmethod: {}", r.method);
    out
}

/// Barrier latency on real hosts: broadcast barrier vs dissemination barrier.
///
/// Latency of one barrier = from the last member entering to the last member leaving.
///
/// Example: ethbcast-bench barrier --testbed 8 --nodes 2,4,8 --iters 500
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    groups: GroupArgs,
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
}

impl Args {
    /// Runs the comparison (and plots it).
    pub fn run(self) -> ExitCode {
        let o = BarrierOptions {
            bed: self.link.bed(self.groups.testbed, "ebbar"),
            nodes: self.groups.nodes,
            iters: self.iters,
            warmup: self.warmup,
            progress: !self.json,
        };
        match run(&o) {
            Ok(r) => print_and_plot(self.json, &r, render, self.out.as_ref(), plot),
            Err(e) => fail(e),
        }
    }
}

/// Barrier latency vs group size per kind.
pub fn plot(r: &BarrierReport, dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut kinds: Vec<String> = Vec::new();
    for row in &r.rows {
        if !kinds.contains(&row.kind) {
            kinds.push(row.kind.clone());
        }
    }
    let c = Chart {
        title: "Barrier latency vs group size (mean of middle 80%)".into(),
        x_label: "nodes".into(),
        y_label: "latency (µs)".into(),
        log_x: false,
        log_y: false,
        series: kinds
            .iter()
            .map(|k| Series {
                limit: false,
                name: k.clone(),
                points: r
                    .rows
                    .iter()
                    .filter(|x| &x.kind == k)
                    .map(|x| (x.nodes as f64, x.stats.mean80_us))
                    .collect(),
            })
            .collect(),
    };
    draw(&c, dir, "barrier-vs-nodes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_keeps_its_json_keys_and_table_columns() {
        let r = BarrierReport {
            rows: vec![Row {
                kind: "broadcast".into(),
                nodes: 8,
                stats: Summary {
                    mean80_us: 40.25,
                    median_us: 39.0,
                    p99_us: 98.5,
                    max_us: 2048.0,
                },
            }],
            method: METHOD.into(),
            hosts: 8,
            iters: 500,
            backend: "ring".into(),
            wait: "block".into(),
        };
        assert_eq!(
            serde_json::to_string(&r.rows[0]).unwrap(),
            r#"{"kind":"broadcast","nodes":8,"mean80_us":40.25,"median_us":39.0,"p99_us":98.5,"max_us":2048.0}"#
        );
        let text = render(&r);
        assert!(
            text.contains(
                "barrier    nodes  mean80 µs  median µs  p99 µs  max µs\n\
                 ---------  -----  ---------  ---------  ------  ------\n\
                 broadcast      8       40.2       39.0    98.5    2048\n"
            ),
            "{text}"
        );
    }
}
