//! `-k`: item memory is locked into RAM. ferrocache locks each segment as the store
//! gives it memory, and what is mapped at start; memcached locks everything with
//! `mlockall`. Either way `VmLck` in /proc/PID/status grows with the items written.

use crate::common;

use common::{running_as_root, ServerKind, ServerProcess};

/// Values written: 12 MiB, so a dozen segments or more get memory.
const VALUES: usize = 120;
const VALUE_BYTES: usize = 100 * 1024;

/// `VmLck` of process `pid`, in KiB.
fn locked_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("read /proc/{pid}/status: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmLck:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmLck line")
}

/// Writes the values, reads each back, and returns `VmLck` before and after.
fn write_values(server: &ServerProcess) -> (u64, u64) {
    let before = locked_kib(server.id());
    let mut conn = server.connect();
    for i in 0..VALUES {
        let value = vec![b'a' + (i % 26) as u8; VALUE_BYTES];
        let mut request = format!("set key{i} 0 0 {VALUE_BYTES}\r\n").into_bytes();
        request.extend_from_slice(&value);
        request.extend_from_slice(b"\r\n");
        assert_eq!(conn.request(&request), b"STORED\r\n", "set key{i}");
    }
    for i in (0..VALUES).step_by(7) {
        let reply = conn.request(format!("get key{i}\r\n").as_bytes());
        let head = format!("VALUE key{i} 0 {VALUE_BYTES}\r\n");
        assert!(reply.starts_with(head.as_bytes()), "get key{i}");
        assert_eq!(reply.len(), head.len() + VALUE_BYTES + 2 + 5, "get key{i}");
    }
    (before, locked_kib(server.id()))
}

#[test]
fn lock_memory_locks_item_memory() {
    let server = ServerProcess::start(
        ServerKind::under_test(),
        &["-k", "-m", "64", "-t", "1", "-U", "0"],
    );
    let (before, after) = write_values(&server);
    if running_as_root() {
        // Root has CAP_IPC_LOCK, so no RLIMIT_MEMLOCK stands in the way.
        let written_kib = (VALUES * VALUE_BYTES / 1024) as u64;
        assert!(
            after >= written_kib && after > before,
            "VmLck {before} kB before the writes, {after} kB after {written_kib} kB of values"
        );
    } else {
        eprintln!("not root: VmLck {before} -> {after} kB, limited by RLIMIT_MEMLOCK");
    }
}

#[test]
fn without_lock_memory_nothing_is_locked() {
    let server = ServerProcess::start(
        ServerKind::under_test(),
        &["-m", "64", "-t", "1", "-U", "0"],
    );
    let (before, after) = write_values(&server);
    assert_eq!((before, after), (0, 0), "VmLck without -k");
}
