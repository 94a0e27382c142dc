//! The probe path of a hash: the search for its entries, and the insert and removal
//! that keep the overflow counts along it.
//!
//! Probing follows Folly's F14: an entry whose home bucket is full goes to the next
//! bucket with a free slot, and every bucket it passes counts one more `overflow`. A
//! lookup stops at the first bucket whose `overflow` is zero. Removing an entry walks
//! the same path and counts it back down, so chains shrink again under churn. A count
//! that reaches 255 stays there (it can no longer be counted down exactly) until the
//! table is rebuilt by growth; lookups past it are correct, only longer.

use std::sync::atomic::Ordering::Relaxed;

use super::bucket::{first_slot, home_of, next_bucket, tag_of, STICKY};
use super::{IndexTable, Pos};

impl IndexTable {
    /// The entries whose tag matches hash `h`, with their positions, in probe order.
    /// Callers compare keys in their own loop over it, where the comparison inlines.
    #[inline(always)]
    pub fn candidates(&self, h: u64) -> Candidates<'_> {
        let tag = tag_of(h);
        let b = home_of(h, self.buckets.len());
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

    /// The first entry whose tag matches `h`, without comparing keys.
    #[cfg(test)]
    pub fn first_candidate(&self, h: u64) -> Option<u64> {
        self.find_map(h, Some).map(|(_, e)| e)
    }

    /// Remove the entry at `pos`, whose key hashes to `h`; returns it.
    pub fn remove(&mut self, pos: Pos, h: u64) -> u64 {
        let len = self.buckets.len();
        let (at, s) = (pos / 8, pos % 8);
        let bucket = &self.buckets[at];
        debug_assert!(bucket.tag(s) == tag_of(h));
        let e = bucket.slot(s);
        bucket.set_tag(s, 0);
        bucket.cell(s).store(0, Relaxed);
        let mut b = home_of(h, len);
        while b != at {
            let passed = &self.buckets[b];
            if passed.overflow() != STICKY {
                debug_assert!(passed.overflow() > 0);
                passed.add_overflow(u8::MAX);
            }
            b = next_bucket(b, len);
        }
        self.items -= 1;
        e
    }

    /// Insert after [`IndexTable::reserve_one`]: into the first free slot on the probe
    /// path of `h`, counting the overflow of every full bucket passed.
    pub(super) fn place(&mut self, h: u64, e: u64) -> Pos {
        let len = self.buckets.len();
        let mut b = home_of(h, len);
        loop {
            let bucket = &self.buckets[b];
            let free = bucket.empty_slots();
            if free != 0 {
                let s = first_slot(free);
                bucket.cell(s).store(e, Relaxed);
                bucket.set_tag(s, tag_of(h));
                self.items += 1;
                return b * 8 + s;
            }
            if bucket.overflow() != STICKY {
                bucket.add_overflow(1);
            }
            b = next_bucket(b, len);
        }
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
                return Some((self.bucket * 8 + s, self.table.buckets[self.bucket].slot(s)));
            }
            if self.left <= 1 || self.table.buckets[self.bucket].overflow() == 0 {
                self.left = 0;
                return None;
            }
            self.left -= 1;
            self.bucket = next_bucket(self.bucket, self.table.buckets.len());
            self.matches = self.table.buckets[self.bucket].matching(self.tag);
        }
    }
}
