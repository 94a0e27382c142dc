//! The text protocol: a parsed request (from `protocol::text`) run through `ops`, and
//! its reply composed into the connection's output buffer.
//!
//! Handlers append to the output and never see the connection itself (memcached's
//! take the whole `conn`; we keep the dependency narrow). The retrieval commands
//! have the most here: a multi-get prefetches its keys in chunks, pauses when its
//! output backs up, and ends in memcached's ways (`END`, or an error that drops the
//! replies not yet flushed).
//!
//! The handlers are methods of the worker's [`Exec`], written here because they are the
//! text protocol's; they reach the store and the counters only through `ops`'s calls.

use protocol::fast::KeyScan;
use protocol::text::{
    DetailOp, GetCommand, Keys, Request, StatsGroup, StoreCommand, TuneCommand, MAX_KEY_LEN,
};
use storage::{
    ItemRef, KeyHash, Located, Lookup, MetaArith, Peeked, StoreMode, StoreOutcome, Visit,
    PREFETCH_DISTANCE,
};

use crate::ops::get::GetTally;
use crate::ops::stats as stats_report;
use crate::ops::store::Refused;
use crate::ops::Exec;
use crate::proto::Flow;

const CRLF: &[u8] = b"\r\n";

fn push_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

/// Append a reply line unless `noreply`. Inlined, so that a literal line is copied
/// with stores of its known length rather than a call to `memcpy`.
#[inline(always)]
fn reply(out: &mut Vec<u8>, noreply: bool, line: &[u8]) {
    if !noreply {
        out.extend_from_slice(line);
    }
}

