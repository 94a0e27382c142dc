//! Flash reads off the workers: a small pool of I/O threads (`ext_threads`, as many as
//! memcached's, default 1) reads the values that text `get`s found on flash, so that a
//! worker never waits for the disk while other connections have requests.
//!
//! ```text
//!  worker: get finds a stub ─> Defer (reply held back, the get paused at that key)
//!          after the turn: one Job per value wanted ──────────────> I/O thread:
//!                                                                    Flash::read (pread,
//!          eventfd wake-up <── Done in the worker's lane <────────── checks the record)
//!  worker: every read of the connection done ─> the get resumes, the lookups take
//!          the values read (`reply::flash::FlashReads`), replies in request order
//! ```
//!
//! A connection's reads all go out at once (a multi-get's flash keys are looked up
//! ahead when the first one defers), so they overlap on the pool's threads and in the
//! device's queue. Completions carry the connection's slot and a serial number; a
//! connection closed meanwhile has another serial in its slot and its reads are
//! dropped. Meta, binary and UDP requests read on the worker (`storage`'s default),
//! which is a page-cache copy when the data is cached.

use std::fs::File;
use std::io::Write;
use std::ops::Range;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, OnceLock};

use storage::StubLoc;

use crate::state::Shared;

/// One value to read for a connection of a worker.
struct Job {
    lane: Arc<Lane>,
    slot: usize,
    serial: u64,
    loc: StubLoc,
    key: Vec<u8>,
}

/// A finished read: the value and its range in the buffer, or `None` when no good
/// record was there (a miss, counted by the tier).
pub struct Done {
    pub slot: usize,
    pub serial: u64,
    pub loc: StubLoc,
    pub value: Option<(Vec<u8>, Range<usize>)>,
}

/// A worker's completion queue and its wake-up eventfd.
pub struct Lane {
    done: Mutex<Vec<Done>>,
    wake: Arc<File>,
}

impl Lane {
    /// The reads finished since the last call.
    pub fn take(&self) -> Vec<Done> {
        std::mem::take(&mut *self.done.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

static POOL: OnceLock<Mutex<Sender<Job>>> = OnceLock::new();

/// Start the I/O threads when the store has a flash tier (`threads` of them, at least
/// one). Called once at start-up, before the workers.
pub fn start(shared: &Arc<Shared>, threads: usize) -> std::io::Result<()> {
    if shared.store.flash().is_none() {
        return Ok(());
    }
    let (tx, rx) = channel::<Job>();
    let rx = Arc::new(Mutex::new(rx));
    for i in 0..threads.max(1) {
        let rx = rx.clone();
        let shared = shared.clone();
        std::thread::Builder::new()
            .name(format!("ext-io-{i}"))
            .spawn(move || io_loop(&shared, &rx))?;
    }
    let _ = POOL.set(Mutex::new(tx));
    Ok(())
}

/// A worker's lane, when the I/O threads run.
pub fn lane(wake: Arc<File>) -> Option<Arc<Lane>> {
    POOL.get()?;
    Some(Arc::new(Lane {
        done: Mutex::new(Vec::new()),
        wake,
    }))
}

/// Hand the reads a connection (in `slot`, serial `serial`) wants to the I/O threads;
/// returns how many went.
pub fn submit(
    lane: &Arc<Lane>,
    slot: usize,
    serial: u64,
    wanted: Vec<(StubLoc, Vec<u8>)>,
) -> usize {
    let Some(pool) = POOL.get() else {
        return 0;
    };
    let tx = pool.lock().unwrap_or_else(|p| p.into_inner());
    let mut n = 0;
    for (loc, key) in wanted {
        let job = Job {
            lane: lane.clone(),
            slot,
            serial,
            loc,
            key,
        };
        if tx.send(job).is_ok() {
            n += 1;
        }
    }
    n
}

fn io_loop(shared: &Shared, rx: &Mutex<Receiver<Job>>) {
    let Some(flash) = shared.store.flash() else {
        return;
    };
    loop {
        let job = {
            let rx = rx.lock().unwrap_or_else(|p| p.into_inner());
            match rx.recv() {
                Ok(job) => job,
                Err(_) => return,
            }
        };
        let mut buf = Vec::new();
        let value = flash
            .read(job.loc, &job.key, &mut buf)
            .ok()
            .map(|r| (buf, r));
        job.lane
            .done
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Done {
                slot: job.slot,
                serial: job.serial,
                loc: job.loc,
                value,
            });
        // The worker's eventfd: any write wakes it, and it drains every lane entry.
        let _ = (&*job.lane.wake).write(&1u64.to_ne_bytes());
    }
}

/// A worker's side of the flash reads: the reads lent to the connection it runs, and
/// its lane. `None` in a worker of a server without a flash tier.
pub struct WorkerReads {
    pub reads: std::cell::RefCell<crate::reply::flash::FlashReads>,
    lane: Arc<Lane>,
    next_serial: std::cell::Cell<u64>,
}

/// A connection's reads in flight and done, kept by its worker.
#[derive(Default)]
pub struct ConnReads {
    serial: u64,
    pending: usize,
    ready: Vec<(StubLoc, crate::reply::flash::ReadValue)>,
}

impl WorkerReads {
    /// For a worker woken through `wake`, when the I/O threads run.
    pub fn new(wake: Arc<File>) -> Option<WorkerReads> {
        Some(WorkerReads {
            reads: Default::default(),
            lane: lane(wake)?,
            next_serial: std::cell::Cell::new(1),
        })
    }

    /// A new connection's state, with a serial of its own.
    pub fn conn(&self) -> ConnReads {
        let serial = self.next_serial.get();
        self.next_serial.set(serial + 1);
        ConnReads {
            serial,
            ..ConnReads::default()
        }
    }

    /// Before a connection's turn: lend it the values read for it.
    pub fn begin(&self, c: &mut ConnReads) {
        self.reads.borrow_mut().begin(std::mem::take(&mut c.ready));
    }

    /// After a connection's turn (it is in `slot`): start the reads it deferred. A get
    /// that deferred with nothing to read (cannot happen: a deferral wants its value)
    /// is let go rather than left waiting.
    pub fn end(&self, slot: usize, c: &mut ConnReads, conn: &mut crate::session::conn::Conn) {
        let (wanted, unused) = self.reads.borrow_mut().finish();
        // Kept while a get is paused (for its output, with the values of its later keys
        // read already); otherwise they belong to items that changed, and go.
        if conn.has_paused_get() {
            c.ready = unused;
        }
        if !wanted.is_empty() {
            c.pending += submit(&self.lane, slot, c.serial, wanted);
        }
        if conn.flash_waiting() && c.pending == 0 {
            conn.flash_done();
        }
    }

    /// The reads finished since the last call, for the backend to give to their
    /// connections with [`WorkerReads::deliver`] (`Slots::deliver_reads`).
    pub fn finished(&self) -> Vec<Done> {
        self.lane.take()
    }

    /// Give a finished read to its connection (`c`, `conn`, found in the read's slot);
    /// true when it was that connection's and its last one.
    pub fn deliver(d: Done, c: &mut ConnReads, conn: &mut crate::session::conn::Conn) -> bool {
        if d.serial != c.serial || c.pending == 0 {
            return false;
        }
        c.ready.push((d.loc, d.value));
        c.pending -= 1;
        if c.pending == 0 {
            conn.flash_done();
            return true;
        }
        false
    }
}
