//! The checks behind ferrocache's fuzz targets, as plain functions.
//!
//! A tour:
//! - [`text_parse`] (`text.rs`): `frame_line` + `parse_request` on arbitrary bytes.
//! - [`conn_chunks`] (`text.rs`): the server's real connection
//!   (`ferrocache_server::session::Conn`, on a fresh in-process store) fed the same
//!   bytes whole and split at points the input chooses must write the same replies
//!   and end in the same status.
//! - [`compose_parse`] (`compose.rs`): requests composed by `protocol::client`
//!   parse back, with `protocol::text`, to the same fields.
//! - [`meta_parse`] (`meta.rs`): the meta protocol: the framing loop over meta
//!   lines (an `ms` consumes `len + 2` data bytes), `parse_meta` on every line
//!   as each of `mg ms md ma me`, and memcached's base64 for binary keys.
//! - [`binary_parse`] (`binary.rs`): `Header::parse` and `frame_packet` walking
//!   arbitrary bytes packet by packet, and packets written by the fuzz bytes'
//!   recipe framing back, whole or cut.
//! - [`store_model`] (`model.rs`): a `HashMap` model kept beside a small
//!   `storage::Store`; a hit must equal the last write, a miss is allowed.
//!
//! Each function panics when an invariant breaks. The `fuzz_targets/` binaries
//! hand them to libFuzzer under `cargo fuzz` (nightly), and replay files with a
//! plain `main` otherwise; `tests/corpus.rs` replays `corpus/<target>/` on
//! stable in `cargo test`, so every committed entry is a regression test.

mod binary;
mod compose;
mod input;
mod meta;
mod model;
mod text;

pub use binary::binary_parse;
pub use compose::compose_parse;
pub use meta::meta_parse;
pub use model::store_model;
pub use text::{conn_chunks, text_parse};

use std::path::{Path, PathBuf};

/// Every file named by `paths`, directories expanded one level, sorted.
#[must_use]
pub fn input_files(paths: &[PathBuf]) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let entries = std::fs::read_dir(path)
                .unwrap_or_else(|e| panic!("read_dir {}: {e}", path.display()));
            files.extend(entries.flatten().map(|e| e.path()).filter(|p| p.is_file()));
        } else {
            files.push(path.clone());
        }
    }
    files.sort();
    files
}

/// Runs `check` on one file, naming the file if it panics.
pub fn replay_file(target: &str, check: fn(&[u8]), file: &Path) {
    let data = std::fs::read(file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
    let outcome = std::panic::catch_unwind(|| check(&data));
    if let Err(cause) = outcome {
        eprintln!("{target}: {} failed", file.display());
        std::panic::resume_unwind(cause);
    }
}

/// `main` of a target binary built without libFuzzer: replay the files and
/// directories given as arguments.
pub fn replay_main(target: &str, check: fn(&[u8])) {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    if args.is_empty() {
        eprintln!("usage: {target} FILE|DIR...  (replays inputs; fuzz with scripts/fuzz)");
        std::process::exit(2);
    }
    let files = input_files(&args);
    for file in &files {
        replay_file(target, check, file);
    }
    println!("{target}: {} inputs replayed, no failure", files.len());
}
