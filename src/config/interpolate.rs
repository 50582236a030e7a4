//! `${env:NAME}`, `${env:NAME:-default}` and `${file:PATH}` in tool files, resolved at load.
//!
//! Resolution walks every string of a tool before it is typed, so secrets work in URLs,
//! headers, env and args alike. The resolved values are returned so that later stages can
//! redact them from logs and error messages. `$${` is a literal `${`.

use std::path::Path;

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

/// Values resolved from `${env:}`/`${file:}`: secrets to keep out of logs.
pub type Secrets = Vec<String>;

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
                    match self.resolve_str(s, secrets) {
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

    /// Resolves the references in one string.
    pub fn resolve_str(&self, s: &str, secrets: &mut Secrets) -> Result<String, InterpolateError> {
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
                let value = self.resolve_ref(&body_and_tail[..end])?;
                if !value.is_empty() {
                    secrets.push(value.clone());
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

    fn resolve_ref(&self, body: &str) -> Result<String, InterpolateError> {
        if let Some(spec) = body.strip_prefix("env:") {
            let (name, default) = match spec.split_once(":-") {
                Some((n, d)) => (n, Some(d)),
                None => (spec, None),
            };
            match ((self.env)(name), default) {
                (Some(v), _) => Ok(v),
                (None, Some(d)) => Ok(d.to_owned()),
                (None, None) => Err(InterpolateError::MissingEnv(name.to_owned())),
            }
        } else if let Some(path) = body.strip_prefix("file:") {
            let full = self.base_dir.join(path);
            std::fs::read_to_string(&full)
                .map(|s| s.trim_end_matches(['\n', '\r']).to_owned())
                .map_err(|e| InterpolateError::File {
                    path: path.to_owned(),
                    reason: e.to_string(),
                })
        } else {
            Err(InterpolateError::Unknown(body.to_owned()))
        }
    }
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
}
