//! Memory-bound tests: ferrocache started with `-m 64` is written far past its limit with
//! values of mixed sizes (20 B to 500 KB). Every set must succeed (the cache evicts rather
//! than refuse), evictions must show in `stats`, a hit must always return the last value
//! written, and the resident set size (VmRSS, sampled after every batch) must stay under
//! 1.5 x 64 MB + 32 MB.

use crate::common;

use common::{escape, Client, Rng, ServerKind, ServerProcess};

const LIMIT_MB: u64 = 64;
const RSS_BOUND_KIB: u64 = (LIMIT_MB * 3 / 2 + 32) * 1024;
const SERVER_ARGS: &[&str] = &["-m", "64", "-t", "2", "-U", "0"];

/// Sets are sent in pipelined batches of about this many bytes.
const BATCH_BYTES: usize = 2 << 20;
const BATCH_ITEMS: usize = 2000;

fn key(seq: u64) -> String {
    format!("key:{seq}")
}

/// A value that says which write it came from, so a stale or mixed-up hit is caught.
fn value(seq: u64, len: usize) -> Vec<u8> {
    let mut v = format!("{seq}:{len}:").into_bytes();
    v.truncate(len);
    let fill = b'a' + (seq % 26) as u8;
    v.resize(len, fill);
    v
}

/// Writes items and checks replies, RSS and read-backs as it goes.
struct Writer<'a> {
    server: &'a ServerProcess,
    conn: Client,
    next_seq: u64,
    /// (seq, len) of every item written, for read-back checks.
    written: Vec<(u64, usize)>,
    bytes_written: u64,
    max_rss_kib: u64,
    rng: Rng,
}

