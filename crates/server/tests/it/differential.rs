//! The differential test: the main correctness oracle.
//!
//! The same command streams go to Debian's memcached (the reference) and to the server
//! under test, both started with `-t 1 -m 64 -U 0`, and every reply must be byte-identical.
//! CAS uniques differ between servers, so each server's CAS numbers are renamed `#0`, `#1`,
//! ... in order of first appearance within a stream before comparing.
//!
//! After each step the runner sends `mn\r\n` and reads until the reply ends with `MN\r\n`,
//! which splits the reply stream exactly at the step boundary.
//!
//! Environment:
//! - `FERRO_DIFF_SEED=N` sets the base seed (default fixed, so CI is reproducible);
//!   `FERRO_DIFF_SEED=random` picks one from the clock. Stream `i` uses seed `base + i`.
//! - `FERRO_DIFF_STREAMS=N` sets the stream count; `FERRO_DIFF_STEPS=N` the steps per stream;
//!   `FERRO_DIFF_MAX_REPORTS=N` how many failing streams to collect before stopping.
//! - `FERRO_TEST_SERVER=memcached` compares memcached with itself (checks the harness).
//!
//! A failure prints the seed and the command that replays just that stream.

use crate::common;
mod gen;
use crate::common::tls as tls_client;

use std::collections::HashMap;

use common::{escape, Client, Ending, Reply, Rng, ServerKind, ServerProcess};
use gen::Step;

/// Both servers get these flags: one worker, 64 MB, no UDP.
const SERVER_ARGS: &[&str] = &["-t", "1", "-m", "64", "-U", "0"];

/// memcached also gets these: its LRU maintainer and crawler threads take references to
/// items now and then, and `incr`/`decr` rewrite a number in place (space-padded) only
/// when no one else holds the item, so with those threads running memcached itself
/// answers `get` after `incr` with `6 ` or `6` at random. Without them it always pads.
/// They only change which items are evicted, and these streams never evict.
const MEMCACHED_DETERMINISM_ARGS: &[&str] = &["-o", "no_lru_crawler,no_lru_maintainer"];

/// Fresh servers every so many streams, so memory use from earlier streams never matters.
const STREAMS_PER_SERVER: usize = 40;

/// The default base seed; CI runs exactly these streams.
const DEFAULT_SEED: u64 = 0x00c0_ffee_5eed;

/// How many failing streams to report before stopping (`FERRO_DIFF_MAX_REPORTS`).
const MAX_REPORTS: u64 = 5;

/// One server and what the runner knows about its replies in the current stream.
struct Side {
    server: ServerProcess,
    conn: Client,
    /// The last CAS unique this server returned for each key (renders `Part::LastCas`).
    last_cas: HashMap<Vec<u8>, u64>,
    /// CAS unique -> order of first appearance in this stream.
    cas_names: HashMap<u64, usize>,
}

