//! The epoll worker: one thread's event loop over its own listeners and connections.
//!
//! A worker never hands a connection to another thread. Per wake-up it reads
//! everything the socket has, lets [`Conn::process`] execute every complete
//! request, and writes all replies with one `write`.

use std::cell::RefCell;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};

use crate::admin::watch::CloseReason;
use crate::config::IoBackend;
use crate::io::net::{Listener, Stream};
use crate::io::spin::AdaptiveSpin;
use crate::io::tls::{self, Failure, TlsConn};
use crate::io::udp::UdpEndpoint;
use crate::io::worker::{
    admit, clear_wake, conn_closing, conn_opened, grow_table, listening_line, table_grew,
    BufferScan, IdleScan, SCAN_PERIOD, SHUTDOWN_WRITE_TIMEOUT, TOO_MANY_CONNECTIONS,
};
use crate::ops::Exec;
use crate::reply::splice::Splices;
use crate::session::conn::{buffers, Conn, Status};
use crate::session::Ahead;
use crate::state::Shared;
use crate::stats::latency::{now_ticks, Recorder};
use crate::stats::{bump, WorkerStats};

const WAKER: Token = Token(usize::MAX);
const LISTENER_BASE: usize = usize::MAX / 2;
const UDP_BASE: usize = usize::MAX / 4;

/// A connection slot owned by one worker.
struct Client {
    stream: Stream,
    conn: Conn,
    /// Its `stats conns` entry, which also holds the server time of the last byte
    /// received, for `-o idle_timeout`.
    entry: Arc<crate::admin::conns::Entry>,
    /// Registered for writable events because output is pending.
    want_write: bool,
    /// Its flash reads in flight and done (`flash_io.rs`).
    reads: crate::io::flash_io::ConnReads,
    /// The TLS session of a connection accepted on a TLS listener (`-Z`).
    tls: Option<Box<TlsConn>>,
}

pub(crate) struct Worker {
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
    /// Flash reads off the worker (`flash_io.rs`), with a flash tier.
    flash: Option<crate::io::flash_io::WorkerReads>,
    /// `Exec::splice_min` for this worker's connections.
    splice_min: usize,
    /// `--busy-poll-us`: how long to poll before sleeping.
    spin: Option<AdaptiveSpin>,
    /// Requests parsed ahead, lent to each connection's `process` call.
    ahead: Ahead,
    /// Where TLS connections' ciphertext is received (empty without TLS listeners).
    scratch: Vec<u8>,
    /// The requests run and not yet timed (`None` with `--latency-histograms off`).
    latency: Option<Recorder>,
}

impl Worker {
    pub(crate) fn new(
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
        let scratch = if listeners.iter().any(Listener::is_tls) {
            vec![0; tls::SCRATCH_BYTES]
        } else {
            Vec::new()
        };
        Ok(Worker {
            poll,
            listeners,
            udp,
            clients: Vec::new(),
            free: Vec::new(),
            again: Vec::new(),
            splices,
            splice_min,
            flash: crate::io::flash_io::WorkerReads::new(wake.clone()),
            spin: AdaptiveSpin::new(shared.settings.busy_poll_us),
            ahead: Ahead::default(),
            scratch,
            latency: shared.settings.latency_histograms.then(Recorder::default),
            shared,
            stats,
            wake,
        })
    }

    /// `epoll_wait` for `timeout`; with `--busy-poll-us N`, a wait that would sleep
    /// first polls without sleeping, for up to N µs as long as polling keeps catching
    /// events (`spin.rs`): with few clients, each waiting for its reply, the sleep and
    /// the wake-up after it cost more than the request (docs/perf-notes.md, "Busy
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