impl<'a> Writer<'a> {
    fn new(server: &'a ServerProcess, seed: u64) -> Writer<'a> {
        Writer {
            server,
            conn: server.connect(),
            next_seq: 0,
            written: Vec::new(),
            bytes_written: 0,
            max_rss_kib: 0,
            rng: Rng::new(seed),
        }
    }

    /// Writes items with lengths from `len` until `total` value bytes have been written.
    fn write(&mut self, total: u64, mut len: impl FnMut(&mut Rng) -> usize) {
        let goal = self.bytes_written + total;
        while self.bytes_written < goal {
            let mut batch = Vec::new();
            let mut request = Vec::new();
            while request.len() < BATCH_BYTES && batch.len() < BATCH_ITEMS {
                let seq = self.next_seq;
                self.next_seq += 1;
                let n = len(&mut self.rng);
                request.extend_from_slice(format!("set {} 0 0 {n}\r\n", key(seq)).as_bytes());
                request.extend_from_slice(&value(seq, n));
                request.extend_from_slice(b"\r\n");
                batch.push((seq, n));
            }
            self.send_batch(&request, &batch);
            self.bytes_written += batch.iter().map(|&(_, n)| n as u64).sum::<u64>();
            self.written.extend_from_slice(&batch);
            self.sample_rss();
            self.check_recent();
        }
    }

    fn send_batch(&mut self, request: &[u8], batch: &[(u64, usize)]) {
        self.conn.send(request);
        let n = batch.len();
        let reply = self.conn.read_until(common::READ_TIMEOUT, |b| {
            b.iter().filter(|&&c| c == b'\n').count() >= n
        });
        if reply.bytes != b"STORED\r\n".repeat(n) {
            let first_bad = reply
                .bytes
                .split_inclusive(|&c| c == b'\n')
                .position(|line| line != b"STORED\r\n")
                .unwrap_or(0);
            let (seq, len) = batch.get(first_bad).copied().unwrap_or((0, 0));
            panic!(
                "set {} ({len} bytes) after {} MB written failed: {}\n(reply to the batch: {})",
                key(seq),
                self.bytes_written >> 20,
                escape(
                    reply
                        .bytes
                        .split_inclusive(|&c| c == b'\n')
                        .nth(first_bad)
                        .unwrap_or(b"<nothing>")
                ),
                reply.describe()
            );
        }
    }

    fn sample_rss(&mut self) {
        let rss = self.server.rss_kib();
        self.max_rss_kib = self.max_rss_kib.max(rss);
        assert!(
            rss < RSS_BOUND_KIB,
            "RSS {} MiB exceeds {} MiB after {} MB written",
            rss / 1024,
            RSS_BOUND_KIB / 1024,
            self.bytes_written >> 20
        );
    }

    /// The item just written must be there; a few earlier ones may be evicted, but a hit
    /// must be exactly the value written.
    fn check_recent(&mut self) {
        let &(seq, len) = self.written.last().expect("wrote something");
        assert!(
            self.get(seq, len),
            "{} (written last, {len} bytes) is missing",
            key(seq)
        );
        for _ in 0..4 {
            let back = self.rng.below(self.written.len().min(5000) as u64) as usize + 1;
            let (seq, len) = self.written[self.written.len() - back];
            self.get(seq, len);
        }
    }

    /// True on a hit (checked byte for byte), false on a miss.
    fn get(&mut self, seq: u64, len: usize) -> bool {
        let reply = self
            .conn
            .request(format!("get {}\r\n", key(seq)).as_bytes());
        if reply == b"END\r\n" {
            return false;
        }
        let mut expected = format!("VALUE {} 0 {len}\r\n", key(seq)).into_bytes();
        expected.extend_from_slice(&value(seq, len));
        expected.extend_from_slice(b"\r\nEND\r\n");
        assert!(
            reply == expected,
            "get {} returned {} (expected {})",
            key(seq),
            escape(&reply),
            escape(&expected)
        );
        true
    }

    fn stat(&mut self, name: &str) -> u64 {
        let stats = self.conn.stats("");
        stats[name]
            .parse()
            .unwrap_or_else(|_| panic!("stat {name} = {:?}", stats[name]))
    }
}

/// Log-uniform in `lo..=hi`: as many 20-200 B items as 50-500 KB ones, by count.
fn log_uniform(rng: &mut Rng, lo: usize, hi: usize) -> usize {
    let (lo, hi) = (lo as f64, hi as f64);
    let u = rng.below(1 << 30) as f64 / f64::from(1u32 << 30);
    (lo * (hi / lo).powf(u)).round() as usize
}

#[test]
fn mixed_sizes_far_past_the_limit() {
    let server = ServerProcess::start(ServerKind::under_test(), SERVER_ARGS);
    let mut w = Writer::new(&server, 0x006d_656d);
    // Mostly small items by count, most bytes in large ones.
    w.write(320 << 20, |rng| match rng.weighted(&[50, 30, 20]) {
        0 => log_uniform(rng, 20, 200),
        1 => log_uniform(rng, 200, 10_000),
        _ => log_uniform(rng, 10_000, 500_000),
    });
    let evictions = w.stat("evictions");
    let limit = w.stat("limit_maxbytes");
    let bytes = w.stat("bytes");
    let curr_items = w.stat("curr_items");
    eprintln!(
        "wrote {} MB in {} items; evictions {evictions}, curr_items {curr_items}, \
         bytes {bytes}, max RSS {} MiB",
        w.bytes_written >> 20,
        w.next_seq,
        w.max_rss_kib / 1024
    );
    assert!(
        evictions > 0,
        "no evictions after {} MB",
        w.bytes_written >> 20
    );
    assert_eq!(limit, LIMIT_MB << 20);
    assert!(
        bytes <= limit,
        "stats bytes {bytes} > limit_maxbytes {limit}"
    );
    assert!(curr_items > 0);
}

#[test]
fn shifting_sizes_small_large_small() {
    let server = ServerProcess::start(ServerKind::under_test(), SERVER_ARGS);
    let mut w = Writer::new(&server, 0x7368_6966);
    // Small items alone overflow the cache by count, then large ones must reuse that
    // memory, then small ones must reuse the large ones'.
    phase(&mut w, "small", 80 << 20, 20, 100);
    phase(&mut w, "large", 160 << 20, 100_000, 500_000);
    phase(&mut w, "small again", 80 << 20, 20, 100);
    assert!(w.stat("evictions") > 0);
}

/// Writes `total` bytes of values sized `lo..=hi`, then checks that the phase's most recent
/// items (up to 1000 of them, or a quarter of `-m` in value bytes) are all still there.
fn phase(w: &mut Writer, name: &str, total: u64, lo: usize, hi: usize) {
    let first = w.next_seq;
    w.write(total, |rng| rng.range_usize(lo, hi));
    let mut recent_bytes = 0;
    for i in 0..1000.min((w.next_seq - first) as usize) {
        let (seq, len) = w.written[w.written.len() - 1 - i];
        recent_bytes += len as u64;
        if recent_bytes > (LIMIT_MB << 20) / 4 {
            break;
        }
        assert!(
            w.get(seq, len),
            "{name} phase: {} is missing, though only {} KB were written after it",
            key(seq),
            recent_bytes >> 10
        );
    }
    eprintln!(
        "{name} phase: {} items, evictions so far {}, max RSS {} MiB",
        w.next_seq - first,
        w.stat("evictions"),
        w.max_rss_kib / 1024
    );
}

/// Sizes of the mappings of process `pid` that were advised `MADV_HUGEPAGE` (`hg` in
/// their `VmFlags` in /proc/PID/smaps), in KiB.
fn huge_page_advised_kib(pid: u32) -> Vec<u64> {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).expect("read smaps");
    let mut sizes = Vec::new();
    let mut size = 0;
    for line in smaps.lines() {
        if let Some(rest) = line.strip_prefix("Size:") {
            size = rest
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .unwrap_or(0);
        } else if let Some(flags) = line.strip_prefix("VmFlags:") {
            if flags.split_whitespace().any(|f| f == "hg") {
                sizes.push(size);
            }
        }
    }
    sizes
}

