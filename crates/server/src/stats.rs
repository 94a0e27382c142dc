//! Statistics: per-worker counters, summed only when a client asks.
//!
//! Each worker thread owns one [`WorkerStats`] and is its only writer, so an
//! increment is a relaxed load and store (no locked instruction, no shared
//! cache line). `stats reset` does not write to the workers' counters; it
//! records a baseline that later reports subtract, so a reset can never race
//! with an increment.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

macro_rules! counters {
    ($($name:ident),* $(,)?) => {
        /// One worker's counters, named as memcached's `stats` fields.
        #[derive(Default, Debug)]
        #[repr(align(64))]
        pub struct WorkerStats {
            $(pub $name: AtomicU64,)*
            /// Not a counter but a level, which `stats reset` leaves alone: bytes of
            /// connection buffers the worker holds (`session/conn/buffers.rs`).
            pub conn_buffer_bytes: AtomicU64,
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
}

impl StatsRegistry {
    #[must_use]
    pub fn new(workers: Vec<std::sync::Arc<WorkerStats>>) -> Self {
        StatsRegistry {
            workers,
            baseline: Mutex::new(Counters::default()),
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

    /// Bytes of connection buffers all workers hold (a level: never reset).
    #[must_use]
    pub fn conn_buffer_bytes(&self) -> u64 {
        self.workers
            .iter()
            .map(|w| w.conn_buffer_bytes.load(Ordering::Relaxed))
            .sum()
    }

    /// `stats reset`.
    pub fn reset(&self) {
        let raw = self.raw();
        *self.baseline.lock().unwrap_or_else(|e| e.into_inner()) = raw;
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
