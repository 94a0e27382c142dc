//! The per-class counters (`classes.rs`): what `stats items` and `stats slabs` read.

use super::*;
use crate::{ClassConfig, StoreMode, StoreOutcome};

const NOW: RelTime = 100;

fn class_of(s: &Store, klen: usize, vlen: usize, flags: bool) -> usize {
    s.slab_classes()
        .class_of(s.memcached_total(klen, vlen, flags))
}

#[test]
fn items_are_counted_in_memcacheds_class_with_its_size() {
    let s = Store::builder().memory_limit(8 << 20).build().unwrap();
    // memcached 1.6.18: `set a 0 0 10` is 48 + 2 + 10 + 2 + 8 = 70 bytes, class 1 (96);
    // a 100-byte value with flags is 48 + 4 + 4 + 100 + 2 + 8 = 166, class 4 (192).
    assert_eq!(s.memcached_total(1, 10, false), 70);
    assert_eq!(class_of(&s, 1, 10, false), 1);
    assert_eq!(class_of(&s, 3, 100, true), 4);
    assert_eq!(
        s.store(StoreMode::Set, b"a", 0, 0, &[b'x'; 10], NOW),
        StoreOutcome::Stored
    );
    assert_eq!(
        s.store(StoreMode::Set, b"bbb", 7, 0, &[b'y'; 100], NOW),
        StoreOutcome::Stored
    );
    let c = s.class_stats();
    assert_eq!(c.len(), s.slab_classes().len());
    assert_eq!((c[0].items, c[0].requested), (1, 70));
    assert_eq!((c[3].items, c[3].requested), (1, 166));
    // An overwrite with another size moves the item between classes.
    assert_eq!(
        s.store(StoreMode::Set, b"a", 0, 0, &[b'x'; 100], NOW),
        StoreOutcome::Stored
    );
    let c = s.class_stats();
    assert_eq!(c[0].items, 0);
    assert_eq!(c[0].requested, 0);
    assert_eq!(c.iter().map(|c| c.items).sum::<u64>(), 2);
    assert!(s.delete(b"a", NOW));
    assert!(s.delete(b"bbb", NOW));
    assert!(s
        .class_stats()
        .iter()
        .all(|c| c.items == 0 && c.requested == 0));
}

#[test]
fn a_reset_keeps_the_levels_and_zeroes_the_counters() {
    let s = Store::builder().memory_limit(4 << 20).build().unwrap();
    // Fill well past the limit so that eviction runs.
    let value = [b'v'; 900];
    for i in 0..20_000u32 {
        let key = format!("key:{i}");
        let _ = s.store(StoreMode::Set, key.as_bytes(), 0, 0, &value, NOW);
    }
    let class = class_of(&s, "key:10000".len(), value.len(), false);
    let c = s.class_stats();
    let st = s.stats();
    assert!(st.evictions > 0);
    assert_eq!(c.iter().map(|c| c.evicted).sum::<u64>(), st.evictions);
    assert_eq!(c.iter().map(|c| c.items).sum::<u64>(), st.curr_items);
    assert!(c[class - 1].evicted > 0 && c[class - 1].evicted_unfetched > 0);
    assert_eq!(c[class - 1].evicted_nonzero, 0);
    s.reset_stats();
    let after = s.class_stats();
    assert_eq!(after[class - 1].items, c[class - 1].items);
    assert_eq!(after[class - 1].requested, c[class - 1].requested);
    assert_eq!(after[class - 1].evicted, 0);
}

#[test]
fn expired_items_are_reclaimed_per_class() {
    let s = Store::builder().memory_limit(4 << 20).build().unwrap();
    assert_eq!(
        s.store(StoreMode::Set, b"t", 0, NOW + 1, b"12345", NOW),
        StoreOutcome::Stored
    );
    let swept = s.sweep_expired(NOW + 5, 1000);
    assert_eq!(swept.unlinked, 1);
    let c = s.class_stats();
    assert_eq!(
        (c[0].items, c[0].reclaimed, c[0].expired_unfetched),
        (0, 1, 1)
    );
}

#[test]
fn other_class_configurations_count_by_their_own_sizes() {
    let s = Store::builder()
        .memory_limit(4 << 20)
        .slab_classes(ClassConfig {
            sizes: Some(vec![128, 4096]),
            ..ClassConfig::default()
        })
        .build()
        .unwrap();
    assert_eq!(s.slab_classes().len(), 3);
    assert_eq!(
        s.store(StoreMode::Set, b"k", 0, 0, &[0; 200], NOW),
        StoreOutcome::Stored
    );
    assert_eq!(s.class_stats()[1].items, 1);
}

#[test]
fn a_crawl_counts_what_it_looks_at_and_reclaims_per_class() {
    let s = Store::builder().memory_limit(4 << 20).build().unwrap();
    assert_eq!(
        s.store(StoreMode::Set, b"short", 0, NOW + 1, b"x", NOW),
        StoreOutcome::Stored
    );
    assert_eq!(
        s.store(StoreMode::Set, b"kept", 0, 0, &[b'y'; 500], NOW),
        StoreOutcome::Stored
    );
    let mut cursor = crate::DumpCursor::default();
    while s.crawl(&mut cursor, NOW + 5, 1 << 20).more {}
    let c = s.class_stats();
    let short = class_of(&s, 5, 1, false);
    let kept = class_of(&s, 4, 500, false);
    assert_ne!(short, kept);
    assert_eq!(
        (c[short - 1].crawler_checked, c[short - 1].crawler_reclaimed),
        (1, 1)
    );
    assert_eq!(
        (c[kept - 1].crawler_checked, c[kept - 1].crawler_reclaimed),
        (1, 0)
    );
    assert_eq!(c[short - 1].reclaimed, 1);
}
