//! Replay-safe execution through the real server: re-sending a completion runs each call once,
//! concurrent duplicates are joined, `Idempotency-Key` reuse with another body is refused, and
//! idempotent tools may opt out.

use crate::common::mock_backend::MockBackend;
use crate::common::server::Served;
use serde_json::{Value, json};

fn tools(dir: &std::path::Path, mock: &MockBackend) {
    std::fs::write(
        dir.join("t.json"),
        json!({"tools": [
            {"name": "create_order", "description": "Creates an order; a side effect that must not repeat.",
             "parameters": {"item": {"type": "string", "description": "Item."}},
             "http": {"method": "POST", "url": mock.url("/ok/orders")}},
            {"name": "slow_create", "description": "Creates something slowly; must not repeat.",
             "parameters": {"item": {"type": "string", "description": "Item."}},
             "http": {"method": "POST", "url": mock.url("/slow?ms=400")}},
            {"name": "read_stock", "description": "Reads the stock level; read-only, so it opts out of replay.",
             "idempotent": true, "replay": false,
             "parameters": {"item": {"type": "string", "description": "Item."}},
             "http": {"method": "GET", "url": mock.url("/ok/stock/{item}")}}
        ]})
        .to_string(),
    )
    .unwrap();
}

fn completion(calls: &[(&str, &str, Value)]) -> Value {
    let content: Vec<Value> = calls
        .iter()
        .map(|(id, name, input)| json!({"type": "tool_use", "id": id, "name": name, "input": input}))
        .collect();
    json!({"type": "message", "role": "assistant", "content": content, "stop_reason": "tool_use"})
}

#[tokio::test]
async fn resending_a_completion_runs_each_call_once() {
    let mock = MockBackend::start().await;
    let dir = tempfile::tempdir().unwrap();
    tools(dir.path(), &mock);
    let server = Served::start_dir(dir.path()).await;
    let body = json!({"completion": completion(&[
        ("toolu_1", "create_order", json!({"item": "book"})),
        ("toolu_2", "create_order", json!({"item": "pen"})),
    ])});
    let (s1, first) = server.post_json("/v1/execute", &body).await;
    let (s2, second) = server.post_json("/v1/execute", &body).await;
    assert_eq!((s1, s2), (200, 200));
    assert_eq!(mock.count("/ok/orders"), 2, "two calls, each executed once");
    assert!(first["results"][0].get("replayed").is_none());
    for i in 0..2 {
        assert_eq!(second["results"][i]["replayed"], true);
        assert_eq!(second["results"][i]["output"], first["results"][i]["output"]);
    }
    assert_eq!(second["messages"], first["messages"]);
    // A different call id is a new call.
    let other = json!({"completion": completion(&[("toolu_3", "create_order", json!({"item": "book"}))])});
    server.post_json("/v1/execute", &other).await;
    assert_eq!(mock.count("/ok/orders"), 3);
}

#[tokio::test]
async fn a_duplicate_arriving_while_the_first_runs_waits_for_it() {
    let mock = MockBackend::start().await;
    let dir = tempfile::tempdir().unwrap();
    tools(dir.path(), &mock);
    let server = Served::start_dir(dir.path()).await;
    let body = json!({"completion": completion(&[("toolu_s", "slow_create", json!({"item": "x"}))])});
    let (a, b) = tokio::join!(
        server.post_json("/v1/execute", &body),
        server.post_json("/v1/execute", &body)
    );
    assert_eq!((a.0, b.0), (200, 200));
    assert_eq!(
        mock.count("/slow"),
        1,
        "the concurrent duplicate was joined, not executed"
    );
    let replayed = [&a.1, &b.1]
        .iter()
        .filter(|r| r["results"][0]["replayed"] == true)
        .count();
    assert_eq!(replayed, 1);
    assert_eq!(a.1["results"][0]["output"], b.1["results"][0]["output"]);
}

#[tokio::test]
async fn idempotency_key_replays_the_response_and_refuses_another_body() {
    let mock = MockBackend::start().await;
    let dir = tempfile::tempdir().unwrap();
    tools(dir.path(), &mock);
    let server = Served::start_dir(dir.path()).await;
    let post = |body: Value, key: &'static str| {
        let req = server
            .client
            .post(format!("{}/v1/execute", server.base))
            .header("idempotency-key", key)
            .json(&body);
        async move {
            let r = req.send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    let body = json!({"completion": completion(&[("toolu_k", "create_order", json!({"item": "cup"}))])});
    let (s1, r1) = post(body.clone(), "req-123").await;
    let (s2, r2) = post(body.clone(), "req-123").await;
    assert_eq!((s1, s2), (200, 200));
    assert_eq!(r2["results"][0]["replayed"], true);
    assert_eq!(r2["results"][0]["output"], r1["results"][0]["output"]);
    assert_eq!(mock.count("/ok/orders"), 1);
    let changed = json!({"completion": completion(&[("toolu_k", "create_order", json!({"item": "mug"}))])});
    let (s3, r3) = post(changed, "req-123").await;
    assert_eq!(s3, 422);
    assert_eq!(r3["error"]["code"], "idempotency_key_reused");
    assert_eq!(mock.count("/ok/orders"), 1, "nothing ran for the refused request");
}

#[tokio::test]
async fn idempotent_read_only_tools_may_opt_out() {
    let mock = MockBackend::start().await;
    let dir = tempfile::tempdir().unwrap();
    tools(dir.path(), &mock);
    let server = Served::start_dir(dir.path()).await;
    let body = json!({"completion": completion(&[("toolu_r", "read_stock", json!({"item": "cup"}))])});
    server.post_json("/v1/execute", &body).await;
    let (_, second) = server.post_json("/v1/execute", &body).await;
    assert_eq!(mock.count("/ok/stock/cup"), 2);
    assert!(second["results"][0].get("replayed").is_none());
}
