//! Wire tests: exact reply bytes from the server under test, command by command.
//!
//! Every expectation here was checked against memcached 1.6.18 (run this file with
//! `FERRO_TEST_SERVER=memcached` to check them again). The differential test covers the
//! same ground at random; these tests say what each reply is, so a failure reads plainly.

use crate::common;

use std::time::Duration;

use common::{escape, Client, Ending, ServerKind, ServerProcess};

/// The flags most tests use.
const ARGS: &[&str] = &["-t", "2", "-m", "64", "-U", "0"];

fn start() -> ServerProcess {
    ServerProcess::start(ServerKind::under_test(), ARGS)
}

/// Sends `request` (then the barrier) and asserts the exact reply.
#[track_caller]
fn expect(conn: &mut Client, request: &[u8], expected: &[u8]) {
    let reply = conn.request(request);
    assert_eq!(
        escape(&reply),
        escape(expected),
        "request: {}",
        escape(request)
    );
}

/// `mn` alone answers `MN` (it is also the barrier, so it cannot go through `expect`).
#[track_caller]
fn expect_mn(conn: &mut Client) {
    conn.send(b"mn\r\n");
    let reply = conn.read_until(Duration::from_secs(5), |b| b.ends_with(b"MN\r\n"));
    assert_eq!(escape(&reply.bytes), "MN\\r\\n");
}

/// The CAS unique of `key`, read with `gets`.
fn cas_of(conn: &mut Client, key: &str) -> u64 {
    let reply = conn.request_str(&format!("gets {key}\r\n"));
    let header = reply.lines().next().unwrap_or_default();
    let fields: Vec<&str> = header.split(' ').collect();
    assert!(
        fields.len() == 5 && fields[0] == "VALUE",
        "gets {key}: {reply:?}"
    );
    fields[4].parse().expect("numeric cas")
}

#[test]
fn storage_commands() {
    let server = start();
    let mut c = server.connect();
    expect(&mut c, b"set a 0 0 5\r\nhello\r\n", b"STORED\r\n");
    expect(&mut c, b"get a\r\n", b"VALUE a 0 5\r\nhello\r\nEND\r\n");
    expect(&mut c, b"set a 42 0 3\r\nabc\r\n", b"STORED\r\n");
    expect(&mut c, b"get a\r\n", b"VALUE a 42 3\r\nabc\r\nEND\r\n");
    expect(&mut c, b"add a 0 0 1\r\nx\r\n", b"NOT_STORED\r\n");
    expect(&mut c, b"add b 7 0 1\r\nx\r\n", b"STORED\r\n");
    expect(&mut c, b"replace c 0 0 1\r\nx\r\n", b"NOT_STORED\r\n");
    expect(&mut c, b"replace b 8 0 2\r\nyz\r\n", b"STORED\r\n");
    expect(&mut c, b"get b\r\n", b"VALUE b 8 2\r\nyz\r\nEND\r\n");
    // append/prepend keep the item's flags and ignore the command's.
    expect(&mut c, b"append b 99 0 2\r\n+1\r\n", b"STORED\r\n");
    expect(&mut c, b"prepend b 99 0 2\r\n0-\r\n", b"STORED\r\n");
    expect(&mut c, b"get b\r\n", b"VALUE b 8 6\r\n0-yz+1\r\nEND\r\n");
    expect(&mut c, b"append c 0 0 1\r\nx\r\n", b"NOT_STORED\r\n");
    expect(&mut c, b"prepend c 0 0 1\r\nx\r\n", b"NOT_STORED\r\n");
    // Empty values, values with CRLF inside, the largest flags.
    expect(&mut c, b"set e 0 0 0\r\n\r\n", b"STORED\r\n");
    expect(&mut c, b"get e\r\n", b"VALUE e 0 0\r\n\r\nEND\r\n");
    expect(&mut c, b"set e 4294967295 0 4\r\na\r\nb\r\n", b"STORED\r\n");
    expect(
        &mut c,
        b"get e\r\n",
        b"VALUE e 4294967295 4\r\na\r\nb\r\nEND\r\n",
    );
    // Lines may end in a bare \n; the data block may not.
    expect(
        &mut c,
        b"set n 0 0 1\nx\r\nget n\n",
        b"STORED\r\nVALUE n 0 1\r\nx\r\nEND\r\n",
    );
}

