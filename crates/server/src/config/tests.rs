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
    assert_eq!(s.extended.hashpower_init, 20);
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
    assert_eq!((s.idle_timeout_secs, s.extended.hashpower_init), (5, 20));
    assert!(s.large_pages);
    // The last value given wins, whichever -o carries it.
    let s = parse(&[
        "-o",
        "ext_item_size=1024,hashpower=13",
        "-o",
        "ext_item_size=2048",
    ])
    .unwrap();
    assert_eq!(
        (s.tunables.ext.item_size, s.extended.hashpower_init),
        (2048, 13)
    );
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
fn options_set_the_tunables() {
    let s = parse(&[
        "-o",
        "no_lru_crawler,lru_crawler_sleep=50,lru_crawler_tocrawl=7,slab_automove=2",
        "-o",
        "temporary_ttl=30,hot_lru_pct=30,ext_max_sleep=500",
    ])
    .unwrap();
    let t = &s.tunables;
    assert!(!t.lru_crawler);
    assert_eq!((t.crawler_sleep_us, t.crawler_tocrawl), (50, 7));
    assert_eq!(t.slab_automove, 2);
    assert!(t.temp_lru && t.temporary_ttl == 30 && t.hot_lru_pct == 30);
    assert_eq!(t.ext_max_sleep, 500);
    // As in memcached, the maintainer option also turns segmentation off, and
    // no_modern turns the crawler, slab moves and the maintainer off.
    let t = parse(&["-o", "no_lru_maintainer"]).unwrap().tunables;
    assert!(!t.lru_maintainer && !t.lru_segmented);
    let t = parse(&["-o", "no_modern,slab_reassign"]).unwrap().tunables;
    assert!(!t.lru_crawler && !t.lru_maintainer && t.slab_reassign && t.slab_automove == 0);
    assert_eq!(
        refused(&["-o", "lru_crawler_sleep=1000001"]),
        (1, "LRU crawler sleep must be between 0 and 1 second".into())
    );
    assert_eq!(
        refused(&["-o", "no_lru_maintainer,temporary_ttl=7"]),
        (
            64,
            "temporary_ttl requires lru_maintainer to be enabled".into()
        )
    );
    assert_eq!(
        refused(&["-o", "hot_lru_pct=50,warm_lru_pct=40"]),
        (
            64,
            "hot_lru_pct + warm_lru_pct cannot be more than 80% combined".into()
        )
    );
}

#[test]
fn watch_buffers_and_sizes_follow_the_options() {
    let e = parse(&[
        "-o",
        "worker_logbuf_size=128,watcher_logbuf_size=512,track_sizes",
    ])
    .unwrap()
    .extended;
    assert_eq!(
        (e.worker_logbuf_bytes, e.watcher_logbuf_bytes),
        (128 << 10, 512 << 10)
    );
    assert!(e.track_sizes);
    let e = parse(&[]).unwrap().extended;
    assert_eq!(
        (e.worker_logbuf_bytes, e.watcher_logbuf_bytes),
        (64 << 10, 256 << 10)
    );
    assert!(!e.track_sizes && e.maxconns_fast);
    // memcached 1.6.18 falls through from worker_logbuf_size into slab_sizes.
    let s = parse(&["-o", "worker_logbuf_size=100-200"]);
    assert_eq!(
        s.unwrap_err().message,
        "could not parse argument to worker_logbuf_size"
    );
    let s = parse(&["-o", "worker_logbuf_size=128"]).unwrap();
    assert_eq!(s.classes.sizes, Some(vec![128]));
    assert_eq!(
        refused(&["-o", "worker_logbuf_size=8"]),
        (64, "slab size 8 is out of valid range".into())
    );
    // The last one given wins.
    let e = parse(&["-o", "no_maxconns_fast,maxconns_fast"])
        .unwrap()
        .extended;
    assert!(e.maxconns_fast);
}

