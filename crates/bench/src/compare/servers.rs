//! The servers under test: ferrocache, memcached, and the floor
//! (ferrocache `--null-store`), each started with the same memcached flags
//! on a free 127.0.0.1 port, pinned to the server CPU.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use super::procs::{pinned_command, Spawned};
use super::procstat::{self, CpuTicks};
use crate::tls::{Blocking, TlsClient};

/// How long a server may take to accept its first connection.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// Ports tried before giving up on a start.
const START_ATTEMPTS: usize = 5;
/// Connections allowed, as memcached's `-c`.
pub const CONN_LIMIT: u32 = 4096;

/// Which server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Ferrocache,
    Memcached,
    /// ferrocache `--null-store`: canned replies, no storage; the kernel's cost.
    Floor,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Ferrocache => "ferrocache",
            Kind::Memcached => "memcached",
            Kind::Floor => "floor",
        }
    }
}

/// Where the binaries are and how to start them.
#[derive(Clone, Debug)]
pub struct Binaries {
    pub ferrocache: PathBuf,
    pub memcached: PathBuf,
    /// CPU the servers are pinned to (None: unpinned).
    pub cpu: Option<usize>,
    /// Add `-u root` (memcached refuses to run as root without it).
    pub as_root: bool,
    /// Where server logs go.
    pub log_dir: PathBuf,
}

impl Binaries {
    /// The flags every server starts with (`-p` aside), as the reports print
    /// them; [`Server::start`] passes the same.
    pub fn flags_text(&self, memory_mb: u64, conn_limit: u32) -> String {
        format!(
            "-l 127.0.0.1 -t 1 -m {memory_mb} -c {conn_limit} -U 0{}",
            if self.as_root { " -u root" } else { "" }
        )
    }
}

/// TLS for a server: memcached's `-Z -o ssl_chain_cert=...,ssl_key=...`.
#[derive(Clone, Debug)]
pub struct ServerTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// How this harness talks to it (its own `stats` included).
    pub client: TlsClient,
}

impl ServerTls {
    /// The server flags.
    fn args(&self) -> [String; 3] {
        [
            "-Z".into(),
            "-o".into(),
            format!(
                "ssl_chain_cert={},ssl_key={}",
                self.cert.display(),
                self.key.display()
            ),
        ]
    }
}

/// One running server.
pub struct Server {
    pub kind: Kind,
    pub addr: SocketAddr,
    /// The exact command line, for the report.
    pub command: String,
    /// Set when it serves TLS (`-Z`).
    pub tls: Option<ServerTls>,
    proc: Spawned,
}

/// One server to start, as [`Server::start`] and its variants describe it.
#[derive(Clone, Copy)]
struct Launch<'a> {
    kind: Kind,
    memory_mb: u64,
    /// The floor's canned value size.
    null_value_bytes: usize,
    /// `-c`.
    conn_limit: u32,
    /// `-Z` with this certificate.
    tls: Option<&'a ServerTls>,
}

impl Server {
    /// Starts `kind` with `-t 1 -m MEMORY_MB -c 4096 -U 0` on a free port and
    /// waits until it accepts connections. `null_value_bytes` sizes the
    /// floor's canned value.
    ///
    /// The port is free when probed, but another process can take it before
    /// the server binds; the server then exits, or a stranger answers on the
    /// port. A start only counts when `stats` there reports the child's PID,
    /// and a lost race is retried on a fresh port.
    pub fn start(
        bins: &Binaries,
        kind: Kind,
        memory_mb: u64,
        null_value_bytes: usize,
    ) -> anyhow::Result<Server> {
        Self::start_with_limit(bins, kind, memory_mb, null_value_bytes, CONN_LIMIT)
    }

    /// [`Server::start`] with `-c conn_limit` (the connection sweep needs
    /// more than [`CONN_LIMIT`]).
    pub fn start_with_limit(
        bins: &Binaries,
        kind: Kind,
        memory_mb: u64,
        null_value_bytes: usize,
        conn_limit: u32,
    ) -> anyhow::Result<Server> {
        let launch = Launch {
            kind,
            memory_mb,
            null_value_bytes,
            conn_limit,
            tls: None,
        };
        Self::start_full(bins, &launch)
    }

