//! Round trip: a request composed by `protocol::client` (ferrobench's side)
//! must parse, with `protocol::text` (the server's side), to the same fields.

use protocol::client::{self, Retrieval, StoreCommand as ClientStore};
use protocol::text::{frame_line, parse_request, GetCommand, LineFrame, Request, StoreCommand};

use crate::input::Input;

/// A key the client can legally send: 1..=250 bytes (more for `get`), no
/// space, no newline, no NUL (memcached reads lines as C strings).
fn key<'a>(input: &mut Input<'a>, max: usize) -> Vec<u8> {
    let len = 1 + usize::from(input.u8()) % max.min(256);
    let raw = input.bytes(len);
    let mut key: Vec<u8> = raw
        .iter()
        .map(|&b| match b {
            b' ' | b'\n' | 0 => b'_',
            b => b,
        })
        .collect();
    if key.is_empty() {
        key.push(b'k');
    }
    key
}

/// Composes one request from the fuzz bytes, frames and parses it back, and
/// compares every field. Panics on any difference.
pub fn compose_parse(data: &[u8]) {
    let mut input = Input::new(data);
    while !input.is_empty() {
        one_request(&mut input);
    }
}

/// One request of a kind the fuzz bytes pick. The `noreply` byte comes
/// first whatever the kind, so a corpus keeps its meaning.
fn one_request(input: &mut Input<'_>) {
    let noreply = input.bool();
    match input.u8() % 5 {
        0 => get_round_trip(input),
        1 => store_round_trip(input, noreply),
        2 => delete_round_trip(input, noreply),
        3 => arith_round_trip(input, noreply),
        _ => touch_round_trip(input, noreply),
    }
}

/// Panics: `out` parsed as the wrong request.
fn misparsed(out: &[u8], parsed: &Request<'_>) -> ! {
    panic!("{:?} parsed as {parsed:?}", String::from_utf8_lossy(out))
}

fn get_round_trip(input: &mut Input<'_>) {
    let mut out = Vec::new();
    let gets = input.bool();
    let n = 1 + usize::from(input.u8() % 40);
    // Keys of a get may be longer than 250 bytes: the parser hands them
    // on and the server answers CLIENT_ERROR.
    let keys: Vec<Vec<u8>> = (0..n).map(|_| key(input, 255)).collect();
    let cmd = if gets {
        Retrieval::Gets
    } else {
        Retrieval::Get
    };
    client::compose_get(&mut out, cmd, &keys);
    let line = only_line(&out);
    match parse_request(line) {
        Request::Get {
            command,
            exptime: 0,
            keys: parsed,
        } => {
            let want = if gets {
                GetCommand::Gets
            } else {
                GetCommand::Get
            };
            assert_eq!(command, want);
            let parsed: Vec<&[u8]> = parsed.collect();
            let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
            assert_eq!(parsed, keys);
        }
        other => misparsed(&out, &other),
    }
}

fn store_round_trip(input: &mut Input<'_>, noreply: bool) {
    let mut out = Vec::new();
    let (cmd, want) = match input.u8() % 6 {
        0 => (ClientStore::Set, StoreCommand::Set),
        1 => (ClientStore::Add, StoreCommand::Add),
        2 => (ClientStore::Replace, StoreCommand::Replace),
        3 => (ClientStore::Append, StoreCommand::Append),
        4 => (ClientStore::Prepend, StoreCommand::Prepend),
        _ => (ClientStore::Cas(input.u64()), StoreCommand::Cas),
    };
    let key = key(input, 250);
    let flags = input.u32();
    let exptime = input.u32();
    let len = usize::from(input.u8()) * 3;
    let value = input.bytes(len).to_vec();
    client::compose_store(&mut out, cmd, &key, flags, exptime, &value, noreply);
    let LineFrame::Line { end, next } = frame_line(&out) else {
        panic!("no line in {out:?}");
    };
    assert_eq!(&out[next..], [&value[..], b"\r\n"].concat(), "data block");
    match parse_request(&out[..end]) {
        Request::Store {
            command,
            key: k,
            flags: f,
            exptime: e,
            len: l,
            cas,
            noreply: n,
        } => {
            assert_eq!(command, want);
            assert_eq!(k, &key[..]);
            assert_eq!(f, flags);
            // memcached reads exptime with strtol into an int32.
            assert_eq!(e, exptime as i32);
            assert_eq!(l, value.len());
            let want_cas = match cmd {
                ClientStore::Cas(unique) => unique,
                _ => 0,
            };
            assert_eq!(cas, want_cas);
            assert_eq!(n, noreply);
        }
        other => misparsed(&out, &other),
    }
}

fn delete_round_trip(input: &mut Input<'_>, noreply: bool) {
    let mut out = Vec::new();
    let key = key(input, 250);
    client::compose_delete(&mut out, &key, noreply);
    match parse_request(only_line(&out)) {
        Request::Delete { key: k, noreply: n } => {
            assert_eq!((k, n), (&key[..], noreply));
        }
        // `delete noreply` alone is the key "noreply"; but the client
        // never sends a key that ends the line as an option would.
        other => misparsed(&out, &other),
    }
}

fn arith_round_trip(input: &mut Input<'_>, noreply: bool) {
    let mut out = Vec::new();
    let key = key(input, 250);
    let delta = input.u64();
    let decrement = input.bool();
    client::compose_incr(&mut out, &key, delta, decrement, noreply);
    match parse_request(only_line(&out)) {
        Request::Arith {
            incr,
            key: k,
            delta: d,
            noreply: n,
        } => {
            assert_eq!((incr, k, d, n), (!decrement, &key[..], delta, noreply));
        }
        other => misparsed(&out, &other),
    }
}

fn touch_round_trip(input: &mut Input<'_>, noreply: bool) {
    let mut out = Vec::new();
    let key = key(input, 250);
    let exptime = input.u32();
    client::compose_touch(&mut out, &key, exptime, noreply);
    match parse_request(only_line(&out)) {
        Request::Touch {
            key: k,
            exptime: e,
            noreply: n,
        } => {
            assert_eq!((k, e, n), (&key[..], exptime as i32, noreply));
        }
        other => misparsed(&out, &other),
    }
}

/// The request must be exactly one line; returns it without its terminator.
fn only_line(out: &[u8]) -> &[u8] {
    match frame_line(out) {
        LineFrame::Line { end, next } => {
            assert_eq!(next, out.len(), "more than one line in {out:?}");
            &out[..end]
        }
        other => panic!("{out:?} framed as {other:?}"),
    }
}
