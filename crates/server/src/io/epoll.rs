//! The epoll worker: one thread's event loop over its own listeners and connections.
//!
//! A worker never hands a connection to another thread. Per wake-up it reads
//! everything the socket has, lets [`Conn::process`] execute every complete
//! request, and writes all replies with one `write`. What happens to a connection
//! besides its reads and writes (its accept, its close, the scans) is `worker/`'s.

use std::cell::RefCell;
use std::convert::Infallible;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Registry, Token};

use crate::admin::watch::CloseReason;
use crate::config::IoBackend;
use crate::io::flash_io::WorkerReads;
use crate::io::net::{receive_round, Listener, Round, Stream};
use crate::io::spin::AdaptiveSpin;
use crate::io::tls::{self, Failure};
use crate::io::udp::UdpEndpoint;
use crate::io::worker::{
    accept_failed, clear_wake, release_splices, Engine, Link, Scans, Slot, Slots, SCAN_PERIOD,
    SHUTDOWN_WRITE_TIMEOUT,
};
use crate::ops::Exec;
use crate::reply::splice::Splices;
use crate::session::conn::{Conn, Status};
use crate::session::Ahead;
use crate::stats::latency::now_ticks;
use crate::stats::{bump, WorkerStats};

const WAKER: Token = Token(usize::MAX);
const LISTENER_BASE: usize = usize::MAX / 2;
const UDP_BASE: usize = usize::MAX / 4;

/// A connection slot owned by one worker.
struct Client {
    link: Link<Stream>,
    /// Registered for writable events because output is pending.
    want_write: bool,
}

impl Slot for Client {
    type Socket = Stream;
    type Tag = ();

    fn next_tag(_: ()) {}

    fn link_mut(&mut self) -> &mut Link<Stream> {
        &mut self.link
    }

    fn release_idle(&mut self) {
        self.link.conn.release_idle(None);
    }
}

pub(crate) struct Worker {
    poll: Poll,
    listeners: Vec<Listener>,
    udp: Vec<UdpEndpoint>,
    slots: Slots<Client>,
    /// Connections to drive again without waiting for an event (they stopped
    /// reading early for fairness or backpressure).
    again: Vec<usize>,
    engine: Engine,
    wake: Arc<File>,
    /// `--busy-poll-us`: how long to poll before sleeping.
    spin: Option<AdaptiveSpin>,
    /// Requests parsed ahead, lent to each connection's `process` call.
    ahead: Ahead,
    /// Where TLS connections' ciphertext is received (empty without TLS listeners).
    scratch: Vec<u8>,
}

