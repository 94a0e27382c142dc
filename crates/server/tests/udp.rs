//! UDP (`-U`) against Debian's memcached 1.6.18: the same datagrams go to both servers
//! and the reply datagrams, frame headers included, must be byte-identical. Then the
//! batched path: many requests in flight from several source ports at once, each reply
//! matched to its request id.

mod common;

use std::collections::HashMap;
use std::net::UdpSocket;
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
    // 128 requests in flight at a time: well within the server socket's default
    // receive buffer, so that none is dropped before the server reads it.
    const SOCKETS: usize = 8;
    const IN_FLIGHT: usize = 16;
    const ROUNDS: usize = 8;
    let (server, udp_port) = start(ServerKind::under_test(), &[]);
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
