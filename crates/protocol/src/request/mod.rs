//! The parsed form of a text-protocol request line: [`Request`] and the
//! types it carries, borrowing the line (keys are slices of it, never copies).
//!
//! The text parser builds these, and so does the fast path for the commonest
//! lines, which must give exactly what the text parser gives; both sit on top
//! of this module, as does the meta parser, whose [`MetaRequest`] is one of
//! the request kinds.

pub mod meta;

pub use meta::{MetaCommand, MetaError, MetaOptions, MetaRequest, SetMode, MAX_BINARY_KEY_LEN};

/// Longest key memcached accepts (`KEY_MAX_LENGTH`).
pub const MAX_KEY_LEN: usize = 250;

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
    pub(crate) fn new(line: &'a [u8], pos: usize) -> Self {
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
    /// [`crate::scan::KeyScan`]), with the line they are in.
    #[must_use]
    pub fn scan(&self) -> (crate::scan::KeyScan<'a>, &'a [u8]) {
        (crate::scan::KeyScan::new(self.line, self.pos), self.line)
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
        let end = crate::scan::find_byte_or_end(line, start, b' ');
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
    /// `refresh_certs [noreply]`: reload the TLS certificate and key.
    RefreshCerts {
        noreply: bool,
    },
    /// `shutdown [graceful]`
    Shutdown {
        graceful: bool,
    },
    /// `stats [<group> [<argument> ...]]`: the line after `stats`, for the server's
    /// table of groups, which knows their names and arguments (split it with
    /// [`crate::lex::Tokens::new`]: the group's name is token 0).
    Stats(&'a [u8]),
    /// `mn`: meta no-op; memcached also flushes its output here.
    MetaNoop,
    /// `mg ms md ma me`.
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
    /// `watch [stream ...]`: turn the connection into a log watcher. `streams` is
    /// `None` when a name is not one memcached knows (it answers `ERROR`).
    Watch {
        streams: Option<WatchStreams>,
        noreply: bool,
    },
    /// `debugtime p|r|<seconds>`: the test clock of memcached's debug build
    /// (memcached-debug), which its own t/ suite moves instead of sleeping. A server
    /// without it answers `ERROR`, as for any unknown command.
    DebugTime(DebugTime),
}

/// What `debugtime` asks of the server clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DebugTime {
    /// `p`: the clock stops.
    Pause,
    /// `r`: the clock goes on (the seconds it was stopped count, as in memcached).
    Resume,
    /// `<seconds>`: the clock moves this many seconds on (back, if negative), in
    /// memcached-debug's arithmetic (the server's `clock.rs` says which).
    Move(i64),
}

/// The log streams a `watch` asks for, as memcached's `LOG_*` bits (logger.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WatchStreams(pub u16);

impl WatchStreams {
    pub const SYSEVENTS: u16 = 1 << 1;
    pub const FETCHERS: u16 = 1 << 2;
    pub const MUTATIONS: u16 = 1 << 3;
    pub const CONNEVENTS: u16 = 1 << 5;
    pub const EVICTIONS: u16 = 1 << 6;
    pub const RAWCMDS: u16 = 1 << 9;
    pub const PROXYREQS: u16 = 1 << 10;
    pub const PROXYEVENTS: u16 = 1 << 11;
    pub const PROXYUSER: u16 = 1 << 12;

    /// The bit of a stream name, as `process_watch_command` knows them.
    #[must_use]
    pub fn bit(name: &[u8]) -> Option<u16> {
        Some(match name {
            b"rawcmds" => Self::RAWCMDS,
            b"evictions" => Self::EVICTIONS,
            b"fetchers" => Self::FETCHERS,
            b"mutations" => Self::MUTATIONS,
            b"sysevents" => Self::SYSEVENTS,
            b"connevents" => Self::CONNEVENTS,
            b"proxyreqs" => Self::PROXYREQS,
            b"proxyevents" => Self::PROXYEVENTS,
            b"proxyuser" => Self::PROXYUSER,
            _ => return None,
        })
    }
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
    /// `extstore <setting> <value>`: a flash-tier setting (memcached's
    /// `process_extstore_command`); `None` answers `ERROR`.
    Extstore(Option<ExtstoreSetting>),
}

/// A flash-tier setting that `extstore` changes at run time, with memcached's names.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ExtstoreSetting {
    ItemSize(u32),
    ItemAge(u32),
    LowTtl(u32),
    RecacheRate(u32),
    CompactUnder(u32),
    DropUnder(u32),
    MaxSleep(u32),
    MaxFrag(f64),
    DropUnread(bool),
    /// `free_memchunks <class> <limit>`: deprecated in memcached, accepted and ignored.
    FreeMemchunks,
}
