//! The text-protocol request parser: one framed line in, one [`Request`] out,
//! with the reply memcached gives for every malformed line.

use crate::lex::{safe_strtod, safe_strtol, safe_strtoll, safe_strtoul, safe_strtoull, Tokens};
use crate::meta::parse_meta;
use crate::request::{
    CrawlTarget, CrawlerCommand, DebugTime, DumpClasses, ErrorReply, ExtstoreSetting, GetCommand,
    Keys, MetaCommand, Request, StoreCommand, TuneCommand, WatchStreams, MAX_KEY_LEN,
};

/// memcached's class list: `all`, `hash`, or class ids joined by commas (empty items
/// skipped, each as `safe_strtoul` reads it, 1 to 63); `None` for anything else.
fn parse_dump_classes<'a>(arg: &[u8]) -> Request<'a> {
    if arg == b"all" || arg == b"hash" {
        return Request::MetaDump(Some(DumpClasses::ALL));
    }
    let mut mask = 0u64;
    for id in arg.split(|&b| b == b',').filter(|id| !id.is_empty()) {
        match safe_strtoul(id) {
            Some(id @ 1..=63) => mask |= 1 << id,
            _ => return Request::MetaDump(None),
        }
    }
    Request::MetaDump(Some(DumpClasses(mask)))
}

fn invalid<'a>(reply: ErrorReply) -> Request<'a> {
    Request::Invalid {
        reply,
        noreply: false,
    }
}

/// Parse one request line (as framed by [`frame_line`]).
///
/// [`frame_line`]: crate::text::frame_line
#[must_use]
pub fn parse_request(line: &[u8]) -> Request<'_> {
    if let Some(fast) = parse_plain_get(line) {
        return fast;
    }
    let t = Tokens::new(line, 0);
    let ntokens = t.len() + 1;
    let cmd = t.get(0);
    if t.is_empty() || cmd.len() < 2 {
        return invalid(ErrorReply::Error);
    }
    match (cmd.len(), cmd) {
        (2, b"mn") => Request::MetaNoop,
        (2, b"mg") => parse_meta(MetaCommand::Get, &t, line),
        (2, b"ms") => parse_meta(MetaCommand::Set, &t, line),
        (2, b"md") => parse_meta(MetaCommand::Delete, &t, line),
        (2, b"ma") => parse_meta(MetaCommand::Arithmetic, &t, line),
        (2, b"me") => parse_meta(MetaCommand::Debug, &t, line),
        (3, b"get") => parse_get(&t, line, GetCommand::Get),
        (4, b"gets") => parse_get(&t, line, GetCommand::Gets),
        (3, b"gat") => parse_get(&t, line, GetCommand::Gat),
        (4, b"gats") => parse_get(&t, line, GetCommand::Gats),
        (4, b"bget") => parse_get(&t, line, GetCommand::Get),
        (3, b"set") => parse_store(&t, StoreCommand::Set),
        (3, b"add") => parse_store(&t, StoreCommand::Add),
        (7, b"replace") => parse_store(&t, StoreCommand::Replace),
        (6, b"append") => parse_store(&t, StoreCommand::Append),
        (7, b"prepend") => parse_store(&t, StoreCommand::Prepend),
        (3, b"cas") => parse_store(&t, StoreCommand::Cas),
        (6, b"delete") => parse_delete(&t),
        (4, b"incr") => parse_arith(&t, true),
        (4, b"decr") => parse_arith(&t, false),
        (5, b"touch") => parse_touch(&t),
        (5, b"stats") => parse_stats(&t, line),
        (9, b"flush_all") => parse_flush_all(&t),
        (7, b"version") => Request::Version,
        (4, b"quit") => Request::Quit,
        (8, b"shutdown") => match (ntokens, t.get(1)) {
            (2, _) => Request::Shutdown { graceful: false },
            (3, b"graceful") => Request::Shutdown { graceful: true },
            _ => Request::Invalid {
                reply: ErrorReply::ShutdownMode,
                noreply: false,
            },
        },
        (9, b"verbosity") => parse_verbosity(&t),
        (13, b"refresh_certs") => Request::RefreshCerts {
            noreply: t.last_is_noreply(),
        },
        (14, b"cache_memlimit") | (8, b"memlimit") => parse_memlimit(&t),
        (11, b"lru_crawler") if ntokens == 4 && t.get(1) == b"metadump" => {
            parse_dump_classes(t.get(2))
        }
        (11, b"lru_crawler") => parse_lru_crawler(&t),
        (5, b"slabs") => parse_slabs(&t),
        (3, b"lru") => parse_lru(&t),
        (5, b"watch") => parse_watch(&t),
        (8, b"extstore") if ntokens >= 3 => parse_extstore(&t),
        (9, b"debugtime") if ntokens >= 3 => parse_debugtime(t.get(1)),
        _ => {
            if t.get(t.len() - 1).starts_with(b"HTTP/") {
                Request::Close
            } else {
                invalid(ErrorReply::Error)
            }
        }
    }
}

