//! Operations for memcached's meta protocol, which needs more of an item than the text
//! commands: the stale, win-token and binary-key bits, the last access time, and the
//! freedom to change an item while it is held (memcached holds the item lock for a
//! whole `mg`, `md` or `ma`).
//!
//! [`Store::meta_get`] runs a callback on the live item under its shard lock, through an
//! [`ItemMut`] that reads every field and sets the exptime, the meta bits, the CAS id,
//! the fetched mark, or unlinks the item. Vivify (`mg N`) creates an empty item first.

use crate::index::{hash_key, pack, unpack, LockHeld, Shard};
use crate::item::{
    self, Header, NewItem, MARK_FETCHED, MARK_KEY_BINARY, MARK_STALE, MARK_TOKEN_SENT,
};
#[cfg(test)]
use crate::store::Liveness;
use crate::store::{DeltaResult, WholeExtra};
use crate::{Lookup, Origin, RelTime, Store, StoreMode, StoreOutcome};

/// memcached's `ITEM_UPDATE_INTERVAL`: a fetch refreshes the last access time only when
/// it is older than this many seconds.
pub const ITEM_UPDATE_INTERVAL_SECS: RelTime = 60;

/// A live item held under its shard lock, for the length of a [`Store::meta_get`]
/// callback.
pub struct ItemMut<'a> {
    store: &'a Store,
    /// The proof that the shard indexing `e` is locked, for the record accessors.
    held: &'a mut LockHeld,
    e: u64,
    hdr: Header,
    unlink: bool,
    /// The value read back from flash, when the item is a stub (`store/flash.rs`).
    flash_value: Option<&'a [u8]>,
}

impl ItemMut<'_> {
    fn bytes(&self) -> &[u8] {
        // An `ItemMut` exists only while the shard lock indexing `e` is held (rule 2);
        // setters take `&mut self`, so no mutable borrow is alive.
        self.store.item_bytes(self.held, self.e)
    }

    fn window(&mut self) -> &mut [u8] {
        // `&mut self` excludes every other borrow of the item made through this handle.
        self.store.mut_window(self.held, self.e)
    }

    /// The key as stored.
    pub fn key(&self) -> &[u8] {
        let ko = self.hdr.prefix.key_offset();
        &self.bytes()[ko..ko + self.hdr.prefix.klen]
    }

    /// The value.
    pub fn value(&self) -> &[u8] {
        if let Some(v) = self.flash_value {
            return v;
        }
        let b = self.bytes();
        &b[b.len() - self.hdr.prefix.vlen..]
    }

    /// Where the item is stored, for [`Store::pin`] of its value.
    pub fn origin(&self) -> Origin {
        if self.flash_value.is_some() {
            return Origin::DETACHED;
        }
        Origin::segment_id(unpack(self.e).0)
    }

    /// The client flags.
    pub fn flags(&self) -> u32 {
        self.hdr.flags
    }

    /// The CAS id.
    pub fn cas(&self) -> u64 {
        self.hdr.cas
    }

    /// The exptime (0: never).
    pub fn exptime(&self) -> RelTime {
        self.hdr.exptime
    }

    /// When the item was last stored (memcached's `it->time`, which memcached also
    /// moves on a fetch at most once a minute; here it is derived from the CAS id, so a
    /// fetch does not move it: see `docs/protocol.md`).
    pub fn time(&self) -> RelTime {
        self.store.item_time(&self.hdr)
    }

    /// Fetched at least once (memcached's `ITEM_FETCHED`).
    pub fn fetched(&self) -> bool {
        self.hdr.mark & MARK_FETCHED != 0
    }

    /// Invalidated (memcached's `ITEM_STALE`).
    pub fn stale(&self) -> bool {
        self.hdr.mark & MARK_STALE != 0
    }

    /// A win token was handed out (memcached's `ITEM_TOKEN_SENT`).
    pub fn token_sent(&self) -> bool {
        self.hdr.mark & MARK_TOKEN_SENT != 0
    }

    /// Stored with a base64 key (memcached's `ITEM_KEY_BINARY`).
    pub fn key_binary(&self) -> bool {
        self.hdr.mark & MARK_KEY_BINARY != 0
    }

    /// Set the exptime (0: never).
    pub fn set_exptime(&mut self, exptime: RelTime) {
        self.hdr.exptime = exptime;
        item::set_exptime(self.window(), exptime);
    }

    fn set_bits(&mut self, bits: u8, on: bool) {
        if on {
            self.hdr.mark |= bits;
            item::set_mark(self.window(), bits);
        } else {
            self.hdr.mark &= !bits;
            item::clear_mark(self.window(), bits);
        }
    }

    /// Set or clear the win-token bit.
    pub fn set_token_sent(&mut self, on: bool) {
        self.set_bits(MARK_TOKEN_SENT, on);
    }

    /// Set or clear the stale bit.
    pub fn set_stale(&mut self, on: bool) {
        self.set_bits(MARK_STALE, on);
    }

    /// Give the item a fresh CAS id, taken at second `now`, and return it.
    ///
    /// A narrow record holds ids within its segment's span only (`item.rs`), and a
    /// record cannot grow under the lock: an item whose new id falls past the span (its
    /// segment's base is 2^27 ids old) is unlinked once the callback returns instead,
    /// as if it had been evicted right after.
    pub fn new_cas(&mut self, now: RelTime) -> u64 {
        let cas = self.store.next_cas(now);
        let base = self.store.cas_base(unpack(self.e).0);
        if item::set_cas(self.window(), cas, base) {
            self.hdr.cas = cas;
        } else {
            self.unlink = true;
        }
        cas
    }

    /// memcached's `do_item_bump` without segmented LRU: mark the item fetched (and
    /// accessed, for eviction). memcached also refreshes `it->time` once a minute here;
    /// ferrocache derives it from the CAS id and leaves it (`docs/protocol.md`).
    pub fn bump(&mut self, _now: RelTime) {
        self.set_bits(self.store.policy.read_marks(), true);
    }

    /// Remove the item from the cache once the callback returns.
    pub fn unlink(&mut self) {
        self.unlink = true;
    }
}

