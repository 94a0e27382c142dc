//! The flags' rows: memcached 1.6.18's (its `shortopts` and `longopts`), then
//! ferrocache's own long ones; and what `-i` prints.
//!
//! The order is memcached's `longopts`: glibc names the options an ambiguous prefix
//! could mean in table order (`--l` is `'--lock-memory' '--license' '--listen'
//! '--listen-backlog'`).

use super::getopt::{HasArg, OptSpec};
use super::refusal::{atof, atoi, Refusal};
use super::table::{
    fail, fixed, num, on_off, row, set, text, yes_no, Acts, Arg, Line, Name, Parse, Row,
};
use super::{extended, usage, Binding, Draft, IoBackend, VERSION};

use Acts::On;
use HasArg::{No, Optional, Required};

/// memcached's flags.
pub const MEMCACHED: &[Row] = &[
    flag(
        'a',
        "unix-mask",
        Required,
        unix_mask,
        On("unix_mask: the UNIX socket's permissions"),
        &[text("umask", |v| format!("{:o}", v.s.unix_mask).into())],
    ),
    flag(
        'A',
        "enable-shutdown",
        No,
        |d, _| set(&mut d.s.shutdown_enabled, true),
        On("shutdown_enabled: the `shutdown` command"),
        &[yes_no("shutdown_command", |v| v.s.shutdown_enabled)],
    ),
    flag(
        'Z',
        "enable-ssl",
        No,
        |d, _| set(&mut d.s.tls.enabled, true),
        On("tls.enabled: TLS on the TCP listeners (admin/tls.rs)"),
        &[yes_no("ssl_enabled", |v| v.s.tls.enabled)],
    ),
    flag(
        'p',
        "port",
        Required,
        |d, a| {
            d.tcp_specified = true;
            set(&mut d.s.port, atoi(a.text()) as i32)
        },
        On("port: the TCP port bound"),
        &[num("tcpport", |v| v.s.port.into())],
    ),
    flag(
        's',
        "unix-socket",
        Required,
        |d, a| set(&mut d.s.unix_socket, Some(a.text().into())),
        On("unix_socket: listen there only"),
        &[text("domain_socket", |v| {
            v.s.unix_socket.as_deref().unwrap_or("NULL").into()
        })],
    ),
    flag(
        'U',
        "udp-port",
        Required,
        |d, a| {
            d.udp_specified = true;
            set(&mut d.s.udp_port, atoi(a.text()) as i32)
        },
        On("udp_port: the UDP port bound"),
        &[num("udpport", |v| v.s.udp_port.into())],
    ),
    // `(size_t)atoi(optarg) * 1024 * 1024`: `-m 64m` is 64 MiB, `-m 1g` 1 MiB.
    flag(
        'm',
        "memory-limit",
        Required,
        |d, a| {
            set(
                &mut d.s.memory_limit_bytes,
                (atoi(a.text()) as u64).wrapping_mul(1 << 20) as usize,
            )
        },
        On("memory_limit_bytes: the store's limit"),
        &[num("maxbytes", |v| v.maxbytes as i64)],
    ),
    flag(
        'M',
        "disable-evictions",
        No,
        |d, _| set(&mut d.s.evictions, false),
        On("evictions: the store refuses instead of evicting"),
        &[on_off("evictions", |v| v.s.evictions)],
    ),
    flag(
        'c',
        "conn-limit",
        Required,
        |d, a| {
            let n = atoi(a.text());
            if n <= 0 {
                return fail("Maximum connections must be greater than 0");
            }
            set(&mut d.s.max_connections, n as usize)
        },
        On("max_connections: accepts past it are refused"),
        &[num("maxconns", |v| v.s.max_connections as i64)],
    ),
    flag(
        'k',
        "lock-memory",
        No,
        |d, _| set(&mut d.s.lock_memory, true),
        On("lock_memory: mlockall and locked segments"),
        &[],
    ),
    flag(
        'h',
        "help",
        No,
        |d, _| {
            set(
                &mut d.print,
                Some(format!("ferrocache {VERSION}\n{}", usage())),
            )
        },
        On("prints -h and exits"),
        &[],
    ),
    flag(
        'i',
        "license",
        No,
        |d, _| set(&mut d.print, Some(license())),
        On("prints the license and exits"),
        &[],
    ),
    flag(
        'V',
        "version",
        No,
        |d, _| set(&mut d.print, Some(format!("ferrocache {VERSION}\n"))),
        On("prints the version and exits"),
        &[],
    ),
    flag(
        'r',
        "enable-coredumps",
        No,
        |d, _| set(&mut d.s.max_core, true),
        On("max_core: the core file limit raised"),
        &[],
    ),
    flag(
        'v',
        "verbose",
        Optional,
        |d, _| {
            d.s.verbose = d.s.verbose.saturating_add(1);
            Ok(())
        },
        On("verbose: what is logged"),
        &[num("verbosity", |v| v.verbosity.into())],
    ),
    flag(
        'd',
        "daemon",
        No,
        |d, _| set(&mut d.s.daemonize, true),
        On("daemonize: detach at start"),
        &[],
    ),
    flag(
        'l',
        "listen",
        Required,
        listen,
        On("listen: the addresses bound"),
        &[text("inter", |v| {
            if v.s.listen.is_empty() {
                "NULL".into()
            } else {
                v.s.listen.join(",").into()
            }
        })],
    ),
    flag(
        'u',
        "user",
        Required,
        |d, a| set(&mut d.s.user, Some(a.text().into())),
        On("user: privileges dropped to it"),
        &[],
    ),
    flag(
        'P',
        "pidfile",
        Required,
        |d, a| set(&mut d.s.pidfile, Some(a.text().into())),
        On("pidfile: the PID written there"),
        &[],
    ),
    flag(
        'f',
        "slab-growth-factor",
        Required,
        |d, a| {
            let factor = atof(a.text());
            if factor <= 1.0 {
                return fail("Factor must be greater than 1");
            }
            set(&mut d.s.classes.factor, factor)
        },
        On("classes.factor: the slab classes stats slabs and stats items report"),
        &[fixed("growth_factor", 2, |v| v.s.classes.factor)],
    ),
    flag(
        'n',
        "slab-min-size",
        Required,
        |d, a| {
            let n = atoi(a.text());
            if n == 0 {
                return fail("Chunk size must be greater than 0");
            }
            set(&mut d.s.classes.chunk_size, u32::try_from(n).unwrap_or(1))
        },
        On("classes.chunk_size: as -f"),
        &[num("chunk_size", |v| v.s.classes.chunk_size.into())],
    ),
    flag(
        't',
        "threads",
        Required,
        threads,
        On("threads: the workers"),
        &[
            num("num_threads", |v| v.s.threads as i64),
            num("num_threads_per_udp", |v| v.s.threads as i64),
        ],
    ),
    flag(
        'D',
        "",
        Required,
        |d, a| {
            if a.text().is_empty() {
                return fail("No delimiter specified");
            }
            d.s.detail_enabled = true;
            set(&mut d.s.delimiter, a.text().into())
        },
        On("delimiter, detail_enabled: stats detail's prefixes, counted from the start"),
        &[
            text("stat_key_prefix", |v| {
                String::from_utf8_lossy(&[v.s.prefix_delimiter()])
                    .into_owned()
                    .into()
            }),
            yes_no("detail_enabled", |v| v.detail_enabled),
        ],
    ),
    flag(
        'L',
        "enable-largepages",
        No,
        |d, _| set(&mut d.s.large_pages, true),
        On("large_pages: item memory on transparent huge pages"),
        &[yes_no("large_pages", |v| v.s.large_pages)],
    ),
    flag(
        'R',
        "max-reqs-per-event",
        Required,
        |d, a| {
            let n = atoi(a.text());
            if n == 0 {
                return fail("Number of requests per event must be greater than 0");
            }
            set(&mut d.s.reqs_per_event, u32::try_from(n).unwrap_or(1))
        },
        On("reqs_per_event: where a connection's replies are flushed (session/conn)"),
        &[num("reqs_per_event", |v| v.s.reqs_per_event.into())],
    ),
    flag(
        'C',
        "disable-cas",
        No,
        |d, _| set(&mut d.s.cas_enabled, false),
        On("cas_enabled: the cas replies show and requests compare"),
        &[yes_no("cas_enabled", |v| v.s.cas_enabled)],
    ),
    flag(
        'b',
        "listen-backlog",
        Required,
        |d, a| set(&mut d.s.backlog, atoi(a.text()) as i32),
        On("backlog: the listen backlog"),
        &[num("tcp_backlog", |v| v.s.backlog.into())],
    ),
    flag(
        'B',
        "protocol",
        Required,
        protocol,
        On("binding: the protocols a connection may speak"),
        &[text("binding_protocol", |v| match v.s.binding {
            Binding::Auto => "auto-negotiate".into(),
            Binding::Ascii => "ascii".into(),
            Binding::Binary => "binary".into(),
        })],
    ),
    flag(
        'I',
        "max-item-size",
        Required,
        item_size_max,
        On("item_size_max_bytes: the largest item"),
        &[num("item_size_max", |v| v.s.item_size_max_bytes as i64)],
    ),
    flag(
        'S',
        "enable-sasl",
        No,
        |d, _| set(&mut d.sasl, true),
        On("sasl_pwdb: binary SASL authentication (admin/sasl.rs)"),
        &[yes_no("auth_enabled_sasl", |v| v.s.sasl_pwdb.is_some())],
    ),
    flag(
        'F',
        "disable-flush-all",
        No,
        |d, _| set(&mut d.s.flush_enabled, false),
        On("flush_enabled: flush_all refused"),
        &[yes_no("flush_enabled", |v| v.s.flush_enabled)],
    ),
    flag(
        'X',
        "disable-dumping",
        No,
        |d, _| set(&mut d.s.dump_enabled, false),
        On("dump_enabled: cachedump and metadump refused"),
        &[yes_no("dump_enabled", |v| v.s.dump_enabled)],
    ),
    flag(
        'W',
        "disable-watch",
        No,
        |d, _| set(&mut d.s.watch_enabled, false),
        On("watch_enabled: watch refused (proto/text)"),
        &[yes_no("watch_enabled", |v| v.s.watch_enabled)],
    ),
    flag(
        'Y',
        "auth-file",
        Required,
        |d, a| set(&mut d.s.auth_file, Some(a.text().into())),
        On("auth_file: ASCII authentication (admin/auth.rs)"),
        &[text("auth_enabled_ascii", |v| {
            v.s.auth_file.as_deref().unwrap_or("no").into()
        })],
    ),
    flag(
        'e',
        "memory-file",
        Required,
        |d, a| set(&mut d.s.memory_file, Some(a.text().into())),
        On("memory_file: warm restart (state/restart.rs)"),
        // memcached prints it with `%s`: glibc's `(null)` without -e.
        &[text("memory_file", |v| {
            v.s.memory_file.as_deref().unwrap_or("(null)").into()
        })],
    ),
    flag(
        'o',
        "extended",
        Required,
        |d, a| extended::apply(d, a.text()),
        On("the suboptions' rows"),
        &[],
    ),
    flag(
        'N',
        "napi-ids",
        Required,
        |d, a| {
            d.napi_ids = atoi(a.text());
            if d.napi_ids <= 0 {
                return fail("Maximum number of NAPI IDs must be greater than 0");
            }
            Ok(())
        },
        // Connections are not grouped by NAPI ID here (`--pin` steers them by CPU).
        Acts::Inert,
        // As memcached 1.6.18 shows it, which prints the number with `%s`.
        &[text("num_napi_ids", |_| "(null)".into())],
    ),
];

