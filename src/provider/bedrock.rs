//! Amazon Bedrock Converse (`POST /model/{modelId}/converse`, see
//! `docs/providers.md#bedrock`).
//!
//! - **parse**: the turn is `output.message`; its `content[]` is a union of single-key blocks.
//!   Blocks with a `toolUse` key are client calls (`toolUseId`, `name`, `input` object) unless
//!   `toolUse.type` is `"server_tool_use"` (a built-in tool such as Nova grounding, run by
//!   Bedrock). Those, and the `toolResult` blocks Bedrock puts beside them in the same
//!   assistant output, go to [`Parsed::server_side`] and are never executed.
//! - **finished** = no client call (decided from the content, not from `stopReason`, which is
//!   kept raw).
//! - **assistant** is `output.message` verbatim: `reasoningContent` with its signature must come
//!   back unchanged for Claude thinking with tools.
//! - **format**: ONE `user` message with one `toolResult` block per call, in call order.
//!   `json` content must be an object, so objects go as `{"json": obj}`, other JSON values as
//!   `{"json": {"output": v}}`, strings as `{"text": s}`; failures as `{"text": <error>}` with
//!   `status:"error"` (`status` is honoured by Claude and Nova; for other models the text still
//!   says what failed). Files a tool returned follow that block: `{"image": {"format",
//!   "source": {"bytes": <base64>}}}` for PNG/JPEG/GIF/WebP, `{"document": {"format", "name",
//!   "source": {"bytes"}}}` for pdf/csv/doc/docx/xls/xlsx/html/txt/md (names sanitised to
//!   Bedrock's character set and made unique), and a text line describing any other file.
//! - **declare**: `{"toolSpec": {name, description?, inputSchema: {json}, strict?}}` for
//!   `toolConfig.tools`.

use std::collections::HashSet;

use serde_json::{Value, json};

use super::common::{
    anthropic_strict_parameters, declare_each, name_and_description, non_null, result_for, shape_error,
};
use super::{DeclareOptions, DeclareWarning, ParseError, Parsed, Provider, ToolDeclaration};
use crate::call::{Arguments, FileKind, Outcome, ToolCall, ToolFile, ToolResult};

const P: Provider = Provider::Bedrock;

/// Reads a Converse response body.
///
/// Shape errors: not an object; no `output.message` object; `content` not an array; a client
/// `toolUse` without a string `toolUseId` or `name` (it could not be answered). An absent or
/// `null` `stopReason` gives `None`.
pub fn parse(completion: &Value) -> Result<Parsed, ParseError> {
    if !completion.is_object() {
        return Err(shape_error(P, "the body is not a JSON object"));
    }
    let message = completion
        .get("output")
        .and_then(|o| o.get("message"))
        .filter(|m| m.is_object())
        .ok_or_else(|| shape_error(P, "missing `output.message` object"))?;
    let content = message
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| shape_error(P, "`output.message.content` is not an array"))?;

    let mut calls = Vec::new();
    let mut server_side = Vec::new();
    for (i, block) in content.iter().enumerate() {
        if let Some(tool_use) = block.get("toolUse").filter(|t| !t.is_null()) {
            if tool_use.get("type").and_then(Value::as_str) == Some("server_tool_use") {
                server_side.push(block.clone());
                continue;
            }
            let id = tool_use
                .get("toolUseId")
                .and_then(Value::as_str)
                .ok_or_else(|| shape_error(P, format!("content[{i}].toolUse has no string `toolUseId`")))?;
            let name = tool_use
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| shape_error(P, format!("content[{i}].toolUse has no string `name`")))?;
            calls.push(ToolCall {
                id: Some(id.to_owned()),
                name: name.to_owned(),
                arguments: Arguments::from_value(tool_use.get("input")),
            });
        } else if block.get("toolResult").is_some_and(|t| !t.is_null()) {
            server_side.push(block.clone());
        }
    }

    Ok(Parsed {
        finished: calls.is_empty(),
        calls,
        stop_reason: non_null(completion.get("stopReason")).cloned(),
        assistant: message.clone(),
        server_side,
    })
}

/// The `content` of one `toolResult`, and its `status`.
fn result_content(outcome: &Outcome) -> (Value, &'static str) {
    match outcome {
        Outcome::Ok(Value::String(s)) => (json!([{"text": s}]), "success"),
        Outcome::Ok(obj @ Value::Object(_)) => (json!([{"json": obj}]), "success"),
        Outcome::Ok(other) => (json!([{"json": {"output": other}}]), "success"),
        Outcome::Err(error) => (json!([{"text": error.model_text()}]), "error"),
    }
}

/// One `user` message with a `toolResult` block per call (`results[i]` answers
/// `parsed.calls[i]`); empty when there is no call.
///
/// Ids come from the calls, so every `toolUse` is answered exactly once and in order; a call
/// without a result gets an `internal` error.
pub fn format(parsed: &Parsed, results: &[ToolResult]) -> Vec<Value> {
    if parsed.calls.is_empty() {
        return Vec::new();
    }
    let mut names = HashSet::new();
    let blocks: Vec<Value> = parsed
        .calls
        .iter()
        .enumerate()
        .map(|(i, call)| {
            let result = result_for(results, i, call);
            let (mut content, status) = result_content(&result.outcome);
            if let Value::Array(blocks) = &mut content {
                blocks.extend(result.files.iter().map(|f| file_block(f, &mut names)));
            }
            json!({"toolResult": {"toolUseId": call.id, "content": content, "status": status}})
        })
        .collect();
    vec![json!({"role": "user", "content": blocks})]
}

