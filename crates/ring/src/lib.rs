//! One io_uring per worker thread, behind a safe interface.
//!
//! The server's io_uring backend drives every socket of a worker through one
//! [`Ring`]:
//!
//! - **multishot accept**: one submission per listener yields a completion per
//!   new connection, until the kernel ends it;
//! - **multishot receive into provided buffers**: one submission per
//!   connection yields a completion per arrival of data, each in a buffer the
//!   kernel picks from a ring of [`Config::buffers`] buffers registered once
//!   ([`BufRing`]); the caller copies the bytes out and the buffer goes back
//!   to the kernel before the next wait;
//! - **sends of owned buffers**: [`Ring::send`] takes a `Vec<u8>` and the
//!   completion hands it back, so a buffer cannot be freed or reused while
//!   the kernel reads it;
//! - **multishot poll** for descriptors served with ordinary system calls
//!   (the UDP sockets, which use `recvmmsg`/`sendmmsg`, and a wake-up
//!   eventfd).
//!
//! Everything queued during a loop turn goes to the kernel with the one
//! `io_uring_enter` that also waits for the next completions
//! ([`Ring::submit_and_wait`]).
//!
//! This is the only module of the crate with `unsafe`: pushing submission
//! entries (the kernel then reads or writes memory we name), and the shared
//! memory of the provided-buffer ring. The buffer-ring bookkeeping and the
//! user-data encoding are tested under Miri
//! (`cargo +nightly miri test -p ferrocache-ring`); the system calls are
//! tested on real sockets.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::ptr;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, squeue, types, IoUring};

/// The buffer group id of the one provided-buffer ring of each [`Ring`].
const BUFFER_GROUP: u16 = 0;
/// User data: the operation kind in the top byte, the caller's token below.
const KIND_SHIFT: u32 = 56;
/// Largest token a caller may attach to an operation.
pub const MAX_TOKEN: u64 = (1 << KIND_SHIFT) - 1;
/// How long dropping a [`Ring`] waits for cancelled operations to end before
/// it leaks their memory rather than free it under the kernel.
const DROP_DRAIN: Duration = Duration::from_secs(1);

/// What an operation was, recovered from a completion's user data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Kind {
    Accept = 1,
    Recv = 2,
    /// The token is the index of the send slot, not the caller's token.
    Send = 3,
    Poll = 4,
    /// Cancellations: their completions carry nothing for the caller.
    Cancel = 5,
}

fn encode(kind: Kind, token: u64) -> u64 {
    assert!(token <= MAX_TOKEN, "token {token:#x} exceeds 56 bits");
    (kind as u64) << KIND_SHIFT | token
}

fn decode(user_data: u64) -> Option<(Kind, u64)> {
    let token = user_data & MAX_TOKEN;
    let kind = match user_data >> KIND_SHIFT {
        1 => Kind::Accept,
        2 => Kind::Recv,
        3 => Kind::Send,
        4 => Kind::Poll,
        5 => Kind::Cancel,
        _ => return None,
    };
    Some((kind, token))
}

/// Sizes of a [`Ring`].
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Submission queue entries (the completion queue gets four times as many).
    pub entries: u32,
    /// Provided receive buffers; a power of two, at most 32768.
    pub buffers: u16,
    /// Bytes per provided buffer.
    pub buffer_size: u32,
}

impl Default for Config {
    fn default() -> Self {
        // 2 MiB of receive buffers per worker. A buffer goes back to the
        // kernel as soon as its bytes are copied out, so the count only has
        // to cover what arrives between two loop turns; running out costs
        // one re-armed receive (ENOBUFS), not data.
        Config {
            entries: 1024,
            buffers: 512,
            buffer_size: 4096,
        }
    }
}

/// One completion, as the caller sees it.
#[derive(Debug)]
pub enum Event<'a> {
    /// A multishot accept produced a connection (or failed). When `more` is
    /// false the accept has ended and must be submitted again to go on.
    Accepted {
        token: u64,
        result: io::Result<OwnedFd>,
        more: bool,
    },
    /// A multishot receive got data: `Ok` with an empty slice is end of
    /// stream. The slice is valid for this call only; the buffer returns to
    /// the kernel afterwards. When `more` is false the receive has ended
    /// (end of stream, an error, cancellation, or `ENOBUFS` when every
    /// provided buffer was in use) and must be submitted again to go on.
    Received {
        token: u64,
        result: io::Result<&'a [u8]>,
        more: bool,
    },
    /// A send ended; `buf` is the buffer given to [`Ring::send`], whole.
    Sent {
        token: u64,
        result: io::Result<usize>,
        buf: Vec<u8>,
    },
    /// A polled descriptor became readable (or the poll failed). When `more`
    /// is false the poll has ended.
    Ready {
        token: u64,
        result: io::Result<()>,
        more: bool,
    },
}

