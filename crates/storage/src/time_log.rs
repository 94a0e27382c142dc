//! From CAS ids to seconds: memcached's per-item `time` without four bytes per item.
//!
//! memcached stamps every item with the second it was stored (`it->time`), for
//! `flush_all` and for the `la` (last access) of meta and `lru_crawler metadump`. Here a
//! CAS id is taken when an item's space is reserved, and ids only grow, so the second
//! of any id can be found from the first id taken in each second. This log keeps those
//! pairs; a store notes a new one the first time it sees the clock move (one relaxed load
//! and compare per id otherwise).
//!
//! Once it holds more than [`KEEP`] pairs (and twice what it held after the last time),
//! it is thinned by age: the last half hour keeps every second, the last nine hours one
//! pair per 16 s, the last six days one per 256 s, and older seconds one per 4096 s (a few
//! thousand pairs a year). A thinned second maps to the first kept one before it, so an
//! item's `la` is then a little larger than memcached's, never smaller. `flush_all` with a delay does not
//! depend on that: the first id of the second after `oldest_live` is caught as it is
//! noted ([`TimeLog::set_flush`]).
//!
//! Two stores racing across a second boundary may be placed in either second, as
//! memcached's own `current_time`, read by each worker at a different moment, does.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

/// Pairs kept before the log is first thinned.
const KEEP: usize = 4096;

/// Seconds per pair kept for pairs `age` seconds old.
fn granularity(age: u32) -> u32 {
    match age {
        0..2048 => 1,
        2048..32_768 => 16,
        32_768..524_288 => 256,
        _ => 4096,
    }
}

pub(crate) struct TimeLog {
    /// The latest second noted; read by every id taken.
    last: AtomicU32,
    /// The first id taken after the pending `flush_all`'s `oldest_live`, or 0 while no
    /// id was taken after it.
    flush_cas: AtomicU64,
    inner: Mutex<Inner>,
}

struct Inner {
    /// (second, first id taken in it or later), both increasing.
    marks: Vec<(u32, u64)>,
    /// The `oldest_live` whose next second is watched, or 0.
    flush_after: u32,
    /// Thin the log when it grows past this many pairs.
    thin_at: usize,
}

