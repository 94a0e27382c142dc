//! The sharded hash index: key hash -> packed item location.
//!
//! ```text
//!  hash(key) ──bits 40..──> shard  (power of two, each its own cache line)
//!      │
//!      └─> ShardSlot { Mutex { IndexTable, per-shard counters }, prefetch hint }
//!                                    │
//!                                    └─ entry: u64 ─┬─ bits 63..32: segment id
//!                                                   └─ bits 31..0 : byte offset in the segment
//! ```
//!
//! The table (`table/`) stores only the 8-byte entry; the key lives in the segment and
//! is compared there (7-bit tags beside the entries filter out almost all non-matching
//! probes first). Rehashing on growth re-reads each key from its segment, under the
//! shard lock.
//!
//! Each slot also publishes, outside its lock, where its table's buckets are (updated
//! whenever a guard is dropped after the table moved). A multi-get reads that hint to
//! prefetch the buckets of all its keys before it locks anything; a stale hint only
//! makes a prefetch useless, never wrong.
//!
//! Statistics that change with items (`curr_items`, `bytes`, `evictions`, ...) are kept
//! per shard, under the same lock, so no global counter is touched per request.

use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicPtr, Ordering};

use crate::segment::prefetch_line;
use crate::spin::{SpinGuard, SpinMutex};
use crate::table::{self, Bucket, IndexTable, Peek, Published};

/// Pack a location into an index entry.
#[inline]
pub(crate) fn pack(seg: u32, off: u32) -> u64 {
    (u64::from(seg) << 32) | u64::from(off)
}

/// Unpack an index entry into (segment id, offset).
#[inline]
pub(crate) fn unpack(entry: u64) -> (u32, u32) {
    ((entry >> 32) as u32, entry as u32)
}

/// Seeded 64-bit hash of a key, built on the folded multiply: the 128-bit product of
/// two words, its halves xored, so that both halves of the result depend on every bit
/// of both words. A key of up to 16 bytes is read as two (overlapping) words; a longer
/// one folds 16 bytes at a time into the seed while more than 16 remain, then reads its
/// last 16 the same way. A last fold with the length mixes the pair.
///
/// A 20-byte key costs three multiplies and no shifts, well under the multiply-rotate
/// rounds and the MurmurHash3 finaliser this replaced (figures in docs/perf-notes.md).
/// The table uses the low 32 bits (bucket), bits 40 and up (shard) and the top 7 (tag).
///
/// The seed is drawn at random per store, so inputs that would zero one side of a fold
/// cannot be chosen from outside.
#[inline(always)]
pub(crate) fn hash_key(seed: u64, key: &[u8]) -> u64 {
    let n = key.len();
    let word = |i: usize| u64::from_le_bytes(key[i..i + 8].try_into().unwrap());
    let (a, b, s) = if n <= 16 {
        let (a, b) = if n >= 8 {
            (word(0), word(n - 8))
        } else if n >= 4 {
            let half = |i: usize| u64::from(u32::from_le_bytes(key[i..i + 4].try_into().unwrap()));
            (half(0), half(n - 4))
        } else if n > 0 {
            (
                u64::from(key[0]) << 16 | u64::from(key[n / 2]) << 8 | u64::from(key[n - 1]),
                0,
            )
        } else {
            (0, 0)
        };
        (a, b, seed)
    } else if n <= 32 {
        // The loop below, unrolled for the usual key lengths.
        let s = fold(word(0) ^ HASH_K1, word(8) ^ seed);
        (word(n - 16), word(n - 8), s)
    } else {
        let mut s = seed;
        let mut i = 0;
        while n - i > 16 {
            s = fold(word(i) ^ HASH_K1, word(i + 8) ^ s);
            i += 16;
        }
        (word(n - 16), word(n - 8), s)
    };
    fold(HASH_K2 ^ n as u64, fold(a ^ HASH_K1, b ^ s))
}

/// Odd constants with about half their bits set, for [`hash_key`].
const HASH_K1: u64 = 0x9E37_79B9_7F4A_7C15;
const HASH_K2: u64 = 0xC4CE_B9FE_1A85_EC53;

/// The folded multiply: the 128-bit product of `a` and `b`, its halves xored.
#[inline(always)]
fn fold(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ (p >> 64) as u64
}

