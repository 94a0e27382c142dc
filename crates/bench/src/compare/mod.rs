//! `ferrobench compare`: ferrocache against memcached, side by side, on
//! this machine, in one run (issue 4; DESIGN.md "Measuring").
//!
//! A tour:
//! - [`procs`]: children and their guaranteed stop (Drop guards, SIGINT/SIGTERM
//!   watcher, parent-death signal); CPU pinning with taskset.
//! - [`procstat`]: `/proc/PID/stat` CPU ticks and VmRSS.
//! - `servers`: ferrocache, memcached and the floor (ferrocache
//!   `--null-store`), same flags `-t 1 -m M -c 4096 -U 0`, free ports, CPU 0.
//! - `load`: one preset run in this process (pinned to CPU 1), measured
//!   from outside through the server's `/proc` figures; the SLO search.
//! - `memory`: fill to the first eviction; Zipf hit ratio.
//! - [`summary`]: median and min–max spread; [`table`]: the markdown;
//!   `plot`: every server's SLO search on one chart, and the sweep's chart.
//! - [`sweep`]: the connection sweep (LegUp's experiment, `--connections-sweep`
//!   or `legup-sweep` in `--presets`): legup-p16 from 5 to 10 000 connections;
//!   `sweep_table` renders it into a section of its own.
//! - [`tls`]: `--tls`, server CPU per request over TLS: memcached -Z,
//!   ferrocache -Z and ferrocache plain; `tls_table` renders its section.
//! - `output`: what a run writes: `--out`'s markdown, its hand-written notes
//!   kept and the sweep's and TLS sections spliced in place, and the headline.
//!
//! ```text
//!   for each closed-loop preset:
//!       start ferrocache, memcached, floor (CPU 0)   preload ferrocache, memcached
//!       rep 1: A B F   rep 2: A B F   rep 3: A B F     (A B interleaved, never batched)
//!       stop all three
//!   thesis-qos: the same, each run an --slo search
//!   legup-sweep: the same servers (-c above the largest step) for every step,
//!       preloaded once; per step rep 1: A B F ...
//!   memory: per server, a fresh one at a time: fill 20/20, fill sun-olio, Zipf
//!   render -> stdout (headline) + docs/benchmarks.md + docs/plots/*.svg
//! ```
//!
//! A sweep-only or TLS-only run (`--presets legup-sweep`, or
//! `--connections-sweep` or `--tls` without `--presets`) skips the memory
//! section and rewrites only its own section of `--out`, leaving the rest of
//! the document as it is.

mod load;
mod memory;
mod output;
mod plot;
pub mod procs;
pub mod procstat;
mod servers;
pub mod summary;
pub mod sweep;
mod sweep_table;
pub mod table;
pub mod tls;
mod tls_table;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;

use crate::cli::{self, parse_duration, PRESETS};
use crate::fdlimit;
use crate::rng::Rng;
use crate::workload::SizeDist;
use output::{print_headline, write_report};
use servers::{Binaries, Kind, Server};
use sweep::{Step, SWEEP_PRESET};
use table::{FillRow, Machine, PresetRuns, Report, SloRuns, ZipfRow};

/// The preset that is an SLO search rather than a closed-loop run.
const SLO_PRESET: &str = "thesis-qos";
/// The sun-olio value-size mix (as the preset has it).
const SUN_OLIO_VALUES: &str = "4-100:0.6,1024-2048:0.3,5120-20480:0.1";

