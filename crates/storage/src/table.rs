//! The index table of one shard: packed item locations in cache-line buckets.
//!
//! ```text
//!  bucket (64 bytes, one cache line)
//!  ┌──────────────────────────┬──────────┬────────────────────────────────────┐
//!  │ tags[7]: 0 = empty,      │ overflow │ slots[7]: u64 item locations       │
//!  │ else 0x80 | hash >> 57   │ (u8)     │ (segment << 32 | offset)           │
//!  └──────────────────────────┴──────────┴────────────────────────────────────┘
//!  home bucket = hash & mask; a full home spills into the next bucket, and so on
//! ```
//!
//! Why not hashbrown: its control bytes and its slots are two arrays, so one lookup of
//! a key not in cache misses twice before it reaches the item, and nothing outside the
//! table can know where either line is. Here the tags and the slots share one line whose
//! address is `base + (hash & mask) * 64`, so a multi-get can prefetch the buckets of
//! all its keys before it takes the first lock (see [`ShardSlot`](crate::index)).
//!
//! Probing follows Folly's F14: an entry whose home bucket is full goes to the next
//! bucket with a free slot, and every bucket it passes counts one more `overflow`. A
//! lookup stops at the first bucket whose `overflow` is zero. Removing an entry walks
//! the same path and counts it back down, so chains shrink again under churn. A count
//! that reaches 255 stays there (it can no longer be counted down exactly) until the
//! table is rebuilt by growth; lookups past it are correct, only longer.
//!
//! The table grows (doubles) before an insert would take it past 6 of every 7 slots.
//! It never shrinks, as hashbrown did not. Growth re-hashes every entry through the
//! caller's `hasher`, which reads each key from its segment.
//!
//! Positions ([`Pos`]) are `bucket * 8 + slot`; they stay valid until the next insert
//! (which may grow the table) and are what the expiry sweep walks.

/// Entries per bucket.
const SLOTS: usize = 7;
/// The low seven tag bytes of a bucket's first word.
const TAG_BYTES: u64 = 0x00FF_FFFF_FFFF_FFFF;
const LOW7: u64 = 0x7F7F_7F7F_7F7F_7F7F;
const HIGH: u64 = 0x8080_8080_8080_8080;
/// `overflow` value that is no longer counted down.
const STICKY: u8 = u8::MAX;

/// A position in the table: `bucket * 8 + slot`.
pub(crate) type Pos = usize;

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Bucket {
    /// One tag per slot; 0 marks an empty slot.
    tags: [u8; SLOTS],
    /// Entries that passed this bucket because it (and maybe more) was full.
    overflow: u8,
    slots: [u64; SLOTS],
}

const EMPTY: Bucket = Bucket {
    tags: [0; SLOTS],
    overflow: 0,
    slots: [0; SLOTS],
};

impl Bucket {
    /// The tags and `overflow` as one little-endian word (byte 7 is `overflow`).
    #[inline(always)]
    fn tag_word(&self) -> u64 {
        let mut w = [0u8; 8];
        w[..SLOTS].copy_from_slice(&self.tags);
        w[SLOTS] = self.overflow;
        u64::from_le_bytes(w)
    }

    /// Slots whose tag equals `tag`, as a mask with bit 7 of byte `i` set for slot `i`.
    /// Exact per byte (no borrow between bytes), so an empty slot never matches a tag.
    #[inline(always)]
    fn matching(&self, tag: u8) -> u64 {
        zero_bytes(self.tag_word() ^ (u64::from(tag) * 0x0101_0101_0101_0101)) & TAG_BYTES
    }

    #[inline(always)]
    fn empty_slots(&self) -> u64 {
        zero_bytes(self.tag_word()) & TAG_BYTES
    }
}

/// Bit 7 set in exactly the bytes of `x` that are zero.
#[inline(always)]
fn zero_bytes(x: u64) -> u64 {
    !(((x & LOW7) + LOW7) | x | LOW7) & HIGH
}

