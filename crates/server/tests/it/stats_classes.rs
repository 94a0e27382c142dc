//! memcached's per-class statistics and the names of its `stats` and `stats settings`,
//! against memcached 1.6.18 given the same items: `stats items`, `stats slabs`,
//! `stats sizes` (with `sizes_enable`/`sizes_disable`) and `stats cachedump`.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use common::{running_as_root, Client, ServerKind, ServerProcess};

/// memcached puts a new item in its hot LRU, which `cachedump` does not walk; without
/// the LRU maintainer every item is in the one queue, and the two servers list alike.
const ARGS: &[&str] = &["-t", "1", "-U", "0", "-o", "no_lru_maintainer"];

fn start(kind: ServerKind, extra: &[&str]) -> ServerProcess {
    let mut args: Vec<&str> = ARGS.to_vec();
    args.extend_from_slice(extra);
    if kind == ServerKind::Memcached && running_as_root() {
        args.extend_from_slice(&["-u", "root"]);
    }
    ServerProcess::start(kind, &args)
}

/// The same 60 items of sizes from 0 to about 40 KB, some with flags.
fn fill(c: &mut Client) {
    for i in 0..60usize {
        let len = (i * i * 11) % 40_000;
        let request = format!(
            "set key:{i} {} 0 {len}\r\n{}\r\n",
            if i % 3 == 0 { 0 } else { i },
            "v".repeat(len)
        );
        assert_eq!(c.request_str(&request), "STORED\r\n");
    }
}

/// `STAT <prefix><class>:<name> <value>` lines as class -> name -> value.
fn per_class(text: &str, prefix: &str) -> BTreeMap<u32, BTreeMap<String, String>> {
    let mut out: BTreeMap<u32, BTreeMap<String, String>> = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line
            .strip_prefix("STAT ")
            .and_then(|l| l.strip_prefix(prefix))
        else {
            continue;
        };
        let Some((class, rest)) = rest.split_once(':') else {
            continue;
        };
        let Ok(class) = class.parse() else { continue };
        let (name, value) = rest.split_once(' ').expect("a value");
        out.entry(class)
            .or_default()
            .insert(name.to_string(), value.to_string());
    }
    out
}

#[test]
fn items_and_slabs_count_each_item_in_memcacheds_class() {
    let mut texts = Vec::new();
    for kind in [ServerKind::Memcached, ServerKind::Ferrocache] {
        let server = start(kind, &[]);
        let mut c = server.connect();
        fill(&mut c);
        texts.push((
            c.request_str("stats items\r\n"),
            c.request_str("stats slabs\r\n"),
        ));
    }
    let (mc_items, fc_items) = (
        per_class(&texts[0].0, "items:"),
        per_class(&texts[1].0, "items:"),
    );
    assert_eq!(
        mc_items.keys().collect::<Vec<_>>(),
        fc_items.keys().collect::<Vec<_>>(),
        "the classes holding items"
    );
    for (class, mc) in &mc_items {
        let fc = &fc_items[class];
        assert_eq!(
            mc.keys().collect::<Vec<_>>(),
            fc.keys().collect::<Vec<_>>(),
            "class {class}: field names"
        );
        for field in ["number", "mem_requested", "evicted", "reclaimed"] {
            assert_eq!(mc[field], fc[field], "class {class}: {field}");
        }
    }
    let (mc_slabs, fc_slabs) = (per_class(&texts[0].1, ""), per_class(&texts[1].1, ""));
    assert_eq!(
        mc_slabs.keys().collect::<Vec<_>>(),
        fc_slabs.keys().collect::<Vec<_>>()
    );
    for (class, mc) in &mc_slabs {
        let fc = &fc_slabs[class];
        assert_eq!(mc.keys().collect::<Vec<_>>(), fc.keys().collect::<Vec<_>>());
        for field in ["chunk_size", "chunks_per_page", "used_chunks"] {
            assert_eq!(mc[field], fc[field], "class {class}: {field}");
        }
    }
    for (_, slabs) in &texts {
        assert!(slabs.contains("STAT active_slabs "), "{slabs}");
        assert!(slabs.contains("STAT total_malloced "), "{slabs}");
    }
}

