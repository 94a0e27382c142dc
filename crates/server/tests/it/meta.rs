//! Meta protocol (`mg ms md ma me mn`) against memcached 1.6.18, byte for byte.
//!
//! - `random_meta_streams`: random streams mixing meta and text commands on one
//!   connection go to memcached and ferrocache (both `-t 1 -m 64 -U 0`); every reply must
//!   be identical once CAS values are renamed by order of first appearance, and at the end
//!   of each stream the command counters of `stats` must agree.
//! - Targeted tests for what random streams cannot compare exactly: the time-dependent
//!   `t`, `l` and `me exp=/la=` values, and `get_flushed` counting.
//!
//! After each step the runner sends `mn\r\n` and reads until the reply ends with `MN\r\n`.
//! Values, keys and opaques are lower case and digits, so no reply ends in `MN\r\n` early.
//!
//! Environment: `FERRO_META_SEED=N|random` (base seed), `FERRO_META_STREAMS=N`,
//! `FERRO_META_STEPS=N`, `FERRO_META_VERBOSE=1` (print every step).

use crate::common;

use std::collections::HashMap;

use common::{escape, Client, Rng, ServerKind, ServerProcess};

const SERVER_ARGS: &[&str] = &["-t", "1", "-m", "64", "-U", "0"];
/// See `differential.rs`: without these threads memcached's in-place incr is deterministic.
const MEMCACHED_DETERMINISM_ARGS: &[&str] = &["-o", "no_lru_crawler,no_lru_maintainer"];
const DEFAULT_SEED: u64 = 0x6d65_7461;
const STREAMS_PER_SERVER: u64 = 50;

/// Counters compared at the end of each stream. `get_expired`/`get_flushed` are left out:
/// memcached also counts them when a store, delete or incr meets a dead item (see
/// docs/protocol.md); `curr_items` is left out because ferrocache's sweeper reclaims
/// expired items in the background.
const COMPARED_STATS: &[&str] = &[
    "cmd_get",
    "cmd_set",
    "cmd_touch",
    "cmd_meta",
    "get_hits",
    "get_misses",
    "delete_misses",
    "delete_hits",
    "incr_misses",
    "incr_hits",
    "decr_misses",
    "decr_hits",
    "cas_misses",
    "cas_hits",
    "cas_badval",
    "touch_hits",
    "touch_misses",
    "store_too_large",
    "total_items",
];

// ---------------------------------------------------------------------------
// Steps

#[derive(Clone, Debug)]
enum Part {
    Bytes(Vec<u8>),
    /// ` C<cas>` (or ` <cas>` when not `flag`): the last CAS this server returned for
    /// the key, plus `delta`.
    Cas {
        key: Vec<u8>,
        delta: i64,
        flag: bool,
    },
}

#[derive(Clone, Debug, Default)]
struct Step {
    parts: Vec<Part>,
    /// The key whose CAS a reply reveals (for later `C` flags).
    key: Vec<u8>,
}

impl Step {
    fn text(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }

    fn bytes(&mut self, b: &[u8]) {
        match self.parts.last_mut() {
            Some(Part::Bytes(v)) => v.extend_from_slice(b),
            _ => self.parts.push(Part::Bytes(b.to_vec())),
        }
    }

    fn render(&self, last_cas: &HashMap<Vec<u8>, u64>) -> Vec<u8> {
        let mut out = Vec::new();
        for p in &self.parts {
            match p {
                Part::Bytes(b) => out.extend_from_slice(b),
                Part::Cas { key, delta, flag } => {
                    let cas = last_cas.get(key).copied().unwrap_or(987_654_321);
                    let cas = (cas as i64 + delta).max(1);
                    let c = if *flag { "C" } else { "" };
                    out.extend_from_slice(format!(" {c}{cas}").as_bytes());
                }
            }
        }
        out
    }
}

