//! Every statistic for Prometheus, for `--metrics-listen` (`io/metrics.rs` serves it):
//! in the text exposition format (version 0.0.4, [`text`]) or, to a scraper that asks
//! for it, the protobuf one ([`proto`]), which carries native histograms.
//!
//! The counters carry memcached_exporter's metric names, labels and types
//! ([`names`]), so that dashboards and alerts written for memcached keep working:
//! `memcached_up`, `memcached_commands_total{command,status}`,
//! `memcached_items_evicted_total`, `memcached_slab_*{slab}` and the rest. They are read
//! the way the exporter reads them, from the `stats`, `stats settings`, `stats items`
//! and `stats slabs` replies this server gives (`stats.rs`, `slabs.rs`), so each value
//! has one home and the two views cannot disagree. ferrocache's own metrics follow,
//! named `ferrocache_*`: the request latency histograms (`stats/latency.rs`), the
//! memory breakdown and the store's budget.
//!
//! A latency histogram has classic buckets at the powers of two of seconds from 2^-20
//! (0.95 µs) to 2^4 (16 s), and, in the protobuf format, the same counts as a native
//! histogram of schema 0 (buckets `(2^(i-1), 2^i]` s). Both are exact: the server's
//! own buckets are in ticks of 2^-30 s, so these are bounds of its buckets.

mod names;
pub mod proto;
pub mod text;

use std::collections::HashMap;

use names::{Mapping, CRAWLER_SETTINGS, GENERAL, ITEMS, MEMORY, SLABS};

use crate::state::Shared;
use crate::stats::latency::{ticks_to_secs, Command, Snapshot, TICKS_PER_SEC};

/// Classic `le` bounds: 2^k ticks for k in this range (2^-20 s to 2^4 s).
const LE_TICKS_LOG2: std::ops::RangeInclusive<u32> = 10..=34;
/// Native buckets: 2^k ticks for k in this range, everything below in the first.
const NATIVE_TICKS_LOG2: std::ops::RangeInclusive<u32> = 0..=40;

/// A metric family: one name, its help, type and samples.
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    pub metrics: Vec<Metric>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn parse(kind: &str) -> Kind {
        match kind {
            "counter" => Kind::Counter,
            _ => Kind::Gauge,
        }
    }
}

pub struct Metric {
    pub labels: Vec<(&'static str, String)>,
    pub value: Value,
}

pub enum Value {
    Number(f64),
    Histogram(Histogram),
}

/// One latency histogram, in both of Prometheus' forms.
pub struct Histogram {
    pub count: u64,
    pub sum_secs: f64,
    /// Classic buckets: (upper bound in seconds, requests at most that), ascending;
    /// `+Inf` is `count`.
    pub classic: Vec<(f64, u64)>,
    /// Native schema 0: the index of `counts[0]`'s bucket, and the counts of
    /// consecutive buckets from there (empty when nothing was recorded).
    pub native_offset: i32,
    pub native_counts: Vec<u64>,
}

impl Histogram {
    fn of(h: &Snapshot) -> Histogram {
        let classic = LE_TICKS_LOG2
            .map(|k| (ticks_to_secs(1 << k), h.at_most(1 << k)))
            .collect();
        // Bucket i of schema 0 is (2^(i-1), 2^i] s = (2^(k-1), 2^k] ticks, k = i + 30.
        let mut counts: Vec<(i32, u64)> = Vec::new();
        let mut below = 0;
        for k in NATIVE_TICKS_LOG2 {
            let upto = h.at_most(1 << k);
            let index = k as i32 - TICKS_PER_SEC.trailing_zeros() as i32;
            counts.push((index, upto - below));
            below = upto;
        }
        // The last bucket also takes what lies past 2^40 ticks (the server's own last
        // bucket is open-ended).
        if let Some(last) = counts.last_mut() {
            last.1 += h.count() - below;
        }
        let first = counts.iter().position(|c| c.1 > 0);
        let last = counts.iter().rposition(|c| c.1 > 0);
        let (native_offset, native_counts) = match (first, last) {
            (Some(a), Some(b)) => (counts[a].0, counts[a..=b].iter().map(|c| c.1).collect()),
            _ => (0, Vec::new()),
        };
        Histogram {
            count: h.count(),
            sum_secs: ticks_to_secs(h.sum_ticks),
            classic,
            native_offset,
            native_counts,
        }
    }
}

/// Metric families in order of first use.
#[derive(Default)]
pub struct Families {
    pub list: Vec<Family>,
    index: HashMap<&'static str, usize>,
}

impl Families {
    fn family(&mut self, name: &'static str, help: &'static str, kind: Kind) -> &mut Family {
        let i = *self.index.entry(name).or_insert_with(|| {
            self.list.push(Family {
                name,
                help,
                kind,
                metrics: Vec::new(),
            });
            self.list.len() - 1
        });
        &mut self.list[i]
    }

