//! Client side of the memcached text protocol: request composition and reply parsing.
//!
//! Composition appends one request to a caller-owned `Vec<u8>`, so a client that
//! reuses its output buffer composes with no allocation per request (numbers go
//! through `itoa`, never `format!`).
//!
//! Parsing is incremental and in place. [`parse_reply`] looks at the bytes from
//! a position and returns either one complete reply, with byte ranges into the
//! caller's buffer, or `Ok(None)` when more bytes are needed. [`ReplyBuffer`]
//! wraps it with a buffer that a socket reads straight into:
//!
//! ```text
//!   buf: [ consumed | unparsed bytes ..... | spare capacity ]
//!        0          start                  end              len
//!   read() fills spare -> commit(n) -> next_reply() advances start
//! ```
//!
//! Replies split at any byte are handled: the parser never consumes a partial
//! reply. The line and data-block framing it rests on, shared with the meta
//! protocol's reply parser, is in [`crate::reply_stream`].
//! [`ReplyBuffer::next_parsed`] runs another protocol's parser over the same
//! buffer, and [`UdpHeader`] frames any of them.

use std::ops::Range;

pub use crate::reply_stream::{ReplyError, MAX_REPLY_LINE_BYTES, MAX_VALUE_BYTES};

use crate::reply_stream::{data_block, message, parse_u64, reply_line};

/// The retrieval commands: `get` returns values, `gets` adds their CAS unique.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retrieval {
    Get,
    Gets,
}

/// The storage commands. `Cas` carries the unique value it compares against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreCommand {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas(u64),
}

impl StoreCommand {
    fn name(self) -> &'static [u8] {
        match self {
            StoreCommand::Set => b"set ",
            StoreCommand::Add => b"add ",
            StoreCommand::Replace => b"replace ",
            StoreCommand::Append => b"append ",
            StoreCommand::Prepend => b"prepend ",
            StoreCommand::Cas(_) => b"cas ",
        }
    }
}

