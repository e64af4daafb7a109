//! The README's distribution chart and the table beside it, both drawn from the rows of one
//! run of `ethbcast-bench distribute --out DIR`: goodput per receiver of ethbcast, UDPCast and
//! raw broadcast frames (the medium's limit) against the loss rate at the switch.
//!
//! The run writes the chart (`distribute-goodput.svg`, `.png`) and the table in Markdown
//! (`distribute-goodput.md`) from the same [`Point`]s; `docs/img/regenerate.sh` copies the chart
//! into `docs/img/` and the table into README.md, and a test here reads both back and checks
//! that they agree.

use std::path::{Path, PathBuf};

use super::distribute::Row;
use super::plot::{draw, Chart, Series};

/// The name of the chart's and the table's files, and of the raw frames' line.
pub const STEM: &str = "distribute-goodput";
/// The legend of the raw broadcast frames' line.
pub const LIMIT: &str = "raw broadcast frames (the limit)";

/// The goodput of each tool at one loss rate (and link backend), Mbit/s; `None` where the
/// tool was not run or its median run failed.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// Loss at the switch, percent.
    pub loss_pct: f64,
    /// Link backend of ethbcast and the raw frames.
    pub backend: String,
    /// ethbcast send/recv.
    pub ethbcast: Option<f64>,
    /// UDPCast.
    pub udpcast: Option<f64>,
    /// Raw broadcast frames, unreliable: the medium's limit.
    pub raw: Option<f64>,
}

/// A row's goodput, unless its median run failed.
fn goodput(r: &Row) -> Option<f64> {
    (r.goodput_mbit > 0.0 && !r.note.starts_with("FAILED")).then_some(r.goodput_mbit)
}

/// The points of a run, one per loss rate and backend, in the order the rows first name them.
/// UDPCast has no backend: its row goes with every backend's point at its loss rate.
pub fn points(rows: &[Row]) -> Vec<Point> {
    let mut points: Vec<Point> = Vec::new();
    let backends: Vec<&str> = rows
        .iter()
        .filter(|r| r.backend != "-")
        .map(|r| r.backend.as_str())
        .fold(Vec::new(), |mut seen, b| {
            if !seen.contains(&b) {
                seen.push(b);
            }
            seen
        });
    for r in rows {
        let at: Vec<&str> = if r.backend == "-" {
            backends.clone()
        } else {
            vec![r.backend.as_str()]
        };
        for backend in at {
            let i = match points
                .iter()
                .position(|p| p.loss_pct == r.loss_pct && p.backend == backend)
            {
                Some(i) => i,
                None => {
                    points.push(Point {
                        loss_pct: r.loss_pct,
                        backend: backend.to_string(),
                        ethbcast: None,
                        udpcast: None,
                        raw: None,
                    });
                    points.len() - 1
                }
            };
            let slot = match r.tool.as_str() {
                "ethbcast" => &mut points[i].ethbcast,
                "udpcast" => &mut points[i].udpcast,
                "raw-blaster" => &mut points[i].raw,
                _ => continue,
            };
            *slot = goodput(r);
        }
    }
    points
}

/// Whether the points name more than one backend (then the chart's lines and the table's rows
/// say which).
fn several_backends(points: &[Point]) -> bool {
    points.iter().any(|p| p.backend != points[0].backend)
}

/// The chart: a line per tool (and backend), the raw frames as the limit.
pub fn chart(points: &[Point]) -> Chart {
    let several = several_backends(points);
    let mut series: Vec<Series> = Vec::new();
    type Tool = fn(&Point) -> Option<f64>;
    let tools: [(&str, Tool, bool); 3] = [
        ("ethbcast", |p| p.ethbcast, false),
        ("UDPCast", |p| p.udpcast, false),
        (LIMIT, |p| p.raw, true),
    ];
    for (tool, value, limit) in tools {
        for p in points {
            let name = if several && tool != "UDPCast" {
                format!("{tool} ({})", p.backend)
            } else {
                tool.to_string()
            };
            let i = match series.iter().position(|s| s.name == name) {
                Some(i) => i,
                None => {
                    series.push(Series {
                        name,
                        points: Vec::new(),
                        limit,
                    });
                    series.len() - 1
                }
            };
            if let Some(v) = value(p) {
                if !series[i].points.contains(&(p.loss_pct, v)) {
                    series[i].points.push((p.loss_pct, v));
                }
            }
        }
    }
    series.retain(|s| !s.points.is_empty());
    Chart {
        title: "Distributing a file: goodput per receiver".into(),
        x_label: "loss at the switch (%)".into(),
        y_label: "goodput (Mbit/s)".into(),
        log_x: false,
        log_y: false,
        series,
    }
}

/// The table in Markdown, as README.md shows it: goodput per tool in Mbit/s and ethbcast over
/// the raw frames, per loss rate (and backend).
pub fn markdown(points: &[Point]) -> String {
    let several = several_backends(points);
    let cell = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    let mut out = String::from("| loss |");
    if several {
        out.push_str(" backend |");
    }
    out.push_str(&format!(
        " ethbcast | UDPCast | {LIMIT} | ethbcast / raw |\n|---|"
    ));
    if several {
        out.push_str("---|");
    }
    out.push_str("---|---|---|---|\n");
    for p in points {
        out.push_str(&format!("| {}% |", p.loss_pct));
        if several {
            out.push_str(&format!(" {} |", p.backend));
        }
        let ratio = match (p.ethbcast, p.raw) {
            (Some(e), Some(r)) if r > 0.0 => format!("**{:.2}**", e / r),
            _ => "-".to_string(),
        };
        out.push_str(&format!(
            " {} | {} | {} | {ratio} |\n",
            cell(p.ethbcast),
            cell(p.udpcast),
            cell(p.raw)
        ));
    }
    out
}

/// Writes the chart (`DIR/distribute-goodput.png`, `.svg`) and the table
/// (`DIR/distribute-goodput.md`) of `rows`; returns the files.
pub fn write(rows: &[Row], dir: &Path) -> Result<Vec<PathBuf>, String> {
    let points = points(rows);
    let mut files = draw(&chart(&points), dir, STEM)?;
    let md = dir.join(format!("{STEM}.md"));
    std::fs::write(&md, markdown(&points)).map_err(|e| format!("write {}: {e}", md.display()))?;
    files.push(md);
    Ok(files)
}

#[cfg(test)]
mod tests;
