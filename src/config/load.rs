//! Reads `tools.d/`: every `*.toml`, `*.yaml`/`*.yml` and `*.json` file, sorted by name, not
//! recursive. Each file holds a `tools` list. The output is untyped-but-parsed tools plus every
//! problem found so far; `registry` does the semantic checks.
//!
//! Hidden files (`.…`) and other extensions are skipped, which also skips the `..data`
//! machinery of Kubernetes ConfigMap mounts while following their file symlinks.

use std::path::{Path, PathBuf};

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::Diagnostic;
use super::interpolate::{Resolver, Secrets};
use super::tool_file::{McpConfig, ToolConfig, ToolFile, known_keys_at};

/// One tool as parsed from a file, before semantic checks.
#[derive(Debug)]
pub struct RawTool {
    pub file: PathBuf,
    /// Position in the file's `tools` list.
    pub index: usize,
    pub config: ToolConfig,
    /// Key paths whose `${…}` references could not be resolved (already reported); later
    /// checks stay silent about them instead of reporting the same key twice.
    pub unresolved: Vec<String>,
}

/// One `[[mcp]]` server as parsed from a file, before semantic checks.
#[derive(Debug)]
pub struct RawMcp {
    pub file: PathBuf,
    /// Position in the file's `mcp` list.
    pub index: usize,
    pub config: McpConfig,
    /// Key paths whose `${…}` references could not be resolved (already reported).
    pub unresolved: Vec<String>,
}

/// Everything read from a tools directory.
#[derive(Debug, Default)]
pub struct LoadedDir {
    pub tools: Vec<RawTool>,
    /// MCP servers declared next to the tools.
    pub mcp: Vec<RawMcp>,
    pub diagnostics: Vec<Diagnostic>,
    /// Values resolved from `${env:}`/`${file:}`, with their references and files.
    pub secrets: Secrets,
    /// The files read, in load order.
    pub files: Vec<PathBuf>,
    /// Content hash of the files read (names and bytes) and of the resolved secret values: the
    /// tool set's version. A rotated secret is a new version, so a reload swaps it in.
    pub version: String,
}

/// The file formats a tools directory may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormat {
    Toml,
    Yaml,
    Json,
}

impl FileFormat {
    /// The format for a file name, by extension.
    pub fn for_path(path: &Path) -> Option<Self> {
        match path.extension()?.to_str()? {
            "toml" => Some(FileFormat::Toml),
            "yaml" | "yml" => Some(FileFormat::Yaml),
            "json" => Some(FileFormat::Json),
            _ => None,
        }
    }
}

/// Reads every tool file in `dir`. `env` looks up environment variables for `${env:}`.
pub fn load_dir(dir: &Path, env: &dyn Fn(&str) -> Option<String>) -> LoadedDir {
    let mut out = LoadedDir::default();
    let files = match list_files(dir) {
        Ok(files) => files,
        Err(e) => {
            out.diagnostics.push(Diagnostic::error(
                dir,
                None,
                "",
                format!("cannot read the tools directory: {e}"),
            ));
            out.version = hash_files(&[], &[]);
            return out;
        }
    };
    let mut contents = Vec::new();
    for path in files {
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                load_file(&path, &text, env, &mut out);
                contents.push((path.clone(), text));
                out.files.push(path);
            }
            Err(e) => out
                .diagnostics
                .push(Diagnostic::error(&path, None, "", format!("cannot read the file: {e}"))),
        }
    }
    out.version = hash_files(&contents, &out.secrets);
    out
}

/// The tool files of `dir`, sorted by file name.
pub fn list_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let hidden = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_none_or(|n| n.starts_with('.'));
        // `is_file` follows symlinks, as ConfigMap mounts need.
        if !hidden && path.is_file() && FileFormat::for_path(&path).is_some() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Parses one file's text and appends its tools and problems to `out`.
