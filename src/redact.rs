//! Keeps secrets out of what toolwire writes: tool outputs and error messages that reach the
//! model, diagnostics, and logs.
//!
//! The needles are the values resolved from `${env:}`/`${file:}` at load, plus their encoded
//! forms (base64 at every alignment, standard and URL-safe; percent-encoding), and — for error
//! messages only — the string values of the request `state`. They are built once per registry
//! into one Aho-Corasick automaton, so masking a result is one pass over its text however many
//! secrets there are, and no work at all when there are none.
//!
//! Very short values (under [`MIN_LEN`] bytes) are not redacted: they would mangle ordinary
//! words and hide nothing worth hiding.
//!
//! Text that was cut (a body excerpt, a stderr tail, an output read up to its cap) can end with
//! the first bytes of a secret or start with its last bytes; such edges of at least
//! [`PARTIAL_MIN`] bytes are masked too.

use std::borrow::Cow;
use std::sync::Arc;

use aho_corasick::{AhoCorasick, MatchKind};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use percent_encoding::{AsciiSet, CONTROLS, NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::Value;

use crate::backend::BackendError;
use crate::call::ToolError;

/// Shortest value that is redacted.
pub const MIN_LEN: usize = 4;

/// Shortest encoded form (base64, percent-encoding) that is redacted: shorter ones would match
/// ordinary base64 data by chance.
pub const ENCODED_MIN_LEN: usize = 8;

/// Shortest cut-off piece of a secret masked at the start or end of a cut text.
pub const PARTIAL_MIN: usize = 6;

/// What replaces a secret.
pub const MASK: &str = "[redacted]";

/// Percent-encoding as URL components use it: everything but the RFC 3986 unreserved set.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// `application/x-www-form-urlencoded` (query pairs as HTTP clients write them; `+` for spaces).
const FORM: &AsciiSet = &NON_ALPHANUMERIC.remove(b'*').remove(b'-').remove(b'.').remove(b'_');

/// What a raw URL query keeps as-is (the WHATWG query set).
const QUERY: &AsciiSet = &CONTROLS.add(b' ').add(b'"').add(b'#').add(b'<').add(b'>').add(b'\'');

/// The registry's secrets, ready to mask. Cheap to clone (shared); the default masks nothing.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    inner: Option<Arc<Needles>>,
}

#[derive(Debug)]
struct Needles {
    /// Every needle (secrets and their encoded forms), leftmost-longest. `None` only if the
    /// automaton could not be built (absurd sizes); then `list` is searched one by one.
    ac: Option<AhoCorasick>,
    /// The same needles, longest first.
    list: Vec<String>,
    /// The secrets themselves, for the cut edges.
    raw: Vec<String>,
}

impl Redactor {
    /// A redactor for `secrets` (the resolved `${}` values). Built once per registry.
    pub fn new<'a>(secrets: impl IntoIterator<Item = &'a String>) -> Self {
        let mut raw: Vec<String> = secrets.into_iter().filter(|s| s.len() >= MIN_LEN).cloned().collect();
        raw.sort_by_key(|n| std::cmp::Reverse(n.len()));
        raw.dedup();
        if raw.is_empty() {
            return Redactor::default();
        }
        let mut list = raw.clone();
        for s in &raw {
            list.extend(encoded_forms(s));
        }
        list.sort_by_key(|n| std::cmp::Reverse(n.len()));
        list.dedup();
        let ac = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&list)
            .ok();
        Redactor {
            inner: Some(Arc::new(Needles { ac, list, raw })),
        }
    }

    /// True when there is nothing to mask.
    pub fn is_empty(&self) -> bool {
        self.inner.is_none()
    }

    /// `text` with every secret and encoded secret masked.
    pub fn redact<'t>(&self, text: &'t str) -> Cow<'t, str> {
        match &self.inner {
            None => Cow::Borrowed(text),
            Some(n) => n.replace(text),
        }
    }

    /// Like [`Redactor::redact`], and also masks a piece of a secret of at least
    /// [`PARTIAL_MIN`] bytes that the text ends with (its start was kept by a cut) or starts
    /// with (its end was kept by a cut).
    pub fn redact_cut(&self, text: &str) -> String {
        let Some(n) = &self.inner else {
            return text.to_owned();
        };
        let full = n.replace(text);
        mask_edges(&full, &n.raw)
    }

    /// A successful output with every string leaf (and object key) masked. A text output that
    /// was cut at the read cap (`truncated`) also gets its edges masked.
    pub fn redact_output(&self, value: Value, truncated: bool) -> Value {
        if self.is_empty() {
            return value;
        }
        match value {
            Value::String(s) if truncated => Value::String(self.redact_cut(&s)),
            other => self.redact_value(other),
        }
    }

    /// Every string leaf and object key of `value` masked.
    pub fn redact_value(&self, mut value: Value) -> Value {
        if let Some(n) = &self.inner {
            n.value(&mut value);
        }
        value
    }

    /// Masks an error's message and details in place: the secrets, their encoded forms, cut
    /// pieces at the edges, and every string of the request `state` (at least [`MIN_LEN`]).
    pub fn redact_error(&self, e: &mut ToolError, state: &Value) {
        let texts = std::iter::once(&mut e.message).chain(e.details.iter_mut().map(|d| &mut d.message));
        self.redact_texts(texts, state);
    }

    /// Masks the texts a failed attempt carries (body excerpt, stderr, I/O messages) in place,
    /// before they are cut for the model and before they are logged.
    pub fn redact_backend_error(&self, e: &mut BackendError, state: &Value) {
        self.redact_texts(e.texts_mut(), state);
    }

    fn redact_texts<'s>(&self, texts: impl IntoIterator<Item = &'s mut String>, state: &Value) {
        let mut state_needles = Vec::new();
        collect_strings(state, &mut state_needles, 0);
        if self.is_empty() && state_needles.is_empty() {
            return;
        }
        state_needles.sort_by_key(|n| std::cmp::Reverse(n.len()));
        state_needles.dedup();
        for text in texts {
            let mut out = self.redact_cut(text);
            for n in &state_needles {
                if out.contains(n.as_str()) {
                    out = out.replace(n.as_str(), MASK);
                }
            }
            *text = out;
        }
    }
}

