//! Shared helpers for the server's integration tests.
//!
//! - [`ServerProcess`] starts ferrocache or the reference memcached on a free loopback port,
//!   waits until it accepts, and kills it by PID when dropped (also while a test panics).
//! - [`Client`] is a tiny blocking client: send bytes, read until a predicate holds.
//! - [`Rng`] is a seeded SplitMix64, so every random stream can be replayed from its seed.
//!
//! Which server is "under test" is ferrocache, unless `FERRO_TEST_SERVER=memcached`; that
//! switch runs every suite against memcached itself, which is how the expectations here are
//! checked against the reference.

mod client;
mod rng;
pub mod tls;

pub use client::{escape, Client, Ending, Reply, Transport, READ_TIMEOUT};
pub use rng::Rng;

use std::collections::{HashMap, HashSet};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How long a server may take to start accepting connections.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(5);

/// How many free ports we try before giving up (another process may grab the port
/// between our probe and the server's bind).
const START_ATTEMPTS: usize = 20;

/// The two servers these tests know how to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerKind {
    /// This crate's binary.
    Ferrocache,
    /// Debian's memcached 1.6.18, the reference behaviour.
    Memcached,
}

impl ServerKind {
    /// The server the suites test: ferrocache, or memcached with `FERRO_TEST_SERVER=memcached`.
    pub fn under_test() -> ServerKind {
        match std::env::var("FERRO_TEST_SERVER").as_deref() {
            Ok("memcached") => ServerKind::Memcached,
            Ok("ferrocache") | Err(_) => ServerKind::Ferrocache,
            Ok(other) => panic!("FERRO_TEST_SERVER={other}: expected ferrocache or memcached"),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ServerKind::Ferrocache => "ferrocache",
            ServerKind::Memcached => "memcached",
        }
    }

    /// The executable to run.
    pub fn program(self) -> PathBuf {
        match self {
            ServerKind::Ferrocache => PathBuf::from(env!("CARGO_BIN_EXE_ferrocache")),
            ServerKind::Memcached => memcached_path(),
        }
    }
}

/// Finds memcached (`FERRO_MEMCACHED` overrides), or fails with a message that says how to
/// get it. The suites never skip silently: a green run must mean the oracle ran.
fn memcached_path() -> PathBuf {
    if let Ok(path) = std::env::var("FERRO_MEMCACHED") {
        return PathBuf::from(path);
    }
    let candidates = std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .map(|dir| PathBuf::from(dir).join("memcached"))
        .chain([PathBuf::from("/usr/bin/memcached")])
        .collect::<Vec<_>>();
    candidates
        .into_iter()
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "memcached (the reference server) is not installed: run scripts/test, which \
             installs it, or `apt-get install -y memcached`"
            )
        })
}

/// True when this process runs as root: memcached then needs `-u root`.
pub fn running_as_root() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1).map(|euid| euid == "0"))
        .unwrap_or(false)
}

/// A port that was free a moment ago. The server may still lose a race for it; `start`
/// retries with another port when that happens.
pub fn probably_free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local_addr").port()
}

/// Runs `kind` with `args` (plus `-u root` when running as root) to completion, for
/// a server expected to refuse to start; killed by PID after 10 s if it does not.
pub fn run_to_exit(kind: ServerKind, args: &[String]) -> std::process::Output {
    let mut args = args.to_vec();
    if running_as_root() && !args.iter().any(|a| a == "-u") {
        args.extend(["-u".to_string(), "root".to_string()]);
    }
    run_to_exit_as_given(kind, &args)
}

/// [`run_to_exit`] with `args` exactly as given (no `-u root` added).
pub fn run_to_exit_as_given(kind: ServerKind, args: &[String]) -> std::process::Output {
    let mut child = Command::new(kind.program())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().expect("try_wait").is_none() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    // Not reaped yet, so the PID is still this child's.
    let _ = child.kill();
    child.wait_with_output().expect("wait")
}

