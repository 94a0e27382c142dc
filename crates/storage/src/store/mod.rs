//! The public face of the engine: [`Store`] and every operation, split by what each
//! part owns.
//!
//! Every operation hashes the key, locks one index shard and works on the item in its
//! segment under that lock. Stores first reserve space in the writer group's open
//! segment (with no shard lock held, because finding space may evict), copy the item
//! in, then lock the shard to check the command's condition and publish the entry;
//! a store whose item has the live one's shape writes over it instead
//! (`Store::overwrite_in_place`).
//! Following memcached's naming rule, `do_*` helpers run with the shard lock held.
//!
//! | file         | what it holds                                                        |
//! |--------------|----------------------------------------------------------------------|
//! | `mod.rs`     | [`Store`] itself, its shard and segment helpers, stats, value pins    |
//! | `builder.rs` | [`StoreBuilder`] and the size limits it checks                        |
//! | `read.rs`    | lookups: get, gat, the prefetched multi-get stages, the locked search |
//! | `write.rs`   | set/add/replace/cas/append/prepend, delete, touch, incr/decr, flush   |
//! | `record.rs`  | the accessors of records in segment memory: the `unsafe` of records   |
//! | `image.rs`   | memory images: the whole store saved and loaded back (warm restart)   |
//! | `image_meta.rs` | an image's meta section: the store's state as little-endian fields |
//! | `flash.rs`   | the store's side of the flash tier: stubs written, read back, compacted |

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::index::{unpack, Hint, LockHeld, ShardRef, ShardSlot, ShardStats};
use crate::item::{self, Header, MAX_KEY_BYTES};
use crate::pin::{Origin, ValuePin, CLOSED};
use crate::pool::{GroupSlot, PoolState, SegmentMeta};
use crate::segment::{LargePageRegion, SegmentMem};
use crate::{Lookup, RelTime, StoreStats};

mod builder;
#[cfg(test)]
mod class_tests;
mod flash;
mod image;
mod image_meta;
mod read;
mod record;
#[cfg(test)]
mod tests;
mod write;

pub use builder::{
    StoreBuilder, DEFAULT_ITEM_SIZE_MAX_BYTES, DEFAULT_MEMORY_LIMIT_BYTES, MAX_ITEM_SIZE_MAX_BYTES,
    MEMCACHED_CAS_BYTES, MEMCACHED_ITEM_OVERHEAD_BYTES, MIN_ITEM_SIZE_MAX_BYTES, MIN_SEGMENT_BYTES,
};
pub use image::{
    image_fingerprint, ImageError, ImageHead, ImageSource, ImageSummary, IMAGE_HEADER_BYTES,
    IMAGE_MAGIC,
};
pub use read::{FlashAction, KeyHash, Peeked, Visit, PREFETCH_DISTANCE};
pub(crate) use record::{Walk, Walked};
pub(crate) use write::{DeltaResult, WholeExtra, SPAN_SLACK_IDS};

const MAX_SHARDS: usize = 4096;

