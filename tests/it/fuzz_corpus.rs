//! Replays every committed fuzz corpus (`fuzz/corpus/<target>/*`) through the same target
//! functions that `cargo fuzz` runs (`fuzz/targets/<target>.rs`, compiled into this test
//! with `#[path]`), so seeds and past crashers are checked by every `make test`, on stable, with
//! no fuzzing toolchain. See docs/fuzzing.md.

use std::path::{Path, PathBuf};

#[path = "../../fuzz/targets/load_tools_config.rs"]
#[allow(unreachable_pub, reason = "a fuzz target compiled as a test module")]
mod load_tools_config;
#[path = "../../fuzz/targets/parse_completion.rs"]
#[allow(unreachable_pub, reason = "a fuzz target compiled as a test module")]
mod parse_completion;
#[path = "../../fuzz/targets/parse_request_body.rs"]
#[allow(unreachable_pub, reason = "a fuzz target compiled as a test module")]
mod parse_request_body;
#[path = "../../fuzz/targets/parse_retry_after.rs"]
#[allow(unreachable_pub, reason = "a fuzz target compiled as a test module")]
mod parse_retry_after;
#[path = "../../fuzz/targets/validate_args.rs"]
#[allow(unreachable_pub, reason = "a fuzz target compiled as a test module")]
mod validate_args;

/// The corpus files of `target`, sorted; fails when there are none (a renamed or empty corpus
/// must not pass silently).
fn corpus(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} is empty", dir.display());
    files
}

/// Runs every corpus file through `run`, naming the file that panics.
fn replay(target: &str, run: fn(&[u8])) {
    for file in corpus(target) {
        let data = std::fs::read(&file).unwrap();
        if let Err(panic) = std::panic::catch_unwind(|| run(&data)) {
            let msg = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("(non-string panic)");
            panic!("{target}: {} panicked: {msg}", file.display());
        }
    }
}

#[test]
fn parse_completion_corpus() {
    replay("parse_completion", parse_completion::run);
}

#[test]
fn validate_args_corpus() {
    replay("validate_args", validate_args::run);
}

#[test]
fn load_tools_config_corpus() {
    replay("load_tools_config", load_tools_config::run);
}

#[test]
fn parse_retry_after_corpus() {
    replay("parse_retry_after", parse_retry_after::run);
}

#[test]
fn parse_request_body_corpus() {
    replay("parse_request_body", parse_request_body::run);
}