/// Fast path for the most common request, `get`/`gets` with keys: the key
/// iterator splits the line itself, so the general tokenizer (which would
/// scan the same bytes first) is skipped. Returns `None` for anything else.
fn parse_plain_get(line: &[u8]) -> Option<Request<'_>> {
    let start = line.iter().position(|&b| b != b' ')?;
    let rest = &line[start..];
    let (command, cmd_len) = if rest.starts_with(b"get ") {
        (GetCommand::Get, 3)
    } else if rest.starts_with(b"gets ") {
        (GetCommand::Gets, 4)
    } else {
        return None;
    };
    let keys_at = start + cmd_len;
    // memcached wants at least one token after the command.
    line[keys_at..]
        .iter()
        .any(|&b| b != b' ')
        .then(|| Request::Get {
            command,
            exptime: 0,
            keys: Keys::new(line, keys_at),
        })
}

fn parse_get<'a>(t: &Tokens<'a>, line: &'a [u8], command: GetCommand) -> Request<'a> {
    if t.len() + 1 < 3 {
        return invalid(ErrorReply::Error);
    }
    let (key_start, exptime) = match command {
        GetCommand::Gat | GetCommand::Gats => {
            let Some(exptime) = safe_strtol(t.get(1)) else {
                return invalid(ErrorReply::InvalidExptime);
            };
            (t.token_end(1), exptime)
        }
        _ => (t.token_end(0), 0),
    };
    Request::Get {
        command,
        exptime,
        keys: Keys::new(line, key_start),
    }
}

fn parse_store<'a>(t: &Tokens<'a>, command: StoreCommand) -> Request<'a> {
    let ntokens = t.len() + 1;
    let is_cas = command == StoreCommand::Cas;
    let ok = if is_cas {
        ntokens == 7 || ntokens == 8
    } else {
        ntokens == 6 || ntokens == 7
    };
    if !ok {
        return invalid(ErrorReply::Error);
    }
    let noreply = t.last_is_noreply();
    let bad = Request::Invalid {
        reply: ErrorReply::BadFormat,
        noreply,
    };
    let key = t.get(1);
    if key.len() > MAX_KEY_LEN {
        return bad;
    }
    let (Some(flags), Some(exptime), Some(vlen)) = (
        safe_strtoul(t.get(2)),
        safe_strtol(t.get(3)),
        safe_strtol(t.get(4)),
    ) else {
        return bad;
    };
    let cas = if is_cas {
        match safe_strtoull(t.get(5)) {
            Some(c) => c,
            None => return bad,
        }
    } else {
        0
    };
    if !(0..=i32::MAX - 2).contains(&vlen) {
        return bad;
    }
    Request::Store {
        command,
        key,
        flags,
        exptime,
        len: vlen as usize,
        cas,
        noreply,
    }
}

fn parse_delete<'a>(t: &Tokens<'a>) -> Request<'a> {
    let ntokens = t.len() + 1;
    if !(3..=5).contains(&ntokens) {
        return invalid(ErrorReply::Error);
    }
    let mut noreply = false;
    if ntokens > 3 {
        let hold_is_zero = t.get(2) == b"0";
        noreply = t.last_is_noreply();
        let valid = (ntokens == 4 && (hold_is_zero || noreply))
            || (ntokens == 5 && hold_is_zero && noreply);
        if !valid {
            return Request::Invalid {
                reply: ErrorReply::DeleteUsage,
                noreply,
            };
        }
    }
    let key = t.get(1);
    if key.len() > MAX_KEY_LEN {
        return Request::Invalid {
            reply: ErrorReply::BadFormat,
            noreply,
        };
    }
    Request::Delete { key, noreply }
}

