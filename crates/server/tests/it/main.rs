//! The server's integration tests, as one test binary: a module per area, each a file of
//! this folder (its own `//!` says what it checks; docs/testing.md has the table).
//!
//! One binary links once, where a file of `tests/` each was a program of its own linked
//! on its own, and `cargo test --release --workspace --test it -- wire::` runs one area without building
//! another (`scripts/test-one PATTERN` does that with the workspace's features).
//!
//! [`common`] holds what they share: `ServerProcess` (a server on a free loopback port,
//! killed by PID on drop), a small blocking `Client`, a seeded `Rng`, and the TLS
//! clients and test certificates. Tests of different areas run side by side in this one
//! process, so the tests that hold thousands of connections take a guard from
//! `common::descriptors_for` for their run, and wait for each other.

mod common;

mod ascii_auth;
mod binary;
mod cas_race;
mod conn;
mod conn_scale;
mod daemon;
mod differential;
mod extstore;
mod flags;
mod hostile;
mod integrity;
mod io_backend;
mod lock_memory;
mod memory_bound;
mod memory_promise;
mod meta;
mod metadump;
mod placement;
mod ports;
mod shutdown;
mod stats_classes;
mod stats_conns;
mod stats_detail;
mod stats_latency;
mod tls;
mod tuning;
mod udp;
mod verbose;
mod warm_restart;
mod watch;
mod wire;
mod zero_copy;
