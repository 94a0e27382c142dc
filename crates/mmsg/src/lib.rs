//! Many datagrams per system call: `recvmmsg(2)` and `sendmmsg(2)`.
//!
//! The UDP paths of the server (`-U`) and of ferrobench spend most of their
//! time in the kernel, one `recvfrom` and one `sendto` per datagram. These
//! two types move a whole batch per call instead:
//!
//! - [`RecvBatch`] owns `n` fixed-size slots and fills as many as are waiting
//!   with one non-blocking `recvmmsg`;
//! - [`SendBatch`] queues datagrams (header and payload given as parts, copied
//!   once into one buffer) and sends them with as few `sendmmsg` calls as the
//!   socket buffer allows.
//!
//! This is the only module of the crate with `unsafe`: the system calls and
//! the conversions between `std::net::SocketAddr` and the kernel's
//! `sockaddr` types. The conversions and the batch layout are tested under
//! Miri (`cargo +nightly miri test -p ferrocache-mmsg`); the system calls are
//! tested on real loopback sockets.

use std::io;
use std::mem;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;
use std::ptr;
use std::time::Duration;

/// Most datagrams moved by one system call. Linux caps `vlen` at 1024
/// (`UIO_MAXIOV`); past a few dozen the saving per datagram is negligible.
pub const MAX_BATCH: usize = 64;

/// How often [`SendBatch::flush`] waits for socket space before it gives up
/// on what is left (UDP may drop; a server must not stall on one peer).
const MAX_SEND_STALLS: usize = 4;

/// One received datagram, borrowed from its [`RecvBatch`] slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram<'a> {
    /// The bytes received (at most the slot size).
    pub data: &'a [u8],
    /// The sender, when it is an IPv4 or IPv6 address.
    pub peer: Option<SocketAddr>,
    /// The datagram was longer than the slot and was cut (`MSG_TRUNC`).
    pub truncated: bool,
}

/// Fixed slots for up to [`MAX_BATCH`] datagrams, filled by one `recvmmsg`.
pub struct RecvBatch {
    slot: usize,
    bufs: Vec<u8>,
    addrs: Vec<libc::sockaddr_storage>,
    lens: Vec<usize>,
    truncated: Vec<bool>,
    count: usize,
}

impl RecvBatch {
    /// Room for `datagrams` datagrams (clamped to `1..=MAX_BATCH`) of up to
    /// `slot` bytes each.
    #[must_use]
    pub fn new(datagrams: usize, slot: usize) -> Self {
        let n = datagrams.clamp(1, MAX_BATCH);
        let slot = slot.max(1);
        RecvBatch {
            slot,
            bufs: vec![0; n * slot],
            addrs: vec![zeroed_storage(); n],
            lens: vec![0; n],
            truncated: vec![false; n],
            count: 0,
        }
    }

    /// How many datagrams one call can receive.
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.lens.len()
    }

    /// Datagrams held from the last [`RecvBatch::recv`].
    #[must_use]
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether the last receive held nothing.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Receive up to [`RecvBatch::capacity`] waiting datagrams from `fd`
    /// without blocking. Returns how many; `WouldBlock` when none is waiting.
    pub fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        self.recv_up_to(fd, self.capacity())
    }

    /// As [`RecvBatch::recv`], but at most `max` datagrams (at least one).
    pub fn recv_up_to(&mut self, fd: RawFd, max: usize) -> io::Result<usize> {
        let n = max.clamp(1, self.capacity());
        self.count = 0;
        // SAFETY: iovec and mmsghdr are plain C structs of integers and
        // pointers, for which all-zero bytes (null pointers, zero lengths)
        // are valid values.
        let mut iovs: [libc::iovec; MAX_BATCH] = unsafe { mem::zeroed() };
        // SAFETY: as above.
        let mut hdrs: [libc::mmsghdr; MAX_BATCH] = unsafe { mem::zeroed() };
        // One raw pointer for the whole buffer, so that no later borrow of
        // `self.bufs` invalidates the per-slot pointers derived from it.
        let base = self.bufs.as_mut_ptr();
        let addrs = self.addrs.as_mut_ptr();
        for (i, iov) in iovs.iter_mut().enumerate().take(n) {
            *iov = libc::iovec {
                iov_base: base.wrapping_add(i * self.slot).cast(),
                iov_len: self.slot,
            };
        }
        for (i, hdr) in hdrs.iter_mut().enumerate().take(n) {
            hdr.msg_hdr.msg_name = addrs.wrapping_add(i).cast();
            hdr.msg_hdr.msg_namelen = storage_len();
            hdr.msg_hdr.msg_iov = ptr::addr_of_mut!(iovs[i]);
            hdr.msg_hdr.msg_iovlen = 1;
        }
        let rc = loop {
            // SAFETY: `hdrs[..n]` each point at one iovec of `slot` writable
            // bytes inside `self.bufs` and at one sockaddr_storage of
            // `self.addrs`, all alive and unaliased for the call; the kernel
            // writes at most those lengths. `n <= MAX_BATCH` entries exist.
            let rc = unsafe {
                libc::recvmmsg(
                    fd,
                    hdrs.as_mut_ptr(),
                    n as libc::c_uint,
                    libc::MSG_DONTWAIT,
                    ptr::null_mut(),
                )
            };
            if rc >= 0 {
                break rc as usize;
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        };
        for (i, hdr) in hdrs.iter().enumerate().take(rc) {
            self.lens[i] = (hdr.msg_len as usize).min(self.slot);
            self.truncated[i] = hdr.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
            if hdr.msg_hdr.msg_namelen == 0 {
                // No address (a socket type without one): say so.
                self.addrs[i] = zeroed_storage();
            }
        }
        self.count = rc;
        Ok(rc)
    }

    /// The `i`th datagram of the last receive.
    #[must_use]
    pub fn get(&self, i: usize) -> Option<Datagram<'_>> {
        if i >= self.count {
            return None;
        }
        let start = i * self.slot;
        Some(Datagram {
            data: &self.bufs[start..start + self.lens[i]],
            peer: from_storage(&self.addrs[i]),
            truncated: self.truncated[i],
        })
    }
}

