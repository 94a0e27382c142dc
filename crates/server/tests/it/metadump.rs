//! `lru_crawler metadump`: the same items, fields and errors as memcached 1.6.18 (lines
//! compared as sets, since memcached walks its LRU and ferrocache its index), and a
//! dump larger than the output buffer arrives whole, each item once.

use crate::common;

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use common::{escape, Client, ServerKind, ServerProcess, READ_TIMEOUT};

const ARGS: &[&str] = &["-t", "2", "-m", "64", "-U", "0"];

/// Everything up to and including `END\r\n` (or an error line) after `command`.
fn dump(c: &mut Client, command: &str) -> Vec<u8> {
    c.send(command.as_bytes());
    let reply = c.read_until(READ_TIMEOUT, |b| {
        b.ends_with(b"END\r\n") || (b.ends_with(b"\r\n") && !b.starts_with(b"key="))
    });
    reply.bytes
}

/// The lines of a dump without `la=` (when each server last stored or read the item;
/// memcached also moves it on some reads) and with `exp=` reduced to whether the item
/// expires (the two servers' clocks started at different times).
fn normalized(bytes: &[u8]) -> BTreeSet<String> {
    let text = String::from_utf8_lossy(bytes);
    assert!(text.ends_with("END\r\n"), "{text:?}");
    text.trim_end_matches("END\r\n")
        .lines()
        .map(|line| {
            line.split(' ')
                .filter(|f| !f.starts_with("la="))
                .map(|f| match f.strip_prefix("exp=") {
                    Some("-1") => "exp=never".to_string(),
                    Some(t) => {
                        assert!(t.parse::<i64>().is_ok_and(|t| t > 1_600_000_000), "{line}");
                        "exp=set".to_string()
                    }
                    None => f.to_string(),
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// The same stores, deletes and reads, in the same order, on `server`.
fn populate(server: &ServerProcess) -> Client {
    let mut c = server.connect();
    let mut script = Vec::new();
    for i in 0..300u32 {
        let key = match i % 4 {
            0 => format!("plain:{i}"),
            1 => format!("odd%key/{i}é+"),
            2 => format!("k{i}"),
            _ => format!("{}{i}", "x".repeat(200)),
        };
        let flags = if i % 3 == 0 { 0 } else { i };
        let exptime = if i % 5 == 0 { 100_000 } else { 0 };
        let value = "v".repeat((i as usize * 37) % 3000);
        script.extend_from_slice(
            format!("set {key} {flags} {exptime} {}\r\n{value}\r\n", value.len()).as_bytes(),
        );
        if i % 7 == 0 {
            script.extend_from_slice(format!("delete {key}\r\n").as_bytes());
        }
        if i % 11 == 0 {
            script.extend_from_slice(format!("get {key}\r\n").as_bytes());
        }
    }
    c.request(&script);
    c
}

#[test]
fn dumps_the_same_items_as_memcached() {
    let memcached = ServerProcess::start(ServerKind::Memcached, ARGS);
    let ferrocache = ServerProcess::start(ServerKind::Ferrocache, ARGS);
    let mut mc = populate(&memcached);
    let mut fc = populate(&ferrocache);
    // memcached's crawler needs a moment after the stores before it sees them all.
    std::thread::sleep(Duration::from_millis(200));
    for command in [
        "lru_crawler metadump all\r\n",
        "lru_crawler metadump hash\r\n",
        "lru_crawler metadump 1\r\n",
        "lru_crawler metadump 3,5,12,\r\n",
        "lru_crawler metadump 2,20\r\n",
        "lru_crawler metadump 63\r\n",
    ] {
        let ours = normalized(&dump(&mut fc, command));
        let theirs = normalized(&dump(&mut mc, command));
        assert_eq!(ours, theirs, "{command:?}");
        if command.contains("all") {
            // 300 stored, 43 deleted.
            assert_eq!(ours.len(), 257);
        }
    }
    for command in [
        "lru_crawler metadump\r\n",
        "lru_crawler metadump all extra\r\n",
        "lru_crawler metadump 0\r\n",
        "lru_crawler metadump 64\r\n",
        "lru_crawler metadump 1,99\r\n",
        "lru_crawler metadump ALL\r\n",
        "lru_crawler metadump -1\r\n",
        "LRU_CRAWLER metadump all\r\n",
    ] {
        assert_eq!(
            escape(&fc.request(command.as_bytes())),
            escape(&mc.request(command.as_bytes())),
            "{command:?}"
        );
    }
}

#[test]
fn dumps_are_refused_with_dumping_disabled() {
    for kind in [ServerKind::Memcached, ServerKind::Ferrocache] {
        let server = ServerProcess::start(kind, &["-X", "-U", "0"]);
        let mut c = server.connect();
        assert_eq!(
            escape(&c.request(b"lru_crawler metadump all\r\nlru_crawler metadump 99\r\n")),
            escape(b"ERROR metadump not allowed\r\nERROR metadump not allowed\r\n"),
            "{}",
            kind.name()
        );
    }
}

/// A dump many times the output high-water mark, read slowly: every item once, then
/// `END`, and the connection serves requests afterwards.
#[test]
fn a_large_dump_arrives_whole() {
    let server = ServerProcess::start(ServerKind::Ferrocache, &["-t", "1", "-m", "256", "-U", "0"]);
    let mut c = server.connect();
    let n = 60_000u32;
    let mut batch = Vec::new();
    for i in 0..n {
        batch.extend_from_slice(
            format!("set key-{i:06}-{} 0 0 1 noreply\r\nv\r\n", "p".repeat(40)).as_bytes(),
        );
        if batch.len() > 1 << 20 {
            c.send(&batch);
            batch.clear();
        }
    }
    batch.extend_from_slice(b"mn\r\n");
    c.send(&batch);
    c.read_until(READ_TIMEOUT, |b| b.ends_with(b"MN\r\n"));
    c.send(b"lru_crawler metadump all\r\n");
    let mut seen = HashMap::new();
    let mut bytes = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        // Small reads with pauses, so the server's output stays at its high-water mark.
        let part = c.read_until(Duration::from_millis(20), |_| false);
        bytes.extend_from_slice(&part.bytes);
        if bytes.ends_with(b"END\r\n") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} bytes, no END",
            bytes.len()
        );
    }
    assert!(bytes.len() > 4 << 20, "{} bytes", bytes.len());
    for line in String::from_utf8(bytes)
        .unwrap()
        .trim_end_matches("END\r\n")
        .lines()
    {
        let key = line
            .split(' ')
            .next()
            .unwrap()
            .trim_start_matches("key=")
            .to_string();
        *seen.entry(key).or_insert(0) += 1;
    }
    assert_eq!(seen.len(), n as usize);
    assert!(seen.values().all(|&c| c == 1));
    assert_eq!(c.request(b"get key-000007-pppp\r\n"), b"END\r\n");
}
