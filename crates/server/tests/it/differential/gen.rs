//! Random memcached text-protocol command streams for the differential test.
//!
//! A stream is a list of steps; a step is one to four commands written together, after
//! which the runner sends the `mn` barrier. The generator favours a small key set, so
//! commands hit each other's items, and it mixes in the edges memcached is picky about:
//! bad tokens, 250/251-byte keys, noreply, CRLF inside values, bare `\n` line endings, NUL
//! bytes, values at the item size limit, incr/decr on odd values.
//!
//! Two rules keep every stream in sync with the barrier on both servers, whatever they
//! reply:
//! - a data block is never shorter than its declared length (the server would read our
//!   barrier as data and wait for more);
//! - a line the server may reject keeps its data block short and made of `qwxyz`, digits and
//!   spaces, so when that data is read as a command line it is a short unknown command, not
//!   a storage command that eats the barrier or a line so long memcached drops the
//!   connection. Values never contain upper case, so never `MN\r\n`.

use std::collections::HashMap;

use crate::common::Rng;

/// memcached's default `-I` (item size max).
pub const ITEM_SIZE_MAX: usize = 1024 * 1024;

/// The largest value memcached 1.6 stores with default settings, for a key length and
/// whether flags are non-zero: item header 48 + key + NUL + flags (4 if non-zero) +
/// data + CRLF + CAS 8 must fit in `ITEM_SIZE_MAX`.
pub fn max_value_len(key_len: usize, flags_nonzero: bool) -> usize {
    ITEM_SIZE_MAX - 48 - (key_len + 1) - if flags_nonzero { 4 } else { 0 } - 2 - 8
}

/// The CAS unique used when a stream asks for "the last CAS seen" of a key that no `gets`
/// has shown yet; far above any CAS a test server reaches.
const UNSEEN_CAS: u64 = 987_654_321_987;

/// One piece of a request.
#[derive(Clone, Debug)]
pub enum Part {
    Bytes(Vec<u8>),
    /// Rendered per server: the last CAS unique that server returned for `key`, or
    /// [`UNSEEN_CAS`]. Each server numbers its own items, so the number itself cannot be
    /// in the stream.
    LastCas(Vec<u8>),
}

/// Commands written together, followed by the barrier.
#[derive(Clone, Debug, Default)]
pub struct Step {
    pub parts: Vec<Part>,
    /// Must reach the server in one piece: a get/gets/gat/gats with a key over 250 bytes
    /// makes memcached drop every reply it has not sent yet (`conn_release_items`), and a
    /// get-family command is the only thing that sends replies in the middle of a read. So
    /// which earlier replies of the step survive depends on how the server's reads split
    /// the step; written at once (and small), the step is read at once.
    pub whole: bool,
}

impl Step {
    pub fn from_bytes(bytes: &[u8]) -> Step {
        Step {
            parts: vec![Part::Bytes(bytes.to_vec())],
            whole: false,
        }
    }

    /// The bytes to send to a server that has shown these CAS uniques per key.
    pub fn render(&self, last_cas: &HashMap<Vec<u8>, u64>) -> Vec<u8> {
        let mut out = Vec::new();
        for part in &self.parts {
            match part {
                Part::Bytes(b) => out.extend_from_slice(b),
                Part::LastCas(key) => {
                    let cas = last_cas.get(key).copied().unwrap_or(UNSEEN_CAS);
                    out.extend_from_slice(cas.to_string().as_bytes());
                }
            }
        }
        out
    }

    /// The step's size so far (CAS tokens counted at their longest).
    fn len(&self) -> usize {
        self.parts
            .iter()
            .map(|p| match p {
                Part::Bytes(b) => b.len(),
                Part::LastCas(_) => 20,
            })
            .sum()
    }

    fn push(&mut self, bytes: &[u8]) {
        match self.parts.last_mut() {
            Some(Part::Bytes(last)) => last.extend_from_slice(bytes),
            _ => self.parts.push(Part::Bytes(bytes.to_vec())),
        }
    }
}

/// A random stream, reproducible from its seed.
pub fn stream(seed: u64, len: usize) -> Vec<Step> {
    stream_with(seed, len, true)
}

