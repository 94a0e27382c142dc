//! `-vv` request logging against memcached's: both servers run with `-vv` and their
//! standard error in a file, get the same command streams, and must print the same
//! request and reply lines. Descriptor numbers differ between the two processes, so
//! `<FD`, `>FD` and `FD:` are normalised; start-up lines and the connection open/close
//! lines are left out (they are not per-request lines).
//!
//! A reply reaches the client after its lines were written (both servers log before
//! they send), but the logs are still polled with a generous deadline, never slept on.

use crate::common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{escape, Client, Ending, ServerKind, ServerProcess};

/// Both servers: one worker, 64 MB, no UDP, `-vv`.
const ARGS: &[&str] = &["-vv", "-t", "1", "-m", "64", "-U", "0"];
/// memcached's background threads make `incr`'s in-place rewrite nondeterministic
/// (see `differential.rs`); they change no log line.
const MEMCACHED_ARGS: &[&str] = &["-o", "no_lru_crawler,no_lru_maintainer"];
/// How long a log may take to show a line the client already has the reply to.
const LOG_DEADLINE: Duration = Duration::from_secs(10);

/// A server with its standard error in a file.
struct Logged {
    server: ServerProcess,
    path: PathBuf,
}

impl Logged {
    fn start(kind: ServerKind, test: &str) -> Logged {
        let path = std::env::temp_dir().join(format!(
            "ferrocache-verbose-{}-{test}-{}.log",
            std::process::id(),
            kind.name()
        ));
        let _ = std::fs::remove_file(&path);
        let mut args = ARGS.to_vec();
        if kind == ServerKind::Memcached {
            args.extend_from_slice(MEMCACHED_ARGS);
        }
        let server = ServerProcess::start_with(kind, &args, &[], Some(&path));
        Logged { server, path }
    }

    /// The request and reply lines logged so far, normalised.
    fn lines(&self) -> Vec<String> {
        let text = std::fs::read(&self.path).unwrap_or_default();
        command_lines(&String::from_utf8_lossy(&text))
    }

