//! The table of options: every memcached flag, every ferrocache long option and every
//! `-o` suboption is one [`Row`], with its name, its parser (which checks the value with
//! memcached's message and writes the typed setting), what it acts on, its `stats
//! settings` lines, its `-h` lines, and for a suboption what docs/operations.md says of
//! it (that page's tables of suboptions are made from the rows). The command line goes
//! through these rows once, into [`Settings`]; every reader takes the typed value from
//! there.
//!
//! The rows live beside the settings they write:
//! - `options.rs`: memcached's flags, in the order of its `longopts` (glibc lists the
//!   names an ambiguous prefix could mean in that order), then ferrocache's long options;
//! - `extended.rs`: memcached's own `-o` suboptions, in `-h`'s order;
//! - `extstore.rs`: the `ext_*` ones (extstore's parser);
//! - `tls.rs`: the `ssl_*` ones.
//!
//! `config.rs` puts the groups together (`TABLE`). Each default is written once, in the
//! `Default` of the typed settings a row writes (`Settings`, `Extended`, `Tunables`,
//! `TlsOptions`, and storage's `FlashConfig`). The order of `stats settings` is
//! memcached's, which is not the table's: [`SETTINGS_ORDER`] names the lines in that
//! order, and the rows say how each is shown.

use std::borrow::Cow;

use super::getopt::OptSpec;
use super::refusal::{safe_strtod, safe_strtoul, Refusal};
use super::{Draft, Settings, Tunables};

/// A row's parser: reads `Arg`, checks it as memcached does (its message, `return 1`
/// from the option loop, or `exit(EX_USAGE)` where memcached exits there), and writes
/// the typed setting into the draft. Later values overwrite earlier ones, so the last
/// one given wins, as in memcached.
pub type Parse = fn(&mut Draft, Arg<'_>) -> Result<(), Refusal>;

/// One option of the command line.
pub struct Row {
    pub name: Name,
    pub parse: Parse,
    pub acts: Acts,
    /// Its `stats settings` lines (none for an option memcached does not show).
    pub lines: &'static [Line],
    /// `-h`'s text for it: the words after its name, then each further line. The flags
    /// of `options.rs` that memcached has are listed in `usage.txt` instead, in
    /// memcached's order.
    pub help: &'static [&'static str],
    /// What docs/operations.md says of a suboption, after "acted on" or "inert" (its
    /// tables of suboptions are made from these; the flags' are written there).
    pub doc: &'static str,
}

impl Row {
    /// The name its parser's messages use: the suboption's, or the flag's long name.
    #[must_use]
    pub fn arg_name(&self) -> &'static str {
        match self.name {
            Name::Sub(name) => name,
            Name::Flag(spec) => spec.long.unwrap_or_default(),
        }
    }
}

/// How the command line names an option.
#[derive(Clone, Copy, Debug)]
pub enum Name {
    /// A flag, with its letter and long name as getopt matches them.
    Flag(OptSpec),
    /// An `-o` suboption.
    Sub(&'static str),
}

/// What an option changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acts {
    /// Read by the server: the typed setting it writes, and what reads it.
    On(&'static str),
    /// Accepted, checked and shown in `stats settings` as memcached shows it; it tunes
    /// a memcached internal that ferrocache does not have, and changes nothing here.
    Inert,
}

/// An option's value as its parser gets it.
#[derive(Clone, Copy, Debug)]
pub struct Arg<'a> {
    /// The suboption's name, or the flag's long name: messages name it.
    pub name: &'static str,
    /// `=VALUE` of a suboption, or a flag's argument.
    pub value: Option<&'a str>,
}

impl<'a> Arg<'a> {
    /// The value, or memcached's `Missing <what>` when a suboption has no `=VALUE`.
    pub fn need(self, what: &str) -> Result<&'a str, Refusal> {
        self.value
            .ok_or_else(|| Refusal::failure(format!("Missing {what}")))
    }

    /// The value, or `Missing <name> argument`.
    pub fn value(self) -> Result<&'a str, Refusal> {
        self.need(&format!("{} argument", self.name))
    }

    /// A flag's argument as getopt found it (empty for a flag that takes none).
    pub fn text(self) -> &'a str {
        self.value.unwrap_or_default()
    }

    /// The value as memcached's `safe_strtoul` reads it, or `could not parse argument
    /// to <name>`.
    pub fn strtoul(self) -> Result<u32, Refusal> {
        safe_strtoul(self.value()?).ok_or_else(|| self.unparsed())
    }

    /// The value as memcached's `safe_strtod` reads it, with the same messages.
    pub fn strtod(self) -> Result<f64, Refusal> {
        safe_strtod(self.value()?).ok_or_else(|| self.unparsed())
    }

    /// memcached's `could not parse argument to <name>`.
    pub fn unparsed(self) -> Refusal {
        Refusal::failure(format!("could not parse argument to {}", self.name))
    }
}

