//! memcached's binary protocol: the 24-byte header, opcodes and status codes,
//! and the server side request decoder.
//!
//! Every request and response starts with the same fixed header, all fields
//! big-endian, followed by a body of `extras | key | value`:
//!
//! ```text
//!  byte  0        1        2        3
//!      +--------+--------+--------+--------+
//!    0 | magic  | opcode |   key length    |
//!      +--------+--------+--------+--------+
//!    4 | extlen |datatype| vbucket/status  |
//!      +--------+--------+--------+--------+
//!    8 |       total body length           |
//!      +--------+--------+--------+--------+
//!   12 |       opaque (echoed back)        |
//!      +--------+--------+--------+--------+
//!   16 |       cas (64 bits)               |
//!   20 |                                   |
//!      +--------+--------+--------+--------+
//!   24 | extras | key | value ...
//! ```
//!
//! Requests carry magic `0x80` and a vbucket id (ignored by memcached);
//! responses carry magic `0x81` and a status code. This module frames and
//! composes packets, and decodes a request into its command and fields
//! ([`decode_request`]); what each command does lives in the server.

mod request;

pub use request::{decode_request, BinaryRequest, Command, Decode, StoreKind};

/// First byte of every binary request.
pub const REQUEST_MAGIC: u8 = 0x80;
/// First byte of every binary response.
pub const RESPONSE_MAGIC: u8 = 0x81;
/// Size of the fixed header.
pub const HEADER_LEN: usize = 24;
/// Longest key memcached accepts (`KEY_MAX_LENGTH`); the 16-bit key length
/// field allows more, and memcached answers `Invalid arguments` and closes.
pub const MAX_KEY_LEN: usize = 250;

/// Request opcodes memcached 1.6 knows. The `Q` variants are "quiet": they
/// suppress the success reply (and for gets, the miss reply).
pub mod opcode {
    pub const GET: u8 = 0x00;
    pub const SET: u8 = 0x01;
    pub const ADD: u8 = 0x02;
    pub const REPLACE: u8 = 0x03;
    pub const DELETE: u8 = 0x04;
    pub const INCREMENT: u8 = 0x05;
    pub const DECREMENT: u8 = 0x06;
    pub const QUIT: u8 = 0x07;
    pub const FLUSH: u8 = 0x08;
    pub const GETQ: u8 = 0x09;
    pub const NOOP: u8 = 0x0a;
    pub const VERSION: u8 = 0x0b;
    pub const GETK: u8 = 0x0c;
    pub const GETKQ: u8 = 0x0d;
    pub const APPEND: u8 = 0x0e;
    pub const PREPEND: u8 = 0x0f;
    pub const STAT: u8 = 0x10;
    pub const SETQ: u8 = 0x11;
    pub const ADDQ: u8 = 0x12;
    pub const REPLACEQ: u8 = 0x13;
    pub const DELETEQ: u8 = 0x14;
    pub const INCREMENTQ: u8 = 0x15;
    pub const DECREMENTQ: u8 = 0x16;
    pub const QUITQ: u8 = 0x17;
    pub const FLUSHQ: u8 = 0x18;
    pub const APPENDQ: u8 = 0x19;
    pub const PREPENDQ: u8 = 0x1a;
    pub const TOUCH: u8 = 0x1c;
    pub const GAT: u8 = 0x1d;
    pub const GATQ: u8 = 0x1e;
    pub const SASL_LIST_MECHS: u8 = 0x20;
    pub const SASL_AUTH: u8 = 0x21;
    pub const SASL_STEP: u8 = 0x22;
    pub const GATK: u8 = 0x23;
    pub const GATKQ: u8 = 0x24;

    /// The loud opcode a quiet one stands for (memcached rewrites `c->cmd`
    /// the same way), and whether it was quiet.
    #[must_use]
    pub fn unquiet(op: u8) -> (u8, bool) {
        let loud = match op {
            GETQ => GET,
            GETKQ => GETK,
            SETQ => SET,
            ADDQ => ADD,
            REPLACEQ => REPLACE,
            DELETEQ => DELETE,
            INCREMENTQ => INCREMENT,
            DECREMENTQ => DECREMENT,
            QUITQ => QUIT,
            FLUSHQ => FLUSH,
            APPENDQ => APPEND,
            PREPENDQ => PREPEND,
            GATQ => GAT,
            GATKQ => GATK,
            _ => return (op, false),
        };
        (loud, true)
    }
}

/// Response status codes, with memcached's fixed error texts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum Status {
    Success = 0x00,
    KeyNotFound = 0x01,
    KeyExists = 0x02,
    TooLarge = 0x03,
    InvalidArguments = 0x04,
    NotStored = 0x05,
    NonNumeric = 0x06,
    AuthError = 0x20,
    AuthContinue = 0x21,
    UnknownCommand = 0x81,
    OutOfMemory = 0x82,
}

