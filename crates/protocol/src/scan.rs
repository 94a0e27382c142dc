//! Byte scans a word (or, on x86-64, 16 bytes) at a time: the first delimiter
//! of a line, the next space, and the keys of a multi-get line.
//!
//! These run on every request, over short haystacks (a command, a key), where
//! a `memchr` call costs more than the scan itself. Each has a plain
//! eight-bytes-in-a-`u64` (SWAR) version for every target, and the SSE2 one
//! that x86-64 uses; the tests check both against a byte-by-byte scan.
//!
//! With the value writer of [`crate::reply`], this is the crate's `unsafe`
//! code: SSE2 loads, each within the slice it reads.

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

#[inline(always)]
fn word(s: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(s[i..i + 8].try_into().unwrap())
}

/// The low `bits` bits set (`bits` a multiple of 8 below 64).
#[inline(always)]
fn low_bytes(bits: usize) -> u64 {
    debug_assert!(bits < 64);
    (1u64 << bits) - 1
}

/// 16-byte scans with SSE2, which every x86-64 CPU has: a compare and a mask
/// cover twice the bytes of a SWAR word with fewer operations, so a typical key
/// ends within one or two of them.
#[cfg(target_arch = "x86_64")]
mod sse2 {
    use core::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_movemask_epi8};

    /// The index of the first byte of `s[from..]` whose byte of `hits(16 bytes)` is
    /// all ones: `Ok(None)` when there is none. `Err(i)` when `s` is shorter than 16
    /// bytes (or `from` is past its end): the caller scans from `i` another way.
    #[inline(always)]
    pub(super) fn scan(
        s: &[u8],
        from: usize,
        hits: impl Fn(__m128i) -> __m128i,
    ) -> Result<Option<usize>, usize> {
        // SAFETY: SSE2 is enabled on every x86-64 target. Each load reads the 16 bytes
        // `s[at..at + 16]`, with `at + 16 <= s.len()` checked before it; `loadu` has no
        // alignment requirement.
        let mask = |at: usize| unsafe {
            let v = _mm_loadu_si128(s.as_ptr().add(at).cast());
            _mm_movemask_epi8(hits(v)) as u32
        };
        let mut i = from;
        if s.len() < 16 || i > s.len() {
            return Err(i);
        }
        while s.len() - i >= 16 {
            let m = mask(i);
            if m != 0 {
                return Ok(Some(i + m.trailing_zeros() as usize));
            }
            i += 16;
        }
        if i == s.len() {
            return Ok(None);
        }
        // The last 16 bytes, overlapping bytes before `i`, which are shifted out (a
        // byte compare has no borrow between bytes, unlike the SWAR scans, so nothing
        // else needs masking).
        let m = mask(s.len() - 16) >> (16 - (s.len() - i));
        Ok((m != 0).then(|| i + m.trailing_zeros() as usize))
    }
}

/// The keys of a multi-get line, found 64 bytes at a time: each block of the line
/// becomes one word with a bit per byte that is not a space, and each key is then a
/// run of ones, its start and end two `trailing_zeros`. A long multi-get is then a
/// few block compares plus a little bit arithmetic per key, rather than a scan key by
/// key (skip the spaces, then look for the next one) that restarts at every key.
/// Keys are split on spaces only, as the text request's `Keys` iterator splits them.
#[derive(Clone, Debug)]
pub struct KeyScan<'a> {
    line: &'a [u8],
    /// Where the current block starts.
    block: usize,
    /// The block's bits of bytes not yet passed.
    bits: u64,
}

impl<'a> KeyScan<'a> {
    /// The keys of `line` from byte `from` on.
    #[must_use]
    pub fn new(line: &'a [u8], from: usize) -> Self {
        let from = from.min(line.len());
        KeyScan {
            line,
            block: from,
            bits: token_bits(line, from),
        }
    }

