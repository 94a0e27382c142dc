//! Test helpers: a memcached child process on a free port, killed by PID on
//! drop, and a way to run the ferrobench binary and read its JSON.

#![allow(dead_code)] // each test file uses a different subset

use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const MEMCACHED: &str = "/usr/bin/memcached";

/// A memcached started for one test.
pub struct Memcached {
    child: Child,
    pub port: u16,
}

impl Memcached {
    /// Starts `memcached -t 1` on a free 127.0.0.1 port (UDP too when `udp`).
    /// Fails, never skips, when memcached is not installed: the project's
    /// test script installs it.
    pub fn start(udp: bool) -> Memcached {
        assert!(
            Path::new(MEMCACHED).exists(),
            "{MEMCACHED} is missing: install it with `apt-get install -y memcached` (scripts install it for CI)"
        );
        let port = free_port();
        let udp_port = if udp {
            port.to_string()
        } else {
            "0".to_string()
        };
        let child = Command::new(MEMCACHED)
            .args([
                "-u",
                "root",
                "-l",
                "127.0.0.1",
                "-t",
                "1",
                "-m",
                "256",
                "-p",
            ])
            .arg(port.to_string())
            .args(["-U", &udp_port])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting memcached");
        let mc = Memcached { child, port };
        wait_listening(port);
        mc
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for Memcached {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Retries connecting until the server accepts (bounded: 5 s).
fn wait_listening(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "memcached did not start listening on port {port}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs ferrobench with `args`.
pub fn ferrobench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferrobench"))
        .args(args)
        .output()
        .expect("running ferrobench")
}

/// Runs ferrobench with `--json` and returns the parsed report; panics with
/// its stderr if it failed.
pub fn ferrobench_json(args: &[&str]) -> serde_json::Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = ferrobench(&all);
    assert!(
        out.status.success(),
        "ferrobench {args:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("ferrobench prints JSON")
}
