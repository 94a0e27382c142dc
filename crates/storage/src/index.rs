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
//! The table (`table.rs`) stores only the 8-byte entry; the key lives in the segment and
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

/// Seeded 64-bit hash of a key: 8 bytes at a time, multiply-rotate, then a
/// MurmurHash3 `fmix64` finaliser so that every output bit depends on every input bit
/// (the shard uses bits 40 and up, the table the low bits and the top 7).
///
/// The last word overlaps the one before it rather than being padded, so no
/// byte-by-byte copy (a `memcpy` call) is needed; the length is mixed in first, so
/// keys of different lengths stay apart.
#[inline(always)]
pub(crate) fn hash_key(seed: u64, key: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let round = |h: u64, w: u64| (h ^ w).wrapping_mul(K).rotate_left(31);
    let n = key.len();
    let mut h = seed ^ (n as u64).wrapping_mul(K);
    if n > 8 {
        let word = |i: usize| u64::from_le_bytes(key[i..i + 8].try_into().unwrap());
        // The words at 0, 8, 16, ... while more than 8 bytes follow them, then the last
        // 8 bytes. Keys of up to 24 bytes (most) take their two or three rounds without
        // the loop.
        h = round(h, word(0));
        if n > 16 {
            h = round(h, word(8));
            let mut i = 16;
            while i + 8 < n {
                h = round(h, word(i));
                i += 8;
            }
        }
        h = round(h, word(n - 8));
    } else if n == 8 {
        h = round(h, u64::from_le_bytes(key[..8].try_into().unwrap()));
    } else if n >= 4 {
        let half = |i: usize| u64::from(u32::from_le_bytes(key[i..i + 4].try_into().unwrap()));
        h = round(h, half(0) | half(n - 4) << 32);
    } else if n > 0 {
        let w = u64::from(key[0]) | u64::from(key[n / 2]) << 8 | u64::from(key[n - 1]) << 16;
        h = round(h, w);
    }
    fmix64(h)
}

#[inline]
fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h
}

/// Per-shard counters, kept under the shard lock.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ShardStats {
    pub curr_items: u64,
    pub bytes: u64,
    pub total_items: u64,
    pub evictions: u64,
    pub expired_unfetched: u64,
    pub evicted_unfetched: u64,
    pub reclaimed: u64,
    pub items_retained: u64,
}

/// One shard of the index.
pub(crate) struct Shard {
    pub table: IndexTable,
    pub stats: ShardStats,
    /// Where the expiry sweep resumes in this shard's bucket array.
    pub sweep_bucket: usize,
}

/// A shard on its own cache lines, so neighbouring locks do not false-share.
#[repr(align(128))]
pub(crate) struct ShardSlot(SpinMutex<Shard>);

impl ShardSlot {
    pub fn new() -> ShardSlot {
        ShardSlot(SpinMutex::new(Shard {
            table: IndexTable::new(),
            stats: ShardStats::default(),
            sweep_bucket: 0,
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
            let mask = (1usize << (published as usize & 63)) - 1;
            bucket = h as usize & mask;
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
            return Peek::Absent;
        }
        // SAFETY: only `ShardRef::locate` makes a non-null one, from a word its hint
        // published, with `bucket` masked to that array's length; the table keeps the
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

    /// The plain form of [`hash_key`]: every word while more than 8 bytes follow it,
    /// then the last 8 bytes.
    fn hash_key_loop(seed: u64, key: &[u8]) -> u64 {
        const K: u64 = 0x9E37_79B9_7F4A_7C15;
        let round = |h: u64, w: u64| (h ^ w).wrapping_mul(K).rotate_left(31);
        let n = key.len();
        let mut h = seed ^ (n as u64).wrapping_mul(K);
        if n < 8 {
            return hash_key(seed, key);
        }
        let word = |i: usize| u64::from_le_bytes(key[i..i + 8].try_into().unwrap());
        let mut i = 0;
        while i + 8 < n {
            h = round(h, word(i));
            i += 8;
        }
        fmix64(round(h, word(n - 8)))
    }

    #[test]
    fn unrolled_hash_is_the_loop_form() {
        let bytes: Vec<u8> = (0..300u32).map(|i| (i * 37 + 11) as u8).collect();
        for n in 8..=bytes.len() {
            for seed in [0, 1, 0x5EED_5EED_5EED_5EED] {
                assert_eq!(
                    hash_key(seed, &bytes[..n]),
                    hash_key_loop(seed, &bytes[..n]),
                    "{n}"
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
