//! Streamed anthropic completions → the non-streamed body. See the module docs of `stream`.
//!
//! The rules are those of the SDK's `MessageStream` (`anthropic/lib/streaming/_messages.py`,
//! `accumulate_event`):
//! - `message_start.message` is the snapshot (`content: []`);
//! - `content_block_start` adds its block (text `""`, thinking `{thinking:"", signature:""}`,
//!   tool_use `{input: {}}`, `redacted_thinking` and server-tool result blocks whole);
//! - `content_block_delta`: `text_delta` appends to `text`, `thinking_delta` to `thinking`,
//!   `signature_delta` **replaces** `signature`, `citations_delta` appends to `citations`,
//!   `input_json_delta` appends `partial_json` to the block's JSON text, and at the end the
//!   input is that text parsed (no fragment, or only `""`, leaves `{}`);
//! - `message_delta` sets `stop_reason`/`stop_sequence` and overwrites the usage fields it
//!   carries (they are cumulative); `ping` and `content_block_stop` change nothing; `error`
//!   aborts.
//!
//! Deliberate differences: a tool input whose JSON text is incomplete (a cut stream) stays the
//! received **string** — the SDK parses it in partial mode and would run the call on guessed
//! arguments; here the call is answered `args_not_json` and the model can repeat it. Blocks are
//! placed by their `index` (the SDK appends), and a delta for a block that never started, or
//! any event before `message_start`, is an error: the stream is out of order.

use serde_json::{Map, Value};

use super::{Assembled, StreamError};
use crate::provider::Provider;

const P: Provider = Provider::Anthropic;

/// A block being assembled, with the JSON text of a tool input.
struct Block {
    block: Map<String, Value>,
    json: Option<String>,
}

