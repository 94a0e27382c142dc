//! `watch`: memcached's log streams (logger.c), sent to connections that asked.
//!
//! ```text
//!  worker threads                       logger thread (logger.rs)
//!  --------------                       -------------------------
//!  event site: wants(bit)?  --no-->  nothing more (one relaxed load)
//!      | yes
//!      v
//!  this thread's Queue  (bounded:   -->  every few ms: swap each queue out,
//!  worker_logbuf_size; full: drop,       format its records (format.rs) into the
//!  count log_worker_dropped)             watchers' buffers (watcher_logbuf_size;
//!                                        full: skip, then `skipped=N`), write
//!                                        them without blocking (mio)
//! ```
//!
//! A worker never waits for a watcher: it only appends to its own queue under a lock
//! that the logger holds for one swap. The logger owns the watchers' sockets, handed to
//! it by the worker that parsed `watch` (the io layer deregisters them first).
//! [`Watch::wanted`] is the union of the watchers' streams: with no watcher it is 0
//! and an event site costs one relaxed atomic load. A read (a get, `mg`, a binary GET)
//! is no such site: it is logged through the read hook (`ops/observe.rs`), whose
//! `FETCHERS` bit follows `wanted`.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

pub mod format;
pub mod logger;

pub use protocol::text::WatchStreams as Streams;

use crate::stats::observe::ReadObservers;

/// memcached's `WATCHER_LIMIT`.
pub const WATCHER_LIMIT: usize = 20;

/// `status=` of an `item_get` line (memcached's `was_found`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GetStatus {
    NotFound = 0,
    Found = 1,
    Flushed = 2,
    Expired = 3,
}

/// `status=` of an `item_store` line (memcached's `store_item_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreStatus {
    NotStored = 0,
    Stored = 1,
    Exists = 2,
    NotFound = 3,
    TooLarge = 4,
    NoMemory = 5,
}

/// `cmd=` of an `item_store` line (memcached's `NREAD_*`; binary logs `null`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreCmd {
    Null = 0,
    Add = 1,
    Set = 2,
    Replace = 3,
    Append = 4,
    Prepend = 5,
    Cas = 6,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Local = 0,
    Tcp = 1,
    Udp = 2,
}

/// `reason=` of a `conn_close` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseReason {
    Error = 0,
    Normal = 1,
    IdleTimeout = 2,
    Shutdown = 3,
}

/// One logged event, as memcached's `logentry_*` structures keep it until the logger
/// formats it. `nbytes` counts the value's CRLF, as memcached's `it->nbytes`.
#[derive(Clone, Copy, Debug)]
pub enum Event {
    Get {
        status: GetStatus,
        clsid: u8,
        nbytes: i32,
        cfd: i32,
    },
    Store {
        status: StoreStatus,
        cmd: StoreCmd,
        ttl: u32,
        clsid: u8,
        nbytes: i32,
        cfd: i32,
    },
    Eviction {
        fetched: bool,
        ttl: i64,
        la: u32,
        clsid: u8,
        nbytes: i32,
    },
    ConnNew {
        peer: Option<SocketAddr>,
        transport: Transport,
        cfd: i32,
    },
    ConnClose {
        peer: Option<SocketAddr>,
        transport: Transport,
        reason: CloseReason,
        cfd: i32,
    },
}

impl Event {
    /// The stream the event belongs to.
    fn stream(&self) -> u16 {
        match self {
            Event::Get { .. } => Streams::FETCHERS,
            Event::Store { .. } => Streams::MUTATIONS,
            Event::Eviction { .. } => Streams::EVICTIONS,
            Event::ConnNew { .. } | Event::ConnClose { .. } => Streams::CONNEVENTS,
        }
    }
}

/// An event with its time and global id; its key is in the queue's key bytes.
#[derive(Clone, Copy, Debug)]
pub struct Record {
    pub gid: u64,
    pub sec: u64,
    pub usec: u32,
    pub key_at: u32,
    pub key_len: u32,
    pub event: Event,
}

/// Bytes a record takes from its queue's budget (memcached requests 512 per entry;
/// we count what is kept).
fn record_bytes(key_len: usize) -> usize {
    std::mem::size_of::<Record>() + key_len
}

