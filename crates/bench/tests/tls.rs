//! ferrobench --tls against Debian's memcached -Z, started and stopped by
//! PID here with a throwaway certificate: a clean run with verified values,
//! mutual TLS, and the clear failures. Skipped, saying so, when
//! /usr/bin/memcached is missing. Each load run is bounded to well under 2 s.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{
    assert_clean, ferrobench, ferrobench_json, free_port, memcached_command, Memcached, MEMCACHED,
};
use ferrobench::compare::tls::Pki;
use ferrobench::tls::{Blocking, TlsClient, TlsOptions};

/// Starts memcached -Z on a free port with `pki`'s certificate and `extra`
/// `-o` options; None (with a note on stderr) when memcached is not
/// installed.
fn start_tls_memcached(pki: &Pki, extra: &str) -> Option<Memcached> {
    if !Path::new(MEMCACHED).exists() {
        eprintln!("skipped: {MEMCACHED} is missing (apt-get install -y memcached)");
        return None;
    }
    let client = TlsClient::new(&TlsOptions {
        ca: Some(pki.cert.clone()),
        ..TlsOptions::default()
    })
    .unwrap();
    for _ in 0..5 {
        let port = free_port();
        let child = memcached_command(port, 64)
            .args(["-U", "0", "-Z", "-o"])
            .arg(format!(
                "ssl_chain_cert={},ssl_key={}{extra}",
                pki.cert.display(),
                pki.key.display()
            ))
            .spawn()
            .expect("starting memcached");
        let mut mc = Memcached::of(child, port);
        if tls_ready(&mut mc, &client) {
            return Some(mc);
        }
    }
    panic!("memcached -Z did not start on a port of its own");
}

/// Polls (bounded: 5 s) until `stats` over TLS reports `mc`'s PID. (With
/// `ssl_verify_mode=2` the probe has no client certificate and is refused;
/// then the port accepting is enough.)
fn tls_ready(mc: &mut Memcached, client: &TlsClient) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    let addr = mc.addr().parse().unwrap();
    loop {
        if mc.exited() {
            return false;
        }
        if let Ok(mut conn) =
            Blocking::connect(Some(client), "127.0.0.1", &addr, Duration::from_secs(2))
        {
            conn.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            return match common::stats_pid_on(&mut conn) {
                Some(pid) => pid == mc.pid(),
                None => std::net::TcpStream::connect(addr).is_ok(),
            };
        }
        assert!(
            Instant::now() < deadline,
            "memcached -Z did not answer on port {}",
            mc.port
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_tls_run_against_memcached_is_clean_and_verified() {
    let pki = Pki::generate().unwrap();
    let Some(mc) = start_tls_memcached(&pki, "") else {
        return;
    };
    let addr = mc.addr();
    let ca = pki.cert.display().to_string();
    // Checked against the CA, values verified, single gets and 48-key gets.
    for preset in ["solarflare-get", "solarflare-mixed-b48", "legup-p16"] {
        let report = ferrobench_json(&[
            "--server",
            &addr,
            "--tls",
            "--tls-ca",
            &ca,
            "--preset",
            preset,
            "-c",
            "4",
            "--duration",
            "0.3",
            "--verify",
        ]);
        assert_clean(&report, preset);
        assert_eq!(report["config"]["tls"], true);
        assert_eq!(report["verify_failures"], 0, "{preset}\n{report:#}");
    }
    // Without a CA any certificate goes; with the request count exact.
    let report = ferrobench_json(&[
        "--server",
        &addr,
        "--tls",
        "--requests",
        "2000",
        "--preload",
        "--keyspace",
        "100",
        "-c",
        "3",
    ]);
    assert_clean(&report, "--requests");
    assert_eq!(report["ops"], 2000);
}

#[test]
fn mutual_tls_needs_the_client_certificate() {
    let server = Pki::generate().unwrap();
    let client = Pki::generate().unwrap();
    let opts = format!(",ssl_ca_cert={},ssl_verify_mode=2", client.cert.display());
    let Some(mc) = start_tls_memcached(&server, &opts) else {
        return;
    };
    let addr = mc.addr();
    let (cert, key) = (
        client.cert.display().to_string(),
        client.key.display().to_string(),
    );
    let report = ferrobench_json(&[
        "--server",
        &addr,
        "--tls",
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--preset",
        "solarflare-get",
        "-c",
        "2",
        "--duration",
        "0.2",
    ]);
    assert_clean(&report, "mutual TLS");
    let out = ferrobench(&[
        "--server",
        &addr,
        "--tls",
        "--preset",
        "solarflare-get",
        "-c",
        "2",
        "--duration",
        "0.2",
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "refused without a client certificate"
    );
}

#[test]
fn tls_against_a_plain_server_fails_clearly_and_soon() {
    if !Path::new(MEMCACHED).exists() {
        eprintln!("skipped: {MEMCACHED} is missing (apt-get install -y memcached)");
        return;
    }
    let mc = Memcached::start(false);
    let started = Instant::now();
    let out = ferrobench(&[
        "--server",
        &mc.addr(),
        "--tls",
        "-c",
        "1",
        "--duration",
        "0.2",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("TLS handshake"), "{err}");
    // The handshake is bounded by the connect timeout (3 s) and a margin.
    assert!(started.elapsed() < Duration::from_secs(10));

    // And flags that make no sense together are refused before any connect.
    let out = ferrobench(&["--server", &mc.addr(), "--tls", "--udp"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--tls and --udp"));
    let out = ferrobench(&["--server", &mc.addr(), "--tls-ca", "x.pem"]);
    assert_eq!(out.status.code(), Some(2), "clap: --tls-ca needs --tls");
}
