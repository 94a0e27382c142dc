//! Binary-protocol wire tests: the same request sequences go to Debian's memcached 1.6.18
//! and to ferrocache (both `-t 1 -m 64 -U 0`), and the replies must be byte-identical.
//!
//! Before comparing, each side's replies are parsed into packets and normalized:
//! - CAS values are renamed by order of first appearance within a scenario;
//! - the body of a successful VERSION reply is dropped;
//! - trailing spaces of hit values are dropped (memcached pads a shorter incr/decr result
//!   in place only while no unsent reply holds the item; ferrocache always pads; the
//!   generated values never end in a space);
//! - STAT packets keep only their name, and only the names both servers report are kept.
//!
//! A scenario is a list of batches. Each batch is written in one go (or in random pieces)
//! and followed by a NOOP "barrier" with its own opaque; the reader stops at the barrier's
//! reply, or when the server closes. A request may name the CAS of an earlier reply
//! ([`Cas::Seen`]), which each side resolves against its own replies.
//!
//! `FERRO_BINARY_SEED=N` and `FERRO_BINARY_STREAMS=N` steer the random differential.

use crate::common;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use common::{escape, Client, Ending, Reply, Rng, ServerKind, ServerProcess, READ_TIMEOUT};
use protocol::binary::{frame_packet, opcode as op, write_request, Header, RESPONSE_MAGIC};

const SERVER_ARGS: &[&str] = &["-t", "1", "-m", "64", "-U", "0"];
/// See differential.rs: memcached's background threads make in-place incr nondeterministic.
const MEMCACHED_DETERMINISM_ARGS: &[&str] = &["-o", "no_lru_crawler,no_lru_maintainer"];
const BARRIER_OPAQUE: u32 = 0xB0B0_0000;

/// The CAS field of a request.
#[derive(Clone, Copy, Debug)]
enum Cas {
    Lit(u64),
    /// The `n`-th distinct non-zero CAS this side has returned in this scenario
    /// (`usize::MAX`: the latest one).
    Seen(usize),
}

#[derive(Clone, Debug)]
struct Req {
    /// Raw bytes, when the request is deliberately malformed.
    raw: Option<Vec<u8>>,
    opcode: u8,
    extras: Vec<u8>,
    key: Vec<u8>,
    value: Vec<u8>,
    cas: Cas,
    opaque: u32,
}

fn req(opcode: u8, extras: &[u8], key: &[u8], value: &[u8]) -> Req {
    Req {
        raw: None,
        opcode,
        extras: extras.to_vec(),
        key: key.to_vec(),
        value: value.to_vec(),
        cas: Cas::Lit(0),
        opaque: 0x1000 + u32::from(opcode),
    }
}

impl Req {
    fn cas(mut self, cas: Cas) -> Req {
        self.cas = cas;
        self
    }
    fn opaque(mut self, opaque: u32) -> Req {
        self.opaque = opaque;
        self
    }
}

fn raw(bytes: Vec<u8>) -> Req {
    let mut r = req(0, b"", b"", b"");
    r.raw = Some(bytes);
    r
}

fn header_bytes(opcode: u8, key_len: u16, extras_len: u8, body_len: u32, magic: u8) -> Vec<u8> {
    let mut out = Vec::new();
    Header {
        magic,
        opcode,
        key_len,
        extras_len,
        body_len,
        opaque: 0x77,
        ..Header::default()
    }
    .write(&mut out);
    out
}

fn store_extras(flags: u32, exptime: u32) -> Vec<u8> {
    let mut e = flags.to_be_bytes().to_vec();
    e.extend_from_slice(&exptime.to_be_bytes());
    e
}

fn set(opcode: u8, key: &[u8], value: &[u8], flags: u32, exptime: u32) -> Req {
    req(opcode, &store_extras(flags, exptime), key, value)
}

fn get(opcode: u8, key: &[u8]) -> Req {
    req(opcode, b"", key, b"")
}

fn touch(opcode: u8, key: &[u8], exptime: u32) -> Req {
    req(opcode, &exptime.to_be_bytes(), key, b"")
}

fn arith(opcode: u8, key: &[u8], delta: u64, initial: u64, exptime: u32) -> Req {
    let mut e = delta.to_be_bytes().to_vec();
    e.extend_from_slice(&initial.to_be_bytes());
    e.extend_from_slice(&exptime.to_be_bytes());
    req(opcode, &e, key, b"")
}

fn simple(opcode: u8) -> Req {
    req(opcode, b"", b"", b"")
}

/// One parsed reply packet after normalization, or trailing bytes that are not one.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Item {
    Packet {
        opcode: u8,
        status: u16,
        extras: Vec<u8>,
        key: Vec<u8>,
        value: Vec<u8>,
        opaque: u32,
        /// Order of first appearance (0 stays 0).
        cas: u64,
    },
    /// A STAT packet's name only.
    Stat(Vec<u8>),
    Junk(Vec<u8>),
}

/// One server, its connection and the CAS values seen in the current scenario.
struct Side {
    server: ServerProcess,
    conn: Option<Client>,
    seen_cas: Vec<u64>,
    cas_names: HashMap<u64, u64>,
}

