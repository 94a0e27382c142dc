//! The command line against memcached 1.6.18's own binary: for each refused line, the same
//! exit status and the same first line of standard error (the program's name, which
//! getopt prints, aside); memcached's `-o` suboptions start both servers, and show in
//! `stats settings` as memcached shows them; `-p -1` with `MEMCACHED_PORT_FILENAME`; `-D`;
//! root without `-u`.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    run_to_exit, run_to_exit_as_given, running_as_root, Client, ServerKind, ServerProcess,
};

/// Command lines both servers refuse before they bind anything.
const REFUSED: &[&[&str]] = &[
    &["-q"],
    &["--bogus"],
    &["--bogus=1"],
    &["-p"],
    &["--port"],
    &["--help=1"],
    &["--dis"],
    &["-c", "0"],
    &["-c", "-1"],
    &["-t", "0"],
    &["-R", "0"],
    &["-f", "1.0"],
    &["-n", "0"],
    &["-N", "0"],
    &["-N", "8", "-t", "4"],
    &["-D", ""],
    &["-B", "http"],
    &["-I", "512"],
    &["-I", "1k"],
    &["-I", "2g"],
    &["-m", "1", "-I", "1m"],
    &["-m", "8192", "-I", "2048m"],
    &["-o", "slab_chunk_max=3000"],
    &["-o", "slab_chunk_max=2097152"],
    &["-I", "1536k", "-o", "slab_chunk_max=786432"],
    &["-o", "slab_sizes=100-90"],
    &["-o", "slab_sizes=10-200"],
    &["-o", "slab_sizes=100-104"],
    &["-o", "worker_logbuf_size=8"],
    &["-o", "hashpower=11"],
    &["-o", "hashpower=33"],
    &["-o", "hashpower"],
    &["-o", "hash_algorithm=bogus"],
    &["-o", "hash_algorithm"],
    &["-o", "slab_automove=3"],
    &["-o", "slab_automove_ratio=0"],
    &["-o", "slab_automove_window=2"],
    &["-o", "tail_repair_time=5"],
    &["-o", "lru_crawler_sleep=2000000"],
    &["-o", "lru_crawler_tocrawl=x"],
    &["-o", "hot_lru_pct=0"],
    &["-o", "warm_lru_pct=80"],
    &["-o", "hot_max_factor=0"],
    &["-o", "warm_max_factor"],
    &["-o", "temporary_ttl"],
    &["-o", "idle_timeout"],
    &["-o", "watcher_logbuf_size=x"],
    &["-o", "read_buf_mem_limit=x"],
    &["-o", "hot_lru_pct=50,warm_lru_pct=40"],
    &["-o", "no_lru_maintainer,temporary_ttl=10"],
    &["-o", "no_such_thing"],
    &["-o", "proxy_config=x"],
    &["-o", "lru_segmented"],
    &["-o", "ext_page_size=x"],
    &["-o", "ext_wbuf_size"],
    &["-o", "ext_max_frag=x"],
    &["-o", "slab_automove_freeratio"],
    &["-o", "ssl_verify_mode=9"],
    &["-o", "ssl_min_version=9"],
    &["-o", "ssl_chain_cert"],
    &["-Z", "-p", "0"],
    &["-p", "70000"],
    &["-S", "-B", "ascii"],
    &["-Y", "/nonexistent", "-B", "binary"],
    &["-Y", "/nonexistent", "-U", "11311"],
    &["-l", "no.such.host.invalid"],
];

/// Command lines that print and exit 0.
const PRINTS: &[&[&str]] = &[&["-h"], &["-V"], &["-i"], &["--help"], &["-vh"]];