/// The tag of a hash: its top seven bits, with bit 7 set so that it is never 0. The
/// bucket index uses the low bits and the shard bits 40 and up.
#[inline(always)]
fn tag_of(h: u64) -> u8 {
    0x80 | (h >> 57) as u8
}

/// Slot index of the lowest set bit of a [`Bucket::matching`] mask.
#[inline(always)]
fn first_slot(mask: u64) -> usize {
    mask.trailing_zeros() as usize / 8
}

/// One shard's table of index entries (see the module documentation).
pub(crate) struct IndexTable {
    buckets: Box<[Bucket]>,
    items: usize,
    /// Set when the buckets move (growth), until [`IndexTable::take_moved`].
    moved: bool,
}

impl IndexTable {
    pub fn new() -> IndexTable {
        IndexTable {
            buckets: Box::new([]),
            items: 0,
            moved: false,
        }
    }

    /// Entries in the table.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.items
    }

    #[inline(always)]
    fn mask(&self) -> usize {
        self.buckets.len().wrapping_sub(1)
    }

    /// Where the buckets live and the index mask, for lock-free prefetching: the
    /// address of the bucket of hash `h` is `base + (h & mask) * 64`. `base` is 0 while
    /// the table has no buckets.
    #[inline]
    pub fn prefetch_hint(&self) -> (usize, usize) {
        if self.buckets.is_empty() {
            (0, 0)
        } else {
            (self.buckets.as_ptr() as usize, self.mask())
        }
    }

    /// The entries whose tag matches hash `h`, with their positions, in probe order.
    /// Callers compare keys in their own loop over it, where the comparison inlines.
    #[inline(always)]
    pub fn candidates(&self, h: u64) -> Candidates<'_> {
        let mask = self.mask();
        let tag = tag_of(h);
        let b = h as usize & mask;
        Candidates {
            table: self,
            tag,
            bucket: b,
            matches: self.buckets.get(b).map_or(0, |bucket| bucket.matching(tag)),
            // Sticky counts could in theory mark every bucket: never look at one twice.
            left: self.buckets.len(),
        }
    }

    /// The first entry for hash `h` for which `f` returns `Some`, with its position.
    /// `f` sees only entries whose tag matches `h`.
    #[inline(always)]
    pub fn find_map<R>(&self, h: u64, mut f: impl FnMut(u64) -> Option<R>) -> Option<(Pos, R)> {
        self.candidates(h)
            .find_map(|(pos, e)| f(e).map(|r| (pos, r)))
    }

    /// The first entry of hash `h` for which `eq` holds.
    #[inline]
    pub fn find(&self, h: u64, mut eq: impl FnMut(u64) -> bool) -> Option<(Pos, u64)> {
        self.find_map(h, |e| eq(e).then_some(e))
    }

    /// Whether the buckets moved since the last call (then the prefetch hint is stale).
    #[inline]
    pub fn take_moved(&mut self) -> bool {
        std::mem::take(&mut self.moved)
    }

    /// The first entry whose tag matches `h`, without comparing keys: what a lookup of
    /// `h` will most likely read next, for prefetching.
    #[inline]
    pub fn first_candidate(&self, h: u64) -> Option<u64> {
        self.find_map(h, Some).map(|(_, e)| e)
    }

    /// The entry at `pos`, if that slot is in use.
    #[inline]
    pub fn get(&self, pos: Pos) -> Option<u64> {
        let bucket = self.buckets.get(pos / 8)?;
        let s = pos % 8;
        (s < SLOTS && bucket.tags[s] != 0).then(|| bucket.slots[s])
    }

    /// Point the used slot at `pos` to `e` (same key, new location); returns the old
    /// entry.
    #[inline]
    pub fn replace(&mut self, pos: Pos, e: u64) -> u64 {
        let bucket = &mut self.buckets[pos / 8];
        debug_assert!(bucket.tags[pos % 8] != 0);
        std::mem::replace(&mut bucket.slots[pos % 8], e)
    }

    /// Positions there may be, for a walk over every slot with [`IndexTable::get`].
    pub fn positions(&self) -> usize {
        self.buckets.len() * 8
    }

    /// Remove the entry at `pos`, whose key hashes to `h`; returns it.
    pub fn remove(&mut self, pos: Pos, h: u64) -> u64 {
        let mask = self.mask();
        let (at, s) = (pos / 8, pos % 8);
        let bucket = &mut self.buckets[at];
        debug_assert!(bucket.tags[s] == tag_of(h));
        let e = bucket.slots[s];
        bucket.tags[s] = 0;
        bucket.slots[s] = 0;
        let mut b = h as usize & mask;
        while b != at {
            let over = &mut self.buckets[b].overflow;
            if *over != STICKY {
                debug_assert!(*over > 0);
                *over -= 1;
            }
            b = (b + 1) & mask;
        }
        self.items -= 1;
        e
    }

    /// Insert `e`, whose key hashes to `h` and is not in the table. May grow the table,
    /// re-hashing every entry with `hasher`. Returns the new entry's position.
    pub fn insert_unique(&mut self, h: u64, e: u64, hasher: impl Fn(u64) -> u64) -> Pos {
        self.reserve_one(hasher);
        self.place(h, e)
    }

    /// Make room for one more entry, so that the next [`IndexTable::place`] does not
    /// need to grow.
    pub fn reserve_one(&mut self, hasher: impl Fn(u64) -> u64) {
        if self.items + 1 > self.buckets.len() * (SLOTS - 1) {
            self.grow(hasher);
        }
    }

    /// Insert after [`IndexTable::reserve_one`]: into the first free slot on the probe
    /// path of `h`, counting the overflow of every full bucket passed.
    fn place(&mut self, h: u64, e: u64) -> Pos {
        let mask = self.mask();
        let mut b = h as usize & mask;
        loop {
            let bucket = &mut self.buckets[b];
            let free = bucket.empty_slots();
            if free != 0 {
                let s = first_slot(free);
                bucket.tags[s] = tag_of(h);
                bucket.slots[s] = e;
                self.items += 1;
                return b * 8 + s;
            }
            if bucket.overflow != STICKY {
                bucket.overflow += 1;
            }
            b = (b + 1) & mask;
        }
    }

    /// Double the bucket array and re-insert everything.
    #[cold]
    fn grow(&mut self, hasher: impl Fn(u64) -> u64) {
        let n = (self.buckets.len() * 2).max(1);
        let old = std::mem::replace(&mut self.buckets, vec![EMPTY; n].into_boxed_slice());
        self.items = 0;
        self.moved = true;
        for bucket in old.iter() {
            for s in 0..SLOTS {
                if bucket.tags[s] != 0 {
                    let e = bucket.slots[s];
                    self.place(hasher(e), e);
                }
            }
        }
    }

    /// The entry for `h` and `eq`, or room to insert one (the table grows first if it
    /// must, so that [`VacantEntry::insert`] never does).
    pub fn entry(
        &mut self,
        h: u64,
        eq: impl FnMut(u64) -> bool,
        hasher: impl Fn(u64) -> u64,
    ) -> Entry<'_> {
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
}

