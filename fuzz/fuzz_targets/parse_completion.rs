#![no_main]
//! cargo-fuzz entry point; the target itself is `targets/parse_completion.rs` (shared with
//! `tests/it/fuzz_corpus.rs` in the main crate).

#[path = "../targets/parse_completion.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));
