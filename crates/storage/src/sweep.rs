//! Walks over the index rather than a segment: the background expiry sweep, the crawls
//! `lru_crawler crawl` asks for, and `lru_crawler metadump`. Each takes one shard lock at
//! a time, for a bounded chunk of its positions, and resumes from a cursor.

use std::sync::atomic::Ordering;

use crate::index::{LockHeld, Shard, ShardStats};
use crate::item::MARK_FETCHED;
use crate::store::{Liveness, Store};
use crate::table::IndexTable;
use crate::{DumpCursor, DumpItem, RelTime, Swept};

/// Buckets the sweep examines per shard lock hold, to keep lock hold times short.
const SWEEP_CHUNK_BUCKETS: usize = 512;
/// Least number of index buckets one sweep call examines.
const SWEEP_MIN_BUCKETS: usize = 65_536;
/// Most index buckets one sweep call examines (about 10-30 ms of one core when most
/// buckets are full), so a once-a-second sweep costs at most a few percent of a core.
const SWEEP_MAX_BUCKETS: usize = 262_144;

impl Store {
    /// `lru_crawler metadump`: call `f` for each live item from `cursor` on, walking each
    /// shard's index in chunks of at most [`SWEEP_CHUNK_BUCKETS`] positions under its
    /// lock, until about `max_positions` positions have been looked at. False once every
    /// shard has been walked (the cursor is then spent).
    ///
    /// Like memcached's crawler it is no snapshot: an item stored or moved by a table's
    /// growth during a dump may be shown twice or not at all; an item alive throughout
    /// and not moved is shown once.
    pub fn dump(
        &self,
        cursor: &mut DumpCursor,
        now: RelTime,
        max_positions: usize,
        mut f: impl FnMut(DumpItem<'_>),
    ) -> bool {
        let mut budget = max_positions.max(1);
        while budget > 0 {
            if cursor.shard >= self.shards.len() {
                return false;
            }
            let shard = self.shard_at(cursor.shard).lock();
            let positions = shard.table.positions();
            let start = cursor.position.min(positions);
            let end = (start + SWEEP_CHUNK_BUCKETS.min(budget)).min(positions);
            for i in start..end {
                let Some(e) = shard.table.get(i) else {
                    continue;
                };
                let hdr = self.header(&shard.held, e);
                if self.liveness(&hdr, now) != Liveness::Live {
                    continue;
                }
                // We hold the lock of the shard indexing `e` (rule 2).
                let bytes = self.item_bytes(&shard.held, e);
                let ko = hdr.prefix.key_offset();
                let value_len = if hdr.prefix.flash {
                    Self::stub_loc(bytes).vlen as usize
                } else {
                    hdr.prefix.vlen
                };
                f(DumpItem {
                    key: &bytes[ko..ko + hdr.prefix.klen],
                    value_len,
                    flags: hdr.flags,
                    exptime: hdr.exptime,
                    time: self.item_time(&hdr),
                    cas: hdr.cas,
                    fetched: hdr.mark & MARK_FETCHED != 0,
                    class: self.classes.class_of(self.memcached_total(
                        hdr.prefix.klen,
                        hdr.prefix.vlen,
                        hdr.prefix.has_flags,
                    )),
                });
            }
            budget = budget.saturating_sub(end - start + 1);
            cursor.walked(end, positions);
        }
        cursor.shard < self.shards.len()
    }

    /// Background step for the server's maintenance thread (about once a second): walk a
    /// bounded slice of the index and unlink up to `max_items` expired or flushed items.
    /// Returns how many items it looked at and unlinked. Resumes where the last call
    /// stopped.
    ///
    /// One call examines `4 * max_items` index buckets, clamped to 64 Ki..256 Ki, taking
    /// each shard lock for at most 512 buckets at a time.
    pub fn sweep_expired(&self, now: RelTime, max_items: usize) -> Swept {
        let mut budget = max_items
            .saturating_mul(4)
            .clamp(SWEEP_MIN_BUCKETS, SWEEP_MAX_BUCKETS);
        let mut removed = 0;
        let mut checked = 0;
        let mut shards_done = 0;
        while budget > 0 && removed < max_items && shards_done <= self.shards.len() {
            let si = self.sweep_shard.load(Ordering::Relaxed) & self.shard_mask;
            let mut shard = self.shard_at(si).lock();
            let Shard {
                table,
                stats,
                sweep_bucket,
                held,
            } = &mut *shard;
            let buckets = table.positions();
            let start = (*sweep_bucket).min(buckets);
            let end = (start + SWEEP_CHUNK_BUCKETS.min(budget)).min(buckets);
            let mut i = start;
            while i < end && removed < max_items {
                if let Some(e) = table.get(i) {
                    checked += 1;
                    if self.unlink_if_dead(held, table, stats, i, e, now) {
                        removed += 1;
                    }
                }
                i += 1;
            }
            budget = budget.saturating_sub(i - start).saturating_sub(1);
            if i >= buckets {
                *sweep_bucket = 0;
                self.sweep_shard.store(si + 1, Ordering::Relaxed);
                shards_done += 1;
            } else {
                *sweep_bucket = i;
            }
        }
        Swept {
            checked,
            unlinked: removed,
        }
    }

    /// One step of a crawl that `lru_crawler crawl` asked for: from `cursor` on, walk
    /// about `max_positions` index positions, each shard's in chunks of at most
    /// [`SWEEP_CHUNK_BUCKETS`] under its lock, and unlink the expired and flushed items
    /// found. `more` is false once every shard has been walked (the cursor is then spent).
    /// Unlike [`Store::sweep_expired`] it has its own cursor, so a crawl covers the whole
    /// index once, whatever the background sweep is doing.
    pub fn crawl(&self, cursor: &mut DumpCursor, now: RelTime, max_positions: usize) -> Crawl {
        let mut swept = Swept::default();
        let mut budget = max_positions.max(1);
        while budget > 0 {
            if cursor.shard >= self.shards.len() {
                return Crawl { swept, more: false };
            }
            let mut shard = self.shard_at(cursor.shard).lock();
            let Shard {
                table, stats, held, ..
            } = &mut *shard;
            let positions = table.positions();
            let start = cursor.position.min(positions);
            let end = (start + SWEEP_CHUNK_BUCKETS.min(budget)).min(positions);
            for i in start..end {
                if let Some(e) = table.get(i) {
                    swept.checked += 1;
                    let p = self.stored_prefix(held, e);
                    let class =
                        self.classes
                            .class_of(self.memcached_total(p.klen, p.vlen, p.has_flags));
                    stats.class_mut(class).crawler_checked += 1;
                    if self.unlink_if_dead(held, table, stats, i, e, now) {
                        swept.unlinked += 1;
                        stats.class_mut(class).crawler_reclaimed += 1;
                    }
                }
            }
            drop(shard);
            budget = budget.saturating_sub(end - start + 1);
            cursor.walked(end, positions);
        }
        Crawl {
            swept,
            more: cursor.shard < self.shards.len(),
        }
    }

    /// Unlink the item at index position `i` (entry `e`) if it expired or was flushed,
    /// counting it as reclaimed. The caller holds the shard lock that owns `table`.
    fn unlink_if_dead(
        &self,
        held: &LockHeld,
        table: &mut IndexTable,
        stats: &mut ShardStats,
        i: usize,
        e: u64,
        now: RelTime,
    ) -> bool {
        let hdr = self.header(held, e);
        if self.liveness(&hdr, now) == Liveness::Live {
            return false;
        }
        table.remove(i, self.hash_entry(held, e));
        self.reclaimed(held, stats, e, hdr.mark);
        true
    }
}

/// What one [`Store::crawl`] step did, and whether the crawl has more to walk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Crawl {
    pub swept: Swept,
    pub more: bool,
}
