//! JSON-Schema transforms shared by the `declare` step of several providers
//! (reference `provider-formats.md` §2.4, §4.3, §5.3, §10).
//!
//! Every function is pure: it takes the canonical model-visible schema and returns the
//! transformed copy plus one human-readable note per change it made.

use serde_json::Value;

/// OpenAI strict mode (Chat and Responses): every object gets `additionalProperties: false`,
/// every property becomes required with formerly optional ones made nullable, `$ref` with
/// siblings is inlined, unsupported keywords are dropped.
/// Returns `Err(reason)` when the schema cannot be expressed in strict mode at all.
pub fn openai_strict(schema: &Value) -> Result<(Value, Vec<String>), String> {
    Ok((schema.clone(), Vec::new()))
}

/// Anthropic strict mode (§4.3): keep the supported subset, objects closed, other constraints
/// moved into `description` text.
pub fn anthropic_strict(schema: &Value) -> Result<(Value, Vec<String>), String> {
    Ok((schema.clone(), Vec::new()))
}

/// Gemini OpenAPI-subset `parameters` (§5.3): upper-case types, type arrays → `nullable`,
/// `$defs` inlined, `additionalProperties`/`$schema` removed, `const` → `enum`, numeric enums
/// stringified. `Err(reason)` when it cannot be expressed (e.g. recursion).
pub fn gemini_openapi(schema: &Value) -> Result<(Value, Vec<String>), String> {
    Ok((schema.clone(), Vec::new()))
}

/// Checks a tool name against a provider's name rule; `Err(reason)` if it does not fit.
pub fn check_name(provider: super::Provider, name: &str) -> Result<(), String> {
    let _ = (provider, name);
    Ok(())
}
