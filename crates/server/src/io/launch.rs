//! Start-up of the serving threads: bind every worker's listeners, start the
//! workers (io_uring or epoll), the maintenance and crawler threads, then wait for a
//! shutdown signal and drain.
//!
//! ```text
//!   start         ── with -e: load the memory file (state/restart.rs), then bind
//!   signal thread ── sigwait(SIGINT/SIGTERM/SIGUSR1) ──> shutting_down + wake workers;
//!                    SIGHUP: reload the -Y file and the TLS certificates, keep going;
//!                    after SIGUSR1, once every thread is joined: save the memory file
//!   maintenance   ── every second: clock tick, expired-item sweep
//!   worker 0..N   ── own event loop, own SO_REUSEPORT listener per address,
//!                    own connections; the kernel spreads accepts over them
//! ```

use std::fs::File;
use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use socket2::{Protocol, Type};

use crate::config::IoBackend;
use crate::config::{ListenSpec, Refusal, EX_OSERR};
use crate::io::epoll::Worker;
use crate::io::net::{bind_tcp, bind_unix, Listener};
use crate::io::udp::{bind_udp, UdpEndpoint};
use crate::io::uring::UringWorker;
use crate::state::Shared;

/// Resolve `-l` entries (`port` unless the entry names its port) into socket addresses,
/// each with whether its TCP listener speaks TLS: all of them under `-Z`, but those
/// given as `notls:ADDR`.
fn listen_addrs(shared: &Shared, port: u16) -> Result<Vec<(SocketAddr, bool)>> {
    let mut addrs = Vec::new();
    let tls = shared.settings.tls.enabled;
    for entry in &shared.settings.listen {
        let spec = ListenSpec::parse(entry, tls)?;
        let port = spec.port.unwrap_or(port);
        // A name that does not resolve: memcached's two lines, and its EX_OSERR.
        let found = (spec.host.as_str(), port).to_socket_addrs().map_err(|e| {
            let why = e.to_string();
            let why = why
                .strip_prefix("failed to lookup address information: ")
                .unwrap_or(&why);
            Refusal::new(
                EX_OSERR,
                format!(
                    "getaddrinfo(): {why}\nfailed to listen on one of interface(s) {}",
                    shared.settings.listen.join(",")
                ),
            )
        })?;
        addrs.extend(found.map(|a| (a, tls && !spec.notls)));
    }
    if addrs.is_empty() {
        bail!("no listen address");
    }
    Ok(addrs)
}

/// One line of memcached's `MEMCACHED_PORT_FILENAME` file: `TCP INET: 37925`.
fn port_line(kind: &str, addr: SocketAddr) -> String {
    let family = if addr.is_ipv4() { "INET" } else { "INET6" };
    format!("{kind} {family}: {}\n", addr.port())
}

/// As memcached: with `MEMCACHED_PORT_FILENAME` set, the ports bound (one line per
/// address, TCP then UDP) go to `NAME.lck`, renamed to `NAME` once every socket is bound,
/// so a reader that sees the file sees all of it (`-p -1` picks a free port, and this is
/// how a test learns which).
fn write_port_file(lines: &[String]) {
    let Some(name) = std::env::var_os("MEMCACHED_PORT_FILENAME") else {
        return;
    };
    let mut tmp = name.clone();
    tmp.push(".lck");
    let written = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&tmp)
        .and_then(|mut f| f.write_all(lines.concat().as_bytes()));
    match written {
        Ok(()) => {
            let _ = std::fs::rename(&tmp, &name);
        }
        Err(e) => eprintln!("Failed to open \"{}\": {e}", tmp.to_string_lossy()),
    }
}

