//! memcached's own item sizes, the one home of their formula: what memcached 1.6 would
//! take for an item (`ITEM_ntotal`), from which follow its `-I` limit, its chunking of
//! large values and its slab classes. Our engine lays items out its own way (see
//! `item.rs`); these figures only decide which requests memcached would refuse or
//! treat differently, so that we refuse and treat the same ones.

/// memcached's `item` header.
pub const MEMCACHED_ITEM_HEADER_BYTES: usize = 48;

/// The 8-byte cas of a memcached item, absent under `-C`.
pub const MEMCACHED_CAS_BYTES: usize = 8;

/// The client flags suffix memcached adds when the flags are not zero.
pub const MEMCACHED_FLAGS_BYTES: usize = 4;

/// memcached's per-item overhead in its "object too large" check: the header, the cas,
/// the key's NUL and the value's `\r\n`.
pub const MEMCACHED_ITEM_OVERHEAD_BYTES: usize =
    MEMCACHED_ITEM_HEADER_BYTES + MEMCACHED_CAS_BYTES + 1 + 2;

/// memcached's largest slab chunk (`slab_chunk_max`, 512 KiB by default): a larger
/// item is stored in chunks.
pub const MEMCACHED_SLAB_CHUNK_MAX_BYTES: usize = 512 * 1024;

/// memcached's `ITEM_ntotal`: the header, the key and its NUL, the flags suffix when
/// `has_flags`, the value and its `\r\n`, and the cas when `cas`.
#[must_use]
#[inline]
pub const fn memcached_item_size(
    key_len: usize,
    has_flags: bool,
    value_len: usize,
    cas: bool,
) -> usize {
    MEMCACHED_ITEM_HEADER_BYTES
        + key_len
        + 1
        + if has_flags { MEMCACHED_FLAGS_BYTES } else { 0 }
        + value_len
        + 2
        + if cas { MEMCACHED_CAS_BYTES } else { 0 }
}

/// Whether memcached would store the item in chunks; it refuses incr/decr on a
/// chunked item as non-numeric whatever its digits.
#[must_use]
#[inline]
pub const fn memcached_would_chunk(key_len: usize, has_flags: bool, value_len: usize) -> bool {
    memcached_item_size(key_len, has_flags, value_len, true) > MEMCACHED_SLAB_CHUNK_MAX_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overhead_is_the_size_of_an_empty_item_less_its_key() {
        assert_eq!(MEMCACHED_ITEM_OVERHEAD_BYTES, 59);
        assert_eq!(
            memcached_item_size(0, false, 0, true),
            MEMCACHED_ITEM_OVERHEAD_BYTES
        );
        assert_eq!(
            memcached_item_size(3, true, 10, false),
            48 + 3 + 1 + 4 + 10 + 2
        );
    }

    #[test]
    fn chunking_starts_past_half_a_megabyte() {
        let fits = MEMCACHED_SLAB_CHUNK_MAX_BYTES - MEMCACHED_ITEM_OVERHEAD_BYTES - 1;
        assert!(!memcached_would_chunk(1, false, fits));
        assert!(memcached_would_chunk(1, false, fits + 1));
        assert!(memcached_would_chunk(1, true, fits));
    }
}