/// Iterator of [`IndexTable::candidates`].
pub(crate) struct Candidates<'a> {
    table: &'a IndexTable,
    tag: u8,
    bucket: usize,
    /// Matching slots of `bucket` not yet returned.
    matches: u64,
    /// Buckets still allowed to be looked at, this one included.
    left: usize,
}

impl Iterator for Candidates<'_> {
    type Item = (Pos, u64);

    #[inline(always)]
    fn next(&mut self) -> Option<(Pos, u64)> {
        loop {
            if self.matches != 0 {
                let s = first_slot(self.matches);
                self.matches &= self.matches - 1;
                return Some((
                    self.bucket * 8 + s,
                    self.table.buckets[self.bucket].slots[s],
                ));
            }
            if self.left <= 1 || self.table.buckets[self.bucket].overflow == 0 {
                self.left = 0;
                return None;
            }
            self.left -= 1;
            self.bucket = (self.bucket + 1) & self.table.mask();
            self.matches = self.table.buckets[self.bucket].matching(self.tag);
        }
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
        self.table.buckets[self.pos / 8].slots[self.pos % 8]
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Entries are their own "keys" here: the hash of entry `e` is `hash(e)`.
    fn hash(e: u64) -> u64 {
        // A poor hash on purpose for some tests is built from this one by masking.
        let mut x = e.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        x ^= x >> 29;
        x.wrapping_mul(0xBF58_476D_1CE4_E5B9)
    }

    fn xorshift(s: &mut u64) -> u64 {
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        *s
    }

    #[test]
    fn layout_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<Bucket>(), 64);
        assert_eq!(std::mem::align_of::<Bucket>(), 64);
    }

    #[test]
    fn zero_bytes_is_exact() {
        let mut s = 0x1234_5678_9ABC_DEF1u64;
        for _ in 0..10_000 {
            // Bytes drawn from {0, 1, 0x80, random} so that borrows would show.
            let mut x = 0u64;
            for i in 0..8 {
                let r = xorshift(&mut s);
                let byte = match r % 4 {
                    0 => 0,
                    1 => 1,
                    2 => 0x80,
                    _ => (r >> 8) as u8 as u64,
                };
                x |= byte << (i * 8);
            }
            let naive = (0..8).fold(0u64, |m, i| {
                if (x >> (i * 8)) as u8 == 0 {
                    m | 0x80 << (i * 8)
                } else {
                    m
                }
            });
            assert_eq!(zero_bytes(x), naive, "{x:#018x}");
        }
    }

    /// Random inserts, lookups and removals against a `HashMap`, with a hash that only
    /// has `bits` bits so that home buckets collide and chains form.
    fn churn(bits: u32, rounds: usize) {
        let keep = if bits == 64 {
            u64::MAX
        } else {
            (1u64 << bits) - 1
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
        for e in 1..=4_000u64 {
            assert_eq!(
                t.find(h(e), |x| x == e).map(|(_, x)| x),
                model.contains_key(&e).then_some(e),
                "entry {e}"
            );
        }
        // Every used slot is a model entry, found again at its position.
        let mut seen = 0;
        for pos in 0..t.positions() {
            if let Some(e) = t.get(pos) {
                assert!(model.contains_key(&e));
                assert_eq!(t.find(h(e), |x| x == e), Some((pos, e)));
                seen += 1;
            }
        }
        assert_eq!(seen, model.len());
        // Remove everything: every overflow count must come back to 0.
        for &e in model.keys() {
            t.find_entry(h(e), |x| x == e).unwrap().remove();
        }
        assert_eq!(t.len(), 0);
        assert!(t
            .buckets
            .iter()
            .all(|b| b.overflow == 0 || b.overflow == STICKY));
        assert!(t.buckets.iter().all(|b| b.tags == [0; SLOTS]));
    }

    #[test]
    fn churn_with_a_good_hash() {
        churn(64, 40_000);
    }

    #[test]
    fn churn_with_colliding_home_buckets() {
        // Four home buckets at most: long spill chains and wrap-around.
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
        let (base, mask) = t.prefetch_hint();
        assert_ne!(base, 0);
        assert_eq!(mask, 0);
        assert_eq!(IndexTable::new().prefetch_hint(), (0, 0));
    }

    #[test]
    fn grows_below_six_sevenths() {
        let mut t = IndexTable::new();
        for e in 1..=10_000u64 {
            t.insert_unique(hash(e), e, hash);
            assert!(t.len() <= t.buckets.len() * (SLOTS - 1));
        }
        assert_eq!(t.buckets.len(), 2048);
        for e in 1..=10_000u64 {
            assert_eq!(t.find(hash(e), |x| x == e).map(|(_, x)| x), Some(e));
        }
    }
}
