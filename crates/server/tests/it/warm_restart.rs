//! Warm restart (`-e FILE`, memcached's memory file): SIGUSR1 or `shutdown graceful`
//! saves the cache and exits 0; a start with the same file and settings serves every
//! item that was live, with its value, flags, CAS and remaining TTL. Anything unsafe
//! (a server killed rather than stopped gracefully, another `-m` or `-I`, a damaged
//! file) starts empty with one line on stderr saying why.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::{ServerKind, ServerProcess};

/// How long a graceful stop (drain and save) may take.
const EXIT_TIMEOUT: Duration = Duration::from_secs(30);
const EMPTY_LINE: &str = "starting with an empty cache";

/// A memory file for one test, on the RAM disk where there is one, removed (with its
/// `.tmp` and the test's stderr log) when dropped.
struct Paths {
    file: PathBuf,
    log: PathBuf,
    /// Bytes of the log already taken (servers keep appending to the same file).
    seen: std::cell::Cell<usize>,
}

impl Paths {
    fn new(test: &str) -> Paths {
        let dir = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let stem = format!("ferrocache-warm-{}-{test}", std::process::id());
        let paths = Paths {
            file: dir.join(&stem),
            log: std::env::temp_dir().join(format!("{stem}.log")),
            seen: std::cell::Cell::new(0),
        };
        paths.clean();
        paths
    }

    fn file(&self) -> &str {
        self.file.to_str().unwrap()
    }

    fn clean(&self) {
        for p in [&self.file, &self.file.with_extension("tmp"), &self.log] {
            let _ = std::fs::remove_file(p);
        }
        let _ = std::fs::remove_file(format!("{}.tmp", self.file()));
    }

    /// What the servers of this test wrote on stderr since the last call.
    fn take_log(&self) -> String {
        let text = std::fs::read(&self.log).unwrap_or_default();
        let new = text.get(self.seen.get()..).unwrap_or_default();
        self.seen.set(text.len());
        String::from_utf8_lossy(new).into_owned()
    }
}

impl Drop for Paths {
    fn drop(&mut self) {
        self.clean();
    }
}

fn start(paths: &Paths, extra: &[&str]) -> ServerProcess {
    let mut args = vec!["-e", paths.file(), "-t", "2"];
    args.extend_from_slice(extra);
    ServerProcess::start_with(ServerKind::Ferrocache, &args, &[], Some(&paths.log))
}

fn signal(server: &ServerProcess, sig: i32) {
    // SAFETY: kill(2) on the child's PID, which is not reaped yet (the ServerProcess
    // owns it), touches no memory of this process.
    let rc = unsafe { libc::kill(server.id() as i32, sig) };
    assert_eq!(rc, 0, "kill {sig} {}", server.describe());
}

/// SIGUSR1, then the exit: status 0 and memcached's "Gracefully stopping".
fn stop_gracefully(mut server: ServerProcess, paths: &Paths) -> String {
    signal(&server, libc::SIGUSR1);
    let status = server
        .wait_exit(EXIT_TIMEOUT)
        .unwrap_or_else(|| panic!("{} did not exit after SIGUSR1", server.describe()));
    assert!(status.success(), "{}: {status}", server.describe());
    let log = paths.take_log();
    assert!(log.contains("Gracefully stopping"), "{log}");
    log
}

fn kill(mut server: ServerProcess) {
    signal(&server, libc::SIGKILL);
    server.wait_exit(EXIT_TIMEOUT).expect("killed server exits");
}

/// `gets` of one key: (flags, cas, value), or None on a miss.
fn gets(c: &mut common::Client, key: &str) -> Option<(u32, u64, Vec<u8>)> {
    let reply = c.request(format!("gets {key}\r\n").as_bytes());
    if reply == b"END\r\n" {
        return None;
    }
    let head_end = reply.windows(2).position(|w| w == b"\r\n").unwrap();
    let head = String::from_utf8_lossy(&reply[..head_end]).into_owned();
    let f: Vec<&str> = head.split(' ').collect();
    assert_eq!((f[0], f[1]), ("VALUE", key), "{head}");
    let len: usize = f[3].parse().unwrap();
    let value = reply[head_end + 2..head_end + 2 + len].to_vec();
    assert_eq!(&reply[head_end + 2 + len..], b"\r\nEND\r\n");
    Some((f[2].parse().unwrap(), f[4].parse().unwrap(), value))
}

fn set(c: &mut common::Client, key: &str, flags: u32, exptime: u32, value: &[u8]) {
    let mut req = format!("set {key} {flags} {exptime} {}\r\n", value.len()).into_bytes();
    req.extend_from_slice(value);
    req.extend_from_slice(b"\r\n");
    assert_eq!(c.request(&req), b"STORED\r\n", "set {key}");
}

