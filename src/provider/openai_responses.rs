//! OpenAI Responses (`POST /v1/responses`), see `docs/providers.md#openai_responses`.
//!
//! Key rules, and why:
//! - `output[]` is a list of typed items. Client calls are the `function_call` items (and
//!   `custom_tool_call` items, free-form tools that are client-executed too, with the arguments
//!   object `{"input": <string>}`). A call's id is its **`call_id`** (`call_…`), not the item
//!   `id` (`fc_…`): `function_call_output.call_id` must reference it.
//! - Hosted-tool items (`web_search_call`, `file_search_call`, `code_interpreter_call`,
//!   `image_generation_call`, `mcp_call`, `computer_call`, `local_shell_call`, … — every type
//!   ending in `_call` other than `function_call`/`custom_tool_call`) were already run by OpenAI
//!   or belong to other protocols: they go to `server_side`, never to `calls`.
//! - There is no "wants tools" status (`status` is `completed` either way), so `finished` is
//!   "no client call"; `stop_reason` is the raw `status`.
//! - `assistant` is the whole `output` array, verbatim and in order: stateless callers must
//!   re-send reasoning items (with `encrypted_content`) and the `function_call` items before
//!   the outputs, or the API errors.
//! - Files a tool returned make `output` a list: `input_text` with the text, then an
//!   `input_image` per image, an `input_file` per PDF (both as data URLs), and an `input_text`
//!   line describing any other file.
//! - Declarations are flat (`{"type":"function","name",…}`), and `strict` is always sent
//!   explicitly because the API now treats an omitted `strict` as strict mode.

use serde_json::{Map, Value, json};

use super::common::{
    custom_input, declare_each, function_object, name_field, non_null, openai_strict_parameters, root_object,
    shape_error,
};
use super::{DeclareOptions, DeclareWarning, ParseError, Parsed, Provider, ToolDeclaration};
use crate::call::{Arguments, FileKind, ToolCall, ToolResult};

const P: Provider = Provider::OpenaiResponses;

/// Reads a Responses body. See the module doc for the rules.
pub fn parse(completion: &Value) -> Result<Parsed, ParseError> {
    let root = root_object(P, completion)?;
    let output = root
        .get("output")
        .and_then(Value::as_array)
        .ok_or_else(|| shape_error(P, "the body has no `output` array"))?;
    let mut calls = Vec::new();
    let mut server_side = Vec::new();
    for (i, item) in output.iter().enumerate() {
        let Some(kind) = item.get("type").and_then(Value::as_str) else {
            continue; // Untyped items are only echoed.
        };
        match kind {
            "function_call" | "custom_tool_call" => {
                let at = format!("output[{i}]");
                let item = item
                    .as_object()
                    .ok_or_else(|| shape_error(P, format!("{at} is not an object")))?;
                let call_id = call_id_of(item, &at)?;
                let name = name_field(P, item, &at)?;
                let arguments = if kind == "function_call" {
                    Arguments::from_value(item.get("arguments"))
                } else {
                    custom_input(non_null(item.get("input")))
                };
                calls.push(ToolCall {
                    id: Some(call_id),
                    name,
                    arguments,
                });
            }
            hosted if hosted.ends_with("_call") => server_side.push(item.clone()),
            _ => {}
        }
    }
    Ok(Parsed {
        finished: calls.is_empty(),
        calls,
        stop_reason: non_null(root.get("status")).cloned(),
        assistant: Value::Array(output.clone()),
        server_side,
    })
}

fn call_id_of(item: &Map<String, Value>, at: &str) -> Result<String, ParseError> {
    item.get("call_id")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| {
            shape_error(
                P,
                format!("{at}.call_id is missing or not a string, so its output could not reference it"),
            )
        })
}

/// Is `call_id` a `custom_tool_call` item of the assistant output? Those are answered with
/// `custom_tool_call_output` items.
fn is_custom_call(assistant: &Value, call_id: &str) -> bool {
    assistant.as_array().is_some_and(|items| {
        items.iter().any(|item| {
            item.get("type").and_then(Value::as_str) == Some("custom_tool_call")
                && item.get("call_id").and_then(Value::as_str) == Some(call_id)
        })
    })
}

/// One input item per result, in order:
/// `{"type":"function_call_output","call_id","output": <text>}` (`custom_tool_call_output` for
/// a custom tool call). A result without an id (not produced by `parse`) gets no `call_id`.
pub fn format(parsed: &Parsed, results: &[ToolResult]) -> Vec<Value> {
    results
        .iter()
        .map(|r| {
            let kind = match &r.id {
                Some(id) if is_custom_call(&parsed.assistant, id) => "custom_tool_call_output",
                _ => "function_call_output",
            };
            let mut item = Map::new();
            item.insert("type".into(), json!(kind));
            if let Some(id) = &r.id {
                item.insert("call_id".into(), json!(id));
            }
            item.insert("output".into(), output_of(r));
            Value::Object(item)
        })
        .collect()
}

/// The `output` of one item: the text, or, when the tool returned files, a list of an
/// `input_text` item followed by an `input_image` (data URL) per JPEG/PNG/GIF/WebP image, an
/// `input_file` (data URL) per PDF, and an `input_text` line describing any other file.
fn output_of(r: &ToolResult) -> Value {
    if r.files.is_empty() {
        return json!(r.model_text());
    }
    let mut items = vec![json!({"type": "input_text", "text": r.model_text()})];
    for file in &r.files {
        items.push(match file.kind() {
            FileKind::Image(_) => json!({"type": "input_image", "image_url": file.data_url()}),
            FileKind::Pdf => json!({"type": "input_file", "filename": file.filename, "file_data": file.data_url()}),
            FileKind::Text | FileKind::Other => json!({"type": "input_text", "text": file.note()}),
        });
    }
    Value::Array(items)
}

/// Flat `{"type":"function","name","description"?,"parameters","strict": bool}` per tool.
/// `strict` is always explicit; with `opts.strict` the schema goes through
/// `schema::openai_strict` (on failure: `strict: false` plus a warning).
pub fn declare(tools: &[ToolDeclaration<'_>], opts: &DeclareOptions, warnings: &mut Vec<DeclareWarning>) -> Vec<Value> {
    declare_each(P, tools, warnings, |tool, warnings| {
        let (parameters, strict) = openai_strict_parameters(tool.name, tool.parameters, opts.strict, warnings);
        let mut entry = Map::new();
        entry.insert("type".into(), json!("function"));
        entry.extend(function_object(tool, parameters, Some(strict)));
        Value::Object(entry)
    })
}
