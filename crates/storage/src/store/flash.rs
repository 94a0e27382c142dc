//! The store's side of the flash tier (`crate::flash`): items whose segment is being
//! evicted leave their values on flash and stay indexed as stubs; lookups that find a
//! stub read the value back; compaction moves a page's live records and updates the
//! stubs that point at them.
//!
//! ```text
//!  eviction walk, item not kept for a second chance, value >= ext_item_size:
//!     value appended to the flash write buffer  ->  (page, version, offset, vlen)
//!     stub written at the segment's front: header window, flags, key, location
//!     index entry moved to the stub (under the item's shard lock)
//!  lookup finds a stub:
//!     marks it read, copies its location, unlocks, reads and checks the record,
//!     hands the value to the caller as a detached item
//!  stub unlinked (delete, overwrite, expiry, flush, its own eviction):
//!     its record's bytes are released on its page
//! ```
//!
//! Keys, CAS ids, flags and exptimes never leave RAM, so every rule that needs only
//! them (touch, delete, `cas` mismatches, flush, expiry) works on a stub as on any item.
//! A rule that needs the value (incr/decr, append/prepend) refuses a stub as memcached
//! refuses an item on flash (`CLIENT_ERROR cannot increment or decrement non-numeric
//! value`, `NOT_STORED`).

use std::sync::atomic::Ordering;

use super::Store;
use super::{Walk, Walked};
use crate::index::{hash_key, pack, unpack, LockHeld, Shard, ShardStats};
use crate::item::{self, Header, NewItem, Prefix, StubLoc};
use crate::pin::Origin;
use crate::policy::WalkMode;
use crate::store::read::{FlashAction, Visit};
use crate::{Flash, ItemRef, Lookup, RelTime};

impl Store {
    /// The flash tier, if the store has one.
    pub fn flash(&self) -> Option<&Flash> {
        self.flash.as_ref()
    }

    /// Whether the eviction walk should send this live item's value to flash: a tier
    /// that wants its size and TTL, and room for its stub within the walk's budget
    /// (`kept` bytes kept so far).
    pub(crate) fn flash_wants(
        &self,
        hdr: &Header,
        kept: usize,
        budget: usize,
        now: RelTime,
    ) -> bool {
        let Some(flash) = &self.flash else {
            return false;
        };
        let p = &hdr.prefix;
        !p.flash
            && kept + item::stub_len(p.klen, p.has_flags, p.wide) <= budget
            && flash.wants(p.vlen, hdr.exptime, now)
    }

    /// Write the value of live item `me` (record `rec` of the walk, whose shard lock
    /// `held` proves) to flash and keep the item as a stub at the walk's front: the
    /// stub's offset, or `None` when the tier refused the record or the stub did not
    /// fit (the record written is then released).
    pub(crate) fn to_flash(
        &self,
        walk: &mut Walk<'_>,
        rec: &Walked,
        held: &mut LockHeld,
        stats: &mut ShardStats,
        me: u64,
    ) -> Option<usize> {
        let flash = self.flash.as_ref()?;
        let p = rec.prefix;
        let loc = {
            let bytes = self.item_bytes(held, me);
            let key = &bytes[p.key_offset()..p.key_offset() + p.klen];
            flash.append(key, &bytes[bytes.len() - p.vlen..])?
        };
        let Some(dest) = walk.keep_as_stub(held, rec, loc, self.policy.stub_clears()) else {
            flash.release(loc, p.klen);
            return None;
        };
        // The item moves from its class to a stub's, and its bytes shrink.
        let old_len = p.total_len() as u64;
        let new_len = item::stub_len(p.klen, p.has_flags, p.wide) as u64;
        let old_total = self.memcached_total(p.klen, p.vlen, p.has_flags);
        let new_total = self.memcached_total(p.klen, item::STUB_BYTES, p.has_flags);
        let c = stats.class_mut(self.classes.class_of(old_total));
        c.items -= 1;
        c.requested -= old_total as u64;
        let c = stats.class_mut(self.classes.class_of(new_total));
        c.items += 1;
        c.requested += new_total as u64;
        stats.bytes = stats.bytes - old_len + new_len;
        self.stub_bytes.fetch_add(new_len as i64, Ordering::Relaxed);
        let (seg, _) = unpack(me);
        self.segments[seg as usize]
            .live_bytes
            .fetch_sub(old_len - new_len, Ordering::Release);
        Some(dest)
    }

    /// Whether stub `e`'s page still holds its record (it was not reused since).
    pub(crate) fn stub_current(&self, held: &LockHeld, e: u64) -> bool {
        self.flash
            .as_ref()
            .is_some_and(|f| f.holds(Self::stub_loc(self.item_bytes(held, e))))
    }

