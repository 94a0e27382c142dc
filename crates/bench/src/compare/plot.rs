//! One chart with every server: p99 and p50 latency against achieved
//! throughput over the points of each server's SLO search, plus the SLO.
//! (ferrobench's own `--plot` draws one server per file; this puts them
//! side by side, as the comparison needs.)

use std::fmt::Write;

use super::servers::Kind;

const W: f64 = 760.0;
const H: f64 = 460.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 30.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;

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
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="22" text-anchor="middle" font-size="15">{title}</text>
<text x="{}" y="{}" text-anchor="middle">achieved throughput (ops/s)</text>
<text transform="translate(18,{}) rotate(-90)" text-anchor="middle">latency (µs; clipped at {y_max:.0})</text>
<rect x="{LEFT}" y="{TOP}" width="{}" height="{}" fill="none" stroke="black"/>
"#,
        W / 2.0,
        LEFT + (W - LEFT - RIGHT) / 2.0,
        H - 15.0,
        TOP + (H - TOP - BOTTOM) / 2.0,
        W - LEFT - RIGHT,
        H - TOP - BOTTOM
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
    let mut legend = |svg: &mut String, color: &str, dash: &str, text: &str| {
        let ly = TOP + 16.0 + 16.0 * slot as f64;
        slot += 1;
        let _ = writeln!(
            svg,
            r#"<line x1="{}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="2"{dash}/><text x="{}" y="{}">{text}</text>"#,
            LEFT + 12.0,
            LEFT + 36.0,
            LEFT + 42.0,
            ly + 4.0
        );
    };
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
            legend(&mut svg, c, dash, &format!("{} {name}", kind.name()));
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
        "#2ca02c",
        r#" stroke-dasharray="6,4""#,
        &format!("target {} µs", label(target_us)),
    );
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

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
