//! The flash tier (memcached's extstore, `-o ext_path=FILE:SIZE`): values of items that
//! leave RAM are written to the file and read back from it, byte for byte, by every
//! retrieval command; deletes, overwrites, expiry and flush free their space; compaction
//! moves live records while they are being read; a damaged, shrunk or deleted file
//! gives misses, never wrong bytes; start-up refuses a file it cannot use; RAM stays
//! bounded by `-m`; and the `extstore` command and `stats extstore` answer as
//! memcached 1.6.18 does.
//!
//! Every server is started through `common::ServerProcess` and killed by PID when its
//! test ends; flash files live in a directory the test creates and removes. Nothing is
//! timed: every wait polls `stats` (or a reply) up to a generous deadline, since the
//! machine may be slow and busy.

use crate::common;
mod support;

use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::{escape, running_as_root, Rng, ServerKind, ServerProcess};
use support::*;

/// Length of most values here: well over `ext_item_size` (512), so they go to flash.
const LEN: usize = 4096;
/// 6 000 values of 4 KB: 24 MB, three times what `-m 8` holds, so most go to flash.
const KEYS: u64 = 6000;
const WAIT: Duration = Duration::from_secs(60);
/// A number of 20 digits: numeric, and long enough for flash with `ext_item_size=16`.
const COUNTER: &str = "00000000000000000042";

fn len4k(_: u64) -> usize {
    LEN
}

/// A server with `-m 8`, a 64 MiB file of 2 MiB pages (no page is ever evicted for
/// room at these sizes), with `KEYS` 4 KB values written: the early keys are on flash.
fn filled(dir: &TempDir, extra: &str) -> ServerProcess {
    let server = start(8, &ext_option(&dir.file("flash"), 64, 2, 1, extra));
    let mut conn = server.connect();
    fill(&mut conn, 0..KEYS, 0, len4k);
    let stats = wait_for(&mut conn, "values written to flash", WAIT, |s| {
        num(s, "extstore_objects_written") > 0
    });
    assert_eq!(
        num(&stats, "extstore_page_evictions"),
        0,
        "the file has room"
    );
    server
}

/// Set, then read every key back with `get`, `gets`, `mg` and binary GET: the same
/// bytes, flags and CAS whether the value is in RAM or on flash.
#[test]
fn values_on_flash_read_back_byte_exact_by_every_command() {
    let dir = TempDir::new("roundtrip");
    let server = start(8, &ext_option(&dir.file("flash"), 64, 2, 1, ""));
    let mut conn = server.connect();
    // `ms ... c` answers with the CAS the item was stored with, without reading it (a
    // read would give it a second chance in RAM, see `items_read_once_go_to_flash_too`).
    let mut cas = HashMap::new();
    let all: Vec<u64> = (0..KEYS).collect();
    for batch in all.chunks(BATCH) {
        let mut request = Vec::new();
        for &i in batch {
            request.extend_from_slice(
                format!("ms {} {LEN} T0 F{} c\r\n", key(i), flags(i)).as_bytes(),
            );
            request.extend_from_slice(&value(i, LEN));
            request.extend_from_slice(b"\r\n");
        }
        let reply = String::from_utf8(conn.request(&request)).expect("ascii replies");
        let lines: Vec<&str> = reply.lines().collect();
        assert_eq!(lines.len(), batch.len(), "{reply}");
        for (line, &i) in lines.iter().zip(batch) {
            let c = line
                .strip_prefix("HD c")
                .unwrap_or_else(|| panic!("ms: {line}"));
            cas.insert(i, c.parse::<u64>().expect("cas"));
        }
    }
    let stats = conn.stats("");
    assert!(
        num(&stats, "extstore_objects_written") > KEYS / 2,
        "most values on flash: {stats:?}"
    );
    let before = num(&stats, "get_extstore");

    for chunk in all.chunks(50) {
        let mut request = Vec::new();
        let mut expected = Vec::new();
        for &i in chunk {
            let (k, f, c) = (key(i), flags(i), cas[&i]);
            request
                .extend_from_slice(format!("get {k}\r\ngets {k}\r\nmg {k} v f c s\r\n").as_bytes());
            expected.extend_from_slice(&value_block(i, LEN));
            expected.extend_from_slice(b"END\r\n");
            expected.extend_from_slice(format!("VALUE {k} {f} {LEN} {c}\r\n").as_bytes());
            expected.extend_from_slice(&value(i, LEN));
            expected.extend_from_slice(b"\r\nEND\r\n");
            expected.extend_from_slice(format!("VA {LEN} f{f} c{c} s{LEN}\r\n").as_bytes());
            expected.extend_from_slice(&value(i, LEN));
            expected.extend_from_slice(b"\r\n");
        }
        conn.send(&request);
        read_exact_reply(
            &mut conn,
            &expected,
            &format!("reads of {}..", key(chunk[0])),
        );
    }
    // The binary protocol, for every seventh key (it opens a connection per GET).
    for i in (0..KEYS).step_by(7) {
        let (status, f, c, data) = binary_get(server.port, &key(i));
        assert_eq!(status, 0, "binary GET {}", key(i));
        assert_eq!(
            (f, c),
            (flags(i), cas[&i]),
            "binary GET {} flags and CAS",
            key(i)
        );
        assert!(
            data == value(i, LEN),
            "binary GET {}: {}",
            key(i),
            escape(&data)
        );
    }
    let stats = conn.stats("");
    let flash_reads = num(&stats, "get_extstore") - before;
    assert!(
        flash_reads >= KEYS,
        "reads served from flash: {flash_reads}"
    );
    assert_eq!(num(&stats, "miss_from_extstore"), 0);
    assert_eq!(num(&stats, "badcrc_from_extstore"), 0);
}

