//! The text protocol's retrieval commands (`get`, `gets`, `gat`, `gats`): one key on
//! its own fast path, several with their lookups prefetched in chunks; a pause when the
//! output backs up or a value is being read from flash, and memcached's ways to end
//! (`END`, or an error that drops the replies not yet flushed).
//!
//! Each key's lookup is told to the read hook (`ops/observe.rs`). Whether any observer
//! is on is asked once per command: the usual copy of each loop composes with a
//! visitor that notes nothing for it ([`Note`] for `()`), the observed copy notes each
//! hit ([`Seen`]) and calls the hook.

use protocol::fast::KeyScan;
use protocol::text::{GetCommand, Keys, MAX_KEY_LEN};
use storage::{ItemRef, KeyHash, Located, Lookup, Peeked, Visit, PREFETCH_DISTANCE};

use super::CRLF;
use crate::ops::get::GetTally;
use crate::ops::observe::{Note, Seen};
use crate::ops::Exec;
use crate::stats::observe::Via;

impl Exec<'_> {
    /// `get`/`gets` of one key: [`Exec::get`] without the key iteration and
    /// the pausing between keys. Returns false, having done nothing, when the
    /// general path must run instead (a key too long, a touch, a value on flash), or
    /// [`Exec::get_one_observed`] (an observer of reads is on: the one check this path
    /// makes for the read hook, joined to the others).
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
        if key.len() > MAX_KEY_LEN
            || matches!(command, GetCommand::Gat | GetCommand::Gats)
            || self.observing_reads()
        {
            return false;
        }
        // A copy each for `get` and `gets`, so that neither carries the other's cas
        // checks through the reply.
        if command.returns_cas() {
            self.get_one_as::<true, ()>(key, hashed, out, flush_mark)
        } else {
            self.get_one_as::<false, ()>(key, hashed, out, flush_mark)
        }
    }

    /// [`Exec::get_one`] with an observer of reads on, which tells the read hook: its
    /// own copy, out of line, so that the usual one neither keeps anything of the hit
    /// nor holds a call. False, having done nothing, where `get_one` would be.
    #[cold]
    #[inline(never)]
    pub fn get_one_observed(
        &self,
        command: GetCommand,
        key: &[u8],
        out: &mut Vec<u8>,
        flush_mark: &mut usize,
    ) -> bool {
        if key.len() > MAX_KEY_LEN || matches!(command, GetCommand::Gat | GetCommand::Gats) {
            return false;
        }
        if command.returns_cas() {
            self.get_one_as::<true, Seen>(key, None, out, flush_mark)
        } else {
            self.get_one_as::<false, Seen>(key, None, out, flush_mark)
        }
    }

    /// [`Exec::get_one`] once it runs, with the cas (`gets`) when `CAS`, telling the
    /// read hook what `N` noted.
    #[inline(always)]
    fn get_one_as<const CAS: bool, N: Note>(
        &self,
        key: &[u8],
        hashed: Option<(KeyHash, Peeked)>,
        out: &mut Vec<u8>,
        flush_mark: &mut usize,
    ) -> bool {
        let now = self.now();
        let compose = ComposeValue::<N> {
            out: &mut *out,
            with_cas: CAS,
            discard: false,
            splice_min: self.sink.splice_min,
            exec: self,
            note: std::marker::PhantomData,
        };
        let lookup = if let Some(value) = &self.shared.settings.null_store {
            compose.canned(key, value)
        } else {
            let (h, peeked) = hashed.unwrap_or_else(|| (self.hash(key), Peeked::default()));
            self.lookup(key, h, peeked, None, now, compose)
        };
        if matches!(lookup, Lookup::Miss) && self.flash_deferred() {
            // Its value is on flash: nothing was written or counted, and the request
            // goes the general way, which pauses it until the read is done.
            return false;
        }
        self.count_get(&lookup, false);
        N::observe(self, key, &lookup, Via::Text);
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
        if self.observing_reads() {
            self.get_observed(command, exptime, keys, out, flush_mark, pause_at)
        } else {
            self.get_with::<()>(command, exptime, keys, out, flush_mark, pause_at)
        }
    }

    /// [`Exec::get`] with an observer of reads on: each key told to the read hook. A
    /// copy of its own, so that the usual one makes no per-key check for it.
    #[cold]
    #[inline(never)]
    fn get_observed(
        &self,
        command: GetCommand,
        exptime: i32,
        keys: Keys<'_>,
        out: &mut Vec<u8>,
        flush_mark: &mut usize,
        pause_at: usize,
    ) -> Option<usize> {
        self.get_with::<Seen>(command, exptime, keys, out, flush_mark, pause_at)
    }

    /// [`Exec::get`], each key told to the read hook as `N` notes it.
    #[inline(always)]
    fn get_with<N: Note>(
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
            if !N::OBSERVED && !touch && !self.sink.is_datagram() {
                return if run.with_cas {
                    self.get_prefetched::<N, true, true>(run, keys, out, flush_mark)
                } else {
                    self.get_prefetched::<N, true, false>(run, keys, out, flush_mark)
                };
            }
            return self.get_prefetched::<N, false, false>(run, keys, out, flush_mark);
        }
        self.get_each::<N>(run, keys, out, flush_mark)
    }

    /// [`Exec::get`] one key after another, for one key, the null store, or what is
    /// left of a multi-get once its replies are being discarded.
    fn get_each<N: Note>(
        &self,
        mut run: GetRun,
        mut keys: Keys<'_>,
        out: &mut Vec<u8>,
        flush_mark: &mut usize,
    ) -> Option<usize> {
        while let Some(key) = keys.next() {
            let end = match self.get_key::<N, false, false>(
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
    fn get_prefetched<N: Note, const LEAN: bool, const CAS: bool>(
        &self,
        mut run: GetRun,
        mut keys: Keys<'_>,
        out: &mut Vec<u8>,
        flush_mark: &mut usize,
    ) -> Option<usize> {
        let mut chunk = Chunk::new(&keys);
        while chunk.fill(self) {
            for slot in &chunk.parsed[..chunk.len] {
                let end = match self.get_key::<N, LEAN, CAS>(
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
                            return self.get_each::<N>(run, keys, out, flush_mark);
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

    /// One key of [`Exec::get`]: look it up, compose its reply, count it and tell the
    /// read hook (as `N` notes). A key too long ends the command. `LEAN`: a plain `get`
    /// (or `gets`, `CAS`) from the store, replies not discarded (see
    /// [`Exec::get_prefetched`]).
    #[inline(always)]
    fn get_key<N: Note, const LEAN: bool, const CAS: bool>(
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
        let compose = ComposeValue::<N> {
            out: &mut *out,
            with_cas: if LEAN { CAS } else { run.with_cas },
            discard: !LEAN && run.discard,
            splice_min: self.sink.splice_min,
            exec: self,
            note: std::marker::PhantomData,
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
        // A deferred flash read looks like a miss; only a miss is asked about.
        if matches!(lookup, Lookup::Miss) && self.flash_deferred() {
            // Not answered yet: neither counted nor replied to; the get pauses here.
            return Err(GetEnd::Flash);
        }
        run.tally.add(&lookup);
        N::observe(self, key, &lookup, Via::Text);
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
            // Values read ahead are held until their keys' turn: at most about a
            // multi-get's output budget of them, so that a long multi-get of large
            // values does not hold them all at once. The rest are read at later pauses.
            let mut ahead = 0usize;
            for k in keys.clone() {
                if k.len() > MAX_KEY_LEN {
                    too_long = true;
                    break;
                }
                if ahead >= FLASH_READ_AHEAD_BYTES {
                    continue;
                }
                if let Some(loc) = self.flash_loc_of(k, run.now) {
                    ahead += loc.vlen as usize;
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

/// Bytes of values a paused multi-get reads from flash ahead of its keys' turn.
const FLASH_READ_AHEAD_BYTES: usize = 1 << 20;

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
/// the data, composed in place in the lookup (see [`Visit`]); what `N` keeps of the hit
/// for the read hook is the lookup's output.
struct ComposeValue<'o, N> {
    out: &'o mut Vec<u8>,
    with_cas: bool,
    /// The reply is being discarded (see `discard` in [`Exec::get`]): compose nothing.
    discard: bool,
    /// [`Exec::splice_min`].
    splice_min: usize,
    exec: &'o Exec<'o>,
    note: std::marker::PhantomData<N>,
}

impl<N: Note> ComposeValue<'_, N> {
    /// The null store's answer to any key (`--null-store`): its canned value, a hit.
    #[inline(always)]
    fn canned(self, key: &[u8], value: &[u8]) -> Lookup<N> {
        Lookup::Hit(self.visit(ItemRef {
            key,
            value,
            flags: 0,
            cas: 1,
            origin: storage::Origin::DETACHED,
        }))
    }
}

impl<N: Note> Visit for ComposeValue<'_, N> {
    type Output = N;
    #[inline(always)]
    fn visit(self, item: ItemRef<'_>) -> N {
        let note = N::note(item.value.len(), item.flags);
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
                return note;
            }
            protocol::reply::compose_value(self.out, item.key, item.flags, item.value, cas);
        }
        note
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
