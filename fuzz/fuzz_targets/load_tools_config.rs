#![no_main]
//! cargo-fuzz entry point; the target itself is `targets/load_tools_config.rs` (shared with
//! `tests/it/fuzz_corpus.rs` in the main crate).

#[path = "../targets/load_tools_config.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));
