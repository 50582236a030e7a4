//! Safe by default, through the real server (docs/security.md): replay and Idempotency-Key are
//! scoped per user and per client; injected values never come from the model; undeclared
//! arguments never reach a backend; integers stay exact; auth cannot fail open; slow bodies and
//! streams stay inside the limits; the Idempotency-Key store is bounded in bytes.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use crate::common::binary::TOOLWIRE;
use crate::common::mock_backend::MockBackend;
use crate::common::server::config_for;
use crate::common::server::{Served, openai};
use serde_json::{Value, json};

const TOKEN_A: &str = "token-alpha-0123456789";
const TOKEN_B: &str = "token-bravo-0123456789";

fn write_tools(dir: &std::path::Path, tools: Value) {
    std::fs::write(dir.join("t.json"), json!({ "tools": tools }).to_string()).unwrap();
}

/// `POST /v1/execute` with an optional bearer token and Idempotency-Key.
async fn post(served: &Served, body: &Value, token: Option<&str>, key: Option<&str>) -> (u16, Value) {
    let mut req = served.client.post(format!("{}/v1/execute", served.base)).json(body);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(k) = key {
        req = req.header("idempotency-key", k);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

fn order_tool(mock: &MockBackend) -> Value {
    json!({"name": "create_order", "description": "Creates an order for the current user.",
           "parameters": {"type": "object", "properties": {"item": {"type": "string", "description": "Item."}}},
           "inject": {"user_id": "state.user_id"},
           "http": {"method": "POST", "url": mock.url("/ok/orders")}})
}

#[tokio::test]
async fn replay_never_hands_one_users_result_to_another() {
    let mock = MockBackend::start().await;
    let dir = tempfile::tempdir().unwrap();
    write_tools(dir.path(), json!([order_tool(&mock)]));
    let served = Served::start(config_for(dir.path())).await;
    let completion = openai(&[("call_0", "create_order", json!({"item": "book"}))]);
    let as_user = |user: &str| json!({"completion": completion, "state": {"user_id": user}});

    let (_, alice) = post(&served, &as_user("alice"), None, None).await;
    let (_, bob) = post(&served, &as_user("bob"), None, None).await;
    assert_eq!(mock.count("/ok/orders"), 2, "bob's call ran: it is not alice's");
    assert!(bob["results"][0].get("replayed").is_none(), "{bob}");
    assert_eq!(bob["results"][0]["output"]["body"]["user_id"], "bob");
    assert_eq!(alice["results"][0]["output"]["body"]["user_id"], "alice");
    // The same user re-sending is still a replay.
    let (_, again) = post(&served, &as_user("alice"), None, None).await;
    assert_eq!(again["results"][0]["replayed"], true);
    assert_eq!(again["results"][0]["output"]["body"]["user_id"], "alice");
    assert_eq!(mock.count("/ok/orders"), 2);
}

#[tokio::test]
async fn replay_and_idempotency_keys_are_scoped_to_the_client_token() {
    let mock = MockBackend::start().await;
    let dir = tempfile::tempdir().unwrap();
    write_tools(dir.path(), json!([order_tool(&mock)]));
    let mut cfg = config_for(dir.path());
    cfg.auth.tokens = vec![TOKEN_A.to_owned(), TOKEN_B.to_owned()];
    let served = Served::start(cfg).await;
    let body = json!({"completion": openai(&[("call_0", "create_order", json!({"item": "book"}))]),
                      "state": {"user_id": "u1"}});

    // Call-level replay: the same call from another client runs; from the same client it replays.
    let (sa, a) = post(&served, &body, Some(TOKEN_A), None).await;
    let (sb, b) = post(&served, &body, Some(TOKEN_B), None).await;
    assert_eq!((sa, sb), (200, 200));
    assert!(b["results"][0].get("replayed").is_none(), "{b}");
    assert_eq!(mock.count("/ok/orders"), 2);
    let (_, a2) = post(&served, &body, Some(TOKEN_A), None).await;
    assert_eq!(a2["results"][0]["replayed"], true);
    assert_eq!(a2["results"][0]["output"], a["results"][0]["output"]);

    // Idempotency-Key: B can neither squat on A's key (another body is not 422 for B) nor
    // receive A's stored answer with the same body.
    let keyed = |item: &str| {
        json!({"completion": openai(&[(&format!("call_{item}"), "create_order", json!({"item": item}))]),
               "state": {"user_id": "u1"}})
    };
    let (s, first) = post(&served, &keyed("pen"), Some(TOKEN_A), Some("order-42")).await;
    assert_eq!(s, 200);
    assert!(first["results"][0].get("replayed").is_none());
    let (s, other) = post(&served, &keyed("cup"), Some(TOKEN_B), Some("order-42")).await;
    assert_eq!(s, 200, "B's key is B's own: {other}");
    let (s, probe) = post(&served, &keyed("pen"), Some(TOKEN_B), Some("order-42")).await;
    assert_eq!(s, 422, "B's key order-42 holds B's own body: {probe}");
    let (s, replay) = post(&served, &keyed("pen"), Some(TOKEN_A), Some("order-42")).await;
    assert_eq!(s, 200);
    assert_eq!(replay["results"][0]["replayed"], true);
    let (s, reused) = post(&served, &keyed("cup"), Some(TOKEN_A), Some("order-42")).await;
    assert_eq!(s, 422, "{reused}");
    assert_eq!(reused["error"]["code"], "idempotency_key_reused");
}

#[tokio::test]
async fn injected_values_come_from_state_only() {
    let mock = MockBackend::start().await;
    let dir = tempfile::tempdir().unwrap();
    write_tools(
        dir.path(),
        json!([
            order_tool(&mock),
            {"name": "team_lookup", "description": "Looks up the team; the team is optional.",
             "parameters": {"type": "object", "properties": {"q": {"type": "string", "description": "Query."}}},
             "inject": {"team": "state.team?"},
             "http": {"method": "POST", "url": mock.url("/ok/team")}}
        ]),
    );
    let served = Served::start(config_for(dir.path())).await;
    // The model tries to set the hidden `user_id`; the state has none (absent, misspelled, null).
    for state in [json!(null), json!({"userid": "alice"}), json!({"user_id": null})] {
        let completion = openai(&[("c1", "create_order", json!({"item": "x", "user_id": "mallory"}))]);
        let (s, r) = post(&served, &json!({"completion": completion, "state": state}), None, None).await;
        assert_eq!(s, 200);
        let res = &r["results"][0];
        assert_eq!(res["error"]["kind"], "missing_state", "{res}");
        assert_eq!(res["error"]["retryable"], false);
        assert!(res["error"]["message"].as_str().unwrap().contains("state.user_id"));
    }
    assert_eq!(mock.count("/ok/orders"), 0, "nothing ran with the model's value");
    // With state, the state's value wins over the model's.
    let completion = openai(&[("c2", "create_order", json!({"item": "x", "user_id": "mallory"}))]);
    let (_, r) = post(
        &served,
        &json!({"completion": completion, "state": {"user_id": "alice"}}),
        None,
        None,
    )
    .await;
    assert_eq!(
        r["results"][0]["output"]["body"],
        json!({"item": "x", "user_id": "alice"})
    );
    // An optional injected value is left out when the state lacks it — never the model's.
    let completion = openai(&[("c3", "team_lookup", json!({"q": "x", "team": "admins"}))]);
    let (_, r) = post(&served, &json!({"completion": completion}), None, None).await;
    assert_eq!(r["results"][0]["ok"], true, "{r}");
    assert_eq!(r["results"][0]["output"]["body"], json!({"q": "x"}));
}

#[tokio::test]
async fn undeclared_arguments_never_reach_a_backend() {
    let mock = MockBackend::start().await;
    let dir = tempfile::tempdir().unwrap();
    write_tools(
        dir.path(),
        json!([
            {"name": "update_profile", "description": "Updates the display name.",
             "parameters": {"type": "object", "properties": {"name": {"type": "string", "description": "Name."},
                                                             "bio": {"type": "string", "description": "Bio."}}},
             "http": {"method": "POST", "url": mock.url("/ok/profile")}},
            {"name": "free_form", "description": "Takes any object.",
             "parameters": {"type": "object"},
             "http": {"method": "POST", "url": mock.url("/ok/free")}},
            {"name": "open_extras", "description": "Declares one key and allows others.",
             "parameters": {"type": "object", "additionalProperties": true,
                            "properties": {"a": {"type": "string", "description": "A."}}},
             "http": {"method": "POST", "url": mock.url("/ok/open")}}
        ]),
    );
    let served = Served::start(config_for(dir.path())).await;
    let completion = openai(&[
        (
            "c1",
            "update_profile",
            json!({"name": "Al", "admin": true, "role": "owner"}),
        ),
        ("c2", "free_form", json!({"anything": {"deep": null}, "n": null})),
        ("c3", "open_extras", json!({"a": null, "extra": null, "more": 1})),
        ("c4", "update_profile", json!({"name": "Al", "bio": null})),
    ]);
    let (s, r) = post(&served, &json!({"completion": completion}), None, None).await;
    assert_eq!(s, 200);
    let refused = &r["results"][0];
    assert_eq!(refused["error"]["kind"], "invalid_arguments", "{refused}");
    assert_eq!(refused["error"]["retryable"], false);
    let msg = refused["error"]["message"].as_str().unwrap();
    assert!(msg.contains("`admin`") && msg.contains("`role`"), "{msg}");
    assert_eq!(mock.count("/ok/profile"), 1, "only the well-formed call ran");
    // Free-form and explicitly open schemas pass extras exactly as sent, nulls included; a
    // declared optional property whose schema refuses null treats it as absent.
    assert_eq!(
        r["results"][1]["output"]["body"],
        json!({"anything": {"deep": null}, "n": null})
    );
    assert_eq!(r["results"][2]["output"]["body"], json!({"extra": null, "more": 1}));
    assert_eq!(r["results"][3]["output"]["body"], json!({"name": "Al"}));
}

#[tokio::test]
async fn integers_past_two_to_the_53_are_refused() {
    let mock = MockBackend::start().await;
    let dir = tempfile::tempdir().unwrap();
    write_tools(
        dir.path(),
        json!([{"name": "transfer", "description": "Moves an amount in cents.",
                "parameters": {"type": "object", "required": ["cents"],
                               "properties": {"cents": {"type": "integer", "description": "Amount."}}},
                "http": {"method": "POST", "url": mock.url("/ok/transfer")}}]),
    );
    let served = Served::start(config_for(dir.path())).await;
    let completion = json!({"id": "x", "object": "chat.completion", "model": "m", "choices": [{"index": 0,
        "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "transfer", "arguments": "{\"cents\": 9007199254740993}"}},
            {"id": "b", "type": "function", "function": {"name": "transfer", "arguments": "{\"cents\": 1e20}"}},
            {"id": "c", "type": "function", "function": {"name": "transfer", "arguments": "{\"cents\": -9007199254740993}"}},
            {"id": "d", "type": "function", "function": {"name": "transfer", "arguments": "{\"cents\": 9007199254740991}"}}]}}]});
    let (s, r) = post(&served, &json!({"completion": completion}), None, None).await;
    assert_eq!(s, 200);
    for i in 0..3 {
        assert_eq!(
            r["results"][i]["error"]["kind"], "invalid_arguments",
            "{}",
            r["results"][i]
        );
        assert_eq!(r["results"][i]["error"]["details"][0]["path"], "/cents");
    }
    assert_eq!(r["results"][3]["ok"], true);
    assert_eq!(mock.requests().len(), 1);
    assert_eq!(mock.requests()[0].body_value(), json!({"cents": 9007199254740991_u64}));
}

