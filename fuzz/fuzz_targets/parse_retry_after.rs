#![no_main]
//! cargo-fuzz entry point; the target itself is `targets/parse_retry_after.rs` (shared with
//! `tests/it/fuzz_corpus.rs` in the main crate).

#[path = "../targets/parse_retry_after.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));
