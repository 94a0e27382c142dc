//! Raw segment memory shared between threads, and the crate's other raw-memory
//! helpers (prefetch, page release, a record read at an address carried from a peek).
//! With `table`'s lock-free peek, `spin`'s lock and the record accessors of
//! `store::record`, which call these with the protocol's proofs, the crate's `unsafe` code.
//!
//! A segment is one fixed-size byte buffer, allocated zeroed on first use (so pages that
//! were never written are not resident) and freed only when the store is dropped.
//! Several threads touch one segment at once, each in its own byte range, so the buffer
//! cannot be a `Box<[u8]>` behind `&`/`&mut`: it is a raw pointer, and each accessor hands
//! out a borrow of exactly the range asked for.
//!
//! The accessors are `unsafe fn`s whose contract is the crate's locking protocol
//! (see `docs/design.md`, "Who may touch which bytes"):
//!
//! 1. A reserved, unpublished region belongs to the writer that reserved it.
//! 2. Bytes of a published item are written only under the lock of the shard that
//!    indexes it, and its mutable bytes are read only under that lock.
//! 3. An item's immutable prefix and key may be read without the lock by the evictor,
//!    which owns the segment once it is sealed and its writers have finished.
//!
//! Bounds are always checked, so the only obligation left to callers is (1)-(3).

use std::alloc::{self, Layout};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, Ordering};

/// Alignment of a segment buffer. Kept at 16 so that `alloc_zeroed` maps to `calloc`,
/// which gets fresh zero pages from `mmap` without touching them.
const SEGMENT_ALIGN: usize = 16;

/// One segment's bytes. Two words, so that a segment's entry in the table of segments
/// (`SegmentMeta`, with its counters) fits one 64-byte cache line: a power-of-two stride,
/// which a lookup indexes with a shift.
pub(crate) struct SegmentMem {
    ptr: AtomicPtr<u8>,
    len: usize,
}

impl SegmentMem {
    /// An unallocated segment of `len` bytes.
    pub fn new(len: usize) -> SegmentMem {
        assert!(len > 0);
        SegmentMem {
            ptr: AtomicPtr::new(ptr::null_mut()),
            len,
        }
    }

