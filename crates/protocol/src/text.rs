//! Server side of the memcached text protocol.
//!
//! This module frames request lines and parses them in place, the way
//! memcached 1.6's `proto_text.c` does, so that every malformed line gets the
//! reply memcached gives:
//!
//! ```text
//!   read buffer:  s e t ␠ k ␠ 0 ␠ 0 ␠ 5 \r \n h e l l o \r \n g e t ...
//!                 └──────── line ──────┘       └─ data ─┘
//!   frame_line()  -> Line { end, next }     (line without "\r\n", next line start)
//!   parse_request(line) -> Request::Store { key: "k", len: 5, .. }
//!   the caller waits for len + 2 data bytes, then checks the trailing "\r\n".
//! ```
//!
//! Tokens are split on the ASCII space only (not tabs), at most
//! [`MAX_TOKENS`]` - 1` per pass, exactly as memcached's `tokenize_command`.
//! Numbers are parsed with the semantics of memcached's `safe_strto*`
//! helpers, which wrap C's `strtoul`/`strtol`, including their quirks
//! (leading whitespace and `+` accepted, 32-bit truncation of 64-bit
//! results); see `docs/protocol.md`.

use memchr::{memchr, memchr2};

use crate::meta::{parse_meta, MetaCommand, MetaRequest};

/// Longest key memcached accepts (`KEY_MAX_LENGTH`).
pub const MAX_KEY_LEN: usize = 250;
/// memcached's `MAX_TOKENS`: 23 real tokens plus the terminal one.
pub const MAX_TOKENS: usize = 24;
/// memcached closes a connection whose buffered bytes hold no newline past
/// this many bytes, unless the line starts with `get ` or `gets `.
pub const MAX_UNTERMINATED_LINE_BYTES: usize = 2048;
/// ferrocache's cap on an unterminated `get`/`gets` line (memcached has none;
/// we bound per-connection memory instead, see `docs/protocol.md`).
pub const MAX_GET_LINE_BYTES: usize = 4 * 1024 * 1024;

/// Result of looking for one request line at the start of a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineFrame {
    /// A whole line: `buf[..end]` is the command (terminator, and anything
    /// from a NUL byte on, removed); the next line starts at `buf[next]`.
    Line { end: usize, next: usize },
    /// No newline yet; read more.
    Incomplete,
    /// The peer sent a long unterminated line that cannot be a multi-get:
    /// memcached closes the connection.
    Close,
}

/// Find the first request line in `buf`, as memcached's
/// `try_read_command_ascii` does.
#[must_use]
pub fn frame_line(buf: &[u8]) -> LineFrame {
    // One pass finds the newline, or a NUL before it (rare: memcached treats
    // the line as a C string, so a NUL ends the command early).
    let first = memchr2(b'\n', 0, buf);
    let (nl, nul) = match first {
        Some(i) if buf[i] == b'\n' => (Some(i), None),
        Some(i) => (memchr(b'\n', &buf[i..]).map(|n| i + n), Some(i)),
        None => (None, None),
    };
    let Some(nl) = nl else {
        if buf.len() > MAX_UNTERMINATED_LINE_BYTES {
            let spaces = buf.iter().take_while(|&&b| b == b' ').count();
            let rest = &buf[spaces..];
            if spaces > 100
                || !(rest.starts_with(b"get ") || rest.starts_with(b"gets "))
                || buf.len() > MAX_GET_LINE_BYTES
            {
                return LineFrame::Close;
            }
        }
        return LineFrame::Incomplete;
    };
    let mut end = nl;
    if nl > 1 && buf[nl - 1] == b'\r' {
        end -= 1;
    }
    if let Some(nul) = nul {
        end = end.min(nul);
    }
    LineFrame::Line { end, next: nl + 1 }
}

/// The tokens of (a part of) one line, as byte ranges into that line.
#[derive(Clone, Debug)]
pub struct Tokens<'a> {
    line: &'a [u8],
    spans: [(u32, u32); MAX_TOKENS],
    len: usize,
    /// Start of the text not yet tokenized, when the token limit was hit.
    rest: Option<usize>,
}

impl<'a> Tokens<'a> {
    /// Split `line[from..]` on spaces, at most `MAX_TOKENS - 1` tokens.
    #[must_use]
    pub fn new(line: &'a [u8], from: usize) -> Self {
        let mut t = Tokens {
            line,
            spans: [(0, 0); MAX_TOKENS],
            len: 0,
            rest: None,
        };
        let mut s = from;
        let mut i = from;
        while i < line.len() {
            if line[i] == b' ' {
                if s != i {
                    t.spans[t.len] = (s as u32, i as u32);
                    t.len += 1;
                    if t.len == MAX_TOKENS - 1 {
                        if i + 1 < line.len() {
                            t.rest = Some(i + 1);
                        }
                        return t;
                    }
                }
                s = i + 1;
            }
            i += 1;
        }
        if s != i {
            t.spans[t.len] = (s as u32, i as u32);
            t.len += 1;
        }
        t
    }

    /// Number of real tokens (memcached's `ntokens` is this plus one).
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the line held no token at all.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Token `i`; an empty slice past the end (like memcached's terminal token).
    #[must_use]
    pub fn get(&self, i: usize) -> &'a [u8] {
        if i < self.len {
            let (s, e) = self.spans[i];
            &self.line[s as usize..e as usize]
        } else {
            &[]
        }
    }

    /// memcached's `set_noreply_maybe`: is the last token `noreply`?
    #[must_use]
    pub fn last_is_noreply(&self) -> bool {
        self.len > 0 && self.get(self.len - 1) == b"noreply"
    }

    /// Where the untokenized remainder starts, if the token limit was hit.
    #[must_use]
    pub fn rest(&self) -> Option<usize> {
        self.rest
    }
}

/// The keys of a retrieval command, in order, split on spaces.
///
/// memcached tokenizes long multi-gets 23 tokens at a time; splitting on
/// spaces yields the same keys in the same order.
#[derive(Clone, Debug)]
pub struct Keys<'a> {
    line: &'a [u8],
    pos: usize,
    /// `line[pos..]` is known to be exactly one key (the framer saw it).
    single: bool,
}

