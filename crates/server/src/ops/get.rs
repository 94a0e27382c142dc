//! Retrieval: every lookup a protocol makes, and the counters memcached keeps for
//! them (`cmd_get`, `get_hits`, `get_misses`, `get_expired`, `get_flushed`, and the
//! `touch_*` ones for a get-and-touch).
//!
//! A hit's reply is composed inside the lookup, under the item's shard lock, by the
//! protocol's [`Visit`]: the value is copied once, straight from item memory. What a
//! lookup found goes to the read hook (`observe.rs`) from the protocol that made it:
//! nothing here tells an observer.

use storage::{ItemMut, KeyHash, Located, Lookup, Peeked, RelTime, Visit};

use super::Exec;
use crate::stats::{bump, WorkerStats};

impl<'a> Exec<'a> {
    /// The key's hash, for [`Exec::locate`] and the lookups that take one.
    #[inline(always)]
    pub fn hash(&self, key: &[u8]) -> KeyHash {
        self.store().hash(key)
    }

    /// Where the key's index bucket is, its cache line prefetched.
    #[inline(always)]
    pub fn locate(&self, h: KeyHash) -> Located<'a> {
        self.store().locate(h)
    }

    /// Find the key's entry in the located bucket without the lock, and prefetch its
    /// record: the second stage of a multi-get's prefetch.
    #[inline(always)]
    pub fn prefetch_located(&self, at: Located<'a>, h: KeyHash, key_len: usize) -> Peeked {
        self.store().prefetch_located(at, h, key_len)
    }

    /// Prefetch the lock word and bucket of the key's shard: a batch's first stage.
    #[inline(always)]
    pub fn prefetch_index(&self, h: KeyHash) {
        self.store().prefetch_index(h);
    }

    /// Both stages at once, for a request parsed ahead of its turn (`session/ahead.rs`).
    #[inline(always)]
    pub fn prefetch_record(&self, h: KeyHash, key_len: usize) -> Peeked {
        self.store().prefetch_record(h, key_len)
    }

    /// Look a key up and hand a hit to `visit`; with `touch`, a hit also gets that
    /// exptime (`gat`). Counts nothing: the caller adds the outcome to a [`GetTally`]
    /// or counts it with [`Exec::count_get`], and tells the read hook.
    #[inline(always)]
    pub fn lookup<V: Visit>(
        &self,
        key: &[u8],
        h: KeyHash,
        peeked: Peeked,
        touch: Option<RelTime>,
        now: RelTime,
        visit: V,
    ) -> Lookup<V::Output> {
        match touch {
            Some(exptime) => self
                .store()
                .get_and_touch_hashed(key, h, peeked, exptime, now, visit),
            None => self.store().get_hashed(key, h, peeked, now, visit),
        }
    }

    /// Where the key's value lies on flash, if its item is a flash stub (a multi-get
    /// wanting all its flash reads at once; see `reply/flash.rs`).
    pub fn flash_loc_of(&self, key: &[u8], now: RelTime) -> Option<storage::StubLoc> {
        self.store().flash_loc_of(key, now)
    }

    /// `n` flash reads were dropped before they were made (`get_aborted_extstore`).
    pub fn flash_aborted(&self, n: u64) {
        if let Some(flash) = self.store().flash() {
            flash.count_aborted(n);
        }
    }

    /// [`Exec::lookup`] of a key not yet hashed, with a closure for the hit.
    #[inline]
    pub fn lookup_key<R>(
        &self,
        key: &[u8],
        touch: Option<RelTime>,
        now: RelTime,
        f: impl FnOnce(storage::ItemRef<'_>) -> R,
    ) -> Lookup<R> {
        match touch {
            Some(exptime) => self.store().get_and_touch(key, exptime, now, f),
            None => self.store().get(key, now, f),
        }
    }

    /// Count one key's lookup of a `get` (or, with `touch`, a `gat`/`touch`).
    #[inline(always)]
    pub fn count_get<R>(&self, lookup: &Lookup<R>, touch: bool) {
        // Bumped straight from the outcome: through a tally, a hit would also write
        // its zero miss count.
        let stats = self.stats;
        let (cmd, hits, missed) = if touch {
            (&stats.cmd_touch, &stats.touch_hits, &stats.touch_misses)
        } else {
            (&stats.cmd_get, &stats.get_hits, &stats.get_misses)
        };
        bump(cmd, 1);
        match lookup {
            Lookup::Hit(_) => bump(hits, 1),
            Lookup::Miss => bump(missed, 1),
            Lookup::Expired => {
                bump(missed, 1);
                bump(&stats.get_expired, 1);
            }
            Lookup::Flushed => {
                bump(missed, 1);
                bump(&stats.get_flushed, 1);
            }
        }
    }

    /// The meta protocol's access to one live item under its shard lock (`mg`, `md`,
    /// `me`): `f` reads and changes it there, so that a CAS it checks and the change
    /// it makes are one step. With `vivify`, a miss creates an empty item. Returns the
    /// first lookup's outcome, for [`Exec::count_meta_get`], and `f`'s result. Neither
    /// logs nor observes: `mg` tells the read hook, the others [`Exec::watch_fetch`].
    #[inline]
    pub fn with_item<R>(
        &self,
        key: &[u8],
        vivify: bool,
        now: RelTime,
        f: impl FnOnce(&mut ItemMut<'_>, bool) -> R,
    ) -> (Lookup<()>, Option<R>) {
        self.store().meta_get(key, vivify, now, f)
    }

    /// Count what [`Exec::with_item`]'s first lookup found when it was not a hit
    /// (`get_expired`, `get_flushed`); memcached counts those whatever the command.
    #[inline]
    pub fn count_dead(&self, first: Lookup<()>) {
        match first {
            Lookup::Expired => bump(&self.stats.get_expired, 1),
            Lookup::Flushed => bump(&self.stats.get_flushed, 1),
            _ => {}
        }
    }

    /// `mg`'s counters: a hit that set a TTL counts as a touch, any other hit or a
    /// miss as a get.
    pub fn count_meta_get(&self, hit: bool, touched: bool) {
        let stats = self.stats;
        match (hit, touched) {
            (true, true) => {
                bump(&stats.cmd_touch, 1);
                bump(&stats.touch_hits, 1);
            }
            (true, false) => {
                bump(&stats.cmd_get, 1);
                bump(&stats.get_hits, 1);
            }
            (false, _) => {
                bump(&stats.cmd_get, 1);
                bump(&stats.get_misses, 1);
            }
        }
    }

    /// `me`: memcached counts it as a meta command only.
    pub fn count_meta_debug(&self, first: Lookup<()>) {
        self.count_dead(first);
        bump(&self.stats.cmd_meta, 1);
    }

    /// Add a retrieval command's tally to this worker's counters.
    #[inline(always)]
    pub fn count_gets(&self, tally: &GetTally, touch: bool) {
        tally.add_to(self.stats, touch);
    }
}

/// Lookups of one retrieval command, added to the worker's counters at once.
#[derive(Default)]
pub struct GetTally {
    pub hits: u64,
    /// Every lookup that was not a hit, the expired and flushed included.
    pub misses: u64,
    pub expired: u64,
    pub flushed: u64,
}

impl GetTally {
    /// Count one lookup's outcome.
    #[inline(always)]
    pub fn add<R>(&mut self, lookup: &Lookup<R>) {
        match lookup {
            Lookup::Hit(_) => self.hits += 1,
            Lookup::Miss => self.misses += 1,
            Lookup::Expired => {
                self.misses += 1;
                self.expired += 1;
            }
            Lookup::Flushed => {
                self.misses += 1;
                self.flushed += 1;
            }
        }
    }

    /// `cmd_get`/`get_hits`/`get_misses`, or the `touch` ones for `gat`/`gats`
    /// (whose expired and flushed misses memcached still counts as `get_*`).
    // Four counter bumps: inlined at every call site, where the single get's tally is
    // constant-folded into one bump of each counter.
    #[inline(always)]
    fn add_to(&self, stats: &WorkerStats, touch: bool) {
        let (cmd, hits, missed) = if touch {
            (&stats.cmd_touch, &stats.touch_hits, &stats.touch_misses)
        } else {
            (&stats.cmd_get, &stats.get_hits, &stats.get_misses)
        };
        bump(cmd, self.hits + self.misses);
        bump(hits, self.hits);
        bump(missed, self.misses);
        if self.expired != 0 {
            bump(&stats.get_expired, self.expired);
        }
        if self.flushed != 0 {
            bump(&stats.get_flushed, self.flushed);
        }
    }
}