impl Side {
    /// `extra` goes to ferrocache, and those of its flags that are memcached's
    /// (`common::FLAGS_FOR_BOTH`) to memcached too.
    fn start_with(kind: ServerKind, extra: &[&str]) -> Side {
        let mut args = SERVER_ARGS.to_vec();
        if kind == ServerKind::Memcached {
            args.extend_from_slice(MEMCACHED_DETERMINISM_ARGS);
            args.extend(common::flags_for_both(extra));
        } else {
            args.extend_from_slice(extra);
        }
        Side {
            server: ServerProcess::start(kind, &args),
            conn: None,
            seen_cas: Vec::new(),
            cas_names: HashMap::new(),
        }
    }

    fn reset(&mut self) {
        self.conn = Some(self.server.connect());
        self.seen_cas.clear();
        self.cas_names.clear();
    }

    fn encode(&self, r: &Req, out: &mut Vec<u8>) {
        if let Some(bytes) = &r.raw {
            out.extend_from_slice(bytes);
            return;
        }
        let cas = match r.cas {
            Cas::Lit(c) => c,
            Cas::Seen(usize::MAX) => self.seen_cas.last().copied().unwrap_or(1),
            Cas::Seen(n) => self.seen_cas.get(n).copied().unwrap_or(1),
        };
        write_request(out, r.opcode, &r.extras, &r.key, &r.value, r.opaque, cas);
    }

    /// Send one batch plus the barrier; returns the normalized replies and whether the
    /// connection ended (closed or timed out).
    fn run_batch(
        &mut self,
        batch: &[Req],
        split: Option<&mut Rng>,
        barrier: bool,
    ) -> (Vec<Item>, Ending) {
        let mut bytes = Vec::new();
        for r in batch {
            self.encode(r, &mut bytes);
        }
        if barrier {
            write_request(&mut bytes, op::NOOP, b"", b"", b"", BARRIER_OPAQUE, 0);
        }
        let conn = self.conn.as_mut().expect("connected");
        let sent = match split {
            Some(rng) => conn.try_send_in_pieces(&bytes, rng, 7, false),
            None => conn.try_send(&bytes),
        };
        let timeout = if barrier {
            READ_TIMEOUT
        } else {
            Duration::from_millis(300)
        };
        let reply: Reply = conn.read_until(timeout, |b| barrier && ends_with_barrier(b));
        let ending = if sent.is_err() && reply.ending == Ending::Done {
            Ending::Closed
        } else {
            reply.ending
        };
        let mut items = self.normalize(&reply.bytes);
        if ending == Ending::Done {
            items.pop(); // the barrier's own reply
        }
        if ending != Ending::Done {
            self.conn = None;
        }
        (items, ending)
    }

    fn normalize(&mut self, mut bytes: &[u8]) -> Vec<Item> {
        let mut items = Vec::new();
        while let Some(p) = frame_packet(bytes).filter(|p| p.header.magic == RESPONSE_MAGIC) {
            let h = p.header;
            bytes = &bytes[h.packet_len()..];
            if h.cas != 0 && !self.seen_cas.contains(&h.cas) {
                self.seen_cas.push(h.cas);
            }
            let next = self.cas_names.len() as u64 + 1;
            let cas = if h.cas == 0 {
                0
            } else {
                *self.cas_names.entry(h.cas).or_insert(next)
            };
            if h.opcode == op::STAT && h.status == 0 && !p.key.is_empty() {
                items.push(Item::Stat(p.key.to_vec()));
                continue;
            }
            let value = if h.opcode == op::VERSION && h.status == 0 {
                b"<version>".to_vec()
            } else if h.status == 0 && h.extras_len == 4 {
                // A hit: drop the spaces of an incr/decr result rewritten in place.
                // memcached pads in place only while no unsent reply holds the item,
                // and pipelined batches make that depend on its reference counts.
                let end = p
                    .value
                    .iter()
                    .rposition(|&b| b != b' ')
                    .map_or(0, |i| i + 1);
                p.value[..end].to_vec()
            } else {
                p.value.to_vec()
            };
            items.push(Item::Packet {
                opcode: h.opcode,
                status: h.status,
                extras: p.extras.to_vec(),
                key: p.key.to_vec(),
                value,
                opaque: h.opaque,
                cas,
            });
        }
        if !bytes.is_empty() {
            items.push(Item::Junk(bytes.to_vec()));
        }
        items
    }
}

fn ends_with_barrier(bytes: &[u8]) -> bool {
    let mut rest = bytes;
    let mut last = None;
    while let Some(p) = frame_packet(rest) {
        rest = &rest[p.header.packet_len()..];
        last = Some(p.header);
    }
    rest.is_empty()
        && last.is_some_and(|h| h.opcode == op::NOOP && h.opaque == BARRIER_OPAQUE && h.status == 0)
}

