//! Targets on the server side of the text protocol: the line framer and the
//! request parser, alone and driven by the connection's framing loop.

use protocol::text::{
    frame_line, parse_request, LineFrame, Request, MAX_GET_LINE_BYTES, MAX_KEY_LEN,
    MAX_UNTERMINATED_LINE_BYTES,
};

/// `frame_line` then `parse_request` on every line of arbitrary bytes.
///
/// Invariants: a frame never reaches past the input; a line holds no `\n` and
/// no NUL; `Close` only when no newline is buffered and more than
/// [`MAX_UNTERMINATED_LINE_BYTES`] are; every parsed key lies inside its line,
/// is non-empty and holds no space; keys of non-get commands are at most
/// [`MAX_KEY_LEN`] bytes. And nothing panics.
pub fn text_parse(data: &[u8]) {
    let mut pos = 0;
    while pos < data.len() {
        let rest = &data[pos..];
        match frame_line(rest) {
            LineFrame::Line { end, next } => {
                assert!(
                    end < next && next <= rest.len(),
                    "frame {end}/{next} of {}",
                    rest.len()
                );
                assert_eq!(rest[next - 1], b'\n');
                let line = &rest[..end];
                assert!(
                    !line.contains(&b'\n') && !line.contains(&0),
                    "line {line:?}"
                );
                check_request(line, &parse_request(line));
                pos += next;
            }
            LineFrame::Incomplete => {
                assert!(!rest.contains(&b'\n'));
                assert!(rest.len() <= MAX_GET_LINE_BYTES);
                break;
            }
            LineFrame::Close => {
                assert!(!rest.contains(&b'\n'));
                assert!(rest.len() > MAX_UNTERMINATED_LINE_BYTES);
                break;
            }
        }
    }
    // The parser must also survive lines the framer would never produce.
    check_request(data, &parse_request(data));
}

/// Checks the keys of one parsed request against the line they came from.
fn check_request(line: &[u8], request: &Request<'_>) {
    let single = match request {
        Request::Store { key, len, .. } => {
            assert!(*len <= i32::MAX as usize - 2, "data length {len}");
            Some(*key)
        }
        Request::Delete { key, .. } | Request::Arith { key, .. } | Request::Touch { key, .. } => {
            Some(*key)
        }
        Request::Get { keys, .. } => {
            for key in keys.clone() {
                check_key(line, key);
            }
            None
        }
        _ => None,
    };
    if let Some(key) = single {
        check_key(line, key);
        assert!(
            key.len() <= MAX_KEY_LEN,
            "key of {} bytes accepted",
            key.len()
        );
    }
}

fn check_key(line: &[u8], key: &[u8]) {
    assert!(!key.is_empty(), "empty key parsed from {line:?}");
    assert!(!key.contains(&b' '), "key {key:?} holds a space");
    let (start, end) = (line.as_ptr() as usize, line.as_ptr() as usize + line.len());
    let k = key.as_ptr() as usize;
    assert!(k >= start && k + key.len() <= end, "key outside its line");
}

/// What the framing loop saw, owned, so runs over different buffers compare.
#[derive(Debug, PartialEq, Eq)]
enum Event {
    /// A request line starting at stream offset `at` (its parse, keys spelled
    /// out) and, for storage commands, the `len + 2` bytes that followed it.
    Request {
        at: usize,
        parsed: String,
        data: Option<Vec<u8>>,
    },
    /// `frame_line` said to close: an over-long unterminated line from `at`.
    CloseLongLine { at: usize },
    /// The request closes the connection (`quit`, an HTTP line).
    Closed,
}

