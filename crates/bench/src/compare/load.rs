//! Drives one server with a ferrobench preset, in this process, and
//! measures the server from outside while it runs.
//!
//! ```text
//!   preload (unmeasured, once per server and preset)
//!   for each run:  /proc/PID/stat  ->  engine::run (closed loop, no warm-up)
//!                  ->  /proc/PID/stat, VmRSS
//!   server CPU per op = (utime+stime after - before) / ops the client completed
//! ```
//!
//! The load generator runs in this process, whose threads are pinned to
//! the client CPU; the engine's worker threads inherit that pinning.
//! Preloading is a separate, unmeasured step so its sets never count in a
//! run's CPU figure. With no warm-up, the CPU window and the op count cover
//! the same requests, apart from 50 connects and the final in-flight replies.

use anyhow::Context;
use clap::Parser;
use serde::{Deserialize, Serialize};

use super::procstat;
use super::servers::Server;
use super::summary::Summary;
use crate::cli::{self, Args, Mode};
use crate::config::Config;
use crate::engine::{self, Phase, RunResult};
use crate::report::RunReport;
use crate::rng::Rng;
use crate::search::{self, Series};
use crate::workload::SizeDist;

/// One measured run against one server.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunFigures {
    pub ops: u64,
    pub keys: u64,
    pub ops_per_sec: f64,
    pub keys_per_sec: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub hit_ratio: f64,
    pub errors: u64,
    pub timeouts: u64,
    pub elapsed_secs: f64,
    /// Server utime + stime over the run.
    pub server_cpu_secs: f64,
    /// Server VmRSS after the run.
    pub server_rss_bytes: u64,
    /// ferrobench's own CPU over the measured run.
    pub client_cpu_secs: f64,
    /// CPU that other processes used over the measured window: the machine's
    /// user + system time less the server's and ferrobench's (connection
    /// sweep only; absent, and 0, elsewhere).
    #[serde(default)]
    pub other_cpu_secs: f64,
}

impl RunFigures {
    /// Server CPU seconds per million ops (= µs per op).
    pub fn cpu_per_mop(&self) -> f64 {
        self.server_cpu_secs * 1e6 / self.ops.max(1) as f64
    }

    /// Server CPU seconds per million keys (a 48-key get is 48 keys).
    pub fn cpu_per_mkey(&self) -> f64 {
        self.server_cpu_secs * 1e6 / self.keys.max(1) as f64
    }

    fn of(cfg: &Config, r: &RunResult, server_cpu_secs: f64, server_rss_bytes: u64) -> RunFigures {
        let rep = RunReport::of(cfg, r);
        RunFigures {
            ops: rep.counters.ops,
            keys: rep.counters.keys,
            ops_per_sec: rep.total.ops_per_sec,
            keys_per_sec: rep.total.keys_per_sec,
            p50_us: rep.total.latency_us.p50,
            p99_us: rep.total.latency_us.p99,
            p999_us: rep.total.latency_us.p999,
            hit_ratio: rep.total.hit_ratio,
            errors: rep.total.errors,
            timeouts: rep.total.timeouts,
            elapsed_secs: rep.elapsed_secs,
            server_cpu_secs,
            server_rss_bytes,
            client_cpu_secs: r.cpu_secs,
            other_cpu_secs: 0.0,
        }
    }
}

/// The runs of `key` (a server, or a row of the TLS comparison) among every
/// key's runs.
pub fn runs_of<K: PartialEq>(runs: &[(K, Vec<RunFigures>)], key: K) -> &[RunFigures] {
    runs.iter()
        .find(|(k, _)| *k == key)
        .map_or(&[], |(_, r)| r.as_slice())
}

/// A figure of `key`'s runs among every key's, summarised.
pub fn summary_of<K: PartialEq>(
    runs: &[(K, Vec<RunFigures>)],
    key: K,
    f: impl Fn(&RunFigures) -> f64,
) -> Option<Summary> {
    Summary::of(&runs_of(runs, key).iter().map(f).collect::<Vec<_>>())
}