    /// A number from a stats reply (a timeval `s.us` reads as a decimal); what does not
    /// read as a number is left out, as the exporter leaves it.
    fn number(&mut self, m: &Mapping, labels: Vec<(&'static str, String)>, value: &str) {
        if let Ok(v) = value.parse::<f64>() {
            self.family(m.1, m.3, Kind::parse(m.2))
                .metrics
                .push(Metric {
                    labels,
                    value: Value::Number(v),
                });
        }
    }
}

/// `STAT name value` lines of a reply, by name.
fn parse_stats(reply: &[u8]) -> HashMap<String, String> {
    let text = String::from_utf8_lossy(reply);
    text.lines()
        .filter_map(|l| l.strip_prefix("STAT "))
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Per-class fields (`items:N:field` or `N:field`) as (class, field, value), by class.
fn per_class(map: &HashMap<String, String>, prefix: &str) -> Vec<(u32, String, String)> {
    let mut rows: Vec<(u32, String, String)> = map
        .iter()
        .filter_map(|(k, v)| {
            let rest = k.strip_prefix(prefix)?;
            let (class, field) = rest.split_once(':')?;
            Some((class.parse().ok()?, field.to_string(), v.clone()))
        })
        .collect();
    rows.sort();
    rows
}

fn label(name: &'static str, value: impl Into<String>) -> Vec<(&'static str, String)> {
    vec![(name, value.into())]
}

/// `memcached_commands_total`, as the exporter derives it from `stats`.
fn commands(f: &mut Families, s: &HashMap<String, String>) {
    let n = |k: &str| s.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let family = f.family(
        "memcached_commands_total",
        "Total number of all requests broken down by command (get, set, etc.) and status.",
        Kind::Counter,
    );
    let mut add = |command: &str, status: &str, v: u64| {
        family.metrics.push(Metric {
            labels: vec![("command", command.into()), ("status", status.into())],
            value: Value::Number(v as f64),
        });
    };
    for op in ["get", "delete", "incr", "decr", "cas", "touch"] {
        add(op, "hit", n(&format!("{op}_hits")));
        add(op, "miss", n(&format!("{op}_misses")));
    }
    add("cas", "badval", n("cas_badval"));
    add("flush", "hit", n("cmd_flush"));
    // memcached counts a cas in cmd_set too; the exporter takes it out.
    let cas = n("cas_misses") + n("cas_hits") + n("cas_badval");
    add("set", "hit", n("cmd_set").saturating_sub(cas));
}

fn latency(f: &mut Families, shared: &Shared) {
    let histograms = shared.stats.latency();
    let family = f.family(
        "ferrocache_request_duration_seconds",
        "Time from the first byte of a request's input to its reply handed to the kernel, by command.",
        Kind::Histogram,
    );
    for (command, h) in Command::ALL.iter().zip(histograms.iter()) {
        family.metrics.push(Metric {
            labels: label("command", command.name()),
            value: Value::Histogram(Histogram::of(h)),
        });
    }
    let max = f.family(
        "ferrocache_request_duration_max_seconds",
        "Longest request, by command, since start or the last stats reset.",
        Kind::Gauge,
    );
    for (command, h) in Command::ALL.iter().zip(histograms.iter()) {
        max.metrics.push(Metric {
            labels: label("command", command.name()),
            value: Value::Number(ticks_to_secs(h.max_ticks)),
        });
    }
}

/// Every family, read now.
#[must_use]
pub fn collect(shared: &Shared) -> Families {
    let mut buf = Vec::new();
    let mut reply = |write: fn(&Shared, &mut Vec<u8>)| {
        buf.clear();
        write(shared, &mut buf);
        parse_stats(&buf)
    };
    let general = reply(super::stats::general);
    let settings = reply(super::stats::settings);
    let items = reply(super::slabs::items);
    let slabs = reply(super::slabs::slabs);

    let mut f = Families::default();
    let up = (
        "",
        "memcached_up",
        "gauge",
        "Could the memcached server be reached.",
    );
    f.number(&up, Vec::new(), "1");
    if let Some(v) = general.get("version") {
        let version = (
            "",
            "memcached_version",
            "gauge",
            "The version of this memcached server.",
        );
        f.number(&version, label("version", v.as_str()), "1");
    }
    for m in GENERAL {
        // `total_malloced` is in `stats slabs`, the rest in `stats`.
        if let Some(v) = general.get(m.0).or_else(|| slabs.get(m.0)) {
            f.number(m, Vec::new(), v);
        }
    }
    commands(&mut f, &general);
    if let Some(v) = settings.get("maxconns") {
        let m = (
            "",
            "memcached_max_connections",
            "gauge",
            "Maximum number of clients allowed.",
        );
        f.number(&m, Vec::new(), v);
    }
    if settings.get("lru_crawler").map(String::as_str) == Some("yes") {
        let yes = |k: &str| match settings.get(k).map(String::as_str) {
            Some("yes") => "1",
            _ => "0",
        };
        let enabled = (
            "",
            "memcached_lru_crawler_enabled",
            "gauge",
            "Whether the LRU crawler is enabled.",
        );
        f.number(&enabled, Vec::new(), yes("lru_crawler"));
        let thread = (
            "",
            "memcached_lru_crawler_maintainer_thread",
            "gauge",
            "Split LRU mode and background threads.",
        );
        f.number(&thread, Vec::new(), yes("lru_maintainer_thread"));
        for m in CRAWLER_SETTINGS {
            if let Some(v) = settings.get(m.0) {
                f.number(m, Vec::new(), v);
            }
        }
    }
    let lru_hits = (
        "",
        "memcached_slab_lru_hits_total",
        "counter",
        "Number of get_hits to the LRU.",
    );
    for (class, field, value) in per_class(&items, "items:") {
        if let Some(lru) = field.strip_prefix("hits_to_") {
            let lru = if lru == "temp" { "temporary" } else { lru };
            let labels = vec![("slab", class.to_string()), ("lru", lru.to_string())];
            f.number(&lru_hits, labels, &value);
        } else if let Some(m) = ITEMS.iter().find(|m| m.0 == field) {
            f.number(m, label("slab", class.to_string()), &value);
        }
    }
    for (class, field, value) in per_class(&slabs, "") {
        if let Some(m) = SLABS.iter().find(|m| m.0 == field) {
            f.number(m, label("slab", class.to_string()), &value);
        }
    }
    latency(&mut f, shared);
    let memory = (
        "",
        "ferrocache_memory_bytes",
        "gauge",
        "Memory by use: items, the index, and the connections' buffers (held and pooled) and state.",
    );
    for (key, area) in MEMORY {
        if let Some(v) = general.get(*key) {
            f.number(&memory, label("area", *area), v);
        }
    }
    let budget = (
        "",
        "ferrocache_store_budget_bytes",
        "gauge",
        "Bytes the items and the index may use together (1.05 x -m).",
    );
    if let Some(v) = general.get("store_budget_bytes") {
        f.number(&budget, Vec::new(), v);
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::latency::Histograms;

    #[test]
    fn native_buckets_are_the_powers_of_two_of_seconds() {
        let h = Histograms::default();
        // 1 ms is 2^-10 s (ticks: 2^20): in native bucket -9 ... just below: -10 holds
        // (2^-11, 2^-10] s.
        h.record(Command::Get, 1 << 20, 3);
        h.record(Command::Get, (1 << 20) + 1, 2);
        h.record(Command::Get, 5 << 20, 1);
        let mut s: [Snapshot; crate::stats::latency::COMMANDS] = Default::default();
        h.add_to(&mut s);
        let n = Histogram::of(&s[0]);
        assert_eq!(n.count, 6);
        assert_eq!(n.native_offset, -10);
        // -10: the three of exactly 2^-10 s; -9: the two just above; -8: none;
        // -7: 5 x 2^-10 s, in (2^-8, 2^-7].
        assert_eq!(n.native_counts, vec![3, 2, 0, 1]);
        let le_1ms = n.classic.iter().find(|c| c.0 == 1.0 / 1024.0).unwrap();
        assert_eq!(le_1ms.1, 3);
        assert!(n
            .classic
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1));
        let empty = Histogram::of(&Snapshot::default());
        assert!(empty.native_counts.is_empty() && empty.count == 0);
    }
}
