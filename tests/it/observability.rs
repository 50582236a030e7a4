//! Metrics and logs of the real binary: `/metrics` in Prometheus text format with the request,
//! tool-call, attempt, latency, in-flight, rejection, breaker and reload series; JSON logs with
//! one line per request and per tool call — and never an argument value, state or secret.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_toolwire");
const SECRET: &str = "sup3r-s3cret-token-value";
const ARG_VALUE: &str = "very-distinctive-argument-7731";
const STATE_VALUE: &str = "state-user-id-4242";

struct Server {
    child: Child,
    addr: String,
    logs: Receiver<String>,
}

fn start(tools: &std::path::Path) -> Server {
    let mut child = Command::new(BIN)
        .args(["serve", "--tools-dir", tools.to_str().unwrap(), "--log-format", "json"])
        .env("TOOLWIRE_LISTEN", "127.0.0.1:0")
        .env("OBS_TEST_SECRET", SECRET)
        .env("RUST_LOG", "toolwire=debug,info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, logs) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let addr = loop {
        let line = logs.recv_timeout(Duration::from_secs(20)).expect("Listening line");
        let v: Value = serde_json::from_str(&line).unwrap_or_default();
        if v["message"] == "Listening." {
            break v["addr"].as_str().unwrap().to_owned();
        }
    };
    Server { child, addr, logs }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn metrics_and_logs_describe_the_work_without_leaking_values() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("t.json"),
        json!({"tools": [
            {"name": "echo_text", "description": "Echo the given text back unchanged, for tests.",
             "parameters": {"text": {"type": "string", "description": "Text."}},
             "inject": {"user": "state.user_id"},
             "exec": {"command": ["printf", "%s", "{text}"], "env": {"TOKEN": "${env:OBS_TEST_SECRET}"}}},
            {"name": "get_down", "description": "Calls a backend that is not there, for tests.",
             "retry": {"max_attempts": 2, "backoff": "1ms", "max_backoff": "2ms"},
             "http": {"method": "GET", "url": "http://127.0.0.1:9/x", "headers": {"Authorization": "Bearer ${env:OBS_TEST_SECRET}"}}}
        ]})
        .to_string(),
    )
    .unwrap();
    let server = start(dir.path());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let base = format!("http://{}", server.addr);
    let completion = json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,
    "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "echo_text", "arguments": json!({"text": ARG_VALUE}).to_string()}},
        {"id": "call_b", "type": "function", "function": {"name": "get_down", "arguments": "{}"}}
    ]}}]});
    let (resp, metrics): (Value, String) = rt.block_on(async {
        let resp = client
            .post(format!("{base}/v1/execute"))
            .json(&json!({"provider": "openai", "completion": completion, "state": {"user_id": STATE_VALUE}}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let metrics = client.get(format!("{base}/metrics")).send().await.unwrap();
        assert_eq!(metrics.status(), 200);
        assert!(
            metrics.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/plain")
        );
        (resp, metrics.text().await.unwrap())
    });
    assert_eq!(resp["results"][0]["output"], ARG_VALUE);
    assert_eq!(resp["results"][1]["error"]["kind"], "backend_unreachable");
    assert!(!resp.to_string().contains(SECRET));
    assert!(!resp["messages"].to_string().contains(STATE_VALUE));

    for series in [
        r#"toolwire_http_requests_total{route="/v1/execute",method="POST",status="200"} 1"#,
        r#"toolwire_tool_calls_total{tool="echo_text",outcome="ok"} 1"#,
        r#"toolwire_tool_calls_total{tool="get_down",outcome="backend_unreachable"} 1"#,
        r#"toolwire_tool_attempts_total{tool="get_down"} 2"#,
        "toolwire_tool_call_duration_seconds_bucket",
        "toolwire_http_request_duration_seconds_bucket",
        "toolwire_tool_calls_in_flight 0",
        r#"toolwire_breaker_open{backend="http://127.0.0.1:9"} 0"#,
        r#"toolwire_reloads_total{result="initial"} 1"#,
        "# TYPE toolwire_tool_calls_total counter",
    ] {
        assert!(metrics.contains(series), "missing `{series}` in:\n{metrics}");
    }

    // Collect the log lines written so far (the request has finished; give the writer a moment).
    let mut lines = Vec::new();
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        match server.logs.recv_timeout(Duration::from_millis(200)) {
            Ok(l) => lines.push(l),
            Err(_) if lines.iter().any(|l| l.contains("/metrics")) => break,
            Err(_) => {}
        }
    }
    let all = lines.join("\n");
    for forbidden in [ARG_VALUE, SECRET, STATE_VALUE] {
        assert!(!all.contains(forbidden), "`{forbidden}` leaked into the logs:\n{all}");
    }
    let parsed: Vec<Value> = lines.iter().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let call_lines: Vec<&Value> = parsed
        .iter()
        .filter(|v| v["message"] == "Tool call finished.")
        .collect();
    assert_eq!(call_lines.len(), 2, "{all}");
    let echo = call_lines
        .iter()
        .find(|v| v["span"]["tool"] == "echo_text")
        .expect("a span with the tool name");
    assert_eq!(echo["outcome"], "ok");
    assert_eq!(echo["span"]["call_id"], "call_a");
    assert!(echo["duration_ms"].is_number() && echo["attempts"] == 1);
    let req = parsed
        .iter()
        .find(|v| v["message"] == "Request finished." && v["span"]["route"] == "/v1/execute")
        .expect("request line");
    assert_eq!(req["status"], 200);
}
