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
//! Replies leave with UDP GSO where the kernel offers it (Linux 4.18 and
//! later; see the `mmsg` crate): the datagrams of a batch that go to one
//! client and have one length (a long reply's 1400-byte datagrams, or many
//! equal small replies) leave as one message that the kernel cuts apart at
//! the very end, so its IP and device path runs once per group instead of
//! once per datagram. Clients see the same datagrams either way, so it needs
//! no flag: it is on wherever the socket accepts it, and a kernel that
//! cannot do it costs one log line at start. `--udp-gso=off` exists only
//! because it is one line of config: to measure the difference, or to
//! sidestep a device that mishandles the offload.
//!
//! UDP replies can be far larger than requests (a 40-byte `get` can return a
//! 1 MB value), which makes an open UDP port an amplification tool for
//! spoofed traffic. That is why it is off unless `-U` names a port.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use mio::net::UdpSocket;
use mmsg::{RecvBatch, SendBatch, MAX_BATCH};
use socket2::{Protocol, Type};

use crate::io::spin::AdaptiveSpin;
use crate::ops::Exec;
use crate::session::conn::Conn;
use crate::session::Ahead;
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
    let socket = crate::io::net::bind_reuseport(addr, Type::DGRAM, Protocol::UDP, "UDP")?;
    Ok(UdpSocket::from_std(socket.into()))
}

/// Datagrams received per `recvmmsg`.
const RECV_BATCH: usize = 32;
/// Queued reply bytes that trigger a `sendmmsg` before the receive batch is done.
const SEND_FLUSH_BYTES: usize = 256 * 1024;
/// Queued reply datagrams that trigger a `sendmmsg` before the receive batch
/// is done, with GSO: up to 64 go in one message, so one call still carries
/// a few hundred (a batch of multi-gets makes many equal small ones).
const GSO_FLUSH_DATAGRAMS: usize = 8 * MAX_BATCH;
/// With `--busy-poll-us`, the times one wake-up may wait awake for another request
/// before it goes back to the event loop anyway, so that a steady trickle of datagrams
/// cannot keep the worker from its TCP connections (memcached's `-R` default).
const SPINS_PER_WAKEUP: u32 = 20;
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
    ahead: Ahead,
    message_ends: RefCell<Vec<(usize, bool)>>,
    /// The kernel offers UDP GSO on `socket` (probed when it was bound).
    gso_offered: bool,
    /// `--udp-gso` has been applied: at the first [`UdpEndpoint::serve`],
    /// the first place the settings reach.
    gso_decided: bool,
    /// With `--busy-poll-us`: how long to wait awake after a batch empties the socket,
    /// adapted as the event loop's window is (`spin.rs`). A fixed window cost every
    /// datagram that comes alone the whole window.
    spin: Option<AdaptiveSpin>,
    /// When the socket was last left empty, for the window to learn how long it
    /// stayed so (the next [`UdpEndpoint::serve`] is the next datagram).
    idle_since: Option<Instant>,
}

/// Whether a GSO log line has been printed: one per process, not one per
/// worker's socket.
static GSO_LOGGED: AtomicBool = AtomicBool::new(false);

impl UdpEndpoint {
    #[must_use]
    pub fn new(socket: UdpSocket) -> Self {
        let gso_offered = match mmsg::probe_gso(socket.as_raw_fd()) {
            Ok(()) => true,
            Err(e) => {
                if !GSO_LOGGED.swap(true, Ordering::Relaxed) {
                    eprintln!("ferrocache: UDP GSO unavailable ({e}); UDP replies go out one packet per datagram");
                }
                false
            }
        };
        UdpEndpoint {
            socket,
            inbox: RecvBatch::new(RECV_BATCH, UDP_MAX_REQUEST_BYTES),
            outbox: SendBatch::new(),
            conn: Conn::new(),
            ahead: Ahead::default(),
            message_ends: RefCell::new(Vec::new()),
            gso_offered,
            gso_decided: false,
            spin: None,
            idle_since: None,
        }
    }

    /// Serve every datagram waiting on the socket.
    pub fn serve(&mut self, exec: &Exec<'_>) {
        if !self.gso_decided {
            self.gso_decided = true;
            self.outbox
                .set_gso(self.gso_offered && exec.shared.settings.udp_gso);
            self.spin = AdaptiveSpin::new(exec.shared.settings.busy_poll_us);
        }
        if let (Some(spin), Some(since)) = (&mut self.spin, self.idle_since.take()) {
            spin.slept(since.elapsed());
        }
        let fd = self.socket.as_raw_fd();
        let mut spins_left = SPINS_PER_WAKEUP;
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
                    &mut self.ahead,
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
                // The queue was empty when the kernel returned. With
                // `--busy-poll-us`, wait for the next request awake, for up to the
                // window; otherwise (and if none comes) edge-triggered polling wakes
                // us for a later datagram.
                if let Some(spin) = &mut self.spin {
                    let window = spin.window();
                    if !window.is_zero() && spins_left > 0 && mmsg::spin_until_readable(fd, window)
                    {
                        spin.caught();
                        spins_left -= 1;
                        continue;
                    }
                    self.idle_since = Some(Instant::now());
                }
                break;
            }
        }
    }
}

/// Run one request datagram's payload and queue its reply datagrams.
#[allow(clippy::too_many_arguments)]
fn answer(
    conn: &mut Conn,
    ahead: &mut Ahead,
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
        sink: crate::reply::Sink {
            message_ends: Some(message_ends),
            splices: None,
            splice_min: usize::MAX,
            fd: exec.sink.fd,
            flash: None,
        },
        latency: exec.latency,
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
        let _ = conn.process(&udp_exec, ahead);
        let output = conn.output();
        let mut start = 0;
        for &(end, send_empty) in message_ends.borrow().iter() {
            let end = end.min(output.len());
            if end < start {
                continue;
            }
            if end > start || send_empty {
                queue_message(outbox, request_id, &output[start..end], peer);
                let max_datagrams = if outbox.gso() {
                    GSO_FLUSH_DATAGRAMS
                } else {
                    MAX_BATCH
                };
                if outbox.len() >= max_datagrams || outbox.bytes() >= SEND_FLUSH_BYTES {
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
    let had_gso = outbox.gso();
    let done = outbox.flush(fd, SEND_STALL);
    bump(&exec.stats.bytes_written, done.bytes as u64);
    if had_gso && !outbox.gso() && !GSO_LOGGED.swap(true, Ordering::Relaxed) {
        // The probe passed but the route or device cannot: nothing was lost
        // (the batch resent those datagrams without GSO), and it stays off.
        let why = outbox
            .gso_refusal()
            .map_or_else(|| "no reason given".to_string(), |e| e.to_string());
        eprintln!("ferrocache: the kernel refused UDP GSO ({why}); UDP replies go out one packet per datagram");
    }
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
