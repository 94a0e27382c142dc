//! Storage commands (`set add replace append prepend cas`, `ms`, binary SET and
//! friends) and memcached's rules around them:
//!
//! - every parsed storage command counts in `cmd_set` (and `stats detail`'s sets);
//! - a value that can never fit is refused before it is read (`store_too_large`);
//! - the outcome's counters: `cas_hits`, `cas_badval`, `cas_misses` for a CAS store,
//!   `store_too_large` and `store_no_memory` for a failed one;
//! - a failed store unlinks the old value, so that a stale value does not outlive a
//!   write the client believes it made. memcached's text and binary protocols do this
//!   for `set` only; its meta `ms` does it whatever the mode. The caller says which.
//!
//! A CAS store, and an append or prepend guarded by a CAS, check the CAS under the
//! shard lock that makes the change.

use storage::{KeyHash, MetaStore, Peeked, RelTime, StoreMode, StoreOutcome};

use super::Exec;
use crate::admin::watch::Streams;

/// What memcached does besides answering when it refuses a value too large to store,
/// before reading it. Its protocols differ: text counts it in `store_too_large`, records
/// a set for `stats detail` and unlinks the old value of a `set`; meta `ms` counts it and
/// unlinks the old value whatever the mode; binary records the set and unlinks the old
/// value of a SET, and does not count it.
#[derive(Clone, Copy, Debug)]
pub struct Refused {
    /// Counted in `store_too_large`.
    pub counted: bool,
    /// Recorded as a set of the key's prefix (`stats detail`).
    pub detail: bool,
    /// The key's old value is unlinked (see the module doc).
    pub unlink_old: bool,
}
use crate::admin::prefix::Event;
use crate::stats::bump;

impl Exec<'_> {
    /// A storage command was parsed: `cmd_set`, and with `detail` the key's prefix
    /// counts a set (`stats detail`; memcached's meta `ms` does not record one).
    #[inline(always)]
    pub fn begin_store(&self, key: &[u8], detail: bool) {
        bump(&self.stats.cmd_set, 1);
        if detail && self.shared.prefixes.enabled() {
            self.shared.prefixes.record(key, Event::Set);
        }
    }

    /// A storage command refused before its data block is read: the value can never
    /// fit (`-I`). The caller answers, and swallows the data block. What else happens
    /// is memcached's rule for the protocol, in `refused`.
    #[cold]
    pub fn refuse_too_large(&self, key: &[u8], refused: Refused) {
        if refused.counted {
            bump(&self.stats.store_too_large, 1);
        }
        if refused.detail && self.shared.prefixes.enabled() {
            self.shared.prefixes.record(key, Event::Set);
        }
        if refused.unlink_old {
            self.store().delete(key, self.now());
        }
    }

    /// Store a whole value (any mode but append/prepend with a CAS), and count the
    /// outcome. `hashed` is the key's hash and peek when a pipelined batch prefetched
    /// it. Returns the outcome and the new CAS id.
    // Inlined by force: for a `set` parsed ahead the mode, the CAS and `unlink_old`
    // are constants, and the store path's checks on them fold away.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub fn store_value(
        &self,
        mode: StoreMode,
        key: &[u8],
        hashed: Option<(KeyHash, Peeked)>,
        flags: u32,
        exptime: RelTime,
        value: &[u8],
        unlink_old: bool,
    ) -> (StoreOutcome, u64) {
        let now = self.now();
        let watching = self.watching(Streams::FETCHERS | Streams::MUTATIONS);
        if watching {
            self.watch_fetch(key, now);
        }
        let done = if self.shared.settings.null_store.is_some() {
            (StoreOutcome::Stored, 0)
        } else {
            self.store()
                .store_cas_hashed(mode, key, hashed, flags, exptime, value, now)
        };
        self.count_store(
            done.0,
            matches!(mode, StoreMode::Cas(_)),
            key,
            unlink_old,
            now,
        );
        if watching {
            self.log_store(mode, key, flags, exptime, value.len(), done.0, now);
        }
        done
    }

    /// Store with the meta rules (a CAS on append/prepend, `I`nvalidation, a
    /// base64 key), and count the outcome. Returns the outcome and the new CAS id.
    pub fn store_checked(&self, req: MetaStore<'_>, unlink_old: bool) -> (StoreOutcome, u64) {
        let now = self.now();
        let watching = self.watching(Streams::FETCHERS | Streams::MUTATIONS);
        if watching {
            self.watch_fetch(req.key, now);
        }
        let done = self.store().meta_store(req, now);
        self.count_store(
            done.0,
            matches!(req.mode, StoreMode::Cas(_)),
            req.key,
            unlink_old,
            now,
        );
        if watching {
            let (m, k, f, e, v) = (req.mode, req.key, req.flags, req.exptime, req.value.len());
            self.log_store(m, k, f, e, v, done.0, now);
        }
        done
    }

    /// A store's outcome counters, and the unlink of the old value when it failed.
    #[inline(always)]
    fn count_store(
        &self,
        outcome: StoreOutcome,
        is_cas: bool,
        key: &[u8],
        unlink_old: bool,
        now: RelTime,
    ) {
        let stats = self.stats;
        match outcome {
            StoreOutcome::Stored if is_cas => bump(&stats.cas_hits, 1),
            StoreOutcome::Exists if is_cas => bump(&stats.cas_badval, 1),
            StoreOutcome::NotFound if is_cas => bump(&stats.cas_misses, 1),
            StoreOutcome::TooLarge => {
                self.failed_store(&stats.store_too_large, key, unlink_old, now)
            }
            StoreOutcome::NoMemory => {
                self.failed_store(&stats.store_no_memory, key, unlink_old, now)
            }
            _ => {}
        }
    }

    #[cold]
    #[inline(never)]
    fn failed_store(
        &self,
        counter: &std::sync::atomic::AtomicU64,
        key: &[u8],
        unlink_old: bool,
        now: RelTime,
    ) {
        bump(counter, 1);
        if unlink_old {
            self.store().delete(key, now);
        }
    }
}
