//! The io_uring worker's sends: replies moved into a connection's send buffer and put
//! on the ring, sealed into TLS records first on a TLS connection, and the direct
//! vectored send of replies that hold values in place.

use std::os::fd::AsRawFd;

use ring::Ring;

use super::Client;
use crate::ops::Exec;
use crate::stats::{bump, WorkerStats};

/// Send the replies holding spliced values (see `splice.rs`) with a direct
/// `sendmsg`, when nothing is in flight on the connection: its pins must not
/// outlive this turn, which a ring send that waits for socket space could make
/// them do. Behind a send in flight the values are copied instead, to keep the
/// order. Returns whether anything was sent; `None` when the socket failed.
pub(super) fn send_spliced(exec: &Exec<'_>, c: &mut Client) -> Option<bool> {
    let Some(cell) = exec.sink.splices else {
        return Some(false);
    };
    let mut splices = cell.borrow_mut();
    if splices.is_empty() {
        return Some(false);
    }
    let store = &exec.shared.store;
    let idle = c.out.as_ref().is_some_and(|o| c.out_sent >= o.len());
    if !idle {
        c.link.conn.materialize(&mut splices, store);
        return Some(false);
    }
    let fd = c.link.socket.as_raw_fd();
    let n = c
        .link
        .conn
        .flush_spliced(&mut splices, store, |iov| {
            crate::sys::send_vectored(fd, iov)
        })
        .ok()?;
    bump(&exec.stats.bytes_written, n as u64);
    Some(n > 0)
}

/// Move the connection's replies into its send buffer (a swap, not a copy)
/// and send them, unless a send is already in flight. Returns whether
/// replies were moved.
pub(super) fn start_send(ring: &mut Ring, c: &mut Client, stats: &WorkerStats) -> bool {
    if c.link.tls.is_some() {
        return start_send_tls(ring, c, stats);
    }
    if c.link.conn.output().is_empty() {
        return false;
    }
    let Some(mut out) = c.out.take() else {
        return false;
    };
    if c.out_sent < out.len() {
        // The rest of a short send is still to go.
        c.out = Some(out);
        return false;
    }
    c.link.conn.take_output(&mut out);
    c.out_sent = 0;
    ring.send(c.link.socket.as_raw_fd(), c.token, out, 0);
    true
}

/// [`start_send`] over TLS: seal the replies into records (handshake messages and
/// alerts wait there too), and send every waiting record from the send buffer,
/// unless a send is in flight. Returns whether replies were sealed.
fn start_send_tls(ring: &mut Ring, c: &mut Client, stats: &WorkerStats) -> bool {
    let Some(t) = c.link.tls.as_mut() else {
        return false;
    };
    let sealed = t.seal(&mut c.link.conn);
    bump(&stats.bytes_written, sealed as u64);
    if !t.wants_write() {
        return sealed > 0;
    }
    let Some(mut out) = c.out.take() else {
        return sealed > 0;
    };
    if c.out_sent < out.len() {
        // The rest of a short send is still to go.
        c.out = Some(out);
        return sealed > 0;
    }
    out.clear();
    t.take_ciphertext(&mut out);
    c.out_sent = 0;
    ring.send(c.link.socket.as_raw_fd(), c.token, out, 0);
    true
}
