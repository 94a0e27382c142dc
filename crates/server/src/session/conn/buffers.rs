//! Connection buffers: a connection holds none until it first has bytes to read, and
//! gives them back when it holds nothing, through a small per-worker cache.
//!
//! The promise they serve: with `-m M` the process stays under 1.05 M + 32 MiB, with
//! up to `-c` idle connections; a buffer kept by each idle connection (16 KiB to read
//! into, 16 KiB to compose replies in) would cost 160 MiB at 5 000 of them.
//!
//! How, and why this way:
//! - A connection takes its read and write buffers the first time a read needs space
//!   (`Conn::read_space`, whose room-making branch already runs then): one never used
//!   costs only the `Conn`.
//! - Giving the buffers back after every turn that leaves a connection empty, as
//!   memcached 1.6 does with its per-thread read-buffer cache, would add a take and a
//!   give (a cache pop and push, 60 to 80 instructions with the thread-local access) to
//!   every request of a client that waits for each reply: the commonest shape, whose
//!   instructions per request are measured (`scripts/callgrind-per-request`). So a
//!   connection keeps its buffers between turns while its worker holds at most a
//!   budget of buffer memory ([`attach`]: 4 MiB over all workers, 256 KiB at least
//!   each, 128 connections' buffers at `-t 2`). The check at the end of a turn is one
//!   thread-local flag, read where the turn already checks the buffers' sizes.
//! - Over the budget, a connection gives its buffers back at the end of every turn
//!   that leaves it empty: memcached's scheme, paid only when there are many clients.
//!   Given back, a buffer goes to the worker's cache (at most [`CACHE_MAX`] of each
//!   kind) or is freed; taken, it comes from the cache, so with many connections the
//!   requests take and give back cached buffers rather than call malloc and free.
//! - Once a second the worker also takes the buffers of connections that have been
//!   idle since the last tick (`io/worker.rs`, `BufferScan`), so that the connections
//!   that stayed under the budget do not keep theirs for ever either.
//!
//! So a worker holds at most its budget (counted without the cache), its cache and the
//! buffers of the connections that have input or output pending at that moment.
//!
//! A connection that goes quiet with half a request buffered keeps only that half: the
//! scan copies its unparsed bytes (under [`REMNANT_MAX`]) into an allocation of their
//! size and gives both buffers back ([`remnant`]); the next read takes a buffer again
//! and copies them in front. Many clients that stall mid-request (a slow link, or one
//! that means harm) then cost their bytes, not 32 KiB each.
//!
//! The bytes held, by connections and cache, read and write buffers apart, are counted
//! per worker in plain thread-local numbers, changed only where a buffer is allocated,
//! freed, cached or found grown at the end of a turn (never on a request that reuses
//! what it has), and published to the worker's `WorkerStats::conn` gauges for `stats`
//! once a second.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::stats::{ConnGauges, WorkerStats};

/// The size of a read buffer, and of a write buffer when taken.
pub(super) const CHUNK: usize = 16 * 1024;
/// Write buffers that grew past this are freed when given back, not cached.
pub(super) const KEEP: usize = 64 * 1024;
/// Buffers of each kind (read, write) a worker keeps for the next connection. A turn
/// gives back what it took before the next connection's turn, so a few cover the
/// connections that take and give in turn; more would only sit idle (256 KiB a worker
/// at 8, beside each idle connection's 0).
pub const CACHE_MAX: usize = 8;
/// Buffer memory all workers' connections may keep between turns: 128 connections'
/// read and write buffers. Everything outside the store shares 32 MiB of `-m`'s promise
/// (`docs/design.md`, "The memory budget"), so this stays small.
pub const TOTAL_BUDGET_BYTES: usize = 4 << 20;
/// The least any one worker may keep.
pub const MIN_WORKER_BUDGET_BYTES: usize = 256 << 10;
/// Unparsed bytes of an idle connection kept in an allocation of their own, rather than
/// in the read buffer they arrived in (half a request; a request line is at most 2 KiB,
/// and more means a data block on its way, which keeps its buffer).
pub const REMNANT_MAX: usize = CHUNK / 2;
/// A thread that never called [`attach`] (tests, fuzzing): as a worker at `-t 4`.
const DEFAULT_BUDGET: i64 = (TOTAL_BUDGET_BYTES / 4) as i64;

thread_local! {
    /// The worker holds more than its budget: connections give their buffers back at
    /// the end of every turn that empties them. Apart from the pool, so that reading
    /// it is one load (a `const` thread-local with no destructor to register).
    static TIGHT: Cell<bool> = const { Cell::new(false) };
    static POOL: RefCell<Pool> = const { RefCell::new(Pool::new()) };
}

/// One kind of buffer (read or write) of a worker.
#[derive(Clone, Copy, Debug)]
struct Tally {
    /// Bytes (capacities) held by connections or cached.
    bytes: i64,
    /// Of which in the cache.
    free: i64,
}

impl Tally {
    const ZERO: Tally = Tally { bytes: 0, free: 0 };
}

struct Pool {
    /// Read buffers of exactly [`CHUNK`] bytes (length and capacity).
    reads: Vec<Vec<u8>>,
    /// Empty write buffers of [`CHUNK`] to [`KEEP`] bytes' capacity.
    writes: Vec<Vec<u8>>,
    read: Tally,
    write: Tally,
    /// Read buffers in existence, held by connections or cached. Not kept for write
    /// buffers: one may be freed by the io_uring backend after its last send, unseen here.
    read_count: i64,
    budget: i64,
    gauge: Option<Arc<WorkerStats>>,
}

