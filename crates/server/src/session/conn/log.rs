//! Request logging at `-vv` (and `-vvv`, the same here): memcached 1.6.18's lines on
//! standard error for each request and its replies (`admin/verbose.rs` formats them).
//!
//! Below level 2 a batch costs one relaxed load of `Shared::verbosity` in
//! [`Conn::process`]. At 2 the batch runs through the same request loop, instantiated
//! with logging on (`process_batch::<true>`): each request is executed as always, and
//! afterwards its line is read from the input and its replies from the output it
//! composed. A `noreply` text request is run as if it wanted its reply, which is
//! logged as `NOREPLY ...` and cut from the output again, so the bytes sent are the
//! same at every level. The batch's lines go to standard error in one write, under
//! its lock, so workers never interleave within a line.
//!
//! Requests over UDP (no descriptor here) are not logged.

use std::io::Write;
use std::sync::atomic::Ordering;

use protocol::meta::MetaCommand;
use protocol::text::{frame_line, parse_request, LineFrame, Request};

use super::{Conn, Mode, PausedGet, State, Status};
use crate::admin::verbose;
use crate::config::Binding;
use crate::ops::Exec;
use crate::proto::stats::text_reply_logged;
use crate::session::ahead::Ahead;

/// The lowest level at which requests are logged (memcached's `settings.verbose > 1`).
pub(super) const LOG_LEVEL: u32 = 2;

/// Whether `exec`'s server logs requests now: one relaxed load.
#[inline(always)]
pub(super) fn enabled(exec: &Exec<'_>) -> bool {
    exec.shared.verbosity.load(Ordering::Relaxed) >= LOG_LEVEL
}

/// What a connection looked like before one step of the request loop.
#[derive(Clone, Copy)]
pub(super) struct Mark {
    rpos: usize,
    wlen: usize,
    state: State,
    mode: Mode,
    /// A multi-get was paused (its line is already logged).
    resumed: bool,
    /// A `lru_crawler metadump` was running (its items are not logged).
    dumping: bool,
    /// The level was still 2 (a `verbosity` command may lower it within the batch).
    on: bool,
}

