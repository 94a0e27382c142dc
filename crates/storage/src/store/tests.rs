//! The store's tests, of every part of it.

use super::read::Call;
use super::record::bytes_eq;
use super::write::copy_key;
use super::*;
use crate::index::{hash_key, Located};
use crate::{ArithOutcome, BuildError, ItemRef, StoreMode, StoreOutcome};

const NOW: RelTime = 100;

#[test]
fn copy_key_every_length() {
    let src: Vec<u8> = (1..=60u8).collect();
    for n in 0..=60 {
        let mut dst = vec![0u8; n];
        copy_key(&mut dst, &src[..n]);
        assert_eq!(dst, &src[..n]);
    }
}

#[test]
fn bytes_eq_matches_slice_equality() {
    let a: Vec<u8> = (0..80u8).collect();
    for n in 0..80 {
        assert!(bytes_eq(&a[..n], &a[..n]));
        assert!(!bytes_eq(&a[..n], &a[..n + 1]));
        for flip in 0..n {
            let mut b = a[..n].to_vec();
            b[flip] ^= 0x80;
            assert!(!bytes_eq(&a[..n], &b), "n={n} flip={flip}");
        }
    }
}

fn store() -> Store {
    Store::builder().memory_limit(4 << 20).build().unwrap()
}

fn get(s: &Store, key: &[u8], now: RelTime) -> Option<(Vec<u8>, u32, u64)> {
    s.get(key, now, |it| (it.value.to_vec(), it.flags, it.cas))
        .hit()
}

fn set(s: &Store, key: &[u8], value: &[u8]) -> StoreOutcome {
    s.store(StoreMode::Set, key, 0, 0, value, NOW)
}

#[test]
fn store_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Store>();
}

/// Where the index points for `key`.
fn entry_of(s: &Store, key: &[u8]) -> Option<u64> {
    let h = hash_key(s.seed(), key);
    let shard = s.shard_for(h).lock();
    shard
        .table
        .find_map(h, |e| s.key_eq(&shard.held, e, key).then_some(e))
        .map(|(_, e)| e)
}

#[test]
fn every_stored_key_may_exist_to_a_peek_and_is_overwritten_in_place() {
    // Enough keys that some sit further along their probe path than a peek looks
    // (one in a few thousand): those must read as "maybe", never as absent, or a
    // set of them would write a new item instead of overwriting.
    let n = if cfg!(miri) { 300 } else { 60_000u32 };
    let s = Store::builder().memory_limit(8 << 20).build().unwrap();
    let keys: Vec<Vec<u8>> = (0..n).map(|k| format!("k{k}").into_bytes()).collect();
    for k in &keys {
        s.store(StoreMode::Set, k, 0, 0, b"v1", 1);
    }
    let mut maybe = 0;
    for k in &keys {
        let p = s.prefetch_record(s.hash(k), k.len());
        assert!(p.may_exist(), "{:?}", String::from_utf8_lossy(k));
        maybe += usize::from(p.cell == Peeked::MAYBE.cell);
    }
    let before = s.stats();
    for k in &keys {
        s.store(StoreMode::Set, k, 0, 0, b"v2", 2);
    }
    let after = s.stats();
    assert_eq!(after.segments_used, before.segments_used, "{maybe} maybe");
    assert_eq!(
        (after.bytes, after.curr_items),
        (before.bytes, before.curr_items)
    );
    assert_eq!(get(&s, &keys[0], 3).map(|g| g.0), Some(b"v2".to_vec()));
}