/// A random stream for servers under `-C`, which empties the cache by deleting every key
/// instead of with `flush_all`: there, whether an item stored after a `flush_all` survives
/// it depends on which side of a clock tick the store lands (see
/// [`Generator::clock_free`]), and each server has a clock of its own.
pub fn stream_without_flush_all(seed: u64, len: usize) -> Vec<Step> {
    stream_with(seed, len, false)
}

/// A random stream with short values only (under 40 bytes): for memcached over TLS,
/// which stalls on a request larger than one read of its buffer (`docs/protocol.md`).
pub fn stream_small_values(seed: u64, len: usize) -> Vec<Step> {
    stream_with_values(seed, len, true, true)
}

fn stream_with(seed: u64, len: usize, flush_all: bool) -> Vec<Step> {
    stream_with_values(seed, len, flush_all, false)
}

fn stream_with_values(seed: u64, len: usize, flush_all: bool, short_values: bool) -> Vec<Step> {
    let mut gen = Generator::new(seed);
    gen.clock_free = !flush_all;
    gen.short_values = short_values;
    let mut first = Step::default();
    if flush_all {
        first.push(b"flush_all\r\n");
    } else {
        gen.delete_every_key(&mut first);
    }
    let mut steps = vec![first];
    while steps.len() < len {
        let commands = match gen.rng.weighted(&[70, 15, 10, 5]) {
            0 => 1,
            1 => 2,
            2 => 3,
            _ => 4,
        };
        let mut step = Step::default();
        for i in 0..commands {
            gen.command(&mut step, i == 0);
        }
        steps.push(step);
    }
    steps
}

/// Printable bytes for values: no upper case (so never `MN`), and no letters that spell a
/// command when a rejected line's data block is read as a command line.
const VALUE_ALPHABET: &[u8] = b"qwxyz0123456789 ";

const EXPTIMES_ODD: &[&str] = &[
    "-1",          // expires at once
    "1000",        // relative, outlives the test
    "2592000",     // 30 days: still relative
    "2592001",     // absolute, in 1970: expires at once
    "2000000000",  // absolute, in 2033
    "4294967296",  // does not fit
    "abc",         // not a number
    "-2147483649", // below i32
];

const FLAGS_ODD: &[&str] = &[
    "4294967295",
    "4294967296",
    "-1",
    "abc",
    "99999999999999999999",
    "1a",
    "-0",
    "00",
];

/// No stream stores a number in [2^63, 2^64) for `incr`/`decr` to read: for those,
/// memcached 1.6.18's `safe_strtoull` (util.c) looks for a `-` with `strchr(str, '-')`
/// over the item's data, which is not NUL-terminated, so it reads on past the value's
/// CRLF into whatever the slab chunk held before and the next chunk's header (heap
/// pointers, placed by ASLR) up to the first NUL byte. Its answer, the number or
/// `CLIENT_ERROR cannot increment or decrement non-numeric value`, then depends on that
/// memory (1-2% of runs once the chunk was used before). So: these values, random ones
/// below 2^62, and `incr` deltas below 2^30 (no sum of them reaches 2^63). Numbers from
/// 2^63 up, and the wrap at 2^64, are checked on ferrocache alone (`wire.rs`) and in
/// `EDGE_CASES`, where the bytes after the value are never written. Values over u64
/// stay: `strtoull` refuses them (ERANGE) before the `strchr`.
const NUMERIC_VALUES: &[&str] = &[
    "0",
    "1",
    "9",
    "10",
    "99",
    "100",
    "12345",
    "4294967296",
    "4611686018427387903",
    "18446744073709551616",
    "99999999999999999999",
    " 5",
    "5 ",
    "12 qx",
    "-0",
    "-1",
    "007",
    "1x",
    "",
];

const DELTAS_ODD: &[&str] = &[
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999",
    "-1",
    "abc",
    "+1",
    "0x10",
    "1.5",
];