/// The server connection's framing loop (`crates/server/src/conn.rs`): frame a
/// line, parse it; a storage command waits until its `len + 2` data bytes are
/// buffered and consumes them. `chunks` arrive one read at a time.
fn frame_stream<'a>(chunks: impl Iterator<Item = &'a [u8]>) -> Vec<Event> {
    let mut buf: Vec<u8> = Vec::new();
    // Stream offset of buf[0].
    let mut base = 0;
    let mut events = Vec::new();
    for chunk in chunks {
        buf.extend_from_slice(chunk);
        let mut pos = 0;
        loop {
            let input = &buf[pos..];
            let at = base + pos;
            let (end, next) = match frame_line(input) {
                LineFrame::Line { end, next } => (end, next),
                LineFrame::Incomplete => break,
                LineFrame::Close => {
                    events.push(Event::CloseLongLine { at });
                    return events;
                }
            };
            let request = parse_request(&input[..end]);
            let parsed = describe(&request);
            match request {
                Request::Store { len, .. } => {
                    let total = next + len + 2;
                    if input.len() < total {
                        break;
                    }
                    let data = Some(input[next..total].to_vec());
                    events.push(Event::Request { at, parsed, data });
                    pos += total;
                }
                Request::Quit | Request::Close => {
                    events.push(Event::Request {
                        at,
                        parsed,
                        data: None,
                    });
                    events.push(Event::Closed);
                    return events;
                }
                _ => {
                    events.push(Event::Request {
                        at,
                        parsed,
                        data: None,
                    });
                    pos += next;
                }
            }
        }
        buf.drain(..pos);
        base += pos;
    }
    events
}

/// A request as text, with a `get`'s keys listed (its key iterator's `Debug`
/// would show offsets).
fn describe(request: &Request<'_>) -> String {
    match request {
        Request::Get {
            command,
            exptime,
            keys,
        } => {
            let keys: Vec<&[u8]> = keys.clone().collect();
            format!("Get {command:?} {exptime} {keys:?}")
        }
        other => format!("{other:?}"),
    }
}

/// The framing loop fed the same bytes whole, one byte at a time, and in
/// chunks whose sizes come from the first four input bytes, must see the same
/// events. The one allowed difference is memcached's: a buffer of more than
/// [`MAX_UNTERMINATED_LINE_BYTES`] with no newline closes the connection, and
/// whether that happens depends on how much arrived at once; then the events
/// before the close must agree, and the line at that point must really be that
/// long.
pub fn conn_chunks(data: &[u8]) {
    let (control, input) = data.split_at(data.len().min(4));
    let whole = frame_stream(std::iter::once(input));
    let bytes = frame_stream(input.chunks(1));
    let sizes: Vec<usize> = control.iter().map(|&b| usize::from(b) + 1).collect();
    let chunked = frame_stream(Chunks {
        rest: input,
        sizes: &sizes,
        i: 0,
    });
    for split in [&bytes, &chunked] {
        if split == &whole {
            continue;
        }
        let last = split.len() - 1;
        let Some(&Event::CloseLongLine { at }) = split.last() else {
            panic!("split stream differs:\n whole: {whole:?}\n split: {split:?}");
        };
        assert!(
            whole.len() > last,
            "split stream closed where the whole one ended"
        );
        assert_eq!(
            &split[..last],
            &whole[..last],
            "events before the close differ"
        );
        let line_len = input[at..]
            .iter()
            .position(|&b| b == b'\n')
            .unwrap_or(input.len() - at);
        assert!(
            line_len > MAX_UNTERMINATED_LINE_BYTES,
            "closed on a line of only {line_len} bytes"
        );
    }
}

/// Splits input into pieces of the given sizes, cycling.
struct Chunks<'a, 's> {
    rest: &'a [u8],
    sizes: &'s [usize],
    i: usize,
}

impl<'a> Iterator for Chunks<'a, '_> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.rest.is_empty() {
            return None;
        }
        let size = self
            .sizes
            .get(self.i % self.sizes.len().max(1))
            .copied()
            .unwrap_or(1);
        self.i += 1;
        let (piece, rest) = self.rest.split_at(size.min(self.rest.len()));
        self.rest = rest;
        Some(piece)
    }
}
