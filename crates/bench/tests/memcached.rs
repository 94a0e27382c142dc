//! ferrobench against Debian's memcached: every preset, the open loop's rate,
//! verification, UDP, several servers, and the error paths. Each load run is
//! bounded to well under 2 s.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

use common::{assert_clean, ferrobench, ferrobench_json, free_port, Memcached};

#[test]
fn every_preset_runs_cleanly() {
    let mc = Memcached::start(false);
    let addr = mc.addr();
    for preset in ferrobench::cli::PRESETS {
        let mut args = vec!["--server", &addr, "--preset", preset, "--connections", "8"];
        if *preset == "thesis-qos" {
            args.extend(["--slo-steps", "2", "--duration", "0.3"]);
        } else {
            args.extend(["--duration", "0.4"]);
        }
        let report = ferrobench_json(&args);
        assert_clean(&report, preset);
        assert_eq!(report["config"]["preset"], *preset);
        if *preset == "thesis-qos" {
            assert_eq!(report["search"]["kind"], "slo");
            assert_eq!(report["search"]["points"].as_array().unwrap().len(), 2);
        }
    }
}

#[test]
fn open_loop_achieves_a_modest_rate() {
    let mc = Memcached::start(false);
    let report = ferrobench_json(&[
        "--server",
        &mc.addr(),
        "--rate",
        "4000",
        "--duration",
        "1.5",
        "--warmup",
        "0.2",
        "--preload",
        "--keyspace",
        "1000",
        "--connections",
        "4",
    ]);
    assert_clean(&report, "open loop");
    let achieved = report["ops_per_sec"].as_f64().unwrap();
    assert!(
        (achieved - 4000.0).abs() / 4000.0 < 0.05,
        "achieved {achieved} ops/s of 4000"
    );
    assert_eq!(report["dropped"], 0);
    assert_eq!(report["config"]["load"]["kind"], "open");
}

#[test]
fn request_count_is_exact_and_json_has_the_documented_fields() {
    let mc = Memcached::start(false);
    let report = ferrobench_json(&[
        "--server",
        &mc.addr(),
        "--requests",
        "3000",
        "--threads",
        "2",
        "-c",
        "6",
        "--ratio",
        "1:1",
    ]);
    assert_eq!(report["ops"], 3000);
    for field in [
        "ops_per_sec",
        "keys_per_sec",
        "hit_ratio",
        "errors",
        "dropped",
        "client_cpu_secs",
        "servers",
    ] {
        assert!(!report[field].is_null(), "missing {field}");
    }
    for p in ["p50", "p90", "p99", "p999", "p9999", "max"] {
        assert!(
            report["latency_us"][p].as_f64().unwrap() > 0.0,
            "latency_us.{p}"
        );
    }
}

#[test]
fn verify_passes_on_honest_values_and_fails_on_corrupt_ones() {
    let mc = Memcached::start(false);
    let addr = mc.addr();
    let report = ferrobench_json(&[
        "--server",
        &addr,
        "--verify",
        "--preload",
        "--keyspace",
        "200",
        "--duration",
        "0.4",
        "-c",
        "4",
        "--ratio",
        "3:1",
    ]);
    assert_clean(&report, "verify");
    assert_eq!(report["verify_failures"], 0);

    corrupt_value_is_reported(
        &addr,
        "text",
        b"set k0000000000000000000 0 0 20\r\nAAAAAAAAAAAAAAAAAAAA\r\n",
        b"STORED\r\n",
    );
}

/// Overwrites key 0 with a value that carries no valid checksum (`store`, answered
/// with `stored`), then a `--verify` run speaking `protocol` must fail naming the key.
fn corrupt_value_is_reported(addr: &str, protocol: &str, store: &[u8], stored: &[u8]) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(store).unwrap();
    let mut buf = vec![0; stored.len()];
    s.read_exact(&mut buf).unwrap();
    assert_eq!(buf, stored, "{protocol}");
    let out = ferrobench(&[
        "--server",
        addr,
        "--protocol",
        protocol,
        "--verify",
        "--keyspace",
        "1",
        "--ratio",
        "1:0",
        "--duration",
        "0.2",
        "-c",
        "1",
        "--quiet",
    ]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{protocol}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("corrupt value for key \"k0000000000000000000\""));
}

#[test]
fn udp_gets_hit_after_preload() {
    let mc = Memcached::start(true);
    let report = ferrobench_json(&[
        "--server",
        &mc.addr(),
        "--udp",
        "--preload",
        "--keyspace",
        "500",
        "--ratio",
        "1:0",
        "--batch",
        "4",
        "--duration",
        "0.5",
        "-c",
        "4",
    ]);
    assert_clean(&report, "udp");
    assert_eq!(report["config"]["transport"], "udp");
}