/// ferrocache's own options: long names only, listed after memcached's in `-h`.
pub const FERROCACHE: &[Row] = &[
    long(
        "pin",
        No,
        |d, _| set(&mut d.s.pin, true),
        On("pin: workers pinned, accepts steered by CPU (io/launch.rs)"),
        &[yes_no("pin", |v| v.s.pin)],
        &[
            "--pin",
            "pin worker N to CPU N, and steer each connection to the",
            "worker on the CPU that receives its packets",
        ],
    ),
    long(
        "busy-poll-us",
        Required,
        |d, a| {
            let us = u32::try_from(number(a, "microseconds")?)
                .map_err(|_| Refusal::usage("--busy-poll-us: too large"))?;
            set(&mut d.s.busy_poll_us, us)
        },
        On("busy_poll_us: a worker's poll before it sleeps (io/spin.rs)"),
        &[num("busy_poll_us", |v| v.s.busy_poll_us.into())],
        &[
            "--busy-poll-us=<num>",
            "poll up to this many microseconds before a worker sleeps,",
            "and SO_BUSY_POLL on client sockets (default: 0, off)",
        ],
    ),
    long(
        "io-backend",
        Required,
        |d, a| set(&mut d.s.io_backend, io_backend(a.text(), "--io-backend ")?),
        On("io_backend: epoll or io_uring workers (io/mod.rs)"),
        &[text("io_backend", |v| v.s.io_backend.name().into())],
        &[
            "--io-backend=<name>",
            "socket I/O: auto, uring or epoll (default: auto; also",
            "FERROCACHE_IO_BACKEND)",
        ],
    ),
    long(
        "zero-copy-min",
        Required,
        |d, a| set(&mut d.s.zero_copy_min, Some(number(a, "bytes")?)),
        On("zero_copy_min: get values sent in place (reply/splice.rs)"),
        &[num("zero_copy_min", |v| {
            v.s.zero_copy_min_for(v.s.io_backend).unwrap_or(0) as i64
        })],
        &[
            "--zero-copy-min=<bytes>",
            "send get values at least this long from where they are",
            "stored (0: always copy; default: 16384 on epoll, 32768",
            "on io_uring)",
        ],
    ),
    long(
        "udp-gso",
        Required,
        |d, a| set(&mut d.s.udp_gso, on_or_off(a)?),
        On("udp_gso: UDP replies with segmentation offload (io/udp.rs)"),
        &[on_off("udp_gso", |v| v.s.udp_gso)],
        &[
            "--udp-gso=<on|off>",
            "UDP replies with segmentation offload (default: on)",
        ],
    ),
    long(
        "latency-histograms",
        Required,
        |d, a| set(&mut d.s.latency_histograms, on_or_off(a)?),
        On("latency_histograms: requests timed (stats/latency.rs)"),
        &[on_off("latency_histograms", |v| v.s.latency_histograms)],
        &[
            "--latency-histograms=<on|off>",
            "time every request per command, for `stats latency`",
            "and /metrics (default: on)",
        ],
    ),
    long(
        "metrics-listen",
        Required,
        |d, a| {
            let v = a.text();
            if v.rsplit_once(':')
                .is_none_or(|(_, p)| p.parse::<u16>().is_err())
            {
                return Err(Refusal::usage(format!(
                    "--metrics-listen {v}: expected ADDRESS:PORT"
                )));
            }
            set(&mut d.s.metrics_listen, Some(v.into()))
        },
        On("metrics_listen: Prometheus' /metrics served (io/metrics.rs)"),
        &[text("metrics_listen", |v| {
            v.s.metrics_listen.as_deref().unwrap_or("NULL").into()
        })],
        &[
            "--metrics-listen=<addr:port>",
            "serve Prometheus metrics over HTTP on /metrics",
            "(default: off)",
        ],
    ),
    long(
        "null-store",
        No,
        |d, _| set(&mut d.null_store, true),
        On("null_store: canned replies, the store untouched (ops, proto)"),
        &[yes_no("null_store", |v| v.s.null_store.is_some())],
        &[
            "--null-store",
            "benchmark floor: canned replies, the store untouched",
        ],
    ),
    long(
        "null-value-bytes",
        Required,
        |d, a| set(&mut d.null_value_bytes, number(a, "bytes")?),
        On("null_store: the canned value's size"),
        &[],
        &[
            "--null-value-bytes=<num>",
            "size of the canned value --null-store returns (default: 20)",
        ],
    ),
    long(
        "debug-time",
        No,
        |d, _| set(&mut d.s.debug_time, true),
        On("debug_time: the debugtime command moves or stops the clock (clock.rs)"),
        &[],
        &[
            "--debug-time",
            "accept memcached-debug's `debugtime p|r|<seconds>`, which",
            "stops, restarts or moves on the server clock (tests only)",
        ],
    ),
    long(
        "hash-seed",
        Required,
        |d, a| {
            let seed = a.text().parse::<u64>().map_err(|_| {
                Refusal::usage(format!(
                    "--hash-seed: a number expected, got {:?}",
                    a.text()
                ))
            })?;
            set(&mut d.s.hash_seed, Some(seed))
        },
        On("hash_seed: the store's key hash seed"),
        &[],
        &[
            "--hash-seed=<num>",
            "fix the key hash's seed, for repeatable measurements",
            "(default: random)",
        ],
    ),
];

