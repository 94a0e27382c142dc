//! `--slo` and `--rate-sweep`: series of open-loop runs.
//!
//! The SLO search is the Edinburgh thesis's QoS metric: the highest rate
//! whose latency percentile meets a target. A closed-loop probe first
//! measures the most the server can take; bisection between 0 and a little
//! above that then converges on the answer in `--slo-steps` open-loop runs.

use crate::cli::Slo;
use crate::config::{Config, Load};
use crate::engine::{self, RunResult};
use crate::schedule::Arrival;

/// One open-loop run of a series.
#[derive(Clone, Debug)]
pub struct Point {
    pub result: RunResult,
    /// Whether it met the SLO (always true in a sweep).
    pub met: bool,
}

/// A finished series.
#[derive(Clone, Debug)]
pub struct Series {
    pub points: Vec<Point>,
    /// The highest target rate that met the SLO (SLO search only).
    pub best_rate: Option<f64>,
    pub slo: Option<Slo>,
}

impl Series {
    /// The run the headline figures come from: the best passing run of an
    /// SLO search, or the highest-rate run of a sweep.
    pub fn headline(&self) -> Option<&RunResult> {
        match self.best_rate {
            Some(rate) => self
                .points
                .iter()
                .map(|p| &p.result)
                .find(|r| r.target_rate == Some(rate)),
            None => self.points.last().map(|p| &p.result),
        }
    }
}

fn arrival(cfg: &Config) -> Arrival {
    match cfg.load {
        Load::Open { arrival, .. } => arrival,
        Load::Closed => Arrival::Poisson,
    }
}

fn open_run(base: &Config, rate: f64, first: bool) -> anyhow::Result<RunResult> {
    let cfg = Config {
        load: Load::Open {
            rate,
            arrival: arrival(base),
        },
        preload: base.preload && first,
        ..base.clone()
    };
    engine::run(&cfg)
}

/// Whether a run meets `slo`: its percentile is within the target and
/// (almost) nothing was dropped at the outstanding cap.
pub fn meets(result: &RunResult, slo: Slo) -> bool {
    let c = &result.stats.total.counters;
    let latency_ns = result.stats.total.latency.value_at_quantile(slo.quantile);
    c.ops > 0
        && latency_ns <= slo.latency.as_nanos() as u64
        && c.dropped * 100 <= c.ops
        && c.timeouts * 100 <= c.ops
}

/// Bisection for the highest rate meeting `slo`.
pub fn slo_search(base: &Config, slo: Slo, steps: usize) -> anyhow::Result<Series> {
    let probe_cfg = Config {
        load: Load::Closed,
        ..base.clone()
    };
    let probe = engine::run(&probe_cfg)?;
    let ceiling = probe.ops_per_sec().max(1.0);
    eprintln!(
        "ferrobench: closed-loop probe: {ceiling:.0} ops/s; searching 0..{:.0}",
        ceiling * 1.2
    );
    let (mut lo, mut hi) = (0.0, ceiling * 1.2);
    let mut points = Vec::new();
    let mut best_rate = None;
    for _ in 0..steps {
        let rate = (lo + hi) / 2.0;
        let result = open_run(base, rate, false)?;
        let met = meets(&result, slo);
        eprintln!(
            "ferrobench: rate {rate:>10.0}: {:>10.0} ops/s, p{} {:>9.1} µs -> {}",
            result.ops_per_sec(),
            slo.quantile * 100.0,
            result.stats.total.latency.value_at_quantile(slo.quantile) as f64 / 1e3,
            if met { "meets" } else { "misses" }
        );
        if met {
            lo = rate;
            best_rate = Some(rate);
        } else {
            hi = rate;
        }
        points.push(Point { result, met });
    }
    points.sort_by(|a, b| {
        a.result
            .target_rate
            .partial_cmp(&b.result.target_rate)
            .expect("rates are finite")
    });
    Ok(Series {
        points,
        best_rate,
        slo: Some(slo),
    })
}

/// One open-loop run per rate.
pub fn sweep(base: &Config, rates: &[f64]) -> anyhow::Result<Series> {
    let mut points = Vec::new();
    for (i, &rate) in rates.iter().enumerate() {
        let result = open_run(base, rate, i == 0)?;
        eprintln!(
            "ferrobench: rate {rate:>10.0}: {:>10.0} ops/s",
            result.ops_per_sec()
        );
        points.push(Point { result, met: true });
    }
    Ok(Series {
        points,
        best_rate: None,
        slo: None,
    })
}
