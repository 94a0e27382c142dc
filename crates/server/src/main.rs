//! ferrocache: a memcached-compatible cache server.
//!
//! A tour of the layout:
//! - [`config`]: memcached's command-line flags and their defaults.
//! - [`runtime`]: worker threads, each with its own epoll loop, listeners and
//!   connections; the signal and maintenance threads. [`uring`]: the same
//!   worker on one io_uring (`--io-backend=uring`).
//! - [`net`]: TCP and UNIX listeners and streams behind one type; [`udp`]:
//!   memcached's UDP framing.
//! - [`conn`]: a sans-I/O connection: bytes in, replies out.
//! - [`exec`]: one parsed request against the store, composing the reply;
//!   [`meta`] and [`binary`] do the same for those protocols.
//! - [`stats`], [`stats_report`]: per-worker counters and the `stats` replies.
//! - [`clock`]: the once-a-second server clock and expiry conversion.
//! - [`sys`]: the few raw system calls (the only `unsafe` here).
//!
//! Parsing lives in the `protocol` crate and item memory in `storage`.

mod ahead;
mod auth;
mod binary;
mod clock;
mod config;
mod conn;
mod conns;
mod crawler;
mod dump;
mod exec;
mod meta;
mod net;
mod prefix;
mod runtime;
mod spin;
mod splice;
mod stats;
mod stats_report;
mod sys;
mod udp;
mod uring;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize};
use std::sync::Arc;

use anyhow::{Context, Result};

use crate::clock::Clock;
use crate::config::Settings;
use crate::exec::Shared;
use crate::stats::{StatsRegistry, WorkerStats};

fn main() {
    if let Err(e) = real_main() {
        eprintln!("ferrocache: {e:#}");
        std::process::exit(71);
    }
}

fn real_main() -> Result<()> {
    let mut settings = Settings::from_args(std::env::args_os())?;
    // memcached's order: the core limit, then the fork, before anything else starts
    // (no thread may exist at the fork).
    if settings.max_core {
        sys::raise_core_limit()?;
    }
    if settings.daemonize {
        sys::daemonize(settings.max_core, settings.verbose > 0)
            .context("failed to daemon() in order to daemonize")?;
    }
    let (backend, why_not) = uring::resolve(settings.io_backend);
    if let Some(line) = why_not {
        eprintln!("{line}");
    }
    settings.io_backend = backend;
    let builder = storage::Store::builder()
        .memory_limit(settings.memory_limit_bytes)
        .item_size_max(settings.item_size_max_bytes)
        .memcached_cas(settings.cas_enabled)
        .lock_memory(settings.lock_memory)
        .evictions(settings.evictions);
    let store = match builder.clone().large_pages(settings.large_pages).build() {
        // memcached exits when it finds no huge page support; a cache on normal pages
        // serves the same, so ferrocache says why in one line and goes on.
        Err(e @ storage::BuildError::LargePages(_)) => {
            eprintln!("ferrocache: {e}; using normal pages");
            settings.large_pages = false;
            builder.build()
        }
        built => built,
    }
    .context("creating the store")?;
    if settings.lock_memory {
        // memcached's words, and like memcached it goes on unlocked.
        if let Err(e) = sys::lock_current_memory() {
            eprintln!("warning: -k invalid, mlockall() failed: {e}");
        }
        // memcached would fail its allocations past the limit; ours serve unlocked.
        if let Some(limit) =
            sys::memlock_limit().filter(|&l| l < settings.memory_limit_bytes as u64)
        {
            eprintln!(
                "warning: -k: RLIMIT_MEMLOCK is {limit} bytes, below -m; item memory past it \
                 stays unlocked (raise it with ulimit -l)"
            );
        }
    }
    if let Some(path) = &settings.pidfile {
        std::fs::write(path, format!("{}\n", std::process::id()))
            .with_context(|| format!("writing pid file {path}"))?;
    }
    let sasl = match &settings.sasl_pwdb {
        Some(path) => Some(
            binary::Sasl::load(std::path::Path::new(path))
                .with_context(|| format!("reading SASL password file {path}"))?,
        ),
        None => None,
    };
    let ascii_auth = match &settings.auth_file {
        Some(path) => Some(auth::AuthFile::load(path)?),
        None => None,
    };
    let worker_stats: Vec<Arc<WorkerStats>> = (0..settings.threads)
        .map(|_| Arc::new(WorkerStats::default()))
        .collect();
    let shared = Arc::new(Shared {
        verbosity: AtomicU32::new(settings.verbose),
        store,
        clock: Clock::new(),
        stats: StatsRegistry::new(worker_stats.clone()),
        curr_connections: AtomicUsize::new(0),
        shutting_down: AtomicBool::new(false),
        sasl,
        ascii_auth,
        prefixes: prefix::PrefixStats::new(settings.prefix_delimiter()),
        crawler: crawler::Crawler::new(
            crawler::Tunables::from_options(&settings.extended).map_err(anyhow::Error::msg)?,
        ),
        conns: conns::ConnRegistry::default(),
        settings,
    });
    let served = runtime::run(shared.clone(), worker_stats);
    // Also when binding failed: a pid file must not outlive its process.
    if let Some(path) = &shared.settings.pidfile {
        let _ = std::fs::remove_file(path);
    }
    served
}
