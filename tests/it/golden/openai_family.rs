//! OpenAI-family providers (OpenAI Chat, OpenAI Responses, Mistral, Cohere v2, Ollama):
//! fixtures → `parse`, the golden table's rows for `format` and `declare`, an id-answering
//! property, `declare`.

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use serde_json::{Map, Value, json};
use toolwire::call::{Arguments, ArgumentsProblem, ErrorDetail, ErrorKind, ToolCall, ToolError, ToolResult};
use toolwire::provider::{DeclareOptions, FormatOptions, ParseError, Parsed, Provider, ToolDeclaration, schema};

use super::Table;

const FAMILY: [Provider; 5] = [
    Provider::OpenaiChat,
    Provider::OpenaiResponses,
    Provider::Mistral,
    Provider::Cohere,
    Provider::Ollama,
];

fn fixture_dir(provider: Provider) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/providers")
        .join(provider.as_str())
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn fixture(provider: Provider, name: &str) -> Value {
    read_json(&fixture_dir(provider).join(format!("{name}.json")))
}

/// A call in the fixtures' normalised form.
fn call_json(call: &ToolCall) -> Value {
    match &call.arguments {
        Arguments::Object(map) => json!({"id": call.id, "name": call.name, "arguments": map}),
        Arguments::Invalid { raw, problem } => json!({
            "id": call.id, "name": call.name, "arguments": null,
            "raw_arguments": raw, "arguments_error": problem,
        }),
    }
}

/// The expected call with only the normalised keys.
fn expected_call(expected: &Value) -> Value {
    let mut out = Map::new();
    for key in ["id", "name", "arguments", "raw_arguments", "arguments_error"] {
        if let Some(v) = expected.get(key) {
            out.insert(key.to_owned(), v.clone());
        }
    }
    Value::Object(out)
}

/// The original model-turn node of a body, i.e. what `assistant` must equal.
fn original_turn(provider: Provider, body: &Value) -> Value {
    match provider {
        Provider::OpenaiChat | Provider::Mistral => body["choices"][0]["message"].clone(),
        Provider::OpenaiResponses => body["output"].clone(),
        Provider::Cohere | Provider::Ollama => body["message"].clone(),
        other => panic!("{other} is not in this family"),
    }
}

fn check_fixture(provider: Provider, expected_path: &Path) {
    let label = expected_path.display().to_string();
    let expected = read_json(expected_path);
    assert_eq!(expected["provider"], json!(provider.as_str()), "{label}");
    let body_name = expected["fixture"].as_str().expect("fixture name");
    let body = read_json(&fixture_dir(provider).join(body_name));

    let parsed = provider.parse(&body).unwrap_or_else(|e| panic!("{label}: {e}"));

    let got: Vec<Value> = parsed.calls.iter().map(call_json).collect();
    let want: Vec<Value> = expected["tool_calls"]
        .as_array()
        .expect("tool_calls")
        .iter()
        .map(expected_call)
        .collect();
    assert_eq!(got, want, "{label}: calls");
    assert_eq!(json!(parsed.finished), expected["finished"], "{label}: finished");
    assert_eq!(
        parsed.stop_reason.clone().unwrap_or(Value::Null),
        expected["stop_signal"],
        "{label}: stop_signal"
    );

    // Server-side items: each expected entry is a subset of the item found, in order.
    let ignored = expected
        .get("ignored_server_side")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    assert_eq!(parsed.server_side.len(), ignored.len(), "{label}: server_side count");
    for (found, want) in parsed.server_side.iter().zip(&ignored) {
        for (k, v) in want.as_object().expect("ignored entry") {
            assert_eq!(found.get(k), Some(v), "{label}: server_side.{k}");
        }
    }

    // Several choices: the top-level fields are choice 0's, and nothing is merged across choices.
    if let Some(choices) = expected.get("choices").and_then(Value::as_array) {
        assert_eq!(
            body["choices"].as_array().map(Vec::len),
            Some(choices.len()),
            "{label}: choice count"
        );
        let first = &choices[0];
        assert_eq!(first["index"], json!(0), "{label}");
        assert_eq!(
            json!(parsed.finished),
            first["finished"],
            "{label}: choices[0].finished"
        );
        assert_eq!(
            parsed.stop_reason.clone().unwrap_or(Value::Null),
            first["stop_signal"],
            "{label}"
        );
        let want0: Vec<Value> = first["tool_calls"]
            .as_array()
            .expect("tool_calls")
            .iter()
            .map(expected_call)
            .collect();
        assert_eq!(got, want0, "{label}: choices[0].tool_calls");
    }

    // The model turn, verbatim: equal to the original node, and field by field.
    let original = original_turn(provider, &body);
    assert!(!original.is_null(), "{label}: no original turn");
    assert_eq!(parsed.assistant, original, "{label}: assistant");
    match (&parsed.assistant, &original) {
        (Value::Object(a), Value::Object(o)) => {
            assert_eq!(
                a.keys().collect::<Vec<_>>(),
                o.keys().collect::<Vec<_>>(),
                "{label}: key order"
            );
            for (k, v) in o {
                assert_eq!(a.get(k), Some(v), "{label}: assistant.{k}");
            }
        }
        (Value::Array(a), Value::Array(o)) => {
            assert_eq!(a.len(), o.len(), "{label}: assistant item count");
            for (i, (x, y)) in a.iter().zip(o).enumerate() {
                assert_eq!(x, y, "{label}: assistant[{i}]");
            }
        }
        _ => panic!("{label}: assistant has another JSON type than the original"),
    }
}

