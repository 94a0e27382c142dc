//! Cross-module tests of memory bounds, eviction, second chance and `-M`.

use storage::{Lookup, RelTime, Store, StoreMode, StoreOutcome};

const NOW: RelTime = 10;

/// A small deterministic PRNG (xorshift64*), so the tests need no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Value sizes between 20 B and 500 KB, mostly small, like a real mix.
    fn size(&mut self) -> usize {
        match self.next() % 10 {
            0 => 100_000 + (self.next() % 400_000) as usize,
            1 | 2 => 1_000 + (self.next() % 20_000) as usize,
            _ => 20 + (self.next() % 500) as usize,
        }
    }
}

fn fill(value: &mut Vec<u8>, len: usize, tag: u64) {
    value.clear();
    value.extend((0..len).map(|i| (tag as usize).wrapping_add(i) as u8));
}

#[test]
fn mixed_sizes_far_past_the_limit_never_fail_and_stay_bounded() {
    let limit = 8 << 20;
    let s = Store::builder().memory_limit(limit).build().unwrap();
    let mut rng = Rng(7);
    let mut value = Vec::new();
    let mut written = 0usize;
    let mut i = 0u64;
    while written < 80 << 20 {
        let len = rng.size();
        fill(&mut value, len, i);
        let key = format!("key:{}", i % 5000);
        assert_eq!(
            s.store(StoreMode::Set, key.as_bytes(), 0, 0, &value, NOW),
            StoreOutcome::Stored,
            "store #{i} of {len} bytes"
        );
        written += len;
        i += 1;
        if i % 97 == 0 {
            let st = s.stats();
            assert!(st.segments_used * st.segment_size <= limit as u64);
            assert!(st.bytes <= limit as u64);
        }
    }
    let st = s.stats();
    assert!(st.evictions > 0);
    assert!(st.evicted_unfetched > 0);
    assert_eq!(st.segments_used, st.segments_total);
    // Every hit returns exactly what was last written under that key.
    let mut hits = 0;
    for k in 0..5000u64 {
        let key = format!("key:{k}");
        let ok = s.get(key.as_bytes(), NOW, |it| {
            let tag = it.value.first().copied().unwrap_or(0);
            it.value
                .iter()
                .enumerate()
                .all(|(i, &b)| b == tag.wrapping_add(i as u8))
        });
        if let Lookup::Hit(ok) = ok {
            assert!(ok, "{key} corrupt");
            hits += 1;
        }
    }
    assert!(hits > 10, "something survives ({hits})");
    assert_eq!(s.stats().curr_items, hits);
}

#[test]
fn hot_keys_survive_better_than_cold_ones() {
    let s = Store::builder().memory_limit(4 << 20).build().unwrap();
    let value = [b'x'; 200];
    // Hot and cold keys are written once, together, at the start.
    let hot: Vec<String> = (0..200).map(|i| format!("hot:{i}")).collect();
    let early_cold: Vec<String> = (0..200).map(|i| format!("early:{i}")).collect();
    for (h, c) in hot.iter().zip(&early_cold) {
        s.store(StoreMode::Set, h.as_bytes(), 0, 0, &value, NOW);
        s.store(StoreMode::Set, c.as_bytes(), 0, 0, &value, NOW);
    }
    // Then ~10x the memory in new keys; the hot keys are read now and then (never
    // rewritten), the early cold ones never.
    let mut hot_reads = 0;
    let mut hot_hits = 0;
    for i in 0..200_000u32 {
        let k = format!("cold:{i}");
        let out = s.store(StoreMode::Set, k.as_bytes(), 0, 0, &value, NOW);
        assert_eq!(out, StoreOutcome::Stored);
        if i % 2000 == 0 {
            for k in &hot {
                hot_reads += 1;
                hot_hits += usize::from(s.get(k.as_bytes(), NOW, |_| ()).is_hit());
            }
        }
    }
    let alive = |keys: &[String]| {
        keys.iter()
            .filter(|k| s.get(k.as_bytes(), NOW, |_| ()).is_hit())
            .count()
    };
    let (hot_alive, cold_alive) = (alive(&hot), alive(&early_cold));
    let st = s.stats();
    assert_eq!(hot_hits, hot_reads, "every read of a hot key hit");
    assert_eq!(hot_alive, hot.len(), "all hot keys kept");
    assert_eq!(cold_alive, 0, "cold keys written at the same time are gone");
    assert!(st.evictions > 0 && st.items_retained > 0);
}

