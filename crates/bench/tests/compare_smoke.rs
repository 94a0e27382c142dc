//! `ferrobench compare`, bounded: one preset, 1 s runs, one repetition.
//! It must start ferrocache, memcached and the floor, measure all three,
//! write its report, and leave no server running, also when interrupted.
//!
//! Needs `/usr/bin/memcached` and a built `ferrocache` binary. The bench
//! crate cannot use `CARGO_BIN_EXE_ferrocache` (another package's binary),
//! so the binary is looked up: `$FERROCACHE_BIN`, next to this test's
//! ferrobench (same target directory and profile: fresh under
//! `cargo test --workspace`), then `target/release`, then `target/debug` of
//! the workspace. scripts/test builds `--release --workspace` first.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const FERROBENCH: &str = env!("CARGO_BIN_EXE_ferrobench");
const MEMCACHED: &str = "/usr/bin/memcached";

fn ferrocache() -> PathBuf {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut candidates: Vec<PathBuf> = std::env::var_os("FERROCACHE_BIN")
        .map(PathBuf::from)
        .into_iter()
        .collect();
    candidates.extend(Path::new(FERROBENCH).parent().map(|d| d.join("ferrocache")));
    candidates.push(workspace.join("target/release/ferrocache"));
    candidates.push(workspace.join("target/debug/ferrocache"));
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "no ferrocache binary found at {candidates:?}: build it first with \
                 `cargo build --release --workspace` (scripts/test does), or set FERROCACHE_BIN"
            )
        })
}

fn require_memcached() {
    assert!(
        Path::new(MEMCACHED).exists(),
        "{MEMCACHED} is missing: install it with `apt-get install -y memcached` (scripts/test does)"
    );
}

fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

/// The report a `--json` run wrote.
fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Every server the report says compare started is gone.
fn assert_servers_stopped(report: &serde_json::Value) {
    for pid in report["server_pids"].as_array().unwrap() {
        let pid = pid.as_u64().unwrap();
        assert!(
            !alive(pid),
            "server pid {pid} still runs after compare ended"
        );
    }
}

/// A report to splice a section into: a run of its own section must leave
/// all of it as it is.
const EXISTING_REPORT: &str = "# Benchmarks\n\nkept as it is\n\n## Notes\n\nhow to run\n";

