//! Google Gemini `generateContent` (see `docs/providers.md#gemini`): the REST body in
//! camelCase, and python-genai `model_dump(mode="json")` dumps in snake_case
//! (`function_call`, `thought_signature`, `finish_reason`, `prompt_feedback`).
//!
//! - **parse** reads candidate index 0 only (what python-genai's `response.function_calls`
//!   reads; calls are never merged across candidates). Calls are the parts with
//!   `functionCall`/`function_call`; the `id` is optional (older models send none) and a missing
//!   `args` means `{}`. `toolCall`/`toolResponse` parts (built-in tools run by Google) go to
//!   [`Parsed::server_side`]; `executableCode`/`codeExecutionResult` are only echoed.
//! - **finished** = no client call. Gemini has no "tool call" finish reason (pending calls say
//!   `STOP`), and `MALFORMED_FUNCTION_CALL` without calls leaves nothing to execute, so it is
//!   finished too (the caller may retry; the raw reason is in `stop_reason`).
//! - **assistant** is candidate 0's `content` verbatim: role `model`, every part in order,
//!   `thoughtSignature`s in place, parts never merged or split (Gemini 3 rejects function
//!   calling turns whose signatures do not come back exactly as received).
//! - **No candidate** (a prompt blocked before generation: only `promptFeedback`): parsed as
//!   finished with no calls and `assistant = {"role":"model","parts":[]}`. The body is a valid
//!   Gemini response that simply has nothing to run; `stop_reason` is then `None` and the
//!   block reason stays in the body's `promptFeedback` for the agent to read. A candidate
//!   without `content` (e.g. stopped by `SAFETY`) gets the same empty model turn.
//! - **format**: ONE `user` Content with one `functionResponse` part per call, same order,
//!   `{"name", "id"? (only when the call had one), "response": {"output": v} | {"error": text}}`
//!   (the `output`/`error` keys are the ones `FunctionResponse.response` documents).
//!   Files a tool returned go in `functionResponse.parts` (multimodal function responses) as
//!   `{"inlineData": {"mimeType", "data", "displayName"}}` for PNG/JPEG/WebP images and PDFs;
//!   `response` stays, and lists other files under `files_not_attached`.
//! - **declare**: ONE `{"functionDeclarations": [...]}` tools entry, `parametersJsonSchema` by
//!   default, or the OpenAPI-subset `parameters` via [`schema::gemini_openapi`].

use serde_json::{Map, Value, json};

use super::common::{name_and_description, result_for, shape_error};
use super::{DeclareOptions, DeclareWarning, ParseError, Parsed, Provider, ToolDeclaration, schema};
use crate::call::{Arguments, FileKind, ImageFormat, Outcome, ToolCall, ToolResult};

const P: Provider = Provider::Gemini;

/// A field in either spelling: REST camelCase first, then the SDK-dump snake_case.
fn field<'a>(obj: &'a Value, camel: &str, snake: &str) -> Option<&'a Value> {
    obj.get(camel).or_else(|| obj.get(snake)).filter(|v| !v.is_null())
}

/// The model turn for a response that has no candidate content.
fn empty_model_turn() -> Value {
    json!({"role": "model", "parts": []})
}

