//! Execution of the binary protocol, as memcached 1.6.18's `proto_bin.c`.
//!
//! A connection whose first byte is `0x80` speaks binary for its whole life.
//! [`step_with`] looks at the start of the unparsed input and either waits
//! for more, or executes one request and says how many bytes it used.
//!
//! memcached reads a request in two parts, and so do we:
//!
//! ```text
//!  [ 24-byte header | extras | key ]  read, checked and dispatched first
//!  [ value ... ]                      set/add/replace/append/prepend/SASL only:
//!                                     refused (and swallowed) before it is read
//!                                     when it cannot fit, else read whole
//! ```
//!
//! Other commands never read a value: bytes a header counts past its key are
//! parsed as the next request, exactly as memcached does. Replies are
//! byte-identical to memcached's, including its quirks (see the "Binary
//! protocol" section of docs/protocol.md): the success reply of a quiet
//! command is suppressed but its errors are not; an unknown opcode swallows
//! `body length` bytes *after* its extras and key; a bad magic byte closes the
//! connection, dropping the replies memcached had not flushed yet.

use protocol::binary::{
    decode_request, opcode, write_response_header, Command, Decode, Header, Status, StoreKind,
    HEADER_LEN,
};
use protocol::text::Tokens;
use storage::{MetaArith, MetaStore, StoreMode, StoreOutcome};

use crate::admin::sasl::Sasl;
use crate::ops::modify::Deleted;
use crate::ops::observe::{Note, Seen};
use crate::ops::store::Refused;
use crate::ops::{memcached_item_fits, Exec};
use crate::proto::stats::BinaryReply;
use crate::stats::observe::Via;

/// The result of looking at the start of a binary-protocol input buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryStep {
    /// Not a whole request yet.
    Incomplete,
    /// One request was executed; it used this many input bytes.
    Consumed(usize),
    /// A request was refused and answered; skip `consumed` bytes now and
    /// swallow `remaining` more as they arrive (an oversized value).
    Swallow { consumed: usize, remaining: usize },
    /// Write pending replies, then close (`quit`).
    CloseAfterWrite(usize),
}

/// The longest SASL mechanism name memcached accepts (`MAX_SASL_MECH_LEN`).
const MAX_SASL_MECH_LEN: usize = 32;
/// The only mechanism served.
const SASL_MECHS: &[u8] = b"PLAIN";

/// Per-connection binary-protocol state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Session {
    /// SASL authentication succeeded on this connection.
    authenticated: bool,
    /// A SASL_AUTH started a mechanism (memcached's `sasl_started`).
    sasl_started: bool,
}

