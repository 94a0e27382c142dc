//! Fuzz target `binary_parse`: see [`fuzz_checks::binary_parse`] for the invariants.
//!
//! Under `cargo fuzz` (`--cfg fuzzing`) this is a libFuzzer target. In a plain
//! build it replays the files or directories named on the command line, so a
//! crash file can be rerun on stable: `cargo run -p ferrocache-fuzz --bin binary_parse -- FILE`.

#![cfg_attr(fuzzing, no_main)]

#[cfg(fuzzing)]
libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_checks::binary_parse(data));

#[cfg(not(fuzzing))]
fn main() {
    fuzz_checks::replay_main("binary_parse", fuzz_checks::binary_parse);
}
