//! Files from tools through the real server: a binary HTTP body (PNG) and the JSON files form
//! printed by an exec tool. Bytes must round-trip exactly, `results[].files` lists no data
//! unless asked, caps give `output_too_large`, and a broken files contract gives `internal`.

use std::net::SocketAddr;

use crate::common::server::Served;
use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

/// Every byte value, twice: invalid UTF-8 that any lossy text decoding would mangle.
fn png_bytes() -> Vec<u8> {
    let mut bytes = b"\x89PNG\r\n\x1a\n".to_vec();
    bytes.extend((0..=255u8).chain((0..=255u8).rev()));
    bytes
}

async fn start_backend() -> SocketAddr {
    let app = Router::new()
        .route(
            "/chart",
            get(|| async {
                (
                    [
                        (header::CONTENT_TYPE, "image/png"),
                        (header::CONTENT_DISPOSITION, "inline; filename=\"chart.png\""),
                    ],
                    png_bytes(),
                )
                    .into_response()
            }),
        )
        .route(
            "/big.pdf",
            get(|| async { ([(header::CONTENT_TYPE, "application/pdf")], vec![b'%'; 10_000]).into_response() }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

/// Prints the JSON files form; `mode` picks a well-formed answer or a contract violation.
/// (No braces: in a command template they would be placeholders.)
const FILES_SCRIPT: &str = r#"
import base64, json, sys
mode = json.load(sys.stdin)["arguments"]["mode"]
b64 = lambda b: base64.b64encode(b).decode()
if mode == "ok":
    files = [dict(filename="dots.png", mime_type="image/png", data=b64(bytes(range(256)))),
             dict(filename="r.pdf", mime_type="application/pdf", data=b64(b"%PDF-1.4\n%\xe2\xe3"))]
elif mode == "bad_base64":
    files = [dict(filename="x.png", mime_type="image/png", data="not*base64!")]
elif mode == "missing_mime":
    files = [dict(filename="x.png", data="aGk=")]
else:
    files = [dict(filename="big.bin", mime_type="application/octet-stream", data=b64(bytes(20000)))]
print(json.dumps(dict(content=dict(mode=mode), files=files)))
"#;

fn tools_dir(backend: SocketAddr) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let tools = json!({"tools": [
        {"name": "chart", "description": "Render a chart as PNG.", "parameters": {},
         "http": {"method": "GET", "url": format!("http://{backend}/chart")}},
        {"name": "big_pdf", "description": "A PDF over the read cap.", "parameters": {}, "max_read_bytes": 4096,
         "http": {"method": "GET", "url": format!("http://{backend}/big.pdf")}},
        {"name": "make_files", "description": "Print files.", "max_read_bytes": 16384,
         "parameters": {"mode": {"type": "string"}},
         "exec": {"command": ["python3", "-c", FILES_SCRIPT], "stdin": "json", "output": "json"}}
    ]});
    std::fs::write(dir.path().join("files.json"), tools.to_string()).unwrap();
    dir
}

fn chat_completion(calls: &[(&str, &str, Value)]) -> Value {
    let tool_calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, args)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}}))
        .collect();
    json!({"choices": [{"index": 0, "finish_reason": "tool_calls",
        "message": {"role": "assistant", "content": null, "tool_calls": tool_calls}}]})
}

fn anthropic_completion(calls: &[(&str, &str, Value)]) -> Value {
    let blocks: Vec<Value> = calls
        .iter()
        .map(|(id, name, args)| json!({"type": "tool_use", "id": id, "name": name, "input": args}))
        .collect();
    json!({"type": "message", "role": "assistant", "content": blocks, "stop_reason": "tool_use"})
}

