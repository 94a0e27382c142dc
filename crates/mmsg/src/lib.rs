//! Many datagrams per system call: `recvmmsg(2)` and `sendmmsg(2)`, and
//! many datagrams per kernel packet with UDP GSO.
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
//! `sendmmsg` saves system calls, but the kernel still walks its UDP, IP,
//! routing and device path once per datagram. With GSO (generic
//! segmentation offload, Linux 4.18 and later; opt in with
//! [`SendBatch::set_gso`] after [`probe_gso`]), a flush sends a run of
//! datagrams to one peer as one message of their bytes back to back plus a
//! `UDP_SEGMENT` control message giving the datagram size; that path is then
//! walked once per run, and the datagrams are cut apart at the device, or on
//! loopback at the receiving socket:
//!
//! ```text
//!   mmsghdr[0]  name = peer A   iov = d0 d1 d2 (300+300+120 bytes)
//!               cmsg = SOL_UDP / UDP_SEGMENT / 300
//!   mmsghdr[1]  name = peer B   iov = d3        (no cmsg: a single datagram)
//!        |
//!        v   one skb per mmsghdr down the stack, cut at the end:
//!   A receives 300, 300, 120;  B receives d3
//! ```
//!
//! The receiver sees ordinary datagrams either way. A kernel, route or device
//! that refuses GSO costs one failed call: the batch resends those datagrams
//! one per `mmsghdr` and keeps GSO off.
//!
//! The crate has one child module, `sockaddr`: the conversions between
//! `std::net::SocketAddr` and the kernel's `sockaddr` types.
//!
//! `unsafe` is in these two modules only: here the system calls and the
//! control messages, there the conversions. The conversions, the
//! control-message layout and the GSO grouping are tested under Miri
//! (`cargo +nightly miri test -p ferrocache-mmsg`); the system calls are
//! tested on real loopback sockets.

use std::io;
use std::mem;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::ptr;
use std::time::Duration;

use sockaddr::{from_storage, storage_len, to_storage, zeroed_storage};

mod sockaddr;

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
/// where it goes (`None`: the socket's connected peer), both as the kernel's
/// sockaddr (for `msg_name`) and as a `SocketAddr` (to group by peer).
struct Queued {
    start: usize,
    len: usize,
    peer: Option<(libc::sockaddr_storage, libc::socklen_t)>,
    addr: Option<SocketAddr>,
}

/// One `mmsghdr` of a flush: the datagrams at `order[first..first +
/// segments]`, all to one peer. With more than one segment it is a GSO
/// message: their bytes back to back, cut by the kernel every `segment_len`
/// bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Message {
    first: usize,
    segments: usize,
    segment_len: usize,
}

/// What one `sendmmsg` call took.
struct Sent {
    messages: usize,
    datagrams: usize,
    bytes: usize,
}

/// Datagrams queued for `sendmmsg`.
///
/// With GSO on ([`SendBatch::set_gso`]), a flush first orders the queue by
/// peer (stable: datagrams to one peer keep their order; the order between
/// peers is not kept), then sends each run of datagrams to one peer as one
/// `mmsghdr` with a `UDP_SEGMENT` control message when all but the last have
/// the same length and the last is no longer:
///
/// ```text
///   queued:   A:100  B:80  A:100  A:60  B:80  A:100
///   by peer:  A:100  A:100  A:60 | A:100 | B:80  B:80
///   sent:     [A 260 bytes, gso 100] [A 100] [B 160 bytes, gso 80]
/// ```
///
/// The kernel then walks its IP, routing and device path once per message
/// instead of once per datagram, and cuts the message into datagrams at the
/// device (or, on loopback, at the receiving socket).
#[derive(Default)]
pub struct SendBatch {
    data: Vec<u8>,
    queued: Vec<Queued>,
    /// Group datagrams into GSO messages at flush.
    gso: bool,
    /// Why the kernel refused GSO, once it has (GSO then stays off).
    gso_refusal: Option<i32>,
    /// Flush scratch, kept for its capacity: queue indices in send order,
    /// and the messages over them.
    order: Vec<usize>,
    messages: Vec<Message>,
}

/// What one [`SendBatch::flush`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Flushed {
    /// Datagrams the kernel accepted (each segment of a GSO message counts).
    pub datagrams: usize,
    /// Their bytes.
    pub bytes: usize,
    /// Datagrams given up: no socket space in time, or refused.
    pub dropped: usize,
    /// `sendmmsg` calls made.
    pub calls: usize,
}

/// Most datagrams in one GSO message. The kernel's `UDP_MAX_SEGMENTS` is 64
/// on older kernels and 128 on newer ones; 64 works on all.
pub const MAX_GSO_SEGMENTS: usize = 64;