/// Execute the binary request at the start of `input`, if it is complete.
///
/// `sasl` is the credential store when the server runs with `-S`; `session`
/// is the connection's own state. `flush_mark` is where memcached would last
/// have written this connection's output: it is moved forward where
/// memcached flushes (after `NOOP` and after every error reply that swallows
/// nothing), and on a bad magic byte the output after it is dropped.
pub fn step_with(
    exec: &Exec<'_>,
    sasl: Option<&Sasl>,
    session: &mut Session,
    input: &[u8],
    out: &mut Vec<u8>,
    flush_mark: &mut usize,
) -> BinaryStep {
    let r = match decode_request(input) {
        Decode::Incomplete => return BinaryStep::Incomplete,
        Decode::BadMagic => {
            // memcached closes at once; what it had not flushed is lost.
            out.truncate((*flush_mark).min(out.len()));
            exec.drop_output_after(out.len());
            return BinaryStep::CloseAfterWrite(0);
        }
        Decode::BodyTooShort(header) => {
            let mut req = Request {
                exec,
                header,
                input,
                head_len: header.head_len(),
                out,
                flush_mark,
            };
            req.error(Status::UnknownCommand);
            return BinaryStep::CloseAfterWrite(header.head_len());
        }
        Decode::Request(r) => r,
    };
    let header = r.header;
    let head_len = r.head_len();
    let mut req = Request {
        exec,
        header,
        input,
        head_len,
        out,
        flush_mark,
    };
    if sasl.is_some() && !session.authenticated && !r.allowed_unauthenticated() {
        req.error(Status::AuthError);
        return BinaryStep::CloseAfterWrite(head_len);
    }
    let quiet = r.quiet;
    match r.command {
        Command::Version => {
            req.success(0, 0, crate::config::VERSION.as_bytes(), quiet);
            BinaryStep::Consumed(head_len)
        }
        Command::Flush { exptime } => {
            req.flush(exptime, quiet);
            BinaryStep::Consumed(head_len)
        }
        Command::Noop => {
            req.success(0, 0, b"", false);
            req.flushed();
            BinaryStep::Consumed(head_len)
        }
        Command::Store {
            mode,
            flags,
            exptime,
        } => req.update(Update::Whole(mode), flags, exptime, quiet),
        Command::Concat { append } => req.update(Update::Concat { append }, 0, 0, quiet),
        Command::Get { with_key } => {
            req.get_or_touch(with_key, true, None, quiet);
            BinaryStep::Consumed(head_len)
        }
        Command::Touch { exptime } => {
            req.get_or_touch(false, false, Some(exptime), quiet);
            BinaryStep::Consumed(head_len)
        }
        Command::Gat { with_key, exptime } => {
            req.get_or_touch(with_key, true, Some(exptime), quiet);
            BinaryStep::Consumed(head_len)
        }
        Command::Delete => {
            req.delete(quiet);
            BinaryStep::Consumed(head_len)
        }
        Command::Arith {
            incr,
            delta,
            initial,
            expiration,
        } => {
            req.arith(incr, delta, initial, expiration, quiet);
            BinaryStep::Consumed(head_len)
        }
        Command::Stat => {
            req.stat();
            BinaryStep::Consumed(head_len)
        }
        Command::Quit => {
            req.success(0, 0, b"", quiet);
            BinaryStep::CloseAfterWrite(head_len)
        }
        Command::SaslListMechs => {
            if sasl.is_none() {
                return req.error_swallow(Status::UnknownCommand, 0);
            }
            req.success(0, 0, SASL_MECHS, false);
            BinaryStep::Consumed(head_len)
        }
        Command::SaslAuth | Command::SaslStep => match sasl {
            None => req.error_swallow(Status::UnknownCommand, r.value_len()),
            Some(sasl) => req.sasl_auth(sasl, session),
        },
        Command::Malformed => req.protocol_error(),
        // memcached swallows `body length` bytes counted from after the
        // extras and key it has already read (an overshoot we copy).
        Command::Unknown => req.error_swallow(Status::UnknownCommand, header.body_len as usize),
    }
}

/// What a binary storage command does with its value.
#[derive(Clone, Copy)]
enum Update {
    Whole(StoreKind),
    Concat { append: bool },
}

/// One dispatched request: its header, where its parts lie in the input,
/// and the output it answers into.
struct Request<'e, 'a, 'i, 'o> {
    exec: &'e Exec<'a>,
    header: Header,
    input: &'i [u8],
    /// Header, extras and key.
    head_len: usize,
    out: &'o mut Vec<u8>,
    flush_mark: &'o mut usize,
}

impl Request<'_, '_, '_, '_> {
    fn key(&self) -> &[u8] {
        &self.input[HEADER_LEN + usize::from(self.header.extras_len)..self.head_len]
    }

    /// A binary expiration: unsigned, so never "already expired" as a
    /// negative text exptime is (memcached passes it to `realtime()` as a
    /// positive `time_t`).
    fn realtime(&self, exptime: u32) -> u32 {
        self.exec.shared.clock.realtime_positive(i64::from(exptime))
    }

    fn now(&self) -> u32 {
        self.exec.shared.clock.now()
    }

    fn head(&mut self, status: Status, extras_len: u8, key_len: u16, body_len: usize, cas: u64) {
        write_response_header(
            self.out,
            self.header.opcode,
            status,
            extras_len,
            key_len,
            body_len as u32,
            self.header.opaque,
            self.exec.shared.settings.item_cas(cas),
        );
    }

    /// memcached flushes the connection's output here.
    fn flushed(&mut self) {
        *self.flush_mark = self.out.len();
    }

