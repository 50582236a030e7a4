//! Streamed Gemini completions (`streamGenerateContent?alt=sse`) → the `generateContent` body.
//!
//! Every chunk is a whole `GenerateContentResponse` envelope, so assembling is a merge, done
//! per candidate `index` (absent = the candidate's position in the chunk's array):
//! - `content.parts` are appended in arrival order and never merged or split: each chunk's text
//!   stays its own part (python-genai's chat history keeps each chunk's content as is), and a
//!   `thoughtSignature` stays on the very part it came with — Gemini 3 rejects a function
//!   calling turn whose signatures do not come back exactly where they were. That includes the
//!   last `{"text": "", "thoughtSignature": …}` part a text answer may end with. `functionCall`
//!   parts arrive whole and are copied as they are.
//! - `content.role` is the first one seen; a chunk with `content: {role}` and no parts adds
//!   nothing.
//! - every other candidate field (`finishReason`, `safetyRatings`, `citationMetadata`, …) and
//!   every top-level field (`usageMetadata` — running totals —, `modelVersion`, `responseId`,
//!   `promptFeedback`) is taken from the last chunk that has it.
//!
//! Keys are copied verbatim, so REST camelCase and python-genai snake_case dumps both work (the
//! structural keys `candidates`, `index`, `content`, `role` and `parts` are spelled the same in
//! both). A chunk `{"error": {…}}` (what the API sends when a stream fails midway) is a
//! [`StreamError::Provider`]. No candidate and no `promptFeedback` in any chunk is
//! [`StreamError::NoTurn`]; no `finishReason` on candidate 0 means the stream was cut short: it
//! is assembled with a warning.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::{Assembled, StreamError};
use crate::provider::Provider;

const P: Provider = Provider::Gemini;

/// One candidate being assembled.
#[derive(Default)]
struct Candidate {
    /// Whether some chunk wrote its `index` (it is written back only then).
    explicit_index: bool,
    role: Option<Value>,
    /// Any content key other than `role`/`parts` (last value wins).
    content_extra: Map<String, Value>,
    parts: Vec<Value>,
    /// Whether some chunk carried a `content` object.
    has_content: bool,
    /// Every other candidate field, last value wins (insertion order of first appearance).
    fields: Map<String, Value>,
}

/// Assembles the chunks of one streamed response.
pub fn assemble(events: &[Value]) -> Result<Assembled, StreamError> {
    let mut top = Map::new();
    let mut candidates: BTreeMap<i64, Candidate> = BTreeMap::new();
    let mut saw_candidates = false;
    let mut warnings = Vec::new();

    for (i, event) in events.iter().enumerate() {
        let obj = event.as_object().ok_or_else(|| StreamError::Event {
            provider: P,
            index: i,
            reason: "a chunk is not a JSON object".to_owned(),
        })?;
        if let Some(error) = obj.get("error").filter(|e| !e.is_null()) {
            return Err(StreamError::Provider {
                provider: P,
                message: error_message(error),
            });
        }
        let mut known = false;
        for (key, value) in obj {
            if key == "candidates" {
                known = true;
                match value {
                    Value::Null => {}
                    Value::Array(list) => {
                        saw_candidates = true;
                        for (pos, cand) in list.iter().enumerate() {
                            merge_candidate(&mut candidates, i, pos, cand)?;
                        }
                    }
                    _ => {
                        return Err(StreamError::Event {
                            provider: P,
                            index: i,
                            reason: "`candidates` is not an array".to_owned(),
                        });
                    }
                }
            } else {
                known |= is_envelope_key(key);
                if !value.is_null() {
                    top.insert(key.clone(), value.clone());
                }
            }
        }
        if !known {
            warnings.push(format!(
                "chunk {i} has none of the GenerateContentResponse fields; its keys were kept as top-level fields"
            ));
        }
    }

    if !saw_candidates && !top.contains_key("promptFeedback") && !top.contains_key("prompt_feedback") {
        return Err(StreamError::NoTurn {
            provider: P,
            missing: if events.is_empty() {
                "the stream has no chunk".to_owned()
            } else {
                "no chunk has `candidates` or `promptFeedback`".to_owned()
            },
        });
    }

    let first_has_reason = candidates
        .values()
        .next()
        .is_some_and(|c| c.fields.contains_key("finishReason") || c.fields.contains_key("finish_reason"));
    if !candidates.is_empty() && !first_has_reason {
        warnings.push(
            "no chunk gave the first candidate a finishReason: the stream was probably cut short; \
             what arrived was assembled"
                .to_owned(),
        );
    }

    let mut body = Map::new();
    if saw_candidates {
        let list: Vec<Value> = candidates.into_iter().map(|(index, c)| c.into_value(index)).collect();
        body.insert("candidates".into(), Value::Array(list));
    }
    for (key, value) in top {
        body.insert(key, value);
    }
    Ok(Assembled {
        completion: Value::Object(body),
        warnings,
    })
}

