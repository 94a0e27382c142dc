//! Lookups: `get` and `gat`, the stages of a prefetched multi-get, and the locked search
//! for a key's live record that every operation starts from.

use super::{Liveness, Store, MAX_SHARDS};
use crate::index::{hash_key, unpack, Located, LockHeld, Shard, ShardStats};
use crate::item::{self, Header};
use crate::pin::Origin;
use crate::segment;
use crate::table::{Cell, IndexTable, Peek};
use crate::{ItemRef, Lookup, RelTime};

/// Keys between the stages of a prefetched multi-get ([`Store::prefetch_index`],
/// [`Store::prefetch_record`], [`Store::get_hashed`]): at a few hundred cycles of work per
/// key, eight keys cover a memory miss, and sixteen misses in flight fit a core's miss
/// queue, so callers prefetch chunks of up to twice this many keys.
pub const PREFETCH_DISTANCE: usize = 8;

/// Where [`Store::prefetch_record`] saw a key's entry without the lock: a guess that
/// the lookup checks under the lock (one load) before searching the bucket itself.
#[derive(Clone, Copy, Debug)]
pub struct Peeked {
    /// Where the entry was seen; `Cell::NONE` when the probe path ended without it, and
    /// `Cell::OTHER` when the peek gave up before the path ended.
    pub(super) cell: Cell,
    pub(super) e: u64,
    /// The address of `e`'s record, carried to the locked lookup so that it does not
    /// look up the segment and check the record's bounds again (see
    /// [`Store::peeked_record_if_key`]); null unless `cell` is a slot's. It is `Send`
    /// and `Sync` by the argument beside that accessor, in `record`.
    pub(super) rec: *const u8,
    /// [`Store::id`] of the store that peeked: a peek is trusted only by its own store.
    pub(super) store: u64,
}

/// What a lookup does with the item it found, under the shard lock: copy the bytes out,
/// nothing more.
///
/// The plain lookups take a closure. A closure cannot be marked `#[inline(always)]`,
/// and in the multi-get loop the compiler kept the reply composition out of line, a
/// call for every key; a `Visit` whose `visit` is marked
/// `#[inline(always)]` is composed in place.
pub trait Visit {
    /// What the lookup returns on a hit.
    type Output;
    /// Called once, under the shard lock, with the item.
    fn visit(self, item: ItemRef<'_>) -> Self::Output;

    /// The item found is a flash stub (`store/flash.rs`): how to get its value. The
    /// default reads it now, on the caller's thread, with no lock held; a caller that
    /// can wait (a connection whose reply can be held back) says
    /// [`FlashAction::Defer`] and reads it elsewhere, or hands in a value read since.
    #[inline(always)]
    fn flash(&mut self, _key: &[u8], _loc: crate::StubLoc) -> FlashAction {
        FlashAction::ReadNow
    }
}

/// What a lookup that found a flash stub does ([`Visit::flash`]).
#[derive(Debug)]
pub enum FlashAction {
    /// Read the value now (a blocking `pread`, or a copy from the write buffer).
    ReadNow,
    /// The value, read since by [`crate::Flash::read`] into the buffer (the value's
    /// range in it), or `None` when that read found no good record.
    Ready(Option<(Vec<u8>, std::ops::Range<usize>)>),
    /// Do not read: the lookup returns [`Lookup::Miss`], and the caller, which knows
    /// it deferred, reads the value and asks again.
    Defer,
}

/// A closure as a [`Visit`].
pub(super) struct Call<F>(pub(super) F);

impl<R, F: FnOnce(ItemRef<'_>) -> R> Visit for Call<F> {
    type Output = R;
    #[inline]
    fn visit(self, item: ItemRef<'_>) -> R {
        (self.0)(item)
    }
}

impl Peeked {
    /// Nothing seen: [`Peeked::default`], usable in constants.
    pub const NONE: Peeked = Peeked {
        cell: Cell::NONE,
        e: 0,
        rec: std::ptr::null(),
        store: 0,
    };

    /// The peek followed the key's probe path as far as it looks without reaching its
    /// end: the key may be further on. Its cell is no slot's, so the check under the
    /// lock finds no entry there and searches the bucket.
    pub(super) const MAYBE: Peeked = Peeked {
        cell: Cell::OTHER,
        e: 0,
        rec: std::ptr::null(),
        store: 0,
    };

