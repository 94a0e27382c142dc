//! The per-class reports: `stats items`, `stats slabs`, `stats sizes` and
//! `stats cachedump`, in memcached's shapes.
//!
//! ferrocache has no slab classes; the store counts its items by the class memcached
//! would have put each in (`storage::classes`), so that memcached's tools read the same
//! shapes. What each field means here is in docs/operations.md ("Statistics"): the
//! short of it is that counts, sizes, evictions and reclaims are true per class; the
//! fields of memcached's segmented LRU (hot/warm/temp queues, tail repairs, reflocks)
//! have nothing to count and show 0; pages and chunks are those memcached would need
//! for the items there are now.

use std::sync::atomic::Ordering;

use protocol::text::{safe_strtoul, ErrorReply, Tokens};

use crate::state::Shared;

/// memcached's cap on a `stats cachedump` reply.
const CACHEDUMP_MAX_BYTES: usize = 2 * 1024 * 1024;

/// `STAT items:<id>:<name> <value>` and `STAT <id>:<name> <value>` lines.
struct ClassOut<'a> {
    buf: &'a mut Vec<u8>,
    prefix: &'static str,
}

impl ClassOut<'_> {
    fn num<N: itoa::Integer>(&mut self, class: usize, name: &str, value: N) {
        let mut a = itoa::Buffer::new();
        let mut b = itoa::Buffer::new();
        self.buf.extend_from_slice(b"STAT ");
        self.buf.extend_from_slice(self.prefix.as_bytes());
        self.buf.extend_from_slice(a.format(class).as_bytes());
        self.buf.push(b':');
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(b' ');
        self.buf.extend_from_slice(b.format(value).as_bytes());
        self.buf.extend_from_slice(b"\r\n");
    }
}

fn stat(buf: &mut Vec<u8>, name: &str, value: &str) {
    buf.extend_from_slice(b"STAT ");
    buf.extend_from_slice(name.as_bytes());
    buf.push(b' ');
    buf.extend_from_slice(value.as_bytes());
    buf.extend_from_slice(b"\r\n");
}

/// Seconds since the oldest item in the eviction queue was written (memcached's
/// `age`: how old its LRU's tail is), or 0 with nothing stored.
fn oldest_age(shared: &Shared) -> u32 {
    let now = shared.clock.now();
    shared
        .store
        .oldest_write()
        .map_or(0, |t| now.saturating_sub(t))
}

/// The `stats items` reply: memcached's fields for each class holding items.
pub fn items(shared: &Shared, buf: &mut Vec<u8>) {
    let classes = shared.store.class_stats();
    let lru_maintainer = shared.crawler.tunables().lru_maintainer;
    let temp_lru = shared.crawler.tunables().temp_lru;
    let age = oldest_age(shared);
    let mut o = ClassOut {
        buf,
        prefix: "items:",
    };
    for (i, c) in classes.iter().enumerate() {
        if c.items == 0 {
            continue;
        }
        let id = i + 1;
        o.num(id, "number", c.items);
        if lru_maintainer {
            // One queue: every item is where memcached's cold items are, the only
            // queue whose tail it evicts from.
            o.num(id, "number_hot", 0u32);
            o.num(id, "number_warm", 0u32);
            o.num(id, "number_cold", c.items);
            if temp_lru {
                o.num(id, "number_temp", 0u32);
            }
            o.num(id, "age_hot", 0u32);
            o.num(id, "age_warm", 0u32);
        }
        o.num(id, "age", age);
        o.num(id, "mem_requested", c.requested);
        o.num(id, "evicted", c.evicted);
        o.num(id, "evicted_nonzero", c.evicted_nonzero);
        o.num(id, "evicted_time", c.evicted_time);
        // A store refused for memory is counted in `stats`' `store_no_memory` alone.
        o.num(id, "outofmemory", 0u32);
        o.num(id, "tailrepairs", 0u32);
        o.num(id, "reclaimed", c.reclaimed);
        o.num(id, "expired_unfetched", c.expired_unfetched);
        o.num(id, "evicted_unfetched", c.evicted_unfetched);
        if lru_maintainer {
            o.num(id, "evicted_active", c.evicted_active);
        }
        o.num(id, "crawler_reclaimed", c.crawler_reclaimed);
        o.num(id, "crawler_items_checked", c.crawler_checked);
        o.num(id, "lrutail_reflocked", 0u32);
        if lru_maintainer {
            o.num(id, "moves_to_cold", 0u32);
            o.num(id, "moves_to_warm", 0u32);
            // An active item kept by the second chance when its segment was evicted:
            // what memcached's bump of an active item within its LRU does.
            o.num(id, "moves_within_lru", c.retained);
            o.num(id, "direct_reclaims", 0u32);
            o.num(id, "hits_to_hot", 0u32);
            o.num(id, "hits_to_warm", 0u32);
            o.num(id, "hits_to_cold", 0u32);
            o.num(id, "hits_to_temp", 0u32);
        }
    }
    buf.extend_from_slice(b"END\r\n");
}

