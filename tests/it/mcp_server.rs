//! toolwire's tools served over MCP, driven by the official Python MCP client (`mcp`, pinned in
//! tests/fixtures/requirements.txt; `tests/fixtures/mcp/client.py`) — an implementation that is
//! not rmcp — in every connect mode (`auto`, `legacy`, `2026-07-28`): against `POST /mcp` of the
//! real server on 127.0.0.1:0, and against the real `toolwire mcp` binary over stdio. Raw HTTP
//! requests cover what a well-behaved client never sends: no token, a foreign `Host` or
//! `Origin`, malformed JSON-RPC, an oversized body.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::binary::toolwire_bin;
use crate::common::mock_backend::MockBackend;
use crate::common::server::{Answer, Served, config_for};
use crate::common::tools::{ToolsDir, exec_tool, http_tool, merge};

const MODES: &[&str] = &["auto", "legacy", "2026-07-28"];
const USER: &str = "u-MCP-STATE-7731";
const TOKEN: &str = "mcp-test-token-0123456789";

fn python() -> PathBuf {
    let py = Path::new(env!("CARGO_MANIFEST_DIR")).join(".cache/sdk-venv/bin/python");
    assert!(
        py.exists(),
        "{} is missing: `make test` installs it (scripts/sdk-venv.sh)",
        py.display()
    );
    py
}

