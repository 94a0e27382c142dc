//! The command line against memcached 1.6.18's: values, messages and exit statuses.

use super::*;

fn parse(args: &[&str]) -> Result<Settings, Refusal> {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    match Settings::parse("ferrocache", &args)? {
        Parsed::Run(s) => Ok(*s),
        Parsed::Print(text) => panic!("printed {text}"),
    }
}

fn refused(args: &[&str]) -> (i32, String) {
    let r = parse(args).expect_err("should be refused");
    (r.status, r.message)
}

#[test]
fn defaults_match_memcached() {
    let s = parse(&[]).unwrap();
    assert_eq!(s.port, 11211);
    assert_eq!(s.udp_port, 0);
    assert_eq!(s.memory_limit_bytes, 64 << 20);
    assert_eq!(s.max_connections, 1024);
    assert_eq!(s.threads, 4);
    assert_eq!(s.item_size_max_bytes, 1 << 20);
    assert_eq!(s.listen, vec!["127.0.0.1".to_string()]);
    assert!(s.evictions && s.flush_enabled && !s.shutdown_enabled && !s.detail_enabled);
    assert!(s.udp_gso);
    assert_eq!(s.memory_file, None);
    assert_eq!(s.classes, storage::ClassConfig::default());
    let s = parse(&["-e", "/dev/shm/cache"]).unwrap();
    assert_eq!(s.memory_file.as_deref(), Some("/dev/shm/cache"));
    let s = parse(&["--memory-file=/dev/shm/c2"]).unwrap();
    assert_eq!(s.memory_file.as_deref(), Some("/dev/shm/c2"));
}

#[test]
fn parses_memcached_command_lines() {
    let s = parse(&[
        "-p",
        "1234",
        "-m",
        "1024",
        "-c",
        "4096",
        "-t",
        "1",
        "-U",
        "0",
        "-vv",
        "-I",
        "2m",
        "-M",
        "-A",
        "-o",
        "idle_timeout=30,hashpower=20",
        "-l",
        "127.0.0.1,::1",
    ])
    .unwrap();
    assert_eq!(s.port, 1234);
    assert_eq!(s.memory_limit_bytes, 1024 << 20);
    assert_eq!(s.item_size_max_bytes, 2 << 20);
    assert_eq!(s.verbose, 2);
    assert_eq!(s.idle_timeout_secs, 30);
    assert!(!s.evictions && s.shutdown_enabled);
    assert_eq!(s.listen.len(), 2);
    assert_eq!(s.extended.len(), 2);
    // atoi: a suffix on -m is ignored, as memcached ignores it.
    assert_eq!(
        parse(&["-m", "128m"]).unwrap().memory_limit_bytes,
        128 << 20
    );
}

#[test]
fn repeated_options_as_memcached_takes_them() {
    let s = parse(&[
        "-m",
        "64",
        "-t",
        "2",
        "-m",
        "3072",
        "-l",
        "127.0.0.1",
        "-l",
        "::1",
    ])
    .unwrap();
    assert_eq!(s.memory_limit_bytes, 3072 << 20);
    assert_eq!(s.threads, 2);
    assert_eq!(s.listen, vec!["127.0.0.1".to_string(), "::1".to_string()]);
    // memcached skips an -l already in the list.
    let s = parse(&["-l", "127.0.0.1", "-l", "127.0.0.1"]).unwrap();
    assert_eq!(s.listen.len(), 1);
    let s = parse(&["-o", "idle_timeout=5", "-o", "hashpower=20", "-L", "-L"]).unwrap();
    assert_eq!(s.extended.len(), 2);
    assert!(s.large_pages);
}

#[test]
fn getopt_errors_in_memcached_words() {
    assert_eq!(
        refused(&["-q"]),
        (
            1,
            "ferrocache: invalid option -- 'q'\nIllegal argument \"?\"".into()
        )
    );
    assert_eq!(
        refused(&["--no-such-flag"]),
        (
            1,
            "ferrocache: unrecognized option '--no-such-flag'\nIllegal argument \"?\"".into()
        )
    );
    assert_eq!(
        refused(&["-p"]).1.lines().next(),
        Some("ferrocache: option requires an argument -- 'p'")
    );
}

