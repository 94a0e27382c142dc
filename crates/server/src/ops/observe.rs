//! The read hook: every get-family path tells [`Exec::observe_read`] what each key's
//! lookup found, and the hook tells the observers that are on (`stats/observe.rs`).
//!
//! Off, it costs one relaxed load and one predictable branch: [`Exec::observing_reads`].
//! The text gets, whose every instruction per key counts, make that check once per
//! command and run a copy of their loop whose visitor notes nothing ([`Note`] for
//! `()`); the observed copy's visitor notes each hit's length and flags ([`Seen`]),
//! and calls the hook for each key. The other paths (meta `mg`, binary GET, GAT and
//! TOUCH) call it after each lookup.
//!
//! The dispatch ([`Exec::tell_observers`]) is the one list of observers: an observer
//! added there, with its bit, is told every read of every protocol.

use storage::Lookup;

use super::Exec;
use crate::admin::prefix::Event;
use crate::stats::observe::{Read, ReadObservers, ReadOutcome, Via};

/// What a get's visitor keeps of a hit for the read hook: nothing (`()`, the lookup
/// path when no observer is on), or [`Seen`].
pub trait Note: Copy {
    /// Whether the read hook is told: false only for `()`.
    const OBSERVED: bool;

    /// Made from a hit's value length and client flags, under the item's lock.
    fn note(value_len: usize, flags: u32) -> Self;

    /// Tell the read hook what the lookup of `key` found: nothing at all for `()`.
    fn observe(exec: &Exec<'_>, key: &[u8], lookup: &Lookup<Self>, via: Via);
}

impl Note for () {
    const OBSERVED: bool = false;

    #[inline(always)]
    fn note(_: usize, _: u32) {}

    #[inline(always)]
    fn observe(_: &Exec<'_>, _: &[u8], _: &Lookup<()>, _: Via) {}
}

/// A hit as its observers are told it: the value's length and its client flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    pub value_len: usize,
    pub flags: u32,
}

impl Note for Seen {
    const OBSERVED: bool = true;

    #[inline(always)]
    fn note(value_len: usize, flags: u32) -> Seen {
        Seen { value_len, flags }
    }

    #[inline(always)]
    fn observe(exec: &Exec<'_>, key: &[u8], lookup: &Lookup<Seen>, via: Via) {
        exec.observe_read(key, lookup, via);
    }
}

impl Exec<'_> {
    /// Whether any observer of reads is on: the one check a read makes when none is.
    #[inline(always)]
    pub fn observing_reads(&self) -> bool {
        self.shared.observers.on() != 0
    }

    /// The read hook: the lookup of `key`, over `via`, found `lookup`. Call it after
    /// each key's lookup of a get-family command (text, meta, binary), counted or not;
    /// a lookup that deferred a flash read is not a read yet, and is told when it is
    /// made again.
    #[inline(always)]
    pub fn observe_read(&self, key: &[u8], lookup: &Lookup<Seen>, via: Via) {
        if self.observing_reads() {
            let outcome = match *lookup {
                Lookup::Hit(seen) => ReadOutcome::Hit {
                    value_len: seen.value_len,
                    flags: seen.flags,
                },
                Lookup::Miss => ReadOutcome::Miss,
                Lookup::Expired => ReadOutcome::Expired,
                Lookup::Flushed => ReadOutcome::Flushed,
            };
            self.tell_observers(&Read { key, outcome, via });
        }
    }

    /// Tell each observer that is on about `read`.
    #[cold]
    #[inline(never)]
    fn tell_observers(&self, read: &Read<'_>) {
        let on = self.shared.observers.on();
        // memcached's `stats detail` counts text and binary gets, not `mg`.
        if on & ReadObservers::DETAIL != 0 && read.via != Via::Meta {
            let hit = read.outcome.is_hit();
            self.shared.prefixes.record(read.key, Event::Get { hit });
        }
        if on & ReadObservers::FETCHERS != 0 {
            self.log_read(read);
        }
    }
}
