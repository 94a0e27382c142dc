//! A connection without its socket: [`conn::Conn`] frames the bytes a backend read,
//! hands each request to its protocol, and holds the replies for the backend to
//! write. Every backend (epoll, io_uring, UDP) drives it through the same calls.

pub mod ahead;
pub mod conn;

pub use ahead::Ahead;
pub use conn::{Conn, Status};
