//! Fuzz target `parse_completion`: raw completion bytes → `detect`, then `parse` + `format` for
//! every provider.
//!
//! Invariants: nothing panics; `detect` agrees with `matches`; `finished` implies no calls; when
//! `parse` succeeds, `format` answers exactly the parsed calls: as many answers as calls, no
//! messages iff no calls, and each answer carries its call's id in the provider's place.

use serde_json::{Value, json};
use toolwire::call::{ErrorDetail, ErrorKind, ToolCall, ToolError, ToolResult};
use toolwire::provider::{FormatOptions, Provider, detect};

pub fn run(data: &[u8]) {
    let Ok(completion) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let detected = detect::detect(&completion);
    if let Some(p) = detected {
        assert!(
            detect::matches(p, &completion),
            "detect says {p} but matches({p}) is false"
        );
    }
    for provider in Provider::ALL {
        let _ = detect::matches(provider, &completion);
        let Ok(parsed) = provider.parse(&completion) else {
            continue;
        };
        assert!(
            !parsed.finished || parsed.calls.is_empty(),
            "{provider}: finished with {} calls",
            parsed.calls.len()
        );
        let results = synthetic_results(&parsed.calls);
        let messages = provider.format(&parsed, &results, &FormatOptions::default());
        assert_eq!(
            messages.is_empty(),
            parsed.calls.is_empty(),
            "{provider}: {} messages for {} calls",
            messages.len(),
            parsed.calls.len()
        );
        let answered = answered_ids(provider, &messages);
        let expected: Vec<Option<&str>> = parsed.calls.iter().map(|c| c.id.as_deref()).collect();
        assert_eq!(answered, expected, "{provider}: answers do not match the calls");
        assert!(serde_json::to_vec(&messages).is_ok());
        assert!(serde_json::to_vec(&results).is_ok());
    }
}

/// One result per call, cycling through the outcome shapes `format` distinguishes.
fn synthetic_results(calls: &[ToolCall]) -> Vec<ToolResult> {
    calls
        .iter()
        .enumerate()
        .map(|(i, call)| match i % 3 {
            0 => ToolResult::ok(call, json!("plain text output")),
            1 => ToolResult::ok(call, json!({"n": i, "list": [1, 2], "nested": {"ok": true}})),
            _ => ToolResult::err(
                call,
                ToolError::new(ErrorKind::InvalidArguments, "bad arguments", false).with_details(vec![ErrorDetail {
                    path: "/x".into(),
                    message: "is not a string".into(),
                }]),
            ),
        })
        .collect()
}

fn id_at<'a>(v: &'a Value, ptr: &str) -> Option<&'a str> {
    v.pointer(ptr).and_then(Value::as_str)
}

/// The call ids the formatted messages answer, in order, read from where each provider puts
/// them (`None` for an answer without an id).
fn answered_ids(provider: Provider, messages: &[Value]) -> Vec<Option<&str>> {
    // Providers that answer with one message holding one block per call.
    let blocks = |field: &str| -> Vec<&Value> {
        assert!(
            messages.len() <= 1,
            "{provider}: {} messages, expected one",
            messages.len()
        );
        messages
            .iter()
            .flat_map(|m| {
                m.get(field)
                    .and_then(Value::as_array)
                    .unwrap_or_else(|| panic!("{provider}: message without `{field}` array: {m}"))
            })
            .collect()
    };
    match provider {
        Provider::OpenaiChat | Provider::Mistral | Provider::Cohere | Provider::Ollama => {
            messages.iter().map(|m| id_at(m, "/tool_call_id")).collect()
        }
        Provider::OpenaiResponses => messages.iter().map(|m| id_at(m, "/call_id")).collect(),
        Provider::Anthropic => blocks("content")
            .into_iter()
            .map(|b| id_at(b, "/tool_use_id"))
            .collect(),
        Provider::Bedrock => blocks("content")
            .into_iter()
            .map(|b| id_at(b, "/toolResult/toolUseId"))
            .collect(),
        Provider::Gemini => blocks("parts")
            .into_iter()
            .map(|p| {
                let fr = p
                    .get("functionResponse")
                    .or_else(|| p.get("function_response"))
                    .unwrap_or_else(|| panic!("gemini: part without a function response: {p}"));
                id_at(fr, "/id")
            })
            .collect(),
    }
}