impl Needles {
    fn replace<'t>(&self, text: &'t str) -> Cow<'t, str> {
        match &self.ac {
            Some(ac) => {
                if !ac.is_match(text) {
                    return Cow::Borrowed(text);
                }
                let mut out = String::with_capacity(text.len());
                ac.replace_all_with(text, &mut out, |_, _, dst| {
                    dst.push_str(MASK);
                    true
                });
                Cow::Owned(out)
            }
            None => {
                let mut out = Cow::Borrowed(text);
                for n in &self.list {
                    if out.contains(n.as_str()) {
                        out = Cow::Owned(out.replace(n.as_str(), MASK));
                    }
                }
                out
            }
        }
    }

    /// Masks in place; allocates only for texts that hold a needle (a map is rebuilt only when
    /// one of its keys does), so an output without secrets costs one scan of its strings.
    fn value(&self, value: &mut Value) {
        match value {
            Value::String(s) => {
                if let Cow::Owned(masked) = self.replace(s) {
                    *s = masked;
                }
            }
            Value::Array(a) => a.iter_mut().for_each(|v| self.value(v)),
            Value::Object(o) => {
                if o.keys().any(|k| matches!(self.replace(k), Cow::Owned(_))) {
                    let old = std::mem::take(o);
                    for (k, v) in old {
                        let k = match self.replace(&k) {
                            Cow::Borrowed(_) => k,
                            Cow::Owned(masked) => masked,
                        };
                        o.insert(k, v);
                    }
                }
                o.values_mut().for_each(|v| self.value(v));
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
}

/// The encoded forms of a secret that a backend may echo: percent-encoded (upper- and
/// lower-case hex, all non-alphanumerics or only non-unreserved ones, `+` for spaces), and
/// base64 (standard and URL-safe, with and without padding) of the secret alone and of the
/// secret at each of the three byte alignments inside longer data (`Basic` credentials such
/// as `user:secret` included). Only the characters that depend on the secret alone are kept for
/// the aligned forms.
pub fn encoded_forms(secret: &str) -> Vec<String> {
    let mut out = Vec::new();
    for set in [NON_ALPHANUMERIC, COMPONENT, FORM, QUERY] {
        let upper = utf8_percent_encode(secret, set).to_string();
        out.push(upper.to_ascii_lowercase_hex());
        out.push(upper.replace("%20", "+"));
        out.push(upper);
    }
    let bytes = secret.as_bytes();
    for engine in [&STANDARD, &URL_SAFE] {
        out.push(engine.encode(bytes));
    }
    for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
        out.push(engine.encode(bytes));
        for skip in 0..3 {
            let Some(rest) = bytes.get(skip..) else { continue };
            let whole = rest.len() / 3 * 3;
            out.push(engine.encode(&rest[..whole]));
        }
    }
    out.retain(|f| f.len() >= ENCODED_MIN_LEN && f != secret);
    out.sort();
    out.dedup();
    out
}

/// Lower-case hex digits in `%XX` escapes (some encoders write `%2f`).
trait LowerHex {
    fn to_ascii_lowercase_hex(&self) -> String;
}

impl LowerHex for String {
    fn to_ascii_lowercase_hex(&self) -> String {
        let mut out = String::with_capacity(self.len());
        let mut hex_left = 0;
        for c in self.chars() {
            if c == '%' {
                hex_left = 2;
                out.push(c);
            } else if hex_left > 0 {
                hex_left -= 1;
                out.push(c.to_ascii_lowercase());
            } else {
                out.push(c);
            }
        }
        out
    }
}

/// Masks the longest piece (at least [`PARTIAL_MIN`] bytes, shorter than the whole secret) of
/// any secret that `text` ends with as the secret's start, or starts with as the secret's end.
fn mask_edges(text: &str, secrets: &[String]) -> String {
    let bytes = text.as_bytes();
    let mut tail_from = bytes.len();
    let mut head_to = 0;
    for s in secrets.iter().filter(|s| s.len() > PARTIAL_MIN) {
        let sb = s.as_bytes();
        let longest = (s.len() - 1).min(bytes.len());
        // Trailing: text[p..] is a prefix of the secret.
        let first = bytes.len() - longest;
        for p in first..=bytes.len().saturating_sub(PARTIAL_MIN) {
            if p >= tail_from {
                break;
            }
            if bytes[p] == sb[0] && sb.starts_with(&bytes[p..]) && text.is_char_boundary(p) {
                tail_from = p;
                break;
            }
        }
        // Leading: text[..q] is a suffix of the secret.
        for q in (PARTIAL_MIN..=longest).rev() {
            if q <= head_to {
                break;
            }
            if sb.ends_with(&bytes[..q]) && text.is_char_boundary(q) {
                head_to = q;
                break;
            }
        }
    }
    if tail_from == bytes.len() && head_to == 0 {
        return text.to_owned();
    }
    let head_to = head_to.min(tail_from);
    let mut out = String::with_capacity(text.len());
    if head_to > 0 {
        out.push_str(MASK);
    }
    out.push_str(&text[head_to..tail_from]);
    if tail_from < bytes.len() {
        out.push_str(MASK);
    }
    out
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
    use crate::call::ErrorKind;
    use serde_json::json;

    fn r(secrets: &[&str]) -> Redactor {
        let owned: Vec<String> = secrets.iter().map(|s| (*s).to_owned()).collect();
        Redactor::new(&owned)
    }

    #[test]
    fn masks_secrets_and_state_strings_longest_first() {
        let red = r(&["s3cr3t-token", "s3cr3t", "ab"]);
        let mut e = ToolError::new(
            ErrorKind::BackendStatus,
            "auth s3cr3t-token failed for a@b.example (ab)",
            false,
        );
        red.redact_error(&mut e, &json!({"user": {"email": "a@b.example"}, "n": 5}));
        assert_eq!(e.message, "auth [redacted] failed for [redacted] (ab)");
    }

    #[test]
    fn masks_base64_at_every_alignment_and_percent_encoding() {
        let secret = "tok_9f8e7d6c5b4a/+?&=x";
        let red = r(&[secret]);
        for prefix in ["", "a", "ab", "abc", "user:"] {
            for engine in [&STANDARD, &URL_SAFE, &STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
                let enc = engine.encode(format!("{prefix}{secret}"));
                let out = red.redact(&format!("Authorization: Basic {enc}")).into_owned();
                assert!(out.contains(MASK), "{prefix:?} {enc} → {out}");
                // At most two characters of the encoded secret survive on each side.
                assert!(!out.contains(&enc[enc.len() / 2 - 2..enc.len() / 2 + 2]), "{out}");
            }
        }
        let pct = utf8_percent_encode(secret, NON_ALPHANUMERIC).to_string();
        assert_eq!(red.redact(&format!("?k={pct}&x=1")), "?k=[redacted]&x=1");
        let lower = pct.to_ascii_lowercase_hex();
        assert_eq!(red.redact(&format!("?k={lower}")), "?k=[redacted]");
    }

    #[test]
    fn masks_cut_edges_only_when_long_enough() {
        let red = r(&["SECRETVALUE123"]);
        assert_eq!(red.redact_cut("body: xx SECRETVAL"), "body: xx [redacted]");
        assert_eq!(red.redact_cut("LUE123 and more"), "[redacted] and more");
        // Five bytes are below PARTIAL_MIN: left alone.
        assert_eq!(red.redact_cut("body: SECRE"), "body: SECRE");
        assert_eq!(red.redact_cut("no secret here"), "no secret here");
        assert_eq!(red.redact_cut("SECRETVALUE123"), "[redacted]");
    }

    #[test]
    fn masks_json_leaves_and_keys_and_skips_work_without_needles() {
        let red = r(&["hunter22"]);
        let v = red.redact_value(json!({"echo": {"authorization": "Bearer hunter22"}, "hunter22": [1, "x hunter22"]}));
        assert_eq!(
            v,
            json!({"echo": {"authorization": "Bearer [redacted]"}, "[redacted]": [1, "x [redacted]"]})
        );
        assert!(Redactor::default().is_empty());
        assert!(r(&["ab"]).is_empty());
        assert_eq!(Redactor::default().redact_value(json!("hunter22")), json!("hunter22"));
    }
}