/// A running server. Dropping it kills the process by PID and reaps it.
pub struct ServerProcess {
    child: Child,
    pub kind: ServerKind,
    pub port: u16,
    /// The full argument list, for failure messages.
    pub args: Vec<String>,
}

enum Startup {
    Ready,
    /// The child exited (usually: the port was taken between our probe and its bind).
    Exited(ExitStatus),
    /// Someone else listens on the port too; we could be talking to the wrong server.
    Foreign,
    TimedOut,
}

impl ServerProcess {
    /// Starts `kind` with memcached-style `args` (never `-p`/`-l`: this picks them) on
    /// 127.0.0.1 and a free port, and returns once it accepts connections. Panics on failure.
    pub fn start(kind: ServerKind, args: &[&str]) -> ServerProcess {
        Self::start_with(kind, args, &[], None)
    }

    /// [`ServerProcess::start`] with extra environment variables, and standard error
    /// appended to `stderr` (a file path) instead of discarded.
    pub fn start_with(
        kind: ServerKind,
        args: &[&str],
        env: &[(&str, &str)],
        stderr: Option<&std::path::Path>,
    ) -> ServerProcess {
        let mut last_problem = String::new();
        for _ in 0..START_ATTEMPTS {
            let port = probably_free_port();
            let mut full_args: Vec<String> = vec![
                "-p".into(),
                port.to_string(),
                "-l".into(),
                "127.0.0.1".into(),
            ];
            full_args.extend(args.iter().map(|a| a.to_string()));
            if running_as_root() && !args.contains(&"-u") {
                full_args.extend(["-u".into(), "root".into()]);
            }
            let mut command = Command::new(kind.program());
            let err = match stderr {
                Some(path) => Stdio::from(
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(path)
                        .unwrap_or_else(|e| panic!("open {}: {e}", path.display())),
                ),
                None => Stdio::null(),
            };
            command
                .args(&full_args)
                .envs(env.iter().copied())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(err);
            // SAFETY: the closure runs in the forked child before exec and only makes one
            // async-signal-safe system call (prctl); it touches no memory of the parent.
            unsafe {
                command.pre_exec(|| {
                    // If the test process dies (killed by a timeout, say), take the server
                    // with it. PR_SET_PDEATHSIG = 1, SIGKILL = 9.
                    prctl(1, 9, 0, 0, 0);
                    Ok(())
                });
            }
            let child = command
                .spawn()
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", kind.program().display()));
            let mut server = ServerProcess {
                child,
                kind,
                port,
                args: full_args,
            };
            match server.wait_until_ready() {
                Startup::Ready => return server,
                Startup::Exited(status) => {
                    last_problem = format!("exited with {status} (port {port} taken?)");
                }
                Startup::Foreign => {
                    last_problem = format!("another process also listens on port {port}");
                }
                Startup::TimedOut => panic!(
                    "{} {:?} did not accept connections within {STARTUP_TIMEOUT:?}",
                    kind.name(),
                    server.args
                ),
            }
            // `server` drops here: killed and reaped before the next attempt.
        }
        panic!(
            "could not start {} after {START_ATTEMPTS} attempts: {last_problem}",
            kind.name()
        );
    }

