//! `stats detail`: memcached's per-prefix counters (its `stats_prefix.c`).
//!
//! With `stats detail on`, every text or binary get, store and delete of a key that
//! holds the prefix delimiter (`-D`, default `:`) counts against the key's prefix: the
//! bytes before the first delimiter. `stats detail dump` lists them:
//!
//! ```text
//!   PREFIX <prefix> get <gets> hit <hits> set <sets> del <deletes>\r\n ... END\r\n
//! ```
//!
//! The table is memcached's: 256 buckets chosen by the prefix's MurmurHash3 (x86, 32
//! bits, seed 0), each a list with the newest prefix first, dumped bucket by bucket, so
//! the lines come out in memcached's order. One lock guards it, as `STATS_LOCK` guards
//! memcached's; while detail is off (the default) nothing takes it. A get is counted
//! through the read hook (`stats/observe.rs`, its `DETAIL` bit), a store or delete
//! after one relaxed load of [`PrefixStats::enabled`].
//!
//! Copied from memcached although it looks wrong: a prefix matches a longer one already
//! in its bucket that starts with it (memcached compares with `strncmp` over the new
//! prefix's length), so `ab:` and then `a:` in one bucket both count as `ab`.
//! Unlike memcached, the table stops taking new prefixes at [`MAX_PREFIXES`], so that a
//! client cannot grow it without bound (docs/protocol.md).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::stats::observe::ReadObservers;

/// memcached's `PREFIX_HASH_SIZE`.
const BUCKETS: usize = 256;

/// Prefixes kept at most; later ones are not counted.
pub const MAX_PREFIXES: usize = 1 << 20;

/// One prefix's counters.
#[derive(Debug, Default)]
struct Counters {
    prefix: Vec<u8>,
    gets: u64,
    hits: u64,
    sets: u64,
    deletes: u64,
}

#[derive(Default)]
struct Table {
    /// Each bucket's prefixes, oldest first (dumped newest first).
    buckets: Vec<Vec<Counters>>,
    count: usize,
}

/// What a request did to a key, for [`PrefixStats::record`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A get of the key; whether it hit.
    Get {
        hit: bool,
    },
    Set,
    Delete,
}

/// The `stats detail` state a server shares between its workers.
pub struct PrefixStats {
    enabled: AtomicBool,
    delimiter: u8,
    table: Mutex<Table>,
    /// Where reads learn that detail is on (its `DETAIL` bit), set with `enabled`.
    observers: Arc<ReadObservers>,
}

impl PrefixStats {
    /// Off, with prefixes ending at `delimiter` (`-D`); reads are counted through the
    /// read hook, which learns from `observers` when detail is on.
    #[must_use]
    pub fn new(delimiter: u8, observers: Arc<ReadObservers>) -> PrefixStats {
        PrefixStats {
            enabled: AtomicBool::new(false),
            delimiter,
            table: Mutex::new(Table::default()),
            observers,
        }
    }

    /// Whether requests are being counted (`stats detail on`).
    #[inline(always)]
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// `stats detail on|off`. Turning it off keeps what was counted.
    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed);
        self.observers.set(ReadObservers::DETAIL, on);
    }

    /// Count `event` against `key`'s prefix, if the key has one. Call only when
    /// [`PrefixStats::enabled`].
    #[cold]
    pub fn record(&self, key: &[u8], event: Event) {
        // memcached scans a C string: a NUL ends the key.
        let Some(len) = key
            .iter()
            .take_while(|&&b| b != 0)
            .position(|&b| b == self.delimiter)
        else {
            return;
        };
        let prefix = &key[..len];
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let table = &mut *table;
        if table.buckets.is_empty() {
            table.buckets.resize_with(BUCKETS, Vec::new);
        }
        let bucket = &mut table.buckets[murmur3_32(prefix) as usize % BUCKETS];
        // Newest first, and a longer prefix that starts with this one matches (see the
        // module docs).
        let found = bucket
            .iter_mut()
            .rev()
            .find(|c| c.prefix.len() >= len && c.prefix[..len] == *prefix);
        let counters = match found {
            Some(c) => c,
            None if table.count < MAX_PREFIXES => {
                table.count += 1;
                bucket.push(Counters {
                    prefix: prefix.to_vec(),
                    ..Counters::default()
                });
                bucket.last_mut().expect("just pushed")
            }
            None => return,
        };
        match event {
            Event::Get { hit } => {
                counters.gets += 1;
                counters.hits += u64::from(hit);
            }
            Event::Set => counters.sets += 1,
            Event::Delete => counters.deletes += 1,
        }
    }

    /// `stats detail dump`: every prefix's line, then `END`.
    pub fn dump(&self, out: &mut Vec<u8>) {
        use std::io::Write;
        let table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        for bucket in &table.buckets {
            for c in bucket.iter().rev() {
                out.extend_from_slice(b"PREFIX ");
                out.extend_from_slice(&c.prefix);
                let _ = write!(
                    out,
                    " get {} hit {} set {} del {}\r\n",
                    c.gets, c.hits, c.sets, c.deletes
                );
            }
        }
        out.extend_from_slice(b"END\r\n");
    }

    /// `stats reset`: forget every prefix.
    pub fn clear(&self) {
        *self.table.lock().unwrap_or_else(|e| e.into_inner()) = Table::default();
    }
}