#[test]
fn noreply_suppresses_replies() {
    let server = start();
    let mut c = server.connect();
    let requests: &[&[u8]] = &[
        b"set a 0 0 1 noreply\r\n1\r\n",
        b"add a 0 0 1 noreply\r\n2\r\n",
        b"add b 0 0 1 noreply\r\n2\r\n",
        b"replace b 0 0 2 noreply\r\n20\r\n",
        b"append b 0 0 1 noreply\r\n0\r\n",
        b"prepend b 0 0 1 noreply\r\n1\r\n",
        b"cas b 0 0 1 1 noreply\r\nx\r\n",
        b"incr a 5 noreply\r\n",
        b"decr b 1 noreply\r\n",
        b"touch a 0 noreply\r\n",
        b"delete nokey noreply\r\n",
        b"verbosity 0 noreply\r\n",
    ];
    for r in requests {
        expect(&mut c, r, b"");
    }
    expect(
        &mut c,
        b"get a b\r\n",
        b"VALUE a 0 1\r\n6\r\nVALUE b 0 4\r\n1199\r\nEND\r\n",
    );
    expect(&mut c, b"delete a noreply\r\nget a\r\n", b"END\r\n");
    expect(&mut c, b"flush_all noreply\r\nget b\r\n", b"END\r\n");
}

#[test]
fn cas_command() {
    let server = start();
    let mut c = server.connect();
    expect(&mut c, b"cas a 0 0 1 1\r\nx\r\n", b"NOT_FOUND\r\n");
    expect(&mut c, b"set a 0 0 1\r\nx\r\n", b"STORED\r\n");
    let cas = cas_of(&mut c, "a");
    expect(
        &mut c,
        format!("cas a 0 0 1 {}\r\ny\r\n", cas + 1000).as_bytes(),
        b"EXISTS\r\n",
    );
    expect(
        &mut c,
        format!("cas a 3 0 1 {cas}\r\ny\r\n").as_bytes(),
        b"STORED\r\n",
    );
    // The old CAS is spent.
    expect(
        &mut c,
        format!("cas a 0 0 1 {cas}\r\nz\r\n").as_bytes(),
        b"EXISTS\r\n",
    );
    let next = cas_of(&mut c, "a");
    assert_ne!(cas, next, "a store must give a new CAS unique");
    expect(
        &mut c,
        b"gets a\r\n",
        format!("VALUE a 3 1 {next}\r\ny\r\nEND\r\n").as_bytes(),
    );
    expect(
        &mut c,
        b"cas a 0 0 1 abc\r\nx\r\n",
        b"CLIENT_ERROR bad command line format\r\nERROR\r\n",
    );
    expect(&mut c, b"cas a 0 0 1\r\nx\r\n", b"ERROR\r\nERROR\r\n");
    // Every store gives a new CAS unique; gets shows it.
    expect(&mut c, b"set b 0 0 1\r\nx\r\n", b"STORED\r\n");
    let b1 = cas_of(&mut c, "b");
    expect(&mut c, b"append b 0 0 1\r\ny\r\n", b"STORED\r\n");
    assert_ne!(b1, cas_of(&mut c, "b"));
}

#[test]
fn retrieval_commands() {
    let server = start();
    let mut c = server.connect();
    expect(&mut c, b"get nokey\r\n", b"END\r\n");
    expect(&mut c, b"gets nokey\r\n", b"END\r\n");
    expect(
        &mut c,
        b"set a 1 0 1\r\nA\r\nset b 2 0 2\r\nBB\r\n",
        b"STORED\r\nSTORED\r\n",
    );
    expect(
        &mut c,
        b"get b nokey a b\r\n",
        b"VALUE b 2 2\r\nBB\r\nVALUE a 1 1\r\nA\r\nVALUE b 2 2\r\nBB\r\nEND\r\n",
    );
    // 30 keys: past memcached's 24-token tokenizer window.
    let keys = ["a"; 30].join(" ");
    let mut expected = b"VALUE a 1 1\r\nA\r\n".repeat(30);
    expected.extend_from_slice(b"END\r\n");
    expect(&mut c, format!("get {keys}\r\n").as_bytes(), &expected);
    // gets carries the CAS unique; gat/gats touch and return.
    let cas = cas_of(&mut c, "a");
    expect(&mut c, b"gat 0 a nokey\r\n", b"VALUE a 1 1\r\nA\r\nEND\r\n");
    expect(
        &mut c,
        b"gats 1000 a\r\n",
        format!("VALUE a 1 1 {cas}\r\nA\r\nEND\r\n").as_bytes(),
    );
    expect(&mut c, b"gat 0 nokey\r\n", b"END\r\n");
    expect(
        &mut c,
        b"gat abc a\r\n",
        b"CLIENT_ERROR invalid exptime argument\r\n",
    );
    // gat with a negative exptime returns the item, which then is gone.
    expect(&mut c, b"gat -1 a\r\n", b"VALUE a 1 1\r\nA\r\nEND\r\n");
    expect(&mut c, b"get a\r\n", b"END\r\n");
    // Wrong token counts.
    expect(&mut c, b"get\r\n", b"ERROR\r\n");
    // gat with an exptime but no key is an empty hit list, not an error.
    expect(&mut c, b"gat 0\r\n", b"END\r\n");
    expect(&mut c, b"gat\r\n", b"ERROR\r\n");
}