/// Items read once since they were written must go to flash like the others when
/// their segment is evicted, while the file has free pages: nothing is evicted outright.
/// (memcached 1.6.18, given the same sets and gets a little slower than its background
/// writer, keeps all 6 000; ferrocache's walk is synchronous, so pace does not matter.)
/// Read items past the walk's second-chance budget once were evicted outright.
#[test]
fn items_read_once_go_to_flash_too() {
    let dir = TempDir::new("read-once");
    let server = start(8, &ext_option(&dir.file("flash"), 64, 2, 1, ""));
    let mut conn = server.connect();
    let all: Vec<u64> = (0..KEYS).collect();
    for batch in all.chunks(BATCH) {
        // Each set is read back at once, as a client that checks its writes does.
        let mut request = Vec::new();
        let mut expected = Vec::new();
        for &i in batch {
            set_bytes(&mut request, &key(i), flags(i), 0, &value(i, LEN));
            request.extend_from_slice(format!("get {}\r\n", key(i)).as_bytes());
            expected.extend_from_slice(b"STORED\r\n");
            expected.extend_from_slice(&value_block(i, LEN));
            expected.extend_from_slice(b"END\r\n");
        }
        conn.send(&request);
        read_exact_reply(&mut conn, &expected, "set and get");
    }
    let stats = conn.stats("");
    let evictions = num(&stats, "evictions");
    let (hits, wrong) = read_all(&mut conn, &all, len4k);
    assert_eq!(wrong, 0);
    assert_eq!(
        (hits, evictions),
        (all.len(), 0),
        "with {} of {} flash pages free, {} items were evicted from RAM instead of going to flash",
        num(&stats, "extstore_pages_free"),
        num(&stats, "extstore_pages_free") + num(&stats, "extstore_pages_used"),
        evictions
    );
}