    /// Whether flash stubs take less than their share of the store: half of the
    /// memory limit. Past it, unread stubs are evicted like other items and no new
    /// value goes to flash, so that keys of values on flash never crowd out the
    /// items in RAM.
    pub(crate) fn stubs_within_share(&self) -> bool {
        let share = (self.memory_limit() / 2) as i64;
        self.stub_bytes.load(Ordering::Relaxed) < share
    }

    /// A stub was unlinked: its record on flash is dead.
    pub(crate) fn release_stub(&self, held: &LockHeld, e: u64, p: &Prefix) {
        if let Some(flash) = &self.flash {
            flash.release(Self::stub_loc(self.item_bytes(held, e)), p.klen);
        }
    }

    /// The location in stub `e`'s record (`bytes`).
    pub(crate) fn stub_loc(bytes: &[u8]) -> StubLoc {
        StubLoc::parse(&bytes[bytes.len() - item::STUB_BYTES..])
    }

    /// A lookup found stub `e` for `key` in the locked `shard`. The caller's [`Visit::flash`] says how to get the value: a
    /// deferred read returns a miss at once, marking nothing (the lookup that takes the
    /// value marks the item, and touches it for `gat`); otherwise the item is marked
    /// read, and [`Store::get_from_flash`] gets its value.
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn get_stub<V: Visit>(
        &self,
        mut shard: crate::index::ShardGuard<'_>,
        key: &[u8],
        h: u64,
        e: u64,
        exptime: Option<RelTime>,
        now: RelTime,
        mut visit: V,
    ) -> Lookup<V::Output> {
        let held = &mut shard.held;
        let hdr = self.header(held, e);
        let len = hdr.prefix.total_len();
        let loc = Self::stub_loc(self.item_bytes(held, e));
        let action = visit.flash(key, loc);
        if matches!(action, FlashAction::Defer) {
            return Lookup::Miss;
        }
        if self.policy.read_marks_due(hdr.mark) || exptime.is_some() {
            self.mark_read(held, e, exptime, len);
        }
        self.get_from_flash(shard, key, h, e, hdr, loc, now, action, visit)
    }

    /// A lookup found stub `e` (header `hdr`) for `key` in the locked `shard`: unlock,
    /// read the value from flash as `action` says and hand it to `visit`. A record that cannot be read or
    /// does not check is a miss, and the stub is unlinked (if it is still the key's
    /// item), so that the next lookup does not read it again.
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn get_from_flash<V: Visit>(
        &self,
        shard: crate::index::ShardGuard<'_>,
        key: &[u8],
        h: u64,
        e: u64,
        hdr: Header,
        loc: StubLoc,
        now: RelTime,
        action: FlashAction,
        visit: V,
    ) -> Lookup<V::Output> {
        drop(shard);
        let Some(flash) = &self.flash else {
            return Lookup::Miss;
        };
        let (buf, read) = match action {
            FlashAction::Defer => return Lookup::Miss,
            FlashAction::Ready(Some((buf, range))) => (buf, Ok(range)),
            FlashAction::Ready(None) => (Vec::new(), Err(crate::flash::ReadError::BadCrc)),
            FlashAction::ReadNow => {
                let mut buf = Vec::new();
                let read = flash.read(loc, key, &mut buf);
                (buf, read)
            }
        };
        match read {
            Ok(range) => {
                // memcached's rule: an item read at least twice recently is copied back
                // to RAM, one read in `recache_rate`.
                let hot = self.policy.read_since_stub(hdr.mark);
                if hot && flash.recache_due() {
                    self.recache(key, h, e, &hdr, &buf[range.clone()], now);
                }
                Lookup::Hit(visit.visit(ItemRef {
                    key,
                    value: &buf[range],
                    flags: hdr.flags,
                    cas: hdr.cas,
                    origin: Origin::DETACHED,
                }))
            }
            Err(_) => {
                self.unlink_entry(key, h, e);
                Lookup::Miss
            }
        }
    }

