//! Key hash functions of the common memcached clients and of twemproxy, bit
//! for bit, so `placement.rs` puts keys where those clients would.
//!
//! - [`md5_le`]: libmemcached's `hashkit_md5` (the first four digest bytes,
//!   little-endian); the key hash of ketama-weighted and the point hash of
//!   every 160-point continuum.
//! - [`one_at_a_time`]: Bob Jenkins' one-at-a-time, libmemcached's default
//!   (`MEMCACHED_HASH_DEFAULT`); pylibmc's `{"ketama": True}` keeps it.
//! - [`fnv1a_64_twemproxy`]: twemproxy's `hash_fnv1a_64`, which is not the
//!   64-bit FNV-1a its name says (see the function).

use md5::{Digest, Md5};

/// The first four MD5 bytes as a little-endian u32 (`hashkit_md5`).
pub fn md5_le(key: &[u8]) -> u32 {
    md5_le_at(key, 0)
}

/// The `i`th (0..4) little-endian u32 of the MD5 digest: a ketama point.
pub fn md5_le_at(key: &[u8], i: usize) -> u32 {
    let d = Md5::digest(key);
    u32::from_le_bytes([d[4 * i], d[4 * i + 1], d[4 * i + 2], d[4 * i + 3]])
}

/// Jenkins' one-at-a-time hash (`hashkit_one_at_a_time`).
pub fn one_at_a_time(key: &[u8]) -> u32 {
    let mut h: u32 = 0;
    for &b in key {
        h = h.wrapping_add(u32::from(b));
        h = h.wrapping_add(h << 10);
        h ^= h >> 6;
    }
    h = h.wrapping_add(h << 3);
    h ^= h >> 11;
    h.wrapping_add(h << 15)
}

/// twemproxy's `hash_fnv1a_64`: FNV-1a with the 64-bit offset basis and
/// prime, but computed in a `uint32_t` throughout, so both are truncated to
/// their low 32 bits (0x84222325 and 0x1b3). Each byte is widened from a C
/// `char`, which is signed on x86, so bytes >= 0x80 are sign-extended.
pub fn fnv1a_64_twemproxy(key: &[u8]) -> u32 {
    const FNV_64_INIT_LOW32: u32 = 0xcbf2_9ce4_8422_2325_u64 as u32;
    const FNV_64_PRIME_LOW32: u32 = 0x0000_0100_0000_01b3_u64 as u32;
    let mut h = FNV_64_INIT_LOW32;
    for &b in key {
        h ^= b as i8 as i32 as u32;
        h = h.wrapping_mul(FNV_64_PRIME_LOW32);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn md5_known_values() {
        // md5("") = d41d8cd98f00b204e9800998ecf8427e -> bytes d4 1d 8c d9 LE.
        assert_eq!(md5_le(b""), 0xd98c1dd4);
        // md5("a") = 0cc175b9c0f1b6a831c399e269772661.
        assert_eq!(md5_le(b"a"), 0xb975c10c);
        assert_eq!(md5_le_at(b"a", 3), 0x61267769);
    }

    /// Computed by a reference Python transcription of libmemcached's
    /// `one_at_a_time.cc`, which reproduced pylibmc's placement of 3 003
    /// keys exactly (see `placement::tests`).
    #[test]
    fn one_at_a_time_known_values() {
        assert_eq!(one_at_a_time(b""), 0);
        assert_eq!(one_at_a_time(b"a"), 0xca2e9442);
        assert_eq!(one_at_a_time(b"foo"), 0x238678dd);
        assert_eq!(one_at_a_time(b"key0"), 0x74614706);
    }

    /// The truncated constants, and values that reproduced twemproxy 0.5.0's
    /// (nutcracker) placement of 3 003 keys (see `placement::tests`).
    #[test]
    fn fnv1a_64_twemproxy_known_values() {
        assert_eq!(fnv1a_64_twemproxy(b""), 0x84222325);
        assert_eq!(fnv1a_64_twemproxy(b"a"), 0x8601ec8c);
        assert_eq!(fnv1a_64_twemproxy(b"foo"), 0xfed9d577);
        assert_eq!(fnv1a_64_twemproxy(b"key0"), 0x5cbda5d4);
        // Not the standard 32-bit FNV-1a ("a" -> 0xe40c292c), but the low half of
        // the 64-bit one ("foo" -> 0xdcb27518fed9d577): a product's low 32 bits
        // depend only on its factors' low 32 bits.
        assert_ne!(fnv1a_64_twemproxy(b"a"), 0xe40c292c);
        assert_eq!(fnv1a_64_twemproxy(b"foo"), 0xdcb27518fed9d577_u64 as u32);
    }

    #[test]
    fn fnv1a_sign_extends_high_bytes() {
        // twemproxy xors (uint32_t)(char)0xff = 0xffffffff, not 0xff.
        let h = (0x84222325u32 ^ 0xffff_ffff).wrapping_mul(0x1b3);
        assert_eq!(fnv1a_64_twemproxy(&[0xff]), h);
    }
}