/// Reads a `generateContent` response (REST camelCase or a python-genai snake_case dump).
///
/// Shape errors: not an object; neither `candidates` nor `promptFeedback`/`prompt_feedback`;
/// `candidates`, candidate 0, its `content` or `parts` of the wrong JSON type; a
/// `functionCall` that is not an object or has no string `name` (it could not be answered:
/// `functionResponse.name` is required); a non-string `id`.
pub fn parse(completion: &Value) -> Result<Parsed, ParseError> {
    if !completion.is_object() {
        return Err(shape_error(P, "the body is not a JSON object"));
    }
    let candidate = match completion.get("candidates") {
        Some(Value::Array(candidates)) => candidates.first(),
        Some(Value::Null) | None => {
            if field(completion, "promptFeedback", "prompt_feedback").is_none() {
                return Err(shape_error(P, "neither `candidates` nor `promptFeedback`"));
            }
            None
        }
        Some(_) => return Err(shape_error(P, "`candidates` is not an array")),
    };
    let Some(candidate) = candidate else {
        return Ok(Parsed {
            calls: Vec::new(),
            finished: true,
            stop_reason: None,
            assistant: empty_model_turn(),
            server_side: Vec::new(),
        });
    };
    if !candidate.is_object() {
        return Err(shape_error(P, "candidates[0] is not an object"));
    }
    let stop_reason = field(candidate, "finishReason", "finish_reason").cloned();
    let assistant = match candidate.get("content") {
        None | Some(Value::Null) => empty_model_turn(),
        Some(content @ Value::Object(_)) => content.clone(),
        Some(_) => return Err(shape_error(P, "candidates[0].content is not an object")),
    };
    let parts: &[Value] = match assistant.get("parts") {
        None | Some(Value::Null) => &[],
        Some(Value::Array(parts)) => parts,
        Some(_) => return Err(shape_error(P, "candidates[0].content.parts is not an array")),
    };

    let mut calls = Vec::new();
    let mut server_side = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        if let Some(fc) = field(part, "functionCall", "function_call") {
            calls.push(read_call(i, fc)?);
        } else if field(part, "toolCall", "tool_call").is_some()
            || field(part, "toolResponse", "tool_response").is_some()
        {
            server_side.push(part.clone());
        }
    }

    Ok(Parsed {
        finished: calls.is_empty(),
        calls,
        stop_reason,
        assistant,
        server_side,
    })
}

fn read_call(i: usize, fc: &Value) -> Result<ToolCall, ParseError> {
    if !fc.is_object() {
        return Err(shape_error(
            P,
            format!("parts[{i}] has a functionCall that is not an object"),
        ));
    }
    let name = fc
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| shape_error(P, format!("parts[{i}].functionCall has no string `name`")))?;
    let id = match fc.get("id") {
        None | Some(Value::Null) => None,
        Some(Value::String(id)) => Some(id.clone()),
        Some(_) => return Err(shape_error(P, format!("parts[{i}].functionCall.id is not a string"))),
    };
    Ok(ToolCall {
        id,
        name: name.to_owned(),
        arguments: Arguments::from_value(fc.get("args")),
    })
}

/// Was the completion a python-genai snake_case dump?
///
/// Derived from `parsed.assistant` alone (so `format` needs no extra state): true when some
/// part has a `function_call` key and none has `functionCall`. The answer is then written as
/// `function_response`, matching the SDK objects the agent feeds back; otherwise the REST
/// camelCase `functionResponse`.
fn is_snake_case(parsed: &Parsed) -> bool {
    let Some(parts) = parsed.assistant.get("parts").and_then(Value::as_array) else {
        return false;
    };
    parts.iter().any(|p| p.get("function_call").is_some()) && !parts.iter().any(|p| p.get("functionCall").is_some())
}