#[test]
fn cachedump_lists_a_class_and_refuses_as_memcached() {
    let mut replies = Vec::new();
    for kind in [ServerKind::Memcached, ServerKind::Ferrocache] {
        let server = start(kind, &[]);
        let mut c = server.connect();
        fill(&mut c);
        let mut r = Vec::new();
        for command in [
            "stats cachedump 1",
            "stats cachedump x 1",
            "stats cachedump 1 x",
            "stats cachedump 64 0",
            "stats cachedump 63 0",
            "stats cachedump 0 0",
        ] {
            r.push(c.request_str(&format!("{command}\r\n")));
        }
        // Listing order is memcached's LRU order there and index order here: compare
        // the sets of lines of every class.
        let mut listed = BTreeSet::new();
        for class in 1..=40 {
            for line in c
                .request_str(&format!("stats cachedump {class} 0\r\n"))
                .lines()
            {
                listed.insert(format!("{class} {line}"));
            }
        }
        r.push(listed.into_iter().collect::<Vec<_>>().join("\n"));
        let limited = c.request_str("stats cachedump 2 1\r\n");
        r.push(limited.lines().count().to_string());
        replies.push(r);
    }
    assert_eq!(replies[0], replies[1]);

    let server = start(ServerKind::Ferrocache, &["-X"]);
    assert_eq!(
        server.connect().request_str("stats cachedump 1 1\r\n"),
        "CLIENT_ERROR stats cachedump not allowed\r\n"
    );
}

#[test]
fn sizes_are_tracked_from_sizes_enable_on() {
    let mut replies = Vec::new();
    for kind in [ServerKind::Memcached, ServerKind::Ferrocache] {
        let server = start(kind, &[]);
        let mut c = server.connect();
        let mut r = vec![c.request_str("stats sizes\r\n")];
        assert_eq!(c.request_str("set before 0 0 5\r\nhello\r\n"), "STORED\r\n");
        r.push(c.request_str("stats sizes_enable\r\n"));
        fill(&mut c);
        r.push(c.request_str("stats sizes\r\n"));
        r.push(c.request_str("stats sizes_disable\r\n"));
        r.push(c.request_str("stats sizes\r\n"));
        replies.push(r);
    }
    assert_eq!(replies[0], replies[1]);
    // Under -C memcached cannot tell the new items apart, and refuses.
    let mut replies = Vec::new();
    for kind in [ServerKind::Memcached, ServerKind::Ferrocache] {
        let server = start(kind, &["-C"]);
        replies.push(server.connect().request_str("stats sizes_enable\r\n"));
    }
    assert_eq!(replies[0], replies[1]);
}

/// The names of `stats` and `stats settings`, in order.
fn names(c: &mut Client, command: &str) -> Vec<String> {
    c.request_str(command)
        .lines()
        .filter_map(|l| l.strip_prefix("STAT "))
        .map(|l| l.split(' ').next().unwrap_or("").to_string())
        .collect()
}

#[test]
fn every_memcached_stat_is_there_in_memcacheds_order() {
    for extra in [
        &[][..],
        &[
            "-o",
            "no_lru_crawler,no_slab_reassign",
            "-o",
            "idle_timeout=30",
        ][..],
    ] {
        let mut lists = Vec::new();
        for kind in [ServerKind::Memcached, ServerKind::Ferrocache] {
            let server = start(kind, extra);
            let mut c = server.connect();
            lists.push((
                names(&mut c, "stats\r\n"),
                names(&mut c, "stats settings\r\n"),
            ));
        }
        let (mc, fc) = (&lists[0], &lists[1]);
        // ferrocache's own lines come after memcached's.
        assert_eq!(&fc.0[..mc.0.len()], &mc.0[..], "stats with {extra:?}");
        let fc_settings: BTreeSet<_> = fc.1.iter().collect();
        let missing: Vec<_> = mc.1.iter().filter(|n| !fc_settings.contains(n)).collect();
        assert!(missing.is_empty(), "stats settings lacks {missing:?}");
    }
}
