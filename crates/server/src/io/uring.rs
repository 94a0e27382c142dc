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
use crate::io::tls::Failure;
use crate::io::udp::UdpEndpoint;
use crate::io::worker::{
    accept_failed, clear_wake, Engine, Link, Scans, Slot, Slots, SCAN_PERIOD,
    SHUTDOWN_WRITE_TIMEOUT,
};
use crate::session::Ahead;
use crate::state::Shared;
use crate::stats::latency::now_ticks;
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
    link: Link<OwnedFd>,
    token: u64,
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
    /// Its session failed on received bytes; handled when the connection is driven.
    tls_failed: Option<Failure>,
    /// `watch` accepted for these streams: once the receive is cancelled and no send
    /// is in flight, the socket goes to the logger thread.
    watching: Option<u16>,
}

impl Slot for Client {
    type Socket = OwnedFd;
    /// The slot's generation.
    type Tag = u32;

    fn next_tag(generation: u32) -> u32 {
        (generation + 1) & GENERATION_MASK
    }

    fn link_mut(&mut self) -> &mut Link<OwnedFd> {
        &mut self.link
    }

    fn release_idle(&mut self) {
        // Not while a send holds the send buffer, or part of it is unsent.
        let Some(out) = self.out.as_mut().filter(|o| self.out_sent >= o.len()) else {
            return;
        };
        if self.link.conn.release_idle(Some(out)) {
            self.out_sent = 0;
        }
    }
}

impl Client {
    fn send_in_flight(&self) -> bool {
        self.out.is_none()
    }

    /// Records sealed but not yet handed to a send.
    fn tls_waiting(&self) -> bool {
        self.link.tls.as_ref().is_some_and(|t| t.wants_write())
    }

    /// memcached's reason for closing a connection its turn gave up: the peer's end
    /// of stream and `quit` are normal.
    fn close_reason(&self) -> CloseReason {
        if self.broken || self.tls_failed.is_some() || !(self.eof || self.close_after_write) {
            CloseReason::Error
        } else {
            CloseReason::Normal
        }
    }

    /// A receive completed at server time `now`: the bytes go into the connection,
    /// through its TLS session if it has one.
    #[inline(always)]
    fn received(&mut self, result: io::Result<&[u8]>, now: u32, engine: &Engine) {
        match result {
            Ok([]) => self.eof = true,
            Ok(data) if self.link.tls.is_some() => {
                self.link.entry.touch(now);
                self.feed_tls(data, engine);
            }
            Ok(mut data) => {
                bump(&engine.stats.bytes_read, data.len() as u64);
                self.link.entry.touch(now);
                while !data.is_empty() {
                    let space = self.link.conn.read_space();
                    let n = space.len().min(data.len());
                    space[..n].copy_from_slice(&data[..n]);
                    self.link.conn.filled(n);
                    data = &data[n..];
                }
            }
            // Out of provided buffers, or our own cancellation: the
            // receive is armed again when the connection can take more.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOBUFS | libc::ECANCELED)) => {}
            Err(_) => self.eof = true,
        }
    }

    /// Ciphertext received: decrypted into the connection. A failure is handled when
    /// the connection is driven.
    fn feed_tls(&mut self, data: &[u8], engine: &Engine) {
        let Some(t) = self.link.tls.as_mut() else {
            return;
        };
        match engine
            .shared
            .tls
            .as_ref()
            .map(|ctx| t.feed(data, &mut self.link.conn, ctx))
        {
            Some(Ok(plain)) => bump(&engine.stats.bytes_read, plain as u64),
            Some(Err(failure)) => self.tls_failed = Some(failure),
            None => self.broken = true,
        }
        self.eof |= t.peer_closed();
    }

    /// A send completed: its buffer comes back.
    #[inline(always)]
    fn sent(&mut self, result: io::Result<usize>, buf: Vec<u8>, stats: &WorkerStats) {
        match result {
            Ok(n) => {
                // Over TLS, `bytes_written` counts the plaintext sealed.
                if self.link.tls.is_none() {
                    bump(&stats.bytes_written, n as u64);
                }
                self.out_sent += n;
            }
            Err(_) => self.broken = true,
        }
        self.out = Some(buf);
    }
}

