//! `ethbcast-bench scale`: the scale study on the simulated switch. One simple-broadcast
//! workload (the issue's: messages of 8 B, 4 KiB and 64 KiB from one root) at every group size,
//! link rate and loss asked for: completion time, goodput per receiver, control frames into
//! the root per data frame, repair frames per lost frame, and the memory of the root and of a
//! member by the paper's formulas (`s_SDP + (n-1)·s_LDP` at the root, `s_RDP` at a member).
//! Every run is checked: a row whose deliveries are not all intact, once and in order says so.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use ethbcast::cluster::ClusterError;
use ethbcast::memory::{sizes_for, Profile};
use ethbcast::{Algorithm, Rank};
use serde::Serialize;

use super::cli::parse_rate;
use super::plot::{draw, Chart, Series};
use super::sim::{run_sim, SimOptions};
use crate::harness::report::print;

/// What to run.
#[derive(Debug, Clone)]
pub struct ScaleOptions {
    /// Group sizes.
    pub nodes: Vec<u16>,
    /// Link rates in bit/s.
    pub rates: Vec<u64>,
    /// Independent loss per port, percent.
    pub losses: Vec<f64>,
    /// Messages per run.
    pub messages: usize,
    /// Message sizes drawn from.
    pub sizes: Vec<usize>,
    /// Seed.
    pub seed: u64,
}

/// One run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ScaleRow {
    /// Members (the root included).
    pub nodes: u16,
    /// Link rate, Mbit/s.
    pub rate_mbps: u64,
    /// Loss per port, percent.
    pub loss_pct: f64,
    /// Virtual time until every receiver had every message, ms.
    pub completion_ms: f64,
    /// Message bytes per receiver over the virtual time, Mbit/s.
    pub goodput_mbps: f64,
    /// Control frames the root received per data frame it sent.
    pub root_control_per_data_frame: f64,
    /// Repair frames per frame the switch lost.
    pub repairs_per_lost_frame: f64,
    /// The root's protocol memory, `s_SDP + (n-1)·s_LDP`, bytes.
    pub root_memory_bytes: usize,
    /// A member's, `s_RDP`, bytes.
    pub member_memory_bytes: usize,
    /// Every delivery intact, exactly once, in order, and the run finished.
    pub exact: bool,
    /// Wall-clock seconds the simulation took.
    pub wall_s: f64,
}

/// The study.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleReport {
    /// Messages per run.
    pub messages: usize,
    /// Sizes drawn from.
    pub sizes: Vec<usize>,
    /// Seed.
    pub seed: u64,
    /// One row per (nodes, rate, loss).
    pub rows: Vec<ScaleRow>,
}

/// Runs the study.
pub fn run(o: &ScaleOptions) -> Result<ScaleReport, ClusterError> {
    if o.nodes.iter().any(|&n| n < 2) {
        return Err(ClusterError::Scenario(
            "--nodes: every group needs at least 2 members".into(),
        ));
    }
    let mut rows = Vec::new();
    for &nodes in &o.nodes {
        let mem = sizes_for(Profile::Default, nodes, std::time::Instant::now());
        for &rate in &o.rates {
            for &loss in &o.losses {
                let r = run_sim(&SimOptions {
                    nodes,
                    algos: vec![Algorithm::Simple],
                    messages: o.messages,
                    sizes: o.sizes.clone(),
                    roots: Some(vec![Rank::new(0)]),
                    loss,
                    burst_loss: 0.0,
                    dup: 0.0,
                    reorder: 0.0,
                    corrupt: 0.0,
                    seed: o.seed,
                    rate_bps: Some(rate),
                    window: None,
                    ack_tree: None,
                    peer_repair: None,
                    compare_nodes: None,
                    rx_coalesce_us: 0,
                    observe: false,
                })?;
                let exact = r.completed && r.deliveries.exact();
                rows.push(ScaleRow {
                    nodes,
                    rate_mbps: rate / 1_000_000,
                    loss_pct: loss,
                    completion_ms: r.virtual_time_us as f64 / 1e3,
                    goodput_mbps: r.goodput_mbps,
                    root_control_per_data_frame: r.root_control_per_data_frame,
                    repairs_per_lost_frame: r.repair_ratio,
                    root_memory_bytes: mem.s_sdp + usize::from(nodes - 1) * mem.s_ldp,
                    member_memory_bytes: mem.s_rdp,
                    exact,
                    wall_s: r.wall_s,
                });
            }
        }
    }
    Ok(ScaleReport {
        messages: o.messages,
        sizes: o.sizes.clone(),
        seed: o.seed,
        rows,
    })
}

/// Renders the study for a terminal (and README).
pub fn render(r: &ScaleReport) -> String {
    let mut t = crate::harness::table::Table::new(&[
        "members",
        "link Mbit/s",
        "loss %",
        "completion ms",
        "goodput Mbit/s",
        "root ctl/data",
        "repairs/lost",
        "root KB",
        "member KB",
        "exact",
        "wall s",
    ]);
    for row in &r.rows {
        t.row(vec![
            row.nodes.to_string(),
            row.rate_mbps.to_string(),
            format!("{}", row.loss_pct),
            format!("{:.1}", row.completion_ms),
            format!("{:.1}", row.goodput_mbps),
            format!("{:.2}", row.root_control_per_data_frame),
            format!("{:.2}", row.repairs_per_lost_frame),
            format!("{:.1}", row.root_memory_bytes as f64 / 1e3),
            format!("{:.1}", row.member_memory_bytes as f64 / 1e3),
            if row.exact { "yes".into() } else { "NO".into() },
            format!("{:.1}", row.wall_s),
        ]);
    }
    t.render()
}

