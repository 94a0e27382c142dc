//! Records in segment memory: the accessors that read or write an item's bytes, and the
//! one home of the `unsafe` that concerns records.
//!
//! Each accessor takes its proof of the locking protocol's rule (`docs/design.md`) as an
//! argument, so that its callers need no `unsafe`:
//!
//! * rule 1, a reserved and unpublished region: the writer's [`Reservation`], borrowed
//!   mutably for as long as its bytes are;
//! * rule 2, an indexed item: the [`LockHeld`] of its locked shard, borrowed shared to
//!   read and mutably to write, so that no borrow outlives the lock and a written window
//!   excludes every other record borrow through that shard;
//! * rule 3, the evictor's walk of a sealed segment: its [`Walk`];
//! * a value pin: the [`ValuePin`].
//!
//! What the types cannot say stays the caller's word, as it was: that entry `e` is
//! indexed in the shard whose proof is given (every `e` comes from that shard's table).
//! The proofs are zero-sized or already in a register, and every accessor inlines.

use super::{Peeked, Store};
use crate::index::{hash_key, unpack, LockHeld};
use crate::item::{self, Header, Prefix, FLAGS_BYTES, PREFIX_MAX_BYTES};
use crate::pin::ValuePin;
use crate::pool::Reservation;
use crate::segment::{self, SegmentMem};
use crate::table::{IndexTable, Pos};
use crate::RelTime;

// SAFETY: `rec` is an address, not a borrow: it is dereferenced only by the store that
// made it (`store`), under the shard lock, once the entry it was computed from is found
// still indexed (see `Store::peeked_record_if_key`). Sending or sharing the address
// itself is harmless.
unsafe impl Send for Peeked {}
// SAFETY: as for `Send`.
unsafe impl Sync for Peeked {}

impl Store {
    /// The whole item at `e`, indexed in the shard whose lock `held` proves (rule 2).
    #[inline]
    pub(crate) fn item_bytes<'a>(&'a self, _held: &'a LockHeld, e: u64) -> &'a [u8] {
        let (seg, off) = unpack(e);
        let mem = self.mem(seg);
        // SAFETY: the prefix is immutable once published; `held` proves the lock.
        let p = Prefix::parse(unsafe { mem.bytes(off as usize, PREFIX_MAX_BYTES) });
        // SAFETY: as above: under the shard lock nobody writes the item (rule 2), and
        // the borrow ends before the lock's guard does.
        unsafe { mem.bytes(off as usize, p.total_len()) }
    }

    /// The mutable header window (`exptime`, `mark`, `cas`) of the item at `e`,
    /// indexed in the shard whose lock `held` proves (rule 2). `held` is borrowed
    /// mutably, so no other borrow of a record of that shard is alive meanwhile.
    #[inline]
    pub(crate) fn mut_window<'a>(&'a self, _held: &'a mut LockHeld, e: u64) -> &'a mut [u8] {
        let (seg, off) = unpack(e);
        let mem = self.mem(seg);
        // SAFETY: shard lock held (rule 2): nobody writes the item; the borrow ends here.
        let p = Prefix::parse(unsafe { mem.bytes(off as usize, PREFIX_MAX_BYTES) });
        // SAFETY: shard lock held and every other record borrow through it excluded by
        // the `&mut` (rule 2); the window is the mutable header only.
        unsafe { mem.bytes_mut(off as usize + p.window_at, p.window_len()) }
    }

    /// The location bytes of flash stub `e` (what follows its key), indexed in the shard
    /// whose lock `held` proves, for compaction to point it at the record's new place.
    pub(crate) fn stub_bytes_mut<'a>(&'a self, _held: &'a mut LockHeld, e: u64) -> &'a mut [u8] {
        let (seg, off) = unpack(e);
        let mem = self.mem(seg);
        // SAFETY: shard lock held (rule 2): nobody writes the item; the borrow ends here.
        let p = Prefix::parse(unsafe { mem.bytes(off as usize, PREFIX_MAX_BYTES) });
        debug_assert!(p.flash, "stub bytes of a record that is not a stub");
        // SAFETY: as `mut_window`'s: the shard lock is held and `&mut` excludes every other
        // record borrow through it; these are the record's last bytes, which a stub's
        // rules make mutable like a value's (stubs are never pinned).
        unsafe {
            mem.bytes_mut(
                off as usize + p.total_len() - item::STUB_BYTES,
                item::STUB_BYTES,
            )
        }
    }

