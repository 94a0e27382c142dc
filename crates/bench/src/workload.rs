//! Workload generation: key and value sizes, key choice (uniform or Zipf),
//! the get:set mix, multi-get batches and the "overwrite the oldest key" mode.
//!
//! Keys are numbers rendered as `k` + zero-padded decimal, so a key index
//! always maps to the same bytes and no key table is stored:
//!
//! ```text
//!   index 42, key size 20  ->  "k0000000000000000042"
//! ```
//!
//! Each client session owns an [`OpGen`] with its own RNG; the shared
//! [`Workload`] is read-only.

use std::ops::Range;
use std::str::FromStr;

use anyhow::{bail, Context};

use crate::rng::Rng;

/// memcached's longest key.
pub const MAX_KEY_BYTES: usize = 250;

/// A size distribution: `20`, `4-100` (uniform), or weighted classes
/// `4-100:0.6,1024-2048:0.3,5120-20480:0.1`.
#[derive(Clone, Debug, PartialEq)]
pub struct SizeDist {
    /// (low, high inclusive, cumulative weight ending at 1.0).
    classes: Vec<(usize, usize, f64)>,
}

impl SizeDist {
    /// Every size is `n`.
    pub fn fixed(n: usize) -> SizeDist {
        SizeDist {
            classes: vec![(n, n, 1.0)],
        }
    }

    /// Draws one size.
    pub fn sample(&self, rng: &mut Rng) -> usize {
        let class = if self.classes.len() == 1 {
            self.classes[0]
        } else {
            let u = rng.unit();
            *self
                .classes
                .iter()
                .find(|c| u < c.2)
                .unwrap_or(&self.classes[self.classes.len() - 1])
        };
        class.0 + rng.below((class.1 - class.0 + 1) as u64) as usize
    }

    /// The fixed size, if there is only one.
    pub fn as_fixed(&self) -> Option<usize> {
        match self.classes.as_slice() {
            [(lo, hi, _)] if lo == hi => Some(*lo),
            _ => None,
        }
    }

    /// The largest size it can draw.
    pub fn max(&self) -> usize {
        self.classes.iter().map(|c| c.1).max().unwrap_or(0)
    }

    /// The smallest size it can draw.
    pub fn min(&self) -> usize {
        self.classes.iter().map(|c| c.0).min().unwrap_or(0)
    }

    /// The same distribution with every size raised to at least `floor`.
    pub fn at_least(&self, floor: usize) -> SizeDist {
        let classes = self
            .classes
            .iter()
            .map(|&(lo, hi, w)| (lo.max(floor), hi.max(floor), w))
            .collect();
        SizeDist { classes }
    }
}

impl FromStr for SizeDist {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<SizeDist> {
        let parse_range = |r: &str| -> anyhow::Result<(usize, usize)> {
            let (lo, hi) = r.split_once('-').unwrap_or((r, r));
            let lo: usize = lo
                .trim()
                .parse()
                .with_context(|| format!("bad size {lo:?}"))?;
            let hi: usize = hi
                .trim()
                .parse()
                .with_context(|| format!("bad size {hi:?}"))?;
            if lo > hi {
                bail!("size range {r:?} is empty");
            }
            Ok((lo, hi))
        };
        let mut raw = Vec::new();
        for part in s.split(',') {
            let (range, weight) = match part.split_once(':') {
                Some((r, w)) => (
                    r,
                    w.trim()
                        .parse::<f64>()
                        .with_context(|| format!("bad weight {w:?}"))?,
                ),
                None => (part, 1.0),
            };
            if !(weight > 0.0 && weight.is_finite()) {
                bail!("weight in {part:?} must be positive");
            }
            let (lo, hi) = parse_range(range)?;
            raw.push((lo, hi, weight));
        }
        let total: f64 = raw.iter().map(|c| c.2).sum();
        let mut cumulative = 0.0;
        let classes = raw
            .into_iter()
            .map(|(lo, hi, w)| {
                cumulative += w / total;
                (lo, hi, cumulative)
            })
            .collect();
        Ok(SizeDist { classes })
    }
}

/// How keys are chosen within a key range.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KeyDist {
    Uniform,
    /// Zipf with exponent `s`: key rank `k` has probability ∝ `k^-s`.
    Zipf(f64),
}

