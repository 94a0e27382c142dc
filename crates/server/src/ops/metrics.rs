//! Prometheus' text exposition format (version 0.0.4) of every statistic, for
//! `--metrics-listen` (`io/metrics.rs` serves it).
//!
//! The counters carry memcached_exporter's metric names, labels and types, so that
//! dashboards and alerts written for memcached keep working: `memcached_up`,
//! `memcached_commands_total{command,status}`, `memcached_items_evicted_total`,
//! `memcached_slab_*{slab}` and the rest. They are read the way the exporter reads
//! them, from the `stats`, `stats settings`, `stats items` and `stats slabs` replies
//! this server gives (`stats.rs`, `slabs.rs`), so each value has one home and the two
//! views cannot disagree. ferrocache's own metrics follow, named `ferrocache_*`: the
//! request latency histograms (`stats/latency.rs`), the memory breakdown and the
//! connections' memory.
//!
//! The latency histograms are Prometheus histograms with classic buckets, at the
//! powers of two from 1.024 µs to 17.2 s: the bounds of a native histogram of schema
//! 0, and exact bounds of the server's own buckets. Native (sparse) histograms need
//! the protobuf exposition, which Prometheus 2.x reads only behind a feature flag.

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::state::Shared;
use crate::stats::latency::Command;

/// Powers of two (in ns) used as the latency histograms' `le` bounds.
const LE_FROM: u32 = 10;
const LE_TO: u32 = 34;

