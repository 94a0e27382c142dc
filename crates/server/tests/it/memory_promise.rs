//! The memory promise: with `-m M` the cache keeps what it can (dead items, expired or
//! flushed, are reclaimed before any live item is evicted, and every item written reads
//! back unless it was counted as evicted), and the process stays under 1.05 M + 32 MiB
//! resident at every moment, 5 000 idle connections included.
//!
//! Every server is started through `common::ServerProcess` and killed by PID when its
//! test ends; every loop is bounded by a count and every wait by a deadline. Nothing is
//! timed: the numbers printed (evictions, resident memory per phase) are for the reader.

use crate::common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::{descriptors_for, escape, Client, Rng, ServerKind, ServerProcess};

const MIB: u64 = 1 << 20;

/// A value that says which write it came from (lowercase and digits only, so it never
/// looks like a reply line), so that a stale or mixed-up hit is caught.
fn value(seq: u64, len: usize) -> Vec<u8> {
    let mut v = format!("{seq}:{len}:").into_bytes();
    v.truncate(len);
    v.resize(len, b'a' + (seq % 26) as u8);
    v
}

/// memcached's size for an item (header with CAS, key and its NUL, value and its CRLF):
/// how "a memory's worth" of items is reckoned here.
fn item_bytes(key_len: usize, value_len: usize) -> u64 {
    (56 + key_len + 1 + value_len + 2) as u64
}

/// One item to set: key, exptime, value.
struct Item {
    key: String,
    exptime: u32,
    value: Vec<u8>,
}

/// memcached's refusal when it finds nothing to evict at once, which a long pipelined
/// fill now and then meets (its LRU tail busy). memcached is measured here for the
/// report only; ferrocache must never refuse.
const OUT_OF_MEMORY: &[u8] = b"SERVER_ERROR out of memory storing object\r\n";

/// Sets `items` pipelined on `conn` and checks that every reply is `STORED`.
fn set_all(conn: &mut Client, items: &[Item]) {
    let refused = set_all_refusable(conn, items);
    assert_eq!(refused, 0, "{refused} sets refused for want of memory");
}

/// Sets `items` pipelined on `conn` and checks that every reply is `STORED` or
/// [`OUT_OF_MEMORY`]; returns how many were the latter.
fn set_all_refusable(conn: &mut Client, items: &[Item]) -> usize {
    let mut request = Vec::with_capacity(items.iter().map(|i| i.value.len() + 48).sum());
    for item in items {
        request.extend_from_slice(
            format!(
                "set {} 0 {} {}\r\n",
                item.key,
                item.exptime,
                item.value.len()
            )
            .as_bytes(),
        );
        request.extend_from_slice(&item.value);
        request.extend_from_slice(b"\r\n");
    }
    conn.send(&request);
    let n = items.len();
    let reply = conn.read_until(common::READ_TIMEOUT, |b| {
        b.iter().filter(|&&c| c == b'\n').count() >= n
    });
    let lines: Vec<&[u8]> = reply.bytes.split_inclusive(|&c| c == b'\n').collect();
    let bad = lines
        .iter()
        .position(|line| *line != b"STORED\r\n" && *line != OUT_OF_MEMORY);
    if lines.len() != n || bad.is_some() {
        panic!(
            "{} replies to {n} sets; the first neither STORED nor refused: {}, for {}",
            lines.len(),
            bad.map_or("none".into(), |i| escape(lines[i])),
            bad.and_then(|i| items.get(i))
                .map_or("?", |i| i.key.as_str()),
        );
    }
    lines.iter().filter(|line| **line == OUT_OF_MEMORY).count()
}

/// Sets `items` on `kind` in pipelined batches of at most `batch` items, calling `after`
/// after each batch. memcached may refuse some ([`OUT_OF_MEMORY`]; said on standard
/// error), ferrocache none.
fn set_batched(
    kind: ServerKind,
    conn: &mut Client,
    items: &[Item],
    batch: usize,
    mut after: impl FnMut(),
) {
    let mut refused = 0;
    for chunk in items.chunks(batch) {
        refused += set_all_refusable(conn, chunk);
        after();
    }
    if refused > 0 {
        assert_eq!(
            kind,
            ServerKind::Memcached,
            "{refused} sets refused for want of memory"
        );
        eprintln!(
            "{}: {refused} of {} sets refused for want of memory",
            kind.name(),
            items.len()
        );
    }
}

