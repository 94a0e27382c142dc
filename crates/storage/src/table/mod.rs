//! The index table of one shard: packed item locations in cache-line buckets.
//!
//! ```text
//!  bucket (64 bytes, one cache line)
//!  ┌──────────────────────────┬──────────┬────────────────────────────────────┐
//!  │ tags[7]: 0 = empty,      │ overflow │ slots[7]: u64 item locations       │
//!  │ else 0x80 | hash >> 57   │ (u8)     │ (segment << 32 | offset)           │
//!  └──────────────────────────┴──────────┴────────────────────────────────────┘
//!  bucket array: len = m << e buckets (m odd, at most 7), 512-byte aligned
//!  home bucket = (hash as u32) * len >> 32; a full home spills into the next bucket,
//!  and so on, from the last bucket back to the first
//! ```
//!
//! Why not hashbrown: its control bytes and its slots are two arrays, so one lookup of
//! a key not in cache misses twice before it reaches the item, and nothing outside the
//! table can know where either line is. Here the tags and the slots share one line whose
//! address is `base + home * 64`, so a multi-get can prefetch the buckets of all its
//! keys before it takes the first shard lock.
//!
//! Positions ([`Pos`]) are `bucket * 8 + slot`; they stay valid until the next insert
//! (which may grow the table) and are what the expiry sweep walks.
//!
//! | file        | what it owns                                                        |
//! |-------------|---------------------------------------------------------------------|
//! | `mod.rs`    | [`IndexTable`]: the entry API, inserts, slots read by position       |
//! | `bucket.rs` | one bucket's words (atomics), a hash's tag and home bucket           |
//! | `probe.rs`  | the probe path: search, and the overflow counts insert and remove keep |
//! | `array.rs`  | bucket arrays: lengths, allocation, growth, the published word, bytes |
//! | `peek.rs`   | lock-free peeks from a published word, and their check under the lock |
//! | `image.rs`  | a table's buckets as a memory image saves them, and rebuilt from them |
//!
//! The `unsafe` is `array.rs`'s (the arrays' own allocation) and `peek.rs`'s (reads of
//! a bucket without the lock), tested under Miri.

use std::sync::atomic::Ordering::Relaxed;

mod array;
mod bucket;
mod image;
mod peek;
mod probe;

use array::Buckets;
use bucket::SLOTS;

pub(crate) use array::{index_bytes, Published};
pub(crate) use bucket::Bucket;
pub(crate) use image::{placement_probe, BUCKET_WORDS};
pub(crate) use peek::{home, peek, peek_from, prefetch_address, Cell, Peek};

/// How a growing table finds the hash of an entry it holds (by reading the entry's key),
/// and where to ask for that key ahead of time.
pub(crate) trait Rehash {
    /// The hash of entry `e`'s key.
    fn hash(&self, e: u64) -> u64;
    /// Start loading what [`Rehash::hash`] of `e` will read; a hint only.
    fn prefetch(&self, _e: u64) {}
}

impl<F: Fn(u64) -> u64> Rehash for F {
    fn hash(&self, e: u64) -> u64 {
        self(e)
    }
}

/// A position in the table: `bucket * 8 + slot`.
pub(crate) type Pos = usize;

/// One shard's table of index entries (see the module documentation).
pub(crate) struct IndexTable {
    buckets: Buckets,
    /// Every bucket array this table outgrew. A [`peek`] may still be reading one, so
    /// they live as long as the table; the large ones hold no memory (see `grow`).
    /// (A boxed slice rather than a `Vec`, so that a shard still fits two cache lines.)
    retired: Box<[Buckets]>,
    items: usize,
    /// Set when the buckets move (growth), until [`IndexTable::take_moved`].
    moved: bool,
}

impl IndexTable {
    pub fn new() -> IndexTable {
        IndexTable {
            buckets: Buckets::new(0),
            retired: Box::new([]),
            items: 0,
            moved: false,
        }
    }

