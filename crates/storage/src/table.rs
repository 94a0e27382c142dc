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
//! Probing follows Folly's F14: an entry whose home bucket is full goes to the next
//! bucket with a free slot, and every bucket it passes counts one more `overflow`. A
//! lookup stops at the first bucket whose `overflow` is zero. Removing an entry walks
//! the same path and counts it back down, so chains shrink again under churn. A count
//! that reaches 255 stays there (it can no longer be counted down exactly) until the
//! table is rebuilt by growth; lookups past it are correct, only longer.
//!
//! The table grows before an insert would take it past 6 of every 7 slots, by at most
//! 1.25x: the index is counted inside the memory limit (`-m`), and a table that doubled
//! cost between 10.7 and 21.3 bytes per item (about 15). From 256 buckets on, lengths
//! are `m << e` with `m` in 4..=7 (256, 320, 384, 448, 512, 640, ...), so the load stays
//! between 0.69 and 0.857 and the table costs 10.7 to 13.3 bytes per item, about 12.
//! Smaller tables go 1, 8, 64, 128, 192, 256 buckets: every array of a page or more is a
//! whole number of pages, page-aligned, so an outgrown one gives all its memory back
//! (see [`IndexTable::grow`]); only the 1- and 8-bucket arrays stay, 576 bytes.
//! [`index_bytes`] tells from a published word what a table holds in RAM. A length is
//! not a power of two, so the home bucket is a multiply-shift of the hash's low 32 bits
//! (bits the shard, 40 and up, and the tag, 57 and up, do not use), and a probe wraps
//! with a compare. The table never shrinks, as hashbrown did not. Growth re-hashes
//! every entry through the caller's `hasher`, which reads each key from its segment.
//!
//! Positions ([`Pos`]) are `bucket * 8 + slot`; they stay valid until the next insert
//! (which may grow the table) and are what the expiry sweep walks.
//!
//! Lock-free reads: the shard lock holder is the only writer, but [`peek`] reads a
//! bucket without the lock, to find a multi-get's records early enough to prefetch
//! them. So every bucket field is an atomic (relaxed loads and stores are the plain
//! moves a non-atomic field would compile to), a table publishes where its array is
//! ([`IndexTable::published`]), and an array the table outgrows is kept until the table
//! is dropped: a reader may still hold its address. Large outgrown arrays give their
//! pages back to the kernel and read as empty. This, `Buckets` (an aligned allocation
//! of its own) and the one load of [`IndexTable::holds_at`] (a peek's slot address,
//! checked to be in the current array) are the module's `unsafe`, tested under Miri.

use std::alloc::{self, Layout};
use std::ops::Deref;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Entries per bucket.
const SLOTS: usize = 7;
/// The low seven tag bytes of a bucket's first word.
const TAG_BYTES: u64 = 0x00FF_FFFF_FFFF_FFFF;
const LOW7: u64 = 0x7F7F_7F7F_7F7F_7F7F;
const HIGH: u64 = 0x8080_8080_8080_8080;
/// `overflow` value that is no longer counted down.
const STICKY: u8 = u8::MAX;
/// Byte of the tag word that holds `overflow`.
const OVERFLOW_SHIFT: u32 = 8 * SLOTS as u32;
/// Buckets in a page. A bucket array smaller than a page is simply kept when the table
/// grows; larger ones are whole pages, page-aligned, and give them all back to the
/// kernel (see [`IndexTable::grow`]).
const PAGE_BUCKETS: usize = 4096 / std::mem::size_of::<Bucket>();
/// Whether outgrown arrays of a page or more give their pages back
/// (`segment::release_pages` does where this is true).
const RELEASES: bool = cfg!(all(target_os = "linux", not(miri)));
/// Alignment of every bucket array: the low 9 bits of a published word hold its length,
/// the ninth always clear (see [`decode_len`]).
const ARRAY_ALIGN: usize = 512;
/// Most buckets a table may have: `(h as u32) * len` must fit in a u64 and the length's
/// exponent in five bits. 128 GiB for one shard's index.
const MAX_BUCKETS: usize = 1 << 31;
/// Entries whose records a growth asks for before it hashes them.
const REHASH_AHEAD: usize = 8;

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

/// Buckets a [`peek`] follows along a spill chain before it gives up.
const PEEK_BUCKETS: usize = 4;