/// Layout of the kernel's `struct io_uring_buf`; in the first entry, the
/// last field is the ring's tail instead.
#[repr(C)]
struct RawBuf {
    addr: u64,
    len: u32,
    bid: u16,
    resv: u16,
}

const _: () = assert!(std::mem::size_of::<RawBuf>() == 16);

/// A provided-buffer ring: `count` entries describing `count` buffers of
/// `size` bytes, shared with the kernel.
///
/// The kernel consumes entries from its head and writes received bytes into
/// the buffer an entry names; the buffer then belongs to us until we publish
/// it again at the tail ([`BufRing::push`], [`BufRing::publish`]). Both
/// memory areas are raw allocations that no Rust reference ever spans: only
/// a buffer the kernel has handed back is ever viewed as a slice.
pub struct BufRing {
    entries: *mut RawBuf,
    entries_layout: Layout,
    mem: *mut u8,
    mem_layout: Layout,
    count: u16,
    size: u32,
    /// Our tail, published to the kernel by [`BufRing::publish`].
    tail: u16,
    /// Leak both areas on drop (the kernel may still use them).
    leak: bool,
}

impl BufRing {
    /// Allocate `count` buffers of `size` bytes and describe all of them in
    /// the ring (not yet published).
    ///
    /// # Panics
    /// If `count` is not a power of two or `size` is zero.
    #[must_use]
    pub fn new(count: u16, size: u32) -> BufRing {
        assert!(
            count.is_power_of_two(),
            "buffer count must be a power of two"
        );
        assert!(size > 0, "buffer size must be positive");
        let entries_layout =
            Layout::from_size_align(usize::from(count) * std::mem::size_of::<RawBuf>(), 4096)
                .expect("buffer ring layout");
        let mem_layout = Layout::from_size_align(usize::from(count) * size as usize, 4096)
            .expect("buffer memory layout");
        // SAFETY: both layouts have a non-zero size (count >= 1, size >= 1).
        let entries = unsafe { alloc_zeroed(entries_layout) }.cast::<RawBuf>();
        // SAFETY: as above.
        let mem = unsafe { alloc_zeroed(mem_layout) };
        if entries.is_null() || mem.is_null() {
            std::alloc::handle_alloc_error(if entries.is_null() {
                entries_layout
            } else {
                mem_layout
            });
        }
        let mut ring = BufRing {
            entries,
            entries_layout,
            mem,
            mem_layout,
            count,
            size,
            tail: 0,
            leak: false,
        };
        for bid in 0..count {
            ring.push(bid);
        }
        ring
    }

    /// Address of the entry array, for registration.
    fn addr(&self) -> u64 {
        self.entries as u64
    }

    /// Describe buffer `bid` at our tail; the kernel sees it after
    /// [`BufRing::publish`].
    fn push(&mut self, bid: u16) {
        assert!(bid < self.count, "buffer id {bid} out of range");
        let index = usize::from(self.tail & (self.count - 1));
        // SAFETY: index < count, so the entry lies inside the allocation.
        // The kernel reads only entries between its head and the published
        // tail, and this one is at our unpublished tail, so nothing reads it
        // concurrently. Fields are written one by one through raw pointers:
        // entry 0's `resv` is the tail, which the kernel may read, and is
        // left alone.
        unsafe {
            let entry = self.entries.add(index);
            ptr::addr_of_mut!((*entry).addr)
                .write(self.mem.add(usize::from(bid) * self.size as usize) as u64);
            ptr::addr_of_mut!((*entry).len).write(self.size);
            ptr::addr_of_mut!((*entry).bid).write(bid);
        }
        self.tail = self.tail.wrapping_add(1);
    }

    /// Make every pushed entry visible to the kernel.
    fn publish(&self) {
        // SAFETY: entry 0 exists; its `resv` field is the ring tail, a u16
        // at an offset aligned for u16 inside a 4096-aligned allocation, and
        // it is only ever accessed atomically (by us here, by the kernel with
        // acquire loads). Release orders the entry writes before it.
        let tail = unsafe { AtomicU16::from_ptr(ptr::addr_of_mut!((*self.entries).resv)) };
        tail.store(self.tail, Ordering::Release);
    }

