//! The execution engine end to end through the real server with subprocess tools running the
//! `faultproc` fixture: exit codes, signals, spawn failures, broken output, timeouts and
//! deadlines within budget, no process or zombie left behind (after timeouts and after the
//! client goes away), argv without a shell, a cleared environment, secrets and state, and
//! parallelism (`docs/execution.md#subprocess-backends`; `docs/reliability.md#faults`).

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::proc_watch::{assert_all_gone, pids_with_arg, read_pid_file, unique_marker, wait_for_marker};
use crate::common::server::Served;
use crate::common::tools::{
    ToolsDir, assert_error, assert_openai_answers, exec_tool, execute_body, execute_ok, faultproc, merge, message,
    post_timed, result,
};
use serde_json::{Value, json};

/// Slack on top of "deadline + kill grace" for the test's own round trips and a loaded 2-core
/// machine. Each bound it makes stays well under what the test would see without the behaviour
/// under test (the tool's own 10 s sleep, or a 5 s tool timeout).
const GRACE: Duration = Duration::from_millis(2000);

/// The server waits at most 2 s for a finished program's pipes to close (a grandchild may hold
/// them): a bound under timeout + kill grace + this proves the group kill closed them instead.
const PIPE_DRAIN: Duration = Duration::from_millis(2000);

fn ms(d: u64) -> Duration {
    Duration::from_millis(d)
}

// ---------------------------------------------------------------------------------------------
// how a program can fail
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn nonzero_exit_reports_code_and_stderr_and_is_retried_only_when_idempotent() {
    let exit = merge(
        exec_tool("exit3", &["exit", "3"]),
        json!({"retry": {"max_attempts": 3}}),
    );
    let exit_idem = merge(
        exec_tool("exit3_idem", &["exit", "3"]),
        json!({"idempotent": true, "retry": {"max_attempts": 2, "backoff": "10ms"}}),
    );
    let tools = ToolsDir::new(&[exit, exit_idem]);
    let server = Served::start_dir_without_replay(tools.path()).await;
    let resp = execute_ok(
        &server,
        &execute_body(&[("c1", "exit3", json!({})), ("c2", "exit3_idem", json!({}))]),
    )
    .await;
    assert_openai_answers(&resp, &["c1", "c2"]);
    let r = result(&resp, 0);
    let err = assert_error(r, "nonzero_exit", false, 1);
    assert_eq!(err["exit_code"], json!(3));
    assert!(message(r).contains("exiting with code 3 as asked"), "stderr tail: {r}");
    let r = result(&resp, 1);
    assert_error(r, "nonzero_exit", false, 2);
    assert!(message(r).contains("after 2 attempts"), "{r}");
    server.stop().await;
}

#[tokio::test]
async fn a_crash_by_signal_is_named_and_never_retried() {
    let t = merge(
        exec_tool("crash", &["signal", "SEGV"]),
        json!({"idempotent": true, "retry": {"max_attempts": 3, "backoff": "10ms"}}),
    );
    let tools = ToolsDir::new(&[t]);
    let server = Served::start_dir_without_replay(tools.path()).await;
    let resp = execute_ok(&server, &execute_body(&[("c1", "crash", json!({}))])).await;
    let r = result(&resp, 0);
    let err = assert_error(r, "nonzero_exit", false, 1);
    assert_eq!(err["signal"], json!("SIGSEGV"));
    assert!(err.get("exit_code").is_none(), "{err}");
    assert!(message(r).contains("SIGSEGV") && message(r).contains("crashed"), "{r}");
    server.stop().await;
}

#[tokio::test]
async fn a_missing_program_is_spawn_failed() {
    let t = merge(
        exec_tool("ghost", &[]),
        json!({"exec": {"command": ["/nonexistent/toolwire-no-such-program"]}, "retry": {"max_attempts": 3}}),
    );
    let tools = ToolsDir::new(&[t]);
    let server = Served::start_dir_without_replay(tools.path()).await;
    let resp = execute_ok(&server, &execute_body(&[("c1", "ghost", json!({}))])).await;
    let r = result(&resp, 0);
    assert_error(r, "spawn_failed", false, 1);
    assert!(message(r).contains("could not be started"), "{r}");
    server.stop().await;
}