/// `-o` suboptions memcached's build accepts that tune its internals; both servers start.
const ACCEPTED: &[&[&str]] = &[
    &[
        "-o",
        "maxconns_fast,no_maxconns_fast,hashpower=16,no_hashexpand,tail_repair_time=10",
    ],
    &[
        "-o",
        "slab_reassign,slab_automove=2,slab_automove_ratio=0.5,slab_automove_window=30",
    ],
    &["-o", "slab_automove,slab_automove_ratio=1"],
    &[
        "-o",
        "no_slab_reassign,no_slab_automove,hash_algorithm=xxh3,track_sizes,modern",
    ],
    &[
        "-o",
        "lru_crawler,lru_crawler_sleep=100,lru_crawler_tocrawl=0,lru_maintainer",
    ],
    &[
        "-o",
        "hot_lru_pct=20,warm_lru_pct=40,hot_max_factor=0.2,warm_max_factor=2.0,temporary_ttl=61",
    ],
    &[
        "-o",
        "watcher_logbuf_size=256,read_buf_mem_limit=0,no_inline_ascii_resp,inline_ascii_resp",
    ],
    &[
        "-o",
        "no_drop_privileges,drop_privileges,sock_cookie_id=3,no_chunked_items",
    ],
    &[
        "-o",
        "ext_page_size=64,ext_wbuf_size=4,ext_threads=1,ext_io_depth=1,ext_item_size=512",
    ],
    &[
        "-o",
        "ext_item_age=0,ext_low_ttl=0,ext_recache_rate=2000,ext_compact_under=0",
    ],
    &[
        "-o",
        "ext_drop_under=0,ext_max_sleep=1000000,ext_max_frag=0.8,ext_drop_unread",
    ],
    &[
        "-o",
        "slab_automove_freeratio=0.01,slab_chunk_max=262144,slab_sizes=100-200-300",
    ],
    &[
        "-f", "1.5", "-n", "64", "-N", "2", "-R", "5", "-b", "128", "-a", "644", "-C",
    ],
    &["-I", "1k", "-o", "slab_chunk_max=1024"],
    &["-I", "4m", "-m", "128"],
];

/// Command lines whose `stats settings` both servers print line for line alike (the
/// TCP port aside): every option that memcached shows, with values other than its
/// defaults, and values that memcached's own readers take as they are (a blank, `nan`).
const SHOWN: &[&[&str]] = &[
    &[],
    &[
        "-o",
        "hashpower=16,tail_repair_time=10,hash_algorithm=xxh3,slab_automove_window=10",
        "-o",
        "watcher_logbuf_size=512,worker_logbuf_size=128,read_buf_mem_limit=7,track_sizes",
        "-o",
        "slab_automove_freeratio=0.25,no_maxconns_fast,idle_timeout=30,slab_chunk_max=262144",
        "-o",
        "ext_item_size=1024,ext_wbuf_size=8,ext_max_sleep=500,ext_max_frag=0.5,ext_drop_unread",
        "-o",
        "ext_item_age=9,ext_low_ttl=3,ext_recache_rate=7,ext_compact_under=2,ext_drop_under=1",
        "-o",
        "lru_crawler_sleep=50,lru_crawler_tocrawl=9,hot_lru_pct=30,warm_lru_pct=30",
        "-o",
        "temporary_ttl=30,slab_automove=2,slab_automove_ratio=0.5,hot_max_factor=0.3",
        "-o",
        "warm_max_factor=3,no_slab_reassign,no_lru_crawler,ssl_wbuf_size=32,ssl_verify_mode=1",
        "-f",
        "1.5",
        "-n",
        "64",
        "-c",
        "500",
        "-t",
        "3",
        "-R",
        "7",
        "-b",
        "100",
        "-C",
        "-a",
        "644",
        "-D",
        "#",
        "-F",
        "-X",
        "-A",
        "-m",
        "128",
        "-I",
        "2m",
        "-v",
    ],
    &[
        "-o",
        "no_maxconns_fast,maxconns_fast,slab_automove_ratio=nan,hot_max_factor=nan",
        "-o",
        "slab_automove_freeratio=nan,watcher_logbuf_size= 12,ext_max_sleep= 700",
        "-o",
        "no_lru_maintainer,lru_maintainer,slab_automove,no_chunked_items",
    ],
];

/// `stats settings`' lines, in order.
fn settings_lines(server: &ServerProcess) -> Vec<(String, String)> {
    let text = server.connect().request_str("stats settings\r\n");
    text.lines()
        .filter_map(|l| l.strip_prefix("STAT "))
        .filter_map(|l| l.split_once(' '))
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect()
}