#[test]
fn every_fixture_parses_as_expected() {
    for provider in FAMILY {
        let mut seen = 0;
        let mut entries: Vec<_> = std::fs::read_dir(fixture_dir(provider))
            .expect("fixture dir")
            .map(|e| e.expect("dir entry").path())
            .filter(|p| p.to_string_lossy().ends_with(".expected.json"))
            .collect();
        entries.sort();
        for path in entries {
            check_fixture(provider, &path);
            seen += 1;
        }
        assert!(seen >= 2, "{provider}: only {seen} fixtures found");
    }
}

#[test]
fn only_choice_zero_is_read() {
    let body = json!({"choices": [
        {"index": 0, "message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"},
        {"index": 1, "message": {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
         "finish_reason": "tool_calls"}]});
    for provider in [Provider::OpenaiChat, Provider::Mistral] {
        let parsed = provider.parse(&body).expect("parse");
        assert!(parsed.calls.is_empty(), "{provider}");
        assert!(parsed.finished);
        assert_eq!(parsed.stop_reason, Some(json!("stop")));
        assert_eq!(parsed.assistant, body["choices"][0]["message"]);
    }
    // Choice 0 is found by its index, not its position.
    let mut swapped = body.clone();
    swapped["choices"].as_array_mut().expect("array").reverse();
    let parsed = Provider::OpenaiChat.parse(&swapped).expect("parse");
    assert!(parsed.calls.is_empty());
    assert_eq!(parsed.assistant, body["choices"][0]["message"]);
}

#[test]
fn forced_tool_choice_with_stop_is_not_finished() {
    let body = json!({"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant",
        "content": null, "tool_calls": [{"id": "call_9", "type": "function",
        "function": {"name": "f", "arguments": ""}}]}}]});
    let parsed = Provider::OpenaiChat.parse(&body).expect("parse");
    assert!(!parsed.finished);
    assert_eq!(
        parsed.calls[0].arguments,
        Arguments::Object(Map::new()),
        "blank arguments mean {{}}"
    );
}

#[test]
fn openai_chat_custom_tool_call_is_a_call_with_input_argument() {
    let body = json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant",
        "content": null, "tool_calls": [{"id": "call_c", "type": "custom",
        "custom": {"name": "code_exec", "input": "print('hi')"}}]}}]});
    let parsed = Provider::OpenaiChat.parse(&body).expect("parse");
    assert_eq!(
        parsed.calls.iter().map(call_json).collect::<Vec<_>>(),
        vec![json!({"id": "call_c", "name": "code_exec", "arguments": {"input": "print('hi')"}})]
    );
    let results = [ToolResult::ok(&parsed.calls[0], json!("hi"))];
    assert_eq!(
        Provider::OpenaiChat.format(&parsed, &results, &FormatOptions::default()),
        vec![json!({"role": "tool", "tool_call_id": "call_c", "content": "hi"})]
    );
}

