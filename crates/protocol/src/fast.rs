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

pub use crate::scan::{find_byte_or_end, find_delimiter, KeyScan};

use crate::request::{GetCommand, Keys, Request, StoreCommand, MAX_KEY_LEN};

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
        // A tenth digit: too long, and past what a u32 holds (checked before the
        // multiply, which would overflow).
        if i - at == 9 {
            return None;
        }
        v = v * 10 + u32::from(d);
        i += 1;
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
        if key_end == 4 || key_end - 4 > MAX_KEY_LEN || input[key_end] != b' ' {
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
    use crate::scan::xorshift;
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
}