/// One `user` Content with a `functionResponse` part per call (`results[i]` answers
/// `parsed.calls[i]`); empty when there is no call.
///
/// `response` is `{"output": <output as is>}` on success (strings stay strings; Gemini reads the
/// `output` key as the function output) and `{"error": <error text>}` on failure. `id` is
/// written only when the call had one. Names and ids come from the calls, so each call is
/// answered exactly once and in order; a call without a result gets an `internal` error.
pub fn format(parsed: &Parsed, results: &[ToolResult]) -> Vec<Value> {
    if parsed.calls.is_empty() {
        return Vec::new();
    }
    let snake = is_snake_case(parsed);
    let key = if snake { "function_response" } else { "functionResponse" };
    let parts: Vec<Value> = parsed
        .calls
        .iter()
        .enumerate()
        .map(|(i, call)| {
            let result = result_for(results, i, call);
            let mut response = match &result.outcome {
                Outcome::Ok(output) => json!({"output": output}),
                Outcome::Err(error) => json!({"error": error.model_text()}),
            };
            let (parts, not_attached) = file_parts(&result, snake);
            if !not_attached.is_empty()
                && let Some(obj) = response.as_object_mut()
            {
                obj.insert("files_not_attached".into(), json!(not_attached));
            }
            let mut fr = Map::new();
            fr.insert("name".into(), json!(call.name));
            if let Some(id) = &call.id {
                fr.insert("id".into(), json!(id));
            }
            fr.insert("response".into(), response);
            if !parts.is_empty() {
                fr.insert("parts".into(), Value::Array(parts));
            }
            let mut part = Map::new();
            part.insert(key.into(), Value::Object(fr));
            Value::Object(part)
        })
        .collect();
    vec![json!({"role": "user", "parts": parts})]
}

/// The `functionResponse.parts` for a result's files (`inlineData` per PNG/JPEG/WebP image and
/// PDF, the media types Gemini takes in function responses; snake_case for SDK dumps), and a
/// description of each file that cannot be attached (Gemini wants text in `response`, not as
/// raw bytes).
fn file_parts(result: &ToolResult, snake: bool) -> (Vec<Value>, Vec<String>) {
    let (inline, mime, display) = if snake {
        ("inline_data", "mime_type", "display_name")
    } else {
        ("inlineData", "mimeType", "displayName")
    };
    let mut parts = Vec::new();
    let mut not_attached = Vec::new();
    for file in &result.files {
        match file.kind() {
            FileKind::Image(ImageFormat::Png | ImageFormat::Jpeg | ImageFormat::Webp) | FileKind::Pdf => {
                let mut blob = Map::new();
                blob.insert(mime.into(), json!(file.media_type()));
                blob.insert("data".into(), json!(file.base64()));
                blob.insert(display.into(), json!(file.filename));
                let mut part = Map::new();
                part.insert(inline.into(), Value::Object(blob));
                parts.push(Value::Object(part));
            }
            _ => not_attached.push(file.describe()),
        }
    }
    (parts, not_attached)
}