/// The cache engine, shared by all worker threads through `Arc<Store>`.
///
/// No lock is global on the request path: a request takes one index shard lock, and a
/// store also takes its writer group's lock for a pointer bump. The only shared atomic
/// written per store is the CAS counter.
pub struct Store {
    /// The hash seed, drawn at random per store; a warm restart puts the saved one back
    /// (`image.rs`), as the index's tags and buckets were placed with it. Written only
    /// then, before the store serves, so every read is relaxed.
    seed: AtomicU64,
    /// Unique among the stores of this process ([`Peeked::store`]).
    id: u64,
    pub(crate) shards: Box<[ShardSlot]>,
    /// One per possible shard, so that an index masked to `MAX_SHARDS - 1` needs no
    /// bounds check; only the first `shard_mask + 1` are used (32 KiB in all, and the
    /// pages of unused ones are never touched).
    hints: Box<[Hint; MAX_SHARDS]>,
    pub(crate) shard_mask: usize,
    pub(crate) segments: Box<[SegmentMeta]>,
    pub(crate) segment_size: usize,
    pub(crate) pool: Mutex<PoolState>,
    pub(crate) groups: Box<[GroupSlot]>,
    /// How room is made, and what reads and writes do to items' marks (`policy`).
    pub(crate) policy: crate::policy::PolicyState,
    /// The memory limit in bytes, as `limit_maxbytes` shows it (`cache_memlimit` changes
    /// it; the segments it allows are `PoolState::limit`).
    memory_limit: AtomicUsize,
    /// Bytes outside the store that its budget must make room for
    /// ([`Store::charge_outside`]).
    outside: AtomicUsize,
    item_size_max: usize,
    /// memcached's bytes per item besides key, value and flags, for [`Store::item_fits`].
    item_overhead: usize,
    cas: Padded<AtomicU64>,
    /// The second of each CAS id, for memcached's per-item `time` (`time_log.rs`).
    pub(crate) time_log: crate::time_log::TimeLog,
    flush: Padded<FlushState>,
    pub(crate) sweep_shard: AtomicUsize,
    /// `-k`: segments are locked into RAM as they get memory ([`StoreBuilder::lock_memory`]).
    lock_memory: bool,
    /// memcached's slab classes, which the per-class counters group items by.
    pub(crate) classes: crate::SlabClasses,
    /// Segments evicted by writers that needed room (memcached's `direct_reclaims`:
    /// every eviction here happens in the write path).
    pub(crate) direct_reclaims: AtomicU64,
    /// Told of each item eviction drops, while it wants to be (`watch evictions`).
    eviction_sink: std::sync::OnceLock<std::sync::Arc<dyn EvictionSink>>,
    /// The flash tier (`-o ext_path`), if any: values of items leaving RAM.
    pub(crate) flash: Option<crate::Flash>,
    /// Bytes of flash stubs in segments, for their share of memory
    /// (`Store::stubs_within_share`). Signed: a stub loaded with a warm-restart image
    /// is uncounted until `drop_flash_stubs` drops it and sets this to 0.
    pub(crate) stub_bytes: std::sync::atomic::AtomicI64,
    /// The mapping the segments lie in, with large pages (`-L`). Declared after
    /// `segments`, so it is unmapped after they are dropped.
    large_pages: Option<LargePageRegion>,
}

impl Drop for Store {
    fn drop(&mut self) {
        // Segments placed in the large-page region are not the heap's to free; the
        // region itself is unmapped after this, with the fields.
        if self.large_pages.is_some() {
            for s in self.segments.iter_mut() {
                s.mem.forget();
            }
        }
    }
}

/// An item that eviction dropped, as memcached's `watch evictions` describes it.
#[derive(Clone, Copy, Debug)]
pub struct Evicted<'a> {
    pub key: &'a [u8],
    /// Whether it was ever read.
    pub fetched: bool,
    /// Its exptime (0: none) and the second it was last written, in server time.
    pub exptime: RelTime,
    pub written: RelTime,
    /// Its memcached slab class, and value length.
    pub class: usize,
    pub value_len: usize,
}

/// Where the store reports evictions ([`Store::set_eviction_sink`]). `evicted` runs
/// under a shard lock, inside the evictor's walk: it must be quick and never block.
pub trait EvictionSink: Send + Sync {
    /// Whether anyone listens now; checked before an [`Evicted`] is built.
    fn wants(&self) -> bool;
    fn evicted(&self, item: &Evicted<'_>);
}

/// Bytes that segments and index together may take for a memory limit of `limit`
/// bytes: the limit and 5 % more. The process's promise is RSS within 1.05 × `-m` +
/// 32 MiB; the store takes the first part, and threads, io_uring pools, connections
/// and their buffers live in the 32 MiB (`docs/design.md`, "The memory budget"). Both
/// parts are mapped so that what they count is what is resident: segments and index
/// arrays of a page or more are whole pages of their own.
pub(crate) fn store_budget(limit: usize) -> usize {
    limit.saturating_add(limit / 20)
}

/// Keeps a hot atomic off its neighbours' cache lines.
#[repr(align(128))]
struct Padded<T>(T);

/// `flush_all` state, memcached's `settings.oldest_live` and `settings.oldest_cas`.
struct FlushState {
    oldest_live: AtomicU32,
    oldest_cas: AtomicU64,
}

/// What a locked lookup found about an item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Liveness {
    Live,
    Expired,
    Flushed,
}

impl Store {
    /// The hash seed (see the field).
    #[inline(always)]
    pub(crate) fn seed(&self) -> u64 {
        self.seed.load(Ordering::Relaxed)
    }

