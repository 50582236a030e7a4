//! Every provider fixture (`tests/fixtures/providers/**`) executed through the real server with
//! real subprocess tools: one result per expected call, in order, with the expected ids and
//! arguments; `messages` answering every call in the provider's own place; `finished` as
//! expected; 200 always. Then the CLI (`toolwire execute`, `toolwire call`) against the same
//! tools prints what the endpoints answer.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::common::server::Served;
use crate::common::tools::{ToolsDir, exec_tool, merge};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

/// One fixture: folder (provider), stem, raw body, expectation.
struct Fixture {
    provider: String,
    stem: String,
    body: Value,
    expected: Value,
}

fn fixtures() -> Vec<Fixture> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/providers");
    let mut out = Vec::new();
    let mut folders: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    folders.sort();
    for folder in folders {
        let provider = folder.file_name().unwrap().to_str().unwrap().to_owned();
        let mut files: Vec<PathBuf> = std::fs::read_dir(&folder)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                let name = p.file_name().unwrap().to_str().unwrap();
                name.ends_with(".json") && !name.ends_with(".expected.json")
            })
            .collect();
        files.sort();
        for file in files {
            let stem = file.file_stem().unwrap().to_str().unwrap().to_owned();
            let read = |p: &Path| -> Value { serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap() };
            let expected = read(&folder.join(format!("{stem}.expected.json")));
            out.push(Fixture {
                provider: provider.clone(),
                stem,
                body: read(&file),
                expected,
            });
        }
    }
    out
}

/// One exec tool per name the fixtures call: `faultproc echo` with the stdin envelope, so the
/// output shows the arguments the tool received.
fn tools_for(fixtures: &[Fixture]) -> ToolsDir {
    let names: BTreeSet<String> = fixtures
        .iter()
        .flat_map(|f| f.expected["tool_calls"].as_array().unwrap().iter())
        .map(|c| c["name"].as_str().unwrap().to_owned())
        .collect();
    let tools: Vec<Value> = names
        .iter()
        .map(|n| merge(exec_tool(n, &["echo"]), json!({"exec": {"stdin": "json"}})))
        .collect();
    ToolsDir::new(&tools)
}

/// The (id, name) each element of `messages` answers, read from the provider's own place.
/// `name` is `None` where the provider's result does not carry it.
fn answered(provider: &str, messages: &[Value]) -> Vec<(Option<String>, Option<String>)> {
    let s = |v: &Value| v.as_str().map(str::to_owned);
    match provider {
        "openai_chat" | "mistral" | "cohere" | "ollama" => messages
            .iter()
            .map(|m| {
                let role = m["role"].as_str().unwrap();
                assert!(
                    role == "tool" || (provider == "openai_chat" && role == "function"),
                    "{m}"
                );
                let name = match provider {
                    "ollama" => s(&m["tool_name"]),
                    "mistral" => s(&m["name"]),
                    _ if role == "function" => s(&m["name"]),
                    _ => None,
                };
                (s(&m["tool_call_id"]), name)
            })
            .collect(),
        "openai_responses" => messages
            .iter()
            .map(|m| {
                assert_eq!(m["type"], json!("function_call_output"), "{m}");
                assert!(m["output"].is_string(), "{m}");
                (s(&m["call_id"]), None)
            })
            .collect(),
        "anthropic" | "bedrock" | "gemini" => {
            if messages.is_empty() {
                return Vec::new();
            }
            assert_eq!(messages.len(), 1, "{provider}: one user message");
            let m = &messages[0];
            assert_eq!(m["role"], json!("user"), "{m}");
            match provider {
                "anthropic" => m["content"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|b| {
                        assert_eq!(b["type"], json!("tool_result"), "{b}");
                        (s(&b["tool_use_id"]), None)
                    })
                    .collect(),
                "bedrock" => m["content"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|b| (s(&b["toolResult"]["toolUseId"]), None))
                    .collect(),
                _ => m["parts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| {
                        let fr = p
                            .get("functionResponse")
                            .or_else(|| p.get("function_response"))
                            .unwrap();
                        (s(&fr["id"]), s(&fr["name"]))
                    })
                    .collect(),
            }
        }
        other => panic!("unknown provider folder {other}"),
    }
}

