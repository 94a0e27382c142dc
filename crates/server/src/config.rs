//! Command-line settings, with memcached's flags, meanings and defaults.
//!
//! An operator's existing memcached command line must start ferrocache. Flags
//! that configure memcached internals we do not have (slab sizing, hash power,
//! LRU tuning) are accepted, echoed in `stats settings`, and have no effect;
//! `docs/operations.md` lists them. An unknown flag is an error.

pub mod tls;

use anyhow::{bail, Context, Result};
use clap::{ArgAction, Parser};

pub use tls::{ListenSpec, TlsOptions, VerifyMode};

/// The version string `version` and `stats` report: memcached's protocol
/// level first, so that clients which parse it for features keep working.
pub const VERSION: &str = concat!("1.6.18-ferrocache-", env!("CARGO_PKG_VERSION"));

/// memcached's highest verbosity level.
pub const MAX_VERBOSITY_LEVEL: u32 = 2;

/// `--zero-copy-min` defaults: get values from this size up are sent in place. Below
/// it one contiguous copy into the output buffer costs as little or less
/// (docs/benchmarks.md, "Zero-copy values"). On io_uring the vectored send is a system
/// call of its own instead of a send batched into the ring, so it pays from a larger
/// size: measured on two hosts, even or a loss at 16 KiB, a clear win from 32 KiB.
pub const ZERO_COPY_MIN_EPOLL: usize = 16 * 1024;
pub const ZERO_COPY_MIN_URING: usize = 32 * 1024;

