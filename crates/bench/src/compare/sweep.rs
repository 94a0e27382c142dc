//! The connection sweep: LegUp's experiment (`--connections-sweep`, or
//! `legup-sweep` in `--presets`).
//!
//! LegUp's FPGA memcached paper swept memtier from 5 to 1 400 connections at
//! pipeline 16 (1:1 get:set, 100-byte values); ElastiCache flattened at about
//! 1.4 M ops/s from 80 connections while its latency rose to 18 ms. Here
//! each step runs the legup-p16 workload at its connection count (and
//! pipeline depth, `N:P`), on ferrocache, memcached and the floor, from one
//! load thread, and the sweep goes on to 10 000 connections where the
//! open-file limit allows.
//!
//! ```text
//!   plan: steps whose sockets do not fit under RLIMIT_NOFILE are skipped
//!         (a warning each); -c = the largest step + a reserve, all three servers
//!   start ferrocache, memcached, floor (CPU 0)   preload ferrocache, memcached once
//!   for each step (C connections, P in flight each):
//!       rep 1: A B F   rep 2: A B F   rep 3: A B F      (interleaved, never batched)
//!       a run: wait until the server has closed the last run's sockets
//!              connect C sessions -> wait until the server counts them
//!              warm-up -> [server CPU ticks] measured [server CPU ticks] -> drain, close
//!   stop all three
//! ```
//!
//! The servers stay up for the whole sweep: one preload, and every step sees
//! the same 10 000 keys. The server's CPU is read at the edges of the measured
//! window, so accepting and closing 10 000 connections is not charged to the
//! requests; the warm-up covers ferrobench's own setup of that many sessions.

use std::io::Write as _;
use std::net::TcpStream;
use std::path::Path;
use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use super::load::{self, RunFigures};
use super::plot::{connection_sweep, SweepLine};
use super::procstat;
use super::servers::{self, Binaries, Kind, Server, CONN_LIMIT};
use super::summary::Summary;
use crate::fdlimit::{self, NofileLimit};

/// What `ferrobench compare --help` says about the sweep, after the flags.
pub const HELP: &str = "\
Connection sweep (LegUp's experiment): `--presets legup-sweep`, or `--connections-sweep STEPS`,
runs the legup-p16 workload (pipeline 16, 1:1 get:set, 100-byte values, 10 000 preloaded keys)
at each step's connection count on ferrocache, memcached and the floor, interleaved, from one
load thread, with the servers at `-c` above the largest step. Steps whose sockets do not fit
under the open-file limit (ferrobench raises its soft limit to the hard one at start) are
skipped with a warning. Alone, the sweep skips the memory section and writes only its own
section of --out, plus legup-sweep.svg in --plots.";

/// The name `--presets` accepts for the sweep with its default steps.
pub const SWEEP_PRESET: &str = "legup-sweep";
/// The ferrobench preset every step runs (its connections and pipeline replaced).
pub const WORKLOAD: &str = "legup-p16";
/// LegUp's pipeline depth: a step without `:P` uses it.
pub const LEGUP_PIPELINE: usize = 16;
/// LegUp's largest step, the one the targets are judged at.
pub const LEGUP_CONNECTIONS: usize = 1400;
/// The many-connections target: this many, one request in flight each.
pub const MANY_CONNECTIONS: usize = 10_000;
/// LegUp's steps at pipeline 16, on to 10 000, then 1 400 and 10 000
/// connections with one request in flight each (the many-clients target,
/// and the same connection count at LegUp's largest step for comparison).
pub const DEFAULT_STEPS: &str = "5,20,80,200,400,800,1400,4000,10000,1400:1,10000:1";
/// Descriptors beyond one per connection that a step needs, on each side:
/// ferrobench's stdio, event loop, `stats` and preload sockets, log files;
/// a server's listeners, event loop and memcached's own reserved few.
pub const SWEEP_FD_RESERVE: u64 = 256;
/// A larger step is a typo, not a benchmark.
const MAX_STEP_CONNECTIONS: usize = 1_000_000;
/// A reply later than this counts as a timeout. LegUp saw 18 ms; 10 000 × 16
/// requests in flight on a slow server can take longer than ferrobench's
/// default second without anything being wrong.
const SWEEP_TIMEOUT: &str = "5s";
/// How long a server may take to accept a step's connections, or to close
/// the previous run's, before the run goes on with a warning.
const SETTLE_LIMIT: Duration = Duration::from_secs(15);

