//! The io_uring backend (`--io-backend=uring`).
//!
//! Each worker owns one ring ([`ring::Ring`]) and the same listeners,
//! UDP sockets and sans-I/O [`Conn`]s as an epoll worker. Per loop turn it
//! makes one `io_uring_enter`, which submits everything queued and waits:
//!
//! ```text
//!   listener ── multishot accept ──> new socket ──> multishot recv armed
//!   socket   ── multishot recv (provided buffers) ──> copied into Conn
//!   Conn::process ──> replies swapped into the connection's send buffer
//!                 ──> one send in flight per connection, its buffer owned
//!                     by the ring until the completion hands it back
//!   UDP socket, wake-up eventfd ── multishot poll ──> served as with epoll
//! ```
//!
//! Flow control matches the epoll worker's bounds. A connection whose
//! unparsed input reaches [`Conn::read_limit`], or whose replies back up
//! while a send is in flight, has its receive cancelled, and re-armed once
//! it has drained; at most one send buffer plus the connection's own
//! high-water mark of output is held.
//!
//! `drive` runs one connection's turn (its input, its replies, its receive armed
//! or cancelled); `send` puts its replies on the ring.
//!
//! A connection is closed with `shutdown(2)` before its descriptor is
//! released, because a multishot receive holds the socket open: a bare
//! `close` would leave the peer without a FIN. Everything queued is
//! submitted first, so no queued entry can name a descriptor number that
//! another thread may reuse.

use std::cell::RefCell;
use std::fs::File;
use std::io;
use std::net::Shutdown;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ring::{Config, Event, Ring};
use socket2::SockRef;

use crate::admin::watch::CloseReason;
use crate::config::IoBackend;
use crate::io::net::Listener;
use crate::io::spin::AdaptiveSpin;
use crate::io::tls::{Failure, TlsConn};
use crate::io::udp::UdpEndpoint;
use crate::io::worker::{
    admit, clear_wake, conn_closing, conn_opened, grow_table, listening_line, table_grew,
    BufferScan, IdleScan, SCAN_PERIOD, SHUTDOWN_WRITE_TIMEOUT, TOO_MANY_CONNECTIONS,
};
use crate::ops::Exec;
use crate::reply::splice::Splices;
use crate::session::conn::{buffers, Conn};
use crate::session::Ahead;
use crate::state::Shared;
use crate::stats::latency::{now_ticks, Recorder};
use crate::stats::{bump, WorkerStats};

mod drive;
mod send;
use drive::drive_client;
use send::{send_spliced, start_send};

/// Test hook: when set, `--io-backend=uring` and `auto` behave as on a kernel
/// that refuses io_uring, with the variable's value as the reason.
const UNAVAILABLE_ENV: &str = "FERROCACHE_URING_UNAVAILABLE";

/// Token spaces (56 bits): clients are `generation << 32 | slot`.
const LISTENER_TOKEN: u64 = 1 << 54;
const UDP_TOKEN: u64 = 1 << 53;
const WAKE_TOKEN: u64 = 1 << 52;
const SLOT_BITS: u32 = 32;
const GENERATION_MASK: u32 = (1 << 20) - 1;

/// How long a failed multishot accept (`EMFILE`, say) waits before it is
/// submitted again, so that a full descriptor table does not spin the loop.
const ACCEPT_RETRY: Duration = Duration::from_millis(10);

