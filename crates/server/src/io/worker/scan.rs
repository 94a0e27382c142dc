//! The scans a worker makes over its connections once per second of server time, after
//! a turn of its loop: `-o idle_timeout`, the idle connections' buffers, and the TLS
//! handshakes out of time. Each worker's wait for events is capped at
//! [`SCAN_PERIOD`] for them.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::slots::{Slot, Slots};
use crate::admin::watch::CloseReason;
use crate::session::conn::buffers;
use crate::state::Shared;
use crate::stats::{bump, WorkerStats};

/// How long a worker may wait for events: a second, for the scans.
pub(crate) const SCAN_PERIOD: Duration = Duration::from_secs(1);

/// How long a connection must have received nothing before the buffer scan takes its
/// buffers back: two ticks of the server clock, so at least one whole second.
pub(crate) const BUFFER_IDLE_SECS: u32 = 2;

/// When a worker last scanned its connections.
pub(crate) struct Scans {
    last: u32,
}

impl Scans {
    pub fn new(shared: &Shared) -> Scans {
        Scans {
            last: shared.clock.now(),
        }
    }

    /// After a turn of the worker's loop: when the server clock has ticked since the
    /// last scan, scan `slots`, closing through [`Slots::close`] with `detach`.
    #[inline]
    pub fn after_turn<C: Slot>(
        &mut self,
        slots: &mut Slots<C>,
        shared: &Shared,
        stats: &WorkerStats,
        detach: impl FnMut(&mut C),
    ) {
        let now = shared.clock.now();
        if now != self.last {
            self.last = now;
            scan(slots, shared, stats, now, detach);
        }
    }
}

/// The scans at server time `now`:
/// - `-o idle_timeout`: close the connections that received nothing for longer
///   (`idle_kicks`);
/// - give back the buffers of those that received nothing for [`BUFFER_IDLE_SECS`] and
///   hold nothing (`session/conn/buffers.rs`: under its budget a connection keeps its
///   buffers between turns, and this is what takes them from one that went quiet);
/// - close the TLS connections whose handshake ran out of time
///   (`ssl_handshake_errors`).
#[inline(never)]
fn scan<C: Slot>(
    slots: &mut Slots<C>,
    shared: &Shared,
    stats: &WorkerStats,
    now: u32,
    mut detach: impl FnMut(&mut C),
) {
    let idle_for = |c: &mut C| now.saturating_sub(c.link_mut().entry.last_input());
    let timeout = shared.settings.idle_timeout_secs;
    if timeout > 0 {
        for idx in slots.matching(|c| idle_for(c) > timeout) {
            bump(&stats.idle_kicks, 1);
            slots.close(idx, shared, CloseReason::IdleTimeout, &mut detach);
        }
    }
    for c in slots.iter_mut() {
        if idle_for(c) >= BUFFER_IDLE_SECS {
            c.release_idle();
        }
    }
    buffers::publish();
    if let Some(tls) = &shared.tls {
        let expired = |c: &mut C| {
            c.link_mut()
                .tls
                .as_ref()
                .is_some_and(|t| t.handshake_expired(now))
        };
        for idx in slots.matching(expired) {
            tls.handshake_errors.fetch_add(1, Ordering::Relaxed);
            slots.close(idx, shared, CloseReason::Error, &mut detach);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixStream;

    use super::super::slots::tests::{engine, open, TestClient};
    use super::super::Engine;
    use super::*;

    /// A worker for a server started with `args`, with `n` connections open in slots
    /// `0..n` (their peers' ends beside), and its scans, made now.
    fn worker(args: &[&str], n: usize) -> (Engine, Slots<TestClient>, Vec<UnixStream>, Scans) {
        let engine = engine(args);
        let mut slots = Slots::default();
        let peers = (0..n)
            .map(|i| {
                let (idx, peer) = open(&mut slots, &engine);
                assert_eq!(idx, Some(i));
                peer
            })
            .collect();
        let scans = Scans::new(&engine.shared);
        (engine, slots, peers, scans)
    }

    /// Move the server clock on by `secs`, as the maintenance thread's ticks would.
    fn advance(shared: &Shared, secs: i64) {
        shared.clock.resume(shared.clock.process_started() - secs);
    }

    fn idle_releases(slots: &mut Slots<TestClient>, idx: usize) -> Option<usize> {
        slots.get_mut(idx).map(|c| c.idle_releases)
    }

    #[test]
    fn nothing_is_scanned_before_the_clock_ticks() {
        let (engine, mut slots, _peers, mut scans) = worker(&["-o", "idle_timeout=1"], 1);
        scans.after_turn(&mut slots, &engine.shared, &engine.stats, |_| {});
        assert_eq!(idle_releases(&mut slots, 0), Some(0));
    }

    #[test]
    fn an_idle_connection_is_closed_past_idle_timeout_and_counted() {
        let (engine, mut slots, _peers, mut scans) = worker(&["-o", "idle_timeout=5"], 2);
        let shared = &*engine.shared;
        advance(shared, 6);
        let busy = slots.get_mut(1).expect("busy");
        busy.link.entry.touch(shared.clock.now());
        let mut detached = 0;
        scans.after_turn(&mut slots, shared, &engine.stats, |_| detached += 1);
        assert_eq!(detached, 1);
        assert!(slots.get_mut(0).is_none(), "idle for 6 s, past 5");
        assert_eq!(engine.stats.idle_kicks.load(Ordering::Relaxed), 1);
        assert_eq!(shared.curr_connections.load(Ordering::Relaxed), 1);
        // The one left received just now: its buffers stay.
        assert_eq!(idle_releases(&mut slots, 1), Some(0));
    }

    #[test]
    fn a_quiet_connection_gives_its_buffers_back_without_a_timeout() {
        let (engine, mut slots, _peers, mut scans) = worker(&[], 1);
        advance(&engine.shared, i64::from(BUFFER_IDLE_SECS));
        scans.after_turn(&mut slots, &engine.shared, &engine.stats, |_| {});
        assert_eq!(
            idle_releases(&mut slots, 0),
            Some(1),
            "still open, buffers back"
        );
        assert_eq!(engine.stats.idle_kicks.load(Ordering::Relaxed), 0);
    }
}