/// Writes `value` into a setting: the one statement most rows end with.
pub fn set<T>(field: &mut T, value: T) -> Result<(), Refusal> {
    *field = value;
    Ok(())
}

/// `return 1` from memcached's option loop with `message`.
pub fn fail<T>(message: impl Into<String>) -> Result<T, Refusal> {
    Err(Refusal::failure(message))
}

/// One line of `stats settings`: its name and how its value is shown.
pub struct Line {
    pub name: &'static str,
    pub show: Show,
}

/// How a `stats settings` value is read and printed.
#[derive(Clone, Copy)]
pub enum Show {
    /// A number, as C's `%d`/`%u`.
    Num(fn(&View<'_>) -> i64),
    /// `yes` or `no`.
    YesNo(fn(&View<'_>) -> bool),
    /// `on` or `off`.
    OnOff(fn(&View<'_>) -> bool),
    /// C's `%.Nf` with N digits (NaN prints as `nan`, as glibc prints it).
    Fixed(usize, fn(&View<'_>) -> f64),
    /// Text as it is.
    Text(for<'a> fn(&'a View<'a>) -> Cow<'a, str>),
}

/// What `stats settings` reads: the settings as parsed, and the values that commands
/// change while the server runs.
pub struct View<'a> {
    pub s: &'a Settings,
    /// The crawler's tunables now (`lru_crawler`, `slabs automove`, `lru tune`,
    /// `extstore` change them; with a flash tier, `ext` is the tier's).
    pub t: &'a Tunables,
    /// `-m` now (`cache_memlimit` changes it).
    pub maxbytes: usize,
    /// `-v` now (`verbosity` changes it).
    pub verbosity: u32,
    /// `stats detail on|off`.
    pub detail_enabled: bool,
    /// `stats sizes_enable|sizes_disable`.
    pub track_sizes: bool,
}

impl Line {
    /// The value this line shows in `view`.
    #[must_use]
    pub fn value<'a>(&self, view: &'a View<'a>) -> Cow<'a, str> {
        let word =
            |b: bool, yes: &'static str, no: &'static str| Cow::Borrowed(if b { yes } else { no });
        match self.show {
            Show::Num(f) => f(view).to_string().into(),
            Show::YesNo(f) => word(f(view), "yes", "no"),
            Show::OnOff(f) => word(f(view), "on", "off"),
            Show::Fixed(_, f) if f(view).is_nan() => "nan".into(),
            Show::Fixed(digits, f) => format!("{:.digits$}", f(view)).into(),
            Show::Text(f) => f(view),
        }
    }
}

/// A line shown as a number.
pub const fn num(name: &'static str, f: fn(&View<'_>) -> i64) -> Line {
    Line {
        name,
        show: Show::Num(f),
    }
}

/// A line shown as `yes` or `no`.
pub const fn yes_no(name: &'static str, f: fn(&View<'_>) -> bool) -> Line {
    Line {
        name,
        show: Show::YesNo(f),
    }
}

/// A line shown as `on` or `off`.
pub const fn on_off(name: &'static str, f: fn(&View<'_>) -> bool) -> Line {
    Line {
        name,
        show: Show::OnOff(f),
    }
}

/// A line shown as C's `%.<digits>f`.
pub const fn fixed(name: &'static str, digits: usize, f: fn(&View<'_>) -> f64) -> Line {
    Line {
        name,
        show: Show::Fixed(digits, f),
    }
}

/// A line shown as text.
pub const fn text(name: &'static str, f: for<'a> fn(&'a View<'a>) -> Cow<'a, str>) -> Line {
    Line {
        name,
        show: Show::Text(f),
    }
}

/// A row.
pub const fn row(
    name: Name,
    parse: Parse,
    acts: Acts,
    lines: &'static [Line],
    help: &'static [&'static str],
    doc: &'static str,
) -> Row {
    Row {
        name,
        parse,
        acts,
        lines,
        help,
        doc,
    }
}

/// An `-o` suboption's row.
pub const fn sub(
    name: &'static str,
    parse: Parse,
    acts: Acts,
    lines: &'static [Line],
    help: &'static [&'static str],
    doc: &'static str,
) -> Row {
    row(Name::Sub(name), parse, acts, lines, help, doc)
}

/// The `stats settings` lines no option sets.
const FIXED_LINES: &[Line] = &[
    // memcached prints 0 here since 1.5 (its `oldest_live` is shown as a time, not set).
    num("oldest", |_| 0),
];

/// `stats settings`' lines in memcached 1.6.18's order, then ferrocache's own (those
/// of options added later may come after these, in the table's order).
pub const SETTINGS_ORDER: &[&str] = &[
    "maxbytes",
    "maxconns",
    "tcpport",
    "udpport",
    "inter",
    "verbosity",
    "oldest",
    "evictions",
    "domain_socket",
    "umask",
    "shutdown_command",
    "growth_factor",
    "chunk_size",
    "num_threads",
    "num_threads_per_udp",
    "stat_key_prefix",
    "detail_enabled",
    "reqs_per_event",
    "cas_enabled",
    "tcp_backlog",
    "binding_protocol",
    "auth_enabled_sasl",
    "auth_enabled_ascii",
    "item_size_max",
    "maxconns_fast",
    "hashpower_init",
    "slab_reassign",
    "slab_automove",
    "slab_automove_ratio",
    "slab_automove_window",
    "slab_chunk_max",
    "lru_crawler",
    "lru_crawler_sleep",
    "lru_crawler_tocrawl",
    "tail_repair_time",
    "flush_enabled",
    "dump_enabled",
    "hash_algorithm",
    "lru_maintainer_thread",
    "lru_segmented",
    "hot_lru_pct",
    "warm_lru_pct",
    "hot_max_factor",
    "warm_max_factor",
    "temp_lru",
    "temporary_ttl",
    "idle_timeout",
    "watcher_logbuf_size",
    "worker_logbuf_size",
    "read_buf_mem_limit",
    "track_sizes",
    "inline_ascii_response",
    "ext_item_size",
    "ext_item_age",
    "ext_low_ttl",
    "ext_recache_rate",
    "ext_wbuf_size",
    "ext_compact_under",
    "ext_drop_under",
    "ext_max_sleep",
    "ext_max_frag",
    "slab_automove_freeratio",
    "ext_drop_unread",
    "ssl_enabled",
    "ssl_chain_cert",
    "ssl_key",
    "ssl_verify_mode",
    "ssl_keyformat",
    "ssl_ciphers",
    "ssl_ca_cert",
    "ssl_wbuf_size",
    "ssl_session_cache",
    "ssl_kernel_tls",
    "ssl_min_version",
    "num_napi_ids",
    "memory_file",
    "watch_enabled",
    "io_backend",
    "null_store",
    "pin",
    "busy_poll_us",
    "large_pages",
    "udp_gso",
    "latency_histograms",
    "metrics_listen",
    "zero_copy_min",
];

/// The lines of `rows` and [`FIXED_LINES`]: those [`SETTINGS_ORDER`] names, in its
/// order, then any other in the rows' order (a new option of ferrocache's own needs no
/// place there).
pub fn settings_lines_of(
    rows: impl Iterator<Item = &'static Row> + Clone,
) -> impl Iterator<Item = &'static Line> {
    let all = move || rows.clone().flat_map(|r| r.lines.iter()).chain(FIXED_LINES);
    let placed = SETTINGS_ORDER.iter().filter_map({
        let all = all.clone();
        move |name| all().find(|l| l.name == *name)
    });
    placed.chain(all().filter(|l| !SETTINGS_ORDER.contains(&l.name)))
}