impl<'a> Keys<'a> {
    fn new(line: &'a [u8], pos: usize) -> Self {
        Keys {
            line,
            pos,
            single: false,
        }
    }

    /// Resume iterating `line` at byte `pos` (from [`Keys::position`]).
    #[must_use]
    pub fn resume(line: &'a [u8], pos: usize) -> Self {
        Self::new(line, pos)
    }

    /// The one key `line[pos..]`, already delimited by the caller (no space
    /// in it, nothing after it), so it is not scanned again.
    #[must_use]
    pub fn single(line: &'a [u8], pos: usize) -> Self {
        debug_assert!(pos < line.len() && !line[pos..].contains(&b' '));
        Keys {
            line,
            pos,
            single: true,
        }
    }

    /// The key of a [`Keys::single`] not yet taken.
    #[inline]
    #[must_use]
    pub fn single_key(&self) -> Option<&'a [u8]> {
        self.single
            .then(|| &self.line[self.pos.min(self.line.len())..])
    }

    /// The keys from here on, found a block of the line at a time (the same keys; see
    /// [`crate::fast::KeyScan`]), with the line they are in.
    #[must_use]
    pub fn scan(&self) -> (crate::fast::KeyScan<'a>, &'a [u8]) {
        (crate::fast::KeyScan::new(self.line, self.pos), self.line)
    }

    /// Where the next key search starts, to resume later.
    #[must_use]
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Continue after a key that another cursor over the same line (a clone of this
    /// one) has parsed already: `pos` is that cursor's [`Keys::position`] after it.
    #[inline]
    pub fn skip_to(&mut self, pos: usize) {
        debug_assert!(pos >= self.pos && pos <= self.line.len());
        self.pos = pos;
        self.single = false;
    }

    /// Whether another key follows.
    #[must_use]
    pub fn has_more(&self) -> bool {
        self.line[self.pos.min(self.line.len())..]
            .iter()
            .any(|&b| b != b' ')
    }
}

impl<'a> Iterator for Keys<'a> {
    type Item = &'a [u8];

    #[inline(always)]
    fn next(&mut self) -> Option<&'a [u8]> {
        let line = self.line;
        if self.single {
            self.single = false;
            let key = &line[self.pos.min(line.len())..];
            self.pos = line.len();
            return Some(key);
        }
        while self.pos < line.len() && line[self.pos] == b' ' {
            self.pos += 1;
        }
        if self.pos >= line.len() {
            return None;
        }
        let start = self.pos;
        // Keys are short: a word-at-a-time scan beats a `memchr` call here.
        let end = crate::fast::find_byte_or_end(line, start, b' ');
        self.pos = end;
        Some(&line[start..end])
    }
}

/// The storage commands, which carry a data block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreCommand {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
}

/// The retrieval commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GetCommand {
    Get,
    Gets,
    Gat,
    Gats,
}

impl GetCommand {
    /// Whether `VALUE` lines carry the cas unique.
    #[must_use]
    pub fn returns_cas(self) -> bool {
        matches!(self, GetCommand::Gets | GetCommand::Gats)
    }
}

/// A reply that a line earns on its own, before touching any data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorReply {
    /// `ERROR`: unknown command or wrong token count.
    Error,
    /// `CLIENT_ERROR bad command line format`
    BadFormat,
    /// `CLIENT_ERROR invalid exptime argument`
    InvalidExptime,
    /// `CLIENT_ERROR invalid numeric delta argument`
    InvalidDelta,
    /// The delete usage error.
    DeleteUsage,
    /// `CLIENT_ERROR bad command line` (stats cachedump without arguments).
    BadCommandLine,
    /// `ERROR: shutdown not enabled`
    ShutdownDisabled,
    /// `CLIENT_ERROR invalid shutdown mode`
    ShutdownMode,
    /// `CLIENT_ERROR usage: stats detail on|off|dump`
    StatsDetailUsage,
    /// `BADCLASS invalid class id` (`lru_crawler metadump`)
    BadClass,
    /// `CLIENT_ERROR sleep must be one second or less` (`lru_crawler sleep`)
    CrawlerSleepTooLong,
}

impl ErrorReply {
    /// The reply line, terminator included.
    #[must_use]
    pub fn bytes(self) -> &'static [u8] {
        match self {
            ErrorReply::Error => b"ERROR\r\n",
            ErrorReply::BadFormat => b"CLIENT_ERROR bad command line format\r\n",
            ErrorReply::InvalidExptime => b"CLIENT_ERROR invalid exptime argument\r\n",
            ErrorReply::InvalidDelta => b"CLIENT_ERROR invalid numeric delta argument\r\n",
            ErrorReply::DeleteUsage => {
                b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n"
            }
            ErrorReply::BadCommandLine => b"CLIENT_ERROR bad command line\r\n",
            ErrorReply::ShutdownDisabled => b"ERROR: shutdown not enabled\r\n",
            ErrorReply::ShutdownMode => b"CLIENT_ERROR invalid shutdown mode\r\n",
            ErrorReply::StatsDetailUsage => b"CLIENT_ERROR usage: stats detail on|off|dump\r\n",
            ErrorReply::BadClass => b"BADCLASS invalid class id\r\n",
            ErrorReply::CrawlerSleepTooLong => b"CLIENT_ERROR sleep must be one second or less\r\n",
        }
    }
}

/// The `stats` sub-commands ferrocache knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatsGroup {
    General,
    Settings,
    Reset,
    /// `stats detail on|off|dump`
    Detail(DetailOp),
    /// `stats slabs`: memcached's two totals (there are no slab classes here).
    Slabs,
    /// `stats sizes`: memcached's reply while size tracking is off.
    Sizes,
    /// `stats conns`: the open sockets.
    Conns,
    /// memcached-internal groups (`items`, `cachedump`): answered with an empty list.
    Internal,
}

/// Argument of `stats detail`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DetailOp {
    On,
    Off,
    Dump,
}