impl Pool {
    const fn new() -> Pool {
        Pool {
            reads: Vec::new(),
            writes: Vec::new(),
            read: Tally::ZERO,
            write: Tally::ZERO,
            read_count: 0,
            budget: DEFAULT_BUDGET,
            gauge: None,
        }
    }

    /// Bytes held by connections, cache aside.
    fn in_use(&self) -> i64 {
        self.read.bytes - self.read.free + self.write.bytes - self.write.free
    }

    /// Only what connections hold counts against the budget: a full cache alone must
    /// not make every request take and give back buffers.
    fn retighten(&self) {
        TIGHT.set(self.in_use() > self.budget);
    }

    /// The figures, to the worker's gauges: once a second (the worker's buffer scan),
    /// not at every take and give, which past the budget come with every turn.
    fn publish(&self) {
        if let Some(stats) = &self.gauge {
            let g: &ConnGauges = &stats.conn;
            let level = |gauge: &AtomicU64, v: i64| gauge.store(v.max(0) as u64, Ordering::Relaxed);
            level(&g.read_buffers, self.read_count);
            level(&g.read_bytes, self.read.bytes);
            level(&g.read_free_bytes, self.read.free);
            level(&g.write_bytes, self.write.bytes);
            level(&g.write_free_bytes, self.write.free);
        }
    }
}

fn with_pool<R>(f: impl FnOnce(&mut Pool) -> R) -> Option<R> {
    // `try_with`: a connection dropped while its thread exits finds no pool.
    POOL.try_with(|p| f(&mut p.borrow_mut())).ok()
}

/// Make the calling thread a worker that publishes its buffer bytes to `stats`,
/// keeping at most its share of [`TOTAL_BUDGET_BYTES`] among `workers`.
pub fn attach(stats: Arc<WorkerStats>, workers: usize) {
    let budget = (TOTAL_BUDGET_BYTES / workers.max(1)).max(MIN_WORKER_BUDGET_BYTES);
    with_pool(|p| {
        p.budget = budget as i64;
        p.gauge = Some(stats);
        p.retighten();
        p.publish();
    });
}

/// Publish this worker's buffer figures to its `stats` gauges (the worker calls it
/// once a second).
pub fn publish() {
    with_pool(|p| p.publish());
}

/// Whether connections should give their buffers back at the end of each turn.
#[inline(always)]
pub(super) fn tight() -> bool {
    TIGHT.get()
}

/// Bytes this thread's connections and cache hold, read and write buffers together.
#[must_use]
pub fn held_bytes() -> usize {
    with_pool(|p| (p.read.bytes + p.write.bytes).max(0) as usize).unwrap_or(0)
}

/// Of [`held_bytes`], what is in this thread's cache.
#[must_use]
pub fn cached_bytes() -> usize {
    with_pool(|p| (p.read.free + p.write.free).max(0) as usize).unwrap_or(0)
}

/// A read buffer of [`CHUNK`] bytes.
pub(super) fn take_read() -> Vec<u8> {
    with_pool(|p| {
        if let Some(buf) = p.reads.pop() {
            p.read.free -= buf.capacity() as i64;
            p.retighten();
            return buf;
        }
        p.read_count += 1;
        p.read.bytes += CHUNK as i64;
        p.retighten();
        vec![0; CHUNK]
    })
    .unwrap_or_else(|| vec![0; CHUNK])
}

/// An empty write buffer of at least [`CHUNK`] bytes' capacity.
pub(super) fn take_write() -> Vec<u8> {
    with_pool(|p| {
        if let Some(buf) = p.writes.pop() {
            p.write.free -= buf.capacity() as i64;
            p.retighten();
            return buf;
        }
        p.write.bytes += CHUNK as i64;
        p.retighten();
        Vec::with_capacity(CHUNK)
    })
    .unwrap_or_else(|| Vec::with_capacity(CHUNK))
}

/// An idle connection's unparsed `bytes`, in a read buffer of their size (counted as
/// held), for it to keep in place of the one they arrived in.
pub(super) fn remnant(bytes: &[u8]) -> Vec<u8> {
    let buf = bytes.to_vec();
    with_pool(|p| {
        p.read_count += 1;
        p.read.bytes += buf.capacity() as i64;
        p.retighten();
    });
    buf
}

/// Take back a connection's read buffer (counted as held): cached, or freed.
pub(super) fn give_read(buf: Vec<u8>) {
    if buf.capacity() == 0 {
        return;
    }
    with_pool(|p| {
        let cap = buf.capacity() as i64;
        if buf.len() == CHUNK && buf.capacity() == CHUNK && p.reads.len() < CACHE_MAX {
            p.read.free += cap;
            p.reads.push(buf);
        } else {
            p.read_count -= 1;
            p.read.bytes -= cap;
        }
        p.retighten();
    });
}

/// Take back a connection's write buffer (counted as held): cached, or freed.
pub(super) fn give_write(mut buf: Vec<u8>) {
    if buf.capacity() == 0 {
        return;
    }
    with_pool(|p| {
        let cap = buf.capacity();
        if (CHUNK..=KEEP).contains(&cap) && p.writes.len() < CACHE_MAX {
            buf.clear();
            p.write.free += cap as i64;
            p.writes.push(buf);
        } else {
            p.write.bytes -= cap as i64;
        }
        p.retighten();
    });
}

/// A connection's read buffer grew or shrank by `delta` bytes.
pub(super) fn adjust_read(delta: i64) {
    with_pool(|p| {
        p.read.bytes += delta;
        p.retighten();
    });
}

/// A connection's write buffers grew or shrank by `delta` bytes (or were freed
/// elsewhere: the io_uring backend's send buffer).
pub(super) fn adjust_write(delta: i64) {
    with_pool(|p| {
        p.write.bytes += delta;
        p.retighten();
    });
}
