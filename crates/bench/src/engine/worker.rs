//! One worker thread: a mio poll over its sessions' sockets, driving either
//! the closed loop (refill each session to `--pipeline` requests) or the
//! open loop (send at the schedule's intended times).
//!
//! ```text
//!   loop:
//!     open loop: issue every arrival now due (or drop it past the cap)
//!     write each connection's batched requests (one send per wake-up)
//!     poll
//!     for each ready socket: read once, parse every complete reply,
//!       complete requests, and (closed loop) compose the next ones
//! ```
//!
//! A session has one connection per server. A request whose keys live on
//! several servers (by `--hash`) is split into one part per server; the
//! request completes with its last part. Per-server figures count parts.
//!
//! Beside this file: `udp` (datagrams, reassembly, expiry), `redial`
//! (`--keep-going`: lost connections and their redials) and `recorder`
//! (finished parts into statistics).

use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use mio::{Events, Interest, Poll, Token};
use mmsg::{RecvBatch, SendBatch};
use protocol::client::ReplyBuffer;

use super::alarm::Alarm;
use super::stream::{Stream, READ_CHUNK_BYTES};
use super::tls::TlsStream;
use super::wire::{self, Outcome};
use super::Shared;
use crate::config::{Config, Load};
use crate::placement::Placement;
use crate::schedule::Schedule;
use crate::stats::Stats;
use crate::verify;
use crate::workload::{write_key, OpGen, OpKind, MAX_KEY_BYTES};
use recorder::{Answer, Recorder, Window};
use redial::{Down, HOLD_NS};

mod recorder;
mod redial;
mod udp;

/// Largest request datagram ferrobench sends (memcached reads at most 64 KiB).
const UDP_MAX_REQUEST_BYTES: usize = 65536;
/// Room per reply datagram; memcached and ferrocache send at most 1400 bytes,
/// and a longer one is counted as lost.
const UDP_REPLY_SLOT_BYTES: usize = 2048;
/// The poll token of the open loop's alarm (connections use their index).
const ALARM: Token = Token(usize::MAX);
/// Open loop: the alarm fires this long before an arrival and the worker
/// spins (polls without sleeping) for the rest, absorbing the wake-up
/// delay so requests leave on time.
const SPIN_LEAD_NS: u64 = 30_000;
/// Verification failures printed before going quiet.
const MAX_REPORTED_CORRUPTIONS: u64 = 10;

/// A socket to one server, as handed to a worker.
pub enum Link {
    Tcp(mio::net::TcpStream),
    /// `--tls`: handshaken already.
    Tls(Box<TlsStream>),
    Udp(mio::net::UdpSocket),
}

/// What a worker gets: its sessions (each a link per server) and its share
/// of the load.
pub struct WorkerSetup {
    pub index: usize,
    /// (session id, one link per server).
    pub sessions: Vec<(usize, Vec<Link>)>,
    pub schedule: Option<Schedule>,
    pub quota: Option<u64>,
    pub max_outstanding: usize,
}

/// What a worker hands back.
pub struct WorkerResult {
    pub stats: Stats,
    /// When its last measured request completed (ns since start).
    pub last_done_ns: u64,
}

/// One request part in flight on a connection.
#[derive(Clone, Copy, Debug)]
struct Part {
    slot: u32,
    kind: OpKind,
    nkeys: u32,
    /// UDP request id; unused on TCP, where replies come in order.
    request_id: u16,
    /// UDP: values received so far (TCP keeps these on the connection).
    hits: u32,
    corrupt: u32,
    /// UDP: a reply before the last said the request failed.
    failed: bool,
}

/// One request in flight in a session.
#[derive(Clone, Copy, Debug)]
struct Slot {
    start_ns: u64,
    parts_left: u32,
    kind: OpKind,
    nkeys: u32,
    hits: u32,
    corrupt: u32,
    failed: bool,
    timed_out: bool,
    /// A part was lost with its connection: no latency sample.
    lost: bool,
}

/// A UDP reply being reassembled from its datagrams.
struct Partial {
    total: u16,
    chunks: Vec<Option<Vec<u8>>>,
}