impl Status {
    /// The body memcached's `write_bin_error()` sends for this status when
    /// the caller gives no text of its own.
    #[must_use]
    pub fn message(self) -> &'static [u8] {
        match self {
            Status::Success | Status::AuthContinue => b"",
            Status::KeyNotFound => b"Not found",
            Status::KeyExists => b"Data exists for key.",
            Status::TooLarge => b"Too large.",
            Status::InvalidArguments => b"Invalid arguments",
            Status::NotStored => b"Not stored.",
            Status::NonNumeric => b"Non-numeric server-side value for incr or decr",
            Status::AuthError => b"Auth failure.",
            Status::UnknownCommand => b"Unknown command",
            Status::OutOfMemory => b"Out of memory",
        }
    }

    /// The status for a wire value, if it is one memcached sends.
    #[must_use]
    pub fn from_u16(v: u16) -> Option<Status> {
        Some(match v {
            0x00 => Status::Success,
            0x01 => Status::KeyNotFound,
            0x02 => Status::KeyExists,
            0x03 => Status::TooLarge,
            0x04 => Status::InvalidArguments,
            0x05 => Status::NotStored,
            0x06 => Status::NonNumeric,
            0x20 => Status::AuthError,
            0x21 => Status::AuthContinue,
            0x81 => Status::UnknownCommand,
            0x82 => Status::OutOfMemory,
            _ => return None,
        })
    }
}

/// A decoded header: a request's (`status` is then the vbucket id) or a
/// response's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    pub magic: u8,
    pub opcode: u8,
    pub key_len: u16,
    pub extras_len: u8,
    pub data_type: u8,
    /// vbucket id in a request, status in a response.
    pub status: u16,
    pub body_len: u32,
    pub opaque: u32,
    pub cas: u64,
}

impl Header {
    /// Decode the first [`HEADER_LEN`] bytes; `None` if fewer have arrived.
    /// The magic byte is not checked: the caller decides what a wrong one means.
    #[must_use]
    pub fn parse(input: &[u8]) -> Option<Header> {
        let h: &[u8; HEADER_LEN] = input.get(..HEADER_LEN)?.try_into().ok()?;
        Some(Header {
            magic: h[0],
            opcode: h[1],
            key_len: u16::from_be_bytes([h[2], h[3]]),
            extras_len: h[4],
            data_type: h[5],
            status: u16::from_be_bytes([h[6], h[7]]),
            body_len: u32::from_be_bytes([h[8], h[9], h[10], h[11]]),
            opaque: u32::from_be_bytes([h[12], h[13], h[14], h[15]]),
            cas: u64::from_be_bytes([h[16], h[17], h[18], h[19], h[20], h[21], h[22], h[23]]),
        })
    }

    /// Append the 24 header bytes.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.push(self.magic);
        out.push(self.opcode);
        out.extend_from_slice(&self.key_len.to_be_bytes());
        out.push(self.extras_len);
        out.push(self.data_type);
        out.extend_from_slice(&self.status.to_be_bytes());
        out.extend_from_slice(&self.body_len.to_be_bytes());
        out.extend_from_slice(&self.opaque.to_be_bytes());
        out.extend_from_slice(&self.cas.to_be_bytes());
    }

    /// Bytes of extras and key, which memcached reads before it dispatches.
    #[must_use]
    pub fn extras_and_key_len(&self) -> usize {
        usize::from(self.extras_len) + usize::from(self.key_len)
    }

    /// Header, extras and key: the part of a request read before it is
    /// dispatched.
    #[must_use]
    pub fn head_len(&self) -> usize {
        HEADER_LEN + self.extras_and_key_len()
    }

    /// The value length (`body - extras - key`), `None` when the header
    /// claims more extras and key than body.
    #[must_use]
    pub fn value_len(&self) -> Option<usize> {
        (self.body_len as usize).checked_sub(self.extras_and_key_len())
    }

    /// Header plus body.
    #[must_use]
    pub fn packet_len(&self) -> usize {
        HEADER_LEN + self.body_len as usize
    }
}

/// A whole packet split into its parts, borrowed from the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<'a> {
    pub header: Header,
    pub extras: &'a [u8],
    pub key: &'a [u8],
    pub value: &'a [u8],
}

/// Frame one whole packet (request or response) at the start of `input`.
/// `None` until all of it has arrived, or when its lengths do not add up
/// (extras + key longer than the body).
#[must_use]
pub fn frame_packet(input: &[u8]) -> Option<Packet<'_>> {
    let header = Header::parse(input)?;
    header.value_len()?;
    let body = input.get(HEADER_LEN..header.packet_len())?;
    let (extras, rest) = body.split_at(usize::from(header.extras_len));
    let (key, value) = rest.split_at(usize::from(header.key_len));
    Some(Packet {
        header,
        extras,
        key,
        value,
    })
}