/// What one thread logged since the logger last took it.
#[derive(Default)]
pub(crate) struct Batch {
    pub(crate) records: Vec<Record>,
    pub(crate) keys: Vec<u8>,
    bytes: usize,
    pub(crate) dropped: u64,
    pub(crate) written: u64,
}

impl Batch {
    pub(crate) fn clear(&mut self) {
        self.records.clear();
        self.keys.clear();
        self.bytes = 0;
        self.dropped = 0;
        self.written = 0;
    }
}

/// One thread's bounded queue (memcached's per-thread `logger` and its bipbuf).
pub(crate) struct Queue {
    pub(crate) batch: Mutex<Batch>,
}

/// A connection handed over by a worker, not yet taken by the logger thread.
pub(crate) struct NewWatcher {
    pub(crate) socket: OwnedFd,
    pub(crate) streams: u16,
    pub(crate) min_gid: u64,
}

/// The log streams: what the event sites check and feed, and what the logger drains.
pub struct Watch {
    /// The union of the attached watchers' streams.
    wanted: AtomicU16,
    gid: AtomicU64,
    /// Watchers attached or promised (see [`Watch::reserve`]), at most [`WATCHER_LIMIT`].
    watchers: AtomicUsize,
    pub(crate) queues: Mutex<Vec<Arc<Queue>>>,
    pub(crate) pending: Mutex<Vec<NewWatcher>>,
    pub(crate) waker: OnceLock<mio::Waker>,
    worker_buf_bytes: usize,
    pub(crate) watcher_buf_bytes: usize,
    /// `stats`: `log_worker_dropped`, `log_worker_written`, `log_watcher_skipped`,
    /// `log_watcher_sent`, and `log_watchers` (attached, as the logger counts them).
    pub worker_dropped: AtomicU64,
    pub worker_written: AtomicU64,
    pub watcher_skipped: AtomicU64,
    pub watcher_sent: AtomicU64,
    pub attached: AtomicU64,
    /// Where reads learn that a watcher wants fetchers (its `FETCHERS` bit), kept in
    /// step with `wanted`.
    observers: Arc<ReadObservers>,
}

thread_local! {
    /// This thread's queue for each `Watch` it logged to (one per server; tests run
    /// several in one process), keyed by the `Watch`'s address.
    static QUEUES: RefCell<Vec<(usize, Arc<Queue>)>> = const { RefCell::new(Vec::new()) };
}

impl Watch {
    /// The streams' state, with `worker_buf_bytes` for each worker's queue and
    /// `watcher_buf_bytes` for each watcher's buffer (`-o worker_logbuf_size`,
    /// `watcher_logbuf_size`); reads are logged through the read hook, which learns from
    /// `observers` when fetchers are wanted.
    #[must_use]
    pub fn new(
        worker_buf_bytes: usize,
        watcher_buf_bytes: usize,
        observers: Arc<ReadObservers>,
    ) -> Watch {
        Watch {
            wanted: AtomicU16::new(0),
            gid: AtomicU64::new(0),
            watchers: AtomicUsize::new(0),
            queues: Mutex::new(Vec::new()),
            pending: Mutex::new(Vec::new()),
            waker: OnceLock::new(),
            worker_buf_bytes,
            watcher_buf_bytes,
            worker_dropped: AtomicU64::new(0),
            worker_written: AtomicU64::new(0),
            watcher_skipped: AtomicU64::new(0),
            watcher_sent: AtomicU64::new(0),
            attached: AtomicU64::new(0),
            observers,
        }
    }

    /// `wanted` changed: the read hook's `FETCHERS` bit follows it.
    fn wanted_changed(&self) {
        let fetchers = self.wants(Streams::FETCHERS);
        self.observers.set(ReadObservers::FETCHERS, fetchers);
    }

    /// Whether a watcher wants any of the `streams` bits: the one check at every event
    /// site, a relaxed load (a watcher attached a moment ago may miss an event, as in
    /// memcached, whose workers read the flags without a barrier too).
    #[inline(always)]
    #[must_use]
    pub fn wants(&self, streams: u16) -> bool {
        self.wanted.load(Ordering::Relaxed) & streams != 0
    }

