//! Bounding what goes back to the model (`docs/execution.md#outputs`): JSON stays JSON when it
//! fits; anything over `max_output_bytes` is cut, marked in the content, and flagged
//! `truncated: true`.

use serde_json::Value;

/// The output as the model will see it, and whether it was cut.
pub fn bound(value: Value, backend_truncated: bool, max_bytes: usize) -> (Value, bool) {
    match value {
        Value::String(s) => {
            let total = s.len();
            if total <= max_bytes && !backend_truncated {
                return (Value::String(s), false);
            }
            (Value::String(cut(&s, max_bytes, total, backend_truncated)), true)
        }
        other => {
            // Measured without building the text: the usual small answer fits.
            if fits(&other, max_bytes) {
                return (other, backend_truncated);
            }
            // A cut JSON document is no longer JSON: hand the model the cut text, clearly marked.
            let text = other.to_string();
            let total = text.len();
            (Value::String(cut(&text, max_bytes, total, backend_truncated)), true)
        }
    }
}

/// Whether `value` as compact JSON takes at most `max_bytes`; stops counting once it does not.
fn fits(value: &Value, max_bytes: usize) -> bool {
    /// Counts what would be written; fails once past the limit, which ends serialisation.
    struct Counter {
        left: usize,
    }
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.left = self
                .left
                .checked_sub(buf.len())
                .ok_or_else(|| std::io::Error::other("over the limit"))?;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    serde_json::to_writer(&mut Counter { left: max_bytes }, value).is_ok()
}

/// The first part of `s` that fits `max_bytes` together with the marker.
fn cut(s: &str, max_bytes: usize, total: usize, backend_truncated: bool) -> String {
    let more = if backend_truncated { "+" } else { "" };
    let marker = format!("\n[toolwire: output truncated, {{shown}} of {total}{more} bytes shown]");
    let budget = max_bytes.saturating_sub(marker.len() + 8);
    let mut end = budget.min(s.len());
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    let head = s.get(..end).unwrap_or_default();
    format!("{head}{}", marker.replace("{shown}", &end.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn small_outputs_pass_unchanged() {
        assert_eq!(bound(json!({"a": 1}), false, 100), (json!({"a": 1}), false));
        assert_eq!(bound(json!("hi"), false, 100), (json!("hi"), false));
    }

    #[test]
    fn long_text_is_cut_with_a_marker_within_the_limit() {
        let (v, t) = bound(json!("é".repeat(1000)), false, 200);
        let s = v.as_str().unwrap();
        assert!(t);
        assert!(s.len() <= 200, "{}", s.len());
        assert!(s.contains("output truncated") && s.contains("of 2000 bytes"));
    }

    #[test]
    fn oversized_json_becomes_marked_text() {
        let big = json!({"items": vec![1; 1000]});
        let (v, t) = bound(big, false, 100);
        assert!(t);
        assert!(v.as_str().unwrap().starts_with("{\"items\":[1,1"));
    }

    /// The size check agrees with the text at the limit and one byte below it.
    #[test]
    fn json_of_exactly_the_limit_fits_and_one_byte_more_does_not() {
        let v = json!({"a": [1, 2, "é\n"], "b": null});
        let len = v.to_string().len();
        assert_eq!(bound(v.clone(), false, len), (v.clone(), false));
        let (cut, t) = bound(v, false, len - 1);
        assert!(t && cut.is_string(), "{cut}");
    }

    #[test]
    fn backend_truncation_is_always_marked() {
        let (v, t) = bound(json!("short"), true, 100);
        assert!(t);
        assert!(v.as_str().unwrap().contains("5+ bytes"));
    }
}