    /// Entries in the table.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.items
    }

    /// Whether the buckets moved since the last call (then the published word is stale).
    #[inline]
    pub fn take_moved(&mut self) -> bool {
        // Written only when set: a lookup's unlock then only reads it.
        if self.moved {
            self.moved = false;
            return true;
        }
        false
    }

    /// The entry at `pos`, if that slot is in use.
    #[inline]
    pub fn get(&self, pos: Pos) -> Option<u64> {
        let bucket = self.buckets.get(pos / 8)?;
        let s = pos % 8;
        (s < SLOTS && bucket.tag(s) != 0).then(|| bucket.slot(s))
    }

    /// Point the used slot at `pos` to `e` (same key, new location); returns the old
    /// entry.
    #[inline]
    pub fn replace(&mut self, pos: Pos, e: u64) -> u64 {
        let bucket = &self.buckets[pos / 8];
        debug_assert!(bucket.tag(pos % 8) != 0);
        // A load and a store, not a swap: only the lock holder writes, and a swap
        // would be a locked instruction.
        let old = bucket.slot(pos % 8);
        bucket.cell(pos % 8).store(e, Relaxed);
        old
    }

    /// Positions there may be, for a walk over every slot with [`IndexTable::get`].
    pub fn positions(&self) -> usize {
        self.buckets.len() * 8
    }

    /// Insert `e`, whose key hashes to `h` and is not in the table. May grow the table,
    /// re-hashing every entry with `hasher`. Returns the new entry's position.
    pub fn insert_unique(&mut self, h: u64, e: u64, hasher: impl Rehash) -> Pos {
        self.reserve_one(hasher);
        self.place(h, e)
    }

    /// Make room for one more entry, so that the next [`IndexTable::place`] does not
    /// need to grow.
    pub fn reserve_one(&mut self, hasher: impl Rehash) {
        if self.items + 1 > self.buckets.len() * (SLOTS - 1) {
            self.grow(hasher);
        }
    }

    /// The entry for `h` and `eq`, or room to insert one (the table grows first if it
    /// must, so that [`VacantEntry::insert`] never does).
    pub fn entry(&mut self, h: u64, eq: impl FnMut(u64) -> bool, hasher: impl Rehash) -> Entry<'_> {
        match self.find(h, eq) {
            Some((pos, _)) => Entry::Occupied(OccupiedEntry {
                table: self,
                pos,
                h,
            }),
            None => {
                self.reserve_one(hasher);
                Entry::Vacant(VacantEntry { table: self, h })
            }
        }
    }

    /// The entry for `h` and `eq`, to read, replace or remove.
    pub fn find_entry(&mut self, h: u64, eq: impl FnMut(u64) -> bool) -> Option<OccupiedEntry<'_>> {
        let (pos, _) = self.find(h, eq)?;
        Some(OccupiedEntry {
            table: self,
            pos,
            h,
        })
    }

    /// Entries in the table.
    pub fn items(&self) -> usize {
        self.items
    }
}

/// A found entry or a free place for one; [`IndexTable::entry`].
pub(crate) enum Entry<'a> {
    Occupied(OccupiedEntry<'a>),
    Vacant(VacantEntry<'a>),
}

/// A used slot and the hash of its key.
pub(crate) struct OccupiedEntry<'a> {
    table: &'a mut IndexTable,
    pos: Pos,
    h: u64,
}

impl OccupiedEntry<'_> {
    #[inline]
    pub fn get(&self) -> u64 {
        self.table.buckets[self.pos / 8].slot(self.pos % 8)
    }

    /// Point the entry at a new location; returns the old one.
    #[inline]
    pub fn replace(&mut self, e: u64) -> u64 {
        self.table.replace(self.pos, e)
    }

    /// Remove the entry; returns it.
    #[inline]
    pub fn remove(self) -> u64 {
        self.table.remove(self.pos, self.h)
    }
}

/// Room for one entry of hash `h`, already reserved.
pub(crate) struct VacantEntry<'a> {
    table: &'a mut IndexTable,
    h: u64,
}

impl VacantEntry<'_> {
    #[inline]
    pub fn insert(self, e: u64) -> Pos {
        self.table.place(self.h, e)
    }
}