#[derive(Parser, Debug, Clone)]
#[command(
    name = "ferrocache",
    version = VERSION,
    about = "A memcached-compatible cache server",
    disable_version_flag = true,
    // As memcached's getopt loop: a repeated option's last value wins (`-m 64 -m 1024`
    // is 1024), where clap would refuse the line; `-l` and `-o` add up instead.
    args_override_self = true
)]
struct Args {
    /// TCP port to listen on (0 to disable TCP)
    #[arg(short = 'p', long = "port", default_value_t = 11211)]
    port: u16,
    /// UDP port to listen on (0 = off, the default since memcached 1.5.6)
    #[arg(short = 'U', long = "udp-port", default_value_t = 0)]
    udp_port: u16,
    /// UNIX socket path (disables network listeners)
    #[arg(short = 's', long = "unix-socket")]
    unix_socket: Option<String>,
    /// Access mask for the UNIX socket, in octal
    #[arg(short = 'a', long = "unix-mask", default_value = "700")]
    unix_mask: String,
    /// Interfaces to listen on, comma separated or repeated (default 127.0.0.1)
    #[arg(short = 'l', long = "listen", default_value = "127.0.0.1", action = clap::ArgAction::Append)]
    listen: Vec<String>,
    /// Run as a daemon
    #[arg(short = 'd', long = "daemon")]
    daemon: bool,
    /// Maximize core file limit
    #[arg(short = 'r', long = "enable-coredumps")]
    coredumps: bool,
    /// Assume the identity of USER (only when run as root)
    #[arg(short = 'u', long = "user")]
    user: Option<String>,
    /// Item memory in megabytes (k/m/g suffixes accepted)
    #[arg(short = 'm', long = "memory-limit", default_value = "64")]
    memory_limit: String,
    /// Return an error on memory exhaustion instead of evicting items
    #[arg(short = 'M', long = "disable-evictions")]
    disable_evictions: bool,
    /// Max simultaneous connections
    #[arg(short = 'c', long = "conn-limit", default_value_t = 1024)]
    conn_limit: usize,
    /// Lock down all paged memory: item memory is locked as it is allocated
    #[arg(short = 'k', long = "lock-memory")]
    lock_memory: bool,
    /// Verbose (repeat for more)
    #[arg(short = 'v', long = "verbose", action = ArgAction::Count)]
    verbose: u8,
    /// Print version and exit
    #[arg(short = 'V', long = "version")]
    print_version: bool,
    /// Save PID in FILE
    #[arg(short = 'P', long = "pidfile")]
    pidfile: Option<String>,
    /// Chunk size growth factor (accepted, no effect)
    #[arg(short = 'f', long = "slab-growth-factor", default_value = "1.25")]
    growth_factor: String,
    /// Minimum space allocated for key+value+flags (accepted, no effect)
    #[arg(short = 'n', long = "slab-min-size", default_value_t = 48)]
    chunk_size: u32,
    /// Put item memory on transparent huge pages (one 2 MiB-aligned mapping, MADV_HUGEPAGE)
    #[arg(short = 'L', long = "enable-largepages")]
    large_pages: bool,
    /// Stats prefix delimiter: `stats detail` counts keys by what comes before it
    #[arg(short = 'D', default_value = ":")]
    delimiter: String,
    /// Number of worker threads
    #[arg(short = 't', long = "threads", default_value_t = 4)]
    threads: usize,
    /// Max requests per event, per connection (kept for compatibility; see docs/protocol.md)
    #[arg(short = 'R', long = "max-reqs-per-event", default_value_t = 20)]
    reqs_per_event: u32,
    /// Disable CAS: every cas shown is 0, and compare-and-swaps answer as in memcached -C
    #[arg(short = 'C', long = "disable-cas")]
    disable_cas: bool,
    /// TCP listen backlog
    #[arg(short = 'b', long = "listen-backlog", default_value_t = 1024)]
    backlog: i32,
    /// Protocol: auto (decided by a connection's first byte), ascii or binary
    #[arg(short = 'B', long = "protocol")]
    protocol: Option<String>,
    /// Max item size (k/m suffixes accepted), at least 1k
    #[arg(short = 'I', long = "max-item-size", default_value = "1m")]
    item_size_max: String,
    /// ASCII protocol authentication: a first `set` must carry `<user> <password>`
    /// from this file of `user:password` lines
    #[arg(short = 'Y', long = "auth-file")]
    auth_file: Option<String>,
    /// Turn on SASL authentication (binary protocol; passwords from MEMCACHED_SASL_PWDB)
    #[arg(short = 'S', long = "enable-sasl")]
    sasl: bool,
    /// Disable flush_all
    #[arg(short = 'F', long = "disable-flush-all")]
    disable_flush_all: bool,
    /// Disable stats cachedump and lru_crawler metadump
    #[arg(short = 'X', long = "disable-dumping")]
    disable_dumping: bool,
    /// Disable watch commands
    #[arg(short = 'W', long = "disable-watch")]
    disable_watch: bool,
    /// Enable the shutdown command
    #[arg(short = 'A', long = "enable-shutdown")]
    enable_shutdown: bool,
    /// Memory file for a warm restart: SIGUSR1 (or `shutdown graceful`) saves the
    /// cache into it and exits; a start with the same file, -m and -I serves every
    /// item again. Put it on a RAM disk (/dev/shm)
    #[arg(short = 'e', long = "memory-file")]
    memory_file: Option<String>,
    /// Pin worker N to CPU N, and steer each connection to the worker on the
    /// CPU that receives its packets (reuseport CBPF)
    #[arg(long = "pin")]
    pin: bool,
    /// Before a worker sleeps for events, poll for up to this many microseconds,
    /// less (down to none) while events come far apart (also SO_BUSY_POLL on client
    /// sockets); pays with few clients that each wait for their reply; 0 = off
    #[arg(long = "busy-poll-us", default_value_t = 0)]
    busy_poll_us: u32,
    /// Socket I/O: epoll, io_uring (multishot accept and receive, batched
    /// sends), or auto (the one measured cheaper here; see docs/operations.md)
    #[arg(
        long = "io-backend",
        env = "FERROCACHE_IO_BACKEND",
        default_value = "auto"
    )]
    io_backend: IoBackend,
    /// Send get values of at least this many bytes from where they are stored,
    /// with one vectored send, instead of copying them into the output buffer
    /// (text, meta and binary gets over TCP); 0 = always copy. Default: 16384 on
    /// epoll, 32768 on io_uring
    #[arg(long = "zero-copy-min")]
    zero_copy_min: Option<usize>,
    /// UDP replies with segmentation offload (UDP GSO), where the kernel
    /// offers it: on (the default) or off
    #[arg(long = "udp-gso", default_value = "on", value_parser = ["on", "off"])]
    udp_gso: String,
    /// Benchmark floor: answer gets with a canned value and sets with STORED,
    /// without touching the store (measures the network path alone)
    #[arg(long = "null-store")]
    null_store: bool,
    /// Size of the canned value --null-store returns
    #[arg(long = "null-value-bytes", default_value_t = 20)]
    null_value_bytes: usize,
    /// Extended options, comma separated (idle_timeout=N, maxconns_fast, ...)
    #[arg(short = 'o', long = "extended")]
    extended: Vec<String>,
    /// Enable TLS on TCP listeners (-o ssl_chain_cert=FILE,ssl_key=FILE; -l notls:ADDR
    /// keeps a listener plain)
    #[arg(short = 'Z', long = "enable-ssl")]
    enable_ssl: bool,
}

