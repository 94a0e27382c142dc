//! Finding room: reservations in the open segment, the steps by which a writer gets a
//! segment when its own is full, and the walk that evicts or compacts a sealed segment.
//! Which steps, in which order, and what a walk keeps are the policy's (`policy`); this
//! module carries them out.
//!
//! A walk takes a sealed segment item by item. For each item it locks the item's shard
//! (one shard lock at a time, never two) and, unless the item is no longer indexed
//! (deleted, overwritten: dead space, dropped), asks the policy for its [`Fate`] and
//! applies it:
//!
//! ```text
//!   Unlink        expired or flushed      -> unlinked  (reclaimed, expired_unfetched)
//!   Keep          compaction, stubs       -> moved down to the segment's front
//!   SecondChance  read since written      -> moved down, read mark cleared
//!   Flash         a value the tier wants  -> written to flash, a stub moved down
//!   Evict         otherwise               -> unlinked  (evictions, evicted_unfetched)
//! ```
//!
//! Survivors are compacted in place toward offset 0 (each move runs under the moved
//! item's shard lock, and only ever over bytes already unlinked or moved), and the
//! segment is reopened for writing after them.

use std::sync::atomic::Ordering;

use crate::index::{pack, unpack, LockHeld, Shard, ShardStats};
use crate::item::{self, Header, NewItem, MARK_FETCHED};
use crate::policy::{Fate, Room, Seen, Tier, WalkMode, DEAD_SCAN_SEGMENTS};
use crate::pool::{writer_id, Reservation};
use crate::store::{Liveness, Store, Walk, Walked};
use crate::table::OccupiedEntry;
use crate::RelTime;

/// Segments given back per segment acquired while over a lowered memory limit: more
/// than one, so that memory comes down while items are written.
const RETIRE_PER_ACQUIRE: usize = 2;
impl Store {
    /// Reserve room for `new` in this thread's group's open segment, finding a new
    /// segment if it is full, and take its CAS id: the record is narrow when the id is
    /// within the segment's span of its base, else wide (`item.rs`). `None` only when
    /// evictions are disabled and memory is full. Must be called with no shard lock
    /// held: it may evict.
    pub(crate) fn reserve(&self, new: &NewItem, now: RelTime) -> Option<Reservation> {
        self.reserve_as(new, None, now)
    }

    /// [`Store::reserve`] for an item that keeps CAS id `cas` rather than taking one:
    /// an item read back from flash into RAM (`store/flash.rs`). Its record is narrow
    /// only if the id is within the segment's span (it seldom is: it is older).
    pub(crate) fn reserve_keeping(
        &self,
        new: &NewItem,
        cas: u64,
        now: RelTime,
    ) -> Option<Reservation> {
        self.reserve_as(new, Some(cas), now)
    }

    fn reserve_as(&self, new: &NewItem, keep: Option<u64>, now: RelTime) -> Option<Reservation> {
        debug_assert!(new.total_len(true) <= self.segment_size);
        let group = &self.groups[writer_id() % self.groups.len()];
        let mut active = group.lock();
        // Two rounds: the open segment, then a freshly found one (which always fits).
        for _ in 0..2 {
            if let Some((seg, top)) = *active {
                // The id is taken only once the record fits, so that ids run without
                // gaps as memcached's do. Narrow or wide is judged from the next id with
                // room to spare, and judged again from the id taken.
                let base = self.cas_base(seg);
                let mut wide = match keep {
                    Some(cas) => !item::narrow_fits(cas, base),
                    None => !item::narrow_fits(
                        self.peek_next_cas() + crate::store::SPAN_SLACK_IDS,
                        base,
                    ),
                };
                let mut len = new.total_len(wide);
                let fits = |len: usize| top as usize + len <= self.segment_size;
                let cas = if fits(len) {
                    let cas = keep.unwrap_or_else(|| self.next_cas(now));
                    if !wide && !item::narrow_fits(cas, base) {
                        wide = true;
                        len = new.total_len(true);
                    }
                    Some(cas)
                } else {
                    None
                };
                if let (Some(cas), true) = (cas, fits(len)) {
                    let end = top as usize + len;
                    *active = Some((seg, end as u32));
                    let meta = &self.segments[seg as usize];
                    meta.pending.fetch_add(1, Ordering::Relaxed);
                    meta.last_cas.store(cas, Ordering::Relaxed);
                    let ntotal = self.memcached_total(new.klen, new.vlen, new.flags != 0);
                    return Some(Reservation {
                        seg,
                        off: top,
                        len: len as u32,
                        cas,
                        wide,
                        ntotal: ntotal as u32,
                        class: self.classes.class_of(ntotal) as u8,
                    });
                }
                *active = None;
                self.pool_lock().sealed.seal(seg, top);
            }
            *active = Some(self.acquire_segment(new.total_len(true), now)?);
        }
        None
    }

