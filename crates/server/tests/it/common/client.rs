//! A tiny blocking memcached client for tests: it sends raw bytes and reads until a
//! predicate holds, the peer closes, or a deadline passes. It never interprets replies,
//! so it can talk to a server that is wrong.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use super::Rng;

/// The meta no-op both servers answer with `MN\r\n`: sent after a request, its reply marks
/// the end of that request's replies.
pub const BARRIER: &[u8] = b"mn\r\n";
pub const BARRIER_REPLY: &[u8] = b"MN\r\n";

/// How long one read-until may take before the test gives up on the server.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a read stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// The predicate held (for `read_reply`: the barrier's `MN\r\n` arrived).
    Done,
    /// The server closed the connection.
    Closed,
    /// The deadline passed first.
    TimedOut,
}

/// What a read collected, and why it stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub bytes: Vec<u8>,
    pub ending: Ending,
}

impl Reply {
    /// The bytes, escaped, with the ending appended when it was not `Done`.
    pub fn describe(&self) -> String {
        match self.ending {
            Ending::Done => escape(&self.bytes),
            Ending::Closed => format!("{}<connection closed>", escape(&self.bytes)),
            Ending::TimedOut => format!("{}<timed out>", escape(&self.bytes)),
        }
    }
}

pub struct Client {
    stream: Box<dyn Transport>,
}

/// A connected socket the client talks through: plain TCP here; TLS in `tls.rs`, which
/// only the TLS tests include, so that the other test binaries do not build rustls.
pub trait Transport: Read + Write + Send {
    /// The TCP socket underneath (timeouts, shutdown, addresses).
    fn tcp(&self) -> &TcpStream;
    /// For the TLS tests to reach their session.
    fn as_any(&self) -> &dyn std::any::Any;
}

