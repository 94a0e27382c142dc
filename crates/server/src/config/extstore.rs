//! The `ext_*` suboptions (and `slab_automove_freeratio`), one row each, as extstore's
//! `storage_read_config` reads them: they configure the flash tier (`storage::flash`).
//! Sizes are in megabytes, as memcached reads them; every other default is storage's
//! (`FlashConfig::new`, `FlashTunables::default`) or the crawler's (`Tunables`).
//!
//! All but `ext_io_depth` act: `ext_path`, `ext_page_size` and `ext_wbuf_size` shape the
//! tier, `ext_threads` is the number of I/O threads that read for text gets
//! (`io/flash_io.rs`), `ext_max_sleep` the idle pause of the tier's background thread
//! (`io/launch.rs`), and the rest are the tier's run-time settings, which `extstore`
//! changes. Without `ext_path` they are kept, shown and changed all the same, and do
//! nothing, as in memcached.

use super::refusal::atoi;
use super::table::{fail, fixed, num, set, sub, yes_no, Acts, Row};
use super::Draft;

use Acts::{Inert, On};

/// `-h`'s line before these rows.
pub const HEADING: &str =
    "\n   - External storage (ext_*) related options (see: docs/operations.md, \"A flash tier\")\n";

/// docs/operations.md's words for the tier's run-time settings.
const TIER: &str = "as memcached's (above); `extstore` changes them at run time";

/// The flash tier's run-time settings, as the rows write them.
fn tier(d: &mut Draft) -> &mut storage::FlashTunables {
    &mut d.s.tunables.ext
}

