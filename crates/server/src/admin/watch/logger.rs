//! The logger thread (memcached's `logger_thread`): drains every thread's queue,
//! formats the records once each, and writes them to the watchers that want them.
//!
//! It never blocks on a watcher: sockets are non-blocking, each watcher has a bounded
//! buffer (`watcher_logbuf_size`), and a line that does not fit after one write
//! attempt is skipped and counted; the next line that fits is preceded by
//! `skipped=N`, as logger.c writes it. Waking is by a timer that backs off from 1 ms
//! to 50 ms while nothing is logged (memcached: up to 1 s), and by `attach`.

use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use socket2::Socket;

use super::{format, Batch, Watch};

const WAKER: Token = Token(usize::MAX);
const MIN_SLEEP: Duration = Duration::from_millis(1);
const MAX_SLEEP: Duration = Duration::from_millis(50);
/// Room memcached keeps for a `skipped=N` line beside each line it buffers.
const SKIP_ROOM: usize = 128;

struct Watcher {
    socket: Socket,
    token: Token,
    streams: u16,
    min_gid: u64,
    /// Output not yet written, from `pos`.
    buf: Vec<u8>,
    pos: usize,
    skipped: u64,
    /// A write found the socket full this round: skip without trying again.
    failed_flush: bool,
    dead: bool,
}