/// One step: `connections` sessions, each with `pipeline` requests in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    pub connections: usize,
    pub pipeline: usize,
}

impl Step {
    /// Requests in flight over all sessions.
    pub fn in_flight(&self) -> usize {
        self.connections * self.pipeline
    }
}

impl FromStr for Step {
    type Err = anyhow::Error;

    /// `N` (pipeline 16) or `N:P`.
    fn from_str(s: &str) -> anyhow::Result<Step> {
        let (c, p) = match s.split_once(':') {
            Some((c, p)) => (c, Some(p)),
            None => (s, None),
        };
        let number = |v: &str| {
            v.trim().parse::<usize>().with_context(|| {
                format!("sweep step {s:?} must be CONNECTIONS or CONNECTIONS:PIPELINE")
            })
        };
        let step = Step {
            connections: number(c)?,
            pipeline: p.map_or(Ok(LEGUP_PIPELINE), number)?,
        };
        if step.connections == 0 || step.pipeline == 0 {
            bail!("sweep step {s:?}: connections and pipeline must be at least 1");
        }
        if step.connections > MAX_STEP_CONNECTIONS {
            bail!("sweep step {s:?}: more than {MAX_STEP_CONNECTIONS} connections");
        }
        Ok(step)
    }
}

/// For clap: one step of `--connections-sweep`.
pub fn parse_step(s: &str) -> anyhow::Result<Step> {
    s.parse()
}

/// The default steps, parsed.
pub fn default_steps() -> Vec<Step> {
    DEFAULT_STEPS
        .split(',')
        .map(|s| s.parse().expect("the default steps parse"))
        .collect()
}

/// What the sweep will run.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepPlan {
    pub steps: Vec<Step>,
    /// Steps left out, each with why.
    pub skipped: Vec<String>,
    /// The servers' `-c`.
    pub conn_limit: u32,
}

/// Keeps the steps whose sockets fit under `limit` (ferrobench's soft
/// `RLIMIT_NOFILE`, which the servers inherit), and sizes `-c` above the
/// largest. Duplicate steps are an error.
pub fn plan(steps: &[Step], limit: NofileLimit) -> anyhow::Result<SweepPlan> {
    let mut kept: Vec<Step> = Vec::new();
    let mut skipped = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        if steps[..i].contains(step) {
            bail!(
                "sweep step {} connections, pipeline {} is given twice",
                step.connections,
                step.pipeline
            );
        }
        let fds = step.connections as u64 + SWEEP_FD_RESERVE;
        if limit.fits(fds) {
            kept.push(*step);
        } else {
            skipped.push(format!(
                "{} connections (pipeline {}) skipped: they need about {fds} file descriptors, \
                 above the open-file limit of {} (hard limit {})",
                step.connections,
                step.pipeline,
                limit.soft.unwrap_or(u64::MAX),
                limit.hard.map_or("unlimited".into(), |h| h.to_string())
            ));
        }
    }
    let Some(largest) = kept.iter().map(|s| s.connections as u64).max() else {
        bail!(
            "no step of the connection sweep fits under the open-file limit: {}",
            skipped.join("; ")
        );
    };
    // Never below the presets' -c when the limit allows it, so small sweeps
    // run the servers as the presets do.
    let usual = limit
        .soft
        .map_or(u64::from(CONN_LIMIT), |s| s.min(u64::from(CONN_LIMIT)));
    let conn_limit = (largest + SWEEP_FD_RESERVE).max(usual);
    Ok(SweepPlan {
        steps: kept,
        skipped,
        conn_limit: u32::try_from(conn_limit).context("-c does not fit in 32 bits")?,
    })
}