/// Keep only the STAT names both sides report.
fn common_stats(a: &mut Vec<Item>, b: &mut Vec<Item>) {
    let names = |v: &Vec<Item>| -> HashSet<Vec<u8>> {
        v.iter()
            .filter_map(|i| match i {
                Item::Stat(n) => Some(n.clone()),
                _ => None,
            })
            .collect()
    };
    let shared: HashSet<_> = names(a).intersection(&names(b)).cloned().collect();
    let keep = |i: &Item| !matches!(i, Item::Stat(n) if !shared.contains(n));
    a.retain(keep);
    b.retain(keep);
}

fn describe(items: &[Item], ending: Ending) -> String {
    let mut s = String::new();
    for i in items {
        match i {
            Item::Packet {
                opcode,
                status,
                extras,
                key,
                value,
                opaque,
                cas,
            } => s += &format!(
                "\n  op={opcode:#04x} status={status:#06x} opaque={opaque:#x} cas=#{cas} ext={} key={} value={}",
                escape(extras),
                escape(key),
                escape(&value[..value.len().min(80)])
            ),
            Item::Stat(n) => s += &format!("\n  STAT {}", escape(n)),
            Item::Junk(b) => s += &format!("\n  junk {}", escape(&b[..b.len().min(80)])),
        }
    }
    format!("{s}\n  <{ending:?}>")
}

struct Pair {
    mc: Side,
    fc: Side,
}

impl Pair {
    fn start() -> Pair {
        Pair::start_with(&[])
    }

    /// With `extra` arguments for ferrocache.
    fn start_with(extra: &[&str]) -> Pair {
        Pair {
            mc: Side::start_with(ServerKind::Memcached, extra),
            fc: Side::start_with(ServerKind::under_test(), extra),
        }
    }

    /// Run a scenario on fresh connections; returns a failure description or None.
    fn check(
        &mut self,
        name: &str,
        batches: &[Vec<Req>],
        mut split: Option<&mut Rng>,
    ) -> Option<String> {
        self.mc.reset();
        self.fc.reset();
        for (i, batch) in batches.iter().enumerate() {
            let (mut a, ea) = self.mc.run_batch(batch, None, true);
            let (mut b, eb) = self.fc.run_batch(batch, split.as_deref_mut(), true);
            common_stats(&mut a, &mut b);
            if (&a, ea) != (&b, eb) {
                return Some(format!(
                    "{name}: batch {i} {batch:?} differs\nmemcached:{}\nferrocache:{}",
                    describe(&a, ea),
                    describe(&b, eb)
                ));
            }
            if ea != Ending::Done {
                break;
            }
        }
        None
    }

    fn assert_same(&mut self, name: &str, batches: &[Vec<Req>]) {
        if let Some(failure) = self.check(name, batches, None) {
            panic!("{failure}");
        }
    }
}

