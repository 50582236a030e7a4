//! Streamed openai_chat completions → the non-streamed body. See the module docs of `stream`.
//!
//! The rules are those of the OpenAI SDK's `ChatCompletionStreamState`
//! (`openai/lib/streaming/chat/_completions.py`, `openai/lib/streaming/_deltas.py`):
//! - the first chunk with `choices` gives the envelope (`id`, `created`, `model`, …) and each
//!   choice's `message` is its first `delta`; later deltas merge into it with
//!   `accumulate_delta`: strings concatenate, `index`/`type` are replaced, objects merge
//!   recursively, lists of objects merge entry by entry by their `index` field;
//! - `finish_reason` is the last non-null one; a chunk's non-null `usage` replaces the body's
//!   (the `include_usage` chunk with `choices: []` carries it);
//! - the body then reads like a non-streamed one: `object: "chat.completion"`, per-chunk noise
//!   (`obfuscation`, Mistral's padding `p`) left out, `tool_calls[].index` dropped (it is a
//!   streaming routing key; a non-streamed message has none), a missing `type` is `function`.
//!
//! Where the SDK indexes lists by position (so a gap in `tool_calls[].index` shifts calls) this
//! module routes by the `index` field itself, which is what the field means.

use serde_json::{Map, Value};

use super::{Assembled, StreamError};
use crate::provider::Provider;

/// Assembles the events of one streamed response.
pub fn assemble(events: &[Value]) -> Result<Assembled, StreamError> {
    assemble_chat(events, Provider::OpenaiChat)
}

/// The chat-shaped assembly shared with Mistral; `provider` picks how `tool_calls` and
/// `content` merge (see `stream::mistral`).
pub(super) fn assemble_chat(events: &[Value], provider: Provider) -> Result<Assembled, StreamError> {
    let mut body: Option<Map<String, Value>> = None;
    let mut choices: Vec<Choice> = Vec::new();
    let mut warnings = Vec::new();
    let mut finished = false;
    let mut unknown = 0usize;
    for (i, event) in events.iter().enumerate() {
        let bad = |reason: &str| StreamError::Event {
            provider,
            index: i,
            reason: reason.to_owned(),
        };
        let chunk = event.as_object().ok_or_else(|| bad("it is not a JSON object"))?;
        if let Some(err) = chunk.get("error") {
            return Err(StreamError::Provider {
                provider,
                message: error_message(err),
            });
        }
        let Some(deltas) = chunk.get("choices").and_then(Value::as_array) else {
            unknown += 1;
            continue;
        };
        let envelope = body.get_or_insert_with(|| envelope_of(chunk));
        if let Some(usage) = chunk.get("usage").filter(|u| !u.is_null()) {
            envelope.insert("usage".into(), usage.clone());
        }
        if let Some(fp) = chunk.get("system_fingerprint").filter(|u| !u.is_null()) {
            envelope.insert("system_fingerprint".into(), fp.clone());
        }
        for delta_choice in deltas {
            let dc = delta_choice
                .as_object()
                .ok_or_else(|| bad("a `choices` entry is not an object"))?;
            let index = dc.get("index").and_then(Value::as_u64).unwrap_or(0);
            let at = match choices.iter().position(|c| c.index == index) {
                Some(at) => at,
                None => {
                    choices.push(Choice::new(index));
                    choices.len() - 1
                }
            };
            let choice = &mut choices[at];
            for (k, v) in dc {
                match k.as_str() {
                    "delta" | "index" => {}
                    "finish_reason" => {
                        if !v.is_null() {
                            choice.rest.insert(k.clone(), v.clone());
                            finished = true;
                        }
                    }
                    _ if v.is_null() && choice.rest.contains_key(k) => {}
                    _ => {
                        choice.rest.insert(k.clone(), v.clone());
                    }
                }
            }
            match dc.get("delta") {
                Some(Value::Object(delta)) => {
                    merge_message(&mut choice.message, delta, provider).map_err(|reason| bad(&reason))?
                }
                None | Some(Value::Null) => {}
                Some(_) => return Err(bad("`delta` is not an object")),
            }
        }
    }
    let Some(mut body) = body else {
        return Err(StreamError::NoTurn {
            provider,
            missing: "no chunk has a `choices` array".to_owned(),
        });
    };
    if unknown > 0 {
        warnings.push(format!("{unknown} event(s) without `choices` or `error` were ignored"));
    }
    if !finished {
        warnings.push("no chunk carried a `finish_reason`: the stream was probably cut before its end".to_owned());
    }
    choices.sort_by_key(|c| c.index);
    let mut out = Vec::with_capacity(choices.len());
    for c in choices {
        out.push(c.finish(provider, &mut warnings)?);
    }
    body.insert("choices".into(), Value::Array(out));
    Ok(Assembled {
        completion: Value::Object(body),
        warnings,
    })
}

/// The non-streamed envelope from the first chunk: everything but `choices` and per-chunk noise.
fn envelope_of(chunk: &Map<String, Value>) -> Map<String, Value> {
    let mut body = Map::new();
    for (k, v) in chunk {
        match k.as_str() {
            "choices" | "obfuscation" | "p" => {}
            "object" => {
                body.insert(k.clone(), Value::String("chat.completion".into()));
            }
            _ => {
                body.insert(k.clone(), v.clone());
            }
        }
    }
    body.entry("object")
        .or_insert_with(|| Value::String("chat.completion".into()));
    body
}