/// The values of those of `keys` that are present (one multi-get per 200 keys).
fn get_many(conn: &mut Client, keys: &[String]) -> HashMap<String, Vec<u8>> {
    let mut found = HashMap::new();
    for chunk in keys.chunks(200) {
        let mut request = b"get".to_vec();
        for k in chunk {
            request.push(b' ');
            request.extend_from_slice(k.as_bytes());
        }
        request.extend_from_slice(b"\r\n");
        let reply = conn.request(&request);
        let mut rest = &reply[..];
        loop {
            let eol = rest
                .windows(2)
                .position(|w| w == b"\r\n")
                .unwrap_or_else(|| panic!("unterminated reply line in {}", escape(&reply)));
            let line = std::str::from_utf8(&rest[..eol]).expect("reply line is text");
            rest = &rest[eol + 2..];
            if line == "END" {
                assert!(rest.is_empty(), "bytes after END: {}", escape(rest));
                break;
            }
            let fields: Vec<&str> = line.split(' ').collect();
            assert!(
                fields.len() == 4 && fields[0] == "VALUE",
                "bad line {line:?}"
            );
            let len: usize = fields[3].parse().expect("value length");
            assert_eq!(&rest[len..len + 2], b"\r\n", "value not followed by CRLF");
            found.insert(fields[1].to_string(), rest[..len].to_vec());
            rest = &rest[len + 2..];
        }
    }
    found
}

/// The reference server, when it is installed; the comparisons are printed, never
/// asserted, so a machine without memcached runs ferrocache's checks alone.
fn memcached_installed() -> bool {
    std::env::var("FERRO_MEMCACHED").is_ok() || std::path::Path::new("/usr/bin/memcached").exists()
}

const VALUE_LEN: usize = 100;
const SMALL_M: u64 = 64;

/// What a reclaim scenario measured.
struct Reclaim {
    /// Live items recorded present before the dead ones died.
    live_present: usize,
    /// Live items among them missing or changed afterwards.
    live_lost: usize,
    /// Evictions while the last phase wrote into the dead space.
    evictions_in_last_phase: u64,
    /// Items of the last phase missing at its end.
    new_missing: usize,
}

