//! Overwrites in place: a set/replace/cas whose new item has the shape of the live one
//! (key, value length, client flags present or not) is written over it, so repeated
//! overwrites use no new memory; any other store writes a new item. Either way the
//! reader sees exactly what a new item would give.

use storage::{RelTime, Store, StoreMode, StoreOutcome};

const NOW: RelTime = 10;

fn fill(len: usize, tag: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (tag as usize).wrapping_mul(131).wrapping_add(i * 7) as u8)
        .collect()
}

fn store(s: &Store, mode: StoreMode, key: &str, flags: u32, exptime: RelTime, v: &[u8]) -> u64 {
    let (out, cas) = s.store_cas(mode, key.as_bytes(), flags, exptime, v, NOW);
    assert_eq!(out, StoreOutcome::Stored, "{mode:?} {key}");
    cas
}

/// (value, flags, cas) of a live key.
fn read(s: &Store, key: &str, now: RelTime) -> Option<(Vec<u8>, u32, u64)> {
    s.get(key.as_bytes(), now, |it| {
        (it.value.to_vec(), it.flags, it.cas)
    })
    .hit()
}

#[test]
fn same_shape_overwrites_use_no_new_memory() {
    // 1 000 keys of 1 KB (about 1 MB live) set 48 times over: a new item each time would
    // write 48 MB, more than the 32 MB store holds.
    let s = Store::builder().memory_limit(32 << 20).build().unwrap();
    for k in 0..1000u64 {
        store(
            &s,
            StoreMode::Set,
            &format!("key:{k:05}"),
            0,
            0,
            &fill(1000, k),
        );
    }
    let before = s.stats();
    let mut last_cas = 0;
    for round in 1..48u64 {
        for k in 0..1000u64 {
            let v = fill(1000, round * 1000 + k);
            let cas = store(&s, StoreMode::Set, &format!("key:{k:05}"), 0, 0, &v);
            assert!(cas > last_cas, "CAS ids keep increasing");
            last_cas = cas;
        }
    }
    let st = s.stats();
    assert_eq!(st.segments_used, before.segments_used, "{st:?}");
    assert_eq!(st.bytes, before.bytes);
    assert_eq!(st.curr_items, 1000);
    assert_eq!(st.total_items, 48_000, "every store counts as a new item");
    assert_eq!(st.evictions, 0);
    for k in 0..1000u64 {
        let (v, flags, _) = read(&s, &format!("key:{k:05}"), NOW).unwrap();
        assert_eq!((v, flags), (fill(1000, 47 * 1000 + k), 0));
    }
}

#[test]
fn an_overwrite_is_a_new_version_in_every_field() {
    let s = Store::builder().memory_limit(8 << 20).build().unwrap();
    let first = store(&s, StoreMode::Set, "k", 5, NOW + 100, &fill(64, 1));
    read(&s, "k", NOW).unwrap();
    // Same shape: new flags (both non-zero), exptime, CAS and value.
    let second = store(&s, StoreMode::Set, "k", 9, 0, &fill(64, 2));
    assert!(second > first);
    assert_eq!(read(&s, "k", NOW + 1000), Some((fill(64, 2), 9, second)));
    // The exptime is the new one: it was never-expire, now it expires.
    let third = store(&s, StoreMode::Set, "k", 9, NOW + 5, &fill(64, 3));
    assert_eq!(read(&s, "k", NOW + 4), Some((fill(64, 3), 9, third)));
    assert_eq!(read(&s, "k", NOW + 5), None);
}

#[test]
fn another_shape_writes_a_new_item() {
    let s = Store::builder().memory_limit(8 << 20).build().unwrap();
    store(&s, StoreMode::Set, "k", 0, 0, &fill(100, 1));
    let bytes = s.stats().bytes;
    // Longer value, then flags where there were none, then none again.
    let a = store(&s, StoreMode::Set, "k", 0, 0, &fill(101, 2));
    assert_eq!(read(&s, "k", NOW), Some((fill(101, 2), 0, a)));
    assert_eq!(s.stats().bytes, bytes + 1);
    let b = store(&s, StoreMode::Set, "k", 3, 0, &fill(101, 3));
    assert_eq!(read(&s, "k", NOW), Some((fill(101, 3), 3, b)));
    assert_eq!(s.stats().bytes, bytes + 1 + 4);
    let c = store(&s, StoreMode::Set, "k", 0, 0, &fill(101, 4));
    assert_eq!(read(&s, "k", NOW), Some((fill(101, 4), 0, c)));
    assert_eq!(s.stats().bytes, bytes + 1);
    assert_eq!(s.stats().curr_items, 1);
}