/// What a meta store asks for, beyond [`Store::store`]'s arguments.
#[derive(Clone, Copy, Debug)]
pub struct MetaStore<'a> {
    pub mode: StoreMode,
    pub key: &'a [u8],
    pub flags: u32,
    pub exptime: RelTime,
    pub value: &'a [u8],
    /// Append/prepend only: a non-zero CAS id the item must have.
    pub append_cas: u64,
    /// `I`: in [`StoreMode::Cas`], a non-zero CAS lower than the item's stores the value
    /// marked stale, keeping the old exptime (memcached's `CAS_STALE`).
    pub invalidate: bool,
    /// The key was sent base64-encoded.
    pub key_binary: bool,
}

/// The outcome of [`Store::meta_incr_decr`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaArith {
    /// The new value, the item's CAS id, its exptime before any new TTL was applied, and
    /// whether the number was rewritten in place (only then does a TTL apply).
    Value {
        value: u64,
        cas: u64,
        exptime: RelTime,
        in_place: bool,
    },
    NotFound,
    /// The CAS id did not match.
    Exists,
    NonNumeric,
    NoMemory,
}

impl Store {
    /// Run `f` on the live item for `key` under its shard lock. With `vivify`, a miss
    /// creates an empty item (no flags, no exptime) and `f` sees `created == true`.
    ///
    /// Returns the outcome of the first lookup (for `get_expired`/`get_flushed`
    /// counting) and `f`'s result if it ran (`None`: a miss, or no memory to vivify).
    /// The item is unlinked afterwards if `f` called [`ItemMut::unlink`].
    pub fn meta_get<R>(
        &self,
        key: &[u8],
        vivify: bool,
        now: RelTime,
        f: impl FnOnce(&mut ItemMut<'_>, bool) -> R,
    ) -> (Lookup<()>, Option<R>) {
        let h = hash_key(self.seed(), key);
        let slot = self.shard_for(h);
        let first = {
            let mut shard = slot.lock();
            match self.do_find_live(&mut shard, h, key, now) {
                Ok((e, hdr)) if hdr.prefix.flash => {
                    drop(shard);
                    return match self.meta_get_flash(key, h, e, now, f) {
                        Some(r) => (Lookup::Hit(()), Some(r)),
                        None => (Lookup::Miss, None),
                    };
                }
                Ok((e, hdr)) => {
                    let r = self.do_meta_call(&mut shard, h, e, hdr, false, None, f);
                    return (Lookup::Hit(()), Some(r));
                }
                Err(miss) => miss.map_never::<()>(),
            }
        };
        if !vivify {
            return (first, None);
        }
        let new = NewItem {
            klen: key.len(),
            vlen: 0,
            flags: 0,
            exptime: 0,
        };
        let Some(mut r) = self.reserve(&new, now) else {
            return (first, None);
        };
        {
            let (wide, cas, base) = (r.wide, r.cas, self.cas_base(r.seg));
            let b = self.region(&mut r);
            let ko = new.write_header(b, wide, cas, base);
            b[ko..ko + key.len()].copy_from_slice(key);
        }
        let mut shard = slot.lock();
        // Someone may have stored the key while we reserved: use theirs.
        if let Ok((e, hdr)) = self.do_find_live(&mut shard, h, key, now) {
            let out = self.do_meta_call(&mut shard, h, e, hdr, false, None, f);
            drop(shard);
            self.abandon(r);
            return (first, Some(out));
        }
        let e = {
            let Shard {
                table, stats, held, ..
            } = &mut *shard;
            let entry = table.entry(h, |e| self.key_eq(held, e, key), self.rehasher(held));
            self.publish(held, &mut r, entry, stats);
            pack(r.seg, r.off)
        };
        let hdr = self.header(&shard.held, e);
        let out = self.do_meta_call(&mut shard, h, e, hdr, true, None, f);
        drop(shard);
        self.release(r);
        (first, Some(out))
    }

    /// [`Store::meta_get`] of a flash stub `e`: its value is read with no lock held,
    /// then the key is looked up again and `f` runs on the item if it is still that
    /// stub. `None` (a miss) when the record does not check, or the item changed and
    /// the retry's read failed too.
    #[cold]
    fn meta_get_flash<R>(
        &self,
        key: &[u8],
        h: u64,
        mut e: u64,
        now: RelTime,
        f: impl FnOnce(&mut ItemMut<'_>, bool) -> R,
    ) -> Option<R> {
        let flash = self.flash()?;
        let mut buf = Vec::new();
        for _ in 0..4 {
            let loc = {
                let mut shard = self.shard_for(h).lock();
                let Shard { held, .. } = &mut *shard;
                Self::stub_loc(self.item_bytes(held, e))
            };
            let Ok(range) = flash.read(loc, key, &mut buf) else {
                self.unlink_entry(key, h, e);
                return None;
            };
            let mut shard = self.shard_for(h).lock();
            let (now_e, hdr) = self.do_find_live(&mut shard, h, key, now).ok()?;
            if now_e == e {
                let value = Some(&buf[range]);
                return Some(self.do_meta_call(&mut shard, h, e, hdr, false, value, f));
            }
            if !hdr.prefix.flash {
                return Some(self.do_meta_call(&mut shard, h, now_e, hdr, false, None, f));
            }
            e = now_e;
        }
        None
    }

    /// Call `f` on item `e` (live, indexed in the locked `shard`), then unlink it if asked.
    #[allow(clippy::too_many_arguments)]
    fn do_meta_call<R>(
        &self,
        shard: &mut Shard,
        h: u64,
        e: u64,
        hdr: Header,
        created: bool,
        flash_value: Option<&[u8]>,
        f: impl FnOnce(&mut ItemMut<'_>, bool) -> R,
    ) -> R {
        let mut it = ItemMut {
            store: self,
            held: &mut shard.held,
            e,
            hdr,
            unlink: false,
            flash_value,
        };
        let out = f(&mut it, created);
        if it.unlink {
            let Shard {
                table, stats, held, ..
            } = shard;
            if let Some(o) = table.find_entry(h, |x| x == e) {
                o.remove();
                self.unlinked(held, stats, e);
            }
        }
        out
    }

    /// A meta `ms`: [`Store::store_cas`] plus memcached's meta rules (CAS on append,
    /// stale stores, the binary-key bit). Returns the outcome and the new CAS id.
    pub fn meta_store(&self, req: MetaStore<'_>, now: RelTime) -> (StoreOutcome, u64) {
        if !self.item_fits(req.key.len(), req.value.len(), req.flags) {
            return (StoreOutcome::TooLarge, 0);
        }
        match req.mode {
            StoreMode::Append => self.concat(req.key, req.value, true, req.append_cas, now),
            StoreMode::Prepend => self.concat(req.key, req.value, false, req.append_cas, now),
            mode => self.store_whole(
                mode,
                req.key,
                req.flags,
                req.exptime,
                req.value,
                WholeExtra {
                    invalidate: req.invalidate,
                    key_binary: req.key_binary,
                    hashed: None,
                },
                now,
            ),
        }
    }

    /// A meta `ma`: incr/decr with an optional CAS id to match (0: none) and an optional
    /// new exptime (applied only to a number rewritten in place, as memcached does).
    pub fn meta_incr_decr(
        &self,
        key: &[u8],
        delta: u64,
        incr: bool,
        want_cas: u64,
        ttl: Option<RelTime>,
        now: RelTime,
    ) -> MetaArith {
        match self.do_incr_decr(key, delta, incr, want_cas, ttl, now) {
            DeltaResult::Value {
                value,
                cas,
                exptime,
                in_place,
            } => MetaArith::Value {
                value,
                cas,
                exptime,
                in_place,
            },
            DeltaResult::NotFound => MetaArith::NotFound,
            DeltaResult::CasMismatch => MetaArith::Exists,
            DeltaResult::NonNumeric => MetaArith::NonNumeric,
            DeltaResult::NoMemory => MetaArith::NoMemory,
        }
    }

    /// Whether a live item exists under `key` (no side effects but unlinking a dead one).
    #[doc(hidden)]
    pub fn meta_contains(&self, key: &[u8], now: RelTime) -> bool {
        let h = hash_key(self.seed(), key);
        let mut shard = self.shard_for(h).lock();
        self.do_find_live(&mut shard, h, key, now).is_ok()
    }

    /// Liveness without unlinking, for tests.
    #[cfg(test)]
    fn meta_liveness(&self, key: &[u8], now: RelTime) -> Option<Liveness> {
        let h = hash_key(self.seed(), key);
        let shard = self.shard_for(h).lock();
        shard
            .table
            .find(h, |e| self.key_eq(&shard.held, e, key))
            .map(|(_, e)| self.liveness(&self.header(&shard.held, e), now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: RelTime = 100;

    fn store() -> Store {
        Store::builder().memory_limit(4 << 20).build().unwrap()
    }

    #[test]
    fn meta_get_reads_and_changes_items() {
        let s = store();
        assert_eq!(
            s.meta_get(b"k", false, NOW, |_, _| ()),
            (Lookup::Miss, None)
        );
        s.store(StoreMode::Set, b"k", 5, 0, b"val", NOW);
        let (first, got) = s.meta_get(b"k", false, NOW, |it, created| {
            assert!(!created);
            assert!(!it.fetched() && !it.stale() && !it.token_sent());
            it.set_exptime(NOW + 10);
            it.set_token_sent(true);
            it.bump(NOW);
            (it.key().to_vec(), it.value().to_vec(), it.flags())
        });
        assert_eq!(first, Lookup::Hit(()));
        assert_eq!(got, Some((b"k".to_vec(), b"val".to_vec(), 5)));
        let (_, got) = s.meta_get(b"k", false, NOW, |it, _| {
            (it.fetched(), it.token_sent(), it.exptime())
        });
        assert_eq!(got, Some((true, true, NOW + 10)));
        assert_eq!(s.meta_liveness(b"k", NOW + 10), Some(Liveness::Expired));
        // Unlink from inside.
        s.meta_get(b"k", false, NOW, |it, _| it.unlink());
        assert!(!s.meta_contains(b"k", NOW));
        assert_eq!(s.stats().curr_items, 0);
    }

    #[test]
    fn vivify_creates_an_empty_item() {
        let s = store();
        let (first, got) = s.meta_get(b"v", true, NOW, |it, created| {
            (created, it.value().len(), it.exptime(), it.cas())
        });
        assert_eq!(first, Lookup::Miss);
        let (created, len, exptime, cas) = got.unwrap();
        assert!(created && cas > 0);
        assert_eq!((len, exptime), (0, 0));
        let (first, got) = s.meta_get(b"v", true, NOW, |_, created| created);
        assert_eq!((first, got), (Lookup::Hit(()), Some(false)));
        assert_eq!(s.stats().curr_items, 1);
    }

    #[test]
    fn time_is_the_second_of_the_last_store() {
        let s = store();
        s.store(StoreMode::Set, b"k", 0, 0, b"v", NOW);
        s.store(StoreMode::Set, b"other", 0, 0, b"v", NOW + 5);
        s.meta_get(b"k", false, NOW + 61, |it, _| it.bump(NOW + 61));
        let t = s.meta_get(b"k", false, NOW + 61, |it, _| it.time()).1;
        assert_eq!(t, Some(NOW));
        s.store(StoreMode::Set, b"k", 0, 0, b"v2", NOW + 70);
        let t = s.meta_get(b"k", false, NOW + 71, |it, _| it.time()).1;
        assert_eq!(t, Some(NOW + 70));
    }

    #[test]
    fn stale_store_keeps_ttl_and_marks_item() {
        let s = store();
        let (_, c1) = s.store_cas(StoreMode::Set, b"k", 0, NOW + 50, b"a", NOW);
        s.meta_get(b"k", false, NOW, |it, _| it.set_token_sent(true));
        let (_, c2) = s.store_cas(StoreMode::Set, b"k", 0, NOW + 50, b"b", NOW);
        let req = MetaStore {
            mode: StoreMode::Cas(c1),
            key: b"k",
            flags: 3,
            exptime: 0,
            value: b"old",
            append_cas: 0,
            invalidate: false,
            key_binary: false,
        };
        assert_eq!(s.meta_store(req, NOW).0, StoreOutcome::Exists);
        let (out, c3) = s.meta_store(
            MetaStore {
                invalidate: true,
                ..req
            },
            NOW,
        );
        assert_eq!(out, StoreOutcome::Stored);
        assert!(c3 > c2);
        let got = s.meta_get(b"k", false, NOW, |it, _| {
            (
                it.stale(),
                it.token_sent(),
                it.exptime(),
                it.flags(),
                it.value().to_vec(),
            )
        });
        // The token bit was cleared by the second plain set.
        assert_eq!(got.1, Some((true, false, NOW + 50, 3, b"old".to_vec())));
        // A higher CAS than the item's is still a mismatch.
        let high = MetaStore {
            mode: StoreMode::Cas(c3 + 100),
            invalidate: true,
            ..req
        };
        assert_eq!(s.meta_store(high, NOW).0, StoreOutcome::Exists);
        let zero = MetaStore {
            mode: StoreMode::Cas(0),
            invalidate: true,
            ..req
        };
        assert_eq!(s.meta_store(zero, NOW).0, StoreOutcome::Exists);
    }

    #[test]
    fn meta_stores_of_the_same_shape_keep_their_marks() {
        // The value and flags have the live item's shape, so a plain set would be written
        // over it in place; a stale store must still keep the TTL and mark the item, and
        // `b` must still be remembered.
        let s = store();
        let (_, c1) = s.store_cas(StoreMode::Set, b"k", 3, NOW + 50, b"new", NOW);
        let (_, c2) = s.store_cas(StoreMode::Set, b"k", 3, NOW + 50, b"now", NOW);
        let stale = MetaStore {
            mode: StoreMode::Cas(c1),
            key: b"k",
            flags: 3,
            exptime: 0,
            value: b"old",
            append_cas: 0,
            invalidate: true,
            key_binary: false,
        };
        let (out, c3) = s.meta_store(stale, NOW);
        assert_eq!(out, StoreOutcome::Stored);
        assert!(c3 > c2);
        let got = s.meta_get(b"k", false, NOW, |it, _| {
            (it.stale(), it.exptime(), it.value().to_vec())
        });
        assert_eq!(got.1, Some((true, NOW + 50, b"old".to_vec())));
        let binary = MetaStore {
            mode: StoreMode::Set,
            value: b"bin",
            invalidate: false,
            key_binary: true,
            ..stale
        };
        assert_eq!(s.meta_store(binary, NOW).0, StoreOutcome::Stored);
        let got = s.meta_get(b"k", false, NOW, |it, _| {
            (
                it.stale(),
                it.key_binary(),
                it.exptime(),
                it.value().to_vec(),
            )
        });
        assert_eq!(got.1, Some((false, true, 0, b"bin".to_vec())));
    }

    #[test]
    fn append_with_cas_and_binary_key() {
        let s = store();
        let (_, c1) = s.store_cas(StoreMode::Set, b"k", 0, 0, b"a", NOW);
        let req = MetaStore {
            mode: StoreMode::Append,
            key: b"k",
            flags: 0,
            exptime: 0,
            value: b"b",
            append_cas: c1 + 1,
            invalidate: false,
            key_binary: false,
        };
        assert_eq!(s.meta_store(req, NOW).0, StoreOutcome::Exists);
        let (out, _) = s.meta_store(
            MetaStore {
                append_cas: c1,
                ..req
            },
            NOW,
        );
        assert_eq!(out, StoreOutcome::Stored);
        let set = MetaStore {
            mode: StoreMode::Set,
            key_binary: true,
            ..req
        };
        s.meta_store(set, NOW);
        assert_eq!(
            s.meta_get(b"k", false, NOW, |it, _| it.key_binary()).1,
            Some(true)
        );
    }

    #[test]
    fn incr_with_cas_and_ttl() {
        let s = store();
        assert_eq!(
            s.meta_incr_decr(b"n", 1, true, 0, None, NOW),
            MetaArith::NotFound
        );
        let (_, c1) = s.store_cas(StoreMode::Set, b"n", 0, 0, b"10", NOW);
        assert_eq!(
            s.meta_incr_decr(b"n", 1, true, c1 + 1, None, NOW),
            MetaArith::Exists
        );
        let r = s.meta_incr_decr(b"n", 1, true, c1, Some(NOW + 9), NOW);
        let MetaArith::Value {
            value,
            exptime,
            in_place,
            ..
        } = r
        else {
            panic!("{r:?}")
        };
        assert_eq!((value, exptime, in_place), (11, 0, true));
        assert_eq!(
            s.meta_get(b"n", false, NOW, |it, _| it.exptime()).1,
            Some(NOW + 9)
        );
        // Outgrowing the value: the TTL is not applied (memcached sets it on the old item).
        let r = s.meta_incr_decr(b"n", 100, true, 0, Some(NOW + 20), NOW);
        assert!(matches!(
            r,
            MetaArith::Value {
                value: 111,
                in_place: false,
                ..
            }
        ));
        assert_eq!(
            s.meta_get(b"n", false, NOW, |it, _| it.exptime()).1,
            Some(NOW + 9)
        );
        s.store(StoreMode::Set, b"e", 0, 0, b"", NOW);
        assert_eq!(
            s.meta_incr_decr(b"e", 1, true, 5, None, NOW),
            MetaArith::NonNumeric
        );
    }
}
