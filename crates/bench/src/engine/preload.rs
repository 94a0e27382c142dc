//! `--preload`: set every key of the run once before measuring, so gets hit.
//!
//! Plain blocking sockets, one per server per thread, and batches of
//! pipelined sets (write a batch, then read its replies). Replies to sets are
//! a few bytes, so a batch can never fill both directions and deadlock.
//! Preloading always uses TCP, also for a `--udp` run; with `--tls`, TLS.

use std::io::{Read, Write};
use std::time::Duration;

use anyhow::{bail, Context};
use protocol::client::ReplyBuffer;

use super::{filler, wire, CONNECT_TIMEOUT};
use crate::config::Config;
use crate::placement::Placement;
use crate::rng::Rng;
use crate::tls::Blocking;
use crate::verify;
use crate::workload::{write_key, OpKind, MAX_KEY_BYTES};

/// Sets per batch per server.
const BATCH: usize = 64;
/// How long a preload batch may wait for its replies: generous, because
/// preloading is not measured and a loaded machine can be slow.
const PRELOAD_REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// Sets keys `0..cfg.total_keys()` over `cfg.threads` threads.
pub fn run(cfg: &Config, ketama: Option<&Placement>) -> anyhow::Result<()> {
    let total = cfg.total_keys();
    let threads = (cfg.threads as u64).clamp(1, total.max(1));
    let filler = filler(cfg.workload.value_size.max());
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let range = total * t / threads..total * (t + 1) / threads;
                let filler = &filler[..];
                scope.spawn(move || preload_range(cfg, ketama, filler, range, t))
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().expect("preload thread panicked"))
    })
}

struct ServerConn {
    stream: Blocking,
    out: Vec<u8>,
    queued: usize,
    rx: ReplyBuffer,
}

fn preload_range(
    cfg: &Config,
    ketama: Option<&Placement>,
    filler: &[u8],
    keys: std::ops::Range<u64>,
    thread: u64,
) -> anyhow::Result<()> {
    let mut conns = cfg
        .servers
        .iter()
        .map(|s| {
            let stream = Blocking::connect(cfg.tls.as_ref(), &s.host, &s.addr, CONNECT_TIMEOUT)
                .with_context(|| {
                    format!("preload: cannot connect to server {} ({})", s.name, s.addr)
                })?;
            stream.set_read_timeout(Some(cfg.timeout.max(PRELOAD_REPLY_TIMEOUT)))?;
            Ok(ServerConn {
                stream,
                out: Vec::new(),
                queued: 0,
                rx: ReplyBuffer::with_capacity(4096),
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut rng = Rng::new(cfg.seed ^ 0x5EED ^ thread);
    let mut keybuf = [0; MAX_KEY_BYTES];
    let mut value = Vec::new();
    for key in keys {
        let len = write_key(key, &cfg.workload.key_size, &mut keybuf);
        let server = ketama.map_or(0, |k| k.server_of(&keybuf[..len]));
        let size = cfg.workload.value_size.sample(&mut rng);
        let v = if cfg.verify {
            verify::compose_value(&keybuf[..len], size, rng.next_u64(), &mut value);
            &value[..]
        } else {
            &filler[..size]
        };
        let c = &mut conns[server];
        wire::set(cfg.protocol, &mut c.out, &keybuf[..len], v);
        c.queued += 1;
        if c.queued == BATCH {
            flush(cfg, c, server)?;
        }
    }
    for (server, c) in conns.iter_mut().enumerate() {
        flush(cfg, c, server)?;
    }
    Ok(())
}

/// Writes the queued sets and checks that each was stored.
fn flush(cfg: &Config, c: &mut ServerConn, server: usize) -> anyhow::Result<()> {
    let name = &cfg.servers[server].name;
    c.stream
        .write_all(&c.out)
        .with_context(|| format!("preload: writing to server {name}"))?;
    c.out.clear();
    while c.queued > 0 {
        while let Some(outcome) = wire::next_outcome(cfg.protocol, &mut c.rx, OpKind::Set)? {
            if outcome != (wire::Outcome::Done { ok: true }) {
                bail!("preload: server {name} did not store a value (out of memory? try a smaller keyspace)");
            }
            c.queued -= 1;
        }
        if c.queued == 0 {
            break;
        }
        let n = c
            .stream
            .read(c.rx.spare(4096))
            .with_context(|| format!("preload: reading from server {name}"))?;
        if n == 0 {
            bail!("preload: server {name} closed the connection");
        }
        c.rx.commit(n);
    }
    Ok(())
}
