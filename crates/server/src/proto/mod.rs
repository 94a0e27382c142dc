//! The three protocols: each parses a request (with the `protocol` crate), runs it
//! through `ops`, and composes its reply. Nothing here calls the store or bumps a
//! command counter itself.
//!
//! - [`text`]: memcached's text protocol (`get`, `set`, `delete`, ...).
//! - [`meta`]: the meta commands (`mg`, `ms`, `md`, `ma`, `me`, `mn`).
//! - [`binary`]: the binary protocol, as `proto_bin.c`.
//! - [`stats`]: the table of `stats` groups, which the text and binary protocols read.

pub mod binary;
pub mod meta;
pub mod stats;
pub mod text;

/// What the connection must do after a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// Write what is buffered, then close (`quit`).
    CloseAfterWrite,
    /// Close without another reply.
    Close,
    /// `lru_crawler metadump`, admitted: the connection runs the dump (`ops/dump.rs`),
    /// reading the classes from the line again. No payload, so that a `Flow` stays
    /// one byte in a register on every request.
    Dump,
    /// `watch` accepted (a watcher slot reserved): the connection becomes a watcher
    /// of these streams.
    Watch {
        streams: u16,
    },
}
