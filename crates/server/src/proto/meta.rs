//! Execution of meta commands (`mg ms md ma me`), with memcached 1.6.18's replies.
//!
//! Each handler mirrors its memcached function in `proto_text.c`
//! (`process_mget_command` and friends): the same order of checks, the same
//! side effects when an error is found half-way, the same counters. Return
//! flags are written in the order the client sent them.
//!
//! ```text
//!   mg  hit:  VA <len> <flags>*\r\n<data>\r\n  |  HD <flags>*\r\n     (W X Z last)
//!       miss: EN <O and k flags>\r\n          (q: nothing)
//!   ms        HD | NS | EX | NF  <O k c flags>  (q: no HD)
//!   md        HD | NF | EX       <O k flags>    (q: no HD)
//!   ma        VA <len> <flags>*\r\n<n>\r\n | HD | NF | EX  (q: no reply to a hit)
//!   me        ME <key> exp= la= cas= fetch= cls= size=  |  EN
//! ```

use protocol::meta::{
    base64_encode, MetaCommand, MetaError, MetaRequest, SetMode, MAX_BINARY_KEY_LEN,
    MAX_OPAQUE_TOKEN_LEN,
};
use storage::{ItemMut, Lookup, MetaArith, MetaStore, RelTime, StoreMode, StoreOutcome};

use crate::clock::{Clock, REALTIME_MAXDELTA_SECS};
use crate::ops::observe::{Note, Seen};
use crate::ops::store::Refused;
use crate::ops::{memcached_item_fits, memcached_item_size, Exec};
use crate::proto::Flow;
use crate::stats::observe::Via;

const CRLF: &[u8] = b"\r\n";

