//! Large get values sent in place (`--zero-copy-min`, see `src/splice.rs`): a reply
//! holds the value as it was when the get ran, even when the client reads it much later
//! and meanwhile the key is overwritten and its segment evicted and reused; nothing is
//! held back from eviction by a client that does not read; and the setting shows in
//! `stats settings`. Runs on whichever backend `FERROCACHE_IO_BACKEND` picks
//! (`scripts/test` runs the suite on both).

use crate::common;

use std::time::Duration;

use common::{escape, Client, ServerKind, ServerProcess};

/// A 64 KB value that says which key and version it is in every byte pattern.
fn value(key: usize, version: usize) -> Vec<u8> {
    let mut v = format!("key {key} version {version} ").into_bytes();
    let fill = b'a' + ((key * 7 + version) % 26) as u8;
    v.resize(64 * 1024, fill);
    v
}

fn set(c: &mut Client, key: &str, v: &[u8]) {
    let mut req = format!("set {key} 0 0 {}\r\n", v.len()).into_bytes();
    req.extend_from_slice(v);
    req.extend_from_slice(b"\r\n");
    assert_eq!(c.request(&req), b"STORED\r\n", "set {key}");
}

#[test]
fn a_slow_reader_gets_the_values_as_they_were_when_it_asked() {
    // 8 MB of 1 MB segments. 40 keys of 64 KB (2.5 MB) at version 0.
    let server = ServerProcess::start(
        ServerKind::Ferrocache,
        &["-t", "2", "-m", "8", "-U", "0", "--zero-copy-min", "1024"],
    );
    let mut writer = server.connect();
    let keys: Vec<usize> = (0..40).collect();
    for &k in &keys {
        set(&mut writer, &format!("k{k}"), &value(k, 0));
    }
    // The reader asks for every key three times over (7.5 MB of replies, far more than
    // the socket buffers hold) and reads nothing yet.
    let mut reader = server.connect();
    let line: Vec<String> = keys.iter().map(|k| format!("k{k}")).collect();
    let request = format!("get {}\r\n", line.join(" "));
    reader.send(request.repeat(3).as_bytes());
    std::thread::sleep(Duration::from_millis(300));
    // Meanwhile every key is overwritten, and 24 MB of other keys force every segment
    // to be evicted and reused about three times over.
    for &k in &keys {
        set(&mut writer, &format!("k{k}"), &value(k, 1));
    }
    for i in 0..384 {
        set(&mut writer, &format!("filler{i}"), &value(1000 + i, 0));
    }
    let stats = writer.stats("");
    assert!(
        stats["evictions"].parse::<u64>().unwrap() > 100,
        "the fillers evicted: {}",
        stats["evictions"]
    );
    // A multi-get pauses once 1 MiB of its replies wait unsent, and looks the rest up
    // when the client has read, so later values may be version 1 or gone (evicted).
    // Every value must be whole, one version of its own key; the first ones, answered
    // before the reader stalled, version 0.
    let got = reader.read_until(Duration::from_secs(20), |b| {
        b.windows(5).filter(|w| w == b"END\r\n").count() == 3
    });
    let mut rest = &got.bytes[..];
    let mut seen = Vec::new();
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix(b"END\r\n".as_slice()) {
            rest = after;
            continue;
        }
        let eol = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("header line");
        let header = std::str::from_utf8(&rest[..eol]).expect("ascii header");
        let f: Vec<&str> = header.split(' ').collect();
        assert_eq!((f.len(), f[0], f[2]), (4, "VALUE", "0"), "{header}");
        let key: usize = f[1].strip_prefix('k').unwrap().parse().unwrap();
        let len: usize = f[3].parse().unwrap();
        let data = &rest[eol + 2..eol + 2 + len];
        assert_eq!(&rest[eol + 2 + len..eol + 4 + len], b"\r\n");
        let version = (0..2)
            .find(|&v| data == value(key, v).as_slice())
            .unwrap_or_else(|| panic!("k{key}: torn or foreign value {}", escape(&data[..40])));
        seen.push((key, version));
        rest = &rest[eol + 4 + len..];
    }
    assert!(seen.len() >= 40, "{} values", seen.len());
    assert!(
        seen[..10].iter().all(|&(_, v)| v == 0),
        "the first replies were composed before the overwrite: {:?}",
        &seen[..10]
    );
    assert_eq!(seen[..10], (0..10).map(|k| (k, 0)).collect::<Vec<_>>());
}

#[test]
fn in_place_and_copied_replies_are_identical() {
    // The same pipelined mix of hits, misses, small and large values, gets and gats,
    // against one server that copies every value and one that sends every value in
    // place; CAS uniques are the same because both see the same stores in order.
    let mut replies = Vec::new();
    for min in ["0", "1"] {
        let server = ServerProcess::start(
            ServerKind::Ferrocache,
            &["-t", "1", "-m", "64", "-U", "0", "--zero-copy-min", min],
        );
        let mut c = server.connect();
        let settings = c.stats("settings");
        assert_eq!(settings["zero_copy_min"], min);
        let mut script = Vec::new();
        for k in 0..30usize {
            let len = [0, 1, 5, 100, 4000, 60_000][k % 6];
            let v = &value(k, 2)[..len];
            script.extend_from_slice(format!("set k{k} {k} 0 {len}\r\n").as_bytes());
            script.extend_from_slice(v);
            script.extend_from_slice(b"\r\n");
        }
        for round in 0..4 {
            let ks: Vec<String> = (0..34)
                .map(|k| format!("k{}", (k * 7 + round) % 34))
                .collect();
            script.extend_from_slice(format!("get {}\r\n", ks.join(" ")).as_bytes());
            script.extend_from_slice(format!("gets {}\r\n", ks[..9].join(" ")).as_bytes());
            script.extend_from_slice(format!("gat 0 {}\r\n", ks[3..20].join(" ")).as_bytes());
            script.extend_from_slice(b"get k4\r\nget k5\r\nincr k1 1\r\nappend k5 0 0 1\r\n!\r\n");
        }
        c.send(&script);
        let reply = c.read_until(Duration::from_secs(20), |b| {
            b.windows(6).filter(|w| w == b"STORED").count() >= 34
        });
        let tail = c.request(b"get k5\r\n");
        replies.push((reply.bytes, tail));
    }
    assert!(replies[0].0.len() > 1_000_000);
    assert!(
        replies[0] == replies[1],
        "copied and in-place replies differ"
    );
}

#[test]
fn the_default_threshold_follows_the_backend() {
    // Measured in docs/perf-notes.md ("Zero-copy values"): on io_uring the vectored
    // send is a system call of its own, so it pays only from larger values.
    let server = ServerProcess::start(ServerKind::Ferrocache, &["-t", "1", "-U", "0"]);
    let settings = server.connect().stats("settings");
    let want = match settings["io_backend"].as_str() {
        "uring" => "32768",
        "epoll" => "16384",
        other => panic!("io_backend {other}"),
    };
    assert_eq!(settings["zero_copy_min"], want);
    let off = ServerProcess::start(
        ServerKind::Ferrocache,
        &["-t", "1", "-U", "0", "--zero-copy-min", "0"],
    );
    assert_eq!(off.connect().stats("settings")["zero_copy_min"], "0");
}