/// Which backend to run, given `--io-backend`, and the line to log when
/// io_uring was wanted and cannot be had.
///
/// `auto` is io_uring wherever the kernel gives it (the probe below): on the
/// kernel measured (docs/perf-notes.md, "io_uring against epoll") it cost 7 to
/// 21 % less server CPU per request than epoll for single gets, 48-key gets and
/// pipelined requests. Gets of 100 KB values cost 5 to 11 % more on it; those
/// workloads can pick `--io-backend=epoll`. `auto` and `uring` fall back to
/// epoll the same way, with the same line.
pub fn resolve(requested: IoBackend) -> (IoBackend, Option<String>) {
    match requested {
        IoBackend::Epoll => (IoBackend::Epoll, None),
        IoBackend::Auto | IoBackend::Uring => {
            let why = match std::env::var(UNAVAILABLE_ENV) {
                Ok(reason) => Err(format!("{UNAVAILABLE_ENV} is set: {reason}")),
                Err(_) => Ring::probe(),
            };
            match why {
                Ok(()) => (IoBackend::Uring, None),
                Err(why) => (
                    IoBackend::Epoll,
                    Some(format!(
                        "ferrocache: io_uring unavailable ({why}); using epoll"
                    )),
                ),
            }
        }
    }
}

/// A connection slot owned by one worker.
struct Client {
    fd: OwnedFd,
    conn: Conn,
    token: u64,
    /// Its `stats conns` entry, which also holds the server time of the last byte
    /// received, for `-o idle_timeout`.
    entry: std::sync::Arc<crate::admin::conns::Entry>,
    /// A multishot receive is armed (its last completion not yet seen).
    recv_armed: bool,
    /// A cancellation of that receive has been queued.
    cancelling: bool,
    /// The send buffer when no send is in flight.
    out: Option<Vec<u8>>,
    /// Bytes of `out` already sent (a short send leaves a remainder).
    out_sent: usize,
    /// The peer ended its stream (or the socket failed).
    eof: bool,
    /// `quit`: close once the replies are written.
    close_after_write: bool,
    /// The socket failed; close at the next turn.
    broken: bool,
    /// Already in `dirty` for this turn.
    queued: bool,
    /// The TLS session of a connection accepted on a TLS listener (`-Z`).
    tls: Option<Box<TlsConn>>,
    /// Its session failed on received bytes; handled when the connection is driven.
    tls_failed: Option<Failure>,
    /// `watch` accepted for these streams: once the receive is cancelled and no send
    /// is in flight, the socket goes to the logger thread.
    watching: Option<u16>,
    /// Its flash reads in flight and done (`flash_io.rs`).
    reads: crate::io::flash_io::ConnReads,
}

impl Client {
    fn send_in_flight(&self) -> bool {
        self.out.is_none()
    }

    /// Records sealed but not yet handed to a send.
    fn tls_waiting(&self) -> bool {
        self.tls.as_ref().is_some_and(|t| t.wants_write())
    }
}

pub struct UringWorker {
    ring: Ring,
    listeners: Vec<Listener>,
    udp: Vec<UdpEndpoint>,
    wake: Arc<File>,
    clients: Vec<Option<Client>>,
    /// Generation of each slot, bumped at every close so that completions
    /// for a closed connection never reach the next one in the slot.
    generations: Vec<u32>,
    free: Vec<usize>,
    /// Connections to drive after this turn's completions.
    dirty: Vec<usize>,
    /// Sockets accepted this turn, with their listener's index, set up after the
    /// completions are read.
    accepted: Vec<(OwnedFd, usize)>,
    /// Listeners whose multishot accept ended, and when to submit it again.
    accept_retry: Vec<(usize, Instant)>,
    /// Polls (UDP sockets, the wake-up eventfd) the kernel ended.
    repoll: Vec<u64>,
    /// `--busy-poll-us`: how long to poll before sleeping.
    spin: Option<AdaptiveSpin>,
    shared: Arc<Shared>,
    stats: Arc<WorkerStats>,
    /// Shutting down: no more requests run, pending replies are sent.
    draining: bool,
    /// Large get values pinned for the connection being driven (`--zero-copy-min`).
    splices: Option<RefCell<Splices>>,
    /// `Exec::splice_min` for this worker's connections.
    splice_min: usize,
    /// Flash reads off the worker (`flash_io.rs`), with a flash tier.
    flash: Option<crate::io::flash_io::WorkerReads>,
    /// Requests parsed ahead, lent to each connection's `process` call.
    ahead: Ahead,
    /// The requests run and not yet timed (`None` with `--latency-histograms off`):
    /// their replies are handed to the kernel by the next `io_uring_enter`.
    latency: Option<Recorder>,
}

