//! Zero-copy replies for large values: the value is not copied into the connection's
//! output buffer but pinned where it is stored (`storage::ValuePin`), and one vectored
//! send takes the reply from both places.
//!
//! ```text
//!   output buffer   VALUE big 0 65536\r\n | \r\nVALUE small 0 3\r\nabc\r\nEND\r\n
//!                                         ^ at
//!   splices         (at, pin of big's 65536 value bytes in its segment)
//!   sendmsg iov     [ buffer[wpos..at], segment bytes, buffer[at..] ]
//! ```
//!
//! Pins last one event-loop turn. The epoll worker executes a connection's requests,
//! sends, and then [`materialize`]s: whatever the socket did not take is copied into
//! the output buffer and every pin is given back. So a slow reader never holds a
//! segment, and eviction only ever meets a pin for the microseconds of one send.
//!
//! The values of get replies over TCP (or a UNIX socket) are spliced, whichever the
//! protocol: text `get`/`gets`/`gat`/`gats`, meta `mg` with `v`, binary `GET`/`GETK`/
//! `GAT`/`GATK` and their quiet forms (`Exec::value_pin`, `Exec::put_value`). Values
//! shorter than `--zero-copy-min` (by default 16 KiB on epoll, 32 KiB on io_uring) are
//! copied, which `docs/perf-notes.md` shows is cheaper. Over UDP every value is copied.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::{self, IoSlice};

use storage::{Store, ValuePin};

use crate::config::{IoBackend, Settings};
use crate::sys::MAX_SEND_SLICES;

/// Slices one [`Splices::send`] call offers at most.
const SEND_SLICES: usize = if MAX_SEND_SLICES < 128 {
    MAX_SEND_SLICES
} else {
    128
};

/// The spliced values of the connection being served, in output order.
#[derive(Default)]
pub struct Splices {
    list: VecDeque<Splice>,
    /// Bytes of the listed values not sent yet.
    bytes: usize,
}

struct Splice {
    /// Output buffer offset the value goes in front of.
    at: usize,
    pin: ValuePin,
    /// Bytes of the value already sent.
    sent: usize,
}

/// The parts of a connection's output buffer that sending moves.
pub struct Output<'a> {
    pub buf: &'a mut Vec<u8>,
    /// Bytes of `buf` already sent.
    pub pos: &'a mut usize,
    /// memcached's last flush point, an offset in `buf` (see `Conn`).
    pub flush_mark: &'a mut usize,
}

