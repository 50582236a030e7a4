//! Tool directories written at test time, request builders and result assertions for the
//! end-to-end execution tests (`tests/execute_*.rs`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use super::server::Served;

/// The misbehaving child process (`tests/bin/faultproc.rs`).
pub use super::faultproc::faultproc;

/// A temporary `tools.d/` with one `tools.json`.
pub struct ToolsDir {
    pub dir: tempfile::TempDir,
}

impl ToolsDir {
    /// Writes `tools` into `tools.json` of a fresh temporary directory.
    pub fn new(tools: &[Value]) -> Self {
        Self::with_files(&[], tools)
    }

    /// Like [`ToolsDir::new`], with other files written first (e.g. a `${file:…}` secret,
    /// which is read when the tools are loaded).
    pub fn with_files(files: &[(&str, &str)], tools: &[Value]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        for (name, contents) in files {
            std::fs::write(dir.path().join(name), contents).expect("write file");
        }
        let file = json!({ "tools": tools });
        std::fs::write(dir.path().join("tools.json"), file.to_string()).expect("write tools.json");
        ToolsDir { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a file next to the tool file (for `${file:…}` secrets, pid files).
    pub fn write(&self, name: &str, contents: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, contents).expect("write file");
        p
    }
}

/// Recursively merges `patch` into `base` (objects merge, everything else replaces).
pub fn merge(mut base: Value, patch: Value) -> Value {
    match (&mut base, patch) {
        (Value::Object(b), Value::Object(p)) => {
            for (k, v) in p {
                let merged = match b.remove(&k) {
                    Some(old) => merge(old, v),
                    None => v,
                };
                b.insert(k, merged);
            }
            base
        }
        (_, p) => p,
    }
}

/// An HTTP tool with a permissive schema, POSTing its arguments to `url`, with fast retries.
pub fn http_tool(name: &str, url: &str) -> Value {
    json!({
        "name": name,
        "description": format!("Test tool {name}: sends its arguments to a loopback backend."),
        "parameters": {"type": "object"},
        "timeout": "3s",
        "retry": {"max_attempts": 3, "backoff": "10ms", "max_backoff": "20ms"},
        "http": {"method": "POST", "url": url},
    })
}

/// An exec tool running `faultproc ARGS…` with a permissive schema and JSON output.
pub fn exec_tool(name: &str, args: &[&str]) -> Value {
    let mut command = vec![faultproc().to_owned()];
    command.extend(args.iter().map(|a| (*a).to_owned()));
    json!({
        "name": name,
        "description": format!("Test tool {name}: runs the faultproc fixture program."),
        "parameters": {"type": "object"},
        "timeout": "3s",
        "kill_grace": "300ms",
        "retry": {"max_attempts": 1},
        "exec": {"command": command, "output": "json"},
    })
}

/// An OpenAI Chat completion with these `(id, name, arguments)` calls. A string `arguments`
/// is sent verbatim (it may be invalid JSON); anything else is serialised.
pub fn openai_completion(calls: &[(&str, &str, Value)]) -> Value {
    let tool_calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, args)| {
            let arguments = match args {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
        })
        .collect();
    json!({
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-test",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": null, "tool_calls": tool_calls},
            "finish_reason": "tool_calls",
        }],
    })
}

/// `{"provider": "openai_chat", "completion": …}` for these calls.
pub fn execute_body(calls: &[(&str, &str, Value)]) -> Value {
    json!({"provider": "openai_chat", "completion": openai_completion(calls)})
}

/// `POST path` and how long it took.
pub async fn post_timed(server: &Served, path: &str, body: &Value) -> (u16, Value, Duration) {
    let a = server.post(path, body).await;
    (a.status, a.body, a.elapsed)
}

/// `POST /v1/execute` → the 200 body (asserts the status and one result per call).
pub async fn execute_ok(server: &Served, body: &Value) -> Value {
    let (status, resp) = server.post_json("/v1/execute", body).await;
    assert_eq!(status, 200, "{resp}");
    resp
}

/// The `i`-th result.
pub fn result(resp: &Value, i: usize) -> &Value {
    &resp["results"][i]
}

/// Asserts a failed result: kind, `retryable`, attempts and a non-empty message; returns the
/// error object.
pub fn assert_error<'a>(result: &'a Value, kind: &str, retryable: bool, attempts: u64) -> &'a Value {
    assert_eq!(result["ok"], json!(false), "{result}");
    let err = &result["error"];
    assert_eq!(err["kind"], json!(kind), "{result}");
    assert_eq!(err["retryable"], json!(retryable), "retryable: {result}");
    assert_eq!(result["attempts"], json!(attempts), "attempts: {result}");
    let msg = err["message"].as_str().unwrap_or_default();
    assert!(msg.len() > 20, "a useful message: {result}");
    assert!(result.get("output").is_none(), "{result}");
    err
}

/// The error message of a failed result.
pub fn message(result: &Value) -> &str {
    result["error"]["message"].as_str().unwrap_or_default()
}

/// Asserts that the OpenAI Chat `messages` answer exactly `ids`, in order, as `role: tool`.
pub fn assert_openai_answers(resp: &Value, ids: &[&str]) {
    let msgs = resp["messages"].as_array().expect("messages");
    let got: Vec<&str> = msgs
        .iter()
        .map(|m| {
            assert_eq!(m["role"], json!("tool"), "{m}");
            assert!(m["content"].is_string(), "{m}");
            m["tool_call_id"].as_str().unwrap_or_default()
        })
        .collect();
    assert_eq!(got, ids, "{resp}");
    let result_ids: Vec<&str> = resp["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| r["id"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(result_ids, ids, "{resp}");
}
