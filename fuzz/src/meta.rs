//! Target on the meta protocol (`mg ms md ma me mn`): the server's framing
//! loop over meta lines, `parse_meta` itself on every line as each of the five
//! commands, and memcached's base64 for binary keys.

use protocol::meta::{
    base64_decode, base64_encode, parse_meta, MetaCommand, MetaError, MetaRequest, SetMode,
    MAX_BINARY_KEY_LEN, MAX_META_TOKENS, MAX_OPAQUE_TOKEN_LEN,
};
use protocol::text::{
    frame_line, parse_request, safe_strtol, safe_strtoul, safe_strtoull, LineFrame, Request,
    Tokens, MAX_KEY_LEN,
};

const COMMANDS: [MetaCommand; 5] = [
    MetaCommand::Get,
    MetaCommand::Set,
    MetaCommand::Delete,
    MetaCommand::Arithmetic,
    MetaCommand::Debug,
];

/// Every flag letter memcached's `_meta_flag_preparse` accepts.
const KNOWN_FLAGS: &[u8] = b"bNTRlhOPLkstcfvuqFCMJDI";

/// The meta parser on arbitrary bytes, three ways.
///
/// 1. The connection's loop (`crates/server/src/conn.rs`): `frame_line`, then
///    `parse_request`; an `ms` (or a storage command) also consumes its
///    `len + 2` data bytes. Offsets grow strictly and never pass the input.
/// 2. Every framed line, and the whole input as one line, through
///    `parse_meta` as each of `mg ms md ma me`.
/// 3. base64: decoding never writes past its buffer and decoded bytes
///    encode and decode back to themselves.
///
/// Invariants on each parsed request (see [`check_meta`]): key and flag
/// tokens lie inside the line and hold no space (nor `\n` or NUL in a framed
/// line); a data length is only given for `ms`, is at most `i32::MAX - 2`
/// (so `len + 2` cannot overflow), and is always given for an accepted `ms`;
/// an accepted request has a key of 1..=250 bytes (1..=186 decoded bytes when
/// base64), at most [`MAX_META_TOKENS`] tokens, only known, distinct flags,
/// and options that agree with its flag tokens. And nothing panics.
pub fn meta_parse(data: &[u8]) {
    connection_loop(data);
    let mut pos = 0;
    while let LineFrame::Line { end, next } = frame_line(&data[pos..]) {
        let line = &data[pos..pos + end];
        every_command(line, true);
        base64_checks(line);
        pos += next;
    }
    every_command(data, false);
    base64_checks(data);
}

/// The framing loop of `conn.rs`, reduced to what it consumes.
fn connection_loop(data: &[u8]) {
    let mut pos = 0;
    while pos < data.len() {
        let rest = &data[pos..];
        let (end, next) = match frame_line(rest) {
            LineFrame::Line { end, next } => (end, next),
            LineFrame::Incomplete | LineFrame::Close => break,
        };
        assert!(
            end < next && next <= rest.len(),
            "frame {end}/{next} of {}",
            rest.len()
        );
        let line = &rest[..end];
        assert!(
            !line.contains(&b'\n') && !line.contains(&0),
            "line {line:?}"
        );
        let block = match parse_request(line) {
            Request::Meta(m) => {
                let tokens = Tokens::new(line, 0);
                check_meta(line, &tokens, &m, true);
                m.data_len()
            }
            Request::MetaNoop => {
                assert_eq!(Tokens::new(line, 0).get(0), b"mn");
                None
            }
            Request::Store { len, .. } => Some(len),
            Request::Quit | Request::Close => return,
            _ => None,
        };
        // The line, then `len` data bytes and their "\r\n".
        let used = match block {
            Some(len) => next
                .checked_add(len)
                .and_then(|n| n.checked_add(2))
                .unwrap_or_else(|| panic!("data block of {len} bytes overflows")),
            None => next,
        };
        if used > rest.len() {
            // The connection waits for the rest of the block.
            break;
        }
        assert!(used > 0, "no progress at {pos}");
        pos += used;
    }
    assert!(pos <= data.len(), "consumed {pos} of {}", data.len());
}

/// `parse_meta` on one line as each meta command.
fn every_command(line: &[u8], framed: bool) {
    let tokens = Tokens::new(line, 0);
    for command in COMMANDS {
        match parse_meta(command, &tokens, line) {
            Request::Meta(m) => {
                assert_eq!(m.command, command);
                check_meta(line, &tokens, &m, framed);
            }
            Request::Invalid { .. } => assert!(
                command != MetaCommand::Debug && tokens.len() < 2,
                "{command:?} refused {line:?} outright"
            ),
            other => panic!("{command:?} parsed {line:?} as {other:?}"),
        }
    }
}

/// `s` lies inside `line`.
fn inside(line: &[u8], s: &[u8]) -> bool {
    let start = line.as_ptr() as usize;
    let p = s.as_ptr() as usize;
    s.is_empty() || (p >= start && p + s.len() <= start + line.len())
}

