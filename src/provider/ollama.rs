//! Ollama native chat (`POST /api/chat`, `stream:false`), see `docs/providers.md#ollama`.
//!
//! Key rules, and why:
//! - Calls are `message.tool_calls[]` (`{id?, function: {index?, name, arguments: object}}`),
//!   read with the shared chat-shape reader (`provider::common`). `arguments` is an object (a
//!   JSON string is parsed too).
//! - Only newer servers send an `id`; a call without one keeps "no id" (never invented) and its
//!   result has `tool_name` only, which is how older servers match results.
//! - `done_reason` is `"stop"` with or without calls, so `finished` is "no client call";
//!   `stop_reason` is the raw `done_reason`; `assistant` is `message`, verbatim.
//! - Results: `{"role":"tool","tool_name","content"}` plus `tool_call_id` when the call had an
//!   id. No error flag: the content states the error.
//! - Files: each returned file is described by a line `[file: name, type, N bytes]` in the
//!   content; PNG and JPEG images also go, base64, in the message's `images` array (the server
//!   feeds the images of every message, tool messages included, to vision models). Other
//!   files do not reach the model.
//! - Declarations use the Chat shape without `strict` (Ollama has none); asking for strict
//!   yields one warning per tool.

use serde_json::{Map, Value, json};

use super::common::{IdRule, StrictKey, declare_chat_shaped, parse_message_shaped};
use super::{DeclareOptions, DeclareWarning, ParseError, Parsed, Provider, ToolDeclaration};
use crate::call::{FileKind, ImageFormat, ToolFile, ToolResult};

const P: Provider = Provider::Ollama;

/// Reads an Ollama `/api/chat` response. See the module doc for the rules.
pub fn parse(completion: &Value) -> Result<Parsed, ParseError> {
    parse_message_shaped(completion, P, IdRule::Optional, "done_reason")
}

/// One `{"role":"tool","tool_name","content"}` per result, in order, with `tool_call_id` only
/// when the call had an id.
pub fn format(parsed: &Parsed, results: &[ToolResult]) -> Vec<Value> {
    let _ = parsed;
    results
        .iter()
        .map(|r| {
            let mut m = Map::new();
            m.insert("role".into(), json!("tool"));
            m.insert("tool_name".into(), json!(r.name));
            m.insert("content".into(), json!(r.model_text_with_file_notes()));
            let images: Vec<String> = r
                .files
                .iter()
                .filter(|f| matches!(f.kind(), FileKind::Image(ImageFormat::Png | ImageFormat::Jpeg)))
                .map(ToolFile::base64)
                .collect();
            if !images.is_empty() {
                m.insert("images".into(), json!(images));
            }
            if let Some(id) = &r.id {
                m.insert("tool_call_id".into(), json!(id));
            }
            Value::Object(m)
        })
        .collect()
}

/// Chat-shaped `{"type":"function","function":{name, description?, parameters}}`, no `strict`.
pub fn declare(tools: &[ToolDeclaration<'_>], opts: &DeclareOptions, warnings: &mut Vec<DeclareWarning>) -> Vec<Value> {
    declare_chat_shaped(
        P,
        tools,
        opts,
        warnings,
        StrictKey::Never {
            why: "Ollama has no strict mode; declared without `strict`",
        },
    )
}
