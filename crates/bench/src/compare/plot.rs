//! Charts with every server side by side (ferrobench's own `--plot` draws
//! one server per file):
//! - p99 and p50 latency against achieved throughput over the points of each
//!   server's SLO search, plus the SLO;
//! - the connection sweep in LegUp's shape: throughput and p99 against
//!   connections on a log axis, in two panels of one SVG.

use std::fmt::Write;

use super::servers::Kind;
use crate::plot::{legend, open_svg, BOTTOM, LEFT, RIGHT, TOP};

const W: f64 = 760.0;
const H: f64 = 460.0;

fn color(kind: Kind) -> &'static str {
    match kind {
        Kind::Ferrocache => "#d62728",
        Kind::Memcached => "#1f77b4",
        Kind::Floor => "#7f7f7f",
    }
}

/// Rounds up to 1, 2 or 5 times a power of ten.
fn nice_ceiling(v: f64) -> f64 {
    let p = 10f64.powf(v.max(1e-9).log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|&c| c >= v)
        .unwrap_or(10.0 * p)
}

fn label(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.0}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// A latency in µs with its unit: `500 µs`, `20 ms`, `1.5 s`.
fn latency_label(us: f64) -> String {
    let trim = |v: f64| {
        let t = format!("{v:.1}");
        t.strip_suffix(".0").map_or(t.clone(), str::to_string)
    };
    if us >= 1e6 {
        format!("{} s", trim(us / 1e6))
    } else if us >= 1e3 {
        format!("{} ms", trim(us / 1e3))
    } else {
        format!("{} µs", trim(us))
    }
}

/// One server's points: (achieved ops/s, p50 µs, p99 µs).
pub type Curve = Vec<(f64, f64, f64)>;

/// `series`: per server, points of (achieved ops/s, p50 µs, p99 µs).
/// `target_us` is drawn dashed. The y axis stops at 3× the target, so one
/// overloaded point does not flatten the rest.
pub fn latency_vs_throughput(title: &str, series: &[(Kind, Curve)], target_us: f64) -> String {
    let x_max = nice_ceiling(
        series
            .iter()
            .flat_map(|(_, p)| p.iter().map(|q| q.0))
            .fold(1.0, f64::max)
            * 1.05,
    );
    let y_max = nice_ceiling(
        series
            .iter()
            .flat_map(|(_, p)| p.iter().map(|q| q.2))
            .fold(target_us * 1.5, f64::max)
            .min(target_us * 3.0),
    );
    let px = |x: f64| LEFT + x / x_max * (W - LEFT - RIGHT);
    let py = |y: f64| H - BOTTOM - y.min(y_max) / y_max * (H - TOP - BOTTOM);
    let mut svg = open_svg(
        W,
        H,
        title,
        "achieved throughput (ops/s)",
        &format!("latency (µs; clipped at {y_max:.0})"),
    );
    for i in 0..=5 {
        let (x, y) = (x_max * f64::from(i) / 5.0, y_max * f64::from(i) / 5.0);
        let _ = writeln!(
            svg,
            r##"<line x1="{0}" y1="{TOP}" x2="{0}" y2="{1}" stroke="#ddd"/><text x="{0}" y="{2}" text-anchor="middle">{3}</text>"##,
            px(x),
            H - BOTTOM,
            H - BOTTOM + 18.0,
            label(x)
        );
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" y1="{0}" x2="{1}" y2="{0}" stroke="#ddd"/><text x="{2}" y="{3}" text-anchor="end">{4}</text>"##,
            py(y),
            W - RIGHT,
            LEFT - 6.0,
            py(y) + 4.0,
            label(y)
        );
    }
    let mut slot = 0;
    for (kind, points) in series {
        let mut pts = points.clone();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        for (q, dash, name) in [
            (2usize, "", "p99"),
            (1, r#" stroke-dasharray="2,3""#, "p50"),
        ] {
            let line: Vec<String> = pts
                .iter()
                .map(|p| {
                    let y = if q == 2 { p.2 } else { p.1 };
                    format!("{:.1},{:.1}", px(p.0), py(y))
                })
                .collect();
            let c = color(*kind);
            let _ = writeln!(
                svg,
                r#"<polyline points="{}" fill="none" stroke="{c}" stroke-width="2"{dash}/>"#,
                line.join(" ")
            );
            for p in &pts {
                let y = if q == 2 { p.2 } else { p.1 };
                let _ = writeln!(
                    svg,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="2.5" fill="{c}"/>"#,
                    px(p.0),
                    py(y)
                );
            }
            legend(&mut svg, slot, c, dash, &format!("{} {name}", kind.name()));
            slot += 1;
        }
    }
    let _ = writeln!(
        svg,
        r##"<line x1="{LEFT}" y1="{0}" x2="{1}" y2="{0}" stroke="#2ca02c" stroke-width="2" stroke-dasharray="6,4"/>"##,
        py(target_us),
        W - RIGHT
    );
    legend(
        &mut svg,
        slot,
        "#2ca02c",
        r#" stroke-dasharray="6,4""#,
        &format!("target {} µs", label(target_us)),
    );
    svg.push_str("</svg>\n");
    svg
}