#[test]
fn peek_carries_the_record_and_only_its_own_store_trusts_it() {
    let a = store();
    let b = store();
    assert_ne!(a.id, b.id);
    for s in [&a, &b] {
        s.store(StoreMode::Set, b"first", 3, 0, b"at entry 0", 1);
        s.store(StoreMode::Set, b"key", 3, 0, b"value", 1);
    }
    // The first item's entry is 0, which the check under the lock cannot tell from an
    // empty slot: its peek carries no record, and the lookup searches the bucket.
    let first = a.prefetch_record(a.hash(b"first"), 5);
    assert!(first.rec.is_null() && first.may_exist());
    assert_eq!(
        a.get_hashed(
            b"first",
            a.hash(b"first"),
            first,
            1,
            Call(|i: ItemRef<'_>| i.value.to_vec())
        ),
        Lookup::Hit(b"at entry 0".to_vec())
    );
    let peek = |s: &Store| {
        let p = s.prefetch_record(s.hash(b"key"), 3);
        assert!(!p.rec.is_null() && p.store == s.id);
        p
    };
    let read = |s: &Store, p: Peeked| {
        s.get_hashed(
            b"key",
            s.hash(b"key"),
            p,
            1,
            Call(|i: ItemRef<'_>| i.value.to_vec()),
        )
    };
    // Each store reads its own record through its own peek, and the other's peek
    // is ignored (the bucket is searched), even where it points at the same slot.
    let (pa, pb) = (peek(&a), peek(&b));
    assert_eq!(read(&a, pa), Lookup::Hit(b"value".to_vec()));
    assert_eq!(read(&b, pa), Lookup::Hit(b"value".to_vec()));
    // A peek gone stale (the key rewritten elsewhere) is not trusted either.
    a.store(StoreMode::Set, b"key", 3, 0, b"longer value", 1);
    assert_eq!(read(&a, pa), Lookup::Hit(b"longer value".to_vec()));
    a.delete(b"key", 1);
    assert_eq!(read(&a, pa), Lookup::Miss);
    assert_eq!(read(&b, pb), Lookup::Hit(b"value".to_vec()));
}

#[test]
fn peek_located_before_the_table_grows_still_finds_every_key() {
    // Keys located (bucket array and bucket kept) while the table is small, then
    // enough keys stored to grow it several times before the peeks and lookups:
    // each peek reads an array the table has outgrown, and each lookup still
    // finds its key (or its absence) under the lock.
    let n = if cfg!(miri) { 40 } else { 2_000u32 };
    let s = Store::builder().memory_limit(8 << 20).build().unwrap();
    let keys: Vec<Vec<u8>> = (0..n).map(|k| format!("key-{k}").into_bytes()).collect();
    for k in keys.iter().step_by(2) {
        s.store(StoreMode::Set, k, 0, 0, k, 1);
    }
    let hashes: Vec<KeyHash> = keys.iter().map(|k| s.hash(k)).collect();
    let located: Vec<Located<'_>> = hashes.iter().map(|&h| s.locate(h)).collect();
    for i in 0..8 * n {
        let k = format!("grow-{i}");
        s.store(StoreMode::Set, k.as_bytes(), 0, 0, b"g", 1);
    }
    for (i, k) in keys.iter().enumerate() {
        let p = s.prefetch_located(located[i], hashes[i], k.len());
        let got = s.get_hashed(
            k,
            hashes[i],
            p,
            1,
            Call(|it: ItemRef<'_>| it.value.to_vec()),
        );
        let want = if i % 2 == 0 {
            Lookup::Hit(k.clone())
        } else {
            Lookup::Miss
        };
        assert_eq!(got, want, "{}", String::from_utf8_lossy(k));
    }
}

#[test]
fn overwrite_in_place_rewrites_value_flags_and_header() {
    let s = store();
    let (_, c1) = s.store_cas(StoreMode::Set, b"key", 7, 0, b"first", 1);
    let e1 = entry_of(&s, b"key");
    let (_, c2) = s.store_cas(StoreMode::Set, b"key", 9, 40, b"again", 2);
    let e2 = entry_of(&s, b"key");
    assert_eq!(e1, e2, "written over the old item");
    assert!(c2 > c1);
    assert_eq!(get(&s, b"key", 3), Some((b"again".to_vec(), 9, c2)));
    assert_eq!(get(&s, b"key", 40), None, "the new exptime");
    // Another length: a new item elsewhere.
    s.store(StoreMode::Set, b"key", 9, 0, b"longer", 3);
    let e3 = entry_of(&s, b"key");
    assert_ne!(e3, e2);
    assert_eq!(get(&s, b"key", 3).map(|g| g.0), Some(b"longer".to_vec()));
}

#[test]
fn set_then_get() {
    let s = store();
    assert_eq!(s.get(b"k", NOW, |_| ()), Lookup::Miss);
    assert_eq!(
        s.store(StoreMode::Set, b"k", 7, 0, b"hello", NOW),
        StoreOutcome::Stored
    );
    let (v, flags, cas) = get(&s, b"k", NOW).unwrap();
    assert_eq!((v.as_slice(), flags), (&b"hello"[..], 7));
    assert!(cas > 0);
    assert_eq!(s.get(b"k", NOW, |it| it.key.to_vec()).hit().unwrap(), b"k");
    assert_eq!(set(&s, b"k", b""), StoreOutcome::Stored);
    assert_eq!(get(&s, b"k", NOW).unwrap().0, b"");
    let st = s.stats();
    assert_eq!((st.curr_items, st.total_items), (1, 2));
    assert_eq!(st.bytes, item::item_len(1, 0, false, false) as u64);
}

#[test]
fn add_outcomes() {
    let s = store();
    assert_eq!(
        s.store(StoreMode::Add, b"k", 0, 0, b"1", NOW),
        StoreOutcome::Stored
    );
    assert_eq!(
        s.store(StoreMode::Add, b"k", 0, 0, b"2", NOW),
        StoreOutcome::NotStored
    );
    assert_eq!(get(&s, b"k", NOW).unwrap().0, b"1");
    // An expired item does not block add.
    s.store(StoreMode::Set, b"e", 0, NOW, b"old", NOW - 1);
    assert_eq!(
        s.store(StoreMode::Add, b"e", 0, 0, b"new", NOW),
        StoreOutcome::Stored
    );
    assert_eq!(get(&s, b"e", NOW).unwrap().0, b"new");
    assert_eq!(s.stats().curr_items, 2);
}

#[test]
fn replace_outcomes() {
    let s = store();
    assert_eq!(
        s.store(StoreMode::Replace, b"k", 0, 0, b"1", NOW),
        StoreOutcome::NotStored
    );
    assert_eq!(get(&s, b"k", NOW), None);
    set(&s, b"k", b"1");
    assert_eq!(
        s.store(StoreMode::Replace, b"k", 3, 0, b"2", NOW),
        StoreOutcome::Stored
    );
    assert_eq!(get(&s, b"k", NOW).unwrap().0, b"2");
    assert_eq!(get(&s, b"k", NOW).unwrap().1, 3);
}

#[test]
fn cas_outcomes() {
    let s = store();
    assert_eq!(
        s.store(StoreMode::Cas(1), b"k", 0, 0, b"1", NOW),
        StoreOutcome::NotFound
    );
    let (out, cas) = s.store_cas(StoreMode::Set, b"k", 0, 0, b"1", NOW);
    assert_eq!(out, StoreOutcome::Stored);
    assert_eq!(get(&s, b"k", NOW).unwrap().2, cas);
    assert_eq!(
        s.store(StoreMode::Cas(cas + 100), b"k", 0, 0, b"2", NOW),
        StoreOutcome::Exists
    );
    let (out, cas2) = s.store_cas(StoreMode::Cas(cas), b"k", 0, 0, b"3", NOW);
    assert_eq!(out, StoreOutcome::Stored);
    assert!(cas2 > cas);
    assert_eq!(
        s.store(StoreMode::Cas(cas), b"k", 0, 0, b"4", NOW),
        StoreOutcome::Exists
    );
    assert_eq!(get(&s, b"k", NOW).unwrap().0, b"3");
    // cas on an expired item is NotFound.
    s.store(StoreMode::Set, b"e", 0, NOW, b"x", NOW - 1);
    let c = s.get(b"e", NOW - 1, |it| it.cas).hit().unwrap();
    assert_eq!(
        s.store(StoreMode::Cas(c), b"e", 0, 0, b"y", NOW),
        StoreOutcome::NotFound
    );
}

#[test]
fn append_prepend_keep_flags_and_exptime() {
    let s = store();
    assert_eq!(
        s.store(StoreMode::Append, b"k", 0, 0, b"x", NOW),
        StoreOutcome::NotStored
    );
    assert_eq!(
        s.store(StoreMode::Prepend, b"k", 0, 0, b"x", NOW),
        StoreOutcome::NotStored
    );
    let (_, c0) = s.store_cas(StoreMode::Set, b"k", 42, NOW + 10, b"mid", NOW);
    let (out, c1) = s.store_cas(StoreMode::Append, b"k", 1, 0, b">>", NOW);
    assert_eq!(out, StoreOutcome::Stored);
    assert!(c1 > c0);
    assert_eq!(
        s.store(StoreMode::Prepend, b"k", 2, 0, b"<<", NOW),
        StoreOutcome::Stored
    );
    let (v, flags, c2) = get(&s, b"k", NOW).unwrap();
    assert_eq!((v.as_slice(), flags), (&b"<<mid>>"[..], 42));
    assert!(c2 > c1);
    // The exptime was kept: gone at NOW + 10.
    assert_eq!(s.get(b"k", NOW + 10, |_| ()), Lookup::Expired);
    assert_eq!(s.stats().curr_items, 0);
}

#[test]
fn append_too_large_is_not_stored() {
    let s = Store::builder()
        .memory_limit(4 << 20)
        .item_size_max(2048)
        .build()
        .unwrap();
    let big = vec![b'a'; 1500];
    assert_eq!(
        s.store(StoreMode::Set, b"k", 0, 0, &big, NOW),
        StoreOutcome::Stored
    );
    assert_eq!(
        s.store(StoreMode::Append, b"k", 0, 0, &big, NOW),
        StoreOutcome::NotStored
    );
    assert_eq!(get(&s, b"k", NOW).unwrap().0.len(), 1500);
}

#[test]
fn too_large_follows_memcached_rule() {
    let s = Store::builder()
        .memory_limit(4 << 20)
        .item_size_max(2048)
        .build()
        .unwrap();
    let max = 2048 - MEMCACHED_ITEM_OVERHEAD_BYTES - 1;
    assert!(s.item_fits(1, max, 0));
    assert!(!s.item_fits(1, max + 1, 0));
    assert!(!s.item_fits(1, max, 5), "non-zero flags cost 4 bytes");
    assert!(!s.item_fits(0, 1, 0));
    assert!(!s.item_fits(256, 1, 0));
    assert_eq!(
        s.store(StoreMode::Set, b"k", 0, 0, &vec![0; max], NOW),
        StoreOutcome::Stored
    );
    assert_eq!(
        s.store(StoreMode::Set, b"k", 0, 0, &vec![0; max + 1], NOW),
        StoreOutcome::TooLarge
    );
    // The default store takes a value of almost 1 MiB.
    let d = store();
    let v = vec![7u8; (1 << 20) - 100];
    assert_eq!(
        d.store(StoreMode::Set, b"big", 0, 0, &v, NOW),
        StoreOutcome::Stored
    );
    assert_eq!(get(&d, b"big", NOW).unwrap().0, v);
}

#[test]
fn cas_ids_are_unique_and_increasing() {
    let s = store();
    let mut last = 0;
    for i in 0..100u32 {
        let key = format!("k{}", i % 7);
        let (out, cas) = s.store_cas(StoreMode::Set, key.as_bytes(), 0, 0, b"v", NOW);
        assert_eq!(out, StoreOutcome::Stored);
        assert!(cas > last);
        last = cas;
    }
    assert!(matches!(
        s.incr_decr(b"k0", 1, true, NOW),
        ArithOutcome::NonNumeric
    ));
    set(&s, b"n", b"1");
    let before = get(&s, b"n", NOW).unwrap().2;
    assert_eq!(s.incr_decr(b"n", 1, true, NOW), ArithOutcome::Value(2));
    assert!(get(&s, b"n", NOW).unwrap().2 > before);
}

#[test]
fn delete_and_touch() {
    let s = store();
    assert!(!s.delete(b"k", NOW));
    assert!(!s.touch(b"k", 0, NOW));
    set(&s, b"k", b"v");
    assert!(s.touch(b"k", NOW + 5, NOW));
    assert!(get(&s, b"k", NOW + 4).is_some());
    assert_eq!(s.get(b"k", NOW + 5, |_| ()), Lookup::Expired);
    set(&s, b"k", b"v");
    assert!(s.delete(b"k", NOW));
    assert!(!s.delete(b"k", NOW));
    assert_eq!(get(&s, b"k", NOW), None);
    assert_eq!(s.stats().curr_items, 0);
    assert_eq!(s.stats().bytes, 0);
}

#[test]
fn expiry_rules() {
    let s = store();
    s.store(StoreMode::Set, b"never", 0, 0, b"v", NOW);
    s.store(StoreMode::Set, b"soon", 0, NOW + 1, b"v", NOW);
    s.store(StoreMode::Set, b"past", 0, NOW, b"v", NOW);
    assert!(get(&s, b"never", u32::MAX).is_some());
    assert!(get(&s, b"soon", NOW).is_some());
    assert_eq!(s.get(b"soon", NOW + 1, |_| ()), Lookup::Expired);
    assert_eq!(s.get(b"soon", NOW + 1, |_| ()), Lookup::Miss);
    assert_eq!(s.get(b"past", NOW, |_| ()), Lookup::Expired);
    assert!(!s.touch(b"past", 0, NOW));
}

#[test]
fn get_and_touch_sets_exptime_first() {
    let s = store();
    assert_eq!(s.get_and_touch(b"k", 0, NOW, |_| ()), Lookup::Miss);
    s.store(StoreMode::Set, b"k", 0, NOW + 1, b"v", NOW);
    let got = s.get_and_touch(b"k", NOW + 50, NOW, |it| it.value.to_vec());
    assert_eq!(got, Lookup::Hit(b"v".to_vec()));
    assert!(get(&s, b"k", NOW + 49).is_some());
    assert_eq!(s.get_and_touch(b"k", 0, NOW + 50, |_| ()), Lookup::Expired);
    // gat with exptime 0 makes the item permanent.
    s.store(StoreMode::Set, b"p", 0, NOW + 1, b"v", NOW);
    assert!(s.get_and_touch(b"p", 0, NOW, |_| ()).is_hit());
    assert!(get(&s, b"p", NOW + 1000).is_some());
}

fn value_of(s: &Store, key: &[u8]) -> Vec<u8> {
    get(s, key, NOW).unwrap().0
}

#[test]
fn incr_decr_edges() {
    let s = store();
    assert_eq!(s.incr_decr(b"n", 1, true, NOW), ArithOutcome::NotFound);
    s.store(StoreMode::Set, b"n", 9, NOW + 100, b"100", NOW);
    assert_eq!(s.incr_decr(b"n", 1, false, NOW), ArithOutcome::Value(99));
    assert_eq!(value_of(&s, b"n"), b"99 ");
    assert_eq!(s.incr_decr(b"n", 1, true, NOW), ArithOutcome::Value(100));
    assert_eq!(value_of(&s, b"n"), b"100");
    assert_eq!(s.incr_decr(b"n", 900, true, NOW), ArithOutcome::Value(1000));
    assert_eq!(
        value_of(&s, b"n"),
        b"1000",
        "longer result: exactly the digits"
    );
    assert_eq!(get(&s, b"n", NOW).unwrap().1, 9, "flags kept");
    assert_eq!(
        s.get(b"n", NOW + 100, |_| ()),
        Lookup::Expired,
        "exptime kept"
    );

    s.store(StoreMode::Set, b"n", 0, 0, b"5", NOW);
    assert_eq!(s.incr_decr(b"n", 10, false, NOW), ArithOutcome::Value(0));
    assert_eq!(value_of(&s, b"n"), b"0");

    s.store(StoreMode::Set, b"n", 0, 0, b"18446744073709551615", NOW);
    assert_eq!(s.incr_decr(b"n", 2, true, NOW), ArithOutcome::Value(1));
    assert_eq!(value_of(&s, b"n"), b"1                   ");
    assert_eq!(s.incr_decr(b"n", 1, true, NOW), ArithOutcome::Value(2));

    s.store(StoreMode::Set, b"n", 0, 0, b"  7  ", NOW);
    assert_eq!(s.incr_decr(b"n", 1, true, NOW), ArithOutcome::Value(8));
    assert_eq!(value_of(&s, b"n"), b"8    ");

    for bad in [
        &b"-5"[..],
        b"",
        b"abc",
        b"12a",
        b"   ",
        b"99999999999999999999999",
    ] {
        s.store(StoreMode::Set, b"bad", 0, 0, bad, NOW);
        assert_eq!(
            s.incr_decr(b"bad", 1, true, NOW),
            ArithOutcome::NonNumeric,
            "{bad:?}"
        );
        assert_eq!(value_of(&s, b"bad"), bad);
    }
}

#[test]
fn flush_all_immediate() {
    let s = store();
    set(&s, b"a", b"1");
    set(&s, b"b", b"2");
    s.flush_all(NOW, NOW);
    assert_eq!(s.get(b"a", NOW, |_| ()), Lookup::Flushed);
    assert_eq!(s.get(b"a", NOW, |_| ()), Lookup::Miss);
    assert_eq!(
        s.store(StoreMode::Replace, b"b", 0, 0, b"x", NOW),
        StoreOutcome::NotStored
    );
    // memcached's server passes `now - 1` for an immediate flush: items stored later in
    // the same second have a newer time and CAS id, so they survive.
    s.flush_all(NOW - 1, NOW);
    set(&s, b"c", b"3");
    assert!(get(&s, b"c", NOW).is_some());
    assert!(get(&s, b"c", NOW + 10).is_some());
    assert_eq!(s.sweep_expired(NOW, 100).unlinked, 0);
}

#[test]
fn flush_all_delayed() {
    let s = store();
    set(&s, b"a", b"1");
    s.flush_all(NOW + 10, NOW);
    assert!(get(&s, b"a", NOW + 9).is_some());
    s.store(StoreMode::Set, b"b", 0, 0, b"2", NOW + 5);
    s.store(StoreMode::Set, b"c", 0, 0, b"3", NOW + 11);
    assert_eq!(s.get(b"a", NOW + 10, |_| ()), Lookup::Flushed);
    assert_eq!(s.get(b"b", NOW + 10, |_| ()), Lookup::Flushed);
    assert!(get(&s, b"c", NOW + 11).is_some());
}

#[test]
fn flush_consumes_a_cas_id() {
    let s = store();
    let (_, c1) = s.store_cas(StoreMode::Set, b"a", 0, 0, b"1", NOW);
    s.flush_all(NOW - 1, NOW);
    let (_, c2) = s.store_cas(StoreMode::Set, b"a", 0, 0, b"1", NOW);
    assert_eq!(c2, c1 + 2);
    s.flush_all(NOW + 100, NOW);
    let (_, c3) = s.store_cas(StoreMode::Set, b"a", 0, 0, b"1", NOW);
    assert_eq!(c3, c2 + 1, "a delayed flush takes no CAS id");
}

#[test]
fn sweep_unlinks_expired_items() {
    let s = store();
    for i in 0..1000u32 {
        let exp = if i % 2 == 0 { NOW + 1 } else { 0 };
        s.store(
            StoreMode::Set,
            format!("k{i}").as_bytes(),
            0,
            exp,
            b"v",
            NOW,
        );
    }
    assert_eq!(s.sweep_expired(NOW, 10_000).unlinked, 0);
    assert_eq!(s.sweep_expired(NOW + 1, 100).unlinked, 100);
    let mut total = 100;
    for _ in 0..100 {
        total += s.sweep_expired(NOW + 1, 10_000).unlinked;
    }
    assert_eq!(total, 500);
    let st = s.stats();
    assert_eq!(st.curr_items, 500);
    assert_eq!(st.expired_unfetched, 500);
    assert_eq!(st.reclaimed, 500);
    s.reset_stats();
    let st = s.stats();
    assert_eq!((st.curr_items, st.total_items, st.reclaimed), (500, 0, 0));
}

/// With large pages, items fill, are read from and are evicted out of segments in
/// the one mapping as from heap segments. Not under Miri (no `mmap`); skipped on a
/// kernel without transparent huge pages.
#[test]
#[cfg_attr(miri, ignore)]
fn large_page_store_stores_reads_and_evicts() {
    let s = match Store::builder()
        .memory_limit(4 << 20)
        .large_pages(true)
        .build()
    {
        Ok(s) => s,
        Err(e) if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists() => {
            eprintln!("skipped: {e}");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    assert!(s.large_pages());
    assert!(!store().large_pages());
    let value = vec![b'v'; 1000];
    // Ten times the memory: every segment is filled and evicted several times.
    let n = 40_000u32;
    for k in 0..n {
        let mut v = value.clone();
        v[..4].copy_from_slice(&k.to_le_bytes());
        assert_eq!(
            set(&s, format!("k{k}").as_bytes(), &v),
            StoreOutcome::Stored
        );
    }
    let stats = s.stats();
    assert_eq!(stats.segments_used, stats.segments_total);
    assert!(stats.evictions > 0);
    let mut hits = 0;
    for k in 0..n {
        if let Some((v, _, _)) = get(&s, format!("k{k}").as_bytes(), NOW) {
            assert_eq!(&v[..4], &k.to_le_bytes());
            assert_eq!(v.len(), value.len());
            hits += 1;
        }
    }
    // The newest items (about 4 MiB of them) are all there.
    assert!(hits > 2_000, "{hits}");
    assert!(get(&s, format!("k{}", n - 1).as_bytes(), NOW).is_some());
}

/// `cache_memlimit`: a higher limit lets the store use more segments, a lower one
/// brings the segments in use down as items are written, the newest items stay
/// readable throughout, and a limit past the table's room is refused.
#[test]
fn memory_limit_rises_and_falls_at_run_time() {
    let mib = 1 << 20;
    let s = Store::builder().memory_limit(4 * mib).build().unwrap();
    assert_eq!(s.segment_size(), mib);
    let value = vec![b'v'; 2000];
    let mut next = 0u32;
    let mut write = |mb: usize| {
        let end = next + (mb * mib / value.len()) as u32;
        while next < end {
            let mut v = value.clone();
            v[..4].copy_from_slice(&next.to_le_bytes());
            assert_eq!(
                set(&s, format!("k{next}").as_bytes(), &v),
                StoreOutcome::Stored
            );
            next += 1;
        }
        next
    };
    let newest_readable = |s: &Store, last: u32, n: u32| {
        for k in last - n..last {
            let (v, _, _) =
                get(s, format!("k{k}").as_bytes(), NOW).unwrap_or_else(|| panic!("k{k} missing"));
            assert_eq!(&v[..4], &k.to_le_bytes());
        }
    };
    write(16);
    assert_eq!(s.stats().segments_used, 4);
    assert!(s.set_memory_limit(12 * mib));
    assert_eq!(s.stats().limit_maxbytes, 12 << 20);
    assert_eq!(s.stats().segments_total, 12);
    let last = write(32);
    assert_eq!(s.stats().segments_used, 12);
    // 10 MiB of the newest items: more than the old limit could hold.
    newest_readable(&s, last, (10 * mib / value.len()) as u32);
    assert!(s.set_memory_limit(3 * mib));
    assert_eq!(s.stats().segments_total, 3);
    assert_eq!(
        s.stats().segments_used,
        12,
        "nothing is given back until items are written"
    );
    let last = write(16);
    assert_eq!(s.stats().segments_used, 3);
    newest_readable(&s, last, (mib / value.len()) as u32);
    // Room for the host's memory, four times the starting limit, or 1024 segments; not
    // for a pebibyte.
    assert!(s.set_memory_limit(1024 * mib));
    assert!(!s.set_memory_limit(1 << 50));
    assert_eq!(s.stats().limit_maxbytes, 1024 << 20);
    // Writes take segments again, the retired ones included: 3 in use, plus about 17
    // for 16 MiB of values and their headers.
    write(16);
    let used = s.stats().segments_used;
    assert!((18..=21).contains(&used), "{used} segments in use");
}

/// A dump shows every live item once, whatever the budget per call, and skips expired
/// and deleted ones.
#[test]
fn dump_shows_every_live_item_once() {
    let s = Store::builder().memory_limit(16 << 20).build().unwrap();
    let n = if cfg!(miri) { 50 } else { 5_000u32 };
    for k in 0..n {
        let exptime = if k % 10 == 3 { NOW + 1 } else { 0 };
        let v = format!("v{k}");
        s.store(
            StoreMode::Set,
            format!("k{k}").as_bytes(),
            k,
            exptime,
            v.as_bytes(),
            NOW,
        );
    }
    for k in (0..n).filter(|k| k % 10 == 7) {
        s.delete(format!("k{k}").as_bytes(), NOW);
    }
    let later = NOW + 2;
    for budget in [1, 37, 100_000] {
        let mut cursor = crate::DumpCursor::default();
        let mut seen = std::collections::HashMap::new();
        let mut calls = 0;
        loop {
            calls += 1;
            let more = s.dump(&mut cursor, later, budget, |it| {
                let k: u32 = std::str::from_utf8(&it.key[1..]).unwrap().parse().unwrap();
                assert_eq!(it.flags, k);
                assert_eq!(it.value_len, format!("v{k}").len());
                assert_eq!(it.exptime, 0);
                assert!(!it.fetched);
                *seen.entry(k).or_insert(0) += 1;
            });
            if !more {
                break;
            }
        }
        let live: Vec<u32> = (0..n).filter(|k| k % 10 != 3 && k % 10 != 7).collect();
        assert_eq!(seen.len(), live.len(), "budget {budget}");
        assert!(
            live.iter().all(|k| seen.get(k) == Some(&1)),
            "budget {budget}"
        );
        assert!(budget > 1000 || calls > 1);
    }
}

#[test]
fn builder_validates() {
    assert_eq!(
        Store::builder().item_size_max(10).build().err(),
        Some(BuildError::ItemSizeTooSmall(10))
    );
    assert!(Store::builder().item_size_max(2 << 30).build().is_err());
    let s = Store::builder().memory_limit(1).build().unwrap();
    assert_eq!(s.stats().segments_total, 2);
    let s = Store::builder()
        .item_size_max(4 << 20)
        .memory_limit(64 << 20)
        .shards(100)
        .build()
        .unwrap();
    assert_eq!(s.segment_size(), 4 << 20);
    assert_eq!(s.stats().segments_total, 16);
    assert_eq!(s.shards.len(), 128);
    assert_eq!(s.stats().segments_used, 0, "segments are allocated lazily");
}

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

/// Items whose CAS id is out of their segment's narrow span: with 2^27 ids taken since
/// the open segment's base, a new item is written wide, an overwrite or `incr` of an
/// old narrow item writes a new item instead of rewriting in place, and every value,
/// CAS id and eviction walk stays right.
#[test]
fn cas_ids_past_a_segments_span_are_stored_whole() {
    let s = store();
    assert_eq!(set(&s, b"old", b"12"), StoreOutcome::Stored);
    let (_, _, old_cas) = get(&s, b"old", NOW).unwrap();
    s.cas.0.fetch_add(item::NARROW_CAS_SPAN, Ordering::Relaxed);
    // A new item in the same open segment: wide.
    assert_eq!(set(&s, b"new", b"v"), StoreOutcome::Stored);
    let (v, _, new_cas) = get(&s, b"new", NOW).unwrap();
    assert_eq!(v, b"v");
    assert!(new_cas > old_cas + item::NARROW_CAS_SPAN);
    let wide = {
        let h = hash_key(s.seed(), b"new");
        let shard = s.shard_for(h).lock();
        let e = shard
            .table
            .find(h, |e| s.key_eq(&shard.held, e, b"new"))
            .unwrap()
            .1;
        s.header(&shard.held, e).prefix.wide
    };
    assert!(wide, "a record whose id is past its segment's span is wide");
    // The same shape over the old narrow item: a new item, not a rewrite in place.
    let before = s.stats().bytes;
    assert_eq!(set(&s, b"old", b"34"), StoreOutcome::Stored);
    let (v, _, cas) = get(&s, b"old", NOW).unwrap();
    assert_eq!((v.as_slice(), cas > new_cas), (&b"34"[..], true));
    assert!(s.stats().bytes > before, "the wide version is longer");
    // incr of a narrow item out of span: a new item with the number.
    s.cas.0.fetch_add(item::NARROW_CAS_SPAN, Ordering::Relaxed);
    assert_eq!(set(&s, b"n", b"41"), StoreOutcome::Stored);
    s.cas.0.fetch_add(item::NARROW_CAS_SPAN, Ordering::Relaxed);
    assert_eq!(s.incr_decr(b"n", 1, true, NOW), ArithOutcome::Value(42));
    assert_eq!(get(&s, b"n", NOW).unwrap().0, b"42");
    // Fill past the memory so that segments holding wide and narrow records are
    // walked and reused; the last keys written all read back.
    let value = [b'w'; 300];
    for i in 0..60_000u32 {
        assert_eq!(
            set(&s, format!("k{i}").as_bytes(), &value),
            StoreOutcome::Stored
        );
    }
    assert!(s.stats().evictions > 0);
    for i in 59_000..60_000u32 {
        assert!(get(&s, format!("k{i}").as_bytes(), NOW).is_some(), "k{i}");
    }
}
