//! A sans-I/O connection: bytes in, reply bytes out.
//!
//! The runtime reads whatever the socket has into [`Conn::read_space`], calls
//! [`Conn::process`] once, and writes [`Conn::output`] with one system call.
//! Everything between, framing, parsing, executing every complete pipelined
//! request and composing all replies into one buffer, happens here, with no
//! socket and no allocation once the buffers have grown to the working size.
//!
//! ```text
//!  rbuf: [ consumed | unparsed request bytes | free space to read into ]
//!         0        rpos                     rlen                      cap
//!  wbuf: [ written  | replies not yet written ]
//!         0        wpos                      len
//! ```
//!
//! The request loop is here ([`Conn::process`], `step`); each kind of step has a file:
//! `text.rs` (a text request, with its data block), `gets.rs` (a request parsed ahead, a
//! multi-get paused and resumed, latency classes), `modes.rs` (the binary protocol, a
//! `-Y` login, a running `lru_crawler metadump`, the choice of protocol), `log.rs`
//! (`-vv`). `buffers.rs` and `memory.rs` keep the buffers and their accounting.

pub mod buffers;
mod gets;
mod log;
mod memory;
mod modes;
mod text;

use std::io::{self, IoSlice};

use protocol::fast::parse_fast_get;
use protocol::text::{GetCommand, MAX_KEY_LEN};
use storage::Store;

use crate::ops::dump::Dump;
use crate::ops::Exec;
use crate::reply::splice::{Output, Splices};
use crate::session::ahead::Ahead;
use gets::get_class;

/// Smallest free space offered to a read.
const READ_CHUNK_BYTES: usize = buffers::CHUNK;
/// Stop executing requests while this much output is waiting for the socket,
/// so a client that pipelines without reading cannot grow our memory.
const OUTPUT_HIGH_WATER_BYTES: usize = 1024 * 1024;
/// Input read ahead of execution, unless a request needs more (a large
/// value, a long multi-get line): a client that pipelines without reading its
/// replies holds at most this much plus the output high-water mark.
const READ_AHEAD_BYTES: usize = 256 * 1024;
/// Buffers that grew past this (a big value) are given back when idle.
const IDLE_BUFFER_KEEP_BYTES: usize = buffers::KEEP;

/// Connection states, as memcached's `conn_states` that matter here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Parsing request lines (memcached's `conn_parse_cmd`). A storage
    /// command stays here until its whole data block has arrived.
    ReadLine,
    /// Discarding the data block of a value refused before it was read,
    /// so that the stream stays in sync (memcached's `conn_swallow`).
    Swallow { remaining: usize },
    /// Write what is buffered, then close (`quit`).
    CloseAfterWrite,
    /// Close now; nothing more is written.
    Closed,
    /// `watch` accepted: the backend hands the socket to the logger thread, which
    /// writes `OK` and the log lines from now on (memcached's `conn_watch`).
    Watch { streams: u16 },
}

/// Which protocol a connection speaks, decided by its first byte as
/// memcached's `-B auto` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Undecided,
    Text,
    Binary,
    /// Text, not yet authenticated (`-Y`, `auth.rs`).
    Auth,
}

/// What the runtime should do with the connection after [`Conn::process`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Keep reading (and write any output).
    Open,
    /// Write the output, then close.
    CloseAfterWrite,
    /// Close without writing more.
    Close,
    /// Hand the socket to the logger thread as a watcher of `streams` (a slot is
    /// reserved: `Watch::attach` it or `Watch::release` the slot).
    Watch { streams: u16 },
}