#[test]
fn key_length_limit() {
    let server = start();
    let mut c = server.connect();
    let ok = "k".repeat(250);
    let long = "k".repeat(251);
    expect(
        &mut c,
        format!("set {ok} 0 0 1\r\nx\r\n").as_bytes(),
        b"STORED\r\n",
    );
    expect(
        &mut c,
        format!("get {ok}\r\n").as_bytes(),
        format!("VALUE {ok} 0 1\r\nx\r\nEND\r\n").as_bytes(),
    );
    // The line is rejected; its data block is then read as a command line.
    expect(
        &mut c,
        format!("set {long} 0 0 1\r\nx\r\n").as_bytes(),
        b"CLIENT_ERROR bad command line format\r\nERROR\r\n",
    );
    expect(
        &mut c,
        format!("get {long}\r\n").as_bytes(),
        b"CLIENT_ERROR bad command line format\r\n",
    );
    expect(
        &mut c,
        format!("get {ok} {long}\r\n").as_bytes(),
        b"CLIENT_ERROR bad command line format\r\n",
    );
    for command in ["incr {} 1", "decr {} 1", "touch {} 0", "delete {}"] {
        expect(
            &mut c,
            format!("{}\r\n", command.replace("{}", &long)).as_bytes(),
            b"CLIENT_ERROR bad command line format\r\n",
        );
    }
    // Control characters are legal in keys.
    expect(&mut c, b"set a\x01\x7f 0 0 1\r\nx\r\n", b"STORED\r\n");
    expect(
        &mut c,
        b"get a\x01\x7f\r\n",
        b"VALUE a\x01\x7f 0 1\r\nx\r\nEND\r\n",
    );
}

#[test]
fn too_long_key_in_get_drops_unsent_replies() {
    // memcached discards replies it has not sent yet when a get-family command has a key
    // over 250 bytes; a get that succeeds sends its reply at once.
    let server = start();
    let mut c = server.connect();
    let long = "k".repeat(251);
    expect(
        &mut c,
        format!("set a 0 0 1\r\nx\r\nget {long}\r\n").as_bytes(),
        b"CLIENT_ERROR bad command line format\r\n",
    );
    expect(
        &mut c,
        format!("get a\r\ndelete a\r\ngat 0 a {long}\r\n").as_bytes(),
        b"VALUE a 0 1\r\nx\r\nEND\r\nCLIENT_ERROR bad command line format\r\n",
    );
}

#[test]
fn bad_command_lines() {
    let server = start();
    let mut c = server.connect();
    let cases: &[(&[u8], &[u8])] = &[
        (b"\r\n", b"ERROR\r\n"),
        (b"bogus\r\n", b"ERROR\r\n"),
        (b"GET a\r\n", b"ERROR\r\n"),
        (b"set\r\n", b"ERROR\r\n"),
        (b"set a 0 0\r\n", b"ERROR\r\n"),
        (b"set a 0 0 1 noreply extra\r\nx\r\n", b"ERROR\r\nERROR\r\n"),
        (b"incr a\r\n", b"ERROR\r\n"),
        (b"touch a\r\n", b"ERROR\r\n"),
        (b"delete\r\n", b"ERROR\r\n"),
        (
            b"set a -1 0 1\r\nx\r\n",
            b"CLIENT_ERROR bad command line format\r\nERROR\r\n",
        ),
        (
            b"set a abc 0 1\r\nx\r\n",
            b"CLIENT_ERROR bad command line format\r\nERROR\r\n",
        ),
        (
            b"set a 0 abc 1\r\nx\r\n",
            b"CLIENT_ERROR bad command line format\r\nERROR\r\n",
        ),
        (
            b"set a 0 0 -1\r\nx\r\n",
            b"CLIENT_ERROR bad command line format\r\nERROR\r\n",
        ),
        (
            b"set a 0 0 abc\r\nx\r\n",
            b"CLIENT_ERROR bad command line format\r\nERROR\r\n",
        ),
        // Data longer than declared: the block does not end in CRLF.
        (
            b"set a 0 0 3\r\nhello\r\n",
            b"CLIENT_ERROR bad data chunk\r\nERROR\r\n",
        ),
        (b"set a 0 0 3 noreply\r\nhello\r\n", b"ERROR\r\n"),
        (
            b"delete a 1\r\n",
            b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n",
        ),
        (
            b"incr a abc\r\n",
            b"CLIENT_ERROR invalid numeric delta argument\r\n",
        ),
        (
            b"touch a abc\r\n",
            b"CLIENT_ERROR invalid exptime argument\r\n",
        ),
        (b"verbosity\r\n", b"ERROR\r\n"),
        (b"shutdown\r\n", b"ERROR: shutdown not enabled\r\n"),
        // A NUL ends the line as memcached sees it.
        (b"get a\x00 b\r\n", b"END\r\n"),
    ];
    for (request, reply) in cases {
        expect(&mut c, request, reply);
    }
    // The connection is still in sync after all of that.
    expect(
        &mut c,
        b"set ok 0 0 2\r\nok\r\nget ok\r\n",
        b"STORED\r\nVALUE ok 0 2\r\nok\r\nEND\r\n",
    );
}

