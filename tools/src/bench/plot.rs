//! Plots of the benchmark results, PNG and SVG, with `plotters`.
//!
//! Text is drawn with the DejaVu Sans font of the system (Debian's `fonts-dejavu-core`, or the
//! TrueType file `ETHBCAST_PLOT_FONT` names), found when the first plot is drawn, through
//! plotters' pure-Rust `ab_glyph` renderer: no fontconfig or freetype needed. Without the font
//! a plot fails with an error that names the package.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;

/// The environment variable naming the TrueType font of the plots.
pub const FONT_ENV: &str = "ETHBCAST_PLOT_FONT";

/// Where distributions install DejaVu Sans: Debian and Ubuntu (`fonts-dejavu-core`), Fedora
/// (`dejavu-sans-fonts`), Arch (`ttf-dejavu`), openSUSE (`dejavu-fonts`).
const FONT_PATHS: [&str; 4] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/DejaVuSans.ttf",
];

/// The font file: `ETHBCAST_PLOT_FONT` if set (`env` looks it up), else the first of
/// `candidates` ([`FONT_PATHS`]) that exists.
fn font_path(
    env: impl Fn(&str) -> Option<std::ffi::OsString>,
    candidates: &[&str],
) -> Result<PathBuf, String> {
    if let Some(p) = env(FONT_ENV).filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    candidates
        .iter()
        .map(Path::new)
        .find(|p| p.is_file())
        .map(Path::to_path_buf)
        .ok_or_else(|| {
            format!(
                "no DejaVu Sans font for the plots (looked in {}): install it (Debian, Ubuntu: apt-get install fonts-dejavu-core) or set {FONT_ENV} to a TrueType font file",
                candidates.join(", ")
            )
        })
}

/// Reads the font once and registers it with plotters as "sans-serif"; the outcome of the
/// first call is every later call's.
fn register_font() -> Result<(), String> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            let path = font_path(|v| std::env::var_os(v), &FONT_PATHS)?;
            let bytes = std::fs::read(&path)
                .map_err(|e| format!("cannot read the plots' font {}: {e}", path.display()))?;
            // plotters keeps the font for the life of the process: it is read once.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).map_err(|_| {
                format!(
                    "{} is not a TrueType font the plots can use (set {FONT_ENV} to DejaVuSans.ttf)",
                    path.display()
                )
            })
        })
        .clone()
}

/// One line of a chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend.
    pub name: String,
    /// Points (x, y).
    pub points: Vec<(f64, f64)>,
    /// A limit of the other lines (the medium's own rate, say), not a measurement of the same
    /// kind: drawn dashed in dark grey, after the others so that it lies on top.
    pub limit: bool,
}

/// A line chart.
#[derive(Debug, Clone)]
pub struct Chart {
    /// Title.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// Logarithmic x axis.
    pub log_x: bool,
    /// Logarithmic y axis.
    pub log_y: bool,
    /// Lines.
    pub series: Vec<Series>,
}

/// The colour of a limit line.
const LIMIT_COLOR: RGBColor = RGBColor(0x44, 0x44, 0x44);

const COLORS: [RGBColor; 6] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
];

