//! memcached_exporter's metric names, help texts and types, by the `stats` field each
//! is read from (as the exporter reads them).

/// One stats field under one exporter name: (stats name, metric, kind, help).
pub type Mapping = (&'static str, &'static str, &'static str, &'static str);

pub const GENERAL: &[Mapping] = &[
    ("uptime", "memcached_uptime_seconds", "counter", "Number of seconds since the server started."),
    ("time", "memcached_time_seconds", "gauge", "current UNIX time according to the server."),
    ("rusage_user", "memcached_process_user_cpu_seconds_total", "counter", "Accumulated user time for this process."),
    ("rusage_system", "memcached_process_system_cpu_seconds_total", "counter", "Accumulated system time for this process."),
    ("bytes", "memcached_current_bytes", "gauge", "Current number of bytes used to store items."),
    ("limit_maxbytes", "memcached_limit_bytes", "gauge", "Number of bytes this server is allowed to use for storage."),
    ("curr_items", "memcached_current_items", "gauge", "Current number of items stored by this instance."),
    ("total_items", "memcached_items_total", "counter", "Total number of items stored during the life of this instance."),
    ("bytes_read", "memcached_read_bytes_total", "counter", "Total number of bytes read by this server from network."),
    ("bytes_written", "memcached_written_bytes_total", "counter", "Total number of bytes sent by this server to network."),
    ("curr_connections", "memcached_current_connections", "gauge", "Current number of open connections."),
    ("total_connections", "memcached_connections_total", "counter", "Total number of connections opened since the server started running."),
    ("rejected_connections", "memcached_connections_rejected_total", "counter", "Total number of connections rejected due to hitting the memcached's -c limit in maxconns_fast mode."),
    ("conn_yields", "memcached_connections_yielded_total", "counter", "Total number of connections yielded running due to hitting the memcached's -R limit."),
    ("listen_disabled_num", "memcached_connections_listener_disabled_total", "counter", "Number of times that memcached has hit its connections limit and disabled its listener."),
    ("evictions", "memcached_items_evicted_total", "counter", "Total number of valid items removed from cache to free memory for new items."),
    ("reclaimed", "memcached_items_reclaimed_total", "counter", "Total number of times an entry was stored using memory from an expired entry."),
    ("store_too_large", "memcached_item_too_large_total", "counter", "The number of times an item exceeded the max-item-size when being stored."),
    ("store_no_memory", "memcached_item_no_memory_total", "counter", "The number of times an item could not be stored due to no more memory."),
    ("lru_crawler_starts", "memcached_lru_crawler_starts_total", "counter", "Times an LRU crawler was started."),
    ("direct_reclaims", "memcached_direct_reclaims_total", "counter", "Times worker threads had to directly reclaim or evict items."),
    ("crawler_items_checked", "memcached_lru_crawler_items_checked_total", "counter", "Total items examined by LRU Crawler."),
    ("crawler_reclaimed", "memcached_lru_crawler_reclaimed_total", "counter", "Total items freed by LRU Crawler."),
    ("moves_to_cold", "memcached_lru_crawler_moves_to_cold_total", "counter", "Total number of items moved from HOT/WARM to COLD LRU's."),
    ("moves_to_warm", "memcached_lru_crawler_moves_to_warm_total", "counter", "Total number of items moved from COLD to WARM LRU."),
    ("moves_within_lru", "memcached_lru_crawler_moves_within_lru_total", "counter", "Total number of items reshuffled within HOT or WARM LRU's."),
    ("total_malloced", "memcached_malloced_bytes", "gauge", "Number of bytes of memory allocated to slab pages."),
    ("accepting_conns", "memcached_accepting_connections", "gauge", "The Memcached server is currently accepting new connections."),
];

/// `stats settings` fields, printed by the exporter when the LRU crawler is on.
pub const CRAWLER_SETTINGS: &[Mapping] = &[
    (
        "lru_crawler_sleep",
        "memcached_lru_crawler_sleep",
        "gauge",
        "Microseconds to sleep between LRU crawls.",
    ),
    (
        "lru_crawler_tocrawl",
        "memcached_lru_crawler_to_crawl",
        "gauge",
        "Max items to crawl per slab per run.",
    ),
    (
        "hot_lru_pct",
        "memcached_lru_crawler_hot_percent",
        "gauge",
        "Percent of slab memory reserved for HOT LRU.",
    ),
    (
        "warm_lru_pct",
        "memcached_lru_crawler_warm_percent",
        "gauge",
        "Percent of slab memory reserved for WARM LRU.",
    ),
    (
        "hot_max_factor",
        "memcached_lru_crawler_hot_max_factor",
        "gauge",
        "Set idle age of HOT LRU to COLD age * this",
    ),
    (
        "warm_max_factor",
        "memcached_lru_crawler_warm_max_factor",
        "gauge",
        "Set idle age of WARM LRU to COLD age * this",
    ),
];

