//! A command line memcached would refuse: its message and exit status, and the C number
//! readers (`atoi`, `atof`, `safe_strtoul`, ...) whose leniency decides what it accepts.

/// memcached's `return 1` from its option loop.
pub const EXIT_FAILURE: i32 = 1;
/// sysexits.h `EX_USAGE`: memcached's checks after the option loop.
pub const EX_USAGE: i32 = 64;
/// sysexits.h `EX_NOUSER`: `-u` names no user.
pub const EX_NOUSER: i32 = 67;
/// sysexits.h `EX_OSERR`: a start that fails (a bind, a limit).
pub const EX_OSERR: i32 = 71;

/// A refused start: `main` prints `message` as it is (memcached prefixes nothing) and
/// exits with `status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: i32,
    pub message: String,
}

impl Refusal {
    pub fn new(status: i32, message: impl Into<String>) -> Refusal {
        Refusal {
            status,
            message: message.into(),
        }
    }

    /// `return 1` from memcached's option loop.
    pub fn failure(message: impl Into<String>) -> Refusal {
        Refusal::new(EXIT_FAILURE, message)
    }

    /// `exit(EX_USAGE)`.
    pub fn usage(message: impl Into<String>) -> Refusal {
        Refusal::new(EX_USAGE, message)
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Refusal {}

/// The leading number of `s` as C's `atoi` reads it: leading blanks, a sign, digits,
/// and 0 when there are none. Out of `int` range, glibc's `strtol` clamps to `long` and
/// the cast to `int` wraps; saturating to `int` here differs only past 2^31.
#[must_use]
pub fn atoi(s: &str) -> i64 {
    let t = s.trim_start();
    let (neg, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let mut n: i64 = 0;
    for b in digits.bytes().take_while(u8::is_ascii_digit) {
        n = (n * 10 + i64::from(b - b'0')).min(i64::from(i32::MAX) + 1);
    }
    let n = if neg { -n } else { n };
    n.clamp(i64::from(i32::MIN), i64::from(i32::MAX))
}

/// C's `atof`: the longest leading float, 0 when there is none.
#[must_use]
pub fn atof(s: &str) -> f64 {
    let t = s.trim_start();
    (1..=t.len())
        .rev()
        .filter(|&n| t.is_char_boundary(n))
        .find_map(|n| t[..n].parse::<f64>().ok())
        .unwrap_or(0.0)
}

/// memcached's `safe_strtoul`: a whole number that fits 32 bits, nothing but blanks after
/// it, and no minus sign.
#[must_use]
pub fn safe_strtoul(s: &str) -> Option<u32> {
    let t = s.trim_start();
    let t = t.strip_prefix('+').unwrap_or(t);
    let end = t.bytes().take_while(u8::is_ascii_digit).count();
    if end == 0 || !t[end..].trim().is_empty() {
        return None;
    }
    t[..end].parse().ok()
}

/// memcached's `safe_strtol`: a signed number that fits 32 bits, blanks after it at most.
#[must_use]
pub fn safe_strtol(s: &str) -> Option<i32> {
    let t = s.trim();
    let digits = t.strip_prefix(['-', '+']).unwrap_or(t);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    t.parse().ok()
}

/// memcached's `safe_strtod`: a float, blanks after it at most.
#[must_use]
pub fn safe_strtod(s: &str) -> Option<f64> {
    s.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_number_readers() {
        assert_eq!(atoi("64m"), 64);
        assert_eq!(atoi(" -1"), -1);
        assert_eq!(atoi("abc"), 0);
        assert_eq!(atoi("99999999999"), i64::from(i32::MAX));
        assert_eq!(atof("1.5x"), 1.5);
        assert_eq!(atof("x"), 0.0);
        assert_eq!(safe_strtoul("12"), Some(12));
        assert_eq!(safe_strtoul("12k"), None);
        assert_eq!(safe_strtoul("-1"), None);
        assert_eq!(safe_strtol("-5"), Some(-5));
        assert_eq!(safe_strtol("5x"), None);
    }
}
