//! Child processes the harness starts, and the promise to stop them all.
//!
//! Three layers, so no server outlives a benchmark:
//! - [`Spawned`] is a guard: dropping it (normal end, error, panic unwind)
//!   sends SIGTERM, waits a little, then SIGKILLs and reaps the child.
//! - [`install_signal_handlers`]: SIGINT/SIGTERM set a flag; a watcher thread
//!   sees it, stops every live child by PID, and exits the harness.
//! - `PR_SET_PDEATHSIG`: the kernel SIGKILLs a child when the harness dies
//!   without running either of the above (SIGKILL, abort).
//!
//! ```text
//!   signal ──> handler: store signo (async-signal-safe, nothing else)
//!   watcher thread (every 20 ms): signo set? -> SIGTERM all LIVE pids
//!        -> wait up to 2 s -> SIGKILL the rest -> exit(128 + signo)
//! ```
//!
//! The `unsafe` here is limited to three libc calls declared by hand
//! (`signal`, `kill`, `prctl`), so the bench crate needs no new dependency.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context;

use super::procstat;

const SIGKILL: i32 = 9;
const SIGTERM: i32 = 15;
const SIGINT: i32 = 2;
const PR_SET_PDEATHSIG: i32 = 1;
/// How long a child gets to exit after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(2);

extern "C" {
    fn signal(signum: i32, handler: usize) -> usize;
    fn kill(pid: i32, sig: i32) -> i32;
    fn prctl(option: i32, ...) -> i32;
}

/// PIDs of the children that are running now.
static LIVE: Mutex<Vec<u32>> = Mutex::new(Vec::new());
/// PIDs of every child ever started (for the smoke test's "all gone" check).
static ALL: Mutex<Vec<u32>> = Mutex::new(Vec::new());
/// The signal that asked the harness to stop, or 0.
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(signo: i32) {
    STOP_SIGNAL.store(signo, Ordering::SeqCst);
}

/// Sends `sig` to `pid`; a process that is already gone is not an error.
fn send(pid: u32, sig: i32) {
    // SAFETY: kill(2) with a PID of our own child and a valid signal number
    // touches no memory of ours.
    unsafe {
        kill(pid as i32, sig);
    }
}

/// SIGTERM, a grace period, then SIGKILL, for `pids` (not reaped here).
fn stop_pids(pids: &[u32]) {
    for &pid in pids {
        send(pid, SIGTERM);
    }
    let deadline = Instant::now() + STOP_GRACE;
    while Instant::now() < deadline && pids.iter().any(|&p| procstat::is_alive(p)) {
        std::thread::sleep(Duration::from_millis(20));
    }
    for &pid in pids {
        if procstat::is_alive(pid) {
            send(pid, SIGKILL);
        }
    }
}

/// Routes SIGINT and SIGTERM to a watcher thread that stops every live
/// child and exits with 128 + the signal number. Call once, early.
pub fn install_signal_handlers() {
    for signo in [SIGINT, SIGTERM] {
        // SAFETY: `on_signal` only stores to an atomic, which is
        // async-signal-safe; the handler address is a valid `extern "C" fn(i32)`.
        unsafe {
            signal(signo, on_signal as extern "C" fn(i32) as usize);
        }
    }
    std::thread::Builder::new()
        .name("compare-signals".into())
        .spawn(|| loop {
            let signo = STOP_SIGNAL.load(Ordering::SeqCst);
            if signo != 0 {
                let pids = LIVE.lock().map(|v| v.clone()).unwrap_or_default();
                eprintln!(
                    "ferrobench compare: signal {signo}: stopping {} child process(es) {pids:?}",
                    pids.len()
                );
                stop_pids(&pids);
                std::process::exit(128 + signo);
            }
            std::thread::sleep(Duration::from_millis(20));
        })
        .expect("spawning the signal watcher thread");
}

