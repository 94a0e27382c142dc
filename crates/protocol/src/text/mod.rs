//! Server side of the memcached text protocol.
//!
//! This module frames request lines and parses them in place, the way
//! memcached 1.6's `proto_text.c` does, so that every malformed line gets the
//! reply memcached gives:
//!
//! ```text
//!   read buffer:  s e t ␠ k ␠ 0 ␠ 0 ␠ 5 \r \n h e l l o \r \n g e t ...
//!                 └──────── line ──────┘       └─ data ─┘
//!   frame_line()  -> Line { end, next }     (line without "\r\n", next line start)
//!   parse_request(line) -> Request::Store { key: "k", len: 5, .. }
//!   the caller waits for len + 2 data bytes, then checks the trailing "\r\n".
//! ```
//!
//! Tokens are split on the ASCII space only (not tabs), at most
//! [`MAX_TOKENS`]` - 1` per pass, exactly as memcached's `tokenize_command`.
//! Numbers are parsed with the semantics of memcached's `safe_strto*`
//! helpers, which wrap C's `strtoul`/`strtol`, including their quirks
//! (leading whitespace and `+` accepted, 32-bit truncation of 64-bit
//! results); see `docs/protocol.md`.
//!
//! `frame` finds where a line ends (and cuts off a peer that sends none);
//! `parse` turns one framed line into a request.
//!
//! The parser is the top of the text-protocol stack: it builds the types of
//! [`crate::request`] from the tokens and numbers of [`crate::lex`], and hands
//! meta commands to [`crate::meta`]. Those pieces are re-exported here, where
//! callers have always found them.

mod frame;
mod parse;

pub use frame::{frame_line, LineFrame, MAX_GET_LINE_BYTES, MAX_UNTERMINATED_LINE_BYTES};
pub use parse::parse_request;

pub use crate::lex::{safe_strtod, safe_strtol, safe_strtoul, safe_strtoull, Tokens, MAX_TOKENS};
pub use crate::request::{
    CrawlTarget, CrawlerCommand, DebugTime, DumpClasses, ErrorReply, ExtstoreSetting, GetCommand,
    Keys, Request, StoreCommand, TuneCommand, WatchStreams, MAX_KEY_LEN,
};
