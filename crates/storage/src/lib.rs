//! ferrocache's storage engine: a segment log of items plus a sharded hash index.
//!
//! It knows nothing about the memcached protocol or sockets; the server calls it with
//! keys, values and a clock (`now`, seconds of server uptime).
//!
//! A tour of the layout, from the top down (a module names only those below it):
//!
//! | module           | what it owns                                                      |
//! |------------------|-------------------------------------------------------------------|
//! | [`meta`]         | meta-protocol operations: items held under the lock, stale/win bits |
//! | `evict`          | reservations, the policy's steps to room carried out, the walks    |
//! | `sweep`          | walks of the index: the expiry sweep, crawls, `metadump`           |
//! | [`store`]        | [`Store`]: the struct, its shards and segments, stats, value pins  |
//! | `store::builder` | [`StoreBuilder`] and the size limits it checks                     |
//! | `store::read`    | get, gat, the prefetched multi-get stages, the locked search       |
//! | `store::write`   | the storage commands, delete, touch, incr/decr, flush, publishing  |
//! | `store::record`  | the accessors of records in segment memory, each taking its proof  |
//! | `index`          | the sharded hash index: a locked `Shard` around an `IndexTable`    |
//! | `table`          | one shard's table: 7 entries and their tags per 64-byte bucket     |
//! | `pool`           | the segment pool: free list, sealed segments, writer groups        |
//! | `policy`         | [`Policy`]: a writer's steps to room, what a walk keeps, the keep  |
//! |                  | budgets, the read mark's meaning, the queue of sealed segments     |
//! | `pin`            | value pins' types: values read in place after the lookup           |
//! | `segment`        | raw segment memory shared between threads                          |
//! | `spin`           | the shard lock's raw lock                                          |
//! | `item`           | the packed item header (byte layout diagram lives there)           |
//! | `arith`          | memcached incr/decr number parsing and formatting                  |
//! | `time_log`       | from CAS ids to seconds: each second's first id, thinned by age    |
//! | [`classes`]      | memcached's slab classes, a lens for statistics only               |
//! | [`flash`]        | the flash tier's files, pages and records (memcached's extstore)   |
//! | [`memcached`]    | memcached's item sizes, for its size rule and per-class counters   |
//!
//! `unsafe` code lives in `segment` (segment memory, and records read at an address
//! carried from a lock-free peek), `table` (its bucket arrays, and the lock-free peek of
//! one), `spin` (the lock) and `store::record`, the one place that reads or writes a
//! record's bytes: its accessors take the lock's proof (`index::LockHeld`, borrowed from
//! the locked shard) or the writer's `Reservation`, so their callers need no `unsafe`. The
//! few others (`index`'s peeks, `evict`'s claim of a sealed segment and release of a
//! retired one's pages, `store`'s unchecked shard index, `store::image`'s reads and
//! writes of a frozen store's segment bytes, `flash::file`'s `flock` and
//! `posix_fallocate`) say why in their `SAFETY` comments.
//!
//! The design (segment log, locking protocol, eviction, per-item byte cost) is written up
//! in `docs/design.md` at the workspace root.
//!
//! ```
//! use storage::{Lookup, Store, StoreMode, StoreOutcome};
//!
//! let store = Store::builder().memory_limit(8 << 20).build().unwrap();
//! let now = 1; // seconds of server uptime
//! assert_eq!(store.store(StoreMode::Set, b"greeting", 0, 0, b"hello", now), StoreOutcome::Stored);
//! let mut out = Vec::new();
//! let hit = store.get(b"greeting", now, |item| out.extend_from_slice(item.value));
//! assert_eq!(hit, Lookup::Hit(()));
//! assert_eq!(out, b"hello");
//! ```

mod arith;
pub mod classes;
mod evict;
pub mod flash;
mod index;
mod item;
pub mod memcached;
pub mod meta;
mod pin;
mod policy;
mod pool;
mod segment;
mod spin;
pub mod store;
mod sweep;
mod table;
mod time_log;

