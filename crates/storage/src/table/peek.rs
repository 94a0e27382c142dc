//! Lock-free peeks: a multi-get reads a key's bucket without the shard lock, to find
//! its record early enough to prefetch it, and checks what it saw under the lock.
//!
//! The shard lock holder is the only writer, but [`peek`] reads a bucket without the
//! lock. So every bucket field is an atomic (relaxed loads and stores are the plain
//! moves a non-atomic field would compile to), a table publishes where its array is
//! (`IndexTable::published`), and an array the table outgrows is kept until the table
//! is dropped (`array.rs`). The peek's reads and the one load of
//! [`IndexTable::holds_at`] (a peek's slot address, checked to be in the current array)
//! are this file's `unsafe`, tested under Miri.

use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::array::{decode_len, Published, ARRAY_ALIGN};
use super::bucket::{first_slot, home_of, matching, next_bucket, tag_of, Bucket, OVERFLOW_SHIFT};
use super::{IndexTable, Pos};

/// Buckets a [`peek`] follows along a spill chain before it gives up.
const PEEK_BUCKETS: usize = 4;

/// Where a [`peek`] saw an entry: the address of the slot's entry word in the bucket
/// array it read, for [`IndexTable::holds_at`] to check under the lock. An address, not
/// a position, so that the check is a range test and one load. Made only here, from a
/// slot (never a tag word), or as [`Cell::NONE`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cell(pub(super) usize);

impl Cell {
    /// No slot: no table holds it.
    pub(crate) const NONE: Cell = Cell(0);
    /// No slot either, told apart from `NONE` by its users.
    pub(crate) const OTHER: Cell = Cell(1);

    #[inline(always)]
    pub(super) fn of(cell: &AtomicU64) -> Cell {
        Cell(ptr::from_ref(cell) as usize)
    }
}

impl IndexTable {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::array::{PAGE_BUCKETS, RELEASES};
    use crate::table::testing::{hash, xorshift};

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
}