/// One line of the connection sweep's plot: one server at one pipeline
/// depth, points of (connections, ops/s, p99 µs).
pub struct SweepLine {
    pub kind: Kind,
    pub pipeline: usize,
    pub points: Vec<(f64, f64, f64)>,
}

/// Sweep plot geometry: two panels over one log x axis, legend below.
const SW_H: f64 = 800.0;
const SW_PANEL: f64 = 280.0;
const SW_GAP: f64 = 60.0;

/// `log10` positions of the decades around `[lo, hi]`.
fn decades(lo: f64, hi: f64) -> (f64, f64) {
    let a = lo.max(1e-9).log10().floor();
    let b = hi.max(lo * 1.0001).log10().ceil();
    (a, b.max(a + 1.0))
}

/// Where the sweep plot puts a value: connections on a log x axis shared
/// by both panels, throughput linear from 0 in the top panel, p99 latency on
/// a log axis in the bottom one.
struct SweepAxes {
    /// Decades (`log10`) the x axis spans.
    x0: f64,
    x1: f64,
    /// The top of the throughput axis.
    y_max: f64,
    /// Decades the latency axis spans.
    l0: f64,
    l1: f64,
    /// The top edges of the two panels.
    top1: f64,
    top2: f64,
}

impl SweepAxes {
    fn fit(lines: &[SweepLine]) -> SweepAxes {
        let all = || lines.iter().flat_map(|l| l.points.iter());
        let (x0, x1) = decades(
            all().map(|p| p.0).fold(f64::INFINITY, f64::min).max(1.0),
            all().map(|p| p.0).fold(1.0, f64::max),
        );
        let y_max = nice_ceiling(all().map(|p| p.1).fold(1.0, f64::max) * 1.05);
        let (l0, l1) = decades(
            all()
                .map(|p| p.2)
                .filter(|v| *v > 0.0)
                .fold(f64::INFINITY, f64::min)
                .min(1e9),
            all().map(|p| p.2).fold(1.0, f64::max),
        );
        SweepAxes {
            x0,
            x1,
            y_max,
            l0,
            l1,
            top1: TOP,
            top2: TOP + SW_PANEL + SW_GAP,
        }
    }

    fn px(&self, x: f64) -> f64 {
        LEFT + (x.max(1e-9).log10() - self.x0) / (self.x1 - self.x0) * (W - LEFT - RIGHT)
    }

    fn py_ops(&self, y: f64) -> f64 {
        self.top1 + SW_PANEL - y.min(self.y_max) / self.y_max * SW_PANEL
    }

    fn py_lat(&self, y: f64) -> f64 {
        let t = (y.max(1e-9).log10().clamp(self.l0, self.l1) - self.l0) / (self.l1 - self.l0);
        self.top2 + SW_PANEL - t * SW_PANEL
    }
}

