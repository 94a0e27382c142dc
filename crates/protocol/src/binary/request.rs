//! Server side decoding of a binary request: which command its header names,
//! the fields its extras carry, and memcached's checks of each opcode's
//! extras, key and body lengths (`proto_bin.c`'s `dispatch_bin_command`).

use super::{opcode, Header, HEADER_LEN, MAX_KEY_LEN, REQUEST_MAGIC};

/// What [`decode_request`] found at the start of the input, in the order
/// memcached finds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decode<'a> {
    /// Fewer bytes than the header, or than the header, extras and key it
    /// announces: read more.
    Incomplete,
    /// The first byte is not [`REQUEST_MAGIC`], known as soon as the header
    /// has arrived (memcached closes the connection).
    BadMagic,
    /// The header's body length is shorter than its extras and key. memcached
    /// answers `Unknown command` and closes, after reading the extras and key
    /// ([`Header::head_len`] bytes); the command is never looked at, not even
    /// for authentication.
    BodyTooShort(Header),
    /// A request whose header, extras and key have arrived.
    Request(BinaryRequest<'a>),
}

/// A binary request whose header, extras and key have arrived, with its
/// command decoded. Its value may not have arrived yet: see [`decode_request`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BinaryRequest<'a> {
    pub header: Header,
    pub extras: &'a [u8],
    pub key: &'a [u8],
    /// The command, with its fields, or why it is refused.
    pub command: Command,
    /// A quiet opcode (`GETQ`, `SETQ`, ...): the success reply is suppressed
    /// (for gets, the miss reply too), errors are not.
    pub quiet: bool,
    /// The input the request was decoded from, for the value.
    input: &'a [u8],
}

/// The command of a request whose lengths are those its opcode requires,
/// with the fields of its extras (big-endian on the wire); or why it is
/// refused. Quiet opcodes decode as their loud ones, with
/// [`BinaryRequest::quiet`] set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// `VERSION`: no extras, key or value.
    Version,
    /// `FLUSH`: no key or value; `exptime` from the optional 4 bytes of
    /// extras, 0 without them.
    Flush { exptime: u32 },
    /// `NOOP`: no extras, key or value.
    Noop,
    /// `SET`, `ADD`, `REPLACE`: 8 bytes of extras (flags, exptime) and a key;
    /// the value is the rest of the body.
    Store {
        mode: StoreKind,
        flags: u32,
        exptime: u32,
    },
    /// `APPEND` (or `PREPEND`): a key, no extras; the value is the rest of the
    /// body.
    Concat { append: bool },
    /// `GET` (or `GETK`, which returns the key): a key and nothing else.
    Get { with_key: bool },
    /// `TOUCH`: 4 bytes of extras (the new exptime) and a key.
    Touch { exptime: u32 },
    /// `GAT` (or `GATK`, which returns the key): 4 bytes of extras (the new
    /// exptime) and a key.
    Gat { with_key: bool, exptime: u32 },
    /// `DELETE`: a key and nothing else.
    Delete,
    /// `INCREMENT` (or `DECREMENT`): 20 bytes of extras and a key, no value.
    /// An `expiration` of `0xffffffff` means: do not create a missing item.
    Arith {
        incr: bool,
        delta: u64,
        initial: u64,
        expiration: u32,
    },
    /// `STAT`: no extras; the key, if any, names the group.
    Stat,
    /// `QUIT`: no extras, key or value.
    Quit,
    /// `SASL_LIST_MECHS`: no extras, key or value.
    SaslListMechs,
    /// `SASL_AUTH`: the mechanism as the key, the credentials as the value.
    SaslAuth,
    /// `SASL_STEP`: as `SASL_AUTH`.
    SaslStep,
    /// A known opcode whose lengths are not the ones it requires, or a key
    /// longer than [`MAX_KEY_LEN`] whatever the opcode: memcached answers
    /// `Invalid arguments` and closes.
    Malformed,
    /// An opcode memcached does not know: it answers `Unknown command` and
    /// swallows `body length` bytes counted from after the extras and key.
    Unknown,
}

/// Which storage command a [`Command::Store`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    Set,
    Add,
    Replace,
}