fn push_u64(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// Starts a retrieval request: appends `get` or `gets`. Follow with one
/// [`compose_key`] per key and end with [`compose_end`].
pub fn compose_retrieval_start(out: &mut Vec<u8>, cmd: Retrieval) {
    out.extend_from_slice(match cmd {
        Retrieval::Get => b"get",
        Retrieval::Gets => b"gets",
    });
}

/// Appends one key (with its leading space) to a request started by
/// [`compose_retrieval_start`].
pub fn compose_key(out: &mut Vec<u8>, key: &[u8]) {
    out.push(b' ');
    out.extend_from_slice(key);
}

/// Ends a request line with `\r\n`.
pub fn compose_end(out: &mut Vec<u8>) {
    out.extend_from_slice(b"\r\n");
}

/// Appends a whole `get`/`gets` request for `keys`.
pub fn compose_get<K: AsRef<[u8]>>(out: &mut Vec<u8>, cmd: Retrieval, keys: &[K]) {
    compose_retrieval_start(out, cmd);
    for key in keys {
        compose_key(out, key.as_ref());
    }
    compose_end(out);
}

/// Appends `<cmd> <key> <flags> <exptime> <bytes> [<cas>] [noreply]\r\n<data>\r\n`.
pub fn compose_store(
    out: &mut Vec<u8>,
    cmd: StoreCommand,
    key: &[u8],
    flags: u32,
    exptime: u32,
    data: &[u8],
    noreply: bool,
) {
    out.extend_from_slice(cmd.name());
    out.extend_from_slice(key);
    out.push(b' ');
    push_u64(out, u64::from(flags));
    out.push(b' ');
    push_u64(out, u64::from(exptime));
    out.push(b' ');
    push_u64(out, data.len() as u64);
    if let StoreCommand::Cas(unique) = cmd {
        out.push(b' ');
        push_u64(out, unique);
    }
    if noreply {
        out.extend_from_slice(b" noreply");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Appends `delete <key> [noreply]\r\n`.
pub fn compose_delete(out: &mut Vec<u8>, key: &[u8], noreply: bool) {
    out.extend_from_slice(b"delete ");
    out.extend_from_slice(key);
    compose_noreply_end(out, noreply);
}

/// Appends `incr <key> <delta> [noreply]\r\n`, or `decr` when `decrement`.
pub fn compose_incr(out: &mut Vec<u8>, key: &[u8], delta: u64, decrement: bool, noreply: bool) {
    out.extend_from_slice(if decrement { b"decr " } else { b"incr " });
    out.extend_from_slice(key);
    out.push(b' ');
    push_u64(out, delta);
    compose_noreply_end(out, noreply);
}

/// Appends `touch <key> <exptime> [noreply]\r\n`.
pub fn compose_touch(out: &mut Vec<u8>, key: &[u8], exptime: u32, noreply: bool) {
    out.extend_from_slice(b"touch ");
    out.extend_from_slice(key);
    out.push(b' ');
    push_u64(out, u64::from(exptime));
    compose_noreply_end(out, noreply);
}

fn compose_noreply_end(out: &mut Vec<u8>, noreply: bool) {
    if noreply {
        out.extend_from_slice(b" noreply");
    }
    out.extend_from_slice(b"\r\n");
}

/// One complete reply. Ranges index the buffer that was parsed (for
/// [`ReplyBuffer`], its [`ReplyBuffer::bytes`]), so nothing is copied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `VALUE <key> <flags> <bytes> [<cas>]` and its data block.
    Value {
        key: Range<usize>,
        flags: u32,
        cas: Option<u64>,
        data: Range<usize>,
    },
    /// `END`: the end of a retrieval reply.
    End,
    Stored,
    NotStored,
    Exists,
    NotFound,
    Deleted,
    Touched,
    Ok,
    /// The new value after `incr`/`decr`.
    Number(u64),
    /// `VERSION <text>`.
    Version(Range<usize>),
    /// `STAT <name> <value>`.
    Stat {
        name: Range<usize>,
        value: Range<usize>,
    },
    /// `ERROR`: an unknown command.
    Error,
    /// `CLIENT_ERROR <message>`.
    ClientError(Range<usize>),
    /// `SERVER_ERROR <message>`.
    ServerError(Range<usize>),
}

impl Reply {
    /// True for the three error replies.
    pub fn is_error(&self) -> bool {
        matches!(
            self,
            Reply::Error | Reply::ClientError(_) | Reply::ServerError(_)
        )
    }
}

/// Parses one reply from `buf[pos..]`.
///
/// Returns the reply (ranges index `buf`) and the position just past it, or
/// `Ok(None)` when the reply is not complete yet; call again from the same
/// `pos` once more bytes have arrived.
pub fn parse_reply(buf: &[u8], pos: usize) -> Result<Option<(Reply, usize)>, ReplyError> {
    let Some((line, next)) = reply_line(buf, pos)? else {
        return Ok(None);
    };
    let reply = match line {
        b"END" => Reply::End,
        b"STORED" => Reply::Stored,
        b"NOT_STORED" => Reply::NotStored,
        b"EXISTS" => Reply::Exists,
        b"NOT_FOUND" => Reply::NotFound,
        b"DELETED" => Reply::Deleted,
        b"TOUCHED" => Reply::Touched,
        b"OK" => Reply::Ok,
        b"ERROR" => Reply::Error,
        _ if line.starts_with(b"VALUE ") => return parse_value(buf, pos, line, next),
        _ if line.first().is_some_and(u8::is_ascii_digit) => {
            Reply::Number(parse_u64(line).ok_or(ReplyError::BadNumber)?)
        }
        _ if line.starts_with(b"CLIENT_ERROR") => Reply::ClientError(message(pos, line, 12)),
        _ if line.starts_with(b"SERVER_ERROR") => Reply::ServerError(message(pos, line, 12)),
        _ if line.starts_with(b"VERSION ") => Reply::Version(pos + 8..pos + line.len()),
        _ if line.starts_with(b"STAT ") => {
            let body = &line[5..];
            let sp = memchr::memchr(b' ', body).unwrap_or(body.len());
            let name = pos + 5..pos + 5 + sp;
            let value = (name.end + 1).min(pos + line.len())..pos + line.len();
            Reply::Stat { name, value }
        }
        _ => {
            let shown = &line[..line.len().min(64)];
            return Err(ReplyError::UnknownReply(shown.to_vec()));
        }
    };
    Ok(Some((reply, next)))
}

/// Parses `VALUE <key> <flags> <bytes> [<cas>]` whose line starts at `pos`
/// and whose data block starts at `data_start`.
fn parse_value(
    buf: &[u8],
    pos: usize,
    line: &[u8],
    data_start: usize,
) -> Result<Option<(Reply, usize)>, ReplyError> {
    let mut fields: [Range<usize>; 4] = Default::default();
    let mut count = 0;
    let mut at = 6;
    while at < line.len() {
        let end = memchr::memchr(b' ', &line[at..]).map_or(line.len(), |i| at + i);
        if end > at {
            if count == fields.len() {
                return Err(ReplyError::BadValueHeader);
            }
            fields[count] = at..end;
            count += 1;
        }
        at = end + 1;
    }
    if count < 3 {
        return Err(ReplyError::BadValueHeader);
    }
    let number = |i: usize| parse_u64(&line[fields[i].clone()]).ok_or(ReplyError::BadValueHeader);
    let flags = u32::try_from(number(1)?).map_err(|_| ReplyError::BadValueHeader)?;
    let len = number(2)?;
    if len > MAX_VALUE_BYTES as u64 {
        return Err(ReplyError::BadValueHeader);
    }
    let cas = if count == 4 { Some(number(3)?) } else { None };
    let Some(data) = data_block(buf, data_start, len as usize)? else {
        return Ok(None);
    };
    let next = data.end + 2;
    let key = pos + fields[0].start..pos + fields[0].end;
    let reply = Reply::Value {
        key,
        flags,
        cas,
        data,
    };
    Ok(Some((reply, next)))
}

/// A receive buffer that a socket reads straight into, and that yields the
/// complete replies in it. Parsed bytes are reclaimed lazily, when room for a
/// read is asked for, so ranges in a reply stay valid until the next
/// [`ReplyBuffer::spare`] or [`ReplyBuffer::feed`].
#[derive(Debug, Default)]
pub struct ReplyBuffer {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl ReplyBuffer {
    /// A buffer with room for `capacity` bytes before it grows.
    pub fn with_capacity(capacity: usize) -> Self {
        ReplyBuffer {
            buf: vec![0; capacity],
            start: 0,
            end: 0,
        }
    }

    /// The buffer that reply ranges index.
    pub fn bytes(&self) -> &[u8] {
        &self.buf[..self.end]
    }

    /// Bytes received but not yet returned as replies.
    pub fn pending(&self) -> usize {
        self.end - self.start
    }

    /// Room for at least `min` more bytes, to read into; then call
    /// [`ReplyBuffer::commit`] with how many were written. Invalidates the
    /// ranges of earlier replies.
    pub fn spare(&mut self, min: usize) -> &mut [u8] {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        if self.buf.len() - self.end < min {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.buf.len() - self.end < min {
                let want = (self.end + min).max(self.buf.len() * 2);
                self.buf.resize(want, 0);
            }
        }
        &mut self.buf[self.end..]
    }

    /// Marks `n` bytes of the slice from [`ReplyBuffer::spare`] as received.
    pub fn commit(&mut self, n: usize) {
        assert!(self.end + n <= self.buf.len(), "commit past spare capacity");
        self.end += n;
    }

    /// Copies `bytes` in, for callers that do not read into [`ReplyBuffer::spare`].
    pub fn feed(&mut self, bytes: &[u8]) {
        self.spare(bytes.len())[..bytes.len()].copy_from_slice(bytes);
        self.commit(bytes.len());
    }

    /// The next complete reply, or `Ok(None)` until more bytes arrive.
    #[must_use = "a parsed reply is consumed from the buffer"]
    pub fn next_reply(&mut self) -> Result<Option<Reply>, ReplyError> {
        self.next_parsed(parse_reply)
    }

    /// The next complete reply as `parse` reads it (another protocol's parser, such
    /// as the meta protocol's), or `Ok(None)` until more bytes arrive.
    #[must_use = "a parsed reply is consumed from the buffer"]
    pub fn next_parsed<R>(
        &mut self,
        parse: impl FnOnce(&[u8], usize) -> Result<Option<(R, usize)>, ReplyError>,
    ) -> Result<Option<R>, ReplyError> {
        match parse(&self.buf[..self.end], self.start)? {
            Some((reply, next)) => {
                self.start = next;
                Ok(Some(reply))
            }
            None => Ok(None),
        }
    }

    /// Drops everything buffered (after a reconnect).
    pub fn clear(&mut self) {
        self.start = 0;
        self.end = 0;
    }
}

/// Size of memcached's UDP frame header.
pub const UDP_HEADER_BYTES: usize = 8;

/// memcached's UDP frame header: request id, sequence number of this
/// datagram, total datagrams in the message, and two reserved zero bytes, all
/// big-endian `u16`s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpHeader {
    pub request_id: u16,
    pub seq: u16,
    pub total: u16,
}

impl UdpHeader {
    /// The 8 header bytes.
    pub fn encode(self) -> [u8; UDP_HEADER_BYTES] {
        let [a, b] = self.request_id.to_be_bytes();
        let [c, d] = self.seq.to_be_bytes();
        let [e, f] = self.total.to_be_bytes();
        [a, b, c, d, e, f, 0, 0]
    }

    /// Reads a header from the front of a datagram; `None` if it is too short
    /// or claims a sequence number outside its total.
    pub fn decode(datagram: &[u8]) -> Option<UdpHeader> {
        let h = datagram.get(..UDP_HEADER_BYTES)?;
        let header = UdpHeader {
            request_id: u16::from_be_bytes([h[0], h[1]]),
            seq: u16::from_be_bytes([h[2], h[3]]),
            total: u16::from_be_bytes([h[4], h[5]]),
        };
        (header.total > 0 && header.seq < header.total).then_some(header)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn composed(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut out = Vec::new();
        f(&mut out);
        out
    }

    #[test]
    fn compose_requests() {
        assert_eq!(
            composed(|o| compose_get(o, Retrieval::Get, &["a", "bc"])),
            b"get a bc\r\n"
        );
        assert_eq!(
            composed(|o| compose_get(o, Retrieval::Gets, &["k"])),
            b"gets k\r\n"
        );
        assert_eq!(
            composed(|o| compose_store(o, StoreCommand::Set, b"k", 5, 0, b"hello", false)),
            b"set k 5 0 5\r\nhello\r\n"
        );
        assert_eq!(
            composed(|o| compose_store(o, StoreCommand::Cas(77), b"k", 0, 10, b"", true)),
            b"cas k 0 10 0 77 noreply\r\n\r\n"
        );
        assert_eq!(
            composed(|o| compose_delete(o, b"k", false)),
            b"delete k\r\n"
        );
        assert_eq!(
            composed(|o| compose_incr(o, b"n", 18446744073709551615, true, true)),
            b"decr n 18446744073709551615 noreply\r\n"
        );
        assert_eq!(
            composed(|o| compose_touch(o, b"k", 9, false)),
            b"touch k 9\r\n"
        );
    }

    #[test]
    fn compose_reuses_buffer_without_growing() {
        let mut out = Vec::with_capacity(64);
        let cap = out.capacity();
        for _ in 0..1000 {
            out.clear();
            compose_store(&mut out, StoreCommand::Set, b"key", 1, 2, b"value", false);
        }
        assert_eq!(out.capacity(), cap);
    }

    /// A stream of every reply kind, and what it must parse to.
    const STREAM: &[u8] = b"VALUE k1 5 3\r\nabc\r\nVALUE key2 0 0 99\r\n\r\nEND\r\nSTORED\r\n\
NOT_STORED\r\nEXISTS\r\nNOT_FOUND\r\nDELETED\r\nTOUCHED\r\nOK\r\n12345\r\nERROR\r\n\
CLIENT_ERROR bad data chunk\r\nSERVER_ERROR out of memory\r\nVERSION 1.6.18\r\nSTAT pid 42\r\n";

    fn parse_all(buf: &[u8]) -> Vec<Reply> {
        let mut pos = 0;
        let mut replies = Vec::new();
        while let Some((reply, next)) = parse_reply(buf, pos).unwrap() {
            replies.push(reply);
            pos = next;
        }
        assert_eq!(pos, buf.len(), "trailing bytes left unparsed");
        replies
    }

    fn expected() -> Vec<Reply> {
        vec![
            Reply::Value {
                key: 6..8,
                flags: 5,
                cas: None,
                data: 14..17,
            },
            Reply::Value {
                key: 25..29,
                flags: 0,
                cas: Some(99),
                data: 38..38,
            },
            Reply::End,
            Reply::Stored,
            Reply::NotStored,
            Reply::Exists,
            Reply::NotFound,
            Reply::Deleted,
            Reply::Touched,
            Reply::Ok,
            Reply::Number(12345),
            Reply::Error,
            Reply::ClientError(133..147),
            Reply::ServerError(162..175),
            Reply::Version(185..191),
            Reply::Stat {
                name: 198..201,
                value: 202..204,
            },
        ]
    }

    #[test]
    fn parses_every_reply_kind() {
        let replies = parse_all(STREAM);
        assert_eq!(replies, expected());
        let text = |r: &Range<usize>| &STREAM[r.clone()];
        match (&replies[12], &replies[13], &replies[14]) {
            (Reply::ClientError(c), Reply::ServerError(s), Reply::Version(v)) => {
                assert_eq!(text(c), b"bad data chunk");
                assert_eq!(text(s), b"out of memory");
                assert_eq!(text(v), b"1.6.18");
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn every_prefix_is_incomplete_not_an_error() {
        // Cut the stream at every byte: the parser must return the replies
        // wholly before the cut and then `Ok(None)`, never an error.
        for cut in 0..STREAM.len() {
            let mut pos = 0;
            while let Some((_, next)) = parse_reply(&STREAM[..cut], pos).unwrap() {
                assert!(next <= cut);
                pos = next;
            }
        }
    }

    #[test]
    fn reply_buffer_split_at_every_byte() {
        for cut in 0..=STREAM.len() {
            let mut rb = ReplyBuffer::with_capacity(8);
            let mut replies = Vec::new();
            for part in [&STREAM[..cut], &STREAM[cut..]] {
                rb.feed(part);
                while let Some(r) = rb.next_reply().unwrap() {
                    replies.push(r);
                }
            }
            assert_eq!(replies.len(), expected().len(), "cut at {cut}");
            assert_eq!(rb.pending(), 0);
        }
    }

    #[test]
    fn reply_buffer_one_byte_at_a_time_keeps_data_intact() {
        let mut rb = ReplyBuffer::with_capacity(4);
        let mut values = Vec::new();
        for &b in STREAM {
            rb.feed(&[b]);
            while let Some(r) = rb.next_reply().unwrap() {
                if let Reply::Value { key, data, .. } = r {
                    values.push((rb.bytes()[key].to_vec(), rb.bytes()[data].to_vec()));
                }
            }
        }
        assert_eq!(
            values,
            vec![
                (b"k1".to_vec(), b"abc".to_vec()),
                (b"key2".to_vec(), Vec::new())
            ]
        );
    }

    #[test]
    fn value_data_may_contain_crlf() {
        let buf = b"VALUE k 0 4\r\n\r\n\r\n\r\nEND\r\n";
        let replies = parse_all(buf);
        assert_eq!(
            replies[0],
            Reply::Value {
                key: 6..7,
                flags: 0,
                cas: None,
                data: 13..17
            }
        );
        assert_eq!(replies[1], Reply::End);
    }

    #[test]
    fn malformed_replies_are_errors() {
        let err = |b: &[u8]| parse_reply(b, 0).unwrap_err();
        assert_eq!(
            err(b"BOGUS\r\n"),
            ReplyError::UnknownReply(b"BOGUS".to_vec())
        );
        assert_eq!(err(b"VALUE k x 1\r\na\r\n"), ReplyError::BadValueHeader);
        assert_eq!(err(b"VALUE k 0\r\n"), ReplyError::BadValueHeader);
        assert_eq!(err(b"VALUE k 0 1 2 3\r\n"), ReplyError::BadValueHeader);
        assert_eq!(
            err(b"VALUE k 4294967296 1\r\na\r\n"),
            ReplyError::BadValueHeader
        );
        assert_eq!(err(b"VALUE k 0 1\r\nabc"), ReplyError::BadDataTerminator);
        assert_eq!(err(b"99999999999999999999\r\n"), ReplyError::BadNumber);
        assert_eq!(err(&[b'x'; MAX_REPLY_LINE_BYTES]), ReplyError::LineTooLong);
        assert_eq!(parse_reply(&[b'x'; 100], 0), Ok(None));
    }

    #[test]
    fn udp_header_round_trip() {
        let h = UdpHeader {
            request_id: 0xBEEF,
            seq: 2,
            total: 3,
        };
        assert_eq!(h.encode(), [0xBE, 0xEF, 0, 2, 0, 3, 0, 0]);
        assert_eq!(UdpHeader::decode(&h.encode()), Some(h));
        assert_eq!(UdpHeader::decode(&[0; 7]), None);
        assert_eq!(UdpHeader::decode(&[0, 1, 0, 3, 0, 3, 0, 0]), None);
    }
}
