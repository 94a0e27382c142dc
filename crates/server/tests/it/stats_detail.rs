//! `stats detail on|off|dump`: counters per key prefix, against memcached 1.6.18.
//!
//! The same text and binary requests go to both servers, and every `stats detail dump`
//! must be byte-identical: the same prefixes, counts and order (memcached dumps its
//! prefix hash table bucket by bucket, and ferrocache keeps the same table).

use crate::common;

use std::time::Duration;

use common::{escape, Client, Rng, ServerKind, ServerProcess};
use protocol::binary::{opcode as op, write_request};

const ARGS: &[&str] = &["-t", "1", "-U", "0"];

/// Text requests that touch keys of many prefixes, with every command memcached counts
/// (get, gets, gat, gats, the storage commands, delete) and some it does not (incr,
/// touch, meta), keys without a delimiter, an empty prefix and a value too large.
fn text_requests(seed: u64, delimiter: char) -> Vec<String> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    for i in 0..300 {
        let prefix = format!("p{}", rng.below(40));
        let key = match rng.below(20) {
            0 => format!("nodelim{i}"),
            1 => format!("{delimiter}empty{i}"),
            2 => format!("{prefix}{delimiter}{delimiter}double"),
            _ => format!("{prefix}{delimiter}{}", rng.below(5)),
        };
        let line = match rng.below(14) {
            0..=2 => format!("set {key} 0 0 1\r\nv\r\n"),
            3 => format!("add {key} 0 0 1\r\nv\r\n"),
            4 => format!("cas {key} 0 0 1 99\r\nv\r\n"),
            5 => format!("append {key} 0 0 1 noreply\r\nw\r\n"),
            6 | 7 => format!("get {key} {prefix}{delimiter}x\r\n"),
            8 => format!("gets {key}\r\n"),
            9 => format!("gat 0 {key}\r\n"),
            10 => format!("delete {key}\r\n"),
            11 => format!("incr {key} 1\r\ntouch {key} 0\r\n"),
            12 => format!("mg {key} v\r\nms {key} 1\r\nm\r\n"),
            _ => format!("set {key} 0 0 2000000\r\n{}\r\n", "z".repeat(2_000_000)),
        };
        out.push(line);
    }
    out
}

fn binary_requests() -> Vec<u8> {
    let flags = [0u8; 8];
    let mut out = Vec::new();
    let mut add = |opcode, extras: &[u8], key: &[u8], value: &[u8]| {
        write_request(&mut out, opcode, extras, key, value, 7, 0);
    };
    add(op::SET, &flags, b"bs:1", b"x");
    add(op::ADD, &flags, b"ba:1", b"x");
    add(op::REPLACE, &flags, b"br:1", b"x");
    add(op::APPEND, &[], b"bs:1", b"y");
    add(op::PREPEND, &[], b"bp:1", b"y");
    add(op::GET, &[], b"bs:1", b"");
    add(op::GETQ, &[], b"bm:1", b"");
    add(op::GETK, &[], b"bs:1", b"");
    add(op::TOUCH, &[0; 4], b"bt:1", b"");
    add(op::GAT, &[0; 4], b"bs:1", b"");
    add(op::DELETE, &[], b"bs:1", b"");
    add(op::DELETE, &[], b"bd:1", b"");
    add(op::INCREMENT, &[0; 20], b"bi:1", b"");
    add(op::SET, &flags, b"big:1", &vec![b'z'; 2_000_000]);
    add(op::NOOP, &[], b"", b"");
    out
}

/// Sends the binary requests on a connection of their own and waits for the NOOP's
/// reply, the last.
fn run_binary(server: &ServerProcess) {
    let mut conn = server.connect();
    conn.send(&binary_requests());
    let reply = conn.read_until(Duration::from_secs(10), |b| {
        b.len() >= 24 && b[b.len() - 24] == 0x81 && b[b.len() - 23] == op::NOOP
    });
    assert!(
        reply.bytes.len() >= 24 && reply.bytes[reply.bytes.len() - 23] == op::NOOP,
        "{}: binary requests got {}",
        server.describe(),
        reply.describe()
    );
}

/// A binary STAT of `group` on a connection of its own: every byte of the reply, up to
/// and including the empty stat that ends it.
fn binary_stat(server: &ServerProcess, group: &[u8]) -> Vec<u8> {
    let mut request = Vec::new();
    write_request(&mut request, op::STAT, &[], group, b"", 9, 0);
    let mut conn = server.connect();
    conn.send(&request);
    let ended = |b: &[u8]| {
        b.len() >= 24 && {
            let h = &b[b.len() - 24..];
            h[0] == 0x81 && h[1] == op::STAT && h[2..4] == [0, 0] && h[8..12] == [0; 4]
        }
    };
    let reply = conn.read_until(Duration::from_secs(10), ended);
    assert!(
        ended(&reply.bytes),
        "{}: {}",
        server.describe(),
        reply.describe()
    );
    reply.bytes
}