    /// Put this unallocated segment at segment `index` of `region` (whose segments are
    /// this one's length), instead of allocating it: its bytes are the region's zero
    /// pages, untouched until first written. Racing first users place it at the same
    /// address. The segment must be forgotten ([`SegmentMem::forget`]) before it is
    /// dropped, and the region must outlive its use.
    pub fn place_in(&self, region: &LargePageRegion, index: usize) {
        assert!((index + 1) * self.len <= region.len);
        let at = (region.base + index * self.len) as *mut u8;
        // Only the first placement stores; a later one finds the same address there.
        let _ = self
            .ptr
            .compare_exchange(ptr::null_mut(), at, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Drop the segment's address without freeing it: for a segment placed in a region,
    /// whose memory goes with the region.
    pub fn forget(&mut self) {
        *self.ptr.get_mut() = ptr::null_mut();
    }

    /// Whether the buffer has been allocated.
    pub fn is_allocated(&self) -> bool {
        !self.ptr.load(Ordering::Acquire).is_null()
    }

    /// Allocate the buffer if this is its first use. Aborts on allocation failure, like
    /// any other allocation in Rust.
    pub fn ensure_allocated(&self) {
        if self.is_allocated() {
            return;
        }
        let layout = self.layout();
        // SAFETY: `layout` has a non-zero size (asserted in `new`).
        let p = unsafe { alloc::alloc_zeroed(layout) };
        if p.is_null() {
            alloc::handle_alloc_error(layout);
        }
        if self
            .ptr
            .compare_exchange(ptr::null_mut(), p, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // Another thread won the race; give ours back.
            // SAFETY: `p` was allocated just above with this layout and never shared.
            unsafe { alloc::dealloc(p, layout) };
        }
    }

    fn layout(&self) -> Layout {
        Layout::from_size_align(self.len, SEGMENT_ALIGN).expect("segment layout")
    }

    // Inlined everywhere by force: with one more caller (the item dump) LLVM made it a
    // call of its own, on every get's path.
    #[inline(always)]
    fn base(&self, off: usize, len: usize) -> NonNull<u8> {
        assert!(
            off <= self.len && len <= self.len - off,
            "segment range {off}+{len} out of bounds ({})",
            self.len
        );
        let p = self.ptr.load(Ordering::Acquire);
        let p = NonNull::new(p).expect("segment not allocated");
        // SAFETY: `off <= self.len` (checked above), so the result stays inside (or one
        // past the end of) the allocation of `self.len` bytes.
        unsafe { p.add(off) }
    }

    /// The offset of `bytes` in this segment, if they lie wholly inside it. Address
    /// arithmetic only: nothing is dereferenced.
    pub fn offset_of(&self, bytes: &[u8]) -> Option<usize> {
        let base = self.ptr.load(Ordering::Acquire) as usize;
        let start = bytes.as_ptr() as usize;
        let off = start.checked_sub(base)?;
        (base != 0 && off <= self.len && bytes.len() <= self.len - off).then_some(off)
    }

    /// Borrow `len` bytes at `off` for reading.
    ///
    /// # Safety
    /// No thread may write any byte of the range while the borrow lives (protocol rules
    /// 2 and 3 in the module docs).
    #[inline]
    pub unsafe fn bytes(&self, off: usize, len: usize) -> &[u8] {
        let p = self.base(off, len);
        // SAFETY: the range is in bounds of a live allocation that is initialised (it was
        // zeroed), and the caller guarantees no concurrent writer for the borrow's life.
        unsafe { std::slice::from_raw_parts(p.as_ptr(), len) }
    }

    /// Borrow the record at `off` for reading: `len_of` reads its first `head` bytes
    /// and returns the record's length, with whatever it decoded on the way. One load
    /// of the segment's address and one more bounds check, where two calls of
    /// [`SegmentMem::bytes`] would repeat both.
    ///
    /// # Safety
    /// As for [`SegmentMem::bytes`], for the whole record.
    #[inline(always)]
    pub unsafe fn record<H: RecordHead>(
        &self,
        off: usize,
        head: usize,
        len_of: H,
    ) -> (H::Out, &[u8]) {
        let p = self.base(off, head);
        // SAFETY: `base` checked `off + head` against the allocation; the caller
        // guarantees no concurrent writer of these bytes.
        let (len, decoded) = len_of.decode(unsafe { std::slice::from_raw_parts(p.as_ptr(), head) });
        // `base` checked `off <= self.len`.
        assert!(
            len <= self.len - off,
            "segment record {off}+{len} out of bounds ({})",
            self.len
        );
        // SAFETY: in bounds (checked just above) of a live, initialised allocation; the
        // caller guarantees no concurrent writer for the borrow's life.
        (decoded, unsafe {
            std::slice::from_raw_parts(p.as_ptr(), len)
        })
    }

    /// The address of byte `off`, for a lookup that finds a record without the lock and
    /// reads it under the lock ([`record_at`]); `None` while the segment has no memory.
    /// Once the segment has memory its address never changes: a segment keeps its
    /// memory until the store drops.
    #[inline(always)]
    pub fn address_of(&self, off: usize) -> Option<*const u8> {
        let p = self.ptr.load(Ordering::Acquire);
        (!p.is_null()).then(|| p.wrapping_add(off).cast_const())
    }

    /// Borrow `len` bytes at `off` for writing.
    ///
    /// # Safety
    /// No other thread may read or write any byte of the range while the borrow lives,
    /// and this thread must hold no other borrow overlapping it (protocol rules 1 and 2).
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn bytes_mut(&self, off: usize, len: usize) -> &mut [u8] {
        let p = self.base(off, len);
        // SAFETY: in bounds of a live, initialised allocation; the caller guarantees
        // exclusive access to the range for the borrow's life.
        unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), len) }
    }

    /// Lock the segment's pages into RAM (`mlock`: resident from now on, never swapped).
    /// False where the kernel refuses (without `CAP_IPC_LOCK`, past `RLIMIT_MEMLOCK`) or
    /// the segment has no memory yet; always true under Miri and off Linux, where it does
    /// nothing.
    pub fn lock(&self) -> bool {
        let p = self.ptr.load(Ordering::Acquire);
        if p.is_null() {
            return false;
        }
        #[cfg(all(target_os = "linux", not(miri)))]
        {
            // SAFETY: `mlock` reads and writes no memory of this program; the range is
            // this segment's allocation (or its slice of the large-page region), and
            // the kernel rounds it out to whole pages, which it only makes resident.
            unsafe { libc::mlock(p.cast::<libc::c_void>(), self.len) == 0 }
        }
        #[cfg(not(all(target_os = "linux", not(miri))))]
        true
    }

    /// Give the segment's whole pages back to the kernel, keeping its address: they read
    /// as zeros afterwards and cost no memory until written again (the partial pages at
    /// either end of a heap segment keep their bytes; nothing reads a segment's bytes
    /// before they are written again). For a segment retired by a lower memory limit.
    ///
    /// # Safety
    /// No thread reads or writes any byte of the segment during the call or holds a
    /// borrow of one, until the segment is handed out again.
    pub unsafe fn release(&self) {
        let p = self.ptr.load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: the whole segment is this allocation's, and the caller guarantees
            // that nobody reads it, so its bytes may turn to zero.
            unsafe { release_pages(p, self.len) };
        }
    }

    /// Move `len` bytes from `src` to `dst` (ranges may overlap), as in `memmove`.
    ///
    /// # Safety
    /// No other thread may touch either range during the call, and this thread holds no
    /// borrow of them.
    #[inline]
    pub unsafe fn move_within(&self, src: usize, dst: usize, len: usize) {
        let s = self.base(src, len);
        let d = self.base(dst, len);
        // SAFETY: both ranges are in bounds of the same live allocation (checked by
        // `base`); `ptr::copy` allows overlap; the caller guarantees exclusive access.
        unsafe { ptr::copy(s.as_ptr(), d.as_ptr(), len) }
    }
}