struct Generator {
    rng: Rng,
    keys: Vec<Vec<u8>>,
    /// No `flush_all` that flushes: each is replaced by a `delete` of every key.
    ///
    /// Under `-C` memcached cannot tell the items stored before a `flush_all` from those
    /// stored after it in the same second (it has no cas to tell them apart by), so it
    /// flushes both: an item stored after a `flush_all` is gone until the server's clock
    /// has ticked once, and readable after that (ferrocache does the same; see
    /// docs/protocol.md). The clock ticks once a second, in each server at its own moment,
    /// and a step takes microseconds on a quiet machine but can take many milliseconds on
    /// a busy one; a `set` after a `flush_all` then lands after a tick in one server and
    /// before it in the other, and a later `get`, `touch` or `delete` differs (`DELETED`
    /// against `NOT_FOUND`). That is the clock, not a difference between the servers; the
    /// rule itself is checked deterministically in `flush_all_without_cas_by_the_clock`.
    /// (With cas, both servers flush by cas within the flush's second: no clock involved.)
    clock_free: bool,
    /// Short values only, so that every step fits one TLS record and memcached's read
    /// buffer ([`stream_small_values`]).
    short_values: bool,
}

impl Generator {
    fn new(seed: u64) -> Generator {
        let mut keys: Vec<Vec<u8>> = (0..6).map(|i| format!("k{i}").into_bytes()).collect();
        keys.push(vec![b'l'; 250]); // the longest valid key
        keys.push(b"c\x01\t\x7fz".to_vec()); // control characters are legal in keys
        Generator {
            rng: Rng::new(seed),
            keys,
            clock_free: false,
            short_values: false,
        }
    }

    /// A `delete` of every key in the pool: the `flush_all` of [`Generator::clock_free`]
    /// streams (the 251-byte key is never stored, so the pool is everything there is).
    fn delete_every_key(&mut self, step: &mut Step) {
        for key in self.keys.clone() {
            self.line(step, vec![bytes("delete"), Part::Bytes(key)]);
        }
    }

    /// Appends one random command. incr/decr only open a step: memcached rewrites a number
    /// in place (padding it with spaces) only when nothing else holds the item, and a `get`
    /// earlier in the same read holds it until its reply is sent, so whether the number is
    /// padded would depend on where the server's reads happen to split the step.
    fn command(&mut self, step: &mut Step, first_in_step: bool) {
        let arithmetic = if first_in_step { 10 } else { 0 };
        match self
            .rng
            .weighted(&[40, 25, 7, arithmetic, 4, 1, 1, 8, 1, 1])
        {
            0 => self.storage(step),
            1 => self.retrieval(step, first_in_step),
            2 => self.delete(step),
            3 => self.arithmetic(step),
            4 => self.touch(step),
            5 => self.verbosity(step),
            6 => self.flush_all(step),
            7 => self.malformed(step),
            8 if self.short_values => self.storage(step),
            8 => self.sized_set(step),
            _ => self.null_byte(step),
        }
    }

    /// One of `items` (for slices of `&str` and `&[u8]`).
    fn one_of<T: Copy>(&mut self, items: &[T]) -> T {
        *self.rng.pick(items)
    }

    /// A pool key, or now and then a key one byte too long.
    fn key(&mut self) -> Vec<u8> {
        if self.rng.chance(0.03) {
            vec![b'k'; 251]
        } else {
            self.rng.pick(&self.keys).clone()
        }
    }

    /// Joins tokens into a command line, with the occasional extra space and bare `\n`.
    fn line(&mut self, step: &mut Step, tokens: Vec<Part>) {
        if self.rng.chance(0.03) {
            step.push(b" ");
        }
        for (i, token) in tokens.into_iter().enumerate() {
            if i > 0 {
                step.push(if self.rng.chance(0.05) { b"  " } else { b" " });
            }
            match token {
                Part::Bytes(b) => step.push(&b),
                cas => step.parts.push(cas),
            }
        }
        if self.rng.chance(0.03) {
            step.push(b" ");
        }
        step.push(if self.rng.chance(0.1) { b"\n" } else { b"\r\n" });
    }