    /// The lines once `last` (normalised) has been logged; panics after the deadline.
    fn lines_through(&self, last: &str) -> Vec<String> {
        let deadline = Instant::now() + LOG_DEADLINE;
        loop {
            let lines = self.lines();
            if let Some(at) = lines.iter().rposition(|l| l == last) {
                return lines[..=at].to_vec();
            }
            assert!(
                Instant::now() < deadline,
                "{} never logged {last:?}; it logged:\n{}",
                self.server.describe(),
                lines.join("\n")
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Lines of connection events and start-up, not of one request.
const NOT_REQUEST_LINES: &[&str] = &[
    "server listening",
    "new auto-negotiating client connection",
    "new ascii client connection",
    "new binary client connection",
    "connection closed.",
    "send buffer was",
];

/// The per-request lines of a `-vv` log, each descriptor replaced by `FD`.
fn command_lines(log: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in log.lines() {
        let normal = if let Some(rest) = line.strip_prefix(['<', '>']) {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 || !rest[digits..].starts_with(' ') {
                continue;
            }
            format!("{}FD{}", &line[..1], &rest[digits..])
        } else if let Some((fd, rest)) = line.split_once(": Client using") {
            if fd.is_empty() || !fd.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            format!("FD: Client using{rest}")
        } else if ["Deleting ", "incr ", "Value len is "]
            .iter()
            .any(|p| line.starts_with(p))
        {
            line.to_string()
        } else {
            continue;
        };
        if !NOT_REQUEST_LINES.iter().any(|p| normal.contains(p)) {
            out.push(normal);
        }
    }
    out
}

/// Text and meta chunks, each sent in one write (so several requests share a batch)
/// and followed by `mn`.
fn text_stream() -> Vec<Vec<u8>> {
    let mut large = b"set large 3 0 40000\r\n".to_vec();
    large.extend(std::iter::repeat_n(b'L', 40000));
    large.extend_from_slice(b"\r\nget large b\r\nget b large nope\r\n");
    let mut too_large = b"set huge 0 0 2000000\r\n".to_vec();
    too_large.extend(std::iter::repeat_n(b'h', 2_000_000));
    too_large.extend_from_slice(b"\r\nget huge\r\n");
    // Read in several turns: the request waits for its data (`wait_for` moves it).
    let mut pieces = b"get b\r\nset split 0 0 300000 noreply\r\n".to_vec();
    pieces.extend(std::iter::repeat_n(b's', 300_000));
    pieces.extend_from_slice(b"\r\nget nope\r\n");
    let long_key = format!("get {}\r\n", "k".repeat(251)).into_bytes();
    vec![
        b"set a 0 0 1\r\nx\r\nget a\r\nget a b\r\ngets a\r\n".to_vec(),
        b"set b 5 0 2 noreply\r\nhi\r\nget a b c\r\n".to_vec(),
        b"delete a\r\ndelete a\r\ndelete a noreply\r\nget a\r\n".to_vec(),
        b"incr n 1\r\nset n 0 0 1\r\n5\r\nincr n 3\r\ndecr n 1 noreply\r\nget n\r\nincr b 1\r\n"
            .to_vec(),
        b"bogus\r\nget\r\nset x 0 0 z\r\ndelete\r\nincr n\r\n".to_vec(),
        too_large,
        b"append b 0 0 1\r\n!\r\nprepend zz 0 0 1\r\n!\r\ntouch b 10\r\ntouch zz 10 noreply\r\n"
            .to_vec(),
        b"gat 0 b\r\ngat 0 zz b\r\n".to_vec(),
        large,
        pieces,
        long_key,
        b"add b 0 0 1\r\nb\r\nreplace q 0 0 1\r\nb\r\nadd c 0 0 1 noreply\r\nc\r\nget c\r\n"
            .to_vec(),
        b"verbosity 2\r\nverbosity 2 noreply\r\nflush_all noreply\r\nget b\r\nflush_all 0\r\n"
            .to_vec(),
        b"ms m 2\r\nhi\r\nmg m v f\r\nmg none v\r\nmg none v q\r\nmd m\r\nme m\r\n".to_vec(),
        b"ma cnt N0 J5\r\nma cnt\r\nmg\r\nms m 2 q\r\nhi\r\nmz\r\nmg m s v\r\n".to_vec(),
        b"stats detail on\r\nstats detail off\r\nget last\r\n".to_vec(),
    ]
}

/// Sends `chunk` and `mn`, returns the reply before `MN`.
fn exchange(conn: &mut Client, chunk: &[u8]) -> Vec<u8> {
    conn.request(chunk)
}

#[test]
fn text_and_meta_lines_match_memcached() {
    let ours = Logged::start(ServerKind::under_test(), "text");
    let theirs = Logged::start(ServerKind::Memcached, "text");
    let mut a = ours.server.connect();
    let mut b = theirs.server.connect();
    for chunk in text_stream() {
        let got = exchange(&mut a, &chunk);
        let want = exchange(&mut b, &chunk);
        assert_eq!(
            escape(&got),
            escape(&want),
            "replies to {} differ",
            escape(&chunk[..chunk.len().min(200)])
        );
    }
    let last = "<FD get last";
    let got = ours.lines_through(last);
    let want = theirs.lines_through(last);
    assert_eq!(got.join("\n"), want.join("\n"));
    // What the stream is meant to cover, so that a change of filter cannot empty it.
    for needle in [
        "FD: Client using the ascii protocol",
        ">FD NOREPLY STORED",
        ">FD NOREPLY NOT_FOUND",
        ">FD sending key large",
        ">FD CLIENT_ERROR bad command line format",
        ">FD SERVER_ERROR object too large for cache",
        ">FD MN",
        ">FD EN",
    ] {
        assert!(
            got.iter().any(|l| l == needle),
            "{needle:?} not logged:\n{}",
            got.join("\n")
        );
    }
}

/// A binary request: header, extras, key, value.
fn binary(opcode: u8, key: &[u8], extras: &[u8], value: &[u8]) -> Vec<u8> {
    let body = (key.len() + extras.len() + value.len()) as u32;
    let mut p = vec![0x80, opcode];
    p.extend_from_slice(&(key.len() as u16).to_be_bytes());
    p.push(extras.len() as u8);
    p.extend_from_slice(&[0, 0, 0]);
    p.extend_from_slice(&body.to_be_bytes());
    p.extend_from_slice(&[0; 12]);
    p.extend_from_slice(extras);
    p.extend_from_slice(key);
    p.extend_from_slice(value);
    p
}

fn binary_stream() -> Vec<u8> {
    let flags = [0, 0, 0, 5, 0, 0, 0, 0];
    let arith = |delta: u64, initial: u64| {
        let mut e = delta.to_be_bytes().to_vec();
        e.extend_from_slice(&initial.to_be_bytes());
        e.extend_from_slice(&0u32.to_be_bytes());
        e
    };
    let mut s = Vec::new();
    s.extend(binary(0x01, b"k", &flags, b"vv")); // SET
    s.extend(binary(0x00, b"k", &[], &[])); // GET hit
    s.extend(binary(0x00, b"miss", &[], &[])); // GET miss
    s.extend(binary(0x09, b"miss", &[], &[])); // GETQ miss
    s.extend(binary(0x0c, b"miss", &[], &[])); // GETK miss
    s.extend(binary(0x0d, b"k", &[], &[])); // GETKQ hit
    s.extend(binary(0x05, b"n", &arith(3, 10), &[])); // INCREMENT
    s.extend(binary(0x06, b"k", &arith(1, 0), &[])); // DECREMENT, not a number
    s.extend(binary(0x04, b"k", &[], &[])); // DELETE
    s.extend(binary(0x14, b"k", &[], &[])); // DELETEQ miss
    s.extend(binary(0x0e, b"k", &[], b"zz")); // APPEND miss
    s.extend(binary(0x11, b"q", &flags, b"x")); // SETQ
    s.extend(binary(0x02, b"q", &flags, b"x")); // ADD exists
    s.extend(binary(0x10, b"bogus", &[], &[])); // STAT unknown
    s.extend(binary(0x1c, b"q", &10u32.to_be_bytes(), &[])); // TOUCH
    s.extend(binary(0x1d, b"q", &10u32.to_be_bytes(), &[])); // GAT
    s.extend(binary(0x0a, &[], &[], &[])); // NOOP: the end
    s
}

#[test]
fn binary_lines_match_memcached() {
    let ours = Logged::start(ServerKind::under_test(), "binary");
    let theirs = Logged::start(ServerKind::Memcached, "binary");
    let stream = binary_stream();
    let mut noop = vec![0x81, 0x0a];
    noop.extend_from_slice(&[0; 22]);
    let mut replies = Vec::new();
    for side in [&ours, &theirs] {
        let mut conn = side.server.connect();
        conn.send(&stream);
        let reply = conn.read_until(common::READ_TIMEOUT, |b| b.ends_with(&noop));
        assert_eq!(reply.ending, Ending::Done, "{}", side.server.describe());
        replies.push(reply.bytes);
    }
    assert_eq!(escape(&replies[0]), escape(&replies[1]));
    // The NOOP's header is the last thing logged.
    let last = ">FD   0x00 0x00 0x00 0x00";
    let wait = |side: &Logged| {
        let deadline = Instant::now() + LOG_DEADLINE;
        loop {
            let lines = side.lines();
            let noops = lines
                .iter()
                .filter(|l| *l == "<FD    0x80 0x0a 0x00 0x00")
                .count();
            if noops == 1 && lines.len() >= 7 && lines.last().is_some_and(|l| l == last) {
                let tail = &lines[lines.len() - 7..];
                if tail[0] == ">FD Writing bin response:" {
                    return lines;
                }
            }
            assert!(
                Instant::now() < deadline,
                "{} never logged its NOOP reply:\n{}",
                side.server.describe(),
                lines.join("\n")
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let got = wait(&ours);
    let want = wait(&theirs);
    assert_eq!(got.join("\n"), want.join("\n"));
    for needle in [
        "FD: Client using the binary protocol",
        "<FD SET k Value len is 2",
        "<FD GET miss",
        ">FD Writing an error: Not found",
        "Deleting k",
        "incr n 3, 10, 0",
        "<FD STATS bogus",
    ] {
        assert!(
            got.iter().any(|l| l == needle),
            "{needle:?} not logged:\n{}",
            got.join("\n")
        );
    }
}

/// `verbosity 0` stops the lines (after its own request line, as memcached prints
/// it), and `verbosity 2` brings them back (its `OK` the first line again).
#[test]
fn verbosity_command_turns_logging_off_and_on() {
    let ours = Logged::start(ServerKind::under_test(), "level");
    let theirs = Logged::start(ServerKind::Memcached, "level");
    let mut lines = Vec::new();
    for side in [&ours, &theirs] {
        let mut conn = side.server.connect();
        assert_eq!(conn.request_str("set before 0 0 1\r\nx\r\n"), "STORED\r\n");
        assert_eq!(conn.request_str("verbosity 0\r\n"), "OK\r\n");
        assert_eq!(
            conn.request_str("set quiet 0 0 1\r\nq\r\nget quiet\r\n"),
            "STORED\r\nVALUE quiet 0 1\r\nq\r\nEND\r\n"
        );
        // Alone in its batch: the level is read once per batch of requests.
        conn.send(b"verbosity 2\r\n");
        let ok = conn.read_until(common::READ_TIMEOUT, |b| b.ends_with(b"OK\r\n"));
        assert_eq!(ok.bytes, b"OK\r\n", "{}", side.server.describe());
        assert_eq!(conn.request_str("get after\r\n"), "END\r\n");
        lines.push(side.lines_through(">FD END"));
    }
    assert_eq!(lines[0].join("\n"), lines[1].join("\n"));
    let got = &lines[0];
    assert!(got.iter().any(|l| l == "<FD set before 0 0 1"));
    assert!(got.iter().any(|l| l == "<FD verbosity 0"));
    assert!(!got.iter().any(|l| l.contains("quiet")), "{got:?}");
    let on = got
        .iter()
        .position(|l| l == ">FD OK")
        .expect("verbosity 2's OK");
    assert_eq!(got[on + 1..], ["<FD get after", ">FD END"]);
}
