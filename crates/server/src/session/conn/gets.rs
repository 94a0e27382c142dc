//! What the request loop (`mod.rs`) hands off about retrievals and timing: running a
//! request parsed ahead, ending, pausing and resuming a multi-get, and each request's
//! latency class (`stats/latency.rs`).

use protocol::text::{GetCommand, Keys, Request, StoreCommand};

use super::{Conn, PausedGet, OUTPUT_HIGH_WATER_BYTES};
use crate::ops::Exec;
use crate::proto::text::StoreRequest;
use crate::session::ahead::{Ahead, Kind};
use crate::stats::latency::Command;

impl Conn {
    /// Run a request parsed ahead (`ahead.rs`); it starts at `rpos`. Inlined by
    /// force: with a set's store path inlined in it, LLVM made it a call of its own,
    /// paid by every pipelined request.
    ///
    /// False, having run nothing, when the get found its value on flash: the request
    /// then takes the general path, which pauses it until the value is read.
    #[inline(always)]
    pub(super) fn run_ahead(&mut self, exec: &Exec<'_>, ahead: &Ahead, i: usize) -> bool {
        let item = ahead.item(i);
        let at = self.rpos;
        let key_at = at + item.key_at as usize;
        let key = &self.rbuf[key_at..key_at + item.key_len as usize];
        let hashed = (item.hash, item.peeked);
        match item.kind {
            Kind::Get(command) => {
                let (out, mark) = (&mut self.wbuf, &mut self.flush_mark);
                // Queued only when `get_one` takes it: a key short enough, no null
                // store, no touch; it gives it back when the value is on flash, and
                // refuses it to run its observed copy when an observer of reads is on.
                let done = exec.get_one(command, key, Some(hashed), out, mark)
                    || (exec.observing_reads() && exec.get_one_observed(command, key, out, mark));
                if !done {
                    return false;
                }
                exec.timed(get_class(command, false));
            }
            Kind::Set { flags, exptime } => {
                let data = &self.rbuf[at + item.data_at as usize..at + item.total as usize];
                let request = StoreRequest {
                    command: StoreCommand::Set,
                    key,
                    flags,
                    exptime,
                    cas: 0,
                    noreply: false,
                    data,
                    hashed: Some(hashed),
                };
                exec.execute_store_inlined(request, &mut self.wbuf);
                exec.timed(Command::Set);
            }
        }
        self.rpos += item.total as usize;
        true
    }

    /// Resume what `paused` left at `rpos`: the connection's `lru_crawler metadump`, or
    /// a multi-get (paused on its output or its flash reads).
    #[inline(always)]
    pub(super) fn resume(&mut self, exec: &Exec<'_>, p: PausedGet) -> bool {
        if p.end == PausedGet::DUMP.end {
            self.continue_dump(exec);
            return true;
        }
        let line = &self.rbuf[self.rpos..self.rpos + p.end];
        let keys = Keys::resume(line, p.key_pos);
        let pause_at = self.wpos + OUTPUT_HIGH_WATER_BYTES;
        let paused = exec.get(
            p.command,
            p.exptime,
            keys,
            &mut self.wbuf,
            &mut self.flush_mark,
            pause_at,
        );
        let flash = exec.flash_deferred();
        self.after_get(paused, flash, p.command, p.exptime, p.end, p.next)
    }

    /// Finish or pause a retrieval command whose line is at `rpos`: `paused`
    /// is where its next key starts when the output reached the high-water
    /// mark ([`Exec::get`]).
    /// `flash`: the pause waits for flash reads, not for the output to drain.
    pub(super) fn after_get(
        &mut self,
        paused: Option<usize>,
        flash: bool,
        command: GetCommand,
        exptime: i32,
        end: usize,
        next: usize,
    ) -> bool {
        match paused {
            None => self.rpos += next,
            Some(key_pos) => {
                self.flash_wait = flash;
                // `process` sees the blocked output on its next turn and stops
                // until the socket drains; the line stays in the input.
                self.paused_get = Some(PausedGet {
                    command,
                    exptime,
                    end,
                    next,
                    key_pos,
                });
            }
        }
        true
    }
}

/// The latency class of a retrieval command (`stats/latency.rs`).
#[inline(always)]
pub(super) fn get_class(command: GetCommand, multi: bool) -> Command {
    match command {
        GetCommand::Gat | GetCommand::Gats => Command::Touch,
        GetCommand::Get | GetCommand::Gets if multi => Command::MultiGet,
        GetCommand::Get | GetCommand::Gets => Command::Get,
    }
}

/// The latency class of a text request off the general path.
pub(super) fn class_of(request: &Request<'_>) -> Command {
    match request {
        Request::Get { command, keys, .. } => {
            let multi = keys.single_key().is_none() && {
                let mut rest = keys.clone();
                rest.next().is_some() && rest.has_more()
            };
            get_class(*command, multi)
        }
        Request::Store { .. } => Command::Set,
        Request::Meta(_) | Request::MetaNoop => Command::Meta,
        Request::Delete { .. } => Command::Delete,
        Request::Arith { .. } => Command::Incr,
        Request::Touch { .. } => Command::Touch,
        _ => Command::Other,
    }
}