/// Ask the CPU to bring the cache lines of `start..start + len` into cache, as far as
/// the first two lines and the last go: all of a range of up to 129 bytes (a record's
/// header, a key of up to 39 bytes and the start of its value); a longer range's middle
/// lines are left to be fetched on use. Safe whatever the range and whoever writes it:
/// a prefetch reads nothing the program can observe (see [`prefetch_line`]).
#[inline(always)]
pub(crate) fn prefetch_head(start: usize, len: usize) {
    prefetch_line(start);
    prefetch_line(start.wrapping_add(64));
    prefetch_line(start.wrapping_add(len.saturating_sub(1)));
}

/// How a record's length is found from its first bytes, for [`SegmentMem::record`] and
/// [`record_at`]: a trait with an always-inlined method rather than a closure, which the
/// compiler stopped inlining once the decoding grew (a call on every lookup).
pub(crate) trait RecordHead {
    type Out;
    /// The record's length (0: read nothing past the head) and what was decoded.
    fn decode(self, head: &[u8]) -> (usize, Self::Out);
}

/// [`SegmentMem::record`] at an address from [`SegmentMem::address_of`], without the
/// segment: no load of its address and no bounds checks.
///
/// # Safety
/// `rec` is non-null, came from [`SegmentMem::address_of`] for the start of a record
/// that was written whole inside its segment, and `len_of` returns that record's
/// length (or less). No thread may write the bytes while the borrow lives (rule 2), and
/// the segment outlives it.
#[inline(always)]
pub(crate) unsafe fn record_at<'a, H: RecordHead>(
    rec: *const u8,
    head: usize,
    len_of: H,
) -> (H::Out, &'a [u8]) {
    // SAFETY: the record's first `head` bytes are inside the segment (the caller's
    // record is at least that long), initialised, and not written meanwhile.
    let (len, decoded) = len_of.decode(unsafe { std::slice::from_raw_parts(rec, head) });
    // SAFETY: `len` bytes from `rec` are the record (or its start), as above.
    (decoded, unsafe { std::slice::from_raw_parts(rec, len) })
}

/// Prefetch the cache line holding address `addr` for reading. Any address will do:
/// the instruction never faults and has no effect the program can observe (which is
/// also why it takes an integer and not a pointer). A no-op off x86-64 and under Miri.
#[inline(always)]
pub(crate) fn prefetch_line(addr: usize) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: `_mm_prefetch` needs SSE, which every x86-64 CPU has; PREFETCHT0 does not
    // access memory in the sense of the memory model (it cannot fault, and no value is
    // read), so a dangling or unmapped address is allowed.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(addr as *const i8);
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    let _ = addr;
}

