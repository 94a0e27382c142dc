//! Writes: the storage commands, delete, touch, incr/decr and flush, and the publishing
//! of a written reservation into the index.

use std::sync::atomic::Ordering;

use super::{KeyHash, Liveness, Peeked, Store};
use crate::arith;
use crate::index::{hash_key, pack, unpack, LockHeld, Shard, ShardRef, ShardStats};
use crate::item::{self, Header, NewItem};
use crate::memcached::memcached_would_chunk;
use crate::pool::Reservation;
use crate::table::Entry;
use crate::{ArithOutcome, RelTime, StoreMode, StoreOutcome};

/// Ids that may be taken by other writers between a look at the next CAS id and the
/// taking of one: far more than can be, so a narrow record's room is nearly always
/// judged right the first time (a wrong guess costs a gap in the ids, no more).
pub(crate) const SPAN_SLACK_IDS: u64 = 1 << 20;

impl Store {
    /// memcached set/add/replace/append/prepend/cas; see [`StoreMode`] for each rule.
    ///
    /// Every successful store takes a new CAS id from one global counter. `TooLarge` when
    /// [`Store::item_fits`] refuses the item; `NoMemory` only with evictions disabled.
    /// Append and prepend keep the item's flags and exptime; if the joined item would be
    /// too large or finds no memory they answer `NotStored`, as memcached does.
    pub fn store(
        &self,
        mode: StoreMode,
        key: &[u8],
        flags: u32,
        exptime: RelTime,
        value: &[u8],
        now: RelTime,
    ) -> StoreOutcome {
        self.store_cas(mode, key, flags, exptime, value, now).0
    }

    /// Like [`Store::store`], also returning the new CAS id (0 unless `Stored`).
    pub fn store_cas(
        &self,
        mode: StoreMode,
        key: &[u8],
        flags: u32,
        exptime: RelTime,
        value: &[u8],
        now: RelTime,
    ) -> (StoreOutcome, u64) {
        self.store_cas_hashed(mode, key, None, flags, exptime, value, now)
    }