    /// Whether an item of this shape may be stored: the key is 1..=255 bytes and
    /// `59 + key + value (+ 4 if flags != 0) <= item_size_max`, memcached 1.6's own rule
    /// (51 without its cas, [`StoreBuilder::memcached_cas`]).
    /// The server can call this before reading a data block, to swallow an oversized one.
    pub fn item_fits(&self, key_len: usize, value_len: usize, flags: u32) -> bool {
        let flag_bytes = if flags != 0 {
            crate::memcached::MEMCACHED_FLAGS_BYTES
        } else {
            0
        };
        (1..=MAX_KEY_BYTES).contains(&key_len)
            && value_len <= item::MAX_VALUE_BYTES
            && self.item_overhead + key_len + value_len + flag_bytes <= self.item_size_max
            && item::item_len(key_len, value_len, flags != 0, true) <= self.segment_size
    }

    /// The item size limit this store was built with.
    pub fn item_size_max(&self) -> usize {
        self.item_size_max
    }

    /// memcached's `cache_memlimit`: make `bytes` the memory limit of the running store.
    /// False, changing nothing, where it cannot: a large-page store (its mapping is sized
    /// at start; memcached refuses too when its memory is preallocated), or more than
    /// the segment table made at start has room for (four times the starting limit, at
    /// most 65 536 segments more than it, and 1024 segments in any case).
    ///
    /// A higher limit lets writers take never-used segments again. A lower one stops
    /// them taking any, and each segment they need while more are in use than the new
    /// limit allows is found by evicting two: one is reused, the other's pages go back
    /// to the kernel. Memory therefore comes down as items are written, and stays where
    /// it is when none are (memcached gives none back). Under `-M`, where nothing may be
    /// evicted, a lower limit only stops the growth.
    pub fn set_memory_limit(&self, bytes: usize) -> bool {
        if self.large_pages.is_some() {
            return false;
        }
        if (bytes / self.segment_size).max(2) > self.segments.len() {
            return false;
        }
        // The budget's extra 5 % only as far as the table has room.
        let count = (store_budget(bytes) / self.segment_size)
            .max(2)
            .min(self.segments.len());
        let mut pool = self.pool_lock();
        if count > pool.provisioned {
            let start = pool.provisioned as u32;
            // Popped from the end: the lowest index first, as at start.
            pool.free.splice(0..0, (start..count as u32).rev());
            pool.provisioned = count;
        }
        pool.limit = count;
        self.memory_limit.store(bytes, Ordering::Relaxed);
        true
    }

    /// Count `bytes` of memory outside the store (the server's connections past their
    /// allowance) inside its budget from now on, in place of the last figure given: the
    /// store then holds that much less, segments being emptied as writers need room, as
    /// after a lowered `cache_memlimit`.
    pub fn charge_outside(&self, bytes: usize) {
        self.outside.store(bytes, Ordering::Relaxed);
    }

    /// The bytes last given to [`Store::charge_outside`].
    pub fn outside_bytes(&self) -> usize {
        self.outside.load(Ordering::Relaxed)
    }

    /// What segments and index together may take: [`store_budget`] of the memory limit,
    /// less what [`Store::charge_outside`] last charged.
    fn budget(&self) -> usize {
        store_budget(self.memory_limit.load(Ordering::Relaxed)).saturating_sub(self.outside_bytes())
    }

    /// The memory limit in bytes (as built, or as `cache_memlimit` last set it).
    pub fn memory_limit(&self) -> usize {
        self.memory_limit.load(Ordering::Relaxed)
    }

    /// Give segment `seg` its memory if this is its first use: from the large-page
    /// region with `-L`, else from the heap.
    pub(crate) fn allocate_segment(&self, seg: u32) {
        let mem = &self.segments[seg as usize].mem;
        let first = !mem.is_allocated();
        match &self.large_pages {
            Some(region) => mem.place_in(region, seg as usize),
            None => mem.ensure_allocated(),
        }
        // A segment gets memory once (a retired one keeps its address), so it is locked
        // once; under -k a retired one also keeps its pages (see `retire_excess`).
        if first && self.lock_memory {
            // Refused past RLIMIT_MEMLOCK without CAP_IPC_LOCK: the segment serves
            // unlocked (the server warns at start when the limit is below -m).
            let _ = mem.lock();
        }
    }

    /// Whether item memory is locked into RAM (see [`StoreBuilder::lock_memory`]).
    pub(crate) fn lock_memory(&self) -> bool {
        self.lock_memory
    }

