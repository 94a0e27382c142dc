//! What the epoll and io_uring workers share: admission against `-c`, the wake-up
//! eventfd, the idle-timeout scan, and shutdown's limits.

use std::fs::File;
use std::io::Read;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::state::Shared;
use crate::stats::{bump, WorkerStats};

/// How long shutdown waits for a slow client to take its last replies.
pub(crate) const SHUTDOWN_WRITE_TIMEOUT: Duration = Duration::from_secs(2);
pub(crate) const TOO_MANY_CONNECTIONS: &[u8] = b"ERROR Too many open connections\r\n";

/// Count a new connection against `-c`. Over the limit it is refused with
/// memcached's message (the caller then closes it).
pub(crate) fn admit(shared: &Shared, stats: &WorkerStats) -> bool {
    let max = shared.settings.max_connections;
    let prev = shared.curr_connections.fetch_add(1, Ordering::Relaxed);
    if prev >= max {
        shared.curr_connections.fetch_sub(1, Ordering::Relaxed);
        bump(&stats.rejected_connections, 1);
        return false;
    }
    bump(&stats.total_connections, 1);
    true
}

/// Read the wake-up eventfd's counter back to zero.
pub(crate) fn clear_wake(wake: &File) {
    let mut counter = [0u8; 8];
    let _ = (&*wake).read(&mut counter);
}

/// `-o idle_timeout`: each worker looks for idle clients once per second of server time
/// (its wait for events is capped at a second while the timeout is on).
pub(crate) struct IdleScan {
    last: u32,
}

impl IdleScan {
    pub fn new(shared: &Shared) -> IdleScan {
        IdleScan {
            last: shared.clock.now(),
        }
    }

    /// The slots of `clients` to close now: those idle for longer than the timeout
    /// (by `last_active`, the server time of their last byte received), when the
    /// timeout is on and the clock has ticked since the last scan; else none.
    pub fn due<T>(
        &mut self,
        shared: &Shared,
        clients: &[Option<T>],
        last_active: impl Fn(&T) -> u32,
    ) -> Vec<usize> {
        let timeout = shared.settings.idle_timeout_secs;
        if timeout == 0 {
            return Vec::new();
        }
        let now = shared.clock.now();
        if now == self.last {
            return Vec::new();
        }
        self.last = now;
        let idle = |c: &T| now.saturating_sub(last_active(c)) > timeout;
        (0..clients.len())
            .filter(|&i| clients[i].as_ref().is_some_and(idle))
            .collect()
    }
}