/// The `stats slabs` reply: for each class holding items, its chunk size and the pages
/// and chunks memcached would need for them; then `active_slabs` and
/// `total_malloced`, the item memory in use.
pub fn slabs(shared: &Shared, buf: &mut Vec<u8>) {
    let classes = shared.store.class_stats();
    let table = shared.store.slab_classes();
    let store = shared.store.stats();
    let mut o = ClassOut { buf, prefix: "" };
    let mut active = 0u32;
    for (i, c) in classes.iter().enumerate() {
        if c.items == 0 {
            continue;
        }
        let id = i + 1;
        active += 1;
        let per_page = u64::from(table.per_page(id)).max(1);
        let pages = c.items.div_ceil(per_page);
        o.num(id, "chunk_size", table.chunk_size(id));
        o.num(id, "chunks_per_page", per_page);
        o.num(id, "total_pages", pages);
        o.num(id, "total_chunks", pages * per_page);
        o.num(id, "used_chunks", c.items);
        o.num(id, "free_chunks", pages * per_page - c.items);
        o.num(id, "free_chunks_end", 0u32);
        // Command counts are kept per worker for all classes together (`stats`).
        for name in [
            "get_hits",
            "cmd_set",
            "delete_hits",
            "incr_hits",
            "decr_hits",
            "cas_hits",
            "cas_badval",
            "touch_hits",
        ] {
            o.num(id, name, 0u32);
        }
    }
    let mut n = itoa::Buffer::new();
    stat(buf, "active_slabs", n.format(active));
    stat(
        buf,
        "total_malloced",
        n.format(store.segments_used * store.segment_size),
    );
    buf.extend_from_slice(b"END\r\n");
}

/// The `stats sizes` reply: with tracking on (`-o track_sizes`, `stats sizes_enable`),
/// live items by memcached size rounded up to 32 bytes, from a walk of the index (of
/// the items written since tracking began, as memcached counts); otherwise memcached's
/// `sizes_status disabled`.
pub fn sizes(shared: &Shared, buf: &mut Vec<u8>) {
    if !shared.sizes_tracking.load(Ordering::Relaxed) {
        stat(buf, "sizes_status", "disabled");
        buf.extend_from_slice(b"END\r\n");
        return;
    }
    let store = &shared.store;
    let cas = u64::from(shared.settings.cas_enabled);
    let mut hist = std::collections::BTreeMap::<usize, u64>::new();
    let mut cursor = storage::DumpCursor::default();
    let now = shared.clock.now();
    let from_cas = shared.sizes_from_cas.load(Ordering::Relaxed);
    while store.dump(&mut cursor, now, 1 << 16, |it| {
        if it.cas < from_cas {
            return;
        }
        let ntotal = storage::memcached::memcached_item_size(
            it.key.len(),
            it.flags != 0,
            it.value_len,
            cas != 0,
        );
        *hist.entry(ntotal.div_ceil(32)).or_default() += 1;
    }) {}
    let limit = shared.settings.item_size_max_bytes / 32 + 1;
    let mut a = itoa::Buffer::new();
    let mut b = itoa::Buffer::new();
    for (bucket, count) in hist.range(..limit) {
        stat(buf, a.format(bucket * 32), b.format(*count));
    }
    buf.extend_from_slice(b"END\r\n");
}

