//! The public face of the engine: [`Store`], its builder and every operation.
//!
//! Every operation hashes the key, locks one index shard and works on the item in its
//! segment under that lock. Stores first reserve space in the writer group's open
//! segment (with no shard lock held, because finding space may evict), copy the item
//! in, then lock the shard to check the command's condition and publish the entry;
//! a store whose item has the live one's shape writes over it instead
//! (`Store::overwrite_in_place`).
//! Following memcached's naming rule, `do_*` helpers run with the shard lock held.

use std::collections::hash_map::RandomState;
use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::arith;
use crate::index::{hash_key, pack, unpack, Hint, Located, Shard, ShardRef, ShardSlot, ShardStats};
use crate::item::{
    self, Header, NewItem, Prefix, MARK_ACCESSED, MARK_FETCHED, MAX_KEY_BYTES, MUT_LEN, MUT_START,
    PREFIX_BYTES,
};
use crate::pin::{Origin, ValuePin, CLOSED};
use crate::pool::{GroupSlot, PoolState, Reservation, SegmentMeta};
use crate::segment;
use crate::segment::{LargePageRegion, SegmentMem};
use crate::table::{Cell, Entry, Peek};
use crate::{
    ArithOutcome, BuildError, ItemRef, Lookup, RelTime, StoreMode, StoreOutcome, StoreStats,
};

/// Default memory limit (memcached `-m 64`).
pub const DEFAULT_MEMORY_LIMIT_BYTES: usize = 64 << 20;
/// Default item size limit (memcached `-I 1m`).
pub const DEFAULT_ITEM_SIZE_MAX_BYTES: usize = 1 << 20;
/// Smallest accepted item size limit (memcached's own floor is 1 KiB).
pub const MIN_ITEM_SIZE_MAX_BYTES: usize = 1024;
/// Largest accepted item size limit (memcached's own ceiling is 1 GiB).
pub const MAX_ITEM_SIZE_MAX_BYTES: usize = 1 << 30;
/// Smallest segment; larger when the item size limit is larger.
pub const MIN_SEGMENT_BYTES: usize = 1 << 20;
/// memcached's per-item overhead in its "object too large" check: a 48-byte `item`,
/// 8 bytes of CAS, the key's NUL and the value's `\r\n`. [`Store::item_fits`] uses it so
/// that the size limit falls on exactly the same byte as memcached's.
pub const MEMCACHED_ITEM_OVERHEAD_BYTES: usize = 59;
/// The part of [`MEMCACHED_ITEM_OVERHEAD_BYTES`] that is the cas, absent under `-C`.
pub const MEMCACHED_CAS_BYTES: usize = 8;

const SEGMENT_ROUND_BYTES: usize = 4096;
const MAX_SHARDS: usize = 4096;
/// How far `cache_memlimit` may raise the limit: to this many times the starting
/// one, but by at most [`MEMLIMIT_MAX_EXTRA`] segments (2.6 MB of table)...
const MEMLIMIT_GROWTH: usize = 4;
const MEMLIMIT_MAX_EXTRA: usize = 1 << 16;
/// ...and to this many segments in any case.
const MEMLIMIT_MIN_CAPACITY: usize = 1024;
/// Keys between the stages of a prefetched multi-get ([`Store::prefetch_index`],
/// [`Store::prefetch_record`], [`Store::get_hashed`]): at a few hundred cycles of work per
/// key, eight keys cover a memory miss, and sixteen misses in flight fit a core's miss
/// queue, so callers prefetch chunks of up to twice this many keys.
pub const PREFETCH_DISTANCE: usize = 8;

/// Where [`Store::prefetch_record`] saw a key's entry without the lock: a guess that
/// the lookup checks under the lock (one load) before searching the bucket itself.
#[derive(Clone, Copy, Debug)]
pub struct Peeked {
    /// Where the entry was seen; `Cell::NONE` when the probe path ended without it, and
    /// `Cell::OTHER` when the peek gave up before the path ended.
    cell: Cell,
    e: u64,
    /// The address of `e`'s record, carried to the locked lookup so that it does not
    /// look up the segment and check the record's bounds again (see
    /// [`Store::record_at_if_key`]); null unless `cell` is a slot's.
    rec: *const u8,
    /// [`Store::id`] of the store that peeked: a peek is trusted only by its own store.
    store: u64,
}

// SAFETY: `rec` is an address, not a borrow: it is dereferenced only by the store that
// made it (`store`), under the shard lock, once the entry it was computed from is found
// still indexed (see `Store::find_live_record_from`). Sending or sharing the address
// itself is harmless.
unsafe impl Send for Peeked {}
// SAFETY: as for `Send`.
unsafe impl Sync for Peeked {}

/// What a lookup does with the item it found, under the shard lock: copy the bytes out,
/// nothing more.
///
/// The plain lookups take a closure. A closure cannot be marked `#[inline(always)]`,
/// and in the multi-get loop the compiler kept the reply composition out of line, at
/// about 30 instructions per key for the call; a `Visit` whose `visit` is marked
/// `#[inline(always)]` is composed in place.
pub trait Visit {
    /// What the lookup returns on a hit.
    type Output;
    /// Called once, under the shard lock, with the item.
    fn visit(self, item: ItemRef<'_>) -> Self::Output;
}

/// A closure as a [`Visit`].
struct Call<F>(F);

impl<R, F: FnOnce(ItemRef<'_>) -> R> Visit for Call<F> {
    type Output = R;
    #[inline]
    fn visit(self, item: ItemRef<'_>) -> R {
        (self.0)(item)
    }
}

impl Peeked {
    /// Nothing seen: [`Peeked::default`], usable in constants.
    pub const NONE: Peeked = Peeked {
        cell: Cell::NONE,
        e: 0,
        rec: std::ptr::null(),
        store: 0,
    };

    /// The peek followed the key's probe path as far as it looks without reaching its
    /// end: the key may be further on. Its cell is no slot's, so the check under the
    /// lock finds no entry there and searches the bucket.
    const MAYBE: Peeked = Peeked {
        cell: Cell::OTHER,
        e: 0,
        rec: std::ptr::null(),
        store: 0,
    };

    /// Whether the key may be in the table, as far as the lock-free look saw: an
    /// entry of its tag on its probe path, or a path longer than the look follows.
    /// (A hint only; `false` is trusted only to skip looking for an old version to
    /// overwrite in place, see [`Store::store_whole`].)
    #[inline]
    pub(crate) fn may_exist(&self) -> bool {
        self.cell != Cell::NONE
    }
}

impl Default for Peeked {
    fn default() -> Peeked {
        Peeked::NONE
    }
}

/// A key's hash in one store ([`Store::hash`]); only that store's calls accept it.
///
/// The default value is the hash of no key: a placeholder for slots that hold a key
/// too long to look up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyHash(u64);

impl KeyHash {
    /// The hash of no key ([`KeyHash::default`]), usable in constants.
    pub const NONE: KeyHash = KeyHash(0);
}

/// The cache engine, shared by all worker threads through `Arc<Store>`.
///
/// No lock is global on the request path: a request takes one index shard lock, and a
/// store also takes its writer group's lock for a pointer bump. The only shared atomic
/// written per store is the CAS counter.
pub struct Store {
    pub(crate) seed: u64,
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
    pub(crate) evictions: bool,
    /// The memory limit in bytes, as `limit_maxbytes` shows it (`cache_memlimit` changes
    /// it; the segments it allows are `PoolState::limit`).
    memory_limit: AtomicUsize,
    item_size_max: usize,
    /// memcached's bytes per item besides key, value and flags, for [`Store::item_fits`].
    item_overhead: usize,
    cas: Padded<AtomicU64>,
    flush: Padded<FlushState>,
    pub(crate) sweep_shard: AtomicUsize,
    /// `-k`: segments are locked into RAM as they get memory ([`StoreBuilder::lock_memory`]).
    lock_memory: bool,
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

/// Consuming builder for [`Store`]: `Store::builder().memory_limit(bytes).build()?`.
#[derive(Clone, Debug)]
pub struct StoreBuilder {
    memory_limit: usize,
    item_size_max: usize,
    evictions: bool,
    shards: Option<usize>,
    large_pages: bool,
    memcached_cas: bool,
    lock_memory: bool,
}

impl StoreBuilder {
    /// Bytes of item memory (memcached `-m`, default 64 MiB). At least two segments are
    /// always made, so a tiny limit is rounded up to two segments.
    pub fn memory_limit(mut self, bytes: usize) -> Self {
        self.memory_limit = bytes;
        self
    }

    /// Largest item in bytes, counted as memcached counts it (memcached `-I`, default 1 MiB).
    pub fn item_size_max(mut self, bytes: usize) -> Self {
        self.item_size_max = bytes;
        self
    }

    /// Lock item memory into RAM (memcached `-k`): each segment is `mlock`ed as it is
    /// first given memory, so its pages are resident from then on and never swapped,
    /// and a segment retired by a lower `cache_memlimit` keeps its pages. Where the
    /// kernel refuses (no `CAP_IPC_LOCK` and `RLIMIT_MEMLOCK` reached), the segment is
    /// used unlocked.
    ///
    /// memcached locks with `mlockall(MCL_CURRENT | MCL_FUTURE)`, after which an
    /// allocation past the limit fails and memcached answers out of memory; in Rust a
    /// failed allocation aborts the process, so the store locks its own segments instead.
    pub fn lock_memory(mut self, enabled: bool) -> Self {
        self.lock_memory = enabled;
        self
    }

    /// Whether the memcached whose size rule [`Store::item_fits`] applies keeps an 8-byte
    /// cas in every item (default true; false is memcached `-C`, whose items leave those
    /// 8 bytes to the value). Only the size rule changes: the store keeps its own cas.
    pub fn memcached_cas(mut self, enabled: bool) -> Self {
        self.memcached_cas = enabled;
        self
    }

    /// Whether to evict when memory is full (`false` is memcached `-M`: stores then fail
    /// with [`StoreOutcome::NoMemory`]).
    pub fn evictions(mut self, enabled: bool) -> Self {
        self.evictions = enabled;
        self
    }

    /// Number of index shards (rounded up to a power of two, at most 4096). By default it
    /// scales with memory: one per segment, between 16 and 256.
    pub fn shards(mut self, n: usize) -> Self {
        self.shards = Some(n);
        self
    }

    /// Put item memory on transparent huge pages (memcached `-L`): one mapping aligned to
    /// 2 MiB and marked `MADV_HUGEPAGE` holds every segment. [`StoreBuilder::build`]
    /// fails with [`BuildError::LargePages`] where the kernel refuses.
    pub fn large_pages(mut self, enabled: bool) -> Self {
        self.large_pages = enabled;
        self
    }