/// One client connection's protocol state and buffers.
pub struct Conn {
    rbuf: Vec<u8>,
    rpos: usize,
    rlen: usize,
    wbuf: Vec<u8>,
    wpos: usize,
    state: State,
    mode: Mode,
    /// Output offset at which memcached would last have flushed.
    flush_mark: usize,
    /// Requests executed in this wake-up, for memcached's `-R` flush points.
    reqs_this_event: u32,
    /// The last `process` stopped because output was backed up.
    stalled: bool,
    /// Binary-protocol state (SASL authentication).
    binary: crate::proto::binary::Session,
    /// Input bytes (from `rpos`) the next request needs before it can run:
    /// its data block, or a long multi-get line; 0 when nothing is known.
    need: usize,
    /// Where the last reply of a not-yet-authenticated connection starts in `wbuf`, if
    /// it was made in this `process` call (`-Y`; see `step_auth`).
    auth_reply_at: Option<usize>,
    /// A multi-get paused because its output reached the high-water mark.
    paused_get: Option<PausedGet>,
    /// The `lru_crawler metadump` in progress (boxed: rare). While it runs,
    /// `paused_get` holds [`PausedGet::DUMP`], so that the requests after it wait and
    /// `step` resumes it where it resumes a paused multi-get, at no cost to others.
    dump: Option<Box<Dump>>,
    /// The socket's descriptor, for `stats conns` (-1 where there is none: UDP).
    fd: i32,
    /// Buffer bytes this connection is counted for in its worker's totals
    /// (`buffers.rs`): its read buffer's capacity, and its write buffer's with the
    /// io_uring send buffer's, as last seen at the end of a turn, or when taken or
    /// given back.
    acc_read: usize,
    acc_write: usize,
    /// When the input not yet run arrived (`stats/latency.rs`'s clock; 0: none is
    /// waiting), kept while a request is only partly read.
    arrived: u64,
    /// `paused_get` waits for flash reads (`reply/flash.rs`), which the backend runs
    /// off the worker; it clears this when they are done ([`Conn::flash_done`]).
    flash_wait: bool,
}

/// Where to resume a multi-get whose line is still at the start of the input.
#[derive(Clone, Copy, Debug)]
struct PausedGet {
    command: GetCommand,
    exptime: i32,
    /// Line length and the start of the next request, relative to `rpos`.
    end: usize,
    next: usize,
    /// Offset in the line of the next key.
    key_pos: usize,
}

impl PausedGet {
    /// Not a multi-get: the connection's `lru_crawler metadump` is running.
    const DUMP: PausedGet = PausedGet {
        command: GetCommand::Get,
        exptime: 0,
        end: usize::MAX,
        next: 0,
        key_pos: 0,
    };
}

impl Default for Conn {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Conn {
    /// The buffers go back to the worker's cache; a backend's send buffer counted
    /// with them is freed by its owner.
    fn drop(&mut self) {
        self.settle(0);
        buffers::give_read(std::mem::take(&mut self.rbuf));
        buffers::give_write(std::mem::take(&mut self.wbuf));
    }
}

impl Conn {
    /// The socket's descriptor, for `stats conns`.
    pub fn set_fd(&mut self, fd: i32) {
        self.fd = fd;
    }

    #[must_use]
    pub fn new() -> Self {
        Conn {
            // Taken when the first bytes are to be read (`buffers.rs`).
            rbuf: Vec::new(),
            rpos: 0,
            rlen: 0,
            wbuf: Vec::new(),
            wpos: 0,
            state: State::ReadLine,
            mode: Mode::Undecided,
            flush_mark: 0,
            reqs_this_event: 0,
            stalled: false,
            binary: crate::proto::binary::Session::default(),
            need: 0,
            auth_reply_at: None,
            paused_get: None,
            dump: None,
            fd: -1,
            acc_read: 0,
            acc_write: 0,
            arrived: 0,
            flash_wait: false,
        }
    }

    /// Forget all input, output and state (a UDP datagram is processed on a
    /// fresh connection each time).
    pub fn reset(&mut self) {
        self.rpos = 0;
        self.rlen = 0;
        self.wbuf.clear();
        self.wpos = 0;
        self.state = State::ReadLine;
        self.mode = Mode::Undecided;
        self.flush_mark = 0;
        self.binary = crate::proto::binary::Session::default();
        self.need = 0;
        self.paused_get = None;
        self.dump = None;
        self.arrived = 0;
        self.flash_wait = false;
    }

