//! `${env:NAME}`, `${env:NAME:-default}` and `${file:PATH}` in tool files, resolved at load.
//!
//! Resolution walks every string of a tool before it is typed, so secrets work in URLs,
//! headers, env and args alike. The resolved values are returned so that later stages can
//! redact them from logs, error messages, diagnostics and outputs, with the reference text that
//! produced them (diagnostics quote `${env:TOKEN}`, never the value) and the `${file:}` paths
//! (watched for rotation). `$${` is a literal `${`.
//!
//! `${file:}` reads regular files only, at most [`MAX_SECRET_FILE_BYTES`], and never blocks: a
//! FIFO, a device or a directory is an error, not a reload that hangs.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// A `${…}` reference that cannot be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InterpolateError {
    #[error("environment variable `{0}` is not set and has no default (write `${{env:{0}:-default}}`)")]
    MissingEnv(String),
    #[error("cannot read `${{file:{path}}}`: {reason}")]
    File { path: String, reason: String },
    #[error("unclosed `${{` (write `$${{` for a literal `${{`)")]
    Unclosed,
    #[error("unknown reference `${{{0}}}`: use `${{env:NAME}}`, `${{env:NAME:-default}}` or `${{file:PATH}}`")]
    Unknown(String),
}

/// Where `${…}` references get their values. Production reads the process environment and the
/// file system; tests pass their own environment.
pub struct Resolver<'a> {
    /// Looks an environment variable up.
    pub env: &'a dyn Fn(&str) -> Option<String>,
    /// Directory that relative `${file:}` paths are resolved against (the tool file's folder).
    pub base_dir: &'a Path,
}

/// Largest `${file:}` target: secrets are small; a bigger file is a mistake (a wrong path), and
/// reading it on every reload would be costly.
pub const MAX_SECRET_FILE_BYTES: u64 = 64 * 1024;

/// One resolved `${…}` reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Secret {
    /// The resolved value (non-empty).
    pub value: String,
    /// The reference as written, e.g. `${env:TOKEN}`: what diagnostics show instead.
    pub reference: String,
    /// The file read, for `${file:}`.
    pub file: Option<PathBuf>,
}

/// Values resolved from `${env:}`/`${file:}`: secrets to keep out of logs.
pub type Secrets = Vec<Secret>;