impl Exec<'_> {
    /// Execute a request that carries no data block.
    ///
    /// `flush_mark` is where memcached would last have flushed this
    /// connection's output; a `get` with a key over 250 bytes discards
    /// everything after it, as memcached does (see docs/protocol.md).
    pub fn execute(&self, req: Request<'_>, out: &mut Vec<u8>, flush_mark: &mut usize) -> Flow {
        match req {
            Request::Get {
                command,
                exptime,
                keys,
            } => {
                let paused = self.get(command, exptime, keys, out, flush_mark, usize::MAX);
                debug_assert!(paused.is_none());
            }
            Request::Store { .. } => {
                unreachable!("storage commands go through execute_store")
            }
            Request::Meta(m) => return crate::proto::meta::execute(self, m, None, out, flush_mark),
            Request::Delete { key, noreply } => {
                if self.delete(key) {
                    reply(out, noreply, b"DELETED\r\n");
                } else {
                    reply(out, noreply, b"NOT_FOUND\r\n");
                }
            }
            Request::Arith {
                incr,
                key,
                delta,
                noreply,
            } => match self.incr_decr(key, delta, incr, 0, None, true) {
                MetaArith::Value { value, .. } => {
                    if !noreply {
                        push_u64(out, value);
                        out.extend_from_slice(CRLF);
                    }
                }
                MetaArith::NotFound | MetaArith::Exists => reply(out, noreply, b"NOT_FOUND\r\n"),
                MetaArith::NonNumeric => reply(
                    out,
                    noreply,
                    b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
                ),
                MetaArith::NoMemory => reply(out, noreply, b"SERVER_ERROR out of memory\r\n"),
            },
            Request::Touch {
                key,
                exptime,
                noreply,
            } => {
                if self.touch(key, self.shared.clock.realtime(exptime)) {
                    reply(out, noreply, b"TOUCHED\r\n");
                } else {
                    reply(out, noreply, b"NOT_FOUND\r\n");
                }
            }
            Request::FlushAll { delay, noreply } => {
                let at = (delay > 0).then(|| self.shared.clock.realtime(delay));
                if self.flush_all(at, true) {
                    reply(out, noreply, b"OK\r\n");
                } else {
                    reply(out, noreply, b"CLIENT_ERROR flush_all not allowed\r\n");
                }
            }
            Request::Verbosity { level, noreply } => {
                self.set_verbosity(level);
                reply(out, noreply, b"OK\r\n");
            }
            Request::Version => {
                out.extend_from_slice(b"VERSION ");
                out.extend_from_slice(crate::config::VERSION.as_bytes());
                out.extend_from_slice(CRLF);
            }
            Request::Quit => return Flow::CloseAfterWrite,
            Request::RefreshCerts { noreply } => match self.refresh_certs() {
                Ok(()) => reply(out, noreply, b"OK\r\n"),
                Err(message) => {
                    // memcached writes its error message even under noreply.
                    out.extend_from_slice(message.as_bytes());
                    out.extend_from_slice(CRLF);
                }
            },
            Request::Shutdown { graceful } => {
                if !self.shared.settings.shutdown_enabled {
                    out.extend_from_slice(b"ERROR: shutdown not enabled\r\n");
                    return Flow::Continue;
                }
                self.request_shutdown(graceful);
                return Flow::Close;
            }
            Request::Stats(group) => self.stats_command(group, out),
            Request::MetaNoop => {
                out.extend_from_slice(b"MN\r\n");
                *flush_mark = out.len();
            }
            Request::MemLimit { megabytes, noreply } => {
                reply(
                    out,
                    noreply,
                    self.set_memory_limit(u64::from(megabytes)).reply(),
                );
            }
            Request::Invalid { reply: r, noreply } => reply(out, noreply, r.bytes()),
            Request::Close => return Flow::Close,
            Request::Watch { streams, noreply } => {
                if let Some(flow) = self.watch_command(streams, noreply, out) {
                    return flow;
                }
            }
            Request::MetaDump(classes) => {
                if self.admit_dump(classes, out) {
                    return Flow::Dump;
                }
            }
            Request::LruCrawler(command) => {
                out.extend_from_slice(self.shared.crawler.command(command));
            }
            Request::Tune { command, noreply } => {
                reply(out, noreply, self.shared.crawler.tune(command));
                if let (TuneCommand::Extstore(_), Some(flash)) =
                    (command, self.shared.store.flash())
                {
                    flash.set_tunables(self.shared.crawler.tunables().ext);
                }
            }
        }
        Flow::Continue
    }

    /// `watch`, as memcached's `process_watch_command`: refused with `-W`, after other
    /// replies in the same batch, for a stream name it does not know, and past 20
    /// watchers; otherwise the connection becomes a watcher (`OK` comes from the
    /// logger thread, first on its stream).
    #[cold]
    #[inline(never)]
    fn watch_command(
        &self,
        streams: Option<protocol::text::WatchStreams>,
        noreply: bool,
        out: &mut Vec<u8>,
    ) -> Option<Flow> {
        if !self.shared.settings.watch_enabled {
            reply(out, noreply, b"CLIENT_ERROR watch commands not allowed\r\n");
            return None;
        }
        if !out.is_empty() {
            reply(
                out,
                noreply,
                b"ERROR cannot pipeline other commands before watch\r\n",
            );
            return None;
        }
        let Some(streams) = streams else {
            reply(out, noreply, b"ERROR\r\n");
            return None;
        };
        if self.sink.is_datagram() {
            out.extend_from_slice(b"ERROR\r\n");
            return None;
        }
        if !self.shared.watch.reserve() {
            reply(
                out,
                noreply,
                b"WATCHER_TOO_MANY log watcher limit reached\r\n",
            );
            return None;
        }
        Some(Flow::Watch { streams: streams.0 })
    }

    /// `lru_crawler metadump`: whether to run it, having written why not otherwise:
    /// the crawler is disabled, dumps are off (`-X`), the class list is bad, or the request came over UDP, whose
    /// one-datagram-per-reply framing a dump does not fit.
    #[cold]
    #[inline(never)]
    fn admit_dump(&self, classes: Option<protocol::text::DumpClasses>, out: &mut Vec<u8>) -> bool {
        if !self.shared.crawler.enabled() {
            out.extend_from_slice(b"CLIENT_ERROR lru crawler disabled\r\n");
            return false;
        }
        if !self.shared.settings.dump_enabled {
            out.extend_from_slice(b"ERROR metadump not allowed\r\n");
            return false;
        }
        if classes.is_none() {
            out.extend_from_slice(protocol::text::ErrorReply::BadClass.bytes());
            return false;
        }
        if self.sink.is_datagram() {
            out.extend_from_slice(b"ERROR\r\n");
            return false;
        }
        true
    }

    /// `get`/`gets` of one key: [`Exec::get`] without the key iteration and
    /// the pausing between keys. Returns false, having done nothing, when the
    /// general path must run instead (a key too long, `--null-store`, a touch).
    ///
    /// `hashed` is the key's hash and where [`storage::Store::prefetch_record`] saw
    /// it, when a pipelined batch prefetched its keys ahead (see `ahead.rs`).
    /// Inlined at both of its call sites in `Conn::step`: a pipelined get is short
    /// enough that the call itself would be a large part of it.
    #[inline(always)]
    pub fn get_one(
        &self,
        command: GetCommand,
        key: &[u8],
        hashed: Option<(KeyHash, Peeked)>,
        out: &mut Vec<u8>,
        flush_mark: &mut usize,
    ) -> bool {
        if key.len() > MAX_KEY_LEN || matches!(command, GetCommand::Gat | GetCommand::Gats) {
            return false;
        }
        // A copy each for `get` and `gets`, so that neither carries the other's cas
        // checks through the reply.
        if command.returns_cas() {
            self.get_one_as::<true>(key, hashed, out, flush_mark)
        } else {
            self.get_one_as::<false>(key, hashed, out, flush_mark)
        }
    }

    /// [`Exec::get_one`] once it runs, with the cas (`gets`) when `CAS`.
    #[inline(always)]
    fn get_one_as<const CAS: bool>(
        &self,
        key: &[u8],
        hashed: Option<(KeyHash, Peeked)>,
        out: &mut Vec<u8>,
        flush_mark: &mut usize,
    ) -> bool {
        let now = self.now();
        let compose = ComposeValue {
            out: &mut *out,
            with_cas: CAS,
            discard: false,
            splice_min: self.sink.splice_min,
            exec: self,
        };
        let lookup = if let Some(value) = &self.shared.settings.null_store {
            compose.canned(key, value)
        } else {
            let (h, peeked) = hashed.unwrap_or_else(|| (self.hash(key), Peeked::default()));
            self.lookup(key, h, peeked, None, now, compose)
        };
        if self.flash_deferred() {
            // Its value is on flash: nothing was written or counted, and the request
            // goes the general way, which pauses it until the read is done.
            return false;
        }
        self.count_get(key, &lookup, false);
        out.extend_from_slice(b"END\r\n");
        *flush_mark = out.len();
        true
    }

    /// Answer a retrieval command. Stops after a key once the output reaches
    /// `pause_at` bytes, returning where to resume, so that one multi-get of
    /// large values cannot grow the output buffer without bound; the caller
    /// resumes with [`Keys::resume`] once the output has drained.
    pub fn get(
        &self,
        command: GetCommand,
        exptime: i32,
        keys: Keys<'_>,
        out: &mut Vec<u8>,
        flush_mark: &mut usize,
        pause_at: usize,
    ) -> Option<usize> {
        if self.shared.prefixes.enabled() {
            self.get_counted(command, exptime, keys, out, flush_mark, pause_at)
        } else {
            self.get_with::<false>(command, exptime, keys, out, flush_mark, pause_at)
        }
    }

    /// [`Exec::get`] with `stats detail on`: each key counted against its prefix. A
    /// copy of its own, so that the usual one makes no per-key check for it.
    #[cold]
    #[inline(never)]
    fn get_counted(
        &self,
        command: GetCommand,
        exptime: i32,
        keys: Keys<'_>,
        out: &mut Vec<u8>,
        flush_mark: &mut usize,
        pause_at: usize,
    ) -> Option<usize> {
        self.get_with::<true>(command, exptime, keys, out, flush_mark, pause_at)
    }

    /// [`Exec::get`], counting each key against its prefix when `DETAIL`.
    #[inline(always)]
    fn get_with<const DETAIL: bool>(
        &self,
        command: GetCommand,
        exptime: i32,
        keys: Keys<'_>,
        out: &mut Vec<u8>,
        flush_mark: &mut usize,
        pause_at: usize,
    ) -> Option<usize> {
        let touch = matches!(command, GetCommand::Gat | GetCommand::Gats);
        let run = GetRun {
            now: self.shared.clock.now(),
            touch,
            with_cas: command.returns_cas(),
            new_exptime: if touch {
                self.shared.clock.realtime(exptime)
            } else {
                0
            },
            // Over UDP every key ends a message, so every key takes the slower check.
            check_at: if self.sink.is_datagram() { 0 } else { pause_at },
            pause_at,
            discard: false,
            tally: GetTally::default(),
        };
        // Group prefetching (see `get_prefetched`), except for one key (nothing to
        // overlap) or the null store.
        if self.shared.settings.null_store.is_none() && keys.clone().nth(1).is_some() {
            // The usual multi-get has a loop of its own, with what it does not use left
            // out and its choices made once (see `get_prefetched`).
            if !DETAIL && !touch && !self.sink.is_datagram() {
                return if run.with_cas {
                    self.get_prefetched::<false, true, true>(run, keys, out, flush_mark)
                } else {
                    self.get_prefetched::<false, true, false>(run, keys, out, flush_mark)
                };
            }
            return self.get_prefetched::<DETAIL, false, false>(run, keys, out, flush_mark);
        }
        self.get_each::<DETAIL>(run, keys, out, flush_mark)
    }

    /// [`Exec::get`] one key after another, for one key, the null store, or what is
    /// left of a multi-get once its replies are being discarded.
    fn get_each<const DETAIL: bool>(
        &self,
        mut run: GetRun,
        mut keys: Keys<'_>,
        out: &mut Vec<u8>,
        flush_mark: &mut usize,
    ) -> Option<usize> {
        while let Some(key) = keys.next() {
            let end = match self.get_key::<DETAIL, false, false>(
                &mut run,
                key,
                None,
                Peeked::default(),
                out,
            ) {
                Err(GetEnd::Flash) => Some(self.defer_rest(&run, &keys, key)),
                Err(end) => Some(end),
                Ok(()) if out.len() >= run.check_at => self.after_key(&mut run, &keys, out),
                Ok(()) => None,
            };
            if let Some(end) = end {
                return self.end_get(&run, end, out, flush_mark);
            }
        }
        self.end_get(&run, GetEnd::Done, out, flush_mark)
    }

    /// [`Exec::get`] of several keys from the store, with group prefetching: the keys
    /// are taken CHUNK at a time; each chunk is parsed and hashed and its index buckets
    /// prefetched, then its records are found (without locks) and prefetched, and only
    /// then are its keys looked up, so that the cache misses of a chunk overlap. The
    /// lookups read the chunk's slots in place, and `keys` is moved past a key only when
    /// a pause needs its position, rather than handing each slot out by value and
    /// moving `keys` on for every key.
    ///
    /// Without `LEAN` it runs whatever the command: a touch, UDP message ends, the cas
    /// as the run says. With it (a plain `get` or `gets` over TCP, `CAS` saying which),
    /// those checks are not made for every key, nor is the null store's.
    #[inline(always)]
    fn get_prefetched<const DETAIL: bool, const LEAN: bool, const CAS: bool>(
        &self,
        mut run: GetRun,
        mut keys: Keys<'_>,
        out: &mut Vec<u8>,
        flush_mark: &mut usize,
    ) -> Option<usize> {
        let mut chunk = Chunk::new(&keys);
        while chunk.fill(self) {
            for slot in &chunk.parsed[..chunk.len] {
                let end = match self.get_key::<DETAIL, LEAN, CAS>(
                    &mut run,
                    slot.key,
                    Some(slot.hash),
                    slot.peeked,
                    out,
                ) {
                    Err(GetEnd::Flash) => {
                        keys.skip_to(slot.end);
                        Some(self.defer_rest(&run, &keys, slot.key))
                    }
                    Err(end) => Some(end),
                    Ok(()) if out.len() >= run.check_at => {
                        keys.skip_to(slot.end);
                        let end = self.after_key(&mut run, &keys, out);
                        if end.is_none() && run.discard && LEAN {
                            // From here nothing is composed: the plain loop does that.
                            return self.get_each::<DETAIL>(run, keys, out, flush_mark);
                        }
                        end
                    }
                    Ok(()) => None,
                };
                if let Some(end) = end {
                    return self.end_get(&run, end, out, flush_mark);
                }
            }
        }
        self.end_get(&run, GetEnd::Done, out, flush_mark)
    }

    /// One key of [`Exec::get`]: look it up, compose its reply and count it. A key too
    /// long ends the command. `LEAN`: a plain `get` (or `gets`, `CAS`) from the store,
    /// replies not discarded (see [`Exec::get_prefetched`]).
    #[inline(always)]
    fn get_key<const DETAIL: bool, const LEAN: bool, const CAS: bool>(
        &self,
        run: &mut GetRun,
        key: &[u8],
        hashed: Option<KeyHash>,
        peeked: Peeked,
        out: &mut Vec<u8>,
    ) -> Result<(), GetEnd> {
        if key.len() > MAX_KEY_LEN {
            return Err(GetEnd::TooLong);
        }
        let compose = ComposeValue {
            out: &mut *out,
            with_cas: if LEAN { CAS } else { run.with_cas },
            discard: !LEAN && run.discard,
            splice_min: self.sink.splice_min,
            exec: self,
        };
        let null_store = if LEAN {
            None
        } else {
            self.shared.settings.null_store.as_ref()
        };
        let lookup = if let Some(value) = null_store {
            compose.canned(key, value)
        } else {
            let h = hashed.unwrap_or_else(|| self.hash(key));
            let touch = if !LEAN && run.touch {
                Some(run.new_exptime)
            } else {
                None
            };
            self.lookup(key, h, peeked, touch, run.now, compose)
        };
        if self.flash_deferred() {
            // Not answered yet: neither counted nor replied to; the get pauses here.
            return Err(GetEnd::Flash);
        }
        // A hit bumps one counter: the lookups are the hits and misses together.
        let hit = matches!(lookup, Lookup::Hit(()));
        run.tally.add(&lookup);
        if DETAIL {
            self.record_get(key, hit);
        }
        Ok(())
    }

    /// After a key whose reply took the output to [`GetRun::check_at`] (every key over
    /// UDP): end its UDP message, and pause when the output is past `pause_at` and keys
    /// remain. `keys` is positioned after the key.
    ///
    /// A pause is not taken when a later key is too long: memcached would discard this
    /// command's replies anyway, so the lookups still run (for their touches and
    /// counters) but nothing more is written and nothing pauses.
    #[inline(never)]
    fn after_key(&self, run: &mut GetRun, keys: &Keys<'_>, out: &[u8]) -> Option<GetEnd> {
        // `has_more` scans the line, so ask only when the answer matters.
        if run.discard || !keys.has_more() {
            return None;
        }
        self.sink.end_message(out.len(), false);
        if out.len() >= run.pause_at {
            if keys.clone().any(|k| k.len() > MAX_KEY_LEN) {
                run.discard = true;
            } else {
                return Some(GetEnd::Pause(keys.position()));
            }
        }
        None
    }

    /// Whether a lookup of this turn deferred a flash read (`reply/flash.rs`).
    #[inline(always)]
    pub fn flash_deferred(&self) -> bool {
        self.sink.flash.is_some_and(|f| f.borrow().deferred())
    }

    /// A get paused at `key` for its flash read; `keys` is positioned after it. The
    /// other keys' values on flash are wanted too, so that every read of the command
    /// goes out at once (they overlap instead of one per resume), and the get resumes
    /// at `key`.
    #[cold]
    #[inline(never)]
    fn defer_rest(&self, run: &GetRun, keys: &Keys<'_>, key: &[u8]) -> GetEnd {
        if let Some(reads) = self.sink.flash {
            let mut reads = reads.borrow_mut();
            let mut too_long = false;
            for k in keys.clone() {
                if k.len() > MAX_KEY_LEN {
                    too_long = true;
                    break;
                }
                if let Some(loc) = self.flash_loc_of(k, run.now) {
                    reads.want(k, loc);
                }
            }
            if too_long {
                // The command ends in an error that drops its replies: its reads are
                // not made (memcached aborts the ones it queued, and counts them).
                self.flash_aborted(reads.abort());
                return GetEnd::TooLong;
            }
        }
        GetEnd::FlashAt(keys.position() - key.len())
    }

    /// Finish [`Exec::get`]: count its lookups, then end the reply as `end` says.
    fn end_get(
        &self,
        run: &GetRun,
        end: GetEnd,
        out: &mut Vec<u8>,
        flush_mark: &mut usize,
    ) -> Option<usize> {
        self.count_gets(&run.tally, run.touch);
        match end {
            GetEnd::Done => {
                out.extend_from_slice(b"END\r\n");
                *flush_mark = out.len();
                None
            }
            GetEnd::Pause(at) | GetEnd::FlashAt(at) => Some(at),
            GetEnd::Flash => unreachable!("the get loops give a flash pause its position"),
            GetEnd::TooLong => {
                // memcached drops every reply not yet written, then errors.
                out.truncate(*flush_mark);
                self.drop_output_after(*flush_mark);
                out.extend_from_slice(b"CLIENT_ERROR bad command line format\r\n");
                None
            }
        }
    }

    /// Execute a storage command whose data block has fully arrived.
    #[inline(never)]
    pub fn execute_store(&self, request: StoreRequest<'_>, out: &mut Vec<u8>) {
        self.execute_store_inlined(request, out);
    }

    /// [`Exec::execute_store`] inlined where it is called: for a `set` parsed ahead
    /// (`ahead.rs`) the command, the cas and `noreply` are constants, and the command's
    /// dispatch and those checks fold away, which a call would keep.
    #[inline(always)]
    pub fn execute_store_inlined(&self, request: StoreRequest<'_>, out: &mut Vec<u8>) {
        let (command, key, noreply, data) =
            (request.command, request.key, request.noreply, request.data);
        self.begin_store(key, true);
        let len = data.len() - 2;
        if &data[len..] != CRLF {
            reply(out, noreply, b"CLIENT_ERROR bad data chunk\r\n");
            return;
        }
        let mode = match command {
            StoreCommand::Set => StoreMode::Set,
            StoreCommand::Add => StoreMode::Add,
            StoreCommand::Replace => StoreMode::Replace,
            StoreCommand::Append => StoreMode::Append,
            StoreCommand::Prepend => StoreMode::Prepend,
            StoreCommand::Cas => StoreMode::Cas(self.shared.settings.swap_cas(request.cas)),
        };
        let exptime = self.shared.clock.realtime(request.exptime);
        let (outcome, _) = self.store_value(
            mode,
            key,
            request.hashed,
            request.flags,
            exptime,
            &data[..len],
            command == StoreCommand::Set,
        );
        // Each arm writes its own literal: through one `&[u8]` chosen by the match, the
        // copy was a call to `memcpy`.
        match outcome {
            StoreOutcome::Stored => reply(out, noreply, b"STORED\r\n"),
            StoreOutcome::NotStored => reply(out, noreply, b"NOT_STORED\r\n"),
            StoreOutcome::Exists => reply(out, noreply, b"EXISTS\r\n"),
            StoreOutcome::NotFound => reply(out, noreply, b"NOT_FOUND\r\n"),
            StoreOutcome::TooLarge => {
                reply(out, noreply, b"SERVER_ERROR object too large for cache\r\n");
            }
            StoreOutcome::NoMemory => reply(
                out,
                noreply,
                b"SERVER_ERROR out of memory storing object\r\n",
            ),
        }
    }

    /// A storage command refused before its data is read: the value can
    /// never fit. The caller swallows the data block.
    pub fn reject_too_large(
        &self,
        command: StoreCommand,
        key: &[u8],
        noreply: bool,
        out: &mut Vec<u8>,
    ) {
        self.refuse_too_large(
            key,
            Refused {
                counted: true,
                detail: true,
                unlink_old: command == StoreCommand::Set,
            },
        );
        reply(out, noreply, b"SERVER_ERROR object too large for cache\r\n");
    }

    fn stats_command(&self, group: StatsGroup, out: &mut Vec<u8>) {
        match group {
            StatsGroup::General => stats_report::general(self.shared, out),
            StatsGroup::Settings => stats_report::settings(self.shared, out),
            StatsGroup::Reset => {
                self.reset_stats();
                out.extend_from_slice(b"RESET\r\n");
            }
            StatsGroup::Detail(op @ (DetailOp::On | DetailOp::Off)) => {
                self.set_detail(op == DetailOp::On);
                out.extend_from_slice(b"OK\r\n");
            }
            StatsGroup::Detail(DetailOp::Dump) => self.dump_detail(out),
            StatsGroup::Slabs => crate::ops::slabs::slabs(self.shared, out),
            StatsGroup::Items => crate::ops::slabs::items(self.shared, out),
            StatsGroup::SizesEnable => crate::ops::slabs::set_sizes(self.shared, true, out),
            StatsGroup::SizesDisable => crate::ops::slabs::set_sizes(self.shared, false, out),
            StatsGroup::Cachedump(args) => crate::ops::slabs::cachedump(self.shared, args, out),
            // Over UDP (the only way here: `Conn::step` answers it on a connection,
            // which knows its descriptor), no connection is the one asking.
            StatsGroup::Conns => self.shared.conns.report(-1, self.shared.clock.now(), out),
            StatsGroup::Sizes => crate::ops::slabs::sizes(self.shared, out),
            StatsGroup::Latency => stats_report::latency(self.shared, out),
            StatsGroup::Extstore => stats_report::extstore(self.shared, out),
        }
    }
}