    /// [`Server::start`] serving TLS only (`-Z`), with `tls`'s certificate.
    pub fn start_tls(
        bins: &Binaries,
        kind: Kind,
        memory_mb: u64,
        tls: &ServerTls,
    ) -> anyhow::Result<Server> {
        let launch = Launch {
            kind,
            memory_mb,
            null_value_bytes: 32,
            conn_limit: CONN_LIMIT,
            tls: Some(tls),
        };
        Self::start_full(bins, &launch).map_err(|e| {
            if kind == Kind::Memcached {
                return e;
            }
            // Until the server has TLS, this is where a TLS comparison stops.
            e.context(format!(
                "{} does not serve TLS with memcached's flags (`{}`): it needs -Z support \
                 before `ferrobench compare --tls` can measure it",
                kind.name(),
                tls.args().join(" ")
            ))
        })
    }

    /// Starts `launch`, on a fresh port after each lost race.
    fn start_full(bins: &Binaries, launch: &Launch) -> anyhow::Result<Server> {
        let mut last = None;
        for _ in 0..START_ATTEMPTS {
            match Self::start_once(bins, launch)? {
                Ok(server) => return Ok(server),
                Err(problem) => last = Some(problem),
            }
        }
        Err(last.expect("at least one attempt").context(format!(
            "{} did not start in {START_ATTEMPTS} attempts",
            launch.kind.name()
        )))
    }

    /// One try on one port: the outer error is fatal, the inner one a lost
    /// race worth retrying.
    fn start_once(
        bins: &Binaries,
        launch: &Launch,
    ) -> anyhow::Result<Result<Server, anyhow::Error>> {
        let Launch {
            kind,
            memory_mb,
            null_value_bytes,
            conn_limit,
            tls,
        } = *launch;
        let port = free_port()?;
        let program: &Path = match kind {
            Kind::Memcached => &bins.memcached,
            Kind::Ferrocache | Kind::Floor => &bins.ferrocache,
        };
        if !program.exists() {
            bail!("{} is missing (for {})", program.display(), kind.name());
        }
        let mut args: Vec<String> = [
            "-l",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-U",
            "0",
            "-t",
            "1",
            "-m",
            &memory_mb.to_string(),
            "-c",
            &conn_limit.to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if bins.as_root {
            args.extend(["-u".into(), "root".into()]);
        }
        if kind == Kind::Floor {
            args.extend([
                "--null-store".into(),
                "--null-value-bytes".into(),
                null_value_bytes.to_string(),
            ]);
        }
        if let Some(t) = tls {
            args.extend(t.args());
        }
        let mut cmd = pinned_command(bins.cpu, program);
        cmd.args(&args);
        let command = format!(
            "{}{} {}",
            bins.cpu
                .map_or(String::new(), |c| format!("taskset -c {c} ")),
            program.display(),
            args.join(" ")
        );
        let log = bins.log_dir.join(format!("{}-{port}.log", kind.name()));
        let proc = Spawned::start(cmd, kind.name(), log)?;
        let mut server = Server {
            kind,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            command,
            tls: tls.cloned(),
            proc,
        };
        // A server that is up but will not speak TLS is no lost race: fail now.
        match server.wait_listening() {
            Err(e) if tls.is_some() && server.proc.exited().is_none() => Err(e),
            r => Ok(r.map(|()| server)),
        }
    }

    /// Waits until the server answers `stats` with its own PID (taskset has
    /// exec'd it by then, so the PID is the server's). Errors when it exited
    /// or someone else answers.
    fn wait_listening(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.proc.exited() {
                bail!(
                    "{} exited at start ({status}): {}\n{}",
                    self.kind.name(),
                    self.command,
                    self.proc.log_tail(2000)
                );
            }
            if let Ok(conn) = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200)) {
                conn.set_read_timeout(Some(Duration::from_secs(2)))?;
                let mut conn = match &self.tls {
                    None => Blocking::Plain(conn),
                    Some(t) => Blocking::Tls(Box::new(
                        t.client
                            .blocking("127.0.0.1", conn, Duration::from_secs(2))
                            .with_context(|| {
                                format!(
                                    "{} accepts connections on {} but no TLS session: {}",
                                    self.kind.name(),
                                    self.addr,
                                    self.command
                                )
                            })?,
                    )),
                };
                conn.set_read_timeout(Some(Duration::from_secs(2)))?;
                let pid = stats_on(&mut conn).map(|s| stat_u64(&s, "pid"));
                if matches!(pid, Ok(p) if p == u64::from(self.pid())) {
                    return Ok(());
                }
                bail!(
                    "another process answers on {} (stats pid {pid:?}, ours {})",
                    self.addr,
                    self.pid()
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "{} did not accept connections on {} within {START_TIMEOUT:?}: {}",
                    self.kind.name(),
                    self.addr,
                    self.command
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    pub fn addr_string(&self) -> String {
        self.addr.to_string()
    }

    pub fn cpu_ticks(&self) -> anyhow::Result<CpuTicks> {
        procstat::cpu_ticks(self.pid())
    }

    pub fn rss_bytes(&self) -> anyhow::Result<u64> {
        procstat::rss_bytes(self.pid())
    }

    /// Fails if the server died.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.proc.exited() {
            bail!(
                "{} exited during the benchmark ({status}):\n{}",
                self.kind.name(),
                self.proc.log_tail(2000)
            );
        }
        Ok(())
    }