/// Runs `toolwire <args>` with a config file and returns (exit code, stderr).
fn toolwire(config: &str, tools: &std::path::Path, args: &[&str]) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("toolwire.toml");
    std::fs::write(&cfg, config).unwrap();
    let out = Command::new(TOOLWIRE)
        .args(args)
        .arg("--config")
        .arg(&cfg)
        .arg("--tools-dir")
        .arg(tools)
        .env_remove("TOOLWIRE_LISTEN")
        .env("TOOLWIRE_TEST_EMPTY", "")
        .env("TOOLWIRE_TEST_SHORT", "abc123secret")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn auth_never_fails_open() {
    let tools = tempfile::tempdir().unwrap();
    write_tools(
        tools.path(),
        json!([{"name": "noop", "description": "Does nothing at all.", "exec": {"command": ["true"]}}]),
    );
    // A token that resolves to nothing, or to something short, is refused — and not printed.
    let (code, err) = toolwire(
        "[auth]\ntokens = [\"${env:TOOLWIRE_TEST_EMPTY}\"]\n",
        tools.path(),
        &["check"],
    );
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("at least 16 bytes"), "{err}");
    let (code, err) = toolwire(
        "[auth]\ntokens = [\"${env:TOOLWIRE_TEST_SHORT}\"]\n",
        tools.path(),
        &["check"],
    );
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("auth.tokens[0] is 12 bytes"), "{err}");
    assert!(!err.contains("abc123secret"), "the token leaked: {err}");
    // A non-loopback listen address without tokens is refused, from the file and from --listen.
    let (code, err) = toolwire("listen = \"0.0.0.0:0\"\n", tools.path(), &["check"]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("allow_unauthenticated"), "{err}");
    let (code, err) = toolwire("", tools.path(), &["serve", "--listen", "0.0.0.0:0"]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("allow_unauthenticated"), "{err}");
    // ... unless the operator opts in explicitly, or sets a token.
    let (code, err) = toolwire(
        "listen = \"0.0.0.0:0\"\n[auth]\nallow_unauthenticated = true\n",
        tools.path(),
        &["check"],
    );
    assert_eq!(code, 0, "{err}");
    let (code, err) = toolwire(
        &format!("listen = \"0.0.0.0:0\"\n[auth]\ntokens = [\"{TOKEN_A}\"]\n"),
        tools.path(),
        &["check"],
    );
    assert_eq!(code, 0, "{err}");
}