    /// Whether item memory is on large pages (see [`StoreBuilder::large_pages`]).
    pub fn large_pages(&self) -> bool {
        self.large_pages.is_some()
    }

    /// Bytes per segment.
    pub fn segment_size(&self) -> usize {
        self.segment_size
    }

    /// Statistics, summed over the shards (each locked briefly in turn).
    pub fn stats(&self) -> StoreStats {
        let mut sum = ShardStats::default();
        let (mut evictions, mut expired_unfetched, mut evicted_unfetched, mut reclaimed) =
            (0, 0, 0, 0);
        let (mut items_retained, mut evicted_active) = (0, 0);
        for i in 0..self.shards.len() {
            let shard = self.shard_at(i).lock();
            let s = &shard.stats;
            sum.curr_items += s.curr_items;
            sum.bytes += s.bytes;
            sum.total_items += s.total_items;
            for c in s.class.iter() {
                items_retained += c.retained;
                evicted_active += c.evicted_active;
                evictions += c.evicted;
                expired_unfetched += c.expired_unfetched;
                evicted_unfetched += c.evicted_unfetched;
                reclaimed += c.reclaimed;
            }
        }
        let index_bytes = self.index_bytes();
        let (in_use, limit, free) = {
            let pool = self.pool_lock();
            (
                pool.in_use(),
                self.segments_allowed(&pool, index_bytes),
                pool.limit.saturating_sub(pool.in_use()),
            )
        };
        StoreStats {
            curr_items: sum.curr_items,
            total_items: sum.total_items,
            bytes: sum.bytes,
            evictions,
            expired_unfetched,
            evicted_unfetched,
            reclaimed,
            limit_maxbytes: self.memory_limit.load(Ordering::Relaxed) as u64,
            segments_used: in_use as u64,
            segments_total: limit as u64,
            segment_size: self.segment_size as u64,
            items_retained,
            evicted_active,
            direct_reclaims: self.direct_reclaims.load(Ordering::Relaxed),
            free_segments: free as u64,
            index_bytes: index_bytes as u64,
            budget_bytes: self.budget() as u64,
            outside_bytes: self.outside_bytes() as u64,
        }
    }

    /// Bytes of RAM the hash index holds (every shard's bucket arrays), without locking:
    /// about 12 per item, for counting the index inside the memory limit.
    pub fn index_bytes(&self) -> usize {
        (0..self.shards.len())
            .map(|i| self.shard_at(i).index_bytes())
            .sum()
    }

    /// memcached `stats reset`: zero the counters, not the gauges (`curr_items`, `bytes`).
    pub fn reset_stats(&self) {
        for i in 0..self.shards.len() {
            let s = &mut self.shard_at(i).lock().stats;
            *s = ShardStats {
                curr_items: s.curr_items,
                bytes: s.bytes,
                class: s.class.iter().map(crate::ClassStats::levels).collect(),
                ..ShardStats::default()
            };
        }
    }

