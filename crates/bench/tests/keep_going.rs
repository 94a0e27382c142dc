//! `--keep-going`: a server node killed mid-run and started again. The run
//! must finish (exit 0) with the lost requests counted as errors, the live
//! node served throughout, and traffic back on the restarted node.
//!
//! Only ordering is relied on, never timing: the node is killed after
//! ferrobench's connections to it are seen in its `stats`, and restarted
//! while a run many seconds longer than the outage is still going.

mod common;

use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{ferrobench, stat_on, Memcached};

/// Waits (bounded) until `mc` has `extra` more connections than `before`.
fn wait_for_connections(conn: &mut TcpStream, before: u64, extra: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while stat_on(conn, "curr_connections").unwrap_or(0) < before + extra {
        assert!(
            Instant::now() < deadline,
            "ferrobench did not connect in 30 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A ferrobench child killed by PID if the test fails before it exits.
struct Run(Option<std::process::Child>);

impl Drop for Run {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn stats_conn(mc: &Memcached) -> TcpStream {
    let conn = TcpStream::connect(mc.addr()).expect("connecting for stats");
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    conn
}

#[test]
fn keep_going_counts_a_dead_node_and_reconnects_when_it_returns() {
    let live = Memcached::start(false);
    let dying = Memcached::start(false);
    let port = dying.port;
    let mut watch = stats_conn(&dying);
    let before = stat_on(&mut watch, "curr_connections").expect("stats");
    let mut run = Run(Some(
        Command::new(env!("CARGO_BIN_EXE_ferrobench"))
            .args(["--server", &live.addr(), "--server", &dying.addr()])
            .args([
                "--keep-going",
                "-c",
                "2",
                "--ratio",
                "9:1",
                "--keyspace",
                "1000",
            ])
            .args(["--duration", "8", "--timeout", "1s", "--json", "--quiet"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting ferrobench"),
    ));
    wait_for_connections(&mut watch, before, 2);
    drop(watch);
    std::thread::sleep(Duration::from_millis(300));
    drop(dying); // SIGKILL by PID: the sessions' connections reset or close.
    std::thread::sleep(Duration::from_millis(500));
    let back = (0..20)
        .find_map(|_| {
            Memcached::try_start_on(port, false).or_else(|| {
                std::thread::sleep(Duration::from_millis(100));
                None
            })
        })
        .expect("restarting the killed node on its port");
    let out = run
        .0
        .take()
        .unwrap()
        .wait_with_output()
        .expect("waiting for ferrobench");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {stderr}", out.status);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    let c = &report["counters"];
    let num = |v: &serde_json::Value| v.as_u64().unwrap_or_else(|| panic!("{v}"));
    assert!(num(&c["disconnects"]) >= 1, "{c}");
    assert!(num(&c["reconnects"]) >= 1, "{c}\n{stderr}");
    assert!(num(&c["errors"]) >= 1, "{c}");
    assert!(num(&c["ops"]) > num(&c["errors"]), "{c}");
    assert_eq!(report["errors"], c["errors"]);
    // The live node never failed a request.
    let servers = report["servers"].as_array().unwrap();
    assert!(num(&servers[0]["ops"]) > 0);
    assert_eq!(num(&servers[0]["errors"]), 0, "{}", servers[0]);
    // The timeline adds up to the totals.
    let timeline = report["timeline"].as_array().expect("timeline");
    let sum = |f: &str| timeline.iter().map(|s| num(&s[f])).sum::<u64>();
    assert_eq!(sum("ops"), num(&c["ops"]));
    assert_eq!(sum("errors"), num(&c["errors"]));
    // Traffic came back to the restarted node.
    let mut watch = stats_conn(&back);
    let served = stat_on(&mut watch, "cmd_get").unwrap() + stat_on(&mut watch, "cmd_set").unwrap();
    assert!(served > 0, "no request reached the restarted node");
    assert!(stderr.contains("reconnected to server"), "{stderr}");
}

#[test]
fn keep_going_needs_plain_tcp() {
    let out = ferrobench(&["--server", "127.0.0.1:1", "--keep-going", "--udp"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--keep-going"), "{err}");
}
