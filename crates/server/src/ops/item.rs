//! memcached's item sizes as the protocols use them: what `-I` refuses, what `me` and
//! `lru_crawler metadump` report as `size`, and `me`'s slab class. The formula itself
//! lives once, in `storage::memcached`, which the store's own size check and its
//! incr/decr use too; every protocol asks here, so that the same values are refused.

/// memcached's `ITEM_ntotal`, the bytes memcached would take for an item: its
/// header (48 bytes), the key and its NUL, the flags suffix when non-zero, the
/// value and its `\r\n`, and the 8-byte cas unless `-C` (`cas` false). What `me`
/// and `lru_crawler metadump` report as `size`, and what `-I` limits.
#[must_use]
#[inline]
pub fn memcached_item_size(key_len: usize, flags: u32, len: usize, cas: bool) -> usize {
    storage::memcached::memcached_item_size(key_len, flags != 0, len, cas)
}

/// memcached's item-size rule, from `item_size_ok()`: [`memcached_item_size`] with
/// the cas must fit `item_size_max` (`-I`; under `-C`, where memcached's items have
/// no cas, the caller passes 8 bytes more: `Settings::memcached_item_limit`). Applied
/// here, independent of how our own engine lays items out, so that the same values
/// are refused.
#[must_use]
pub fn memcached_item_fits(item_size_max: usize, key_len: usize, flags: u32, len: usize) -> bool {
    memcached_item_size(key_len, flags, len, true) <= item_size_max
}

/// The slab class memcached 1.6 (default `-n 48 -f 1.25`, 1 MiB pages) would keep an
/// item of `size` bytes in. Items over half a page are chunked; memcached then reports
/// the class of the item's header, which is estimated here. ferrocache has no slabs; the
/// number only keeps `me` output familiar.
pub fn memcached_slab_class(size: usize, key_len: usize, flags: u32) -> u32 {
    const CHUNK_SIZE_MAX: usize = 512 * 1024;
    let mut size = if size > CHUNK_SIZE_MAX {
        // Header, key, suffix, CAS and the first chunk pointer block.
        // (the item's size without a value or its `\r\n`)
        memcached_item_size(key_len, flags, 0, true) - 2 + 32
    } else {
        size
    };
    if size == 0 {
        size = 1;
    }
    let mut class_size: u32 = 96;
    let mut class = 1;
    loop {
        if f64::from(class_size) >= CHUNK_SIZE_MAX as f64 / 1.25 {
            // The largest class holds up to half a page.
            return class;
        }
        let aligned = class_size.next_multiple_of(8);
        if size <= aligned as usize {
            return class;
        }
        class_size = (f64::from(aligned) * 1.25) as u32;
        class += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn item_size_rule_matches_memcached() {
        // 1 MiB limit, 1-byte key, flags 0: 48 + 2 + len + 2 + 8 <= 1048576.
        assert!(memcached_item_fits(1 << 20, 1, 0, 1_048_516));
        assert!(!memcached_item_fits(1 << 20, 1, 0, 1_048_517));
        assert!(!memcached_item_fits(1 << 20, 1, 7, 1_048_516));
        assert!(memcached_item_fits(1 << 20, 1, 7, 1_048_512));
    }

    #[test]
    fn slab_classes_follow_memcached_defaults() {
        // memcached 1.6 -f 1.25: 96, 120, 152, 192, 240, 304, ...
        assert_eq!(memcached_slab_class(61, 1, 0), 1);
        assert_eq!(memcached_slab_class(96, 1, 0), 1);
        assert_eq!(memcached_slab_class(97, 1, 0), 2);
        assert_eq!(memcached_slab_class(120, 1, 0), 2);
        assert_eq!(memcached_slab_class(121, 1, 0), 3);
        assert_eq!(memcached_slab_class(152, 1, 0), 3);
        assert_eq!(memcached_slab_class(153, 1, 0), 4);
        assert!(memcached_slab_class(500_000, 1, 0) > 30);
    }
}
