//! ASCII authentication (`-Y FILE`), differentially: every exchange is sent to memcached
//! 1.6.18 and to ferrocache, each on a fresh connection, and the replies must be the
//! same bytes; so must the counters, `stats settings`, and the refusals at start.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{escape, run_to_exit, Client, Ending, ServerKind, ServerProcess, READ_TIMEOUT};

/// A valid attempt, and what it or a plain `set` of the same bytes answers.
const AUTH_OK: &[u8] = b"set x 0 0 7\r\nbob pw2\r\n";

fn auth_file(name: &str, text: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("ferrocache-auth-{}-{name}", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path
}

fn start(kind: ServerKind, file: &Path) -> ServerProcess {
    let path = file.display().to_string();
    ServerProcess::start(kind, &["-Y", &path, "-U", "0", "-t", "1", "-m", "16"])
}

/// `case`, then a valid attempt and `mn` on a fresh connection: everything the server
/// answers up to the `MN` (an authenticated connection stores the second `set`, an
/// unauthenticated one authenticates with it; both say `STORED`), or to a close.
fn exchange(server: &ServerProcess, case: &[u8]) -> String {
    let mut c = Client::connect(server.port);
    let mut bytes = case.to_vec();
    bytes.extend_from_slice(AUTH_OK);
    bytes.extend_from_slice(b"mn\r\n");
    c.send(&bytes);
    let reply = c.read_until(READ_TIMEOUT, |b| b.ends_with(b"STORED\r\nMN\r\n"));
    assert_ne!(
        reply.ending,
        Ending::TimedOut,
        "{}: {} got {}",
        server.describe(),
        escape(case),
        reply.describe()
    );
    format!("{:?} {}", reply.ending, escape(&reply.bytes))
}

/// `case` alone: what arrives within a short wait (for inputs that leave the server
/// waiting for more).
fn partial(server: &ServerProcess, case: &[u8]) -> String {
    let mut c = Client::connect(server.port);
    c.send(case);
    let reply = c.read_until(Duration::from_millis(300), |_| false);
    format!("{:?} {}", reply.ending, escape(&reply.bytes))
}

#[test]
fn exchanges_match_memcached() {
    let file = auth_file(
        "exchanges",
        "alice:secret\nbob:pw2\ndave:with space\ncarol:\n",
    );
    let memcached = start(ServerKind::Memcached, &file);
    let ferrocache = start(ServerKind::Ferrocache, &file);
    let cases: Vec<Vec<u8>> = [
        &b""[..],
        b"get foo\r\n",
        b"version\r\n",
        b"quit\r\n",
        b"mg foo v\r\n",
        b"add x 0 0 7\r\nbob pw2\r\n",
        b"setx a 0 0 7\r\nbob pw2\r\n",
        b"SET x 0 0 7\r\nbob pw2\r\n",
        b"set x 0 0\r\n",
        b"set x 0\r\n",
        b"set x 0 0 -1\r\n",
        b"set x 0 0 7x\r\n",
        b"set x 0 0 +7\r\nbob pw2\r\n",
        b"set x 0 0 4294967303\r\nbob pw2\r\n",
        b"set x 0 0 12\r\nalice secret\r\n",
        b"set x 0 0 12\r\nalice wrong!\r\n",
        b"set x 0 0 11\r\nbob pw2 xyz\r\n",
        b"set x 0 0 15\r\ndave with space\r\n",
        b"set x 0 0 6\r\ncarol \r\n",
        b"set x 0 0 6\r\nbobpw2\r\n",
        b"set x 0 0 7\r\nbob\0pw2\r\n",
        b"set x 0 0 7\r\nbob pw2XX",
        b"set x 0 0 7\nbob pw2\r\nget a\r\n",
        b"set x 0 0 8\r\nbob  pw2\r\n",
        b"set  x  0  0  7\r\nbob pw2\r\n",
        b" set x 0 0 7\r\nbob pw2\r\n",
        b"set x 0 0 7 noreply\r\nbob pw2\r\n",
        b"set x 0 0 7 noreply extra\r\nbob pw2\r\n",
        b"set x 0 0 7\r\nbob bad\r\nset x 0 0 7\r\nbob pw2\r\nget x\r\n",
        b"set x 0 0 7\r\nbob pw2\r\nset foo 0 0 1\r\nv\r\nget foo\r\n",
        b"set x 0 0 7\r\nbob pw2\r\nset x 0 0 7\r\nbob bad\r\nget x\r\n",
    ]
    .iter()
    .map(|c| c.to_vec())
    .collect();
    for case in &cases {
        assert_eq!(
            exchange(&ferrocache, case),
            exchange(&memcached, case),
            "{}",
            escape(case)
        );
    }
    // Waiting for more, or (junk without a line end past 2048 bytes) closed.
    for case in [
        vec![b'x'; 3000],
        vec![b'x'; 1500],
        b"set x 0 0 7\r\nbo".to_vec(),
        b"set x 0 0 100000\r\n".to_vec(),
        [&b"set x 0 0 100000\r\n"[..], &[b'a'; 20_000]].concat(),
    ] {
        assert_eq!(
            partial(&ferrocache, &case),
            partial(&memcached, &case),
            "{}",
            escape(&case)
        );
    }
    // A split attempt completes once the rest arrives (what `get` finds depends on the
    // cases above; once, memcached missed `x` here, so only the shape is compared).
    for server in [&memcached, &ferrocache] {
        let mut c = Client::connect(server.port);
        c.send(b"set x 0 0 7\r\nbo");
        std::thread::sleep(Duration::from_millis(50));
        let reply = c.request(b"b pw2\r\nget x\r\n");
        assert!(
            reply.starts_with(b"STORED\r\n") && reply.ends_with(b"END\r\n"),
            "{}: {}",
            server.describe(),
            escape(&reply)
        );
    }
    // Counters: every checked attempt, and the failed ones.
    let counters = |server: &ServerProcess| {
        let mut c = Client::connect(server.port);
        c.send(AUTH_OK);
        c.read_until(READ_TIMEOUT, |b| b.ends_with(b"STORED\r\n"));
        let stats = c.stats("");
        let settings = c.stats("settings");
        (
            stats["auth_cmds"].clone(),
            stats["auth_errors"].clone(),
            settings["auth_enabled_ascii"].clone(),
            settings["binding_protocol"].clone(),
        )
    };
    let ours = counters(&ferrocache);
    assert_eq!(ours, counters(&memcached));
    assert_eq!(ours.2, file.display().to_string());
    let _ = std::fs::remove_file(&file);
}

/// What `kind` prints and whether it starts, with `args` (it is expected to refuse).
fn refusal(kind: ServerKind, args: &[&str]) -> (bool, String) {
    let args: Vec<String> = args
        .iter()
        .chain(&["-p", "0", "-l", "127.0.0.1"])
        .map(|a| a.to_string())
        .collect();
    let out = run_to_exit(kind, &args);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn refuses_to_start_as_memcached_does() {
    let good = auth_file("good", "bob:pw2\n");
    let malformed = auth_file("malformed", "bob:pw2\nnocolon\n");
    let missing = std::env::temp_dir().join("ferrocache-auth-no-such-file");
    let (good, malformed, missing) = (
        good.display().to_string(),
        malformed.display().to_string(),
        missing.display().to_string(),
    );
    for (args, needle) in [
        (
            vec!["-Y", good.as_str(), "-U", "11311"],
            "Cannot use UDP with ascii authentication enabled (-U 0 to disable)",
        ),
        (
            vec!["-Y", good.as_str(), "-U", "0", "-B", "binary"],
            "You cannot allow the BINARY protocol while using ascii authentication tokens.",
        ),
        (
            vec!["-Y", good.as_str(), "-U", "0", "-B", "auto"],
            "You cannot allow the BINARY protocol while using ascii authentication tokens.",
        ),
        (
            vec!["-Y", malformed.as_str(), "-U", "0"],
            "has a malformed entry. Should be 'user:password'",
        ),
        (
            vec!["-Y", missing.as_str(), "-U", "0"],
            "Could not open authfile [",
        ),
    ] {
        for kind in [ServerKind::Memcached, ServerKind::Ferrocache] {
            let (started, stderr) = refusal(kind, &args);
            assert!(!started, "{} {args:?} started", kind.name());
            assert!(
                stderr.contains(needle),
                "{} {args:?}: {stderr}",
                kind.name()
            );
        }
    }
    let _ = std::fs::remove_file(&good);
    let _ = std::fs::remove_file(&malformed);
}

/// SIGHUP reads the `-Y` file again and the server keeps running: the new entries let a
/// client in, the old ones no longer do. memcached reloads on its next clock tick, so
/// the new entry is polled for, bounded.
#[test]
fn sighup_reloads_the_file() {
    for kind in [ServerKind::Memcached, ServerKind::Ferrocache] {
        let file = auth_file(&format!("hup-{}", kind.name()), "alice:pw1\n");
        let mut server = start(kind, &file);
        // One attempt per connection, read to its line: before authentication only the
        // last reply of a read arrives, so no barrier can follow it.
        let attempt = |user_pw: &str| {
            let mut c = Client::connect(server.port);
            c.send(format!("set x 0 0 {}\r\n{user_pw}\r\n", user_pw.len()).as_bytes());
            let reply = c.read_until(READ_TIMEOUT, |b| b.ends_with(b"\r\n"));
            String::from_utf8_lossy(&reply.bytes).into_owned()
        };
        assert_eq!(attempt("alice pw1"), "STORED\r\n", "{}", kind.name());
        std::fs::write(&file, "bob:pw2\n").unwrap();
        // SAFETY: kill(2) on the child's PID, which is not reaped yet (the
        // ServerProcess owns it), touches no memory of this process.
        let rc = unsafe { libc::kill(server.id() as i32, libc::SIGHUP) };
        assert_eq!(rc, 0);
        let deadline = std::time::Instant::now() + READ_TIMEOUT;
        while attempt("bob pw2") != "STORED\r\n" {
            assert!(
                std::time::Instant::now() < deadline,
                "{}: the new entry never let a client in",
                kind.name()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(
            attempt("alice pw1"),
            "CLIENT_ERROR authentication failure\r\n",
            "{}",
            kind.name()
        );
        assert!(
            server.try_wait().is_none(),
            "{} exited on SIGHUP",
            kind.name()
        );
        std::fs::remove_file(&file).unwrap();
    }
}