/// The warm-up before a step's measured window: long enough for ferrobench
/// to set up that many sessions (buffers, the first round of requests) and
/// for the servers to settle, so the window sees the steady state only.
pub fn warmup(step: Step) -> Duration {
    Duration::from_millis(250).max(Duration::from_micros(100) * step.connections as u32)
}

/// One step: every run of every server.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StepRuns {
    pub step: Step,
    pub runs: Vec<(Kind, Vec<RunFigures>)>,
}

impl StepRuns {
    pub fn of(&self, kind: Kind) -> &[RunFigures] {
        load::runs_of(&self.runs, kind)
    }

    /// A figure of `kind`'s runs, summarised.
    pub fn summary(&self, kind: Kind, f: impl Fn(&RunFigures) -> f64) -> Option<Summary> {
        load::summary_of(&self.runs, kind, f)
    }
}

/// Everything the sweep measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SweepRuns {
    /// The ferrobench preset each step ran.
    pub workload: String,
    /// The servers' `-c`.
    pub conn_limit: u32,
    /// Server flags, runs, pinning, the open-file limit, in words.
    pub settings: Vec<String>,
    pub steps: Vec<StepRuns>,
    /// Steps not run, with why.
    pub skipped: Vec<String>,
    /// What went wrong or looks suspicious in the sweep's runs.
    pub warnings: Vec<String>,
    /// ferrobench's peak resident memory (VmHWM) at the end of the sweep.
    pub client_peak_rss_bytes: u64,
    /// How long the sweep took, servers' start and stop included.
    pub elapsed_secs: f64,
    /// The throughput and p99 plot, relative to the report.
    pub plot: Option<String>,
}

/// How the sweep runs (from the compare flags).
pub struct RunSettings {
    pub reps: usize,
    pub duration: Duration,
    pub memory_mb: u64,
    /// The report's pinning line.
    pub pinning: String,
}

/// The connection sweep: fit its steps under the open-file limit, run them,
/// draw the plot.
pub fn run_all(
    bins: &Binaries,
    steps: &[Step],
    how: &RunSettings,
    plots_dir: Option<&Path>,
) -> anyhow::Result<SweepRuns> {
    let limit = fdlimit::raise();
    let sweep_plan = plan(steps, limit)?;
    for s in &sweep_plan.skipped {
        eprintln!("ferrobench compare: warning: {s}");
    }
    let load_before = procstat::load_average();
    let mut runs = run(bins, &sweep_plan, how)?;
    let load_after = procstat::load_average();
    runs.settings = vec![
        format!(
            "**Servers:** `{}` on free ports, started once for the whole sweep (`-c` above the largest step); the floor adds `--null-store --null-value-bytes 100`",
            bins.flags_text(how.memory_mb, sweep_plan.conn_limit)
        ),
        how.pinning.clone(),
        format!(
            "**Runs:** {} repetition(s) per step, interleaved ferrocache, memcached, floor; {} s measured after a warm-up of 0.1 ms per connection (at least 0.25 s); one ferrobench thread; keys preloaded once per server; replies after 5 s count as timeouts",
            how.reps,
            how.duration.as_secs_f64()
        ),
        format!(
            "**Open files:** {}; the servers inherit it (memcached sets its own to `-c`)",
            limit.describe()
        ),
        // On a shared machine other work competes for both pinned CPUs; the
        // load average says how much (this sweep's own processes add about 2).
        format!(
            "**Load average (1 min):** {} at the start of the sweep, {} at its end",
            load_before, load_after
        ),
    ];
    if let Some(dir) = plots_dir {
        let mut lines: Vec<SweepLine> = Vec::new();
        for st in &runs.steps {
            for (kind, _) in &st.runs {
                let (Some(ops), Some(p99)) = (
                    st.summary(*kind, |f| f.ops_per_sec),
                    st.summary(*kind, |f| f.p99_us),
                ) else {
                    continue;
                };
                let point = (st.step.connections as f64, ops.median, p99.median);
                match lines
                    .iter_mut()
                    .find(|l| l.kind == *kind && l.pipeline == st.step.pipeline)
                {
                    Some(l) => l.points.push(point),
                    None => lines.push(SweepLine {
                        kind: *kind,
                        pipeline: st.step.pipeline,
                        points: vec![point],
                    }),
                }
            }
        }
        let path = dir.join(format!("{SWEEP_PRESET}.svg"));
        let svg = connection_sweep(
            &format!(
                "{}: throughput and p99 against connections (medians)",
                WORKLOAD
            ),
            &lines,
            LEGUP_PIPELINE,
        );
        std::fs::write(&path, svg).with_context(|| format!("writing {}", path.display()))?;
        runs.plot = Some(path.display().to_string());
    }
    Ok(runs)
}

