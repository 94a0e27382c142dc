//! `stats` and `stats settings` replies, in memcached's field order.

use std::sync::atomic::Ordering;

use crate::config::{settings_lines, View, VERSION};
use crate::state::Shared;
use crate::stats::{ConnMemory, Counters};

struct Out<'a>(&'a mut Vec<u8>);

impl Out<'_> {
    fn raw(&mut self, name: &str, value: &[u8]) {
        self.0.extend_from_slice(b"STAT ");
        self.0.extend_from_slice(name.as_bytes());
        self.0.push(b' ');
        self.0.extend_from_slice(value);
        self.0.extend_from_slice(b"\r\n");
    }

    fn str(&mut self, name: &str, value: &str) {
        self.raw(name, value.as_bytes());
    }

    fn num<N: itoa::Integer>(&mut self, name: &str, value: N) {
        let mut b = itoa::Buffer::new();
        self.raw(name, b.format(value).as_bytes());
    }

    fn end(self) {
        self.0.extend_from_slice(b"END\r\n");
    }
}

/// Descriptors the process holds besides its client connections (listeners, event
/// queues, files): what memcached's `reserved_fds` keeps aside for them.
fn reserved_fds(connections: usize) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count().saturating_sub(connections + 1))
        .unwrap_or(0)
}

/// The plain `stats` reply, in memcached 1.6.18's order and with its conditions (a
/// field memcached prints only under a setting is printed under the same one).
/// docs/operations.md ("Statistics") says what each means here; those of features
/// ferrocache does not have (slab reassignment, the LRU maintainer's queues, NAPI ids)
/// show memcached's value when idle. Each part below is a run of memcached's lines.
pub fn general(shared: &Shared, buf: &mut Vec<u8>) {
    let g = General {
        shared,
        c: shared.stats.snapshot(),
        store: shared.store.stats(),
        tunables: shared.crawler.tunables(),
        flash: shared.store.flash().map(storage::Flash::stats),
        conn: shared.conn_memory(),
        crawler: shared.crawler.counters(),
    };
    let mut o = Out(buf);
    g.process(&mut o);
    g.commands(&mut o);
    g.server(&mut o);
    g.threads(&mut o);
    g.logs(&mut o);
    g.flash_tier(&mut o);
    g.tls(&mut o);
    g.items(&mut o);
    g.memory(&mut o);
    o.end();
}

/// What the plain `stats` reply is read from, each read once.
struct General<'a> {
    shared: &'a Shared,
    c: Counters,
    store: storage::StoreStats,
    tunables: crate::admin::crawler::Tunables,
    flash: Option<storage::FlashStats>,
    conn: ConnMemory,
    /// The crawler's running, starts, reclaimed and checked.
    crawler: (bool, u64, u64, u64),
}

