//! The packed item record as it lies in a segment: header, key, value.
//!
//! Items are written back to back into a segment with no alignment padding, so every
//! multi-byte field is read and written as little-endian bytes (an unaligned load on x86).
//!
//! ```text
//!  0      1      2 .. 2+n        W=2+n      W+4                         (+4 if flags)
//!  +------+------+-------------+----------+---------------------------+~~~~~~~+-----+-------+
//!  | klen | lead | vlen, rest  | exptime  | mark | cas               | flags | key | value |
//!  | u8   | u8   | n = 0..=4 B | u32      | narrow: u32 = mark | Δ<<5  | u32   |     |       |
//!  |      |      |             |          | wide:   u8 mark, u64 cas  |       |     |       |
//!  +------+------+-------------+----------+---------------------------+~~~~~~~+-----+-------+
//!  \____ immutable ___________/ \__ mutable window, under the shard lock _/ \_mut_/ \imm/ \_mut_/
//!
//!  lead: bit 7 HAS_FLAGS, bit 6 WIDE (8-byte cas), bits 0-5 a length code:
//!        0..=59 the value length itself; 60, 61, 62, 63: 1, 2, 3, 4 more bytes follow
//!        (60: 60 + one byte; 61..63: the length, little-endian)
//! ```
//!
//! A **flash stub** (an item whose value went to the flash tier, `flash.rs`) is a
//! record like any other whose length code is 63 and whose four length bytes have
//! bit 31 set: the low 31 bits are the length of what follows the key in RAM, a
//! [`StubLoc`] of [`STUB_BYTES`]. Values are at most 2^31 - 1 bytes, so no value record
//! has that bit, and the marker lives in the immutable prefix, where the evictor and
//! every lookup read it anyway. A stub keeps the item's exptime, mark, CAS id and
//! flags in RAM, as memcached keeps its item header.
//!
//! * `klen` is 1..=255 for an item. `klen == 0` marks a padding record (a reservation whose
//!   store was refused): a keyless item whose value fills the region, so that every
//!   record's length is `header + klen + vlen`; the evictor skips it.
//! * `mark` (5 bits) holds [`MARK_FETCHED`] (read at least once: memcached's
//!   `ITEM_FETCHED`, for the `*_unfetched` stats) and [`MARK_ACCESSED`] (the read mark,
//!   whose meaning is the eviction policy's: `policy`), plus the meta protocol's
//!   [`MARK_STALE`], [`MARK_TOKEN_SENT`] and [`MARK_KEY_BINARY`]. It is the low five bits
//!   of the byte at `W + 4` in both forms.
//! * `cas` is stored as its distance Δ from its segment's CAS base, in the 27 bits above
//!   the mark (a *narrow* record), when Δ < 2^27; otherwise (an old segment, or an item
//!   copied from elsewhere) the record is *wide* and holds the whole id after the mark.
//!   Narrow or wide is fixed when the record is written; an in-place rewrite whose new id
//!   does not fit writes a new item instead.
//! * There is no per-item store time: memcached's `it->time` is derived from the CAS id
//!   (the store keeps a log of the first id of each second, `time_log.rs`).
//! * `exptime` 0 means never. `flags` (memcached client flags) take 4 bytes only when
//!   non-zero, as memcached does.
//!
//! The first `2 + n` bytes and the key never change once the item is published, so the
//! evictor may read them without the shard lock (exactly them: the next bytes are
//! mutable); every other byte is read or written only under the lock of the shard that
//! indexes the item. Flags and value change only when an `incr`/`decr` or a store of the
//! same shape rewrites the item in place, never while a value pin is on its segment (a
//! pin's holder reads the value without the lock).
//!
//! Header: 10 bytes for a value shorter than 60 bytes with no client flags, against
//! memcached's 48-byte `item` plus 8-byte CAS, plus key NUL and value `\r\n`: no store
//! time (it is found from the CAS id, `time_log.rs`), a length of 1 to 5 bytes, and a CAS
//! id of 27 bits above its segment's base.