impl FromStr for KeyDist {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<KeyDist> {
        match s.split_once(':') {
            None if s == "uniform" => Ok(KeyDist::Uniform),
            Some(("zipf", exp)) => {
                let exp: f64 = exp
                    .parse()
                    .with_context(|| format!("bad Zipf exponent {exp:?}"))?;
                if !(exp > 0.0 && exp.is_finite()) {
                    bail!("Zipf exponent must be positive");
                }
                Ok(KeyDist::Zipf(exp))
            }
            _ => bail!("key distribution must be `uniform` or `zipf:S`, not {s:?}"),
        }
    }
}

/// Which key a set writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SetMode {
    /// A key drawn like a get's.
    Random,
    /// The oldest-written key of the session's own range, cycling through it
    /// (the Solarflare mixed test).
    Oldest,
}

/// Zipf sampler over ranks `1..=n` by rejection-inversion (Hörmann and
/// Derflinger, 1996): O(1) memory and time, any exponent `s > 0`.
#[derive(Clone, Debug)]
pub struct Zipf {
    n: f64,
    s: f64,
    h_integral_x1: f64,
    h_integral_n: f64,
    threshold: f64,
}

impl Zipf {
    pub fn new(n: u64, s: f64) -> Zipf {
        let mut z = Zipf {
            n: n as f64,
            s,
            h_integral_x1: 0.0,
            h_integral_n: 0.0,
            threshold: 0.0,
        };
        z.h_integral_x1 = z.h_integral(1.5) - 1.0;
        z.h_integral_n = z.h_integral(z.n + 0.5);
        z.threshold = 2.0 - z.h_integral_inverse(z.h_integral(2.5) - z.h(2.0));
        z
    }

    /// A rank in `1..=n`.
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        loop {
            let u = self.h_integral_n + rng.unit() * (self.h_integral_x1 - self.h_integral_n);
            let x = self.h_integral_inverse(u);
            let k = (x + 0.5).floor().clamp(1.0, self.n);
            if k - x <= self.threshold || u >= self.h_integral(k + 0.5) - self.h(k) {
                return k as u64;
            }
        }
    }

    fn h(&self, x: f64) -> f64 {
        (-self.s * x.ln()).exp()
    }

    fn h_integral(&self, x: f64) -> f64 {
        let log_x = x.ln();
        helper2((1.0 - self.s) * log_x) * log_x
    }

    fn h_integral_inverse(&self, x: f64) -> f64 {
        let t = (x * (1.0 - self.s)).max(-1.0);
        (helper1(t) * x).exp()
    }
}

/// `ln(1+x)/x`, continuous at 0.
fn helper1(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

/// `(e^x-1)/x`, continuous at 0.
fn helper2(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x))
    }
}

/// Renders key `index` with the size the workload gives it into `buf`;
/// returns the key's length.
pub fn write_key(index: u64, key_size: &SizeDist, buf: &mut [u8; MAX_KEY_BYTES]) -> usize {
    let size = match key_size.as_fixed() {
        Some(n) => n,
        // A key's size must not change between its set and its gets, so it
        // is drawn from a generator seeded by the key itself.
        None => key_size.sample(&mut Rng::new(index)),
    };
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(index).as_bytes();
    let len = size.clamp(1 + digits.len(), MAX_KEY_BYTES);
    buf[0] = b'k';
    let pad = len - 1 - digits.len();
    buf[1..1 + pad].fill(b'0');
    buf[1 + pad..len].copy_from_slice(digits);
    len
}

/// Get or set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    Get,
    Set,
}

/// The read-only description of what to send.
#[derive(Clone, Debug)]
pub struct Workload {
    pub key_size: SizeDist,
    pub value_size: SizeDist,
    /// Get and set weights: `9:1` sends nine get keys per set.
    pub get_weight: u32,
    pub set_weight: u32,
    /// Keys per get request.
    pub batch: usize,
    pub key_dist: KeyDist,
    pub set_mode: SetMode,
}

/// One session's generator of operations.
#[derive(Clone, Debug)]
pub struct OpGen {
    rng: Rng,
    /// Keys that gets (and random sets) choose from.
    keys: Range<u64>,
    /// The session's own keys, which `SetMode::Oldest` cycles through.
    own: Range<u64>,
    zipf: Option<Zipf>,
    oldest: u64,
    /// Sets owed by earlier multi-gets, to keep the key ratio.
    set_credit: f64,
    pending_sets: u32,
}

