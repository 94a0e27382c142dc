//! `--plot FILE.svg`: the figures the seed papers show, as plain SVG.
//!
//! - The latency CDF as a percentile spectrum: x is `1/(1-q)` on a log
//!   scale (50 %, 90 %, 99 %, ... evenly spaced), y is latency in µs.
//! - For `--slo` and `--rate-sweep`, latency (p50 and p99) against achieved
//!   throughput, with the SLO target as a dashed line.
//!
//! Hand-written SVG: a few polylines do not justify a plotting crate.

use std::fmt::Write;

use hdrhistogram::Histogram;

use crate::search::Series;

const W: f64 = 720.0;
const H: f64 = 440.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 30.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
const COLORS: [&str; 3] = ["#1f77b4", "#d62728", "#2ca02c"];

/// A chart with linear y and a caller-mapped x in `[0, x_max]`.
struct Chart {
    svg: String,
    x_max: f64,
    y_max: f64,
}

impl Chart {
    fn new(title: &str, x_label: &str, y_label: &str, x_max: f64, y_max: f64) -> Chart {
        let mut svg = String::new();
        let _ = write!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="22" text-anchor="middle" font-size="15">{title}</text>
<text x="{}" y="{}" text-anchor="middle">{x_label}</text>
<text transform="translate(18,{}) rotate(-90)" text-anchor="middle">{y_label}</text>
<rect x="{LEFT}" y="{TOP}" width="{}" height="{}" fill="none" stroke="black"/>
"#,
            W / 2.0,
            LEFT + (W - LEFT - RIGHT) / 2.0,
            H - 15.0,
            TOP + (H - TOP - BOTTOM) / 2.0,
            W - LEFT - RIGHT,
            H - TOP - BOTTOM
        );
        let y_max = nice_ceiling(y_max.max(1e-9));
        let mut chart = Chart {
            svg,
            x_max: x_max.max(1e-9),
            y_max,
        };
        for i in 0..=5 {
            let v = y_max * f64::from(i) / 5.0;
            let (x0, y) = (chart.px(0.0), chart.py(v));
            let _ = writeln!(
                chart.svg,
                r##"<line x1="{x0}" y1="{y}" x2="{}" y2="{y}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end">{}</text>"##,
                W - RIGHT,
                x0 - 6.0,
                y + 4.0,
                fmt_num(v)
            );
        }
        chart
    }

    fn px(&self, x: f64) -> f64 {
        LEFT + x / self.x_max * (W - LEFT - RIGHT)
    }

    fn py(&self, y: f64) -> f64 {
        H - BOTTOM - y.min(self.y_max) / self.y_max * (H - TOP - BOTTOM)
    }

    fn x_tick(&mut self, x: f64, label: &str) {
        let px = self.px(x);
        let _ = writeln!(
            self.svg,
            r##"<line x1="{px}" y1="{TOP}" x2="{px}" y2="{}" stroke="#ddd"/><text x="{px}" y="{}" text-anchor="middle">{label}</text>"##,
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
        let ly = TOP + 16.0 + 16.0 * slot as f64;
        let _ = writeln!(
            self.svg,
            r#"<line x1="{}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="2"{dash}/><text x="{}" y="{}">{label}</text>"#,
            LEFT + 12.0,
            LEFT + 36.0,
            LEFT + 42.0,
            ly + 4.0
        );
    }

    fn finish(mut self) -> String {
        self.svg.push_str("</svg>\n");
        self.svg
    }
}

/// Rounds up to 1, 2 or 5 times a power of ten.
fn nice_ceiling(v: f64) -> f64 {
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|&c| c >= v)
        .unwrap_or(10.0 * p)
}

fn fmt_num(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if v >= 10.0 || v == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// The percentile spectrum of `h` (latencies in ns), plotted in µs.
pub fn latency_cdf(h: &Histogram<u64>, title: &str) -> String {
    let nines = 5.0;
    let mut points = Vec::new();
    for v in h.iter_quantiles(5) {
        let q = v.quantile_iterated_to();
        let x = if q >= 1.0 {
            nines
        } else {
            (1.0 / (1.0 - q)).log10().min(nines)
        };
        points.push((x, v.value_iterated_to() as f64 / 1e3));
    }
    let y_max = h.max() as f64 / 1e3;
    let mut chart = Chart::new(title, "percentile", "latency (µs)", nines, y_max);
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
    let x_max = runs.iter().map(|r| r.ops_per_sec()).fold(0.0, f64::max) * 1.05;
    let q = |r: &crate::engine::RunResult, q: f64| {
        r.stats.total.latency.value_at_quantile(q) as f64 / 1e3
    };
    let p99: Vec<(f64, f64)> = runs.iter().map(|r| (r.ops_per_sec(), q(r, 0.99))).collect();
    let p50: Vec<(f64, f64)> = runs.iter().map(|r| (r.ops_per_sec(), q(r, 0.5))).collect();
    let target = series.slo.map(|s| s.latency.as_secs_f64() * 1e6);
    let y_max = p99
        .iter()
        .map(|p| p.1)
        .fold(target.unwrap_or(0.0) * 1.5, f64::max);
    let mut chart = Chart::new(title, "throughput (ops/s)", "latency (µs)", x_max, y_max);
    for i in 0..=5 {
        let x = x_max * f64::from(i) / 5.0;
        chart.x_tick(x, &fmt_num(x));
    }
    chart.line(&p99, COLORS[1], "p99", 0, false);
    chart.line(&p50, COLORS[0], "p50", 1, false);
    if let (Some(t), Some(slo)) = (target, series.slo) {
        let label = format!("target p{} = {} µs", slo.quantile * 100.0, fmt_num(t));
        chart.line(&[(0.0, t), (x_max, t)], COLORS[2], &label, 2, true);
    }
    chart.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdf_is_an_svg_with_a_line() {
        let mut h = crate::stats::new_histogram();
        for v in 1..10_000u64 {
            h.record(v * 100).unwrap();
        }
        let svg = latency_cdf(&h, "test");
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert!(svg.contains("<polyline"));
    }

    #[test]
    fn nice_ceilings() {
        assert_eq!(nice_ceiling(0.7), 1.0);
        assert_eq!(nice_ceiling(130.0), 200.0);
        assert_eq!(nice_ceiling(4500.0), 5000.0);
    }
}