/// One parsed request line.
#[derive(Clone, Debug)]
pub enum Request<'a> {
    /// `get|gets|gat|gats [exptime] key...`
    Get {
        command: GetCommand,
        /// Raw exptime for gat/gats (0 for get/gets).
        exptime: i32,
        keys: Keys<'a>,
    },
    /// A storage command; `len` data bytes plus `\r\n` follow the line.
    Store {
        command: StoreCommand,
        key: &'a [u8],
        flags: u32,
        exptime: i32,
        len: usize,
        cas: u64,
        noreply: bool,
    },
    Delete {
        key: &'a [u8],
        noreply: bool,
    },
    Arith {
        incr: bool,
        key: &'a [u8],
        delta: u64,
        noreply: bool,
    },
    Touch {
        key: &'a [u8],
        exptime: i32,
        noreply: bool,
    },
    /// `flush_all [delay] [noreply]`; `delay` is 0 when absent.
    FlushAll {
        delay: i32,
        noreply: bool,
    },
    Verbosity {
        level: u32,
        noreply: bool,
    },
    Version,
    Quit,
    /// `shutdown [graceful]`
    Shutdown {
        graceful: bool,
    },
    Stats(StatsGroup),
    /// `mn`: meta no-op; memcached also flushes its output here.
    MetaNoop,
    /// `mg ms md ma me`, parsed by [`crate::meta`].
    Meta(MetaRequest<'a>),
    /// `lru_crawler metadump all|hash|<class>[,<class>...]`: list the live items;
    /// `None` for a bad class list (`BADCLASS invalid class id`, unless dumps are off).
    MetaDump(Option<DumpClasses>),
    /// `cache_memlimit <megabytes> [noreply]`
    MemLimit {
        megabytes: u32,
        noreply: bool,
    },
    /// `lru_crawler enable|disable|sleep N|tocrawl N|crawl <classes>` (not `metadump`).
    LruCrawler(CrawlerCommand),
    /// `slabs reassign|automove ...` and `lru tune|mode|temp_ttl ...`; `noreply`
    /// suppresses whatever they answer, errors included, as in memcached.
    Tune {
        command: TuneCommand,
        noreply: bool,
    },
    /// A reply decided by the line alone; `noreply` suppresses it.
    Invalid {
        reply: ErrorReply,
        noreply: bool,
    },
    /// memcached closes connections that look like HTTP requests.
    Close,
}

/// Which items `lru_crawler metadump` lists: those whose memcached slab class (1 to 63)
/// is set in the mask; `all` and `hash` set every bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DumpClasses(pub u64);

impl DumpClasses {
    /// Every class.
    pub const ALL: DumpClasses = DumpClasses(!1);

    /// Whether class `id` is asked for.
    #[must_use]
    pub fn contains(self, id: u32) -> bool {
        id < 64 && self.0 & (1 << id) != 0
    }
}

/// `lru_crawler` sub-commands other than `metadump`, as memcached 1.6.18 parses them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CrawlerCommand {
    Enable,
    Disable,
    /// `sleep <microseconds>`, at most one second (checked here).
    Sleep(u32),
    /// `tocrawl <items>`: items checked per crawl at most, 0 for no limit.
    Tocrawl(u32),
    /// `crawl <classes>`: reclaim expired items now. [`CrawlTarget`] says what the
    /// class list was.
    Crawl(CrawlTarget),
}

/// The class list of `lru_crawler crawl`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrawlTarget {
    Classes(DumpClasses),
    /// A bad class id: `BADCLASS invalid class id`.
    BadClass,
    /// `hash`, which only `metadump` takes: `ERROR an unknown error happened`.
    Hash,
}

/// `slabs` and `lru` tuning commands. Their arguments are kept as memcached reads
/// them; the replies are decided where the settings live.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TuneCommand {
    /// `slabs reassign <src> <dst>`; `None` when either is not a number.
    SlabsReassign(Option<(i32, i32)>),
    /// `slabs automove <0|1|2>`.
    SlabsAutomove(u32),
    /// `slabs automove ratio <ratio>`.
    SlabsAutomoveRatio(f64),
    /// `lru tune <hot pct> <warm pct> <hot max factor> <warm max factor>`.
    LruTune {
        hot_pct: u32,
        warm_pct: u32,
        hot_factor: f64,
        warm_factor: f64,
    },
    /// `lru mode flat|segmented`: `Some(true)` for segmented, `None` for another word.
    LruMode(Option<bool>),
    /// `lru temp_ttl <seconds>`; `None` when not a number.
    LruTempTtl(Option<i32>),
}

/// memcached's class list: `all`, `hash`, or class ids joined by commas (empty items
/// skipped, each as `safe_strtoul` reads it, 1 to 63); `None` for anything else.
fn parse_dump_classes<'a>(arg: &[u8]) -> Request<'a> {
    if arg == b"all" || arg == b"hash" {
        return Request::MetaDump(Some(DumpClasses::ALL));
    }
    let mut mask = 0u64;
    for id in arg.split(|&b| b == b',').filter(|id| !id.is_empty()) {
        match safe_strtoul(id) {
            Some(id @ 1..=63) => mask |= 1 << id,
            _ => return Request::MetaDump(None),
        }
    }
    Request::MetaDump(Some(DumpClasses(mask)))
}

fn invalid<'a>(reply: ErrorReply) -> Request<'a> {
    Request::Invalid {
        reply,
        noreply: false,
    }
}