/// Give the whole pages inside `ptr..ptr + len` back to the kernel, keeping the
/// mapping: they read as zeros afterwards and cost no memory until written again.
/// For bucket arrays the index has outgrown (see `IndexTable::grow`). Does nothing
/// under Miri or off Linux.
///
/// # Safety
///
/// The caller owns the range, writes nothing to it any more, and everything in it may
/// change to zero at any time without a write by this program: here, atomics that
/// lock-free readers only take as hints.
pub(crate) unsafe fn release_pages(ptr: *const u8, len: usize) {
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        const PAGE: usize = 4096;
        let start = (ptr as usize).next_multiple_of(PAGE);
        let end = (ptr as usize + len) & !(PAGE - 1);
        if end > start {
            // SAFETY: whole pages inside the caller's range (see the contract);
            // MADV_DONTNEED on private anonymous or heap memory keeps it mapped and
            // makes it read as zeros. A failure only means the memory stays resident.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
        }
    }
    #[cfg(not(all(target_os = "linux", not(miri))))]
    let _ = (ptr, len);
}

/// The page size `-L` asks the kernel for: a transparent huge page on x86-64 (and on
/// arm64 with 4 KiB base pages).
pub(crate) const LARGE_PAGE_BYTES: usize = 2 << 20;

/// One anonymous mapping for every segment of a store, aligned to
/// [`LARGE_PAGE_BYTES`] and marked `MADV_HUGEPAGE` (memcached `-L`), so that the
/// kernel backs it with transparent huge pages: a random read over gigabytes of items
/// then misses the TLB far less often. Heap segments come from separate `calloc`s of
/// a segment each, which are not aligned to a huge page, so the kernel cannot back
/// them with one even when transparent huge pages are always on.
///
/// Nothing is touched here: a huge page is faulted in (zeroed) when a segment in it is
/// first written, so the resident set still grows with use, 2 MiB at a time. The
/// mapping does not reserve swap (`MAP_NORESERVE`), as lazily `calloc`ed segments do
/// not either.
pub(crate) struct LargePageRegion {
    /// The mapping as `mmap` returned it.
    map: usize,
    map_len: usize,
    /// The first huge page boundary in it: where segment 0 starts.
    base: usize,
    /// Bytes usable from `base`.
    len: usize,
}

impl LargePageRegion {
    /// Map `len` bytes. Fails where `mmap` does, and where `madvise(MADV_HUGEPAGE)`
    /// does: a kernel without transparent huge pages (`EINVAL`), or no Linux at all.
    pub fn map(len: usize) -> std::io::Result<LargePageRegion> {
        #[cfg(all(target_os = "linux", not(miri)))]
        {
            let len = len.next_multiple_of(LARGE_PAGE_BYTES);
            // One huge page more, to align the start within the mapping.
            let map_len = len + LARGE_PAGE_BYTES;
            // SAFETY: a fresh private anonymous mapping at an address of the kernel's
            // choosing; it overlaps nothing of ours.
            let map = unsafe {
                libc::mmap(
                    ptr::null_mut(),
                    map_len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                    -1,
                    0,
                )
            };
            if map == libc::MAP_FAILED {
                return Err(std::io::Error::last_os_error());
            }
            let region = LargePageRegion {
                map: map as usize,
                map_len,
                base: (map as usize).next_multiple_of(LARGE_PAGE_BYTES),
                len,
            };
            // SAFETY: `base..base + len` lies inside the mapping just made (the extra
            // page covers the alignment); the advice changes no byte's value.
            let advised = unsafe {
                libc::madvise(region.base as *mut libc::c_void, len, libc::MADV_HUGEPAGE)
            };
            if advised != 0 {
                // Dropping `region` unmaps it.
                return Err(std::io::Error::last_os_error());
            }
            Ok(region)
        }
        #[cfg(not(all(target_os = "linux", not(miri))))]
        {
            let _ = len;
            Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "transparent huge pages are a Linux feature",
            ))
        }
    }
}

impl Drop for LargePageRegion {
    fn drop(&mut self) {
        #[cfg(all(target_os = "linux", not(miri)))]
        // SAFETY: the mapping made in `map`, unmapped once. The store drops its segments
        // (and with them every borrow of their bytes) before this region.
        unsafe {
            libc::munmap(self.map as *mut libc::c_void, self.map_len);
        }
        #[cfg(not(all(target_os = "linux", not(miri))))]
        let _ = (self.map, self.map_len);
    }
}