/// Most bytes in one GSO message. Until the kernel cuts it, the message is
/// one UDP datagram, so it must stay under UDP's 64 KiB length limit with
/// room for the headers.
pub const MAX_GSO_BYTES: usize = 65_000;

/// Most iovecs one `sendmmsg` call carries over all its messages. A GSO
/// message needs one iovec per run of datagrams that lie back to back in the
/// buffer, at most [`MAX_GSO_SEGMENTS`], so every message fits.
const MAX_IOVS_PER_CALL: usize = 8 * MAX_GSO_SEGMENTS;

/// Bytes of the one control message of a GSO send: `UDP_SEGMENT` and its
/// `u16` segment size, padded as the kernel walks control messages.
// SAFETY: CMSG_SPACE is arithmetic on its argument; it reads no memory.
const GSO_CMSG_SPACE: usize =
    unsafe { libc::CMSG_SPACE(mem::size_of::<u16>() as libc::c_uint) } as usize;

/// Room for one `UDP_SEGMENT` control message, aligned as a `cmsghdr` (each
/// `mmsghdr` of a call needs its own: the kernel reads them all at once).
#[derive(Clone, Copy)]
#[repr(C)]
union GsoCmsg {
    _align: libc::cmsghdr,
    _bytes: [u8; GSO_CMSG_SPACE],
}

/// Errors by which the kernel says it cannot do GSO at all: too old to know
/// `UDP_SEGMENT` (`ENOPROTOOPT`), or the socket or route cannot (`EINVAL`:
/// say, checksums off; `EIO`: a device or path without the offload;
/// `EOPNOTSUPP`).
fn is_gso_refusal(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EIO | libc::EINVAL | libc::ENOPROTOOPT | libc::EOPNOTSUPP)
    )
}

