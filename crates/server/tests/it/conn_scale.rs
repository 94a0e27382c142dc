//! Many connections: what an idle one costs, and that it never costs the busy ones.
//!
//! - 5 000 idle connections beside one busy one: the busy one's replies stay exact
//!   while they are opened, and once they are idle the process holds less than 5 MB
//!   more than before them (memcached 1.6.18: about 580 bytes a connection).
//! - Connections past their allowance take from the store's budget, so that the
//!   `-m` promise holds with many connections holding buffers (half-sent values).
//!
//! Run on every backend by `scripts/test` (`FERROCACHE_IO_BACKEND`). Every server is
//! started through `common::ServerProcess` and killed by PID when its test ends; every
//! loop is bounded by a count and every wait by a deadline. Nothing is timed.

use crate::common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::{descriptors_for, escape, Client, Rng, ServerKind, ServerProcess};

const IDLE_CONNECTIONS: usize = 5000;
/// What the idle connections may add to the resident set, in all.
const IDLE_GROWTH_LIMIT_KIB: u64 = 5 * 1000 * 1000 / 1024;

/// The busy connection: sets and gets of random keys and lengths, each reply checked
/// against what was written.
struct Busy {
    conn: Client,
    rng: Rng,
    model: HashMap<String, Vec<u8>>,
    requests: u64,
}

impl Busy {
    fn new(conn: Client) -> Busy {
        Busy {
            conn,
            rng: Rng::new(0x6275_7379),
            model: HashMap::new(),
            requests: 0,
        }
    }

    /// `n` requests, pipelined in batches of up to 16, every reply checked.
    fn run(&mut self, n: usize) {
        let mut left = n;
        while left > 0 {
            let batch = left.min(1 + self.rng.range_usize(0, 15));
            left -= batch;
            let mut request = Vec::new();
            let mut want = Vec::new();
            for _ in 0..batch {
                let key = format!("busy:{}", self.rng.below(400));
                if self.rng.chance(0.4) {
                    let len = self.rng.range_usize(1, 3000);
                    let mut v = format!("{}:{len}:", self.requests).into_bytes();
                    v.resize(len, b'a' + (self.requests % 26) as u8);
                    request.extend_from_slice(format!("set {key} 5 0 {len}\r\n").as_bytes());
                    request.extend_from_slice(&v);
                    request.extend_from_slice(b"\r\n");
                    want.extend_from_slice(b"STORED\r\n");
                    self.model.insert(key, v);
                } else {
                    request.extend_from_slice(format!("get {key}\r\n").as_bytes());
                    if let Some(v) = self.model.get(&key) {
                        want.extend_from_slice(format!("VALUE {key} 5 {}\r\n", v.len()).as_bytes());
                        want.extend_from_slice(v);
                        want.extend_from_slice(b"\r\n");
                    }
                    want.extend_from_slice(b"END\r\n");
                }
                self.requests += 1;
            }
            let got = self.conn.request(&request);
            assert!(
                got == want,
                "busy connection, after {} requests: sent {}, got {}",
                self.requests,
                escape(&request[..request.len().min(300)]),
                escape(&got[..got.len().min(300)])
            );
        }
    }
}

