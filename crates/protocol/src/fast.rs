//! Fast paths for the commonest request lines, ahead of the general framer and
//! parser in [`crate::text`].
//!
//! ```text
//!   g e t ␠ k e y : 0 0 0 1 \r \n        -> Get  { keys: "key:0001" }
//!   s e t ␠ k e y ␠ 0 ␠ 0 ␠ 1 0 0 \r \n  -> Store { Set, "key", 0, 0, 100 }
//!         └─ one scan, 8 bytes at a time, for the first byte <= ' ' ─┘
//! ```
//!
//! [`parse_fast`] either returns exactly what [`frame_line`] followed by
//! [`parse_request`] would, or `None`, and the caller takes the general path.
//! It accepts only lines whose meaning is beyond doubt: the command at the
//! very start, single spaces, a plain single-key `get`/`gets`, or a `set`
//! whose numbers are 1 to 9 plain digits (no sign, so `strtol`'s quirks never
//! apply), ending in `\r\n` or `\n`. Anything else (a NUL, a tab, `noreply`,
//! a second key, a long line) declines.
//!
//! [`frame_line`]: crate::text::frame_line
//! [`parse_request`]: crate::text::parse_request

use crate::text::{GetCommand, Keys, Request, StoreCommand};

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

/// 16-byte scans with SSE2, which every x86-64 CPU has: a 20-byte key takes two
/// compares instead of three 8-byte words, at about half the instructions per word.
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
/// run of ones, its start and end two `trailing_zeros`. A 48-key line of 20-byte keys
/// takes 16 blocks, where a scan key by key (skip the spaces, then look for the next
/// one 16 bytes at a time) cost about 40 instructions a key. Keys are split on spaces
/// only, as [`Keys`] splits them.
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
/// lines shorter than 16 bytes, [`find_byte_or_end_swar`].
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

/// A line terminator at `at`: `(end, next)` for `\r\n` or `\n`.
#[inline(always)]
fn line_end(input: &[u8], at: usize) -> Option<(usize, usize)> {
    match input.get(at)? {
        b'\n' => Some((at, at + 1)),
        b'\r' if input.get(at + 1) == Some(&b'\n') => Some((at, at + 2)),
        _ => None,
    }
}

/// A plain number of 1 to 9 digits at `input[at..]`, ended by a byte
/// `<= b' '`: its value and the index of that byte.
#[inline(always)]
fn small_number(input: &[u8], at: usize) -> Option<(u32, usize)> {
    let mut v: u32 = 0;
    let mut i = at;
    loop {
        let b = *input.get(i)?;
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            let n = i - at;
            return (b <= b' ' && (1..=9).contains(&n)).then_some((v, i));
        }
        v = v * 10 + u32::from(d);
        i += 1;
        if i - at > 9 {
            return None;
        }
    }
}

/// A one-key `get`/`gets` at the start of `input`, the commonest request, as
/// [`parse_fast`] reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastGet {
    pub command: GetCommand,
    /// Where the key starts and ends in `input`.
    pub key_at: usize,
    pub key_end: usize,
    /// Where the line ends (its terminator) and the next request starts.
    pub end: usize,
    pub next: usize,
}

/// [`parse_fast`] for a one-key `get`/`gets` only, without building a [`Request`]:
/// the caller can go straight to the lookup. `None` for anything else, including a
/// get that `parse_fast` would also refuse.
#[inline(always)]
#[must_use]
pub fn parse_fast_get(input: &[u8]) -> Option<FastGet> {
    let head = input.get(..4)?;
    let (command, key_at) = if head == b"get " {
        (GetCommand::Get, 4)
    } else if head == b"gets" && input.get(4) == Some(&b' ') {
        (GetCommand::Gets, 5)
    } else {
        return None;
    };
    let key_end = find_delimiter(input, key_at)?;
    if key_end == key_at {
        return None;
    }
    let (end, next) = line_end(input, key_end)?;
    Some(FastGet {
        command,
        key_at,
        key_end,
        end,
        next,
    })
}

/// The request at the start of `input` and its `(end, next)` offsets, as
/// [`crate::text::frame_line`] and [`crate::text::parse_request`] would give
/// them, for the commonest shapes only; `None` means "use the general path".
#[inline(always)]
#[must_use]
pub fn parse_fast(input: &[u8]) -> Option<(Request<'_>, usize, usize)> {
    let head = input.get(..4)?;
    if head == b"get " || head == b"gets" {
        let g = parse_fast_get(input)?;
        let keys = Keys::single(&input[..g.end], g.key_at);
        return Some((
            Request::Get {
                command: g.command,
                exptime: 0,
                keys,
            },
            g.end,
            g.next,
        ));
    }
    parse_fast_store(input)
}

