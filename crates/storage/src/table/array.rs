//! The bucket arrays of a table: the lengths a table grows through, their allocation,
//! growth, the word that publishes the current array to lock-free readers, and the
//! bytes a table holds in RAM.
//!
//! The table grows before an insert would take it past 6 of every 7 slots, by at most
//! 1.25x: the index is counted inside the memory limit (`-m`), and a table that doubled
//! cost between 10.7 and 21.3 bytes per item (about 15). From 256 buckets on, lengths
//! are `m << e` with `m` in 4..=7 (256, 320, 384, 448, 512, 640, ...), so the load stays
//! between 0.69 and 0.857 and the table costs 10.7 to 13.3 bytes per item, about 12.
//! Smaller tables go 1, 8, 64, 128, 192, 256 buckets: every array of a page or more is a
//! whole number of pages, page-aligned, so an outgrown one gives all its memory back
//! (see `IndexTable::grow`); only the 1- and 8-bucket arrays stay, 576 bytes.
//! [`index_bytes`] tells from a published word what a table holds in RAM. A length is
//! not a power of two, so the home bucket is a multiply-shift of the hash's low 32 bits
//! (bits the shard, 40 and up, and the tag, 57 and up, do not use), and a probe wraps
//! with a compare. The table never shrinks, as hashbrown did not. Growth re-hashes
//! every entry through the caller's `hasher`, which reads each key from its segment.
//!
//! An array the table outgrows is kept until the table is dropped: a lock-free reader
//! may still hold its address (`peek.rs`). Large outgrown arrays give their pages back to
//! the kernel and read as empty. `Buckets` (an aligned allocation of its own, mapped from
//! a page on) is this file's `unsafe`, tested under Miri.

use std::alloc::{self, Layout};
use std::ops::Deref;
use std::ptr::{self, NonNull};

use super::bucket::{Bucket, SLOTS};
use super::{IndexTable, Rehash};

/// Buckets in a page. A bucket array smaller than a page is simply kept when the table
/// grows; larger ones are whole pages, page-aligned, and give them all back to the
/// kernel (see [`IndexTable::grow`]).
pub(super) const PAGE_BUCKETS: usize = 4096 / std::mem::size_of::<Bucket>();
/// Whether outgrown arrays of a page or more give their pages back
/// (`segment::release_pages` does where this is true).
pub(super) const RELEASES: bool = cfg!(all(target_os = "linux", not(miri)));
/// Alignment of every bucket array: the low 9 bits of a published word hold its length,
/// the ninth always clear (see [`decode_len`]).
pub(super) const ARRAY_ALIGN: usize = 512;
/// Most buckets a table may have: `(h as u32) * len` must fit in a u64 and the length's
/// exponent in five bits. 128 GiB for one shard's index.
pub(super) const MAX_BUCKETS: usize = 1 << 31;
/// Entries whose records a growth asks for before it hashes them.
const REHASH_AHEAD: usize = 8;

/// The length a table of `len` buckets grows to: 1, 8, 64 (a page), then a page more up
/// to 256, then `m << e` with `m` in 4..=7, a step of at most 1.25x. Every length of a
/// page or more is a whole number of pages. Every length is `m << e` with `m` odd and at
/// most 7, as a published word encodes it.
pub(super) const fn next_len(len: usize) -> usize {
    if len < PAGE_BUCKETS {
        if len == 0 {
            1
        } else {
            len * 8
        }
    } else if len < 4 * PAGE_BUCKETS {
        len + PAGE_BUCKETS
    } else {
        len + (1 << (len.ilog2() - 2))
    }
}

/// Bytes of a `len`-bucket array that an outgrown one still holds in RAM: all of a
/// small one, none of one of a page or more once its pages went back to the kernel.
const fn kept_bytes(len: usize) -> usize {
    if RELEASES && len >= PAGE_BUCKETS {
        0
    } else {
        len * std::mem::size_of::<Bucket>()
    }
}

/// Bytes in RAM of the bucket arrays of the table that published `published` (an
/// [`IndexTable::published`] word, or null): its array and the arrays it outgrew that
/// did not give their pages back (576 bytes on Linux, from 64 buckets on). A function
/// of the length alone, as every table grows through the same lengths. Neither read
/// nor written through: lock-free, as any word of a live table or a stale one. (Not
/// counted: the allocator's own headers, and the outgrown arrays' list, 16 bytes each.)
#[inline]
pub(crate) fn index_bytes(published: Published) -> usize {
    if published.is_null() {
        return 0;
    }
    let len = decode_len(published as usize);
    let mut bytes = len * std::mem::size_of::<Bucket>();
    let mut l = next_len(0);
    while l < len {
        if RELEASES && l >= PAGE_BUCKETS {
            // None of the rest is kept.
            break;
        }
        bytes += kept_bytes(l);
        l = next_len(l);
    }
    bytes
}