#[tokio::test]
async fn broken_json_output_is_internal_and_a_json_flood_is_output_too_large() {
    let tools = ToolsDir::new(&[
        exec_tool("liar", &["invalid-json"]),
        exec_tool("flood", &["flood", "2000000"]),
        merge(
            exec_tool("flood_text", &["flood", "200000"]),
            json!({"exec": {"output": "text"}, "max_output_bytes": 2000}),
        ),
    ]);
    let server = Served::start_dir_without_replay(tools.path()).await;
    let resp = execute_ok(
        &server,
        &execute_body(&[
            ("c1", "liar", json!({})),
            ("c2", "flood", json!({})),
            ("c3", "flood_text", json!({})),
        ]),
    )
    .await;
    let r = result(&resp, 0);
    assert_error(r, "internal", false, 1);
    assert!(message(r).contains("invalid JSON"), "{r}");
    let r = result(&resp, 1);
    assert_error(r, "output_too_large", false, 1);
    let r = result(&resp, 2);
    assert_eq!(r["ok"], json!(true), "{r}");
    assert_eq!(r["truncated"], json!(true), "{r}");
    let out = r["output"].as_str().unwrap();
    assert!(
        out.len() <= 2000 && out.contains("[toolwire: output truncated"),
        "{out}"
    );
    assert!(resp.to_string().len() < 20_000);
    server.stop().await;
}

// ---------------------------------------------------------------------------------------------
// time budgets, and nothing left behind
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_sleeping_program_times_out_with_term_within_the_budget() {
    let marker = unique_marker("sleep");
    let t = merge(
        exec_tool("sleepy", &["sleep", "30000", &marker]),
        json!({"timeout": "300ms", "kill_grace": "300ms"}),
    );
    let tools = ToolsDir::new(&[t]);
    let server = Served::start_dir_without_replay(tools.path()).await;
    let watcher = tokio::spawn({
        let marker = marker.clone();
        async move { wait_for_marker(&marker, ms(3000)).await }
    });
    let (s, resp, took) = post_timed(&server, "/v1/execute", &execute_body(&[("c1", "sleepy", json!({}))])).await;
    assert_eq!(s, 200);
    let err = assert_error(result(&resp, 0), "timeout", true, 1);
    assert_eq!(err["signal"], json!("SIGTERM"), "{err}");
    assert!(took >= ms(300) && took < ms(300 + 300) + GRACE, "{took:?}");
    let pids = watcher.await.unwrap();
    assert_all_gone(&pids, ms(3000)).await;
    server.stop().await;
}

#[tokio::test]
async fn a_program_ignoring_term_is_killed_after_the_grace_and_leaves_nothing() {
    let marker = unique_marker("ignore-term");
    let t = merge(
        exec_tool("stubborn", &["ignore-term", "30000", &marker]),
        json!({"timeout": "300ms", "kill_grace": "300ms"}),
    );
    let tools = ToolsDir::new(&[t]);
    let server = Served::start_dir_without_replay(tools.path()).await;
    let watcher = tokio::spawn({
        let marker = marker.clone();
        async move { wait_for_marker(&marker, ms(3000)).await }
    });
    let (s, resp, took) = post_timed(&server, "/v1/execute", &execute_body(&[("c1", "stubborn", json!({}))])).await;
    assert_eq!(s, 200);
    let err = assert_error(result(&resp, 0), "timeout", true, 1);
    assert_eq!(err["signal"], json!("SIGKILL"), "{err}");
    assert!(took >= ms(600) && took < ms(600) + GRACE, "{took:?}");
    let pids = watcher.await.unwrap();
    assert_all_gone(&pids, ms(3000)).await;
    assert!(pids_with_arg(&marker).is_empty());
    server.stop().await;
}