/// Per-shard counters of one memcached slab class (`classes.rs`), kept under the shard
/// lock with the shard's other counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassStats {
    /// Live items, and their size as memcached counts it (`ITEM_ntotal`).
    pub items: u64,
    pub requested: u64,
    pub evicted: u64,
    /// Evicted items that had an exptime.
    pub evicted_nonzero: u64,
    pub evicted_unfetched: u64,
    /// Seconds between the last evicted item's last write and its eviction.
    pub evicted_time: u32,
    /// Expired or flushed items whose space was taken back (by eviction or a sweep).
    pub reclaimed: u64,
    pub expired_unfetched: u64,
    /// Evicted items that had been read since their segment was last walked (the
    /// second chance had no room left for them).
    pub evicted_active: u64,
    /// Items the second chance kept when their segment was evicted.
    pub retained: u64,
    /// Items `lru_crawler crawl` looked at, and reclaimed (also in `reclaimed`).
    pub crawler_checked: u64,
    pub crawler_reclaimed: u64,
}

impl ClassStats {
    /// Add `o`'s counts into `self`; `evicted_time` is the larger (any shard's last).
    pub fn add(&mut self, o: &ClassStats) {
        self.items += o.items;
        self.requested += o.requested;
        self.evicted += o.evicted;
        self.evicted_nonzero += o.evicted_nonzero;
        self.evicted_unfetched += o.evicted_unfetched;
        self.evicted_time = self.evicted_time.max(o.evicted_time);
        self.reclaimed += o.reclaimed;
        self.expired_unfetched += o.expired_unfetched;
        self.evicted_active += o.evicted_active;
        self.retained += o.retained;
        self.crawler_checked += o.crawler_checked;
        self.crawler_reclaimed += o.crawler_reclaimed;
    }

    /// The levels alone, as `stats reset` leaves them.
    #[must_use]
    pub fn levels(&self) -> ClassStats {
        ClassStats {
            items: self.items,
            requested: self.requested,
            ..ClassStats::default()
        }
    }
}

/// Per-shard counters, kept under the shard lock.
#[derive(Clone, Debug, Default)]
pub(crate) struct ShardStats {
    pub curr_items: u64,
    pub bytes: u64,
    pub total_items: u64,
    /// Per memcached slab class, indexed by class id - 1. The shard's evictions and
    /// reclaims are their sums, so that the shard stays within two cache lines.
    pub class: Box<[ClassStats]>,
}

impl ShardStats {
    /// Counters for `classes` classes, all zero.
    pub fn with_classes(classes: usize) -> ShardStats {
        ShardStats {
            class: vec![ClassStats::default(); classes].into_boxed_slice(),
            ..ShardStats::default()
        }
    }

    /// The counters of class `id` (1-based).
    #[inline]
    pub fn class_mut(&mut self, id: usize) -> &mut ClassStats {
        &mut self.class[id - 1]
    }
}

/// One shard of the index.
pub(crate) struct Shard {
    pub table: IndexTable,
    pub stats: ShardStats,
    /// Where the expiry sweep resumes in this shard's bucket array.
    pub sweep_bucket: usize,
    /// The proof that this shard's lock is held, for the record accessors.
    pub held: LockHeld,
}

/// Proof that a shard lock is held: a borrow of one can only be taken from a locked
/// [`Shard`], and lives no longer than the lock guard it came from.
///
/// The record accessors (`store::record`) take `&LockHeld` to read an indexed item and
/// `&mut LockHeld` to write one (rule 2 of the locking protocol in `docs/design.md`), so
/// the borrows they hand out end before the guard unlocks, and a written window
/// excludes every other record borrow made through the same shard. It is a field of its
/// own, not the whole `Shard`, so that it can be borrowed beside the table and the
/// counters. Zero-sized, and neither `Clone` nor constructible outside this module: the
/// only ones are inside the shards' locks.
pub(crate) struct LockHeld {
    _only_in_a_shard: (),
}

/// A shard on its own cache lines, so neighbouring locks do not false-share.
#[repr(align(128))]
pub(crate) struct ShardSlot(SpinMutex<Shard>);

