//! `--plot FILE.svg`: the figures the seed papers show, as plain SVG.
//!
//! - The latency CDF as a percentile spectrum: x is `1/(1-q)` on a log
//!   scale (50 %, 90 %, 99 %, ... evenly spaced), y is latency in µs.
//! - For `--slo` and `--rate-sweep`, latency (p50 and p99) against achieved
//!   throughput, with the SLO target as a dashed line.
//! - The timeline: requests completed per second, and the seconds with
//!   errors (`--keep-going`'s lost connections among them) marked in red.
//!
//! Latency axes are logarithmic: p50 and p99.99 often differ a hundredfold,
//! and a linear axis squeezes everything below the tail into its bottom
//! pixels. Every axis spans the data it shows, with a small margin, and no
//! more, so nothing is drawn past the data.
//!
//! Hand-written SVG: a few polylines do not justify a plotting crate.

use std::fmt::Write;

use hdrhistogram::Histogram;

use crate::search::Series;
use crate::stats::Second;

const W: f64 = 720.0;
const H: f64 = 440.0;
/// The margins around the plot area, in px (`compare`'s charts use them too).
pub(crate) const LEFT: f64 = 80.0;
pub(crate) const RIGHT: f64 = 30.0;
pub(crate) const TOP: f64 = 40.0;
pub(crate) const BOTTOM: f64 = 60.0;
const COLORS: [&str; 3] = ["#1f77b4", "#d62728", "#2ca02c"];
/// A log axis extends this factor past the data at each end.
const LOG_MARGIN: f64 = 1.15;
/// The smallest latency a log axis starts at, in µs (1 ns).
const MIN_LOG_US: f64 = 1e-3;
/// Height of the error marker strip along the bottom of a timeline, in px.
const STRIP_PX: f64 = 10.0;

/// How y values map to the plot's height.
#[derive(Clone, Copy, Debug, PartialEq)]
enum YAxis {
    /// From 0 to `max`.
    Linear { max: f64 },
    /// From `min` to `max`, both positive, on a log scale.
    Log { min: f64, max: f64 },
}

impl YAxis {
    /// A log axis over data from `lo` to `hi`, with a margin at each end.
    fn log_fit(lo: f64, hi: f64) -> YAxis {
        let lo = lo.max(MIN_LOG_US);
        let hi = hi.max(lo);
        YAxis::Log {
            min: lo / LOG_MARGIN,
            max: hi * LOG_MARGIN,
        }
    }

    /// Where `v` sits, from 0 (bottom) to 1 (top), clamped to the axis.
    fn fraction(&self, v: f64) -> f64 {
        match *self {
            YAxis::Linear { max } => (v / max).clamp(0.0, 1.0),
            YAxis::Log { min, max } => {
                ((v.max(min).ln() - min.ln()) / (max.ln() - min.ln())).clamp(0.0, 1.0)
            }
        }
    }

    /// Grid values: six even steps (linear), or 1, 2 and 5 times each power
    /// of ten inside the range (log).
    fn ticks(&self) -> Vec<f64> {
        match *self {
            YAxis::Linear { max } => {
                // The largest 1-2-5 step that gives at least four lines.
                let mut step = 10f64.powf((max / 4.0).log10().floor());
                for m in [5.0, 2.0] {
                    if max / (m * step) >= 4.0 {
                        step *= m;
                        break;
                    }
                }
                (0..)
                    .map(|i| f64::from(i) * step)
                    .take_while(|&t| t <= max)
                    .collect()
            }
            YAxis::Log { min, max } => {
                let mut ticks = Vec::new();
                let mut decade = 10f64.powf(min.log10().floor());
                while decade <= max {
                    for m in [1.0, 2.0, 5.0] {
                        let t = m * decade;
                        if t >= min && t <= max {
                            ticks.push(t);
                        }
                    }
                    decade *= 10.0;
                }
                ticks
            }
        }
    }
}

/// The start of a `w` × `h` px chart: the white background, the title, the
/// axis labels and the plot area's frame inside the margins.
pub(crate) fn open_svg(w: f64, h: f64, title: &str, x_label: &str, y_label: &str) -> String {
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="22" text-anchor="middle" font-size="15">{title}</text>
<text x="{}" y="{}" text-anchor="middle">{x_label}</text>
<text transform="translate(18,{}) rotate(-90)" text-anchor="middle">{y_label}</text>
<rect x="{LEFT}" y="{TOP}" width="{}" height="{}" fill="none" stroke="black"/>
"#,
        w / 2.0,
        LEFT + (w - LEFT - RIGHT) / 2.0,
        h - 15.0,
        TOP + (h - TOP - BOTTOM) / 2.0,
        w - LEFT - RIGHT,
        h - TOP - BOTTOM
    );
    svg
}

