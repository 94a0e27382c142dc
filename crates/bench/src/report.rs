//! Results out: the human table, `--json`, `--csv` and `--hdr-out`.
//!
//! The JSON field names are a contract with the benchmark scripts; they are
//! documented in docs/ferrobench.md. Add fields, never rename them.

use std::io::Write;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::config::{Config, Load};
use crate::engine::RunResult;
use crate::search::Series;
use crate::stats::{Counters, Scope};

/// Latency percentiles in microseconds.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct LatencyUs {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub p9999: f64,
    pub max: f64,
    pub mean: f64,
}

impl LatencyUs {
    pub fn of(h: &Histogram<u64>) -> LatencyUs {
        let q = |q: f64| {
            if h.is_empty() {
                0.0
            } else {
                h.value_at_quantile(q) as f64 / 1e3
            }
        };
        LatencyUs {
            p50: q(0.5),
            p90: q(0.9),
            p99: q(0.99),
            p999: q(0.999),
            p9999: q(0.9999),
            max: h.max() as f64 / 1e3,
            mean: h.mean() / 1e3,
        }
    }
}

/// Figures for one scope (the total or one server).
#[derive(Clone, Debug, Serialize)]
pub struct ScopeReport {
    pub ops: u64,
    pub ops_per_sec: f64,
    pub keys_per_sec: f64,
    pub hit_ratio: f64,
    pub errors: u64,
    pub timeouts: u64,
    pub latency_us: LatencyUs,
}

impl ScopeReport {
    fn of(scope: &Scope, secs: f64) -> ScopeReport {
        let c = &scope.counters;
        ScopeReport {
            ops: c.ops,
            ops_per_sec: c.ops as f64 / secs,
            keys_per_sec: c.keys as f64 / secs,
            hit_ratio: c.hit_ratio(),
            errors: c.errors,
            timeouts: c.timeouts,
            latency_us: LatencyUs::of(&scope.latency),
        }
    }
}

/// One server's figures.
#[derive(Clone, Debug, Serialize)]
pub struct ServerReport {
    pub server: String,
    #[serde(flatten)]
    pub figures: ScopeReport,
}

/// One run, as `--json` prints it.
#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    #[serde(flatten)]
    pub total: ScopeReport,
    pub elapsed_secs: f64,
    pub target_rate: Option<f64>,
    pub dropped: u64,
    pub verify_failures: u64,
    pub lost_datagrams: u64,
    pub client_cpu_secs: f64,
    pub client_cpu_us_per_op: f64,
    pub counters: Counters,
    pub servers: Vec<ServerReport>,
    /// Whole requests completed, and failed, per second after the warm-up.
    pub timeline: Vec<crate::stats::Second>,
}

impl RunReport {
    pub fn of(cfg: &Config, r: &RunResult) -> RunReport {
        let secs = r.elapsed.as_secs_f64().max(1e-9);
        let c = r.stats.total.counters;
        RunReport {
            total: ScopeReport::of(&r.stats.total, secs),
            elapsed_secs: secs,
            target_rate: r.target_rate,
            dropped: c.dropped,
            verify_failures: c.verify_failures,
            lost_datagrams: c.lost_datagrams,
            client_cpu_secs: r.cpu_secs,
            client_cpu_us_per_op: if c.ops == 0 {
                0.0
            } else {
                r.cpu_secs * 1e6 / c.ops as f64
            },
            counters: c,
            servers: cfg
                .servers
                .iter()
                .zip(&r.stats.servers)
                .map(|(s, scope)| ServerReport {
                    server: s.name.clone(),
                    figures: ScopeReport::of(scope, secs),
                })
                .collect(),
            timeline: r.stats.timeline.clone(),
        }
    }
}

