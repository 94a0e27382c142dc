//! Server side of memcached's meta protocol (`mg ms md ma me`), as memcached
//! 1.6.18's `proto_text.c` parses it.
//!
//! ```text
//!   mg <key> <flag>*                       flags: one letter, maybe a value
//!   ms <key> <datalen> <flag>*\r\n<data>\r\n
//!   md <key> <flag>*      ma <key> <flag>*      me <key> [b]
//! ```
//!
//! Parsing checks everything memcached checks before it touches the cache
//! (`_meta_flag_preparse`): duplicate and unknown flags, numbers, the
//! base64 key, the `M` mode. The reply it would give is kept in
//! [`MetaRequest::error`]. The return flags (`k`, `O`, `c`, `t`, ...) are
//! emitted later in the order the client sent them, so the request keeps the
//! offset of its flag tokens and [`MetaRequest::flags`] walks them again.
//!
//! Two errors are *not* decided here because memcached reports them only
//! after it has acted on the cache: an opaque over 31 bytes in `mg` and `ma`
//! (the executor stops at that token, as memcached does).
//!
//! The parsed form, [`MetaRequest`], lives with the other request types in
//! [`crate::request`]; it and memcached's base64 are re-exported here.

pub use crate::base64::{base64_decode, base64_encode};
pub use crate::request::meta::{
    MetaCommand, MetaError, MetaOptions, MetaRequest, SetMode, MAX_BINARY_KEY_LEN,
};

use crate::lex::{safe_strtol, safe_strtoul, safe_strtoull, Tokens};
use crate::request::{ErrorReply, Request, MAX_KEY_LEN};

/// memcached's `MFLAG_MAX_OPT_LENGTH`: more tokens than this (counting the
/// command, the key and memcached's terminal token) are refused.
pub const MAX_META_TOKENS: usize = 20;
/// memcached's `MFLAG_MAX_OPAQUE_LENGTH`: longest `O` token, letter included.
pub const MAX_OPAQUE_TOKEN_LEN: usize = 32;

/// Parse a meta command line whose command token is `command`.
#[must_use]
pub fn parse_meta<'a>(command: MetaCommand, tokens: &Tokens<'a>, line: &'a [u8]) -> Request<'a> {
    // memcached's ntokens counts a terminal token.
    let ntokens = tokens.len() + 1;
    if command != MetaCommand::Debug && ntokens < 3 {
        return Request::Invalid {
            reply: ErrorReply::Error,
            noreply: false,
        };
    }
    let key = tokens.get(1);
    let mut req = MetaRequest {
        command,
        line,
        key,
        options: MetaOptions {
            delta: 1,
            ..MetaOptions::default()
        },
        error: None,
        data_len: None,
        set_mode: SetMode::Set,
        incr: true,
        flags_at: line.len(),
    };
    if command == MetaCommand::Debug {
        parse_debug(&mut req, tokens);
        return Request::Meta(req);
    }
    if key.len() > MAX_KEY_LEN {
        req.error = Some(MetaError::BadFormat);
        return Request::Meta(req);
    }
    let first_flag = if command == MetaCommand::Set { 3 } else { 2 };
    if command == MetaCommand::Set && ntokens == 3 {
        req.error = Some(MetaError::BadFormat);
        return Request::Meta(req);
    }
    if ntokens > MAX_META_TOKENS {
        req.error = Some(if command == MetaCommand::Get {
            MetaError::GetOptionsTooLong
        } else {
            MetaError::OptionsTooLong
        });
        return Request::Meta(req);
    }
    if command == MetaCommand::Set {
        match safe_strtol(tokens.get(2)) {
            Some(vlen) if (0..=i32::MAX - 2).contains(&vlen) => req.data_len = Some(vlen as usize),
            _ => {
                req.error = Some(MetaError::BadFormat);
                return Request::Meta(req);
            }
        }
    }
    if tokens.len() > first_flag {
        let flag_token = tokens.get(first_flag);
        req.flags_at = flag_token.as_ptr() as usize - line.as_ptr() as usize;
    }
    if let Err(e) = preparse(tokens, first_flag, &mut req.options, key) {
        req.error = Some(match command {
            MetaCommand::Delete | MetaCommand::Arithmetic => MetaError::InvalidOrDuplicate,
            _ => e,
        });
        return Request::Meta(req);
    }
    match command {
        MetaCommand::Set => finish_set(&mut req),
        MetaCommand::Delete => {
            if req
                .flags()
                .any(|t| t[0] == b'O' && t.len() > MAX_OPAQUE_TOKEN_LEN)
            {
                req.error = Some(MetaError::OpaqueTooLong);
            }
        }
        MetaCommand::Arithmetic => match req.options.mode {
            None | Some(b'I' | b'+') => req.incr = true,
            Some(b'D' | b'-') => req.incr = false,
            Some(_) => req.error = Some(MetaError::ArithMode),
        },
        MetaCommand::Get | MetaCommand::Debug => {}
    }
    Request::Meta(req)
}