#[test]
fn flags_exptime_and_length_edges() {
    let server = start();
    let mut c = server.connect();
    // memcached parses flags as an unsigned long and keeps the low 32 bits.
    expect(&mut c, b"set f 4294967296 0 1\r\nx\r\n", b"STORED\r\n");
    expect(&mut c, b"get f\r\n", b"VALUE f 0 1\r\nx\r\nEND\r\n");
    // Negative exptime, or an absolute time in the past: stored, and gone at once.
    expect(
        &mut c,
        b"set f 0 -1 1\r\nx\r\nget f\r\n",
        b"STORED\r\nEND\r\n",
    );
    expect(
        &mut c,
        b"set f 0 2592001 1\r\nx\r\nget f\r\n",
        b"STORED\r\nEND\r\n",
    );
    // Up to 30 days is relative; an absolute time in the future lives.
    expect(
        &mut c,
        b"set f 0 2592000 1\r\nx\r\nget f\r\n",
        b"STORED\r\nVALUE f 0 1\r\nx\r\nEND\r\n",
    );
    expect(
        &mut c,
        b"set f 0 2000000000 1\r\nx\r\nget f\r\n",
        b"STORED\r\nVALUE f 0 1\r\nx\r\nEND\r\n",
    );
    expect(&mut c, b"touch f -1\r\nget f\r\n", b"TOUCHED\r\nEND\r\n");
}

#[test]
fn oversized_values_are_swallowed() {
    let server = start();
    let mut c = server.connect();
    expect(&mut c, b"set big 0 0 1\r\nx\r\n", b"STORED\r\n");
    let len = 1024 * 1024 + 1;
    let mut request = format!("set big 0 0 {len}\r\n").into_bytes();
    request.resize(request.len() + len, b'v');
    request.extend_from_slice(b"\r\nget big\r\n");
    // The data block is swallowed (the connection stays in sync), and a failed set
    // removes the old value.
    expect(
        &mut c,
        &request,
        b"SERVER_ERROR object too large for cache\r\nEND\r\n",
    );
    // At the limit: 48 + key + 1 + data + 2 + 8 (CAS) bytes must fit in 1 MB.
    for (flags, extra) in [(0u32, 0usize), (5, 4)] {
        let max = 1024 * 1024 - 48 - (3 + 1) - extra - 2 - 8;
        for (len, reply) in [
            (max, &b"STORED\r\n"[..]),
            (max + 1, b"SERVER_ERROR object too large for cache\r\n"),
        ] {
            let mut request = format!("set big {flags} 0 {len}\r\n").into_bytes();
            request.resize(request.len() + len, b'w');
            request.extend_from_slice(b"\r\n");
            expect(&mut c, &request, reply);
        }
    }
}

#[test]
fn item_size_max_flag() {
    let server = ServerProcess::start(ServerKind::under_test(), &["-m", "64", "-I", "2m"]);
    let mut c = server.connect();
    let len = 1536 * 1024;
    let mut request = format!("set big 0 0 {len}\r\n").into_bytes();
    request.resize(request.len() + len, b'v');
    request.extend_from_slice(b"\r\n");
    expect(&mut c, &request, b"STORED\r\n");
    let reply = c.request(b"get big\r\n");
    assert_eq!(
        reply.len(),
        format!("VALUE big 0 {len}\r\n").len() + len + 2 + 5
    );
    assert!(reply.ends_with(b"vv\r\nEND\r\n"));
}

