//! Mistral chat completions (`POST /v1/chat/completions`), see `docs/providers.md#mistral`.
//!
//! The wire shape is OpenAI Chat's, so parsing reuses the chat-shape reader of
//! `provider::common`. Differences, and why:
//! - `function.arguments` is a JSON string **or** an object (`Union[Dict, str]` in the SDK);
//!   both are normalised by `Arguments::from_value`.
//! - A tool call id is optional in Mistral's types (and `tool_call_id` is optional on the tool
//!   message), so a call without one keeps "no id" and its result omits `tool_call_id`.
//! - No legacy `function_call`.
//! - The result message names the function: `{"role":"tool","name","content","tool_call_id"}`.
//! - Declarations use the Chat shape; `strict` is sent only when asked for, and the schema is
//!   passed as is (`docs/providers.md#mistral`: no strict-dialect transform is documented for
//!   Mistral).
//! - `finished` is "no client call"; `assistant` is `choices[0].message`, verbatim.
//! - Files: the tool message is sent as text, so each returned file is only described by a
//!   line `[file: name, type, N bytes]` after the text; the bytes do not reach the model.

use serde_json::{Map, Value, json};

use super::common::{ChatRules, IdRule, StrictKey, declare_chat_shaped, parse_chat_shaped};
use super::{DeclareOptions, DeclareWarning, ParseError, Parsed, Provider, ToolDeclaration};
use crate::call::ToolResult;

/// Reads a Mistral chat completion. See the module doc for the rules.
pub fn parse(completion: &Value) -> Result<Parsed, ParseError> {
    parse_chat_shaped(
        completion,
        ChatRules {
            provider: Provider::Mistral,
            ids: IdRule::Optional,
            legacy_function_call: false,
        },
    )
}

/// One `{"role":"tool","name","content","tool_call_id"}` per result, in order; `tool_call_id`
/// only when the call had an id.
pub fn format(parsed: &Parsed, results: &[ToolResult]) -> Vec<Value> {
    let _ = parsed;
    results
        .iter()
        .map(|r| {
            let mut m = Map::new();
            m.insert("role".into(), json!("tool"));
            m.insert("name".into(), json!(r.name));
            m.insert("content".into(), json!(r.model_text_with_file_notes()));
            if let Some(id) = &r.id {
                m.insert("tool_call_id".into(), json!(id));
            }
            Value::Object(m)
        })
        .collect()
}

/// Chat-shaped `{"type":"function","function":{name, description?, parameters, strict?}}`;
/// `strict: true` only with `opts.strict`, schema unchanged.
pub fn declare(tools: &[ToolDeclaration<'_>], opts: &DeclareOptions, warnings: &mut Vec<DeclareWarning>) -> Vec<Value> {
    declare_chat_shaped(Provider::Mistral, tools, opts, warnings, StrictKey::WhenAsked)
}
