//! Replays the committed corpus of every fuzz target on stable, so each entry
//! that fuzzing found worth keeping is a regression test in `cargo test`.

use std::path::PathBuf;

fn replay(target: &str, check: fn(&[u8])) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    let files = fuzz_checks::input_files(std::slice::from_ref(&dir));
    for file in &files {
        fuzz_checks::replay_file(target, check, file);
    }
    // An empty input and a few edge shapes, whatever the corpus holds.
    for data in [
        &b""[..],
        b"\n",
        b"\r\n",
        b"set k 0 0 1\r\nx\r\n",
        &[0xff; 64],
    ] {
        check(data);
    }
    eprintln!(
        "{target}: replayed {} corpus entries from {}",
        files.len(),
        dir.display()
    );
}

#[test]
fn text_parse_corpus() {
    replay("text_parse", fuzz_checks::text_parse);
}

#[test]
fn conn_chunks_corpus() {
    replay("conn_chunks", fuzz_checks::conn_chunks);
}

#[test]
fn compose_parse_corpus() {
    replay("compose_parse", fuzz_checks::compose_parse);
}

#[test]
fn store_model_corpus() {
    replay("store_model", fuzz_checks::store_model);
}

#[test]
fn meta_parse_corpus() {
    replay("meta_parse", fuzz_checks::meta_parse);
}

#[test]
fn binary_parse_corpus() {
    replay("binary_parse", fuzz_checks::binary_parse);
}

/// A line far past memcached's 2048-byte limit, fed whole and in pieces: the
/// pieces close the connection, the whole does not, and that is allowed.
#[test]
fn conn_chunks_long_line_split() {
    let mut data = vec![0u8, 0, 0, 0];
    data.extend_from_slice(b"set k 0 0 1\r\nx\r\n");
    data.resize(data.len() + 3000, b'a');
    data.extend_from_slice(b"\r\nget k\r\n");
    fuzz_checks::conn_chunks(&data);
}

/// Inputs that reach the connection's less common paths, whatever the corpus
/// holds: a refused value swallowed, meta data blocks, a pipelined batch, `stats`
/// (CPU times masked) and a metadump (lines in hash order, sorted), a binary
/// stream, and a multi-get large enough to stall on output.
#[test]
fn conn_chunks_shapes() {
    let mut big = b"set big 0 0 2000\r\n".to_vec();
    big.resize(big.len() + 2000, b'g');
    big.extend_from_slice(b"\r\nget big\r\n");
    let mut binary = vec![0x80, 0x01, 0, 1, 8, 0, 0, 0, 0, 0, 0, 10, 0, 0, 0, 0];
    binary.extend_from_slice(&[0; 8]);
    binary.extend_from_slice(&[0, 0, 0, 5, 0, 0, 0, 0, b'k', b'v']);
    binary.extend_from_slice(&[0x80, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1]);
    binary.extend_from_slice(&[0; 12]);
    binary.push(b'k');
    let mut wide = b"set w 0 0 900\r\n".to_vec();
    wide.resize(wide.len() + 900, b'w');
    wide.extend_from_slice(b"\r\nget");
    for _ in 0..1500 {
        wide.extend_from_slice(b" w");
    }
    wide.extend_from_slice(b"\r\nget w\r\n");
    let inputs: [&[u8]; 6] = [
        &big,
        b"set a 0 0 1\r\n1\r\nget a\r\nget a\r\nset b 0 0 1\r\n2\r\nget a b\r\n",
        b"ms m 2 T0\r\nhi\r\nmg m v t\r\nms n 3 q\r\nabc\r\nmn\r\n",
        b"set a 0 0 1\r\n1\r\nset b 0 0 1\r\n2\r\nstats\r\nlru_crawler metadump all\r\n",
        &binary,
        &wide,
    ];
    for input in inputs {
        for control in [[0u8; 4], [2, 7, 0, 30], [255; 4]] {
            let mut data = control.to_vec();
            data.extend_from_slice(input);
            fuzz_checks::conn_chunks(&data);
        }
    }
}
