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

use crate::config::IoBackend;
use crate::io::net::{Listener, Stream};
use crate::io::spin::AdaptiveSpin;
use crate::io::udp::UdpEndpoint;
use crate::io::worker::{
    admit, clear_wake, grow_table, table_grew, BufferScan, IdleScan, SCAN_PERIOD,
    SHUTDOWN_WRITE_TIMEOUT, TOO_MANY_CONNECTIONS,
};
use crate::ops::Exec;
use crate::reply::splice::Splices;
use crate::session::conn::{buffers, Conn, Status};
use crate::session::Ahead;
use crate::state::Shared;
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
    /// `Exec::splice_min` for this worker's connections.
    splice_min: usize,
    /// `--busy-poll-us`: how long to poll before sleeping.
    spin: Option<AdaptiveSpin>,
    /// Requests parsed ahead, lent to each connection's `process` call.
    ahead: Ahead,
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
            ahead: Ahead::default(),
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

    pub(crate) fn run(&mut self) {
        let now = self.shared.clock.now();
        for l in &self.listeners {
            self.shared.conns.listening(l, false, now);
        }
        for u in &self.udp {
            self.shared.conns.listening(&u.socket, true, now);
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
            if let Some(now) = buffer_scan.due(&self.shared) {
                for c in self.clients.iter_mut().flatten() {
                    if BufferScan::idle(now, c.entry.last_input()) {
                        c.conn.release_idle(None);
                    }
                }
                buffers::publish();
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
            let status = client.conn.process(&exec, &mut self.ahead);
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
