//! What the epoll and io_uring workers share: a connection's whole life but its reads
//! and writes. A backend holds its connections in [`Slots`], opens each socket the
//! kernel hands it with [`Slots::open`], runs a connection's requests with the
//! [`Exec`] that [`Engine::exec`] makes, closes it with [`Slots::close`], and after
//! every turn of its loop lets [`Scans`] run. What it keeps to itself is how bytes come
//! in and go out: epoll's `recv` and vectored `send`, io_uring's multishot receive
//! into provided buffers and its send buffer in flight.
//!
//! - [`slots`]: admission against `-c`, the table of connection slots, the accept
//!   helper, the socket options, the close path and the hand-off to `watch`'s logger.
//! - [`scan`]: the per-turn scans (`-o idle_timeout`, idle connections' buffers, TLS
//!   handshakes out of time).
//! - [`log`]: memcached's `conn_new` and `conn_close` log lines, and the listeners'.

pub(crate) mod log;
pub(crate) mod scan;
pub(crate) mod slots;

use std::cell::RefCell;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::config::IoBackend;
use crate::io::flash_io::WorkerReads;
use crate::io::net::Listener;
use crate::io::udp::UdpEndpoint;
use crate::ops::Exec;
use crate::reply::splice::Splices;
use crate::reply::Sink;
use crate::state::Shared;
use crate::stats::latency::Recorder;
use crate::stats::{bump, WorkerStats};

pub(crate) use log::listening_line;
pub(crate) use scan::{Scans, SCAN_PERIOD};
pub(crate) use slots::{Link, Slot, Slots};

/// How long shutdown waits for a slow client to take its last replies.
pub(crate) const SHUTDOWN_WRITE_TIMEOUT: Duration = Duration::from_secs(2);

/// What a worker runs its connections' requests with, lent to one connection at a time
/// through the [`Exec`] of [`Engine::exec`].
pub(crate) struct Engine {
    pub shared: Arc<Shared>,
    pub stats: Arc<WorkerStats>,
    /// Large get values pinned for the connection being run (`--zero-copy-min`);
    /// empty between connections.
    pub splices: Option<RefCell<Splices>>,
    /// `Exec::splice_min` for this worker's connections.
    pub splice_min: usize,
    /// Flash reads off the worker (`flash_io.rs`), with a flash tier.
    pub flash: Option<WorkerReads>,
    /// The requests run and not yet timed (`None` with `--latency-histograms off`).
    pub latency: Option<Recorder>,
}

impl Engine {
    /// For a worker of `backend`, woken through `wake` (which the flash reads' threads
    /// write too).
    pub fn new(
        shared: Arc<Shared>,
        stats: Arc<WorkerStats>,
        wake: &Arc<File>,
        backend: IoBackend,
    ) -> Engine {
        let (splices, splice_min) = Splices::for_worker(&shared.settings, backend);
        Engine {
            splices,
            splice_min,
            flash: WorkerReads::new(wake.clone()),
            latency: shared.settings.latency_histograms.then(Recorder::default),
            shared,
            stats,
        }
    }

    /// The [`Exec`] for one turn of the connection on `fd`. Over TLS (`tls`) values
    /// go through the session, never in place from the store.
    #[inline(always)]
    pub fn exec(&self, fd: RawFd, tls: bool) -> Exec<'_> {
        let in_place = !tls;
        Exec {
            shared: &self.shared,
            stats: &self.stats,
            sink: Sink {
                message_ends: None,
                splices: self.splices.as_ref().filter(|_| in_place),
                splice_min: if in_place {
                    self.splice_min
                } else {
                    usize::MAX
                },
                fd,
                flash: self.flash.as_ref().map(|f| &f.reads),
            },
            latency: self.latency.as_ref(),
        }
    }

    /// The [`Exec`] for a UDP socket's datagrams (`udp.rs` marks the message ends
    /// itself): every value copied, every flash read made in the lookup.
    pub fn exec_udp(&self) -> Exec<'_> {
        Exec {
            shared: &self.shared,
            stats: &self.stats,
            sink: Sink::COPY,
            latency: self.latency.as_ref(),
        }
    }

    /// memcached's `-vv` lines and the `stats conns` entries of a worker's listeners
    /// and UDP sockets, as it starts.
    pub fn announce(&self, listeners: &[Listener], udp: &[UdpEndpoint]) {
        let now = self.shared.clock.now();
        let sockets = listeners.iter().map(|l| (l.as_fd(), false));
        for (socket, is_udp) in sockets.chain(udp.iter().map(|u| (u.socket.as_fd(), true))) {
            self.shared.conns.listening(&socket, is_udp, now);
            listening_line(&self.shared, &socket, is_udp);
        }
    }
}

/// A request failed so that its connection closes: the values pinned for its replies
/// go back to the store unsent.
pub(crate) fn release_splices(exec: &Exec<'_>) {
    if let Some(splices) = exec.sink.splices {
        splices.borrow_mut().release(&exec.shared.store);
    }
}

/// Read the wake-up eventfd's counter back to zero.
pub(crate) fn clear_wake(wake: &File) {
    let mut counter = [0u8; 8];
    let _ = (&*wake).read(&mut counter);
}

/// An accept failed: memcached logs it (under `-v`) and keeps listening. One for want
/// of descriptors counts in `listen_disabled_num`, where memcached stops listening.
pub(crate) fn accept_failed(shared: &Shared, stats: &WorkerStats, e: &std::io::Error) {
    if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) {
        bump(&stats.listen_disabled_num, 1);
    }
    if shared.verbosity.load(Ordering::Relaxed) > 0 {
        eprintln!("ferrocache: accept failed: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::slots::tests::engine;

    #[test]
    fn a_tls_connection_copies_every_value() {
        let engine = engine(&[]);
        let tls = engine.exec(7, true);
        assert!(tls.sink.splices.is_none());
        assert_eq!(tls.sink.splice_min, usize::MAX);
        assert_eq!(tls.sink.fd, 7);
        let plain = engine.exec(7, false);
        assert_eq!(plain.sink.splices.is_some(), engine.splices.is_some());
        assert_eq!(plain.sink.splice_min, engine.splice_min);
    }
}