/// What the tests of every part of the table share.
#[cfg(test)]
mod testing {
    /// Entries are their own "keys" here: the hash of entry `e` is `hash(e)`.
    pub(super) fn hash(e: u64) -> u64 {
        // A poor hash on purpose for some tests is built from this one by masking.
        let mut x = e.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        x ^= x >> 29;
        x.wrapping_mul(0xBF58_476D_1CE4_E5B9)
    }

    pub(super) fn xorshift(s: &mut u64) -> u64 {
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        *s
    }
}

#[cfg(test)]
mod tests {
    use super::bucket::{home_of, next_bucket, STICKY, TAG_BYTES};
    use super::testing::{hash, xorshift};
    use super::*;
    use std::collections::HashMap;
    use std::ptr;

    /// Random inserts, lookups and removals against a `HashMap`, with a hash that only
    /// has `bits` bits of those the home bucket uses (the top of the low 32), so that
    /// home buckets collide and chains form.
    fn churn(bits: u32, rounds: usize) {
        // Miri runs these too, a few thousand times slower.
        let rounds = if cfg!(miri) { rounds / 100 } else { rounds };
        let keep = if bits == 64 {
            u64::MAX
        } else {
            ((1u64 << bits) - 1) << (32 - bits)
        };
        // The tag comes from the top bits: keep some of them too so tags vary.
        let h = |e: u64| hash(e) & (keep | 0xFE00_0000_0000_0000);
        let mut t = IndexTable::new();
        let mut model: HashMap<u64, ()> = HashMap::new();
        let mut s = 0x9E37_79B9_7F4A_7C15u64 ^ u64::from(bits);
        for _ in 0..rounds {
            let r = xorshift(&mut s);
            let e = 1 + r % 4_000;
            match (r >> 32) % 3 {
                0 | 1 => {
                    if model.insert(e, ()).is_none() {
                        t.insert_unique(h(e), e, h);
                    }
                }
                _ => {
                    if let Some(o) = t.find_entry(h(e), |x| x == e) {
                        assert_eq!(o.remove(), e);
                        assert!(model.remove(&e).is_some());
                    } else {
                        assert!(!model.contains_key(&e));
                    }
                }
            }
            assert_eq!(t.len(), model.len());
        }
        for e in (1..=4_000u64).step_by(if cfg!(miri) { 97 } else { 1 }) {
            assert_eq!(
                t.find(h(e), |x| x == e).map(|(_, x)| x),
                model.contains_key(&e).then_some(e),
                "entry {e}"
            );
        }
        // Every used slot is a model entry, found again at its position.
        // `holds_at` agrees with `get` at every slot, and never confirms entry 0.
        let mut seen = 0;
        let mut held = Vec::new();
        for pos in (0..t.positions()).filter(|p| p % 8 < SLOTS) {
            let cell = t.cell_at(pos);
            if let Some(e) = t.get(pos) {
                assert!(model.contains_key(&e));
                assert_eq!(t.find(h(e), |x| x == e), Some((pos, e)));
                assert_eq!(t.holds_at(cell, e), Some(pos));
                assert_eq!(t.holds_at(cell, e + 1), None);
                held.push((cell, e));
                seen += 1;
            } else {
                assert_eq!(t.holds_at(cell, 0), None, "empty position {pos}");
            }
        }
        assert_eq!(seen, model.len());
        let any = held.first().map_or(1, |&(_, e)| e);
        // Cells of no array, and the first word past this one.
        let past = Cell(t.buckets.as_ptr() as usize + t.buckets.len() * 64 + 8);
        for cell in [Cell::NONE, Cell::OTHER, past] {
            assert!(t.holds_at(cell, any).is_none() && t.holds_at(cell, 0).is_none());
        }
        // Remove everything: every overflow count must come back to 0, and no removed
        // entry is held where it was.
        for &e in model.keys() {
            t.find_entry(h(e), |x| x == e).unwrap().remove();
        }
        assert!(held.iter().all(|&(cell, e)| t.holds_at(cell, e).is_none()));
        assert_eq!(t.len(), 0);
        assert!(t
            .buckets
            .iter()
            .all(|b| b.overflow() == 0 || b.overflow() == STICKY));
        assert!(t.buckets.iter().all(|b| b.tag_word() & TAG_BYTES == 0));
    }

