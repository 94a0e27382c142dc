//! The server clock: whole seconds since start, as memcached's `current_time`.
//!
//! A maintenance thread ticks it once a second, so the hot path reads one
//! relaxed atomic instead of calling `clock_gettime` per request. Client
//! expiry times are converted here with memcached's `realtime()` rules.
//!
//! Under `--debug-time` the `debugtime` command of memcached's debug build moves the
//! clock on or stops it ([`Clock::forward`], [`Clock::pause`]): a test of a TTL moves
//! time instead of sleeping for it. The clock never goes back: a tick keeps the larger
//! of the time it reads and the time it holds, so a move on is not undone by a tick that
//! read the wall clock before it, nor the clock set back by a wall clock set back.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, Ordering};
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
    /// `debugtime p`: ticks leave the time as it is until `debugtime r`.
    paused: AtomicBool,
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
            paused: AtomicBool::new(false),
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
        self.current.store(self.wall_time(), Ordering::Relaxed);
    }

    /// Re-read the wall clock; called once a second by the maintenance thread.
    pub fn tick(&self) {
        if !self.paused.load(Ordering::Relaxed) {
            self.current.fetch_max(self.wall_time(), Ordering::Relaxed);
        }
    }

    /// Relative seconds by the wall clock.
    fn wall_time(&self) -> RelTime {
        let started = self.process_started.load(Ordering::Relaxed);
        (unix_now() - started).max(1) as u32
    }

    /// `debugtime <seconds>`: the clock moves on at once, as if the server had started
    /// that much earlier: relative time 0 moves back, so every later tick, absolute
    /// expiry times and the start a warm restart saves all keep the move.
    /// memcached-debug adds the sum of all moves so far at each one until its next
    /// tick, and keeps its start; the moves add up the same from its next tick on
    /// (docs/protocol.md).
    pub fn forward(&self, secs: u64) {
        let secs = u32::try_from(secs).unwrap_or(u32::MAX);
        self.process_started
            .fetch_sub(i64::from(secs), Ordering::Relaxed);
        let _ = self
            .current
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                Some(t.saturating_add(secs))
            });
    }

    /// `debugtime p` (true) and `debugtime r` (false): while paused, ticks leave the
    /// time alone; once resumed, the seconds spent paused count, as in memcached-debug.
    pub fn pause(&self, paused: bool) {
        self.paused.store(paused, Ordering::Relaxed);
        self.tick();
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
    fn debugtime_moves_on_pauses_and_never_goes_back() {
        let c = Clock::new();
        c.tick();
        let start = c.now();
        c.forward(100);
        assert!(c.now() >= start + 100);
        // A tick keeps the move.
        c.tick();
        assert!((start + 100..start + 103).contains(&c.now()), "{}", c.now());
        c.pause(true);
        let held = c.now();
        c.tick();
        assert_eq!(c.now(), held, "a paused clock does not tick");
        c.forward(5);
        assert_eq!(c.now(), held + 5, "a paused clock still moves on");
        c.pause(false);
        assert!(c.now() >= held + 5);
        // Relative time 0 moved back with the moves, so a warm restart keeps them.
        let saved = c.process_started();
        let c = Clock::new();
        c.resume(saved);
        assert!(c.now() >= held + 5);
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
