//! Model-based fuzzing of the store: a `HashMap` holds what each key must read
//! as, beside a `storage::Store` small enough that eviction happens.
//!
//! The rule is one-sided, because the cache may drop anything at any time: a
//! hit must equal the last write for that key (value, flags, and CAS id when
//! known), and a miss is allowed. Once the store has said a key is gone (a
//! miss, `delete`, `flush_all`, a failed `replace`/`cas`/`touch`/`incr`), the
//! key must stay gone until it is written again, and a key whose exptime has
//! passed must miss.

use std::collections::HashMap;

use storage::{ArithOutcome, Lookup, RelTime, Store, StoreMode, StoreOutcome};

use crate::input::Input;

/// Three 1 MiB segments: a few large values force eviction.
const MEMORY_LIMIT_BYTES: usize = 3 << 20;
const ITEM_SIZE_MAX_BYTES: usize = 256 << 10;

/// What a key must read as, if it reads as anything.
#[derive(Clone, Debug)]
struct Expect {
    value: Vec<u8>,
    flags: u32,
    exptime: RelTime,
    /// Known after a store or a hit; `None` after an `incr`, which takes a new id.
    cas: Option<u64>,
}

impl Expect {
    fn expired(&self, now: RelTime) -> bool {
        self.exptime != 0 && self.exptime <= now
    }
}

/// One key of a small set, so operations collide; a few are 250 bytes long.
fn pick_key(input: &mut Input<'_>) -> Vec<u8> {
    let i = input.u8() % 12;
    if i < 10 {
        format!("key{i}").into_bytes()
    } else {
        let mut k = format!("long{i}-").into_bytes();
        k.resize(250, b'x');
        k
    }
}

/// A value whose bytes depend on the operation number, so a stale or mixed
/// value never equals the expected one by chance.
fn make_value(input: &mut Input<'_>, serial: u64) -> Vec<u8> {
    let class = input.u8();
    let len = match class % 8 {
        // Numbers, for incr/decr.
        0 => return (u64::from(input.u8()) * serial).to_string().into_bytes(),
        1..=5 => usize::from(input.u8()),
        // Large: up to ~256 KB, some too large for the item limit.
        _ => usize::from(input.u8()) * 1024 + usize::from(input.u8()),
    };
    let seed = serial.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (0..len)
        .map(|i| (seed >> ((i % 8) * 8)) as u8 ^ (i / 8) as u8)
        .collect()
}

/// An exptime: mostly never, sometimes soon, sometimes already past.
fn make_exptime(input: &mut Input<'_>, now: RelTime) -> RelTime {
    match input.u8() % 6 {
        0 => now + 1 + RelTime::from(input.u8() % 4),
        1 => now - 1,
        _ => 0,
    }
}

