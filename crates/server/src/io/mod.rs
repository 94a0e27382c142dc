//! The I/O layer: everything that touches a socket or a thread.
//!
//! - [`serve`]: start-up, from parsed settings to a running server.
//! - [`launch`]: the listeners, the worker threads, the signal, maintenance and
//!   crawler threads. [`epoll`]: a worker on epoll; [`uring`]: the same worker on one
//!   io_uring (`--io-backend=uring`); [`worker`]: what the two share, a connection's
//!   whole life but its reads and writes (admission, accept, close, the scans).
//! - [`net`]: TCP and UNIX listeners and streams; [`udp`]: memcached's UDP framing.
//! - [`tls`]: one TLS connection's records between its socket and its `Conn`.
//! - [`flash_io`]: the I/O threads that read flash values for text gets.
//! - [`spin`]: adaptive busy polling.
//! - [`metrics`]: `--metrics-listen`, Prometheus' `/metrics` on a thread of its own.
//!
//! Every backend reads into a [`crate::session::Conn`] and writes what it composed;
//! none of them parses.

pub mod epoll;
pub mod flash_io;
pub mod launch;
pub mod metrics;
pub mod net;
pub mod spin;
pub(crate) mod tls;
pub mod udp;
pub mod uring;
pub mod worker;

use std::sync::Arc;

use anyhow::{Context, Result};

use crate::config::Settings;
use crate::state::Shared;
use crate::sys;

/// Run the server that `settings` describe until it shuts down.
pub fn serve(mut settings: Settings) -> Result<()> {
    // memcached's order: the core limit, then the fork, before anything else starts
    // (no thread may exist at the fork).
    if settings.max_core {
        sys::raise_core_limit()?;
    }
    reserve_descriptors(&settings);
    if settings.daemonize {
        sys::daemonize(settings.max_core, settings.verbose > 0)
            .context("failed to daemon() in order to daemonize")?;
    }
    let (backend, why_not) = uring::resolve(settings.io_backend);
    if let Some(line) = why_not {
        eprintln!("{line}");
    }
    settings.io_backend = backend;
    let builder = crate::state::store_builder(&settings);
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
    let shared = Arc::new(Shared::new(settings, store)?);
    let served = launch::run(shared.clone());
    // Also when binding failed: a pid file must not outlive its process.
    if let Some(path) = &shared.settings.pidfile {
        let _ = std::fs::remove_file(path);
    }
    served
}

/// Descriptors besides client connections: standard streams, listeners and UDP
/// sockets (one per worker and address), each worker's eventfd and ring, and files.
const RESERVED_DESCRIPTORS: u64 = 64;

/// Raise the soft descriptor limit to what `-c` connections need, as far as the hard
/// limit allows, so that no connection below `-c` is refused for want of a descriptor
/// (distributions start services at a soft limit of 1024). memcached sets the limit to
/// `-c` and exits when it cannot; ferrocache keeps what it could get and says so, since
/// a server that runs with fewer connections serves better than one that does not run.
fn reserve_descriptors(settings: &Settings) {
    let per_worker = 4 * settings.listen.len().max(1) as u64 + 4;
    let want = settings.max_connections as u64
        + RESERVED_DESCRIPTORS
        + per_worker * settings.threads as u64;
    let got = sys::raise_nofile_limit(want);
    if got < want {
        eprintln!(
            "ferrocache: -c {} needs about {want} file descriptors, and the limit is {got}: \
             connections past about {} will fail (raise the hard limit: ulimit -Hn, or \
             LimitNOFILE= for a systemd service)",
            settings.max_connections,
            got.saturating_sub(want - settings.max_connections as u64)
        );
    }
}