#[test]
fn idle_connections_cost_little_and_the_busy_one_stays_exact() {
    let Some(_descriptors) = descriptors_for(IDLE_CONNECTIONS) else {
        return;
    };
    let kind = ServerKind::under_test();
    let server = ServerProcess::start(kind, &["-t", "1", "-m", "64", "-c", "6000", "-U", "0"]);
    let mut busy = Busy::new(server.connect());
    let mut control = server.connect();
    // Warm: the busy connection's buffers, the store's first segments, the workers'
    // caches. Then the baseline, once every buffer of the warm-up that could go back
    // has (ferrocache gives an idle connection's buffers back after 2 s).
    busy.run(2000);
    let settle = |control: &mut Client| {
        if kind == ServerKind::Ferrocache {
            // Only the busy and control connections may hold buffers: at most 2 pairs.
            let deadline = Instant::now() + Duration::from_secs(30);
            while control.stat("conn_buffer_bytes") > 4 * 32 * 1024 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(200));
            }
            // And the heap's free pages go back to the kernel once a second.
            std::thread::sleep(Duration::from_millis(2500));
        }
    };
    settle(&mut control);
    let before_kib = server.rss_kib();

    let mut idle = Vec::with_capacity(IDLE_CONNECTIONS);
    for i in 0..IDLE_CONNECTIONS {
        let mut c = server.connect();
        // Touched once, as a client pool's connection is: its buffers are taken.
        c.send(b"get idle:key\r\n");
        idle.push(c);
        if (i + 1) % 250 == 0 {
            for c in &mut idle[i + 1 - 250..=i] {
                let reply = c.read_until(common::READ_TIMEOUT, |b| b.ends_with(b"END\r\n"));
                assert_eq!(
                    reply.bytes,
                    b"END\r\n",
                    "idle connection: {}",
                    reply.describe()
                );
            }
            busy.run(100);
        }
    }
    busy.run(2000);
    settle(&mut control);
    let after_kib = server.rss_kib();
    let grown = after_kib.saturating_sub(before_kib);
    eprintln!(
        "{}: RSS {before_kib} KiB with 2 connections, {after_kib} KiB with {} more idle: \
         {} B each",
        kind.name(),
        IDLE_CONNECTIONS,
        grown * 1024 / IDLE_CONNECTIONS as u64
    );
    if kind == ServerKind::Ferrocache {
        let stats = control.stats("");
        for name in [
            "curr_connections",
            "read_buf_count",
            "read_buf_bytes",
            "read_buf_bytes_free",
            "conn_buffer_bytes",
            "conn_buffer_pooled_bytes",
            "conn_state_bytes",
        ] {
            eprintln!("  {name} {}", stats[name]);
        }
        let state: u64 = stats["conn_state_bytes"].parse().expect("number");
        assert!(
            state >= IDLE_CONNECTIONS as u64 * 100,
            "conn_state_bytes {state} counts too little for {IDLE_CONNECTIONS} connections"
        );
    }
    assert!(
        grown < IDLE_GROWTH_LIMIT_KIB,
        "{IDLE_CONNECTIONS} idle connections added {grown} KiB (limit {IDLE_GROWTH_LIMIT_KIB})"
    );
    // Every idle connection still answers.
    for (i, c) in idle.iter_mut().enumerate().step_by(97) {
        c.assert_answers(&format!("connection {i}"));
    }
}

