//! Prometheus' text exposition format, version 0.0.4: what every Prometheus and most
//! other scrapers read. Histograms are written with their classic buckets.

use std::fmt::Write as _;

use super::{Families, Kind, Value};

/// The content type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A label value with `\`, `"` and newlines escaped, as the format requires.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn labels(out: &mut String, pairs: &[(&'static str, String)], le: Option<&str>) {
    if pairs.is_empty() && le.is_none() {
        return;
    }
    out.push('{');
    let mut first = true;
    for (k, v) in pairs {
        if !first {
            out.push(',');
        }
        first = false;
        let _ = write!(out, "{k}=\"{}\"", escape(v));
    }
    if let Some(le) = le {
        if !first {
            out.push(',');
        }
        let _ = write!(out, "le=\"{le}\"");
    }
    out.push('}');
}

/// The page.
#[must_use]
pub fn render(families: &Families) -> String {
    let mut out = String::with_capacity(64 * 1024);
    for f in families.list.iter().filter(|f| !f.metrics.is_empty()) {
        let kind = match f.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        };
        let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
        let _ = writeln!(out, "# TYPE {} {kind}", f.name);
        for m in &f.metrics {
            match &m.value {
                Value::Number(v) => {
                    out.push_str(f.name);
                    labels(&mut out, &m.labels, None);
                    let _ = writeln!(out, " {v}");
                }
                Value::Histogram(h) => {
                    for (le, n) in &h.classic {
                        let _ = write!(out, "{}_bucket", f.name);
                        labels(&mut out, &m.labels, Some(&le.to_string()));
                        let _ = writeln!(out, " {n}");
                    }
                    let _ = write!(out, "{}_bucket", f.name);
                    labels(&mut out, &m.labels, Some("+Inf"));
                    let _ = writeln!(out, " {}", h.count);
                    let _ = write!(out, "{}_sum", f.name);
                    labels(&mut out, &m.labels, None);
                    let _ = writeln!(out, " {}", h.sum_secs);
                    let _ = write!(out, "{}_count", f.name);
                    labels(&mut out, &m.labels, None);
                    let _ = writeln!(out, " {}", h.count);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::state::Shared;

    #[test]
    fn families_stay_together_with_one_help_and_type() {
        let shared = Shared::from_args(["ferrocache", "-t", "1"]).expect("settings");
        let page = super::render(&super::super::collect(&shared));
        let mut seen = std::collections::HashSet::new();
        let mut current = String::new();
        for line in page.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let name = rest.split(' ').next().unwrap().to_string();
                assert!(seen.insert(name.clone()), "{name} declared twice");
                current = name;
            } else if !line.starts_with('#') {
                assert!(line.starts_with(&current), "{line} outside {current}");
                let value = line.rsplit(' ').next().unwrap();
                assert!(value.parse::<f64>().is_ok(), "{line}: value");
            }
        }
        for name in [
            "memcached_up",
            "memcached_commands_total",
            "memcached_items_evicted_total",
            "memcached_current_connections",
            "memcached_limit_bytes",
            "ferrocache_request_duration_seconds",
            "ferrocache_memory_bytes",
        ] {
            assert!(seen.contains(name), "{name} missing");
        }
        assert!(
            page.contains("memcached_limit_bytes 67108864\n"),
            "-m 64 default"
        );
        assert!(page.contains(
            "ferrocache_request_duration_seconds_bucket{command=\"get\",le=\"+Inf\"} 0\n"
        ));
        // 2^-20 s, the first classic bound.
        assert!(page.contains("le=\"0.00000095367431640625\""), "{page}");
    }
}