impl Side {
    fn start(kind: ServerKind, ferrocache_args: &[&'static str]) -> Side {
        let mut args = SERVER_ARGS.to_vec();
        if kind == ServerKind::Memcached {
            args.extend_from_slice(MEMCACHED_DETERMINISM_ARGS);
            args.extend(common::flags_for_both(ferrocache_args));
        } else {
            args.extend_from_slice(ferrocache_args);
        }
        let server = ServerProcess::start(kind, &args);
        let conn = open(&server);
        Side {
            server,
            conn,
            last_cas: HashMap::new(),
            cas_names: HashMap::new(),
        }
    }

    fn new_stream(&mut self) {
        self.last_cas.clear();
        self.cas_names.clear();
    }

    /// Sends one step (whole, or in random pieces) plus the barrier; returns the reply.
    fn exchange(&mut self, request: &[u8], pieces: Option<&mut Rng>) -> Reply {
        let mut bytes = request.to_vec();
        bytes.extend_from_slice(b"mn\r\n");
        // A failed write means the server closed the connection; the read reports that.
        let _ = match pieces {
            None => self.conn.try_send(&bytes),
            Some(rng) => self.conn.try_send_in_pieces(&bytes, rng, 12, true),
        };
        self.conn.read_reply()
    }

    /// For reports: whether the server process is still running.
    fn liveness(&mut self) -> String {
        match self.server.try_wait() {
            None => format!("{} is still running", self.server.describe()),
            Some(status) => format!("{} EXITED with {status}", self.server.describe()),
        }
    }

    /// The reply with CAS uniques renamed by order of first appearance, updating `last_cas`.
    fn normalize(&mut self, reply: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(reply.len());
        let mut pos = 0;
        while pos < reply.len() {
            let Some(eol) = find(&reply[pos..], b"\r\n").map(|i| pos + i) else {
                out.extend_from_slice(&reply[pos..]);
                break;
            };
            let line = &reply[pos..eol];
            pos = eol + 2;
            let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
            let data_len = (fields.len() == 4 || fields.len() == 5)
                .then(|| parse_u64(fields[3]))
                .flatten();
            match (fields[0] == b"VALUE", data_len) {
                (true, Some(len)) if pos + len as usize + 2 <= reply.len() => {
                    if fields.len() == 5 {
                        let Some(cas) = parse_u64(fields[4]) else {
                            out.extend_from_slice(line);
                            out.extend_from_slice(b"\r\n");
                            continue;
                        };
                        self.last_cas.insert(fields[1].to_vec(), cas);
                        let next = self.cas_names.len();
                        let name = *self.cas_names.entry(cas).or_insert(next);
                        out.extend_from_slice(&line[..line.len() - fields[4].len()]);
                        out.extend_from_slice(format!("#{name}").as_bytes());
                    } else {
                        out.extend_from_slice(line);
                    }
                    out.extend_from_slice(b"\r\n");
                    // Copy the data block verbatim; its content is never parsed as lines.
                    let end = pos + len as usize + 2;
                    out.extend_from_slice(&reply[pos..end]);
                    pos = end;
                }
                _ => {
                    out.extend_from_slice(line);
                    out.extend_from_slice(b"\r\n");
                }
            }
        }
        out
    }

    fn reconnect(&mut self) {
        self.conn = open(&self.server);
    }
}

/// A connection to `server`: over TLS, trusting the test CA, when it runs `-Z`.
fn open(server: &ServerProcess) -> Client {
    if server.args.iter().any(|a| a == "-Z") {
        tls_client::connect_to(server)
    } else {
        server.connect()
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn parse_u64(digits: &[u8]) -> Option<u64> {
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// The reference and the server under test.
struct Pair {
    reference: Side,
    candidate: Side,
}

impl Pair {
    fn start() -> Pair {
        Pair::start_with(&[])
    }

    /// Servers whose candidate, if it is ferrocache, also gets `ferrocache_args`; those
    /// of them that are memcached flags (`common::FLAGS_FOR_BOTH`) go to memcached too.
    fn start_with(ferrocache_args: &[&'static str]) -> Pair {
        Pair {
            reference: Side::start(ServerKind::Memcached, ferrocache_args),
            candidate: Side::start(ServerKind::under_test(), ferrocache_args),
        }
    }
}

/// `-C`: no CAS uniques. memcached shows 0 for every item's cas, and its compare-and-swaps
/// answer in ways of their own (docs/protocol.md, "Differences").
const WITHOUT_CAS: &[&str] = &["-C"];

/// Every get value of at least one byte sent in place from the store (pinned, with a
/// vectored send; see `splice.rs`) instead of the default's large values only.
const EVERY_VALUE_IN_PLACE: &[&str] = &["--zero-copy-min", "1"];

/// How to write each step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Writes {
    /// One write per step.
    Whole,
    /// Random pieces of 1 to 12 bytes (larger for big values), with short pauses.
    Fragmented,
}

/// Runs `steps` on both servers; `Err` carries a report of the first mismatch.
fn run_stream(pair: &mut Pair, seed: u64, steps: &[Step], writes: Writes) -> Result<(), String> {
    pair.reference.new_stream();
    pair.candidate.new_stream();
    let mut pieces = Rng::new(seed ^ 0x0f0f_0f0f_0f0f_0f0f);
    let verbose = std::env::var_os("FERRO_DIFF_VERBOSE").is_some();
    for (index, step) in steps.iter().enumerate() {
        let request_ref = step.render(&pair.reference.last_cas);
        let request_cand = step.render(&pair.candidate.last_cas);
        let (reply_ref, reply_cand) = match writes {
            Writes::Whole => (
                pair.reference.exchange(&request_ref, None),
                pair.candidate.exchange(&request_cand, None),
            ),
            Writes::Fragmented if step.whole => (
                pair.reference.exchange(&request_ref, None),
                pair.candidate.exchange(&request_cand, None),
            ),
            Writes::Fragmented => (
                pair.reference.exchange(&request_ref, Some(&mut pieces)),
                pair.candidate.exchange(&request_cand, Some(&mut pieces)),
            ),
        };
        let norm_ref = pair.reference.normalize(&reply_ref.bytes);
        let norm_cand = pair.candidate.normalize(&reply_cand.bytes);
        if verbose {
            eprintln!(
                "[{index}] {} -> {}",
                escape(&request_ref),
                escape(&norm_ref)
            );
        }
        let same = norm_ref == norm_cand && reply_ref.ending == reply_cand.ending;
        if !same || reply_ref.ending == Ending::TimedOut {
            let mut liveness = String::new();
            for (side, reply) in [
                (&mut pair.reference, &reply_ref),
                (&mut pair.candidate, &reply_cand),
            ] {
                if reply.ending != Ending::Done {
                    liveness += &format!("  {}\n", side.liveness());
                }
            }
            return Err(report(
                seed,
                writes,
                steps,
                index,
                &request_ref,
                &request_cand,
                &reply_ref,
                &reply_cand,
                &norm_ref,
                &norm_cand,
            ) + &liveness);
        }
        if reply_ref.ending == Ending::Closed {
            // Both closed at the same point: carry on with new connections.
            pair.reference.reconnect();
            pair.candidate.reconnect();
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn report(
    seed: u64,
    writes: Writes,
    steps: &[Step],
    index: usize,
    request_ref: &[u8],
    request_cand: &[u8],
    reply_ref: &Reply,
    reply_cand: &Reply,
    norm_ref: &[u8],
    norm_cand: &[u8],
) -> String {
    let candidate = ServerKind::under_test().name();
    let mut text = format!("stream seed {seed} ({writes:?} writes), step {index}:\n");
    text += "  earlier steps:\n";
    for step in &steps[..index] {
        text += &format!("    {}\n", escape(&step.render(&HashMap::new())));
    }
    text += &format!("  command to memcached:  {}\n", escape(request_ref));
    if request_cand != request_ref {
        text += &format!("  command to {candidate}: {}\n", escape(request_cand));
    }
    text += &format!("  memcached replied:  {}\n", reply_ref.describe());
    text += &format!("  {candidate} replied: {}\n", reply_cand.describe());
    if norm_ref != reply_ref.bytes.as_slice() || norm_cand != reply_cand.bytes.as_slice() {
        text += &format!("  memcached (CAS renamed):  {}\n", escape(norm_ref));
        text += &format!("  {candidate} (CAS renamed): {}\n", escape(norm_cand));
    }
    text += &first_difference(norm_ref, norm_cand, candidate);
    if reply_ref.ending == Ending::TimedOut {
        text += "  memcached itself timed out: the generator broke its own sync rules\n";
    }
    text
}

/// Where two replies first differ, with some context (long replies are shortened when
/// printed whole, and the difference may be in the middle).
fn first_difference(reference: &[u8], candidate: &[u8], name: &str) -> String {
    let Some(at) = reference
        .iter()
        .zip(candidate)
        .position(|(a, b)| a != b)
        .or_else(|| {
            (reference.len() != candidate.len()).then(|| reference.len().min(candidate.len()))
        })
    else {
        return String::new();
    };
    let from = at.saturating_sub(80);
    let window = |b: &[u8]| escape(&b[from.min(b.len())..(at + 80).min(b.len())]);
    format!(
        "  first difference at byte {at} (of {} / {}), from byte {from}:\n    memcached:  {}\n    {name}: {}\n",
        reference.len(),
        candidate.len(),
        window(reference),
        window(candidate)
    )
}

fn base_seed() -> u64 {
    match std::env::var("FERRO_DIFF_SEED").as_deref() {
        Err(_) => DEFAULT_SEED,
        Ok("random") => Rng::seed_from_time(),
        Ok(s) => s
            .parse()
            .unwrap_or_else(|_| panic!("FERRO_DIFF_SEED={s}: expected a number or `random`")),
    }
}

/// Runs `count` random streams, seeds `base + offset + i`, and panics with the reports of
/// failing ones.
fn run_random_streams(
    test: &str,
    base: u64,
    offset: u64,
    count: u64,
    writes: Writes,
    ferrocache_args: &[&'static str],
) {
    run_streams(
        gen::stream,
        test,
        base,
        offset,
        count,
        writes,
        ferrocache_args,
    );
}

/// Runs `count` streams from `generate`, seeds `base + offset + i`, and panics with the
/// reports of failing ones; `test` names the test in the replay command.
fn run_streams(
    generate: fn(u64, usize) -> Vec<Step>,
    test: &str,
    base: u64,
    offset: u64,
    count: u64,
    writes: Writes,
    ferrocache_args: &[&'static str],
) {
    let steps_per_stream = common::env_u64("FERRO_DIFF_STEPS", 40) as usize;
    eprintln!(
        "differential ({writes:?} writes): {count} streams x {steps_per_stream} steps, \
         memcached vs {}, FERRO_DIFF_SEED={base}",
        ServerKind::under_test().name()
    );
    let max_reports = common::env_u64("FERRO_DIFF_MAX_REPORTS", MAX_REPORTS) as usize;
    let mut reports = Vec::new();
    let mut pair = Pair::start_with(ferrocache_args);
    // The first stream the current servers saw, for the replay line.
    let mut first_on_server = 0;
    for i in 0..count {
        if i - first_on_server == STREAMS_PER_SERVER as u64 {
            pair = Pair::start_with(ferrocache_args);
            first_on_server = i;
        }
        let seed = base.wrapping_add(offset).wrapping_add(i);
        let steps = generate(seed, steps_per_stream);
        if let Err(text) = run_stream(&mut pair, seed, &steps, writes) {
            let command = format!("scripts/test-one differential::{test} -- --nocapture");
            let text = format!(
                "{text}  replay this stream: FERRO_DIFF_SEED={} FERRO_DIFF_STREAMS=1 {command}\n  \
                 replay with the same servers' history: FERRO_DIFF_SEED={} \
                 FERRO_DIFF_STREAMS={} {command}\n",
                seed.wrapping_sub(offset),
                base.wrapping_add(first_on_server),
                i - first_on_server + 1,
            );
            eprintln!("MISMATCH {text}");
            reports.push(text);
            if reports.len() >= max_reports {
                break;
            }
            // The servers' states have diverged: start over with fresh ones.
            pair = Pair::start_with(ferrocache_args);
            first_on_server = i + 1;
        }
    }
    assert!(
        reports.is_empty(),
        "{} stream(s) differ (stopping at {max_reports}):\n\n{}",
        reports.len(),
        reports.join("\n")
    );
}

#[test]
fn random_streams_whole_writes() {
    let count = common::env_u64("FERRO_DIFF_STREAMS", 300);
    run_random_streams(
        "random_streams_whole_writes",
        base_seed(),
        0,
        count,
        Writes::Whole,
        &[],
    );
}

#[test]
fn random_streams_fragmented_writes() {
    let count = common::env_u64("FERRO_DIFF_STREAMS", 100);
    // A different seed range from the whole-writes test, so more streams get covered.
    run_random_streams(
        "random_streams_fragmented_writes",
        base_seed(),
        1 << 32,
        count,
        Writes::Fragmented,
        &[],
    );
}

/// The random streams again with every value sent in place, so that pins meet
/// pipelined incr/decr (rewritten in place), append, delete, too-long keys and
/// multi-gets in the same read.
#[test]
fn random_streams_every_value_in_place() {
    let count = common::env_u64("FERRO_DIFF_STREAMS", 150);
    run_random_streams(
        "random_streams_every_value_in_place",
        base_seed(),
        2 << 32,
        count,
        Writes::Whole,
        EVERY_VALUE_IN_PLACE,
    );
}

/// The random streams with `-C` on both servers: every cas shown is 0, and `cas`,
/// `ms C`, `md C` and `ma C` answer as memcached's do without CAS uniques.
///
/// These streams never `flush_all` (they delete every key instead): under `-C` an item
/// stored after a `flush_all` in the same second is flushed too, so what such a stream
/// reads back depends on where each server's clock ticks between the two commands, which
/// on a busy machine differs between the servers (`gen::Generator::clock_free`).
/// `flush_all_without_cas_by_the_clock` checks that rule with the clocks in view.
#[test]
fn random_streams_without_cas() {
    let count = common::env_u64("FERRO_DIFF_STREAMS", 100);
    run_streams(
        gen::stream_without_flush_all,
        "random_streams_without_cas",
        base_seed(),
        5 << 32,
        count,
        Writes::Whole,
        WITHOUT_CAS,
    );
}

/// The random streams over TLS on both servers (`-Z`, memcached's OpenSSL against
/// rustls). Each step goes in one write, so in one record, and values are short:
/// memcached stalls when a read leaves decrypted bytes in OpenSSL's buffer (it waits
/// for the socket to be readable again), which a step of several records or larger
/// than its read buffer does, so such steps time out on memcached, not on ferrocache
/// (`docs/protocol.md`). The TLS tests in `tls.rs` cover large values and requests
/// split across records.
#[test]
fn random_streams_over_tls() {
    let count = common::env_u64("FERRO_DIFF_STREAMS", 150);
    let args: Vec<&'static str> = tls_client::server_args("")
        .into_iter()
        .map(|a| &*Box::leak(a.into_boxed_str()))
        .collect();
    run_streams(
        gen::stream_small_values,
        "random_streams_over_tls",
        base_seed(),
        6 << 32,
        count,
        Writes::Whole,
        Box::leak(args.into_boxed_slice()),
    );
}

/// A server's clock as `stats` shows it (`time`: unix seconds by the server's own clock,
/// the one items are stamped with).
fn server_time(side: &Side) -> u64 {
    let stats = side.server.stats("");
    stats["time"]
        .parse()
        .unwrap_or_else(|_| panic!("stats time {:?}", stats["time"]))
}

/// Waits until `side`'s clock ticks, and returns the new second: what runs right after
/// has most of a second before the next tick. Polls; a server whose clock does not move
/// for 30 s is broken.
fn next_tick(side: &Side) -> u64 {
    let start = server_time(side);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let now = server_time(side);
        if now != start {
            return now;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{}: clock stuck at {start} for 30 s",
            side.server.describe()
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// `flush_all` under `-C` by each server's clock, which `random_streams_without_cas`
/// leaves out: an item stored in the same second as the flush is flushed with it, one
/// stored after the clock has ticked is not, and one stored before is gone either way.
///
/// Whether a command ran in the same second as the flush is read off the server's own
/// clock (`stats time` before and after), never guessed from ours: each attempt starts
/// just after a tick, and an attempt that nevertheless straddles one (a machine stalled
/// for most of a second) is not judged but tried again. So load only makes it slower.
#[test]
fn flush_all_without_cas_by_the_clock() {
    const ATTEMPTS: usize = 20;
    let mut pair = Pair::start_with(WITHOUT_CAS);
    let mut replies: Vec<Vec<Vec<u8>>> = Vec::new();
    for side in [&mut pair.reference, &mut pair.candidate] {
        let name = side.server.kind.name();
        let mut got = Vec::new();
        // Stored before the flush: gone, whatever the clock does.
        got.push(side.exchange(b"set old 0 0 1\r\no\r\nflush_all\r\nget old\r\n", None));
        // Stored in the flush's second: flushed too.
        let mut same_second = None;
        for _ in 0..ATTEMPTS {
            let before = next_tick(side);
            let reply = side.exchange(
                b"flush_all\r\nset new 0 0 1\r\nn\r\nget new\r\ntouch new 0\r\n",
                None,
            );
            if server_time(side) == before {
                same_second = Some(reply);
                break;
            }
        }
        let same_second = same_second
            .unwrap_or_else(|| panic!("{name}: {ATTEMPTS} attempts each straddled a clock tick"));
        assert_eq!(
            same_second.describe(),
            escape(b"OK\r\nSTORED\r\nEND\r\nNOT_FOUND\r\n"),
            "{name}: an item stored in the same second as flush_all (under -C) is flushed"
        );
        got.push(same_second);
        // Stored after the clock has ticked past the flush: kept.
        got.push(side.exchange(b"flush_all\r\n", None));
        let flushed_at = server_time(side);
        while next_tick(side) <= flushed_at {}
        let after = side.exchange(b"set later 0 0 1\r\nl\r\nget later\r\n", None);
        assert_eq!(
            after.describe(),
            escape(b"STORED\r\nVALUE later 0 1\r\nl\r\nEND\r\n"),
            "{name}: an item stored a second after flush_all (under -C) is kept"
        );
        got.push(after);
        replies.push(got.into_iter().map(|r| r.bytes).collect());
    }
    assert_eq!(
        replies[0].iter().map(|r| escape(r)).collect::<Vec<_>>(),
        replies[1].iter().map(|r| escape(r)).collect::<Vec<_>>(),
        "memcached and {} differ",
        ServerKind::under_test().name()
    );
}

/// Pipelined batches of one-key gets and sets, the requests the server parses ahead and
/// prefetches (`ahead.rs`), on few keys so that a batch often stores a key it also reads,
/// with same-length sets (overwritten in place) and other lengths (new items).
#[test]
fn pipelined_batches_parsed_ahead() {
    let count = common::env_u64("FERRO_DIFF_STREAMS", 150);
    run_streams(
        gen::pipelined_stream,
        "pipelined_batches_parsed_ahead",
        base_seed(),
        3 << 32,
        count,
        Writes::Whole,
        &[],
    );
}

/// The same with every get value sent in place: a value pinned by a get of the batch
/// must not be overwritten in place by a set later in the same batch.
#[test]
fn pipelined_batches_parsed_ahead_values_in_place() {
    let count = common::env_u64("FERRO_DIFF_STREAMS", 100);
    run_streams(
        gen::pipelined_stream,
        "pipelined_batches_parsed_ahead_values_in_place",
        base_seed(),
        4 << 32,
        count,
        Writes::Whole,
        EVERY_VALUE_IN_PLACE,
    );
}

/// Hand-picked edge cases, in order, on one connection (state carries over between steps).
#[test]
fn edge_case_corpus() {
    let steps: Vec<Step> = EDGE_CASES.iter().map(|b| Step::from_bytes(b)).collect();
    let mut pair = Pair::start();
    for writes in [Writes::Whole, Writes::Fragmented] {
        if let Err(text) = run_stream(&mut pair, 0, &steps, writes) {
            panic!("edge case corpus differs:\n{text}");
        }
    }
}

/// memcached drops the unsent replies of earlier commands in the same read when a
/// get/gets/gat/gats has a key over 250 bytes (see `gen::Step::whole`); whole writes only.
#[test]
fn get_with_too_long_key_drops_unsent_replies() {
    let long = "k".repeat(251);
    let steps: Vec<Step> = [
        "flush_all\r\n".to_string(),
        format!("set a 0 0 1\r\nx\r\nget {long}\r\n"),
        format!("delete a\r\nincr a 1\r\ngets a {long}\r\n"),
        format!("get a\r\ndelete a\r\ngat 0 a {long}\r\n"),
        format!("set a 0 0 1\r\nx\r\ngat 0 {long} a\r\nget {long}\r\n"),
        format!("set a 0 0 1\r\nx\r\ntouch {long} 0\r\nget a\r\n"),
    ]
    .iter()
    .map(|s| Step::from_bytes(s.as_bytes()))
    .collect();
    for args in [&[][..], EVERY_VALUE_IN_PLACE] {
        let mut pair = Pair::start_with(args);
        if let Err(text) = run_stream(&mut pair, 0, &steps, Writes::Whole) {
            panic!("too-long key in a get differs ({args:?}):\n{text}");
        }
    }
}

/// Long multi-gets, which ferrocache looks up in a software pipeline (keys parsed,
/// hashed and prefetched up to 16 keys ahead of their lookups): hits, misses, expired
/// items, repeats, `gets`/`gat`/`gats`, too-long keys at several places, a line long
/// enough to pause on output (large values) and one key appearing hundreds of times.
#[test]
fn long_multi_gets() {
    let key = |i: usize| format!("mk{i}");
    let mut steps = vec![Step::from_bytes(b"flush_all\r\n")];
    for i in 0..64 {
        // Every third key never stored, every fifth stored already expired.
        if i % 3 == 0 {
            continue;
        }
        let exptime = if i % 5 == 0 { -1 } else { 0 };
        let value = "v".repeat(1 + i * 7 % 40);
        steps.push(Step::from_bytes(
            format!(
                "set {} {i} {exptime} {}\r\n{value}\r\n",
                key(i),
                value.len()
            )
            .as_bytes(),
        ));
    }
    let all: Vec<String> = (0..80).map(key).collect();
    let line = |cmd: &str, keys: &[String]| format!("{cmd} {}\r\n", keys.join(" "));
    let long = "k".repeat(251);
    let with_long_at = |at: usize| {
        let mut keys = all[..40].to_vec();
        keys.insert(at, long.clone());
        keys
    };
    let mut lines = vec![
        line("get", &all),
        line("gets", &all),
        line("gat 100", &all[..50]),
        line("gats 0", &all[10..]),
        line("get", &with_long_at(0)),
        line("get", &with_long_at(5)),
        line("gets", &with_long_at(17)),
        line("get", &with_long_at(40)),
        line("get", &vec![key(1); 300]),
    ];
    // Reversed, and with runs of spaces between keys.
    let mut rev = all.clone();
    rev.reverse();
    lines.push(format!("get  {}   \r\n", rev.join("   ")));
    for l in &lines {
        steps.push(Step::from_bytes(l.as_bytes()));
    }
    // Large values: one multi-get's replies pass the output pause point.
    for i in 0..24 {
        let value = "L".repeat(200_000 + i);
        steps.push(Step::from_bytes(
            format!("set big{i} 0 0 {}\r\n{value}\r\n", value.len()).as_bytes(),
        ));
    }
    let big: Vec<String> = (0..30).map(|i| format!("big{i}")).collect();
    steps.push(Step::from_bytes(line("get", &big).as_bytes()));
    // Past the pause point with a key too long still to come: nothing more is composed,
    // the lookups still run, and the command ends in memcached's error.
    for at in [12, 20, 30] {
        let mut keys = big.clone();
        keys.insert(at, long.clone());
        steps.push(Step::from_bytes(line("gets", &keys).as_bytes()));
        steps.push(Step::from_bytes(line("get", &keys[..at + 1]).as_bytes()));
    }
    for args in [&[][..], EVERY_VALUE_IN_PLACE] {
        let mut pair = Pair::start_with(args);
        for writes in [Writes::Whole, Writes::Fragmented] {
            if let Err(text) = run_stream(&mut pair, 0, &steps, writes) {
                panic!("long multi-gets differ ({args:?}):\n{text}");
            }
        }
    }
}

/// A short pipelined stream, written as one write and as two writes split at every byte,
/// must give the same replies (and the same as memcached's).
#[test]
fn pipelined_stream_split_at_every_byte() {
    let stream: &[u8] = b"set a 0 0 5\r\nhello\r\nget a b\r\ngets a\r\n\
append a 0 0 3 noreply\r\nxyz\r\nget a\n\
set n 1 0 2\r\n10\r\nincr n 5\r\ndecr n 100\r\nincr n abc\r\n\
delete a\r\nget a\r\nbogus\r\n\r\nset k 0 0 3\r\nabcde\r\n\
touch n 0\r\ngat 0 n a\r\ndelete n noreply\r\n";
    let pair = Pair::start();
    let mut rng = Rng::new(7);
    let mut expected: Option<Vec<u8>> = None;
    for side in [&pair.reference, &pair.candidate] {
        let name = side.server.kind.name();
        let mut whole = None;
        for split in 0..=stream.len() {
            let mut conn = side.server.connect();
            conn.request(b"flush_all\r\n");
            conn.send(&stream[..split]);
            // Give the server time to read the first piece on its own.
            std::thread::sleep(std::time::Duration::from_millis(1));
            let mut rest = stream[split..].to_vec();
            rest.extend_from_slice(b"mn\r\n");
            if rng.chance(0.5) {
                conn.send(&rest);
            } else {
                conn.send_in_pieces(&rest, &mut rng, 4, false);
            }
            let reply = conn.read_reply();
            assert_eq!(
                reply.ending,
                Ending::Done,
                "{name}, split at {split}: {}",
                reply.describe()
            );
            let reply = rename_cas(&reply.bytes);
            match &whole {
                None => whole = Some(reply),
                Some(w) => assert_eq!(
                    escape(w),
                    escape(&reply),
                    "{name}: split at byte {split} ({} | {}) changed the reply",
                    escape(&stream[..split]),
                    escape(&stream[split..])
                ),
            }
        }
        let whole = whole.expect("at least one split");
        match &expected {
            None => expected = Some(whole),
            Some(e) => assert_eq!(escape(e), escape(&whole), "{name} differs from memcached"),
        }
    }
}

/// CAS numbers renamed by first appearance (for short replies whose values hold no CRLF).
fn rename_cas(reply: &[u8]) -> Vec<u8> {
    let mut names: HashMap<u64, usize> = HashMap::new();
    let mut out = Vec::new();
    for line in reply.split_inclusive(|&b| b == b'\n') {
        let fields: Vec<&[u8]> = line.trim_ascii_end().split(|&b| b == b' ').collect();
        if fields.len() == 5 && fields[0] == b"VALUE" {
            if let Some(cas) = parse_u64(fields[4]) {
                let next = names.len();
                let name = *names.entry(cas).or_insert(next);
                out.extend_from_slice(
                    format!(
                        "VALUE {} {} {} #{name}\r\n",
                        String::from_utf8_lossy(fields[1]),
                        String::from_utf8_lossy(fields[2]),
                        String::from_utf8_lossy(fields[3])
                    )
                    .as_bytes(),
                );
                continue;
            }
        }
        out.extend_from_slice(line);
    }
    out
}

/// Values at the item size limit, one byte over and under, for several key lengths and
/// zero/non-zero flags; then get them back. Also: an oversized set deletes the old value,
/// and an append that would make an item too large.
#[test]
fn item_size_limit_boundary() {
    let mut steps = vec![Step::from_bytes(b"flush_all\r\n")];
    for key_len in [1usize, 10, 250] {
        let key = vec![b'b'; key_len];
        for flags in [0u32, 7] {
            let max = gen::max_value_len(key_len, flags != 0);
            for len in [max - 1, max, max + 1, gen::ITEM_SIZE_MAX + 10] {
                let mut req = format!("set {} {flags} 0 {len}\r\n", String::from_utf8_lossy(&key))
                    .into_bytes();
                req.resize(req.len() + len, b'v');
                req.extend_from_slice(b"\r\n");
                steps.push(Step::from_bytes(&req));
                let mut get = b"get ".to_vec();
                get.extend_from_slice(&key);
                get.extend_from_slice(b"\r\n");
                steps.push(Step::from_bytes(&get));
            }
            // Store a value that fits, then append past the limit.
            let mut req =
                format!("set {} {flags} 0 {max}\r\n", String::from_utf8_lossy(&key)).into_bytes();
            req.resize(req.len() + max, b'w');
            req.extend_from_slice(b"\r\n");
            let mut append =
                format!("append {} 0 0 2\r\nzz\r\n", String::from_utf8_lossy(&key)).into_bytes();
            append.extend_from_slice(b"get ");
            append.extend_from_slice(&key);
            append.extend_from_slice(b"\r\n");
            steps.push(Step::from_bytes(&req));
            steps.push(Step::from_bytes(&append));
        }
    }
    let mut pair = Pair::start();
    if let Err(text) = run_stream(&mut pair, 0, &steps, Writes::Whole) {
        panic!("item size boundary differs:\n{text}");
    }
}

/// Steps for `edge_case_corpus`, each compared on its own.
const EDGE_CASES: &[&[u8]] = &[
    b"flush_all\r\n",
    // storage basics and noreply
    b"set a 0 0 1\r\n1\r\n",
    b"set a 0 0 1 noreply\r\n2\r\nget a\r\n",
    b"add a 0 0 1\r\nx\r\n",
    b"add b 5 0 1\r\nx\r\n",
    b"replace c 0 0 1\r\nx\r\n",
    b"replace b 6 0 2\r\nxy\r\nget b\r\n",
    b"append b 9 0 2\r\nzz\r\nprepend b 9 0 2\r\naa\r\nget b\r\n",
    b"append nokey 0 0 1\r\nq\r\nprepend nokey 0 0 1\r\nq\r\n",
    b"gets a b\r\n",
    b"cas a 0 0 1 999999999\r\nq\r\n",
    b"cas nokey 0 0 1 1\r\nq\r\n",
    b"cas a 0 0 1 abc\r\nq\r\n",
    b"cas a 0 0 1\r\nq\r\n",
    // item header edges
    b"set f 4294967295 0 1\r\nx\r\nget f\r\n",
    b"set f 4294967296 0 1\r\nx\r\nget f\r\n",
    b"set f -1 0 1\r\nx\r\n",
    b"set f 99999999999999999999 0 1\r\nx\r\n",
    b"set f 0 -1 1\r\nx\r\nget f\r\n",
    b"set f 0 2592001 1\r\nx\r\nget f\r\n",
    b"set f 0 2000000000 1\r\nx\r\nget f\r\n",
    b"set f 0 4294967296 1\r\nx\r\n",
    b"set f 0 0 -1\r\nx\r\n",
    b"set f 0 0 abc\r\nx\r\n",
    b"set f 0 0 4294967296\r\n\r\n",
    b"set f 0 0 3\r\nhello\r\n",
    b"set f 0 0 3 noreply\r\nhello\r\n",
    b"set f 0 0 0\r\n\r\nget f\r\n",
    b"set f 0 0 4\r\nx\r\ny\r\nget f\r\n",
    // keys
    b"set llllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllll 0 0 1\r\nx\r\n",
    b"set lllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllll 0 0 1\r\nx\r\n",
    b"get a lllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllll b\r\n",
    b"set c\x01\x7f 0 0 1\r\nx\r\nget c\x01\x7f\r\n",
    b"get a\x00 b\r\n",
    // multi-get across memcached's 24-token boundary
    b"get a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a\r\n",
    b"gets a b a b a b a b a b a b a b a b a b a b a b a b a b a b\r\n",
    b"gat 0 a b a b a b a b a b a b a b a b a b a b a b a b a b a b\r\n",
    // incr/decr
    b"set n 0 0 3\r\n100\r\ndecr n 95\r\nget n\r\n",
    b"set n 0 0 6\r\n12 abc\r\nincr n 1\r\nget n\r\n",
    b"set n 0 0 20\r\n18446744073709551615\r\nincr n 1\r\nget n\r\n",
    b"set n 0 0 1\r\n5\r\ndecr n 10\r\nincr n 18446744073709551615\r\n",
    b"incr n -1\r\nincr n abc\r\nincr n 18446744073709551616\r\ndecr n 99999999999999999999\r\n",
    b"set n 0 0 2\r\n-5\r\nincr n 1\r\n",
    b"set n 0 0 0\r\n\r\nincr n 1\r\n",
    b"incr nokey 1\r\ndecr nokey 1\r\nincr n\r\n",
    b"set n 0 0 1\r\n7\r\nincr n 3 noreply\r\nget n\r\n",
    // delete, touch, gat
    b"delete a 0\r\ndelete a\r\ndelete b 1\r\ndelete b junk\r\ndelete b noreply\r\nget b\r\n",
    b"set t 0 0 1\r\nx\r\ntouch t 1000\r\ntouch nokey 0\r\ntouch t -1\r\nget t\r\n",
    b"set t 0 0 1\r\nx\r\ngat -1 t\r\nget t\r\n",
    b"set t 0 0 1\r\nx\r\ngats 1000 t nokey\r\ngat abc t\r\n",
    // admin
    b"verbosity 1\r\nverbosity 0 noreply\r\nverbosity\r\n",
    b"flush_all noreply\r\nget n\r\nflush_all 0\r\nflush_all abc\r\n",
    b"shutdown\r\n",
    // malformed lines
    b"\r\n",
    b"\n",
    b"foo bar\r\n",
    b"GET a\r\n",
    b"get\r\nset\r\nset a\r\nset a 0\r\nset a 0 0\r\n",
    b"set a 0 0 1 noreply extra\r\nq\r\n",
    b"get a\nset a 0 0 1\nx\r\nget a\n",
    b"set a 0 0 1\r\nx\r\nget a\r\ndelete a\r\nget a\r\nincr a 1\r\n",
    // Keys starting with `!` (one above the space) right after a space in the last
    // eight bytes of a line: a key scan that let a borrow out of the space fake a
    // match read an empty key and looped.
    b"set != 0 0 1\r\nx\r\nget = !=\r\nget = != \r\ngets a !\r\ngat 4 A !\r\n",
];
