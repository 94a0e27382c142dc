//! The resolved run configuration: what the flags and the preset add up to.

use std::net::SocketAddr;
use std::ops::Range;
use std::time::Duration;

use crate::placement::Distribution;
use crate::schedule::Arrival;
use crate::tls::TlsClient;
use crate::workload::Workload;

/// One `--server HOST:PORT`.
#[derive(Clone, Debug)]
pub struct Server {
    /// As the user wrote it; reports use this name.
    pub name: String,
    /// Host as written and port: ketama hashes these, as libmemcached does.
    pub host: String,
    pub port: u16,
    pub addr: SocketAddr,
}

/// How requests travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    Tcp,
    /// memcached's UDP framing (8-byte header per datagram).
    Udp,
}

/// Which wire protocol is spoken; each has its compose/parse pair in the
/// protocol crate, dispatched in `engine::wire`. (Binary is not spoken.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// `get` and `set`.
    Text,
    /// `mg ... q` closed by `mn`, and `ms` (see `engine::wire`).
    Meta,
}

/// Closed loop (fixed concurrency) or open loop (fixed arrival rate).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Load {
    Closed,
    Open { rate: f64, arrival: Arrival },
}

/// Everything one run needs.
#[derive(Clone, Debug)]
pub struct Config {
    pub servers: Vec<Server>,
    /// `--hash`: how keys are placed over several servers.
    pub hash: Distribution,
    /// `--keep-going`: a lost connection counts as errors and is redialled
    /// instead of ending the run.
    pub keep_going: bool,
    pub transport: Transport,
    /// `--tls`: every TCP connection (preload included) speaks TLS.
    pub tls: Option<TlsClient>,
    pub protocol: Protocol,
    /// Client sessions; each holds one connection to every server.
    pub connections: usize,
    pub threads: usize,
    /// Closed loop: requests in flight per session.
    pub pipeline: usize,
    /// Measured time after the warm-up.
    pub duration: Duration,
    /// Stop after this many requests (over all threads), if set.
    pub requests: Option<u64>,
    pub warmup: Duration,
    pub workload: Workload,
    /// Keys shared by all sessions, unless `keys_per_conn` is set.
    pub keyspace: u64,
    /// Each session gets this many keys of its own.
    pub keys_per_conn: Option<u64>,
    pub preload: bool,
    pub verify: bool,
    pub load: Load,
    /// Open loop: most requests in flight over all threads.
    pub max_outstanding: usize,
    /// A reply later than this counts as a timeout (UDP: the request is given up).
    pub timeout: Duration,
    pub seed: u64,
    /// Print the live progress line.
    pub progress: bool,
}

impl Config {
    /// Number of distinct keys the run touches.
    pub fn total_keys(&self) -> u64 {
        match self.keys_per_conn {
            Some(k) => k * self.connections as u64,
            None => self.keyspace,
        }
    }

    /// The keys session `s` reads from.
    pub fn get_range(&self, s: usize) -> Range<u64> {
        match self.keys_per_conn {
            Some(k) => s as u64 * k..(s as u64 + 1) * k,
            None => 0..self.keyspace,
        }
    }

    /// The keys session `s` owns (for the overwrite-oldest set mode): its own
    /// keys, or its share of the shared keyspace.
    pub fn own_range(&self, s: usize) -> Range<u64> {
        if self.keys_per_conn.is_some() {
            return self.get_range(s);
        }
        let n = self.connections as u64;
        let (lo, hi) = (
            self.keyspace * s as u64 / n,
            self.keyspace * (s as u64 + 1) / n,
        );
        if lo < hi {
            lo..hi
        } else {
            0..self.keyspace
        }
    }
}
