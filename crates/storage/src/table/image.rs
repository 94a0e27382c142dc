//! What a memory image (`store/image.rs`) saves of a table, bucket by bucket, and a
//! table rebuilt from those words exactly as it was, with nothing re-hashed.

use std::sync::atomic::Ordering::Relaxed;

use super::array::{next_len, Buckets, MAX_BUCKETS};
use super::bucket::{home_of, tag_of, SLOTS};
use super::IndexTable;

/// Numbers that change when the table's placement rules do (growth steps, home bucket,
/// tag), for a memory image's layout fingerprint (`store/image.rs`): an image's
/// buckets are only valid under the rules that placed them.
pub(crate) fn placement_probe() -> [u64; 4] {
    [
        next_len(256) as u64,
        next_len(4096) as u64,
        home_of(0x1234_5678_9ABC_DEF0, 320) as u64,
        u64::from(tag_of(0xFEDC_BA98_7654_3210)),
    ]
}

/// Words in a bucket, as a memory image holds it: the tag word, then the seven slots.
pub(crate) const BUCKET_WORDS: usize = 8;

impl IndexTable {
    /// Buckets in the current array (what a memory image saves; `store/image.rs`).
    pub fn bucket_count(&self) -> usize {
        self.buckets.len()
    }

    /// Bucket `b`'s words: the tag word (tags and `overflow`), then the seven slots.
    /// Under the lock, so they do not change while they are read.
    #[inline]
    pub fn bucket_words(&self, b: usize) -> [u64; BUCKET_WORDS] {
        let bucket = &self.buckets[b];
        std::array::from_fn(|i| bucket.words[i].load(Relaxed))
    }

    /// A table of `len` buckets whose words come from `words` (called with bucket
    /// index after bucket index, each once, in order), as [`IndexTable::bucket_words`]
    /// gave them: a table saved in a memory image, with its tags, overflow counts and
    /// entries exactly where they were, so nothing is re-hashed. `None` when `len` is
    /// not a length a table grows through, or a used slot (tag set) holds an entry
    /// that `valid` refuses. The buckets' home positions depend on the hash seed,
    /// which the image restores with them.
    pub fn from_buckets(
        len: usize,
        mut words: impl FnMut(usize) -> [u64; BUCKET_WORDS],
        mut valid: impl FnMut(u64) -> bool,
    ) -> Option<IndexTable> {
        let mut l = 0;
        while l < len {
            l = next_len(l);
        }
        if l != len || len > MAX_BUCKETS {
            return None;
        }
        let buckets = Buckets::new(len);
        let mut items = 0;
        for (b, bucket) in buckets.iter().enumerate() {
            let w = words(b);
            for s in 0..SLOTS {
                let used = (w[0] >> (8 * s)) as u8 != 0;
                let e = w[1 + s];
                if used && !valid(e) {
                    return None;
                }
                items += usize::from(used);
            }
            for (cell, &word) in bucket.words.iter().zip(&w) {
                cell.store(word, Relaxed);
            }
        }
        if items > len * (SLOTS - 1) {
            return None;
        }
        Some(IndexTable {
            buckets,
            retired: Box::new([]),
            items,
            // Published by the first guard dropped over it.
            moved: true,
        })
    }
}
