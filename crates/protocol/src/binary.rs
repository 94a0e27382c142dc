//! memcached's binary protocol: the 24-byte header, opcodes and status codes.
//!
//! Placeholder until the binary protocol is served.

/// First byte of every binary request.
pub const REQUEST_MAGIC: u8 = 0x80;
/// First byte of every binary response.
pub const RESPONSE_MAGIC: u8 = 0x81;
/// Size of the fixed header.
pub const HEADER_LEN: usize = 24;
