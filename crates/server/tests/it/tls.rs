//! TLS (`-Z`): text, meta and binary over TLS, large values and requests split across
//! records, plain listeners beside TLS ones, mutual TLS, certificate refresh with
//! connections open, bad certificates, plaintext clients, and handshakes that never
//! finish. The byte-for-byte comparison with memcached over TLS is in
//! `differential.rs` (`random_streams_over_tls`); the backends are both covered by
//! `scripts/test`, which runs this suite on each.

use crate::common;
use crate::common::tls as tls_client;

use std::fs;
use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{Client, Ending, Rng, ServerKind, ServerProcess, READ_TIMEOUT};
use tls_client::{client_config, client_config_with, connect_to, fixture, server_args, session};

fn start(kind: ServerKind, extra: &str, more: &[&str]) -> ServerProcess {
    let mut args = server_args(extra);
    args.extend(more.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ServerProcess::start(kind, &args)
}

/// The server's `stats` number `name`, read over a fresh TLS connection.
fn stat(server: &ServerProcess, name: &str) -> u64 {
    connect_to(server).stat(name)
}

fn value(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    (0..len).map(|_| b'a' + rng.below(26) as u8).collect()
}

#[test]
fn text_meta_and_binary_over_tls() {
    let server = start(ServerKind::Ferrocache, "", &[]);
    let mut c = connect_to(&server);
    assert!(session(&c).is_some_and(|t| t.protocol_version().is_some()));
    assert_eq!(c.request(b"set small 5 0 2\r\nhi\r\n"), b"STORED\r\n");
    assert_eq!(
        c.request(b"get small\r\n"),
        b"VALUE small 5 2\r\nhi\r\nEND\r\n"
    );
    // Values of several records each, in both directions.
    for (i, len) in [16_000usize, 16_385, 100_000, 1_000_000]
        .into_iter()
        .enumerate()
    {
        let v = value(len, i as u64);
        let mut req = format!("set big{i} 0 0 {len}\r\n").into_bytes();
        req.extend_from_slice(&v);
        req.extend_from_slice(b"\r\n");
        assert_eq!(c.request(&req), b"STORED\r\n", "set of {len} bytes");
        let mut want = format!("VALUE big{i} 0 {len}\r\n").into_bytes();
        want.extend_from_slice(&v);
        want.extend_from_slice(b"\r\nEND\r\n");
        assert!(
            c.request(format!("get big{i}\r\n").as_bytes()) == want,
            "get of {len} bytes"
        );
    }
    // Meta commands.
    assert_eq!(c.request(b"ms m1 3 T0 F7\r\nabc\r\n"), b"HD\r\n");
    assert_eq!(c.request(b"mg m1 v f\r\n"), b"VA 3 f7\r\nabc\r\n");
    // A pipeline of 200 gets in one write: every reply, in order.
    let mut pipeline = Vec::new();
    let mut want = Vec::new();
    for i in 0..200 {
        pipeline.extend_from_slice(format!("get small\r\nget none{i}\r\n").as_bytes());
        want.extend_from_slice(b"VALUE small 5 2\r\nhi\r\nEND\r\nEND\r\n");
    }
    assert_eq!(c.request(&pipeline), want);

    // The binary protocol: a set then a get of the same key (opcodes 0x01 and 0x00).
    let mut b = connect_to(&server);
    let mut set = vec![0x80, 0x01, 0, 3, 8, 0, 0, 0, 0, 0, 0, 19];
    set.extend_from_slice(&[0; 12]); // opaque, cas
    set.extend_from_slice(&[0, 0, 0, 9, 0, 0, 0, 0]); // flags 9, exptime 0
    set.extend_from_slice(b"binvalue!!x");
    b.send(&set);
    let reply = b.read_until(READ_TIMEOUT, |r| r.len() >= 24);
    assert_eq!(reply.bytes[..2], [0x81, 0x01], "binary set reply");
    assert_eq!(reply.bytes[6..8], [0, 0], "binary set status");
    let mut get = vec![0x80, 0x00, 0, 3, 0, 0, 0, 0, 0, 0, 0, 3];
    get.extend_from_slice(&[0; 12]);
    get.extend_from_slice(b"bin");
    b.send(&get);
    let reply = b.read_until(READ_TIMEOUT, |r| r.len() >= 24 + 4 + 8);
    assert_eq!(reply.bytes[..2], [0x81, 0x00], "binary get reply");
    assert_eq!(&reply.bytes[24..28], &[0, 0, 0, 9], "flags");
    assert_eq!(&reply.bytes[28..], b"value!!x");
}

/// Requests cut into random pieces, each its own TLS record: every reply whole and in
/// order (memcached stalls on this; see `docs/protocol.md`).
#[test]
fn requests_split_across_records() {
    let server = start(ServerKind::Ferrocache, "", &[]);
    let mut c = connect_to(&server);
    let mut rng = Rng::new(7);
    for round in 0..20u64 {
        let len = rng.range_usize(1, 40_000);
        let v = value(len, round);
        let mut req = format!("set key{round} {round} 0 {len}\r\n").into_bytes();
        req.extend_from_slice(&v);
        req.extend_from_slice(format!("\r\nget key{round}\r\nmn\r\n").as_bytes());
        c.send_in_pieces(&req, &mut rng, 64, round % 4 == 0);
        let reply = c.read_reply();
        assert_eq!(
            reply.ending,
            Ending::Done,
            "round {round}: {}",
            reply.describe()
        );
        let mut want = format!("STORED\r\nVALUE key{round} {round} {len}\r\n").into_bytes();
        want.extend_from_slice(&v);
        want.extend_from_slice(b"\r\nEND\r\n");
        assert!(reply.bytes == want, "round {round}: {}", reply.describe());
    }
}

/// `-l notls:ADDR:PORT` serves plain TCP beside the TLS listener, on one cache.
#[test]
fn notls_listener_beside_tls() {
    for kind in [ServerKind::Memcached, ServerKind::Ferrocache] {
        let plain_port = common::probably_free_port();
        let notls = format!("notls:127.0.0.1:{plain_port}");
        let server = start(kind, "", &["-l", &notls]);
        let mut tls = connect_to(&server);
        assert_eq!(tls.request(b"set shared 0 0 3\r\nabc\r\n"), b"STORED\r\n");
        let mut plain = Client::connect(plain_port);
        assert_eq!(
            plain.request(b"get shared\r\n"),
            b"VALUE shared 0 3\r\nabc\r\nEND\r\n",
            "{}",
            kind.name()
        );
    }
}

/// A plaintext client on a TLS port is closed without a byte, as memcached does, and
/// counted as a failed handshake.
#[test]
fn plaintext_client_on_tls_port() {
    for kind in [ServerKind::Memcached, ServerKind::Ferrocache] {
        let server = start(kind, "", &[]);
        let before = stat(&server, "ssl_handshake_errors");
        let mut c = Client::connect(server.port);
        c.send(b"get foo\r\n");
        let reply = c.read_to_close(READ_TIMEOUT);
        assert_eq!(reply.ending, Ending::Closed, "{}", kind.name());
        assert!(
            reply.bytes.is_empty(),
            "{}: {}",
            kind.name(),
            reply.describe()
        );
        // memcached counts the failure only when the bytes came before its listener
        // thread's SSL_accept, which depends on timing; ferrocache always counts it.
        // The counter moves on the server's own schedule: poll, bounded.
        let deadline = Instant::now() + READ_TIMEOUT;
        while kind == ServerKind::Ferrocache && stat(&server, "ssl_handshake_errors") == before {
            assert!(Instant::now() < deadline, "{}: not counted", kind.name());
            std::thread::sleep(Duration::from_millis(20));
        }
        // The server still serves TLS.
        connect_to(&server).assert_answers(kind.name());
    }
}

/// `ssl_verify_mode` 1 (a certificate checked if sent), 2 and 3 (required).
#[test]
fn mutual_tls_modes() {
    let ca = format!("ssl_ca_cert={}", fixture("ca.pem"));
    for mode in 1..=3 {
        let server = start(
            ServerKind::Ferrocache,
            &format!("{ca},ssl_verify_mode={mode}"),
            &[],
        );
        let port = server.port;
        // A client certificate from the CA: served in every mode.
        tls_client::connect(port, client_config(Some("client"))).assert_answers("CA client");
        // One from another CA: refused in every mode.
        assert!(
            refused(port, client_config(Some("rogue-client"))),
            "mode {mode}: a certificate from another CA was served"
        );
        // None: served in mode 1 only.
        let anonymous = refused(port, client_config(None));
        assert_eq!(
            anonymous,
            mode >= 2,
            "mode {mode}: client without a certificate"
        );
        let settings =
            tls_client::connect(server.port, client_config(Some("client"))).stats("settings");
        let flags = [0, 1, 3, 7][mode];
        assert_eq!(settings["ssl_verify_mode"], flags.to_string());
    }
}

/// Whether a TLS client with `config` fails to get an answer.
fn refused(port: u16, config: std::sync::Arc<rustls::ClientConfig>) -> bool {
    let Ok(mut c) = tls_client::try_connect(port, config) else {
        return true;
    };
    // Under TLS 1.3 the client's side of the handshake ends before the server checks
    // its certificate: the refusal arrives as an alert on the first read.
    if c.try_send(b"version\r\n").is_err() {
        return true;
    }
    let reply = c.read_until(READ_TIMEOUT, |b| b.ends_with(b"\r\n"));
    !reply.bytes.starts_with(b"VERSION ")
}

/// `refresh_certs` loads the files again: new connections get the new certificate,
/// open ones keep working, and a broken file leaves the old one in place with
/// memcached's error line. SIGHUP does the same.
#[test]
fn refresh_certs_with_connections_open() {
    let dir = tempdir("refresh");
    let (chain, key) = (format!("{dir}/chain.pem"), format!("{dir}/key.pem"));
    fs::copy(fixture("server.pem"), &chain).unwrap();
    fs::copy(fixture("server.key"), &key).unwrap();
    let args = [
        "-Z".to_string(),
        "-o".to_string(),
        format!("ssl_chain_cert={chain},ssl_key={key}"),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = ServerProcess::start(ServerKind::Ferrocache, &args);
    let mut old = connect_to(&server);
    assert_eq!(old.request(b"set k 0 0 1\r\nx\r\n"), b"STORED\r\n");
    let first = peer_certificate(&old);
    assert_eq!(first, fixture_der("server.pem"));

    fs::copy(fixture("server2.pem"), &chain).unwrap();
    fs::copy(fixture("server2.key"), &key).unwrap();
    assert_eq!(old.request(b"refresh_certs\r\n"), b"OK\r\n");
    let new = connect_to(&server);
    assert_eq!(peer_certificate(&new), fixture_der("server2.pem"));
    assert_eq!(old.request(b"get k\r\n"), b"VALUE k 0 1\r\nx\r\nEND\r\n");
    assert_eq!(
        peer_certificate(&old),
        first,
        "an open connection keeps its session"
    );

    // A chain that does not parse: refused with memcached's message, old files kept.
    fs::write(&chain, b"not a certificate\n").unwrap();
    let reply = old.request_str("refresh_certs\r\n");
    assert!(
        reply.starts_with(&format!("Error loading the certificate chain: {chain} : ")),
        "{reply:?}"
    );
    assert_eq!(
        peer_certificate(&connect_to(&server)),
        fixture_der("server2.pem")
    );
    let stats = old.stats("");
    assert!(stats.contains_key("time_since_server_cert_refresh"));

    // SIGHUP reloads them too, and the server keeps running.
    fs::copy(fixture("server.pem"), &chain).unwrap();
    fs::copy(fixture("server.key"), &key).unwrap();
    // SAFETY: kill(2) on the child's PID, which is not reaped yet (the ServerProcess
    // owns it), touches no memory of this process.
    assert_eq!(unsafe { libc::kill(server.id() as i32, libc::SIGHUP) }, 0);
    let deadline = Instant::now() + READ_TIMEOUT;
    while peer_certificate(&connect_to(&server)) != fixture_der("server.pem") {
        assert!(
            Instant::now() < deadline,
            "SIGHUP did not reload the certificate"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(old.request(b"get k\r\n"), b"VALUE k 0 1\r\nx\r\nEND\r\n");
    fs::remove_dir_all(&dir).unwrap();
}

/// Without `-Z`, `refresh_certs` answers memcached's line, even under noreply.
#[test]
fn refresh_certs_without_tls() {
    for kind in [ServerKind::Memcached, ServerKind::Ferrocache] {
        let server = ServerProcess::start(kind, &[]);
        let mut c = server.connect();
        assert_eq!(
            c.request(b"refresh_certs\r\nrefresh_certs noreply\r\n"),
            b"Error TLS not enabled\r\nError TLS not enabled\r\n",
            "{}",
            kind.name()
        );
    }
}

/// An expired certificate is served (neither server checks its own), and a client that
/// checks dates refuses it; a key that does not match the certificate stops start-up.
#[test]
fn expired_and_mismatched_certificates() {
    let args = [
        "-Z".to_string(),
        "-o".to_string(),
        format!(
            "ssl_chain_cert={},ssl_key={}",
            fixture("expired.pem"),
            fixture("expired.key")
        ),
    ];
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = ServerProcess::start(ServerKind::Ferrocache, &argv);
    let err = tls_client::try_connect(server.port, client_config(None))
        .err()
        .expect("an expired certificate was accepted");
    assert!(err.to_string().contains("expired"), "{err}");
    // A client that trusts anything still gets served.
    tls_client::connect(server.port, client_config_with(None, None)).assert_answers("any");

    let mismatched = vec![
        "-p".to_string(),
        common::probably_free_port().to_string(),
        "-Z".to_string(),
        "-o".to_string(),
        format!(
            "ssl_chain_cert={},ssl_key={}",
            fixture("server.pem"),
            fixture("server2.key")
        ),
    ];
    let out = common::run_to_exit(ServerKind::Ferrocache, &mismatched);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Error validating the certificate"),
        "{stderr}"
    );
}

/// Connections that never send a ClientHello hold a slot for at most the handshake
/// limit: with `-c` full of them, a real client is refused, then served once they are
/// closed, and each is counted as a failed handshake.
#[test]
fn stalled_handshakes_are_bounded() {
    let server = start(ServerKind::Ferrocache, "", &["-c", "8", "-t", "1"]);
    let before = stat(&server, "ssl_handshake_errors");
    let mut stalled: Vec<TcpStream> = Vec::new();
    // Fill every slot: the server counts one more during each stat read.
    while stalled.len() < 12 {
        stalled.push(TcpStream::connect(("127.0.0.1", server.port)).unwrap());
    }
    // A real client now either gets memcached's refusal or waits: never a session.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(mut c) = tls_client::try_connect(server.port, client_config(None)) {
            if c.try_send(b"version\r\n").is_ok() {
                let reply = c.read_until(READ_TIMEOUT, |b| b.ends_with(b"\r\n"));
                if reply.bytes.starts_with(b"VERSION ") {
                    break;
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "stalled handshakes were never closed"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Every stalled socket the server took is closed at the handshake limit and counted.
    // That is 8, or 7 when the connection that read `before` was still open while they
    // were accepted (its close is seen later, on a busy machine, and frees a slot that
    // the real client may take before the limit).
    // Until then the slots may still be full (the stalled sockets left, and the real
    // client's, whose close the server has not seen yet), so a refused read is a retry.
    let counted_by = Instant::now() + Duration::from_secs(60);
    let errors = || {
        tls_client::try_connect(server.port, client_config(None))
            .map_or(0, |mut c| c.stat("ssl_handshake_errors"))
    };
    while errors() < before + 7 {
        assert!(
            Instant::now() < counted_by,
            "stalled handshakes were not counted"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // The stalled sockets were closed by the server.
    for mut s in stalled {
        let _ = s.write_all(b"x");
    }
}

fn peer_certificate(c: &Client) -> Vec<u8> {
    session(c)
        .and_then(|t| t.peer_certificates())
        .and_then(|certs| certs.first())
        .expect("a peer certificate")
        .to_vec()
}

fn fixture_der(name: &str) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::from_pem_file(fixture(name))
        .expect("fixture")
        .to_vec()
}

fn tempdir(tag: &str) -> String {
    let dir = std::env::temp_dir().join(format!("ferrocache-tls-{tag}-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    dir.to_string_lossy().into_owned()
}

/// Open TLS sessions count in the connections' memory (`conn_state_bytes`), which is
/// what connections charge to `-m`.
#[test]
fn tls_sessions_count_in_connection_memory() {
    let server = start(ServerKind::Ferrocache, "", &[]);
    let mut c = connect_to(&server);
    let before = c.stat("conn_state_bytes");
    let open: Vec<Client> = (0..32).map(|_| connect_to(&server)).collect();
    let after = c.stat("conn_state_bytes");
    assert!(
        after >= before + 32 * 8192,
        "32 TLS sessions: conn_state_bytes {before} -> {after}"
    );
    drop(open);
}

/// `ssl_session_cache`: a client that comes back resumes its session, and
/// `ssl_new_sessions` counts the sessions stored; without it, nothing is resumed.
#[test]
fn session_cache_resumes() {
    for cache in [true, false] {
        let server = start(
            ServerKind::Ferrocache,
            if cache { "ssl_session_cache" } else { "" },
            &[],
        );
        // One client configuration, so its session store carries over.
        let config = client_config(None);
        let mut first = tls_client::connect(server.port, config.clone());
        first.assert_answers("first");
        let mut second = tls_client::connect(server.port, config);
        second.assert_answers("second");
        let kind = session(&second).and_then(|t| t.handshake_kind());
        let resumed = kind == Some(rustls::HandshakeKind::Resumed);
        assert_eq!(resumed, cache, "session cache {cache}: {kind:?}");
        let stats = second.stats("");
        if cache {
            assert!(stats["ssl_new_sessions"].parse::<u64>().unwrap() >= 1);
        } else {
            assert!(!stats.contains_key("ssl_new_sessions"));
        }
    }
}