#[test]
fn no_evictions_mode_returns_no_memory_when_full() {
    let s = Store::builder()
        .memory_limit(2 << 20)
        .evictions(false)
        .build()
        .unwrap();
    let value = vec![b'v'; 10_000];
    let mut stored = 0;
    let mut outcome = StoreOutcome::Stored;
    for i in 0..1000 {
        outcome = s.store(
            StoreMode::Set,
            format!("k{i}").as_bytes(),
            0,
            0,
            &value,
            NOW,
        );
        if outcome != StoreOutcome::Stored {
            break;
        }
        stored += 1;
    }
    assert_eq!(outcome, StoreOutcome::NoMemory);
    assert!(stored > 150, "{stored}");
    assert_eq!(s.stats().evictions, 0);
    assert!(s.get(b"k0", NOW, |_| ()).is_hit(), "nothing was evicted");
    // Deleting makes room again (dead space is compacted away).
    for i in 0..stored / 2 {
        assert!(s.delete(format!("k{i}").as_bytes(), NOW));
    }
    assert_eq!(
        s.store(StoreMode::Set, b"again", 0, 0, &value, NOW),
        StoreOutcome::Stored
    );
    assert!(s
        .get(format!("k{}", stored - 1).as_bytes(), NOW, |_| ())
        .is_hit());
    // Expired items are reclaimed too once the sweeper has unlinked them.
    let s = Store::builder()
        .memory_limit(2 << 20)
        .evictions(false)
        .build()
        .unwrap();
    let mut i = 0;
    while s.store(
        StoreMode::Set,
        format!("e{i}").as_bytes(),
        0,
        NOW + 1,
        &value,
        NOW,
    ) == StoreOutcome::Stored
    {
        i += 1;
    }
    while s.sweep_expired(NOW + 1, 1000).unlinked > 0 {}
    assert_eq!(
        s.store(StoreMode::Set, b"fresh", 0, 0, &value, NOW + 1),
        StoreOutcome::Stored
    );
    assert!(s.stats().reclaimed > 0);
}

#[test]
fn overwrites_in_place_of_a_full_store_keep_working_with_no_evictions() {
    // With -M, rewriting the same keys forever must not run out: dead space is reclaimed.
    let s = Store::builder()
        .memory_limit(2 << 20)
        .evictions(false)
        .build()
        .unwrap();
    let value = vec![b'v'; 1000];
    for i in 0..20_000u32 {
        let k = format!("k{}", i % 300);
        assert_eq!(
            s.store(StoreMode::Set, k.as_bytes(), 0, 0, &value, NOW),
            StoreOutcome::Stored,
            "#{i}"
        );
    }
    assert_eq!(s.stats().curr_items, 300);
}

#[test]
fn overwrites_reuse_dead_segments_before_never_used_ones() {
    // 1 000 keys of 1 KB (about 1 MB live) set again and again: 48 MB written into a
    // 32 MB store of 1 MB segments. Segments whose items were all overwritten are
    // reused before untouched ones, so only a few are ever used and nothing is evicted.
    // The length changes every round, so every overwrite writes a new item.
    let s = Store::builder().memory_limit(32 << 20).build().unwrap();
    assert_eq!(s.segment_size(), 1 << 20);
    let mut value = Vec::new();
    let mut most_used = 0;
    for round in 0..48u64 {
        for k in 0..1000u64 {
            fill(&mut value, 1000 + (round % 2) as usize, round * 1000 + k);
            let key = format!("key:{k:05}");
            assert_eq!(
                s.store(StoreMode::Set, key.as_bytes(), 0, 0, &value, NOW),
                StoreOutcome::Stored
            );
        }
        most_used = most_used.max(s.stats().segments_used);
    }
    let st = s.stats();
    assert_eq!(st.evictions, 0);
    assert_eq!(st.curr_items, 1000);
    assert!(
        most_used <= 4,
        "{most_used} segments used for about 1 MB live"
    );
    for k in 0..1000u64 {
        fill(&mut value, 1001, 47 * 1000 + k);
        let key = format!("key:{k:05}");
        let got = s.get(key.as_bytes(), NOW, |it| it.value.to_vec()).hit();
        assert_eq!(got.as_deref(), Some(&value[..]), "{key}");
    }
}

#[test]
fn random_overwrites_compact_mostly_dead_segments_before_never_used_ones() {
    // 3 000 keys of 300 B to 2 KB (about 3.5 MB live) overwritten in random order with
    // new lengths: 160 000 writes, about 180 MB, into a 64 MB store of 1 MB segments.
    // A segment never dies whole this way (a few of its items are always still live);
    // one at most a quarter live is compacted and written again before an untouched
    // one is taken, so resident memory stays within a small multiple of the live data
    // instead of growing to the limit. Nothing is evicted and nothing is lost.
    let s = Store::builder().memory_limit(64 << 20).build().unwrap();
    assert_eq!(s.segment_size(), 1 << 20);
    let mut rng = Rng(11);
    let mut value = Vec::new();
    let mut last = vec![(0usize, 0u64); 3000];
    let mut most_used = 0;
    for i in 0..160_000u64 {
        let k = if i < 3000 {
            i as usize
        } else {
            (rng.next() % 3000) as usize
        };
        let len = 300 + (rng.next() % 1700) as usize;
        fill(&mut value, len, i);
        let key = format!("key:{k:05}");
        assert_eq!(
            s.store(StoreMode::Set, key.as_bytes(), 0, 0, &value, NOW),
            StoreOutcome::Stored
        );
        last[k] = (len, i);
        most_used = most_used.max(s.stats().segments_used);
    }
    let st = s.stats();
    assert_eq!(st.evictions, 0);
    assert_eq!(st.curr_items, 3000);
    let live_mb = st.bytes as f64 / f64::from(1 << 20);
    assert!(
        (most_used as f64) <= 3.0 * live_mb + 2.0,
        "{most_used} segments used for {live_mb:.1} MB live"
    );
    for (k, &(len, tag)) in last.iter().enumerate() {
        fill(&mut value, len, tag);
        let key = format!("key:{k:05}");
        let got = s.get(key.as_bytes(), NOW, |it| it.value.to_vec()).hit();
        assert_eq!(got.as_deref(), Some(&value[..]), "{key}");
    }
}