/// Top-level keys of a `GenerateContentResponse` (either spelling).
fn is_envelope_key(key: &str) -> bool {
    matches!(
        key,
        "usageMetadata"
            | "usage_metadata"
            | "modelVersion"
            | "model_version"
            | "responseId"
            | "response_id"
            | "promptFeedback"
            | "prompt_feedback"
            | "createTime"
            | "create_time"
            | "automaticFunctionCallingHistory"
            | "automatic_function_calling_history"
            | "sdkHttpResponse"
            | "sdk_http_response"
    )
}

/// The text of an `error` chunk: `status: message (code)` when it has those fields.
fn error_message(error: &Value) -> String {
    let message = error.get("message").and_then(Value::as_str);
    let status = error.get("status").and_then(Value::as_str);
    let code = error.get("code").and_then(Value::as_i64);
    match (status, message, code) {
        (Some(s), Some(m), Some(c)) => format!("{s}: {m} ({c})"),
        (Some(s), Some(m), None) => format!("{s}: {m}"),
        (None, Some(m), _) => m.to_owned(),
        _ => error.to_string(),
    }
}

/// Folds one chunk's candidate into the accumulator for its index.
fn merge_candidate(
    candidates: &mut BTreeMap<i64, Candidate>,
    event: usize,
    pos: usize,
    cand: &Value,
) -> Result<(), StreamError> {
    let bad = |reason: String| StreamError::Event {
        provider: P,
        index: event,
        reason,
    };
    let cand = cand
        .as_object()
        .ok_or_else(|| bad(format!("candidates[{pos}] is not an object")))?;
    let (index, explicit) = match cand.get("index") {
        None | Some(Value::Null) => (i64::try_from(pos).unwrap_or(i64::MAX), false),
        Some(v) => (
            v.as_i64()
                .ok_or_else(|| bad(format!("candidates[{pos}].index is not an integer")))?,
            true,
        ),
    };
    let acc = candidates.entry(index).or_default();
    acc.explicit_index |= explicit;
    for (key, value) in cand {
        match key.as_str() {
            "index" => {}
            "content" => match value {
                Value::Null => {}
                Value::Object(content) => {
                    acc.has_content = true;
                    for (ck, cv) in content {
                        match ck.as_str() {
                            "role" => {
                                if acc.role.is_none() && !cv.is_null() {
                                    acc.role = Some(cv.clone());
                                }
                            }
                            "parts" => match cv {
                                Value::Null => {}
                                Value::Array(parts) => acc.parts.extend(parts.iter().cloned()),
                                _ => return Err(bad(format!("candidates[{pos}].content.parts is not an array"))),
                            },
                            _ => {
                                acc.content_extra.insert(ck.clone(), cv.clone());
                            }
                        }
                    }
                }
                _ => return Err(bad(format!("candidates[{pos}].content is not an object"))),
            },
            _ => {
                if !value.is_null() {
                    acc.fields.insert(key.clone(), value.clone());
                }
            }
        }
    }
    Ok(())
}