impl Splices {
    /// A worker on `backend`: its splices when `--zero-copy-min` is on for it, and
    /// the value length from which gets splice (`Exec::splice_min`; `usize::MAX`
    /// when off).
    pub fn for_worker(
        settings: &Settings,
        backend: IoBackend,
    ) -> (Option<RefCell<Splices>>, usize) {
        match settings.zero_copy_min_for(backend) {
            Some(min) => (Some(RefCell::new(Splices::default())), min),
            None => (None, usize::MAX),
        }
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Bytes of spliced values not sent yet: output that is not in the buffer.
    #[inline]
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Add a value to go in front of output offset `at` (after everything listed).
    pub fn push(&mut self, at: usize, pin: ValuePin) {
        debug_assert!(self.list.back().is_none_or(|s| s.at <= at));
        self.bytes += pin.len();
        self.list.push_back(Splice { at, pin, sent: 0 });
    }

    /// The output was cut back to `len` bytes: forget the values placed after it.
    pub fn truncate(&mut self, len: usize, store: &Store) {
        while self.list.back().is_some_and(|s| s.at > len) {
            let s = self.list.pop_back().expect("checked");
            self.bytes -= s.pin.len() - s.sent;
            store.unpin(s.pin);
        }
    }

    /// Give every pin back, sending nothing (the connection is closing).
    pub fn release(&mut self, store: &Store) {
        for s in self.list.drain(..) {
            store.unpin(s.pin);
        }
        self.bytes = 0;
    }

    /// Send `out` with the values spliced in, one vectored `send` after another, until
    /// everything is sent or the socket takes less than offered. Returns the bytes
    /// sent; `WouldBlock` ends the sending without an error.
    pub fn send(
        &mut self,
        out: Output<'_>,
        store: &Store,
        mut send: impl FnMut(&[IoSlice<'_>]) -> io::Result<usize>,
    ) -> io::Result<usize> {
        let mut total = 0;
        while *out.pos < out.buf.len() || !self.list.is_empty() {
            let (offered, sent) = {
                // On the stack: no allocation per send. A turn pins at most 1 MiB, so
                // this is every value but the smallest ones; the rest go next time round.
                let mut iov = [IoSlice::new(&[]); SEND_SLICES];
                let mut n = 0;
                let mut pos = *out.pos;
                for s in &self.list {
                    if n + 2 > SEND_SLICES {
                        break;
                    }
                    if s.at > pos {
                        iov[n] = IoSlice::new(&out.buf[pos..s.at]);
                        n += 1;
                        pos = s.at;
                    }
                    iov[n] = IoSlice::new(&store.pinned(&s.pin)[s.sent..]);
                    n += 1;
                }
                if pos < out.buf.len() && n < SEND_SLICES {
                    iov[n] = IoSlice::new(&out.buf[pos..]);
                    n += 1;
                }
                let iov = &iov[..n];
                (iov.iter().map(|s| s.len()).sum::<usize>(), send(iov))
            };
            let n = match sent {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            total += n;
            self.advance(out.buf.len(), out.pos, n, store);
            if n < offered {
                break;
            }
        }
        if *out.pos == out.buf.len() && self.list.is_empty() {
            out.buf.clear();
            *out.pos = 0;
            *out.flush_mark = 0;
        }
        Ok(total)
    }

    /// Record that `n` more bytes were sent, in output order: buffer bytes move `pos`,
    /// value bytes the value's `sent`, and a value sent whole is unpinned.
    fn advance(&mut self, buf_len: usize, pos: &mut usize, mut n: usize, store: &Store) {
        while n > 0 {
            let next = self.list.front().map_or(buf_len, |s| s.at);
            if *pos < next {
                let k = n.min(next - *pos);
                *pos += k;
                n -= k;
                continue;
            }
            let s = self.list.front_mut().expect("more bytes sent than offered");
            let k = n.min(s.pin.len() - s.sent);
            s.sent += k;
            self.bytes -= k;
            n -= k;
            if s.sent == s.pin.len() {
                let s = self.list.pop_front().expect("checked");
                store.unpin(s.pin);
            }
        }
    }

    /// After sending: copy what is left of the values into the output buffer, in
    /// place, and give every pin back. The buffer is rebuilt from its unsent part, so
    /// its offsets (`pos`, `flush_mark`) move with it.
    pub fn materialize(&mut self, out: Output<'_>, store: &Store) {
        if self.list.is_empty() {
            return;
        }
        let start = *out.pos;
        let mut rebuilt = Vec::with_capacity(out.buf.len() - start + self.bytes);
        let mut pos = start;
        let mut before_mark = 0;
        for s in self.list.drain(..) {
            rebuilt.extend_from_slice(&out.buf[pos..s.at]);
            pos = s.at;
            let rest = &store.pinned(&s.pin)[s.sent..];
            if s.at <= *out.flush_mark {
                before_mark += rest.len();
            }
            rebuilt.extend_from_slice(rest);
            store.unpin(s.pin);
        }
        rebuilt.extend_from_slice(&out.buf[pos..]);
        *out.flush_mark = out.flush_mark.saturating_sub(start) + before_mark;
        *out.buf = rebuilt;
        *out.pos = 0;
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use storage::StoreMode;

    fn store_with(values: &[(&str, Vec<u8>)]) -> Store {
        let store = Store::builder().memory_limit(8 << 20).build().unwrap();
        for (k, v) in values {
            store.store(StoreMode::Set, k.as_bytes(), 0, 0, v, 1);
        }
        store
    }

    fn pin(store: &Store, key: &str) -> ValuePin {
        store
            .get(key.as_bytes(), 1, |it| store.pin(it.origin, it.value))
            .hit()
            .flatten()
            .expect("pinned")
    }

    /// `head` `a`'s value `mid` `b`'s value `tail`, as a reply with two spliced values.
    fn compose(store: &Store, splices: &mut Splices) -> (Vec<u8>, Vec<u8>) {
        let mut buf = b"HEAD|".to_vec();
        splices.push(buf.len(), pin(store, "a"));
        buf.extend_from_slice(b"|MID|");
        splices.push(buf.len(), pin(store, "b"));
        buf.extend_from_slice(b"|TAIL");
        let mut whole = b"HEAD|".to_vec();
        whole.extend(value(store, "a"));
        whole.extend_from_slice(b"|MID|");
        whole.extend(value(store, "b"));
        whole.extend_from_slice(b"|TAIL");
        (buf, whole)
    }

    fn value(store: &Store, key: &str) -> Vec<u8> {
        store
            .get(key.as_bytes(), 1, |it| it.value.to_vec())
            .hit()
            .unwrap()
    }

    /// A socket that takes at most `room` bytes of `iov` into `wire`; returns how many.
    fn take(iov: &[IoSlice<'_>], room: usize, wire: &mut Vec<u8>) -> usize {
        let mut left = room;
        for s in iov {
            let k = s.len().min(left);
            wire.extend_from_slice(&s[..k]);
            left -= k;
        }
        room - left
    }

    fn sample_store() -> Store {
        store_with(&[("a", vec![b'a'; 3000]), ("b", vec![b'b'; 5000])])
    }

    #[test]
    fn sends_everything_in_order_a_few_bytes_at_a_time() {
        let store = sample_store();
        for step in [1, 7, 999, 3000, 100_000] {
            let mut splices = Splices::default();
            let (mut buf, whole) = compose(&store, &mut splices);
            assert_eq!(splices.bytes(), 8000);
            let (mut pos, mut mark) = (0, buf.len());
            let mut wire = Vec::new();
            let mut sent = 0;
            // A socket that takes at most `step` bytes per call: a short send ends a
            // `send`, and the next writable event would call it again.
            while !(splices.is_empty() && buf.is_empty()) {
                let out = Output {
                    buf: &mut buf,
                    pos: &mut pos,
                    flush_mark: &mut mark,
                };
                sent += splices
                    .send(out, &store, |iov| Ok(take(iov, step, &mut wire)))
                    .unwrap();
            }
            assert_eq!(sent, whole.len(), "step {step}");
            assert_eq!(wire, whole, "step {step}");
            assert!(splices.is_empty());
            assert_eq!(splices.bytes(), 0);
            assert!(buf.is_empty() && pos == 0 && mark == 0, "buffer reset");
        }
    }

    #[test]
    fn a_full_socket_leaves_the_rest_copied_in_place() {
        let store = sample_store();
        for taken in [0, 3, 5, 6, 2000, 3005, 3010, 8009, 8014] {
            let mut splices = Splices::default();
            let (mut buf, whole) = compose(&store, &mut splices);
            let (mut pos, mut mark) = (0, buf.len());
            let mut wire = Vec::new();
            let mut calls = 0;
            splices
                .send(
                    Output {
                        buf: &mut buf,
                        pos: &mut pos,
                        flush_mark: &mut mark,
                    },
                    &store,
                    |iov| {
                        calls += 1;
                        if calls > 1 {
                            return Err(io::ErrorKind::WouldBlock.into());
                        }
                        Ok(take(iov, taken, &mut wire))
                    },
                )
                .unwrap();
            splices.materialize(
                Output {
                    buf: &mut buf,
                    pos: &mut pos,
                    flush_mark: &mut mark,
                },
                &store,
            );
            assert!(splices.is_empty() && splices.bytes() == 0);
            wire.extend_from_slice(&buf[pos..]);
            assert_eq!(wire, whole, "{taken} bytes taken");
            assert_eq!(mark, buf.len(), "the flush mark stays at the end");
        }
    }

    #[test]
    fn pins_are_given_back_so_values_can_change_again() {
        // An incr rewrites a number in place only when its segment holds no pin.
        let mut five = b"5".to_vec();
        five.resize(100, b' ');
        let store = store_with(&[("a", five.clone()), ("b", vec![b'b'; 10])]);
        let mut splices = Splices::default();
        let (mut buf, _) = compose(&store, &mut splices);
        let (mut pos, mut mark) = (0, buf.len());
        splices.materialize(
            Output {
                buf: &mut buf,
                pos: &mut pos,
                flush_mark: &mut mark,
            },
            &store,
        );
        let mut expected = b"HEAD|".to_vec();
        expected.extend_from_slice(&five);
        expected.extend_from_slice(b"|MID|bbbbbbbbbb|TAIL");
        assert_eq!(buf, expected);
        // Truncation and release give pins back too.
        splices.push(buf.len(), pin(&store, "a"));
        splices.push(buf.len() + 2, pin(&store, "b"));
        splices.truncate(buf.len() + 1, &store);
        assert_eq!(splices.bytes(), 100);
        splices.release(&store);
        assert!(splices.is_empty() && splices.bytes() == 0);
        assert_eq!(
            store.incr_decr(b"a", 1, true, 1),
            storage::ArithOutcome::Value(6)
        );
    }
}
