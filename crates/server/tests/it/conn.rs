//! The sans-I/O connection, driven in process: bytes in, reply bytes out.
//!
//! No socket, no thread, no sleep. A [`Shared`] is built from a memcached command
//! line, and a [`Conn`] is fed input in chosen chunks the way the epoll backend
//! feeds it (read while output is not backed up and the read limit allows, then
//! `process`, then write), until it makes no more
//! progress. Every test checks the exact bytes that come out.

use ferrocache_server::ops::Exec;
use ferrocache_server::reply::Sink;
use ferrocache_server::session::{Ahead, Conn, Status};
use ferrocache_server::state::Shared;
use protocol::binary::{opcode, write_request, Header, RESPONSE_MAGIC};

/// The shared state of a server started with `flags` (after `-t 1`).
fn shared(flags: &[&str]) -> Shared {
    let mut args = vec!["ferrocache", "-t", "1"];
    args.extend_from_slice(flags);
    Shared::from_args(args).expect("settings")
}

/// Worker 0's view of `shared`, every value copied into the output.
fn exec(shared: &Shared) -> Exec<'_> {
    Exec {
        shared,
        stats: shared.worker_stats(0),
        sink: Sink::COPY,
        latency: None,
    }
}

/// One client connection and every byte it was sent back.
struct Client<'a> {
    exec: Exec<'a>,
    conn: Conn,
    ahead: Ahead,
    out: Vec<u8>,
    status: Status,
}

impl<'a> Client<'a> {
    fn new(shared: &'a Shared) -> Self {
        Client {
            exec: exec(shared),
            conn: Conn::new(),
            ahead: Ahead::default(),
            out: Vec::new(),
            status: Status::Open,
        }
    }

    /// One `process` call, as the backends make it.
    fn process(&mut self) -> Status {
        self.conn.process(&self.exec, &mut self.ahead)
    }

    /// Move everything waiting into `out`, as one write that takes it all.
    fn drain(&mut self) {
        let n = self.conn.output().len();
        self.out.extend_from_slice(self.conn.output());
        self.conn.written(n);
    }

    /// Deliver `bytes` as one socket-full: read what the connection takes, process,
    /// write everything, and repeat until all of it is read and nothing more runs.
    /// Stops once the connection says to close.
    fn feed(&mut self, mut bytes: &[u8]) -> Status {
        if self.status != Status::Open {
            return self.status;
        }
        loop {
            let mut read = 0;
            while !bytes.is_empty()
                && !self.conn.output_blocked()
                && self.conn.buffered() < self.conn.read_limit()
            {
                let space = self.conn.read_space();
                let n = space.len().min(bytes.len());
                space[..n].copy_from_slice(&bytes[..n]);
                self.conn.filled(n);
                bytes = &bytes[n..];
                read += n;
            }
            let before = (self.out.len(), self.conn.buffered());
            self.status = self.process();
            self.drain();
            if self.status != Status::Open {
                return self.status;
            }
            if self.conn.stalled_on_output() {
                continue;
            }
            if bytes.is_empty() {
                return self.status;
            }
            assert!(
                read > 0 || before != (self.out.len(), self.conn.buffered()),
                "no progress with {} bytes still to deliver",
                bytes.len()
            );
        }
    }

    /// Deliver `input` cut at `cuts` (increasing offsets inside it).
    fn feed_cut(&mut self, input: &[u8], cuts: &[usize]) -> Status {
        let mut at = 0;
        for &cut in cuts.iter().chain(std::iter::once(&input.len())) {
            self.feed(&input[at..cut]);
            at = cut;
        }
        self.status
    }
}

/// What a fresh server started with `flags` answers to `input` cut at `cuts`.
fn run_cut(flags: &[&str], input: &[u8], cuts: &[usize]) -> (Vec<u8>, Status) {
    let shared = shared(flags);
    let mut client = Client::new(&shared);
    let status = client.feed_cut(input, cuts);
    (client.out, status)
}

/// Bytes shown as text with escapes, for assertion messages.
fn show(bytes: &[u8]) -> String {
    bytes.escape_ascii().to_string()
}

#[track_caller]
fn assert_bytes(got: &[u8], want: &[u8]) {
    assert!(got == want, "\n got: {}\nwant: {}", show(got), show(want));
}

