//! `--io-backend`: which backend runs, how it is reported in `stats settings`, and the
//! fallback to epoll when io_uring cannot be had. (The whole suite runs on both backends:
//! `auto` is io_uring where the kernel allows it, and scripts/test runs the suite a second
//! time with `FERROCACHE_IO_BACKEND=epoll`.)

use crate::common;

use std::io::Read;
use std::path::PathBuf;

use common::{Client, ServerKind, ServerProcess};

/// Whether this kernel lets unprivileged-or-root processes make rings at all. With the
/// sysctl missing (a kernel without io_uring) or set, the fallback is the right answer.
fn kernel_allows_io_uring() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        .map(|v| v.trim() == "0")
        .unwrap_or(false)
}

/// The backend `auto` or `uring` must run here: io_uring where the kernel allows it.
fn uring_or_fallback() -> &'static str {
    if kernel_allows_io_uring() {
        "uring"
    } else {
        "epoll"
    }
}

fn backend(server: &ServerProcess) -> String {
    server.stats("settings")["io_backend"].clone()
}

fn stderr_file(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "ferrocache-io-backend-{}-{name}.log",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    path
}

fn round_trip(c: &mut Client) {
    assert_eq!(c.request(b"set k 7 0 5\r\nvalue\r\n"), b"STORED\r\n");
    assert_eq!(
        c.request_str("get k\r\n"),
        "VALUE k 7 5\r\nvalue\r\nEND\r\n"
    );
}

#[test]
fn epoll_runs_epoll() {
    let server = ServerProcess::start(ServerKind::Ferrocache, &["-t", "2", "--io-backend=epoll"]);
    assert_eq!(backend(&server), "epoll");
    round_trip(&mut server.connect());
}

#[test]
fn auto_runs_io_uring_where_the_kernel_allows_it() {
    // The flag, and the default with no flag (FERROCACHE_IO_BACKEND cleared, as
    // scripts/test sets it for its second pass).
    let explicit = ServerProcess::start(ServerKind::Ferrocache, &["-t", "2", "--io-backend=auto"]);
    let default = ServerProcess::start_with(
        ServerKind::Ferrocache,
        &["-t", "2"],
        &[("FERROCACHE_IO_BACKEND", "auto")],
        None,
    );
    let want = uring_or_fallback();
    for server in [&explicit, &default] {
        assert_eq!(backend(server), want);
        round_trip(&mut server.connect());
    }
}

#[test]
fn uring_runs_where_the_kernel_allows_it() {
    let server = ServerProcess::start(ServerKind::Ferrocache, &["-t", "2", "--io-backend=uring"]);
    let got = backend(&server);
    if kernel_allows_io_uring() {
        assert_eq!(
            got, "uring",
            "kernel.io_uring_disabled is 0, yet io_uring was not used"
        );
    } else {
        assert_eq!(
            got, "epoll",
            "io_uring is disabled here: the fallback must run"
        );
    }
    round_trip(&mut server.connect());
}

#[test]
fn the_environment_sets_the_default_and_the_flag_wins() {
    // epoll through the environment (the default, auto, would be io_uring here).
    let from_env = ServerProcess::start_with(
        ServerKind::Ferrocache,
        &[],
        &[("FERROCACHE_IO_BACKEND", "epoll")],
        None,
    );
    assert_eq!(backend(&from_env), "epoll");
    let flag_wins = ServerProcess::start_with(
        ServerKind::Ferrocache,
        &["--io-backend", "uring"],
        &[("FERROCACHE_IO_BACKEND", "epoll")],
        None,
    );
    let want = uring_or_fallback();
    assert_eq!(backend(&flag_wins), want);
}

#[test]
fn an_unavailable_ring_falls_back_to_epoll_and_says_why_once() {
    for flag in ["--io-backend=uring", "--io-backend=auto"] {
        falls_back_and_says_why_once(flag);
    }
}

fn falls_back_and_says_why_once(flag: &str) {
    let log = stderr_file(flag.trim_start_matches("--io-backend="));
    let server = ServerProcess::start_with(
        ServerKind::Ferrocache,
        &["-t", "4", flag],
        &[("FERROCACHE_URING_UNAVAILABLE", "simulated by the test")],
        Some(&log),
    );
    assert_eq!(backend(&server), "epoll", "{flag}");
    for _ in 0..8 {
        round_trip(&mut server.connect());
    }
    drop(server);
    let mut text = String::new();
    std::fs::File::open(&log)
        .and_then(|mut f| f.read_to_string(&mut text))
        .expect("read the server's stderr");
    let _ = std::fs::remove_file(&log);
    let about_uring: Vec<&str> = text.lines().filter(|l| l.contains("io_uring")).collect();
    // One line per process start (a start that lost its port to a race also printed it).
    let starts = 1 + text
        .lines()
        .filter(|l| l.contains("failed to listen"))
        .count();
    assert_eq!(about_uring.len(), starts, "{flag}: stderr was:\n{text}");
    assert_eq!(
        about_uring[0],
        "ferrocache: io_uring unavailable (FERROCACHE_URING_UNAVAILABLE is set: simulated by \
         the test); using epoll"
    );
}

#[test]
fn an_unknown_backend_is_refused() {
    let out = std::process::Command::new(ServerKind::Ferrocache.program())
        .args(["-p", "0", "--io-backend=kqueue"])
        .output()
        .expect("run ferrocache");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("kqueue") && err.contains("uring"), "{err}");
}

/// Many connections, each pipelining a burst of requests with values that span several
/// provided buffers, on two workers: every reply arrives whole and in order.
#[test]
fn uring_serves_many_pipelining_connections() {
    let server = ServerProcess::start(
        ServerKind::Ferrocache,
        &["-t", "2", "-m", "256", "--io-backend=uring"],
    );
    let mut clients: Vec<Client> = (0..32).map(|_| server.connect()).collect();
    for (i, c) in clients.iter_mut().enumerate() {
        let value: Vec<u8> = (0..40_000 + i * 997)
            .map(|j| b'a' + ((i + j) % 26) as u8)
            .collect();
        let mut burst = Vec::new();
        let mut want = Vec::new();
        for r in 0..10 {
            burst.extend_from_slice(format!("set k{i}-{r} {r} 0 {}\r\n", value.len()).as_bytes());
            burst.extend_from_slice(&value);
            burst.extend_from_slice(b"\r\n");
            burst.extend_from_slice(format!("get k{i}-{r}\r\n").as_bytes());
            want.extend_from_slice(b"STORED\r\n");
            want.extend_from_slice(format!("VALUE k{i}-{r} {r} {}\r\n", value.len()).as_bytes());
            want.extend_from_slice(&value);
            want.extend_from_slice(b"\r\nEND\r\n");
        }
        let got = c.request(&burst);
        assert!(got == want, "connection {i}: replies differ");
    }
}
