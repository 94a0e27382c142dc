//! Lexing of text-protocol lines: splitting a line into tokens on spaces, as
//! memcached's `tokenize_command` does, and reading numbers with the semantics
//! of memcached's `safe_strto*` helpers, which wrap C's `strtoul`/`strtol`,
//! including their quirks (leading whitespace and `+` accepted, 32-bit
//! truncation of 64-bit results); see `docs/protocol.md`.
//!
//! Nothing here knows a command: the parsers of text and meta commands, built
//! on top of this, decide what the tokens mean.

/// memcached's `MAX_TOKENS`: 23 real tokens plus the terminal one.
pub const MAX_TOKENS: usize = 24;

/// The tokens of (a part of) one line, as byte ranges into that line.
#[derive(Clone, Debug)]
pub struct Tokens<'a> {
    line: &'a [u8],
    spans: [(u32, u32); MAX_TOKENS],
    len: usize,
    /// Start of the text not yet tokenized, when the token limit was hit.
    rest: Option<usize>,
}

impl<'a> Tokens<'a> {
    /// Split `line[from..]` on spaces, at most `MAX_TOKENS - 1` tokens.
    #[must_use]
    pub fn new(line: &'a [u8], from: usize) -> Self {
        let mut t = Tokens {
            line,
            spans: [(0, 0); MAX_TOKENS],
            len: 0,
            rest: None,
        };
        let mut s = from;
        let mut i = from;
        while i < line.len() {
            if line[i] == b' ' {
                if s != i {
                    t.spans[t.len] = (s as u32, i as u32);
                    t.len += 1;
                    if t.len == MAX_TOKENS - 1 {
                        if i + 1 < line.len() {
                            t.rest = Some(i + 1);
                        }
                        return t;
                    }
                }
                s = i + 1;
            }
            i += 1;
        }
        if s != i {
            t.spans[t.len] = (s as u32, i as u32);
            t.len += 1;
        }
        t
    }

    /// Number of real tokens (memcached's `ntokens` is this plus one).
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the line held no token at all.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Token `i`; an empty slice past the end (like memcached's terminal token).
    #[must_use]
    pub fn get(&self, i: usize) -> &'a [u8] {
        if i < self.len {
            let (s, e) = self.spans[i];
            &self.line[s as usize..e as usize]
        } else {
            &[]
        }
    }

    /// memcached's `set_noreply_maybe`: is the last token `noreply`?
    #[must_use]
    pub fn last_is_noreply(&self) -> bool {
        self.len > 0 && self.get(self.len - 1) == b"noreply"
    }

    /// Where the untokenized remainder starts, if the token limit was hit.
    #[must_use]
    pub fn rest(&self) -> Option<usize> {
        self.rest
    }

    /// Offset just past token `i` in the line (`i` below [`Tokens::len`]).
    #[inline]
    pub(crate) fn token_end(&self, i: usize) -> usize {
        self.spans[i].1 as usize
    }
}

// ---------------------------------------------------------------------------
// Numbers, with the semantics of C's strtoull/strtol as memcached uses them.

fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')
}

/// The shared front end of C's `strtoull`/`strtol` in base 10: skip
/// whitespace, take an optional sign, then digits. Returns the sign, the
/// magnitude (saturated at `u128::MAX` far past any range we check) and the
/// index where parsing stopped (0 when no digit was found).
fn c_scan(s: &[u8]) -> (bool, u128, usize) {
    let mut i = 0;
    while i < s.len() && is_c_space(s[i]) {
        i += 1;
    }
    let mut negative = false;
    if i < s.len() && (s[i] == b'+' || s[i] == b'-') {
        negative = s[i] == b'-';
        i += 1;
    }
    let digits_start = i;
    let mut magnitude: u128 = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        magnitude = magnitude
            .saturating_mul(10)
            .saturating_add(u128::from(s[i] - b'0'));
        i += 1;
    }
    if i == digits_start {
        return (false, 0, 0);
    }
    (negative, magnitude, i)
}

/// The common tail of memcached's `safe_strto*`: the number must be followed
/// by whitespace or the end of the token.
fn accept_end(s: &[u8], end: usize) -> bool {
    end != 0 && (end == s.len() || is_c_space(s[end]))
}

/// memcached's `safe_strtoull`.
#[must_use]
pub fn safe_strtoull(s: &[u8]) -> Option<u64> {
    let (negative, magnitude, end) = c_scan(s);
    // strtoull sets ERANGE when the magnitude exceeds u64.
    if !accept_end(s, end) || magnitude > u128::from(u64::MAX) {
        return None;
    }
    let v = if negative {
        (magnitude as u64).wrapping_neg()
    } else {
        magnitude as u64
    };
    if (v as i64) < 0 && s.contains(&b'-') {
        return None;
    }
    Some(v)
}