/// `me <key> [b]`: memcached looks at nothing else.
fn parse_debug(req: &mut MetaRequest<'_>, tokens: &Tokens<'_>) {
    let ntokens = tokens.len() + 1;
    if ntokens < 3 || req.key.len() > MAX_KEY_LEN {
        req.error = Some(MetaError::BadFormat);
        return;
    }
    if ntokens >= 4 && tokens.get(2) == b"b" {
        let mut buf = [0u8; MAX_BINARY_KEY_LEN];
        if base64_decode(req.key, &mut buf).is_none() {
            req.error = Some(MetaError::BadFormat);
            return;
        }
        req.options.base64 = true;
    }
}

/// The `ms`-only checks after the flags, in memcached's order: an over-long
/// opaque, then the mode (whose error wins).
fn finish_set(req: &mut MetaRequest<'_>) {
    if req
        .flags()
        .any(|t| t[0] == b'O' && t.len() > MAX_OPAQUE_TOKEN_LEN)
    {
        req.error = Some(MetaError::OpaqueTooLong);
    }
    let mode = match req.options.mode {
        None | Some(b'S') => SetMode::Set,
        Some(b'E') => SetMode::Add,
        Some(b'A') => SetMode::Append,
        Some(b'P') => SetMode::Prepend,
        Some(b'R') => SetMode::Replace,
        Some(_) => {
            req.error = Some(MetaError::SetMode);
            return;
        }
    };
    req.set_mode = match mode {
        SetMode::Set | SetMode::Replace if req.options.cas.is_some() => SetMode::Cas,
        m => m,
    };
}

