//! The packed item record as it lies in a segment: header, key, value.
//!
//! Items are written back to back into a segment with no alignment padding, so every
//! multi-byte field is read and written as little-endian bytes (an unaligned load on x86).
//!
//! ```text
//!  byte 0      1                5      6          10         14                22
//!  +-------+-------------------+------+----------+----------+-----------------+~~~~~~~~~~~~+-----+-------+
//!  | klen  | vlen (31 bits)    | mark | exptime  | time     | cas             | flags      | key | value |
//!  | u8    | + HAS_FLAGS bit31 | u8   | u32      | u32      | u64             | u32, only  |     |       |
//!  |       |                   |      |          |          |                 | if HAS_FLAGS|     |       |
//!  +-------+-------------------+------+----------+----------+-----------------+~~~~~~~~~~~~+-----+-------+
//!  \______ immutable _________/ \______ mutable, only under the shard lock __/ \__mutable_/ \imm/ \_mut_/
//!                                                             flags and value: rewritten only under the lock, when unpinned
//! ```
//!
//! * `klen` is 1..=255 for an item. `klen == 0` marks a padding record (a reservation whose
//!   store was refused): it spans `HEADER_BYTES + vlen` bytes and is skipped by the evictor.
//! * `mark` holds [`MARK_FETCHED`] (read at least once: memcached's `ITEM_FETCHED`, for the
//!   `*_unfetched` stats) and [`MARK_ACCESSED`] (the CLOCK bit for second-chance eviction),
//!   plus the meta protocol's [`MARK_STALE`], [`MARK_TOKEN_SENT`] and [`MARK_KEY_BINARY`].
//! * `time` is when the item was last stored (for `flush_all`); `exptime` 0 means never.
//! * `flags` (memcached client flags) take 4 bytes only when non-zero, as memcached does.
//!
//! The first five bytes and the key never change once the item is published, so the
//! evictor may read them without the shard lock; every other byte is read or written only
//! under the lock of the shard that indexes the item. Flags and value change only when an
//! `incr`/`decr` or a store of the same shape rewrites the item in place, never while a
//! value pin is on its segment (a pin's holder reads the value without the lock).
//!
//! Fixed header: 22 bytes (26 with client flags), against memcached's 48-byte `item`
//! plus 8-byte CAS, plus key NUL and value `\r\n`.

/// Bytes of the fixed header.
pub(crate) const HEADER_BYTES: usize = 22;
/// Extra header bytes when the client flags are non-zero.
pub(crate) const FLAGS_BYTES: usize = 4;
/// Longest key the header can describe (memcached itself allows 250).
pub(crate) const MAX_KEY_BYTES: usize = u8::MAX as usize;
/// Longest value the header can describe.
pub(crate) const MAX_VALUE_BYTES: usize = (1 << 31) - 1;

/// `mark` bit: the item was fetched at least once.
pub(crate) const MARK_FETCHED: u8 = 1;
/// `mark` bit: the item was read since it was written or last given a second chance.
pub(crate) const MARK_ACCESSED: u8 = 2;
/// `mark` bit: invalidated by meta `md I` or `ms I` (memcached's `ITEM_STALE`).
pub(crate) const MARK_STALE: u8 = 4;
/// `mark` bit: a meta `W` (win) flag was handed out (memcached's `ITEM_TOKEN_SENT`).
pub(crate) const MARK_TOKEN_SENT: u8 = 8;
/// `mark` bit: the key was stored base64-encoded by meta `ms b` (`ITEM_KEY_BINARY`).
pub(crate) const MARK_KEY_BINARY: u8 = 16;

const HAS_FLAGS: u32 = 1 << 31;

const OFF_KLEN: usize = 0;
const OFF_VLEN: usize = 1;
const OFF_MARK: usize = 5;
const OFF_EXPTIME: usize = 6;
const OFF_TIME: usize = 10;
const OFF_CAS: usize = 14;
const OFF_FLAGS: usize = 22;

/// Bytes of the immutable prefix (`klen` and `vlen`) that may be read without a lock.
pub(crate) const PREFIX_BYTES: usize = 5;

/// Total bytes an item takes in a segment.
#[inline]
pub(crate) fn item_len(klen: usize, vlen: usize, has_flags: bool) -> usize {
    header_len(has_flags) + klen + vlen
}

/// Header bytes for an item with or without client flags.
#[inline]
pub(crate) fn header_len(has_flags: bool) -> usize {
    if has_flags {
        HEADER_BYTES + FLAGS_BYTES
    } else {
        HEADER_BYTES
    }
}

