//! CAS atomicity under concurrency: a CAS token is single-use.
//!
//! A CAS unique names one version of one item, and the server never hands the same unique
//! out again. So once a mutation guarded by a token has succeeded, the item's version has
//! changed (or the item is gone), and every later mutation guarded by that token must fail:
//! no (key, token) pair may be consumed twice, whoever sends the mutations and however
//! they interleave. A server that checks the token in one step and applies the change in a
//! second lets another client's write land in between, and then two clients both succeed
//! with one token.
//!
//! Each phase races [`CLIENTS`] connections on [`KEYS`] fresh keys, in rounds:
//! 1. one client (re)sets every key to `100`;
//! 2. every client reads every key's CAS (binary GET, `mg k c`, `gets`); all of them see
//!    the same tokens, since nothing writes between the set and step 3;
//! 3. every client sends, in one pipelined write, a CAS-guarded mutation of each key with
//!    that token, and records the keys whose mutation it saw succeed.
//!
//! Rendezvous points between the steps line the clients up, so the mutations of one round
//! hit the server together, on all its worker threads (`-t 2`). A phase stops after
//! [`MAX_ROUNDS`] rounds or [`PHASE_MS`] milliseconds, whichever comes first.
//!
//! What is asserted holds for any interleaving, so a slow or loaded machine can only make a
//! phase run fewer rounds, never fail it: on a correct server exactly one client's
//! mutation of each key succeeds in each round (the first one applied finds the token it
//! was read with; it changes the item's CAS or deletes the item, so all later ones fail).
//! A round in which two succeed is a token consumed twice, and is reported with the op, the
//! key and the token; a round in which none succeeds is reported too (a server that
//! refuses valid tokens would pass the first check trivially).
//!
//! The same races run against memcached, which passes them: the check holds for the
//! reference, so a failure on ferrocache is ferrocache's.
//!
//! With `FERRO_TEST_SERVER=memcached` the "under test" tests run memcached as well.

use crate::common;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use common::{escape, Client, Ending, ServerKind, ServerProcess, READ_TIMEOUT};
use protocol::binary::{frame_packet, opcode, write_request, RESPONSE_MAGIC};

/// Connections racing in each phase (`FERRO_CAS_RACE_CLIENTS`).
const CLIENTS: u64 = 8;
/// Keys each phase races on; every round mutates all of them (`FERRO_CAS_RACE_KEYS`).
/// Many keys make long pipelines: the clients sent to different worker threads start
/// a little apart, and a worker behind the other only meets refusals, which are quicker
/// than the other's successes, so it catches up and the two then take each key at the
/// same moment. With 32 keys a broken server was caught about once a second, with 1024
/// thousands of times.
const KEYS: u64 = 1024;
/// A phase ends after this many rounds (`FERRO_CAS_RACE_ROUNDS`) ...
const MAX_ROUNDS: u64 = 250;
/// ... or after this many milliseconds, whichever comes first (`FERRO_CAS_RACE_MS`).
const PHASE_MS: u64 = 600;
/// How long a client waits at a rendezvous before deciding another client is gone (it
/// failed, or panicked): a bound on a broken run, never reached by a working one.
const RENDEZVOUS_TIMEOUT: Duration = Duration::from_secs(30);
/// Two worker threads, so that mutations really run at the same time
/// (`FERRO_CAS_RACE_THREADS`).
const THREADS: u64 = 2;
const SERVER_ARGS: &[&str] = &["-m", "64", "-U", "0"];
/// The value every round starts from (a number, for the arithmetic ops).
const INITIAL: &[u8] = b"100";
/// The NOOP that ends each binary batch carries this opaque.
const BARRIER_OPAQUE: u32 = 0xB0B0_0000;
/// How many offending pairs a report lists per phase.
const REPORT_LINES: usize = 25;

/// One race at a time: the races of parallel tests would share the machine's cores and
/// line up less well. (Only the power to find a bug depends on that, not the verdict.)
static ONE_RACE_AT_A_TIME: Mutex<()> = Mutex::new(());

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Proto {
    Binary,
    Meta,
    Text,
}

/// A CAS-guarded mutation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Op {
    Incr,
    Decr,
    Append,
    Prepend,
    /// A set with a CAS (text `cas`, meta `ms ... C`, binary SET with a CAS).
    Set,
    Delete,
}