/// memcached's `_meta_flag_preparse`: every flag token from `start`.
/// Most errors are remembered and parsing goes on (a later error replaces
/// the message); a duplicate or unknown flag stops at once.
fn preparse(
    tokens: &Tokens<'_>,
    start: usize,
    of: &mut MetaOptions,
    key: &[u8],
) -> Result<(), MetaError> {
    let mut seen = [false; 127];
    // memcached's default message, kept when `F` fails to parse.
    let mut error: Option<MetaError> = None;
    let mut has_error = false;
    let mut fail = |e: Option<MetaError>, error: &mut Option<MetaError>| {
        has_error = true;
        if e.is_some() {
            *error = e;
        }
    };
    for i in start..tokens.len() {
        let t = tokens.get(i);
        let o = t[0];
        if o >= 127 || seen[o as usize] {
            return Err(MetaError::DuplicateFlag);
        }
        seen[o as usize] = true;
        let arg = &t[1..];
        match o {
            b'b' => {
                let mut buf = [0u8; MAX_BINARY_KEY_LEN];
                if key.len() > MAX_KEY_LEN || base64_decode(key, &mut buf).is_none() {
                    fail(Some(MetaError::KeyDecode), &mut error);
                }
                of.base64 = true;
            }
            b'N' | b'T' | b'R' => {
                of.locked = true;
                match safe_strtol(arg) {
                    Some(v) => match o {
                        b'N' => of.vivify = Some(v),
                        b'T' => of.ttl = Some(v),
                        _ => of.recache = Some(v),
                    },
                    None => fail(Some(MetaError::BadToken), &mut error),
                }
            }
            b'l' | b'h' => of.locked = true,
            b'O' | b'P' | b'L' | b'k' | b's' | b't' | b'c' | b'f' => {}
            b'v' => of.value = true,
            b'u' => of.no_update = true,
            b'q' => of.quiet = true,
            b'F' => match safe_strtoul(arg) {
                Some(v) => of.client_flags = v,
                None => fail(None, &mut error),
            },
            b'C' => match safe_strtoull(arg) {
                Some(v) => of.cas = Some(v),
                None => fail(Some(MetaError::BadToken), &mut error),
            },
            b'M' => {
                if t.len() != 2 {
                    fail(Some(MetaError::ModeLength), &mut error);
                } else {
                    of.mode = Some(t[1]);
                }
            }
            b'J' => match safe_strtoull(arg) {
                Some(v) => of.initial = v,
                None => fail(Some(MetaError::InitialValue), &mut error),
            },
            b'D' => match safe_strtoull(arg) {
                Some(v) => of.delta = v,
                None => fail(Some(MetaError::DeltaValue), &mut error),
            },
            b'I' => of.invalidate = true,
            _ => return Err(MetaError::InvalidFlag),
        }
    }
    if has_error {
        Err(error.unwrap_or(MetaError::BadFormat))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::parse_request;

    fn meta(line: &str) -> MetaRequest<'_> {
        match parse_request(line.as_bytes()) {
            Request::Meta(m) => m,
            other => panic!("{line:?} parsed as {other:?}"),
        }
    }

    fn error(line: &str) -> Option<MetaError> {
        meta(line).error
    }

    #[test]
    fn too_few_tokens_is_error() {
        for line in ["mg", "ms", "md", "ma"] {
            assert!(matches!(
                parse_request(line.as_bytes()),
                Request::Invalid {
                    reply: ErrorReply::Error,
                    ..
                }
            ));
        }
        assert_eq!(error("me"), Some(MetaError::BadFormat));
        assert_eq!(error("ms k"), Some(MetaError::BadFormat));
    }

    #[test]
    fn get_flags() {
        let m = meta("mg k v c f s t k q u h O123 N30 R5 T10");
        assert_eq!(m.error, None);
        let o = m.options;
        assert!(o.value && o.quiet && o.no_update && o.locked);
        assert_eq!((o.vivify, o.recache, o.ttl), (Some(30), Some(5), Some(10)));
        let flags: Vec<&[u8]> = m.flags().collect();
        assert_eq!(flags.len(), 13);
        assert_eq!(flags[9], b"O123");
        assert!(!meta("mg k v").options.locked);
        assert!(meta("mg k l").options.locked);
        // Flags memcached accepts (and ignores) in mg.
        assert_eq!(error("mg k C5 F5 J1 D1 I P L MZ"), None);
    }

    #[test]
    fn flag_errors_like_memcached() {
        assert_eq!(error("mg k k k"), Some(MetaError::DuplicateFlag));
        assert_eq!(error("mg k \u{7f}"), Some(MetaError::DuplicateFlag));
        assert_eq!(error("mg k a"), Some(MetaError::InvalidFlag));
        assert_eq!(error("mg k 1 2"), Some(MetaError::InvalidFlag));
        assert_eq!(error("mg k E5"), Some(MetaError::InvalidFlag));
        assert_eq!(error("mg k x"), Some(MetaError::InvalidFlag));
        assert_eq!(error("mg k T"), Some(MetaError::BadToken));
        assert_eq!(error("mg k Nx"), Some(MetaError::BadToken));
        assert_eq!(error("mg k Cx"), Some(MetaError::BadToken));
        assert_eq!(error("mg k Fx"), Some(MetaError::BadFormat));
        assert_eq!(error("mg k Fx Tx"), Some(MetaError::BadToken));
        assert_eq!(error("mg k Tx Fx"), Some(MetaError::BadToken));
        assert_eq!(error("mg k Fx b"), Some(MetaError::KeyDecode));
        assert_eq!(error("mg k b Tx"), Some(MetaError::BadToken));
        assert_eq!(error("mg k Fx Z"), Some(MetaError::InvalidFlag));
        assert_eq!(error("mg k Ja"), Some(MetaError::InitialValue));
        assert_eq!(error("mg k Da"), Some(MetaError::DeltaValue));
        assert_eq!(error("mg k M"), Some(MetaError::ModeLength));
        assert_eq!(error("mg k MAA"), Some(MetaError::ModeLength));
        let long_key = format!("mg {} v", "a".repeat(251));
        assert_eq!(error(&long_key), Some(MetaError::BadFormat));
        let many = format!("mg k {}", "O1 ".repeat(18));
        assert_eq!(error(&many), Some(MetaError::GetOptionsTooLong));
        let many = format!("md k {}", "q ".repeat(18));
        assert_eq!(error(&many), Some(MetaError::OptionsTooLong));
        // md and ma replace every flag error.
        assert_eq!(error("md k Tx"), Some(MetaError::InvalidOrDuplicate));
        assert_eq!(error("ma k q q"), Some(MetaError::InvalidOrDuplicate));
        assert_eq!(error("ma k MX"), Some(MetaError::ArithMode));
        assert_eq!(
            error("md k O123456789012345678901234567890123"),
            Some(MetaError::OpaqueTooLong)
        );
    }

    #[test]
    fn set_line() {
        let m = meta("ms k 5 T10 F3 c k");
        assert_eq!((m.error, m.data_len()), (None, Some(5)));
        assert_eq!((m.options.ttl, m.options.client_flags), (Some(10), 3));
        assert_eq!(m.set_mode, SetMode::Set);
        assert_eq!(meta("ms k 1 C5").set_mode, SetMode::Cas);
        assert_eq!(meta("ms k 1 MR C5").set_mode, SetMode::Cas);
        assert_eq!(meta("ms k 1 ME C5").set_mode, SetMode::Add);
        assert_eq!(meta("ms k 1 MA C5").set_mode, SetMode::Append);
        assert_eq!(meta("ms k 1 MP").set_mode, SetMode::Prepend);
        assert_eq!(meta("ms k 1 MR").set_mode, SetMode::Replace);
        // Errors before the length: no data block is expected.
        let m = meta("ms k x");
        assert_eq!((m.error, m.data_len()), (Some(MetaError::BadFormat), None));
        assert_eq!(meta("ms k -1").data_len(), None);
        // Errors after the length: the block is swallowed.
        let m = meta("ms k 3 Ms");
        assert_eq!((m.error, m.data_len()), (Some(MetaError::SetMode), Some(3)));
        assert_eq!(error("ms k 1 S3"), Some(MetaError::InvalidFlag));
        assert_eq!(
            error("ms k 1 O123456789012345678901234567890123 MZ"),
            Some(MetaError::SetMode)
        );
        assert_eq!(
            error("ms k 1 O123456789012345678901234567890123"),
            Some(MetaError::OpaqueTooLong)
        );
        assert_eq!(error("ms k2 1 b"), Some(MetaError::KeyDecode));
    }

    #[test]
    fn arith_line() {
        let m = meta("ma k");
        assert_eq!((m.options.delta, m.options.initial, m.incr), (1, 0, true));
        let m = meta("ma k MD D5 J7 N0");
        assert_eq!((m.options.delta, m.options.initial, m.incr), (5, 7, false));
        assert!(!meta("ma k M-").incr);
        assert!(meta("ma k M+").incr);
        assert_eq!(error("ma k Mi"), Some(MetaError::ArithMode));
    }

    #[test]
    fn debug_line() {
        assert_eq!(error("me k"), None);
        assert_eq!(error("me k zzz"), None);
        assert_eq!(error("me k b"), Some(MetaError::BadFormat));
        assert!(meta("me azI= b").options.base64);
    }
}