/// Decode the binary request at the start of `input`.
///
/// memcached reads a request in two parts, and this decodes the first:
///
/// ```text
///  [ 24-byte header | extras | key ]  needed here: decoded, checked, classified
///  [ value ... ]                      not needed here: see BinaryRequest::value
/// ```
///
/// The value of a storage or SASL command can be as long as the header says,
/// up to 4 GiB. The server decides from the head alone whether it can take
/// the value at all, and refuses one that cannot fit before reading it
/// (swallowing it as it arrives) instead of buffering it first. So this
/// answers as soon as the head is complete, and the caller asks
/// [`BinaryRequest::value`] once it has decided to read the value. Commands
/// that carry no value never read one: bytes a header counts past its key are
/// the next request, exactly as memcached parses them.
///
/// Checks come in memcached's order: the header, its magic byte, the head,
/// the body length against extras and key ([`Decode::BodyTooShort`]). Then
/// the key length and each opcode's shape decide [`BinaryRequest::command`];
/// a server that authenticates (SASL) checks
/// [`BinaryRequest::allowed_unauthenticated`] before it looks at the
/// command, as memcached does.
#[must_use]
pub fn decode_request(input: &[u8]) -> Decode<'_> {
    let Some(header) = Header::parse(input) else {
        return Decode::Incomplete;
    };
    if header.magic != REQUEST_MAGIC {
        return Decode::BadMagic;
    }
    let head_len = header.head_len();
    if input.len() < head_len {
        return Decode::Incomplete;
    }
    if header.value_len().is_none() {
        return Decode::BodyTooShort(header);
    }
    let key_at = HEADER_LEN + usize::from(header.extras_len);
    let extras = &input[HEADER_LEN..key_at];
    let key = &input[key_at..head_len];
    let (op, quiet) = opcode::unquiet(header.opcode);
    Decode::Request(BinaryRequest {
        header,
        extras,
        key,
        command: classify(op, &header, extras),
        quiet,
        input,
    })
}

/// The command of loud opcode `op`, with the length checks memcached makes
/// before it dispatches (extras, key and body lengths, per opcode).
fn classify(op: u8, header: &Header, extras: &[u8]) -> Command {
    let key_len = usize::from(header.key_len);
    let ext_len = usize::from(header.extras_len);
    let body_len = header.body_len as usize;
    if key_len > MAX_KEY_LEN {
        return Command::Malformed;
    }
    match op {
        opcode::VERSION if ext_len == 0 && key_len == 0 && body_len == 0 => Command::Version,
        opcode::FLUSH if key_len == 0 && body_len == ext_len && (ext_len == 0 || ext_len == 4) => {
            Command::Flush {
                exptime: if ext_len == 4 { be_u32(extras, 0) } else { 0 },
            }
        }
        opcode::NOOP if ext_len == 0 && key_len == 0 && body_len == 0 => Command::Noop,
        opcode::SET | opcode::ADD | opcode::REPLACE if ext_len == 8 && key_len != 0 => {
            Command::Store {
                mode: match op {
                    opcode::SET => StoreKind::Set,
                    opcode::ADD => StoreKind::Add,
                    _ => StoreKind::Replace,
                },
                flags: be_u32(extras, 0),
                exptime: be_u32(extras, 4),
            }
        }
        opcode::APPEND | opcode::PREPEND if ext_len == 0 && key_len != 0 => Command::Concat {
            append: op == opcode::APPEND,
        },
        opcode::GET | opcode::GETK if ext_len == 0 && body_len == key_len && key_len > 0 => {
            Command::Get {
                with_key: op == opcode::GETK,
            }
        }
        opcode::TOUCH if ext_len == 4 && key_len != 0 => Command::Touch {
            exptime: be_u32(extras, 0),
        },
        opcode::GAT | opcode::GATK if ext_len == 4 && key_len != 0 => Command::Gat {
            with_key: op == opcode::GATK,
            exptime: be_u32(extras, 0),
        },
        opcode::DELETE if key_len > 0 && ext_len == 0 && body_len == key_len => Command::Delete,
        opcode::INCREMENT | opcode::DECREMENT
            if key_len > 0 && ext_len == 20 && body_len == key_len + 20 =>
        {
            Command::Arith {
                incr: op == opcode::INCREMENT,
                delta: be_u64(extras, 0),
                initial: be_u64(extras, 8),
                expiration: be_u32(extras, 16),
            }
        }
        opcode::STAT if ext_len == 0 => Command::Stat,
        opcode::QUIT if key_len == 0 && ext_len == 0 && body_len == 0 => Command::Quit,
        opcode::SASL_LIST_MECHS if ext_len == 0 && key_len == 0 && body_len == 0 => {
            Command::SaslListMechs
        }
        opcode::SASL_AUTH if ext_len == 0 && key_len != 0 => Command::SaslAuth,
        opcode::SASL_STEP if ext_len == 0 && key_len != 0 => Command::SaslStep,
        opcode::VERSION
        | opcode::FLUSH
        | opcode::NOOP
        | opcode::SET
        | opcode::ADD
        | opcode::REPLACE
        | opcode::APPEND
        | opcode::PREPEND
        | opcode::GET
        | opcode::GETK
        | opcode::TOUCH
        | opcode::GAT
        | opcode::GATK
        | opcode::DELETE
        | opcode::INCREMENT
        | opcode::DECREMENT
        | opcode::STAT
        | opcode::QUIT
        | opcode::SASL_LIST_MECHS
        | opcode::SASL_AUTH
        | opcode::SASL_STEP => Command::Malformed,
        _ => Command::Unknown,
    }
}