/// The length of the array a non-null published word names: `m << e`, `m` in its low
/// three bits and `e` in the five above. The shift takes bits 3..9 of the word as they
/// are (a 64-bit shift uses six bits of its count, so no mask is needed): bit 8 is
/// clear, as arrays are 512-byte aligned.
#[inline(always)]
pub(super) fn decode_len(word: usize) -> usize {
    (word & 7).wrapping_shl((word >> 3) as u32)
}

/// A word naming a bucket array for lock-free readers ([`IndexTable::published`]): the
/// array's address (512-byte aligned) with its length `m << e` in the low bits, `m`
/// (odd, at most 7) in bits 0..3 and `e` in bits 3..8; or null. A pointer rather
/// than an integer, so that it keeps the allocation's provenance.
pub(crate) type Published = *mut Bucket;

/// A bucket array, owned through a raw pointer rather than a `Box`: every access to it,
/// the owner's included, goes through shared references (all its fields are atomics),
/// so moving the owner does not invalidate the pointers lock-free readers took from it,
/// as moving a `Box`, a unique owner, would. Allocated with [`Buckets::layout`]:
/// 512-byte aligned (for the published word), and page-aligned from a page on, so that
/// an outgrown array's pages are all its own to give back.
pub(super) struct Buckets {
    ptr: NonNull<Bucket>,
    len: usize,
}

// SAFETY: a `Buckets` is a `Box<[Bucket]>` in all but name, and `Bucket` (atomics only)
// is `Send` and `Sync`.
unsafe impl Send for Buckets {}
// SAFETY: as above.
unsafe impl Sync for Buckets {}

impl Buckets {
    /// The allocation of `len > 0` buckets.
    fn layout(len: usize) -> Layout {
        let align = if len >= PAGE_BUCKETS {
            PAGE_BUCKETS * std::mem::size_of::<Bucket>()
        } else {
            ARRAY_ALIGN
        };
        Layout::array::<Bucket>(len)
            .and_then(|l| l.align_to(align))
            .expect("bucket array size")
    }

    /// `len` empty buckets; no allocation for 0.
    pub(super) fn new(len: usize) -> Buckets {
        if len == 0 {
            return Buckets {
                ptr: NonNull::dangling(),
                len,
            };
        }
        if Buckets::mapped(len) {
            // A page or more: a mapping of its own. From the heap, each array of a
            // growing table left a page of the allocator's bookkeeping resident before
            // it (an aligned allocation splits off its front), and the zeroing touched
            // every page at once; fresh anonymous pages read as zero and cost nothing
            // until written.
            // SAFETY: a new private anonymous mapping; no existing memory is affected.
            let raw = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len * std::mem::size_of::<Bucket>(),
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert!(
                raw != libc::MAP_FAILED,
                "cannot map an index array of {len} buckets"
            );
            let ptr = NonNull::new(raw.cast::<Bucket>()).expect("mmap gave a null address");
            return Buckets { ptr, len };
        }
        let layout = Buckets::layout(len);
        // SAFETY: `layout` has a non-zero size. All-zero bytes are `len` valid empty
        // buckets: a bucket is eight `AtomicU64`s, and 0 is a valid u64 (and an empty
        // slot, tag word and overflow count).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw.cast::<Bucket>()) else {
            alloc::handle_alloc_error(layout)
        };
        Buckets { ptr, len }
    }

    pub(super) fn as_ptr(&self) -> *mut Bucket {
        self.ptr.as_ptr()
    }

    /// Whether an array of `len` buckets is a mapping of its own (whole pages, so
    /// page-aligned); the heap serves smaller ones, and every one under Miri.
    fn mapped(len: usize) -> bool {
        cfg!(all(target_os = "linux", not(miri))) && len >= PAGE_BUCKETS
    }
}

impl Deref for Buckets {
    type Target = [Bucket];

