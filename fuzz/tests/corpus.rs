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
