//! Streaming `POST /v1/execute` over a real connection: SSE and NDJSON event order, the final
//! event equal to the non-streaming body, `attempt_failed` on retries, and cancellation on
//! disconnect leaving no process behind.

use std::time::{Duration, Instant};

use crate::common::mock_backend::MockBackend;
use crate::common::server::Served;
use futures_util::StreamExt as _;
use serde_json::{Value, json};

use crate::common::faultproc::faultproc;

fn tools(dir: &std::path::Path, mock: &MockBackend, pids: &std::path::Path) {
    std::fs::write(
        dir.join("t.json"),
        json!({"tools": [
            {"name": "sleep_ms", "description": "Sleeps for the given milliseconds, then reports. For tests.",
             "parameters": {"ms": {"type": "integer", "description": "Milliseconds."}},
             "exec": {"command": [faultproc(), "sleep", "{ms}"], "output": "json"}},
            {"name": "flaky_http", "description": "Fails once with 503, then succeeds. For tests.",
             "retry": {"max_attempts": 3, "backoff": "10ms", "max_backoff": "20ms"},
             "parameters": {"key": {"type": "string", "description": "Failure counter key."}},
             "http": {"method": "GET", "url": mock.url("/fail/1/503"), "query": {"key": "{key}"}}},
            {"name": "hold_children", "description": "Spawns a grandchild and sleeps. For tests.",
             "timeout": "20s",
             "exec": {"command": [faultproc(), "spawn-grandchild", "20000"], "env": {"FAULTPROC_PIDS": pids.to_str().unwrap()}}}
        ]})
        .to_string(),
    )
    .unwrap();
}

fn completion(calls: &[(&str, &str, Value)]) -> Value {
    let tool_calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, args)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}}))
        .collect();
    json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null, "tool_calls": tool_calls}}]})
}

/// Splits an SSE body into (event name, data JSON).
fn parse_sse(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter(|b| !b.trim().is_empty())
        .map(|block| {
            let mut name = String::new();
            let mut data = String::new();
            for line in block.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = n.to_owned();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data.push_str(d);
                }
            }
            (name, serde_json::from_str(&data).unwrap())
        })
        .collect()
}

/// The response without timing fields, which differ between two runs, and without the
/// `replayed` mark (the second, identical request is answered from the replay store).
fn stable(mut v: Value) -> Value {
    for r in v["results"].as_array_mut().unwrap() {
        r.as_object_mut().unwrap().remove("duration_ms");
        r.as_object_mut().unwrap().remove("replayed");
    }
    v
}

#[tokio::test]
async fn sse_events_arrive_in_completion_order_and_end_with_the_full_body() {
    let mock = MockBackend::start().await;
    let dir = tempfile::tempdir().unwrap();
    tools(dir.path(), &mock, &dir.path().join("pids"));
    let server = Served::start_dir(dir.path()).await;
    let body = json!({"provider": "openai", "completion": completion(&[
        ("c_slow", "sleep_ms", json!({"ms": 600})),
        ("c_fast", "sleep_ms", json!({"ms": 10})),
        ("c_mid", "sleep_ms", json!({"ms": 300})),
    ])});
    let resp = server
        .client
        .post(format!("{}/v1/execute", server.base))
        .header("accept", "text/event-stream")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let events = parse_sse(&resp.text().await.unwrap());
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.iter().filter(|n| **n == "call_started").count(), 3);
    assert_eq!(names.last(), Some(&"response"));
    let finished: Vec<&str> = events
        .iter()
        .filter(|(n, _)| n == "call_finished")
        .map(|(_, v)| v["result"]["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        finished,
        ["c_fast", "c_mid", "c_slow"],
        "results arrive in completion order"
    );
    for (n, v) in &events {
        if n == "call_finished" {
            let idx = v["index"].as_u64().unwrap() as usize;
            assert_eq!(
                v["result"]["id"],
                ["c_slow", "c_fast", "c_mid"][idx],
                "index ties an event to its call"
            );
        }
    }
    let streamed = events.last().unwrap().1.clone();
    let (status, plain) = server.post_json("/v1/execute", &body).await;
    assert_eq!(status, 200);
    assert_eq!(
        stable(streamed),
        stable(plain),
        "the final event is exactly the non-streaming body"
    );
}

#[tokio::test]
async fn ndjson_reports_failed_attempts_with_the_delay() {
    let mock = MockBackend::start().await;
    let dir = tempfile::tempdir().unwrap();
    tools(dir.path(), &mock, &dir.path().join("pids"));
    let server = Served::start_dir(dir.path()).await;
    let body = json!({"completion": completion(&[("c1", "flaky_http", json!({"key": "ndjson-1"}))])});
    let resp = server
        .client
        .post(format!("{}/v1/execute", server.base))
        .header("accept", "application/x-ndjson")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["content-type"], "application/x-ndjson");
    let text = resp.text().await.unwrap();
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let kinds: Vec<&str> = lines.iter().map(|l| l["event"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["call_started", "attempt_failed", "call_finished", "response"],
        "{text}"
    );
    assert_eq!(lines[1]["attempt"], 1);
    assert_eq!(lines[1]["error"]["kind"], "backend_status");
    assert!(lines[1]["retry_in_ms"].as_u64().unwrap() <= 20);
    assert_eq!(lines[2]["result"]["attempts"], 2);
    assert_eq!(lines[3]["response"]["results"][0]["ok"], true);
}

#[tokio::test]
async fn a_client_that_disconnects_cancels_its_calls_and_leaves_no_process() {
    let mock = MockBackend::start().await;
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    tools(dir.path(), &mock, &pids);
    let server = Served::start_dir(dir.path()).await;
    let body = json!({"completion": completion(&[("c1", "hold_children", json!({}))])});
    let resp = server
        .client
        .post(format!("{}/v1/execute", server.base))
        .header("accept", "text/event-stream")
        .json(&body)
        .send()
        .await
        .unwrap();
    let mut stream = resp.bytes_stream();
    let first = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&first).contains("call_started"));
    // Wait until both processes exist, then go away.
    let start = Instant::now();
    let recorded: Value = loop {
        if let Ok(text) = std::fs::read_to_string(&pids)
            && let Ok(v) = serde_json::from_str(&text)
        {
            break v;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "the tool never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    drop(stream);
    let parent = recorded["parent"].as_u64().unwrap() as u32;
    let grandchild = recorded["grandchild"].as_u64().unwrap() as u32;
    let start = Instant::now();
    while crate::common::procs::pid_alive(parent) || crate::common::procs::pid_alive(grandchild) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "processes survived the disconnect"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(crate::common::procs::zombie_children_of(std::process::id()).is_empty());
}