    /// Build the store. Segment memory is not touched until it is first written.
    pub fn build(self) -> Result<Store, BuildError> {
        if self.item_size_max < MIN_ITEM_SIZE_MAX_BYTES {
            return Err(BuildError::ItemSizeTooSmall(self.item_size_max));
        }
        if self.item_size_max > MAX_ITEM_SIZE_MAX_BYTES {
            return Err(BuildError::ItemSizeTooLarge(self.item_size_max));
        }
        // memcached's size rule (see `item_fits`) keeps every accepted item at least 33
        // bytes below `item_size_max` in our format, so a segment of `item_size_max`
        // bytes holds any accepted item.
        let segment_size = self
            .item_size_max
            .max(MIN_SEGMENT_BYTES)
            .next_multiple_of(SEGMENT_ROUND_BYTES);
        let count = (self.memory_limit / segment_size).max(2);
        if count > u32::MAX as usize {
            return Err(BuildError::MemoryTooLarge(self.memory_limit));
        }
        // Room for `cache_memlimit` to raise the limit later: the table of segments costs
        // about 40 bytes a segment, and their memory is only taken on first use. A
        // large-page store's mapping is sized at start, so it cannot grow.
        let capacity = if self.large_pages {
            count
        } else {
            (count + (count * (MEMLIMIT_GROWTH - 1)).min(MEMLIMIT_MAX_EXTRA))
                .max(MEMLIMIT_MIN_CAPACITY)
                .min(u32::MAX as usize)
        };
        let shards = match self.shards {
            Some(n) => n.clamp(1, MAX_SHARDS).next_power_of_two(),
            None => count.next_power_of_two().clamp(16, 256),
        };
        let groups = (count / 8).clamp(1, 8);
        let large_pages = if self.large_pages {
            Some(
                LargePageRegion::map(count * segment_size)
                    .map_err(|e| BuildError::LargePages(e.to_string()))?,
            )
        } else {
            None
        };
        let segments = (0..capacity)
            .map(|_| SegmentMeta::new(segment_size))
            .collect();
        static STORES: AtomicU64 = AtomicU64::new(0);
        Ok(Store {
            seed: RandomState::new().hash_one(0x5EED_u64),
            id: STORES.fetch_add(1, Ordering::Relaxed) + 1,
            shards: (0..shards).map(|_| ShardSlot::new()).collect(),
            hints: (0..MAX_SHARDS)
                .map(|_| Hint::default())
                .collect::<Box<[Hint]>>()
                .try_into()
                .unwrap_or_else(|_| unreachable!("MAX_SHARDS hints")),
            shard_mask: shards - 1,
            segments,
            segment_size,
            pool: Mutex::new(PoolState {
                free: (0..count as u32).rev().collect(),
                sealed: VecDeque::with_capacity(count),
                provisioned: count,
                limit: count,
            }),
            groups: (0..groups).map(|_| GroupSlot::new()).collect(),
            evictions: self.evictions,
            memory_limit: AtomicUsize::new(self.memory_limit),
            item_size_max: self.item_size_max,
            item_overhead: MEMCACHED_ITEM_OVERHEAD_BYTES
                - if self.memcached_cas {
                    0
                } else {
                    MEMCACHED_CAS_BYTES
                },
            lock_memory: self.lock_memory,
            cas: Padded(AtomicU64::new(0)),
            flush: Padded(FlushState {
                oldest_live: AtomicU32::new(0),
                oldest_cas: AtomicU64::new(0),
            }),
            sweep_shard: AtomicUsize::new(0),
            large_pages,
        })
    }
}

impl Store {
    /// Start configuring a store (defaults: memcached's `-m 64 -I 1m`, evictions on).
    pub fn builder() -> StoreBuilder {
        StoreBuilder {
            memory_limit: DEFAULT_MEMORY_LIMIT_BYTES,
            item_size_max: DEFAULT_ITEM_SIZE_MAX_BYTES,
            evictions: true,
            shards: None,
            large_pages: false,
            memcached_cas: true,
            lock_memory: false,
        }
    }

    /// Whether an item of this shape may be stored: the key is 1..=255 bytes and
    /// `59 + key + value (+ 4 if flags != 0) <= item_size_max`, memcached 1.6's own rule
    /// (51 without its cas, [`StoreBuilder::memcached_cas`]).
    /// The server can call this before reading a data block, to swallow an oversized one.
    pub fn item_fits(&self, key_len: usize, value_len: usize, flags: u32) -> bool {
        let flag_bytes = if flags != 0 { item::FLAGS_BYTES } else { 0 };
        (1..=MAX_KEY_BYTES).contains(&key_len)
            && value_len <= item::MAX_VALUE_BYTES
            && self.item_overhead + key_len + value_len + flag_bytes <= self.item_size_max
            && item::item_len(key_len, value_len, flags != 0) <= self.segment_size
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
        let count = (bytes / self.segment_size).max(2);
        if count > self.segments.len() {
            return false;
        }
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

    /// Look up `key`; on a hit call `f` with the item and mark it fetched and accessed.
    /// `f` runs under the shard lock: it must be short (copy the bytes out, nothing more).
    pub fn get<R>(&self, key: &[u8], now: RelTime, f: impl FnOnce(ItemRef<'_>) -> R) -> Lookup<R> {
        self.get_inner(key, self.hash(key), Peeked::default(), None, now, Call(f))
    }

    /// The hash of `key` in this store, for the pipelined calls below: a multi-get
    /// hashes each key once and hands the hash to every stage.
    #[inline]
    pub fn hash(&self, key: &[u8]) -> KeyHash {
        KeyHash(hash_key(self.seed, key))
    }

    /// First stage of a prefetched multi-get: prefetch the shard lock word and the index
    /// bucket of a key, without locking. Call it for a chunk of up to
    /// 2 x [`PREFETCH_DISTANCE`] keys before [`Store::prefetch_record`] for the same keys.
    ///
    /// A lookup of a key not in cache waits for three misses in a row (bucket, record,
    /// lock word), and the full barrier of each lock keeps the misses of the next key
    /// from starting early. Prefetches are not held back by a lock, so a multi-get that
    /// runs this stage and [`Store::prefetch_record`] ahead of its lookups overlaps the
    /// misses of many keys.
    #[inline(always)]
    pub fn prefetch_index(&self, h: KeyHash) {
        self.shard_for(h.0).locate(h.0);
    }

    /// Second stage, for the same chunk of keys, once their buckets have arrived: without
    /// the lock, find the entry the bucket holds for the key (by
    /// tag, without reading the key) and prefetch its record's header, key and the
    /// start of its value. Changes nothing; returns what it found, for the lookup to
    /// check under the lock before it searches the bucket itself.
    #[inline(always)]
    pub fn prefetch_record(&self, h: KeyHash, key_len: usize) -> Peeked {
        let found = self.hints[((h.0 >> 40) as usize & self.shard_mask) % MAX_SHARDS].peek(h.0);
        self.prefetch_found(found, key_len)
    }

    /// [`Store::prefetch_index`] that keeps where the bucket is, for
    /// [`Store::prefetch_located`]: the second stage then neither finds the shard's
    /// bucket array nor computes the bucket again.
    #[inline(always)]
    pub fn locate(&self, h: KeyHash) -> Located<'_> {
        self.shard_for(h.0).locate(h.0)
    }

    /// [`Store::prefetch_record`] for a key that [`Store::locate`] located.
    #[inline(always)]
    pub fn prefetch_located(&self, at: Located<'_>, h: KeyHash, key_len: usize) -> Peeked {
        self.prefetch_found(at.peek(h.0), key_len)
    }

    /// Prefetch the record a peek found, and say where it was.
    #[inline(always)]
    fn prefetch_found(&self, found: Peek, key_len: usize) -> Peeked {
        let Peek { cell, e } = found;
        // Entry 0: `Peek::ABSENT`, `Peek::UNKNOWN`, or a slot being filled or emptied
        // meanwhile. 0 is also the one entry the check under the lock cannot confirm
        // (`holds_at`).
        if e == 0 {
            return if found == Peek::ABSENT {
                Peeked::NONE
            } else {
                Peeked::MAYBE
            };
        }
        let (seg, off) = unpack(e);
        let Some(rec) = self.mem(seg).address_of(off as usize) else {
            return Peeked::MAYBE;
        };
        let len = item::HEADER_BYTES + item::FLAGS_BYTES + key_len + 64;
        segment::prefetch_head(rec as usize, len);
        Peeked {
            cell,
            e,
            rec,
            store: self.id,
        }
    }

    /// [`Store::get`] with the key's hash already computed by [`Store::hash`], and
    /// where [`Store::prefetch_record`] saw the key (or `Peeked::default()`). What to
    /// do with the item is a [`Visit`], so that a hot caller can have it inlined.
    #[inline]
    pub fn get_hashed<V: Visit>(
        &self,
        key: &[u8],
        h: KeyHash,
        peeked: Peeked,
        now: RelTime,
        v: V,
    ) -> Lookup<V::Output> {
        self.get_inner(key, h, peeked, None, now, v)
    }

    /// memcached `gat`/`gats`: on a hit, set the new exptime first, then call `f`.
    pub fn get_and_touch<R>(
        &self,
        key: &[u8],
        exptime: RelTime,
        now: RelTime,
        f: impl FnOnce(ItemRef<'_>) -> R,
    ) -> Lookup<R> {
        self.get_inner(
            key,
            self.hash(key),
            Peeked::default(),
            Some(exptime),
            now,
            Call(f),
        )
    }

    /// [`Store::get_and_touch`] with the key's hash already computed, and where
    /// [`Store::prefetch_record`] saw it.
    #[inline]
    pub fn get_and_touch_hashed<V: Visit>(
        &self,
        key: &[u8],
        h: KeyHash,
        peeked: Peeked,
        exptime: RelTime,
        now: RelTime,
        v: V,
    ) -> Lookup<V::Output> {
        self.get_inner(key, h, peeked, Some(exptime), now, v)
    }

    // Inlined: a multi-get calls it once per key, and the call's prologue, epilogue
    // and argument shuffling were a tenth of the key's instructions.
    #[inline(always)]
    fn get_inner<V: Visit>(
        &self,
        key: &[u8],
        h: KeyHash,
        peeked: Peeked,
        exptime: Option<RelTime>,
        now: RelTime,
        v: V,
    ) -> Lookup<V::Output> {
        debug_assert_eq!(
            h.0,
            hash_key(self.seed, key),
            "a KeyHash of another key or store"
        );
        let h = h.0;
        const MARKS: u8 = MARK_FETCHED | MARK_ACCESSED;
        let mut shard = self.shard_for(h).lock();
        let (e, hdr, mut bytes) = match self.find_live_record_from(&mut shard, h, key, peeked, now)
        {
            Ok(found) => found,
            Err(miss) => return miss.map_never(),
        };
        // In steady state an item read before is marked already: then nothing is
        // written, and the record found by the lookup is the one handed to `f`.
        if hdr.mark & MARKS != MARKS || exptime.is_some() {
            // SAFETY: we hold the lock of the shard indexing `e` (rule 2); the bytes
            // `bytes` points at are not read again until it is re-borrowed here (only
            // its length is passed).
            bytes = unsafe { self.mark_read(e, exptime, bytes.len()) };
        }
        let origin = Origin::segment_id(unpack(e).0);
        // The key handed on is the caller's, equal to the stored one (the lookup compared
        // them), and the value is the record's last `vlen` bytes: the record's offsets
        // are not worked out again (about 5 instructions a key of a multi-get).
        let value = &bytes[bytes.len() - hdr.prefix.vlen..];
        let result = v.visit(ItemRef {
            key,
            value,
            flags: hdr.flags,
            cas: hdr.cas,
            origin,
        });
        drop(shard);
        Lookup::Hit(result)
    }

    /// A get's writes to an item not marked read (or touched): the marks, and the new
    /// exptime when given; returns the record again, `len` bytes as the lookup read it
    /// (its prefix is not parsed a second time).
    ///
    /// Out of line: in steady state an item read before is marked already, and inlined
    /// this cost a single get about 10 instructions of its own path. A pipelined get
    /// after an overwrite comes here; it called `mut_window` and `item_bytes` before
    /// (together about 60 instructions).
    ///
    /// # Safety
    /// The caller holds the lock of the shard whose index holds `e`, holds no borrow of
    /// its record, and `len` is the record's length.
    #[cold]
    #[inline(never)]
    unsafe fn mark_read(&self, e: u64, exptime: Option<RelTime>, len: usize) -> &[u8] {
        const MARKS: u8 = MARK_FETCHED | MARK_ACCESSED;
        // SAFETY: forwarded from the caller (rule 2).
        let w = unsafe { self.mut_window(e) };
        item::set_mark(w, MARKS);
        if let Some(t) = exptime {
            item::set_exptime(w, t);
        }
        let (seg, off) = unpack(e);
        // SAFETY: shard lock held (rule 2), so nobody writes the item; the window's
        // borrow ended above, and the record is `len` bytes long.
        unsafe { self.mem(seg).bytes(off as usize, len) }
    }

    /// memcached set/add/replace/append/prepend/cas; see [`StoreMode`] for each rule.
    ///
    /// Every successful store takes a new CAS id from one global counter. `TooLarge` when
    /// [`Store::item_fits`] refuses the item; `NoMemory` only with evictions disabled.
    /// Append and prepend keep the item's flags and exptime; if the joined item would be
    /// too large or finds no memory they answer `NotStored`, as memcached does.
    pub fn store(
        &self,
        mode: StoreMode,
        key: &[u8],
        flags: u32,
        exptime: RelTime,
        value: &[u8],
        now: RelTime,
    ) -> StoreOutcome {
        self.store_cas(mode, key, flags, exptime, value, now).0
    }

    /// Like [`Store::store`], also returning the new CAS id (0 unless `Stored`).
    pub fn store_cas(
        &self,
        mode: StoreMode,
        key: &[u8],
        flags: u32,
        exptime: RelTime,
        value: &[u8],
        now: RelTime,
    ) -> (StoreOutcome, u64) {
        self.store_cas_hashed(mode, key, None, flags, exptime, value, now)
    }

    /// [`Store::store_cas`], given the key's hash from [`Store::hash`] and where
    /// [`Store::prefetch_record`] saw the key when the caller has them (`hashed`): a
    /// pipelined batch hashes its keys and prefetches their buckets and records before
    /// it runs the first of its requests. With `None` the store hashes and peeks itself.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn store_cas_hashed(
        &self,
        mode: StoreMode,
        key: &[u8],
        hashed: Option<(KeyHash, Peeked)>,
        flags: u32,
        exptime: RelTime,
        value: &[u8],
        now: RelTime,
    ) -> (StoreOutcome, u64) {
        if !self.item_fits(key.len(), value.len(), flags) {
            return (StoreOutcome::TooLarge, 0);
        }
        match mode {
            StoreMode::Append => self.concat(key, value, true, 0, now),
            StoreMode::Prepend => self.concat(key, value, false, 0, now),
            _ => {
                let extra = WholeExtra {
                    hashed,
                    ..WholeExtra::default()
                };
                self.store_whole(mode, key, flags, exptime, value, extra, now)
            }
        }
    }

    /// set/add/replace/cas: the new item does not depend on the old one.
    ///
    /// Inlined at its two callers: as a call of its own, a pipelined set spent about 18
    /// instructions passing its arguments (the `WholeExtra` through memory), and its
    /// callers' constant extras (a set's hash and peek given, no meta flags) could not
    /// fold its branches.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(crate) fn store_whole(
        &self,
        mode: StoreMode,
        key: &[u8],
        flags: u32,
        exptime: RelTime,
        value: &[u8],
        extra: WholeExtra,
        now: RelTime,
    ) -> (StoreOutcome, u64) {
        // The version this store replaces is read under the lock (key compare, header).
        // Under overwrites it is usually out of cache: asking for it now overlaps that
        // miss with the locking (or with the copy of a new item), unless the caller
        // asked for it earlier still.
        let (h, peeked) = match extra.hashed {
            Some((h, peeked)) => {
                debug_assert_eq!(h.0, hash_key(self.seed, key), "a KeyHash of another key");
                (h.0, peeked)
            }
            None => {
                let h = hash_key(self.seed, key);
                (h, self.prefetch_record(KeyHash(h), key.len()))
            }
        };
        let slot = self.shard_for(h);
        let new = NewItem {
            klen: key.len(),
            vlen: value.len(),
            flags,
            exptime,
            time: now,
            cas: 0,
        };
        // A set that may replace an item (as seen without the lock) may overwrite it in
        // place; add/replace/cas check their condition first, so a refused one burns no
        // segment space. A set the peek saw no entry for writes a new item: the locked
        // search that would confirm it costs more than it saves, and if the key did
        // arrive meanwhile, the new item replaces it below.
        if mode != StoreMode::Set || peeked.may_exist() {
            let mut shard = slot.lock();
            // The record borrow ends here: an overwrite writes the item's bytes.
            let live = self
                .find_live_record_from(&mut shard, h, key, peeked, now)
                .ok()
                .map(|(e, hd, _)| (e, hd));
            if let Some(refused) = condition_ext(mode, live.map(|(_, hd)| hd.cas), extra.invalidate)
            {
                return (refused, 0);
            }
            if let Some((e, old)) = live {
                if let Some(cas) =
                    self.overwrite_in_place(&mut shard, e, &old, &new, value, mode, extra)
                {
                    return (StoreOutcome::Stored, cas);
                }
            }
        }
        let Some(r) = self.reserve(new.total_len(), now) else {
            return (StoreOutcome::NoMemory, 0);
        };
        {
            // SAFETY: the region is reserved for us and not yet published (rule 1).
            let b = unsafe { self.region(r) };
            let ko = new.write_header(b);
            copy_key(&mut b[ko..ko + key.len()], key);
            b[ko + key.len()..].copy_from_slice(value);
        }
        let mut shard = slot.lock();
        let Shard { table, stats, .. } = &mut *shard;
        // The existing item, if any, with its header read from the record the key
        // comparison borrowed.
        let found = table.find_map(h, |e| self.record_if_key(e, key).map(Header::parse));
        let live = found
            .as_ref()
            .and_then(|(_, hd)| (self.liveness(hd, now) == Liveness::Live).then_some(*hd));
        let live_cas = live.map(|hd| hd.cas);
        if let Some(refused) = condition_ext(mode, live_cas, extra.invalidate) {
            if let Some((pos, hd)) = found {
                if live_cas.is_none() {
                    let old = table.remove(pos, h);
                    self.unlinked_len(stats, old, hd.prefix.total_len());
                }
            }
            drop(shard);
            self.abandon(r);
            return (refused, 0);
        }
        let cas = self.next_cas();
        let new_e = pack(r.seg, r.off);
        {
            // SAFETY: `r` is still unpublished and ours (rule 1); only its header window.
            let w = unsafe { self.mut_window(new_e) };
            item::set_cas(w, cas);
        }
        match found {
            Some((pos, hd)) => {
                let old = table.replace(pos, new_e);
                self.unlinked_len(stats, old, hd.prefix.total_len());
            }
            None => {
                table.insert_unique(h, new_e, |e| self.hash_entry(e));
            }
        }
        self.published(stats, r);
        let mut mark = if extra.key_binary {
            item::MARK_KEY_BINARY
        } else {
            0
        };
        let stale = match (mode, live) {
            (StoreMode::Cas(want), Some(old)) if want != old.cas => Some(old),
            _ => None,
        };
        if let Some(old) = stale {
            // memcached's CAS_STALE: the value is replaced but keeps the old TTL, and is
            // marked stale (keeping a win token already handed out).
            mark |= item::MARK_STALE | (old.mark & item::MARK_TOKEN_SENT);
        }
        if mark != 0 || stale.is_some() {
            // SAFETY: shard lock held and the item was just published under it (rule 2).
            let w = unsafe { self.mut_window(pack(r.seg, r.off)) };
            item::set_mark(w, mark);
            if let Some(old) = stale {
                item::set_exptime(w, old.exptime);
            }
        }
        drop(shard);
        self.release(r);
        (StoreOutcome::Stored, cas)
    }

