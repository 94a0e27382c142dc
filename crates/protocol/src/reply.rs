//! Server side: composing the replies that carry values, the hottest bytes the
//! server writes.
//!
//! ```text
//!   out: [ ...earlier replies | V A L U E ␠ key ␠ flags ␠ bytes [␠ cas] \r \n data \r \n ]
//!                              └────────────── one resize, then copies at known offsets ─┘
//! ```
//!
//! A reply is sized first, the output buffer grows once, and every field is
//! written at its offset. A chain of `extend_from_slice` calls would check the
//! capacity and store the length once per field and call `memcpy` for each
//! short field; a safe version that zeroes the bytes first still pays a bounds
//! check per field and a write of every byte twice. Numbers are written in
//! place instead of through a formatting buffer. `docs/perf-notes.md` has the
//! measurements that chose this shape.
//!
//! With the SSE2 scans of `scan.rs`, this is the crate's `unsafe` code, a leaf: the
//! writes go through a raw pointer into capacity reserved beforehand, and the length
//! is set once at the end. Its tests run under Miri:
//! `cargo +nightly miri test -p ferrocache-protocol --lib reply`.

use std::ptr;

/// Decimal digits of `v`.
#[inline(always)]
#[must_use]
pub fn decimal_len(v: u64) -> usize {
    if v < 10 {
        1
    } else if v < 100 {
        2
    } else if v < 1_000 {
        3
    } else if v < 10_000 {
        4
    } else {
        4 + decimal_len(v / 10_000)
    }
}

/// Write `v` in decimal as exactly `len` (= [`decimal_len`]`(v)`) bytes at `dst`.
///
/// # Safety
/// `dst` is valid for writes of `len` bytes.
#[inline(always)]
unsafe fn write_decimal(dst: *mut u8, len: usize, mut v: u64) {
    debug_assert_eq!(len, decimal_len(v));
    let mut i = len;
    while i > 1 {
        i -= 1;
        // SAFETY: `i < len`, and the caller made `len` bytes at `dst` writable.
        unsafe { *dst.add(i) = b'0' + (v % 10) as u8 };
        v /= 10;
    }
    // SAFETY: `len >= 1`, as every number has a digit.
    unsafe { *dst = b'0' + v as u8 };
}

/// Bytes reserved past a reply's end, so that [`short_middle`]'s word may be stored
/// whole.
const SLACK: usize = 8;

/// `"00"` to `"99"`, first digit in the low byte.
static PAIRS: [u16; 100] = {
    let mut t = [0u16; 100];
    let mut i = 0;
    while i < 100 {
        t[i] = (b'0' + (i / 10) as u8) as u16 | ((b'0' + (i % 10) as u8) as u16) << 8;
        i += 1;
    }
    t
};

/// ` 0 <bytes>` for every `bytes < 100`, as the little-endian bytes of one word, with
/// the number of bytes that belong in the word's top byte (which lands where the next
/// field is written, see [`short_middle`]). Adding `flags << 8` makes it ` <flags>
/// <bytes>` for `flags < 10`: the digit `0` becomes the flags' digit without a carry.
static SMALL_MIDDLES: [u64; 100] = {
    let mut t = [0u64; 100];
    let mut i = 0;
    while i < 100 {
        let pair = PAIRS[i] as u64;
        let (digits, len) = if i < 10 { (pair >> 8, 1) } else { (pair, 2) };
        t[i] = 0x20 | 0x30 << 8 | 0x20 << 16 | digits << 24 | (3 + len) << 56;
        i += 1;
    }
    t
};

/// ` <flags> <bytes>` as little-endian bytes of one word, and how many of its bytes
/// belong (the rest are written over or left past the reply), when `flags < 10` and
/// `bytes < 10_000`: the usual shape of a `VALUE` line, where writing the two numbers
/// digit by digit would cost more than the rest of the reply's head. `None` for other
/// lines.
///
/// Values under 100 bytes (the small items most gets return) take one table read of
/// the whole word and its length; up to 9 999 bytes, two reads and a division by 100.
#[inline(always)]
fn short_middle(flags: u32, bytes: usize) -> Option<(u64, usize)> {
    if flags >= 10 {
        return None;
    }
    if bytes < 100 {
        let word = SMALL_MIDDLES[bytes] + (u64::from(flags) << 8);
        return Some((word, (word >> 56) as usize));
    }
    if bytes >= 10_000 {
        return None;
    }
    let len = decimal_len(bytes as u64);
    let four = u64::from(PAIRS[bytes / 100]) | u64::from(PAIRS[bytes % 100]) << 16;
    let word = 0x20 | (0x30 + u64::from(flags)) << 8 | 0x20 << 16 | (four >> (8 * (4 - len))) << 24;
    Some((word, 3 + len))
}