/// memcached's `safe_strtoul`: `strtoul` on a 64-bit `long`, then stored
/// into a `uint32_t` (so `4294967297` becomes 1).
#[must_use]
pub fn safe_strtoul(s: &[u8]) -> Option<u32> {
    safe_strtoull(s).map(|v| v as u32)
}

/// memcached's `safe_strtol`: `strtol` on a 64-bit `long`, then stored into
/// an `int32_t` (truncating).
#[must_use]
pub fn safe_strtol(s: &[u8]) -> Option<i32> {
    safe_strtoll(s).map(|v| v as i32)
}

/// memcached's `safe_strtoll`: `strtoll`, out of range refused.
#[must_use]
pub fn safe_strtoll(s: &[u8]) -> Option<i64> {
    let (negative, magnitude, end) = c_scan(s);
    if !accept_end(s, end) {
        return None;
    }
    if negative {
        if magnitude > u128::from(i64::MAX as u64) + 1 {
            return None;
        }
        Some((magnitude as u64 as i64).wrapping_neg())
    } else {
        if magnitude > u128::from(i64::MAX as u64) {
            return None;
        }
        Some(magnitude as i64)
    }
}

/// memcached's `safe_strtod`: C's `strtod`, the whole token a number, not out of
/// range. Decimal and `inf`/`nan` forms as Rust reads them; C's hexadecimal floats are
/// refused (no client sends one to a tuning command).
#[must_use]
pub fn safe_strtod(s: &[u8]) -> Option<f64> {
    let start = s.iter().position(|&b| !is_c_space(b))?;
    let text = std::str::from_utf8(&s[start..]).ok()?;
    let v: f64 = text.parse().ok()?;
    let digits = text.trim_start_matches(['+', '-']);
    let literal_inf = digits.eq_ignore_ascii_case("inf") || digits.eq_ignore_ascii_case("infinity");
    // strtod sets ERANGE on overflow and on underflow of a non-zero mantissa.
    let mantissa = digits.split(['e', 'E']).next().unwrap_or("");
    let nonzero = mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b));
    if (v.is_infinite() && !literal_inf) || (v == 0.0 && nonzero && !digits.contains(['n', 'N'])) {
        return None;
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenizer_stops_at_23_tokens() {
        let line = (0..30)
            .map(|i| format!("k{i}"))
            .collect::<Vec<_>>()
            .join(" ");
        let t = Tokens::new(line.as_bytes(), 0);
        assert_eq!(t.len(), 23);
        assert_eq!(t.get(22), b"k22");
        assert_eq!(&line.as_bytes()[t.rest().unwrap()..][..3], b"k23");
        let t = Tokens::new(b"  a  b ", 0);
        assert_eq!(t.len(), 2);
        assert_eq!(t.get(1), b"b");
        assert_eq!(t.get(2), b"");
    }

    #[test]
    fn numbers_follow_c_semantics() {
        assert_eq!(safe_strtoul(b"4294967296"), Some(0));
        assert_eq!(safe_strtoul(b"4294967297"), Some(1));
        assert_eq!(safe_strtoul(b"+5"), Some(5));
        assert_eq!(safe_strtoul(b"5\tzz"), Some(5));
        assert_eq!(safe_strtoul(b"-1"), None);
        assert_eq!(safe_strtoul(b"-0"), Some(0));
        assert_eq!(safe_strtoul(b"5x"), None);
        assert_eq!(safe_strtoul(b""), None);
        assert_eq!(safe_strtoull(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(safe_strtoull(b"18446744073709551616"), None);
        assert_eq!(safe_strtoull(b"-18446744073709551615"), Some(1));
        assert_eq!(safe_strtol(b"-1"), Some(-1));
        assert_eq!(safe_strtol(b"4294967297"), Some(1));
        assert_eq!(safe_strtol(b"2147483648"), Some(i32::MIN));
        assert_eq!(safe_strtol(b"9223372036854775808"), None);
        assert_eq!(safe_strtol(b"-9223372036854775808"), Some(0));
        assert_eq!(safe_strtol(b"abc"), None);
        assert_eq!(safe_strtol(b" 12"), Some(12));
    }

    #[test]
    fn safe_strtod_reads_as_memcached() {
        assert_eq!(safe_strtod(b"0.5"), Some(0.5));
        assert_eq!(safe_strtod(b"-2"), Some(-2.0));
        assert_eq!(safe_strtod(b"inf"), Some(f64::INFINITY));
        assert!(safe_strtod(b"nan").is_some_and(f64::is_nan));
        // Out of range either way (ERANGE), and not a number.
        assert_eq!(safe_strtod(b"1e999"), None);
        assert_eq!(safe_strtod(b"1e-999"), None);
        assert_eq!(safe_strtod(b"0e-999"), Some(0.0));
        assert_eq!(safe_strtod(b"x"), None);
        assert_eq!(safe_strtod(b"1x"), None);
        assert_eq!(safe_strtod(b""), None);
    }
}