/// The mean of a size distribution (by sampling; exact for fixed sizes).
fn mean_size(d: &SizeDist) -> usize {
    if let Some(n) = d.as_fixed() {
        return n;
    }
    let mut rng = Rng::new(42);
    let n = 20_000;
    ((0..n).map(|_| d.sample(&mut rng) as u64).sum::<u64>() / n) as usize
}

/// The floor's canned value size for `preset`: its mean value size.
pub fn floor_value_bytes(preset: &str) -> anyhow::Result<usize> {
    let knobs = cli::preset(preset)?;
    Ok(knobs.value_size.as_ref().map_or(32, mean_size))
}

/// ferrobench flags -> a config, exactly as the command line would resolve
/// them (`flags` excludes the program name). Never shows progress.
pub fn config(flags: &[String]) -> anyhow::Result<(Config, Mode)> {
    let argv = std::iter::once("ferrobench".to_string())
        .chain(flags.iter().cloned())
        .chain(["--quiet".to_string()]);
    let args = Args::try_parse_from(argv).with_context(|| format!("ferrobench {flags:?}"))?;
    cli::resolve(&args)
}

/// The flags for preset `preset` against `server`, plus `extra`.
pub fn flags(preset: &str, server: &Server, extra: &[&str]) -> Vec<String> {
    let mut f: Vec<String> = vec![
        "--preset".into(),
        preset.into(),
        "--server".into(),
        server.addr_string(),
    ];
    if let Some(tls) = &server.tls {
        // Its certificate is the CA: the client checks it, and that it names 127.0.0.1.
        f.extend([
            "--tls".into(),
            "--tls-ca".into(),
            tls.cert.display().to_string(),
        ]);
    }
    f.extend(extra.iter().map(|s| s.to_string()));
    f
}

/// Sets every key of the preset once (unmeasured): the preset's preload,
/// followed by a zero-length run.
pub fn preload(preset: &str, server: &Server) -> anyhow::Result<()> {
    let (mut cfg, _) = config(&flags(preset, server, &["--duration", "0"]))?;
    cfg.preload = true;
    engine::run(&cfg).with_context(|| format!("preloading {} for {preset}", server.kind.name()))?;
    Ok(())
}

/// Runs `flags` (a closed-loop, single run) against `server` and measures it.
pub fn measure(server: &mut Server, flags: &[String]) -> anyhow::Result<RunFigures> {
    let (cfg, _) = config(flags)?;
    let before = server.cpu_ticks()?;
    let result = engine::run(&cfg).with_context(|| format!("ferrobench {}", flags.join(" ")));
    let after = server.cpu_ticks();
    server.check_running()?;
    let result = result?;
    let rss = server.rss_bytes()?;
    Ok(RunFigures::of(
        &cfg,
        &result,
        before.secs_until(after?),
        rss,
    ))
}

/// [`measure`], with the server's CPU (and ferrobench's) read at the edges
/// of the measured window itself (after the warm-up, at the end of the run) rather than
/// around the whole run, so that connecting and closing thousands of
/// sessions is not charged to the requests. `connected` runs once every
/// connection is open, before any request (to wait until the server has
/// accepted them all, say).
pub fn measure_window(
    server: &mut Server,
    flags: &[String],
    connected: &mut dyn FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<RunFigures> {
    let (cfg, _) = config(flags)?;
    let (mut before, mut after) = (None, None);
    let (mut client_before, mut client_after) = (0.0, 0.0);
    let (mut machine_before, mut machine_after) = (0.0, 0.0);
    let result = {
        let server = &*server;
        let mut observe = |phase: Phase| -> anyhow::Result<()> {
            match phase {
                Phase::Connected => connected()?,
                Phase::MeasureStart => {
                    before = Some(server.cpu_ticks()?);
                    client_before = engine::cpu_seconds();
                    machine_before = procstat::machine_busy_secs()?;
                }
                Phase::MeasureEnd => {
                    after = Some(server.cpu_ticks()?);
                    client_after = engine::cpu_seconds();
                    machine_after = procstat::machine_busy_secs()?;
                }
            }
            Ok(())
        };
        engine::run_observed(&cfg, Some(&mut observe))
            .with_context(|| format!("ferrobench {}", flags.join(" ")))
    };
    server.check_running()?;
    let result = result?;
    let (Some(before), Some(after)) = (before, after) else {
        anyhow::bail!("the run ended without a measured window");
    };
    let rss = server.rss_bytes()?;
    let mut figures = RunFigures::of(&cfg, &result, before.secs_until(after), rss);
    // ferrobench's own CPU over the same window, not its setup and drain.
    figures.client_cpu_secs = client_after - client_before;
    figures.other_cpu_secs =
        (machine_after - machine_before - figures.client_cpu_secs - figures.server_cpu_secs)
            .max(0.0);
    Ok(figures)
}

/// The outcome of one SLO search against one server.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SloFigures {
    /// Highest target rate that met the SLO (None: not even the lowest).
    pub best_rate: Option<f64>,
    /// The run these figures describe: the best passing one, or when none
    /// passed, the lowest rate tried.
    pub target_rate: f64,
    /// Achieved ops/s, p50 and p99 of that run.
    pub ops_per_sec: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// Every open-loop point: (achieved ops/s, p50 µs, p99 µs, met).
    pub points: Vec<(f64, f64, f64, bool)>,
}