    #[inline(always)]
    fn deref(&self) -> &[Bucket] {
        // SAFETY: `ptr` is dangling (and aligned) only for `len == 0`; otherwise it is an
        // allocation of `len` initialised buckets from `new`, freed only in `drop`. Only
        // shared references are ever made to it.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Buckets {
    fn drop(&mut self) {
        if Buckets::mapped(self.len) {
            // SAFETY: unmaps, once, the mapping `new` made of exactly this size; no
            // reference into the array outlives its `Buckets` (as below).
            unsafe {
                libc::munmap(
                    self.ptr.as_ptr().cast(),
                    self.len * std::mem::size_of::<Bucket>(),
                );
            }
        } else if self.len > 0 {
            // SAFETY: frees, once, the allocation `new` made with the same layout; no
            // reference into the array outlives its `Buckets` (readers hold only the
            // table's words, and the table drops its arrays when it is dropped itself).
            unsafe { alloc::dealloc(self.ptr.as_ptr().cast(), Buckets::layout(self.len)) };
        }
    }
}

impl IndexTable {
    /// Where the buckets are, as one word for lock-free readers: the array's address
    /// (512-byte aligned) with its length `m << e` in the low bits (`m`, odd and at most
    /// 7, in bits 0..3, `e` in bits 3..8), or 0 while the table has no buckets.
    /// [`prefetch_address`], [`home`], [`peek`] and [`index_bytes`] decode it. The
    /// bucket of hash `h` is at `base + home_of(h, len) * 64`.
    #[inline]
    pub fn published(&self) -> Published {
        let len = self.buckets.len();
        if len == 0 {
            return ptr::null_mut();
        }
        let e = len.trailing_zeros() as usize;
        let m = len >> e;
        debug_assert!(m <= 7 && e < 32 && len <= MAX_BUCKETS);
        debug_assert_eq!(self.buckets.as_ptr() as usize % ARRAY_ALIGN, 0);
        // Pointer arithmetic, not an integer round trip, keeps the provenance.
        self.buckets
            .as_ptr()
            .cast::<u8>()
            .wrapping_add(e << 3 | m)
            .cast()
    }

