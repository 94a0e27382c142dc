//! Model-based test: a `HashMap` kept beside the store. A hit must equal the model's last
//! write; a miss is allowed only where eviction could explain it.

use std::collections::HashMap;

use storage::{ArithOutcome, Lookup, RelTime, Store, StoreMode, StoreOutcome};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn run(seed: u64, memory: usize, ops: usize) {
    let s = Store::builder().memory_limit(memory).build().unwrap();
    let mut model: HashMap<Vec<u8>, (Vec<u8>, u32)> = HashMap::new();
    let mut rng = Rng(seed);
    let mut now: RelTime = 1;
    let evicting = |s: &Store| s.stats().evictions > 0;
    for op in 0..ops {
        if op % 1000 == 0 {
            now += 1;
        }
        let key = format!("key{}", rng.below(300)).into_bytes();
        let len = match rng.below(20) {
            0 => rng.below(50_000) as usize,
            _ => rng.below(300) as usize,
        };
        let value: Vec<u8> = (0..len)
            .map(|i| (i as u64 ^ seed ^ op as u64) as u8)
            .collect();
        let flags = rng.below(3) as u32;
        match rng.below(10) {
            0..=2 => {
                assert_eq!(
                    s.store(StoreMode::Set, &key, flags, 0, &value, now),
                    StoreOutcome::Stored
                );
                model.insert(key, (value, flags));
            }
            3 => {
                let out = s.store(StoreMode::Add, &key, flags, 0, &value, now);
                match out {
                    StoreOutcome::Stored => {
                        assert!(!model.contains_key(&key) || evicting(&s));
                        model.insert(key, (value, flags));
                    }
                    StoreOutcome::NotStored => assert!(model.contains_key(&key)),
                    other => panic!("add: {other:?}"),
                }
            }
            4 => match s.store(StoreMode::Replace, &key, flags, 0, &value, now) {
                StoreOutcome::Stored => {
                    assert!(model.contains_key(&key));
                    model.insert(key, (value, flags));
                }
                StoreOutcome::NotStored => {
                    assert!(!model.contains_key(&key) || evicting(&s));
                    model.remove(&key);
                }
                other => panic!("replace: {other:?}"),
            },
            5 => {
                let append = rng.below(2) == 0;
                let mode = if append {
                    StoreMode::Append
                } else {
                    StoreMode::Prepend
                };
                match s.store(mode, &key, 0, 0, &value[..value.len().min(100)], now) {
                    StoreOutcome::Stored => {
                        let (old, f) = model.get(&key).expect("concat hit a modelled key").clone();
                        let data = &value[..value.len().min(100)];
                        let joined = if append {
                            [&old[..], data].concat()
                        } else {
                            [data, &old[..]].concat()
                        };
                        model.insert(key, (joined, f));
                    }
                    StoreOutcome::NotStored => {
                        if !evicting(&s) {
                            assert!(!model.contains_key(&key));
                        }
                        model.remove(&key);
                    }
                    other => panic!("concat: {other:?}"),
                }
            }
            6 => {
                let existed = s.delete(&key, now);
                assert!(!existed || model.contains_key(&key));
                assert!(existed || !model.contains_key(&key) || evicting(&s));
                model.remove(&key);
            }
            7 => {
                let num = rng.below(1000).to_string().into_bytes();
                s.store(StoreMode::Set, &key, 0, 0, &num, now);
                model.insert(key.clone(), (num, 0));
                let delta = rng.below(2000);
                let incr = rng.below(2) == 0;
                match s.incr_decr(&key, delta, incr, now) {
                    ArithOutcome::Value(v) => {
                        let old: u64 = std::str::from_utf8(&model[&key].0)
                            .unwrap()
                            .trim()
                            .parse()
                            .unwrap();
                        let want = if incr {
                            old.wrapping_add(delta)
                        } else {
                            old.saturating_sub(delta)
                        };
                        assert_eq!(v, want);
                        let old_len = model[&key].0.len();
                        let mut digits = v.to_string().into_bytes();
                        if digits.len() < old_len {
                            digits.resize(old_len, b' ');
                        }
                        model.insert(key, (digits, 0));
                    }
                    ArithOutcome::NotFound => {
                        assert!(evicting(&s));
                        model.remove(&key);
                    }
                    other => panic!("incr: {other:?}"),
                }
            }
            _ => match s.get(&key, now, |it| (it.value.to_vec(), it.flags)) {
                Lookup::Hit(got) => assert_eq!(Some(&got), model.get(&key), "op {op}"),
                Lookup::Miss => {
                    assert!(
                        !model.contains_key(&key) || evicting(&s),
                        "op {op}: lost {key:?}"
                    );
                    model.remove(&key);
                }
                other => panic!("get: {other:?}"),
            },
        }
    }
}

#[test]
fn model_without_eviction() {
    run(0xC0FFEE, 64 << 20, 20_000);
}

#[test]
fn model_under_eviction() {
    for seed in 1..4 {
        run(seed * 0x9E37_79B9, 2 << 20, 20_000);
    }
}