    /// The next key's start and end in the line, or `None` at the end of the line.
    #[inline(always)]
    pub fn next_key(&mut self) -> Option<(usize, usize)> {
        while self.bits == 0 {
            self.block += 64;
            if self.block >= self.line.len() {
                self.block = self.line.len();
                return None;
            }
            self.bits = token_bits(self.line, self.block);
        }
        let start = self.bits.trailing_zeros() as usize;
        // The run of ones from `start`: shifted down, the zeros shifted in on top end it.
        let run = (!(self.bits >> start)).trailing_zeros() as usize;
        let end = start + run;
        if end < 64 {
            self.bits &= u64::MAX << end;
            return Some((self.block + start, self.block + end));
        }
        // The key goes on into the next blocks.
        let first = self.block + start;
        loop {
            self.block += 64;
            if self.block >= self.line.len() {
                self.block = self.line.len();
                self.bits = 0;
                return Some((first, self.line.len()));
            }
            self.bits = token_bits(self.line, self.block);
            let run = (!self.bits).trailing_zeros() as usize;
            if run < 64 {
                self.bits &= u64::MAX << run;
                return Some((first, self.block + run));
            }
        }
    }
}

/// Bit `i` set when `line[at + i]` exists and is not a space (`at <= line.len()`).
#[inline(always)]
fn token_bits(line: &[u8], at: usize) -> u64 {
    let rest = &line[at..];
    if rest.len() >= 64 {
        return token_bits_64(rest[..64].try_into().unwrap());
    }
    // The line's last block: the bytes past its end count as spaces.
    let mut block = [b' '; 64];
    block[..rest.len()].copy_from_slice(rest);
    token_bits_64(&block)
}

/// [`token_bits`] of a whole block.
#[inline(always)]
fn token_bits_64(block: &[u8; 64]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{
            _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi8,
        };
        // SAFETY: SSE2 is enabled on every x86-64 target; each load reads 16 of the
        // block's 64 bytes (`i < 4`), and `loadu` has no alignment requirement.
        let spaces = |i: usize| unsafe {
            let v = _mm_loadu_si128(block.as_ptr().add(16 * i).cast());
            u64::from(_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(b' ' as i8))) as u16)
        };
        !(spaces(0) | spaces(1) << 16 | spaces(2) << 32 | spaces(3) << 48)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let mut bits = 0;
        for (i, &b) in block.iter().enumerate() {
            bits |= u64::from(b != b' ') << i;
        }
        bits
    }
}

/// Index of the first byte of `s[from..]` that is a space or an ASCII control
/// byte (`<= b' '`), eight bytes at a time.
///
/// `(w - 0x21..) & !w & 0x80..` sets the high bit of every byte below 0x21;
/// a borrow can only carry upwards from such a byte, so the lowest set bit
/// is exact, and that is the only one read.
#[inline(always)]
#[must_use]
pub fn find_delimiter(s: &[u8], from: usize) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_mm_cmpeq_epi8, _mm_min_epu8, _mm_set1_epi8};
        // SAFETY: SSE2 is enabled on every x86-64 target.
        let space = unsafe { _mm_set1_epi8(b' ' as i8) };
        // A byte is at most b' ' exactly when the unsigned minimum of it and b' ' is
        // itself. SAFETY: as above.
        match sse2::scan(s, from, |v| unsafe {
            _mm_cmpeq_epi8(_mm_min_epu8(v, space), v)
        }) {
            Ok(found) => found,
            Err(i) => find_delimiter_swar(s, i),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    find_delimiter_swar(s, from)
}