/// Bytes of the smallest header: klen, lead, exptime, narrow mark and cas.
pub(crate) const MIN_HEADER_BYTES: usize = 10;
/// Bytes of the largest header: four length bytes, a wide CAS id and client flags.
pub(crate) const MAX_HEADER_BYTES: usize = 2 + 4 + WIDE_WINDOW + FLAGS_BYTES;
/// Extra header bytes when the client flags are non-zero.
pub(crate) const FLAGS_BYTES: usize = 4;
/// Longest key the header can describe (memcached itself allows 250).
pub(crate) const MAX_KEY_BYTES: usize = u8::MAX as usize;
/// Longest value the header can describe.
pub(crate) const MAX_VALUE_BYTES: usize = (1 << 31) - 1;
/// Most bytes of an immutable prefix: klen, lead and four length bytes. Every record
/// is longer, so a reader under the lock may read this many at a record's start.
pub(crate) const PREFIX_MAX_BYTES: usize = 6;
/// A CAS id less than this far above its segment's base fits a narrow record.
pub(crate) const NARROW_CAS_SPAN: u64 = 1 << 27;

/// `mark` bit: the item was fetched at least once.
pub(crate) const MARK_FETCHED: u8 = 1;
/// `mark` bit: the read mark (the CLOCK bit). Only the eviction policy (`policy`) sets,
/// clears or judges it: what a read, a store or a second chance does to it is its.
pub(crate) const MARK_ACCESSED: u8 = 2;
/// `mark` bit: invalidated by meta `md I` or `ms I` (memcached's `ITEM_STALE`).
pub(crate) const MARK_STALE: u8 = 4;
/// `mark` bit: a meta `W` (win) flag was handed out (memcached's `ITEM_TOKEN_SENT`).
pub(crate) const MARK_TOKEN_SENT: u8 = 8;
/// `mark` bit: the key was stored base64-encoded by meta `ms b` (`ITEM_KEY_BINARY`).
pub(crate) const MARK_KEY_BINARY: u8 = 16;
const MARK_BITS: u8 = 0x1F;
const MARK_SHIFT: u32 = 5;

const LEAD_FLAGS: u8 = 0x80;
const LEAD_WIDE: u8 = 0x40;
const LEAD_CODE: u8 = 0x3F;
/// Bit 31 of a 4-byte length: the record is a flash stub.
const STUB_LEN_BIT: u32 = 1 << 31;
/// Bytes of a stub's location after its key: page, page version, offset, value length.
pub(crate) const STUB_BYTES: usize = 16;
/// Length codes up to this one are the length itself.
const INLINE_MAX: usize = 59;

/// Window bytes: exptime, then mark and cas.
const NARROW_WINDOW: usize = 8;
const WIDE_WINDOW: usize = 13;
const OFF_MARK: usize = 4;

/// The length code and the bytes after the lead that hold `len`.
#[inline(always)]
fn len_code(len: usize) -> (u8, usize) {
    if len <= INLINE_MAX {
        (len as u8, 0)
    } else if len < INLINE_MAX + 1 + 256 {
        (60, 1)
    } else if len < 1 << 16 {
        (61, 2)
    } else if len < 1 << 24 {
        (62, 3)
    } else {
        (63, 4)
    }
}

/// Bytes after the lead for length code `code`.
#[inline(always)]
fn extra_bytes(code: u8) -> usize {
    if code as usize <= INLINE_MAX {
        0
    } else {
        (code - 59) as usize
    }
}

#[inline(always)]
fn write_len(b: &mut [u8], lead_bits: u8, len: usize) -> usize {
    let (code, n) = len_code(len);
    b[1] = lead_bits | code;
    match n {
        0 => {}
        1 => b[2] = (len - (INLINE_MAX + 1)) as u8,
        _ => b[2..2 + n].copy_from_slice(&(len as u32).to_le_bytes()[..n]),
    }
    2 + n
}

/// Total bytes an item takes in a segment.
#[inline]
pub(crate) fn item_len(klen: usize, vlen: usize, has_flags: bool, wide: bool) -> usize {
    header_len(vlen, has_flags, wide) + klen + vlen
}

/// Header bytes for an item with a value of `vlen` bytes.
#[inline]
pub(crate) fn header_len(vlen: usize, has_flags: bool, wide: bool) -> usize {
    2 + len_code(vlen).1 + window_len(wide) + if has_flags { FLAGS_BYTES } else { 0 }
}

#[inline(always)]
fn window_len(wide: bool) -> usize {
    if wide {
        WIDE_WINDOW
    } else {
        NARROW_WINDOW
    }
}