/// The whole `tools` contribution: ONE `{"functionDeclarations": [...]}` element (empty Vec if
/// no tool fits).
///
/// Each declaration is `{name, description?, parametersJsonSchema}`; with `opts.gemini_openapi`
/// it is `parameters: <schema::gemini_openapi(schema)>` instead, and a schema that cannot be
/// expressed drops the tool. A name failing [`schema::check_name`] drops the tool. Gemini has no
/// strict mode: `opts.strict` is ignored with one warning per declared tool.
pub fn declare(tools: &[ToolDeclaration<'_>], opts: &DeclareOptions, warnings: &mut Vec<DeclareWarning>) -> Vec<Value> {
    let mut declarations = Vec::new();
    for tool in tools {
        if let Err(reason) = schema::check_name(P, tool.name) {
            warnings.push(DeclareWarning::dropped(tool.name, reason));
            continue;
        }
        let mut entry = name_and_description(tool);
        if opts.gemini_openapi {
            match schema::gemini_openapi(tool.parameters) {
                Ok((s, notes)) => {
                    entry.insert("parameters".into(), s);
                    warnings.extend(notes.into_iter().map(|n| DeclareWarning::changed(tool.name, n)));
                }
                Err(reason) => {
                    warnings.push(DeclareWarning::dropped(
                        tool.name,
                        format!("the schema cannot be expressed as Gemini `parameters`: {reason}"),
                    ));
                    continue;
                }
            }
        } else {
            entry.insert("parametersJsonSchema".into(), tool.parameters.clone());
        }
        if opts.strict {
            warnings.push(DeclareWarning::changed(
                tool.name,
                "Gemini has no strict mode for function declarations; `strict` was ignored",
            ));
        }
        declarations.push(Value::Object(entry));
    }
    if declarations.is_empty() {
        Vec::new()
    } else {
        vec![json!({"functionDeclarations": declarations})]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::common::decl;

    fn params() -> Value {
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
    }

    #[test]
    fn declare_wraps_all_tools_in_one_entry() {
        let p = params();
        let declared =
            Provider::Gemini.declare(&[decl("a", "first", &p), decl("b", "", &p)], &DeclareOptions::default());
        assert_eq!(
            declared.tools,
            vec![json!({"functionDeclarations": [
                {"name": "a", "description": "first", "parametersJsonSchema": p},
                {"name": "b", "parametersJsonSchema": p},
            ]})]
        );
        assert!(declared.warnings.is_empty());
    }

    #[test]
    fn declare_openapi_uses_parameters() {
        let p = params();
        let opts = DeclareOptions {
            gemini_openapi: true,
            ..DeclareOptions::default()
        };
        let declared = Provider::Gemini.declare(&[decl("a", "d", &p)], &opts);
        let fd = &declared.tools[0]["functionDeclarations"][0];
        assert!(fd.get("parameters").is_some());
        assert!(fd.get("parametersJsonSchema").is_none());
    }

    #[test]
    fn declare_strict_warns_once_per_tool() {
        let p = params();
        let opts = DeclareOptions {
            strict: true,
            ..DeclareOptions::default()
        };
        let declared = Provider::Gemini.declare(&[decl("a", "d", &p), decl("b", "d", &p)], &opts);
        assert_eq!(declared.warnings.len(), 2);
        assert!(
            declared
                .warnings
                .iter()
                .all(|w| !w.dropped && w.provider == Provider::Gemini)
        );
        assert!(declared.tools[0]["functionDeclarations"][0].get("strict").is_none());
    }

    #[test]
    fn declare_nothing_gives_empty_vec() {
        let declared = Provider::Gemini.declare(&[], &DeclareOptions::default());
        assert!(declared.tools.is_empty());
    }

    #[test]
    fn blocked_prompt_is_finished_with_empty_turn() {
        let body = json!({"promptFeedback": {"blockReason": "SAFETY"}});
        let parsed = parse(&body).ok();
        assert_eq!(parsed.as_ref().map(|p| p.finished), Some(true));
        assert_eq!(parsed.as_ref().map(|p| p.assistant.clone()), Some(empty_model_turn()));
        assert_eq!(parsed.as_ref().and_then(|p| p.stop_reason.clone()), None);
    }

    #[test]
    fn shape_errors() {
        for body in [
            json!({}),
            json!("x"),
            json!({"candidates": {}}),
            json!({"candidates": [1]}),
            json!({"candidates": [{"content": []}]}),
            json!({"candidates": [{"content": {"parts": {}}}]}),
            json!({"candidates": [{"content": {"parts": [{"functionCall": {"args": {}}}]}}]}),
            json!({"candidates": [{"content": {"parts": [{"functionCall": 3}]}}]}),
        ] {
            assert!(
                matches!(
                    parse(&body),
                    Err(ParseError::Shape {
                        expected: Provider::Gemini,
                        ..
                    })
                ),
                "{body}"
            );
        }
    }

    #[test]
    fn server_side_parts_are_not_calls() {
        let body = json!({"candidates": [{"content": {"role": "model", "parts": [
            {"toolCall": {"id": "t1", "toolType": "GOOGLE_SEARCH"}},
            {"toolResponse": {"id": "t1"}},
            {"executableCode": {"code": "print(1)"}},
            {"codeExecutionResult": {"output": "1"}},
            {"text": "done"}
        ]}, "finishReason": "STOP"}]});
        let parsed = parse(&body).ok();
        assert_eq!(parsed.as_ref().map(|p| p.calls.len()), Some(0));
        assert_eq!(parsed.as_ref().map(|p| p.server_side.len()), Some(2));
        assert_eq!(parsed.as_ref().map(|p| p.finished), Some(true));
    }
}