    #[inline]
    pub(crate) fn shard_for(&self, h: u64) -> ShardRef<'_> {
        let i = (h >> 40) as usize & self.shard_mask;
        debug_assert_eq!(self.shards.len(), self.shard_mask + 1);
        ShardRef {
            // SAFETY: `shard_mask + 1` is the number of shards, set with them when the
            // store is built and never changed, so a masked index is in bounds. (A
            // bounds check would run in every key's two shard lookups of a multi-get.)
            slot: unsafe { self.shards.get_unchecked(i) },
            hint: &self.hints[i % MAX_SHARDS],
        }
    }

    #[inline]
    pub(crate) fn shard_at(&self, i: usize) -> ShardRef<'_> {
        ShardRef {
            slot: &self.shards[i],
            hint: &self.hints[i % MAX_SHARDS],
        }
    }

    #[inline]
    pub(crate) fn mem(&self, seg: u32) -> &SegmentMem {
        &self.segments[seg as usize].mem
    }

    #[inline]
    pub(crate) fn pool_lock(&self) -> MutexGuard<'_, PoolState> {
        self.pool.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new CAS id, taken at second `now`: unique and increasing across all keys.
    #[inline]
    pub(crate) fn next_cas(&self, now: RelTime) -> u64 {
        let cas = self.cas.0.fetch_add(1, Ordering::Relaxed) + 1;
        self.time_log.note(now, cas);
        cas
    }

    /// The CAS id the next store will take (or a later one).
    pub(crate) fn peek_next_cas(&self) -> u64 {
        self.cas.0.load(Ordering::Relaxed) + 1
    }

    /// The CAS base of segment `seg` (see `item.rs`).
    #[inline(always)]
    pub(crate) fn cas_base(&self, seg: u32) -> u64 {
        self.segments[seg as usize].cas_base.load(Ordering::Relaxed)
    }

    /// memcached's `it->time` of an item: the second its CAS id was taken in.
    pub(crate) fn item_time(&self, hdr: &Header) -> RelTime {
        self.time_log.time_of(hdr.cas)
    }

    /// Segments that may hold items now: the memory budget less what the index takes.
    /// `index_bytes` is read by the caller before it locks the pool.
    pub(crate) fn segments_allowed(&self, pool: &PoolState, index_bytes: usize) -> usize {
        let room = self.budget().saturating_sub(index_bytes) / self.segment_size;
        pool.limit.min(room).max(2)
    }

    /// memcached's `item_is_flushed`, then its expiry check.
    #[inline]
    pub(crate) fn liveness(&self, hdr: &Header, now: RelTime) -> Liveness {
        let f = &self.flush.0;
        let oldest_live = f.oldest_live.load(Ordering::Acquire);
        if oldest_live != 0 && oldest_live <= now {
            let oldest_cas = f.oldest_cas.load(Ordering::Acquire);
            // `it->time <= oldest_live`: taken before the first id after `oldest_live`.
            let stored_by = self.time_log.flush_boundary();
            if hdr.cas < stored_by || (oldest_cas != 0 && hdr.cas < oldest_cas) {
                return Liveness::Flushed;
            }
        }
        if item::is_expired(hdr.exptime, now) {
            Liveness::Expired
        } else {
            Liveness::Live
        }
    }

    /// Account for entry `e` having been removed from a locked shard.
    #[inline]
    pub(crate) fn unlinked(&self, held: &LockHeld, stats: &mut ShardStats, e: u64) -> usize {
        let prefix = self.stored_prefix(held, e);
        self.unlinked_prefix(held, stats, e, &prefix)
    }

    /// [`Store::unlinked`] for an entry whose prefix is already decoded; returns its
    /// memcached slab class.
    #[inline]
    pub(crate) fn unlinked_prefix(
        &self,
        held: &LockHeld,
        stats: &mut ShardStats,
        e: u64,
        prefix: &item::Prefix,
    ) -> usize {
        if prefix.flash {
            self.release_stub(held, e, prefix);
            self.stub_bytes
                .fetch_sub(prefix.total_len() as i64, Ordering::Relaxed);
        }
        let (seg, _) = unpack(e);
        let len = prefix.total_len() as u64;
        let ntotal = self.memcached_total(prefix.klen, prefix.vlen, prefix.has_flags);
        let class = self.classes.class_of(ntotal);
        let c = stats.class_mut(class);
        c.items -= 1;
        c.requested -= ntotal as u64;
        stats.curr_items -= 1;
        stats.bytes -= len;
        // Release: pairs with the acquire load in `take_dead_segment`, which may reuse
        // the segment once this reaches 0 (see there).
        self.segments[seg as usize]
            .live_bytes
            .fetch_sub(len, Ordering::Release);
        class
    }

    /// Count an expired or flushed item (entry `e`, marked `mark`), just removed from the
    /// table of the locked shard `held` proves, as reclaimed.
    pub(crate) fn reclaimed(&self, held: &LockHeld, stats: &mut ShardStats, e: u64, mark: u8) {
        let class = self.unlinked(held, stats, e);
        let c = stats.class_mut(class);
        c.reclaimed += 1;
        if mark & item::MARK_FETCHED == 0 {
            c.expired_unfetched += 1;
        }
    }

    /// memcached's `ITEM_ntotal` of an item: what it would take there.
    #[inline]
    pub(crate) fn memcached_total(&self, klen: usize, vlen: usize, has_flags: bool) -> usize {
        self.item_overhead + klen + vlen + if has_flags { 4 } else { 0 }
    }

    /// memcached's slab class of an item of this key length, value length and flags:
    /// the `clsid=` of `watch`'s log lines.
    #[must_use]
    pub fn memcached_class(&self, klen: usize, vlen: usize, flags: u32) -> usize {
        self.classes
            .class_of(self.memcached_total(klen, vlen, flags != 0))
    }

    /// The slab classes items are counted by.
    pub fn slab_classes(&self) -> &crate::SlabClasses {
        &self.classes
    }

    /// Per-class counters, summed over the shards (each locked briefly in turn); index
    /// `id - 1` is class `id`.
    pub fn class_stats(&self) -> Vec<crate::ClassStats> {
        let mut sum = vec![crate::ClassStats::default(); self.classes.len()];
        for i in 0..self.shards.len() {
            let shard = self.shard_at(i).lock();
            for (s, c) in sum.iter_mut().zip(shard.stats.class.iter()) {
                s.add(c);
            }
        }
        sum
    }

    /// The CAS id the next write will take: items written from now on have this or a
    /// higher one (`stats sizes_enable` counts only those, as memcached does).
    pub fn next_cas_id(&self) -> u64 {
        self.peek_next_cas()
    }

    /// The second the oldest item still in the eviction queue was written, at the
    /// latest: when the oldest sealed (or else open) segment was opened, as the time of
    /// the first CAS id it was given. `None` while nothing was ever stored.
    pub fn oldest_write(&self) -> Option<RelTime> {
        if self.peek_next_cas() <= 1 {
            return None;
        }
        let front = self.pool_lock().sealed.oldest();
        let base = match front {
            Some(seg) => self.cas_base(seg),
            None => self
                .groups
                .iter()
                .filter_map(|g| g.lock().map(|(seg, _)| self.cas_base(seg)))
                .min()?,
        };
        Some(self.time_log.time_of(base.max(1)))
    }

    /// Report each eviction to `sink` from now on (once; later calls are ignored).
    pub fn set_eviction_sink(&self, sink: std::sync::Arc<dyn EvictionSink>) {
        let _ = self.eviction_sink.set(sink);
    }

    /// The sink, when it wants evictions now.
    #[inline]
    pub(crate) fn eviction_listener(&self) -> Option<&dyn EvictionSink> {
        self.eviction_sink.get().map(|s| &**s).filter(|s| s.wants())
    }
}

