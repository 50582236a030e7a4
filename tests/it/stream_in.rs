//! Streamed completions as input (`completion_stream`, `POST /v1/completions/assemble`,
//! `toolwire assemble`): golden assemblies per provider (OpenAI Chat, OpenAI Responses,
//! Anthropic, Mistral) built from streams constructed by the documented wire formats, a
//! property test (any split of the argument text assembles to the same calls as the
//! non-streamed body), the outcomes of broken streams, and the live API and CLI.

use crate::common::server::Served;
use crate::common::tools::{ToolsDir, exec_tool};
use proptest::prelude::*;
use serde_json::{Value, json};
use toolwire::provider::Provider;
use toolwire::provider::stream::{self, StreamError};

// ---------------------------------------------------------------------------------------------
// Stream builders: a non-streamed body → the events a provider would have streamed for it,
// with every text and argument string cut at the given character positions.

/// Cuts `s` at these character positions (out-of-range and repeated cuts are ignored).
fn cut(s: &str, cuts: &[usize]) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    let mut at: Vec<usize> = cuts.iter().map(|c| c % (chars.len() + 1)).collect();
    at.sort_unstable();
    at.dedup();
    let mut out = Vec::new();
    let mut from = 0;
    for c in at {
        if c > from {
            out.push(chars[from..c].iter().collect());
            from = c;
        }
    }
    out.push(chars[from..].iter().collect());
    out
}

/// OpenAI Chat (or, with `mistral`, Mistral's split-call form: later fragments repeat
/// `id: "null"` and `name: ""`, chunks carry padding `p`) chunks for choice 0 of `body`.
fn chat_events(body: &Value, cuts: &[usize], mistral: bool) -> Vec<Value> {
    let msg = &body["choices"][0]["message"];
    let env = |choices: Value| {
        let mut c = json!({"id": body["id"], "object": "chat.completion.chunk", "created": body["created"], "model": body["model"], "choices": choices});
        if mistral {
            c["p"] = json!("abcdef");
        } else {
            c["obfuscation"] = json!("xyz");
            c["usage"] = Value::Null;
        }
        c
    };
    // OpenAI opens a call-only answer with `content: null`, a text answer with `content: ""`.
    let first = if msg["content"].is_null() {
        Value::Null
    } else {
        json!("")
    };
    let mut events = vec![env(
        json!([{"index": 0, "delta": {"role": "assistant", "content": first}, "finish_reason": null}]),
    )];
    if let Some(text) = msg["content"].as_str() {
        for piece in cut(text, cuts) {
            events.push(env(
                json!([{"index": 0, "delta": {"content": piece}, "finish_reason": null}]),
            ));
        }
    }
    for (i, call) in msg["tool_calls"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let args = call["function"]["arguments"].as_str().unwrap();
        for (k, piece) in cut(args, cuts).into_iter().enumerate() {
            let frag = if k == 0 {
                json!({"index": i, "id": call["id"], "type": "function", "function": {"name": call["function"]["name"], "arguments": piece}})
            } else if mistral {
                json!({"index": i, "id": "null", "function": {"name": "", "arguments": piece}})
            } else {
                json!({"index": i, "function": {"arguments": piece}})
            };
            events.push(env(
                json!([{"index": 0, "delta": {"tool_calls": [frag]}, "finish_reason": null}]),
            ));
        }
    }
    events.push(env(
        json!([{"index": 0, "delta": {}, "finish_reason": body["choices"][0]["finish_reason"]}]),
    ));
    let mut usage = env(json!([]));
    usage["usage"] = body["usage"].clone();
    events.push(usage);
    events
}

/// Anthropic events for `body`, with a `ping` after `message_start`.
fn anthropic_events(body: &Value, cuts: &[usize]) -> Vec<Value> {
    let mut start = body.clone();
    start["content"] = json!([]);
    start["stop_reason"] = Value::Null;
    start["usage"] = json!({"input_tokens": body["usage"]["input_tokens"], "output_tokens": 1});
    let mut events = vec![
        json!({"type": "message_start", "message": start}),
        json!({"type": "ping"}),
    ];
    for (i, block) in body["content"].as_array().unwrap().iter().enumerate() {
        let (start_block, deltas): (Value, Vec<Value>) = match block["type"].as_str().unwrap() {
            "text" => (
                json!({"type": "text", "text": ""}),
                cut(block["text"].as_str().unwrap(), cuts)
                    .into_iter()
                    .map(|t| json!({"type": "text_delta", "text": t}))
                    .collect(),
            ),
            "thinking" => {
                let mut d: Vec<Value> = cut(block["thinking"].as_str().unwrap(), cuts)
                    .into_iter()
                    .map(|t| json!({"type": "thinking_delta", "thinking": t}))
                    .collect();
                d.push(json!({"type": "signature_delta", "signature": block["signature"]}));
                (json!({"type": "thinking", "thinking": "", "signature": ""}), d)
            }
            "tool_use" => {
                let text = if block["input"] == json!({}) {
                    String::new()
                } else {
                    block["input"].to_string()
                };
                let mut d = vec![json!({"type": "input_json_delta", "partial_json": ""})];
                if !text.is_empty() {
                    d.extend(
                        cut(&text, cuts)
                            .into_iter()
                            .map(|t| json!({"type": "input_json_delta", "partial_json": t})),
                    );
                }
                (
                    json!({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}),
                    d,
                )
            }
            _ => (block.clone(), vec![]),
        };
        events.push(json!({"type": "content_block_start", "index": i, "content_block": start_block}));
        for d in deltas {
            events.push(json!({"type": "content_block_delta", "index": i, "delta": d}));
        }
        events.push(json!({"type": "content_block_stop", "index": i}));
    }
    events.push(json!({"type": "message_delta", "delta": {"stop_reason": body["stop_reason"], "stop_sequence": null}, "usage": {"output_tokens": body["usage"]["output_tokens"]}}));
    events.push(json!({"type": "message_stop"}));
    events
}