impl Op {
    /// The request as the protocol spells it, for reports.
    fn name(self, proto: Proto) -> &'static str {
        match (proto, self) {
            (Proto::Binary, Op::Incr) => "binary INCREMENT",
            (Proto::Binary, Op::Decr) => "binary DECREMENT",
            (Proto::Binary, Op::Append) => "binary APPEND",
            (Proto::Binary, Op::Prepend) => "binary PREPEND",
            (Proto::Binary, Op::Set) => "binary SET",
            (Proto::Binary, Op::Delete) => "binary DELETE",
            (Proto::Meta, Op::Incr) => "meta ma C",
            (Proto::Meta, Op::Decr) => "meta ma MD C",
            (Proto::Meta, Op::Append) => "meta ms MA C",
            (Proto::Meta, Op::Prepend) => "meta ms MP C",
            (Proto::Meta, Op::Set) => "meta ms C",
            (Proto::Meta, Op::Delete) => "meta md C",
            (Proto::Text, Op::Set) => "text cas",
            (Proto::Text, _) => unreachable!("text has no other CAS-guarded command"),
        }
    }
}

/// One race: the ops its clients use, client `i` taking `ops[i % ops.len()]`.
struct Phase {
    name: &'static str,
    ops: &'static [Op],
}

/// Per-op phases, plus deletes raced against sets: two deletes alone cannot both succeed
/// even when the check and the unlink are apart (the second finds nothing to unlink), but
/// a set that lands in between replaces the item the delete then removes.
const BINARY_AND_META_PHASES: &[Phase] = &[
    Phase {
        name: "incr",
        ops: &[Op::Incr],
    },
    Phase {
        name: "decr",
        ops: &[Op::Decr],
    },
    Phase {
        name: "append",
        ops: &[Op::Append],
    },
    Phase {
        name: "prepend",
        ops: &[Op::Prepend],
    },
    Phase {
        name: "set",
        ops: &[Op::Set],
    },
    Phase {
        name: "delete-vs-set",
        ops: &[Op::Delete, Op::Set],
    },
    Phase {
        name: "mixed",
        ops: &[Op::Incr, Op::Append, Op::Delete, Op::Set],
    },
];

/// The text protocol's only CAS-guarded command is `cas`.
const TEXT_PHASES: &[Phase] = &[Phase {
    name: "cas",
    ops: &[Op::Set],
}];

/// A mutation a client saw succeed.
#[derive(Clone, Copy, Debug)]
struct Success {
    round: u64,
    key: usize,
    token: u64,
    client: usize,
    op: Op,
}

/// A rendezvous of all clients, like `std::sync::Barrier` but with a timeout, so that a
/// client that is gone makes the others give up instead of waiting for ever.
struct Rendezvous {
    /// (clients arrived in this generation, generation)
    state: Mutex<(usize, u64)>,
    all_here: Condvar,
    parties: usize,
}

impl Rendezvous {
    fn new(parties: usize) -> Rendezvous {
        Rendezvous {
            state: Mutex::new((0, 0)),
            all_here: Condvar::new(),
            parties,
        }
    }

    /// Waits for every client; `Ok(true)` for exactly one of them (the leader).
    fn wait(&self) -> Result<bool, String> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let generation = state.1;
        state.0 += 1;
        if state.0 == self.parties {
            *state = (0, generation + 1);
            self.all_here.notify_all();
            return Ok(true);
        }
        let deadline = Instant::now() + RENDEZVOUS_TIMEOUT;
        while state.1 == generation {
            let now = Instant::now();
            if now >= deadline {
                return Err(format!(
                    "gave up after {RENDEZVOUS_TIMEOUT:?} waiting for the other clients"
                ));
            }
            state = self
                .all_here
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        Ok(false)
    }
}

/// The bounds of each phase, from the constants above or the environment.
#[derive(Clone, Copy, Debug)]
struct Limits {
    clients: usize,
    keys: usize,
    rounds: u64,
    time: Duration,
    threads: u64,
}

