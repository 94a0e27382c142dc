//! [`StoreBuilder`]: a store's configuration, checked and turned into a [`Store`].

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use super::{store_budget, FlushState, Padded, Store, MAX_SHARDS};
use crate::index::{Hint, ShardSlot};
use crate::pool::{GroupSlot, PoolState, SegmentMeta};
use crate::segment::LargePageRegion;
use crate::{BuildError, Policy};

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

pub use crate::memcached::{MEMCACHED_CAS_BYTES, MEMCACHED_ITEM_OVERHEAD_BYTES};

const SEGMENT_ROUND_BYTES: usize = 4096;

/// How far `cache_memlimit` may raise the limit. memcached accepts any limit from 8 MiB
/// to 10^9 MiB and takes memory as items need it; this store's table of segments (64
/// bytes a segment, one cache line each; their memory taken on first use) is sized at
/// start. It reaches this many times the starting limit...
const MEMLIMIT_GROWTH: usize = 4;

/// ...or the host's physical memory, past which a larger limit could never be filled,
/// whichever is more; but by at most this many segments (256 GiB of 1 MiB segments, 16 MiB
/// of table)...
const MEMLIMIT_MAX_EXTRA: usize = 1 << 18;

/// ...and to this many segments in any case.
const MEMLIMIT_MIN_CAPACITY: usize = 1024;

/// The host's physical memory (`MemTotal` in /proc/meminfo), where there is one.
fn physical_memory_bytes() -> Option<usize> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Consuming builder for [`Store`]: `Store::builder().memory_limit(bytes).build()?`.
#[derive(Clone, Debug)]
pub struct StoreBuilder {
    memory_limit: usize,
    item_size_max: usize,
    policy: Policy,
    shards: Option<usize>,
    large_pages: bool,
    memcached_cas: bool,
    lock_memory: bool,
    classes: crate::ClassConfig,
    flash: Option<crate::FlashConfig>,
    hash_seed: Option<u64>,
}

impl StoreBuilder {
    /// Bytes of item memory (memcached `-m`, default 64 MiB). At least two segments are
    /// always made, so a tiny limit is rounded up to two segments.
    pub fn memory_limit(mut self, bytes: usize) -> Self {
        self.memory_limit = bytes;
        self
    }