/// ferrobench compare: ferrocache vs memcached vs the null-store floor, side by side.
#[derive(Debug, Parser)]
#[command(name = "ferrobench compare", version, after_help = sweep::HELP)]
pub struct CompareArgs {
    /// Short runs, one repetition, smaller memory fills: under 3 minutes on 2 cores.
    #[arg(long)]
    pub quick: bool,
    /// Repetitions of every preset on every server [default: 3, --quick 1].
    #[arg(long)]
    pub reps: Option<usize>,
    /// Presets to run, comma separated [default: all seven]; `legup-sweep`
    /// adds the connection sweep (never part of the default).
    #[arg(long, value_delimiter = ',')]
    pub presets: Vec<String>,
    /// Connection sweep steps, `N` (pipeline 16) or `N:P`, comma separated
    /// [default with `--presets legup-sweep`: 5,20,80,200,400,800,1400,4000,10000,1400:1,10000:1].
    /// Without --presets, only the sweep runs.
    #[arg(long, value_delimiter = ',', value_parser = sweep::parse_step, value_name = "N[:P],...")]
    pub connections_sweep: Vec<Step>,
    /// Server CPU per request over TLS: memcached -Z, ferrocache -Z and ferrocache over
    /// plain TCP, interleaved, with a throwaway certificate. Without --presets, only this runs.
    #[arg(long)]
    pub tls: bool,
    /// The workload of --tls.
    #[arg(long, default_value = tls::DEFAULT_PRESET, value_name = "PRESET")]
    pub tls_preset: String,
    /// Measured time of each closed-loop run [default: 5s, --quick 1s].
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Time of each run of the thesis-qos SLO search [default: 2s, --quick 1s].
    #[arg(long, value_parser = parse_duration)]
    pub slo_duration: Option<Duration>,
    /// Open-loop runs per SLO search [default: 8, --quick 5].
    #[arg(long)]
    pub slo_steps: Option<usize>,
    /// Server `-m` for the preset runs.
    #[arg(long, default_value_t = 1024)]
    pub memory_mb: u64,
    /// Server `-m` for the fills to the first eviction [default: --memory-mb, --quick 256].
    #[arg(long)]
    pub fill_mb: Option<u64>,
    /// Server `-m` for the Zipf hit-ratio run [default: 64, --quick 16].
    #[arg(long)]
    pub zipf_mb: Option<u64>,
    /// Skip the memory-efficiency section.
    #[arg(long)]
    pub no_memory: bool,
    /// The ferrocache binary [default: next to this ferrobench, else target/release].
    #[arg(long)]
    pub ferrocache: Option<PathBuf>,
    /// The memcached binary.
    #[arg(long, default_value = "/usr/bin/memcached")]
    pub memcached: PathBuf,
    /// CPU the servers run on.
    #[arg(long, default_value_t = 0)]
    pub server_cpu: usize,
    /// CPU the load generator (this process) runs on.
    #[arg(long, default_value_t = 1)]
    pub client_cpu: usize,
    /// Do not pin anything.
    #[arg(long)]
    pub no_pin: bool,
    /// Markdown report to write (`-` for none; the headline is printed anyway).
    #[arg(long, default_value = "docs/benchmarks.md")]
    pub out: PathBuf,
    /// Directory for the SVG plots (`-` for none).
    #[arg(long, default_value = "docs/plots")]
    pub plots: PathBuf,
    /// Also write every figure as JSON here.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Measure nothing: render --out from the figures a previous `--json` saved.
    #[arg(long, value_name = "FILE.json")]
    pub render_from: Option<PathBuf>,
    /// The command line to record in the report (scripts/bench-compare sets it).
    #[arg(long, hide = true)]
    pub record_command: Option<String>,
}

/// Everything resolved from the flags.
struct Plan {
    reps: usize,
    /// Closed-loop and SLO presets (`legup-sweep` is `sweep`).
    presets: Vec<String>,
    /// The connection sweep's steps, when it runs.
    sweep: Option<Vec<Step>>,
    /// `--tls`: the TLS comparison runs.
    tls: bool,
    duration: Duration,
    slo_duration: Duration,
    slo_steps: usize,
    fill_mb: u64,
    zipf_mb: u64,
    fill_time_limit: Duration,
}

/// `ferrobench compare ...`: `argv` starts with the program name, then `compare`.
pub fn main(argv: Vec<OsString>) -> anyhow::Result<ExitCode> {
    let mut argv = argv;
    if argv.len() > 1 {
        argv.remove(1);
    }
    let args = CompareArgs::parse_from(argv);
    procs::install_signal_handlers();
    // The servers inherit this process's open-file limit.
    fdlimit::raise();
    let result = compare(&args);
    if result.is_err() {
        procs::wait_if_stopping();
    }
    result
}