#[test]
fn loop_checks_return_1() {
    assert_eq!(
        refused(&["-c", "0"]),
        (1, "Maximum connections must be greater than 0".into())
    );
    assert_eq!(
        refused(&["-t", "0"]),
        (1, "Number of threads must be greater than 0".into())
    );
    assert_eq!(refused(&["-R", "0"]).0, 1);
    assert_eq!(
        refused(&["-f", "1"]),
        (1, "Factor must be greater than 1".into())
    );
    assert_eq!(
        refused(&["-n", "0"]),
        (1, "Chunk size must be greater than 0".into())
    );
    assert_eq!(refused(&["-N", "0"]).0, 1);
    assert_eq!(refused(&["-D", ""]), (1, "No delimiter specified".into()));
    assert_eq!(
        refused(&["-o", "no_such_option"]),
        (1, "Illegal suboption \"no_such_option\"".into())
    );
    assert_eq!(
        refused(&["-o", "hashpower=11"]),
        (1, "Initial hashtable multiplier of 11 is too low".into())
    );
    assert!(refused(&["-o", "hashpower=33"])
        .1
        .starts_with("Initial hashtable multiplier of 33 is too high\n"));
    assert_eq!(
        refused(&["-o", "hash_algorithm=bogus"]),
        (
            1,
            "Unknown hash_algorithm option (jenkins, murmur3, xxh3)".into()
        )
    );
    assert_eq!(
        refused(&["-o", "ext_page_size=x"]),
        (1, "could not parse argument to ext_page_size".into())
    );
    // extstore's messages for an ext_path without a size or with no page in it.
    let (status, message) = refused(&["-o", "ext_path=/tmp/f"]);
    assert_eq!(status, 1);
    assert!(
        message.contains("must supply size to ext_path"),
        "{message}"
    );
    let (status, message) = refused(&["-o", "ext_path=/tmp/f:0m"]);
    assert_eq!(status, 1);
    assert!(
        message.contains("failed to parse ext_path argument"),
        "{message}"
    );
}

#[test]
fn after_loop_checks_exit_64() {
    assert_eq!(
        refused(&["-I", "512"]),
        (64, "Item max size cannot be less than 1024 bytes.".into())
    );
    assert_eq!(
        refused(&["-m", "1", "-I", "1m"]),
        (
            64,
            "Cannot set item size limit higher than 1/2 of memory max.".into()
        )
    );
    assert_eq!(
        refused(&["-I", "1k"]),
        (
            64,
            "slab_chunk_max (bytes: 524288) cannot be larger than -I (item_size_max 1024)".into()
        )
    );
    assert!(parse(&["-I", "1k", "-o", "slab_chunk_max=1024"]).is_ok());
    assert_eq!(
        refused(&["-o", "slab_chunk_max=3000"]).1,
        "-I (item_size_max: 1048576) must be evenly divisible by slab_chunk_max (bytes: 3000)"
    );
    assert_eq!(
        refused(&["-I", "1536k", "-o", "slab_chunk_max=786432"]).1,
        "slab_chunk_max (bytes: 786432) must divide evenly into 1048576 (slab_page_size)"
    );
    assert_eq!(refused(&["-B", "http"]).0, 64);
    assert_eq!(
        refused(&["-p", "70000"]),
        (64, "ERROR: Invalid port number 70000.".into())
    );
    assert_eq!(refused(&["-N", "5", "-t", "4"]).0, 64);
    assert_eq!(refused(&["-o", "hot_lru_pct=50,warm_lru_pct=40"]).0, 64);
    assert_eq!(refused(&["-o", "no_lru_maintainer,temporary_ttl=5"]).0, 64);
    assert_eq!(refused(&["-o", "slab_sizes=100-90"]).0, 64);
}

#[test]
fn slab_classes_follow_the_flags() {
    let s = parse(&["-f", "1.5", "-n", "64", "-o", "slab_chunk_max=262144"]).unwrap();
    assert_eq!(s.classes.factor, 1.5);
    assert_eq!(s.classes.chunk_size, 64);
    assert_eq!(s.classes.chunk_max, 262_144);
    assert_eq!(
        parse(&["-o", "no_chunked_items"])
            .unwrap()
            .classes
            .chunk_max,
        1 << 20
    );
    let s = parse(&["-o", "slab_sizes=100-200-300"]).unwrap();
    assert_eq!(s.classes.sizes, Some(vec![100, 200, 300]));
}

