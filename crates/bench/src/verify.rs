//! `--verify`: values that carry a checksum of themselves and of their key.
//!
//! ```text
//!   value = filler bytes ............... | 16 hex digits
//!           (letters from a random seed)   hash64(key ++ filler)
//! ```
//!
//! Hashing the key in as well catches a value served for the wrong key, not
//! only bit rot. Values shorter than [`MIN_VERIFIED_VALUE_BYTES`] cannot hold
//! the checksum, so `--verify` raises smaller sizes to it.

/// Room for the checksum.
pub const MIN_VERIFIED_VALUE_BYTES: usize = 16;

/// FNV-1a over `key` then `body`, 64-bit. Fast enough for the sizes
/// benchmarked, and any corruption changes it with near certainty.
fn checksum(key: &[u8], body: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key.iter().chain(body) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Fills `out` with a `len`-byte verifiable value for `key`; `seed` varies
/// the filler so successive writes of a key differ.
pub fn compose_value(key: &[u8], len: usize, seed: u64, out: &mut Vec<u8>) {
    assert!(
        len >= MIN_VERIFIED_VALUE_BYTES,
        "verified values hold a 16-byte checksum"
    );
    out.clear();
    let body = len - MIN_VERIFIED_VALUE_BYTES;
    out.extend((0..body).map(|i| b'a' + ((seed as usize + i) % 26) as u8));
    let sum = checksum(key, out);
    out.extend(
        (0..16)
            .rev()
            .map(|i| HEX[((sum >> (i * 4)) & 0xf) as usize]),
    );
}

/// True when `value` is one that [`compose_value`] made for `key`.
pub fn check_value(key: &[u8], value: &[u8]) -> bool {
    let Some(body_len) = value.len().checked_sub(MIN_VERIFIED_VALUE_BYTES) else {
        return false;
    };
    let (body, digits) = value.split_at(body_len);
    let sum = checksum(key, body);
    digits
        .iter()
        .enumerate()
        .all(|(i, &d)| d == HEX[((sum >> ((15 - i) * 4)) & 0xf) as usize])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn composed_values_check() {
        let mut v = Vec::new();
        for len in [16, 17, 20, 100, 4096] {
            compose_value(b"k0001", len, len as u64, &mut v);
            assert_eq!(v.len(), len);
            assert!(check_value(b"k0001", &v));
        }
    }

    #[test]
    fn any_flipped_byte_or_wrong_key_fails() {
        let mut v = Vec::new();
        compose_value(b"key", 40, 5, &mut v);
        for i in 0..v.len() {
            let mut bad = v.clone();
            bad[i] ^= 0x01;
            assert!(!check_value(b"key", &bad), "flip at {i} undetected");
        }
        assert!(!check_value(b"kez", &v));
        assert!(!check_value(b"key", &v[..39]));
        assert!(!check_value(b"key", b"short"));
    }
}