/// A text request run with its reply wanted: `noreply` cleared where the logger
/// reads it back from the output ([`quiet`]).
pub(super) fn loud(mut request: Request<'_>) -> Request<'_> {
    if let Some(noreply) = noreply_of(&mut request) {
        *noreply = false;
    }
    request
}

/// Whether [`loud`] cleared this request's `noreply`: its reply is logged, not sent.
fn quiet(request: &Request<'_>) -> bool {
    noreply_of(&mut request.clone()).is_some_and(|noreply| *noreply)
}

/// The `noreply` of a request whose reply [`loud`] brings back for the log.
fn noreply_of<'r>(request: &'r mut Request<'_>) -> Option<&'r mut bool> {
    match request {
        Request::Store { noreply, .. }
        | Request::Delete { noreply, .. }
        | Request::Arith { noreply, .. }
        | Request::Touch { noreply, .. }
        | Request::FlushAll { noreply, .. }
        | Request::Verbosity { noreply, .. }
        | Request::MemLimit { noreply, .. }
        | Request::Tune { noreply, .. }
        | Request::Invalid { noreply, .. } => Some(noreply),
        _ => None,
    }
}

impl Conn {
    /// [`Conn::process`] with logging on: the request loop, then one write of its lines.
    #[cold]
    #[inline(never)]
    pub(super) fn process_logged(&mut self, exec: &Exec<'_>, ahead: &mut Ahead) -> Status {
        let mut log = Vec::new();
        let status = self.process_batch::<true>(exec, ahead, Some(&mut log));
        if !log.is_empty() {
            // One write under the lock: lines of other workers come before or after.
            let _ = std::io::stderr().lock().write_all(&log);
        }
        status
    }

    /// After a `verbosity` command run in a batch without logging (`at`: where its
    /// reply starts): if it raised the level to 2, its reply is the first line logged.
    #[cold]
    #[inline(never)]
    pub(super) fn log_raised(&self, exec: &Exec<'_>, at: usize, noreply: bool) {
        if self.fd < 0 || !enabled(exec) {
            return;
        }
        let reply = if noreply {
            b"OK\r\n".as_slice()
        } else {
            &self.wbuf[at..]
        };
        let mut log = Vec::new();
        verbose::reply_lines(&mut log, self.fd, reply, noreply);
        let _ = std::io::stderr().lock().write_all(&log);
    }

    pub(super) fn mark(&self, exec: &Exec<'_>) -> Mark {
        Mark {
            rpos: self.rpos,
            wlen: self.wbuf.len(),
            state: self.state,
            mode: self.mode,
            resumed: self.paused_get.is_some(),
            dumping: self
                .paused_get
                .is_some_and(|p| p.end == PausedGet::DUMP.end),
            on: self.fd >= 0 && enabled(exec),
        }
    }

    /// Log what the step since `mark` did, if anything.
    #[cold]
    #[inline(never)]
    ///
    /// `ran`: what the step returned. A step that returned false ran a request only if
    /// it closes the connection; otherwise the input may have moved (`wait_for`).
    pub(super) fn log_step(&mut self, exec: &Exec<'_>, mark: Mark, ran: bool, log: &mut Vec<u8>) {
        if self.fd < 0 {
            return;
        }
        let kept = log.len();
        self.log_lines(exec, mark, ran || self.state != mark.state, log);
        if !enabled(exec) {
            // `verbosity` lowered the level: memcached printed what came before the
            // change (the request), not the reply; nothing at all once it is low.
            let mut lines = Vec::new();
            if mark.on {
                for line in log[kept..].split_inclusive(|&b| b == b'\n') {
                    if !line.starts_with(b">") {
                        lines.extend_from_slice(line);
                    }
                }
            }
            log.truncate(kept);
            log.extend_from_slice(&lines);
        }
    }

    fn log_lines(&mut self, exec: &Exec<'_>, mark: Mark, ran: bool, log: &mut Vec<u8>) {
        let fd = self.fd;
        if mark.mode == Mode::Undecided
            && self.mode != Mode::Undecided
            && exec.shared.settings.binding == Binding::Auto
        {
            let name = if self.mode == Mode::Binary {
                "binary"
            } else {
                "ascii"
            };
            verbose::protocol(log, fd, name);
        }
        if !ran || mark.dumping || mark.rpos > self.rlen {
            return;
        }
        // The protocol the request was read in (a `-Y` login turns a connection to text).
        let mode = if mark.mode == Mode::Undecided {
            self.mode
        } else {
            mark.mode
        };
        match mode {
            Mode::Text => self.log_text(exec, mark, log),
            Mode::Binary => self.log_binary(exec, mark, log),
            Mode::Undecided | Mode::Auth => {}
        }
    }

    fn log_text(&mut self, exec: &Exec<'_>, mark: Mark, log: &mut Vec<u8>) {
        let fd = self.fd;
        let input = &self.rbuf[mark.rpos..self.rlen];
        let LineFrame::Line { end, .. } = frame_line(input) else {
            return;
        };
        let line = &input[..end];
        if !mark.resumed {
            let shown = line.strip_suffix(b"\r").unwrap_or(line);
            verbose::request_line(log, fd, shown);
        }
        // A multi-get's error may have dropped replies composed before this request.
        let from = mark.wlen.min(self.wbuf.len());
        let reply = &self.wbuf[from..];
        let request = parse_request(line);
        match &request {
            Request::Get { .. }
                if self.paused_get.is_none() && !self.wbuf.ends_with(b"END\r\n") =>
            {
                // A key over 250 bytes: the replies not yet flushed are dropped (perhaps
                // from before this request) and the error follows. memcached prints the
                // hits before that key too; they are gone from the output here.
                let start = self.wbuf[..self.wbuf.len().saturating_sub(1)]
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map_or(0, |i| i + 1);
                verbose::get_reply(log, fd, &self.wbuf[start..], usize::MAX);
            }
            Request::Get { .. } => verbose::get_reply(log, fd, reply, exec.sink.splice_min),
            Request::Meta(m) => {
                let miss = m.command == MetaCommand::Debug && reply == b"EN\r\n";
                if miss || verbose::is_error(reply) {
                    verbose::reply_lines(log, fd, reply, false);
                }
            }
            Request::Stats(args) if text_reply_logged(args) => {
                verbose::reply_lines(log, fd, reply, false);
            }
            Request::Stats(_) => {}
            Request::MetaNoop => verbose::reply_lines(log, fd, reply, false),
            request if quiet(request) => {
                verbose::reply_lines(log, fd, reply, true);
                // Not for the client: the request said `noreply` (`loud`).
                self.wbuf.truncate(from);
                exec.drop_output_after(from);
                self.flush_mark = self.flush_mark.min(from);
            }
            _ => verbose::reply_lines(log, fd, reply, false),
        }
    }

    fn log_binary(&self, exec: &Exec<'_>, mark: Mark, log: &mut Vec<u8>) {
        let fd = self.fd;
        let packet = &self.rbuf[mark.rpos..self.rlen];
        let Some(header) = packet.get(..protocol::binary::HEADER_LEN) else {
            return;
        };
        verbose::binary_request_header(log, fd, header);
        // A malformed packet is answered and closed before its command is looked at.
        let refused = matches!(self.state, State::CloseAfterWrite | State::Closed);
        if !refused {
            verbose::binary_command(log, fd, packet);
        }
        let from = mark.wlen.min(self.wbuf.len());
        verbose::binary_responses(log, fd, &self.wbuf[from..], exec.sink.splice_min);
    }
}
