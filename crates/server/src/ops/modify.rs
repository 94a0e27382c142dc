//! Commands that change an item in place or remove it: delete, touch, incr/decr,
//! with memcached's counters for each. Where a CAS guards the change, the check and
//! the change are one store call under the item's shard lock, so that no other
//! client's write can land between them.

use storage::{MetaArith, RelTime, StoreMode, StoreOutcome};

use super::Exec;
use crate::admin::prefix::Event;
use crate::stats::bump;

/// The outcome of [`Exec::delete_if_cas`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deleted {
    Deleted,
    NotFound,
    /// The item's CAS is not the one asked for; it stays.
    Exists,
}

impl Exec<'_> {
    /// `delete`: unlink the live item under `key`; false if there was none.
    pub fn delete(&self, key: &[u8]) -> bool {
        self.record(key, Event::Delete);
        self.watch_fetch(key, self.now());
        let deleted = self.store().delete(key, self.now());
        self.count_delete(deleted);
        deleted
    }

    /// Binary DELETE: unlink the item if `cas` is 0 or its CAS, checked and unlinked
    /// under one lock. memcached counts a CAS mismatch as neither a hit nor a miss.
    pub fn delete_if_cas(&self, key: &[u8], cas: u64) -> Deleted {
        if cas == 0 {
            return if self.delete(key) {
                Deleted::Deleted
            } else {
                Deleted::NotFound
            };
        }
        self.record(key, Event::Delete);
        self.watch_fetch(key, self.now());
        let settings = &self.shared.settings;
        let (_, done) = self.with_item(key, false, self.now(), |it, _| {
            if settings.item_cas(it.cas()) != cas {
                return Deleted::Exists;
            }
            it.unlink();
            Deleted::Deleted
        });
        let done = done.unwrap_or(Deleted::NotFound);
        if done != Deleted::Exists {
            self.count_delete(done == Deleted::Deleted);
        }
        done
    }

    /// `delete_hits` or `delete_misses`.
    pub fn count_delete(&self, hit: bool) {
        bump(
            if hit {
                &self.stats.delete_hits
            } else {
                &self.stats.delete_misses
            },
            1,
        );
    }

    /// `touch`: set a live item's exptime; false if there is none.
    pub fn touch(&self, key: &[u8], exptime: RelTime) -> bool {
        bump(&self.stats.cmd_touch, 1);
        self.watch_fetch(key, self.now());
        let touched = self.store().touch(key, exptime, self.now());
        bump(
            if touched {
                &self.stats.touch_hits
            } else {
                &self.stats.touch_misses
            },
            1,
        );
        touched
    }

    /// incr/decr by `delta`, refused when a non-zero `want_cas` is not the item's CAS
    /// (checked under the lock that rewrites the number). `ttl` becomes the exptime
    /// of a number rewritten in place (meta `ma T`). A miss counts in
    /// `incr_misses`/`decr_misses` unless `count_miss` is false: the caller then
    /// creates the item ([`Exec::create_counter`]), which memcached does not count.
    pub fn incr_decr(
        &self,
        key: &[u8],
        delta: u64,
        incr: bool,
        want_cas: u64,
        ttl: Option<RelTime>,
        count_miss: bool,
    ) -> MetaArith {
        self.watch_fetch(key, self.now());
        let result = self
            .store()
            .meta_incr_decr(key, delta, incr, want_cas, ttl, self.now());
        let stats = self.stats;
        match result {
            MetaArith::Value { .. } => {
                bump(
                    if incr {
                        &stats.incr_hits
                    } else {
                        &stats.decr_hits
                    },
                    1,
                );
            }
            MetaArith::NotFound if count_miss => {
                bump(
                    if incr {
                        &stats.incr_misses
                    } else {
                        &stats.decr_misses
                    },
                    1,
                );
            }
            _ => {}
        }
        result
    }

    /// A missing counter created with its initial value (binary INCREMENT with an
    /// expiration other than `0xffffffff`, meta `ma N`): an `add` of the digits.
    pub fn create_counter(
        &self,
        key: &[u8],
        initial: u64,
        exptime: RelTime,
    ) -> (StoreOutcome, u64) {
        let mut buf = itoa::Buffer::new();
        let digits = buf.format(initial).as_bytes();
        self.store()
            .store_cas(StoreMode::Add, key, 0, exptime, digits, self.now())
    }

    /// `stats detail`: count `event` against the key's prefix.
    #[inline]
    fn record(&self, key: &[u8], event: Event) {
        if self.shared.prefixes.enabled() {
            self.shared.prefixes.record(key, event);
        }
    }
}
