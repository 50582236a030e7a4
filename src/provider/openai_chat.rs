//! OpenAI Chat Completions (`POST /v1/chat/completions`), see `docs/providers.md#openai_chat`.
//!
//! Key rules, and why:
//! - Calls are read from `choices[0].message` only (the choice whose `index` is 0, else the
//!   first): with `n > 1` every choice is an alternative answer, so merging them would run tools
//!   the conversation never continues with.
//! - `tool_calls[]` entries are answered by `tool_call_id`, so each must carry a string `id`;
//!   an entry without one is a shape error rather than a call that can never be answered
//!   (OpenAI rejects a follow-up that leaves a `tool_call_id` unanswered).
//! - `type:"custom"` tool calls (free-form text tools) are client-executed like functions and are
//!   answered with the same `role:"tool"` message, so they are calls too; their text `input` is
//!   exposed as the arguments object `{"input": <string>}` (see `common::tool_calls_of`).
//! - The deprecated `message.function_call` is a call without an id (never invented) and is
//!   answered with `{"role":"function","name",…}`: in `format`, a result without an id is always
//!   a legacy `function_call` answer, because `tool_calls` entries always have one.
//! - `finished` comes from the content (no client call), not from `finish_reason`: a forced
//!   `tool_choice` yields `finish_reason:"stop"` with calls present.
//! - `assistant` is `choices[0].message`, cloned verbatim.
//! - Tool messages are text only: returned files are described in the content, and the request
//!   option `files_as_user_message` adds one `user` message with the images after the tool
//!   messages (see [`format()`]).
//!
//! Reading the chat shape and declaring in it are shared with Mistral, Cohere and Ollama, so
//! they live in `provider::common`; this module keeps what only OpenAI Chat does (the legacy
//! `function_call` answer, the files `user` message, `strict` always sent).

use serde_json::{Value, json};

use super::common::{ChatRules, IdRule, StrictKey, declare_chat_shaped, parse_chat_shaped};
use super::{DeclareOptions, DeclareWarning, FormatOptions, ParseError, Parsed, Provider, ToolDeclaration};
use crate::call::{FileKind, ToolResult};

/// Reads an OpenAI Chat Completions body. See the module doc for the rules.
pub fn parse(completion: &Value) -> Result<Parsed, ParseError> {
    parse_chat_shaped(
        completion,
        ChatRules {
            provider: Provider::OpenaiChat,
            ids: IdRule::Required,
            legacy_function_call: true,
        },
    )
}

/// One message per result, in order: `{"role":"tool","tool_call_id","content"}`, or, for the
/// legacy `function_call` (the only call without an id), `{"role":"function","name","content"}`.
///
/// Tool messages hold text only, so each returned file is mentioned by a line
/// `[file: name, type, N bytes]` after the text. With `opts.files_as_user_message`, one `user`
/// message follows ALL the tool messages (a `user` message between them would break the
/// "tool messages answer the tool calls" rule): a text part, then per file a text label and,
/// for PNG/JPEG/GIF/WebP images, an `image_url` part with a data URL.
pub fn format(parsed: &Parsed, results: &[ToolResult], opts: &FormatOptions) -> Vec<Value> {
    let _ = parsed;
    let mut messages: Vec<Value> = results
        .iter()
        .map(|r| match &r.id {
            Some(id) => json!({"role": "tool", "tool_call_id": id, "content": r.model_text_with_file_notes()}),
            None => json!({"role": "function", "name": r.name, "content": r.model_text_with_file_notes()}),
        })
        .collect();
    if opts.files_as_user_message && results.iter().any(|r| !r.files.is_empty()) {
        messages.push(files_user_message(results));
    }
    messages
}

/// The `user` message that carries the files of all results.
fn files_user_message(results: &[ToolResult]) -> Value {
    let mut parts = vec![json!({"type": "text", "text": "Files returned by tool calls:"})];
    for r in results {
        let from = match &r.id {
            Some(id) => format!("from tool call {id} ({})", r.name),
            None => format!("from {}", r.name),
        };
        for file in &r.files {
            parts.push(json!({"type": "text", "text": format!("{} {from}", file.note())}));
            if let FileKind::Image(_) = file.kind() {
                parts.push(json!({"type": "image_url", "image_url": {"url": file.data_url()}}));
            }
        }
    }
    json!({"role": "user", "content": parts})
}

/// `{"type":"function","function":{name, description?, parameters, strict}}`; `strict` is always
/// sent (Chat is non-strict by default). With `opts.strict` the schema goes through
/// [`schema::openai_strict`](super::schema::openai_strict); if that fails the tool is declared with `strict: false` and a warning.
pub fn declare(tools: &[ToolDeclaration<'_>], opts: &DeclareOptions, warnings: &mut Vec<DeclareWarning>) -> Vec<Value> {
    declare_chat_shaped(Provider::OpenaiChat, tools, opts, warnings, StrictKey::Always)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_without_id_is_a_shape_error_when_ids_are_required() {
        let body = json!({"choices": [{"index": 0, "message": {"tool_calls": [
            {"type": "function", "function": {"name": "f", "arguments": "{}"}}]}}]});
        let err = parse(&body).unwrap_err();
        assert!(matches!(
            err,
            ParseError::Shape {
                expected: Provider::OpenaiChat,
                ..
            }
        ));
        assert!(err.to_string().contains("tool_calls[0] has no `id`"), "{err}");
    }
}