    /// Copy the value of stub `e` (header `hdr`) back into RAM as a whole item with the
    /// same CAS id, flags and exptime, replacing the stub if it is still the key's
    /// item; its flash record is released. Nothing if RAM has no room (`-M`).
    fn recache(&self, key: &[u8], h: u64, e: u64, hdr: &Header, value: &[u8], now: RelTime) {
        let new = NewItem {
            klen: key.len(),
            vlen: value.len(),
            flags: hdr.flags,
            exptime: hdr.exptime,
        };
        let Some(mut r) = self.reserve_keeping(&new, hdr.cas, now) else {
            return;
        };
        {
            let (wide, cas, base) = (r.wide, r.cas, self.cas_base(r.seg));
            let b = self.region(&mut r);
            let ko = new.write_header(b, wide, cas, base);
            b[ko..ko + key.len()].copy_from_slice(key);
            b[ko + key.len()..].copy_from_slice(value);
        }
        let mut shard = self.shard_for(h).lock();
        let Shard {
            table, stats, held, ..
        } = &mut *shard;
        let entry = table.entry(h, |x| self.key_eq(held, x, key), self.rehasher(held));
        if !self.unchanged(held, &entry, e, hdr.cas, now) {
            drop(shard);
            self.abandon(r);
            return;
        }
        self.copy_exptime(held, &mut r, e);
        self.publish(held, &mut r, entry, stats);
        let new_e = pack(r.seg, r.off);
        item::set_mark(self.mut_window(held, new_e), self.policy.read_marks());
        drop(shard);
        self.release(r);
        if let Some(flash) = &self.flash {
            flash.count_recache();
        }
    }

    /// Where `key`'s value lies on flash, if its live item is a stub: for a multi-get
    /// that defers one flash read, to start the reads of its other flash keys at the
    /// same time. Marks nothing and counts nothing (the lookup that follows does).
    pub fn flash_loc_of(&self, key: &[u8], now: RelTime) -> Option<StubLoc> {
        self.flash.as_ref()?;
        let h = hash_key(self.seed(), key);
        let mut shard = self.shard_for(h).lock();
        let Shard {
            table, stats, held, ..
        } = &mut *shard;
        let (_, hdr, record) = self
            .do_find_live_record(table, stats, held, h, key, now)
            .ok()?;
        hdr.prefix.flash.then(|| Self::stub_loc(record))
    }

    /// Unlink entry `e` of `key` (hashed `h`), if it is still indexed for that key.
    pub(crate) fn unlink_entry(&self, key: &[u8], h: u64, e: u64) {
        let mut shard = self.shard_for(h).lock();
        let Shard {
            table, stats, held, ..
        } = &mut *shard;
        if let Some(o) = table.find_entry(h, |x| x == e && self.key_eq(held, x, key)) {
            o.remove();
            self.unlinked(held, stats, e);
        }
    }

    /// One step of flash compaction, for the maintenance thread: when few pages are
    /// free, read back the page memcached's rule picks (`Flash::compaction_candidate`),
    /// append its records that a stub still points at to the open page, point the
    /// stubs there, and free the page. With `drop_unread` chosen, records whose stub
    /// was not read since it went to flash are dropped instead (their stubs unlinked).
    /// Returns whether a page was freed.
    pub fn flash_compact(&self, now: RelTime) -> bool {
        let Some(flash) = &self.flash else {
            return false;
        };
        if flash.reclaim_empty() > 0 {
            return true;
        }
        let Some((page, version, drop_unread)) = flash.compaction_candidate() else {
            return false;
        };
        let Some(bytes) = flash.read_page(page, version) else {
            return false;
        };
        let (mut rescued, mut lost, mut skipped) = (0, 0, 0);
        let mut at = 0;
        while let Some((key, value, len)) = Flash::page_record(&bytes, at) {
            let offset = at as u32;
            at += len;
            let h = hash_key(self.seed(), key);
            let mut shard = self.shard_for(h).lock();
            let Shard {
                table, stats, held, ..
            } = &mut *shard;
            let Ok((e, hdr, record)) = self.do_find_live_record(table, stats, held, h, key, now)
            else {
                continue;
            };
            if !hdr.prefix.flash {
                continue;
            }
            let loc = Self::stub_loc(record);
            if loc.page != page || loc.version != version || loc.offset != offset {
                continue;
            }
            if drop_unread && !self.policy.read_recently(hdr.mark) {
                if let Some(o) = table.find_entry(h, |x| x == e) {
                    o.remove();
                    self.unlinked(held, stats, e);
                }
                skipped += 1;
                continue;
            }
            // The stub's location is rewritten in place under its shard lock: stubs
            // are never pinned (only values are), and the length does not change.
            match flash.append(key, value) {
                Some(moved) => {
                    flash.release(loc, key.len());
                    self.rewrite_stub(held, e, moved);
                    rescued += 1;
                }
                None => {
                    if let Some(o) = table.find_entry(h, |x| x == e) {
                        o.remove();
                        self.unlinked(held, stats, e);
                    }
                    lost += 1;
                }
            }
        }
        flash.reclaim(page, version, rescued, lost, skipped);
        true
    }

