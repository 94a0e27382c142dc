//! `watch`'s event sites in `ops`: memcached's `item_get` and `item_store` log lines
//! (`admin/watch` queues and formats them).
//!
//! Each site costs one relaxed load ([`Exec::watching`]) when nobody watches; the rest
//! is cold. memcached logs an `item_get` from `do_item_get`, which every command that
//! reads a key runs first. A get-family read is logged from what its own lookup found,
//! through the read hook (`ops/observe.rs`, [`Exec::log_read`]); the other commands
//! that read a key first (touches, deletes, incr/decr, `md`, `me`, and every store,
//! which looks up the old item) log a peek at the key made before they run, only while
//! a watcher wants fetchers ([`Exec::watch_fetch`]).

use storage::{Lookup, RelTime, StoreMode, StoreOutcome};

use super::Exec;
use crate::admin::watch::{Event, GetStatus, StoreCmd, StoreStatus, Streams};
use crate::stats::observe::{Read, ReadOutcome, Via};

impl Exec<'_> {
    /// Whether a watcher wants any of `streams` (one relaxed load).
    #[inline(always)]
    pub fn watching(&self, streams: u16) -> bool {
        self.shared.watch.wants(streams)
    }

    /// Log the lookup of `key` (`type=item_get`) when a watcher wants fetchers.
    #[inline(always)]
    pub fn watch_fetch(&self, key: &[u8], now: RelTime) {
        if self.watching(Streams::FETCHERS) {
            self.log_fetch(key, now);
        }
    }

    /// What `key` holds now, as memcached's `item_get` line: found (with its class and
    /// size), not found, expired or flushed.
    #[cold]
    #[inline(never)]
    pub fn log_fetch(&self, key: &[u8], now: RelTime) {
        let seen = self.store().get(key, now, |it| (it.value.len(), it.flags));
        let outcome = match seen {
            Lookup::Hit((value_len, flags)) => ReadOutcome::Hit { value_len, flags },
            Lookup::Miss => ReadOutcome::Miss,
            Lookup::Expired => ReadOutcome::Expired,
            Lookup::Flushed => ReadOutcome::Flushed,
        };
        // The protocol is not in the line.
        self.log_read(&Read {
            key,
            outcome,
            via: Via::Text,
        });
    }

    /// A read's `item_get` line (`type=item_get`), when a watcher wants fetchers.
    #[cold]
    #[inline(never)]
    pub fn log_read(&self, read: &Read<'_>) {
        let key = read.key;
        let (status, clsid, nbytes) = match read.outcome {
            ReadOutcome::Hit { value_len, flags } => (
                GetStatus::Found,
                self.store().memcached_class(key.len(), value_len, flags),
                value_len as i32 + 2,
            ),
            ReadOutcome::Miss => (GetStatus::NotFound, 0, 0),
            ReadOutcome::Expired => (GetStatus::Expired, 0, 0),
            ReadOutcome::Flushed => (GetStatus::Flushed, 0, 0),
        };
        self.shared.watch.log(
            key,
            Event::Get {
                status,
                clsid: clsid as u8,
                nbytes,
                cfd: self.sink.fd,
            },
        );
    }

    /// A store's `type=item_store` line (with the mode, the outcome, the TTL left and
    /// the new value's class and size) when a watcher wants mutations.
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    pub fn log_store(
        &self,
        mode: StoreMode,
        key: &[u8],
        flags: u32,
        exptime: RelTime,
        value_len: usize,
        outcome: StoreOutcome,
        now: RelTime,
    ) {
        if !self.watching(Streams::MUTATIONS) {
            return;
        }
        let cmd = match mode {
            StoreMode::Set => StoreCmd::Set,
            StoreMode::Add => StoreCmd::Add,
            StoreMode::Replace => StoreCmd::Replace,
            StoreMode::Append => StoreCmd::Append,
            StoreMode::Prepend => StoreCmd::Prepend,
            StoreMode::Cas(_) => StoreCmd::Cas,
        };
        let status = match outcome {
            StoreOutcome::Stored => StoreStatus::Stored,
            StoreOutcome::NotStored => StoreStatus::NotStored,
            StoreOutcome::Exists => StoreStatus::Exists,
            StoreOutcome::NotFound => StoreStatus::NotFound,
            StoreOutcome::TooLarge => StoreStatus::TooLarge,
            StoreOutcome::NoMemory => StoreStatus::NoMemory,
        };
        // memcached: `exptime - current_time` as an unsigned relative time.
        // memcached logs the item it linked: after an append or prepend, the whole
        // new value (read back here).
        let (flags, value_len) = match (mode, outcome) {
            (StoreMode::Append | StoreMode::Prepend, StoreOutcome::Stored) => {
                match self.store().get(key, now, |it| (it.flags, it.value.len())) {
                    Lookup::Hit(seen) => seen,
                    _ => (flags, value_len),
                }
            }
            _ => (flags, value_len),
        };
        let ttl = if exptime == 0 {
            0
        } else {
            exptime.wrapping_sub(now)
        };
        self.shared.watch.log(
            key,
            Event::Store {
                status,
                cmd,
                ttl,
                clsid: self.store().memcached_class(key.len(), value_len, flags) as u8,
                nbytes: value_len as i32 + 2,
                cfd: self.sink.fd,
            },
        );
    }
}
