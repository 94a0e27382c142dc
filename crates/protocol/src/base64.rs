//! Base64, exactly as memcached's `base64.c` (Jouni Malinen's code): the
//! encoding of binary keys in the meta protocol (`b` flag).
//!
//! memcached's decoder is lenient in ways a standard one is not (bytes outside
//! the alphabet are skipped, decoding stops after the first padded block), and
//! a key must decode to the same bytes here as there.

const BASE64_TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64_value(b: u8) -> Option<u8> {
    match b {
        b'A'..=b'Z' => Some(b - b'A'),
        b'a'..=b'z' => Some(b - b'a' + 26),
        b'0'..=b'9' => Some(b - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        b'=' => Some(0),
        _ => None,
    }
}

/// memcached's `base64_decode`: bytes outside the alphabet are skipped; the
/// alphabet count must be a non-zero multiple of 4; decoding stops after the
/// first padded block. `None` where memcached returns 0 (failure).
#[must_use]
pub fn base64_decode(src: &[u8], out: &mut [u8]) -> Option<usize> {
    let count = src.iter().filter(|&&b| base64_value(b).is_some()).count();
    if count == 0 || count % 4 != 0 || count / 4 * 3 > out.len() {
        return None;
    }
    let mut pos = 0;
    let mut block = [0u8; 4];
    let mut n = 0;
    let mut pad = 0;
    for &b in src {
        let Some(v) = base64_value(b) else { continue };
        if b == b'=' {
            pad += 1;
        }
        block[n] = v;
        n += 1;
        if n == 4 {
            out[pos] = (block[0] << 2) | (block[1] >> 4);
            out[pos + 1] = (block[1] << 4) | (block[2] >> 2);
            out[pos + 2] = (block[2] << 6) | block[3];
            pos += 3;
            n = 0;
            if pad > 0 {
                match pad {
                    1 => pos -= 1,
                    2 => pos -= 2,
                    _ => return None,
                }
                break;
            }
        }
    }
    (pos > 0).then_some(pos)
}

/// memcached's `base64_encode` (no line breaks), appended to `out`.
pub fn base64_encode(src: &[u8], out: &mut Vec<u8>) {
    let mut chunks = src.chunks_exact(3);
    for c in &mut chunks {
        out.push(BASE64_TABLE[(c[0] >> 2) as usize]);
        out.push(BASE64_TABLE[(((c[0] & 0x03) << 4) | (c[1] >> 4)) as usize]);
        out.push(BASE64_TABLE[(((c[1] & 0x0f) << 2) | (c[2] >> 6)) as usize]);
        out.push(BASE64_TABLE[(c[2] & 0x3f) as usize]);
    }
    match *chunks.remainder() {
        [a] => {
            out.push(BASE64_TABLE[(a >> 2) as usize]);
            out.push(BASE64_TABLE[((a & 0x03) << 4) as usize]);
            out.extend_from_slice(b"==");
        }
        [a, b] => {
            out.push(BASE64_TABLE[(a >> 2) as usize]);
            out.push(BASE64_TABLE[(((a & 0x03) << 4) | (b >> 4)) as usize]);
            out.push(BASE64_TABLE[((b & 0x0f) << 2) as usize]);
            out.push(b'=');
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_like_memcached() {
        let mut buf = [0u8; 64];
        assert_eq!(base64_decode(b"azI=", &mut buf), Some(2));
        assert_eq!(&buf[..2], b"k2");
        assert_eq!(base64_decode(b"ZA==", &mut buf), Some(1));
        assert_eq!(base64_decode(b"k2", &mut buf), None);
        assert_eq!(base64_decode(b"====", &mut buf), None);
        assert_eq!(base64_decode(b"", &mut buf), None);
        // Bytes outside the alphabet are skipped.
        assert_eq!(base64_decode(b"a.z.I.=", &mut buf), Some(2));
        let mut out = Vec::new();
        base64_encode(b"k2", &mut out);
        assert_eq!(out, b"azI=");
        out.clear();
        base64_encode(b"d", &mut out);
        assert_eq!(out, b"ZA==");
        out.clear();
        base64_encode(b"abc", &mut out);
        assert_eq!(out, b"YWJj");
    }
}
