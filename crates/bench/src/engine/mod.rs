//! Runs one measurement: connect, preload, start the worker threads, show
//! progress, and merge what they measured.
//!
//! ```text
//!   main thread: preload -> connect every socket (clear errors here, the
//!     whole setup bounded in time) -> [observer: Connected]
//!     -> spawn T workers, each with C/T sessions (one socket per server)
//!     -> progress line, or the observer's window edges, until they finish
//!     -> merge Stats -> RunResult
//!   time: 0 ........ warmup ........................ end ... end+timeout
//!         (not measured) |   measured: requests started here  | drain
//!              [observer: MeasureStart]          [observer: MeasureEnd]
//! ```
//!
//! The observer ([`run_observed`]) lets a caller measure something outside
//! this process over exactly the measured window, e.g. a server's CPU time,
//! without charging it for thousands of connects and closes.
//!
//! - `worker`: one thread's mio loop over its sessions, closed or open loop;
//!   `stream`: a session's socket, plain or TLS, the one place that reads and
//!   writes it; [`tls`]: the TLS transport under it; [`wire`]: the requests and
//!   replies on it (through the `protocol` crate's client side).
//! - `preload`: the keys written before the measured run; `alarm`: the open
//!   loop's timerfd, to the microsecond.

mod alarm;
mod preload;
mod stream;
pub mod tls;
pub mod wire;
mod worker;

use std::io::IsTerminal;
use std::net::{TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::config::{Config, Load, Transport};
use crate::fdlimit;
use crate::placement::Placement;
use crate::schedule::Schedule;
use crate::stats::{Scope, Stats};
use tls::TlsStream;
use worker::{Link, Worker, WorkerSetup};

/// How long a connection attempt may take before the server counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// The setup of all connections may take [`CONNECT_TIMEOUT`] plus this much per
/// session. A loopback connect takes tens of microseconds; a server whose
/// listen backlog overflows makes each connect wait for a SYN retransmit
/// (a second or more), and 10 000 of those must fail in seconds, not hours.
const CONNECT_BUDGET_PER_SESSION: Duration = Duration::from_millis(2);
/// `--tls` adds this much per session to the setup budget: a full handshake
/// costs each side a signature or its check and a key exchange (well under a
/// millisecond on loopback; the margin is for a loaded machine).
const TLS_BUDGET_PER_SESSION: Duration = Duration::from_millis(10);
/// Without `--duration`, a `--requests` run still stops after this long.
pub const MAX_RUN_TIME: Duration = Duration::from_secs(600);

/// What the workers share, read-only apart from the abort flag and progress slots.
pub struct Shared {
    pub start: Instant,
    pub warmup_ns: u64,
    pub end_ns: u64,
    /// Set by a worker that hit a fatal error, so the others stop too.
    pub abort: AtomicBool,
    /// One slot per worker for the live progress line (empty when off).
    pub progress: Vec<Mutex<Option<Scope>>>,
}

/// The moments of a run an observer of [`run_observed`] is called at, from
/// the main thread while the workers run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Every connection is open; no worker has started.
    Connected,
    /// The measured window begins (the warm-up is over).
    MeasureStart,
    /// The measured window ends (or every worker stopped early); what is in
    /// flight drains next.
    MeasureEnd,
}

/// The outcome of one run.
#[derive(Clone, Debug)]
pub struct RunResult {
    pub stats: Stats,
    /// The measured interval the rates divide by.
    pub elapsed: Duration,
    /// Client CPU time (user + system) spent during the measured run.
    pub cpu_secs: f64,
    /// The open-loop target, if any.
    pub target_rate: Option<f64>,
}

