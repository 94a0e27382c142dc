//! memcached's UDP transport (`-U`, off by default).
//!
//! Every datagram starts with an 8-byte frame header, big-endian:
//!
//! ```text
//!   0       2       4       6       8
//!   +-------+-------+-------+-------+------------------
//!   |req id | seq # | total | 0     | payload ...
//!   +-------+-------+-------+-------+------------------
//! ```
//!
//! A request must fit one datagram (`total` = 1; others are dropped, as in
//! memcached). Its payload runs through a fresh [`Conn`], so UDP and TCP
//! parse and execute identically. The reply is cut where memcached cuts it:
//! each request's reply, and each key of a multi-get, is its own message,
//! numbered from sequence 0 with its own total, split into datagrams of at
//! most 1400 bytes including the header.
//!
//! UDP replies can be far larger than requests (a 40-byte `get` can return a
//! 1 MB value), which makes an open UDP port an amplification tool for
//! spoofed traffic. That is why it is off unless `-U` names a port.

use std::cell::RefCell;
use std::io;
use std::net::SocketAddr;

use anyhow::{Context, Result};
use mio::net::UdpSocket;
use socket2::{Domain, Protocol, Socket, Type};

use crate::conn::Conn;
use crate::exec::Exec;
use crate::stats::bump;

/// Size of memcached's UDP frame header.
pub const UDP_HEADER_BYTES: usize = 8;
/// Largest datagram memcached sends, header included.
pub const UDP_MAX_DATAGRAM_BYTES: usize = 1400;
/// Reply bytes per datagram.
pub const UDP_DATA_BYTES: usize = UDP_MAX_DATAGRAM_BYTES - UDP_HEADER_BYTES;
/// Largest request datagram accepted.
const UDP_MAX_REQUEST_BYTES: usize = 65536;

/// Bind one UDP socket for a worker, with `SO_REUSEPORT` so that every worker
/// has its own and the kernel spreads datagrams by source address.
pub fn bind_udp(addr: SocketAddr) -> Result<UdpSocket> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into()).with_context(|| {
        format!(
            "failed to listen on UDP port {} of {}",
            addr.port(),
            addr.ip()
        )
    })?;
    Ok(UdpSocket::from_std(socket.into()))
}

/// One worker's UDP endpoint and its reusable buffers.
pub struct UdpEndpoint {
    pub socket: UdpSocket,
    recv_buf: Vec<u8>,
    conn: Conn,
    message_ends: RefCell<Vec<(usize, bool)>>,
    datagram: Vec<u8>,
}

impl UdpEndpoint {
    #[must_use]
    pub fn new(socket: UdpSocket) -> Self {
        UdpEndpoint {
            socket,
            recv_buf: vec![0; UDP_MAX_REQUEST_BYTES],
            conn: Conn::new(),
            message_ends: RefCell::new(Vec::new()),
            datagram: Vec::with_capacity(UDP_MAX_DATAGRAM_BYTES),
        }
    }

    /// Serve every datagram waiting on the socket.
    pub fn serve(&mut self, exec: &Exec<'_>) {
        loop {
            let (n, peer) = match self.socket.recv_from(&mut self.recv_buf) {
                Ok(r) => r,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return,
            };
            bump(&exec.stats.bytes_read, n as u64);
            if n < UDP_HEADER_BYTES {
                continue;
            }
            let header = &self.recv_buf[..UDP_HEADER_BYTES];
            let request_id = [header[0], header[1]];
            if header[4] != 0 || header[5] != 1 {
                // Multi-datagram requests are not supported (as memcached).
                continue;
            }
            self.answer(exec, n, request_id, peer);
        }
    }

    fn answer(&mut self, exec: &Exec<'_>, n: usize, request_id: [u8; 2], peer: SocketAddr) {
        self.conn.reset();
        self.message_ends.borrow_mut().clear();
        let payload = &self.recv_buf[UDP_HEADER_BYTES..n];
        let space = self.conn.read_space();
        let take = payload.len().min(space.len());
        space[..take].copy_from_slice(&payload[..take]);
        self.conn.filled(take);
        let udp_exec = Exec {
            shared: exec.shared,
            stats: exec.stats,
            message_ends: Some(&self.message_ends),
        };
        loop {
            // Whatever the request asks of the connection (quit, close), a UDP
            // endpoint stays open: only the replies matter.
            let _ = self.conn.process(&udp_exec);
            let output = self.conn.output();
            let mut start = 0;
            for &(end, send_empty) in self.message_ends.borrow().iter() {
                let end = end.min(output.len());
                if end < start {
                    continue;
                }
                if end > start || send_empty {
                    send_message(
                        &self.socket,
                        &mut self.datagram,
                        request_id,
                        &output[start..end],
                        peer,
                        exec,
                    );
                }
                start = end;
            }
            let written = output.len();
            self.conn.written(written);
            self.message_ends.borrow_mut().clear();
            // A multi-get too large for one output buffer continues here.
            if !self.conn.has_paused_get() {
                return;
            }
        }
    }
}

/// Send one reply message as datagrams of at most 1400 bytes.
fn send_message(
    socket: &UdpSocket,
    datagram: &mut Vec<u8>,
    request_id: [u8; 2],
    message: &[u8],
    peer: SocketAddr,
    exec: &Exec<'_>,
) {
    let total = message
        .len()
        .div_ceil(UDP_DATA_BYTES)
        .min(usize::from(u16::MAX)) as u16;
    let mut chunks = message.chunks(UDP_DATA_BYTES);
    let mut seq: u16 = 0;
    loop {
        let chunk = chunks.next().unwrap_or(&[]);
        datagram.clear();
        datagram.extend_from_slice(&request_id);
        datagram.extend_from_slice(&seq.to_be_bytes());
        datagram.extend_from_slice(&total.to_be_bytes());
        datagram.extend_from_slice(&[0, 0]);
        datagram.extend_from_slice(chunk);
        if let Ok(sent) = socket.send_to(datagram, peer) {
            bump(&exec.stats.bytes_written, sent as u64);
        }
        seq = seq.wrapping_add(1);
        if seq >= total {
            break;
        }
    }
}