// ---- value pins (see the `pin` module for the protocol) ----------------------------

impl Store {
    /// Pin the value of an item handed to a lookup's callback (its `origin` and `value`,
    /// under its shard lock), so that its bytes can be read after the callback returns.
    /// `None` when the item's segment is being evicted right now, or when the bytes do
    /// not come from this store's segments: the caller copies the value instead.
    pub fn pin(&self, origin: Origin, value: &[u8]) -> Option<ValuePin> {
        let seg = origin.segment()?;
        let meta = self.segments.get(seg as usize)?;
        let off = meta.mem.offset_of(value)?;
        let was = meta.pins.fetch_add(1, Ordering::Acquire);
        if was & CLOSED != 0 {
            meta.pins.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(ValuePin {
            seg,
            off: off as u32,
            len: value.len() as u32,
        })
    }

    /// Give a pin back.
    #[inline]
    pub fn unpin(&self, pin: ValuePin) {
        self.segments[pin.seg as usize]
            .pins
            .fetch_sub(1, Ordering::Release);
        std::mem::forget(pin);
    }

    /// Close segment `seg` to pins before walking it: false (and nothing changed) when
    /// a pin is held, and the segment must be passed over.
    pub(crate) fn close_to_pins(&self, seg: u32) -> bool {
        self.segments[seg as usize]
            .pins
            .compare_exchange(0, CLOSED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Reopen a segment closed by [`Store::close_to_pins`] once its walk is over.
    pub(crate) fn reopen_to_pins(&self, seg: u32) {
        self.segments[seg as usize]
            .pins
            .fetch_and(!CLOSED, Ordering::Release);
    }

    /// Whether a reader holds a pin in segment `seg`. Exact only under a shard lock for
    /// the items that shard indexes (pins are taken under it); a stale true only sends
    /// the caller down a slower path.
    #[inline]
    pub(crate) fn has_pins(&self, seg: u32) -> bool {
        self.segments[seg as usize].pinned()
    }
}

impl Lookup<std::convert::Infallible> {
    /// Re-type a miss.
    #[inline]
    pub(crate) fn map_never<R>(self) -> Lookup<R> {
        match self {
            Lookup::Hit(never) => match never {},
            Lookup::Miss => Lookup::Miss,
            Lookup::Expired => Lookup::Expired,
            Lookup::Flushed => Lookup::Flushed,
        }
    }
}
