//! `--keep-going`: the state of a worker's TCP connection whose server closed,
//! reset or refused it, until a redial succeeds.
//!
//! ```text
//!   up --(EOF, reset, write error)--> down: in-flight requests fail
//!   down --(retry time)--> dialing (non-blocking connect, same poll token)
//!   dialing --(connected)--> up         held requests fail, backoff resets
//!   dialing --(refused / 1 s)--> down   held requests fail, backoff doubles
//! ```
//!
//! Requests issued to a down connection are not sent: they are held and
//! fail within [`HOLD_NS`] (or when the next dial ends, if sooner). A client
//! would see them fail at once; holding them briefly keeps a closed loop
//! whose every server is down from spinning through failures, while one
//! with a live server goes on serving it.

use std::io;
use std::net::SocketAddr;

use mio::{Interest, Token};

use super::recorder::Answer;
use super::{End, LinkState, Worker};
use crate::config::Load;
use crate::engine::stream::Stream;

/// The first wait before a redial, doubled after each failure up to
/// [`MAX_BACKOFF_NS`]: quick to find a restarted node, never a busy loop.
pub const FIRST_BACKOFF_NS: u64 = 100_000_000;
pub const MAX_BACKOFF_NS: u64 = 1_000_000_000;
/// Requests issued to a down connection fail after at most this long.
pub const HOLD_NS: u64 = 10_000_000;
/// A dial unanswered this long counts as failed (a dead host drops SYNs).
pub const DIAL_TIMEOUT_NS: u64 = 1_000_000_000;

/// A lost connection.
pub struct Down {
    /// When the next dial starts (ns since the run's start).
    pub retry_at_ns: u64,
    /// The wait after the next failure.
    backoff_ns: u64,
    /// The dial in progress and when it began.
    pub dialing: Option<(mio::net::TcpStream, u64)>,
    /// When the requests held meanwhile fail next.
    pub fail_held_at_ns: u64,
}

/// How a dial in progress stands.
pub enum Dial {
    Pending,
    Connected(mio::net::TcpStream),
    Failed,
}

impl Down {
    pub fn new(now_ns: u64) -> Down {
        Down {
            retry_at_ns: now_ns + FIRST_BACKOFF_NS,
            backoff_ns: (2 * FIRST_BACKOFF_NS).min(MAX_BACKOFF_NS),
            dialing: None,
            fail_held_at_ns: now_ns + HOLD_NS,
        }
    }

    /// Starts a non-blocking dial; false when it failed at once.
    pub fn dial(&mut self, addr: SocketAddr, now_ns: u64) -> bool {
        match mio::net::TcpStream::connect(addr) {
            Ok(s) => {
                self.dialing = Some((s, now_ns));
                true
            }
            Err(_) => false,
        }
    }

    /// After a poll event on the dialing socket: connected, failed, or not yet.
    pub fn check(&mut self) -> Dial {
        let Some((s, _)) = &self.dialing else {
            return Dial::Pending;
        };
        match s.take_error() {
            Ok(None) => {}
            Ok(Some(_)) | Err(_) => return Dial::Failed,
        }
        match s.peer_addr() {
            Ok(_) => {
                let (s, _) = self.dialing.take().expect("checked above");
                let _ = s.set_nodelay(true);
                Dial::Connected(s)
            }
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Dial::Pending,
            Err(_) => Dial::Failed,
        }
    }

    /// A dial failed: wait the backoff, then double it.
    pub fn failed(&mut self, now_ns: u64) {
        self.dialing = None;
        self.retry_at_ns = now_ns + self.backoff_ns;
        self.backoff_ns = (self.backoff_ns * 2).min(MAX_BACKOFF_NS);
    }
}

