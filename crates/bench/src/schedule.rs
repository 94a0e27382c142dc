//! Open-loop arrival schedule: when each request is *meant* to be sent.
//!
//! Latency in the open loop is measured from these intended times, not from
//! when the request actually left, so a stalled server (or a stalled client)
//! shows up in the tail instead of silently slowing the load: no
//! coordinated omission.

use crate::rng::Rng;

/// Inter-arrival distribution.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Arrival {
    /// Exponential gaps: a Poisson process, as Treadmill and mutilate use.
    Poisson,
    /// Equal gaps.
    Fixed,
}

/// One thread's arrivals at `rate` per second.
#[derive(Clone, Debug)]
pub struct Schedule {
    next_ns: f64,
    mean_gap_ns: f64,
    arrival: Arrival,
    rng: Rng,
}

impl Schedule {
    /// Arrivals from time 0 at `rate` per second. `phase` in `[0, 1)` shifts a
    /// fixed schedule by that fraction of a gap, so threads interleave.
    pub fn new(rate: f64, arrival: Arrival, phase: f64, seed: u64) -> Schedule {
        let mean_gap_ns = 1e9 / rate;
        let mut s = Schedule {
            next_ns: 0.0,
            mean_gap_ns,
            arrival,
            rng: Rng::new(seed),
        };
        s.next_ns = match arrival {
            Arrival::Fixed => phase * mean_gap_ns,
            Arrival::Poisson => s.gap(),
        };
        s
    }

    fn gap(&mut self) -> f64 {
        match self.arrival {
            Arrival::Fixed => self.mean_gap_ns,
            Arrival::Poisson => self.rng.exponential(self.mean_gap_ns),
        }
    }

    /// The next intended send time, in ns since the run started.
    pub fn peek(&self) -> u64 {
        self.next_ns as u64
    }

    /// Takes the next intended send time.
    pub fn pop(&mut self) -> u64 {
        let t = self.peek();
        self.next_ns += self.gap();
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gaps(s: &mut Schedule, n: usize) -> Vec<f64> {
        let mut prev = s.pop();
        (0..n)
            .map(|_| {
                let t = s.pop();
                let g = (t - prev) as f64;
                prev = t;
                g
            })
            .collect()
    }

    #[test]
    fn poisson_gaps_are_exponential() {
        let mut s = Schedule::new(100_000.0, Arrival::Poisson, 0.0, 1);
        let g = gaps(&mut s, 200_000);
        let mean = g.iter().sum::<f64>() / g.len() as f64;
        assert!((mean - 10_000.0).abs() / 10_000.0 < 0.01, "mean {mean}");
        let var = g.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / g.len() as f64;
        let cv = var.sqrt() / mean;
        assert!((cv - 1.0).abs() < 0.02, "coefficient of variation {cv}");
        // P(gap < mean) = 1 - 1/e for an exponential.
        let below = g.iter().filter(|&&x| x < mean).count() as f64 / g.len() as f64;
        assert!((below - (1.0 - (-1.0f64).exp())).abs() < 0.01, "{below}");
    }

    #[test]
    fn fixed_gaps_are_equal_and_phased() {
        let mut s = Schedule::new(1000.0, Arrival::Fixed, 0.5, 1);
        assert_eq!(s.peek(), 500_000);
        assert!(gaps(&mut s, 1000).iter().all(|&g| (g - 1e6).abs() <= 1.0));
    }

    #[test]
    fn arrivals_over_a_second_match_the_rate() {
        let mut s = Schedule::new(50_000.0, Arrival::Poisson, 0.0, 4);
        let mut n = 0;
        while s.pop() < 1_000_000_000 {
            n += 1;
        }
        assert!((n as f64 - 50_000.0).abs() < 1_000.0, "{n}");
    }
}
