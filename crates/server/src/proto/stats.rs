//! The `stats` groups: one table, [`GROUPS`], that the text protocol (`stats <group>
//! ...`), the binary protocol's STAT (the group in the key) and the `-vv` request log
//! all read. A row names the group, the report that writes its reply, and how each
//! protocol finds and frames it; a new group is one row and its report.
//!
//! A report writes the text protocol's reply, as memcached does: `STAT <name> <value>`
//! lines and `END`, or one line (`RESET`, `OK`, an error). The binary protocol sends
//! each `STAT` line as a key/value packet, drops the other lines, and ends with an
//! empty packet, as memcached's `append_bin_stats`; `stats detail dump` goes whole, as
//! one stat's value.
//!
//! ```text
//!   text    "stats" then the group's words, matched token by token (memcached's
//!           strcmp); none: ERROR. The report gets the tokens from the group's name on.
//!   binary  the key matched whole, or (reset, settings, detail) the key and what
//!           follows it in the input matched as a prefix (memcached's strncmp against
//!           its read buffer); none: `Not found`.
//! ```

use protocol::text::{ErrorReply, Tokens};

use crate::ops::stats::{extstore, general, latency, settings};
use crate::ops::{slabs, Exec};

/// What writes a group's reply: given the request's tokens from the group's name on
/// (the text line's, or the binary key's).
pub type Report = fn(&Exec<'_>, &Tokens<'_>, &mut Vec<u8>);

/// How the text protocol's reply is written, which decides whether `-vv` logs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextReply {
    /// `STAT` lines, as memcached's `append_stats` writes them: not logged.
    Stats,
    /// One line, as memcached's `out_string` writes it: logged.
    Line,
}

/// How the binary protocol's STAT finds a group by its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryMatch {
    /// Not served: `Not found`.
    No,
    /// The key is the name.
    Exact,
    /// The key, with what follows it in the input, starts with the name.
    Prefix,
}

/// How the binary protocol frames a group's reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryReply {
    /// Each `STAT` line a packet; other lines dropped.
    Stats,
    /// The whole reply as the value of one stat of this name.
    Whole(&'static [u8]),
}

/// One `stats` group.
pub struct Group {
    /// The words after `stats`: empty for the plain `stats`, two for a sub-command
    /// (`detail on`).
    pub name: &'static str,
    pub report: Report,
    pub text: TextReply,
    pub binary: (BinaryMatch, BinaryReply),
}

use BinaryMatch::{Exact, No, Prefix};
use BinaryReply::{Stats as Packets, Whole};
use TextReply::{Line, Stats};

/// Every group, in the order they are tried (a binary prefix before the exact names, as
/// memcached tries them; `detail`'s sub-commands before its usage error).
pub static GROUPS: &[Group] = &[
    group("", Stats, (Exact, Packets), |e, _, out| {
        general(e.shared, out)
    }),
    group("reset", Line, (Prefix, Packets), |e, _, out| {
        e.reset_stats();
        out.extend_from_slice(b"RESET\r\n");
    }),
    group("settings", Stats, (Prefix, Packets), |e, _, out| {
        settings(e.shared, out);
    }),
    group("detail on", Line, (Prefix, Packets), |e, _, out| {
        e.set_detail(true);
        out.extend_from_slice(b"OK\r\n");
    }),
    group("detail off", Line, (Prefix, Packets), |e, _, out| {
        e.set_detail(false);
        out.extend_from_slice(b"OK\r\n");
    }),
    group(
        "detail dump",
        Stats,
        (Prefix, Whole(b"detailed")),
        |e, _, out| {
            e.dump_detail(out);
        },
    ),
    group("detail", Line, (No, Packets), |_, _, out| {
        out.extend_from_slice(ErrorReply::StatsDetailUsage.bytes());
    }),
    group("cachedump", Stats, (No, Packets), |e, args, out| {
        slabs::cachedump(e.shared, args, out);
    }),
    group("slabs", Stats, (Exact, Packets), |e, _, out| {
        slabs::slabs(e.shared, out)
    }),
    group("items", Stats, (Exact, Packets), |e, _, out| {
        slabs::items(e.shared, out)
    }),
    group("sizes", Stats, (Exact, Packets), |e, _, out| {
        slabs::sizes(e.shared, out)
    }),
    group("sizes_enable", Stats, (Exact, Packets), |e, _, out| {
        slabs::set_sizes(e.shared, true, out);
    }),
    group("sizes_disable", Stats, (Exact, Packets), |e, _, out| {
        slabs::set_sizes(e.shared, false, out);
    }),
    // The socket asking is listed as `conn_parse_cmd`; over UDP none is (-1).
    group("conns", Stats, (No, Packets), |e, _, out| {
        e.shared.conns.report(e.sink.fd, e.now(), out);
    }),
    group("latency", Stats, (No, Packets), |e, _, out| {
        latency(e.shared, out)
    }),
    group("extstore", Stats, (No, Packets), |e, _, out| {
        extstore(e.shared, out)
    }),
];