/// A small deterministic generator (xorshift64*), so split points repeat.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n
    }
}

#[test]
fn set_then_get_round_trip() {
    let shared = shared(&[]);
    let mut c = Client::new(&shared);
    assert_eq!(c.feed(b"set greeting 5 0 5\r\nhello\r\n"), Status::Open);
    assert_bytes(&c.out, b"STORED\r\n");
    c.out.clear();
    // Alone in the input: the lone-get path answers it.
    c.feed(b"get greeting\r\n");
    assert_bytes(&c.out, b"VALUE greeting 5 5\r\nhello\r\nEND\r\n");
    c.out.clear();
    c.feed(b"gets greeting\r\n");
    assert_bytes(&c.out, b"VALUE greeting 5 5 1\r\nhello\r\nEND\r\n");
    c.out.clear();
    c.feed(b"get nothing\r\n");
    assert_bytes(&c.out, b"END\r\n");
    assert!(!c.conn.has_input());
}

#[test]
fn pipelined_batch_is_answered_in_order() {
    // Gets and sets back to back in one read: after the first, the rest are parsed
    // ahead and their lookups prefetched, and must still run in order (the `get a`
    // after the second `set a` sees the new value).
    let input = b"set a 0 0 1\r\n1\r\n\
                  set b 7 0 2\r\n22\r\n\
                  get a\r\n\
                  get b\r\n\
                  get c\r\n\
                  set a 0 0 3\r\n333\r\n\
                  get a\r\n\
                  get a b c\r\n\
                  delete b\r\n\
                  get b\r\n";
    let (out, status) = run_cut(&[], input, &[]);
    assert_eq!(status, Status::Open);
    assert_bytes(
        &out,
        b"STORED\r\n\
          STORED\r\n\
          VALUE a 0 1\r\n1\r\nEND\r\n\
          VALUE b 7 2\r\n22\r\nEND\r\n\
          END\r\n\
          STORED\r\n\
          VALUE a 0 3\r\n333\r\nEND\r\n\
          VALUE a 0 3\r\n333\r\nVALUE b 7 2\r\n22\r\nEND\r\n\
          DELETED\r\n\
          END\r\n",
    );
}

/// A stream of many request shapes: text stores with data blocks (one refused as
/// too large and swallowed), multi-gets, CAS, arithmetic, noreply, meta commands with
/// and without data, and a miss.
const MIXED: &[u8] = b"set k1 1 0 3\r\nabc\r\n\
get k1\r\n\
set k2 0 0 10\r\n0123456789\r\n\
get k1 k2 k3\r\n\
gets k2\r\n\
cas k2 0 0 2 2\r\nzz\r\n\
cas k2 0 0 2 2\r\nyy\r\n\
append k1 0 0 2\r\nde\r\n\
prepend k1 0 0 1\r\n_\r\n\
get k1\r\n\
set n 0 0 2\r\n10\r\n\
incr n 5\r\n\
decr n 20\r\n\
set quiet 0 0 1 noreply\r\nq\r\n\
get quiet\r\n\
set big 0 0 1500\r\n";

/// What follows the refused value's 1500 bytes in [`mixed_input`].
const MIXED_TAIL: &[u8] = b"\r\n\
ms m1 4 F9 T0\r\nmeta\r\n\
mg m1 v f k\r\n\
mg k2 s v\r\n\
mg absent v\r\n\
mn\r\n\
md m1\r\n\
mg m1 v\r\n\
touch k1 100\r\n\
get big k2\r\n\
delete k1 noreply\r\n\
get k1\r\n\
version_is_not_a_command\r\n\
get k2\r\n";

/// [`MIXED`], a value past `-I 1k`, then [`MIXED_TAIL`].
fn mixed_input() -> Vec<u8> {
    let mut input = MIXED.to_vec();
    input.resize(input.len() + 1500, b'x');
    input.extend_from_slice(MIXED_TAIL);
    input
}