    /// Whether the key may be in the table, as far as the lock-free look saw: an
    /// entry of its tag on its probe path, or a path longer than the look follows.
    /// (A hint only; `false` is trusted only to skip looking for an old version to
    /// overwrite in place, see [`Store::store_whole`].)
    #[inline]
    pub(crate) fn may_exist(&self) -> bool {
        self.cell != Cell::NONE
    }
}

impl Default for Peeked {
    fn default() -> Peeked {
        Peeked::NONE
    }
}

/// A key's hash in one store ([`Store::hash`]); only that store's calls accept it.
///
/// The default value is the hash of no key: a placeholder for slots that hold a key
/// too long to look up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyHash(pub(super) u64);

impl KeyHash {
    /// The hash of no key ([`KeyHash::default`]), usable in constants.
    pub const NONE: KeyHash = KeyHash(0);
}

impl Store {
    /// Look up `key`; on a hit call `f` with the item and mark it fetched and accessed.
    /// `f` runs under the shard lock: it must be short (copy the bytes out, nothing more).
    pub fn get<R>(&self, key: &[u8], now: RelTime, f: impl FnOnce(ItemRef<'_>) -> R) -> Lookup<R> {
        self.get_inner(key, self.hash(key), Peeked::default(), None, now, Call(f))
    }

    /// The hash of `key` in this store, for the pipelined calls below: a multi-get
    /// hashes each key once and hands the hash to every stage.
    #[inline]
    pub fn hash(&self, key: &[u8]) -> KeyHash {
        KeyHash(hash_key(self.seed(), key))
    }

    /// First stage of a prefetched multi-get: prefetch the shard lock word and the index
    /// bucket of a key, without locking. Call it for a chunk of up to
    /// 2 x [`PREFETCH_DISTANCE`] keys before [`Store::prefetch_record`] for the same keys.
    ///
    /// A lookup of a key not in cache waits for three misses in a row (bucket, record,
    /// lock word), and the full barrier of each lock keeps the misses of the next key
    /// from starting early. Prefetches are not held back by a lock, so a multi-get that
    /// runs this stage and [`Store::prefetch_record`] ahead of its lookups overlaps the
    /// misses of many keys.
    #[inline(always)]
    pub fn prefetch_index(&self, h: KeyHash) {
        self.shard_for(h.0).locate(h.0);
    }

    /// Second stage, for the same chunk of keys, once their buckets have arrived: without
    /// the lock, find the entry the bucket holds for the key (by
    /// tag, without reading the key) and prefetch its record's header, key and the
    /// start of its value. Changes nothing; returns what it found, for the lookup to
    /// check under the lock before it searches the bucket itself.
    #[inline(always)]
    pub fn prefetch_record(&self, h: KeyHash, key_len: usize) -> Peeked {
        let found = self.hints[((h.0 >> 40) as usize & self.shard_mask) % MAX_SHARDS].peek(h.0);
        self.prefetch_found(found, key_len)
    }

    /// [`Store::prefetch_index`] that keeps where the bucket is, for
    /// [`Store::prefetch_located`]: the second stage then neither finds the shard's
    /// bucket array nor computes the bucket again.
    #[inline(always)]
    pub fn locate(&self, h: KeyHash) -> Located<'_> {
        self.shard_for(h.0).locate(h.0)
    }

    /// [`Store::prefetch_record`] for a key that [`Store::locate`] located.
    #[inline(always)]
    pub fn prefetch_located(&self, at: Located<'_>, h: KeyHash, key_len: usize) -> Peeked {
        self.prefetch_found(at.peek(h.0), key_len)
    }

    /// Prefetch the record a peek found, and say where it was.
    #[inline(always)]
    fn prefetch_found(&self, found: Peek, key_len: usize) -> Peeked {
        let Peek { cell, e } = found;
        // Entry 0: `Peek::ABSENT`, `Peek::UNKNOWN`, or a slot being filled or emptied
        // meanwhile. 0 is also the one entry the check under the lock cannot confirm
        // (`holds_at`).
        if e == 0 {
            return if found == Peek::ABSENT {
                Peeked::NONE
            } else {
                Peeked::MAYBE
            };
        }
        let (seg, off) = unpack(e);
        let Some(rec) = self.mem(seg).address_of(off as usize) else {
            return Peeked::MAYBE;
        };
        let len = item::MAX_HEADER_BYTES + key_len + 64;
        segment::prefetch_head(rec as usize, len);
        Peeked {
            cell,
            e,
            rec,
            store: self.id,
        }
    }

    /// [`Store::get`] with the key's hash already computed by [`Store::hash`], and
    /// where [`Store::prefetch_record`] saw the key (or `Peeked::default()`). What to
    /// do with the item is a [`Visit`], so that a hot caller can have it inlined.
    #[inline]
    pub fn get_hashed<V: Visit>(
        &self,
        key: &[u8],
        h: KeyHash,
        peeked: Peeked,
        now: RelTime,
        v: V,
    ) -> Lookup<V::Output> {
        self.get_inner(key, h, peeked, None, now, v)
    }