/// Unsigned decimal as memcached's incr reads it (`strtoull`, spaces around).
fn as_number(value: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(value).ok()?.trim_matches(' ');
    if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Runs the operations the fuzz bytes describe against a store and the model.
pub fn store_model(data: &[u8]) {
    let store = Store::builder()
        .memory_limit(MEMORY_LIMIT_BYTES)
        .item_size_max(ITEM_SIZE_MAX_BYTES)
        .build()
        .expect("build store");
    let mut model: HashMap<Vec<u8>, Expect> = HashMap::new();
    let mut input = Input::new(data);
    // The server clock starts at 1; 2 keeps `now - 1` meaningful.
    let mut now: RelTime = 2;
    let mut serial = 0u64;
    while !input.is_empty() {
        serial += 1;
        let key = pick_key(&mut input);
        match input.u8() % 10 {
            0..=3 => {
                let mode = match input.u8() % 6 {
                    0 => StoreMode::Set,
                    1 => StoreMode::Add,
                    2 => StoreMode::Replace,
                    3 => StoreMode::Append,
                    4 => StoreMode::Prepend,
                    _ => {
                        let known = model.get(&key).and_then(|e| e.cas);
                        match (input.bool(), known) {
                            (true, Some(cas)) => StoreMode::Cas(cas),
                            _ => StoreMode::Cas(input.u64() % 64),
                        }
                    }
                };
                let flags = if input.bool() { input.u32() } else { 0 };
                let exptime = make_exptime(&mut input, now);
                let value = make_value(&mut input, serial);
                store_op(&store, &mut model, mode, &key, flags, exptime, &value, now);
            }
            4..=6 => {
                let touch = (input.u8() & 3 == 0).then(|| make_exptime(&mut input, now));
                get_op(&store, &mut model, &key, touch, now);
            }
            7 => {
                let live = store.delete(&key, now);
                let known = model.remove(&key);
                if live {
                    assert!(
                        known.is_some_and(|e| !e.expired(now)),
                        "delete found a dead key"
                    );
                }
            }
            8 => match input.u8() % 4 {
                0 => {
                    store.flush_all(now - 1, now);
                    model.clear();
                }
                1 => now += 1 + RelTime::from(input.u8() % 3),
                _ => {
                    let exptime = make_exptime(&mut input, now);
                    if store.touch(&key, exptime, now) {
                        let e = model.get_mut(&key).expect("touch found a dead key");
                        assert!(!e.expired(now), "touch found an expired key");
                        e.exptime = exptime;
                    } else {
                        model.remove(&key);
                    }
                }
            },
            _ => {
                let incr = input.bool();
                let delta = if input.bool() {
                    input.u64()
                } else {
                    u64::from(input.u8())
                };
                arith_op(&store, &mut model, &key, incr, delta, now);
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn store_op(
    store: &Store,
    model: &mut HashMap<Vec<u8>, Expect>,
    mode: StoreMode,
    key: &[u8],
    flags: u32,
    exptime: RelTime,
    value: &[u8],
    now: RelTime,
) {
    let fits = store.item_fits(key.len(), value.len(), flags);
    let (outcome, cas) = store.store_cas(mode, key, flags, exptime, value, now);
    let known = model.get(key).filter(|e| !e.expired(now)).cloned();
    let what = format!("{mode:?} of {} bytes", value.len());
    match outcome {
        StoreOutcome::TooLarge => assert!(!fits, "{what}: TooLarge but item_fits"),
        StoreOutcome::Stored => {
            assert!(fits || matches!(mode, StoreMode::Append | StoreMode::Prepend));
            assert_ne!(cas, 0, "{what}: stored without a CAS id");
            let new = match mode {
                StoreMode::Append | StoreMode::Prepend => {
                    let old = known.unwrap_or_else(|| panic!("{what} stored on a dead key"));
                    let joined = if mode == StoreMode::Append {
                        [&old.value[..], value].concat()
                    } else {
                        [value, &old.value[..]].concat()
                    };
                    Expect {
                        value: joined,
                        cas: Some(cas),
                        ..old
                    }
                }
                StoreMode::Replace | StoreMode::Cas(_) => {
                    let old = known.unwrap_or_else(|| panic!("{what} stored on a dead key"));
                    if let (StoreMode::Cas(given), Some(current)) = (mode, old.cas) {
                        assert_eq!(given, current, "cas stored with a stale id");
                    }
                    Expect {
                        value: value.to_vec(),
                        flags,
                        exptime,
                        cas: Some(cas),
                    }
                }
                StoreMode::Set | StoreMode::Add => Expect {
                    value: value.to_vec(),
                    flags,
                    exptime,
                    cas: Some(cas),
                },
            };
            // An exptime already past stores an item that is dead at once.
            model.insert(key.to_vec(), new);
        }
        StoreOutcome::NotStored => match mode {
            StoreMode::Set => panic!("{what}: set answered NOT_STORED"),
            StoreMode::Add => assert!(known.is_some(), "add refused on a dead key"),
            StoreMode::Replace => {
                model.remove(key);
            }
            // Append/prepend also refuse when the joined item would not fit;
            // the old value then stays, so the model keeps it.
            _ => {}
        },
        StoreOutcome::Exists => {
            let StoreMode::Cas(given) = mode else {
                panic!("{what} answered EXISTS");
            };
            let old = known.unwrap_or_else(|| panic!("cas EXISTS on a dead key"));
            if let Some(current) = old.cas {
                assert_ne!(given, current, "cas refused the current id");
            }
        }
        StoreOutcome::NotFound => {
            assert!(
                matches!(mode, StoreMode::Cas(_)),
                "{what} answered NOT_FOUND"
            );
            model.remove(key);
        }
        StoreOutcome::NoMemory => panic!("{what}: out of memory with evictions on"),
    }
}

fn get_op(
    store: &Store,
    model: &mut HashMap<Vec<u8>, Expect>,
    key: &[u8],
    touch: Option<RelTime>,
    now: RelTime,
) {
    let read = |item: storage::ItemRef<'_>| {
        assert_eq!(item.key, key, "hit returned another key");
        (item.value.to_vec(), item.flags, item.cas)
    };
    let lookup = match touch {
        Some(exptime) => store.get_and_touch(key, exptime, now, read),
        None => store.get(key, now, read),
    };
    match lookup {
        Lookup::Hit((value, flags, cas)) => {
            let e = model
                .get_mut(key)
                .unwrap_or_else(|| panic!("hit on {:?}, which is gone", key));
            assert!(
                !e.expired(now),
                "hit on an expired item (exptime {} now {now})",
                e.exptime
            );
            assert!(
                value == e.value,
                "value differs: got {} bytes, expected {}",
                value.len(),
                e.value.len()
            );
            assert_eq!(flags, e.flags, "flags differ");
            if let Some(known) = e.cas {
                assert_eq!(cas, known, "CAS id differs");
            }
            e.cas = Some(cas);
            if let Some(exptime) = touch {
                e.exptime = exptime;
            }
        }
        Lookup::Miss | Lookup::Expired | Lookup::Flushed => {
            model.remove(key);
        }
    }
}

fn arith_op(
    store: &Store,
    model: &mut HashMap<Vec<u8>, Expect>,
    key: &[u8],
    incr: bool,
    delta: u64,
    now: RelTime,
) {
    let old = model.get(key).filter(|e| !e.expired(now)).cloned();
    match store.incr_decr(key, delta, incr, now) {
        ArithOutcome::Value(n) => {
            let old = old.unwrap_or_else(|| panic!("incr/decr found a dead key"));
            if let Some(before) = as_number(&old.value) {
                let want = if incr {
                    before.wrapping_add(delta)
                } else {
                    before.saturating_sub(delta)
                };
                assert_eq!(n, want, "{before} {} {delta}", if incr { '+' } else { '-' });
            }
            // Read the new bytes back (memcached pads a shorter result with spaces).
            let hit = store.get(key, now, |item| (item.value.to_vec(), item.flags, item.cas));
            let Lookup::Hit((value, flags, cas)) = hit else {
                panic!("incr/decr result not readable: {hit:?}");
            };
            assert_eq!(
                as_number(&value),
                Some(n),
                "stored {:?}",
                String::from_utf8_lossy(&value)
            );
            assert_eq!(flags, old.flags, "incr/decr changed the flags");
            model.insert(
                key.to_vec(),
                Expect {
                    value,
                    cas: Some(cas),
                    ..old
                },
            );
        }
        ArithOutcome::NotFound => {
            model.remove(key);
        }
        ArithOutcome::NonNumeric => {
            let old = old.unwrap_or_else(|| panic!("incr/decr NonNumeric on a dead key"));
            assert!(
                as_number(&old.value).is_none(),
                "refused number {:?}",
                old.value
            );
        }
        ArithOutcome::NoMemory => panic!("incr/decr: out of memory with evictions on"),
    }
}
