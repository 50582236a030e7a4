//! Anthropic, Gemini and Bedrock parse/format against the recorded fixtures, the rows of the
//! golden table for their follow-up messages, the "every call answered once, in order" property, and shape
//! detection over all eight fixture folders.

use std::collections::BTreeMap;
use std::error::Error;
use std::fs;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use serde_json::{Map, Value, json};
use toolwire::call::{Arguments, ErrorDetail, ErrorKind, ToolCall, ToolError, ToolResult};
use toolwire::provider::detect::{detect, matches};
use toolwire::provider::{FormatOptions, Parsed, Provider};

use super::Table;

type TestResult = Result<(), Box<dyn Error>>;

/// One fixture: file stem, raw body, expectation.
type Fixture = (String, Value, Value);

/// One generated call: has an id (Gemini may lack one), name, and outcome (`None` = failed).
type CallSpec = (bool, String, Option<Value>);

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/providers")
}

/// `(file stem, body, expectation)` for every fixture of one folder, sorted by name.
fn fixtures(folder: &str) -> Result<Vec<Fixture>, Box<dyn Error>> {
    let dir = fixtures_dir().join(folder);
    let mut out = Vec::new();
    for entry in fs::read_dir(&dir)? {
        let path = entry?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some(stem) = name.strip_suffix(".json") else {
            continue;
        };
        if stem.ends_with(".expected") {
            continue;
        }
        let body: Value = serde_json::from_str(&fs::read_to_string(&path)?)?;
        let expected: Value = serde_json::from_str(&fs::read_to_string(dir.join(format!("{stem}.expected.json")))?)?;
        out.push((stem.to_owned(), body, expected));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    if out.is_empty() {
        return Err(format!("no fixtures in {}", dir.display()).into());
    }
    Ok(out)
}

fn fixture(folder: &str, stem: &str) -> Result<Value, Box<dyn Error>> {
    let path = fixtures_dir().join(folder).join(format!("{stem}.json"));
    Ok(serde_json::from_str(&fs::read_to_string(path)?)?)
}

/// Asserts that `actual` is the very node `original`: same keys, each value equal.
fn assert_same_node(actual: &Value, original: &Value, what: &str) {
    match (actual, original) {
        (Value::Object(a), Value::Object(o)) => {
            let a_keys: Vec<&String> = a.keys().collect();
            let o_keys: Vec<&String> = o.keys().collect();
            assert_eq!(a_keys, o_keys, "{what}: keys (and their order) differ");
            for (k, v) in o {
                assert_eq!(a.get(k), Some(v), "{what}: field `{k}` differs");
            }
        }
        _ => assert_eq!(actual, original, "{what}"),
    }
}

/// The original model turn inside a body, as each provider's `assistant` must echo it.
fn original_turn(provider: Provider, body: &Value) -> Value {
    match provider {
        Provider::Anthropic => json!({"role": "assistant", "content": body["content"]}),
        Provider::Gemini => match &body["candidates"][0]["content"] {
            Value::Null => json!({"role": "model", "parts": []}),
            content => content.clone(),
        },
        Provider::Bedrock => body["output"]["message"].clone(),
        other => panic!("not covered here: {other}"),
    }
}

fn check_fixture(provider: Provider, stem: &str, body: &Value, expected: &Value) -> TestResult {
    let parsed = provider.parse(body).map_err(|e| format!("{provider}/{stem}: {e}"))?;
    let ctx = format!("{provider}/{stem}");

    let want_calls = expected["tool_calls"].as_array().ok_or("tool_calls missing")?;
    assert_eq!(parsed.calls.len(), want_calls.len(), "{ctx}: number of calls");
    for (i, (call, want)) in parsed.calls.iter().zip(want_calls).enumerate() {
        assert_eq!(json!(call.id), want["id"], "{ctx}: calls[{i}].id");
        assert_eq!(json!(call.name), want["name"], "{ctx}: calls[{i}].name");
        match &call.arguments {
            Arguments::Object(map) => {
                assert_eq!(
                    &Value::Object(map.clone()),
                    &want["arguments"],
                    "{ctx}: calls[{i}].arguments"
                );
            }
            Arguments::Invalid { raw, .. } => {
                assert_eq!(want["arguments"], Value::Null, "{ctx}: calls[{i}] should be valid");
                assert_eq!(raw, &want["raw_arguments"], "{ctx}: calls[{i}].raw_arguments");
            }
        }
    }
    assert_eq!(json!(parsed.finished), expected["finished"], "{ctx}: finished");
    assert_eq!(
        parsed.stop_reason.clone().unwrap_or(Value::Null),
        expected["stop_signal"],
        "{ctx}: stop_signal"
    );

    let want_server = expected.get("ignored_server_side").and_then(Value::as_array);
    assert_eq!(
        parsed.server_side.len(),
        want_server.map_or(0, Vec::len),
        "{ctx}: server_side"
    );
    for (i, (got, want)) in parsed
        .server_side
        .iter()
        .zip(want_server.into_iter().flatten())
        .enumerate()
    {
        let fields = want.as_object().ok_or("ignored_server_side entry is not an object")?;
        for (k, v) in fields {
            assert_eq!(got.get(k), Some(v), "{ctx}: server_side[{i}].{k}");
        }
    }

    assert_same_node(
        &parsed.assistant,
        &original_turn(provider, body),
        &format!("{ctx}: assistant"),
    );
    Ok(())
}

#[test]
fn anthropic_fixtures_parse_as_expected() -> TestResult {
    let all = fixtures("anthropic")?;
    assert_eq!(all.len(), 6);
    for (stem, body, expected) in &all {
        check_fixture(Provider::Anthropic, stem, body, expected)?;
    }
    Ok(())
}

#[test]
fn gemini_fixtures_parse_as_expected() -> TestResult {
    let all = fixtures("gemini")?;
    assert_eq!(all.len(), 5);
    for (stem, body, expected) in &all {
        check_fixture(Provider::Gemini, stem, body, expected)?;
    }
    Ok(())
}

#[test]
fn bedrock_fixtures_parse_as_expected() -> TestResult {
    let all = fixtures("bedrock")?;
    assert_eq!(all.len(), 3);
    for (stem, body, expected) in &all {
        check_fixture(Provider::Bedrock, stem, body, expected)?;
    }
    Ok(())
}

#[test]
fn thinking_blocks_and_signatures_survive_verbatim() -> TestResult {
    let body = fixture("anthropic", "constructed_thinking_then_tool_use")?;
    let parsed = Provider::Anthropic.parse(&body)?;
    assert_eq!(
        parsed.assistant["content"][0]["signature"],
        body["content"][0]["signature"]
    );
    assert_eq!(parsed.assistant["content"][1]["type"], json!("redacted_thinking"));

    let body = fixture("gemini", "constructed_parallel_calls_ids_signature_on_first")?;
    let parsed = Provider::Gemini.parse(&body)?;
    let parts = parsed.assistant["parts"].as_array().ok_or("no parts")?;
    assert_eq!(parts.len(), 3, "parts are never merged or split");
    assert!(parts[0].get("thoughtSignature").is_some());
    assert!(parts[1].get("thoughtSignature").is_none());
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// format: the rows of the golden table (the snapshots themselves are taken in `super`)
// ---------------------------------------------------------------------------------------------

fn ok_outputs() -> [Value; 3] {
    [
        json!({"temp_c": 18, "sky": "clear"}),
        json!("12:04 BST"),
        json!([1, 2, 3]),
    ]
}

fn timeout() -> ToolError {
    ToolError::new(ErrorKind::Timeout, "the weather backend did not answer within 5s", true)
}

fn invalid_args() -> ToolError {
    ToolError::new(
        ErrorKind::InvalidArguments,
        "the arguments do not match the tool's schema",
        false,
    )
    .with_details(vec![ErrorDetail {
        path: "/location".into(),
        message: "required property is missing".into(),
    }])
}

fn all_ok(parsed: &Parsed) -> Vec<ToolResult> {
    let outputs = ok_outputs();
    parsed
        .calls
        .iter()
        .zip(outputs.iter().cycle())
        .map(|(c, o)| ToolResult::ok(c, o.clone()))
        .collect()
}

fn all_failed(parsed: &Parsed) -> Vec<ToolResult> {
    parsed
        .calls
        .iter()
        .enumerate()
        .map(|(i, c)| ToolResult::err(c, if i % 2 == 0 { timeout() } else { invalid_args() }))
        .collect()
}

fn mixed(parsed: &Parsed) -> Vec<ToolResult> {
    parsed
        .calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            if i % 2 == 0 {
                ToolResult::ok(c, json!({"temp_c": 18}))
            } else {
                ToolResult::err(c, timeout())
            }
        })
        .collect()
}