/// The state of one [`Exec::get`] across its keys.
struct GetRun {
    now: storage::RelTime,
    /// `gat`/`gats`: each hit also gets `new_exptime`.
    touch: bool,
    with_cas: bool,
    new_exptime: storage::RelTime,
    /// After a key, the output length from which [`Exec::after_key`] runs: `pause_at`,
    /// or 0 over UDP.
    check_at: usize,
    pause_at: usize,
    /// Set once the output is past `pause_at` but a later key is too long (see
    /// [`Exec::after_key`]): nothing more is composed.
    discard: bool,
    tally: GetTally,
}

/// How an [`Exec::get`] ends.
enum GetEnd {
    /// Every key answered: `END`.
    Done,
    /// Paused with the output full; resume at this position of the line.
    Pause(usize),
    /// A key over 250 bytes: memcached's error, and the replies not yet flushed dropped.
    TooLong,
    /// A key's value is being read from flash: pause at that key (its position is
    /// filled in by the loop, which knows it) until the read is done.
    Flash,
    /// [`GetEnd::Flash`] with the key's position in the line.
    FlashAt(usize),
}

/// A storage command whose data block (`len` bytes and what should be `\r\n`) has
/// fully arrived, for [`Exec::execute_store`].
pub struct StoreRequest<'a> {
    pub command: StoreCommand,
    pub key: &'a [u8],
    pub flags: u32,
    pub exptime: i32,
    pub cas: u64,
    pub noreply: bool,
    pub data: &'a [u8],
    /// The key's hash and where [`storage::Store::prefetch_record`] saw it, when a
    /// pipelined batch prefetched its keys ahead (see `ahead.rs`).
    pub hashed: Option<(KeyHash, Peeked)>,
}