#[test]
fn flash_tier_options() {
    let s = parse(&["-o", "ext_threads=3,ext_page_size=32,ext_wbuf_size=8"]).unwrap();
    assert_eq!(s.ext_threads, 3);
    assert_eq!((s.flash.page_size, s.flash.wbuf_size), (32 << 20, 8 << 20));
    assert_eq!(s.flash_tier(), None);
    assert_eq!(parse(&["-o", "ext_threads=0"]).unwrap().ext_threads, 1);
    let s = parse(&[
        "-o",
        "ext_path=/tmp/a:64m,ext_path=/tmp/b:1G,ext_item_size=100,ext_max_frag=0.5",
    ])
    .unwrap();
    let tier = s.flash_tier().unwrap();
    assert_eq!(tier.files.len(), 2);
    assert_eq!((tier.files[1].1, tier.tunables.item_size), (1 << 30, 100));
    assert_eq!(tier.tunables.max_frag, 0.5);
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

fn help() -> String {
    let args = vec!["-h".to_string()];
    let Parsed::Print(text) = Settings::parse("ferrocache", &args).unwrap() else {
        panic!("-h prints")
    };
    text
}

#[test]
fn help_lists_every_row() {
    let text = help();
    for row in rows() {
        let listed = match row.name {
            table::Name::Flag(spec) => {
                let short = spec
                    .short
                    .is_none_or(|c| text.lines().any(|l| l.starts_with(&format!("-{c}"))));
                // memcached's own listing spells it `--napi_ids`.
                let long = spec.long.is_none_or(|l| {
                    text.contains(&format!("--{l}"))
                        || (l == "napi-ids" && text.contains("--napi_ids"))
                });
                short && long
            }
            // `no_X` is listed with `X` and the other way round, as memcached's
            // listing says ("most options have a 'no_' prefix to disable").
            table::Name::Sub(name) => {
                let pair = name
                    .strip_prefix("no_")
                    .map_or(format!("no_{name}"), String::from);
                [name, pair.as_str()]
                    .iter()
                    .any(|n| text.contains(&format!("   - {n}:")))
            }
        };
        assert!(listed, "-h does not list {:?}", row.name);
    }
    // memcached's test suite runs its extstore tests when -h mentions ext_path.
    assert!(text.contains("ext_path"));
}

#[test]
fn help_text_is_laid_out_as_memcached_lays_it_out() {
    let text = help();
    assert!(text.contains(
        "   - lru_crawler_tocrawl: max items to crawl per slab per run\n                          default is 0 (unlimited)\n"
    ));
    assert!(
        text.contains("   - slab_automove_freeratio: ratio of memory to hold free as buffer.\n")
    );
    assert!(text.contains("firewalls \n\n   - External storage (ext_*) related options"));
    assert!(text.contains("\n-N, --napi_ids "));
    assert!(text.contains("\n--null-value-bytes=<num>  size of the canned value"));
    assert!(text
        .contains("\n--latency-histograms=<on|off>\n                          time every request"));
}

#[test]
fn settings_lines_are_each_shown_once() {
    let mut defined: Vec<&str> = rows()
        .flat_map(|r| r.lines.iter())
        .map(|l| l.name)
        .collect();
    defined.push("oldest");
    let shown: Vec<&str> = settings_lines().map(|l| l.name).collect();
    assert_eq!(shown.len(), defined.len(), "{shown:?}");
    defined.sort_unstable();
    defined.dedup();
    assert_eq!(
        shown.len(),
        defined.len(),
        "a line defined twice: {shown:?}"
    );
    // Every name memcached's order gives is a line, so that order is the one shown.
    assert_eq!(&shown[..table::SETTINGS_ORDER.len()], table::SETTINGS_ORDER);
}

const OPERATIONS: &str = include_str!("../../../../docs/operations.md");

/// The first cell and the second of each row of the markdown table at or after
/// `marker` in docs/operations.md.
fn doc_table(marker: &str) -> Vec<(String, String)> {
    let at = OPERATIONS
        .find(marker)
        .unwrap_or_else(|| panic!("{marker} in the docs"));
    let line_start = OPERATIONS[..at].rfind('\n').map_or(0, |i| i + 1);
    OPERATIONS[line_start..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            let l = l.replace("\\|", "/");
            let cells: Vec<&str> = l.split('|').collect();
            (cells[1].to_string(), cells[2].to_string())
        })
        .collect()
}