/// `md`, once `EXISTING_REPORT`, holds a section from `begin` to `end`
/// before its notes, and the rest as it was; returns the document.
fn assert_spliced(md: &Path, begin: &str, end: &str) -> String {
    let doc = std::fs::read_to_string(md).unwrap();
    assert!(
        doc.starts_with(&format!("# Benchmarks\n\nkept as it is\n\n{begin}")),
        "{doc}"
    );
    assert!(
        doc.ends_with(&format!("{end}\n\n## Notes\n\nhow to run\n")),
        "{doc}"
    );
    doc
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("compare-smoke-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn smoke_run_starts_measures_and_stops_everything() {
    require_memcached();
    let dir = temp_dir("run");
    let (md, json) = (dir.join("benchmarks.md"), dir.join("report.json"));
    let out = Command::new(FERROBENCH)
        .arg("compare")
        .args([
            "--presets",
            "solarflare-get",
            "--duration",
            "1",
            "--reps",
            "1",
        ])
        .arg("--no-memory")
        .arg("--ferrocache")
        .arg(ferrocache())
        .arg("--out")
        .arg(&md)
        .arg("--plots")
        .arg(dir.join("plots"))
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "compare failed: {stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("| solarflare-get |"),
        "no headline row: {stdout}"
    );

    let report = read_json(&json);
    let pids = report["server_pids"].as_array().unwrap();
    assert_eq!(
        pids.len(),
        3,
        "ferrocache, memcached and the floor: {pids:?}"
    );
    assert_servers_stopped(&report);
    let runs = report["presets"][0]["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    for run in runs {
        let (kind, figures) = (&run[0], &run[1][0]);
        assert!(figures["ops"].as_u64().unwrap() > 0, "{kind}: no ops");
        assert!(
            figures["server_cpu_secs"].as_f64().unwrap() > 0.0,
            "{kind}: the server used no CPU?"
        );
        assert_eq!(figures["errors"].as_u64(), Some(0), "{kind}");
        assert_eq!(figures["hit_ratio"].as_f64(), Some(1.0), "{kind}");
    }
    let doc = std::fs::read_to_string(&md).unwrap();
    assert!(doc.contains("## Headline") && doc.contains("### solarflare-get"));
    assert!(
        doc.contains("ferrobench compare --presets solarflare-get"),
        "the command is recorded"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A sweep-only run: two tiny steps, its section spliced into an existing
/// report without touching the rest, JSON and plot written, servers gone.
#[test]
fn sweep_only_run_writes_its_section_and_nothing_else() {
    require_memcached();
    let dir = temp_dir("sweep");
    let (md, json, plots) = (
        dir.join("benchmarks.md"),
        dir.join("sweep.json"),
        dir.join("plots"),
    );
    std::fs::write(&md, EXISTING_REPORT).unwrap();
    let out = Command::new(FERROBENCH)
        .arg("compare")
        .args([
            "--connections-sweep",
            "3,4:1",
            "--duration",
            "0.3",
            "--reps",
            "1",
        ])
        .arg("--ferrocache")
        .arg(ferrocache())
        .arg("--out")
        .arg(&md)
        .arg("--plots")
        .arg(&plots)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "compare failed: {stderr}");
    assert!(
        !stderr.contains("[memory]") && !stderr.contains("[legup-p16 "),
        "a sweep-only run runs nothing else: {stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("| 4 | 1 | 4 |"), "no sweep row: {stdout}");

    let report = read_json(&json);
    let steps = report["sweep"]["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2);
    assert_eq!(steps[1]["step"]["pipeline"].as_u64(), Some(1));
    for step in steps {
        for run in step["runs"].as_array().unwrap() {
            let (kind, figures) = (&run[0], &run[1][0]);
            assert!(figures["ops"].as_u64().unwrap() > 0, "{kind}: no ops");
            assert_eq!(figures["errors"].as_u64(), Some(0), "{kind}");
        }
    }
    assert_servers_stopped(&report);
    let doc = assert_spliced(
        &md,
        "<!-- connection sweep",
        "<!-- connection sweep: end -->",
    );
    assert!(doc.contains("## Connection sweep (LegUp): legup-p16 from 3 to 4 connections"));
    assert!(
        doc.contains("(plots/legup-sweep.svg)"),
        "the plot's link is relative"
    );
    assert!(plots.join("legup-sweep.svg").is_file());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigterm_stops_every_server() {
    require_memcached();
    let dir = temp_dir("sigterm");
    let mut child = Command::new(FERROBENCH)
        .arg("compare")
        .args([
            "--presets",
            "solarflare-get",
            "--duration",
            "30",
            "--reps",
            "3",
        ])
        .arg("--no-memory")
        .arg("--ferrocache")
        .arg(ferrocache())
        .args(["--out", "-", "--plots", "-"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // "ferrobench compare: started memcached pid 123 on 127.0.0.1:4567"
    let mut pids = Vec::new();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    while pids.len() < 3 {
        let line = lines
            .next()
            .expect("compare ended before starting three servers")
            .unwrap();
        if let Some(rest) = line.split_once(" pid ").map(|(_, r)| r) {
            pids.push(
                rest.split_whitespace()
                    .next()
                    .unwrap()
                    .parse::<u64>()
                    .unwrap(),
            );
        }
    }
    // Keep draining stderr so the harness never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    for &pid in &pids {
        assert!(alive(pid), "server {pid} should be running");
    }
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(15);
    let exit = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "compare did not exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(exit.code(), Some(128 + 15), "exit status after SIGTERM");
    for &pid in &pids {
        assert!(
            !alive(pid),
            "server pid {pid} survived SIGTERM of the harness"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--tls` alone, with memcached standing in for ferrocache (so the harness
/// is tested whatever ferrocache's own TLS can do): three rows measured, its
/// section spliced into an existing report, the servers and the throwaway
/// certificate gone.
#[test]
fn tls_run_writes_its_section_with_three_rows() {
    require_memcached();
    let dir = temp_dir("tls");
    let (md, json) = (dir.join("benchmarks.md"), dir.join("tls.json"));
    std::fs::write(&md, EXISTING_REPORT).unwrap();
    let child = Command::new(FERROBENCH)
        .arg("compare")
        .args(["--tls", "--duration", "0.3", "--reps", "1"])
        .args(["--ferrocache", MEMCACHED, "--plots", "-"])
        .arg("--out")
        .arg(&md)
        .arg("--json")
        .arg(&json)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "compare --tls failed: {stderr}");
    assert!(
        !stderr.contains("[memory]") && !stderr.contains("[solarflare-get "),
        "a TLS-only run runs nothing else: {stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("| ferrocache -Z | 1 |"), "{stdout}");

    let report = read_json(&json);
    let runs = report["tls"]["runs"].as_array().unwrap();
    let rows: Vec<(String, bool)> = runs
        .iter()
        .map(|r| {
            let v = &r[0];
            (
                v["kind"].as_str().unwrap().to_string(),
                v["tls"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("memcached".to_string(), true),
            ("ferrocache".to_string(), true),
            ("ferrocache".to_string(), false)
        ]
    );
    for run in runs {
        let figures = &run[1][0];
        assert!(figures["ops"].as_u64().unwrap() > 0, "{run}");
        assert!(figures["server_cpu_secs"].as_f64().unwrap() > 0.0, "{run}");
        assert_eq!(figures["errors"].as_u64(), Some(0), "{run}");
        assert_eq!(figures["hit_ratio"].as_f64(), Some(1.0), "{run}");
    }
    assert_servers_stopped(&report);
    let leftovers: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("ferrobench-tls-{pid}-"))
        })
        .collect();
    assert!(
        leftovers.is_empty(),
        "the certificate stayed: {leftovers:?}"
    );
    let doc = assert_spliced(&md, "<!-- TLS: generated", "<!-- TLS: end -->");
    assert!(doc.contains("## TLS: CPU per get against memcached -Z ("));
    assert!(doc.contains("### Targets\n\n- **"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A "ferrocache" that refuses `-Z` stops the TLS run with an error naming
/// it, and memcached -Z, already started, is stopped too.
#[test]
fn tls_run_names_a_server_without_tls() {
    require_memcached();
    let out = Command::new(FERROBENCH)
        .arg("compare")
        .args(["--tls", "--duration", "0.3", "--reps", "1"])
        .args(["--ferrocache", "/bin/false", "--out", "-", "--plots", "-"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "ferrocache does not serve TLS with memcached's flags (`-Z -o ssl_chain_cert="
        ),
        "{stderr}"
    );
    // "ferrobench compare: started memcached -Z pid 123 on 127.0.0.1:4567"
    let pid: u64 = stderr
        .lines()
        .find_map(|l| l.strip_prefix("ferrobench compare: started memcached -Z pid "))
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .expect("memcached -Z started first");
    assert!(!alive(pid), "memcached -Z pid {pid} still runs");
}
