//! Framing of text-protocol request lines, as memcached's
//! `try_read_command_ascii` does: where a line ends, and when a peer that
//! sends no newline is cut off.

use memchr::{memchr, memchr2};

/// memcached closes a connection whose buffered bytes hold no newline past
/// this many bytes, unless the line starts with `get ` or `gets `.
pub const MAX_UNTERMINATED_LINE_BYTES: usize = 2048;
/// ferrocache's cap on an unterminated `get`/`gets` line (memcached has none;
/// we bound per-connection memory instead, see `docs/protocol.md`).
pub const MAX_GET_LINE_BYTES: usize = 4 * 1024 * 1024;

/// Result of looking for one request line at the start of a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineFrame {
    /// A whole line: `buf[..end]` is the command (terminator, and anything
    /// from a NUL byte on, removed); the next line starts at `buf[next]`.
    Line { end: usize, next: usize },
    /// No newline yet; read more.
    Incomplete,
    /// The peer sent a long unterminated line that cannot be a multi-get:
    /// memcached closes the connection.
    Close,
}

/// Find the first request line in `buf`, as memcached's
/// `try_read_command_ascii` does.
#[must_use]
pub fn frame_line(buf: &[u8]) -> LineFrame {
    // One pass finds the newline, or a NUL before it (rare: memcached treats
    // the line as a C string, so a NUL ends the command early).
    let first = memchr2(b'\n', 0, buf);
    let (nl, nul) = match first {
        Some(i) if buf[i] == b'\n' => (Some(i), None),
        Some(i) => (memchr(b'\n', &buf[i..]).map(|n| i + n), Some(i)),
        None => (None, None),
    };
    let Some(nl) = nl else {
        if buf.len() > MAX_UNTERMINATED_LINE_BYTES {
            let spaces = buf.iter().take_while(|&&b| b == b' ').count();
            let rest = &buf[spaces..];
            if spaces > 100
                || !(rest.starts_with(b"get ") || rest.starts_with(b"gets "))
                || buf.len() > MAX_GET_LINE_BYTES
            {
                return LineFrame::Close;
            }
        }
        return LineFrame::Incomplete;
    };
    let mut end = nl;
    if nl > 1 && buf[nl - 1] == b'\r' {
        end -= 1;
    }
    if let Some(nul) = nul {
        end = end.min(nul);
    }
    LineFrame::Line { end, next: nl + 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_lines_like_memcached() {
        assert_eq!(
            frame_line(b"get a\r\n"),
            LineFrame::Line { end: 5, next: 7 }
        );
        assert_eq!(frame_line(b"get a\n"), LineFrame::Line { end: 5, next: 6 });
        assert_eq!(frame_line(b"\r\n"), LineFrame::Line { end: 1, next: 2 });
        assert_eq!(frame_line(b"get a"), LineFrame::Incomplete);
        assert_eq!(
            frame_line(b"ge\0t a\r\n"),
            LineFrame::Line { end: 2, next: 8 }
        );
        let long = vec![b'x'; 3000];
        assert_eq!(frame_line(&long), LineFrame::Close);
        let mut get = b"get ".to_vec();
        get.extend(std::iter::repeat_n(b'k', 3000));
        assert_eq!(frame_line(&get), LineFrame::Incomplete);
    }

    #[test]
    fn every_split_point_frames_the_same_line() {
        let input = b"set key 1 2 3\r\nabc\r\n";
        for cut in 0..input.len() {
            let head = &input[..cut];
            match frame_line(head) {
                LineFrame::Incomplete => assert!(cut < 15),
                LineFrame::Line { end, next } => {
                    assert_eq!((end, next), (13, 15));
                    assert!(cut >= 15);
                }
                LineFrame::Close => panic!("closed at {cut}"),
            }
        }
    }
}
