//! memcached's rules, one implementation per command, shared by the text, meta and
//! binary protocols. This is the only layer that calls the [`Store`] or bumps a
//! command counter: a protocol parses, calls here, and composes its reply from what
//! comes back. A CAS check and the change it guards happen in one store call, under
//! one shard lock.
//!
//! - [`item`]: the item-size rule (`-I`).
//! - [`get`]: lookups and their counters; [`store`]: storage commands and their
//!   outcome counters, with the unlink of a failed `set`; [`modify`]: delete, touch,
//!   incr/decr; [`admin`]: flush_all, verbosity, cache_memlimit, stats reset and detail,
//!   the authentication counters, shutdown.
//! - [`watch`]: `watch`'s fetch and store event sites.
//! - [`stats`]: the `stats` reports; [`slabs`]: the per-class ones (`stats items`,
//!   `slabs`, `sizes`, `cachedump`); [`dump`]: `lru_crawler metadump`; [`metrics`]:
//!   all of them in Prometheus' format, under memcached_exporter's names. Which
//!   report each `stats` group runs is the table in `proto/stats.rs`.
//! - [`observe`]: the read hook, which every get-family read calls and which tells
//!   the observers that are on (`stats detail`, `watch fetchers`); [`watch`]: the
//!   `watch` log lines of reads and stores.

pub mod admin;
pub mod dump;
pub mod get;
pub mod item;
pub mod metrics;
pub mod modify;
pub mod observe;
pub mod slabs;
pub mod stats;
pub mod store;
pub mod watch;

use storage::Store;

use crate::reply::Sink;
use crate::state::Shared;
use crate::stats::latency::{Command, Recorder};
use crate::stats::WorkerStats;

pub use item::{memcached_item_fits, memcached_item_size};

/// Spliced values pinned at once, at most: past it values are copied, so the output
/// buffer's own high-water mark (and a multi-get's pause) bounds the rest.
const SPLICE_BUDGET_BYTES: usize = 1024 * 1024;

/// One worker's view for executing requests: the shared state, the worker's own
/// counters, where its replies go, and its latency recorder (`None` with
/// `--latency-histograms off`, and where nothing is timed: tests, fuzzing).
#[derive(Clone, Copy)]
pub struct Exec<'a> {
    pub shared: &'a Shared,
    pub stats: &'a WorkerStats,
    pub sink: Sink<'a>,
    pub latency: Option<&'a Recorder>,
}

impl<'a> Exec<'a> {
    /// The store, visible to `ops` alone: the other layers go through the functions
    /// here (the backends reach `Shared::store` only to give spliced values back and to
    /// run maintenance).
    #[inline(always)]
    pub(in crate::ops) fn store(&self) -> &'a Store {
        &self.shared.store
    }

    /// Drop what the sink holds for output past `at` (the caller truncates the
    /// output itself): a reply memcached would not have sent.
    pub fn drop_output_after(&self, at: usize) {
        self.sink.truncate(at, self.store());
    }

    /// A request of `command` ran: counted for its latency (`stats/latency.rs`).
    #[inline(always)]
    pub fn timed(&self, command: Command) {
        if let Some(r) = self.latency {
            r.count(command);
        }
    }

    /// The server clock's current relative time.
    #[inline(always)]
    pub fn now(&self) -> storage::RelTime {
        self.shared.clock.now()
    }
}

impl Exec<'_> {
    /// A pin of a hit's `value` for sending it from where it is stored (see
    /// `reply/splice.rs`), for the meta and binary replies, which compose around it
    /// themselves: `None` when the value is to be copied (zero-copy off on this
    /// worker or over UDP, shorter than `--zero-copy-min`, the budget spent, or the
    /// store refused). Call under the item's shard lock, as [`storage::Store::pin`]
    /// requires, and hand the pin to [`Exec::put_value`] before anything else is
    /// written after the value's place.
    pub fn value_pin(&self, value: &[u8], origin: storage::Origin) -> Option<storage::ValuePin> {
        if value.len() < self.sink.splice_min {
            return None;
        }
        let cell = self.sink.splices?;
        if cell.borrow().bytes() + value.len() > SPLICE_BUDGET_BYTES {
            return None;
        }
        self.store().pin(origin, value)
    }

    /// Append `value` to `out`: in place when [`Exec::value_pin`] gave a pin, else
    /// copied.
    pub fn put_value(&self, out: &mut Vec<u8>, value: &[u8], pin: Option<storage::ValuePin>) {
        match (pin, self.sink.splices) {
            (Some(pin), Some(cell)) => cell.borrow_mut().push(out.len(), pin),
            (Some(pin), None) => {
                // Not reached: `value_pin` pins only where there are splices.
                self.store().unpin(pin);
                out.extend_from_slice(value);
            }
            (None, _) => out.extend_from_slice(value),
        }
    }
}