pub use classes::{ClassConfig, SlabClasses};
pub use flash::{Flash, FlashConfig, FlashStats, FlashTunables};
pub use index::{ClassStats, Located};
pub use item::StubLoc;
pub use meta::{ItemMut, MetaArith, MetaStore};
pub use pin::{Origin, ValuePin};
pub use policy::Policy;
pub use store::{
    Evicted, EvictionSink, FlashAction, ImageError, ImageHead, ImageSource, ImageSummary, KeyHash,
    Peeked, Store, StoreBuilder, Visit, MEMCACHED_CAS_BYTES, PREFETCH_DISTANCE,
};
pub use sweep::Crawl;

/// Seconds of server uptime. The server's clock starts at 1, so 0 never means "now".
/// As an exptime, 0 means "never expires".
pub type RelTime = u32;

/// A view of a stored item, valid only inside the callback that receives it: the value
/// is borrowed straight from segment memory while the item's index shard is locked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ItemRef<'a> {
    /// The item's key: its bytes in the segment, or, from a lookup, the caller's key
    /// that the lookup found equal to them. Only `value` is ever pinned in place.
    pub key: &'a [u8],
    /// The item's value (data block, without the trailing `\r\n`).
    pub value: &'a [u8],
    /// The client flags given when the item was stored.
    pub flags: u32,
    /// The item's CAS unique id.
    pub cas: u64,
    /// Where the bytes live: lets [`Store::pin`] keep the value in place after the
    /// callback returns. [`Origin::DETACHED`] for bytes built outside the store.
    pub origin: Origin,
}

/// Where a walk over the index ([`Store::dump`], [`Store::crawl`]) resumes;
/// `DumpCursor::default()` starts one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DumpCursor {
    pub(crate) shard: usize,
    pub(crate) position: usize,
}

impl DumpCursor {
    /// The current shard's positions up to `end` have been walked, of `positions`:
    /// resume after them, or at the next shard's start.
    pub(crate) fn walked(&mut self, end: usize, positions: usize) {
        if end >= positions {
            self.shard += 1;
            self.position = 0;
        } else {
            self.position = end;
        }
    }
}

/// What one step of an expired-item sweep ([`Store::sweep_expired`], [`Store::crawl`])
/// did: items looked at, and how many of them it unlinked because they had expired or
/// were flushed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Swept {
    pub checked: usize,
    pub unlinked: usize,
}

/// One live item as [`Store::dump`] shows it, valid only inside the callback.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DumpItem<'a> {
    pub key: &'a [u8],
    pub value_len: usize,
    pub flags: u32,
    /// When it expires (server-relative seconds; 0: never).
    pub exptime: RelTime,
    /// When it was last stored (server-relative seconds).
    pub time: RelTime,
    pub cas: u64,
    /// Whether it was read since it was stored (memcached's `ITEM_FETCHED`).
    pub fetched: bool,
    /// Its memcached slab class (`classes.rs`).
    pub class: usize,
}

/// The result of a lookup. `Expired` and `Flushed` are misses too; they are told apart
/// so that the server can count `get_expired` and `get_flushed`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup<R> {
    /// The item is live; the value is what the callback returned.
    Hit(R),
    /// No item under this key.
    Miss,
    /// The item had expired (it has now been unlinked).
    Expired,
    /// The item was invalidated by `flush_all` (it has now been unlinked).
    Flushed,
}

impl<R> Lookup<R> {
    /// The callback's result on a hit.
    pub fn hit(self) -> Option<R> {
        match self {
            Lookup::Hit(r) => Some(r),
            _ => None,
        }
    }

    /// True on a hit.
    pub fn is_hit(&self) -> bool {
        matches!(self, Lookup::Hit(_))
    }
}

