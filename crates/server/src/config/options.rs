//! memcached 1.6.18's options (its `shortopts` and `longopts`), ferrocache's own long
//! ones after them, and what `-h` and `-i` print.

use super::getopt::{HasArg, OptSpec};
use super::VERSION;

/// `-h`: memcached's listing (the Debian build's), then ferrocache's own options.
pub const USAGE: &str = include_str!("usage.txt");

/// Every option: memcached's short letters and long names, then ferrocache's own, which
/// have long names only. [`super::Settings::parse`] matches on the index into this table by
/// the option's letter or name, read back from here.
pub const OPTIONS: &[OptSpec] = &[
    opt('a', "unix-mask", HasArg::Required),
    opt('A', "enable-shutdown", HasArg::No),
    opt('Z', "enable-ssl", HasArg::No),
    opt('p', "port", HasArg::Required),
    opt('s', "unix-socket", HasArg::Required),
    opt('U', "udp-port", HasArg::Required),
    opt('m', "memory-limit", HasArg::Required),
    opt('M', "disable-evictions", HasArg::No),
    opt('c', "conn-limit", HasArg::Required),
    opt('k', "lock-memory", HasArg::No),
    opt('h', "help", HasArg::No),
    opt('i', "license", HasArg::No),
    opt('V', "version", HasArg::No),
    opt('r', "enable-coredumps", HasArg::No),
    opt('v', "verbose", HasArg::Optional),
    opt('d', "daemon", HasArg::No),
    opt('l', "listen", HasArg::Required),
    opt('u', "user", HasArg::Required),
    opt('P', "pidfile", HasArg::Required),
    opt('f', "slab-growth-factor", HasArg::Required),
    opt('n', "slab-min-size", HasArg::Required),
    opt('t', "threads", HasArg::Required),
    opt('D', "", HasArg::Required),
    opt('L', "enable-largepages", HasArg::No),
    opt('R', "max-reqs-per-event", HasArg::Required),
    opt('C', "disable-cas", HasArg::No),
    opt('b', "listen-backlog", HasArg::Required),
    opt('B', "protocol", HasArg::Required),
    opt('I', "max-item-size", HasArg::Required),
    opt('S', "enable-sasl", HasArg::No),
    opt('F', "disable-flush-all", HasArg::No),
    opt('X', "disable-dumping", HasArg::No),
    opt('W', "disable-watch", HasArg::No),
    opt('Y', "auth-file", HasArg::Required),
    opt('e', "memory-file", HasArg::Required),
    opt('o', "extended", HasArg::Required),
    opt('N', "napi-ids", HasArg::Required),
    long("pin", HasArg::No),
    long("busy-poll-us", HasArg::Required),
    long("io-backend", HasArg::Required),
    long("zero-copy-min", HasArg::Required),
    long("udp-gso", HasArg::Required),
    long("latency-histograms", HasArg::Required),
    long("metrics-listen", HasArg::Required),
    long("null-store", HasArg::No),
    long("null-value-bytes", HasArg::Required),
    long("hash-seed", HasArg::Required),
];

const fn opt(short: char, long: &'static str, arg: HasArg) -> OptSpec {
    OptSpec {
        short: Some(short),
        long: if long.is_empty() { None } else { Some(long) },
        arg,
    }
}

const fn long(long: &'static str, arg: HasArg) -> OptSpec {
    OptSpec {
        short: None,
        long: Some(long),
        arg,
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