/// One queued datagram: where its bytes lie in [`SendBatch`]'s buffer, and
/// where it goes (`None`: the socket's connected peer).
struct Queued {
    start: usize,
    len: usize,
    peer: Option<(libc::sockaddr_storage, libc::socklen_t)>,
}

/// Datagrams queued for `sendmmsg`.
#[derive(Default)]
pub struct SendBatch {
    data: Vec<u8>,
    queued: Vec<Queued>,
}

/// What one [`SendBatch::flush`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Flushed {
    /// Datagrams the kernel accepted.
    pub datagrams: usize,
    /// Their bytes.
    pub bytes: usize,
    /// Datagrams given up: no socket space in time, or refused.
    pub dropped: usize,
    /// `sendmmsg` calls made.
    pub calls: usize,
}

impl SendBatch {
    #[must_use]
    pub fn new() -> Self {
        SendBatch::default()
    }

    /// Queue one datagram made of `parts` (for example a frame header and a
    /// slice of the reply), to `peer`, or to the connected peer if `None`.
    pub fn push(&mut self, parts: &[&[u8]], peer: Option<SocketAddr>) {
        let start = self.data.len();
        for part in parts {
            self.data.extend_from_slice(part);
        }
        self.queued.push(Queued {
            start,
            len: self.data.len() - start,
            peer: peer.map(|p| to_storage(&p)),
        });
    }

    /// Datagrams queued.
    #[must_use]
    pub fn len(&self) -> usize {
        self.queued.len()
    }