/// The configuration echoed into the JSON.
#[derive(Debug, Serialize)]
struct ConfigReport<'a> {
    preset: Option<&'a str>,
    servers: Vec<&'a str>,
    hash: crate::placement::Distribution,
    keep_going: bool,
    transport: crate::config::Transport,
    /// `--tls`: every TCP connection speaks TLS.
    tls: bool,
    protocol: crate::config::Protocol,
    connections: usize,
    threads: usize,
    pipeline: usize,
    duration_secs: f64,
    warmup_secs: f64,
    requests: Option<u64>,
    key_size_max: usize,
    value_size_max: usize,
    get_weight: u32,
    set_weight: u32,
    batch: usize,
    keyspace: u64,
    keys_per_conn: Option<u64>,
    key_dist: String,
    set_mode: crate::workload::SetMode,
    preload: bool,
    verify: bool,
    load: Load,
    max_outstanding: usize,
    timeout_ms: f64,
    seed: u64,
}

/// A point of an SLO search or sweep.
#[derive(Debug, Serialize)]
struct PointReport {
    target_rate: Option<f64>,
    ops_per_sec: f64,
    dropped: u64,
    latency_us: LatencyUs,
    met: bool,
}

#[derive(Debug, Serialize)]
struct SearchReport {
    kind: &'static str,
    percentile: Option<f64>,
    target_latency_us: Option<f64>,
    best_rate: Option<f64>,
    points: Vec<PointReport>,
}

#[derive(Debug, Serialize)]
struct JsonReport<'a> {
    ferrobench_version: &'static str,
    config: ConfigReport<'a>,
    #[serde(flatten)]
    run: RunReport,
    search: Option<SearchReport>,
}

/// The whole `--json` document.
pub fn json(
    cfg: &Config,
    preset: Option<&str>,
    run: &RunResult,
    series: Option<&Series>,
) -> String {
    let w = &cfg.workload;
    let config = ConfigReport {
        preset,
        servers: cfg.servers.iter().map(|s| s.name.as_str()).collect(),
        hash: cfg.hash,
        keep_going: cfg.keep_going,
        transport: cfg.transport,
        tls: cfg.tls.is_some(),
        protocol: cfg.protocol,
        connections: cfg.connections,
        threads: cfg.threads,
        pipeline: cfg.pipeline,
        duration_secs: cfg.duration.as_secs_f64(),
        warmup_secs: cfg.warmup.as_secs_f64(),
        requests: cfg.requests,
        key_size_max: w.key_size.max(),
        value_size_max: w.value_size.max(),
        get_weight: w.get_weight,
        set_weight: w.set_weight,
        batch: w.batch,
        keyspace: cfg.keyspace,
        keys_per_conn: cfg.keys_per_conn,
        key_dist: format!("{:?}", w.key_dist).to_lowercase(),
        set_mode: w.set_mode,
        preload: cfg.preload,
        verify: cfg.verify,
        load: run.target_rate.map_or(cfg.load, |rate| match cfg.load {
            Load::Open { arrival, .. } => Load::Open { rate, arrival },
            Load::Closed => cfg.load,
        }),
        max_outstanding: cfg.max_outstanding,
        timeout_ms: cfg.timeout.as_secs_f64() * 1e3,
        seed: cfg.seed,
    };
    let search = series.map(|s| SearchReport {
        kind: if s.slo.is_some() { "slo" } else { "sweep" },
        percentile: s.slo.map(|x| x.quantile * 100.0),
        target_latency_us: s.slo.map(|x| x.latency.as_secs_f64() * 1e6),
        best_rate: s.best_rate,
        points: s
            .points
            .iter()
            .map(|p| PointReport {
                target_rate: p.result.target_rate,
                ops_per_sec: p.result.ops_per_sec(),
                dropped: p.result.stats.total.counters.dropped,
                latency_us: LatencyUs::of(&p.result.stats.total.latency),
                met: p.met,
            })
            .collect(),
    });
    let doc = JsonReport {
        ferrobench_version: env!("CARGO_PKG_VERSION"),
        config,
        run: RunReport::of(cfg, run),
        search,
    };
    serde_json::to_string_pretty(&doc).expect("reports serialize")
}