/// Writes `scale.json`, `scale.csv` and the goodput and root-control plots into `dir`.
pub fn write(r: &ScaleReport, dir: &Path) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let json = dir.join("scale.json");
    std::fs::write(
        &json,
        serde_json::to_string_pretty(r).expect("the report serialises"),
    )
    .map_err(|e| format!("write {}: {e}", json.display()))?;
    let csv = dir.join("scale.csv");
    let mut text = String::from(
        "nodes,rate_mbps,loss_pct,completion_ms,goodput_mbps,root_control_per_data_frame,repairs_per_lost_frame,root_memory_bytes,member_memory_bytes,exact,wall_s\n",
    );
    for w in &r.rows {
        text.push_str(&format!(
            "{},{},{},{:.3},{:.3},{:.4},{:.4},{},{},{},{:.3}\n",
            w.nodes,
            w.rate_mbps,
            w.loss_pct,
            w.completion_ms,
            w.goodput_mbps,
            w.root_control_per_data_frame,
            w.repairs_per_lost_frame,
            w.root_memory_bytes,
            w.member_memory_bytes,
            w.exact,
            w.wall_s
        ));
    }
    std::fs::write(&csv, text).map_err(|e| format!("write {}: {e}", csv.display()))?;
    let mut files = vec![json, csv];
    let series = |y: fn(&ScaleRow) -> f64| -> Vec<Series> {
        let mut keys: Vec<(u64, String)> = Vec::new();
        for w in &r.rows {
            let k = (w.rate_mbps, format!("{}", w.loss_pct));
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
        keys.iter()
            .map(|(rate, loss)| Series {
                limit: false,
                name: format!("{rate} Mbit/s, {loss}% loss"),
                points: r
                    .rows
                    .iter()
                    .filter(|w| w.rate_mbps == *rate && format!("{}", w.loss_pct) == *loss)
                    .map(|w| (f64::from(w.nodes), y(w)))
                    .collect(),
            })
            .collect()
    };
    files.extend(draw(
        &Chart {
            title: "Goodput per receiver against group size (simulator)".into(),
            x_label: "members".into(),
            y_label: "goodput (Mbit/s)".into(),
            log_x: true,
            log_y: false,
            series: series(|w| w.goodput_mbps),
        },
        dir,
        "scale-goodput",
    )?);
    files.extend(draw(
        &Chart {
            title: "Control frames into the root per data frame (simulator)".into(),
            x_label: "members".into(),
            y_label: "control frames / data frame".into(),
            log_x: true,
            log_y: false,
            series: series(|w| w.root_control_per_data_frame),
        },
        dir,
        "scale-root-control",
    )?);
    Ok(files)
}

/// The scale study on the simulator: one root broadcasting to groups of every size
/// asked, at each link rate and loss: completion time, goodput, control frames into the
/// root per data frame, repairs per lost frame, root and member memory. Writes
/// scale.json, scale.csv and two plots into --out.
///
/// Example: ethbcast-bench scale --nodes 16,64,256,1024 --rates 100mbit,1gbit --loss 0,1
#[derive(clap::Args)]
pub struct Args {
    /// Group sizes (up to 4096: with 2048 and 4096 added the study takes about 8 minutes and
    /// 700 MB on a 2-core machine).
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
}

impl Args {
    /// Runs the study; exits 1 unless every run delivered exactly (or the files could not
    /// be written), 2 on bad options.
    pub fn run(self) -> ExitCode {
        let fail = |e: String, c: u8| {
            eprintln!("ethbcast-bench: {e}");
            ExitCode::from(c)
        };
        let mut rates = Vec::new();
        for r in &self.rates {
            match parse_rate(r) {
                Ok(Some(b)) => rates.push(b),
                Ok(None) => {
                    let e = format!("--rates {r}: a scale study needs a finite link rate");
                    return fail(e, 2);
                }
                Err(e) => return fail(format!("--rates {r}: {e}"), 2),
            }
        }
        let o = ScaleOptions {
            nodes: self.nodes,
            rates,
            losses: self.loss,
            messages: self.messages,
            sizes: self.sizes,
            seed: self.seed,
        };
        let r = match run(&o) {
            Ok(r) => r,
            Err(e) => return fail(e.to_string(), 2),
        };
        print(self.json, &r, render);
        match write(&r, &self.out) {
            Ok(files) => {
                for f in files {
                    eprintln!("wrote {}", f.display());
                }
            }
            Err(e) => return fail(e, 1),
        }
        if r.rows.iter().all(|w| w.exact) {
            ExitCode::SUCCESS
        } else {
            fail("some run did not deliver every message exactly".into(), 1)
        }
    }
}