/// Legend entry `slot` (0 at the top) in the plot area's top left corner: a
/// short line in `color`, `dash` its SVG dash attribute (or empty), and
/// `label`.
pub(crate) fn legend(svg: &mut String, slot: usize, color: &str, dash: &str, label: &str) {
    let ly = TOP + 16.0 + 16.0 * slot as f64;
    let _ = writeln!(
        svg,
        r#"<line x1="{}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="2"{dash}/><text x="{}" y="{}">{label}</text>"#,
        LEFT + 12.0,
        LEFT + 36.0,
        LEFT + 42.0,
        ly + 4.0
    );
}

/// A chart with x in `[x_min, x_max]` (caller-mapped) and the given y axis.
struct Chart {
    svg: String,
    x_min: f64,
    x_max: f64,
    y: YAxis,
}

impl Chart {
    fn new(title: &str, labels: (&str, &str), x: (f64, f64), y: YAxis) -> Chart {
        let (x_label, y_label) = labels;
        let svg = open_svg(W, H, title, x_label, y_label);
        let (x_min, x_max) = (x.0, x.1.max(x.0 + 1e-9));
        let mut chart = Chart {
            svg,
            x_min,
            x_max,
            y,
        };
        for v in y.ticks() {
            let y = chart.py(v);
            let _ = writeln!(
                chart.svg,
                r##"<line x1="{LEFT}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
                W - RIGHT,
                LEFT - 6.0,
                y + 4.0,
                fmt_num(v)
            );
        }
        chart
    }

    fn px(&self, x: f64) -> f64 {
        LEFT + (x - self.x_min) / (self.x_max - self.x_min) * (W - LEFT - RIGHT)
    }

    fn py(&self, y: f64) -> f64 {
        H - BOTTOM - self.y.fraction(y) * (H - TOP - BOTTOM)
    }

    /// A vertical grid line and label at `x`, if `x` is on the axis.
    fn x_tick(&mut self, x: f64, label: &str) {
        if x < self.x_min - 1e-9 || x > self.x_max + 1e-9 {
            return;
        }
        let px = self.px(x);
        let _ = writeln!(
            self.svg,
            r##"<line x1="{px:.1}" y1="{TOP}" x2="{px:.1}" y2="{}" stroke="#ddd"/><text x="{px:.1}" y="{}" text-anchor="middle">{label}</text>"##,
            H - BOTTOM,
            H - BOTTOM + 18.0
        );
    }

    fn line(&mut self, points: &[(f64, f64)], color: &str, label: &str, slot: usize, dashed: bool) {
        let pts: Vec<String> = points
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", self.px(x), self.py(y)))
            .collect();
        let dash = if dashed {
            r#" stroke-dasharray="6,4""#
        } else {
            ""
        };
        let _ = writeln!(
            self.svg,
            r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"{dash}/>"#,
            pts.join(" ")
        );
        legend(&mut self.svg, slot, color, dash, label);
    }

    fn finish(mut self) -> String {
        self.svg.push_str("</svg>\n");
        self.svg
    }
}