    /// Stops it now (it is stopped on drop anyway).
    pub fn stop(mut self) {
        self.proc.stop();
    }
}

/// Sends `stats` on `s` and reads the reply up to `END`. On a connection
/// with earlier `noreply` requests, the reply also proves the server has
/// executed them all (one connection's requests run in order).
pub fn stats_on(s: &mut impl ReadWrite) -> anyhow::Result<BTreeMap<String, String>> {
    stats_of(s, "")
}

/// `stats GROUP` (`stats` itself for an empty group), read up to `END`.
pub fn stats_of(s: &mut impl ReadWrite, group: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let cmd = if group.is_empty() {
        "stats\r\n".to_string()
    } else {
        format!("stats {group}\r\n")
    };
    s.write_all(cmd.as_bytes())?;
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    while !buf.ends_with(b"END\r\n") {
        let n = s.read(&mut chunk).context("reading the stats reply")?;
        if n == 0 {
            bail!("connection closed during stats");
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > 1 << 20 {
            bail!("stats reply longer than 1 MiB");
        }
    }
    parse_stats(&String::from_utf8_lossy(&buf))
}

/// A connection `stats` can be asked on: plain or TLS.
pub trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// `STAT name value` lines up to `END`.
pub fn parse_stats(text: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        if line == "END" {
            return Ok(out);
        }
        let mut parts = line.splitn(3, ' ');
        match (parts.next(), parts.next(), parts.next()) {
            (Some("STAT"), Some(name), value) => {
                out.insert(name.to_string(), value.unwrap_or("").to_string());
            }
            _ => bail!("unexpected line in the stats reply: {line:?}"),
        }
    }
    bail!("stats reply without END")
}

/// A stat as a number (0 when missing).
pub fn stat_u64(stats: &BTreeMap<String, String>, name: &str) -> u64 {
    stats.get(name).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// A port nothing listens on right now.
pub fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_reply_parses() {
        let s = parse_stats("STAT pid 12\r\nSTAT version 1.6.18\r\nSTAT evictions 0\r\nEND\r\n")
            .unwrap();
        assert_eq!(s["version"], "1.6.18");
        assert_eq!(stat_u64(&s, "pid"), 12);
        assert_eq!(stat_u64(&s, "missing"), 0);
        assert!(parse_stats("STAT a 1\r\n").is_err());
        assert!(parse_stats("ERROR\r\n").is_err());
    }

    #[test]
    fn the_reports_print_the_servers_flags() {
        let mut bins = Binaries {
            ferrocache: "ferrocache".into(),
            memcached: "memcached".into(),
            cpu: None,
            as_root: false,
            log_dir: "logs".into(),
        };
        assert_eq!(
            bins.flags_text(1024, CONN_LIMIT),
            "-l 127.0.0.1 -t 1 -m 1024 -c 4096 -U 0"
        );
        bins.as_root = true;
        assert_eq!(
            bins.flags_text(64, 10_256),
            "-l 127.0.0.1 -t 1 -m 64 -c 10256 -U 0 -u root"
        );
    }
}