    /// memcached's slab classes to count items by (`stats items`, `stats slabs`); the
    /// default is memcached's `-f 1.25 -n 48`.
    pub fn slab_classes(mut self, cfg: crate::ClassConfig) -> Self {
        self.classes = cfg;
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
    /// with [`StoreOutcome::NoMemory`](crate::StoreOutcome::NoMemory)): the default
    /// policy, or [`Policy::NoEviction`].
    pub fn evictions(mut self, enabled: bool) -> Self {
        self.policy = Policy::evicting(enabled);
        self
    }

    /// How room is made when memory is full (default [`Policy::FifoSecondChance`]).
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
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
    /// A flash tier (memcached's `-o ext_path=...`): values of items leaving RAM go to
    /// these files and their keys stay as stubs (`flash.rs`). Opening the files is part
    /// of [`StoreBuilder::build`], whose error then says which file failed and why.
    pub fn flash(mut self, cfg: Option<crate::FlashConfig>) -> Self {
        self.flash = cfg;
        self
    }

    /// Fix the seed of the key hash, which places keys in shards and buckets. By default
    /// each store draws one at random, so that no client can choose keys that collide.
    /// A fixed seed makes a measurement repeatable: with 1 000 keys, one seed's bucket
    /// collisions and shard spread move a get by up to 2 % of its instructions against
    /// another's (`scripts/instr-gate`).
    pub fn hash_seed(mut self, seed: Option<u64>) -> Self {
        self.hash_seed = seed;
        self
    }

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
        // Segments of `-m` itself size the shards and groups; the store may fill the
        // budget's 5 % more (`store_budget`).
        let raw_count = (self.memory_limit / segment_size).max(2);
        let count = (store_budget(self.memory_limit) / segment_size).max(2);
        if count > u32::MAX as usize {
            return Err(BuildError::MemoryTooLarge(self.memory_limit));
        }
        // Room for `cache_memlimit` to raise the limit later: the table of segments costs
        // 64 bytes a segment, and their memory is only taken on first use. A
        // large-page store's mapping is sized at start, so it cannot grow.
        let capacity = if self.large_pages {
            count
        } else {
            let host = physical_memory_bytes().unwrap_or(0) / segment_size;
            let extra = (count * (MEMLIMIT_GROWTH - 1)).max(host.saturating_sub(count));
            (count + extra.min(MEMLIMIT_MAX_EXTRA))
                .max(MEMLIMIT_MIN_CAPACITY)
                .min(u32::MAX as usize)
        };
        let shards = match self.shards {
            Some(n) => n.clamp(1, MAX_SHARDS).next_power_of_two(),
            None => raw_count.next_power_of_two().clamp(16, 256),
        };
        let groups = (raw_count / 8).clamp(1, 8);
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
        let flash = match &self.flash {
            Some(cfg) => Some(crate::Flash::open(cfg).map_err(BuildError::Flash)?),
            None => None,
        };
        let (policy, sealed) = crate::policy::build(self.policy, count);
        static STORES: AtomicU64 = AtomicU64::new(0);
        let classes = crate::SlabClasses::memcached(&self.classes);
        Ok(Store {
            seed: AtomicU64::new(
                self.hash_seed
                    .unwrap_or_else(|| RandomState::new().hash_one(0x5EED_u64)),
            ),
            id: STORES.fetch_add(1, Ordering::Relaxed) + 1,
            shards: (0..shards).map(|_| ShardSlot::new(classes.len())).collect(),
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
                sealed,
                provisioned: count,
                limit: count,
            }),
            groups: (0..groups).map(|_| GroupSlot::new()).collect(),
            policy,
            memory_limit: AtomicUsize::new(self.memory_limit),
            outside: AtomicUsize::new(0),
            item_size_max: self.item_size_max,
            item_overhead: MEMCACHED_ITEM_OVERHEAD_BYTES
                - if self.memcached_cas {
                    0
                } else {
                    MEMCACHED_CAS_BYTES
                },
            lock_memory: self.lock_memory,
            cas: Padded(AtomicU64::new(0)),
            time_log: crate::time_log::TimeLog::new(),
            flush: Padded(FlushState {
                oldest_live: AtomicU32::new(0),
                oldest_cas: AtomicU64::new(0),
            }),
            sweep_shard: AtomicUsize::new(0),
            large_pages,
            classes,
            eviction_sink: std::sync::OnceLock::new(),
            direct_reclaims: AtomicU64::new(0),
            flash,
            stub_bytes: std::sync::atomic::AtomicI64::new(0),
        })
    }
}

impl Store {
    /// Start configuring a store (defaults: memcached's `-m 64 -I 1m`, evictions on).
    pub fn builder() -> StoreBuilder {
        StoreBuilder {
            memory_limit: DEFAULT_MEMORY_LIMIT_BYTES,
            item_size_max: DEFAULT_ITEM_SIZE_MAX_BYTES,
            policy: Policy::default(),
            shards: None,
            large_pages: false,
            memcached_cas: true,
            lock_memory: false,
            classes: crate::ClassConfig::default(),
            flash: None,
            hash_seed: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Store;

    #[test]
    fn a_fixed_hash_seed_is_the_seed_and_the_default_is_drawn_per_store() {
        let fixed = || {
            Store::builder()
                .memory_limit(4 << 20)
                .hash_seed(Some(42))
                .build()
                .unwrap()
        };
        assert_eq!(fixed().seed(), 42);
        assert_eq!(fixed().seed(), fixed().seed());
        let drawn = || {
            Store::builder()
                .memory_limit(4 << 20)
                .build()
                .unwrap()
                .seed()
        };
        assert_ne!(drawn(), drawn());
    }
}
