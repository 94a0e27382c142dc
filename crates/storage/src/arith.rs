//! memcached `incr`/`decr` number handling, copied byte for byte from memcached 1.6.
//!
//! memcached parses a value with `safe_strtoull()` (C `strtoull` base 10, then checks),
//! applies the delta (incr wraps at 2^64, decr floors at 0) and prints the result with
//! `%llu`. If the digits fit in the old value's length they are written in place,
//! left-aligned and padded with spaces ("100" decr 1 is "99 "); otherwise a new value of
//! exactly the digits replaces it.

/// Longest decimal `u64`.
pub(crate) const MAX_DIGITS: usize = 20;

/// C `isspace` in the "C" locale.
#[inline]
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// memcached's `safe_strtoull` applied to an item's value (which in memcached is followed
/// by `\r\n`, so the end of the value counts as whitespace).
///
/// * leading C whitespace is skipped, then an optional `+` or `-`;
/// * at least one digit is needed; overflow (`ERANGE`) is non-numeric;
/// * the digits must be followed by whitespace, a NUL or the end of the value;
/// * a `-` makes the value non-numeric only when the negated result is `>= 2^63` (so "-0"
///   parses as 0, as in memcached) — that is the quirk of checking the sign only "in the
///   uncommon case when the unsigned number is so big that it's negative as a signed
///   number".
pub(crate) fn parse_u64(v: &[u8]) -> Option<u64> {
    let mut i = 0;
    while i < v.len() && is_c_space(v[i]) {
        i += 1;
    }
    let mut negative = false;
    if i < v.len() && (v[i] == b'+' || v[i] == b'-') {
        negative = v[i] == b'-';
        i += 1;
    }
    let start = i;
    let mut n: u64 = 0;
    let mut overflow = false;
    while i < v.len() && v[i].is_ascii_digit() {
        let d = u64::from(v[i] - b'0');
        match n.checked_mul(10).and_then(|x| x.checked_add(d)) {
            Some(x) => n = x,
            None => overflow = true,
        }
        i += 1;
    }
    if i == start || overflow {
        return None;
    }
    if i < v.len() && !(is_c_space(v[i]) || v[i] == 0) {
        return None;
    }
    let n = if negative { n.wrapping_neg() } else { n };
    if (n as i64) < 0 && negative {
        return None;
    }
    Some(n)
}

/// Apply a delta the memcached way.
#[inline]
pub(crate) fn apply(value: u64, delta: u64, incr: bool) -> u64 {
    if incr {
        value.wrapping_add(delta)
    } else {
        value.saturating_sub(delta)
    }
}

/// Format `n` as decimal digits into `buf`; returns the used tail of `buf`.
#[inline]
pub(crate) fn format_u64(mut n: u64, buf: &mut [u8; MAX_DIGITS]) -> &[u8] {
    let mut i = MAX_DIGITS;
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[i..]
}

/// Write `digits` into `value` in place: left-aligned, the rest padded with spaces.
/// The caller checked `digits.len() <= value.len()`.
#[inline]
pub(crate) fn write_in_place(value: &mut [u8], digits: &[u8]) {
    value[..digits.len()].copy_from_slice(digits);
    value[digits.len()..].fill(b' ');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_like_safe_strtoull() {
        assert_eq!(parse_u64(b"0"), Some(0));
        assert_eq!(parse_u64(b"42"), Some(42));
        assert_eq!(parse_u64(b"   42"), Some(42));
        assert_eq!(parse_u64(b"\t42"), Some(42));
        assert_eq!(parse_u64(b"42   "), Some(42));
        assert_eq!(parse_u64(b"99 "), Some(99));
        assert_eq!(parse_u64(b"+7"), Some(7));
        assert_eq!(parse_u64(b"5 junk"), Some(5), "strtoull stops at the space");
        assert_eq!(parse_u64(b"12\0ab"), Some(12), "NUL ends the C string");
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
    }

    #[test]
    fn rejects_non_numbers() {
        assert_eq!(parse_u64(b""), None);
        assert_eq!(parse_u64(b"   "), None);
        assert_eq!(parse_u64(b"abc"), None);
        assert_eq!(parse_u64(b"12a"), None);
        assert_eq!(parse_u64(b"-5"), None);
        assert_eq!(parse_u64(b"-"), None);
        assert_eq!(parse_u64(b"+"), None);
        assert_eq!(parse_u64(b"18446744073709551616"), None, "overflow");
        assert_eq!(parse_u64(b"000000000000000000000000000001"), Some(1));
        assert_eq!(parse_u64(b"123456789012345678901234"), None);
        assert_eq!(parse_u64(b"0x10"), None);
    }

    #[test]
    fn minus_quirks_match_memcached() {
        // strtoull negates; safe_strtoull only rejects results that look negative.
        assert_eq!(parse_u64(b"-0"), Some(0));
        assert_eq!(parse_u64(b"-18446744073709551615"), Some(1));
    }

    #[test]
    fn delta_rules() {
        assert_eq!(apply(u64::MAX, 1, true), 0);
        assert_eq!(apply(u64::MAX - 1, 3, true), 1);
        assert_eq!(apply(5, 10, false), 0);
        assert_eq!(apply(100, 1, false), 99);
    }

    #[test]
    fn formats_and_pads() {
        let mut buf = [0u8; MAX_DIGITS];
        assert_eq!(format_u64(0, &mut buf), b"0");
        assert_eq!(format_u64(u64::MAX, &mut buf), b"18446744073709551615");
        let mut v = *b"100";
        let d = format_u64(99, &mut buf);
        write_in_place(&mut v, d);
        assert_eq!(&v, b"99 ");
    }
}
