//! Client side of memcached's meta protocol, as a load generator speaks it: gets as
//! `mg <key> k v q` (one per key, quiet so that a miss sends nothing) closed by `mn`,
//! whose `MN` reply ends the request; sets as `ms <key> <bytes>`.
//!
//! ```text
//!   request   mg a k v q\r\n mg b k v q\r\n mn\r\n
//!   replies   VA 3 ka\r\nxyz\r\n MN\r\n            (b missed: nothing for it)
//! ```
//!
//! Parsing works as [`crate::client::parse_reply`] does, on the same framing
//! ([`crate::reply_stream`]): incremental, in place, byte ranges into the caller's
//! buffer, `Ok(None)` until a reply is complete.

use std::ops::Range;

use crate::reply_stream::{self, ReplyError, MAX_VALUE_BYTES};

/// Appends `mg <key> k v q`: the value and the key, nothing on a miss.
pub fn compose_get(out: &mut Vec<u8>, key: &[u8]) {
    out.extend_from_slice(b"mg ");
    out.extend_from_slice(key);
    out.extend_from_slice(b" k v q\r\n");
}

/// Appends `mn`, whose `MN` reply follows every reply to the requests before it.
pub fn compose_noop(out: &mut Vec<u8>) {
    out.extend_from_slice(b"mn\r\n");
}

