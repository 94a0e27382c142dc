//! Observers of key reads: which are on, as one word, and what each is told.
//!
//! Every get-family path (text `get gets gat gats`, one key, a multi-get or a request
//! parsed ahead, over TCP or UDP; meta `mg`; binary GET, GAT and TOUCH) hands each key
//! it read to one hook, `Exec::observe_read` (`ops/observe.rs`), as a [`Read`]. The hook
//! reads [`ReadObservers::on`] once; with every bit clear that one predictable branch is
//! all a read pays (a multi-get reads the word once per command and runs a copy of its
//! loop without the hook). With a bit set, an out-of-line call tells each observer
//! that is on:
//!
//! ```text
//!   bit        observer                      switched by
//!   DETAIL     `stats detail` prefix counts  PrefixStats::set_enabled (admin/prefix.rs)
//!   FETCHERS   `watch fetchers` log lines    the watchers' streams (admin/watch)
//! ```
//!
//! A new observer takes a bit here, keeps its state beside the word in
//! [`ReadObservers`] (which every worker reaches through `Shared::observers`; `stats
//! reset` reaches it through [`ReadObservers::reset`]), and is told in the hook's
//! dispatch; its report is a row of the `stats` groups (`proto/stats.rs`).

use std::sync::atomic::{AtomicU32, Ordering};

/// The observers of key reads that are on, one bit each (see the module docs).
#[derive(Debug, Default)]
pub struct ReadObservers {
    on: AtomicU32,
}

impl ReadObservers {
    /// `stats detail on`: each text or binary read counts against its key's prefix.
    pub const DETAIL: u32 = 1 << 0;
    /// A watcher wants `fetchers`: each read is an `item_get` log line.
    pub const FETCHERS: u32 = 1 << 1;

    /// The bits of the observers that are on: one relaxed load (an observer switched on
    /// a moment ago may miss a read in flight, as a `watch` may in memcached).
    #[inline(always)]
    #[must_use]
    pub fn on(&self) -> u32 {
        self.on.load(Ordering::Relaxed)
    }

    /// Switch the observers of `bits` on or off.
    pub fn set(&self, bits: u32, on: bool) {
        if on {
            self.on.fetch_or(bits, Ordering::Relaxed);
        } else {
            self.on.fetch_and(!bits, Ordering::Relaxed);
        }
    }

    /// `stats reset`: the observers whose state is kept here start counting again.
    /// (Prefix stats and `watch` keep theirs in `admin`; none is kept here yet.)
    pub fn reset(&self) {}
}

/// What a read found: a hit with its value's length and client flags, or why not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadOutcome {
    Hit {
        value_len: usize,
        flags: u32,
    },
    Miss,
    /// The item had expired (and was unlinked by the read).
    Expired,
    /// The item was older than the last `flush_all` (and was unlinked by the read).
    Flushed,
}

impl ReadOutcome {
    #[must_use]
    pub fn is_hit(self) -> bool {
        matches!(self, ReadOutcome::Hit { .. })
    }
}

/// The protocol a key was read in: memcached's `stats detail` counts the text and
/// binary gets, not meta's `mg`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    Text,
    Meta,
    Binary,
}

/// One key read, as its observers are told it.
#[derive(Clone, Copy, Debug)]
pub struct Read<'a> {
    pub key: &'a [u8],
    pub outcome: ReadOutcome,
    pub via: Via,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_switch_on_and_off_alone() {
        let o = ReadObservers::default();
        assert_eq!(o.on(), 0);
        o.set(ReadObservers::DETAIL, true);
        o.set(ReadObservers::FETCHERS, true);
        o.set(ReadObservers::DETAIL, false);
        assert_eq!(o.on(), ReadObservers::FETCHERS);
        o.set(ReadObservers::FETCHERS, false);
        assert_eq!(o.on(), 0);
    }
}
