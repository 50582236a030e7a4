//! Streamed openai_responses completions → the non-streamed body. See the module docs of
//! `stream`.
//!
//! The SDK's final response *is* the `response` of `response.completed` (or of
//! `response.incomplete`; `openai/lib/streaming/responses/_responses.py`), so that is the body
//! whenever the stream has one. The item events are still replayed into a snapshot, the way
//! the SDK's `accumulate_event` does, because:
//! - a stream cut before its final event has only them: the body is then the `response.created`
//!   (or latest `response.in_progress`) envelope with the replayed `output`, `status` left as
//!   the stream last said, and a warning;
//! - a final `response` whose `output` is empty while items were streamed (some proxies strip
//!   it) takes the replayed items, with a warning.
//!
//! Replay: `output_item.added` puts the item at its `output_index`; `content_part.added`,
//! `reasoning_summary_part.added` add parts; `*.delta` events append (`output_text`,
//! `refusal`, `reasoning_text`, `reasoning_summary_text`, `function_call_arguments`,
//! `custom_tool_call_input`); the matching `*.done` events set the whole value; and
//! `output_item.done` replaces the item with its final form (reasoning `encrypted_content` is
//! only there). Events are routed by `output_index`. `response.failed` and `error` abort with
//! the provider's message. Hosted-tool progress events (`response.<tool>_call.*`) and other
//! known no-ops change nothing; unknown types are ignored with a warning.

use serde_json::{Map, Value};

use super::{Assembled, StreamError};
use crate::provider::Provider;

const P: Provider = Provider::OpenaiResponses;

