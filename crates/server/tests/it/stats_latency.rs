//! Server-side latency (`stats latency`, `--latency-histograms`) and the Prometheus
//! endpoint (`--metrics-listen`): each request is counted under its command, a reset
//! zeroes the histograms, off records nothing, and `/metrics` answers as an HTTP
//! server should. tests/prometheus/ has a real Prometheus scrape it.

use crate::common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{probably_free_port, ServerKind, ServerProcess};

const COMMANDS: [&str; 9] = [
    "get", "multiget", "set", "delete", "incr", "touch", "meta", "binary", "other",
];

fn counts(stats: &HashMap<String, String>) -> HashMap<&'static str, u64> {
    COMMANDS
        .iter()
        .map(|c| {
            let n = stats
                .get(&format!("{c}:count"))
                .unwrap_or_else(|| panic!("{c}:count missing"))
                .parse()
                .expect("a count");
            (*c, n)
        })
        .collect()
}

fn micros(stats: &HashMap<String, String>, name: &str) -> f64 {
    stats[name].parse().expect("microseconds")
}

/// A binary no-op request (magic 0x80, opcode 0x0a).
fn binary_noop() -> [u8; 24] {
    let mut p = [0u8; 24];
    p[0] = 0x80;
    p[1] = 0x0a;
    p
}

/// Every kind of request, a known number of times each, on one connection (text and
/// meta) and another (binary).
fn traffic(server: &ServerProcess) {
    let mut c = server.connect();
    for i in 0..7 {
        assert_eq!(
            c.request_str(&format!("set k{i} 0 0 1\r\n{i}\r\n")),
            "STORED\r\n"
        );
    }
    for i in 0..20 {
        assert!(c
            .request_str(&format!("get k{}\r\n", i % 7))
            .starts_with("VALUE"));
    }
    for _ in 0..5 {
        assert!(c.request_str("get k1 k2 k3\r\n").ends_with("END\r\n"));
    }
    for i in 0..3 {
        assert_eq!(c.request_str(&format!("delete k{i}\r\n")), "DELETED\r\n");
    }
    assert_eq!(c.request_str("incr k5 1\r\n"), "6\r\n");
    assert_eq!(c.request_str("decr k5 1\r\n"), "5\r\n");
    assert_eq!(c.request_str("touch k6 100\r\n"), "TOUCHED\r\n");
    assert!(c.request_str("gat 100 k6\r\n").starts_with("VALUE"));
    assert_eq!(c.request_str("mn\r\n"), "MN\r\n");
    assert_eq!(c.request_str("ms k7 1\r\n7\r\n"), "HD\r\n");
    assert!(c.request_str("mg k6 v\r\n").starts_with("VA 1"));
    let mut b = server.connect();
    b.send(&binary_noop());
    b.send(&binary_noop());
    let reply = b.read_until(Duration::from_secs(10), |r| r.len() >= 48);
    assert_eq!(reply.bytes.len(), 48, "two binary no-op replies");
}

