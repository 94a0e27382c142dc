//! The one dispatch point between the engine and a wire protocol: compose a
//! get or a set, and turn the next reply into an outcome for the request at
//! the head of the connection. Each [`Protocol`] is an arm here; the engine
//! does not change.
//!
//! - Text: `get k1 k2 ...`, answered by `VALUE`s and `END`; `set`.
//! - Meta: one `mg <key> k v q` per key and an `mn`, answered by a `VA` per hit
//!   (a quiet miss sends nothing) and `MN`; `ms`. For a one-key get that is two
//!   commands where text needs one, the price of meta's pipelining idiom.

use std::ops::Range;

use protocol::client::{self, Reply, ReplyBuffer, ReplyError, Retrieval, StoreCommand};
use protocol::meta_client::{self, MetaReply};

use crate::config::Protocol;
use crate::workload::OpKind;

/// What one reply means for the request it answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A value for a get; more replies follow for the same request. Ranges
    /// index the parsed buffer.
    Hit {
        key: Range<usize>,
        value: Range<usize>,
    },
    /// The request failed, but more of its replies follow (meta: an error for
    /// one `mg`, before the `MN` that ends the request).
    Failed,
    /// The request is answered; `ok` is false for an error or an unexpected reply.
    Done { ok: bool },
}

/// Starts a get request.
pub fn get_start(p: Protocol, out: &mut Vec<u8>) {
    match p {
        Protocol::Text => client::compose_retrieval_start(out, Retrieval::Get),
        Protocol::Meta => {}
    }
}

/// Adds one key to a get request.
pub fn get_key(p: Protocol, out: &mut Vec<u8>, key: &[u8]) {
    match p {
        Protocol::Text => client::compose_key(out, key),
        Protocol::Meta => meta_client::compose_get(out, key),
    }
}

/// Ends a get request.
pub fn get_end(p: Protocol, out: &mut Vec<u8>) {
    match p {
        Protocol::Text => client::compose_end(out),
        Protocol::Meta => meta_client::compose_noop(out),
    }
}

/// Appends a set request.
pub fn set(p: Protocol, out: &mut Vec<u8>, key: &[u8], value: &[u8]) {
    match p {
        Protocol::Text => client::compose_store(out, StoreCommand::Set, key, 0, 0, value, false),
        Protocol::Meta => meta_client::compose_set(out, key, value),
    }
}

/// Maps a parsed reply to an outcome for a request of `kind`.
fn outcome(kind: OpKind, reply: Reply) -> Outcome {
    match (kind, reply) {
        (OpKind::Get, Reply::Value { key, data, .. }) => Outcome::Hit { key, value: data },
        (OpKind::Get, Reply::End) | (OpKind::Set, Reply::Stored) => Outcome::Done { ok: true },
        _ => Outcome::Done { ok: false },
    }
}

/// Maps a parsed meta reply to an outcome for a request of `kind`.
fn meta_outcome(kind: OpKind, reply: MetaReply) -> Outcome {
    match (kind, reply) {
        (OpKind::Get, MetaReply::Value { key, data }) => Outcome::Hit { key, value: data },
        (OpKind::Get, MetaReply::Mn) | (OpKind::Set, MetaReply::Hd) => Outcome::Done { ok: true },
        // Anything else for a get answers one of its `mg`s; its `MN` still follows.
        (OpKind::Get, _) => Outcome::Failed,
        (OpKind::Set, _) => Outcome::Done { ok: false },
    }
}

/// The next outcome from a stream buffer, or `Ok(None)` until more bytes arrive.
pub fn next_outcome(
    p: Protocol,
    rx: &mut ReplyBuffer,
    kind: OpKind,
) -> Result<Option<Outcome>, ReplyError> {
    match p {
        Protocol::Text => Ok(rx.next_reply()?.map(|r| outcome(kind, r))),
        Protocol::Meta => Ok(rx
            .next_parsed(meta_client::parse_reply)?
            .map(|r| meta_outcome(kind, r))),
    }
}

/// The next outcome from `buf[pos..]` (a reassembled UDP message) and the
/// position after it.
pub fn outcome_at(
    p: Protocol,
    buf: &[u8],
    pos: usize,
    kind: OpKind,
) -> Result<Option<(Outcome, usize)>, ReplyError> {
    match p {
        Protocol::Text => {
            Ok(client::parse_reply(buf, pos)?.map(|(r, next)| (outcome(kind, r), next)))
        }
        Protocol::Meta => {
            Ok(meta_client::parse_reply(buf, pos)?.map(|(r, next)| (meta_outcome(kind, r), next)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_reply_outcomes() {
        let mut rx = ReplyBuffer::with_capacity(64);
        rx.feed(b"VALUE k 0 1\r\nx\r\nEND\r\nSERVER_ERROR oops\r\nSTORED\r\nNOT_STORED\r\n");
        let p = Protocol::Text;
        assert!(matches!(
            next_outcome(p, &mut rx, OpKind::Get),
            Ok(Some(Outcome::Hit { .. }))
        ));
        assert_eq!(
            next_outcome(p, &mut rx, OpKind::Get),
            Ok(Some(Outcome::Done { ok: true }))
        );
        assert_eq!(
            next_outcome(p, &mut rx, OpKind::Get),
            Ok(Some(Outcome::Done { ok: false }))
        );
        assert_eq!(
            next_outcome(p, &mut rx, OpKind::Set),
            Ok(Some(Outcome::Done { ok: true }))
        );
        assert_eq!(
            next_outcome(p, &mut rx, OpKind::Set),
            Ok(Some(Outcome::Done { ok: false }))
        );
        assert_eq!(next_outcome(p, &mut rx, OpKind::Set), Ok(None));
    }

    #[test]
    fn meta_requests_and_outcomes() {
        let p = Protocol::Meta;
        let mut out = Vec::new();
        get_start(p, &mut out);
        get_key(p, &mut out, b"a");
        get_key(p, &mut out, b"b");
        get_end(p, &mut out);
        set(p, &mut out, b"c", b"xyz");
        assert_eq!(out, b"mg a k v q\r\nmg b k v q\r\nmn\r\nms c 3\r\nxyz\r\n");
        let mut rx = ReplyBuffer::with_capacity(64);
        rx.feed(b"VA 1 ka\r\nx\r\nCLIENT_ERROR bad command line format\r\nMN\r\nHD\r\nNS\r\n");
        let Ok(Some(Outcome::Hit { key, value })) = next_outcome(p, &mut rx, OpKind::Get) else {
            panic!("a hit first");
        };
        assert_eq!(
            (&rx.bytes()[key], &rx.bytes()[value]),
            (&b"a"[..], &b"x"[..])
        );
        let rest: Vec<_> = [OpKind::Get, OpKind::Get, OpKind::Set, OpKind::Set]
            .into_iter()
            .map(|k| next_outcome(p, &mut rx, k))
            .collect();
        assert_eq!(
            rest,
            [
                Ok(Some(Outcome::Failed)),
                Ok(Some(Outcome::Done { ok: true })),
                Ok(Some(Outcome::Done { ok: true })),
                Ok(Some(Outcome::Done { ok: false })),
            ]
        );
        assert_eq!(next_outcome(p, &mut rx, OpKind::Get), Ok(None));
    }
}
