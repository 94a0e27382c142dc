//! Thread-per-core runtime: worker threads, listeners and the epoll loop.
//!
//! ```text
//!   signal thread ── sigwait(SIGINT/SIGTERM) ──> shutting_down + wake workers
//!   maintenance   ── every second: clock tick, expired-item sweep
//!   worker 0..N   ── own mio::Poll, own SO_REUSEPORT listener per address,
//!                    own connections; the kernel spreads accepts over them
//! ```
//!
//! A worker never hands a connection to another thread. Per wake-up it reads
//! everything the socket has, lets [`Conn::process`] execute every complete
//! request, and writes all replies with one `write`.

use std::cell::RefCell;
use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use socket2::{Protocol, Type};

use crate::config::IoBackend;
use crate::io::net::{bind_tcp, bind_unix, Listener, Stream};
use crate::io::spin::AdaptiveSpin;
use crate::io::udp::{bind_udp, UdpEndpoint};
use crate::ops::Exec;
use crate::reply::splice::Splices;
use crate::session::conn::{Conn, Status};
use crate::state::Shared;
use crate::stats::{bump, WorkerStats};

const WAKER: Token = Token(usize::MAX);
const LISTENER_BASE: usize = usize::MAX / 2;
const UDP_BASE: usize = usize::MAX / 4;
/// How long shutdown waits for a slow client to take its last replies.
pub(crate) const SHUTDOWN_WRITE_TIMEOUT: Duration = Duration::from_secs(2);
pub(crate) const TOO_MANY_CONNECTIONS: &[u8] = b"ERROR Too many open connections\r\n";

/// Ask the process to shut down cleanly (the `shutdown` command).
pub fn request_shutdown() {
    crate::sys::signal_self_terminate();
}

/// Resolve `-l` entries with the port into socket addresses.
fn listen_addrs(shared: &Shared) -> Result<Vec<SocketAddr>> {
    let mut addrs = Vec::new();
    for host in &shared.settings.listen {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let found = (host, shared.settings.port)
            .to_socket_addrs()
            .with_context(|| format!("failed to resolve listen address {host}"))?;
        addrs.extend(found);
    }
    if addrs.is_empty() {
        bail!("no listen address");
    }
    Ok(addrs)
}

/// Bind every worker's listeners: with `-s`, one UNIX socket shared by all
/// workers and no network; otherwise one TCP listener per worker per `-l`
/// address, with `SO_REUSEPORT`. With port 0 the first bind picks the port
/// and the rest reuse it.
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
    for base in listen_addrs(shared)? {
        if settings.port != 0 {
            let mut addr = base;
            if addr.port() != 0 {
                crate::io::net::refuse_taken_port(addr, Type::STREAM, Protocol::TCP, "TCP")?;
            }
            for (listeners, _) in per_worker.iter_mut() {
                let l = bind_tcp(addr, settings.backlog)?;
                if addr.port() == 0 {
                    addr.set_port(l.local_addr()?.port());
                }
                listeners.push(Listener::Tcp(l));
            }
            if settings.pin {
                if let Some(Listener::Tcp(first)) = per_worker[0].0.last() {
                    let workers = settings.threads as u32;
                    if let Err(e) =
                        crate::sys::attach_reuseport_cpu_steering(first.as_raw_fd(), workers)
                    {
                        eprintln!("ferrocache: CPU steering unavailable ({e}); the kernel will hash connections");
                    }
                }
            }
            if settings.verbose > 0 {
                eprintln!("ferrocache: listening on {addr} (TCP)");
            }
        }
        if settings.udp_port != 0 {
            let mut addr = base;
            addr.set_port(settings.udp_port);
            crate::io::net::refuse_taken_port(addr, Type::DGRAM, Protocol::UDP, "UDP")?;
            for (_, udp) in per_worker.iter_mut() {
                udp.push(UdpEndpoint::new(bind_udp(addr)?));
            }
            if settings.verbose > 0 {
                eprintln!("ferrocache: listening on {addr} (UDP)");
            }
        }
    }
    Ok(per_worker)
}