impl Transport for TcpStream {
    fn tcp(&self) -> &TcpStream {
        self
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl Client {
    /// Connects to 127.0.0.1:`port`, or panics.
    pub fn connect(port: u16) -> Client {
        Client::try_connect(port).unwrap_or_else(|e| panic!("connect to 127.0.0.1:{port}: {e}"))
    }

    /// This end's address, as `ip:port`.
    pub fn local_addr(&self) -> String {
        self.stream
            .tcp()
            .local_addr()
            .expect("local_addr")
            .to_string()
    }

    pub fn try_connect(port: u16) -> io::Result<Client> {
        let stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_nodelay(true)?;
        stream.set_write_timeout(Some(READ_TIMEOUT))?;
        Ok(Client {
            stream: Box::new(stream),
        })
    }

    /// A client over an already connected transport (`tls.rs`).
    pub fn over(stream: Box<dyn Transport>) -> Client {
        Client { stream }
    }

    /// The transport, for the TLS tests to look at their session.
    pub fn transport(&self) -> &dyn Transport {
        &*self.stream
    }

    /// Writes all of `bytes` in one call, or panics.
    pub fn send(&mut self, bytes: &[u8]) {
        self.try_send(bytes)
            .unwrap_or_else(|e| panic!("write {} bytes: {e}", bytes.len()));
    }

    pub fn try_send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Writes `bytes` as several writes of 1..=`max_piece` bytes. With `pause`, some pieces
    /// are followed by a short pause so the server really sees them apart.
    pub fn send_in_pieces(&mut self, bytes: &[u8], rng: &mut Rng, max_piece: usize, pause: bool) {
        self.try_send_in_pieces(bytes, rng, max_piece, pause)
            .unwrap_or_else(|e| panic!("write: {e}"));
    }

    pub fn try_send_in_pieces(
        &mut self,
        bytes: &[u8],
        rng: &mut Rng,
        max_piece: usize,
        pause: bool,
    ) -> io::Result<()> {
        let mut rest = bytes;
        while !rest.is_empty() {
            // Large values go in larger pieces, so a 1 MB value is not 100 k writes.
            let max = max_piece.max(rest.len() / 16).max(1);
            let n = (1 + rng.below(max as u64) as usize).min(rest.len());
            self.try_send(&rest[..n])?;
            rest = &rest[n..];
            if pause && rng.chance(0.25) {
                thread::sleep(Duration::from_micros(50 + rng.below(300)));
            }
        }
        Ok(())
    }

    /// Reads until `done(all bytes so far)` holds, the server closes, or `timeout` passes.
    pub fn read_until(&mut self, timeout: Duration, done: impl Fn(&[u8]) -> bool) -> Reply {
        let deadline = Instant::now() + timeout;
        let mut bytes = Vec::new();
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            if done(&bytes) {
                return Reply {
                    bytes,
                    ending: Ending::Done,
                };
            }
            let now = Instant::now();
            if now >= deadline {
                return Reply {
                    bytes,
                    ending: Ending::TimedOut,
                };
            }
            self.stream
                .tcp()
                .set_read_timeout(Some(deadline - now))
                .expect("set_read_timeout");
            match self.stream.read(&mut chunk) {
                Ok(0) => {
                    return Reply {
                        bytes,
                        ending: Ending::Closed,
                    }
                }
                Ok(n) => bytes.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::TimedOut => {}
                // A reset is a close that lost its manners; report it as a close.
                Err(_) => {
                    return Reply {
                        bytes,
                        ending: Ending::Closed,
                    }
                }
            }
        }
    }

    /// Reads the replies up to and including the barrier's `MN\r\n`, which is removed.
    pub fn read_reply(&mut self) -> Reply {
        let mut reply = self.read_until(READ_TIMEOUT, |b| b.ends_with(BARRIER_REPLY));
        if reply.ending == Ending::Done {
            reply
                .bytes
                .truncate(reply.bytes.len() - BARRIER_REPLY.len());
        }
        reply
    }

    /// Sends `request` followed by the barrier and returns every reply byte before `MN\r\n`.
    /// Panics if the server closes or stalls instead.
    pub fn request(&mut self, request: &[u8]) -> Vec<u8> {
        let mut bytes = request.to_vec();
        bytes.extend_from_slice(BARRIER);
        self.send(&bytes);
        let reply = self.read_reply();
        assert_eq!(
            reply.ending,
            Ending::Done,
            "request {} got {}",
            escape(request),
            reply.describe()
        );
        reply.bytes
    }

    /// Like `request`, with the reply as a (lossy) string for readable assertions.
    pub fn request_str(&mut self, request: &str) -> String {
        String::from_utf8_lossy(&self.request(request.as_bytes())).into_owned()
    }

    /// `stats` (or `stats <sub>`) as a name -> value map.
    pub fn stats(&mut self, sub: &str) -> HashMap<String, String> {
        let command = if sub.is_empty() {
            "stats\r\n".to_string()
        } else {
            format!("stats {sub}\r\n")
        };
        let text = self.request_str(&command);
        assert!(text.ends_with("END\r\n"), "{command:?} replied {text:?}");
        let mut map = HashMap::new();
        for line in text.lines() {
            if line == "END" {
                continue;
            }
            let mut parts = line.splitn(3, ' ');
            assert_eq!(parts.next(), Some("STAT"), "stats line {line:?}");
            let name = parts.next().expect("stat name").to_string();
            let value = parts.next().unwrap_or("").to_string();
            map.insert(name, value);
        }
        map
    }

    /// Sends `version` and checks the reply (`what` names the connection in a failure).
    pub fn assert_answers(&mut self, what: &str) {
        self.send(b"version\r\n");
        let reply = self.read_until(READ_TIMEOUT, |b| b.ends_with(b"\r\n"));
        assert!(
            reply.bytes.starts_with(b"VERSION "),
            "{what}: {}",
            reply.describe()
        );
    }

    /// One number of `stats`.
    pub fn stat(&mut self, name: &str) -> u64 {
        let stats = self.stats("");
        let value = stats
            .get(name)
            .unwrap_or_else(|| panic!("no {name} in stats"));
        value
            .parse()
            .unwrap_or_else(|e| panic!("stats {name} {value:?}: {e}"))
    }

    /// Reads until the server closes the connection (or `timeout` passes).
    pub fn read_to_close(&mut self, timeout: Duration) -> Reply {
        self.read_until(timeout, |_| false)
    }
}

/// Bytes as printable ASCII with escapes (`\r`, `\n`, `\x00`), long runs shortened.
pub fn escape(bytes: &[u8]) -> String {
    const HEAD: usize = 400;
    const TAIL: usize = 120;
    let show = |b: &[u8]| b.escape_ascii().to_string();
    if bytes.len() <= HEAD + TAIL + 64 {
        show(bytes)
    } else {
        format!(
            "{}<...{} bytes...>{}",
            show(&bytes[..HEAD]),
            bytes.len() - HEAD - TAIL,
            show(&bytes[bytes.len() - TAIL..])
        )
    }
}