/// The first line of `stderr`, with the program's path (getopt prints it) as `PROG`.
fn first_line(stderr: &[u8], program: &Path) -> String {
    let text = String::from_utf8_lossy(stderr);
    let line = text.lines().next().unwrap_or("").to_string();
    line.replace(&program.display().to_string(), "PROG")
}

fn owned(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

#[test]
fn refused_lines_exit_and_say_as_memcached() {
    let mut cases: Vec<Vec<String>> = REFUSED.iter().map(|a| owned(a)).collect();
    if running_as_root() {
        cases.push(owned(&["-u", "no-such-user-here"]));
    }
    let mut wrong = Vec::new();
    for args in &cases {
        let mine = run_to_exit(ServerKind::Ferrocache, args);
        let theirs = run_to_exit(ServerKind::Memcached, args);
        let (mine_line, their_line) = (
            first_line(&mine.stderr, &ServerKind::Ferrocache.program()),
            first_line(&theirs.stderr, &ServerKind::Memcached.program()),
        );
        assert_ne!(
            theirs.status.code(),
            Some(0),
            "memcached started with {args:?}"
        );
        if mine.status.code() != theirs.status.code() || mine_line != their_line {
            wrong.push(format!(
                "{args:?}: ferrocache {:?} {mine_line:?}, memcached {:?} {their_line:?}",
                mine.status.code(),
                theirs.status.code()
            ));
        }
    }
    assert!(wrong.is_empty(), "differences:\n{}", wrong.join("\n"));
}

#[test]
fn help_version_and_license_exit_0() {
    for args in PRINTS {
        for kind in [ServerKind::Ferrocache, ServerKind::Memcached] {
            let out = run_to_exit(kind, &owned(args));
            assert_eq!(out.status.code(), Some(0), "{} {args:?}", kind.name());
        }
    }
}

#[test]
fn memcached_suboptions_start_both_servers() {
    for args in ACCEPTED {
        for kind in [ServerKind::Ferrocache, ServerKind::Memcached] {
            // Panics unless the server starts and accepts.
            let server = ServerProcess::start(kind, args);
            assert!(server
                .connect()
                .request_str("version\r\n")
                .starts_with("VERSION "));
        }
    }
}

#[test]
fn stats_settings_shows_the_options_as_memcached_does() {
    for args in SHOWN {
        let mine = settings_lines(&ServerProcess::start(ServerKind::Ferrocache, args));
        let theirs = settings_lines(&ServerProcess::start(ServerKind::Memcached, args));
        // memcached's lines first, in its order; ferrocache's own follow.
        let names = |lines: &[(String, String)]| -> Vec<String> {
            lines.iter().map(|(n, _)| n.clone()).collect()
        };
        assert!(mine.len() >= theirs.len(), "{args:?}: {mine:?}");
        assert_eq!(names(&mine[..theirs.len()]), names(&theirs), "{args:?}");
        for ((name, value), (_, expected)) in mine.iter().zip(&theirs) {
            if name != "tcpport" {
                assert_eq!(value, expected, "{args:?}: stats settings {name}");
            }
        }
    }
}

/// An `ext_path` without a size is refused with extstore's two lines and status 1, as
/// memcached refuses it; one in a directory that does not exist stops the start with a
/// line naming the file (memcached's own words differ: "Failed to initialize external
/// storage"), and creates nothing.
#[test]
fn a_bad_ext_path_is_refused_as_memcached_refuses_it() {
    for kind in [ServerKind::Ferrocache, ServerKind::Memcached] {
        let out = run_to_exit(
            kind,
            &owned(&["-o", "ext_path=/tmp/ferrocache-ext-no-size"]),
        );
        assert_eq!(out.status.code(), Some(1), "{}", kind.name());
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            "must supply size to ext_path, ie: ext_path=/f/e:64m (M|G|T|P supported)\n\
             failed to parse ext_path argument\n",
            "{}",
            kind.name()
        );
    }
    let out = run_to_exit(
        ServerKind::Ferrocache,
        &owned(&["-o", "ext_path=/nonexistent-ferrocache-dir/flash:64m"]),
    );
    assert_ne!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("failed to open extstore file /nonexistent-ferrocache-dir/flash"),
        "{text}"
    );
    assert!(!Path::new("/nonexistent-ferrocache-dir").exists());
}

