//! `-o`: memcached 1.6.18's own suboptions (its `getsubopt` switch in `main()`), one row
//! each, with its checks, messages and `return 1`, in the order `-h` lists them; and the
//! settings they write that have no other home ([`Extended`]).
//!
//! Every suboption memcached's Debian build accepts is accepted. Those ferrocache acts
//! on: `idle_timeout`, the crawler's (`lru_crawler`, its sleep and limit), the `watch`
//! buffers (`worker_logbuf_size`, `watcher_logbuf_size`), `track_sizes`, and the slab
//! sizing ones, which shape the slab classes that `stats slabs` and `stats items`
//! report (`storage::classes`). The rest tune memcached internals that ferrocache does
//! not have: they are checked, kept for `stats settings` ([`Tunables`], [`Extended`])
//! and change nothing. The `ext_*` rows are in `extstore.rs`, the `ssl_*` ones in
//! `tls.rs`.

use super::refusal::{atof, atoi, safe_strtol, safe_strtoul, Refusal};
use super::table::{fail, fixed, num, set, sub, text, yes_no, Acts, Arg, Line, Row};
use super::{suboption, Draft, Tunables};

use Acts::{Inert, On};

/// memcached's `slab_page_size`: 1 MiB.
pub const SLAB_PAGE_SIZE: i64 = 1024 * 1024;

/// The `-o` settings kept nowhere else, with memcached's defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct Extended {
    /// `maxconns_fast`: shown, and `stats` prints `rejected_connections` only with it,
    /// as memcached; connections past `-c` are refused either way.
    pub maxconns_fast: bool,
    /// `hashpower`, `slab_automove_window`, `tail_repair_time`, `hash_algorithm`,
    /// `read_buf_mem_limit` (MiB), `slab_automove_freeratio`: shown only.
    pub hashpower_init: u32,
    pub slab_automove_window: u32,
    pub tail_repair_time: u32,
    pub hash_algorithm: &'static str,
    pub read_buf_mem_limit_mib: u32,
    pub slab_automove_freeratio: f64,
    /// `worker_logbuf_size`: each worker's `watch` queue, bytes (`admin/watch`).
    pub worker_logbuf_bytes: usize,
    /// `watcher_logbuf_size`: each watcher's `watch` buffer, bytes (`admin/watch`).
    pub watcher_logbuf_bytes: usize,
    /// `track_sizes`: `stats sizes` reports from the start (`ops/slabs.rs`).
    pub track_sizes: bool,
}

impl Default for Extended {
    fn default() -> Extended {
        Extended {
            maxconns_fast: true,
            hashpower_init: 0,
            slab_automove_window: 30,
            tail_repair_time: 0,
            hash_algorithm: "murmur3",
            read_buf_mem_limit_mib: 0,
            slab_automove_freeratio: 0.01,
            worker_logbuf_bytes: 64 * 1024,
            watcher_logbuf_bytes: 256 * 1024,
            track_sizes: false,
        }
    }
}

/// Apply one `-o` argument: comma-separated suboptions, in order.
pub fn apply(d: &mut Draft, arg: &str) -> Result<(), Refusal> {
    for token in arg.split(',').filter(|t| !t.is_empty()) {
        let (name, value) = match token.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (token, None),
        };
        // glibc's getsubopt hands back the whole token when no name matches.
        let Some(row) = suboption(name) else {
            return fail(format!("Illegal suboption \"{token}\""));
        };
        let name = row.arg_name();
        (row.parse)(d, Arg { name, value })?;
    }
    Ok(())
}

/// The crawler's and the LRU's tunables, as the rows below write them.
fn tunables(d: &mut Draft) -> &mut Tunables {
    &mut d.s.tunables
}

/// The rows' own settings.
fn ext(d: &mut Draft) -> &mut Extended {
    &mut d.s.extended
}

/// memcached's number of kilobytes (`safe_strtoul`) as bytes.
fn kib(a: Arg<'_>) -> Result<usize, Refusal> {
    Ok((a.strtoul()? as usize).saturating_mul(1024))
}

/// A suboption that takes no value and is inert here.
const fn inert(
    name: &'static str,
    lines: &'static [Line],
    help: &'static [&'static str],
    doc: &'static str,
) -> Row {
    sub(name, |_, _| Ok(()), Inert, lines, help, doc)
}

/// docs/operations.md's words for the suboptions of memcached internals.
const INTERNAL: &str = "checked and shown in `stats settings` as memcached shows them; \
    they tune memcached internals ferrocache does not have";
