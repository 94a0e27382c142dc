//! The server clock: whole seconds since start, as memcached's `current_time`.
//!
//! A maintenance thread ticks it once a second, so the hot path reads one
//! relaxed atomic instead of calling `clock_gettime` per request. Client
//! expiry times are converted here with memcached's `realtime()` rules.

use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use storage::RelTime;

/// Expiry times above this many seconds are absolute unix times (30 days).
pub const REALTIME_MAXDELTA_SECS: i64 = 60 * 60 * 24 * 30;
/// memcached starts its clock this far in the past (`ITEM_UPDATE_INTERVAL + 2`)
/// so that relative time 0 ("never") and 1 ("long ago") are never "now".
const CLOCK_HEADROOM_SECS: i64 = 62;

/// The shared clock. One per process.
pub struct Clock {
    process_started: AtomicI64,
    current: AtomicU32,
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

impl Clock {
    #[must_use]
    pub fn new() -> Self {
        let started = unix_now() - CLOCK_HEADROOM_SECS;
        Clock {
            process_started: AtomicI64::new(started),
            current: AtomicU32::new(CLOCK_HEADROOM_SECS as u32),
        }
    }

    /// Go on from a clock saved at a graceful stop (a warm restart, `-e`): relative
    /// time 0 is unix time `process_started` again, so uptime, every item's expiry
    /// and absolute expiry times keep their meaning, and the seconds the server was
    /// down count as passed (memcached restores its `process_started` the same way).
    /// Called before any thread reads the clock.
    pub fn resume(&self, process_started: i64) {
        self.process_started
            .store(process_started, Ordering::Relaxed);
        self.tick();
    }

    /// Re-read the wall clock; called once a second by the maintenance thread.
    pub fn tick(&self) {
        let started = self.process_started.load(Ordering::Relaxed);
        let now = (unix_now() - started).max(1) as u32;
        self.current.store(now, Ordering::Relaxed);
    }

    /// Relative seconds now (memcached's `current_time`).
    #[must_use]
    pub fn now(&self) -> RelTime {
        self.current.load(Ordering::Relaxed)
    }

    /// Unix time at relative time 0.
    #[must_use]
    pub fn process_started(&self) -> i64 {
        self.process_started.load(Ordering::Relaxed)
    }

    /// Seconds the server has been up, as `stats uptime` reports it.
    #[must_use]
    pub fn uptime(&self) -> u32 {
        self.now().saturating_sub(CLOCK_HEADROOM_SECS as u32 - 2)
    }

    /// memcached's `realtime(EXPTIME_TO_POSITIVE_TIME(exptime))`: turn a
    /// client expiry (0 = never, up to 30 days = relative, beyond = absolute
    /// unix time, negative = already expired) into relative server time.
    #[must_use]
    pub fn realtime(&self, exptime: i32) -> RelTime {
        let exptime = if exptime < 0 {
            REALTIME_MAXDELTA_SECS + 1
        } else {
            i64::from(exptime)
        };
        self.realtime_positive(exptime)
    }

    /// memcached's `realtime()` for a non-negative expiry.
    #[must_use]
    pub fn realtime_positive(&self, exptime: i64) -> RelTime {
        if exptime == 0 {
            return 0;
        }
        if exptime > REALTIME_MAXDELTA_SECS {
            let started = self.process_started();
            if exptime <= started {
                return 1;
            }
            return (exptime - started) as RelTime;
        }
        (exptime + i64::from(self.now())) as RelTime
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn realtime_follows_memcached() {
        let c = Clock::new();
        let now = c.now();
        assert_eq!(c.realtime(0), 0);
        assert_eq!(c.realtime(10), now + 10);
        assert_eq!(c.realtime(-1), 1, "negative expiry is in the past");
        assert_eq!(c.realtime(REALTIME_MAXDELTA_SECS as i32 + 1), 1);
        let abs = c.process_started() + 100;
        assert_eq!(c.realtime(abs as i32), 100);
    }

    #[test]
    fn a_resumed_clock_counts_the_seconds_it_was_stopped() {
        let c = Clock::new();
        // Saved 1000 s into the last run, stopped 50 s ago.
        c.resume(unix_now() - 1050);
        let now = c.now();
        assert!((1050..1053).contains(&now), "{now}");
        assert_eq!(c.realtime(10), now + 10);
    }
}