/// `-h`'s column where an option's text starts.
const HELP_COLUMN: usize = 26;

/// `-h`: memcached's listing (`usage.txt`) with each group of suboptions' lines, after
/// its heading, where it lists them, then the `long` options' lines.
pub fn usage_of(suboptions: &[(&str, &[Row])], long: &[Row]) -> String {
    const USAGE: &str = include_str!("usage.txt");
    const MARK: &str = "@suboptions@\n";
    let (head, tail) = USAGE.split_once(MARK).unwrap_or((USAGE, ""));
    let mut out = head.to_string();
    for (heading, rows) in suboptions {
        out.push_str(heading);
        for row in rows.iter() {
            if let Name::Sub(name) = row.name {
                // memcached's list puts one blank after a name too long for the column.
                help_lines(&mut out, &format!("   - {name}:"), row.help, 1, " ");
            }
        }
    }
    out.push_str(tail);
    for row in long {
        if let [synopsis, text @ ..] = row.help {
            let overflow = format!("\n{}", " ".repeat(HELP_COLUMN));
            help_lines(&mut out, synopsis, text, 2, &overflow);
        }
    }
    out
}

/// One option's lines in `-h`: `head`, then its text from [`HELP_COLUMN`] with at least
/// `gap` blanks between, or after `overflow` where `head` is too long for that; then
/// each of `more` at the column.
fn help_lines(out: &mut String, head: &str, text: &[&str], gap: usize, overflow: &str) {
    let indent = " ".repeat(HELP_COLUMN);
    let [first, more @ ..] = text else { return };
    out.push_str(head);
    if head.len() + gap > HELP_COLUMN {
        out.push_str(overflow);
    } else {
        out.push_str(&indent[head.len()..]);
    }
    out.push_str(first);
    out.push('\n');
    for line in more {
        out.push_str(&indent);
        out.push_str(line);
        out.push('\n');
    }
}
