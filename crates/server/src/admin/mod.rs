//! The registries and services beside the request path, none of which knows about
//! `Shared`:
//!
//! - [`crawler`]: the expired-item crawler and its tunables; [`prefix`]: `stats
//!   detail`'s per-prefix counters; [`conns`]: `stats conns`;
//! - [`sasl`]: SASL PLAIN for the binary protocol (`-S`); [`auth`]: `-Y`'s ASCII
//!   authentication;
//! - [`tls`]: the rustls configuration, `refresh_certs` and the TLS counters;
//! - [`watch`]: `watch`'s log streams and their logger thread; [`verbose`]: the
//!   `-vv` lines, formatted.

pub mod auth;
pub mod conns;
pub mod crawler;
pub mod prefix;
pub mod sasl;
pub mod tls;
pub mod verbose;
pub mod watch;