/// The big-endian `u32` at `extras[at..]`, which the shape checks have sized.
fn be_u32(extras: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([extras[at], extras[at + 1], extras[at + 2], extras[at + 3]])
}

/// The big-endian `u64` at `extras[at..]`, as [`be_u32`].
fn be_u64(extras: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&extras[at..at + 8]);
    u64::from_be_bytes(b)
}

impl<'a> BinaryRequest<'a> {
    /// Bytes of header, extras and key: what a request without a value uses.
    #[must_use]
    pub fn head_len(&self) -> usize {
        self.header.head_len()
    }

    /// Bytes of value the header announces (body less extras and key).
    #[must_use]
    pub fn value_len(&self) -> usize {
        // A decoded request's body holds its extras and key (`BodyTooShort`
        // otherwise).
        self.header.value_len().unwrap_or(0)
    }

    /// Bytes of the whole packet, value included.
    #[must_use]
    pub fn packet_len(&self) -> usize {
        self.header.packet_len()
    }

    /// The value, once all of it has arrived; `None` until then. Only the
    /// storage and SASL commands read one.
    #[must_use]
    pub fn value(&self) -> Option<&'a [u8]> {
        self.input.get(self.head_len()..self.packet_len())
    }

    /// The key and every byte after it in the input. memcached matches the
    /// `STAT` groups `reset`, `settings` and `detail` (and `detail`'s argument)
    /// with `strncmp` against its read buffer, so the bytes after the key take
    /// part in the match.
    #[must_use]
    pub fn key_and_rest(&self) -> &'a [u8] {
        &self.input[HEADER_LEN + self.extras.len()..]
    }

    /// Whether a connection that has not authenticated may send this request
    /// when the server requires SASL: the SASL commands themselves and
    /// `VERSION`, whatever their lengths (memcached's `authenticated()`).
    #[must_use]
    pub fn allowed_unauthenticated(&self) -> bool {
        matches!(
            self.header.opcode,
            opcode::SASL_LIST_MECHS | opcode::SASL_AUTH | opcode::SASL_STEP | opcode::VERSION
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binary::write_request;
    use opcode as op;

    /// A request packet as a client writes it.
    fn packet(opcode: u8, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        write_request(&mut out, opcode, extras, key, value, 0x0102_0304, 7);
        out
    }

    /// A request header with any lengths, followed by `rest`.
    fn raw(opcode: u8, extras_len: u8, key_len: u16, body_len: u32, rest: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        Header {
            magic: REQUEST_MAGIC,
            opcode,
            key_len,
            extras_len,
            body_len,
            ..Header::default()
        }
        .write(&mut out);
        out.extend_from_slice(rest);
        out
    }

    fn request(input: &[u8]) -> BinaryRequest<'_> {
        match decode_request(input) {
            Decode::Request(r) => r,
            other => panic!("{input:?} decoded as {other:?}"),
        }
    }

    /// The command and quiet flag of a packet.
    fn command(opcode: u8, extras: &[u8], key: &[u8], value: &[u8]) -> (Command, bool) {
        let input = packet(opcode, extras, key, value);
        let r = request(&input);
        (r.command, r.quiet)
    }

    /// A packet's opcode, extras, key and value.
    type Shape<'a> = (u8, &'a [u8], &'a [u8], &'a [u8]);

    const FLAGS_EXPTIME: [u8; 8] = [0x01, 0x02, 0x03, 0x04, 0x0a, 0x0b, 0x0c, 0x0d];

    #[test]
    fn commands_without_a_key() {
        assert_eq!(
            command(op::VERSION, b"", b"", b""),
            (Command::Version, false)
        );
        assert_eq!(command(op::NOOP, b"", b"", b""), (Command::Noop, false));
        assert_eq!(command(op::QUIT, b"", b"", b""), (Command::Quit, false));
        assert_eq!(command(op::QUITQ, b"", b"", b""), (Command::Quit, true));
        assert_eq!(
            command(op::SASL_LIST_MECHS, b"", b"", b""),
            (Command::SaslListMechs, false)
        );
        assert_eq!(
            command(op::FLUSH, b"", b"", b""),
            (Command::Flush { exptime: 0 }, false)
        );
        assert_eq!(
            command(op::FLUSHQ, &[0, 0, 0x01, 0x2c], b"", b""),
            (Command::Flush { exptime: 300 }, true)
        );
        assert_eq!(command(op::STAT, b"", b"", b""), (Command::Stat, false));
        assert_eq!(
            command(op::STAT, b"", b"items", b""),
            (Command::Stat, false)
        );
    }

    #[test]
    fn storage_commands_carry_big_endian_extras() {
        let store = |mode| Command::Store {
            mode,
            flags: 0x0102_0304,
            exptime: 0x0a0b_0c0d,
        };
        for (opcode, mode, quiet) in [
            (op::SET, StoreKind::Set, false),
            (op::SETQ, StoreKind::Set, true),
            (op::ADD, StoreKind::Add, false),
            (op::ADDQ, StoreKind::Add, true),
            (op::REPLACE, StoreKind::Replace, false),
            (op::REPLACEQ, StoreKind::Replace, true),
        ] {
            assert_eq!(
                command(opcode, &FLAGS_EXPTIME, b"k", b"value"),
                (store(mode), quiet)
            );
            // An empty value is a value.
            assert_eq!(
                command(opcode, &FLAGS_EXPTIME, b"k", b""),
                (store(mode), quiet)
            );
        }
        for (opcode, append, quiet) in [
            (op::APPEND, true, false),
            (op::APPENDQ, true, true),
            (op::PREPEND, false, false),
            (op::PREPENDQ, false, true),
        ] {
            assert_eq!(
                command(opcode, b"", b"k", b"tail"),
                (Command::Concat { append }, quiet)
            );
        }
    }

    #[test]
    fn retrieval_and_key_commands() {
        for (opcode, with_key, quiet) in [
            (op::GET, false, false),
            (op::GETQ, false, true),
            (op::GETK, true, false),
            (op::GETKQ, true, true),
        ] {
            assert_eq!(
                command(opcode, b"", b"k", b""),
                (Command::Get { with_key }, quiet)
            );
        }
        let exptime = [0x80, 0, 0, 0x01];
        assert_eq!(
            command(op::TOUCH, &exptime, b"k", b""),
            (
                Command::Touch {
                    exptime: 0x8000_0001
                },
                false
            )
        );
        for (opcode, with_key, quiet) in [
            (op::GAT, false, false),
            (op::GATQ, false, true),
            (op::GATK, true, false),
            (op::GATKQ, true, true),
        ] {
            assert_eq!(
                command(opcode, &exptime, b"k", b""),
                (
                    Command::Gat {
                        with_key,
                        exptime: 0x8000_0001
                    },
                    quiet
                )
            );
        }
        assert_eq!(
            command(op::DELETE, b"", b"k", b""),
            (Command::Delete, false)
        );
        assert_eq!(
            command(op::DELETEQ, b"", b"k", b""),
            (Command::Delete, true)
        );
        let mut extras = Vec::new();
        extras.extend_from_slice(&0x0102_0304_0506_0708u64.to_be_bytes());
        extras.extend_from_slice(&0x1112_1314_1516_1718u64.to_be_bytes());
        extras.extend_from_slice(&u32::MAX.to_be_bytes());
        for (opcode, incr, quiet) in [
            (op::INCREMENT, true, false),
            (op::INCREMENTQ, true, true),
            (op::DECREMENT, false, false),
            (op::DECREMENTQ, false, true),
        ] {
            assert_eq!(
                command(opcode, &extras, b"n", b""),
                (
                    Command::Arith {
                        incr,
                        delta: 0x0102_0304_0506_0708,
                        initial: 0x1112_1314_1516_1718,
                        expiration: u32::MAX,
                    },
                    quiet
                )
            );
        }
    }

    #[test]
    fn sasl_commands() {
        assert_eq!(
            command(op::SASL_AUTH, b"", b"PLAIN", b"\0u\0p"),
            (Command::SaslAuth, false)
        );
        assert_eq!(
            command(op::SASL_STEP, b"", b"PLAIN", b""),
            (Command::SaslStep, false)
        );
        for opcode in [
            op::SASL_LIST_MECHS,
            op::SASL_AUTH,
            op::SASL_STEP,
            op::VERSION,
        ] {
            // Even with lengths that are wrong for it.
            let input = packet(opcode, &[0; 3], b"x", b"");
            assert!(request(&input).allowed_unauthenticated(), "{opcode:#x}");
        }
        for opcode in [op::GET, op::GETQ, op::SET, op::NOOP, op::QUIT, 0x1b] {
            let input = packet(opcode, b"", b"k", b"");
            assert!(!request(&input).allowed_unauthenticated(), "{opcode:#x}");
        }
    }

    #[test]
    fn wrong_lengths_are_malformed() {
        let e4 = [0u8; 4];
        let e8 = [0u8; 8];
        let e20 = [0u8; 20];
        let cases: &[Shape] = &[
            (op::VERSION, b"", b"k", b""),
            (op::VERSION, b"", b"", b"v"),
            (op::VERSION, &e4, b"", b""),
            (op::FLUSH, &e8, b"", b""),
            (op::FLUSH, b"", b"k", b""),
            (op::FLUSH, &e4, b"", b"v"),
            (op::FLUSHQ, b"", b"", b"v"),
            (op::NOOP, b"", b"", b"v"),
            (op::NOOP, b"", b"k", b""),
            (op::SET, &e4, b"k", b"v"),
            (op::SET, &e8, b"", b"v"),
            (op::SETQ, b"", b"k", b"v"),
            (op::ADD, &e20, b"k", b""),
            (op::REPLACE, &e8, b"", b""),
            (op::APPEND, &e4, b"k", b"v"),
            (op::PREPEND, b"", b"", b"v"),
            (op::PREPENDQ, &e8, b"k", b"v"),
            (op::GET, b"", b"", b""),
            (op::GET, b"", b"k", b"v"),
            (op::GETQ, &e4, b"k", b""),
            (op::GETK, b"", b"k", b"v"),
            (op::GETKQ, b"", b"", b""),
            (op::TOUCH, b"", b"k", b""),
            (op::TOUCH, &e4, b"", b""),
            (op::GAT, &e8, b"k", b""),
            (op::GATQ, &e4, b"", b""),
            (op::GATK, b"", b"k", b""),
            (op::DELETE, b"", b"k", b"v"),
            (op::DELETE, &e4, b"k", b""),
            (op::DELETEQ, b"", b"", b""),
            (op::INCREMENT, &e8, b"k", b""),
            (op::INCREMENT, &e20, b"", b""),
            (op::DECREMENT, &e20, b"k", b"1"),
            (op::DECREMENTQ, &e4, b"k", b""),
            (op::STAT, &e4, b"", b""),
            (op::QUIT, b"", b"k", b""),
            (op::QUITQ, b"", b"", b"v"),
            (op::SASL_LIST_MECHS, b"", b"k", b""),
            (op::SASL_LIST_MECHS, b"", b"", b"v"),
            (op::SASL_AUTH, b"", b"", b"v"),
            (op::SASL_AUTH, &e4, b"PLAIN", b""),
            (op::SASL_STEP, b"", b"", b""),
        ];
        for &(opcode, extras, key, value) in cases {
            assert_eq!(
                command(opcode, extras, key, value).0,
                Command::Malformed,
                "{opcode:#x} extras {} key {key:?} value {value:?}",
                extras.len()
            );
        }
    }

    #[test]
    fn commands_without_a_value_ignore_what_the_body_counts_past_the_key() {
        // The shape checks of these opcodes do not look at the body length:
        // what it counts past the key is parsed as the next request.
        assert_eq!(
            command(op::TOUCH, &[0, 0, 0, 9], b"k", b"xx").0,
            Command::Touch { exptime: 9 }
        );
        assert_eq!(command(op::STAT, b"", b"", b"xx").0, Command::Stat);
        let input = packet(op::GAT, &[0; 4], b"k", b"xx");
        assert_eq!(request(&input).head_len(), HEADER_LEN + 5);
    }

    #[test]
    fn long_keys_are_malformed_before_the_opcode_is_looked_at() {
        let key = [b'k'; MAX_KEY_LEN + 1];
        assert_eq!(command(op::GET, b"", &key, b"").0, Command::Malformed);
        assert_eq!(command(op::STAT, b"", &key, b"").0, Command::Malformed);
        assert_eq!(command(0x1b, b"", &key, b"").0, Command::Malformed);
        assert_eq!(
            command(op::GET, b"", &key[..MAX_KEY_LEN], b"").0,
            Command::Get { with_key: false }
        );
    }

    #[test]
    fn unknown_opcodes() {
        for opcode in [0x1b, 0x1f, 0x25, 0x30, 0x7f, 0xff] {
            assert_eq!(
                command(opcode, &[1, 2], b"k", b"value"),
                (Command::Unknown, false),
                "{opcode:#x}"
            );
        }
    }

    #[test]
    fn decodes_once_header_extras_and_key_have_arrived() {
        let input = packet(op::SET, &FLAGS_EXPTIME, b"key", b"value");
        let head = HEADER_LEN + 8 + 3;
        for cut in 0..head {
            assert_eq!(
                decode_request(&input[..cut]),
                Decode::Incomplete,
                "cut {cut}"
            );
        }
        for cut in head..=input.len() {
            let r = request(&input[..cut]);
            assert_eq!(r.extras, &FLAGS_EXPTIME);
            assert_eq!(r.key, b"key");
            assert_eq!(
                (r.head_len(), r.value_len(), r.packet_len()),
                (head, 5, head + 5)
            );
            // The value only once all of it is there.
            let want = (cut == input.len()).then_some(&b"value"[..]);
            assert_eq!(r.value(), want, "cut {cut}");
        }
        let r = request(&input);
        assert_eq!((r.header.opaque, r.header.cas), (0x0102_0304, 7));
        assert_eq!(r.header.opcode, op::SET);
        // The next request's bytes are not part of this one.
        let mut two = input.clone();
        two.extend_from_slice(&packet(op::NOOP, b"", b"", b""));
        assert_eq!(request(&two).value(), Some(&b"value"[..]));
        assert_eq!(request(&two).key_and_rest(), &two[HEADER_LEN + 8..]);
    }

    #[test]
    fn bad_magic_is_known_from_the_header_alone() {
        let mut input = packet(op::GET, b"", b"key", b"");
        input[0] = 0x81;
        for cut in 0..HEADER_LEN {
            assert_eq!(decode_request(&input[..cut]), Decode::Incomplete);
        }
        for cut in HEADER_LEN..=input.len() {
            assert_eq!(decode_request(&input[..cut]), Decode::BadMagic);
        }
    }

    #[test]
    fn a_body_shorter_than_extras_and_key_is_refused_once_they_have_arrived() {
        // Extras 4 + key 3 = 7, body 6.
        let input = raw(op::TOUCH, 4, 3, 6, &[0, 0, 0, 1, b'k', b'e', b'y']);
        for cut in 0..input.len() {
            assert_eq!(decode_request(&input[..cut]), Decode::Incomplete);
        }
        let Decode::BodyTooShort(header) = decode_request(&input) else {
            panic!("{:?}", decode_request(&input));
        };
        assert_eq!((header.opcode, header.head_len()), (op::TOUCH, input.len()));
        // Before the key length and the opcode are looked at.
        let long = raw(0x1b, 0, 300, 0, &[b'k'; 300]);
        assert!(matches!(decode_request(&long), Decode::BodyTooShort(_)));
        // A body exactly as long as extras and key is fine.
        let input = raw(op::TOUCH, 4, 3, 7, &[0, 0, 0, 1, b'k', b'e', b'y']);
        assert_eq!(request(&input).command, Command::Touch { exptime: 1 });
    }
}