/// Assembles the events of one streamed response.
pub fn assemble(events: &[Value]) -> Result<Assembled, StreamError> {
    let mut envelope: Option<Map<String, Value>> = None;
    let mut final_response: Option<Map<String, Value>> = None;
    let mut output: Vec<Value> = Vec::new();
    let mut unknown: Vec<String> = Vec::new();
    let mut warnings = Vec::new();
    for (i, event) in events.iter().enumerate() {
        let bad = |reason: String| StreamError::Event {
            provider: P,
            index: i,
            reason,
        };
        let ev = event.as_object().ok_or_else(|| bad("it is not a JSON object".into()))?;
        let ty = ev.get("type").and_then(Value::as_str).unwrap_or("");
        let response = || {
            ev.get("response")
                .and_then(Value::as_object)
                .ok_or_else(|| bad(format!("`{ty}` has no `response` object")))
        };
        let output_index = || {
            ev.get("output_index")
                .and_then(Value::as_u64)
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| bad(format!("`{ty}` has no integer `output_index`")))
        };
        match ty {
            "error" => {
                return Err(StreamError::Provider {
                    provider: P,
                    message: super::openai_chat::error_message(ev.get("error").unwrap_or(event)),
                });
            }
            "response.failed" => {
                let r = response()?;
                let message = r
                    .get("error")
                    .map(super::openai_chat::error_message)
                    .unwrap_or_else(|| "the response failed".to_owned());
                return Err(StreamError::Provider { provider: P, message });
            }
            "response.created" | "response.in_progress" | "response.queued" => {
                envelope = Some(response()?.clone());
            }
            "response.completed" | "response.incomplete" => {
                final_response = Some(response()?.clone());
            }
            "response.output_item.added" => {
                let ix = output_index()?;
                let item = ev
                    .get("item")
                    .filter(|v| v.is_object())
                    .ok_or_else(|| bad("`response.output_item.added` has no `item` object".into()))?;
                if ix != output.len() {
                    return Err(bad(format!(
                        "`response.output_item.added` for output_index {ix}, expected {}",
                        output.len()
                    )));
                }
                output.push(item.clone());
            }
            "response.output_item.done" => {
                let ix = output_index()?;
                let item = ev
                    .get("item")
                    .filter(|v| v.is_object())
                    .ok_or_else(|| bad("`response.output_item.done` has no `item` object".into()))?;
                let slot = item_at(&mut output, ix).ok_or_else(|| bad(before_added(ty, ix)))?;
                *slot = item.clone();
            }
            "response.content_part.added" | "response.content_part.done" => {
                part_event(&mut output, ev, "content", "content_index", "part").map_err(|r| bad(r(ty)))?;
            }
            "response.reasoning_summary_part.added" | "response.reasoning_summary_part.done" => {
                part_event(&mut output, ev, "summary", "summary_index", "part").map_err(|r| bad(r(ty)))?;
            }
            "response.output_text.delta" | "response.refusal.delta" | "response.reasoning_text.delta" => {
                let key = if ty == "response.refusal.delta" {
                    "refusal"
                } else {
                    "text"
                };
                text_event(&mut output, ev, "content", "content_index", key, "delta", true).map_err(|r| bad(r(ty)))?;
            }
            "response.output_text.done" | "response.reasoning_text.done" => {
                text_event(&mut output, ev, "content", "content_index", "text", "text", false)
                    .map_err(|r| bad(r(ty)))?;
            }
            "response.refusal.done" => {
                text_event(&mut output, ev, "content", "content_index", "refusal", "refusal", false)
                    .map_err(|r| bad(r(ty)))?;
            }
            "response.reasoning_summary_text.delta" => {
                text_event(&mut output, ev, "summary", "summary_index", "text", "delta", true)
                    .map_err(|r| bad(r(ty)))?;
            }
            "response.reasoning_summary_text.done" => {
                text_event(&mut output, ev, "summary", "summary_index", "text", "text", false)
                    .map_err(|r| bad(r(ty)))?;
            }
            "response.function_call_arguments.delta" | "response.custom_tool_call_input.delta" => {
                let ix = output_index()?;
                let key = if ty.contains("custom") { "input" } else { "arguments" };
                let item = item_at(&mut output, ix)
                    .and_then(Value::as_object_mut)
                    .ok_or_else(|| bad(before_added(ty, ix)))?;
                let add = ev.get("delta").and_then(Value::as_str).unwrap_or("");
                match item.get_mut(key) {
                    Some(Value::String(s)) => s.push_str(add),
                    _ => {
                        item.insert(key.into(), Value::String(add.to_owned()));
                    }
                }
            }
            "response.function_call_arguments.done" | "response.custom_tool_call_input.done" => {
                let ix = output_index()?;
                let key = if ty.contains("custom") { "input" } else { "arguments" };
                let item = item_at(&mut output, ix)
                    .and_then(Value::as_object_mut)
                    .ok_or_else(|| bad(before_added(ty, ix)))?;
                if let Some(v) = ev.get(key) {
                    item.insert(key.into(), v.clone());
                }
            }
            "response.output_text.annotation.added" => {
                let ix = output_index()?;
                let ci = ev.get("content_index").and_then(Value::as_u64).unwrap_or(0);
                if let (Some(part), Some(a)) = (
                    item_at(&mut output, ix)
                        .and_then(|it| it.get_mut("content"))
                        .and_then(Value::as_array_mut)
                        .and_then(|c| c.get_mut(usize::try_from(ci).unwrap_or(usize::MAX)))
                        .and_then(Value::as_object_mut),
                    ev.get("annotation"),
                ) {
                    match part.get_mut("annotations") {
                        Some(Value::Array(list)) => list.push(a.clone()),
                        _ => {
                            part.insert("annotations".into(), Value::Array(vec![a.clone()]));
                        }
                    }
                }
            }
            t if is_progress(t) => {}
            other => {
                if !unknown.iter().any(|u| u == other) {
                    unknown.push(other.to_owned());
                }
            }
        }
    }
    if !unknown.is_empty() {
        warnings.push(format!("unknown event types were ignored: {}", unknown.join(", ")));
    }
    let mut body = match final_response {
        Some(mut r) => {
            let empty = r.get("output").and_then(Value::as_array).is_none_or(Vec::is_empty);
            if empty && !output.is_empty() {
                warnings.push("the final response has no `output`; the output items of the stream are used".to_owned());
                r.insert("output".into(), Value::Array(output));
            }
            r
        }
        None => {
            let Some(mut r) = envelope else {
                if output.is_empty() {
                    return Err(StreamError::NoTurn {
                        provider: P,
                        missing: "no `response.completed` event, no `response.created` envelope and no output item"
                            .to_owned(),
                    });
                }
                let mut r = Map::new();
                r.insert("object".into(), Value::String("response".into()));
                r.insert("output".into(), Value::Array(output));
                warnings.push(
                    "no `response.completed` or `response.created` event: the body holds only the streamed output items"
                        .to_owned(),
                );
                return Ok(finish(r, warnings));
            };
            warnings.push(
                "no `response.completed` event: the stream was probably cut before its end; the body is rebuilt from the item events"
                    .to_owned(),
            );
            r.insert("output".into(), Value::Array(output));
            r
        }
    };
    body.entry("object").or_insert_with(|| Value::String("response".into()));
    Ok(finish(body, warnings))
}

/// Adds the warnings about calls whose argument text is not complete JSON.
fn finish(body: Map<String, Value>, mut warnings: Vec<String>) -> Assembled {
    if let Some(Value::Array(items)) = body.get("output") {
        for item in items {
            if item.get("type").and_then(Value::as_str) != Some("function_call") {
                continue;
            }
            if let Some(Value::String(args)) = item.get("arguments")
                && !args.trim().is_empty()
                && serde_json::from_str::<serde::de::IgnoredAny>(args).is_err()
            {
                let id = item.get("call_id").and_then(Value::as_str).unwrap_or("");
                warnings.push(format!(
                    "the arguments of call `{id}` are not complete JSON; the call is answered with `args_not_json`"
                ));
            }
        }
    }
    Assembled {
        completion: Value::Object(body),
        warnings,
    }
}