/// Parse one request line (as framed by [`frame_line`]).
#[must_use]
pub fn parse_request(line: &[u8]) -> Request<'_> {
    if let Some(fast) = parse_plain_get(line) {
        return fast;
    }
    let t = Tokens::new(line, 0);
    let ntokens = t.len() + 1;
    let cmd = t.get(0);
    if t.is_empty() || cmd.len() < 2 {
        return invalid(ErrorReply::Error);
    }
    match (cmd.len(), cmd) {
        (2, b"mn") => Request::MetaNoop,
        (2, b"mg") => parse_meta(MetaCommand::Get, &t, line),
        (2, b"ms") => parse_meta(MetaCommand::Set, &t, line),
        (2, b"md") => parse_meta(MetaCommand::Delete, &t, line),
        (2, b"ma") => parse_meta(MetaCommand::Arithmetic, &t, line),
        (2, b"me") => parse_meta(MetaCommand::Debug, &t, line),
        (3, b"get") => parse_get(&t, line, GetCommand::Get),
        (4, b"gets") => parse_get(&t, line, GetCommand::Gets),
        (3, b"gat") => parse_get(&t, line, GetCommand::Gat),
        (4, b"gats") => parse_get(&t, line, GetCommand::Gats),
        (4, b"bget") => parse_get(&t, line, GetCommand::Get),
        (3, b"set") => parse_store(&t, StoreCommand::Set),
        (3, b"add") => parse_store(&t, StoreCommand::Add),
        (7, b"replace") => parse_store(&t, StoreCommand::Replace),
        (6, b"append") => parse_store(&t, StoreCommand::Append),
        (7, b"prepend") => parse_store(&t, StoreCommand::Prepend),
        (3, b"cas") => parse_store(&t, StoreCommand::Cas),
        (6, b"delete") => parse_delete(&t),
        (4, b"incr") => parse_arith(&t, true),
        (4, b"decr") => parse_arith(&t, false),
        (5, b"touch") => parse_touch(&t),
        (5, b"stats") => parse_stats(&t),
        (9, b"flush_all") => parse_flush_all(&t),
        (7, b"version") => Request::Version,
        (4, b"quit") => Request::Quit,
        (8, b"shutdown") => match (ntokens, t.get(1)) {
            (2, _) => Request::Shutdown { graceful: false },
            (3, b"graceful") => Request::Shutdown { graceful: true },
            _ => Request::Invalid {
                reply: ErrorReply::ShutdownMode,
                noreply: false,
            },
        },
        (9, b"verbosity") => parse_verbosity(&t),
        (14, b"cache_memlimit") | (8, b"memlimit") => parse_memlimit(&t),
        (11, b"lru_crawler") if ntokens == 4 && t.get(1) == b"metadump" => {
            parse_dump_classes(t.get(2))
        }
        (11, b"lru_crawler") => parse_lru_crawler(&t),
        (5, b"slabs") => parse_slabs(&t),
        (3, b"lru") => parse_lru(&t),
        _ => {
            if t.get(t.len() - 1).starts_with(b"HTTP/") {
                Request::Close
            } else {
                invalid(ErrorReply::Error)
            }
        }
    }
}

/// Fast path for the most common request, `get`/`gets` with keys: the key
/// iterator splits the line itself, so the general tokenizer (which would
/// scan the same bytes first) is skipped. Returns `None` for anything else.
fn parse_plain_get(line: &[u8]) -> Option<Request<'_>> {
    let start = line.iter().position(|&b| b != b' ')?;
    let rest = &line[start..];
    let (command, cmd_len) = if rest.starts_with(b"get ") {
        (GetCommand::Get, 3)
    } else if rest.starts_with(b"gets ") {
        (GetCommand::Gets, 4)
    } else {
        return None;
    };
    let keys_at = start + cmd_len;
    // memcached wants at least one token after the command.
    line[keys_at..]
        .iter()
        .any(|&b| b != b' ')
        .then(|| Request::Get {
            command,
            exptime: 0,
            keys: Keys::new(line, keys_at),
        })
}

fn parse_get<'a>(t: &Tokens<'a>, line: &'a [u8], command: GetCommand) -> Request<'a> {
    if t.len() + 1 < 3 {
        return invalid(ErrorReply::Error);
    }
    let (key_start, exptime) = match command {
        GetCommand::Gat | GetCommand::Gats => {
            let Some(exptime) = safe_strtol(t.get(1)) else {
                return invalid(ErrorReply::InvalidExptime);
            };
            (token_end(t, 1), exptime)
        }
        _ => (token_end(t, 0), 0),
    };
    Request::Get {
        command,
        exptime,
        keys: Keys::new(line, key_start),
    }
}

/// Offset just past token `i` in the line.
fn token_end(t: &Tokens<'_>, i: usize) -> usize {
    t.spans[i].1 as usize
}

fn parse_store<'a>(t: &Tokens<'a>, command: StoreCommand) -> Request<'a> {
    let ntokens = t.len() + 1;
    let is_cas = command == StoreCommand::Cas;
    let ok = if is_cas {
        ntokens == 7 || ntokens == 8
    } else {
        ntokens == 6 || ntokens == 7
    };
    if !ok {
        return invalid(ErrorReply::Error);
    }
    let noreply = t.last_is_noreply();
    let bad = Request::Invalid {
        reply: ErrorReply::BadFormat,
        noreply,
    };
    let key = t.get(1);
    if key.len() > MAX_KEY_LEN {
        return bad;
    }
    let (Some(flags), Some(exptime), Some(vlen)) = (
        safe_strtoul(t.get(2)),
        safe_strtol(t.get(3)),
        safe_strtol(t.get(4)),
    ) else {
        return bad;
    };
    let cas = if is_cas {
        match safe_strtoull(t.get(5)) {
            Some(c) => c,
            None => return bad,
        }
    } else {
        0
    };
    if !(0..=i32::MAX - 2).contains(&vlen) {
        return bad;
    }
    Request::Store {
        command,
        key,
        flags,
        exptime,
        len: vlen as usize,
        cas,
        noreply,
    }
}

fn parse_delete<'a>(t: &Tokens<'a>) -> Request<'a> {
    let ntokens = t.len() + 1;
    if !(3..=5).contains(&ntokens) {
        return invalid(ErrorReply::Error);
    }
    let mut noreply = false;
    if ntokens > 3 {
        let hold_is_zero = t.get(2) == b"0";
        noreply = t.last_is_noreply();
        let valid = (ntokens == 4 && (hold_is_zero || noreply))
            || (ntokens == 5 && hold_is_zero && noreply);
        if !valid {
            return Request::Invalid {
                reply: ErrorReply::DeleteUsage,
                noreply,
            };
        }
    }
    let key = t.get(1);
    if key.len() > MAX_KEY_LEN {
        return Request::Invalid {
            reply: ErrorReply::BadFormat,
            noreply,
        };
    }
    Request::Delete { key, noreply }
}

