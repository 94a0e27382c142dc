//! Clean shutdown: on SIGTERM, SIGINT or the `shutdown` command (with `-A`), every reply
//! to a request the server has already taken in is delivered whole, every connection is
//! closed, and the process exits with status 0, within a bounded time.

use crate::common;

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use common::{escape, Client, Ending, ServerKind, ServerProcess, READ_TIMEOUT};

/// How long the process may take to exit after being asked.
const EXIT_TIMEOUT: Duration = Duration::from_secs(10);
const CLIENTS: usize = 8;
/// Keys each client's pipeline reads; with 10 KB values that is ~800 KB of replies per
/// client, under the server's 1 MiB output high-water mark, so the server executes the
/// whole pipeline as soon as it reads it, while the client has read only a few bytes.
const GETS_PER_PIPELINE: usize = 80;
const VALUE_LEN: usize = 10_000;

fn value(i: usize) -> Vec<u8> {
    let mut v = format!("value-{i}-").into_bytes();
    v.resize(VALUE_LEN, b'a' + (i % 26) as u8);
    v
}

/// What a client whose pipeline is in flight must receive: every reply, then the close.
fn expected_replies(client: usize) -> Vec<u8> {
    let mut want = Vec::new();
    for j in 0..GETS_PER_PIPELINE {
        let k = (client * 7 + j) % 32;
        want.extend_from_slice(format!("VALUE k{k} 0 {VALUE_LEN}\r\n").as_bytes());
        want.extend_from_slice(&value(k));
        want.extend_from_slice(b"\r\nEND\r\n");
    }
    want
}

/// Starts a server with 32 keys of 10 KB, then `CLIENTS` connections that each send a
/// pipeline of gets and read only its first bytes, so their replies are in flight when
/// `stop` runs. Checks that each client then gets all of its replies and the close, and
/// that the process exits 0.
fn in_flight_replies_survive(args: &[&str], stop: impl FnOnce(&ServerProcess)) {
    let mut server = ServerProcess::start(ServerKind::Ferrocache, args);
    let mut loader = server.connect();
    for i in 0..32 {
        let mut req = format!("set k{i} 0 0 {VALUE_LEN}\r\n").into_bytes();
        req.extend_from_slice(&value(i));
        req.extend_from_slice(b"\r\n");
        assert_eq!(loader.request(&req), b"STORED\r\n");
    }
    // An idle connection must be closed too.
    let mut idle = server.connect();
    let ready = Arc::new(Barrier::new(CLIENTS + 1));
    let go = Arc::new(Barrier::new(CLIENTS + 1));
    let handles: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let (ready, go) = (ready.clone(), go.clone());
            let port = server.port;
            thread::spawn(move || {
                let mut c = Client::connect(port);
                let mut req = Vec::new();
                for j in 0..GETS_PER_PIPELINE {
                    req.extend_from_slice(format!("get k{}\r\n", (i * 7 + j) % 32).as_bytes());
                }
                c.send(&req);
                // The first reply bytes prove the server has taken the pipeline in.
                let first = c.read_until(READ_TIMEOUT, |b| !b.is_empty());
                assert_eq!(
                    first.ending,
                    Ending::Done,
                    "client {i}: {}",
                    first.describe()
                );
                ready.wait();
                go.wait();
                let rest = c.read_to_close(READ_TIMEOUT);
                let mut got = first.bytes;
                got.extend_from_slice(&rest.bytes);
                (i, got, rest.ending)
            })
        })
        .collect();
    ready.wait();
    stop(&server);
    go.wait();
    for h in handles {
        let (i, got, ending) = h.join().expect("client thread");
        assert_eq!(ending, Ending::Closed, "client {i}: connection not closed");
        let want = expected_replies(i);
        assert!(
            got == want,
            "client {i}: {} of {} reply bytes before the close; ends with {}",
            got.len(),
            want.len(),
            escape(&got[got.len().saturating_sub(60)..])
        );
    }
    let idle_end = idle.read_to_close(READ_TIMEOUT);
    assert_eq!(idle_end.ending, Ending::Closed, "idle connection left open");
    let status = server
        .wait_exit(EXIT_TIMEOUT)
        .unwrap_or_else(|| panic!("still running {EXIT_TIMEOUT:?} after being stopped"));
    assert_eq!(status.code(), Some(0), "exit status {status}");
}

fn signal(server: &ServerProcess, sig: i32) {
    let pid = libc::pid_t::try_from(server.id()).expect("pid fits pid_t");
    // SAFETY: kill(2) on the PID of a child we spawned and have not reaped (the
    // ServerProcess owns it), so the PID cannot have been reused.
    let rc = unsafe { libc::kill(pid, sig) };
    assert_eq!(rc, 0, "kill({pid}, {sig})");
}

#[test]
fn sigterm_completes_in_flight_replies_and_exits_zero() {
    in_flight_replies_survive(&["-t", "2", "-U", "0"], |s| signal(s, libc::SIGTERM));
}

#[test]
fn sigint_completes_in_flight_replies_and_exits_zero() {
    in_flight_replies_survive(&["-t", "2", "-U", "0"], |s| signal(s, libc::SIGINT));
}

#[test]
fn shutdown_command_completes_in_flight_replies_and_exits_zero() {
    in_flight_replies_survive(&["-t", "2", "-U", "0", "-A"], |s| {
        let mut c = s.connect();
        c.send(b"shutdown\r\n");
        let end = c.read_to_close(READ_TIMEOUT);
        assert_eq!(end.ending, Ending::Closed, "shutdown: {}", end.describe());
    });
}

/// A signal with nobody connected: the process still exits 0, promptly.
#[test]
fn sigterm_when_idle_exits_zero() {
    let mut server = ServerProcess::start(ServerKind::Ferrocache, &["-t", "4", "-U", "0"]);
    signal(&server, libc::SIGTERM);
    let status = server.wait_exit(EXIT_TIMEOUT).expect("exit after SIGTERM");
    assert_eq!(status.code(), Some(0), "exit status {status}");
}
