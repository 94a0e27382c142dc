//! memcached's item-size rule, the one home of its formula: what `-I` refuses, what
//! `me` and `lru_crawler metadump` report as `size`, and where memcached would
//! have chunked a value. Every protocol asks here, independent of how our own
//! engine lays items out, so that the same values are refused.

/// memcached's `ITEM_ntotal`, the bytes memcached would take for an item: its
/// header (48 bytes), the key and its NUL, the flags suffix when non-zero, the
/// value and its `\r\n`, and the 8-byte cas unless `-C` (`cas` false). What `me`
/// and `lru_crawler metadump` report as `size`, and what `-I` limits.
#[must_use]
pub fn memcached_item_size(key_len: usize, flags: u32, len: usize, cas: bool) -> usize {
    const ITEM_HEADER_BYTES: usize = 48;
    let suffix = if flags == 0 { 0 } else { 4 };
    let cas = if cas { storage::MEMCACHED_CAS_BYTES } else { 0 };
    ITEM_HEADER_BYTES + key_len + 1 + suffix + len + 2 + cas
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
}