impl ShardSlot {
    pub fn new(classes: usize) -> ShardSlot {
        ShardSlot(SpinMutex::new(Shard {
            table: IndexTable::new(),
            stats: ShardStats::with_classes(classes),
            sweep_bucket: 0,
            held: LockHeld {
                _only_in_a_shard: (),
            },
        }))
    }
}

/// Where one shard's table buckets are ([`IndexTable::published`] as of the last
/// unlock), readable without the lock. The hints of all shards sit in one small array
/// apart from the locks, so reading one rarely misses the cache.
#[derive(Default)]
pub(crate) struct Hint {
    published: AtomicPtr<Bucket>,
}

impl Hint {
    /// Without locking: the first entry on hash `h`'s probe path whose tag matches,
    /// and its position (or whether there was none); a guess to prefetch by and to
    /// check under the lock.
    #[inline]
    pub fn peek(&self, h: u64) -> Peek {
        // Acquire: pairs with the release in `ShardGuard::drop`, so the bucket array the
        // word names is seen initialised.
        let published = self.published.load(Ordering::Acquire);
        // SAFETY: hints exist only inside a `Store`, beside the shards whose tables publish
        // into them (in `ShardGuard::drop`), so the word is 0 or came from this shard's
        // table. That table keeps every bucket array it published until it is dropped,
        // which happens only with the store, and `self` borrows the store.
        unsafe { table::peek(published, h) }
    }
}

/// A shard and its hint.
#[derive(Clone, Copy)]
pub(crate) struct ShardRef<'a> {
    pub slot: &'a ShardSlot,
    pub hint: &'a Hint,
}

impl<'a> ShardRef<'a> {
    /// Without locking: the bytes of RAM the shard's index table holds, its bucket
    /// array and the small arrays it outgrew (see [`table::index_bytes`]), as of the
    /// last unlock after the table grew. Read from the hint's published word, which
    /// gives the array's length, so it costs neither the shard nor the lookups a field.
    #[inline]
    pub fn index_bytes(self) -> usize {
        // Relaxed: only the word's length bits are used; nothing is read through it.
        table::index_bytes(self.hint.published.load(Ordering::Relaxed))
    }

    /// Lock the shard. The lock does not poison: a panic while holding it (only possible
    /// through a bug or a panicking `get` callback) leaves the index consistent.
    #[inline]
    pub fn lock(self) -> ShardGuard<'a> {
        ShardGuard {
            guard: self.slot.0.lock(),
            hint: self.hint,
        }
    }

    /// Prefetch the shard's lock word and the table bucket where hash `h` starts,
    /// without locking, and say where the bucket is, for a [`Located::peek`]. Either
    /// may be stale; the lookup that follows is correct anyway.
    #[inline(always)]
    pub fn locate(self, h: u64) -> Located<'a> {
        prefetch_line(self.slot as *const ShardSlot as usize);
        // Acquire: the peek reads the array the word names (see `Hint::peek`).
        let published = self.hint.published.load(Ordering::Acquire);
        let mut bucket = 0;
        if !published.is_null() {
            bucket = table::home(published, h);
            prefetch_line(table::prefetch_address(published, h));
        }
        Located {
            published,
            bucket,
            hint: PhantomData,
        }
    }
}

/// Where a key's index bucket was when a multi-get prefetched it ([`ShardRef::locate`]):
/// the shard's published bucket array and the bucket's index in it, for the peek that
/// follows once the bucket has arrived. It borrows the store, so the array it names
/// (which its table keeps until the store drops) outlives it.
#[derive(Clone, Copy, Debug)]
pub struct Located<'a> {
    published: Published,
    bucket: usize,
    hint: PhantomData<&'a Hint>,
}

impl Located<'_> {
    /// Nothing located: a peek of it finds nothing.
    pub const NONE: Located<'static> = Located {
        published: std::ptr::null_mut(),
        bucket: 0,
        hint: PhantomData,
    };

    /// [`Hint::peek`] from the located bucket.
    #[inline(always)]
    pub(crate) fn peek(self, h: u64) -> Peek {
        if self.published.is_null() {
            return Peek::ABSENT;
        }
        // SAFETY: only `ShardRef::locate` makes a non-null one, from a word its hint
        // published, with `bucket` the home bucket in that array; the table keeps the
        // array until the store drops, and `self` borrows the store (see `Hint::peek`).
        unsafe { table::peek_from(self.published, self.bucket, h) }
    }
}

