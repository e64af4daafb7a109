//! The chart and the table from one run's points, and the README's pair read back: the values
//! the chart shows (decoded from its SVG: markers, axis ticks, legend) are the table's.

use super::*;
use crate::bench::cpu::CpuCost;

fn row(tool: &str, backend: &str, loss_pct: f64, goodput_mbit: f64, note: &str) -> Row {
    Row {
        tool: tool.into(),
        backend: backend.into(),
        loss_pct,
        goodput_mbit,
        seconds: 1.0,
        note: note.into(),
        runs: vec![goodput_mbit],
        cpu: CpuCost::default(),
        cpu_runs: Vec::new(),
    }
}

/// A run at 0% and 1% loss, UDPCast's 1% run failed.
fn run() -> Vec<Row> {
    vec![
        row("ethbcast", "ring", 0.0, 950.4, "all complete"),
        row("udpcast", "-", 0.0, 306.6, "ok"),
        row("raw-blaster", "ring", 0.0, 989.5, "99.9% of frames"),
        row("ethbcast", "ring", 1.0, 934.0, "all complete"),
        row("udpcast", "-", 1.0, 0.0, "FAILED: timeout"),
        row("raw-blaster", "ring", 1.0, 976.9, "99.0% of frames"),
    ]
}

#[test]
fn a_point_per_loss_rate_with_each_tool_and_none_for_a_failed_run() {
    let p = points(&run());
    assert_eq!(
        p,
        [
            Point {
                loss_pct: 0.0,
                backend: "ring".into(),
                ethbcast: Some(950.4),
                udpcast: Some(306.6),
                raw: Some(989.5),
            },
            Point {
                loss_pct: 1.0,
                backend: "ring".into(),
                ethbcast: Some(934.0),
                udpcast: None,
                raw: Some(976.9),
            },
        ]
    );
}

#[test]
fn the_table_lists_the_points_and_ethbcast_over_the_limit() {
    assert_eq!(
        markdown(&points(&run())),
        "| loss | ethbcast | UDPCast | raw broadcast frames (the limit) | ethbcast / raw |\n\
         |---|---|---|---|---|\n\
         | 0% | 950.4 | 306.6 | 989.5 | **0.96** |\n\
         | 1% | 934.0 | - | 976.9 | **0.96** |\n"
    );
}

#[test]
fn the_raw_frames_are_the_charts_limit_and_the_other_lines_measurements() {
    let c = chart(&points(&run()));
    let lines: Vec<(&str, bool, usize)> = c
        .series
        .iter()
        .map(|s| (s.name.as_str(), s.limit, s.points.len()))
        .collect();
    assert_eq!(
        lines,
        [
            ("ethbcast", false, 2),
            ("UDPCast", false, 1),
            (LIMIT, true, 2)
        ]
    );
}

/// What a chart's SVG shows: each legend entry's points in data units, and the smallest value
/// on each axis.
#[derive(Debug)]
struct Shown {
    lines: Vec<(String, Vec<(f64, f64)>)>,
    x_min: f64,
    y_min: f64,
    /// The value of a pixel on the y axis.
    y_per_px: f64,
}

fn attr(n: &roxmltree::Node, name: &str) -> f64 {
    n.attribute(name)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{} without a numeric {name}", n.tag_name().name()))
}

/// A linear map from pixels to values through the ticks (pixel, value) at either end, the
/// smallest tick's value and the value of a pixel.
fn axis(mut ticks: Vec<(f64, f64)>) -> (impl Fn(f64) -> f64, f64, f64) {
    assert!(ticks.len() >= 2, "an axis with fewer than 2 labelled ticks");
    ticks.sort_by(|a, b| a.1.total_cmp(&b.1));
    let ((p0, v0), (p1, v1)) = (ticks[0], ticks[ticks.len() - 1]);
    let per_px = (v1 - v0) / (p1 - p0);
    (move |p: f64| v0 + (p - p0) * per_px, v0, per_px.abs())
}

