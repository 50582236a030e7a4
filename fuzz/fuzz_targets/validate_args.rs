#![no_main]
//! cargo-fuzz entry point; the target itself is `targets/validate_args.rs` (shared with
//! `tests/it/fuzz_corpus.rs` in the main crate).

#[path = "../targets/validate_args.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));