    /// Free space to read socket bytes into; call [`Conn::filled`] after.
    ///
    /// Inlined, with the rare work (a first read, a buffer to compact or grow) out of
    /// line: as one function it was no longer inlined, a call on every read.
    #[inline(always)]
    pub fn read_space(&mut self) -> &mut [u8] {
        if self.rpos == self.rlen {
            self.rpos = 0;
            self.rlen = 0;
        }
        if self.rbuf.len() - self.rlen < READ_CHUNK_BYTES {
            self.make_read_room();
        }
        &mut self.rbuf[self.rlen..]
    }

    /// Record that `n` bytes were read into [`Conn::read_space`].
    #[inline]
    pub fn filled(&mut self, n: usize) {
        self.rlen += n;
        debug_assert!(self.rlen <= self.rbuf.len());
    }

    /// Whether unparsed input is waiting (for example after backpressure).
    #[must_use]
    #[inline]
    pub fn has_input(&self) -> bool {
        self.rpos < self.rlen
    }

    /// Whether a get is paused waiting for flash reads.
    #[must_use]
    #[inline]
    pub fn flash_waiting(&self) -> bool {
        self.flash_wait
    }

    /// The flash reads a paused get waited for are done: the next `process` resumes it.
    pub fn flash_done(&mut self) {
        self.flash_wait = false;
    }

    /// Whether a multi-get is paused waiting for its output to drain.
    #[must_use]
    #[inline]
    pub fn has_paused_get(&self) -> bool {
        self.paused_get.is_some()
    }

    /// How much unparsed input to hold before reading stops until some of it
    /// is executed.
    #[must_use]
    #[inline]
    pub fn read_limit(&self) -> usize {
        self.need.max(READ_AHEAD_BYTES)
    }

    /// Unparsed input bytes held.
    #[must_use]
    #[inline]
    pub fn buffered(&self) -> usize {
        self.rlen - self.rpos
    }

    /// Whether processing stopped because too much output is queued.
    #[must_use]
    #[inline]
    pub fn output_blocked(&self) -> bool {
        self.wbuf.len() - self.wpos >= OUTPUT_HIGH_WATER_BYTES
    }

    /// Whether the last [`Conn::process`] left complete requests unexecuted
    /// because of backed-up output, and the output has since drained.
    #[must_use]
    #[inline]
    pub fn stalled_on_output(&self) -> bool {
        self.stalled && !self.output_blocked()
    }

    /// Replies waiting to be written.
    #[must_use]
    #[inline]
    pub fn output(&self) -> &[u8] {
        &self.wbuf[self.wpos..]
    }

    /// A `watch` the backend cannot honour (over TLS): the connection stays an
    /// ordinary one and answers `line` instead.
    pub fn refuse_watch(&mut self, line: &[u8]) {
        if matches!(self.state, State::Watch { .. }) {
            self.state = State::ReadLine;
            self.wbuf.extend_from_slice(line);
        }
    }

    /// Record that `n` bytes of [`Conn::output`] were written.
    #[inline]
    pub fn written(&mut self, n: usize) {
        self.wpos += n;
        if self.wpos == self.wbuf.len() {
            self.wbuf.clear();
            self.wpos = 0;
            self.flush_mark = 0;
        }
    }

    /// Move every reply waiting into `out` (cleared first), as
    /// [`Conn::written`] of all of [`Conn::output`] would record. When none of
    /// it was written yet the two buffers are swapped, so no byte is copied:
    /// the io_uring backend hands `out` to the kernel and gives the previous
    /// send buffer to the connection to compose into.
    pub fn take_output(&mut self, out: &mut Vec<u8>) {
        if out.capacity() == 0 {
            // Given back while idle: the connection composes into a cached one.
            *out = buffers::take_write();
            self.acc_write += out.capacity();
        }
        out.clear();
        if self.wpos == 0 {
            std::mem::swap(&mut self.wbuf, out);
        } else {
            out.extend_from_slice(&self.wbuf[self.wpos..]);
            self.wbuf.clear();
        }
        self.wpos = 0;
        self.flush_mark = 0;
    }