/// Answers each call the way the executor does for unusable arguments.
fn answer_invalid(parsed: &Parsed) -> Vec<ToolResult> {
    parsed
        .calls
        .iter()
        .map(|c| match &c.arguments {
            Arguments::Object(_) => ToolResult::ok(c, json!("fine")),
            Arguments::Invalid { .. } => ToolResult::err(
                c,
                ToolError::new(
                    ErrorKind::InvalidArguments,
                    "the arguments must be a JSON object",
                    false,
                ),
            ),
        })
        .collect()
}

/// The rows of the golden table for Anthropic, Gemini and Bedrock (see `super::table`).
pub(super) fn cases(t: &mut Table) {
    for (provider, parallel, final_answer) in [
        (
            Provider::Anthropic,
            ("anthropic", "constructed_parallel_tool_use"),
            ("anthropic", "sdk_final_answer"),
        ),
        (
            Provider::Gemini,
            ("gemini", "constructed_parallel_calls_ids_signature_on_first"),
            ("gemini", "cookbook_final_text"),
        ),
        (
            Provider::Bedrock,
            ("bedrock", "constructed_parallel_tool_use"),
            ("bedrock", "docs_final_end_turn"),
        ),
    ] {
        let parallel_calls = move || {
            let parsed = provider.parse(&fixture(parallel.0, parallel.1)?)?;
            assert!(parsed.calls.len() >= 2, "the parallel fixture must have several calls");
            Ok::<_, Box<dyn Error>>(parsed)
        };
        t.add(provider, "all_ok", move || {
            let parsed = parallel_calls()?;
            Ok(provider.format(&parsed, &all_ok(&parsed), &FormatOptions::default()))
        });
        t.add(provider, "all_failed", move || {
            let parsed = parallel_calls()?;
            Ok(provider.format(&parsed, &all_failed(&parsed), &FormatOptions::default()))
        });
        t.add(provider, "mixed", move || {
            let parsed = parallel_calls()?;
            Ok(provider.format(&parsed, &mixed(&parsed), &FormatOptions::default()))
        });
        t.add(provider, "no_calls", move || {
            let done = provider.parse(&fixture(final_answer.0, final_answer.1)?)?;
            assert!(done.calls.is_empty());
            Ok(provider.format(&done, &[], &FormatOptions::default()))
        });
    }

    t.add(Provider::Anthropic, "invalid_arguments", || {
        let invalid = json!({"type": "message", "role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_ok", "name": "get_weather", "input": {"location": "Paris"}},
            {"type": "tool_use", "id": "toolu_bad", "name": "get_weather", "input": ["Paris"]}
        ], "stop_reason": "tool_use"});
        let parsed = Provider::Anthropic.parse(&invalid)?;
        assert!(matches!(parsed.calls[1].arguments, Arguments::Invalid { .. }));
        Ok(Provider::Anthropic.format(&parsed, &answer_invalid(&parsed), &FormatOptions::default()))
    });
    t.add(Provider::Anthropic, "pause_turn", || {
        let paused = json!({"type": "message", "role": "assistant", "content": [
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "x"}}
        ], "stop_reason": "pause_turn"});
        let parsed = Provider::Anthropic.parse(&paused)?;
        assert!(!parsed.finished);
        Ok(Provider::Anthropic.format(&parsed, &[], &FormatOptions::default()))
    });

    t.add(Provider::Gemini, "no_id", || {
        let no_id = Provider::Gemini.parse(&fixture("gemini", "cookbook_single_call_no_id")?)?;
        assert_eq!(no_id.calls[0].id, None);
        let results = vec![ToolResult::ok(
            &no_id.calls[0],
            json!(["AMC Mountain View 16", "Regal Edwards 14"]),
        )];
        Ok(Provider::Gemini.format(&no_id, &results, &FormatOptions::default()))
    });
    t.add(Provider::Gemini, "invalid_arguments", || {
        let invalid = json!({"candidates": [{"content": {"role": "model", "parts": [
            {"functionCall": {"name": "get_weather", "args": {"location": "Paris"}, "id": "a1"}},
            {"functionCall": {"name": "get_weather", "args": "{\"location\": \"Par", "id": "a2"}}
        ]}, "finishReason": "STOP", "index": 0}]});
        let parsed = Provider::Gemini.parse(&invalid)?;
        assert!(matches!(parsed.calls[1].arguments, Arguments::Invalid { .. }));
        Ok(Provider::Gemini.format(&parsed, &answer_invalid(&parsed), &FormatOptions::default()))
    });
    t.add(Provider::Gemini, "snake_case", || {
        let snake = Provider::Gemini.parse(&fixture("gemini", "sdk_dump_snake_case_parallel")?)?;
        Ok(Provider::Gemini.format(&snake, &mixed(&snake), &FormatOptions::default()))
    });

    // Every JSON kind of successful output: object, string, array, number, bool, null.
    t.add(Provider::Bedrock, "output_kinds", || {
        let body = json!({"output": {"message": {"role": "assistant", "content": [
            {"toolUse": {"toolUseId": "t1", "name": "f", "input": {}}},
            {"toolUse": {"toolUseId": "t2", "name": "f", "input": {}}},
            {"toolUse": {"toolUseId": "t3", "name": "f", "input": {}}},
            {"toolUse": {"toolUseId": "t4", "name": "f", "input": {}}},
            {"toolUse": {"toolUseId": "t5", "name": "f", "input": {}}},
            {"toolUse": {"toolUseId": "t6", "name": "f", "input": {}}}
        ]}}, "stopReason": "tool_use"});
        let parsed = Provider::Bedrock.parse(&body)?;
        let outputs = [
            json!({"a": 1}),
            json!("text"),
            json!([1, "x"]),
            json!(4.5),
            json!(true),
            json!(null),
        ];
        let results: Vec<ToolResult> = parsed
            .calls
            .iter()
            .zip(outputs)
            .map(|(c, o)| ToolResult::ok(c, o))
            .collect();
        Ok(Provider::Bedrock.format(&parsed, &results, &FormatOptions::default()))
    });
    t.add(Provider::Bedrock, "invalid_arguments", || {
        let invalid = json!({"output": {"message": {"role": "assistant", "content": [
            {"toolUse": {"toolUseId": "tooluse_ok", "name": "top_song", "input": {"sign": "WZPZ"}}},
            {"toolUse": {"toolUseId": "tooluse_bad", "name": "top_song", "input": "WZPZ"}}
        ]}}, "stopReason": "tool_use"});
        let parsed = Provider::Bedrock.parse(&invalid)?;
        assert!(matches!(parsed.calls[1].arguments, Arguments::Invalid { .. }));
        Ok(Provider::Bedrock.format(&parsed, &answer_invalid(&parsed), &FormatOptions::default()))
    });
}