impl Resolver<'_> {
    /// Resolves every string leaf of `value` in place; returns `(key path, error)` for each
    /// failure and appends resolved values to `secrets`.
    pub fn resolve_tree(
        &self,
        value: &mut Value,
        path: &str,
        secrets: &mut Secrets,
        errors: &mut Vec<(String, InterpolateError)>,
    ) {
        match value {
            Value::String(s) => {
                if s.contains('$') {
                    match self.resolve_tracked(s, secrets) {
                        Ok(r) => *s = r,
                        Err(e) => errors.push((path.to_owned(), e)),
                    }
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter_mut().enumerate() {
                    self.resolve_tree(item, &format!("{path}[{i}]"), secrets, errors);
                }
            }
            Value::Object(map) => {
                for (k, v) in map.iter_mut() {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    self.resolve_tree(v, &p, secrets, errors);
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }

    /// Resolves the references in one string; appends the resolved values to `secrets`.
    pub fn resolve_str(&self, s: &str, secrets: &mut Vec<String>) -> Result<String, InterpolateError> {
        let mut tracked = Vec::new();
        let out = self.resolve_tracked(s, &mut tracked)?;
        secrets.extend(tracked.into_iter().map(|t| t.value));
        Ok(out)
    }

    /// Resolves the references in one string; appends what each resolved to to `secrets`.
    pub fn resolve_tracked(&self, s: &str, secrets: &mut Secrets) -> Result<String, InterpolateError> {
        let mut out = String::with_capacity(s.len());
        let mut rest = s;
        while let Some(pos) = rest.find('$') {
            out.push_str(&rest[..pos]);
            let after = &rest[pos + 1..];
            if let Some(tail) = after.strip_prefix("${") {
                out.push_str("${");
                rest = tail;
            } else if let Some(body_and_tail) = after.strip_prefix('{') {
                let end = body_and_tail.find('}').ok_or(InterpolateError::Unclosed)?;
                let body = &body_and_tail[..end];
                let (value, file) = self.resolve_ref(body)?;
                if !value.is_empty() {
                    secrets.push(Secret {
                        value: value.clone(),
                        reference: format!("${{{body}}}"),
                        file,
                    });
                }
                out.push_str(&value);
                rest = &body_and_tail[end + 1..];
            } else {
                out.push('$');
                rest = after;
            }
        }
        out.push_str(rest);
        Ok(out)
    }

    fn resolve_ref(&self, body: &str) -> Result<(String, Option<PathBuf>), InterpolateError> {
        if let Some(spec) = body.strip_prefix("env:") {
            let (name, default) = match spec.split_once(":-") {
                Some((n, d)) => (n, Some(d)),
                None => (spec, None),
            };
            match ((self.env)(name), default) {
                (Some(v), _) => Ok((v, None)),
                (None, Some(d)) => Ok((d.to_owned(), None)),
                (None, None) => Err(InterpolateError::MissingEnv(name.to_owned())),
            }
        } else if let Some(path) = body.strip_prefix("file:") {
            let full = self.base_dir.join(path);
            read_secret_file(&full)
                .map(|s| (s.trim_end_matches(['\n', '\r']).to_owned(), Some(full)))
                .map_err(|reason| InterpolateError::File {
                    path: path.to_owned(),
                    reason,
                })
        } else {
            Err(InterpolateError::Unknown(body.to_owned()))
        }
    }
}

/// Reads a `${file:}` target: a regular file (symlinks followed) of at most
/// [`MAX_SECRET_FILE_BYTES`], UTF-8. Opened non-blocking, and checked again on the open handle,
/// so a FIFO (or a file swapped for one) fails instead of blocking the reload forever.
fn read_secret_file(path: &Path) -> Result<String, String> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let not_regular = "not a regular file (a FIFO, device or directory cannot hold a secret)";
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err(not_regular.to_owned());
    }
    let too_big = || format!("larger than {MAX_SECRET_FILE_BYTES} bytes (the `${{file:}}` limit)");
    if meta.len() > MAX_SECRET_FILE_BYTES {
        return Err(too_big());
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(path)
        .map_err(|e| e.to_string())?;
    if !file.metadata().map_err(|e| e.to_string())?.is_file() {
        return Err(not_regular.to_owned());
    }
    let mut bytes = Vec::new();
    file.take(MAX_SECRET_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_SECRET_FILE_BYTES {
        return Err(too_big());
    }
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        (name == "TOKEN").then(|| "s3cret".to_owned())
    }

    #[test]
    fn resolves_env_defaults_files_and_escapes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("key"), "filekey\n").unwrap();
        let r = Resolver {
            env: &env,
            base_dir: dir.path(),
        };
        let mut secrets = Vec::new();
        let out = r
            .resolve_str(
                "Bearer ${env:TOKEN} ${env:NOPE:-dflt} ${file:key} $${env:X} $5",
                &mut secrets,
            )
            .unwrap();
        assert_eq!(out, "Bearer s3cret dflt filekey ${env:X} $5");
        assert_eq!(secrets, vec!["s3cret", "dflt", "filekey"]);
    }

    #[test]
    fn reports_missing_env_unreadable_file_and_unknown() {
        let dir = tempfile::tempdir().unwrap();
        let r = Resolver {
            env: &env,
            base_dir: dir.path(),
        };
        let mut s = Vec::new();
        assert_eq!(
            r.resolve_str("${env:NOPE}", &mut s),
            Err(InterpolateError::MissingEnv("NOPE".into()))
        );
        assert!(matches!(
            r.resolve_str("${file:nope}", &mut s),
            Err(InterpolateError::File { .. })
        ));
        assert!(matches!(
            r.resolve_str("${vault:x}", &mut s),
            Err(InterpolateError::Unknown(_))
        ));
        assert_eq!(r.resolve_str("${env:X", &mut s), Err(InterpolateError::Unclosed));
    }

    #[test]
    fn records_references_and_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("key"), "filekey\n").unwrap();
        let r = Resolver {
            env: &env,
            base_dir: dir.path(),
        };
        let mut secrets = Vec::new();
        r.resolve_tracked("${env:TOKEN}/${file:key}", &mut secrets).unwrap();
        assert_eq!(secrets[0].reference, "${env:TOKEN}");
        assert_eq!(secrets[0].file, None);
        assert_eq!(secrets[1].reference, "${file:key}");
        assert_eq!(secrets[1].file.as_deref(), Some(dir.path().join("key").as_path()));
    }

    #[test]
    fn file_secrets_are_small_regular_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::fs::write(dir.path().join("big"), vec![b'k'; MAX_SECRET_FILE_BYTES as usize + 1]).unwrap();
        std::fs::write(dir.path().join("ok"), vec![b'k'; MAX_SECRET_FILE_BYTES as usize]).unwrap();
        let r = Resolver {
            env: &env,
            base_dir: dir.path(),
        };
        let reason = |p: &str| match r.resolve_str(&format!("${{file:{p}}}"), &mut Vec::new()) {
            Err(InterpolateError::File { reason, .. }) => reason,
            other => panic!("{other:?}"),
        };
        assert!(reason("d").contains("not a regular file"));
        assert!(reason("big").contains("larger than"));
        assert_eq!(
            r.resolve_str("${file:ok}", &mut Vec::new()).unwrap().len(),
            MAX_SECRET_FILE_BYTES as usize
        );
    }
}