const MIXED_REPLY: &[u8] = b"STORED\r\n\
VALUE k1 1 3\r\nabc\r\nEND\r\n\
STORED\r\n\
VALUE k1 1 3\r\nabc\r\nVALUE k2 0 10\r\n0123456789\r\nEND\r\n\
VALUE k2 0 10 2\r\n0123456789\r\nEND\r\n\
STORED\r\n\
EXISTS\r\n\
STORED\r\n\
STORED\r\n\
VALUE k1 1 6\r\n_abcde\r\nEND\r\n\
STORED\r\n\
15\r\n\
0\r\n\
VALUE quiet 0 1\r\nq\r\nEND\r\n\
SERVER_ERROR object too large for cache\r\n\
HD\r\n\
VA 4 f9 km1\r\nmeta\r\n\
VA 2 s2\r\nzz\r\n\
EN\r\n\
MN\r\n\
HD\r\n\
EN\r\n\
TOUCHED\r\n\
VALUE k2 0 2\r\nzz\r\nEND\r\n\
END\r\n\
ERROR\r\n\
VALUE k2 0 2\r\nzz\r\nEND\r\n";

#[test]
fn mixed_stream_whole() {
    let (out, status) = run_cut(
        &["-I", "1k", "-o", "slab_chunk_max=1024"],
        &mixed_input(),
        &[],
    );
    assert_eq!(status, Status::Open);
    assert_bytes(&out, MIXED_REPLY);
}

#[test]
fn split_at_every_byte_boundary_answers_the_same() {
    let input = mixed_input();
    let flags = ["-I", "1k", "-o", "slab_chunk_max=1024"];
    let (whole, _) = run_cut(&flags, &input, &[]);
    assert_bytes(&whole, MIXED_REPLY);
    for cut in 1..input.len() {
        let (out, status) = run_cut(&flags, &input, &[cut]);
        assert_eq!(status, Status::Open, "cut at {cut}");
        assert!(
            out == whole,
            "cut at {cut}:\n got: {}\nwant: {}",
            show(&out),
            show(&whole)
        );
    }
    // And one byte per read.
    let every: Vec<usize> = (1..input.len()).collect();
    let (out, _) = run_cut(&flags, &input, &every);
    assert_bytes(&out, &whole);
}

#[test]
fn split_at_random_points_answers_the_same() {
    let input = mixed_input();
    let flags = ["-I", "1k", "-o", "slab_chunk_max=1024"];
    let mut rng = Rng(0x5EED_C0DE_F00D_0001);
    for round in 0..300 {
        let pieces = 1 + rng.below(24);
        let mut cuts: Vec<usize> = (0..pieces)
            .map(|_| 1 + rng.below(input.len() - 1))
            .collect();
        cuts.sort_unstable();
        cuts.dedup();
        let (out, status) = run_cut(&flags, &input, &cuts);
        assert_eq!(status, Status::Open, "round {round}, cuts {cuts:?}");
        assert!(
            out == MIXED_REPLY,
            "round {round}, cuts {cuts:?}:\n got: {}\nwant: {}",
            show(&out),
            show(MIXED_REPLY)
        );
    }
}

#[test]
fn oversized_value_is_refused_and_its_data_swallowed() {
    let shared = shared(&["-I", "1k", "-o", "slab_chunk_max=1024"]);
    let mut c = Client::new(&shared);
    c.feed(b"set k 0 0 2\r\nok\r\n");
    assert_bytes(&c.out, b"STORED\r\n");
    c.out.clear();
    // 2000 bytes of a value that spells requests: swallowed, never executed. The
    // refused `set` also unlinks the key's old value, as memcached does.
    let mut input = b"set k 0 0 2000\r\n".to_vec();
    input.extend("get k\r\n".repeat(300).as_bytes().iter().take(2000));
    input.extend_from_slice(b"\r\nget k\r\nset k 0 0 3\r\nnew\r\nget k\r\n");
    assert_eq!(c.feed(&input), Status::Open);
    assert_bytes(
        &c.out,
        b"SERVER_ERROR object too large for cache\r\n\
          END\r\n\
          STORED\r\n\
          VALUE k 0 3\r\nnew\r\nEND\r\n",
    );
    // The same with the value arriving in small pieces after the line.
    let shared = self::shared(&["-I", "1k", "-o", "slab_chunk_max=1024"]);
    let mut c = Client::new(&shared);
    for piece in input.chunks(7) {
        c.feed(piece);
    }
    assert_bytes(
        &c.out,
        b"SERVER_ERROR object too large for cache\r\n\
          END\r\n\
          STORED\r\n\
          VALUE k 0 3\r\nnew\r\nEND\r\n",
    );
}