fn parse_arith<'a>(t: &Tokens<'a>, incr: bool) -> Request<'a> {
    let ntokens = t.len() + 1;
    if ntokens != 4 && ntokens != 5 {
        return invalid(ErrorReply::Error);
    }
    let noreply = t.last_is_noreply();
    let key = t.get(1);
    if key.len() > MAX_KEY_LEN {
        return Request::Invalid {
            reply: ErrorReply::BadFormat,
            noreply,
        };
    }
    match safe_strtoull(t.get(2)) {
        Some(delta) => Request::Arith {
            incr,
            key,
            delta,
            noreply,
        },
        None => Request::Invalid {
            reply: ErrorReply::InvalidDelta,
            noreply,
        },
    }
}

fn parse_touch<'a>(t: &Tokens<'a>) -> Request<'a> {
    let ntokens = t.len() + 1;
    if ntokens != 4 && ntokens != 5 {
        return invalid(ErrorReply::Error);
    }
    let noreply = t.last_is_noreply();
    let key = t.get(1);
    if key.len() > MAX_KEY_LEN {
        return Request::Invalid {
            reply: ErrorReply::BadFormat,
            noreply,
        };
    }
    match safe_strtol(t.get(2)) {
        Some(exptime) => Request::Touch {
            key,
            exptime,
            noreply,
        },
        None => Request::Invalid {
            reply: ErrorReply::InvalidExptime,
            noreply,
        },
    }
}

fn parse_flush_all<'a>(t: &Tokens<'a>) -> Request<'a> {
    let ntokens = t.len() + 1;
    if !(2..=4).contains(&ntokens) {
        return invalid(ErrorReply::Error);
    }
    let noreply = t.last_is_noreply();
    let mut delay = 0;
    if ntokens != if noreply { 3 } else { 2 } {
        match safe_strtol(t.get(1)) {
            Some(d) => delay = d,
            None => {
                return Request::Invalid {
                    reply: ErrorReply::InvalidExptime,
                    noreply,
                }
            }
        }
    }
    Request::FlushAll { delay, noreply }
}

/// memcached-debug's `debugtime`: `p`, `r`, or a number of seconds, negative too, as
/// its `safe_strtoll` reads it.
fn parse_debugtime<'a>(arg: &[u8]) -> Request<'a> {
    match arg {
        b"p" => Request::DebugTime(DebugTime::Pause),
        b"r" => Request::DebugTime(DebugTime::Resume),
        _ => match safe_strtoll(arg) {
            Some(secs) => Request::DebugTime(DebugTime::Move(secs)),
            None => invalid(ErrorReply::Error),
        },
    }
}

fn parse_verbosity<'a>(t: &Tokens<'a>) -> Request<'a> {
    let ntokens = t.len() + 1;
    if ntokens != 3 && ntokens != 4 {
        return invalid(ErrorReply::Error);
    }
    let noreply = t.last_is_noreply();
    match safe_strtoul(t.get(1)) {
        Some(level) => Request::Verbosity { level, noreply },
        None => Request::Invalid {
            reply: ErrorReply::BadFormat,
            noreply,
        },
    }
}

/// `watch [stream ...]`: no stream names means `fetchers`; `noreply` is read as
/// memcached reads it, and then met as an unknown stream name (whose `ERROR` it
/// suppresses).
fn parse_watch<'a>(t: &Tokens<'a>) -> Request<'a> {
    let noreply = t.last_is_noreply();
    if t.len() < 2 {
        return Request::Watch {
            streams: Some(WatchStreams(WatchStreams::FETCHERS)),
            noreply,
        };
    }
    let mut bits = 0;
    for i in 1..t.len() {
        match WatchStreams::bit(t.get(i)) {
            Some(b) => bits |= b,
            None => {
                return Request::Watch {
                    streams: None,
                    noreply,
                }
            }
        }
    }
    Request::Watch {
        streams: Some(WatchStreams(bits)),
        noreply,
    }
}