/// A memcached flag's row (`long` empty: none); its `-h` lines are in `usage.txt`.
const fn flag(
    short: char,
    long: &'static str,
    arg: HasArg,
    parse: Parse,
    acts: Acts,
    lines: &'static [Line],
) -> Row {
    let long = if long.is_empty() { None } else { Some(long) };
    let spec = OptSpec {
        short: Some(short),
        long,
        arg,
    };
    row(Name::Flag(spec), parse, acts, lines, &[], "")
}

/// A ferrocache option's row: a long name only; `help` is its synopsis, then its text.
const fn long(
    long: &'static str,
    arg: HasArg,
    parse: Parse,
    acts: Acts,
    lines: &'static [Line],
    help: &'static [&'static str],
) -> Row {
    let spec = OptSpec {
        short: None,
        long: Some(long),
        arg,
    };
    row(Name::Flag(spec), parse, acts, lines, help, "")
}

/// The flags' rows, in getopt's order: [`MEMCACHED`], then [`FERROCACHE`].
pub fn flags() -> impl Iterator<Item = &'static Row> {
    MEMCACHED.iter().chain(FERROCACHE)
}

/// The getopt table of the flags' rows, in their order.
pub fn specs() -> Vec<OptSpec> {
    flags()
        .filter_map(|r| match r.name {
            Name::Flag(spec) => Some(spec),
            Name::Sub(_) => None,
        })
        .collect()
}

