//! Cohere Chat v2 (`POST /v2/chat`), see `docs/providers.md#cohere`.
//!
//! Key rules, and why:
//! - Calls are `message.tool_calls[]` in the OpenAI-chat entry shape (`function.arguments` is a
//!   JSON string), read with the shared chat-shape reader (`provider::common`).
//!   `message.tool_plan` is only echoed.
//! - Every call needs its `id`: the tool message's `tool_call_id` is required, so an entry
//!   without one is a shape error rather than a call that cannot be answered.
//! - `finished` is "no client call"; `stop_reason` is the top-level `finish_reason`
//!   (`TOOL_CALL`, `COMPLETE`, …); `assistant` is `message`, verbatim.
//! - Results: `{"role":"tool","tool_call_id","content":[…]}`. Cohere has no error flag, so a
//!   success is a `document` content block (documents feed citations) and a failure is a
//!   `text` block whose text states the error.
//! - Files: tool content blocks are `text` and `document` (text data) only, so each returned
//!   file is only described by a line `[file: name, type, N bytes]`; the bytes do not reach
//!   the model.
//! - Declarations use the Chat shape without a per-tool `strict` (Cohere's `strict_tools` is a
//!   request-level flag); asking for strict yields one warning per tool.

use serde_json::{Value, json};

use super::common::{IdRule, StrictKey, declare_chat_shaped, parse_message_shaped};
use super::{DeclareOptions, DeclareWarning, ParseError, Parsed, Provider, ToolDeclaration};
use crate::call::ToolResult;

const P: Provider = Provider::Cohere;

/// Reads a Cohere v2 chat response. See the module doc for the rules.
pub fn parse(completion: &Value) -> Result<Parsed, ParseError> {
    parse_message_shaped(completion, P, IdRule::Required, "finish_reason")
}

/// One `{"role":"tool","tool_call_id","content":[block]}` per result, in order: a
/// `{"type":"document","document":{"data": <text>}}` block for a success, a
/// `{"type":"text","text": <error text>}` block for a failure.
pub fn format(parsed: &Parsed, results: &[ToolResult]) -> Vec<Value> {
    let _ = parsed;
    results
        .iter()
        .map(|r| {
            let text = r.model_text_with_file_notes();
            let block = if r.is_ok() {
                json!({"type": "document", "document": {"data": text}})
            } else {
                json!({"type": "text", "text": text})
            };
            let mut m = serde_json::Map::new();
            m.insert("role".into(), json!("tool"));
            if let Some(id) = &r.id {
                m.insert("tool_call_id".into(), json!(id));
            }
            m.insert("content".into(), json!([block]));
            Value::Object(m)
        })
        .collect()
}

/// Chat-shaped `{"type":"function","function":{name, description?, parameters}}`, never a
/// `strict` key; with `opts.strict` one warning per tool points at `strict_tools`.
pub fn declare(tools: &[ToolDeclaration<'_>], opts: &DeclareOptions, warnings: &mut Vec<DeclareWarning>) -> Vec<Value> {
    declare_chat_shaped(
        P,
        tools,
        opts,
        warnings,
        StrictKey::Never {
            why: "Cohere has no per-tool strict flag; declared without `strict` (set `strict_tools: true` on the request instead)",
        },
    )
}