impl General<'_> {
    /// The process: its id, times, version, rusage, connections and buffers.
    fn process(&self, o: &mut Out<'_>) {
        let (shared, c, conn) = (self.shared, &self.c, &self.conn);
        let clock = &shared.clock;
        let settings = &shared.settings;
        let (user, system) = crate::sys::rusage_self();
        let curr = shared.curr_connections.load(Ordering::Relaxed);
        o.num("pid", std::process::id());
        o.num("uptime", clock.uptime());
        o.num("time", clock.process_started() + i64::from(clock.now()));
        o.str("version", VERSION);
        // memcached's event library; here the I/O backend in use.
        o.str("libevent", settings.io_backend.name());
        o.num("pointer_size", usize::BITS);
        o.str("rusage_user", &user);
        o.str("rusage_system", &system);
        o.num("max_connections", settings.max_connections);
        o.num("curr_connections", curr);
        o.num("total_connections", c.total_connections);
        if settings.extended.maxconns_fast {
            o.num("rejected_connections", c.rejected_connections);
        }
        o.num("connection_structures", curr);
        // memcached's response objects hold replies on their way out: here the write
        // buffers, whose bytes are kept (held or cached) but not their count, and which
        // are never refused.
        o.num("response_obj_oom", 0u32);
        o.num("response_obj_count", 0u32);
        o.num("response_obj_bytes", conn.write_bytes);
        // memcached's read-buffer cache, which ferrocache's per-worker buffer pool is:
        // buffers held by connections or cached, their bytes, the cached bytes. No read
        // buffer is ever refused (there is no `read_buf_mem_limit` to refuse by), so
        // `read_buf_oom` stays 0.
        o.num("read_buf_count", conn.read_buffers);
        o.num("read_buf_bytes", conn.read_bytes);
        o.num("read_buf_bytes_free", conn.read_free_bytes);
        o.num("read_buf_oom", 0u32);
        o.num("reserved_fds", reserved_fds(curr));
    }

    /// The command counters, with the flash tier's reads after the gets.
    fn commands(&self, o: &mut Out<'_>) {
        let c = &self.c;
        o.num("cmd_get", c.cmd_get);
        o.num("cmd_set", c.cmd_set);
        o.num("cmd_flush", c.cmd_flush);
        o.num("cmd_touch", c.cmd_touch);
        o.num("cmd_meta", c.cmd_meta);
        o.num("get_hits", c.get_hits);
        o.num("get_misses", c.get_misses);
        o.num("get_expired", c.get_expired);
        o.num("get_flushed", c.get_flushed);
        if let Some(f) = &self.flash {
            o.num("get_extstore", f.get_extstore);
            o.num("get_aborted_extstore", f.get_aborted_extstore);
            // Read buffers are not taken from a pool that can run out (memcached's slab
            // memory), so no read fails for want of one.
            o.num("get_oom_extstore", 0u32);
            o.num("recache_from_extstore", f.recache_from_extstore);
            o.num("miss_from_extstore", f.miss_from_extstore);
            o.num("badcrc_from_extstore", f.badcrc_from_extstore);
        }
        o.num("delete_misses", c.delete_misses);
        o.num("delete_hits", c.delete_hits);
        o.num("incr_misses", c.incr_misses);
        o.num("incr_hits", c.incr_hits);
        o.num("decr_misses", c.decr_misses);
        o.num("decr_hits", c.decr_hits);
        o.num("cas_misses", c.cas_misses);
        o.num("cas_hits", c.cas_hits);
        o.num("cas_badval", c.cas_badval);
        o.num("touch_hits", c.touch_hits);
        o.num("touch_misses", c.touch_misses);
        o.num("store_too_large", c.store_too_large);
        o.num("store_no_memory", c.store_no_memory);
        o.num("auth_cmds", c.auth_cmds);
        o.num("auth_errors", c.auth_errors);
    }

    /// Traffic, the memory limit, listening and the index.
    fn server(&self, o: &mut Out<'_>) {
        let (shared, c, store) = (self.shared, &self.c, &self.store);
        let settings = &shared.settings;
        if settings.idle_timeout_secs != 0 {
            o.num("idle_kicks", c.idle_kicks);
        }
        o.num("bytes_read", c.bytes_read);
        o.num("bytes_written", c.bytes_written);
        o.num("limit_maxbytes", store.limit_maxbytes);
        o.num(
            "accepting_conns",
            u8::from(!shared.shutting_down.load(Ordering::Relaxed)),
        );
        // Accepts that failed for want of descriptors; memcached stops listening then,
        // we retry on the next event, so no time is spent not listening.
        o.num("listen_disabled_num", c.listen_disabled_num);
        o.num("time_in_listen_disabled_us", 0u32);
        o.num("threads", settings.threads);
        o.num("conn_yields", c.conn_yields);
        // The index: its entry slots as a power of two, and its bytes. A shard's table
        // grows under its own lock, never all at once, so nothing is ever "expanding".
        o.num(
            "hash_power_level",
            usize::BITS - (store.index_bytes / 8).max(1).leading_zeros() - 1,
        );
        o.num("hash_bytes", store.index_bytes);
        o.num("hash_is_expanding", 0u32);
    }

    /// memcached's background threads: slab reassignment, the crawler, the LRU
    /// maintainer, as their settings show them.
    fn threads(&self, o: &mut Out<'_>) {
        let tunables = &self.tunables;
        if tunables.slab_reassign {
            for name in [
                "slab_reassign_rescues",
                "slab_reassign_chunk_rescues",
                "slab_reassign_evictions_nomem",
                "slab_reassign_inline_reclaim",
                "slab_reassign_busy_items",
                "slab_reassign_busy_deletes",
                "slab_reassign_running",
                "slabs_moved",
            ] {
                o.num(name, 0u32);
            }
        }
        let (crawler_running, crawler_starts, _, _) = self.crawler;
        if tunables.lru_crawler {
            o.num("lru_crawler_running", u8::from(crawler_running));
            o.num("lru_crawler_starts", crawler_starts);
        }
        if tunables.lru_maintainer {
            o.num("lru_maintainer_juggles", 0u32);
        }
        // Item memory comes in whole segments taken at start-up or on first use; no
        // allocation on the request path can fail.
        o.num("malloc_fails", 0u32);
    }

    /// `watch`'s log streams.
    fn logs(&self, o: &mut Out<'_>) {
        let w = &self.shared.watch;
        o.num(
            "log_worker_dropped",
            w.worker_dropped.load(Ordering::Relaxed),
        );
        o.num(
            "log_worker_written",
            w.worker_written.load(Ordering::Relaxed),
        );
        o.num(
            "log_watcher_skipped",
            w.watcher_skipped.load(Ordering::Relaxed),
        );
        o.num("log_watcher_sent", w.watcher_sent.load(Ordering::Relaxed));
        o.num("log_watchers", w.attached.load(Ordering::Relaxed));
    }

    /// The flash tier's pages, objects and bytes (memcached's extstore lines).
    fn flash_tier(&self, o: &mut Out<'_>) {
        let Some(f) = &self.flash else {
            return;
        };
        o.num("extstore_compact_lost", f.compact_lost);
        o.num("extstore_compact_rescues", f.compact_rescues);
        o.num("extstore_compact_skipped", f.compact_skipped);
        o.num("extstore_page_allocs", f.page_allocs);
        o.num("extstore_page_evictions", f.page_evictions);
        o.num("extstore_page_reclaims", f.page_reclaims);
        o.num("extstore_pages_free", f.pages_free);
        o.num("extstore_pages_used", f.pages_used);
        o.num("extstore_objects_evicted", f.objects_evicted);
        o.num("extstore_objects_read", f.objects_read);
        o.num("extstore_objects_written", f.objects_written);
        o.num("extstore_objects_used", f.objects_used);
        o.num("extstore_bytes_evicted", f.bytes_evicted);
        o.num("extstore_bytes_written", f.bytes_written);
        o.num("extstore_bytes_read", f.bytes_read);
        o.num("extstore_bytes_used", f.bytes_used);
        o.num("extstore_bytes_fragmented", f.bytes_fragmented);
        o.num("extstore_limit_maxbytes", f.page_count * f.page_size);
        // Reads run on the worker that asks (no queue between them and the file).
        o.num("extstore_io_queue", 0u32);
    }

    /// TLS (`-Z`): sessions, handshake errors, the certificate's age.
    fn tls(&self, o: &mut Out<'_>) {
        let Some(tls) = &self.shared.tls else {
            return;
        };
        if tls.options().session_cache {
            o.num("ssl_new_sessions", tls.new_sessions());
        }
        o.num(
            "ssl_handshake_errors",
            tls.handshake_errors.load(Ordering::Relaxed),
        );
        o.num(
            "time_since_server_cert_refresh",
            tls.seconds_since_refresh(self.shared.clock.now()),
        );
    }

    /// The items: counts, pages, expiry, eviction and reclaim, the LRU's moves.
    fn items(&self, o: &mut Out<'_>) {
        let (store, tunables) = (&self.store, &self.tunables);
        o.num("unexpected_napi_ids", 0u32);
        o.num("round_robin_fallback", 0u32);
        o.num("bytes", store.bytes);
        o.num("curr_items", store.curr_items);
        o.num("total_items", store.total_items);
        // Free 1 MiB pages, as memcached's global page pool counts them: the segments
        // the limit allows that hold nothing yet.
        o.num(
            "slab_global_page_pool",
            store.free_segments * store.segment_size / (1 << 20),
        );
        o.num("expired_unfetched", store.expired_unfetched);
        o.num("evicted_unfetched", store.evicted_unfetched);
        if tunables.lru_maintainer {
            o.num("evicted_active", store.evicted_active);
        }
        o.num("evictions", store.evictions);
        o.num("reclaimed", store.reclaimed);
        let (_, _, crawler_reclaimed, crawler_checked) = self.crawler;
        o.num("crawler_reclaimed", crawler_reclaimed);
        o.num("crawler_items_checked", crawler_checked);
        o.num("lrutail_reflocked", 0u32);
        if tunables.lru_maintainer {
            o.num("moves_to_cold", 0u32);
            o.num("moves_to_warm", 0u32);
            o.num("moves_within_lru", store.items_retained);
            o.num("direct_reclaims", store.direct_reclaims);
            o.num("lru_bumps_dropped", 0u32);
        }
    }

    /// ferrocache's own lines, after memcached's: where the memory goes. Items and
    /// index share the store's budget (1.05 x -m); connections and the rest of the
    /// process live in the 32 MiB beside it, connections past their allowance taking
    /// from the store's budget (docs/design.md, "The memory budget").
    fn memory(&self, o: &mut Out<'_>) {
        let (shared, store, conn) = (self.shared, &self.store, &self.conn);
        o.num("store_budget_bytes", store.budget_bytes);
        o.num(
            "item_memory_bytes",
            store.segments_used * store.segment_size,
        );
        o.num("index_bytes", store.index_bytes);
        o.num("conn_buffer_bytes", conn.buffers_in_use());
        o.num("conn_buffer_pooled_bytes", conn.buffers_pooled());
        o.num("conn_state_bytes", conn.state_bytes);
        o.num("conn_charged_bytes", store.outside_bytes);
        if let Some(f) = &self.flash {
            // The tier's own failures, beside memcached's counters.
            o.num("extstore_write_errors", f.write_errors);
            o.num("extstore_read_errors", f.read_errors);
            o.num(
                "extstore_buffer_bytes",
                shared.store.flash().map_or(0, storage::Flash::buffer_bytes),
            );
        }
        if let Some(tls) = &shared.tls {
            // TLS errors after a completed handshake (memcached counts none).
            o.num("ssl_proto_errors", tls.proto_errors.load(Ordering::Relaxed));
        }
    }
}