/// Start every thread and serve until a shutdown signal.
pub fn run(shared: Arc<Shared>) -> Result<()> {
    crate::sys::block_shutdown_signals().context("blocking signals")?;

    let per_worker = bind_listeners(&shared)?;
    if let Some(user) = &shared.settings.user {
        crate::sys::drop_privileges(user).context("dropping privileges")?;
    }

    let backend = shared.settings.io_backend;
    let mut wakers = Vec::new();
    let mut handles = Vec::new();
    for (id, (listeners, udp)) in per_worker.into_iter().enumerate() {
        let stats = shared.worker_stats(id).clone();
        let wake = Arc::new(File::from(
            crate::sys::eventfd().context("creating a wake-up eventfd")?,
        ));
        wakers.push(wake.clone());
        let shared = shared.clone();
        let pin = shared
            .settings
            .pin
            .then(|| id % crate::sys::available_cpus());
        handles.push(
            std::thread::Builder::new()
                .name(format!("worker-{id}"))
                .spawn(move || {
                    if let Some(cpu) = pin {
                        if let Err(e) = crate::sys::pin_current_thread(cpu) {
                            eprintln!("ferrocache: cannot pin worker {id} to CPU {cpu}: {e}");
                        }
                    }
                    // The ring is created on the thread that uses it (it is
                    // set up single-issuer).
                    let (listeners, udp) = if backend == IoBackend::Uring {
                        match crate::io::uring::UringWorker::new(
                            listeners,
                            udp,
                            shared.clone(),
                            stats.clone(),
                            wake.clone(),
                        ) {
                            Ok(worker) => return worker.run(),
                            Err((e, listeners, udp)) => {
                                eprintln!("ferrocache: worker {id}: io_uring setup failed ({e}); this worker uses epoll");
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
                })?,
        );
    }

    let maintenance = {
        let shared = shared.clone();
        std::thread::Builder::new()
            .name("maintenance".into())
            .spawn(move || maintenance_loop(&shared))?
    };
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

    let sig = crate::sys::wait_for_shutdown_signal();
    if shared.settings.verbose > 0 {
        eprintln!("ferrocache: signal {sig} received, shutting down");
    }
    shared.shutting_down.store(true, Ordering::SeqCst);
    for w in &wakers {
        let _ = (&**w).write(&1u64.to_ne_bytes());
    }
    for h in handles {
        let _ = h.join();
    }
    let _ = maintenance.join();
    shared.crawler.wake_for_shutdown();
    let _ = crawler.join();
    Ok(())
}

/// Count a new connection against `-c`. Over the limit it is refused with
/// memcached's message (the caller then closes it).
pub(crate) fn admit(shared: &Shared, stats: &WorkerStats) -> bool {
    let max = shared.settings.max_connections;
    let prev = shared.curr_connections.fetch_add(1, Ordering::Relaxed);
    if prev >= max {
        shared.curr_connections.fetch_sub(1, Ordering::Relaxed);
        bump(&stats.rejected_connections, 1);
        return false;
    }
    bump(&stats.total_connections, 1);
    true
}

/// Read the wake-up eventfd's counter back to zero.
pub(crate) fn clear_wake(wake: &File) {
    let mut counter = [0u8; 8];
    let _ = (&*wake).read(&mut counter);
}

/// Once a second: advance the clock and, while the LRU crawler is enabled (see
/// `crawler.rs`), reclaim some expired items.
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
    }
}

/// A connection slot owned by one worker.
struct Client {
    stream: Stream,
    conn: Conn,
    /// Its `stats conns` entry, which also holds the server time of the last byte
    /// received, for `-o idle_timeout`.
    entry: Arc<crate::admin::conns::Entry>,
    /// Registered for writable events because output is pending.
    want_write: bool,
}

struct Worker {
    poll: Poll,
    listeners: Vec<Listener>,
    udp: Vec<UdpEndpoint>,
    clients: Vec<Option<Client>>,
    free: Vec<usize>,
    /// Connections to drive again without waiting for an event (they stopped
    /// reading early for fairness or backpressure).
    again: Vec<usize>,
    shared: Arc<Shared>,
    stats: Arc<WorkerStats>,
    wake: Arc<File>,
    /// Large get values pinned for the connection being driven (`--zero-copy-min`);
    /// empty between connections.
    splices: Option<RefCell<Splices>>,
    /// `Exec::splice_min` for this worker's connections.
    splice_min: usize,
    /// `--busy-poll-us`: how long to poll before sleeping.
    spin: Option<AdaptiveSpin>,
}

impl Worker {
    fn new(
        mut listeners: Vec<Listener>,
        mut udp: Vec<UdpEndpoint>,
        shared: Arc<Shared>,
        stats: Arc<WorkerStats>,
        wake: Arc<File>,
    ) -> Result<Self> {
        let poll = Poll::new().context("creating epoll instance")?;
        poll.registry()
            .register(&mut SourceFd(&wake.as_raw_fd()), WAKER, Interest::READABLE)?;
        for (i, l) in listeners.iter_mut().enumerate() {
            poll.registry()
                .register(l, Token(LISTENER_BASE + i), Interest::READABLE)?;
        }
        for (i, u) in udp.iter_mut().enumerate() {
            poll.registry()
                .register(&mut u.socket, Token(UDP_BASE + i), Interest::READABLE)?;
        }
        let (splices, splice_min) = Splices::for_worker(&shared.settings, IoBackend::Epoll);
        Ok(Worker {
            poll,
            listeners,
            udp,
            clients: Vec::new(),
            free: Vec::new(),
            again: Vec::new(),
            splices,
            splice_min,
            spin: AdaptiveSpin::new(shared.settings.busy_poll_us),
            shared,
            stats,
            wake,
        })
    }

    /// `epoll_wait` for `timeout`; with `--busy-poll-us N`, a wait that would sleep
    /// first polls without sleeping, for up to N µs as long as polling keeps catching
    /// events (`spin.rs`): with few clients, each waiting for its reply, the sleep and
    /// the wake-up after it cost more than the request (docs/benchmarks.md, "Busy
    /// polling").
    fn wait(&mut self, events: &mut Events, timeout: Option<Duration>) -> io::Result<()> {
        let Some(spin) = self
            .spin
            .as_mut()
            .filter(|_| timeout != Some(Duration::ZERO))
        else {
            return self.poll.poll(events, timeout);
        };
        let window = spin.window();
        if !window.is_zero() {
            let deadline = Instant::now() + window;
            loop {
                self.poll.poll(events, Some(Duration::ZERO))?;
                if !events.is_empty() {
                    spin.caught();
                    return Ok(());
                }
                if Instant::now() >= deadline {
                    break;
                }
                std::hint::spin_loop();
            }
        }
        let asleep = Instant::now();
        let result = self.poll.poll(events, timeout);
        spin.slept(asleep.elapsed());
        result
    }

    fn run(&mut self) {
        let now = self.shared.clock.now();
        for l in &self.listeners {
            self.shared.conns.listening(l, false, now);
        }
        for u in &self.udp {
            self.shared.conns.listening(&u.socket, true, now);
        }
        let mut events = Events::with_capacity(1024);
        let idle_timeout = self.shared.settings.idle_timeout_secs;
        let mut idle = IdleScan::new(&self.shared);
        loop {
            let timeout = if !self.again.is_empty() {
                Some(Duration::ZERO)
            } else if idle_timeout > 0 {
                Some(Duration::from_secs(1))
            } else {
                None
            };
            if let Err(e) = self.wait(&mut events, timeout) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                eprintln!("ferrocache: epoll failed: {e}");
                return;
            }
            if self.shared.shutting_down.load(Ordering::Relaxed) {
                self.shutdown();
                return;
            }
            for event in events.iter() {
                match event.token() {
                    WAKER => clear_wake(&self.wake),
                    Token(t) if t >= LISTENER_BASE => self.accept(t - LISTENER_BASE),
                    Token(t) if t >= UDP_BASE => self.serve_udp(t - UDP_BASE),
                    Token(idx) => self.drive(idx),
                }
            }
            for idx in std::mem::take(&mut self.again) {
                self.drive(idx);
            }
            for idx in idle.due(&self.shared, &self.clients, |c| c.entry.last_input()) {
                self.close(idx);
            }
        }
    }

    fn accept(&mut self, listener: usize) {
        loop {
            let mut stream = match self.listeners[listener].accept() {
                Ok(s) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE and friends: memcached logs and keeps listening.
                    if self.shared.settings.verbose > 0 {
                        eprintln!("ferrocache: accept failed: {e}");
                    }
                    return;
                }
            };
            if !admit(&self.shared, &self.stats) {
                let _ = stream.write(TOO_MANY_CONNECTIONS);
                continue;
            }
            if self.shared.settings.busy_poll_us > 0 {
                if let Err(e) = stream.set_busy_poll(self.shared.settings.busy_poll_us) {
                    if self.shared.settings.verbose > 0 {
                        eprintln!("ferrocache: SO_BUSY_POLL refused: {e}");
                    }
                }
            }
            let idx = self.free.pop().unwrap_or_else(|| {
                self.clients.push(None);
                self.clients.len() - 1
            });
            if self
                .poll
                .registry()
                .register(&mut stream, Token(idx), Interest::READABLE)
                .is_err()
            {
                self.shared.curr_connections.fetch_sub(1, Ordering::Relaxed);
                self.free.push(idx);
                continue;
            }
            let entry = self.shared.conns.accepted(&stream, self.shared.clock.now());
            let mut conn = Conn::new();
            conn.set_fd(stream.as_fd().as_raw_fd());
            self.clients[idx] = Some(Client {
                stream,
                conn,
                entry,
                want_write: false,
            });
            // Data may already be waiting (edge-triggered: drive once now).
            self.drive(idx);
        }
    }

    fn serve_udp(&mut self, i: usize) {
        let exec = Exec {
            shared: &self.shared,
            stats: &self.stats,
            sink: crate::reply::Sink {
                message_ends: None,
                splices: None,
                splice_min: usize::MAX,
            },
        };
        self.udp[i].serve(&exec);
    }

    fn close(&mut self, idx: usize) {
        if let Some(mut client) = self.clients[idx].take() {
            let _ = self.poll.registry().deregister(&mut client.stream);
            self.shared.conns.closed(client.stream.as_fd().as_raw_fd());
            self.shared.curr_connections.fetch_sub(1, Ordering::Relaxed);
            self.free.push(idx);
        }
    }

    /// Read, execute and write for one connection.
    fn drive(&mut self, idx: usize) {
        let exec = Exec {
            shared: &self.shared,
            stats: &self.stats,
            sink: crate::reply::Sink {
                message_ends: None,
                splices: self.splices.as_ref(),
                splice_min: self.splice_min,
            },
        };
        let Some(client) = self.clients.get_mut(idx).and_then(Option::as_mut) else {
            return;
        };
        loop {
            // Read until the socket is drained (a short read means it is),
            // unless output is backed up or much input is already waiting.
            let mut drained = false;
            let mut eof = false;
            let mut read_any = false;
            while !client.conn.output_blocked() && client.conn.buffered() < client.conn.read_limit()
            {
                let space = client.conn.read_space();
                let want = space.len();
                match client.stream.read(space) {
                    Ok(0) => {
                        eof = true;
                        break;
                    }
                    Ok(n) => {
                        client.conn.filled(n);
                        bump(&self.stats.bytes_read, n as u64);
                        read_any = true;
                        if n < want {
                            drained = true;
                            break;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        drained = true;
                        break;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => {
                        eof = true;
                        break;
                    }
                }
            }
            if read_any {
                client.entry.touch(self.shared.clock.now());
            }
            let status = match client.conn.process_single_get(&exec) {
                Some(status) => status,
                None => client.conn.process(&exec),
            };
            if status == Status::Close {
                if let Some(splices) = &self.splices {
                    splices.borrow_mut().release(&self.shared.store);
                }
                self.close(idx);
                return;
            }
            if let Some(splices) = self.splices.as_ref().filter(|s| !s.borrow().is_empty()) {
                // Large values go in place: one vectored send per socket-full, then
                // what the socket did not take is copied and the pins are given back.
                let mut splices = splices.borrow_mut();
                let store = &self.shared.store;
                let stream = &mut client.stream;
                let sent = client
                    .conn
                    .flush_spliced(&mut splices, store, |iov| stream.write_vectored(iov));
                match sent {
                    Ok(n) => bump(&self.stats.bytes_written, n as u64),
                    Err(_) => {
                        drop(splices);
                        self.close(idx);
                        return;
                    }
                }
            }
            // One write for every reply of this wake-up.
            while !client.conn.output().is_empty() {
                match client.stream.write(client.conn.output()) {
                    Ok(n) => {
                        client.conn.written(n);
                        bump(&self.stats.bytes_written, n as u64);
                        if !client.conn.output().is_empty() {
                            // Partial write: the socket buffer is full.
                            break;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => {
                        self.close(idx);
                        return;
                    }
                }
            }
            let pending = !client.conn.output().is_empty();
            if eof || (status == Status::CloseAfterWrite && !pending) {
                // On EOF memcached closes too, dropping replies it could not write.
                self.close(idx);
                return;
            }
            if pending != client.want_write {
                let interest = if pending {
                    Interest::READABLE | Interest::WRITABLE
                } else {
                    Interest::READABLE
                };
                if self
                    .poll
                    .registry()
                    .reregister(&mut client.stream, Token(idx), interest)
                    .is_err()
                {
                    self.close(idx);
                    return;
                }
                client.want_write = pending;
            }
            if pending || status == Status::CloseAfterWrite {
                // The writable event brings us back.
                return;
            }
            if client.conn.stalled_on_output() {
                // Output drained after backpressure: run the waiting requests.
                continue;
            }
            if !drained {
                // Stopped reading with bytes left in the socket: come back
                // after the other connections had their turn.
                self.again.push(idx);
            } else if !client.conn.has_input() {
                client.conn.shrink_idle();
            }
            return;
        }
    }

    /// Stop accepting, give every client its pending replies, close all.
    fn shutdown(&mut self) {
        for l in &mut self.listeners {
            let _ = self.poll.registry().deregister(l);
        }
        self.listeners.clear();
        for idx in 0..self.clients.len() {
            if let Some(client) = self.clients[idx].as_mut() {
                if !client.conn.output().is_empty() {
                    let out = client.conn.output();
                    let _ = client
                        .stream
                        .write_all_blocking(out, SHUTDOWN_WRITE_TIMEOUT);
                }
            }
            self.close(idx);
        }
    }
}

/// `-o idle_timeout`: each worker looks for idle clients once per second of server time
/// (its wait for events is capped at a second while the timeout is on).
pub(crate) struct IdleScan {
    last: u32,
}

impl IdleScan {
    pub fn new(shared: &Shared) -> IdleScan {
        IdleScan {
            last: shared.clock.now(),
        }
    }

    /// The slots of `clients` to close now: those idle for longer than the timeout
    /// (by `last_active`, the server time of their last byte received), when the
    /// timeout is on and the clock has ticked since the last scan; else none.
    pub fn due<T>(
        &mut self,
        shared: &Shared,
        clients: &[Option<T>],
        last_active: impl Fn(&T) -> u32,
    ) -> Vec<usize> {
        let timeout = shared.settings.idle_timeout_secs;
        if timeout == 0 {
            return Vec::new();
        }
        let now = shared.clock.now();
        if now == self.last {
            return Vec::new();
        }
        self.last = now;
        let idle = |c: &T| now.saturating_sub(last_active(c)) > timeout;
        (0..clients.len())
            .filter(|&i| clients[i].as_ref().is_some_and(idle))
            .collect()
    }
}