/// The expected arguments as the tool receives them: top-level `null`s of optional
/// parameters are dropped before validation.
fn without_nulls(args: &Value) -> Value {
    match args {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn check_response(f: &Fixture, resp: &Value) {
    let what = format!("{}/{}", f.provider, f.stem);
    let calls = f.expected["tool_calls"].as_array().unwrap();
    let results = resp["results"].as_array().unwrap();
    assert_eq!(results.len(), calls.len(), "{what}: one result per call: {resp}");
    assert_eq!(resp["finished"], f.expected["finished"], "{what}");
    for (r, c) in results.iter().zip(calls) {
        assert_eq!(r["id"], c["id"], "{what}: id");
        assert_eq!(r["name"], c["name"], "{what}: name");
        if c.get("arguments_error").is_some() {
            assert_eq!(r["ok"], json!(false), "{what}: {r}");
            assert_eq!(r["error"]["kind"], json!("args_not_json"), "{what}: {r}");
            assert_eq!(r["attempts"], json!(0));
        } else {
            assert_eq!(r["ok"], json!(true), "{what}: {r}");
            assert_eq!(r["attempts"], json!(1));
            let stdin = &r["output"]["stdin"];
            assert_eq!(stdin["arguments"], without_nulls(&c["arguments"]), "{what}: arguments");
            assert_eq!(stdin["call"]["id"], c["id"], "{what}: call id in the envelope");
        }
    }
    let messages = resp["messages"].as_array().unwrap();
    let got = answered(&f.provider, messages);
    let want: Vec<Option<String>> = calls.iter().map(|c| c["id"].as_str().map(str::to_owned)).collect();
    let got_ids: Vec<Option<String>> = got.iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(
        got_ids, want,
        "{what}: every call answered once, in order: {messages:?}"
    );
    for ((_, name), c) in got.iter().zip(calls) {
        if let Some(name) = name {
            assert_eq!(Some(name.as_str()), c["name"].as_str(), "{what}: answered name");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_provider_fixture_executes_and_every_call_is_answered() {
    let all = fixtures();
    let providers: BTreeSet<&str> = all.iter().map(|f| f.provider.as_str()).collect();
    assert_eq!(providers.len(), 8, "all eight provider folders: {providers:?}");
    assert!(all.iter().any(|f| f.expected["body_shape"] == json!("sdk_snake_case")));
    let tools = tools_for(&all);
    let server = Served::start_dir(tools.path()).await;
    let mut executed_calls = 0;
    for f in &all {
        let (status, resp) = server
            .post_json("/v1/execute", &json!({"provider": f.provider, "completion": f.body}))
            .await;
        assert_eq!(status, 200, "{}/{}: {resp}", f.provider, f.stem);
        assert_eq!(resp["provider"], json!(f.provider), "{}/{}", f.provider, f.stem);
        check_response(f, &resp);
        executed_calls += resp["results"].as_array().unwrap().len();

        // Without `provider`, the shape is detected and the same calls run (a Mistral body
        // may be read as OpenAI Chat, which Mistral accepts).
        let (status, detected) = server.post_json("/v1/execute", &json!({"completion": f.body})).await;
        assert_eq!(status, 200, "{}/{} detected: {detected}", f.provider, f.stem);
        let name = detected["provider"].as_str().unwrap();
        assert!(
            name == f.provider || (f.provider == "mistral" && name == "openai_chat"),
            "{}/{} detected as {name}",
            f.provider,
            f.stem
        );
        let ids = |r: &Value| -> Vec<Value> {
            r["results"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x["id"].clone())
                .collect()
        };
        assert_eq!(ids(&detected), ids(&resp), "{}/{}", f.provider, f.stem);
    }
    assert!(executed_calls >= 25, "{executed_calls}");
    server.stop().await;
}

// ---------------------------------------------------------------------------------------------
// the CLI prints what the endpoints answer
// ---------------------------------------------------------------------------------------------

/// Runs the real binary with `stdin`; returns (exit code, stdout JSON, stderr).
async fn toolwire(args: &[&str], stdin: &str) -> (i32, Value, String) {
    let mut child = tokio::process::Command::new(crate::common::binary::toolwire_bin())
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.as_bytes()).await.unwrap();
    drop(input);
    let out = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
        .await
        .expect("the CLI finishes")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let json = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), json, stderr)
}

/// Drops the fields that differ from run to run: durations.
fn stable(mut v: Value) -> Value {
    fn walk(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.remove("duration_ms");
                m.values_mut().for_each(walk);
            }
            Value::Array(a) => a.iter_mut().for_each(walk),
            _ => {}
        }
    }
    walk(&mut v);
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_execute_prints_what_the_endpoint_answers() {
    let all = fixtures();
    let tools = tools_for(&all);
    let dir = tools.path().to_str().unwrap();
    let server = Served::start_dir(tools.path()).await;
    let picked = [
        ("anthropic", "constructed_parallel_tool_use"),
        ("openai_chat", "constructed_invalid_json_arguments_truncated"),
        ("gemini", "sdk_dump_snake_case_parallel"),
        ("bedrock", "docs_final_end_turn"),
    ];
    for (provider, stem) in picked {
        let f = all.iter().find(|f| f.provider == provider && f.stem == stem).unwrap();
        let (s, endpoint) = server
            .post_json(
                "/v1/execute",
                &json!({"provider": provider, "completion": f.body, "state": {"k": "v"}}),
            )
            .await;
        assert_eq!(s, 200);
        let (code, printed, stderr) = toolwire(
            &[
                "execute",
                "--provider",
                provider,
                "--tools-dir",
                dir,
                "--state",
                r#"{"k":"v"}"#,
            ],
            &f.body.to_string(),
        )
        .await;
        assert_eq!(code, 0, "{provider}/{stem}: {stderr}");
        check_response(f, &printed);
        assert_eq!(stable(printed), stable(endpoint), "{provider}/{stem}");
    }

    // A request error is an error exit with the reason, and nothing on stdout.
    let f = all.iter().find(|f| f.provider == "openai_chat").unwrap();
    let (code, printed, stderr) = toolwire(
        &["execute", "--provider", "anthropic", "--tools-dir", dir],
        &f.body.to_string(),
    )
    .await;
    assert_eq!(code, 1);
    assert_eq!(printed, Value::Null);
    assert!(
        stderr.contains("anthropic") && stderr.contains("openai_chat"),
        "{stderr}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_call_prints_the_result_object_of_the_call_endpoint() {
    let tools = ToolsDir::new(&[
        merge(
            exec_tool("echo_envelope", &["echo"]),
            json!({"exec": {"stdin": "json"}, "inject": {"user_id": "state.user_id"}}),
        ),
        exec_tool("exit_three", &["exit", "3"]),
    ]);
    let dir = tools.path().to_str().unwrap();
    let server = Served::start_dir(tools.path()).await;

    let args = json!({"q": "x", "n": [1, 2]});
    let state = json!({"user_id": "u-42"});
    let (s, endpoint) = server
        .post_json(
            "/v1/tools/echo_envelope/call",
            &json!({"arguments": args, "state": state}),
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(endpoint["ok"], json!(true), "{endpoint}");
    assert_eq!(
        endpoint["output"]["stdin"]["arguments"],
        json!({"q": "x", "n": [1, 2], "user_id": "u-42"})
    );
    let (code, printed, stderr) = toolwire(
        &[
            "call",
            "echo_envelope",
            "--tools-dir",
            dir,
            "--args",
            &args.to_string(),
            "--state",
            &state.to_string(),
        ],
        "",
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stable(printed), stable(endpoint));

    // A failed call prints the same error result and exits 1.
    let (s, endpoint) = server
        .post_json("/v1/tools/exit_three/call", &json!({"arguments": {}}))
        .await;
    assert_eq!(s, 200);
    assert_eq!(endpoint["error"]["kind"], json!("nonzero_exit"));
    let (code, printed, stderr) = toolwire(&["call", "exit_three", "--tools-dir", dir], "").await;
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(stable(printed), stable(endpoint));
    server.stop().await;
}