/// OpenAI Responses events for `body`; `completed` adds the final `response.completed`.
fn responses_events(body: &Value, cuts: &[usize], completed: bool) -> Vec<Value> {
    let mut seq = 0;
    let mut ev = |mut v: Value| {
        v["sequence_number"] = json!(seq);
        seq += 1;
        v
    };
    let mut envelope = body.clone();
    envelope["output"] = json!([]);
    envelope["status"] = json!("in_progress");
    let mut events = vec![
        ev(json!({"type": "response.created", "response": envelope})),
        ev(json!({"type": "response.in_progress", "response": envelope})),
    ];
    for (i, item) in body["output"].as_array().unwrap().iter().enumerate() {
        match item["type"].as_str().unwrap() {
            "function_call" => {
                let mut added = item.clone();
                added["arguments"] = json!("");
                added["status"] = json!("in_progress");
                events.push(ev(
                    json!({"type": "response.output_item.added", "output_index": i, "item": added}),
                ));
                let args = item["arguments"].as_str().unwrap();
                for piece in cut(args, cuts) {
                    events.push(ev(json!({"type": "response.function_call_arguments.delta", "output_index": i, "item_id": item["id"], "delta": piece, "obfuscation": "q"})));
                }
                events.push(ev(json!({"type": "response.function_call_arguments.done", "output_index": i, "item_id": item["id"], "arguments": args})));
            }
            "message" => {
                let mut added = item.clone();
                added["content"] = json!([]);
                added["status"] = json!("in_progress");
                events.push(ev(
                    json!({"type": "response.output_item.added", "output_index": i, "item": added}),
                ));
                for (c, part) in item["content"].as_array().unwrap().iter().enumerate() {
                    events.push(ev(json!({"type": "response.content_part.added", "output_index": i, "item_id": item["id"], "content_index": c, "part": {"type": "output_text", "text": "", "annotations": []}})));
                    for piece in cut(part["text"].as_str().unwrap(), cuts) {
                        events.push(ev(json!({"type": "response.output_text.delta", "output_index": i, "item_id": item["id"], "content_index": c, "delta": piece})));
                    }
                    events.push(ev(json!({"type": "response.output_text.done", "output_index": i, "item_id": item["id"], "content_index": c, "text": part["text"]})));
                    events.push(ev(json!({"type": "response.content_part.done", "output_index": i, "item_id": item["id"], "content_index": c, "part": part})));
                }
            }
            "reasoning" => {
                let mut added = item.clone();
                added["summary"] = json!([]);
                added.as_object_mut().unwrap().remove("encrypted_content");
                events.push(ev(
                    json!({"type": "response.output_item.added", "output_index": i, "item": added}),
                ));
                for (s, part) in item["summary"].as_array().unwrap().iter().enumerate() {
                    events.push(ev(json!({"type": "response.reasoning_summary_part.added", "output_index": i, "item_id": item["id"], "summary_index": s, "part": {"type": "summary_text", "text": ""}})));
                    for piece in cut(part["text"].as_str().unwrap(), cuts) {
                        events.push(ev(json!({"type": "response.reasoning_summary_text.delta", "output_index": i, "item_id": item["id"], "summary_index": s, "delta": piece})));
                    }
                    events.push(ev(json!({"type": "response.reasoning_summary_text.done", "output_index": i, "item_id": item["id"], "summary_index": s, "text": part["text"]})));
                    events.push(ev(json!({"type": "response.reasoning_summary_part.done", "output_index": i, "item_id": item["id"], "summary_index": s, "part": part})));
                }
            }
            _ => events.push(ev(
                json!({"type": "response.output_item.added", "output_index": i, "item": item}),
            )),
        }
        events.push(ev(
            json!({"type": "response.output_item.done", "output_index": i, "item": item}),
        ));
    }
    if completed {
        events.push(ev(json!({"type": "response.completed", "response": body})));
    }
    events
}

/// Raw SSE text of these events; `named` writes an `event:` line from each `type`. CRLF line
/// ends when `crlf`, a comment line first, and the `[DONE]` sentinel for chat-shaped streams.
fn sse(events: &[Value], named: bool, crlf: bool, done: bool) -> String {
    let nl = if crlf { "\r\n" } else { "\n" };
    let mut out = format!(": stream start{nl}{nl}");
    for e in events {
        if named {
            out.push_str(&format!("event: {}{nl}", e["type"].as_str().unwrap()));
        }
        out.push_str(&format!("data: {}{nl}{nl}", serde_json::to_string(e).unwrap()));
    }
    if done {
        out.push_str(&format!("data: [DONE]{nl}{nl}"));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Bodies.

fn chat_body(content: Option<&str>, calls: &[(&str, &str, &str)], finish: &str) -> Value {
    let mut message = json!({"role": "assistant", "content": content});
    if !calls.is_empty() {
        message["tool_calls"] = calls
            .iter()
            .map(
                |(id, name, args)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}}),
            )
            .collect();
    }
    json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1_700_000_000, "model": "gpt-test",
           "choices": [{"index": 0, "message": message, "finish_reason": finish}],
           "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})
}

fn anthropic_body(content: Value, stop: &str) -> Value {
    json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test", "content": content,
           "stop_reason": stop, "stop_sequence": null, "usage": {"input_tokens": 10, "output_tokens": 7}})
}

fn responses_body(output: Value) -> Value {
    json!({"id": "resp_1", "object": "response", "created_at": 1_700_000_000, "status": "completed", "model": "gpt-test",
           "output": output, "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}})
}

/// The argument text of the unicode cases: `\"`, `\\`, `\n`, `\u00e9` and a surrogate pair as
/// escapes, and raw multi-byte characters, so cuts land inside escapes and between the
/// halves of a pair.
const TRICKY_ARGS: &str = r#"{"q":"caf\u00e9 \"quoted\" back\\slash\nline \ud83d\ude00 raw é😀 日本"}"#;

fn calls_of(provider: Provider, body: &Value) -> Vec<(Option<String>, String, Value)> {
    let parsed = provider.parse(body).unwrap();
    parsed
        .calls
        .iter()
        .map(|c| (c.id.clone(), c.name.clone(), c.arguments.to_value()))
        .collect()
}

/// Assembles `events` and checks the assembly parses to the same turn as `body`.
fn assemble_matching(provider: Provider, events: &[Value], body: &Value) -> stream::Assembled {
    let assembled = stream::assemble(provider, events).unwrap();
    assert_eq!(calls_of(provider, &assembled.completion), calls_of(provider, body));
    let (a, b) = (
        provider.parse(&assembled.completion).unwrap(),
        provider.parse(body).unwrap(),
    );
    assert_eq!(a.finished, b.finished);
    assert_eq!(a.stop_reason, b.stop_reason);
    assert_eq!(a.assistant, b.assistant);
    assembled
}

// ---------------------------------------------------------------------------------------------
// Goldens.

#[test]
fn openai_chat_goldens() {
    let cases = [
        (
            "single",
            chat_body(None, &[("call_1", "get_weather", r#"{"city":"Paris"}"#)], "tool_calls"),
        ),
        (
            "parallel",
            chat_body(
                None,
                &[
                    ("call_1", "get_weather", r#"{"city":"Paris"}"#),
                    ("call_2", "get_time", r#"{"tz":"CET"}"#),
                ],
                "tool_calls",
            ),
        ),
        (
            "text_then_call",
            chat_body(
                Some("Let me check."),
                &[("call_1", "get_weather", r#"{"city":"Oslo"}"#)],
                "tool_calls",
            ),
        ),
        ("final_answer", chat_body(Some("It is 21 °C in Paris."), &[], "stop")),
        (
            "empty_arguments",
            chat_body(None, &[("call_1", "ping", "")], "tool_calls"),
        ),
        (
            "unicode_split",
            chat_body(None, &[("call_1", "search", TRICKY_ARGS)], "tool_calls"),
        ),
    ];
    for (name, body) in cases {
        let events = chat_events(&body, &[1, 2, 7, 8, 9, 13, 14, 30, 31, 40, 46, 47, 60], false);
        let assembled = assemble_matching(Provider::OpenaiChat, &events, &body);
        assert_eq!(
            assembled.completion, body,
            "{name}: the assembly is the non-streamed body"
        );
        assert!(assembled.warnings.is_empty(), "{name}: {:?}", assembled.warnings);
        insta::assert_json_snapshot!(format!("openai_chat_{name}"), assembled.completion);
        // The raw SSE text (CRLF, comment, [DONE]) assembles to the same body.
        let raw = sse(&events, false, true, true);
        let decoded = stream::decode(Provider::OpenaiChat, &raw).unwrap();
        assert_eq!(stream::assemble(Provider::OpenaiChat, &decoded).unwrap(), assembled);
    }
}

#[test]
fn openai_chat_follows_the_sdk_merge_rules() {
    // Calls interleaved across chunks, routed by `index`; a forced tool_choice ends with
    // `stop`; usage on the last `choices: []` chunk; a second choice.
    let events = vec![
        json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant", "content": null}}]}),
        json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "a", "arguments": "{\"x\""}}, {"index": 1, "id": "call_b", "type": "function", "function": {"name": "b", "arguments": ""}}]}}]}),
        json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 1, "function": {"arguments": "{}"}}, {"index": 0, "function": {"arguments": ":1}"}}]}}, {"index": 1, "delta": {"role": "assistant", "content": "other choice"}, "finish_reason": "stop"}]}),
        json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [], "usage": {"total_tokens": 3}}),
    ];
    let a = stream::assemble(Provider::OpenaiChat, &events).unwrap();
    insta::assert_json_snapshot!("openai_chat_interleaved", a.completion);
    assert_eq!(
        a.completion["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
        "{\"x\":1}"
    );
    assert_eq!(a.completion["usage"], json!({"total_tokens": 3}));
    assert_eq!(a.completion["choices"][1]["message"]["content"], "other choice");
}

