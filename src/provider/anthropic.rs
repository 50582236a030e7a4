//! Anthropic Messages API (`POST /v1/messages`, see `docs/providers.md#anthropic`).
//!
//! - **parse**: the response's `content[]` holds typed blocks. Only `type:"tool_use"` blocks
//!   are client calls (`id`, `name`, `input` object) — also when they carry a `caller`
//!   (programmatic tool calling: the code-execution container asks the *client* to run the
//!   tool). `server_tool_use`, `mcp_tool_use` and every `*_tool_result` block ran inside the API:
//!   they are reported in [`Parsed::server_side`] and never executed.
//! - **finished** is decided from the content: no client call *and* `stop_reason` is not
//!   `pause_turn` (a paused long-running turn must be re-sent as is to let the model continue).
//! - **assistant** is `{"role":"assistant","content": <content verbatim>}`, the shape of
//!   `Message.to_param()`: thinking blocks and their signatures, `redacted_thinking`, server tool
//!   blocks, citations and unknown fields must go back exactly as received.
//! - **format**: ONE `user` message with one `tool_result` block per call, in call order and
//!   nothing else (Anthropic rejects text placed before the results and results split over
//!   several messages); failures carry `"is_error": true` and the error text as content.
//!   Files a tool returned turn `content` into a list: the text block, then an `image` block
//!   per JPEG/PNG/GIF/WebP image, a base64 `document` per PDF, a plain-text `document` per
//!   UTF-8 `text/*` file, and a text line describing any other file.
//! - **declare**: `{name, description?, input_schema, strict?}`; strict mode goes through
//!   [`schema::anthropic_strict`](super::schema::anthropic_strict), and a schema it cannot express is declared non-strict.

use serde_json::{Map, Value, json};

use super::common::{
    anthropic_strict_parameters, declare_each, name_and_description, non_null, result_for, shape_error,
};
use super::{DeclareOptions, DeclareWarning, ParseError, Parsed, Provider, ToolDeclaration};
use crate::call::{Arguments, FileKind, ToolCall, ToolResult};

const P: Provider = Provider::Anthropic;

/// Is this block type run by Anthropic itself (echoed, never executed)?
fn is_server_side(block_type: &str) -> bool {
    block_type != "tool_use" && (block_type.ends_with("_tool_use") || block_type.ends_with("_tool_result"))
}

/// Reads a Messages API response body.
///
/// `stop_reason` is taken raw; an absent or `null` value gives `None`. A `tool_use` block
/// without a string `id` or `name` cannot be answered, so it is a shape error rather than a call.
pub fn parse(completion: &Value) -> Result<Parsed, ParseError> {
    let body = completion
        .as_object()
        .ok_or_else(|| shape_error(P, "the body is not a JSON object"))?;
    let content = match body.get("content") {
        Some(Value::Array(blocks)) => blocks,
        Some(_) => return Err(shape_error(P, "`content` is not an array of content blocks")),
        None => return Err(shape_error(P, "missing `content` array")),
    };

    let mut calls = Vec::new();
    let mut server_side = Vec::new();
    for (i, block) in content.iter().enumerate() {
        let Some(block_type) = block.get("type").and_then(Value::as_str) else {
            continue;
        };
        if block_type == "tool_use" {
            let id = block
                .get("id")
                .and_then(Value::as_str)
                .ok_or_else(|| shape_error(P, format!("content[{i}] is a tool_use block without a string `id`")))?;
            let name = block
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| shape_error(P, format!("content[{i}] is a tool_use block without a string `name`")))?;
            calls.push(ToolCall {
                id: Some(id.to_owned()),
                name: name.to_owned(),
                arguments: Arguments::from_value(block.get("input")),
            });
        } else if is_server_side(block_type) {
            server_side.push(block.clone());
        }
    }

    let stop_reason = non_null(body.get("stop_reason")).cloned();
    let paused = stop_reason.as_ref().and_then(Value::as_str) == Some("pause_turn");
    Ok(Parsed {
        finished: calls.is_empty() && !paused,
        calls,
        stop_reason,
        assistant: json!({"role": "assistant", "content": content.clone()}),
        server_side,
    })
}

/// One `user` message with a `tool_result` block per call (`results[i]` answers
/// `parsed.calls[i]`); empty when there is no call (also for `pause_turn`).
///
/// Ids come from the calls, so every `tool_use` is answered exactly once and in order even if
/// `results` is out of step; a call without a result is answered with an `internal` error.
pub fn format(parsed: &Parsed, results: &[ToolResult]) -> Vec<Value> {
    if parsed.calls.is_empty() {
        return Vec::new();
    }
    let blocks: Vec<Value> = parsed
        .calls
        .iter()
        .enumerate()
        .map(|(i, call)| {
            let result = result_for(results, i, call);
            let mut block = Map::new();
            block.insert("type".into(), json!("tool_result"));
            block.insert("tool_use_id".into(), json!(call.id));
            block.insert("content".into(), result_content(&result));
            if !result.is_ok() {
                block.insert("is_error".into(), json!(true));
            }
            Value::Object(block)
        })
        .collect();
    vec![json!({"role": "user", "content": blocks})]
}

