//! The segment pool: per-segment bookkeeping, the free list, the queue of sealed
//! segments and the writer groups that each append to one open ("active") segment.
//!
//! ```text
//!   free list ──take──> active (one per writer group) ──full: seal──> sealed queue
//!       ^                  ^  ^  ^                                        │
//!       │                  │  │  └── dead segment (no live item), no walk ┤
//!       │                  │  └───── mostly dead, live ones kept ─────────┤
//!       │                  └──────── evicted segment, hot items kept ─────┘
//!   (only at start: segments are never given back to the allocator)
//! ```
//!
//! Which of these a writer takes, in which order, and what an eviction keeps, is the
//! eviction policy's (`policy`), which also owns the sealed queue's order.
//!
//! A writer thread belongs to group `writer_id % groups`, so worker threads mostly bump
//! pointers in different segments. The group mutex is held only to bump the offset, or,
//! once per segment, while a new segment is found (which may evict the oldest one).
//! The pool mutex is held only to push or pop a segment id: once per segment, never
//! per request.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::policy::SealedQueue;
use crate::segment::SegmentMem;

/// Shared bookkeeping of one segment, one cache line each.
#[repr(align(64))]
pub(crate) struct SegmentMeta {
    /// The bytes.
    pub mem: SegmentMem,
    /// Reservations handed out in this segment whose writer has not finished yet.
    /// The evictor waits for 0 before it reads the segment.
    pub pending: AtomicU32,
    /// Bytes of items in this segment that the index still points to.
    pub live_bytes: AtomicU64,
    /// Value pins held by readers, plus `pin::CLOSED` while the evictor walks it.
    pub pins: AtomicU32,
    /// The CAS id narrow records of this segment count from (`item.rs`): the next id
    /// when the segment was last emptied. Written only by the writer that takes the
    /// segment empty, under its group lock, before any reservation in it; read under
    /// the shard lock of an item in it, after that item was published.
    pub cas_base: AtomicU64,
    /// The CAS id of the last reservation in the segment, for the flash tier's age pass
    /// (`store/flash.rs`): every item written in it is at least as old as that id's
    /// second. `u64::MAX` before the first and once the pass has walked the segment.
    pub last_cas: AtomicU64,
}

impl SegmentMeta {
    /// Whether a reader holds a value pin on this segment (see `Store::has_pins`).
    #[inline]
    pub(crate) fn pinned(&self) -> bool {
        self.pins.load(Ordering::Acquire) & !crate::pin::CLOSED != 0
    }

    pub fn new(len: usize) -> SegmentMeta {
        SegmentMeta {
            mem: SegmentMem::new(len),
            pending: AtomicU32::new(0),
            live_bytes: AtomicU64::new(0),
            pins: AtomicU32::new(0),
            cas_base: AtomicU64::new(0),
            last_cas: AtomicU64::new(u64::MAX),
        }
    }
}

/// Segments that are not open for writing.
pub(crate) struct PoolState {
    /// Holding nothing: never used yet (allocated on first use), or retired after the
    /// memory limit was lowered (pages given back).
    pub free: Vec<u32>,
    /// Full segments, each with the number of bytes written, in the order the policy
    /// evicts them.
    pub sealed: SealedQueue,
    /// Segments `0..provisioned` have been handed to `free` at some time; the rest of
    /// the store's table waits for a higher memory limit (`cache_memlimit`).
    pub provisioned: usize,
    /// Segments that may hold items at once: the memory limit in segments.
    pub limit: usize,
}

impl PoolState {
    /// Segments holding items now: open, sealed, or being evicted.
    pub fn in_use(&self) -> usize {
        self.provisioned - self.free.len()
    }
}

/// The open segment of one writer group: (segment id, bytes used), if any.
#[repr(align(128))]
pub(crate) struct GroupSlot(Mutex<Option<(u32, u32)>>);

impl GroupSlot {
    pub fn new() -> GroupSlot {
        GroupSlot(Mutex::new(None))
    }

    #[inline]
    pub fn lock(&self) -> MutexGuard<'_, Option<(u32, u32)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A region handed to one writer. It must be either published (linked into the index)
/// or abandoned (overwritten by a padding record), then released, before the same thread
/// reserves again.
///
/// It is the writer's proof that the region is its own (rule 1 of the locking
/// protocol): the record accessors hand out its bytes for a `&mut Reservation`, so it is
/// neither `Clone` nor `Copy`, and `release` and `abandon` consume it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Reservation {
    pub seg: u32,
    pub off: u32,
    pub len: u32,
    /// The item's CAS id, taken with its space, so that its record's size (narrow or
    /// wide, from the segment's base) is known before it is written.
    pub cas: u64,
    /// Whether the record holds its CAS id whole.
    pub wide: bool,
    /// The item's memcached size (`ITEM_ntotal`) and slab class, for the per-class
    /// counters.
    pub ntotal: u32,
    pub class: u8,
}

static NEXT_WRITER: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static WRITER_ID: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// This thread's writer number (assigned round-robin on first use).
#[inline]
pub(crate) fn writer_id() -> usize {
    WRITER_ID.with(|w| {
        let mut id = w.get();
        if id == usize::MAX {
            id = NEXT_WRITER.fetch_add(1, Ordering::Relaxed);
            w.set(id);
        }
        id
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout() {
        assert_eq!(std::mem::size_of::<GroupSlot>(), 128);
        // 24 bytes of location, length and cas, and the per-class counters' size and
        // class.
        assert_eq!(std::mem::size_of::<Reservation>(), 32);
        // One cache line, a power of two: a lookup indexes the segment table with a
        // shift, where the fields' own size as a stride would need a multiply on every key.
        assert_eq!(std::mem::size_of::<SegmentMeta>(), 64);
    }

    #[test]
    fn writer_ids_are_stable_per_thread_and_distinct() {
        let a = writer_id();
        assert_eq!(a, writer_id());
        let b = std::thread::spawn(writer_id).join().unwrap();
        assert_ne!(a, b);
    }
}
