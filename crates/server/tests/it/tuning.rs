//! memcached's run-time tuning commands (`lru_crawler enable|disable|sleep|tocrawl|crawl`,
//! `slabs reassign|automove`, `lru tune|mode|temp_ttl`): the same replies as memcached
//! 1.6.18, byte for byte, the same settings in `stats settings` afterwards, and a crawl
//! that really reclaims expired items.

use crate::common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::{escape, ServerKind, ServerProcess};

const ARGS: &[&str] = &["-t", "1", "-U", "0"];

/// Commands whose replies depend only on the commands before them. A crawl is followed
/// by a wait for it to end (see `run_script`), since a second crawl while one runs is
/// `BUSY` on both servers.
const SCRIPT: &[&str] = &[
    "lru_crawler crawl all",
    "lru_crawler crawl 1,2",
    "lru_crawler crawl 0",
    "lru_crawler crawl 64",
    "lru_crawler crawl 63",
    "lru_crawler crawl x",
    "lru_crawler crawl 1,64",
    "lru_crawler crawl ,1",
    "lru_crawler crawl hash",
    "lru_crawler crawl",
    "lru_crawler crawl 1 2",
    "lru_crawler tocrawl -1",
    "lru_crawler tocrawl 5x",
    "lru_crawler tocrawl 4294967296",
    "lru_crawler tocrawl 25",
    "lru_crawler tocrawl",
    "lru_crawler sleep 1000001",
    "lru_crawler sleep -1",
    "lru_crawler sleep 250",
    "lru_crawler sleep",
    "lru_crawler foo",
    "lru_crawler",
    "lru_crawler enable extra",
    "lru_crawler enable",
    "lru_crawler disable",
    "lru_crawler disable",
    "lru_crawler crawl all",
    "lru_crawler metadump all",
    "lru_crawler enable",
    "lru_crawler enable",
    "slabs",
    "slabs automove",
    "slabs automove 2 noreply",
    "slabs automove 3",
    "slabs automove 3 noreply",
    "slabs automove x",
    "slabs automove -1",
    "slabs automove 0",
    "slabs automove ratio",
    "slabs automove ratio x",
    "slabs automove ratio 1e999",
    "slabs automove ratio 0.5",
    "slabs automove ratio -0.25 noreply",
    "slabs reassign 1 1",
    "slabs reassign 0 2",
    "slabs reassign -1 2",
    "slabs reassign -1 -1",
    "slabs reassign 39 1",
    "slabs reassign 40 1",
    "slabs reassign 1 39",
    "slabs reassign 1 64",
    "slabs reassign 1 -1",
    "slabs reassign x 2",
    "slabs reassign 1",
    "slabs reassign 1 2 3",
    "lru",
    "lru tune",
    "lru tune 10 25 0.1",
    "lru tune x 20 1 2",
    "lru tune 50 40 0.1 2.0",
    "lru tune 4294967295 2 1 1",
    "lru tune 10 20 0 2",
    "lru tune 10 20 1 -2",
    "lru tune 10 20 0 2 noreply",
    "lru tune 15 35 0.5 3.25",
    "lru tune 1 1 1 1 1",
    "lru mode",
    "lru mode x",
    "lru mode flat",
    "lru mode segmented extra",
    "lru mode flat noreply",
    "lru temp_ttl x",
    "lru temp_ttl 30",
    "lru temp_ttl -1 noreply",
    "lru temp_ttl 45",
    "lru foo 1",
    "stats sizes",
];

/// The `stats settings` lines the commands above change.
const TUNED_SETTINGS: &[&str] = &[
    "slab_reassign",
    "slab_automove",
    "slab_automove_ratio",
    "lru_crawler",
    "lru_crawler_sleep",
    "lru_crawler_tocrawl",
    "lru_maintainer_thread",
    "lru_segmented",
    "hot_lru_pct",
    "warm_lru_pct",
    "hot_max_factor",
    "warm_max_factor",
    "temp_lru",
    "temporary_ttl",
];

