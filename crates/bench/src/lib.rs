//! ferrobench: a load generator for memcached-compatible servers.
//!
//! A tour, from the command line down to the wire:
//! - [`cli`]: flags and presets, resolved into a [`config::Config`].
//! - [`engine`]: connects, preloads, runs worker threads (one mio loop each,
//!   closed or open loop) and merges their [`stats::Stats`].
//!   - `engine::wire` is the single place that speaks a wire protocol
//!     (through the `protocol` crate's client side).
//! - [`fdlimit`]: the soft open-file limit raised to the hard one at start,
//!   so thousands of connections fit.
//! - [`workload`]: key/value sizes, key choice (uniform, Zipf), get:set mix,
//!   multi-get batches; [`rng`] feeds it; [`verify`] checksums values.
//! - [`schedule`]: open-loop intended send times (Poisson or fixed).
//! - [`placement`] (`--hash`): key -> server mapping as libmemcached,
//!   pylibmc or twemproxy place keys; [`ketama`] and [`hashkit`] under it.
//! - [`search`]: `--slo` bisection and `--rate-sweep`.
//! - [`report`] and [`plot`]: table, JSON, CSV, .hgrm and SVG.
//! - [`compare`]: `ferrobench compare`, ferrocache against memcached and the
//!   null-store floor, side by side (scripts/bench-compare, docs/benchmarks.md).

pub mod cli;
pub mod compare;
pub mod config;
pub mod engine;
pub mod fdlimit;
pub mod hashkit;
pub mod ketama;
pub mod placement;
pub mod plot;
pub mod report;
pub mod rng;
pub mod schedule;
pub mod search;
pub mod stats;
pub mod tls;
pub mod verify;
pub mod workload;
