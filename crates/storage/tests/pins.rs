//! Value pins: a pinned value's bytes stay put through overwrites, deletes, eviction,
//! dead-segment reuse, `-M` compaction and in-place `incr`, and the segment becomes
//! reusable again once the pin is given back.

use storage::{ArithOutcome, Origin, RelTime, Store, StoreMode, StoreOutcome, ValuePin};

const NOW: RelTime = 10;

fn fill(len: usize, tag: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (tag as usize).wrapping_mul(31).wrapping_add(i) as u8)
        .collect()
}

fn set(s: &Store, key: &str, value: &[u8]) {
    assert_eq!(
        s.store(StoreMode::Set, key.as_bytes(), 0, 0, value, NOW),
        StoreOutcome::Stored,
        "set {key}"
    );
}

fn pin(s: &Store, key: &str) -> ValuePin {
    s.get(key.as_bytes(), NOW, |it| s.pin(it.origin, it.value))
        .hit()
        .flatten()
        .unwrap_or_else(|| panic!("{key} could not be pinned"))
}

fn value(s: &Store, key: &str) -> Option<Vec<u8>> {
    s.get(key.as_bytes(), NOW, |it| it.value.to_vec()).hit()
}

#[test]
fn a_pinned_value_survives_overwrite_and_delete() {
    let s = Store::builder().memory_limit(8 << 20).build().unwrap();
    let first = fill(5000, 1);
    set(&s, "k", &first);
    let p = pin(&s, "k");
    assert_eq!(p.len(), 5000);
    assert_eq!(s.pinned(&p), &first[..]);
    set(&s, "k", &fill(5000, 2));
    assert!(s.delete(b"k", NOW));
    assert_eq!(s.pinned(&p), &first[..]);
    s.unpin(p);
    assert_eq!(value(&s, "k"), None);
}

#[test]
fn eviction_passes_over_a_pinned_segment_until_it_is_unpinned() {
    // 8 segments of 1 MB; 40 MB of 10 KB values written after the pin, so every other
    // segment is evicted several times while the pinned one is passed over.
    let s = Store::builder().memory_limit(8 << 20).build().unwrap();
    let first = fill(10_000, 7);
    set(&s, "pinned", &first);
    let p = pin(&s, "pinned");
    for i in 0..4000u64 {
        set(&s, &format!("k{i}"), &fill(10_000, i));
        if i % 500 == 0 {
            assert_eq!(s.pinned(&p), &first[..], "after {i} sets");
        }
    }
    let st = s.stats();
    assert!(st.evictions > 1000, "{st:?}");
    assert_eq!(s.pinned(&p), &first[..]);
    // Still there only because of the pin (read once, so it has one second chance).
    assert_eq!(value(&s, "pinned").as_deref(), Some(&first[..]));
    s.unpin(p);
    for i in 0..3000u64 {
        set(&s, &format!("j{i}"), &fill(10_000, i));
    }
    assert_eq!(value(&s, "pinned"), None, "evicted once unpinned");
}

#[test]
fn a_dead_segment_is_not_reused_while_pinned() {
    // Overwrites of a few keys reuse their dead segments at once (see eviction.rs); a
    // pinned value in one of them keeps that segment out of the cycle. Each round
    // changes the length, so every overwrite writes a new item.
    let s = Store::builder().memory_limit(32 << 20).build().unwrap();
    for k in 0..100u64 {
        set(&s, &format!("k{k}"), &fill(1000, k));
    }
    let first = fill(1000, 3);
    let p = pin(&s, "k3");
    assert_eq!(s.pinned(&p), &first[..]);
    for round in 1..60u64 {
        for k in 0..100u64 {
            set(
                &s,
                &format!("k{k}"),
                &fill(1000 + (round % 2) as usize, round * 100 + k),
            );
        }
    }
    assert_eq!(s.pinned(&p), &first[..]);
    assert_eq!(s.stats().evictions, 0);
    s.unpin(p);
    assert_eq!(value(&s, "k3"), Some(fill(1001, 59 * 100 + 3)));
}

