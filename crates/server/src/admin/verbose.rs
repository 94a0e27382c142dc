//! The lines memcached 1.6.18 writes to standard error at `-vv`, one request at a
//! time: formatting only, into a buffer the caller writes with one system call.
//!
//! Text (`proto_text.c`): the request line as `<FD line`, each reply memcached sends
//! through `out_string` as `>FD reply` (`>FD NOREPLY reply` under `noreply`), and for a
//! retrieval `>FD sending key KEY` per hit and `>FD END`. Binary (`proto_bin.c`): the
//! request header as hex, a command line for some opcodes, `>FD Writing an error: ...`
//! and every response header as hex. The session decides which of these a request
//! gets (`session/conn/log.rs`); the replies are read back from the bytes composed,
//! so nothing on the request path is formatted twice.

use std::io::Write;

use protocol::binary::{Header, HEADER_LEN, RESPONSE_MAGIC};

/// `FD: Client using the NAME protocol`, when an auto-negotiating connection's first
/// byte decides its protocol.
pub fn protocol(log: &mut Vec<u8>, fd: i32, name: &str) {
    let _ = writeln!(log, "{fd}: Client using the {name} protocol");
}

/// `<FD line`: a text request line as read, without its line ending.
pub fn request_line(log: &mut Vec<u8>, fd: i32, line: &[u8]) {
    let _ = write!(log, "<{fd} ");
    log.extend_from_slice(line);
    log.push(b'\n');
}

/// `>FD line` for each line of `reply` (`>FD NOREPLY line` when it was not sent).
pub fn reply_lines(log: &mut Vec<u8>, fd: i32, reply: &[u8], noreply: bool) {
    let quiet = if noreply { "NOREPLY " } else { "" };
    for line in reply.split_inclusive(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let _ = write!(log, ">{fd} {quiet}");
        log.extend_from_slice(line);
        log.push(b'\n');
    }
}

/// Whether a reply line is one of memcached's errors (which it sends through
/// `out_string` whatever the command).
#[must_use]
pub fn is_error(reply: &[u8]) -> bool {
    reply.starts_with(b"ERROR")
        || reply.starts_with(b"CLIENT_ERROR")
        || reply.starts_with(b"SERVER_ERROR")
}

/// A text retrieval's reply (`get`, `gets`, `gat`, `gats`), or the part of it one turn
/// composed: `>FD sending key KEY` per `VALUE` line, `>FD END` at its end. An error in
/// place of `END` (a key over 250 bytes) follows the `END`, as memcached prints it.
///
/// Values of at least `splice_min` bytes may be absent from `reply`, sent in place
/// from the store (`reply/splice.rs`); a value is taken as copied when its bytes are
/// followed by a line end and the next reply, as spliced when the line end follows
/// its `VALUE` line at once.
pub fn get_reply(log: &mut Vec<u8>, fd: i32, reply: &[u8], splice_min: usize) {
    let mut at = 0;
    while at < reply.len() {
        let rest = &reply[at..];
        let Some(eol) = rest.iter().position(|&b| b == b'\n') else {
            return;
        };
        let line = rest[..eol].strip_suffix(b"\r").unwrap_or(&rest[..eol]);
        let Some(fields) = line.strip_prefix(b"VALUE ") else {
            let _ = writeln!(log, ">{fd} END");
            if line != b"END" {
                reply_lines(log, fd, line, false);
            }
            return;
        };
        let mut parts = fields.split(|&b| b == b' ');
        let key = parts.next().unwrap_or_default();
        let _ = write!(log, ">{fd} sending key ");
        log.extend_from_slice(key);
        log.push(b'\n');
        let Some(bytes) = parts
            .nth(1)
            .and_then(|n| std::str::from_utf8(n).ok())
            .and_then(|n| n.parse::<usize>().ok())
        else {
            return;
        };
        let data = at + eol + 1;
        let copied_end = data + bytes + 2;
        let copied = reply.get(data + bytes..copied_end) == Some(b"\r\n")
            && next_text_reply(&reply[copied_end..]);
        at = if copied || bytes < splice_min {
            copied_end
        } else {
            data + 2
        };
    }
}

