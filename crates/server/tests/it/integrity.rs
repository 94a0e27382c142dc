//! Integrity under concurrency: many connections on a `-t 4` server hammer the same few
//! keys. No read may return a torn or mixed value, no `incr` may be lost, and of several
//! writers racing with the same `cas` unique exactly one wins.
//!
//! Values check themselves: each carries its writer, its sequence number, its length and
//! a checksum of its filler, so a value torn between two writes, or one key's bytes
//! under another key, fails the check no matter which write it came from.

use crate::common;

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use common::{escape, Client, Rng, ServerKind, ServerProcess};

const ARGS: &[&str] = &["-t", "4", "-m", "64", "-U", "0"];

fn start() -> ServerProcess {
    ServerProcess::start(ServerKind::Ferrocache, ARGS)
}

/// FNV-1a, enough to catch any mix of two values.
fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Shortest value [`make_value`] makes: the fixed-width header with a 4-byte key.
const MIN_VALUE_LEN: usize = 4 + 1 + 4 + 1 + 10 + 1 + 8 + 1 + 16 + 1;

/// `<key>|<writer>|<seq>|<len>|<checksum of filler>|<filler>`, exactly `len` bytes
/// (`len >= MIN_VALUE_LEN`, keys of 4 bytes). Lengths vary, so a torn value also shows
/// in its length.
fn make_value(key: &str, writer: usize, seq: u64, len: usize) -> Vec<u8> {
    let fill_byte = b'a' + ((writer as u64 * 7 + seq) % 26) as u8;
    let filler: Vec<u8> = (0..len - MIN_VALUE_LEN)
        .map(|i| fill_byte.wrapping_add((i % 7) as u8))
        .collect();
    let mut v = format!(
        "{key}|{writer:04}|{seq:010}|{len:08}|{:016x}|",
        checksum(&filler)
    )
    .into_bytes();
    v.extend_from_slice(&filler);
    assert_eq!(v.len(), len, "value layout");
    v
}

/// Checks a value read under `key`; returns (writer, seq) or a description of the damage.
fn check_value(key: &str, value: &[u8]) -> Result<(usize, u64), String> {
    let text = String::from_utf8_lossy(value);
    if value.len() < MIN_VALUE_LEN {
        return Err(format!("too short: {}", escape(value)));
    }
    let fields: Vec<&[u8]> = value.splitn(6, |&b| b == b'|').collect();
    if fields.len() != 6 {
        return Err(format!("no header: {}", escape(value)));
    }
    let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    if s(fields[0]) != key {
        return Err(format!(
            "value of key {} under {key}: {text:.80}",
            s(fields[0])
        ));
    }
    let writer: usize = s(fields[1])
        .parse()
        .map_err(|_| format!("bad writer: {text:.80}"))?;
    let seq: u64 = s(fields[2])
        .parse()
        .map_err(|_| format!("bad seq: {text:.80}"))?;
    let len: usize = s(fields[3])
        .parse()
        .map_err(|_| format!("bad len: {text:.80}"))?;
    let sum = u64::from_str_radix(&s(fields[4]), 16).map_err(|_| format!("bad sum: {text:.80}"))?;
    if len != value.len() {
        return Err(format!("length {} but says {len}: {text:.80}", value.len()));
    }
    if checksum(fields[5]) != sum {
        return Err(format!("checksum mismatch (torn or mixed): {text:.80}"));
    }
    if make_value(key, writer, seq, len) != value {
        return Err(format!(
            "not the value writer {writer} wrote as seq {seq}: {text:.80}"
        ));
    }
    Ok((writer, seq))
}

/// Parses a `get` reply of `VALUE <key> <flags> <len>\r\n<data>\r\n`... `END\r\n` into
/// (key, flags, data) triples.
fn parse_values(reply: &[u8]) -> Result<Vec<(String, u32, Vec<u8>)>, String> {
    let mut out = Vec::new();
    let mut rest = reply;
    loop {
        if rest == b"END\r\n" {
            return Ok(out);
        }
        let nl = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| format!("no line end in {}", escape(rest)))?;
        let line = String::from_utf8_lossy(&rest[..nl]).into_owned();
        let f: Vec<&str> = line.split(' ').collect();
        if f.len() < 4 || f[0] != "VALUE" {
            return Err(format!("unexpected line {line:?} in {}", escape(reply)));
        }
        let flags: u32 = f[2].parse().map_err(|_| format!("flags in {line:?}"))?;
        let len: usize = f[3].parse().map_err(|_| format!("length in {line:?}"))?;
        let data_start = nl + 2;
        if rest.len() < data_start + len + 2
            || &rest[data_start + len..data_start + len + 2] != b"\r\n"
        {
            return Err(format!("bad data block after {line:?}"));
        }
        out.push((
            f[1].to_string(),
            flags,
            rest[data_start..data_start + len].to_vec(),
        ));
        rest = &rest[data_start + len + 2..];
    }
}

