//! Counters and latency histograms. Each worker thread owns a [`Stats`]; the
//! run merges them at the end (and, for the progress line, once a second).
//!
//! Latencies are recorded in nanoseconds in HDR histograms with 3
//! significant digits, so any percentile is within 0.1 % of the truth, and
//! merging is exact.

use hdrhistogram::Histogram;

/// Largest latency recorded; larger values are clamped to it.
pub const MAX_LATENCY_NS: u64 = 100_000_000_000;

/// A fresh latency histogram (1 ns to 100 s, 3 significant digits).
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_NS, 3).expect("static histogram bounds are valid")
}

/// Event counts of one thread or one server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counters {
    /// Completed requests (a multi-get is one).
    pub ops: u64,
    /// Keys in completed requests: get keys plus set keys.
    pub keys: u64,
    /// Completed get requests and the keys they asked for.
    pub gets: u64,
    pub get_keys: u64,
    /// Values returned.
    pub hits: u64,
    /// Completed set requests.
    pub sets: u64,
    /// Requests answered with an error or an unexpected reply.
    pub errors: u64,
    /// Requests answered after `--timeout`, or never answered.
    pub timeouts: u64,
    /// Open loop: arrivals not sent because `--max-outstanding` was reached.
    pub dropped: u64,
    /// Values that failed `--verify`.
    pub verify_failures: u64,
    /// UDP: reply datagrams that never arrived.
    pub lost_datagrams: u64,
    /// `--keep-going`: connections the server closed or reset mid-run.
    pub disconnects: u64,
    /// `--keep-going`: lost connections dialled again successfully.
    pub reconnects: u64,
}

impl Counters {
    pub fn add(&mut self, o: &Counters) {
        self.ops += o.ops;
        self.keys += o.keys;
        self.gets += o.gets;
        self.get_keys += o.get_keys;
        self.hits += o.hits;
        self.sets += o.sets;
        self.errors += o.errors;
        self.timeouts += o.timeouts;
        self.dropped += o.dropped;
        self.verify_failures += o.verify_failures;
        self.lost_datagrams += o.lost_datagrams;
        self.disconnects += o.disconnects;
        self.reconnects += o.reconnects;
    }

    /// Values returned per key asked for; 1.0 when no get was made.
    pub fn hit_ratio(&self) -> f64 {
        if self.get_keys == 0 {
            1.0
        } else {
            self.hits as f64 / self.get_keys as f64
        }
    }
}

/// Counters and latency for one scope (a thread, a server, or the total).
#[derive(Clone, Debug)]
pub struct Scope {
    pub counters: Counters,
    pub latency: Histogram<u64>,
}

impl Default for Scope {
    fn default() -> Self {
        Scope {
            counters: Counters::default(),
            latency: new_histogram(),
        }
    }
}

impl Scope {
    /// Records one latency sample.
    pub fn record(&mut self, latency_ns: u64) {
        self.latency
            .saturating_record(latency_ns.clamp(1, MAX_LATENCY_NS));
    }

    pub fn merge(&mut self, o: &Scope) {
        self.counters.add(&o.counters);
        self.latency
            .add(&o.latency)
            .expect("histograms share bounds");
    }

    /// Resets to empty, keeping the histogram's memory.
    pub fn reset(&mut self) {
        self.counters = Counters::default();
        self.latency.reset();
    }
}

/// Whole requests completed in one second of the measured window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Second {
    pub ops: u64,
    /// Of those, the ones that failed (an error reply, or a lost connection).
    pub errors: u64,
}

/// The statistics of a run or of one thread: the total, one scope per
/// server, and the total per second.
#[derive(Clone, Debug)]
pub struct Stats {
    pub total: Scope,
    pub servers: Vec<Scope>,
    /// Index i: requests completed i..i+1 s after the warm-up (drain included).
    pub timeline: Vec<Second>,
}

impl Stats {
    pub fn new(servers: usize) -> Stats {
        Stats {
            total: Scope::default(),
            servers: vec![Scope::default(); servers],
            timeline: Vec::new(),
        }
    }

    /// Counts a whole request completed `since_warmup_ns` into the window.
    pub fn count_second(&mut self, since_warmup_ns: u64, failed: bool) {
        let i = (since_warmup_ns / 1_000_000_000) as usize;
        if self.timeline.len() <= i {
            self.timeline.resize(i + 1, Second::default());
        }
        self.timeline[i].ops += 1;
        self.timeline[i].errors += u64::from(failed);
    }

    pub fn merge(&mut self, o: &Stats) {
        self.total.merge(&o.total);
        for (a, b) in self.servers.iter_mut().zip(&o.servers) {
            a.merge(b);
        }
        if self.timeline.len() < o.timeline.len() {
            self.timeline.resize(o.timeline.len(), Second::default());
        }
        for (a, b) in self.timeline.iter_mut().zip(&o.timeline) {
            a.ops += b.ops;
            a.errors += b.errors;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merging_histograms_is_exact() {
        let mut a = Stats::new(2);
        let mut b = Stats::new(2);
        for v in 1..=1000u64 {
            a.total.record(v * 1000);
            a.servers[0].record(v * 1000);
        }
        for v in 1001..=2000u64 {
            b.total.record(v * 1000);
            b.servers[1].record(v * 1000);
        }
        a.total.counters.ops = 1000;
        b.total.counters.ops = 1000;
        a.merge(&b);
        assert_eq!(a.total.counters.ops, 2000);
        assert_eq!(a.total.latency.len(), 2000);
        let p50 = a.total.latency.value_at_quantile(0.5) as f64;
        assert!((p50 - 1_000_000.0).abs() / 1e6 < 0.001, "{p50}");
        let p99 = a.total.latency.value_at_quantile(0.99) as f64;
        assert!((p99 - 1_980_000.0).abs() / 1.98e6 < 0.001, "{p99}");
        assert_eq!(a.servers[0].latency.len(), 1000);
        assert_eq!(a.servers[1].latency.len(), 1000);
        assert!(a.total.latency.max() >= 1_999_000);
    }

    #[test]
    fn timelines_merge_by_second() {
        let mut a = Stats::new(1);
        let mut b = Stats::new(1);
        a.count_second(100, false);
        b.count_second(2_500_000_000, true);
        b.count_second(2_600_000_000, false);
        a.merge(&b);
        let want = [
            Second { ops: 1, errors: 0 },
            Second::default(),
            Second { ops: 2, errors: 1 },
        ];
        assert_eq!(a.timeline, want);
    }

    #[test]
    fn huge_latencies_are_clamped_not_lost() {
        let mut s = Scope::default();
        s.record(u64::MAX);
        s.record(0);
        assert_eq!(s.latency.len(), 2);
    }

    #[test]
    fn hit_ratio() {
        let c = Counters {
            get_keys: 10,
            hits: 9,
            ..Counters::default()
        };
        assert!((c.hit_ratio() - 0.9).abs() < 1e-12);
        assert_eq!(Counters::default().hit_ratio(), 1.0);
    }
}
