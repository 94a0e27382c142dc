//! `--hash`: keys that ferrobench preloads over two memcached nodes are on
//! the node the chosen placement names, and only there. The placements
//! themselves are checked against pylibmc and twemproxy in
//! `src/placement.rs`; this checks that the engine uses the one asked for.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{ferrobench, Memcached};
use ferrobench::placement::{Distribution, Placement};

const KEYS: u64 = 200;

/// Sends `request` and reads until the reply ends with `END\r\n` or `OK\r\n`.
fn ask(conn: &mut TcpStream, request: &str) -> String {
    conn.write_all(request.as_bytes()).unwrap();
    let mut reply = Vec::new();
    let mut chunk = [0u8; 4096];
    while !(reply.ends_with(b"END\r\n") || reply.ends_with(b"OK\r\n")) {
        let n = conn.read(&mut chunk).expect("reading a reply");
        assert!(n > 0, "memcached closed the connection");
        reply.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8_lossy(&reply).into_owned()
}

#[test]
fn preloaded_keys_are_where_the_placement_says() {
    let nodes = [Memcached::start(false), Memcached::start(false)];
    let mut conns: Vec<TcpStream> = nodes
        .iter()
        .map(|n| {
            let c = TcpStream::connect(n.addr()).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            c
        })
        .collect();
    let names: Vec<(&str, u16)> = nodes.iter().map(|n| ("127.0.0.1", n.port)).collect();
    for (flag, d) in [
        ("ketama-weighted", Distribution::KetamaWeighted),
        ("ketama", Distribution::Ketama),
        ("modula", Distribution::Modula),
        ("twemproxy-ketama", Distribution::TwemproxyKetama),
        ("twemproxy-modula", Distribution::TwemproxyModula),
    ] {
        for c in &mut conns {
            assert_eq!(ask(c, "flush_all\r\n"), "OK\r\n");
        }
        let out = ferrobench(&[
            "--server",
            &nodes[0].addr(),
            "--server",
            &nodes[1].addr(),
            "--hash",
            flag,
            "--preload",
            "--keyspace",
            &KEYS.to_string(),
            "--ratio",
            "1:0",
            "--requests",
            "1",
            "--quiet",
        ]);
        assert!(
            out.status.success(),
            "--hash {flag}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let placement = Placement::new(d, &names);
        let mut per_node = [0; 2];
        for i in 0..KEYS {
            let key = format!("k{i:019}");
            let owner = placement.server_of(key.as_bytes());
            per_node[owner] += 1;
            for (n, c) in conns.iter_mut().enumerate() {
                let held = ask(c, &format!("get {key}\r\n")).starts_with("VALUE");
                assert_eq!(held, n == owner, "--hash {flag}: {key} on node {n}");
            }
        }
        // Both nodes got keys, for the MD5 and one-at-a-time hashes. Not
        // asked of twemproxy's fnv1a_64: 200 consecutive ferrobench keys hash
        // into 2 % of its ring, so one node may well hold them all.
        if !flag.starts_with("twemproxy") {
            assert!(
                per_node.iter().all(|&n| n > 0),
                "--hash {flag}: {per_node:?}"
            );
        }
    }
}
