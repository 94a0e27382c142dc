//! The text protocol's step of the request loop (`mod.rs`): the next request framed and
//! parsed, a one-key get straight to its lookup, and the others run, each with its data
//! block when it has one (a storage command, `ms`).

use protocol::fast::{parse_fast_get, parse_fast_store};
use protocol::meta::MetaRequest;
use protocol::text::{frame_line, parse_request, Keys, LineFrame, Request, MAX_GET_LINE_BYTES};

use super::gets::{class_of, get_class};
use super::{log, Conn, State, OUTPUT_HIGH_WATER_BYTES, READ_AHEAD_BYTES};
use crate::ops::{memcached_item_fits, Exec};
use crate::proto::meta;
use crate::proto::text::StoreRequest;
use crate::proto::Flow;
use crate::session::ahead::Ahead;

/// How far a request got.
enum Ran {
    /// It ran, having used this many input bytes; the connection goes on as `Flow` says.
    Done(Flow, usize),
    /// Its value was refused before it was read: the line's `next` bytes are used, and
    /// the data block's `remaining` bytes are swallowed as they arrive.
    Refused { next: usize, remaining: usize },
    /// Its data block has not all arrived: it needs this many bytes from `rpos`.
    Wait(usize),
}

impl Conn {
    /// [`Conn::step`] on a text connection. Inlined into the request loop as `step` is.
    #[inline(always)]
    pub(super) fn step_text<const LOG: bool>(
        &mut self,
        exec: &Exec<'_>,
        ahead: &mut Ahead,
    ) -> bool {
        let input = &self.rbuf[self.rpos..self.rlen];
        // With more input behind a one-key get or a store, the requests after it are
        // parsed ahead and their lookups prefetched (`ahead.rs`); `hashed` is then this
        // one's hash and peek. The null store has no lookups to prefetch.
        let batch = exec.shared.settings.null_store.is_none();
        // The commonest request, a one-key get, goes straight to its lookup, without a
        // `Request` built and matched on the way: built, it is spilled to the stack
        // and read back. `get_one` refuses what it does not take (a key too long), which
        // then runs the general path; with an observer of reads on, its observed copy
        // runs instead, out of line.
        let fast_get = parse_fast_get(input);
        if let Some(g) = fast_get {
            let key = &input[g.key_at..g.key_end];
            let hashed = if batch && g.next < input.len() {
                let item_size_max = exec.shared.settings.memcached_item_limit();
                ahead.fill(exec, input, self.rpos, key, g.next, item_size_max)
            } else {
                None
            };
            let (out, mark) = (&mut self.wbuf, &mut self.flush_mark);
            if exec.get_one(g.command, key, hashed, out, mark)
                || (exec.observing_reads() && exec.get_one_observed(g.command, key, out, mark))
            {
                exec.timed(get_class(g.command, false));
                self.need = 0;
                self.rpos += g.next;
                return true;
            }
        }
        // `parse_fast`, without reading the get a second time.
        let fast = match fast_get {
            Some(g) => Some((
                Request::Get {
                    command: g.command,
                    exptime: 0,
                    keys: Keys::single(&input[..g.end], g.key_at),
                },
                g.end,
                g.next,
            )),
            None => parse_fast_store(input),
        };
        let (request, end, next) = match fast {
            Some(fast) => fast,
            None => match frame_line(input) {
                LineFrame::Line { end, next } => (parse_request(&input[..end]), end, next),
                LineFrame::Incomplete => {
                    // A long unterminated line can only be a multi-get (framing
                    // closes anything else): keep reading up to the line cap.
                    self.need = if input.len() >= READ_AHEAD_BYTES {
                        MAX_GET_LINE_BYTES + 1
                    } else {
                        0
                    };
                    return false;
                }
                LineFrame::Close => {
                    self.state = State::Closed;
                    return false;
                }
            },
        };
        self.need = 0;
        // Logged, a `noreply` request composes its reply for the log (`log.rs`).
        let request = if LOG { log::loud(request) } else { request };
        // (The request itself is not handed to `ahead`: a reference to it kept its
        // fields out of registers, at a 136-byte copy per request.)
        exec.timed(class_of(&request));
        let (out, mark) = (&mut self.wbuf, &mut self.flush_mark);
        let ran = match request {
            Request::Get {
                command,
                exptime,
                keys,
            } => {
                let pause_at = self.wpos + OUTPUT_HIGH_WATER_BYTES;
                let paused = exec.get(command, exptime, keys, out, mark, pause_at);
                let flash = exec.flash_deferred();
                return self.after_get(paused, flash, command, exptime, end, next);
            }
            request @ Request::Store { .. } => {
                run_store(exec, ahead, input, self.rpos, batch, request, next, out)
            }
            Request::Meta(m) => run_meta(exec, m, input, next, out, mark),
            // Raised to 2 in a batch run without logging: memcached prints the reply.
            request @ Request::Verbosity { noreply, .. } if !LOG => {
                let at = out.len();
                let flow = exec.execute(request, out, mark);
                self.log_raised(exec, at, noreply);
                Ran::Done(flow, next)
            }
            request => Ran::Done(exec.execute(request, out, mark), next),
        };
        match ran {
            Ran::Done(flow, used) => {
                self.rpos += used;
                self.follow(flow, used, end)
            }
            Ran::Refused { next, remaining } => {
                self.rpos += next;
                self.state = State::Swallow { remaining };
                true
            }
            Ran::Wait(total) => {
                self.wait_for(total);
                false
            }
        }
    }