    fn next_gid(&self) -> u64 {
        self.gid.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Queue `event` (of `key`) for the logger; dropped and counted when this thread's
    /// queue is full. Call only after [`Watch::wants`] said yes.
    #[cold]
    #[inline(never)]
    pub fn log(&self, key: &[u8], event: Event) {
        if !self.wants(event.stream()) {
            return;
        }
        let queue = self.queue();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let mut b = queue.batch.lock().unwrap_or_else(|e| e.into_inner());
        let need = record_bytes(key.len());
        if b.bytes + need > self.worker_buf_bytes {
            b.dropped += 1;
            return;
        }
        let key_at = b.keys.len() as u32;
        b.keys.extend_from_slice(key);
        b.bytes += need;
        b.written += 1;
        let gid = self.next_gid();
        b.records.push(Record {
            gid,
            sec: now.as_secs(),
            usec: now.subsec_micros(),
            key_at,
            key_len: key.len() as u32,
            event,
        });
    }

    /// This thread's queue, made and registered on its first event (memcached's
    /// `logger_create`).
    fn queue(&self) -> Arc<Queue> {
        let me = self as *const Watch as usize;
        QUEUES.with(|q| {
            let mut q = q.borrow_mut();
            if let Some((_, queue)) = q.iter().find(|(w, _)| *w == me) {
                return queue.clone();
            }
            let queue = Arc::new(Queue {
                batch: Mutex::new(Batch::default()),
            });
            self.queues
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(queue.clone());
            q.push((me, queue.clone()));
            queue
        })
    }

    /// Promise a watcher slot for a `watch` just parsed; false at [`WATCHER_LIMIT`]
    /// (memcached: `WATCHER_TOO_MANY log watcher limit reached`). Keep the promise with
    /// [`Watch::attach`] or give it back with [`Watch::release`].
    #[must_use]
    pub fn reserve(&self) -> bool {
        self.watchers
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < WATCHER_LIMIT).then_some(n + 1)
            })
            .is_ok()
    }

    /// Give back a slot [`Watch::reserve`] promised.
    pub fn release(&self) {
        self.watchers.fetch_sub(1, Ordering::AcqRel);
    }

    /// Hand a reserved watcher's socket (non-blocking, removed from its worker's
    /// event loop) to the logger thread, which writes `OK` first and then the lines of
    /// `streams` logged from now on.
    pub fn attach(&self, socket: OwnedFd, streams: u16) {
        let min_gid = self.next_gid();
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(NewWatcher {
                socket,
                streams,
                min_gid,
            });
        self.wanted.fetch_or(streams, Ordering::Relaxed);
        self.wanted_changed();
        if let Some(w) = self.waker.get() {
            let _ = w.wake();
        }
    }

    /// The logger's view after it dropped or took watchers: the union of `streams`
    /// and those still pending.
    pub(crate) fn set_wanted(&self, streams: u16) {
        let pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let all = pending.iter().fold(streams, |a, w| a | w.streams);
        self.wanted.store(all, Ordering::Relaxed);
        self.wanted_changed();
    }

    /// A watcher is gone: its slot is free again.
    pub(crate) fn detached(&self) {
        self.release();
    }
}

/// The store's evictions as `type=eviction` lines (installed with
/// `Store::set_eviction_sink`).
pub struct EvictionLog {
    pub watch: Arc<Watch>,
    /// The server clock, for `ttl=` and `la=` (seconds since start).
    pub now: Box<dyn Fn() -> u32 + Send + Sync>,
}

impl storage::EvictionSink for EvictionLog {
    fn wants(&self) -> bool {
        self.watch.wants(Streams::EVICTIONS)
    }

    fn evicted(&self, item: &storage::Evicted<'_>) {
        let now = (self.now)();
        let ttl = if item.exptime > 0 {
            i64::from(item.exptime) - i64::from(now)
        } else {
            -1
        };
        self.watch.log(
            item.key,
            Event::Eviction {
                fetched: item.fetched,
                ttl,
                la: now.wrapping_sub(item.written),
                clsid: item.class as u8,
                nbytes: item.value_len as i32 + 2,
            },
        );
    }
}