    /// The first `len` bytes of buffer `bid`, which the kernel has handed
    /// to us with a completion and which has not been pushed back since.
    fn filled(&self, bid: u16, len: usize) -> &[u8] {
        assert!(bid < self.count && len <= self.size as usize);
        // SAFETY: the range lies inside the allocation (checked above). The
        // kernel wrote it before posting the completion that named `bid`,
        // and does not touch the buffer again until we push it back, which
        // cannot happen while this shared borrow of `self` lives.
        unsafe {
            std::slice::from_raw_parts(self.mem.add(usize::from(bid) * self.size as usize), len)
        }
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        if self.leak {
            return;
        }
        // SAFETY: allocated in `new` with exactly these layouts; the owner
        // sets `leak` when the kernel might still use them.
        unsafe {
            dealloc(self.entries.cast(), self.entries_layout);
            dealloc(self.mem, self.mem_layout);
        }
    }
}

// SAFETY: the raw pointers are owned allocations with no thread affinity.
unsafe impl Send for BufRing {}

/// Buffers of sends in flight, indexed by send slot.
#[derive(Default)]
struct SendSlots {
    slots: Vec<Option<(u64, Vec<u8>, usize)>>,
    free: Vec<usize>,
}

impl SendSlots {
    fn insert(&mut self, token: u64, buf: Vec<u8>, offset: usize) -> usize {
        let entry = Some((token, buf, offset));
        if let Some(i) = self.free.pop() {
            self.slots[i] = entry;
            i
        } else {
            self.slots.push(entry);
            self.slots.len() - 1
        }
    }

    fn get(&self, slot: usize) -> Option<&(u64, Vec<u8>, usize)> {
        self.slots.get(slot).and_then(Option::as_ref)
    }

    fn remove(&mut self, slot: usize) -> Option<(u64, Vec<u8>, usize)> {
        let taken = self.slots.get_mut(slot).and_then(Option::take);
        if taken.is_some() {
            self.free.push(slot);
        }
        taken
    }

    fn in_flight(&self) -> usize {
        self.slots.len() - self.free.len()
    }
}

/// One worker's io_uring with its provided buffers and in-flight sends.
pub struct Ring {
    uring: IoUring,
    bufs: BufRing,
    sends: SendSlots,
    /// Operations submitted whose last completion has not been seen.
    outstanding: usize,
    /// Set up with `SINGLE_ISSUER | DEFER_TASKRUN`.
    deferred: bool,
}

