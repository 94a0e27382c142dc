//! The `ferrobench` binary: parse flags, run, report.
//!
//! Exit status: 0 on success, 1 on a fatal error (unreachable server,
//! connection lost mid-run, bad flags), 2 when `--verify` found corrupt values.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use ferrobench::cli::{self, Args, Mode};
use ferrobench::engine::{self, RunResult};
use ferrobench::search::{self, Series};
use ferrobench::{plot, report};

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ferrobench: error: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn run() -> anyhow::Result<ExitCode> {
    // One descriptor per connection: thousands of connections need more than
    // the common soft limit of 1024, and the hard limit is ours to take.
    ferrobench::fdlimit::raise();
    // `ferrobench compare ...` is the side-by-side harness; anything else is a run.
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if argv.get(1).is_some_and(|a| a == "compare") {
        return ferrobench::compare::main(argv);
    }
    let args = Args::parse();
    if args.list_presets {
        for name in cli::PRESETS {
            println!("{name}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let (cfg, mode) = cli::resolve(&args)?;
    let series: Option<Series> = match &mode {
        Mode::Single => None,
        Mode::Slo { slo, steps } => Some(search::slo_search(&cfg, *slo, *steps)?),
        Mode::Sweep(rates) => Some(search::sweep(&cfg, rates)?),
    };
    let single;
    let headline: &RunResult = match &series {
        None => {
            single = engine::run(&cfg)?;
            &single
        }
        Some(s) => s
            .headline()
            .context("the search produced no run meeting the target")?,
    };
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(
            out,
            "{}",
            report::json(&cfg, args.preset.as_deref(), headline, series.as_ref())
        )?;
    } else if args.csv {
        let runs: Vec<&RunResult> = match &series {
            Some(s) => s.points.iter().map(|p| &p.result).collect(),
            None => vec![headline],
        };
        report::csv(&cfg, &runs, &mut out)?;
    } else {
        if let Some(s) = &series {
            match s.best_rate {
                Some(rate) => writeln!(out, "highest rate meeting the target: {rate:.0} ops/s")?,
                None if s.slo.is_some() => writeln!(out, "no rate met the target")?,
                None => {}
            }
        }
        report::table(&cfg, headline, &mut out)?;
    }
    if let Some(path) = &args.hdr_out {
        let mut f =
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        report::hgrm(&headline.stats.total.latency, &mut f)?;
    }
    if let Some(path) = &args.plot {
        let title = args.preset.as_deref().unwrap_or("ferrobench");
        let svg = match &series {
            Some(s) => plot::latency_vs_throughput(s, &format!("{title}: latency vs throughput")),
            None => plot::latency_cdf(&headline.stats.total.latency, &format!("{title}: latency")),
        };
        std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))?;
        let timeline_path = path.with_extension("timeline.svg");
        let svg = plot::timeline(
            &headline.stats.timeline,
            &format!("{title}: requests and errors per second"),
        );
        std::fs::write(&timeline_path, svg)
            .with_context(|| format!("writing {}", timeline_path.display()))?;
        if series.is_some() {
            let cdf_path = path.with_extension("cdf.svg");
            let svg = plot::latency_cdf(
                &headline.stats.total.latency,
                &format!("{title}: latency at the headline rate"),
            );
            std::fs::write(&cdf_path, svg)
                .with_context(|| format!("writing {}", cdf_path.display()))?;
        }
    }
    let corrupt = headline.stats.total.counters.verify_failures
        + series
            .iter()
            .flat_map(|s| &s.points)
            .map(|p| p.result.stats.total.counters.verify_failures)
            .sum::<u64>();
    if corrupt > 0 {
        eprintln!("ferrobench: --verify found {corrupt} corrupt values");
        return Ok(ExitCode::from(2));
    }
    Ok(ExitCode::SUCCESS)
}