#[test]
fn quit_closes_after_the_replies_before_it() {
    let shared = shared(&[]);
    let mut c = Client::new(&shared);
    let status = c.feed(b"set k 0 0 1\r\nv\r\nget k\r\nquit\r\nget k\r\n");
    assert_eq!(status, Status::CloseAfterWrite);
    assert_bytes(&c.out, b"STORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n");
    // Nothing more runs once closing.
    assert_eq!(
        c.conn.process(&c.exec, &mut c.ahead),
        Status::CloseAfterWrite
    );
    assert!(c.conn.output().is_empty());
}

#[test]
fn meta_set_and_get() {
    let shared = shared(&[]);
    let mut c = Client::new(&shared);
    c.feed(
        b"ms mkey 5 T0 F3\r\nhello\r\nmg mkey v f t s\r\nmg mkey k c q\r\nmg none v q\r\nmn\r\n",
    );
    assert_bytes(
        &c.out,
        b"HD\r\nVA 5 f3 t-1 s5\r\nhello\r\nHD kmkey c1\r\nMN\r\n",
    );
    c.out.clear();
    // A meta value whose data block arrives a byte at a time.
    for piece in b"ms mkey 3\r\nnew\r\nmg mkey v\r\n".chunks(1) {
        c.feed(piece);
    }
    assert_bytes(&c.out, b"HD\r\nVA 3\r\nnew\r\n");
}

/// A binary-protocol response with these fields.
fn binary_response(opcode: u8, opaque: u32, cas: u64, extras: &[u8], value: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    Header {
        magic: RESPONSE_MAGIC,
        opcode,
        key_len: 0,
        extras_len: extras.len() as u8,
        data_type: 0,
        status: 0,
        body_len: (extras.len() + value.len()) as u32,
        opaque,
        cas,
    }
    .write(&mut out);
    out.extend_from_slice(extras);
    out.extend_from_slice(value);
    out
}

#[test]
fn binary_set_then_get() {
    let shared = shared(&[]);
    let mut c = Client::new(&shared);
    let mut input = Vec::new();
    // SET's extras: flags then expiry.
    let mut extras = 0xdead_beef_u32.to_be_bytes().to_vec();
    extras.extend_from_slice(&0u32.to_be_bytes());
    write_request(&mut input, opcode::SET, &extras, b"bkey", b"binary!", 7, 0);
    write_request(&mut input, opcode::GET, &[], b"bkey", &[], 8, 0);
    write_request(&mut input, opcode::NOOP, &[], &[], &[], 9, 0);
    assert_eq!(input[0], 0x80);
    assert_eq!(c.feed(&input), Status::Open);
    let mut want = binary_response(opcode::SET, 7, 1, &[], &[]);
    want.extend(binary_response(
        opcode::GET,
        8,
        1,
        &0xdead_beef_u32.to_be_bytes(),
        b"binary!",
    ));
    want.extend(binary_response(opcode::NOOP, 9, 0, &[], &[]));
    assert_bytes(&c.out, &want);

    // The same exchange cut at every byte boundary.
    for cut in 1..input.len() {
        let (out, status) = run_cut(&[], &input, &[cut]);
        assert_eq!(status, Status::Open);
        assert!(out == want, "cut at {cut}: {}", show(&out));
    }
}