    /// memcached `gat`/`gats`: on a hit, set the new exptime first, then call `f`.
    pub fn get_and_touch<R>(
        &self,
        key: &[u8],
        exptime: RelTime,
        now: RelTime,
        f: impl FnOnce(ItemRef<'_>) -> R,
    ) -> Lookup<R> {
        self.get_inner(
            key,
            self.hash(key),
            Peeked::default(),
            Some(exptime),
            now,
            Call(f),
        )
    }

    /// [`Store::get_and_touch`] with the key's hash already computed, and where
    /// [`Store::prefetch_record`] saw it.
    #[inline]
    pub fn get_and_touch_hashed<V: Visit>(
        &self,
        key: &[u8],
        h: KeyHash,
        peeked: Peeked,
        exptime: RelTime,
        now: RelTime,
        v: V,
    ) -> Lookup<V::Output> {
        self.get_inner(key, h, peeked, Some(exptime), now, v)
    }

    // Inlined: a multi-get calls it once per key, and the call's prologue, epilogue
    // and argument shuffling would be a large part of each key's work.
    #[inline(always)]
    fn get_inner<V: Visit>(
        &self,
        key: &[u8],
        h: KeyHash,
        peeked: Peeked,
        exptime: Option<RelTime>,
        now: RelTime,
        v: V,
    ) -> Lookup<V::Output> {
        debug_assert_eq!(
            h.0,
            hash_key(self.seed(), key),
            "a KeyHash of another key or store"
        );
        let h = h.0;
        let mut shard = self.shard_for(h).lock();
        let Shard {
            table, stats, held, ..
        } = &mut *shard;
        let (e, hdr, mut bytes) =
            match self.find_live_record_from(table, stats, held, h, key, peeked, now) {
                Ok(found) => found,
                Err(miss) => return miss.map_never(),
            };
        if hdr.prefix.flash {
            // Out of line with as little as possible carried to it: the header is read
            // again there, so that the hot path keeps the one it found in registers.
            return self.get_stub(shard, key, h, e, exptime, now, v);
        }
        // In steady state an item read before is marked already: then nothing is
        // written, and the record found by the lookup is the one handed to `f`.
        if self.policy.read_marks_due(hdr.mark) || exptime.is_some() {
            // The bytes `bytes` points at are not read again until it is re-borrowed here
            // (only its length is passed): the window written needs `held` alone.
            let len = bytes.len();
            bytes = self.mark_read(held, e, exptime, len);
        }
        let origin = Origin::segment_id(unpack(e).0);
        // The key handed on is the caller's, equal to the stored one (the lookup compared
        // them), and the value is the record's last `vlen` bytes: the record's offsets
        // are not worked out again for every key of a multi-get.
        let value = &bytes[bytes.len() - hdr.prefix.vlen..];
        let result = v.visit(ItemRef {
            key,
            value,
            flags: hdr.flags,
            cas: hdr.cas,
            origin,
        });
        drop(shard);
        Lookup::Hit(result)
    }

    /// Find the live item for `key` in a locked shard. An expired or flushed item is
    /// unlinked on the way and reported as such.
    pub(crate) fn do_find_live(
        &self,
        shard: &mut Shard,
        h: u64,
        key: &[u8],
        now: RelTime,
    ) -> Result<(u64, Header), Lookup<std::convert::Infallible>> {
        let Shard {
            table, stats, held, ..
        } = shard;
        self.do_find_live_record(table, stats, held, h, key, now)
            .map(|(e, hdr, _)| (e, hdr))
    }

    /// [`Store::do_find_live`] that also returns the whole record of the live item, read
    /// once: the key comparison of the lookup borrows it, and the header is decoded
    /// from the same borrow. The shard comes in its parts, so that the record borrows
    /// only `held`: it is valid while the shard stays locked, and a caller that writes
    /// the item (through [`Store::mut_window`], which borrows `held` mutably) cannot
    /// use it afterwards.
    #[inline(always)]
    pub(crate) fn do_find_live_record<'a>(
        &'a self,
        table: &mut IndexTable,
        stats: &mut ShardStats,
        held: &'a LockHeld,
        h: u64,
        key: &[u8],
        now: RelTime,
    ) -> Result<(u64, Header, &'a [u8]), Lookup<std::convert::Infallible>> {
        self.find_live_record_from(table, stats, held, h, key, Peeked::default(), now)
    }

    /// [`Store::do_find_live_record`] that first tries where `peeked` saw the key: if
    /// that slot still holds the same entry and its key is `key`, the bucket is not
    /// searched.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(super) fn find_live_record_from<'a>(
        &'a self,
        table: &mut IndexTable,
        stats: &mut ShardStats,
        held: &'a LockHeld,
        h: u64,
        key: &[u8],
        peeked: Peeked,
        now: RelTime,
    ) -> Result<(u64, Header, &'a [u8]), Lookup<std::convert::Infallible>> {
        let mut found = self.peeked_record_if_key(held, table, peeked, key);
        if found.is_none() {
            // A loop of our own over the candidates, so that the key comparison inlines.
            for (pos, e) in table.candidates(h) {
                if let Some((p, record)) = self.record_if_key(held, e, key) {
                    found = Some((pos, e, p, record));
                    break;
                }
            }
        }
        let Some((pos, e, prefix, record)) = found else {
            return Err(Lookup::Miss);
        };
        // The prefix the key comparison decoded is not decoded again.
        let hdr = Header::parse_from(prefix, record, self.cas_base(unpack(e).0));
        match self.liveness(&hdr, now) {
            Liveness::Live => Ok((e, hdr, record)),
            gone => {
                table.remove(pos, h);
                self.unlinked(held, stats, e);
                Err(if gone == Liveness::Expired {
                    Lookup::Expired
                } else {
                    Lookup::Flushed
                })
            }
        }
    }
}