    fn text(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| *self.rng.pick(VALUE_ALPHABET)).collect()
    }

    /// A value: often numeric (for incr/decr), short, medium, with CRLF inside, or large.
    /// Never blanks only (spaces, CR, LF): memcached's `incr`/`decr` reads a value with
    /// C `strtoull`, which skips all of them, the value's own CRLF too, and goes on to
    /// parse whatever bytes the slab chunk holds after it. (No concatenation of these
    /// makes a blank value either: every one is empty or has a non-blank byte.)
    fn value(&mut self, short_only: bool) -> Vec<u8> {
        let mut value = self.value_any(short_only || self.short_values);
        if value.iter().all(|b| matches!(b, b' ' | b'\r' | b'\n')) && !value.is_empty() {
            value.push(b'q');
        }
        value
    }

    fn value_any(&mut self, short_only: bool) -> Vec<u8> {
        let kinds: &[u32] = if short_only {
            &[35, 50, 0, 5, 0]
        } else {
            &[35, 45, 12, 5, 1]
        };
        match self.rng.weighted(kinds) {
            0 => {
                if self.rng.chance(0.8) {
                    self.rng.pick(NUMERIC_VALUES).as_bytes().to_vec()
                } else if self.rng.chance(0.5) {
                    self.rng.below(1000).to_string().into_bytes()
                } else {
                    (self.rng.next_u64() >> 2).to_string().into_bytes()
                }
            }
            1 => {
                let len = self.rng.range_usize(0, 40);
                self.text(len)
            }
            2 => {
                let len = self.rng.range_usize(40, 3000);
                self.text(len)
            }
            3 => {
                let mut v = Vec::new();
                for i in 0..self.rng.range_usize(1, 3) {
                    if i > 0 || self.rng.chance(0.3) {
                        v.extend_from_slice(b"\r\n");
                    }
                    let len = self.rng.range_usize(0, 10);
                    v.extend(self.text(len));
                }
                v
            }
            _ => {
                let len = self.rng.range_usize(100_000, 700_000);
                self.text(len)
            }
        }
    }

    fn exptime(&mut self) -> (String, bool) {
        if self.rng.chance(0.85) {
            ("0".into(), false)
        } else {
            let t = *self.rng.pick(EXPTIMES_ODD);
            (t.into(), t.parse::<i32>().is_err())
        }
    }

    fn noreply(&mut self, tokens: &mut Vec<Part>) -> bool {
        match self.rng.weighted(&[72, 23, 3, 2]) {
            0 => false,
            1 => {
                tokens.push(bytes("noreply"));
                false
            }
            2 => {
                tokens.push(bytes("junk"));
                false
            }
            _ => {
                tokens.push(bytes("noreply"));
                tokens.push(bytes("extra"));
                true
            }
        }
    }

    /// set/add/replace/append/prepend/cas with mostly good and sometimes bad tokens.
    fn storage(&mut self, step: &mut Step) {
        let command = *self.rng.pick(&[
            "set", "set", "set", "add", "replace", "append", "prepend", "cas", "cas",
        ]);
        let key = self.key();
        // `risky`: the server may reject the line and then read the data block as a line.
        let mut risky = key.len() > 250;
        let flags = match self.rng.weighted(&[80, 8, 4, 8]) {
            0 => "0".to_string(),
            1 => self.rng.range(1, 65535).to_string(),
            2 => u64::from(self.rng.next_u64() as u32).to_string(),
            _ => {
                risky = true;
                self.rng.pick(FLAGS_ODD).to_string()
            }
        };
        let (exptime, bad_exptime) = self.exptime();
        risky |= bad_exptime;
        // How the declared length relates to the data.
        let length_mode = self.rng.weighted(&[90, 4, 3, 3]);
        risky |= length_mode != 0;
        let mut tokens = vec![
            bytes(command),
            Part::Bytes(key.clone()),
            bytes(&flags),
            bytes(&exptime),
        ];
        let cas_mode = if command == "cas" {
            self.rng.weighted(&[70, 10, 10, 10])
        } else {
            0
        };
        risky |= cas_mode >= 2;
        // Decide the rest of the line before the value, so a risky line gets a short value.
        let mut tail = Vec::new();
        if command == "cas" {
            match cas_mode {
                0 => {
                    let for_key = if self.rng.chance(0.85) {
                        key.clone()
                    } else {
                        self.rng.pick(&self.keys).clone()
                    };
                    tail.push(Part::LastCas(for_key));
                }
                1 => tail.push(bytes(self.one_of(&[
                    "999999999",
                    "0",
                    "18446744073709551615",
                ]))),
                2 => tail.push(bytes(self.one_of(&["abc", "-1", "18446744073709551616"]))),
                _ => {} // missing: wrong token count
            }
        }
        risky |= self.noreply(&mut tail);
        let value = self.value(risky);
        match length_mode {
            0 => tokens.push(bytes(&value.len().to_string())),
            // Data longer than declared: "CLIENT_ERROR bad data chunk".
            1 => {
                let shorter = value.len().saturating_sub(self.rng.range_usize(1, 3));
                tokens.push(bytes(&shorter.to_string()));
            }
            2 => tokens.push(bytes("-1")),
            _ => tokens.push(bytes(self.one_of(&[
                "abc",
                "4294967296",
                "99999999999999999999",
                "2147483648",
            ]))),
        }
        tokens.extend(tail);
        self.line(step, tokens);
        step.push(&value);
        step.push(b"\r\n");
    }

    /// A `set` whose value is at the item size limit, one byte either side, or far over.
    fn sized_set(&mut self, step: &mut Step) {
        let key = self.rng.pick(&self.keys).clone();
        let flags_nonzero = self.rng.chance(0.5);
        let len = if self.rng.chance(0.75) {
            let max = max_value_len(key.len(), flags_nonzero);
            *self.rng.pick(&[max - 1, max, max + 1])
        } else {
            self.rng
                .range_usize(ITEM_SIZE_MAX + 1, ITEM_SIZE_MAX + 100_000)
        };
        let command = *self.rng.pick(&["set", "set", "add", "replace", "append"]);
        let mut tokens = vec![
            bytes(command),
            Part::Bytes(key),
            bytes(if flags_nonzero { "3" } else { "0" }),
            bytes("0"),
            bytes(&len.to_string()),
        ];
        if self.rng.chance(0.25) {
            tokens.push(bytes("noreply"));
        }
        self.line(step, tokens);
        let value = self.text(len);
        step.push(&value);
        step.push(b"\r\n");
    }

    /// get/gets/gat/gats with 1 to 30 keys (memcached tokenizes 24 at a time).
    fn retrieval(&mut self, step: &mut Step, first_in_step: bool) {
        let command = *self
            .rng
            .pick(&["get", "get", "gets", "gets", "gat", "gats"]);
        let touching = command.starts_with("gat");
        let mut tokens = vec![bytes(command)];
        if touching {
            let t = if self.rng.chance(0.7) {
                "0".to_string()
            } else {
                self.rng.pick(EXPTIMES_ODD).to_string()
            };
            tokens.push(bytes(&t));
        }
        let count = match self.rng.weighted(&[5, 55, 25, 15]) {
            0 => 0, // wrong token count
            1 => self.rng.range_usize(1, 3),
            2 => self.rng.range_usize(4, 10),
            _ => self.rng.range_usize(11, 30),
        };
        // memcached drops a connection whose unfinished line passes 2048 bytes, except for
        // get/gets; keep the others safely short so fragmentation cannot matter.
        let limit = if touching { 1800 } else { 8000 };
        let mut line_len = tokens.iter().map(part_len).sum::<usize>();
        // One key too long now and then, at a random place (not per key: with 30 keys that
        // would spoil most multi-gets).
        // After other commands only in a small step, which then must be written whole (see
        // `Step::whole`): memcached reads up to 16 KB at once.
        let bad_key_ok = first_in_step || step.len() < 4000;
        let bad_at = (bad_key_ok && self.rng.chance(0.06))
            .then(|| self.rng.below(count.max(1) as u64) as usize);
        if bad_at.is_some_and(|i| i < count) && !first_in_step {
            step.whole = true;
        }
        for i in 0..count {
            let key = if bad_at == Some(i) {
                vec![b'k'; 251]
            } else {
                self.rng.pick(&self.keys).clone()
            };
            if line_len + key.len() + 1 > limit {
                break;
            }
            line_len += key.len() + 1;
            tokens.push(Part::Bytes(key));
        }
        self.line(step, tokens);
    }

    fn delete(&mut self, step: &mut Step) {
        let key = Part::Bytes(self.key());
        let tokens = match self.rng.weighted(&[50, 15, 10, 5, 5, 5, 5, 5]) {
            0 => vec![bytes("delete"), key],
            1 => vec![bytes("delete"), key, bytes("noreply")],
            2 => vec![bytes("delete"), key, bytes("0")],
            3 => vec![bytes("delete"), key, bytes("0"), bytes("noreply")],
            4 => vec![bytes("delete"), key, bytes("1")],
            5 => vec![bytes("delete"), key, bytes("junk")],
            6 => vec![bytes("delete")],
            _ => vec![
                bytes("delete"),
                key,
                bytes("0"),
                bytes("noreply"),
                bytes("extra"),
            ],
        };
        self.line(step, tokens);
    }

    /// An `incr` never takes a stored number to 2^63 or more (see [`NUMERIC_VALUES`]); a
    /// `decr` may have any delta.
    fn arithmetic(&mut self, step: &mut Step) {
        let incr = self.rng.chance(0.5);
        let command = if incr { "incr" } else { "decr" };
        let mut tokens = vec![bytes(command), Part::Bytes(self.key())];
        match self.rng.weighted(&[60, 15, 20, 5]) {
            0 => tokens.push(bytes(&self.rng.below(200).to_string())),
            1 => {
                let delta = self.rng.next_u64();
                let delta = if incr { delta >> 34 } else { delta };
                tokens.push(bytes(&delta.to_string()));
            }
            2 => {
                let delta = self.one_of(DELTAS_ODD);
                // incr by u64::MAX takes 0 to u64::MAX.
                let delta = if incr && delta == "18446744073709551615" {
                    "4294967295"
                } else {
                    delta
                };
                tokens.push(bytes(delta));
            }
            _ => {} // missing delta
        }
        if self.rng.chance(0.2) {
            tokens.push(bytes("noreply"));
        }
        self.line(step, tokens);
    }

    fn touch(&mut self, step: &mut Step) {
        let mut tokens = vec![bytes("touch"), Part::Bytes(self.key())];
        if self.rng.chance(0.95) {
            let (t, _) = self.exptime();
            tokens.push(bytes(&t));
        }
        if self.rng.chance(0.2) {
            tokens.push(bytes("noreply"));
        }
        self.line(step, tokens);
    }

    fn verbosity(&mut self, step: &mut Step) {
        let line: &[u8] = self.one_of(&[
            &b"verbosity 0\r\n"[..],
            b"verbosity 1\r\n",
            b"verbosity 0 noreply\r\n",
            b"verbosity\r\n",
            b"verbosity abc\r\n",
            b"verbosity 0 0 0\r\n",
        ]);
        step.push(line);
    }

    /// flush_all without a delay only: a delay would make the test depend on the clock.
    /// In [`Generator::clock_free`] streams the lines that flush (all but the bad delay)
    /// become a `delete` of every key.
    fn flush_all(&mut self, step: &mut Step) {
        let line: &[u8] = self.one_of(&[
            &b"flush_all\r\n"[..],
            b"flush_all noreply\r\n",
            b"flush_all 0\r\n",
            b"flush_all 0 noreply\r\n",
            b"flush_all abc\r\n",
            b"flush_all 0 junk\r\n",
        ]);
        if self.clock_free && line != b"flush_all abc\r\n" {
            self.delete_every_key(step);
        } else {
            step.push(line);
        }
    }

    /// Lines that are wrong in some way: unknown commands, empty lines, missing tokens.
    fn malformed(&mut self, step: &mut Step) {
        let line: &[u8] = self.one_of(&[
            &b"\r\n"[..],
            b"\n",
            b"   \r\n",
            b"foo\r\n",
            b"GET k0\r\n",
            b"gett k0\r\n",
            b"sets k0 0 0 1\r\n",
            b"set\r\n",
            b"set k0\r\n",
            b"set k0 0\r\n",
            b"set k0 0 0\r\n",
            b"set k0 0 0 1 noreply extra\r\nq\r\n",
            b"cas k0 0 0 1\r\nq\r\n",
            b"get\r\n",
            b"gets\r\n",
            b"gat\r\n",
            b"gat 0\r\n",
            b"gats 0\r\n",
            b"incr\r\n",
            b"incr k0\r\n",
            b"decr k0\r\n",
            b"touch\r\n",
            b"touch k0\r\n",
            b"delete\r\n",
            b"\t\r\n",
            b"\x01\x02\r\n",
            b"get k0\rk1\r\n",
            b"shutdown\r\n",
            b"quitx\r\n",
            b"12345\r\n",
            b"qwxyz q\r\n",
        ]);
        step.push(line);
    }

    /// A NUL byte inside a command line: memcached reads the line as a C string.
    fn null_byte(&mut self, step: &mut Step) {
        let line: &[u8] = self.one_of(&[
            &b"get k0\x00 k1\r\n"[..],
            b"get \x00k0\r\n",
            b"set k1 0 0 1\x00junk\r\nq\r\n",
            b"delete k2\x00 noreply\r\n",
            b"incr k3 1\x00 noreply\r\n",
            b"\x00\r\n",
        ]);
        step.push(line);
    }
}

