//! `ferrobench compare --tls`: server CPU per request over TLS, memcached
//! `-Z` against ferrocache `-Z`, with ferrocache's plain-TCP cost from the
//! same run (the two targets: at most 0.8× memcached's, at most 1.5×
//! ferrocache's own plain figure).
//!
//! ```text
//!   a throwaway ECDSA P-256 certificate for 127.0.0.1/localhost (rcgen) -> temp dir
//!   start memcached -Z, ferrocache -Z, ferrocache plain (CPU 0), each -o ssl_chain_cert=,ssl_key=
//!   preload each (over TLS where it serves TLS)
//!   rep 1: M F P   rep 2: M F P   rep 3: M F P      (interleaved, never batched)
//!   a run: connect + handshake every session (setup, not measured) -> warm-up
//!          -> [server CPU ticks] measured [server CPU ticks] -> drain, close
//!   stop all three; remove the certificate
//! ```
//!
//! ferrobench checks the servers' certificate against itself as the CA
//! (`--tls-ca`), so a server that presents another certificate fails the run.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::load::{self, runs_of, summary_of, RunFigures};
use super::procstat;
use super::servers::{stats_of, Binaries, Kind, Server, ServerTls, CONN_LIMIT};
use super::summary::Summary;
use crate::tls::{Blocking, TlsClient, TlsOptions};

/// The workload when `--tls-preset` is not given: memslap-like, 50
/// connections of single 20-byte gets on 20-byte values.
pub const DEFAULT_PRESET: &str = "solarflare-get";
/// Warm-up before each measured window, so that the servers' share of the
/// handshakes (session tickets included) is behind it.
const WARMUP_SECS: &str = "0.25";

/// One row: a server, over TLS or plain TCP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Variant {
    pub kind: Kind,
    pub tls: bool,
}

impl Variant {
    pub fn name(self) -> String {
        format!(
            "{} {}",
            self.kind.name(),
            if self.tls { "-Z" } else { "plain" }
        )
    }
}

pub const MC_TLS: Variant = Variant {
    kind: Kind::Memcached,
    tls: true,
};
pub const FC_TLS: Variant = Variant {
    kind: Kind::Ferrocache,
    tls: true,
};
pub const FC_PLAIN: Variant = Variant {
    kind: Kind::Ferrocache,
    tls: false,
};
/// The rows, in the order each repetition runs them.
pub const VARIANTS: [Variant; 3] = [MC_TLS, FC_TLS, FC_PLAIN];

/// Everything the TLS comparison measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TlsRuns {
    /// The ferrobench preset every run used.
    pub preset: String,
    /// Server flags, runs, pinning, TLS settings, in words.
    pub settings: Vec<String>,
    /// Every run of every row.
    pub runs: Vec<(Variant, Vec<RunFigures>)>,
    /// What looks wrong (errors, timeouts, misses after the preload).
    pub warnings: Vec<String>,
    pub elapsed_secs: f64,
}

impl TlsRuns {
    pub fn of(&self, v: Variant) -> &[RunFigures] {
        runs_of(&self.runs, v)
    }

    /// A figure of `v`'s runs, summarised.
    pub fn summary(&self, v: Variant, f: impl Fn(&RunFigures) -> f64) -> Option<Summary> {
        summary_of(&self.runs, v, f)
    }
}

/// How the comparison runs (from the compare flags).
pub struct RunSettings {
    pub preset: String,
    pub reps: usize,
    pub duration: Duration,
    pub memory_mb: u64,
    /// The report's pinning line.
    pub pinning: String,
}

/// A throwaway key and self-signed certificate for 127.0.0.1 and localhost,
/// in a private temp directory that is removed on drop.
pub struct Pki {
    dir: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Pki {
    /// Generates them (ECDSA P-256, rcgen's default) and writes both as PEM.
    pub fn generate() -> anyhow::Result<Pki> {
        let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()])
            .context("generating a self-signed certificate")?;
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "ferrobench-tls-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        // A stale directory of the same name (a killed run's) goes first.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let pki = Pki {
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
            dir,
        };
        std::fs::write(&pki.cert, ck.cert.pem())
            .with_context(|| format!("writing {}", pki.cert.display()))?;
        write_private(&pki.key, &ck.signing_key.serialize_pem())?;
        Ok(pki)
    }
}

