//! One connection's turn on the io_uring worker: run what it received, send its
//! replies, and arm or cancel its receive by how much it holds.

use std::os::fd::AsRawFd;

use ring::Ring;

use super::{send_spliced, start_send, Client};
use crate::io::tls::Failure;
use crate::io::worker::release_splices;
use crate::ops::Exec;
use crate::session::conn::Status;
use crate::session::Ahead;
use crate::stats::bump;

/// [`UringWorker::drive`] for one connection; false when it must close.
pub(super) fn drive_client(
    ring: &mut Ring,
    exec: &Exec<'_>,
    ahead: &mut Ahead,
    c: &mut Client,
    draining: bool,
) -> bool {
    if c.broken {
        return false;
    }
    if c.watching.is_some() {
        // Waiting for the cancelled receive and the last send: nothing more runs.
        return true;
    }
    match c.tls_failed {
        Some(Failure::NotTls) => return false,
        Some(Failure::Alert) => {
            // Send the alert rustls queued, then close; nothing more is read or run.
            c.tls_failed = None;
            c.close_after_write = true;
            c.eof = false;
        }
        None => {}
    }
    if let Some(out) = &c.out {
        if c.out_sent < out.len() {
            if c.eof {
                // As the epoll worker: after end of stream, what the socket
                // did not take is dropped.
                return false;
            }
            // A short send: the rest goes first.
            let out = c.out.take().expect("checked");
            ring.send(c.link.socket.as_raw_fd(), c.token, out, c.out_sent);
        }
    }
    if draining || c.close_after_write {
        start_send(ring, c, exec.stats);
    } else {
        loop {
            let status = c.link.conn.process(exec, ahead);
            if status == Status::Close {
                release_splices(exec);
                return false;
            }
            if let Status::Watch { streams } = status {
                if c.link.may_watch(exec.shared) {
                    c.watching = Some(streams);
                    if c.recv_armed && !c.cancelling {
                        ring.cancel_recv(c.token);
                        c.cancelling = true;
                    }
                    return true;
                }
            }
            let Some(sent) = send_spliced(exec, c) else {
                return false;
            };
            if status == Status::CloseAfterWrite {
                c.close_after_write = true;
                if let Some(t) = c.link.tls.as_mut() {
                    bump(&exec.stats.bytes_written, t.seal(&mut c.link.conn) as u64);
                    t.close_notify();
                }
            }
            let moved = start_send(ring, c, exec.stats) || sent;
            // Replies moved to the send buffer: requests held back by the
            // output high-water mark can run now.
            if !(moved && c.link.conn.stalled_on_output()) {
                break;
            }
        }
    }
    let idle_output = !c.send_in_flight() && c.link.conn.output().is_empty() && !c.tls_waiting();
    if idle_output && (c.eof || c.close_after_write) {
        return false;
    }
    if c.eof || c.close_after_write || draining {
        return true;
    }
    let full = c.link.conn.buffered() >= c.link.conn.read_limit() || c.link.conn.output_blocked();
    if full {
        if c.recv_armed && !c.cancelling {
            ring.cancel_recv(c.token);
            c.cancelling = true;
        }
    } else if !c.recv_armed {
        ring.recv_multi(c.link.socket.as_raw_fd(), c.token);
        c.recv_armed = true;
    }
    if idle_output {
        if let Some(out) = &mut c.out {
            // Counted and given back with the connection's buffers (`buffers.rs`);
            // with half a request buffered, only counted.
            c.link.conn.shrink_idle_with(out);
        }
    }
    true
}