fn draw_in<DB, X, Y>(
    area: &DrawingArea<DB, Shift>,
    c: &Chart,
    x: X,
    y: Y,
    legend: Corner,
) -> Result<(), String>
where
    DB: DrawingBackend,
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| format!("plot {:?}: {e}", c.title);
    area.fill(&WHITE).map_err(e)?;
    let mut chart = ChartBuilder::on(area)
        .caption(&c.title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(x, y)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc(&c.x_label)
        .y_desc(&c.y_label)
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 16))
        .x_label_formatter(&|v| fmt_tick(*v))
        .y_label_formatter(&|v| fmt_tick(*v))
        .draw()
        .map_err(e)?;
    // Measured lines in the palette's order, limits after them in grey.
    let measured = c.series.iter().filter(|s| !s.limit);
    let colors = measured.zip(COLORS.iter().cycle().copied());
    let limits = c
        .series
        .iter()
        .filter(|s| s.limit)
        .map(|s| (s, LIMIT_COLOR));
    for (s, color) in colors.chain(limits) {
        let style = color.stroke_width(2);
        if s.limit {
            chart
                .draw_series(DashedLineSeries::new(s.points.iter().copied(), 8, 5, style))
                .map_err(e)?
                .label(s.name.clone())
                .legend(move |(x, y)| {
                    DashedPathElement::new(vec![(x, y), (x + 20, y)], 8, 5, style)
                });
        } else {
            chart
                .draw_series(LineSeries::new(s.points.iter().copied(), style))
                .map_err(e)?
                .label(s.name.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        }
        chart
            .draw_series(s.points.iter().map(|&p| Circle::new(p, 4, color.filled())))
            .map_err(e)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(legend.position())
        .draw()
        .map_err(e)?;
    area.present().map_err(e)?;
    Ok(())
}

fn fmt_tick(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 && (v / 1048576.0).fract() == 0.0 {
        format!("{}Mi", v / 1048576.0)
    } else if a >= 1024.0 && (v / 1024.0).fract() == 0.0 {
        format!("{}Ki", v / 1024.0)
    } else if a >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn range(vals: impl Iterator<Item = f64>, log: bool, from_zero: bool) -> (f64, f64) {
    let v: Vec<f64> = vals
        .filter(|v| v.is_finite() && (!log || *v > 0.0))
        .collect();
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !lo.is_finite() {
        return (if log { 1.0 } else { 0.0 }, 1.0);
    }
    if log {
        (lo / 1.5, hi * 1.5)
    } else {
        let pad = ((hi - lo) * 0.08).max(hi.abs() * 0.05).max(1e-9);
        (if from_zero { lo.min(0.0) } else { lo }, hi + pad)
    }
}

/// A corner of the plot, for the legend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Corner {
    UpperLeft,
    UpperRight,
    LowerRight,
    LowerLeft,
}

impl Corner {
    fn position(self) -> SeriesLabelPosition {
        match self {
            Corner::UpperLeft => SeriesLabelPosition::UpperLeft,
            Corner::UpperRight => SeriesLabelPosition::UpperRight,
            Corner::LowerRight => SeriesLabelPosition::LowerRight,
            Corner::LowerLeft => SeriesLabelPosition::LowerLeft,
        }
    }

    /// Whether the point at (u, v), each from 0 to 1 across the plot (v upwards), lies where
    /// the legend in this corner would cover it: the outer 45% of the width, 35% of the height.
    fn covers(self, u: f64, v: f64) -> bool {
        let left = u < 0.45;
        let right = u > 0.55;
        let upper = v > 0.65;
        let lower = v < 0.35;
        match self {
            Corner::UpperLeft => left && upper,
            Corner::UpperRight => right && upper,
            Corner::LowerRight => right && lower,
            Corner::LowerLeft => left && lower,
        }
    }
}

/// The corner where the legend covers the least of the lines (sampled along each segment),
/// the upper left on a tie, for axes from `x` and `y` (linear or logarithmic as `c` says).
fn legend_corner(c: &Chart, x: (f64, f64), y: (f64, f64)) -> Corner {
    let scale = |v: f64, (lo, hi): (f64, f64), log: bool| {
        if log {
            (v.ln() - lo.ln()) / (hi.ln() - lo.ln())
        } else {
            (v - lo) / (hi - lo)
        }
    };
    let mut samples = Vec::new();
    for s in &c.series {
        let at: Vec<(f64, f64)> = s
            .points
            .iter()
            .map(|&(px, py)| (scale(px, x, c.log_x), scale(py, y, c.log_y)))
            .collect();
        samples.extend(at.iter().copied());
        for w in at.windows(2) {
            for k in 1..8 {
                let t = f64::from(k) / 8.0;
                samples.push((
                    w[0].0 + t * (w[1].0 - w[0].0),
                    w[0].1 + t * (w[1].1 - w[0].1),
                ));
            }
        }
    }
    let corners = [
        Corner::UpperLeft,
        Corner::UpperRight,
        Corner::LowerRight,
        Corner::LowerLeft,
    ];
    corners
        .into_iter()
        .min_by_key(|corner| {
            samples
                .iter()
                .filter(|&&(u, v)| corner.covers(u, v))
                .count()
        })
        .unwrap_or(Corner::UpperLeft)
}

fn draw_on<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, c: &Chart) -> Result<(), String> {
    let (x0, x1) = range(
        c.series.iter().flat_map(|s| s.points.iter().map(|p| p.0)),
        c.log_x,
        false,
    );
    let (y0, y1) = range(
        c.series.iter().flat_map(|s| s.points.iter().map(|p| p.1)),
        c.log_y,
        true,
    );
    // A linear x axis starts at 0 when nothing lies left of it, as the y axis does.
    let (x0, x1) = if c.log_x {
        (x0, x1)
    } else {
        let pad = if x1 > x0 { (x1 - x0) * 0.05 } else { 0.5 };
        (if x0 >= 0.0 { 0.0 } else { x0 - pad }, x1 + pad)
    };
    let legend = legend_corner(c, (x0, x1), (y0, y1));
    match (c.log_x, c.log_y) {
        (false, false) => draw_in(area, c, x0..x1, y0..y1, legend),
        (true, false) => draw_in(area, c, (x0..x1).log_scale(), y0..y1, legend),
        (false, true) => draw_in(area, c, x0..x1, (y0..y1).log_scale(), legend),
        (true, true) => draw_in(area, c, (x0..x1).log_scale(), (y0..y1).log_scale(), legend),
    }
}

