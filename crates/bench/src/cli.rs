//! Command-line flags and presets.
//!
//! Every workload flag is an `Option` in [`Knobs`]. A preset is a `Knobs`
//! too, so resolving is one rule per field: the explicit flag, else the
//! preset's value, else the default. That is how any preset value can be
//! overridden by a flag.

use std::net::ToSocketAddrs;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Parser;

use crate::config::{Config, Load, Protocol, Server, Transport};
use crate::placement::Distribution;
use crate::schedule::Arrival;
use crate::tls::{TlsClient, TlsOptions};
use crate::verify::MIN_VERIFIED_VALUE_BYTES;
use crate::workload::{KeyDist, SetMode, SizeDist, Workload};

/// The preset names, as in DESIGN.md's table.
pub const PRESETS: &[&str] = &[
    "solarflare-get",
    "solarflare-get-b48",
    "solarflare-mixed",
    "solarflare-mixed-b48",
    "legup-p16",
    "sun-olio",
    "thesis-qos",
];

/// ferrobench: closed- and open-loop load for memcached-compatible servers.
#[derive(Debug, Parser)]
#[command(name = "ferrobench", version, about)]
pub struct Args {
    /// Server HOST:PORT; repeat for several (keys spread by --hash).
    #[arg(long = "server", short = 's', value_name = "HOST:PORT")]
    pub servers: Vec<String>,
    /// How keys are placed over several servers, to match a client or proxy.
    #[arg(long = "hash", value_enum, default_value_t = Distribution::KetamaWeighted)]
    pub hash: Distribution,
    /// A connection closed, reset or refused mid-run counts as errors and is
    /// redialled (100 ms backoff doubling to 1 s) instead of ending the run.
    #[arg(long)]
    pub keep_going: bool,
    /// Start from a preset workload (see --list-presets); flags override it.
    #[arg(long)]
    pub preset: Option<String>,
    /// List the presets and exit.
    #[arg(long)]
    pub list_presets: bool,
    #[command(flatten)]
    pub knobs: Knobs,
    /// Print the result as JSON on stdout (fields in docs/ferrobench.md).
    #[arg(long)]
    pub json: bool,
    /// Print the result as CSV (a header line, then one line per run).
    #[arg(long)]
    pub csv: bool,
    /// Write the total latency histogram's percentile distribution (.hgrm) here.
    #[arg(long, value_name = "FILE")]
    pub hdr_out: Option<PathBuf>,
    /// Draw the latency CDF (and, for --slo/--rate-sweep, latency vs throughput) as SVG.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Never show the live progress line.
    #[arg(long)]
    pub quiet: bool,
    #[command(flatten)]
    pub tls: TlsArgs,
}

/// TLS to the servers (memcached's `-Z`).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct TlsArgs {
    /// Speak TLS on every connection; the handshakes happen while connecting, outside the
    /// measured window.
    #[arg(long)]
    pub tls: bool,
    /// Trust server certificates from this CA (PEM) only, and check that they name the
    /// --server host. Without it any server certificate is accepted: a benchmark-only choice.
    #[arg(long, value_name = "FILE", requires = "tls")]
    pub tls_ca: Option<PathBuf>,
    /// Client certificate chain (PEM) for mutual TLS; needs --tls-key.
    #[arg(long, value_name = "FILE", requires_all = ["tls", "tls_key"])]
    pub tls_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM); needs --tls-cert.
    #[arg(long, value_name = "FILE", requires_all = ["tls", "tls_cert"])]
    pub tls_key: Option<PathBuf>,
}

impl TlsArgs {
    /// The client configuration, when `--tls` is on.
    pub fn client(&self) -> anyhow::Result<Option<TlsClient>> {
        if !self.tls {
            return Ok(None);
        }
        let opts = TlsOptions {
            ca: self.tls_ca.clone(),
            cert: self.tls_cert.clone(),
            key: self.tls_key.clone(),
        };
        Ok(Some(TlsClient::new(&opts)?))
    }
}