    /// Polls (never a blind sleep) until the server accepts on our port and the only
    /// listening socket on that port is the child's own.
    fn wait_until_ready(&mut self) -> Startup {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Startup::Exited(status);
            }
            let listeners = listening_socket_inodes(self.port);
            if !listeners.is_empty() {
                let ours = socket_inodes_of(self.child.id());
                if !listeners.is_subset(&ours) {
                    // Give the child a moment to fail its bind rather than guess.
                    if Instant::now() + Duration::from_millis(200) > deadline {
                        return Startup::Foreign;
                    }
                    if let Ok(Some(status)) = self.child.try_wait() {
                        return Startup::Exited(status);
                    }
                    if !listening_socket_inodes(self.port).is_subset(&socket_inodes_of(self.id())) {
                        return Startup::Foreign;
                    }
                } else if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                    return Startup::Ready;
                }
            }
            if Instant::now() > deadline {
                return Startup::TimedOut;
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// The server's process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Opens a client connection (plain TCP; `tls.rs` has the TLS one).
    pub fn connect(&self) -> Client {
        Client::connect(self.port)
    }

    /// A one-line description for failure messages.
    pub fn describe(&self) -> String {
        format!(
            "{} (pid {}) {}",
            self.kind.name(),
            self.id(),
            self.args.join(" ")
        )
    }

    /// `Some(status)` once the process has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("try_wait")
    }

    /// Waits up to `timeout` for the process to exit by itself.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Resident set size in KiB (`VmRSS` in /proc/PID/status).
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.id()))
            .unwrap_or_else(|e| panic!("read /proc/{}/status: {e}", self.id()));
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS line")
    }

    /// `stats` (or `stats <sub>`) on a fresh connection, as a name -> value map.
    pub fn stats(&self, sub: &str) -> HashMap<String, String> {
        self.connect().stats(sub)
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // Kill by PID and reap, so no test leaves a server behind, panicking or not.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

extern "C" {
    fn prctl(option: i32, arg2: u64, arg3: u64, arg4: u64, arg5: u64) -> i32;
}

/// Inodes of the TCP sockets listening on `port` (any address, IPv4 or IPv6).
fn listening_socket_inodes(port: u16) -> HashSet<u64> {
    let mut inodes = HashSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 10 || fields[3] != "0A" {
                continue; // 0A = LISTEN
            }
            let local_port = fields[1]
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            if local_port == Some(port) {
                if let Ok(inode) = fields[9].parse() {
                    inodes.insert(inode);
                }
            }
        }
    }
    inodes
}

/// Inodes of the sockets process `pid` has open.
fn socket_inodes_of(pid: u32) -> HashSet<u64> {
    let mut inodes = HashSet::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return inodes;
    };
    for entry in dir.flatten() {
        if let Ok(target) = std::fs::read_link(entry.path()) {
            let target = target.to_string_lossy();
            if let Some(inode) = target
                .strip_prefix("socket:[")
                .and_then(|rest| rest.strip_suffix(']'))
                .and_then(|n| n.parse().ok())
            {
                inodes.insert(inode);
            }
        }
    }
    inodes
}

/// memcached's own flags that a test may give ferrocache: where a test hands these to
/// ferrocache, the memcached it is compared with gets them too.
#[allow(dead_code)]
pub const FLAGS_FOR_BOTH: &[&str] = &["-C"];

/// The arguments among `extra` that memcached also gets: [`FLAGS_FOR_BOTH`], and TLS
/// (`-Z` with its `-o ssl_…` suboptions).
#[allow(dead_code)]
pub fn flags_for_both<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut out = Vec::new();
    for (i, &a) in extra.iter().enumerate() {
        let tls_options = a == "-o" && extra.get(i + 1).is_some_and(|v| v.starts_with("ssl_"));
        let tls_value = i > 0 && extra[i - 1] == "-o" && a.starts_with("ssl_");
        if FLAGS_FOR_BOTH.contains(&a) || a == "-Z" || tls_options || tls_value {
            out.push(a);
        }
    }
    out
}

/// Reads an environment variable as a number, with a default.
pub fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v}: expected a number")),
        Err(_) => default,
    }
}

/// Whether this process, its descriptor limit raised to the hard limit (servers started
/// after inherit it), may hold `n` connections and some 200 descriptors more: then a
/// guard to hold for the test's run, which keeps any other test that asked for many
/// descriptors from running meanwhile. Prints why not.
pub fn descriptors_for(n: usize) -> Option<std::sync::MutexGuard<'static, ()>> {
    // Tests of every area share this process: two that each hold thousands of
    // connections wait for each other rather than add up under one limit.
    static MANY_DESCRIPTORS: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let limit = ferrocache_server::sys::raise_nofile_limit(u64::MAX);
    if limit < n as u64 + 200 {
        eprintln!("skipped: the descriptor limit is {limit}, under {n} connections and the rest");
        return None;
    }
    Some(MANY_DESCRIPTORS.lock().unwrap_or_else(|e| e.into_inner()))
}