/// Checks one parsed meta request against the line and tokens it came from.
fn check_meta(line: &[u8], tokens: &Tokens<'_>, m: &MetaRequest<'_>, framed: bool) {
    assert!(
        std::ptr::eq(m.line, line),
        "request line is not the input line"
    );
    let key = m.key;
    assert_eq!(key, tokens.get(1), "key is not the second token");
    assert!(inside(line, key), "key outside its line");
    assert!(!key.contains(&b' '), "key {key:?} holds a space");
    if framed {
        assert!(
            !key.contains(&b'\n') && !key.contains(&0),
            "key {key:?} holds a newline or NUL"
        );
    }
    let flags: Vec<&[u8]> = m.flags().collect();
    for t in &flags {
        assert!(
            !t.is_empty() && !t.contains(&b' ') && inside(line, t),
            "flag token {t:?}"
        );
    }
    if let Some(len) = m.data_len() {
        assert_eq!(m.command, MetaCommand::Set, "data length for {m:?}");
        assert!(len <= i32::MAX as usize - 2, "data length {len}");
    }
    if m.set_mode == SetMode::Cas {
        assert!(m.options.cas.is_some(), "CAS mode without a C flag");
    }
    // `me` looks at its key and second flag only.
    let ntokens = tokens.len() + 1;
    if key.len() > MAX_KEY_LEN || (m.command != MetaCommand::Debug && ntokens > MAX_META_TOKENS) {
        assert!(m.error.is_some(), "{m:?} accepted");
    }
    match m.error {
        None => check_accepted(tokens, m, &flags),
        Some(e) => check_refused(m.command, e),
    }
}

/// The errors each command can give.
fn check_refused(command: MetaCommand, e: MetaError) {
    use MetaError as E;
    let allowed = match command {
        // `md` and `ma` fold every flag error into one message.
        MetaCommand::Delete => matches!(
            e,
            E::BadFormat | E::OptionsTooLong | E::InvalidOrDuplicate | E::OpaqueTooLong
        ),
        MetaCommand::Arithmetic => matches!(
            e,
            E::BadFormat | E::OptionsTooLong | E::InvalidOrDuplicate | E::ArithMode
        ),
        MetaCommand::Debug => e == E::BadFormat,
        MetaCommand::Get => !matches!(
            e,
            E::OptionsTooLong
                | E::InvalidOrDuplicate
                | E::SetMode
                | E::ArithMode
                | E::OpaqueTooLong
        ),
        MetaCommand::Set => !matches!(
            e,
            E::GetOptionsTooLong | E::InvalidOrDuplicate | E::ArithMode
        ),
    };
    assert!(allowed, "{command:?} gave {e:?}");
}

