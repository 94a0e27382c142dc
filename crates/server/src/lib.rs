//! ferrocache: a memcached-compatible cache server, as a library with a thin binary.
//!
//! The layers call one way only, top to bottom:
//!
//! ```text
//!   io        epoll, io_uring and UDP backends, listeners, start-up, maintenance threads
//!    |
//!   session   Conn: buffers and framing; one `process` call per batch of input
//!    |
//!   proto     text, meta, binary: parse -> ops -> compose the reply
//!    |
//!   ops       memcached's rules, one per command for all three protocols; the only
//!    |        caller of the store and of the command counters
//!   reply     the output sink (spliced values, UDP message ends)
//!   state     Shared: settings, store, clock, registries
//!    |
//!   admin     crawler, conns, prefix stats, SASL and `-Y` authentication
//!   config, clock, stats, sys (the crate's only `unsafe`: raw system calls)
//! ```
//!
//! Parsing lives in the `protocol` crate and item memory in `storage`; neither knows
//! about sockets. `scripts/check-layers` fails on an import that goes up or round.

#![deny(unsafe_code)]

pub mod admin;
pub mod clock;
pub mod config;
pub mod io;
pub mod ops;
pub mod proto;
pub mod reply;
pub mod session;
pub mod state;
pub mod stats;
#[allow(unsafe_code)]
pub mod sys;