#[test]
fn output_backpressure_pauses_and_resumes() {
    let shared = shared(&[]);
    let mut c = Client::new(&shared);
    let value = vec![b'v'; 512 * 1024];
    let mut set = b"set big 0 0 524288\r\n".to_vec();
    set.extend_from_slice(&value);
    set.extend_from_slice(b"\r\n");
    c.feed(&set);
    assert_bytes(&c.out, b"STORED\r\n");

    let mut reply = b"VALUE big 0 524288\r\n".to_vec();
    reply.extend_from_slice(&value);
    reply.extend_from_slice(b"\r\nEND\r\n");

    // Ten gets in one read from a client that does not read its replies.
    let gets = 10;
    let input = "get big\r\n".repeat(gets);
    let space = c.conn.read_space();
    space[..input.len()].copy_from_slice(input.as_bytes());
    c.conn.filled(input.len());
    assert_eq!(c.process(), Status::Open);
    // Two replies pass the 1 MiB high-water mark: execution stops there.
    assert!(c.conn.output_blocked());
    assert!(c.conn.has_input());
    assert!(!c.conn.stalled_on_output(), "output still waits");
    assert_eq!(c.conn.output().len(), 2 * reply.len());
    // Nothing runs while the output is not written.
    assert_eq!(c.conn.process(&c.exec, &mut c.ahead), Status::Open);
    assert_eq!(c.conn.output().len(), 2 * reply.len());

    // A partial write is not enough to resume...
    let mut got = Vec::new();
    got.extend_from_slice(&c.conn.output()[..10]);
    c.conn.written(10);
    assert!(c.conn.output_blocked());
    assert_eq!(c.process(), Status::Open);
    assert_eq!(c.conn.output().len(), 2 * reply.len() - 10);
    // ... writing the rest is, and every reply comes out, in turn.
    let mut rounds = 0;
    loop {
        let n = c.conn.output().len();
        got.extend_from_slice(c.conn.output());
        c.conn.written(n);
        if !c.conn.stalled_on_output() {
            break;
        }
        rounds += 1;
        assert_eq!(c.process(), Status::Open);
    }
    assert_eq!(rounds, gets / 2);
    assert!(!c.conn.has_input());
    assert_eq!(got.len(), gets * reply.len());
    assert!(got == reply.repeat(gets), "replies differ");
}

#[test]
fn multi_get_pauses_mid_line_under_backpressure() {
    let shared = shared(&[]);
    let mut c = Client::new(&shared);
    let value = vec![b'w'; 300 * 1024];
    let mut set = b"set w 3 0 307200\r\n".to_vec();
    set.extend_from_slice(&value);
    set.extend_from_slice(b"\r\n");
    c.feed(&set);
    assert_bytes(&c.out, b"STORED\r\n");
    c.out.clear();

    // One multi-get of eight hits, then a get: the multi-get pauses at the
    // high-water mark and resumes at its next key.
    let mut one = b"VALUE w 3 307200\r\n".to_vec();
    one.extend_from_slice(&value);
    one.extend_from_slice(b"\r\n");
    let input = b"get w w w w w w w w\r\nget nothing\r\n";
    let space = c.conn.read_space();
    space[..input.len()].copy_from_slice(input);
    c.conn.filled(input.len());
    assert_eq!(c.process(), Status::Open);
    assert!(c.conn.output_blocked());
    assert!(c.conn.has_paused_get());
    c.drain();
    while c.conn.stalled_on_output() {
        c.process();
        c.drain();
    }
    assert!(!c.conn.has_paused_get());
    let mut want = one.repeat(8);
    want.extend_from_slice(b"END\r\nEND\r\n");
    assert_eq!(c.out.len(), want.len());
    assert!(c.out == want, "replies differ");
}

/// Connection buffers (`session/conn/buffers.rs`): none until the first read, counted
/// in the thread's (the worker's) total, given back to its cache when the connection is
/// released idle, and taken from that cache by the next connection.
#[test]
fn buffers_are_taken_at_the_first_read_and_given_back_when_idle() {
    use ferrocache_server::session::conn::buffers;
    let shared = shared(&[]);
    // Each test runs on a thread of its own: the count starts at zero.
    assert_eq!(buffers::held_bytes(), 0);
    let mut c = Client::new(&shared);
    assert_eq!(buffers::held_bytes(), 0, "a new connection holds no buffer");
    c.feed(b"set a 0 0 1\r\nx\r\nget a\r\n");
    assert_eq!(c.out, b"STORED\r\nVALUE a 0 1\r\nx\r\nEND\r\n");
    c.conn.shrink_idle();
    let pair = buffers::held_bytes();
    assert_eq!(pair, 32 * 1024, "a read and a write buffer");
    assert!(c.conn.release_idle(None));
    assert_eq!(
        buffers::held_bytes(),
        pair,
        "given back to the cache, still counted"
    );
    assert!(!c.conn.release_idle(None), "nothing left to give back");
    let mut d = Client::new(&shared);
    d.feed(b"get a\r\n");
    assert_eq!(d.out, b"VALUE a 0 1\r\nx\r\nEND\r\n");
    assert_eq!(
        buffers::held_bytes(),
        pair,
        "taken from the cache, not allocated"
    );
    c.feed(b"get a\r\n");
    assert_eq!(buffers::held_bytes(), 2 * pair, "a second pair allocated");
    // A value larger than the buffers grows them; idle, they are given back and freed.
    let big = vec![b'v'; 200 * 1024];
    let mut set = b"set big 0 0 204800\r\n".to_vec();
    set.extend_from_slice(&big);
    set.extend_from_slice(b"\r\n");
    c.out.clear();
    c.feed(&set);
    assert_eq!(c.out, b"STORED\r\n");
    c.conn.shrink_idle();
    assert_eq!(
        buffers::held_bytes(),
        pair + 16 * 1024,
        "d's pair, and c's write buffer cached: its grown read buffer was freed"
    );
    drop(c);
    drop(d);
    assert_eq!(
        buffers::held_bytes(),
        pair + 16 * 1024,
        "closed connections' buffers cached"
    );
}

