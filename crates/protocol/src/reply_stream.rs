//! Reading a stream of memcached replies, as a client does: the line and
//! data-block framing, the limits and the errors that the reply parsers of the
//! text and meta protocols share (they sit on top of this module).
//!
//! Both parsers are incremental: each helper here answers `Ok(None)` while its
//! part of the reply has not fully arrived, so a reply split at any byte is
//! never half consumed.

use std::fmt;
use std::ops::Range;

/// Longest reply line accepted (a `VALUE` line carries a key of at most 250
/// bytes and three numbers; error lines are short). Longer means garbage.
pub const MAX_REPLY_LINE_BYTES: usize = 4096;

/// Largest data block accepted in a `VALUE` reply, bounding what a reply can
/// make the reader buffer (memcached's `-I` maximum is 1 GiB).
pub const MAX_VALUE_BYTES: usize = 1 << 30;

/// A reply stream that cannot be parsed. The stream has lost its framing, so
/// the connection should be closed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplyError {
    /// A line longer than [`MAX_REPLY_LINE_BYTES`] without `\r\n`.
    LineTooLong,
    /// A line that is no memcached reply; holds up to 64 of its bytes.
    UnknownReply(Vec<u8>),
    /// A `VALUE` line whose fields do not parse, or whose size is too large.
    BadValueHeader,
    /// A data block not followed by `\r\n`.
    BadDataTerminator,
    /// An `incr`/`decr` reply that does not fit in a `u64`.
    BadNumber,
}

impl fmt::Display for ReplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplyError::LineTooLong => {
                write!(f, "reply line longer than {MAX_REPLY_LINE_BYTES} bytes")
            }
            ReplyError::UnknownReply(line) => {
                write!(f, "unknown reply line {:?}", String::from_utf8_lossy(line))
            }
            ReplyError::BadValueHeader => f.write_str("malformed VALUE line"),
            ReplyError::BadDataTerminator => f.write_str("value data not followed by \\r\\n"),
            ReplyError::BadNumber => f.write_str("incr/decr reply out of range"),
        }
    }
}

impl std::error::Error for ReplyError {}

/// The reply line at `buf[pos..]` without its `\r\n` (a bare `\n` is accepted), and
/// the position after it; `Ok(None)` while it is incomplete.
pub(crate) fn reply_line(buf: &[u8], pos: usize) -> Result<Option<(&[u8], usize)>, ReplyError> {
    let rest = &buf[pos..];
    let Some(nl) = memchr::memchr(b'\n', &rest[..rest.len().min(MAX_REPLY_LINE_BYTES)]) else {
        return if rest.len() >= MAX_REPLY_LINE_BYTES {
            Err(ReplyError::LineTooLong)
        } else {
            Ok(None)
        };
    };
    let line_end = if nl > 0 && rest[nl - 1] == b'\r' {
        nl - 1
    } else {
        nl
    };
    Ok(Some((&rest[..line_end], pos + nl + 1)))
}

/// The data block of `len` bytes at `buf[start..]` and its `\r\n`: the block's range,
/// `Ok(None)` while it is incomplete.
pub(crate) fn data_block(
    buf: &[u8],
    start: usize,
    len: usize,
) -> Result<Option<Range<usize>>, ReplyError> {
    let end = start + len;
    if buf.len() < end + 2 {
        return Ok(None);
    }
    if &buf[end..end + 2] != b"\r\n" {
        return Err(ReplyError::BadDataTerminator);
    }
    Ok(Some(start..end))
}

/// The range of an error message after its `prefix_len`-byte name and a space.
pub(crate) fn message(pos: usize, line: &[u8], prefix_len: usize) -> Range<usize> {
    let start = if line.get(prefix_len) == Some(&b' ') {
        prefix_len + 1
    } else {
        prefix_len
    };
    pos + start..pos + line.len()
}

/// Parses a non-empty run of ASCII digits that fits in a `u64`.
pub(crate) fn parse_u64(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &d| {
        if d.is_ascii_digit() {
            n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
        } else {
            None
        }
    })
}