/// Whether `rest` starts where a retrieval's next reply line would (or is empty).
fn next_text_reply(rest: &[u8]) -> bool {
    rest.is_empty() || rest.starts_with(b"VALUE ") || rest.starts_with(b"END\r\n") || is_error(rest)
}

/// `<FD Read binary protocol data:` and the request header, four bytes a line.
pub fn binary_request_header(log: &mut Vec<u8>, fd: i32, header: &[u8]) {
    let _ = write!(log, "<{fd} Read binary protocol data:");
    hex_lines(log, &format!("<{fd}   "), header);
}

/// Every response in `reply` (one binary request's): `>FD Writing an error: TEXT` for
/// an error memcached writes with `write_bin_error`, then the header as hex. A value
/// of at least `splice_min` bytes may be absent, as in [`get_reply`].
pub fn binary_responses(log: &mut Vec<u8>, fd: i32, reply: &[u8], splice_min: usize) {
    let mut at = 0;
    while let Some(h) = Header::parse(&reply[at..]) {
        if h.magic != RESPONSE_MAGIC {
            return;
        }
        let body = at + HEADER_LEN + usize::from(h.extras_len) + usize::from(h.key_len);
        let end = at + HEADER_LEN + h.body_len as usize;
        // A miss of GETK/GETKQ/GATK/GATKQ carries its key, not an error text.
        let keyed_miss = matches!(h.opcode, 0x0c | 0x0d | 0x23 | 0x24);
        if h.status != 0 && !keyed_miss {
            let text = reply.get(body..end).unwrap_or_default();
            let _ = write!(log, ">{fd} Writing an error: ");
            log.extend_from_slice(text);
            log.push(b'\n');
        }
        let mut dumped: [u8; HEADER_LEN] = reply[at..at + HEADER_LEN].try_into().expect("24");
        if h.status == 0
            && matches!(
                h.opcode,
                0x00 | 0x09 | 0x0c | 0x0d | 0x1c..=0x1e | 0x23 | 0x24
            )
        {
            // memcached dumps a hit's header before it writes the item's CAS into it.
            dumped[16..].fill(0);
        }
        let _ = write!(log, ">{fd} Writing bin response:");
        hex_lines(log, &format!(">{fd}  "), &dumped);
        let value_len = end.saturating_sub(body);
        let copied = end == reply.len() || reply.get(end) == Some(&RESPONSE_MAGIC);
        at = if h.status == 0 && value_len >= splice_min && !copied {
            body
        } else {
            end
        };
        if at >= reply.len() {
            return;
        }
    }
}

/// The line memcached writes for a binary request before executing it, if any:
/// `<FD GET key`, `<FD SET key Value len is N`, `Deleting key`, `incr key ...`.
/// `packet` is the request from its header on (its value may be missing).
pub fn binary_command(log: &mut Vec<u8>, fd: i32, packet: &[u8]) {
    let Some(h) = Header::parse(packet) else {
        return;
    };
    let extras_len = usize::from(h.extras_len);
    let key_len = usize::from(h.key_len);
    let Some(extras) = packet.get(HEADER_LEN..HEADER_LEN + extras_len) else {
        return;
    };
    let Some(key) = packet.get(HEADER_LEN + extras_len..HEADER_LEN + extras_len + key_len) else {
        return;
    };
    let value_len = i64::from(h.body_len) - key_len as i64 - extras_len as i64;
    let named = |log: &mut Vec<u8>, head: &str, tail: &str| {
        log.extend_from_slice(head.as_bytes());
        log.extend_from_slice(key);
        log.extend_from_slice(tail.as_bytes());
        log.push(b'\n');
    };
    match h.opcode {
        0x00 | 0x09 | 0x0c | 0x0d => named(log, &format!("<{fd} GET "), ""),
        0x1c | 0x1d | 0x1e | 0x23 | 0x24 => named(log, &format!("<{fd} TOUCH "), ""),
        0x01 | 0x11 | 0x02 | 0x12 | 0x03 | 0x13 => {
            let name = match h.opcode {
                0x01 | 0x11 => "SET",
                0x02 | 0x12 => "ADD",
                _ => "REPLACE",
            };
            named(
                log,
                &format!("<{fd} {name} "),
                &format!(" Value len is {value_len}"),
            );
        }
        0x0e | 0x0f | 0x19 | 0x1a => {
            let _ = writeln!(log, "Value len is {}", value_len + extras_len as i64);
        }
        0x04 | 0x14 => named(log, "Deleting ", ""),
        0x05 | 0x06 | 0x15 | 0x16 if extras.len() == 20 => {
            let delta = u64::from_be_bytes(extras[0..8].try_into().expect("8 bytes")) as i64;
            let initial = u64::from_be_bytes(extras[8..16].try_into().expect("8 bytes"));
            let exptime = u32::from_be_bytes(extras[16..20].try_into().expect("4 bytes")) as i32;
            named(log, "incr ", &format!(" {delta}, {initial}, {exptime}"));
        }
        0x10 => named(log, &format!("<{fd} STATS "), ""),
        _ => {}
    }
}