/// The immutable prefix of a record, decoded, with the offsets a reader needs worked
/// out once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Prefix {
    /// Key length; 0 for a padding record.
    pub klen: usize,
    /// Value length (for padding: the whole record's length).
    pub vlen: usize,
    /// Whether 4 bytes of client flags follow the window.
    pub has_flags: bool,
    /// Whether the CAS id is stored whole (8 bytes) rather than from the segment's base.
    pub wide: bool,
    /// Where the mutable window starts: the prefix's own length.
    pub window_at: usize,
    /// A flash stub: the `vlen` bytes after the key are a [`StubLoc`], not the value.
    pub flash: bool,
    /// Where the key starts.
    key_at: usize,
}

impl Prefix {
    /// Decode from the record's first bytes: at least [`PREFIX_MAX_BYTES`], or exactly
    /// the prefix (see [`Prefix::extra_after`]).
    #[inline(always)]
    pub fn parse(b: &[u8]) -> Prefix {
        let lead = b[1];
        let code = lead & LEAD_CODE;
        // Values under 64 KiB (codes up to 61) are decoded inline: 100-byte and
        // few-KiB values are common, and a call per lookup costs more than the branch.
        let (vlen, n, flash) = if code as usize <= INLINE_MAX {
            (code as usize, 0, false)
        } else if code == 60 {
            (INLINE_MAX + 1 + b[2] as usize, 1, false)
        } else if code == 61 {
            (u16::from_le_bytes([b[2], b[3]]) as usize, 2, false)
        } else {
            Self::long_len(b, code)
        };
        let wide = lead & LEAD_WIDE != 0;
        let has_flags = lead & LEAD_FLAGS != 0;
        // Without branches: 2 + n, the window (8 or 13), the flags (0 or 4).
        let key_at = 2
            + n
            + NARROW_WINDOW
            + usize::from(wide) * (WIDE_WINDOW - NARROW_WINDOW)
            + usize::from(has_flags) * FLAGS_BYTES;
        Prefix {
            klen: b[0] as usize,
            vlen,
            has_flags,
            wide,
            window_at: 2 + n,
            flash,
            key_at,
        }
    }

    #[inline(never)]
    fn long_len(b: &[u8], code: u8) -> (usize, usize, bool) {
        let n = extra_bytes(code);
        let mut le = [0u8; 4];
        le[..n].copy_from_slice(&b[2..2 + n]);
        let len = u32::from_le_bytes(le);
        ((len & !STUB_LEN_BIT) as usize, n, len & STUB_LEN_BIT != 0)
    }

    /// How many length bytes follow the first two bytes (`klen`, `lead`) of a record: a
    /// lock-free reader reads exactly `2 + this` bytes, never the mutable ones after.
    #[inline(always)]
    pub fn extra_after(head: &[u8]) -> usize {
        extra_bytes(head[1] & LEAD_CODE)
    }

    /// True for a padding record.
    #[inline]
    pub fn is_padding(&self) -> bool {
        self.klen == 0
    }

    /// Offset of the client flags (of an item that has them).
    #[inline(always)]
    pub fn flags_offset(&self) -> usize {
        self.key_at - FLAGS_BYTES
    }

    /// Bytes of the mutable window.
    #[inline(always)]
    pub fn window_len(&self) -> usize {
        window_len(self.wide)
    }

    /// Offset of the key from the start of the record.
    #[inline(always)]
    pub fn key_offset(&self) -> usize {
        self.key_at
    }

    /// Total bytes of the record (a padding record's too: see [`write_padding`]).
    #[inline(always)]
    pub fn total_len(&self) -> usize {
        self.key_at + self.klen + self.vlen
    }
}

/// The whole header of an item, decoded. Read only under the shard lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub prefix: Prefix,
    pub mark: u8,
    pub exptime: u32,
    pub cas: u64,
    pub flags: u32,
}

impl Header {
    /// Decode the header at the start of `b` (which covers at least the header) of an
    /// item in a segment whose CAS base is `base`.
    #[inline(always)]
    pub fn parse(b: &[u8], base: u64) -> Header {
        Header::parse_from(Prefix::parse(b), b, base)
    }

