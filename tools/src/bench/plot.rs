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

const COLORS: [RGBColor; 6] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
];

fn draw_in<DB, X, Y>(area: &DrawingArea<DB, Shift>, c: &Chart, x: X, y: Y) -> Result<(), String>
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
    for (i, s) in c.series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(e)?
            .label(s.name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(s.points.iter().map(|&p| Circle::new(p, 4, color.filled())))
            .map_err(e)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::UpperLeft)
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
    let (x0, x1) = if c.log_x {
        (x0, x1)
    } else {
        let pad = ((x1 - x0) * 0.05).max(0.5);
        (x0 - pad, x1 + pad)
    };
    match (c.log_x, c.log_y) {
        (false, false) => draw_in(area, c, x0..x1, y0..y1),
        (true, false) => draw_in(area, c, (x0..x1).log_scale(), y0..y1),
        (false, true) => draw_in(area, c, x0..x1, (y0..y1).log_scale()),
        (true, true) => draw_in(area, c, (x0..x1).log_scale(), (y0..y1).log_scale()),
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