    /// [`Store::store_cas`], given the key's hash from [`Store::hash`] and where
    /// [`Store::prefetch_record`] saw the key when the caller has them (`hashed`): a
    /// pipelined batch hashes its keys and prefetches their buckets and records before
    /// it runs the first of its requests. With `None` the store hashes and peeks itself.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn store_cas_hashed(
        &self,
        mode: StoreMode,
        key: &[u8],
        hashed: Option<(KeyHash, Peeked)>,
        flags: u32,
        exptime: RelTime,
        value: &[u8],
        now: RelTime,
    ) -> (StoreOutcome, u64) {
        if !self.item_fits(key.len(), value.len(), flags) {
            return (StoreOutcome::TooLarge, 0);
        }
        match mode {
            StoreMode::Append => self.concat(key, value, true, 0, now),
            StoreMode::Prepend => self.concat(key, value, false, 0, now),
            _ => {
                let extra = WholeExtra {
                    hashed,
                    ..WholeExtra::default()
                };
                self.store_whole(mode, key, flags, exptime, value, extra, now)
            }
        }
    }

    /// set/add/replace/cas: the new item does not depend on the old one. A first look
    /// under the lock may refuse it or write it over the live item in place
    /// ([`Store::store_over_live`]); otherwise it is written into a reservation
    /// ([`Store::write_whole`]) and published in place of the live one
    /// ([`Store::publish_whole`]).
    ///
    /// Inlined at its two callers, and its steps into it: as a call of its own, a
    /// pipelined set passes its arguments (the `WholeExtra` through memory), and its
    /// callers' constant extras (a set's hash and peek given, no meta flags) could not
    /// fold its branches.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(crate) fn store_whole(
        &self,
        mode: StoreMode,
        key: &[u8],
        flags: u32,
        exptime: RelTime,
        value: &[u8],
        extra: WholeExtra,
        now: RelTime,
    ) -> (StoreOutcome, u64) {
        // The version this store replaces is read under the lock (key compare, header).
        // Under overwrites it is usually out of cache: asking for it now overlaps that
        // miss with the locking (or with the copy of a new item), unless the caller
        // asked for it earlier still.
        let (h, peeked) = match extra.hashed {
            Some((h, peeked)) => {
                debug_assert_eq!(h.0, hash_key(self.seed(), key), "a KeyHash of another key");
                (h.0, peeked)
            }
            None => {
                let h = hash_key(self.seed(), key);
                (h, self.prefetch_record(KeyHash(h), key.len()))
            }
        };
        let slot = self.shard_for(h);
        let new = NewItem {
            klen: key.len(),
            vlen: value.len(),
            flags,
            exptime,
        };
        // A set that may replace an item (as seen without the lock) may overwrite it in
        // place; add/replace/cas check their condition first, so a refused one burns no
        // segment space. A set the peek saw no entry for writes a new item: the locked
        // search that would confirm it costs more than it saves, and if the key did
        // arrive meanwhile, the new item replaces it below.
        if mode != StoreMode::Set || peeked.may_exist() {
            let over = self.store_over_live(slot, h, mode, key, peeked, &new, value, extra, now);
            if let Some(done) = over {
                return done;
            }
        }
        let Some(mut r) = self.reserve(&new, now) else {
            return (StoreOutcome::NoMemory, 0);
        };
        self.write_whole(&mut r, &new, key, value);
        self.publish_whole(slot, h, mode, key, r, extra, now)
    }

    /// [`Store::store_whole`]'s first look, under the lock of `slot` (the shard of hash
    /// `h`): the store's outcome when its condition refuses it or it was written over
    /// the live item in place, `None` when it needs a new item.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn store_over_live(
        &self,
        slot: ShardRef<'_>,
        h: u64,
        mode: StoreMode,
        key: &[u8],
        peeked: Peeked,
        new: &NewItem,
        value: &[u8],
        extra: WholeExtra,
        now: RelTime,
    ) -> Option<(StoreOutcome, u64)> {
        let mut shard = slot.lock();
        let Shard {
            table, stats, held, ..
        } = &mut *shard;
        // The record borrow ends here: an overwrite writes the item's bytes.
        let live = self
            .find_live_record_from(table, stats, held, h, key, peeked, now)
            .ok()
            .map(|(e, hd, _)| (e, hd));
        if let Some(refused) = condition_ext(mode, live.map(|(_, hd)| hd.cas), extra.invalidate) {
            return Some((refused, 0));
        }
        let (e, old) = live?;
        let cas = self.overwrite_in_place(&mut shard, e, &old, new, value, mode, extra, now)?;
        Some((StoreOutcome::Stored, cas))
    }

    /// Write item `new` (`key`, `value`) into its reservation `r`: header (with the CAS
    /// id taken with the space), key and value.
    #[inline(always)]
    fn write_whole(&self, r: &mut Reservation, new: &NewItem, key: &[u8], value: &[u8]) {
        let (wide, cas, base) = (r.wide, r.cas, self.cas_base(r.seg));
        let b = self.region(r);
        let ko = new.write_header(b, wide, cas, base);
        copy_key(&mut b[ko..ko + key.len()], key);
        b[ko + key.len()..].copy_from_slice(value);
    }

    /// Under the lock of `slot` (the shard of hash `h`): check the store's condition
    /// against the live item again and publish the written reservation `r` in its place,
    /// or abandon `r` if the condition now refuses.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn publish_whole(
        &self,
        slot: ShardRef<'_>,
        h: u64,
        mode: StoreMode,
        key: &[u8],
        r: Reservation,
        extra: WholeExtra,
        now: RelTime,
    ) -> (StoreOutcome, u64) {
        let mut shard = slot.lock();
        let Shard {
            table, stats, held, ..
        } = &mut *shard;
        // The existing item, if any, with its header read from the record the key
        // comparison borrowed.
        let found = table.find_map(h, |e| {
            self.record_if_key(held, e, key)
                .map(|(p, record)| Header::parse_from(p, record, self.cas_base(unpack(e).0)))
        });
        let live = found
            .as_ref()
            .and_then(|(_, hd)| (self.liveness(hd, now) == Liveness::Live).then_some(*hd));
        let live_cas = live.map(|hd| hd.cas);
        if let Some(refused) = condition_ext(mode, live_cas, extra.invalidate) {
            if let Some((pos, hd)) = found {
                if live_cas.is_none() {
                    let old = table.remove(pos, h);
                    self.unlinked_prefix(held, stats, old, &hd.prefix);
                }
            }
            drop(shard);
            self.abandon(r);
            return (refused, 0);
        }
        // The CAS id was taken with the space and written with the header.
        let cas = r.cas;
        let new_e = pack(r.seg, r.off);
        match found {
            Some((pos, hd)) => {
                let old = table.replace(pos, new_e);
                self.unlinked_prefix(held, stats, old, &hd.prefix);
            }
            None => {
                table.insert_unique(h, new_e, self.rehasher(held));
            }
        }
        self.published(stats, &r);
        self.mark_stored(held, new_e, h, mode, extra, live);
        drop(shard);
        self.release(r);
        (StoreOutcome::Stored, cas)
    }

    /// The marks of item `e` (key hash `h`), just published under the lock `held` proves
    /// for a store in `mode` that replaced `live`: the policy's for a new item, the meta
    /// protocol's, and memcached's `CAS_STALE` (the value is replaced but keeps the old
    /// TTL, and is marked stale, keeping a win token already handed out).
    #[inline(always)]
    fn mark_stored(
        &self,
        held: &mut LockHeld,
        e: u64,
        h: u64,
        mode: StoreMode,
        extra: WholeExtra,
        live: Option<Header>,
    ) {
        let mut mark = self.policy.store_marks(h)
            | if extra.key_binary {
                item::MARK_KEY_BINARY
            } else {
                0
            };
        let stale = match (mode, live) {
            (StoreMode::Cas(want), Some(old)) if want != old.cas => Some(old),
            _ => None,
        };
        if let Some(old) = stale {
            mark |= item::MARK_STALE | (old.mark & item::MARK_TOKEN_SENT);
        }
        if mark != 0 || stale.is_some() {
            // The item was just published under the shard lock (rule 2).
            let w = self.mut_window(held, e);
            item::set_mark(w, mark);
            if let Some(old) = stale {
                item::set_exptime(w, old.exptime);
            }
        }
    }

    /// Under the shard lock, after the store's condition passed: write the new version
    /// of live item `e` (header `old`) over its bytes, when it has the same shape (key,
    /// value length, and whether it has client flags) so the immutable prefix and key
    /// stay as they are. Returns the new CAS id, or `None` when the store must write a
    /// new item instead:
    ///
    /// * another shape: the record's length is fixed once the evictor may walk it;
    /// * a value pin on the segment: a reader is sending the old value in place;
    /// * `-M` (no evictions): memcached refuses any store, overwrites included, once
    ///   memory is full, and only a new item reaches that check;
    /// * a stale CAS accepted by meta `ms I`: it keeps the old exptime and marks.
    ///
    /// Overwriting in place is memcached's memory behaviour (a freed chunk of the same
    /// slab class is reused at once) in a log: overwrites leave no dead versions behind,
    /// the store's memory stays near its live data, and the bytes written are the ones
    /// the lookup just read, so they are in cache. The item keeps its place in the
    /// eviction order; it is marked accessed, so the CLOCK gives it the second chance a
    /// new item would get by being written at the head of the log.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn overwrite_in_place(
        &self,
        shard: &mut Shard,
        e: u64,
        old: &Header,
        new: &NewItem,
        value: &[u8],
        mode: StoreMode,
        extra: WholeExtra,
        now: RelTime,
    ) -> Option<u64> {
        let stale = matches!(mode, StoreMode::Cas(want) if want != old.cas);
        // A flash stub's bytes after its key are its location, never a value to write over.
        let same_shape = old.prefix.vlen == new.vlen
            && old.prefix.has_flags == (new.flags != 0)
            && !old.prefix.flash;
        if !same_shape || stale || !self.policy.evicts() {
            return None;
        }
        let Shard { stats, held, .. } = shard;
        // The segment found once for its pins, the value and the header window (three
        // lookups with their bounds checks before). `e` is indexed and live in the locked
        // shard, and the caller holds no borrow of its record (rule 2).
        let mut rec = self.unpinned(held, e, old.prefix)?;
        // A narrow record holds ids within its segment's span only: past it, a new
        // item. Judged with room to spare before the id is taken, so that ids run without
        // gaps as memcached's do; the id taken is checked before anything is written.
        let base = self.cas_base(unpack(e).0);
        if !old.prefix.wide && !item::narrow_fits(self.peek_next_cas() + SPAN_SLACK_IDS, base) {
            return None;
        }
        let cas = self.next_cas(now);
        if !old.prefix.wide && !item::narrow_fits(cas, base) {
            return None;
        }
        let value_at = old.prefix.key_offset() + old.prefix.klen;
        rec.value(value_at, new.vlen).copy_from_slice(value);
        if new.flags != 0 {
            rec.flags().copy_from_slice(&new.flags.to_le_bytes());
        }
        let w = rec.window();
        let mark = self.policy.overwrite_marks()
            | if extra.key_binary {
                item::MARK_KEY_BINARY
            } else {
                0
            };
        let written = item::set_new_version(w, mark, new.exptime, cas, base);
        debug_assert!(written, "checked to fit above");
        // memcached links a new item: the item count grows, and the byte count stays.
        stats.total_items += 1;
        Some(cas)
    }

    /// append/prepend: a new item holding old value and new data, in either order.
    /// A non-zero `want_cas` must equal the item's CAS id (meta `ms MA C<cas>`).
    pub(crate) fn concat(
        &self,
        key: &[u8],
        data: &[u8],
        append: bool,
        want_cas: u64,
        now: RelTime,
    ) -> (StoreOutcome, u64) {
        let h = hash_key(self.seed(), key);
        let slot = self.shard_for(h);
        loop {
            let (old_e, old) = {
                let mut shard = slot.lock();
                match self.do_find_live(&mut shard, h, key, now) {
                    Ok(found) => found,
                    Err(_) => return (StoreOutcome::NotStored, 0),
                }
            };
            if want_cas != 0 && old.cas != want_cas {
                return (StoreOutcome::Exists, 0);
            }
            // memcached refuses to append to an item whose value is on flash, rather than
            // read it back first.
            if old.prefix.flash {
                return (StoreOutcome::NotStored, 0);
            }
            let old_vlen = old.prefix.vlen;
            let vlen = old_vlen + data.len();
            if !self.item_fits(key.len(), vlen, old.flags) {
                return (StoreOutcome::NotStored, 0);
            }
            let new = NewItem {
                klen: key.len(),
                vlen,
                flags: old.flags,
                exptime: old.exptime,
            };
            let Some(mut r) = self.reserve(&new, now) else {
                return (StoreOutcome::NotStored, 0);
            };
            let vo = {
                let (wide, cas, base) = (r.wide, r.cas, self.cas_base(r.seg));
                let b = self.region(&mut r);
                let ko = new.write_header(b, wide, cas, base);
                b[ko..ko + key.len()].copy_from_slice(key);
                let vo = ko + key.len();
                let at = if append { vo + old_vlen } else { vo };
                b[at..at + data.len()].copy_from_slice(data);
                vo
            };
            let mut shard = slot.lock();
            let Shard {
                table, stats, held, ..
            } = &mut *shard;
            let entry = table.entry(h, |e| self.key_eq(held, e, key), self.rehasher(held));
            if !self.unchanged(held, &entry, old_e, old.cas, now) {
                // Changed (or expired) between our two looks: start again.
                drop(shard);
                self.abandon(r);
                continue;
            }
            // A touch in between keeps the CAS id but may have moved the exptime.
            self.copy_exptime(held, &mut r, old_e);
            {
                // Shard lock held, so the old item's bytes are stable (rule 2).
                let old_bytes = self.item_bytes(held, old_e);
                let old_value = &old_bytes[old_bytes.len() - old_vlen..];
                // Our own unpublished region (rule 1); it does not overlap the old item,
                // which is published elsewhere.
                let b = self.region(&mut r);
                let at = if append { vo } else { vo + data.len() };
                b[at..at + old_vlen].copy_from_slice(old_value);
            }
            let cas = self.publish(held, &mut r, entry, stats);
            drop(shard);
            self.release(r);
            return (StoreOutcome::Stored, cas);
        }
    }

    /// Delete a live item; false if there was none (an expired one is unlinked too).
    pub fn delete(&self, key: &[u8], now: RelTime) -> bool {
        let h = hash_key(self.seed(), key);
        let mut shard = self.shard_for(h).lock();
        let Shard {
            table, stats, held, ..
        } = &mut *shard;
        let Some(o) = table.find_entry(h, |e| self.key_eq(held, e, key)) else {
            return false;
        };
        let live = self.liveness(&self.header(held, o.get()), now) == Liveness::Live;
        let old = o.remove();
        self.unlinked(held, stats, old);
        live
    }

    /// Set a live item's exptime; false if there is none.
    pub fn touch(&self, key: &[u8], exptime: RelTime, now: RelTime) -> bool {
        let h = hash_key(self.seed(), key);
        let mut shard = self.shard_for(h).lock();
        match self.do_find_live(&mut shard, h, key, now) {
            Ok((e, _)) => {
                // Shard lock held (rule 2); only the mutable window is borrowed.
                let w = self.mut_window(&mut shard.held, e);
                item::set_exptime(w, exptime);
                item::set_mark(w, self.policy.read_marks());
                true
            }
            Err(_) => false,
        }
    }

    /// memcached incr/decr; see the `arith` module for the exact number rules.
    pub fn incr_decr(&self, key: &[u8], delta: u64, incr: bool, now: RelTime) -> ArithOutcome {
        match self.do_incr_decr(key, delta, incr, 0, None, now) {
            DeltaResult::Value { value, .. } => ArithOutcome::Value(value),
            DeltaResult::NotFound | DeltaResult::CasMismatch => ArithOutcome::NotFound,
            DeltaResult::NonNumeric => ArithOutcome::NonNumeric,
            DeltaResult::NoMemory => ArithOutcome::NoMemory,
        }
    }

    /// memcached's `do_add_delta`: incr/decr, refused when a non-zero `want_cas` differs
    /// from the item's CAS id. `ttl` becomes the item's exptime only when the number is
    /// rewritten in place: memcached's meta `ma T` sets the exptime of the item it holds,
    /// which is the replaced one when the digits outgrew the value.
    pub(crate) fn do_incr_decr(
        &self,
        key: &[u8],
        delta: u64,
        incr: bool,
        want_cas: u64,
        ttl: Option<RelTime>,
        now: RelTime,
    ) -> DeltaResult {
        let h = hash_key(self.seed(), key);
        let slot = self.shard_for(h);
        let mut buf = [0u8; arith::MAX_DIGITS];
        loop {
            let mut shard = slot.lock();
            let (e, hdr) = match self.do_find_live(&mut shard, h, key, now) {
                Ok(found) => found,
                Err(_) => return DeltaResult::NotFound,
            };
            let vlen = hdr.prefix.vlen;
            // A value on flash is not numeric to memcached either (it is not read back).
            if vlen == 0
                || hdr.prefix.flash
                || memcached_would_chunk(key.len(), hdr.prefix.has_flags, vlen)
            {
                return DeltaResult::NonNumeric;
            }
            if want_cas != 0 && hdr.cas != want_cas {
                return DeltaResult::CasMismatch;
            }
            let (value, digits) = {
                let bytes = self.item_bytes(&shard.held, e);
                let old = &bytes[bytes.len() - vlen..];
                let Some(n) = arith::parse_u64(old) else {
                    return DeltaResult::NonNumeric;
                };
                let value = arith::apply(n, delta, incr);
                (value, arith::format_u64(value, &mut buf))
            };
            // memcached rewrites the number in place when it fits, padded with spaces.
            let padded = digits.len() <= vlen;
            // Shard lock held (rule 2); the value range is inside the item and no other
            // borrow of it is alive. A pinned segment gets a new item (below).
            // A narrow record takes ids within its segment's span only; the id is
            // taken only for a write in place (a new item takes its own), once the pin
            // check passed, and checked before anything is written.
            let base = self.cas_base(unpack(e).0);
            let fits = |cas: u64| hdr.prefix.wide || item::narrow_fits(cas, base);
            let unpinned = if padded && fits(self.peek_next_cas() + SPAN_SLACK_IDS) {
                self.unpinned(&mut shard.held, e, hdr.prefix)
            } else {
                None
            };
            let cas = unpinned.map(|rec| (rec, self.next_cas(now)));
            if let Some((mut rec, cas)) = cas.filter(|&(_, cas)| fits(cas)) {
                let item_len = hdr.prefix.total_len();
                arith::write_in_place(rec.value(item_len - vlen, vlen), digits);
                // As above, the mutable header window only.
                let w = self.mut_window(&mut shard.held, e);
                let written = item::set_cas(w, cas, base);
                debug_assert!(written, "checked to fit above");
                if let Some(t) = ttl {
                    item::set_exptime(w, t);
                }
                return DeltaResult::Value {
                    value,
                    cas,
                    exptime: hdr.exptime,
                    in_place: true,
                };
            }
            drop(shard);
            // The digits outgrew the value: store a new item with exactly the digits. Or
            // a reader has the item's segment pinned (a vectored send of one of its values
            // is under way): a new item with the bytes the in-place write would have left.
            let new = NewItem {
                klen: key.len(),
                vlen: if padded { vlen } else { digits.len() },
                flags: hdr.flags,
                exptime: hdr.exptime,
            };
            let Some(mut r) = self.reserve(&new, now) else {
                return DeltaResult::NoMemory;
            };
            {
                let (wide, cas, base) = (r.wide, r.cas, self.cas_base(r.seg));
                let b = self.region(&mut r);
                let ko = new.write_header(b, wide, cas, base);
                b[ko..ko + key.len()].copy_from_slice(key);
                arith::write_in_place(&mut b[ko + key.len()..], digits);
            }
            let mut shard = slot.lock();
            let Shard {
                table, stats, held, ..
            } = &mut *shard;
            let entry = table.entry(h, |e| self.key_eq(held, e, key), self.rehasher(held));
            if !self.unchanged(held, &entry, e, hdr.cas, now) {
                drop(shard);
                self.abandon(r);
                continue;
            }
            self.copy_exptime(held, &mut r, e);
            let exptime = self.header(held, e).exptime;
            if let (true, Some(t)) = (padded, ttl) {
                // `r` is still unpublished and ours (rule 1); only its header.
                let w = self.reserved_window(&mut r);
                item::set_exptime(w, t);
            }
            let cas = self.publish(held, &mut r, entry, stats);
            drop(shard);
            self.release(r);
            return DeltaResult::Value {
                value,
                cas,
                exptime,
                in_place: padded,
            };
        }
    }

    /// memcached `flush_all`, with `oldest_live` already converted by the server.
    /// Items stored at or before `oldest_live` (or, for an immediate flush, with a CAS
    /// older than the flush) read as [`Lookup::Flushed`](crate::Lookup::Flushed) once `oldest_live <= now`.
    pub fn flush_all(&self, oldest_live: RelTime, now: RelTime) {
        let f = &self.flush.0;
        if oldest_live <= now {
            f.oldest_cas.store(self.next_cas(now), Ordering::Release);
        }
        self.time_log
            .set_flush(oldest_live, now, self.peek_next_cas());
        f.oldest_live.store(oldest_live, Ordering::Release);
    }

    /// Under the shard lock: whether `entry` still holds the same live item version that
    /// was read before the lock was dropped (same location and same CAS id).
    pub(crate) fn unchanged(
        &self,
        held: &LockHeld,
        entry: &Entry<'_>,
        e: u64,
        cas: u64,
        now: RelTime,
    ) -> bool {
        match entry {
            Entry::Occupied(o) if o.get() == e => {
                let cur = self.header(held, e);
                cur.cas == cas && self.liveness(&cur, now) == Liveness::Live
            }
            _ => false,
        }
    }

    /// Under the shard lock: copy the current exptime of item `e` into reservation `r`.
    pub(crate) fn copy_exptime(&self, held: &LockHeld, r: &mut Reservation, e: u64) {
        let exptime = self.header(held, e).exptime;
        // `r` is still unpublished and ours (rule 1); only its header window.
        let w = self.reserved_window(r);
        item::set_exptime(w, exptime);
    }

    /// Point `entry` at the written reservation `r`, whose header holds the CAS id
    /// taken with its space. Runs under the shard lock; returns the CAS id. From here on
    /// `r`'s bytes are the index's (rule 2): the writer only releases it.
    pub(crate) fn publish(
        &self,
        held: &LockHeld,
        r: &mut Reservation,
        entry: Entry<'_>,
        stats: &mut ShardStats,
    ) -> u64 {
        let cas = r.cas;
        let new_e = pack(r.seg, r.off);
        match entry {
            Entry::Occupied(mut o) => {
                let old = o.replace(new_e);
                self.unlinked(held, stats, old);
            }
            Entry::Vacant(v) => {
                v.insert(new_e);
            }
        }
        self.published(stats, r);
        cas
    }

    /// Account for reservation `r` having been published in a locked shard.
    #[inline]
    fn published(&self, stats: &mut ShardStats, r: &Reservation) {
        stats.curr_items += 1;
        stats.total_items += 1;
        stats.bytes += u64::from(r.len);
        let c = stats.class_mut(usize::from(r.class));
        c.items += 1;
        c.requested += u64::from(r.ntotal);
        self.segments[r.seg as usize]
            .live_bytes
            .fetch_add(u64::from(r.len), Ordering::Relaxed);
    }
}