/// The workload flags; presets set the same fields.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct Knobs {
    /// Client sessions in total; each holds one connection per server.
    #[arg(long, short = 'c')]
    pub connections: Option<usize>,
    /// Worker threads (each runs one event loop).
    #[arg(long, short = 't')]
    pub threads: Option<usize>,
    /// Requests in flight per session (closed loop).
    #[arg(long)]
    pub pipeline: Option<usize>,
    /// Measured time, e.g. `10`, `2.5s`, `500ms`.
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Stop after this many requests (the run is still bounded in time).
    #[arg(long)]
    pub requests: Option<u64>,
    /// Time run before measuring starts.
    #[arg(long, value_parser = parse_duration)]
    pub warmup: Option<Duration>,
    /// Key size: `20`, `10-40`, or classes `4-100:0.6,1024-2048:0.4`.
    #[arg(long)]
    pub key_size: Option<SizeDist>,
    /// Value size, same forms as --key-size.
    #[arg(long)]
    pub value_size: Option<SizeDist>,
    /// get:set weights, e.g. `9:1` (with --batch, per key).
    #[arg(long)]
    pub ratio: Option<String>,
    /// Keys per get request (multi-get).
    #[arg(long)]
    pub batch: Option<usize>,
    /// Number of keys shared by all sessions.
    #[arg(long)]
    pub keyspace: Option<u64>,
    /// Give each session its own keys instead of a shared keyspace.
    #[arg(long)]
    pub keys_per_conn: Option<u64>,
    /// Key choice: `uniform` or `zipf:S`.
    #[arg(long)]
    pub key_dist: Option<KeyDist>,
    /// Which key a set writes.
    #[arg(long, value_enum)]
    pub set_mode: Option<SetMode>,
    /// Set every key once before measuring (`--preload false` to skip).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub preload: Option<bool>,
    /// Write checksummed values and check every value read.
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub verify: Option<bool>,
    /// Open loop at this aggregate rate (requests/s).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Open-loop inter-arrival times.
    #[arg(long, value_enum)]
    pub arrival: Option<Arrival>,
    /// Open loop: most requests in flight; arrivals beyond it are dropped and counted.
    #[arg(long)]
    pub max_outstanding: Option<usize>,
    /// Replies slower than this count as timeouts (UDP: the request is given up).
    #[arg(long, value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// Find the highest open-loop rate meeting a latency target, e.g. `p99=1ms`.
    #[arg(long)]
    pub slo: Option<String>,
    /// Open-loop runs at `steps` rates from `a` to `b`: `a:b:steps`.
    #[arg(long)]
    pub rate_sweep: Option<String>,
    /// Open-loop runs in an --slo search.
    #[arg(long)]
    pub slo_steps: Option<usize>,
    /// Use UDP (memcached's 8-byte frame header) instead of TCP.
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub udp: Option<bool>,
    /// Wire protocol.
    #[arg(long, value_enum)]
    pub protocol: Option<Protocol>,
    /// Seed for every random choice.
    #[arg(long)]
    pub seed: Option<u64>,
}

macro_rules! or_fields {
    ($a:ident, $b:ident, $($f:ident),*) => {
        Knobs { $($f: $a.$f.or($b.$f)),* }
    };
}

impl Knobs {
    /// Field by field: `self` where set, else `other`.
    pub fn or(self, other: Knobs) -> Knobs {
        or_fields!(
            self,
            other,
            connections,
            threads,
            pipeline,
            duration,
            requests,
            warmup,
            key_size,
            value_size,
            ratio,
            batch,
            keyspace,
            keys_per_conn,
            key_dist,
            set_mode,
            preload,
            verify,
            rate,
            arrival,
            max_outstanding,
            timeout,
            slo,
            rate_sweep,
            slo_steps,
            udp,
            protocol,
            seed
        )
    }
}