enum LinkState {
    Tcp {
        stream: Stream,
        rx: ReplyBuffer,
        written: usize,
    },
    Udp {
        socket: mio::net::UdpSocket,
        next_id: u16,
        partial: HashMap<u16, Partial>,
        /// Request datagrams composed this wake-up, sent together by one
        /// `sendmmsg` (as many as the pipeline depth allows).
        outbox: SendBatch,
    },
}

struct Conn {
    link: LinkState,
    server: usize,
    session: usize,
    /// TCP: requests composed this wake-up, not yet written.
    out: Vec<u8>,
    inflight: VecDeque<Part>,
    /// Values seen so far for the get at the head of `inflight`.
    hits: u32,
    corrupt: u32,
    /// A reply before the last said the request at the head of `inflight` failed.
    failed: bool,
    /// Queued in `dirty` for a write.
    dirty: bool,
    /// Sent ns per in-flight UDP part, parallel to `inflight`.
    sent_ns: VecDeque<u64>,
    /// `--keep-going`: the connection is lost; `inflight` then holds the
    /// requests issued to it meanwhile, unsent.
    down: Option<Down>,
}

impl Conn {
    /// Bytes wait for the socket (composed requests, or TLS records).
    fn has_output(&self) -> bool {
        match &self.link {
            LinkState::Tcp { stream, .. } => stream.has_output(&self.out),
            LinkState::Udp { .. } => !self.out.is_empty(),
        }
    }
}

struct Session {
    conns: Vec<usize>,
    gen: OpGen,
    outstanding: usize,
    slots: Vec<Slot>,
    free: Vec<u32>,
}

/// How a part ended.
#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    Ok,
    Failed,
    TimedOut,
    /// `--keep-going`: its connection was lost. A failure, but with no
    /// reply there is no latency to record.
    Lost,
}

pub struct Worker<'a> {
    cfg: &'a Config,
    shared: &'a Shared,
    ketama: Option<&'a Placement>,
    filler: &'a [u8],
    poll: Poll,
    conns: Vec<Conn>,
    sessions: Vec<Session>,
    rec: Recorder,
    dirty: Vec<usize>,
    refill: Vec<usize>,
    keys: Vec<u64>,
    key_servers: Vec<usize>,
    keybuf: [u8; MAX_KEY_BYTES],
    valbuf: Vec<u8>,
    /// UDP replies, up to 32 per `recvmmsg`.
    inbox: RecvBatch,
    /// TLS: ciphertext read from a socket (allocated at the first TLS read).
    scratch: Vec<u8>,
    schedule: Option<Schedule>,
    /// Open loop: wakes the poll at the next intended send time.
    alarm: Option<Alarm>,
    quota: Option<u64>,
    issued: u64,
    outstanding: usize,
    max_outstanding: usize,
    next_session: usize,
    /// `--keep-going`: this worker's lost connections, per server (each
    /// loss and recovery is printed once per worker, not per connection).
    down_per_server: Vec<usize>,
    index: usize,
    timeout_ns: u64,
}