/// What [`Store::do_incr_decr`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DeltaResult {
    /// The new value, the item's new CAS id and its exptime before any `ttl` was applied.
    Value {
        value: u64,
        cas: u64,
        exptime: RelTime,
        in_place: bool,
    },
    NotFound,
    CasMismatch,
    NonNumeric,
    NoMemory,
}

/// Meta-protocol options of a whole-item store.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct WholeExtra {
    /// `ms I`: a CAS older than the item's stores the value as stale instead of failing.
    pub invalidate: bool,
    /// `ms b`: remember that the key was sent base64-encoded.
    pub key_binary: bool,
    /// The key's hash and where [`Store::prefetch_record`] saw it, when the caller has
    /// them already ([`Store::store_cas_hashed`]).
    pub hashed: Option<(KeyHash, Peeked)>,
}

/// [`condition`], with memcached's `CAS_STALE` rule when `invalidate` is set: a non-zero
/// CAS lower than the item's is accepted.
#[inline]
fn condition_ext(mode: StoreMode, live_cas: Option<u64>, invalidate: bool) -> Option<StoreOutcome> {
    match (mode, live_cas) {
        (StoreMode::Cas(want), Some(have)) if invalidate && want != 0 && want < have => None,
        _ => condition(mode, live_cas),
    }
}