/// The `content` of one `tool_result`: the text, or, when the tool returned files, a list of a
/// text block followed by one block per file (images as `image`, PDFs as base64 `document`,
/// UTF-8 `text/*` as a plain-text `document`, anything else as a text line describing it:
/// Anthropic has no generic binary block).
fn result_content(result: &ToolResult) -> Value {
    if result.files.is_empty() {
        return json!(result.model_text());
    }
    let mut blocks = vec![json!({"type": "text", "text": result.model_text()})];
    for file in &result.files {
        let block = match (file.kind(), file.text()) {
            (FileKind::Image(_), _) => json!({"type": "image", "source": {
                "type": "base64", "media_type": file.media_type(), "data": file.base64()}}),
            (FileKind::Pdf, _) => json!({"type": "document", "title": file.filename, "source": {
                "type": "base64", "media_type": "application/pdf", "data": file.base64()}}),
            (FileKind::Text, Some(text)) => json!({"type": "document", "title": file.filename, "source": {
                "type": "text", "media_type": "text/plain", "data": text}}),
            _ => json!({"type": "text", "text": file.note()}),
        };
        blocks.push(block);
    }
    Value::Array(blocks)
}

/// `{name, description?, input_schema, strict?}` per tool.
///
/// A name that fails [`schema::check_name`](super::schema::check_name) drops the tool. With `opts.strict` the schema goes
/// through [`schema::anthropic_strict`](super::schema::anthropic_strict) (each note becomes a `changed` warning); if it cannot be
/// expressed the tool is declared without `strict`, with a warning saying so.
pub fn declare(tools: &[ToolDeclaration<'_>], opts: &DeclareOptions, warnings: &mut Vec<DeclareWarning>) -> Vec<Value> {
    declare_each(P, tools, warnings, |tool, warnings| {
        let (input_schema, strict) = anthropic_strict_parameters(tool.name, tool.parameters, opts.strict, warnings);
        let mut entry = name_and_description(tool);
        entry.insert("input_schema".into(), input_schema);
        if strict {
            entry.insert("strict".into(), json!(true));
        }
        Value::Object(entry)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::Declared;
    use crate::provider::common::decl;

    fn params() -> Value {
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
    }

    #[test]
    fn declare_plain_tool() {
        let p = params();
        let Declared { tools, warnings } = Provider::Anthropic.declare(
            &[decl("get_weather", "Weather for a city", &p)],
            &DeclareOptions::default(),
        );
        assert_eq!(
            tools,
            vec![json!({"name": "get_weather", "description": "Weather for a city", "input_schema": p})]
        );
        assert!(warnings.is_empty());
    }

    #[test]
    fn declare_strict_sets_flag_and_omits_empty_description() {
        let p = params();
        let opts = DeclareOptions {
            strict: true,
            ..DeclareOptions::default()
        };
        let declared = Provider::Anthropic.declare(&[decl("t", "", &p)], &opts);
        assert_eq!(declared.tools.len(), 1);
        let tool = &declared.tools[0];
        assert_eq!(tool["strict"], json!(true));
        assert!(tool.get("description").is_none());
        assert!(tool["input_schema"].is_object());
        // Field order matters to nobody, but the documented order is kept.
        let keys: Vec<&String> = tool.as_object().map(|m| m.keys().collect()).unwrap_or_default();
        assert_eq!(keys, ["name", "input_schema", "strict"]);
    }

    #[test]
    fn declare_without_strict_has_no_strict_key() {
        let p = params();
        let declared = Provider::Anthropic.declare(&[decl("t", "d", &p)], &DeclareOptions::default());
        assert!(declared.tools[0].get("strict").is_none());
    }

    #[test]
    fn parse_rejects_bodies_without_content() {
        for body in [
            json!(null),
            json!([]),
            json!({"type": "message"}),
            json!({"content": "x"}),
        ] {
            let err = parse(&body).err();
            assert!(
                matches!(
                    err,
                    Some(ParseError::Shape {
                        expected: Provider::Anthropic,
                        ..
                    })
                ),
                "{body}"
            );
        }
    }

    #[test]
    fn pause_turn_is_not_finished() {
        let body = json!({"type": "message", "content": [{"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}}], "stop_reason": "pause_turn"});
        let parsed = parse(&body).ok();
        let parsed = parsed.as_ref();
        assert_eq!(parsed.map(|p| p.finished), Some(false));
        assert_eq!(parsed.map(|p| p.calls.len()), Some(0));
        assert_eq!(parsed.map(|p| p.server_side.len()), Some(1));
        assert_eq!(parsed.map(|p| format(p, &[]).len()), Some(0));
    }

    #[test]
    fn tool_use_without_id_is_a_shape_error() {
        let body = json!({"content": [{"type": "tool_use", "name": "t", "input": {}}]});
        assert!(parse(&body).is_err());
    }
}