impl Worker {
    pub(crate) fn new(
        mut listeners: Vec<Listener>,
        mut udp: Vec<UdpEndpoint>,
        shared: Arc<crate::state::Shared>,
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
        let scratch = if listeners.iter().any(Listener::is_tls) {
            vec![0; tls::SCRATCH_BYTES]
        } else {
            Vec::new()
        };
        Ok(Worker {
            poll,
            listeners,
            udp,
            slots: Slots::default(),
            again: Vec::new(),
            spin: AdaptiveSpin::new(shared.settings.busy_poll_us),
            ahead: Ahead::default(),
            scratch,
            engine: Engine::new(shared, stats, &wake, IoBackend::Epoll),
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

    /// Serve until shutdown. Inlined into the worker thread's closure (`launch.rs`),
    /// where it was before that closure moved into a function of its own: called, this
    /// loop and the `drive` under it took about 10 instructions more per wake-up.
    #[inline]
    pub(crate) fn run(&mut self) {
        self.engine.announce(&self.listeners, &self.udp);
        let mut events = Events::with_capacity(1024);
        let mut scans = Scans::new(&self.engine.shared);
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
            if self.engine.shared.shutting_down.load(Ordering::Relaxed) {
                self.shutdown();
                return;
            }
            if let Some(r) = &self.engine.latency {
                r.woke(now_ticks());
            }
            for event in events.iter() {
                match event.token() {
                    WAKER => {
                        clear_wake(&self.wake);
                        self.flash_finished();
                    }
                    Token(t) if t >= LISTENER_BASE => self.accept(t - LISTENER_BASE),
                    Token(t) if t >= UDP_BASE => {
                        self.udp[t - UDP_BASE].serve(&self.engine.exec_udp())
                    }
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
            if let Some(r) = &self.engine.latency {
                r.flush(&self.engine.stats.latency);
            }
            let registry = self.poll.registry();
            let (shared, stats) = (&self.engine.shared, &self.engine.stats);
            scans.after_turn(&mut self.slots, shared, stats, |c| detach(registry, c));
        }
    }

    /// Hand finished flash reads to their connections; one whose reads are all done
    /// runs again this turn.
    fn flash_finished(&mut self) {
        if let Some(f) = &self.engine.flash {
            let again = &mut self.again;
            self.slots.deliver_reads(f, |_, slot| again.push(slot));
        }
    }

    fn accept(&mut self, listener: usize) {
        loop {
            let stream = match self.listeners[listener].accept() {
                Ok(s) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    accept_failed(&self.engine.shared, &self.engine.stats, &e);
                    return;
                }
            };
            let registry = self.poll.registry();
            let opened = self.slots.open(
                &self.engine,
                stream,
                self.listeners[listener].is_tls(),
                |stream, idx, ()| {
                    registry
                        .register(stream, Token(idx), Interest::READABLE)
                        .ok()
                },
                |link, ()| Client {
                    link,
                    want_write: false,
                },
            );
            if let Some(idx) = opened {
                // Data may already be waiting (edge-triggered: drive once now).
                self.drive(idx);
            }
        }
    }

    fn close(&mut self, idx: usize, reason: CloseReason) {
        let registry = self.poll.registry();
        self.slots
            .close(idx, &self.engine.shared, reason, |c| detach(registry, c));
    }

    /// Read, execute and write for one connection, until it waits for its socket.
    fn drive(&mut self, idx: usize) {
        let Some(client) = self.slots.get_mut(idx) else {
            return;
        };
        let mut turn = Turn {
            slot: idx,
            exec: self.engine.exec(
                client.link.socket.as_fd().as_raw_fd(),
                client.link.tls.is_some(),
            ),
            flash: self.engine.flash.as_ref(),
            ahead: &mut self.ahead,
            scratch: &mut self.scratch,
            registry: self.poll.registry(),
        };
        match client.run(&mut turn) {
            Next::Wait => {}
            Next::Later => self.again.push(idx),
            Next::Close(reason) => self.close(idx, reason),
            Next::Watch(streams) => {
                let registry = self.poll.registry();
                let shared = &self.engine.shared;
                self.slots.hand_to_logger(
                    idx,
                    shared,
                    streams,
                    |c| detach(registry, c),
                    |c| c.link.socket.into_owned_fd(),
                );
            }
        }
    }

    /// Stop accepting, give every client its pending replies, close all.
    fn shutdown(&mut self) {
        for l in &mut self.listeners {
            let _ = self.poll.registry().deregister(l);
        }
        self.listeners.clear();
        for idx in 0..self.slots.len() {
            if let Some(client) = self.slots.get_mut(idx) {
                client.flush_for_shutdown();
            }
            self.close(idx, CloseReason::Shutdown);
        }
    }
}

/// Take a connection's socket off the worker's epoll set, before it closes or goes to
/// the logger thread.
fn detach(registry: &Registry, c: &mut Client) {
    let _ = registry.deregister(&mut c.link.socket);
}

/// What a connection's turn borrows of its worker.
struct Turn<'w> {
    slot: usize,
    exec: Exec<'w>,
    flash: Option<&'w WorkerReads>,
    ahead: &'w mut Ahead,
    scratch: &'w mut [u8],
    registry: &'w Registry,
}

/// What a connection's turn leaves its worker to do.
enum Next {
    /// Nothing: an event brings it back (readable, or writable for pending replies).
    Wait,
    /// Drive it again after the other connections had their turn: it stopped reading
    /// with bytes left in the socket.
    Later,
    Close(CloseReason),
    /// `watch` for these streams: hand it to the logger thread.
    Watch(u16),
}

impl Client {
    /// Receive, run and write, again while requests wait on output that drained.
    #[inline(always)]
    fn run(&mut self, turn: &mut Turn<'_>) -> Next {
        loop {
            // Read until the socket is drained (a short read means it is),
            // unless output is backed up or much input is already waiting.
            let got = match self.receive(turn) {
                Ok(got) => got,
                Err(next) => return next,
            };
            if got.bytes > 0 {
                self.link.entry.touch(turn.exec.now());
            }
            let exec = &turn.exec;
            self.link.lend_reads(turn.flash);
            let status = self.link.conn.process(exec, turn.ahead);
            self.link.start_reads(turn.flash, turn.slot);
            if status == Status::Close {
                release_splices(exec);
                return Next::Close(CloseReason::Error);
            }
            if let Status::Watch { streams } = status {
                if self.link.may_watch(exec.shared) {
                    return Next::Watch(streams);
                }
            }
            let closing = status == Status::CloseAfterWrite;
            if self.send(exec, closing).is_err() {
                return Next::Close(CloseReason::Error);
            }
            let pending = !self.link.conn.output().is_empty()
                || self.link.tls.as_ref().is_some_and(|t| t.wants_write());
            if got.eof || (closing && !pending) {
                // On EOF memcached closes too, dropping replies it could not write.
                return Next::Close(CloseReason::Normal);
            }
            if self.want_write(pending, turn).is_err() {
                return Next::Close(CloseReason::Error);
            }
            // Count what the buffers grew to (a value on its way, replies waiting), and
            // give them back if the connection is empty and the worker over its budget.
            self.link.conn.shrink_idle();
            if pending || closing {
                // The writable event brings us back.
                return Next::Wait;
            }
            if self.link.conn.stalled_on_output() {
                // Output drained after backpressure: run the waiting requests.
                continue;
            }
            return if got.drained { Next::Wait } else { Next::Later };
        }
    }

    /// Receive what the socket has into the connection, through its TLS session if it
    /// has one.
    #[inline(always)]
    fn receive(&mut self, turn: &mut Turn<'_>) -> Result<Round, Next> {
        if self.link.tls.is_some() {
            return self.receive_tls(&turn.exec, turn.scratch);
        }
        Ok(read_plain(
            &mut self.link.socket,
            &mut self.link.conn,
            turn.exec.stats,
        ))
    }

    /// [`Client::receive`] over TLS, through `scratch`. A TLS failure sends the alert
    /// rustls queued and closes. Out of line, as [`Client::send_spliced`] is: `drive`,
    /// where the plain path is inlined whole, is the request path.
    #[inline(never)]
    fn receive_tls(&mut self, exec: &Exec<'_>, scratch: &mut [u8]) -> Result<Round, Next> {
        let (Some(t), Some(ctx)) = (self.link.tls.as_mut(), exec.shared.tls.as_ref()) else {
            return Err(Next::Wait);
        };
        match t.receive(&mut self.link.socket, scratch, &mut self.link.conn, ctx) {
            Ok(got) => {
                bump(&exec.stats.bytes_read, got.plain as u64);
                Ok(Round {
                    bytes: got.bytes,
                    drained: got.drained,
                    eof: got.eof,
                })
            }
            Err(failure) => {
                if failure == Failure::Alert {
                    let _ = t.send(&mut self.link.socket);
                }
                Err(Next::Close(CloseReason::Error))
            }
        }
    }

    /// Write the turn's replies: those holding values in place first, then the rest
    /// through the TLS session (`closing`: after `quit`, with its close_notify) or
    /// straight from the output. `Err`: the socket failed.
    #[inline(always)]
    fn send(&mut self, exec: &Exec<'_>, closing: bool) -> Result<(), ()> {
        if let Some(splices) = exec.sink.splices.filter(|s| !s.borrow().is_empty()) {
            self.send_spliced(splices, exec)?;
        }
        if self.link.tls.is_some() {
            self.send_tls(exec.stats, closing)
        } else {
            self.write_plain(exec.stats)
        }
    }

    /// Large values go in place: one vectored send per socket-full, then what the
    /// socket did not take is copied and the pins are given back.
    #[inline(never)]
    fn send_spliced(&mut self, splices: &RefCell<Splices>, exec: &Exec<'_>) -> Result<(), ()> {
        let mut splices = splices.borrow_mut();
        let stream = &mut self.link.socket;
        let sent = self
            .link
            .conn
            .flush_spliced(&mut splices, &exec.shared.store, |iov| {
                stream.write_vectored(iov)
            })
            .map_err(drop)?;
        bump(&exec.stats.bytes_written, sent as u64);
        Ok(())
    }

    /// Seal the replies into records and send them: one vectored send per
    /// socket-full, sealing more while the session takes them.
    fn send_tls(&mut self, stats: &WorkerStats, closing: bool) -> Result<(), ()> {
        let Some(t) = self.link.tls.as_mut() else {
            return Ok(());
        };
        if closing {
            t.seal(&mut self.link.conn);
            t.close_notify();
        }
        loop {
            let sealed = t.seal(&mut self.link.conn);
            bump(&stats.bytes_written, sealed as u64);
            t.send(&mut self.link.socket).map_err(drop)?;
            if t.wants_write() || self.link.conn.output().is_empty() || sealed == 0 {
                return Ok(());
            }
        }
    }

    /// One write for every reply of this wake-up.
    #[inline(always)]
    fn write_plain(&mut self, stats: &WorkerStats) -> Result<(), ()> {
        let conn = &mut self.link.conn;
        while !conn.output().is_empty() {
            match self.link.socket.write(conn.output()) {
                Ok(n) => {
                    conn.written(n);
                    bump(&stats.bytes_written, n as u64);
                    if !conn.output().is_empty() {
                        // Partial write: the socket buffer is full.
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return Err(()),
            }
        }
        Ok(())
    }

    /// Register for writable events while replies are `pending`, and only then.
    #[inline(always)]
    fn want_write(&mut self, pending: bool, turn: &Turn<'_>) -> io::Result<()> {
        if pending != self.want_write {
            let interest = if pending {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            turn.registry
                .reregister(&mut self.link.socket, Token(turn.slot), interest)?;
            self.want_write = pending;
        }
        Ok(())
    }

    /// At shutdown: the replies the socket did not take yet, best effort (a TLS
    /// session's records without waiting, with its close_notify).
    fn flush_for_shutdown(&mut self) {
        let conn = &mut self.link.conn;
        if let Some(t) = self.link.tls.as_mut() {
            t.seal(conn);
            t.close_notify();
            let _ = t.send(&mut self.link.socket);
        } else if !conn.output().is_empty() {
            let _ = self
                .link
                .socket
                .write_all_blocking(conn.output(), SHUTDOWN_WRITE_TIMEOUT);
        }
    }
}

/// Read a plain connection's socket into its input, as long as [`receive_round`] says.
#[inline(always)]
fn read_plain(stream: &mut Stream, conn: &mut Conn, stats: &WorkerStats) -> Round {
    receive_round(conn, |conn| {
        let space = conn.read_space();
        let offered = space.len();
        let read = stream.read(space);
        if let Ok(n @ 1..) = read {
            conn.filled(n);
            bump(&stats.bytes_read, n as u64);
        }
        Ok(read.map(|n| (n, offered)))
    })
    .unwrap_or_else(|never: Infallible| match never {})
}