#[test]
fn incr_decr() {
    let server = start();
    let mut c = server.connect();
    expect(&mut c, b"incr n 1\r\n", b"NOT_FOUND\r\n");
    expect(&mut c, b"decr n 1\r\n", b"NOT_FOUND\r\n");
    expect(&mut c, b"set n 5 0 2\r\n10\r\n", b"STORED\r\n");
    expect(&mut c, b"incr n 5\r\n", b"15\r\n");
    expect(&mut c, b"decr n 3\r\n", b"12\r\n");
    // decr stops at 0.
    expect(&mut c, b"decr n 100\r\n", b"0\r\n");
    // A shorter result is written in place, padded with spaces; flags are kept.
    expect(&mut c, b"get n\r\n", b"VALUE n 5 2\r\n0 \r\nEND\r\n");
    expect(
        &mut c,
        b"set n 0 0 3\r\n100\r\ndecr n 95\r\nget n\r\n",
        b"STORED\r\n5\r\nVALUE n 0 3\r\n5  \r\nEND\r\n",
    );
    // A longer result makes a new item of the exact length.
    expect(
        &mut c,
        b"set n 0 0 2\r\n99\r\nincr n 1\r\nget n\r\n",
        b"STORED\r\n100\r\nVALUE n 0 3\r\n100\r\nEND\r\n",
    );
    // incr wraps at 2^64.
    expect(
        &mut c,
        b"set n 0 0 20\r\n18446744073709551615\r\nincr n 2\r\n",
        b"STORED\r\n1\r\n",
    );
    expect(&mut c, b"incr n 18446744073709551615\r\n", b"0\r\n");
    // A number followed by a space parses; other values do not.
    expect(
        &mut c,
        b"set n 0 0 6\r\n12 abc\r\nincr n 1\r\n",
        b"STORED\r\n13\r\n",
    );
    for value in ["abc", "-5", "", "1.5"] {
        expect(
            &mut c,
            format!("set n 0 0 {}\r\n{value}\r\nincr n 1\r\n", value.len()).as_bytes(),
            b"STORED\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
        );
    }
    // memcached parses the value with strtoull: leading digits then a space is a number
    // whatever follows, digits then anything else is not, however long the value.
    let long_tail = "q".repeat(3000);
    expect(
        &mut c,
        format!("set n 0 0 3003\r\n12 {long_tail}\r\nincr n 1\r\n").as_bytes(),
        b"STORED\r\n13\r\n",
    );
    for value in [
        "1x".to_string(),
        format!("4x{long_tail}"),
        format!("77{long_tail}"),
    ] {
        expect(
            &mut c,
            format!("set n 0 0 {}\r\n{value}\r\nincr n 1\r\n", value.len()).as_bytes(),
            b"STORED\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
        );
    }
    // An item over 512 KB in all (memcached's slab_chunk_max: 48 + key + 1 + flags 4 if
    // non-zero + data + 2 + CAS 8) is stored in chunks, and memcached will not do
    // arithmetic on a chunked item.
    for (flags, extra) in [(0u32, 0usize), (5, 4)] {
        let unchunked = 512 * 1024 - 48 - (3 + 1) - extra - 2 - 8;
        for (len, reply) in [
            (unchunked, &b"8\r\n"[..]),
            (
                unchunked + 1,
                b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
            ),
        ] {
            let mut request = format!("set big {flags} 0 {len}\r\n7").into_bytes();
            request.resize(request.len() + len - 1, b' ');
            request.extend_from_slice(b"\r\nincr big 1\r\n");
            let mut expected = b"STORED\r\n".to_vec();
            expected.extend_from_slice(reply);
            expect(&mut c, &request, &expected);
        }
    }
    // Bad deltas.
    for delta in ["-1", "abc", "18446744073709551616", "99999999999999999999"] {
        expect(
            &mut c,
            format!("incr n {delta}\r\n").as_bytes(),
            b"CLIENT_ERROR invalid numeric delta argument\r\n",
        );
    }
}

#[test]
fn delete_and_touch() {
    let server = start();
    let mut c = server.connect();
    expect(&mut c, b"delete a\r\n", b"NOT_FOUND\r\n");
    expect(&mut c, b"set a 0 0 1\r\nx\r\n", b"STORED\r\n");
    expect(&mut c, b"delete a\r\n", b"DELETED\r\n");
    expect(&mut c, b"get a\r\n", b"END\r\n");
    expect(
        &mut c,
        b"set a 0 0 1\r\nx\r\ndelete a 0\r\n",
        b"STORED\r\nDELETED\r\n",
    );
    expect(
        &mut c,
        b"delete a 0 junk\r\n",
        b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n",
    );
    expect(&mut c, b"touch a 0\r\n", b"NOT_FOUND\r\n");
    expect(
        &mut c,
        b"set a 0 0 1\r\nx\r\ntouch a 1000\r\n",
        b"STORED\r\nTOUCHED\r\n",
    );
    expect(&mut c, b"get a\r\n", b"VALUE a 0 1\r\nx\r\nEND\r\n");
}

