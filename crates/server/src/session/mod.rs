//! A connection without its socket: [`conn::Conn`] frames the bytes a backend read,
//! hands each request to its protocol, and holds the replies for the backend to
//! write. Every backend (epoll, io_uring, UDP) drives it through the same calls.
//!
//! [`ahead`] parses the fast-path requests of a pipelined batch ahead of the one being
//! run, so that the cache misses of their lookups overlap.

pub mod ahead;
pub mod conn;

pub use ahead::Ahead;
pub use conn::{Conn, Status};