/// The preset called `name`.
pub fn preset(name: &str) -> anyhow::Result<Knobs> {
    let size = |n| Some(SizeDist::fixed(n));
    // Solarflare: 20-byte keys and values, 1024 keys per connection, preloaded.
    let solarflare = Knobs {
        connections: Some(50),
        key_size: size(20),
        value_size: size(20),
        keys_per_conn: Some(1024),
        key_dist: Some(KeyDist::Uniform),
        preload: Some(true),
        ratio: Some("1:0".into()),
        batch: Some(1),
        ..Knobs::default()
    };
    let mixed = |batch| Knobs {
        ratio: Some("9:1".into()),
        set_mode: Some(SetMode::Oldest),
        batch: Some(batch),
        ..solarflare.clone()
    };
    Ok(match name {
        "solarflare-get" => solarflare,
        "solarflare-get-b48" => Knobs {
            batch: Some(48),
            ..solarflare
        },
        "solarflare-mixed" => mixed(1),
        "solarflare-mixed-b48" => mixed(48),
        "legup-p16" => Knobs {
            connections: Some(16),
            pipeline: Some(16),
            key_size: size(20),
            value_size: size(100),
            ratio: Some("1:1".into()),
            keyspace: Some(10_000),
            preload: Some(true),
            ..Knobs::default()
        },
        "sun-olio" => Knobs {
            connections: Some(50),
            key_size: size(20),
            value_size: Some("4-100:0.6,1024-2048:0.3,5120-20480:0.1".parse()?),
            ratio: Some("9:1".into()),
            keyspace: Some(5_000),
            preload: Some(true),
            ..Knobs::default()
        },
        "thesis-qos" => Knobs {
            connections: Some(50),
            key_size: size(20),
            value_size: size(20),
            ratio: Some("1:0".into()),
            keyspace: Some(10_000),
            preload: Some(true),
            arrival: Some(Arrival::Poisson),
            slo: Some("p99=1ms".into()),
            ..Knobs::default()
        },
        _ => bail!(
            "unknown preset {name:?}; the presets are: {}",
            PRESETS.join(", ")
        ),
    })
}

/// Parses `10`, `2.5`, `2.5s`, `500ms`, `250us` (plain numbers are seconds).
pub fn parse_duration(s: &str) -> anyhow::Result<Duration> {
    let (num, scale) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix("us").or_else(|| s.strip_suffix("µs")) {
        (n, 1e-6)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else {
        (s, 1.0)
    };
    let v: f64 = num
        .trim()
        .parse()
        .with_context(|| format!("bad duration {s:?}"))?;
    if !(v >= 0.0 && v.is_finite()) {
        bail!("duration {s:?} must be non-negative");
    }
    Ok(Duration::from_secs_f64(v * scale))
}

/// Parses `get:set`, e.g. `9:1`.
pub fn parse_ratio(s: &str) -> anyhow::Result<(u32, u32)> {
    let (g, w) = s
        .split_once(':')
        .with_context(|| format!("ratio {s:?} must be get:set, e.g. 9:1"))?;
    let (g, w): (u32, u32) = (g.trim().parse()?, w.trim().parse()?);
    if g == 0 && w == 0 {
        bail!("ratio {s:?} has no operations");
    }
    Ok((g, w))
}

/// A latency target: `p99=1ms` -> (quantile 0.99, 1 ms).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Slo {
    pub quantile: f64,
    pub latency: Duration,
}

pub fn parse_slo(s: &str) -> anyhow::Result<Slo> {
    let (p, lat) = s
        .split_once('=')
        .with_context(|| format!("SLO {s:?} must look like p99=1ms"))?;
    let pct: f64 = p
        .strip_prefix('p')
        .with_context(|| format!("SLO {s:?} must start with pNN"))?
        .parse()?;
    if !(pct > 0.0 && pct < 100.0) {
        bail!("SLO percentile in {s:?} must be between 0 and 100");
    }
    Ok(Slo {
        quantile: pct / 100.0,
        latency: parse_duration(lat)?,
    })
}