fn base64(src: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in src.chunks(3) {
        let b = [c[0], *c.get(1).unwrap_or(&0), *c.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= c.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Random streams over a few keys per stream.
struct Gen {
    rng: Rng,
    keys: Vec<Vec<u8>>,
    /// No `flush_all`: each is replaced by a `delete` of every key of the stream (the
    /// streams of `-C` servers).
    ///
    /// Under `-C` memcached cannot tell the items stored before a `flush_all` from those
    /// stored after it in the same second (it has no cas to tell them apart by), so it
    /// flushes both: an item stored after a `flush_all` is gone until the server's clock
    /// has ticked once, and readable after that (ferrocache does the same; see
    /// docs/protocol.md). That holds for the next stream too, which runs on the same
    /// servers. The clock ticks once a second, in each server at its own moment, and on a
    /// busy machine a store after a `flush_all` lands after a tick in one server and before
    /// it in the other; a later `touch`, `mg` or `ma` then differs (`TOUCHED` against
    /// `NOT_FOUND`). That is the clock, not a difference between the servers (with cas,
    /// both servers flush by cas within the flush's second: no clock involved). Deleting
    /// every key draws nothing from `rng`, so the other steps are those of the same seed
    /// with cas, and empties the stream's part of the cache just as well: a stream uses no
    /// other keys. The rule itself is checked with the clocks in view in differential.rs
    /// (`flush_all_without_cas_by_the_clock`).
    clock_free: bool,
}

impl Gen {
    fn new(seed: u64) -> Gen {
        let mut rng = Rng::new(seed);
        let prefix = format!("s{}", seed % 100_000);
        let n = rng.range_usize(1, 3);
        let keys = (0..n)
            .map(|i| format!("{prefix}k{i}").into_bytes())
            .collect();
        Gen {
            rng,
            keys,
            clock_free: false,
        }
    }

    /// `delete` of every key of the stream: the `flush_all` of [`Gen::clock_free`] streams.
    fn delete_every_key(&self, step: &mut Step) {
        for key in &self.keys {
            step.text(&format!("delete {}\r\n", String::from_utf8_lossy(key)));
        }
    }

    fn key(&mut self) -> Vec<u8> {
        self.rng.pick(&self.keys).clone()
    }

    /// The key token: plain, or base64 with a `b` flag to add.
    fn key_token(&mut self, key: &[u8]) -> (String, bool) {
        if self.rng.chance(0.15) {
            (base64(key), true)
        } else {
            (String::from_utf8(key.to_vec()).unwrap(), false)
        }
    }

    fn ttl(&mut self) -> &'static str {
        // Never a TTL that a second boundary could change the outcome of.
        const TTLS: [&str; 6] = ["0", "1000", "-1", "100000", "0", "1000"];
        TTLS[self.rng.below(TTLS.len() as u64) as usize]
    }

    /// An `R` (recache) token: an item wins when its remaining TTL is below it. Never one
    /// of the TTLs of [`Gen::ttl`]: a TTL of 1000 is 1000 left in the second it was set
    /// and 999 after the server's clock ticks, so `R1000` would win or not by where each
    /// server's clock ticks. These are each well above or below a TTL (one draw, as
    /// `ttl` makes, so the rest of a stream is what its seed gave before).
    fn recache(&mut self) -> &'static str {
        const RECACHE: [&str; 6] = ["0", "500", "-1", "50000", "2000", "200000"];
        RECACHE[self.rng.below(RECACHE.len() as u64) as usize]
    }

    fn value(&mut self) -> Vec<u8> {
        if self.rng.chance(0.4) {
            self.rng.range(0, 30000).to_string().into_bytes()
        } else {
            let n = self.rng.range_usize(0, 12);
            // No spaces: memcached's incr on an all-blank value reads past the value
            // (C `strtoull` skips the `\r\n` too), so its reply is undefined.
            (0..n)
                .map(|_| b"abcdexyz"[self.rng.below(8) as usize])
                .collect()
        }
    }

    fn opaque(&mut self) -> String {
        if self.rng.chance(0.05) {
            format!("O{}", "9".repeat(32))
        } else {
            format!("O{}", self.rng.below(100_000))
        }
    }

    /// A few distinct flags from `pool`; now and then one from `bad` (flags this command
    /// refuses) or a duplicate.
    fn flags(&mut self, step: &mut Step, key: &[u8], pool: &[&str], bad: &[&str]) {
        let n = self.rng.range_usize(0, 6);
        let mut chosen: Vec<&str> = Vec::new();
        for _ in 0..n {
            let f = *self.rng.pick(pool);
            if !chosen.contains(&f) {
                chosen.push(f);
            }
        }
        if !chosen.is_empty() && self.rng.chance(0.04) {
            let dup = *self.rng.pick(&chosen);
            chosen.push(dup);
        }
        if !bad.is_empty() && self.rng.chance(0.05) {
            let at = self.rng.range_usize(0, chosen.len());
            let b = *self.rng.pick(bad);
            chosen.insert(at, b);
        }
        for f in chosen {
            self.flag(step, key, f);
        }
    }

    fn flag(&mut self, step: &mut Step, key: &[u8], f: &str) {
        match f {
            "O" => {
                let o = self.opaque();
                step.text(" ");
                step.text(&o);
            }
            "T" | "N" | "R" => {
                let t = if self.rng.chance(0.05) {
                    "x"
                } else if f == "R" {
                    self.recache()
                } else {
                    self.ttl()
                };
                step.text(&format!(" {f}{t}"));
            }
            "C" => {
                let delta = *self.rng.pick(&[0i64, 0, 0, -1, 1]);
                if self.rng.chance(0.1) {
                    step.text(" C0");
                } else {
                    step.parts.push(Part::Cas {
                        key: key.to_vec(),
                        delta,
                        flag: true,
                    });
                }
            }
            "F" => {
                let v = *self.rng.pick(&["0", "5", "4294967295", "5", "x"]);
                step.text(&format!(" F{v}"));
            }
            "D" => {
                // No delta takes a value to 2^63 or more: memcached's `ma` then reads
                // memory past the value (see `NUMERIC_VALUES` in the differential
                // generator). The 20-digit deltas and the wrap at 2^64 are in the fixed
                // corpus, where the bytes after the value are known.
                let v = *self.rng.pick(&["1", "7", "1099511627776", "3", "", "-1"]);
                step.text(&format!(" D{v}"));
            }
            "J" => {
                let v = *self.rng.pick(&["0", "13", "99", "7", "a"]);
                step.text(&format!(" J{v}"));
            }
            other => {
                step.text(" ");
                step.text(other);
            }
        }
    }

    fn mg(&mut self, step: &mut Step) {
        let key = self.key();
        let (tok, b) = self.key_token(&key);
        step.text(&format!("mg {tok}"));
        if b {
            step.text(" b");
        }
        self.flags(
            step,
            &key,
            &[
                "v", "v", "v", "c", "f", "s", "k", "h", "q", "u", "O", "t", "T", "N", "N", "R",
                "R", "C", "F", "P", "L", "I", "l",
            ],
            &["a", "E5", "x", "b", "1", "M"],
        );
        step.text("\r\n");
        step.key = key;
    }

    fn ms(&mut self, step: &mut Step) {
        let key = self.key();
        let (tok, b) = self.key_token(&key);
        let value = self.value();
        let bad_chunk = self.rng.chance(0.03);
        let declared = if bad_chunk {
            value.len().saturating_sub(2)
        } else {
            value.len()
        };
        let len_token = if self.rng.chance(0.02) {
            "x".to_string()
        } else {
            declared.to_string()
        };
        step.text(&format!("ms {tok} {len_token}"));
        if b {
            step.text(" b");
        }
        if self.rng.chance(0.4) {
            let m = *self
                .rng
                .pick(&["MS", "ME", "MA", "MP", "MR", "ME", "MA", "MR", "Ms", "M"]);
            step.text(" ");
            step.text(m);
        }
        self.flags(
            step,
            &key,
            &[
                "c", "k", "q", "O", "T", "F", "C", "C", "I", "I", "v", "h", "N5",
            ],
            &["S3", "x", "b", "E1", "MZ"],
        );
        step.text("\r\n");
        step.bytes(&value);
        step.text("\r\n");
        step.key = key;
    }

    fn md(&mut self, step: &mut Step) {
        let key = self.key();
        let (tok, b) = self.key_token(&key);
        step.text(&format!("md {tok}"));
        if b {
            step.text(" b");
        }
        self.flags(
            step,
            &key,
            &["q", "k", "O", "C", "I", "I", "T", "c"],
            &["x", "b", "Tx"],
        );
        step.text("\r\n");
        step.key = key;
    }

    fn ma(&mut self, step: &mut Step) {
        let key = self.key();
        let (tok, b) = self.key_token(&key);
        step.text(&format!("ma {tok}"));
        if b {
            step.text(" b");
        }
        if self.rng.chance(0.4) {
            let m = *self.rng.pick(&["MI", "MD", "M+", "M-", "Mi", "MX"]);
            step.text(" ");
            step.text(m);
        }
        self.flags(
            step,
            &key,
            &[
                "v", "v", "c", "t", "k", "q", "O", "N", "N", "J", "D", "D", "C", "T",
            ],
            &["x", "b", "E"],
        );
        step.text("\r\n");
        step.key = key;
    }

    fn text_command(&mut self, step: &mut Step) {
        let key = String::from_utf8(self.key()).unwrap();
        let value = self.value();
        let store = |step: &mut Step, cmd: &str, flags: u32, value: &[u8]| {
            step.text(&format!("{cmd} {key} {flags} 0 {}\r\n", value.len()));
            step.bytes(value);
            step.text("\r\n");
        };
        match self.rng.below(11) {
            0 | 1 => step.text(&format!("get {key}\r\n")),
            2 => step.text(&format!("gets {key}\r\n")),
            3 => store(step, "set", 0, &value),
            4 => store(step, "append", 0, &value),
            5 => store(step, "add", 3, &value),
            6 => step.text(&format!("incr {key} 3\r\n")),
            7 => step.text(&format!("delete {key}\r\n")),
            8 => step.text(&format!("touch {key} 1000\r\n")),
            9 => step.text(&format!("gat 0 {key}\r\n")),
            _ => {
                step.text(&format!("cas {key} 0 0 {}", value.len()));
                step.parts.push(Part::Cas {
                    key: key.clone().into_bytes(),
                    delta: 0,
                    flag: false,
                });
                step.text("\r\n");
                step.bytes(&value);
                step.text("\r\n");
            }
        }
        step.key = key.into_bytes();
    }

    fn step(&mut self) -> Step {
        let mut step = Step::default();
        match self.rng.weighted(&[25, 25, 8, 12, 3, 12, 1]) {
            0 => self.mg(&mut step),
            1 => self.ms(&mut step),
            2 => self.md(&mut step),
            3 => self.ma(&mut step),
            4 => {
                let key = self.key();
                let (tok, b) = self.key_token(&key);
                step.text(&format!("me {tok}{}\r\n", if b { " b" } else { "" }));
            }
            5 => self.text_command(&mut step),
            _ if self.clock_free => self.delete_every_key(&mut step),
            _ => step.text("flush_all\r\n"),
        }
        step
    }
}

// ---------------------------------------------------------------------------
// Running and comparing

struct Side {
    _server: ServerProcess,
    conn: Client,
    last_cas: HashMap<Vec<u8>, u64>,
    cas_names: HashMap<u64, usize>,
}

impl Side {
    /// `extra` goes to ferrocache, and those of its flags that are memcached's
    /// (`common::FLAGS_FOR_BOTH`) to memcached too.
    fn start(kind: ServerKind, extra: &[&str]) -> Side {
        let mut args = SERVER_ARGS.to_vec();
        if kind == ServerKind::Memcached {
            args.extend_from_slice(MEMCACHED_DETERMINISM_ARGS);
            args.extend(common::flags_for_both(extra));
        } else {
            args.extend_from_slice(extra);
        }
        let server = ServerProcess::start(kind, &args);
        let conn = server.connect();
        Side {
            _server: server,
            conn,
            last_cas: HashMap::new(),
            cas_names: HashMap::new(),
        }
    }

    fn exchange(&mut self, request: &[u8]) -> Vec<u8> {
        self.conn.request(request)
    }

    fn cas_name(&mut self, cas: u64) -> String {
        let next = self.cas_names.len();
        format!("#{}", self.cas_names.entry(cas).or_insert(next))
    }

    /// Renames CAS values and blurs time-dependent numbers; remembers the last CAS seen.
    fn normalize(&mut self, key: &[u8], reply: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut pos = 0;
        while pos < reply.len() {
            let Some(eol) = reply[pos..].windows(2).position(|w| w == b"\r\n") else {
                out.extend_from_slice(&reply[pos..]);
                break;
            };
            let line = &reply[pos..pos + eol];
            pos += eol + 2;
            let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
            let mut data_len = None;
            let mut new_fields: Vec<Vec<u8>> = Vec::new();
            match fields[0] {
                b"VALUE" if fields.len() >= 4 => {
                    data_len = parse(fields[3]);
                    for (i, f) in fields.iter().enumerate() {
                        if i == 4 {
                            let cas = parse(f).unwrap_or(0);
                            self.last_cas.insert(fields[1].to_vec(), cas);
                            new_fields.push(self.cas_name(cas).into_bytes());
                        } else {
                            new_fields.push(f.to_vec());
                        }
                    }
                }
                b"VA" | b"HD" | b"EN" | b"NS" | b"EX" | b"NF" => {
                    if fields[0] == b"VA" {
                        data_len = fields.get(1).and_then(|f| parse(f));
                    }
                    for (i, f) in fields.iter().enumerate() {
                        let rest = &f[1.min(f.len())..];
                        if i > 0 && f.first() == Some(&b'c') && parse(rest).is_some() {
                            let cas = parse(rest).unwrap();
                            if cas != 0 {
                                self.last_cas.insert(key.to_vec(), cas);
                            }
                            let mut v = b"c".to_vec();
                            v.extend_from_slice(self.cas_name(cas).as_bytes());
                            new_fields.push(v);
                        } else if i > 0
                            && matches!(f.first(), Some(b't' | b'l'))
                            && f != b"t-1"
                            && parse(rest).is_some()
                        {
                            new_fields.push(vec![f[0], b'~']);
                        } else {
                            new_fields.push(f.to_vec());
                        }
                    }
                }
                b"ME" => {
                    for f in &fields {
                        if let Some(v) = f.strip_prefix(b"cas=") {
                            let name = self.cas_name(parse(v).unwrap_or(0));
                            new_fields.push(format!("cas={name}").into_bytes());
                        } else if f.starts_with(b"la=")
                            || (f.starts_with(b"exp=") && *f != b"exp=-1")
                        {
                            let name = f.split(|&b| b == b'=').next().unwrap();
                            new_fields.push([name, b"=~"].concat());
                        } else {
                            new_fields.push(f.to_vec());
                        }
                    }
                }
                _ => new_fields = fields.iter().map(|f| f.to_vec()).collect(),
            }
            out.extend_from_slice(&new_fields.join(&b' '));
            out.extend_from_slice(b"\r\n");
            if let Some(len) = data_len {
                let end = (pos + len as usize + 2).min(reply.len());
                out.extend_from_slice(&reply[pos..end]);
                pos = end;
            }
        }
        out
    }

    fn counters(&mut self) -> Vec<(String, String)> {
        let stats = self.conn.stats("");
        COMPARED_STATS
            .iter()
            .map(|name| {
                (
                    name.to_string(),
                    stats.get(*name).cloned().unwrap_or_default(),
                )
            })
            .collect()
    }
}

fn parse(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

struct Pair {
    reference: Side,
    candidate: Side,
}

impl Pair {
    fn start() -> Pair {
        Pair::start_with(&[])
    }

    /// With `extra` arguments for ferrocache (see [`Side::start`]).
    fn start_with(extra: &[&str]) -> Pair {
        Pair {
            reference: Side::start(ServerKind::Memcached, extra),
            candidate: Side::start(ServerKind::under_test(), extra),
        }
    }
}

fn run_stream(pair: &mut Pair, seed: u64, steps: &[Step]) -> Result<(), String> {
    let verbose = std::env::var_os("FERRO_META_VERBOSE").is_some();
    for side in [&mut pair.reference, &mut pair.candidate] {
        side.last_cas.clear();
        side.cas_names.clear();
        assert_eq!(side.exchange(b"stats reset\r\n"), b"RESET\r\n");
    }
    let mut history = String::new();
    for (i, step) in steps.iter().enumerate() {
        let req_ref = step.render(&pair.reference.last_cas);
        let req_cand = step.render(&pair.candidate.last_cas);
        let raw_ref = pair.reference.exchange(&req_ref);
        let raw_cand = pair.candidate.exchange(&req_cand);
        let norm_ref = pair.reference.normalize(&step.key, &raw_ref);
        let norm_cand = pair.candidate.normalize(&step.key, &raw_cand);
        if verbose {
            eprintln!("[{i}] {} -> {}", escape(&req_ref), escape(&norm_ref));
        }
        if norm_ref != norm_cand {
            return Err(format!(
                "seed {seed}, step {i}\n  earlier steps:\n{history}  command:   {}\n  \
                 memcached:  {}\n  ferrocache: {}\n  (raw: {} / {})\n",
                escape(&req_ref),
                escape(&norm_ref),
                escape(&norm_cand),
                escape(&raw_ref),
                escape(&raw_cand),
            ));
        }
        history += &format!("    {}\n", escape(&req_ref));
    }
    let stats_ref = pair.reference.counters();
    let stats_cand = pair.candidate.counters();
    if stats_ref != stats_cand {
        let diff: Vec<String> = stats_ref
            .iter()
            .zip(&stats_cand)
            .filter(|(a, b)| a != b)
            .map(|(a, b)| format!("{}: memcached {} ferrocache {}", a.0, a.1, b.1))
            .collect();
        return Err(format!(
            "seed {seed}: counters differ after the stream: {}\n  steps:\n{history}",
            diff.join(", ")
        ));
    }
    Ok(())
}

fn base_seed() -> u64 {
    match std::env::var("FERRO_META_SEED").as_deref() {
        Err(_) => DEFAULT_SEED,
        Ok("random") => Rng::seed_from_time(),
        Ok(s) => s.parse().expect("FERRO_META_SEED: a number or `random`"),
    }
}

#[test]
fn random_meta_streams() {
    let count = common::env_u64("FERRO_META_STREAMS", 400);
    random_meta_streams_with(base_seed(), count, &[], "random_meta_streams");
}

/// The random streams with every `mg ... v` value of at least one byte sent in place
/// from the store (pinned, with a vectored send; see `src/splice.rs`), so that pins meet
/// `ma` (rewritten in place), `ms` overwrites, `md` and invalidation in the same stream.
#[test]
fn random_meta_streams_every_value_in_place() {
    let count = common::env_u64("FERRO_META_STREAMS", 150);
    random_meta_streams_with(
        base_seed(),
        count,
        &["--zero-copy-min", "1"],
        "random_meta_streams_every_value_in_place",
    );
}

/// The random streams with `-C` on both servers: every `c` shows 0, `ms C` answers
/// `EX` for any item there is, and `md C` and `ma C` compare with 0.
///
/// These streams never `flush_all` (they delete every key instead): under `-C` what a
/// stream reads back after a `flush_all` depends on where each server's clock ticks,
/// which on a busy machine differs between the servers (see `Gen::clock_free`).
#[test]
fn random_meta_streams_without_cas() {
    let count = common::env_u64("FERRO_META_STREAMS", 150);
    random_meta_streams_with(
        base_seed() ^ 0xc0c0,
        count,
        &["-C"],
        "random_meta_streams_without_cas",
    );
}

fn random_meta_streams_with(base: u64, count: u64, extra: &[&str], test: &str) {
    let steps_per_stream = common::env_u64("FERRO_META_STEPS", 30) as usize;
    eprintln!(
        "meta differential: {count} streams x {steps_per_stream} steps, FERRO_META_SEED={base}"
    );
    // Under -C a `flush_all` goes by each server's own clock (see `Gen::clock_free`).
    let clock_free = extra.contains(&"-C");
    let mut pair = Pair::start_with(extra);
    let mut failures = Vec::new();
    for i in 0..count {
        if i > 0 && i % STREAMS_PER_SERVER == 0 {
            pair = Pair::start_with(extra);
        }
        let seed = base.wrapping_add(i);
        let mut gen = Gen::new(seed);
        gen.clock_free = clock_free;
        let steps: Vec<Step> = (0..steps_per_stream).map(|_| gen.step()).collect();
        if let Err(text) = run_stream(&mut pair, seed, &steps) {
            eprintln!("MISMATCH {text}");
            failures.push(format!(
                "{text}  replay: FERRO_META_SEED={seed} FERRO_META_STREAMS=1 \
                 scripts/test-one meta::{test}\n"
            ));
            if failures.len() >= 3 {
                break;
            }
            pair = Pair::start_with(extra);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------
// Targeted tests

/// Sends `lines` one at a time to both servers and asserts identical replies, then
/// identical counters.
fn same_replies(lines: &[&[u8]]) {
    let mut pair = Pair::start();
    for line in lines {
        let a = pair.reference.exchange(line);
        let b = pair.candidate.exchange(line);
        assert_eq!(escape(&a), escape(&b), "command {}", escape(line));
    }
    assert_eq!(pair.reference.counters(), pair.candidate.counters());
}

#[test]
fn time_flags_report_remaining_ttl_and_last_access() {
    let server = ServerProcess::start(ServerKind::under_test(), SERVER_ARGS);
    let mut c = server.connect();
    assert_eq!(c.request_str("ms k 1 T1000\r\nx\r\n"), "HD\r\n");
    let reply = c.request_str("mg k t l h\r\n");
    let fields: Vec<&str> = reply.trim_end().split(' ').collect();
    assert_eq!(fields[0], "HD");
    let ttl: i64 = fields[1][1..].parse().unwrap();
    assert!((998..=1000).contains(&ttl), "{reply}");
    let la: i64 = fields[2][1..].parse().unwrap();
    assert!((0..=2).contains(&la), "{reply}");
    assert_eq!(fields[3], "h0");
    assert!(c.request_str("mg k h\r\n").starts_with("HD h1"));
    assert_eq!(c.request_str("mg k T0\r\n"), "HD\r\n");
    assert!(c.request_str("mg k t\r\n").starts_with("HD t-1"));
    let me = c.request_str("me k\r\n");
    assert!(me.starts_with("ME k exp=-1 la="), "{me}");
    assert!(me.ends_with(" fetch=yes cls=1 size=61\r\n"), "{me}");
    // `me` shows a TTL as a negative age.
    c.request_str("mg k T100\r\n");
    let me = c.request_str("me k\r\n");
    let exp: i64 = me["ME k exp=".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!((-100..=-98).contains(&exp), "{me}");
}

#[test]
fn mg_counts_flushed_and_touch() {
    let mut pair = Pair::start();
    for side in [&mut pair.reference, &mut pair.candidate] {
        side.exchange(b"ms a 1\r\nx\r\nms b 1\r\ny\r\n");
        side.exchange(b"flush_all\r\n");
        side.exchange(b"mg a v\r\nmg b T10\r\nms c 1\r\nz\r\nmg c T10 v\r\nmg c\r\n");
    }
    let names = [
        "get_flushed",
        "get_hits",
        "get_misses",
        "cmd_get",
        "cmd_touch",
        "touch_hits",
    ];
    let a = pair.reference.conn.stats("");
    let b = pair.candidate.conn.stats("");
    for n in names {
        assert_eq!(a.get(n), b.get(n), "{n}");
    }
}

#[test]
fn edge_cases_match_memcached() {
    let long_key = format!("mg {} v\r\n", "a".repeat(251));
    let long_set = format!("ms {} 1\r\nz\r\n", "a".repeat(251));
    let many_flags = format!("mg k {}\r\n", "v ".repeat(19));
    let big = format!("ms big 1048577 T0\r\n{}\r\n", "x".repeat(1_048_577));
    same_replies(&[
        b"ms k 1 c\r\na\r\n",
        b"mg k c v O123 k q\r\n",
        long_key.as_bytes(),
        long_set.as_bytes(),
        many_flags.as_bytes(),
        b"ms big 1\r\nx\r\n",
        big.as_bytes(),
        b"mg big v\r\n",
        b"ms k 2 MA\r\nbc\r\n",
        b"ms k 1 C1 I\r\nz\r\n",
        b"mg k c v s\r\n",
        b"mg k c v s\r\n",
        b"md k I T30 q\r\n",
        b"mg k v c\r\n",
        b"mg viv N30 s v c f\r\n",
        b"mg viv N30 s v c f\r\n",
        b"ms n 2\r\n99\r\n",
        b"ma n T100 t v c\r\n",
        b"mg n v t\r\n",
        b"ma n O123456789012345678901234567890123 v\r\n",
        b"mg n v\r\n",
        b"ma nv N0 J41 q v\r\n",
        b"ma nv q\r\n",
        b"mg nv v\r\n",
        b"ms azI= 2 b k c\r\nhi\r\n",
        b"mg k2 k v\r\n",
        b"me azI= b\r\n",
        b"me missing\r\n",
        b"me\r\n",
        b"ms k 1 Ms\r\nz\r\n",
        b"ms k 3 S3\r\nabc\r\n",
        b"ms k x\r\nzz\r\n",
        // (`mn` itself is the barrier after every line.)
        b"mz\r\n",
        b"ms k 1 T0 F5 I\r\na\r\n",
        b"ms k 2 C999 I\r\nzz\r\n",
        b"ma k N0 J10 v\r\n",
        b"ma k v MD D3 t c\r\n",
        b"ms k 1 c ME\r\nb\r\n",
        b"ms k 1 c MR C1\r\nb\r\n",
        b"ms nk 1 c MA\r\nb\r\n",
        b"ms nk 1 c MA N0\r\nb\r\n",
        b"ms k 1 MA c\r\nq\r\n",
        b"mg k v c h\r\n",
        b"ms d 1 T100\r\na\r\n",
        b"md d I T30 q\r\n",
        b"mg d t c v\r\n",
        b"md d C1 q\r\n",
        b"md d q k O9\r\n",
        b"md d q k O9\r\n",
        b"md ZA== k O9 b\r\n",
        b"mg r1 N0 v\r\n",
        b"mg r1 R30 v t\r\n",
        b"ms r2 1 T1000\r\nx\r\n",
        b"mg r2 R2000 v\r\n",
        b"mg r2 R2000 v\r\n",
        b"ma n v M+ D18446744073709551615\r\n",
        b"ma n v C1 q\r\n",
        b"ma newkey q N0\r\n",
        b"ma newkey q\r\n",
        b"ma eno= b v N0 k\r\n",
        b"ms big2 2 F5\r\n10\r\n",
        b"me big2\r\n",
    ]);
}

/// Debugging aid: `FERRO_META_BATCH=file scripts/test-one meta:: -- --ignored`
/// sends the file (lines ending in `\n` become `\r\n`) to both servers at once and compares
/// the replies and the counters.
#[test]
#[ignore]
fn batch_from_file() {
    let path = std::env::var("FERRO_META_BATCH").expect("FERRO_META_BATCH=<file>");
    let text = std::fs::read(path).expect("read batch file");
    let mut bytes = Vec::new();
    for &b in &text {
        if b == b'\n' {
            bytes.extend_from_slice(b"\r\n");
        } else {
            bytes.push(b);
        }
    }
    same_replies(&[&bytes]);
}
