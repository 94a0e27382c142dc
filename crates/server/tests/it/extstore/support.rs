//! Helpers of the flash-tier tests (`tests/extstore.rs`): a temporary directory for the
//! flash file, a server started with one, values that say which key they belong to,
//! pipelined writes, reply parsing, polling of `stats`, and a binary-protocol GET.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::{escape, Client, ServerKind, ServerProcess, READ_TIMEOUT};

pub const MIB: u64 = 1 << 20;

/// Items per pipelined batch of sets: about half a megabyte of 4 KB values, so a batch
/// never fills more than one 1 MiB flash page and the fill loops can stop at a page.
pub const BATCH: usize = 128;

/// A directory for one test's flash file (and whatever else it needs), removed with
/// everything in it when dropped, also while the test panics.
pub struct TempDir {
    pub path: PathBuf,
}

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let path =
            std::env::temp_dir().join(format!("ferrocache-extstore-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
        TempDir { path }
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // A test may have made a subdirectory read-only; give write back first.
        use std::os::unix::fs::PermissionsExt;
        if let Ok(entries) = std::fs::read_dir(&self.path) {
            for e in entries.flatten() {
                let _ = std::fs::set_permissions(e.path(), std::fs::Permissions::from_mode(0o755));
            }
        }
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// The `-o` value for a flash file: memcached wants the page and buffer sizes (MiB)
/// before `ext_path`, so they come first; `extra` (",ext_item_size=16", ...) after.
pub fn ext_option(file: &Path, file_mib: u64, page_mib: u64, wbuf_mib: u64, extra: &str) -> String {
    format!(
        "ext_page_size={page_mib},ext_wbuf_size={wbuf_mib},ext_path={}:{file_mib}m{extra}",
        file.display()
    )
}

/// ferrocache with `-m mem_mib`, two workers, no UDP and the flash tier `ext`.
pub fn start(mem_mib: u64, ext: &str) -> ServerProcess {
    start_kind(ServerKind::Ferrocache, mem_mib, ext)
}

/// A server with a flash tier; a ferrocache one takes `debugtime` (`--debug-time`), so
/// that a test moves its clock rather than sleep for a TTL.
pub fn start_kind(kind: ServerKind, mem_mib: u64, ext: &str) -> ServerProcess {
    let mem = mem_mib.to_string();
    let mut args = vec!["-m", &mem, "-t", "2", "-U", "0", "-o", ext];
    if kind == ServerKind::Ferrocache {
        args.push("--debug-time");
    }
    ServerProcess::start(kind, &args)
}

pub fn key(i: u64) -> String {
    format!("ext:{i}")
}

/// A value that names its key and length, then letters that vary byte to byte, so a
/// value of another key, a shifted read or a flipped byte never compares equal.
/// Lowercase and digits only: it never looks like a reply line.
pub fn value(i: u64, len: usize) -> Vec<u8> {
    let mut v = format!("{i}:{len}:").into_bytes();
    v.truncate(len);
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.push(b'a' + (x % 26) as u8);
    }
    v
}

/// The flags each key is stored with: not zero, so that a stub that lost them shows.
pub fn flags(i: u64) -> u32 {
    (i as u32).wrapping_mul(2_654_435_761) >> 4
}

/// Sets `keys` with `value(i, len(i))`, `flags(i)` and `exptime`, `BATCH` per write;
/// every reply must be `STORED`.
pub fn fill(
    conn: &mut Client,
    keys: std::ops::Range<u64>,
    exptime: u32,
    len: impl Fn(u64) -> usize,
) {
    let all: Vec<u64> = keys.collect();
    for batch in all.chunks(BATCH) {
        let mut request = Vec::new();
        for &i in batch {
            set_bytes(&mut request, &key(i), flags(i), exptime, &value(i, len(i)));
        }
        let reply = conn.request(&request);
        assert_eq!(
            reply,
            b"STORED\r\n".repeat(batch.len()),
            "sets of {}..={}: {}",
            key(batch[0]),
            key(*batch.last().unwrap()),
            escape(&reply)
        );
    }
}

pub fn set_bytes(out: &mut Vec<u8>, key: &str, flags: u32, exptime: u32, value: &[u8]) {
    out.extend_from_slice(format!("set {key} {flags} {exptime} {}\r\n", value.len()).as_bytes());
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// The exact reply to `get key` for a hit of key `i` (`VALUE` block only).
pub fn value_block(i: u64, len: usize) -> Vec<u8> {
    let mut b = format!("VALUE {} {} {len}\r\n", key(i), flags(i)).into_bytes();
    b.extend_from_slice(&value(i, len));
    b.extend_from_slice(b"\r\n");
    b
}

/// One `VALUE` block of a retrieval reply.
#[derive(Debug)]
pub struct Hit {
    pub key: String,
    pub flags: u32,
    pub data: Vec<u8>,
}

/// Parses a `get`/`gets`/`gat` reply (every block, then `END`), by the lengths the
/// headers give, so values are taken byte for byte. Panics on anything malformed.
pub fn parse_values(reply: &[u8]) -> Vec<Hit> {
    let mut hits = Vec::new();
    let mut rest = reply;
    loop {
        if rest == b"END\r\n" {
            return hits;
        }
        let line_end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .unwrap_or_else(|| panic!("no line end in {}", escape(reply)));
        let line = std::str::from_utf8(&rest[..line_end]).expect("ascii header");
        let parts: Vec<&str> = line.split(' ').collect();
        assert!(
            parts[0] == "VALUE" && (parts.len() == 4 || parts.len() == 5),
            "bad header {line:?} in {}",
            escape(reply)
        );
        let len: usize = parts[3].parse().expect("length");
        let start = line_end + 2;
        assert!(
            rest.len() >= start + len + 2 && &rest[start + len..start + len + 2] == b"\r\n",
            "truncated value in {}",
            escape(reply)
        );
        hits.push(Hit {
            key: parts[1].to_string(),
            flags: parts[2].parse().expect("flags"),
            data: rest[start..start + len].to_vec(),
        });
        rest = &rest[start + len + 2..];
    }
}

/// What `get` of key `i` returned: `None` on a miss. A hit must be the exact value,
/// length and flags of `i` (the caller says the length); anything else panics.
pub fn get_checked(conn: &mut Client, i: u64, len: usize) -> bool {
    let reply = conn.request(format!("get {}\r\n", key(i)).as_bytes());
    if reply == b"END\r\n" {
        return false;
    }
    let mut expected = value_block(i, len);
    expected.extend_from_slice(b"END\r\n");
    assert!(
        reply == expected,
        "get {} returned wrong bytes: {}",
        key(i),
        escape(&reply)
    );
    true
}

/// Reads keys `keys` (`len(i)` bytes each) with multi-key `get`s of 32; returns how
/// many hit and how many returned wrong bytes (value, flags, key or order).
pub fn read_all(conn: &mut Client, keys: &[u64], len: impl Fn(u64) -> usize) -> (usize, usize) {
    let (mut hits, mut wrong) = (0, 0);
    for chunk in keys.chunks(32) {
        let names: Vec<String> = chunk.iter().map(|&i| key(i)).collect();
        let reply = conn.request(format!("get {}\r\n", names.join(" ")).as_bytes());
        let mut expect = chunk.iter();
        for hit in parse_values(&reply) {
            // Hits come in request order: skip the misses before this one.
            let Some(&i) = expect.by_ref().find(|&&i| key(i) == hit.key) else {
                wrong += 1;
                continue;
            };
            hits += 1;
            if hit.data != value(i, len(i)) || hit.flags != flags(i) {
                wrong += 1;
            }
        }
    }
    (hits, wrong)
}

/// One counter of `stats`, 0 when absent.
pub fn num(stats: &HashMap<String, String>, name: &str) -> u64 {
    stats.get(name).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Polls `stats` every 20 ms until `done` holds; panics after `timeout` with the last
/// stats. Waits are bounded but generous: the test machine may be slow and loaded.
pub fn wait_for(
    conn: &mut Client,
    what: &str,
    timeout: Duration,
    mut done: impl FnMut(&HashMap<String, String>) -> bool,
) -> HashMap<String, String> {
    let deadline = Instant::now() + timeout;
    loop {
        let stats = conn.stats("");
        if done(&stats) {
            return stats;
        }
        if Instant::now() > deadline {
            let mut ext: Vec<_> = stats
                .iter()
                .filter(|(k, _)| k.contains("extstore"))
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            ext.sort();
            panic!("{what}: not after {timeout:?}; stats: {}", ext.join(" "));
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Whether `get` of key `i` was served from flash: `get_extstore` counts each flash
/// lookup, and nothing else reads on this server while the test asks.
pub fn served_from_flash(conn: &mut Client, i: u64, len: usize) -> bool {
    let before = conn.stat("get_extstore");
    assert!(get_checked(conn, i, len), "{} is missing", key(i));
    conn.stat("get_extstore") > before
}

/// A binary-protocol GET of `key` on a connection of its own: (status, flags, cas,
/// value).
pub fn binary_get(port: u16, key: &str) -> (u16, u32, u64, Vec<u8>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
    let mut req = vec![0x80u8, 0x00];
    req.extend_from_slice(&(key.len() as u16).to_be_bytes());
    req.extend_from_slice(&[0, 0, 0, 0]); // extras, data type, vbucket
    req.extend_from_slice(&(key.len() as u32).to_be_bytes());
    req.extend_from_slice(&0x1234_5678u32.to_be_bytes()); // opaque
    req.extend_from_slice(&0u64.to_be_bytes()); // cas
    req.extend_from_slice(key.as_bytes());
    s.write_all(&req).unwrap();
    let mut head = [0u8; 24];
    s.read_exact(&mut head).expect("binary response header");
    assert_eq!(head[0], 0x81, "response magic");
    assert_eq!(
        &head[12..16],
        &0x1234_5678u32.to_be_bytes(),
        "opaque echoed"
    );
    let status = u16::from_be_bytes([head[6], head[7]]);
    let extras = head[4] as usize;
    let key_len = u16::from_be_bytes([head[2], head[3]]) as usize;
    let body_len = u32::from_be_bytes(head[8..12].try_into().unwrap()) as usize;
    let cas = u64::from_be_bytes(head[16..24].try_into().unwrap());
    let mut body = vec![0u8; body_len];
    s.read_exact(&mut body).expect("binary response body");
    let flags = if extras == 4 {
        u32::from_be_bytes(body[..4].try_into().unwrap())
    } else {
        0
    };
    (status, flags, cas, body[extras + key_len..].to_vec())
}

/// Reads until exactly `expected.len()` bytes came (or the server stalls) and compares:
/// for a pipeline whose whole reply is known in advance.
pub fn read_exact_reply(conn: &mut Client, expected: &[u8], what: &str) {
    let n = expected.len();
    let reply = conn.read_until(Duration::from_secs(60), |b| b.len() >= n);
    if reply.bytes != expected {
        let at = reply
            .bytes
            .iter()
            .zip(expected)
            .position(|(a, b)| a != b)
            .unwrap_or(reply.bytes.len().min(n));
        let from = at.saturating_sub(200);
        panic!(
            "{what}: replies differ at byte {at} of {n}\n got: {}\nwant: {}",
            escape(&reply.bytes[from..reply.bytes.len().min(at + 200)]),
            escape(&expected[from..n.min(at + 200)])
        );
    }
}

/// Sets key range `from..` in batches until `done(stats)` holds after a batch (stats
/// are checked after each), at most `max` keys; returns the end of the range written.
pub fn fill_until(
    conn: &mut Client,
    from: u64,
    max: u64,
    len: impl Fn(u64) -> usize + Copy,
    what: &str,
    mut done: impl FnMut(&HashMap<String, String>) -> bool,
) -> u64 {
    let mut next = from;
    while next < from + max {
        let end = next + BATCH as u64;
        fill(conn, next..end, 0, len);
        next = end;
        if done(&conn.stats("")) {
            return next;
        }
    }
    let stats = conn.stats("");
    panic!(
        "{what}: not reached after {max} keys (pages free {}, objects written {})",
        num(&stats, "extstore_pages_free"),
        num(&stats, "extstore_objects_written")
    );
}
