//! Sans-I/O memcached protocol code shared by the server and by ferrobench.
//!
//! Layout:
//! - [`text`]: server side of the text protocol. Frames and parses request
//!   lines in place (token offsets into the caller's buffer, no copies) and
//!   names every memcached error reply.
//! - [`meta`]: server side of the meta protocol (`mg ms md ma me`).
//! - [`binary`]: the binary protocol's header and opcodes.
//! - [`client`]: client side. Composes requests and parses replies; used by
//!   ferrobench and by tests.
//!
//! Nothing here owns a socket or reads a clock: callers feed bytes in and
//! take parsed values out, so every behaviour is a plain unit test.

pub mod binary;
pub mod client;
pub mod meta;
pub mod text;