/// Reads back what plotters drew: tick labels (numbers anchored at the end are the y axis's,
/// numbers centred under the plot the x axis's), markers (circles, by fill colour), and the
/// legend (its texts beside the short coloured lines inside its frame).
fn shown(svg: &str) -> Shown {
    let doc = roxmltree::Document::parse(svg).expect("the chart is SVG");
    let nodes: Vec<roxmltree::Node> = doc.descendants().filter(|n| n.is_element()).collect();
    let text = |n: &roxmltree::Node| n.text().unwrap_or("").trim().to_string();
    let (mut xt, mut yt) = (Vec::new(), Vec::new());
    for n in nodes.iter().filter(|n| n.has_tag_name("text")) {
        let Ok(v) = text(n).parse::<f64>() else {
            continue;
        };
        match (n.attribute("text-anchor"), n.attribute("transform")) {
            (Some("end"), None) => yt.push((attr(n, "y"), v)),
            (Some("middle"), None) => xt.push((attr(n, "x"), v)),
            _ => {}
        }
    }
    let (x_of, x_min, _) = axis(xt);
    let (y_of, y_min, y_per_px) = axis(yt);
    // The legend's frame: the unfilled rectangle with a black border.
    let frame = nodes
        .iter()
        .find(|n| n.has_tag_name("rect") && n.attribute("fill") == Some("none"))
        .expect("the legend's frame");
    let (fx, fy) = (attr(frame, "x"), attr(frame, "y"));
    let (fw, fh) = (attr(frame, "width"), attr(frame, "height"));
    let inside = |x: f64, y: f64| x >= fx && x <= fx + fw && y >= fy && y <= fy + fh;
    // Its samples: coloured horizontal strokes inside it that start near its left edge (data
    // lines may cross the frame), (y, colour).
    let samples: Vec<(f64, String)> = nodes
        .iter()
        .filter(|n| n.has_tag_name("polyline") || n.has_tag_name("line"))
        .filter_map(|n| {
            let stroke = n.attribute("stroke")?.to_string();
            let pts: Vec<(f64, f64)> = match n.attribute("points") {
                Some(p) => p
                    .split_whitespace()
                    .filter_map(|xy| xy.split_once(','))
                    .filter_map(|(x, y)| Some((x.parse().ok()?, y.parse().ok()?)))
                    .collect(),
                None => vec![
                    (attr(n, "x1"), attr(n, "y1")),
                    (attr(n, "x2"), attr(n, "y2")),
                ],
            };
            let flat = pts.windows(2).all(|w| w[0].1 == w[1].1);
            let near_edge = pts[0].0 - fx <= 15.0;
            (stroke != "#000000" && flat && near_edge && pts.iter().all(|&(x, y)| inside(x, y)))
                .then(|| (pts[0].1, stroke))
        })
        .collect();
    let mut lines = Vec::new();
    for n in nodes.iter().filter(|n| n.has_tag_name("text")) {
        if n.attribute("text-anchor") != Some("start") || !inside(attr(n, "x"), attr(n, "y")) {
            continue;
        }
        let y = attr(n, "y");
        let colour = samples
            .iter()
            .min_by(|a, b| (a.0 - y).abs().total_cmp(&(b.0 - y).abs()))
            .map(|s| s.1.clone())
            .expect("a legend sample");
        let points = nodes
            .iter()
            .filter(|c| c.has_tag_name("circle") && c.attribute("fill") == Some(colour.as_str()))
            .map(|c| (x_of(attr(c, "cx")), y_of(attr(c, "cy"))))
            .collect();
        lines.push((text(n), points));
    }
    Shown {
        lines,
        x_min,
        y_min,
        y_per_px,
    }
}