fn errno(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

impl Ring {
    /// Set up a ring and register its provided buffers.
    ///
    /// The ring is created with `SINGLE_ISSUER | DEFER_TASKRUN` where the
    /// kernel has them (6.1+): completions are then produced only inside
    /// our own `io_uring_enter`, with no interrupting task work. It must then
    /// be used from the thread that created it.
    ///
    /// # Errors
    /// The kernel's, when io_uring is missing, disabled
    /// (`kernel.io_uring_disabled`), refused by seccomp, or too old for
    /// provided-buffer rings (5.19).
    pub fn new(config: Config) -> io::Result<Ring> {
        let cq = config.entries.saturating_mul(4);
        let (uring, deferred) = match IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_coop_taskrun()
            // The kernel flags pending task work in the SQ ring, for
            // `spin_for_completion` to run it only when there is some.
            .setup_taskrun_flag()
            .setup_cqsize(cq)
            .build(config.entries)
        {
            Ok(u) => (u, true),
            Err(_) => (
                IoUring::builder().setup_cqsize(cq).build(config.entries)?,
                false,
            ),
        };
        let bufs = BufRing::new(config.buffers, config.buffer_size);
        // SAFETY: the entry array lives in `bufs`, owned by the returned Ring
        // and dropped after the ring is gone (see `Drop for Ring`), or leaked.
        unsafe {
            uring.submitter().register_buf_ring_with_flags(
                bufs.addr(),
                config.buffers,
                BUFFER_GROUP,
                0,
            )?;
        }
        bufs.publish();
        Ok(Ring {
            uring,
            bufs,
            sends: SendSlots::default(),
            outstanding: 0,
            deferred,
        })
    }

    /// Check that this kernel runs everything the backend needs: a ring with
    /// provided buffers, and a multishot receive on a socket pair.
    ///
    /// # Errors
    /// Why io_uring cannot be used, in words.
    pub fn probe() -> Result<(), String> {
        let mut ring = Ring::new(Config {
            entries: 8,
            buffers: 8,
            buffer_size: 64,
        })
        .map_err(|e| format!("io_uring setup failed: {e}"))?;
        let (a, b) = std::os::unix::net::UnixStream::pair()
            .map_err(|e| format!("socketpair failed: {e}"))?;
        use std::io::Write;
        use std::os::fd::AsRawFd;
        ring.recv_multi(b.as_raw_fd(), 1);
        (&a).write_all(b"x")
            .map_err(|e| format!("socketpair write failed: {e}"))?;
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut got: Option<Result<usize, String>> = None;
        while got.is_none() && Instant::now() < deadline {
            ring.submit_and_wait(Some(Duration::from_millis(100)))
                .map_err(|e| format!("io_uring_enter failed: {e}"))?;
            ring.reap(|event| {
                if let Event::Received { result, .. } = event {
                    got = Some(result.map(<[u8]>::len).map_err(|e| e.to_string()));
                }
            });
        }
        match got {
            Some(Ok(1)) => Ok(()),
            Some(Ok(n)) => Err(format!("multishot receive returned {n} bytes for 1")),
            Some(Err(e)) => Err(format!("multishot receive unsupported: {e}")),
            None => Err("multishot receive never completed".into()),
        }
    }

    /// Queue an entry, making room by submitting when the queue is full.
    ///
    /// # Safety
    /// Any memory the entry points at must stay valid, and not be accessed
    /// in a way that conflicts with the kernel's, until its last completion.
    unsafe fn push(&mut self, entry: &squeue::Entry) {
        loop {
            // SAFETY: forwarded to the caller.
            if unsafe { self.uring.submission().push(entry) }.is_ok() {
                self.outstanding += 1;
                return;
            }
            // Full: hand what is queued to the kernel and retry. An error
            // here (EBUSY with a full completion queue) clears as
            // completions are reaped; the loop retries either way.
            let _ = self.uring.submit();
        }
    }

    /// Accept connections on listener `fd` until the accept ends; the new
    /// sockets are non-blocking and close-on-exec.
    pub fn accept_multi(&mut self, fd: RawFd, token: u64) {
        let entry = opcode::AcceptMulti::new(types::Fd(fd))
            .flags(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC)
            .build()
            .user_data(encode(Kind::Accept, token));
        // SAFETY: the entry refers to no memory of ours.
        unsafe { self.push(&entry) };
    }

    /// Receive on `fd` into provided buffers until the receive ends.
    pub fn recv_multi(&mut self, fd: RawFd, token: u64) {
        let entry = opcode::RecvMulti::new(types::Fd(fd), BUFFER_GROUP)
            .build()
            .user_data(encode(Kind::Recv, token));
        // SAFETY: the kernel writes only into provided buffers, which live
        // as long as the ring (see `Drop for Ring`).
        unsafe { self.push(&entry) };
    }

    /// Report each time `fd` becomes readable, until the poll ends.
    pub fn poll_multi(&mut self, fd: RawFd, token: u64) {
        let entry = opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32)
            .multi(true)
            .build()
            .user_data(encode(Kind::Poll, token));
        // SAFETY: the entry refers to no memory of ours.
        unsafe { self.push(&entry) };
    }

    /// Send `buf[offset..]` on `fd`; [`Event::Sent`] returns `buf`. On a
    /// stream socket the send completes when all of it is sent, or fails.
    ///
    /// # Panics
    /// If `offset` is past the end of `buf`.
    pub fn send(&mut self, fd: RawFd, token: u64, buf: Vec<u8>, offset: usize) {
        assert!(offset <= buf.len());
        assert!(token <= MAX_TOKEN);
        let len = u32::try_from(buf.len() - offset).unwrap_or(u32::MAX);
        let slot = self.sends.insert(token, buf, offset);
        let (_, buf, _) = self.sends.get(slot).expect("just inserted");
        let entry = opcode::Send::new(types::Fd(fd), buf[offset..].as_ptr(), len)
            // MSG_WAITALL: the kernel retries a short send by itself (when
            // the socket has room again) and completes once, with everything
            // sent or an error, instead of one completion per partial send.
            .flags(libc::MSG_NOSIGNAL | libc::MSG_WAITALL)
            .build()
            .user_data(encode(Kind::Send, slot as u64));
        // SAFETY: the bytes belong to a Vec held in `self.sends` until the
        // send's completion (moving the Vec does not move its heap buffer),
        // and nothing writes to it meanwhile; `Drop for Ring` waits for the
        // completion or leaks the buffer.
        unsafe { self.push(&entry) };
    }

    /// Cancel the multishot receive with `token`; its last completion
    /// follows (normally with `ECANCELED`).
    pub fn cancel_recv(&mut self, token: u64) {
        let entry = opcode::AsyncCancel::new(encode(Kind::Recv, token))
            .build()
            .user_data(encode(Kind::Cancel, 0));
        // SAFETY: the entry refers to no memory of ours.
        unsafe { self.push(&entry) };
    }

    /// Submit everything queued without waiting.
    ///
    /// # Errors
    /// The kernel's.
    pub fn submit(&mut self) -> io::Result<()> {
        self.uring.submit().map(drop)
    }

    /// Submit everything queued, then wait for a completion without sleeping, for up
    /// to `budget`: poll the completion queue, and enter the kernel only to run task
    /// work it flags as pending (`IORING_SQ_TASKRUN`; with deferred task work no
    /// completion appears until it runs). True when a completion is ready to reap.
    ///
    /// For `--busy-poll-us`: a worker that sleeps in `io_uring_enter` and is woken
    /// for every request can spend more on those two context switches than on the
    /// request. Without deferred task work the kernel posts completions on its own,
    /// at its next return to user space.
    ///
    /// # Errors
    /// The kernel's, other than `EINTR` and `EBUSY`.
    pub fn spin_for_completion(&mut self, budget: Duration) -> io::Result<bool> {
        let deadline = Instant::now() + budget;
        let mut entered = false;
        loop {
            if !entered || self.uring.submission().taskrun() {
                entered = true;
                match self.uring.submit() {
                    Ok(_) => {}
                    Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY)) => {}
                    Err(e) => return Err(e),
                }
            }
            if !self.uring.completion().is_empty() {
                return Ok(true);
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
            std::hint::spin_loop();
        }
    }

    /// Submit everything queued and wait for at least one completion, or
    /// until `timeout`; one `io_uring_enter`. An expired timeout or a signal
    /// is not an error.
    ///
    /// # Errors
    /// The kernel's, other than `ETIME`, `EINTR` and `EBUSY`.
    pub fn submit_and_wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        let result = match timeout {
            None => self.uring.submit_and_wait(1),
            Some(t) => {
                let ts = types::Timespec::from(t);
                let args = types::SubmitArgs::new().timespec(&ts);
                self.uring.submitter().submit_with_args(1, &args)
            }
        };
        match result {
            Ok(_) => Ok(()),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ETIME | libc::EINTR | libc::EBUSY)
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Whether the kernel took `SINGLE_ISSUER | DEFER_TASKRUN` (6.1+); without
    /// them completions are produced by task work that interrupts the thread.
    #[must_use]
    pub fn deferred_taskrun(&self) -> bool {
        self.deferred
    }

    /// Operations whose last completion is still to come.
    #[must_use]
    pub fn outstanding(&self) -> usize {
        self.outstanding
    }

    /// Sends in flight.
    #[must_use]
    pub fn sends_in_flight(&self) -> usize {
        self.sends.in_flight()
    }

    /// Hand every available completion to `f`; returns how many there were.
    /// Receive buffers go back to the kernel when this returns.
    pub fn reap(&mut self, mut f: impl FnMut(Event<'_>)) -> usize {
        let mut count = 0;
        for cqe in self.uring.completion() {
            count += 1;
            let flags = cqe.flags();
            let more = cqueue::more(flags);
            let res = cqe.result();
            let Some((kind, token)) = decode(cqe.user_data()) else {
                continue;
            };
            if !more || kind == Kind::Send || kind == Kind::Cancel {
                self.outstanding = self.outstanding.saturating_sub(1);
            }
            match kind {
                Kind::Cancel => {}
                Kind::Accept => {
                    let result = if res >= 0 {
                        // SAFETY: a successful accept completion carries a
                        // new descriptor that nothing else owns.
                        Ok(unsafe { OwnedFd::from_raw_fd(res) })
                    } else {
                        Err(errno(-res))
                    };
                    f(Event::Accepted {
                        token,
                        result,
                        more,
                    });
                }
                Kind::Poll => f(Event::Ready {
                    token,
                    result: if res >= 0 { Ok(()) } else { Err(errno(-res)) },
                    more,
                }),
                Kind::Send => {
                    let Some((token, buf, _)) = self.sends.remove(token as usize) else {
                        continue;
                    };
                    let result = if res >= 0 {
                        Ok(res as usize)
                    } else {
                        Err(errno(-res))
                    };
                    f(Event::Sent { token, result, buf });
                }
                Kind::Recv => match cqueue::buffer_select(flags) {
                    Some(bid) => {
                        let len = usize::try_from(res).unwrap_or(0);
                        f(Event::Received {
                            token,
                            result: Ok(self.bufs.filled(bid, len)),
                            more,
                        });
                        self.bufs.push(bid);
                    }
                    None => f(Event::Received {
                        token,
                        result: if res >= 0 { Ok(&[]) } else { Err(errno(-res)) },
                        more,
                    }),
                },
            }
        }
        self.bufs.publish();
        count
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        if self.outstanding == 0 {
            return;
        }
        // Cancel everything and wait for the last completions, so that no
        // operation outlives the memory it names.
        let entry = opcode::AsyncCancel2::new(types::CancelBuilder::any())
            .build()
            .user_data(encode(Kind::Cancel, 0));
        // SAFETY: the entry refers to no memory of ours.
        unsafe { self.push(&entry) };
        let deadline = Instant::now() + DROP_DRAIN;
        while self.outstanding > 0 && Instant::now() < deadline {
            if self
                .submit_and_wait(Some(Duration::from_millis(10)))
                .is_err()
            {
                break;
            }
            self.reap(|_| {});
        }
        if self.outstanding > 0 {
            // The kernel may still read a send buffer or write a receive
            // buffer: never give that memory back.
            self.bufs.leak = true;
            for slot in &mut self.sends.slots {
                if let Some((_, buf, _)) = slot.take() {
                    std::mem::forget(buf);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_data_round_trips() {
        for kind in [
            Kind::Accept,
            Kind::Recv,
            Kind::Send,
            Kind::Poll,
            Kind::Cancel,
        ] {
            for token in [0, 1, 0xdead_beef, MAX_TOKEN] {
                assert_eq!(decode(encode(kind, token)), Some((kind, token)));
            }
        }
        assert_eq!(decode(0), None);
        assert_eq!(decode(0xff << KIND_SHIFT), None);
    }

    #[test]
    #[should_panic(expected = "exceeds 56 bits")]
    fn oversized_token_is_refused() {
        encode(Kind::Recv, MAX_TOKEN + 1);
    }

    fn entry(ring: &BufRing, index: usize) -> (u64, u32, u16) {
        // SAFETY: (test) index < count; no kernel shares this ring.
        unsafe {
            let e = ring.entries.add(index);
            ((*e).addr, (*e).len, (*e).bid)
        }
    }

    fn published_tail(ring: &BufRing) -> u16 {
        // SAFETY: (test) entry 0's resv is the tail, accessed atomically.
        unsafe { AtomicU16::from_ptr(ptr::addr_of_mut!((*ring.entries).resv)) }
            .load(Ordering::Acquire)
    }

    #[test]
    fn buffer_ring_describes_every_buffer_once() {
        let ring = BufRing::new(8, 32);
        assert_eq!(
            published_tail(&ring),
            0,
            "nothing published before publish()"
        );
        ring.publish();
        assert_eq!(published_tail(&ring), 8);
        let base = ring.mem as u64;
        for i in 0..8 {
            let (addr, len, bid) = entry(&ring, i);
            assert_eq!(bid as usize, i);
            assert_eq!(len, 32);
            assert_eq!(addr, base + 32 * i as u64);
        }
    }

    #[test]
    fn recycled_buffers_go_to_the_tail_and_wrap() {
        let mut ring = BufRing::new(4, 16);
        ring.publish();
        // As if the kernel had consumed entries 0..4 (buffers 0..3), and the
        // caller returns buffers 2 and 0, then 1, 3, 2 over a wrap of the
        // u16 tail counter too.
        ring.push(2);
        ring.push(0);
        ring.publish();
        assert_eq!(published_tail(&ring), 6);
        assert_eq!(entry(&ring, 0).2, 2, "tail 4 lands on entry 0");
        assert_eq!(entry(&ring, 1).2, 0);
        ring.tail = u16::MAX;
        ring.push(1);
        ring.push(3);
        ring.publish();
        assert_eq!(published_tail(&ring), 1);
        assert_eq!(entry(&ring, 3).2, 1, "tail 65535 lands on entry 3");
        assert_eq!(entry(&ring, 0).2, 3, "the wrapped tail lands on entry 0");
        assert_eq!(entry(&ring, 0).0, ring.mem as u64 + 3 * 16);
    }

    #[test]
    fn filled_views_the_named_buffer() {
        let ring = BufRing::new(4, 16);
        // SAFETY: (test) writing buffer 2 as the kernel would, before any
        // borrow of it exists.
        unsafe { ptr::copy_nonoverlapping(b"hello".as_ptr(), ring.mem.add(32), 5) };
        assert_eq!(ring.filled(2, 5), b"hello");
        assert_eq!(ring.filled(3, 0), b"");
    }

    #[test]
    #[should_panic]
    fn filled_refuses_a_length_past_the_buffer() {
        let ring = BufRing::new(4, 16);
        let _ = ring.filled(0, 17);
    }

    #[test]
    fn send_slots_are_reused() {
        let mut slots = SendSlots::default();
        let a = slots.insert(7, vec![1], 0);
        let b = slots.insert(8, vec![2, 3], 1);
        assert_eq!(slots.in_flight(), 2);
        assert_eq!(slots.remove(a), Some((7, vec![1], 0)));
        assert!(slots.remove(a).is_none(), "a slot is removed once");
        let c = slots.insert(9, vec![], 0);
        assert_eq!(c, a, "the free slot is reused");
        assert_eq!(slots.get(b).map(|s| s.0), Some(8));
        assert_eq!(slots.in_flight(), 2);
    }
}

/// Tests with a real kernel ring (not under Miri, which cannot make the
/// system calls).
#[cfg(all(test, not(miri)))]
mod kernel_tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

    fn ring() -> Option<Ring> {
        match Ring::probe() {
            Ok(()) => Some(
                Ring::new(Config {
                    entries: 64,
                    buffers: 16,
                    buffer_size: 1024,
                })
                .expect("ring"),
            ),
            Err(why) => {
                eprintln!("skipping: io_uring unavailable here ({why})");
                None
            }
        }
    }

    /// Run the ring until `done` says so, at most 5 s.
    fn run_until(ring: &mut Ring, mut on: impl FnMut(Event<'_>), done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            ring.reap(&mut on);
            if done() {
                return;
            }
            assert!(Instant::now() < deadline, "timed out");
            ring.submit_and_wait(Some(Duration::from_millis(50)))
                .expect("submit");
        }
    }

    #[test]
    fn spinning_sees_a_completion_that_arrives_while_it_spins() {
        let Some(mut ring) = ring() else { return };
        let (mut a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        ring.poll_multi(b.as_raw_fd(), 7);
        let started = Instant::now();
        assert!(!ring.spin_for_completion(Duration::from_millis(2)).unwrap());
        assert!(
            started.elapsed() >= Duration::from_millis(2),
            "spun the budget"
        );
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            a.write_all(b"x").unwrap();
            a
        });
        assert!(ring.spin_for_completion(Duration::from_secs(5)).unwrap());
        let mut polled = 0;
        ring.reap(|e| {
            if let Event::Ready { token: 7, .. } = e {
                polled += 1;
            }
        });
        assert_eq!(polled, 1, "the readiness of `b`");
        drop(writer.join().unwrap());
    }

    #[test]
    fn accepts_receives_and_sends_over_tcp() {
        let Some(mut ring) = ring() else { return };
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        ring.accept_multi(listener.as_raw_fd(), 1);
        let mut clients: Vec<TcpStream> = (0..3)
            .map(|_| TcpStream::connect(listener.local_addr().unwrap()).unwrap())
            .collect();
        let accepted = std::cell::RefCell::new(Vec::new());
        run_until(
            &mut ring,
            |e| {
                if let Event::Accepted {
                    token: 1,
                    result,
                    more,
                } = e
                {
                    assert!(more, "multishot accept goes on");
                    accepted.borrow_mut().push(result.expect("accept"));
                }
            },
            || accepted.borrow().len() == 3,
        );
        let server_side = accepted.into_inner();
        for (i, fd) in server_side.iter().enumerate() {
            ring.recv_multi(fd.as_raw_fd(), 10 + i as u64);
        }
        // 3000 bytes through 1024-byte buffers: several completions each.
        for (i, c) in clients.iter_mut().enumerate() {
            c.write_all(&vec![b'a' + i as u8; 3000]).unwrap();
        }
        let got = std::cell::RefCell::new(vec![Vec::new(); 3]);
        run_until(
            &mut ring,
            |e| {
                if let Event::Received {
                    token,
                    result,
                    more,
                } = e
                {
                    assert!(more);
                    let data = result.expect("recv");
                    assert!(data.len() <= 1024);
                    got.borrow_mut()[(token - 10) as usize].extend_from_slice(data);
                }
            },
            || got.borrow().iter().all(|g| g.len() == 3000),
        );
        for (i, g) in got.borrow().iter().enumerate() {
            assert!(g.iter().all(|&b| b == b'a' + i as u8));
        }
        // Send back through owned buffers.
        for (i, fd) in server_side.iter().enumerate() {
            ring.send(
                fd.as_raw_fd(),
                20 + i as u64,
                format!("reply {i}").into_bytes(),
                0,
            );
        }
        assert_eq!(ring.sends_in_flight(), 3);
        let sent = std::cell::Cell::new(0);
        run_until(
            &mut ring,
            |e| {
                if let Event::Sent { token, result, buf } = e {
                    assert_eq!(result.unwrap(), buf.len());
                    assert_eq!(buf, format!("reply {}", token - 20).into_bytes());
                    sent.set(sent.get() + 1);
                }
            },
            || sent.get() == 3,
        );
        assert_eq!(ring.sends_in_flight(), 0);
        for (i, c) in clients.iter_mut().enumerate() {
            let mut buf = vec![0; 7];
            c.read_exact(&mut buf).unwrap();
            assert_eq!(buf, format!("reply {i}").into_bytes());
        }
        // End of stream ends the receive.
        drop(clients.remove(0));
        let ended = std::cell::Cell::new(false);
        run_until(
            &mut ring,
            |e| {
                if let Event::Received {
                    token: 10,
                    result,
                    more,
                } = e
                {
                    assert!(result.expect("eof").is_empty());
                    assert!(!more);
                    ended.set(true);
                }
            },
            || ended.get(),
        );
    }

    #[test]
    fn a_send_can_start_past_an_offset() {
        let Some(mut ring) = ring() else { return };
        let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        ring.send(a.as_raw_fd(), 5, b"skipped|kept".to_vec(), 8);
        let done = std::cell::Cell::new(false);
        run_until(
            &mut ring,
            |e| {
                if let Event::Sent { result, buf, .. } = e {
                    assert_eq!(result.unwrap(), 4);
                    assert_eq!(buf, b"skipped|kept");
                    done.set(true);
                }
            },
            || done.get(),
        );
        let mut got = [0; 4];
        b.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"kept");
    }

    #[test]
    fn a_send_larger_than_the_socket_buffer_completes_once_whole() {
        let Some(mut ring) = ring() else { return };
        let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        let payload: Vec<u8> = (0..4 << 20).map(|i: u32| (i % 251) as u8).collect();
        ring.send(a.as_raw_fd(), 6, payload.clone(), 0);
        ring.submit().unwrap();
        let reader = std::thread::spawn(move || {
            let mut got = vec![0; 4 << 20];
            b.read_exact(&mut got).unwrap();
            got
        });
        let completions = std::cell::Cell::new(0);
        run_until(
            &mut ring,
            |e| {
                if let Event::Sent { result, buf, .. } = e {
                    assert_eq!(result.unwrap(), buf.len(), "one completion, all sent");
                    completions.set(completions.get() + 1);
                }
            },
            || completions.get() == 1,
        );
        assert!(reader.join().unwrap() == payload);
    }

    #[test]
    fn running_out_of_buffers_ends_the_receive_with_enobufs() {
        let Some(mut ring) = ring() else { return };
        let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        ring.recv_multi(a.as_raw_fd(), 3);
        let mut got = Vec::new();
        let mut ended_with = None;
        // 16 buffers of 1 KiB; keep writing while not reaping, so the
        // kernel runs out, then reap everything.
        for round in 0..64u8 {
            b.write_all(&[round; 1024]).unwrap();
            ring.submit_and_wait(Some(Duration::from_millis(1)))
                .unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while ended_with.is_none() && Instant::now() < deadline {
            ring.reap(|e| {
                if let Event::Received { result, more, .. } = e {
                    match result {
                        Ok(d) => got.extend_from_slice(d),
                        Err(e) => ended_with = Some((e.raw_os_error(), more)),
                    }
                }
            });
            ring.submit_and_wait(Some(Duration::from_millis(10)))
                .unwrap();
        }
        assert_eq!(ended_with, Some((Some(libc::ENOBUFS), false)));
        // What was received is a prefix of what was sent, in order; the
        // rest is still in the socket for the next receive.
        assert!(!got.is_empty() && got.len() % 1024 == 0);
        for (i, chunk) in got.chunks(1024).enumerate() {
            assert!(chunk.iter().all(|&x| x == i as u8));
        }
    }

    #[test]
    fn cancel_ends_a_receive_and_drop_waits_for_outstanding_work() {
        let Some(mut ring) = ring() else { return };
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        ring.recv_multi(a.as_raw_fd(), 4);
        ring.poll_multi(a.as_raw_fd(), 5);
        ring.submit().unwrap();
        ring.cancel_recv(4);
        let ended = std::cell::Cell::new(false);
        run_until(
            &mut ring,
            |e| {
                if let Event::Received {
                    token: 4,
                    result,
                    more,
                } = e
                {
                    assert!(!more);
                    assert_eq!(result.unwrap_err().raw_os_error(), Some(libc::ECANCELED));
                    ended.set(true);
                }
            },
            || ended.get(),
        );
        assert_eq!(ring.outstanding(), 1, "the poll is still armed");
        drop(ring);
    }
}