#[test]
fn responses_hosted_tool_items_are_server_side_and_ids_are_call_ids() {
    let output = json!([
        {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "gAAA"},
        {"id": "fs_1", "type": "file_search_call", "status": "completed", "queries": ["q"]},
        {"id": "fc_1", "type": "function_call", "call_id": "call_a", "name": "f", "arguments": "{\"x\":1}"},
        {"id": "ci_1", "type": "code_interpreter_call", "status": "completed"},
        {"id": "ctc_1", "type": "custom_tool_call", "call_id": "call_b", "name": "g", "input": "raw text"},
        {"id": "mcp_1", "type": "mcp_call", "name": "remote", "arguments": "{}"},
        {"id": "msg_1", "type": "message", "role": "assistant", "content": []}
    ]);
    let body = json!({"object": "response", "status": "completed", "output": output});
    let parsed = Provider::OpenaiResponses.parse(&body).expect("parse");
    assert_eq!(
        parsed.calls.iter().map(call_json).collect::<Vec<_>>(),
        vec![
            json!({"id": "call_a", "name": "f", "arguments": {"x": 1}}),
            json!({"id": "call_b", "name": "g", "arguments": {"input": "raw text"}}),
        ]
    );
    let kinds: Vec<_> = parsed.server_side.iter().map(|v| v["type"].clone()).collect();
    assert_eq!(
        kinds,
        [
            json!("file_search_call"),
            json!("code_interpreter_call"),
            json!("mcp_call")
        ]
    );
    assert_eq!(parsed.assistant, output);
    let results: Vec<_> = parsed.calls.iter().map(|c| ToolResult::ok(c, json!("ok"))).collect();
    assert_eq!(
        Provider::OpenaiResponses.format(&parsed, &results, &FormatOptions::default()),
        vec![
            json!({"type": "function_call_output", "call_id": "call_a", "output": "ok"}),
            json!({"type": "custom_tool_call_output", "call_id": "call_b", "output": "ok"}),
        ]
    );
}

#[test]
fn mistral_accepts_object_arguments_and_missing_ids() {
    let body = json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant",
        "content": "", "tool_calls": [
            {"id": "D681PevKs", "type": "function", "function": {"name": "a", "arguments": {"k": "v"}}},
            {"type": "function", "function": {"name": "b", "arguments": "[1]"}}]}}]});
    let parsed = Provider::Mistral.parse(&body).expect("parse");
    assert_eq!(
        parsed.calls.iter().map(call_json).collect::<Vec<_>>(),
        vec![
            json!({"id": "D681PevKs", "name": "a", "arguments": {"k": "v"}}),
            json!({"id": null, "name": "b", "arguments": null, "raw_arguments": "[1]", "arguments_error": "not_an_object"}),
        ]
    );
}