#[test]
fn flush_all_verbosity_version_mn() {
    let server = start();
    let mut c = server.connect();
    expect(
        &mut c,
        b"set a 0 0 1\r\nx\r\nset b 0 0 1\r\ny\r\n",
        b"STORED\r\nSTORED\r\n",
    );
    expect(&mut c, b"flush_all\r\n", b"OK\r\n");
    expect(&mut c, b"get a b\r\n", b"END\r\n");
    expect(
        &mut c,
        b"set a 0 0 1\r\nx\r\nflush_all 0\r\nget a\r\n",
        b"STORED\r\nOK\r\nEND\r\n",
    );
    expect(
        &mut c,
        b"flush_all abc\r\n",
        b"CLIENT_ERROR invalid exptime argument\r\n",
    );
    // Items stored after a flush live.
    expect(
        &mut c,
        b"set a 0 0 1\r\nz\r\nget a\r\n",
        b"STORED\r\nVALUE a 0 1\r\nz\r\nEND\r\n",
    );
    expect(&mut c, b"verbosity 1\r\n", b"OK\r\n");
    expect(&mut c, b"verbosity 0\r\n", b"OK\r\n");
    expect_mn(&mut c);
    let version = c.request_str("version\r\n");
    assert!(
        version.starts_with("VERSION ") && version.ends_with("\r\n") && version.len() > 10,
        "version replied {version:?}"
    );
}

#[test]
fn cache_memlimit_changes_the_limit() {
    let server = start();
    let mut c = server.connect();
    let limit = |c: &mut Client| -> (String, String) {
        let stats = c.stats("");
        let settings = c.stats("settings");
        (
            stats["limit_maxbytes"].clone(),
            settings["maxbytes"].clone(),
        )
    };
    assert_eq!(limit(&mut c), ("67108864".into(), "67108864".into()));
    expect(&mut c, b"cache_memlimit 100\r\n", b"OK\r\n");
    assert_eq!(limit(&mut c), ("104857600".into(), "104857600".into()));
    expect(&mut c, b"cache_memlimit 8\r\n", b"OK\r\n");
    expect(&mut c, b"cache_memlimit 32 noreply\r\n", b"");
    assert_eq!(limit(&mut c), ("33554432".into(), "33554432".into()));
    expect(
        &mut c,
        b"cache_memlimit 7\r\n",
        b"MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n",
    );
    expect(
        &mut c,
        b"cache_memlimit 2000000000\r\n",
        b"MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes\r\n",
    );
    expect(&mut c, b"cache_memlimit abc\r\n", b"ERROR\r\n");
    expect(&mut c, b"cache_memlimit\r\n", b"ERROR\r\n");
    assert_eq!(limit(&mut c), ("33554432".into(), "33554432".into()));
    // Still a cache after all that.
    expect(
        &mut c,
        b"set a 0 0 1\r\nx\r\nget a\r\n",
        b"STORED\r\nVALUE a 0 1\r\nx\r\nEND\r\n",
    );
}

/// memcached refuses `cache_memlimit` when its memory was allocated at start (`-L`);
/// ferrocache's large-page mapping is sized at start too.
#[test]
fn cache_memlimit_is_refused_with_large_pages() {
    if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists() {
        return; // -L falls back to normal pages, which can be adjusted.
    }
    let server = ServerProcess::start(ServerKind::under_test(), &["-m", "64", "-U", "0", "-L"]);
    let mut c = server.connect();
    expect(
        &mut c,
        b"cache_memlimit 100\r\n",
        b"MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust\r\n",
    );
    assert_eq!(c.stats("")["limit_maxbytes"], "67108864");
}

#[test]
fn pipelined_requests_in_one_write_and_split() {
    let server = start();
    let mut c = server.connect();
    let mut request = Vec::new();
    let mut expected = Vec::new();
    for i in 0..200 {
        request.extend_from_slice(
            format!("set k{i} {i} 0 {}\r\nv{i}\r\n", 1 + i.to_string().len()).as_bytes(),
        );
        expected.extend_from_slice(b"STORED\r\n");
    }
    for i in 0..200 {
        request.extend_from_slice(format!("get k{i}\r\n").as_bytes());
        expected.extend_from_slice(
            format!(
                "VALUE k{i} {i} {}\r\nv{i}\r\nEND\r\n",
                1 + i.to_string().len()
            )
            .as_bytes(),
        );
    }
    expect(&mut c, &request, &expected);
    // The same bytes one at a time.
    let mut rng = common::Rng::new(1);
    let mut slow = request.clone();
    slow.extend_from_slice(b"mn\r\n");
    c.send_in_pieces(&slow, &mut rng, 1, false);
    let reply = c.read_reply();
    assert_eq!(reply.ending, Ending::Done, "{}", reply.describe());
    assert_eq!(escape(&reply.bytes), escape(&expected));
}