impl UringWorker {
    /// Set up the ring on the calling thread. On failure the listeners and
    /// sockets come back so that the caller can serve them with epoll.
    #[allow(clippy::type_complexity)]
    pub fn new(
        listeners: Vec<Listener>,
        udp: Vec<UdpEndpoint>,
        shared: Arc<Shared>,
        stats: Arc<WorkerStats>,
        wake: Arc<File>,
    ) -> Result<Self, (io::Error, Vec<Listener>, Vec<UdpEndpoint>)> {
        let ring = match Ring::new(Config::default()) {
            Ok(r) => r,
            Err(e) => return Err((e, listeners, udp)),
        };
        let (splices, splice_min) = Splices::for_worker(&shared.settings, IoBackend::Uring);
        let latency = shared.settings.latency_histograms.then(Recorder::default);
        Ok(UringWorker {
            ring,
            listeners,
            udp,
            flash: crate::io::flash_io::WorkerReads::new(wake.clone()),
            wake,
            clients: Vec::new(),
            generations: Vec::new(),
            free: Vec::new(),
            dirty: Vec::new(),
            accepted: Vec::new(),
            accept_retry: Vec::new(),
            repoll: Vec::new(),
            spin: AdaptiveSpin::new(shared.settings.busy_poll_us),
            splices,
            splice_min,
            shared,
            stats,
            draining: false,
            ahead: Ahead::default(),
            latency,
        })
    }

    pub fn run(mut self) {
        let now = self.shared.clock.now();
        for l in &self.listeners {
            self.shared.conns.listening(l, false, now);
            listening_line(&self.shared, l, false);
        }
        for u in &self.udp {
            self.shared.conns.listening(&u.socket, true, now);
            listening_line(&self.shared, &u.socket, true);
        }
        if self.shared.settings.verbose > 1 {
            eprintln!(
                "ferrocache: io_uring worker ({})",
                if self.ring.deferred_taskrun() {
                    "single issuer, deferred task work"
                } else {
                    "task work runs on arrival"
                }
            );
        }
        for (i, l) in self.listeners.iter().enumerate() {
            self.ring
                .accept_multi(l.as_raw_fd(), LISTENER_TOKEN | i as u64);
        }
        for (i, u) in self.udp.iter().enumerate() {
            self.ring
                .poll_multi(u.socket.as_raw_fd(), UDP_TOKEN | i as u64);
        }
        self.ring.poll_multi(self.wake.as_raw_fd(), WAKE_TOKEN);
        let mut idle = IdleScan::new(&self.shared);
        let mut buffer_scan = BufferScan::new(&self.shared);
        loop {
            let timeout = if !self.accept_retry.is_empty() {
                Some(ACCEPT_RETRY)
            } else {
                Some(SCAN_PERIOD)
            };
            // With `--busy-poll-us N`, up to N µs awake before sleeping, while polling
            // pays (`spin.rs`, `Ring::spin_for_completion`).
            // What this turn queued is handed to the kernel next: its requests' latency
            // ends here.
            if let Some(r) = &self.latency {
                r.flush(&self.stats.latency);
            }
            let window = self.spin.map_or(Duration::ZERO, |s| s.window());
            let ready = !window.is_zero() && self.ring.spin_for_completion(window).unwrap_or(false);
            let mut slept = None;
            if !ready {
                let asleep = self.spin.is_some().then(Instant::now);
                if let Err(e) = self.ring.submit_and_wait(timeout) {
                    eprintln!("ferrocache: io_uring_enter failed: {e}");
                    return;
                }
                slept = asleep.map(|t| t.elapsed());
            }
            if let Some(r) = &self.latency {
                r.woke(now_ticks());
            }
            let incoming = self.reap();
            self.flash_finished();
            // Only what came in says whether polling pays: the completions of our own
            // sends arrive right after they are submitted, whatever the clients do.
            if let (Some(spin), true) = (&mut self.spin, incoming) {
                match slept {
                    None => spin.caught(),
                    Some(d) => spin.slept(d),
                }
            }
            if self.shared.shutting_down.load(Ordering::Relaxed) {
                self.shutdown();
                return;
            }
            self.retry_accepts();
            self.repoll();
            self.setup_accepted();
            self.drive_dirty();
            for idx in idle.due(&self.shared, &self.clients, |c| c.entry.last_input()) {
                bump(&self.stats.idle_kicks, 1);
                self.close(idx, CloseReason::IdleTimeout);
            }
            if let Some(now) = buffer_scan.due(&self.shared) {
                for c in self.clients.iter_mut().flatten() {
                    // Not while a send holds the send buffer, or part of it is unsent.
                    let Some(out) = c.out.as_mut().filter(|o| c.out_sent >= o.len()) else {
                        continue;
                    };
                    if BufferScan::idle(now, c.entry.last_input()) && c.conn.release_idle(Some(out))
                    {
                        c.out_sent = 0;
                    }
                }
                buffers::publish();
                self.expire_handshakes(now);
            }
        }
    }