/// A row of [`GROUPS`].
const fn group(
    name: &'static str,
    text: TextReply,
    binary: (BinaryMatch, BinaryReply),
    report: Report,
) -> Group {
    Group {
        name,
        report,
        text,
        binary,
    }
}

impl Group {
    /// Whether the text tokens after `stats` name this group: each word of the name
    /// is the token in its place (past the last token, an empty one).
    fn names(&self, args: &Tokens<'_>) -> bool {
        if self.name.is_empty() {
            return args.is_empty();
        }
        self.name
            .split(' ')
            .enumerate()
            .all(|(i, word)| args.get(i) == word.as_bytes())
    }
}

/// The group a text `stats` line names; `args` are its tokens after `stats`.
#[must_use]
pub fn text_group(args: &Tokens<'_>) -> Option<&'static Group> {
    GROUPS.iter().find(|g| g.names(args))
}

/// The group a binary STAT asks for: `key` is the request's key, `rest` the input from
/// the key on (memcached compares some names against its read buffer).
#[must_use]
pub fn binary_group(key: &[u8], rest: &[u8]) -> Option<&'static Group> {
    GROUPS.iter().find(|g| match g.binary.0 {
        No => false,
        Exact => key == g.name.as_bytes(),
        Prefix => rest.starts_with(g.name.as_bytes()),
    })
}

/// Whether `-vv` logs the reply to a text `stats` line (`args`: what follows `stats`):
/// a one-line reply, or the `ERROR` of a group memcached does not know.
#[must_use]
pub fn text_reply_logged(args: &[u8]) -> bool {
    text_group(&Tokens::new(args, 0)).is_none_or(|g| g.text == Line)
}

impl Exec<'_> {
    /// A text `stats` line: `args` is what follows `stats`.
    pub fn stats(&self, args: &[u8], out: &mut Vec<u8>) {
        let tokens = Tokens::new(args, 0);
        match text_group(&tokens) {
            Some(group) => (group.report)(self, &tokens, out),
            None => out.extend_from_slice(ErrorReply::Error.bytes()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(args: &str) -> Option<&'static str> {
        text_group(&Tokens::new(args.as_bytes(), 0)).map(|g| g.name)
    }

    #[test]
    fn text_names_match_word_by_word() {
        assert_eq!(text(""), Some(""));
        assert_eq!(text("   "), Some(""));
        assert_eq!(text(" reset"), Some("reset"));
        // memcached reads no further than the words it compares.
        assert_eq!(text(" reset now"), Some("reset"));
        assert_eq!(text(" slabs x"), Some("slabs"));
        assert_eq!(text(" detail  on"), Some("detail on"));
        assert_eq!(text(" detail dump extra"), Some("detail dump"));
        assert_eq!(text(" detail"), Some("detail"));
        assert_eq!(text(" detail bogus"), Some("detail"));
        assert_eq!(text(" cachedump 1 2"), Some("cachedump"));
        assert_eq!(text(" foo"), None);
        assert_eq!(text(" resets"), None);
        assert_eq!(text(" sizes_enable"), Some("sizes_enable"));
    }

    #[test]
    fn binary_keys_match_whole_or_by_prefix() {
        let bin = |key: &str, rest: &str| binary_group(key.as_bytes(), rest.as_bytes());
        let name = |key: &str| bin(key, key).map(|g| g.name);
        assert_eq!(name(""), Some(""));
        assert_eq!(name("resetting"), Some("reset"));
        assert_eq!(name("settings"), Some("settings"));
        assert_eq!(name("detail on"), Some("detail on"));
        assert_eq!(name("detail offline"), Some("detail off"));
        assert_eq!(name("detail dump"), Some("detail dump"));
        assert_eq!(name("detail"), None);
        assert_eq!(name("slabs"), Some("slabs"));
        assert_eq!(name("slabsx"), None);
        assert_eq!(name("conns"), None);
        assert_eq!(name("latency"), None);
        assert_eq!(name("cachedump 1 1"), None);
        // The prefix is compared against the input past the key, as memcached does.
        assert_eq!(bin("re", "reset").map(|g| g.name), Some("reset"));
    }

    #[test]
    fn logged_replies_are_memcached_out_string_ones() {
        assert!(text_reply_logged(b" reset"));
        assert!(text_reply_logged(b" detail on"));
        assert!(text_reply_logged(b" detail"));
        assert!(text_reply_logged(b" nonsense"));
        assert!(!text_reply_logged(b""));
        assert!(!text_reply_logged(b" detail dump"));
        assert!(!text_reply_logged(b" cachedump"));
    }
}