#[test]
fn meta_protocol_gets_sets_and_verifies_over_tcp_and_udp() {
    for udp in [false, true] {
        let mc = Memcached::start(udp);
        let addr = mc.addr();
        let mut args = vec![
            "--server",
            &addr,
            "--protocol",
            "meta",
            "--verify",
            "--preload",
            "--keyspace",
            "300",
            "--batch",
            "4",
            "--ratio",
            "3:1",
            "--duration",
            "0.4",
            "-c",
            "4",
        ];
        if udp {
            args.push("--udp");
        }
        let report = ferrobench_json(&args);
        let what = if udp { "meta over udp" } else { "meta" };
        assert_clean(&report, what);
        assert_eq!(report["config"]["protocol"], "meta", "{what}");
        assert_eq!(report["verify_failures"], 0, "{what}");
        // Misses are quiet (`mg ... q`): keys never stored count as misses, not errors.
        let report = ferrobench_json(&[
            "--server",
            &addr,
            "--protocol",
            "meta",
            "--preload",
            "false",
            "--keyspace",
            "100000",
            "--ratio",
            "1:0",
            "--batch",
            "4",
            "--duration",
            "0.3",
            "-c",
            "2",
        ]);
        assert_eq!(report["errors"], 0, "{what}, misses\n{report:#}");
        assert!(
            report["hit_ratio"].as_f64().unwrap() < 0.1,
            "{what}: {report:#}"
        );
    }
    // A value without its checksum, read with mg, is reported as corrupt.
    let mc = Memcached::start(false);
    corrupt_value_is_reported(
        &mc.addr(),
        "meta",
        b"ms k0000000000000000000 20\r\nAAAAAAAAAAAAAAAAAAAA\r\n",
        b"HD\r\n",
    );
}

#[test]
fn two_servers_share_keys_by_ketama() {
    let (a, b) = (Memcached::start(false), Memcached::start(false));
    let report = ferrobench_json(&[
        "--server",
        &a.addr(),
        "--server",
        &b.addr(),
        "--preload",
        "--keyspace",
        "2000",
        "--batch",
        "8",
        "--ratio",
        "9:1",
        "--duration",
        "0.5",
        "-c",
        "4",
    ]);
    assert_clean(&report, "two servers");
    let servers = report["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 2);
    for s in servers {
        assert!(s["ops"].as_u64().unwrap() > 0, "{s}");
        assert_eq!(s["hit_ratio"], 1.0);
    }
}

#[test]
fn refused_connection_is_a_clear_error() {
    let port = free_port().to_string();
    let out = ferrobench(&[
        "--server",
        &format!("127.0.0.1:{port}"),
        "--duration",
        "0.2",
        "--quiet",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot connect to server") && err.contains("refused"),
        "{err}"
    );
}

#[test]
fn server_closing_mid_run_is_a_clear_error() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = [0; 64];
        let _ = s.read(&mut buf);
        s.write_all(b"END\r\n").unwrap();
        // Dropping the socket closes it with a request in flight.
    });
    let out = ferrobench(&[
        "--server",
        &addr,
        "-c",
        "1",
        "--ratio",
        "1:0",
        "--duration",
        "1",
        "--quiet",
    ]);
    server.join().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("closed the connection mid-run"), "{err}");
}

#[test]
fn outstanding_cap_drops_and_counts() {
    let mc = Memcached::start(false);
    // One request in flight at most, offered far more than one connection
    // can answer: the excess must be dropped and counted, not queued.
    let report = ferrobench_json(&[
        "--server",
        &mc.addr(),
        "--rate",
        "200000",
        "--max-outstanding",
        "1",
        "--duration",
        "0.3",
        "-c",
        "1",
        "--keyspace",
        "10",
    ]);
    assert!(report["dropped"].as_u64().unwrap() > 0, "{report:#}");
    assert!(report["ops"].as_u64().unwrap() > 0);
}

#[test]
fn csv_hdr_and_plot_outputs_are_written() {
    let mc = Memcached::start(false);
    let dir = std::env::temp_dir().join(format!("ferrobench-out-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (hgrm, svg) = (dir.join("run.hgrm"), dir.join("run.svg"));
    let out = ferrobench(&[
        "--server",
        &mc.addr(),
        "--duration",
        "0.3",
        "-c",
        "2",
        "--csv",
        "--quiet",
        "--hdr-out",
        hgrm.to_str().unwrap(),
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let csv = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 2, "{csv}");
    assert!(lines[0].starts_with("target_rate,ops,ops_per_sec"));
    assert!(std::fs::read_to_string(&hgrm)
        .unwrap()
        .contains("Percentile"));
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<polyline"));
    let timeline = std::fs::read_to_string(dir.join("run.timeline.svg")).unwrap();
    assert!(timeline.contains("requests/s"), "{timeline}");
    std::fs::remove_dir_all(&dir).unwrap();
}