/// How the Python client reaches toolwire.
enum Target<'a> {
    Http { url: String, headers: &'a [String] },
    Stdio { tools_dir: &'a Path, extra: &'a [&'a str] },
}

/// Runs `client.py` in `mode` with `ops`; its one JSON line.
async fn py_client(mode: &str, target: &Target<'_>, ops: &Value) -> Value {
    use tokio::io::AsyncWriteExt as _;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp/client.py");
    let mut cmd = tokio::process::Command::new(python());
    cmd.arg(script).args(["--mode", mode]);
    match target {
        Target::Http { url, headers } => {
            cmd.args(["--url", url]);
            for h in *headers {
                cmd.args(["--header", h]);
            }
        }
        Target::Stdio { tools_dir, extra } => {
            cmd.arg("--stdio")
                .arg(toolwire_bin())
                .args(["mcp", "--log-format", "json", "--tools-dir"])
                .arg(tools_dir)
                .args(*extra);
        }
    }
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(ops.to_string().as_bytes()).await.unwrap();
    drop(stdin);
    let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .expect("the Python client finished")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| {
        panic!(
            "client output is not JSON ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The declared schema of `lookup_order`: `$defs`/`$ref` and a 2020-12 keyword
/// (`dependentRequired`); `user_id` is injected, so it is not a parameter.
fn order_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "order": {"$ref": "#/$defs/order_id", "description": "The order to look up."},
            "verbose": {"type": "boolean", "description": "Include line items."},
            "fields": {"type": "string", "description": "Comma-separated fields."}
        },
        "required": ["order"],
        "dependentRequired": {"fields": ["verbose"]},
        "$defs": {"order_id": {"type": "string", "pattern": "^o-[0-9]+$"}}
    })
}

/// An HTTP tool (to the mock's echo), an exec tool echoing its stdin envelope, one that fails.
fn tools(mock: &MockBackend) -> ToolsDir {
    let lookup = merge(
        http_tool("lookup_order", &mock.url("/ok/orders")),
        json!({"parameters": order_schema(), "inject": {"user_id": "state.user_id"}}),
    );
    let echo = merge(
        exec_tool("echo_envelope", &["echo"]),
        json!({"exec": {"stdin": "json"}, "inject": {"user_id": "state.user_id?"},
               "parameters": {"type": "object", "properties": {"q": {"type": "integer", "description": "A number."}}}}),
    );
    let fail = exec_tool("always_fail", &["exit", "3"]);
    ToolsDir::new(&[lookup, echo, fail])
}

/// What every mode and transport must do: list (schemas as declared, injected parameter
/// absent), call the HTTP and the exec tool with state from `_meta`, a failing tool as
/// `isError`, an unknown tool as invalid params.
fn ops() -> Value {
    let state = json!({"toolwire/state": {"user_id": USER}});
    json!([
        {"op": "list"},
        {"op": "call", "name": "lookup_order", "args": {"order": "o-42"}, "meta": state},
        {"op": "call", "name": "echo_envelope", "args": {"q": 7}, "meta": state},
        {"op": "call", "name": "always_fail", "args": {}},
        {"op": "call", "name": "no_such_tool", "args": {}},
        {"op": "call", "name": "lookup_order", "args": {"order": "not-an-order"}, "meta": state},
    ])
}

fn assert_common(out: &Value, mode: &str, what: &str) {
    assert!(out.get("connect_error").is_none(), "{what} {mode}: {out}");
    let expected_version = if mode == "legacy" { "2025-11-25" } else { "2026-07-28" };
    assert_eq!(out["protocol_version"], expected_version, "{what} {mode}: {out}");
    let r = &out["results"];

    let listed = r[0]["tools"].as_array().unwrap();
    let names: Vec<&str> = listed.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["lookup_order", "echo_envelope", "always_fail"], "{what} {mode}");
    let lookup = &listed[0];
    assert_eq!(lookup["inputSchema"], order_schema(), "{what} {mode}: as declared");
    assert!(!lookup.to_string().contains("user_id"), "{what} {mode}: {lookup}");
    assert!(lookup["description"].as_str().unwrap().contains("lookup_order"));

    // HTTP tool: JSON output → structuredContent + its text; the injected value reached the
    // backend (the mock echoes the body it got).
    let call = &r[1];
    assert_eq!(call["isError"], false, "{what} {mode}: {call}");
    assert_eq!(
        call["structuredContent"]["body"],
        json!({"order": "o-42", "user_id": USER}),
        "{what} {mode}: {call}"
    );
    let text: Value = serde_json::from_str(call["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(
        text, call["structuredContent"],
        "{what} {mode}: the text mirrors the JSON"
    );

    // Exec tool: the state reaches the program only through its envelope.
    let call = &r[2];
    assert_eq!(call["isError"], false, "{what} {mode}: {call}");
    assert_eq!(
        call["structuredContent"]["stdin"]["arguments"],
        json!({"q": 7, "user_id": USER}),
        "{what} {mode}: {call}"
    );

    // A failing tool is a result the model reads, with toolwire's error kind beside it.
    let call = &r[3];
    assert_eq!(call["isError"], true, "{what} {mode}: {call}");
    let text = call["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("Error (nonzero_exit):"), "{what} {mode}: {text}");
    assert_eq!(call["_meta"]["toolwire/error"]["kind"], "nonzero_exit");

    // Unknown tool: the protocol's invalid-params error.
    let err = &r[4]["error"];
    assert_eq!(err["code"], -32602, "{what} {mode}: {}", r[4]);
    assert!(err["message"].as_str().unwrap().contains("no_such_tool"), "{err}");

    // Arguments against the schema: a failed result naming the problem, nothing sent.
    let call = &r[5];
    assert_eq!(call["isError"], true, "{what} {mode}: {call}");
    assert!(
        call["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("Error (invalid_arguments):"),
        "{call}"
    );
}

#[tokio::test]
async fn http_endpoint_serves_every_mode_of_the_python_client() {
    let mock = MockBackend::start().await;
    let tools = tools(&mock);
    let mut cfg = config_for(tools.path());
    cfg.replay.enabled = false;
    let server = Served::start(cfg).await;
    let target = Target::Http {
        url: format!("{}/mcp", server.base),
        headers: &[],
    };
    for mode in MODES {
        let out = py_client(mode, &target, &ops()).await;
        assert_common(&out, mode, "http");
    }
    // One backend request per mode (the invalid call never left toolwire).
    assert_eq!(mock.count("/ok/orders"), MODES.len());
    // The listed schemas are exactly the model-visible ones of /v1/tools.
    let (_, listed) = server.get_json("/v1/tools").await;
    assert_eq!(listed["tools"][0]["parameters"], order_schema());

    // The same metrics as any route: the route's requests and the tools' calls.
    let text = server
        .client
        .get(format!("{}/metrics", server.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(text.contains(r#"route="/mcp""#), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("toolwire_tool_calls_total") && l.contains(r#"tool="always_fail""#)),
        "{text}"
    );
    server.stop().await;
}

#[tokio::test]
async fn stdio_serves_every_mode_of_the_python_client() {
    let mock = MockBackend::start().await;
    let tools = tools(&mock);
    let target = Target::Stdio {
        tools_dir: tools.path(),
        extra: &[],
    };
    for mode in MODES {
        let out = py_client(mode, &target, &ops()).await;
        assert_common(&out, mode, "stdio");
    }
    assert_eq!(mock.count("/ok/orders"), MODES.len());
}

#[tokio::test]
async fn stdio_state_flag_fills_injected_parameters_when_meta_has_none() {
    let mock = MockBackend::start().await;
    let tools = tools(&mock);
    let state = json!({"user_id": USER}).to_string();
    let target = Target::Stdio {
        tools_dir: tools.path(),
        extra: &["--state", &state],
    };
    let ops = json!([{"op": "call", "name": "lookup_order", "args": {"order": "o-1"}}]);
    let out = py_client("auto", &target, &ops).await;
    let call = &out["results"][0];
    assert_eq!(call["structuredContent"]["body"]["user_id"], USER, "{out}");
}

#[tokio::test]
async fn missing_state_is_a_failed_result_not_a_protocol_error() {
    let mock = MockBackend::start().await;
    let tools = tools(&mock);
    let server = Served::start_dir(tools.path()).await;
    let target = Target::Http {
        url: format!("{}/mcp", server.base),
        headers: &[],
    };
    let ops = json!([
        {"op": "call", "name": "lookup_order", "args": {"order": "o-1"}},
        {"op": "call", "name": "lookup_order", "args": {"order": "o-1"}, "meta": {"toolwire/state": "nope"}},
    ]);
    let out = py_client("auto", &target, &ops).await;
    let call = &out["results"][0];
    assert_eq!(call["isError"], true, "{out}");
    assert_eq!(call["_meta"]["toolwire/error"]["kind"], "missing_state", "{out}");
    assert_eq!(out["results"][1]["error"]["code"], -32602, "{out}");
    assert_eq!(mock.count("/ok/orders"), 0);
    server.stop().await;
}

#[tokio::test]
async fn a_repeated_call_id_is_answered_from_the_replay_store_per_principal() {
    let mock = MockBackend::start().await;
    let tools = tools(&mock);
    let mut cfg = config_for(tools.path());
    let other = "another-mcp-token-9876543210";
    cfg.auth.tokens = vec![TOKEN.to_owned(), other.to_owned()];
    let server = Served::start(cfg).await;
    let meta = json!({"toolwire/state": {"user_id": USER}, "toolwire/call_id": "call-1"});
    let ops = json!([
        {"op": "call", "name": "lookup_order", "args": {"order": "o-9"}, "meta": meta},
        {"op": "call", "name": "lookup_order", "args": {"order": "o-9"}, "meta": meta},
    ]);
    let auth = [format!("Authorization: Bearer {TOKEN}")];
    let target = Target::Http {
        url: format!("{}/mcp", server.base),
        headers: &auth,
    };
    let out = py_client("legacy", &target, &ops).await;
    assert_eq!(mock.count("/ok/orders"), 1, "{out}");
    assert!(out["results"][0]["_meta"].get("toolwire/replayed").is_none(), "{out}");
    assert_eq!(out["results"][1]["_meta"]["toolwire/replayed"], true, "{out}");
    assert_eq!(
        out["results"][0]["structuredContent"],
        out["results"][1]["structuredContent"]
    );
    // Another token is another principal: the same call id runs afresh.
    let auth = [format!("Authorization: Bearer {other}")];
    let target = Target::Http {
        url: format!("{}/mcp", server.base),
        headers: &auth,
    };
    let out = py_client("2026-07-28", &target, &ops).await;
    assert_eq!(mock.count("/ok/orders"), 2, "{out}");
    server.stop().await;
}

#[tokio::test]
async fn a_reload_shows_in_the_next_listing() {
    let mock = MockBackend::start().await;
    let tools = tools(&mock);
    let server = Served::start_dir(tools.path()).await;
    let target = Target::Http {
        url: format!("{}/mcp", server.base),
        headers: &[],
    };
    let list = json!([{"op": "list"}]);
    let before = py_client("2026-07-28", &target, &list).await;
    assert_eq!(before["results"][0]["tools"].as_array().unwrap().len(), 3, "{before}");
    std::fs::write(
        tools.path().join("more.json"),
        json!({"tools": [http_tool("create_invoice", &mock.url("/ok/invoices"))]}).to_string(),
    )
    .unwrap();
    toolwire::reload::reload_now(&server.state.reloader).await;
    let after = py_client("2026-07-28", &target, &list).await;
    let names: Vec<&str> = after["results"][0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"create_invoice"), "{after}");
    server.stop().await;
}

// ---- Raw HTTP: what a well-behaved client never sends.

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
const LIST_LEGACY: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;

/// `POST /mcp` with the MCP `Accept` header, a JSON body and extra headers.
async fn post_mcp(server: &Served, headers: &[(&str, &str)], body: impl Into<reqwest::Body>) -> (Answer, String) {
    let mut req = server
        .client
        .post(format!("{}/mcp", server.base))
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().await.unwrap();
    (
        Answer {
            status,
            headers,
            body: serde_json::from_str(&text).unwrap_or(Value::Null),
            elapsed: Duration::ZERO,
        },
        text,
    )
}

#[tokio::test]
async fn tokens_are_required_when_configured() {
    let mock = MockBackend::start().await;
    let tools = tools(&mock);
    let mut cfg = config_for(tools.path());
    cfg.auth.tokens = vec![TOKEN.to_owned()];
    let server = Served::start(cfg).await;
    for auth in [None, Some("Bearer wrong-token-wrong-token")] {
        let headers: Vec<(&str, &str)> = auth.map(|a| ("authorization", a)).into_iter().collect();
        let (a, text) = post_mcp(&server, &headers, INIT).await;
        assert_eq!(a.status, 401, "{text}");
        assert_eq!(a.body["error"]["code"], "unauthorized");
    }
    let bearer = format!("Bearer {TOKEN}");
    let (a, text) = post_mcp(&server, &[("authorization", &bearer)], INIT).await;
    assert_eq!(a.status, 200, "{text}");
    assert_eq!(a.body["result"]["serverInfo"]["name"], "toolwire", "{text}");
    assert!(a.headers.get("mcp-session-id").is_none(), "stateless: no session");

    // The Python client without a token cannot connect; with it, it can.
    let url = format!("{}/mcp", server.base);
    let none = Target::Http {
        url: url.clone(),
        headers: &[],
    };
    let out = py_client("auto", &none, &json!([{"op": "list"}])).await;
    assert!(
        out.get("connect_error").is_some() || out["results"][0].get("error").is_some(),
        "{out}"
    );
    let auth = [format!("Authorization: Bearer {TOKEN}")];
    let with = Target::Http { url, headers: &auth };
    let out = py_client("auto", &with, &json!([{"op": "list"}])).await;
    assert_eq!(out["results"][0]["tools"].as_array().unwrap().len(), 3, "{out}");
    server.stop().await;
}

#[tokio::test]
async fn foreign_host_and_origin_are_refused_unless_configured() {
    let mock = MockBackend::start().await;
    let tools = tools(&mock);
    let server = Served::start_dir(tools.path()).await;
    for headers in [
        vec![("host", "evil.example")],
        vec![("origin", "http://evil.example")],
        vec![("origin", "http://localhost:3000")],
    ] {
        let (a, text) = post_mcp(&server, &headers, INIT).await;
        assert_eq!(a.status, 403, "{headers:?}: {text}");
        assert_eq!(a.body["error"]["code"], -32600, "{text}");
        assert!(a.body["error"]["message"].as_str().unwrap().len() > 5, "{text}");
    }
    // The loopback Host with its port is the default's.
    let host = format!("127.0.0.1:{}", server.addr.port());
    let (a, text) = post_mcp(&server, &[("host", &host)], INIT).await;
    assert_eq!(a.status, 200, "{text}");
    server.stop().await;

    let mut cfg = config_for(tools.path());
    cfg.mcp_server.allowed_hosts = vec!["tools.internal".to_owned()];
    cfg.mcp_server.allowed_origins = vec!["https://app.example:*".to_owned()];
    let server = Served::start(cfg).await;
    let (a, text) = post_mcp(
        &server,
        &[("host", "tools.internal:8080"), ("origin", "https://app.example:8443")],
        INIT,
    )
    .await;
    assert_eq!(a.status, 200, "{text}");
    let (a, text) = post_mcp(
        &server,
        &[("host", "tools.internal"), ("origin", "https://evil.example")],
        INIT,
    )
    .await;
    assert_eq!(a.status, 403, "{text}");
    let (a, _) = post_mcp(&server, &[], INIT).await;
    assert_eq!(a.status, 403, "127.0.0.1 is no longer listed");
    server.stop().await;

    let mut cfg = config_for(tools.path());
    cfg.mcp_server.allowed_hosts = vec!["*".to_owned()];
    let server = Served::start(cfg).await;
    let (a, text) = post_mcp(&server, &[("host", "anything.example")], INIT).await;
    assert_eq!(a.status, 200, "{text}");
    server.stop().await;
}

#[tokio::test]
async fn malformed_messages_and_oversized_bodies_get_clear_errors() {
    let mock = MockBackend::start().await;
    let tools = tools(&mock);
    let mut cfg = config_for(tools.path());
    cfg.limits.body_bytes = 64 * 1024;
    let server = Served::start(cfg).await;
    for (body, code, needle) in [
        ("{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": ", -32700, "line 1"),
        ("", -32700, "empty"),
        (
            "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}]",
            -32600,
            "batches",
        ),
        ("{\"id\":1,\"method\":\"tools/list\"}", -32600, "jsonrpc"),
        ("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":5}", -32600, "method"),
        ("\"just a string\"", -32600, "object"),
        // Nesting far past serde_json's recursion limit: refused while parsing, bounded.
        (&*"[".repeat(20_000), -32700, "recursion"),
    ] {
        let (a, text) = post_mcp(&server, &[], body.to_owned()).await;
        assert_eq!(a.status, 400, "{body}: {text}");
        assert_eq!(a.body["jsonrpc"], "2.0", "{text}");
        assert_eq!(a.body["id"], Value::Null, "{text}");
        assert_eq!(a.body["error"]["code"], code, "{body}: {text}");
        assert!(a.body["error"]["message"].as_str().unwrap().contains(needle), "{text}");
    }
    // A body over `limits.body_bytes`: 413 before anything is parsed, declared or chunked.
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"lookup_order","arguments":{{"order":"{}"}}}}}}"#,
        "9".repeat(100 * 1024)
    );
    let (a, text) = post_mcp(&server, &[], big.clone()).await;
    assert_eq!(a.status, 413, "{text}");
    assert_eq!(a.body["error"]["code"], "payload_too_large", "{text}");
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = big.into_bytes().chunks(8192).map(|c| Ok(c.to_vec())).collect();
    let (a, text) = post_mcp(
        &server,
        &[],
        reqwest::Body::wrap_stream(futures_util::stream::iter(chunks)),
    )
    .await;
    assert_eq!(a.status, 413, "{text}");
    // A legacy request without a prior handshake still works (stateless), and the server is
    // unharmed by all of the above.
    let (a, text) = post_mcp(&server, &[("mcp-protocol-version", "2025-06-18")], LIST_LEGACY).await;
    assert_eq!(a.status, 200, "{text}");
    assert_eq!(a.body["result"]["tools"].as_array().unwrap().len(), 3, "{text}");
    // Stateless: GET (no stream) and DELETE (no session) are 405 in the API's shape.
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let resp = server
            .client
            .request(method.clone(), format!("{}/mcp", server.base))
            .header("accept", "text/event-stream")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 405, "{method}");
        assert_eq!(resp.headers()["allow"], "POST");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["code"], "method_not_allowed");
    }
    assert_eq!(mock.count("/ok/orders"), 0);
    server.stop().await;
}