#[test]
fn dash_d_turns_stats_detail_on() {
    for kind in [ServerKind::Ferrocache, ServerKind::Memcached] {
        let server = ServerProcess::start(kind, &["-D", "#"]);
        let settings = server.stats("settings");
        assert_eq!(settings["detail_enabled"], "yes", "{}", kind.name());
        assert_eq!(settings["stat_key_prefix"], "#", "{}", kind.name());
        let mut c = server.connect();
        c.request(b"set a#1 0 0 1\r\nx\r\n");
        c.request(b"get a#1\r\n");
        let dump = c.request_str("stats detail dump\r\n");
        assert!(
            dump.starts_with("PREFIX a get 1 hit 1 set 1 del 0"),
            "{}: {dump}",
            kind.name()
        );
    }
}

/// A server started by this test, killed by PID when dropped.
struct Started(Child);

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(kind: ServerKind, args: &[&str], env: &[(&str, &Path)]) -> Started {
    let child = Command::new(kind.program())
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_os_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    Started(child)
}

/// `MEMCACHED_PORT_FILENAME`'s lines, as `(kind, port)`, once the file is there.
fn read_port_file(path: &Path, server: &mut Started) -> Vec<(String, u16)> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !path.exists() {
        assert!(
            server.0.try_wait().expect("try_wait").is_none(),
            "server exited"
        );
        assert!(
            Instant::now() < deadline,
            "no port file at {}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    std::fs::read_to_string(path)
        .expect("port file")
        .lines()
        .map(|l| {
            let (kind, port) = l.split_once(": ").expect("KIND: PORT");
            (kind.to_string(), port.parse().expect("port"))
        })
        .collect()
}

fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("ferrocache-flags-{}-{name}", std::process::id()))
}

#[test]
fn ephemeral_ports_are_written_to_the_port_file() {
    let mut root = vec![];
    if running_as_root() {
        root = vec!["-u", "root"];
    }
    for kind in [ServerKind::Ferrocache, ServerKind::Memcached] {
        let path = temp_path(kind.name());
        let _ = std::fs::remove_file(&path);
        let mut args = vec!["-p", "-1", "-U", "-1", "-l", "127.0.0.1"];
        args.extend(&root);
        let mut server = spawn(kind, &args, &[("MEMCACHED_PORT_FILENAME", &path)]);
        let lines = read_port_file(&path, &mut server);
        let _ = std::fs::remove_file(&path);
        let kinds: Vec<&str> = lines.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(kinds, ["TCP INET", "UDP INET"], "{}", kind.name());
        let tcp = lines[0].1;
        assert_ne!(tcp, 0);
        let mut c = Client::connect(tcp);
        assert!(
            c.request_str("version\r\n").starts_with("VERSION "),
            "{}",
            kind.name()
        );
        assert!(!temp_path(&format!("{}.lck", kind.name())).exists());
    }
}

#[test]
fn root_needs_dash_u() {
    if !running_as_root() {
        // memcached ignores -u when it is not root; so does ferrocache.
        let server = ServerProcess::start(ServerKind::Ferrocache, &["-u", "nobody"]);
        assert!(server
            .connect()
            .request_str("version\r\n")
            .starts_with("VERSION "));
        return;
    }
    for kind in [ServerKind::Ferrocache, ServerKind::Memcached] {
        let out = run_to_exit_as_given(kind, &["-p".into(), "0".into(), "-U".into(), "0".into()]);
        assert_eq!(out.status.code(), Some(64), "{}", kind.name());
        assert_eq!(
            first_line(&out.stderr, &kind.program()),
            "can't run as root without the -u switch"
        );
    }
}