#[test]
fn a_missing_result_is_still_answered() -> TestResult {
    for (provider, folder, stem) in [
        (Provider::Anthropic, "anthropic", "constructed_parallel_tool_use"),
        (
            Provider::Gemini,
            "gemini",
            "constructed_parallel_calls_ids_signature_on_first",
        ),
        (Provider::Bedrock, "bedrock", "constructed_parallel_tool_use"),
    ] {
        let parsed = provider.parse(&fixture(folder, stem)?)?;
        let only_first = vec![ToolResult::ok(&parsed.calls[0], json!("ok"))];
        let messages = provider.format(&parsed, &only_first, &FormatOptions::default());
        assert_eq!(answered(provider, &messages).len(), parsed.calls.len(), "{provider}");
        assert!(messages[0].to_string().contains("internal"), "{provider}");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// format: every call answered exactly once, in call order, in the provider's place
// ---------------------------------------------------------------------------------------------

/// One answer found in `format`'s output: (id, name if the provider writes it, failed?).
type Answer = (Option<String>, Option<String>, bool);

/// Reads the answers back out of the messages, asserting the provider's shape on the way.
fn answered(provider: Provider, messages: &[Value]) -> Vec<Answer> {
    assert_eq!(messages.len(), 1, "{provider}: exactly one message");
    let msg = &messages[0];
    assert_eq!(msg["role"], json!("user"), "{provider}: role");
    let str_of = |v: &Value| v.as_str().map(str::to_owned);
    match provider {
        Provider::Anthropic => {
            let obj = msg.as_object().map(Map::len);
            assert_eq!(obj, Some(2), "anthropic: only role and content");
            let blocks = msg["content"].as_array().map(Vec::as_slice).unwrap_or_default();
            blocks
                .iter()
                .map(|b| {
                    assert_eq!(b["type"], json!("tool_result"));
                    assert!(b["content"].is_string());
                    let failed = b.get("is_error").is_some();
                    if failed {
                        assert_eq!(b["is_error"], json!(true));
                    }
                    (str_of(&b["tool_use_id"]), None, failed)
                })
                .collect()
        }
        Provider::Gemini => {
            let parts = msg["parts"].as_array().map(Vec::as_slice).unwrap_or_default();
            parts
                .iter()
                .map(|p| {
                    let fr = p.get("functionResponse").or_else(|| p.get("function_response"));
                    let fr = fr.unwrap_or(&Value::Null);
                    assert!(fr.is_object(), "gemini: part is a functionResponse: {p}");
                    let keys: Vec<&str> = fr["response"]
                        .as_object()
                        .map(|r| r.keys().map(String::as_str).collect())
                        .unwrap_or_default();
                    let failed = keys == ["error"];
                    let ok = keys == ["output"];
                    assert!(failed || ok, "gemini: response is {{output}} or {{error}}: {fr}");
                    (str_of(&fr["id"]), str_of(&fr["name"]), failed)
                })
                .collect()
        }
        Provider::Bedrock => {
            let blocks = msg["content"].as_array().map(Vec::as_slice).unwrap_or_default();
            blocks
                .iter()
                .map(|b| {
                    let tr = &b["toolResult"];
                    let content = tr["content"].as_array().map(Vec::len);
                    assert_eq!(content, Some(1), "bedrock: one content block: {tr}");
                    let json_ok = tr["content"][0].get("json").is_none_or(Value::is_object);
                    assert!(json_ok, "bedrock: json content is an object: {tr}");
                    let failed = tr["status"] == json!("error");
                    assert!(failed || tr["status"] == json!("success"));
                    (str_of(&tr["toolUseId"]), None, failed)
                })
                .collect()
        }
        other => panic!("not covered here: {other}"),
    }
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,6}", inner, 0..4).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn calls_and_outcomes() -> impl Strategy<Value = Vec<CallSpec>> {
    prop::collection::vec(
        (
            any::<bool>(),
            "[a-zA-Z_][a-zA-Z0-9_]{0,10}",
            prop::option::of(json_value()),
        ),
        0..7,
    )
}

fn build(provider: Provider, spec: &[CallSpec], snake: bool) -> (Parsed, Vec<ToolResult>) {
    let calls: Vec<ToolCall> = spec
        .iter()
        .enumerate()
        .map(|(i, (has_id, name, _))| ToolCall {
            // Anthropic and Bedrock always give ids; unique ids make "exactly once" checkable.
            id: (*has_id || provider != Provider::Gemini).then(|| format!("call_{i}")),
            name: name.clone(),
            arguments: Arguments::Object(Map::new()),
        })
        .collect();
    let results = calls
        .iter()
        .zip(spec)
        .map(|(c, (_, _, out))| match out {
            Some(v) => ToolResult::ok(c, v.clone()),
            None => ToolResult::err(c, timeout()),
        })
        .collect();
    let key = if snake { "function_call" } else { "functionCall" };
    let parts: Vec<Value> = calls
        .iter()
        .map(|c| json!({key: {"name": c.name, "id": c.id, "args": {}}}))
        .collect();
    let assistant = match provider {
        Provider::Gemini => json!({"role": "model", "parts": parts}),
        _ => json!({"role": "assistant", "content": []}),
    };
    let parsed = Parsed {
        finished: calls.is_empty(),
        calls,
        stop_reason: None,
        assistant,
        server_side: Vec::new(),
    };
    (parsed, results)
}

proptest! {
    #[test]
    fn format_answers_every_call_once_in_order(spec in calls_and_outcomes(), snake in any::<bool>()) {
        for provider in [Provider::Anthropic, Provider::Gemini, Provider::Bedrock] {
            let (parsed, results) = build(provider, &spec, snake);
            let messages = provider.format(&parsed, &results, &FormatOptions::default());
            if parsed.calls.is_empty() {
                prop_assert!(messages.is_empty());
                continue;
            }
            let answers = answered(provider, &messages);
            let want: Vec<Option<String>> = parsed.calls.iter().map(|c| c.id.clone()).collect();
            let got: Vec<Option<String>> = answers.iter().map(|a| a.0.clone()).collect();
            prop_assert_eq!(got, want, "{} ids", provider);
            for ((_, name, failed), (call, result)) in answers.iter().zip(parsed.calls.iter().zip(&results)) {
                prop_assert_eq!(*failed, !result.is_ok());
                if provider == Provider::Gemini {
                    prop_assert_eq!(name.as_deref(), Some(call.name.as_str()));
                }
            }
            if provider == Provider::Gemini {
                let snake_out = messages[0]["parts"][0].get("function_response").is_some();
                prop_assert_eq!(snake_out, snake);
            }
        }
    }

    #[test]
    fn parse_and_detect_never_panic(v in json_value()) {
        for provider in [Provider::Anthropic, Provider::Gemini, Provider::Bedrock] {
            let _ = provider.parse(&v);
            let _ = matches(provider, &v);
        }
        let _ = detect(&v);
        // Near misses of each shape, with arbitrary values in the places we read.
        let near = [
            json!({"type": "message", "content": [v, {"type": "tool_use", "id": "x", "name": "n", "input": v}], "stop_reason": v}),
            json!({"content": [{"type": "tool_use", "id": v, "name": v}]}),
            json!({"candidates": [{"content": {"parts": [v, {"functionCall": v}, {"function_call": {"name": "n", "args": v, "id": v}}]}, "finishReason": v}]}),
            json!({"candidates": [{"content": v}]}),
            json!({"candidates": v, "promptFeedback": {}}),
            json!({"output": {"message": {"content": [v, {"toolUse": v}, {"toolUse": {"toolUseId": "t", "name": "n", "input": v, "type": v}}]}}, "stopReason": v}),
            json!({"output": {"message": v}}),
        ];
        for body in &near {
            for provider in [Provider::Anthropic, Provider::Gemini, Provider::Bedrock] {
                if let Ok(parsed) = provider.parse(body) {
                    let results: Vec<ToolResult> =
                        parsed.calls.iter().map(|c| ToolResult::ok(c, v.clone())).collect();
                    let _ = provider.format(&parsed, &results, &FormatOptions::default());
                }
            }
            let _ = detect(body);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// detection over all eight folders
// ---------------------------------------------------------------------------------------------

/// The documented detection result for each fixture: its folder's provider, except the Mistral
/// body without a Mistral-only mark, which is (by the documented rule) OpenAI Chat.
fn expected_detection(folder: Provider, stem: &str) -> Provider {
    match (folder, stem) {
        (Provider::Mistral, "docs_final_answer") => Provider::OpenaiChat,
        _ => folder,
    }
}

#[test]
fn every_fixture_is_detected_as_its_format() -> TestResult {
    let mut seen = BTreeMap::new();
    for provider in Provider::ALL {
        for (stem, body, expected) in fixtures(provider.as_str())? {
            assert_eq!(expected["provider"], json!(provider.as_str()));
            assert_eq!(
                detect(&body),
                Some(expected_detection(provider, &stem)),
                "{provider}/{stem}"
            );
            assert!(
                matches(provider, &body),
                "{provider}/{stem} must match its own provider"
            );
            *seen.entry(provider).or_insert(0) += 1;
        }
    }
    assert_eq!(seen.len(), 8, "all eight folders have fixtures");
    Ok(())
}

#[test]
fn cross_shapes_do_not_match() -> TestResult {
    let chat_like = |p: Provider| matches!(p, Provider::OpenaiChat | Provider::Mistral);
    for provider in Provider::ALL {
        for (stem, body, _) in fixtures(provider.as_str())? {
            for other in Provider::ALL {
                let same = other == provider || (chat_like(other) && chat_like(provider));
                assert_eq!(matches(other, &body), same, "{provider}/{stem} as {other}");
            }
        }
    }
    let anthropic = fixture("anthropic", "sdk_single_tool_use")?;
    assert!(!matches(Provider::OpenaiChat, &anthropic));
    let mistral = fixture("mistral", "docs_single_tool_call")?;
    assert!(matches(Provider::OpenaiChat, &mistral));
    let chat = fixture("openai_chat", "real_single_tool_call")?;
    assert!(matches(Provider::Mistral, &chat));
    Ok(())
}

#[test]
fn parse_rejects_other_providers_bodies() -> TestResult {
    // A body of another format is a shape error naming the expected provider.
    let chat = fixture("openai_chat", "real_single_tool_call")?;
    for provider in [Provider::Anthropic, Provider::Gemini, Provider::Bedrock] {
        let err = provider.parse(&chat).err().ok_or("parsed a chat body")?;
        assert!(err.to_string().contains(provider.as_str()), "{err}");
    }
    Ok(())
}