#[test]
fn ports_as_memcached() {
    let s = parse(&["-p", "-1"]).unwrap();
    assert_eq!(s.tcp_bind_port(), Some(0));
    assert_eq!(s.udp_bind_port(), None);
    // -U alone also sets the TCP port.
    let s = parse(&["-U", "11222"]).unwrap();
    assert_eq!((s.port, s.udp_port), (11222, 11222));
    let s = parse(&["-U", "-1"]).unwrap();
    assert_eq!((s.tcp_bind_port(), s.udp_bind_port()), (Some(0), Some(0)));
    assert_eq!(parse(&["-p", "0"]).unwrap().tcp_bind_port(), None);
}

#[test]
fn accepts_every_memcached_suboption() {
    let all = "maxconns_fast,no_maxconns_fast,hashpower=16,no_hashexpand,slab_reassign,\
        no_slab_reassign,slab_automove=2,no_slab_automove,slab_automove_ratio=0.5,\
        slab_automove_window=30,tail_repair_time=10,hash_algorithm=xxh3,lru_crawler,\
        no_lru_crawler,lru_crawler_sleep=100,lru_crawler_tocrawl=0,lru_maintainer,\
        hot_lru_pct=20,warm_lru_pct=40,hot_max_factor=0.2,warm_max_factor=2.0,\
        temporary_ttl=61,idle_timeout=0,watcher_logbuf_size=256,track_sizes,\
        no_inline_ascii_resp,inline_ascii_resp,modern,no_drop_privileges,drop_privileges,\
        resp_obj_mem_limit=1,read_buf_mem_limit=0,relaxed_privileges,sock_cookie_id=3,\
        ext_page_size=64,ext_wbuf_size=4,ext_threads=1,ext_io_depth=1,ext_item_size=512,\
        ext_item_age=0,ext_low_ttl=0,ext_recache_rate=2000,ext_compact_under=0,\
        ext_drop_under=0,ext_max_sleep=1000000,ext_max_frag=0.8,ext_drop_unread,\
        slab_automove_freeratio=0.01";
    parse(&["-o", all]).unwrap();
}

#[test]
fn ferrocache_options_still_work() {
    let s = parse(&[
        "--pin",
        "--busy-poll-us",
        "50",
        "--io-backend=epoll",
        "--zero-copy-min",
        "0",
        "--udp-gso=off",
        "--null-store",
        "--null-value-bytes",
        "7",
        "--hash-seed=42",
        "-Z",
        "-o",
        "ssl_chain_cert=a,ssl_key=b",
    ])
    .unwrap();
    assert!(s.pin && !s.udp_gso && s.tls.enabled);
    assert_eq!(s.busy_poll_us, 50);
    assert_eq!(s.io_backend, IoBackend::Epoll);
    assert_eq!(s.zero_copy_min, Some(0));
    assert_eq!(s.null_store.as_deref().map(<[u8]>::len), Some(7));
    assert_eq!(s.hash_seed, Some(42));
    assert_eq!(parse(&[]).unwrap().hash_seed, None);
    assert_eq!(refused(&["--udp-gso=maybe"]).0, 64);
    assert_eq!(refused(&["--hash-seed=x"]).0, 64);
}

#[test]
fn delimiter_turns_detail_on() {
    let s = parse(&["-D", "#"]).unwrap();
    assert!(s.detail_enabled);
    assert_eq!(s.prefix_delimiter(), b'#');
}

#[test]
fn help_lists_every_option() {
    let args = vec!["-h".to_string()];
    let Parsed::Print(text) = Settings::parse("ferrocache", &args).unwrap() else {
        panic!("-h prints")
    };
    for spec in OPTIONS {
        if let Some(l) = spec.long {
            assert!(
                text.contains(&format!("--{l}")) || l == "napi-ids",
                "--{l} missing"
            );
        }
    }
    // memcached's test suite runs its extstore tests when -h mentions ext_path.
    assert!(text.contains("ext_path"));
}
