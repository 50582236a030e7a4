//! Fuzz target `load_tools_config`: bytes as the text of a `tools.d/` file, read as each of
//! TOML, YAML and JSON (`load_file`, which calls `parse_text`), then checked by
//! `Registry::build`. Invariant: never a panic; a successful build has unique, findable names
//! and no load-time errors.
//!
//! `${file:…}` references are neutralised before loading (`${nofile:…}`, an "unknown
//! reference" error) so that the fuzzer never reads the file system (`${file:/dev/zero}` would
//! read forever; tool files are operator-trusted, see docs/fuzzing.md). `${env:…}` resolves
//! against an empty environment.

use std::path::Path;
use std::sync::LazyLock;

use toolwire::config::ServerConfig;
use toolwire::config::load::{LoadedDir, load_file};
use toolwire::config::server::ToolDefaults;
use toolwire::registry::Registry;

static DEFAULTS: LazyLock<ToolDefaults> = LazyLock::new(|| {
    ServerConfig::from_figment(ServerConfig::figment_without_env(None).expect("figment"))
        .expect("default server config")
        .defaults
});

pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let text = text.replace("file:", "nofile:");
    for name in ["fuzz.toml", "fuzz.yaml", "fuzz.json"] {
        let mut loaded = LoadedDir::default();
        load_file(Path::new(name), &text, &|_| None, &mut loaded);
        let load_errors = loaded.diagnostics.iter().any(|d| d.is_error());
        match Registry::build(loaded, &DEFAULTS) {
            Ok(reg) => {
                assert!(!load_errors, "{name}: built despite load errors");
                for tool in reg.tools() {
                    assert!(reg.get(&tool.name).is_some_and(|t| std::sync::Arc::ptr_eq(t, tool)));
                }
            }
            Err(diagnostics) => assert!(diagnostics.iter().any(|d| d.is_error()), "{name}: Err without an error"),
        }
    }
}