#[tokio::test]
async fn load_is_shed_and_the_route_can_be_turned_off() {
    let mock = MockBackend::start().await;
    let tools = tools(&mock);
    let mut cfg = config_for(tools.path());
    cfg.limits.concurrent_requests = 0;
    let server = Served::start(cfg).await;
    let (a, text) = post_mcp(&server, &[], INIT).await;
    assert_eq!(a.status, 503, "{text}");
    assert_eq!(a.body["error"]["code"], "overloaded");
    assert!(a.headers.contains_key("retry-after"));
    server.stop().await;

    let mut cfg = config_for(tools.path());
    cfg.mcp_server.enabled = false;
    let server = Served::start(cfg).await;
    let (a, text) = post_mcp(&server, &[], INIT).await;
    assert_eq!(a.status, 404, "{text}");
    assert_eq!(a.body["error"]["code"], "not_found");
    server.stop().await;
}

#[tokio::test]
async fn stdio_stdout_carries_only_protocol_messages_and_drops_oversized_ones() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mock = MockBackend::start().await;
    let tools = tools(&mock);
    let conf_dir = tempfile::tempdir().unwrap();
    let config = conf_dir.path().join("toolwire.toml");
    std::fs::write(&config, "[limits]\nbody_bytes = 4096\n").unwrap();
    let mut child = tokio::process::Command::new(toolwire_bin())
        .args(["mcp", "--log-format", "json", "--config"])
        .arg(&config)
        .arg("--tools-dir")
        .arg(tools.path())
        // Debug logs from every crate: none of them may reach stdout.
        .env("RUST_LOG", "debug")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let oversized = json!({"jsonrpc": "2.0", "id": 99, "method": "tools/list", "params": {"pad": "x".repeat(8192)}});
    let lines = [
        INIT.to_owned(),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_owned(),
        oversized.to_string(),
        LIST_LEGACY.to_owned(),
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"always_fail","arguments":{}}}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"nope"}}"#.to_owned(),
        // The same message as the oversized one, under the limit: answered.
        json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {"pad": "x".repeat(1024)}}).to_string(),
    ];
    for line in &lines {
        stdin.write_all(line.as_bytes()).await.unwrap();
        stdin.write_all(b"\n").await.unwrap();
    }
    let mut stdout = child.stdout.take().unwrap();
    let mut seen = Vec::new();
    let mut buf = String::new();
    // Answers come in any order; wait for ids 1–5, then close stdin.
    let read = async {
        let mut chunk = [0u8; 8192];
        while !(1..=5).all(|id| seen.contains(&id)) {
            let n = stdout.read(&mut chunk).await.unwrap();
            assert!(n > 0, "stdout closed early: {buf}");
            buf.push_str(&String::from_utf8_lossy(&chunk[..n]));
            seen = buf
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .filter_map(|v| v["id"].as_i64())
                .collect();
        }
    };
    tokio::time::timeout(Duration::from_secs(60), read)
        .await
        .expect("answers to ids 1-5");
    drop(stdin);
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("exits when stdin closes")
        .unwrap();
    assert!(status.success(), "{status}");
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).await.unwrap();
    buf.push_str(&rest);
    let answers: Vec<Value> = buf
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON-RPC line ({e}): {l}")))
        .collect();
    for a in &answers {
        assert_eq!(a["jsonrpc"], "2.0", "{a}");
    }
    let by_id = |id: i64| {
        answers
            .iter()
            .find(|a| a["id"] == id)
            .unwrap_or_else(|| panic!("no answer {id}: {buf}"))
    };
    assert!(
        answers.iter().all(|a| a["id"] != 99),
        "the oversized message was dropped: {buf}"
    );
    assert_eq!(by_id(2)["result"]["tools"].as_array().unwrap().len(), 3);
    assert_eq!(by_id(3)["result"]["isError"], true);
    assert_eq!(by_id(4)["error"]["code"], -32602);
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).await.unwrap();
    assert!(stderr.contains("Serving MCP over stdio."), "{stderr}");
}

