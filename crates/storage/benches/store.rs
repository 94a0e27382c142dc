//! Store micro-benchmarks: single-threaded cost of the hot operations.
//! Names follow `store/<op>/<value size>`.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use storage::{Store, StoreMode};

const KEYS: usize = 1024;

fn keys() -> Vec<Vec<u8>> {
    // 20-byte keys, as in the Solarflare workloads.
    (0..KEYS)
        .map(|i| format!("key:{i:016}").into_bytes())
        .collect()
}

fn bench_size(c: &mut Criterion, name: &str, value_len: usize) {
    let s = Store::builder().memory_limit(64 << 20).build().unwrap();
    let keys = keys();
    let value = vec![b'v'; value_len];
    for k in &keys {
        s.store(StoreMode::Set, k, 0, 0, &value, 1);
    }
    let mut g = c.benchmark_group("store");
    g.throughput(Throughput::Elements(1));
    let mut out = vec![0u8; value_len];
    let mut i = 0usize;
    g.bench_function(format!("get/{name}"), |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            let hit = s.get(&keys[i], 1, |it| {
                out[..it.value.len()].copy_from_slice(it.value);
                it.flags
            });
            black_box(hit)
        })
    });
    g.bench_function(format!("set/{name}"), |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            black_box(s.store(StoreMode::Set, &keys[i], 0, 0, &value, 1))
        })
    });
    g.bench_function(format!("mixed_9get_1set/{name}"), |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            if i % 10 == 0 {
                black_box(s.store(StoreMode::Set, &keys[i], 0, 0, &value, 1));
            } else {
                black_box(s.get(&keys[i], 1, |it| it.value.len()));
            }
        })
    });
    g.finish();
}

fn bench_store(c: &mut Criterion) {
    bench_size(c, "20B", 20);
    bench_size(c, "1KB", 1024);
    let s = Store::builder().memory_limit(64 << 20).build().unwrap();
    let keys = keys();
    let mut i = 0usize;
    c.bench_function("store/get_miss/20B", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            black_box(s.get(&keys[i], 1, |it| it.flags))
        })
    });
    s.store(StoreMode::Set, b"counter", 0, 0, b"0", 1);
    c.bench_function("store/incr/20B", |b| {
        b.iter(|| black_box(s.incr_decr(b"counter", 1, true, 1)))
    });
}

criterion_group!(benches, bench_store);
criterion_main!(benches);