impl Drop for SegmentMem {
    fn drop(&mut self) {
        let p = *self.ptr.get_mut();
        // A segment placed in a region was forgotten before this (see `place_in`).
        if !p.is_null() {
            // SAFETY: `p` came from `alloc_zeroed` with `self.layout()`, and `&mut self`
            // means no borrow of the buffer is alive.
            unsafe { alloc::dealloc(p, self.layout()) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The region's segments: aligned to a huge page, zero, disjoint. Not under Miri,
    /// which has no `mmap`; skipped on a kernel built without transparent huge pages.
    #[test]
    #[cfg_attr(miri, ignore)]
    fn large_page_segments_are_aligned_zeroed_and_disjoint() {
        const LEN: usize = 1 << 20;
        let region = match LargePageRegion::map(3 * LEN) {
            Ok(region) => region,
            Err(e) if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists() => {
                eprintln!("skipped: no transparent huge pages ({e})");
                return;
            }
            Err(e) => panic!("large page region: {e}"),
        };
        let mut segments: Vec<SegmentMem> = (0..3).map(|_| SegmentMem::new(LEN)).collect();
        for (i, s) in segments.iter().enumerate() {
            assert!(!s.is_allocated());
            s.place_in(&region, i);
            s.place_in(&region, i);
            let at = s.ptr.load(Ordering::Relaxed) as usize;
            assert_eq!(
                at,
                segments[0].ptr.load(Ordering::Relaxed) as usize + i * LEN
            );
            // SAFETY: single-threaded test; each borrow ends before the next access.
            assert!(unsafe { s.bytes(0, LEN) }.iter().all(|&b| b == 0));
            // SAFETY: as above.
            unsafe { s.bytes_mut(0, LEN) }.fill(i as u8 + 1);
        }
        assert_eq!(
            segments[0].ptr.load(Ordering::Relaxed) as usize % LARGE_PAGE_BYTES,
            0
        );
        for (i, s) in segments.iter().enumerate() {
            // SAFETY: as above.
            assert!(unsafe { s.bytes(0, LEN) }.iter().all(|&b| b == i as u8 + 1));
        }
        segments.iter_mut().for_each(SegmentMem::forget);
        drop(segments);
        drop(region);
    }

    /// A released segment keeps its address, reads as zeros inside its whole pages and
    /// takes writes again. Not under Miri, where releasing is a no-op.
    #[test]
    #[cfg_attr(miri, ignore)]
    fn released_segment_reads_zero_and_is_written_again() {
        let s = SegmentMem::new(1 << 20);
        s.ensure_allocated();
        let before = s.ptr.load(Ordering::Relaxed);
        // SAFETY: single-threaded test; each borrow ends before the next access.
        unsafe { s.bytes_mut(0, 1 << 20) }.fill(7);
        // SAFETY: no borrow of the segment is alive.
        unsafe { s.release() };
        assert_eq!(s.ptr.load(Ordering::Relaxed), before);
        // Every byte from the first page boundary to the last.
        let first = (before as usize).next_multiple_of(4096) - before as usize;
        let last = ((before as usize + (1 << 20)) & !4095) - before as usize;
        // SAFETY: as above.
        assert!(unsafe { s.bytes(first, last - first) }
            .iter()
            .all(|&b| b == 0));
        // SAFETY: as above.
        unsafe { s.bytes_mut(4096, 4) }.copy_from_slice(b"back");
        // SAFETY: as above.
        assert_eq!(unsafe { s.bytes(4096, 4) }, b"back");
    }

    #[test]
    fn lazily_allocated_and_zeroed() {
        let s = SegmentMem::new(64);
        assert!(!s.is_allocated());
        s.ensure_allocated();
        s.ensure_allocated();
        assert!(s.is_allocated());
        // SAFETY: single-threaded test, no other borrow.
        assert!(unsafe { s.bytes(0, 64) }.iter().all(|&b| b == 0));
    }

    #[test]
    fn write_read_and_move() {
        let s = SegmentMem::new(32);
        s.ensure_allocated();
        // SAFETY: single-threaded test; the mutable borrow ends before the next access.
        unsafe { s.bytes_mut(4, 4) }.copy_from_slice(b"abcd");
        // SAFETY: as above.
        unsafe { s.move_within(4, 2, 4) };
        // SAFETY: as above.
        assert_eq!(unsafe { s.bytes(2, 4) }, b"abcd");
        // SAFETY: as above.
        unsafe { s.move_within(2, 10, 4) };
        // SAFETY: as above.
        assert_eq!(unsafe { s.bytes(10, 4) }, b"abcd");
    }

    #[test]
    fn disjoint_ranges_from_two_threads() {
        let s = SegmentMem::new(16);
        s.ensure_allocated();
        std::thread::scope(|sc| {
            // SAFETY: each thread borrows its own half; the halves do not overlap.
            sc.spawn(|| unsafe { s.bytes_mut(0, 8) }.fill(1));
            // SAFETY: as above.
            sc.spawn(|| unsafe { s.bytes_mut(8, 8) }.fill(2));
        });
        // SAFETY: the threads have joined.
        assert_eq!(unsafe { s.bytes(6, 4) }, &[1, 1, 2, 2]);
    }

    #[test]
    #[should_panic(expected = "out of bounds")]
    fn out_of_bounds_panics() {
        let s = SegmentMem::new(8);
        s.ensure_allocated();
        // SAFETY: single-threaded test (the call panics before borrowing).
        let _ = unsafe { s.bytes(4, 5) };
    }

    /// A record whose first byte is its length.
    #[derive(Clone, Copy)]
    struct FirstByte;

    impl RecordHead for FirstByte {
        type Out = u8;
        fn decode(self, head: &[u8]) -> (usize, u8) {
            (usize::from(head[0]), head[0])
        }
    }

    /// A record of a fixed length.
    struct Fixed(usize);

    impl RecordHead for Fixed {
        type Out = ();
        fn decode(self, _: &[u8]) -> (usize, ()) {
            (self.0, ())
        }
    }

    #[test]
    fn record_reads_its_length_from_its_head() {
        let s = SegmentMem::new(32);
        s.ensure_allocated();
        // Two records back to back: a length byte, then that many bytes in all.
        // SAFETY: single-threaded test; the mutable borrow ends before the reads.
        unsafe { s.bytes_mut(0, 9) }.copy_from_slice(&[3, b'a', b'b', 6, 1, 2, 3, 4, 5]);
        let len_of = FirstByte;
        // SAFETY: as above.
        assert_eq!(unsafe { s.record(0, 1, len_of) }, (3, &[3, b'a', b'b'][..]));
        // SAFETY: as above.
        let second = unsafe { s.record(3, 1, len_of) };
        assert_eq!(second, (6, &[6, 1, 2, 3, 4, 5][..]));
        // A record that ends exactly at the end of the segment.
        // SAFETY: as above.
        unsafe { s.bytes_mut(28, 1) }.fill(4);
        // SAFETY: as above.
        assert_eq!(unsafe { s.record(28, 1, len_of) }.1.len(), 4);
    }

    #[test]
    #[should_panic(expected = "out of bounds")]
    fn record_past_the_end_panics() {
        let s = SegmentMem::new(16);
        s.ensure_allocated();
        // SAFETY: single-threaded test (the call panics before borrowing the record).
        let _ = unsafe { s.record(10, 1, Fixed(7)) };
    }

    #[test]
    #[should_panic(expected = "out of bounds")]
    fn record_head_past_the_end_panics() {
        let s = SegmentMem::new(16);
        s.ensure_allocated();
        // SAFETY: single-threaded test (the call panics before borrowing anything).
        let _ = unsafe { s.record(14, 4, Fixed(4)) };
    }

    #[test]
    fn drop_unallocated_is_fine() {
        drop(SegmentMem::new(8));
    }

    #[test]
    fn offset_of_finds_only_ranges_inside() {
        let s = SegmentMem::new(32);
        assert_eq!(s.offset_of(b"abc"), None, "unallocated");
        s.ensure_allocated();
        // SAFETY: no other borrow of the segment exists.
        let inside = unsafe { s.bytes(5, 10) };
        assert_eq!(s.offset_of(inside), Some(5));
        assert_eq!(s.offset_of(&inside[10..]), Some(15));
        // SAFETY: as above.
        let tail = unsafe { s.bytes(30, 2) };
        assert_eq!(s.offset_of(tail), Some(30));
        let elsewhere = [0u8; 4];
        assert_eq!(s.offset_of(&elsewhere), None);
        let other = SegmentMem::new(32);
        other.ensure_allocated();
        // SAFETY: no other borrow of `other` exists.
        assert_eq!(s.offset_of(unsafe { other.bytes(0, 4) }), None);
    }
}