/// Keys a multi-get prefetches together: each stage issues this many misses back to
/// back, enough to cover a memory access and within a core's queue of misses.
const CHUNK: usize = 2 * PREFETCH_DISTANCE;

/// One key of a [`Chunk`].
#[derive(Clone, Copy)]
struct Parsed<'a> {
    key: &'a [u8],
    /// [`Keys::position`] after the key.
    end: usize,
    /// The key's hash; the default for a key too long to look up.
    hash: KeyHash,
    /// Where the first stage found the key's bucket.
    at: Located<'a>,
    /// Where the record stage saw the key's entry.
    peeked: Peeked,
}

/// The keys of a multi-get, [`CHUNK`] at a time, prefetched in two stages before the
/// first of them is looked up: parse and hash each key (the only parse and hash it
/// gets) and prefetch its index bucket; then, the buckets having arrived meanwhile,
/// find each key's entry without the lock and prefetch its record.
struct Chunk<'a> {
    keys: KeyScan<'a>,
    line: &'a [u8],
    parsed: [Parsed<'a>; CHUNK],
    len: usize,
}

impl<'a> Chunk<'a> {
    fn new(keys: &Keys<'a>) -> Self {
        let (keys, line) = keys.scan();
        Chunk {
            keys,
            line,
            parsed: [Parsed {
                key: &[],
                end: 0,
                hash: KeyHash::default(),
                at: Located::NONE,
                peeked: Peeked::default(),
            }; CHUNK],
            len: 0,
        }
    }