/// `-m 64`, a full store, then 800 connections each holding a 60 KB value half sent
/// (about 64 KiB of read buffer each, 50 MiB in all): the store gives up what the
/// connections take past their 16 MiB allowance, and once it has (the charge is made
/// once a second, and the store shrinks as writers need room, as after a lowered
/// `cache_memlimit`) the process stays within 1.05 x 64 MiB + 32 MiB. Once the values are completed and the connections closed,
/// the charge is lifted. ferrocache only: memcached's connections live outside `-m`.
#[test]
fn connections_holding_buffers_take_from_the_store_not_past_the_promise() {
    const HOLDERS: usize = 800;
    const VALUE: usize = 60_000;
    if ServerKind::under_test() != ServerKind::Ferrocache {
        return;
    }
    let Some(_descriptors) = descriptors_for(HOLDERS) else {
        return;
    };
    let server = ServerProcess::start(
        ServerKind::Ferrocache,
        &["-t", "2", "-m", "64", "-c", "2000", "-U", "0"],
    );
    let bound_kib = 64 * 1024 * 105 / 100 + 32 * 1024;
    let mut conn = server.connect();
    let mut max_kib: u64 = 0;
    let fill = |conn: &mut Client, from: u64, n: u64| {
        let value = vec![b'f'; 1000];
        for batch in 0..n / 100 {
            let mut request = Vec::new();
            for i in 0..100 {
                let key = format!("fill:{}", from + batch * 100 + i);
                request.extend_from_slice(format!("set {key} 0 0 1000 noreply\r\n").as_bytes());
                request.extend_from_slice(&value);
                request.extend_from_slice(b"\r\n");
            }
            conn.request(&request);
        }
    };
    // 1.5 x the memory in 1 KB values: the store is full, evicting.
    fill(&mut conn, 0, 100_000);
    assert!(conn.stat("evictions") > 0, "the store did not fill");
    let items_before = conn.stat("item_memory_bytes");

    let mut holders = Vec::with_capacity(HOLDERS);
    let mut half = format!("set held 0 0 {VALUE}\r\n").into_bytes();
    half.resize(half.len() + VALUE / 2, b'h');
    for _ in 0..HOLDERS {
        let mut c = server.connect();
        c.send(&half);
        holders.push(c);
    }
    // Writes go on while the connections hold their buffers; the charge comes within
    // the maintenance thread's next tick, and the store shrinks as writers need room.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut from = 100_000;
    let charged = loop {
        fill(&mut conn, from, 5000);
        from += 5000;
        // Adapted once every holder's buffer is counted and the store is back
        // within its budget, less the charge.
        let stats = conn.stats("");
        let num = |name: &str| -> u64 { stats[name].parse().expect("number") };
        let charged = num("conn_charged_bytes");
        let store = num("item_memory_bytes") + num("index_bytes");
        if charged > 20 << 20 && store <= num("store_budget_bytes") || Instant::now() > deadline {
            break charged;
        }
    };
    let items_during = conn.stat("item_memory_bytes");
    // Adapted: from now on the process stays within the promise.
    for _ in 0..4 {
        fill(&mut conn, from, 5000);
        from += 5000;
        max_kib = max_kib.max(server.rss_kib());
    }
    eprintln!(
        "conn_charged_bytes {charged}; item memory {items_before} -> {items_during}; \
         max RSS {max_kib} KiB, bound {bound_kib} KiB"
    );
    assert!(
        charged > 20 << 20,
        "charged only {charged} bytes for {HOLDERS} held buffers"
    );
    assert!(
        items_during + charged / 2 <= items_before,
        "the store kept {items_during} of {items_before} bytes with {charged} charged"
    );
    assert!(
        max_kib <= bound_kib,
        "max RSS {max_kib} KiB > {bound_kib} KiB"
    );

    // The values complete; the connections go; the charge goes with them.
    let mut rest = vec![b'h'; VALUE - VALUE / 2];
    rest.extend_from_slice(b"\r\n");
    for c in &mut holders {
        c.send(&rest);
    }
    for c in &mut holders {
        let reply = c.read_until(common::READ_TIMEOUT, |b| b.ends_with(b"\r\n"));
        assert_eq!(reply.bytes, b"STORED\r\n", "{}", reply.describe());
    }
    drop(holders);
    let deadline = Instant::now() + Duration::from_secs(30);
    while conn.stat("conn_charged_bytes") > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(conn.stat("conn_charged_bytes"), 0, "the charge stayed");
}

/// Started where the soft descriptor limit is 256 (as a service may be), ferrocache
/// raises it for its `-c 1500` and takes 1 000 connections, each of which answers.
#[test]
fn the_descriptor_limit_is_raised_for_max_connections() {
    const CONNECTIONS: usize = 1000;
    if ServerKind::under_test() != ServerKind::Ferrocache {
        return;
    }
    let Some(_descriptors) = descriptors_for(CONNECTIONS) else {
        return;
    };
    let port = common::probably_free_port();
    let program = ServerKind::Ferrocache.program();
    let mut child = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -Sn 256 && exec '{}' -p {port} -l 127.0.0.1 -c 1500 -U 0{}",
            program.display(),
            if common::running_as_root() {
                " -u root"
            } else {
                ""
            }
        ))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn sh");
    // `exec`: the PID is the server's, and is killed below whatever happens.
    let result = std::panic::catch_unwind(|| {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut conns = Vec::new();
        while conns.is_empty() {
            match Client::try_connect(port) {
                Ok(c) => conns.push(c),
                Err(e) => {
                    assert!(Instant::now() < deadline, "server did not start: {e}");
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
        let limits =
            std::fs::read_to_string(format!("/proc/{}/limits", child.id())).expect("read limits");
        let soft: u64 = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .and_then(|l| l.split_whitespace().nth(3))
            .and_then(|v| v.parse().ok())
            .expect("Max open files line");
        assert!(
            soft >= 1500,
            "soft descriptor limit {soft} after start with -c 1500"
        );
        for i in 1..CONNECTIONS {
            let c = Client::try_connect(port).unwrap_or_else(|e| panic!("connection {i}: {e}"));
            conns.push(c);
        }
        for (i, c) in conns.iter_mut().enumerate() {
            c.assert_answers(&format!("connection {i}"));
        }
    });
    let _ = child.kill();
    let _ = child.wait();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