/// `stats extstore`: each page's version (0: free), live bytes and bucket, as
/// memcached's `process_extstore_stats` prints them; only `END` without a tier.
pub fn extstore(shared: &Shared, buf: &mut Vec<u8>) {
    let mut o = Out(buf);
    if let Some(flash) = shared.store.flash() {
        for (i, (version, bytes)) in flash.page_data().into_iter().enumerate() {
            o.num(&format!("{i}:version"), version);
            o.num(&format!("{i}:bytes"), bytes);
            // Pages are not split into buckets here: every page is memcached's bucket 0.
            o.num(&format!("{i}:bucket"), 0u32);
            o.num(&format!("{i}:free_bucket"), 0u32);
        }
    }
    o.end();
}

/// The `stats settings` reply: each line of the table of options, in memcached's order,
/// read from the settings and from what commands have changed since.
pub fn settings(shared: &Shared, buf: &mut Vec<u8>) {
    let tunables = shared.crawler.tunables();
    let view = View {
        s: &shared.settings,
        t: &tunables,
        maxbytes: shared.store.memory_limit(),
        verbosity: shared.verbosity.load(Ordering::Relaxed),
        detail_enabled: shared.prefixes.enabled(),
        track_sizes: shared.sizes_tracking.load(Ordering::Relaxed),
    };
    let mut o = Out(buf);
    for line in settings_lines() {
        o.str(line.name, &line.value(&view));
    }
    o.end();
}

