//! What the harness reads about a server process from `/proc`: CPU time
//! (`/proc/PID/stat` utime + stime) and resident memory (`/proc/PID/status`
//! VmRSS); and the whole machine's user and system time (`/proc/stat`), to
//! see how much other processes competed with a run, and its load average
//! (`/proc/loadavg`), which the reports print before and after.
//!
//! ```text
//!   /proc/PID/stat:  1234 (memcached) S 1 1234 ... utime stime cutime ...
//!                    ^pid ^comm: may hold spaces and ')' -- so split at the
//!                         LAST ')' and count fields from there:
//!                         state is field 3, utime 14, stime 15 (1-based)
//! ```
//!
//! Times are in clock ticks; [`clock_ticks_per_sec`] asks `getconf CLK_TCK`
//! once (it is 100 on every Linux we run on, and the fallback).

use std::process::Command;
use std::sync::OnceLock;

use anyhow::{bail, Context};

/// The CPU time a process has used so far, in clock ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTicks {
    pub utime: u64,
    pub stime: u64,
}

impl CpuTicks {
    pub fn total(self) -> u64 {
        self.utime + self.stime
    }

    /// Seconds of CPU from `self` (before) to `after`.
    pub fn secs_until(self, after: CpuTicks) -> f64 {
        after.total().saturating_sub(self.total()) as f64 / clock_ticks_per_sec() as f64
    }
}

/// Parses the text of `/proc/PID/stat`. The command name (field 2) is
/// whatever the process called itself, in parentheses, and may itself hold
/// spaces and parentheses; only the last `)` ends it.
pub fn parse_stat(text: &str) -> anyhow::Result<CpuTicks> {
    let (_, rest) = text
        .rsplit_once(')')
        .context("no ')' closing the command name in /proc/PID/stat")?;
    // rest: " S ppid pgrp ..." -- state is index 0, utime index 11, stime 12.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    if fields.len() < 13 {
        bail!(
            "/proc/PID/stat has {} fields after the command name, expected at least 13",
            fields.len()
        );
    }
    let num = |i: usize, name: &str| -> anyhow::Result<u64> {
        fields[i]
            .parse()
            .with_context(|| format!("bad {name} {:?} in /proc/PID/stat", fields[i]))
    };
    Ok(CpuTicks {
        utime: num(11, "utime")?,
        stime: num(12, "stime")?,
    })
}

/// Parses `VmRSS:   1234 kB` out of `/proc/PID/status`, in bytes.
pub fn parse_vm_rss(text: &str) -> anyhow::Result<u64> {
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .context("no VmRSS line in /proc/PID/status")?;
    let mut parts = line.split_whitespace();
    let kb: u64 = parts
        .next()
        .context("empty VmRSS line")?
        .parse()
        .context("bad VmRSS number")?;
    match parts.next() {
        Some("kB") | None => Ok(kb * 1024),
        Some(unit) => bail!("unexpected VmRSS unit {unit:?}"),
    }
}

/// Parses the effective uid (the second number of `Uid:`) out of
/// `/proc/PID/status`.
pub fn parse_euid(text: &str) -> anyhow::Result<u32> {
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .context("no Uid line in /proc/PID/status")?;
    line.split_whitespace()
        .nth(1)
        .context("short Uid line")?
        .parse()
        .context("bad effective uid")
}

/// User + system ticks of every CPU from the `cpu` line of `/proc/stat`
/// (`cpu user nice system idle iowait irq softirq steal ...`). Interrupt
/// time is left out: the kernel may charge a run's own loopback traffic
/// there rather than to its processes.
pub fn parse_machine_busy(text: &str) -> anyhow::Result<u64> {
    let line = text
        .lines()
        .find(|l| l.starts_with("cpu "))
        .context("no cpu line in /proc/stat")?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(3)
        .map(|f| {
            f.parse()
                .with_context(|| format!("bad field {f:?} in /proc/stat"))
        })
        .collect::<anyhow::Result<_>>()?;
    if fields.len() < 3 {
        bail!("short cpu line in /proc/stat: {line:?}");
    }
    Ok(fields.iter().sum())
}

/// The machine's user + system time so far, in seconds of one CPU.
pub fn machine_busy_secs() -> anyhow::Result<f64> {
    let text = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    Ok(parse_machine_busy(&text)? as f64 / clock_ticks_per_sec() as f64)
}

/// The 1-minute load average: the first field of `/proc/loadavg`.
pub fn parse_load_average(text: &str) -> Option<f64> {
    text.split_whitespace().next()?.parse().ok()
}

/// The 1-minute load average now, as a report prints it (`0.42`), or
/// `unknown` when `/proc/loadavg` cannot be read.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| parse_load_average(&text))
        .map_or("unknown".into(), |l| format!("{l:.2}"))
}