/// Polls the server until `done` holds (10 s at most).
fn wait_until(server: &ServerProcess, what: &str, done: impl Fn(&ServerProcess) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done(server) {
        assert!(Instant::now() < deadline, "{}: {what}", server.describe());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until the server reports no crawl running (memcached's crawler and ferrocache's
/// both finish an almost empty cache in well under a second).
fn wait_crawl_done(server: &ServerProcess) {
    wait_until(server, "crawl never ended", |s| {
        s.stats("")["lru_crawler_running"] == "0"
    });
}

/// Waits until the server's settings say the crawler is off.
fn wait_crawler_stopped(server: &ServerProcess) {
    wait_until(server, "crawler never stopped", |s| {
        s.stats("settings")["lru_crawler"] == "no"
    });
}

/// Each command's reply on one connection (the empty string for none), and the tuned
/// settings afterwards.
fn run_script(kind: ServerKind, args: &[&str], script: &[&str]) -> (Vec<String>, Vec<String>) {
    let server = ServerProcess::start(kind, args);
    let mut conn = server.connect();
    conn.request(b"set k 0 0 1\r\nv\r\n");
    let mut replies = Vec::new();
    for line in script {
        let reply = conn.request(format!("{line}\r\n").as_bytes());
        if *line == "lru_crawler disable" && reply == b"OK\r\n" {
            // memcached answers before its crawler thread has stopped, and says it is
            // disabled only once the thread has (a crawl asked for meanwhile gets
            // `ERROR an unknown error happened`): wait for that, as a client would
            // have to.
            wait_crawler_stopped(&server);
        }
        if line.starts_with("lru_crawler crawl") && reply == b"OK\r\n" {
            // A crawl started: let it end, so the next one is not refused as busy.
            // (memcached's crawler thread may take a moment to report it running.)
            std::thread::sleep(Duration::from_millis(50));
            wait_crawl_done(&server);
        }
        replies.push(format!("{line} -> {}", escape(&reply)));
    }
    let settings: HashMap<String, String> = server.stats("settings");
    let tuned = TUNED_SETTINGS
        .iter()
        .map(|k| format!("{k} {:?}", settings.get(*k)))
        .collect();
    (replies, tuned)
}

fn assert_same(args: &[&str], script: &[&str]) {
    let (mine, my_settings) = run_script(ServerKind::Ferrocache, args, script);
    let (theirs, their_settings) = run_script(ServerKind::Memcached, args, script);
    for (a, b) in mine.iter().zip(&theirs) {
        assert_eq!(a, b, "ferrocache (left) and memcached (right) differ");
    }
    assert_eq!(
        my_settings, their_settings,
        "stats settings after the script"
    );
}

#[test]
fn tuning_commands_match_memcached() {
    assert_same(ARGS, SCRIPT);
}

#[test]
fn crawler_options_match_memcached() {
    let script = [
        "lru_crawler crawl all",
        "lru_crawler metadump all",
        "lru_crawler enable",
        "lru_crawler enable",
        "lru temp_ttl 5",
        "lru mode flat",
        "slabs reassign 1 2",
        "slabs reassign 1 x",
        "slabs automove 1",
    ];
    let mut args = ARGS.to_vec();
    args.extend([
        "-o",
        "no_lru_crawler,lru_crawler_sleep=500,lru_crawler_tocrawl=9,no_lru_maintainer,\
         no_slab_reassign,slab_automove=2,hot_lru_pct=30",
    ]);
    assert_same(&args, &script);
}

/// A crawl asked for reclaims every expired item; with the crawler disabled nothing
/// reclaims them in the background. (ferrocache only: memcached's LRU maintainer also
/// reclaims expired items at the LRU tails, so its count would not hold still.)
#[test]
fn crawl_reclaims_expired_items_and_disable_stops_the_sweep() {
    let mut args = ARGS.to_vec();
    args.push("--debug-time");
    let server = ServerProcess::start(ServerKind::Ferrocache, &args);
    let mut conn = server.connect();
    assert_eq!(conn.request_str("lru_crawler disable\r\n"), "OK\r\n");
    let mut batch = String::new();
    for i in 0..200 {
        batch.push_str(&format!("set short{i} 0 1 3 noreply\r\nabc\r\n"));
        batch.push_str(&format!("set long{i} 0 0 3 noreply\r\nabc\r\n"));
    }
    conn.request(batch.as_bytes());
    assert_eq!(server.stats("")["curr_items"], "400");
    // The clock moved past the short items' TTL, then two ticks of the maintenance
    // thread: the second comes after a whole pass that would have swept, had the
    // crawler been on.
    assert_eq!(conn.request_str("debugtime 2\r\n"), "OK\r\n");
    let moved: u64 = server.stats("")["uptime"].parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.stats("")["uptime"].parse::<u64>().unwrap() < moved + 2 {
        assert!(Instant::now() < deadline, "the clock stopped ticking");
        std::thread::sleep(Duration::from_millis(50));
    }
    let stats = server.stats("");
    assert_eq!(stats["curr_items"], "400", "the disabled crawler swept");
    assert_eq!(stats["crawler_reclaimed"], "0");

    assert_eq!(conn.request_str("lru_crawler enable\r\n"), "OK\r\n");
    assert_eq!(conn.request_str("lru_crawler crawl all\r\n"), "OK\r\n");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stats = server.stats("");
        if stats["lru_crawler_starts"] == "1" && stats["lru_crawler_running"] == "0" {
            assert_eq!(stats["curr_items"], "200", "{stats:?}");
            assert_eq!(stats["crawler_reclaimed"], "200", "{stats:?}");
            let checked: u64 = stats["crawler_items_checked"].parse().unwrap();
            assert!(checked >= 400, "{stats:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the crawl never ended: {stats:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The live items are untouched.
    assert_eq!(
        conn.request_str("get long7 short7\r\n"),
        "VALUE long7 0 3\r\nabc\r\nEND\r\n"
    );
}

/// Options memcached refuses at start are refused here too, with its message.
#[test]
fn bad_tuning_options_are_refused_as_memcached_refuses_them() {
    for (options, message) in [
        (
            "no_lru_maintainer,temporary_ttl=7",
            "temporary_ttl requires lru_maintainer to be enabled",
        ),
        (
            "hot_lru_pct=50,warm_lru_pct=40",
            "hot_lru_pct + warm_lru_pct cannot be more than 80% combined",
        ),
        (
            "lru_crawler_sleep=1000001",
            "LRU crawler sleep must be between 0 and 1 second",
        ),
        ("slab_automove=3", "slab_automove must be between 0 and 2"),
    ] {
        let args = vec![
            "-U".to_string(),
            "0".to_string(),
            "-o".to_string(),
            options.to_string(),
        ];
        for kind in [ServerKind::Ferrocache, ServerKind::Memcached] {
            let out = common::run_to_exit(kind, &args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                !out.status.success() && stderr.contains(message),
                "{} -o {options}: {:?}, stderr {stderr:?}",
                kind.name(),
                out.status
            );
        }
    }
}

/// `stats slabs` ends with memcached's totals: the classes holding items
/// (`active_slabs`) and the item memory in use as `total_malloced`, which grows as
/// items are written.
#[test]
fn stats_slabs_reports_item_memory() {
    let server = ServerProcess::start(ServerKind::Ferrocache, ARGS);
    let mut conn = server.connect();
    let slabs = |conn: &mut common::Client| -> (u64, u64) {
        let slabs = conn.stats("slabs");
        (
            slabs["active_slabs"].parse().unwrap(),
            slabs["total_malloced"].parse().unwrap(),
        )
    };
    let malloced = |conn: &mut common::Client| -> u64 { slabs(conn).1 };
    assert_eq!(slabs(&mut conn).0, 0, "an empty cache has no class");
    let before = malloced(&mut conn);
    let value = "v".repeat(1000);
    let mut batch = String::new();
    for i in 0..20_000 {
        batch.push_str(&format!("set key{i} 0 0 1000 noreply\r\n{value}\r\n"));
    }
    conn.request(batch.as_bytes());
    let after = malloced(&mut conn);
    // One size: one class (memcached's 1184-byte one).
    assert_eq!(slabs(&mut conn).0, 1);
    // 20 000 items of about 1 KB: at least 20 MB more memory holds them.
    assert!(after >= before + 20_000_000, "{before} -> {after}");
    let limit: u64 = conn.stats("")["limit_maxbytes"].parse().unwrap();
    assert!(after <= limit + (8 << 20), "{after} over the limit {limit}");
}