/// An idle connection with half a request keeps only that half (`buffers::remnant`):
/// its buffers go back to the cache, and the next bytes complete the request.
#[test]
fn half_a_request_is_kept_in_its_own_bytes_while_idle() {
    use ferrocache_server::session::conn::buffers;
    let shared = shared(&[]);
    let mut c = Client::new(&shared);
    c.feed(b"set k 0 0 5\r\nab");
    assert!(c.out.is_empty());
    let pending = "set k 0 0 5\r\nab".len();
    assert!(c.conn.release_idle(None));
    assert_eq!(
        buffers::held_bytes() - buffers::cached_bytes(),
        pending,
        "the connection holds its pending bytes and nothing more"
    );
    assert!(!c.conn.release_idle(None), "already a remnant");
    // Another connection takes the cached buffers and writes over them.
    let mut d = Client::new(&shared);
    d.feed(b"set other 0 0 3\r\nxyz\r\n");
    assert_eq!(d.out, b"STORED\r\n");
    c.feed(b"cde\r\nget k\r\n");
    assert_eq!(c.out, b"STORED\r\nVALUE k 0 5\r\nabcde\r\nEND\r\n");
    // A data block on its way (more than a remnant is kept for) keeps its read buffer;
    // the write buffer goes back.
    c.out.clear();
    let mut part = b"set big 0 0 20000\r\n".to_vec();
    part.extend_from_slice(&[b'q'; 12_000]);
    c.feed(&part);
    let cached = buffers::cached_bytes();
    assert!(c.conn.release_idle(None));
    assert_eq!(
        buffers::cached_bytes(),
        cached + 16 * 1024,
        "the write buffer"
    );
    assert!(!c.conn.release_idle(None), "the read buffer stays");
    let mut rest = vec![b'q'; 8_000];
    rest.extend_from_slice(b"\r\n");
    c.feed(&rest);
    assert_eq!(c.out, b"STORED\r\n");
    drop(c);
    drop(d);
    assert_eq!(
        buffers::held_bytes(),
        buffers::cached_bytes(),
        "every byte counted as held is given back"
    );
}

/// A small deterministic generator (xorshift) for the cuts below.
struct Cuts(u64);