/// LegUp's figure: throughput (top, linear from 0) and p99 latency (bottom,
/// log) against connections (log), one colour per server; lines at
/// `solid_pipeline` are solid, other depths dashed with open markers.
pub fn connection_sweep(title: &str, lines: &[SweepLine], solid_pipeline: usize) -> String {
    let a = SweepAxes::fit(lines);
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{SW_H}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="22" text-anchor="middle" font-size="15">{title}</text>
<text transform="translate(18,{}) rotate(-90)" text-anchor="middle">throughput (ops/s)</text>
<text transform="translate(18,{}) rotate(-90)" text-anchor="middle">p99 latency (log)</text>
<text x="{}" y="{}" text-anchor="middle">connections (log)</text>
"#,
        W / 2.0,
        a.top1 + SW_PANEL / 2.0,
        a.top2 + SW_PANEL / 2.0,
        LEFT + (W - LEFT - RIGHT) / 2.0,
        a.top2 + SW_PANEL + 40.0,
    );
    for top in [a.top1, a.top2] {
        let _ = writeln!(
            svg,
            r#"<rect x="{LEFT}" y="{top}" width="{}" height="{SW_PANEL}" fill="none" stroke="black"/>"#,
            W - LEFT - RIGHT
        );
    }
    connections_grid(&mut svg, &a);
    for i in 0..=5 {
        let y = a.y_max * f64::from(i) / 5.0;
        y_grid_line(&mut svg, a.py_ops(y), &label(y));
    }
    for d in (a.l0 as i32)..=(a.l1 as i32) {
        let y = 10f64.powi(d);
        y_grid_line(&mut svg, a.py_lat(y), &latency_label(y));
    }
    for (n, line) in lines.iter().enumerate() {
        sweep_line(&mut svg, &a, n, line, line.pipeline == solid_pipeline);
    }
    svg.push_str("</svg>\n");
    svg
}

/// The vertical grid of both panels: every decade labelled (under both
/// panels), 2..9 faint.
fn connections_grid(svg: &mut String, a: &SweepAxes) {
    for d in (a.x0 as i32)..=(a.x1 as i32) {
        for m in 1..10 {
            let x = f64::from(m) * 10f64.powi(d);
            if x.log10() > a.x1 + 1e-9 {
                break;
            }
            let stroke = if m == 1 { "#ccc" } else { "#eee" };
            for top in [a.top1, a.top2] {
                let _ = writeln!(
                    svg,
                    r#"<line x1="{0:.1}" y1="{top}" x2="{0:.1}" y2="{1}" stroke="{stroke}"/>"#,
                    a.px(x),
                    top + SW_PANEL
                );
            }
            if m == 1 {
                for top in [a.top1, a.top2] {
                    let _ = writeln!(
                        svg,
                        r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
                        a.px(x),
                        top + SW_PANEL + 16.0,
                        label(x)
                    );
                }
            }
        }
    }
}

/// A horizontal grid line across the plot at `y` px, labelled on the left.
fn y_grid_line(svg: &mut String, y: f64, text: &str) {
    let _ = writeln!(
        svg,
        r##"<line x1="{LEFT}" y1="{0:.1}" x2="{1}" y2="{0:.1}" stroke="#ddd"/><text x="{2}" y="{3:.1}" text-anchor="end">{4}</text>"##,
        y,
        W - RIGHT,
        LEFT - 6.0,
        y + 4.0,
        text
    );
}