pub struct UringWorker {
    ring: Ring,
    listeners: Vec<Listener>,
    udp: Vec<UdpEndpoint>,
    wake: Arc<File>,
    slots: Slots<Client>,
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
    /// Its requests' latency is timed when their replies are handed to the kernel by
    /// the next `io_uring_enter`.
    engine: Engine,
    /// Shutting down: no more requests run, pending replies are sent.
    draining: bool,
    /// Requests parsed ahead, lent to each connection's `process` call.
    ahead: Ahead,
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
        Ok(UringWorker {
            ring,
            listeners,
            udp,
            slots: Slots::default(),
            dirty: Vec::new(),
            accepted: Vec::new(),
            accept_retry: Vec::new(),
            repoll: Vec::new(),
            spin: AdaptiveSpin::new(shared.settings.busy_poll_us),
            engine: Engine::new(shared, stats, &wake, IoBackend::Uring),
            wake,
            draining: false,
            ahead: Ahead::default(),
        })
    }

    /// Serve until shutdown; inlined into the worker thread's closure, as the epoll
    /// worker's `run` is (see there).
    #[inline]
    pub fn run(mut self) {
        self.start();
        let mut scans = Scans::new(&self.engine.shared);
        loop {
            let timeout = if !self.accept_retry.is_empty() {
                Some(ACCEPT_RETRY)
            } else {
                Some(SCAN_PERIOD)
            };
            // What this turn queued is handed to the kernel next: its requests' latency
            // ends here.
            if let Some(r) = &self.engine.latency {
                r.flush(&self.engine.stats.latency);
            }
            let Ok(slept) = self.wait(timeout) else {
                return;
            };
            if let Some(r) = &self.engine.latency {
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
            if self.engine.shared.shutting_down.load(Ordering::Relaxed) {
                self.shutdown();
                return;
            }
            self.retry_accepts();
            self.repoll();
            self.setup_accepted();
            self.drive_dirty();
            let (ring, shared, stats) = (&mut self.ring, &self.engine.shared, &self.engine.stats);
            scans.after_turn(&mut self.slots, shared, stats, |c| detach(ring, shared, c));
        }
    }

    /// Announce the listeners, and arm their multishot accepts and the polls of the UDP
    /// sockets and the wake-up eventfd.
    fn start(&mut self) {
        self.engine.announce(&self.listeners, &self.udp);
        if self.engine.shared.settings.verbose > 1 {
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
    }

    /// Submit what this turn queued and wait for completions, for at most `timeout`.
    /// With `--busy-poll-us N`, up to N µs awake before sleeping, while polling pays
    /// (`spin.rs`, `Ring::spin_for_completion`). Returns how long it slept (`None`:
    /// not at all, or not timed without busy polling); `Err` when the ring failed.
    fn wait(&mut self, timeout: Option<Duration>) -> Result<Option<Duration>, ()> {
        let window = self.spin.map_or(Duration::ZERO, |s| s.window());
        if !window.is_zero() && self.ring.spin_for_completion(window).unwrap_or(false) {
            return Ok(None);
        }
        let asleep = self.spin.is_some().then(Instant::now);
        if let Err(e) = self.ring.submit_and_wait(timeout) {
            eprintln!("ferrocache: io_uring_enter failed: {e}");
            return Err(());
        }
        Ok(asleep.map(|t| t.elapsed()))
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
            slots,
            dirty,
            accepted,
            accept_retry,
            repoll,
            engine,
            ..
        } = self;
        let now = engine.shared.clock.now();
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
                        Err(e) => accept_failed(&engine.shared, &engine.stats, &e),
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
                    if let Some((idx, c)) = client_of(slots, token) {
                        c.received(result, now, engine);
                        if !more {
                            c.recv_armed = false;
                            c.cancelling = false;
                        }
                        mark(dirty, c, idx);
                    }
                }
                Event::Sent { token, result, buf } => {
                    if let Some((idx, c)) = client_of(slots, token) {
                        c.sent(result, buf, &engine.stats);
                        mark(dirty, c, idx);
                    }
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
                        if let Some(u) = udp.get_mut((token & !UDP_TOKEN) as usize) {
                            u.serve(&engine.exec_udp());
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

    /// Open the sockets accepted this turn, each with its multishot receive armed.
    fn setup_accepted(&mut self) {
        for (fd, listener) in std::mem::take(&mut self.accepted) {
            let ring = &mut self.ring;
            self.slots.open(
                &self.engine,
                fd,
                self.listeners.get(listener).is_some_and(Listener::is_tls),
                |fd, idx, generation| {
                    let token = u64::from(generation) << SLOT_BITS | idx as u64;
                    ring.recv_multi(fd.as_raw_fd(), token);
                    Some(token)
                },
                |link, token| Client {
                    link,
                    token,
                    recv_armed: true,
                    cancelling: false,
                    out: Some(Vec::new()),
                    out_sent: 0,
                    eof: false,
                    close_after_write: false,
                    broken: false,
                    queued: false,
                    tls_failed: None,
                    watching: None,
                },
            );
        }
    }

    /// Hand finished flash reads to their connections, and queue those whose reads are
    /// all done to run this turn.
    fn flash_finished(&mut self) {
        if let Some(f) = &self.engine.flash {
            let dirty = &mut self.dirty;
            self.slots.deliver_reads(f, |c, slot| mark(dirty, c, slot));
        }
    }

    fn drive_dirty(&mut self) {
        let mut dirty = std::mem::take(&mut self.dirty);
        for &idx in &dirty {
            if let Some(c) = self.slots.get_mut(idx) {
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
        let Some(c) = self.slots.get_mut(idx) else {
            return;
        };
        let exec = self
            .engine
            .exec(c.link.socket.as_raw_fd(), c.link.tls.is_some());
        let flash = self.engine.flash.as_ref();
        c.link.lend_reads(flash);
        let open = drive_client(&mut self.ring, &exec, &mut self.ahead, c, self.draining);
        c.link.start_reads(flash, idx);
        if !open {
            let reason = c.close_reason();
            self.close(idx, reason);
            return;
        }
        if let Some(streams) = c.watching {
            if !c.recv_armed && !c.send_in_flight() && !self.draining {
                // Its multishot receive was cancelled and its last send completed
                // first, so no completion of this ring names the socket any more.
                let shared = &self.engine.shared;
                self.slots
                    .hand_to_logger(idx, shared, streams, |_| {}, |c| c.link.socket);
            }
        }
    }

    fn close(&mut self, idx: usize, reason: CloseReason) {
        let (ring, shared) = (&mut self.ring, &self.engine.shared);
        self.slots
            .close(idx, shared, reason, |c| detach(ring, shared, c));
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
            for idx in 0..self.slots.len() {
                self.drive(idx);
            }
            let pending = self.slots.iter().any(|c| {
                c.send_in_flight()
                    || !c.link.conn.output().is_empty()
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
        for idx in 0..self.slots.len() {
            self.close(idx, CloseReason::Shutdown);
        }
        // Sockets accepted in the last turn were never served.
        self.accepted.clear();
    }
}

/// Before a connection closes: give back the watcher slot it was promised and never
/// took; hand the kernel the entries already queued, which may name its descriptor,
/// before the number can be reused; and end the multishot receive (and any send) still
/// holding the socket.
fn detach(ring: &mut Ring, shared: &Shared, c: &mut Client) {
    if c.watching.is_some() {
        shared.watch.release();
    }
    let _ = ring.submit();
    let _ = SockRef::from(&c.link.socket).shutdown(Shutdown::Both);
}

fn mark(dirty: &mut Vec<usize>, c: &mut Client, idx: usize) {
    if !c.queued {
        c.queued = true;
        dirty.push(idx);
    }
}

/// The connection a completion's `token` names, with its slot: `None` for another
/// kind of token, or for a connection closed since (its slot's generation moved on).
#[inline(always)]
fn client_of(slots: &mut Slots<Client>, token: u64) -> Option<(usize, &mut Client)> {
    if token & (LISTENER_TOKEN | UDP_TOKEN | WAKE_TOKEN) != 0 {
        return None;
    }
    let idx = (token & ((1 << SLOT_BITS) - 1)) as usize;
    let generation = (token >> SLOT_BITS) as u32;
    slots.get_tagged(idx, generation).map(|c| (idx, c))
}