/// A locked shard. Dropping it publishes the table's new place if the table moved.
pub(crate) struct ShardGuard<'a> {
    guard: SpinGuard<'a, Shard>,
    hint: &'a Hint,
}

impl Deref for ShardGuard<'_> {
    type Target = Shard;
    #[inline]
    fn deref(&self) -> &Shard {
        &self.guard
    }
}

impl DerefMut for ShardGuard<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut Shard {
        &mut self.guard
    }
}

impl Drop for ShardGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        // Runs before `guard` unlocks, so hints change only under the lock.
        if self.guard.table.take_moved() {
            self.hint
                .published
                .store(self.guard.table.published(), Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_layout() {
        assert_eq!(std::mem::size_of::<u64>(), 8);
        assert_eq!(unpack(pack(7, 0xFFFF_FFF0)), (7, 0xFFFF_FFF0));
        assert_eq!(unpack(pack(u32::MAX, 0)), (u32::MAX, 0));
        assert_eq!(std::mem::align_of::<ShardSlot>(), 128);
        assert_eq!(std::mem::size_of::<ShardSlot>(), 128);
    }

    /// Every key length up to 300 hashes apart from its neighbours that differ in one
    /// byte, wherever the byte is: each byte reaches the result, across the read
    /// boundaries of short keys, the 16-byte folds and the overlapping last words.
    #[test]
    fn every_byte_of_every_length_counts() {
        let bytes: Vec<u8> = (0..300u32).map(|i| (i * 37 + 11) as u8).collect();
        for n in 1..=bytes.len() {
            let key = &bytes[..n];
            let h = hash_key(0x5EED_5EED_5EED_5EED, key);
            assert_ne!(h, hash_key(0x5EED_5EED_5EED_5EED, &bytes[..n - 1]), "{n}");
            for i in 0..n {
                let mut other = key.to_vec();
                other[i] ^= 1;
                assert_ne!(h, hash_key(0x5EED_5EED_5EED_5EED, &other), "{n} {i}");
            }
        }
    }

    /// Changing one input bit changes each output bit about half the time, for keys of
    /// the usual lengths: the bucket (low bits), shard (40 and up) and tag (top 7) bits
    /// all depend on the whole key.
    #[test]
    fn one_bit_flips_half_the_output() {
        for n in [
            1usize, 3, 4, 7, 8, 12, 16, 17, 20, 24, 31, 32, 33, 48, 64, 100,
        ] {
            let mut flips = [0u32; 64];
            let mut trials = 0u32;
            for k in 0..200u32 {
                let key: Vec<u8> = (0..n).map(|i| (k as usize * 131 + i * 7) as u8).collect();
                let h = hash_key(0x1234_5678_9ABC_DEF0, &key);
                for bit in 0..(8 * n).min(64) {
                    let mut other = key.clone();
                    other[bit / 8] ^= 1 << (bit % 8);
                    let d = h ^ hash_key(0x1234_5678_9ABC_DEF0, &other);
                    for (o, f) in flips.iter_mut().enumerate() {
                        *f += (d >> o & 1) as u32;
                    }
                    trials += 1;
                }
            }
            for (o, &f) in flips.iter().enumerate() {
                let p = f64::from(f) / f64::from(trials);
                assert!(
                    (0.4..0.6).contains(&p),
                    "length {n}, output bit {o}: {p:.3}"
                );
            }
        }
    }

    #[test]
    fn hash_depends_on_seed_and_every_byte() {
        let a = hash_key(1, b"key:0001");
        assert_ne!(a, hash_key(2, b"key:0001"));
        assert_ne!(a, hash_key(1, b"key:0002"));
        assert_ne!(hash_key(1, b"a"), hash_key(1, b"a\0"));
        assert_ne!(hash_key(1, b""), hash_key(1, b"\0"));
        assert_eq!(a, hash_key(1, b"key:0001"));
    }

    #[test]
    fn hash_spreads_over_shards() {
        let mut counts = [0u32; 64];
        for i in 0..64_000u32 {
            let h = hash_key(0, format!("key:{i}").as_bytes());
            counts[((h >> 40) & 63) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
    }
}
