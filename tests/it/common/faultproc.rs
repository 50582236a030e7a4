//! The `faultproc` fixture program (`tests/bin/faultproc.rs`), compiled on first use.
//!
//! Why not a `[[bin]]` of the package (with `env!("CARGO_BIN_EXE_faultproc")`), as before: then
//! `cargo install toolwire` installed a test fixture next to the server. Why not an `[[example]]`
//! found next to the test binary: `cargo test --test it` and `cargo nextest run --test it` build
//! only the selected target, so a filtered run would find no example or, worse, a stale one.
//!
//! So the test harness builds it itself, with the `rustc` of the toolchain that built the tests
//! (next to `$CARGO`, else `$RUSTC`, else `rustc` on `PATH`), into `CARGO_TARGET_TMPDIR` under a
//! name carrying a hash of the source: an edited fixture gets a new binary, an unchanged one is
//! compiled once for all runs. nextest runs every test in its own process, so several processes
//! may race on a cold start: each compiles in its own scratch directory and renames the result into place
//! (atomic on one file system), and a process that finds the file uses it.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The fixture's source, relative to the package root.
const SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/bin/faultproc.rs");

/// The path of the compiled `faultproc` (built on the first call in this process when absent).
pub fn faultproc() -> &'static str {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| build().display().to_string())
}

fn rustc() -> PathBuf {
    let next_to_cargo = Path::new(env!("CARGO")).with_file_name("rustc");
    if next_to_cargo.is_file() {
        return next_to_cargo;
    }
    std::env::var_os("RUSTC").map_or_else(|| PathBuf::from("rustc"), PathBuf::from)
}

fn build() -> PathBuf {
    let source = std::fs::read(SOURCE).unwrap_or_else(|e| panic!("cannot read {SOURCE}: {e}"));
    let rustc = rustc();
    let mut hasher = DefaultHasher::new();
    source.hash(&mut hasher);
    rustc.hash(&mut hasher);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("faultproc");
    let target = dir.join(format!("faultproc-{:016x}", hasher.finish()));
    if target.is_file() {
        return target;
    }
    // A directory of its own: rustc writes its intermediate files next to the output.
    let scratch = dir.join(format!("partial-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    let partial = scratch.join("faultproc");
    let out = Command::new(&rustc)
        .args([
            "--edition",
            "2024",
            "--crate-name",
            "faultproc",
            "--crate-type",
            "bin",
            "-C",
            "opt-level=1",
        ])
        .args(["-D", "warnings", "-F", "unsafe_code", "-o"])
        .arg(&partial)
        .arg(SOURCE)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", rustc.display()));
    assert!(
        out.status.success(),
        "compiling {SOURCE} with {} failed:\n{}",
        rustc.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::rename(&partial, &target).unwrap();
    let _ = std::fs::remove_dir_all(&scratch);
    target
}