#[test]
fn shape_errors_name_the_provider_and_the_reason() {
    let cases: [(Provider, Value, &str); 11] = [
        (
            Provider::OpenaiChat,
            json!({"object": "chat.completion"}),
            "no `choices` array",
        ),
        (Provider::OpenaiChat, json!({"choices": []}), "`choices` is empty"),
        (
            Provider::OpenaiChat,
            json!({"choices": [{"index": 0}]}),
            "choices[0].message",
        ),
        (Provider::OpenaiChat, json!([1, 2]), "not a JSON object"),
        (
            Provider::OpenaiChat,
            json!({"choices": [{"message": {"tool_calls": {}}}]}),
            "not an array",
        ),
        (
            Provider::OpenaiResponses,
            json!({"status": "completed"}),
            "no `output` array",
        ),
        (
            Provider::OpenaiResponses,
            json!({"output": [{"type": "function_call", "id": "fc_1", "name": "f", "arguments": "{}"}]}),
            "call_id",
        ),
        (Provider::Mistral, json!({"choices": "x"}), "no `choices` array"),
        (Provider::Cohere, json!({"finish_reason": "COMPLETE"}), "message"),
        (
            Provider::Cohere,
            json!({"message": {"tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]}}),
            "no `id`",
        ),
        (
            Provider::Ollama,
            json!({"message": "hi", "done_reason": "stop"}),
            "message",
        ),
    ];
    for (provider, body, needle) in cases {
        match provider.parse(&body) {
            Err(ParseError::Shape { expected, reason }) => {
                assert_eq!(expected, provider);
                assert!(
                    reason.contains(needle),
                    "{provider}: {reason:?} should mention {needle:?}"
                );
            }
            Ok(p) => panic!("{provider}: {body} parsed as {p:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The rows of the golden table: `format` (the snapshots themselves are taken in `super`).

fn ok_output(i: usize) -> Value {
    if i.is_multiple_of(2) {
        json!({"temp_c": 11, "conditions": "rain"})
    } else {
        json!("42 rows")
    }
}

fn failure(i: usize) -> ToolError {
    if i.is_multiple_of(2) {
        ToolError::new(
            ErrorKind::Timeout,
            "the tool did not answer within 5s; try again later",
            true,
        )
    } else {
        ToolError::new(
            ErrorKind::InvalidArguments,
            "the arguments do not match the tool's schema",
            false,
        )
        .with_details(vec![
            ErrorDetail {
                path: "/city".into(),
                message: "is required".into(),
            },
            ErrorDetail {
                path: String::new(),
                message: "unknown property `town`".into(),
            },
        ])
    }
}

/// What the executor gives a call: unusable arguments always fail; otherwise `ok(i)` decides.
fn results_for(parsed: &Parsed, ok: impl Fn(usize) -> bool) -> Vec<ToolResult> {
    parsed
        .calls
        .iter()
        .enumerate()
        .map(|(i, call)| match &call.arguments {
            Arguments::Invalid {
                problem: ArgumentsProblem::InvalidJson,
                ..
            } => ToolResult::err(
                call,
                ToolError::new(
                    ErrorKind::ArgsNotJson,
                    "the arguments are not valid JSON (probably cut off); send them again as one JSON object",
                    false,
                ),
            ),
            Arguments::Invalid {
                problem: ArgumentsProblem::NotAnObject,
                ..
            } => ToolResult::err(
                call,
                ToolError::new(
                    ErrorKind::InvalidArguments,
                    "the arguments must be a JSON object",
                    false,
                ),
            ),
            Arguments::Object(_) if ok(i) => ToolResult::ok(call, ok_output(i)),
            Arguments::Object(_) => ToolResult::err(call, failure(i)),
        })
        .collect()
}

fn formatted(provider: Provider, body: &Value, ok: impl Fn(usize) -> bool) -> Vec<Value> {
    let parsed = provider.parse(body).expect("parse");
    let results = results_for(&parsed, ok);
    let messages = provider.format(&parsed, &results, &FormatOptions::default());
    assert_eq!(messages.len(), parsed.calls.len(), "{provider}: one message per call");
    messages
}

/// A body with two calls (the fixtures where they have two).
fn two_calls(provider: Provider) -> Value {
    match provider {
        Provider::OpenaiChat => fixture(provider, "real_parallel_two_tools"),
        Provider::OpenaiResponses => fixture(provider, "constructed_reasoning_encrypted_parallel_calls"),
        Provider::Mistral => {
            json!({"id": "m1", "object": "chat.completion", "model": "mistral-large-latest",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": "",
              "tool_calls": [
                {"id": "D681PevKs", "type": "function", "function": {"name": "retrieve_payment_status", "arguments": "{\"transaction_id\": \"T1001\"}"}},
                {"id": "Qk3Xv9aBc", "type": "function", "function": {"name": "retrieve_payment_date", "arguments": {"transaction_id": "T1001"}}}]}}]})
        }
        Provider::Cohere => fixture(provider, "docs_parallel_tool_calls"),
        Provider::Ollama => fixture(provider, "docs_parallel_four_calls"),
        other => panic!("{other}"),
    }
}

fn no_calls(provider: Provider) -> Value {
    match provider {
        Provider::OpenaiChat => fixture(provider, "real_final_answer_stop"),
        Provider::OpenaiResponses => fixture(provider, "real_final_message"),
        Provider::Mistral => fixture(provider, "docs_final_answer"),
        Provider::Cohere => fixture(provider, "docs_final_answer_with_citations"),
        Provider::Ollama => fixture(provider, "docs_final_answer"),
        other => panic!("{other}"),
    }
}

/// A valid call followed by one whose arguments cannot be used.
fn invalid_arguments(provider: Provider) -> Value {
    let cut = "{\"location\": \"San Francisco, CA\", \"unit\": \"cel";
    match provider {
        Provider::OpenaiChat => fixture(provider, "constructed_invalid_json_arguments_truncated"),
        Provider::OpenaiResponses => json!({"object": "response", "status": "incomplete",
            "incomplete_details": {"reason": "max_output_tokens"}, "output": [
              {"id": "fc_1", "type": "function_call", "status": "completed", "call_id": "call_ok", "name": "get_time", "arguments": "{}"},
              {"id": "fc_2", "type": "function_call", "status": "incomplete", "call_id": "call_cut", "name": "get_weather", "arguments": cut}]}),
        Provider::Mistral => {
            json!({"choices": [{"index": 0, "finish_reason": "length", "message": {"role": "assistant", "content": "",
              "tool_calls": [
                {"id": "aaaaaaaa1", "type": "function", "function": {"name": "get_time", "arguments": {}}},
                {"id": "aaaaaaaa2", "type": "function", "function": {"name": "get_weather", "arguments": cut}}]}}]})
        }
        Provider::Cohere => {
            json!({"id": "c1", "finish_reason": "MAX_TOKENS", "message": {"role": "assistant",
              "tool_plan": "I will check.", "tool_calls": [
                {"id": "get_time_0000aaaa1111", "type": "function", "function": {"name": "get_time", "arguments": ""}},
                {"id": "get_weather_1byjy32y4hvq", "type": "function", "function": {"name": "get_weather", "arguments": cut}}]}})
        }
        Provider::Ollama => {
            json!({"model": "qwen3", "done": true, "done_reason": "stop", "message": {"role": "assistant", "content": "",
              "tool_calls": [
                {"id": "call_aaaa1111", "function": {"index": 0, "name": "get_time", "arguments": {}}},
                {"id": "call_bbbb2222", "function": {"index": 1, "name": "get_weather", "arguments": ["Tokyo"]}}]}})
        }
        other => panic!("{other}"),
    }
}

/// The rows of the golden table for the OpenAI family (see `super::table`).
pub(super) fn cases(t: &mut Table) {
    for provider in FAMILY {
        t.add(provider, "all_ok", move || {
            Ok(formatted(provider, &two_calls(provider), |_| true))
        });
        t.add(provider, "all_failed", move || {
            Ok(formatted(provider, &two_calls(provider), |_| false))
        });
        t.add(provider, "mixed", move || {
            Ok(formatted(provider, &two_calls(provider), |i| i % 2 == 0))
        });
        t.add(provider, "no_calls", move || {
            let none = formatted(provider, &no_calls(provider), |_| true);
            assert!(none.is_empty(), "{provider}: no calls, no messages");
            Ok(none)
        });
        t.add(provider, "invalid_arguments", move || {
            let bad = invalid_arguments(provider);
            let parsed = provider.parse(&bad).expect("parse");
            assert!(
                parsed
                    .calls
                    .iter()
                    .any(|c| matches!(c.arguments, Arguments::Invalid { .. })),
                "{provider}: the invalid-arguments body must have an unusable call"
            );
            Ok(formatted(provider, &bad, |_| true))
        });
        t.add(provider, "declare", move || {
            let s = weather_schema();
            Ok(provider.declare(&tools(&s), &LAX).tools)
        });
    }
    // Calls without an id.
    t.add(Provider::OpenaiChat, "legacy_function_call_no_id", || {
        let legacy = fixture(Provider::OpenaiChat, "constructed_legacy_function_call");
        Ok(formatted(Provider::OpenaiChat, &legacy, |_| true))
    });
    t.add(Provider::Ollama, "no_id", || {
        let no_id = fixture(Provider::Ollama, "docs_tool_call_no_id");
        Ok(formatted(Provider::Ollama, &no_id, |_| true))
    });
    t.add(Provider::Mistral, "no_id", || {
        let mistral_no_id = json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant",
            "content": "", "tool_calls": [{"type": "function", "function": {"name": "retrieve_payment_status", "arguments": "{}"}}]}}]});
        Ok(formatted(Provider::Mistral, &mistral_no_id, |_| false))
    });
}

