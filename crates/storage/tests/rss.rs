//! Resident memory stays bounded however item sizes shift (no slab calcification, no
//! malloc fragmentation): 256 MB of values of 20 B .. 500 KB into a 64 MB store.
//! Its own test binary, so that no other test's memory is counted.

use storage::{Store, StoreMode, StoreOutcome};

#[cfg(target_os = "linux")]
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

#[cfg(target_os = "linux")]
#[test]
fn rss_stays_bounded_while_sizes_shift() {
    let limit = 64usize << 20;
    let base = rss_bytes();
    let s = Store::builder().memory_limit(limit).build().unwrap();
    let big = vec![0x5Au8; 500_000];
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut written = 0usize;
    let mut i = 0u64;
    let mut peak = 0;
    while written < 256 << 20 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // Phases: small items, then large, then mixed, so the size mix shifts over time.
        let len = match (written >> 26) % 4 {
            0 => 20 + (x % 200) as usize,
            1 => 100_000 + (x % 400_000) as usize,
            2 => 1_000 + (x % 10_000) as usize,
            _ => 20 + (x % 500_000) as usize,
        };
        let key = format!("k{}", i % 100_000);
        assert_eq!(
            s.store(StoreMode::Set, key.as_bytes(), 0, 0, &big[..len], 1),
            StoreOutcome::Stored
        );
        written += len;
        i += 1;
        if i % 256 == 0 {
            peak = peak.max(rss_bytes());
        }
    }
    let grown = peak.saturating_sub(base);
    eprintln!(
        "RSS growth {} MiB for a {} MiB limit",
        grown >> 20,
        limit >> 20
    );
    assert!(
        grown < (limit as u64) * 3 / 2 + (16 << 20),
        "RSS grew by {} MiB for a {} MiB limit",
        grown >> 20,
        limit >> 20
    );
}