    /// Under the shard lock, after the store's condition passed: write the new version
    /// of live item `e` (header `old`) over its bytes, when it has the same shape (key,
    /// value length, and whether it has client flags) so the immutable prefix and key
    /// stay as they are. Returns the new CAS id, or `None` when the store must write a
    /// new item instead:
    ///
    /// * another shape: the record's length is fixed once the evictor may walk it;
    /// * a value pin on the segment: a reader is sending the old value in place;
    /// * `-M` (no evictions): memcached refuses any store, overwrites included, once
    ///   memory is full, and only a new item reaches that check;
    /// * a stale CAS accepted by meta `ms I`: it keeps the old exptime and marks.
    ///
    /// Overwriting in place is memcached's memory behaviour (a freed chunk of the same
    /// slab class is reused at once) in a log: overwrites leave no dead versions behind,
    /// the store's memory stays near its live data, and the bytes written are the ones
    /// the lookup just read, so they are in cache. The item keeps its place in the
    /// eviction order; it is marked accessed, so the CLOCK gives it the second chance a
    /// new item would get by being written at the head of the log.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn overwrite_in_place(
        &self,
        shard: &mut Shard,
        e: u64,
        old: &Header,
        new: &NewItem,
        value: &[u8],
        mode: StoreMode,
        extra: WholeExtra,
    ) -> Option<u64> {
        let stale = matches!(mode, StoreMode::Cas(want) if want != old.cas);
        let same_shape = old.prefix.vlen == new.vlen && old.prefix.has_flags == (new.flags != 0);
        let (seg, off) = unpack(e);
        if !same_shape || stale || !self.evictions {
            return None;
        }
        // The segment found once for its pins, the value and the header window (three
        // lookups with their bounds checks before).
        let meta = &self.segments[seg as usize];
        if meta.pinned() {
            return None;
        }
        let mem = &meta.mem;
        let value_at = off as usize + old.prefix.key_offset() + old.prefix.klen;
        // SAFETY: the caller holds the shard lock of `e`, which is indexed and live, and no
        // borrow of its record (rule 2); no pin is on its segment, checked under this lock,
        // so no reader outside the lock is sending the value. The range is the value
        // only: the prefix and key, which the evictor reads without the lock, are not
        // written.
        unsafe { mem.bytes_mut(value_at, new.vlen) }.copy_from_slice(value);
        if new.flags != 0 {
            // SAFETY: as above, the four flag bytes after the fixed header.
            let f = unsafe { mem.bytes_mut(off as usize + item::HEADER_BYTES, item::FLAGS_BYTES) };
            f.copy_from_slice(&new.flags.to_le_bytes());
        }
        let cas = self.next_cas();
        // SAFETY: as above, the mutable header window (what `mut_window` borrows).
        let w = unsafe { mem.bytes_mut(off as usize + MUT_START, MUT_LEN) };
        let mark = if extra.key_binary {
            item::MARK_KEY_BINARY
        } else {
            0
        };
        item::set_new_version(w, mark | MARK_ACCESSED, new.exptime, new.time, cas);
        // memcached links a new item: the item count grows, and the byte count stays.
        shard.stats.total_items += 1;
        Some(cas)
    }

    /// append/prepend: a new item holding old value and new data, in either order.
    /// A non-zero `want_cas` must equal the item's CAS id (meta `ms MA C<cas>`).
    pub(crate) fn concat(
        &self,
        key: &[u8],
        data: &[u8],
        append: bool,
        want_cas: u64,
        now: RelTime,
    ) -> (StoreOutcome, u64) {
        let h = hash_key(self.seed, key);
        let slot = self.shard_for(h);
        loop {
            let (old_e, old) = {
                let mut shard = slot.lock();
                match self.do_find_live(&mut shard, h, key, now) {
                    Ok(found) => found,
                    Err(_) => return (StoreOutcome::NotStored, 0),
                }
            };
            if want_cas != 0 && old.cas != want_cas {
                return (StoreOutcome::Exists, 0);
            }
            let old_vlen = old.prefix.vlen;
            let vlen = old_vlen + data.len();
            if !self.item_fits(key.len(), vlen, old.flags) {
                return (StoreOutcome::NotStored, 0);
            }
            let new = NewItem {
                klen: key.len(),
                vlen,
                flags: old.flags,
                exptime: old.exptime,
                time: now,
                cas: 0,
            };
            let Some(r) = self.reserve(new.total_len(), now) else {
                return (StoreOutcome::NotStored, 0);
            };
            let vo = {
                // SAFETY: the region is reserved for us and not yet published (rule 1).
                let b = unsafe { self.region(r) };
                let ko = new.write_header(b);
                b[ko..ko + key.len()].copy_from_slice(key);
                let vo = ko + key.len();
                let at = if append { vo + old_vlen } else { vo };
                b[at..at + data.len()].copy_from_slice(data);
                vo
            };
            let mut shard = slot.lock();
            let Shard { table, stats, .. } = &mut *shard;
            let entry = table.entry(h, |e| self.key_eq(e, key), |e| self.hash_entry(e));
            if !self.unchanged(&entry, old_e, old.cas, now) {
                // Changed (or expired) between our two looks: start again.
                drop(shard);
                self.abandon(r);
                continue;
            }
            // A touch in between keeps the CAS id but may have moved the exptime.
            self.copy_exptime(r, old_e);
            {
                // SAFETY: shard lock held, so the old item's bytes are stable (rule 2).
                let old_bytes = unsafe { self.item_bytes(old_e) };
                let old_value = &old_bytes[old_bytes.len() - old_vlen..];
                // SAFETY: our own unpublished region (rule 1); it does not overlap the old
                // item, which is published elsewhere.
                let b = unsafe { self.region(r) };
                let at = if append { vo } else { vo + data.len() };
                b[at..at + old_vlen].copy_from_slice(old_value);
            }
            let cas = self.publish(r, entry, stats);
            drop(shard);
            self.release(r);
            return (StoreOutcome::Stored, cas);
        }
    }