#[test]
fn replace_and_cas_overwrite_in_place_and_keep_their_conditions() {
    let s = Store::builder().memory_limit(8 << 20).build().unwrap();
    let v = |t| fill(200, t);
    let (out, _) = s.store_cas(StoreMode::Replace, b"k", 0, 0, &v(0), NOW);
    assert_eq!(out, StoreOutcome::NotStored, "replace of a missing key");
    let first = store(&s, StoreMode::Set, "k", 1, 0, &v(1));
    let used = s.stats().segments_used;
    let (out, _) = s.store_cas(StoreMode::Add, b"k", 1, 0, &v(2), NOW);
    assert_eq!(out, StoreOutcome::NotStored, "add of a live key");
    let second = store(&s, StoreMode::Replace, "k", 1, 0, &v(3));
    let (out, _) = s.store_cas(StoreMode::Cas(first), b"k", 1, 0, &v(4), NOW);
    assert_eq!(out, StoreOutcome::Exists, "cas with a stale id");
    let third = store(&s, StoreMode::Cas(second), "k", 1, 0, &v(5));
    assert_eq!(read(&s, "k", NOW), Some((v(5), 1, third)));
    assert_eq!(s.stats().total_items, 3);
    assert_eq!(s.stats().segments_used, used);
}

#[test]
fn an_overwritten_item_gets_a_second_chance_at_eviction() {
    // 8 segments of 1 MB. "old" is written first, into the first segment, and set again
    // (in place, so it stays there) just before that segment is evicted. A new item
    // would be at the head of the log; in place it is marked accessed, so the eviction
    // of its segment keeps it while the never-read keys beside it go.
    let s = Store::builder().memory_limit(8 << 20).build().unwrap();
    store(&s, StoreMode::Set, "old", 0, 0, &fill(1000, 1));
    let mut i = 0u64;
    while s.stats().segments_used < s.stats().segments_total {
        store(
            &s,
            StoreMode::Set,
            &format!("cold:{i}"),
            0,
            0,
            &fill(1000, i),
        );
        i += 1;
    }
    assert_eq!(s.stats().evictions, 0);
    store(&s, StoreMode::Set, "old", 0, 0, &fill(1000, 2));
    while s.stats().evictions == 0 {
        store(
            &s,
            StoreMode::Set,
            &format!("cold:{i}"),
            0,
            0,
            &fill(1000, i),
        );
        i += 1;
    }
    assert!(s.stats().items_retained >= 1, "{:?}", s.stats());
    assert_eq!(read(&s, "cold:0", NOW), None, "evicted with its segment");
    assert_eq!(read(&s, "old", NOW).map(|r| r.0), Some(fill(1000, 2)));
}

#[test]
fn without_evictions_a_full_store_refuses_even_an_overwrite() {
    // memcached -M allocates the new item before it unlinks the old one, so once memory
    // is full of live items an overwrite of the same size fails too.
    let s = Store::builder()
        .memory_limit(2 << 20)
        .evictions(false)
        .build()
        .unwrap();
    let mut i = 0u64;
    loop {
        let out = s.store(
            StoreMode::Set,
            format!("k{i}").as_bytes(),
            0,
            0,
            &fill(1000, i),
            NOW,
        );
        if out == StoreOutcome::NoMemory {
            break;
        }
        assert_eq!(out, StoreOutcome::Stored);
        i += 1;
    }
    let out = s.store(StoreMode::Set, b"k0", 0, 0, &fill(1000, 7), NOW);
    assert_eq!(out, StoreOutcome::NoMemory);
    assert_eq!(read(&s, "k0", NOW).map(|r| r.0), Some(fill(1000, 0)));
}