fn parse_arith<'a>(t: &Tokens<'a>, incr: bool) -> Request<'a> {
    let ntokens = t.len() + 1;
    if ntokens != 4 && ntokens != 5 {
        return invalid(ErrorReply::Error);
    }
    let noreply = t.last_is_noreply();
    let key = t.get(1);
    if key.len() > MAX_KEY_LEN {
        return Request::Invalid {
            reply: ErrorReply::BadFormat,
            noreply,
        };
    }
    match safe_strtoull(t.get(2)) {
        Some(delta) => Request::Arith {
            incr,
            key,
            delta,
            noreply,
        },
        None => Request::Invalid {
            reply: ErrorReply::InvalidDelta,
            noreply,
        },
    }
}

fn parse_touch<'a>(t: &Tokens<'a>) -> Request<'a> {
    let ntokens = t.len() + 1;
    if ntokens != 4 && ntokens != 5 {
        return invalid(ErrorReply::Error);
    }
    let noreply = t.last_is_noreply();
    let key = t.get(1);
    if key.len() > MAX_KEY_LEN {
        return Request::Invalid {
            reply: ErrorReply::BadFormat,
            noreply,
        };
    }
    match safe_strtol(t.get(2)) {
        Some(exptime) => Request::Touch {
            key,
            exptime,
            noreply,
        },
        None => Request::Invalid {
            reply: ErrorReply::InvalidExptime,
            noreply,
        },
    }
}

fn parse_flush_all<'a>(t: &Tokens<'a>) -> Request<'a> {
    let ntokens = t.len() + 1;
    if !(2..=4).contains(&ntokens) {
        return invalid(ErrorReply::Error);
    }
    let noreply = t.last_is_noreply();
    let mut delay = 0;
    if ntokens != if noreply { 3 } else { 2 } {
        match safe_strtol(t.get(1)) {
            Some(d) => delay = d,
            None => {
                return Request::Invalid {
                    reply: ErrorReply::InvalidExptime,
                    noreply,
                }
            }
        }
    }
    Request::FlushAll { delay, noreply }
}

fn parse_verbosity<'a>(t: &Tokens<'a>) -> Request<'a> {
    let ntokens = t.len() + 1;
    if ntokens != 3 && ntokens != 4 {
        return invalid(ErrorReply::Error);
    }
    let noreply = t.last_is_noreply();
    match safe_strtoul(t.get(1)) {
        Some(level) => Request::Verbosity { level, noreply },
        None => Request::Invalid {
            reply: ErrorReply::BadFormat,
            noreply,
        },
    }
}

fn parse_memlimit<'a>(t: &Tokens<'a>) -> Request<'a> {
    let ntokens = t.len() + 1;
    if ntokens != 3 && ntokens != 4 {
        return invalid(ErrorReply::Error);
    }
    let noreply = t.last_is_noreply();
    match safe_strtoul(t.get(1)) {
        Some(megabytes) => Request::MemLimit { megabytes, noreply },
        None => Request::Invalid {
            reply: ErrorReply::Error,
            noreply,
        },
    }
}

/// `lru_crawler` without `metadump`: memcached's `process_lru_crawler_command`.
fn parse_lru_crawler<'a>(t: &Tokens<'a>) -> Request<'a> {
    let ntokens = t.len() + 1;
    let command = match (ntokens, t.get(1)) {
        (4, b"crawl") => CrawlerCommand::Crawl(match parse_dump_classes(t.get(2)) {
            _ if t.get(2) == b"hash" => CrawlTarget::Hash,
            Request::MetaDump(Some(classes)) => CrawlTarget::Classes(classes),
            _ => CrawlTarget::BadClass,
        }),
        (4, b"tocrawl") => match safe_strtoul(t.get(2)) {
            Some(n) => CrawlerCommand::Tocrawl(n),
            None => return invalid(ErrorReply::BadFormat),
        },
        (4, b"sleep") => match safe_strtoul(t.get(2)) {
            Some(us) if us <= 1_000_000 => CrawlerCommand::Sleep(us),
            Some(_) => return invalid(ErrorReply::CrawlerSleepTooLong),
            None => return invalid(ErrorReply::BadFormat),
        },
        (3, b"enable") => CrawlerCommand::Enable,
        (3, b"disable") => CrawlerCommand::Disable,
        _ => return invalid(ErrorReply::Error),
    };
    Request::LruCrawler(command)
}

/// `slabs reassign|automove`: memcached's `process_slabs_command`. Only `automove`
/// takes `noreply`.
fn parse_slabs<'a>(t: &Tokens<'a>) -> Request<'a> {
    let ntokens = t.len() + 1;
    if ntokens == 5 && t.get(1) == b"reassign" {
        let pair = safe_strtol(t.get(2)).zip(safe_strtol(t.get(3)));
        return Request::Tune {
            command: TuneCommand::SlabsReassign(pair),
            noreply: false,
        };
    }
    if ntokens < 4 || t.get(1) != b"automove" {
        return invalid(ErrorReply::Error);
    }
    let noreply = t.last_is_noreply();
    let fail = |reply| Request::Invalid { reply, noreply };
    let command = if t.get(2) == b"ratio" {
        match (ntokens >= 5).then(|| safe_strtod(t.get(3))).flatten() {
            Some(ratio) => TuneCommand::SlabsAutomoveRatio(ratio),
            None => return fail(ErrorReply::Error),
        }
    } else {
        match safe_strtoul(t.get(2)) {
            Some(level @ 0..=2) => TuneCommand::SlabsAutomove(level),
            Some(_) => return fail(ErrorReply::Error),
            None => return fail(ErrorReply::BadFormat),
        }
    };
    Request::Tune { command, noreply }
}

