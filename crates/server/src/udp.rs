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
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use anyhow::Result;
use mio::net::UdpSocket;
use mmsg::{RecvBatch, SendBatch, MAX_BATCH};
use socket2::{Protocol, Type};

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
    let socket = crate::net::bind_reuseport(addr, Type::DGRAM, Protocol::UDP, "UDP")?;
    Ok(UdpSocket::from_std(socket.into()))
}

/// Datagrams received per `recvmmsg`.
const RECV_BATCH: usize = 32;
/// Queued reply bytes that trigger a `sendmmsg` before the receive batch is done.
const SEND_FLUSH_BYTES: usize = 256 * 1024;
/// How long a full socket send buffer may hold up the worker, per wait.
const SEND_STALL: Duration = Duration::from_millis(5);

/// One worker's UDP endpoint and its reusable buffers.
///
/// Datagrams are received in batches ([`RecvBatch`], one `recvmmsg` for up to
/// 32) and the replies to a whole batch leave together ([`SendBatch`], one
/// `sendmmsg` for up to 64 datagrams), so under load the kernel is entered
/// twice per batch instead of twice per request.
pub struct UdpEndpoint {
    pub socket: UdpSocket,
    inbox: RecvBatch,
    outbox: SendBatch,
    conn: Conn,
    message_ends: RefCell<Vec<(usize, bool)>>,
}

impl UdpEndpoint {
    #[must_use]
    pub fn new(socket: UdpSocket) -> Self {
        UdpEndpoint {
            socket,
            inbox: RecvBatch::new(RECV_BATCH, UDP_MAX_REQUEST_BYTES),
            outbox: SendBatch::new(),
            conn: Conn::new(),
            message_ends: RefCell::new(Vec::new()),
        }
    }

    /// Serve every datagram waiting on the socket.
    pub fn serve(&mut self, exec: &Exec<'_>) {
        let fd = self.socket.as_raw_fd();
        // Until WouldBlock: drained. Any other error (a pending ICMP error,
        // say) is no reason to stop serving; the next event retries.
        while let Ok(n) = self.inbox.recv(fd) {
            for i in 0..n {
                let Some(datagram) = self.inbox.get(i) else {
                    break;
                };
                bump(&exec.stats.bytes_read, datagram.data.len() as u64);
                let (Some(peer), false) = (datagram.peer, datagram.truncated) else {
                    continue;
                };
                let data = datagram.data;
                if data.len() < UDP_HEADER_BYTES {
                    continue;
                }
                let request_id = [data[0], data[1]];
                if data[4] != 0 || data[5] != 1 {
                    // Multi-datagram requests are not supported (as memcached).
                    continue;
                }
                answer(
                    &mut self.conn,
                    &self.message_ends,
                    &mut self.outbox,
                    fd,
                    exec,
                    &data[UDP_HEADER_BYTES..],
                    request_id,
                    peer,
                );
            }
            flush(&mut self.outbox, fd, exec);
            if n < self.inbox.capacity() {
                // The queue was empty when the kernel returned: with
                // edge-triggered polling a later datagram wakes us again.
                break;
            }
        }
    }
}

/// Run one request datagram's payload and queue its reply datagrams.
#[allow(clippy::too_many_arguments)]
fn answer(
    conn: &mut Conn,
    message_ends: &RefCell<Vec<(usize, bool)>>,
    outbox: &mut SendBatch,
    fd: RawFd,
    exec: &Exec<'_>,
    payload: &[u8],
    request_id: [u8; 2],
    peer: SocketAddr,
) {
    conn.reset();
    message_ends.borrow_mut().clear();
    let mut payload = payload;
    let udp_exec = Exec {
        shared: exec.shared,
        stats: exec.stats,
        message_ends: Some(message_ends),
    };
    loop {
        // The payload goes in as the connection's read buffer takes it, as
        // if it had arrived over TCP in pieces.
        if !payload.is_empty() {
            let space = conn.read_space();
            let take = payload.len().min(space.len());
            space[..take].copy_from_slice(&payload[..take]);
            conn.filled(take);
            payload = &payload[take..];
        }
        // Whatever the request asks of the connection (quit, close), a UDP
        // endpoint stays open: only the replies matter.
        let _ = conn.process(&udp_exec);
        let output = conn.output();
        let mut start = 0;
        for &(end, send_empty) in message_ends.borrow().iter() {
            let end = end.min(output.len());
            if end < start {
                continue;
            }
            if end > start || send_empty {
                queue_message(outbox, request_id, &output[start..end], peer);
                if outbox.len() >= MAX_BATCH || outbox.bytes() >= SEND_FLUSH_BYTES {
                    flush(outbox, fd, exec);
                }
            }
            start = end;
        }
        let written = output.len();
        conn.written(written);
        message_ends.borrow_mut().clear();
        // A multi-get too large for one output buffer continues here, and
        // so does a payload larger than one read.
        if !conn.has_paused_get() && payload.is_empty() {
            return;
        }
    }
}

/// Send what is queued, counting the bytes the kernel took.
fn flush(outbox: &mut SendBatch, fd: RawFd, exec: &Exec<'_>) {
    if outbox.is_empty() {
        return;
    }
    let done = outbox.flush(fd, SEND_STALL);
    bump(&exec.stats.bytes_written, done.bytes as u64);
}

/// Queue one reply message as datagrams of at most 1400 bytes, each with the
/// frame header: request id, sequence number, datagram count, zero.
fn queue_message(outbox: &mut SendBatch, request_id: [u8; 2], message: &[u8], peer: SocketAddr) {
    let total = message
        .len()
        .div_ceil(UDP_DATA_BYTES)
        .min(usize::from(u16::MAX)) as u16;
    let mut chunks = message.chunks(UDP_DATA_BYTES);
    let mut seq: u16 = 0;
    loop {
        let chunk = chunks.next().unwrap_or(&[]);
        let [s0, s1] = seq.to_be_bytes();
        let [t0, t1] = total.to_be_bytes();
        let header = [request_id[0], request_id[1], s0, s1, t0, t1, 0, 0];
        outbox.push(&[&header, chunk], Some(peer));
        seq = seq.wrapping_add(1);
        if seq >= total {
            break;
        }
    }
}