    /// One step of the age pass (`ext_item_age`, memcached's background writer): the
    /// oldest sealed segment whose items were all stored at least `item_age` seconds ago
    /// and that the pass has not walked since it was sealed is walked, its values old
    /// and unread enough going to flash (`WalkMode::ToFlash`); it goes back to its place
    /// in the FIFO with its kept items at its front. Only the oldest
    /// `AGE_SCAN_SEGMENTS` are looked at. Returns whether a segment was walked.
    pub fn flash_age_pass(&self, now: RelTime) -> bool {
        const AGE_SCAN_SEGMENTS: usize = 256;
        let Some(age) = self.flash.as_ref().and_then(Flash::item_age) else {
            return false;
        };
        let old_enough = |seg: u32| {
            let last = self.segments[seg as usize].last_cas.load(Ordering::Relaxed);
            last != u64::MAX && now.saturating_sub(self.time_log.time_of(last)) >= age
        };
        // A writer's open segment that nothing was written to for `age` seconds is
        // sealed, so that the last values stored before a pause go to flash too (as
        // memcached's writer takes them from any LRU). The rest of it stays unused
        // until the segment comes round.
        for group in self.groups.iter() {
            let mut active = group.lock();
            if let Some((seg, top)) = *active {
                if old_enough(seg) {
                    *active = None;
                    self.pool_lock().sealed.seal(seg, top);
                }
            }
        }
        let taken = self
            .pool_lock()
            .sealed
            .take_first(AGE_SCAN_SEGMENTS, old_enough, |seg| self.close_to_pins(seg));
        let Some((place, seg, top)) = taken else {
            return false;
        };
        let (used, spared) = self.evict_segment(seg, top, WalkMode::ToFlash(age), now);
        self.reopen_to_pins(seg);
        // Walked: not again, unless values were spared for having been read; then once
        // more `item_age` seconds from now, when those not read again go.
        let again = if spared > 0 {
            self.peek_next_cas().saturating_sub(1)
        } else {
            u64::MAX
        };
        self.segments[seg as usize]
            .last_cas
            .store(again, Ordering::Relaxed);
        self.pool_lock().sealed.put_back(place, seg, used);
        true
    }

    /// Point stub `e` at `loc`.
    fn rewrite_stub(&self, held: &mut LockHeld, e: u64, loc: StubLoc) {
        loc.write(self.stub_bytes_mut(held, e));
    }

    /// Unlink every flash stub, and return how many there were: after a warm restart
    /// (`-e`), whose image holds the stubs but not the tier's page table, so their
    /// records cannot be trusted. The server logs the count.
    pub fn drop_flash_stubs(&self) -> u64 {
        let mut dropped = 0;
        for si in 0..self.shards.len() {
            let mut shard = self.shard_at(si).lock();
            let Shard {
                table, stats, held, ..
            } = &mut *shard;
            let mut i = 0;
            while i < table.positions() {
                if let Some(e) = table.get(i) {
                    if self.stored_prefix(held, e).flash {
                        table.remove(i, self.hash_entry(held, e));
                        self.unlinked(held, stats, e);
                        dropped += 1;
                    }
                }
                i += 1;
            }
        }
        // Every stub is gone (those loaded with an image were never counted in).
        self.stub_bytes.store(0, Ordering::Relaxed);
        dropped
    }
}

#[cfg(test)]
mod tests {
    use crate::{FlashConfig, Lookup, Store, StoreMode, StoreOutcome};

