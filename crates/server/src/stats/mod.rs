//! Statistics: per-worker counters, summed only when a client asks.
//!
//! Each worker thread owns one [`WorkerStats`] and is its only writer, so an
//! increment is a relaxed load and store (no locked instruction, no shared
//! cache line). `stats reset` does not write to the workers' counters; it
//! records a baseline that later reports subtract, so a reset can never race
//! with an increment.
//!
//! - [`latency`]: each request's time in the server, per command.
//! - [`observe`]: which observers of key reads are on (the read hook's one word).

pub mod latency;
pub mod observe;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use latency::{Histograms, Snapshot, COMMANDS};

/// A worker's connection memory, as its buffer pool (`session/conn/buffers.rs`) and its
/// event loop publish it. Each is written by its worker alone.
#[derive(Default, Debug)]
pub struct ConnGauges {
    /// Read buffers in existence (held by connections or cached).
    pub read_buffers: AtomicU64,
    /// Their bytes; of which cached.
    pub read_bytes: AtomicU64,
    pub read_free_bytes: AtomicU64,
    /// Bytes of write buffers (the connections' and the io_uring send buffers), held or
    /// cached; of which cached.
    pub write_bytes: AtomicU64,
    pub write_free_bytes: AtomicU64,
    /// The connections' own state: the worker's table of slots (`Shared::conn_memory`
    /// adds the `stats conns` entries).
    pub state_bytes: AtomicU64,
}

/// [`ConnGauges`] summed over workers.
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnMemory {
    pub read_buffers: u64,
    pub read_bytes: u64,
    pub read_free_bytes: u64,
    pub write_bytes: u64,
    pub write_free_bytes: u64,
    pub state_bytes: u64,
}

impl ConnMemory {
    /// Buffer bytes connections hold now.
    #[must_use]
    pub fn buffers_in_use(&self) -> u64 {
        (self.read_bytes + self.write_bytes)
            .saturating_sub(self.read_free_bytes + self.write_free_bytes)
    }

    /// Buffer bytes in the workers' caches.
    #[must_use]
    pub fn buffers_pooled(&self) -> u64 {
        self.read_free_bytes + self.write_free_bytes
    }

    /// Everything: buffers held and cached, and the connections' state.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.read_bytes + self.write_bytes + self.state_bytes
    }
}

macro_rules! counters {
    ($($name:ident),* $(,)?) => {
        /// One worker's counters, named as memcached's `stats` fields.
        #[derive(Default, Debug)]
        #[repr(align(64))]
        pub struct WorkerStats {
            $(pub $name: AtomicU64,)*
            /// Not counters but levels, which `stats reset` leaves alone: the memory of
            /// the worker's connections.
            pub conn: ConnGauges,
            /// The worker's latency histograms (`latency.rs`).
            pub latency: Histograms,
        }

        /// A plain copy of counters, summed over workers.
        #[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
        pub struct Counters {
            $(pub $name: u64,)*
        }

        impl WorkerStats {
            fn add_to(&self, sum: &mut Counters) {
                $(sum.$name += self.$name.load(Ordering::Relaxed);)*
            }
        }

        impl Counters {
            fn saturating_sub(&self, base: &Counters) -> Counters {
                Counters { $($name: self.$name.saturating_sub(base.$name),)* }
            }
        }
    };
}

counters!(
    cmd_get,
    cmd_set,
    cmd_flush,
    cmd_touch,
    cmd_meta,
    get_hits,
    get_misses,
    get_expired,
    get_flushed,
    delete_hits,
    delete_misses,
    incr_hits,
    incr_misses,
    decr_hits,
    decr_misses,
    cas_hits,
    cas_misses,
    cas_badval,
    touch_hits,
    touch_misses,
    store_too_large,
    store_no_memory,
    bytes_read,
    bytes_written,
    total_connections,
    rejected_connections,
    conn_yields,
    auth_cmds,
    auth_errors,
    idle_kicks,
    listen_disabled_num,
);

/// Bump a counter owned by the calling worker.
#[inline]
pub fn bump(counter: &AtomicU64, by: u64) {
    // Single writer: a plain read-modify-write without a lock prefix.
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(by),
        Ordering::Relaxed,
    );
}

/// All workers' counters plus the `stats reset` baseline.
pub struct StatsRegistry {
    workers: Vec<std::sync::Arc<WorkerStats>>,
    baseline: Mutex<Counters>,
    /// The latency histograms at the last `stats reset`.
    latency_baseline: Mutex<Option<Box<[Snapshot; COMMANDS]>>>,
}

impl StatsRegistry {
    #[must_use]
    pub fn new(workers: Vec<std::sync::Arc<WorkerStats>>) -> Self {
        StatsRegistry {
            workers,
            baseline: Mutex::new(Counters::default()),
            latency_baseline: Mutex::new(None),
        }
    }

    fn raw(&self) -> Counters {
        let mut sum = Counters::default();
        for w in &self.workers {
            w.add_to(&mut sum);
        }
        sum
    }

    /// Counters since start or since the last reset.
    #[must_use]
    pub fn snapshot(&self) -> Counters {
        let base = *self.baseline.lock().unwrap_or_else(|e| e.into_inner());
        self.raw().saturating_sub(&base)
    }

    /// The memory of all workers' connections (levels: never reset).
    #[must_use]
    pub fn conn_memory(&self) -> ConnMemory {
        let mut m = ConnMemory::default();
        for w in &self.workers {
            let g = &w.conn;
            let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
            m.read_buffers += load(&g.read_buffers);
            m.read_bytes += load(&g.read_bytes);
            m.read_free_bytes += load(&g.read_free_bytes);
            m.write_bytes += load(&g.write_bytes);
            m.write_free_bytes += load(&g.write_free_bytes);
            m.state_bytes += load(&g.state_bytes);
        }
        m
    }

    fn latency_raw(&self) -> Box<[Snapshot; COMMANDS]> {
        let mut sum: Box<[Snapshot; COMMANDS]> = Box::default();
        for w in &self.workers {
            w.latency.add_to(&mut sum);
        }
        sum
    }

    /// Every command's latency histogram, summed over workers, since start or since
    /// the last reset.
    #[must_use]
    pub fn latency(&self) -> Box<[Snapshot; COMMANDS]> {
        let mut now = self.latency_raw();
        if let Some(base) = &*self
            .latency_baseline
            .lock()
            .unwrap_or_else(|e| e.into_inner())
        {
            for (s, b) in now.iter_mut().zip(base.iter()) {
                *s = s.since(b);
            }
        }
        now
    }

    /// `stats reset`.
    pub fn reset(&self) {
        let raw = self.raw();
        *self.baseline.lock().unwrap_or_else(|e| e.into_inner()) = raw;
        for w in &self.workers {
            w.latency.reset_max();
        }
        let latency = self.latency_raw();
        *self
            .latency_baseline
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(latency);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn sums_workers_and_resets_by_baseline() {
        let a = Arc::new(WorkerStats::default());
        let b = Arc::new(WorkerStats::default());
        let reg = StatsRegistry::new(vec![a.clone(), b.clone()]);
        bump(&a.cmd_get, 2);
        bump(&b.cmd_get, 3);
        assert_eq!(reg.snapshot().cmd_get, 5);
        reg.reset();
        assert_eq!(reg.snapshot().cmd_get, 0);
        bump(&b.cmd_get, 1);
        assert_eq!(reg.snapshot().cmd_get, 1);
        assert_eq!(std::mem::align_of::<WorkerStats>(), 64);
    }
}