/// Pipelined `get`s and multi-key `get`s mixing flash hits, RAM hits and misses answer
/// in request order, byte for byte.
#[test]
fn pipelines_and_multigets_mixing_flash_and_ram_keep_order() {
    let dir = TempDir::new("pipeline");
    // No recaching: a flash hit stays a flash hit, so the counts below are exact.
    let server = filled(&dir, ",ext_recache_rate=0");
    let mut conn = server.connect();
    // Sort sample keys into flash and RAM by what serving them costs in `get_extstore`.
    let (mut on_flash, mut in_ram) = (Vec::new(), Vec::new());
    for i in (0..KEYS).step_by(97).chain(KEYS - 40..KEYS) {
        if served_from_flash(&mut conn, i, LEN) {
            on_flash.push(i);
        } else {
            in_ram.push(i);
        }
    }
    assert!(
        on_flash.len() >= 20 && in_ram.len() >= 20,
        "flash {on_flash:?} ram {in_ram:?}"
    );

    let mut rng = Rng::new(0x00e5_750e);
    let missing = KEYS + 1_000_000;
    let mut order: Vec<u64> = on_flash.iter().chain(&in_ram).copied().collect();
    order.extend([missing, missing + 1]);
    for round in 0..3 {
        // Shuffle (Fisher-Yates), so flash and RAM keys alternate unevenly.
        for j in (1..order.len()).rev() {
            order.swap(j, rng.below(j as u64 + 1) as usize);
        }
        let before = conn.stat("get_extstore");
        // One write of many `get`s.
        let mut request = Vec::new();
        let mut expected = Vec::new();
        for &i in &order {
            request.extend_from_slice(format!("get {}\r\n", key(i)).as_bytes());
            if i < KEYS {
                expected.extend_from_slice(&value_block(i, LEN));
            }
            expected.extend_from_slice(b"END\r\n");
        }
        conn.send(&request);
        read_exact_reply(
            &mut conn,
            &expected,
            &format!("pipelined gets, round {round}"),
        );
        // Multi-key gets of up to 25 keys, interleaved the same way.
        for chunk in order.chunks(25) {
            let names: Vec<String> = chunk.iter().map(|&i| key(i)).collect();
            conn.send(format!("get {}\r\n", names.join(" ")).as_bytes());
            let mut expected = Vec::new();
            for &i in chunk.iter().filter(|&&i| i < KEYS) {
                expected.extend_from_slice(&value_block(i, LEN));
            }
            expected.extend_from_slice(b"END\r\n");
            read_exact_reply(&mut conn, &expected, &format!("get {}", names.join(" ")));
        }
        let flash_reads = conn.stat("get_extstore") - before;
        assert_eq!(
            flash_reads,
            2 * on_flash.len() as u64,
            "each flash key read twice"
        );
    }
}