/// Whether the kernel knows UDP GSO on `fd` (Linux 4.18 and later), as
/// [`gso_supported`], with the error that says why not.
///
/// A kernel without it ignores the `UDP_SEGMENT` control message and would
/// send a whole GSO message as one large datagram, so probe before
/// [`SendBatch::set_gso`]. A route or device may still refuse it later; a
/// flush then falls back by itself.
pub fn probe_gso(fd: RawFd) -> io::Result<()> {
    let mut size: libc::c_int = 0;
    let mut len = mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `size` and `len` are valid for writes of the lengths given,
    // for the duration of the call.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_UDP,
            libc::UDP_SEGMENT,
            ptr::addr_of_mut!(size).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether the kernel can send UDP GSO on `fd`; see [`probe_gso`].
#[must_use]
pub fn gso_supported(fd: RawFd) -> bool {
    probe_gso(fd).is_ok()
}

/// Ask the kernel to hand `fd`'s incoming GSO groups (and, on devices that
/// coalesce, GRO groups) to it whole, as one long datagram (`UDP_GRO`).
///
/// [`RecvBatch`] does not cut such a datagram apart again, so this is for a
/// receiver that wants to see the packets as they travelled: the tests use
/// it to check that a sender really used GSO.
pub fn set_gro(fd: RawFd, on: bool) -> io::Result<()> {
    let value = libc::c_int::from(on);
    // SAFETY: `value` is a valid c_int for the duration of the call.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_UDP,
            libc::UDP_GRO,
            ptr::addr_of!(value).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

impl SendBatch {
    #[must_use]
    pub fn new() -> Self {
        SendBatch::default()
    }

    /// Turn GSO grouping on or off for later flushes. Turn it on only for a
    /// socket that [`probe_gso`] accepts. Off by default.
    pub fn set_gso(&mut self, on: bool) {
        self.gso = on;
    }

    /// Whether flushes group datagrams into GSO messages: set by
    /// [`SendBatch::set_gso`], and off for good once the kernel refused it.
    #[must_use]
    pub fn gso(&self) -> bool {
        self.gso
    }

    /// The error with which the kernel refused a GSO message, if it did;
    /// since then this batch sends one datagram per `mmsghdr`.
    #[must_use]
    pub fn gso_refusal(&self) -> Option<io::Error> {
        self.gso_refusal.map(io::Error::from_raw_os_error)
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
            addr: peer,
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
        Some((&self.data[q.start..q.start + q.len], q.addr))
    }

    /// Send everything queued on `fd` and empty the batch: [`MAX_BATCH`]
    /// messages per call (datagrams, or GSO groups of them). When the socket
    /// buffer is full it waits up to `stall` for space, a few times; what
    /// still cannot go is dropped and counted, as is a datagram the kernel
    /// refuses (too big, unreachable peer). A GSO message the kernel refuses
    /// is never dropped: it is sent again one datagram per `mmsghdr` (and
    /// when the refusal says GSO cannot work here, GSO is off from then on).
    pub fn flush(&mut self, fd: RawFd, stall: Duration) -> Flushed {
        self.plan();
        let mut done = Flushed::default();
        let mut next = 0;
        let mut stalls = 0;
        while next < self.messages.len() {
            match self.send_some(fd, next) {
                Ok(sent) => {
                    done.calls += 1;
                    done.datagrams += sent.datagrams;
                    done.bytes += sent.bytes;
                    next += sent.messages;
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
                Err(e) if self.messages[next].segments > 1 => {
                    // The first message of the call, a GSO one, was refused:
                    // its datagrams go again one by one, each to its own fate.
                    done.calls += 1;
                    if is_gso_refusal(&e) {
                        self.gso = false;
                        self.gso_refusal = e.raw_os_error();
                        self.split(next, self.messages.len());
                    } else {
                        self.split(next, next + 1);
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
        done.dropped += self.messages[next..]
            .iter()
            .map(|m| m.segments)
            .sum::<usize>();
        self.data.clear();
        self.queued.clear();
        self.order.clear();
        self.messages.clear();
        done
    }

    /// Decide the send order and the messages of a flush. Without GSO: the
    /// queue order, one datagram per message.
    fn plan(&mut self) {
        let n = self.queued.len();
        self.order.clear();
        self.order.extend(0..n);
        self.messages.clear();
        if !self.gso {
            let queued = &self.queued;
            self.messages.extend((0..n).map(|i| Message {
                first: i,
                segments: 1,
                segment_len: queued[i].len,
            }));
            return;
        }
        // By peer, then by queue position: a stable grouping without the
        // allocation of a stable sort (already-grouped input is one pass).
        let queued = &self.queued;
        self.order
            .sort_unstable_by(|&a, &b| queued[a].addr.cmp(&queued[b].addr).then(a.cmp(&b)));
        let mut pos = 0;
        while pos < n {
            let head = &queued[self.order[pos]];
            let mut segments = 1;
            let mut bytes = head.len;
            // An empty datagram cannot be a segment (it would vanish in the
            // concatenation), nor can its length be a segment size.
            if head.len > 0 {
                while pos + segments < n && segments < MAX_GSO_SEGMENTS {
                    let q = &queued[self.order[pos + segments]];
                    if q.addr != head.addr
                        || q.len == 0
                        || q.len > head.len
                        || bytes + q.len > MAX_GSO_BYTES
                    {
                        break;
                    }
                    segments += 1;
                    bytes += q.len;
                    if q.len < head.len {
                        // A shorter datagram can only end a message.
                        break;
                    }
                }
            }
            self.messages.push(Message {
                first: pos,
                segments,
                segment_len: head.len,
            });
            pos += segments;
        }
    }

    /// Replace the GSO messages among `messages[from..to]` by one message
    /// per datagram. (Only after a refusal, so the allocation is rare.)
    fn split(&mut self, from: usize, to: usize) {
        let queued = &self.queued;
        let order = &self.order;
        let singles: Vec<Message> = self.messages[from..to]
            .iter()
            .flat_map(|m| m.first..m.first + m.segments)
            .map(|pos| Message {
                first: pos,
                segments: 1,
                segment_len: queued[order[pos]].len,
            })
            .collect();
        self.messages.splice(from..to, singles);
    }

    /// One `sendmmsg` of the messages from `first` on: as many as fit in
    /// [`MAX_BATCH`] headers and [`MAX_IOVS_PER_CALL`] iovecs.
    fn send_some(&self, fd: RawFd, first: usize) -> io::Result<Sent> {
        debug_assert!(first < self.messages.len());
        // SAFETY: all-zero iovecs and mmsghdrs are valid (see RecvBatch).
        let mut iovs: [libc::iovec; MAX_IOVS_PER_CALL] = unsafe { mem::zeroed() };
        // SAFETY: as above.
        let mut hdrs: [libc::mmsghdr; MAX_BATCH] = unsafe { mem::zeroed() };
        let mut cmsgs = [GsoCmsg {
            _bytes: [0; GSO_CMSG_SPACE],
        }; MAX_BATCH];
        // Each message's iovecs, as (first iovec, count): all iovecs are
        // written before any pointer to them is taken.
        let mut spans = [(0usize, 0usize); MAX_BATCH];
        let base = self.data.as_ptr();
        let mut used = 0;
        let mut n = 0;
        for (span, m) in spans.iter_mut().zip(&self.messages[first..]) {
            let start = used;
            let mut end_of_last = None;
            let mut fits = true;
            for &i in &self.order[m.first..m.first + m.segments] {
                let q = &self.queued[i];
                if end_of_last == Some(q.start) {
                    // Back to back with the previous segment: one iovec.
                    iovs[used - 1].iov_len += q.len;
                } else if used < MAX_IOVS_PER_CALL {
                    iovs[used] = libc::iovec {
                        // sendmmsg only reads through it; iovec's field is `*mut`.
                        iov_base: base.wrapping_add(q.start).cast_mut().cast(),
                        iov_len: q.len,
                    };
                    used += 1;
                } else {
                    fits = false;
                    break;
                }
                end_of_last = Some(q.start + q.len);
            }
            if !fits {
                break;
            }
            *span = (start, used - start);
            n += 1;
        }
        debug_assert!(n > 0, "one message always fits");
        let iov_base = iovs.as_mut_ptr();
        let cmsg_base = cmsgs.as_mut_ptr();
        for (h, hdr) in hdrs.iter_mut().enumerate().take(n) {
            let m = self.messages[first + h];
            if let Some((storage, len)) = &self.queued[self.order[m.first]].peer {
                // sendmmsg only reads the address; `msg_name` is `*mut`.
                hdr.msg_hdr.msg_name = ptr::from_ref(storage).cast_mut().cast();
                hdr.msg_hdr.msg_namelen = *len;
            }
            let (start, count) = spans[h];
            hdr.msg_hdr.msg_iov = iov_base.wrapping_add(start);
            hdr.msg_hdr.msg_iovlen = count as _;
            if m.segments > 1 {
                let segment_len = u16::try_from(m.segment_len).expect("bounded by MAX_GSO_BYTES");
                // SAFETY: `cmsg_base + h` is the `h`th of `MAX_BATCH`
                // GsoCmsg buffers, alive and used by this header only.
                unsafe { write_gso_cmsg(&mut hdr.msg_hdr, cmsg_base.wrapping_add(h), segment_len) };
            }
        }
        // SAFETY: `hdrs[..n]` point at iovecs over bytes of `self.data`, at
        // addresses in `self.queued` and at control messages in `cmsgs`, all
        // alive and not moved during the call, which only reads them (and
        // writes each `msg_len`).
        let rc =
            unsafe { libc::sendmmsg(fd, hdrs.as_mut_ptr(), n as libc::c_uint, libc::MSG_DONTWAIT) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        let messages = rc as usize;
        Ok(Sent {
            messages,
            datagrams: self.messages[first..first + messages]
                .iter()
                .map(|m| m.segments)
                .sum(),
            bytes: hdrs[..messages].iter().map(|h| h.msg_len as usize).sum(),
        })
    }
}

/// Point `hdr` at `buf` and write there the one control message of a GSO
/// send: `SOL_UDP`, `UDP_SEGMENT`, `segment_len`.
///
/// # Safety
///
/// `buf` must be valid for writes of one [`GsoCmsg`] and stay alive and
/// unmoved while `hdr` is used.
unsafe fn write_gso_cmsg(hdr: &mut libc::msghdr, buf: *mut GsoCmsg, segment_len: u16) {
    hdr.msg_control = buf.cast();
    hdr.msg_controllen = GSO_CMSG_SPACE as _;
    // SAFETY: `msg_controllen` is at least one cmsghdr, so CMSG_FIRSTHDR
    // returns `buf`, aligned for a cmsghdr (GsoCmsg holds one) and, by the
    // caller's promise, writable for GSO_CMSG_SPACE = CMSG_SPACE(2) bytes:
    // the header and, at CMSG_DATA, the u16 (written unaligned, as the
    // kernel does not promise its alignment).
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(hdr);
        debug_assert!(!cmsg.is_null());
        (*cmsg).cmsg_level = libc::SOL_UDP;
        (*cmsg).cmsg_type = libc::UDP_SEGMENT;
        (*cmsg).cmsg_len = libc::CMSG_LEN(mem::size_of::<u16>() as libc::c_uint) as _;
        ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<u16>(), segment_len);
    }
}

/// Poll the datagram socket `fd` without sleeping until a datagram is queued on it,
/// for up to `budget`: true when one is (it stays queued for the next receive), false
/// when the budget ran out or the socket reported an error (which the next receive then
/// returns).
///
/// For a server that has just drained its socket and would otherwise sleep in the event
/// loop: when clients answer each reply with a new request within the budget, the
/// request is taken without the two thread wake-ups (the server's, then the client's
/// for the reply) that each round trip pays otherwise. Each check is one non-blocking
/// `recv` with `MSG_PEEK` of one byte.
pub fn spin_until_readable(fd: RawFd, budget: Duration) -> bool {
    let deadline = std::time::Instant::now() + budget;
    let mut byte = 0u8;
    loop {
        // SAFETY: `byte` is one writable byte for the duration of the call.
        let rc = unsafe {
            libc::recv(
                fd,
                ptr::addr_of_mut!(byte).cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        if rc >= 0 {
            return true;
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::WouldBlock && err.kind() != io::ErrorKind::Interrupted {
            return false;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::hint::spin_loop();
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;

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
    fn spinning_sees_a_queued_datagram_and_leaves_it_queued() {
        let (a, b) = pair();
        let fd = b.as_raw_fd();
        let started = std::time::Instant::now();
        assert!(
            !spin_until_readable(fd, Duration::from_millis(2)),
            "nothing sent yet"
        );
        assert!(
            started.elapsed() >= Duration::from_millis(2),
            "spun the whole budget"
        );
        // A datagram sent while the receiver spins is seen before the budget runs out.
        let to = b.local_addr().unwrap();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            a.send_to(b"", to).unwrap();
            a.send_to(b"second", to).unwrap();
        });
        assert!(spin_until_readable(fd, Duration::from_secs(5)));
        sender.join().unwrap();
        // An empty datagram counts, and neither was consumed.
        let mut inbox = RecvBatch::new(4, 64);
        assert_eq!(inbox.recv(fd).unwrap(), 2);
        assert_eq!(inbox.get(0).unwrap().data, b"");
        assert_eq!(inbox.get(1).unwrap().data, b"second");
        assert!(!spin_until_readable(fd, Duration::ZERO), "drained");
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

    // --- GSO ---

    /// The messages a GSO flush of `batch` would send, as queue indices.
    fn plan_of(batch: &mut SendBatch) -> Vec<Vec<usize>> {
        batch.plan();
        let groups = batch
            .messages
            .iter()
            .map(|m| batch.order[m.first..m.first + m.segments].to_vec())
            .collect();
        batch.order.clear();
        batch.messages.clear();
        groups
    }

    fn gso_batch() -> SendBatch {
        let mut batch = SendBatch::new();
        batch.set_gso(true);
        batch
    }

    /// A datagram of `len` bytes that says which one it is: its index, then
    /// a byte pattern that depends on the index.
    fn tagged(i: usize, len: usize) -> Vec<u8> {
        let mut d: Vec<u8> = (0..len).map(|j| (i * 7 + j) as u8).collect();
        let tag = (i as u32).to_be_bytes();
        let n = tag.len().min(len);
        d[..n].copy_from_slice(&tag[..n]);
        d
    }

    #[test]
    fn gso_groups_equal_runs_ending_with_a_shorter_datagram() {
        let peer: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let cases: &[(&[usize], &[&[usize]])] = &[
            (&[100, 100, 50, 100], &[&[0, 1, 2], &[3]]),
            (&[100, 100, 150], &[&[0, 1], &[2]]),
            (&[100, 50, 50], &[&[0, 1], &[2]]),
            (&[100], &[&[0]]),
            // An empty datagram is never a segment.
            (&[0, 0, 10, 0, 10, 10], &[&[0], &[1], &[2], &[3], &[4, 5]]),
            // 46 × 1400 = 64 400 bytes: the 47th would pass MAX_GSO_BYTES.
            (&[1400; 50], &[&[0; 0]]),
        ];
        for (sizes, want) in cases {
            let mut batch = gso_batch();
            for &len in *sizes {
                batch.push(&[&vec![1; len]], Some(peer));
            }
            let got = plan_of(&mut batch);
            if sizes.len() == 50 {
                let lens: Vec<usize> = got.iter().map(Vec::len).collect();
                assert_eq!(lens, [46, 4]);
                assert_eq!(got.concat(), (0..50).collect::<Vec<_>>());
                continue;
            }
            let want: Vec<Vec<usize>> = want.iter().map(|g| g.to_vec()).collect();
            assert_eq!(got, want, "sizes {sizes:?}");
        }
    }

    #[test]
    fn gso_groups_by_peer_and_keeps_each_peers_order() {
        let a: SocketAddr = "127.0.0.1:1000".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:2000".parse().unwrap();
        let mut batch = gso_batch();
        for peer in [a, b, a, b, a] {
            batch.push(&[&[0; 10]], Some(peer));
        }
        batch.push(&[&[0; 10]], None);
        assert_eq!(
            plan_of(&mut batch),
            [vec![5], vec![0, 2, 4], vec![1, 3]],
            "the connected peer, then A and B, each in queue order"
        );
        // The queue itself is untouched until the flush.
        assert_eq!(batch.queued(1), Some((&[0u8; 10][..], Some(b))));
    }

    #[test]
    fn gso_messages_hold_at_most_64_datagrams() {
        let peer: SocketAddr = "[::1]:9".parse().unwrap();
        let mut batch = gso_batch();
        for _ in 0..150 {
            batch.push(&[b"0123456789"], Some(peer));
        }
        let got = plan_of(&mut batch);
        let lens: Vec<usize> = got.iter().map(Vec::len).collect();
        assert_eq!(lens, [64, 64, 22]);
        assert_eq!(got.concat(), (0..150).collect::<Vec<_>>());
    }

    #[test]
    fn without_gso_every_datagram_is_its_own_message_in_queue_order() {
        let a: SocketAddr = "127.0.0.1:1000".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:2000".parse().unwrap();
        let mut batch = SendBatch::new();
        assert!(!batch.gso());
        for peer in [b, a, b] {
            batch.push(&[&[0; 10]], Some(peer));
        }
        assert_eq!(plan_of(&mut batch), [vec![0], vec![1], vec![2]]);
    }

    #[test]
    fn the_gso_control_message_is_laid_out_as_the_kernel_reads_it() {
        // SAFETY: an all-zero msghdr is valid (null pointers, zero lengths).
        let mut hdr: libc::msghdr = unsafe { mem::zeroed() };
        let mut buf = GsoCmsg {
            _bytes: [0xAA; GSO_CMSG_SPACE],
        };
        // SAFETY: `buf` is one writable GsoCmsg that outlives `hdr`'s use.
        unsafe { write_gso_cmsg(&mut hdr, ptr::addr_of_mut!(buf), 1392) };
        assert_eq!(hdr.msg_controllen as usize, GSO_CMSG_SPACE);
        assert_eq!(GSO_CMSG_SPACE, mem::size_of::<GsoCmsg>());
        assert_eq!(mem::align_of::<GsoCmsg>(), mem::align_of::<libc::cmsghdr>());
        // SAFETY: `hdr` points at `buf`, which holds the control message
        // just written; the CMSG_* helpers stay within msg_controllen.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&hdr);
            assert_eq!(cmsg.cast::<GsoCmsg>(), ptr::addr_of_mut!(buf));
            assert_eq!((*cmsg).cmsg_level, libc::SOL_UDP);
            assert_eq!((*cmsg).cmsg_type, libc::UDP_SEGMENT);
            assert_eq!((*cmsg).cmsg_len as usize, libc::CMSG_LEN(2) as usize);
            let size = ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<u16>());
            assert_eq!(size, 1392);
            assert!(libc::CMSG_NXTHDR(&hdr, cmsg).is_null(), "exactly one");
        }
    }

    /// Every datagram waiting on `socket`, with its sender.
    fn drain(socket: &UdpSocket) -> Vec<(Vec<u8>, SocketAddr)> {
        let mut inbox = RecvBatch::new(MAX_BATCH, 2048);
        let mut got = Vec::new();
        loop {
            match inbox.recv(socket.as_raw_fd()) {
                Ok(n) => {
                    for i in 0..n {
                        let d = inbox.get(i).unwrap();
                        assert!(!d.truncated);
                        got.push((d.data.to_vec(), d.peer.unwrap()));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return got,
                Err(e) => panic!("recvmmsg: {e}"),
            }
        }
    }

    fn only_data(got: Vec<(Vec<u8>, SocketAddr)>) -> Vec<Vec<u8>> {
        got.into_iter().map(|(d, _)| d).collect()
    }

    const STALL: Duration = Duration::from_millis(100);

    #[test]
    #[cfg_attr(miri, ignore = "system calls")]
    fn udp_sockets_on_this_kernel_offer_gso() {
        let (a, _) = pair();
        probe_gso(a.as_raw_fd()).expect("UDP GSO needs Linux 4.18 or later");
        assert!(gso_supported(a.as_raw_fd()));
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        // Not a UDP socket: refused (EOPNOTSUPP here; ENOPROTOOPT on a
        // kernel without UDP GSO).
        assert!(probe_gso(tcp.as_raw_fd()).is_err());
        assert!(!gso_supported(tcp.as_raw_fd()));
    }

    #[test]
    #[cfg_attr(miri, ignore = "system calls")]
    fn a_gso_message_arrives_as_its_datagrams_with_their_bytes_in_order() {
        let (a, b) = pair();
        let to = b.local_addr().unwrap();
        let mut out = gso_batch();
        let mut want = Vec::new();
        for i in 0..11 {
            let d = tagged(i, if i == 10 { 120 } else { 300 });
            out.push(&[&d[..4], &d[4..]], Some(to));
            want.push(d);
        }
        let flushed = out.flush(a.as_raw_fd(), STALL);
        assert_eq!(
            flushed,
            Flushed {
                datagrams: 11,
                bytes: 10 * 300 + 120,
                dropped: 0,
                calls: 1,
            }
        );
        assert!(out.is_empty() && out.gso() && out.gso_refusal().is_none());
        let got = drain(&b);
        assert!(got.iter().all(|(_, from)| *from == a.local_addr().unwrap()));
        assert_eq!(only_data(got), want);
    }

    #[test]
    #[cfg_attr(miri, ignore = "system calls")]
    fn interleaved_peers_each_get_their_datagrams_in_order() {
        let (a, b) = pair();
        let (c, _) = pair();
        let (to_b, to_c) = (b.local_addr().unwrap(), c.local_addr().unwrap());
        let mut out = gso_batch();
        let (mut want_b, mut want_c) = (Vec::new(), Vec::new());
        // B, C, B, C, B, then a second round: two groups per peer.
        for i in 0..10 {
            let d = tagged(i, 64);
            if i % 2 == 0 {
                out.push(&[&d], Some(to_b));
                want_b.push(d);
            } else {
                out.push(&[&d], Some(to_c));
                want_c.push(d);
            }
        }
        let flushed = out.flush(a.as_raw_fd(), STALL);
        assert_eq!(
            flushed,
            Flushed {
                datagrams: 10,
                bytes: 640,
                dropped: 0,
                calls: 1,
            }
        );
        assert_eq!(only_data(drain(&b)), want_b);
        assert_eq!(only_data(drain(&c)), want_c);
    }

    #[test]
    #[cfg_attr(miri, ignore = "system calls")]
    fn unequal_sizes_break_groups_and_all_arrive() {
        let (a, b) = pair();
        let to = b.local_addr().unwrap();
        let mut out = gso_batch();
        let sizes = [100, 100, 50, 100, 200, 200, 1, 0, 7, 7];
        let want: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| tagged(i, n))
            .collect();
        for d in &want {
            out.push(&[d], Some(to));
        }
        let flushed = out.flush(a.as_raw_fd(), STALL);
        assert_eq!(flushed.datagrams, sizes.len());
        assert_eq!(flushed.bytes, sizes.iter().sum::<usize>());
        assert_eq!((flushed.dropped, flushed.calls), (0, 1));
        assert_eq!(only_data(drain(&b)), want);
    }

    #[test]
    #[cfg_attr(miri, ignore = "system calls")]
    fn more_than_64_equal_datagrams_go_as_several_messages() {
        let (a, b) = pair();
        let to = b.local_addr().unwrap();
        let mut out = gso_batch();
        let want: Vec<Vec<u8>> = (0..150).map(|i| tagged(i, 100)).collect();
        for d in &want {
            out.push(&[d], Some(to));
        }
        // Three messages (64, 64, 22 datagrams) in one call.
        let flushed = out.flush(a.as_raw_fd(), STALL);
        assert_eq!(
            flushed,
            Flushed {
                datagrams: 150,
                bytes: 15_000,
                dropped: 0,
                calls: 1,
            }
        );
        assert_eq!(only_data(drain(&b)), want);
    }

    /// A receiving socket that asks for GRO (`UDP_GRO`) is handed a GSO
    /// message whole, with its segment size: proof that the flush really sent
    /// one message, and that loopback carried it as one packet.
    #[test]
    #[cfg_attr(miri, ignore = "system calls")]
    fn loopback_carries_a_gso_message_as_one_packet() {
        let (a, b) = pair();
        set_gro(b.as_raw_fd(), true).expect("UDP_GRO");
        let mut out = gso_batch();
        let want: Vec<Vec<u8>> = (0..6)
            .map(|i| tagged(i, if i == 5 { 50 } else { 200 }))
            .collect();
        for d in &want {
            out.push(&[d], Some(b.local_addr().unwrap()));
        }
        assert_eq!(out.flush(a.as_raw_fd(), STALL).datagrams, 6);

        let mut buf = [0u8; 4096];
        let mut control = [GsoCmsg {
            _bytes: [0; GSO_CMSG_SPACE],
        }; 4];
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: an all-zero msghdr is valid.
        let mut msg: libc::msghdr = unsafe { mem::zeroed() };
        msg.msg_iov = ptr::addr_of_mut!(iov);
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = mem::size_of_val(&control) as _;
        // SAFETY: `msg` points at `iov` (over `buf`) and at `control`, all
        // alive and writable for the lengths given.
        let n = unsafe { libc::recvmsg(b.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
        assert!(n >= 0, "recvmsg: {}", io::Error::last_os_error());
        assert_eq!(
            &buf[..n as usize],
            want.concat(),
            "one packet of 1050 bytes"
        );
        let mut segment = None;
        // SAFETY: the kernel wrote `msg_controllen` bytes of control
        // messages into `control`; the CMSG_* helpers stay within them.
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
            while !cmsg.is_null() {
                if (*cmsg).cmsg_level == libc::SOL_UDP && (*cmsg).cmsg_type == libc::UDP_GRO {
                    segment = Some(ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<u16>()));
                }
                cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
            }
        }
        assert_eq!(segment, Some(200));
    }

    /// `SO_NO_CHECK` (no UDP checksums) makes the kernel refuse every GSO
    /// send with `EINVAL`: a real refusal, as from a device without the
    /// offload. Nothing may be lost, and GSO stays off afterwards.
    #[test]
    #[cfg_attr(miri, ignore = "system calls")]
    fn a_refused_gso_message_is_sent_again_datagram_by_datagram() {
        let (a, b) = pair();
        let (c, _) = pair();
        let on: libc::c_int = 1;
        // SAFETY: `on` is a valid c_int for the duration of the call.
        let rc = unsafe {
            libc::setsockopt(
                a.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_NO_CHECK,
                ptr::addr_of!(on).cast(),
                mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0);
        let mut out = gso_batch();
        let (mut want_b, mut want_c) = (Vec::new(), Vec::new());
        for i in 0..9 {
            let d = tagged(i, 80);
            if i % 3 == 2 {
                out.push(&[&d], Some(c.local_addr().unwrap()));
                want_c.push(d);
            } else {
                out.push(&[&d], Some(b.local_addr().unwrap()));
                want_b.push(d);
            }
        }
        let flushed = out.flush(a.as_raw_fd(), STALL);
        assert_eq!(
            flushed,
            Flushed {
                datagrams: 9,
                bytes: 720,
                dropped: 0,
                calls: 2,
            },
            "one refused call, then all nine datagrams in one"
        );
        assert!(!out.gso());
        assert_eq!(
            out.gso_refusal().and_then(|e| e.raw_os_error()),
            Some(libc::EINVAL)
        );
        assert_eq!(only_data(drain(&b)), want_b);
        assert_eq!(only_data(drain(&c)), want_c);

        // Later flushes go without GSO from the start, in queue order.
        for i in 0..3 {
            out.push(&[&tagged(i, 80)], Some(b.local_addr().unwrap()));
        }
        let flushed = out.flush(a.as_raw_fd(), STALL);
        assert_eq!((flushed.datagrams, flushed.calls), (3, 1));
        assert_eq!(
            only_data(drain(&b)),
            (0..3).map(|i| tagged(i, 80)).collect::<Vec<_>>()
        );
    }

    /// A GSO message refused for a reason of its own peer (a broadcast
    /// address without `SO_BROADCAST`) is split, each datagram meets its own
    /// fate, and GSO stays on for the other peers.
    #[test]
    #[cfg_attr(miri, ignore = "system calls")]
    fn a_gso_message_refused_for_its_peer_costs_only_its_datagrams() {
        let (a, b) = pair();
        let to = b.local_addr().unwrap();
        let broadcast: SocketAddr = "255.255.255.255:9".parse().unwrap();
        let mut out = gso_batch();
        let mut want = Vec::new();
        for i in 0..8 {
            let d = tagged(i, 40);
            if i % 2 == 0 {
                out.push(&[&d], Some(to));
                want.push(d);
            } else {
                out.push(&[&d], Some(broadcast));
            }
        }
        let flushed = out.flush(a.as_raw_fd(), STALL);
        assert_eq!(
            flushed,
            Flushed {
                datagrams: 4,
                bytes: 160,
                dropped: 4,
                // B's message goes and the broadcast one is refused, then its
                // four datagrams are refused one call each.
                calls: 2 + 4,
            }
        );
        assert!(out.gso() && out.gso_refusal().is_none());
        assert_eq!(only_data(drain(&b)), want);
    }

    #[test]
    #[cfg_attr(miri, ignore = "system calls")]
    fn ipv6_peers_get_gso_messages_too() {
        let a = UdpSocket::bind("[::1]:0").unwrap();
        let b = UdpSocket::bind("[::1]:0").unwrap();
        b.set_nonblocking(true).unwrap();
        let mut out = gso_batch();
        let want: Vec<Vec<u8>> = (0..20)
            .map(|i| tagged(i, if i == 19 { 3 } else { 1392 }))
            .collect();
        for d in &want {
            out.push(&[d], Some(b.local_addr().unwrap()));
        }
        let flushed = out.flush(a.as_raw_fd(), STALL);
        assert_eq!((flushed.datagrams, flushed.dropped), (20, 0));
        assert_eq!(flushed.bytes, 19 * 1392 + 3);
        assert!(out.gso());
        assert_eq!(only_data(drain(&b)), want);
    }
}
