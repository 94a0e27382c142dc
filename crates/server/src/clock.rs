//! The server clock: whole seconds since start, as memcached's `current_time`.
//!
//! A maintenance thread ticks it once a second, so the hot path reads one
//! relaxed atomic instead of calling `clock_gettime` per request. Client
//! expiry times are converted here with memcached's `realtime()` rules.
//!
//! Under `--debug-time` the `debugtime` command of memcached's debug build moves the
//! clock or stops it ([`Clock::move_by`], [`Clock::pause`]): a test of a TTL moves time
//! instead of sleeping for it. The arithmetic is memcached-debug's, which its own t/
//! files are written against: every move adds to a `delta` that each tick adds to the
//! wall clock's seconds, and the move itself adds the whole `delta` at once, so that
//! right after a second move the clock is ahead of where the next tick puts it (it then
//! steps back; docs/protocol.md). Absolute expiry times stay the wall clock's.

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
    /// memcached-debug's `delta`: the sum of every `debugtime` move, which each tick
    /// adds to the wall clock's seconds.
    delta: AtomicI64,
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
            delta: AtomicI64::new(0),
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
        self.tick();
    }

    /// Re-read the wall clock; called once a second by the maintenance thread. A
    /// paused clock keeps its time.
    pub fn tick(&self) {
        if self.paused.load(Ordering::Relaxed) {
            return;
        }
        let started = self.process_started.load(Ordering::Relaxed);
        let delta = self.delta.load(Ordering::Relaxed);
        self.current.store(
            rel_time((unix_now() - started).max(1) + delta),
            Ordering::Relaxed,
        );
    }

    /// `debugtime <seconds>`, as memcached-debug does it: `delta += seconds; current
    /// += delta`. The next tick puts the clock at the wall clock plus `delta`.
    pub fn move_by(&self, secs: i64) {
        let delta = self
            .delta
            .fetch_add(secs, Ordering::Relaxed)
            .saturating_add(secs);
        let now = i64::from(self.current.load(Ordering::Relaxed));
        self.current
            .store(rel_time(now.saturating_add(delta)), Ordering::Relaxed);
    }

    /// `debugtime p` (true) and `debugtime r` (false): while paused, ticks leave the
    /// time alone (moves still move it); once resumed, the next tick counts the seconds
    /// spent paused, as in memcached-debug.
    pub fn pause(&self, paused: bool) {
        self.paused.store(paused, Ordering::Relaxed);
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

/// Seconds as a relative time: at least 1 (0 means "never"), at most `u32::MAX`.
fn rel_time(secs: i64) -> RelTime {
    secs.clamp(1, i64::from(u32::MAX)) as RelTime
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
    fn debugtime_moves_and_pauses_as_memcached_debug_does() {
        let c = Clock::new();
        c.tick();
        let start = c.now();
        c.move_by(3);
        assert_eq!(c.now(), start + 3);
        // A second move adds the whole delta (3 + 4) at once...
        c.move_by(4);
        assert_eq!(c.now(), start + 10);
        // ...and the next tick is the wall clock plus the delta.
        c.tick();
        assert!((start + 7..start + 10).contains(&c.now()), "{}", c.now());
        c.pause(true);
        let held = c.now();
        c.tick();
        assert_eq!(c.now(), held, "a paused clock does not tick");
        // delta 7 - 7 = 0: the move adds nothing, the next tick is the wall clock.
        c.move_by(-7);
        assert_eq!(c.now(), held);
        c.pause(false);
        c.tick();
        assert!((start..start + 3).contains(&c.now()), "{}", c.now());
        // Absolute expiry times stay the wall clock's.
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
