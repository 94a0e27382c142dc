//! Test helpers: a memcached child process on a free port, killed by PID on
//! drop, and a way to run the ferrobench binary and read its JSON.

#![allow(dead_code)] // each test file uses a different subset

use std::io::{Read, Write};
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
    ///
    /// The port is free when probed, but a test running beside this one can
    /// be handed the same port and win the bind; this memcached then exits
    /// while the other one answers. So a start only counts when `stats`
    /// on the port reports this child's PID; otherwise it retries on a new
    /// port.
    pub fn start(udp: bool) -> Memcached {
        assert!(
            Path::new(MEMCACHED).exists(),
            "{MEMCACHED} is missing: install it with `apt-get install -y memcached` (scripts install it for CI)"
        );
        for _ in 0..START_ATTEMPTS {
            if let Some(mc) = Self::try_start_on(free_port(), udp) {
                return mc;
            }
        }
        panic!("memcached did not start on a port of its own in {START_ATTEMPTS} attempts");
    }

    /// Starts memcached on `port`; None when another process answers there
    /// (or it exited), so the caller can retry.
    pub fn try_start_on(port: u16, udp: bool) -> Option<Memcached> {
        let udp_port = if udp {
            port.to_string()
        } else {
            "0".to_string()
        };
        let child = memcached_command(port, 256)
            .args(["-U", &udp_port])
            .spawn()
            .expect("starting memcached");
        let mut mc = Memcached::of(child, port);
        if mc.wait_ready() {
            return Some(mc);
        }
        // `mc` drops here: killed by PID and reaped before the caller retries.
        None
    }

    /// The memcached `child` started on `port`; it is killed by PID on drop.
    pub fn of(child: Child, port: u16) -> Memcached {
        Memcached { child, port }
    }

    /// Whether the process has exited.
    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Polls (bounded: 5 s) until memcached answers on its port with its own
    /// PID. False when the child exited or someone else answers there.
    fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if self.exited() {
                return false;
            }
            if let Some(pid) = stats_pid(self.port) {
                return pid == self.pid();
            }
            assert!(
                Instant::now() < deadline,
                "memcached did not start listening on port {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(10));
        }
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

/// `memcached -u root -l 127.0.0.1 -t 1 -m MEMORY_MB -p PORT`, its output
/// discarded; the caller adds the rest of its flags.
pub fn memcached_command(port: u16, memory_mb: u32) -> Command {
    let mut cmd = Command::new(MEMCACHED);
    cmd.args(["-u", "root", "-l", "127.0.0.1", "-t", "1"])
        .args(["-m", &memory_mb.to_string(), "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

/// A run's report shows work done, and no errors, timeouts or misses.
pub fn assert_clean(report: &serde_json::Value, what: &str) {
    assert!(
        report["ops"].as_u64().unwrap() > 0,
        "{what}: no ops\n{report:#}"
    );
    assert_eq!(report["errors"], 0, "{what}: errors\n{report:#}");
    assert_eq!(report["timeouts"], 0, "{what}: timeouts\n{report:#}");
    assert_eq!(
        report["hit_ratio"], 1.0,
        "{what}: hit ratio after preload\n{report:#}"
    );
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

const START_ATTEMPTS: usize = 5;

/// The PID that `stats` on 127.0.0.1:`port` reports, or None when nothing
/// answers there (yet).
fn stats_pid(port: u16) -> Option<u32> {
    let mut conn = TcpStream::connect(("127.0.0.1", port)).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stats_pid_on(&mut conn)
}

/// The PID that `stats` on an open connection (plain or TLS) reports.
pub fn stats_pid_on(conn: &mut (impl Read + Write)) -> Option<u32> {
    stat_on(conn, "pid").map(|pid| pid as u32)
}

/// The value of the numeric `stats` line `name` on an open connection.
pub fn stat_on(conn: &mut (impl Read + Write), name: &str) -> Option<u64> {
    conn.write_all(b"stats\r\n").ok()?;
    let mut reply = Vec::new();
    let mut chunk = [0u8; 4096];
    while !reply.ends_with(b"END\r\n") {
        let n = conn.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        reply.extend_from_slice(&chunk[..n]);
    }
    let prefix = format!("STAT {name} ");
    String::from_utf8_lossy(&reply)
        .lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .and_then(|v| v.trim().parse().ok())
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