/// When a stop signal has arrived, never returns: the watcher thread is
/// stopping the children and will exit the process with 128 + signo. The
/// main thread calls this before reporting an error, because the watcher
/// killing the servers is what made its run fail.
pub fn wait_if_stopping() {
    while STOP_SIGNAL.load(Ordering::SeqCst) != 0 {
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `prog args` pinned to `cpu` with taskset (unpinned when `cpu` is None).
pub fn pinned_command(cpu: Option<usize>, prog: &Path) -> Command {
    match cpu {
        Some(cpu) => {
            let mut c = Command::new("taskset");
            c.arg("-c").arg(cpu.to_string()).arg(prog);
            c
        }
        None => Command::new(prog),
    }
}

/// A running child, stopped and reaped on drop.
pub struct Spawned {
    child: Option<Child>,
    pub name: String,
    pub log: PathBuf,
}

impl Spawned {
    /// Starts `cmd` with stdout and stderr in `log`. taskset execs the
    /// program in place, so the PID is the server's own.
    pub fn start(mut cmd: Command, name: &str, log: PathBuf) -> anyhow::Result<Spawned> {
        let out = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        cmd.stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        use std::os::unix::process::CommandExt;
        // SAFETY: runs in the forked child before exec; prctl(2) is
        // async-signal-safe and allocates nothing.
        unsafe {
            cmd.pre_exec(|| {
                prctl(PR_SET_PDEATHSIG, SIGKILL as std::ffi::c_ulong);
                Ok(())
            });
        }
        // Hold the lock across spawn so the watcher never misses this PID.
        let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {name}: {cmd:?}"))?;
        live.push(child.id());
        if let Ok(mut all) = ALL.lock() {
            all.push(child.id());
        }
        Ok(Spawned {
            child: Some(child),
            name: name.to_string(),
            log,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// The exit status if the child has already ended.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// The last `n` bytes of its log, for error messages.
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let start = text.len().saturating_sub(n);
        let start = (start..text.len())
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(text.len());
        text[start..].trim().to_string()
    }

    /// SIGTERM, wait, SIGKILL, reap; idempotent.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pid = child.id();
        if child.try_wait().ok().flatten().is_none() {
            send(pid, SIGTERM);
            let deadline = Instant::now() + STOP_GRACE;
            while Instant::now() < deadline {
                if child.try_wait().ok().flatten().is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            if child.try_wait().ok().flatten().is_none() {
                let _ = child.kill();
            }
        }
        let _ = child.wait();
        if let Ok(mut live) = LIVE.lock() {
            live.retain(|&p| p != pid);
        }
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Every child PID started by this process so far that is still running.
pub fn live_pids() -> Vec<u32> {
    LIVE.lock().map(|v| v.clone()).unwrap_or_default()
}

/// Every child PID this process has started.
pub fn all_pids() -> Vec<u32> {
    ALL.lock().map(|v| v.clone()).unwrap_or_default()
}

/// Pins every thread of this process to `cpu` (`taskset -a -cp`), so the
/// load generator's threads, started later, run there too.
pub fn pin_self(cpu: usize) -> anyhow::Result<()> {
    let status = Command::new("taskset")
        .args([
            "-a",
            "-cp",
            &cpu.to_string(),
            &std::process::id().to_string(),
        ])
        .stdout(Stdio::null())
        .status()
        .context("running taskset (util-linux)")?;
    anyhow::ensure!(status.success(), "taskset -a -cp {cpu} failed: {status}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_guard_stops_and_reaps_its_child() {
        let log = std::env::temp_dir().join(format!("compare-procs-{}.log", std::process::id()));
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        let guard = Spawned::start(cmd, "sleep", log.clone()).unwrap();
        let pid = guard.pid();
        assert!(procstat::is_alive(pid));
        assert!(live_pids().contains(&pid));
        drop(guard);
        assert!(!procstat::is_alive(pid), "sleep {pid} still runs");
        assert!(!live_pids().contains(&pid));
        let _ = std::fs::remove_file(log);
    }
}
