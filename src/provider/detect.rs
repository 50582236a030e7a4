//! Placeholder: replaced by the real module.

use serde_json::Value;

use super::Provider;

/// Detects the provider from a completion's shape.
pub fn detect(completion: &Value) -> Option<Provider> {
    let _ = completion;
    None
}
