//! ferrobench --tls against Debian's memcached -Z, started and stopped by
//! PID here with a throwaway certificate: a clean run with verified values,
//! mutual TLS, and the clear failures. Skipped, saying so, when
//! /usr/bin/memcached is missing. Each load run is bounded to well under 2 s.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{ferrobench, ferrobench_json, free_port, Memcached, MEMCACHED};
use ferrobench::compare::tls::Pki;
use ferrobench::tls::{Blocking, TlsClient, TlsOptions};

/// memcached -Z on a free port, killed by PID on drop.
struct TlsMemcached {
    child: Child,
    port: u16,
}

impl TlsMemcached {
    /// Starts it with `pki`'s certificate and `extra` `-o` options; None
    /// (with a note on stderr) when memcached is not installed.
    fn start(pki: &Pki, extra: &str) -> Option<TlsMemcached> {
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
            let child = Command::new(MEMCACHED)
                .args([
                    "-u",
                    "root",
                    "-l",
                    "127.0.0.1",
                    "-t",
                    "1",
                    "-m",
                    "64",
                    "-U",
                    "0",
                ])
                .args(["-p", &port.to_string(), "-Z", "-o"])
                .arg(format!(
                    "ssl_chain_cert={},ssl_key={}{extra}",
                    pki.cert.display(),
                    pki.key.display()
                ))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("starting memcached");
            let mut mc = TlsMemcached { child, port };
            if mc.wait_ready(&client) {
                return Some(mc);
            }
        }
        panic!("memcached -Z did not start on a port of its own");
    }

    /// Polls (bounded: 5 s) until `stats` over TLS reports this child's PID.
    /// (With `ssl_verify_mode=2` the probe has no client certificate and is
    /// refused; then the port accepting is enough.)
    fn wait_ready(&mut self, client: &TlsClient) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        let addr = format!("127.0.0.1:{}", self.port).parse().unwrap();
        loop {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if let Ok(mut conn) =
                Blocking::connect(Some(client), "127.0.0.1", &addr, Duration::from_secs(2))
            {
                conn.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                return match common::stats_pid_on(&mut conn) {
                    Some(pid) => pid == self.child.id(),
                    None => std::net::TcpStream::connect(addr).is_ok(),
                };
            }
            assert!(
                Instant::now() < deadline,
                "memcached -Z did not answer on port {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for TlsMemcached {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn assert_clean(report: &serde_json::Value, what: &str) {
    assert!(
        report["ops"].as_u64().unwrap() > 0,
        "{what}: no ops\n{report:#}"
    );
    assert_eq!(report["errors"], 0, "{what}: errors\n{report:#}");
    assert_eq!(report["timeouts"], 0, "{what}: timeouts\n{report:#}");
    assert_eq!(report["hit_ratio"], 1.0, "{what}: hit ratio\n{report:#}");
}

#[test]
fn a_tls_run_against_memcached_is_clean_and_verified() {
    let pki = Pki::generate().unwrap();
    let Some(mc) = TlsMemcached::start(&pki, "") else {
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
    let Some(mc) = TlsMemcached::start(&server, &opts) else {
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