    /// Segment `seg` is taken empty: narrow records count their ids from the next one.
    /// Called with the group lock held, before any reservation in it.
    fn rebase(&self, seg: u32) -> u32 {
        self.segments[seg as usize]
            .cas_base
            .store(self.peek_next_cas(), Ordering::Relaxed);
        seg
    }

    /// The reservation's writer is done (published or abandoned it).
    #[inline]
    pub(crate) fn release(&self, r: Reservation) {
        self.segments[r.seg as usize]
            .pending
            .fetch_sub(1, Ordering::Release);
    }

    /// Turn an unpublished reservation into a padding record and release it.
    pub(crate) fn abandon(&self, mut r: Reservation) {
        // `r` is ours and unpublished (rule 1).
        let len = r.len as usize;
        item::write_padding(self.region(&mut r), len);
        self.release(r);
    }

    /// A segment with at least `len` free bytes: (id, bytes used), from the first of the
    /// policy's steps (`PolicyState::room_order`) that has one. `None` only
    /// when none has (`-M` with memory full of live items). Called with the group lock
    /// held and no shard lock.
    fn acquire_segment(&self, len: usize, now: RelTime) -> Option<(u32, u32)> {
        for &step in self.policy.room_order() {
            let found = match step {
                Room::RetireExcess => {
                    self.retire_excess(now);
                    None
                }
                Room::Dead => self.take_dead_segment().map(|seg| (self.rebase(seg), 0)),
                Room::Compact { live_divisor } => self.compact_mostly_dead(len, live_divisor, now),
                Room::Fresh => self.take_fresh_segment().map(|seg| (self.rebase(seg), 0)),
                Room::Evict => self.evict_for(len, now),
                Room::CompactRoomy => self.compact_roomy(len, now),
            };
            if found.is_some() {
                return found;
            }
        }
        None
    }

    /// A never-used segment (or one retired by a lowered limit), given its memory, while
    /// fewer segments than the budget allows hold items.
    fn take_fresh_segment(&self) -> Option<u32> {
        let index_bytes = self.index_bytes();
        let seg = {
            let mut pool = self.pool_lock();
            if pool.in_use() < self.segments_allowed(&pool, index_bytes) {
                pool.free.pop()
            } else {
                None
            }
        }?;
        self.allocate_segment(seg);
        Some(seg)
    }

    /// Evict the policy's victims until one has room for `len` bytes after what it keeps
    /// (the first one always has: the budget leaves that room; the loop is only
    /// defensive). A victim a reader holds a pin in goes round once more.
    fn evict_for(&self, len: usize, now: RelTime) -> Option<(u32, u32)> {
        let size = self.segment_size;
        for _ in 0..self.segments.len() {
            let (seg, top) = self.pool_lock().sealed.pop_victim()?;
            if !self.close_to_pins(seg) {
                // A reader is sending one of its values.
                self.pool_lock().sealed.requeue(seg, top);
                continue;
            }
            let age = self.peek_next_cas() - self.cas_base(seg);
            let mode = WalkMode::Evict(self.policy.evict_budget(size, len, age));
            let used = self.evict_segment(seg, top, mode, now).0;
            self.direct_reclaims.fetch_add(1, Ordering::Relaxed);
            self.reopen_to_pins(seg);
            if used == 0 {
                self.rebase(seg);
            }
            if used as usize + len <= size {
                return Some((seg, used));
            }
            self.pool_lock().sealed.requeue(seg, used);
        }
        None
    }

    /// -M: compact the oldest segment that has enough dead space, keeping every live
    /// item. Expired items still counted live are left to the sweeper.
    fn compact_roomy(&self, len: usize, now: RelTime) -> Option<(u32, u32)> {
        let size = self.segment_size;
        let roomy = |seg: u32| {
            let live = self.segments[seg as usize]
                .live_bytes
                .load(Ordering::Relaxed);
            size.saturating_sub(live as usize) >= len && self.close_to_pins(seg)
        };
        let (_, seg, top) = self
            .pool_lock()
            .sealed
            .take_first(usize::MAX, roomy, |_| true)?;
        self.compact_closed(seg, top, len, now)
    }