/// The `ext_*` rows, in `-h`'s order.
pub const ROWS: &[Row] = &[
    sub(
        "ext_path",
        |d, a| {
            let Some(v) = a.value.filter(|v| !v.is_empty()) else {
                return fail("missing argument to ext_path, ie: ext_path=/d/file:5G");
            };
            // Each one adds a file: pages are taken from each in turn.
            match parse_ext_path(v) {
                Ok(file) => {
                    d.s.flash.files.push(file);
                    Ok(())
                }
                Err(why) => fail(format!("{why}\nfailed to parse ext_path argument")),
            }
        },
        On("flash.files: the tier's files (storage::flash)"),
        &[],
        &[
            "file to write to for external storage.",
            "ie: ext_path=/mnt/d1/extstore:1G",
        ], "a file of SIZE (M, G, T or P), `ext_path=FILE:SIZE[:bucket]`; several for several disks, pages taken from each in turn. memcached's bucket suffix is accepted and changes nothing: pages are not split into buckets",),
    sub(
        "ext_page_size",
        |d, a| set(&mut d.s.flash.page_size, u64::from(a.strtoul()?) << 20),
        On("flash.page_size"),
        &[],
        &["size in megabytes of storage pages. (default: 64)"], "MiB, as memcached's",),
    sub(
        "ext_wbuf_size",
        |d, a| {
            set(
                &mut d.s.flash.wbuf_size,
                (u64::from(a.strtoul()?) << 20) as usize,
            )
        },
        On("flash.wbuf_size: the tier's write buffer"),
        &[num("ext_wbuf_size", |v| v.s.flash.wbuf_size as i64)],
        &["size in megabytes of page write buffers. (default: 4)"], "MiB, as memcached's",),
    sub(
        "ext_threads",
        |d, a| set(&mut d.s.ext_threads, (a.strtoul()? as usize).max(1)),
        On("ext_threads: the I/O threads that read for text gets (io/flash_io.rs)"),
        &[],
        &["number of IO threads to run. (default: 1)"], "the I/O threads that read for text gets (default 1)",),
    sub(
        "ext_io_depth",
        |_, a| a.strtoul().map(drop),
        // Each I/O thread has one read in flight.
        Inert,
        &[],
        &["reads in flight per IO thread. (default: 1)"], "checked: each I/O thread has one read in flight",),
    sub(
        "ext_item_size",
        |d, a| set(&mut tier(d).item_size, a.strtoul()?),
        On("tunables.ext.item_size"),
        &[num("ext_item_size", |v| v.t.ext.item_size.into())],
        &["store items larger than this (bytes, default 512)"], TIER,),
    sub(
        "ext_item_age",
        |d, a| set(&mut tier(d).item_age, a.strtoul()?),
        On("tunables.ext.item_age"),
        &[num("ext_item_age", |v| v.t.ext.item_age.into())],
        &["store items idle at least this long (seconds, default: no age limit)"], TIER,),
    sub(
        "ext_low_ttl",
        |d, a| set(&mut tier(d).low_ttl, a.strtoul()?),
        On("tunables.ext.low_ttl"),
        &[num("ext_low_ttl", |v| v.t.ext.low_ttl.into())],
        &["consider TTLs lower than this specially (default: 0)"], TIER,),
    sub(
        "ext_drop_unread",
        |d, _| set(&mut tier(d).drop_unread, true),
        On("tunables.ext.drop_unread"),
        &[yes_no("ext_drop_unread", |v| v.t.ext.drop_unread)],
        &["don't re-write unread values during compaction (default: disabled)"], TIER,),
    sub(
        "ext_recache_rate",
        |d, a| set(&mut tier(d).recache_rate, a.strtoul()?),
        On("tunables.ext.recache_rate"),
        &[num("ext_recache_rate", |v| v.t.ext.recache_rate.into())],
        &["recache an item every N accesses (default: 2000)"], TIER,),
    sub(
        "ext_compact_under",
        |d, a| set(&mut tier(d).compact_under, a.strtoul()?),
        On("tunables.ext.compact_under"),
        &[num("ext_compact_under", |v| v.t.ext.compact_under.into())],
        &[
            "compact when fewer than this many free pages",
            "(default: 1/4th of the assigned storage)",
        ], TIER,),
    sub(
        "ext_drop_under",
        |d, a| set(&mut tier(d).drop_under, a.strtoul()?),
        On("tunables.ext.drop_under"),
        &[num("ext_drop_under", |v| v.t.ext.drop_under.into())],
        &[
            "drop COLD items when fewer than this many free pages",
            "(default: 1/4th of the assigned storage)",
        ], TIER,),
    sub(
        "ext_max_frag",
        |d, a| set(&mut tier(d).max_frag, a.strtod()?),
        On("tunables.ext.max_frag"),
        &[fixed("ext_max_frag", 2, |v| v.t.ext.max_frag)],
        &["max page fragmentation to tolerate (default: 0.80)"], TIER,),
    sub(
        "ext_max_sleep",
        |d, a| set(&mut d.s.tunables.ext_max_sleep, a.strtoul()?),
        On("tunables.ext_max_sleep: the tier's background pause (io/launch.rs)"),
        &[num("ext_max_sleep", |v| v.t.ext_max_sleep.into())],
        &["max sleep time of background threads in us (default: 1000000)"], "the background thread's pause when it has nothing to do, in µs, held between 10 and 100 ms",),
    sub(
        "slab_automove_freeratio",
        |d, a| set(&mut d.s.extended.slab_automove_freeratio, a.strtod()?),
        Inert,
        &[fixed("slab_automove_freeratio", 3, |v| {
            v.s.extended.slab_automove_freeratio
        })],
        &[
            "ratio of memory to hold free as buffer.",
            "(see doc/storage.txt for more info, default: 0.010)",
        ], "checked and shown in `stats settings` as memcached shows it: it tunes memcached's slab mover, which ferrocache does not have",),
];

/// extstore's `storage_conf_parse`: `path:SIZE[:bucket]`, the size a number with a unit
/// letter M, G, T or P (case-insensitive). The bucket (`compact`, `lowttl`) is accepted
/// and has no effect: pages here are not split into buckets.
fn parse_ext_path(arg: &str) -> Result<(std::path::PathBuf, u64), String> {
    let mut parts = arg.splitn(3, ':');
    let path = parts
        .next()
        .filter(|p| !p.is_empty())
        .ok_or("missing ext_path file")?;
    let size = parts
        .next()
        .filter(|s| !s.is_empty())
        .ok_or("must supply size to ext_path, ie: ext_path=/f/e:64m (M|G|T|P supported)")?;
    let (number, unit) = size.split_at(size.len() - 1);
    let multiplier: u64 = match unit.to_ascii_lowercase().as_str() {
        "m" => 1 << 20,
        "g" => 1 << 30,
        "t" => 1 << 40,
        "p" => 1 << 50,
        _ => 0,
    };
    let base = u64::try_from(atoi(number)).unwrap_or(0);
    let bytes = base.saturating_mul(multiplier);
    if bytes == 0 {
        return Err(format!("ext_path {path}: size {size} holds no page"));
    }
    Ok((std::path::PathBuf::from(path), bytes))
}
