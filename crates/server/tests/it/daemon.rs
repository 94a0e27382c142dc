//! Process options an init script relies on: `-d` detaches (the launched process exits
//! 0 at once, the server lives on in its own session, in `/`, and `-P` names it), and
//! `-r` raises the core file size limit. Both as memcached does.

use crate::common;

use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::{running_as_root, Client, ServerKind, ServerProcess};

const DEADLINE: Duration = Duration::from_secs(10);

/// A detached server, known only by its PID: killed (SIGKILL) when dropped, so a failed
/// assertion does not leave it running.
struct Daemon(i32);

impl Drop for Daemon {
    fn drop(&mut self) {
        kill(self.0, 9);
    }
}

fn kill(pid: i32, signal: i32) {
    // SAFETY: kill(2) with a plain pid and signal number touches no memory of ours.
    unsafe { sys_kill(pid, signal) };
}

extern "C" {
    #[link_name = "kill"]
    fn sys_kill(pid: i32, signal: i32) -> i32;
}

/// Whether `pid` has exited (gone, or a zombie waiting for whoever adopted it).
fn exited(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .map(str::trim_start)
            .is_some_and(|rest| rest.starts_with('Z')),
        Err(_) => true,
    }
}

/// Field `n` (1-based, as in proc(5)) of /proc/PID/stat.
fn stat_field(pid: i32, n: usize) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read stat");
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit(')').next().expect("stat format");
    rest.split_whitespace()
        .nth(n - 3)
        .expect("stat field")
        .to_string()
}

#[test]
fn detaches_in_its_own_session_and_serves() {
    let dir = std::env::temp_dir().join(format!("ferrocache-daemon-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pidfile = dir.join("ferrocache.pid");
    let _ = std::fs::remove_file(&pidfile);
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut args = vec![
        "-d".to_string(),
        "-P".into(),
        pidfile.display().to_string(),
        "-p".into(),
        port.to_string(),
        "-l".into(),
        "127.0.0.1".into(),
        "-U".into(),
        "0".into(),
        "-t".into(),
        "1".into(),
        "-m".into(),
        "16".into(),
    ];
    if running_as_root() {
        args.extend(["-u".into(), "root".into()]);
    }
    let launched = Command::new(ServerKind::Ferrocache.program())
        .args(&args)
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run ferrocache -d");
    assert!(
        launched.success(),
        "the launched process exited with {launched}"
    );

    // The pid file names the detached server once it is up.
    let deadline = Instant::now() + DEADLINE;
    let pid = loop {
        if let Some(pid) = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
        {
            break pid;
        }
        assert!(
            Instant::now() < deadline,
            "no pid file at {}",
            pidfile.display()
        );
        thread::sleep(Duration::from_millis(10));
    };
    let daemon = Daemon(pid);
    // Its own session (session id = its pid), and its directory is `/`.
    assert_eq!(stat_field(pid, 6), pid.to_string(), "session id");
    assert_eq!(
        std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap(),
        Path::new("/")
    );
    let mut client = loop {
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(_) => break Client::connect(port),
            Err(e) => {
                assert!(Instant::now() < deadline, "daemon never listened: {e}");
                thread::sleep(Duration::from_millis(10));
            }
        }
    };
    assert_eq!(client.request(b"set k 0 0 2\r\nhi\r\n"), b"STORED\r\n");
    assert_eq!(
        client.request_str("get k\r\n"),
        "VALUE k 0 2\r\nhi\r\nEND\r\n"
    );
    drop(client);

    // SIGTERM stops it cleanly, and the pid file goes with it.
    kill(pid, 15);
    while !exited(pid) {
        assert!(
            Instant::now() < deadline,
            "daemon {pid} did not exit on SIGTERM"
        );
        thread::sleep(Duration::from_millis(10));
    }
    assert!(!pidfile.exists(), "pid file left behind");
    drop(daemon);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn raises_the_core_file_limit() {
    let server = ServerProcess::start(
        ServerKind::under_test(),
        &["-r", "-t", "1", "-m", "16", "-U", "0"],
    );
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", server.id())).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max core file size"))
        .expect("core limit line");
    let soft = line["Max core file size".len()..]
        .split_whitespace()
        .next()
        .unwrap();
    assert!(
        soft == "unlimited" || soft.parse::<u64>().is_ok_and(|n| n > 0),
        "{line}"
    );
    let ours = std::fs::read_to_string("/proc/self/limits").unwrap();
    let ours_line = ours
        .lines()
        .find(|l| l.starts_with("Max core file size"))
        .unwrap();
    let hard = ours_line["Max core file size".len()..]
        .split_whitespace()
        .nth(1)
        .unwrap();
    // To unlimited where the hard limit allows it, else to the hard limit.
    if hard == "unlimited" {
        assert_eq!(soft, "unlimited", "{line}");
    } else {
        assert_eq!(soft, hard, "{line}");
    }
}
