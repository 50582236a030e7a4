//! Streamed Cohere v2 chat completions → the v2 chat response
//! `{id, message: {role, tool_plan?, tool_calls?, content?, citations?}, finish_reason, usage}`.
//!
//! Events are `{"type", …}` objects: `message-start{id, delta.message{role, …}}` →
//! `tool-plan-delta{delta.message.tool_plan}` (appended) → per call `tool-call-start{index,
//! delta.message.tool_calls}` (ONE whole `ToolCallV2` whose `function.arguments` is `""`) →
//! `tool-call-delta{index, delta.message.tool_calls.function.arguments}` (appended per index)
//! → `tool-call-end` → `content-start{index, delta.message.content{type, text|thinking}}` →
//! `content-delta` (appended per index) → `content-end` → `citation-start{index,
//! delta.message.citations}` → `citation-end` → `message-end{delta{finish_reason, usage}}`.
//!
//! Rules: arguments stay the exact string received (Cohere pretty-prints them; the parser
//! reads the string, and fragments that do not form JSON give a model-repairable
//! `args_not_json`). Calls, content items and citations keep the order of their start events.
//! `tool_plan`, `tool_calls`, `content` and `citations` are written only when something arrived
//! for them, as in the non-streamed response. Out of order: a `content-delta` for an index that
//! was never started starts a text item; a `tool-call-delta` without its `tool-call-start` is a
//! [`StreamError::Event`] naming the index (the call has no id or name). No `message-end`:
//! assembled with a warning and no `finish_reason`. Unknown event types (`debug`, …) are
//! skipped with a warning; a `{"type": "error"}` event is a [`StreamError::Provider`].

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use super::{Assembled, StreamError};
use crate::provider::Provider;

const P: Provider = Provider::Cohere;

/// One tool call being assembled.
struct Call {
    /// The `ToolCallV2` from `tool-call-start`.
    start: Map<String, Value>,
    arguments: String,
}

/// One content item being assembled.
struct Content {
    /// The item from `content-start` (`type`, …).
    start: Map<String, Value>,
    /// Appended string fields (`text`, `thinking`), in first-seen order.
    buffers: Vec<(String, String)>,
}

impl Content {
    fn append(&mut self, key: &str, fragment: &str) {
        match self.buffers.iter_mut().find(|(k, _)| k == key) {
            Some((_, buf)) => buf.push_str(fragment),
            None => self.buffers.push((key.to_owned(), fragment.to_owned())),
        }
    }
}

/// `delta.message.<key>` of an event.
fn message_field<'a>(event: &'a Value, key: &str) -> Option<&'a Value> {
    event.get("delta")?.get("message")?.get(key).filter(|v| !v.is_null())
}

