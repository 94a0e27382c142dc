//! Sans-I/O memcached protocol code shared by the server and by ferrobench.
//!
//! Layout, lower layers first (a module uses only those above it in this list,
//! never one below):
//!
//! - [`lex`], [`scan`], [`base64`]: leaves. Splitting a text line into tokens
//!   and reading its numbers as memcached's `safe_strto*` do; byte scans a word
//!   or 16 bytes at a time (delimiters, spaces, the keys of a multi-get);
//!   memcached's base64 for binary meta keys.
//! - [`request`]: what a text or meta request line parses to ([`text::Request`],
//!   [`meta::MetaRequest`] and the types they carry), borrowing the line.
//! - [`meta`]: the meta command parser (`mg ms md ma me`).
//! - [`text`]: server side of the text protocol: frames request lines and
//!   parses them in place (token offsets into the caller's buffer, no copies),
//!   with memcached's error reply for every malformed line; meta commands go to
//!   [`meta`].
//! - [`fast`]: fast paths for the commonest lines (a one-key `get`, a plain
//!   `set`), which give exactly what the text parser would, or decline.
//! - [`reply`]: server side reply composition for the hot path (`VALUE`
//!   lines, numbers written in place).
//! - [`binary`]: the binary protocol's header, opcodes and status codes, and
//!   the server side request decoder.
//! - [`reply_stream`]: client side framing of a reply stream (lines, data
//!   blocks, limits, errors), shared by the two reply parsers below.
//! - [`client`]: client side of the text protocol. Composes requests and
//!   parses replies; used by ferrobench and by tests.
//! - [`meta_client`]: client side of the meta protocol as ferrobench speaks it
//!   (`mg` in quiet mode closed by `mn`, `ms`).
//!
//! Items keep the paths callers have always used: [`text`] re-exports the
//! request types and the lexing helpers, [`fast`] the scans, [`meta`] the meta
//! request types and base64, [`client`] the reply stream's error and limits.
//!
//! Nothing here owns a socket or reads a clock: callers feed bytes in and
//! take parsed values out, so every behaviour is a plain unit test.

pub mod base64;
pub mod binary;
pub mod client;
pub mod fast;
pub mod lex;
pub mod meta;
pub mod meta_client;
pub mod reply;
pub mod reply_stream;
pub mod request;
pub mod scan;
pub mod text;