#[test]
fn every_opcode_matches_memcached() {
    let mut p = Pair::start();
    let cases: Vec<(&str, Vec<Vec<Req>>)> = vec![
        (
            "set get getk getq getkq",
            vec![vec![
                set(op::SET, b"a", b"hello", 5, 0),
                get(op::GET, b"a"),
                get(op::GETK, b"a"),
                get(op::GETQ, b"a"),
                get(op::GETKQ, b"a"),
                get(op::GET, b"missing"),
                get(op::GETK, b"missing"),
                get(op::GETQ, b"missing"),
                get(op::GETKQ, b"missing"),
            ]],
        ),
        (
            "add replace and quiet forms",
            vec![vec![
                set(op::ADD, b"b", b"1", 0, 0),
                set(op::ADD, b"b", b"2", 0, 0),
                set(op::ADDQ, b"b", b"3", 0, 0),
                set(op::ADDQ, b"b2", b"3", 0, 0),
                set(op::REPLACE, b"b", b"4", 1, 0),
                set(op::REPLACE, b"nob", b"4", 0, 0),
                set(op::REPLACEQ, b"nob", b"4", 0, 0),
                set(op::REPLACEQ, b"b", b"5", 0, 0),
                set(op::SETQ, b"c", b"6", 0, 0),
                get(op::GETK, b"b"),
                get(op::GETK, b"b2"),
                get(op::GETK, b"c"),
            ]],
        ),
        (
            "append prepend",
            vec![vec![
                set(op::SET, b"ap", b"mid", 9, 0),
                req(op::APPEND, b"", b"ap", b">>"),
                req(op::PREPEND, b"", b"ap", b"<<"),
                req(op::APPENDQ, b"", b"ap", b"!"),
                req(op::PREPENDQ, b"", b"ap", b"?"),
                req(op::APPEND, b"", b"noap", b"x"),
                req(op::PREPENDQ, b"", b"noap", b"x"),
                get(op::GET, b"ap"),
            ]],
        ),
        (
            "delete",
            vec![vec![
                set(op::SET, b"d", b"x", 0, 0),
                set(op::SET, b"dq", b"x", 0, 0),
                req(op::DELETE, b"", b"d", b""),
                req(op::DELETE, b"", b"d", b""),
                req(op::DELETEQ, b"", b"dq", b""),
                req(op::DELETEQ, b"", b"dq", b""),
                get(op::GET, b"d"),
            ]],
        ),
        (
            "incr decr",
            vec![
                vec![
                    arith(op::INCREMENT, b"n", 1, 42, 0),
                    arith(op::INCREMENT, b"n", 10, 42, 0),
                    arith(op::DECREMENT, b"n", 100, 0, 0),
                    arith(op::INCREMENTQ, b"n", 99, 0, 0),
                    arith(op::DECREMENTQ, b"n", 1, 0, 0),
                    get(op::GET, b"n"),
                    arith(op::INCREMENT, b"nocreate", 1, 5, 0xffff_ffff),
                    arith(op::DECREMENT, b"nocreate", 1, 5, 0xffff_ffff),
                    arith(op::INCREMENTQ, b"nocreate", 1, 5, 0xffff_ffff),
                    arith(op::DECREMENT, b"created", 1, 7, 100),
                    set(op::SET, b"nn", b"abc", 0, 0),
                    arith(op::INCREMENT, b"nn", 1, 0, 0),
                    arith(op::DECREMENTQ, b"nn", 1, 0, 0),
                    set(op::SET, b"empty", b"", 0, 0),
                    arith(op::INCREMENT, b"empty", 1, 0, 0),
                    set(op::SET, b"big", b"18446744073709551615", 0, 0),
                    arith(op::INCREMENT, b"big", 2, 0, 0),
                    set(op::SET, b"grow", b"99", 0, 0),
                    arith(op::INCREMENT, b"grow", 1, 0, 0),
                    get(op::GET, b"grow"),
                ],
                vec![
                    // In a batch of its own: memcached rewrites a number in place (padded
                    // with spaces) only while no unsent reply still holds the item.
                    arith(op::DECREMENT, b"grow", 95, 0, 0),
                    get(op::GET, b"grow"),
                ],
            ],
        ),
        (
            "touch gat gatk gatq gatkq",
            vec![vec![
                set(op::SET, b"t", b"tv", 3, 0),
                touch(op::TOUCH, b"t", 100),
                touch(op::GAT, b"t", 100),
                touch(op::GATK, b"t", 100),
                touch(op::GATQ, b"t", 100),
                touch(op::GATKQ, b"t", 100),
                touch(op::TOUCH, b"nt", 100),
                touch(op::GAT, b"nt", 100),
                touch(op::GATK, b"nt", 100),
                touch(op::GATQ, b"nt", 100),
                touch(op::GATKQ, b"nt", 100),
                // An absolute time in 1970: expired at once.
                touch(op::GAT, b"t", 2_592_001),
                get(op::GET, b"t"),
            ]],
        ),
        (
            "expiration",
            vec![vec![
                set(op::SET, b"e1", b"x", 0, 2_592_001),
                set(op::SET, b"e2", b"x", 0, 0xffff_ffff),
                set(op::SET, b"e3", b"x", 0, 1000),
                get(op::GET, b"e1"),
                get(op::GET, b"e2"),
                get(op::GET, b"e3"),
            ]],
        ),
        (
            "version noop quit",
            vec![
                vec![simple(op::VERSION), simple(op::NOOP)],
                vec![simple(op::QUIT)],
            ],
        ),
        ("quitq", vec![vec![simple(op::QUITQ)]]),
        (
            "flush",
            vec![vec![
                set(op::SET, b"f", b"x", 0, 0),
                simple(op::FLUSH),
                get(op::GET, b"f"),
                set(op::SET, b"f", b"x", 0, 0),
                simple(op::FLUSHQ),
                get(op::GET, b"f"),
                set(op::SET, b"f", b"x", 0, 0),
                req(op::FLUSH, &0u32.to_be_bytes(), b"", b""),
                get(op::GET, b"f"),
                set(op::SET, b"f", b"x", 0, 0),
                req(op::FLUSHQ, &1000u32.to_be_bytes(), b"", b""),
                get(op::GET, b"f"),
                simple(op::FLUSH),
            ]],
        ),
        (
            "sasl without -S",
            vec![vec![
                simple(op::SASL_LIST_MECHS),
                req(op::SASL_AUTH, b"", b"PLAIN", b"\0user\0pass"),
                req(op::SASL_STEP, b"", b"PLAIN", b""),
                req(op::SASL_STEP, b"", b"PLAIN", b"xyz"),
                simple(op::NOOP),
            ]],
        ),
        (
            "opaque is echoed",
            vec![vec![
                get(op::GET, b"a").opaque(0xffff_ffff),
                get(op::GETK, b"zz").opaque(0),
                simple(op::NOOP).opaque(0x1234_5678),
            ]],
        ),
    ];
    for (name, batches) in &cases {
        p.assert_same(name, batches);
    }
}

