//! Memory efficiency: how many items fit under the same `-m`, and what hit
//! ratio that buys.
//!
//! **Fill to the first eviction.** One connection sends pipelined
//! `set ... noreply` commands in batches of a few MiB; after each batch a
//! `stats` on the same connection (so every set before it has run) reads
//! `evictions` and `curr_items`. The first batch that caused an eviction
//! ends the fill; `curr_items` then is what the server holds when full.
//!
//! ```text
//!   [set k..0 noreply][set k..1 noreply] ... 4 MiB ... [stats] -> evictions == 0? repeat
//! ```
//!
//! **Zipf hit ratio.** A keyspace three times what memcached holds at the
//! same `-m`; Zipf(0.99) sets warm the cache, then a 1:1 get:set run
//! measures the fraction of gets that hit. Both phases are a fixed number of
//! requests, not a fixed time, so the faster server gets no extra warm-up.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::load;
use super::servers::{stat_u64, stats_on, Server};
use crate::engine;
use crate::rng::Rng;
use crate::workload::{write_key, SizeDist, MAX_KEY_BYTES};

/// Bytes of set commands per batch between `stats` checks.
const FILL_BATCH_BYTES: usize = 4 << 20;
/// Key size of every fill.
pub const FILL_KEY_BYTES: usize = 20;

/// The result of filling one server until it first evicted.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Fill {
    /// `curr_items` at the first `stats` that showed an eviction.
    pub items: u64,
    /// Sets sent up to then.
    pub sets: u64,
    /// Whether an eviction was seen (false: stopped at the time limit).
    pub evicted: bool,
    /// VmRSS at that point, and of the empty server before the fill.
    pub rss_bytes: u64,
    pub empty_rss_bytes: u64,
    /// Mean key + value bytes of the items sent.
    pub payload_bytes_per_item: f64,
    pub secs: f64,
}

impl Fill {
    pub fn rss_per_item(&self) -> f64 {
        self.rss_bytes as f64 / self.items.max(1) as f64
    }
}

/// Fills `server` with `FILL_KEY_BYTES`-byte keys and values drawn from
/// `values` (seeded, so both servers get the same sequence) until it evicts
/// or `time_limit` passes.
pub fn fill_until_eviction(
    server: &mut Server,
    values: &SizeDist,
    time_limit: Duration,
) -> anyhow::Result<Fill> {
    let empty_rss_bytes = server.rss_bytes()?;
    let mut conn = TcpStream::connect(server.addr)
        .with_context(|| format!("connecting to {}", server.kind.name()))?;
    conn.set_nodelay(true)?;
    conn.set_read_timeout(Some(Duration::from_secs(60)))?;
    let key_size = SizeDist::fixed(FILL_KEY_BYTES);
    let filler: Vec<u8> = (0..values.max()).map(|i| b'a' + (i % 26) as u8).collect();
    let mut rng = Rng::new(0xF111);
    let mut key = [0u8; MAX_KEY_BYTES];
    let mut batch = Vec::with_capacity(FILL_BATCH_BYTES + 64 * 1024);
    let (mut sets, mut payload) = (0u64, 0u64);
    let start = Instant::now();
    loop {
        batch.clear();
        while batch.len() < FILL_BATCH_BYTES {
            let klen = write_key(sets, &key_size, &mut key);
            let vlen = values.sample(&mut rng);
            batch.extend_from_slice(b"set ");
            batch.extend_from_slice(&key[..klen]);
            batch.extend_from_slice(b" 0 0 ");
            batch.extend_from_slice(itoa::Buffer::new().format(vlen).as_bytes());
            batch.extend_from_slice(b" noreply\r\n");
            batch.extend_from_slice(&filler[..vlen]);
            batch.extend_from_slice(b"\r\n");
            sets += 1;
            payload += (klen + vlen) as u64;
        }
        conn.write_all(&batch)
            .with_context(|| format!("filling {}", server.kind.name()))?;
        let stats = stats_on(&mut conn)?;
        let evicted = stat_u64(&stats, "evictions") > 0;
        if evicted || start.elapsed() > time_limit {
            server.check_running()?;
            return Ok(Fill {
                items: stat_u64(&stats, "curr_items"),
                sets,
                evicted,
                rss_bytes: server.rss_bytes()?,
                empty_rss_bytes,
                payload_bytes_per_item: payload as f64 / sets as f64,
                secs: start.elapsed().as_secs_f64(),
            });
        }
    }
}

/// The Zipf hit-ratio run against one server.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ZipfFigures {
    pub keyspace: u64,
    pub warm_sets: u64,
    pub measured_ops: u64,
    pub hit_ratio: f64,
    pub ops_per_sec: f64,
}

/// Warms `server` with `2 × keyspace` Zipf(0.99) sets, then measures the
/// hit ratio of `keyspace` requests at 1:1 get:set. 20 B keys and values;
/// 16 connections with 16 requests in flight each.
pub fn zipf_hit_ratio(server: &mut Server, keyspace: u64) -> anyhow::Result<ZipfFigures> {
    let addr = server.addr_string();
    let common = |ratio: &str, requests: u64, seed: &str| -> Vec<String> {
        [
            "--server",
            &addr,
            "--key-size",
            "20",
            "--value-size",
            "20",
            "--keyspace",
            &keyspace.to_string(),
            "--key-dist",
            "zipf:0.99",
            "--ratio",
            ratio,
            "--requests",
            &requests.to_string(),
            "--duration",
            "300",
            "-c",
            "16",
            "--pipeline",
            "16",
            "--seed",
            seed,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let warm_sets = 2 * keyspace;
    let (warm, _) = load::config(&common("0:1", warm_sets, "7"))?;
    engine::run(&warm).with_context(|| format!("warming {}", server.kind.name()))?;
    server.check_running()?;
    let (cfg, _) = load::config(&common("1:1", keyspace, "8"))?;
    let r = engine::run(&cfg).with_context(|| format!("zipf run on {}", server.kind.name()))?;
    server.check_running()?;
    Ok(ZipfFigures {
        keyspace,
        warm_sets,
        measured_ops: r.stats.total.counters.ops,
        hit_ratio: r.stats.total.counters.hit_ratio(),
        ops_per_sec: r.ops_per_sec(),
    })
}