impl Limits {
    fn get() -> Limits {
        Limits {
            clients: common::env_u64("FERRO_CAS_RACE_CLIENTS", CLIENTS).max(2) as usize,
            keys: common::env_u64("FERRO_CAS_RACE_KEYS", KEYS).max(1) as usize,
            rounds: common::env_u64("FERRO_CAS_RACE_ROUNDS", MAX_ROUNDS),
            time: Duration::from_millis(common::env_u64("FERRO_CAS_RACE_MS", PHASE_MS)),
            threads: common::env_u64("FERRO_CAS_RACE_THREADS", THREADS).max(1),
        }
    }
}

/// What the clients of one phase share.
struct Race {
    limits: Limits,
    rendezvous: Rendezvous,
    started: Instant,
    /// Rounds begun (the leader counts them).
    rounds: AtomicU64,
    stop: AtomicBool,
    /// Some client hit an error; the phase stops at the next round.
    failed: AtomicBool,
}

/// What one client brings back from a phase.
#[derive(Default)]
struct ClientLog {
    successes: Vec<Success>,
    errors: Vec<String>,
}

fn key(phase: &str, i: usize) -> Vec<u8> {
    format!("race:{phase}:{i}").into_bytes()
}

// ----------------------------------------------------------------------------------------
// The three protocols: set up the keys, read the tokens, send the guarded mutations.

/// Every key set to [`INITIAL`].
fn setup(proto: Proto, conn: &mut Client, keys: &[Vec<u8>]) -> Result<(), String> {
    let mut request = Vec::new();
    match proto {
        Proto::Binary => {
            for (i, k) in keys.iter().enumerate() {
                write_request(&mut request, opcode::SET, &[0; 8], k, INITIAL, i as u32, 0);
            }
            let replies = binary_exchange(conn, request)?;
            expect_count(&replies, keys.len(), "binary SET")?;
            if let Some(bad) = replies.iter().find(|r| r.status != 0) {
                return Err(format!("binary SET failed: status {:#x}", bad.status));
            }
        }
        Proto::Meta | Proto::Text => {
            for k in keys {
                request.extend_from_slice(b"set ");
                request.extend_from_slice(k);
                request.extend_from_slice(format!(" 0 0 {}\r\n", INITIAL.len()).as_bytes());
                request.extend_from_slice(INITIAL);
                request.extend_from_slice(b"\r\n");
            }
            let lines = text_exchange(conn, &request)?;
            expect_count(&lines, keys.len(), "set")?;
            if let Some(bad) = lines.iter().find(|l| l.as_slice() != b"STORED") {
                return Err(format!("set answered {}", escape(bad)));
            }
        }
    }
    Ok(())
}

/// The current CAS of every key (all of them exist: the round's setup stored them).
fn fetch_tokens(proto: Proto, conn: &mut Client, keys: &[Vec<u8>]) -> Result<Vec<u64>, String> {
    let mut request = Vec::new();
    match proto {
        Proto::Binary => {
            for (i, k) in keys.iter().enumerate() {
                write_request(&mut request, opcode::GET, b"", k, b"", i as u32, 0);
            }
            let replies = binary_exchange(conn, request)?;
            expect_count(&replies, keys.len(), "binary GET")?;
            replies
                .iter()
                .enumerate()
                .map(|(i, r)| match (r.status, r.opaque == i as u32, r.cas) {
                    (0, true, cas) if cas != 0 => Ok(cas),
                    _ => Err(format!("binary GET of key {i} answered {r:?}")),
                })
                .collect()
        }
        Proto::Meta => {
            for k in keys {
                request.extend_from_slice(b"mg ");
                request.extend_from_slice(k);
                request.extend_from_slice(b" c\r\n");
            }
            let lines = text_exchange(conn, &request)?;
            expect_count(&lines, keys.len(), "mg")?;
            lines
                .iter()
                .map(|line| {
                    let line = String::from_utf8_lossy(line);
                    line.strip_prefix("HD c")
                        .and_then(|cas| cas.parse().ok())
                        .filter(|&cas| cas != 0)
                        .ok_or_else(|| format!("`mg k c` answered {line:?}"))
                })
                .collect()
        }
        Proto::Text => {
            request.extend_from_slice(b"gets");
            for k in keys {
                request.push(b' ');
                request.extend_from_slice(k);
            }
            request.extend_from_slice(b"\r\n");
            let lines = text_exchange(conn, &request)?;
            // VALUE <key> <flags> <bytes> <cas>, the data line, ..., END
            let expected = 2 * keys.len() + 1;
            expect_count(&lines, expected, "gets")?;
            if lines[expected - 1] != b"END" {
                return Err(format!("gets ended with {}", escape(&lines[expected - 1])));
            }
            keys.iter()
                .enumerate()
                .map(|(i, k)| {
                    let line = &lines[2 * i];
                    let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
                    let cas = (fields.len() == 5 && fields[0] == b"VALUE" && fields[1] == k)
                        .then(|| std::str::from_utf8(fields[4]).ok()?.parse::<u64>().ok())
                        .flatten()
                        .filter(|&cas| cas != 0);
                    cas.ok_or_else(|| format!("gets answered {}", escape(line)))
                })
                .collect()
        }
    }
}