struct Side {
    server: ServerProcess,
    conn: Client,
}

impl Side {
    fn start(kind: ServerKind, extra: &[&str]) -> Side {
        let mut args = ARGS.to_vec();
        args.extend_from_slice(extra);
        let server = ServerProcess::start(kind, &args);
        let conn = server.connect();
        Side { server, conn }
    }
}

fn both(extra: &[&str]) -> (Side, Side) {
    (
        Side::start(ServerKind::Memcached, extra),
        Side::start(ServerKind::under_test(), extra),
    )
}

/// Sends `request` to both and requires the same reply; returns it.
fn same(pair: &mut (Side, Side), request: &str) -> String {
    let want = pair.0.conn.request(request.as_bytes());
    let got = pair.1.conn.request(request.as_bytes());
    assert_eq!(
        escape(&got),
        escape(&want),
        "{} against {} for {}",
        pair.1.server.describe(),
        pair.0.server.describe(),
        escape(request.as_bytes())
    );
    String::from_utf8_lossy(&got).into_owned()
}

#[test]
fn text_and_binary_requests_count_as_in_memcached() {
    let mut pair = both(&[]);
    assert_eq!(same(&mut pair, "stats detail dump\r\n"), "END\r\n");
    same(&mut pair, "stats detail on\r\n");
    for request in text_requests(0xde7a11, ':') {
        same(&mut pair, &request);
    }
    run_binary(&pair.0.server);
    run_binary(&pair.1.server);
    let dump = same(&mut pair, "stats detail dump\r\n");
    assert!(dump.lines().count() > 40, "a dump of many prefixes: {dump}");
    // The binary protocol's STAT sends the same dump as one stat's value.
    let binary = binary_stat(&pair.1.server, b"detail dump");
    assert_eq!(
        escape(&binary),
        escape(&binary_stat(&pair.0.server, b"detail dump")),
        "binary STAT detail dump"
    );
    assert!(binary.windows(dump.len()).any(|w| w == dump.as_bytes()));
    let settings = |side: &mut Side| side.conn.stats("settings")["detail_enabled"].clone();
    assert_eq!(settings(&mut pair.1), "yes");
    // Off: nothing more is counted, and what was counted stays.
    same(&mut pair, "stats detail off\r\n");
    same(&mut pair, "get p1:0 p2:0\r\nset p3:0 0 0 1\r\nv\r\n");
    assert_eq!(same(&mut pair, "stats detail dump\r\n"), dump);
    assert_eq!(settings(&mut pair.1), "no");
    // Binary STAT detail on and off switch it too.
    for side in [&pair.0.server, &pair.1.server] {
        binary_stat(side, b"detail on");
    }
    same(&mut pair, "get p9:9\r\n");
    assert_eq!(settings(&mut pair.1), "yes");
    for side in [&pair.0.server, &pair.1.server] {
        binary_stat(side, b"detail off");
    }
    let counted = same(&mut pair, "stats detail dump\r\n");
    assert_ne!(counted, dump, "the get while on was counted");
    // `stats reset` forgets them.
    same(&mut pair, "stats reset\r\n");
    assert_eq!(same(&mut pair, "stats detail dump\r\n"), "END\r\n");
    for bad in ["stats detail\r\n", "stats detail dumpp\r\n"] {
        same(&mut pair, bad);
    }
}

#[test]
fn the_delimiter_is_dash_capital_d() {
    // memcached takes the first byte of `-D`.
    let mut pair = both(&["-D", "/x"]);
    assert_eq!(
        pair.1.conn.stats("settings")["stat_key_prefix"],
        pair.0.conn.stats("settings")["stat_key_prefix"]
    );
    same(&mut pair, "stats detail on\r\n");
    for request in text_requests(0x5eed, '/') {
        same(&mut pair, &request);
    }
    let dump = same(&mut pair, "stats detail dump\r\n");
    assert!(dump.starts_with("PREFIX "), "{dump}");
}

/// A multi-get whose replies outgrow the output buffer pauses and resumes; each key is
/// still counted once, and the large values' gets count as memcached's do.
#[test]
fn a_paused_multi_get_counts_each_key_once() {
    let mut pair = both(&[]);
    same(&mut pair, "stats detail on\r\n");
    let value = "L".repeat(200_000);
    for i in 0..30 {
        same(
            &mut pair,
            &format!("set big:{i} 0 0 {}\r\n{value}\r\n", value.len()),
        );
    }
    let keys: Vec<String> = (0..34).map(|i| format!("big:{i}")).collect();
    let reply = same(&mut pair, &format!("get {}\r\n", keys.join(" ")));
    assert_eq!(reply.matches("VALUE ").count(), 30);
    let dump = same(&mut pair, "stats detail dump\r\n");
    assert_eq!(dump, "PREFIX big get 34 hit 30 set 30 del 0\r\nEND\r\n");
}