/// The immutable prefix of a record, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Prefix {
    /// Key length; 0 for a padding record.
    pub klen: usize,
    /// Value length (for padding: bytes after the fixed header).
    pub vlen: usize,
    /// Whether 4 bytes of client flags follow the fixed header.
    pub has_flags: bool,
}

impl Prefix {
    /// Decode from at least [`PREFIX_BYTES`] bytes.
    #[inline(always)]
    pub fn parse(b: &[u8]) -> Prefix {
        let b: &[u8; PREFIX_BYTES] = b[..PREFIX_BYTES].try_into().unwrap();
        let raw = u32::from_le_bytes(b[OFF_VLEN..OFF_VLEN + 4].try_into().unwrap());
        Prefix {
            klen: b[OFF_KLEN] as usize,
            vlen: (raw & !HAS_FLAGS) as usize,
            has_flags: raw & HAS_FLAGS != 0,
        }
    }

    /// True for a padding record.
    #[inline]
    pub fn is_padding(&self) -> bool {
        self.klen == 0
    }

    /// Offset of the key from the start of the record.
    #[inline]
    pub fn key_offset(&self) -> usize {
        header_len(self.has_flags)
    }

    /// Total bytes of the record.
    #[inline]
    pub fn total_len(&self) -> usize {
        if self.is_padding() {
            HEADER_BYTES + self.vlen
        } else {
            item_len(self.klen, self.vlen, self.has_flags)
        }
    }
}

/// The whole header of an item, decoded. Read only under the shard lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub prefix: Prefix,
    pub mark: u8,
    pub exptime: u32,
    pub time: u32,
    pub cas: u64,
    pub flags: u32,
}

impl Header {
    /// Decode the header at the start of `b` (which covers at least the header).
    #[inline(always)]
    pub fn parse(b: &[u8]) -> Header {
        let prefix = Prefix::parse(b);
        // One bounds check for the fixed header; the fields below are then at constant
        // offsets into an array.
        let f: &[u8; HEADER_BYTES] = b[..HEADER_BYTES].try_into().unwrap();
        Header {
            prefix,
            mark: f[OFF_MARK],
            exptime: read_u32(f, OFF_EXPTIME),
            time: read_u32(f, OFF_TIME),
            cas: u64::from_le_bytes(f[OFF_CAS..OFF_CAS + 8].try_into().unwrap()),
            flags: if prefix.has_flags {
                read_u32(b, OFF_FLAGS)
            } else {
                0
            },
        }
    }
}

/// Fields of a new item, written into a freshly reserved region.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NewItem {
    pub klen: usize,
    pub vlen: usize,
    pub flags: u32,
    pub exptime: u32,
    pub time: u32,
    pub cas: u64,
}

impl NewItem {
    /// Total bytes of the record.
    #[inline]
    pub fn total_len(&self) -> usize {
        item_len(self.klen, self.vlen, self.flags != 0)
    }

    /// Write the header into `b` (the start of the reserved region) and return the key
    /// offset. The caller writes key and value after it.
    #[inline(always)]
    pub fn write_header(&self, b: &mut [u8]) -> usize {
        debug_assert!(self.klen >= 1 && self.klen <= MAX_KEY_BYTES);
        debug_assert!(self.vlen <= MAX_VALUE_BYTES);
        let has_flags = self.flags != 0;
        // One bounds check for the fixed header, then constant offsets.
        let f: &mut [u8; HEADER_BYTES] = (&mut b[..HEADER_BYTES]).try_into().unwrap();
        f[OFF_KLEN] = self.klen as u8;
        let raw = self.vlen as u32 | if has_flags { HAS_FLAGS } else { 0 };
        write_u32(f, OFF_VLEN, raw);
        f[OFF_MARK] = 0;
        write_u32(f, OFF_EXPTIME, self.exptime);
        write_u32(f, OFF_TIME, self.time);
        f[OFF_CAS..OFF_CAS + 8].copy_from_slice(&self.cas.to_le_bytes());
        if has_flags {
            write_u32(b, OFF_FLAGS, self.flags);
        }
        header_len(has_flags)
    }
}

/// Write a padding record over a whole region of `len >= HEADER_BYTES` bytes.
#[inline]
pub(crate) fn write_padding(b: &mut [u8], len: usize) {
    debug_assert!(len >= HEADER_BYTES);
    b[OFF_KLEN] = 0;
    write_u32(b, OFF_VLEN, (len - HEADER_BYTES) as u32);
}

/// Start of the mutable window of the header (`mark`, `exptime`, `time`, `cas`).
pub(crate) const MUT_START: usize = OFF_MARK;
/// Length of the mutable window. Setters below take a slice of exactly this window, so
/// a mutable borrow never covers the immutable prefix that the evictor reads lock-free.
pub(crate) const MUT_LEN: usize = HEADER_BYTES - OFF_MARK;