/// CPU ticks of process `pid` now.
pub fn cpu_ticks(pid: u32) -> anyhow::Result<CpuTicks> {
    let path = format!("/proc/{pid}/stat");
    parse_stat(&std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?)
}

/// Resident memory of process `pid` now, in bytes.
pub fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let path = format!("/proc/{pid}/status");
    parse_vm_rss(&std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?)
}

/// This process's effective uid.
pub fn euid() -> anyhow::Result<u32> {
    parse_euid(&std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?)
}

/// Whether process `pid` still exists (a zombie counts as gone: it no
/// longer runs and holds no memory or port).
pub fn is_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(text) => text
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// `getconf CLK_TCK`, asked once; 100 if getconf is missing or odd.
pub fn clock_ticks_per_sec() -> u64 {
    static TICKS: OnceLock<u64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .filter(|&t: &u64| t > 0)
            .unwrap_or(100)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMCACHED_STAT: &str = "4242 (memcached) S 1 4242 4242 0 -1 4194560 1234 0 0 0 \
        150 37 0 0 20 0 10 0 123456 1100000000 5000 18446744073709551615 1 1 0 0 0 0 0 \
        4097 2 0 0 0 17 0 0 0 0 0 0\n";

    #[test]
    fn load_average_is_the_first_field() {
        assert_eq!(
            parse_load_average("0.42 0.30 0.25 2/345 6789\n"),
            Some(0.42)
        );
        assert_eq!(parse_load_average(""), None);
        assert_eq!(parse_load_average("x 1 2"), None);
    }

    #[test]
    fn machine_busy_is_user_nice_system() {
        let stat = "cpu  100 5 40 9000 7 3 2 1 0 0\ncpu0 50 2 20 4500 3 1 1 0 0 0\nintr 1 2\n";
        assert_eq!(parse_machine_busy(stat).unwrap(), 145);
        assert!(parse_machine_busy("cpu0 1 2 3\n").is_err());
        assert!(parse_machine_busy("cpu  1 x 3\n").is_err());
    }

    #[test]
    fn stat_fields_after_the_command_name() {
        let t = parse_stat(MEMCACHED_STAT).unwrap();
        assert_eq!(
            t,
            CpuTicks {
                utime: 150,
                stime: 37
            }
        );
        assert_eq!(t.total(), 187);
    }

    #[test]
    fn stat_command_name_with_spaces_and_parentheses() {
        // A process may name itself anything, e.g. via prctl(PR_SET_NAME).
        let text = "77 (a) b (c) d) R 1 77 77 0 -1 0 0 0 0 0 9 4 0 0 20 0 1 0 5 0 0 0\n";
        assert_eq!(parse_stat(text).unwrap(), CpuTicks { utime: 9, stime: 4 });
        let text = "78 ( x ) ) S 1 78 78 0 -1 0 0 0 0 0 1000 2000 0 0\n";
        assert_eq!(
            parse_stat(text).unwrap(),
            CpuTicks {
                utime: 1000,
                stime: 2000
            }
        );
    }

    #[test]
    fn stat_rejects_garbage() {
        assert!(parse_stat("no parenthesis here").is_err());
        assert!(parse_stat("1 (x) S 1 2 3").is_err(), "too few fields");
        assert!(parse_stat("1 (x) S 1 2 3 4 5 6 7 8 9 10 u s").is_err());
    }

    #[test]
    fn own_stat_parses_and_grows() {
        let pid = std::process::id();
        let before = cpu_ticks(pid).unwrap();
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(60) {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        assert!(x > 0);
        assert!(cpu_ticks(pid).unwrap().total() >= before.total());
        assert!(rss_bytes(pid).unwrap() > 0);
        assert!(is_alive(pid));
    }

    #[test]
    fn vm_rss_and_uid() {
        let status = "Name:\tmemcached\nUid:\t1000\t0\t0\t0\nVmPeak:\t  9 kB\nVmRSS:\t  2048 kB\n";
        assert_eq!(parse_vm_rss(status).unwrap(), 2048 * 1024);
        assert_eq!(parse_euid(status).unwrap(), 0);
        assert!(parse_vm_rss("Name:\tx\n").is_err());
    }

    #[test]
    fn seconds_between_samples() {
        let hz = clock_ticks_per_sec() as f64;
        let a = CpuTicks {
            utime: 10,
            stime: 5,
        };
        let b = CpuTicks {
            utime: 110,
            stime: 105,
        };
        assert!((a.secs_until(b) - 200.0 / hz).abs() < 1e-12);
        assert_eq!(b.secs_until(a), 0.0, "never negative");
    }
}