/// [`parse_fast`] for what it takes besides gets (a plain `set`), for a caller that
/// has already tried [`parse_fast_get`].
#[inline(always)]
#[must_use]
pub fn parse_fast_store(input: &[u8]) -> Option<(Request<'_>, usize, usize)> {
    let head = input.get(..4)?;
    if head == b"set " {
        let key_end = find_delimiter(input, 4)?;
        if key_end == 4 || key_end - 4 > crate::text::MAX_KEY_LEN || input[key_end] != b' ' {
            return None;
        }
        let (flags, at) = small_number(input, key_end + 1)?;
        if input[at] != b' ' {
            return None;
        }
        let (exptime, at) = small_number(input, at + 1)?;
        if input[at] != b' ' {
            return None;
        }
        let (len, at) = small_number(input, at + 1)?;
        let (end, next) = line_end(input, at)?;
        return Some((
            Request::Store {
                command: StoreCommand::Set,
                key: &input[4..key_end],
                flags,
                exptime: exptime as i32,
                len: len as usize,
                cas: 0,
                noreply: false,
            },
            end,
            next,
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::{frame_line, parse_request, LineFrame};

    /// What the general path makes of `input`, in a comparable form.
    fn general(input: &[u8]) -> Option<String> {
        let LineFrame::Line { end, next } = frame_line(input) else {
            return None;
        };
        Some(describe(parse_request(&input[..end]), end, next))
    }

    fn describe(r: Request<'_>, end: usize, next: usize) -> String {
        match r {
            Request::Get {
                command,
                exptime,
                keys,
            } => {
                let keys: Vec<String> = keys
                    .map(|k| String::from_utf8_lossy(k).into_owned())
                    .collect();
                format!("Get {command:?} {exptime} {keys:?} {end} {next}")
            }
            other => format!("{other:?} {end} {next}"),
        }
    }

    fn check(input: &[u8]) {
        if let Some((r, end, next)) = parse_fast(input) {
            assert_eq!(
                Some(describe(r, end, next)),
                general(input),
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    /// A small deterministic generator for the randomised tests.
    fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
        move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        }
    }

    #[test]
    fn takes_the_common_lines() {
        for line in [
            &b"get key:00000000000000000001\r\n"[..],
            b"gets k\r\nget x\r\n",
            b"get a\n",
            b"set key:0001 0 0 100\r\nDATA",
            b"set k 4294967 123456789 0\n",
        ] {
            assert!(parse_fast(line).is_some(), "{line:?}");
            check(line);
        }
    }

    #[test]
    fn declines_anything_unusual() {
        for line in [
            &b"get a b\r\n"[..],
            b"get  a\r\n",
            b" get a\r\n",
            b"get \r\n",
            b"get a\0b\r\n",
            b"get a\tb\r\n",
            b"get a\rb\r\n",
            b"get a",
            b"gets\r\n",
            b"getsa b\r\n",
            b"set k 0 0 1 noreply\r\n",
            b"set k 0 0 -1\r\n",
            b"set k 0 0 +1\r\n",
            b"set k 0 0 1234567890\r\n",
            b"set k 0 0\r\n",
            b"set k 00 0 1x\r\n",
            b"set  k 0 0 1\r\n",
            b"set k 0  0 1\r\n",
            b"set k 0 0 1 \r\n",
            b"set k 0 0 1",
        ] {
            assert!(
                parse_fast(line).is_none(),
                "{:?}",
                String::from_utf8_lossy(line)
            );
        }
        let long_key = [b"set ".to_vec(), vec![b'k'; 251], b" 0 0 1\r\n".to_vec()].concat();
        assert!(parse_fast(&long_key).is_none());
    }

    #[test]
    fn agrees_with_the_general_path_on_random_lines() {
        // Lines built from a small alphabet that hits every branch: command
        // prefixes, spaces, digits, signs, CR, LF, NUL and tabs.
        let atoms: [&[u8]; 14] = [
            b"get ",
            b"gets ",
            b"set ",
            b"k",
            b"key:0001",
            b" ",
            b"0",
            b"7",
            b"123",
            b"-",
            b"\r",
            b"\n",
            b"\0",
            b"\t",
        ];
        let mut next = xorshift(0x1234_5678);
        for _ in 0..200_000 {
            let mut line = Vec::new();
            let n = 1 + next() % 10;
            for i in 0..n {
                let a = next() as usize % atoms.len();
                // Start with a command most of the time.
                let a = if i == 0 && !next().is_multiple_of(4) {
                    a % 3
                } else {
                    a
                };
                line.extend_from_slice(atoms[a]);
            }
            check(&line);
        }
    }

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