/// `a:b:steps` -> `steps` rates evenly from `a` to `b`.
pub fn parse_sweep(s: &str) -> anyhow::Result<Vec<f64>> {
    let parts: Vec<&str> = s.split(':').collect();
    let [a, b, n] = parts[..] else {
        bail!("rate sweep {s:?} must be a:b:steps")
    };
    let (a, b, n): (f64, f64, usize) = (a.parse()?, b.parse()?, n.parse()?);
    if n == 0 || a <= 0.0 || b < a {
        bail!("rate sweep {s:?} needs 0 < a <= b and steps >= 1");
    }
    Ok((0..n)
        .map(|i| {
            if n == 1 {
                a
            } else {
                a + (b - a) * i as f64 / (n - 1) as f64
            }
        })
        .collect())
}

/// What to do besides the single run the config describes.
#[derive(Clone, Debug, PartialEq)]
pub enum Mode {
    Single,
    Slo { slo: Slo, steps: usize },
    Sweep(Vec<f64>),
}

/// Flags + preset -> a run configuration and a mode.
pub fn resolve(args: &Args) -> anyhow::Result<(Config, Mode)> {
    let base = match &args.preset {
        Some(name) => preset(name)?,
        None => Knobs::default(),
    };
    let k = args.knobs.clone().or(base);
    if args.servers.is_empty() {
        bail!("no server given: use --server HOST:PORT");
    }
    let servers = args
        .servers
        .iter()
        .map(|s| resolve_server(s))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let (get_weight, set_weight) = parse_ratio(k.ratio.as_deref().unwrap_or("9:1"))?;
    let verify = k.verify.unwrap_or(false);
    let mut value_size = k.value_size.unwrap_or(SizeDist::fixed(32));
    if verify && value_size.min() < MIN_VERIFIED_VALUE_BYTES {
        eprintln!("ferrobench: --verify raises values below {MIN_VERIFIED_VALUE_BYTES} bytes to {MIN_VERIFIED_VALUE_BYTES}");
        value_size = value_size.at_least(MIN_VERIFIED_VALUE_BYTES);
    }
    let workload = Workload {
        key_size: k.key_size.unwrap_or(SizeDist::fixed(20)),
        value_size,
        get_weight,
        set_weight,
        batch: k.batch.unwrap_or(1).max(1),
        key_dist: k.key_dist.unwrap_or(KeyDist::Uniform),
        set_mode: k.set_mode.unwrap_or(SetMode::Random),
    };
    let connections = k.connections.unwrap_or(50);
    let keyspace = k.keyspace.unwrap_or(10_000);
    if keyspace == 0 || k.keys_per_conn == Some(0) {
        bail!("the keyspace must hold at least one key");
    }
    let mode = match (&k.slo, &k.rate_sweep) {
        (Some(_), Some(_)) => bail!("--slo and --rate-sweep exclude each other"),
        (Some(s), None) => Mode::Slo {
            slo: parse_slo(s)?,
            steps: k.slo_steps.unwrap_or(8).max(1),
        },
        (None, Some(s)) => Mode::Sweep(parse_sweep(s)?),
        (None, None) => Mode::Single,
    };
    let arrival = k.arrival.unwrap_or(Arrival::Poisson);
    let load = match k.rate {
        Some(rate) if rate > 0.0 => Load::Open { rate, arrival },
        Some(_) => bail!("--rate must be positive"),
        None if mode != Mode::Single => Load::Open { rate: 1.0, arrival },
        None => Load::Closed,
    };
    let duration = match (k.duration, k.requests) {
        (Some(d), _) => d,
        (None, Some(_)) => Duration::ZERO,
        (None, None) => Duration::from_secs(10),
    };
    let udp = k.udp.unwrap_or(false);
    if udp && args.tls.tls {
        bail!("--tls and --udp exclude each other (memcached serves TLS on TCP only)");
    }
    if args.keep_going && (udp || args.tls.tls) {
        bail!("--keep-going redials plain TCP only (not --udp or --tls)");
    }
    let cfg = Config {
        servers,
        hash: args.hash,
        keep_going: args.keep_going,
        transport: if udp { Transport::Udp } else { Transport::Tcp },
        tls: args.tls.client()?,
        protocol: k.protocol.unwrap_or(Protocol::Text),
        connections,
        threads: k.threads.unwrap_or(1),
        pipeline: k.pipeline.unwrap_or(1).max(1),
        duration,
        requests: k.requests,
        warmup: k.warmup.unwrap_or(Duration::ZERO),
        workload,
        keyspace,
        keys_per_conn: k.keys_per_conn,
        preload: k.preload.unwrap_or(false),
        verify,
        load,
        max_outstanding: k.max_outstanding.unwrap_or(connections * 64),
        timeout: k.timeout.unwrap_or(Duration::from_secs(1)),
        seed: k.seed.unwrap_or(1),
        progress: !args.quiet && !args.json && !args.csv,
    };
    Ok((cfg, mode))
}

