//! The subprocess backend against real child processes (`faultproc`): argv without a shell, a
//! cleared environment, stdin, exit codes and signals, capped output, timeouts, and no process
//! left behind (`docs/execution.md#subprocess-backends`; `docs/reliability.md` F7–F13, F17, F20,
//! B10, B14).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::common::procs::{pid_alive, zombie_children_of};
use serde_json::{Map, Value, json};
use toolwire::backend::subprocess::{DEFAULT_PATH, call};
use toolwire::backend::{Attempt, BackendError, Output};
use toolwire::template::Template;
use toolwire::tool::{ExecSpec, OutputMode, Policy, RetryPolicy, StdinMode};

use crate::common::faultproc::faultproc;
const MIB: usize = 1024 * 1024;

fn spec(args: &[&str]) -> ExecSpec {
    ExecSpec {
        program: faultproc().to_owned(),
        args: args.iter().map(|a| Template::parse(a).unwrap()).collect(),
        stdin: StdinMode::None,
        env: Vec::new(),
        cwd: None,
        output: OutputMode::Json,
        ..ExecSpec::default()
    }
}

fn policy(grace_ms: u64) -> Policy {
    Policy {
        timeout: Duration::from_secs(1),
        deadline: Duration::from_secs(3),
        idempotent: false,
        replay: true,
        retry: RetryPolicy {
            max_attempts: 1,
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
        },
        concurrency: None,
        max_read_bytes: MIB,
        max_output_bytes: 64 * 1024,
        kill_grace: Duration::from_millis(grace_ms),
    }
}

/// Runs `spec` with `arguments`, `state`, a `timeout_ms` budget and a 200 ms kill grace.
async fn run(spec: &ExecSpec, arguments: Value, state: Value, timeout_ms: u64) -> Result<Output, BackendError> {
    run_with(spec, arguments, state, timeout_ms, &policy(200)).await
}

async fn run_with(
    spec: &ExecSpec,
    arguments: Value,
    state: Value,
    timeout_ms: u64,
    policy: &Policy,
) -> Result<Output, BackendError> {
    let arguments: Map<String, Value> = arguments.as_object().cloned().unwrap_or_default();
    let attempt = Attempt {
        call_id: Some("call_1"),
        attempt: 2,
        arguments: &arguments,
        state: &state,
        idempotency_key: "req:call_1",
        timeout: Duration::from_millis(timeout_ms),
        policy,
    };
    call(spec, &attempt).await
}