/// Set `mark` bits in the mutable window (writes only when something changes, to keep
/// hot cache lines clean).
#[inline]
pub(crate) fn set_mark(w: &mut [u8], bits: u8) {
    let m = &mut w[OFF_MARK - MUT_START];
    if *m & bits != bits {
        *m |= bits;
    }
}

/// Clear `mark` bits in the mutable window.
#[inline]
pub(crate) fn clear_mark(w: &mut [u8], bits: u8) {
    w[OFF_MARK - MUT_START] &= !bits;
}

/// Rewrite the whole mutable window for a new version of the item written over the old
/// one: `mark` replaced, not or-ed.
#[inline]
pub(crate) fn set_new_version(w: &mut [u8], mark: u8, exptime: u32, time: u32, cas: u64) {
    w[OFF_MARK - MUT_START] = mark;
    set_exptime(w, exptime);
    set_time(w, time);
    set_cas(w, cas);
}

/// Overwrite the exptime in the mutable window.
#[inline]
pub(crate) fn set_exptime(w: &mut [u8], exptime: u32) {
    write_u32(w, OFF_EXPTIME - MUT_START, exptime);
}

/// Overwrite the last-store time in the mutable window.
#[inline]
pub(crate) fn set_time(w: &mut [u8], time: u32) {
    write_u32(w, OFF_TIME - MUT_START, time);
}

/// Overwrite the CAS id in the mutable window.
#[inline]
pub(crate) fn set_cas(w: &mut [u8], cas: u64) {
    let o = OFF_CAS - MUT_START;
    w[o..o + 8].copy_from_slice(&cas.to_le_bytes());
}

#[inline]
fn read_u32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}

#[inline]
fn write_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

/// memcached semantics: exptime 0 never expires; otherwise expired once `exptime <= now`.
#[inline]
pub(crate) fn is_expired(exptime: u32, now: u32) -> bool {
    exptime != 0 && exptime <= now
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_offsets_add_up() {
        assert_eq!(OFF_CAS + 8, HEADER_BYTES);
        assert_eq!(OFF_FLAGS + FLAGS_BYTES, HEADER_BYTES + FLAGS_BYTES);
        assert_eq!(OFF_MARK, PREFIX_BYTES);
        assert_eq!(HEADER_BYTES, 22);
        assert_eq!(item_len(20, 20, false), 62);
        assert_eq!(item_len(20, 20, true), 66);
    }

    #[test]
    fn header_round_trip() {
        let mut buf = [0xAAu8; 64];
        let it = NewItem {
            klen: 3,
            vlen: 7,
            flags: 0xDEAD_BEEF,
            exptime: 99,
            time: 42,
            cas: u64::MAX - 1,
        };
        assert_eq!(it.write_header(&mut buf), 26);
        let h = Header::parse(&buf);
        assert_eq!(
            h.prefix,
            Prefix {
                klen: 3,
                vlen: 7,
                has_flags: true
            }
        );
        assert_eq!(
            (h.mark, h.exptime, h.time, h.cas, h.flags),
            (0, 99, 42, u64::MAX - 1, 0xDEAD_BEEF)
        );
        assert_eq!(h.prefix.total_len(), 36);
        let w = &mut buf[MUT_START..MUT_START + MUT_LEN];
        set_mark(w, MARK_ACCESSED | MARK_FETCHED);
        clear_mark(w, MARK_ACCESSED);
        set_exptime(w, 5);
        set_time(w, 6);
        set_cas(w, 7);
        let h = Header::parse(&buf);
        assert_eq!((h.mark, h.exptime, h.time, h.cas), (MARK_FETCHED, 5, 6, 7));
        assert_eq!(Prefix::parse(&buf).klen, 3);
    }

    #[test]
    fn zero_flags_take_no_bytes() {
        let mut buf = [0u8; 32];
        let it = NewItem {
            klen: 1,
            vlen: 0,
            flags: 0,
            exptime: 0,
            time: 1,
            cas: 1,
        };
        assert_eq!(it.write_header(&mut buf), HEADER_BYTES);
        assert_eq!(Header::parse(&buf).flags, 0);
        assert!(!Prefix::parse(&buf).has_flags);
    }

    #[test]
    fn padding_spans_region() {
        let mut buf = [0xFFu8; 100];
        write_padding(&mut buf, 100);
        let p = Prefix::parse(&buf);
        assert!(p.is_padding());
        assert_eq!(p.total_len(), 100);
    }

    #[test]
    fn expiry_rule() {
        assert!(!is_expired(0, 100));
        assert!(is_expired(100, 100));
        assert!(is_expired(99, 100));
        assert!(!is_expired(101, 100));
    }
}