    /// A get's writes to an item not marked read (or touched): the marks, and the new
    /// exptime when given; returns the record again, `len` bytes as the lookup read it
    /// (its prefix is not parsed a second time). `len` is the record's length.
    ///
    /// Out of line: in steady state an item read before is marked already, and inlined
    /// this cost a single get noticeably on its own path. A pipelined get after an
    /// overwrite comes here; it called `mut_window` and `item_bytes` before.
    #[cold]
    #[inline(never)]
    pub(super) fn mark_read<'a>(
        &'a self,
        held: &'a mut LockHeld,
        e: u64,
        exptime: Option<RelTime>,
        len: usize,
    ) -> &'a [u8] {
        let w = self.mut_window(held, e);
        item::set_mark(w, self.policy.read_marks());
        if let Some(t) = exptime {
            item::set_exptime(w, t);
        }
        let (seg, off) = unpack(e);
        // SAFETY: shard lock held (rule 2), so nobody writes the item; the window's
        // borrow ended above, and the record is `len` bytes long.
        unsafe { self.mem(seg).bytes(off as usize, len) }
    }

    /// The bytes of reservation `r`, unpublished and this writer's (rule 1).
    #[inline]
    pub(crate) fn region<'a>(&'a self, r: &'a mut Reservation) -> &'a mut [u8] {
        // SAFETY: a `Reservation` is handed to one writer and is neither `Clone` nor
        // `Copy`; until it is published nobody else can reach the region (rule 1), and
        // the `&mut` excludes every other borrow of it.
        unsafe { self.mem(r.seg).bytes_mut(r.off as usize, r.len as usize) }
    }

    /// The mutable header window of the record written in reservation `r` (rule 1).
    #[inline]
    pub(crate) fn reserved_window<'a>(&'a self, r: &'a mut Reservation) -> &'a mut [u8] {
        let p = Prefix::parse(self.region(r));
        // SAFETY: as for `region`: `r` is still unpublished and ours (rule 1); only its
        // header window.
        unsafe {
            self.mem(r.seg)
                .bytes_mut(r.off as usize + p.window_at, p.window_len())
        }
    }

    /// Header of item `e`, indexed in the shard whose lock `held` proves (rule 2).
    #[inline]
    pub(crate) fn header(&self, held: &LockHeld, e: u64) -> Header {
        Header::parse(self.item_bytes(held, e), self.cas_base(unpack(e).0))
    }

    /// The record length of item `e`, indexed in the shard whose lock `held` proves;
    /// read from the immutable prefix, so also right after `e` was removed from that
    /// shard's table under the same lock.
    #[inline]
    pub(crate) fn stored_prefix(&self, _held: &LockHeld, e: u64) -> Prefix {
        let (seg, off) = unpack(e);
        // SAFETY: as `stored_len`'s.
        Prefix::parse(unsafe { self.mem(seg).bytes(off as usize, PREFIX_MAX_BYTES) })
    }

    /// The record length of entry `e`; the caller holds its shard lock.
    #[allow(dead_code)]
    pub(crate) fn stored_len(&self, _held: &LockHeld, e: u64) -> usize {
        let (seg, off) = unpack(e);
        // SAFETY: called while `e` is indexed, or right after it was removed, still under
        // the shard lock, so the item bytes are unchanged and its segment not reused
        // (rule 2).
        Prefix::parse(unsafe { self.mem(seg).bytes(off as usize, PREFIX_MAX_BYTES) }).total_len()
    }

    /// Whether the indexed item `e` has key `key`. Used as the table's `eq` under the lock.
    #[inline]
    pub(crate) fn key_eq(&self, _held: &LockHeld, e: u64, key: &[u8]) -> bool {
        let (seg, off) = unpack(e);
        let mem = self.mem(seg);
        // SAFETY: prefix and key are immutable once published (rules 2 and 3), and `e`
        // is in the index of the locked shard, so its segment is not being reused.
        let p = Prefix::parse(unsafe { mem.bytes(off as usize, PREFIX_MAX_BYTES) });
        p.klen == key.len()
            // SAFETY: as above.
            && bytes_eq(unsafe { mem.bytes(off as usize + p.key_offset(), p.klen) }, key)
    }

    /// What a table of the locked shard `held` proves needs to grow: each entry's hash,
    /// read from its key, and a prefetch of its record ahead of that.
    #[inline]
    pub(crate) fn rehasher<'a>(&'a self, held: &'a LockHeld) -> EntryHasher<'a> {
        EntryHasher { store: self, held }
    }

    /// Hash of the key of indexed item `e`, for the table's rehash under the lock.
    #[inline]
    pub(crate) fn hash_entry(&self, _held: &LockHeld, e: u64) -> u64 {
        let (seg, off) = unpack(e);
        let mem = self.mem(seg);
        // SAFETY: prefix and key are immutable once published, and `e` is in the index
        // of the locked shard.
        let p = Prefix::parse(unsafe { mem.bytes(off as usize, PREFIX_MAX_BYTES) });
        // SAFETY: as above.
        hash_key(self.seed(), unsafe {
            mem.bytes(off as usize + p.key_offset(), p.klen)
        })
    }

    /// The whole record of item `e` if its key is `key`, with its decoded prefix; `e` is
    /// indexed in the shard whose lock `held` proves (rule 2).
    #[inline(always)]
    pub(super) fn record_if_key<'a>(
        &'a self,
        _held: &'a LockHeld,
        e: u64,
        key: &[u8],
    ) -> Option<(Prefix, &'a [u8])> {
        let (seg, off) = unpack(e);
        // SAFETY: prefix and key are immutable once published (rules 2 and 3), and `e`
        // is in the index, so its segment is not being reused; the mutable header bytes
        // are read only under the shard lock, which `held` proves. A prefix with another
        // key length gives an empty record, so the key is not read.
        let (p, record) = unsafe {
            self.mem(seg)
                .record(off as usize, PREFIX_MAX_BYTES, IfKeyLen(key.len()))
        };
        if_key(p, record, key)
    }

    /// Where `peeked` saw the key, checked in the locked shard's `table`: if this store
    /// made the peek, the slot still holds the entry it saw, and that entry's key is
    /// `key`, its position, entry and whole record, read at the address carried from the
    /// peek ([`Store::prefetch_record`]): no segment lookup, no bounds checks.
    #[inline(always)]
    pub(super) fn peeked_record_if_key<'a>(
        &'a self,
        _held: &'a LockHeld,
        table: &IndexTable,
        peeked: Peeked,
        key: &[u8],
    ) -> Option<(Pos, u64, Prefix, &'a [u8])> {
        let Peeked {
            cell,
            e,
            rec,
            store,
        } = peeked;
        // `holds_at` is false for the cells of `Peeked::NONE` and `MAYBE` (entry 0).
        if store != self.id {
            return None;
        }
        let pos = table.holds_at(cell, e)?;
        // SAFETY: this store computed `rec` from `e` ([`Store::prefetch_record`] never
        // hands out a null one for a slot's cell) with [`SegmentMem::address_of`], and
        // `e` is indexed in this locked shard now. A segment's address never changes
        // once it has one, so `rec` is still `e`'s record; the record was checked to lie
        // inside its segment when it was written, and rule 2 keeps writers out while
        // the lock is held.
        let (p, record) = unsafe { segment::record_at(rec, PREFIX_MAX_BYTES, IfKeyLen(key.len())) };
        if_key(p, record, key).map(|(p, record)| (pos, e, p, record))
    }

    /// The mutable bytes of live item `e` (flags, value, header window), for a write in
    /// place under the lock `held` proves (rule 2): `None` when a reader holds a value
    /// pin on its segment, checked under this lock (see the `pin` module).
    #[inline(always)]
    pub(super) fn unpinned<'a>(
        &'a self,
        _held: &'a mut LockHeld,
        e: u64,
        prefix: Prefix,
    ) -> Option<InPlace<'a>> {
        let (seg, off) = unpack(e);
        let meta = &self.segments[seg as usize];
        if meta.pinned() {
            return None;
        }
        Some(InPlace {
            mem: &meta.mem,
            off: off as usize,
            prefix,
        })
    }

    /// The bytes of a pinned value.
    #[inline]
    pub fn pinned<'a>(&'a self, pin: &'a ValuePin) -> &'a [u8] {
        // SAFETY: while `pin` lives, its segment's pin count is not zero, so no eviction,
        // compaction, dead-segment reuse or in-place write touches the item's bytes (see
        // the `pin` module); writers only append past them. The borrow cannot outlive the
        // pin, because it borrows it.
        unsafe { self.mem(pin.seg).bytes(pin.off as usize, pin.len as usize) }
    }

    /// Claim sealed segment `seg` (bytes `0..top`) for a walk: wait for the writers that
    /// reserved in it before it was sealed (they only need their own shard lock, and the
    /// caller holds none), then hand out its records in order.
    ///
    /// # Safety
    /// The caller took `seg` off the sealed FIFO and closed it to pins, so no writer
    /// reserves in it and no other thread walks it or reuses it until the walk is over.
    pub(crate) unsafe fn walk_sealed(&self, seg: u32, top: u32) -> Walk<'_> {
        let meta = &self.segments[seg as usize];
        let mut spins = 0u32;
        // Acquire: pairs with each writer's release of `pending`, so all writes to the
        // segment are visible before its prefixes are read (rule 3).
        while meta.pending.load(std::sync::atomic::Ordering::Acquire) != 0 {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        Walk {
            mem: &meta.mem,
            top: top as usize,
            next: 0,
            front: 0,
        }
    }
}

