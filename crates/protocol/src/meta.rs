//! Server side of memcached's meta protocol (`mg ms md ma me`).
//!
//! Placeholder: every meta command but `mn` is answered `ERROR` until the
//! full flag grammar lands here.

use crate::text::{ErrorReply, Request, Tokens};

/// The meta commands that carry a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaCommand {
    Get,
    Set,
    Delete,
    Arithmetic,
    Debug,
}

/// One parsed meta request.
#[derive(Clone, Debug)]
pub struct MetaRequest<'a> {
    pub command: MetaCommand,
    pub line: &'a [u8],
}

impl MetaRequest<'_> {
    /// Length of the data block that follows the line (`ms` only).
    #[must_use]
    pub fn data_len(&self) -> Option<usize> {
        None
    }
}

/// Parse a meta command line whose command token is `command`.
#[must_use]
pub fn parse_meta<'a>(command: MetaCommand, tokens: &Tokens<'a>, line: &'a [u8]) -> Request<'a> {
    let _ = (command, tokens, line);
    Request::Invalid {
        reply: ErrorReply::Error,
        noreply: false,
    }
}
