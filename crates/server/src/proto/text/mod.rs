//! The text protocol: a parsed request (from `protocol::text`) run through `ops`, and
//! its reply composed into the connection's output buffer.
//!
//! Handlers append to the output and never see the connection itself (memcached's
//! take the whole `conn`; we keep the dependency narrow). The retrieval commands,
//! which have the most to do, are in `get.rs`.
//!
//! The handlers are methods of the worker's [`Exec`], written here because they are the
//! text protocol's; they reach the store and the counters only through `ops`'s calls.

mod get;

use protocol::text::{Request, StoreCommand, TuneCommand};
use storage::{KeyHash, MetaArith, Peeked, StoreMode, StoreOutcome};

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
            } => self.arith(incr, key, delta, noreply, out),
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
            Request::RefreshCerts { noreply } => self.refresh_certs_command(noreply, out),
            Request::Shutdown { graceful } => {
                if !self.shared.settings.shutdown_enabled {
                    out.extend_from_slice(b"ERROR: shutdown not enabled\r\n");
                    return Flow::Continue;
                }
                self.request_shutdown(graceful);
                return Flow::Close;
            }
            Request::Stats(args) => self.stats(args, out),
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
            Request::Tune { command, noreply } => self.tune(command, noreply, out),
            Request::DebugTime(op) => out.extend_from_slice(self.debug_time(op)),
        }
        Flow::Continue
    }

    /// `incr`/`decr`: the new value, or why not.
    fn arith(&self, incr: bool, key: &[u8], delta: u64, noreply: bool, out: &mut Vec<u8>) {
        match self.incr_decr(key, delta, incr, 0, None, true) {
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
        }
    }

    /// `refresh_certs`: `OK`, or the error, which memcached writes even under noreply.
    fn refresh_certs_command(&self, noreply: bool, out: &mut Vec<u8>) {
        match self.refresh_certs() {
            Ok(()) => reply(out, noreply, b"OK\r\n"),
            Err(message) => {
                out.extend_from_slice(message.as_bytes());
                out.extend_from_slice(CRLF);
            }
        }
    }

    /// `slabs`, `lru` and `extstore` tuning: the crawler keeps the settings, and the
    /// flash tier takes its own at once.
    fn tune(&self, command: TuneCommand, noreply: bool, out: &mut Vec<u8>) {
        reply(out, noreply, self.shared.crawler.tune(command));
        if let (TuneCommand::Extstore(_), Some(flash)) = (command, self.shared.store.flash()) {
            flash.set_tunables(self.shared.crawler.tunables().ext);
        }
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