/// The preset's `--slo` search against `server`; returns the figures and the
/// series (for ferrobench's own plot).
pub fn slo_search(server: &mut Server, flags: &[String]) -> anyhow::Result<(SloFigures, Series)> {
    let (cfg, mode) = config(flags)?;
    let Mode::Slo { slo, steps } = mode else {
        anyhow::bail!("ferrobench {flags:?} is not an --slo search");
    };
    let series = search::slo_search(&cfg, slo, steps)
        .with_context(|| format!("ferrobench {}", flags.join(" ")));
    server.check_running()?;
    let series = series?;
    let q = |r: &RunResult, q: f64| r.stats.total.latency.value_at_quantile(q) as f64 / 1e3;
    // Points are sorted by rate, so the first is the lowest tried.
    let headline = match series.best_rate {
        Some(_) => series.headline(),
        None => series.points.first().map(|p| &p.result),
    };
    let figures = SloFigures {
        best_rate: series.best_rate,
        target_rate: headline.and_then(|r| r.target_rate).unwrap_or(0.0),
        ops_per_sec: headline.map_or(0.0, RunResult::ops_per_sec),
        p50_us: headline.map_or(0.0, |r| q(r, 0.5)),
        p99_us: headline.map_or(0.0, |r| q(r, 0.99)),
        points: series
            .points
            .iter()
            .map(|p| {
                (
                    p.result.ops_per_sec(),
                    q(&p.result, 0.5),
                    q(&p.result, 0.99),
                    p.met,
                )
            })
            .collect(),
    };
    Ok((figures, series))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_value_sizes_follow_the_presets() {
        assert_eq!(floor_value_bytes("solarflare-get").unwrap(), 20);
        assert_eq!(floor_value_bytes("legup-p16").unwrap(), 100);
        let olio = floor_value_bytes("sun-olio").unwrap();
        // 0.6 * 52 + 0.3 * 1536 + 0.1 * 12800 = 1772
        assert!((1650..1900).contains(&olio), "{olio}");
    }

    #[test]
    fn runs_are_found_by_key() {
        let run = |ops_per_sec: f64| RunFigures {
            ops: 10,
            keys: 10,
            ops_per_sec,
            keys_per_sec: ops_per_sec,
            p50_us: 1.0,
            p99_us: 2.0,
            p999_us: 3.0,
            hit_ratio: 1.0,
            errors: 0,
            timeouts: 0,
            elapsed_secs: 1.0,
            server_cpu_secs: 0.5,
            server_rss_bytes: 0,
            client_cpu_secs: 0.5,
            other_cpu_secs: 0.0,
        };
        let runs = vec![("a", vec![run(1.0), run(3.0)]), ("b", vec![run(7.0)])];
        assert_eq!(runs_of(&runs, "a").len(), 2);
        assert!(runs_of(&runs, "c").is_empty());
        let s = summary_of(&runs, "a", |f| f.ops_per_sec).unwrap();
        assert_eq!((s.median, s.min, s.max, s.n), (2.0, 1.0, 3.0, 2));
        assert_eq!(summary_of(&runs, "c", |f| f.ops_per_sec), None);
    }
}