    /// Parse and prefetch the next chunk of keys; false when none are left.
    #[inline]
    fn fill(&mut self, exec: &Exec<'a>) -> bool {
        // The cursor and count in locals, so that they stay in registers.
        let mut keys = self.keys.clone();
        let mut n = 0;
        for p in &mut self.parsed {
            let Some((start, end)) = keys.next_key() else {
                break;
            };
            let key = &self.line[start..end];
            // Too long: the lookup loop reports it and never gets further.
            let mut hash = KeyHash::default();
            let mut at = Located::NONE;
            if key.len() <= MAX_KEY_LEN {
                hash = exec.hash(key);
                at = exec.locate(hash);
            }
            p.key = key;
            p.end = end;
            p.hash = hash;
            p.at = at;
            n += 1;
        }
        self.keys = keys;
        self.len = n;
        for p in &mut self.parsed[..n] {
            // A key too long to look up has nothing located, so its peek finds nothing.
            p.peeked = exec.prefetch_located(p.at, p.hash, p.key.len());
        }
        n > 0
    }
}

/// A get's hit: `VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n`, one copy of
/// the data, composed in place in the lookup (see [`Visit`]).
struct ComposeValue<'o> {
    out: &'o mut Vec<u8>,
    with_cas: bool,
    /// The reply is being discarded (see `discard` in [`Exec::get`]): compose nothing.
    discard: bool,
    /// [`Exec::splice_min`].
    splice_min: usize,
    exec: &'o Exec<'o>,
}