#[tokio::test]
async fn a_cancelled_call_over_stdio_kills_its_process() {
    use crate::common::proc_watch::{assert_all_gone, unique_marker, wait_for_marker};
    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
    let marker = unique_marker("mcp-cancel");
    // Far longer than the test waits: only the cancellation can end it in time.
    let sleeper = merge(
        exec_tool("sleep_long", &["sleep", "60000", &marker]),
        json!({"timeout": "90s", "deadline": "90s"}),
    );
    let tools = ToolsDir::new(&[sleeper]);
    let mut child = tokio::process::Command::new(toolwire_bin())
        .args(["mcp", "--log-format", "json", "--tools-dir"])
        .arg(tools.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut send = async |line: &str| {
        stdin.write_all(line.as_bytes()).await.unwrap();
        stdin.write_all(b"\n").await.unwrap();
    };
    send(INIT).await;
    send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).await;
    send(r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"sleep_long","arguments":{}}}"#).await;
    let pids = wait_for_marker(&marker, Duration::from_secs(30)).await;
    send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"test"}}"#).await;
    assert_all_gone(&pids, Duration::from_secs(20)).await;
    // The server goes on serving.
    send(LIST_LEGACY).await;
    let listed = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let line = out.next_line().await.unwrap().expect("stdout open");
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["id"] == 2 {
                return v;
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(listed["result"]["tools"][0]["name"], "sleep_long");
}