#[test]
fn cas_matches_memcached() {
    // And under -C, where memcached shows cas 0, stores ignore the request's cas, and
    // delete and arithmetic compare it with 0.
    for extra in [&[][..], &["-C"][..]] {
        let mut p = Pair::start_with(extra);
        p.assert_same(
            if extra.is_empty() {
                "cas"
            } else {
                "cas under -C"
            },
            &[
                vec![set(op::SET, b"k", b"v1", 0, 0)],
                vec![
                    set(op::SET, b"k", b"v2", 0, 0).cas(Cas::Seen(usize::MAX)),
                    set(op::SET, b"k", b"v3", 0, 0).cas(Cas::Seen(0)),
                    set(op::SETQ, b"k", b"v3", 0, 0).cas(Cas::Seen(0)),
                    set(op::ADD, b"k", b"v3", 0, 0).cas(Cas::Seen(0)),
                    set(op::REPLACE, b"k", b"v3", 0, 0).cas(Cas::Seen(usize::MAX)),
                    set(op::SET, b"nokey", b"v", 0, 0).cas(Cas::Lit(12345)),
                    set(op::ADD, b"nokey", b"v", 0, 0).cas(Cas::Lit(12345)),
                    get(op::GETK, b"k"),
                ],
                vec![
                    req(op::APPEND, b"", b"k", b"+").cas(Cas::Seen(0)),
                    req(op::APPEND, b"", b"k", b"+").cas(Cas::Seen(usize::MAX)),
                    req(op::PREPENDQ, b"", b"k", b"-").cas(Cas::Lit(999_999)),
                    req(op::APPEND, b"", b"nokey", b"+").cas(Cas::Lit(5)),
                    get(op::GET, b"k"),
                ],
                vec![
                    set(op::SET, b"num", b"5", 0, 0),
                    arith(op::INCREMENT, b"num", 1, 0, 0).cas(Cas::Seen(0)),
                    arith(op::INCREMENT, b"num", 1, 0, 0).cas(Cas::Lit(999_999)),
                    set(op::SET, b"empty", b"", 0, 0),
                    arith(op::INCREMENT, b"empty", 1, 0, 0).cas(Cas::Lit(999_999)),
                    set(op::SET, b"alpha", b"x", 0, 0),
                    arith(op::INCREMENT, b"alpha", 1, 0, 0).cas(Cas::Lit(999_999)),
                ],
                vec![
                    arith(op::INCREMENT, b"num", 1, 0, 0).cas(Cas::Seen(usize::MAX)),
                    req(op::DELETE, b"", b"num", b"").cas(Cas::Lit(999_999)),
                    req(op::DELETEQ, b"", b"num", b"").cas(Cas::Seen(usize::MAX)),
                    req(op::DELETE, b"", b"num", b"").cas(Cas::Lit(999_999)),
                    get(op::GET, b"num"),
                ],
            ],
        );
    }
}

#[test]
fn oversized_values_are_refused_and_swallowed() {
    let mut p = Pair::start();
    let limit = 1024 * 1024;
    // memcached's rule: 48 + key + 1 + value + 2 + 8 <= 1 MiB for flags 0.
    let fits = vec![b'f'; limit - 48 - 2 - 2 - 8];
    let too_big = vec![b'x'; fits.len() + 1];
    p.assert_same(
        "oversized",
        &[
            vec![
                set(op::SET, b"o", b"small", 0, 0),
                set(op::SET, b"o", &too_big, 0, 0),
                get(op::GET, b"o"),
            ],
            vec![set(op::SET, b"o", &fits, 0, 0), get(op::GETK, b"o")],
            vec![set(op::SET, b"o", &fits, 1, 0), get(op::GET, b"o")],
            vec![
                set(op::SETQ, b"q", &too_big, 0, 0),
                set(op::ADD, b"q", &too_big, 0, 0),
                set(op::REPLACEQ, b"q", &too_big, 0, 0),
                req(op::APPEND, b"", b"o", &too_big),
                req(op::PREPENDQ, b"", b"o", &too_big),
                get(op::GET, b"q"),
            ],
            vec![
                set(op::SET, b"o", b"abc", 0, 0),
                req(op::APPEND, b"", b"o", &fits),
                get(op::GET, b"o"),
            ],
            vec![
                set(op::SET, &[b'k'; 250], b"longkey", 0, 0),
                get(op::GETK, &[b'k'; 250]),
            ],
        ],
    );
}