    /// Delete a live item; false if there was none (an expired one is unlinked too).
    pub fn delete(&self, key: &[u8], now: RelTime) -> bool {
        let h = hash_key(self.seed, key);
        let mut shard = self.shard_for(h).lock();
        let Shard { table, stats, .. } = &mut *shard;
        let Some(o) = table.find_entry(h, |e| self.key_eq(e, key)) else {
            return false;
        };
        let live = self.liveness(&self.header(o.get()), now) == Liveness::Live;
        let old = o.remove();
        self.unlinked(stats, old);
        live
    }

    /// Set a live item's exptime; false if there is none.
    pub fn touch(&self, key: &[u8], exptime: RelTime, now: RelTime) -> bool {
        let h = hash_key(self.seed, key);
        let mut shard = self.shard_for(h).lock();
        match self.do_find_live(&mut shard, h, key, now) {
            Ok((e, _)) => {
                // SAFETY: shard lock held (rule 2); only the mutable window is borrowed.
                let w = unsafe { self.mut_window(e) };
                item::set_exptime(w, exptime);
                item::set_mark(w, MARK_FETCHED | MARK_ACCESSED);
                true
            }
            Err(_) => false,
        }
    }

    /// memcached incr/decr; see the `arith` module for the exact number rules.
    pub fn incr_decr(&self, key: &[u8], delta: u64, incr: bool, now: RelTime) -> ArithOutcome {
        match self.do_incr_decr(key, delta, incr, 0, None, now) {
            DeltaResult::Value { value, .. } => ArithOutcome::Value(value),
            DeltaResult::NotFound | DeltaResult::CasMismatch => ArithOutcome::NotFound,
            DeltaResult::NonNumeric => ArithOutcome::NonNumeric,
            DeltaResult::NoMemory => ArithOutcome::NoMemory,
        }
    }

    /// memcached's `do_add_delta`: incr/decr, refused when a non-zero `want_cas` differs
    /// from the item's CAS id. `ttl` becomes the item's exptime only when the number is
    /// rewritten in place: memcached's meta `ma T` sets the exptime of the item it holds,
    /// which is the replaced one when the digits outgrew the value.
    pub(crate) fn do_incr_decr(
        &self,
        key: &[u8],
        delta: u64,
        incr: bool,
        want_cas: u64,
        ttl: Option<RelTime>,
        now: RelTime,
    ) -> DeltaResult {
        let h = hash_key(self.seed, key);
        let slot = self.shard_for(h);
        let mut buf = [0u8; arith::MAX_DIGITS];
        loop {
            let mut shard = slot.lock();
            let (e, hdr) = match self.do_find_live(&mut shard, h, key, now) {
                Ok(found) => found,
                Err(_) => return DeltaResult::NotFound,
            };
            let vlen = hdr.prefix.vlen;
            if vlen == 0 || memcached_would_chunk(key.len(), hdr.prefix.has_flags, vlen) {
                return DeltaResult::NonNumeric;
            }
            if want_cas != 0 && hdr.cas != want_cas {
                return DeltaResult::CasMismatch;
            }
            let (value, digits) = {
                // SAFETY: shard lock held (rule 2).
                let bytes = unsafe { self.item_bytes(e) };
                let old = &bytes[bytes.len() - vlen..];
                let Some(n) = arith::parse_u64(old) else {
                    return DeltaResult::NonNumeric;
                };
                let value = arith::apply(n, delta, incr);
                (value, arith::format_u64(value, &mut buf))
            };
            // memcached rewrites the number in place when it fits, padded with spaces.
            let padded = digits.len() <= vlen;
            if padded && !self.has_pins(unpack(e).0) {
                let (seg, off) = unpack(e);
                let item_len = hdr.prefix.total_len();
                // SAFETY: shard lock held (rule 2); the value range is inside the item and
                // no other borrow of it is alive.
                let v = unsafe {
                    self.mem(seg)
                        .bytes_mut(off as usize + item_len - vlen, vlen)
                };
                arith::write_in_place(v, digits);
                // SAFETY: as above, the mutable header window only.
                let w = unsafe { self.mut_window(e) };
                let cas = self.next_cas();
                item::set_cas(w, cas);
                item::set_time(w, now);
                if let Some(t) = ttl {
                    item::set_exptime(w, t);
                }
                return DeltaResult::Value {
                    value,
                    cas,
                    exptime: hdr.exptime,
                    in_place: true,
                };
            }
            drop(shard);
            // The digits outgrew the value: store a new item with exactly the digits. Or
            // a reader has the item's segment pinned (a vectored send of one of its values
            // is under way): a new item with the bytes the in-place write would have left.
            let new = NewItem {
                klen: key.len(),
                vlen: if padded { vlen } else { digits.len() },
                flags: hdr.flags,
                exptime: hdr.exptime,
                time: now,
                cas: 0,
            };
            let Some(r) = self.reserve(new.total_len(), now) else {
                return DeltaResult::NoMemory;
            };
            {
                // SAFETY: the region is reserved for us and not yet published (rule 1).
                let b = unsafe { self.region(r) };
                let ko = new.write_header(b);
                b[ko..ko + key.len()].copy_from_slice(key);
                arith::write_in_place(&mut b[ko + key.len()..], digits);
            }
            let mut shard = slot.lock();
            let Shard { table, stats, .. } = &mut *shard;
            let entry = table.entry(h, |e| self.key_eq(e, key), |e| self.hash_entry(e));
            if !self.unchanged(&entry, e, hdr.cas, now) {
                drop(shard);
                self.abandon(r);
                continue;
            }
            self.copy_exptime(r, e);
            let exptime = self.header(e).exptime;
            if let (true, Some(t)) = (padded, ttl) {
                // SAFETY: `r` is still unpublished and ours (rule 1); only its header.
                let w = unsafe {
                    self.mem(r.seg)
                        .bytes_mut(r.off as usize + MUT_START, MUT_LEN)
                };
                item::set_exptime(w, t);
            }
            let cas = self.publish(r, entry, stats);
            drop(shard);
            self.release(r);
            return DeltaResult::Value {
                value,
                cas,
                exptime,
                in_place: padded,
            };
        }
    }

    /// memcached `flush_all`, with `oldest_live` already converted by the server.
    /// Items stored at or before `oldest_live` (or, for an immediate flush, with a CAS
    /// older than the flush) read as [`Lookup::Flushed`] once `oldest_live <= now`.
    pub fn flush_all(&self, oldest_live: RelTime, now: RelTime) {
        let f = &self.flush.0;
        if oldest_live <= now {
            f.oldest_cas.store(self.next_cas(), Ordering::Release);
        }
        f.oldest_live.store(oldest_live, Ordering::Release);
    }

    /// Statistics, summed over the shards (each locked briefly in turn).
    pub fn stats(&self) -> StoreStats {
        let mut sum = ShardStats::default();
        for i in 0..self.shards.len() {
            let s = self.shard_at(i).lock().stats;
            sum.curr_items += s.curr_items;
            sum.bytes += s.bytes;
            sum.total_items += s.total_items;
            sum.evictions += s.evictions;
            sum.expired_unfetched += s.expired_unfetched;
            sum.evicted_unfetched += s.evicted_unfetched;
            sum.reclaimed += s.reclaimed;
            sum.items_retained += s.items_retained;
        }
        let (in_use, limit) = {
            let pool = self.pool_lock();
            (pool.in_use(), pool.limit)
        };
        StoreStats {
            curr_items: sum.curr_items,
            total_items: sum.total_items,
            bytes: sum.bytes,
            evictions: sum.evictions,
            expired_unfetched: sum.expired_unfetched,
            evicted_unfetched: sum.evicted_unfetched,
            reclaimed: sum.reclaimed,
            limit_maxbytes: self.memory_limit.load(Ordering::Relaxed) as u64,
            segments_used: in_use as u64,
            segments_total: limit as u64,
            segment_size: self.segment_size as u64,
            items_retained: sum.items_retained,
        }
    }

    /// memcached `stats reset`: zero the counters, not the gauges (`curr_items`, `bytes`).
    pub fn reset_stats(&self) {
        for i in 0..self.shards.len() {
            let s = &mut self.shard_at(i).lock().stats;
            *s = ShardStats {
                curr_items: s.curr_items,
                bytes: s.bytes,
                ..ShardStats::default()
            };
        }
    }

    // ---- helpers shared with `evict` ------------------------------------------------