#[tokio::test]
async fn files_come_back_as_image_audio_and_resource_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("report.py");
    std::fs::write(
        &script,
        r#"import base64, json
b = lambda raw: base64.b64encode(raw).decode()
print(json.dumps({"content": {"rows": 2}, "files": [
    {"filename": "chart.png", "mime_type": "image/png", "data": b(b"\x89PNG\r\n\x1a\n")},
    {"filename": "hello.wav", "mime_type": "audio/wav", "data": b(b"RIFF")},
    {"filename": "report.pdf", "mime_type": "application/pdf", "data": b(b"%PDF-1.4")},
    {"filename": "notes.txt", "mime_type": "text/plain", "data": b(b"two rows")}]}))
"#,
    )
    .unwrap();
    let tool = json!({
        "name": "make_report", "description": "Makes a report with a chart, a sound and a PDF.",
        "parameters": {"type": "object"}, "timeout": "20s",
        "exec": {"command": ["python3", script.to_str().unwrap()], "output": "json"},
    });
    let tools = ToolsDir::new(&[tool]);
    let server = Served::start_dir(tools.path()).await;
    let target = Target::Http {
        url: format!("{}/mcp", server.base),
        headers: &[],
    };
    let ops = json!([{"op": "call", "name": "make_report", "args": {}}]);
    for mode in ["legacy", "2026-07-28"] {
        let out = py_client(mode, &target, &ops).await;
        let r = &out["results"][0];
        assert_eq!(r["isError"], false, "{mode}: {out}");
        assert_eq!(r["structuredContent"], json!({"rows": 2}), "{mode}: {out}");
        let c = &r["content"];
        assert_eq!(
            c[1],
            json!({"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}),
            "{out}"
        );
        assert_eq!(
            c[2],
            json!({"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"}),
            "{out}"
        );
        assert_eq!(c[3]["type"], "resource", "{out}");
        assert_eq!(
            c[3]["resource"],
            json!({"uri": "toolwire://files/report.pdf", "mimeType": "application/pdf", "blob": "JVBERi0xLjQ="}),
            "{out}"
        );
        assert_eq!(c[4]["resource"]["text"], "two rows", "{out}");
    }
    server.stop().await;
}

#[tokio::test]
async fn a_trickled_body_times_out_before_taking_a_slot() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mock = MockBackend::start().await;
    let tools = tools(&mock);
    let mut cfg = config_for(tools.path());
    cfg.limits.body_read_timeout = toolwire::config::HumanDuration(Duration::from_millis(300));
    let server = Served::start(cfg).await;
    let mut conn = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{{",
        INIT.len()
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), conn.read_to_end(&mut raw))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("body_timeout"), "{text}");
    server.stop().await;
}