/// memcached `-o` options that tune its own internals. They are accepted and
/// listed in `stats settings`, and change nothing here. The crawler, slab and LRU
/// options are read by `crawler.rs` ([`TUNABLE_OPTIONS`]).
const INERT_OPTIONS: &[&str] = &[
    "maxconns_fast",
    "no_maxconns_fast",
    "hashpower",
    "tail_repair_time",
    "idle_timeout",
    "watcher_logbuf_size",
    "worker_logbuf_size",
    "read_buf_mem_limit",
    "resp_obj_mem_limit",
    "slab_automove_window",
    "slab_chunk_max",
    "track_sizes",
    "no_hashexpand",
    "hash_algorithm",
    "modern",
    "no_modern",
    "inline_ascii_resp",
    "no_inline_ascii_resp",
    "drop_privileges",
    "no_drop_privileges",
    "large_memory_pages",
    "ext_path",
];

/// memcached's `-B`: the protocols a connection may speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binding {
    /// Decided by the first byte (binary magic 0x80, or text).
    Auto,
    Ascii,
    Binary,
}

/// `--io-backend`: how worker threads drive their sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum IoBackend {
    /// Whichever the benchmarks found cheaper on this kind of kernel:
    /// io_uring when the kernel offers it, else epoll (`docs/benchmarks.md`,
    /// "io_uring against epoll").
    Auto,
    /// One io_uring per worker; epoll when the kernel refuses it.
    Uring,
    /// One epoll instance per worker (mio).
    Epoll,
}

impl IoBackend {
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
    pub port: u16,
    pub udp_port: u16,
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
    pub chunk_size: u32,
    pub growth_factor: String,
    pub delimiter: String,
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
    /// `--zero-copy-min` as given (`None`: the backend's default); see
    /// [`Settings::zero_copy_min_for`].
    pub zero_copy_min: Option<usize>,
    /// `--null-store`: canned replies for get/set, for the benchmark floor.
    pub null_store: Option<Vec<u8>>,
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
    /// Every `-o` option as given, for `stats settings` (the `ssl_*` ones are in
    /// `tls` instead).
    pub extended: Vec<(String, String)>,
    /// `-Z` and `-o ssl_*` (`config/tls.rs`).
    pub tls: TlsOptions,
    /// `-e`: the memory file of a warm restart (`state/restart.rs`).
    pub memory_file: Option<String>,
    /// memcached's slab classes under `-f`, `-n`, `slab_chunk_max` and `slab_sizes`:
    /// what `stats items`, `stats slabs` and `cachedump` group items by
    /// (`storage::classes`).
    pub classes: storage::ClassConfig,
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

    /// Parse a command line (the first item is the program name).
    pub fn from_args<I, T>(args: I) -> Result<Self>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let a = Args::try_parse_from(args).map_err(|e| {
            // --help and --version print and exit like memcached -h.
            if e.kind() == clap::error::ErrorKind::DisplayHelp {
                let _ = e.print();
                std::process::exit(0);
            }
            anyhow::anyhow!("{e}")
        })?;
        if a.print_version {
            println!("ferrocache {VERSION}");
            std::process::exit(0);
        }
        let memory_limit_bytes = parse_size(&a.memory_limit, 1024 * 1024)
            .with_context(|| format!("bad -m value {:?}", a.memory_limit))?;
        let item_size_max_bytes = parse_size(&a.item_size_max, 1)
            .with_context(|| format!("bad -I value {:?}", a.item_size_max))?;
        if item_size_max_bytes < 1024 {
            bail!("Item max size cannot be less than 1024 bytes.");
        }
        if item_size_max_bytes > 1024 * 1024 * 1024 {
            bail!("Cannot set item size limit higher than 1 gigabyte.");
        }
        if item_size_max_bytes > memory_limit_bytes / 2 {
            bail!("Cannot set item size limit higher than 1/2 of memory max.");
        }
        if a.threads == 0 {
            bail!("Number of threads must be greater than 0");
        }
        if a.conn_limit == 0 {
            bail!("Maximum connections must be greater than 0");
        }
        let mut binding = match a.protocol.as_deref().unwrap_or("auto") {
            "auto" => Binding::Auto,
            "ascii" => Binding::Ascii,
            "binary" => Binding::Binary,
            other => bail!(
                "Invalid value for binding protocol: {other} -- should be one of auto, binary, or ascii"
            ),
        };
        let sasl_pwdb = if a.sasl {
            // memcached serves only the binary protocol with SASL.
            match binding {
                Binding::Ascii => {
                    bail!("ERROR: You cannot allow the ASCII protocol while using SASL.")
                }
                _ => binding = Binding::Binary,
            }
            Some(std::env::var("MEMCACHED_SASL_PWDB").map_err(|_| {
                anyhow::anyhow!("-S needs MEMCACHED_SASL_PWDB naming a file of user:password lines")
            })?)
        } else {
            None
        };
        if a.auth_file.is_some() {
            // memcached's checks, in its order.
            if a.udp_port != 0 {
                bail!("Cannot use UDP with ascii authentication enabled (-U 0 to disable)");
            }
            if binding != Binding::Ascii && (a.protocol.is_some() || a.sasl) {
                bail!(
                    "ERROR: You cannot allow the BINARY protocol while using ascii authentication tokens."
                );
            }
            binding = Binding::Ascii;
        }
        let unix_mask = u32::from_str_radix(&a.unix_mask, 8)
            .with_context(|| format!("bad -a value {:?}", a.unix_mask))?;

