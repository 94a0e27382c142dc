//! Server-side latency: how long each request spent in the server, per command,
//! from the first byte of its batch's input to the last byte of its reply handed to
//! the kernel.
//!
//! Two halves, as the counters in `mod.rs` are split:
//! - [`Recorder`], owned by one worker and never shared: the session counts each
//!   request's command into it ([`Recorder::count`]), closes the connection's batch
//!   with the time its input arrived ([`Recorder::close`]), and the backend stamps
//!   every batch closed in a turn once, when the turn's replies go to the kernel
//!   ([`Recorder::flush`]). That is two clock reads per worker turn, none per request.
//! - [`Histograms`], one per worker, written by that worker alone (relaxed load and
//!   store, no locked instruction) and summed by whoever reads them
//!   ([`super::StatsRegistry::latency`]).
//!
//! Time is counted in ticks of 2^-30 s (0.93 ns), so that every power of two of ticks
//! is a power of two of seconds: the bucket bounds of a Prometheus native histogram of
//! schema 0, and the `le` bounds of the classic one (`ops/metrics`), are then exact
//! bounds of the buckets here. The buckets are log-linear, as HDR histograms: 16 per
//! power of two, so a bucket's bounds are within 6.25 % of each other, from 1 tick to
//! 2^40 ticks (17 minutes; longer lands in the last bucket). A bucket holds the
//! latencies `v` with `lo < v <= hi`, as Prometheus' `le` ("less or equal") needs.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// The commands timed apart, in the order of [`Command::NAMES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Command {
    /// A text `get`/`gets` of one key.
    Get,
    /// A text `get`/`gets` of several keys.
    MultiGet,
    /// The text storage commands (`set`, `add`, `replace`, `append`, `prepend`, `cas`).
    Set,
    Delete,
    /// `incr` and `decr`.
    Incr,
    /// `touch`, `gat` and `gats`.
    Touch,
    /// Every meta command (`mg`, `ms`, `md`, `ma`, `mn`, `me`).
    Meta,
    /// Every binary-protocol request.
    Binary,
    /// Everything else (`stats`, `version`, `flush_all`, ...).
    Other,
}

/// How many commands are timed apart.
pub const COMMANDS: usize = 9;

impl Command {
    /// The names `stats latency` and the metrics' `command` label use.
    pub const NAMES: [&'static str; COMMANDS] = [
        "get", "multiget", "set", "delete", "incr", "touch", "meta", "binary", "other",
    ];

    /// Every command, in order.
    pub const ALL: [Command; COMMANDS] = [
        Command::Get,
        Command::MultiGet,
        Command::Set,
        Command::Delete,
        Command::Incr,
        Command::Touch,
        Command::Meta,
        Command::Binary,
        Command::Other,
    ];

    #[must_use]
    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }
}

const SUB_BITS: u32 = 4;
const SUB: usize = 1 << SUB_BITS;
/// Ticks per second: time here is in units of 2^-30 s.
pub const TICKS_PER_SEC: u64 = 1 << 30;
/// Latencies from 2^TOP_EXP ticks up share the last bucket.
const TOP_EXP: u32 = 40;
/// Buckets per histogram: 16 exact ones below 16 ticks, then 16 per power of two.
pub const BUCKETS: usize = (TOP_EXP - SUB_BITS + 1) as usize * SUB;

/// The bucket of a latency of `t` ticks (`t - 1` is what is placed, so that a bucket's
/// upper bound belongs to it).
#[inline]
#[must_use]
pub fn bucket(t: u64) -> usize {
    let x = t.saturating_sub(1);
    if x < SUB as u64 {
        return x as usize;
    }
    let e = 63 - x.leading_zeros();
    if e >= TOP_EXP {
        return BUCKETS - 1;
    }
    (((e - SUB_BITS + 1) as usize) << SUB_BITS) + ((x >> (e - SUB_BITS)) as usize & (SUB - 1))
}

/// The largest latency, in ticks, that bucket `i` holds.
#[must_use]
pub fn upper_bound(i: usize) -> u64 {
    if i < SUB {
        return i as u64 + 1;
    }
    let e = (i >> SUB_BITS) as u32 + SUB_BITS - 1;
    let lo = ((SUB + (i & (SUB - 1))) as u64) << (e - SUB_BITS);
    lo + (1 << (e - SUB_BITS))
}

/// The monotonic clock in ticks since the first call; never 0, which [`Recorder`]
/// keeps for "no time".
#[must_use]
pub fn now_ticks() -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    let d = Instant::now().duration_since(origin);
    let sub = u64::from(d.subsec_nanos()) * TICKS_PER_SEC / 1_000_000_000;
    (d.as_secs() << 30) + sub + 1
}

/// Ticks as nanoseconds.
#[must_use]
pub fn ticks_to_ns(t: u64) -> u64 {
    (u128::from(t) * 1_000_000_000 / u128::from(TICKS_PER_SEC)) as u64
}