    /// Send the waiting replies with the values `splices` holds for them in place
    /// (see `splice.rs`), until all is sent or the socket is full; then copy what
    /// the socket did not take into the output buffer and give every pin back.
    /// Returns the bytes sent.
    pub fn flush_spliced(
        &mut self,
        splices: &mut Splices,
        store: &Store,
        send: impl FnMut(&[IoSlice<'_>]) -> io::Result<usize>,
    ) -> io::Result<usize> {
        let sent = splices.send(self.output_parts(), store, send);
        splices.materialize(self.output_parts(), store);
        sent
    }

    /// Copy the spliced values into the output buffer, sending nothing, and give
    /// their pins back.
    pub fn materialize(&mut self, splices: &mut Splices, store: &Store) {
        splices.materialize(self.output_parts(), store);
    }

    fn output_parts(&mut self) -> Output<'_> {
        Output {
            buf: &mut self.wbuf,
            pos: &mut self.wpos,
            flush_mark: &mut self.flush_mark,
        }
    }

    /// Execute every complete request in the input; returns what to do next. The one
    /// call every backend makes after a read (UDP included), and what tests and the
    /// `conn_chunks` fuzz target drive.
    ///
    /// The commonest input of all, exactly one one-key `get` or `gets` on a text
    /// connection with nothing pending (as a client that waits for each reply sends it),
    /// goes around the request loop: inlined here, it skips the loop's set-up (its
    /// invariants spilled for its many paths), the state and mode dispatch and the queue
    /// of requests parsed ahead, which a lone get never uses. Over UDP every request
    /// ends a message, which only the loop records.
    #[inline]
    ///
    /// `ahead` is the worker's queue of pipelined requests parsed ahead (`ahead.rs`),
    /// lent to each call: it holds nothing from one call to the next, so the worker
    /// keeps one for all its connections rather than each connection its own 656
    /// bytes, two thirds of an idle connection's memory when it had one.
    ///
    /// With latency recording on, the requests run are closed as one batch that arrived
    /// when the worker woke, or when the first byte of a request left partly read
    /// arrived (`stats/latency.rs`).
    pub fn process(&mut self, exec: &Exec<'_>, ahead: &mut Ahead) -> Status {
        let status = self.process_requests(exec, ahead);
        if let Some(r) = exec.latency {
            let arrived = if self.arrived != 0 {
                self.arrived
            } else {
                r.wake_time()
            };
            r.close(arrived);
            self.arrived = if self.has_input() { arrived } else { 0 };
        }
        status
    }

    #[inline(always)]
    fn process_requests(&mut self, exec: &Exec<'_>, ahead: &mut Ahead) -> Status {
        if log::enabled(exec) && self.fd >= 0 {
            return self.process_logged(exec, ahead);
        }
        if !exec.sink.is_datagram() {
            if let Some(status) = self.process_single_get(exec) {
                return status;
            }
        }
        self.process_batch::<false>(exec, ahead, None)
    }

    /// [`Conn::process`] of a lone one-key get: runs it and returns `Status::Open`, or
    /// returns `None` having done nothing, for the request loop to take the input.
    #[inline(always)]
    fn process_single_get(&mut self, exec: &Exec<'_>) -> Option<Status> {
        if self.state != State::ReadLine
            || self.mode != Mode::Text
            || self.paused_get.is_some()
            || self.flash_wait
            || self.output_blocked()
        {
            return None;
        }
        let input = &self.rbuf[self.rpos..self.rlen];
        // Longer than any one-key `gets` line: a multi-get or a batch, not worth a scan.
        if input.len() > "gets \r\n".len() + MAX_KEY_LEN {
            return None;
        }
        let g = parse_fast_get(input).filter(|g| g.next == input.len())?;
        let key = &input[g.key_at..g.key_end];
        if !exec.get_one(g.command, key, None, &mut self.wbuf, &mut self.flush_mark) {
            return None;
        }
        exec.timed(get_class(g.command, false));
        // What `process` leaves after one request that consumed all input.
        self.rpos += g.next;
        self.need = 0;
        self.stalled = false;
        self.flush_mark = self.wbuf.len();
        Some(Status::Open)
    }

    /// [`Conn::process`]'s request loop: every complete request in the input. With
    /// `LOG` each request's lines go to `log` as well (`log.rs`).
    #[inline(never)]
    fn process_batch<const LOG: bool>(
        &mut self,
        exec: &Exec<'_>,
        ahead: &mut Ahead,
        mut log: Option<&mut Vec<u8>>,
    ) -> Status {
        self.reqs_this_event = 0;
        self.stalled = false;
        ahead.clear();
        self.auth_reply_at = None;
        let reqs_per_event = exec.shared.settings.reqs_per_event;
        loop {
            match self.state {
                State::Closed => return Status::Close,
                State::CloseAfterWrite => return Status::CloseAfterWrite,
                State::Watch { streams } => return Status::Watch { streams },
                State::Swallow { remaining } => {
                    let n = remaining.min(self.rlen - self.rpos);
                    self.rpos += n;
                    if n < remaining {
                        self.state = State::Swallow {
                            remaining: remaining - n,
                        };
                        return Status::Open;
                    }
                    self.state = State::ReadLine;
                }
                State::ReadLine => {
                    if self.flash_wait {
                        // A get waits for its flash reads: nothing after it runs, so
                        // that replies stay in request order.
                        return Status::Open;
                    }
                    if self.output_blocked() {
                        self.stalled = true;
                        return Status::Open;
                    }
                    let mark = LOG.then(|| self.mark(exec));
                    let ran = self.step::<LOG>(exec, ahead);
                    if let (Some(mark), Some(log)) = (mark, log.as_deref_mut()) {
                        self.log_step(exec, mark, ran, log);
                    }
                    if !ran {
                        // Out of complete requests: memcached flushes here.
                        self.flush_mark = self.wbuf.len();
                        return match self.state {
                            State::Closed => Status::Close,
                            State::CloseAfterWrite => Status::CloseAfterWrite,
                            State::Watch { streams } => Status::Watch { streams },
                            _ => Status::Open,
                        };
                    }
                    exec.sink.end_message(self.wbuf.len(), false);
                    self.reqs_this_event += 1;
                    if self.reqs_this_event > reqs_per_event {
                        // memcached yields (and flushes) after -R requests.
                        self.reqs_this_event = 0;
                        self.flush_mark = self.wbuf.len();
                    }
                    if self.rpos == self.rlen
                        && self.state == State::ReadLine
                        && self.paused_get.is_none()
                        && !self.output_blocked()
                    {
                        // All input consumed: what the next turn would find
                        // (no request, so flush), without taking it.
                        self.flush_mark = self.wbuf.len();
                        return Status::Open;
                    }
                }
            }
        }
    }

    /// Execute one request if a complete one is buffered. Returns false when
    /// more input is needed (or the connection must close).
    // Inlined into the request loop, its only caller, as LLVM chose to before it grew:
    // a call would spill the loop's state on every request.
    #[inline(always)]
    fn step<const LOG: bool>(&mut self, exec: &Exec<'_>, ahead: &mut Ahead) -> bool {
        if let Some(p) = self.paused_get.take() {
            return self.resume(exec, p);
        }
        if let Some(i) = ahead.take(self.rpos) {
            if self.run_ahead(exec, ahead, i) {
                return true;
            }
        }
        let Some(&first) = self.rbuf[self.rpos..self.rlen].first() else {
            return false;
        };
        if self.mode == Mode::Undecided {
            self.decide_mode(exec, first);
        }
        if self.mode != Mode::Text {
            return if self.mode == Mode::Binary {
                self.step_binary(exec)
            } else {
                self.step_auth(exec)
            };
        }
        self.step_text::<LOG>(exec, ahead)
    }

    /// Make room for a request of `total` bytes starting at `rpos`, so its
    /// data block is read in as few system calls as possible.
    fn wait_for(&mut self, total: usize) {
        self.need = total;
        if self.rbuf.len() < self.rpos + total {
            self.rbuf.copy_within(self.rpos..self.rlen, 0);
            self.rlen -= self.rpos;
            self.rpos = 0;
            if self.rbuf.len() < total {
                self.rbuf.resize(total, 0);
            }
        }
    }
}
