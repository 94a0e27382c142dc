//! memcached's log lines (logger.c `_logger_parse_*`), byte for byte: what the logger
//! thread writes to a watcher for each [`Record`].

use std::io::Write;
use std::net::SocketAddr;

use super::{Event, Record};

const STORE_STATUS: [&str; 6] = [
    "not_stored",
    "stored",
    "exists",
    "not_found",
    "too_large",
    "no_memory",
];
const STORE_CMD: [&str; 7] = ["null", "add", "set", "replace", "append", "prepend", "cas"];
const GET_STATUS: [&str; 4] = ["not_found", "found", "flushed", "expired"];
const TRANSPORT: [&str; 3] = ["local", "tcp", "udp"];
const CLOSE_REASON: [&str; 4] = ["error", "normal", "idle_timeout", "shutdown"];

/// memcached's `uriencode`: letters, digits and `-._~` stay, every other byte is `%XX`.
pub fn uriencode(key: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in key {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
}

/// memcached's `size=`: the value's length without its CRLF (`nbytes - 2`, or 0).
fn size(nbytes: i32) -> i32 {
    if nbytes > 0 {
        nbytes - 2
    } else {
        0
    }
}

/// `rip=... rport=...` as `_logger_util_addr_endpoint` writes them (`unix` and 0 for a
/// UNIX socket).
fn endpoint(peer: Option<SocketAddr>) -> (String, u16) {
    match peer {
        Some(a) => (a.ip().to_string(), a.port()),
        None => ("unix".to_string(), 0),
    }
}

/// Append the line of `r` (whose key is `key`) to `out`, `\n`-terminated.
pub fn line(r: &Record, key: &[u8], out: &mut Vec<u8>) {
    // `ts=%lld.%d`: the microseconds are not zero-padded in memcached either.
    let _ = write!(out, "ts={}.{} gid={} ", r.sec, r.usec, r.gid);
    match r.event {
        Event::Get {
            status,
            clsid,
            nbytes,
            cfd,
        } => {
            out.extend_from_slice(b"type=item_get key=");
            uriencode(key, out);
            let _ = writeln!(
                out,
                " status={} clsid={clsid} cfd={cfd} size={}",
                GET_STATUS[usize::from(status as u8)],
                size(nbytes)
            );
        }
        Event::Store {
            status,
            cmd,
            ttl,
            clsid,
            nbytes,
            cfd,
        } => {
            out.extend_from_slice(b"type=item_store key=");
            uriencode(key, out);
            let _ = writeln!(
                out,
                " status={} cmd={} ttl={ttl} clsid={clsid} cfd={cfd} size={}",
                STORE_STATUS[usize::from(status as u8)],
                STORE_CMD.get(usize::from(cmd as u8)).unwrap_or(&"na"),
                size(nbytes)
            );
        }
        Event::Eviction {
            fetched,
            ttl,
            la,
            clsid,
            nbytes,
        } => {
            out.extend_from_slice(b"type=eviction key=");
            uriencode(key, out);
            let _ = writeln!(
                out,
                " fetch={} ttl={ttl} la={la} clsid={clsid} size={}",
                if fetched { "yes" } else { "no" },
                size(nbytes)
            );
        }
        Event::ConnNew {
            peer,
            transport,
            cfd,
        } => {
            let (rip, rport) = endpoint(peer);
            let _ = writeln!(
                out,
                "type=conn_new rip={rip} rport={rport} transport={} cfd={cfd}",
                TRANSPORT[usize::from(transport as u8)]
            );
        }
        Event::ConnClose {
            peer,
            transport,
            reason,
            cfd,
        } => {
            let (rip, rport) = endpoint(peer);
            let _ = writeln!(
                out,
                "type=conn_close rip={rip} rport={rport} transport={} reason={} cfd={cfd}",
                TRANSPORT[usize::from(transport as u8)],
                CLOSE_REASON[usize::from(reason as u8)]
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{CloseReason, GetStatus, StoreCmd, StoreStatus, Transport};
    use super::*;

    fn render(event: Event, key: &[u8]) -> String {
        let r = Record {
            gid: 7,
            sec: 1700000000,
            usec: 42,
            key_at: 0,
            key_len: 0,
            event,
        };
        let mut out = Vec::new();
        line(&r, key, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn lines_match_memcached() {
        let get = Event::Get {
            status: GetStatus::Found,
            clsid: 1,
            nbytes: 6,
            cfd: 9,
        };
        assert_eq!(
            render(get, b"foo"),
            "ts=1700000000.42 gid=7 type=item_get key=foo status=found clsid=1 cfd=9 size=4\n"
        );
        let store = Event::Store {
            status: StoreStatus::Stored,
            cmd: StoreCmd::Set,
            ttl: 0,
            clsid: 1,
            nbytes: 6,
            cfd: 9,
        };
        assert_eq!(
            render(store, b"a b"),
            "ts=1700000000.42 gid=7 type=item_store key=a%20b status=stored cmd=set ttl=0 clsid=1 cfd=9 size=4\n"
        );
        let close = Event::ConnClose {
            peer: Some("127.0.0.1:5000".parse().unwrap()),
            transport: Transport::Tcp,
            reason: CloseReason::Normal,
            cfd: 12,
        };
        assert_eq!(
            render(close, b""),
            "ts=1700000000.42 gid=7 type=conn_close rip=127.0.0.1 rport=5000 transport=tcp reason=normal cfd=12\n"
        );
    }

    #[test]
    fn uriencode_escapes_as_memcached() {
        let mut out = Vec::new();
        uriencode(b"a-._~#/\xff", &mut out);
        assert_eq!(out, b"a-._~%23%2F%FF");
    }
}