impl Candidate {
    fn into_value(self, index: i64) -> Value {
        let mut out = Map::new();
        if self.has_content {
            let mut content = Map::new();
            content.insert("parts".into(), Value::Array(self.parts));
            if let Some(role) = self.role {
                content.insert("role".into(), role);
            }
            content.extend(self.content_extra);
            out.insert("content".into(), Value::Object(content));
        }
        out.extend(self.fields);
        if self.explicit_index {
            out.insert("index".into(), Value::from(index));
        }
        Value::Object(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::ToolCall;
    use serde_json::json;

    fn calls(body: &Value) -> Vec<ToolCall> {
        Provider::Gemini.parse(body).map(|p| p.calls).unwrap_or_default()
    }

    fn chunk(parts: Value, extra: Value) -> Value {
        let mut c = json!({"candidates": [{"content": {"parts": parts, "role": "model"}, "index": 0}],
            "usageMetadata": {"promptTokenCount": 10, "totalTokenCount": 10},
            "modelVersion": "gemini-3-pro-preview", "responseId": "r1"});
        if let (Some(cand), Some(extra)) = (c["candidates"][0].as_object_mut(), extra.as_object()) {
            cand.extend(extra.clone());
        }
        c
    }

    fn ok(events: &[Value]) -> Assembled {
        match assemble(events) {
            Ok(a) => a,
            Err(e) => panic!("assemble failed: {e}"),
        }
    }

    #[test]
    fn single_call_with_signature() {
        let events = [
            chunk(
                json!([{"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": "c2ln"}]),
                json!({}),
            ),
            chunk(json!([]), json!({"finishReason": "STOP"})),
        ];
        let a = ok(&events);
        insta::assert_json_snapshot!(a.completion);
        assert!(a.warnings.is_empty());
        let expected = json!({"candidates": [{"content": {"role": "model", "parts": [
            {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": "c2ln"}
        ]}, "finishReason": "STOP", "index": 0}]});
        assert_eq!(calls(&a.completion), calls(&expected));
        assert_eq!(calls(&a.completion).len(), 1);
    }

    #[test]
    fn parallel_calls_and_text_then_call() {
        let events = [
            chunk(json!([{"text": "Let me check "}]), json!({})),
            chunk(json!([{"text": "both."}]), json!({})),
            chunk(
                json!([
                    {"functionCall": {"id": "a1", "name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": "c2ln"},
                    {"functionCall": {"id": "a2", "name": "get_weather", "args": {"city": "Zürich \"Z\""}}}
                ]),
                json!({}),
            ),
            json!({"candidates": [{"content": {"role": "model"}, "finishReason": "STOP", "index": 0}],
                "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 30, "totalTokenCount": 40},
                "modelVersion": "gemini-3-pro-preview", "responseId": "r1"}),
        ];
        let a = ok(&events);
        insta::assert_json_snapshot!(a.completion);
        let parsed = Provider::Gemini.parse(&a.completion).ok();
        assert_eq!(parsed.as_ref().map(|p| p.calls.len()), Some(2));
        assert_eq!(parsed.as_ref().and_then(|p| p.stop_reason.clone()), Some(json!("STOP")));
        // The text chunks stay two parts; the signature stays on the first call.
        assert_eq!(
            a.completion["candidates"][0]["content"]["parts"]
                .as_array()
                .map(Vec::len),
            Some(4)
        );
        assert_eq!(
            a.completion["candidates"][0]["content"]["parts"][2]["thoughtSignature"],
            json!("c2ln")
        );
        assert_eq!(a.completion["usageMetadata"]["totalTokenCount"], json!(40));
    }

    #[test]
    fn final_answer_with_thoughts_and_trailing_signature() {
        let events = [
            chunk(json!([{"text": "**Planning**", "thought": true}]), json!({})),
            chunk(json!([{"text": "Il fait 12 °C"}]), json!({})),
            chunk(json!([{"text": " à Paris."}]), json!({})),
            chunk(
                json!([{"text": "", "thoughtSignature": "ZW5k"}]),
                json!({"finishReason": "STOP"}),
            ),
        ];
        let a = ok(&events);
        insta::assert_json_snapshot!(a.completion);
        let parsed = Provider::Gemini.parse(&a.completion).ok();
        assert_eq!(parsed.as_ref().map(|p| p.finished), Some(true));
        assert_eq!(
            parsed.map(|p| p.assistant["parts"][3].clone()),
            Some(json!({"text": "", "thoughtSignature": "ZW5k"}))
        );
    }

    #[test]
    fn snake_case_dump_and_no_args() {
        let events = [
            json!({"candidates": [{"content": {"parts": [
                {"function_call": {"name": "now"}, "thought_signature": "eA=="}], "role": "model"}}]}),
            json!({"candidates": [{"content": {"role": "model", "parts": null}, "finish_reason": "STOP"}],
                "usage_metadata": {"total_token_count": 5}}),
        ];
        let a = ok(&events);
        insta::assert_json_snapshot!(a.completion);
        let parsed = Provider::Gemini.parse(&a.completion).ok();
        let call = parsed.as_ref().and_then(|p| p.calls.first().cloned());
        assert_eq!(call.as_ref().map(|c| c.name.as_str()), Some("now"));
        assert_eq!(call.map(|c| c.arguments.to_value()), Some(json!({})));
        assert_eq!(parsed.and_then(|p| p.stop_reason), Some(json!("STOP")));
    }

    #[test]
    fn candidates_merge_by_index() {
        let events = [
            json!({"candidates": [
                {"content": {"parts": [{"text": "a"}], "role": "model"}, "index": 1},
                {"content": {"parts": [{"text": "b"}], "role": "model"}, "index": 0}]}),
            json!({"candidates": [{"content": {"parts": [{"text": "c"}], "role": "model"}, "index": 1, "finishReason": "STOP"},
                {"content": {"parts": [{"text": "d"}]}, "index": 0, "finishReason": "STOP"}]}),
        ];
        let a = ok(&events);
        assert_eq!(
            a.completion["candidates"],
            json!([
                {"content": {"parts": [{"text": "b"}, {"text": "d"}], "role": "model"}, "index": 0, "finishReason": "STOP"},
                {"content": {"parts": [{"text": "a"}, {"text": "c"}], "role": "model"}, "index": 1, "finishReason": "STOP"}
            ])
        );
    }

    #[test]
    fn cut_short_warns_and_keeps_calls() {
        let events = [chunk(
            json!([{"functionCall": {"name": "t", "args": {"q": "x"}}}]),
            json!({}),
        )];
        let a = ok(&events);
        assert_eq!(a.warnings.len(), 1);
        assert_eq!(calls(&a.completion).len(), 1);
        assert_eq!(
            Provider::Gemini.parse(&a.completion).ok().and_then(|p| p.stop_reason),
            None
        );
    }

    #[test]
    fn blocked_prompt_is_a_body() {
        let a = ok(&[json!({"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"totalTokenCount": 3}})]);
        assert!(Provider::Gemini.parse(&a.completion).is_ok_and(|p| p.finished));
    }

    #[test]
    fn errors() {
        assert!(matches!(assemble(&[]), Err(StreamError::NoTurn { .. })));
        assert!(matches!(
            assemble(&[json!({"usageMetadata": {"totalTokenCount": 1}})]),
            Err(StreamError::NoTurn { .. })
        ));
        assert!(matches!(
            assemble(&[json!({"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}})]),
            Err(StreamError::Provider { message, .. }) if message == "UNAVAILABLE: overloaded (503)"
        ));
        assert!(matches!(
            assemble(&[json!([1])]),
            Err(StreamError::Event { index: 0, .. })
        ));
        assert!(matches!(
            assemble(&[json!({"candidates": [{"content": {"parts": {}}}]})]),
            Err(StreamError::Event { .. })
        ));
        assert!(matches!(
            assemble(&[json!({"candidates": [{"index": "x"}]})]),
            Err(StreamError::Event { .. })
        ));
        let a = ok(&[
            json!({"candidates": [{"content": {"parts": [{"text": "x"}]}, "finishReason": "STOP"}]}),
            json!({"weird": 1}),
        ]);
        assert_eq!(a.warnings.len(), 1);
    }
}