fn parse_memlimit<'a>(t: &Tokens<'a>) -> Request<'a> {
    let ntokens = t.len() + 1;
    if ntokens != 3 && ntokens != 4 {
        return invalid(ErrorReply::Error);
    }
    let noreply = t.last_is_noreply();
    match safe_strtoul(t.get(1)) {
        Some(megabytes) => Request::MemLimit { megabytes, noreply },
        None => Request::Invalid {
            reply: ErrorReply::Error,
            noreply,
        },
    }
}

/// `extstore <setting> <value> [noreply]`: memcached's `process_extstore_command`,
/// which answers `ERROR` to fewer than two arguments, an unknown setting or a value
/// that is not a number.
fn parse_extstore<'a>(t: &Tokens<'a>) -> Request<'a> {
    let ntokens = t.len() + 1;
    let noreply = t.last_is_noreply();
    let num = || safe_strtoul(t.get(2));
    let setting = if ntokens < 4 {
        None
    } else {
        match t.get(1) {
            b"free_memchunks" if ntokens > 4 => {
                match (safe_strtoul(t.get(2)), safe_strtoul(t.get(3))) {
                    // memcached's MAX_NUMBER_OF_SLAB_CLASSES.
                    (Some(class), Some(_)) if class < 64 => Some(ExtstoreSetting::FreeMemchunks),
                    _ => None,
                }
            }
            b"item_size" => num().map(ExtstoreSetting::ItemSize),
            b"item_age" => num().map(ExtstoreSetting::ItemAge),
            b"low_ttl" => num().map(ExtstoreSetting::LowTtl),
            b"recache_rate" => num().map(ExtstoreSetting::RecacheRate),
            b"compact_under" => num().map(ExtstoreSetting::CompactUnder),
            b"drop_under" => num().map(ExtstoreSetting::DropUnder),
            b"max_sleep" => num().map(ExtstoreSetting::MaxSleep),
            b"max_frag" => safe_strtod(t.get(2)).map(ExtstoreSetting::MaxFrag),
            b"drop_unread" => num().map(|v| ExtstoreSetting::DropUnread(v != 0)),
            _ => None,
        }
    };
    Request::Tune {
        command: TuneCommand::Extstore(setting),
        noreply,
    }
}

/// `lru_crawler` without `metadump`: memcached's `process_lru_crawler_command`.
fn parse_lru_crawler<'a>(t: &Tokens<'a>) -> Request<'a> {
    let ntokens = t.len() + 1;
    let command = match (ntokens, t.get(1)) {
        (4, b"crawl") => CrawlerCommand::Crawl(match parse_dump_classes(t.get(2)) {
            _ if t.get(2) == b"hash" => CrawlTarget::Hash,
            Request::MetaDump(Some(classes)) => CrawlTarget::Classes(classes),
            _ => CrawlTarget::BadClass,
        }),
        (4, b"tocrawl") => match safe_strtoul(t.get(2)) {
            Some(n) => CrawlerCommand::Tocrawl(n),
            None => return invalid(ErrorReply::BadFormat),
        },
        (4, b"sleep") => match safe_strtoul(t.get(2)) {
            Some(us) if us <= 1_000_000 => CrawlerCommand::Sleep(us),
            Some(_) => return invalid(ErrorReply::CrawlerSleepTooLong),
            None => return invalid(ErrorReply::BadFormat),
        },
        (3, b"enable") => CrawlerCommand::Enable,
        (3, b"disable") => CrawlerCommand::Disable,
        _ => return invalid(ErrorReply::Error),
    };
    Request::LruCrawler(command)
}