    /// [`Header::parse`] of a record whose prefix a lookup decoded already.
    #[inline(always)]
    pub fn parse_from(prefix: Prefix, b: &[u8], base: u64) -> Header {
        // One bounds check for the header; the reads below are at offsets inside it.
        let h = &b[..prefix.key_at];
        let w = prefix.window_at;
        let word = read_u32(h, w + OFF_MARK);
        let cas = if prefix.wide {
            u64::from_le_bytes(h[w + OFF_MARK + 1..w + OFF_MARK + 9].try_into().unwrap())
        } else {
            base + u64::from(word >> MARK_SHIFT)
        };
        Header {
            prefix,
            mark: word as u8 & MARK_BITS,
            exptime: read_u32(h, w),
            cas,
            flags: if prefix.has_flags {
                read_u32(h, prefix.key_at - FLAGS_BYTES)
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
}

/// Where a flash stub's value lies: what follows its key in RAM (`STUB_BYTES`, all
/// little-endian u32).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StubLoc {
    /// The page, numbered across all flash files.
    pub page: u32,
    /// The page's version when the value was written: a page reused since has another.
    pub version: u32,
    /// Byte offset of the value's flash record inside the page.
    pub offset: u32,
    /// The value's length.
    pub vlen: u32,
}

impl StubLoc {
    /// Decode from a stub's bytes after its key.
    pub(crate) fn parse(b: &[u8]) -> StubLoc {
        StubLoc {
            page: read_u32(b, 0),
            version: read_u32(b, 4),
            offset: read_u32(b, 8),
            vlen: read_u32(b, 12),
        }
    }

    /// Encode into a stub's bytes after its key.
    pub(crate) fn write(&self, b: &mut [u8]) {
        write_u32(b, 0, self.page);
        write_u32(b, 4, self.version);
        write_u32(b, 8, self.offset);
        write_u32(b, 12, self.vlen);
    }
}

/// Bytes a flash stub of this key takes: four length bytes, the window, the flags and
/// the location.
#[inline]
pub(crate) fn stub_len(klen: usize, has_flags: bool, wide: bool) -> usize {
    2 + 4 + window_len(wide) + if has_flags { FLAGS_BYTES } else { 0 } + klen + STUB_BYTES
}

/// Write the prefix of a flash stub over the first bytes of `b`, for a record whose
/// window, flags and key are written after it by the caller at the returned offset
/// (the window's). Length code 63 with bit 31 set: see the module comment.
pub(crate) fn write_stub_prefix(b: &mut [u8], klen: usize, has_flags: bool, wide: bool) -> usize {
    b[0] = klen as u8;
    b[1] = if has_flags { LEAD_FLAGS } else { 0 } | if wide { LEAD_WIDE } else { 0 } | 63;
    write_u32(b, 2, STUB_LEN_BIT | STUB_BYTES as u32);
    6
}

impl NewItem {
    /// Total bytes of the record, narrow or wide.
    #[inline]
    pub fn total_len(&self, wide: bool) -> usize {
        item_len(self.klen, self.vlen, self.flags != 0, wide)
    }

    /// Write the header into `b` (the start of the reserved region, exactly
    /// `total_len(wide)` bytes) with CAS id `cas` of a segment whose base is `base`
    /// (a narrow record needs `cas - base <` [`NARROW_CAS_SPAN`]), and return the key
    /// offset. The caller writes key and value after it.
    #[inline(always)]
    pub fn write_header(&self, b: &mut [u8], wide: bool, cas: u64, base: u64) -> usize {
        debug_assert!(self.klen >= 1 && self.klen <= MAX_KEY_BYTES);
        debug_assert!(self.vlen <= MAX_VALUE_BYTES);
        let has_flags = self.flags != 0;
        b[0] = self.klen as u8;
        let lead = if has_flags { LEAD_FLAGS } else { 0 } | if wide { LEAD_WIDE } else { 0 };
        let at = write_len(b, lead, self.vlen);
        let wl = window_len(wide);
        let w = &mut b[at..at + wl];
        w[OFF_MARK] = 0;
        set_exptime(w, self.exptime);
        let fits = set_cas(w, cas, base);
        debug_assert!(fits, "a narrow record for a cas id out of its span");
        let mut ko = at + wl;
        if has_flags {
            write_u32(b, ko, self.flags);
            ko += FLAGS_BYTES;
        }
        ko
    }
}

/// Write a padding record over a whole region of `len` bytes (at least a record's).
///
/// A padding record is an item with no key whose value fills the region, so that its
/// length follows the one formula of every record (`Prefix::total_len` has no case for
/// it): the value length is what is left after its own header, narrow or wide.
pub(crate) fn write_padding(b: &mut [u8], len: usize) {
    debug_assert!(len > MIN_HEADER_BYTES);
    b[0] = 0;
    for wide in [false, true] {
        for n in 0..=4 {
            let header = 2 + n + window_len(wide);
            let Some(vlen) = len.checked_sub(header) else {
                continue;
            };
            if len_code(vlen).1 == n {
                write_len(b, if wide { LEAD_WIDE } else { 0 }, vlen);
                return;
            }
        }
    }
    unreachable!("a padding of {len} bytes has an encoding");
}

/// Set `mark` bits in the mutable window (writes only when something changes, to keep
/// hot cache lines clean).
#[inline]
pub(crate) fn set_mark(w: &mut [u8], bits: u8) {
    let m = &mut w[OFF_MARK];
    if *m & bits != bits {
        *m |= bits;
    }
}

/// Clear `mark` bits in the mutable window.
#[inline]
pub(crate) fn clear_mark(w: &mut [u8], bits: u8) {
    w[OFF_MARK] &= !(bits & MARK_BITS);
}

/// The mark bits of a window.
#[cfg(test)]
#[inline(always)]
pub(crate) fn mark(w: &[u8]) -> u8 {
    w[OFF_MARK] & MARK_BITS
}

/// The exptime of a window.
#[cfg(test)]
#[inline(always)]
pub(crate) fn exptime(w: &[u8]) -> u32 {
    read_u32(w, 0)
}

/// The CAS id of a window (narrow or wide, told by its length) of a segment whose base
/// is `base`.
#[cfg(test)]
#[inline(always)]
pub(crate) fn cas(w: &[u8], base: u64) -> u64 {
    if w.len() == WIDE_WINDOW {
        u64::from_le_bytes(w[OFF_MARK + 1..OFF_MARK + 9].try_into().unwrap())
    } else {
        base + u64::from(read_u32(w, OFF_MARK) >> MARK_SHIFT)
    }
}

/// Whether CAS id `cas` can be stored in window `w` of a segment whose base is `base`.
#[inline(always)]
pub(crate) fn cas_fits(w: &[u8], cas: u64, base: u64) -> bool {
    w.len() == WIDE_WINDOW || cas.wrapping_sub(base) < NARROW_CAS_SPAN
}

/// Whether a new narrow record may hold CAS id `cas` in a segment whose base is `base`.
#[inline(always)]
pub(crate) fn narrow_fits(cas: u64, base: u64) -> bool {
    cas.wrapping_sub(base) < NARROW_CAS_SPAN
}

/// Rewrite the whole mutable window for a new version of the item written over the old
/// one: `mark` replaced, not or-ed. False, writing nothing, when `cas` does not fit.
#[inline]
pub(crate) fn set_new_version(w: &mut [u8], mark: u8, exptime: u32, cas: u64, base: u64) -> bool {
    if !cas_fits(w, cas, base) {
        return false;
    }
    w[OFF_MARK] = (w[OFF_MARK] & !MARK_BITS) | (mark & MARK_BITS);
    set_exptime(w, exptime);
    set_cas(w, cas, base)
}

/// Overwrite the exptime in the mutable window.
#[inline]
pub(crate) fn set_exptime(w: &mut [u8], exptime: u32) {
    write_u32(w, 0, exptime);
}

/// Overwrite the CAS id in the mutable window, keeping the mark. False, writing
/// nothing, when the window is narrow and `cas` is not within its span of `base`.
#[inline]
pub(crate) fn set_cas(w: &mut [u8], cas: u64, base: u64) -> bool {
    if w.len() == WIDE_WINDOW {
        w[OFF_MARK + 1..OFF_MARK + 9].copy_from_slice(&cas.to_le_bytes());
        return true;
    }
    let delta = cas.wrapping_sub(base);
    if delta >= NARROW_CAS_SPAN {
        return false;
    }
    let word = (delta as u32) << MARK_SHIFT | u32::from(w[OFF_MARK] & MARK_BITS);
    write_u32(w, OFF_MARK, word);
    true
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
    fn layout_sizes() {
        assert_eq!(header_len(20, false, false), MIN_HEADER_BYTES);
        assert_eq!(item_len(20, 20, false, false), 50);
        assert_eq!(item_len(20, 20, true, false), 54);
        assert_eq!(item_len(20, 20, false, true), 55);
        assert_eq!(header_len(59, false, false), 10);
        assert_eq!(header_len(60, false, false), 11);
        assert_eq!(header_len(315, false, false), 11);
        assert_eq!(header_len(316, false, false), 12);
        assert_eq!(header_len(65_535, false, false), 12);
        assert_eq!(header_len(65_536, false, false), 13);
        assert_eq!(header_len(1 << 24, true, true), MAX_HEADER_BYTES);
        // The smallest record is longer than the most a prefix read takes.
        assert!(item_len(1, 0, false, false) > PREFIX_MAX_BYTES);
    }

    fn round_trip(vlen: usize, flags: u32, wide: bool, cas: u64, base: u64) {
        let it = NewItem {
            klen: 3,
            vlen,
            flags,
            exptime: 99,
        };
        let len = it.total_len(wide);
        let mut buf = vec![0xAAu8; len];
        let ko = it.write_header(&mut buf, wide, cas, base);
        assert_eq!(ko + 3 + vlen, len);
        let h = Header::parse(&buf, base);
        assert_eq!(
            (
                h.prefix.klen,
                h.prefix.vlen,
                h.prefix.has_flags,
                h.prefix.wide
            ),
            (3, vlen, flags != 0, wide)
        );
        assert_eq!((h.mark, h.exptime, h.cas, h.flags), (0, 99, cas, flags));
        assert_eq!(h.prefix.total_len(), len);
        assert_eq!(h.prefix.key_offset(), ko);
        assert_eq!(Prefix::extra_after(&buf[..2]) + 2, h.prefix.window_at);
        let (at, wl) = (h.prefix.window_at, h.prefix.window_len());
        let w = &mut buf[at..at + wl];
        set_mark(w, MARK_ACCESSED | MARK_FETCHED | MARK_KEY_BINARY);
        clear_mark(w, MARK_ACCESSED);
        set_exptime(w, 5);
        assert!(set_cas(w, cas + 1, base));
        let h2 = Header::parse(&buf, base);
        assert_eq!(
            (h2.mark, h2.exptime, h2.cas, h2.flags),
            (MARK_FETCHED | MARK_KEY_BINARY, 5, cas + 1, flags)
        );
        assert_eq!(h2.prefix, h.prefix);
    }

    #[test]
    fn headers_round_trip_at_every_length_code() {
        for vlen in [
            0,
            1,
            59,
            60,
            315,
            316,
            65_535,
            65_536,
            (1 << 24) - 1,
            1 << 24,
        ] {
            for flags in [0, 0xDEAD_BEEF] {
                round_trip(vlen, flags, false, 1000 + NARROW_CAS_SPAN - 2, 1000);
                round_trip(vlen, flags, true, u64::MAX - 1, 7);
            }
        }
    }

    #[test]
    fn a_narrow_window_refuses_a_cas_out_of_span() {
        let it = NewItem {
            klen: 1,
            vlen: 0,
            flags: 0,
            exptime: 0,
        };
        let mut buf = vec![0u8; it.total_len(false)];
        it.write_header(&mut buf, false, 10, 10);
        let p = Prefix::parse(&buf);
        let w = &mut buf[p.window_at..p.window_at + p.window_len()];
        set_mark(w, MARK_STALE);
        assert!(!set_cas(w, 10 + NARROW_CAS_SPAN, 10));
        assert!(!set_new_version(w, 0, 1, 9, 10), "below the base");
        assert_eq!((cas(w, 10), mark(w), exptime(w)), (10, MARK_STALE, 0));
        assert!(set_new_version(
            w,
            MARK_ACCESSED,
            7,
            10 + NARROW_CAS_SPAN - 1,
            10
        ));
        assert_eq!(
            (cas(w, 10), mark(w), exptime(w)),
            (10 + NARROW_CAS_SPAN - 1, MARK_ACCESSED, 7)
        );
    }

    #[test]
    fn padding_spans_region() {
        for len in (11..400).chain([65_545, 65_546, 65_547, 70_000, 1 << 24, (1 << 24) + 13]) {
            let mut buf = vec![0xFFu8; len];
            write_padding(&mut buf, len);
            let p = Prefix::parse(&buf);
            assert!(p.is_padding());
            assert_eq!(p.total_len(), len);
        }
    }

    #[test]
    fn expiry_rule() {
        assert!(!is_expired(0, 100));
        assert!(is_expired(100, 100));
        assert!(is_expired(99, 100));
        assert!(!is_expired(101, 100));
    }
}