#[test]
fn stats_fields_and_counters() {
    let server = start();
    let mut c = server.connect();
    let before = c.stats("");
    const FIELDS: &[&str] = &[
        "pid",
        "uptime",
        "time",
        "version",
        "curr_connections",
        "total_connections",
        "rejected_connections",
        "cmd_get",
        "cmd_set",
        "cmd_flush",
        "cmd_touch",
        "get_hits",
        "get_misses",
        "get_expired",
        "delete_hits",
        "delete_misses",
        "incr_hits",
        "incr_misses",
        "decr_hits",
        "decr_misses",
        "cas_hits",
        "cas_misses",
        "cas_badval",
        "touch_hits",
        "touch_misses",
        "bytes_read",
        "bytes_written",
        "limit_maxbytes",
        "threads",
        "bytes",
        "curr_items",
        "total_items",
        "evictions",
        "expired_unfetched",
        "evicted_unfetched",
        "reclaimed",
    ];
    for field in FIELDS {
        assert!(
            before.contains_key(*field),
            "stats lacks {field}: {before:?}"
        );
    }
    let num = |stats: &std::collections::HashMap<String, String>, field: &str| -> u64 {
        stats[field]
            .parse()
            .unwrap_or_else(|_| panic!("stat {field} = {:?} is not a number", stats[field]))
    };
    assert_eq!(num(&before, "pid"), u64::from(server.id()));
    assert_eq!(num(&before, "limit_maxbytes"), 64 * 1024 * 1024);
    assert_eq!(num(&before, "threads"), 2);
    assert_eq!(num(&before, "curr_items"), 0);
    assert!(num(&before, "curr_connections") >= 1);
    assert!(num(&before, "total_connections") >= 1);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(
        num(&before, "time").abs_diff(now) <= 5,
        "stat time is not now"
    );
    assert!(num(&before, "uptime") < 600);

    // Every counter moves as memcached's does.
    c.request(b"set a 0 0 1\r\n1\r\nset b 0 0 1\r\nx\r\n");
    c.request(b"get a b nokey\r\n"); // 3 gets: 2 hits, 1 miss
    c.request(b"delete b\r\ndelete b\r\n");
    c.request(b"incr a 1\r\nincr nokey 1\r\ndecr a 1\r\ndecr nokey 1\r\n");
    c.request(b"touch a 0\r\ntouch nokey 0\r\n");
    c.request(b"cas nokey 0 0 1 1\r\nx\r\ncas a 0 0 1 1\r\nx\r\n");
    let cas = cas_of(&mut c, "a");
    c.request(format!("cas a 0 0 1 {cas}\r\n2\r\n").as_bytes());
    c.request(b"set gone 0 -1 1\r\nx\r\nget gone\r\n");
    let after = c.stats("");
    let delta = |field: &str| num(&after, field) - num(&before, field);
    assert_eq!(delta("cmd_get"), 5, "cmd_get counts keys, gets included");
    assert_eq!(delta("get_hits"), 3);
    assert_eq!(delta("get_misses"), 2);
    assert_eq!(delta("cmd_set"), 6, "set, set, 3 cas, set");
    assert_eq!(delta("delete_hits"), 1);
    assert_eq!(delta("delete_misses"), 1);
    assert_eq!(delta("incr_hits"), 1);
    assert_eq!(delta("incr_misses"), 1);
    assert_eq!(delta("decr_hits"), 1);
    assert_eq!(delta("decr_misses"), 1);
    assert_eq!(delta("cmd_touch"), 2);
    assert_eq!(delta("touch_hits"), 1);
    assert_eq!(delta("touch_misses"), 1);
    assert_eq!(delta("cas_misses"), 1);
    assert_eq!(delta("cas_badval"), 1);
    assert_eq!(delta("cas_hits"), 1);
    assert_eq!(num(&after, "curr_items"), 1, "only a is left");
    assert!(num(&after, "total_items") >= 3);
    assert!(num(&after, "bytes") > 0);
    assert!(num(&after, "bytes_read") > num(&before, "bytes_read"));
    assert!(num(&after, "bytes_written") > num(&before, "bytes_written"));
    c.request(b"flush_all\r\n");
    assert_eq!(delta_of(&c.stats(""), &after, "cmd_flush"), 1);
}

fn delta_of(
    after: &std::collections::HashMap<String, String>,
    before: &std::collections::HashMap<String, String>,
    field: &str,
) -> u64 {
    after[field].parse::<u64>().unwrap() - before[field].parse::<u64>().unwrap()
}