// ---------------------------------------------------------------------------------------------
// Property: every id answered exactly once, in call order, in the provider's place.

#[derive(Debug, Clone)]
struct GenCall {
    id: Option<String>,
    name: String,
    ok: bool,
}

fn gen_calls(ids_optional: bool) -> impl Strategy<Value = Vec<GenCall>> {
    let id = if ids_optional {
        proptest::option::of("[A-Za-z0-9_]{1,12}").boxed()
    } else {
        "[A-Za-z0-9_]{1,12}".prop_map(Some).boxed()
    };
    proptest::collection::vec(
        (id, "[a-z_][a-z0-9_]{0,10}", any::<bool>()).prop_map(|(id, name, ok)| GenCall { id, name, ok }),
        0..8,
    )
}

/// A completion body of `provider` holding `calls` (arguments `{"n": i}`, as a string where the
/// provider uses strings). For OpenAI Chat a call without id is the legacy `function_call`.
fn body_with(provider: Provider, calls: &[GenCall]) -> Value {
    let with_id = |id: &Option<String>, mut entry: Map<String, Value>| {
        if let Some(id) = id {
            entry.insert("id".into(), json!(id));
        }
        Value::Object(entry)
    };
    let chat_entry = |i: usize, c: &GenCall| {
        let mut e = Map::new();
        e.insert("type".into(), json!("function"));
        e.insert(
            "function".into(),
            json!({"name": c.name, "arguments": format!("{{\"n\":{i}}}")}),
        );
        with_id(&c.id, e)
    };
    match provider {
        Provider::OpenaiChat => {
            let mut message = json!({"role": "assistant", "content": null});
            let tool_calls: Vec<Value> = calls
                .iter()
                .enumerate()
                .filter(|(_, c)| c.id.is_some())
                .map(|(i, c)| chat_entry(i, c))
                .collect();
            if !tool_calls.is_empty() {
                message["tool_calls"] = Value::Array(tool_calls);
            }
            if let Some((i, c)) = calls.iter().enumerate().find(|(_, c)| c.id.is_none()) {
                message["function_call"] = json!({"name": c.name, "arguments": format!("{{\"n\":{i}}}")});
            }
            json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": message}]})
        }
        Provider::Mistral => {
            json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "",
            "tool_calls": calls.iter().enumerate().map(|(i, c)| chat_entry(i, c)).collect::<Vec<_>>()}}]})
        }
        Provider::Cohere => json!({"finish_reason": "TOOL_CALL", "message": {"role": "assistant",
            "tool_calls": calls.iter().enumerate().map(|(i, c)| chat_entry(i, c)).collect::<Vec<_>>()}}),
        Provider::OpenaiResponses => {
            json!({"status": "completed", "output": calls.iter().enumerate().map(|(i, c)| json!({
            "id": format!("fc_{i}"), "type": "function_call", "call_id": c.id, "name": c.name,
            "arguments": format!("{{\"n\":{i}}}")})).collect::<Vec<_>>()})
        }
        Provider::Ollama => {
            json!({"done_reason": "stop", "message": {"role": "assistant", "content": "",
            "tool_calls": calls.iter().enumerate().map(|(i, c)| {
                let mut e = Map::new();
                e.insert("function".into(), json!({"index": i, "name": c.name, "arguments": {"n": i}}));
                with_id(&c.id, e)
            }).collect::<Vec<_>>()}})
        }
        other => panic!("{other}"),
    }
}