/// Runs the sweep `plan` on all three servers.
pub fn run(bins: &Binaries, plan: &SweepPlan, how: &RunSettings) -> anyhow::Result<SweepRuns> {
    let started = Instant::now();
    let value_bytes = load::floor_value_bytes(WORKLOAD)?;
    let mut servers: Vec<Server> = [Kind::Ferrocache, Kind::Memcached, Kind::Floor]
        .into_iter()
        .map(|k| {
            let s = Server::start_with_limit(bins, k, how.memory_mb, value_bytes, plan.conn_limit)?;
            eprintln!(
                "ferrobench compare: started {} pid {} on {} (-c {})",
                k.name(),
                s.pid(),
                s.addr,
                plan.conn_limit
            );
            Ok(s)
        })
        .collect::<anyhow::Result<_>>()?;
    for s in servers.iter().filter(|s| s.kind != Kind::Floor) {
        load::preload(WORKLOAD, s)?;
    }
    let mut counters = servers
        .iter()
        .map(ConnCounter::open)
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut out = SweepRuns {
        workload: WORKLOAD.into(),
        conn_limit: plan.conn_limit,
        skipped: plan.skipped.clone(),
        ..SweepRuns::default()
    };
    for &step in &plan.steps {
        let mut runs: Vec<(Kind, Vec<RunFigures>)> =
            servers.iter().map(|s| (s.kind, Vec::new())).collect();
        for rep in 0..how.reps {
            for (i, server) in servers.iter_mut().enumerate() {
                let f = run_once(server, &mut counters[i], step, rep, how, &mut out.warnings)?;
                runs[i].1.push(f);
            }
        }
        out.steps.push(StepRuns { step, runs });
    }
    drop(counters);
    for s in servers {
        s.stop();
    }
    out.client_peak_rss_bytes = peak_rss_bytes().unwrap_or(0);
    out.elapsed_secs = started.elapsed().as_secs_f64();
    Ok(out)
}