/// Deletes, overwrites, expiry and `flush_all` of flash items, touch and gat keep them
/// readable, and incr/decr/append/prepend refuse them as memcached does.
#[test]
fn deletes_overwrites_expiry_flush_touch_and_refusals_on_flash_items() {
    let dir = TempDir::new("lifecycle");
    // ext_item_size 16: the 20-digit counter below goes to flash too.
    let server = start(
        8,
        &ext_option(&dir.file("flash"), 64, 2, 1, ",ext_item_size=16"),
    );
    let mut conn = server.connect();
    // The clock stands still until the expiry check moves it past the 3 s keys' TTL:
    // however slowly the steps before run, those keys live until then.
    assert_eq!(conn.request_str("debugtime p\r\n"), "OK\r\n");
    let counter = COUNTER;
    let text = "t".repeat(600);
    let setup = format!("set num 0 0 20\r\n{counter}\r\nset text 0 0 600\r\n{text}\r\n");
    assert_eq!(conn.request_str(&setup), "STORED\r\nSTORED\r\n");
    // Short-lived values, written first so they are the first to go to flash.
    fill(&mut conn, 0..50, 3, len4k);
    fill(&mut conn, 50..KEYS, 0, len4k);

    // The counter and the text are on flash: reading them costs a flash read.
    for (k, v) in [("num", counter), ("text", text.as_str())] {
        let before = conn.stat("get_extstore");
        assert_eq!(
            conn.request_str(&format!("get {k}\r\n")),
            format!("VALUE {k} 0 {}\r\n{v}\r\nEND\r\n", v.len())
        );
        assert!(conn.stat("get_extstore") > before, "{k} was not on flash");
    }
    let refusals =
        "incr num 1\r\ndecr num 1\r\nappend text 0 0 1\r\nx\r\nprepend text 0 0 1\r\nx\r\n";
    assert_eq!(
        conn.request_str(refusals),
        "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n\
         CLIENT_ERROR cannot increment or decrement non-numeric value\r\n\
         NOT_STORED\r\nNOT_STORED\r\n"
    );
    assert_eq!(
        conn.request_str("get num\r\n"),
        format!("VALUE num 0 20\r\n{counter}\r\nEND\r\n")
    );
    assert_eq!(
        conn.request_str("get text\r\n"),
        format!("VALUE text 0 600\r\n{text}\r\nEND\r\n")
    );

    // touch and gat of flash items: the value stays readable, exact.
    let i = 100;
    assert!(served_from_flash(&mut conn, i, LEN));
    assert_eq!(
        conn.request_str(&format!("touch {} 0\r\n", key(i))),
        "TOUCHED\r\n"
    );
    assert!(get_checked(&mut conn, i, LEN));
    let mut want = value_block(101, LEN);
    want.extend_from_slice(b"END\r\n");
    let before = conn.stat("get_extstore");
    assert!(
        conn.request(format!("gat 0 {}\r\n", key(101)).as_bytes()) == want,
        "gat"
    );
    assert!(
        conn.stat("get_extstore") > before,
        "gat read the value from flash"
    );
    assert!(get_checked(&mut conn, 101, LEN));

    // Deletes release their flash space.
    let before = conn.stats("");
    let doomed: Vec<u64> = (200..1200).collect();
    let request: String = doomed
        .iter()
        .map(|&i| format!("delete {}\r\n", key(i)))
        .collect();
    assert_eq!(
        conn.request_str(&request),
        "DELETED\r\n".repeat(doomed.len())
    );
    let after = conn.stats("");
    for stat in ["extstore_objects_used", "extstore_bytes_used"] {
        assert!(
            num(&after, stat) < num(&before, stat),
            "{stat}: {} before 1000 deletes, {} after",
            num(&before, stat),
            num(&after, stat)
        );
    }
    let (hits, _) = read_all(&mut conn, &doomed, len4k);
    assert_eq!(hits, 0, "deleted keys must miss");

    // Overwrites: the new value is read, the old record's space is released.
    let used = num(&after, "extstore_objects_used");
    let mut request = Vec::new();
    for i in 1200..1300 {
        set_bytes(
            &mut request,
            &key(i),
            7,
            0,
            format!("new value of {i}").as_bytes(),
        );
    }
    assert_eq!(conn.request(&request), b"STORED\r\n".repeat(100));
    for i in 1200..1300 {
        assert_eq!(
            conn.request_str(&format!("get {}\r\n", key(i))),
            format!(
                "VALUE {} 7 {}\r\nnew value of {i}\r\nEND\r\n",
                key(i),
                format!("new value of {i}").len()
            )
        );
    }
    assert!(
        conn.stat("extstore_objects_used") < used,
        "overwrites release flash space"
    );

    // Expiry: the 3-second keys hit until the clock passes their time, then miss.
    let (hits, _) = read_all(&mut conn, &(0..50).collect::<Vec<_>>(), len4k);
    assert_eq!(hits, 50, "the 3 s keys, the clock stopped");
    assert_eq!(conn.request_str("debugtime 3\r\n"), "OK\r\n");
    assert!(none_hit(server.port, 0..50), "the 3 s keys at their TTL");
    let (hits, _) = read_all(&mut conn, &(0..50).collect::<Vec<_>>(), len4k);
    assert_eq!(hits, 0);

    // flush_all: every flash item misses afterwards (and every RAM one).
    assert_eq!(conn.request_str("flush_all\r\n"), "OK\r\n");
    let (hits, _) = read_all(&mut conn, &(0..KEYS).collect::<Vec<_>>(), len4k);
    assert_eq!(hits, 0, "hits after flush_all");
    assert_eq!(conn.request_str("get num text\r\n"), "END\r\n");
}