fn fmt_num(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if v >= 10.0 || v == 0.0 {
        format!("{v:.0}")
    } else if v >= 0.1 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// The smallest and largest of `values`.
fn min_max(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values.fold((f64::INFINITY, 0.0), |(lo, hi), v| (lo.min(v), hi.max(v)))
}

/// The percentile spectrum of `h` (latencies in ns), plotted in µs.
pub fn latency_cdf(h: &Histogram<u64>, title: &str) -> String {
    let nines = 5.0;
    let mut points: Vec<(f64, f64)> = Vec::new();
    for v in h.iter_quantiles(5) {
        let q = v.quantile_iterated_to();
        let x = if q >= 1.0 {
            nines
        } else {
            (1.0 / (1.0 - q)).log10().min(nines)
        };
        points.push((x, v.value_iterated_to() as f64 / 1e3));
    }
    let (lo, hi) = min_max(points.iter().map(|p| p.1));
    let (x_lo, x_hi) = min_max(points.iter().map(|p| p.0));
    let x = if points.is_empty() {
        (0.0, 1.0)
    } else {
        (x_lo, x_hi)
    };
    let mut chart = Chart::new(
        title,
        ("percentile", "latency (µs, log scale)"),
        x,
        YAxis::log_fit(lo.min(hi), hi),
    );
    for (i, label) in ["0%", "90%", "99%", "99.9%", "99.99%", "99.999%"]
        .iter()
        .enumerate()
    {
        chart.x_tick(i as f64, label);
    }
    chart.line(&points, COLORS[0], "latency", 0, false);
    chart.finish()
}

/// p50 and p99 against achieved throughput over a series of runs.
pub fn latency_vs_throughput(series: &Series, title: &str) -> String {
    let runs: Vec<_> = series.points.iter().map(|p| &p.result).collect();
    let q = |r: &crate::engine::RunResult, q: f64| {
        r.stats.total.latency.value_at_quantile(q) as f64 / 1e3
    };
    let p99: Vec<(f64, f64)> = runs.iter().map(|r| (r.ops_per_sec(), q(r, 0.99))).collect();
    let p50: Vec<(f64, f64)> = runs.iter().map(|r| (r.ops_per_sec(), q(r, 0.5))).collect();
    let target = series.slo.map(|s| s.latency.as_secs_f64() * 1e6);
    let (lo, hi) = min_max(p50.iter().chain(&p99).map(|p| p.1).chain(target));
    let (x_lo, x_hi) = min_max(runs.iter().map(|r| r.ops_per_sec()));
    let pad = ((x_hi - x_lo) * 0.03).max(1.0);
    let (x_lo, x_hi) = if runs.is_empty() {
        (0.0, 1.0)
    } else {
        ((x_lo - pad).max(0.0), x_hi + pad)
    };
    let mut chart = Chart::new(
        title,
        ("throughput (ops/s)", "latency (µs, log scale)"),
        (x_lo, x_hi),
        YAxis::log_fit(lo.min(hi), hi),
    );
    for i in 0..=5 {
        let x = x_lo + (x_hi - x_lo) * f64::from(i) / 5.0;
        chart.x_tick(x, &fmt_num(x));
    }
    chart.line(&p99, COLORS[1], "p99", 0, false);
    chart.line(&p50, COLORS[0], "p50", 1, false);
    if let (Some(t), Some(slo)) = (target, series.slo) {
        let label = format!("target p{} = {} µs", slo.quantile * 100.0, fmt_num(t));
        chart.line(&[(x_lo, t), (x_hi, t)], COLORS[2], &label, 2, true);
    }
    chart.finish()
}

/// Requests completed per second, and errors per second when there were
/// any: a red series, and a red mark in a strip along the bottom for every
/// second with errors (visible even when errors are a sliver of the
/// requests). Second `i` is drawn at `i + 0.5`, its middle.
pub fn timeline(seconds: &[Second], title: &str) -> String {
    let ops: Vec<(f64, f64)> = seconds
        .iter()
        .enumerate()
        .map(|(i, s)| (i as f64 + 0.5, s.ops as f64))
        .collect();
    let errors: Vec<(f64, f64)> = seconds
        .iter()
        .enumerate()
        .map(|(i, s)| (i as f64 + 0.5, s.errors as f64))
        .collect();
    let (_, top) = min_max(ops.iter().map(|p| p.1));
    let x = match (ops.first(), ops.last()) {
        (Some(a), Some(b)) if b.0 > a.0 => (a.0, b.0),
        (Some(a), _) => (a.0 - 0.5, a.0 + 0.5),
        _ => (0.0, 1.0),
    };
    let mut chart = Chart::new(
        title,
        ("seconds after warm-up", "requests per second"),
        x,
        YAxis::Linear {
            max: (top * 1.05).max(1.0),
        },
    );
    let step = seconds.len().div_ceil(10).max(1);
    for i in (0..=seconds.len()).step_by(step) {
        chart.x_tick(i as f64, &i.to_string());
    }
    chart.line(&ops, COLORS[0], "requests/s", 0, false);
    let total_errors: u64 = seconds.iter().map(|s| s.errors).sum();
    if total_errors > 0 {
        chart.line(
            &errors,
            COLORS[1],
            &format!("errors/s ({total_errors} in all; marked below)"),
            1,
            false,
        );
        let width = (chart.px(1.0) - chart.px(0.0)).max(2.0);
        for (i, s) in seconds.iter().enumerate().filter(|(_, s)| s.errors > 0) {
            let cx = chart.px(i as f64 + 0.5);
            let _ = writeln!(
                chart.svg,
                r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{STRIP_PX}" fill="{}"><title>second {i}: {} errors</title></rect>"#,
                (cx - width / 2.0).max(LEFT),
                H - BOTTOM - STRIP_PX,
                width.min(W - RIGHT - (cx - width / 2.0).max(LEFT)),
                COLORS[1],
                s.errors
            );
        }
    }
    chart.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The (x, y) pixel pairs of every polyline in `svg`.
    fn polyline_points(svg: &str) -> Vec<Vec<(f64, f64)>> {
        svg.split(r#"<polyline points=""#)
            .skip(1)
            .map(|rest| {
                rest.split('"')
                    .next()
                    .unwrap()
                    .split(' ')
                    .map(|p| {
                        let (x, y) = p.split_once(',').unwrap();
                        (x.parse().unwrap(), y.parse().unwrap())
                    })
                    .collect()
            })
            .collect()
    }

    fn inside_plot(&(x, y): &(f64, f64)) -> bool {
        (LEFT - 0.1..=W - RIGHT + 0.1).contains(&x) && (TOP - 0.1..=H - BOTTOM + 0.1).contains(&y)
    }

    #[test]
    fn cdf_spans_the_data_and_no_more() {
        let mut h = crate::stats::new_histogram();
        for v in 1..10_000u64 {
            h.record(v * 100).unwrap();
        }
        let svg = latency_cdf(&h, "test");
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        let lines = polyline_points(&svg);
        assert_eq!(lines.len(), 1);
        let line = &lines[0];
        assert!(line.iter().all(inside_plot), "{line:?}");
        // x: the first point at the left edge, the last at the right.
        assert!((line[0].0 - LEFT).abs() < 0.2);
        assert!((line.last().unwrap().0 - (W - RIGHT)).abs() < 0.2);
        // y: the fitted margins leave the extremes just inside the box.
        let (top, bottom) = min_max(line.iter().map(|p| p.1));
        assert!(top > TOP && top < TOP + 30.0, "{top}");
        assert!(
            bottom < H - BOTTOM && bottom > H - BOTTOM - 30.0,
            "{bottom}"
        );
    }

    /// Regression: a linear axis up to twice the maximum put p50 and p99 of
    /// a typical run (50-150 µs under a 10 ms tail) within one pixel of
    /// each other at the bottom of the plot.
    #[test]
    fn median_and_p99_are_not_squeezed_by_the_tail() {
        let mut h = crate::stats::new_histogram();
        for i in 0..9_900u64 {
            h.record(50_000 + i * 10).unwrap();
        }
        for _ in 0..100 {
            h.record(10_000_000).unwrap();
        }
        let svg = latency_cdf(&h, "tail");
        let line = &polyline_points(&svg)[0];
        assert!(line.iter().all(inside_plot));
        // The spectrum ends at q = 1, drawn at five nines: x spans 0..5.
        let y_at = |q: f64| {
            let px = LEFT + (1.0 / (1.0 - q)).log10() / 5.0 * (W - LEFT - RIGHT);
            line.iter()
                .min_by(|a, b| (a.0 - px).abs().total_cmp(&(b.0 - px).abs()))
                .unwrap()
                .1
        };
        let (p50, p99) = (y_at(0.5), y_at(0.99));
        // Old axis: (150 - 100) µs of 20 ms over 340 px is under 1 px.
        assert!(p50 - p99 > 15.0, "p50 at {p50} px, p99 at {p99} px");
    }

    #[test]
    fn log_axis_gives_each_decade_the_same_height() {
        let axis = YAxis::log_fit(100.0, 10_000.0);
        assert!((axis.fraction(1_000.0) - 0.5).abs() < 1e-9);
        assert_eq!(axis.fraction(1.0), 0.0);
        assert_eq!(axis.fraction(1e9), 1.0);
    }

    #[test]
    fn log_ticks_are_1_2_5_inside_the_range() {
        let ticks = YAxis::log_fit(30.0, 900.0).ticks();
        assert_eq!(ticks, [50.0, 100.0, 200.0, 500.0, 1000.0]);
    }

    #[test]
    fn linear_ticks_are_round_and_inside_the_range() {
        let ticks = YAxis::Linear { max: 32_400.0 }.ticks();
        assert_eq!(
            ticks,
            [0.0, 5000.0, 10000.0, 15000.0, 20000.0, 25000.0, 30000.0]
        );
        let ticks = YAxis::Linear { max: 1.05 }.ticks();
        assert_eq!(ticks, [0.0, 0.2, 0.4, 0.6000000000000001, 0.8, 1.0]);
    }

    #[test]
    fn timeline_marks_seconds_with_errors() {
        let seconds = [
            Second {
                ops: 1000,
                errors: 0,
            },
            Second { ops: 10, errors: 9 },
            Second {
                ops: 900,
                errors: 0,
            },
        ];
        let svg = timeline(&seconds, "t");
        let lines = polyline_points(&svg);
        assert_eq!(lines.len(), 2, "requests and errors");
        assert!(lines.iter().flatten().all(inside_plot));
        assert_eq!(svg.matches("<title>second 1: 9 errors</title>").count(), 1);
        assert_eq!(
            svg.matches("<rect x=").count(),
            1 + 1,
            "the frame and one mark"
        );
        let clean = timeline(&[Second { ops: 5, errors: 0 }], "clean");
        assert_eq!(polyline_points(&clean).len(), 1);
        assert!(!clean.contains("errors/s"));
    }
}
