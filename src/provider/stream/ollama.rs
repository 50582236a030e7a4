//! Streamed Ollama `/api/chat` completions (NDJSON, one `ChatResponse` per line) → the
//! `stream:false` body, assembled the way the server assembles it itself (`ChatHandler`):
//! `message.content` and `message.thinking` concatenated, `message.tool_calls` appended in order
//! (each call arrives whole, possibly spread over several chunks), `message.role` the first
//! seen, and every top-level field (`model`, `created_at`, `done`, `done_reason`, the
//! `*_duration`s and `*_count`s) from the `done: true` chunk. `thinking` and `tool_calls` are
//! written only when something arrived (the server omits them when empty); `content` always.
//!
//! A line `{"error": "…"}` (how the server reports a failure mid-stream) is a
//! [`StreamError::Provider`]. No `done: true` chunk: what arrived is assembled with a warning,
//! the top-level fields from the last chunk and no `done_reason`. No chunk with a `message` is
//! [`StreamError::NoTurn`]. Other message fields (`images`, …) are taken from the last chunk
//! that has them.

use serde_json::{Map, Value, json};

use super::{Assembled, StreamError};
use crate::provider::Provider;

const P: Provider = Provider::Ollama;

/// Assembles the chunks of one streamed `/api/chat` response.
pub fn assemble(events: &[Value]) -> Result<Assembled, StreamError> {
    let mut role: Option<Value> = None;
    let mut content = String::new();
    let mut thinking: Option<String> = None;
    let mut tool_calls: Vec<Value> = Vec::new();
    let mut message_extra = Map::new();
    let mut saw_message = false;
    let mut top: Option<&Map<String, Value>> = None;
    let mut done = false;
    let mut warnings = Vec::new();

    for (i, event) in events.iter().enumerate() {
        let bad = |reason: String| StreamError::Event {
            provider: P,
            index: i,
            reason,
        };
        let obj = event
            .as_object()
            .ok_or_else(|| bad("a chunk is not a JSON object".into()))?;
        if let Some(error) = obj.get("error").filter(|e| !e.is_null()) {
            return Err(StreamError::Provider {
                provider: P,
                message: error.as_str().map_or_else(|| error.to_string(), str::to_owned),
            });
        }
        if done {
            warnings.push(format!(
                "chunk {i} came after the `done: true` chunk; it was assembled too"
            ));
        }
        match obj.get("message") {
            None | Some(Value::Null) => {
                if !obj.contains_key("done") {
                    warnings.push(format!("chunk {i} has neither `message` nor `done`; skipped"));
                    continue;
                }
            }
            Some(Value::Object(message)) => {
                saw_message = true;
                for (k, v) in message {
                    match (k.as_str(), v) {
                        (_, Value::Null) => {}
                        ("role", v) => {
                            if role.is_none() {
                                role = Some(v.clone());
                            }
                        }
                        ("content", Value::String(s)) => content.push_str(s),
                        ("thinking", Value::String(s)) => {
                            if !s.is_empty() {
                                thinking.get_or_insert_with(String::new).push_str(s);
                            }
                        }
                        ("tool_calls", Value::Array(list)) => tool_calls.extend(list.iter().cloned()),
                        ("content" | "thinking" | "tool_calls", _) => {
                            return Err(bad(format!("`message.{k}` has the wrong JSON type")));
                        }
                        (_, v) => {
                            message_extra.insert(k.clone(), v.clone());
                        }
                    }
                }
            }
            Some(_) => return Err(bad("`message` is not an object".into())),
        }
        top = Some(obj);
        if obj.get("done").and_then(Value::as_bool) == Some(true) {
            done = true;
        }
    }

    if !saw_message {
        return Err(StreamError::NoTurn {
            provider: P,
            missing: if events.is_empty() {
                "the stream has no chunk".to_owned()
            } else {
                "no chunk has a `message`".to_owned()
            },
        });
    }
    if !done {
        warnings.push(
            "no `done: true` chunk: the stream was cut short; what arrived was assembled without a done_reason"
                .to_owned(),
        );
    }

    let mut message = Map::new();
    message.insert("role".into(), role.unwrap_or_else(|| json!("assistant")));
    message.insert("content".into(), Value::String(content));
    if let Some(thinking) = thinking {
        message.insert("thinking".into(), Value::String(thinking));
    }
    if !tool_calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(tool_calls));
    }
    message.extend(message_extra);

    let mut body = Map::new();
    for (k, v) in top.into_iter().flatten() {
        if k == "message" {
            body.insert(k.clone(), Value::Object(std::mem::take(&mut message)));
        } else {
            body.insert(k.clone(), v.clone());
        }
    }
    if !message.is_empty() {
        // The last chunk had no `message` key: put it after the identifying fields.
        body.insert("message".into(), Value::Object(message));
    }
    Ok(Assembled {
        completion: Value::Object(body),
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::ToolCall;

    fn ok(events: &[Value]) -> Assembled {
        match assemble(events) {
            Ok(a) => a,
            Err(e) => panic!("assemble failed: {e}"),
        }
    }

    fn calls(body: &Value) -> Vec<ToolCall> {
        match Provider::Ollama.parse(body) {
            Ok(p) => p.calls,
            Err(e) => panic!("parse failed: {e}"),
        }
    }

    fn chunk(message: Value) -> Value {
        json!({"model": "qwen3", "created_at": "2026-12-03T08:00:00.1Z", "message": message, "done": false})
    }
    fn done() -> Value {
        json!({"model": "qwen3", "created_at": "2026-12-03T08:00:01.9Z",
            "message": {"role": "assistant", "content": ""}, "done_reason": "stop", "done": true,
            "total_duration": 1_900_000_000u64, "load_duration": 10_000_000u64, "prompt_eval_count": 40,
            "prompt_eval_duration": 50_000_000u64, "eval_count": 22, "eval_duration": 800_000_000u64})
    }

    #[test]
    fn thinking_then_parallel_calls() {
        let events = [
            chunk(json!({"role": "assistant", "content": "", "thinking": "The user "})),
            chunk(json!({"role": "assistant", "content": "", "thinking": "wants two."})),
            chunk(json!({"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_a1b2c3d4", "function": {"index": 0, "name": "get_weather", "arguments": {"city": "Paris"}}}]})),
            chunk(json!({"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_e5f6a7b8", "function": {"index": 1, "name": "get_weather", "arguments": {"city": "Z\u{fc}rich \"Z\" \u{26}"}}}]})),
            done(),
        ];
        let a = ok(&events);
        assert!(a.warnings.is_empty(), "{:?}", a.warnings);
        insta::assert_json_snapshot!(a.completion);
        let expected = json!({"model": "qwen3", "message": {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_a1b2c3d4", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
            {"id": "call_e5f6a7b8", "function": {"name": "get_weather", "arguments": {"city": "Zürich \"Z\" &"}}}]},
            "done_reason": "stop", "done": true});
        assert_eq!(calls(&a.completion), calls(&expected));
        assert_eq!(a.completion["message"]["thinking"], json!("The user wants two."));
        assert_eq!(a.completion["eval_count"], json!(22));
        assert_eq!(
            Provider::Ollama.parse(&a.completion).ok().and_then(|p| p.stop_reason),
            Some(json!("stop"))
        );
    }

    #[test]
    fn final_answer() {
        let events = [
            chunk(json!({"role": "assistant", "content": "Il fait "})),
            chunk(json!({"role": "assistant", "content": "12 °C."})),
            done(),
        ];
        let a = ok(&events);
        insta::assert_json_snapshot!(a.completion);
        assert!(Provider::Ollama.parse(&a.completion).is_ok_and(|p| p.finished));
    }

    #[test]
    fn call_without_id_or_arguments() {
        let events = [
            chunk(
                json!({"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "now", "arguments": {}}}]}),
            ),
            done(),
        ];
        let a = ok(&events);
        let got = calls(&a.completion);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].id, None);
        assert_eq!(got[0].arguments.to_value(), json!({}));
    }

    #[test]
    fn broken_streams() {
        let a = ok(&[chunk(json!({"role": "assistant", "content": "hal"}))]);
        assert_eq!(a.warnings.len(), 1);
        assert_eq!(a.completion["done"], json!(false));
        assert_eq!(
            Provider::Ollama.parse(&a.completion).ok().and_then(|p| p.stop_reason),
            None
        );
        assert!(matches!(
            assemble(&[chunk(json!({"content": "x"})), json!({"error": "model crashed"})]),
            Err(StreamError::Provider { message, .. }) if message == "model crashed"
        ));
        assert!(matches!(assemble(&[]), Err(StreamError::NoTurn { .. })));
        assert!(matches!(
            assemble(&[json!({"model": "m", "done": true})]),
            Err(StreamError::NoTurn { .. })
        ));
        assert!(matches!(assemble(&[json!("x")]), Err(StreamError::Event { .. })));
        assert!(matches!(
            assemble(&[chunk(json!({"content": 3}))]),
            Err(StreamError::Event { .. })
        ));
        let a = ok(&[
            chunk(json!({"role": "assistant", "content": "a"})),
            json!({"weird": 1}),
            done(),
        ]);
        assert_eq!(a.warnings.len(), 1);
    }
}