/// Ticks as seconds.
#[must_use]
pub fn ticks_to_secs(t: u64) -> f64 {
    t as f64 / TICKS_PER_SEC as f64
}

/// One command's histogram, written by one worker.
struct Histogram {
    buckets: Box<[AtomicU64]>,
    sum_ticks: AtomicU64,
    max_ticks: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            sum_ticks: AtomicU64::new(0),
            max_ticks: AtomicU64::new(0),
        }
    }
}

/// Add `by` to a counter this thread alone writes.
#[inline]
fn add(a: &AtomicU64, by: u64) {
    a.store(
        a.load(Ordering::Relaxed).wrapping_add(by),
        Ordering::Relaxed,
    );
}

/// A worker's histograms, one per command.
#[derive(Default)]
pub struct Histograms {
    commands: [Histogram; COMMANDS],
}

impl std::fmt::Debug for Histograms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Histograms")
    }
}

impl Histograms {
    /// Record `n` requests of `command` that took `t` ticks each. Only the owning
    /// worker calls this.
    #[inline]
    pub fn record(&self, command: Command, t: u64, n: u32) {
        let h = &self.commands[command as usize];
        add(&h.buckets[bucket(t)], u64::from(n));
        add(&h.sum_ticks, t.wrapping_mul(u64::from(n)));
        if t > h.max_ticks.load(Ordering::Relaxed) {
            h.max_ticks.store(t, Ordering::Relaxed);
        }
    }

    /// Add this worker's counts to `into`.
    pub fn add_to(&self, into: &mut [Snapshot; COMMANDS]) {
        for (h, s) in self.commands.iter().zip(into.iter_mut()) {
            for (b, t) in h.buckets.iter().zip(s.buckets.iter_mut()) {
                *t += b.load(Ordering::Relaxed);
            }
            s.sum_ticks += h.sum_ticks.load(Ordering::Relaxed);
            s.max_ticks = s.max_ticks.max(h.max_ticks.load(Ordering::Relaxed));
        }
    }

    /// `stats reset` of the maxima, from another thread: a maximum the worker writes
    /// at the same moment may survive the reset, which is harmless.
    pub fn reset_max(&self) {
        for h in &self.commands {
            h.max_ticks.store(0, Ordering::Relaxed);
        }
    }
}

/// One command's histogram summed over workers: a plain copy to read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub buckets: Vec<u64>,
    pub sum_ticks: u64,
    pub max_ticks: u64,
}

impl Default for Snapshot {
    fn default() -> Self {
        Snapshot {
            buckets: vec![0; BUCKETS],
            sum_ticks: 0,
            max_ticks: 0,
        }
    }
}

impl Snapshot {
    /// Requests recorded.
    #[must_use]
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// The `q` quantile (0 < q <= 1), in ticks: the upper bound of the bucket the
    /// request at that rank is in, so within 6.25 % above the true value; never above
    /// the maximum. 0 with nothing recorded.
    #[must_use]
    pub fn quantile(&self, q: f64) -> u64 {
        let count = self.count();
        if count == 0 {
            return 0;
        }
        let rank = ((q * count as f64).ceil() as u64).clamp(1, count);
        let mut seen = 0;
        for (i, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                let bound = upper_bound(i);
                return if self.max_ticks > 0 {
                    bound.min(self.max_ticks)
                } else {
                    bound
                };
            }
        }
        self.max_ticks
    }

    /// Requests that took at most `t` ticks, exactly where `t` is a bucket's upper
    /// bound (every power of two is), else counting the bucket `t` falls in.
    #[must_use]
    pub fn at_most(&self, t: u64) -> u64 {
        let last = bucket(t);
        self.buckets[..=last].iter().sum()
    }

    /// These counts less `base` (a `stats reset` baseline); the maximum is kept.
    #[must_use]
    pub fn since(&self, base: &Snapshot) -> Snapshot {
        Snapshot {
            buckets: self
                .buckets
                .iter()
                .zip(&base.buckets)
                .map(|(a, b)| a.saturating_sub(*b))
                .collect(),
            sum_ticks: self.sum_ticks.saturating_sub(base.sum_ticks),
            max_ticks: self.max_ticks,
        }
    }
}

/// A batch of requests closed by [`Recorder::close`]: `n` of `command`, whose input
/// arrived at `arrived`.
#[derive(Clone, Copy, Debug)]
struct Closed {
    arrived: u64,
    command: Command,
    n: u32,
}

/// One worker's requests on their way through it (see the module's comment). Not
/// shared: a worker lends it to the session in `Exec`.
#[derive(Debug, Default)]
pub struct Recorder {
    /// When the worker woke to the input it is running now.
    woke: Cell<u64>,
    /// Requests run since the last [`Recorder::close`], per command; `dirty` has a bit
    /// set for each command counted.
    counts: [Cell<u32>; COMMANDS],
    dirty: Cell<u16>,
    /// Batches whose replies are not yet handed to the kernel.
    closed: RefCell<Vec<Closed>>,
}

