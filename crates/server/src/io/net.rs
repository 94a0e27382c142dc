//! Listening and connected sockets: TCP and UNIX domain, behind one type.
//!
//! TCP listeners are bound once per worker with `SO_REUSEPORT`, so the kernel
//! spreads connections over workers. A UNIX socket cannot be shared that way;
//! every worker polls a duplicate of the one listener and whichever wakes
//! first accepts (the others see `WouldBlock`).

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::{Context, Result};
use mio::event::Source;
use mio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use mio::{Interest, Registry, Token};
use socket2::{Domain, Protocol, SockRef, Socket, Type};

use crate::session::Conn;

/// A listening socket.
pub enum Listener {
    Tcp(TcpListener),
    /// TCP whose connections speak TLS (`-Z`; `io/tls.rs`).
    Tls(TcpListener),
    Unix(UnixListener),
}

/// A connected client socket.
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// What a round of receives got ([`receive_round`]).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Round {
    /// Bytes the socket gave.
    pub bytes: usize,
    /// The socket was drained: a read came short, or would have blocked.
    pub drained: bool,
    /// End of stream, or the socket failed.
    pub eof: bool,
}

/// Receive for `conn` until the socket is drained (a short read means it is), its
/// output is backed up, or much input is already waiting ([`Conn::read_limit`]).
/// `read` makes one read (into the connection, or elsewhere to feed it) and returns
/// the socket's answer with how many bytes it offered; an `Err` of its own ends the
/// round at once.
#[inline(always)]
pub(crate) fn receive_round<E>(
    conn: &mut Conn,
    mut read: impl FnMut(&mut Conn) -> Result<io::Result<(usize, usize)>, E>,
) -> Result<Round, E> {
    let mut round = Round::default();
    while !conn.output_blocked() && conn.buffered() < conn.read_limit() {
        match read(conn)? {
            Ok((0, _)) => {
                round.eof = true;
                break;
            }
            Ok((n, offered)) => {
                round.bytes += n;
                if n < offered {
                    round.drained = true;
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                round.drained = true;
                break;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => {
                round.eof = true;
                break;
            }
        }
    }
    Ok(round)
}

/// A non-blocking socket bound to `addr` with `SO_REUSEPORT`, so that every
/// worker binds its own and the kernel spreads the load; IPv6 sockets are
/// IPv6-only, so `-l` can name both families on one port.
pub fn bind_reuseport(
    addr: SocketAddr,
    ty: Type,
    protocol: Protocol,
    name: &str,
) -> Result<Socket> {
    bind_with(addr, ty, protocol, name, |socket| {
        socket.set_reuse_address(true)?;
        socket.set_reuse_port(true)?;
        socket.set_nonblocking(true)
    })
}

/// Fail as memcached does ("failed to listen on TCP port N: Address already in use")
/// when another process already has `addr`, before the workers bind it.
///
/// The workers' sockets share their port through `SO_REUSEPORT`, and so could a second
/// server started on the same port by the same user: it would join the first one's
/// group, the kernel would split new clients between two caches, and neither would
/// notice. memcached, with one socket, refuses to start instead, and restart scripts
/// rely on that. This probe binds without `SO_REUSEPORT` (TCP keeps `SO_REUSEADDR`, as
/// memcached's socket has, so connections in TIME_WAIT do not count), which no socket
/// already on the port can share, then closes at once. Two servers started at the same
/// instant can both pass it; one started later cannot.
pub fn refuse_taken_port(addr: SocketAddr, ty: Type, protocol: Protocol, name: &str) -> Result<()> {
    bind_with(addr, ty, protocol, name, |socket| {
        if ty == Type::STREAM {
            socket.set_reuse_address(true)?;
        }
        Ok(())
    })
    .map(drop)
}

/// A socket for `addr` (IPv6-only for an IPv6 address), set up by `options`, then
/// bound, failing with memcached's "failed to listen on ..." wording.
fn bind_with(
    addr: SocketAddr,
    ty: Type,
    protocol: Protocol,
    name: &str,
    options: impl FnOnce(&Socket) -> io::Result<()>,
) -> Result<Socket> {
    let socket = Socket::new(Domain::for_address(addr), ty, Some(protocol))?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    options(&socket)?;
    socket.bind(&addr.into()).with_context(|| {
        format!(
            "failed to listen on {name} port {} of {}",
            addr.port(),
            addr.ip()
        )
    })?;
    Ok(socket)
}

/// Bind a TCP listener with `SO_REUSEPORT` (one per worker and address).
pub fn bind_tcp(addr: SocketAddr, backlog: i32) -> Result<TcpListener> {
    let socket = bind_reuseport(addr, Type::STREAM, Protocol::TCP, "TCP")?;
    socket.listen(backlog)?;
    Ok(TcpListener::from_std(socket.into()))
}

/// Bind memcached's `-s PATH` socket with `-a MASK` permissions. A stale
/// socket file at the path is removed first, as memcached does.
pub fn bind_unix(path: &str, mask: u32, backlog: i32) -> Result<UnixListener> {
    let p = Path::new(path);
    if let Ok(meta) = std::fs::symlink_metadata(p) {
        use std::os::unix::fs::FileTypeExt;
        if meta.file_type().is_socket() {
            let _ = std::fs::remove_file(p);
        }
    }
    let socket = Socket::new(Domain::UNIX, Type::STREAM, None)?;
    socket.set_nonblocking(true)?;
    socket
        .bind(&socket2::SockAddr::unix(p)?)
        .with_context(|| format!("failed to bind UNIX socket {path}"))?;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mask & 0o777))
        .with_context(|| format!("failed to set permissions on {path}"))?;
    socket.listen(backlog)?;
    let std_listener: std::os::unix::net::UnixListener = socket.into();
    Ok(UnixListener::from_std(std_listener))
}