#[test]
fn compaction_without_evictions_passes_over_a_pinned_segment() {
    // -M: a full store compacts segments with dead space instead of evicting.
    let s = Store::builder()
        .memory_limit(4 << 20)
        .evictions(false)
        .build()
        .unwrap();
    // Dead space in front of the pinned item, so compaction would move it down.
    set(&s, "gone", &fill(20_000, 8));
    let first = fill(20_000, 9);
    set(&s, "pinned", &first);
    assert!(s.delete(b"gone", NOW));
    let p = pin(&s, "pinned");
    for round in 0..40u64 {
        for k in 0..20u64 {
            let v = fill(20_000, round * 20 + k);
            let out = s.store(StoreMode::Set, format!("k{k}").as_bytes(), 0, 0, &v, NOW);
            assert!(
                matches!(out, StoreOutcome::Stored | StoreOutcome::NoMemory),
                "{out:?}"
            );
        }
        // One key kept for good per round, so no segment ever dies whole and room has
        // to come from compaction.
        let v = fill(20_000, 1000 + round);
        let _ = s.store(
            StoreMode::Set,
            format!("p{round}").as_bytes(),
            0,
            0,
            &v,
            NOW,
        );
        assert_eq!(s.pinned(&p), &first[..], "round {round}");
    }
    s.unpin(p);
    assert_eq!(value(&s, "pinned").as_deref(), Some(&first[..]));
}

#[test]
fn incr_of_a_pinned_value_leaves_the_pinned_bytes_alone() {
    // memcached reads "5" followed by spaces as 5 and rewrites such a value in place,
    // keeping its length. A pinned one gets a new item with the same bytes instead.
    let s = Store::builder().memory_limit(8 << 20).build().unwrap();
    let mut five = b"5".to_vec();
    five.resize(3000, b' ');
    set(&s, "n", &five);
    let p = pin(&s, "n");
    assert_eq!(s.incr_decr(b"n", 1, true, NOW), ArithOutcome::Value(6));
    assert_eq!(s.pinned(&p), &five[..]);
    let mut six = b"6".to_vec();
    six.resize(3000, b' ');
    assert_eq!(value(&s, "n"), Some(six.clone()));
    s.unpin(p);
    // Unpinned (and rewritten already): in place again, same length.
    assert_eq!(s.incr_decr(b"n", 994, true, NOW), ArithOutcome::Value(1000));
    let mut thousand = b"1000".to_vec();
    thousand.resize(3000, b' ');
    assert_eq!(value(&s, "n"), Some(thousand));
}

#[test]
fn bytes_from_outside_the_store_are_not_pinned() {
    let s = Store::builder().memory_limit(8 << 20).build().unwrap();
    set(&s, "k", b"value");
    assert!(s.pin(Origin::DETACHED, b"value").is_none());
    // A stored item's origin with a value that is not in its segment.
    let forged = s
        .get(b"k", NOW, |it| s.pin(it.origin, b"elsewhere"))
        .hit()
        .flatten();
    assert!(forged.is_none());
}

#[test]
fn pins_from_many_threads_while_others_write() {
    // Readers pin, check and unpin values while writers overwrite them and force
    // evictions: every pinned value must read back as one whole version (each version
    // is one repeated byte).
    let s = Store::builder().memory_limit(8 << 20).build().unwrap();
    for k in 0..200u64 {
        set(&s, &format!("k{k}"), &vec![k as u8; 8000]);
    }
    std::thread::scope(|sc| {
        for w in 0..2u64 {
            let s = &s;
            sc.spawn(move || {
                for i in 0..6000u64 {
                    let k = (i * 7 + w) % 400;
                    let v = vec![(i + w) as u8; 8000];
                    let _ = s.store(StoreMode::Set, format!("k{k}").as_bytes(), 0, 0, &v, NOW);
                }
            });
        }
        for r in 0..2u64 {
            let s = &s;
            sc.spawn(move || {
                let mut pinned = 0;
                for i in 0..20_000u64 {
                    let key = format!("k{}", (i * 13 + r) % 400);
                    if let Some(Some(p)) = s
                        .get(key.as_bytes(), NOW, |it| s.pin(it.origin, it.value))
                        .hit()
                    {
                        let b = s.pinned(&p);
                        assert_eq!(b.len(), 8000);
                        assert!(b.iter().all(|&x| x == b[0]), "{key}: torn value");
                        std::thread::yield_now();
                        assert!(b.iter().all(|&x| x == b[0]), "{key}: changed under a pin");
                        s.unpin(p);
                        pinned += 1;
                    }
                }
                assert!(pinned > 0);
            });
        }
    });
}
