//! The report: what a comparison measured, rendered as markdown.
//!
//! [`Report`] holds every figure; [`headline`] renders the one table that is
//! printed at the end of a run, and [`render`] the whole `docs/benchmarks.md`
//! (headline, per-preset detail with medians and min–max spreads, the SLO
//! search, memory, and where memcached wins).

use std::fmt::Write;

use serde::{Deserialize, Serialize};

use super::load::{runs_of, summary_of, RunFigures, SloFigures};
use super::memory::{Fill, ZipfFigures};
use super::servers::Kind;
use super::summary::{median, ratio, Summary};
use super::sweep::SweepRuns;
use super::tls::TlsRuns;

/// The machine and software the figures came from.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Machine {
    pub cpu_model: String,
    pub cores: usize,
    pub kernel: String,
    pub memcached_version: String,
    pub ferrocache_version: String,
    /// `git describe`-like: commit and whether the tree had changes.
    pub revision: String,
}

/// One closed-loop preset: every run of every server.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PresetRuns {
    pub preset: String,
    pub runs: Vec<(Kind, Vec<RunFigures>)>,
}

impl PresetRuns {
    pub fn of(&self, kind: Kind) -> &[RunFigures] {
        runs_of(&self.runs, kind)
    }

    /// A figure of `kind`'s runs, summarised.
    pub fn summary(&self, kind: Kind, f: impl Fn(&RunFigures) -> f64) -> Option<Summary> {
        summary_of(&self.runs, kind, f)
    }
}

/// The `thesis-qos` SLO search, every repetition of every server.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SloRuns {
    pub slo: String,
    pub runs: Vec<(Kind, Vec<SloFigures>)>,
}

impl SloRuns {
    /// The best rates of the repetitions where some rate met the SLO.
    pub fn summary(&self, kind: Kind) -> Option<Summary> {
        let runs = self.runs.iter().find(|(k, _)| *k == kind)?;
        Summary::of(
            &runs
                .1
                .iter()
                .filter_map(|r| r.best_rate)
                .collect::<Vec<_>>(),
        )
    }

    /// How many repetitions of `kind` found no rate meeting the SLO.
    pub fn misses(&self, kind: Kind) -> usize {
        self.runs
            .iter()
            .find(|(k, _)| *k == kind)
            .map_or(0, |(_, r)| {
                r.iter().filter(|f| f.best_rate.is_none()).count()
            })
    }

    /// The ratio of two servers' medians, only when every repetition of
    /// both met the SLO: a median over the lucky repetitions is no result.
    fn ratio(&self, a: Kind, b: Kind, sa: Option<Summary>, sb: Option<Summary>) -> String {
        if self.misses(a) + self.misses(b) > 0 {
            "—".into()
        } else {
            fmt_ratio(ratio_of(sa, sb))
        }
    }

    /// The summary as a table cell, saying when repetitions met nothing.
    fn cell(&self, kind: Kind) -> String {
        let misses = self.misses(kind);
        match (self.summary(kind), misses) {
            (None, _) => "none met".into(),
            (s, 0) => fmt_summary(s, fmt_rate),
            (s, m) => format!("{} ({m} repetition(s) met none)", fmt_summary(s, fmt_rate)),
        }
    }
}

/// One fill to the first eviction.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FillRow {
    pub workload: String,
    pub memory_mb: u64,
    pub kind: Kind,
    pub fill: Fill,
}

/// The Zipf hit-ratio figure of one server.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ZipfRow {
    pub memory_mb: u64,
    pub kind: Kind,
    /// Items the server held at its first eviction at this `-m`.
    pub capacity: u64,
    pub zipf: ZipfFigures,
}

/// Everything one comparison measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Report {
    pub date: String,
    pub command: String,
    pub machine: Machine,
    /// Server flags, reps, durations, pinning, in words.
    pub settings: Vec<String>,
    pub presets: Vec<PresetRuns>,
    pub slo: Option<SloRuns>,
    pub fills: Vec<FillRow>,
    pub zipf: Vec<ZipfRow>,
    pub plots: Vec<String>,
    /// The connection sweep, when one ran (rendered into its own section,
    /// see `sweep_table`; absent from reports saved before it existed).
    #[serde(default)]
    pub sweep: Option<SweepRuns>,
    /// The TLS comparison, when one ran (its own section, see `tls_table`).
    #[serde(default)]
    pub tls: Option<TlsRuns>,
    /// Things that went wrong or look suspicious (errors, timeouts, pins).
    pub warnings: Vec<String>,
    pub elapsed_secs: f64,
    /// Every server process started (all stopped by the end).
    pub server_pids: Vec<u32>,
}