/// Bind every worker's listeners: with `-s`, one UNIX socket shared by all
/// workers and no network; otherwise one TCP listener per worker per `-l`
/// address, with `SO_REUSEPORT`. With port 0 (`-p -1`, `-U -1`) the first bind picks
/// the port and the rest reuse it.
fn bind_listeners(shared: &Shared) -> Result<Vec<(Vec<Listener>, Vec<UdpEndpoint>)>> {
    let settings = &shared.settings;
    let mut per_worker: Vec<(Vec<Listener>, Vec<UdpEndpoint>)> = (0..settings.threads)
        .map(|_| (Vec::new(), Vec::new()))
        .collect();
    if let Some(path) = &settings.unix_socket {
        let first = Listener::Unix(bind_unix(path, settings.unix_mask, settings.backlog)?);
        for (listeners, _) in per_worker.iter_mut().skip(1) {
            listeners.push(first.try_clone_unix()?);
        }
        per_worker[0].0.push(first);
        if settings.verbose > 0 {
            eprintln!("ferrocache: listening on {path}");
        }
        return Ok(per_worker);
    }
    let (mut tcp_lines, mut udp_lines) = (Vec::new(), Vec::new());
    let tcp_port = settings.tcp_bind_port();
    for (base, tls) in listen_addrs(shared, tcp_port.unwrap_or(0))? {
        if tcp_port.is_some() {
            let mut addr = base;
            if addr.port() != 0 {
                crate::io::net::refuse_taken_port(addr, Type::STREAM, Protocol::TCP, "TCP")?;
            }
            for (listeners, _) in per_worker.iter_mut() {
                let l = bind_tcp(addr, settings.backlog)?;
                if addr.port() == 0 {
                    addr.set_port(l.local_addr()?.port());
                }
                listeners.push(if tls {
                    Listener::Tls(l)
                } else {
                    Listener::Tcp(l)
                });
            }
            tcp_lines.push(port_line("TCP", addr));
            if settings.pin {
                if let Some(Listener::Tcp(first) | Listener::Tls(first)) = per_worker[0].0.last() {
                    let workers = settings.threads as u32;
                    if let Err(e) =
                        crate::sys::attach_reuseport_cpu_steering(first.as_raw_fd(), workers)
                    {
                        eprintln!("ferrocache: CPU steering unavailable ({e}); the kernel will hash connections");
                    }
                }
            }
            if settings.verbose > 0 {
                let kind = if tls { "TLS" } else { "TCP" };
                eprintln!("ferrocache: listening on {addr} ({kind})");
            }
        }
        if let Some(udp_port) = settings.udp_bind_port() {
            let mut addr = base;
            addr.set_port(udp_port);
            if udp_port != 0 {
                crate::io::net::refuse_taken_port(addr, Type::DGRAM, Protocol::UDP, "UDP")?;
            }
            for (_, udp) in per_worker.iter_mut() {
                let socket = bind_udp(addr)?;
                if addr.port() == 0 {
                    addr.set_port(socket.local_addr()?.port());
                }
                udp.push(UdpEndpoint::new(socket));
            }
            udp_lines.push(port_line("UDP", addr));
            if settings.verbose > 0 {
                eprintln!("ferrocache: listening on {addr} (UDP)");
            }
        }
    }
    tcp_lines.append(&mut udp_lines);
    write_port_file(&tcp_lines);
    Ok(per_worker)
}

/// Start every thread and serve until a shutdown signal.
pub fn run(shared: Arc<Shared>) -> Result<()> {
    crate::sys::block_shutdown_signals().context("blocking signals")?;
    // Before the first bind: no client sees the cache until it holds what it held.
    crate::state::restart::restore(&shared)?;

    let per_worker = bind_listeners(&shared)?;
    let metrics = match &shared.settings.metrics_listen {
        Some(addr) => Some(super::metrics::bind(addr)?),
        None => None,
    };
    // memcached's -D turns `stats detail` on from the start.
    if shared.settings.detail_enabled {
        shared.prefixes.set_enabled(true);
    }
    if let Some(user) = &shared.settings.user {
        crate::sys::drop_privileges(user).context("dropping privileges")?;
    }
    if let Some(listener) = metrics {
        super::metrics::spawn(shared.clone(), listener)?;
    }

    // The flash tier's I/O threads, before the workers that hand them reads.
    super::flash_io::start(&shared, shared.settings.ext_threads)
        .context("starting the flash I/O threads")?;
    let mut wakers = Vec::new();
    let mut workers = Vec::new();
    for (id, (listeners, udp)) in per_worker.into_iter().enumerate() {
        let wake = Arc::new(File::from(
            crate::sys::eventfd().context("creating a wake-up eventfd")?,
        ));
        wakers.push(wake.clone());
        workers.push(spawn_worker(&shared, id, listeners, udp, wake)?);
    }
    let background = spawn_background(&shared)?;

    let graceful = wait_for_stop(&shared);
    shared.shutting_down.store(true, Ordering::SeqCst);
    for w in &wakers {
        let _ = (&**w).write(&1u64.to_ne_bytes());
    }
    for h in workers {
        let _ = h.join();
    }
    background.join(&shared);
    if graceful && shared.settings.memory_file.is_some() {
        // memcached logs a failed save and still exits 0; so does this.
        if let Err(e) = crate::state::restart::save(&shared) {
            eprintln!("ferrocache: {e:#}");
        }
    }
    Ok(())
}

