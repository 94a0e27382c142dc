//! Records in segment memory: the accessors that read or write an item's bytes, and the
//! one home of the `unsafe` that concerns records.

use super::Store;
use crate::index::{hash_key, unpack};
use crate::item::{Header, Prefix, MUT_LEN, MUT_START, PREFIX_BYTES};
use crate::pin::ValuePin;
use crate::pool::Reservation;
use crate::segment;

impl Store {
    /// The whole item at `e`.
    ///
    /// # Safety
    /// The caller holds the lock of the shard whose index holds `e` (rule 2).
    #[inline]
    pub(crate) unsafe fn item_bytes(&self, e: u64) -> &[u8] {
        let (seg, off) = unpack(e);
        let mem = self.mem(seg);
        // SAFETY: the prefix is immutable once published; the caller holds the lock.
        let p = Prefix::parse(unsafe { mem.bytes(off as usize, PREFIX_BYTES) });
        // SAFETY: as above: under the shard lock nobody writes the item (rule 2).
        unsafe { mem.bytes(off as usize, p.total_len()) }
    }

    /// The mutable header window (`mark`, `exptime`, `time`, `cas`) of the item at `e`.
    ///
    /// # Safety
    /// The caller holds the lock of the shard whose index holds `e`, and holds no other
    /// borrow of the item (rule 2).
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn mut_window(&self, e: u64) -> &mut [u8] {
        let (seg, off) = unpack(e);
        // SAFETY: forwarded to the caller.
        unsafe { self.mem(seg).bytes_mut(off as usize + MUT_START, MUT_LEN) }
    }

    /// The bytes of a reservation.
    ///
    /// # Safety
    /// `r` is this thread's unpublished reservation (rule 1), not borrowed elsewhere.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn region(&self, r: Reservation) -> &mut [u8] {
        // SAFETY: forwarded to the caller.
        unsafe { self.mem(r.seg).bytes_mut(r.off as usize, r.len as usize) }
    }

    /// Header of an indexed item. Call only under the item's shard lock.
    #[inline]
    pub(crate) fn header(&self, e: u64) -> Header {
        // SAFETY: every caller runs inside a shard-locked section, on an entry found in
        // that shard's table (rule 2).
        Header::parse(unsafe { self.item_bytes(e) })
    }

    /// Whether the indexed item `e` has key `key`. Used as the table's `eq` under the lock.
    #[inline]
    pub(crate) fn key_eq(&self, e: u64, key: &[u8]) -> bool {
        let (seg, off) = unpack(e);
        let mem = self.mem(seg);
        // SAFETY: prefix and key are immutable once published (rules 2 and 3), and `e`
        // is in the index, so its segment is not being reused.
        let p = Prefix::parse(unsafe { mem.bytes(off as usize, PREFIX_BYTES) });
        p.klen == key.len()
            // SAFETY: as above.
            && bytes_eq(unsafe { mem.bytes(off as usize + p.key_offset(), p.klen) }, key)
    }

    /// Hash of the key of indexed item `e`, for the table's rehash under the lock.
    #[inline]
    pub(crate) fn hash_entry(&self, e: u64) -> u64 {
        let (seg, off) = unpack(e);
        let mem = self.mem(seg);
        // SAFETY: prefix and key are immutable once published, and `e` is in the index.
        let p = Prefix::parse(unsafe { mem.bytes(off as usize, PREFIX_BYTES) });
        // SAFETY: as above.
        hash_key(self.seed, unsafe {
            mem.bytes(off as usize + p.key_offset(), p.klen)
        })
    }

    /// The whole record of indexed item `e` if its key is `key`. Call only under the
    /// shard lock of `e` (rule 2).
    #[inline(always)]
    pub(super) fn record_if_key(&self, e: u64, key: &[u8]) -> Option<&[u8]> {
        let (seg, off) = unpack(e);
        // SAFETY: prefix and key are immutable once published (rules 2 and 3), and `e`
        // is in the index, so its segment is not being reused; the mutable header bytes
        // are read only under the shard lock, which every caller holds. A prefix with
        // another key length gives an empty record, so the key is not read.
        let (p, record) = unsafe {
            self.mem(seg)
                .record(off as usize, PREFIX_BYTES, len_if_key_len(key.len()))
        };
        if_key(p, record, key)
    }

    /// [`Store::record_if_key`] for a record whose address was computed before the lock
    /// was taken ([`Store::prefetch_record`]): no segment lookup, no bounds checks.
    ///
    /// # Safety
    /// `rec` is the address [`SegmentMem::address_of`] gave for entry `e` of this store,
    /// and the caller holds the lock of the shard that indexes `e` now. (A segment's
    /// address never changes once it has one, so `rec` is still `e`'s record; the record
    /// was checked to lie inside its segment when it was written, and rule 2 keeps
    /// writers out while the lock is held.)
    #[inline(always)]
    pub(super) unsafe fn record_at_if_key(&self, rec: *const u8, key: &[u8]) -> Option<&[u8]> {
        // SAFETY: forwarded from the caller.
        let (p, record) =
            unsafe { segment::record_at(rec, PREFIX_BYTES, len_if_key_len(key.len())) };
        if_key(p, record, key)
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
}

/// For reading a record from its prefix: its length if its key is `key_len` bytes
/// long, else 0 (so that nothing past the prefix is read), with the prefix.
#[inline(always)]
fn len_if_key_len(key_len: usize) -> impl FnOnce(&[u8]) -> (usize, Prefix) {
    move |b| {
        let p = Prefix::parse(b);
        let len = if p.klen == key_len { p.total_len() } else { 0 };
        (len, p)
    }
}

/// `record` (read with [`len_if_key_len`]) if its key is `key`.
#[inline(always)]
fn if_key<'r>(p: Prefix, record: &'r [u8], key: &[u8]) -> Option<&'r [u8]> {
    if p.klen != key.len() {
        return None;
    }
    let ko = p.key_offset();
    bytes_eq(&record[ko..ko + p.klen], key).then_some(record)
}

/// Byte-slice equality without a call to `memcmp`: keys are short (20 to 50 bytes is
/// typical), where the library call costs more than the comparison. From 16 bytes on,
/// 16 at a time and then the last 16 (overlapping): a key of up to 32 bytes is two
/// compares without a loop.
#[inline(always)]
pub(crate) fn bytes_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if n < 8 {
        return a == b;
    }
    if n < 16 {
        let word = |s: &[u8], i: usize| u64::from_le_bytes(s[i..i + 8].try_into().unwrap());
        return word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8);
    }
    let block = |s: &[u8], i: usize| u128::from_le_bytes(s[i..i + 16].try_into().unwrap());
    if n <= 32 {
        return block(a, 0) == block(b, 0) && block(a, n - 16) == block(b, n - 16);
    }
    let mut i = 0;
    while i + 16 < n {
        if block(a, i) != block(b, i) {
            return false;
        }
        i += 16;
    }
    // The last 16 bytes, overlapping what was compared already.
    block(a, n - 16) == block(b, n - 16)
}
