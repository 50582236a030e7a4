//! Streamed mistral completions → the non-streamed body. See the module docs of `stream`.
//!
//! Mistral streams OpenAI-shaped `chat.completion.chunk`s (`mistralai`
//! `client/utils/eventstreaming.py`), so the envelope, choices, `finish_reason` and `usage`
//! follow `stream::openai_chat`. Tool calls differ: a call usually arrives **whole** in one
//! delta, but some models split it, and then repeat `name: ""` and `id: "null"` on the later
//! fragments (the SDK's `ToolCall.id` defaults to the string `"null"`). OpenAI-style
//! concatenation would turn the id into `<id>null`, so calls merge by these rules instead:
//! - a fragment with a real id (not absent, `""` or `"null"`) continues the call with that id,
//!   or starts a new call when no call has it yet — so several whole calls that all say
//!   `index: 0` stay separate;
//! - a fragment without a real id continues the last call with the same `index` (or the last
//!   call when it has no `index`); when there is no call yet it starts one;
//! - `arguments` strings concatenate; an arguments object (Mistral accepts both) replaces;
//!   `name`, `id` and `type` are set once, never concatenated.
//!
//! `content` is a string or, for reasoning models, a list of chunks (`text`, `thinking`…):
//! strings concatenate; once a list arrives the content becomes a list and adjacent `text`
//! chunks merge.

use serde_json::{Map, Value};

use super::{Assembled, StreamError};
use crate::provider::Provider;

/// Assembles the events of one streamed response.
pub fn assemble(events: &[Value]) -> Result<Assembled, StreamError> {
    super::openai_chat::assemble_chat(events, Provider::Mistral)
}

/// Merges one Mistral `delta` into the message being assembled (the rules of the module doc).
pub(super) fn merge_message(message: &mut Map<String, Value>, delta: &Map<String, Value>) -> Result<(), String> {
    for (key, dv) in delta {
        match key.as_str() {
            "tool_calls" => {
                let Some(fragments) = dv.as_array() else {
                    if !dv.is_null() {
                        return Err("`tool_calls` is not a list".to_owned());
                    }
                    continue;
                };
                let calls = message.entry("tool_calls").or_insert_with(|| Value::Array(Vec::new()));
                if !calls.is_array() {
                    *calls = Value::Array(Vec::new());
                }
                if let Value::Array(calls) = calls {
                    for f in fragments {
                        merge_call(calls, f)?;
                    }
                }
            }
            "content" => merge_content(message, dv),
            "p" => {}
            _ => {
                let mut one = Map::new();
                one.insert(key.clone(), dv.clone());
                super::openai_chat::accumulate_delta(message, &one)?;
            }
        }
    }
    Ok(())
}

/// An id that names a call (Mistral's placeholder `"null"` does not).
fn real_id(v: Option<&Value>) -> Option<&str> {
    v.and_then(Value::as_str).filter(|s| !s.is_empty() && *s != "null")
}

fn merge_call(calls: &mut Vec<Value>, fragment: &Value) -> Result<(), String> {
    let f = fragment
        .as_object()
        .ok_or_else(|| "a `tool_calls` entry is not an object".to_owned())?;
    let id = real_id(f.get("id"));
    let index = f.get("index").and_then(Value::as_u64);
    let target = match id {
        Some(id) => calls.iter().rposition(|c| real_id(c.get("id")) == Some(id)),
        None => match index {
            Some(ix) => calls
                .iter()
                .rposition(|c| c.get("index").and_then(Value::as_u64) == Some(ix)),
            None => calls.len().checked_sub(1),
        },
    };
    let Some(at) = target else {
        let mut call = f.clone();
        call.remove("p");
        calls.push(Value::Object(call));
        return Ok(());
    };
    let Some(call) = calls[at].as_object_mut() else {
        return Ok(());
    };
    if let Some(id) = id {
        call.insert("id".into(), Value::String(id.to_owned()));
    }
    if !call.contains_key("type")
        && let Some(t) = f.get("type")
    {
        call.insert("type".into(), t.clone());
    }
    if let Some(Value::Object(ff)) = f.get("function") {
        let func = call.entry("function").or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(func) = func {
            if let Some(name) = ff.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()) {
                let have = func.get("name").and_then(Value::as_str).unwrap_or("");
                if have.is_empty() {
                    func.insert("name".into(), Value::String(name.to_owned()));
                }
            }
            match (func.get_mut("arguments"), ff.get("arguments")) {
                (_, None | Some(Value::Null)) => {}
                (Some(Value::String(a)), Some(Value::String(d))) => a.push_str(d),
                (_, Some(d)) => {
                    func.insert("arguments".into(), d.clone());
                }
            }
        }
    }
    Ok(())
}

fn merge_content(message: &mut Map<String, Value>, dv: &Value) {
    let current = message.entry("content").or_insert(Value::Null);
    match (current, dv) {
        (_, Value::Null) => {}
        (c @ Value::Null, d) => *c = d.clone(),
        (Value::String(a), Value::String(d)) => a.push_str(d),
        (c, d) => {
            let mut parts = match std::mem::take(c) {
                Value::Array(parts) => parts,
                Value::String(s) if s.is_empty() => Vec::new(),
                Value::String(s) => vec![text_part(s)],
                other => vec![other],
            };
            let more: Vec<Value> = match d {
                Value::Array(more) => more.clone(),
                Value::String(s) => vec![text_part(s.clone())],
                other => vec![other.clone()],
            };
            for part in more {
                let merged = match (parts.last_mut(), part.get("type").and_then(Value::as_str)) {
                    (Some(Value::Object(last)), Some("text"))
                        if last.get("type").and_then(Value::as_str) == Some("text") =>
                    {
                        if let (Some(Value::String(a)), Some(b)) =
                            (last.get_mut("text"), part.get("text").and_then(Value::as_str))
                        {
                            a.push_str(b);
                            true
                        } else {
                            false
                        }
                    }
                    _ => false,
                };
                if !merged {
                    parts.push(part);
                }
            }
            *c = Value::Array(parts);
        }
    }
}

fn text_part(text: String) -> Value {
    let mut m = Map::new();
    m.insert("type".into(), Value::String("text".into()));
    m.insert("text".into(), Value::String(text));
    Value::Object(m)
}