/// Which memcached storage command a [`Store::store`] call carries out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreMode {
    /// Store unconditionally.
    Set,
    /// Store only if no live item exists.
    Add,
    /// Store only if a live item exists.
    Replace,
    /// Add the data after the existing value (flags and exptime are kept).
    Append,
    /// Add the data before the existing value (flags and exptime are kept).
    Prepend,
    /// Store only if the live item's CAS id equals the one given.
    Cas(u64),
}

/// The outcome of a [`Store::store`] call, one variant per memcached reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreOutcome {
    /// `STORED`
    Stored,
    /// `NOT_STORED`: add found an item, or replace/append/prepend found none.
    NotStored,
    /// `EXISTS`: cas found an item with another CAS id.
    Exists,
    /// `NOT_FOUND`: cas found no item.
    NotFound,
    /// `SERVER_ERROR out of memory storing object`: evictions are disabled and memory is full.
    NoMemory,
    /// `SERVER_ERROR object too large for cache`: the item can never fit a segment.
    TooLarge,
}

/// The outcome of [`Store::incr_decr`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArithOutcome {
    /// The new value.
    Value(u64),
    /// No live item under the key.
    NotFound,
    /// The stored value is not an unsigned decimal number.
    NonNumeric,
    /// A longer value had to be stored and memory is full (evictions disabled).
    NoMemory,
}

/// Engine statistics, named after memcached's `stats` fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Live items.
    pub curr_items: u64,
    /// Items stored since start (or the last `stats reset`).
    pub total_items: u64,
    /// Bytes of live items: header + key + value.
    pub bytes: u64,
    /// Live items dropped to make room.
    pub evictions: u64,
    /// Expired items reclaimed that had never been fetched.
    pub expired_unfetched: u64,
    /// Evicted items that had never been fetched.
    pub evicted_unfetched: u64,
    /// Times the space of an expired item was reclaimed (by eviction or the sweeper).
    pub reclaimed: u64,
    /// The memory limit in bytes (memcached `-m`).
    pub limit_maxbytes: u64,
    /// Segments in use (holding data, or open for writing).
    pub segments_used: u64,
    /// Segments in the pool.
    pub segments_total: u64,
    /// Size of one segment in bytes.
    pub segment_size: u64,
    /// Live items kept by the second-chance rule when their segment was evicted.
    pub items_retained: u64,
    /// Bytes of RAM the index takes (every shard's bucket array).
    pub index_bytes: u64,
    /// What segments and index together may take: 1.05 x the memory limit, less what
    /// [`Store::charge_outside`] last charged.
    pub budget_bytes: u64,
    /// What [`Store::charge_outside`] last charged.
    pub outside_bytes: u64,
    /// Evicted items that had been read since their segment was last walked.
    pub evicted_active: u64,
    /// Segments evicted by writers to make room.
    pub direct_reclaims: u64,
    /// Segments the memory limit allows that hold nothing yet.
    pub free_segments: u64,
}

/// Why [`StoreBuilder::build`] refused a configuration.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BuildError {
    /// The item size limit is below the smallest useful item.
    #[error("item size limit of {0} bytes is too small (at least {min} bytes)", min = store::MIN_ITEM_SIZE_MAX_BYTES)]
    ItemSizeTooSmall(usize),
    /// The item size limit is above what the item header can describe.
    #[error("item size limit of {0} bytes is too large (at most {max} bytes)", max = store::MAX_ITEM_SIZE_MAX_BYTES)]
    ItemSizeTooLarge(usize),
    /// More segments than the index entry can address.
    #[error("memory limit of {0} bytes needs more segments than the index can address")]
    MemoryTooLarge(usize),
    /// Large pages were asked for (memcached `-L`) and the kernel refused them.
    #[error("cannot map item memory for large pages: {0}")]
    LargePages(String),
    /// A flash file could not be opened, locked or allocated (the message says which).
    #[error("{0}")]
    Flash(String),
}
