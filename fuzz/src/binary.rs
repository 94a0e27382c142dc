//! Target on the binary protocol's framing: `Header::parse`, `frame_packet`
//! and the header arithmetic the server's `step_binary` relies on.

use protocol::binary::{
    frame_packet, opcode, write_request, write_response_header, Header, Packet, Status, HEADER_LEN,
    REQUEST_MAGIC, RESPONSE_MAGIC,
};

use crate::input::Input;

/// The binary framing on arbitrary bytes, two ways.
///
/// 1. The bytes as a stream: parse a header, frame the packet, skip it, until
///    the rest is too short or its lengths do not add up. Offsets grow
///    strictly and never pass the input.
/// 2. The bytes as a recipe for packets written with `write_request` and
///    `write_response_header`: the stream, whole or cut anywhere, frames back
///    to exactly those packets, the cut one last as incomplete.
///
/// Invariants (see [`check_header`], [`check_packet`]): a header parses iff
/// 24 bytes are there and writes back to the same bytes; `packet_len()` is
/// `24 + body_len`; `value_len()` is `body_len - extras - key` and `None`
/// exactly when `extras_and_key_len() > body_len`; an accepted packet has
/// `extras_and_key_len() <= body_len`, extras and key of the header's
/// lengths, and its three slices lie end to end inside the input, from byte
/// 24 to `packet_len()`; framing depends on no byte past the packet and
/// fails on any shorter prefix. And nothing panics.
pub fn binary_parse(data: &[u8]) {
    walk(data);
    composed(data);
}

/// Frames `data` packet by packet; returns the packets' offsets and the
/// offset where framing stopped.
fn walk(data: &[u8]) -> (Vec<usize>, usize) {
    let mut starts = Vec::new();
    let mut pos = 0;
    loop {
        let rest = &data[pos..];
        let Some(header) = Header::parse(rest) else {
            assert!(rest.len() < HEADER_LEN, "no header in {} bytes", rest.len());
            assert_eq!(frame_packet(rest), None);
            break;
        };
        assert!(rest.len() >= HEADER_LEN, "header from {} bytes", rest.len());
        check_header(&rest[..HEADER_LEN], &header);
        let Some(packet) = frame_packet(rest) else {
            assert!(
                header.value_len().is_none() || rest.len() < header.packet_len(),
                "{} bytes buffered, packet of {} not framed",
                rest.len(),
                header.packet_len()
            );
            break;
        };
        check_packet(rest, &packet);
        let len = packet.header.packet_len();
        assert!(len >= HEADER_LEN && len <= rest.len(), "packet of {len}");
        let next = pos + len;
        assert!(
            next > pos && next <= data.len(),
            "walk from {pos} to {next}"
        );
        starts.push(pos);
        pos = next;
    }
    (starts, pos)
}

/// The header's own arithmetic, and the bytes it came from.
fn check_header(raw: &[u8], h: &Header) {
    let mut out = Vec::new();
    h.write(&mut out);
    assert_eq!(out, raw, "header does not write back to its bytes");
    assert_eq!(h.packet_len(), HEADER_LEN + h.body_len as usize);
    let head = usize::from(h.extras_len) + usize::from(h.key_len);
    assert_eq!(h.extras_and_key_len(), head);
    let body = h.body_len as usize;
    match h.value_len() {
        Some(v) => assert_eq!(head + v, body, "value length {v}"),
        None => assert!(head > body, "value length refused for {h:?}"),
    }
    if let Some(s) = Status::from_u16(h.status) {
        assert_eq!(s as u16, h.status);
    }
    let (loud, quiet) = opcode::unquiet(h.opcode);
    if quiet {
        assert_ne!(loud, h.opcode);
        assert_eq!(opcode::unquiet(loud), (loud, false), "{loud:#x} is quiet");
    } else {
        assert_eq!(loud, h.opcode);
    }
}