/// One measured run of `step` against `server` (repetition `rep`, from 0),
/// settled before and counted in by `counter`; what looks wrong goes to
/// `warnings`.
fn run_once(
    server: &mut Server,
    counter: &mut ConnCounter,
    step: Step,
    rep: usize,
    how: &RunSettings,
    warnings: &mut Vec<String>,
) -> anyhow::Result<RunFigures> {
    let label = format!(
        "{} conns × p{}, {} repetition {}",
        step.connections,
        step.pipeline,
        server.kind.name(),
        rep + 1
    );
    if !counter.wait_idle(SETTLE_LIMIT)? {
        warnings.push(format!(
            "{label}: the previous run's connections were not all closed after {SETTLE_LIMIT:?}"
        ));
    }
    let (secs, seed, conns, pipeline, warm) = (
        format!("{}", how.duration.as_secs_f64()),
        (rep + 1).to_string(),
        step.connections.to_string(),
        step.pipeline.to_string(),
        format!("{}", warmup(step).as_secs_f64()),
    );
    let flags = load::flags(
        WORKLOAD,
        server,
        &[
            "--preload",
            "false",
            "--duration",
            &secs,
            "--seed",
            &seed,
            "--connections",
            &conns,
            "--pipeline",
            &pipeline,
            "--warmup",
            &warm,
            "--timeout",
            SWEEP_TIMEOUT,
        ],
    );
    // Relative to now: a close the server has not seen yet must not count
    // as one of this run's connections.
    let want = counter.current()? + step.connections as u64;
    let mut late = false;
    let f = load::measure_window(server, &flags, &mut || {
        late = !counter.wait(SETTLE_LIMIT, |n| n >= want)?;
        Ok(())
    })?;
    if late {
        warnings.push(format!(
            "{label}: the server did not count all {} connections within {SETTLE_LIMIT:?} of their connect",
            step.connections
        ));
    }
    eprintln!(
        "[sweep {label}] {:>9.0} ops/s  p99 {:>8.1} µs  server CPU {:>5.2} µs/op ({:>3.0} % busy)  ferrobench {:>3.0} % busy  others {:>3.0} %",
        f.ops_per_sec,
        f.p99_us,
        f.cpu_per_mop(),
        100.0 * f.server_cpu_secs / f.elapsed_secs.max(1e-9),
        100.0 * f.client_cpu_secs / f.elapsed_secs.max(1e-9),
        100.0 * f.other_cpu_secs / f.elapsed_secs.max(1e-9),
    );
    if f.errors + f.timeouts > 0 {
        warnings.push(format!(
            "{label}: {} errors, {} timeouts (replies after {SWEEP_TIMEOUT})",
            f.errors, f.timeouts
        ));
    }
    if server.kind != Kind::Floor && f.hit_ratio < 0.999 {
        warnings.push(format!(
            "{label}: hit ratio {:.4} after preload",
            f.hit_ratio
        ));
    }
    Ok(f)
}

/// A `stats` connection to one server, kept for the whole sweep, that
/// watches the server's `curr_connections`.
struct ConnCounter {
    stream: TcpStream,
    /// The count with no run connected (this connection included).
    idle: u64,
}

impl ConnCounter {
    /// Connects, then takes the idle count once the server has finished
    /// closing the preload's connections (the count stops falling).
    fn open(server: &Server) -> anyhow::Result<ConnCounter> {
        let stream = TcpStream::connect_timeout(&server.addr, Duration::from_secs(3))
            .with_context(|| format!("connecting to {} for stats", server.kind.name()))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        stream.set_nodelay(true)?;
        let mut c = ConnCounter { stream, idle: 0 };
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut last = c.current()?;
        loop {
            std::thread::sleep(Duration::from_millis(50));
            let now = c.current()?;
            if now >= last || Instant::now() > deadline {
                c.idle = now.min(last);
                return Ok(c);
            }
            last = now;
        }
    }

    fn current(&mut self) -> anyhow::Result<u64> {
        let stats = servers::stats_on(&mut self.stream)?;
        Ok(servers::stat_u64(&stats, "curr_connections"))
    }

    /// Waits until the server is back to its idle count; false when it is
    /// not after `limit`.
    fn wait_idle(&mut self, limit: Duration) -> anyhow::Result<bool> {
        let idle = self.idle;
        self.wait(limit, |n| n <= idle)
    }