/// Sends `ops[i]` on `keys[i]` guarded by `tokens[i]`, all in one write; returns which
/// succeeded.
fn mutate(
    proto: Proto,
    conn: &mut Client,
    keys: &[Vec<u8>],
    tokens: &[u64],
    ops: &[Op],
) -> Result<Vec<bool>, String> {
    let mut request = Vec::new();
    match proto {
        Proto::Binary => {
            for (i, ((k, &token), &op)) in keys.iter().zip(tokens).zip(ops).enumerate() {
                let opaque = i as u32;
                match op {
                    Op::Incr | Op::Decr => {
                        let mut extras = Vec::with_capacity(20);
                        extras.extend_from_slice(&1u64.to_be_bytes()); // delta
                        extras.extend_from_slice(&0u64.to_be_bytes()); // initial
                        extras.extend_from_slice(&u32::MAX.to_be_bytes()); // never create
                        let code = if op == Op::Incr {
                            opcode::INCREMENT
                        } else {
                            opcode::DECREMENT
                        };
                        write_request(&mut request, code, &extras, k, b"", opaque, token);
                    }
                    Op::Append => {
                        write_request(&mut request, opcode::APPEND, b"", k, b"a", opaque, token)
                    }
                    Op::Prepend => {
                        write_request(&mut request, opcode::PREPEND, b"", k, b"p", opaque, token)
                    }
                    Op::Set => {
                        write_request(&mut request, opcode::SET, &[0; 8], k, b"200", opaque, token)
                    }
                    Op::Delete => {
                        write_request(&mut request, opcode::DELETE, b"", k, b"", opaque, token)
                    }
                }
            }
            let replies = binary_exchange(conn, request)?;
            expect_count(&replies, keys.len(), "binary mutations")?;
            replies
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    if r.opaque != i as u32 {
                        return Err(format!("reply {i} out of order: {r:?}"));
                    }
                    // Success, or: not found, exists (the CAS differs), not stored,
                    // non-numeric (an incr after another client's append).
                    match r.status {
                        0 => Ok(true),
                        0x01 | 0x02 | 0x05 | 0x06 => Ok(false),
                        _ => Err(format!("{} answered {r:?}", ops[i].name(proto))),
                    }
                })
                .collect()
        }
        Proto::Meta => {
            for (i, ((k, &token), &op)) in keys.iter().zip(tokens).zip(ops).enumerate() {
                let k = String::from_utf8_lossy(k);
                let line = match op {
                    Op::Incr => format!("ma {k} C{token} O{i}\r\n"),
                    Op::Decr => format!("ma {k} MD C{token} O{i}\r\n"),
                    Op::Append => format!("ms {k} 1 MA C{token} O{i}\r\na\r\n"),
                    Op::Prepend => format!("ms {k} 1 MP C{token} O{i}\r\np\r\n"),
                    Op::Set => format!("ms {k} 3 C{token} O{i}\r\n200\r\n"),
                    Op::Delete => format!("md {k} C{token} O{i}\r\n"),
                };
                request.extend_from_slice(line.as_bytes());
            }
            let lines = text_exchange(conn, &request)?;
            expect_count(&lines, keys.len(), "meta mutations")?;
            lines
                .iter()
                .enumerate()
                .map(|(i, line)| {
                    let line = String::from_utf8_lossy(line);
                    if line.starts_with("CLIENT_ERROR cannot increment or decrement") {
                        return Ok(false); // an incr after another client's append
                    }
                    let mut words = line.split(' ');
                    let status = words.next().unwrap_or("");
                    if !words.any(|w| w == format!("O{i}")) {
                        return Err(format!("reply {i} out of order: {line:?}"));
                    }
                    match status {
                        "HD" => Ok(true),
                        "EX" | "NF" | "NS" => Ok(false),
                        _ => Err(format!("{} answered {line:?}", ops[i].name(proto))),
                    }
                })
                .collect()
        }
        Proto::Text => {
            for (k, &token) in keys.iter().zip(tokens) {
                request.extend_from_slice(b"cas ");
                request.extend_from_slice(k);
                request.extend_from_slice(format!(" 0 0 3 {token}\r\n200\r\n").as_bytes());
            }
            let lines = text_exchange(conn, &request)?;
            expect_count(&lines, keys.len(), "cas")?;
            lines
                .iter()
                .map(|line| match line.as_slice() {
                    b"STORED" => Ok(true),
                    b"EXISTS" | b"NOT_FOUND" => Ok(false),
                    _ => Err(format!("cas answered {}", escape(line))),
                })
                .collect()
        }
    }
}