impl ComposeValue<'_> {
    /// The null store's answer to any key (`--null-store`): its canned value, a hit.
    #[inline(always)]
    fn canned(self, key: &[u8], value: &[u8]) -> Lookup<()> {
        self.visit(ItemRef {
            key,
            value,
            flags: 0,
            cas: 1,
            origin: storage::Origin::DETACHED,
        });
        Lookup::Hit(())
    }
}

impl Visit for ComposeValue<'_> {
    type Output = ();
    #[inline(always)]
    fn visit(self, item: ItemRef<'_>) {
        if !self.discard {
            let cas = self
                .with_cas
                .then(|| self.exec.shared.settings.item_cas(item.cas));
            if item.value.len() >= self.splice_min
                && splice_value(
                    self.exec,
                    self.out,
                    item.key,
                    item.flags,
                    item.value,
                    item.origin,
                    cas,
                )
            {
                return;
            }
            protocol::reply::compose_value(self.out, item.key, item.flags, item.value, cas);
        }
    }

    /// A value on flash: read off the worker when it has I/O threads (the get pauses
    /// at this key and resumes once the value is read), else now.
    #[inline]
    fn flash(&mut self, key: &[u8], loc: storage::StubLoc) -> storage::FlashAction {
        match self.exec.sink.flash {
            Some(reads) if !self.discard => reads.borrow_mut().take_or_defer(key, loc),
            _ => storage::FlashAction::ReadNow,
        }
    }
}

/// Compose a hit's header and trailer and pin its value to be sent in place, between
/// them (see `splice.rs`). False, having written nothing, when the value must be copied:
/// the budget is spent, or the store refused the pin.
#[cold]
#[inline(never)]
// The item comes in pieces, not as `&ItemRef`: a reference would make the hot path
// store the whole item on the stack for every key, spliced or not.
#[allow(clippy::too_many_arguments)]
fn splice_value(
    exec: &Exec<'_>,
    out: &mut Vec<u8>,
    key: &[u8],
    flags: u32,
    value: &[u8],
    origin: storage::Origin,
    cas: Option<u64>,
) -> bool {
    let Some(pin) = exec.value_pin(value, origin) else {
        return false;
    };
    protocol::reply::compose_value_head(out, key, flags, value.len(), cas);
    exec.put_value(out, value, Some(pin));
    out.extend_from_slice(CRLF);
    true
}