    /// After `cache_memlimit` lowered the limit, or the index grew: while more segments
    /// hold items than the budget allows, empty up to [`RETIRE_PER_ACQUIRE`] of them (a
    /// dead one if there is one, else the policy's victim, evicting what it does not
    /// keep) and give their pages back to the kernel. Called on the way to a new
    /// segment, so memory comes down as items are written.
    fn retire_excess(&self, now: RelTime) {
        let index_bytes = self.index_bytes();
        for _ in 0..RETIRE_PER_ACQUIRE {
            let excess = {
                let pool = self.pool_lock();
                pool.in_use()
                    .saturating_sub(self.segments_allowed(&pool, index_bytes))
            };
            if excess == 0 {
                return;
            }
            let seg = match self.take_dead_segment() {
                Some(seg) => seg,
                None => {
                    let Some((victim, top)) = self.pool_lock().sealed.pop_victim() else {
                        return;
                    };
                    if !self.close_to_pins(victim) {
                        self.pool_lock().sealed.requeue(victim, top);
                        return;
                    }
                    // One segment over (the index grew by a step): the second chance
                    // still holds, and the segment goes back to the queue with what it
                    // kept; when it comes round again they go unless read again. Without
                    // it the index's growth dropped the hot items of the oldest segment.
                    // Further over (a lower `cache_memlimit`), memory comes down first.
                    let budget = self.policy.retire_budget(self.segment_size, excess);
                    let kept = self
                        .evict_segment(victim, top, WalkMode::Evict(budget), now)
                        .0;
                    self.reopen_to_pins(victim);
                    if kept > 0 {
                        self.pool_lock().sealed.requeue(victim, kept);
                        continue;
                    }
                    victim
                }
            };
            // Under -k the pages stay: locked memory is not given back (and the kernel
            // refuses MADV_DONTNEED on locked pages anyway).
            if !self.lock_memory() {
                // SAFETY: `seg` is on no list and indexes no item, so no thread reads or
                // writes its bytes: pins are taken only through indexed items, and
                // writers only through reservations in open segments.
                unsafe { self.segments[seg as usize].mem.release() };
            }
            self.pool_lock().free.push(seg);
        }
    }

    /// Compact sealed segment `seg` (taken off the queue and closed to pins), keeping
    /// every live item, and hand it out if `len` bytes fit after them; otherwise it
    /// goes back to the queue.
    fn compact_closed(&self, seg: u32, top: u32, len: usize, now: RelTime) -> Option<(u32, u32)> {
        let used = self.evict_segment(seg, top, WalkMode::KeepAll, now).0;
        self.reopen_to_pins(seg);
        if used == 0 {
            self.rebase(seg);
        }
        if used as usize + len <= self.segment_size {
            Some((seg, used))
        } else {
            self.pool_lock().sealed.requeue(seg, used);
            None
        }
    }

    /// Take a sealed segment that holds no indexed item and no unfinished write, to be
    /// written again from its start without a walk: every item in it was overwritten or
    /// deleted. Only the oldest [`DEAD_SCAN_SEGMENTS`] sealed segments are looked at.
    ///
    /// It is preferred to a never-used segment. Under overwrites (a few hot keys set
    /// again and again) segments die in the order they were written, so the same few
    /// are reused: the bytes written and the old versions read stay in the CPU's caches,
    /// and resident memory stays near the live data instead of growing to `-m` before
    /// anything is reused.
    ///
    /// `live_bytes` only grows through a reservation of an open segment (counted in
    /// `pending` until its writer is done), so a sealed segment seen with both at 0 stays
    /// empty. The acquire loads pair with the release decrements made after each unlink
    /// under its shard lock, so every reader that found an item of the segment under
    /// that lock is done with it before the segment is written again, and a value pin
    /// taken under that lock is seen (see the `pin` module).
    fn take_dead_segment(&self) -> Option<u32> {
        let dead = |seg: u32| {
            let meta = &self.segments[seg as usize];
            meta.pending.load(Ordering::Acquire) == 0
                && meta.live_bytes.load(Ordering::Acquire) == 0
                && !self.has_pins(seg)
        };
        let mut pool = self.pool_lock();
        let (_, seg, _) = pool.sealed.take_first(DEAD_SCAN_SEGMENTS, dead, |_| true)?;
        Some(seg)
    }