fn expect_count<T>(replies: &[T], count: usize, what: &str) -> Result<(), String> {
    if replies.len() == count {
        Ok(())
    } else {
        Err(format!(
            "{what}: {} replies, expected {count}",
            replies.len()
        ))
    }
}

/// Sends text/meta `request` plus the `mn` barrier; returns the reply lines before `MN`.
/// (The values here never hold a line break, so splitting at CRLF is exact.)
fn text_exchange(conn: &mut Client, request: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let mut bytes = request.to_vec();
    bytes.extend_from_slice(b"mn\r\n");
    conn.try_send(&bytes).map_err(|e| format!("write: {e}"))?;
    let reply = conn.read_reply();
    if reply.ending != Ending::Done {
        return Err(format!("reply: {}", reply.describe()));
    }
    let mut lines: Vec<Vec<u8>> = reply
        .bytes
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l).to_vec())
        .collect();
    // The reply ends with CRLF, so the last piece is empty.
    lines.pop();
    Ok(lines)
}

/// A binary reply packet's header fields this test looks at.
#[derive(Debug)]
struct BinaryReply {
    status: u16,
    opaque: u32,
    cas: u64,
}

/// Sends binary `request` plus a NOOP; returns the replies before the NOOP's.
fn binary_exchange(conn: &mut Client, mut request: Vec<u8>) -> Result<Vec<BinaryReply>, String> {
    write_request(&mut request, opcode::NOOP, b"", b"", b"", BARRIER_OPAQUE, 0);
    conn.try_send(&request).map_err(|e| format!("write: {e}"))?;
    let reply = conn.read_until(READ_TIMEOUT, |bytes| {
        let mut rest = bytes;
        while let Some(packet) = frame_packet(rest) {
            if packet.header.opcode == opcode::NOOP && packet.header.opaque == BARRIER_OPAQUE {
                return true;
            }
            rest = &rest[packet.header.packet_len()..];
        }
        false
    });
    if reply.ending != Ending::Done {
        return Err(format!("binary reply: {}", reply.describe()));
    }
    let mut replies = Vec::new();
    let mut rest = reply.bytes.as_slice();
    while let Some(packet) = frame_packet(rest) {
        let h = packet.header;
        if h.magic != RESPONSE_MAGIC {
            return Err(format!("not a response packet: {h:?}"));
        }
        if h.opcode == opcode::NOOP && h.opaque == BARRIER_OPAQUE {
            break;
        }
        replies.push(BinaryReply {
            status: h.status,
            opaque: h.opaque,
            cas: h.cas,
        });
        rest = &rest[h.packet_len()..];
    }
    Ok(replies)
}

// ----------------------------------------------------------------------------------------
// The race.