/// Polls (without blocking the runtime) until none of `pids` runs any more and none is an
/// unreaped child of this test process; fails after `limit`.
async fn assert_all_gone(pids: &[u32], limit: Duration) {
    let start = Instant::now();
    loop {
        let alive: Vec<u32> = pids.iter().copied().filter(|&p| pid_alive(p)).collect();
        let zombies: Vec<u32> = zombie_children_of(std::process::id())
            .into_iter()
            .filter(|z| pids.contains(z))
            .collect();
        if alive.is_empty() && zombies.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "still alive: {alive:?}, unreaped zombies: {zombies:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The `{"parent", "grandchild"}` pids `spawn-grandchild` wrote to `file`.
async fn read_pids(file: &std::path::Path) -> Vec<u32> {
    let start = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(file)
            && let Ok(v) = serde_json::from_str::<Value>(&text)
        {
            let pid = |k: &str| u32::try_from(v[k].as_u64().unwrap()).unwrap();
            return vec![pid("parent"), pid("grandchild")];
        }
        assert!(start.elapsed() < Duration::from_secs(2), "no pid file");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn grandchild_spec(args: &[&str], pid_file: &std::path::Path) -> ExecSpec {
    let mut s = spec(args);
    s.output = OutputMode::Text;
    s.env = vec![("FAULTPROC_PIDS".into(), pid_file.display().to_string())];
    s
}

#[tokio::test]
async fn injection_strings_arrive_as_single_literal_arguments() {
    let s = spec(&["echo", "{a}", "{b}", "{c}", "{d}", "-o /tmp/x", "pre-{d}-{state.user}"]);
    let args = json!({"a": "$(id)", "b": "; rm -rf /", "c": "`id` && echo pwned", "d": "a b"});
    let out = run(&s, args, json!({"user": "u 1"}), 1000).await.unwrap();
    assert_eq!(
        out.value["argv"],
        json!([
            faultproc(),
            "echo",
            "$(id)",
            "; rm -rf /",
            "`id` && echo pwned",
            "a b",
            "-o /tmp/x",
            "pre-a b-u 1"
        ])
    );
    assert!(!out.truncated);
}

#[tokio::test]
async fn environment_is_cleared_to_spec_env_plus_minimal_path() {
    // The test runner surely has these; none may reach the child.
    assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
    let mut s = spec(&["echo"]);
    s.env = vec![("API_BASE".into(), "http://svc:9000".into())];
    let out = run(&s, json!({}), json!({}), 1000).await.unwrap();
    // Exactly the tool's env and PATH, nothing of toolwire's own.
    assert_eq!(
        out.value["env"],
        json!({"API_BASE": "http://svc:9000", "PATH": DEFAULT_PATH})
    );

    s.env.push(("PATH".into(), "/opt/tool/bin".into()));
    let out = run(&s, json!({}), json!({}), 1000).await.unwrap();
    assert_eq!(
        out.value["env"],
        json!({"API_BASE": "http://svc:9000", "PATH": "/opt/tool/bin"})
    );
}

#[tokio::test]
async fn cwd_is_applied() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = spec(&["echo"]);
    s.cwd = Some(dir.path().to_path_buf());
    let out = run(&s, json!({}), json!({}), 1000).await.unwrap();
    let cwd = PathBuf::from(out.value["cwd"].as_str().unwrap());
    assert_eq!(cwd.canonicalize().unwrap(), dir.path().canonicalize().unwrap());
}

#[tokio::test]
async fn stdin_json_receives_the_envelope() {
    let mut s = spec(&["echo"]);
    s.stdin = StdinMode::Json;
    // The envelope carries the state paths the tool references, nothing else.
    s.state_paths = vec![vec!["user_id".to_owned()]];
    let out = run(
        &s,
        json!({"city": "Paris"}),
        json!({"user_id": "u-42", "other": 1}),
        1000,
    )
    .await
    .unwrap();
    assert_eq!(
        out.value["stdin"],
        json!({
            "arguments": {"city": "Paris"},
            "state": {"user_id": "u-42"},
            "call": {"id": "call_1", "attempt": 2}
        })
    );
}

#[tokio::test]
async fn stdin_none_is_empty() {
    let out = run(&spec(&["echo"]), json!({}), json!({"secret": "s"}), 1000)
        .await
        .unwrap();
    assert_eq!(out.value["stdin"], json!(""));
}

#[tokio::test]
async fn child_that_never_reads_a_large_stdin_does_not_block_us() {
    let mut s = spec(&["no-stdin", "100"]);
    s.stdin = StdinMode::Json;
    let big = "x".repeat(MIB);
    let start = Instant::now();
    let out = run(&s, json!({"big": big}), json!({}), 10_000).await.unwrap();
    assert_eq!(out.value, json!({"slept": 100}));
    // Well under the 10 s timeout a blocked stdin write would run into.
    assert!(start.elapsed() < Duration::from_millis(5000), "{:?}", start.elapsed());
}

#[tokio::test]
async fn nonzero_exit_reports_code_and_stderr_tail() {
    let err = run(&spec(&["exit", "3"]), json!({}), json!({}), 1000)
        .await
        .unwrap_err();
    assert_eq!(
        err,
        BackendError::NonzeroExit {
            code: 3,
            stderr_tail: "faultproc: exiting with code 3 as asked".into()
        }
    );
    assert!(!err.is_retryable(false));
}

#[tokio::test]
async fn stderr_flood_is_drained_and_does_not_count_as_output() {
    let mut s = spec(&["flood", "5000000", "stderr"]);
    s.output = OutputMode::Text;
    let out = run(&s, json!({}), json!({}), 5000).await.unwrap();
    assert_eq!(
        out,
        Output {
            value: json!(""),
            truncated: false,
            files: vec![]
        }
    );
}

#[tokio::test]
async fn signals_are_named() {
    for (sig, name) in [("SEGV", "SIGSEGV"), ("ABRT", "SIGABRT"), ("KILL", "SIGKILL")] {
        let err = run(&spec(&["signal", sig]), json!({}), json!({}), 1000)
            .await
            .unwrap_err();
        match err {
            BackendError::Signaled { signal, stderr_tail } => {
                assert_eq!(signal, name);
                assert!(stderr_tail.contains("raising"), "{stderr_tail}");
            }
            other => panic!("{sig}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn invalid_json_output_is_an_error_but_fine_as_text() {
    let err = run(&spec(&["invalid-json"]), json!({}), json!({}), 1000)
        .await
        .unwrap_err();
    match err {
        BackendError::InvalidOutput(msg) => assert!(msg.starts_with("the tool printed invalid JSON on stdout")),
        other => panic!("{other:?}"),
    }
    let mut s = spec(&["invalid-json"]);
    s.output = OutputMode::Text;
    let out = run(&s, json!({}), json!({}), 1000).await.unwrap();
    assert_eq!(
        out,
        Output {
            value: json!("{not json"),
            truncated: false,
            files: vec![]
        }
    );
}

#[tokio::test]
async fn flood_on_both_streams_is_capped_drained_and_quick() {
    let mut s = spec(&["flood", "50000000", "both"]);
    s.output = OutputMode::Text;
    let start = Instant::now();
    let out = run(&s, json!({}), json!({}), 10_000).await.unwrap();
    let elapsed = start.elapsed();
    assert!(out.truncated);
    let text = out.value.as_str().unwrap();
    assert_eq!(text.len(), MIB);
    assert!(text.bytes().all(|b| b == b'x'));
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");

    // JSON cannot be cut: over the cap is an error.
    s.output = OutputMode::Json;
    let err = run(&s, json!({}), json!({}), 10_000).await.unwrap_err();
    assert_eq!(err, BackendError::OutputTooLarge { limit: MIB });
}

#[tokio::test]
async fn timeout_terms_the_group_within_budget() {
    let start = Instant::now();
    let err = run(&spec(&["sleep", "30000"]), json!({}), json!({}), 500)
        .await
        .unwrap_err();
    let elapsed = start.elapsed();
    assert_eq!(
        err,
        BackendError::Timeout {
            timeout: Duration::from_millis(500),
            sent: true,
            signal: Some("SIGTERM".into())
        }
    );
    // Well under the program's own 30 s.
    assert!(elapsed < Duration::from_millis(2500), "{elapsed:?}");
}

#[tokio::test]
async fn ignored_term_ends_with_kill_after_the_grace() {
    let start = Instant::now();
    let err = run_with(
        &spec(&["ignore-term", "30000"]),
        json!({}),
        json!({}),
        300,
        &policy(300),
    )
    .await
    .unwrap_err();
    let elapsed = start.elapsed();
    match err {
        BackendError::Timeout { signal, sent, .. } => {
            assert_eq!(signal.as_deref(), Some("SIGKILL"));
            assert!(sent);
        }
        other => panic!("{other:?}"),
    }
    assert!(elapsed >= Duration::from_millis(600), "{elapsed:?}");
    // Well under the program's own 30 s.
    assert!(elapsed < Duration::from_millis(2600), "{elapsed:?}");
}

#[tokio::test]
async fn timeout_leaves_no_grandchild_and_no_zombie() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pids");
    let start = Instant::now();
    let err = run(
        &grandchild_spec(&["spawn-grandchild", "30000"], &pid_file),
        json!({}),
        json!({}),
        500,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, BackendError::Timeout { .. }), "{err:?}");
    // The grandchild holds stdout, but the group kill closes it: no 2 s drain wait (which would
    // make it ≥ 2.5 s).
    assert!(start.elapsed() < Duration::from_millis(1800), "{:?}", start.elapsed());
    let pids = read_pids(&pid_file).await;
    assert_all_gone(&pids, Duration::from_secs(3)).await;
}

#[tokio::test]
async fn grandchild_holding_stdout_after_exit_is_killed_and_does_not_hang() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pids");
    let start = Instant::now();
    let out = run(
        &grandchild_spec(&["spawn-grandchild", "50", "30000"], &pid_file),
        json!({}),
        json!({}),
        1000,
    )
    .await
    .unwrap();
    assert_eq!(out.value, json!(""));
    // Killed, not waited for: the 2 s pipe drain (or the grandchild's 5 s) would be ≥ 2 s.
    assert!(start.elapsed() < Duration::from_millis(1800), "{:?}", start.elapsed());
    let pids = read_pids(&pid_file).await;
    assert_all_gone(&pids, Duration::from_secs(3)).await;
}

#[tokio::test]
async fn dropping_the_future_kills_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pids");
    let s = grandchild_spec(&["spawn-grandchild", "30000"], &pid_file);
    let dropped = tokio::time::timeout(Duration::from_millis(300), run(&s, json!({}), json!({}), 5000)).await;
    assert!(dropped.is_err(), "the call should still have been running");
    let pids = read_pids(&pid_file).await;
    // Cleanup: TERM, up to 200 ms grace, KILL, reap — in a task on this runtime.
    assert_all_gone(&pids, Duration::from_secs(3)).await;
}

#[tokio::test]
async fn missing_program_is_a_spawn_error() {
    let mut s = spec(&[]);
    s.program = "/nonexistent/toolwire-no-such-program".into();
    let err = run(&s, json!({}), json!({}), 1000).await.unwrap_err();
    assert!(matches!(err, BackendError::Spawn(_)), "{err:?}");
    assert!(!err.is_retryable(true));

    // Looked up in the child's minimal PATH, not ours.
    s.program = "toolwire-no-such-program".into();
    let err = run(&s, json!({}), json!({}), 1000).await.unwrap_err();
    assert!(matches!(err, BackendError::Spawn(_)), "{err:?}");
}

#[tokio::test]
async fn nul_in_an_argument_is_rejected_before_spawning() {
    let err = run(&spec(&["echo", "{a}"]), json!({"a": "a\u{0}b"}), json!({}), 1000)
        .await
        .unwrap_err();
    assert!(matches!(err, BackendError::InvalidArgument(_)), "{err:?}");
}

#[tokio::test]
async fn oversized_argv_is_a_spawn_error_not_a_panic() {
    // One argument above Linux's MAX_ARG_STRLEN (128 KiB) fails exec with E2BIG.
    let big = "y".repeat(200 * 1024);
    let err = run(&spec(&["echo", "{a}"]), json!({"a": big}), json!({}), 1000)
        .await
        .unwrap_err();
    assert!(matches!(err, BackendError::Spawn(_)), "{err:?}");
}