/// `-L`: item memory is one mapping advised for transparent huge pages, and the cache
/// behaves as without it: evicts rather than refuses, returns the last value written,
/// and stays inside the same resident bound. On a kernel without transparent huge
/// pages the server says so and runs on normal pages, which `stats settings` shows.
#[test]
fn large_pages_hold_item_memory_within_the_same_bound() {
    let args: Vec<&str> = SERVER_ARGS.iter().copied().chain(["-L"]).collect();
    let server = ServerProcess::start(ServerKind::under_test(), &args);
    let thp = std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists();
    // memcached (FERRO_TEST_SERVER=memcached) has no such setting; its -L maps too.
    let ours = matches!(server.kind, ServerKind::Ferrocache);
    if ours {
        let expected = if thp { "yes" } else { "no" };
        assert_eq!(server.stats("settings")["large_pages"], expected);
    }
    if thp {
        let advised = huge_page_advised_kib(server.id());
        assert!(
            advised.iter().any(|&kib| kib >= LIMIT_MB * 1024),
            "no MADV_HUGEPAGE mapping of at least -m: {advised:?}"
        );
    }
    let mut w = Writer::new(&server, 0x6c61_7267);
    w.write(160 << 20, |rng| match rng.weighted(&[50, 30, 20]) {
        0 => log_uniform(rng, 20, 200),
        1 => log_uniform(rng, 200, 10_000),
        _ => log_uniform(rng, 10_000, 500_000),
    });
    assert!(w.stat("evictions") > 0);
    assert!(w.stat("bytes") <= LIMIT_MB << 20);
    // And without -L, no such mapping.
    let plain = ServerProcess::start(ServerKind::under_test(), SERVER_ARGS);
    if ours {
        assert_eq!(plain.stats("settings")["large_pages"], "no");
    }
    assert!(huge_page_advised_kib(plain.id())
        .iter()
        .all(|&kib| kib < LIMIT_MB * 1024));
}

/// `cache_memlimit` at run time: after a lower limit, writing on brings resident memory
/// down to it (segments are emptied and their pages given back), and the newest items
/// stay; after a higher one, the cache grows past the old limit. memcached gives no
/// memory back, so this is ferrocache's alone.
#[test]
fn a_lower_memory_limit_gives_memory_back_as_items_are_written() {
    let server = ServerProcess::start(ServerKind::Ferrocache, SERVER_ARGS);
    let mut w = Writer::new(&server, 0x6d65_6d6c);
    let fill = |w: &mut Writer, total: u64| w.write(total, |rng| rng.range_usize(1000, 20_000));
    fill(&mut w, 128 << 20);
    let full_kib = server.rss_kib();
    assert!(
        full_kib > 60 * 1024,
        "a full 64 MB cache is resident: {full_kib} KiB"
    );
    assert_eq!(w.conn.request(b"cache_memlimit 16\r\n"), b"OK\r\n");
    fill(&mut w, 64 << 20);
    let low_kib = server.rss_kib();
    eprintln!("resident: {full_kib} KiB at -m 64, {low_kib} KiB after cache_memlimit 16");
    assert!(
        low_kib < 40 * 1024,
        "after cache_memlimit 16, {low_kib} KiB resident (was {full_kib})"
    );
    assert_eq!(w.stat("limit_maxbytes"), 16 << 20);
    assert!(
        w.stat("bytes") <= 16 << 20,
        "{} bytes stored",
        w.stat("bytes")
    );
    // The newest items are all there (check_recent ran after every batch as well).
    let newest: Vec<(u64, usize)> = w.written.iter().rev().take(200).copied().collect();
    for (seq, len) in newest {
        assert!(w.get(seq, len), "{} missing", key(seq));
    }
    // Raised again: the cache holds more than it did at first.
    assert_eq!(w.conn.request(b"cache_memlimit 96\r\n"), b"OK\r\n");
    fill(&mut w, 160 << 20);
    assert!(
        w.stat("bytes") > 64 << 20,
        "{} bytes stored under a 96 MB limit",
        w.stat("bytes")
    );
}