#[test]
fn invalid_headers_match_memcached() {
    let mut p = Pair::start();
    let bad_magic = header_bytes(op::GET, 0, 0, 0, 0x81);
    let cases: Vec<(&str, Vec<Req>)> = vec![
        (
            "bad magic after noop",
            vec![simple(op::NOOP), raw(bad_magic.clone())],
        ),
        (
            "bad magic after get miss",
            vec![get(op::GET, b"zz"), raw(bad_magic.clone())],
        ),
        (
            "bad magic after getk miss",
            vec![get(op::GETK, b"zz"), raw(bad_magic.clone())],
        ),
        (
            "bad magic after set",
            vec![set(op::SET, b"a", b"v", 0, 0), raw(bad_magic.clone())],
        ),
        (
            "bad magic after error",
            vec![set(op::ADD, b"a", b"v", 0, 0), raw(bad_magic.clone())],
        ),
        (
            "bad magic after quiet error",
            vec![req(op::DELETEQ, b"", b"zz", b""), raw(bad_magic.clone())],
        ),
        ("key longer than 250", vec![get(op::GET, &[b'k'; 251])]),
        (
            "quiet key longer than 250",
            vec![get(op::GETQ, &[b'k'; 300])],
        ),
        (
            "key longer than body",
            vec![raw(
                [header_bytes(op::GET, 3, 0, 1, 0x80), b"abc".to_vec()].concat()
            )],
        ),
        (
            "extras and key longer than body",
            vec![raw(
                [header_bytes(op::SET, 1, 8, 8, 0x80), vec![0; 9]].concat()
            )],
        ),
        ("get with extras", vec![req(op::GET, b"1234", b"abc", b"")]),
        ("get with value", vec![req(op::GET, b"", b"abc", b"v")]),
        ("get without key", vec![get(op::GET, b"")]),
        ("set without extras", vec![req(op::SET, b"", b"k", b"v")]),
        ("set with 4 extras", vec![req(op::SET, b"1234", b"k", b"v")]),
        ("set without key", vec![set(op::SET, b"", b"v", 0, 0)]),
        (
            "append with extras",
            vec![req(op::APPEND, b"1234", b"k", b"v")],
        ),
        (
            "delete with extras",
            vec![req(op::DELETE, b"1234", b"k", b"")],
        ),
        ("delete with value", vec![req(op::DELETE, b"", b"k", b"v")]),
        (
            "incr short extras",
            vec![req(op::INCREMENT, &[0; 16], b"k", b"")],
        ),
        (
            "incr with value",
            vec![req(op::INCREMENT, &[0; 20], b"k", b"v")],
        ),
        ("touch without extras", vec![req(op::TOUCH, b"", b"k", b"")]),
        ("gat without key", vec![touch(op::GAT, b"", 0)]),
        ("version with body", vec![req(op::VERSION, b"", b"", b"x")]),
        ("noop with key", vec![req(op::NOOP, b"", b"k", b"")]),
        ("quit with extras", vec![req(op::QUIT, b"1234", b"", b"")]),
        (
            "flush with 3 extras",
            vec![req(op::FLUSH, b"123", b"", b"")],
        ),
        ("flush with key", vec![req(op::FLUSH, b"", b"k", b"")]),
        ("stat with extras", vec![req(op::STAT, b"1234", b"", b"")]),
        (
            "sasl list with body",
            vec![req(op::SASL_LIST_MECHS, b"", b"", b"x")],
        ),
        (
            "sasl auth without key",
            vec![req(op::SASL_AUTH, b"", b"", b"x")],
        ),
        // Bytes past the key of a command that takes no value are the next request.
        (
            "touch with trailing body",
            vec![raw([
                header_bytes(op::TOUCH, 1, 4, 5 + 24, 0x80),
                vec![0, 0, 0, 0, b'a'],
                header_bytes(op::NOOP, 0, 0, 0, 0x80),
            ]
            .concat())],
        ),
        (
            "stat with trailing body",
            vec![raw([
                header_bytes(op::STAT, 0, 0, 24, 0x80),
                header_bytes(op::VERSION, 0, 0, 0, 0x80),
            ]
            .concat())],
        ),
        (
            "unknown opcode with body",
            vec![req(0x50, b"", b"", b"abcdef"), simple(op::NOOP)],
        ),
        (
            "verbosity is unknown",
            vec![req(0x1b, &[0, 0, 0, 1], b"", b""), simple(op::NOOP)],
        ),
    ];
    for (name, batch) in &cases {
        p.assert_same(name, &[vec![set(op::SET, b"a", b"v", 0, 0)], batch.clone()]);
    }
}

#[test]
fn every_opcode_byte_with_empty_body() {
    let mut p = Pair::start();
    for opcode in 0..=255u8 {
        if opcode == op::STAT {
            continue; // covered by stats_names_match_memcached
        }
        p.assert_same(&format!("opcode {opcode:#04x}"), &[vec![simple(opcode)]]);
    }
}

#[test]
fn stats_names_match_memcached() {
    let mut p = Pair::start();
    let groups: &[&[u8]] = &[
        b"",
        b"settings",
        b"items",
        b"sizes",
        b"detail dump",
        b"detail on",
        b"detail off",
        b"detail bogus",
        b"reset",
        b"conns",
        b"bogus",
    ];
    for group in groups {
        p.assert_same(
            &format!("stat {}", escape(group)),
            &[vec![
                set(op::SET, b"s", b"v", 0, 0),
                get(op::GET, b"s"),
                req(op::STAT, b"", group, b""),
            ]],
        );
    }
}

#[test]
fn requests_split_at_any_byte() {
    let mut p = Pair::start();
    let mut rng = Rng::new(7);
    let batch = vec![
        set(op::SET, b"split", b"value", 1, 0),
        get(op::GETK, b"split"),
        arith(op::INCREMENT, b"cnt", 1, 1, 0),
        touch(op::GATQ, b"split", 0),
        set(op::SET, b"huge", &vec![b'h'; 2 << 20], 0, 0),
        req(op::APPEND, b"", b"split", b"!"),
        get(op::GET, b"split"),
    ];
    for round in 0..5 {
        if let Some(f) = p.check(
            &format!("split round {round}"),
            std::slice::from_ref(&batch),
            Some(&mut rng),
        ) {
            panic!("{f}");
        }
    }
}