/// `stats latency` (ferrocache's own; memcached has none): per command, the requests
/// timed since start or `stats reset`, and their latency in microseconds from the
/// first byte of input to the reply handed to the kernel (`stats/latency.rs`): mean,
/// p50, p90, p99, p99.9 (each the upper bound of its bucket, within 6.25 %) and the
/// exact maximum. Every command is listed, zeros where none ran (and everywhere with
/// `--latency-histograms off`).
pub fn latency(shared: &Shared, buf: &mut Vec<u8>) {
    let histograms = shared.stats.latency();
    let mut o = Out(buf);
    for (command, h) in crate::stats::latency::Command::ALL
        .iter()
        .zip(histograms.iter())
    {
        let name = command.name();
        let count = h.count();
        o.num(&format!("{name}:count"), count);
        let mean = h.sum_ticks.checked_div(count).unwrap_or(0);
        o.str(&format!("{name}:mean_us"), &micros(mean));
        for (label, q) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999)] {
            o.str(&format!("{name}:{label}_us"), &micros(h.quantile(q)));
        }
        o.str(&format!("{name}:max_us"), &micros(h.max_ticks));
    }
    o.end();
}

/// Ticks (`stats/latency.rs`) as microseconds with one decimal.
fn micros(ticks: u64) -> String {
    let ns = crate::stats::latency::ticks_to_ns(ticks);
    format!("{}.{}", ns / 1000, ns % 1000 / 100)
}
