//! Server-wide commands: `flush_all`, `verbosity`, `cache_memlimit`, `stats reset`,
//! `stats detail on|off|dump` and memcached-debug's `debugtime`.

use std::sync::atomic::Ordering;

use storage::RelTime;

use super::Exec;
use crate::config::MAX_VERBOSITY_LEVEL;
use crate::stats::bump;

/// The outcome of [`Exec::set_memory_limit`], each with memcached's reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemLimit {
    Set,
    TooSmall,
    /// A figure that looks like bytes, not megabytes.
    NotMegabytes,
    /// With `-L`, or past the segment table's room (see docs/protocol.md).
    Failed,
}

impl MemLimit {
    /// memcached's reply line.
    #[must_use]
    pub fn reply(self) -> &'static [u8] {
        match self {
            MemLimit::Set => b"OK\r\n",
            MemLimit::TooSmall => b"MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n",
            MemLimit::NotMegabytes => {
                b"MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes\r\n"
            }
            MemLimit::Failed => b"MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust\r\n",
        }
    }
}

impl Exec<'_> {
    /// `flush_all`: every item stored up to `at` (now when `None`) reads as flushed
    /// from then on. False, with nothing done, when flushing is disabled (`-F`).
    /// memcached's text protocol counts a refused flush in `cmd_flush`, its binary
    /// protocol does not: `count_refused` says which.
    pub fn flush_all(&self, at: Option<RelTime>, count_refused: bool) -> bool {
        let settings = &self.shared.settings;
        if !settings.flush_enabled {
            if count_refused {
                bump(&self.stats.cmd_flush, 1);
            }
            return false;
        }
        bump(&self.stats.cmd_flush, 1);
        let now = self.now();
        self.store()
            .flush_all(settings.flush_oldest_live(at.unwrap_or(now)), now);
        true
    }

    /// `shutdown` (allowed with `-A`): the process shuts down as on SIGTERM, draining
    /// every worker. `shutdown graceful` raises SIGUSR1 instead, as memcached does:
    /// the same drain, then with `-e` the cache is saved for a warm restart.
    pub fn request_shutdown(&self, graceful: bool) {
        if graceful {
            crate::sys::signal_self_graceful();
        } else {
            crate::sys::signal_self_terminate();
        }
    }

    /// `verbosity`: memcached keeps the level, capped.
    pub fn set_verbosity(&self, level: u32) {
        self.shared
            .verbosity
            .store(level.min(MAX_VERBOSITY_LEVEL), Ordering::Relaxed);
    }

    /// `debugtime p|r|<seconds>` and its reply: under `--debug-time`, stop, restart or
    /// move the server clock; otherwise `ERROR`, as a memcached built without
    /// `MEMCACHED_DEBUG` answers it (an unknown command).
    pub fn debug_time(&self, op: protocol::text::DebugTime) -> &'static [u8] {
        use protocol::text::DebugTime;
        if !self.shared.settings.debug_time {
            return b"ERROR\r\n";
        }
        match op {
            DebugTime::Pause => self.shared.clock.pause(true),
            DebugTime::Resume => self.shared.clock.pause(false),
            DebugTime::Move(secs) => self.shared.clock.move_by(secs),
        }
        b"OK\r\n"
    }

    /// `refresh_certs`: reload the TLS certificate, key and CA file for the connections
    /// accepted from now on. `Err` holds memcached's reply line: its error message, not
    /// an `ERROR` reply (`docs/protocol.md`).
    pub fn refresh_certs(&self) -> Result<(), String> {
        match &self.shared.tls {
            Some(tls) => tls.refresh(self.shared.clock.now()),
            None => Err("Error TLS not enabled".to_string()),
        }
    }

    /// `cache_memlimit`: change `-m` at run time.
    pub fn set_memory_limit(&self, megabytes: u64) -> MemLimit {
        if megabytes < 8 {
            return MemLimit::TooSmall;
        }
        if megabytes > 1_000_000_000 {
            return MemLimit::NotMegabytes;
        }
        if !self
            .store()
            .set_memory_limit(megabytes as usize * (1 << 20))
        {
            return MemLimit::Failed;
        }
        if self.shared.verbosity.load(Ordering::Relaxed) > 0 {
            eprintln!("maxbytes adjusted to {megabytes}m");
        }
        MemLimit::Set
    }

    /// `stats reset`: the command counters, the store's, `stats detail`'s and the read
    /// observers'.
    pub fn reset_stats(&self) {
        self.shared.stats.reset();
        self.store().reset_stats();
        self.shared.prefixes.clear();
        self.shared.observers.reset();
    }

    /// An authentication attempt (SASL or `-Y`): `auth_cmds`, and `auth_errors`
    /// when it failed.
    pub fn count_auth(&self, ok: bool) {
        bump(&self.stats.auth_cmds, 1);
        if !ok {
            bump(&self.stats.auth_errors, 1);
        }
    }

    /// `stats detail on|off`.
    pub fn set_detail(&self, on: bool) {
        self.shared.prefixes.set_enabled(on);
    }

    /// `stats detail dump`: memcached's lines, one per prefix.
    pub fn dump_detail(&self, out: &mut Vec<u8>) {
        self.shared.prefixes.dump(out);
    }
}
