//! Targets on the server side of the text protocol: the line framer and the
//! request parser alone, and the server's connection fed the same bytes in
//! different chunks.

use ferrocache_server::ops::Exec;
use ferrocache_server::reply::Sink;
use ferrocache_server::session::{Ahead, Conn, Status};
use ferrocache_server::state::Shared;
use std::collections::HashSet;

use protocol::binary::REQUEST_MAGIC;
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

/// The server's settings for [`conn_chunks`]: one worker; 1 KiB items, so a larger
/// value is refused and its data block swallowed; little memory; and no `-R` yield,
/// whose flush point would depend on how many requests one read held.
const CONN_FLAGS: [&str; 11] = [
    "ferrocache",
    "-t",
    "1",
    "-m",
    "8",
    "-I",
    "1k",
    // memcached refuses an -I below its largest slab chunk (512 KiB by default).
    "-o",
    "slab_chunk_max=1024",
    "-R",
    "1000000",
];

/// A fresh server state, nothing stored.
fn fresh_shared() -> Shared {
    Shared::from_args(CONN_FLAGS).expect("conn_chunks settings")
}

/// What one connection answered to the whole input.
struct Run {
    /// Every byte written back, in order.
    out: Vec<u8>,
    /// The last `process` status.
    status: Status,
    /// Whether the connection closed on a line longer than
    /// [`MAX_UNTERMINATED_LINE_BYTES`] with no newline yet.
    long_line: bool,
}

/// Feed `input` to a real [`Conn`] in `chunks`, one socket read each, as the epoll
/// backend does: read while the output is not backed up and the read limit allows,
/// run `process`, write all the output, and go on while
/// input is left or processing stalled on the output. Stops at a close.
fn drive<'a>(shared: &Shared, input: &'a [u8], chunks: impl Iterator<Item = &'a [u8]>) -> Run {
    let exec = Exec {
        shared,
        stats: shared.worker_stats(0),
        sink: Sink::COPY,
        latency: None,
    };
    let mut conn = Conn::new();
    let mut ahead = Ahead::default();
    let mut out = Vec::new();
    let mut status = Status::Open;
    let mut fed = 0;
    'reads: for mut chunk in chunks {
        loop {
            let mut read = 0;
            while !chunk.is_empty() && !conn.output_blocked() && conn.buffered() < conn.read_limit()
            {
                let space = conn.read_space();
                let n = space.len().min(chunk.len());
                space[..n].copy_from_slice(&chunk[..n]);
                conn.filled(n);
                chunk = &chunk[n..];
                read += n;
            }
            fed += read;
            let before = (out.len(), conn.buffered());
            status = conn.process(&exec, &mut ahead);
            let n = conn.output().len();
            out.extend_from_slice(conn.output());
            conn.written(n);
            if status != Status::Open {
                break 'reads;
            }
            if conn.stalled_on_output() {
                continue;
            }
            if chunk.is_empty() {
                break;
            }
            assert!(
                read > 0 || before != (out.len(), conn.buffered()),
                "no progress with {} bytes of a read left",
                chunk.len()
            );
        }
    }
    // What the connection still held unparsed when it closed.
    let held = &input[fed - conn.buffered()..fed];
    let long_line = status == Status::Close
        && held.len() > MAX_UNTERMINATED_LINE_BYTES
        && !held.contains(&b'\n');
    Run {
        out,
        status,
        long_line,
    }
}