/// The provider's words for an in-stream `error` object.
pub(super) fn error_message(err: &Value) -> String {
    match err {
        Value::String(s) => s.clone(),
        Value::Object(o) => o
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| err.to_string()),
        other => other.to_string(),
    }
}

/// One choice being assembled.
struct Choice {
    index: u64,
    message: Map<String, Value>,
    /// `finish_reason`, `logprobs` and whatever else the choice carried besides `delta`.
    rest: Map<String, Value>,
}

impl Choice {
    fn new(index: u64) -> Self {
        Choice {
            index,
            message: Map::new(),
            rest: Map::new(),
        }
    }

    /// The non-streamed choice `{index, message, finish_reason, …}`.
    fn finish(mut self, provider: Provider, warnings: &mut Vec<String>) -> Result<Value, StreamError> {
        self.message.remove("obfuscation");
        self.message.remove("p");
        self.message
            .entry("role")
            .or_insert_with(|| Value::String("assistant".into()));
        self.message.entry("content").or_insert(Value::Null);
        if let Some(Value::Array(calls)) = self.message.get_mut("tool_calls") {
            calls.sort_by_key(|c| c.get("index").and_then(Value::as_u64).unwrap_or(u64::MAX));
            let mut calls_seen = 0usize;
            for call in calls.iter_mut() {
                let Some(call) = call.as_object_mut() else { continue };
                call.remove("index");
                call.entry("type").or_insert_with(|| Value::String("function".into()));
                let id = call.get("id").and_then(Value::as_str).unwrap_or("").to_owned();
                let named = call
                    .get("function")
                    .and_then(|f| f.get("name"))
                    .and_then(Value::as_str)
                    .is_some_and(|n| !n.is_empty());
                // OpenAI sends `id` and `function.name` on a call's first fragment only: without
                // them the call cannot be run or answered, so the stream is unusable rather than
                // the call quietly lost. (Mistral may omit ids; its parser decides.)
                if provider == Provider::OpenaiChat && (id.is_empty() || !named) {
                    return Err(StreamError::NoTurn {
                        provider,
                        missing: format!(
                            "tool call {} of choice {} has no `id` or `function.name` (its first fragment is missing)",
                            calls_seen, self.index
                        ),
                    });
                }
                calls_seen += 1;
                if let Some(Value::String(args)) = call.get("function").and_then(|f| f.get("arguments"))
                    && !args.trim().is_empty()
                    && serde_json::from_str::<serde::de::IgnoredAny>(args).is_err()
                {
                    warnings.push(format!(
                        "the arguments of call `{id}` are not complete JSON; the call is answered with `args_not_json`"
                    ));
                }
            }
        }
        let mut choice = Map::new();
        choice.insert("index".into(), Value::from(self.index));
        choice.insert("message".into(), Value::Object(self.message));
        choice.insert(
            "finish_reason".into(),
            self.rest.remove("finish_reason").unwrap_or(Value::Null),
        );
        for (k, v) in self.rest {
            choice.insert(k, v);
        }
        Ok(Value::Object(choice))
    }
}

/// Merges one `delta` into the message being assembled.
fn merge_message(
    message: &mut Map<String, Value>,
    delta: &Map<String, Value>,
    provider: Provider,
) -> Result<(), String> {
    if provider == Provider::Mistral {
        return super::mistral::merge_message(message, delta);
    }
    accumulate_delta(message, delta)
}

/// The SDK's `accumulate_delta` (`openai/lib/streaming/_deltas.py`), with errors for what it
/// raises on, and list entries routed by their `index` field.
pub(super) fn accumulate_delta(acc: &mut Map<String, Value>, delta: &Map<String, Value>) -> Result<(), String> {
    for (key, dv) in delta {
        let Some(av) = acc.get_mut(key) else {
            acc.insert(key.clone(), dv.clone());
            continue;
        };
        if av.is_null() || key == "index" || key == "type" {
            *av = dv.clone();
            continue;
        }
        match (av, dv) {
            (Value::String(a), Value::String(d)) => a.push_str(d),
            (Value::Number(a), Value::Number(d)) => {
                if let (Some(x), Some(y)) = (a.as_i64(), d.as_i64()) {
                    *a = serde_json::Number::from(x.saturating_add(y));
                } else if let Some(n) = a
                    .as_f64()
                    .zip(d.as_f64())
                    .and_then(|(x, y)| serde_json::Number::from_f64(x + y))
                {
                    *a = n;
                }
            }
            (Value::Object(a), Value::Object(d)) => accumulate_delta(a, d)?,
            (Value::Array(a), Value::Array(d)) => {
                if a.iter().all(|x| x.is_string() || x.is_number()) && d.iter().all(|x| !x.is_object()) {
                    a.extend(d.iter().cloned());
                    continue;
                }
                for entry in d {
                    let e = entry
                        .as_object()
                        .ok_or_else(|| format!("an entry of `{key}` is not an object"))?;
                    let index = e
                        .get("index")
                        .and_then(Value::as_u64)
                        .ok_or_else(|| format!("an entry of `{key}` has no integer `index`"))?;
                    let existing = a
                        .iter_mut()
                        .filter_map(Value::as_object_mut)
                        .find(|x| x.get("index").and_then(Value::as_u64) == Some(index));
                    match existing {
                        Some(x) => accumulate_delta(x, e)?,
                        None => a.push(entry.clone()),
                    }
                }
            }
            // The SDK keeps the first value when the types differ.
            _ => {}
        }
    }
    Ok(())
}