/// Start worker `id` on its thread, serving `listeners` and `udp` and woken through
/// `wake`: on io_uring when the server runs it and the ring can be set up, else on
/// epoll.
fn spawn_worker(
    shared: &Arc<Shared>,
    id: usize,
    listeners: Vec<Listener>,
    udp: Vec<UdpEndpoint>,
    wake: Arc<File>,
) -> Result<JoinHandle<()>> {
    let shared = shared.clone();
    let stats = shared.worker_stats(id).clone();
    let threads = shared.settings.threads;
    let pin = shared
        .settings
        .pin
        .then(|| id % crate::sys::available_cpus());
    let worker = move || {
        crate::session::conn::buffers::attach(stats.clone(), threads);
        if let Some(cpu) = pin {
            if let Err(e) = crate::sys::pin_current_thread(cpu) {
                eprintln!("ferrocache: cannot pin worker {id} to CPU {cpu}: {e}");
            }
        }
        // The ring is created on the thread that uses it (it is set up single-issuer).
        let (listeners, udp) = if shared.settings.io_backend == IoBackend::Uring {
            let w = UringWorker::new(listeners, udp, shared.clone(), stats.clone(), wake.clone());
            match w {
                Ok(worker) => return worker.run(),
                Err((e, listeners, udp)) => {
                    eprintln!(
                        "ferrocache: worker {id}: io_uring setup failed ({e}); this worker uses epoll"
                    );
                    (listeners, udp)
                }
            }
        } else {
            (listeners, udp)
        };
        match Worker::new(listeners, udp, shared, stats, wake) {
            Ok(mut worker) => worker.run(),
            Err(e) => eprintln!("ferrocache: worker {id} cannot start: {e:#}"),
        }
    };
    Ok(std::thread::Builder::new()
        .name(format!("worker-{id}"))
        .spawn(worker)?)
}

/// The threads beside the workers that shutdown joins.
struct Background {
    maintenance: JoinHandle<()>,
    crawler: JoinHandle<()>,
}

impl Background {
    /// After the workers: the maintenance thread stops by itself, the crawler once
    /// woken.
    fn join(self, shared: &Shared) {
        let _ = self.maintenance.join();
        shared.crawler.wake_for_shutdown();
        let _ = self.crawler.join();
    }
}

/// Start the maintenance thread, the flash tier's compaction (with a tier), `watch`'s
/// logger (runs until exit, idle while nobody watches) and the LRU crawler.
fn spawn_background(shared: &Arc<Shared>) -> Result<Background> {
    let maintenance = {
        let shared = shared.clone();
        std::thread::Builder::new()
            .name("maintenance".into())
            .spawn(move || maintenance_loop(&shared))?
    };
    if shared.store.flash().is_some() {
        let shared = shared.clone();
        std::thread::Builder::new()
            .name("ext-compact".into())
            .spawn(move || flash_loop(&shared))?;
    }
    crate::admin::watch::logger::spawn(shared.watch.clone())?;
    let crawler = {
        let shared = shared.clone();
        std::thread::Builder::new()
            .name("crawler".into())
            .spawn(move || {
                crate::admin::crawler::crawler_loop(
                    &shared.crawler,
                    &shared.store,
                    &shared.clock,
                    &shared.shutting_down,
                )
            })?
    };
    Ok(Background {
        maintenance,
        crawler,
    })
}