/// `slabs reassign|automove`: memcached's `process_slabs_command`. Only `automove`
/// takes `noreply`.
fn parse_slabs<'a>(t: &Tokens<'a>) -> Request<'a> {
    let ntokens = t.len() + 1;
    if ntokens == 5 && t.get(1) == b"reassign" {
        let pair = safe_strtol(t.get(2)).zip(safe_strtol(t.get(3)));
        return Request::Tune {
            command: TuneCommand::SlabsReassign(pair),
            noreply: false,
        };
    }
    if ntokens < 4 || t.get(1) != b"automove" {
        return invalid(ErrorReply::Error);
    }
    let noreply = t.last_is_noreply();
    let fail = |reply| Request::Invalid { reply, noreply };
    let command = if t.get(2) == b"ratio" {
        match (ntokens >= 5).then(|| safe_strtod(t.get(3))).flatten() {
            Some(ratio) => TuneCommand::SlabsAutomoveRatio(ratio),
            None => return fail(ErrorReply::Error),
        }
    } else {
        match safe_strtoul(t.get(2)) {
            Some(level @ 0..=2) => TuneCommand::SlabsAutomove(level),
            Some(_) => return fail(ErrorReply::Error),
            None => return fail(ErrorReply::BadFormat),
        }
    };
    Request::Tune { command, noreply }
}

/// `lru tune|mode|temp_ttl`: memcached's `process_lru_command`. The range checks of
/// `tune` and whether `mode` and `temp_ttl` are allowed are left to the caller.
fn parse_lru<'a>(t: &Tokens<'a>) -> Request<'a> {
    let ntokens = t.len() + 1;
    if ntokens < 3 {
        return invalid(ErrorReply::Error);
    }
    let noreply = t.last_is_noreply();
    let command = match t.get(1) {
        b"tune" if ntokens >= 7 => {
            let parsed = (|| {
                Some(TuneCommand::LruTune {
                    hot_pct: safe_strtoul(t.get(2))?,
                    warm_pct: safe_strtoul(t.get(3))?,
                    hot_factor: safe_strtod(t.get(4))?,
                    warm_factor: safe_strtod(t.get(5))?,
                })
            })();
            match parsed {
                Some(command) => command,
                None => {
                    return Request::Invalid {
                        reply: ErrorReply::Error,
                        noreply,
                    }
                }
            }
        }
        b"mode" if ntokens >= 4 => TuneCommand::LruMode(match t.get(2) {
            b"flat" => Some(false),
            b"segmented" => Some(true),
            _ => None,
        }),
        b"temp_ttl" if ntokens >= 4 => TuneCommand::LruTempTtl(safe_strtol(t.get(2))),
        _ => {
            return Request::Invalid {
                reply: ErrorReply::Error,
                noreply,
            }
        }
    };
    Request::Tune { command, noreply }
}