/// Assembles the events of one streamed response.
pub fn assemble(events: &[Value]) -> Result<Assembled, StreamError> {
    let mut message: Option<Map<String, Value>> = None;
    let mut blocks: Vec<Block> = Vec::new();
    let mut warnings = Vec::new();
    let mut stopped = false;
    let mut unknown: Vec<String> = Vec::new();
    for (i, event) in events.iter().enumerate() {
        let bad = |reason: String| StreamError::Event {
            provider: P,
            index: i,
            reason,
        };
        let ev = event.as_object().ok_or_else(|| bad("it is not a JSON object".into()))?;
        let ty = ev.get("type").and_then(Value::as_str).unwrap_or("");
        if ty == "error" {
            return Err(StreamError::Provider {
                provider: P,
                message: super::openai_chat::error_message(ev.get("error").unwrap_or(event)),
            });
        }
        if ty == "ping" {
            continue;
        }
        if ty == "message_start" {
            if message.is_some() {
                return Err(bad("a second `message_start`".into()));
            }
            let m = ev
                .get("message")
                .and_then(Value::as_object)
                .ok_or_else(|| bad("`message_start` has no `message` object".into()))?;
            let mut m = m.clone();
            // Blocks a proxy put in the start message come first, as the SDK keeps them.
            if let Some(Value::Array(content)) = m.remove("content") {
                for b in content {
                    if let Value::Object(block) = b {
                        blocks.push(Block { block, json: None });
                    }
                }
            }
            message = Some(m);
            continue;
        }
        let known = matches!(
            ty,
            "content_block_start" | "content_block_delta" | "content_block_stop" | "message_delta" | "message_stop"
        );
        if !known {
            if !unknown.iter().any(|u| u == ty) {
                unknown.push(ty.to_owned());
            }
            continue;
        }
        let Some(msg) = message.as_mut() else {
            return Err(bad(format!("`{ty}` before `message_start`")));
        };
        let index = || {
            ev.get("index")
                .and_then(Value::as_u64)
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| bad(format!("`{ty}` has no integer `index`")))
        };
        match ty {
            "content_block_start" => {
                let ix = index()?;
                let block = ev
                    .get("content_block")
                    .and_then(Value::as_object)
                    .ok_or_else(|| bad("`content_block_start` has no `content_block` object".into()))?;
                if ix != blocks.len() {
                    return Err(bad(format!(
                        "`content_block_start` for index {ix}, expected index {}",
                        blocks.len()
                    )));
                }
                blocks.push(Block {
                    block: block.clone(),
                    json: None,
                });
            }
            "content_block_delta" => {
                let ix = index()?;
                let Some(b) = blocks.get_mut(ix) else {
                    return Err(bad(format!(
                        "`content_block_delta` for index {ix} before its `content_block_start`"
                    )));
                };
                let delta = ev
                    .get("delta")
                    .and_then(Value::as_object)
                    .ok_or_else(|| bad("`content_block_delta` has no `delta` object".into()))?;
                apply_delta(b, delta, &mut unknown);
            }
            "content_block_stop" => {
                let ix = index()?;
                if ix >= blocks.len() {
                    return Err(bad(format!(
                        "`content_block_stop` for index {ix} before its `content_block_start`"
                    )));
                }
            }
            "message_delta" => {
                if let Some(delta) = ev.get("delta").and_then(Value::as_object) {
                    for key in ["stop_reason", "stop_sequence"] {
                        if let Some(v) = delta.get(key) {
                            msg.insert(key.into(), v.clone());
                        }
                    }
                    for (k, v) in delta {
                        if k != "stop_reason" && k != "stop_sequence" && !v.is_null() {
                            msg.insert(k.clone(), v.clone());
                        }
                    }
                }
                if let Some(Value::Object(usage)) = ev.get("usage") {
                    let target = msg.entry("usage").or_insert_with(|| Value::Object(Map::new()));
                    if !target.is_object() {
                        *target = Value::Object(Map::new());
                    }
                    if let Value::Object(target) = target {
                        for (k, v) in usage {
                            if !v.is_null() {
                                target.insert(k.clone(), v.clone());
                            }
                        }
                    }
                }
            }
            _ => stopped = true, // message_stop
        }
    }
    let Some(mut msg) = message else {
        return Err(StreamError::NoTurn {
            provider: P,
            missing: "no `message_start` event".to_owned(),
        });
    };
    if !unknown.is_empty() {
        warnings.push(format!(
            "unknown event or delta types were ignored: {}",
            unknown.join(", ")
        ));
    }
    if !stopped {
        warnings.push("no `message_stop` event: the stream was probably cut before its end".to_owned());
    }
    let mut content = Vec::with_capacity(blocks.len());
    for b in blocks {
        let mut block = b.block;
        if let Some(json) = b.json.filter(|j| !j.is_empty()) {
            match serde_json::from_str::<Value>(&json) {
                Ok(v) => {
                    block.insert("input".into(), v);
                }
                Err(_) => {
                    let id = block.get("id").and_then(Value::as_str).unwrap_or("").to_owned();
                    warnings.push(format!(
                        "the input of call `{id}` is not complete JSON; the call is answered with `args_not_json`"
                    ));
                    block.insert("input".into(), Value::String(json));
                }
            }
        }
        content.push(Value::Object(block));
    }
    msg.insert("type".into(), Value::String("message".into()));
    msg.entry("role").or_insert_with(|| Value::String("assistant".into()));
    msg.insert("content".into(), Value::Array(content));
    msg.entry("stop_reason").or_insert(Value::Null);
    Ok(Assembled {
        completion: Value::Object(msg),
        warnings,
    })
}

/// Applies one `content_block_delta` to its block.
fn apply_delta(b: &mut Block, delta: &Map<String, Value>, unknown: &mut Vec<String>) {
    let ty = delta.get("type").and_then(Value::as_str).unwrap_or("");
    let append = |block: &mut Map<String, Value>, key: &str, field: &str| {
        let Some(add) = delta.get(field).and_then(Value::as_str) else {
            return;
        };
        match block.get_mut(key) {
            Some(Value::String(s)) => s.push_str(add),
            _ => {
                block.insert(key.into(), Value::String(add.to_owned()));
            }
        }
    };
    match ty {
        "text_delta" => append(&mut b.block, "text", "text"),
        "thinking_delta" => append(&mut b.block, "thinking", "thinking"),
        "signature_delta" => {
            if let Some(sig) = delta.get("signature") {
                b.block.insert("signature".into(), sig.clone());
            }
        }
        "input_json_delta" => {
            if let Some(part) = delta.get("partial_json").and_then(Value::as_str) {
                b.json.get_or_insert_with(String::new).push_str(part);
            }
        }
        "citations_delta" => {
            if let Some(c) = delta.get("citation") {
                match b.block.get_mut("citations") {
                    Some(Value::Array(list)) => list.push(c.clone()),
                    _ => {
                        b.block.insert("citations".into(), Value::Array(vec![c.clone()]));
                    }
                }
            }
        }
        other => {
            let name = format!("content_block_delta/{other}");
            if !unknown.contains(&name) {
                unknown.push(name);
            }
        }
    }
}