    pub(crate) fn run(&mut self) {
        let now = self.shared.clock.now();
        for l in &self.listeners {
            self.shared.conns.listening(l, false, now);
            listening_line(&self.shared, l, false);
        }
        for u in &self.udp {
            self.shared.conns.listening(&u.socket, true, now);
            listening_line(&self.shared, &u.socket, true);
        }
        let mut events = Events::with_capacity(1024);
        let mut idle = IdleScan::new(&self.shared);
        let mut buffer_scan = BufferScan::new(&self.shared);
        loop {
            let timeout = if !self.again.is_empty() {
                Some(Duration::ZERO)
            } else {
                Some(SCAN_PERIOD)
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
            if let Some(r) = &self.latency {
                r.woke(now_ticks());
            }
            for event in events.iter() {
                match event.token() {
                    WAKER => {
                        clear_wake(&self.wake);
                        self.flash_finished();
                    }
                    Token(t) if t >= LISTENER_BASE => self.accept(t - LISTENER_BASE),
                    Token(t) if t >= UDP_BASE => self.serve_udp(t - UDP_BASE),
                    Token(idx) => self.drive(idx),
                }
            }
            for idx in std::mem::take(&mut self.again) {
                self.drive(idx);
            }
            // Every reply of this turn is the kernel's now: one clock read ends the
            // latency of all their requests, as on io_uring, where they leave with the
            // next `io_uring_enter`. A reply written early in a long turn is timed to
            // the turn's end, at most the turn's length late; per connection, the
            // clock read cost a fifth of a one-key get's instructions
            // (docs/perf-notes.md, "Latency histograms").
            if let Some(r) = &self.latency {
                r.flush(&self.stats.latency);
            }
            for idx in idle.due(&self.shared, &self.clients, |c| c.entry.last_input()) {
                bump(&self.stats.idle_kicks, 1);
                self.close(idx, CloseReason::IdleTimeout);
            }
            if let Some(now) = buffer_scan.due(&self.shared) {
                for c in self.clients.iter_mut().flatten() {
                    if BufferScan::idle(now, c.entry.last_input()) {
                        c.conn.release_idle(None);
                    }
                }
                buffers::publish();
                if !self.scratch.is_empty() {
                    self.expire_handshakes(now);
                }
            }
        }
    }

    /// Hand finished flash reads to their connections; one whose reads are all done
    /// runs again this turn.
    fn flash_finished(&mut self) {
        if let Some(f) = &self.flash {
            let again = &mut self.again;
            f.deliver_finished(
                &mut self.clients,
                |c| (&mut c.reads, &mut c.conn),
                |_, slot| again.push(slot),
            );
        }
    }

    fn accept(&mut self, listener: usize) {
        loop {
            let mut stream = match self.listeners[listener].accept() {
                Ok(s) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    super::worker::accept_failed(&self.shared, &self.stats, &e);
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
                grow_table(&mut self.clients, &mut self.free);
                self.clients.push(None);
                table_grew(&self.stats, &self.clients, self.free.capacity() * 8);
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
            let now = self.shared.clock.now();
            let tls = match (&self.shared.tls, self.listeners[listener].is_tls()) {
                (Some(t), true) => match TlsConn::new(t, now) {
                    Ok(session) => Some(session),
                    Err(_) => {
                        let _ = self.poll.registry().deregister(&mut stream);
                        self.shared.curr_connections.fetch_sub(1, Ordering::Relaxed);
                        self.free.push(idx);
                        continue;
                    }
                },
                _ => None,
            };
            let entry = self.shared.conns.accepted(&stream, now);
            conn_opened(&self.shared, &stream);
            let mut conn = Conn::new();
            conn.set_fd(stream.as_fd().as_raw_fd());
            self.clients[idx] = Some(Client {
                stream,
                conn,
                entry,
                want_write: false,
                tls,
                reads: self.flash.as_ref().map(|f| f.conn()).unwrap_or_default(),
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
                fd: -1,
                flash: None,
            },
            latency: self.latency.as_ref(),
        };
        self.udp[i].serve(&exec);
    }

    fn close(&mut self, idx: usize, reason: CloseReason) {
        if let Some(mut client) = self.clients[idx].take() {
            conn_closing(&self.shared, &client.stream, reason);
            let _ = self.poll.registry().deregister(&mut client.stream);
            self.shared.conns.closed(client.stream.as_fd().as_raw_fd());
            self.shared.curr_connections.fetch_sub(1, Ordering::Relaxed);
            self.free.push(idx);
        }
    }

    /// Read, execute and write for one connection.
    fn drive(&mut self, idx: usize) {
        let Some(client) = self.clients.get_mut(idx).and_then(Option::as_mut) else {
            return;
        };
        // Values go through the TLS session, never in place from the store.
        let in_place = client.tls.is_none();
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
                fd: client.stream.as_fd().as_raw_fd(),
                flash: self.flash.as_ref().map(|f| &f.reads),
            },
            latency: self.latency.as_ref(),
        };
        loop {
            // Read until the socket is drained (a short read means it is),
            // unless output is backed up or much input is already waiting.
            let (read_any, drained, eof) = match client.tls.as_mut() {
                None => read_plain(&mut client.stream, &mut client.conn, &self.stats),
                Some(t) => {
                    let Some(ctx) = self.shared.tls.as_ref() else {
                        return;
                    };
                    match t.receive(&mut client.stream, &mut self.scratch, &mut client.conn, ctx) {
                        Ok(got) => {
                            bump(&self.stats.bytes_read, got.plain as u64);
                            (got.bytes > 0, got.drained, got.eof)
                        }
                        Err(failure) => {
                            if failure == Failure::Alert {
                                let _ = t.send(&mut client.stream);
                            }
                            self.close(idx, CloseReason::Error);
                            return;
                        }
                    }
                }
            };
            if read_any {
                client.entry.touch(self.shared.clock.now());
            }
            if let Some(f) = &self.flash {
                f.begin(&mut client.reads);
            }
            let status = client.conn.process(&exec, &mut self.ahead);
            if let Some(f) = &self.flash {
                f.end(idx, &mut client.reads, &mut client.conn);
            }
            if status == Status::Close {
                if let Some(splices) = &self.splices {
                    splices.borrow_mut().release(&self.shared.store);
                }
                self.close(idx, CloseReason::Error);
                return;
            }
            if let Status::Watch { streams } = status {
                if client.tls.is_none() {
                    self.hand_to_logger(idx, streams);
                    return;
                }
                // The logger writes plain sockets only: a TLS connection is refused
                // and stays an ordinary connection.
                self.shared.watch.release();
                client
                    .conn
                    .refuse_watch(b"ERROR watch is not supported over TLS\r\n");
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
                        self.close(idx, CloseReason::Error);
                        return;
                    }
                }
            }
            if let Some(t) = client.tls.as_mut() {
                // Seal the replies into records and send them: one vectored send per
                // socket-full, sealing more while the session takes them.
                if status == Status::CloseAfterWrite {
                    t.seal(&mut client.conn);
                    t.close_notify();
                }
                loop {
                    let sealed = t.seal(&mut client.conn);
                    bump(&self.stats.bytes_written, sealed as u64);
                    if t.send(&mut client.stream).is_err() {
                        self.close(idx, CloseReason::Error);
                        return;
                    }
                    if t.wants_write() || client.conn.output().is_empty() || sealed == 0 {
                        break;
                    }
                }
            }
            // One write for every reply of this wake-up.
            while !client.conn.output().is_empty() && client.tls.is_none() {
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
                        self.close(idx, CloseReason::Error);
                        return;
                    }
                }
            }
            let pending = !client.conn.output().is_empty()
                || client.tls.as_ref().is_some_and(|t| t.wants_write());
            if eof || (status == Status::CloseAfterWrite && !pending) {
                // On EOF memcached closes too, dropping replies it could not write.
                self.close(idx, CloseReason::Normal);
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
                    self.close(idx, CloseReason::Error);
                    return;
                }
                client.want_write = pending;
            }
            // Count what the buffers grew to (a value on its way, replies waiting), and
            // give them back if the connection is empty and the worker over its budget.
            client.conn.shrink_idle();
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
            }
            return;
        }
    }

    /// Close the connections whose TLS handshake ran out of time.
    fn expire_handshakes(&mut self, now: u32) {
        for idx in 0..self.clients.len() {
            let expired = self.clients[idx]
                .as_ref()
                .and_then(|c| c.tls.as_ref())
                .is_some_and(|t| t.handshake_expired(now));
            if expired {
                if let Some(tls) = &self.shared.tls {
                    tls.handshake_errors.fetch_add(1, Ordering::Relaxed);
                }
                self.close(idx, CloseReason::Error);
            }
        }
    }

    /// `watch`: the connection leaves this worker for the logger thread, which owns
    /// its socket from now on (memcached's `event_del` and `logger_add_watcher`). The
    /// worker keeps no part of it, so no watcher can slow it down; the logger writes to
    /// it without blocking and drops it when it closes. It counts as closed here
    /// (`curr_connections`, `stats conns`).
    fn hand_to_logger(&mut self, idx: usize, streams: u16) {
        let Some(mut client) = self.clients[idx].take() else {
            return;
        };
        let _ = self.poll.registry().deregister(&mut client.stream);
        let fd = client.stream.as_fd().as_raw_fd();
        self.shared.conns.closed(fd);
        self.shared.curr_connections.fetch_sub(1, Ordering::Relaxed);
        self.free.push(idx);
        self.shared
            .watch
            .attach(client.stream.into_owned_fd(), streams);
    }

    /// Stop accepting, give every client its pending replies, close all.
    fn shutdown(&mut self) {
        for l in &mut self.listeners {
            let _ = self.poll.registry().deregister(l);
        }
        self.listeners.clear();
        for idx in 0..self.clients.len() {
            if let Some(client) = self.clients[idx].as_mut() {
                if let Some(t) = client.tls.as_mut() {
                    // Records the socket did not take yet: best effort, no waiting.
                    t.seal(&mut client.conn);
                    t.close_notify();
                    let _ = t.send(&mut client.stream);
                } else if !client.conn.output().is_empty() {
                    let out = client.conn.output();
                    let _ = client
                        .stream
                        .write_all_blocking(out, SHUTDOWN_WRITE_TIMEOUT);
                }
            }
            self.close(idx, CloseReason::Shutdown);
        }
    }
}

/// Read a plain connection's socket into its input until the socket is drained (a
/// short read means it is), the output is backed up, or much input is waiting.
/// Returns whether anything was read, whether the socket was drained, and end of
/// stream.
fn read_plain(stream: &mut Stream, conn: &mut Conn, stats: &WorkerStats) -> (bool, bool, bool) {
    let (mut read_any, mut drained, mut eof) = (false, false, false);
    while !conn.output_blocked() && conn.buffered() < conn.read_limit() {
        let space = conn.read_space();
        let want = space.len();
        match stream.read(space) {
            Ok(0) => {
                eof = true;
                break;
            }
            Ok(n) => {
                conn.filled(n);
                bump(&stats.bytes_read, n as u64);
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
    (read_any, drained, eof)
}