fn push_num(out: &mut Vec<u8>, v: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

/// memcached's `META_CHAR` followed by a number: ` <c><n>`.
fn push_flag_num(out: &mut Vec<u8>, c: u8, v: impl itoa::Integer) {
    out.push(b' ');
    out.push(c);
    push_num(out, v);
}

/// memcached's `META_KEY`: ` k<key>`, or ` k<base64> b` for a binary key.
fn push_key(out: &mut Vec<u8>, key: &[u8], binary: bool) {
    out.extend_from_slice(b" k");
    if binary {
        base64_encode(key, out);
        out.extend_from_slice(b" b");
    } else {
        out.extend_from_slice(key);
    }
}

/// memcached's `realtime(EXPTIME_TO_POSITIVE_TIME(t))` against the `now` this command
/// read once, so a clock tick in the middle of a command cannot make `T100 t` print 99.
fn realtime(clock: &Clock, exptime: i32, now: RelTime) -> RelTime {
    let e = if exptime < 0 {
        REALTIME_MAXDELTA_SECS + 1
    } else {
        i64::from(exptime)
    };
    match e {
        0 => 0,
        // Absolute unix times do not depend on `now`.
        e if e > REALTIME_MAXDELTA_SECS => clock.realtime_positive(e),
        e => (e + i64::from(now)) as RelTime,
    }
}

/// An `O` token memcached refuses (only after acting, in `mg` and `ma`).
fn opaque_too_long(token: &[u8]) -> bool {
    token[0] == b'O' && token.len() > MAX_OPAQUE_TOKEN_LEN
}

/// The `O` and `k` return flags (all `md`, `ma` and `mg` misses give).
/// Returns false at an over-long opaque.
fn push_opaque_and_key(out: &mut Vec<u8>, req: &MetaRequest<'_>, key: &[u8]) -> bool {
    for t in req.flags() {
        match t[0] {
            b'O' => {
                if t.len() > MAX_OPAQUE_TOKEN_LEN {
                    return false;
                }
                out.push(b' ');
                out.extend_from_slice(t);
            }
            b'k' => push_key(out, key, req.options.base64),
            _ => {}
        }
    }
    true
}

/// Called before an `ms` data block is read. Returns false (after writing the
/// reply) when the value is refused, and the caller then swallows the block.
pub fn admit_data(exec: &Exec<'_>, req: &MetaRequest<'_>, out: &mut Vec<u8>) -> bool {
    if let Some(e) = req.error {
        out.extend_from_slice(e.bytes());
        return false;
    }
    let mut kbuf = [0u8; MAX_BINARY_KEY_LEN];
    let key = req.decoded_key(&mut kbuf);
    let len = req.data_len().unwrap_or(0);
    let item_size_max = exec.shared.settings.memcached_item_limit();
    if !memcached_item_fits(item_size_max, key.len(), req.options.client_flags, len) {
        // memcached drops the old value whatever the mode, so no stale value outlives a
        // write the client believes it made.
        exec.refuse_too_large(
            key,
            Refused {
                counted: true,
                detail: false,
                unlink_old: true,
            },
        );
        out.extend_from_slice(b"SERVER_ERROR object too large for cache\r\n");
        return false;
    }
    true
}

/// Execute one meta request; `data` is the `ms` data block with its `\r\n`.
pub fn execute(
    exec: &Exec<'_>,
    req: MetaRequest<'_>,
    data: Option<&[u8]>,
    out: &mut Vec<u8>,
    flush_mark: &mut usize,
) -> Flow {
    let _ = flush_mark;
    if let Some(e) = req.error {
        out.extend_from_slice(e.bytes());
        return Flow::Continue;
    }
    match req.command {
        MetaCommand::Get => meta_get(exec, &req, out),
        MetaCommand::Set => match data {
            Some(data) => meta_set(exec, &req, data, out),
            None => out.extend_from_slice(MetaError::BadFormat.bytes()),
        },
        MetaCommand::Delete => meta_delete(exec, &req, out),
        MetaCommand::Arithmetic => meta_arith(exec, &req, out),
        MetaCommand::Debug => meta_debug(exec, &req, out),
    }
    Flow::Continue
}

/// `mg`: memcached's `process_mget_command`.
fn meta_get(exec: &Exec<'_>, req: &MetaRequest<'_>, out: &mut Vec<u8>) {
    let clock = &exec.shared.clock;
    let now = clock.now();
    let o = req.options;
    let mut kbuf = [0u8; MAX_BINARY_KEY_LEN];
    let key = req.decoded_key(&mut kbuf);
    let times = MgTimes {
        now,
        ttl: o.ttl.map(|t| realtime(clock, t, now)),
        vivify_ttl: o.vivify.map(|t| realtime(clock, t, now)),
        recache: o.recache.map(|t| realtime(clock, t, now)),
    };
    let start = out.len();
    let (first, hit) = exec.with_item(
        key,
        o.vivify.is_some(),
        now,
        |it: &mut ItemMut<'_>, created| mg_hit(exec, req, &times, it, created, out),
    );
    // What the lookup found, before a miss was vivified.
    let read = match (first, hit) {
        (Lookup::Hit(()), Some(h)) => Lookup::Hit(h.seen),
        (Lookup::Expired, _) => Lookup::Expired,
        (Lookup::Flushed, _) => Lookup::Flushed,
        _ => Lookup::Miss,
    };
    exec.observe_read(key, &read, Via::Meta);
    exec.count_dead(first);
    if hit.is_some_and(|h| h.failed) {
        out.truncate(start);
        out.extend_from_slice(MetaError::OpaqueTooLong.bytes());
        return;
    }
    exec.count_meta_get(hit.is_some(), hit.is_some_and(|h| h.ttl_set));
    if hit.is_some() {
        return;
    }
    out.extend_from_slice(b"EN");
    if !push_opaque_and_key(out, req, key) {
        out.truncate(start);
        out.extend_from_slice(MetaError::OpaqueTooLong.bytes());
        return;
    }
    if o.quiet {
        out.truncate(start);
    } else {
        out.extend_from_slice(CRLF);
    }
}

/// The times an `mg` reads once: now, and its `T`, `N` and `R` times as server times.
struct MgTimes {
    now: RelTime,
    ttl: Option<RelTime>,
    vivify_ttl: Option<RelTime>,
    recache: Option<RelTime>,
}

/// What [`mg_hit`] did: the item as the read hook is told it, whether the reply was
/// cut by a bad opaque, whether a TTL was set.
#[derive(Clone, Copy)]
struct MgHit {
    seen: Seen,
    failed: bool,
    ttl_set: bool,
}

/// `mg`'s reply to an item it found (or vivified: `created`), composed under the item's
/// lock, with the item's bumps, TTLs and tokens as the flags ask.
fn mg_hit(
    exec: &Exec<'_>,
    req: &MetaRequest<'_>,
    t: &MgTimes,
    it: &mut ItemMut<'_>,
    created: bool,
    out: &mut Vec<u8>,
) -> MgHit {
    let (o, now) = (req.options, t.now);
    let mut done = MgHit {
        seen: Seen::note(it.value().len(), it.flags()),
        failed: false,
        ttl_set: false,
    };
    if !o.locked && !o.no_update {
        // memcached bumps during an unlocked fetch, before composing.
        it.bump(now);
    }
    if o.value {
        out.extend_from_slice(b"VA ");
        push_num(out, it.value().len());
    } else {
        out.extend_from_slice(b"HD");
    }
    let mut won = false;
    for f in req.flags() {
        match f[0] {
            b'T' => {
                done.ttl_set = true;
                it.set_exptime(t.ttl.unwrap_or(0));
            }
            b'N' if created => {
                it.set_exptime(t.vivify_ttl.unwrap_or(0));
                won = true;
            }
            // Recache: win when the TTL left is below the threshold.
            b'R' if !it.token_sent()
                && !created
                && it.exptime() != 0
                && it.exptime() < t.recache.unwrap_or(0) =>
            {
                won = true;
            }
            b'O' if opaque_too_long(f) => {
                // memcached stops here: no bump under the lock, no token.
                done.failed = true;
                return done;
            }
            _ => push_item_flag(exec, it, f, now, out),
        }
    }
    let token_sent = it.token_sent();
    if token_sent {
        out.extend_from_slice(b" Z");
    }
    if it.stale() {
        out.extend_from_slice(b" X");
        if !token_sent {
            won = true;
        }
    }
    if won {
        out.extend_from_slice(b" W");
        it.set_token_sent(true);
    }
    out.extend_from_slice(CRLF);
    if o.value {
        // Large values go in place, as for `get` (see `splice.rs`).
        let value = it.value();
        exec.put_value(out, value, exec.value_pin(value, it.origin()));
        out.extend_from_slice(CRLF);
    }
    if o.locked && !o.no_update {
        // Delayed bump, so `h` and `l` saw the item as it was.
        it.bump(now);
    }
    done
}

/// One of `mg`'s return flags that reads the item: ` s<size>`, ` t<ttl>`, ` c<cas>`,
/// ` f<flags>`, ` l<secs>`, ` h<0|1>`, the opaque, ` k<key>`; nothing for another.
fn push_item_flag(exec: &Exec<'_>, it: &ItemMut<'_>, flag: &[u8], now: RelTime, out: &mut Vec<u8>) {
    match flag[0] {
        b's' => push_flag_num(out, b's', it.value().len()),
        b't' => {
            out.extend_from_slice(b" t");
            if it.exptime() == 0 {
                out.extend_from_slice(b"-1");
            } else {
                push_num(out, it.exptime().wrapping_sub(now));
            }
        }
        b'c' => push_flag_num(out, b'c', exec.shared.settings.item_cas(it.cas())),
        b'f' => push_flag_num(out, b'f', it.flags()),
        b'l' => push_flag_num(out, b'l', now.wrapping_sub(it.time())),
        b'h' => push_flag_num(out, b'h', u8::from(it.fetched())),
        b'O' => {
            out.push(b' ');
            out.extend_from_slice(flag);
        }
        b'k' => push_key(out, it.key(), it.key_binary()),
        _ => {}
    }
}

/// `ms` with its data block: memcached's `process_mset_command` and
/// `complete_nread_ascii` / `_finalize_mset`.
fn meta_set(exec: &Exec<'_>, req: &MetaRequest<'_>, data: &[u8], out: &mut Vec<u8>) {
    let clock = &exec.shared.clock;
    let now = clock.now();
    let o = req.options;
    let mut kbuf = [0u8; MAX_BINARY_KEY_LEN];
    let key = req.decoded_key(&mut kbuf);
    exec.begin_store(key, false);
    let len = data.len() - 2;
    if &data[len..] != CRLF {
        // Errors are never quiet.
        out.extend_from_slice(b"CLIENT_ERROR bad data chunk\r\n");
        return;
    }
    let cas_in = o.cas.unwrap_or(0);
    let mode = match req.set_mode {
        SetMode::Set => StoreMode::Set,
        SetMode::Add => StoreMode::Add,
        SetMode::Append => StoreMode::Append,
        SetMode::Prepend => StoreMode::Prepend,
        SetMode::Replace => StoreMode::Replace,
        SetMode::Cas => StoreMode::Cas(exec.shared.settings.swap_cas(cas_in)),
    };
    let is_cas = req.set_mode == SetMode::Cas;
    let (outcome, cas) = exec.store_checked(
        MetaStore {
            mode,
            key,
            flags: o.client_flags,
            exptime: o.ttl.map_or(0, |t| realtime(clock, t, now)),
            value: &data[..len],
            // Under -C an append's cas is not checked, as in memcached.
            append_cas: exec.shared.settings.item_cas(cas_in),
            invalidate: o.invalidate && is_cas,
            key_binary: o.base64,
        },
        true,
    );
    let start = out.len();
    let status: &[u8] = match outcome {
        StoreOutcome::Stored => b"HD",
        StoreOutcome::NotStored => b"NS",
        StoreOutcome::Exists => b"EX",
        StoreOutcome::NotFound => b"NF",
        StoreOutcome::TooLarge => {
            out.extend_from_slice(b"SERVER_ERROR object too large for cache\r\n");
            return;
        }
        StoreOutcome::NoMemory => {
            out.extend_from_slice(b"SERVER_ERROR out of memory storing object\r\n");
            return;
        }
    };
    out.extend_from_slice(status);
    for t in req.flags() {
        match t[0] {
            b'O' => {
                out.push(b' ');
                out.extend_from_slice(t);
            }
            b'k' => push_key(out, key, o.base64),
            b'c' => push_flag_num(out, b'c', exec.shared.settings.item_cas(cas)),
            _ => {}
        }
    }
    out.extend_from_slice(CRLF);
    if o.quiet && outcome == StoreOutcome::Stored {
        out.truncate(start);
    }
}

/// What `md` did to a found item.
enum Deleted {
    CasMismatch,
    Invalidated,
    Unlinked,
}

/// `md`: memcached's `process_mdelete_command`.
fn meta_delete(exec: &Exec<'_>, req: &MetaRequest<'_>, out: &mut Vec<u8>) {
    let clock = &exec.shared.clock;
    let now = clock.now();
    let o = req.options;
    let mut kbuf = [0u8; MAX_BINARY_KEY_LEN];
    let key = req.decoded_key(&mut kbuf);
    let ttl = o.ttl.map(|t| realtime(clock, t, now));
    exec.watch_fetch(key, now);
    let (first, done) = exec.with_item(key, false, now, |it, _| {
        if o.cas
            .is_some_and(|c| c != exec.shared.settings.item_cas(it.cas()))
        {
            return Deleted::CasMismatch;
        }
        if o.invalidate {
            // Mark stale instead of deleting; the next fetch may win a new token.
            if let Some(t) = ttl {
                it.set_exptime(t);
            }
            it.set_stale(true);
            it.set_token_sent(false);
            it.new_cas(now);
            Deleted::Invalidated
        } else {
            it.unlink();
            Deleted::Unlinked
        }
    });
    exec.count_dead(first);
    // memcached counts a CAS mismatch as a miss here (its binary DELETE does not).
    let status: &[u8] = match done {
        None => {
            exec.count_delete(false);
            b"NF"
        }
        Some(Deleted::CasMismatch) => {
            exec.count_delete(false);
            b"EX"
        }
        Some(Deleted::Invalidated) => b"HD",
        Some(Deleted::Unlinked) => {
            exec.count_delete(true);
            b"HD"
        }
    };
    if o.quiet && status == b"HD" {
        return;
    }
    out.extend_from_slice(status);
    // The parser already refused an over-long opaque, before any lookup.
    push_opaque_and_key(out, req, key);
    out.extend_from_slice(CRLF);
}

/// `ma`: memcached's `process_marithmetic_command`.
fn meta_arith(exec: &Exec<'_>, req: &MetaRequest<'_>, out: &mut Vec<u8>) {
    let clock = &exec.shared.clock;
    let now = clock.now();
    let o = req.options;
    let mut kbuf = [0u8; MAX_BINARY_KEY_LEN];
    let key = req.decoded_key(&mut kbuf);
    let times = MaTimes {
        ttl: o.ttl.map(|t| realtime(clock, t, now)),
        vivify_ttl: o.vivify.map(|t| realtime(clock, t, now)),
        // memcached walks the flags after acting and stops at an over-long opaque, so a
        // `T` (or `N`) after one never takes effect.
        cut: req.flags().position(opaque_too_long),
    };
    let ttl_pos = req.flags().position(|t| t[0] == b'T');
    let applied_ttl = times
        .ttl
        .filter(|_| ttl_pos.is_some_and(|i| times.before_cut(i)));

    let result = exec.incr_decr(
        key,
        o.delta,
        req.incr,
        exec.shared.settings.cas_check(o.cas.unwrap_or(0)),
        applied_ttl,
        o.vivify.is_none(),
    );
    let start = out.len();
    let Counter {
        value,
        cas,
        exptime,
        created,
    } = match ma_counter(exec, req, &times, key, result, out) {
        MaFound::Counter(counter) => counter,
        MaFound::Missing => {
            if !push_opaque_and_key(out, req, key) {
                out.truncate(start);
                out.extend_from_slice(MetaError::OpaqueTooLong.bytes());
                return;
            }
            out.extend_from_slice(CRLF);
            return;
        }
        MaFound::Answered => return,
    };
    let mut num = itoa::Buffer::new();
    let digits = num.format(value).as_bytes();
    if o.value {
        out.extend_from_slice(b"VA ");
        push_num(out, digits.len());
    } else {
        out.extend_from_slice(b"HD");
    }
    let mut exptime = exptime;
    for t in req.flags() {
        match t[0] {
            b'c' => push_flag_num(out, b'c', exec.shared.settings.item_cas(cas)),
            b't' => {
                out.extend_from_slice(b" t");
                if exptime == 0 {
                    out.extend_from_slice(b"-1");
                } else {
                    push_num(out, exptime.wrapping_sub(now));
                }
            }
            b'T' => exptime = times.ttl.unwrap_or(0),
            b'N' if created => exptime = times.vivify_ttl.unwrap_or(0),
            b'O' => {
                if t.len() > MAX_OPAQUE_TOKEN_LEN {
                    out.truncate(start);
                    out.extend_from_slice(MetaError::OpaqueTooLong.bytes());
                    return;
                }
                out.push(b' ');
                out.extend_from_slice(t);
            }
            b'k' => push_key(out, key, o.base64),
            _ => {}
        }
    }
    out.extend_from_slice(CRLF);
    if o.value {
        out.extend_from_slice(digits);
        out.extend_from_slice(CRLF);
    }
    if o.quiet && !created {
        out.truncate(start);
    }
}

/// The TTLs of an `ma` as server times, and where its flags are cut by an over-long opaque.
struct MaTimes {
    ttl: Option<RelTime>,
    vivify_ttl: Option<RelTime>,
    cut: Option<usize>,
}

impl MaTimes {
    /// Whether flag `i` comes before the over-long opaque, if there is one.
    fn before_cut(&self, i: usize) -> bool {
        self.cut.is_none_or(|c| i < c)
    }
}

/// The number an `ma` answers with: its value and cas, its exptime before the flags
/// are walked, and whether the miss was vivified.
#[derive(Clone, Copy)]
struct Counter {
    value: u64,
    cas: u64,
    exptime: RelTime,
    created: bool,
}

/// What `ma`'s store call came to.
enum MaFound {
    /// The number to answer with.
    Counter(Counter),
    /// `NF` or `EX`, written; its flags follow.
    Missing,
    /// An error line, written whole.
    Answered,
}

/// What `ma`'s store call gave, with a miss vivified when `N` asks.
fn ma_counter(
    exec: &Exec<'_>,
    req: &MetaRequest<'_>,
    t: &MaTimes,
    key: &[u8],
    result: MetaArith,
    out: &mut Vec<u8>,
) -> MaFound {
    let o = req.options;
    let counter = match result {
        MetaArith::Value {
            value,
            cas,
            exptime,
            ..
        } => Counter {
            value,
            cas,
            exptime,
            created: false,
        },
        MetaArith::NotFound if o.vivify.is_some() => {
            // Vivify: an item holding the initial value; `T` and `N` set its exptime
            // in the order given (up to a bad opaque).
            let mut exptime = 0;
            for (i, f) in req.flags().enumerate() {
                if !t.before_cut(i) {
                    break;
                }
                match f[0] {
                    b'T' => exptime = t.ttl.unwrap_or(0),
                    b'N' => exptime = t.vivify_ttl.unwrap_or(0),
                    _ => {}
                }
            }
            let (outcome, cas) = exec.create_counter(key, o.initial, exptime);
            if !matches!(outcome, StoreOutcome::Stored | StoreOutcome::NotStored) {
                out.extend_from_slice(b"SERVER_ERROR Out of memory allocating new item\r\n");
                return MaFound::Answered;
            }
            Counter {
                value: o.initial,
                cas,
                exptime: 0,
                created: true,
            }
        }
        MetaArith::NotFound => {
            out.extend_from_slice(b"NF");
            return MaFound::Missing;
        }
        MetaArith::Exists => {
            out.extend_from_slice(b"EX");
            return MaFound::Missing;
        }
        MetaArith::NonNumeric => {
            out.extend_from_slice(
                b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
            );
            return MaFound::Answered;
        }
        MetaArith::NoMemory => {
            out.extend_from_slice(b"SERVER_ERROR out of memory\r\n");
            return MaFound::Answered;
        }
    };
    MaFound::Counter(counter)
}

/// `me`: memcached's `process_meta_command`, a debug line.
fn meta_debug(exec: &Exec<'_>, req: &MetaRequest<'_>, out: &mut Vec<u8>) {
    let now = exec.shared.clock.now();
    let mut kbuf = [0u8; MAX_BINARY_KEY_LEN];
    let key = req.decoded_key(&mut kbuf);
    exec.watch_fetch(key, now);
    let (first, found) = exec.with_item(key, false, now, |it, _| {
        out.extend_from_slice(b"ME ");
        if it.key_binary() {
            base64_encode(it.key(), out);
        } else {
            out.extend_from_slice(it.key());
        }
        out.extend_from_slice(b" exp=");
        if it.exptime() == 0 {
            out.extend_from_slice(b"-1");
        } else {
            // memcached prints `current_time - exptime` as a signed int.
            push_num(out, now.wrapping_sub(it.exptime()) as i32);
        }
        out.extend_from_slice(b" la=");
        push_num(out, now.wrapping_sub(it.time()));
        out.extend_from_slice(b" cas=");
        push_num(out, exec.shared.settings.item_cas(it.cas()));
        out.extend_from_slice(if it.fetched() {
            b" fetch=yes cls="
        } else {
            b" fetch=no cls="
        });
        let size = memcached_item_size(
            it.key().len(),
            it.flags(),
            it.value().len(),
            exec.shared.settings.cas_enabled,
        );
        push_num(
            out,
            crate::ops::item::memcached_slab_class(size, it.key().len(), it.flags()),
        );
        out.extend_from_slice(b" size=");
        push_num(out, size);
        out.extend_from_slice(CRLF);
    });
    if found.is_none() {
        out.extend_from_slice(b"EN\r\n");
    }
    // memcached counts `me` (only) in cmd_meta, once the line was accepted.
    exec.count_meta_debug(first);
}