/// Copy `src` to `dst` without a call to `memcpy` up to 32 bytes (keys,
/// short values): two overlapping fixed-size copies cover any length in a
/// size class, and never touch a byte outside `src` or `dst[..src.len()]`.
///
/// # Safety
/// `dst` is valid for writes of `src.len()` bytes and does not overlap `src`.
#[inline(always)]
unsafe fn copy_short(dst: *mut u8, src: &[u8]) {
    let n = src.len();
    let s = src.as_ptr();
    // SAFETY: every read below is within `src` (offsets `0..n`) and every write within
    // `dst[..n]`, which the caller made writable; unaligned accesses are used throughout.
    unsafe {
        if n > 32 {
            ptr::copy_nonoverlapping(s, dst, n);
        } else if n >= 16 {
            // Fixed-size copies: one 16-byte load and store each. (Reading both halves
            // into `[u8; 16]` locals first made the compiler bounce them off the stack.)
            ptr::copy_nonoverlapping(s, dst, 16);
            ptr::copy_nonoverlapping(s.add(n - 16), dst.add(n - 16), 16);
        } else if n >= 8 {
            let head = ptr::read_unaligned(s.cast::<u64>());
            let tail = ptr::read_unaligned(s.add(n - 8).cast::<u64>());
            ptr::write_unaligned(dst.cast::<u64>(), head);
            ptr::write_unaligned(dst.add(n - 8).cast::<u64>(), tail);
        } else if n >= 4 {
            let head = ptr::read_unaligned(s.cast::<u32>());
            let tail = ptr::read_unaligned(s.add(n - 4).cast::<u32>());
            ptr::write_unaligned(dst.cast::<u32>(), head);
            ptr::write_unaligned(dst.add(n - 4).cast::<u32>(), tail);
        } else if n > 0 {
            *dst = *s;
            *dst.add(n / 2) = *s.add(n / 2);
            *dst.add(n - 1) = *s.add(n - 1);
        }
    }
}

/// Append `VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n`, the reply of
/// `get`/`gets`/`gat`/`gats` for one hit (with the cas for `gets`/`gats`).
#[inline(always)]
pub fn compose_value(out: &mut Vec<u8>, key: &[u8], flags: u32, data: &[u8], cas: Option<u64>) {
    compose(out, key, flags, data.len(), Some(data), cas);
}

/// Append only the line `VALUE <key> <flags> <bytes>[ <cas>]\r\n` of
/// [`compose_value`], for a data block of `bytes` that the caller sends from
/// elsewhere, followed by `\r\n`.
pub fn compose_value_head(
    out: &mut Vec<u8>,
    key: &[u8],
    flags: u32,
    bytes: usize,
    cas: Option<u64>,
) {
    compose(out, key, flags, bytes, None, cas);
}

