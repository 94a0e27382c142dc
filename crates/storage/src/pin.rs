//! Value pins: a reader keeps an item's value bytes where they are after the lookup's
//! callback has returned, so that the server can hand them to the kernel in a vectored
//! send instead of copying them into its output buffer first.
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

use std::sync::atomic::Ordering;

use crate::store::Store;

/// `SegmentMeta::pins` bit set while the evictor walks (and may move bytes in) the
/// segment: no new pin may be taken.
pub(crate) const CLOSED: u32 = 1 << 31;

/// A pinned value: its bytes stay as they are until it is given to [`Store::unpin`].
///
/// Read them with [`Store::pinned`]. Dropping a pin instead of unpinning it keeps its
/// segment from ever being evicted or reused (debug builds panic to catch it).
#[must_use = "a pin must be given back with Store::unpin"]
#[derive(Debug)]
pub struct ValuePin {
    seg: u32,
    off: u32,
    len: u32,
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

impl Store {
    /// Pin the value of an item handed to a lookup's callback (its `origin` and `value`,
    /// under its shard lock), so that its bytes can be read after the callback returns.
    /// `None` when the item's segment is being evicted right now, or when the bytes do
    /// not come from this store's segments: the caller copies the value instead.
    pub fn pin(&self, origin: Origin, value: &[u8]) -> Option<ValuePin> {
        let seg = origin.segment()?;
        let meta = self.segments.get(seg as usize)?;
        let off = meta.mem.offset_of(value)?;
        let was = meta.pins.fetch_add(1, Ordering::Acquire);
        if was & CLOSED != 0 {
            meta.pins.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(ValuePin {
            seg,
            off: off as u32,
            len: value.len() as u32,
        })
    }

    /// The bytes of a pinned value.
    #[inline]
    pub fn pinned<'a>(&'a self, pin: &'a ValuePin) -> &'a [u8] {
        // SAFETY: while `pin` lives, its segment's pin count is not zero, so no eviction,
        // compaction, dead-segment reuse or in-place write touches the item's bytes (see
        // the module docs); writers only append past them. The borrow cannot outlive the
        // pin, because it borrows it.
        unsafe { self.mem(pin.seg).bytes(pin.off as usize, pin.len as usize) }
    }

    /// Give a pin back.
    #[inline]
    pub fn unpin(&self, pin: ValuePin) {
        self.segments[pin.seg as usize]
            .pins
            .fetch_sub(1, Ordering::Release);
        std::mem::forget(pin);
    }

    /// Close segment `seg` to pins before walking it: false (and nothing changed) when
    /// a pin is held, and the segment must be passed over.
    pub(crate) fn close_to_pins(&self, seg: u32) -> bool {
        self.segments[seg as usize]
            .pins
            .compare_exchange(0, CLOSED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Reopen a segment closed by [`Store::close_to_pins`] once its walk is over.
    pub(crate) fn reopen_to_pins(&self, seg: u32) {
        self.segments[seg as usize]
            .pins
            .fetch_and(!CLOSED, Ordering::Release);
    }

    /// Whether a reader holds a pin in segment `seg`. Exact only under a shard lock for
    /// the items that shard indexes (pins are taken under it); a stale true only sends
    /// the caller down a slower path.
    #[inline]
    pub(crate) fn has_pins(&self, seg: u32) -> bool {
        self.segments[seg as usize].pinned()
    }
}

/// Where an [`ItemRef`]'s bytes live, so that [`Store::pin`] can find the segment.
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
    fn segment(self) -> Option<u32> {
        self.0.checked_sub(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{StoreMode, StoreOutcome};

    #[test]
    fn a_closed_segment_refuses_pins_until_reopened() {
        let s = Store::builder().memory_limit(2 << 20).build().unwrap();
        let st = s.store(StoreMode::Set, b"k", 0, 0, b"some value", 1);
        assert_eq!(st, StoreOutcome::Stored);
        let pin_k = || {
            s.get(b"k", 1, |it| s.pin(it.origin, it.value))
                .hit()
                .flatten()
        };
        let p = pin_k().expect("pinned");
        assert_eq!(s.pinned(&p), b"some value");
        let seg = p.seg;
        assert!(s.has_pins(seg));
        assert!(!s.close_to_pins(seg), "a pinned segment cannot be closed");
        s.unpin(p);
        assert!(!s.has_pins(seg));
        assert!(s.close_to_pins(seg));
        assert!(pin_k().is_none(), "closed: the caller copies instead");
        assert!(!s.has_pins(seg), "the refused pin was given back");
        s.reopen_to_pins(seg);
        let p = pin_k().expect("pinned again");
        s.unpin(p);
    }
}
