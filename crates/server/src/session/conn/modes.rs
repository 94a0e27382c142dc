//! The connection's less common modes: the binary protocol, a text connection that has
//! not authenticated yet (`-Y`), and a running `lru_crawler metadump`. Each is a step of
//! the request loop in `mod.rs`, kept apart so that the text path reads on its own; so
//! is the choice of protocol by a connection's first byte.

use protocol::binary::REQUEST_MAGIC;
use protocol::text::{parse_request, Request};

use super::{Conn, Mode, PausedGet, State, OUTPUT_HIGH_WATER_BYTES};
use crate::admin::auth::Step as AuthStep;
use crate::config::Binding;
use crate::ops::dump::Dump;
use crate::ops::Exec;
use crate::proto::binary::BinaryStep;
use crate::stats::latency::Command;

impl Conn {
    /// The protocol of a connection whose first byte is `first`, as memcached's `-B`
    /// decides it; a text connection under `-Y` starts unauthenticated.
    #[cold]
    pub(super) fn decide_mode(&mut self, exec: &Exec<'_>, first: u8) {
        self.mode = match exec.shared.settings.binding {
            Binding::Auto if first == REQUEST_MAGIC => Mode::Binary,
            Binding::Auto | Binding::Ascii => Mode::Text,
            Binding::Binary => Mode::Binary,
        };
        if self.mode == Mode::Text && exec.shared.ascii_auth.is_some() {
            self.mode = Mode::Auth;
        }
    }

    /// List items until the output reaches its high-water mark (`process` then waits
    /// for it to drain) or the dump is done.
    #[cold]
    #[inline(never)]
    pub(super) fn continue_dump(&mut self, exec: &Exec<'_>) {
        let pause_at = self.wpos + OUTPUT_HIGH_WATER_BYTES;
        let more = self
            .dump
            .as_mut()
            .is_some_and(|d| d.run(exec, &mut self.wbuf, pause_at));
        if more {
            self.paused_get = Some(PausedGet::DUMP);
        } else {
            self.dump = None;
        }
        self.flush_mark = self.wbuf.len();
    }

    /// Start the admitted `lru_crawler metadump` whose line is `rbuf[at..at + end]`;
    /// `step` runs it (see [`Conn::dump`]).
    #[cold]
    #[inline(never)]
    pub(super) fn begin_dump(&mut self, at: usize, end: usize) {
        if let Request::MetaDump(Some(classes)) = parse_request(&self.rbuf[at..at + end]) {
            self.dump = Some(Box::new(Dump::new(classes)));
            self.paused_get = Some(PausedGet::DUMP);
        }
    }

    /// One authentication attempt (or refused line) of a connection that has not
    /// authenticated yet (`-Y`), if a whole one is buffered.
    #[cold]
    pub(super) fn step_auth(&mut self, exec: &Exec<'_>) -> bool {
        let Some(file) = exec.shared.ascii_auth.as_ref() else {
            self.mode = Mode::Text;
            return true;
        };
        match crate::admin::auth::step(&self.rbuf[self.rpos..self.rlen], file) {
            AuthStep::Incomplete { need } => {
                if need > 0 {
                    self.wait_for(need);
                }
                false
            }
            AuthStep::Close => {
                self.state = State::Closed;
                false
            }
            AuthStep::Done {
                used,
                reply,
                checked,
                ok,
            } => {
                self.need = 0;
                self.rpos += used;
                // memcached writes every reply of an unauthenticated connection into
                // one response object until it is sent, so of the replies to requests
                // read together only the last is sent. Copied; see docs/protocol.md.
                if let Some(at) = self.auth_reply_at.filter(|&at| at >= self.wpos) {
                    self.wbuf.truncate(at);
                }
                self.auth_reply_at = Some(self.wbuf.len());
                self.wbuf.extend_from_slice(reply);
                exec.timed(Command::Other);
                if checked {
                    exec.count_auth(ok);
                }
                if ok {
                    self.mode = Mode::Text;
                }
                true
            }
        }
    }

    /// One binary-protocol request, if a whole one is buffered.
    pub(super) fn step_binary(&mut self, exec: &Exec<'_>) -> bool {
        let input = &self.rbuf[self.rpos..self.rlen];
        let sasl = exec.shared.sasl.as_ref();
        match crate::proto::binary::step_with(
            exec,
            sasl,
            &mut self.binary,
            input,
            &mut self.wbuf,
            &mut self.flush_mark,
        ) {
            BinaryStep::Incomplete => {
                // Past its header, a packet is only left incomplete when all
                // of it is needed (a value that fits, SASL data), so wait for
                // all of it; the cap keeps a lying header from growing the
                // buffer beyond one item.
                let total = protocol::binary::Header::parse(input).map(|header| {
                    let head_len = protocol::binary::HEADER_LEN + header.extras_and_key_len();
                    if input.len() < head_len {
                        head_len
                    } else {
                        header
                            .packet_len()
                            .min(head_len + exec.shared.settings.item_size_max_bytes + 64)
                    }
                });
                if let Some(total) = total {
                    self.wait_for(total);
                }
                false
            }
            BinaryStep::Consumed(n) => {
                exec.timed(Command::Binary);
                self.rpos += n;
                true
            }
            BinaryStep::Swallow {
                consumed,
                remaining,
            } => {
                exec.timed(Command::Binary);
                self.rpos += consumed;
                self.state = State::Swallow { remaining };
                true
            }
            BinaryStep::CloseAfterWrite(n) => {
                self.rpos += n;
                self.state = State::CloseAfterWrite;
                false
            }
        }
    }
}