/// One client's rounds. Never panics while others may wait for it: errors are logged, the
/// phase is told to stop, and the client keeps coming to the rendezvous until it does.
fn client_rounds(
    id: usize,
    proto: Proto,
    conn: &mut Client,
    keys: &[Vec<u8>],
    op: Op,
    race: &Race,
) -> ClientLog {
    let mut log = ClientLog::default();
    let ops = vec![op; keys.len()];
    let mut broken = false;
    let fail = |log: &mut ClientLog, broken: &mut bool, what: &str, e: String| {
        log.errors
            .push(format!("client {id} ({}), {what}: {e}", op.name(proto)));
        *broken = true;
        race.failed.store(true, Ordering::SeqCst);
    };
    loop {
        // 1. The leader decides whether to go on, and sets the keys up.
        match race.rendezvous.wait() {
            Ok(true) => {
                let stop = race.failed.load(Ordering::SeqCst)
                    || race.rounds.load(Ordering::SeqCst) >= race.limits.rounds
                    || race.started.elapsed() >= race.limits.time;
                if !stop {
                    if let Err(e) = setup(proto, conn, keys) {
                        fail(&mut log, &mut broken, "setup", e);
                    }
                    race.rounds.fetch_add(1, Ordering::SeqCst);
                }
                race.stop.store(stop || broken, Ordering::SeqCst);
            }
            Ok(false) => {}
            Err(e) => {
                fail(&mut log, &mut broken, "rendezvous", e);
                break;
            }
        }
        if let Err(e) = race.rendezvous.wait() {
            fail(&mut log, &mut broken, "rendezvous", e);
            break;
        }
        if race.stop.load(Ordering::SeqCst) {
            break;
        }
        let round = race.rounds.load(Ordering::SeqCst) - 1;
        // 2. Read the tokens.
        let tokens = if broken {
            None
        } else {
            match fetch_tokens(proto, conn, keys) {
                Ok(t) => Some(t),
                Err(e) => {
                    fail(&mut log, &mut broken, "reading the CAS", e);
                    None
                }
            }
        };
        if let Err(e) = race.rendezvous.wait() {
            fail(&mut log, &mut broken, "rendezvous", e);
            break;
        }
        // 3. Race the mutations.
        let Some(tokens) = tokens else { continue };
        match mutate(proto, conn, keys, &tokens, &ops) {
            Ok(succeeded) => {
                for (key, (&ok, &token)) in succeeded.iter().zip(&tokens).enumerate() {
                    if ok {
                        log.successes.push(Success {
                            round,
                            key,
                            token,
                            client: id,
                            op,
                        });
                    }
                }
            }
            Err(e) => fail(&mut log, &mut broken, "mutating", e),
        }
    }
    log
}