    /// Whether nothing is queued.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.queued.is_empty()
    }

    /// Bytes queued.
    #[must_use]
    pub fn bytes(&self) -> usize {
        self.data.len()
    }

    /// The `i`th queued datagram, as it will be sent.
    #[must_use]
    pub fn queued(&self, i: usize) -> Option<(&[u8], Option<SocketAddr>)> {
        let q = self.queued.get(i)?;
        Some((
            &self.data[q.start..q.start + q.len],
            q.peer.as_ref().and_then(|(s, _)| from_storage(s)),
        ))
    }

    /// Send everything queued on `fd`, [`MAX_BATCH`] datagrams per call, and
    /// empty the batch. When the socket buffer is full it waits up to `stall`
    /// for space, a few times; what still cannot go is dropped and counted,
    /// as is a datagram the kernel refuses (too big, unreachable peer).
    pub fn flush(&mut self, fd: RawFd, stall: Duration) -> Flushed {
        let mut done = Flushed::default();
        let mut next = 0;
        let mut stalls = 0;
        while next < self.queued.len() {
            let n = (self.queued.len() - next).min(MAX_BATCH);
            match self.send_some(fd, next, n) {
                Ok((sent, bytes)) => {
                    done.calls += 1;
                    done.datagrams += sent;
                    done.bytes += bytes;
                    next += sent;
                    stalls = 0;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.raw_os_error() == Some(libc::ENOBUFS) =>
                {
                    done.calls += 1;
                    stalls += 1;
                    if stalls > MAX_SEND_STALLS || !wait_writable(fd, stall) {
                        break;
                    }
                }
                Err(_) => {
                    // The first datagram of the call was refused: skip it.
                    done.calls += 1;
                    done.dropped += 1;
                    next += 1;
                }
            }
        }
        done.dropped += self.queued.len() - next;
        self.data.clear();
        self.queued.clear();
        done
    }

    /// One `sendmmsg` of queued datagrams `first..first + n`.
    fn send_some(&mut self, fd: RawFd, first: usize, n: usize) -> io::Result<(usize, usize)> {
        debug_assert!((1..=MAX_BATCH).contains(&n) && first + n <= self.queued.len());
        // SAFETY: all-zero iovecs and mmsghdrs are valid (see RecvBatch).
        let mut iovs: [libc::iovec; MAX_BATCH] = unsafe { mem::zeroed() };
        // SAFETY: as above.
        let mut hdrs: [libc::mmsghdr; MAX_BATCH] = unsafe { mem::zeroed() };
        let base = self.data.as_ptr();
        for (iov, q) in iovs.iter_mut().zip(&self.queued[first..first + n]) {
            *iov = libc::iovec {
                // sendmmsg only reads through it; iovec's field is `*mut`.
                iov_base: base.wrapping_add(q.start).cast_mut().cast(),
                iov_len: q.len,
            };
        }
        for (i, hdr) in hdrs.iter_mut().enumerate().take(n) {
            let q = &mut self.queued[first + i];
            if let Some((storage, len)) = q.peer.as_mut() {
                hdr.msg_hdr.msg_name = ptr::addr_of_mut!(*storage).cast();
                hdr.msg_hdr.msg_namelen = *len;
            }
            hdr.msg_hdr.msg_iov = ptr::addr_of_mut!(iovs[i]);
            hdr.msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: `hdrs[..n]` point at iovecs over bytes of `self.data` and at
        // addresses in `self.queued`, all alive and not moved during the
        // call, which only reads them (and writes each `msg_len`).
        let rc =
            unsafe { libc::sendmmsg(fd, hdrs.as_mut_ptr(), n as libc::c_uint, libc::MSG_DONTWAIT) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        let sent = rc as usize;
        let bytes = hdrs[..sent].iter().map(|h| h.msg_len as usize).sum();
        Ok((sent, bytes))
    }
}

/// Wait up to `timeout` for `fd` to be writable.
fn wait_writable(fd: RawFd, timeout: Duration) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `pfd` is one valid pollfd for the duration of the call.
    let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
    rc > 0 && pfd.revents & libc::POLLOUT != 0
}

fn zeroed_storage() -> libc::sockaddr_storage {
    // SAFETY: sockaddr_storage is a C struct of integers; all-zero bytes are
    // a valid value (family AF_UNSPEC).
    unsafe { mem::zeroed() }
}

fn storage_len() -> libc::socklen_t {
    mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t
}

/// `addr` as the kernel's sockaddr, in a sockaddr_storage, with its length.
fn to_storage(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    let mut storage = zeroed_storage();
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is at least as large and as aligned as
            // every sockaddr type, sockaddr_in included.
            unsafe { ptr::write(ptr::addr_of_mut!(storage).cast::<libc::sockaddr_in>(), sin) };
            mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above, for sockaddr_in6.
            unsafe {
                ptr::write(
                    ptr::addr_of_mut!(storage).cast::<libc::sockaddr_in6>(),
                    sin6,
                )
            };
            mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

/// The address in `storage`, if it is IPv4 or IPv6.
fn from_storage(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match libc::c_int::from(storage.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in, which
            // it is large and aligned enough for.
            let sin: libc::sockaddr_in = unsafe { ptr::read(ptr::from_ref(storage).cast()) };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6: libc::sockaddr_in6 = unsafe { ptr::read(ptr::from_ref(storage).cast()) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;

    #[test]
    fn addresses_round_trip() {
        let addrs: [SocketAddr; 4] = [
            "127.0.0.1:11211".parse().unwrap(),
            "10.1.2.3:1".parse().unwrap(),
            "[::1]:65535".parse().unwrap(),
            SocketAddr::V6(SocketAddrV6::new("fe80::1".parse().unwrap(), 4242, 7, 3)),
        ];
        for addr in addrs {
            let (storage, len) = to_storage(&addr);
            assert_eq!(from_storage(&storage), Some(addr));
            let want = if addr.is_ipv4() {
                mem::size_of::<libc::sockaddr_in>()
            } else {
                mem::size_of::<libc::sockaddr_in6>()
            };
            assert_eq!(len as usize, want);
        }
        assert_eq!(from_storage(&zeroed_storage()), None);
    }

    #[test]
    fn ipv4_is_in_network_order() {
        let (storage, _) = to_storage(&"1.2.3.4:258".parse().unwrap());
        // SAFETY: to_storage wrote a sockaddr_in there.
        let sin: libc::sockaddr_in = unsafe { ptr::read(ptr::addr_of!(storage).cast()) };
        assert_eq!(sin.sin_addr.s_addr.to_ne_bytes(), [1, 2, 3, 4]);
        assert_eq!(sin.sin_port.to_ne_bytes(), [1, 2]);
    }

    #[test]
    fn send_batch_lays_out_parts() {
        let mut batch = SendBatch::new();
        let peer: SocketAddr = "127.0.0.1:9".parse().unwrap();
        batch.push(&[b"head", b"-body"], Some(peer));
        batch.push(&[], None);
        batch.push(&[b"x"], None);
        assert_eq!(batch.len(), 3);
        assert_eq!(batch.bytes(), 10);
        assert_eq!(batch.queued(0), Some((&b"head-body"[..], Some(peer))));
        assert_eq!(batch.queued(1), Some((&b""[..], None)));
        assert_eq!(batch.queued(2), Some((&b"x"[..], None)));
        assert_eq!(batch.queued(3), None);
    }

    fn pair() -> (UdpSocket, UdpSocket) {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        a.set_nonblocking(true).unwrap();
        b.set_nonblocking(true).unwrap();
        (a, b)
    }

    #[test]
    #[cfg_attr(miri, ignore = "system calls")]
    fn a_batch_crosses_loopback_in_order() {
        let (a, b) = pair();
        let to = b.local_addr().unwrap();
        let mut out = SendBatch::new();
        for i in 0..100u32 {
            out.push(&[&i.to_be_bytes(), &vec![b'v'; i as usize]], Some(to));
        }
        let flushed = out.flush(a.as_raw_fd(), Duration::from_millis(100));
        assert_eq!(flushed.datagrams, 100);
        assert_eq!(flushed.dropped, 0);
        assert_eq!(flushed.calls, 2, "64 then 36");
        assert_eq!(flushed.bytes, (0..100).map(|i| 4 + i).sum::<usize>());
        assert!(out.is_empty());

        let mut inbox = RecvBatch::new(32, 2048);
        let mut seen = 0u32;
        while seen < 100 {
            let n = inbox.recv(b.as_raw_fd()).expect("datagrams are waiting");
            assert!(n <= 32);
            for i in 0..n {
                let d = inbox.get(i).unwrap();
                assert_eq!(d.peer, Some(a.local_addr().unwrap()));
                assert!(!d.truncated);
                assert_eq!(d.data[..4], seen.to_be_bytes());
                assert_eq!(d.data.len(), 4 + seen as usize);
                assert!(d.data[4..].iter().all(|&c| c == b'v'));
                seen += 1;
            }
            assert!(inbox.get(n).is_none());
        }
        let err = inbox.recv(b.as_raw_fd()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
    }

    #[test]
    #[cfg_attr(miri, ignore = "system calls")]
    fn connected_sockets_need_no_address_and_long_datagrams_are_flagged() {
        let (a, b) = pair();
        a.connect(b.local_addr().unwrap()).unwrap();
        let mut out = SendBatch::new();
        out.push(&[&[7u8; 300]], None);
        out.push(&[b"short"], None);
        assert_eq!(
            out.flush(a.as_raw_fd(), Duration::from_millis(100))
                .datagrams,
            2
        );
        let mut inbox = RecvBatch::new(8, 100);
        let mut got = Vec::new();
        while got.len() < 2 {
            let n = inbox.recv(b.as_raw_fd()).unwrap();
            for i in 0..n {
                let d = inbox.get(i).unwrap();
                got.push((d.data.to_vec(), d.truncated));
            }
        }
        assert_eq!(got[0], (vec![7u8; 100], true));
        assert_eq!(got[1], (b"short".to_vec(), false));
    }

    #[test]
    #[cfg_attr(miri, ignore = "system calls")]
    fn recv_up_to_limits_the_batch() {
        let (a, b) = pair();
        let mut out = SendBatch::new();
        for _ in 0..5 {
            out.push(&[b"d"], Some(b.local_addr().unwrap()));
        }
        out.flush(a.as_raw_fd(), Duration::from_millis(100));
        let mut inbox = RecvBatch::new(16, 64);
        let mut total = 0;
        while total < 5 {
            let n = inbox.recv_up_to(b.as_raw_fd(), 2).unwrap();
            assert!(n <= 2);
            total += n;
        }
        assert_eq!(total, 5);
    }
}