/// `lru tune|mode|temp_ttl`: memcached's `process_lru_command`. The range checks of
/// `tune` and whether `mode` and `temp_ttl` are allowed are left to the caller.
fn parse_lru<'a>(t: &Tokens<'a>) -> Request<'a> {
    let ntokens = t.len() + 1;
    if ntokens < 3 {
        return invalid(ErrorReply::Error);
    }
    let noreply = t.last_is_noreply();
    let command = match t.get(1) {
        b"tune" if ntokens >= 7 => {
            let parsed = (|| {
                Some(TuneCommand::LruTune {
                    hot_pct: safe_strtoul(t.get(2))?,
                    warm_pct: safe_strtoul(t.get(3))?,
                    hot_factor: safe_strtod(t.get(4))?,
                    warm_factor: safe_strtod(t.get(5))?,
                })
            })();
            match parsed {
                Some(command) => command,
                None => {
                    return Request::Invalid {
                        reply: ErrorReply::Error,
                        noreply,
                    }
                }
            }
        }
        b"mode" if ntokens >= 4 => TuneCommand::LruMode(match t.get(2) {
            b"flat" => Some(false),
            b"segmented" => Some(true),
            _ => None,
        }),
        b"temp_ttl" if ntokens >= 4 => TuneCommand::LruTempTtl(safe_strtol(t.get(2))),
        _ => {
            return Request::Invalid {
                reply: ErrorReply::Error,
                noreply,
            }
        }
    };
    Request::Tune { command, noreply }
}

fn parse_stats<'a>(t: &Tokens<'a>) -> Request<'a> {
    if t.len() == 1 {
        return Request::Stats(StatsGroup::General);
    }
    let group = match t.get(1) {
        b"reset" => StatsGroup::Reset,
        b"settings" => StatsGroup::Settings,
        b"detail" => match (t.len() >= 3).then(|| t.get(2)) {
            Some(b"on") => StatsGroup::Detail(DetailOp::On),
            Some(b"off") => StatsGroup::Detail(DetailOp::Off),
            Some(b"dump") => StatsGroup::Detail(DetailOp::Dump),
            _ => return invalid(ErrorReply::StatsDetailUsage),
        },
        b"cachedump" => {
            if t.len() + 1 < 5 {
                return invalid(ErrorReply::BadCommandLine);
            }
            StatsGroup::Internal
        }
        b"slabs" => StatsGroup::Slabs,
        b"sizes" => StatsGroup::Sizes,
        b"conns" => StatsGroup::Conns,
        b"items" => StatsGroup::Internal,
        _ => return invalid(ErrorReply::Error),
    };
    Request::Stats(group)
}

// ---------------------------------------------------------------------------
// Numbers, with the semantics of C's strtoull/strtol as memcached uses them.

fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')
}

/// The shared front end of C's `strtoull`/`strtol` in base 10: skip
/// whitespace, take an optional sign, then digits. Returns the sign, the
/// magnitude (saturated at `u128::MAX` far past any range we check) and the
/// index where parsing stopped (0 when no digit was found).
fn c_scan(s: &[u8]) -> (bool, u128, usize) {
    let mut i = 0;
    while i < s.len() && is_c_space(s[i]) {
        i += 1;
    }
    let mut negative = false;
    if i < s.len() && (s[i] == b'+' || s[i] == b'-') {
        negative = s[i] == b'-';
        i += 1;
    }
    let digits_start = i;
    let mut magnitude: u128 = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        magnitude = magnitude
            .saturating_mul(10)
            .saturating_add(u128::from(s[i] - b'0'));
        i += 1;
    }
    if i == digits_start {
        return (false, 0, 0);
    }
    (negative, magnitude, i)
}

/// The common tail of memcached's `safe_strto*`: the number must be followed
/// by whitespace or the end of the token.
fn accept_end(s: &[u8], end: usize) -> bool {
    end != 0 && (end == s.len() || is_c_space(s[end]))
}

/// memcached's `safe_strtoull`.
#[must_use]
pub fn safe_strtoull(s: &[u8]) -> Option<u64> {
    let (negative, magnitude, end) = c_scan(s);
    // strtoull sets ERANGE when the magnitude exceeds u64.
    if !accept_end(s, end) || magnitude > u128::from(u64::MAX) {
        return None;
    }
    let v = if negative {
        (magnitude as u64).wrapping_neg()
    } else {
        magnitude as u64
    };
    if (v as i64) < 0 && s.contains(&b'-') {
        return None;
    }
    Some(v)
}

/// memcached's `safe_strtoul`: `strtoul` on a 64-bit `long`, then stored
/// into a `uint32_t` (so `4294967297` becomes 1).
#[must_use]
pub fn safe_strtoul(s: &[u8]) -> Option<u32> {
    safe_strtoull(s).map(|v| v as u32)
}

/// memcached's `safe_strtol`: `strtol` on a 64-bit `long`, then stored into
/// an `int32_t` (truncating).
#[must_use]
pub fn safe_strtol(s: &[u8]) -> Option<i32> {
    let (negative, magnitude, end) = c_scan(s);
    if !accept_end(s, end) {
        return None;
    }
    let value: i64 = if negative {
        if magnitude > u128::from(i64::MAX as u64) + 1 {
            return None;
        }
        (magnitude as u64 as i64).wrapping_neg()
    } else {
        if magnitude > u128::from(i64::MAX as u64) {
            return None;
        }
        magnitude as i64
    };
    Some(value as i32)
}