/// Wait for a shutdown signal, reloading on each SIGHUP; returns whether the stop is
/// graceful. SIGUSR1 (or `shutdown graceful`) is memcached's graceful stop, which it
/// announces whatever the verbosity; with -e it saves the cache once everything has
/// stopped. SIGINT and SIGTERM stop it as memcached 1.6.18 stops: "Exiting normally"
/// under -v, and exit status 0.
fn wait_for_stop(shared: &Shared) -> bool {
    let sig = loop {
        match crate::sys::wait_for_shutdown_signal() {
            libc::SIGHUP => reload(shared),
            sig => break sig,
        }
    };
    let graceful = sig == libc::SIGUSR1;
    if graceful {
        eprintln!("Gracefully stopping");
    } else if shared.settings.verbose > 0 {
        eprintln!("Exiting normally");
    }
    graceful
}

/// SIGHUP: read the `-Y` file again, as memcached does, and the TLS certificates (what
/// `refresh_certs` does). The server keeps running whatever happens; a file that cannot
/// be read leaves the old one in force and is reported on standard error.
fn reload(shared: &Shared) {
    if let Some(auth) = &shared.ascii_auth {
        if let Err(e) = auth.reload() {
            eprintln!("ferrocache: SIGHUP: {e}");
        }
    }
    if let Some(tls) = &shared.tls {
        if let Err(e) = tls.refresh(shared.clock.now()) {
            eprintln!("ferrocache: SIGHUP: {e}");
        }
    }
    if shared.settings.verbose > 0 {
        eprintln!("ferrocache: SIGHUP: reloaded");
    }
}

/// Once a second: advance the clock, while the LRU crawler is enabled (see
/// `crawler.rs`) reclaim some expired items, and give freed heap pages back.
fn maintenance_loop(shared: &Shared) {
    const SWEEP_ITEMS_PER_TICK: usize = 100_000;
    while !shared.shutting_down.load(Ordering::Relaxed) {
        // Sleep in short steps so shutdown is prompt.
        for _ in 0..10 {
            std::thread::sleep(Duration::from_millis(100));
            if shared.shutting_down.load(Ordering::Relaxed) {
                return;
            }
        }
        shared.clock.tick();
        if shared.crawler.enabled() {
            let swept = shared
                .store
                .sweep_expired(shared.clock.now(), SWEEP_ITEMS_PER_TICK);
            shared.crawler.record(swept);
        }
        crate::sys::release_free_heap();
        charge_connections(shared);
    }
}

/// The flash tier's background work, off the workers: compaction (memcached's
/// `storage_compact_thread`), a page at a time while the tier's rule finds one to
/// empty, and with `ext_item_age` the age pass (its `storage_write_thread`), a segment
/// at a time; else a pause of `ext_max_sleep` microseconds, at least 10 ms and at most
/// 100 ms, so shutdown is prompt.
fn flash_loop(shared: &Shared) {
    while !shared.shutting_down.load(Ordering::Relaxed) {
        let now = shared.clock.now();
        let compacted = shared.store.flash_compact(now);
        if shared.store.flash_age_pass(now) || compacted {
            continue;
        }
        let us = shared
            .crawler
            .tunables()
            .ext_max_sleep
            .clamp(10_000, 100_000);
        std::thread::sleep(Duration::from_micros(u64::from(us)));
    }
}

/// Connection memory (state and buffers, `stats` `conn_*_bytes`) that `-m`'s promise
/// holds outside the store, in the 32 MiB beside it: at about 470 bytes an idle
/// connection, 35 000 of them. Past it, connections take from the store's budget.
pub const CONN_ALLOWANCE_BYTES: usize = 16 << 20;

/// Charge the store for the connections' memory past [`CONN_ALLOWANCE_BYTES`], so that
/// many connections, or many holding buffers (half-sent values, replies a client does
/// not read), shrink the cache rather than break the promise. Once a second: within
/// it, what connections hold between turns is bounded by their buffer budget
/// (`session/conn/buffers.rs`).
fn charge_connections(shared: &Shared) {
    let held = shared.conn_memory().total() as usize;
    shared
        .store
        .charge_outside(held.saturating_sub(CONN_ALLOWANCE_BYTES));
}