    /// Compact, keeping every live item, the sealed segment with the fewest live bytes
    /// among the oldest [`DEAD_SCAN_SEGMENTS`], when at most `1/live_divisor` of it is
    /// live (the rest overwritten or deleted since). `None` when no segment is that
    /// empty: then the policy's next step is tried.
    ///
    /// Without this, overwrites fill the log with dead versions that are only reclaimed
    /// when their segment reaches the head of the queue, and that eviction also drops the
    /// live items beside them that were not read since: under Zipf sets of hot keys the
    /// store held about a quarter of the items it had room for. Moving at most half a
    /// segment's bytes to free at least the other half keeps the cold live items until
    /// memory is really full of live data.
    fn compact_mostly_dead(
        &self,
        len: usize,
        live_divisor: usize,
        now: RelTime,
    ) -> Option<(u32, u32)> {
        let size = self.segment_size;
        let live = |seg: u32| {
            self.segments[seg as usize]
                .live_bytes
                .load(Ordering::Relaxed) as usize
        };
        let empty_enough = |seg: u32, live: usize| {
            live <= size / live_divisor && live + len <= size && self.close_to_pins(seg)
        };
        let (seg, top) =
            self.pool_lock()
                .sealed
                .take_least(DEAD_SCAN_SEGMENTS, live, empty_enough)?;
        self.compact_closed(seg, top, len, now)
    }

    /// Walk sealed segment `seg` (bytes `0..top`), drop, keep or send to flash each
    /// item as the policy's [`Fate`] for it in `mode` says, compact the kept ones to the
    /// front and return how many bytes they take, and how many values the age pass
    /// (`WalkMode::ToFlash`) left in RAM only because they were read since their last
    /// second chance.
    pub(crate) fn evict_segment(
        &self,
        seg: u32,
        top: u32,
        mode: WalkMode,
        now: RelTime,
    ) -> (u32, u32) {
        // Writers that reserved space before the segment was sealed finish quickly: they
        // only need their own shard lock, and we hold none.
        // SAFETY: every caller took `seg` off the sealed queue and closed it to pins
        // (`close_to_pins`) before this call, and gives it back only after it returns.
        let mut walk = unsafe { self.walk_sealed(seg, top) };
        // Bytes kept at the segment's front.
        let mut kept = 0usize;
        let mut spared = 0u32;
        while let Some(rec) = walk.next_record() {
            // The key's borrow ends with the hash, before any move.
            let h = crate::index::hash_key(self.seed(), walk.key(&rec));
            let mut shard = self.shard_for(h).lock();
            let Shard {
                table, stats, held, ..
            } = &mut *shard;
            let me = pack(seg, rec.off as u32);
            let Some(o) = table.find_entry(h, |e| e == me) else {
                // Not indexed: dead space, dropped.
                continue;
            };
            let hdr: Header = self.header(held, me);
            let fate = self.fate_of(held, me, &hdr, rec.prefix.total_len(), mode, kept, now);
            if fate == Fate::SecondChance && matches!(mode, WalkMode::ToFlash(_)) {
                spared += 1;
            }
            let item = Walking {
                o,
                held,
                stats,
                me,
                h,
                hdr,
            };
            kept = self.apply_fate(fate, &mut walk, rec, item, kept, now);
        }
        (walk.front() as u32, spared)
    }