/// `-a`: the leading octal digits, as memcached's `strtol(optarg, NULL, 8)`.
fn unix_mask(d: &mut Draft, a: Arg<'_>) -> Result<(), Refusal> {
    let t = a.text().trim_start();
    let end = t.bytes().take_while(|b| (b'0'..=b'7').contains(b)).count();
    set(
        &mut d.s.unix_mask,
        u32::from_str_radix(&t[..end], 8).unwrap_or(0),
    )
}

/// `-l`, added to the list; memcached skips an address already in it (by substring).
fn listen(d: &mut Draft, a: Arg<'_>) -> Result<(), Refusal> {
    let v = a.text();
    match &mut d.inter {
        Some(list) if list.contains(v) => {}
        Some(list) => *list = format!("{list},{v}"),
        None => d.inter = Some(v.to_string()),
    }
    Ok(())
}

/// `-t`, with memcached's warning past 64.
fn threads(d: &mut Draft, a: Arg<'_>) -> Result<(), Refusal> {
    let n = atoi(a.text());
    if n <= 0 {
        return fail("Number of threads must be greater than 0");
    }
    if n > 64 {
        eprintln!(
            "WARNING: Setting a high number of workerthreads is not recommended.\n Set this value to the number of cores in your machine or less."
        );
    }
    set(&mut d.s.threads, n as usize)
}

