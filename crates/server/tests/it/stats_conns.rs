//! `stats conns`: every open socket in memcached 1.6.18's form. The same checks run
//! against memcached, so they hold for the reference too: descriptors and timings
//! differ between the two servers, the shape and the addresses do not.

use crate::common;

use std::collections::BTreeMap;
use std::net::UdpSocket;
use std::time::{Duration, Instant};

use common::{Client, ServerKind, ServerProcess};

/// `stats conns` as descriptor -> (name -> value), in the order of the reply.
fn conns(client: &mut Client) -> BTreeMap<u32, Vec<(String, String)>> {
    let text = client.request_str("stats conns\r\n");
    assert!(text.ends_with("END\r\n"), "{text:?}");
    let mut out: BTreeMap<u32, Vec<(String, String)>> = BTreeMap::new();
    for line in text.lines().filter(|l| *l != "END") {
        let rest = line
            .strip_prefix("STAT ")
            .unwrap_or_else(|| panic!("{line:?}"));
        let (name, value) = rest.split_once(' ').unwrap_or_else(|| panic!("{line:?}"));
        let (fd, field) = name.split_once(':').unwrap_or_else(|| panic!("{line:?}"));
        let fd: u32 = fd.parse().unwrap_or_else(|_| panic!("{line:?}"));
        out.entry(fd)
            .or_default()
            .push((field.to_string(), value.to_string()));
    }
    out
}

/// The entry whose `addr` is `addr`, as its field names and values.
fn entry_with_addr<'a>(
    all: &'a BTreeMap<u32, Vec<(String, String)>>,
    addr: &str,
) -> Option<&'a Vec<(String, String)>> {
    all.values()
        .find(|fields| fields.iter().any(|(k, v)| k == "addr" && v == addr))
}

fn names(fields: &[(String, String)]) -> Vec<&str> {
    fields.iter().map(|(k, _)| k.as_str()).collect()
}

fn value<'a>(fields: &'a [(String, String)], name: &str) -> &'a str {
    &fields.iter().find(|(k, _)| k == name).unwrap().1
}

fn check(kind: ServerKind) {
    let udp_port = UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .expect("free UDP port")
        .port();
    let udp = udp_port.to_string();
    let server = ServerProcess::start(kind, &["-t", "2", "-U", &udp]);
    let port = server.port;
    let who = kind.name();

    let mut idle = server.connect();
    assert!(idle.request_str("version\r\n").starts_with("VERSION "));
    let idle_addr = format!("tcp:{}", idle.local_addr());
    let mut asking = server.connect();
    let asking_addr = format!("tcp:{}", asking.local_addr());
    let all = conns(&mut asking);

    let listening: Vec<_> = all
        .values()
        .filter(|f| f.iter().any(|(k, v)| k == "state" && v == "conn_listening"))
        .collect();
    assert!(
        !listening.is_empty(),
        "{who}: no listening socket in {all:?}"
    );
    for f in &listening {
        assert_eq!(names(f), ["addr", "state", "secs_since_last_cmd"], "{who}");
        assert_eq!(value(f, "addr"), format!("tcp:127.0.0.1:{port}"), "{who}");
    }
    let udp_sockets: Vec<_> = all
        .values()
        .filter(|f| f.iter().any(|(k, _)| k == "UDP"))
        .collect();
    assert!(!udp_sockets.is_empty(), "{who}: no UDP socket in {all:?}");
    for f in &udp_sockets {
        assert_eq!(
            names(f),
            ["UDP", "addr", "state", "secs_since_last_cmd"],
            "{who}"
        );
        assert_eq!(
            value(f, "addr"),
            format!("udp:127.0.0.1:{udp_port}"),
            "{who}"
        );
        assert_eq!(value(f, "state"), "conn_read", "{who}");
    }

    let client_fields = ["addr", "listen_addr", "state", "secs_since_last_cmd"];
    let f = entry_with_addr(&all, &idle_addr)
        .unwrap_or_else(|| panic!("{who}: {idle_addr} missing from {all:?}"));
    assert_eq!(names(f), client_fields, "{who}");
    assert_eq!(
        value(f, "listen_addr"),
        format!("tcp:127.0.0.1:{port}"),
        "{who}"
    );
    assert_eq!(value(f, "state"), "conn_read", "{who}");
    let idle_secs: u32 = value(f, "secs_since_last_cmd").parse().unwrap();
    assert!(idle_secs <= 5, "{who}: {f:?}");
    let f = entry_with_addr(&all, &asking_addr)
        .unwrap_or_else(|| panic!("{who}: {asking_addr} missing from {all:?}"));
    assert_eq!(names(f), client_fields, "{who}");
    assert_eq!(value(f, "state"), "conn_parse_cmd", "{who}");
    assert_eq!(value(f, "secs_since_last_cmd"), "0", "{who}");

    // A closed connection leaves the list once the server has seen the close.
    drop(idle);
    let deadline = Instant::now() + Duration::from_secs(5);
    while entry_with_addr(&conns(&mut asking), &idle_addr).is_some() {
        assert!(Instant::now() < deadline, "{who}: {idle_addr} still listed");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn stats_conns_lists_sockets_as_memcached_does() {
    check(ServerKind::Ferrocache);
}

#[test]
fn the_same_checks_hold_for_memcached() {
    check(ServerKind::Memcached);
}

#[test]
fn stats_conns_on_io_uring_and_epoll() {
    for backend in ["uring", "epoll"] {
        let server = ServerProcess::start(
            ServerKind::Ferrocache,
            &["-t", "1", "-U", "0", "--io-backend", backend],
        );
        let mut idle = server.connect();
        assert!(idle.request_str("version\r\n").starts_with("VERSION "));
        let idle_addr = format!("tcp:{}", idle.local_addr());
        let mut asking = server.connect();
        let all = conns(&mut asking);
        let f = entry_with_addr(&all, &idle_addr)
            .unwrap_or_else(|| panic!("{backend}: {idle_addr} missing from {all:?}"));
        assert_eq!(value(f, "state"), "conn_read", "{backend}");
        drop(idle);
        let deadline = Instant::now() + Duration::from_secs(5);
        while entry_with_addr(&conns(&mut asking), &idle_addr).is_some() {
            assert!(
                Instant::now() < deadline,
                "{backend}: {idle_addr} still listed"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