/// One content block for a file: `image` for PNG/JPEG/GIF/WebP, `document` for the document
/// formats Bedrock knows, otherwise a text line describing the file. `bytes` is base64, as in
/// the Converse JSON wire format.
fn file_block(file: &ToolFile, names: &mut HashSet<String>) -> Value {
    if let FileKind::Image(format) = file.kind() {
        return json!({"image": {"format": format.as_str(), "source": {"bytes": file.base64()}}});
    }
    match document_format(&file.mime_type) {
        Some(format) => json!({"document": {
            "format": format, "name": document_name(&file.filename, names), "source": {"bytes": file.base64()}}}),
        None => json!({"text": file.note()}),
    }
}

/// Bedrock's `document.format` for a media type.
fn document_format(mime_type: &str) -> Option<&'static str> {
    Some(match mime_type {
        "application/pdf" => "pdf",
        "text/csv" => "csv",
        "application/msword" => "doc",
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document" => "docx",
        "application/vnd.ms-excel" => "xls",
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet" => "xlsx",
        "text/html" => "html",
        "text/plain" => "txt",
        "text/markdown" => "md",
        _ => return None,
    })
}

/// Longest document name kept.
const MAX_DOCUMENT_NAME: usize = 200;

/// A document name Bedrock accepts: the file name without its extension, reduced to
/// alphanumerics, single spaces, hyphens, parentheses and square brackets; unique within the
/// message (a repeated name gets ` (2)`, ` (3)`, …).
fn document_name(filename: &str, names: &mut HashSet<String>) -> String {
    let stem = filename.rsplit_once('.').map_or(filename, |(stem, _)| stem);
    let mut clean = String::new();
    for c in stem.chars() {
        let c = if c.is_alphanumeric() || matches!(c, '-' | '(' | ')' | '[' | ']') {
            c
        } else if c.is_whitespace() {
            ' '
        } else {
            '-'
        };
        if !(c == ' ' && (clean.is_empty() || clean.ends_with(' '))) {
            clean.push(c);
        }
    }
    let mut base: String = clean.trim_end().chars().take(MAX_DOCUMENT_NAME).collect();
    if base.trim().is_empty() {
        base = "document".to_owned();
    }
    let mut name = base.clone();
    let mut n = 1;
    while !names.insert(name.clone()) {
        n += 1;
        name = format!("{base} ({n})");
    }
    name
}

/// `{"toolSpec": {name, description?, inputSchema: {"json": schema}, strict?}}` per tool.
///
/// The description is left out when empty (Bedrock requires it non-empty when present). A name
/// failing [`schema::check_name`](super::schema::check_name) drops the tool. With `opts.strict` the schema goes through
/// [`schema::anthropic_strict`](super::schema::anthropic_strict) (Bedrock's structured-output grammar follows the Anthropic
/// subset, `docs/providers.md#bedrock`) and `strict: true` is set; if it cannot be expressed the
/// tool is declared without `strict`, with a warning.
pub fn declare(tools: &[ToolDeclaration<'_>], opts: &DeclareOptions, warnings: &mut Vec<DeclareWarning>) -> Vec<Value> {
    declare_each(P, tools, warnings, |tool, warnings| {
        let (input_schema, strict) = anthropic_strict_parameters(tool.name, tool.parameters, opts.strict, warnings);
        let mut spec = name_and_description(tool);
        spec.insert("inputSchema".into(), json!({"json": input_schema}));
        if strict {
            spec.insert("strict".into(), json!(true));
        }
        json!({"toolSpec": spec})
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::common::decl;

    fn params() -> Value {
        json!({"type": "object", "properties": {"sign": {"type": "string"}}, "required": ["sign"]})
    }

    #[test]
    fn declare_tool_spec() {
        let p = params();
        let declared = Provider::Bedrock.declare(
            &[decl("top_song", "Most popular song.", &p)],
            &DeclareOptions::default(),
        );
        assert_eq!(
            declared.tools,
            vec![json!({"toolSpec": {
                "name": "top_song",
                "description": "Most popular song.",
                "inputSchema": {"json": p}
            }})]
        );
        assert!(declared.warnings.is_empty());
    }

    #[test]
    fn declare_strict_inside_tool_spec_and_no_empty_description() {
        let p = params();
        let opts = DeclareOptions {
            strict: true,
            ..DeclareOptions::default()
        };
        let declared = Provider::Bedrock.declare(&[decl("top_song", "  ", &p)], &opts);
        let spec = &declared.tools[0]["toolSpec"];
        assert_eq!(spec["strict"], json!(true));
        assert!(spec.get("description").is_none());
        assert!(declared.tools[0].get("strict").is_none());
    }

    #[test]
    fn shape_errors() {
        for body in [
            json!({}),
            json!([]),
            json!({"output": {}}),
            json!({"output": {"message": "x"}}),
            json!({"output": {"message": {"role": "assistant"}}}),
            json!({"output": {"message": {"content": [{"toolUse": {"name": "t"}}]}}}),
        ] {
            assert!(
                matches!(
                    parse(&body),
                    Err(ParseError::Shape {
                        expected: Provider::Bedrock,
                        ..
                    })
                ),
                "{body}"
            );
        }
    }

    #[test]
    fn server_tool_use_is_not_a_call() {
        let body = json!({"output": {"message": {"role": "assistant", "content": [
            {"toolUse": {"toolUseId": "s1", "name": "nova_grounding", "input": {}, "type": "server_tool_use"}},
            {"toolResult": {"toolUseId": "s1", "content": [{"text": "…"}]}},
            {"text": "answer"}
        ]}}, "stopReason": "end_turn"});
        let parsed = parse(&body).ok();
        assert_eq!(parsed.as_ref().map(|p| p.calls.len()), Some(0));
        assert_eq!(parsed.as_ref().map(|p| p.server_side.len()), Some(2));
        assert_eq!(parsed.as_ref().map(|p| p.finished), Some(true));
    }
}