/// ... for the slab mover's and the LRU's tunables.
const LRU: &str = "checked and shown in `stats settings` as memcached shows them, and \
    changed by `slabs automove`, `lru tune`, `lru mode` and `lru temp_ttl` as there: \
    segments have no slab classes and eviction has no hot/warm/cold queues";
/// ... for the crawler's.
const SWEEP: &str = "the expired-item sweep (below)";
/// ... for the slab classes'.
const CLASSES: &str = "checked as memcached checks them (against `-I` and the 1 MiB \
    slab page); they shape the slab classes `stats slabs`/`stats items` report, and \
    change no allocation. `worker_logbuf_size` also sets `slab_sizes`, as in memcached \
    1.6.18 (a fall-through in its switch)";
/// ... for the `watch` buffers.
const WATCH: &str = "KiB of each watcher's buffer and of each worker's queue of `watch` \
    events, as memcached's (docs/protocol.md, \"Log streams: `watch`\")";
/// ... for `maxconns_fast`.
const MAXCONNS: &str = "connections past `-c` get `ERROR Too many open connections` \
    either way; as in memcached, `stats` shows `rejected_connections` only with \
    `maxconns_fast` (the default)";

/// memcached's suboptions.
pub const ROWS: &[Row] = &[
    sub(
        "maxconns_fast",
        |d, _| set(&mut ext(d).maxconns_fast, true),
        Inert,
        &[yes_no("maxconns_fast", |v| v.s.extended.maxconns_fast)],
        &["immediately close new connections after limit (default: enabled)"], MAXCONNS,),
    sub(
        "no_maxconns_fast",
        |d, _| set(&mut ext(d).maxconns_fast, false),
        Inert,
        &[],
        &[], MAXCONNS,),
    sub(
        "hashpower",
        |d, a| {
            let n = atoi(a.need("numeric argument for hashpower")?);
            if n < 12 {
                return fail(format!("Initial hashtable multiplier of {n} is too low"));
            }
            if n > 32 {
                return fail(format!(
                    "Initial hashtable multiplier of {n} is too high\nChoose a value based on \"STAT hash_power_level\" from a running instance"
                ));
            }
            set(&mut ext(d).hashpower_init, n as u32)
        },
        Inert,
        &[num("hashpower_init", |v| {
            v.s.extended.hashpower_init.into()
        })],
        &[
            "an integer multiplier for how large the hash",
            "table should be. normally grows at runtime. (default starts at: 0)",
            "set based on \"STAT hash_power_level\"",
        ], INTERNAL,),
    sub(
        "tail_repair_time",
        |d, a| {
            let n = atoi(a.need("numeric argument for tail_repair_time")?);
            if n < 10 {
                return fail("Cannot set tail_repair_time to less than 10 seconds");
            }
            set(&mut ext(d).tail_repair_time, n as u32)
        },
        Inert,
        &[num("tail_repair_time", |v| {
            v.s.extended.tail_repair_time.into()
        })],
        &[
            "time in seconds for how long to wait before",
            "forcefully killing LRU tail item.",
            "disabled by default; very dangerous option.",
        ], INTERNAL,),
    sub(
        "hash_algorithm",
        |d, a| {
            let v = a.need("hash_algorithm argument")?;
            let Some(name) = ["jenkins", "murmur3", "xxh3"].into_iter().find(|n| *n == v) else {
                return fail("Unknown hash_algorithm option (jenkins, murmur3, xxh3)");
            };
            set(&mut ext(d).hash_algorithm, name)
        },
        Inert,
        &[text("hash_algorithm", |v| {
            v.s.extended.hash_algorithm.into()
        })],
        &[
            "the hash table algorithm",
            "default is murmur3 hash. options: jenkins, murmur3, xxh3",
        ], INTERNAL,),
    sub(
        "lru_crawler",
        |d, _| set(&mut tunables(d).lru_crawler, true),
        On("tunables.lru_crawler: the expired-item sweep (io/launch.rs, admin/crawler.rs)"),
        &[yes_no("lru_crawler", |v| v.t.lru_crawler)],
        &[], SWEEP,),
    sub(
        "no_lru_crawler",
        |d, _| set(&mut tunables(d).lru_crawler, false),
        On("tunables.lru_crawler"),
        &[],
        &["disable LRU Crawler background thread."], SWEEP,),
    sub(
        "lru_crawler_sleep",
        |d, a| {
            let n = atoi(a.need("lru_crawler_sleep value")?);
            if !(0..=1_000_000).contains(&n) {
                return fail("LRU crawler sleep must be between 0 and 1 second");
            }
            set(&mut tunables(d).crawler_sleep_us, n as u32)
        },
        On("tunables.crawler_sleep_us: a requested crawl's pauses (admin/crawler.rs)"),
        &[num("lru_crawler_sleep", |v| v.t.crawler_sleep_us.into())],
        &["microseconds to sleep between items", "default is 100."], SWEEP,),
    sub(
        "lru_crawler_tocrawl",
        |d, a| {
            let Some(n) = safe_strtoul(a.need("lru_crawler_tocrawl value")?) else {
                return fail("lru_crawler_tocrawl takes a numeric 32bit value");
            };
            set(&mut tunables(d).crawler_tocrawl, n)
        },
        On("tunables.crawler_tocrawl: a requested crawl's limit (admin/crawler.rs)"),
        &[num("lru_crawler_tocrawl", |v| v.t.crawler_tocrawl.into())],
        &[
            "max items to crawl per slab per run",
            "default is 0 (unlimited)",
        ], SWEEP,),
    sub(
        "read_buf_mem_limit",
        |d, a| set(&mut ext(d).read_buf_mem_limit_mib, a.strtoul()?),
        // No read buffer is ever refused here (`stats` read_buf_oom stays 0).
        Inert,
        &[num("read_buf_mem_limit", |v| {
            i64::from(v.s.extended.read_buf_mem_limit_mib) << 20
        })],
        &[
            "limit in megabytes for connection read/response buffers.",
            "do not adjust unless you have high (20k+) conn. limits.",
            "0 means unlimited (default: 0)",
        ], INTERNAL,),
    sub(
        "resp_obj_mem_limit",
        |_, _| {
            eprintln!("DEPRECATED: resp_obj_mem_limit no longer used. See read_buf_mem_limit,");
            Ok(())
        },
        Inert,
        &[],
        &["deprecated: see read_buf_mem_limit"], "as memcached 1.6's: it prints its DEPRECATED line",),
    // As in memcached, the maintainer option also turns segmentation on or off.
    sub(
        "lru_maintainer",
        |d, _| lru_maintainer(tunables(d), true),
        Inert,
        &[
            yes_no("lru_maintainer_thread", |v| v.t.lru_maintainer),
            yes_no("lru_segmented", |v| v.t.lru_segmented),
        ],
        &[], LRU,),
    sub(
        "no_lru_maintainer",
        |d, _| lru_maintainer(tunables(d), false),
        Inert,
        &[],
        &["disable new LRU system + background thread."], LRU,),
    sub(
        "hot_lru_pct",
        |d, a| set(&mut tunables(d).hot_lru_pct, lru_pct(a)?),
        Inert,
        &[num("hot_lru_pct", |v| v.t.hot_lru_pct.into())],
        &[
            "pct of slab memory to reserve for hot lru.",
            "(requires lru_maintainer, default pct: 20)",
        ], LRU,),
    sub(
        "warm_lru_pct",
        |d, a| set(&mut tunables(d).warm_lru_pct, lru_pct(a)?),
        Inert,
        &[num("warm_lru_pct", |v| v.t.warm_lru_pct.into())],
        &[
            "pct of slab memory to reserve for warm lru.",
            "(requires lru_maintainer, default pct: 40)",
        ], LRU,),
    sub(
        "hot_max_factor",
        |d, a| set(&mut tunables(d).hot_max_factor, age_factor(a)?),
        Inert,
        &[fixed("hot_max_factor", 2, |v| v.t.hot_max_factor)],
        &["items idle > cold lru age * drop from hot lru. (default: 0.20)"], LRU,),
    sub(
        "warm_max_factor",
        |d, a| set(&mut tunables(d).warm_max_factor, age_factor(a)?),
        Inert,
        &[fixed("warm_max_factor", 2, |v| v.t.warm_max_factor)],
        &["items idle > cold lru age * this drop from warm. (default: 2.00)"], LRU,),
    sub(
        "temporary_ttl",
        |d, a| {
            let ttl = atoi(a.need("temporary_ttl argument")?).max(0);
            let t = tunables(d);
            t.temp_lru = true;
            set(&mut t.temporary_ttl, ttl as i32)
        },
        Inert,
        &[
            yes_no("temp_lru", |v| v.t.temp_lru),
            num("temporary_ttl", |v| v.t.temporary_ttl.into()),
        ],
        &[
            "TTL's below get separate LRU, can't be evicted.",
            "(requires lru_maintainer, default: 61)",
        ], LRU,),
    sub(
        "idle_timeout",
        |d, a| {
            let n = atoi(a.need("numeric argument for idle_timeout")?);
            set(&mut d.s.idle_timeout_secs, u32::try_from(n).unwrap_or(0))
        },
        On("idle_timeout_secs: idle connections closed (io/worker.rs)"),
        &[num("idle_timeout", |v| v.s.idle_timeout_secs.into())],
        &["timeout for idle connections. (default: 0, no timeout)"], "close connections idle for more than N seconds (0: never)",),
    sub(
        "slab_reassign",
        |d, _| set(&mut tunables(d).slab_reassign, true),
        Inert,
        &[yes_no("slab_reassign", |v| v.t.slab_reassign)],
        &["allow `slabs reassign` to move pages between classes (default: enabled)"], LRU,),
    sub(
        "no_slab_reassign",
        |d, _| set(&mut tunables(d).slab_reassign, false),
        Inert,
        &[],
        &[], LRU,),
    sub(
        "slab_automove",
        |d, a| {
            let n = a.value.map_or(1, atoi);
            if !(0..=2).contains(&n) {
                return fail("slab_automove must be between 0 and 2");
            }
            set(&mut tunables(d).slab_automove, n as u32)
        },
        Inert,
        &[num("slab_automove", |v| v.t.slab_automove.into())],
        &["0, 1 or 2: how readily pages move between classes (default: 1)"], LRU,),
    sub(
        "no_slab_automove",
        |d, _| set(&mut tunables(d).slab_automove, 0),
        Inert,
        &[],
        &[], LRU,),
    sub(
        "slab_automove_ratio",
        |d, a| {
            // memcached's check lets 1 through, though its message says < 1.
            let r = atof(a.need("slab_automove_ratio argument")?);
            if r <= 0.0 || r > 1.0 {
                return fail("slab_automove_ratio must be > 0 and < 1");
            }
            set(&mut tunables(d).slab_automove_ratio, r)
        },
        Inert,
        &[fixed("slab_automove_ratio", 2, |v| v.t.slab_automove_ratio)],
        &["ratio of free memory in a class that lets it give a page (default: 0.80)"], LRU,),
    sub(
        "slab_automove_window",
        |d, a| {
            let n = atoi(a.need("slab_automove_window argument")?);
            if n < 3 {
                return fail("slab_automove_window must be > 2");
            }
            set(&mut ext(d).slab_automove_window, n as u32)
        },
        Inert,
        &[num("slab_automove_window", |v| {
            v.s.extended.slab_automove_window.into()
        })],
        &["seconds of history slab_automove decides on (default: 30)"], INTERNAL,),
    sub(
        "slab_chunk_max",
        |d, a| {
            // memcached prints this and goes on (then crashes on a zero divisor);
            // ferrocache refuses.
            let v = a.need("slab_chunk_max argument")?;
            let Some(n) = safe_strtol(v) else {
                return fail("could not parse argument to slab_chunk_max");
            };
            d.chunk_max_changed = true;
            set(&mut d.chunk_max, i64::from(n))
        },
        On("classes.chunk_max: the slab classes stats slabs and stats items report"),
        &[num("slab_chunk_max", |v| v.s.classes.chunk_max.into())],
        &["(EXPERIMENTAL) maximum slab size in kilobytes. use extreme care. (default: 512)"], CLASSES,),
    // memcached crashes on a missing value (strdup(NULL)); refuse instead.
    sub(
        "slab_sizes",
        |d, a| {
            set(
                &mut d.slab_sizes,
                Some(a.need("slab_sizes argument")?.into()),
            )
        },
        On("classes.sizes: as slab_chunk_max"),
        &[],
        &["dash-separated chunk sizes of the slab classes, in bytes"], CLASSES,),
    sub(
        "no_chunked_items",
        |d, _| set(&mut d.chunk_max, SLAB_PAGE_SIZE),
        On("classes.chunk_max: as slab_chunk_max"),
        &[],
        &["never chunk items: slab_chunk_max is the slab page size"], CLASSES,),
    sub(
        "watcher_logbuf_size",
        |d, a| set(&mut ext(d).watcher_logbuf_bytes, kib(a)?),
        On("extended.watcher_logbuf_bytes: each watcher's buffer (admin/watch)"),
        &[num("watcher_logbuf_size", |v| {
            v.s.extended.watcher_logbuf_bytes as i64
        })],
        &["size in kilobytes of per-watcher write buffer. (default: 256)"], WATCH,),
    sub(
        "worker_logbuf_size",
        |d, a| {
            ext(d).worker_logbuf_bytes = kib(a)?;
            // memcached 1.6.18 falls through from worker_logbuf_size into slab_sizes.
            set(&mut d.slab_sizes, a.value.map(String::from))
        },
        On("extended.worker_logbuf_bytes: each worker's queue (admin/watch); and classes.sizes"),
        &[num("worker_logbuf_size", |v| {
            v.s.extended.worker_logbuf_bytes as i64
        })],
        &[
            "size in kilobytes of per-worker-thread buffer",
            "read by background thread, then written to watchers. (default: 64)",
        ], WATCH,),
    sub(
        "track_sizes",
        |d, _| set(&mut ext(d).track_sizes, true),
        On("extended.track_sizes: stats sizes reports from the start (ops/slabs.rs)"),
        // The live value: `stats sizes_enable` and `sizes_disable` change it.
        &[yes_no("track_sizes", |v| v.track_sizes)],
        &["enable dynamic reports for 'stats sizes' command."], "`stats sizes` reports from the start, as after `stats sizes_enable`",),
    inert(
        "no_hashexpand",
        &[],
        &["disables hash table expansion (dangerous)"], INTERNAL,),
    // memcached 1.6 always answers inline; the option is kept for old command lines.
    inert(
        "inline_ascii_resp",
        &[text("inline_ascii_response", |_| "no".into())],
        &["no effect since memcached 1.5 (also no_inline_ascii_resp)"], INTERNAL,),
    inert("no_inline_ascii_resp", &[], &[], INTERNAL,),
    inert(
        "modern",
        &[],
        &[
            "enables options which will be default in future.",
            "currently: nothing",
        ], "memcached 1.6's defaults are what it enabled",),
    sub(
        "no_modern",
        |d, _| {
            if !d.chunk_max_changed {
                d.chunk_max = SLAB_PAGE_SIZE;
            }
            let t = tunables(d);
            t.slab_reassign = false;
            t.lru_crawler = false;
            t.slab_automove = 0;
            lru_maintainer(t, false)
        },
        On("classes.chunk_max, tunables.lru_crawler: as memcached 1.4's defaults"),
        &[],
        &["uses defaults of previous major version (1.4.x)"], "sets what memcached's does: slab classes unchunked, the crawler, slab moves and the LRU maintainer off",),
    inert(
        "drop_privileges",
        &[],
        &["drop privileges with the OS's sandbox, where it has one"], INTERNAL,),
    inert("no_drop_privileges", &[], &[], INTERNAL,),
    // memcached-debug's: its tests pass it always; ferrocache has no sandbox to relax.
    inert(
        "relaxed_privileges",
        &[],
        &["relax the sandbox (memcached-debug's test builds)"], "memcached-debug's (its test suite passes it always); ferrocache has no sandbox to relax",),
    // memcached reads it with no check; nothing here marks sockets.
    inert(
        "sock_cookie_id",
        &[],
        &["attributes an ID to a socket for ip filtering/firewalls "], INTERNAL,),
];

/// `lru_maintainer` and `no_lru_maintainer`.
fn lru_maintainer(t: &mut Tunables, on: bool) -> Result<(), Refusal> {
    t.lru_segmented = on;
    set(&mut t.lru_maintainer, on)
}

/// `hot_lru_pct` and `warm_lru_pct`: each within 1..80 (their sum is checked after
/// the option loop, [`Tunables::lru_pcts_fit`]).
fn lru_pct(a: Arg<'_>) -> Result<u32, Refusal> {
    let n = atoi(a.value()?);
    if !(1..80).contains(&n) {
        return fail(format!("{} must be > 1 and < 80", a.name));
    }
    Ok(n as u32)
}

/// `hot_max_factor` and `warm_max_factor`.
fn age_factor(a: Arg<'_>) -> Result<f64, Refusal> {
    let f = atof(a.value()?);
    if !Tunables::age_factor_ok(f) {
        return fail(format!("{} must be > 0", a.name));
    }
    Ok(f)
}