    #[inline]
    pub(crate) fn shard_for(&self, h: u64) -> ShardRef<'_> {
        let i = (h >> 40) as usize & self.shard_mask;
        debug_assert_eq!(self.shards.len(), self.shard_mask + 1);
        ShardRef {
            // SAFETY: `shard_mask + 1` is the number of shards, set with them when the
            // store is built and never changed, so a masked index is in bounds. (The
            // bounds check was two of the instructions of every key's two shard
            // lookups in a multi-get.)
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

    /// A new CAS id: unique and strictly increasing across all keys.
    #[inline]
    pub(crate) fn next_cas(&self) -> u64 {
        self.cas.0.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The whole item at `e`.
    ///
    /// # Safety
    /// The caller holds the lock of the shard whose index holds `e` (rule 2).
    #[inline]
    pub(crate) unsafe fn item_bytes(&self, e: u64) -> &[u8] {
        let (seg, off) = unpack(e);
        let mem = self.mem(seg);
        // SAFETY: the prefix is immutable once published; the caller holds the lock.
        let p = Prefix::parse(unsafe { mem.bytes(off as usize, PREFIX_BYTES) });
        // SAFETY: as above: under the shard lock nobody writes the item (rule 2).
        unsafe { mem.bytes(off as usize, p.total_len()) }
    }

    /// The mutable header window (`mark`, `exptime`, `time`, `cas`) of the item at `e`.
    ///
    /// # Safety
    /// The caller holds the lock of the shard whose index holds `e`, and holds no other
    /// borrow of the item (rule 2).
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn mut_window(&self, e: u64) -> &mut [u8] {
        let (seg, off) = unpack(e);
        // SAFETY: forwarded to the caller.
        unsafe { self.mem(seg).bytes_mut(off as usize + MUT_START, MUT_LEN) }
    }

    /// The bytes of a reservation.
    ///
    /// # Safety
    /// `r` is this thread's unpublished reservation (rule 1), not borrowed elsewhere.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn region(&self, r: Reservation) -> &mut [u8] {
        // SAFETY: forwarded to the caller.
        unsafe { self.mem(r.seg).bytes_mut(r.off as usize, r.len as usize) }
    }

    /// Header of an indexed item. Call only under the item's shard lock.
    #[inline]
    pub(crate) fn header(&self, e: u64) -> Header {
        // SAFETY: every caller runs inside a shard-locked section, on an entry found in
        // that shard's table (rule 2).
        Header::parse(unsafe { self.item_bytes(e) })
    }

    /// Whether the indexed item `e` has key `key`. Used as the table's `eq` under the lock.
    #[inline]
    pub(crate) fn key_eq(&self, e: u64, key: &[u8]) -> bool {
        let (seg, off) = unpack(e);
        let mem = self.mem(seg);
        // SAFETY: prefix and key are immutable once published (rules 2 and 3), and `e`
        // is in the index, so its segment is not being reused.
        let p = Prefix::parse(unsafe { mem.bytes(off as usize, PREFIX_BYTES) });
        p.klen == key.len()
            // SAFETY: as above.
            && bytes_eq(unsafe { mem.bytes(off as usize + p.key_offset(), p.klen) }, key)
    }

    /// Hash of the key of indexed item `e`, for the table's rehash under the lock.
    #[inline]
    pub(crate) fn hash_entry(&self, e: u64) -> u64 {
        let (seg, off) = unpack(e);
        let mem = self.mem(seg);
        // SAFETY: prefix and key are immutable once published, and `e` is in the index.
        let p = Prefix::parse(unsafe { mem.bytes(off as usize, PREFIX_BYTES) });
        // SAFETY: as above.
        hash_key(self.seed, unsafe {
            mem.bytes(off as usize + p.key_offset(), p.klen)
        })
    }

    /// memcached's `item_is_flushed`, then its expiry check.
    #[inline]
    pub(crate) fn liveness(&self, hdr: &Header, now: RelTime) -> Liveness {
        let f = &self.flush.0;
        let oldest_live = f.oldest_live.load(Ordering::Acquire);
        if oldest_live != 0 && oldest_live <= now {
            let oldest_cas = f.oldest_cas.load(Ordering::Acquire);
            if hdr.time <= oldest_live || (oldest_cas != 0 && hdr.cas < oldest_cas) {
                return Liveness::Flushed;
            }
        }
        if item::is_expired(hdr.exptime, now) {
            Liveness::Expired
        } else {
            Liveness::Live
        }
    }

    /// Find the live item for `key` in a locked shard. An expired or flushed item is
    /// unlinked on the way and reported as such.
    pub(crate) fn do_find_live(
        &self,
        shard: &mut Shard,
        h: u64,
        key: &[u8],
        now: RelTime,
    ) -> Result<(u64, Header), Lookup<std::convert::Infallible>> {
        self.do_find_live_record(shard, h, key, now)
            .map(|(e, hdr, _)| (e, hdr))
    }

    /// [`Store::do_find_live`] that also returns the whole record of the live item, read
    /// once: the key comparison of the lookup borrows it, and the header is decoded
    /// from the same borrow. The record is valid while the shard stays locked and
    /// nothing writes the item; a caller that writes (through [`Store::mut_window`])
    /// must not use it afterwards.
    #[inline(always)]
    pub(crate) fn do_find_live_record(
        &self,
        shard: &mut Shard,
        h: u64,
        key: &[u8],
        now: RelTime,
    ) -> Result<(u64, Header, &[u8]), Lookup<std::convert::Infallible>> {
        self.find_live_record_from(shard, h, key, Peeked::default(), now)
    }

    /// [`Store::do_find_live_record`] that first tries where `peeked` saw the key: if
    /// that slot still holds the same entry and its key is `key`, the bucket is not
    /// searched.
    #[inline(always)]
    fn find_live_record_from(
        &self,
        shard: &mut Shard,
        h: u64,
        key: &[u8],
        peeked: Peeked,
        now: RelTime,
    ) -> Result<(u64, Header, &[u8]), Lookup<std::convert::Infallible>> {
        let Shard { table, stats, .. } = shard;
        let mut found = None;
        let Peeked {
            cell,
            e,
            rec,
            store,
        } = peeked;
        // `holds_at` is false for the cells of `Peeked::NONE` and `MAYBE` (entry 0).
        if store == self.id {
            if let Some(pos) = table.holds_at(cell, e) {
                // SAFETY: this store computed `rec` from `e` ([`Store::prefetch_record`]
                // never hands out a null one for a slot's cell), and `e` is indexed in
                // this locked shard.
                found = unsafe { self.record_at_if_key(rec, key) }.map(|record| (pos, e, record));
            }
        }
        if found.is_none() {
            // A loop of our own over the candidates, so that the key comparison inlines.
            for (pos, e) in table.candidates(h) {
                if let Some(record) = self.record_if_key(e, key) {
                    found = Some((pos, e, record));
                    break;
                }
            }
        }
        let Some((pos, e, record)) = found else {
            return Err(Lookup::Miss);
        };
        let hdr = Header::parse(record);
        match self.liveness(&hdr, now) {
            Liveness::Live => Ok((e, hdr, record)),
            gone => {
                table.remove(pos, h);
                self.unlinked(stats, e);
                Err(if gone == Liveness::Expired {
                    Lookup::Expired
                } else {
                    Lookup::Flushed
                })
            }
        }
    }

    /// The whole record of indexed item `e` if its key is `key`. Call only under the
    /// shard lock of `e` (rule 2).
    #[inline(always)]
    fn record_if_key(&self, e: u64, key: &[u8]) -> Option<&[u8]> {
        let (seg, off) = unpack(e);
        // SAFETY: prefix and key are immutable once published (rules 2 and 3), and `e`
        // is in the index, so its segment is not being reused; the mutable header bytes
        // are read only under the shard lock, which every caller holds. A prefix with
        // another key length gives an empty record, so the key is not read.
        let (p, record) = unsafe {
            self.mem(seg)
                .record(off as usize, PREFIX_BYTES, len_if_key_len(key.len()))
        };
        if_key(p, record, key)
    }

    /// [`Store::record_if_key`] for a record whose address was computed before the lock
    /// was taken ([`Store::prefetch_record`]): no segment lookup, no bounds checks.
    ///
    /// # Safety
    /// `rec` is the address [`SegmentMem::address_of`] gave for entry `e` of this store,
    /// and the caller holds the lock of the shard that indexes `e` now. (A segment's
    /// address never changes once it has one, so `rec` is still `e`'s record; the record
    /// was checked to lie inside its segment when it was written, and rule 2 keeps
    /// writers out while the lock is held.)
    #[inline(always)]
    unsafe fn record_at_if_key(&self, rec: *const u8, key: &[u8]) -> Option<&[u8]> {
        // SAFETY: forwarded from the caller.
        let (p, record) =
            unsafe { segment::record_at(rec, PREFIX_BYTES, len_if_key_len(key.len())) };
        if_key(p, record, key)
    }

    /// Account for entry `e` having been removed from a locked shard.
    #[inline]
    pub(crate) fn unlinked(&self, stats: &mut ShardStats, e: u64) {
        let (seg, _) = unpack(e);
        // SAFETY: called right after `e` was removed, still under the shard lock, so the
        // item bytes are unchanged and its segment not reused (rule 2).
        let len = Prefix::parse(unsafe { self.mem(seg).bytes(unpack(e).1 as usize, PREFIX_BYTES) })
            .total_len();
        self.unlinked_len(stats, e, len);
    }

    /// [`Store::unlinked`] for an entry whose record length is already known.
    #[inline]
    pub(crate) fn unlinked_len(&self, stats: &mut ShardStats, e: u64, len: usize) {
        let (seg, _) = unpack(e);
        let len = len as u64;
        stats.curr_items -= 1;
        stats.bytes -= len;
        // Release: pairs with the acquire load in `take_dead_segment`, which may reuse
        // the segment once this reaches 0 (see there).
        self.segments[seg as usize]
            .live_bytes
            .fetch_sub(len, Ordering::Release);
    }

    /// Under the shard lock: whether `entry` still holds the same live item version that
    /// was read before the lock was dropped (same location and same CAS id).
    pub(crate) fn unchanged(&self, entry: &Entry<'_>, e: u64, cas: u64, now: RelTime) -> bool {
        match entry {
            Entry::Occupied(o) if o.get() == e => {
                let cur = self.header(e);
                cur.cas == cas && self.liveness(&cur, now) == Liveness::Live
            }
            _ => false,
        }
    }

    /// Under the shard lock: copy the current exptime of item `e` into reservation `r`.
    pub(crate) fn copy_exptime(&self, r: Reservation, e: u64) {
        let exptime = self.header(e).exptime;
        // SAFETY: `r` is still unpublished and ours (rule 1); only its header window.
        let w = unsafe {
            self.mem(r.seg)
                .bytes_mut(r.off as usize + MUT_START, MUT_LEN)
        };
        item::set_exptime(w, exptime);
    }

    /// Stamp a fresh CAS id on the written reservation `r` and point `entry` at it.
    /// Runs under the shard lock; returns the CAS id.
    pub(crate) fn publish(&self, r: Reservation, entry: Entry<'_>, stats: &mut ShardStats) -> u64 {
        let cas = self.next_cas();
        // SAFETY: `r` is still unpublished and ours (rule 1); only its header window.
        let w = unsafe {
            self.mem(r.seg)
                .bytes_mut(r.off as usize + MUT_START, MUT_LEN)
        };
        item::set_cas(w, cas);
        let new_e = pack(r.seg, r.off);
        match entry {
            Entry::Occupied(mut o) => {
                let old = o.replace(new_e);
                self.unlinked(stats, old);
            }
            Entry::Vacant(v) => {
                v.insert(new_e);
            }
        }
        self.published(stats, r);
        cas
    }

    /// Account for reservation `r` having been published in a locked shard.
    #[inline]
    fn published(&self, stats: &mut ShardStats, r: Reservation) {
        stats.curr_items += 1;
        stats.total_items += 1;
        stats.bytes += u64::from(r.len);
        self.segments[r.seg as usize]
            .live_bytes
            .fetch_add(u64::from(r.len), Ordering::Relaxed);
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

    /// The bytes of a pinned value.
    #[inline]
    pub fn pinned<'a>(&'a self, pin: &'a ValuePin) -> &'a [u8] {
        // SAFETY: while `pin` lives, its segment's pin count is not zero, so no eviction,
        // compaction, dead-segment reuse or in-place write touches the item's bytes (see
        // the module docs); writers only append past them. The borrow cannot outlive the
        // pin, because it borrows it.
        unsafe { self.mem(pin.seg).bytes(pin.off as usize, pin.len as usize) }
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

/// What [`Store::do_incr_decr`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DeltaResult {
    /// The new value, the item's new CAS id and its exptime before any `ttl` was applied.
    Value {
        value: u64,
        cas: u64,
        exptime: RelTime,
        in_place: bool,
    },
    NotFound,
    CasMismatch,
    NonNumeric,
    NoMemory,
}

/// Meta-protocol options of a whole-item store.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct WholeExtra {
    /// `ms I`: a CAS older than the item's stores the value as stale instead of failing.
    pub invalidate: bool,
    /// `ms b`: remember that the key was sent base64-encoded.
    pub key_binary: bool,
    /// The key's hash and where [`Store::prefetch_record`] saw it, when the caller has
    /// them already ([`Store::store_cas_hashed`]).
    pub hashed: Option<(KeyHash, Peeked)>,
}

/// [`condition`], with memcached's `CAS_STALE` rule when `invalidate` is set: a non-zero
/// CAS lower than the item's is accepted.
#[inline]
fn condition_ext(mode: StoreMode, live_cas: Option<u64>, invalidate: bool) -> Option<StoreOutcome> {
    match (mode, live_cas) {
        (StoreMode::Cas(want), Some(have)) if invalidate && want != 0 && want < have => None,
        _ => condition(mode, live_cas),
    }
}

/// Whether `mode` refuses to store, given the live item's CAS id (if any).
#[inline]
fn condition(mode: StoreMode, live_cas: Option<u64>) -> Option<StoreOutcome> {
    match (mode, live_cas) {
        (StoreMode::Add, Some(_)) => Some(StoreOutcome::NotStored),
        (StoreMode::Replace | StoreMode::Append | StoreMode::Prepend, None) => {
            Some(StoreOutcome::NotStored)
        }
        (StoreMode::Cas(_), None) => Some(StoreOutcome::NotFound),
        (StoreMode::Cas(want), Some(have)) if want != have => Some(StoreOutcome::Exists),
        _ => None,
    }
}

/// `dst.copy_from_slice(key)` without a call to `memcpy` for the usual key
/// lengths (8 to 32 bytes): two overlapping fixed-size copies.
#[inline(always)]
fn copy_key(dst: &mut [u8], key: &[u8]) {
    let n = key.len();
    if !(8..=32).contains(&n) || dst.len() != n {
        dst.copy_from_slice(key);
    } else if n >= 16 {
        dst[..16].copy_from_slice(&key[..16]);
        dst[n - 16..].copy_from_slice(&key[n - 16..]);
    } else {
        dst[..8].copy_from_slice(&key[..8]);
        dst[n - 8..].copy_from_slice(&key[n - 8..]);
    }
}

/// For reading a record from its prefix: its length if its key is `key_len` bytes
/// long, else 0 (so that nothing past the prefix is read), with the prefix.
#[inline(always)]
fn len_if_key_len(key_len: usize) -> impl FnOnce(&[u8]) -> (usize, Prefix) {
    move |b| {
        let p = Prefix::parse(b);
        let len = if p.klen == key_len { p.total_len() } else { 0 };
        (len, p)
    }
}

/// `record` (read with [`len_if_key_len`]) if its key is `key`.
#[inline(always)]
fn if_key<'r>(p: Prefix, record: &'r [u8], key: &[u8]) -> Option<&'r [u8]> {
    if p.klen != key.len() {
        return None;
    }
    let ko = p.key_offset();
    bytes_eq(&record[ko..ko + p.klen], key).then_some(record)
}

/// Byte-slice equality without a call to `memcmp`: keys are short (20 to 50 bytes is
/// typical), where the library call costs more than the comparison. From 16 bytes on,
/// 16 at a time and then the last 16 (overlapping): a key of up to 32 bytes is two
/// compares without a loop.
#[inline(always)]
pub(crate) fn bytes_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if n < 8 {
        return a == b;
    }
    if n < 16 {
        let word = |s: &[u8], i: usize| u64::from_le_bytes(s[i..i + 8].try_into().unwrap());
        return word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8);
    }
    let block = |s: &[u8], i: usize| u128::from_le_bytes(s[i..i + 16].try_into().unwrap());
    if n <= 32 {
        return block(a, 0) == block(b, 0) && block(a, n - 16) == block(b, n - 16);
    }
    let mut i = 0;
    while i + 16 < n {
        if block(a, i) != block(b, i) {
            return false;
        }
        i += 16;
    }
    // The last 16 bytes, overlapping what was compared already.
    block(a, n - 16) == block(b, n - 16)
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

