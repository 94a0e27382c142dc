//! A `timerfd` in the worker's poll, so the open loop sleeps until exactly
//! the next intended send time.
//!
//! epoll's own timeout is in whole milliseconds (mio rounds up), far too
//! coarse for arrivals microseconds apart; spinning instead burns the client
//! core and, on a shared machine, gets the worker descheduled for whole time
//! slices, which then shows up as latency. A timerfd armed at an absolute
//! `CLOCK_MONOTONIC` time wakes the same `epoll_wait` that waits for replies.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Instant;

use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};
use rustix::time::{
    clock_gettime, timerfd_create, timerfd_settime, ClockId, Itimerspec, TimerfdClockId,
    TimerfdFlags, TimerfdTimerFlags, Timespec,
};

/// A one-shot timer on the run's clock (ns since the run's start).
pub struct Alarm {
    fd: OwnedFd,
    /// `CLOCK_MONOTONIC` at the run's start, in ns (`Instant` is that clock on Linux).
    base_ns: u64,
    armed_at: Option<u64>,
}

fn timespec(ns: u64) -> Timespec {
    Timespec {
        tv_sec: (ns / 1_000_000_000) as _,
        tv_nsec: (ns % 1_000_000_000) as _,
    }
}

impl Alarm {
    /// A disarmed alarm whose times count from `start`.
    pub fn new(start: Instant) -> io::Result<Alarm> {
        let fd = timerfd_create(
            TimerfdClockId::Monotonic,
            TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
        )?;
        let now = clock_gettime(ClockId::Monotonic);
        let now_ns = now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64;
        let base_ns = now_ns.saturating_sub(start.elapsed().as_nanos() as u64);
        Ok(Alarm {
            fd,
            base_ns,
            armed_at: None,
        })
    }

    /// Adds the alarm to a poll under `token`.
    pub fn register(&self, registry: &Registry, token: Token) -> io::Result<()> {
        registry.register(
            &mut SourceFd(&self.fd.as_raw_fd()),
            token,
            Interest::READABLE,
        )
    }

    /// Makes the poll wake at `at_ns` (ns since the run's start).
    pub fn arm(&mut self, at_ns: u64) -> io::Result<()> {
        if self.armed_at == Some(at_ns) {
            return Ok(());
        }
        let spec = Itimerspec {
            it_interval: timespec(0),
            it_value: timespec(self.base_ns + at_ns.max(1)),
        };
        timerfd_settime(&self.fd, TimerfdTimerFlags::ABSTIME, &spec)?;
        self.armed_at = Some(at_ns);
        Ok(())
    }

    /// Acknowledges a firing (call on the alarm's event).
    pub fn clear(&mut self) {
        let mut ticks = [0u8; 8];
        // EAGAIN only means it was already acknowledged.
        let _ = rustix::io::read(&self.fd, &mut ticks);
        self.armed_at = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mio::{Events, Poll};
    use std::time::Duration;

    #[test]
    fn wakes_the_poll_within_a_fraction_of_a_millisecond() {
        let start = Instant::now();
        let mut poll = Poll::new().unwrap();
        let mut alarm = Alarm::new(start).unwrap();
        alarm.register(poll.registry(), Token(7)).unwrap();
        let mut events = Events::with_capacity(4);
        for _ in 0..5 {
            let at = start.elapsed().as_nanos() as u64 + 300_000;
            alarm.arm(at).unwrap();
            poll.poll(&mut events, Some(Duration::from_millis(50)))
                .unwrap();
            let woke = start.elapsed().as_nanos() as u64;
            assert!(
                events.iter().any(|e| e.token() == Token(7)),
                "the alarm fired"
            );
            assert!(woke >= at, "not early");
            alarm.clear();
            if woke < at + 5_000_000 {
                return; // a loaded machine may be slow once; once on time proves it
            }
        }
        panic!("the alarm never woke the poll within 5 ms of its time");
    }
}