/// Assembles the events of one streamed v2 chat response.
pub fn assemble(events: &[Value]) -> Result<Assembled, StreamError> {
    let mut id: Option<Value> = None;
    let mut message = Map::new();
    let mut started = false;
    let mut tool_plan = String::new();
    let mut calls: Vec<Call> = Vec::new();
    let mut call_pos: HashMap<u64, usize> = HashMap::new();
    let mut contents: Vec<Content> = Vec::new();
    let mut content_pos: HashMap<u64, usize> = HashMap::new();
    let mut citations: Vec<Value> = Vec::new();
    let mut end: Option<Map<String, Value>> = None;
    let mut warnings = Vec::new();

    for (i, event) in events.iter().enumerate() {
        let bad = |reason: String| StreamError::Event {
            provider: P,
            index: i,
            reason,
        };
        if !event.is_object() {
            return Err(bad("an event is not a JSON object".into()));
        }
        let ty = event
            .get("type")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("no string `type`".into()))?;
        let index = || {
            event
                .get("index")
                .and_then(Value::as_u64)
                .ok_or_else(|| bad(format!("a {ty} event without an integer `index`")))
        };
        match ty {
            "message-start" => {
                let first = !started;
                started = true;
                if let Some(v) = event.get("id").filter(|v| !v.is_null()) {
                    id = Some(v.clone());
                }
                if let Some(m) = event
                    .get("delta")
                    .and_then(|d| d.get("message"))
                    .and_then(Value::as_object)
                {
                    // A plan already present in the first message-start (normally "") starts
                    // the plan.
                    if first
                        && tool_plan.is_empty()
                        && let Some(Value::String(seed)) = m.get("tool_plan")
                    {
                        tool_plan.push_str(seed);
                    }
                    for (k, v) in m {
                        // The list fields start empty here; they are filled by their own
                        // events.
                        if !matches!(k.as_str(), "content" | "tool_plan" | "tool_calls" | "citations") && !v.is_null() {
                            message.insert(k.clone(), v.clone());
                        }
                    }
                }
            }
            "tool-plan-delta" => {
                if let Some(v) = message_field(event, "tool_plan") {
                    let s = v.as_str().ok_or_else(|| bad("`tool_plan` is not a string".into()))?;
                    tool_plan.push_str(s);
                }
            }
            "tool-call-start" => {
                let index = index()?;
                if call_pos.contains_key(&index) {
                    return Err(bad(format!("tool call {index} is started twice")));
                }
                let call = match message_field(event, "tool_calls") {
                    Some(Value::Object(call)) => call,
                    Some(Value::Array(list)) if list.len() == 1 => list[0]
                        .as_object()
                        .ok_or_else(|| bad(format!("tool call {index} is not an object")))?,
                    _ => {
                        return Err(bad(format!(
                            "tool call {index}: no ToolCallV2 in delta.message.tool_calls"
                        )));
                    }
                };
                let mut start = call.clone();
                let arguments = start
                    .get("function")
                    .and_then(|f| f.get("arguments"))
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                if let Some(Value::Object(f)) = start.get_mut("function") {
                    f.remove("arguments");
                }
                call_pos.insert(index, calls.len());
                calls.push(Call { start, arguments });
            }
            "tool-call-delta" => {
                let index = index()?;
                let pos = call_pos.get(&index).copied().ok_or_else(|| {
                    bad(format!(
                        "tool call {index}: arguments arrived without its tool-call-start, so the call has no id or name"
                    ))
                })?;
                let fragment = message_field(event, "tool_calls")
                    .and_then(|c| c.get("function"))
                    .and_then(|f| f.get("arguments"))
                    .filter(|a| !a.is_null());
                match fragment {
                    None => {}
                    Some(Value::String(s)) => calls[pos].arguments.push_str(s),
                    Some(_) => return Err(bad(format!("tool call {index}: `arguments` is not a string"))),
                }
            }
            "content-start" => {
                let index = index()?;
                let item = message_field(event, "content")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_else(|| {
                        let mut m = Map::new();
                        m.insert("type".into(), json!("text"));
                        m
                    });
                let mut content = Content {
                    start: Map::new(),
                    buffers: Vec::new(),
                };
                for (k, v) in item {
                    match v {
                        Value::String(s) if matches!(k.as_str(), "text" | "thinking") => content.append(&k, &s),
                        v => {
                            content.start.insert(k, v);
                        }
                    }
                }
                match content_pos.get(&index) {
                    Some(_) => return Err(bad(format!("content item {index} is started twice"))),
                    None => {
                        content_pos.insert(index, contents.len());
                        contents.push(content);
                    }
                }
            }
            "content-delta" => {
                let index = index()?;
                let pos = match content_pos.get(&index) {
                    Some(pos) => *pos,
                    None => {
                        let mut start = Map::new();
                        start.insert("type".into(), json!("text"));
                        content_pos.insert(index, contents.len());
                        contents.push(Content {
                            start,
                            buffers: Vec::new(),
                        });
                        contents.len() - 1
                    }
                };
                if let Some(delta) = message_field(event, "content").and_then(Value::as_object) {
                    for (k, v) in delta {
                        match v {
                            Value::String(s) => contents[pos].append(k, s),
                            Value::Null => {}
                            _ => return Err(bad(format!("content item {index}: `{k}` is not a string"))),
                        }
                    }
                }
            }
            "citation-start" => {
                if let Some(c) = message_field(event, "citations") {
                    match c {
                        Value::Array(list) => citations.extend(list.iter().cloned()),
                        other => citations.push(other.clone()),
                    }
                }
            }
            "tool-call-end" | "content-end" | "citation-end" => {}
            "message-end" => {
                let delta = event
                    .get("delta")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default();
                if let Some(error) = delta.get("error").and_then(Value::as_str) {
                    return Err(StreamError::Provider {
                        provider: P,
                        message: error.to_owned(),
                    });
                }
                if let Some(v) = event.get("id").filter(|v| !v.is_null())
                    && id.is_none()
                {
                    id = Some(v.clone());
                }
                end = Some(delta);
            }
            "error" => {
                let message = event
                    .get("message")
                    .or_else(|| event.get("error"))
                    .map(|m| m.as_str().map_or_else(|| m.to_string(), str::to_owned))
                    .unwrap_or_else(|| event.to_string());
                return Err(StreamError::Provider { provider: P, message });
            }
            other => warnings.push(format!("event {i}: unknown event type {other:?} skipped")),
        }
    }

    if !started && calls.is_empty() && contents.is_empty() && tool_plan.is_empty() {
        return Err(StreamError::NoTurn {
            provider: P,
            missing: "no `message-start`, tool call or content event".to_owned(),
        });
    }
    if !started {
        warnings.push("no `message-start`: the role was taken to be `assistant` and there is no `id`".to_owned());
    }
    if !message.contains_key("role") {
        message.insert("role".into(), json!("assistant"));
    }
    if !tool_plan.is_empty() {
        message.insert("tool_plan".into(), Value::String(tool_plan));
    }
    if !calls.is_empty() {
        let list: Vec<Value> = calls
            .into_iter()
            .map(|Call { mut start, arguments }| {
                match start.get_mut("function") {
                    Some(Value::Object(f)) => {
                        f.insert("arguments".into(), Value::String(arguments));
                    }
                    _ => {
                        start.insert("function".into(), json!({"arguments": arguments}));
                    }
                }
                Value::Object(start)
            })
            .collect();
        message.insert("tool_calls".into(), Value::Array(list));
    }
    if !contents.is_empty() {
        let list: Vec<Value> = contents
            .into_iter()
            .map(|Content { mut start, buffers }| {
                for (k, v) in buffers {
                    start.insert(k, Value::String(v));
                }
                Value::Object(start)
            })
            .collect();
        message.insert("content".into(), Value::Array(list));
    }
    if !citations.is_empty() {
        message.insert("citations".into(), Value::Array(citations));
    }

    let mut body = Map::new();
    if let Some(id) = id {
        body.insert("id".into(), id);
    }
    body.insert("message".into(), Value::Object(message));
    match end {
        Some(delta) => {
            for (k, v) in delta {
                if !v.is_null() {
                    body.insert(k, v);
                }
            }
        }
        None => warnings.push(
            "no `message-end`: the stream was cut short; what arrived was assembled without a finish_reason".to_owned(),
        ),
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
    use proptest::prelude::*;

    fn ok(events: &[Value]) -> Assembled {
        match assemble(events) {
            Ok(a) => a,
            Err(e) => panic!("assemble failed: {e}"),
        }
    }

    fn calls(body: &Value) -> Vec<ToolCall> {
        match Provider::Cohere.parse(body) {
            Ok(p) => p.calls,
            Err(e) => panic!("parse failed: {e}"),
        }
    }

    fn start() -> Value {
        json!({"type": "message-start", "id": "29f14a5a", "delta": {"message": {
            "role": "assistant", "content": [], "tool_plan": "", "tool_calls": [], "citations": []}}})
    }
    fn plan(t: &str) -> Value {
        json!({"type": "tool-plan-delta", "delta": {"message": {"tool_plan": t}}})
    }
    fn call_start(index: u64, id: &str, name: &str) -> Value {
        json!({"type": "tool-call-start", "index": index, "delta": {"message": {"tool_calls": {
            "id": id, "type": "function", "function": {"name": name, "arguments": ""}}}}})
    }
    fn args(index: u64, fragment: &str) -> Value {
        json!({"type": "tool-call-delta", "index": index, "delta": {"message": {"tool_calls": {"function": {"arguments": fragment}}}}})
    }
    fn call_end(index: u64) -> Value {
        json!({"type": "tool-call-end", "index": index})
    }
    fn end(reason: &str) -> Value {
        json!({"type": "message-end", "delta": {"finish_reason": reason, "usage": {
            "billed_units": {"input_tokens": 37, "output_tokens": 28}, "tokens": {"input_tokens": 913, "output_tokens": 83}}}})
    }

    #[test]
    fn plan_then_parallel_calls() {
        let events = [
            start(),
            plan("I will "),
            plan("check both."),
            call_start(0, "get_weather_1", "get_weather"),
            args(0, "{\n    \"location\""),
            args(0, ": \"Toronto\"\n}"),
            call_end(0),
            call_start(1, "get_weather_2", "get_weather"),
            args(1, "{\n    \"location\": \"Z\\u00fc"),
            args(1, "rich \\\"Z\\\"\"\n}"),
            call_end(1),
            end("TOOL_CALL"),
        ];
        let a = ok(&events);
        assert!(a.warnings.is_empty(), "{:?}", a.warnings);
        insta::assert_json_snapshot!(a.completion);
        let expected = json!({"id": "29f14a5a", "finish_reason": "TOOL_CALL", "message": {"role": "assistant",
            "tool_plan": "I will check both.", "tool_calls": [
                {"id": "get_weather_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\": \"Toronto\"}"}},
                {"id": "get_weather_2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\": \"Zürich \\\"Z\\\"\"}"}}]}});
        assert_eq!(calls(&a.completion), calls(&expected));
        // The pretty-printed string is kept as received.
        assert_eq!(
            a.completion["message"]["tool_calls"][0]["function"]["arguments"],
            json!("{\n    \"location\": \"Toronto\"\n}")
        );
        assert_eq!(
            Provider::Cohere.parse(&a.completion).ok().and_then(|p| p.stop_reason),
            Some(json!("TOOL_CALL"))
        );
    }

    #[test]
    fn final_answer_with_thinking_and_citations() {
        let events = [
            start(),
            json!({"type": "content-start", "index": 0, "delta": {"message": {"content": {"type": "thinking", "thinking": ""}}}}),
            json!({"type": "content-delta", "index": 0, "delta": {"message": {"content": {"thinking": "Toronto is "}}}}),
            json!({"type": "content-delta", "index": 0, "delta": {"message": {"content": {"thinking": "cold."}}}}),
            json!({"type": "content-end", "index": 0}),
            json!({"type": "content-start", "index": 1, "delta": {"message": {"content": {"type": "text", "text": ""}}}}),
            json!({"type": "content-delta", "index": 1, "delta": {"message": {"content": {"text": "It is 5°C "}}}}),
            json!({"type": "content-delta", "index": 1, "delta": {"message": {"content": {"text": "in Toronto."}}}}),
            json!({"type": "citation-start", "index": 0, "delta": {"message": {"citations": {
                "start": 6, "end": 9, "text": "5°C", "sources": [{"type": "tool", "id": "get_weather_1:0", "tool_output": {"temperature": 5}}]}}}}),
            json!({"type": "citation-end", "index": 0}),
            json!({"type": "content-end", "index": 1}),
            end("COMPLETE"),
        ];
        let a = ok(&events);
        assert!(a.warnings.is_empty(), "{:?}", a.warnings);
        insta::assert_json_snapshot!(a.completion);
        let parsed = Provider::Cohere.parse(&a.completion).ok();
        assert_eq!(parsed.as_ref().map(|p| p.finished), Some(true));
        assert_eq!(
            a.completion["message"]["content"][1]["text"],
            json!("It is 5°C in Toronto.")
        );
    }

    #[test]
    fn empty_and_broken_arguments_keep_the_call() {
        let events = [
            start(),
            call_start(0, "now_1", "now"),
            call_end(0),
            call_start(1, "search_1", "search"),
            args(1, "{\"q\": \"unfin"),
        ];
        let a = ok(&events);
        assert_eq!(a.warnings.len(), 1, "{:?}", a.warnings); // no message-end
        insta::assert_json_snapshot!(a.completion);
        let got = calls(&a.completion);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].arguments.to_value(), json!({}));
        assert!(matches!(
            got[1].arguments,
            crate::call::Arguments::Invalid {
                problem: crate::call::ArgumentsProblem::InvalidJson,
                ..
            }
        ));
    }

    #[test]
    fn broken_streams() {
        let a = ok(&[start(), json!({"type": "debug", "x": 1}), end("COMPLETE")]);
        assert_eq!(a.warnings.len(), 1);
        let a = ok(&[
            start(),
            json!({"type": "content-delta", "index": 0, "delta": {"message": {"content": {"text": "hi"}}}}),
            end("COMPLETE"),
        ]);
        assert_eq!(
            a.completion["message"]["content"],
            json!([{"type": "text", "text": "hi"}])
        );
        assert!(matches!(
            assemble(&[start(), args(3, "{}")]),
            Err(StreamError::Event { index: 1, reason, .. }) if reason.contains("tool call 3")
        ));
        assert!(matches!(
            assemble(&[start(), call_start(0, "a", "t"), call_start(0, "b", "t")]),
            Err(StreamError::Event { index: 2, .. })
        ));
        assert!(matches!(
            assemble(&[start(), json!({"type": "message-end", "delta": {"error": "stream failed"}})]),
            Err(StreamError::Provider { message, .. }) if message == "stream failed"
        ));
        assert!(matches!(assemble(&[]), Err(StreamError::NoTurn { .. })));
        assert!(matches!(assemble(&[end("COMPLETE")]), Err(StreamError::NoTurn { .. })));
        assert!(matches!(
            assemble(&[json!({"no": "type"})]),
            Err(StreamError::Event { .. })
        ));
    }

    /// `s` split at the given character positions.
    fn split(s: &str, cuts: &[usize]) -> Vec<String> {
        let chars: Vec<char> = s.chars().collect();
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (chars.len() + 1)).collect();
        cuts.sort_unstable();
        let mut out = Vec::new();
        let mut last = 0;
        for c in cuts.into_iter().chain([chars.len()]) {
            out.push(chars[last..c].iter().collect());
            last = c;
        }
        out
    }

    #[test]
    fn fragments_split_mid_escape_and_mid_surrogate_pair() {
        let fragments = ["{\"e\": \"\\ud8", "3d\\ude", "00 \\", "\"x\\", "n\\u00", "e9\"}"];
        let mut events = vec![start(), call_start(0, "c", "echo")];
        events.extend(fragments.iter().map(|f| args(0, f)));
        events.extend([call_end(0), end("TOOL_CALL")]);
        let a = ok(&events);
        assert_eq!(
            calls(&a.completion)[0].arguments.to_value(),
            json!({"e": "\u{1F600} \"x\n\u{e9}"})
        );
    }

    proptest! {
        #[test]
        fn any_split_assembles_to_the_same_calls(
            cuts_a in proptest::collection::vec(0usize..200, 0..8),
            cuts_b in proptest::collection::vec(0usize..200, 0..8),
        ) {
            let args_a = r#"{"city": "Zürich \"Z\" \u00e9\n", "n": [1, 2.5, null], "emoji": "😀"}"#;
            let args_b = "{\n    \"q\": \"a\\\\b\",\n    \"deep\": {\"x\": true}\n}";
            let mut events = vec![start(), call_start(0, "c1", "a")];
            for f in split(args_a, &cuts_a) { events.push(args(0, &f)); }
            events.push(call_end(0));
            events.push(call_start(1, "c2", "b"));
            for f in split(args_b, &cuts_b) { events.push(args(1, &f)); }
            events.push(call_end(1));
            events.push(end("TOOL_CALL"));
            let a = assemble(&events).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let expected = json!({"id": "x", "message": {"role": "assistant", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "a", "arguments": args_a}},
                {"id": "c2", "type": "function", "function": {"name": "b", "arguments": args_b}}]}, "finish_reason": "TOOL_CALL"});
            prop_assert_eq!(calls(&a.completion), calls(&expected));
            prop_assert_eq!(&a.completion["message"]["tool_calls"][1]["function"]["arguments"], &json!(args_b));
        }
    }
}
