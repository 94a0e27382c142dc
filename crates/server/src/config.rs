//! Command-line settings, with memcached 1.6.18's flags, meanings, defaults, messages and
//! exit statuses.
//!
//! An operator's existing memcached command line must start ferrocache, and a line
//! memcached refuses must be refused in the same words with the same status. Every
//! option is one row of the table (`table.rs`): the command line goes through the rows
//! once, into the typed [`Settings`], and every reader takes its value from there.
//! Options that configure memcached internals we do not have (hash power, slab
//! rebalancing, the LRU's queues) are accepted, shown in `stats settings`, and have no
//! effect; `docs/operations.md` lists every option and what ferrocache does with it
//! (a test holds the two to agree).
//!
//! - `table.rs`: the row type, the `stats settings` order, and `-h`;
//! - `options.rs`: the flags' rows (memcached's, then ferrocache's long ones), and `-i`;
//! - `extended.rs`: the `-o` suboptions' rows, and the settings they alone write;
//! - `extstore.rs`: the `ext_*` suboptions' rows (the flash tier);
//! - `tls.rs`: `-Z` and the `ssl_*` suboptions;
//! - `tunables.rs`: the settings the run-time tuning commands change;
//! - `checks.rs`: the checks after the option loop, which take two options or more;
//! - `getopt.rs`: glibc's option syntax and messages;
//! - `refusal.rs`: the exit statuses, and C's number readers.

mod checks;
mod extended;
mod extstore;
mod getopt;
mod options;
pub mod refusal;
mod table;
#[cfg(test)]
mod tests;
pub mod tls;
mod tunables;

use anyhow::Result;

pub use extended::Extended;
use getopt::Getopt;
pub use refusal::{Refusal, EXIT_FAILURE, EX_NOUSER, EX_OSERR, EX_USAGE};
pub use table::View;
use table::{Arg, Line, Row};
pub use tls::{ListenSpec, TlsOptions, VerifyMode};
pub use tunables::Tunables;

/// The version string `version` and `stats` report: memcached's protocol
/// level first, so that clients which parse it for features keep working.
pub const VERSION: &str = concat!("1.6.18-ferrocache-", env!("CARGO_PKG_VERSION"));

/// memcached's highest verbosity level.
pub const MAX_VERBOSITY_LEVEL: u32 = 2;

/// `--zero-copy-min` defaults: get values from this size up are sent in place. Below
/// it one contiguous copy into the output buffer costs as little or less
/// (docs/perf-notes.md, "Zero-copy values"). On io_uring the vectored send is a system
/// call of its own instead of a send batched into the ring, so it pays from a larger
/// size: measured on two hosts, even or a loss at 16 KiB, a clear win from 32 KiB.
pub const ZERO_COPY_MIN_EPOLL: usize = 16 * 1024;
pub const ZERO_COPY_MIN_URING: usize = 32 * 1024;

/// What a command line asks for: a server to run, or text to print before exiting 0
/// (`-h`, `-i`, `-V`).
#[derive(Debug)]
pub enum Parsed {
    Run(Box<Settings>),
    Print(String),
}

/// memcached's `-B`: the protocols a connection may speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binding {
    /// Decided by the first byte (binary magic 0x80, or text).
    Auto,
    Ascii,
    Binary,
}

/// `--io-backend`: how worker threads drive their sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoBackend {
    /// Whichever the benchmarks found cheaper on this kind of kernel:
    /// io_uring when the kernel offers it, else epoll (`docs/perf-notes.md`,
    /// "io_uring against epoll").
    Auto,
    /// One io_uring per worker; epoll when the kernel refuses it.
    Uring,
    /// One epoll instance per worker (mio).
    Epoll,
}

impl IoBackend {
    /// The backend `--io-backend NAME` names.
    #[must_use]
    pub fn from_name(name: &str) -> Option<IoBackend> {
        match name {
            "auto" => Some(IoBackend::Auto),
            "uring" => Some(IoBackend::Uring),
            "epoll" => Some(IoBackend::Epoll),
            _ => None,
        }
    }

