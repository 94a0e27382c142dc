//! The output side of a request: where replies go besides the connection's write
//! buffer.
//!
//! A reply is composed into the connection's write buffer (`Vec<u8>`, owned by the
//! session). [`Sink`] carries what travels beside it for one worker: the values
//! pinned to be sent in place instead of copied ([`splice`]), and, over UDP, where
//! each response message ends. Protocol code writes through the sink and never
//! knows which backend sends the bytes.
//!
//! [`flash`] holds the flash reads of the connection being served: what its text gets
//! deferred, and the values read since.

pub mod flash;
pub mod splice;

use std::cell::RefCell;

pub use splice::{Output, Splices};

/// Over UDP, the output offsets where one response message ends, with whether an
/// empty message is still sent for it.
pub type MessageEnds = RefCell<Vec<(usize, bool)>>;

/// Where one worker's replies go, beside the write buffer itself.
#[derive(Clone, Copy)]
pub struct Sink<'a> {
    /// Over UDP, memcached sends each request's reply, and each key of a
    /// multi-get, as its own response message. When set, the output offsets
    /// where one ends are recorded here, with whether an empty message is
    /// still sent (memcached sends a header-only datagram for a missed key
    /// that is not the last of its `get`).
    pub message_ends: Option<&'a MessageEnds>,
    /// Where large get values are pinned instead of copied, when the caller
    /// sends with [`Splices::send`] (see `splice.rs`); `None` copies every value.
    pub splices: Option<&'a RefCell<Splices>>,
    /// Get values at least this long are spliced (`--zero-copy-min`);
    /// `usize::MAX` without `splices`.
    pub splice_min: usize,
    /// The connection's socket, for the `cfd=` of `watch`'s log lines (-1: none).
    pub fd: i32,
    /// Where text gets defer their flash reads, when the worker reads flash off its
    /// thread (`io/flash_io.rs`); `None` reads them in the lookup.
    pub flash: Option<&'a RefCell<flash::FlashReads>>,
}

impl Sink<'_> {
    /// Every value copied, no message ends: a plain stream.
    pub const COPY: Sink<'static> = Sink {
        message_ends: None,
        splices: None,
        splice_min: usize::MAX,
        fd: -1,
        flash: None,
    };

    /// Mark the end of a UDP response message at `at` (nothing over a stream).
    #[inline]
    pub fn end_message(&self, at: usize, send_empty: bool) {
        if let Some(ends) = self.message_ends {
            ends.borrow_mut().push((at, send_empty));
        }
    }

    /// Whether replies are framed as UDP messages.
    #[inline]
    #[must_use]
    pub fn is_datagram(&self) -> bool {
        self.message_ends.is_some()
    }

    /// Drop what the sink holds past output offset `at` (the output itself is
    /// truncated by the caller): pins of values placed there, message ends after it.
    pub fn truncate(&self, at: usize, store: &storage::Store) {
        if let Some(splices) = self.splices {
            splices.borrow_mut().truncate(at, store);
        }
        if let Some(ends) = self.message_ends {
            ends.borrow_mut().retain(|&(e, _)| e <= at);
        }
    }
}