    /// Handle every completion available. True when one of them brought something in
    /// (a connection, bytes, a readable UDP socket or wake-up) rather than only
    /// finishing one of our sends.
    fn reap(&mut self) -> bool {
        let mut incoming = false;
        let UringWorker {
            ring,
            udp,
            wake,
            clients,
            generations,
            dirty,
            accepted,
            accept_retry,
            repoll,
            shared,
            stats,
            latency,
            ..
        } = self;
        let now = shared.clock.now();
        ring.reap(|event| {
            incoming |= !matches!(event, Event::Sent { .. });
            match event {
                Event::Accepted {
                    token,
                    result,
                    more,
                } => {
                    let i = (token & !LISTENER_TOKEN) as usize;
                    match result {
                        Ok(fd) => accepted.push((fd, i)),
                        Err(e) => super::worker::accept_failed(shared, stats, &e),
                    }
                    if !more {
                        accept_retry.push((i, Instant::now() + ACCEPT_RETRY));
                    }
                }
                Event::Received {
                    token,
                    result,
                    more,
                } => {
                    let Some(idx) = lookup(generations, clients, token) else {
                        return;
                    };
                    let Some(c) = clients[idx].as_mut() else {
                        return;
                    };
                    match result {
                        Ok([]) => c.eof = true,
                        Ok(data) if c.tls.is_some() => {
                            c.entry.touch(now);
                            let t = c.tls.as_mut().expect("checked");
                            match shared
                                .tls
                                .as_ref()
                                .map(|ctx| t.feed(data, &mut c.conn, ctx))
                            {
                                Some(Ok(plain)) => bump(&stats.bytes_read, plain as u64),
                                Some(Err(failure)) => c.tls_failed = Some(failure),
                                None => c.broken = true,
                            }
                            c.eof |= t.peer_closed();
                        }
                        Ok(mut data) => {
                            bump(&stats.bytes_read, data.len() as u64);
                            c.entry.touch(now);
                            while !data.is_empty() {
                                let space = c.conn.read_space();
                                let n = space.len().min(data.len());
                                space[..n].copy_from_slice(&data[..n]);
                                c.conn.filled(n);
                                data = &data[n..];
                            }
                        }
                        // Out of provided buffers, or our own cancellation: the
                        // receive is armed again when the connection can take more.
                        Err(e)
                            if matches!(
                                e.raw_os_error(),
                                Some(libc::ENOBUFS | libc::ECANCELED)
                            ) => {}
                        Err(_) => c.eof = true,
                    }
                    if !more {
                        c.recv_armed = false;
                        c.cancelling = false;
                    }
                    mark(dirty, c, idx);
                }
                Event::Sent { token, result, buf } => {
                    let Some(idx) = lookup(generations, clients, token) else {
                        return;
                    };
                    let Some(c) = clients[idx].as_mut() else {
                        return;
                    };
                    match result {
                        Ok(n) => {
                            // Over TLS, `bytes_written` counts the plaintext sealed.
                            if c.tls.is_none() {
                                bump(&stats.bytes_written, n as u64);
                            }
                            c.out_sent += n;
                        }
                        Err(_) => c.broken = true,
                    }
                    c.out = Some(buf);
                    mark(dirty, c, idx);
                }
                Event::Ready { token, more, .. } => {
                    if !more {
                        // The kernel ended the poll (an error on the socket):
                        // it is submitted again after this turn's completions.
                        repoll.push(token);
                    }
                    if token == WAKE_TOKEN {
                        clear_wake(wake);
                    } else if token & UDP_TOKEN != 0 {
                        let exec = Exec {
                            shared,
                            stats,
                            sink: crate::reply::Sink {
                                message_ends: None,
                                splices: None,
                                splice_min: usize::MAX,
                                fd: -1,
                                flash: None,
                            },
                            latency: latency.as_ref(),
                        };
                        if let Some(u) = udp.get_mut((token & !UDP_TOKEN) as usize) {
                            u.serve(&exec);
                        }
                    }
                }
            }
        });
        incoming
    }