    /// The name `--io-backend` and `stats settings` use.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            IoBackend::Auto => "auto",
            IoBackend::Uring => "uring",
            IoBackend::Epoll => "epoll",
        }
    }
}

/// The resolved settings every thread reads.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `-p` as memcached keeps it: 0 is off, -1 a port the kernel picks
    /// ([`Settings::tcp_bind_port`]).
    pub port: i32,
    /// `-U`, as `port`.
    pub udp_port: i32,
    pub listen: Vec<String>,
    pub unix_socket: Option<String>,
    pub unix_mask: u32,
    pub user: Option<String>,
    pub memory_limit_bytes: usize,
    pub evictions: bool,
    pub max_connections: usize,
    pub verbose: u32,
    pub pidfile: Option<String>,
    pub threads: usize,
    pub reqs_per_event: u32,
    pub cas_enabled: bool,
    pub backlog: i32,
    pub item_size_max_bytes: usize,
    pub flush_enabled: bool,
    pub shutdown_enabled: bool,
    pub dump_enabled: bool,
    pub watch_enabled: bool,
    /// `-D`: the `stats detail` prefix delimiter ([`Settings::prefix_delimiter`]).
    pub delimiter: String,
    /// `-D` given: `stats detail` counts from the start, as `stats detail on`.
    pub detail_enabled: bool,
    /// `-N`: accepted and checked as memcached checks it; connections are not grouped
    /// by NAPI ID here (`--pin` steers them by CPU instead).
    pub napi_ids: u32,
    /// Seconds without traffic after which a connection is closed (0 = never).
    pub idle_timeout_secs: u32,
    /// `-B`: which protocols a connection may speak.
    pub binding: Binding,
    /// `-S`: the SASL password file (from `MEMCACHED_SASL_PWDB`).
    pub sasl_pwdb: Option<String>,
    /// `--pin`: one CPU per worker and CPU-steered accepts.
    pub pin: bool,
    /// `--busy-poll-us`: the longest poll before a worker sleeps (`spin.rs`), and
    /// SO_BUSY_POLL on client sockets (0 = off).
    pub busy_poll_us: u32,
    /// `--io-backend` as given; `main` replaces `auto` (and an unavailable
    /// `uring`) with the backend actually used before any thread starts.
    pub io_backend: IoBackend,
    /// `--udp-gso`: send UDP replies with GSO where the kernel offers it.
    pub udp_gso: bool,
    /// `--latency-histograms`: time every request (`stats/latency.rs`); on by default.
    pub latency_histograms: bool,
    /// `--metrics-listen`: where to serve Prometheus' `/metrics` (off by default).
    pub metrics_listen: Option<String>,
    /// `--zero-copy-min` as given (`None`: the backend's default); see
    /// [`Settings::zero_copy_min_for`].
    pub zero_copy_min: Option<usize>,
    /// `--null-store`: canned replies for get/set, for the benchmark floor.
    pub null_store: Option<Vec<u8>>,
    /// `--debug-time`: accept memcached-debug's `debugtime` command, which moves or
    /// stops the server clock (`clock.rs`), so that a test need not sleep for a TTL.
    pub debug_time: bool,
    /// `--hash-seed`: the store's key hash seed, fixed for a repeatable measurement
    /// (`None`: drawn at random, the default).
    pub hash_seed: Option<u64>,
    /// `-L`: item memory on transparent huge pages.
    pub large_pages: bool,
    /// `-k`: lock item memory (and what is mapped at start) into RAM.
    pub lock_memory: bool,
    /// `-Y`: the ASCII authentication file (loaded in `main`, see `auth.rs`).
    pub auth_file: Option<String>,
    /// `-d`: detach and run in the background.
    pub daemonize: bool,
    /// `-r`: raise the core file size limit.
    pub max_core: bool,
    /// The `-o` settings that have no other home (`config/extended.rs`).
    pub extended: Extended,
    /// The start values of what the tuning commands change (the crawler keeps them
    /// afterwards): the crawler's and LRU's `-o` options, and the flash tier's
    /// run-time `ext_*` settings.
    pub tunables: Tunables,
    /// The flash tier's files (`ext_path`, none without), `ext_page_size` and
    /// `ext_wbuf_size`; its run-time settings are `tunables.ext`, and
    /// [`Settings::flash_tier`] puts the two together.
    pub flash: storage::FlashConfig,
    /// `ext_threads`: the I/O threads that read flash values for text gets.
    pub ext_threads: usize,
    /// `-Z` and `-o ssl_*` (`config/tls.rs`).
    pub tls: TlsOptions,
    /// `-e`: the memory file of a warm restart (`state/restart.rs`).
    pub memory_file: Option<String>,
    /// memcached's slab classes under `-f`, `-n`, `slab_chunk_max` and `slab_sizes`:
    /// what `stats items`, `stats slabs` and `cachedump` group items by
    /// (`storage::classes`).
    pub classes: storage::ClassConfig,
}