/// `-B`: memcached refuses a name it does not know with `EX_USAGE`, in the loop.
fn protocol(d: &mut Draft, a: Arg<'_>) -> Result<(), Refusal> {
    d.protocol_specified = true;
    let binding = match a.text() {
        "auto" => Binding::Auto,
        "binary" => Binding::Binary,
        "ascii" => Binding::Ascii,
        v => {
            return Err(Refusal::usage(format!(
            "Invalid value for binding protocol: {v}\n -- should be one of auto, binary, or ascii"
        )))
        }
    };
    set(&mut d.s.binding, binding)
}

/// `-I`: a k or m suffix multiplies an `int`, which wraps, as memcached's does.
fn item_size_max(d: &mut Draft, a: Arg<'_>) -> Result<(), Refusal> {
    let v = a.text();
    let (digits, mult) = match v.chars().last() {
        Some('k' | 'K') => (&v[..v.len() - 1], 1024),
        Some('m' | 'M') => (&v[..v.len() - 1], 1024 * 1024),
        _ => (v, 1),
    };
    d.item_size_max = i64::from((atoi(digits) as i32).wrapping_mul(mult));
    Ok(())
}

/// `--io-backend` and `FERROCACHE_IO_BACKEND`: a backend's name, or `EX_USAGE` naming
/// what gave it (`what` ends in the separator before the value).
pub fn io_backend(name: &str, what: &str) -> Result<IoBackend, Refusal> {
    IoBackend::from_name(name)
        .ok_or_else(|| Refusal::usage(format!("{what}{name}: expected auto, uring or epoll")))
}

/// A ferrocache option's number.
fn number(a: Arg<'_>, what: &str) -> Result<usize, Refusal> {
    a.text()
        .parse::<usize>()
        .map_err(|_| Refusal::usage(format!("--{}: {what} expected, got {:?}", a.name, a.text())))
}

/// A ferrocache option's `on` or `off`.
fn on_or_off(a: Arg<'_>) -> Result<bool, Refusal> {
    match a.text() {
        "on" => Ok(true),
        "off" => Ok(false),
        v => Err(Refusal::usage(format!(
            "--{} {v}: expected on or off",
            a.name
        ))),
    }
}

/// `-i`: the license, as memcached prints its own.
pub fn license() -> String {
    format!(
        "ferrocache {VERSION} is licensed under {}.\n\
         It reimplements the behaviour of memcached (Copyright (c) 2003, Danga Interactive,\n\
         Inc.; BSD-3-Clause); it contains none of memcached's code.\n",
        env!("CARGO_PKG_LICENSE")
    )
}