impl Listener {
    /// Accept one connection (its options are set where every backend's are, in
    /// `worker/slots.rs`).
    pub fn accept(&self) -> io::Result<Stream> {
        match self {
            Listener::Tcp(l) | Listener::Tls(l) => l.accept().map(|(s, _)| Stream::Tcp(s)),
            Listener::Unix(l) => l.accept().map(|(s, _)| Stream::Unix(s)),
        }
    }

    /// A second handle on the same UNIX listener, for another worker.
    pub fn try_clone_unix(&self) -> io::Result<Listener> {
        match self {
            Listener::Unix(l) => {
                let fd = SockRef::from(l).try_clone()?;
                let std_listener: std::os::unix::net::UnixListener = fd.into();
                Ok(Listener::Unix(UnixListener::from_std(std_listener)))
            }
            Listener::Tcp(_) | Listener::Tls(_) => {
                Err(io::Error::other("TCP listeners are bound per worker"))
            }
        }
    }
}

impl Listener {
    /// Whether its connections speak TLS.
    #[must_use]
    pub fn is_tls(&self) -> bool {
        matches!(self, Listener::Tls(_))
    }
}

impl std::os::fd::AsFd for Listener {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        match self {
            Listener::Tcp(l) | Listener::Tls(l) => l.as_fd(),
            Listener::Unix(l) => l.as_fd(),
        }
    }
}

impl std::os::fd::AsRawFd for Listener {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsFd;
        self.as_fd().as_raw_fd()
    }
}

impl std::os::fd::AsFd for Stream {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        match self {
            Stream::Tcp(s) => s.as_fd(),
            Stream::Unix(s) => s.as_fd(),
        }
    }
}

impl Stream {
    /// The socket itself, for the logger thread (`watch`): still non-blocking.
    pub fn into_owned_fd(self) -> std::os::fd::OwnedFd {
        match self {
            Stream::Tcp(s) => s.into(),
            Stream::Unix(s) => s.into(),
        }
    }

    #[inline]
    fn raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }

    /// Block (with a timeout) to write everything: used only at shutdown.
    pub fn write_all_blocking(
        &mut self,
        buf: &[u8],
        timeout: std::time::Duration,
    ) -> io::Result<()> {
        let sock = match self {
            Stream::Tcp(s) => SockRef::from(&*s),
            Stream::Unix(s) => SockRef::from(&*s),
        };
        sock.set_nonblocking(false)?;
        sock.set_write_timeout(Some(timeout))?;
        self.write_all(buf)
    }
}

// Reads and writes are `recv` and `send` made as bare system calls, not through
// the streams' own `Read` and `Write` (see `sys::recv`).
impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        crate::sys::recv(self.raw_fd(), buf)
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        crate::sys::send(self.raw_fd(), buf)
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        crate::sys::send_vectored(self.raw_fd(), bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

macro_rules! delegate_source {
    ($ty:ident, $($variant:ident),*) => {
        impl Source for $ty {
            fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
                match self { $($ty::$variant(s) => s.register(r, t, i),)* }
            }
            fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
                match self { $($ty::$variant(s) => s.reregister(r, t, i),)* }
            }
            fn deregister(&mut self, r: &Registry) -> io::Result<()> {
                match self { $($ty::$variant(s) => s.deregister(r),)* }
            }
        }
    };
}

delegate_source!(Listener, Tcp, Tls, Unix);
delegate_source!(Stream, Tcp, Unix);
