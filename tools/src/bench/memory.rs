//! `ethbcast-bench memory`: the paper's memory table, from the real structures.

use super::plot::{draw, Chart, Series};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use ethbcast::memory::{sizes, Profile};
use serde::Serialize;

use super::cli::print_and_plot;
use crate::harness::table::Table;

/// One row: a group of `n`.
#[derive(Debug, Serialize)]
pub struct Row {
    /// Group size.
    pub n: usize,
    /// Point-to-point total, bytes.
    pub p2p_bytes: usize,
    /// Hardware-broadcast (EQA) total, bytes.
    pub hb_bytes: usize,
    /// Fraction saved, measured.
    pub m_save: f64,
    /// The paper's closed form `0.386(1 - 1/n)`.
    pub m_save_paper: f64,
}

/// The whole report.
#[derive(Debug, Serialize)]
pub struct MemoryReport {
    /// Profile name.
    pub profile: String,
    /// Send-only DP bytes.
    pub s_sdp: usize,
    /// Receive-only DP bytes.
    pub s_rdp: usize,
    /// LDP bytes.
    pub s_ldp: usize,
    /// The coefficient c of M_save(n) = c(1 - 1/n), measured.
    pub m_save_coefficient: f64,
    /// Rows per group size.
    pub rows: Vec<Row>,
}

/// Builds the report.
pub fn report(profile: Profile, nodes: &[usize]) -> MemoryReport {
    let s = sizes(profile, std::time::Instant::now());
    MemoryReport {
        profile: match profile {
            Profile::Paper => "paper".into(),
            Profile::Default => "default".into(),
        },
        s_sdp: s.s_sdp,
        s_rdp: s.s_rdp,
        s_ldp: s.s_ldp,
        m_save_coefficient: s.m_save_coefficient(),
        rows: nodes
            .iter()
            .map(|&n| Row {
                n,
                p2p_bytes: s.p2p(n),
                hb_bytes: s.hb(n),
                m_save: s.m_save(n),
                m_save_paper: 0.386 * (1.0 - 1.0 / n as f64),
            })
            .collect(),
    }
}

/// Renders the report for a terminal.
pub fn render(r: &MemoryReport) -> String {
    let mut out = format!(
        "profile {}: s_SDP = {} B ({:.1} KB), s_RDP = {} B ({:.1} KB), s_LDP = {} B ({:.1} KB)\n\
         M_save(n) = {:.3}(1 - 1/n)   (paper: 0.386(1 - 1/n); KB = 1000 B)\n\n",
        r.profile,
        r.s_sdp,
        r.s_sdp as f64 / 1000.0,
        r.s_rdp,
        r.s_rdp as f64 / 1000.0,
        r.s_ldp,
        r.s_ldp as f64 / 1000.0,
        r.m_save_coefficient
    );
    let mut t = Table::new(&["n", "p2p bytes", "hb bytes", "M_save", "paper"]);
    for row in &r.rows {
        t.row(vec![
            row.n.to_string(),
            row.p2p_bytes.to_string(),
            row.hb_bytes.to_string(),
            format!("{:.4}", row.m_save),
            format!("{:.4}", row.m_save_paper),
        ]);
    }
    out.push_str(&t.render());
    out
}

/// The EQA paper's memory table, measured from the allocated structures.
#[derive(clap::Args)]
pub struct Args {
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
}

impl Args {
    /// Prints the table (and plots it).
    pub fn run(self) -> ExitCode {
        let r = report(self.profile, &self.nodes);
        print_and_plot(self.json, &r, render, self.out.as_ref(), plot)
    }
}

/// Measured M_save(n) against the paper's 0.386(1 - 1/n).
pub fn plot(r: &MemoryReport, dir: &Path) -> Result<Vec<PathBuf>, String> {
    let c = Chart {
        title: format!("Memory saved by hardware broadcast (profile {})", r.profile),
        x_label: "group size n".into(),
        y_label: "M_save(n)".into(),
        log_x: true,
        log_y: false,
        series: vec![
            Series {
                limit: false,
                name: "measured".into(),
                points: r.rows.iter().map(|x| (x.n as f64, x.m_save)).collect(),
            },
            Series {
                limit: false,
                name: "paper: 0.386(1 - 1/n)".into(),
                points: r
                    .rows
                    .iter()
                    .map(|x| (x.n as f64, x.m_save_paper))
                    .collect(),
            },
        ],
    };
    draw(&c, dir, "memory-msave")
}