fn large(i: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|j| b'a' + ((i * 7 + j / 1000) % 26) as u8)
        .collect()
}

/// The remaining TTL meta reports (`mg KEY t`): -1 for none.
fn ttl(c: &mut common::Client, key: &str) -> i64 {
    let reply = c.request_str(&format!("mg {key} t\r\n"));
    let t = reply
        .split_whitespace()
        .find_map(|f| f.strip_prefix('t'))
        .unwrap_or_else(|| panic!("mg {key} t: {reply:?}"));
    t.parse().unwrap()
}

#[test]
fn a_graceful_restart_keeps_values_flags_cas_and_ttls() {
    let paths = Paths::new("round-trip");
    let server = start(&paths, &["-m", "64"]);
    assert!(
        paths.take_log().contains(EMPTY_LINE),
        "first start: no file yet"
    );
    let mut c = server.connect();
    assert_eq!(c.stats("settings")["memory_file"], paths.file());
    for i in 0..3000usize {
        let ttl = if i % 2 == 0 { 0 } else { 10_000 };
        set(
            &mut c,
            &format!("k{i}"),
            i as u32 * 977,
            ttl,
            format!("value-{i}").as_bytes(),
        );
    }
    for (i, len) in [(0, 300_000), (1, 900_000), (2, 65_000)] {
        set(&mut c, &format!("large{i}"), 7, 0, &large(i, len));
    }
    set(&mut c, "short", 1, 1, b"gone by then");
    let set_short = Instant::now();
    set(&mut c, "counter", 0, 0, b"41");
    assert_eq!(c.request(b"incr counter 1\r\n"), b"42\r\n");
    assert_eq!(c.request(b"append k2 0 0 4\r\nmore\r\n"), b"STORED\r\n");
    assert_eq!(c.request(b"delete k4\r\n"), b"DELETED\r\n");
    let keys: Vec<String> = (0..3000)
        .map(|i| format!("k{i}"))
        .chain((0..3).map(|i| format!("large{i}")))
        .chain(["counter".to_string()])
        .collect();
    let before: Vec<_> = keys.iter().map(|k| gets(&mut c, k)).collect();
    let items = c.stat("curr_items");
    let ttl_before = ttl(&mut c, "k1");
    let stopped = Instant::now();
    drop(c);
    stop_gracefully(server, &paths);
    // `short` (TTL 1 s) has surely expired by the time it is read back.
    thread::sleep(Duration::from_secs(3).saturating_sub(set_short.elapsed()));

    let server = start(&paths, &["-m", "64"]);
    let log = paths.take_log();
    assert!(!log.contains(EMPTY_LINE), "{log}");
    let mut c = server.connect();
    let after: Vec<_> = keys.iter().map(|k| gets(&mut c, k)).collect();
    for ((k, b), a) in keys.iter().zip(&before).zip(&after) {
        assert_eq!(a, b, "{k}");
    }
    assert_eq!(before[4], None, "k4 was deleted");
    assert_eq!(after[2].as_ref().unwrap().2, b"value-2more");
    assert_eq!(gets(&mut c, "counter").unwrap().2, b"42");
    assert_eq!(gets(&mut c, "short"), None, "expired while stopped");
    // The remaining TTL went on counting while the server was down.
    let waited = stopped.elapsed().as_secs() as i64 + 2;
    let left = ttl(&mut c, "k1");
    assert!(
        left <= ttl_before && left >= ttl_before - waited,
        "{ttl_before} -> {left}"
    );
    assert_eq!(ttl(&mut c, "k0"), -1);
    // Every item but `short` (which the read above unlinked, if the sweep had not).
    assert_eq!(c.stat("curr_items"), before.iter().flatten().count() as u64);
    assert!(items >= before.iter().flatten().count() as u64);
    // CAS ids go on after the saved ones; the cache keeps working.
    let max_cas = before.iter().flatten().map(|v| v.1).max().unwrap();
    set(&mut c, "new", 0, 0, b"x");
    assert!(gets(&mut c, "new").unwrap().1 > max_cas);
    assert_eq!(c.stats("settings")["memory_file"], paths.file());
    drop(c);

    // And once more: a restarted cache saves and restores the same way.
    stop_gracefully(server, &paths);
    let server = start(&paths, &["-m", "64"]);
    assert!(!paths.take_log().contains(EMPTY_LINE));
    let mut c = server.connect();
    assert_eq!(gets(&mut c, "large1").unwrap().2, large(1, 900_000));
    assert_eq!(gets(&mut c, "k2999").unwrap().2, b"value-2999");
    assert!(gets(&mut c, "new").is_some());
}