/// [`Store::rehasher`]: the hashes of a locked shard's entries.
pub(crate) struct EntryHasher<'a> {
    store: &'a Store,
    held: &'a LockHeld,
}

impl crate::table::Rehash for EntryHasher<'_> {
    #[inline]
    fn hash(&self, e: u64) -> u64 {
        self.store.hash_entry(self.held, e)
    }

    #[inline]
    fn prefetch(&self, e: u64) {
        let (seg, off) = unpack(e);
        if let Some(at) = self.store.mem(seg).address_of(off as usize) {
            segment::prefetch_line(at as usize);
        }
    }
}

/// The writable bytes of one live item whose segment holds no value pin
/// ([`Store::unpinned`]); the immutable prefix and key are not reachable through it.
pub(super) struct InPlace<'a> {
    mem: &'a SegmentMem,
    off: usize,
    /// The item's prefix, as read under the lock.
    prefix: Prefix,
}

impl<'a> InPlace<'a> {
    /// `len` bytes of the value, from `at` (the value's offset in the record) on.
    #[inline(always)]
    pub fn value(&mut self, at: usize, len: usize) -> &mut [u8] {
        // SAFETY: the shard lock is held and no other record borrow through it is alive
        // (the `&mut LockHeld` this borrows), and no pin is on the segment, checked under
        // this lock, so no reader outside the lock is sending the value (rule 2). The
        // range is the value only: the prefix and key, which the evictor reads without
        // the lock, are not written.
        unsafe { self.mem.bytes_mut(self.off + at, len) }
    }