    /// Go on as a request's `flow` says, its `used` bytes (its line `end` bytes long)
    /// consumed: whether the loop goes on.
    #[inline(always)]
    fn follow(&mut self, flow: Flow, used: usize, end: usize) -> bool {
        match flow {
            Flow::Continue => true,
            Flow::CloseAfterWrite => {
                self.state = State::CloseAfterWrite;
                false
            }
            Flow::Close => {
                self.state = State::Closed;
                false
            }
            Flow::Watch { streams } => {
                self.state = State::Watch { streams };
                false
            }
            Flow::Dump => {
                self.begin_dump(self.rpos - used, end);
                true
            }
        }
    }
}

/// A storage command whose line is at the start of `input` (at `rpos` in the input
/// buffer), its data block from `next` on: refused before its value is read when the
/// value can never fit, run once the block is all here.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn run_store(
    exec: &Exec<'_>,
    ahead: &mut Ahead,
    input: &[u8],
    rpos: usize,
    batch: bool,
    request: Request<'_>,
    next: usize,
    out: &mut Vec<u8>,
) -> Ran {
    let Request::Store {
        command,
        key,
        flags,
        exptime,
        len,
        cas,
        noreply,
    } = request
    else {
        unreachable!("run_store runs storage commands")
    };
    let item_size_max = exec.shared.settings.memcached_item_limit();
    if !memcached_item_fits(item_size_max, key.len(), flags, len) {
        exec.reject_too_large(command, key, noreply, out);
        return Ran::Refused {
            next,
            remaining: len + 2,
        };
    }
    let total = next + len + 2;
    if input.len() < total {
        return Ran::Wait(total);
    }
    let hashed = if batch && total < input.len() {
        ahead.fill(exec, input, rpos, key, total, item_size_max)
    } else {
        None
    };
    let data = &input[next..total];
    let request = StoreRequest {
        command,
        key,
        flags,
        exptime,
        cas,
        noreply,
        data,
        hashed,
    };
    exec.execute_store(request, out);
    Ran::Done(Flow::Continue, total)
}

/// A meta command whose line is at the start of `input`, with an `ms` data block from
/// `next` on: refused before its value is read when the value can never fit.
#[inline(always)]
fn run_meta(
    exec: &Exec<'_>,
    m: MetaRequest<'_>,
    input: &[u8],
    next: usize,
    out: &mut Vec<u8>,
    flush_mark: &mut usize,
) -> Ran {
    let Some(len) = m.data_len() else {
        return Ran::Done(meta::execute(exec, m, None, out, flush_mark), next);
    };
    // The block and its `\r\n`.
    let total = next + len + 2;
    if !meta::admit_data(exec, &m, out) {
        let remaining = total - next;
        return Ran::Refused { next, remaining };
    }
    match input.get(next..total) {
        Some(data) => Ran::Done(meta::execute(exec, m, Some(data), out, flush_mark), total),
        None => Ran::Wait(total),
    }
}
