//! How a connection takes, counts and gives back its buffers: the `Conn` side of the
//! worker's buffer pool (`buffers.rs`, which says why it works this way).

use super::buffers;
use super::{Conn, IDLE_BUFFER_KEEP_BYTES, READ_CHUNK_BYTES};

impl Conn {
    /// [`Conn::read_space`] found less than a read's worth of room: take buffers, or
    /// compact the buffer, or grow it.
    #[cold]
    #[inline(never)]
    pub(super) fn make_read_room(&mut self) {
        if self.rbuf.len() < READ_CHUNK_BYTES {
            // None, or the remnant of half a request kept while idle.
            self.take_buffers();
            return;
        }
        if self.rpos > 0 {
            self.rbuf.copy_within(self.rpos..self.rlen, 0);
            self.rlen -= self.rpos;
            self.rpos = 0;
        }
        if self.rbuf.len() - self.rlen < READ_CHUNK_BYTES {
            // Double, but never past what the read limit can use.
            let cap = self.read_limit() + READ_CHUNK_BYTES;
            let grow = self.rbuf.len().max(READ_CHUNK_BYTES);
            let new_len = (self.rbuf.len() + grow).min(cap.max(self.rlen + READ_CHUNK_BYTES));
            self.rbuf.resize(new_len, 0);
        }
    }

    /// Call at the end of every turn: counts what the buffers grew to (`buffers.rs`),
    /// and if the connection holds nothing, gives them back when the worker holds more
    /// than its budget or they grew past the size kept (a big value). The check is
    /// inlined at the call: it runs on every turn and nearly always finds nothing, so a
    /// call would cost more than the check.
    #[inline(always)]
    pub fn shrink_idle(&mut self) {
        if self.rbuf.capacity() != self.acc_read
            || self.wbuf.capacity() != self.acc_write
            || buffers::tight()
        {
            self.idle_buffers(None);
        }
    }

    /// [`Conn::shrink_idle`] for a connection whose replies go out in a send buffer of
    /// the backend's (`out`, swapped with the connection's by [`Conn::take_output`]),
    /// counted and given back with the connection's own; none may be in flight.
    #[inline(always)]
    pub fn shrink_idle_with(&mut self, out: &mut Vec<u8>) {
        if self.rbuf.capacity() != self.acc_read
            || self.wbuf.capacity() + out.capacity() != self.acc_write
            || buffers::tight()
        {
            self.idle_buffers(Some(out));
        }
    }

    /// What the once-a-second scan does to a connection that stayed idle: give every
    /// buffer back if it holds nothing (no input, no output, no multi-get or dump
    /// paused); with half a request and nothing else, keep only the request's bytes
    /// (`buffers.rs`, [`buffers::REMNANT_MAX`]). Replies waiting for the client keep
    /// their buffers. Returns whether anything was given back.
    pub fn release_idle(&mut self, out: Option<&mut Vec<u8>>) -> bool {
        let extra = out.as_ref().map_or(0, |o| o.capacity());
        if self.wpos != self.wbuf.len() || self.paused_get.is_some() || self.dump.is_some() {
            return false;
        }
        let pending = self.rlen - self.rpos;
        if pending == 0 {
            if self.rbuf.capacity() + self.wbuf.capacity() + extra == 0 {
                return false;
            }
            self.release_buffers(out);
            return true;
        }
        if pending > buffers::REMNANT_MAX || self.rbuf.capacity() == pending {
            // A data block on its way keeps its read buffer, and a remnant is one
            // already; the write buffers, with no reply in them, go back.
            if self.wbuf.capacity() + extra == 0 {
                return false;
            }
            self.settle(extra);
            self.give_back_writes(out);
            return true;
        }
        let remnant = buffers::remnant(&self.rbuf[self.rpos..self.rlen]);
        self.release_buffers(out);
        self.acc_read = remnant.capacity();
        self.rbuf = remnant;
        self.rlen = pending;
        true
    }

    /// Nothing buffered that a later turn needs.
    fn is_empty(&self) -> bool {
        !self.has_input()
            && self.wpos == self.wbuf.len()
            && self.paused_get.is_none()
            && self.dump.is_none()
    }

    #[cold]
    #[inline(never)]
    fn idle_buffers(&mut self, out: Option<&mut Vec<u8>>) {
        let extra = out.as_ref().map_or(0, |o| o.capacity());
        let big = self.rbuf.capacity() > IDLE_BUFFER_KEEP_BYTES
            || self.wbuf.capacity() > IDLE_BUFFER_KEEP_BYTES
            || extra > IDLE_BUFFER_KEEP_BYTES;
        if (big || buffers::tight()) && self.is_empty() {
            self.release_buffers(out);
        } else {
            self.settle(extra);
        }
    }

    /// Count in the worker's total what the buffers hold now (`extra`: the
    /// backend's send buffer).
    pub(super) fn settle(&mut self, extra: usize) {
        let read = self.rbuf.capacity();
        if read != self.acc_read {
            buffers::adjust_read(read as i64 - self.acc_read as i64);
            self.acc_read = read;
        }
        let write = self.wbuf.capacity() + extra;
        if write != self.acc_write {
            buffers::adjust_write(write as i64 - self.acc_write as i64);
            self.acc_write = write;
        }
    }

    /// Take a read and a write buffer from the worker's cache (`read_space` with none,
    /// or with only the remnant of half a request, which moves to the front of the new
    /// read buffer).
    #[cold]
    #[inline(never)]
    fn take_buffers(&mut self) {
        let pending = self.rlen - self.rpos;
        debug_assert!(pending < buffers::CHUNK);
        let mut rbuf = buffers::take_read();
        rbuf[..pending].copy_from_slice(&self.rbuf[self.rpos..self.rlen]);
        let old = std::mem::replace(&mut self.rbuf, rbuf);
        self.rpos = 0;
        self.rlen = pending;
        // The remnant is counted as held (`acc_read`), and leaves that count as given.
        self.acc_read = self.acc_read - old.capacity() + self.rbuf.capacity();
        buffers::give_read(old);
        if self.wbuf.capacity() == 0 {
            self.wbuf = buffers::take_write();
            self.acc_write += self.wbuf.capacity();
        }
    }

    /// Give the buffers (and the backend's send buffer `out`) back to the worker's
    /// cache; the connection must hold nothing.
    fn release_buffers(&mut self, out: Option<&mut Vec<u8>>) {
        let extra = out.as_ref().map_or(0, |o| o.capacity());
        self.settle(extra);
        buffers::give_read(std::mem::take(&mut self.rbuf));
        self.rpos = 0;
        self.rlen = 0;
        self.acc_read = 0;
        self.give_back_writes(out);
    }

    /// Give the write buffers back (settled first), with no reply in them.
    fn give_back_writes(&mut self, out: Option<&mut Vec<u8>>) {
        buffers::give_write(std::mem::take(&mut self.wbuf));
        self.wpos = 0;
        self.flush_mark = 0;
        if let Some(out) = out {
            buffers::give_write(std::mem::take(out));
        }
        self.acc_write = 0;
    }
}
