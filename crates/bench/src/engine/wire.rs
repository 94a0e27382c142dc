//! The one dispatch point between the engine and a wire protocol: compose a
//! get or a set, and turn the next reply into an outcome for the request at
//! the head of the connection. Meta and binary go here as new
//! [`Protocol`] arms; the engine does not change.

use std::ops::Range;

use protocol::client::{self, Reply, ReplyBuffer, ReplyError, Retrieval, StoreCommand};

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
    /// The request is answered; `ok` is false for an error or an unexpected reply.
    Done { ok: bool },
}

/// Starts a get request.
pub fn get_start(p: Protocol, out: &mut Vec<u8>) {
    match p {
        Protocol::Text => client::compose_retrieval_start(out, Retrieval::Get),
    }
}

/// Adds one key to a get request.
pub fn get_key(p: Protocol, out: &mut Vec<u8>, key: &[u8]) {
    match p {
        Protocol::Text => client::compose_key(out, key),
    }
}

/// Ends a get request.
pub fn get_end(p: Protocol, out: &mut Vec<u8>) {
    match p {
        Protocol::Text => client::compose_end(out),
    }
}

/// Appends a set request.
pub fn set(p: Protocol, out: &mut Vec<u8>, key: &[u8], value: &[u8]) {
    match p {
        Protocol::Text => client::compose_store(out, StoreCommand::Set, key, 0, 0, value, false),
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

/// The next outcome from a stream buffer, or `Ok(None)` until more bytes arrive.
pub fn next_outcome(
    p: Protocol,
    rx: &mut ReplyBuffer,
    kind: OpKind,
) -> Result<Option<Outcome>, ReplyError> {
    match p {
        Protocol::Text => Ok(rx.next_reply()?.map(|r| outcome(kind, r))),
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
}
