//! What the epoll and io_uring workers share: admission against `-c`, the wake-up
//! eventfd, the idle-timeout scan, the idle connections' buffer scan, and shutdown's
//! limits.

use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::state::Shared;
use crate::stats::{bump, WorkerStats};

/// How long shutdown waits for a slow client to take its last replies.
pub(crate) const SHUTDOWN_WRITE_TIMEOUT: Duration = Duration::from_secs(2);
pub(crate) const TOO_MANY_CONNECTIONS: &[u8] = b"ERROR Too many open connections\r\n";

/// Count a new connection against `-c`. Over the limit it is refused with
/// memcached's message (the caller then closes it).
pub(crate) fn admit(shared: &Shared, stats: &WorkerStats) -> bool {
    let max = shared.settings.max_connections;
    let prev = shared.curr_connections.fetch_add(1, Ordering::Relaxed);
    if prev >= max {
        shared.curr_connections.fetch_sub(1, Ordering::Relaxed);
        bump(&stats.rejected_connections, 1);
        return false;
    }
    bump(&stats.total_connections, 1);
    true
}

/// Make room for one more slot in a worker's table of connection slots (and in its list
/// of free slots, which may come to hold them all), by an eighth of the table and at
/// least 64 slots: doubling, a table just past a power of two would leave nearly half
/// its slots (216 to 256 bytes each) unused, for ever. Returns whether it grew.
pub(crate) fn grow_table<T>(clients: &mut Vec<Option<T>>, free: &mut Vec<usize>) -> bool {
    if clients.len() < clients.capacity() {
        return false;
    }
    clients.reserve_exact(clients.len() / 8 + 64);
    free.reserve_exact(clients.capacity() - free.len());
    true
}

/// A worker's table of connection slots grew: publish its bytes (`clients`, with
/// `side` bytes of the tables beside it) as the connections' state (`stats`
/// `conn_state_bytes`). Slots are reused and never freed, so this is the table's size
/// at the most connections the worker has held.
pub(crate) fn table_grew<T>(stats: &WorkerStats, clients: &Vec<Option<T>>, side: usize) {
    let bytes = clients.capacity() * std::mem::size_of::<Option<T>>() + side;
    stats
        .conn
        .state_bytes
        .store(bytes as u64, Ordering::Relaxed);
}

/// Read the wake-up eventfd's counter back to zero.
pub(crate) fn clear_wake(wake: &File) {
    let mut counter = [0u8; 8];
    let _ = (&*wake).read(&mut counter);
}

/// An accept failed: memcached logs it (under `-v`) and keeps listening. One for want
/// of descriptors counts in `listen_disabled_num`, where memcached stops listening.
pub(crate) fn accept_failed(
    shared: &Shared,
    stats: &crate::stats::WorkerStats,
    e: &std::io::Error,
) {
    if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) {
        crate::stats::bump(&stats.listen_disabled_num, 1);
    }
    if shared.verbosity.load(std::sync::atomic::Ordering::Relaxed) > 0 {
        eprintln!("ferrocache: accept failed: {e}");
    }
}

/// `-o idle_timeout`: each worker looks for idle clients once per second of server time
/// (its wait for events is capped at a second while the timeout is on).
pub(crate) struct IdleScan {
    last: u32,
}

impl IdleScan {
    pub fn new(shared: &Shared) -> IdleScan {
        IdleScan {
            last: shared.clock.now(),
        }
    }

    /// The slots of `clients` to close now: those idle for longer than the timeout
    /// (by `last_active`, the server time of their last byte received), when the
    /// timeout is on and the clock has ticked since the last scan; else none.
    pub fn due<T>(
        &mut self,
        shared: &Shared,
        clients: &[Option<T>],
        last_active: impl Fn(&T) -> u32,
    ) -> Vec<usize> {
        let timeout = shared.settings.idle_timeout_secs;
        if timeout == 0 {
            return Vec::new();
        }
        let now = shared.clock.now();
        if now == self.last {
            return Vec::new();
        }
        self.last = now;
        let idle = |c: &T| now.saturating_sub(last_active(c)) > timeout;
        (0..clients.len())
            .filter(|&i| clients[i].as_ref().is_some_and(idle))
            .collect()
    }
}

/// How long a connection must have received nothing before the buffer scan takes its
/// buffers back: two ticks of the server clock, so at least one whole second.
pub(crate) const BUFFER_IDLE_SECS: u32 = 2;