    /// Grow the bucket array to its next length (at most 1.25x from 256 buckets on, see
    /// [`next_len`]) and re-insert everything. The old array is kept for lock-free
    /// readers that may still hold its address; one of a page or more (a whole number of
    /// pages, page-aligned) gives all its pages back to the kernel first, so it costs
    /// address space, not memory.
    #[cold]
    pub(super) fn grow(&mut self, hasher: impl Rehash) {
        let n = next_len(self.buckets.len());
        assert!(n <= MAX_BUCKETS, "an index shard of more than 2^31 buckets");
        let old = std::mem::replace(&mut self.buckets, Buckets::new(n));
        self.items = 0;
        self.moved = true;
        // Each entry's key is read from its segment to hash it: a cache miss apiece, for
        // every entry at every growth (about five times over per item, at steps of
        // 1.25x). So the records of the next entries are asked for [`REHASH_AHEAD`]
        // entries before they are hashed, and the misses overlap.
        let mut ring = [0u64; REHASH_AHEAD];
        let mut n = 0usize;
        for bucket in old.iter() {
            let tags = bucket.tag_word();
            for s in 0..SLOTS {
                if (tags >> (8 * s)) as u8 != 0 {
                    let e = bucket.slot(s);
                    hasher.prefetch(e);
                    let at = n % REHASH_AHEAD;
                    if n >= REHASH_AHEAD {
                        let x = ring[at];
                        self.place(hasher.hash(x), x);
                    }
                    ring[at] = e;
                    n += 1;
                }
            }
        }
        for i in n.saturating_sub(REHASH_AHEAD)..n {
            let x = ring[i % REHASH_AHEAD];
            self.place(hasher.hash(x), x);
        }
        if old.len() >= PAGE_BUCKETS {
            debug_assert_eq!(old.len() % PAGE_BUCKETS, 0);
            // SAFETY: `old` is ours and is never written again; its fields are atomics
            // that lock-free readers take only as hints, and zero reads as empty.
            unsafe {
                crate::segment::release_pages(old.as_ptr().cast(), std::mem::size_of_val(&*old));
            }
        }
        if !old.is_empty() {
            let mut retired = std::mem::take(&mut self.retired).into_vec();
            retired.push(old);
            self.retired = retired.into_boxed_slice();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::bucket::home_of;
    use crate::table::testing::hash;

    /// Bytes the table's arrays hold in RAM, from the arrays themselves.
    fn resident(t: &IndexTable) -> usize {
        let kept: usize = t.retired.iter().map(|b| kept_bytes(b.len())).sum();
        t.buckets.len() * std::mem::size_of::<Bucket>() + kept
    }

    #[test]
    fn lengths_grow_by_at_most_a_quarter_and_encode() {
        let mut len = 0;
        let mut lengths = Vec::new();
        while len < MAX_BUCKETS {
            let next = next_len(len);
            lengths.push(next);
            if len >= 4 * PAGE_BUCKETS {
                assert!(next * 4 <= len * 5, "{len} -> {next}");
            }
            if next >= PAGE_BUCKETS {
                assert_eq!(next % PAGE_BUCKETS, 0, "{next}: whole pages");
                assert_eq!(Buckets::layout(next).align(), 4096);
            }
            let e = next.trailing_zeros() as usize;
            assert!(next >> e <= 7 && e < 32, "{next}");
            assert_eq!(decode_len(e << 3 | next >> e), next);
            len = next;
        }
        assert_eq!(
            &lengths[..12],
            &[1, 8, 64, 128, 192, 256, 320, 384, 448, 512, 640, 768]
        );
        assert_eq!(len, MAX_BUCKETS);
        // The home bucket is in range at the largest length, for the largest hash.
        assert_eq!(home_of(u64::MAX, MAX_BUCKETS), MAX_BUCKETS - 1);
        assert_eq!(home_of(0xFFFF_FFFF_0000_0000, MAX_BUCKETS), 0);
    }

    #[test]
    fn grows_below_six_sevenths() {
        let mut t = IndexTable::new();
        let n = if cfg!(miri) { 500 } else { 10_000u64 };
        let mut len = 0;
        for e in 1..=n {
            t.insert_unique(hash(e), e, hash);
            assert!(t.len() <= t.buckets.len() * (SLOTS - 1));
            if t.buckets.len() != len {
                // Grown only when full to 6/7, by at most 1.25x from 256 buckets on:
                // the load right after is at least 0.69.
                assert_eq!(t.len(), len * (SLOTS - 1) + 1);
                if len >= 4 * PAGE_BUCKETS {
                    assert!(t.len() as f64 / (t.buckets.len() * SLOTS) as f64 > 0.685);
                }
                len = t.buckets.len();
                assert_eq!(index_bytes(t.published()), resident(&t));
            }
        }
        assert_eq!(t.buckets.len(), if cfg!(miri) { 128 } else { 1792 });
        for e in 1..=n {
            assert_eq!(t.find(hash(e), |x| x == e).map(|(_, x)| x), Some(e));
        }
    }

    /// The index counts inside `-m`: from 1 000 to 200 000 items, the bytes a table
    /// holds (its array and the outgrown ones it keeps) per item.
    #[test]
    fn bytes_per_item_stay_near_twelve() {
        let mut t = IndexTable::new();
        assert_eq!(index_bytes(t.published()), 0);
        let top = if cfg!(miri) { 2_000 } else { 200_000u64 };
        let (mut lo, mut hi, mut hi_late) = (f64::MAX, 0f64, 0f64);
        let (mut log_sum, mut samples) = (0f64, 0u32);
        for e in 1..=top {
            t.insert_unique(hash(e), e, hash);
            let bytes = index_bytes(t.published());
            if e < 1_000 {
                continue;
            }
            let n = e as usize;
            let per_item = bytes as f64 / n as f64;
            lo = lo.min(per_item);
            hi = hi.max(per_item);
            // From 256 buckets (1 537 items) on, growth steps are at most 1.25x: the
            // array costs at most 64 * 1.25 / 6 = 13.33 bytes an item, plus the 576
            // bytes of the two small arrays kept.
            let array = t.buckets.len() * std::mem::size_of::<Bucket>();
            if n > 256 * (SLOTS - 1) {
                assert!(array as f64 / n as f64 <= 64.0 * 1.25 / 6.0 + 1e-9, "{n}");
            }
            if n >= 10_000 {
                hi_late = hi_late.max(per_item);
            }
            // (Where outgrown arrays keep their pages, as under Miri, they count too.)
            assert!(per_item <= 15.0 || !RELEASES, "{n}: {per_item}");
            assert!(per_item >= 64.0 / 6.0, "{n}: {per_item}");
            if e.is_power_of_two() || e % 997 == 0 {
                log_sum += per_item;
                samples += 1;
            }
        }
        let mean = log_sum / f64::from(samples);
        eprintln!(
            "index bytes per item, 1 000..{top} items: {lo:.2}..{hi:.2}, \
             from 10 000: ..{hi_late:.2}, mean of samples {mean:.2}"
        );
        assert_eq!(index_bytes(t.published()), resident(&t));
        if RELEASES {
            assert!(hi_late <= 13.4, "{hi_late}");
            assert!(mean < 12.5, "{mean}");
        }
    }
}