        let mut extended = Vec::new();
        let mut idle_timeout_secs = 0;
        let mut tls = TlsOptions {
            enabled: a.enable_ssl,
            ..TlsOptions::default()
        };
        for group in &a.extended {
            for opt in group.split(',').filter(|s| !s.is_empty()) {
                let (key, value) = opt.split_once('=').unwrap_or((opt, ""));
                if tls.set(key, opt.split_once('=').map(|(_, v)| v))? {
                    continue;
                }
                if !INERT_OPTIONS.contains(&key) && !TUNABLE_OPTIONS.contains(&key) {
                    bail!("Illegal suboption \"{opt}\"");
                }
                if key == "idle_timeout" {
                    idle_timeout_secs = value
                        .parse()
                        .with_context(|| format!("bad idle_timeout value {value:?}"))?;
                }
                extended.push((key.to_string(), value.to_string()));
            }
        }
        if tls.enabled && a.port == 0 {
            bail!("ERROR: You cannot enable SSL without a TCP port.");
        }
        let listen: Vec<String> = a
            .listen
            .iter()
            .flat_map(|l| l.split([',', ';']))
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        for entry in &listen {
            ListenSpec::parse(entry, tls.enabled)?;
        }
        let factor = a.growth_factor.parse().unwrap_or(1.25);
        Ok(Settings {
            tls,
            port: a.port,
            udp_port: a.udp_port,
            listen,
            unix_socket: a.unix_socket,
            unix_mask,
            user: a.user,
            memory_limit_bytes,
            evictions: !a.disable_evictions,
            max_connections: a.conn_limit,
            verbose: u32::from(a.verbose).min(MAX_VERBOSITY_LEVEL),
            pidfile: a.pidfile,
            threads: a.threads,
            reqs_per_event: a.reqs_per_event.max(1),
            cas_enabled: !a.disable_cas,
            backlog: a.backlog,
            item_size_max_bytes,
            flush_enabled: !a.disable_flush_all,
            shutdown_enabled: a.enable_shutdown,
            dump_enabled: !a.disable_dumping,
            watch_enabled: !a.disable_watch,
            chunk_size: a.chunk_size,
            growth_factor: a.growth_factor,
            delimiter: a.delimiter,
            idle_timeout_secs,
            binding,
            sasl_pwdb,
            pin: a.pin,
            busy_poll_us: a.busy_poll_us,
            io_backend: a.io_backend,
            udp_gso: a.udp_gso == "on",
            zero_copy_min: a.zero_copy_min,
            null_store: a.null_store.then(|| vec![b'x'; a.null_value_bytes]),
            large_pages: a.large_pages,
            lock_memory: a.lock_memory,
            auth_file: a.auth_file,
            daemonize: a.daemon,
            max_core: a.coredumps,
            extended,
            memory_file: a.memory_file,
            classes: storage::ClassConfig {
                factor,
                chunk_size: a.chunk_size,
                ..storage::ClassConfig::default()
            },
        })
    }
}

/// Parse `64`, `64m`, `1k`, `2g`; a bare number is in units of `unit` bytes.
fn parse_size(s: &str, unit: usize) -> Result<usize> {
    let s = s.trim();
    let (digits, mult) = match s.chars().last() {
        Some('k' | 'K') => (&s[..s.len() - 1], 1024),
        Some('m' | 'M') => (&s[..s.len() - 1], 1024 * 1024),
        Some('g' | 'G') => (&s[..s.len() - 1], 1024 * 1024 * 1024),
        _ => (s, unit),
    };
    let n: usize = digits.parse().context("not a number")?;
    n.checked_mul(mult).context("size overflows")
}