/// `stats sizes_enable` and `stats sizes_disable`. memcached ends these replies
/// without `END` (docs/protocol.md).
pub fn set_sizes(shared: &Shared, enable: bool, buf: &mut Vec<u8>) {
    if enable && !shared.settings.cas_enabled {
        // memcached tells items stored after the switch by their cas.
        stat(buf, "sizes_status", "error");
        stat(buf, "sizes_error", "cas_support_disabled");
    } else {
        if enable && !shared.sizes_tracking.load(Ordering::Relaxed) {
            shared
                .sizes_from_cas
                .store(shared.store.next_cas_id(), Ordering::Relaxed);
        }
        shared.sizes_tracking.store(enable, Ordering::Relaxed);
        stat(
            buf,
            "sizes_status",
            if enable { "enabled" } else { "disabled" },
        );
    }
}

/// `stats cachedump <class> <limit>`: `ITEM <key> [<value bytes> b; <exptime> s]` for
/// live items of the class, up to `limit` (0: all) and memcached's 2 MiB, then `END`.
/// memcached walks the class's LRU from its newest item; this walks the index, so the
/// order is the index's. `args` are the group's tokens (`cachedump` first).
pub fn cachedump(shared: &Shared, args: &Tokens<'_>, buf: &mut Vec<u8>) {
    if !shared.settings.dump_enabled {
        buf.extend_from_slice(b"CLIENT_ERROR stats cachedump not allowed\r\n");
        return;
    }
    if args.len() < 3 {
        buf.extend_from_slice(ErrorReply::BadCommandLine.bytes());
        return;
    }
    let (class, limit) = match (safe_strtoul(args.get(1)), safe_strtoul(args.get(2))) {
        // memcached's MAX_NUMBER_OF_SLAB_CLASSES.
        (Some(class), Some(_)) if class >= 64 => {
            buf.extend_from_slice(b"CLIENT_ERROR Illegal slab id\r\n");
            return;
        }
        (Some(class), Some(limit)) => (class as usize, limit as usize),
        _ => {
            buf.extend_from_slice(ErrorReply::BadFormat.bytes());
            return;
        }
    };
    let started = shared.clock.process_started();
    let now = shared.clock.now();
    let start = buf.len();
    let mut shown = 0usize;
    let mut full = false;
    let mut cursor = storage::DumpCursor::default();
    let mut line = Vec::with_capacity(320);
    while !full && (limit == 0 || shown < limit) {
        let more = shared.store.dump(&mut cursor, now, 4096, |it| {
            if full || it.class != class || (limit != 0 && shown >= limit) {
                return;
            }
            line.clear();
            line.extend_from_slice(b"ITEM ");
            line.extend_from_slice(it.key);
            line.extend_from_slice(b" [");
            line.extend_from_slice(itoa::Buffer::new().format(it.value_len).as_bytes());
            line.extend_from_slice(b" b; ");
            let expires = if it.exptime == 0 {
                0
            } else {
                started + i64::from(it.exptime)
            };
            line.extend_from_slice(itoa::Buffer::new().format(expires).as_bytes());
            line.extend_from_slice(b" s]\r\n");
            // memcached keeps room for END and its NUL.
            if buf.len() - start + line.len() + 6 > CACHEDUMP_MAX_BYTES {
                full = true;
                return;
            }
            buf.extend_from_slice(&line);
            shown += 1;
        });
        if !more {
            break;
        }
    }
    buf.extend_from_slice(b"END\r\n");
}