/// Writes `text` to a file only its owner may read.
fn write_private(path: &std::path::Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.write_all(text.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts the three servers, runs the repetitions, stops everything.
pub fn run(bins: &Binaries, how: &RunSettings) -> anyhow::Result<TlsRuns> {
    let started = Instant::now();
    crate::cli::preset(&how.preset)?;
    let pki = Pki::generate()?;
    let tls = ServerTls {
        cert: pki.cert.clone(),
        key: pki.key.clone(),
        client: TlsClient::new(&TlsOptions {
            ca: Some(pki.cert.clone()),
            ..TlsOptions::default()
        })?,
    };
    let mut servers = Vec::new();
    let mut negotiated = Vec::new();
    // memcached first: without TLS support it is the one to blame.
    for v in VARIANTS {
        let server = if v.tls {
            Server::start_tls(bins, v.kind, how.memory_mb, &tls)?
        } else {
            Server::start(bins, v.kind, how.memory_mb, 32)?
        };
        eprintln!(
            "ferrobench compare: started {} pid {} on {}",
            v.name(),
            server.pid(),
            server.addr
        );
        negotiated.push(probe(&server, v, &tls.client)?);
        servers.push((v, server));
    }
    for (v, s) in &servers {
        load::preload(&how.preset, s).with_context(|| format!("preloading {}", v.name()))?;
    }
    let load_before = procstat::load_average();
    let mut out = TlsRuns {
        preset: how.preset.clone(),
        settings: settings(bins, how, &negotiated),
        runs: VARIANTS.iter().map(|&v| (v, Vec::new())).collect(),
        ..TlsRuns::default()
    };
    let secs = format!("{}", how.duration.as_secs_f64());
    for rep in 0..how.reps {
        for (i, (v, server)) in servers.iter_mut().enumerate() {
            let seed = (rep + 1).to_string();
            let flags = load::flags(
                &how.preset,
                server,
                &[
                    "--preload",
                    "false",
                    "--duration",
                    &secs,
                    "--warmup",
                    WARMUP_SECS,
                    "--seed",
                    &seed,
                ],
            );
            let f = load::measure_window(server, &flags, &mut || Ok(()))?;
            let label = format!("{} repetition {}", v.name(), rep + 1);
            eprintln!(
                "[tls {}/{}] {:<16} {:>9.0} ops/s  p99 {:>7.1} µs  server CPU {:>6.2} µs/op",
                rep + 1,
                how.reps,
                v.name(),
                f.ops_per_sec,
                f.p99_us,
                f.cpu_per_mop()
            );
            if f.errors + f.timeouts > 0 {
                out.warnings.push(format!(
                    "{label}: {} errors, {} timeouts",
                    f.errors, f.timeouts
                ));
            }
            if f.hit_ratio < 0.999 {
                out.warnings.push(format!(
                    "{label}: hit ratio {:.4} after preload",
                    f.hit_ratio
                ));
            }
            out.runs[i].1.push(f);
        }
    }
    for (_, s) in servers {
        s.stop();
    }
    drop(pki);
    // On a shared machine other work competes for both pinned CPUs; the
    // load average says how much (this run's own processes add about 2).
    out.settings.push(format!(
        "**Load average (1 min):** {load_before} before the first measured run, {} after the last",
        procstat::load_average()
    ));
    out.elapsed_secs = started.elapsed().as_secs_f64();
    Ok(out)
}

/// What the server runs: the TLS version and cipher suite it agreed to, and
/// ferrocache's I/O backend (`stats settings`), e.g.
/// `ferrocache -Z: TLSv1_3 TLS13_AES_256_GCM_SHA384, io_backend uring`.
fn probe(server: &Server, v: Variant, client: &TlsClient) -> anyhow::Result<String> {
    let client = v.tls.then_some(client);
    let mut conn = Blocking::connect(client, "127.0.0.1", &server.addr, Duration::from_secs(3))
        .with_context(|| format!("connecting to {}", v.name()))?;
    conn.set_read_timeout(Some(Duration::from_secs(3)))?;
    let settings = stats_of(&mut conn, "settings")
        .with_context(|| format!("stats settings on {}", v.name()))?;
    let mut what: Vec<String> = conn.negotiated().into_iter().collect();
    if let Some(backend) = settings.get("io_backend") {
        what.push(format!("io_backend {backend}"));
    }
    Ok(format!("{}: {}", v.name(), what.join(", ")))
}

fn settings(bins: &Binaries, how: &RunSettings, negotiated: &[String]) -> Vec<String> {
    vec![
        format!(
            "**Servers:** `{}` on free ports; the TLS ones add `-Z -o ssl_chain_cert=cert.pem,ssl_key=key.pem`, a throwaway ECDSA P-256 certificate for 127.0.0.1 and localhost made in process (rcgen) at the start and deleted at the end",
            bins.flags_text(how.memory_mb, CONN_LIMIT)
        ),
        how.pinning.clone(),
        format!(
            "**Runs:** {} repetition(s), interleaved memcached -Z, ferrocache -Z, ferrocache plain; preset {} after an unmeasured preload; {} s measured after a {WARMUP_SECS} s warm-up; server CPU read at the edges of the measured window",
            how.reps,
            how.preset,
            how.duration.as_secs_f64()
        ),
        format!(
            "**TLS client:** ferrobench's rustls 0.23 (ring), checking the certificate (`--tls-ca`), no session resumption; every handshake happens while connecting, before the window. Agreed, and ferrocache's backend: {}",
            if negotiated.is_empty() {
                "unknown".into()
            } else {
                negotiated.join("; ")
            }
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_certificate_is_usable_and_cleaned_up() {
        let pki = Pki::generate().unwrap();
        let dir = pki.dir.clone();
        let pem = std::fs::read_to_string(&pki.cert).unwrap();
        assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");
        let key = std::fs::metadata(&pki.key).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(key.permissions().mode() & 0o777, 0o600);
        // It is a CA for itself, as compare uses it.
        let client = TlsClient::new(&TlsOptions {
            ca: Some(pki.cert.clone()),
            ..TlsOptions::default()
        })
        .unwrap();
        assert!(client.verifies);
        drop(pki);
        assert!(!dir.exists());
    }

    #[test]
    fn variant_names() {
        let names: Vec<String> = VARIANTS.iter().map(|v| v.name()).collect();
        assert_eq!(names, ["memcached -Z", "ferrocache -Z", "ferrocache plain"]);
    }
}