#[test]
fn stats_settings_and_reset() {
    let server = ServerProcess::start(
        ServerKind::under_test(),
        &["-t", "3", "-m", "32", "-c", "500", "-U", "0"],
    );
    let mut c = server.connect();
    let settings = c.stats("settings");
    let expected = [
        ("maxbytes", "33554432".to_string()),
        ("maxconns", "500".to_string()),
        ("tcpport", server.port.to_string()),
        ("udpport", "0".to_string()),
        ("num_threads", "3".to_string()),
        ("item_size_max", "1048576".to_string()),
        ("cas_enabled", "yes".to_string()),
        ("evictions", "on".to_string()),
    ];
    for (name, value) in expected {
        assert_eq!(
            settings.get(name),
            Some(&value),
            "stats settings {name}: {settings:?}"
        );
    }

    c.request(b"get a b c\r\n");
    assert!(c.stats("")["cmd_get"].parse::<u64>().unwrap() >= 3);
    expect(&mut c, b"stats reset\r\n", b"RESET\r\n");
    let stats = c.stats("");
    for field in ["cmd_get", "get_misses", "cmd_set"] {
        assert_eq!(stats[field], "0", "{field} after stats reset");
    }
}

#[test]
fn quit_closes_the_connection() {
    let server = start();
    let mut c = server.connect();
    expect(&mut c, b"set a 0 0 1\r\nx\r\n", b"STORED\r\n");
    c.send(b"quit\r\n");
    let reply = c.read_to_close(Duration::from_secs(5));
    assert_eq!(reply.ending, Ending::Closed, "{}", reply.describe());
    assert!(reply.bytes.is_empty(), "quit replied {}", reply.describe());
    // Commands pipelined after quit are not run.
    let mut c = server.connect();
    c.send(b"get a\r\nquit\r\nset a 0 0 1\r\ny\r\n");
    let reply = c.read_to_close(Duration::from_secs(5));
    assert_eq!(escape(&reply.bytes), escape(b"VALUE a 0 1\r\nx\r\nEND\r\n"));
    let mut c = server.connect();
    expect(&mut c, b"get a\r\n", b"VALUE a 0 1\r\nx\r\nEND\r\n");
}

#[test]
fn shutdown_needs_dash_a() {
    let server = start();
    let mut c = server.connect();
    expect(&mut c, b"shutdown\r\n", b"ERROR: shutdown not enabled\r\n");
    expect_mn(&mut c);

    let mut server = ServerProcess::start(ServerKind::under_test(), &["-A", "-U", "0"]);
    let mut c = server.connect();
    c.send(b"shutdown\r\n");
    let reply = c.read_to_close(Duration::from_secs(5));
    assert_eq!(reply.ending, Ending::Closed, "{}", reply.describe());
    let status = server.wait_exit(Duration::from_secs(5));
    assert!(status.is_some(), "server still running 5 s after shutdown");
}

#[test]
fn connection_limit() {
    const MAXCONNS: usize = 32;
    let server = ServerProcess::start(
        ServerKind::under_test(),
        &["-c", &MAXCONNS.to_string(), "-t", "2", "-U", "0"],
    );
    let mut accepted: Vec<Client> = Vec::new();
    let mut rejected = 0;
    for i in 0..MAXCONNS + 10 {
        let mut c = server.connect();
        c.send(b"mn\r\n");
        let reply = c.read_until(Duration::from_secs(5), |b| {
            b.ends_with(b"MN\r\n") || b.ends_with(b"connections\r\n")
        });
        match reply.bytes.as_slice() {
            b"MN\r\n" => {
                assert_eq!(rejected, 0, "connection {i} accepted after one was refused");
                accepted.push(c);
            }
            b"ERROR Too many open connections\r\n" => {
                let rest = c.read_to_close(Duration::from_secs(5));
                assert_eq!(rest.ending, Ending::Closed, "refused connection left open");
                assert!(rest.bytes.is_empty(), "{}", rest.describe());
                rejected += 1;
            }
            _ => panic!("connection {i}: unexpected {}", reply.describe()),
        }
    }
    assert!(
        rejected > 0,
        "-c {MAXCONNS}: all {} connections accepted",
        MAXCONNS + 10
    );
    assert!(!accepted.is_empty() && accepted.len() <= MAXCONNS);
    // The connections already open still work.
    for (i, c) in accepted.iter_mut().enumerate() {
        expect(
            c,
            format!("set c{i} 0 0 1\r\nx\r\n").as_bytes(),
            b"STORED\r\n",
        );
    }
    // Closing one frees a slot (the server notices the close asynchronously).
    accepted.pop();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut c = loop {
        let mut c = server.connect();
        c.send(b"mn\r\n");
        let reply = c.read_until(Duration::from_secs(5), |b| {
            b.ends_with(b"MN\r\n") || b.ends_with(b"connections\r\n")
        });
        if reply.bytes == b"MN\r\n" {
            break c;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no slot after a close"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let stats = c.stats("");
    assert!(
        stats["rejected_connections"].parse::<u64>().unwrap() >= rejected,
        "rejected_connections {} < {rejected}",
        stats["rejected_connections"]
    );
}