#[tokio::test]
async fn a_request_deadline_stops_a_program_on_time() {
    let marker = unique_marker("deadline");
    let t = merge(
        exec_tool("sleepy", &["ignore-term", "10000", &marker]),
        json!({"timeout": "5s", "kill_grace": "300ms"}),
    );
    let tools = ToolsDir::new(&[t]);
    let server = Served::start_dir_without_replay(tools.path()).await;
    let mut body = execute_body(&[("c1", "sleepy", json!({}))]);
    body["options"] = json!({"deadline_ms": 400});
    let (s, resp, took) = post_timed(&server, "/v1/execute", &body).await;
    assert_eq!(s, 200);
    assert_error(result(&resp, 0), "deadline_exceeded", true, 1);
    assert!(took >= ms(400) && took < ms(400 + 300) + GRACE, "{took:?}");
    // Nothing with our marker survives the call.
    let start = std::time::Instant::now();
    while !pids_with_arg(&marker).is_empty() {
        assert!(
            start.elapsed() < ms(5000),
            "still running: {:?}",
            pids_with_arg(&marker)
        );
        tokio::time::sleep(ms(20)).await;
    }
    server.stop().await;
}

#[tokio::test]
async fn a_timed_out_program_leaves_no_grandchild_and_no_zombie() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pids.json");
    let t = merge(
        exec_tool("spawner", &["spawn-grandchild", "10000"]),
        json!({"timeout": "300ms", "kill_grace": "300ms",
               "exec": {"output": "text", "env": {"FAULTPROC_PIDS": pid_file.display().to_string()}}}),
    );
    let tools = ToolsDir::new(&[t]);
    let server = Served::start_dir_without_replay(tools.path()).await;
    let (s, resp, took) = post_timed(&server, "/v1/execute", &execute_body(&[("c1", "spawner", json!({}))])).await;
    assert_eq!(s, 200, "{resp}");
    assert_error(result(&resp, 0), "timeout", true, 1);
    // Well under timeout + kill grace + the pipe drain (2.6 s): the group kill closed the pipes.
    assert!(took < ms(300 + 300) + PIPE_DRAIN - ms(800), "{took:?}");
    let pids = read_pid_file(&pid_file, ms(5000)).await;
    assert_all_gone(&pids, ms(5000)).await;
    server.stop().await;
}

#[tokio::test]
async fn a_client_that_goes_away_mid_call_leaves_no_process_behind() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pids.json");
    let t = merge(
        exec_tool("spawner", &["spawn-grandchild", "10000"]),
        json!({"timeout": "10s", "kill_grace": "300ms",
               "exec": {"output": "text", "env": {"FAULTPROC_PIDS": pid_file.display().to_string()}}}),
    );
    let tools = ToolsDir::new(&[t]);
    let server = Served::start_dir_without_replay(tools.path()).await;
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let request = client
        .post(format!("{}/v1/execute", server.base))
        .json(&execute_body(&[("c1", "spawner", json!({}))]))
        .send();
    let in_flight = tokio::spawn(request);
    let pids = read_pid_file(&pid_file, ms(3000)).await;
    assert!(
        pids.iter().all(|&p| crate::common::procs::pid_alive(p)),
        "running: {pids:?}"
    );
    // The client gives up: the connection is dropped mid-call.
    in_flight.abort();
    assert!(in_flight.await.unwrap_err().is_cancelled());
    drop(client);
    assert_all_gone(&pids, ms(300 + 1000)).await;
    // The server is fine afterwards.
    let (s, _) = server.get_json("/healthz").await;
    assert_eq!(s, 200);
    server.stop().await;
}

