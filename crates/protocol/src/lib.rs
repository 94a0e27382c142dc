//! Sans-I/O memcached protocol code shared by the server and by ferrobench.
//!
//! Layout:
//! - [`text`]: server side of the text protocol. Frames and parses request
//!   lines in place (token offsets into the caller's buffer, no copies) and
//!   names every memcached error reply.
//! - [`fast`]: fast paths for the commonest lines (a one-key `get`, a plain
//!   `set`), which give exactly what the general parser would, or decline.
//! - [`meta`]: server side of the meta protocol (`mg ms md ma me`).
//! - [`reply`]: server side reply composition for the hot path (`VALUE`
//!   lines, numbers written in place).
//! - [`binary`]: the binary protocol's header and opcodes.
//! - [`client`]: client side. Composes requests and parses replies; used by
//!   ferrobench and by tests.
//! - [`meta_client`]: client side of the meta protocol as ferrobench speaks it
//!   (`mg` in quiet mode closed by `mn`, `ms`).
//!
//! Nothing here owns a socket or reads a clock: callers feed bytes in and
//! take parsed values out, so every behaviour is a plain unit test.

pub mod binary;
pub mod client;
pub mod fast;
pub mod meta;
pub mod meta_client;
pub mod reply;
pub mod text;