/// Opens a connection and sends a request head promising a body it does not send.
fn trickler(addr: std::net::SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(
        b"POST /v1/execute HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
    )
    .unwrap();
    s
}

#[tokio::test]
async fn slow_bodies_hold_no_work_slot_and_time_out() {
    let mock = MockBackend::start().await;
    let dir = tempfile::tempdir().unwrap();
    write_tools(dir.path(), json!([order_tool(&mock)]));
    let mut cfg = config_for(dir.path());
    cfg.limits.concurrent_requests = 2;
    cfg.limits.body_read_timeout = toolwire::config::HumanDuration(Duration::from_secs(2));
    let served = Served::start(cfg).await;
    let tricklers: Vec<TcpStream> = (0..6).map(|_| trickler(served.addr)).collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Every slot would be taken if a trickling body held one.
    let body =
        json!({"completion": openai(&[("c1", "create_order", json!({"item": "x"}))]), "state": {"user_id": "u"}});
    let (s, r) = post(&served, &body, None, None).await;
    assert_eq!(s, 200, "{r}");
    // The trickling requests end with 408 once the body timeout passes.
    let answers = tokio::task::spawn_blocking(move || {
        tricklers
            .into_iter()
            .map(|mut t| {
                t.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                let mut buf = [0_u8; 64];
                let n = t.read(&mut buf).unwrap_or(0);
                String::from_utf8_lossy(&buf[..n]).into_owned()
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    for a in answers {
        assert!(a.starts_with("HTTP/1.1 408"), "{a}");
    }
}

#[tokio::test]
async fn a_streamed_answer_holds_its_slot_until_the_last_event() {
    let mock = MockBackend::start().await;
    let dir = tempfile::tempdir().unwrap();
    write_tools(
        dir.path(),
        json!([{"name": "slow", "description": "Answers after a while.",
                "parameters": {"type": "object", "properties": {}},
                "http": {"method": "POST", "url": mock.url("/slow?ms=1500")}}]),
    );
    let mut cfg = config_for(dir.path());
    cfg.limits.concurrent_requests = 1;
    let served = Served::start(cfg).await;
    let stream_req = |id: &str| {
        served
            .client
            .post(format!("{}/v1/execute", served.base))
            .header("accept", "text/event-stream")
            .json(&json!({"completion": openai(&[(id, "slow", json!({}))])}))
            .send()
    };
    let first = stream_req("s1").await.unwrap();
    assert_eq!(first.status(), 200);
    // The first stream is still running: the only slot is taken.
    let second = stream_req("s2").await.unwrap();
    assert_eq!(second.status(), 503, "a second stream was accepted past the limit");
    // Once the first stream has sent its last event, the slot is free again.
    let text = first.text().await.unwrap();
    assert!(text.contains("event: response"), "{text}");
    let mut status = 0;
    for _ in 0..50 {
        let third = stream_req("s3").await.unwrap();
        status = third.status().as_u16();
        let _ = third.text().await;
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status, 200);
}

/// The server config for `dir` holding one tool that does nothing.
fn noop_config(dir: &std::path::Path) -> toolwire::config::ServerConfig {
    write_tools(
        dir,
        json!([{"name": "noop", "description": "Does nothing at all.", "exec": {"command": ["true"]}}]),
    );
    config_for(dir)
}

/// A body over the limit is refused from its declared length before it is read; the client,
/// still sending, must still read the 413 (not a reset from the server closing on unread
/// bytes), told that the connection ends (`Connection: close`), and then a clean end of stream.
#[tokio::test]
async fn an_oversized_body_gets_its_413_while_the_client_is_still_sending() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = noop_config(dir.path());
    cfg.limits.body_bytes = 1024;
    let served = Served::start(cfg).await;
    let addr = served.addr;
    let answers = tokio::task::spawn_blocking(move || {
        (0..3)
            .map(|_| {
                let mut s = TcpStream::connect(addr).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
                let body = vec![b' '; 4 * 1024 * 1024];
                s.write_all(
                    format!(
                        "POST /v1/execute HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                        body.len()
                    )
                    .as_bytes(),
                )
                .unwrap();
                let sent = s.write_all(&body);
                let mut buf = Vec::new();
                let read = s.read_to_end(&mut buf);
                (sent.is_ok(), read.is_ok(), String::from_utf8_lossy(&buf).into_owned())
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    for (sent, read, answer) in answers {
        assert!(
            sent && read,
            "the connection was reset (sent {sent}, read {read}): {answer}"
        );
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
        assert!(answer.to_ascii_lowercase().contains("connection: close"), "{answer}");
        assert!(answer.contains("payload_too_large"), "{answer}");
    }
}

#[tokio::test]
async fn open_connections_are_capped() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = noop_config(dir.path());
    cfg.limits.max_connections = 2;
    let served = Served::start(cfg).await;
    let idle: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(served.addr).unwrap()).collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let addr = served.addr;
    let probe = tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let started = std::time::Instant::now();
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf);
        (started.elapsed(), String::from_utf8_lossy(&buf).into_owned())
    });
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(
        !probe.is_finished(),
        "a third connection was served while two were open"
    );
    drop(idle);
    let (_, answer) = probe.await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[tokio::test]
async fn the_idempotency_store_is_bounded_in_bytes() {
    let mock = MockBackend::start().await;
    let dir = tempfile::tempdir().unwrap();
    write_tools(
        dir.path(),
        json!([{"name": "big", "description": "Returns a large text.", "idempotent": true, "replay": false,
                "parameters": {"type": "object", "properties": {}},
                "http": {"method": "GET", "url": mock.url("/huge?bytes=60000&type=text")}}]),
    );
    let mut cfg = config_for(dir.path());
    cfg.replay.max_bytes = 512 * 1024;
    let max = cfg.replay.max_bytes;
    let served = Served::start(cfg).await;
    for i in 0..40 {
        let body = json!({"completion": openai(&[(&format!("c{i}"), "big", json!({}))])});
        let (s, _) = post(&served, &body, None, Some(&format!("key-{i}"))).await;
        assert_eq!(s, 200);
        let (entries, bytes) = served.state.request_keys.usage();
        assert!(bytes <= max, "{entries} answers hold {bytes} bytes > {max}");
    }
    let (entries, bytes) = served.state.request_keys.usage();
    assert!(entries >= 3 && bytes > max / 2, "answers are kept: {entries}, {bytes}");
}