impl Recorder {
    /// The worker woke at `t` ([`now_ticks`]) with input to run.
    #[inline]
    pub fn woke(&self, t: u64) {
        self.woke.set(t);
    }

    /// When the worker last woke.
    #[inline]
    #[must_use]
    pub fn wake_time(&self) -> u64 {
        self.woke.get()
    }

    /// A request of `command` ran.
    #[inline(always)]
    pub fn count(&self, command: Command) {
        let c = &self.counts[command as usize];
        c.set(c.get() + 1);
        self.dirty.set(self.dirty.get() | 1 << command as u16);
    }

    /// The requests counted since the last close are one connection's, whose input
    /// arrived at `arrived`; their replies go out with the next [`Recorder::sent`].
    #[inline]
    pub fn close(&self, arrived: u64) {
        let mut dirty = self.dirty.get();
        if dirty == 0 {
            return;
        }
        self.dirty.set(0);
        let mut closed = self.closed.borrow_mut();
        while dirty != 0 {
            let i = dirty.trailing_zeros() as usize;
            dirty &= dirty - 1;
            let n = self.counts[i].replace(0);
            closed.push(Closed {
                arrived,
                command: Command::ALL[i],
                n,
            });
        }
    }

    /// Whether closed batches wait for [`Recorder::sent`].
    #[inline]
    #[must_use]
    pub fn pending(&self) -> bool {
        !self.closed.borrow().is_empty()
    }

    /// The replies of every closed batch were handed to the kernel at `now`: record
    /// them in `into`.
    pub fn sent(&self, now: u64, into: &Histograms) {
        let mut closed = self.closed.borrow_mut();
        for c in closed.drain(..) {
            into.record(c.command, now.saturating_sub(c.arrived), c.n);
        }
    }

    /// [`Recorder::sent`] now, if anything waits (a clock read only then).
    #[inline]
    pub fn flush(&self, into: &Histograms) {
        if self.pending() {
            self.sent(now_ticks(), into);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_hold_their_upper_bound() {
        let mut prev = 0;
        for i in 0..BUCKETS - 1 {
            let hi = upper_bound(i);
            assert!(hi > prev, "bucket {i}");
            assert_eq!(bucket(hi), i, "upper bound of {i} is in it");
            assert_eq!(bucket(hi + 1), i + 1, "one past it is in the next");
            // Within 1/16 of each other past the exact ones.
            if i >= SUB {
                assert!((hi - prev) * 16 <= prev + 1, "bucket {i} too wide");
            }
            prev = hi;
        }
        for k in 0..TOP_EXP {
            assert_eq!(upper_bound(bucket(1 << k)), 1 << k, "2^{k} is a bound");
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        assert_eq!(bucket(0), 0);
    }

    #[test]
    fn quantiles_and_cumulative_counts() {
        let h = Histograms::default();
        for ns in 1..=1000u64 {
            h.record(Command::Get, ns * 1000, 1);
        }
        h.record(Command::Set, 5_000, 3);
        let mut s: [Snapshot; COMMANDS] = Default::default();
        h.add_to(&mut s);
        let get = &s[Command::Get as usize];
        assert_eq!(get.count(), 1000);
        assert_eq!(get.max_ticks, 1_000_000);
        for (q, want) in [(0.5, 500_000u64), (0.99, 990_000), (0.999, 999_000)] {
            let got = get.quantile(q);
            assert!(got >= want && got <= want + want / 16, "q{q}: {got}");
        }
        assert_eq!(get.quantile(1.0), 1_000_000);
        assert_eq!(get.at_most(1 << 20), 1000);
        assert_eq!(get.at_most(1 << 19), 524);
        assert_eq!(get.sum_ticks, 1000 * 1001 / 2 * 1000);
        let set = &s[Command::Set as usize];
        assert_eq!(
            (set.count(), set.sum_ticks, set.max_ticks),
            (3, 15_000, 5_000)
        );
        let after = get.since(get);
        assert_eq!((after.count(), after.sum_ticks), (0, 0));
        assert_eq!(after.quantile(0.5), 0);
    }

    #[test]
    fn recorder_times_each_closed_batch_from_its_arrival() {
        let r = Recorder::default();
        let h = Histograms::default();
        r.count(Command::Get);
        r.count(Command::Get);
        r.count(Command::Meta);
        r.close(100);
        r.count(Command::Set);
        r.close(400);
        assert!(r.pending());
        r.sent(1_100, &h);
        assert!(!r.pending());
        let mut s: [Snapshot; COMMANDS] = Default::default();
        h.add_to(&mut s);
        assert_eq!(s[Command::Get as usize].count(), 2);
        assert_eq!(s[Command::Get as usize].max_ticks, 1_000);
        assert_eq!(s[Command::Meta as usize].sum_ticks, 1_000);
        assert_eq!(s[Command::Set as usize].max_ticks, 700);
        // Nothing counted: nothing closed.
        r.close(5);
        assert!(!r.pending());
        assert!(now_ticks() > 0);
    }
}