/// A framed packet against the input it was framed from.
fn check_packet(input: &[u8], p: &Packet<'_>) {
    let h = p.header;
    assert_eq!(Header::parse(input), Some(h));
    let len = h.packet_len();
    assert!(len <= input.len(), "packet of {len} in {}", input.len());
    assert!(
        h.extras_and_key_len() <= h.body_len as usize,
        "accepted {h:?}"
    );
    assert_eq!(p.extras.len(), usize::from(h.extras_len));
    assert_eq!(p.key.len(), usize::from(h.key_len));
    assert_eq!(Some(p.value.len()), h.value_len());
    // extras | key | value, end to end, from byte 24 to the packet's end.
    let base = input.as_ptr() as usize;
    let at = |s: &[u8]| s.as_ptr() as usize - base;
    if !p.extras.is_empty() {
        assert_eq!(at(p.extras), HEADER_LEN, "extras offset");
    }
    if !p.key.is_empty() {
        assert_eq!(at(p.key), HEADER_LEN + p.extras.len(), "key offset");
    }
    if !p.value.is_empty() {
        assert_eq!(
            at(p.value),
            HEADER_LEN + h.extras_and_key_len(),
            "value offset"
        );
        assert_eq!(at(p.value) + p.value.len(), len, "value end");
    }
    assert_eq!(
        [p.extras, p.key, p.value].concat(),
        &input[HEADER_LEN..len],
        "parts are not the body"
    );
    // Nothing past the packet matters, and no shorter prefix frames.
    assert_eq!(frame_packet(&input[..len]), Some(*p));
    assert_eq!(frame_packet(&input[..len - 1]), None, "prefix framed");
    if h.magic == REQUEST_MAGIC {
        let mut again = Vec::new();
        write_request(
            &mut again, h.opcode, p.extras, p.key, p.value, h.opaque, h.cas,
        );
        let mut want = input[..len].to_vec();
        want[5..8].fill(0); // write_request sends data type and vbucket 0
        assert_eq!(again, want, "write_request of the parts");
    }
}

/// One packet built from the fuzz bytes: its header and its wire bytes.
fn build(input: &mut Input<'_>, out: &mut Vec<u8>) -> Header {
    let start = out.len();
    let request = input.bool();
    let op = input.u8();
    let extras = part(input, 40);
    let key = part(input, 300);
    let value = part(input, 600);
    let opaque = input.u32();
    let cas = input.u64();
    if request {
        write_request(out, op, &extras, &key, &value, opaque, cas);
    } else {
        let status = Status::from_u16(u16::from(input.u8())).unwrap_or(Status::Success);
        let body = extras.len() + key.len() + value.len();
        write_response_header(
            out,
            op,
            status,
            extras.len() as u8,
            key.len() as u16,
            body as u32,
            opaque,
            cas,
        );
        out.extend_from_slice(&extras);
        out.extend_from_slice(&key);
        out.extend_from_slice(&value);
    }
    let h = Header::parse(&out[start..]).expect("a written header parses");
    assert_eq!(
        h.magic,
        if request {
            REQUEST_MAGIC
        } else {
            RESPONSE_MAGIC
        }
    );
    assert_eq!(h.packet_len(), out.len() - start, "written packet length");
    h
}

/// Up to `max - 1` fuzz bytes, the length from the two bytes before them.
fn part(input: &mut Input<'_>, max: u16) -> Vec<u8> {
    let len = u16::from_le_bytes([input.u8(), input.u8()]) % max;
    input.bytes(usize::from(len)).to_vec()
}

/// Packets written from a recipe frame back, one by one, whole or cut.
fn composed(data: &[u8]) {
    let mut input = Input::new(data);
    let mut stream = Vec::new();
    let mut packets = Vec::new();
    while !input.is_empty() && packets.len() < 16 {
        let start = stream.len();
        let h = build(&mut input, &mut stream);
        packets.push((start, h));
    }
    let (starts, end) = walk(&stream);
    assert_eq!(end, stream.len(), "written stream not framed to its end");
    assert_eq!(
        starts,
        packets.iter().map(|&(s, _)| s).collect::<Vec<_>>(),
        "packet offsets"
    );
    for &(start, h) in &packets {
        assert_eq!(frame_packet(&stream[start..]).map(|p| p.header), Some(h));
    }
    // Cut the stream: the whole packets before the cut frame, then stop.
    if stream.is_empty() {
        return;
    }
    let cut = data.len().wrapping_mul(7919) % stream.len();
    let (starts, end) = walk(&stream[..cut]);
    let whole: Vec<usize> = packets
        .iter()
        .filter(|&&(s, h)| s + h.packet_len() <= cut)
        .map(|&(s, _)| s)
        .collect();
    assert_eq!(starts, whole, "packets framed before a cut at {cut}");
    assert!(end <= cut);
}