impl Report {
    /// Whether it holds any figure of the main document (presets, SLO,
    /// memory); a sweep-only report touches only the sweep's section.
    pub fn has_main_sections(&self) -> bool {
        !self.presets.is_empty()
            || self.slo.is_some()
            || !self.fills.is_empty()
            || !self.zipf.is_empty()
    }
}

const FC: Kind = Kind::Ferrocache;
const MC: Kind = Kind::Memcached;
const FLOOR: Kind = Kind::Floor;

/// `1 234 567`-style counts.
pub fn fmt_count(v: f64) -> String {
    let digits = format!("{:.0}", v.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push('\u{202f}');
        }
        out.push(c);
    }
    out
}

/// Rates: `98.2k`, `1.23M`.
pub fn fmt_rate(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// Microseconds and CPU figures: three significant digits or so.
pub fn fmt_num(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

pub fn fmt_ratio(r: Option<f64>) -> String {
    r.map_or("—".into(), |r| format!("{r:.2}×"))
}

/// `median (min–max)`, or just the median when there is no spread.
pub fn fmt_summary(s: Option<Summary>, f: fn(f64) -> String) -> String {
    match s {
        None => "—".into(),
        Some(s) if s.n < 2 || s.min == s.max => f(s.median),
        Some(s) => format!("{} ({}–{})", f(s.median), f(s.min), f(s.max)),
    }
}

fn ratio_of(a: Option<Summary>, b: Option<Summary>) -> Option<f64> {
    ratio(median(a)?, median(b)?)
}

/// Whether the min–max spreads of `a` and `b` overlap: then the medians'
/// order is not a result.
fn overlap(a: Summary, b: Summary) -> bool {
    a.min <= b.max && b.min <= a.max
}

/// The headline table (medians), printed at the end and at the top of the doc.
pub fn headline(r: &Report) -> String {
    let mut out = String::new();
    if !r.presets.is_empty() {
        out.push_str(
            "| preset | server CPU µs/op: ferrocache | memcached | floor | ferrocache ÷ memcached | ferrocache ÷ floor | memcached ÷ floor | ops/s: ferrocache | memcached | ferrocache ÷ memcached | p99 µs: ferrocache | memcached |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for p in &r.presets {
            let cpu = |k| p.summary(k, RunFigures::cpu_per_mop);
            let ops = |k| p.summary(k, |f| f.ops_per_sec);
            let p99 = |k| p.summary(k, |f| f.p99_us);
            let m = |s: Option<Summary>, f: fn(f64) -> String| median(s).map_or("—".into(), f);
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | **{}** | {} | {} | {} | {} | **{}** | {} | {} |",
                p.preset,
                m(cpu(FC), fmt_num),
                m(cpu(MC), fmt_num),
                m(cpu(FLOOR), fmt_num),
                fmt_ratio(ratio_of(cpu(FC), cpu(MC))),
                fmt_ratio(ratio_of(cpu(FC), cpu(FLOOR))),
                fmt_ratio(ratio_of(cpu(MC), cpu(FLOOR))),
                m(ops(FC), fmt_rate),
                m(ops(MC), fmt_rate),
                fmt_ratio(ratio_of(ops(FC), ops(MC))),
                m(p99(FC), fmt_num),
                m(p99(MC), fmt_num),
            );
        }
    }
    let mut other = Vec::new();
    if let Some(slo) = &r.slo {
        let (f, m, fl) = (slo.summary(FC), slo.summary(MC), slo.summary(FLOOR));
        other.push(format!(
            "| thesis-qos: highest rate with {} (ops/s) | {} | {} | **{}** | {} (ferrocache ÷ floor {}) |",
            slo.slo,
            slo.cell(FC),
            slo.cell(MC),
            slo.ratio(FC, MC, f, m),
            slo.cell(FLOOR),
            slo.ratio(FC, FLOOR, f, fl),
        ));
    }
    let workloads: Vec<(&str, u64)> = {
        let mut w: Vec<(&str, u64)> = Vec::new();
        for f in &r.fills {
            if !w.contains(&(f.workload.as_str(), f.memory_mb)) {
                w.push((f.workload.as_str(), f.memory_mb));
            }
        }
        w
    };
    for (workload, mb) in workloads {
        let fill = |k| {
            r.fills
                .iter()
                .find(|f| f.workload == workload && f.memory_mb == mb && f.kind == k)
                .map(|f| &f.fill)
        };
        let (Some(f), Some(m)) = (fill(FC), fill(MC)) else {
            continue;
        };
        other.push(format!(
            "| items held at the first eviction, {workload}, `-m {mb}` | {} | {} | **{}** | |",
            fmt_count(f.items as f64),
            fmt_count(m.items as f64),
            fmt_ratio(ratio(f.items as f64, m.items as f64)),
        ));
        other.push(format!(
            "| RSS bytes per item, {workload}, `-m {mb}` | {} | {} | **{}** | |",
            fmt_num(f.rss_per_item()),
            fmt_num(m.rss_per_item()),
            fmt_ratio(ratio(f.rss_per_item(), m.rss_per_item())),
        ));
    }
    let zipf = |k| r.zipf.iter().find(|z| z.kind == k);
    if let (Some(f), Some(m)) = (zipf(FC), zipf(MC)) {
        other.push(format!(
            "| Zipf(0.99) hit ratio, keyspace {} keys, `-m {}` | {:.3} | {:.3} | **{}** | |",
            fmt_count(f.zipf.keyspace as f64),
            f.memory_mb,
            f.zipf.hit_ratio,
            m.zipf.hit_ratio,
            fmt_ratio(ratio(f.zipf.hit_ratio, m.zipf.hit_ratio)),
        ));
    }
    if !other.is_empty() {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str("| figure | ferrocache | memcached | ferrocache ÷ memcached | floor |\n|---|---:|---:|---:|---|\n");
        for line in other {
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}

/// Per preset: every figure of every server, median (min–max).
pub fn detail(p: &PresetRuns) -> String {
    let mut out = format!(
        "### {}\n\n| server | runs | ops/s | keys/s | p50 µs | p99 µs | p99.9 µs | CPU s / M ops | CPU s / M keys | RSS MiB | hit ratio | errors + timeouts |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        p.preset
    );
    for (kind, runs) in &p.runs {
        let s = |f: fn(&RunFigures) -> f64| p.summary(*kind, f);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            kind.name(),
            runs.len(),
            fmt_summary(s(|f| f.ops_per_sec), fmt_rate),
            fmt_summary(s(|f| f.keys_per_sec), fmt_rate),
            fmt_summary(s(|f| f.p50_us), fmt_num),
            fmt_summary(s(|f| f.p99_us), fmt_num),
            fmt_summary(s(|f| f.p999_us), fmt_num),
            fmt_summary(s(RunFigures::cpu_per_mop), fmt_num),
            fmt_summary(s(RunFigures::cpu_per_mkey), fmt_num),
            fmt_summary(s(|f| f.server_rss_bytes as f64 / 1048576.0), fmt_num),
            fmt_summary(s(|f| f.hit_ratio), |v| format!("{v:.3}")),
            runs.iter().map(|f| f.errors + f.timeouts).sum::<u64>(),
        );
    }
    out
}

/// Plain-language findings where memcached does better than ferrocache
/// (and where the spreads overlap, so no winner can be named).
pub fn gaps(r: &Report) -> Vec<String> {
    let mut out = Vec::new();
    for p in &r.presets {
        // (what, the figure, whether higher is better, its format)
        type Check = (
            &'static str,
            fn(&RunFigures) -> f64,
            bool,
            fn(f64) -> String,
        );
        let checks: [Check; 4] = [
            (
                "server CPU per op (µs)",
                RunFigures::cpu_per_mop,
                false,
                fmt_num,
            ),
            ("throughput (ops/s)", |f| f.ops_per_sec, true, fmt_rate),
            ("p99 latency (µs)", |f| f.p99_us, false, fmt_num),
            (
                "resident memory after the run (MiB)",
                |f| f.server_rss_bytes as f64 / 1048576.0,
                false,
                fmt_num,
            ),
        ];
        for (what, f, higher_is_better, fmt) in checks {
            let (Some(a), Some(b)) = (p.summary(FC, f), p.summary(MC, f)) else {
                continue;
            };
            let memcached_wins = if higher_is_better {
                b.median > a.median
            } else {
                b.median < a.median
            };
            if memcached_wins {
                let noise = if overlap(a, b) {
                    " — within the run-to-run spread, so not a clear result"
                } else {
                    ""
                };
                out.push(format!(
                    "**{}**: memcached is better on {what}: {} against ferrocache's {}{noise}.",
                    p.preset,
                    fmt(b.median),
                    fmt(a.median)
                ));
            }
        }
    }
    if let Some(slo) = &r.slo {
        if let Some(b) = slo.summary(MC) {
            let a = slo.summary(FC);
            if b.median > a.map_or(0.0, |a| a.median) {
                out.push(format!(
                    "**thesis-qos**: memcached sustains a higher rate within {}: {} against {} ops/s{}.",
                    slo.slo,
                    fmt_rate(b.median),
                    a.map_or("none met".into(), |a| fmt_rate(a.median)),
                    if a.is_some_and(|a| overlap(a, b)) { " (spreads overlap)" } else { "" }
                ));
            }
        }
    }
    for f in r.fills.iter().filter(|f| f.kind == FC) {
        if let Some(m) = r
            .fills
            .iter()
            .find(|m| m.kind == MC && m.workload == f.workload && m.memory_mb == f.memory_mb)
        {
            if m.fill.items > f.fill.items {
                out.push(format!(
                    "**memory, {}**: memcached holds more items under `-m {}`: {} against {}.",
                    f.workload,
                    f.memory_mb,
                    fmt_count(m.fill.items as f64),
                    fmt_count(f.fill.items as f64)
                ));
            }
            if m.fill.rss_per_item() < f.fill.rss_per_item() {
                out.push(format!(
                    "**memory, {}**: memcached uses less resident memory per item: {} B against {} B.",
                    f.workload,
                    fmt_num(m.fill.rss_per_item()),
                    fmt_num(f.fill.rss_per_item())
                ));
            }
        }
    }
    let zipf = |k| r.zipf.iter().find(|z| z.kind == k);
    if let (Some(f), Some(m)) = (zipf(FC), zipf(MC)) {
        if m.zipf.hit_ratio > f.zipf.hit_ratio {
            out.push(format!(
                "**Zipf hit ratio**: memcached hits more often: {:.3} against {:.3}.",
                m.zipf.hit_ratio, f.zipf.hit_ratio
            ));
        }
    }
    out
}

/// The report's facts as a markdown list: when, the command and how long it
/// took, the machine and software, then each of `settings`.
pub fn write_facts(
    out: &mut String,
    date: &str,
    command: &str,
    elapsed_secs: f64,
    m: &Machine,
    settings: &[String],
) {
    let _ = write!(
        out,
        "- **Date:** {}\n- **Command:** `{}` ({:.0} s)\n\
         - **Machine:** {}, {} cores, Linux {}\n\
         - **Software:** memcached {}; ferrocache {} ({})\n",
        date,
        command,
        elapsed_secs,
        m.cpu_model,
        m.cores,
        m.kernel,
        m.memcached_version,
        m.ferrocache_version,
        m.revision
    );
    for s in settings {
        let _ = writeln!(out, "- {s}");
    }
}

/// The whole markdown document.
pub fn render(r: &Report, notes: &str) -> String {
    let mut out = String::from(
        "# Benchmarks: ferrocache against memcached\n\n\
         <!-- Generated by `ferrobench compare` (scripts/bench-compare). Rerun it rather than editing\n\
         the tables; only the section after the \"hand-written notes\" marker is kept. -->\n\n",
    );
    write_facts(
        &mut out,
        &r.date,
        &r.command,
        r.elapsed_secs,
        &r.machine,
        &r.settings,
    );
    out.push_str(
        "\nServer CPU per op is the primary figure: the server's own utime + stime from\n\
         `/proc/PID/stat` over a run, divided by the requests ferrobench completed in it. It\n\
         holds up under the noise of a shared machine; throughput and latency do not.\n\
         Ratios below 1× in a CPU column mean ferrocache spends less; above 1× in an ops/s\n\
         column mean ferrocache serves more. The **floor** is ferrocache `--null-store` on the\n\
         same runtime: canned replies, no storage, so its CPU per op is the kernel's TCP path\n\
         plus the event loop.\n\n## Headline (medians)\n\n",
    );
    out.push_str(&headline(r));
    out.push_str("\n## Where memcached wins\n\n");
    let gaps = gaps(r);
    if gaps.is_empty() {
        out.push_str("Nowhere in this run.\n");
    }
    for g in gaps {
        let _ = writeln!(out, "- {g}");
    }
    if !r.warnings.is_empty() {
        out.push_str("\n## Warnings from this run\n\n");
        for w in &r.warnings {
            let _ = writeln!(out, "- {w}");
        }
    }
    if !r.presets.is_empty() {
        out.push_str(
            "\n## Per preset: median (min–max) over the repetitions\n\n\
             CPU s / M ops equals µs per op. RSS is VmRSS after the run. The floor ignores\n\
             what sets store, so its hit ratio is 1 by construction.\n\n",
        );
        for p in &r.presets {
            out.push_str(&detail(p));
            out.push('\n');
        }
    }
    if let Some(slo) = &r.slo {
        slo_section(&mut out, slo);
    }
    if !r.fills.is_empty() || !r.zipf.is_empty() {
        memory_section(&mut out, r);
    }
    if !r.plots.is_empty() {
        out.push_str("## Plots\n\n");
        for p in &r.plots {
            let _ = writeln!(out, "- [{p}]({p})");
        }
        out.push('\n');
    }
    out.push_str(NOTES_MARKER);
    out.push('\n');
    out.push_str(notes);
    out
}

/// The SLO search: every repetition's best rate, and the last one's figures.
fn slo_section(out: &mut String, slo: &SloRuns) {
    let _ = write!(
        out,
        "## SLO search: thesis-qos\n\nThe highest Poisson open-loop rate whose {} holds \
         (ferrobench `--slo`: a closed-loop probe, then bisection). Per repetition:\n\n\
         | server | best rate (ops/s) per repetition | last repetition, at its best rate |\n|---|---|---|\n",
        slo.slo
    );
    for (kind, runs) in &slo.runs {
        let rates: Vec<String> = runs
            .iter()
            .map(|r| r.best_rate.map_or("none met".into(), fmt_rate))
            .collect();
        let last = runs.last();
        let _ = writeln!(
            out,
            "| {} | {} | {} |",
            kind.name(),
            rates.join(", "),
            last.map_or("—".into(), |l| format!(
                "{}target {}/s: {} ops/s achieved, p50 {} µs, p99 {} µs",
                if l.best_rate.is_some() {
                    ""
                } else {
                    "none met; lowest rate tried, "
                },
                fmt_rate(l.target_rate),
                fmt_rate(l.ops_per_sec),
                fmt_num(l.p50_us),
                fmt_num(l.p99_us)
            ))
        );
    }
    out.push('\n');
}

/// Memory: the fills to the first eviction, then the Zipf hit ratio.
fn memory_section(out: &mut String, r: &Report) {
    out.push_str(
        "## Memory\n\n\
         Each server, fresh, filled through one connection with pipelined `set ... noreply`\n\
         batches of 4 MiB, with `stats` between batches; the fill stops at the first batch that\n\
         caused an eviction and reports `curr_items` then. Keys are 20 B.\n\n\
         | workload | `-m` | server | items held | sets sent | RSS MiB (empty) | RSS ÷ `-m` | RSS B / item | key+value B / item | fill s |\n\
         |---|---:|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for f in &r.fills {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {}{} | {} | {} ({}) | {:.3} | {} | {} | {:.1} |",
            f.workload,
            f.memory_mb,
            f.kind.name(),
            fmt_count(f.fill.items as f64),
            if f.fill.evicted {
                ""
            } else {
                " (no eviction before the time limit)"
            },
            fmt_count(f.fill.sets as f64),
            fmt_num(f.fill.rss_bytes as f64 / 1048576.0),
            fmt_num(f.fill.empty_rss_bytes as f64 / 1048576.0),
            f.fill.rss_bytes as f64 / (f.memory_mb as f64 * 1048576.0),
            fmt_num(f.fill.rss_per_item()),
            fmt_num(f.fill.payload_bytes_per_item),
            f.fill.secs
        );
    }
    if let Some(z) = r.zipf.first() {
        let _ = write!(
            out,
            "\n**Zipf(0.99) hit ratio.** Both servers at `-m {}` (smaller than the `-m 1024` above, to\n\
             keep the run short). The keyspace is 3× the items memcached held at its first eviction\n\
             at that `-m` (20 B keys and values). Each fresh server is warmed with {} Zipf sets,\n\
             then measured over {} requests at 1:1 get:set; a get that misses is not followed by a\n\
             set. Both phases are a fixed number of requests, not a fixed time.\n\n\
             | server | items held at `-m {}` | hit ratio | ops/s |\n|---|---:|---:|---:|\n",
            z.memory_mb,
            fmt_count(z.zipf.warm_sets as f64),
            fmt_count(z.zipf.measured_ops as f64),
            z.memory_mb
        );
        for z in &r.zipf {
            let _ = writeln!(
                out,
                "| {} | {} | {:.4} | {} |",
                z.kind.name(),
                fmt_count(z.capacity as f64),
                z.zipf.hit_ratio,
                fmt_rate(z.zipf.ops_per_sec)
            );
        }
    }
    out.push('\n');
}

/// Everything after this line in an existing report survives a rerun.
pub const NOTES_MARKER: &str =
    "<!-- hand-written notes below: kept when the file is regenerated -->";

/// The hand-written part of an existing report (empty if none).
pub fn kept_notes(existing: &str) -> &str {
    existing
        .split_once(NOTES_MARKER)
        .map_or("", |(_, rest)| rest.strip_prefix('\n').unwrap_or(rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(ops_per_sec: f64, cpu_us: f64, p99: f64) -> RunFigures {
        RunFigures {
            ops: 1_000_000,
            keys: 1_000_000,
            ops_per_sec,
            keys_per_sec: ops_per_sec,
            p50_us: p99 / 3.0,
            p99_us: p99,
            p999_us: p99 * 2.0,
            hit_ratio: 1.0,
            errors: 0,
            timeouts: 0,
            elapsed_secs: 1.0,
            server_cpu_secs: cpu_us,
            server_rss_bytes: 8 << 20,
            client_cpu_secs: 1.0,
            other_cpu_secs: 0.0,
        }
    }

    fn report() -> Report {
        Report {
            date: "2026-11-22".into(),
            command: "scripts/bench-compare --quick".into(),
            presets: vec![PresetRuns {
                preset: "solarflare-get".into(),
                runs: vec![
                    (
                        FC,
                        vec![
                            run(100e3, 6.0, 400.0),
                            run(110e3, 6.2, 380.0),
                            run(90e3, 5.8, 420.0),
                        ],
                    ),
                    (
                        MC,
                        vec![
                            run(95e3, 8.0, 500.0),
                            run(96e3, 8.4, 300.0),
                            run(97e3, 8.2, 520.0),
                        ],
                    ),
                    (
                        FLOOR,
                        vec![
                            run(120e3, 5.0, 350.0),
                            run(121e3, 5.0, 350.0),
                            run(119e3, 5.0, 350.0),
                        ],
                    ),
                ],
            }],
            ..Report::default()
        }
    }

    #[test]
    fn headline_has_medians_and_ratios() {
        let t = headline(&report());
        let row = t
            .lines()
            .find(|l| l.starts_with("| solarflare-get "))
            .unwrap();
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        // | preset | fc | mc | floor | fc÷mc | fc÷floor | mc÷floor | ops fc | ops mc | ÷ | p99 fc | p99 mc |
        assert_eq!(cells[1], "solarflare-get");
        assert_eq!(&cells[2..5], ["6.00", "8.20", "5.00"]);
        assert_eq!(cells[5], "**0.73×**");
        assert_eq!(cells[6], "1.20×");
        assert_eq!(cells[7], "1.64×");
        assert_eq!(&cells[8..10], ["100.0k", "96.0k"]);
        assert_eq!(cells[10], "**1.04×**");
        assert_eq!(&cells[11..13], ["400", "500"]);
        // Every row of a markdown table has the header's column count.
        let widths: Vec<usize> = t.lines().map(|l| l.matches('|').count()).collect();
        assert!(widths.iter().all(|&w| w == widths[0]), "{t}");
    }

    #[test]
    fn detail_shows_spread() {
        let d = detail(&report().presets[0]);
        assert!(
            d.contains("| ferrocache | 3 | 100.0k (90.0k–110.0k) |"),
            "{d}"
        );
        assert!(d.contains("| floor | 3 | 120.0k (119.0k–121.0k) |"), "{d}");
        assert!(
            d.contains("| 5.00 |"),
            "no spread shows the value alone: {d}"
        );
    }

    #[test]
    fn gaps_name_where_memcached_wins() {
        let g = gaps(&report());
        // ferrocache wins CPU and throughput; memcached's median p99 is worse
        // too, so nothing to report...
        assert!(g.is_empty(), "{g:?}");
        let mut r = report();
        r.presets[0].runs[1].1 = vec![run(200e3, 3.0, 100.0); 3];
        let g = gaps(&r);
        assert_eq!(g.len(), 3, "CPU, throughput, p99 (RSS is equal): {g:?}");
        assert!(g[0].contains("CPU per op") && g[0].contains("3.00") && !g[0].contains("spread"));
        let mut r = report();
        r.presets[0].runs[1].1 = vec![run(112e3, 8.0, 500.0), run(104e3, 8.0, 500.0)];
        let g = gaps(&r);
        assert!(
            g.iter()
                .any(|l| l.contains("throughput") && l.contains("within the run-to-run spread")),
            "{g:?}"
        );
    }

    #[test]
    fn memory_rows_and_ratio() {
        let mut r = report();
        let fill = |items: u64, rss: u64| Fill {
            items,
            sets: items + 10,
            evicted: true,
            rss_bytes: rss,
            empty_rss_bytes: 1 << 20,
            payload_bytes_per_item: 40.0,
            secs: 1.0,
        };
        for (kind, items, rss) in [
            (FC, 18_000_000, 1_200_000_000),
            (MC, 9_000_000, 1_080_000_000),
        ] {
            r.fills.push(FillRow {
                workload: "20 B / 20 B".into(),
                memory_mb: 1024,
                kind,
                fill: fill(items, rss),
            });
        }
        let t = headline(&r);
        assert!(t.contains("| items held at the first eviction, 20 B / 20 B, `-m 1024` | 18\u{202f}000\u{202f}000 | 9\u{202f}000\u{202f}000 | **2.00×** |"), "{t}");
        assert!(
            t.contains("| RSS bytes per item, 20 B / 20 B, `-m 1024` | 66.7 | 120 | **0.56×** |"),
            "{t}"
        );
        let doc = render(&r, "keep me\n");
        assert!(doc.contains("## Memory") && doc.ends_with("keep me\n"));
    }

    #[test]
    fn a_saved_report_renders_the_same() {
        let r = report();
        let back: Report = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(render(&back, ""), render(&r, ""));
    }

    #[test]
    fn notes_survive_regeneration() {
        let doc = render(&report(), "## Notes\n\nhand-written\n");
        assert_eq!(kept_notes(&doc), "## Notes\n\nhand-written\n");
        assert_eq!(kept_notes("no marker"), "");
        let again = render(&report(), kept_notes(&doc));
        assert_eq!(again, doc);
    }

    #[test]
    fn number_formats() {
        assert_eq!(fmt_count(8_950_000.0), "8\u{202f}950\u{202f}000");
        assert_eq!(fmt_count(950.0), "950");
        assert_eq!(fmt_rate(1_234_567.0), "1.23M");
        assert_eq!(fmt_rate(98_200.0), "98.2k");
        assert_eq!(fmt_num(8.333), "8.33");
        assert_eq!(fmt_num(28.04), "28.0");
        assert_eq!(fmt_ratio(None), "—");
        let s = Summary::of(&[1.0, 2.0, 3.0]);
        assert_eq!(fmt_summary(s, fmt_num), "2.00 (1.00–3.00)");
    }
}