// ---------------------------------------------------------------------------------------------
// what the program gets: argv, environment, state
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn injection_strings_arrive_as_single_literal_arguments() {
    let values = [
        "$(id)",
        "; rm -rf /",
        "-o /tmp/x",
        "a b",
        "../../etc/passwd",
        "`id` && echo pwned | cat > /tmp/pwned",
        "*",
        "\"quoted\" 'single'",
    ];
    let placeholders: Vec<String> = (0..values.len()).map(|i| format!("{{v{i}}}")).collect();
    let mut args: Vec<&str> = placeholders.iter().map(String::as_str).collect();
    args.push("--name={v3}");
    let props: serde_json::Map<String, Value> = (0..values.len())
        .map(|i| (format!("v{i}"), json!({"type": "string"})))
        .collect();
    let t = merge(
        exec_tool("echo", &["echo"]),
        // `-o /tmp/x` starts with `-`: refused unless the tool opts out (tests/security_exec.rs).
        json!({"exec": {"args": args, "allow_option_values": true}, "parameters": {"type": "object", "properties": props}}),
    );
    let tools = ToolsDir::new(&[t]);
    let server = Served::start_dir_without_replay(tools.path()).await;
    let arguments: serde_json::Map<String, Value> = values
        .iter()
        .enumerate()
        .map(|(i, v)| (format!("v{i}"), json!(v)))
        .collect();
    let resp = execute_ok(&server, &execute_body(&[("c1", "echo", Value::Object(arguments))])).await;
    let r = result(&resp, 0);
    assert_eq!(r["ok"], json!(true), "{r}");
    let mut expected = vec![json!(faultproc()), json!("echo")];
    expected.extend(values.iter().map(|v| json!(v)));
    expected.push(json!("--name=a b"));
    assert_eq!(r["output"]["argv"], Value::Array(expected), "{r}");
    server.stop().await;
}

#[tokio::test]
async fn the_child_sees_only_the_tool_env_and_secrets_stay_out_of_errors() {
    const SECRET: &str = "s3cr3t-EXEC-token-c0ffee";
    // The server runs in this process: it has an environment (HOME, CARGO_*, …) to leak.
    let server_env: Vec<String> = std::env::vars()
        .map(|(k, _)| k)
        .filter(|k| !["PATH", "PLAIN", "TOKEN"].contains(&k.as_str()))
        .collect();
    assert!(!server_env.is_empty());
    let env_tool = merge(
        exec_tool("show_env", &["echo"]),
        json!({"exec": {"env": {"TOKEN": "${file:secret.txt}", "PLAIN": "visible"}}}),
    );
    // A program that prints its credential on stderr and fails.
    let leaky = merge(
        exec_tool("leaky", &[]),
        json!({"exec": {
            "command": ["/bin/sh", "-c", "echo \"auth failed for $TOKEN\" >&2; exit 4"],
            "env": {"TOKEN": "${file:secret.txt}"},
        }}),
    );
    let tools = ToolsDir::with_files(&[("secret.txt", SECRET)], &[env_tool, leaky]);
    let server = Served::start_dir_without_replay(tools.path()).await;
    let resp = execute_ok(
        &server,
        &execute_body(&[("c1", "show_env", json!({})), ("c2", "leaky", json!({}))]),
    )
    .await;
    let r = result(&resp, 0);
    assert_eq!(r["ok"], json!(true), "{r}");
    let env = r["output"]["env"].as_object().unwrap();
    let keys: BTreeSet<&str> = env.keys().map(String::as_str).collect();
    // Exactly the tool's env and the minimal PATH.
    assert_eq!(keys, BTreeSet::from(["PATH", "PLAIN", "TOKEN"]), "{env:?}");
    assert!(server_env.iter().all(|k| !env.contains_key(k)));
    // The program printed its env: the secret reached it, and is masked in the output (only a
    // resolved `${}` value becomes exactly `[redacted]`).
    assert_eq!(
        env["TOKEN"],
        json!("[redacted]"),
        "the secret reaches the program, masked in the output"
    );
    assert_eq!(env["PATH"], json!("/usr/local/bin:/usr/bin:/bin"));

    let r = result(&resp, 1);
    let err = assert_error(r, "nonzero_exit", false, 1);
    assert_eq!(err["exit_code"], json!(4));
    assert!(message(r).contains("auth failed for"), "{r}");
    assert!(!err.to_string().contains(SECRET), "secret in the error: {err}");
    let answer = resp["messages"][1].to_string();
    assert!(!answer.contains(SECRET), "secret in the model's message: {answer}");
    server.stop().await;
}