    /// The four flag bytes after the window (of an item that has them).
    #[inline(always)]
    pub fn flags(&mut self) -> &mut [u8] {
        let at = self.off + self.prefix.flags_offset();
        // SAFETY: as for `value`, the four flag bytes after the window.
        unsafe { self.mem.bytes_mut(at, FLAGS_BYTES) }
    }

    /// The mutable header window (what `mut_window` borrows).
    #[inline(always)]
    pub fn window(&mut self) -> &mut [u8] {
        let (at, len) = (self.off + self.prefix.window_at, self.prefix.window_len());
        // SAFETY: as for `value`, the mutable header window.
        unsafe { self.mem.bytes_mut(at, len) }
    }
}

/// The evictor's walk of a sealed segment whose writers are done
/// ([`Store::walk_sealed`]): it reads each record's immutable prefix and key without a
/// lock (rule 3), and moves a kept record toward the segment's front, or writes its
/// window, under the record's shard lock (rule 2).
pub(crate) struct Walk<'a> {
    mem: &'a SegmentMem,
    top: usize,
    /// Offset of the record after the one handed out last.
    next: usize,
    /// End of the records kept so far: every byte below it is a kept record, and every
    /// byte from it up to the current record is unlinked or already moved.
    front: usize,
}

/// One record of a [`Walk`], handed out once: keeping it consumes it.
pub(crate) struct Walked {
    pub off: usize,
    pub prefix: Prefix,
}

