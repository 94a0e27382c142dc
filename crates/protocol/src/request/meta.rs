//! The parsed form of a meta command (`mg ms md ma me`): what the meta
//! parser builds and the server executes.
//!
//! The return flags (`k`, `O`, `c`, `t`, ...) are emitted in the order the
//! client sent them, so a request keeps the offset of its flag tokens and
//! [`MetaRequest::flags`] walks them again.

use super::MAX_KEY_LEN;
use crate::base64::base64_decode;

/// Longest decoded base64 key (3/4 of [`MAX_KEY_LEN`]).
pub const MAX_BINARY_KEY_LEN: usize = MAX_KEY_LEN / 4 * 3;

/// The meta commands that carry a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaCommand {
    Get,
    Set,
    Delete,
    Arithmetic,
    Debug,
}

/// A reply decided while parsing a meta command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaError {
    /// `CLIENT_ERROR bad command line format`
    BadFormat,
    /// `CLIENT_ERROR options flags are too long` (`mg` only)
    GetOptionsTooLong,
    /// `CLIENT_ERROR options flags too long` (`ms md ma`)
    OptionsTooLong,
    /// `CLIENT_ERROR duplicate flag` (also any flag byte >= 127)
    DuplicateFlag,
    /// `CLIENT_ERROR invalid flag`
    InvalidFlag,
    /// `CLIENT_ERROR bad token in command line format`
    BadToken,
    /// `CLIENT_ERROR error decoding key`
    KeyDecode,
    /// `CLIENT_ERROR incorrect length for M token`
    ModeLength,
    /// `CLIENT_ERROR invalid numeric initial value`
    InitialValue,
    /// `CLIENT_ERROR invalid numeric delta value`
    DeltaValue,
    /// `CLIENT_ERROR invalid or duplicate flag`: `md` and `ma` replace every
    /// flag error with this one.
    InvalidOrDuplicate,
    /// `CLIENT_ERROR invalid mode for ms M token`
    SetMode,
    /// `CLIENT_ERROR invalid mode for ma M token`
    ArithMode,
    /// `CLIENT_ERROR opaque token too long`
    OpaqueTooLong,
}

impl MetaError {
    /// The reply line, terminator included.
    #[must_use]
    pub fn bytes(self) -> &'static [u8] {
        match self {
            MetaError::BadFormat => b"CLIENT_ERROR bad command line format\r\n",
            MetaError::GetOptionsTooLong => b"CLIENT_ERROR options flags are too long\r\n",
            MetaError::OptionsTooLong => b"CLIENT_ERROR options flags too long\r\n",
            MetaError::DuplicateFlag => b"CLIENT_ERROR duplicate flag\r\n",
            MetaError::InvalidFlag => b"CLIENT_ERROR invalid flag\r\n",
            MetaError::BadToken => b"CLIENT_ERROR bad token in command line format\r\n",
            MetaError::KeyDecode => b"CLIENT_ERROR error decoding key\r\n",
            MetaError::ModeLength => b"CLIENT_ERROR incorrect length for M token\r\n",
            MetaError::InitialValue => b"CLIENT_ERROR invalid numeric initial value\r\n",
            MetaError::DeltaValue => b"CLIENT_ERROR invalid numeric delta value\r\n",
            MetaError::InvalidOrDuplicate => b"CLIENT_ERROR invalid or duplicate flag\r\n",
            MetaError::SetMode => b"CLIENT_ERROR invalid mode for ms M token\r\n",
            MetaError::ArithMode => b"CLIENT_ERROR invalid mode for ma M token\r\n",
            MetaError::OpaqueTooLong => b"CLIENT_ERROR opaque token too long\r\n",
        }
    }
}

/// `ms` modes (`M` flag), already combined with `C` as memcached does:
/// a compare-and-swap value turns set and replace into [`SetMode::Cas`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetMode {
    Set,
    /// `ME`: add (a `C` value is ignored).
    Add,
    /// `MA`: append (a `C` value other than 0 must match).
    Append,
    /// `MP`: prepend (as append).
    Prepend,
    /// `MR` without `C`.
    Replace,
    /// `MS` or `MR` with `C`.
    Cas,
}

/// The values carried by a meta command's flags (memcached's `_meta_flags`).
/// Time values are raw client exptimes; the server converts them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetaOptions {
    /// `b`: the key is base64.
    pub base64: bool,
    /// `v`: return the value.
    pub value: bool,
    /// `q`: suppress the nominal reply.
    pub quiet: bool,
    /// `u`: do not bump the item (no fetched mark, no access time).
    pub no_update: bool,
    /// `h`, `l`, `T`, `N` or `R`: memcached fetches under the item lock and
    /// bumps the item only after composing the reply.
    pub locked: bool,
    /// `N<ttl>`: vivify on miss.
    pub vivify: Option<i32>,
    /// `T<ttl>`: new TTL.
    pub ttl: Option<i32>,
    /// `R<ttl>`: recache threshold.
    pub recache: Option<i32>,
    /// `F<flags>`
    pub client_flags: u32,
    /// `C<cas>`
    pub cas: Option<u64>,
    /// `M<mode>`: the mode byte.
    pub mode: Option<u8>,
    /// `J<initial>` (ma), 0 by default.
    pub initial: u64,
    /// `D<delta>` (ma), 1 by default.
    pub delta: u64,
    /// `I`: invalidate (md) / store stale on an older CAS (ms).
    pub invalidate: bool,
}

/// One parsed meta request.
#[derive(Clone, Debug)]
pub struct MetaRequest<'a> {
    pub command: MetaCommand,
    pub line: &'a [u8],
    /// The key token as sent (base64 text when `options.base64`).
    pub key: &'a [u8],
    pub options: MetaOptions,
    /// The reply memcached gives instead of acting, if any.
    pub error: Option<MetaError>,
    /// `ms`: the data block length (set once the length token parsed, even
    /// when a later flag is bad: memcached then swallows the block).
    pub data_len: Option<usize>,
    /// `ms`: the mode, combined with `C`.
    pub set_mode: SetMode,
    /// `ma`: increment (false: decrement).
    pub incr: bool,
    /// Where the flag tokens start in `line`.
    pub(crate) flags_at: usize,
}

impl<'a> MetaRequest<'a> {
    /// Length of the data block that follows the line (`ms` only).
    #[must_use]
    pub fn data_len(&self) -> Option<usize> {
        self.data_len
    }

    /// The flag tokens, in the order sent (for composing return flags).
    pub fn flags(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let rest: &'a [u8] = &self.line[self.flags_at.min(self.line.len())..];
        rest.split(|&b| b == b' ').filter(|t| !t.is_empty())
    }

    /// The key the cache sees, borrowing the line when it is not base64.
    pub fn decoded_key<'b>(&'b self, buf: &'b mut [u8; MAX_BINARY_KEY_LEN]) -> &'b [u8] {
        if self.options.base64 {
            let n = base64_decode(self.key, buf).unwrap_or(0);
            &buf[..n]
        } else {
            self.key
        }
    }
}