impl Default for Settings {
    /// memcached 1.6.18's defaults (ferrocache's own for its options), before the
    /// checks after the option loop fill in `listen`.
    fn default() -> Settings {
        Settings {
            port: 11211,
            udp_port: 0,
            listen: Vec::new(),
            unix_socket: None,
            unix_mask: 0o700,
            user: None,
            memory_limit_bytes: 64 << 20,
            evictions: true,
            max_connections: 1024,
            verbose: 0,
            pidfile: None,
            threads: 4,
            reqs_per_event: 20,
            cas_enabled: true,
            backlog: 1024,
            item_size_max_bytes: 1024 * 1024,
            flush_enabled: true,
            shutdown_enabled: false,
            dump_enabled: true,
            watch_enabled: true,
            delimiter: ":".to_string(),
            detail_enabled: false,
            napi_ids: 0,
            idle_timeout_secs: 0,
            binding: Binding::Auto,
            sasl_pwdb: None,
            pin: false,
            debug_time: false,
            busy_poll_us: 0,
            io_backend: IoBackend::Auto,
            udp_gso: true,
            latency_histograms: true,
            metrics_listen: None,
            zero_copy_min: None,
            null_store: None,
            hash_seed: None,
            large_pages: false,
            lock_memory: false,
            auth_file: None,
            daemonize: false,
            max_core: false,
            extended: Extended::default(),
            tunables: Tunables::default(),
            flash: storage::FlashConfig::new(Vec::new()),
            ext_threads: 1,
            tls: TlsOptions::default(),
            memory_file: None,
            classes: storage::ClassConfig::default(),
        }
    }
}

/// The settings while the option loop runs: [`Settings`], and what memcached keeps
/// aside for the checks after the loop (raw values that are checked there, and which
/// options were given).
pub struct Draft {
    s: Settings,
    tcp_specified: bool,
    udp_specified: bool,
    protocol_specified: bool,
    /// `-S` given.
    sasl: bool,
    /// `-l`, as memcached joins them.
    inter: Option<String>,
    /// `-I`, before its checks.
    item_size_max: i64,
    /// `-N`, before its check against `-t`.
    napi_ids: i64,
    /// `slab_chunk_max`, before its checks, and whether it was given.
    chunk_max: i64,
    chunk_max_changed: bool,
    /// `slab_sizes`, parsed after the loop (against `-n` and `slab_chunk_max`).
    slab_sizes: Option<String>,
    /// `--null-store` and `--null-value-bytes`.
    null_store: bool,
    null_value_bytes: usize,
    /// What `-h`, `-i` or `-V` prints.
    print: Option<String>,
}

impl Draft {
    /// memcached's defaults, with `FERROCACHE_IO_BACKEND` read for `--io-backend`.
    fn new() -> Result<Draft, Refusal> {
        let mut s = Settings::default();
        if let Ok(v) = std::env::var("FERROCACHE_IO_BACKEND") {
            s.io_backend = options::io_backend(&v, "FERROCACHE_IO_BACKEND=")?;
        }
        Ok(Draft {
            item_size_max: s.item_size_max_bytes as i64,
            napi_ids: i64::from(s.napi_ids),
            chunk_max: i64::from(s.classes.chunk_max),
            s,
            tcp_specified: false,
            udp_specified: false,
            protocol_specified: false,
            sasl: false,
            inter: None,
            chunk_max_changed: false,
            slab_sizes: None,
            null_store: false,
            null_value_bytes: 20,
            print: None,
        })
    }
}