impl Walk<'_> {
    /// The next record that is not padding, or `None` at the end of the written bytes.
    #[inline]
    pub fn next_record(&mut self) -> Option<Walked> {
        while self.next < self.top {
            let off = self.next;
            // SAFETY: the segment is sealed and its writers are done, so the walk is its
            // only writer; prefix and key are immutable and may be read without a lock
            // (rule 3). Exactly the prefix is read: the bytes after it are mutable.
            let extra = Prefix::extra_after(unsafe { self.mem.bytes(off, 2) });
            // SAFETY: as above, the prefix's own length bytes.
            let p = Prefix::parse(unsafe { self.mem.bytes(off, 2 + extra) });
            self.next = off + p.total_len();
            if !p.is_padding() {
                return Some(Walked { off, prefix: p });
            }
        }
        None
    }

    /// The key of a record of this walk.
    #[inline]
    pub fn key(&self, r: &Walked) -> &[u8] {
        // SAFETY: as above (rule 3). The borrow ends with the caller's use of it, before
        // any move (which needs `&mut self`).
        unsafe { self.mem.bytes(r.off + r.prefix.key_offset(), r.prefix.klen) }
    }

    /// Keep record `r` (found live in the shard whose lock `held` proves): move it down
    /// to the front of the kept records if it is not there already, and return its
    /// offset from now on.
    #[inline]
    pub fn keep(&mut self, _held: &mut LockHeld, r: Walked) -> usize {
        let len = r.prefix.total_len();
        let dest = self.front;
        if dest != r.off {
            // SAFETY: we hold the item's shard lock (rule 2) and no borrow of the segment
            // (`&mut self`); `dest..dest+len` covers only bytes already unlinked or moved
            // (everything from the front up to `r`, which each record is handed out once
            // and in order) and this item.
            unsafe { self.mem.move_within(r.off, dest, len) };
        }
        self.front = dest + len;
        dest
    }

    /// Keep record `r` (found live in the shard whose lock `held` proves) as a flash
    /// stub pointing at `loc`: its window, flags and key written at the front of the
    /// kept records with a stub's prefix and `loc` after the key, and the mark bits
    /// `clears` cleared. `None`, writing nothing, when the stub would reach past `r` (a
    /// value shorter than the stub's location): it may only cover bytes already
    /// unlinked or moved, and `r`'s own.
    pub fn keep_as_stub(
        &mut self,
        _held: &mut LockHeld,
        r: &Walked,
        loc: crate::item::StubLoc,
        clears: u8,
    ) -> Option<usize> {
        let p = r.prefix;
        let len = item::stub_len(p.klen, p.has_flags, p.wide);
        let dest = self.front;
        if dest + len > r.off + p.total_len() {
            return None;
        }
        // Window, flags and key, copied out first: the stub's prefix is longer than the
        // record's when its value was under 16 MiB, so the two may overlap.
        let mut tail = [0u8; item::MAX_HEADER_BYTES + item::MAX_KEY_BYTES];
        let n = p.key_offset() + p.klen - p.window_at;
        // SAFETY: we hold the item's shard lock (rule 2), so its window may be read; the
        // borrow ends before the write below.
        tail[..n].copy_from_slice(unsafe { self.mem.bytes(r.off + p.window_at, n) });
        // SAFETY: as in `keep`: `dest..dest+len` lies within bytes already unlinked or
        // moved and this item's own (checked above), under its shard lock, with no
        // other borrow of the segment alive (`&mut self`).
        let b = unsafe { self.mem.bytes_mut(dest, len) };
        let at = item::write_stub_prefix(b, p.klen, p.has_flags, p.wide);
        b[at..at + n].copy_from_slice(&tail[..n]);
        item::clear_mark(&mut b[at..at + p.window_len()], clears);
        loc.write(&mut b[at + n..]);
        self.front = dest + len;
        Some(dest)
    }

    /// The end of the records kept so far: the bytes the segment's kept items take.
    #[inline]
    pub fn front(&self) -> usize {
        self.front
    }

    /// The mutable header window of the record kept at `at` (prefix `p`), under its
    /// shard lock.
    #[inline]
    pub fn window<'h>(&'h self, _held: &'h mut LockHeld, at: usize, p: Prefix) -> &'h mut [u8] {
        debug_assert!(at < self.front, "a window of a record not kept");
        // SAFETY: the item (kept at `at`) is ours under its lock (rule 2), and `held`
        // is borrowed mutably, so no other borrow of a record of its shard is alive.
        unsafe { self.mem.bytes_mut(at + p.window_at, p.window_len()) }
    }
}

/// For reading a record from its prefix: its length if its key is `key_len` bytes
/// long, else 0 (so that nothing past the prefix is read), with the prefix.
struct IfKeyLen(usize);

impl segment::RecordHead for IfKeyLen {
    type Out = Prefix;

    #[inline(always)]
    fn decode(self, b: &[u8]) -> (usize, Prefix) {
        let p = Prefix::parse(b);
        let len = if p.klen == self.0 { p.total_len() } else { 0 };
        (len, p)
    }
}

/// `record` (read with [`IfKeyLen`]) if its key is `key`.
#[inline(always)]
fn if_key<'r>(p: Prefix, record: &'r [u8], key: &[u8]) -> Option<(Prefix, &'r [u8])> {
    if p.klen != key.len() {
        return None;
    }
    let ko = p.key_offset();
    bytes_eq(&record[ko..ko + p.klen], key).then_some((p, record))
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