    /// memcached's `write_bin_response()`: a success reply, unless quiet.
    fn success(&mut self, cas: u64, extras_len: u8, body: &[u8], quiet: bool) {
        if quiet {
            return;
        }
        self.head(Status::Success, extras_len, 0, body.len(), cas);
        self.out.extend_from_slice(body);
    }

    /// memcached's `write_bin_error()` with nothing to swallow: sent even
    /// for quiet commands, and the output is flushed.
    fn error(&mut self, status: Status) {
        self.error_text(status, status.message());
    }

    fn error_text(&mut self, status: Status, text: &[u8]) {
        self.head(status, 0, 0, text.len(), 0);
        self.out.extend_from_slice(text);
        self.flushed();
    }

    /// An error reply, then swallow `n` bytes after the extras and key.
    fn error_swallow(&mut self, status: Status, n: usize) -> BinaryStep {
        if n == 0 {
            self.error(status);
            return BinaryStep::Consumed(self.head_len);
        }
        // memcached does not flush until the swallowing is done.
        let text = status.message();
        self.head(status, 0, 0, text.len(), 0);
        self.out.extend_from_slice(text);
        BinaryStep::Swallow {
            consumed: self.head_len,
            remaining: n,
        }
    }

    /// memcached's `handle_binary_protocol_error()`: `Invalid arguments`, close.
    fn protocol_error(&mut self) -> BinaryStep {
        self.error(Status::InvalidArguments);
        BinaryStep::CloseAfterWrite(self.head_len)
    }

