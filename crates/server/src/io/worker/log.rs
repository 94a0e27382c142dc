//! memcached's log lines of a connection's life: `type=conn_new` and `type=conn_close`
//! for `watch connevents`, and the `-vv` lines of connections and listeners.

use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::Ordering;

use crate::admin::watch::{CloseReason, Event, Streams, Transport};
use crate::config::Binding;
use crate::state::Shared;

/// A connection opened: memcached's `type=conn_new` log line (when a watcher wants
/// connevents) and its `-vv` line, which names the `-B` protocol.
pub(crate) fn conn_opened(shared: &Shared, socket: &impl AsFd) {
    let fd = socket.as_fd().as_raw_fd();
    log_connevent(shared, socket, |peer, transport| Event::ConnNew {
        peer,
        transport,
        cfd: fd,
    });
    if shared.verbosity.load(Ordering::Relaxed) > 1 {
        let kind = match shared.settings.binding {
            Binding::Auto => "auto-negotiating client connection",
            Binding::Ascii => "ascii client connection.",
            Binding::Binary => "binary client connection.",
        };
        eprintln!("<{fd} new {kind}");
    }
}

/// A connection closing (before its socket is): memcached's `type=conn_close` line
/// with `reason`, and its `-vv` line.
pub(crate) fn conn_closing(shared: &Shared, socket: &impl AsFd, reason: CloseReason) {
    let fd = socket.as_fd().as_raw_fd();
    log_connevent(shared, socket, |peer, transport| Event::ConnClose {
        peer,
        transport,
        reason,
        cfd: fd,
    });
    if shared.verbosity.load(Ordering::Relaxed) > 1 {
        eprintln!("<{fd} connection closed.");
    }
}

/// A `watch connevents` line, when a watcher wants them: `event` of the peer's address
/// and transport.
fn log_connevent(
    shared: &Shared,
    socket: &impl AsFd,
    event: impl FnOnce(Option<SocketAddr>, Transport) -> Event,
) {
    if shared.watch.wants(Streams::CONNEVENTS) {
        let (peer, transport) = peer_of(socket);
        shared.watch.log(b"", event(peer, transport));
    }
}

/// The peer's address and transport, as memcached's log lines give them: a UNIX
/// socket's client has none (`rip=unix`, transport `local`); a TCP peer the kernel no
/// longer names (reset) is 0.0.0.0:0.
fn peer_of(socket: &impl AsFd) -> (Option<SocketAddr>, Transport) {
    let sock = socket2::SockRef::from(socket);
    let local = sock.local_addr().ok();
    if local.as_ref().is_some_and(|a| a.as_socket().is_none()) {
        return (None, Transport::Local);
    }
    let peer = sock
        .peer_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
    (Some(peer), Transport::Tcp)
}

/// memcached's `-vv` line for a listening socket: `<FD server listening (PROTOCOL)`, or
/// `(udp)`.
pub(crate) fn listening_line(shared: &Shared, socket: &impl AsFd, udp: bool) {
    if shared.verbosity.load(Ordering::Relaxed) > 1 {
        let fd = socket.as_fd().as_raw_fd();
        let what = match (udp, shared.settings.binding) {
            (true, _) => "udp",
            (false, Binding::Auto) => "auto-negotiate",
            (false, Binding::Ascii) => "ascii",
            (false, Binding::Binary) => "binary",
        };
        eprintln!("<{fd} server listening ({what})");
    }
}