/// Draws `c` into `dir/stem.png` and `dir/stem.svg`; returns both paths.
pub fn draw(c: &Chart, dir: &Path, stem: &str) -> Result<Vec<PathBuf>, String> {
    register_font()?;
    std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let png = dir.join(format!("{stem}.png"));
    let svg = dir.join(format!("{stem}.svg"));
    {
        let area = BitMapBackend::new(&png, (900, 600)).into_drawing_area();
        draw_on(&area, c)?;
    }
    {
        let area = SVGBackend::new(&svg, (900, 600)).into_drawing_area();
        draw_on(&area, c)?;
    }
    Ok(vec![png, svg])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_legend_goes_to_the_corner_the_lines_leave_free() {
        let chart = |points: Vec<(f64, f64)>| Chart {
            title: "t".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            log_x: false,
            log_y: false,
            series: vec![Series {
                name: "a".into(),
                points,
                limit: false,
            }],
        };
        let corner = |points| legend_corner(&chart(points), (0.0, 10.0), (0.0, 100.0));
        // Lines along the top: the legend goes below them, on the right.
        assert_eq!(corner(vec![(0.0, 95.0), (10.0, 90.0)]), Corner::LowerRight);
        // A line rising from the lower left to the upper right: the upper left is free.
        assert_eq!(corner(vec![(0.0, 0.0), (10.0, 100.0)]), Corner::UpperLeft);
        // Falling from the upper left: the upper right is free.
        assert_eq!(corner(vec![(0.0, 100.0), (10.0, 0.0)]), Corner::UpperRight);
    }

    #[test]
    fn the_font_comes_from_the_environment_else_the_first_installed_file() {
        let dir = std::env::temp_dir().join(format!("ethbcast-font-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let here = dir.join("b.ttf");
        std::fs::write(&here, b"").unwrap();
        let (missing, here_s) = (dir.join("a.ttf"), here.to_str().unwrap());
        let none = |_: &str| None;
        let candidates = [missing.to_str().unwrap(), here_s];
        assert_eq!(font_path(none, &candidates).unwrap(), here);
        let set = |v: &str| (v == FONT_ENV).then(|| "/elsewhere/x.ttf".into());
        assert_eq!(
            font_path(set, &candidates).unwrap(),
            Path::new("/elsewhere/x.ttf")
        );
        // Nothing installed: the error names the package and the variable.
        let e = font_path(none, &candidates[..1]).unwrap_err();
        assert!(
            e.contains("fonts-dejavu-core") && e.contains(FONT_ENV) && e.contains("a.ttf"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_chart_renders_to_png_and_svg() {
        let dir = std::env::temp_dir().join(format!("ethbcast-plot-{}", std::process::id()));
        let c = Chart {
            title: "t".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            log_x: true,
            log_y: true,
            series: vec![Series {
                name: "a".into(),
                points: vec![(8.0, 10.0), (4096.0, 100.0)],
                limit: false,
            }],
        };
        let files = draw(&c, &dir, "t").unwrap();
        let png = std::fs::read(&files[0]).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        let svg = std::fs::read_to_string(&files[1]).unwrap();
        assert!(svg.contains("<svg"));
        let _ = std::fs::remove_dir_all(dir);
    }
}