/// True once none of `keys` hits (on a connection of its own).
fn none_hit(port: u16, keys: std::ops::Range<u64>) -> bool {
    let mut c = common::Client::connect(port);
    let (hits, wrong) = read_all(&mut c, &keys.collect::<Vec<_>>(), len4k);
    assert_eq!(wrong, 0, "wrong bytes while waiting for expiry");
    hits == 0
}

/// Compaction (small pages, most keys deleted) moves the survivors' records while
/// another connection keeps reading them: no read ever returns wrong bytes, and every
/// survivor reads back after.
#[test]
fn compaction_while_reading_never_returns_wrong_bytes() {
    let dir = TempDir::new("compact");
    // 16 pages of 1 MiB, compacted while 12 or fewer are free: once 9 keys in 10 are
    // deleted, page after page qualifies (live bytes under 0.8 MiB x the used share),
    // so compaction goes on for a while under the reader.
    let server = start(
        8,
        &ext_option(&dir.file("flash"), 16, 1, 1, ",ext_compact_under=12"),
    );
    let mut conn = server.connect();
    let written = fill_until(&mut conn, 0, 20_000, len4k, "flash nearly full", |s| {
        num(s, "extstore_pages_free") <= 4
    });
    let stats = conn.stats("");
    assert_eq!(
        num(&stats, "extstore_page_evictions"),
        0,
        "stopped before any page eviction"
    );
    let all: Vec<u64> = (0..written).collect();
    let (hits, wrong) = read_all(&mut conn, &all, len4k);
    assert_eq!(
        (hits, wrong),
        (all.len(), 0),
        "everything written reads back"
    );

    let survivors: Arc<Vec<u64>> = Arc::new(all.iter().copied().filter(|i| i % 10 == 0).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let passes = Arc::new(AtomicU64::new(0));
    let reader = {
        let (survivors, stop, passes, port) =
            (survivors.clone(), stop.clone(), passes.clone(), server.port);
        thread::spawn(move || {
            let mut c = common::Client::connect(port);
            let (mut wrong, mut misses, mut reads) = (0, 0, 0);
            while !stop.load(Ordering::Relaxed) {
                // Single gets and multi-gets, alternately.
                for (n, chunk) in survivors.chunks(16).enumerate() {
                    if n % 2 == 0 {
                        for &i in chunk {
                            reads += 1;
                            if !get_checked(&mut c, i, LEN) {
                                misses += 1;
                            }
                        }
                    } else {
                        let (h, w) = read_all(&mut c, chunk, len4k);
                        reads += chunk.len();
                        misses += chunk.len() - h;
                        wrong += w;
                    }
                }
                passes.fetch_add(1, Ordering::Relaxed);
            }
            (wrong, misses, reads)
        })
    };
    let doomed: Vec<u64> = all.iter().copied().filter(|i| i % 10 != 0).collect();
    for chunk in doomed.chunks(200) {
        let request: String = chunk
            .iter()
            .map(|&i| format!("delete {}\r\n", key(i)))
            .collect();
        assert_eq!(
            conn.request_str(&request),
            "DELETED\r\n".repeat(chunk.len())
        );
    }
    // Compaction is done when more than compact_under pages are free again.
    let stats = wait_for(&mut conn, "compaction reclaims pages", WAIT, |s| {
        num(s, "extstore_pages_free") > 12
    });
    assert!(
        num(&stats, "extstore_page_reclaims") > 0,
        "pages were reclaimed"
    );
    assert!(
        num(&stats, "extstore_compact_rescues") > 0,
        "survivors were moved"
    );
    // Two more full passes of the reader after compaction ended.
    let seen = passes.load(Ordering::Relaxed);
    wait_for(&mut conn, "the reader's passes", WAIT, |_| {
        passes.load(Ordering::Relaxed) >= seen + 2
    });
    stop.store(true, Ordering::Relaxed);
    let (wrong, misses, reads) = reader.join().expect("reader thread");
    eprintln!(
        "compaction: {reads} reads during, {misses} misses, reclaims {}, rescues {}, lost {}",
        num(&stats, "extstore_page_reclaims"),
        num(&stats, "extstore_compact_rescues"),
        num(&stats, "extstore_compact_lost")
    );
    assert_eq!(wrong, 0, "reads during compaction returned wrong bytes");
    let (hits, wrong) = read_all(&mut conn, &survivors, len4k);
    assert_eq!(
        (hits, wrong),
        (survivors.len(), 0),
        "survivors after compaction"
    );
    assert_eq!(conn.stat("badcrc_from_extstore"), 0);
}

/// Bytes flipped in the file under the server: the records there are misses counted
/// in `badcrc_from_extstore`, never wrong bytes; the rest still read.
#[test]
fn flipped_bytes_on_flash_are_misses_never_wrong_values() {
    let dir = TempDir::new("corrupt");
    let path = dir.file("flash");
    let server = start(8, &ext_option(&path, 32, 1, 1, ""));
    let mut conn = server.connect();
    // Six pages used: pages 0 and 1 (the first opened) were written out long ago; only
    // the open page has bytes still in the write buffer.
    let written = fill_until(&mut conn, 0, 20_000, len4k, "six flash pages used", |s| {
        num(s, "extstore_pages_used") >= 6
    });
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .expect("open flash file");
    // One byte in every 1 KiB from 256 KiB to 1.75 MiB: every record there is hit.
    for offset in (256 << 10..1792u64 << 10).step_by(1024) {
        let mut b = [0u8];
        file.read_exact_at(&mut b, offset).unwrap();
        file.write_all_at(&[b[0] ^ 0x5a], offset).unwrap();
    }
    file.sync_all().unwrap();
    let all: Vec<u64> = (0..written).collect();
    let (hits, wrong) = read_all(&mut conn, &all, len4k);
    let stats = conn.stats("");
    eprintln!(
        "corruption: {hits} of {} hit, badcrc {}",
        all.len(),
        num(&stats, "badcrc_from_extstore")
    );
    assert_eq!(wrong, 0, "wrong bytes returned from a damaged file");
    assert!(
        num(&stats, "badcrc_from_extstore") > 0,
        "damaged records were detected"
    );
    assert!(hits < all.len(), "damaged records miss");
    assert!(hits > all.len() / 2, "undamaged records still read");
    // Asked again, the damaged ones still miss (their stubs are gone) and the rest hit.
    assert_eq!(read_all(&mut conn, &all, len4k), (hits, 0));
    conn.assert_answers("after corruption");
}

/// The file truncated to nothing, then deleted, while the server runs: reads hit or
/// miss, never wrong bytes, and the server keeps answering.
#[test]
fn a_file_truncated_or_deleted_underneath_gives_misses_and_the_server_stays_up() {
    let dir = TempDir::new("shrink");
    let path = dir.file("flash");
    let server = start(8, &ext_option(&path, 32, 1, 1, ""));
    let mut conn = server.connect();
    fill(&mut conn, 0..4000, 0, len4k);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(0)
        .unwrap();
    let all: Vec<u64> = (0..4000).collect();
    let (hits, wrong) = read_all(&mut conn, &all, len4k);
    assert_eq!(wrong, 0);
    assert!(hits < all.len(), "values on the truncated file miss");
    let stats = conn.stats("");
    assert!(
        num(&stats, "miss_from_extstore") > 0 && num(&stats, "get_misses") > 0,
        "{stats:?}"
    );
    conn.assert_answers("after the file was truncated");

    // More values go to the (now sparse) file, then the file is unlinked: the server
    // keeps its descriptor, so reads hit or miss, never anything else.
    fill(&mut conn, 4000..8000, 0, len4k);
    std::fs::remove_file(&path).unwrap();
    fill(&mut conn, 8000..10_000, 0, len4k);
    let all: Vec<u64> = (0..10_000).collect();
    let (hits, wrong) = read_all(&mut conn, &all, len4k);
    assert_eq!(wrong, 0);
    eprintln!("after unlink: {hits} of {} hit", all.len());
    assert!(get_checked(&mut conn, 9_999, LEN), "the last value written");
    conn.assert_answers("after the file was deleted");
    let mut other = server.connect();
    other.assert_answers("a new connection");
}

/// Start-up refuses a file it cannot open or lock: non-zero exit, stderr naming it.
#[test]
fn unusable_flash_files_stop_start_up_with_a_message_naming_them() {
    let dir = TempDir::new("startup");
    let refuse = |path: &std::path::Path, why: &str| {
        let port = common::probably_free_port().to_string();
        let ext = ext_option(path, 64, 2, 1, "");
        let args: Vec<String> = [
            "-p",
            &port,
            "-l",
            "127.0.0.1",
            "-U",
            "0",
            "-m",
            "8",
            "-o",
            &ext,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let out = common::run_to_exit(ServerKind::Ferrocache, &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{why}: started ({:?}); stderr {stderr}",
            out.status
        );
        assert!(
            out.status.code().is_some(),
            "{why}: killed, not exited: {:?}",
            out.status
        );
        assert!(
            stderr.contains(&path.display().to_string()),
            "{why}: stderr {stderr:?}"
        );
    };
    refuse(
        &dir.file("no-such-dir").join("flash"),
        "a missing directory",
    );

    let ro = dir.file("read-only");
    std::fs::create_dir(&ro).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    if running_as_root() {
        eprintln!("skipped the read-only directory: root writes there anyway");
    } else {
        refuse(&ro.join("flash"), "a read-only directory");
    }

    let shared = dir.file("shared");
    let first = start(8, &ext_option(&shared, 64, 2, 1, ""));
    refuse(&shared, "a file another server holds");
    first.connect().assert_answers("the first server");
}

/// `-m 16` with a 256 MiB file and 200 MB written: the resident set stays within the
/// memory promise (1.05 × m + 32 MiB), the write buffer, and memory_bound.rs's margin
/// (its 1.5 × m against the promise's 1.05 × m: 0.45 × m).
#[test]
fn resident_memory_stays_bounded_with_a_large_flash_file() {
    const M: u64 = 16;
    const WBUF: u64 = 4;
    // 1.05 × M + 0.45 × M = 1.5 × M, as memory_bound.rs allows, in KiB.
    let bound_kib = M * 1024 * 150 / 100 + (32 + WBUF) * 1024;
    let dir = TempDir::new("rss");
    let server = start(M, &ext_option(&dir.file("flash"), 256, 8, WBUF, ""));
    let mut conn = server.connect();
    let mut rng = Rng::new(0x005e_ed0f_f1a5);
    let lens: Vec<usize> = (0..60_000)
        .map(|_| rng.range_usize(1024, 7 * 1024))
        .collect();
    let len = |i: u64| lens[i as usize];
    let (mut next, mut total, mut max_rss) = (0u64, 0u64, 0u64);
    while total < 200 * MIB {
        let end = next + BATCH as u64 * 2;
        fill(&mut conn, next..end, 0, len);
        total += (next..end).map(|i| len(i) as u64).sum::<u64>();
        next = end;
        let rss = server.rss_kib();
        max_rss = max_rss.max(rss);
        assert!(
            rss < bound_kib,
            "RSS {rss} KiB over {bound_kib} KiB after {} MB",
            total >> 20
        );
        assert!(
            get_checked(&mut conn, next - 1, len(next - 1)),
            "the last value written"
        );
    }
    let stats = conn.stats("");
    eprintln!(
        "rss: max {} MiB (bound {} MiB), {} objects on flash",
        max_rss / 1024,
        bound_kib / 1024,
        num(&stats, "extstore_objects_used")
    );
    assert!(num(&stats, "extstore_objects_written") > 10_000);
    // A sample of everything written: hits are exact (early ones may be gone).
    let sample: Vec<u64> = (0..next).step_by(13).collect();
    let (hits, wrong) = read_all(&mut conn, &sample, len);
    assert_eq!(wrong, 0);
    assert!(hits > sample.len() / 2, "{hits} of {} hit", sample.len());
}

/// The `extstore` command, `stats settings` and `stats extstore`, and the refusals of
/// incr and append on flash items; compared byte for byte with memcached when it is
/// installed.
#[test]
fn extstore_command_and_stats_match_memcached() {
    let dir = TempDir::new("command");
    // memcached wants pages and buffers in multiples of 2 MiB: 4 pages of 2 MiB.
    let ours = start(8, &ext_option(&dir.file("ours"), 8, 2, 2, ""));
    let script = "extstore item_size 1024\r\nextstore bogus 1\r\nextstore\r\n";
    let reply = ours.connect().request_str(script);
    assert_eq!(reply, "OK\r\nERROR\r\nERROR\r\n");
    let settings = ours.stats("settings");
    assert_eq!(
        settings.get("ext_item_size").map(String::as_str),
        Some("1024")
    );
    let pages = ours.connect().request_str("stats extstore\r\n");
    let mut want = String::new();
    for p in 0..4 {
        want += &format!("STAT {p}:version 0\r\nSTAT {p}:bytes 0\r\nSTAT {p}:bucket 0\r\nSTAT {p}:free_bucket 0\r\n");
    }
    assert_eq!(pages, want + "END\r\n");

    // The refusals, on a server with the counter and the text pushed to flash.
    let refusals = |kind: ServerKind, file: &str| -> String {
        let server = start_kind(
            kind,
            8,
            &ext_option(&dir.file(file), 64, 2, 2, ",ext_item_size=16"),
        );
        let mut conn = server.connect();
        let set = format!(
            "set num 0 0 20\r\n{COUNTER}\r\nset text 0 0 600\r\n{}\r\n",
            "t".repeat(600)
        );
        assert_eq!(conn.request_str(&set), "STORED\r\nSTORED\r\n");
        fill(&mut conn, 0..KEYS, 0, len4k);
        // memcached writes to flash in the background: wait until reading each costs a
        // flash read (for ferrocache it already does).
        for k in ["num", "text"] {
            wait_for(
                &mut conn,
                &format!("{} has {k} on flash", kind.name()),
                WAIT,
                |s| {
                    let before = num(s, "get_extstore");
                    let mut c = server.connect();
                    c.request_str(&format!("get {k}\r\n"));
                    c.stat("get_extstore") > before
                },
            );
        }
        conn.request_str("incr num 1\r\ndecr num 1\r\nappend text 0 0 1\r\nx\r\nprepend text 0 0 1\r\nx\r\nget num\r\n")
    };
    let ferro = refusals(ServerKind::Ferrocache, "ours-refusals");
    assert_eq!(
        ferro,
        "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n".repeat(2)
            + &format!("NOT_STORED\r\nNOT_STORED\r\nVALUE num 0 20\r\n{COUNTER}\r\nEND\r\n")
    );

    if !std::path::Path::new("/usr/bin/memcached").exists()
        && std::env::var("FERRO_MEMCACHED").is_err()
    {
        eprintln!("skipped the comparison: memcached is not installed");
        return;
    }
    let theirs = start_kind(
        ServerKind::Memcached,
        8,
        &ext_option(&dir.file("theirs"), 8, 2, 2, ""),
    );
    assert_eq!(
        theirs.connect().request_str(script),
        reply,
        "extstore commands"
    );
    assert_eq!(
        theirs.connect().request_str("stats extstore\r\n"),
        pages,
        "stats extstore"
    );
    let ext_lines = |s: &ServerProcess| -> Vec<String> {
        let text = s.connect().request_str("stats settings\r\n");
        text.lines()
            .filter(|l| l.starts_with("STAT ext_"))
            .map(String::from)
            .collect()
    };
    assert_eq!(
        ext_lines(&ours),
        ext_lines(&theirs),
        "stats settings, ext_ lines"
    );
    assert_eq!(
        refusals(ServerKind::Memcached, "theirs-refusals"),
        ferro,
        "refusals on flash"
    );
}