    /// The policy's fate for indexed item `me` (header `hdr`, a record of `len` bytes)
    /// in a walk in `mode` that has kept `kept` bytes so far; its shard lock is `held`.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn fate_of(
        &self,
        held: &LockHeld,
        me: u64,
        hdr: &Header,
        len: usize,
        mode: WalkMode,
        kept: usize,
        now: RelTime,
    ) -> Fate {
        // A stub whose page was reused holds nothing any more: dropped like an expired
        // item, not counted as an eviction.
        let live = self.liveness(hdr, now) == Liveness::Live
            && (!hdr.prefix.flash || self.stub_current(held, me));
        let seen = Seen {
            live,
            mark: hdr.mark,
            stub: hdr.prefix.flash,
            len,
        };
        let tier = ItemTier {
            store: self,
            hdr,
            now,
        };
        self.policy.fate(&seen, mode, kept, &tier)
    }

    /// Carry out `fate` for the walk's record `rec`, the item `at` indexes, and return
    /// the bytes kept at the segment's front from now on (`kept` so far).
    #[inline]
    fn apply_fate(
        &self,
        fate: Fate,
        walk: &mut Walk<'_>,
        rec: Walked,
        at: Walking<'_>,
        kept: usize,
        now: RelTime,
    ) -> usize {
        let Walking {
            mut o,
            held,
            stats,
            me,
            h,
            hdr,
        } = at;
        let (off, len) = (rec.off, rec.prefix.total_len());
        match fate {
            Fate::Unlink => {
                o.remove();
                self.reclaimed(held, stats, me, hdr.mark);
                kept
            }
            Fate::Keep | Fate::SecondChance => {
                // Moved down over bytes already unlinked or moved, under the item's
                // shard lock (rule 2).
                let prefix = rec.prefix;
                let dest = walk.keep(held, rec);
                if dest != off {
                    o.replace(pack(unpack(me).0, dest as u32));
                }
                if fate == Fate::SecondChance {
                    let w = walk.window(held, dest, prefix);
                    item::clear_mark(w, self.policy.second_chance_clears());
                    let ntotal = self.memcached_total(prefix.klen, prefix.vlen, prefix.has_flags);
                    stats.class_mut(self.classes.class_of(ntotal)).retained += 1;
                }
                kept + len
            }
            Fate::Flash { or_evict } => {
                // Its value goes to flash and the item stays indexed as a stub at the
                // front of the kept records (`store/flash.rs`); if the flash write fails
                // it is evicted like any other, or kept by the age pass.
                match self.to_flash(walk, &rec, held, stats, me) {
                    Some(dest) => {
                        o.replace(pack(unpack(me).0, dest as u32));
                        walk.front()
                    }
                    None if or_evict => {
                        o.remove();
                        self.evicted(held, stats, me, h, &hdr, walk.key(&rec), now);
                        kept
                    }
                    None => {
                        let dest = walk.keep(held, rec);
                        if dest != off {
                            o.replace(pack(unpack(me).0, dest as u32));
                        }
                        kept + len
                    }
                }
            }
            Fate::Evict => {
                o.remove();
                self.evicted(held, stats, me, h, &hdr, walk.key(&rec), now);
                kept
            }
        }
    }

    /// Count an item that eviction unlinked (entry `me`, key hash `h`), and tell the
    /// policy and the listener.
    #[allow(clippy::too_many_arguments)]
    fn evicted(
        &self,
        held: &LockHeld,
        stats: &mut ShardStats,
        me: u64,
        h: u64,
        hdr: &Header,
        key: &[u8],
        now: RelTime,
    ) {
        self.policy.evicted(h);
        let fetched = hdr.mark & MARK_FETCHED != 0;
        let vlen = hdr.prefix.vlen;
        let class = self.unlinked(held, stats, me);
        let written = self.time_log.time_of(hdr.cas);
        let c = stats.class_mut(class);
        c.evicted += 1;
        c.evicted_time = now.saturating_sub(written);
        if self.policy.read_recently(hdr.mark) {
            c.evicted_active += 1;
        }
        if hdr.exptime != 0 {
            c.evicted_nonzero += 1;
        }
        if !fetched {
            c.evicted_unfetched += 1;
        }
        if let Some(sink) = self.eviction_listener() {
            sink.evicted(&crate::store::Evicted {
                key,
                fetched,
                exptime: hdr.exptime,
                written,
                class,
                value_len: vlen,
            });
        }
    }
}

/// An indexed item the walk found, with its shard's parts, for [`Store::apply_fate`].
struct Walking<'a> {
    /// Its index entry.
    o: OccupiedEntry<'a>,
    held: &'a mut LockHeld,
    stats: &'a mut ShardStats,
    me: u64,
    /// Its key's hash.
    h: u64,
    hdr: Header,
}

/// The flash tier's answers about one item, for [`Policy::fate`](crate::Policy).
struct ItemTier<'a> {
    store: &'a Store,
    hdr: &'a Header,
    now: RelTime,
}

impl Tier for ItemTier<'_> {
    fn stubs_within_share(&self) -> bool {
        self.store.stubs_within_share()
    }

    fn takes(&self, kept: usize, budget: usize) -> bool {
        self.store.flash_wants(self.hdr, kept, budget, self.now)
    }

    fn age(&self) -> u32 {
        self.now
            .saturating_sub(self.store.time_log.time_of(self.hdr.cas))
    }
}