/// `STAT name value` lines of a reply, by name.
fn parse_stats(reply: &[u8]) -> HashMap<String, String> {
    let text = String::from_utf8_lossy(reply);
    text.lines()
        .filter_map(|l| l.strip_prefix("STAT "))
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Metric families in order of first use; a family's samples stay together, as the
/// format requires.
#[derive(Default)]
struct Families {
    order: Vec<Family>,
    index: HashMap<&'static str, usize>,
}

struct Family {
    name: &'static str,
    help: &'static str,
    kind: &'static str,
    samples: Vec<(String, String)>,
}

impl Families {
    fn add(&mut self, name: &'static str, help: &'static str, kind: &'static str) -> &mut Family {
        let i = *self.index.entry(name).or_insert_with(|| {
            self.order.push(Family {
                name,
                help,
                kind,
                samples: Vec::new(),
            });
            self.order.len() - 1
        });
        &mut self.order[i]
    }

    fn render(&self, out: &mut String) {
        for f in &self.order {
            if f.samples.is_empty() {
                continue;
            }
            let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
            let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
            for (suffix_labels, value) in &f.samples {
                let _ = writeln!(out, "{}{suffix_labels} {value}", f.name);
            }
        }
    }
}

impl Family {
    /// A sample with `labels` (`k="v",...`, or empty) and a value as the stats reply
    /// wrote it (a timeval `s.us` is already a decimal number).
    fn sample(&mut self, labels: &str, value: impl Into<String>) {
        let labels = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        self.samples.push((labels, value.into()));
    }
}

/// One stats field under one exporter name: (stats name, metric, kind, help).
type Mapping = (&'static str, &'static str, &'static str, &'static str);

const GENERAL: &[Mapping] = &[
    ("uptime", "memcached_uptime_seconds", "counter", "Number of seconds since the server started."),
    ("time", "memcached_time_seconds", "gauge", "current UNIX time according to the server."),
    ("rusage_user", "memcached_process_user_cpu_seconds_total", "counter", "Accumulated user time for this process."),
    ("rusage_system", "memcached_process_system_cpu_seconds_total", "counter", "Accumulated system time for this process."),
    ("bytes", "memcached_current_bytes", "gauge", "Current number of bytes used to store items."),
    ("limit_maxbytes", "memcached_limit_bytes", "gauge", "Number of bytes this server is allowed to use for storage."),
    ("curr_items", "memcached_current_items", "gauge", "Current number of items stored by this instance."),
    ("total_items", "memcached_items_total", "counter", "Total number of items stored during the life of this instance."),
    ("bytes_read", "memcached_read_bytes_total", "counter", "Total number of bytes read by this server from network."),
    ("bytes_written", "memcached_written_bytes_total", "counter", "Total number of bytes sent by this server to network."),
    ("curr_connections", "memcached_current_connections", "gauge", "Current number of open connections."),
    ("total_connections", "memcached_connections_total", "counter", "Total number of connections opened since the server started running."),
    ("rejected_connections", "memcached_connections_rejected_total", "counter", "Total number of connections rejected due to hitting the memcached's -c limit in maxconns_fast mode."),
    ("conn_yields", "memcached_connections_yielded_total", "counter", "Total number of connections yielded running due to hitting the memcached's -R limit."),
    ("listen_disabled_num", "memcached_connections_listener_disabled_total", "counter", "Number of times that memcached has hit its connections limit and disabled its listener."),
    ("evictions", "memcached_items_evicted_total", "counter", "Total number of valid items removed from cache to free memory for new items."),
    ("reclaimed", "memcached_items_reclaimed_total", "counter", "Total number of times an entry was stored using memory from an expired entry."),
    ("store_too_large", "memcached_item_too_large_total", "counter", "The number of times an item exceeded the max-item-size when being stored."),
    ("store_no_memory", "memcached_item_no_memory_total", "counter", "The number of times an item could not be stored due to no more memory."),
    ("lru_crawler_starts", "memcached_lru_crawler_starts_total", "counter", "Times an LRU crawler was started."),
    ("direct_reclaims", "memcached_direct_reclaims_total", "counter", "Times worker threads had to directly reclaim or evict items."),
    ("crawler_items_checked", "memcached_lru_crawler_items_checked_total", "counter", "Total items examined by LRU Crawler."),
    ("crawler_reclaimed", "memcached_lru_crawler_reclaimed_total", "counter", "Total items freed by LRU Crawler."),
    ("moves_to_cold", "memcached_lru_crawler_moves_to_cold_total", "counter", "Total number of items moved from HOT/WARM to COLD LRU's."),
    ("moves_to_warm", "memcached_lru_crawler_moves_to_warm_total", "counter", "Total number of items moved from COLD to WARM LRU."),
    ("moves_within_lru", "memcached_lru_crawler_moves_within_lru_total", "counter", "Total number of items reshuffled within HOT or WARM LRU's."),
    ("total_malloced", "memcached_malloced_bytes", "gauge", "Number of bytes of memory allocated to slab pages."),
    ("accepting_conns", "memcached_accepting_connections", "gauge", "The Memcached server is currently accepting new connections."),
];

/// `stats settings` fields, printed by the exporter when the LRU crawler is on.
const CRAWLER_SETTINGS: &[Mapping] = &[
    ("lru_crawler_sleep", "memcached_lru_crawler_sleep", "gauge", "Microseconds to sleep between LRU crawls."),
    ("lru_crawler_tocrawl", "memcached_lru_crawler_to_crawl", "gauge", "Max items to crawl per slab per run."),
    ("hot_lru_pct", "memcached_lru_crawler_hot_percent", "gauge", "Percent of slab memory reserved for HOT LRU."),
    ("warm_lru_pct", "memcached_lru_crawler_warm_percent", "gauge", "Percent of slab memory reserved for WARM LRU."),
    ("hot_max_factor", "memcached_lru_crawler_hot_max_factor", "gauge", "Set idle age of HOT LRU to COLD age * this"),
    ("warm_max_factor", "memcached_lru_crawler_warm_max_factor", "gauge", "Set idle age of WARM LRU to COLD age * this"),
];

/// `stats items` fields, per class.
const ITEMS: &[Mapping] = &[
    ("number", "memcached_slab_current_items", "gauge", "Number of items currently stored in this slab class."),
    ("age", "memcached_slab_items_age_seconds", "gauge", "Number of seconds the oldest item has been in the slab class."),
    ("crawler_reclaimed", "memcached_slab_items_crawler_reclaimed_total", "counter", "Number of items freed by the LRU Crawler."),
    ("evicted", "memcached_slab_items_evicted_total", "counter", "Total number of times an item had to be evicted from the LRU before it expired."),
    ("evicted_nonzero", "memcached_slab_items_evicted_nonzero_total", "counter", "Total number of times an item which had an explicit expire time set had to be evicted from the LRU before it expired."),
    ("evicted_time", "memcached_slab_items_evicted_time_seconds", "counter", "Seconds since the last access for the most recent item evicted from this class."),
    ("evicted_unfetched", "memcached_slab_items_evicted_unfetched_total", "counter", "Total nmber of items evicted and never fetched."),
    ("expired_unfetched", "memcached_slab_items_expired_unfetched_total", "counter", "Total number of valid items evicted from the LRU which were never touched after being set."),
    ("outofmemory", "memcached_slab_items_outofmemory_total", "counter", "Total number of items for this slab class that have triggered an out of memory error."),
    ("reclaimed", "memcached_slab_items_reclaimed_total", "counter", "Total number of items reclaimed."),
    ("tailrepairs", "memcached_slab_items_tailrepairs_total", "counter", "Total number of times the entries for a particular ID need repairing."),
    ("mem_requested", "memcached_slab_mem_requested_bytes", "counter", "Number of bytes of memory actual items take up within a slab."),
    ("moves_to_cold", "memcached_slab_items_moves_to_cold", "counter", "Number of items moved from HOT or WARM into COLD."),
    ("moves_to_warm", "memcached_slab_items_moves_to_warm", "counter", "Number of items moves from COLD into WARM."),
    ("moves_within_lru", "memcached_slab_items_moves_within_lru", "counter", "Number of times active items were bumped within HOT or WARM."),
    ("number_hot", "memcached_slab_hot_items", "gauge", "Number of items presently stored in the HOT LRU."),
    ("number_warm", "memcached_slab_warm_items", "gauge", "Number of items presently stored in the WARM LRU."),
    ("number_cold", "memcached_slab_cold_items", "gauge", "Number of items presently stored in the COLD LRU."),
    ("number_temp", "memcached_slab_temporary_items", "gauge", "Number of items presently stored in the TEMPORARY LRU."),
    ("age_hot", "memcached_slab_hot_age_seconds", "gauge", "Age of the oldest item in HOT LRU."),
    ("age_warm", "memcached_slab_warm_age_seconds", "gauge", "Age of the oldest item in HOT LRU."),
];

/// `stats slabs` fields, per class.
const SLABS: &[Mapping] = &[
    ("chunk_size", "memcached_slab_chunk_size_bytes", "gauge", "Number of bytes allocated to each chunk within this slab class."),
    ("chunks_per_page", "memcached_slab_chunks_per_page", "gauge", "Number of chunks within a single page for this slab class."),
    ("total_pages", "memcached_slab_current_pages", "gauge", "Number of pages allocated to this slab class."),
    ("total_chunks", "memcached_slab_current_chunks", "gauge", "Number of chunks allocated to this slab class."),
    ("used_chunks", "memcached_slab_chunks_used", "gauge", "Number of chunks allocated to an item."),
    ("free_chunks", "memcached_slab_chunks_free", "gauge", "Number of chunks not yet allocated items."),
    ("free_chunks_end", "memcached_slab_chunks_free_end", "gauge", "Number of free chunks at the end of the last allocated page."),
];

/// ferrocache's memory breakdown: (stats name, `area` label).
const MEMORY: &[(&str, &str)] = &[
    ("item_memory_bytes", "items"),
    ("index_bytes", "index"),
    ("conn_buffer_bytes", "conn_buffers"),
    ("conn_buffer_pooled_bytes", "conn_buffers_pooled"),
    ("conn_state_bytes", "conn_state"),
];

fn put(f: &mut Families, map: &HashMap<String, String>, m: &Mapping, key: &str, labels: &str) {
    if let Some(v) = map.get(key) {
        f.add(m.1, m.3, m.2).sample(labels, v.clone());
    }
}

fn num(map: &HashMap<String, String>, key: &str) -> u64 {
    map.get(key).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// `memcached_commands_total`, as the exporter derives it from `stats`.
fn commands(f: &mut Families, s: &HashMap<String, String>) {
    let family = f.add(
        "memcached_commands_total",
        "Total number of all requests broken down by command (get, set, etc.) and status.",
        "counter",
    );
    for op in ["get", "delete", "incr", "decr", "cas", "touch"] {
        for (suffix, status) in [("hits", "hit"), ("misses", "miss")] {
            let key = format!("{op}_{suffix}");
            if let Some(v) = s.get(&key) {
                family.sample(&format!("command=\"{op}\",status=\"{status}\""), v.clone());
            }
        }
    }
    let n = |k: &str| num(s, k);
    family.sample("command=\"cas\",status=\"badval\"", n("cas_badval").to_string());
    family.sample("command=\"flush\",status=\"hit\"", n("cmd_flush").to_string());
    // memcached counts a cas in cmd_set too; the exporter takes it out.
    let set = n("cmd_set").saturating_sub(n("cas_misses") + n("cas_hits") + n("cas_badval"));
    family.sample("command=\"set\",status=\"hit\"", set.to_string());
}

/// Per-class replies (`items:N:field` or `N:field`) grouped by class.
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

/// Seconds, as Prometheus writes them.
fn seconds(ns: u64) -> String {
    format!("{}", ns as f64 / 1e9)
}

fn latency(f: &mut Families, shared: &Shared) {
    let histograms = shared.stats.latency();
    let family = f.add(
        "ferrocache_request_duration_seconds",
        "Time from the first byte of a request's input to its reply handed to the kernel, by command.",
        "histogram",
    );
    for (command, h) in Command::ALL.iter().zip(histograms.iter()) {
        let name = command.name();
        for k in LE_FROM..=LE_TO {
            let le = seconds(1 << k);
            family.samples.push((
                format!("_bucket{{command=\"{name}\",le=\"{le}\"}}"),
                h.at_most(1 << k).to_string(),
            ));
        }
        let count = h.count();
        family.samples.push((
            format!("_bucket{{command=\"{name}\",le=\"+Inf\"}}"),
            count.to_string(),
        ));
        family
            .samples
            .push((format!("_sum{{command=\"{name}\"}}"), seconds(h.sum_ns)));
        family
            .samples
            .push((format!("_count{{command=\"{name}\"}}"), count.to_string()));
    }
    let max = f.add(
        "ferrocache_request_duration_max_seconds",
        "Longest request, by command, since start or the last stats reset.",
        "gauge",
    );
    for (command, h) in Command::ALL.iter().zip(histograms.iter()) {
        max.sample(&format!("command=\"{}\"", command.name()), seconds(h.max_ns));
    }
}

/// The whole `/metrics` page.
#[must_use]
pub fn render(shared: &Shared) -> String {
    let mut buf = Vec::new();
    super::stats::general(shared, &mut buf);
    let general = parse_stats(&buf);
    buf.clear();
    super::stats::settings(shared, &mut buf);
    let settings = parse_stats(&buf);
    buf.clear();
    super::slabs::items(shared, &mut buf);
    let items = parse_stats(&buf);
    buf.clear();
    super::slabs::slabs(shared, &mut buf);
    let slabs = parse_stats(&buf);

    let mut f = Families::default();
    f.add("memcached_up", "Could the memcached server be reached.", "gauge")
        .sample("", "1");
    if let Some(v) = general.get("version") {
        f.add("memcached_version", "The version of this memcached server.", "gauge")
            .sample(&format!("version=\"{v}\""), "1");
    }
    for m in GENERAL {
        // `total_malloced` is in `stats slabs`, the rest in `stats`.
        let from = if general.contains_key(m.0) { &general } else { &slabs };
        put(&mut f, from, m, m.0, "");
    }
    commands(&mut f, &general);
    if let Some(v) = settings.get("maxconns") {
        f.add("memcached_max_connections", "Maximum number of clients allowed.", "gauge")
            .sample("", v.clone());
    }
    if settings.get("lru_crawler").map(String::as_str) == Some("yes") {
        let yes = |k: &str| if settings.get(k).map(String::as_str) == Some("yes") { "1" } else { "0" };
        f.add("memcached_lru_crawler_enabled", "Whether the LRU crawler is enabled.", "gauge")
            .sample("", yes("lru_crawler"));
        f.add("memcached_lru_crawler_maintainer_thread", "Split LRU mode and background threads.", "gauge")
            .sample("", yes("lru_maintainer_thread"));
        for m in CRAWLER_SETTINGS {
            put(&mut f, &settings, m, m.0, "");
        }
    }
    for (class, field, value) in per_class(&items, "items:") {
        let slab = format!("slab=\"{class}\"");
        if let Some(lru) = field.strip_prefix("hits_to_") {
            let lru = if lru == "temp" { "temporary" } else { lru };
            f.add("memcached_slab_lru_hits_total", "Number of get_hits to the LRU.", "counter")
                .sample(&format!("{slab},lru=\"{lru}\""), value);
        } else if let Some(m) = ITEMS.iter().find(|m| m.0 == field) {
            f.add(m.1, m.3, m.2).sample(&slab, value);
        }
    }
    for (class, field, value) in per_class(&slabs, "") {
        if let Some(m) = SLABS.iter().find(|m| m.0 == field) {
            f.add(m.1, m.3, m.2).sample(&format!("slab=\"{class}\""), value);
        }
    }
    latency(&mut f, shared);
    let memory = f.add(
        "ferrocache_memory_bytes",
        "Memory by use: items, the index, and the connections' buffers (held and pooled) and state.",
        "gauge",
    );
    for (key, area) in MEMORY {
        if let Some(v) = general.get(*key) {
            memory.sample(&format!("area=\"{area}\""), v.clone());
        }
    }
    if let Some(v) = general.get("store_budget_bytes") {
        f.add("ferrocache_store_budget_bytes", "Bytes the items and the index may use together (1.05 x -m).", "gauge")
            .sample("", v.clone());
    }
    let mut out = String::with_capacity(64 * 1024);
    f.render(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_stay_together_with_one_help_and_type() {
        let shared = Shared::from_args(["ferrocache", "-t", "1"]).expect("settings");
        let page = render(&shared);
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
        assert!(page.contains("memcached_limit_bytes 67108864\n"), "-m 64 default");
        assert!(page.contains(
            "ferrocache_request_duration_seconds_bucket{command=\"get\",le=\"+Inf\"} 0\n"
        ));
    }
}