    fn retry_accepts(&mut self) {
        if self.accept_retry.is_empty() {
            return;
        }
        let now = Instant::now();
        let listeners = &self.listeners;
        let ring = &mut self.ring;
        self.accept_retry.retain(|&(i, at)| {
            if at > now {
                return true;
            }
            if let Some(l) = listeners.get(i) {
                ring.accept_multi(l.as_raw_fd(), LISTENER_TOKEN | i as u64);
            }
            false
        });
    }

    fn repoll(&mut self) {
        for token in std::mem::take(&mut self.repoll) {
            let fd = if token == WAKE_TOKEN {
                self.wake.as_raw_fd()
            } else {
                match self.udp.get((token & !UDP_TOKEN) as usize) {
                    Some(u) => u.socket.as_raw_fd(),
                    None => continue,
                }
            };
            self.ring.poll_multi(fd, token);
        }
    }

    fn setup_accepted(&mut self) {
        for (fd, listener) in std::mem::take(&mut self.accepted) {
            let sock = SockRef::from(&fd);
            if !admit(&self.shared, &self.stats) {
                let _ = sock.send(TOO_MANY_CONNECTIONS);
                continue;
            }
            // Not a TCP socket with -s: nothing to do there.
            let _ = sock.set_nodelay(true);
            if self.shared.settings.busy_poll_us > 0 {
                if let Err(e) =
                    crate::sys::set_busy_poll(fd.as_raw_fd(), self.shared.settings.busy_poll_us)
                {
                    if self.shared.settings.verbose > 0 {
                        eprintln!("ferrocache: SO_BUSY_POLL refused: {e}");
                    }
                }
            }
            let idx = self.free.pop().unwrap_or_else(|| {
                if grow_table(&mut self.clients, &mut self.free) {
                    self.generations
                        .reserve_exact(self.clients.capacity() - self.generations.len());
                }
                self.clients.push(None);
                self.generations.push(0);
                let side = self.free.capacity() * 8 + self.generations.capacity() * 4;
                table_grew(&self.stats, &self.clients, side);
                self.clients.len() - 1
            });
            let now = self.shared.clock.now();
            let tls = match (&self.shared.tls, self.listeners.get(listener)) {
                (Some(t), Some(l)) if l.is_tls() => match TlsConn::new(t, now) {
                    Ok(session) => Some(session),
                    Err(_) => {
                        self.shared.curr_connections.fetch_sub(1, Ordering::Relaxed);
                        self.free.push(idx);
                        continue;
                    }
                },
                _ => None,
            };
            let token = u64::from(self.generations[idx]) << SLOT_BITS | idx as u64;
            self.ring.recv_multi(fd.as_raw_fd(), token);
            let entry = self.shared.conns.accepted(&fd, now);
            conn_opened(&self.shared, &fd);
            let mut conn = Conn::new();
            conn.set_fd(fd.as_raw_fd());
            self.clients[idx] = Some(Client {
                fd,
                conn,
                token,
                entry,
                recv_armed: true,
                cancelling: false,
                out: Some(Vec::new()),
                out_sent: 0,
                eof: false,
                close_after_write: false,
                broken: false,
                queued: false,
                tls,
                tls_failed: None,
                watching: None,
                reads: self.flash.as_ref().map(|f| f.conn()).unwrap_or_default(),
            });
        }
    }