/// The `-o` options that set the crawler's tunables (`admin/crawler.rs`); the rest of
/// `-o` is handled here.
pub const TUNABLE_OPTIONS: &[&str] = &[
    "lru_crawler",
    "no_lru_crawler",
    "lru_crawler_sleep",
    "lru_crawler_tocrawl",
    "slab_reassign",
    "no_slab_reassign",
    "slab_automove",
    "slab_automove_ratio",
    "lru_maintainer",
    "no_lru_maintainer",
    "lru_segmented",
    "no_lru_segmented",
    "hot_lru_pct",
    "warm_lru_pct",
    "hot_max_factor",
    "warm_max_factor",
    "temporary_ttl",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Settings> {
        Settings::from_args(std::iter::once("ferrocache").chain(args.iter().copied()))
    }

    #[test]
    fn defaults_match_memcached() {
        let s = parse(&[]).unwrap();
        assert_eq!(s.port, 11211);
        assert_eq!(s.udp_port, 0);
        assert_eq!(s.memory_limit_bytes, 64 << 20);
        assert_eq!(s.max_connections, 1024);
        assert_eq!(s.threads, 4);
        assert_eq!(s.item_size_max_bytes, 1 << 20);
        assert_eq!(s.listen, vec!["127.0.0.1".to_string()]);
        assert!(s.evictions && s.flush_enabled && !s.shutdown_enabled);
        assert!(s.udp_gso);
        assert_eq!(s.memory_file, None);
        let s = parse(&["-e", "/dev/shm/cache"]).unwrap();
        assert_eq!(s.memory_file.as_deref(), Some("/dev/shm/cache"));
        let s = parse(&["--memory-file=/dev/shm/c2"]).unwrap();
        assert_eq!(s.memory_file.as_deref(), Some("/dev/shm/c2"));
    }

    #[test]
    fn parses_memcached_command_lines() {
        let s = parse(&[
            "-p",
            "1234",
            "-m",
            "1024",
            "-c",
            "4096",
            "-t",
            "1",
            "-U",
            "0",
            "-vv",
            "-I",
            "2m",
            "-M",
            "-A",
            "-o",
            "idle_timeout=30,hashpower=20",
            "-l",
            "127.0.0.1,::1",
        ])
        .unwrap();
        assert_eq!(s.port, 1234);
        assert_eq!(s.memory_limit_bytes, 1024 << 20);
        assert_eq!(s.item_size_max_bytes, 2 << 20);
        assert_eq!(s.verbose, 2);
        assert_eq!(s.idle_timeout_secs, 30);
        assert!(!s.evictions && s.shutdown_enabled);
        assert_eq!(s.listen.len(), 2);
        assert_eq!(s.extended.len(), 2);
    }

    #[test]
    fn repeated_options_as_memcached_takes_them() {
        // The last value of a repeated option wins; -l and -o accumulate.
        let s = parse(&[
            "-m",
            "64",
            "-t",
            "2",
            "-m",
            "3072",
            "-l",
            "127.0.0.1",
            "-l",
            "::1",
        ])
        .unwrap();
        assert_eq!(s.memory_limit_bytes, 3072 << 20);
        assert_eq!(s.threads, 2);
        assert_eq!(s.listen, vec!["127.0.0.1".to_string(), "::1".to_string()]);
        let s = parse(&["-o", "idle_timeout=5", "-o", "hashpower=20", "-L", "-L"]).unwrap();
        assert_eq!(s.extended.len(), 2);
        assert!(s.large_pages);
    }

    #[test]
    fn rejects_bad_values() {
        assert!(parse(&["-o", "no_such_option"]).is_err());
        assert!(parse(&["--no-such-flag"]).is_err());
        assert!(parse(&["-I", "512"]).is_err());
        assert!(parse(&["-m", "1", "-I", "1m"]).is_err());
        assert!(parse(&["-t", "0"]).is_err());
        assert!(parse(&["--udp-gso=maybe"]).is_err());
    }

    #[test]
    fn udp_gso_can_be_turned_off() {
        assert!(!parse(&["--udp-gso=off"]).unwrap().udp_gso);
        assert!(parse(&["--udp-gso", "on"]).unwrap().udp_gso);
    }
}