fn bytes(s: &str) -> Part {
    Part::Bytes(s.as_bytes().to_vec())
}

fn part_len(part: &Part) -> usize {
    match part {
        Part::Bytes(b) => b.len() + 1,
        Part::LastCas(_) => 21,
    }
}

/// A stream of pipelined batches made for the server's parse-ahead path (`ahead.rs`):
/// 2 to 24 commands per step, mostly one-key `get`/`gets` and plain `set`s on four keys,
/// with a value length that mostly repeats (so a set overwrites the item in place) and
/// sometimes changes (so it writes a new one), and now and then a command that ends a
/// batch or takes the general path: a multi-get, `delete`, a `noreply` set, `append`,
/// `touch`, `cas` with the last CAS seen, `add`, `replace`.
pub fn pipelined_stream(seed: u64, len: usize) -> Vec<Step> {
    let mut rng = Rng::new(seed);
    let mut steps = vec![Step::from_bytes(b"flush_all\r\n")];
    let value = |rng: &mut Rng, len: usize| -> Vec<u8> {
        (0..len).map(|_| *rng.pick(VALUE_ALPHABET)).collect()
    };
    while steps.len() < len {
        let mut step = Step::default();
        for _ in 0..rng.range_usize(2, 24) {
            let key = format!("p{}", rng.below(4));
            let len = if rng.chance(0.8) {
                8
            } else {
                rng.range_usize(0, 40)
            };
            let flags = if rng.chance(0.7) { 0 } else { rng.below(3) };
            match rng.weighted(&[40, 10, 40, 10]) {
                0 => step.push(format!("get {key}\r\n").as_bytes()),
                1 => step.push(format!("gets {key}\r\n").as_bytes()),
                2 => {
                    step.push(format!("set {key} {flags} 0 {len}\r\n").as_bytes());
                    step.push(&value(&mut rng, len));
                    step.push(b"\r\n");
                }
                _ => match rng.below(8) {
                    0 => step.push(format!("get {key} p{}\r\n", rng.below(4)).as_bytes()),
                    1 => step.push(format!("delete {key}\r\n").as_bytes()),
                    2 => {
                        step.push(format!("set {key} {flags} 0 {len} noreply\r\n").as_bytes());
                        step.push(&value(&mut rng, len));
                        step.push(b"\r\n");
                    }
                    3 => step.push(format!("append {key} 0 0 2\r\nzz\r\n").as_bytes()),
                    4 => step.push(format!("touch {key} 1000\r\n").as_bytes()),
                    5 => {
                        step.push(format!("cas {key} {flags} 0 {len} ").as_bytes());
                        step.parts.push(Part::LastCas(key.clone().into_bytes()));
                        step.push(b"\r\n");
                        step.push(&value(&mut rng, len));
                        step.push(b"\r\n");
                    }
                    6 => {
                        step.push(format!("add {key} {flags} 0 {len}\r\n").as_bytes());
                        step.push(&value(&mut rng, len));
                        step.push(b"\r\n");
                    }
                    _ => {
                        step.push(format!("replace {key} {flags} 0 {len}\r\n").as_bytes());
                        step.push(&value(&mut rng, len));
                        step.push(b"\r\n");
                    }
                },
            }
        }
        steps.push(step);
    }
    steps
}
