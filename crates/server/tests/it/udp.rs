//! UDP (`-U`) against Debian's memcached 1.6.18: the same datagrams go to both servers
//! and the reply datagrams, frame headers included, must be byte-identical. Then the
//! batched path: many requests in flight from several source ports at once, each reply
//! matched to its request id; and long replies (several datagrams each) in flight to
//! several ports at once, which ferrocache sends with UDP GSO where the kernel offers it.

use crate::common;

use std::collections::HashMap;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use common::{escape, ServerKind, ServerProcess};

/// How long a reply may take to start, and how long the socket must stay quiet after
/// the last datagram before a reply counts as complete.
const FIRST_DATAGRAM_TIMEOUT: Duration = Duration::from_secs(1);
const QUIET: Duration = Duration::from_millis(150);

fn free_udp_port() -> u16 {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    socket.local_addr().expect("local_addr").port()
}

/// A server with UDP on, and the UDP port.
fn start(kind: ServerKind, extra: &[&str]) -> (ServerProcess, u16) {
    let udp_port = free_udp_port();
    let port = udp_port.to_string();
    let mut args = vec!["-t", "1", "-m", "64", "-U", &port];
    args.extend_from_slice(extra);
    (ServerProcess::start(kind, &args), udp_port)
}

fn client(udp_port: u16) -> UdpSocket {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
    socket.connect(("127.0.0.1", udp_port)).expect("connect");
    socket
}

fn frame(request_id: u16, seq: u16, total: u16, payload: &[u8]) -> Vec<u8> {
    let mut d = Vec::with_capacity(8 + payload.len());
    d.extend_from_slice(&request_id.to_be_bytes());
    d.extend_from_slice(&seq.to_be_bytes());
    d.extend_from_slice(&total.to_be_bytes());
    d.extend_from_slice(&[0, 0]);
    d.extend_from_slice(payload);
    d
}

/// Every datagram that arrives until the socket has been quiet for [`QUIET`] (or, when
/// none comes at all, for [`FIRST_DATAGRAM_TIMEOUT`]).
fn collect(socket: &UdpSocket) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    loop {
        let wait = if got.is_empty() {
            FIRST_DATAGRAM_TIMEOUT
        } else {
            QUIET
        };
        socket.set_read_timeout(Some(wait)).unwrap();
        match socket.recv(&mut buf) {
            Ok(n) => got.push(buf[..n].to_vec()),
            Err(_) => return got,
        }
    }
}

/// Send one request datagram (already framed) and return the reply datagrams.
fn exchange(socket: &UdpSocket, datagram: &[u8]) -> Vec<Vec<u8>> {
    socket.send(datagram).expect("send");
    collect(socket)
}

fn describe(datagrams: &[Vec<u8>]) -> String {
    datagrams
        .iter()
        .map(|d| {
            if d.len() > 200 {
                format!("  [{} bytes] {}...\n", d.len(), escape(&d[..200]))
            } else {
                format!("  [{} bytes] {}\n", d.len(), escape(d))
            }
        })
        .collect()
}

