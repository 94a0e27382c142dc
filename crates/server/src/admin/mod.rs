//! The registries and services beside the request path: the expired-item crawler,
//! `stats detail`'s per-prefix counters, `stats conns`, the two authentication
//! schemes (SASL for binary, `-Y` for text), the TLS configuration, and `watch`'s log
//! streams with their logger thread. None of them knows about `Shared`.

pub mod auth;
pub mod conns;
pub mod crawler;
pub mod prefix;
pub mod sasl;
pub mod tls;
pub mod verbose;
pub mod watch;