/// memcached stores an item whose total size exceeds its `slab_chunk_max`
/// (512 KiB by default) in chunks, and refuses incr/decr on a chunked item as
/// non-numeric whatever its digits. The total is memcached's: a 48-byte
/// header, the key and its NUL, 4 bytes of flags when non-zero, the value and
/// its `\r\n`, and the 8-byte cas.
fn memcached_would_chunk(key_len: usize, has_flags: bool, value_len: usize) -> bool {
    const MEMCACHED_SLAB_CHUNK_MAX_BYTES: usize = 512 * 1024;
    let total = 48 + key_len + 1 + if has_flags { 4 } else { 0 } + value_len + 2 + 8;
    total > MEMCACHED_SLAB_CHUNK_MAX_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: RelTime = 100;

    #[test]
    fn copy_key_every_length() {
        let src: Vec<u8> = (1..=60u8).collect();
        for n in 0..=60 {
            let mut dst = vec![0u8; n];
            copy_key(&mut dst, &src[..n]);
            assert_eq!(dst, &src[..n]);
        }
    }

    #[test]
    fn bytes_eq_matches_slice_equality() {
        let a: Vec<u8> = (0..80u8).collect();
        for n in 0..80 {
            assert!(bytes_eq(&a[..n], &a[..n]));
            assert!(!bytes_eq(&a[..n], &a[..n + 1]));
            for flip in 0..n {
                let mut b = a[..n].to_vec();
                b[flip] ^= 0x80;
                assert!(!bytes_eq(&a[..n], &b), "n={n} flip={flip}");
            }
        }
    }

    fn store() -> Store {
        Store::builder().memory_limit(4 << 20).build().unwrap()
    }

    fn get(s: &Store, key: &[u8], now: RelTime) -> Option<(Vec<u8>, u32, u64)> {
        s.get(key, now, |it| (it.value.to_vec(), it.flags, it.cas))
            .hit()
    }

    fn set(s: &Store, key: &[u8], value: &[u8]) -> StoreOutcome {
        s.store(StoreMode::Set, key, 0, 0, value, NOW)
    }

    #[test]
    fn store_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Store>();
    }

    /// Where the index points for `key`.
    fn entry_of(s: &Store, key: &[u8]) -> Option<u64> {
        let h = hash_key(s.seed, key);
        let shard = s.shard_for(h).lock();
        shard
            .table
            .find_map(h, |e| s.key_eq(e, key).then_some(e))
            .map(|(_, e)| e)
    }

    #[test]
    fn every_stored_key_may_exist_to_a_peek_and_is_overwritten_in_place() {
        // Enough keys that some sit further along their probe path than a peek looks
        // (one in a few thousand): those must read as "maybe", never as absent, or a
        // set of them would write a new item instead of overwriting.
        let n = if cfg!(miri) { 300 } else { 60_000u32 };
        let s = Store::builder().memory_limit(8 << 20).build().unwrap();
        let keys: Vec<Vec<u8>> = (0..n).map(|k| format!("k{k}").into_bytes()).collect();
        for k in &keys {
            s.store(StoreMode::Set, k, 0, 0, b"v1", 1);
        }
        let mut maybe = 0;
        for k in &keys {
            let p = s.prefetch_record(s.hash(k), k.len());
            assert!(p.may_exist(), "{:?}", String::from_utf8_lossy(k));
            maybe += usize::from(p.cell == Peeked::MAYBE.cell);
        }
        let before = s.stats();
        for k in &keys {
            s.store(StoreMode::Set, k, 0, 0, b"v2", 2);
        }
        let after = s.stats();
        assert_eq!(after.segments_used, before.segments_used, "{maybe} maybe");
        assert_eq!(
            (after.bytes, after.curr_items),
            (before.bytes, before.curr_items)
        );
        assert_eq!(get(&s, &keys[0], 3).map(|g| g.0), Some(b"v2".to_vec()));
    }

    #[test]
    fn peek_carries_the_record_and_only_its_own_store_trusts_it() {
        let a = store();
        let b = store();
        assert_ne!(a.id, b.id);
        for s in [&a, &b] {
            s.store(StoreMode::Set, b"first", 3, 0, b"at entry 0", 1);
            s.store(StoreMode::Set, b"key", 3, 0, b"value", 1);
        }
        // The first item's entry is 0, which the check under the lock cannot tell from an
        // empty slot: its peek carries no record, and the lookup searches the bucket.
        let first = a.prefetch_record(a.hash(b"first"), 5);
        assert!(first.rec.is_null() && first.may_exist());
        assert_eq!(
            a.get_hashed(
                b"first",
                a.hash(b"first"),
                first,
                1,
                Call(|i: ItemRef<'_>| i.value.to_vec())
            ),
            Lookup::Hit(b"at entry 0".to_vec())
        );
        let peek = |s: &Store| {
            let p = s.prefetch_record(s.hash(b"key"), 3);
            assert!(!p.rec.is_null() && p.store == s.id);
            p
        };
        let read = |s: &Store, p: Peeked| {
            s.get_hashed(
                b"key",
                s.hash(b"key"),
                p,
                1,
                Call(|i: ItemRef<'_>| i.value.to_vec()),
            )
        };
        // Each store reads its own record through its own peek, and the other's peek
        // is ignored (the bucket is searched), even where it points at the same slot.
        let (pa, pb) = (peek(&a), peek(&b));
        assert_eq!(read(&a, pa), Lookup::Hit(b"value".to_vec()));
        assert_eq!(read(&b, pa), Lookup::Hit(b"value".to_vec()));
        // A peek gone stale (the key rewritten elsewhere) is not trusted either.
        a.store(StoreMode::Set, b"key", 3, 0, b"longer value", 1);
        assert_eq!(read(&a, pa), Lookup::Hit(b"longer value".to_vec()));
        a.delete(b"key", 1);
        assert_eq!(read(&a, pa), Lookup::Miss);
        assert_eq!(read(&b, pb), Lookup::Hit(b"value".to_vec()));
    }

    #[test]
    fn peek_located_before_the_table_grows_still_finds_every_key() {
        // Keys located (bucket array and bucket kept) while the table is small, then
        // enough keys stored to grow it several times before the peeks and lookups:
        // each peek reads an array the table has outgrown, and each lookup still
        // finds its key (or its absence) under the lock.
        let n = if cfg!(miri) { 40 } else { 2_000u32 };
        let s = Store::builder().memory_limit(8 << 20).build().unwrap();
        let keys: Vec<Vec<u8>> = (0..n).map(|k| format!("key-{k}").into_bytes()).collect();
        for k in keys.iter().step_by(2) {
            s.store(StoreMode::Set, k, 0, 0, k, 1);
        }
        let hashes: Vec<KeyHash> = keys.iter().map(|k| s.hash(k)).collect();
        let located: Vec<Located<'_>> = hashes.iter().map(|&h| s.locate(h)).collect();
        for i in 0..8 * n {
            let k = format!("grow-{i}");
            s.store(StoreMode::Set, k.as_bytes(), 0, 0, b"g", 1);
        }
        for (i, k) in keys.iter().enumerate() {
            let p = s.prefetch_located(located[i], hashes[i], k.len());
            let got = s.get_hashed(
                k,
                hashes[i],
                p,
                1,
                Call(|it: ItemRef<'_>| it.value.to_vec()),
            );
            let want = if i % 2 == 0 {
                Lookup::Hit(k.clone())
            } else {
                Lookup::Miss
            };
            assert_eq!(got, want, "{}", String::from_utf8_lossy(k));
        }
    }

    #[test]
    fn overwrite_in_place_rewrites_value_flags_and_header() {
        let s = store();
        let (_, c1) = s.store_cas(StoreMode::Set, b"key", 7, 0, b"first", 1);
        let e1 = entry_of(&s, b"key");
        let (_, c2) = s.store_cas(StoreMode::Set, b"key", 9, 40, b"again", 2);
        let e2 = entry_of(&s, b"key");
        assert_eq!(e1, e2, "written over the old item");
        assert!(c2 > c1);
        assert_eq!(get(&s, b"key", 3), Some((b"again".to_vec(), 9, c2)));
        assert_eq!(get(&s, b"key", 40), None, "the new exptime");
        // Another length: a new item elsewhere.
        s.store(StoreMode::Set, b"key", 9, 0, b"longer", 3);
        let e3 = entry_of(&s, b"key");
        assert_ne!(e3, e2);
        assert_eq!(get(&s, b"key", 3).map(|g| g.0), Some(b"longer".to_vec()));
    }

    #[test]
    fn set_then_get() {
        let s = store();
        assert_eq!(s.get(b"k", NOW, |_| ()), Lookup::Miss);
        assert_eq!(
            s.store(StoreMode::Set, b"k", 7, 0, b"hello", NOW),
            StoreOutcome::Stored
        );
        let (v, flags, cas) = get(&s, b"k", NOW).unwrap();
        assert_eq!((v.as_slice(), flags), (&b"hello"[..], 7));
        assert!(cas > 0);
        assert_eq!(s.get(b"k", NOW, |it| it.key.to_vec()).hit().unwrap(), b"k");
        assert_eq!(set(&s, b"k", b""), StoreOutcome::Stored);
        assert_eq!(get(&s, b"k", NOW).unwrap().0, b"");
        let st = s.stats();
        assert_eq!((st.curr_items, st.total_items), (1, 2));
        assert_eq!(st.bytes, item::item_len(1, 0, false) as u64);
    }

    #[test]
    fn add_outcomes() {
        let s = store();
        assert_eq!(
            s.store(StoreMode::Add, b"k", 0, 0, b"1", NOW),
            StoreOutcome::Stored
        );
        assert_eq!(
            s.store(StoreMode::Add, b"k", 0, 0, b"2", NOW),
            StoreOutcome::NotStored
        );
        assert_eq!(get(&s, b"k", NOW).unwrap().0, b"1");
        // An expired item does not block add.
        s.store(StoreMode::Set, b"e", 0, NOW, b"old", NOW - 1);
        assert_eq!(
            s.store(StoreMode::Add, b"e", 0, 0, b"new", NOW),
            StoreOutcome::Stored
        );
        assert_eq!(get(&s, b"e", NOW).unwrap().0, b"new");
        assert_eq!(s.stats().curr_items, 2);
    }

    #[test]
    fn replace_outcomes() {
        let s = store();
        assert_eq!(
            s.store(StoreMode::Replace, b"k", 0, 0, b"1", NOW),
            StoreOutcome::NotStored
        );
        assert_eq!(get(&s, b"k", NOW), None);
        set(&s, b"k", b"1");
        assert_eq!(
            s.store(StoreMode::Replace, b"k", 3, 0, b"2", NOW),
            StoreOutcome::Stored
        );
        assert_eq!(get(&s, b"k", NOW).unwrap().0, b"2");
        assert_eq!(get(&s, b"k", NOW).unwrap().1, 3);
    }

    #[test]
    fn cas_outcomes() {
        let s = store();
        assert_eq!(
            s.store(StoreMode::Cas(1), b"k", 0, 0, b"1", NOW),
            StoreOutcome::NotFound
        );
        let (out, cas) = s.store_cas(StoreMode::Set, b"k", 0, 0, b"1", NOW);
        assert_eq!(out, StoreOutcome::Stored);
        assert_eq!(get(&s, b"k", NOW).unwrap().2, cas);
        assert_eq!(
            s.store(StoreMode::Cas(cas + 100), b"k", 0, 0, b"2", NOW),
            StoreOutcome::Exists
        );
        let (out, cas2) = s.store_cas(StoreMode::Cas(cas), b"k", 0, 0, b"3", NOW);
        assert_eq!(out, StoreOutcome::Stored);
        assert!(cas2 > cas);
        assert_eq!(
            s.store(StoreMode::Cas(cas), b"k", 0, 0, b"4", NOW),
            StoreOutcome::Exists
        );
        assert_eq!(get(&s, b"k", NOW).unwrap().0, b"3");
        // cas on an expired item is NotFound.
        s.store(StoreMode::Set, b"e", 0, NOW, b"x", NOW - 1);
        let c = s.get(b"e", NOW - 1, |it| it.cas).hit().unwrap();
        assert_eq!(
            s.store(StoreMode::Cas(c), b"e", 0, 0, b"y", NOW),
            StoreOutcome::NotFound
        );
    }

    #[test]
    fn append_prepend_keep_flags_and_exptime() {
        let s = store();
        assert_eq!(
            s.store(StoreMode::Append, b"k", 0, 0, b"x", NOW),
            StoreOutcome::NotStored
        );
        assert_eq!(
            s.store(StoreMode::Prepend, b"k", 0, 0, b"x", NOW),
            StoreOutcome::NotStored
        );
        let (_, c0) = s.store_cas(StoreMode::Set, b"k", 42, NOW + 10, b"mid", NOW);
        let (out, c1) = s.store_cas(StoreMode::Append, b"k", 1, 0, b">>", NOW);
        assert_eq!(out, StoreOutcome::Stored);
        assert!(c1 > c0);
        assert_eq!(
            s.store(StoreMode::Prepend, b"k", 2, 0, b"<<", NOW),
            StoreOutcome::Stored
        );
        let (v, flags, c2) = get(&s, b"k", NOW).unwrap();
        assert_eq!((v.as_slice(), flags), (&b"<<mid>>"[..], 42));
        assert!(c2 > c1);
        // The exptime was kept: gone at NOW + 10.
        assert_eq!(s.get(b"k", NOW + 10, |_| ()), Lookup::Expired);
        assert_eq!(s.stats().curr_items, 0);
    }

    #[test]
    fn append_too_large_is_not_stored() {
        let s = Store::builder()
            .memory_limit(4 << 20)
            .item_size_max(2048)
            .build()
            .unwrap();
        let big = vec![b'a'; 1500];
        assert_eq!(
            s.store(StoreMode::Set, b"k", 0, 0, &big, NOW),
            StoreOutcome::Stored
        );
        assert_eq!(
            s.store(StoreMode::Append, b"k", 0, 0, &big, NOW),
            StoreOutcome::NotStored
        );
        assert_eq!(get(&s, b"k", NOW).unwrap().0.len(), 1500);
    }

    #[test]
    fn too_large_follows_memcached_rule() {
        let s = Store::builder()
            .memory_limit(4 << 20)
            .item_size_max(2048)
            .build()
            .unwrap();
        let max = 2048 - MEMCACHED_ITEM_OVERHEAD_BYTES - 1;
        assert!(s.item_fits(1, max, 0));
        assert!(!s.item_fits(1, max + 1, 0));
        assert!(!s.item_fits(1, max, 5), "non-zero flags cost 4 bytes");
        assert!(!s.item_fits(0, 1, 0));
        assert!(!s.item_fits(256, 1, 0));
        assert_eq!(
            s.store(StoreMode::Set, b"k", 0, 0, &vec![0; max], NOW),
            StoreOutcome::Stored
        );
        assert_eq!(
            s.store(StoreMode::Set, b"k", 0, 0, &vec![0; max + 1], NOW),
            StoreOutcome::TooLarge
        );
        // The default store takes a value of almost 1 MiB.
        let d = store();
        let v = vec![7u8; (1 << 20) - 100];
        assert_eq!(
            d.store(StoreMode::Set, b"big", 0, 0, &v, NOW),
            StoreOutcome::Stored
        );
        assert_eq!(get(&d, b"big", NOW).unwrap().0, v);
    }

    #[test]
    fn cas_ids_are_unique_and_increasing() {
        let s = store();
        let mut last = 0;
        for i in 0..100u32 {
            let key = format!("k{}", i % 7);
            let (out, cas) = s.store_cas(StoreMode::Set, key.as_bytes(), 0, 0, b"v", NOW);
            assert_eq!(out, StoreOutcome::Stored);
            assert!(cas > last);
            last = cas;
        }
        assert!(matches!(
            s.incr_decr(b"k0", 1, true, NOW),
            ArithOutcome::NonNumeric
        ));
        set(&s, b"n", b"1");
        let before = get(&s, b"n", NOW).unwrap().2;
        assert_eq!(s.incr_decr(b"n", 1, true, NOW), ArithOutcome::Value(2));
        assert!(get(&s, b"n", NOW).unwrap().2 > before);
    }

    #[test]
    fn delete_and_touch() {
        let s = store();
        assert!(!s.delete(b"k", NOW));
        assert!(!s.touch(b"k", 0, NOW));
        set(&s, b"k", b"v");
        assert!(s.touch(b"k", NOW + 5, NOW));
        assert!(get(&s, b"k", NOW + 4).is_some());
        assert_eq!(s.get(b"k", NOW + 5, |_| ()), Lookup::Expired);
        set(&s, b"k", b"v");
        assert!(s.delete(b"k", NOW));
        assert!(!s.delete(b"k", NOW));
        assert_eq!(get(&s, b"k", NOW), None);
        assert_eq!(s.stats().curr_items, 0);
        assert_eq!(s.stats().bytes, 0);
    }

    #[test]
    fn expiry_rules() {
        let s = store();
        s.store(StoreMode::Set, b"never", 0, 0, b"v", NOW);
        s.store(StoreMode::Set, b"soon", 0, NOW + 1, b"v", NOW);
        s.store(StoreMode::Set, b"past", 0, NOW, b"v", NOW);
        assert!(get(&s, b"never", u32::MAX).is_some());
        assert!(get(&s, b"soon", NOW).is_some());
        assert_eq!(s.get(b"soon", NOW + 1, |_| ()), Lookup::Expired);
        assert_eq!(s.get(b"soon", NOW + 1, |_| ()), Lookup::Miss);
        assert_eq!(s.get(b"past", NOW, |_| ()), Lookup::Expired);
        assert!(!s.touch(b"past", 0, NOW));
    }

    #[test]
    fn get_and_touch_sets_exptime_first() {
        let s = store();
        assert_eq!(s.get_and_touch(b"k", 0, NOW, |_| ()), Lookup::Miss);
        s.store(StoreMode::Set, b"k", 0, NOW + 1, b"v", NOW);
        let got = s.get_and_touch(b"k", NOW + 50, NOW, |it| it.value.to_vec());
        assert_eq!(got, Lookup::Hit(b"v".to_vec()));
        assert!(get(&s, b"k", NOW + 49).is_some());
        assert_eq!(s.get_and_touch(b"k", 0, NOW + 50, |_| ()), Lookup::Expired);
        // gat with exptime 0 makes the item permanent.
        s.store(StoreMode::Set, b"p", 0, NOW + 1, b"v", NOW);
        assert!(s.get_and_touch(b"p", 0, NOW, |_| ()).is_hit());
        assert!(get(&s, b"p", NOW + 1000).is_some());
    }

    fn value_of(s: &Store, key: &[u8]) -> Vec<u8> {
        get(s, key, NOW).unwrap().0
    }

    #[test]
    fn incr_decr_edges() {
        let s = store();
        assert_eq!(s.incr_decr(b"n", 1, true, NOW), ArithOutcome::NotFound);
        s.store(StoreMode::Set, b"n", 9, NOW + 100, b"100", NOW);
        assert_eq!(s.incr_decr(b"n", 1, false, NOW), ArithOutcome::Value(99));
        assert_eq!(value_of(&s, b"n"), b"99 ");
        assert_eq!(s.incr_decr(b"n", 1, true, NOW), ArithOutcome::Value(100));
        assert_eq!(value_of(&s, b"n"), b"100");
        assert_eq!(s.incr_decr(b"n", 900, true, NOW), ArithOutcome::Value(1000));
        assert_eq!(
            value_of(&s, b"n"),
            b"1000",
            "longer result: exactly the digits"
        );
        assert_eq!(get(&s, b"n", NOW).unwrap().1, 9, "flags kept");
        assert_eq!(
            s.get(b"n", NOW + 100, |_| ()),
            Lookup::Expired,
            "exptime kept"
        );

        s.store(StoreMode::Set, b"n", 0, 0, b"5", NOW);
        assert_eq!(s.incr_decr(b"n", 10, false, NOW), ArithOutcome::Value(0));
        assert_eq!(value_of(&s, b"n"), b"0");

        s.store(StoreMode::Set, b"n", 0, 0, b"18446744073709551615", NOW);
        assert_eq!(s.incr_decr(b"n", 2, true, NOW), ArithOutcome::Value(1));
        assert_eq!(value_of(&s, b"n"), b"1                   ");
        assert_eq!(s.incr_decr(b"n", 1, true, NOW), ArithOutcome::Value(2));

        s.store(StoreMode::Set, b"n", 0, 0, b"  7  ", NOW);
        assert_eq!(s.incr_decr(b"n", 1, true, NOW), ArithOutcome::Value(8));
        assert_eq!(value_of(&s, b"n"), b"8    ");

        for bad in [
            &b"-5"[..],
            b"",
            b"abc",
            b"12a",
            b"   ",
            b"99999999999999999999999",
        ] {
            s.store(StoreMode::Set, b"bad", 0, 0, bad, NOW);
            assert_eq!(
                s.incr_decr(b"bad", 1, true, NOW),
                ArithOutcome::NonNumeric,
                "{bad:?}"
            );
            assert_eq!(value_of(&s, b"bad"), bad);
        }
    }

    #[test]
    fn flush_all_immediate() {
        let s = store();
        set(&s, b"a", b"1");
        set(&s, b"b", b"2");
        s.flush_all(NOW, NOW);
        assert_eq!(s.get(b"a", NOW, |_| ()), Lookup::Flushed);
        assert_eq!(s.get(b"a", NOW, |_| ()), Lookup::Miss);
        assert_eq!(
            s.store(StoreMode::Replace, b"b", 0, 0, b"x", NOW),
            StoreOutcome::NotStored
        );
        // memcached's server passes `now - 1` for an immediate flush: items stored later in
        // the same second have a newer time and CAS id, so they survive.
        s.flush_all(NOW - 1, NOW);
        set(&s, b"c", b"3");
        assert!(get(&s, b"c", NOW).is_some());
        assert!(get(&s, b"c", NOW + 10).is_some());
        assert_eq!(s.sweep_expired(NOW, 100).unlinked, 0);
    }

    #[test]
    fn flush_all_delayed() {
        let s = store();
        set(&s, b"a", b"1");
        s.flush_all(NOW + 10, NOW);
        assert!(get(&s, b"a", NOW + 9).is_some());
        s.store(StoreMode::Set, b"b", 0, 0, b"2", NOW + 5);
        s.store(StoreMode::Set, b"c", 0, 0, b"3", NOW + 11);
        assert_eq!(s.get(b"a", NOW + 10, |_| ()), Lookup::Flushed);
        assert_eq!(s.get(b"b", NOW + 10, |_| ()), Lookup::Flushed);
        assert!(get(&s, b"c", NOW + 11).is_some());
    }

    #[test]
    fn flush_consumes_a_cas_id() {
        let s = store();
        let (_, c1) = s.store_cas(StoreMode::Set, b"a", 0, 0, b"1", NOW);
        s.flush_all(NOW - 1, NOW);
        let (_, c2) = s.store_cas(StoreMode::Set, b"a", 0, 0, b"1", NOW);
        assert_eq!(c2, c1 + 2);
        s.flush_all(NOW + 100, NOW);
        let (_, c3) = s.store_cas(StoreMode::Set, b"a", 0, 0, b"1", NOW);
        assert_eq!(c3, c2 + 1, "a delayed flush takes no CAS id");
    }

    #[test]
    fn sweep_unlinks_expired_items() {
        let s = store();
        for i in 0..1000u32 {
            let exp = if i % 2 == 0 { NOW + 1 } else { 0 };
            s.store(
                StoreMode::Set,
                format!("k{i}").as_bytes(),
                0,
                exp,
                b"v",
                NOW,
            );
        }
        assert_eq!(s.sweep_expired(NOW, 10_000).unlinked, 0);
        assert_eq!(s.sweep_expired(NOW + 1, 100).unlinked, 100);
        let mut total = 100;
        for _ in 0..100 {
            total += s.sweep_expired(NOW + 1, 10_000).unlinked;
        }
        assert_eq!(total, 500);
        let st = s.stats();
        assert_eq!(st.curr_items, 500);
        assert_eq!(st.expired_unfetched, 500);
        assert_eq!(st.reclaimed, 500);
        s.reset_stats();
        let st = s.stats();
        assert_eq!((st.curr_items, st.total_items, st.reclaimed), (500, 0, 0));
    }

    /// With large pages, items fill, are read from and are evicted out of segments in
    /// the one mapping as from heap segments. Not under Miri (no `mmap`); skipped on a
    /// kernel without transparent huge pages.
    #[test]
    #[cfg_attr(miri, ignore)]
    fn large_page_store_stores_reads_and_evicts() {
        let s = match Store::builder()
            .memory_limit(4 << 20)
            .large_pages(true)
            .build()
        {
            Ok(s) => s,
            Err(e) if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists() => {
                eprintln!("skipped: {e}");
                return;
            }
            Err(e) => panic!("{e}"),
        };
        assert!(s.large_pages());
        assert!(!store().large_pages());
        let value = vec![b'v'; 1000];
        // Ten times the memory: every segment is filled and evicted several times.
        let n = 40_000u32;
        for k in 0..n {
            let mut v = value.clone();
            v[..4].copy_from_slice(&k.to_le_bytes());
            assert_eq!(
                set(&s, format!("k{k}").as_bytes(), &v),
                StoreOutcome::Stored
            );
        }
        let stats = s.stats();
        assert_eq!(stats.segments_used, stats.segments_total);
        assert!(stats.evictions > 0);
        let mut hits = 0;
        for k in 0..n {
            if let Some((v, _, _)) = get(&s, format!("k{k}").as_bytes(), NOW) {
                assert_eq!(&v[..4], &k.to_le_bytes());
                assert_eq!(v.len(), value.len());
                hits += 1;
            }
        }
        // The newest items (about 4 MiB of them) are all there.
        assert!(hits > 2_000, "{hits}");
        assert!(get(&s, format!("k{}", n - 1).as_bytes(), NOW).is_some());
    }

    /// `cache_memlimit`: a higher limit lets the store use more segments, a lower one
    /// brings the segments in use down as items are written, the newest items stay
    /// readable throughout, and a limit past the table's room is refused.
    #[test]
    fn memory_limit_rises_and_falls_at_run_time() {
        let mib = 1 << 20;
        let s = Store::builder().memory_limit(4 * mib).build().unwrap();
        assert_eq!(s.segment_size(), mib);
        let value = vec![b'v'; 2000];
        let mut next = 0u32;
        let mut write = |mb: usize| {
            let end = next + (mb * mib / value.len()) as u32;
            while next < end {
                let mut v = value.clone();
                v[..4].copy_from_slice(&next.to_le_bytes());
                assert_eq!(
                    set(&s, format!("k{next}").as_bytes(), &v),
                    StoreOutcome::Stored
                );
                next += 1;
            }
            next
        };
        let newest_readable = |s: &Store, last: u32, n: u32| {
            for k in last - n..last {
                let (v, _, _) = get(s, format!("k{k}").as_bytes(), NOW)
                    .unwrap_or_else(|| panic!("k{k} missing"));
                assert_eq!(&v[..4], &k.to_le_bytes());
            }
        };
        write(16);
        assert_eq!(s.stats().segments_used, 4);
        assert!(s.set_memory_limit(12 * mib));
        assert_eq!(s.stats().limit_maxbytes, 12 << 20);
        assert_eq!(s.stats().segments_total, 12);
        let last = write(32);
        assert_eq!(s.stats().segments_used, 12);
        // 10 MiB of the newest items: more than the old limit could hold.
        newest_readable(&s, last, (10 * mib / value.len()) as u32);
        assert!(s.set_memory_limit(3 * mib));
        assert_eq!(s.stats().segments_total, 3);
        assert_eq!(
            s.stats().segments_used,
            12,
            "nothing is given back until items are written"
        );
        let last = write(16);
        assert_eq!(s.stats().segments_used, 3);
        newest_readable(&s, last, (mib / value.len()) as u32);
        // Room for four times the starting limit, or 1024 segments.
        assert!(s.set_memory_limit(1024 * mib));
        assert!(!s.set_memory_limit(1025 * mib));
        assert_eq!(s.stats().limit_maxbytes, 1024 << 20);
        // Writes take segments again, the retired ones included: 3 in use, plus about 17
        // for 16 MiB of values and their headers.
        write(16);
        let used = s.stats().segments_used;
        assert!((18..=21).contains(&used), "{used} segments in use");
    }

    /// A dump shows every live item once, whatever the budget per call, and skips expired
    /// and deleted ones.
    #[test]
    fn dump_shows_every_live_item_once() {
        let s = Store::builder().memory_limit(16 << 20).build().unwrap();
        let n = if cfg!(miri) { 50 } else { 5_000u32 };
        for k in 0..n {
            let exptime = if k % 10 == 3 { NOW + 1 } else { 0 };
            let v = format!("v{k}");
            s.store(
                StoreMode::Set,
                format!("k{k}").as_bytes(),
                k,
                exptime,
                v.as_bytes(),
                NOW,
            );
        }
        for k in (0..n).filter(|k| k % 10 == 7) {
            s.delete(format!("k{k}").as_bytes(), NOW);
        }
        let later = NOW + 2;
        for budget in [1, 37, 100_000] {
            let mut cursor = crate::DumpCursor::default();
            let mut seen = std::collections::HashMap::new();
            let mut calls = 0;
            loop {
                calls += 1;
                let more = s.dump(&mut cursor, later, budget, |it| {
                    let k: u32 = std::str::from_utf8(&it.key[1..]).unwrap().parse().unwrap();
                    assert_eq!(it.flags, k);
                    assert_eq!(it.value_len, format!("v{k}").len());
                    assert_eq!(it.exptime, 0);
                    assert!(!it.fetched);
                    *seen.entry(k).or_insert(0) += 1;
                });
                if !more {
                    break;
                }
            }
            let live: Vec<u32> = (0..n).filter(|k| k % 10 != 3 && k % 10 != 7).collect();
            assert_eq!(seen.len(), live.len(), "budget {budget}");
            assert!(
                live.iter().all(|k| seen.get(k) == Some(&1)),
                "budget {budget}"
            );
            assert!(budget > 1000 || calls > 1);
        }
    }

    #[test]
    fn builder_validates() {
        assert_eq!(
            Store::builder().item_size_max(10).build().err(),
            Some(BuildError::ItemSizeTooSmall(10))
        );
        assert!(Store::builder().item_size_max(2 << 30).build().is_err());
        let s = Store::builder().memory_limit(1).build().unwrap();
        assert_eq!(s.stats().segments_total, 2);
        let s = Store::builder()
            .item_size_max(4 << 20)
            .memory_limit(64 << 20)
            .shards(100)
            .build()
            .unwrap();
        assert_eq!(s.segment_size(), 4 << 20);
        assert_eq!(s.stats().segments_total, 16);
        assert_eq!(s.shards.len(), 128);
        assert_eq!(s.stats().segments_used, 0, "segments are allocated lazily");
    }

    #[test]
    fn a_closed_segment_refuses_pins_until_reopened() {
        let s = Store::builder().memory_limit(2 << 20).build().unwrap();
        let st = s.store(StoreMode::Set, b"k", 0, 0, b"some value", 1);
        assert_eq!(st, StoreOutcome::Stored);
        let pin_k = || {
            s.get(b"k", 1, |it| s.pin(it.origin, it.value))
                .hit()
                .flatten()
        };
        let p = pin_k().expect("pinned");
        assert_eq!(s.pinned(&p), b"some value");
        let seg = p.seg;
        assert!(s.has_pins(seg));
        assert!(!s.close_to_pins(seg), "a pinned segment cannot be closed");
        s.unpin(p);
        assert!(!s.has_pins(seg));
        assert!(s.close_to_pins(seg));
        assert!(pin_k().is_none(), "closed: the caller copies instead");
        assert!(!s.has_pins(seg), "the refused pin was given back");
        s.reopen_to_pins(seg);
        let p = pin_k().expect("pinned again");
        s.unpin(p);
    }
}