#[tokio::test]
async fn stdio_calls_past_the_concurrency_limit_are_rejected_not_queued() {
    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
    let marker = crate::common::proc_watch::unique_marker("mcp-slots");
    let sleeper = merge(
        exec_tool("sleep_long", &["sleep", "60000", &marker]),
        json!({"timeout": "90s", "deadline": "90s"}),
    );
    let tools = ToolsDir::new(&[sleeper]);
    let conf_dir = tempfile::tempdir().unwrap();
    let config = conf_dir.path().join("toolwire.toml");
    std::fs::write(&config, "[limits]\nconcurrent_requests = 1\n").unwrap();
    let mut child = tokio::process::Command::new(toolwire_bin())
        .args(["mcp", "--log-format", "json", "--config"])
        .arg(&config)
        .arg("--tools-dir")
        .arg(tools.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    for line in [
        INIT,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"sleep_long","arguments":{}}}"#,
    ] {
        stdin.write_all(format!("{line}\n").as_bytes()).await.unwrap();
    }
    // The first call holds the only slot once its program runs.
    let pids = crate::common::proc_watch::wait_for_marker(&marker, Duration::from_secs(30)).await;
    stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":\"tools/call\",\"params\":{\"name\":\"sleep_long\",\"arguments\":{}}}\n")
        .await
        .unwrap();
    let second = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let line = out.next_line().await.unwrap().expect("stdout open");
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["id"] == 11 {
                return v;
            }
        }
    })
    .await
    .expect("the second call is answered at once, not queued");
    assert_eq!(second["result"]["isError"], true, "{second}");
    assert_eq!(
        second["result"]["_meta"]["toolwire/error"]["kind"], "rejected",
        "{second}"
    );
    assert_eq!(
        crate::common::proc_watch::pids_with_arg(&marker),
        pids,
        "one program only"
    );
    // The host going away (stdin closed) ends the call still running: its program is killed
    // and toolwire exits.
    drop(stdin);
    crate::common::proc_watch::assert_all_gone(&pids, Duration::from_secs(20)).await;
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("exits when stdin closes")
        .unwrap();
    assert!(status.success(), "{status}");
}

#[tokio::test]
async fn sigterm_ends_toolwire_mcp_and_its_running_calls() {
    use tokio::io::AsyncWriteExt as _;
    let marker = crate::common::proc_watch::unique_marker("mcp-term");
    let sleeper = merge(
        exec_tool("sleep_long", &["sleep", "60000", &marker]),
        json!({"timeout": "90s", "deadline": "90s"}),
    );
    let tools = ToolsDir::new(&[sleeper]);
    let mut child = tokio::process::Command::new(toolwire_bin())
        .args(["mcp", "--log-format", "json", "--tools-dir"])
        .arg(tools.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // stdin stays open: only the signal can end it.
    let mut stdin = child.stdin.take().unwrap();
    for line in [
        INIT,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"sleep_long","arguments":{}}}"#,
    ] {
        stdin.write_all(format!("{line}\n").as_bytes()).await.unwrap();
    }
    let pids = crate::common::proc_watch::wait_for_marker(&marker, Duration::from_secs(30)).await;
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id().unwrap()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    crate::common::proc_watch::assert_all_gone(&pids, Duration::from_secs(20)).await;
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("exits on SIGTERM")
        .unwrap();
    assert!(status.success(), "{status}");
    drop(stdin);
}