/// Writers and readers on the same 4 keys, values of 1 B to 40 KB so that writes span
/// many reads and segment boundaries: every value read must be whole, under its own
/// key, with the flags its writer gave it, and a reader never sees a writer go back in
/// time on one connection... (not promised across connections, so not checked).
#[test]
fn concurrent_sets_and_gets_never_tear() {
    const THREADS: usize = 12;
    const KEYS: [&str; 4] = ["hot0", "hot1", "hot2", "hot3"];
    let seed = common::env_u64("FERRO_SEED", Rng::seed_from_time());
    let server = start();
    let port = server.port;
    let deadline = Instant::now() + Duration::from_secs(8);
    let start_line = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let start_line = start_line.clone();
            thread::spawn(move || -> Result<(u64, u64), String> {
                let mut rng = Rng::new(seed ^ (t as u64 + 1).wrapping_mul(0x9E37_79B9));
                let mut c = Client::connect(port);
                let (mut writes, mut reads) = (0u64, 0u64);
                start_line.wait();
                let mut seq = 0;
                while Instant::now() < deadline && writes + reads < 40_000 {
                    if rng.chance(0.4) {
                        // A pipelined burst of sets, each key with its writer as flags.
                        let mut req = Vec::new();
                        let n = rng.range_usize(1, 8);
                        for _ in 0..n {
                            seq += 1;
                            let key = KEYS[rng.below(4) as usize];
                            let len = if rng.chance(0.2) {
                                rng.range_usize(1000, 40_000)
                            } else {
                                rng.range_usize(MIN_VALUE_LEN, 300)
                            };
                            let v = make_value(key, t, seq, len);
                            req.extend_from_slice(format!("set {key} {t} 0 {len}\r\n").as_bytes());
                            req.extend_from_slice(&v);
                            req.extend_from_slice(b"\r\n");
                        }
                        let reply = c.request(&req);
                        if reply != b"STORED\r\n".repeat(n) {
                            return Err(format!("sets got {}", escape(&reply)));
                        }
                        writes += n as u64;
                    } else {
                        // A multi-get of all keys, some twice.
                        let reply = c.request(b"get hot0 hot1 hot2 hot3 hot0\r\n");
                        for (key, flags, data) in parse_values(&reply)? {
                            let (writer, _) = check_value(&key, &data)?;
                            if flags as usize != writer {
                                return Err(format!("{key}: flags {flags} for writer {writer}"));
                            }
                            reads += 1;
                        }
                    }
                }
                Ok((writes, reads))
            })
        })
        .collect();
    let (mut writes, mut reads) = (0, 0);
    for h in handles {
        let (w, r) = h
            .join()
            .expect("client thread panicked")
            .unwrap_or_else(|e| panic!("seed {seed} (FERRO_SEED replays it): {e}"));
        writes += w;
        reads += r;
    }
    eprintln!("{THREADS} clients: {writes} sets, {reads} values read and checked");
    assert!(
        writes > 100 && reads > 100,
        "too little work: {writes} sets, {reads} reads"
    );
}

