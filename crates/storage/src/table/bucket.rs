//! One bucket of the index table: seven tags, the overflow count and seven entries in
//! one cache line, as atomics; and where a hash's bucket and tag are.
//!
//! ```text
//!  word 0: tags[7] (byte i: slot i's tag, 0 = empty, else 0x80 | hash >> 57)
//!          and overflow (byte 7: entries that passed this bucket because it was full)
//!  words 1..8: slot i's entry (segment << 32 | offset), 0 while empty
//! ```

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Entries per bucket.
pub(super) const SLOTS: usize = 7;
/// The low seven tag bytes of a bucket's first word.
pub(super) const TAG_BYTES: u64 = 0x00FF_FFFF_FFFF_FFFF;
const LOW7: u64 = 0x7F7F_7F7F_7F7F_7F7F;
const HIGH: u64 = 0x8080_8080_8080_8080;
/// `overflow` value that is no longer counted down.
pub(super) const STICKY: u8 = u8::MAX;
/// Byte of the tag word that holds `overflow`.
pub(super) const OVERFLOW_SHIFT: u32 = 8 * SLOTS as u32;

/// Seven tags, the overflow count and seven entries, as eight words. The words are
/// atomics so that [`peek`] may read a bucket without the shard lock while its owner
/// writes it; the owner, under the lock, reads and writes them with relaxed loads and
/// stores, which compile to the plain moves a non-atomic field would.
#[repr(C, align(64))]
pub(crate) struct Bucket {
    /// Word 0, the tag word: byte `i < 7` is the tag of slot `i` (0 = empty), byte 7
    /// the entries that passed this bucket because it (and maybe more) was full.
    /// Word `1 + i`: the entry of slot `i`, 0 while the slot is empty. So the entry at
    /// position `pos` is word `pos + 1` of the array, counting words (see
    /// [`IndexTable::holds_at`]).
    pub(super) words: [AtomicU64; 8],
}

impl Bucket {
    /// The tags and `overflow` as one word (byte 7 is `overflow`).
    #[inline(always)]
    pub(super) fn tag_word(&self) -> u64 {
        self.words[0].load(Relaxed)
    }

    /// Write the tag word; only the lock holder writes.
    #[inline(always)]
    fn set_tag_word(&self, w: u64) {
        self.words[0].store(w, Relaxed);
    }

    /// The cell of slot `s < 7`.
    #[inline(always)]
    pub(super) fn cell(&self, s: usize) -> &AtomicU64 {
        &self.words[1 + s]
    }

    #[inline(always)]
    pub(super) fn tag(&self, s: usize) -> u8 {
        (self.tag_word() >> (8 * s)) as u8
    }

    /// Only the lock holder writes.
    #[inline(always)]
    pub(super) fn set_tag(&self, s: usize, tag: u8) {
        let w = self.tag_word() & !(0xFF << (8 * s)) | u64::from(tag) << (8 * s);
        self.set_tag_word(w);
    }

    #[inline(always)]
    pub(super) fn overflow(&self) -> u8 {
        (self.tag_word() >> OVERFLOW_SHIFT) as u8
    }

    /// Add `delta` (+1 or -1, wrapping) to `overflow`; only the lock holder writes.
    #[inline(always)]
    pub(super) fn add_overflow(&self, delta: u8) {
        let w = self.tag_word();
        let over = ((w >> OVERFLOW_SHIFT) as u8).wrapping_add(delta);
        self.set_tag_word(w & TAG_BYTES | u64::from(over) << OVERFLOW_SHIFT);
    }

    #[inline(always)]
    pub(super) fn slot(&self, s: usize) -> u64 {
        self.cell(s).load(Relaxed)
    }

    /// Slots whose tag equals `tag`, as a mask with bit 7 of byte `i` set for slot `i`.
    /// Exact per byte (no borrow between bytes), so an empty slot never matches a tag.
    #[inline(always)]
    pub(super) fn matching(&self, tag: u8) -> u64 {
        matching(self.tag_word(), tag)
    }

    #[inline(always)]
    pub(super) fn empty_slots(&self) -> u64 {
        zero_bytes(self.tag_word()) & TAG_BYTES
    }
}

/// [`Bucket::matching`] of a tag word.
#[inline(always)]
pub(super) fn matching(word: u64, tag: u8) -> u64 {
    zero_bytes(word ^ (u64::from(tag) * 0x0101_0101_0101_0101)) & TAG_BYTES
}

/// Bit 7 set in exactly the bytes of `x` that are zero.
#[inline(always)]
fn zero_bytes(x: u64) -> u64 {
    !(((x & LOW7) + LOW7) | x | LOW7) & HIGH
}

/// The tag of a hash: its top seven bits, with bit 7 set so that it is never 0. The
/// home bucket uses the low 32 bits ([`home_of`]) and the shard bits 40 and up.
#[inline(always)]
pub(super) fn tag_of(h: u64) -> u8 {
    0x80 | (h >> 57) as u8
}

/// The home bucket of hash `h` in an array of `len` buckets (`len <= MAX_BUCKETS`, so
/// the product fits): the multiply-shift range reduction of the hash's low 32 bits,
/// below `len` whenever `len > 0`, and 0 for an empty table.
#[inline(always)]
pub(super) fn home_of(h: u64, len: usize) -> usize {
    ((u64::from(h as u32) * len as u64) >> 32) as usize
}

/// The bucket after `b` on a probe path in an array of `len` buckets: wraps with a
/// compare, as `len` is not a power of two.
#[inline(always)]
pub(super) fn next_bucket(b: usize, len: usize) -> usize {
    let n = b + 1;
    if n == len {
        0
    } else {
        n
    }
}

/// Slot index of the lowest set bit of a [`Bucket::matching`] mask.
#[inline(always)]
pub(super) fn first_slot(mask: u64) -> usize {
    mask.trailing_zeros() as usize / 8
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::testing::xorshift;

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
}
