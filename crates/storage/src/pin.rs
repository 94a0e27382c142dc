//! Value pins: a reader keeps an item's value bytes where they are after the lookup's
//! callback has returned, so that the server can hand them to the kernel in a vectored
//! send instead of copying them into its output buffer first.
//!
//! This module holds the pin's types and the count's closed bit, below the store: the
//! operations on the count are the store's (`pin`, `unpin`, `close_to_pins`), and the
//! read of a pinned value is a record accessor like the others (`store::record`).
//!
//! A pin is counted on the value's segment (`SegmentMeta::pins`). While the count is not
//! zero, nothing rewrites the segment's bytes of existing items:
//!
//! ```text
//!   evicting or compacting the segment   closes it first: CAS pins 0 -> CLOSED,
//!                                        so a pinned segment is passed over (it goes to
//!                                        the back of the FIFO) and a closed one
//!                                        refuses new pins until it is reopened
//!   reusing a dead segment               only when live_bytes == 0, then pins == 0
//!   incr/decr in place                   a pinned segment gets a new item instead,
//!                                        with the same bytes the in-place write
//!                                        would have left
//! ```
//!
//! Writers append to the free end of an open segment, never over an existing item, so
//! they need no check. A pin is meant to live for one event-loop turn (the server copies
//! whatever the socket did not take and unpins), so passing over pinned segments costs
//! eviction nothing measurable; a pin that is never released only keeps its segment
//! from being reused, it cannot expose changing bytes.
//!
//! Ordering. The pin is taken under the item's shard lock, while the item is indexed.
//! An unlink happens under the same lock later and decrements `live_bytes` with release
//! ordering, so a dead-segment reuser that reads `live_bytes == 0` with acquire ordering
//! and then `pins` sees the pin or its release. The closer's compare-exchange and the
//! reader's increment are read-modify-writes of one atomic, so exactly one sees the
//! other: either the closer finds a count and passes over the segment, or the reader
//! finds `CLOSED`, gives its increment back, and the caller copies instead. The release
//! decrement of an unpin pairs with the closer's acquire, so the kernel's reads of the
//! bytes happen before anyone overwrites them.

/// `SegmentMeta::pins` bit set while the evictor walks (and may move bytes in) the
/// segment: no new pin may be taken.
pub(crate) const CLOSED: u32 = 1 << 31;

/// A pinned value: its bytes stay as they are until it is given to
/// [`Store::unpin`](crate::Store::unpin).
///
/// Read them with [`Store::pinned`](crate::Store::pinned). Dropping a pin instead of unpinning it keeps its
/// segment from ever being evicted or reused (debug builds panic to catch it).
#[must_use = "a pin must be given back with Store::unpin"]
#[derive(Debug)]
pub struct ValuePin {
    pub(crate) seg: u32,
    pub(crate) off: u32,
    pub(crate) len: u32,
}

impl ValuePin {
    /// Length of the pinned value in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the pinned value is empty (values shorter than the server's threshold are
    /// never pinned, so in practice never).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for ValuePin {
    fn drop(&mut self) {
        if cfg!(debug_assertions) && !std::thread::panicking() {
            panic!(
                "ValuePin of segment {} dropped without Store::unpin",
                self.seg
            );
        }
    }
}

/// Where an [`ItemRef`](crate::ItemRef)'s bytes live, so that
/// [`Store::pin`](crate::Store::pin) can find the segment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Origin(u32);

impl Origin {
    /// Bytes that are not in a segment (built by the caller): never pinned.
    pub const DETACHED: Origin = Origin(0);

    #[inline(always)]
    pub(crate) fn segment_id(seg: u32) -> Origin {
        Origin(seg + 1)
    }

    #[inline]
    pub(crate) fn segment(self) -> Option<u32> {
        self.0.checked_sub(1)
    }
}