impl RunResult {
    pub fn ops_per_sec(&self) -> f64 {
        self.stats.total.counters.ops as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Client CPU seconds (user + system, all threads) from `/proc/self/stat`.
/// Its fields are in clock ticks of `USER_HZ`, which Linux fixes at 100 on
/// every architecture ferrobench runs on.
pub fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields overall, so the 12th and 13th after it.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (ticks(11) + ticks(12)) as f64 / 100.0
}

/// Opens one session's links: a socket to each server.
fn connect_session(cfg: &Config, timeout: Duration) -> anyhow::Result<Vec<Link>> {
    cfg.servers
        .iter()
        .map(|s| match cfg.transport {
            Transport::Tcp => {
                let started = Instant::now();
                let mut stream = TcpStream::connect_timeout(&s.addr, timeout)
                    .with_context(|| format!("cannot connect to server {} ({})", s.name, s.addr))?;
                stream.set_nodelay(true)?;
                // The handshake is part of the setup: never measured, always bounded.
                let session = match &cfg.tls {
                    Some(tls) => Some(
                        tls.handshake(
                            &s.host,
                            &mut stream,
                            timeout.saturating_sub(started.elapsed()),
                        )
                        .with_context(|| format!("server {} ({})", s.name, s.addr))?,
                    ),
                    None => None,
                };
                stream.set_nonblocking(true)?;
                let stream = mio::net::TcpStream::from_std(stream);
                Ok(match session {
                    Some(session) => Link::Tls(Box::new(TlsStream::new(stream, session))),
                    None => Link::Tcp(stream),
                })
            }
            Transport::Udp => {
                let bind = if s.addr.is_ipv4() {
                    "0.0.0.0:0"
                } else {
                    "[::]:0"
                };
                let socket = UdpSocket::bind(bind).context("binding a UDP socket")?;
                socket.connect(s.addr).with_context(|| {
                    format!("cannot reach server {} ({}) over UDP", s.name, s.addr)
                })?;
                socket.set_nonblocking(true)?;
                Ok(Link::Udp(mio::net::UdpSocket::from_std(socket)))
            }
        })
        .collect()
}

/// Value bytes for sets without `--verify`: one shared pattern, sliced.
fn filler(max: usize) -> Vec<u8> {
    (0..max).map(|i| b'a' + (i % 26) as u8).collect()
}

/// The `--hash` placement, when there is more than one server.
pub fn ketama_for(cfg: &Config) -> Option<Placement> {
    (cfg.servers.len() > 1).then(|| {
        let names: Vec<(&str, u16)> = cfg
            .servers
            .iter()
            .map(|s| (s.host.as_str(), s.port))
            .collect();
        Placement::new(cfg.hash, &names)
    })
}

/// Fails clearly, before connecting, when the sockets cannot fit under the
/// open-file limit (else the run would die at connection N with EMFILE).
fn check_fd_limit(cfg: &Config) -> anyhow::Result<()> {
    let sockets = (cfg.connections * cfg.servers.len()) as u64;
    let limit = fdlimit::current();
    if !limit.fits(sockets + fdlimit::ENGINE_FD_RESERVE) {
        bail!(
            "{} connections to {} server(s) need about {} file descriptors, but the open-file \
             limit is {} (hard {}): raise it (`ulimit -n`) or use fewer connections",
            cfg.connections,
            cfg.servers.len(),
            sockets + fdlimit::ENGINE_FD_RESERVE,
            limit.soft.unwrap_or(u64::MAX),
            limit.hard.map_or("unlimited".into(), |h| h.to_string())
        );
    }
    Ok(())
}

/// Connects every session, each within [`CONNECT_TIMEOUT`] and all of them
/// within the setup budget, and deals them round-robin to the workers.
fn connect_all(cfg: &Config, setups: &mut [WorkerSetup]) -> anyhow::Result<()> {
    let n = cfg.connections;
    let per_session = match cfg.tls {
        Some(_) => CONNECT_BUDGET_PER_SESSION + TLS_BUDGET_PER_SESSION,
        None => CONNECT_BUDGET_PER_SESSION,
    };
    let budget = CONNECT_TIMEOUT + per_session * n as u32;
    let started = Instant::now();
    for s in 0..n {
        let left = budget.saturating_sub(started.elapsed());
        if left.is_zero() {
            bail!(
                "connected only {s} of {n} sessions in {:.1} s: the server accepts too slowly \
                 (a full listen backlog, or its connection limit reached?)",
                started.elapsed().as_secs_f64()
            );
        }
        let links = connect_session(cfg, left.min(CONNECT_TIMEOUT))
            .with_context(|| format!("connecting session {} of {n}", s + 1))?;
        let threads = setups.len();
        setups[s % threads].sessions.push((s, links));
    }
    Ok(())
}

/// Runs one measurement as `cfg` describes (the preload included when asked).
pub fn run(cfg: &Config) -> anyhow::Result<RunResult> {
    run_observed(cfg, None)
}

/// [`run`], calling `observer` at each [`Phase`] from the main thread (in
/// place of the progress line). An observer error stops the workers and
/// fails the run.
pub fn run_observed(
    cfg: &Config,
    mut observer: Option<&mut dyn FnMut(Phase) -> anyhow::Result<()>>,
) -> anyhow::Result<RunResult> {
    if cfg.connections == 0 || cfg.threads == 0 {
        bail!("--connections and --threads must be at least 1");
    }
    check_fd_limit(cfg)?;
    let ketama = ketama_for(cfg);
    if cfg.preload {
        preload::run(cfg, ketama.as_ref())?;
    }
    let threads = cfg.threads.min(cfg.connections);
    let mut setups: Vec<WorkerSetup> = (0..threads)
        .map(|index| WorkerSetup {
            index,
            sessions: Vec::new(),
            schedule: match cfg.load {
                Load::Open { rate, arrival } => Some(Schedule::new(
                    rate / threads as f64,
                    arrival,
                    index as f64 / threads as f64,
                    cfg.seed ^ (index as u64 + 1).wrapping_mul(0xA24B_AED4_963E_E407),
                )),
                Load::Closed => None,
            },
            quota: cfg
                .requests
                .map(|n| n / threads as u64 + u64::from((index as u64) < n % threads as u64)),
            max_outstanding: cfg.max_outstanding.div_ceil(threads),
        })
        .collect();
    connect_all(cfg, &mut setups)?;
    if let Some(observe) = observer.as_mut() {
        observe(Phase::Connected)?;
    }
    let run_for = if cfg.requests.is_some() && cfg.duration.is_zero() {
        MAX_RUN_TIME
    } else {
        cfg.duration
    };
    let shared = Shared {
        start: Instant::now(),
        warmup_ns: cfg.warmup.as_nanos() as u64,
        end_ns: (cfg.warmup + run_for).as_nanos() as u64,
        abort: AtomicBool::new(false),
        progress: (0..if cfg.progress { threads } else { 0 })
            .map(|_| Mutex::new(None))
            .collect(),
    };
    let filler = filler(cfg.workload.value_size.max());
    let cpu_before = cpu_seconds();
    let mut observed = Ok(());
    let results = std::thread::scope(|scope| {
        let handles: Vec<_> = setups
            .into_iter()
            .map(|setup| {
                let (shared, ketama, filler) = (&shared, ketama.as_ref(), &filler[..]);
                std::thread::Builder::new()
                    .name(format!("ferrobench-{}", setup.index))
                    .spawn_scoped(scope, move || {
                        Worker::new(cfg, shared, ketama, filler, setup)?.run()
                    })
                    .expect("spawning a worker thread")
            })
            .collect();
        if let Some(observe) = observer {
            observed = observe_window(&shared, &handles, observe);
            if observed.is_err() {
                shared.abort.store(true, Ordering::Relaxed);
            }
        } else if cfg.progress {
            show_progress(&shared, &handles);
        }
        handles
            .into_iter()
            .map(|h| h.join().expect("worker thread panicked"))
            .collect::<Vec<_>>()
    });
    let cpu_secs = cpu_seconds() - cpu_before;
    let mut stats = Stats::new(cfg.servers.len());
    let mut last_done_ns = 0;
    for r in results {
        let r = r?;
        stats.merge(&r.stats);
        last_done_ns = last_done_ns.max(r.last_done_ns);
    }
    observed?;
    let measured_end = if cfg.requests.is_some() {
        last_done_ns.min(shared.end_ns)
    } else {
        shared.end_ns
    };
    let elapsed = Duration::from_nanos(measured_end.saturating_sub(shared.warmup_ns));
    let target_rate = match cfg.load {
        Load::Open { rate, .. } => Some(rate),
        Load::Closed => None,
    };
    Ok(RunResult {
        stats,
        elapsed,
        cpu_secs,
        target_rate,
    })
}

/// Calls `observe` at the start and the end of the measured window (or
/// when every worker has stopped, if that is sooner).
fn observe_window<T>(
    shared: &Shared,
    handles: &[std::thread::ScopedJoinHandle<'_, T>],
    observe: &mut dyn FnMut(Phase) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    for (at_ns, phase) in [
        (shared.warmup_ns, Phase::MeasureStart),
        (shared.end_ns, Phase::MeasureEnd),
    ] {
        loop {
            let now = shared.start.elapsed().as_nanos() as u64;
            if now >= at_ns || handles.iter().all(|h| h.is_finished()) {
                break;
            }
            // Short naps: a worker that fails early ends the wait soon.
            std::thread::sleep(Duration::from_nanos(at_ns - now).min(Duration::from_millis(20)));
        }
        observe(phase)?;
    }
    Ok(())
}

/// The live progress line, on stderr, only when it is a terminal.
fn show_progress<T>(shared: &Shared, handles: &[std::thread::ScopedJoinHandle<'_, T>]) {
    if !std::io::stderr().is_terminal() {
        return;
    }
    let mut prev_ops = 0;
    let mut prev_t = 0.0;
    while handles.iter().any(|h| !h.is_finished()) {
        std::thread::sleep(Duration::from_millis(500));
        let mut total = Scope::default();
        for slot in &shared.progress {
            if let Some(s) = slot.lock().expect("progress lock").as_ref() {
                total.merge(s);
            }
        }
        let t = shared.start.elapsed().as_secs_f64();
        let ops = total.counters.ops;
        let rate = (ops - prev_ops.min(ops)) as f64 / (t - prev_t).max(1e-3);
        (prev_ops, prev_t) = (ops, t);
        let phase = if (t * 1e9) < shared.warmup_ns as f64 {
            " (warm-up)"
        } else {
            ""
        };
        eprint!(
            "\r\x1b[K{t:6.1}s  {rate:>12.0} ops/s  p99 {:>9.1} µs  errors {}{phase}",
            total.latency.value_at_quantile(0.99) as f64 / 1e3,
            total.counters.errors
        );
    }
    eprint!("\r\x1b[K");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{self, Args};
    use clap::Parser;

    fn config(flags: &[&str]) -> Config {
        let argv = ["ferrobench", "--quiet"].iter().chain(flags);
        cli::resolve(&Args::parse_from(argv)).unwrap().0
    }

    #[test]
    fn more_connections_than_descriptors_fail_before_connecting() {
        // Nothing listens on port 1, so only the limit check can answer this quickly.
        let cfg = config(&["--server", "127.0.0.1:1", "-c", "100000000"]);
        let e = run(&cfg).unwrap_err().to_string();
        assert!(
            e.contains("file descriptors") && e.contains("ulimit -n"),
            "{e}"
        );
    }

    #[test]
    fn the_observer_sees_every_phase_in_order() {
        // A server that accepts and never answers: the run still has its
        // phases, and what it sent times out.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let held = std::thread::spawn(move || {
            (0..3)
                .map(|_| listener.accept().unwrap().0)
                .collect::<Vec<_>>()
        });
        let cfg = config(&[
            "--server",
            &addr,
            "-c",
            "2",
            "--duration",
            "50ms",
            "--warmup",
            "20ms",
            "--timeout",
            "50ms",
        ]);
        let mut phases = Vec::new();
        let mut observe = |p: Phase| -> anyhow::Result<()> {
            phases.push(p);
            Ok(())
        };
        let result = run_observed(&cfg, Some(&mut observe)).unwrap();
        assert_eq!(
            phases,
            [Phase::Connected, Phase::MeasureStart, Phase::MeasureEnd]
        );
        assert_eq!(
            result.stats.total.counters.ops,
            result.stats.total.counters.timeouts
        );

        // An observer's error fails the run (the third accept keeps the server up).
        let cfg = config(&["--server", &addr, "-c", "1"]);
        let mut refuse = |_: Phase| -> anyhow::Result<()> { anyhow::bail!("not now") };
        let e = run_observed(&cfg, Some(&mut refuse)).unwrap_err();
        assert_eq!(e.to_string(), "not now");
        drop(held.join().unwrap());
    }

    #[test]
    fn cpu_seconds_grows_with_work() {
        let before = cpu_seconds();
        let mut x = 0u64;
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(100) {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        assert!(x > 0);
        assert!(cpu_seconds() - before >= 0.05);
    }
}