impl OpGen {
    /// A generator choosing keys in `keys`, overwriting in `own` (both non-empty).
    pub fn new(workload: &Workload, keys: Range<u64>, own: Range<u64>, seed: u64) -> OpGen {
        let n = keys.end - keys.start;
        let zipf = match workload.key_dist {
            KeyDist::Zipf(s) => Some(Zipf::new(n, s)),
            KeyDist::Uniform => None,
        };
        OpGen {
            rng: Rng::new(seed),
            keys,
            own,
            zipf,
            oldest: 0,
            set_credit: 0.0,
            pending_sets: 0,
        }
    }

    /// The generator's RNG, for value sizes and contents.
    pub fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }

    /// Draws a key index.
    pub fn key(&mut self) -> u64 {
        let offset = match &self.zipf {
            Some(z) => z.sample(&mut self.rng) - 1,
            None => self.rng.below(self.keys.end - self.keys.start),
        };
        self.keys.start + offset
    }

    /// Chooses the next operation and puts its key indices in `keys`.
    ///
    /// With `batch == 1`, each request is a set with probability
    /// `set/(get+set)`. With multi-gets the ratio holds per key: after a
    /// `batch`-key get come `batch*set/get` single sets on average, carried
    /// over as a fraction (48 keys at 9:1 gives 5, 5, 6, ... sets).
    pub fn next_op(&mut self, w: &Workload, keys: &mut Vec<u64>) -> OpKind {
        keys.clear();
        let kind = if self.pending_sets > 0 {
            self.pending_sets -= 1;
            OpKind::Set
        } else if w.get_weight == 0 {
            OpKind::Set
        } else if w.batch <= 1 {
            let p_set = f64::from(w.set_weight) / f64::from(w.get_weight + w.set_weight);
            if self.rng.unit() < p_set {
                OpKind::Set
            } else {
                OpKind::Get
            }
        } else {
            self.set_credit += w.batch as f64 * f64::from(w.set_weight) / f64::from(w.get_weight);
            self.pending_sets = self.set_credit as u32;
            self.set_credit -= f64::from(self.pending_sets);
            OpKind::Get
        };
        match kind {
            OpKind::Get => {
                for _ in 0..w.batch.max(1) {
                    let k = self.key();
                    keys.push(k);
                }
            }
            OpKind::Set => {
                let k = match w.set_mode {
                    SetMode::Random => self.key(),
                    SetMode::Oldest => {
                        let k = self.own.start + self.oldest;
                        self.oldest = (self.oldest + 1) % (self.own.end - self.own.start);
                        k
                    }
                };
                keys.push(k);
            }
        }
        kind
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(get: u32, set: u32, batch: usize) -> Workload {
        Workload {
            key_size: SizeDist::fixed(20),
            value_size: SizeDist::fixed(20),
            get_weight: get,
            set_weight: set,
            batch,
            key_dist: KeyDist::Uniform,
            set_mode: SetMode::Random,
        }
    }

    #[test]
    fn size_dist_parses_and_samples_within_classes() {
        assert_eq!("20".parse::<SizeDist>().unwrap(), SizeDist::fixed(20));
        let d: SizeDist = "4-100:0.6,1024-2048:0.3,5120-20480:0.1".parse().unwrap();
        assert_eq!((d.min(), d.max()), (4, 20480));
        let mut rng = Rng::new(3);
        let mut counts = [0u32; 3];
        for _ in 0..100_000 {
            let s = d.sample(&mut rng);
            let class = match s {
                4..=100 => 0,
                1024..=2048 => 1,
                5120..=20480 => 2,
                _ => panic!("size {s} outside every class"),
            };
            counts[class] += 1;
        }
        let share = |c: u32| f64::from(c) / 100_000.0;
        assert!((share(counts[0]) - 0.6).abs() < 0.01, "{counts:?}");
        assert!((share(counts[1]) - 0.3).abs() < 0.01, "{counts:?}");
        assert!("5-4".parse::<SizeDist>().is_err());
        assert!("4-5:0".parse::<SizeDist>().is_err());
        assert!("x".parse::<SizeDist>().is_err());
    }

    #[test]
    fn keys_have_their_size_and_are_distinct() {
        let mut buf = [0; MAX_KEY_BYTES];
        let len = write_key(42, &SizeDist::fixed(20), &mut buf);
        assert_eq!(&buf[..len], b"k0000000000000000042");
        let len = write_key(123456, &SizeDist::fixed(3), &mut buf);
        assert_eq!(&buf[..len], b"k123456", "too short a size grows to fit");
        let var: SizeDist = "10-40".parse().unwrap();
        let a = write_key(7, &var, &mut buf);
        let key_a = buf[..a].to_vec();
        let again = write_key(7, &var, &mut buf);
        assert_eq!(&buf[..again], key_a.as_slice(), "stable per index");
        assert!((10..=40).contains(&a));
    }

    #[test]
    fn ratio_holds_for_single_requests() {
        let w = workload(9, 1, 1);
        let mut gen = OpGen::new(&w, 0..1000, 0..1000, 1);
        let mut keys = Vec::new();
        let sets = (0..100_000)
            .filter(|_| gen.next_op(&w, &mut keys) == OpKind::Set)
            .count();
        assert!((sets as f64 / 100_000.0 - 0.1).abs() < 0.005, "{sets}");
    }

    #[test]
    fn multiget_ratio_holds_per_key_with_five_or_six_sets() {
        let w = workload(9, 1, 48);
        let mut gen = OpGen::new(&w, 0..1000, 0..1000, 1);
        let mut keys = Vec::new();
        let (mut get_keys, mut sets, mut run) = (0, 0, 0);
        let mut runs = Vec::new();
        for _ in 0..10_000 {
            match gen.next_op(&w, &mut keys) {
                OpKind::Get => {
                    assert_eq!(keys.len(), 48);
                    get_keys += 48;
                    if get_keys > 48 {
                        runs.push(run);
                    }
                    run = 0;
                }
                OpKind::Set => {
                    assert_eq!(keys.len(), 1);
                    sets += 1;
                    run += 1;
                }
            }
        }
        assert!(runs.iter().all(|r| *r == 5 || *r == 6), "{runs:?}");
        assert!((get_keys as f64 / sets as f64 - 9.0).abs() < 0.05);
    }

    #[test]
    fn only_gets_and_only_sets() {
        let mut keys = Vec::new();
        let w = workload(1, 0, 1);
        let mut gen = OpGen::new(&w, 0..10, 0..10, 1);
        assert!((0..1000).all(|_| gen.next_op(&w, &mut keys) == OpKind::Get));
        let w = workload(0, 1, 4);
        let mut gen = OpGen::new(&w, 0..10, 0..10, 1);
        assert!((0..1000).all(|_| gen.next_op(&w, &mut keys) == OpKind::Set));
    }

    #[test]
    fn oldest_mode_cycles_through_own_keys() {
        let mut w = workload(0, 1, 1);
        w.set_mode = SetMode::Oldest;
        let mut gen = OpGen::new(&w, 0..1000, 100..103, 1);
        let mut keys = Vec::new();
        let seen: Vec<u64> = (0..7)
            .map(|_| {
                gen.next_op(&w, &mut keys);
                keys[0]
            })
            .collect();
        assert_eq!(seen, [100, 101, 102, 100, 101, 102, 100]);
    }

    #[test]
    fn zipf_follows_power_law() {
        let (n, s) = (1000u64, 0.99);
        let z = Zipf::new(n, s);
        let mut rng = Rng::new(9);
        let mut counts = vec![0u64; n as usize + 1];
        let draws = 1_000_000;
        for _ in 0..draws {
            let k = z.sample(&mut rng);
            assert!((1..=n).contains(&k));
            counts[k as usize] += 1;
        }
        let harmonic: f64 = (1..=n).map(|k| (k as f64).powf(-s)).sum();
        for k in [1usize, 2, 10, 100] {
            let expected = (k as f64).powf(-s) / harmonic;
            let got = counts[k] as f64 / draws as f64;
            assert!(
                (got - expected).abs() / expected < 0.05,
                "rank {k}: {got} vs {expected}"
            );
        }
    }

    #[test]
    fn key_dist_parses() {
        assert_eq!("uniform".parse::<KeyDist>().unwrap(), KeyDist::Uniform);
        assert_eq!("zipf:0.99".parse::<KeyDist>().unwrap(), KeyDist::Zipf(0.99));
        assert!("zipf:-1".parse::<KeyDist>().is_err());
        assert!("normal".parse::<KeyDist>().is_err());
    }
}