// ---- random differential -------------------------------------------------------------

const KEYS: &[&[u8]] = &[b"a", b"b", b"num", b"k:1", b"empty"];

fn random_value(rng: &mut Rng) -> Vec<u8> {
    match rng.below(5) {
        0 => Vec::new(),
        1 => rng.below(1000).to_string().into_bytes(),
        2 => (u64::MAX / 2).to_string().into_bytes(),
        3 => vec![b'v'; rng.range_usize(1, 40)],
        _ => b"12abc".to_vec(),
    }
}

fn random_cas(rng: &mut Rng) -> Cas {
    match rng.below(6) {
        0 => Cas::Seen(usize::MAX),
        1 => Cas::Seen(rng.below(4) as usize),
        2 => Cas::Lit(rng.range(1, 1_000_000)),
        _ => Cas::Lit(0),
    }
}

fn random_request(rng: &mut Rng) -> Req {
    let key = *rng.pick(KEYS);
    let exptime = *rng.pick(&[0u32, 0, 100, 2_592_001, 0xffff_ffff]);
    let opcode = *rng.pick(&[
        op::GET,
        op::GETQ,
        op::GETK,
        op::GETKQ,
        op::SET,
        op::SETQ,
        op::ADD,
        op::ADDQ,
        op::REPLACE,
        op::REPLACEQ,
        op::APPEND,
        op::APPENDQ,
        op::PREPEND,
        op::PREPENDQ,
        op::DELETE,
        op::DELETEQ,
        op::INCREMENT,
        op::INCREMENTQ,
        op::DECREMENT,
        op::DECREMENTQ,
        op::TOUCH,
        op::GAT,
        op::GATQ,
        op::GATK,
        op::GATKQ,
        op::NOOP,
        op::VERSION,
        op::FLUSH,
        op::FLUSHQ,
        op::SASL_LIST_MECHS,
        op::SASL_AUTH,
        0x1b,
        0x42,
        0xff,
    ]);
    let r = match opcode {
        op::GET | op::GETQ | op::GETK | op::GETKQ => get(opcode, key),
        op::SET | op::SETQ | op::ADD | op::ADDQ | op::REPLACE | op::REPLACEQ => set(
            opcode,
            key,
            &random_value(rng),
            rng.below(3) as u32,
            exptime,
        ),
        op::APPEND | op::APPENDQ | op::PREPEND | op::PREPENDQ => {
            req(opcode, b"", key, &random_value(rng))
        }
        op::DELETE | op::DELETEQ => get(opcode, key),
        // Never a result with fewer digits: memcached pads such a result in place only
        // while no unsent reply holds the item (see the module doc), so pipelined gets
        // would make the stored bytes differ. The scripted tests cover shrinking.
        op::INCREMENT | op::INCREMENTQ => arith(
            opcode,
            key,
            *rng.pick(&[0, 1, 7, 1 << 40]),
            rng.below(100),
            *rng.pick(&[0, 100, 0xffff_ffff]),
        ),
        op::DECREMENT | op::DECREMENTQ => arith(
            opcode,
            key,
            0,
            rng.below(100),
            *rng.pick(&[0, 100, 0xffff_ffff]),
        ),
        op::TOUCH | op::GAT | op::GATQ | op::GATK | op::GATKQ => touch(opcode, key, exptime),
        op::FLUSH | op::FLUSHQ if rng.chance(0.5) => req(opcode, &0u32.to_be_bytes(), b"", b""),
        op::SASL_AUTH => req(opcode, b"", b"PLAIN", b"\0u\0p"),
        // Unknown opcodes swallow `body` bytes after extras and key: keep those empty.
        _ => req(opcode, b"", b"", &random_value(rng)),
    };
    let r = r.cas(random_cas(rng)).opaque(rng.next_u64() as u32);
    let known = !matches!(opcode, 0x1b | 0x42 | 0xff);
    if known && rng.chance(0.02) {
        // A malformed one now and then: wrong extras for its opcode (closes). Not for
        // unknown opcodes, whose swallowing would then eat into the barrier and stall.
        let mut bad = r;
        bad.extras.push(0);
        return bad;
    }
    r
}

#[test]
fn random_binary_streams_match_memcached() {
    let base = common::env_u64("FERRO_BINARY_SEED", 0xb1_4a77);
    let streams = common::env_u64("FERRO_BINARY_STREAMS", 300);
    random_binary_streams(base, streams, &[]);
}