    /// Hand finished flash reads to their connections, and queue those whose reads are
    /// all done to run this turn.
    fn flash_finished(&mut self) {
        if let Some(f) = &self.flash {
            let dirty = &mut self.dirty;
            f.deliver_finished(
                &mut self.clients,
                |c| (&mut c.reads, &mut c.conn),
                |c, slot| mark(dirty, c, slot),
            );
        }
    }

    fn drive_dirty(&mut self) {
        let mut dirty = std::mem::take(&mut self.dirty);
        for &idx in &dirty {
            if let Some(c) = self.clients[idx].as_mut() {
                c.queued = false;
            }
            self.drive(idx);
        }
        dirty.clear();
        // Keep the allocation for the next turn.
        if self.dirty.is_empty() {
            self.dirty = dirty;
        }
    }

    /// Run what the connection has received, send its replies, and adjust
    /// its receive to how much it holds.
    fn drive(&mut self, idx: usize) {
        let Some(c) = self.clients.get_mut(idx).and_then(Option::as_mut) else {
            return;
        };
        // Values go through the TLS session, never in place from the store.
        let in_place = c.tls.is_none();
        let exec = Exec {
            shared: &self.shared,
            stats: &self.stats,
            sink: crate::reply::Sink {
                message_ends: None,
                splices: self.splices.as_ref().filter(|_| in_place),
                splice_min: if in_place {
                    self.splice_min
                } else {
                    usize::MAX
                },
                fd: c.fd.as_raw_fd(),
                flash: self.flash.as_ref().map(|f| &f.reads),
            },
            latency: self.latency.as_ref(),
        };
        if let Some(f) = &self.flash {
            f.begin(&mut c.reads);
        }
        let open = drive_client(&mut self.ring, &exec, &mut self.ahead, c, self.draining);
        if let Some(f) = &self.flash {
            f.end(idx, &mut c.reads, &mut c.conn);
        }
        if !open {
            // memcached's reasons: the peer's end of stream and `quit` are normal.
            let reason = if c.broken || c.tls_failed.is_some() || !(c.eof || c.close_after_write) {
                CloseReason::Error
            } else {
                CloseReason::Normal
            };
            self.close(idx, reason);
            return;
        }
        if let Some(streams) = c.watching {
            if !c.recv_armed && !c.send_in_flight() && !self.draining {
                self.hand_to_logger(idx, streams);
            }
        }
    }