/// memcached's `safe_strtod`: C's `strtod`, the whole token a number, not out of
/// range. Decimal and `inf`/`nan` forms as Rust reads them; C's hexadecimal floats are
/// refused (no client sends one to a tuning command).
#[must_use]
pub fn safe_strtod(s: &[u8]) -> Option<f64> {
    let start = s.iter().position(|&b| !is_c_space(b))?;
    let text = std::str::from_utf8(&s[start..]).ok()?;
    let v: f64 = text.parse().ok()?;
    let digits = text.trim_start_matches(['+', '-']);
    let literal_inf = digits.eq_ignore_ascii_case("inf") || digits.eq_ignore_ascii_case("infinity");
    // strtod sets ERANGE on overflow and on underflow of a non-zero mantissa.
    let mantissa = digits.split(['e', 'E']).next().unwrap_or("");
    let nonzero = mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b));
    if (v.is_infinite() && !literal_inf) || (v == 0.0 && nonzero && !digits.contains(['n', 'N'])) {
        return None;
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(line: &str) -> Request<'_> {
        parse_request(line.as_bytes())
    }

    fn invalid_reply(line: &str) -> Option<(ErrorReply, bool)> {
        match req(line) {
            Request::Invalid { reply, noreply } => Some((reply, noreply)),
            _ => None,
        }
    }

    #[test]
    fn frames_lines_like_memcached() {
        assert_eq!(
            frame_line(b"get a\r\n"),
            LineFrame::Line { end: 5, next: 7 }
        );
        assert_eq!(frame_line(b"get a\n"), LineFrame::Line { end: 5, next: 6 });
        assert_eq!(frame_line(b"\r\n"), LineFrame::Line { end: 1, next: 2 });
        assert_eq!(frame_line(b"get a"), LineFrame::Incomplete);
        assert_eq!(
            frame_line(b"ge\0t a\r\n"),
            LineFrame::Line { end: 2, next: 8 }
        );
        let long = vec![b'x'; 3000];
        assert_eq!(frame_line(&long), LineFrame::Close);
        let mut get = b"get ".to_vec();
        get.extend(std::iter::repeat_n(b'k', 3000));
        assert_eq!(frame_line(&get), LineFrame::Incomplete);
    }

    #[test]
    fn tokenizer_stops_at_23_tokens() {
        let line = (0..30)
            .map(|i| format!("k{i}"))
            .collect::<Vec<_>>()
            .join(" ");
        let t = Tokens::new(line.as_bytes(), 0);
        assert_eq!(t.len(), 23);
        assert_eq!(t.get(22), b"k22");
        assert_eq!(&line.as_bytes()[t.rest().unwrap()..][..3], b"k23");
        let t = Tokens::new(b"  a  b ", 0);
        assert_eq!(t.len(), 2);
        assert_eq!(t.get(1), b"b");
        assert_eq!(t.get(2), b"");
    }

    #[test]
    fn numbers_follow_c_semantics() {
        assert_eq!(safe_strtoul(b"4294967296"), Some(0));
        assert_eq!(safe_strtoul(b"4294967297"), Some(1));
        assert_eq!(safe_strtoul(b"+5"), Some(5));
        assert_eq!(safe_strtoul(b"5\tzz"), Some(5));
        assert_eq!(safe_strtoul(b"-1"), None);
        assert_eq!(safe_strtoul(b"-0"), Some(0));
        assert_eq!(safe_strtoul(b"5x"), None);
        assert_eq!(safe_strtoul(b""), None);
        assert_eq!(safe_strtoull(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(safe_strtoull(b"18446744073709551616"), None);
        assert_eq!(safe_strtoull(b"-18446744073709551615"), Some(1));
        assert_eq!(safe_strtol(b"-1"), Some(-1));
        assert_eq!(safe_strtol(b"4294967297"), Some(1));
        assert_eq!(safe_strtol(b"2147483648"), Some(i32::MIN));
        assert_eq!(safe_strtol(b"9223372036854775808"), None);
        assert_eq!(safe_strtol(b"-9223372036854775808"), Some(0));
        assert_eq!(safe_strtol(b"abc"), None);
        assert_eq!(safe_strtol(b" 12"), Some(12));
    }

    #[test]
    fn parses_storage_commands() {
        match req("set k 5 10 3 noreply") {
            Request::Store {
                command,
                key,
                flags,
                exptime,
                len,
                noreply,
                ..
            } => {
                assert_eq!(command, StoreCommand::Set);
                assert_eq!(key, b"k");
                assert_eq!((flags, exptime, len, noreply), (5, 10, 3, true));
            }
            other => panic!("{other:?}"),
        }
        match req("cas k 0 0 1 77") {
            Request::Store { cas, command, .. } => {
                assert_eq!((command, cas), (StoreCommand::Cas, 77))
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(invalid_reply("set k 0 0"), Some((ErrorReply::Error, false)));
        assert_eq!(
            invalid_reply("set k 0 0 -1"),
            Some((ErrorReply::BadFormat, false))
        );
        assert_eq!(
            invalid_reply("set k x 0 1 noreply"),
            Some((ErrorReply::BadFormat, true))
        );
        let long_key = format!("set {} 0 0 1", "a".repeat(251));
        assert_eq!(
            invalid_reply(&long_key),
            Some((ErrorReply::BadFormat, false))
        );
        let ok_key = format!("set {} 0 0 1", "a".repeat(250));
        assert!(matches!(req(&ok_key), Request::Store { .. }));
        assert_eq!(
            invalid_reply("cas k 0 0 1 x"),
            Some((ErrorReply::BadFormat, false))
        );
    }

    #[test]
    fn parses_retrieval_commands() {
        match req("gets a  b c") {
            Request::Get { command, keys, .. } => {
                assert_eq!(command, GetCommand::Gets);
                assert_eq!(keys.collect::<Vec<_>>(), vec![&b"a"[..], b"b", b"c"]);
            }
            other => panic!("{other:?}"),
        }
        match req("gat 100 a") {
            Request::Get { exptime, keys, .. } => {
                assert_eq!(exptime, 100);
                assert_eq!(keys.count(), 1);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(invalid_reply("get"), Some((ErrorReply::Error, false)));
        assert_eq!(
            invalid_reply("gat x a"),
            Some((ErrorReply::InvalidExptime, false))
        );
        assert!(matches!(req("gat 10"), Request::Get { .. }));
    }

    #[test]
    fn parses_other_commands() {
        assert!(matches!(
            req("delete k"),
            Request::Delete { noreply: false, .. }
        ));
        assert!(matches!(
            req("delete k 0"),
            Request::Delete { noreply: false, .. }
        ));
        assert!(matches!(
            req("delete k 0 noreply"),
            Request::Delete { noreply: true, .. }
        ));
        assert_eq!(
            invalid_reply("delete k 1"),
            Some((ErrorReply::DeleteUsage, false))
        );
        assert_eq!(invalid_reply("delete"), Some((ErrorReply::Error, false)));
        assert!(matches!(
            req("incr k 5"),
            Request::Arith {
                incr: true,
                delta: 5,
                ..
            }
        ));
        assert_eq!(
            invalid_reply("decr k -1 noreply"),
            Some((ErrorReply::InvalidDelta, true))
        );
        assert!(matches!(
            req("touch k 10"),
            Request::Touch { exptime: 10, .. }
        ));
        assert!(matches!(
            req("flush_all"),
            Request::FlushAll {
                delay: 0,
                noreply: false
            }
        ));
        assert!(matches!(
            req("flush_all noreply"),
            Request::FlushAll {
                delay: 0,
                noreply: true
            }
        ));
        assert!(matches!(
            req("flush_all 10 noreply"),
            Request::FlushAll {
                delay: 10,
                noreply: true
            }
        ));
        assert_eq!(
            invalid_reply("flush_all noreply 10"),
            Some((ErrorReply::InvalidExptime, false))
        );
        assert_eq!(invalid_reply("verbosity"), Some((ErrorReply::Error, false)));
        assert_eq!(
            invalid_reply("verbosity x"),
            Some((ErrorReply::BadFormat, false))
        );
        assert!(matches!(req("version"), Request::Version));
        assert!(matches!(req("quit"), Request::Quit));
        assert!(matches!(req("mn"), Request::MetaNoop));
        assert!(matches!(req("stats"), Request::Stats(StatsGroup::General)));
        assert_eq!(invalid_reply("stats foo"), Some((ErrorReply::Error, false)));
        assert_eq!(
            invalid_reply("stats detail"),
            Some((ErrorReply::StatsDetailUsage, false))
        );
        assert!(matches!(req("GET / HTTP/1.1"), Request::Close));
        assert_eq!(invalid_reply("x"), Some((ErrorReply::Error, false)));
        assert_eq!(invalid_reply(""), Some((ErrorReply::Error, false)));
        assert_eq!(invalid_reply("GET k"), Some((ErrorReply::Error, false)));
    }

    #[test]
    fn every_split_point_frames_the_same_line() {
        let input = b"set key 1 2 3\r\nabc\r\n";
        for cut in 0..input.len() {
            let head = &input[..cut];
            match frame_line(head) {
                LineFrame::Incomplete => assert!(cut < 15),
                LineFrame::Line { end, next } => {
                    assert_eq!((end, next), (13, 15));
                    assert!(cut >= 15);
                }
                LineFrame::Close => panic!("closed at {cut}"),
            }
        }
    }

    #[test]
    fn safe_strtod_reads_as_memcached() {
        assert_eq!(safe_strtod(b"0.5"), Some(0.5));
        assert_eq!(safe_strtod(b"-2"), Some(-2.0));
        assert_eq!(safe_strtod(b"inf"), Some(f64::INFINITY));
        assert!(safe_strtod(b"nan").is_some_and(f64::is_nan));
        // Out of range either way (ERANGE), and not a number.
        assert_eq!(safe_strtod(b"1e999"), None);
        assert_eq!(safe_strtod(b"1e-999"), None);
        assert_eq!(safe_strtod(b"0e-999"), Some(0.0));
        assert_eq!(safe_strtod(b"x"), None);
        assert_eq!(safe_strtod(b"1x"), None);
        assert_eq!(safe_strtod(b""), None);
    }

    #[test]
    fn tuning_commands_parse_as_memcached() {
        use CrawlerCommand as C;
        let crawler = |line| match req(line) {
            Request::LruCrawler(c) => Ok(c),
            Request::Invalid { reply, .. } => Err(reply),
            other => panic!("{line}: {other:?}"),
        };
        assert_eq!(crawler("lru_crawler enable"), Ok(C::Enable));
        assert_eq!(crawler("lru_crawler enable x"), Err(ErrorReply::Error));
        assert_eq!(
            crawler("lru_crawler sleep 1000000"),
            Ok(C::Sleep(1_000_000))
        );
        assert_eq!(
            crawler("lru_crawler sleep 1000001"),
            Err(ErrorReply::CrawlerSleepTooLong)
        );
        assert_eq!(
            crawler("lru_crawler tocrawl -1"),
            Err(ErrorReply::BadFormat)
        );
        assert_eq!(
            crawler("lru_crawler crawl 1,3"),
            Ok(C::Crawl(CrawlTarget::Classes(DumpClasses(0b1010))))
        );
        assert_eq!(
            crawler("lru_crawler crawl 64"),
            Ok(C::Crawl(CrawlTarget::BadClass))
        );
        assert_eq!(
            crawler("lru_crawler crawl hash"),
            Ok(C::Crawl(CrawlTarget::Hash))
        );
        // metadump keeps its own request.
        assert!(matches!(
            req("lru_crawler metadump all"),
            Request::MetaDump(Some(_))
        ));

        let tune = |line| match req(line) {
            Request::Tune { command, noreply } => Ok((command, noreply)),
            Request::Invalid { reply, noreply } => Err((reply, noreply)),
            other => panic!("{line}: {other:?}"),
        };
        assert_eq!(
            tune("slabs reassign 1 x"),
            Ok((TuneCommand::SlabsReassign(None), false))
        );
        assert_eq!(
            tune("slabs automove 2 noreply"),
            Ok((TuneCommand::SlabsAutomove(2), true))
        );
        assert_eq!(tune("slabs automove 3"), Err((ErrorReply::Error, false)));
        assert_eq!(
            tune("slabs automove x"),
            Err((ErrorReply::BadFormat, false))
        );
        assert_eq!(
            tune("slabs automove ratio"),
            Err((ErrorReply::Error, false))
        );
        assert_eq!(tune("lru tune 1 2 3"), Err((ErrorReply::Error, false)));
        assert_eq!(
            tune("lru tune 1 2 0.5 4 noreply"),
            Ok((
                TuneCommand::LruTune {
                    hot_pct: 1,
                    warm_pct: 2,
                    hot_factor: 0.5,
                    warm_factor: 4.0
                },
                true
            ))
        );
        assert_eq!(tune("lru mode x"), Ok((TuneCommand::LruMode(None), false)));
        assert_eq!(
            tune("lru temp_ttl -1"),
            Ok((TuneCommand::LruTempTtl(Some(-1)), false))
        );
        assert_eq!(tune("lru x"), Err((ErrorReply::Error, false)));
    }
}