/// `stats items` fields, per class.
pub const ITEMS: &[Mapping] = &[
    ("number", "memcached_slab_current_items", "gauge", "Number of items currently stored in this slab class."),
    ("age", "memcached_slab_items_age_seconds", "gauge", "Number of seconds the oldest item has been in the slab class."),
    ("crawler_reclaimed", "memcached_slab_items_crawler_reclaimed_total", "counter", "Number of items freed by the LRU Crawler."),
    ("evicted", "memcached_slab_items_evicted_total", "counter", "Total number of times an item had to be evicted from the LRU before it expired."),
    ("evicted_nonzero", "memcached_slab_items_evicted_nonzero_total", "counter", "Total number of times an item which had an explicit expire time set had to be evicted from the LRU before it expired."),
    ("evicted_time", "memcached_slab_items_evicted_time_seconds", "counter", "Seconds since the last access for the most recent item evicted from this class."),
    ("evicted_unfetched", "memcached_slab_items_evicted_unfetched_total", "counter", "Total nmber of items evicted and never fetched."),
    ("expired_unfetched", "memcached_slab_items_expired_unfetched_total", "counter", "Total number of valid items evicted from the LRU which were never touched after being set."),
    ("outofmemory", "memcached_slab_items_outofmemory_total", "counter", "Total number of items for this slab class that have triggered an out of memory error."),
    ("reclaimed", "memcached_slab_items_reclaimed_total", "counter", "Total number of items reclaimed."),
    ("tailrepairs", "memcached_slab_items_tailrepairs_total", "counter", "Total number of times the entries for a particular ID need repairing."),
    ("mem_requested", "memcached_slab_mem_requested_bytes", "counter", "Number of bytes of memory actual items take up within a slab."),
    ("moves_to_cold", "memcached_slab_items_moves_to_cold", "counter", "Number of items moved from HOT or WARM into COLD."),
    ("moves_to_warm", "memcached_slab_items_moves_to_warm", "counter", "Number of items moves from COLD into WARM."),
    ("moves_within_lru", "memcached_slab_items_moves_within_lru", "counter", "Number of times active items were bumped within HOT or WARM."),
    ("number_hot", "memcached_slab_hot_items", "gauge", "Number of items presently stored in the HOT LRU."),
    ("number_warm", "memcached_slab_warm_items", "gauge", "Number of items presently stored in the WARM LRU."),
    ("number_cold", "memcached_slab_cold_items", "gauge", "Number of items presently stored in the COLD LRU."),
    ("number_temp", "memcached_slab_temporary_items", "gauge", "Number of items presently stored in the TEMPORARY LRU."),
    ("age_hot", "memcached_slab_hot_age_seconds", "gauge", "Age of the oldest item in HOT LRU."),
    ("age_warm", "memcached_slab_warm_age_seconds", "gauge", "Age of the oldest item in HOT LRU."),
];

/// `stats slabs` fields, per class.
pub const SLABS: &[Mapping] = &[
    (
        "chunk_size",
        "memcached_slab_chunk_size_bytes",
        "gauge",
        "Number of bytes allocated to each chunk within this slab class.",
    ),
    (
        "chunks_per_page",
        "memcached_slab_chunks_per_page",
        "gauge",
        "Number of chunks within a single page for this slab class.",
    ),
    (
        "total_pages",
        "memcached_slab_current_pages",
        "gauge",
        "Number of pages allocated to this slab class.",
    ),
    (
        "total_chunks",
        "memcached_slab_current_chunks",
        "gauge",
        "Number of chunks allocated to this slab class.",
    ),
    (
        "used_chunks",
        "memcached_slab_chunks_used",
        "gauge",
        "Number of chunks allocated to an item.",
    ),
    (
        "free_chunks",
        "memcached_slab_chunks_free",
        "gauge",
        "Number of chunks not yet allocated items.",
    ),
    (
        "free_chunks_end",
        "memcached_slab_chunks_free_end",
        "gauge",
        "Number of free chunks at the end of the last allocated page.",
    ),
];

/// ferrocache's memory breakdown: (stats name, `area` label).
pub const MEMORY: &[(&str, &str)] = &[
    ("item_memory_bytes", "items"),
    ("index_bytes", "index"),
    ("conn_buffer_bytes", "conn_buffers"),
    ("conn_buffer_pooled_bytes", "conn_buffers_pooled"),
    ("conn_state_bytes", "conn_state"),
];
