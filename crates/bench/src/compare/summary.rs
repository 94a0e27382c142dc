//! Median and min–max spread of a figure over repetitions.
//!
//! The design quotes medians because these machines are shared and noisy:
//! one slow repetition moves the mean, not the median. The spread is shown
//! beside it so a reader can see how much to trust the difference.

use serde::Serialize;

/// One figure over the repetitions of a run.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Summary {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// How many values it summarises.
    pub n: usize,
}

impl Summary {
    /// The median (the mean of the middle two for an even count), min and
    /// max of the finite values; `None` when there are none.
    pub fn of(values: &[f64]) -> Option<Summary> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Summary {
            median,
            min: v[0],
            max: v[n - 1],
            n,
        })
    }

    /// The half-width of the spread relative to the median (0.1 = ±10 %).
    pub fn relative_spread(&self) -> f64 {
        if self.median == 0.0 {
            0.0
        } else {
            (self.max - self.min) / 2.0 / self.median.abs()
        }
    }
}

/// The median of a summary, if there is one.
pub fn median(s: Option<Summary>) -> Option<f64> {
    s.map(|s| s.median)
}

/// `a / b`, or `None` when `b` is zero or either is not finite.
pub fn ratio(a: f64, b: f64) -> Option<f64> {
    let r = a / b;
    (b != 0.0 && r.is_finite()).then_some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        let s = Summary::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.n), (2.0, 1.0, 3.0, 3));
        let s = Summary::of(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.n), (2.5, 1.0, 4.0, 4));
        let s = Summary::of(&[7.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (7.0, 7.0, 7.0));
    }

    #[test]
    fn an_outlier_moves_the_spread_not_the_median() {
        let s = Summary::of(&[10.0, 11.0, 10.5, 1000.0, 10.2]).unwrap();
        assert_eq!(s.median, 10.5);
        assert_eq!((s.min, s.max), (10.0, 1000.0));
    }

    #[test]
    fn empty_and_non_finite_values() {
        assert_eq!(Summary::of(&[]), None);
        assert_eq!(Summary::of(&[f64::NAN]), None);
        let s = Summary::of(&[f64::INFINITY, 2.0, f64::NAN, 4.0]).unwrap();
        assert_eq!((s.median, s.n), (3.0, 2));
    }

    #[test]
    fn relative_spread_and_ratio() {
        let s = Summary::of(&[9.0, 10.0, 11.0]).unwrap();
        assert!((s.relative_spread() - 0.1).abs() < 1e-12);
        assert_eq!(ratio(3.0, 2.0), Some(1.5));
        assert_eq!(ratio(3.0, 0.0), None);
        assert_eq!(ratio(f64::NAN, 1.0), None);
    }
}
