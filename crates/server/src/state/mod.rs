//! `Shared`: the state every worker reads, built once at start-up: the settings,
//! the store, the clock, the statistics registry and the admin registries.
//! [`restart`] saves it into `-e`'s file at a graceful stop and loads it at start.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize};
use std::sync::Arc;

use anyhow::{Context, Result};
use storage::Store;

use crate::admin::{
    auth::AuthFile,
    conns::ConnRegistry,
    crawler,
    prefix::PrefixStats,
    sasl::Sasl,
    tls::Tls,
    watch::{EvictionLog, Watch},
};
use crate::clock::Clock;
use crate::config::Settings;
use crate::stats::observe::ReadObservers;
use crate::stats::{StatsRegistry, WorkerStats};

pub mod restart;

/// State every worker shares.
pub struct Shared {
    pub settings: Settings,
    pub store: Store,
    pub clock: Clock,
    pub stats: StatsRegistry,
    /// Open client connections, all workers together.
    pub curr_connections: AtomicUsize,
    pub verbosity: AtomicU32,
    /// `stats sizes` reports (`-o track_sizes`, `stats sizes_enable`), counting the
    /// items written with a CAS id from `sizes_from_cas` on.
    pub sizes_tracking: AtomicBool,
    pub sizes_from_cas: std::sync::atomic::AtomicU64,
    /// Set once shutdown has begun; workers stop accepting and drain.
    pub shutting_down: AtomicBool,
    /// SASL credentials with `-S` (binary protocol only, as memcached).
    pub sasl: Option<Sasl>,
    /// ASCII authentication with `-Y` (`admin/auth.rs`).
    pub ascii_auth: Option<AuthFile>,
    /// Which observers of key reads are on: the read hook's one word
    /// (`stats/observe.rs`), switched by `prefixes` and `watch`.
    pub observers: Arc<ReadObservers>,
    /// `stats detail`: counters per key prefix (`admin/prefix.rs`).
    pub prefixes: PrefixStats,
    /// The expired-item crawler and memcached's tuning settings (`admin/crawler.rs`).
    pub crawler: crawler::Crawler,
    /// The open sockets, for `stats conns` (`admin/conns.rs`).
    pub conns: ConnRegistry,
    /// `-Z`: the TLS configuration and its counters (`admin/tls.rs`).
    pub tls: Option<Tls>,
    /// `watch`: the log streams, fed by the event sites, drained by the logger thread
    /// (`admin/watch`); also the store's eviction sink.
    pub watch: Arc<Watch>,
    /// One counter block per worker, in worker order (the registry sums them).
    workers: Vec<Arc<WorkerStats>>,
}

impl Shared {
    /// The shared state for `settings` over an already built `store`: reads the SASL
    /// password file (`-S`) and the ASCII auth file (`-Y`), and one counter block for
    /// each of `settings.threads` workers.
    pub fn new(settings: Settings, store: Store) -> Result<Shared> {
        let sasl = match &settings.sasl_pwdb {
            Some(path) => Some(
                Sasl::load(std::path::Path::new(path))
                    .with_context(|| format!("reading SASL password file {path}"))?,
            ),
            None => None,
        };
        let ascii_auth = match &settings.auth_file {
            Some(path) => Some(AuthFile::load(path)?),
            None => None,
        };
        let mut tunables = settings.tunables.clone();
        // With a tier, what it made of the options (compact_under's default is a quarter
        // of its pages); without, the options as given.
        tunables.ext = store.flash().map_or(tunables.ext, storage::Flash::tunables);
        let clock = Clock::new();
        let observers = Arc::new(ReadObservers::default());
        let watch = Arc::new(Watch::new(
            settings.extended.worker_logbuf_bytes,
            settings.extended.watcher_logbuf_bytes,
            observers.clone(),
        ));
        let started = clock.process_started();
        store.set_eviction_sink(Arc::new(EvictionLog {
            watch: watch.clone(),
            // The server clock, read from the wall clock: the store does not hand its
            // `now` to the sink.
            now: Box::new(move || {
                let unix = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs() as i64);
                (unix - started).max(0) as u32
            }),
        }));
        let tls = Tls::new(&settings.tls, clock.now()).map_err(anyhow::Error::msg)?;
        let workers: Vec<Arc<WorkerStats>> = (0..settings.threads.max(1))
            .map(|_| Arc::new(WorkerStats::default()))
            .collect();
        Ok(Shared {
            verbosity: AtomicU32::new(settings.verbose),
            sizes_tracking: AtomicBool::new(settings.extended.track_sizes),
            sizes_from_cas: std::sync::atomic::AtomicU64::new(0),
            store,
            clock,
            tls,
            stats: StatsRegistry::new(workers.clone()),
            curr_connections: AtomicUsize::new(0),
            shutting_down: AtomicBool::new(false),
            sasl,
            ascii_auth,
            prefixes: PrefixStats::new(settings.prefix_delimiter(), observers.clone()),
            observers,
            crawler: crawler::Crawler::new(tunables),
            conns: ConnRegistry::default(),
            watch,
            settings,
            workers,
        })
    }

    /// The shared state of a server started with memcached's command line `args`
    /// (the first is the program name), with its store built but nothing bound or
    /// started: what in-process tests and fuzz targets drive a `Conn` against.
    pub fn from_args<I, T>(args: I) -> Result<Shared>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let settings = Settings::from_args(args)?;
        let store = store_builder(&settings)
            .build()
            .context("creating the store")?;
        Shared::new(settings, store)
    }

    /// The memory of every connection: the workers' buffers and slot tables, and the
    /// `stats conns` entries and TLS sessions (in `state_bytes`).
    #[must_use]
    pub fn conn_memory(&self) -> crate::stats::ConnMemory {
        let mut m = self.stats.conn_memory();
        m.state_bytes += self.conns.bytes() as u64;
        m.state_bytes += self.tls.as_ref().map_or(0, Tls::session_bytes);
        m
    }

    /// Worker `id`'s counters (each worker is their only writer).
    #[must_use]
    pub fn worker_stats(&self, id: usize) -> &Arc<WorkerStats> {
        &self.workers[id]
    }
}

/// The store `settings` ask for (`-m`, `-I`, `-C`, `-k`, `-M`), without `-L`: start-up
/// adds large pages and falls back without them.
#[must_use]
pub fn store_builder(settings: &Settings) -> storage::StoreBuilder {
    Store::builder()
        .memory_limit(settings.memory_limit_bytes)
        .item_size_max(settings.item_size_max_bytes)
        .memcached_cas(settings.cas_enabled)
        .lock_memory(settings.lock_memory)
        .evictions(settings.evictions)
        .slab_classes(settings.classes.clone())
        .flash(settings.flash_tier())
        .hash_seed(settings.hash_seed)
}