    #[test]
    fn churn_with_a_good_hash() {
        churn(64, 40_000);
    }

    #[test]
    fn churn_with_colliding_home_buckets() {
        // Four home buckets at most (the first, and a quarter, half and three quarters
        // of the way): long spill chains, and wrap-around from the last.
        churn(2, 20_000);
    }

    #[test]
    fn churn_with_one_home_bucket() {
        // Every entry has the same home: counts pass 255 and stay sticky.
        churn(0, 6_000);
    }

    #[test]
    fn entry_api() {
        let mut t = IndexTable::new();
        assert!(t.find_entry(hash(5), |x| x == 5).is_none());
        match t.entry(hash(5), |x| x == 5, hash) {
            Entry::Vacant(v) => {
                v.insert(5);
            }
            Entry::Occupied(_) => panic!("empty table"),
        }
        // Same key (same hash and eq), new location.
        match t.entry(hash(5), |x| x == 5, hash) {
            Entry::Occupied(mut o) => assert_eq!(o.replace(5), 5),
            Entry::Vacant(_) => panic!("present"),
        }
        assert_eq!(t.first_candidate(hash(5)), Some(5));
        assert_eq!(
            t.find_map(hash(5), |x| (x == 5).then_some("five"))
                .map(|(_, r)| r),
            Some("five")
        );
        let word = t.published();
        assert!(!word.is_null());
        assert_eq!(word as usize & 511, 1, "one bucket: m = 1, e = 0");
        assert_eq!(home(word, hash(5)), 0);
        assert_eq!(prefetch_address(word, hash(5)), t.buckets.as_ptr() as usize);
        assert!(IndexTable::new().published().is_null());
        // SAFETY: null is always allowed.
        assert_eq!(unsafe { peek(ptr::null_mut(), hash(5)) }, Peek::ABSENT);
    }

    /// Many growth steps with removals between them: after each growth every overflow
    /// count is exactly the number of entries whose probe path passes its bucket, every
    /// entry is found where it is, and removing everything brings every count to 0.
    #[test]
    fn probe_accounting_stays_exact_across_growth() {
        let top = if cfg!(miri) { 700 } else { 60_000u64 };
        let mut t = IndexTable::new();
        let mut live: Vec<u64> = Vec::new();
        let mut s = 0xACC0_u64;
        let mut len = 0;
        let mut growths = 0;
        let check = |t: &IndexTable, live: &[u64]| {
            let n = t.buckets.len();
            let mut expect = vec![0u32; n];
            for &e in live {
                let (pos, x) = t.find(hash(e), |x| x == e).expect("live entry found");
                assert_eq!((x, t.get(pos)), (e, Some(e)));
                let mut b = home_of(hash(e), n);
                while b != pos / 8 {
                    expect[b] += 1;
                    b = next_bucket(b, n);
                }
            }
            for (b, &x) in expect.iter().enumerate() {
                assert!(x < u32::from(STICKY), "bucket {b}: {x}");
                assert_eq!(u32::from(t.buckets[b].overflow()), x, "bucket {b}");
            }
            assert_eq!(t.len(), live.len());
        };
        for e in 1..=top {
            t.insert_unique(hash(e), e, hash);
            live.push(e);
            // Remove one live entry in three, at random.
            if xorshift(&mut s) % 3 == 0 {
                let i = (xorshift(&mut s) % live.len() as u64) as usize;
                let gone = live.swap_remove(i);
                assert_eq!(
                    t.find_entry(hash(gone), |x| x == gone).unwrap().remove(),
                    gone
                );
                assert!(t.find(hash(gone), |x| x == gone).is_none());
            }
            if t.buckets.len() != len {
                len = t.buckets.len();
                growths += 1;
                check(&t, &live);
            }
        }
        check(&t, &live);
        assert!(growths >= if cfg!(miri) { 4 } else { 25 }, "{growths}");
        for &e in &live {
            t.find_entry(hash(e), |x| x == e).unwrap().remove();
        }
        assert_eq!(t.len(), 0);
        assert!(t.buckets.iter().all(|b| b.tag_word() == 0));
    }
}