fn compare(args: &CompareArgs) -> anyhow::Result<ExitCode> {
    if let Some(path) = &args.render_from {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let report: Report =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        write_report(args, &report)?;
        print_headline(&report);
        return Ok(ExitCode::SUCCESS);
    }
    let started = Instant::now();
    let plan = plan(args)?;
    let mut report = Report {
        command: args.record_command.clone().unwrap_or_else(|| {
            let a: Vec<String> = std::env::args().skip(1).collect();
            format!("ferrobench {}", a.join(" "))
        }),
        date: run_text("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        ..Report::default()
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cpu = if args.no_pin {
        None
    } else if cores < 2 || args.server_cpu == args.client_cpu {
        report.warnings.push(format!(
            "not pinned: {cores} CPU(s) available, or server and client CPU are the same"
        ));
        None
    } else {
        procs::pin_self(args.client_cpu)?;
        Some(args.server_cpu)
    };
    let pinning = match cpu {
        Some(c) => format!("**Pinning:** servers on CPU {c} (`taskset -c {c}`), ferrobench on CPU {} (`taskset -a -cp`)", args.client_cpu),
        None => "**Pinning:** none".into(),
    };
    let bins = Binaries {
        ferrocache: locate_ferrocache(args.ferrocache.as_deref())?,
        memcached: args.memcached.clone(),
        cpu,
        as_root: procstat::euid()? == 0,
        log_dir: log_dir()?,
    };
    report.machine = machine(&bins);
    report.settings = vec![
        format!(
            "**Servers:** `-l 127.0.0.1 -t 1 -m {} -c {} -U 0{}` on free ports; the floor adds `--null-store --null-value-bytes N` (N = the preset's mean value size)",
            args.memory_mb,
            servers::CONN_LIMIT,
            if bins.as_root { " -u root" } else { "" }
        ),
        pinning.clone(),
        format!(
            "**Runs:** {} repetition(s), interleaved ferrocache, memcached, floor; {} s closed-loop runs without warm-up after an unmeasured preload; thesis-qos: {} steps of {} s",
            plan.reps,
            plan.duration.as_secs_f64(),
            plan.slo_steps,
            plan.slo_duration.as_secs_f64()
        ),
    ];
    let plots_dir = (args.plots != Path::new("-")).then(|| args.plots.clone());
    if let Some(dir) = &plots_dir {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }

    for preset in plan.presets.iter().filter(|p| *p != SLO_PRESET) {
        report.presets.push(run_preset(
            &bins,
            &plan,
            args.memory_mb,
            preset,
            &mut report.warnings,
        )?);
    }
    if plan.presets.iter().any(|p| p == SLO_PRESET) {
        let (slo, plots) = run_slo(&bins, &plan, args.memory_mb, plots_dir.as_deref())?;
        report.slo = Some(slo);
        report.plots.extend(plots);
    }
    if let Some(steps) = &plan.sweep {
        let how = sweep::RunSettings {
            reps: plan.reps,
            duration: plan.duration,
            memory_mb: args.memory_mb,
            pinning: pinning.clone(),
        };
        report.sweep = Some(sweep::run_all(&bins, steps, &how, plots_dir.as_deref())?);
    }
    if plan.tls {
        let how = tls::RunSettings {
            preset: args.tls_preset.clone(),
            reps: plan.reps,
            duration: plan.duration,
            memory_mb: args.memory_mb,
            pinning,
        };
        report.tls = Some(tls::run(&bins, &how)?);
    }
    if !args.no_memory && !plan.own_sections_only() {
        run_memory(&bins, &plan, &mut report)?;
    }
    report.server_pids = procs::all_pids();
    report.elapsed_secs = started.elapsed().as_secs_f64();
    if args.out != Path::new("-") {
        // Links in the report are relative to the report.
        let base = args.out.parent().unwrap_or(Path::new("."));
        let relative = |p: &String| {
            Path::new(p)
                .strip_prefix(base)
                .map_or(p.clone(), |r| r.display().to_string())
        };
        report.plots = report.plots.iter().map(relative).collect();
        if let Some(s) = report.sweep.as_mut() {
            s.plot = s.plot.as_ref().map(relative);
        }
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    write_report(args, &report)?;
    print_headline(&report);
    Ok(ExitCode::SUCCESS)
}

impl Plan {
    /// Only the sweep or the TLS comparison was asked for: no memory
    /// section, and only their sections of the report are rewritten.
    fn own_sections_only(&self) -> bool {
        self.presets.is_empty() && (self.sweep.is_some() || self.tls)
    }
}

fn plan(args: &CompareArgs) -> anyhow::Result<Plan> {
    let q = args.quick;
    let sweep_named = args.presets.iter().any(|p| p == SWEEP_PRESET);
    let sweep = (sweep_named || !args.connections_sweep.is_empty()).then(|| {
        if args.connections_sweep.is_empty() {
            sweep::default_steps()
        } else {
            args.connections_sweep.clone()
        }
    });
    let presets: Vec<String> = if args.presets.is_empty() && sweep.is_none() && !args.tls {
        PRESETS.iter().map(|s| s.to_string()).collect()
    } else {
        args.presets
            .iter()
            .filter(|p| *p != SWEEP_PRESET)
            .cloned()
            .collect()
    };
    for p in presets.iter().chain(args.tls.then_some(&args.tls_preset)) {
        cli::preset(p)?;
    }
    let reps = args.reps.unwrap_or(if q { 1 } else { 3 });
    if reps == 0 {
        bail!("--reps must be at least 1");
    }
    Ok(Plan {
        reps,
        presets,
        sweep,
        tls: args.tls,
        duration: args
            .duration
            .unwrap_or(Duration::from_secs(if q { 1 } else { 5 })),
        slo_duration: args
            .slo_duration
            .unwrap_or(Duration::from_secs(if q { 1 } else { 2 })),
        slo_steps: args.slo_steps.unwrap_or(if q { 5 } else { 8 }).max(1),
        fill_mb: args.fill_mb.unwrap_or(if q { 256 } else { args.memory_mb }),
        zipf_mb: args.zipf_mb.unwrap_or(if q { 16 } else { 64 }),
        fill_time_limit: Duration::from_secs(if q { 40 } else { 180 }),
    })
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
fn floor_value_bytes(preset: &str) -> anyhow::Result<usize> {
    let knobs = cli::preset(preset)?;
    Ok(knobs.value_size.as_ref().map_or(32, mean_size))
}

/// Starts the three servers for one preset.
fn start_all(bins: &Binaries, memory_mb: u64, preset: &str) -> anyhow::Result<Vec<Server>> {
    let null_bytes = floor_value_bytes(preset)?;
    [Kind::Ferrocache, Kind::Memcached, Kind::Floor]
        .into_iter()
        .map(|k| {
            let s = Server::start(bins, k, memory_mb, null_bytes)?;
            eprintln!(
                "ferrobench compare: started {} pid {} on {}",
                k.name(),
                s.pid(),
                s.addr
            );
            Ok(s)
        })
        .collect()
}

fn run_preset(
    bins: &Binaries,
    plan: &Plan,
    memory_mb: u64,
    preset: &str,
    warnings: &mut Vec<String>,
) -> anyhow::Result<PresetRuns> {
    let mut servers = start_all(bins, memory_mb, preset)?;
    for s in servers.iter().filter(|s| s.kind != Kind::Floor) {
        load::preload(preset, s)?;
    }
    let mut runs: Vec<(Kind, Vec<load::RunFigures>)> =
        servers.iter().map(|s| (s.kind, Vec::new())).collect();
    let secs = format!("{}", plan.duration.as_secs_f64());
    for rep in 0..plan.reps {
        for (i, server) in servers.iter_mut().enumerate() {
            let seed = (rep + 1).to_string();
            let flags = load::flags(
                preset,
                server,
                &["--preload", "false", "--duration", &secs, "--seed", &seed],
            );
            let f = load::measure(server, &flags)?;
            eprintln!(
                "[{preset} {}/{}] {:<10} {:>9.0} ops/s  p99 {:>7.1} µs  server CPU {:>6.2} µs/op  RSS {:>6.1} MiB",
                rep + 1,
                plan.reps,
                server.kind.name(),
                f.ops_per_sec,
                f.p99_us,
                f.cpu_per_mop(),
                f.server_rss_bytes as f64 / 1048576.0
            );
            if f.errors + f.timeouts > 0 {
                warnings.push(format!(
                    "{preset}, {} repetition {}: {} errors, {} timeouts",
                    server.kind.name(),
                    rep + 1,
                    f.errors,
                    f.timeouts
                ));
            }
            if server.kind != Kind::Floor && f.hit_ratio < 0.999 {
                warnings.push(format!(
                    "{preset}, {} repetition {}: hit ratio {:.4} after preload",
                    server.kind.name(),
                    rep + 1,
                    f.hit_ratio
                ));
            }
            runs[i].1.push(f);
        }
    }
    for s in servers {
        s.stop();
    }
    Ok(PresetRuns {
        preset: preset.to_string(),
        runs,
    })
}

fn run_slo(
    bins: &Binaries,
    plan: &Plan,
    memory_mb: u64,
    plots_dir: Option<&Path>,
) -> anyhow::Result<(SloRuns, Vec<String>)> {
    let mut servers = start_all(bins, memory_mb, SLO_PRESET)?;
    for s in servers.iter().filter(|s| s.kind != Kind::Floor) {
        load::preload(SLO_PRESET, s)?;
    }
    let mut runs: Vec<(Kind, Vec<load::SloFigures>)> =
        servers.iter().map(|s| (s.kind, Vec::new())).collect();
    let mut last_series = Vec::new();
    let (secs, steps) = (
        format!("{}", plan.slo_duration.as_secs_f64()),
        plan.slo_steps.to_string(),
    );
    let mut slo_text = String::new();
    for rep in 0..plan.reps {
        for (i, server) in servers.iter_mut().enumerate() {
            let seed = (rep + 1).to_string();
            let flags = load::flags(
                SLO_PRESET,
                server,
                &[
                    "--preload",
                    "false",
                    "--duration",
                    &secs,
                    "--slo-steps",
                    &steps,
                    "--seed",
                    &seed,
                ],
            );
            eprintln!(
                "[{SLO_PRESET} {}/{}] {}: SLO search",
                rep + 1,
                plan.reps,
                server.kind.name()
            );
            let (f, series) = load::slo_search(server, &flags)?;
            eprintln!(
                "[{SLO_PRESET} {}/{}] {:<10} best rate {}",
                rep + 1,
                plan.reps,
                server.kind.name(),
                f.best_rate
                    .map_or("none met".into(), |r| format!("{r:.0} ops/s"))
            );
            if let Some(slo) = series.slo {
                slo_text = format!(
                    "p{} ≤ {} µs",
                    slo.quantile * 100.0,
                    slo.latency.as_secs_f64() * 1e6
                );
            }
            runs[i].1.push(f);
            if rep + 1 == plan.reps {
                last_series.push((server.kind, series));
            }
        }
    }
    for s in servers {
        s.stop();
    }
    let mut plots = Vec::new();
    if let Some(dir) = plots_dir {
        // ferrobench's own plot, one file per server (last repetition).
        for (kind, series) in &last_series {
            let path = dir.join(format!("{SLO_PRESET}-{}.svg", kind.name()));
            let svg = crate::plot::latency_vs_throughput(
                series,
                &format!("{SLO_PRESET} on {}: latency vs throughput", kind.name()),
            );
            std::fs::write(&path, svg).with_context(|| format!("writing {}", path.display()))?;
            plots.push(path.display().to_string());
        }
        // All servers on one chart.
        let target = last_series
            .first()
            .and_then(|(_, s)| s.slo)
            .map_or(1000.0, |s| s.latency.as_secs_f64() * 1e6);
        let points: Vec<(Kind, plot::Curve)> = runs
            .iter()
            .map(|(k, r)| {
                let last = r.last().map_or(Vec::new(), |f| {
                    f.points.iter().map(|p| (p.0, p.1, p.2)).collect()
                });
                (*k, last)
            })
            .collect();
        let path = dir.join(format!("{SLO_PRESET}.svg"));
        std::fs::write(
            &path,
            plot::latency_vs_throughput(
                &format!("{SLO_PRESET}: latency vs throughput, Poisson open loop"),
                &points,
                target,
            ),
        )
        .with_context(|| format!("writing {}", path.display()))?;
        plots.insert(0, path.display().to_string());
    }
    Ok((
        SloRuns {
            slo: slo_text,
            runs,
        },
        plots,
    ))
}

fn run_memory(bins: &Binaries, plan: &Plan, report: &mut Report) -> anyhow::Result<()> {
    let workloads = [
        ("20 B / 20 B".to_string(), SizeDist::fixed(20)),
        (
            "sun-olio mix".to_string(),
            SUN_OLIO_VALUES.parse::<SizeDist>()?,
        ),
    ];
    for (label, values) in &workloads {
        for kind in [Kind::Ferrocache, Kind::Memcached] {
            let fill = fill_fresh(bins, kind, plan.fill_mb, values, plan.fill_time_limit)?;
            if !fill.evicted {
                report.warnings.push(format!(
                    "memory fill {label} on {}: no eviction within {:?}",
                    kind.name(),
                    plan.fill_time_limit
                ));
            }
            report.fills.push(FillRow {
                workload: label.clone(),
                memory_mb: plan.fill_mb,
                kind,
                fill,
            });
        }
    }
    // Zipf: the keyspace is 3x what memcached holds at -m zipf_mb.
    let twenty = SizeDist::fixed(20);
    let mut capacity = Vec::new();
    for kind in [Kind::Memcached, Kind::Ferrocache] {
        let fill = fill_fresh(bins, kind, plan.zipf_mb, &twenty, plan.fill_time_limit)?;
        capacity.push((kind, fill.items));
    }
    let keyspace = 3 * capacity[0].1.max(1);
    for kind in [Kind::Ferrocache, Kind::Memcached] {
        let mut server = Server::start(bins, kind, plan.zipf_mb, 20)?;
        eprintln!(
            "[memory] {}: Zipf(0.99) over {keyspace} keys at -m {}",
            kind.name(),
            plan.zipf_mb
        );
        let zipf = memory::zipf_hit_ratio(&mut server, keyspace)?;
        eprintln!("[memory] {}: hit ratio {:.4}", kind.name(), zipf.hit_ratio);
        server.stop();
        report.zipf.push(ZipfRow {
            memory_mb: plan.zipf_mb,
            kind,
            capacity: capacity.iter().find(|c| c.0 == kind).map_or(0, |c| c.1),
            zipf,
        });
    }
    Ok(())
}

/// Starts a fresh `kind` at `-m memory_mb`, fills it, stops it.
fn fill_fresh(
    bins: &Binaries,
    kind: Kind,
    memory_mb: u64,
    values: &SizeDist,
    limit: Duration,
) -> anyhow::Result<memory::Fill> {
    let mut server = Server::start(bins, kind, memory_mb, 20)?;
    let fill = memory::fill_until_eviction(&mut server, values, limit)?;
    eprintln!(
        "[memory] {} -m {memory_mb}: {} items at the first eviction ({} sets, {:.1} s), RSS {:.1} MiB, {:.1} B/item",
        kind.name(),
        fill.items,
        fill.sets,
        fill.secs,
        fill.rss_bytes as f64 / 1048576.0,
        fill.rss_per_item()
    );
    server.stop();
    Ok(fill)
}

/// The ferrocache binary: the flag, else next to this executable (the same
/// cargo target directory), else `target/release/ferrocache` here.
fn locate_ferrocache(flag: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(p) = flag {
        return Ok(p.to_path_buf());
    }
    let mut candidates = Vec::new();
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    {
        candidates.push(dir.join("ferrocache"));
    }
    candidates.push(PathBuf::from("target/release/ferrocache"));
    candidates
        .iter()
        .find(|p| p.exists())
        .cloned()
        .with_context(|| {
            format!(
                "no ferrocache binary at {candidates:?}: run `cargo build --release` first, or pass --ferrocache PATH"
            )
        })
}

/// A private directory for server logs.
fn log_dir() -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("ferrobench-compare-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// A command's trimmed stdout, or `unknown`.
fn run_text(prog: &str, args: &[&str]) -> String {
    Command::new(prog)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

fn machine(bins: &Binaries) -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or("unknown CPU".into(), |(_, m)| m.trim().to_string());
    let cores = cpuinfo
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count()
        .max(1);
    let revision = match run_text("git", &["rev-parse", "--short", "HEAD"]).as_str() {
        "unknown" => "revision unknown".into(),
        rev => {
            let dirty = Command::new("git")
                .args(["status", "--porcelain", "--untracked-files=no"])
                .output()
                .is_ok_and(|o| !o.stdout.is_empty());
            format!(
                "commit {rev}{}",
                if dirty {
                    " with uncommitted changes"
                } else {
                    ""
                }
            )
        }
    };
    Machine {
        cpu_model,
        cores,
        kernel: run_text("uname", &["-r"]),
        memcached_version: run_text(&bins.memcached.display().to_string(), &["-V"])
            .trim_start_matches("memcached ")
            .to_string(),
        ferrocache_version: run_text(&bins.ferrocache.display().to_string(), &["-V"])
            .trim_start_matches("ferrocache ")
            .to_string(),
        revision,
    }
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
    fn quick_plan_is_short() {
        let args =
            CompareArgs::parse_from(["compare", "--quick", "--presets", "legup-p16,thesis-qos"]);
        let p = plan(&args).unwrap();
        assert_eq!(p.reps, 1);
        assert_eq!(p.presets, ["legup-p16", "thesis-qos"]);
        assert_eq!(p.duration, Duration::from_secs(1));
        let args = CompareArgs::parse_from(["compare", "--presets", "nope"]);
        assert!(plan(&args).is_err());
        let args = CompareArgs::parse_from(["compare"]);
        let p = plan(&args).unwrap();
        assert_eq!((p.reps, p.presets.len(), p.fill_mb), (3, 7, 1024));
        assert!(p.sweep.is_none(), "the sweep is never in the default set");
    }

    #[test]
    fn the_sweep_alone_runs_alone() {
        let plan_of = |a: &[&str]| {
            plan(&CompareArgs::parse_from(
                std::iter::once("compare").chain(a.iter().copied()),
            ))
        };
        let p = plan_of(&["--presets", "legup-sweep", "--quick"]).unwrap();
        assert!(p.presets.is_empty() && p.own_sections_only());
        assert_eq!(p.sweep.as_deref(), Some(&sweep::default_steps()[..]));
        assert_eq!(p.reps, 1);
        let p = plan_of(&["--connections-sweep", "5,10000:1"]).unwrap();
        assert!(p.own_sections_only());
        let steps = p.sweep.unwrap();
        assert_eq!(
            (steps[0].pipeline, steps[1].connections, steps[1].pipeline),
            (16, 10_000, 1)
        );
        let p = plan_of(&["--presets", "legup-p16", "--connections-sweep", "5"]).unwrap();
        assert_eq!(p.presets, ["legup-p16"]);
        assert!(p.sweep.is_some() && !p.own_sections_only());
        assert!(CompareArgs::try_parse_from(["compare", "--connections-sweep", "5:0"]).is_err());
    }
}
