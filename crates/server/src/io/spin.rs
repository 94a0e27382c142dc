//! How long a worker about to sleep polls first, with `--busy-poll-us N`.
//!
//! Polling pays when the next event comes within microseconds: a few clients, each
//! waiting for its reply before it sends again, wake a sleeping worker for every
//! request, and the two context switches of each wake-up cost more than the request
//! (docs/perf-notes.md, "Busy polling"). It wastes the whole window when nothing comes:
//! a server whose clients pause between requests would spend N µs of CPU after every
//! one of them.
//!
//! So the window adapts, as the kernel's `haltpoll` cpuidle governor does for an idle
//! virtual CPU. It starts at N. A poll that catches an event, or a sleep that ends
//! within `2 N` (where polling for N, give or take the wake-up's own latency, would
//! have caught it), doubles the window (from at least N/4) up to N. A longer sleep
//! halves it, and below 1 µs it is 0: a server whose events are far apart stops
//! polling after a few of them, and starts again as soon as they come close together.
//! The cost is two clock reads around each sleep, which is a system call anyway.

use std::time::Duration;

/// Below this a window is not worth a clock read: polling stops.
const MIN_WINDOW: Duration = Duration::from_micros(1);

/// The adaptive polling window of one worker.
#[derive(Clone, Copy, Debug)]
pub struct AdaptiveSpin {
    max: Duration,
    window: Duration,
}

impl AdaptiveSpin {
    /// A window of at most `max_us` µs; `None` for 0 (polling off).
    #[must_use]
    pub fn new(max_us: u32) -> Option<AdaptiveSpin> {
        let max = Duration::from_micros(u64::from(max_us));
        (max_us > 0).then_some(AdaptiveSpin { max, window: max })
    }

    /// How long to poll before the next sleep (zero: sleep at once).
    #[must_use]
    pub fn window(&self) -> Duration {
        self.window
    }

    /// A poll caught an event.
    pub fn caught(&mut self) {
        self.grow();
    }

    /// The worker slept (after a poll that caught nothing, or none) for `slept`.
    pub fn slept(&mut self, slept: Duration) {
        if slept <= 2 * self.max {
            self.grow();
        } else {
            self.window /= 2;
            if self.window < MIN_WINDOW {
                self.window = Duration::ZERO;
            }
        }
    }

    fn grow(&mut self) {
        self.window = (self.window * 2).max(self.max / 4).min(self.max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX_US: u32 = 32;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn off_at_zero_and_full_at_start() {
        assert!(AdaptiveSpin::new(0).is_none());
        assert_eq!(AdaptiveSpin::new(MAX_US).unwrap().window(), us(32));
    }

    #[test]
    fn far_apart_events_stop_polling_and_close_ones_restart_it() {
        let mut s = AdaptiveSpin::new(MAX_US).unwrap();
        // Each long sleep halves the window: 16, 8, 4, 2, 1, then off.
        let mut windows = Vec::new();
        while s.window() > Duration::ZERO {
            s.slept(Duration::from_millis(5));
            windows.push(s.window().as_micros());
        }
        assert_eq!(windows, [16, 8, 4, 2, 1, 0]);
        s.slept(Duration::from_millis(5));
        assert_eq!(s.window(), Duration::ZERO);
        // Events close together again: a short sleep restarts polling at a quarter,
        // and catches take it back to the full window.
        s.slept(us(40));
        assert_eq!(s.window(), us(8));
        s.caught();
        assert_eq!(s.window(), us(16));
        s.caught();
        s.caught();
        assert_eq!(s.window(), us(32));
    }

    #[test]
    fn the_window_never_exceeds_the_maximum() {
        let mut s = AdaptiveSpin::new(MAX_US).unwrap();
        for _ in 0..10 {
            s.caught();
            s.slept(us(1));
            assert_eq!(s.window(), us(32));
        }
        // A sleep at exactly twice the maximum still counts as close.
        s.slept(us(64));
        assert_eq!(s.window(), us(32));
        s.slept(us(65));
        assert_eq!(s.window(), us(16));
    }
}