/// `bytes` as memcached dumps a header: ` 0x%02x` each, a new line (opening with
/// `prefix`) before every fourth.
fn hex_lines(log: &mut Vec<u8>, prefix: &str, bytes: &[u8]) {
    for (i, b) in bytes.iter().enumerate() {
        if i % 4 == 0 {
            log.push(b'\n');
            log.extend_from_slice(prefix.as_bytes());
        }
        let _ = write!(log, " 0x{b:02x}");
    }
    log.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(log: &[u8]) -> &str {
        std::str::from_utf8(log).unwrap()
    }

    #[test]
    fn get_reply_lists_hits_then_end() {
        let mut log = Vec::new();
        get_reply(
            &mut log,
            7,
            b"VALUE a 0 1\r\nx\r\nVALUE b 5 2 9\r\nhi\r\nEND\r\n",
            usize::MAX,
        );
        assert_eq!(text(&log), ">7 sending key a\n>7 sending key b\n>7 END\n");
    }

    #[test]
    fn get_reply_with_a_spliced_value() {
        let mut log = Vec::new();
        get_reply(&mut log, 7, b"VALUE big 0 70000\r\n\r\nEND\r\n", 16384);
        assert_eq!(text(&log), ">7 sending key big\n>7 END\n");
    }

    #[test]
    fn get_reply_error_follows_end() {
        let mut log = Vec::new();
        get_reply(
            &mut log,
            3,
            b"CLIENT_ERROR bad command line format\r\n",
            usize::MAX,
        );
        assert_eq!(
            text(&log),
            ">3 END\n>3 CLIENT_ERROR bad command line format\n"
        );
    }

    #[test]
    fn noreply_lines() {
        let mut log = Vec::new();
        reply_lines(&mut log, 4, b"STORED\r\n", true);
        assert_eq!(text(&log), ">4 NOREPLY STORED\n");
    }

    #[test]
    fn binary_header_dump_matches_memcached() {
        let mut log = Vec::new();
        let mut header = [0u8; 24];
        header[0] = 0x80;
        header[1] = 0x01;
        binary_request_header(&mut log, 24, &header);
        assert!(text(&log).starts_with(
            "<24 Read binary protocol data:\n<24    0x80 0x01 0x00 0x00\n<24    0x00"
        ));
        assert_eq!(text(&log).lines().count(), 7);
    }

    #[test]
    fn binary_error_response() {
        let mut reply = vec![0x81, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 9];
        reply.extend_from_slice(&[0; 12]);
        reply.extend_from_slice(b"Not found");
        let mut log = Vec::new();
        binary_responses(&mut log, 5, &reply, usize::MAX);
        assert!(text(&log).starts_with(
            ">5 Writing an error: Not found\n>5 Writing bin response:\n>5   0x81 0x00 0x00 0x00\n"
        ));
    }
}