impl<'a> Worker<'a> {
    pub fn new(
        cfg: &'a Config,
        shared: &'a Shared,
        ketama: Option<&'a Placement>,
        filler: &'a [u8],
        setup: WorkerSetup,
    ) -> anyhow::Result<Worker<'a>> {
        let poll = Poll::new().context("creating the event loop")?;
        let mut conns = Vec::new();
        let mut sessions = Vec::new();
        for (id, links) in setup.sessions {
            let mut ids = Vec::new();
            for (server, link) in links.into_iter().enumerate() {
                let token = Token(conns.len());
                let link = match link {
                    Link::Tcp(_) | Link::Tls(_) => {
                        let mut stream = match link {
                            Link::Tls(t) => Stream::Tls(t),
                            Link::Tcp(s) => Stream::Plain(s),
                            Link::Udp(_) => unreachable!("matched above"),
                        };
                        poll.registry().register(
                            stream.socket(),
                            token,
                            Interest::READABLE | Interest::WRITABLE,
                        )?;
                        LinkState::Tcp {
                            stream,
                            rx: ReplyBuffer::with_capacity(READ_CHUNK_BYTES * 2),
                            written: 0,
                        }
                    }
                    Link::Udp(mut socket) => {
                        poll.registry()
                            .register(&mut socket, token, Interest::READABLE)?;
                        LinkState::Udp {
                            socket,
                            next_id: 0,
                            partial: HashMap::new(),
                            outbox: SendBatch::new(),
                        }
                    }
                };
                ids.push(conns.len());
                conns.push(Conn {
                    link,
                    server,
                    session: sessions.len(),
                    out: Vec::with_capacity(4096),
                    inflight: VecDeque::new(),
                    hits: 0,
                    corrupt: 0,
                    failed: false,
                    dirty: false,
                    sent_ns: VecDeque::new(),
                    down: None,
                });
            }
            let seed = cfg.seed.wrapping_mul(0x9E37_79B9).wrapping_add(id as u64);
            let gen = OpGen::new(&cfg.workload, cfg.get_range(id), cfg.own_range(id), seed);
            sessions.push(Session {
                conns: ids,
                gen,
                outstanding: 0,
                slots: Vec::new(),
                free: Vec::new(),
            });
        }
        let alarm = match setup.schedule {
            Some(_) => {
                let alarm = Alarm::new(shared.start).context("creating the open-loop timer")?;
                alarm.register(poll.registry(), ALARM)?;
                Some(alarm)
            }
            None => None,
        };
        Ok(Worker {
            cfg,
            shared,
            ketama,
            filler,
            poll,
            conns,
            sessions,
            rec: Recorder {
                stats: Stats::new(cfg.servers.len()),
                window: Window {
                    warmup_ns: shared.warmup_ns,
                    end_ns: shared.end_ns,
                    timeout_ns: cfg.timeout.as_nanos() as u64,
                },
                last_done_ns: 0,
            },
            dirty: Vec::new(),
            refill: Vec::new(),
            keys: Vec::new(),
            key_servers: Vec::new(),
            keybuf: [0; MAX_KEY_BYTES],
            valbuf: Vec::new(),
            inbox: RecvBatch::new(32, UDP_REPLY_SLOT_BYTES),
            scratch: Vec::new(),
            schedule: setup.schedule,
            alarm,
            quota: setup.quota,
            issued: 0,
            outstanding: 0,
            max_outstanding: setup.max_outstanding.max(1),
            next_session: 0,
            down_per_server: vec![0; cfg.servers.len()],
            index: setup.index,
            timeout_ns: cfg.timeout.as_nanos() as u64,
        })
    }

    fn now_ns(&self) -> u64 {
        self.shared.start.elapsed().as_nanos() as u64
    }

    /// Runs until the end of the run and the drain of what is in flight.
    pub fn run(mut self) -> anyhow::Result<WorkerResult> {
        let closed = self.cfg.load == Load::Closed;
        let mut events = Events::with_capacity(1024);
        let mut stopping = false;
        let mut next_progress_ns = 0;
        let drain_ns = self.timeout_ns;
        let udp = self.cfg.transport == crate::config::Transport::Udp;
        if closed {
            self.refill = (0..self.sessions.len()).collect();
        }
        loop {
            let now = self.now_ns();
            if !stopping && (now >= self.shared.end_ns || self.quota_reached()) {
                stopping = true;
            }
            if stopping && (self.outstanding == 0 || now >= self.shared.end_ns + drain_ns) {
                break;
            }
            if self.shared.abort.load(Ordering::Relaxed) {
                break;
            }
            if !stopping {
                if closed {
                    self.refill_sessions(now);
                } else {
                    self.issue_due(now);
                }
            }
            if self.cfg.keep_going {
                self.redial_due(now, stopping);
            }
            self.flush_dirty()?;
            if udp {
                self.expire_udp(now);
            }
            if now >= next_progress_ns {
                self.publish_progress();
                next_progress_ns = now + 500_000_000;
            }
            let mut timeout = self.poll_timeout(now, stopping)?;
            if self.down_per_server.iter().any(|&n| n > 0) {
                // Wake to fail held requests and to start dials on time.
                timeout = timeout.min(Duration::from_nanos(HOLD_NS));
            }
            match self.poll.poll(&mut events, Some(timeout)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e).context("polling"),
            }
            let now = self.now_ns();
            for event in &events {
                if event.token() == ALARM {
                    if let Some(alarm) = &mut self.alarm {
                        alarm.clear();
                    }
                    continue;
                }
                let ci = event.token().0;
                if self.conns[ci].down.is_some() {
                    self.on_dial_event(ci, now);
                    continue;
                }
                if event.is_readable() || event.is_read_closed() || event.is_error() {
                    self.on_readable(ci, now)?;
                }
                if event.is_writable() && self.conns[ci].has_output() {
                    self.mark_dirty(ci);
                }
            }
        }
        // What is still in flight never got an answer in time.
        self.time_out_everything();
        self.publish_progress();
        Ok(WorkerResult {
            stats: self.rec.stats,
            last_done_ns: self.rec.last_done_ns,
        })
    }

    fn quota_reached(&self) -> bool {
        self.quota.is_some_and(|q| self.issued >= q)
    }

    /// How long to wait for events; in the open loop, also arms the alarm
    /// for the next arrival.
    fn poll_timeout(&mut self, now: u64, stopping: bool) -> anyhow::Result<Duration> {
        let until = |t: u64| Duration::from_nanos(t.saturating_sub(now));
        let cap = Duration::from_millis(100);
        if stopping {
            return Ok(until(self.shared.end_ns + self.timeout_ns).min(cap));
        }
        match (&self.schedule, &mut self.alarm) {
            (Some(s), Some(alarm)) => {
                let next = s.peek();
                if next <= now + SPIN_LEAD_NS {
                    return Ok(Duration::ZERO);
                }
                alarm
                    .arm(next - SPIN_LEAD_NS)
                    .context("arming the open-loop timer")?;
                Ok(until(next).min(cap) + Duration::from_millis(1))
            }
            _ => Ok(until(self.shared.end_ns).min(cap)),
        }
    }

    fn publish_progress(&self) {
        if let Some(slot) = self.shared.progress.get(self.index) {
            *slot.lock().expect("progress lock") = Some(self.rec.stats.total.clone());
        }
    }

    /// Closed loop: top each session that has room back up to the pipeline depth.
    fn refill_sessions(&mut self, now: u64) {
        let depth = self.cfg.pipeline.max(1);
        while let Some(s) = self.refill.pop() {
            while self.sessions[s].outstanding < depth && !self.quota_reached() {
                self.issue(s, now);
            }
        }
    }

    /// Open loop: issue every arrival whose intended time has come.
    fn issue_due(&mut self, now: u64) {
        while let Some(t) = self.schedule.as_ref().map(Schedule::peek) {
            if t > now || t >= self.shared.end_ns || self.quota_reached() {
                break;
            }
            self.schedule
                .as_mut()
                .expect("open loop has a schedule")
                .pop();
            if self.outstanding >= self.max_outstanding {
                if self.rec.window.measured(t) {
                    self.rec.stats.total.counters.dropped += 1;
                }
                continue;
            }
            let s = self.next_session;
            self.next_session = (s + 1) % self.sessions.len();
            self.issue(s, t);
        }
    }

    /// Composes one request for session `s`, started (or intended) at `start_ns`.
    fn issue(&mut self, s: usize, start_ns: u64) {
        let cfg = self.cfg;
        let session = &mut self.sessions[s];
        let kind = session.gen.next_op(&cfg.workload, &mut self.keys);
        let nservers = session.conns.len();
        self.key_servers.clear();
        if let Some(k) = self.ketama.filter(|_| nservers > 1) {
            for &key in &self.keys {
                let len = write_key(key, &cfg.workload.key_size, &mut self.keybuf);
                self.key_servers.push(k.server_of(&self.keybuf[..len]));
            }
        } else {
            self.key_servers.resize(self.keys.len(), 0);
        }
        let slot = Slot {
            start_ns,
            parts_left: 0,
            kind,
            nkeys: self.keys.len() as u32,
            hits: 0,
            corrupt: 0,
            failed: false,
            timed_out: false,
            lost: false,
        };
        let slot_id = match session.free.pop() {
            Some(i) => {
                session.slots[i as usize] = slot;
                i
            }
            None => {
                session.slots.push(slot);
                (session.slots.len() - 1) as u32
            }
        };
        session.outstanding += 1;
        self.outstanding += 1;
        self.issued += 1;
        for server in 0..nservers {
            let nkeys = self.key_servers.iter().filter(|&&k| k == server).count() as u32;
            if nkeys == 0 {
                continue;
            }
            self.sessions[s].slots[slot_id as usize].parts_left += 1;
            let ci = self.sessions[s].conns[server];
            let down = self.conns[ci].down.is_some();
            if !down {
                self.compose_part(s, ci, server, kind);
            }
            let request_id = self.send_udp(ci, start_ns);
            self.conns[ci].inflight.push_back(Part {
                slot: slot_id,
                kind,
                nkeys,
                request_id,
                hits: 0,
                corrupt: 0,
                failed: false,
            });
            if !down {
                self.mark_dirty(ci);
            }
        }
    }

    /// Appends the part of the current request that goes to `server` to
    /// connection `ci`'s output.
    fn compose_part(&mut self, s: usize, ci: usize, server: usize, kind: OpKind) {
        let cfg = self.cfg;
        let p = cfg.protocol;
        let out = &mut self.conns[ci].out;
        match kind {
            OpKind::Get => {
                wire::get_start(p, out);
                for (&key, &srv) in self.keys.iter().zip(&self.key_servers) {
                    if srv == server {
                        let len = write_key(key, &cfg.workload.key_size, &mut self.keybuf);
                        wire::get_key(p, out, &self.keybuf[..len]);
                    }
                }
                wire::get_end(p, out);
            }
            OpKind::Set => {
                let len = write_key(self.keys[0], &cfg.workload.key_size, &mut self.keybuf);
                let rng = self.sessions[s].gen.rng();
                let size = cfg.workload.value_size.sample(rng);
                let value = if cfg.verify {
                    let seed = rng.next_u64();
                    verify::compose_value(&self.keybuf[..len], size, seed, &mut self.valbuf);
                    &self.valbuf[..]
                } else {
                    &self.filler[..size]
                };
                wire::set(p, out, &self.keybuf[..len], value);
            }
        }
    }

    fn mark_dirty(&mut self, ci: usize) {
        if !self.conns[ci].dirty {
            self.conns[ci].dirty = true;
            self.dirty.push(ci);
        }
    }

    /// Writes every connection's pending output: one `send` per connection
    /// per wake-up. A short write keeps the rest for the next writable event.
    fn flush_dirty(&mut self) -> anyhow::Result<()> {
        while let Some(ci) = self.dirty.pop() {
            let server = self.conns[ci].server;
            let conn = &mut self.conns[ci];
            conn.dirty = false;
            let (stream, written) = match &mut conn.link {
                LinkState::Tcp {
                    stream, written, ..
                } => (stream, written),
                LinkState::Udp { socket, outbox, .. } => {
                    // A full socket buffer drops what does not fit, as the
                    // network would; those requests time out and count as
                    // lost.
                    outbox.flush(socket.as_raw_fd(), Duration::ZERO);
                    continue;
                }
            };
            if let Err(e) = stream.write_from(&mut conn.out, written) {
                if self.cfg.keep_going {
                    let now = self.now_ns();
                    self.lose(ci, now);
                    continue;
                }
                return Err(self.conn_error(server, e));
            }
        }
        Ok(())
    }

    fn conn_error(&self, server: usize, e: io::Error) -> anyhow::Error {
        self.shared.abort.store(true, Ordering::Relaxed);
        let s = &self.cfg.servers[server];
        if matches!(
            e.kind(),
            io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe
        ) {
            // A server that closes with requests still unread resets the
            // connection instead of ending it: the same event for the user.
            return anyhow!(
                "server {} ({}) closed the connection mid-run ({e})",
                s.name,
                s.addr
            );
        }
        anyhow!("connection to {} ({}) failed mid-run: {e}", s.name, s.addr)
    }

    /// Reads what arrived on connection `ci` and completes the requests it answers.
    fn on_readable(&mut self, ci: usize, now: u64) -> anyhow::Result<()> {
        if matches!(self.conns[ci].link, LinkState::Udp { .. }) {
            return self.on_udp_readable(ci, now);
        }
        let server = self.conns[ci].server;
        let LinkState::Tcp { stream, rx, .. } = &mut self.conns[ci].link else {
            unreachable!("checked above");
        };
        match stream.read_into(rx, &mut self.scratch) {
            Ok(true) => {}
            Ok(false) | Err(_) if self.cfg.keep_going => {
                self.lose(ci, now);
                return Ok(());
            }
            Ok(false) => {
                self.shared.abort.store(true, Ordering::Relaxed);
                let s = &self.cfg.servers[server];
                bail!(
                    "server {} ({}) closed the connection mid-run",
                    s.name,
                    s.addr
                );
            }
            Err(e) => return Err(self.conn_error(server, e)),
        }
        if matches!(&self.conns[ci].link, LinkState::Tcp { stream: Stream::Tls(t), .. } if t.wants_write())
        {
            // The TLS session has something of its own to send.
            self.mark_dirty(ci);
        }
        let cfg = self.cfg;
        let conn = &mut self.conns[ci];
        let LinkState::Tcp { rx, .. } = &mut conn.link else {
            unreachable!("checked above");
        };
        loop {
            let Some(head) = conn.inflight.front().copied() else {
                if rx.pending() > 0 {
                    let s = &cfg.servers[server];
                    bail!("server {} sent a reply to no request", s.name);
                }
                break;
            };
            let outcome = wire::next_outcome(cfg.protocol, rx, head.kind)
                .with_context(|| format!("bad reply from server {}", cfg.servers[server].name))?;
            match outcome {
                None => break,
                Some(Outcome::Hit { key, value }) => {
                    conn.hits += 1;
                    if cfg.verify {
                        let bytes = rx.bytes();
                        if !verify::check_value(&bytes[key.clone()], &bytes[value]) {
                            conn.corrupt += 1;
                            report_corruption(&self.rec.stats, &bytes[key]);
                        }
                    }
                }
                Some(Outcome::Failed) => conn.failed = true,
                Some(Outcome::Done { ok }) => {
                    conn.inflight.pop_front();
                    let (hits, corrupt, failed) = (
                        std::mem::take(&mut conn.hits),
                        std::mem::take(&mut conn.corrupt),
                        std::mem::take(&mut conn.failed),
                    );
                    let end = if ok && !failed { End::Ok } else { End::Failed };
                    let session = &mut self.sessions[conn.session];
                    if self
                        .rec
                        .complete(session, server, head, Answer { end, hits, corrupt }, now)
                    {
                        self.outstanding -= 1;
                        if cfg.load == Load::Closed {
                            // Pushing a session twice is harmless: refill stops at the depth.
                            self.refill.push(conn.session);
                        }
                    }
                }
            }
        }
        if !self.refill.is_empty() && now < self.shared.end_ns {
            self.refill_sessions(now);
        } else {
            self.refill.clear();
        }
        Ok(())
    }

    /// At the end: whatever is still in flight timed out (or, on a lost
    /// connection, failed).
    fn time_out_everything(&mut self) {
        let now = self.now_ns();
        for ci in 0..self.conns.len() {
            let end = if self.conns[ci].down.is_some() {
                End::Lost
            } else {
                End::TimedOut
            };
            while let Some(part) = self.conns[ci].inflight.pop_front() {
                let conn = &self.conns[ci];
                let session = &mut self.sessions[conn.session];
                let _ = self.rec.complete(
                    session,
                    conn.server,
                    part,
                    Answer {
                        end,
                        hits: 0,
                        corrupt: 0,
                    },
                    now,
                );
            }
        }
        self.outstanding = 0;
    }
}

fn report_corruption(stats: &Stats, key: &[u8]) {
    if stats.total.counters.verify_failures < MAX_REPORTED_CORRUPTIONS {
        eprintln!(
            "ferrobench: corrupt value for key {:?}",
            String::from_utf8_lossy(key)
        );
    }
}