/// The random streams with `-C` on both servers: every cas in a response is 0, stores
/// ignore the request's cas, and delete and arithmetic compare it with 0.
///
/// These streams never flush (a FLUSH that would becomes a DELETE of every key; see
/// [`without_flush`]): under `-C` whether an item survives a flush depends on where each
/// server's own clock ticks, which on a busy machine differs between the servers.
#[test]
fn random_binary_streams_without_cas() {
    let base = common::env_u64("FERRO_BINARY_SEED", 0xb1_4a77);
    let streams = common::env_u64("FERRO_BINARY_STREAMS", 150);
    random_binary_streams(base ^ 0xc0c0, streams, &["-C"]);
}

/// The random streams with every GET/GETK/GAT value of at least one byte sent in place
/// from the store (pinned, with a vectored send; see `src/splice.rs`), so that pins meet
/// quiet gets, in-place incr/decr and overwrites, append and bad packets in one batch.
#[test]
fn random_binary_streams_every_value_in_place() {
    let base = common::env_u64("FERRO_BINARY_SEED", 0xb1_4a77);
    let streams = common::env_u64("FERRO_BINARY_STREAMS", 150);
    random_binary_streams(base, streams, &["--zero-copy-min", "1"]);
}

/// A large value sent in place, and a bad magic byte right behind it, which makes
/// memcached drop what it had not flushed and close: the pinned value goes with it.
#[test]
fn large_values_in_place_match_memcached() {
    let big: Vec<u8> = (0..300_000u32).map(|i| b'a' + (i % 23) as u8).collect();
    let mut bad_magic = Vec::new();
    write_request(&mut bad_magic, op::GET, b"", b"big", b"", 0, 0);
    bad_magic[0] = 0x81;
    for extra in [&[][..], &["--zero-copy-min", "1"][..]] {
        let mut p = Pair::start_with(extra);
        p.assert_same(
            &format!("large values {extra:?}"),
            &[
                vec![
                    set(op::SET, b"big", &big, 3, 0),
                    set(op::SET, b"small", b"tiny", 4, 0),
                    get(op::GET, b"big"),
                    get(op::GETK, b"big"),
                    get(op::GETQ, b"small"),
                    get(op::GETKQ, b"big"),
                ],
                vec![
                    get(op::GETK, b"big"),
                    get(op::GET, b"big"),
                    raw(bad_magic.clone()),
                ],
            ],
        );
    }
}

/// Whether memcached 1.6.18 flushes on `r`: a FLUSH or FLUSHQ with no key, no value and
/// 0 or 4 bytes of extras (anything else is a protocol error, and the connection closes).
fn flushes(r: &Req) -> bool {
    r.raw.is_none()
        && matches!(r.opcode, op::FLUSH | op::FLUSHQ)
        && r.key.is_empty()
        && r.value.is_empty()
        && matches!(r.extras.len(), 0 | 4)
}

/// `r`, or for a FLUSH or FLUSHQ that flushes, a DELETE (DELETEQ) of every key in [`KEYS`]
/// with its opaque: the flush of the `-C` streams.
///
/// Under `-C` memcached has no cas to tell items stored before a flush from later ones,
/// so a FLUSH, like `flush_all`, sets `oldest_live` to the current second and nothing
/// else: an item stored after it in the same second is flushed too, until the server's
/// clock ticks (ferrocache does the same), and so is one stored by a later stream. The
/// clock ticks once a second, in each server at its own moment, and on a busy machine a
/// store after a flush lands after a tick in one server and before it in the other; a
/// later GET then hits in one and misses in the other. That is the clock, not a
/// difference between the servers (with cas both flush by cas: no clock involved).
/// Deleting every key empties the cache just as well (the random streams use no other
/// key) without a clock. A FLUSH that does not flush (bad extras, a key or a value) stays:
/// it closes the connection in both servers alike. The replacement draws nothing from the
/// stream's generator, so the requests around it are those of the same seed with cas.
fn without_flush(r: Req) -> Vec<Req> {
    if !flushes(&r) {
        return vec![r];
    }
    let opcode = if r.opcode == op::FLUSHQ {
        op::DELETEQ
    } else {
        op::DELETE
    };
    KEYS.iter()
        .map(|key| get(opcode, key).opaque(r.opaque))
        .collect()
}

fn random_binary_streams(base: u64, streams: u64, extra: &[&str]) {
    let mut p = Pair::start_with(extra);
    let mut failures = Vec::new();
    let clock_free = extra.contains(&"-C");
    for i in 0..streams {
        let seed = base + i;
        let mut rng = Rng::new(seed);
        let batches: Vec<Vec<Req>> = (0..rng.range_usize(1, 5))
            .map(|_| {
                let batch = (0..rng.range_usize(1, 9)).map(|_| random_request(&mut rng));
                if clock_free {
                    batch.flat_map(without_flush).collect()
                } else {
                    batch.collect()
                }
            })
            .collect();
        let split = rng.chance(0.2);
        let mut split_rng = Rng::new(seed ^ 0x5eed);
        let name = format!("stream seed {seed}");
        if let Some(f) = p.check(&name, &batches, split.then_some(&mut split_rng)) {
            failures.push(format!(
                "{f}\nreplay: FERRO_BINARY_SEED={seed} FERRO_BINARY_STREAMS=1"
            ));
            if failures.len() >= 3 {
                break;
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