    fn store(name: &str, mb: u64) -> (Store, std::path::PathBuf) {
        let path = std::env::temp_dir().join(format!("ferro-flash-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let mut cfg = FlashConfig::new(vec![(path.clone(), mb << 20)]);
        cfg.page_size = 1 << 20;
        cfg.wbuf_size = 256 << 10;
        let s = Store::builder()
            .memory_limit(4 << 20)
            .flash(Some(cfg))
            .build()
            .unwrap();
        (s, path)
    }

    fn value(i: usize) -> Vec<u8> {
        format!("{i:08}").repeat(128).into_bytes()
    }

    #[test]
    fn values_evicted_from_ram_are_read_back_from_flash() {
        let (s, path) = store("roundtrip", 64);
        let n = 12_000; // 12 MB of values into a 4 MB store
        for i in 0..n {
            let k = format!("key:{i}");
            assert_eq!(
                s.store(StoreMode::Set, k.as_bytes(), 0, 0, &value(i), 1),
                StoreOutcome::Stored
            );
        }
        let f = s.flash().unwrap().stats();
        assert!(f.objects_written > 0, "{f:?}");
        let mut hits = 0;
        for i in 0..n {
            let k = format!("key:{i}");
            if let Lookup::Hit(v) = s.get(k.as_bytes(), 1, |it| it.value.to_vec()) {
                assert_eq!(v, value(i));
                hits += 1;
            }
        }
        assert_eq!(hits, n, "{:?}", s.flash().unwrap().stats());
        std::fs::remove_file(path).unwrap();
    }

    /// Write `n` values of 1 KB into a 4 MB store: most go to flash.
    fn fill(s: &Store, n: usize) {
        for i in 0..n {
            let k = format!("key:{i}");
            assert_eq!(
                s.store(StoreMode::Set, k.as_bytes(), 0, 0, &value(i), 1),
                StoreOutcome::Stored
            );
        }
    }

    fn get(s: &Store, i: usize) -> Option<Vec<u8>> {
        match s.get(format!("key:{i}").as_bytes(), 1, |it| it.value.to_vec()) {
            Lookup::Hit(v) => Some(v),
            _ => None,
        }
    }

    #[test]
    fn flipped_bytes_on_flash_are_misses_not_wrong_values() {
        let (s, path) = store("flip", 64);
        fill(&s, 12_000);
        s.flash().unwrap().sync();
        // Flip a byte in every KiB of the first page: every record there fails its check.
        {
            use std::os::unix::fs::FileExt;
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .unwrap();
            let mut b = [0u8; 1];
            for off in (100..1 << 20).step_by(1024) {
                f.read_exact_at(&mut b, off).unwrap();
                b[0] ^= 0x40;
                f.write_all_at(&b, off).unwrap();
            }
        }
        let (mut hits, mut misses) = (0, 0);
        for i in 0..12_000 {
            match get(&s, i) {
                Some(v) => {
                    assert_eq!(v, value(i), "key {i}: wrong bytes");
                    hits += 1;
                }
                None => misses += 1,
            }
        }
        let st = s.flash().unwrap().stats();
        assert!(misses > 0 && hits > 0, "{hits} hits, {misses} misses");
        assert_eq!(st.badcrc_from_extstore, misses);
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn deletes_release_flash_bytes_and_empty_pages_are_freed() {
        let (s, path) = store("release", 64);
        fill(&s, 12_000);
        let flash = s.flash().unwrap();
        let before = flash.stats();
        for i in 0..12_000 {
            s.delete(format!("key:{i}").as_bytes(), 1);
        }
        let after = flash.stats();
        assert_eq!(after.objects_used, 0, "{after:?}");
        assert!(before.objects_used > 0 && after.bytes_used == 0);
        // The full pages now hold nothing: compaction's first step frees them.
        assert!(s.flash_compact(1));
        assert!(flash.stats().pages_free > before.pages_free);
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn a_full_file_evicts_its_oldest_page_and_its_stubs_miss() {
        // 8 pages of 1 MiB for 12 MB of values: the oldest pages are evicted.
        let (s, path) = store("full", 8);
        fill(&s, 12_000);
        let st = s.flash().unwrap().stats();
        assert!(st.page_evictions > 0, "{st:?}");
        let hits = (0..12_000).filter(|&i| get(&s, i).is_some()).count();
        // Every hit is exact (checked in `get`'s comparison below) and the newest
        // values are all there.
        for i in 11_000..12_000 {
            assert_eq!(get(&s, i), Some(value(i)));
        }
        assert!(hits < 12_000);
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn compaction_moves_live_records_and_their_stubs_follow() {
        let (s, path) = store("compact", 16);
        fill(&s, 12_000);
        let flash = s.flash().unwrap();
        // Delete two keys in three: pages are left mostly dead.
        for i in (0..12_000).filter(|i| i % 3 != 0) {
            s.delete(format!("key:{i}").as_bytes(), 1);
        }
        let mut t = flash.tunables();
        t.compact_under = 16;
        t.max_frag = 1.0;
        flash.set_tunables(t);
        let mut steps = 0;
        while s.flash_compact(1) && steps < 64 {
            steps += 1;
        }
        let st = flash.stats();
        assert!(st.compact_rescues > 0, "{st:?}");
        for i in (0..12_000).filter(|i| i % 3 == 0) {
            assert_eq!(get(&s, i), Some(value(i)), "key {i}");
        }
        assert_eq!(flash.stats().badcrc_from_extstore, 0);
        std::fs::remove_file(path).unwrap();
    }
}