/// Once per second of server time, each worker gives back the buffers of the connections
/// that received nothing for [`BUFFER_IDLE_SECS`] and hold nothing (see
/// `session/conn/buffers.rs`: under its budget a connection keeps its buffers between
/// turns, and this is what takes them from one that went quiet). Each worker's wait for
/// events is capped at a second for it.
pub(crate) struct BufferScan {
    last: u32,
}

impl BufferScan {
    pub fn new(shared: &Shared) -> BufferScan {
        BufferScan {
            last: shared.clock.now(),
        }
    }

    /// The server time, when it has ticked since the last scan; a connection whose last
    /// input came at `last_input` is then idle enough if [`BufferScan::idle`] says so.
    pub fn due(&mut self, shared: &Shared) -> Option<u32> {
        let now = shared.clock.now();
        if now == self.last {
            return None;
        }
        self.last = now;
        Some(now)
    }

    pub fn idle(now: u32, last_input: u32) -> bool {
        now.saturating_sub(last_input) >= BUFFER_IDLE_SECS
    }
}

/// How long a worker may wait for events: a second, for the scans above.
pub(crate) const SCAN_PERIOD: Duration = Duration::from_secs(1);

/// A connection opened: memcached's `type=conn_new` log line (when a watcher wants
/// connevents) and its `-vv` line, which names the `-B` protocol.
pub(crate) fn conn_opened(shared: &Shared, socket: &impl std::os::fd::AsFd) {
    use crate::admin::watch::{Event, Streams};
    let fd = socket.as_fd().as_raw_fd();
    if shared.watch.wants(Streams::CONNEVENTS) {
        let (peer, transport) = peer_of(socket);
        shared.watch.log(
            b"",
            Event::ConnNew {
                peer,
                transport,
                cfd: fd,
            },
        );
    }
    if shared.verbosity.load(Ordering::Relaxed) > 1 {
        let kind = match shared.settings.binding {
            crate::config::Binding::Auto => "auto-negotiating client connection",
            crate::config::Binding::Ascii => "ascii client connection.",
            crate::config::Binding::Binary => "binary client connection.",
        };
        eprintln!("<{fd} new {kind}");
    }
}

/// A connection closing (before its socket is): memcached's `type=conn_close` line
/// with `reason`, and its `-vv` line.
pub(crate) fn conn_closing(
    shared: &Shared,
    socket: &impl std::os::fd::AsFd,
    reason: crate::admin::watch::CloseReason,
) {
    use crate::admin::watch::{Event, Streams};
    let fd = socket.as_fd().as_raw_fd();
    if shared.watch.wants(Streams::CONNEVENTS) {
        let (peer, transport) = peer_of(socket);
        shared.watch.log(
            b"",
            Event::ConnClose {
                peer,
                transport,
                reason,
                cfd: fd,
            },
        );
    }
    if shared.verbosity.load(Ordering::Relaxed) > 1 {
        eprintln!("<{fd} connection closed.");
    }
}

/// The peer's address and transport, as memcached's log lines give them: a UNIX
/// socket's client has none (`rip=unix`, transport `local`); a TCP peer the kernel no
/// longer names (reset) is 0.0.0.0:0.
fn peer_of(
    socket: &impl std::os::fd::AsFd,
) -> (Option<std::net::SocketAddr>, crate::admin::watch::Transport) {
    use crate::admin::watch::Transport;
    let sock = socket2::SockRef::from(socket);
    let local = sock.local_addr().ok();
    if local.as_ref().is_some_and(|a| a.as_socket().is_none()) {
        return (None, Transport::Local);
    }
    let peer = sock
        .peer_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .unwrap_or_else(|| std::net::SocketAddr::from(([0, 0, 0, 0], 0)));
    (Some(peer), Transport::Tcp)
}

/// memcached's `-vv` line for a listening socket: `<FD server listening (PROTOCOL)`, or
/// `(udp)`.
pub(crate) fn listening_line(shared: &Shared, socket: &impl std::os::fd::AsFd, udp: bool) {
    if shared.verbosity.load(Ordering::Relaxed) > 1 {
        let fd = socket.as_fd().as_raw_fd();
        let what = match (udp, shared.settings.binding) {
            (true, _) => "udp",
            (false, crate::config::Binding::Auto) => "auto-negotiate",
            (false, crate::config::Binding::Ascii) => "ascii",
            (false, crate::config::Binding::Binary) => "binary",
        };
        eprintln!("<{fd} server listening ({what})");
    }
}