/// The request datagrams of the differential scenarios, in order, each with what it
/// is for.
fn scenarios() -> Vec<(&'static str, Vec<u8>)> {
    let big: Vec<u8> = (0..5000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let mut set_big = b"set big 7 0 5000\r\n".to_vec();
    set_big.extend_from_slice(&big);
    set_big.extend_from_slice(b"\r\n");
    let mut oversized = b"set huge 0 0 60000\r\n".to_vec();
    oversized.extend(std::iter::repeat_n(b'h', 60000));
    oversized.extend_from_slice(b"\r\n");
    let many_keys: String = (0..60).map(|i| format!(" k{}", i % 4)).collect();
    vec![
        ("one set", frame(1, 0, 1, b"set k0 5 0 5\r\nhello\r\n")),
        ("one get hit", frame(2, 0, 1, b"get k0\r\n")),
        ("one get miss", frame(3, 0, 1, b"get nothing\r\n")),
        ("a value past one datagram", frame(4, 0, 1, &set_big)),
        (
            "a reply over four datagrams",
            frame(5, 0, 1, b"get big\r\n"),
        ),
        (
            "a multi-get: one message per key",
            frame(6, 0, 1, b"get k0 nothing big k0\r\n"),
        ),
        (
            "several commands in one datagram",
            frame(
                7,
                0,
                1,
                b"set k1 0 0 1\r\n1\r\nincr k1 41\r\nget k1\r\ndelete k1\r\nget k1\r\n",
            ),
        ),
        (
            "noreply",
            frame(8, 0, 1, b"set k2 0 0 2 noreply\r\nhi\r\nget k2\r\n"),
        ),
        ("an unknown command", frame(9, 0, 1, b"bogus\r\n")),
        (
            "a bad data chunk",
            frame(10, 0, 1, b"set k3 0 0 2\r\nabc\r\n"),
        ),
        (
            "a request over the one-datagram limit (total = 2) is dropped",
            frame(11, 0, 2, b"get k0\r\n"),
        ),
        (
            "a second datagram of a request is dropped",
            frame(12, 1, 2, b"get k0\r\n"),
        ),
        (
            "a datagram shorter than its header is dropped",
            vec![0, 13, 0],
        ),
        ("a large request datagram", frame(14, 0, 1, &oversized)),
        ("what it stored", frame(15, 0, 1, b"get huge\r\n")),
        ("request id 0xffff", frame(0xffff, 0, 1, b"get k0\r\n")),
        (
            "a multi-get of 60 keys",
            frame(16, 0, 1, format!("get{many_keys}\r\n").as_bytes()),
        ),
        ("a command without its line end", frame(17, 0, 1, b"get k0")),
        ("the session continues", frame(18, 0, 1, b"version\r\n")),
    ]
}

/// memcached's version string differs from ours (by design); compare only that each
/// side answers with one datagram holding a VERSION line.
fn normalize_version(datagrams: &mut [Vec<u8>]) {
    for d in datagrams {
        if d.len() > 8 && d[8..].starts_with(b"VERSION ") {
            d.truncate(8 + b"VERSION ".len());
        }
    }
}

#[test]
fn replies_match_memcached_datagram_for_datagram() {
    let (memcached, mc_udp) = start(ServerKind::Memcached, &[]);
    let (ferrocache, fc_udp) = start(ServerKind::Ferrocache, &[]);
    let mc = client(mc_udp);
    let fc = client(fc_udp);
    for (what, datagram) in scenarios() {
        let mut want = exchange(&mc, &datagram);
        let mut got = exchange(&fc, &datagram);
        normalize_version(&mut want);
        normalize_version(&mut got);
        assert!(
            want == got,
            "{what}: replies differ\nrequest: {}\nmemcached ({}):\n{}ferrocache ({}):\n{}",
            escape(&datagram[..datagram.len().min(200)]),
            memcached.describe(),
            describe(&want),
            ferrocache.describe(),
            describe(&got),
        );
    }
}

#[test]
fn a_large_reply_reassembles_from_its_datagrams() {
    let (server, udp_port) = start(ServerKind::under_test(), &[]);
    let value: Vec<u8> = (0..100_000u32).map(|i| b'0' + (i % 10) as u8).collect();
    let mut tcp = server.connect();
    let mut set = b"set v 0 0 100000\r\n".to_vec();
    set.extend_from_slice(&value);
    set.extend_from_slice(b"\r\n");
    assert_eq!(tcp.request(&set), b"STORED\r\n");

    let socket = client(udp_port);
    let datagrams = exchange(&socket, &frame(77, 0, 1, b"get v\r\n"));
    // One message (END rides with the last value), numbered 0..total.
    let mut whole = Vec::new();
    for (i, d) in datagrams.iter().enumerate() {
        assert!(d.len() <= 1400, "datagram of {} bytes", d.len());
        assert_eq!(u16::from_be_bytes([d[0], d[1]]), 77);
        assert_eq!(usize::from(u16::from_be_bytes([d[2], d[3]])), i, "sequence");
        assert_eq!(
            usize::from(u16::from_be_bytes([d[4], d[5]])),
            datagrams.len(),
            "total"
        );
        assert_eq!(&d[6..8], &[0, 0]);
        if i + 1 < datagrams.len() {
            assert_eq!(d.len(), 1400, "only the last datagram is short");
        }
        whole.extend_from_slice(&d[8..]);
    }
    let mut want = b"VALUE v 0 100000\r\n".to_vec();
    want.extend_from_slice(&value);
    want.extend_from_slice(b"\r\nEND\r\n");
    assert_eq!(whole.len(), want.len());
    assert!(whole == want, "the reassembled value differs");
}

/// Many requests in flight from several source ports: every request id gets exactly
/// its own reply. Against ferrocache this drives the batched receive and send.
#[test]
fn many_requests_in_flight_from_many_ports_each_get_their_reply() {
    many_requests_in_flight(&[]);
}

/// The same with the worker waiting awake for the next datagram after each batch.
#[test]
fn many_requests_in_flight_each_get_their_reply_with_busy_polling() {
    many_requests_in_flight(&["--busy-poll-us", "200"]);
}

/// With `--busy-poll-us`, UDP traffic that never pauses does not keep the worker from
/// its TCP connections: it goes back to its event loop after a bounded number of waits.
#[test]
fn tcp_is_served_while_busy_polled_udp_traffic_never_stops() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    let (server, udp_port) = start(ServerKind::under_test(), &["--busy-poll-us", "1000"]);
    let mut tcp = server.connect();
    assert_eq!(tcp.request(b"set k 0 0 1\r\nv\r\n"), b"STORED\r\n");
    let stop = Arc::new(AtomicBool::new(false));
    let udp_replies = Arc::new(AtomicUsize::new(0));
    let load: Vec<_> = (0..4u16)
        .map(|s| {
            let (stop, replies) = (Arc::clone(&stop), Arc::clone(&udp_replies));
            std::thread::spawn(move || {
                // A closed loop: the next request goes as soon as the reply is in, so
                // the server always finds one within its wait.
                let socket = client(udp_port);
                socket
                    .set_read_timeout(Some(Duration::from_secs(2)))
                    .unwrap();
                let deadline = Instant::now() + Duration::from_secs(60);
                let mut buf = [0u8; 256];
                let mut id = s * 10_000;
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    id = id.wrapping_add(1);
                    socket.send(&frame(id, 0, 1, b"get k\r\n")).unwrap();
                    if socket.recv(&mut buf).is_ok() {
                        replies.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    while udp_replies.load(Ordering::Relaxed) < 100 {
        std::thread::sleep(Duration::from_millis(1));
    }
    for i in 0..200 {
        let value = format!("{i}");
        let set = format!("set t{i} 0 0 {}\r\n{value}\r\n", value.len());
        assert_eq!(tcp.request(set.as_bytes()), b"STORED\r\n", "set {i}");
        let want = format!("VALUE t{i} 0 {}\r\n{value}\r\nEND\r\n", value.len());
        assert_eq!(tcp.request_str(&format!("get t{i}\r\n")), want, "get {i}");
    }
    let during = udp_replies.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    for t in load {
        t.join().unwrap();
    }
    assert!(
        during > 100,
        "UDP traffic flowed meanwhile ({during} replies)"
    );
}

fn many_requests_in_flight(extra: &[&str]) {
    // 128 requests in flight at a time: well within the server socket's default
    // receive buffer, so that none is dropped before the server reads it.
    const SOCKETS: usize = 8;
    const IN_FLIGHT: usize = 16;
    const ROUNDS: usize = 8;
    let (server, udp_port) = start(ServerKind::under_test(), extra);
    let mut tcp = server.connect();
    for k in 0..IN_FLIGHT {
        let value = format!("value-of-{k}");
        let set = format!("set key{k} {k} 0 {}\r\n{value}\r\n", value.len());
        assert_eq!(tcp.request(set.as_bytes()), b"STORED\r\n");
    }
    let sockets: Vec<UdpSocket> = (0..SOCKETS).map(|_| client(udp_port)).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut answered = 0;
    for round in 0..ROUNDS {
        // Every socket sends all its requests before any reply is read.
        let mut expected: Vec<HashMap<u16, Vec<u8>>> = vec![HashMap::new(); SOCKETS];
        for (s, socket) in sockets.iter().enumerate() {
            for k in 0..IN_FLIGHT {
                let id = (round * 10_000 + s * 1000 + k) as u16;
                let value = format!("value-of-{k}");
                let reply = format!("VALUE key{k} {k} {}\r\n{value}\r\nEND\r\n", value.len());
                expected[s].insert(id, reply.into_bytes());
                let request = frame(id, 0, 1, format!("get key{k}\r\n").as_bytes());
                socket.send(&request).expect("send");
            }
        }
        for (s, socket) in sockets.iter().enumerate() {
            // Each get is answered by one message of one datagram.
            let mut parts: HashMap<u16, Vec<u8>> = HashMap::new();
            let mut buf = vec![0u8; 2048];
            socket
                .set_read_timeout(Some(Duration::from_secs(2)))
                .unwrap();
            while parts.values().filter(|p| p.ends_with(b"END\r\n")).count() < IN_FLIGHT {
                assert!(Instant::now() < deadline, "out of time");
                let n = socket.recv(&mut buf).unwrap_or_else(|e| {
                    panic!(
                        "socket {s}, round {round}: {} of {IN_FLIGHT} replies complete, then {e}",
                        parts.values().filter(|p| p.ends_with(b"END\r\n")).count()
                    )
                });
                let d = &buf[..n];
                assert!(n >= 8);
                let id = u16::from_be_bytes([d[0], d[1]]);
                assert_eq!(
                    u16::from_be_bytes([d[2], d[3]]),
                    0,
                    "one datagram per message"
                );
                assert_eq!(u16::from_be_bytes([d[4], d[5]]), 1);
                assert!(
                    expected[s].contains_key(&id),
                    "socket {s} got a reply to id {id}"
                );
                parts.entry(id).or_default().extend_from_slice(&d[8..]);
            }
            for (id, want) in &expected[s] {
                assert_eq!(
                    parts.get(id).map(Vec::as_slice),
                    Some(want.as_slice()),
                    "socket {s}, request id {id}"
                );
            }
            answered += parts.len();
        }
    }
    assert_eq!(answered, SOCKETS * IN_FLIGHT * ROUNDS);
    // The TCP side still works, and the server counted the UDP gets.
    let stats = tcp.stats("");
    let hits: usize = stats["get_hits"].parse().unwrap();
    assert_eq!(hits, SOCKETS * IN_FLIGHT * ROUNDS);
}

/// Value sizes whose replies take 2, 4, 6 and 9 datagrams.
const LONG_VALUE_BYTES: [usize; 4] = [2_000, 4_500, 7_000, 12_000];

fn long_value(k: usize) -> Vec<u8> {
    (0..LONG_VALUE_BYTES[k])
        .map(|i| b'a' + ((i * 7 + k * 3) % 26) as u8)
        .collect()
}

fn long_reply(k: usize) -> Vec<u8> {
    let value = long_value(k);
    let mut reply = format!("VALUE long{k} {k} {}\r\n", value.len()).into_bytes();
    reply.extend_from_slice(&value);
    reply.extend_from_slice(b"\r\nEND\r\n");
    reply
}

/// One reply message being put together from its datagrams, which may come in any order.
#[derive(Default)]
struct Message {
    total: usize,
    parts: HashMap<usize, Vec<u8>>,
}

impl Message {
    fn complete(&self) -> bool {
        self.total > 0 && self.parts.len() == self.total
    }

    /// The payload in sequence order, and each datagram's length (header included).
    fn reassemble(&self) -> (Vec<u8>, Vec<usize>) {
        let mut whole = Vec::new();
        let mut lens = Vec::new();
        for seq in 0..self.total {
            let d = &self.parts[&seq];
            lens.push(d.len());
            whole.extend_from_slice(&d[8..]);
        }
        (whole, lens)
    }
}

/// Every socket asks for every long value at once, for a few rounds; every reply must
/// reassemble to exactly the value. Returns each reply's datagram lengths, in request
/// order, so that two servers can be compared.
fn long_replies_to_many_ports(kind: ServerKind, extra: &[&str]) -> Vec<Vec<usize>> {
    const SOCKETS: usize = 6;
    const ROUNDS: usize = 4;
    let (server, udp_port) = start(kind, extra);
    let mut tcp = server.connect();
    for k in 0..LONG_VALUE_BYTES.len() {
        let value = long_value(k);
        let mut set = format!("set long{k} {k} 0 {}\r\n", value.len()).into_bytes();
        set.extend_from_slice(&value);
        set.extend_from_slice(b"\r\n");
        assert_eq!(tcp.request(&set), b"STORED\r\n");
    }
    let sockets: Vec<UdpSocket> = (0..SOCKETS).map(|_| client(udp_port)).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut layouts = Vec::new();
    for round in 0..ROUNDS {
        let id_of = |s: usize, k: usize| (round * 1000 + s * 10 + k) as u16;
        for (s, socket) in sockets.iter().enumerate() {
            for k in 0..LONG_VALUE_BYTES.len() {
                let request = frame(id_of(s, k), 0, 1, format!("get long{k}\r\n").as_bytes());
                socket.send(&request).expect("send");
            }
        }
        for (s, socket) in sockets.iter().enumerate() {
            let mut messages: HashMap<u16, Message> = HashMap::new();
            let mut buf = vec![0u8; 65536];
            socket
                .set_read_timeout(Some(Duration::from_secs(2)))
                .unwrap();
            let complete = |m: &HashMap<u16, Message>| m.values().filter(|m| m.complete()).count();
            while complete(&messages) < LONG_VALUE_BYTES.len() {
                assert!(Instant::now() < deadline, "out of time");
                let n = socket.recv(&mut buf).unwrap_or_else(|e| {
                    panic!(
                        "{}: socket {s}, round {round}: {} of {} replies complete, then {e}",
                        server.describe(),
                        complete(&messages),
                        LONG_VALUE_BYTES.len()
                    )
                });
                let d = &buf[..n];
                assert!((8..=1400).contains(&n), "a datagram of {n} bytes");
                let id = u16::from_be_bytes([d[0], d[1]]);
                let seq = usize::from(u16::from_be_bytes([d[2], d[3]]));
                let total = usize::from(u16::from_be_bytes([d[4], d[5]]));
                assert_eq!(&d[6..8], &[0, 0]);
                assert!(
                    (0..LONG_VALUE_BYTES.len()).any(|k| id_of(s, k) == id),
                    "socket {s} got a reply to id {id}"
                );
                let message = messages.entry(id).or_default();
                assert!(
                    message.total == 0 || message.total == total,
                    "total changed"
                );
                message.total = total;
                assert!(seq < total, "sequence {seq} of {total}");
                assert!(
                    message.parts.insert(seq, d.to_vec()).is_none(),
                    "id {id}: datagram {seq} twice"
                );
            }
            for k in 0..LONG_VALUE_BYTES.len() {
                let (whole, lens) = messages[&id_of(s, k)].reassemble();
                assert!(
                    whole == long_reply(k),
                    "{}: socket {s}, round {round}, long{k}: {} bytes reassembled, {} wanted, \
                     or the bytes differ",
                    server.describe(),
                    whole.len(),
                    long_reply(k).len()
                );
                layouts.push(lens);
            }
        }
    }
    assert_eq!(
        tcp.stats("")["get_hits"],
        (SOCKETS * ROUNDS * LONG_VALUE_BYTES.len()).to_string()
    );
    layouts
}

/// Multi-datagram replies (memcached's 1400-byte split) to several ports at once: every
/// reply reassembles byte for byte, with memcached's datagram boundaries, from ferrocache
/// with UDP GSO (the default where the kernel offers it) and without it.
#[test]
fn long_replies_to_many_ports_at_once_reassemble_byte_exactly() {
    let want = long_replies_to_many_ports(ServerKind::Memcached, &[]);
    assert!(
        want.iter().all(|lens| lens.len() >= 2),
        "every reply takes several datagrams"
    );
    for extra in [&[][..], &["--udp-gso=off"][..]] {
        let got = long_replies_to_many_ports(ServerKind::Ferrocache, extra);
        assert_eq!(
            got, want,
            "datagram lengths, ferrocache {extra:?} against memcached"
        );
    }
}

/// A receiver that asks for GRO is handed a GSO group whole: a long reply then arrives
/// as one packet of its datagrams back to back, which shows that ferrocache sent it
/// with GSO; with `--udp-gso=off` it arrives as separate datagrams.
#[test]
fn a_long_reply_leaves_as_one_gso_packet_unless_turned_off() {
    let value = long_value(2);
    let mut set = format!("set long2 2 0 {}\r\n", value.len()).into_bytes();
    set.extend_from_slice(&value);
    set.extend_from_slice(b"\r\n");
    for (extra, setting) in [(&[][..], "on"), (&["--udp-gso=off"][..], "off")] {
        let (server, udp_port) = start(ServerKind::Ferrocache, extra);
        assert_eq!(server.stats("settings")["udp_gso"], setting);
        assert_eq!(server.connect().request(&set), b"STORED\r\n");
        let socket = client(udp_port);
        mmsg::set_gro(socket.as_raw_fd(), true).expect("UDP_GRO on the client socket");
        socket.send(&frame(9, 0, 1, b"get long2\r\n")).unwrap();
        let packets = collect(&socket);
        let sizes: Vec<usize> = packets.iter().map(Vec::len).collect();
        // Either way the bytes are memcached's six datagrams, back to back.
        let whole = packets.concat();
        let datagrams: Vec<&[u8]> = whole.chunks(1400).collect();
        assert_eq!(datagrams.len(), 6);
        let mut payload = Vec::new();
        for (seq, d) in datagrams.iter().enumerate() {
            assert_eq!(&d[..8], &frame(9, seq as u16, 6, b"")[..]);
            payload.extend_from_slice(&d[8..]);
        }
        assert!(payload == long_reply(2), "the reply's bytes differ");
        if setting == "on" {
            assert_eq!(sizes, [whole.len()], "one GSO packet");
        } else {
            assert_eq!(
                sizes,
                [1400, 1400, 1400, 1400, 1400, whole.len() - 5 * 1400]
            );
        }
    }
}