    /// GET/GETK, TOUCH and GAT/GATK: `touch` is the new exptime of a touch.
    fn get_or_touch(
        &mut self,
        return_key: bool,
        return_value: bool,
        touch: Option<u32>,
        quiet: bool,
    ) {
        let now = self.now();
        let exptime = touch.map_or(0, |t| self.realtime(t));
        let touch = touch.is_some();
        let key_start = HEADER_LEN + usize::from(self.header.extras_len);
        let input = self.input;
        let key = &input[key_start..self.head_len];
        let opcode = self.header.opcode;
        let opaque = self.header.opaque;
        let exec = self.exec;
        let out = &mut *self.out;
        let compose = |item: storage::ItemRef<'_>| {
            let key_len = if return_key { item.key.len() } else { 0 };
            let value_len = if return_value { item.value.len() } else { 0 };
            write_response_header(
                out,
                opcode,
                Status::Success,
                4,
                key_len as u16,
                (4 + key_len + value_len) as u32,
                opaque,
                exec.shared.settings.item_cas(item.cas),
            );
            out.extend_from_slice(&item.flags.to_be_bytes());
            if return_key {
                out.extend_from_slice(item.key);
            }
            if return_value {
                // Large values go in place, as for `get` (see `reply/splice.rs`).
                exec.put_value(out, item.value, exec.value_pin(item.value, item.origin));
            }
            Seen::note(item.value.len(), item.flags)
        };
        let lookup = exec.lookup_key(key, touch.then_some(exptime), now, compose);
        exec.count_get(&lookup, touch);
        exec.observe_read(key, &lookup, Via::Binary);
        if lookup.is_hit() || quiet {
            return;
        }
        if return_key {
            // The miss carries the key instead of a message, and is not a
            // flush point (`write_bin_miss_response()`).
            self.head(Status::KeyNotFound, 0, key.len() as u16, key.len(), 0);
            self.out.extend_from_slice(key);
        } else {
            self.error(Status::KeyNotFound);
        }
    }

    /// set/add/replace (extras: flags, exptime) and append/prepend (no extras).
    fn update(&mut self, what: Update, flags: u32, exptime: u32, quiet: bool) -> BinaryStep {
        let value_len = self.header.value_len().unwrap_or(0);
        let is_set = matches!(what, Update::Whole(StoreKind::Set));
        let item_size_max = self.exec.shared.settings.memcached_item_limit();
        let key_len = usize::from(self.header.key_len);
        if !memcached_item_fits(item_size_max, key_len, flags, value_len) {
            let refused = Refused {
                counted: false,
                detail: true,
                unlink_old: is_set,
            };
            self.exec.refuse_too_large(self.key(), refused);
            return self.error_swallow(Status::TooLarge, value_len);
        }
        let total = self.header.packet_len();
        if self.input.len() < total {
            return BinaryStep::Incomplete;
        }
        let input = self.input;
        let key = &input[HEADER_LEN + usize::from(self.header.extras_len)..self.head_len];
        let value = &input[self.head_len..total];
        let exec = self.exec;
        exec.begin_store(key, true);
        // Under -C memcached's stores never see the request's cas (its items have no
        // cas to set it in), so they are plain stores.
        let cas_in = exec.shared.settings.item_cas(self.header.cas);
        let exptime = self.realtime(exptime);
        let unlink_old = is_set;
        let (outcome, cas) = if let Update::Concat { append } = what {
            // memcached refuses an append/prepend whose CAS is not the item's; the
            // check is made under the lock that appends.
            exec.store_checked(
                MetaStore {
                    mode: if append {
                        StoreMode::Append
                    } else {
                        StoreMode::Prepend
                    },
                    key,
                    flags,
                    exptime,
                    value,
                    append_cas: cas_in,
                    invalidate: false,
                    key_binary: false,
                },
                unlink_old,
            )
        } else {
            let mode = match what {
                _ if cas_in != 0 => StoreMode::Cas(cas_in),
                Update::Whole(StoreKind::Set) => StoreMode::Set,
                Update::Whole(StoreKind::Add) => StoreMode::Add,
                _ => StoreMode::Replace,
            };
            exec.store_value(mode, key, None, flags, exptime, value, unlink_old)
        };
        match outcome {
            StoreOutcome::Stored => self.success(cas, 0, b"", quiet),
            StoreOutcome::Exists => self.error(Status::KeyExists),
            StoreOutcome::NotFound => self.error(Status::KeyNotFound),
            StoreOutcome::NotStored => self.error(match what {
                Update::Whole(StoreKind::Add) => Status::KeyExists,
                Update::Whole(StoreKind::Replace) => Status::KeyNotFound,
                _ => Status::NotStored,
            }),
            StoreOutcome::TooLarge => self.error(Status::TooLarge),
            StoreOutcome::NoMemory => {
                self.error_text(Status::OutOfMemory, b"Out of memory allocating item");
            }
        }
        BinaryStep::Consumed(total)
    }

    fn delete(&mut self, quiet: bool) {
        let key_start = HEADER_LEN + usize::from(self.header.extras_len);
        let input = self.input;
        let key = &input[key_start..self.head_len];
        let cas_in = self.exec.shared.settings.cas_check(self.header.cas);
        match self.exec.delete_if_cas(key, cas_in) {
            Deleted::Deleted => self.success(0, 0, b"", quiet),
            Deleted::NotFound => self.error(Status::KeyNotFound),
            Deleted::Exists => self.error(Status::KeyExists),
        }
    }

    /// INCREMENT/DECREMENT; extras: delta, initial value, expiration
    /// (`0xffffffff`: do not create a missing item).
    fn arith(&mut self, incr: bool, delta: u64, initial: u64, expiration: u32, quiet: bool) {
        let key_start = HEADER_LEN + usize::from(self.header.extras_len);
        let input = self.input;
        let key = &input[key_start..self.head_len];
        let exec = self.exec;
        let create = expiration != u32::MAX;
        // memcached checks an empty value first, then the CAS: so does the store, both
        // under the lock that rewrites the number.
        let cas_in = exec.shared.settings.cas_check(self.header.cas);
        match exec.incr_decr(key, delta, incr, cas_in, None, !create) {
            MetaArith::Value { value, cas, .. } => {
                self.success(cas, 0, &value.to_be_bytes(), quiet);
            }
            MetaArith::NotFound if create => {
                match exec.create_counter(key, initial, self.realtime(expiration)) {
                    (StoreOutcome::Stored, cas) => {
                        self.success(cas, 0, &initial.to_be_bytes(), quiet)
                    }
                    (StoreOutcome::NoMemory | StoreOutcome::TooLarge, _) => {
                        self.error_text(Status::OutOfMemory, b"Out of memory allocating new item");
                    }
                    _ => self.error(Status::NotStored),
                }
            }
            MetaArith::NotFound => self.error(Status::KeyNotFound),
            MetaArith::Exists => self.error(Status::KeyExists),
            MetaArith::NonNumeric => self.error(Status::NonNumeric),
            MetaArith::NoMemory => {
                self.error_text(Status::OutOfMemory, b"Out of memory incrementing value");
            }
        }
    }

    fn flush(&mut self, exptime: u32, quiet: bool) {
        let at = (exptime > 0).then(|| self.realtime(exptime));
        if self.exec.flush_all(at, false) {
            self.success(0, 0, b"", quiet);
        } else {
            // memcached answers a disabled flush_all as an auth failure.
            self.error(Status::AuthError);
        }
    }

    /// STAT with an optional group in the key, found and framed as the table of
    /// groups says (`proto/stats.rs`).
    fn stat(&mut self) {
        let key_start = HEADER_LEN + usize::from(self.header.extras_len);
        let input = self.input;
        let key = &input[key_start..self.head_len];
        let Some(group) = crate::proto::stats::binary_group(key, &input[key_start..]) else {
            return self.error(Status::KeyNotFound);
        };
        let mut text = Vec::new();
        (group.report)(self.exec, &Tokens::new(key, 0), &mut text);
        match group.binary.1 {
            BinaryReply::Whole(name) => self.stat_packet(name, &text),
            BinaryReply::Stats => {
                for line in text.split_inclusive(|&b| b == b'\n') {
                    let Some(stat) = line
                        .strip_prefix(b"STAT ")
                        .and_then(|l| l.strip_suffix(b"\r\n"))
                    else {
                        continue;
                    };
                    let space = stat.iter().position(|&b| b == b' ').unwrap_or(stat.len());
                    let (name, value) = (&stat[..space], stat.get(space + 1..).unwrap_or(b""));
                    self.stat_packet(name, value);
                }
            }
        }
        self.stat_packet(b"", b"");
    }

    /// memcached's `append_bin_stats()`: opcode STAT whatever was asked, CAS 0.
    fn stat_packet(&mut self, name: &[u8], value: &[u8]) {
        write_response_header(
            self.out,
            opcode::STAT,
            Status::Success,
            0,
            name.len() as u16,
            (name.len() + value.len()) as u32,
            self.header.opaque,
            0,
        );
        self.out.extend_from_slice(name);
        self.out.extend_from_slice(value);
    }

    /// SASL_AUTH / SASL_STEP with SASL enabled. PLAIN completes in one step,
    /// so a SASL_STEP always fails, as it does in memcached with PLAIN.
    fn sasl_auth(&mut self, sasl: &Sasl, session: &mut Session) -> BinaryStep {
        let key_len = usize::from(self.header.key_len);
        let value_len = self.header.value_len().unwrap_or(0);
        if key_len > MAX_SASL_MECH_LEN {
            return self.error_swallow(Status::InvalidArguments, value_len);
        }
        if !memcached_item_fits(
            self.exec.shared.settings.memcached_item_limit(),
            key_len,
            0,
            value_len,
        ) {
            return self.error_swallow(Status::OutOfMemory, value_len);
        }
        let total = self.header.packet_len();
        if self.input.len() < total {
            return BinaryStep::Incomplete;
        }
        let input = self.input;
        let mech = &input[self.head_len - key_len..self.head_len];
        let data = &input[self.head_len..total];
        session.authenticated = false;
        let ok = if self.header.opcode == opcode::SASL_AUTH {
            let ok = mech == SASL_MECHS && sasl.check_plain(data);
            session.sasl_started = ok;
            ok
        } else {
            false
        };
        self.exec.count_auth(ok);
        if ok {
            session.authenticated = true;
            self.success(0, 0, b"Authenticated", false);
        } else {
            self.error(Status::AuthError);
        }
        BinaryStep::Consumed(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use protocol::binary::{frame_packet, write_request, REQUEST_MAGIC};

    use crate::state::Shared;
    use crate::stats::WorkerStats;

    fn shared() -> (Shared, Arc<WorkerStats>) {
        let shared = Shared::from_args(["ferrocache", "-t", "1"]).unwrap();
        let stats = shared.worker_stats(0).clone();
        (shared, stats)
    }

    fn packet(opcode: u8, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        write_request(&mut out, opcode, extras, key, value, 42, 0);
        out
    }

    /// Run one request through `step_with`; returns the step and the reply packets
    /// as (status, value).
    fn run(
        shared: &Shared,
        stats: &WorkerStats,
        sasl: Option<&Sasl>,
        session: &mut Session,
        input: &[u8],
    ) -> (BinaryStep, Vec<(u16, Vec<u8>)>) {
        let exec = Exec {
            shared,
            stats,
            sink: crate::reply::Sink::COPY,
            latency: None,
        };
        let mut out = Vec::new();
        let mut mark = 0;
        let step = step_with(&exec, sasl, session, input, &mut out, &mut mark);
        let mut replies = Vec::new();
        let mut rest = &out[..];
        while let Some(p) = frame_packet(rest) {
            assert_eq!(p.header.opaque, 42);
            replies.push((p.header.status, p.value.to_vec()));
            rest = &rest[p.header.packet_len()..];
        }
        assert!(rest.is_empty());
        (step, replies)
    }

    #[test]
    fn sasl_plain_gates_commands() {
        let (shared, stats) = shared();
        let sasl = Sasl::parse_pwdb(b"user:pw\n");
        let mut s = Session::default();
        let get = packet(opcode::GET, b"", b"k", b"");
        let (step, r) = run(&shared, &stats, Some(&sasl), &mut s, &get);
        assert_eq!(step, BinaryStep::CloseAfterWrite(25));
        assert_eq!(r, vec![(0x20, b"Auth failure.".to_vec())]);

        let version = packet(opcode::VERSION, b"", b"", b"");
        let (_, r) = run(&shared, &stats, Some(&sasl), &mut s, &version);
        assert_eq!(r[0].0, 0);

        let list = packet(opcode::SASL_LIST_MECHS, b"", b"", b"");
        let (_, r) = run(&shared, &stats, Some(&sasl), &mut s, &list);
        assert_eq!(r, vec![(0, b"PLAIN".to_vec())]);

        let bad = packet(opcode::SASL_AUTH, b"", b"PLAIN", b"\0user\0nope");
        let (step, r) = run(&shared, &stats, Some(&sasl), &mut s, &bad);
        assert_eq!(step, BinaryStep::Consumed(bad.len()));
        assert_eq!(r, vec![(0x20, b"Auth failure.".to_vec())]);

        let good = packet(opcode::SASL_AUTH, b"", b"PLAIN", b"\0user\0pw");
        for cut in 0..good.len() {
            let (step, r) = run(&shared, &stats, Some(&sasl), &mut s, &good[..cut]);
            assert_eq!((step, r.len()), (BinaryStep::Incomplete, 0), "cut {cut}");
        }
        let (step, r) = run(&shared, &stats, Some(&sasl), &mut s, &good);
        assert_eq!(step, BinaryStep::Consumed(good.len()));
        assert_eq!(r, vec![(0, b"Authenticated".to_vec())]);

        let (step, r) = run(&shared, &stats, Some(&sasl), &mut s, &get);
        assert_eq!(step, BinaryStep::Consumed(25));
        assert_eq!(r, vec![(1, b"Not found".to_vec())]);

        // PLAIN has no second step; a failed step also logs the connection out.
        let step_req = packet(opcode::SASL_STEP, b"", b"PLAIN", b"x");
        let (_, r) = run(&shared, &stats, Some(&sasl), &mut s, &step_req);
        assert_eq!(r, vec![(0x20, b"Auth failure.".to_vec())]);
        let (step, _) = run(&shared, &stats, Some(&sasl), &mut s, &get);
        assert_eq!(step, BinaryStep::CloseAfterWrite(25));

        let long_mech = packet(opcode::SASL_AUTH, b"", &[b'M'; 33], b"abc");
        let (step, r) = run(&shared, &stats, Some(&sasl), &mut s, &long_mech[..24 + 33]);
        assert_eq!(
            step,
            BinaryStep::Swallow {
                consumed: 57,
                remaining: 3
            }
        );
        assert_eq!(r, vec![(4, b"Invalid arguments".to_vec())]);
    }

    #[test]
    fn stat_groups_are_found_and_framed_as_the_table_says() {
        let (shared, stats) = shared();
        let mut s = Session::default();
        let stat = |key: &[u8]| packet(opcode::STAT, b"", key, b"");
        let names = |replies: &[(u16, Vec<u8>)]| replies.iter().map(|r| r.0).collect::<Vec<_>>();
        // `reset` and `detail on` act and answer with the terminator alone.
        for key in [&b"reset"[..], b"detail on"] {
            let (_, r) = run(&shared, &stats, None, &mut s, &stat(key));
            assert_eq!(r, vec![(0, Vec::new())], "{key:?}");
        }
        assert!(shared.prefixes.enabled());
        // The dump goes whole, as the value of one stat (`detailed`).
        let (_, r) = run(&shared, &stats, None, &mut s, &stat(b"detail dump"));
        assert_eq!(r, vec![(0, b"END\r\n".to_vec()), (0, Vec::new())]);
        // Groups of STAT lines: a packet each, then the terminator.
        let (_, r) = run(&shared, &stats, None, &mut s, &stat(b"sizes_disable"));
        assert_eq!(r, vec![(0, b"disabled".to_vec()), (0, Vec::new())]);
        let (_, r) = run(&shared, &stats, None, &mut s, &stat(b""));
        assert!(r.len() > 50 && names(&r).iter().all(|&status| status == 0));
        assert_eq!(r.last(), Some(&(0, Vec::new())));
        // Groups binary does not serve, and names it does not know.
        for key in [&b"conns"[..], b"latency", b"detail", b"bogus"] {
            let (_, r) = run(&shared, &stats, None, &mut s, &stat(key));
            assert_eq!(r, vec![(1, b"Not found".to_vec())], "{key:?}");
        }
    }

    #[test]
    fn without_sasl_the_sasl_opcodes_are_unknown() {
        let (shared, stats) = shared();
        let mut s = Session::default();
        let auth = packet(opcode::SASL_AUTH, b"", b"PLAIN", b"\0user\0pw");
        let (step, r) = run(&shared, &stats, None, &mut s, &auth[..29]);
        assert_eq!(
            step,
            BinaryStep::Swallow {
                consumed: 29,
                remaining: 8
            }
        );
        assert_eq!(r, vec![(0x81, b"Unknown command".to_vec())]);
    }

    #[test]
    fn set_waits_for_its_value_and_refuses_oversized_ones_early() {
        let (shared, stats) = shared();
        let mut s = Session::default();
        let set = packet(opcode::SET, &[0, 0, 0, 1, 0, 0, 0, 0], b"key", b"value");
        for cut in 0..set.len() {
            let (step, _) = run(&shared, &stats, None, &mut s, &set[..cut]);
            assert_eq!(step, BinaryStep::Incomplete, "cut {cut}");
        }
        let (step, r) = run(&shared, &stats, None, &mut s, &set);
        assert_eq!(step, BinaryStep::Consumed(set.len()));
        assert_eq!(r, vec![(0, Vec::new())]);

        // Only the header, extras and key of a 2 MB value: refused at once.
        let mut head = Vec::new();
        Header {
            magic: REQUEST_MAGIC,
            opcode: opcode::SET,
            key_len: 3,
            extras_len: 8,
            body_len: 11 + (2 << 20),
            opaque: 42,
            ..Header::default()
        }
        .write(&mut head);
        head.extend_from_slice(&[0; 8]);
        head.extend_from_slice(b"key");
        let (step, r) = run(&shared, &stats, None, &mut s, &head);
        assert_eq!(
            step,
            BinaryStep::Swallow {
                consumed: 35,
                remaining: 2 << 20
            }
        );
        assert_eq!(r, vec![(3, b"Too large.".to_vec())]);
        // memcached 1.6.18's binary protocol, unlike its text and meta ones, does not
        // count a value refused before it is read.
        assert_eq!(
            stats
                .store_too_large
                .load(std::sync::atomic::Ordering::Relaxed),
            0
        );
        // memcached drops the old value of a refused set.
        let get = packet(opcode::GET, b"", b"key", b"");
        let (_, r) = run(&shared, &stats, None, &mut s, &get);
        assert_eq!(r, vec![(1, b"Not found".to_vec())]);
    }
}