#[test]
fn each_request_is_timed_under_its_command_and_reset_zeroes_them() {
    let server = ServerProcess::start(ServerKind::Ferrocache, &["-t", "2", "-U", "0"]);
    traffic(&server);
    let mut c = server.connect();
    let want = [
        ("get", 20),
        ("multiget", 5),
        ("set", 7),
        ("delete", 3),
        ("incr", 2),
        ("touch", 2),
        ("binary", 2),
    ];
    // A worker times its turn's requests just after it hands their replies to the
    // kernel, so a client can read a reply a moment before its request is counted (on a
    // loaded machine, the worker may be off its CPU in between): wait until all are.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let stats = loop {
        let stats = c.stats("latency");
        let n = counts(&stats);
        if want.iter().all(|&(command, count)| n[command] >= count)
            || std::time::Instant::now() > deadline
        {
            break stats;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let n = counts(&stats);
    for (command, count) in want {
        assert_eq!(n[command], count, "{command}: {stats:?}");
    }
    // Three meta requests, and the `mn` the test client sends after each request.
    assert!(n["meta"] >= 3, "{stats:?}");
    for (command, count) in want {
        let p50 = micros(&stats, &format!("{command}:p50_us"));
        let p99 = micros(&stats, &format!("{command}:p99_us"));
        let max = micros(&stats, &format!("{command}:max_us"));
        assert!(
            count == 0 || (0.0 < p50 && p50 <= p99 && p99 <= max),
            "{command}: {stats:?}"
        );
    }
    assert_eq!(c.request_str("stats reset\r\n"), "RESET\r\n");
    let after = c.stats("latency");
    let n = counts(&after);
    for (command, _) in want {
        assert_eq!(n[command], 0, "{command} after reset: {after:?}");
        assert_eq!(after[&format!("{command}:max_us")], "0.0");
    }
    assert_eq!(c.stats("settings")["latency_histograms"], "on");
}

#[test]
fn off_records_nothing() {
    let server = ServerProcess::start(
        ServerKind::Ferrocache,
        &["-t", "1", "-U", "0", "--latency-histograms=off"],
    );
    traffic(&server);
    let mut c = server.connect();
    let stats = c.stats("latency");
    assert!(counts(&stats).values().all(|&n| n == 0), "{stats:?}");
    assert_eq!(c.stats("settings")["latency_histograms"], "off");
}

/// One HTTP request on a fresh connection: the whole reply, read to its close.
fn http(port: u16, request: &[u8]) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("metrics port");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(request).unwrap();
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    String::from_utf8_lossy(&reply).into_owned()
}

#[test]
fn metrics_endpoint_serves_the_page_and_refuses_the_rest() {
    let mut server = None;
    let mut metrics = 0;
    // The metrics port is only probably free: a lost race exits the server, so retry.
    for _ in 0..10 {
        metrics = probably_free_port();
        let listen = format!("127.0.0.1:{metrics}");
        let s = ServerProcess::start(
            ServerKind::Ferrocache,
            &["-t", "1", "-U", "0", "--metrics-listen", &listen],
        );
        if TcpStream::connect(("127.0.0.1", metrics)).is_ok() {
            server = Some(s);
            break;
        }
    }
    let server = server.expect("a server with its metrics port");
    traffic(&server);
    let stats = server.stats("");
    let page = http(metrics, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    let (head, body) = page.split_once("\r\n\r\n").expect("a head");
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .expect("a length")
        .parse()
        .unwrap();
    assert_eq!(length, body.len());
    // The exporter's names, each with the value `stats` gave.
    let get_hits = format!(
        "memcached_commands_total{{command=\"get\",status=\"hit\"}} {}",
        stats["get_hits"]
    );
    let items = format!("memcached_current_items {}", stats["curr_items"]);
    // No cas was sent: the exporter's set count is cmd_set itself.
    let sets = format!(
        "memcached_commands_total{{command=\"set\",status=\"hit\"}} {}",
        stats["cmd_set"]
    );
    for line in [
        "memcached_up 1",
        &get_hits,
        &items,
        &sets,
        "memcached_commands_total{command=\"delete\",status=\"hit\"} 3",
        "ferrocache_request_duration_seconds_count{command=\"multiget\"} 5",
        "ferrocache_request_duration_seconds_bucket{command=\"get\",le=\"+Inf\"} 20",
    ] {
        assert!(body.lines().any(|l| l == line), "{line} not in the page");
    }
    let head_only = http(metrics, b"HEAD /metrics HTTP/1.1\r\n\r\n");
    assert!(head_only.starts_with("HTTP/1.1 200 OK") && head_only.ends_with("\r\n\r\n"));
    assert!(http(metrics, b"GET /nope HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404 "));
    assert!(http(metrics, b"POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405 "));
    let mut long = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
    long.extend(std::iter::repeat_n(b'a', 20_000));
    assert!(http(metrics, &long).starts_with("HTTP/1.1 431 "));
    // The cache still answers after all that.
    server
        .connect()
        .assert_answers("after the metrics requests");
}