pub fn load_file(path: &Path, text: &str, env: &dyn Fn(&str) -> Option<String>, out: &mut LoadedDir) {
    let Some(format) = FileFormat::for_path(path) else {
        return;
    };
    let value = match parse_text(format, text) {
        Ok(v) => v,
        Err((message, pos)) => {
            let mut d = Diagnostic::error(path, None, "", message);
            if let Some((line, col)) = pos {
                d = d.at(line, col);
            }
            out.diagnostics.push(d);
            return;
        }
    };
    let mut ignored = Vec::new();
    let file: Result<ToolFile, _> = serde_ignored::deserialize(&value, |p| ignored.push(key_path(&p)));
    for key in ignored {
        out.diagnostics.push(unknown_key(path, None, &key));
    }
    let (tools, servers) = match file {
        Ok(ToolFile { tools: None, mcp: None }) => {
            out.diagnostics.push(Diagnostic::error(
                path,
                None,
                "tools",
                "missing `tools` list (or `mcp` list)",
            ));
            return;
        }
        Ok(ToolFile { tools, mcp }) => (tools.unwrap_or_default(), mcp.unwrap_or_default()),
        Err(e) => {
            out.diagnostics.push(Diagnostic::error(
                path,
                None,
                "",
                format!("expected a `tools` list: {e}"),
            ));
            return;
        }
    };
    let base_dir = path.parent().unwrap_or(Path::new("."));
    let resolver = Resolver { env, base_dir };
    for (index, tool) in tools.into_iter().enumerate() {
        if let Some((config, unresolved)) = parse_entry::<ToolConfig>(path, "tools", index, tool, &resolver, out) {
            out.tools.push(RawTool {
                file: path.to_owned(),
                index,
                config,
                unresolved,
            });
        }
    }
    for (index, server) in servers.into_iter().enumerate() {
        if let Some((config, unresolved)) = parse_entry::<McpConfig>(path, "mcp", index, server, &resolver, out) {
            out.mcp.push(RawMcp {
                file: path.to_owned(),
                index,
                config,
                unresolved,
            });
        }
    }
}

/// One entry of the `tools` or `mcp` list: `${…}` resolved (except in the schema and
/// description, which go to the model and must never carry secrets), unknown keys reported,
/// typed. `None` when it cannot be typed (the problem is reported).
fn parse_entry<T: serde::de::DeserializeOwned>(
    path: &Path,
    list: &str,
    index: usize,
    mut entry: Value,
    resolver: &Resolver<'_>,
    out: &mut LoadedDir,
) -> Option<(T, Vec<String>)> {
    let prefix = format!("{list}[{index}]");
    let name = entry.get("name").and_then(Value::as_str).map(str::to_owned);
    if !entry.is_object() {
        let what = if list == "mcp" { "each MCP server" } else { "each tool" };
        out.diagnostics.push(Diagnostic::error(
            path,
            None,
            &prefix,
            format!("{what} must be a table/object"),
        ));
        return None;
    }
    let mut errors = Vec::new();
    if let Value::Object(map) = &mut entry {
        for (k, v) in map.iter_mut() {
            if k != "parameters" && k != "description" {
                resolver.resolve_tree(v, &format!("{prefix}.{k}"), &mut out.secrets, &mut errors);
            }
        }
    }
    let mut unresolved = Vec::new();
    for (p, e) in errors {
        out.diagnostics
            .push(Diagnostic::error(path, name.as_deref(), &p, e.to_string()));
        unresolved.push(p);
    }
    let mut ignored = Vec::new();
    let typed = serde_path_to_error::deserialize::<_, T>(serde_ignored::Deserializer::new(
        &entry,
        &mut |p: serde_ignored::Path<'_>| ignored.push(key_path(&p)),
    ));
    for key in ignored {
        out.diagnostics
            .push(unknown_key(path, name.as_deref(), &format!("{prefix}.{key}")));
    }
    match typed {
        Ok(config) => Some((config, unresolved)),
        Err(e) => {
            let key = e.path().to_string();
            let key = if key == "." { prefix } else { format!("{prefix}.{key}") };
            out.diagnostics
                .push(Diagnostic::error(path, name.as_deref(), key, e.inner().to_string()));
            None
        }
    }
}

/// Parses text of `format` into JSON; `Err((message, Some((line, column))))`.
pub fn parse_text(format: FileFormat, text: &str) -> Result<Value, (String, Option<(usize, usize)>)> {
    match format {
        FileFormat::Json => {
            serde_json::from_str(text).map_err(|e| (format!("invalid JSON: {e}"), Some((e.line(), e.column()))))
        }
        FileFormat::Yaml => serde_yaml::from_str(text).map_err(|e| {
            let pos = e.location().map(|l| (l.line(), l.column()));
            (format!("invalid YAML: {e}"), pos)
        }),
        FileFormat::Toml => {
            let table: toml::Table = toml::from_str(text).map_err(|e| {
                let pos = e.span().map(|s| line_col(text, s.start));
                (format!("invalid TOML: {}", e.message()), pos)
            })?;
            serde_json::to_value(table).map_err(|e| (format!("invalid TOML: {e}"), None))
        }
    }
}