impl Worker<'_> {
    /// `--keep-going`: connection `ci` was closed or reset. Its requests in
    /// flight fail, and it is redialled after a backoff.
    pub(super) fn lose(&mut self, ci: usize, now: u64) {
        let conn = &mut self.conns[ci];
        let server = conn.server;
        if let LinkState::Tcp {
            stream,
            rx,
            written,
            ..
        } = &mut conn.link
        {
            let _ = self.poll.registry().deregister(stream.socket());
            rx.clear();
            *written = 0;
        }
        conn.out.clear();
        (conn.hits, conn.corrupt, conn.failed) = (0, 0, false);
        conn.down = Some(Down::new(now));
        if self.rec.window.measured(now) {
            self.rec.stats.total.counters.disconnects += 1;
            self.rec.stats.servers[server].counters.disconnects += 1;
        }
        self.down_per_server[server] += 1;
        if self.down_per_server[server] == 1 {
            let s = &self.cfg.servers[server];
            eprintln!(
                "ferrobench: lost a connection to server {} ({}); redialling",
                s.name, s.addr
            );
        }
        self.fail_inflight(ci, now);
    }

    /// Fails every request part queued on connection `ci`.
    fn fail_inflight(&mut self, ci: usize, now: u64) {
        let conn = &mut self.conns[ci];
        while let Some(part) = conn.inflight.pop_front() {
            let session = &mut self.sessions[conn.session];
            let answer = Answer {
                end: End::Lost,
                hits: 0,
                corrupt: 0,
            };
            if self.rec.complete(session, conn.server, part, answer, now) {
                self.outstanding -= 1;
                if self.cfg.load == Load::Closed {
                    self.refill.push(conn.session);
                }
            }
        }
    }

    /// `--keep-going`: starts the dials now due and gives up on those past
    /// [`DIAL_TIMEOUT_NS`]. Once the run is stopping, held requests fail at
    /// once and no new dial starts.
    pub(super) fn redial_due(&mut self, now: u64, stopping: bool) {
        for ci in 0..self.conns.len() {
            let addr = self.cfg.servers[self.conns[ci].server].addr;
            let held = !self.conns[ci].inflight.is_empty();
            let Some(down) = &mut self.conns[ci].down else {
                continue;
            };
            if stopping {
                if let Some((mut s, _)) = down.dialing.take() {
                    let _ = self.poll.registry().deregister(&mut s);
                }
                self.fail_inflight(ci, now);
                continue;
            }
            if held && now >= down.fail_held_at_ns {
                down.fail_held_at_ns = now + HOLD_NS;
                self.fail_inflight(ci, now);
            }
            let Some(down) = &mut self.conns[ci].down else {
                continue;
            };
            match &mut down.dialing {
                Some((s, began)) if now.saturating_sub(*began) >= DIAL_TIMEOUT_NS => {
                    let _ = self.poll.registry().deregister(s);
                    down.failed(now);
                    self.fail_inflight(ci, now);
                }
                Some(_) => {}
                None if now >= down.retry_at_ns => {
                    let registered = down.dial(addr, now)
                        && down.dialing.as_mut().is_some_and(|(s, _)| {
                            self.poll
                                .registry()
                                .register(s, Token(ci), Interest::READABLE | Interest::WRITABLE)
                                .is_ok()
                        });
                    if !registered {
                        down.failed(now);
                        self.fail_inflight(ci, now);
                    }
                }
                None => {}
            }
        }
    }

    /// `--keep-going`: an event on connection `ci` while it is lost: its dial
    /// connected (the link is up again) or failed (back off).
    pub(super) fn on_dial_event(&mut self, ci: usize, now: u64) {
        let conn = &mut self.conns[ci];
        let Some(down) = &mut conn.down else {
            return;
        };
        match down.check() {
            Dial::Pending => return,
            Dial::Failed => {
                if let Some((s, _)) = &mut down.dialing {
                    let _ = self.poll.registry().deregister(s);
                }
                down.failed(now);
            }
            Dial::Connected(socket) => {
                conn.down = None;
                if let LinkState::Tcp { stream, .. } = &mut conn.link {
                    // Dropping the old stream closes the dead socket.
                    *stream = Stream::Plain(socket);
                }
                if self.rec.window.measured(now) {
                    self.rec.stats.total.counters.reconnects += 1;
                    self.rec.stats.servers[conn.server].counters.reconnects += 1;
                }
                self.down_per_server[conn.server] -= 1;
                if self.down_per_server[conn.server] == 0 {
                    let s = &self.cfg.servers[conn.server];
                    eprintln!("ferrobench: reconnected to server {} ({})", s.name, s.addr);
                }
            }
        }
        // The requests held while down were never sent: they fail either way.
        self.fail_inflight(ci, now);
        if !self.refill.is_empty() && now < self.shared.end_ns {
            self.refill_sessions(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_100ms_to_1s() {
        let mut d = Down::new(0);
        assert_eq!(d.retry_at_ns, 100_000_000);
        let mut waits = Vec::new();
        let mut now = 0;
        for _ in 0..6 {
            d.failed(now);
            waits.push((d.retry_at_ns - now) / 1_000_000);
            now = d.retry_at_ns;
        }
        assert_eq!(waits, [200, 400, 800, 1000, 1000, 1000]);
    }

    #[test]
    fn a_refused_dial_fails() {
        // Bind then drop a listener: its port refuses connections.
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("binding 127.0.0.1:0");
        let mut d = Down::new(0);
        if !d.dial(addr, 0) {
            return; // refused synchronously: also a failure
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            match d.check() {
                Dial::Failed => break,
                Dial::Connected(_) => panic!("connected to a closed port"),
                Dial::Pending if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                Dial::Pending => panic!("dial neither failed nor connected in 5 s"),
            }
        }
    }
}
