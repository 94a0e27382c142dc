//! `watch`: memcached 1.6.18's log streams over a connection. The same checks run
//! against memcached (`FERRO_TEST_SERVER=memcached`); lines are compared without
//! their time, id and descriptors, which differ between runs and servers.

use crate::common;

use std::time::{Duration, Instant};

use common::{Client, Ending, ServerKind, ServerProcess};

/// Generous: the logger thread wakes at least every 50 ms (memcached's: every second).
const LINE_TIMEOUT: Duration = Duration::from_secs(10);

fn start(args: &[&str]) -> ServerProcess {
    ServerProcess::start(ServerKind::under_test(), args)
}

/// The local port of a client connection, as the server logs it in `rport=`.
fn port_of(c: &Client) -> String {
    c.local_addr()
        .rsplit(':')
        .next()
        .expect("an address with a port")
        .to_string()
}

/// A connection that sent `watch <streams>` and read its `OK`.
///
/// Events queued before the test's own traffic (on a busy machine, the start-up check's
/// connection closing) may arrive in the same read as the `OK`: whole lines after it
/// are read with it and dropped. They cannot be the test's: its connections open
/// after this returns, and the tests that read `connevents` filter by port anyway.
fn watcher(server: &ServerProcess, streams: &str) -> Client {
    let mut w = server.connect();
    w.send(format!("watch {streams}\r\n").as_bytes());
    let reply = w.read_until(LINE_TIMEOUT, |b| {
        b.starts_with(b"OK\r\n") && (b.len() == 4 || b.ends_with(b"\n"))
            || b.len() >= 4 && !b.starts_with(b"OK\r\n")
    });
    assert!(
        reply.bytes.starts_with(b"OK\r\n"),
        "{}: {:?}",
        server.describe(),
        String::from_utf8_lossy(&reply.bytes)
    );
    w
}

/// The next `n` log lines, each without `ts=... gid=... ` and with `cfd=N` as `cfd=_`.
fn lines(w: &mut Client, n: usize) -> Vec<String> {
    lines_where(w, n, |_| true)
}