/// Line `n` of the sweep plot in both panels, and its legend entry below.
fn sweep_line(svg: &mut String, a: &SweepAxes, n: usize, line: &SweepLine, solid: bool) {
    let c = color(line.kind);
    let dash = if solid {
        ""
    } else {
        r#" stroke-dasharray="6,4""#
    };
    let fill = if solid { c } else { "white" };
    let mut pts = line.points.clone();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    for (y_of, py) in [
        (
            (|p: &(f64, f64, f64)| p.1) as fn(&(f64, f64, f64)) -> f64,
            SweepAxes::py_ops as fn(&SweepAxes, f64) -> f64,
        ),
        (|p| p.2, SweepAxes::py_lat),
    ] {
        let coords: Vec<String> = pts
            .iter()
            .map(|p| format!("{:.1},{:.1}", a.px(p.0), py(a, y_of(p))))
            .collect();
        let _ = writeln!(
            svg,
            r#"<polyline points="{}" fill="none" stroke="{c}" stroke-width="2"{dash}/>"#,
            coords.join(" ")
        );
        for p in &pts {
            let _ = writeln!(
                svg,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{fill}" stroke="{c}"/>"#,
                a.px(p.0),
                py(a, y_of(p))
            );
        }
    }
    let (lx, ly) = (
        LEFT + 10.0 + 220.0 * (n % 3) as f64,
        a.top2 + SW_PANEL + 68.0 + 20.0 * (n / 3) as f64,
    );
    let _ = writeln!(
        svg,
        r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{c}" stroke-width="2"{dash}/><text x="{}" y="{}">{} pipeline {}</text>"#,
        lx + 24.0,
        lx + 30.0,
        ly + 4.0,
        line.kind.name(),
        line.pipeline
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_plot_has_both_panels_and_a_line_per_server_and_depth() {
        let line = |kind, pipeline, points: Vec<(f64, f64, f64)>| SweepLine {
            kind,
            pipeline,
            points,
        };
        let svg = connection_sweep(
            "sweep",
            &[
                line(
                    Kind::Ferrocache,
                    16,
                    vec![(5.0, 1e6, 80.0), (1400.0, 3e6, 9000.0)],
                ),
                line(
                    Kind::Memcached,
                    16,
                    vec![(5.0, 3e5, 250.0), (1400.0, 5e5, 45_000.0)],
                ),
                line(
                    Kind::Ferrocache,
                    1,
                    vec![(1400.0, 3e5, 4000.0), (10_000.0, 2.5e5, 40_000.0)],
                ),
            ],
            16,
        );
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert_eq!(
            svg.matches("<polyline").count(),
            6,
            "throughput and p99 per line"
        );
        assert_eq!(
            svg.matches("stroke-dasharray").count(),
            3,
            "the p1 line twice, its legend once"
        );
        assert!(svg.contains("ferrocache pipeline 1") && svg.contains("memcached pipeline 16"));
        // Decades from 1 to 10k on x, labelled under both panels.
        assert_eq!(svg.matches(">10k</text>").count(), 2, "under both panels");
        assert!(
            svg.contains(">10 ms</text>") && svg.contains(">100 µs</text>"),
            "{svg}"
        );
        // The log x axis: 10 sits a quarter of the way from 1 to 10 000.
        let quarter = LEFT + (W - LEFT - RIGHT) / 4.0;
        assert!(
            svg.contains(&format!(
                r#"x="{quarter:.1}" y="336" text-anchor="middle">10<"#
            )),
            "{svg}"
        );
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }

    #[test]
    fn latency_labels_carry_their_unit() {
        assert_eq!(latency_label(100.0), "100 µs");
        assert_eq!(latency_label(1e4), "10 ms");
        assert_eq!(latency_label(1.5e6), "1.5 s");
    }

    #[test]
    fn one_polyline_per_server_and_percentile() {
        let svg = latency_vs_throughput(
            "t",
            &[
                (
                    Kind::Ferrocache,
                    vec![(1e3, 50.0, 90.0), (5e4, 70.0, 900.0)],
                ),
                (
                    Kind::Memcached,
                    vec![(1e3, 60.0, 95.0), (4e4, 80.0, 5000.0)],
                ),
            ],
            1000.0,
        );
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<polyline").count(), 4);
        assert!(svg.contains("ferrocache p99") && svg.contains("memcached p50"));
        assert!(svg.contains("target 1k µs"));
    }
}