impl Cuts {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// Text requests for keys under `p`: small and large values, a multi-get of more than
/// the output high-water mark (it pauses mid-reply), appends, counters, deletes.
fn idle_script(p: &str) -> Vec<u8> {
    let mut s = Vec::new();
    for i in 0..12 {
        let v = "x".repeat(1 + i * 3);
        s.extend_from_slice(format!("set {p}s{i} {i} 0 {}\r\n{v}\r\n", v.len()).as_bytes());
    }
    for (j, len) in [100_000usize, 300_000, 420_000].iter().enumerate() {
        s.extend_from_slice(format!("set {p}big{j} 7 0 {len}\r\n").as_bytes());
        s.resize(s.len() + len, b'a' + j as u8);
        s.extend_from_slice(b"\r\n");
    }
    s.extend_from_slice(
        format!("get {p}big0 {p}big1 {p}big2 {p}s3 {p}big2 {p}big1\r\n").as_bytes(),
    );
    s.extend_from_slice(
        format!("append {p}s1 0 0 3\r\nxyz\r\nset {p}n 0 0 2\r\n10\r\n").as_bytes(),
    );
    s.extend_from_slice(format!("incr {p}n 5\r\ndecr {p}n 100\r\ndelete {p}s2\r\n").as_bytes());
    s.extend_from_slice(
        format!("set {p}q 0 0 1 noreply\r\nq\r\nget {p}s1 {p}s2 {p}q {p}n\r\n").as_bytes(),
    );
    s.extend_from_slice(format!("mg {p}s4 v f\r\nmn\r\n").as_bytes());
    s
}

/// Connections that go idle anywhere, with half a request buffered or in the middle of
/// a large multi-get's replies, and have their buffers taken by the idle scan
/// (`Conn::release_idle`) and used by other connections in between, resume exactly:
/// each connection's replies are byte for byte those of the same requests sent whole.
#[test]
fn connections_released_while_idle_anywhere_resume_exactly() {
    use ferrocache_server::session::conn::buffers;
    let prefixes = ["a:", "b:", "c:"];
    let want: Vec<Vec<u8>> = prefixes
        .iter()
        .map(|p| {
            let input = idle_script(p);
            run_cut(&[], &input, &[]).0
        })
        .collect();
    for seed in 1..=6u64 {
        let shared = shared(&[]);
        let mut cuts = Cuts(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let inputs: Vec<Vec<u8>> = prefixes.iter().map(|p| idle_script(p)).collect();
        let mut clients: Vec<Client> = prefixes.iter().map(|_| Client::new(&shared)).collect();
        let mut at = vec![0usize; clients.len()];
        let (mut remnants, mut paused_mid_reply) = (0, 0);
        let mut turns = 0;
        loop {
            let done = (0..clients.len()).all(|i| {
                at[i] == inputs[i].len()
                    && clients[i].conn.output().is_empty()
                    && !clients[i].conn.stalled_on_output()
                    && !clients[i].conn.has_paused_get()
            });
            if done {
                break;
            }
            turns += 1;
            assert!(turns < 100_000, "seed {seed}: no progress");
            let i = cuts.below(clients.len());
            let c = &mut clients[i];
            // Some bytes arrive: anything from one byte to a large socket-full.
            let n = if cuts.below(4) == 0 {
                1 + cuts.below(200_000)
            } else {
                1 + cuts.below(64)
            };
            let end = (at[i] + n).min(inputs[i].len());
            while at[i] < end && !c.conn.output_blocked() && c.conn.buffered() < c.conn.read_limit()
            {
                let space = c.conn.read_space();
                let k = space.len().min(end - at[i]);
                space[..k].copy_from_slice(&inputs[i][at[i]..at[i] + k]);
                c.conn.filled(k);
                at[i] += k;
            }
            assert_eq!(c.process(), Status::Open);
            // The client reads part of its replies, or none.
            let k = c.conn.output().len().min(cuts.below(300_000));
            c.out.extend_from_slice(&c.conn.output()[..k]);
            c.conn.written(k);
            if c.conn.output().is_empty() && !c.conn.has_input() {
                c.conn.shrink_idle();
            }
            // The scan finds some connections idle, whatever they hold.
            for c in clients.iter_mut() {
                if cuts.below(2) == 0 {
                    let half = c.conn.has_input();
                    let replies = !c.conn.output().is_empty() || c.conn.has_paused_get();
                    if c.conn.release_idle(None) && half {
                        remnants += 1;
                    }
                    paused_mid_reply += usize::from(replies && c.conn.has_paused_get());
                }
            }
        }
        for (i, c) in clients.iter().enumerate() {
            assert_eq!(c.out.len(), want[i].len(), "seed {seed}, connection {i}");
            assert!(
                c.out == want[i],
                "seed {seed}, connection {i}: replies differ"
            );
        }
        assert!(remnants > 0, "seed {seed}: no half request was released");
        assert!(
            paused_mid_reply > 0,
            "seed {seed}: never idle mid multi-get"
        );
        drop(clients);
        assert_eq!(
            buffers::held_bytes(),
            buffers::cached_bytes(),
            "seed {seed}"
        );
    }
}