/// [`find_delimiter`] eight bytes at a time in a `u64`, on any target.
#[inline(always)]
#[must_use]
fn find_delimiter_swar(s: &[u8], from: usize) -> Option<usize> {
    let hits = |w: u64| w.wrapping_sub(LO * 0x21) & !w & HI;
    let mut i = from;
    while i + 8 <= s.len() {
        let m = hits(word(s, i));
        if m != 0 {
            return Some(i + (m.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    let left = s.len() - i.min(s.len());
    if left == 0 {
        return None;
    }
    if s.len() >= 8 {
        // The last word, overlapping bytes before `i`. Those may hold a hit (when
        // `from` itself lies in the last word) whose borrow would fake a hit in
        // the byte above it, so they are set to 0xff (never a hit, no borrow)
        // and shifted out.
        let skip = 8 * (8 - left);
        let m = hits(word(s, s.len() - 8) | low_bytes(skip)) >> skip;
        return (m != 0).then(|| i + (m.trailing_zeros() / 8) as usize);
    }
    s[i..].iter().position(|&b| b <= b' ').map(|p| i + p)
}

/// Index of the first `byte` in `s[from..]`, `s.len()` when there is none: for
/// short haystacks (a key in a multi-get line), where a `memchr` call costs more
/// than the scan. 16 bytes at a time on x86-64 (see `sse2`); elsewhere, and for
/// lines shorter than 16 bytes, `find_byte_or_end_swar`.
#[inline(always)]
#[must_use]
pub fn find_byte_or_end(s: &[u8], from: usize, byte: u8) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_mm_cmpeq_epi8, _mm_set1_epi8};
        // SAFETY: SSE2 is enabled on every x86-64 target.
        let pattern = unsafe { _mm_set1_epi8(byte as i8) };
        // SAFETY: as above.
        match sse2::scan(s, from, |v| unsafe { _mm_cmpeq_epi8(v, pattern) }) {
            Ok(found) => found.unwrap_or(s.len()),
            Err(i) => find_byte_or_end_swar(s, i, byte),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    find_byte_or_end_swar(s, from, byte)
}

/// [`find_byte_or_end`] eight bytes at a time in a `u64`, on any target.
#[inline(always)]
#[must_use]
fn find_byte_or_end_swar(s: &[u8], from: usize, byte: u8) -> usize {
    let pattern = LO * u64::from(byte);
    // High bit of every zero byte of `x` (the lowest one exact, as in `find_delimiter`).
    let zeros = |x: u64| x.wrapping_sub(LO) & !x & HI;
    let mut i = from;
    while i + 8 <= s.len() {
        let m = zeros(word(s, i) ^ pattern);
        if m != 0 {
            return i + (m.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    let left = s.len() - i.min(s.len());
    if left == 0 {
        return s.len();
    }
    if s.len() >= 8 {
        // As in `find_delimiter`: the last word, with the bytes before `i` made
        // harmless (0xff after the xor) and shifted out.
        let skip = 8 * (8 - left);
        let m = zeros((word(s, s.len() - 8) ^ pattern) | low_bytes(skip)) >> skip;
        return if m != 0 {
            i + (m.trailing_zeros() / 8) as usize
        } else {
            s.len()
        };
    }
    s[i..]
        .iter()
        .position(|&b| b == byte)
        .map_or(s.len(), |p| i + p)
}

/// A small deterministic generator for the randomised tests of this crate.
#[cfg(test)]
pub(crate) fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Keys;

    #[test]
    fn finders_match_naive_scans() {
        let text = b"abc def\tghi\r\njkl mnopqrstuvwxyz 0123456789\0end";
        for len in 0..text.len() {
            let text = &text[..len];
            for from in 0..=len + 1 {
                let rest = text.get(from..).unwrap_or(&[]);
                let want = rest.iter().position(|&b| b <= b' ').map(|i| i + from);
                assert_eq!(find_delimiter(text, from), want, "len {len} from {from}");
                let want = rest
                    .iter()
                    .position(|&b| b == b' ')
                    .map_or(len, |i| i + from);
                assert_eq!(
                    find_byte_or_end(text, from, b' '),
                    want,
                    "len {len} from {from}"
                );
            }
        }
        for from in 0..text.len() {
            let want = text[from..]
                .iter()
                .position(|&b| b <= b' ')
                .map(|i| i + from);
            assert_eq!(find_delimiter(text, from), want, "from {from}");
            let want = text[from..]
                .iter()
                .position(|&b| b == b' ')
                .map_or(text.len(), |i| i + from);
            assert_eq!(find_byte_or_end(text, from, b' '), want, "from {from}");
        }
        let high = [0xffu8, 0x80, 0xa0, b'x', 0x21, 0x7f, 0xc2, 0x20, 0x00];
        assert_eq!(find_delimiter(&high, 0), Some(7));
        // A hit just before `from`, in the last word, followed by the byte one
        // above the target: its borrow must not fake a hit (the fuzzer found
        // `get = != ` giving an empty key).
        let line = b"get = != ";
        assert_eq!(find_byte_or_end(line, 6, b' '), 8);
        assert_eq!(find_delimiter(line, 6), Some(8));
    }

    #[test]
    fn finders_match_naive_scans_on_random_bytes() {
        // Bytes around both targets (the target, one above, one below), so
        // borrows between neighbouring bytes are exercised.
        let alphabet = [
            b' ', b'!', 0x1f, 0x00, 0x01, b'\t', b'"', b'a', 0xff, 0x80, 0x21, 0x22,
        ];
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        for _ in 0..if cfg!(miri) { 200 } else { 20_000 } {
            let len = (next() % 41) as usize;
            let text: Vec<u8> = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            for from in 0..=len {
                let rest = &text[from..];
                let want = rest.iter().position(|&b| b <= b' ').map(|i| i + from);
                assert_eq!(find_delimiter(&text, from), want, "{text:?} from {from}");
                assert_eq!(
                    find_delimiter_swar(&text, from),
                    want,
                    "{text:?} from {from}"
                );
                let want = rest
                    .iter()
                    .position(|&b| b == b' ')
                    .map_or(len, |i| i + from);
                assert_eq!(
                    find_byte_or_end(&text, from, b' '),
                    want,
                    "{text:?} from {from}"
                );
                assert_eq!(
                    find_byte_or_end_swar(&text, from, b' '),
                    want,
                    "{text:?} from {from}"
                );
            }
        }
    }

    /// The keys [`Keys`] gives for `line` from `from`, as positions.
    fn keys_of(line: &[u8], from: usize) -> Vec<(usize, usize)> {
        Keys::resume(line, from)
            .map(|k| {
                let start = k.as_ptr() as usize - line.as_ptr() as usize;
                (start, start + k.len())
            })
            .collect()
    }

    fn scanned(line: &[u8], from: usize) -> Vec<(usize, usize)> {
        let mut scan = KeyScan::new(line, from);
        let mut found = Vec::new();
        while let Some(k) = scan.next_key() {
            found.push(k);
        }
        // And it stays at the end.
        assert_eq!(scan.next_key(), None);
        found
    }

    #[test]
    fn key_scans_split_lines_as_keys_do() {
        for line in [
            &b""[..],
            b" ",
            b"a",
            b"  a  b   c ",
            b"key1 key2",
            &[b'k'; 64],
            &[b'k'; 65],
            &[b'k'; 200],
        ] {
            for from in 0..=line.len() {
                assert_eq!(
                    scanned(line, from),
                    keys_of(line, from),
                    "{line:?} from {from}"
                );
            }
        }
        // Keys ending exactly at a block's end, spaces exactly filling one, a key over
        // several blocks.
        let mut line = vec![b'a'; 63];
        line.push(b' ');
        line.extend_from_slice(&[b' '; 64]);
        line.extend_from_slice(&[b'b'; 130]);
        line.extend_from_slice(b" c");
        for from in 0..=line.len() {
            assert_eq!(scanned(&line, from), keys_of(&line, from), "from {from}");
        }
    }

    #[test]
    fn key_scans_split_random_lines_as_keys_do() {
        let mut next = xorshift(0x5eed_cafe_f00d_d00d);
        for _ in 0..if cfg!(miri) { 40 } else { 5_000 } {
            let len = (next() % 300) as usize;
            // Mostly key bytes, with runs of spaces of every length.
            let spaces = 1 + next() % 12;
            let line: Vec<u8> = (0..len)
                .map(|_| {
                    if next().is_multiple_of(spaces) {
                        b' '
                    } else {
                        b'x'
                    }
                })
                .collect();
            let from = (next() as usize) % (len + 1);
            assert_eq!(
                scanned(&line, from),
                keys_of(&line, from),
                "{line:?} from {from}"
            );
        }
    }
}