/// `points` shown as `svg` shows them: every tool's value at every loss rate within 1% or a
/// pixel and a half of the y axis, the axes from 0, the limit at or above the other lines.
fn assert_shows(svg: &str, points: &[Point]) {
    let s = shown(svg);
    assert_eq!(s.x_min, 0.0, "the x axis starts at 0: {s:?}");
    assert_eq!(s.y_min, 0.0, "the y axis starts at 0: {s:?}");
    let line = |name: &str| -> Vec<(f64, f64)> {
        s.lines
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, p)| p.clone())
            .unwrap_or_default()
    };
    let px = s.y_per_px;
    type Tool = fn(&Point) -> Option<f64>;
    let tools: [(&str, Tool); 3] = [
        ("ethbcast", |p| p.ethbcast),
        ("UDPCast", |p| p.udpcast),
        (LIMIT, |p| p.raw),
    ];
    for (name, value) in tools {
        let drawn = line(name);
        let want: Vec<(f64, f64)> = points
            .iter()
            .filter_map(|p| value(p).map(|v| (p.loss_pct, v)))
            .collect();
        assert_eq!(
            drawn.len(),
            want.len(),
            "{name}: the chart has {drawn:?}, the table {want:?}"
        );
        for (&(dx, dy), &(x, y)) in drawn.iter().zip(&want) {
            assert!(
                (dx - x).abs() < 0.02 && (dy - y).abs() <= (0.01 * y).max(1.5 * px),
                "{name} at {x}% loss: the chart shows {dy:.1} at {dx:.2}%, the table {y}"
            );
        }
    }
    for p in points {
        for v in [p.ethbcast, p.udpcast].into_iter().flatten() {
            let raw = p.raw.expect("a limit at every loss rate");
            assert!(
                raw >= v,
                "at {}% the limit {raw} lies below {v}",
                p.loss_pct
            );
        }
    }
}

#[test]
fn the_chart_shows_the_points_of_its_table() {
    let dir = std::env::temp_dir().join(format!("ethbcast-goodput-{}", std::process::id()));
    let files = write(&run(), &dir).expect("chart and table");
    let svg = std::fs::read_to_string(dir.join(format!("{STEM}.svg"))).expect("svg");
    assert_shows(&svg, &points(&run()));
    let md = std::fs::read_to_string(dir.join(format!("{STEM}.md"))).expect("md");
    assert_eq!(md, markdown(&points(&run())));
    assert_eq!(files.len(), 3, "{files:?}");
    let _ = std::fs::remove_dir_all(dir);
}

/// The table between README's markers, as points (one backend).
fn readme_points(readme: &str) -> Vec<Point> {
    let begin = "<!-- distribute-goodput table: begin -->";
    let end = "<!-- distribute-goodput table: end -->";
    let from = readme.find(begin).expect("README's table markers") + begin.len();
    let to = from + readme[from..].find(end).expect("README's table end marker");
    let number = |c: &str| -> Option<f64> { c.trim().trim_matches('*').trim().parse().ok() };
    readme[from..to]
        .lines()
        .filter(|l| l.starts_with("| ") && l.contains('%'))
        .map(|l| {
            let cells: Vec<&str> = l.trim().trim_matches('|').split('|').collect();
            assert_eq!(cells.len(), 5, "a row of five cells: {l}");
            Point {
                loss_pct: number(cells[0].trim().trim_end_matches('%')).expect("loss"),
                backend: "ring".into(),
                ethbcast: number(cells[1]),
                udpcast: number(cells[2]),
                raw: number(cells[3]),
            }
        })
        .collect()
}

/// README.md's goodput table and the chart above it (`docs/img/distribute-goodput.svg`) show
/// the same values: `docs/img/regenerate.sh` writes both from one run.
#[test]
fn the_readme_chart_shows_the_readme_table() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let svg = std::fs::read_to_string(root.join("docs/img/distribute-goodput.svg"))
        .expect("docs/img/distribute-goodput.svg");
    let points = readme_points(&readme);
    assert!(points.len() >= 2, "README's table: {points:?}");
    assert_shows(&svg, &points);
}