#[test]
fn shutdown_graceful_saves_as_sigusr1_does() {
    let paths = Paths::new("shutdown-graceful");
    let mut server = start(&paths, &["-A"]);
    let mut c = server.connect();
    set(&mut c, "kept", 3, 0, b"by shutdown graceful");
    // memcached closes the connection without a reply.
    c.send(b"shutdown graceful\r\n");
    let reply = c.read_to_close(Duration::from_secs(10));
    assert_eq!(reply.ending, common::Ending::Closed);
    assert_eq!(reply.bytes, b"");
    let status = server
        .wait_exit(EXIT_TIMEOUT)
        .expect("exit after shutdown graceful");
    assert!(status.success(), "{status}");
    assert!(paths.take_log().contains("Gracefully stopping"));
    let server = start(&paths, &[]);
    let mut c = server.connect();
    assert_eq!(gets(&mut c, "kept").unwrap().2, b"by shutdown graceful");
    assert_eq!(
        c.request(b"shutdown sideways\r\n"),
        b"CLIENT_ERROR invalid shutdown mode\r\n"
    );
}

/// A server killed while clients load it, or stopped by SIGTERM, leaves nothing to load:
/// the next start is empty and says why. So does one killed after a warm restart,
/// whose image was loaded and marked in use.
#[test]
fn a_server_killed_mid_load_restarts_empty_with_a_log_line() {
    let paths = Paths::new("killed");
    let server = start(&paths, &[]);
    let port = server.port;
    let stored = Arc::new(AtomicUsize::new(0));
    let loader = {
        let stored = stored.clone();
        thread::spawn(move || {
            let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
                return;
            };
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut buf = [0u8; 64];
            for i in 0..200_000 {
                let req = format!("set load{i} 0 0 10\r\n0123456789\r\n");
                if s.write_all(req.as_bytes()).is_err() || s.read(&mut buf).unwrap_or(0) == 0 {
                    return;
                }
                stored.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while stored.load(Ordering::Relaxed) < 2000 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(5));
    }
    assert!(
        stored.load(Ordering::Relaxed) >= 2000,
        "the load did not start"
    );
    kill(server);
    loader.join().unwrap();
    let server = start(&paths, &[]);
    let log = paths.take_log();
    assert!(
        log.contains("not saved") && log.contains(EMPTY_LINE),
        "{log}"
    );
    let mut c = server.connect();
    assert_eq!(c.stat("curr_items"), 0);
    set(&mut c, "a", 0, 0, b"1");
    drop(c);

    // Saved, restored, then killed: the loaded image is not served again.
    stop_gracefully(server, &paths);
    let server = start(&paths, &[]);
    assert!(!paths.take_log().contains(EMPTY_LINE));
    assert!(gets(&mut server.connect(), "a").is_some());
    kill(server);
    let server = start(&paths, &[]);
    assert!(paths.take_log().contains(EMPTY_LINE));
    let mut c = server.connect();
    assert_eq!(c.stat("curr_items"), 0);
    set(&mut c, "b", 0, 0, b"2");
    drop(c);

    // SIGTERM stops without saving, as in memcached.
    let mut server = server;
    signal(&server, libc::SIGTERM);
    assert!(server.wait_exit(EXIT_TIMEOUT).expect("exit").success());
    let server = start(&paths, &[]);
    assert!(paths.take_log().contains("not saved"));
    assert_eq!(server.connect().stat("curr_items"), 0);
}

#[test]
fn another_memory_limit_item_size_or_a_damaged_file_starts_empty() {
    let paths = Paths::new("settings");
    let saved = |paths: &Paths, args: &[&str]| {
        let server = start(paths, args);
        let mut c = server.connect();
        for i in 0..500 {
            set(&mut c, &format!("x{i}"), 0, 0, b"some value");
        }
        drop(c);
        stop_gracefully(server, paths);
    };
    let empty_because = |paths: &Paths, args: &[&str], why: &[&str]| {
        let server = start(paths, args);
        let log = paths.take_log();
        assert!(log.contains(EMPTY_LINE), "{args:?}: {log}");
        for w in why {
            assert!(log.contains(w), "{args:?}: wanted {w:?} in {log}");
        }
        assert_eq!(
            log.lines().filter(|l| l.contains("[restart]")).count(),
            1,
            "{log}"
        );
        assert_eq!(server.connect().stat("curr_items"), 0);
        kill(server);
    };
    saved(&paths, &["-m", "64"]);
    empty_because(&paths, &["-m", "128"], &["-m 64", "-m 128"]);
    saved(&paths, &["-m", "64"]);
    empty_because(&paths, &["-m", "64", "-I", "2m"], &["-I"]);

    // A torn file (cut short) and a damaged one (one byte changed).
    saved(&paths, &["-m", "64"]);
    let bytes = std::fs::read(&paths.file).unwrap();
    std::fs::write(&paths.file, &bytes[..bytes.len() - 1000]).unwrap();
    empty_because(&paths, &["-m", "64"], &["truncated"]);
    let mut damaged = bytes.clone();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0x40;
    std::fs::write(&paths.file, &damaged).unwrap();
    empty_because(&paths, &["-m", "64"], &["checksum"]);
    // The same bytes undamaged load.
    std::fs::write(&paths.file, &bytes).unwrap();
    let server = start(&paths, &["-m", "64"]);
    assert!(!paths.take_log().contains(EMPTY_LINE));
    assert_eq!(server.connect().stat("curr_items"), 500);
}

/// Clients keep reconnecting and storing while the server stops and starts again: every
/// set that was answered `STORED` before the stop is a hit afterwards with its value,
/// and no read ever sees a value that is not its key's.
#[test]
fn a_restart_while_clients_keep_reconnecting_loses_nothing() {
    const CLIENTS: usize = 4;
    const OPS_PER_CLIENT: usize = 20_000;
    let paths = Paths::new("reconnecting");
    let server = start(&paths, &[]);
    let port = Arc::new(AtomicU16::new(server.port));
    let done = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicUsize::new(0));
    let stored = Arc::new(Mutex::new(Vec::new()));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|t| {
            let (port, done, ops, stored) =
                (port.clone(), done.clone(), ops.clone(), stored.clone());
            thread::spawn(move || {
                let mut mine = Vec::new();
                let mut n = 0;
                let deadline = Instant::now() + Duration::from_secs(60);
                'connect: while !done.load(Ordering::Relaxed)
                    && n < OPS_PER_CLIENT
                    && Instant::now() < deadline
                {
                    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port.load(Ordering::Relaxed)))
                    else {
                        thread::sleep(Duration::from_millis(2));
                        continue;
                    };
                    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                    // A few requests per connection, then a new one.
                    for _ in 0..20 {
                        let key = format!("c{t}:{n}");
                        let value = format!("v{t}:{n}");
                        let req = format!(
                            "set {key} 0 0 {}\r\n{value}\r\nget {key} c{t}:{}\r\n",
                            value.len(),
                            n / 2
                        );
                        if s.write_all(req.as_bytes()).is_err() {
                            continue 'connect;
                        }
                        let mut reply = Vec::new();
                        let mut buf = [0u8; 4096];
                        while reply.iter().filter(|&&b| b == b'\n').count() < 2
                            || !reply.ends_with(b"END\r\n")
                        {
                            match s.read(&mut buf) {
                                Ok(0) | Err(_) => continue 'connect,
                                Ok(k) => reply.extend_from_slice(&buf[..k]),
                            }
                        }
                        let text = String::from_utf8_lossy(&reply).into_owned();
                        assert!(text.starts_with("STORED\r\n"), "{text:?}");
                        mine.push((key.clone(), value.clone()));
                        // Every value read back is its key's.
                        let mut lines = text.lines().skip(1);
                        while let Some(line) = lines.next() {
                            if let Some(rest) = line.strip_prefix("VALUE c") {
                                let k = rest.split(' ').next().unwrap();
                                assert_eq!(lines.next(), Some(format!("v{k}").as_str()));
                            }
                        }
                        n += 1;
                        ops.fetch_add(1, Ordering::Relaxed);
                    }
                }
                stored.lock().unwrap().extend(mine);
            })
        })
        .collect();
    let wait_for = |count: usize| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while ops.load(Ordering::Relaxed) < count && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
    };
    wait_for(2000);
    stop_gracefully(server, &paths);
    let at_stop = ops.load(Ordering::Relaxed);
    let server = start(&paths, &[]);
    assert!(!paths.take_log().contains(EMPTY_LINE));
    port.store(server.port, Ordering::Relaxed);
    wait_for(at_stop + 2000);
    done.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    let stored = stored.lock().unwrap();
    assert!(stored.len() >= at_stop, "{} < {at_stop}", stored.len());
    let mut c = server.connect();
    for chunk in stored.chunks(50) {
        let keys: Vec<&str> = chunk.iter().map(|(k, _)| k.as_str()).collect();
        let reply = c.request_str(&format!("get {}\r\n", keys.join(" ")));
        let mut want = String::new();
        for (k, v) in chunk {
            want.push_str(&format!("VALUE {k} 0 {}\r\n{v}\r\n", v.len()));
        }
        want.push_str("END\r\n");
        assert_eq!(reply, want);
    }
}

/// Without `-e`, `stats settings` shows what memcached's `%s` of its NULL setting prints.
#[test]
fn memory_file_without_e_reads_as_memcached_prints_it() {
    for kind in [ServerKind::Ferrocache, ServerKind::Memcached] {
        let server = ServerProcess::start(kind, &["-U", "0"]);
        assert_eq!(
            server.stats("settings")["memory_file"],
            "(null)",
            "{}",
            server.describe()
        );
    }
}