/// Where a provider's result message puts the call id and the name.
fn answered(provider: Provider, message: &Value) -> (Option<String>, Option<String>) {
    let s = |k: &str| message.get(k).and_then(Value::as_str).map(str::to_owned);
    match provider {
        Provider::OpenaiChat => match message["role"].as_str() {
            Some("tool") => (s("tool_call_id"), None),
            Some("function") => (None, s("name")),
            other => panic!("unexpected role {other:?}"),
        },
        Provider::OpenaiResponses => {
            assert_eq!(message["type"], json!("function_call_output"));
            (s("call_id"), None)
        }
        Provider::Mistral => (s("tool_call_id"), s("name")),
        Provider::Cohere => (s("tool_call_id"), None),
        Provider::Ollama => (s("tool_call_id"), s("tool_name")),
        other => panic!("{other}"),
    }
}

fn check_answers(provider: Provider, calls: &[GenCall]) -> Result<(), TestCaseError> {
    let body = body_with(provider, calls);
    let parsed = provider.parse(&body).map_err(|e| TestCaseError::fail(e.to_string()))?;
    // OpenAI Chat lists the legacy function_call after tool_calls.
    let mut order: Vec<&GenCall> = calls
        .iter()
        .filter(|c| c.id.is_some() || provider != Provider::OpenaiChat)
        .collect();
    if provider == Provider::OpenaiChat {
        order.extend(calls.iter().find(|c| c.id.is_none()));
    }
    prop_assert_eq!(parsed.calls.len(), order.len());
    prop_assert_eq!(parsed.finished, order.is_empty());
    let results: Vec<ToolResult> = parsed
        .calls
        .iter()
        .zip(&order)
        .map(|(call, g)| {
            if g.ok {
                ToolResult::ok(call, json!({"ok": true}))
            } else {
                ToolResult::err(call, failure(0))
            }
        })
        .collect();
    let messages = provider.format(&parsed, &results, &FormatOptions::default());
    prop_assert_eq!(messages.len(), order.len());
    for ((message, g), call) in messages.iter().zip(&order).zip(&parsed.calls) {
        prop_assert_eq!(&call.id, &g.id);
        prop_assert_eq!(&call.name, &g.name);
        let (id, name) = answered(provider, message);
        prop_assert_eq!(
            &id,
            &g.id,
            "{} answered {} in the wrong place: {}",
            provider,
            g.name,
            message
        );
        // Mistral and Ollama always name the function; OpenAI's legacy reply names it instead of an id.
        let names_it = matches!(provider, Provider::Mistral | Provider::Ollama)
            || (provider == Provider::OpenaiChat && g.id.is_none());
        if names_it {
            prop_assert_eq!(name.as_deref(), Some(g.name.as_str()), "{}", message);
        } else {
            prop_assert_eq!(name, None);
        }
        let content = message
            .get("content")
            .or_else(|| message.get("output"))
            .expect("content");
        prop_assert_eq!(content.to_string().contains("Error ("), !g.ok, "{}", message);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn openai_chat_answers_every_call(calls in gen_calls(true)) {
        check_answers(Provider::OpenaiChat, &calls)?;
    }

    #[test]
    fn openai_responses_answers_every_call(calls in gen_calls(false)) {
        check_answers(Provider::OpenaiResponses, &calls)?;
    }

    #[test]
    fn mistral_answers_every_call(calls in gen_calls(true)) {
        check_answers(Provider::Mistral, &calls)?;
    }

    #[test]
    fn cohere_answers_every_call(calls in gen_calls(false)) {
        check_answers(Provider::Cohere, &calls)?;
    }

    #[test]
    fn ollama_answers_every_call(calls in gen_calls(true)) {
        check_answers(Provider::Ollama, &calls)?;
    }

    /// Arbitrary JSON never panics any parser of the family.
    #[test]
    fn parse_never_panics(body in arb_json()) {
        for provider in FAMILY {
            let _ = provider.parse(&body);
            for key in ["choices", "output", "message"] {
                let wrapped = json!({ key: body.clone() });
                let _ = provider.parse(&wrapped);
                let _ = provider.parse(&json!({ key: [{"index": 0, "message": body.clone()}] }));
                let _ = provider.parse(&json!({ key: {"tool_calls": [body.clone()]} }));
            }
        }
    }
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        prop_oneof![
            Just("function".to_owned()),
            Just("custom".to_owned()),
            Just("function_call".to_owned()),
            Just("{".to_owned()),
            ".{0,8}",
        ]
        .prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        let key = prop_oneof![
            Just("type".to_owned()),
            Just("id".to_owned()),
            Just("call_id".to_owned()),
            Just("name".to_owned()),
            Just("arguments".to_owned()),
            Just("function".to_owned()),
            Just("custom".to_owned()),
            Just("input".to_owned()),
            Just("tool_calls".to_owned()),
            Just("function_call".to_owned()),
            Just("index".to_owned()),
            "[a-z]{1,4}",
        ];
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::vec((key, inner), 0..5).prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

// ---------------------------------------------------------------------------------------------
// Declarations.

fn weather_schema() -> Value {
    json!({"type": "object",
        "properties": {"city": {"type": "string"}, "units": {"type": "string", "enum": ["c", "f"]}},
        "required": ["city"]})
}

fn tools(schema: &Value) -> [ToolDeclaration<'_>; 2] {
    [
        ToolDeclaration {
            name: "get_weather",
            description: "Get current weather for a city.",
            parameters: schema,
        },
        ToolDeclaration {
            name: "ping",
            description: "",
            parameters: schema,
        },
    ]
}

const STRICT: DeclareOptions = DeclareOptions {
    strict: true,
    gemini_openapi: false,
};
const LAX: DeclareOptions = DeclareOptions {
    strict: false,
    gemini_openapi: false,
};

/// What strict mode is expected to give for `schema`: the transformed schema + notes, or the
/// original with `strict: false` and one warning.
fn expected_strict(schema: &Value) -> (Value, bool, usize) {
    match schema::openai_strict(schema) {
        Ok((s, notes)) => (s, true, notes.len()),
        Err(_) => (schema.clone(), false, 1),
    }
}

#[test]
fn declare_openai_chat() {
    let s = weather_schema();
    let lax = Provider::OpenaiChat.declare(&tools(&s), &LAX);
    assert!(lax.warnings.is_empty());
    assert_eq!(
        lax.tools,
        vec![
            json!({"type": "function", "function": {"name": "get_weather",
                "description": "Get current weather for a city.", "parameters": s, "strict": false}}),
            json!({"type": "function", "function": {"name": "ping", "parameters": s, "strict": false}}),
        ]
    );
    let strict = Provider::OpenaiChat.declare(&tools(&s), &STRICT);
    let (params, flag, notes) = expected_strict(&s);
    assert_eq!(strict.tools.len(), 2);
    for tool in &strict.tools {
        assert_eq!(tool["type"], json!("function"));
        assert_eq!(tool["function"]["parameters"], params);
        assert_eq!(tool["function"]["strict"], json!(flag));
    }
    assert_eq!(strict.warnings.len(), 2 * notes);
    assert!(
        strict
            .warnings
            .iter()
            .all(|w| w.provider == Provider::OpenaiChat && !w.dropped)
    );
}

#[test]
fn declare_openai_responses_is_flat_and_always_explicit() {
    let s = weather_schema();
    let lax = Provider::OpenaiResponses.declare(&tools(&s), &LAX);
    assert!(lax.warnings.is_empty());
    assert_eq!(
        lax.tools,
        vec![
            json!({"type": "function", "name": "get_weather",
                "description": "Get current weather for a city.", "parameters": s, "strict": false}),
            json!({"type": "function", "name": "ping", "parameters": s, "strict": false}),
        ]
    );
    let strict = Provider::OpenaiResponses.declare(&tools(&s), &STRICT);
    let (params, flag, notes) = expected_strict(&s);
    for tool in &strict.tools {
        assert!(tool.get("function").is_none(), "Responses tools are flat");
        assert_eq!(tool["parameters"], params);
        assert_eq!(tool["strict"], json!(flag));
    }
    assert_eq!(strict.warnings.len(), 2 * notes);
}

#[test]
fn declare_mistral_sends_strict_only_when_asked() {
    let s = weather_schema();
    let lax = Provider::Mistral.declare(&tools(&s), &LAX);
    assert!(lax.warnings.is_empty());
    for tool in &lax.tools {
        assert_eq!(tool["type"], json!("function"));
        assert!(tool["function"].get("strict").is_none(), "{tool}");
        assert_eq!(tool["function"]["parameters"], s);
    }
    let strict = Provider::Mistral.declare(&tools(&s), &STRICT);
    assert!(strict.warnings.is_empty());
    for tool in &strict.tools {
        assert_eq!(tool["function"]["strict"], json!(true));
        assert_eq!(tool["function"]["parameters"], s, "Mistral: schema as is");
    }
}

#[test]
fn declare_cohere_and_ollama_never_send_strict() {
    let s = weather_schema();
    for provider in [Provider::Cohere, Provider::Ollama] {
        let lax = provider.declare(&tools(&s), &LAX);
        assert!(lax.warnings.is_empty(), "{provider}");
        let strict = provider.declare(&tools(&s), &STRICT);
        assert_eq!(
            strict.tools, lax.tools,
            "{provider}: strict changes nothing on the wire"
        );
        for tool in &strict.tools {
            assert_eq!(tool["type"], json!("function"));
            assert!(tool["function"].get("strict").is_none(), "{provider}: {tool}");
            assert_eq!(tool["function"]["parameters"], s);
        }
        assert_eq!(strict.warnings.len(), 2, "{provider}: one warning per tool");
        assert!(strict.warnings.iter().all(|w| w.provider == provider && !w.dropped));
        assert_eq!(strict.warnings[0].tool, "get_weather");
        assert_eq!(strict.warnings[1].tool, "ping");
    }
    let cohere = Provider::Cohere.declare(&tools(&s), &STRICT);
    assert!(cohere.warnings[0].message.contains("strict_tools"));
}