fn resolve_server(s: &str) -> anyhow::Result<Server> {
    let (host, port) = s
        .rsplit_once(':')
        .with_context(|| format!("server {s:?} must be HOST:PORT"))?;
    let port: u16 = port
        .parse()
        .with_context(|| format!("bad port in server {s:?}"))?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let addr = (host.as_str(), port)
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve server {s:?}"))?
        .next()
        .with_context(|| format!("server {s:?} resolves to no address"))?;
    Ok(Server {
        name: s.to_string(),
        host,
        port,
        addr,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Args {
        let mut v = vec!["ferrobench", "--server", "127.0.0.1:11211"];
        v.extend_from_slice(extra);
        Args::parse_from(v)
    }

    #[test]
    fn every_preset_resolves() {
        for name in PRESETS {
            let (cfg, _) = resolve(&args(&["--preset", name])).unwrap();
            assert!(cfg.preload, "{name} preloads");
        }
        assert!(preset("nope").is_err());
    }

    #[test]
    fn flags_override_presets() {
        let (cfg, mode) = resolve(&args(&[
            "--preset",
            "solarflare-get-b48",
            "--batch",
            "8",
            "-c",
            "3",
        ]))
        .unwrap();
        assert_eq!(cfg.workload.batch, 8);
        assert_eq!(cfg.connections, 3);
        assert_eq!(
            cfg.keys_per_conn,
            Some(1024),
            "the rest of the preset stays"
        );
        assert_eq!(mode, Mode::Single);
        let (cfg, _) = resolve(&args(&["--preset", "legup-p16", "--preload", "false"])).unwrap();
        assert!(!cfg.preload);
        let (_, mode) = resolve(&args(&["--preset", "thesis-qos"])).unwrap();
        assert!(matches!(mode, Mode::Slo { .. }));
    }

    #[test]
    fn parsers() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        assert!(parse_duration("-1").is_err());
        assert_eq!(parse_ratio("9:1").unwrap(), (9, 1));
        assert!(parse_ratio("0:0").is_err());
        let slo = parse_slo("p99.9=500us").unwrap();
        assert!((slo.quantile - 0.999).abs() < 1e-12);
        assert_eq!(slo.latency, Duration::from_micros(500));
        assert_eq!(
            parse_sweep("1000:3000:3").unwrap(),
            vec![1000.0, 2000.0, 3000.0]
        );
        assert!(parse_sweep("1:2").is_err());
    }

    #[test]
    fn verify_raises_small_values() {
        let (cfg, _) = resolve(&args(&["--value-size", "4-100", "--verify"])).unwrap();
        assert_eq!(cfg.workload.value_size.min(), MIN_VERIFIED_VALUE_BYTES);
    }

    #[test]
    fn unresolvable_server_is_a_clear_error() {
        let a = Args::parse_from(["ferrobench", "--server", "no-port"]);
        assert!(resolve(&a).unwrap_err().to_string().contains("HOST:PORT"));
    }
}