/// A key path as written in diagnostics (`http.method`, `args[2]`): serde_ignored's own
/// display marks `Option`s with `?`, which means nothing to a user.
fn key_path(p: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path;
    match p {
        Path::Root => String::new(),
        Path::Seq { parent, index } => format!("{}[{index}]", key_path(parent)),
        Path::Map { parent, key } => {
            let parent = key_path(parent);
            if parent.is_empty() {
                key.clone()
            } else {
                format!("{parent}.{key}")
            }
        }
        Path::Some { parent } | Path::NewtypeStruct { parent } | Path::NewtypeVariant { parent } => key_path(parent),
    }
}

/// 1-based line and column of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

fn unknown_key(path: &Path, tool: Option<&str>, key: &str) -> Diagnostic {
    let (parent, last) = key.rsplit_once('.').unwrap_or(("", key));
    let mut message = format!("unknown key `{last}`");
    let best = known_keys_at(parent)
        .iter()
        .map(|k| (strsim::levenshtein(k, last), k))
        .filter(|(d, _)| *d <= 2)
        .min();
    if let Some((_, k)) = best {
        message.push_str(&format!("; did you mean `{k}`?"));
    }
    Diagnostic::error(path, tool, key, message)
}

/// The version: SHA-256 over the files, plus — when there are `${}` values — a keyed hash of
/// them. The key is random per process, so the version (shown unauthenticated by `/readyz`)
/// cannot be used to test guesses of a secret offline; within one process it is stable, which
/// is all reload needs.
fn hash_files(files: &[(PathBuf, String)], secrets: &[super::interpolate::Secret]) -> String {
    let mut hasher = Sha256::new();
    if !secrets.is_empty() {
        let mut inner = Sha256::new();
        inner.update(process_key());
        for s in secrets {
            inner.update((s.value.len() as u64).to_le_bytes());
            inner.update(s.value.as_bytes());
        }
        hasher.update(b"secrets");
        hasher.update(inner.finalize());
    }
    for (path, text) in files {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        hasher.update((name.len() as u64).to_le_bytes());
        hasher.update(name.as_bytes());
        hasher.update((text.len() as u64).to_le_bytes());
        hasher.update(text.as_bytes());
    }
    hasher.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// A random key, fixed for the life of the process.
fn process_key() -> &'static [u8; 32] {
    static KEY: std::sync::OnceLock<[u8; 32]> = std::sync::OnceLock::new();
    KEY.get_or_init(rand::random)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn toml_syntax_error_has_line_and_column() {
        let mut out = LoadedDir::default();
        load_file(
            Path::new("a.toml"),
            "[[tools]]\nname = \"x\"\ntimeout = \n",
            &no_env,
            &mut out,
        );
        let d = &out.diagnostics[0];
        assert_eq!(d.line, Some(3), "{d}");
        assert!(d.column.is_some());
    }

    #[test]
    fn unknown_keys_get_suggestions_and_paths() {
        let mut out = LoadedDir::default();
        load_file(
            Path::new("a.yaml"),
            "tools:\n  - name: x\n    timout: 5s\n    http: {url: 'http://a', methd: GET}\n",
            &no_env,
            &mut out,
        );
        let msgs: Vec<String> = out
            .diagnostics
            .iter()
            .map(|d| format!("{} {}", d.path, d.message))
            .collect();
        assert!(
            msgs.contains(&"tools[0].timout unknown key `timout`; did you mean `timeout`?".to_owned()),
            "{msgs:?}"
        );
        assert!(
            msgs.contains(&"tools[0].http.methd unknown key `methd`; did you mean `method`?".to_owned()),
            "{msgs:?}"
        );
        assert_eq!(out.tools.len(), 1);
    }

    #[test]
    fn type_error_names_the_key() {
        let mut out = LoadedDir::default();
        load_file(
            Path::new("a.json"),
            r#"{"tools": [{"name": "x", "retry": {"max_attempts": "three"}}]}"#,
            &no_env,
            &mut out,
        );
        assert_eq!(out.diagnostics[0].path, "tools[0].retry.max_attempts");
        assert!(out.tools.is_empty());
    }

    #[test]
    fn line_col_counts_from_one() {
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
        assert_eq!(line_col("ab", 0), (1, 1));
    }

    #[test]
    fn version_covers_resolved_secret_values() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("key"), "first").unwrap();
        std::fs::write(
            dir.path().join("a.toml"),
            "[[tools]]\nname = \"x\"\n[tools.http]\nurl = \"http://a/\"\nheaders = { K = \"${file:key}\" }\n",
        )
        .unwrap();
        let v1 = load_dir(dir.path(), &no_env).version;
        assert_eq!(load_dir(dir.path(), &no_env).version, v1, "stable within a process");
        std::fs::write(dir.path().join("key"), "second").unwrap();
        assert_ne!(load_dir(dir.path(), &no_env).version, v1);
    }
}
