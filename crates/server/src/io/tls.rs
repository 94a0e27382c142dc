//! One TLS connection's records, between its socket and its [`Conn`]: both backends
//! receive ciphertext as they receive plaintext (epoll with one `recv` per socket-full
//! into the worker's scratch buffer, io_uring from its provided buffers), hand it to
//! [`TlsConn::feed`], and send what [`TlsConn::seal`] made of the connection's output.
//!
//! The handshake is driven by the same calls: until it completes no plaintext comes
//! out, and what the server must answer waits in the session as ciphertext. Nothing
//! blocks and no thread is added per connection; a worker interleaves handshakes with
//! its other connections' requests. rustls is used through its buffered API, which
//! makes one record of each batch of replies, so a pipelined batch is still one send.

use std::io::{self, Read, Write};
use std::sync::atomic::Ordering;

use rustls::ServerConnection;

use crate::admin::tls::{Sessions, Tls};
use crate::io::net::receive_round;
use crate::session::Conn;

/// Seconds a connection may take to finish its handshake; one that takes longer
/// (a slowloris handshake) is closed and counted in `ssl_handshake_errors`. memcached
/// has no limit but `-o idle_timeout`.
pub(crate) const HANDSHAKE_TIMEOUT_SECS: u32 = 10;

/// Ciphertext a worker receives per `recv` into its scratch buffer (epoll): the
/// largest TLS record and its header, four times.
pub(crate) const SCRATCH_BYTES: usize = 4 * (16 * 1024 + 512);

/// Encrypted output held in the session before [`TlsConn::seal`] stops taking the
/// connection's replies: the connection's own output high-water mark then applies, so
/// a client that does not read cannot grow the server's memory.
const SENDABLE_LIMIT: usize = 256 * 1024;

/// A TLS record header's content type for a handshake message: what a TLS client's
/// first byte is. Anything else on a TLS port (a plaintext `get`) is closed without
/// an alert, as memcached's OpenSSL does.
const HANDSHAKE_RECORD: u8 = 0x16;

/// Why a TLS connection must close.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The peer is not speaking TLS: close at once, writing nothing.
    NotTls,
    /// A TLS error, with the alert rustls queued for it: send it, then close.
    Alert,
}

/// The TLS session of one connection.
pub(crate) struct TlsConn {
    session: ServerConnection,
    /// Server time of the accept, for [`HANDSHAKE_TIMEOUT_SECS`].
    since: u32,
    /// No byte received yet: the first decides [`Failure::NotTls`].
    fresh: bool,
    /// The peer sent close_notify (its clean end of stream).
    closed: bool,
    /// Counts this session in the connections' memory while it lives.
    _open: Sessions,
}

impl TlsConn {
    /// A session for a connection just accepted on a TLS listener.
    pub(crate) fn new(tls: &Tls, now: u32) -> io::Result<Box<TlsConn>> {
        let mut session = ServerConnection::new(tls.config()).map_err(io::Error::other)?;
        session.set_buffer_limit(Some(SENDABLE_LIMIT));
        Ok(Box::new(TlsConn {
            session,
            since: now,
            fresh: true,
            closed: false,
            _open: tls.opened(),
        }))
    }

    #[must_use]
    pub(crate) fn handshaking(&self) -> bool {
        self.session.is_handshaking()
    }

    /// Whether the handshake has run out of time at server time `now`.
    #[must_use]
    pub(crate) fn handshake_expired(&self, now: u32) -> bool {
        self.handshaking() && now.saturating_sub(self.since) >= HANDSHAKE_TIMEOUT_SECS
    }

    /// Whether the peer ended its side with close_notify.
    #[must_use]
    pub(crate) fn peer_closed(&self) -> bool {
        self.closed
    }