/// An accepted request: the server acts on it, so its key and options must
/// be sound.
fn check_accepted(tokens: &Tokens<'_>, m: &MetaRequest<'_>, flags: &[&[u8]]) {
    let o = m.options;
    assert!(
        !m.key.is_empty() && m.key.len() <= MAX_KEY_LEN,
        "accepted a key of {} bytes",
        m.key.len()
    );
    let mut buf = [0u8; MAX_BINARY_KEY_LEN];
    let decoded = m.decoded_key(&mut buf);
    if o.base64 {
        assert!(
            (1..=MAX_BINARY_KEY_LEN).contains(&decoded.len()),
            "base64 key {:?} decodes to {} bytes",
            m.key,
            decoded.len()
        );
    } else {
        assert_eq!(decoded, m.key);
    }
    assert_eq!(
        m.data_len().is_some(),
        m.command == MetaCommand::Set,
        "data length {:?} for {:?}",
        m.data_len(),
        m.command
    );
    if m.command == MetaCommand::Debug {
        assert!(flags.is_empty(), "me with flags {flags:?}");
        let b = tokens.len() >= 3 && tokens.get(2) == b"b";
        assert_eq!(o.base64, b, "me base64 flag");
        return;
    }

    assert!(
        tokens.rest().is_none(),
        "accepted with untokenized text: {m:?}"
    );
    assert!(
        tokens.len() < MAX_META_TOKENS,
        "accepted {} tokens",
        tokens.len()
    );
    // The flags walked again are exactly the tokens after the key (and the
    // length, for `ms`), known and distinct.
    let first = if m.command == MetaCommand::Set { 3 } else { 2 };
    let expected: Vec<&[u8]> = (first..tokens.len()).map(|i| tokens.get(i)).collect();
    assert_eq!(flags, &expected[..], "flag tokens");
    let mut seen = [false; 256];
    for t in flags {
        let f = t[0];
        assert!(KNOWN_FLAGS.contains(&f), "unknown flag {t:?} accepted");
        assert!(!seen[usize::from(f)], "duplicate flag {t:?} accepted");
        seen[usize::from(f)] = true;
    }
    let find = |f: u8| flags.iter().find(|t| t[0] == f).map(|t| &t[1..]);
    let has = |f: u8| find(f).is_some();
    assert_eq!(o.base64, has(b'b'), "b");
    assert_eq!(o.value, has(b'v'), "v");
    assert_eq!(o.quiet, has(b'q'), "q");
    assert_eq!(o.no_update, has(b'u'), "u");
    assert_eq!(o.invalidate, has(b'I'), "I");
    assert_eq!(
        o.locked,
        b"hlTNR".iter().any(|&f| has(f)),
        "locked for {flags:?}"
    );
    assert_eq!(o.ttl, find(b'T').map(|a| safe_strtol(a).unwrap()), "T");
    assert_eq!(o.vivify, find(b'N').map(|a| safe_strtol(a).unwrap()), "N");
    assert_eq!(o.recache, find(b'R').map(|a| safe_strtol(a).unwrap()), "R");
    assert_eq!(o.cas, find(b'C').map(|a| safe_strtoull(a).unwrap()), "C");
    assert_eq!(
        o.client_flags,
        find(b'F').map_or(0, |a| safe_strtoul(a).unwrap()),
        "F"
    );
    assert_eq!(
        o.initial,
        find(b'J').map_or(0, |a| safe_strtoull(a).unwrap()),
        "J"
    );
    assert_eq!(
        o.delta,
        find(b'D').map_or(1, |a| safe_strtoull(a).unwrap()),
        "D"
    );
    match find(b'M') {
        Some(arg) => {
            assert_eq!(arg.len(), 1, "mode token M{arg:?} accepted");
            assert_eq!(o.mode, Some(arg[0]));
        }
        None => assert_eq!(o.mode, None),
    }
    let long_opaque = find(b'O').is_some_and(|a| a.len() + 1 > MAX_OPAQUE_TOKEN_LEN);
    match m.command {
        MetaCommand::Set => {
            assert!(!long_opaque, "ms accepted a long opaque");
            let cas = o.cas.is_some();
            let mode = match o.mode {
                None | Some(b'S') if cas => SetMode::Cas,
                None | Some(b'S') => SetMode::Set,
                Some(b'E') => SetMode::Add,
                Some(b'A') => SetMode::Append,
                Some(b'P') => SetMode::Prepend,
                Some(b'R') if cas => SetMode::Cas,
                Some(b'R') => SetMode::Replace,
                Some(other) => panic!("ms accepted mode {other:?}"),
            };
            assert_eq!(m.set_mode, mode, "ms mode");
        }
        MetaCommand::Delete => assert!(!long_opaque, "md accepted a long opaque"),
        MetaCommand::Arithmetic => match o.mode {
            None | Some(b'I' | b'+') => assert!(m.incr, "ma mode"),
            Some(b'D' | b'-') => assert!(!m.incr, "ma mode"),
            Some(other) => panic!("ma accepted mode {other:?}"),
        },
        MetaCommand::Get | MetaCommand::Debug => {}
    }
}

/// memcached's base64 alphabet, `=` included (the decoder skips the rest).
fn is_base64(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=')
}

/// base64 on arbitrary text, into a full and a short buffer, and a round trip.
fn base64_checks(text: &[u8]) {
    let mut full = [0u8; MAX_BINARY_KEY_LEN];
    let count = text.iter().filter(|&&b| is_base64(b)).count();
    let decoded = base64_decode(text, &mut full);
    if let Some(n) = decoded {
        assert!(
            n >= 1 && n <= count / 4 * 3,
            "{n} bytes from {count} base64 bytes"
        );
        round_trip(&full[..n]);
    }
    // A buffer too short for `count` must be refused, never overrun.
    let short_len = text.len() % (MAX_BINARY_KEY_LEN + 1);
    let mut short = [0u8; MAX_BINARY_KEY_LEN];
    let got = base64_decode(text, &mut short[..short_len]);
    if count / 4 * 3 <= short_len {
        assert_eq!(got, decoded, "short buffer of {short_len}");
        if let Some(n) = got {
            assert_eq!(short[..n], full[..n]);
        }
    } else {
        assert_eq!(got, None, "{count} base64 bytes into {short_len}");
    }
    round_trip(&text[..text.len().min(MAX_BINARY_KEY_LEN)]);
}

/// Encoding then decoding gives the bytes back (any key up to 186 bytes).
fn round_trip(bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    let mut encoded = Vec::new();
    base64_encode(bytes, &mut encoded);
    assert!(
        encoded.len() <= MAX_KEY_LEN,
        "{} encoded bytes",
        encoded.len()
    );
    let mut buf = [0u8; MAX_BINARY_KEY_LEN];
    let n = base64_decode(&encoded, &mut buf)
        .unwrap_or_else(|| panic!("{encoded:?} (from {bytes:?}) does not decode"));
    assert_eq!(&buf[..n], bytes, "base64 round trip of {encoded:?}");
}
