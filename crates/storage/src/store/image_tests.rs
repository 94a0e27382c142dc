//! Memory images: a store saved and loaded back serves the same items, and every
//! damaged, truncated or mismatched image is refused with the store left empty.

use std::collections::BTreeMap;

use super::*;
use crate::{DumpCursor, Lookup, StoreMode, StoreOutcome};

/// (value, flags, cas, exptime) of every live item, from a dump.
type Items = BTreeMap<Vec<u8>, (Vec<u8>, u32, u64, u32)>;

const NOW: u32 = 100;

fn builder() -> crate::StoreBuilder {
    Store::builder()
        .memory_limit(8 << 20)
        .item_size_max(1 << 20)
}

fn items(store: &Store) -> Items {
    let mut keys = Vec::new();
    let mut cursor = DumpCursor::default();
    while store.dump(&mut cursor, NOW, 1 << 20, |d| {
        keys.push((d.key.to_vec(), d.exptime));
    }) {}
    keys.into_iter()
        .map(|(k, exptime)| {
            let hit = store
                .get(&k, NOW, |i| (i.value.to_vec(), i.flags, i.cas))
                .hit()
                .expect("dumped key is a hit");
            (k, (hit.0, hit.1, hit.2, exptime))
        })
        .collect()
}

/// A store with small and large items, flags, TTLs, deletions, an incr and enough
/// writes to seal and evict segments.
fn filled() -> Store {
    let store = builder().build().unwrap();
    for i in 0..30_000u32 {
        let key = format!("key:{i}");
        let value = format!("value-{i}-{}", "x".repeat((i % 50) as usize));
        let exptime = if i % 3 == 0 { 0 } else { NOW + 1000 + i };
        assert_eq!(
            store.store(
                StoreMode::Set,
                key.as_bytes(),
                i % 7,
                exptime,
                value.as_bytes(),
                NOW
            ),
            StoreOutcome::Stored
        );
    }
    for i in 0..20u32 {
        let value = vec![b'a' + (i % 26) as u8; 100_000 + i as usize * 1000];
        store.store(
            StoreMode::Set,
            format!("large:{i}").as_bytes(),
            9,
            0,
            &value,
            NOW,
        );
    }
    for i in (0..30_000u32).step_by(11) {
        store.delete(format!("key:{i}").as_bytes(), NOW);
    }
    store.store(StoreMode::Set, b"counter", 0, 0, b"41", NOW);
    store.incr_decr(b"counter", 1, true, NOW);
    store
}

fn image_of(store: &Store, extra: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let summary = store.save_image(&mut out, extra).unwrap();
    assert_eq!(summary.bytes as usize, out.len());
    assert_eq!(summary.items, store.stats().curr_items);
    out
}

fn load(image: &[u8], into: &Store) -> Result<Vec<u8>, ImageError> {
    let head = ImageHead::read(image)?;
    let extra = head.extra().to_vec();
    // Three threads: parts are read in parallel, in any order.
    head.load_into(into, image, 3)?;
    Ok(extra)
}

#[test]
fn a_loaded_image_serves_every_item_as_it_was() {
    let store = filled();
    let before = items(&store);
    assert!(before.len() > 10_000, "{}", before.len());
    let stats = store.stats();
    let image = image_of(&store, b"server state");

    let fresh = builder().build().unwrap();
    assert_eq!(load(&image, &fresh).unwrap(), b"server state");
    assert_eq!(items(&fresh), before);
    let after = fresh.stats();
    assert_eq!(after.curr_items, stats.curr_items);
    assert_eq!(after.bytes, stats.bytes);
    assert_eq!(after.total_items, stats.curr_items);
    assert_eq!(after.segments_used, stats.segments_used);
    assert_eq!(
        fresh
            .get(b"counter", NOW, |i| i.value.to_vec())
            .hit()
            .unwrap(),
        b"42"
    );

    // CAS ids go on from where they were, and the store keeps working: new items,
    // overwrites, and enough writes to evict, with every hit intact.
    let max_cas = before.values().map(|v| v.2).max().unwrap();
    let (_, cas) = fresh.store_cas(StoreMode::Set, b"new", 0, 0, b"v", NOW + 1);
    assert!(cas > max_cas);
    for i in 0..60_000u32 {
        let value = format!("later-{i}");
        fresh.store(
            StoreMode::Set,
            format!("later:{i}").as_bytes(),
            0,
            0,
            value.as_bytes(),
            NOW + 2,
        );
    }
    for (k, v) in items(&fresh) {
        if let Some(old) = before.get(&k) {
            assert_eq!(&v.0, &old.0);
        }
    }
    // A store that loaded an image saves the same way again.
    let again = builder().build().unwrap();
    load(&image_of(&fresh, b""), &again).unwrap();
    assert_eq!(items(&again), items(&fresh));
}