#[test]
fn a_segment_with_one_live_item_is_not_reused() {
    // One key written once, then 2 000 other keys overwritten many times (with another
    // length each time, so not in place): the segment holding the first key never dies,
    // and the key survives every reuse around it.
    let s = Store::builder().memory_limit(16 << 20).build().unwrap();
    let value = vec![b'x'; 1001];
    assert_eq!(
        s.store(StoreMode::Set, b"keeper", 7, 0, b"kept", NOW),
        StoreOutcome::Stored
    );
    for i in 0..40_000u32 {
        let key = format!("k{}", i % 2000);
        let len = 1000 + (i / 2000 % 2) as usize;
        assert_eq!(
            s.store(StoreMode::Set, key.as_bytes(), 0, 0, &value[..len], NOW),
            StoreOutcome::Stored
        );
    }
    let got = s
        .get(b"keeper", NOW, |it| (it.value.to_vec(), it.flags))
        .hit();
    assert_eq!(got, Some((b"kept".to_vec(), 7)));
    assert_eq!(s.stats().evictions, 0);
    assert!(s.stats().segments_used < s.stats().segments_total);
}

#[test]
fn expired_space_is_reclaimed_by_eviction() {
    let s = Store::builder().memory_limit(2 << 20).build().unwrap();
    let value = vec![b'v'; 1000];
    for i in 0..5000u32 {
        s.store(
            StoreMode::Set,
            format!("k{i}").as_bytes(),
            0,
            NOW + 1,
            &value,
            NOW,
        );
    }
    let st = s.stats();
    assert!(st.reclaimed > 0 || st.evictions > 0);
    let before = s.stats().evictions;
    for i in 0..5000u32 {
        s.store(
            StoreMode::Set,
            format!("n{i}").as_bytes(),
            0,
            0,
            &value,
            NOW + 1,
        );
    }
    let st = s.stats();
    assert!(st.reclaimed > 0);
    assert!(st.expired_unfetched > 0);
    assert!(st.evictions >= before);
}

#[test]
fn overwrites_mixed_with_cold_keys_do_not_evict_the_cold_ones() {
    // Each round stores one new key (never read) and overwrites three of 100 hot keys:
    // every segment ends up about a quarter live, with no segment wholly dead. 24 000
    // cold keys of 100 B (about 3 MB with headers) fit an 8 MB store many times over,
    // yet a FIFO that evicts the oldest segment would drop the cold keys it holds.
    // Segments mostly dead are compacted instead, so nothing live is evicted.
    let s = Store::builder().memory_limit(8 << 20).build().unwrap();
    let mut value = Vec::new();
    for i in 0..24_000u64 {
        fill(&mut value, 100, i);
        let key = format!("cold:{i:06}");
        assert_eq!(
            s.store(StoreMode::Set, key.as_bytes(), 0, 0, &value, NOW),
            StoreOutcome::Stored
        );
        for j in 0..3 {
            // Another length each time, so each overwrite writes a new item (one of
            // the same shape would be written over the old one in place).
            fill(&mut value, 300 + ((i * 3 + j) % 7) as usize, i * 3 + j);
            let key = format!("hot:{:03}", (i * 3 + j) % 100);
            assert_eq!(
                s.store(StoreMode::Set, key.as_bytes(), 0, 0, &value, NOW),
                StoreOutcome::Stored
            );
        }
    }
    let st = s.stats();
    assert!(
        st.segments_used == st.segments_total,
        "the writes filled memory: {st:?}"
    );
    assert_eq!(st.evictions, 0, "{st:?}");
    for i in 0..24_000u64 {
        fill(&mut value, 100, i);
        let key = format!("cold:{i:06}");
        let got = s.get(key.as_bytes(), NOW, |it| it.value.to_vec()).hit();
        assert_eq!(got.as_deref(), Some(&value[..]), "{key}");
    }
}