/// Concurrent `incr` on one key from many connections loses no increment; `decr` on
/// another key stops at zero without losing any.
#[test]
fn concurrent_incr_loses_nothing() {
    const THREADS: usize = 16;
    const PER_THREAD: u64 = 2_000;
    let server = start();
    let mut c = server.connect();
    assert_eq!(c.request(b"set counter 0 0 1\r\n0\r\n"), b"STORED\r\n");
    let start_value = THREADS as u64 * PER_THREAD * 3;
    assert_eq!(
        c.request(
            format!(
                "set down 0 0 {}\r\n{start_value}\r\n",
                start_value.to_string().len()
            )
            .as_bytes()
        ),
        b"STORED\r\n"
    );
    let port = server.port;
    let start_line = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let start_line = start_line.clone();
            thread::spawn(move || {
                let mut c = Client::connect(port);
                start_line.wait();
                let mut last = 0u64;
                let mut done = 0;
                while done < PER_THREAD {
                    // Pipelines of 1..=50, some with noreply, so batching is exercised.
                    let n = (1 + (done + t as u64) % 50).min(PER_THREAD - done);
                    let mut req = Vec::new();
                    // What each reply line answers: true for an incr, false for a decr.
                    let mut kinds = Vec::new();
                    for i in 0..n {
                        if i % 5 == 4 {
                            req.extend_from_slice(b"incr counter 1 noreply\r\n");
                        } else {
                            req.extend_from_slice(b"incr counter 1\r\n");
                            kinds.push(true);
                        }
                        req.extend_from_slice(b"decr down 3\r\n");
                        kinds.push(false);
                    }
                    let reply = c.request(&req);
                    let text = String::from_utf8_lossy(&reply).into_owned();
                    let numbers: Vec<u64> = text
                        .lines()
                        .map(|l| l.trim().parse().unwrap_or_else(|_| panic!("reply {l:?}")))
                        .collect();
                    assert_eq!(numbers.len(), kinds.len(), "replies: {text:?}");
                    // Each connection sees its own increments in increasing order.
                    for (&v, &is_incr) in numbers.iter().zip(&kinds) {
                        if is_incr {
                            assert!(v > last, "incr went from {last} to {v}");
                            last = v;
                        }
                    }
                    done += n;
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("incr thread");
    }
    let total = THREADS as u64 * PER_THREAD;
    let reply = c.request(b"get counter down\r\n");
    let values = parse_values(&reply).expect("get counter down");
    let num = |data: &[u8]| -> u64 {
        String::from_utf8_lossy(data)
            .trim_end()
            .parse()
            .expect("numeric value")
    };
    assert_eq!(values.len(), 2, "{}", escape(&reply));
    assert_eq!(num(&values[0].2), total, "increments lost");
    assert_eq!(
        num(&values[1].2),
        start_value - 3 * total,
        "decrements lost"
    );
}

/// Rounds of `cas` races: several connections read the same `gets` unique, then all send
/// `cas` with it at once. Exactly one gets `STORED`, the rest `EXISTS`, and the value
/// afterwards is the winner's.
#[test]
fn cas_race_has_exactly_one_winner() {
    const RACERS: usize = 6;
    const ROUNDS: usize = 200;
    let server = start();
    let mut c = server.connect();
    assert_eq!(c.request(b"set race 0 0 5\r\nstart\r\n"), b"STORED\r\n");
    let port = server.port;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut clients: Vec<Client> = (0..RACERS).map(|_| Client::connect(port)).collect();
    for round in 0..ROUNDS {
        if Instant::now() > deadline {
            break;
        }
        let reply = c.request(b"gets race\r\n");
        let header = String::from_utf8_lossy(&reply)
            .lines()
            .next()
            .unwrap_or_default()
            .to_string();
        let unique: u64 = header
            .split(' ')
            .nth(4)
            .and_then(|u| u.parse().ok())
            .unwrap_or_else(|| panic!("gets race: {}", escape(&reply)));
        let barrier = Arc::new(Barrier::new(RACERS));
        let handles: Vec<_> = clients
            .drain(..)
            .enumerate()
            .map(|(i, mut racer)| {
                let barrier = barrier.clone();
                thread::spawn(move || {
                    let value = format!("r{round}w{i}");
                    let req = format!("cas race 0 0 {} {unique}\r\n{value}\r\n", value.len());
                    barrier.wait();
                    let reply = racer.request(req.as_bytes());
                    (racer, reply, value)
                })
            })
            .collect();
        let mut winners = Vec::new();
        for h in handles {
            let (racer, reply, value) = h.join().expect("racer");
            match reply.as_slice() {
                b"STORED\r\n" => winners.push(value),
                b"EXISTS\r\n" => {}
                other => panic!("round {round}: cas answered {}", escape(other)),
            }
            clients.push(racer);
        }
        assert_eq!(winners.len(), 1, "round {round}: winners {winners:?}");
        let reply = c.request(b"get race\r\n");
        let want = format!(
            "VALUE race 0 {}\r\n{}\r\nEND\r\n",
            winners[0].len(),
            winners[0]
        );
        assert_eq!(escape(&reply), escape(want.as_bytes()), "round {round}");
    }
}

/// The checker itself: a value torn between two writes, or filed under another key, is
/// caught.
/// Items that keep expiring while `lru_crawler crawl` passes run back to back and
/// writers and readers share the keys: the crawls unlink expired items under the same
/// locks the lookups take, so every value read must still be whole and under its own
/// key, and the crawls must really have reclaimed items meanwhile.
#[test]
fn crawls_over_expiring_items_never_tear_values() {
    const THREADS: usize = 6;
    let seed = common::env_u64("FERRO_SEED", Rng::seed_from_time());
    let server = start();
    let port = server.port;
    let deadline = Instant::now() + Duration::from_secs(6);
    let keys: Vec<String> = (0..300).map(|i| format!("k{i:03}")).collect();
    let keys = Arc::new(keys);
    let crawler = thread::spawn(move || -> Result<u64, String> {
        let mut c = Client::connect(port);
        let mut crawls = 0;
        while Instant::now() < deadline && crawls < 5_000 {
            match c.request_str("lru_crawler crawl all\r\n").as_str() {
                "OK\r\n" => crawls += 1,
                "BUSY currently processing crawler request\r\n" => {}
                other => return Err(format!("crawl answered {other:?}")),
            }
            thread::sleep(Duration::from_millis(5));
        }
        Ok(crawls)
    });
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let keys = keys.clone();
            thread::spawn(move || -> Result<u64, String> {
                let mut rng = Rng::new(seed ^ (t as u64 + 1).wrapping_mul(0x9E37_79B9));
                let mut c = Client::connect(port);
                let (mut seq, mut checked, mut ops) = (0, 0u64, 0);
                while Instant::now() < deadline && ops < 60_000 {
                    ops += 1;
                    let key = &keys[rng.below(keys.len() as u64) as usize];
                    if rng.chance(0.5) {
                        seq += 1;
                        let len = if rng.chance(0.1) {
                            rng.range_usize(1000, 20_000)
                        } else {
                            rng.range_usize(MIN_VALUE_LEN, 200)
                        };
                        // Most items live a second or two, so expiry never stops.
                        let exptime = if rng.chance(0.8) { 1 } else { 0 };
                        let mut req = format!("set {key} {t} {exptime} {len}\r\n").into_bytes();
                        req.extend_from_slice(&make_value(key, t, seq, len));
                        req.extend_from_slice(b"\r\n");
                        if c.request(&req) != b"STORED\r\n" {
                            return Err(format!("set {key} not stored"));
                        }
                    } else {
                        let others: Vec<&str> = (0..6)
                            .map(|_| keys[rng.below(keys.len() as u64) as usize].as_str())
                            .collect();
                        let line = format!("get {key} {}\r\n", others.join(" "));
                        for (k, flags, data) in parse_values(&c.request(line.as_bytes()))? {
                            let (writer, _) = check_value(&k, &data)?;
                            if flags as usize != writer {
                                return Err(format!("{k}: flags {flags} for writer {writer}"));
                            }
                            checked += 1;
                        }
                    }
                }
                Ok(checked)
            })
        })
        .collect();
    let mut checked = 0;
    for h in handles {
        checked += h
            .join()
            .expect("client thread panicked")
            .unwrap_or_else(|e| panic!("seed {seed} (FERRO_SEED replays it): {e}"));
    }
    let crawls = crawler.join().expect("crawler thread panicked").unwrap();
    let stats = server.stats("");
    let reclaimed: u64 = stats["crawler_reclaimed"].parse().unwrap();
    eprintln!("{checked} values checked, {crawls} crawls, {reclaimed} items reclaimed");
    assert!(checked > 100, "too little work: {checked} values read");
    assert!(crawls > 10, "only {crawls} crawls ran");
    assert!(reclaimed > 0, "no expired item was reclaimed: {stats:?}");
}

#[test]
fn value_check_catches_torn_and_misfiled_values() {
    let a = make_value("hot0", 1, 5, 200);
    let b = make_value("hot0", 2, 9, 200);
    assert_eq!(check_value("hot0", &a), Ok((1, 5)));
    let mut torn = a[..100].to_vec();
    torn.extend_from_slice(&b[100..]);
    assert!(check_value("hot0", &torn).is_err());
    assert!(check_value("hot1", &a).is_err());
    assert!(check_value("hot0", &a[..150]).is_err());
}
