//! The flash reads of the connection being served: what its text `get`s deferred, and
//! the values read since, which the lookups of its resumed get take
//! (`storage::Visit::flash`, `io/flash_io.rs`).
//!
//! One per worker, lent to the connection it runs (like the splices): filled with
//! that connection's finished reads before its turn, emptied after it.

use std::ops::Range;

use storage::{FlashAction, StubLoc};

/// A value read from flash: its buffer and where the value is in it, or `None` when
/// the read found no good record.
pub type ReadValue = Option<(Vec<u8>, Range<usize>)>;

/// Reads to make: each value's place on flash and its key.
pub type Wanted = Vec<(StubLoc, Vec<u8>)>;

/// Values read for a connection: each value's place on flash and what was read.
pub type Ready = Vec<(StubLoc, ReadValue)>;

#[derive(Default)]
pub struct FlashReads {
    /// Reads finished for this connection, not yet taken by a lookup.
    ready: Ready,
    /// Values a lookup deferred in this turn, with their keys: to be read.
    wanted: Wanted,
    /// A lookup of this turn deferred: the request is paused, not answered.
    deferred: bool,
}

impl FlashReads {
    /// A lookup found a stub at `loc`: the value read for it, else defer and want it.
    pub fn take_or_defer(&mut self, key: &[u8], loc: StubLoc) -> FlashAction {
        if let Some(i) = self.ready.iter().position(|(l, _)| *l == loc) {
            return FlashAction::Ready(self.ready.swap_remove(i).1);
        }
        self.want(key, loc);
        self.deferred = true;
        FlashAction::Defer
    }

    /// Read `loc` for `key` too (another key of a multi-get that deferred), unless it
    /// is read already or wanted.
    pub fn want(&mut self, key: &[u8], loc: StubLoc) {
        if !self.ready.iter().any(|(l, _)| *l == loc) && !self.wanted.iter().any(|(l, _)| *l == loc)
        {
            self.wanted.push((loc, key.to_vec()));
        }
    }

    /// Drop the reads wanted in this turn (their command fails): how many.
    pub fn abort(&mut self) -> u64 {
        self.deferred = false;
        let n = self.wanted.len() as u64;
        self.wanted.clear();
        n
    }

    /// Whether a lookup deferred since [`FlashReads::begin`].
    pub fn deferred(&self) -> bool {
        self.deferred
    }

    /// Start a connection's turn with the values read for it.
    pub fn begin(&mut self, ready: Ready) {
        self.ready = ready;
        self.wanted.clear();
        self.deferred = false;
    }

    /// End the turn: the reads to start, and the values read and not taken yet (a
    /// multi-get paused for its output before it reached their keys, or items that
    /// changed meanwhile).
    pub fn finish(&mut self) -> (Wanted, Ready) {
        self.deferred = false;
        (
            std::mem::take(&mut self.wanted),
            std::mem::take(&mut self.ready),
        )
    }
}
