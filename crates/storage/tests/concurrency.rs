//! Many threads on a few keys: no torn values, no lost increments, one cas winner.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

use storage::{ArithOutcome, Lookup, RelTime, Store, StoreMode, StoreOutcome};

const NOW: RelTime = 10;
const THREADS: usize = 4;

/// A value made of one record: `[len: u32][payload][checksum of payload: u64]`. An
/// appended value is a sequence of records, so any whole value parses as records.
fn make_value(seed: u64, len: usize, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&(len as u32).to_le_bytes());
    let mut x = seed | 1;
    for _ in 0..len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push(x as u8);
    }
    let sum = checksum(&out[4..]);
    out.extend_from_slice(&sum.to_le_bytes());
}

fn checksum(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &c| {
        (h ^ u64::from(c)).wrapping_mul(0x100_0000_01b3)
    })
}

fn intact(mut v: &[u8]) -> bool {
    if v.is_empty() {
        return false;
    }
    while !v.is_empty() {
        if v.len() < 12 {
            return false;
        }
        let len = u32::from_le_bytes(v[..4].try_into().unwrap()) as usize;
        if v.len() < 12 + len || checksum(&v[4..4 + len]).to_le_bytes() != v[4 + len..12 + len] {
            return false;
        }
        v = &v[12 + len..];
    }
    true
}

#[test]
fn concurrent_set_get_never_tears() {
    // Small memory so that eviction and compaction run during the test too.
    let s = Arc::new(Store::builder().memory_limit(2 << 20).build().unwrap());
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let s = Arc::clone(&s);
            thread::spawn(move || {
                let mut v = Vec::new();
                let mut hits = 0u32;
                for i in 0..20_000u64 {
                    let key = format!("k{}", i % 8);
                    if i % 3 == 0 {
                        make_value(i * 31 + t as u64, 16 + (i as usize * 7 + t) % 3000, &mut v);
                        let mode = if i % 9 == 0 {
                            StoreMode::Append
                        } else {
                            StoreMode::Set
                        };
                        let out = s.store(mode, key.as_bytes(), 0, 0, &v, NOW);
                        assert!(matches!(
                            out,
                            StoreOutcome::Stored | StoreOutcome::NotStored
                        ));
                    } else if let Lookup::Hit(ok) =
                        s.get(key.as_bytes(), NOW, |it| intact(it.value))
                    {
                        assert!(ok, "torn value under {key}");
                        hits += 1;
                    }
                    if i % 500 == 0 {
                        // Filler to force segment turnover while the hot keys are read.
                        for j in 0..20 {
                            s.store(
                                StoreMode::Set,
                                format!("fill{t}:{i}:{j}").as_bytes(),
                                0,
                                0,
                                &[0; 2000],
                                NOW,
                            );
                        }
                    }
                }
                hits
            })
        })
        .collect();
    let hits: u32 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(hits > 1000, "{hits}");
    assert!(s.stats().evictions > 0, "eviction ran during the test");
}

#[test]
fn concurrent_incr_loses_nothing() {
    let s = Arc::new(Store::builder().memory_limit(4 << 20).build().unwrap());
    // Start at "9" so that the value grows through 10, 100, 1000...: both the in-place and
    // the new-item paths run under contention.
    s.store(StoreMode::Set, b"n", 0, 0, b"9", NOW);
    s.store(StoreMode::Set, b"d", 0, 0, b"1000000", NOW);
    const PER: u64 = 5_000;
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let s = Arc::clone(&s);
            thread::spawn(move || {
                for _ in 0..PER {
                    assert!(matches!(
                        s.incr_decr(b"n", 1, true, NOW),
                        ArithOutcome::Value(_)
                    ));
                    assert!(matches!(
                        s.incr_decr(b"d", 1, false, NOW),
                        ArithOutcome::Value(_)
                    ));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let total = 9 + PER * THREADS as u64;
    let n = s.get(b"n", NOW, |it| it.value.to_vec()).hit().unwrap();
    assert_eq!(n, total.to_string().as_bytes());
    let d = s.get(b"d", NOW, |it| it.value.to_vec()).hit().unwrap();
    let expect = format!("{:<7}", 1_000_000 - PER * THREADS as u64);
    assert_eq!(String::from_utf8(d).unwrap(), expect);
}

#[test]
fn concurrent_cas_has_one_winner_per_round() {
    let s = Arc::new(Store::builder().memory_limit(4 << 20).build().unwrap());
    s.store(StoreMode::Set, b"c", 0, 0, b"0", NOW);
    const ROUNDS: usize = 300;
    let barrier = Arc::new(Barrier::new(THREADS));
    let wins = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (s, barrier, wins) = (Arc::clone(&s), Arc::clone(&barrier), Arc::clone(&wins));
            thread::spawn(move || {
                let mut my_wins = Vec::new();
                for round in 0..ROUNDS {
                    // Everyone reads the same version...
                    let cas = s.get(b"c", NOW, |it| it.cas).hit().unwrap();
                    barrier.wait();
                    // ...and all race to replace it.
                    let v = format!("{round}:{t}");
                    if s.store(StoreMode::Cas(cas), b"c", 0, 0, v.as_bytes(), NOW)
                        == StoreOutcome::Stored
                    {
                        wins.fetch_add(1, Ordering::Relaxed);
                        my_wins.push(round);
                    }
                    barrier.wait();
                }
                my_wins
            })
        })
        .collect();
    let mut rounds: Vec<usize> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    rounds.sort_unstable();
    assert_eq!(
        rounds,
        (0..ROUNDS).collect::<Vec<_>>(),
        "exactly one winner per round"
    );
    assert_eq!(wins.load(Ordering::Relaxed), ROUNDS as u64);
}

#[test]
fn cas_ids_unique_across_threads() {
    let s = Arc::new(Store::builder().memory_limit(4 << 20).build().unwrap());
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let s = Arc::clone(&s);
            thread::spawn(move || {
                let mut ids = Vec::new();
                let mut last = 0;
                for i in 0..2000 {
                    let (out, cas) = s.store_cas(
                        StoreMode::Set,
                        format!("{t}:{}", i % 50).as_bytes(),
                        0,
                        0,
                        b"v",
                        NOW,
                    );
                    assert_eq!(out, StoreOutcome::Stored);
                    assert!(cas > last, "increasing within a thread");
                    last = cas;
                    ids.push(cas);
                }
                ids
            })
        })
        .collect();
    let mut all: Vec<u64> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), n);
}