/// A position in the table: `bucket * 8 + slot`.
pub(crate) type Pos = usize;

/// Where a [`peek`] saw an entry: the address of the slot's entry word in the bucket
/// array it read, for [`IndexTable::holds_at`] to check under the lock. An address, not
/// a position, so that the check is a range test and one load. Made only here, from a
/// slot (never a tag word), or as [`Cell::NONE`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cell(usize);

impl Cell {
    /// No slot: no table holds it.
    pub(crate) const NONE: Cell = Cell(0);
    /// No slot either, told apart from `NONE` by its users.
    pub(crate) const OTHER: Cell = Cell(1);

    #[inline(always)]
    fn of(cell: &AtomicU64) -> Cell {
        Cell(ptr::from_ref(cell) as usize)
    }
}

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
    words: [AtomicU64; 8],
}

impl Bucket {
    /// The tags and `overflow` as one word (byte 7 is `overflow`).
    #[inline(always)]
    fn tag_word(&self) -> u64 {
        self.words[0].load(Relaxed)
    }

    /// Write the tag word; only the lock holder writes.
    #[inline(always)]
    fn set_tag_word(&self, w: u64) {
        self.words[0].store(w, Relaxed);
    }

    /// The cell of slot `s < 7`.
    #[inline(always)]
    fn cell(&self, s: usize) -> &AtomicU64 {
        &self.words[1 + s]
    }

    #[inline(always)]
    fn tag(&self, s: usize) -> u8 {
        (self.tag_word() >> (8 * s)) as u8
    }

    /// Only the lock holder writes.
    #[inline(always)]
    fn set_tag(&self, s: usize, tag: u8) {
        let w = self.tag_word() & !(0xFF << (8 * s)) | u64::from(tag) << (8 * s);
        self.set_tag_word(w);
    }

    #[inline(always)]
    fn overflow(&self) -> u8 {
        (self.tag_word() >> OVERFLOW_SHIFT) as u8
    }

    /// Add `delta` (+1 or -1, wrapping) to `overflow`; only the lock holder writes.
    #[inline(always)]
    fn add_overflow(&self, delta: u8) {
        let w = self.tag_word();
        let over = ((w >> OVERFLOW_SHIFT) as u8).wrapping_add(delta);
        self.set_tag_word(w & TAG_BYTES | u64::from(over) << OVERFLOW_SHIFT);
    }

    #[inline(always)]
    fn slot(&self, s: usize) -> u64 {
        self.cell(s).load(Relaxed)
    }

    /// Slots whose tag equals `tag`, as a mask with bit 7 of byte `i` set for slot `i`.
    /// Exact per byte (no borrow between bytes), so an empty slot never matches a tag.
    #[inline(always)]
    fn matching(&self, tag: u8) -> u64 {
        matching(self.tag_word(), tag)
    }

    #[inline(always)]
    fn empty_slots(&self) -> u64 {
        zero_bytes(self.tag_word()) & TAG_BYTES
    }
}