    /// Polls until `done(the count)`; false when it still is not after `limit`.
    fn wait(&mut self, limit: Duration, done: impl Fn(u64) -> bool) -> anyhow::Result<bool> {
        let deadline = Instant::now() + limit;
        loop {
            let n = self.current()?;
            if done(n) {
                return Ok(true);
            }
            if Instant::now() > deadline {
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for ConnCounter {
    fn drop(&mut self) {
        let _ = self.stream.write_all(b"quit\r\n");
    }
}

/// `VmHWM` of this process, in bytes.
fn peak_rss_bytes() -> Option<u64> {
    parse_vm_hwm(&std::fs::read_to_string("/proc/self/status").ok()?)
}

fn parse_vm_hwm(status: &str) -> Option<u64> {
    let line = status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?;
    let kib: u64 = line.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(soft: u64) -> NofileLimit {
        NofileLimit {
            before: Some(1024),
            soft: Some(soft),
            hard: Some(soft),
        }
    }

    fn steps(s: &str) -> Vec<Step> {
        s.split(',').map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn steps_parse_with_legup_pipeline_by_default() {
        assert_eq!(
            "1400".parse::<Step>().unwrap(),
            Step {
                connections: 1400,
                pipeline: 16
            }
        );
        assert_eq!(
            " 10000:1".parse::<Step>().unwrap(),
            Step {
                connections: 10_000,
                pipeline: 1
            }
        );
        for bad in ["", "0", "5:0", "x", "5:y", "1:2:3", "2000000"] {
            assert!(bad.parse::<Step>().is_err(), "{bad:?}");
        }
        let d = default_steps();
        assert_eq!(d.len(), 11);
        assert_eq!(d[6].in_flight(), 1400 * 16);
        assert!(d.contains(&Step {
            connections: MANY_CONNECTIONS,
            pipeline: 1
        }));
    }

    #[test]
    fn steps_past_the_fd_limit_are_skipped_and_c_covers_the_largest() {
        let p = plan(&default_steps(), limit(20_000)).unwrap();
        assert_eq!(p.steps.len(), 11);
        assert!(p.skipped.is_empty());
        assert_eq!(p.conn_limit, 10_000 + 256);

        // A machine whose hard limit is 4096: everything from 4000 up is left out.
        let p = plan(&default_steps(), limit(4096)).unwrap();
        let kept: Vec<usize> = p.steps.iter().map(|s| s.connections).collect();
        assert_eq!(kept, [5, 20, 80, 200, 400, 800, 1400, 1400]);
        assert_eq!(p.skipped.len(), 3);
        assert!(
            p.skipped[0].starts_with("4000 connections (pipeline 16) skipped"),
            "{:?}",
            p.skipped
        );
        assert!(p.skipped[0].contains("4256 file descriptors"));
        assert_eq!(p.conn_limit, 4096, "the presets' -c when it is larger");

        // Small steps under a small limit: -c stays under the limit.
        let p = plan(&steps("5,20"), limit(1024)).unwrap();
        assert_eq!(p.conn_limit, 1024);
        assert!(plan(&steps("5000"), limit(1024)).is_err(), "nothing fits");
        assert!(plan(&steps("5,20,5"), limit(20_000)).is_err(), "duplicate");
        let unlimited = NofileLimit {
            before: None,
            soft: None,
            hard: None,
        };
        assert_eq!(plan(&steps("20000"), unlimited).unwrap().conn_limit, 20_256);
    }

    #[test]
    fn warmup_grows_with_connections() {
        let at = |c| {
            warmup(Step {
                connections: c,
                pipeline: 16,
            })
        };
        assert_eq!(at(5), Duration::from_millis(250));
        assert_eq!(at(1400), Duration::from_millis(250));
        assert_eq!(at(10_000), Duration::from_secs(1));
    }

    #[test]
    fn peak_rss_parses() {
        let status =
            "Name:\tferrobench\nVmPeak:\t  900 kB\nVmHWM:\t    2048 kB\nVmRSS:\t 1000 kB\n";
        assert_eq!(parse_vm_hwm(status), Some(2048 * 1024));
        assert_eq!(parse_vm_hwm("VmRSS: 1 kB\n"), None);
    }
}