/// Appends `ms <key> <bytes>` and the data block (flags 0, no expiry).
pub fn compose_set(out: &mut Vec<u8>, key: &[u8], value: &[u8]) {
    out.extend_from_slice(b"ms ");
    out.extend_from_slice(key);
    out.push(b' ');
    out.extend_from_slice(itoa::Buffer::new().format(value.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// One complete meta reply. Ranges index the buffer that was parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MetaReply {
    /// `VA <bytes> <flags>*` and its data block; `key` is the `k` flag's token (an
    /// empty range without one).
    Value {
        key: Range<usize>,
        data: Range<usize>,
    },
    /// `HD`: done, nothing to return (a stored `ms`).
    Hd,
    /// `EN`: a miss, when not quiet.
    En,
    /// `NS`: not stored.
    Ns,
    /// `EX`: a CAS mismatch.
    Ex,
    /// `NF`: not found.
    Nf,
    /// `MN`: the reply to `mn`.
    Mn,
    /// `ERROR`.
    Error,
    /// `CLIENT_ERROR <message>`.
    ClientError(Range<usize>),
    /// `SERVER_ERROR <message>`.
    ServerError(Range<usize>),
}

/// Parses one meta reply from `buf[pos..]`: the reply (ranges index `buf`) and the
/// position just past it, or `Ok(None)` while it is incomplete.
pub fn parse_reply(buf: &[u8], pos: usize) -> Result<Option<(MetaReply, usize)>, ReplyError> {
    let Some((line, next)) = reply_stream::reply_line(buf, pos)? else {
        return Ok(None);
    };
    // A two-letter status, alone or followed by flags.
    let status = match line {
        [a, b] | [a, b, b' ', ..] => [*a, *b],
        _ => [0, 0],
    };
    let reply = match &status {
        b"VA" => return parse_value(buf, pos, line, next),
        b"HD" => MetaReply::Hd,
        b"EN" => MetaReply::En,
        b"NS" => MetaReply::Ns,
        b"EX" => MetaReply::Ex,
        b"NF" => MetaReply::Nf,
        b"MN" => MetaReply::Mn,
        _ if line == b"ERROR" => MetaReply::Error,
        _ if line.starts_with(b"CLIENT_ERROR") => {
            MetaReply::ClientError(reply_stream::message(pos, line, 12))
        }
        _ if line.starts_with(b"SERVER_ERROR") => {
            MetaReply::ServerError(reply_stream::message(pos, line, 12))
        }
        _ => {
            return Err(ReplyError::UnknownReply(
                line[..line.len().min(64)].to_vec(),
            ))
        }
    };
    Ok(Some((reply, next)))
}

/// `VA <bytes> <flags>*` at `pos`, its data block from `data_start`.
fn parse_value(
    buf: &[u8],
    pos: usize,
    line: &[u8],
    data_start: usize,
) -> Result<Option<(MetaReply, usize)>, ReplyError> {
    let mut tokens = line[3..]
        .split(|&b| b == b' ')
        .scan(3, |at, t| {
            let start = *at;
            *at += t.len() + 1;
            Some((start, t))
        })
        .filter(|(_, t)| !t.is_empty());
    let (_, len) = tokens.next().ok_or(ReplyError::BadValueHeader)?;
    let len = reply_stream::parse_u64(len)
        .filter(|&n| n <= MAX_VALUE_BYTES as u64)
        .ok_or(ReplyError::BadValueHeader)?;
    let key = tokens
        .find(|(_, t)| t[0] == b'k')
        .map_or(pos..pos, |(at, t)| pos + at + 1..pos + at + t.len());
    let Some(data) = reply_stream::data_block(buf, data_start, len as usize)? else {
        return Ok(None);
    };
    let next = data.end + 2;
    Ok(Some((MetaReply::Value { key, data }, next)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(buf: &[u8]) -> Vec<MetaReply> {
        let mut pos = 0;
        let mut out = Vec::new();
        while let Some((r, next)) = parse_reply(buf, pos).expect("parses") {
            out.push(r);
            pos = next;
        }
        assert_eq!(pos, buf.len(), "everything consumed");
        out
    }

    #[test]
    fn requests() {
        let mut out = Vec::new();
        compose_get(&mut out, b"k1");
        compose_set(&mut out, b"k2", b"hello");
        compose_noop(&mut out);
        assert_eq!(out, b"mg k1 k v q\r\nms k2 5\r\nhello\r\nmn\r\n");
    }

    #[test]
    fn every_reply_kind() {
        let buf = b"VA 5 kkey1\r\nhe\r\no\r\nVA 0\r\n\r\nHD\r\nEN\r\nNS\r\nEX\r\nNF O9\r\nMN\r\n\
                    ERROR\r\nCLIENT_ERROR bad data chunk\r\nSERVER_ERROR out of memory\r\n";
        let got = parse_all(buf);
        assert_eq!(
            got[..2],
            [
                MetaReply::Value {
                    key: 6..10,
                    data: 12..17
                },
                MetaReply::Value {
                    key: 19..19,
                    data: 25..25
                },
            ]
        );
        assert_eq!(&buf[6..10], b"key1");
        assert_eq!(&buf[12..17], b"he\r\no");
        let rest = &got[2..];
        assert!(matches!(
            rest,
            [
                MetaReply::Hd,
                MetaReply::En,
                MetaReply::Ns,
                MetaReply::Ex,
                MetaReply::Nf,
                MetaReply::Mn,
                MetaReply::Error,
                MetaReply::ClientError(_),
                MetaReply::ServerError(_),
            ]
        ));
        if let MetaReply::ClientError(r) = &rest[7] {
            assert_eq!(&buf[r.clone()], b"bad data chunk");
        }
    }

    #[test]
    fn the_key_flag_may_come_anywhere_among_the_flags() {
        let buf = b"VA 2 f0 c12 kabc s2\r\nxy\r\n";
        let (r, next) = parse_reply(buf, 0).unwrap().unwrap();
        let MetaReply::Value { key, data } = r else {
            panic!("a value");
        };
        assert_eq!(
            (&buf[key], &buf[data], next),
            (&b"abc"[..], &b"xy"[..], buf.len())
        );
    }

    #[test]
    fn every_prefix_is_incomplete_and_garbage_is_an_error() {
        let buf = b"VA 3 kk\r\nabc\r\nMN\r\n";
        for cut in 0..buf.len() {
            let first = parse_reply(&buf[..cut], 0).unwrap();
            assert!(cut >= 14 || first.is_none(), "cut {cut}");
        }
        assert!(parse_reply(b"VA x\r\n", 0).is_err());
        assert!(parse_reply(b"VA 3\r\nabcd\r\n", 0).is_err());
        assert!(parse_reply(b"HDX\r\n", 0).is_err());
        assert!(parse_reply(b"VALUE k 0 1\r\nx\r\n", 0).is_err());
    }
}