/// Events that report progress without changing the body (the item events carry the data).
fn is_progress(ty: &str) -> bool {
    let Some(rest) = ty.strip_prefix("response.") else {
        return false;
    };
    // Hosted tools: `response.web_search_call.searching`, `response.mcp_call.completed`, …
    let hosted = rest.split('.').next().is_some_and(|t| t.ends_with("_call"))
        || rest.starts_with("mcp_")
        || rest.starts_with("image_generation_call")
        || rest.starts_with("code_interpreter_call");
    hosted
        || matches!(
            rest,
            "output_text.annotation.done"
                | "reasoning_summary.delta"
                | "reasoning_summary.done"
                | "audio.delta"
                | "audio.done"
                | "audio.transcript.delta"
                | "audio.transcript.done"
        )
}

fn before_added(ty: &str, ix: usize) -> String {
    format!("`{ty}` for output_index {ix} before its `response.output_item.added`")
}

fn item_at(output: &mut [Value], ix: usize) -> Option<&mut Value> {
    output.get_mut(ix)
}

type Reason = Box<dyn Fn(&str) -> String>;

/// `*_part.added` / `*_part.done`: put the part at its index in the item's list `list`.
fn part_event(
    output: &mut [Value],
    ev: &Map<String, Value>,
    list: &str,
    index_key: &str,
    part_key: &str,
) -> Result<(), Reason> {
    let ix = ev
        .get("output_index")
        .and_then(Value::as_u64)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| -> Reason { Box::new(|ty: &str| format!("`{ty}` has no integer `output_index`")) })?;
    let pi = ev
        .get(index_key)
        .and_then(Value::as_u64)
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(0);
    let part = ev.get(part_key).cloned().unwrap_or(Value::Object(Map::new()));
    let item = output
        .get_mut(ix)
        .and_then(Value::as_object_mut)
        .ok_or_else(|| -> Reason { Box::new(move |ty: &str| before_added(ty, ix)) })?;
    let parts = item.entry(list).or_insert_with(|| Value::Array(Vec::new()));
    if !parts.is_array() {
        *parts = Value::Array(Vec::new());
    }
    if let Value::Array(parts) = parts {
        if pi < parts.len() {
            parts[pi] = part;
        } else if pi == parts.len() {
            parts.push(part);
        } else {
            let have = parts.len();
            return Err(Box::new(move |ty: &str| {
                format!("`{ty}` for part {pi} of output_index {ix}, expected part {have}")
            }));
        }
    }
    Ok(())
}

/// A text delta (`append`) or done event: the text `field` of the event goes into the `key`
/// of part `index_key` in the item's list `list`.
fn text_event(
    output: &mut [Value],
    ev: &Map<String, Value>,
    list: &str,
    index_key: &str,
    key: &str,
    field: &str,
    append: bool,
) -> Result<(), Reason> {
    let ix = ev
        .get("output_index")
        .and_then(Value::as_u64)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| -> Reason { Box::new(|ty: &str| format!("`{ty}` has no integer `output_index`")) })?;
    let pi = ev
        .get(index_key)
        .and_then(Value::as_u64)
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(0);
    let text = ev.get(field).and_then(Value::as_str).unwrap_or("");
    let item = output
        .get_mut(ix)
        .and_then(Value::as_object_mut)
        .ok_or_else(|| -> Reason { Box::new(move |ty: &str| before_added(ty, ix)) })?;
    let reasoning = item.get("type").and_then(Value::as_str) == Some("reasoning");
    let parts = item.entry(list).or_insert_with(|| Value::Array(Vec::new()));
    let Value::Array(parts) = parts else {
        return Ok(());
    };
    // `reasoning_text.delta` may arrive without a `content_part.added`: the part starts here.
    if pi == parts.len() {
        let mut part = Map::new();
        let kind = match (list, key) {
            ("summary", _) => "summary_text",
            (_, "refusal") => "refusal",
            _ if reasoning => "reasoning_text",
            _ => "output_text",
        };
        part.insert("type".into(), Value::String(kind.into()));
        parts.push(Value::Object(part));
    }
    let Some(part) = parts.get_mut(pi).and_then(Value::as_object_mut) else {
        let have = parts.len();
        return Err(Box::new(move |ty: &str| {
            format!("`{ty}` for part {pi} of output_index {ix}, expected part {have}")
        }));
    };
    match part.get_mut(key) {
        Some(Value::String(s)) if append => s.push_str(text),
        _ => {
            part.insert(key.into(), Value::String(text.to_owned()));
        }
    }
    Ok(())
}