/// [`compose_value`], or its first line alone when `data` is `None`, with one
/// reservation.
#[inline(always)]
fn compose(
    out: &mut Vec<u8>,
    key: &[u8],
    flags: u32,
    bytes: usize,
    data: Option<&[u8]>,
    cas: Option<u64>,
) {
    debug_assert!(data.is_none_or(|d| d.len() == bytes));
    let middle = short_middle(flags, bytes);
    // ` <flags> <bytes>`: one word when short, else written digit by digit below.
    let middle_len = match middle {
        Some((_, len)) => len,
        None => 2 + decimal_len(u64::from(flags)) + decimal_len(bytes as u64),
    };
    let cas_len = cas.map_or(0, decimal_len);
    let total = 6
        + key.len()
        + middle_len
        + 2
        + data.map_or(0, |d| d.len() + 2)
        + if cas.is_some() { 1 + cas_len } else { 0 };
    // `SLACK` more: the short form below stores a whole word where fewer bytes belong.
    out.reserve(total + SLACK);
    let start = out.len();
    // SAFETY: `reserve` made room for `total + SLACK` more bytes after `start`, and the
    // writes below cover exactly `total` bytes from there (checked by the debug
    // assertion), each inside that room, plus at most 5 bytes past the middle's word,
    // written over later or left unpublished past `total`; `src` slices are borrowed from elsewhere, so nothing overlaps.
    // `Vec::as_mut_ptr` does not create a reference to the elements, so the pointer stays
    // valid until `set_len`, which only publishes bytes that were all written.
    unsafe {
        let base = out.as_mut_ptr().add(start);
        let mut p = base;
        ptr::copy_nonoverlapping(b"VALUE ".as_ptr(), p, 6);
        p = p.add(6);
        copy_short(p, key);
        p = p.add(key.len());
        if let Some((word, len)) = middle {
            // Its last byte or more land where the next field is written next, inside
            // the room reserved (`SLACK` covers a head-only reply).
            ptr::write_unaligned(p.cast::<u64>(), word);
            p = p.add(len);
        } else {
            let flags_len = decimal_len(u64::from(flags));
            let bytes_len = decimal_len(bytes as u64);
            *p = b' ';
            write_decimal(p.add(1), flags_len, u64::from(flags));
            p = p.add(1 + flags_len);
            *p = b' ';
            write_decimal(p.add(1), bytes_len, bytes as u64);
            p = p.add(1 + bytes_len);
        }
        if let Some(c) = cas {
            *p = b' ';
            write_decimal(p.add(1), cas_len, c);
            p = p.add(1 + cas_len);
        }
        ptr::copy_nonoverlapping(b"\r\n".as_ptr(), p, 2);
        p = p.add(2);
        if let Some(data) = data {
            copy_short(p, data);
            p = p.add(data.len());
            ptr::copy_nonoverlapping(b"\r\n".as_ptr(), p, 2);
            p = p.add(2);
        }
        debug_assert_eq!(p.offset_from(base) as usize, total);
        out.set_len(start + total);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_matches_std() {
        #[cfg(miri)]
        let mut samples = vec![0u64, 9, 10, 12_345, u64::MAX];
        #[cfg(not(miri))]
        let mut samples = vec![0u64, 9, 10, 99, 100, 999, 1000, 9999, 10_000, u64::MAX];
        let mut p = 1u64;
        while let Some(next) = p.checked_mul(10) {
            samples.extend([p - 1, p, p + 1]);
            p = next;
        }
        for v in samples {
            let s = v.to_string();
            assert_eq!(decimal_len(v), s.len(), "{v}");
            let mut buf = vec![0u8; s.len()];
            // SAFETY: `buf` holds exactly `decimal_len(v)` bytes.
            unsafe { write_decimal(buf.as_mut_ptr(), s.len(), v) };
            assert_eq!(buf, s.as_bytes());
        }
    }

    #[test]
    fn copy_short_every_length() {
        let src: Vec<u8> = (1..=80u8).collect();
        for n in 0..=80 {
            // One guard byte either side shows that nothing outside is written.
            let mut dst = vec![0xeeu8; n + 2];
            // SAFETY: `dst[1..]` has room for `n` bytes and is a separate allocation.
            unsafe { copy_short(dst.as_mut_ptr().add(1), &src[..n]) };
            assert_eq!(&dst[1..=n], &src[..n], "n={n}");
            assert_eq!((dst[0], dst[n + 1]), (0xee, 0xee), "n={n}");
        }
    }

    #[test]
    fn every_short_middle_matches_the_digit_by_digit_form() {
        // The word form covers flags 0..=9 and 0..=9_999 bytes; 10 and 10_000 take the
        // general path, so the borders are compared too.
        #[cfg(miri)]
        let sizes: Vec<usize> = vec![0, 7, 9, 10, 99, 100, 999, 1000, 9999, 10_000];
        #[cfg(not(miri))]
        let sizes: Vec<usize> = (0..=10_001).collect();
        for flags in [0u32, 1, 9, 10] {
            for &n in &sizes {
                for cas in [None, Some(42u64)] {
                    let data = vec![b'd'; n];
                    let mut out = b"x".to_vec();
                    compose_value(&mut out, b"key", flags, &data, cas);
                    let mut want = format!("xVALUE key {flags} {n}").into_bytes();
                    if let Some(c) = cas {
                        want.extend_from_slice(format!(" {c}").as_bytes());
                    }
                    want.extend_from_slice(b"\r\n");
                    want.extend_from_slice(&data);
                    want.extend_from_slice(b"\r\n");
                    assert_eq!(out, want, "flags {flags}, {n} bytes, cas {cas:?}");
                    let mut head = Vec::new();
                    compose_value_head(&mut head, b"key", flags, n, cas);
                    assert_eq!(head, want[1..want.len() - n - 2], "head, {n} bytes");
                }
            }
        }
    }

    #[test]
    fn value_lines() {
        let mut out = b"END\r\n".to_vec();
        compose_value(&mut out, b"k", 0, b"hello", None);
        compose_value(&mut out, b"key:0123456789", 4_294_967_295, b"", Some(1));
        compose_value(&mut out, &[b'x'; 250], 17, &[b'v'; 100], Some(u64::MAX));
        let mut want = b"END\r\nVALUE k 0 5\r\nhello\r\n".to_vec();
        want.extend_from_slice(b"VALUE key:0123456789 4294967295 0 1\r\n\r\n");
        want.extend_from_slice(b"VALUE ");
        want.extend_from_slice(&[b'x'; 250]);
        want.extend_from_slice(format!(" 17 100 {}\r\n", u64::MAX).as_bytes());
        want.extend_from_slice(&[b'v'; 100]);
        want.extend_from_slice(b"\r\n");
        assert_eq!(out, want);
    }

    #[test]
    fn value_heads_are_the_first_lines_of_value_replies() {
        for (key, flags, data, cas) in [
            (&b"k"[..], 0, &b"hello"[..], None),
            (b"key:0123456789", 4_294_967_295, b"", Some(1)),
            (b"big", 7, &[b'v'; 70_000][..], Some(u64::MAX)),
        ] {
            let mut whole = b"END\r\n".to_vec();
            compose_value(&mut whole, key, flags, data, cas);
            let mut head = b"END\r\n".to_vec();
            compose_value_head(&mut head, key, flags, data.len(), cas);
            head.extend_from_slice(data);
            head.extend_from_slice(b"\r\n");
            assert_eq!(head, whole);
        }
    }
}