/// The final human table.
pub fn table(cfg: &Config, run: &RunResult, out: &mut impl Write) -> std::io::Result<()> {
    let r = RunReport::of(cfg, run);
    writeln!(
        out,
        "{:<22} {:>10} {:>12} {:>12} {:>7} {:>7} {:>8}  {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "scope",
        "ops",
        "ops/s",
        "keys/s",
        "hit",
        "errors",
        "timeouts",
        "p50 µs",
        "p90 µs",
        "p99 µs",
        "p99.9 µs",
        "p99.99µs",
        "max µs"
    )?;
    let row = |out: &mut dyn Write, name: &str, s: &ScopeReport| {
        let l = &s.latency_us;
        writeln!(out, "{:<22} {:>10} {:>12.0} {:>12.0} {:>7.4} {:>7} {:>8}  {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
            name, s.ops, s.ops_per_sec, s.keys_per_sec, s.hit_ratio, s.errors, s.timeouts, l.p50, l.p90, l.p99, l.p999, l.p9999, l.max)
    };
    row(out, "total", &r.total)?;
    if r.servers.len() > 1 {
        for s in &r.servers {
            row(out, &s.server, &s.figures)?;
        }
    }
    write!(
        out,
        "elapsed {:.2} s, client CPU {:.2} s ({:.2} µs/op)",
        r.elapsed_secs, r.client_cpu_secs, r.client_cpu_us_per_op
    )?;
    if let Some(rate) = r.target_rate {
        write!(out, ", target {rate:.0}/s, dropped {}", r.dropped)?;
    }
    if cfg.verify {
        write!(out, ", verify failures {}", r.verify_failures)?;
    }
    if cfg.keep_going {
        let c = &r.counters;
        write!(
            out,
            ", connections lost {}, reconnected {}",
            c.disconnects, c.reconnects
        )?;
    }
    if r.lost_datagrams > 0 {
        write!(out, ", lost datagrams {}", r.lost_datagrams)?;
    }
    writeln!(out)
}

/// CSV: a header and one row per run.
pub fn csv(cfg: &Config, runs: &[&RunResult], out: &mut impl Write) -> std::io::Result<()> {
    writeln!(out, "target_rate,ops,ops_per_sec,keys_per_sec,hit_ratio,errors,timeouts,dropped,verify_failures,p50_us,p90_us,p99_us,p999_us,p9999_us,max_us,client_cpu_secs")?;
    for run in runs {
        let r = RunReport::of(cfg, run);
        let l = &r.total.latency_us;
        writeln!(
            out,
            "{},{},{:.1},{:.1},{:.6},{},{},{},{},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.3}",
            r.target_rate.map_or(String::new(), |x| format!("{x:.1}")),
            r.total.ops,
            r.total.ops_per_sec,
            r.total.keys_per_sec,
            r.total.hit_ratio,
            r.total.errors,
            r.total.timeouts,
            r.dropped,
            r.verify_failures,
            l.p50,
            l.p90,
            l.p99,
            l.p999,
            l.p9999,
            l.max,
            r.client_cpu_secs
        )?;
    }
    Ok(())
}

/// The percentile distribution in HdrHistogram's `.hgrm` text form (values
/// in µs), which HdrHistogram's plotter reads.
pub fn hgrm(h: &Histogram<u64>, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        out,
        "{:>12} {:>14} {:>10} {:>14}\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    )?;
    let mut total = 0;
    for v in h.iter_quantiles(5) {
        total += v.count_since_last_iteration();
        let q = v.quantile_iterated_to();
        let inv = if q < 1.0 {
            format!("{:>14.2}", 1.0 / (1.0 - q))
        } else {
            String::new()
        };
        writeln!(
            out,
            "{:>12.3} {:>14.12} {:>10} {inv}",
            v.value_iterated_to() as f64 / 1e3,
            q,
            total
        )?;
    }
    writeln!(
        out,
        "#[Mean    = {:>12.3}, StdDeviation   = {:>12.3}]",
        h.mean() / 1e3,
        h.stdev() / 1e3
    )?;
    writeln!(
        out,
        "#[Max     = {:>12.3}, Total count    = {:>12}]",
        h.max() as f64 / 1e3,
        h.len()
    )?;
    writeln!(
        out,
        "#[Buckets = {:>12}, SubBuckets     = {:>12}]",
        h.buckets(),
        h.distinct_values()
    )
}
