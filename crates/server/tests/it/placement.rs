//! Placement options: with `--pin`, worker N is pinned to CPU N and a reuseport CBPF
//! program picks each new connection's worker by the CPU that received it. Whatever
//! CPU a connection lands on, every one must be served.

use crate::common;

use common::{ServerKind, ServerProcess};

fn serves_every_connection(args: &[&str]) {
    let server = ServerProcess::start(ServerKind::Ferrocache, args);
    let mut clients: Vec<_> = (0..48).map(|_| server.connect()).collect();
    for (i, c) in clients.iter_mut().enumerate() {
        let set = format!(
            "set key{i} {i} 0 {}\r\nvalue{i}\r\n",
            format!("value{i}").len()
        );
        assert_eq!(c.request(set.as_bytes()), b"STORED\r\n", "connection {i}");
    }
    // Read every key back on another connection than the one that wrote it.
    let n = clients.len();
    for (i, c) in clients.iter_mut().enumerate() {
        let k = (i + 1) % n;
        let want = format!(
            "VALUE key{k} {k} {}\r\nvalue{k}\r\nEND\r\n",
            format!("value{k}").len()
        );
        assert_eq!(
            c.request_str(&format!("get key{k}\r\n")),
            want,
            "connection {i}"
        );
    }
    let settings = server.stats("settings");
    let pinned = args.contains(&"--pin");
    assert_eq!(settings["pin"], if pinned { "yes" } else { "no" });
    assert_eq!(settings["num_threads"], "2");
    let stats = server.stats("");
    let open: usize = stats["curr_connections"].parse().unwrap();
    assert!(open > n, "curr_connections {open} with {n} clients open");
}

#[test]
fn pinned_workers_serve_every_connection() {
    serves_every_connection(&["-t", "2", "-m", "64", "-U", "0", "--pin"]);
}

#[test]
fn pinned_workers_with_busy_polling_serve_every_connection() {
    serves_every_connection(&[
        "-t",
        "2",
        "-m",
        "64",
        "-U",
        "0",
        "--pin",
        "--busy-poll-us",
        "50",
    ]);
}

#[test]
fn unpinned_workers_serve_every_connection() {
    serves_every_connection(&["-t", "2", "-m", "64", "-U", "0"]);
}

/// Busy polling adapts its window (`spin.rs`): requests far apart turn polling off,
/// requests close together turn it back on. Every request is answered across those
/// changes, on whichever backend the suite runs (`FERROCACHE_IO_BACKEND`).
#[test]
fn busy_polling_answers_across_sparse_and_dense_requests() {
    let server = ServerProcess::start(
        ServerKind::Ferrocache,
        &["-t", "1", "-m", "64", "-U", "0", "--busy-poll-us", "20"],
    );
    let mut c = server.connect();
    assert_eq!(c.request(b"set k 7 0 1\r\nv\r\n"), b"STORED\r\n");
    let hit = "VALUE k 7 1\r\nv\r\nEND\r\n";
    // Far apart: each sleep is longer than twice the window, so after a few of
    // them the worker sleeps without polling.
    for i in 0..12 {
        std::thread::sleep(std::time::Duration::from_millis(3));
        assert_eq!(c.request_str("get k\r\n"), hit, "sparse request {i}");
    }
    // Close together again, from several connections at once.
    let mut others: Vec<_> = (0..4).map(|_| server.connect()).collect();
    for i in 0..500 {
        let conn = if i % 5 == 0 {
            &mut c
        } else {
            &mut others[i % 4]
        };
        assert_eq!(conn.request_str("get k\r\n"), hit, "dense request {i}");
    }
    assert_eq!(server.stats("settings")["busy_poll_us"], "20");
}