/// Replace what differs between two runs of the same requests on two fresh servers
/// but does not depend on the requests: the process's CPU time and descriptors, and the
/// index's size, in `stats` (text
/// `STAT rusage_user 0.001234`, and the binary STAT packets), masked digit by
/// digit; and the order of `lru_crawler metadump` lines, which follows each
/// store's random hash seed, sorted.
fn normalize(out: &[u8]) -> Vec<u8> {
    let mut masked = out.to_vec();
    for name in [&b"rusage_user"[..], b"rusage_system"] {
        let mut at = 0;
        while let Some(i) = find(&masked[at..], name) {
            let mut j = at + i + name.len();
            while masked.get(j) == Some(&b' ') {
                j += 1;
            }
            while let Some(b) = masked
                .get_mut(j)
                .filter(|b| b.is_ascii_digit() || **b == b'.')
            {
                *b = b'#';
                j += 1;
            }
            at = j;
        }
    }
    // The index's size (`index_bytes`, and memcached's `hash_bytes` and
    // `hash_power_level` drawn from it) depends on which shards the keys fell in, which
    // the store's random hash seed decides: two stores given the same input may differ.
    // `reserved_fds` counts the process's descriptors, which other tests open and close
    // meanwhile. Each number is replaced whole (its length differs too).
    for name in [
        &b"STAT index_bytes "[..],
        b"STAT hash_bytes ",
        b"STAT hash_power_level ",
        b"STAT reserved_fds ",
    ] {
        let mut at = 0;
        while let Some(i) = find(&masked[at..], name) {
            let start = at + i + name.len();
            let end = start
                + masked[start..]
                    .iter()
                    .take_while(|b| b.is_ascii_digit())
                    .count();
            masked.splice(start..end, [b'#']);
            at = start + 1;
        }
    }
    let mut result = Vec::with_capacity(masked.len());
    let mut dump: Vec<&[u8]> = Vec::new();
    for line in masked.split_inclusive(|&b| b == b'\n') {
        if line.starts_with(b"key=") && line.ends_with(b"\n") {
            dump.push(line);
            continue;
        }
        dump.sort_unstable();
        dump.drain(..).for_each(|l| result.extend_from_slice(l));
        result.extend_from_slice(line);
    }
    dump.sort_unstable();
    dump.drain(..).for_each(|l| result.extend_from_slice(l));
    result
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The server's connection ([`Conn`], the code the backends run) fed the same
/// bytes twice, each time on a fresh server: whole, and in chunks whose sizes come
/// from the first four input bytes. Both must write the same bytes back and end
/// in the same status, and nothing may panic. The input decides what runs: text,
/// meta or (first byte 0x80) binary requests, pipelined batches parsed ahead, lone
/// gets on the fast path, data blocks complete or cut, values refused as too large
/// (over 1 KiB) and swallowed, output backpressure.
///
/// The allowed differences are memcached's own, where its answer depends on how
/// much arrived at once: a buffer of more than [`MAX_UNTERMINATED_LINE_BYTES`]
/// with no newline closes the connection, so one run may stop early; and replies
/// not yet flushed when a request drops them (a `get` with a key over 250 bytes, a
/// binary packet with a bad magic byte) are kept by a run whose read ended before
/// that request. [`Reconcile`] checks that the outputs differ in no other way.
pub fn conn_chunks(data: &[u8]) {
    let (control, input) = data.split_at(data.len().min(4));
    let sizes: Vec<usize> = control.iter().map(|&b| usize::from(b) + 1).collect();
    // Two stores, so each run starts empty; made in the same second, so times
    // such as `stats time` or an absolute expiry read the same in both.
    let (a, b) = loop {
        let (a, b) = (fresh_shared(), fresh_shared());
        if a.clock.process_started() == b.clock.process_started() {
            break (a, b);
        }
    };
    let whole = drive(&a, input, std::iter::once(input));
    let split = drive(
        &b,
        input,
        Chunks {
            rest: input,
            sizes: &sizes,
            i: 0,
        },
    );
    let (whole_out, split_out) = (normalize(&whole.out), normalize(&split.out));
    if whole.status == split.status && whole_out == split_out {
        return;
    }
    let early = whole.long_line || split.long_line;
    let binary_close = input.first() == Some(&REQUEST_MAGIC)
        && whole.status == Status::CloseAfterWrite
        && split.status == Status::CloseAfterWrite;
    let explained = (early || whole.status == split.status)
        && Reconcile {
            x: &whole_out,
            y: &split_out,
            x_tail: whole.long_line || binary_close,
            y_tail: split.long_line || binary_close,
            x_closed_early: whole.long_line,
            y_closed_early: split.long_line,
            tried: HashSet::new(),
        }
        .explains(0, 0);
    assert!(
        explained,
        "the whole and the split input were answered differently\n whole ({:?}{}): {}\n split ({:?}{}): {}",
        whole.status,
        if whole.long_line { ", long line" } else { "" },
        whole_out.escape_ascii(),
        split.status,
        if split.long_line { ", long line" } else { "" },
        split_out.escape_ascii()
    );
}

/// The reply memcached writes after dropping every reply it had not yet flushed
/// (a `get` with a key over 250 bytes).
const DROPPED_BEFORE: &[u8] = b"CLIENT_ERROR bad command line format\r\n";

/// Whether two runs' outputs `x` and `y` differ only where memcached's own
/// behaviour depends on how the input arrived:
/// - replies not yet flushed are dropped before [`DROPPED_BEFORE`], and a read
///   boundary is a flush point, so one run may lack some replies the other has
///   just before that line;
/// - the same before the close on a binary packet with a bad magic byte: one run
///   may lack a tail of the other's output (`x_tail`/`y_tail`: `x`/`y` may end
///   where the other goes on);
/// - a run that closed on an over-long line (`x_closed_early`/`y_closed_early`)
///   wrote no more, so the other may have a tail, or have dropped before
///   [`DROPPED_BEFORE`] some replies that the closed run wrote at its end.
struct Reconcile<'a> {
    x: &'a [u8],
    y: &'a [u8],
    x_tail: bool,
    y_tail: bool,
    x_closed_early: bool,
    y_closed_early: bool,
    /// Alignments already tried, so the search stays polynomial.
    tried: HashSet<(usize, usize)>,
}

impl Reconcile<'_> {
    /// Whether `x[i..]` and `y[j..]` reconcile.
    fn explains(&mut self, mut i: usize, mut j: usize) -> bool {
        if !self.tried.insert((i, j)) {
            return false;
        }
        let (x, y) = (self.x, self.y);
        let start = (i, j);
        while i < x.len() && j < y.len() && x[i] == y[j] {
            i += 1;
            j += 1;
        }
        if i == x.len() && j == y.len() {
            return true;
        }
        if (i == x.len() && self.x_tail) || (j == y.len() && self.y_tail) {
            return true;
        }
        // Where the drop began: at the mismatch, or inside a prefix of
        // `DROPPED_BEFORE` that both still shared.
        let back = (i - start.0).min(DROPPED_BEFORE.len() - 1);
        for k in 0..=back {
            let (p, q) = (i - k, j - k);
            if x[p..].starts_with(DROPPED_BEFORE) {
                // `x` dropped what `y` wrote from `q` to its next such line.
                if self.y_closed_early {
                    return true;
                }
                for r in occurrences(y, q, DROPPED_BEFORE) {
                    if self.explains(p, r) {
                        return true;
                    }
                }
            }
            if y[q..].starts_with(DROPPED_BEFORE) {
                if self.x_closed_early {
                    return true;
                }
                for r in occurrences(x, p, DROPPED_BEFORE) {
                    if self.explains(r, q) {
                        return true;
                    }
                }
            }
        }
        false
    }
}

/// Offsets at or after `from` where `needle` starts in `haystack`.
fn occurrences<'h>(
    haystack: &'h [u8],
    from: usize,
    needle: &'h [u8],
) -> impl Iterator<Item = usize> + 'h {
    (from..haystack.len()).filter(move |&r| haystack[r..].starts_with(needle))
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