/// Runs one phase on `server`; returns a report of what went wrong, if anything.
fn run_phase(
    server: &ServerProcess,
    limits: Limits,
    proto: Proto,
    phase: &Phase,
) -> (u64, Option<String>) {
    let keys: Vec<Vec<u8>> = (0..limits.keys).map(|i| key(phase.name, i)).collect();
    // Connect before any client starts, so a failed connect panics here and not while
    // other clients wait at a rendezvous.
    let mut conns: Vec<Client> = (0..limits.clients).map(|_| server.connect()).collect();
    let race = Race {
        limits,
        rendezvous: Rendezvous::new(limits.clients),
        started: Instant::now(),
        rounds: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        failed: AtomicBool::new(false),
    };
    let logs: Vec<ClientLog> = thread::scope(|s| {
        let handles: Vec<_> = conns
            .iter_mut()
            .enumerate()
            .map(|(id, conn)| {
                let op = phase.ops[id % phase.ops.len()];
                let (race, keys) = (&race, &keys);
                s.spawn(move || client_rounds(id, proto, conn, keys, op, race))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a client thread panicked"))
            .collect()
    });
    let rounds = race.rounds.load(Ordering::SeqCst);
    let errors: Vec<&String> = logs.iter().flat_map(|l| &l.errors).collect();
    // (key, token) -> every success with it; (round, key) -> how many succeeded.
    let mut by_token: HashMap<(usize, u64), Vec<Success>> = HashMap::new();
    let mut per_round: HashMap<(u64, usize), usize> = HashMap::new();
    for s in logs.iter().flat_map(|l| &l.successes) {
        by_token.entry((s.key, s.token)).or_default().push(*s);
        *per_round.entry((s.round, s.key)).or_default() += 1;
    }
    let mut twice: Vec<&Vec<Success>> = by_token.values().filter(|v| v.len() > 1).collect();
    twice.sort_by_key(|v| (v[0].round, v[0].key));
    let failed_rounds = race.failed.load(Ordering::SeqCst);
    // Rounds in which no client succeeded (only meaningful when every client ran them).
    let none: Vec<(u64, usize)> = if failed_rounds {
        Vec::new()
    } else {
        (0..rounds)
            .flat_map(|r| (0..limits.keys).map(move |k| (r, k)))
            .filter(|rk| !per_round.contains_key(rk))
            .collect()
    };
    if twice.is_empty() && none.is_empty() && errors.is_empty() {
        return (rounds, None);
    }
    let mut text = format!(
        "{} phase {:?} ({} rounds x {} keys x {} clients):\n",
        server.kind.name(),
        phase.name,
        rounds,
        limits.keys,
        limits.clients
    );
    if !twice.is_empty() {
        let mut per_op: HashMap<&str, usize> = HashMap::new();
        for v in &twice {
            for s in v.iter() {
                *per_op.entry(s.op.name(proto)).or_default() += 1;
            }
        }
        let mut per_op: Vec<_> = per_op.into_iter().collect();
        per_op.sort();
        let _ = writeln!(
            text,
            "  {} CAS token(s) consumed more than once (successes among them by op: {per_op:?}):",
            twice.len()
        );
        for v in twice.iter().take(REPORT_LINES) {
            let by: Vec<String> = v
                .iter()
                .map(|s| format!("{} by client {}", s.op.name(proto), s.client))
                .collect();
            let _ = writeln!(
                text,
                "    round {} key {} token {}: {} successes: {}",
                v[0].round,
                String::from_utf8_lossy(&keys[v[0].key]),
                v[0].token,
                v.len(),
                by.join(", ")
            );
        }
        if twice.len() > REPORT_LINES {
            let _ = writeln!(text, "    ... and {} more", twice.len() - REPORT_LINES);
        }
    }
    if !none.is_empty() {
        let _ = writeln!(
            text,
            "  {} (round, key) pairs in which no client's mutation succeeded, first {:?}",
            none.len(),
            &none[..none.len().min(5)]
        );
    }
    for e in errors.iter().take(REPORT_LINES) {
        let _ = writeln!(text, "  error: {e}");
    }
    (rounds, Some(text))
}

/// Runs every phase for `proto` on a fresh `kind` server, and panics with the reports.
fn race(kind: ServerKind, proto: Proto, phases: &[Phase]) {
    let _one = ONE_RACE_AT_A_TIME
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let limits = Limits::get();
    let threads = limits.threads.to_string();
    let mut args = vec!["-t", threads.as_str()];
    args.extend_from_slice(SERVER_ARGS);
    let server = ServerProcess::start(kind, &args);
    let mut reports = Vec::new();
    for phase in phases {
        let started = Instant::now();
        let (rounds, report) = run_phase(&server, limits, proto, phase);
        eprintln!(
            "{proto:?} on {}: phase {:?}: {rounds} rounds in {:.2?}{}",
            kind.name(),
            phase.name,
            started.elapsed(),
            if report.is_some() { ": FAILED" } else { "" }
        );
        if let Some(text) = report {
            eprint!("{text}");
            reports.push(text);
        }
    }
    drop(server); // killed by PID
    assert!(
        reports.is_empty(),
        "{proto:?} protocol on {}: CAS is not atomic\n{}",
        kind.name(),
        reports.join("")
    );
}

#[test]
fn binary_cas_tokens_are_single_use() {
    race(
        ServerKind::under_test(),
        Proto::Binary,
        BINARY_AND_META_PHASES,
    );
}

#[test]
fn meta_cas_tokens_are_single_use() {
    race(
        ServerKind::under_test(),
        Proto::Meta,
        BINARY_AND_META_PHASES,
    );
}

#[test]
fn text_cas_tokens_are_single_use() {
    race(ServerKind::under_test(), Proto::Text, TEXT_PHASES);
}

/// The reference passes the same races: the check itself is sound.
#[test]
fn memcached_binary_cas_tokens_are_single_use() {
    race(ServerKind::Memcached, Proto::Binary, BINARY_AND_META_PHASES);
}

#[test]
fn memcached_meta_cas_tokens_are_single_use() {
    race(ServerKind::Memcached, Proto::Meta, BINARY_AND_META_PHASES);
}

#[test]
fn memcached_text_cas_tokens_are_single_use() {
    race(ServerKind::Memcached, Proto::Text, TEXT_PHASES);
}