/// The table of options: the flags' rows, in getopt's order, then the suboptions'.
const TABLE: &[&[Row]] = &[
    options::MEMCACHED,
    options::FERROCACHE,
    extended::ROWS,
    extstore::ROWS,
    tls::ROWS,
];

/// The suboptions' rows in `-h`'s order, each group after its heading there.
const SUBOPTIONS: &[(&str, &[Row])] = &[
    ("", extended::ROWS),
    (extstore::HEADING, extstore::ROWS),
    ("", tls::ROWS),
];

/// Every row of the table.
fn rows() -> impl Iterator<Item = &'static Row> + Clone {
    TABLE.iter().flat_map(|rows| rows.iter())
}

/// The row of the `-o` suboption `name`.
fn suboption(name: &str) -> Option<&'static Row> {
    SUBOPTIONS
        .iter()
        .flat_map(|(_, rows)| rows.iter())
        .find(|r| matches!(r.name, table::Name::Sub(n) if n == name))
}

/// The `stats settings` lines, in memcached's order (`ops/stats.rs` prints them).
pub fn settings_lines() -> impl Iterator<Item = &'static Line> {
    table::settings_lines_of(rows())
}

/// What `-h` prints after the version line.
fn usage() -> String {
    table::usage_of(SUBOPTIONS, options::FERROCACHE)
}

/// A cas no item has: the store's counter starts at 1 and counts up by one per write.
const CAS_NEVER: u64 = u64::MAX;

impl Settings {
    /// `cas` as memcached's item would hold it: itself, or 0 under `-C`, whose items
    /// have no cas. Replies show this, and a cas that memcached would only set on the
    /// new item (a binary store's, an `ms` append's) is dropped by it. ferrocache keeps
    /// the cas anyway (its `flush_all` and its read-modify-write retries use it), so
    /// `-C` only changes what replies show and what requests compare (docs/protocol.md).
    #[inline(always)]
    #[must_use]
    pub fn item_cas(&self, cas: u64) -> u64 {
        if self.cas_enabled {
            cas
        } else {
            0
        }
    }

    /// The cas a check of a request's `want` against an item's cas must require, for
    /// checks where 0 means "no check" (meta `ma C`, binary delete and arithmetic):
    /// under `-C` the item's cas is 0, so any other value mismatches.
    #[inline]
    #[must_use]
    pub fn cas_check(&self, want: u64) -> u64 {
        if self.cas_enabled || want == 0 {
            want
        } else {
            CAS_NEVER
        }
    }

    /// The limit to hand `ops::memcached_item_fits`: `-I`, plus the 8-byte
    /// cas that memcached's items lack under `-C`, which leaves that much more room
    /// for the value.
    #[inline]
    #[must_use]
    pub fn memcached_item_limit(&self) -> usize {
        self.item_size_max_bytes
            + if self.cas_enabled {
                0
            } else {
                storage::MEMCACHED_CAS_BYTES
            }
    }

    /// The `stats detail` prefix delimiter: the first byte of `-D`, as memcached takes
    /// it (`-D ab` is `a`).
    #[must_use]
    pub fn prefix_delimiter(&self) -> u8 {
        self.delimiter.as_bytes().first().copied().unwrap_or(0)
    }

    /// The last second whose items a `flush_all` that takes effect at `new_oldest`
    /// flushes. memcached flushes up to the second before and tells the items stored
    /// later in that same second apart by their cas; under `-C` it has no cas to do so
    /// with, so it flushes up to `new_oldest` itself: an item stored in the same second
    /// as an immediate `flush_all` is flushed too (docs/protocol.md).
    #[inline]
    #[must_use]
    pub fn flush_oldest_live(&self, new_oldest: storage::RelTime) -> storage::RelTime {
        if self.cas_enabled {
            new_oldest.wrapping_sub(1)
        } else {
            new_oldest
        }
    }

    /// The compare-and-swap of a text `cas` command or a meta `ms ... C<want>`: under
    /// `-C` memcached 1.6.18 answers `EXISTS` for every item there is, whatever `want`
    /// (0 included), and `NOT_FOUND` otherwise.
    #[inline]
    #[must_use]
    pub fn swap_cas(&self, want: u64) -> u64 {
        if self.cas_enabled {
            want
        } else {
            CAS_NEVER
        }
    }