#[test]
fn mistral_goldens_keep_ids_whole() {
    let body = {
        let mut b = chat_body(
            None,
            &[
                ("D681PevKs", "get_weather", r#"{"city":"Paris"}"#),
                ("k3x9Qw2Zt", "search", TRICKY_ARGS),
            ],
            "tool_calls",
        );
        b["object"] = json!("chat.completion");
        b
    };
    // Split calls (repeating id "null" and name "").
    let events = chat_events(&body, &[3, 5, 11, 12, 20], true);
    let a = assemble_matching(Provider::Mistral, &events, &body);
    assert_eq!(a.completion, body);
    insta::assert_json_snapshot!("mistral_split_calls", a.completion);
    // Whole calls in one delta, both saying index 0 (the SDK's default), with finish_reason
    // and usage on the same chunk.
    let whole = vec![
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1_700_000_000, "model": "gpt-test", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]}),
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1_700_000_000, "model": "gpt-test", "p": "pad",
               "choices": [{"index": 0, "delta": {"tool_calls": [
                   {"id": "D681PevKs", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}, "index": 0},
                   {"id": "k3x9Qw2Zt", "function": {"name": "search", "arguments": TRICKY_ARGS}, "index": 0}]}, "finish_reason": "tool_calls"}],
               "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}),
    ];
    let a = stream::assemble(Provider::Mistral, &whole).unwrap();
    assert_eq!(
        calls_of(Provider::Mistral, &a.completion),
        calls_of(Provider::Mistral, &body)
    );
    assert_eq!(
        a.completion["choices"][0]["message"]["tool_calls"][1]["id"],
        "k3x9Qw2Zt"
    );
    // OpenAI's rules on the same split stream would corrupt the id: why Mistral has its own.
    let openai = stream::assemble(Provider::OpenaiChat, &events).unwrap();
    let id = openai.completion["choices"][0]["message"]["tool_calls"][0]["id"]
        .as_str()
        .unwrap();
    assert!(id.starts_with("D681PevKsnull"), "{id}");
    // Final answer with reasoning content chunks (Magistral).
    let thinking = vec![
        json!({"id": "x", "object": "chat.completion.chunk", "model": "magistral", "choices": [{"index": 0, "delta": {"role": "assistant", "content": [{"type": "thinking", "thinking": [{"type": "text", "text": "Hmm"}]}]}}]}),
        json!({"id": "x", "object": "chat.completion.chunk", "model": "magistral", "choices": [{"index": 0, "delta": {"content": "The answer"}}]}),
        json!({"id": "x", "object": "chat.completion.chunk", "model": "magistral", "choices": [{"index": 0, "delta": {"content": " is 4."}, "finish_reason": "stop"}]}),
    ];
    let a = stream::assemble(Provider::Mistral, &thinking).unwrap();
    insta::assert_json_snapshot!("mistral_thinking_final", a.completion);
    assert!(Provider::Mistral.parse(&a.completion).unwrap().finished);
}