impl Watcher {
    fn used(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Write what is buffered until the socket takes no more; false when the watcher
    /// is gone.
    fn flush(&mut self) -> bool {
        while self.pos < self.buf.len() {
            match (&self.socket).write(&self.buf[self.pos..]) {
                Ok(0) => return false,
                Ok(n) => self.pos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        } else if self.pos > self.buf.len() / 2 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        true
    }

    /// Whatever the watcher sends is read and dropped; false on end of stream.
    fn drain_input(&mut self) -> bool {
        let mut scratch = [0u8; 512];
        loop {
            match (&self.socket).read(&mut scratch) {
                Ok(0) => return false,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
    }
}

/// Start the logger thread (`mc-log`) for `watch`.
pub fn spawn(watch: Arc<Watch>) -> io::Result<std::thread::JoinHandle<()>> {
    let poll = Poll::new()?;
    let waker = Waker::new(poll.registry(), WAKER)?;
    let _ = watch.waker.set(waker);
    std::thread::Builder::new()
        .name("mc-log".into())
        .spawn(move || Logger::new(watch, poll).run())
}

struct Logger {
    watch: Arc<Watch>,
    poll: Poll,
    watchers: Vec<Watcher>,
    next_token: usize,
    spare: Batch,
    line: Vec<u8>,
}

impl Logger {
    fn new(watch: Arc<Watch>, poll: Poll) -> Logger {
        Logger {
            watch,
            poll,
            watchers: Vec::new(),
            next_token: 0,
            spare: Batch::default(),
            line: Vec::new(),
        }
    }

    fn run(mut self) {
        let mut events = Events::with_capacity(64);
        let mut sleep = MIN_SLEEP;
        loop {
            let timeout = (!self.watchers.is_empty()).then_some(sleep);
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() != io::ErrorKind::Interrupted {
                    eprintln!("ferrocache: logger poll failed: {e}");
                    return;
                }
            }
            for event in events.iter() {
                if event.token() == WAKER {
                    continue;
                }
                if let Some(w) = self.watchers.iter_mut().find(|w| w.token == event.token()) {
                    if (event.is_readable() || event.is_read_closed()) && !w.drain_input() {
                        w.dead = true;
                    }
                    if event.is_error() {
                        w.dead = true;
                    }
                }
            }
            self.take_new();
            let found = self.drain_queues();
            for w in &mut self.watchers {
                w.failed_flush = false;
                if !w.dead && !w.flush() {
                    w.dead = true;
                }
            }
            self.bury();
            sleep = if found {
                (sleep / 2).max(MIN_SLEEP)
            } else {
                (sleep + sleep / 8).min(MAX_SLEEP)
            };
        }
    }

    /// Register the watchers the workers handed over, each starting with `OK`.
    fn take_new(&mut self) {
        let new: Vec<_> =
            std::mem::take(&mut *self.watch.pending.lock().unwrap_or_else(|e| e.into_inner()));
        if new.is_empty() {
            return;
        }
        for n in new {
            let socket = Socket::from(n.socket);
            let token = Token(self.next_token);
            self.next_token = self.next_token.wrapping_add(1) % (usize::MAX / 2);
            let registered = self.poll.registry().register(
                &mut SourceFd(&socket.as_raw_fd()),
                token,
                Interest::READABLE | Interest::WRITABLE,
            );
            let mut w = Watcher {
                socket,
                token,
                streams: n.streams,
                min_gid: n.min_gid,
                buf: b"OK\r\n".to_vec(),
                pos: 0,
                skipped: 0,
                failed_flush: false,
                dead: registered.is_err(),
            };
            // Anything sent after `watch` is read and ignored, as memcached does.
            if !w.drain_input() {
                w.dead = true;
            }
            self.watchers.push(w);
            self.watch.attached.fetch_add(1, Ordering::Relaxed);
        }
        self.update_wanted();
    }

    fn update_wanted(&self) {
        let streams = self
            .watchers
            .iter()
            .filter(|w| !w.dead)
            .fold(0, |a, w| a | w.streams);
        self.watch.set_wanted(streams);
    }

    /// Swap every queue out and write its records; whether any were found.
    fn drain_queues(&mut self) -> bool {
        let queues: Vec<_> = self
            .watch
            .queues
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut found = false;
        for q in queues {
            {
                let mut b = q.batch.lock().unwrap_or_else(|e| e.into_inner());
                if b.records.is_empty() && b.dropped == 0 {
                    continue;
                }
                std::mem::swap(&mut *b, &mut self.spare);
            }
            found = true;
            let batch = std::mem::take(&mut self.spare);
            self.watch
                .worker_written
                .fetch_add(batch.written, Ordering::Relaxed);
            self.watch
                .worker_dropped
                .fetch_add(batch.dropped, Ordering::Relaxed);
            for r in &batch.records {
                self.deliver(r, &batch.keys);
            }
            self.spare = batch;
            self.spare.clear();
        }
        found
    }

    /// Format `r` once and append it to every watcher of its stream that has room.
    fn deliver(&mut self, r: &super::Record, keys: &[u8]) {
        let stream = r.event.stream();
        let cap = self.watch.watcher_buf_bytes;
        let mut formatted = false;
        for w in &mut self.watchers {
            if w.dead || w.streams & stream == 0 || r.gid < w.min_gid {
                continue;
            }
            if !formatted {
                self.line.clear();
                let key = &keys[r.key_at as usize..(r.key_at + r.key_len) as usize];
                format::line(r, key, &mut self.line);
                formatted = true;
            }
            let need = self.line.len() + SKIP_ROOM;
            if !w.failed_flush && w.used() + need > cap {
                if !w.flush() {
                    w.dead = true;
                    continue;
                }
                if w.used() + need > cap {
                    w.failed_flush = true;
                }
            }
            if w.failed_flush {
                w.skipped += 1;
                self.watch.watcher_skipped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if w.skipped > 0 {
                w.buf
                    .extend_from_slice(format!("skipped={}\n", w.skipped).as_bytes());
                w.skipped = 0;
            }
            w.buf.extend_from_slice(&self.line);
            self.watch.watcher_sent.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Drop the watchers that closed or failed: their sockets close, their slots free.
    fn bury(&mut self) {
        if !self.watchers.iter().any(|w| w.dead) {
            return;
        }
        let registry = self.poll.registry();
        let watch = &self.watch;
        self.watchers.retain(|w| {
            if w.dead {
                let _ = registry.deregister(&mut SourceFd(&w.socket.as_raw_fd()));
                watch.attached.fetch_sub(1, Ordering::Relaxed);
                watch.detached();
            }
            !w.dead
        });
        self.update_wanted();
    }
}