#[tokio::test]
async fn state_reaches_the_program_only_through_the_stdin_envelope_and_inject() {
    const USER: &str = "u-EXEC-STATE-3141";
    let with_stdin = merge(
        exec_tool("with_stdin", &["echo"]),
        json!({"exec": {"stdin": "json"}, "inject": {"user_id": "state.user_id"}}),
    );
    let plain = exec_tool("plain", &["echo"]);
    let tools = ToolsDir::new(&[with_stdin, plain]);
    let server = Served::start_dir_without_replay(tools.path()).await;
    let state = json!({"user_id": USER, "org": {"id": 7}});
    let mut body = execute_body(&[("c1", "with_stdin", json!({"q": 1})), ("c2", "plain", json!({"q": 2}))]);
    body["state"] = state.clone();
    let resp = execute_ok(&server, &body).await;
    let r = result(&resp, 0);
    assert_eq!(r["ok"], json!(true), "{r}");
    assert_eq!(
        r["output"]["stdin"],
        // Only the state the tool references (`inject`), not `org`.
        json!({"arguments": {"q": 1, "user_id": USER}, "state": {"user_id": USER}, "call": {"id": "c1", "attempt": 1}})
    );
    assert_eq!(
        r["arguments"],
        json!({"q": 1}),
        "the model's arguments, without the injected value"
    );
    let r = result(&resp, 1);
    assert_eq!(
        r["output"]["stdin"],
        json!(""),
        "stdin is empty without `stdin = \"json\"`"
    );
    assert!(!r.to_string().contains(USER), "{r}");
    server.stop().await;
}

// ---------------------------------------------------------------------------------------------
// parallelism
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn eight_sleeping_programs_run_in_parallel_or_in_order_when_asked() {
    // 8 × 500 ms: 4 s one after the other, 0.5 s in parallel.
    let tools = ToolsDir::new(&[exec_tool("nap", &["sleep", "500"])]);
    let server = Served::start_dir_without_replay(tools.path()).await;
    let ids: Vec<String> = (0..8).map(|i| format!("call_{i}")).collect();
    let calls: Vec<(&str, &str, Value)> = ids.iter().map(|id| (id.as_str(), "nap", json!({}))).collect();
    let id_refs: Vec<&str> = ids.iter().map(String::as_str).collect();

    let (s, resp, took) = post_timed(&server, "/v1/execute", &execute_body(&calls)).await;
    assert_eq!(s, 200);
    assert_openai_answers(&resp, &id_refs);
    for i in 0..8 {
        assert_eq!(result(&resp, i)["output"], json!({"slept": 500}), "{resp}");
    }
    assert!(took < ms(2500), "parallel: {took:?}");

    // New call ids: the same ids would be answered from the replay store.
    let seq_ids: Vec<String> = (0..8).map(|i| format!("seq_{i}")).collect();
    let seq_calls: Vec<(&str, &str, Value)> = seq_ids.iter().map(|id| (id.as_str(), "nap", json!({}))).collect();
    let seq_refs: Vec<&str> = seq_ids.iter().map(String::as_str).collect();
    let mut body = execute_body(&seq_calls);
    body["options"] = json!({"parallel": false});
    let (s, resp, took) = post_timed(&server, "/v1/execute", &body).await;
    assert_eq!(s, 200);
    assert_openai_answers(&resp, &seq_refs);
    assert!(took >= ms(1600), "one by one: {took:?}");
    for i in 0..8 {
        assert!(result(&resp, i)["duration_ms"].as_u64().unwrap() >= 200, "{resp}");
    }
    server.stop().await;
}