/// The next `n` log lines for which `keep` holds (given the raw line), normalised as
/// [`lines`] does; the others are skipped.
fn lines_where(w: &mut Client, n: usize, keep: impl Fn(&str) -> bool) -> Vec<String> {
    let kept = |b: &[u8]| {
        String::from_utf8_lossy(b)
            .split_inclusive('\n')
            .filter(|l| l.ends_with('\n') && keep(l.trim_end()))
            .count()
    };
    let reply = w.read_until(LINE_TIMEOUT, |b| kept(b) >= n);
    assert_eq!(reply.ending, Ending::Done, "{:?}", reply.bytes);
    let text = String::from_utf8(reply.bytes).expect("log lines are text");
    text.lines()
        .filter(|l| keep(l))
        .map(|l| {
            let mut words: Vec<&str> = l.split(' ').collect();
            assert!(
                words[0].starts_with("ts=") && words[1].starts_with("gid="),
                "{l}"
            );
            words.drain(..2);
            words
                .iter()
                .map(|w| {
                    if w.starts_with("cfd=") {
                        "cfd=_".to_string()
                    } else if w.starts_with("rport=") {
                        "rport=_".to_string()
                    } else {
                        w.to_string()
                    }
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

#[test]
fn fetchers_and_mutations_lines_are_memcacheds() {
    let server = start(&[]);
    let mut w = watcher(&server, "fetchers mutations");
    let mut c = server.connect();
    assert_eq!(c.request_str("set vfoo 0 0 4\r\nvbar\r\n"), "STORED\r\n");
    assert_eq!(
        c.request_str("get vfoo\r\n"),
        "VALUE vfoo 0 4\r\nvbar\r\nEND\r\n"
    );
    assert_eq!(c.request_str("append vfoo 0 0 2\r\nzz\r\n"), "STORED\r\n");
    assert_eq!(c.request_str("delete a/b\r\n"), "NOT_FOUND\r\n");
    assert_eq!(
        lines(&mut w, 6),
        [
            "type=item_get key=vfoo status=not_found clsid=0 cfd=_ size=0",
            "type=item_store key=vfoo status=stored cmd=set ttl=0 clsid=1 cfd=_ size=4",
            "type=item_get key=vfoo status=found clsid=1 cfd=_ size=4",
            "type=item_get key=vfoo status=found clsid=1 cfd=_ size=4",
            "type=item_store key=vfoo status=stored cmd=append ttl=0 clsid=1 cfd=_ size=6",
            "type=item_get key=a%2Fb status=not_found clsid=0 cfd=_ size=0",
        ]
    );
}

#[test]
fn connevents_name_the_close_reason() {
    let server = start(&[]);
    let mut w = watcher(&server, "connevents");
    let mut c = server.connect();
    let mut ports = vec![port_of(&c)];
    assert!(c.request_str("version\r\n").starts_with("VERSION "));
    c.send(b"quit\r\n");
    assert_eq!(c.read_to_close(LINE_TIMEOUT).ending, Ending::Closed);
    let mut bad = server.connect();
    ports.push(port_of(&bad));
    bad.send(b"GET / HTTP/1.1\r\n");
    assert_eq!(bad.read_to_close(LINE_TIMEOUT).ending, Ending::Closed);
    // Each worker thread queues its own events: lines of two connections may come in
    // either order (in memcached too), so they are compared sorted. Only these two
    // connections' lines count: the connection the start-up check made may be seen
    // (opened and closed) after the watcher attached, on a busy machine.
    let mut got = lines_where(&mut w, 4, |l| {
        ports.iter().any(|p| l.contains(&format!(" rport={p} ")))
    });
    got.sort();
    assert_eq!(
        got,
        [
            "type=conn_close rip=127.0.0.1 rport=_ transport=tcp reason=error cfd=_",
            "type=conn_close rip=127.0.0.1 rport=_ transport=tcp reason=normal cfd=_",
            "type=conn_new rip=127.0.0.1 rport=_ transport=tcp cfd=_",
            "type=conn_new rip=127.0.0.1 rport=_ transport=tcp cfd=_",
        ]
    );
}

#[test]
fn watch_replies_as_memcached() {
    let server = start(&[]);
    let mut c = server.connect();
    assert_eq!(c.request_str("watch bogus\r\n"), "ERROR\r\n");
    // Still an ordinary connection.
    assert_eq!(c.request_str("set k 0 0 1\r\nv\r\n"), "STORED\r\n");
    // The proxy streams are known names in a build without the proxy.
    let _w = watcher(&server, "proxyreqs proxyevents proxyuser");

    let refusing = start(&["-W"]);
    let mut c = refusing.connect();
    assert_eq!(
        c.request_str("watch mutations\r\n"),
        "CLIENT_ERROR watch commands not allowed\r\n"
    );
}

/// Polls `stats` until `log_watchers` is `want` (the logger counts watchers as it
/// takes them in and drops them).
fn wait_for_watchers(server: &ServerProcess, want: &str) {
    let deadline = Instant::now() + LINE_TIMEOUT;
    loop {
        let got = server.stats("").get("log_watchers").cloned();
        if got.as_deref() == Some(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "log_watchers {got:?}, want {want}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_closed_watcher_is_dropped() {
    let server = start(&[]);
    let w = watcher(&server, "fetchers");
    wait_for_watchers(&server, "1");
    drop(w);
    let mut c = server.connect();
    // An event for the logger to try to deliver, besides the close it sees.
    assert_eq!(c.request_str("get x\r\n"), "END\r\n");
    wait_for_watchers(&server, "0");
}

#[test]
fn a_watcher_that_cannot_keep_up_is_told_what_it_missed() {
    // A small watcher buffer (1 KiB), a watcher that reads nothing until the end, and
    // more lines than its socket buffers hold; the workers' buffers (16 MiB) are large
    // enough to take the pipelined batches whole, so the lines are lost at the watcher.
    let server = start(&[
        "-o",
        "watcher_logbuf_size=1",
        "-o",
        "worker_logbuf_size=16384",
    ]);
    let mut w = watcher(&server, "fetchers");
    let mut c = server.connect();
    let key = "k".repeat(200);
    let batch: String = (0..1000).map(|i| format!("get {key}{i}\r\n")).collect();
    for _ in 0..100 {
        c.send(batch.as_bytes());
        let reply = c.read_until(LINE_TIMEOUT, |b| {
            b.windows(5).filter(|w| *w == b"END\r\n").count() == 1000
        });
        assert_eq!(reply.ending, Ending::Done);
    }
    // The client never waited for the watcher; now the watcher reads, and more events
    // come until the skip is reported.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = Vec::new();
    loop {
        let reply = w.read_until(Duration::from_millis(200), |_| false);
        seen.extend_from_slice(&reply.bytes);
        if seen.windows(8).any(|x| x == b"skipped=") {
            break;
        }
        assert!(Instant::now() < deadline, "no skipped= line");
        assert_eq!(c.request_str("get foo\r\n"), "END\r\n");
        if seen.len() > 64 << 20 {
            seen.drain(..32 << 20);
        }
    }
    let at = seen
        .windows(8)
        .position(|x| x == b"skipped=")
        .expect("found");
    let line_end = seen[at..].iter().position(|&b| b == b'\n').map(|e| at + e);
    if let Some(end) = line_end {
        let n = std::str::from_utf8(&seen[at + 8..end]).expect("a number");
        assert!(n.parse::<u64>().expect("a number") > 0);
    }
    assert!(server.stats("")["log_watcher_skipped"] != "0");
}
