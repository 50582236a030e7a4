//! Keeps secrets out of what toolwire writes: error messages that reach the model, and logs.
//!
//! The needles are the values resolved from `${env:}`/`${file:}` at load and the string values
//! of the request `state`. Very short values (under [`MIN_LEN`] bytes) are not redacted: they
//! would mangle ordinary words and hide nothing worth hiding.

use serde_json::Value;

use crate::call::ToolError;

/// Shortest value that is redacted.
pub const MIN_LEN: usize = 4;

/// What replaces a secret.
pub const MASK: &str = "[redacted]";

/// A set of values to mask, longest first (so a secret containing another is masked whole).
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    needles: Vec<String>,
}

impl Redactor {
    /// Masks `secrets` and every string in `state`.
    pub fn new<'a>(secrets: impl IntoIterator<Item = &'a String>, state: &Value) -> Self {
        let mut needles: Vec<String> = secrets.into_iter().filter(|s| s.len() >= MIN_LEN).cloned().collect();
        collect_strings(state, &mut needles, 0);
        needles.sort_by_key(|n| std::cmp::Reverse(n.len()));
        needles.dedup();
        Redactor { needles }
    }

    /// `text` with every needle masked.
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for n in &self.needles {
            if out.contains(n.as_str()) {
                out = out.replace(n.as_str(), MASK);
            }
        }
        out
    }

    /// Masks an error's message and details in place.
    pub fn redact_error(&self, e: &mut ToolError) {
        if self.needles.is_empty() {
            return;
        }
        e.message = self.redact(&e.message);
        for d in &mut e.details {
            d.message = self.redact(&d.message);
        }
    }
}

fn collect_strings(v: &Value, out: &mut Vec<String>, depth: usize) {
    if depth > 32 {
        return;
    }
    match v {
        Value::String(s) if s.len() >= MIN_LEN => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| collect_strings(x, out, depth + 1)),
        Value::Object(o) => o.values().for_each(|x| collect_strings(x, out, depth + 1)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn masks_secrets_and_state_strings_longest_first() {
        let secrets = vec!["s3cr3t-token".to_owned(), "s3cr3t".to_owned(), "ab".to_owned()];
        let r = Redactor::new(&secrets, &json!({"user": {"email": "a@b.example"}, "n": 5}));
        assert_eq!(
            r.redact("auth s3cr3t-token failed for a@b.example (ab)"),
            "auth [redacted] failed for [redacted] (ab)"
        );
    }
}