/// MurmurHash3, x86 32-bit, seed 0: memcached's default item hash, which also places
/// its prefixes.
fn murmur3_32(data: &[u8]) -> u32 {
    const C1: u32 = 0xcc9e_2d51;
    const C2: u32 = 0x1b87_3593;
    let mix = |k: u32| k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
    let mut h: u32 = 0;
    let mut blocks = data.chunks_exact(4);
    for block in &mut blocks {
        let k = u32::from_le_bytes(block.try_into().expect("4 bytes"));
        h ^= mix(k);
        h = h.rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64);
    }
    let tail = blocks.remainder();
    if !tail.is_empty() {
        let mut k = 0u32;
        for (i, &b) in tail.iter().enumerate() {
            k ^= u32::from(b) << (8 * i);
        }
        h ^= mix(k);
    }
    h ^= data.len() as u32;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur3_matches_the_reference_vectors() {
        // Published test vectors of MurmurHash3_x86_32 with seed 0.
        assert_eq!(murmur3_32(b""), 0);
        assert_eq!(murmur3_32(b"hello"), 0x248b_fa47);
        assert_eq!(murmur3_32(b"hello, world"), 0x149b_bb7f);
        assert_eq!(
            murmur3_32(b"The quick brown fox jumps over the lazy dog"),
            0x2e4f_f723
        );
    }

    #[test]
    fn counts_by_prefix_and_skips_keys_without_one() {
        let p = PrefixStats::new(b':', Arc::default());
        p.record(b"user:1", Event::Get { hit: true });
        p.record(b"user:2", Event::Get { hit: false });
        p.record(b"user:3", Event::Set);
        p.record(b"user:3", Event::Delete);
        p.record(b"nodelimiter", Event::Set);
        p.record(b"nul\0:x", Event::Set);
        let mut out = Vec::new();
        p.dump(&mut out);
        assert_eq!(out, b"PREFIX user get 2 hit 1 set 1 del 1\r\nEND\r\n");
        p.clear();
        out.clear();
        p.dump(&mut out);
        assert_eq!(out, b"END\r\n");
    }

    #[test]
    fn a_prefix_counts_against_a_longer_one_it_starts_in_its_bucket() {
        // A longer prefix in the same bucket as `a`, found by trying suffixes.
        let bucket = |p: &[u8]| murmur3_32(p) as usize % BUCKETS;
        let long = (0u32..)
            .map(|i| format!("a{i}").into_bytes())
            .find(|p| bucket(p) == bucket(b"a"))
            .unwrap();
        let p = PrefixStats::new(b':', Arc::default());
        p.record(&[&long[..], b":1"].concat(), Event::Set);
        p.record(b"a:1", Event::Set);
        let mut out = Vec::new();
        p.dump(&mut out);
        let want = format!(
            "PREFIX {} get 0 hit 0 set 2 del 0\r\nEND\r\n",
            String::from_utf8(long).unwrap()
        );
        assert_eq!(String::from_utf8(out).unwrap(), want);
    }
}