    /// Take ciphertext the socket delivered: decrypt it, move the plaintext into
    /// `conn`, and queue any handshake answer. Every byte is taken; the connection's
    /// read limit is applied by its caller before each receive.
    /// Returns the plaintext bytes moved, which `bytes_read` counts as memcached does.
    pub(crate) fn feed(
        &mut self,
        mut bytes: &[u8],
        conn: &mut Conn,
        tls: &Tls,
    ) -> Result<usize, Failure> {
        if self.fresh && !bytes.is_empty() {
            self.fresh = false;
            if bytes[0] != HANDSHAKE_RECORD {
                tls.handshake_errors.fetch_add(1, Ordering::Relaxed);
                return Err(Failure::NotTls);
            }
        }
        let mut plain = 0;
        while !bytes.is_empty() {
            match self.session.read_tls(&mut bytes) {
                Ok(_) => {}
                // rustls holds as much received plaintext as it will: move it out.
                Err(_) => match self.drain(conn) {
                    0 => return Err(self.failed(tls)),
                    n => {
                        plain += n;
                        continue;
                    }
                },
            }
            if self.session.process_new_packets().is_err() {
                return Err(self.failed(tls));
            }
            plain += self.drain(conn);
        }
        Ok(plain)
    }

    /// Move decrypted bytes into the connection's input; returns how many.
    fn drain(&mut self, conn: &mut Conn) -> usize {
        let mut moved = 0;
        loop {
            let space = conn.read_space();
            match self.session.reader().read(space) {
                Ok(0) => {
                    // close_notify received, and every byte before it read.
                    self.closed = true;
                    return moved;
                }
                Ok(n) => {
                    conn.filled(n);
                    moved += n;
                }
                // WouldBlock: no more plaintext now; UnexpectedEof: the peer went
                // without close_notify, which the socket's end of stream reports.
                Err(_) => return moved,
            }
        }
    }

    /// Count a failure: before the handshake completed it is a handshake error.
    fn failed(&self, tls: &Tls) -> Failure {
        let counter = if self.handshaking() {
            &tls.handshake_errors
        } else {
            &tls.proto_errors
        };
        counter.fetch_add(1, Ordering::Relaxed);
        Failure::Alert
    }

    /// Encrypt as much of the connection's waiting output as the session takes;
    /// returns the plaintext bytes taken (what `bytes_written` counts, as memcached).
    pub(crate) fn seal(&mut self, conn: &mut Conn) -> usize {
        let mut taken = 0;
        if self.handshaking() {
            // Replies wait in the connection until the handshake is done (none can
            // exist yet: no plaintext came in).
            return 0;
        }
        while !conn.output().is_empty() {
            match self.session.writer().write(conn.output()) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    conn.written(n);
                    taken += n;
                }
            }
        }
        taken
    }

    /// Queue close_notify, for a connection the server closes (`quit`).
    pub(crate) fn close_notify(&mut self) {
        self.session.send_close_notify();
    }

    /// Whether ciphertext is waiting to be sent.
    #[must_use]
    pub(crate) fn wants_write(&self) -> bool {
        self.session.wants_write()
    }

    /// Send waiting ciphertext until all is sent or the socket is full (one vectored
    /// send of every waiting record per call). Returns the bytes sent.
    pub(crate) fn send(&mut self, dst: &mut impl Write) -> io::Result<usize> {
        let mut sent = 0;
        while self.session.wants_write() {
            match self.session.write_tls(dst) {
                Ok(0) => break,
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(sent)
    }

    /// Append every waiting record to `out` (io_uring, which sends from its own
    /// buffer).
    pub(crate) fn take_ciphertext(&mut self, out: &mut Vec<u8>) {
        while self.session.wants_write() {
            if self.session.write_tls(out).is_err() {
                break;
            }
        }
    }

    /// Receive what the socket has (one `recv` into `scratch` per round, until it is
    /// drained or the connection holds enough input) and feed it. Returns what came:
    /// ciphertext and plaintext bytes, whether the socket was drained, and whether the
    /// stream ended.
    pub(crate) fn receive(
        &mut self,
        src: &mut impl Read,
        scratch: &mut [u8],
        conn: &mut Conn,
        tls: &Tls,
    ) -> Result<Received, Failure> {
        let mut plain = 0;
        let round = receive_round(conn, |conn| match src.read(scratch) {
            Ok(n) => {
                if n > 0 {
                    plain += self.feed(&scratch[..n], conn, tls)?;
                }
                Ok(Ok((n, scratch.len())))
            }
            Err(e) => Ok(Err(e)),
        })?;
        Ok(Received {
            bytes: round.bytes,
            plain,
            drained: round.drained,
            eof: round.eof || self.closed,
        })
    }
}

/// What one [`TlsConn::receive`] got.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Received {
    /// Ciphertext received.
    pub bytes: usize,
    /// Plaintext moved into the connection.
    pub plain: usize,
    pub drained: bool,
    pub eof: bool,
}