    /// The `--zero-copy-min` in effect for a worker on `backend`: get values at
    /// least this long are sent in place (`splice.rs`); `None` when 0 turned it off.
    pub fn zero_copy_min_for(&self, backend: IoBackend) -> Option<usize> {
        match self.zero_copy_min {
            Some(0) => None,
            Some(n) => Some(n),
            None if backend == IoBackend::Uring => Some(ZERO_COPY_MIN_URING),
            None => Some(ZERO_COPY_MIN_EPOLL),
        }
    }

    /// Parse a command line (the first item is the program name). `-h`, `-i` and `-V`
    /// print and exit here, as memcached's do; a refused line comes back as a
    /// [`Refusal`] inside the error, which `main` prints and exits with.
    pub fn from_args<I, T>(args: I) -> Result<Self>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let args: Vec<String> = args
            .into_iter()
            .map(|a| a.into().to_string_lossy().into_owned())
            .collect();
        let (prog, rest) = match args.split_first() {
            Some((p, r)) => (p.as_str(), r),
            None => ("ferrocache", &[][..]),
        };
        match Settings::parse(prog, rest)? {
            Parsed::Run(s) => Ok(*s),
            Parsed::Print(text) => {
                print!("{text}");
                std::process::exit(0);
            }
        }
    }

    /// memcached's `main()` up to its start-up: the option loop (`return 1` on a bad
    /// value, in the order given), then the checks after it (`EX_USAGE`), in its order.
    pub fn parse(prog: &str, args: &[String]) -> Result<Parsed, Refusal> {
        let mut d = Draft::new()?;
        let specs = options::specs();
        for found in Getopt::new(prog, &specs, args) {
            let (index, value) =
                found.map_err(|m| Refusal::failure(format!("{m}\nIllegal argument \"?\"")))?;
            let Some(row) = options::flags().nth(index) else {
                continue;
            };
            let name = row.arg_name();
            (row.parse)(
                &mut d,
                Arg {
                    name,
                    value: value.as_deref(),
                },
            )?;
            if let Some(text) = d.print.take() {
                return Ok(Parsed::Print(text));
            }
        }
        d.finish().map(|s| Parsed::Run(Box::new(s)))
    }

    /// The flash tier to build: its files and sizes, with the run-time settings as
    /// given; `None` without `ext_path`.
    #[must_use]
    pub fn flash_tier(&self) -> Option<storage::FlashConfig> {
        (!self.flash.files.is_empty()).then(|| storage::FlashConfig {
            tunables: self.tunables.ext,
            ..self.flash.clone()
        })
    }

    /// memcached's start-up check of `-u` (after the option loop): as root, `-u` must name
    /// a user there is (`EX_USAGE`, `EX_NOUSER`); otherwise `-u` is ignored.
    pub fn check_user(&self) -> Result<(), Refusal> {
        if !crate::sys::running_as_root() {
            return Ok(());
        }
        match self.user.as_deref() {
            None | Some("") => Err(Refusal::usage("can't run as root without the -u switch")),
            Some(name) if !crate::sys::user_exists(name) => Err(Refusal::new(
                EX_NOUSER,
                format!("can't find the user {name} to switch to"),
            )),
            Some(_) => Ok(()),
        }
    }

    /// The TCP port to bind: 0 for `-p -1` (the kernel picks one), `None` when TCP is off.
    #[must_use]
    pub fn tcp_bind_port(&self) -> Option<u16> {
        bind_port(self.port)
    }

    /// The UDP port to bind, as [`Settings::tcp_bind_port`].
    #[must_use]
    pub fn udp_bind_port(&self) -> Option<u16> {
        bind_port(self.udp_port)
    }
}

/// memcached's port: 0 is off, -1 any free port, and the rest is cut to 16 bits as
/// getaddrinfo cuts it.
fn bind_port(port: i32) -> Option<u16> {
    match port {
        0 => None,
        -1 => Some(0),
        p => Some(p as u16),
    }
}