/// Append a response header. `body_len` counts extras, key and value.
#[allow(clippy::too_many_arguments)] // one per header field
pub fn write_response_header(
    out: &mut Vec<u8>,
    opcode: u8,
    status: Status,
    extras_len: u8,
    key_len: u16,
    body_len: u32,
    opaque: u32,
    cas: u64,
) {
    Header {
        magic: RESPONSE_MAGIC,
        opcode,
        key_len,
        extras_len,
        data_type: 0,
        status: status as u16,
        body_len,
        opaque,
        cas,
    }
    .write(out);
}

/// Append a whole request packet (used by clients and tests).
pub fn write_request(
    out: &mut Vec<u8>,
    opcode: u8,
    extras: &[u8],
    key: &[u8],
    value: &[u8],
    opaque: u32,
    cas: u64,
) {
    Header {
        magic: REQUEST_MAGIC,
        opcode,
        key_len: key.len() as u16,
        extras_len: extras.len() as u8,
        data_type: 0,
        status: 0,
        body_len: (extras.len() + key.len() + value.len()) as u32,
        opaque,
        cas,
    }
    .write(out);
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Header {
        Header {
            magic: REQUEST_MAGIC,
            opcode: opcode::SET,
            key_len: 3,
            extras_len: 8,
            data_type: 0,
            status: 0x1234,
            body_len: 16,
            opaque: 0xdead_beef,
            cas: 0x0102_0304_0506_0708,
        }
    }

    #[test]
    fn header_round_trip() {
        let h = sample();
        let mut out = Vec::new();
        h.write(&mut out);
        assert_eq!(out.len(), HEADER_LEN);
        assert_eq!(
            out,
            [
                0x80, 0x01, 0x00, 0x03, 0x08, 0x00, 0x12, 0x34, 0, 0, 0, 16, 0xde, 0xad, 0xbe,
                0xef, 1, 2, 3, 4, 5, 6, 7, 8
            ]
        );
        assert_eq!(Header::parse(&out), Some(h));
        assert_eq!(h.value_len(), Some(5));
        assert_eq!(h.packet_len(), 40);
    }

    #[test]
    fn split_input_is_incomplete_until_whole() {
        let mut packet = Vec::new();
        write_request(
            &mut packet,
            opcode::SET,
            &[0, 0, 0, 7, 0, 0, 0, 0],
            b"key",
            b"value",
            9,
            3,
        );
        for cut in 0..packet.len() {
            assert_eq!(frame_packet(&packet[..cut]), None, "cut at {cut}");
            assert_eq!(Header::parse(&packet[..cut]).is_some(), cut >= HEADER_LEN);
        }
        let p = frame_packet(&packet).expect("whole packet");
        assert_eq!(p.header.opcode, opcode::SET);
        assert_eq!(p.extras, &[0, 0, 0, 7, 0, 0, 0, 0]);
        assert_eq!(p.key, b"key");
        assert_eq!(p.value, b"value");
        assert_eq!(p.header.opaque, 9);
        assert_eq!(p.header.cas, 3);
        // Trailing bytes of the next packet are not part of this one.
        packet.extend_from_slice(&[0x80, 0x0a]);
        assert_eq!(frame_packet(&packet).unwrap().value, b"value");
    }

    #[test]
    fn lengths_that_do_not_add_up_are_refused() {
        let mut h = sample();
        h.body_len = 10; // extras 8 + key 3 > 10
        assert_eq!(h.value_len(), None);
        let mut out = Vec::new();
        h.write(&mut out);
        out.resize(64, 0);
        assert_eq!(frame_packet(&out), None);
    }

    #[test]
    fn quiet_opcodes_map_to_loud_ones() {
        assert_eq!(opcode::unquiet(opcode::GETKQ), (opcode::GETK, true));
        assert_eq!(opcode::unquiet(opcode::GATQ), (opcode::GAT, true));
        assert_eq!(opcode::unquiet(opcode::QUITQ), (opcode::QUIT, true));
        assert_eq!(opcode::unquiet(opcode::GET), (opcode::GET, false));
        assert_eq!(opcode::unquiet(0x1b), (0x1b, false));
    }

    #[test]
    fn status_messages_match_memcached() {
        assert_eq!(Status::UnknownCommand as u16, 0x81);
        assert_eq!(Status::UnknownCommand.message(), b"Unknown command");
        assert_eq!(Status::from_u16(0x82), Some(Status::OutOfMemory));
        assert_eq!(Status::from_u16(0x07), None);
        let mut out = Vec::new();
        write_response_header(&mut out, opcode::GET, Status::KeyNotFound, 0, 0, 9, 1, 0);
        assert_eq!(&out[..8], &[0x81, 0x00, 0, 0, 0, 0, 0, 1]);
    }
}