/// Whether `mode` refuses to store, given the live item's CAS id (if any).
#[inline]
fn condition(mode: StoreMode, live_cas: Option<u64>) -> Option<StoreOutcome> {
    match (mode, live_cas) {
        (StoreMode::Add, Some(_)) => Some(StoreOutcome::NotStored),
        (StoreMode::Replace | StoreMode::Append | StoreMode::Prepend, None) => {
            Some(StoreOutcome::NotStored)
        }
        (StoreMode::Cas(_), None) => Some(StoreOutcome::NotFound),
        (StoreMode::Cas(want), Some(have)) if want != have => Some(StoreOutcome::Exists),
        _ => None,
    }
}

/// `dst.copy_from_slice(key)` without a call to `memcpy` for the usual key
/// lengths (8 to 32 bytes): two overlapping fixed-size copies.
#[inline(always)]
pub(super) fn copy_key(dst: &mut [u8], key: &[u8]) {
    let n = key.len();
    if !(8..=32).contains(&n) || dst.len() != n {
        dst.copy_from_slice(key);
    } else if n >= 16 {
        dst[..16].copy_from_slice(&key[..16]);
        dst[n - 16..].copy_from_slice(&key[n - 16..]);
    } else {
        dst[..8].copy_from_slice(&key[..8]);
        dst[n - 8..].copy_from_slice(&key[n - 8..]);
    }
}