    /// `watch`: the connection leaves this worker for the logger thread, which owns
    /// its socket from now on (memcached's `event_del` and `logger_add_watcher`). Its
    /// multishot receive was cancelled and its last send completed first, so no
    /// completion of this ring names the socket any more. The worker keeps no part of
    /// it, so no watcher can slow it down; the logger writes to it without blocking
    /// and drops it when it closes. It counts as closed here (`curr_connections`,
    /// `stats conns`).
    fn hand_to_logger(&mut self, idx: usize, streams: u16) {
        let Some(c) = self.clients[idx].take() else {
            return;
        };
        self.shared.conns.closed(c.fd.as_raw_fd());
        self.generations[idx] = (self.generations[idx] + 1) & GENERATION_MASK;
        self.shared.curr_connections.fetch_sub(1, Ordering::Relaxed);
        self.free.push(idx);
        self.shared.watch.attach(c.fd, streams);
    }

    fn close(&mut self, idx: usize, reason: CloseReason) {
        let Some(c) = self.clients[idx].take() else {
            return;
        };
        if c.watching.is_some() {
            // Promised a watcher slot it never took.
            self.shared.watch.release();
        }
        conn_closing(&self.shared, &c.fd, reason);
        // Entries already queued may name this descriptor: they go to the
        // kernel before the number can be reused.
        let _ = self.ring.submit();
        // Ends the multishot receive (and any send) still holding the socket.
        let _ = SockRef::from(&c.fd).shutdown(Shutdown::Both);
        self.shared.conns.closed(c.fd.as_raw_fd());
        drop(c.fd);
        self.generations[idx] = (self.generations[idx] + 1) & GENERATION_MASK;
        self.shared.curr_connections.fetch_sub(1, Ordering::Relaxed);
        self.free.push(idx);
    }

    /// Close the connections whose TLS handshake ran out of time.
    fn expire_handshakes(&mut self, now: u32) {
        let Some(tls) = &self.shared.tls else {
            return;
        };
        let mut expired = Vec::new();
        for (idx, c) in self.clients.iter().enumerate() {
            if c.as_ref()
                .and_then(|c| c.tls.as_ref())
                .is_some_and(|t| t.handshake_expired(now))
            {
                tls.handshake_errors.fetch_add(1, Ordering::Relaxed);
                expired.push(idx);
            }
        }
        for idx in expired {
            self.close(idx, CloseReason::Error);
        }
    }

    /// Stop accepting, send every client its pending replies (waiting at
    /// most [`SHUTDOWN_WRITE_TIMEOUT`]), then close all.
    fn shutdown(&mut self) {
        self.draining = true;
        for l in &self.listeners {
            // Ends the multishot accept: no connection is taken from now on.
            let _ = SockRef::from(l).shutdown(Shutdown::Both);
        }
        let deadline = Instant::now() + SHUTDOWN_WRITE_TIMEOUT;
        loop {
            for idx in 0..self.clients.len() {
                self.drive(idx);
            }
            let pending = self.clients.iter().flatten().any(|c| {
                c.send_in_flight()
                    || !c.conn.output().is_empty()
                    || c.tls_waiting()
                    || c.out.as_ref().is_some_and(|o| c.out_sent < o.len())
            });
            if !pending || Instant::now() >= deadline {
                break;
            }
            if self
                .ring
                .submit_and_wait(Some(Duration::from_millis(10)))
                .is_err()
            {
                break;
            }
            self.reap();
        }
        for idx in 0..self.clients.len() {
            self.close(idx, CloseReason::Shutdown);
        }
        // Sockets accepted in the last turn were never served.
        self.accepted.clear();
    }
}

fn mark(dirty: &mut Vec<usize>, c: &mut Client, idx: usize) {
    if !c.queued {
        c.queued = true;
        dirty.push(idx);
    }
}

fn lookup(generations: &[u32], clients: &[Option<Client>], token: u64) -> Option<usize> {
    if token & (LISTENER_TOKEN | UDP_TOKEN | WAKE_TOKEN) != 0 {
        return None;
    }
    let idx = (token & ((1 << SLOT_BITS) - 1)) as usize;
    let generation = (token >> SLOT_BITS) as u32;
    (generations.get(idx) == Some(&generation) && clients[idx].is_some()).then_some(idx)
}
