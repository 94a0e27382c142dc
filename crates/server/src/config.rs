//! Command-line settings, with memcached 1.6.18's flags, meanings, defaults, messages and
//! exit statuses.
//!
//! An operator's existing memcached command line must start ferrocache, and a line
//! memcached refuses must be refused in the same words with the same status. Flags that
//! configure memcached internals we do not have (hash power, slab rebalancing, extstore
//! tuning) are accepted, echoed in `stats settings`, and have no effect;
//! `docs/operations.md` lists every flag and what ferrocache does with it.
//!
//! - `getopt.rs`: glibc's option syntax and messages;
//! - `extended.rs`: the `-o` suboptions;
//! - `refusal.rs`: the exit statuses, and C's number readers;
//! - `options.rs`: the option table, and `-h` (`usage.txt`) and `-i`;
//! - `tls.rs`: `-Z` and the `ssl_*` suboptions.

mod extended;
mod getopt;
mod options;
pub mod refusal;
#[cfg(test)]
mod tests;
pub mod tls;

use anyhow::Result;

use extended::{parse_slab_sizes, Extended, SLAB_PAGE_SIZE};
use getopt::Getopt;
use options::{license, OPTIONS, USAGE};
pub use refusal::{Refusal, EXIT_FAILURE, EX_NOUSER, EX_OSERR, EX_USAGE};
pub use tls::{ListenSpec, TlsOptions, VerifyMode};

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
    pub chunk_size: u32,
    pub growth_factor: String,
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
    /// Every `-o` option as given, for `stats settings` (the `ssl_*` ones are in
    /// `tls` instead).
    pub extended: Vec<(String, String)>,
    /// The flash tier, from `-o ext_path=...` and the other `ext_*` options.
    pub flash: Option<storage::FlashConfig>,
    /// The `ext_*` settings the `extstore` command changes, as given at start.
    pub ext_tunables: storage::FlashTunables,
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
        let mut port: i32 = 11211;
        let mut udp_port: i32 = 0;
        let (mut tcp_specified, mut udp_specified) = (false, false);
        let mut unix_socket = None;
        let mut unix_mask = 0o700;
        let mut inter: Option<String> = None;
        let mut user = None;
        let mut maxbytes: usize = 64 << 20;
        let mut evictions = true;
        let mut max_connections: usize = 1024;
        let mut lock_memory = false;
        let mut verbose: u32 = 0;
        let mut pidfile = None;
        let mut factor = 1.25f64;
        let mut chunk_size: u32 = 48;
        let mut large_pages = false;
        let mut delimiter = ":".to_string();
        let mut detail_enabled = false;
        let mut threads: usize = 4;
        let mut reqs_per_event: u32 = 20;
        let mut cas_enabled = true;
        let mut backlog: i32 = 1024;
        let mut binding = Binding::Auto;
        let mut protocol_specified = false;
        let mut item_size_max: i64 = 1024 * 1024;
        let mut auth_file = None;
        let mut sasl = false;
        let (mut flush, mut dump, mut watch, mut shutdown) = (true, true, true, false);
        let (mut daemonize, mut max_core) = (false, false);
        let mut memory_file = None;
        let mut napi_ids: i64 = 0;
        let mut ext = Extended::default();
        let mut tls = TlsOptions::default();
        let mut pin = false;
        let mut busy_poll_us = 0;
        let mut io_backend = match std::env::var("FERROCACHE_IO_BACKEND") {
            Ok(v) => IoBackend::from_name(&v).ok_or_else(|| {
                Refusal::usage(format!(
                    "FERROCACHE_IO_BACKEND={v}: expected auto, uring or epoll"
                ))
            })?,
            Err(_) => IoBackend::Auto,
        };
        let mut zero_copy_min = None;
        let mut udp_gso = true;
        let mut latency_histograms = true;
        let mut metrics_listen = None;
        let (mut null_store, mut null_value_bytes) = (false, 20usize);
        let mut hash_seed = None;

        let fail = |m: String| Err(Refusal::failure(m));
        for found in Getopt::new(prog, OPTIONS, args) {
            let (index, value) =
                found.map_err(|m| Refusal::failure(format!("{m}\nIllegal argument \"?\"")))?;
            let v = value.unwrap_or_default();
            let spec = OPTIONS[index];
            // ferrocache's own options, by name.
            if spec.short.is_none() {
                let name = spec.long.unwrap_or_default();
                let number = |what: &str| {
                    v.parse::<usize>().map_err(|_| {
                        Refusal::usage(format!("--{name}: {what} expected, got {v:?}"))
                    })
                };
                match name {
                    "pin" => pin = true,
                    "busy-poll-us" => {
                        busy_poll_us = u32::try_from(number("microseconds")?)
                            .map_err(|_| Refusal::usage("--busy-poll-us: too large"))?;
                    }
                    "io-backend" => {
                        io_backend = IoBackend::from_name(&v).ok_or_else(|| {
                            Refusal::usage(format!(
                                "--io-backend {v}: expected auto, uring or epoll"
                            ))
                        })?;
                    }
                    "zero-copy-min" => zero_copy_min = Some(number("bytes")?),
                    "udp-gso" => udp_gso = on_off(name, &v)?,
                    "latency-histograms" => latency_histograms = on_off(name, &v)?,
                    "metrics-listen" => {
                        if v.rsplit_once(':')
                            .is_none_or(|(_, p)| p.parse::<u16>().is_err())
                        {
                            return Err(Refusal::usage(format!(
                                "--metrics-listen {v}: expected ADDRESS:PORT"
                            )));
                        }
                        metrics_listen = Some(v);
                    }
                    "null-store" => null_store = true,
                    "hash-seed" => {
                        hash_seed = Some(v.parse::<u64>().map_err(|_| {
                            Refusal::usage(format!("--hash-seed: a number expected, got {v:?}"))
                        })?);
                    }
                    _ => null_value_bytes = number("bytes")?,
                }
                continue;
            }
            match spec.short.unwrap_or_default() {
                'A' => shutdown = true,
                'Z' => tls.enabled = true,
                'a' => {
                    let t = v.trim_start();
                    let end = t.bytes().take_while(|b| (b'0'..=b'7').contains(b)).count();
                    unix_mask = u32::from_str_radix(&t[..end], 8).unwrap_or(0);
                }
                'U' => {
                    udp_port = refusal::atoi(&v) as i32;
                    udp_specified = true;
                }
                'p' => {
                    port = refusal::atoi(&v) as i32;
                    tcp_specified = true;
                }
                's' => unix_socket = Some(v),
                // `(size_t)atoi(optarg) * 1024 * 1024`: `-m 64m` is 64 MiB, `-m 1g` 1 MiB.
                'm' => maxbytes = (refusal::atoi(&v) as u64).wrapping_mul(1 << 20) as usize,
                'M' => evictions = false,
                'c' => {
                    let n = refusal::atoi(&v);
                    if n <= 0 {
                        return fail("Maximum connections must be greater than 0".into());
                    }
                    max_connections = n as usize;
                }
                'h' => return Ok(Parsed::Print(format!("ferrocache {VERSION}\n{USAGE}"))),
                'i' => return Ok(Parsed::Print(license())),
                'V' => return Ok(Parsed::Print(format!("ferrocache {VERSION}\n"))),
                'k' => lock_memory = true,
                'v' => verbose += 1,
                'l' => match &mut inter {
                    // memcached skips an address already in the list (by substring).
                    Some(list) if list.contains(v.as_str()) => {}
                    Some(list) => *list = format!("{list},{v}"),
                    None => inter = Some(v),
                },
                'd' => daemonize = true,
                'r' => max_core = true,
                'R' => {
                    let n = refusal::atoi(&v);
                    if n == 0 {
                        return fail("Number of requests per event must be greater than 0".into());
                    }
                    reqs_per_event = u32::try_from(n).unwrap_or(1);
                }
                'u' => user = Some(v),
                'P' => pidfile = Some(v),
                'e' => memory_file = Some(v),
                'f' => {
                    factor = refusal::atof(&v);
                    if factor <= 1.0 {
                        return fail("Factor must be greater than 1".into());
                    }
                }
                'n' => {
                    let n = refusal::atoi(&v);
                    if n == 0 {
                        return fail("Chunk size must be greater than 0".into());
                    }
                    chunk_size = u32::try_from(n).unwrap_or(1);
                }
                't' => {
                    let n = refusal::atoi(&v);
                    if n <= 0 {
                        return fail("Number of threads must be greater than 0".into());
                    }
                    if n > 64 {
                        eprintln!(
                            "WARNING: Setting a high number of workerthreads is not recommended.\n Set this value to the number of cores in your machine or less."
                        );
                    }
                    threads = n as usize;
                }
                'D' => {
                    if v.is_empty() {
                        return fail("No delimiter specified".into());
                    }
                    delimiter = v;
                    detail_enabled = true;
                }
                'L' => large_pages = true,
                'C' => cas_enabled = false,
                'b' => backlog = refusal::atoi(&v) as i32,
                'B' => {
                    protocol_specified = true;
                    binding = match v.as_str() {
                        "auto" => Binding::Auto,
                        "binary" => Binding::Binary,
                        "ascii" => Binding::Ascii,
                        _ => {
                            return Err(Refusal::usage(format!(
                                "Invalid value for binding protocol: {v}\n -- should be one of auto, binary, or ascii"
                            )))
                        }
                    };
                }
                'I' => {
                    // memcached: a k or m suffix multiplies an `int`, which wraps.
                    let (digits, mult) = match v.chars().last() {
                        Some('k' | 'K') => (&v[..v.len() - 1], 1024),
                        Some('m' | 'M') => (&v[..v.len() - 1], 1024 * 1024),
                        _ => (v.as_str(), 1),
                    };
                    item_size_max = i64::from((refusal::atoi(digits) as i32).wrapping_mul(mult));
                }
                'S' => sasl = true,
                'F' => flush = false,
                'X' => dump = false,
                'W' => watch = false,
                'Y' => auth_file = Some(v),
                'N' => {
                    napi_ids = refusal::atoi(&v);
                    if napi_ids <= 0 {
                        return fail("Maximum number of NAPI IDs must be greater than 0".into());
                    }
                }
                _ => ext.apply(&v, &mut tls)?,
            }
        }

        // The checks after memcached's option loop, in its order.
        let usage = |m: String| Err(Refusal::usage(m));
        if napi_ids > threads as i64 {
            return usage(format!(
                "Number of napi_ids({napi_ids}) cannot be greater than number of threads({threads})"
            ));
        }
        if item_size_max < 1024 {
            return usage("Item max size cannot be less than 1024 bytes.".into());
        }
        if item_size_max as u64 > maxbytes as u64 / 2 {
            return usage("Cannot set item size limit higher than 1/2 of memory max.".into());
        }
        if item_size_max > 1024 * 1024 * 1024 {
            return usage("Cannot set item size limit higher than a gigabyte.".into());
        }
        if item_size_max > 1024 * 1024 && !ext.chunk_max_changed {
            ext.chunk_max = SLAB_PAGE_SIZE / 2;
        }
        let chunk_max = ext.chunk_max;
        if chunk_max > item_size_max {
            return usage(format!(
                "slab_chunk_max (bytes: {chunk_max}) cannot be larger than -I (item_size_max {item_size_max})"
            ));
        }
        // memcached divides by it; a zero or negative one crashes it.
        if chunk_max <= 0 {
            return usage(format!(
                "slab_chunk_max (bytes: {chunk_max}) must be positive"
            ));
        }
        if item_size_max % chunk_max != 0 {
            return usage(format!(
                "-I (item_size_max: {item_size_max}) must be evenly divisible by slab_chunk_max (bytes: {chunk_max})"
            ));
        }
        if SLAB_PAGE_SIZE % chunk_max != 0 {
            return usage(format!(
                "slab_chunk_max (bytes: {chunk_max}) must divide evenly into {SLAB_PAGE_SIZE} (slab_page_size)"
            ));
        }
        let sizes = match &ext.slab_sizes {
            Some(list) => {
                Some(parse_slab_sizes(list, chunk_size, chunk_max as u32).map_err(Refusal::usage)?)
            }
            None => None,
        };
        if ext.hot_lru_pct + ext.warm_lru_pct > 80 {
            return usage("hot_lru_pct + warm_lru_pct cannot be more than 80% combined".into());
        }
        if ext.temp_lru && !ext.lru_maintainer {
            return usage("temporary_ttl requires lru_maintainer to be enabled".into());
        }
        let sasl_pwdb = if sasl {
            if !protocol_specified {
                binding = Binding::Binary;
            } else if binding != Binding::Binary {
                return usage(
                    "ERROR: You cannot allow the ASCII protocol while using SASL.".into(),
                );
            }
            if udp_port != 0 {
                return usage(
                    "ERROR: Cannot enable UDP while using binary SASL authentication.".into(),
                );
            }
            Some(std::env::var("MEMCACHED_SASL_PWDB").map_err(|_| {
                Refusal::new(
                    EX_OSERR,
                    "-S needs MEMCACHED_SASL_PWDB naming a file of user:password lines",
                )
            })?)
        } else {
            None
        };
        if auth_file.is_some() {
            if !protocol_specified {
                binding = Binding::Ascii;
            } else if binding != Binding::Ascii {
                return usage(
                    "ERROR: You cannot allow the BINARY protocol while using ascii authentication tokens.".into(),
                );
            }
        }
        if udp_specified && udp_port != 0 && !tcp_specified {
            port = udp_port;
        }
        if port > 65535 {
            return usage(format!("ERROR: Invalid port number {port}."));
        }
        if port < -1 {
            return Err(Refusal::new(
                EX_OSERR,
                format!("failed to listen on TCP port {port}"),
            ));
        }
        if tls.enabled && port == 0 {
            return usage("ERROR: You cannot enable SSL without a TCP port.".into());
        }
        // memcached checks this after dropping privileges; same words and status.
        if auth_file.is_some() && udp_port != 0 {
            return usage(
                "Cannot use UDP with ascii authentication enabled (-U 0 to disable)".into(),
            );
        }
        let listen: Vec<String> = inter
            .as_deref()
            .unwrap_or("127.0.0.1")
            .split([',', ';'])
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        for entry in &listen {
            ListenSpec::parse(entry, tls.enabled)
                .map_err(|e| Refusal::new(EX_OSERR, format!("{e:#}")))?;
        }
        let chunk_max = chunk_max as u32;
        Ok(Parsed::Run(Box::new(Settings {
            tls,
            port,
            udp_port,
            listen,
            unix_socket,
            unix_mask,
            user,
            memory_limit_bytes: maxbytes,
            evictions,
            max_connections,
            verbose: verbose.min(MAX_VERBOSITY_LEVEL),
            pidfile,
            threads,
            reqs_per_event,
            cas_enabled,
            backlog,
            item_size_max_bytes: item_size_max as usize,
            flush_enabled: flush,
            shutdown_enabled: shutdown,
            dump_enabled: dump,
            watch_enabled: watch,
            chunk_size,
            growth_factor: format!("{factor:.2}"),
            delimiter,
            detail_enabled,
            napi_ids: napi_ids as u32,
            idle_timeout_secs: ext.idle_timeout,
            binding,
            sasl_pwdb,
            pin,
            busy_poll_us,
            io_backend,
            udp_gso,
            latency_histograms,
            metrics_listen,
            zero_copy_min,
            null_store: null_store.then(|| vec![b'x'; null_value_bytes]),
            hash_seed,
            large_pages,
            lock_memory,
            auth_file,
            daemonize,
            max_core,
            flash: ext.flash_config(),
            ext_tunables: ext.flash_tunables(),
            ext_threads: ext.ext_threads(),
            extended: ext.list,
            memory_file,
            classes: storage::ClassConfig {
                factor,
                chunk_size,
                chunk_max,
                sizes,
            },
        })))
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

/// A ferrocache option's `on` or `off`.
fn on_off(name: &str, v: &str) -> Result<bool, Refusal> {
    match v {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(Refusal::usage(format!("--{name} {v}: expected on or off"))),
    }
}