/// [`Bucket::matching`] of a tag word.
#[inline(always)]
fn matching(word: u64, tag: u8) -> u64 {
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
fn tag_of(h: u64) -> u8 {
    0x80 | (h >> 57) as u8
}

/// The home bucket of hash `h` in an array of `len` buckets (`len <= MAX_BUCKETS`, so
/// the product fits): the multiply-shift range reduction of the hash's low 32 bits,
/// below `len` whenever `len > 0`, and 0 for an empty table.
#[inline(always)]
fn home_of(h: u64, len: usize) -> usize {
    ((u64::from(h as u32) * len as u64) >> 32) as usize
}

/// The bucket after `b` on a probe path in an array of `len` buckets: wraps with a
/// compare, as `len` is not a power of two.
#[inline(always)]
fn next_bucket(b: usize, len: usize) -> usize {
    let n = b + 1;
    if n == len {
        0
    } else {
        n
    }
}

/// The length a table of `len` buckets grows to: 1, 8, 64 (a page), then a page more up
/// to 256, then `m << e` with `m` in 4..=7, a step of at most 1.25x. Every length of a
/// page or more is a whole number of pages. Every length is `m << e` with `m` odd and at
/// most 7, as a published word encodes it.
const fn next_len(len: usize) -> usize {
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
fn decode_len(word: usize) -> usize {
    (word & 7).wrapping_shl((word >> 3) as u32)
}

/// Slot index of the lowest set bit of a [`Bucket::matching`] mask.
#[inline(always)]
fn first_slot(mask: u64) -> usize {
    mask.trailing_zeros() as usize / 8
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
struct Buckets {
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
    fn new(len: usize) -> Buckets {
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

    fn as_ptr(&self) -> *mut Bucket {
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

    /// The first entry whose tag matches `h`, without comparing keys.
    #[cfg(test)]
    pub fn first_candidate(&self, h: u64) -> Option<u64> {
        self.find_map(h, Some).map(|(_, e)| e)
    }

    /// The position of `cell` if it is in this table's current array and holds `e`, an
    /// entry other than 0: the check under the lock that a peek's entry is still indexed
    /// where the peek saw it. Exact without the slot's tag, as an emptied slot holds 0
    /// (see [`IndexTable::remove`]). A cell of an array the table outgrew is outside the
    /// current one (outgrown arrays are kept, so no address is reused), so it is not
    /// held. A range test and one load: the peek's address is used as it is, and the
    /// position is derived from it (the caller needs it only to remove an expired item).
    ///
    /// A cell of another table, or of no table, is outside the array too.
    #[inline(always)]
    pub fn holds_at(&self, cell: Cell, e: u64) -> Option<Pos> {
        let off = cell.0.wrapping_sub(self.buckets.as_ptr() as usize);
        if e == 0 || off >= self.buckets.len() * std::mem::size_of::<Bucket>() {
            return None;
        }
        // SAFETY: a `Cell` other than `NONE` and `OTHER` (which are below any array, so
        // out of range) is the address of a slot's entry word, so aligned for a u64; the
        // test above put it inside this table's live array, whose words are atomics.
        let held = unsafe { &*(cell.0 as *const AtomicU64) }.load(Relaxed);
        // Word `pos + 1` of the array is the entry at `pos` (see [`Bucket`]).
        (held == e).then_some(off / 8 - 1)
    }

    /// The cell of position `pos` (a slot, `pos % 8 < 7`), as a peek that saw an entry
    /// there would give it.
    #[cfg(test)]
    pub fn cell_at(&self, pos: Pos) -> Cell {
        Cell::of(self.buckets[pos / 8].cell(pos % 8))
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

    /// Insert after [`IndexTable::reserve_one`]: into the first free slot on the probe
    /// path of `h`, counting the overflow of every full bucket passed.
    fn place(&mut self, h: u64, e: u64) -> Pos {
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

    /// Grow the bucket array to its next length (at most 1.25x from 256 buckets on, see
    /// [`next_len`]) and re-insert everything. The old array is kept for lock-free
    /// readers that may still hold its address; one of a page or more (a whole number of
    /// pages, page-aligned) gives all its pages back to the kernel first, so it costs
    /// address space, not memory.
    #[cold]
    fn grow(&mut self, hasher: impl Rehash) {
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
}

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

    /// Entries in the table.
    pub fn items(&self) -> usize {
        self.items
    }
}

/// The home bucket of hash `h` in the array described by `published` (an
/// [`IndexTable::published`] word, not null), for [`peek_from`].
#[inline(always)]
pub(crate) fn home(published: Published, h: u64) -> usize {
    home_of(h, decode_len(published as usize))
}

/// The address of the bucket of hash `h` in the array described by `published` (an
/// [`IndexTable::published`] word, not null), for a prefetch; never dereferenced.
#[inline(always)]
pub(crate) fn prefetch_address(published: Published, h: u64) -> usize {
    let word = published as usize;
    (word & !(ARRAY_ALIGN - 1)).wrapping_add(home(published, h) * std::mem::size_of::<Bucket>())
}

/// What a [`peek`] saw on a hash's probe path: the first entry whose tag matches and
/// its cell (the entry may read 0, a slot being filled or emptied meanwhile); or, with
/// no slot's cell, [`Peek::ABSENT`] or [`Peek::UNKNOWN`]. Two words rather than an
/// enum, so that it comes back in registers, even from the out-of-line
/// [`peek_further`]: an enum of three cases came back through the stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Peek {
    pub(crate) cell: Cell,
    pub(crate) e: u64,
}

impl Peek {
    /// The probe path ended with no entry of the tag: the key was not in the table as
    /// read (the arrays a table outgrew read as empty, so this too is only a guess).
    pub(crate) const ABSENT: Peek = Peek {
        cell: Cell::NONE,
        e: 0,
    };
    /// The probe path went on past the buckets a peek follows: the key may be further.
    pub(crate) const UNKNOWN: Peek = Peek {
        cell: Cell::OTHER,
        e: 0,
    };

    /// The cell and entry a peek found, if it found one.
    #[cfg(test)]
    fn found(self) -> Option<(Cell, u64)> {
        (self != Peek::ABSENT && self != Peek::UNKNOWN).then_some((self.cell, self.e))
    }
}

/// Without the lock: the first entry whose tag matches `h` on its probe path, and its
/// cell; or whether the path ended without one. A guess for prefetching: the owner
/// may be changing the bucket meanwhile, so the caller checks the entry again under the
/// lock before trusting it.
///
/// # Safety
///
/// `published` is null or a word that [`IndexTable::published`] returned for a table that
/// has not been dropped. (A table keeps every bucket array it ever published until it
/// drops; the arrays it outgrew read as empty.)
#[inline(always)]
pub(crate) unsafe fn peek(published: Published, h: u64) -> Peek {
    if published.is_null() {
        return Peek::ABSENT;
    }
    // SAFETY: forwarded from the caller; the home bucket is below the array's length.
    unsafe { peek_from(published, home(published, h), h) }
}

/// [`peek`] that starts at bucket `b`, the bucket of `h` in the array `published`
/// names, computed already (a multi-get computes it to prefetch the bucket, well
/// before it peeks).
///
/// # Safety
///
/// `published` is not null and was returned by [`IndexTable::published`] for a table
/// that has not been dropped, and `b` is below the length of its array.
#[inline(always)]
pub(crate) unsafe fn peek_from(published: Published, b: usize, h: u64) -> Peek {
    let low = published as usize & (ARRAY_ALIGN - 1);
    let base = published.cast::<u8>().wrapping_sub(low).cast::<Bucket>();
    let tag = tag_of(h);
    // SAFETY: by the contract, `b` is a bucket of the live, initialised array that
    // starts at `base`. Its fields are atomics, so shared access while the lock holder
    // writes them (or the kernel zeroes a retired array's pages) is allowed.
    if let Some(found) = peek_bucket(unsafe { &*base.add(b) }, tag) {
        return found;
    }
    // SAFETY: as above, for the whole array, whose length the word's low bits give.
    let buckets = unsafe { std::slice::from_raw_parts(base, decode_len(low)) };
    peek_further(buckets, b, tag)
}

/// One bucket of a [`peek`]'s probe path: the entry of the tag, or `Absent` when no key
/// overflowed the bucket; `None` when the path goes on.
#[inline(always)]
fn peek_bucket(bucket: &Bucket, tag: u8) -> Option<Peek> {
    let word = bucket.tag_word();
    let m = matching(word, tag);
    if m != 0 {
        let cell = bucket.cell(first_slot(m));
        return Some(Peek {
            cell: Cell::of(cell),
            e: cell.load(Relaxed),
        });
    }
    ((word >> OVERFLOW_SHIFT) as u8 == 0).then_some(Peek::ABSENT)
}

/// The rest of a [`peek`]'s probe path, after its first bucket: keys that overflowed
/// it, rare in a table kept below its load limit.
#[cold]
#[inline(never)]
fn peek_further(buckets: &[Bucket], first: usize, tag: u8) -> Peek {
    let mut b = first;
    for _ in 1..PEEK_BUCKETS.min(buckets.len()) {
        b = next_bucket(b, buckets.len());
        if let Some(found) = peek_bucket(&buckets[b], tag) {
            return found;
        }
    }
    Peek::UNKNOWN
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

    /// Small under Miri, which runs these too.
    const PEEK_ENTRIES: u64 = if cfg!(miri) { 300 } else { 20_000 };

    #[test]
    fn peek_finds_the_first_candidate() {
        let mut t = IndexTable::new();
        for e in 1..=PEEK_ENTRIES {
            t.insert_unique(hash(e), e, hash);
        }
        let word = t.published();
        let mut exact = 0;
        for e in 1..=PEEK_ENTRIES {
            // SAFETY: `word` was published by `t`, which is alive.
            let seen = unsafe { peek(word, hash(e)) };
            let first = t.candidates(hash(e)).next();
            let (pos, x) = first.expect("every entry has a candidate");
            // Never absent for a key in the table: a set trusts it to write a new item.
            assert_ne!(seen, Peek::ABSENT, "entry {e} reads as absent");
            if seen == Peek::UNKNOWN {
                // Only past the buckets a peek looks at.
                let len = t.buckets.len();
                let distance = (pos / 8 + len - home_of(hash(e), len)) % len;
                assert!(distance >= PEEK_BUCKETS, "entry {e}: {distance}");
                continue;
            }
            assert_eq!(seen.found(), Some((t.cell_at(pos), x)), "entry {e}");
            assert_eq!(t.get(pos), Some(x));
            exact += usize::from(x == e);
        }
        // Another entry comes first only on a 7-bit tag collision in the same bucket, and
        // spill chains longer than a peek looks are rare.
        assert!(exact as u64 > PEEK_ENTRIES * 95 / 100, "{exact}");
        // A key not in the table: nothing, or another entry that shares the tag.
        for e in PEEK_ENTRIES + 1..=PEEK_ENTRIES * 2 {
            // SAFETY: as above.
            if let Some((_, x)) = unsafe { peek(word, hash(e)) }.found() {
                assert!((1..=PEEK_ENTRIES).contains(&x), "{x}");
            }
        }
    }

    #[test]
    fn a_word_from_before_growth_stays_readable() {
        let mut t = IndexTable::new();
        for e in 1..=PEEK_ENTRIES / 8 {
            t.insert_unique(hash(e), e, hash);
        }
        let old = t.published();
        for e in PEEK_ENTRIES / 8 + 1..=PEEK_ENTRIES {
            t.insert_unique(hash(e), e, hash);
        }
        assert_ne!(t.published(), old, "the table grew");
        assert!(!t.retired.is_empty());
        let mut seen = 0;
        for e in 1..=PEEK_ENTRIES {
            // SAFETY: `old` was published by `t`, which is alive and keeps its arrays.
            // The array it names was outgrown: it reads as it was when it was outgrown,
            // or as empty once its pages went back to the kernel.
            if let Some((cell, x)) = unsafe { peek(old, hash(e)) }.found() {
                assert!((1..=PEEK_ENTRIES).contains(&x), "{x}");
                // Not where the grown table has its entries: the check under the lock
                // sends the lookup to search the bucket.
                assert_eq!(t.holds_at(cell, x), None);
                seen += 1;
            }
        }
        if RELEASES && decode_len(old as usize) >= PAGE_BUCKETS {
            // Released: a whole number of pages, page-aligned, all read as zeros.
            assert_eq!(seen, 0);
        } else {
            assert!(seen > 0);
        }
    }

    #[test]
    fn peek_races_with_inserts_removals_and_growth() {
        use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
        use std::sync::Mutex;
        let table = Mutex::new(IndexTable::new());
        let word = AtomicPtr::new(ptr::null_mut());
        let done = AtomicBool::new(false);
        let rounds = if cfg!(miri) { 200 } else { 200_000 };
        std::thread::scope(|sc| {
            sc.spawn(|| {
                let mut s = 0x5EED_u64;
                for _ in 0..rounds {
                    let e = 1 + xorshift(&mut s) % 5_000;
                    let mut t = table.lock().unwrap();
                    if let Some(o) = t.find_entry(hash(e), |x| x == e) {
                        o.remove();
                    } else {
                        t.insert_unique(hash(e), e, hash);
                    }
                    word.store(t.published(), Ordering::Release);
                }
                done.store(true, Ordering::Release);
            });
            sc.spawn(|| {
                let mut s = 0xFEED_u64;
                while !done.load(Ordering::Acquire) {
                    let e = 1 + xorshift(&mut s) % 5_000;
                    let w = word.load(Ordering::Acquire);
                    // SAFETY: `w` was published by `table`'s table, alive for the scope.
                    if let Some((_, x)) = unsafe { peek(w, hash(e)) }.found() {
                        // A slot emptied between reading its tag and its entry reads 0.
                        assert!(x <= 5_000, "{x}");
                    }
                }
            });
        });
    }

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