/// `stats ...`: the groups and their arguments are the server's to read (one table
/// there, for the text and binary protocols both); here only where they start.
fn parse_stats<'a>(t: &Tokens<'a>, line: &'a [u8]) -> Request<'a> {
    Request::Stats(&line[t.token_end(0)..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(line: &str) -> Request<'_> {
        parse_request(line.as_bytes())
    }

    #[test]
    fn watch_streams_parse_as_memcached() {
        let streams = |line| match req(line) {
            Request::Watch { streams, noreply } => (streams.map(|s| s.0), noreply),
            other => panic!("{other:?}"),
        };
        assert_eq!(streams("watch"), (Some(WatchStreams::FETCHERS), false));
        assert_eq!(
            streams("watch mutations evictions connevents proxyreqs"),
            (
                Some(
                    WatchStreams::MUTATIONS
                        | WatchStreams::EVICTIONS
                        | WatchStreams::CONNEVENTS
                        | WatchStreams::PROXYREQS
                ),
                false
            )
        );
        assert_eq!(streams("watch fetchers bogus"), (None, false));
        // memcached reads `noreply`, then meets it as an unknown stream.
        assert_eq!(streams("watch noreply"), (None, true));
    }

    fn invalid_reply(line: &str) -> Option<(ErrorReply, bool)> {
        match req(line) {
            Request::Invalid { reply, noreply } => Some((reply, noreply)),
            _ => None,
        }
    }

    #[test]
    fn parses_debugtime_as_memcached_debug_does() {
        use crate::request::DebugTime;
        assert!(matches!(
            req("debugtime p"),
            Request::DebugTime(DebugTime::Pause)
        ));
        assert!(matches!(
            req("debugtime r"),
            Request::DebugTime(DebugTime::Resume)
        ));
        assert!(matches!(
            req("debugtime 30 extra"),
            Request::DebugTime(DebugTime::Move(30))
        ));
        assert!(matches!(
            req("debugtime -5"),
            Request::DebugTime(DebugTime::Move(-5))
        ));
        // No argument, or not a number: an unknown command's ERROR.
        for line in ["debugtime", "debugtime x", "debugtime 1x"] {
            assert_eq!(
                invalid_reply(line),
                Some((ErrorReply::Error, false)),
                "{line}"
            );
        }
    }

    #[test]
    fn parses_storage_commands() {
        match req("set k 5 10 3 noreply") {
            Request::Store {
                command,
                key,
                flags,
                exptime,
                len,
                noreply,
                ..
            } => {
                assert_eq!(command, StoreCommand::Set);
                assert_eq!(key, b"k");
                assert_eq!((flags, exptime, len, noreply), (5, 10, 3, true));
            }
            other => panic!("{other:?}"),
        }
        match req("cas k 0 0 1 77") {
            Request::Store { cas, command, .. } => {
                assert_eq!((command, cas), (StoreCommand::Cas, 77))
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(invalid_reply("set k 0 0"), Some((ErrorReply::Error, false)));
        assert_eq!(
            invalid_reply("set k 0 0 -1"),
            Some((ErrorReply::BadFormat, false))
        );
        assert_eq!(
            invalid_reply("set k x 0 1 noreply"),
            Some((ErrorReply::BadFormat, true))
        );
        let long_key = format!("set {} 0 0 1", "a".repeat(251));
        assert_eq!(
            invalid_reply(&long_key),
            Some((ErrorReply::BadFormat, false))
        );
        let ok_key = format!("set {} 0 0 1", "a".repeat(250));
        assert!(matches!(req(&ok_key), Request::Store { .. }));
        assert_eq!(
            invalid_reply("cas k 0 0 1 x"),
            Some((ErrorReply::BadFormat, false))
        );
    }

    #[test]
    fn parses_retrieval_commands() {
        match req("gets a  b c") {
            Request::Get { command, keys, .. } => {
                assert_eq!(command, GetCommand::Gets);
                assert_eq!(keys.collect::<Vec<_>>(), vec![&b"a"[..], b"b", b"c"]);
            }
            other => panic!("{other:?}"),
        }
        match req("gat 100 a") {
            Request::Get { exptime, keys, .. } => {
                assert_eq!(exptime, 100);
                assert_eq!(keys.count(), 1);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(invalid_reply("get"), Some((ErrorReply::Error, false)));
        assert_eq!(
            invalid_reply("gat x a"),
            Some((ErrorReply::InvalidExptime, false))
        );
        assert!(matches!(req("gat 10"), Request::Get { .. }));
    }

    #[test]
    fn parses_other_commands() {
        assert!(matches!(
            req("delete k"),
            Request::Delete { noreply: false, .. }
        ));
        assert!(matches!(
            req("delete k 0"),
            Request::Delete { noreply: false, .. }
        ));
        assert!(matches!(
            req("delete k 0 noreply"),
            Request::Delete { noreply: true, .. }
        ));
        assert_eq!(
            invalid_reply("delete k 1"),
            Some((ErrorReply::DeleteUsage, false))
        );
        assert_eq!(invalid_reply("delete"), Some((ErrorReply::Error, false)));
        assert!(matches!(
            req("incr k 5"),
            Request::Arith {
                incr: true,
                delta: 5,
                ..
            }
        ));
        assert_eq!(
            invalid_reply("decr k -1 noreply"),
            Some((ErrorReply::InvalidDelta, true))
        );
        assert!(matches!(
            req("touch k 10"),
            Request::Touch { exptime: 10, .. }
        ));
        assert!(matches!(
            req("flush_all"),
            Request::FlushAll {
                delay: 0,
                noreply: false
            }
        ));
        assert!(matches!(
            req("flush_all noreply"),
            Request::FlushAll {
                delay: 0,
                noreply: true
            }
        ));
        assert!(matches!(
            req("flush_all 10 noreply"),
            Request::FlushAll {
                delay: 10,
                noreply: true
            }
        ));
        assert_eq!(
            invalid_reply("flush_all noreply 10"),
            Some((ErrorReply::InvalidExptime, false))
        );
        assert_eq!(invalid_reply("verbosity"), Some((ErrorReply::Error, false)));
        assert_eq!(
            invalid_reply("verbosity x"),
            Some((ErrorReply::BadFormat, false))
        );
        assert!(matches!(req("version"), Request::Version));
        assert!(matches!(req("quit"), Request::Quit));
        assert!(matches!(
            req("refresh_certs"),
            Request::RefreshCerts { noreply: false }
        ));
        assert!(matches!(
            req("refresh_certs noreply"),
            Request::RefreshCerts { noreply: true }
        ));
        assert!(matches!(req("mn"), Request::MetaNoop));
        // The server reads the groups: the parser hands on what follows `stats`.
        assert!(matches!(req("stats"), Request::Stats(b"")));
        assert!(matches!(
            req("stats  detail on"),
            Request::Stats(b"  detail on")
        ));
        assert!(matches!(req("stats foo"), Request::Stats(b" foo")));
        assert!(matches!(req("GET / HTTP/1.1"), Request::Close));
        assert_eq!(invalid_reply("x"), Some((ErrorReply::Error, false)));
        assert_eq!(invalid_reply(""), Some((ErrorReply::Error, false)));
        assert_eq!(invalid_reply("GET k"), Some((ErrorReply::Error, false)));
    }

    #[test]
    fn tuning_commands_parse_as_memcached() {
        use CrawlerCommand as C;
        let crawler = |line| match req(line) {
            Request::LruCrawler(c) => Ok(c),
            Request::Invalid { reply, .. } => Err(reply),
            other => panic!("{line}: {other:?}"),
        };
        assert_eq!(crawler("lru_crawler enable"), Ok(C::Enable));
        assert_eq!(crawler("lru_crawler enable x"), Err(ErrorReply::Error));
        assert_eq!(
            crawler("lru_crawler sleep 1000000"),
            Ok(C::Sleep(1_000_000))
        );
        assert_eq!(
            crawler("lru_crawler sleep 1000001"),
            Err(ErrorReply::CrawlerSleepTooLong)
        );
        assert_eq!(
            crawler("lru_crawler tocrawl -1"),
            Err(ErrorReply::BadFormat)
        );
        assert_eq!(
            crawler("lru_crawler crawl 1,3"),
            Ok(C::Crawl(CrawlTarget::Classes(DumpClasses(0b1010))))
        );
        assert_eq!(
            crawler("lru_crawler crawl 64"),
            Ok(C::Crawl(CrawlTarget::BadClass))
        );
        assert_eq!(
            crawler("lru_crawler crawl hash"),
            Ok(C::Crawl(CrawlTarget::Hash))
        );
        // metadump keeps its own request.
        assert!(matches!(
            req("lru_crawler metadump all"),
            Request::MetaDump(Some(_))
        ));

        let tune = |line| match req(line) {
            Request::Tune { command, noreply } => Ok((command, noreply)),
            Request::Invalid { reply, noreply } => Err((reply, noreply)),
            other => panic!("{line}: {other:?}"),
        };
        assert_eq!(
            tune("slabs reassign 1 x"),
            Ok((TuneCommand::SlabsReassign(None), false))
        );
        assert_eq!(
            tune("slabs automove 2 noreply"),
            Ok((TuneCommand::SlabsAutomove(2), true))
        );
        assert_eq!(tune("slabs automove 3"), Err((ErrorReply::Error, false)));
        assert_eq!(
            tune("slabs automove x"),
            Err((ErrorReply::BadFormat, false))
        );
        assert_eq!(
            tune("slabs automove ratio"),
            Err((ErrorReply::Error, false))
        );
        assert_eq!(tune("lru tune 1 2 3"), Err((ErrorReply::Error, false)));
        assert_eq!(
            tune("lru tune 1 2 0.5 4 noreply"),
            Ok((
                TuneCommand::LruTune {
                    hot_pct: 1,
                    warm_pct: 2,
                    hot_factor: 0.5,
                    warm_factor: 4.0
                },
                true
            ))
        );
        assert_eq!(tune("lru mode x"), Ok((TuneCommand::LruMode(None), false)));
        assert_eq!(
            tune("lru temp_ttl -1"),
            Ok((TuneCommand::LruTempTtl(Some(-1)), false))
        );
        assert_eq!(tune("lru x"), Err((ErrorReply::Error, false)));
    }
}