#[test]
fn expired_items_stay_expired_and_a_pending_flush_still_applies() {
    let store = builder().build().unwrap();
    store.store(StoreMode::Set, b"short", 0, NOW + 5, b"a", NOW);
    store.store(StoreMode::Set, b"long", 0, NOW + 500, b"b", NOW);
    store.store(StoreMode::Set, b"old", 0, 0, b"c", NOW);
    // Flush everything stored up to NOW + 10, from NOW + 10 on.
    store.flush_all(NOW + 10, NOW);
    let fresh = builder().build().unwrap();
    load(&image_of(&store, b""), &fresh).unwrap();
    assert!(fresh.get(b"short", NOW + 1, |_| ()).is_hit());
    assert_eq!(fresh.get(b"short", NOW + 6, |_| ()), Lookup::Expired);
    assert!(fresh.get(b"old", NOW + 9, |_| ()).is_hit());
    assert_eq!(fresh.get(b"long", NOW + 11, |_| ()), Lookup::Flushed);
    fresh.store(StoreMode::Set, b"later", 0, 0, b"d", NOW + 12);
    assert!(fresh.get(b"later", NOW + 13, |_| ()).is_hit());
}

/// Every byte of the image is covered: a flip anywhere is refused, and the store is
/// then empty and serves.
#[test]
fn a_damaged_image_is_refused_and_leaves_the_store_empty() {
    let store = filled();
    let image = image_of(&store, b"x");
    let step = image.len() / 97;
    for at in (0..image.len())
        .step_by(step)
        .chain([image.len() - 1, 9, 20, 60])
    {
        let mut bad = image.clone();
        bad[at] ^= 0x10;
        let fresh = builder().build().unwrap();
        let err = load(&bad, &fresh).expect_err(&format!("flip at {at}"));
        assert!(
            matches!(
                err,
                ImageError::Checksum(_) | ImageError::NotAnImage | ImageError::OtherBuild { .. }
            ),
            "flip at {at}: {err}"
        );
        assert_eq!(fresh.stats().curr_items, 0);
        assert_eq!(
            fresh.store(StoreMode::Set, b"k", 0, 0, b"v", NOW),
            StoreOutcome::Stored
        );
        assert!(fresh.get(b"k", NOW, |_| ()).is_hit());
    }
}

#[test]
fn a_truncated_image_is_refused() {
    let image = image_of(&filled(), b"");
    for len in [
        0,
        5,
        30,
        IMAGE_HEADER_BYTES + 3,
        image.len() / 2,
        image.len() - 1,
    ] {
        let fresh = builder().build().unwrap();
        let err = load(&image[..len], &fresh).expect_err(&format!("cut at {len}"));
        assert!(
            matches!(err, ImageError::Truncated | ImageError::NotAnImage),
            "cut at {len}: {err}"
        );
        assert_eq!(fresh.stats().curr_items, 0);
    }
}

#[test]
fn another_layout_or_geometry_is_refused() {
    let image = image_of(&filled(), b"");
    // Another build: the same bytes under another fingerprint.
    let mut other = image.clone();
    other[8] ^= 1;
    let crc = crc32fast::hash(&other[..40]);
    other[40..44].copy_from_slice(&crc.to_le_bytes());
    let err = load(&other, &builder().build().unwrap()).unwrap_err();
    assert!(matches!(err, ImageError::OtherBuild { .. }), "{err}");
    // Other shards, another item size, another segment size.
    for b in [
        builder().shards(4),
        builder().item_size_max(512 << 10),
        builder().item_size_max(2 << 20),
    ] {
        let fresh = b.build().unwrap();
        let err = load(&image, &fresh).unwrap_err();
        assert!(matches!(err, ImageError::Geometry(_)), "{err}");
        assert_eq!(fresh.stats().curr_items, 0);
    }
}

#[test]
fn only_a_new_store_takes_an_image() {
    let image = image_of(&filled(), b"");
    let used = builder().build().unwrap();
    used.store(StoreMode::Set, b"k", 0, 0, b"v", NOW);
    assert!(matches!(load(&image, &used), Err(ImageError::NotEmpty)));
    assert!(used.get(b"k", NOW, |_| ()).is_hit());
}

#[test]
fn an_empty_store_round_trips() {
    let store = builder().build().unwrap();
    let fresh = builder().build().unwrap();
    load(&image_of(&store, b""), &fresh).unwrap();
    assert_eq!(fresh.stats().curr_items, 0);
    assert_eq!(
        fresh.store(StoreMode::Set, b"k", 0, 0, b"v", NOW),
        StoreOutcome::Stored
    );
}