#[tokio::test]
async fn binary_http_body_round_trips_and_data_is_opt_in() {
    let backend = start_backend().await;
    let dir = tools_dir(backend);
    let server = Served::start_dir(dir.path()).await;
    let completion = chat_completion(&[("call_1", "chart", json!({}))]);

    // Default: name, type and size only.
    let (s, b) = server
        .post_json(
            "/v1/execute",
            &json!({"provider": "openai_chat", "completion": completion}),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let r = &b["results"][0];
    assert_eq!(r["ok"], true, "{b}");
    let size = png_bytes().len();
    assert_eq!(
        r["files"],
        json!([{"filename": "chart.png", "mime_type": "image/png", "size": size}])
    );
    assert_eq!(
        r["output"],
        json!(format!("The tool returned a file: chart.png (image/png, {size} bytes)"))
    );
    assert_eq!(
        b["messages"][0]["content"],
        json!(format!(
            "The tool returned a file: chart.png (image/png, {size} bytes)\n[file: chart.png, image/png, {size} bytes]"
        ))
    );
    assert_eq!(b["messages"].as_array().unwrap().len(), 1);

    // Asked for: the exact bytes, and the image in a user message.
    let (_, b) = server
        .post_json(
            "/v1/execute",
            &json!({"provider": "openai_chat", "completion": completion,
                    "options": {"include_file_data": true, "files_as_user_message": true}}),
        )
        .await;
    // The same call id again: answered from the replay store, files included.
    assert_eq!(b["results"][0]["replayed"], true, "{b}");
    let data = b["results"][0]["files"][0]["data"].as_str().unwrap();
    assert_eq!(STANDARD.decode(data).unwrap(), png_bytes());
    let user = &b["messages"][1];
    assert_eq!(user["role"], "user");
    assert_eq!(
        user["content"][2]["image_url"]["url"],
        json!(format!("data:image/png;base64,{data}"))
    );

    // Anthropic gets a native image block with the same bytes.
    let (_, b) = server
        .post_json(
            "/v1/execute",
            &json!({"completion": anthropic_completion(&[("toolu_1", "chart", json!({}))])}),
        )
        .await;
    let content = &b["messages"][0]["content"][0]["content"];
    assert_eq!(content[1]["type"], "image", "{b}");
    assert_eq!(
        STANDARD.decode(content[1]["source"]["data"].as_str().unwrap()).unwrap(),
        png_bytes()
    );
    server.stop().await;
}

#[tokio::test]
async fn json_files_form_from_an_exec_tool() {
    let backend = start_backend().await;
    let dir = tools_dir(backend);
    let server = Served::start_dir(dir.path()).await;
    let completion = anthropic_completion(&[("toolu_1", "make_files", json!({"mode": "ok"}))]);
    let (s, b) = server
        .post_json(
            "/v1/execute",
            &json!({"completion": completion, "options": {"include_file_data": true}}),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let r = &b["results"][0];
    assert_eq!(r["ok"], true, "{b}");
    assert_eq!(r["output"], json!({"mode": "ok"}));
    let files = r["files"].as_array().unwrap();
    assert_eq!(files.len(), 2);
    assert_eq!(files[0]["filename"], "dots.png");
    assert_eq!(
        STANDARD.decode(files[0]["data"].as_str().unwrap()).unwrap(),
        (0..=255u8).collect::<Vec<u8>>()
    );
    assert_eq!(
        STANDARD.decode(files[1]["data"].as_str().unwrap()).unwrap(),
        b"%PDF-1.4\n%\xe2\xe3"
    );
    let blocks = b["messages"][0]["content"][0]["content"].as_array().unwrap();
    let types: Vec<&str> = blocks.iter().map(|b| b["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["text", "image", "document"]);
    assert_eq!(blocks[0]["text"], "{\"mode\":\"ok\"}");
    server.stop().await;
}

#[tokio::test]
async fn caps_and_contract_violations_are_error_results() {
    let backend = start_backend().await;
    let dir = tools_dir(backend);
    let server = Served::start_dir(dir.path()).await;
    let completion = chat_completion(&[
        ("call_1", "big_pdf", json!({})),
        ("call_2", "make_files", json!({"mode": "big"})),
        ("call_3", "make_files", json!({"mode": "bad_base64"})),
        ("call_4", "make_files", json!({"mode": "missing_mime"})),
    ]);
    let (s, b) = server
        .post_json("/v1/execute", &json!({"completion": completion}))
        .await;
    assert_eq!(s, 200, "{b}");
    let kinds: Vec<&str> = b["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["error"]["kind"].as_str().unwrap_or("ok"))
        .collect();
    assert_eq!(
        kinds,
        ["output_too_large", "output_too_large", "internal", "internal"],
        "{b}"
    );
    for r in &b["results"].as_array().unwrap()[2..] {
        let message = r["error"]["message"].as_str().unwrap();
        assert!(message.contains("broke the files contract"), "{message}");
        assert!(r.get("files").is_none());
    }
    server.stop().await;
}