/// The options a table's first cell names: each backquoted name, as `-p`, `--port`
/// or `idle_timeout` (values and brackets dropped).
fn doc_names(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .flat_map(|span| span.split(", "))
        .filter_map(|name| name.split([' ', '=', '[']).next())
        .map(String::from)
        .collect()
}

/// The row a name from the docs means.
fn row_named(name: &str) -> Option<&'static table::Row> {
    rows().find(|r| match r.name {
        table::Name::Flag(spec) => match (name.strip_prefix("--"), name.strip_prefix('-')) {
            (Some(long), _) => spec.long == Some(long),
            (None, Some(short)) => short.chars().next() == spec.short,
            (None, None) => false,
        },
        table::Name::Sub(sub) => sub == name,
    })
}

/// The markdown table of the suboptions of `rows`: one line for each of what the docs
/// say of them (with "acted on" or "inert" first), where the first of them is.
fn suboption_table(header: &str, rows: &[&[table::Row]]) -> String {
    let mut said: Vec<(bool, &str, Vec<String>)> = Vec::new();
    for row in rows.iter().flat_map(|r| r.iter()) {
        let table::Name::Sub(name) = row.name else {
            continue;
        };
        let inert = row.acts == table::Acts::Inert;
        let name = format!("`{name}`");
        match said
            .iter_mut()
            .find(|(i, doc, _)| *i == inert && *doc == row.doc)
        {
            Some((_, _, names)) => names.push(name),
            None => said.push((inert, row.doc, vec![name])),
        }
    }
    let mut out = format!("{header}\n|---|---|\n");
    for (inert, doc, names) in said {
        let status = if inert { "inert" } else { "acted on" };
        out.push_str(&format!("| {} | {status}: {doc} |\n", names.join(", ")));
    }
    out
}

/// docs/operations.md's tables made from the rows: between `<!-- table: NAME ...-->`
/// and `<!-- end of table -->`.
#[test]
fn docs_suboption_tables_are_made_from_the_rows() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/operations.md");
    let mut docs = std::fs::read_to_string(path).unwrap();
    let made = [
        (
            "suboptions",
            suboption_table("| suboption | ferrocache |", &[extended::ROWS, tls::ROWS]),
        ),
        (
            "ext",
            suboption_table("| option | ferrocache |", &[extstore::ROWS]),
        ),
    ];
    let write = std::env::var_os("FERROCACHE_WRITE_DOCS").is_some();
    for (name, table) in made {
        let start = docs
            .find(&format!("<!-- table: {name} "))
            .and_then(|at| docs[at..].find("-->\n").map(|end| at + end + 4))
            .unwrap_or_else(|| panic!("no <!-- table: {name} --> in {path}"));
        let end = start
            + docs[start..]
                .find("<!-- end of table -->")
                .expect("its end");
        if write {
            docs.replace_range(start..end, &table);
        } else {
            assert_eq!(
                docs[start..end],
                table,
                "docs/operations.md's table {name} is not the rows': \
                 FERROCACHE_WRITE_DOCS=1 cargo test -p ferrocache-server --lib docs_ rewrites it"
            );
        }
    }
    if write {
        std::fs::write(path, docs).unwrap();
    }
}

#[test]
fn docs_flags_tables_agree_with_the_table() {
    let tables = [
        "### memcached's options",
        "### ferrocache's own options",
        "<!-- table: suboptions ",
        "<!-- table: ext ",
    ];
    let mut documented: Vec<&table::Row> = Vec::new();
    for marker in tables {
        for (names, what) in doc_table(marker) {
            let inert = what.contains("inert");
            for name in doc_names(&names) {
                let row = row_named(&name).unwrap_or_else(|| {
                    panic!("docs/operations.md lists {name}, which is no option")
                });
                assert_eq!(
                    row.acts == table::Acts::Inert,
                    inert,
                    "{name}: the docs say {}, the table says {:?}",
                    if inert { "inert" } else { "acted on" },
                    row.acts
                );
                documented.push(row);
            }
        }
    }
    for row in rows() {
        assert!(
            documented.iter().any(|r| std::ptr::eq(*r, row)),
            "docs/operations.md does not list {:?}",
            row.name
        );
    }
}
