//! The golden table's rows for results that carry files, for every provider: one call returns text, an
//! image and a PDF; another returns JSON with a text file and an archive (the fallbacks).

use bytes::Bytes;
use serde_json::{Value, json};
use toolwire::call::{ToolFile, ToolResult};
use toolwire::provider::{FormatOptions, Parsed, Provider};

use super::Table;

/// The PNG signature plus a few bytes that are not UTF-8.
const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\x00\xff";
const PDF: &[u8] = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n";

fn file(name: &str, mime: &str, data: &[u8]) -> ToolFile {
    ToolFile::try_new(name, mime, Bytes::copy_from_slice(data)).unwrap()
}

/// Two calls of the same shape in each provider's completion format.
fn completion(provider: Provider) -> Value {
    match provider {
        Provider::OpenaiChat | Provider::Mistral => json!({"choices": [{"index": 0, "finish_reason": "tool_calls",
            "message": {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "quarterly_report", "arguments": "{}"}},
                {"id": "call_2", "type": "function", "function": {"name": "export_rows", "arguments": "{}"}}]}}]}),
        Provider::OpenaiResponses => json!({"object": "response", "status": "completed", "output": [
            {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "quarterly_report", "arguments": "{}"},
            {"type": "function_call", "id": "fc_2", "call_id": "call_2", "name": "export_rows", "arguments": "{}"}]}),
        Provider::Anthropic => json!({"type": "message", "role": "assistant", "stop_reason": "tool_use", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "quarterly_report", "input": {}},
            {"type": "tool_use", "id": "toolu_2", "name": "export_rows", "input": {}}]}),
        Provider::Gemini => {
            json!({"candidates": [{"index": 0, "finishReason": "STOP", "content": {"role": "model", "parts": [
            {"functionCall": {"name": "quarterly_report", "args": {}, "id": "fc_1"}},
            {"functionCall": {"name": "export_rows", "args": {}, "id": "fc_2"}}]}}]})
        }
        Provider::Bedrock => json!({"stopReason": "tool_use", "output": {"message": {"role": "assistant", "content": [
            {"toolUse": {"toolUseId": "tooluse_1", "name": "quarterly_report", "input": {}}},
            {"toolUse": {"toolUseId": "tooluse_2", "name": "export_rows", "input": {}}}]}}}),
        Provider::Cohere => {
            json!({"id": "x", "finish_reason": "TOOL_CALL", "message": {"role": "assistant", "tool_calls": [
            {"id": "quarterly_report_1", "type": "function", "function": {"name": "quarterly_report", "arguments": "{}"}},
            {"id": "export_rows_2", "type": "function", "function": {"name": "export_rows", "arguments": "{}"}}]}})
        }
        Provider::Ollama => {
            json!({"model": "llava", "done": true, "done_reason": "stop", "message": {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "function": {"name": "quarterly_report", "arguments": {}}},
            {"id": "call_2", "function": {"name": "export_rows", "arguments": {}}}]}})
        }
    }
}

fn results(parsed: &Parsed) -> Vec<ToolResult> {
    let mut report = ToolResult::ok(&parsed.calls[0], json!("Quarterly report ready: revenue up 12%."));
    report.files = vec![
        file("chart.png", "image/png", PNG),
        file("report.pdf", "application/pdf", PDF),
    ];
    let mut rows = ToolResult::ok(&parsed.calls[1], json!({"rows": 2}));
    rows.files = vec![
        file("rows.txt", "text/plain", b"a,1\nb,2\n"),
        file("rows.zip", "application/zip", b"PK\x03\x04"),
    ];
    vec![report, rows]
}

fn formatted(provider: Provider, body: &Value, opts: FormatOptions) -> Vec<Value> {
    let parsed = provider.parse(body).unwrap();
    assert_eq!(parsed.calls.len(), 2);
    provider.format(&parsed, &results(&parsed), &opts)
}

/// The rows of the golden table for results with files (see `super::table`).
pub(super) fn cases(t: &mut Table) {
    for provider in Provider::ALL {
        t.add(provider, "files", move || {
            Ok(formatted(provider, &completion(provider), FormatOptions::default()))
        });
    }
    t.add(Provider::OpenaiChat, "files_as_user_message", || {
        let opts = FormatOptions {
            files_as_user_message: true,
        };
        let messages = formatted(Provider::OpenaiChat, &completion(Provider::OpenaiChat), opts);
        // The user message comes after ALL tool messages.
        let roles: Vec<&str> = messages.iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["tool", "tool", "user"]);
        Ok(messages)
    });
    t.add(Provider::Gemini, "files_snake_case", || {
        let body = json!({"candidates": [{"index": 0, "finish_reason": "STOP", "content": {"role": "model", "parts": [
            {"function_call": {"name": "quarterly_report", "args": {}, "id": "fc_1"}},
            {"function_call": {"name": "export_rows", "args": {}, "id": "fc_2"}}]}}]});
        Ok(formatted(Provider::Gemini, &body, FormatOptions::default()))
    });
}

#[test]
fn other_providers_ignore_files_as_user_message() {
    let opts = FormatOptions {
        files_as_user_message: true,
    };
    let anthropic = formatted(Provider::Anthropic, &completion(Provider::Anthropic), opts);
    assert_eq!(
        anthropic,
        formatted(
            Provider::Anthropic,
            &completion(Provider::Anthropic),
            FormatOptions::default()
        )
    );
}

#[test]
fn results_without_files_are_unchanged() {
    for provider in Provider::ALL {
        let parsed = provider.parse(&completion(provider)).unwrap();
        let plain: Vec<ToolResult> = parsed.calls.iter().map(|c| ToolResult::ok(c, json!("x"))).collect();
        let opts = FormatOptions {
            files_as_user_message: true,
        };
        let text = serde_json::to_string(&provider.format(&parsed, &plain, &opts)).unwrap();
        assert!(!text.contains("file"), "{provider}: {text}");
    }
}
