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
