//! A worker's TCP connection, plain or TLS: the one place that reads and
//! writes its socket, with the same system calls either way (one read per
//! wake-up unless it filled the buffer, one write or writev per batch).

use std::io::{self, Read, Write};

use protocol::client::ReplyBuffer;

use super::tls::TlsStream;

/// Bytes asked of each plain read (TLS reads into the worker's scratch buffer of this size).
pub const READ_CHUNK_BYTES: usize = 64 * 1024;

pub enum Stream {
    Plain(mio::net::TcpStream),
    Tls(Box<TlsStream>),
}

impl Stream {
    /// The socket, to register with the poll.
    pub fn socket(&mut self) -> &mut mio::net::TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(t) => &mut t.socket,
        }
    }

    /// Reads what arrived into `rx` (TLS: through `scratch`, then decrypted).
    /// Returns false when the server closed the connection.
    pub fn read_into(&mut self, rx: &mut ReplyBuffer, scratch: &mut Vec<u8>) -> io::Result<bool> {
        let stream = match self {
            Stream::Plain(s) => s,
            Stream::Tls(t) => {
                if scratch.is_empty() {
                    scratch.resize(READ_CHUNK_BYTES, 0);
                }
                return t.read_into(scratch, rx);
            }
        };
        loop {
            let spare = rx.spare(READ_CHUNK_BYTES);
            let room = spare.len();
            match stream.read(spare) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    rx.commit(n);
                    // A short read drained the socket; with edge-triggered
                    // epoll the next arrival wakes us again, so skip the
                    // read that would only say EAGAIN.
                    if n < room {
                        return Ok(true);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Writes `out[*written..]`; a short write keeps the rest for the next
    /// writable event. `out` is emptied once it has all gone (TLS: once it
    /// is encrypted; the records then wait in the session).
    pub fn write_from(&mut self, out: &mut Vec<u8>, written: &mut usize) -> io::Result<()> {
        let stream = match self {
            Stream::Plain(s) => s,
            Stream::Tls(t) => return t.write_from(out),
        };
        while *written < out.len() {
            match stream.write(&out[*written..]) {
                Ok(n) => *written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if *written == out.len() {
            *written = 0;
            out.clear();
        }
        Ok(())
    }

    /// Whether bytes wait for the socket: `out`, or TLS records.
    pub fn has_output(&self, out: &[u8]) -> bool {
        !out.is_empty() || matches!(self, Stream::Tls(t) if t.wants_write())
    }
}
