//! The `faultproc` fixture program (`tests/bin/faultproc.rs`), built on first use.
//!
//! Why not a `[[bin]]` of toolwire (with `env!("CARGO_BIN_EXE_faultproc")`), as before: then
//! `cargo install toolwire` installed a test fixture next to the server. Why not an `[[example]]`
//! found next to the test binary: `cargo test --test it` and `cargo nextest run --test it` build
//! only the selected target, so a filtered run would find no example or, worse, a stale one.
//!
//! So `tests/bin/` is a package of its own (`tests/bin/Cargo.toml`, with its own lock file) and
//! the harness builds it with the cargo that built the tests, into `CARGO_TARGET_TMPDIR` (a
//! target directory of its own, so no lock is shared with an outer `cargo test`), then copies
//! the binary to a name carrying a hash of the package's sources: an edited fixture gets a new
//! binary, an unchanged one is built once for all runs. nextest runs every test in its own
//! process, so several processes may race on a cold start: cargo's lock on the scratch target
//! directory serialises the builds, each process copies into a name of its own and renames it
//! into place (atomic on one file system), and a process that finds the file just uses it.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The fixture's package.
const PACKAGE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/bin");

/// The path of the built `faultproc` (built on the first call in this process when absent).
pub fn faultproc() -> &'static str {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| build().display().to_string())
}

fn build() -> PathBuf {
    let package = Path::new(PACKAGE);
    let mut hasher = DefaultHasher::new();
    for file in ["faultproc.rs", "Cargo.toml", "Cargo.lock"] {
        let path = package.join(file);
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        bytes.hash(&mut hasher);
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("faultproc");
    let target = dir.join(format!("faultproc-{:016x}", hasher.finish()));
    if target.is_file() {
        return target;
    }
    let target_dir = dir.join("target");
    let out = Command::new(env!("CARGO"))
        .args(["build", "--quiet", "--locked", "--manifest-path"])
        .arg(package.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", env!("CARGO")));
    assert!(
        out.status.success(),
        "building {PACKAGE} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let partial = dir.join(format!("partial-{}", std::process::id()));
    std::fs::copy(target_dir.join("debug/faultproc"), &partial).unwrap();
    std::fs::rename(&partial, &target).unwrap();
    target
}
