//! A second server on a port that a running one listens on refuses to start, as
//! memcached does, although ferrocache's workers share their port with `SO_REUSEPORT`
//! (which would otherwise let the second join the first and split its clients). The
//! first keeps serving alone.

use crate::common;

use std::net::UdpSocket;
use std::process::Output;

use common::{run_to_exit, ServerKind, ServerProcess};

fn assert_refused(out: &Output, what: &str, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(71), "{what}: {stderr}");
    assert!(stderr.contains(needle), "{what}: {stderr}");
}

#[test]
fn a_second_server_on_a_taken_tcp_port_refuses_to_start() {
    let first = ServerProcess::start(ServerKind::Ferrocache, &["-t", "2", "-U", "0"]);
    let port = first.port.to_string();
    let args: Vec<String> = ["-p", &port, "-l", "127.0.0.1", "-U", "0", "-t", "2"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    // memcached on a port ferrocache holds: the behaviour to match.
    let memcached = run_to_exit(ServerKind::Memcached, &args);
    assert_refused(&memcached, "memcached", "Address already in use");
    let second = run_to_exit(ServerKind::Ferrocache, &args);
    assert_refused(
        &second,
        "ferrocache",
        &format!("failed to listen on TCP port {port}"),
    );
    // Every connection still reaches the first server.
    let pid = first.id().to_string();
    for _ in 0..16 {
        assert_eq!(first.stats("")["pid"], pid);
    }
}

#[test]
fn a_second_server_on_a_taken_udp_port_refuses_to_start() {
    let udp_port = {
        let probe = UdpSocket::bind("127.0.0.1:0").expect("bind udp");
        probe.local_addr().expect("addr").port().to_string()
    };
    let first = ServerProcess::start(ServerKind::Ferrocache, &["-t", "2", "-U", &udp_port]);
    let args: Vec<String> = ["-p", "0", "-l", "127.0.0.1", "-U", &udp_port, "-t", "1"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let second = run_to_exit(ServerKind::Ferrocache, &args);
    assert_refused(
        &second,
        "ferrocache",
        &format!("failed to listen on UDP port {udp_port}"),
    );
    assert_eq!(first.stats("settings")["udpport"], udp_port);
}

/// A server that cannot bind leaves no pid file behind it (`-P`), as memcached, which
/// writes it only once listening, leaves none.
#[test]
fn a_refused_start_leaves_no_pid_file() {
    let first = ServerProcess::start(ServerKind::Ferrocache, &["-t", "1", "-U", "0"]);
    let pidfile = std::env::temp_dir().join(format!("ferrocache-ports-{}.pid", std::process::id()));
    let _ = std::fs::remove_file(&pidfile);
    let port = first.port.to_string();
    let path = pidfile.display().to_string();
    let args: Vec<String> = [
        "-p",
        &port,
        "-l",
        "127.0.0.1",
        "-U",
        "0",
        "-t",
        "1",
        "-P",
        &path,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for kind in [ServerKind::Memcached, ServerKind::Ferrocache] {
        let out = run_to_exit(kind, &args);
        assert_refused(&out, kind.name(), "Address already in use");
        assert!(!pidfile.exists(), "{} left its pid file", kind.name());
    }
}