/// `-m 64`, 100-byte values: writes 1.2 x the memory in items, two dead-to-be
/// (`exptime` 2 s, when `flush` is false) to one never expiring, interleaved so that
/// both kinds are spread over the whole log (so at most 0.4 x the memory is live even
/// if none of them was evicted, and half a memory written later fits); records which
/// never-expiring items are present; kills the others (waits for expiry, or sends
/// `flush_all`, after which nothing written before is live, so the record is then of
/// the never-expiring items written after it); writes half a memory's worth of new
/// never-expiring items, and reports what survived.
///
/// ferrocache's clock is stopped (`debugtime p`) until the TTLs are to run out, then
/// moved past them, so that no item expires while the fill is still being written,
/// however slow the machine, and nothing waits for seconds to pass. memcached (printed
/// for comparison only) has no such command outside its debug build: it waits.
fn reclaim_scenario(kind: ServerKind, flush: bool) -> Reclaim {
    let test_clock = kind == ServerKind::Ferrocache;
    let mut args = vec!["-m", "64", "-t", "2", "-U", "0"];
    if test_clock {
        args.push("--debug-time");
    }
    let server = ServerProcess::start(kind, &args);
    let mut conn = server.connect();
    if test_clock {
        assert_eq!(conn.request(b"debugtime p\r\n"), b"OK\r\n");
    }
    let per_item = item_bytes(12, VALUE_LEN);
    let fill_count = (SMALL_M * MIB * 6 / 5 / per_item) as usize;
    let ttl = if flush { 0 } else { 2 };
    let fill: Vec<Item> = (0..fill_count as u64)
        .map(|seq| Item {
            key: format!("a:{seq:010}"),
            // One in three never expires; the others die (expire, or are flushed).
            exptime: if seq % 3 == 0 { 0 } else { ttl },
            value: value(seq, VALUE_LEN),
        })
        .collect();
    set_batched(kind, &mut conn, &fill, 4000, || {});
    let mut live: Vec<(String, Vec<u8>)> = Vec::new();
    if flush {
        assert_eq!(conn.request(b"flush_all\r\n"), b"OK\r\n");
        // After flush_all nothing written before is live: the never-expiring items are
        // written now, a quarter of the memory, alongside the flushed space.
        let keep: Vec<Item> = (0..(SMALL_M * MIB / 4 / per_item))
            .map(|seq| Item {
                key: format!("k:{seq:010}"),
                exptime: 0,
                value: value(seq, VALUE_LEN),
            })
            .collect();
        set_batched(kind, &mut conn, &keep, 4000, || {});
        let found = get_many(
            &mut conn,
            &keep.iter().map(|i| i.key.clone()).collect::<Vec<_>>(),
        );
        for item in keep {
            assert_eq!(
                found.get(&item.key),
                Some(&item.value),
                "{}: {} written after flush_all is not there, with three quarters of the \
                 memory flushed",
                kind.name(),
                item.key
            );
            live.push((item.key, item.value));
        }
    } else {
        let keys: Vec<String> = fill
            .iter()
            .filter(|i| i.exptime == 0)
            .map(|i| i.key.clone())
            .collect();
        let found = get_many(&mut conn, &keys);
        for key in keys {
            if let Some(v) = found.get(&key) {
                live.push((key, v.clone()));
            }
        }
        if test_clock {
            assert_eq!(conn.request(b"debugtime 3\r\n"), b"OK\r\n");
        }
        // Until the last item with a TTL reads as gone (by the server's clock), at most
        // 15 s.
        let last_ttl = fill
            .iter()
            .rev()
            .find(|i| i.exptime != 0)
            .expect("ttl item");
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if get_many(&mut conn, std::slice::from_ref(&last_ttl.key)).is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{}: {} (exptime 2) still there after 15 s",
                kind.name(),
                last_ttl.key
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
    let live_present = live.len();
    let evictions_before = conn.stat("evictions");
    let new: Vec<Item> = (0..(SMALL_M * MIB / 2 / per_item))
        .map(|seq| Item {
            key: format!("b:{seq:010}"),
            exptime: 0,
            value: value(seq + (1 << 32), VALUE_LEN),
        })
        .collect();
    set_batched(kind, &mut conn, &new, 4000, || {});
    let evictions_in_last_phase = conn.stat("evictions") - evictions_before;
    let keys: Vec<String> = live.iter().map(|(k, _)| k.clone()).collect();
    let found = get_many(&mut conn, &keys);
    let mut live_lost = 0;
    for (key, v) in &live {
        match found.get(key) {
            Some(got) => assert_eq!(got, v, "{}: {key} changed: {}", kind.name(), escape(got)),
            None => live_lost += 1,
        }
    }
    let new_keys: Vec<String> = new.iter().map(|i| i.key.clone()).collect();
    let new_found = get_many(&mut conn, &new_keys);
    for item in &new {
        if let Some(got) = new_found.get(&item.key) {
            assert_eq!(got, &item.value, "{}: {} changed", kind.name(), item.key);
        }
    }
    Reclaim {
        live_present,
        live_lost,
        evictions_in_last_phase,
        new_missing: new.len() - new_found.len(),
    }
}

fn report(kind: ServerKind, what: &str, r: &Reclaim) {
    eprintln!(
        "{what}, {}: {} live items recorded, {} of them lost; {} evictions and {} of the new \
         items missing after writing half a memory into the dead space",
        kind.name(),
        r.live_present,
        r.live_lost,
        r.evictions_in_last_phase,
        r.new_missing
    );
}

#[test]
fn expired_items_are_reclaimed_before_live_ones_are_evicted() {
    let ours = reclaim_scenario(ServerKind::Ferrocache, false);
    report(ServerKind::Ferrocache, "expiry", &ours);
    if memcached_installed() {
        let theirs = reclaim_scenario(ServerKind::Memcached, false);
        report(ServerKind::Memcached, "expiry", &theirs);
    }
    assert!(
        ours.live_present > 0,
        "no live item was present after the fill"
    );
    assert_eq!(
        (
            ours.live_lost,
            ours.evictions_in_last_phase,
            ours.new_missing
        ),
        (0, 0, 0),
        "with at most 0.4 x the memory live, writing half a memory must evict nothing \
         (live lost, evictions, new missing)"
    );
}

#[test]
fn flushed_items_are_reclaimed_before_live_ones_are_evicted() {
    let ours = reclaim_scenario(ServerKind::Ferrocache, true);
    report(ServerKind::Ferrocache, "flush_all", &ours);
    if memcached_installed() {
        let theirs = reclaim_scenario(ServerKind::Memcached, true);
        report(ServerKind::Memcached, "flush_all", &theirs);
    }
    assert_eq!(
        (
            ours.live_lost,
            ours.evictions_in_last_phase,
            ours.new_missing
        ),
        (0, 0, 0),
        "with the memory flushed and a quarter of it live, writing half a memory must \
         evict nothing (live lost, evictions, new missing)"
    );
}

/// `-m 64`, 20-byte keys and values, sets pipelined on one connection until `stats`
/// shows the first eviction; then every key written is read back: a hit must be the
/// value written, and no more keys may miss than were evicted.
#[test]
fn every_item_written_reads_back_unless_evicted() {
    let server = ServerProcess::start(ServerKind::Ferrocache, &["-m", "64", "-t", "2", "-U", "0"]);
    let mut conn = server.connect();
    let key = |seq: u64| format!("fill:{seq:015}");
    let val = |seq: u64| value(seq, 20);
    const BATCH: u64 = 5000;
    // A bound far past what 64 MiB can hold (about 800 000 such items in memcached).
    const MAX_ITEMS: u64 = 4_000_000;
    let mut written = 0;
    let evictions = loop {
        let items: Vec<Item> = (written..written + BATCH)
            .map(|seq| Item {
                key: key(seq),
                exptime: 0,
                value: val(seq),
            })
            .collect();
        set_all(&mut conn, &items);
        written += BATCH;
        let evictions = conn.stat("evictions");
        if evictions > 0 {
            break evictions;
        }
        assert!(written < MAX_ITEMS, "no eviction after {written} items");
    };
    let keys: Vec<String> = (0..written).map(key).collect();
    let found = get_many(&mut conn, &keys);
    for (seq, k) in keys.iter().enumerate() {
        if let Some(got) = found.get(k) {
            assert_eq!(
                got,
                &val(seq as u64),
                "{k} read back changed: {}",
                escape(got)
            );
        }
    }
    let misses = written - found.len() as u64;
    eprintln!("{written} items written, first evictions {evictions}, misses {misses}");
    assert!(
        misses <= evictions,
        "{misses} keys missing but only {evictions} evicted"
    );
}

const BIG_M: u64 = 256;
const IDLE_CONNECTIONS: usize = 5000;

/// The promise itself: `-m 256 -c 6000` through a fill with small values, overwrites
/// with new lengths, a shift to 4 000-byte values, and 5 000 idle connections opened
/// while the store is full; VmRSS, sampled after every batch and every 500 connections,
/// stays at most 1.05 x 256 MiB + 32 MiB.
#[test]
fn resident_memory_stays_within_the_promise() {
    let Some(_descriptors) = descriptors_for(IDLE_CONNECTIONS) else {
        return;
    };
    let bound_kib = (BIG_M * 1024 * 105 / 100) + 32 * 1024;
    let server = ServerProcess::start(
        ServerKind::under_test(),
        &["-m", "256", "-c", "6000", "-U", "0"],
    );
    let mut conn = server.connect();
    let mut rng = Rng::new(0x0072_7373_5f6d_656d);
    let mut phases: Vec<(&str, u64)> = Vec::new();
    let mut max_kib = 0;
    let sample = |max: &mut u64| {
        let rss = server.rss_kib();
        *max = (*max).max(rss);
        rss
    };
    let key = |seq: u64| format!("r:{seq:010}");

    // Fill: small values, 1.2 x the memory in item bytes.
    let fill_count = BIG_M * MIB * 6 / 5 / item_bytes(12, 60);
    let mut phase_max = 0;
    let mut seq = 0;
    while seq < fill_count {
        let items: Vec<Item> = (seq..(seq + 5000).min(fill_count))
            .map(|s| Item {
                key: key(s),
                exptime: 0,
                value: value(s, rng.range_usize(20, 100)),
            })
            .collect();
        seq += items.len() as u64;
        set_all(&mut conn, &items);
        sample(&mut phase_max);
    }
    phases.push(("fill, 20-100 B values", phase_max));
    max_kib = max_kib.max(phase_max);

    // Overwrite churn: existing keys (the newest half, mostly still there) set again
    // with new lengths, half a memory's worth.
    let mut phase_max = 0;
    let churn = BIG_M * MIB / 2 / item_bytes(12, 100);
    let mut done = 0;
    while done < churn {
        let items: Vec<Item> = (0..5000)
            .map(|_| {
                let s = rng.range(fill_count / 2, fill_count - 1);
                Item {
                    key: key(s),
                    exptime: 0,
                    value: value(s, rng.range_usize(10, 200)),
                }
            })
            .collect();
        done += items.len() as u64;
        set_all(&mut conn, &items);
        sample(&mut phase_max);
    }
    phases.push(("overwrite churn, 10-200 B", phase_max));
    max_kib = max_kib.max(phase_max);

    // Size shift: new items whose values grow from 20 B to 4 000 B, 1.2 x the memory.
    let mut phase_max = 0;
    let mut bytes = 0;
    let mut len = 20.0f64;
    while bytes < BIG_M * MIB * 6 / 5 {
        let n = (2 * MIB / (len as u64 + 60)).clamp(1, 5000);
        let items: Vec<Item> = (0..n)
            .map(|i| Item {
                key: key(seq + i),
                exptime: 0,
                value: value(seq + i, len as usize),
            })
            .collect();
        seq += n;
        bytes += items
            .iter()
            .map(|i| item_bytes(12, i.value.len()))
            .sum::<u64>();
        set_all(&mut conn, &items);
        sample(&mut phase_max);
        len = (len * 1.15).min(4000.0);
    }
    phases.push(("size shift, 20 B to 4 000 B", phase_max));
    max_kib = max_kib.max(phase_max);

    // 5 000 idle connections, each after one `version`, while the store is full.
    let before_kib = sample(&mut max_kib);
    let mut phase_max = 0;
    let mut idle = Vec::with_capacity(IDLE_CONNECTIONS);
    for i in 0..IDLE_CONNECTIONS {
        let mut c = server.connect();
        c.assert_answers(&format!("connection {i}"));
        idle.push(c);
        if (i + 1) % 500 == 0 {
            sample(&mut phase_max);
        }
    }
    let after_kib = sample(&mut phase_max);
    let buffers = conn.stat("conn_buffer_bytes");
    let evictions = conn.stat("evictions");
    phases.push(("5 000 idle connections", phase_max));
    max_kib = max_kib.max(phase_max);
    drop(idle);

    for (name, kib) in &phases {
        eprintln!("{name}: max RSS {} MiB", kib / 1024);
    }
    eprintln!(
        "idle connections: {before_kib} KiB before, {after_kib} KiB after ({} B each); \
         conn_buffer_bytes {buffers}; evictions {evictions}; bound {} MiB",
        (after_kib.saturating_sub(before_kib)) * 1024 / IDLE_CONNECTIONS as u64,
        bound_kib / 1024
    );
    assert!(
        max_kib <= bound_kib,
        "max RSS {} KiB > {} KiB (1.05 x {BIG_M} MiB + 32 MiB): {phases:?}",
        max_kib,
        bound_kib
    );
}