fn anthropic_cases() -> Vec<(&'static str, Value)> {
    vec![
        (
            "single",
            anthropic_body(
                json!([{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]),
                "tool_use",
            ),
        ),
        (
            "parallel",
            anthropic_body(
                json!([{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                       {"type": "tool_use", "id": "toolu_2", "name": "get_time", "input": {"tz": "CET"}}]),
                "tool_use",
            ),
        ),
        (
            "text_then_call",
            anthropic_body(
                json!([{"type": "text", "text": "Let me check the weather."},
                       {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}]),
                "tool_use",
            ),
        ),
        (
            "final_answer",
            anthropic_body(json!([{"type": "text", "text": "It is 21 °C in Paris."}]), "end_turn"),
        ),
        (
            "thinking_with_signature",
            anthropic_body(
                json!([{"type": "thinking", "thinking": "The user wants weather; call the tool.", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"},
                       {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
                       {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]),
                "tool_use",
            ),
        ),
        (
            "empty_arguments",
            anthropic_body(
                json!([{"type": "tool_use", "id": "toolu_1", "name": "ping", "input": {}}]),
                "tool_use",
            ),
        ),
        (
            "unicode_split",
            anthropic_body(
                json!([{"type": "tool_use", "id": "toolu_1", "name": "search", "input": serde_json::from_str::<Value>(TRICKY_ARGS).unwrap()}]),
                "tool_use",
            ),
        ),
    ]
}

#[test]
fn anthropic_goldens() {
    for (name, body) in anthropic_cases() {
        let events = anthropic_events(&body, &[1, 2, 7, 8, 9, 13, 14, 30, 31, 40, 46, 47]);
        let a = assemble_matching(Provider::Anthropic, &events, &body);
        assert_eq!(a.completion, body, "{name}");
        assert!(a.warnings.is_empty(), "{name}: {:?}", a.warnings);
        insta::assert_json_snapshot!(format!("anthropic_{name}"), a.completion);
        let raw = sse(&events, true, false, false);
        let decoded = stream::decode(Provider::Anthropic, &raw).unwrap();
        assert_eq!(stream::assemble(Provider::Anthropic, &decoded).unwrap(), a);
    }
    // The argument text of the unicode case cut inside `\u00e9` and between the surrogate halves.
    let text = r#"{"q":"caf\u00e9 \ud83d\ude00"}"#;
    let mut events = anthropic_events(
        &anthropic_body(
            json!([{"type": "tool_use", "id": "t", "name": "s", "input": {}}]),
            "tool_use",
        ),
        &[],
    );
    let pieces = [&text[..12], &text[12..22], &text[22..]];
    assert_eq!(pieces, [r#"{"q":"caf\u0"#, r#"0e9 \ud83d"#, r#"\ude00"}"#]);
    for (k, p) in pieces.iter().enumerate() {
        events.insert(4 + k, json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": p}}));
    }
    let a = stream::assemble(Provider::Anthropic, &events).unwrap();
    assert_eq!(a.completion["content"][0]["input"], json!({"q": "café 😀"}));
}

fn responses_cases() -> Vec<(&'static str, Value)> {
    let call = |id: &str, call_id: &str, name: &str, args: &str| json!({"type": "function_call", "id": id, "call_id": call_id, "name": name, "arguments": args, "status": "completed"});
    let message = |text: &str| {
        json!({"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": text, "annotations": []}]})
    };
    vec![
        (
            "single",
            responses_body(json!([call("fc_1", "call_1", "get_weather", r#"{"city":"Paris"}"#)])),
        ),
        (
            "parallel",
            responses_body(json!([
                call("fc_1", "call_1", "get_weather", r#"{"city":"Paris"}"#),
                call("fc_2", "call_2", "get_time", r#"{"tz":"CET"}"#)
            ])),
        ),
        (
            "text_then_call",
            responses_body(json!([
                message("Let me check."),
                call("fc_1", "call_1", "get_weather", r#"{"city":"Oslo"}"#)
            ])),
        ),
        (
            "final_answer",
            responses_body(json!([message("It is 21 °C in Paris.")])),
        ),
        (
            "reasoning_encrypted",
            responses_body(json!([
                {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "**Checking** the weather."}], "encrypted_content": "gAAAAABo-ENCRYPTED"},
                call("fc_1", "call_1", "get_weather", r#"{"city":"Paris"}"#)])),
        ),
        (
            "empty_arguments",
            responses_body(json!([call("fc_1", "call_1", "ping", "{}")])),
        ),
        (
            "unicode_split",
            responses_body(json!([call("fc_1", "call_1", "search", TRICKY_ARGS)])),
        ),
    ]
}

#[test]
fn openai_responses_goldens() {
    for (name, body) in responses_cases() {
        let cuts = [1, 2, 7, 8, 9, 13, 14, 30, 31, 40, 46, 47];
        let events = responses_events(&body, &cuts, true);
        let a = assemble_matching(Provider::OpenaiResponses, &events, &body);
        assert_eq!(
            a.completion, body,
            "{name}: the SDK's final is response.completed.response"
        );
        assert!(a.warnings.is_empty(), "{name}: {:?}", a.warnings);
        insta::assert_json_snapshot!(format!("openai_responses_{name}"), a.completion);
        // Without the final event the items are rebuilt from the events, with a warning.
        let cut_events = responses_events(&body, &cuts, false);
        let rebuilt = stream::assemble(Provider::OpenaiResponses, &cut_events).unwrap();
        assert_eq!(rebuilt.completion["output"], body["output"], "{name}: replayed items");
        assert!(
            rebuilt.warnings.iter().any(|w| w.contains("response.completed")),
            "{name}"
        );
        let raw = sse(&events, true, true, false);
        assert_eq!(
            stream::assemble(
                Provider::OpenaiResponses,
                &stream::decode(Provider::OpenaiResponses, &raw).unwrap()
            )
            .unwrap(),
            a
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Property: any split of the argument strings assembles to the same calls.

fn arb_args() -> impl Strategy<Value = String> {
    prop::collection::btree_map("[a-z]{1,6}", "[a-zé\"\\\\\n😀日 ]{0,10}", 0..4).prop_map(|m| {
        if m.is_empty() {
            String::new()
        } else {
            serde_json::to_string(&m).unwrap()
        }
    })
}

fn arb_calls() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(arb_args(), 1..4)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, .. ProptestConfig::default() })]

    #[test]
    fn any_split_assembles_to_the_same_calls(args in arb_calls(), cuts in prop::collection::vec(0usize..64, 0..12), text in "[a-z é😀]{0,12}") {
        let calls: Vec<(String, String, String)> = args.iter().enumerate().map(|(i, a)| (format!("call_{i}"), format!("tool_{i}"), a.clone())).collect();
        let refs: Vec<(&str, &str, &str)> = calls.iter().map(|(a, b, c)| (a.as_str(), b.as_str(), c.as_str())).collect();
        let content = if text.is_empty() { None } else { Some(text.as_str()) };
        // OpenAI Chat and Mistral (split form).
        let body = chat_body(content, &refs, "tool_calls");
        let a = stream::assemble(Provider::OpenaiChat, &chat_events(&body, &cuts, false)).unwrap();
        prop_assert_eq!(calls_of(Provider::OpenaiChat, &a.completion), calls_of(Provider::OpenaiChat, &body));
        prop_assert_eq!(&a.completion, &body);
        let m = stream::assemble(Provider::Mistral, &chat_events(&body, &cuts, true)).unwrap();
        prop_assert_eq!(calls_of(Provider::Mistral, &m.completion), calls_of(Provider::Mistral, &body));
        // Anthropic.
        let mut blocks: Vec<Value> = content.map(|t| json!({"type": "text", "text": t})).into_iter().collect();
        for (id, name, a) in &calls {
            let input = if a.is_empty() { json!({}) } else { serde_json::from_str::<Value>(a).unwrap() };
            blocks.push(json!({"type": "tool_use", "id": id, "name": name, "input": input}));
        }
        let body = anthropic_body(Value::Array(blocks), "tool_use");
        let a = stream::assemble(Provider::Anthropic, &anthropic_events(&body, &cuts)).unwrap();
        prop_assert_eq!(&a.completion, &body);
        // OpenAI Responses, with and without the final event.
        let items: Vec<Value> = calls.iter().map(|(id, name, a)| json!({"type": "function_call", "id": format!("fc_{id}"), "call_id": id, "name": name, "arguments": a, "status": "completed"})).collect();
        let body = responses_body(Value::Array(items));
        let a = stream::assemble(Provider::OpenaiResponses, &responses_events(&body, &cuts, false)).unwrap();
        prop_assert_eq!(calls_of(Provider::OpenaiResponses, &a.completion), calls_of(Provider::OpenaiResponses, &body));
    }
}

// ---------------------------------------------------------------------------------------------
// Broken streams.

#[test]
fn a_stream_cut_mid_arguments_keeps_the_text_for_args_not_json() {
    let body = chat_body(None, &[("call_1", "get_weather", r#"{"city":"Par"#)], "tool_calls");
    let mut events = chat_events(&body, &[5], false);
    events.truncate(events.len() - 2); // no finish_reason, no usage
    let a = stream::assemble(Provider::OpenaiChat, &events).unwrap();
    let call = &a.completion["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["arguments"], r#"{"city":"Par"#);
    assert_eq!(a.completion["choices"][0]["finish_reason"], Value::Null);
    assert!(
        a.warnings.iter().any(|w| w.contains("finish_reason")),
        "{:?}",
        a.warnings
    );
    assert!(a.warnings.iter().any(|w| w.contains("call_1")), "{:?}", a.warnings);

    let body = anthropic_body(
        json!([{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]),
        "tool_use",
    );
    let mut events = anthropic_events(&body, &[5]);
    events.truncate(5); // message_start, ping, block start, "" and the first 5 characters
    let a = stream::assemble(Provider::Anthropic, &events).unwrap();
    assert_eq!(a.completion["content"][0]["input"], r#"{"cit"#);
    assert!(
        a.warnings.iter().any(|w| w.contains("message_stop")),
        "{:?}",
        a.warnings
    );
    let parsed = Provider::Anthropic.parse(&a.completion).unwrap();
    assert_eq!(parsed.calls.len(), 1, "the cut call is not dropped");
}

#[test]
fn broken_streams_have_precise_outcomes() {
    // An error event aborts.
    let err = stream::assemble(
        Provider::Anthropic,
        &[json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": []}}),
          json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})],
    )
    .unwrap_err();
    assert_eq!(
        err,
        StreamError::Provider {
            provider: Provider::Anthropic,
            message: "Overloaded".into()
        }
    );
    let err = stream::assemble(Provider::OpenaiChat, &[json!({"error": {"message": "server_error"}})]).unwrap_err();
    assert!(matches!(err, StreamError::Provider { .. }));
    let err = stream::assemble(
        Provider::OpenaiResponses,
        &[json!({"type": "response.failed", "response": {"error": {"code": "server_error", "message": "boom"}}})],
    )
    .unwrap_err();
    assert_eq!(err.to_string(), "the openai_responses stream reported an error: boom");
    // No usable turn.
    let err = stream::assemble(Provider::Anthropic, &[json!({"type": "ping"})]).unwrap_err();
    assert!(matches!(err, StreamError::NoTurn { .. }), "{err}");
    let err = stream::assemble(Provider::OpenaiChat, &[]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the openai_chat stream has no usable turn: no chunk has a `choices` array"
    );
    let err = stream::assemble(
        Provider::OpenaiResponses,
        &[json!({"type": "response.output_text.delta", "output_index": 0, "delta": "x"})],
    )
    .unwrap_err();
    assert!(matches!(err, StreamError::Event { index: 0, .. }), "{err}");
    // Out of order.
    let err = stream::assemble(
        Provider::Anthropic,
        &[json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}})],
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "event 0 is not a anthropic stream event: `content_block_delta` before `message_start`"
    );
    let body = anthropic_body(json!([{"type": "text", "text": "hi"}]), "end_turn");
    let mut events = anthropic_events(&body, &[]);
    events.swap(2, 3); // the delta before its block start
    assert!(matches!(
        stream::assemble(Provider::Anthropic, &events),
        Err(StreamError::Event { index: 2, .. })
    ));
    // Unknown event types are skipped and reported.
    let mut events = anthropic_events(&body, &[]);
    events.insert(2, json!({"type": "content_block_future", "index": 0}));
    let a = stream::assemble(Provider::Anthropic, &events).unwrap();
    assert_eq!(a.completion, body);
    assert_eq!(
        a.warnings,
        vec!["unknown event or delta types were ignored: content_block_future".to_owned()]
    );
    let mut events = responses_events(&responses_body(json!([])), &[], true);
    events.insert(1, json!({"type": "response.brand_new", "sequence_number": 99}));
    let a = stream::assemble(Provider::OpenaiResponses, &events).unwrap();
    assert_eq!(
        a.warnings,
        vec!["unknown event types were ignored: response.brand_new".to_owned()]
    );
    // Not an event.
    assert!(matches!(
        stream::assemble(Provider::Mistral, &[json!(3)]),
        Err(StreamError::Event { index: 0, .. })
    ));
}

#[test]
fn large_streams_assemble() {
    // 100,000 argument fragments of one call: linear (a quadratic merge would not finish in
    // the test's time), and the result is exact.
    let n = 100_000;
    let mut events = vec![
        json!({"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "t", "arguments": "{\"k\":\""}}]}}]}),
    ];
    for _ in 0..n {
        events.push(json!({"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "ab"}}]}}]}));
    }
    events.push(json!({"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "\"}"}}]}, "finish_reason": "tool_calls"}]}));
    let a = stream::assemble(Provider::OpenaiChat, &events).unwrap();
    let args = a.completion["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
        .as_str()
        .unwrap();
    assert_eq!(args.len(), 2 * n + 8);
    let too_many = vec![json!({}); stream::MAX_EVENTS + 1];
    assert_eq!(
        stream::assemble(Provider::OpenaiChat, &too_many),
        Err(StreamError::TooManyEvents {
            max: stream::MAX_EVENTS
        })
    );
}

// ---------------------------------------------------------------------------------------------
// The live API.

fn echo_tools() -> ToolsDir {
    ToolsDir::new(&[exec_tool("get_weather", &["echo"]), exec_tool("get_time", &["echo"])])
}

/// The parts of an execute answer that do not depend on timing.
fn stable(answer: &Value) -> Value {
    let results: Vec<Value> = answer["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| json!({"id": r["id"], "name": r["name"], "ok": r["ok"], "arguments": r["arguments"], "kind": r["error"]["kind"]}))
        .collect();
    json!({"provider": answer["provider"], "assistant": answer["assistant"], "finished": answer["finished"],
           "stop_reason": answer["stop_reason"], "results": results, "messages": answer["messages"].as_array().map(Vec::len)})
}

#[tokio::test]
async fn execute_answers_a_stream_like_the_non_streamed_body() {
    let tools = echo_tools();
    let server = Served::start_dir_without_replay(tools.path()).await;
    let chat = chat_body(
        Some("Checking."),
        &[
            ("call_1", "get_weather", r#"{"city":"Paris"}"#),
            ("call_2", "get_time", r#"{"tz":"CET"}"#),
        ],
        "tool_calls",
    );
    let anthropic = anthropic_body(
        json!([{"type": "text", "text": "Checking."}, {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]),
        "tool_use",
    );
    let responses = responses_body(
        json!([{"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_time", "arguments": "{\"tz\":\"CET\"}", "status": "completed"}]),
    );
    let cases = [
        ("openai_chat", chat.clone(), chat_events(&chat, &[3, 9], false), false),
        ("mistral", chat.clone(), chat_events(&chat, &[3, 9], true), false),
        (
            "anthropic",
            anthropic.clone(),
            anthropic_events(&anthropic, &[3, 9]),
            true,
        ),
        (
            "openai_responses",
            responses.clone(),
            responses_events(&responses, &[3, 9], true),
            true,
        ),
    ];
    for (provider, body, events, named) in cases {
        let (status, plain) = server
            .post_json("/v1/execute", &json!({"provider": provider, "completion": body}))
            .await;
        assert_eq!(status, 200, "{plain}");
        assert!(
            plain.get("completion").is_none() && plain.get("stream_warnings").is_none(),
            "non-stream answers are unchanged"
        );
        let done = provider.starts_with("openai_chat") || provider == "mistral";
        let raw = sse(&events, named, provider == "anthropic", done);
        for input in [Value::Array(events.clone()), Value::String(raw)] {
            let (status, streamed) = server
                .post_json(
                    "/v1/execute",
                    &json!({"provider": provider, "completion_stream": input}),
                )
                .await;
            assert_eq!(status, 200, "{provider}: {streamed}");
            assert_eq!(stable(&streamed), stable(&plain), "{provider}");
            assert_eq!(streamed["completion"], body, "{provider}");
            assert_eq!(streamed["stream_warnings"], json!([]), "{provider}");
        }
        if provider != "mistral" {
            // Detected from the events' shape, and from the raw text.
            let (status, detected) = server
                .post_json("/v1/execute", &json!({"completion_stream": events}))
                .await;
            assert_eq!(status, 200, "{provider}: {detected}");
            assert_eq!(detected["provider"], provider);
            let (status, detected) = server
                .post_json(
                    "/v1/execute",
                    &json!({"completion_stream": sse(&events, named, false, done)}),
                )
                .await;
            assert_eq!(status, 200, "{provider}: {detected}");
            assert_eq!(detected["provider"], provider);
        }
    }
}

#[tokio::test]
async fn execute_with_a_cut_stream_answers_args_not_json_and_warns() {
    let tools = echo_tools();
    let server = Served::start_dir_without_replay(tools.path()).await;
    let body = chat_body(None, &[("call_1", "get_weather", r#"{"city":"Paris"}"#)], "tool_calls");
    let mut events = chat_events(&body, &[9], false);
    events.truncate(events.len() - 3);
    let (status, answer) = server
        .post_json("/v1/execute", &json!({"completion_stream": events}))
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["results"][0]["error"]["kind"], "args_not_json", "{answer}");
    assert_eq!(answer["results"][0]["id"], "call_1");
    let warnings = answer["stream_warnings"].as_array().unwrap();
    assert!(
        warnings.iter().any(|w| w.as_str().unwrap().contains("finish_reason")),
        "{answer}"
    );
}

#[tokio::test]
async fn execute_rejects_broken_streams_with_422_invalid_stream() {
    let tools = echo_tools();
    let server = Served::start_dir_without_replay(tools.path()).await;
    let cases = [
        (
            json!({"provider": "anthropic", "completion_stream": [{"type": "ping"}]}),
            "no_turn",
        ),
        (
            json!({"provider": "anthropic", "completion_stream": "event: error\ndata: {\"type\":\"error\",\"error\":{\"message\":\"Overloaded\"}}\n\n"}),
            "provider_error",
        ),
        (
            json!({"provider": "openai_chat", "completion_stream": "data: {not json\n\n"}),
            "wire",
        ),
        (
            json!({"provider": "anthropic", "completion_stream": [{"type": "content_block_stop", "index": 0}]}),
            "event",
        ),
    ];
    for (body, reason) in cases {
        let (status, answer) = server.post_json("/v1/execute", &body).await;
        assert_eq!(status, 422, "{answer}");
        assert_eq!(answer["error"]["code"], "invalid_stream", "{answer}");
        assert_eq!(answer["error"]["details"][0]["reason"], reason, "{answer}");
    }
    // Both or neither of completion / completion_stream.
    let (status, answer) = server
        .post_json("/v1/execute", &json!({"completion": {}, "completion_stream": []}))
        .await;
    assert_eq!((status, answer["error"]["code"].as_str()), (422, Some("unprocessable")));
    let (status, answer) = server.post_json("/v1/execute", &json!({"completion_stream": 5})).await;
    assert_eq!((status, answer["error"]["code"].as_str()), (422, Some("unprocessable")));
    // A stream whose provider cannot be told, and a named provider that disagrees.
    let (status, answer) = server
        .post_json("/v1/execute", &json!({"completion_stream": [{"x": 1}]}))
        .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (422, Some("provider_mismatch"))
    );
    let (status, answer) = server
        .post_json(
            "/v1/execute",
            &json!({"provider": "anthropic", "completion_stream": [{"choices": []}]}),
        )
        .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (422, Some("provider_mismatch")),
        "{answer}"
    );
}

#[tokio::test]
async fn the_streamed_answer_works_with_a_streamed_input() {
    let tools = echo_tools();
    let server = Served::start_dir_without_replay(tools.path()).await;
    let body = chat_body(None, &[("call_1", "get_weather", r#"{"city":"Paris"}"#)], "tool_calls");
    let raw = sse(&chat_events(&body, &[4], false), false, false, true);
    let resp = server
        .client
        .post(format!("{}/v1/execute", server.base))
        .header("accept", "application/x-ndjson")
        .json(&json!({"completion_stream": raw}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let text = resp.text().await.unwrap();
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines[0]["event"], "call_started", "{text}");
    let last = lines.last().unwrap();
    assert_eq!(last["event"], "response", "{text}");
    let answer = &last["response"];
    assert_eq!(answer["completion"], body, "{text}");
    assert_eq!(answer["stream_warnings"], json!([]));
    assert_eq!(answer["results"][0]["id"], "call_1");
    assert_eq!(answer["results"][0]["arguments"], json!({"city": "Paris"}));
}

#[tokio::test]
async fn assemble_returns_only_the_body() {
    let tools = echo_tools();
    let server = Served::start_dir_without_replay(tools.path()).await;
    let body = anthropic_body(
        json!([{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]),
        "tool_use",
    );
    let mut events = anthropic_events(&body, &[2]);
    events.insert(1, json!({"type": "brand_new_event"}));
    let resp = server
        .client
        .post(format!("{}/v1/completions/assemble", server.base))
        .json(&json!({"completion_stream": sse(&events, true, true, false)}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(resp.headers()["toolwire-provider"], "anthropic");
    assert_eq!(
        resp.headers()["toolwire-stream-warning"],
        "unknown event or delta types were ignored: brand_new_event"
    );
    assert_eq!(resp.json::<Value>().await.unwrap(), body);
    let (status, answer) = server
        .post_json(
            "/v1/completions/assemble",
            &json!({"provider": "nope", "completion_stream": []}),
        )
        .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (422, Some("unknown_provider"))
    );
    let (status, answer) = server
        .post_json(
            "/v1/completions/assemble",
            &json!({"provider": "openai_chat", "completion_stream": []}),
        )
        .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (422, Some("invalid_stream"))
    );
}

// ---------------------------------------------------------------------------------------------
// The CLI.

#[test]
fn cli_assemble_and_execute_read_streams() {
    let bin = crate::common::binary::toolwire_bin();
    let dir = tempfile::tempdir().unwrap();
    let body = chat_body(None, &[("call_1", "get_weather", r#"{"city":"Paris"}"#)], "tool_calls");
    let file = dir.path().join("stream.sse");
    std::fs::write(&file, sse(&chat_events(&body, &[4], false), false, false, true)).unwrap();
    let out = std::process::Command::new(&bin)
        .args(["assemble", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(serde_json::from_slice::<Value>(&out.stdout).unwrap(), body);

    let tools = echo_tools();
    let out = std::process::Command::new(&bin)
        .args([
            "execute",
            "--tools-dir",
            tools.path().to_str().unwrap(),
            "--stream",
            file.to_str().unwrap(),
        ])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["completion"], body);
    assert_eq!(answer["results"][0]["id"], "call_1");

    // A broken stream: a clear error and exit code 1.
    std::fs::write(&file, "event: ping\ndata: {}\n\n").unwrap();
    let out = std::process::Command::new(&bin)
        .args(["assemble", "-p", "anthropic", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no usable turn"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---------------------------------------------------------------------------------------------
// The official SDKs' accumulators (PyPI `openai`, `anthropic`, pinned in
// tests/fixtures/requirements.txt, installed by .ci/run into .cache/sdk-venv) fed the
// same raw SSE text through httpx's MockTransport (scripts/sdk_accumulate.py).

/// What both sides may differ in without meaning anything: null fields (the SDK's models fill
/// every optional field with null), the SDK's `parsed*` helpers, and the streaming routing key
/// `tool_calls[].index` (which toolwire drops; see `stream::openai_chat`).
fn normalise_sdk(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.retain(|k, v| !v.is_null() && k != "parsed" && k != "parsed_arguments");
            if let Some(Value::Array(calls)) = map.get_mut("tool_calls") {
                for c in calls.iter_mut().filter_map(Value::as_object_mut) {
                    c.remove("index");
                }
            }
            map.values_mut().for_each(normalise_sdk);
        }
        // The SDK types `created_at` as a float.
        Value::Number(n) if n.is_f64() => {
            if let Some(f) = n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 9e15) {
                *v = json!(f as i64);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalise_sdk),
        _ => {}
    }
}

fn sdk_python() -> std::path::PathBuf {
    let py = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".cache/sdk-venv/bin/python");
    assert!(
        py.exists(),
        "{} is missing: `make test` installs it (scripts/sdk-venv.sh)",
        py.display()
    );
    py
}

fn sdk_accumulate(py: &std::path::Path, requests: &[Value]) -> Vec<Value> {
    use std::io::Write as _;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/sdk_accumulate.py");
    let mut child = std::process::Command::new(py)
        .arg(script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(Value::Array(requests.to_vec()).to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn sdk_accumulators_agree() {
    let py = sdk_python();
    let cuts = [1, 2, 7, 8, 9, 13, 14, 30, 31, 40, 46, 47];
    let mut streams: Vec<(Provider, &str, String)> = Vec::new();
    let chat_cases = [
        chat_body(
            None,
            &[
                ("call_1", "get_weather", r#"{"city":"Paris"}"#),
                ("call_2", "get_time", r#"{"tz":"CET"}"#),
            ],
            "tool_calls",
        ),
        chat_body(
            Some("Let me check."),
            &[("call_1", "get_weather", r#"{"city":"Oslo"}"#)],
            "tool_calls",
        ),
        chat_body(Some("It is 21 °C in Paris."), &[], "stop"),
        chat_body(None, &[("call_1", "ping", "")], "tool_calls"),
        chat_body(None, &[("call_1", "search", TRICKY_ARGS)], "tool_calls"),
    ];
    for body in &chat_cases {
        streams.push((
            Provider::OpenaiChat,
            "openai_chat",
            sse(&chat_events(body, &cuts, false), false, false, true),
        ));
    }
    for (_, body) in anthropic_cases() {
        streams.push((
            Provider::Anthropic,
            "anthropic",
            sse(&anthropic_events(&body, &cuts), true, false, false),
        ));
    }
    for (_, body) in responses_cases() {
        streams.push((
            Provider::OpenaiResponses,
            "openai_responses",
            sse(&responses_events(&body, &cuts, true), true, false, false),
        ));
    }
    let requests: Vec<Value> = streams
        .iter()
        .map(|(_, name, text)| json!({"provider": name, "sse": text}))
        .collect();
    let finals = sdk_accumulate(&py, &requests);
    assert_eq!(finals.len(), streams.len());
    for ((provider, name, text), mut theirs) in streams.into_iter().zip(finals) {
        let mut ours = stream::assemble(provider, &stream::decode(provider, &text).unwrap())
            .unwrap()
            .completion;
        normalise_sdk(&mut ours);
        normalise_sdk(&mut theirs);
        assert_eq!(ours, theirs, "{name}: toolwire vs the SDK for\n{text}");
    }
}

// ---------------------------------------------------------------------------------------------
// Hostile input: whatever the text or events, decoding and assembly answer (Ok or a
// StreamError) and never panic.

const ALL: [Provider; 4] = [
    Provider::OpenaiChat,
    Provider::OpenaiResponses,
    Provider::Anthropic,
    Provider::Mistral,
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, .. ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(text in "((event|data|id|:)?(: ?)?(\\{|\\}|\\[DONE\\]|\"type\"|:|,|[a-z_.]{0,12}|\\r|\\n|\u{e9}|\u{1F600}){0,6}\\r?\\n?){0,12}") {
        for p in ALL {
            if let Ok(events) = stream::decode(p, &text) {
                let _ = stream::assemble(p, &events);
            }
        }
        let _ = toolwire::provider::stream::wire::decode_detect(&text);
    }

    #[test]
    fn mangled_streams_never_panic(drop_at in prop::collection::vec(0usize..40, 0..4), swap in prop::collection::vec((0usize..40, 0usize..40), 0..3), cut_at in 0usize..40) {
        let chat = chat_body(Some("hi"), &[("call_1", "t", r#"{"a":"é"}"#), ("call_2", "u", "{}")], "tool_calls");
        let anth = anthropic_body(json!([{"type": "thinking", "thinking": "x", "signature": "s"}, {"type": "tool_use", "id": "t1", "name": "t", "input": {"a": 1}}]), "tool_use");
        let resp = responses_body(json!([{"type": "reasoning", "id": "rs", "summary": [{"type": "summary_text", "text": "s"}]}, {"type": "function_call", "id": "fc", "call_id": "c", "name": "t", "arguments": "{\"a\":1}"}]));
        let streams = [
            (Provider::OpenaiChat, chat_events(&chat, &[2], false)),
            (Provider::Mistral, chat_events(&chat, &[2], true)),
            (Provider::Anthropic, anthropic_events(&anth, &[2])),
            (Provider::OpenaiResponses, responses_events(&resp, &[2], true)),
        ];
        for (p, mut events) in streams {
            for (a, b) in &swap {
                let n = events.len();
                events.swap(a % n, b % n);
            }
            for d in &drop_at {
                if !events.is_empty() {
                    let n = events.len();
                    events.remove(d % n);
                }
            }
            events.truncate(cut_at.max(1));
            // Every call the assembly keeps parses (possibly to args_not_json), none is lost
            // silently: a call seen in the events is in the body, or the assembly is an error.
            if let Ok(a) = stream::assemble(p, &events) {
                let parsed = p.parse(&a.completion);
                let seen: std::collections::BTreeSet<u64> = match p {
                    Provider::OpenaiChat => events
                        .iter()
                        .flat_map(|e| e["choices"][0]["delta"]["tool_calls"].as_array().cloned().unwrap_or_default())
                        .filter_map(|c| c["index"].as_u64())
                        .collect(),
                    Provider::Anthropic => events
                        .iter()
                        .filter(|e| e["type"] == "content_block_start" && e["content_block"]["type"] == "tool_use")
                        .filter_map(|e| e["index"].as_u64())
                        .collect(),
                    _ => Default::default(),
                };
                if !seen.is_empty() {
                    let parsed = parsed.unwrap();
                    prop_assert_eq!(parsed.calls.len(), seen.len(), "a call was dropped: {}", a.completion);
                }
            }
        }
    }
}

#[test]
fn responses_reasoning_text_without_a_part_event_starts_its_part() {
    let events = vec![
        json!({"type": "response.created", "response": {"id": "r", "object": "response", "status": "in_progress", "output": []}}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "reasoning", "id": "rs", "summary": []}}),
        json!({"type": "response.reasoning_text.delta", "output_index": 0, "content_index": 0, "delta": "think"}),
        json!({"type": "response.reasoning_text.delta", "output_index": 0, "content_index": 0, "delta": "ing"}),
    ];
    let a = stream::assemble(Provider::OpenaiResponses, &events).unwrap();
    assert_eq!(
        a.completion["output"][0]["content"],
        json!([{"type": "reasoning_text", "text": "thinking"}])
    );
    assert_eq!(a.completion["status"], "in_progress");
    assert!(a.warnings[0].contains("response.completed"), "{:?}", a.warnings);
}

#[tokio::test]
async fn an_undeclared_mistral_stream_is_recognised_by_its_markers() {
    let tools = echo_tools();
    let server = Served::start_dir_without_replay(tools.path()).await;
    let body = chat_body(
        None,
        &[("D681PevKs", "get_weather", r#"{"city":"Paris"}"#)],
        "tool_calls",
    );
    let raw = sse(&chat_events(&body, &[3, 7], true), false, false, true);
    let (status, answer) = server
        .post_json("/v1/execute", &json!({"completion_stream": raw}))
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["provider"], "mistral");
    assert_eq!(answer["results"][0]["id"], "D681PevKs", "the id is not glued to `null`");
    assert_eq!(answer["results"][0]["arguments"], json!({"city": "Paris"}));
    // A plain OpenAI stream stays OpenAI.
    let raw = sse(&chat_events(&body, &[3, 7], false), false, false, true);
    let (_, answer) = server
        .post_json("/v1/execute", &json!({"completion_stream": raw}))
        .await;
    assert_eq!(answer["provider"], "openai_chat");
}

// ---------------------------------------------------------------------------------------------
// Bedrock's binary event stream through the live API.

/// CRC-32 (IEEE), bit by bit: the test's own, independent of the decoder's table.
fn crc32_ieee(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for b in bytes {
        crc ^= u32::from(*b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// One `application/vnd.amazon.eventstream` frame of a ConverseStream event, as AWS sends it
/// (string headers, the JSON payload with its `"p"` padding key).
fn eventstream_frame(event_type: &str, mut payload: Value) -> Vec<u8> {
    payload["p"] = json!("abcdefghij");
    let payload = payload.to_string();
    let mut headers = Vec::new();
    for (name, value) in [
        (":event-type", event_type),
        (":content-type", "application/json"),
        (":message-type", "event"),
    ] {
        headers.push(u8::try_from(name.len()).unwrap());
        headers.extend_from_slice(name.as_bytes());
        headers.push(7);
        headers.extend_from_slice(&u16::try_from(value.len()).unwrap().to_be_bytes());
        headers.extend_from_slice(value.as_bytes());
    }
    let total = u32::try_from(16 + headers.len() + payload.len()).unwrap();
    let mut frame = Vec::new();
    frame.extend_from_slice(&total.to_be_bytes());
    frame.extend_from_slice(&u32::try_from(headers.len()).unwrap().to_be_bytes());
    let prelude_crc = crc32_ieee(&frame);
    frame.extend_from_slice(&prelude_crc.to_be_bytes());
    frame.extend_from_slice(&headers);
    frame.extend_from_slice(payload.as_bytes());
    let crc = crc32_ieee(&frame);
    frame.extend_from_slice(&crc.to_be_bytes());
    frame
}

#[tokio::test]
async fn a_raw_bedrock_event_stream_answers_like_the_converse_body() {
    use base64::Engine as _;
    let tools = echo_tools();
    let server = Served::start_dir_without_replay(tools.path()).await;
    let events = [
        ("messageStart", json!({"role": "assistant"})),
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"text": "Checking."}}),
        ),
        ("contentBlockStop", json!({"contentBlockIndex": 0})),
        (
            "contentBlockStart",
            json!({"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "tooluse_1", "name": "get_weather"}}}),
        ),
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": 1, "delta": {"toolUse": {"input": "{\"city\":"}}}),
        ),
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": 1, "delta": {"toolUse": {"input": "\"Paris\"}"}}}),
        ),
        ("contentBlockStop", json!({"contentBlockIndex": 1})),
        ("messageStop", json!({"stopReason": "tool_use"})),
    ];
    let bytes: Vec<u8> = events
        .iter()
        .flat_map(|(ty, payload)| eventstream_frame(ty, payload.clone()))
        .collect();
    let raw = base64::engine::general_purpose::STANDARD.encode(&bytes);
    let body = json!({"output": {"message": {"role": "assistant", "content": [
        {"text": "Checking."},
        {"toolUse": {"toolUseId": "tooluse_1", "name": "get_weather", "input": {"city": "Paris"}}}]}},
        "stopReason": "tool_use"});
    let (status, plain) = server
        .post_json("/v1/execute", &json!({"provider": "bedrock", "completion": body}))
        .await;
    assert_eq!(status, 200, "{plain}");
    for request in [
        json!({"provider": "bedrock", "completion_stream": raw}),
        json!({"completion_stream": raw}),
    ] {
        let (status, streamed) = server.post_json("/v1/execute", &request).await;
        assert_eq!(status, 200, "{streamed}");
        assert_eq!(stable(&streamed), stable(&plain));
        assert_eq!(streamed["completion"]["output"], body["output"]);
    }
    // A flipped byte breaks a CRC: a 422 naming the wire format, nothing runs.
    let mut broken = bytes.clone();
    broken[20] ^= 0xff;
    let raw = base64::engine::general_purpose::STANDARD.encode(&broken);
    let (status, answer) = server
        .post_json("/v1/execute", &json!({"provider": "bedrock", "completion_stream": raw}))
        .await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["error"]["code"], "invalid_stream");
}