impl TimeLog {
    pub fn new() -> TimeLog {
        TimeLog {
            last: AtomicU32::new(0),
            flush_cas: AtomicU64::new(0),
            inner: Mutex::new(Inner {
                marks: vec![(0, 0)],
                flush_after: 0,
                thin_at: KEEP,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Id `cas` was taken at second `now`.
    #[inline(always)]
    pub fn note(&self, now: u32, cas: u64) {
        if self.last.load(Ordering::Relaxed) < now {
            self.note_new_second(now, cas);
        }
    }

    #[cold]
    #[inline(never)]
    fn note_new_second(&self, now: u32, cas: u64) {
        let mut inner = self.lock();
        let &(second, first) = inner.marks.last().expect("never empty");
        if second >= now {
            return;
        }
        // A racing thread may have taken a smaller id in this second and noted nothing
        // yet: ids in the log must grow, so that one is counted in the earlier second.
        let cas = cas.max(first);
        inner.marks.push((now, cas));
        if inner.flush_after != 0
            && now > inner.flush_after
            && self.flush_cas.load(Ordering::Relaxed) == 0
        {
            self.flush_cas.store(cas, Ordering::Release);
        }
        if inner.marks.len() > inner.thin_at {
            // Keep the first pair of each bucket of its age's granularity.
            let mut last = None;
            inner.marks.retain(|&(second, _)| {
                let g = granularity(now - second);
                let bucket = Some((g, second / g));
                let keep = bucket != last;
                last = bucket;
                keep
            });
            inner.thin_at = (inner.marks.len() * 2).max(KEEP);
        }
        self.last.store(now, Ordering::Relaxed);
    }

    /// The second id `cas` was taken in (as far as the log still knows).
    pub fn time_of(&self, cas: u64) -> u32 {
        let inner = self.lock();
        let at = inner.marks.partition_point(|&(_, first)| first <= cas);
        inner.marks[at.saturating_sub(1)].0
    }

    /// A `flush_all` made `oldest_live` the second up to which items are flushed, at
    /// second `now`, when the next id to be taken is `next`.
    pub fn set_flush(&self, oldest_live: u32, now: u32, next: u64) {
        let mut inner = self.lock();
        inner.flush_after = oldest_live;
        let known = if oldest_live < now {
            // Past already: the first id of a later second, or if none was taken since,
            // the next one.
            let at = inner
                .marks
                .partition_point(|&(second, _)| second <= oldest_live);
            inner.marks.get(at).map_or(next, |&(_, first)| first)
        } else {
            0
        };
        self.flush_cas.store(known, Ordering::Release);
    }

    /// Items whose id is below this were stored at or before the flush's `oldest_live`
    /// (once `oldest_live` has passed): `u64::MAX` while no id was taken after it.
    #[inline]
    pub fn flush_boundary(&self) -> u64 {
        match self.flush_cas.load(Ordering::Acquire) {
            0 => u64::MAX,
            cas => cas,
        }
    }
}

/// What a memory image keeps of a [`TimeLog`] (`store/image.rs`): all of it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TimeLogState {
    pub last: u32,
    pub flush_cas: u64,
    pub marks: Vec<(u32, u64)>,
    pub flush_after: u32,
    pub thin_at: usize,
}

impl TimeLog {
    /// The whole log, for a memory image.
    pub fn export(&self) -> TimeLogState {
        let inner = self.lock();
        TimeLogState {
            last: self.last.load(Ordering::Relaxed),
            flush_cas: self.flush_cas.load(Ordering::Acquire),
            marks: inner.marks.clone(),
            flush_after: inner.flush_after,
            thin_at: inner.thin_at,
        }
    }

    /// Put back a log [`TimeLog::export`] gave; false (nothing changed) when it is not
    /// one a log could hold: no pairs, or seconds or ids that do not grow.
    pub fn restore(&self, state: TimeLogState) -> bool {
        let grows = state
            .marks
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1);
        if state.marks.is_empty() || !grows {
            return false;
        }
        let mut inner = self.lock();
        inner.marks = state.marks;
        inner.flush_after = state.flush_after;
        inner.thin_at = state.thin_at.max(KEEP);
        self.flush_cas.store(state.flush_cas, Ordering::Release);
        self.last.store(state.last, Ordering::Relaxed);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_map_back_to_their_seconds() {
        let log = TimeLog::new();
        log.note(5, 10);
        log.note(5, 11);
        log.note(7, 20);
        log.note(6, 19); // a late racer: its second is already past
        assert_eq!(log.time_of(9), 0);
        assert_eq!(log.time_of(10), 5);
        assert_eq!(log.time_of(19), 5);
        assert_eq!(log.time_of(20), 7);
        assert_eq!(log.time_of(u64::MAX), 7);
    }

    #[test]
    fn a_delayed_flush_catches_the_first_id_after_it() {
        let log = TimeLog::new();
        log.note(3, 5);
        log.set_flush(4, 3, 6);
        assert_eq!(log.flush_boundary(), u64::MAX);
        log.note(4, 8);
        assert_eq!(log.flush_boundary(), u64::MAX, "second 4 is still flushed");
        log.note(5, 12);
        assert_eq!(log.flush_boundary(), 12);
        // A flush of a past second finds its boundary in the log, or takes the next id.
        log.set_flush(4, 9, 30);
        assert_eq!(log.flush_boundary(), 12);
        log.set_flush(8, 9, 30);
        assert_eq!(log.flush_boundary(), 30);
    }

    #[test]
    fn the_log_stays_bounded_and_keeps_recent_seconds_exact() {
        let log = TimeLog::new();
        for s in 1..=20_000u32 {
            log.note(s, u64::from(s) * 10);
        }
        assert!(log.lock().marks.len() <= 2 * KEEP);
        for s in 20_001..=40_000u32 {
            log.note(s, u64::from(s) * 10);
        }
        assert!(log.lock().marks.len() <= 2 * KEEP);
        assert_eq!(log.time_of(399_990), 39_999);
        assert_eq!(log.time_of(400_000), 40_000);
        // Older ids map to a second at or before their own, within its granularity.
        let t = log.time_of(50_005);
        assert!(t <= 5_000 && t > 5_000 - 256, "{t}");
        let t = log.time_of(300_005);
        assert!(t <= 30_000 && t > 30_000 - 16, "{t}");
    }
}
