//! The execution engine end to end through the real server (`POST /v1/execute`,
//! `POST /v1/tools/{name}/call`) against the scripted loopback HTTP backend: every error kind an
//! HTTP tool can end with, retries only where allowed (with one `Idempotency-Key` per call),
//! deadlines, parallelism, concurrency rejection, secrets and state, and the request errors of
//! `/v1/execute` (`docs/api.md`, `docs/execution.md`; `docs/reliability.md`).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::common::mock_backend::{MockBackend, refused_addr};
use crate::common::server::{Served, config_for};
use crate::common::tools::{
    ToolsDir, assert_error, assert_openai_answers, execute_body, execute_ok, http_tool, merge, message,
    openai_completion, post_timed, result,
};
use serde_json::{Value, json};

/// Grace allowed on top of a deadline for the HTTP round trips of the test itself, on a loaded
/// 2-core machine. Each bound it makes stays well under what the test would see without the
/// behaviour under test (a backend that hangs for 30 s, a 10 s backend, a 120 s Retry-After).
const GRACE: Duration = Duration::from_millis(2000);

fn ms(d: u64) -> Duration {
    Duration::from_millis(d)
}

// ---------------------------------------------------------------------------------------------
// error kinds that never reach a backend
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn unknown_tool_lists_the_known_tools_and_obeys_the_allow_list() {
    let mock = MockBackend::start().await;
    let tools = ToolsDir::new(&[
        http_tool("alpha", &mock.url("/ok")),
        http_tool("beta", &mock.url("/ok")),
    ]);
    let server = Served::start_dir_without_replay(tools.path()).await;

    let resp = execute_ok(
        &server,
        &execute_body(&[("c1", "gamma", json!({})), ("c2", "alpha", json!({}))]),
    )
    .await;
    assert_openai_answers(&resp, &["c1", "c2"]);
    let r = result(&resp, 0);
    assert_error(r, "unknown_tool", false, 0);
    assert!(message(r).contains("`gamma`"), "{r}");
    assert!(message(r).contains("alpha, beta"), "lists the known tools: {r}");
    assert_eq!(result(&resp, 1)["ok"], json!(true), "{resp}");
    // The error text reaches the model in its tool message.
    let content = resp["messages"][0]["content"].as_str().unwrap();
    assert!(
        content.contains("unknown_tool") && content.contains("alpha, beta"),
        "{content}"
    );

    // With an allow-list, an existing tool outside it is unknown, and only allowed tools are
    // offered.
    let mut body = execute_body(&[("c1", "beta", json!({})), ("c2", "alpha", json!({}))]);
    body["options"] = json!({"tools": ["alpha"]});
    let before = mock.requests().len();
    let resp = execute_ok(&server, &body).await;
    let r = result(&resp, 0);
    assert_error(r, "unknown_tool", false, 0);
    assert!(message(r).contains("Available tools: alpha."), "{r}");
    assert_eq!(result(&resp, 1)["ok"], json!(true), "{resp}");
    assert_eq!(mock.requests().len(), before + 1, "only the allowed call ran");
    server.stop().await;
}

#[tokio::test]
async fn cut_off_and_non_object_arguments_are_args_not_json() {
    let mock = MockBackend::start().await;
    let tools = ToolsDir::new(&[http_tool("lookup", &mock.url("/ok"))]);
    let server = Served::start_dir_without_replay(tools.path()).await;
    let body = execute_body(&[
        ("c1", "lookup", json!("{\"city\": \"Par")),
        ("c2", "lookup", json!("[1, 2]")),
        ("c3", "lookup", json!("42")),
        ("c4", "lookup", json!({"city": "Paris"})),
    ]);
    let resp = execute_ok(&server, &body).await;
    assert_openai_answers(&resp, &["c1", "c2", "c3", "c4"]);
    let r = result(&resp, 0);
    assert_error(r, "args_not_json", false, 0);
    assert!(message(r).contains("not valid JSON"), "{r}");
    // The raw string is kept in the result so the agent can see what the model sent.
    assert_eq!(r["arguments"], json!("{\"city\": \"Par"));
    for i in [1, 2] {
        let r = result(&resp, i);
        assert_error(r, "args_not_json", false, 0);
        assert!(message(r).contains("must be a JSON object"), "{r}");
    }
    assert_eq!(result(&resp, 3)["ok"], json!(true), "{resp}");
    assert_eq!(mock.requests().len(), 1, "only the valid call reached the backend");
    server.stop().await;
}

#[tokio::test]
async fn invalid_arguments_give_pointer_paths_at_most_ten_and_never_echo_values() {
    const VALUE: &str = "zq-DISTINCTIVE-arg-value-7781";
    let mock = MockBackend::start().await;
    let mut props = serde_json::Map::new();
    for i in 0..12 {
        props.insert(format!("n{i:02}"), json!({"type": "integer"}));
    }
    props.insert(
        "nested".into(),
        json!({"type": "object", "properties": {"inner": {"type": "string", "enum": ["a", "b"]}}}),
    );
    props.insert("code".into(), json!({"type": "string", "pattern": "^[0-9]+$"}));
    let strict = merge(
        http_tool("strict", &mock.url("/ok")),
        json!({"parameters": {"type": "object", "properties": props}}),
    );
    let small = merge(
        http_tool("small", &mock.url("/ok")),
        json!({"parameters": {"type": "object", "required": ["city"], "properties": {
            "city": {"type": "string"},
            "nested": {"type": "object", "properties": {"inner": {"type": "string", "enum": ["a", "b"]}}},
            "code": {"type": "string", "pattern": "^[0-9]+$"},
        }, "additionalProperties": false}}),
    );
    let tools = ToolsDir::new(&[strict, small]);
    let server = Served::start_dir_without_replay(tools.path()).await;

    // Twelve type errors: only ten are reported.
    let mut many = serde_json::Map::new();
    for i in 0..12 {
        many.insert(format!("n{i:02}"), json!(VALUE));
    }
    let body = execute_body(&[
        ("c1", "strict", Value::Object(many)),
        (
            "c2",
            "small",
            json!({"nested": {"inner": VALUE}, "code": VALUE, "unexpected": VALUE}),
        ),
    ]);
    let resp = execute_ok(&server, &body).await;
    assert_openai_answers(&resp, &["c1", "c2"]);
    let err = assert_error(result(&resp, 0), "invalid_arguments", false, 0);
    let details = err["details"].as_array().unwrap();
    assert_eq!(details.len(), 10, "capped at ten: {err}");
    for d in details {
        let path = d["path"].as_str().unwrap();
        assert!(path.starts_with("/n"), "JSON pointer: {d}");
        assert!(!d["message"].as_str().unwrap().is_empty());
    }

    let err = assert_error(result(&resp, 1), "invalid_arguments", false, 0);
    let paths: BTreeSet<&str> = err["details"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["path"].as_str().unwrap())
        .collect();
    for p in ["", "/nested/inner", "/code"] {
        assert!(paths.contains(p), "path {p:?} in {err}");
    }
    assert!(mock.requests().is_empty(), "nothing ran");

    // The value is nowhere in what the errors produced: not in the results' errors, not in the
    // messages for the model. (It is, by design, in `results[].arguments` and `assistant`,
    // which echo what the model sent.)
    for i in 0..2 {
        assert!(!result(&resp, i)["error"].to_string().contains(VALUE), "{resp}");
    }
    assert!(!resp["messages"].to_string().contains(VALUE), "{}", resp["messages"]);
    let mut stripped = resp.clone();
    stripped["assistant"] = Value::Null;
    for r in stripped["results"].as_array_mut().unwrap() {
        r["arguments"] = Value::Null;
    }
    assert!(!stripped.to_string().contains(VALUE), "{stripped}");

    // The direct call endpoint masks the same way.
    let (s, r) = server
        .post_json(
            "/v1/tools/small/call",
            &json!({"arguments": {"city": 1, "code": VALUE}}),
        )
        .await;
    assert_eq!(s, 200);
    let err = assert_error(&r, "invalid_arguments", false, 0);
    assert!(!err.to_string().contains(VALUE), "{err}");
    server.stop().await;
}

// ---------------------------------------------------------------------------------------------
// timeouts and deadlines
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_hanging_backend_times_out_and_is_retried_only_when_idempotent() {
    let mock = MockBackend::start().await;
    let hang = merge(
        http_tool("hang", &mock.url("/hang")),
        json!({"timeout": "300ms", "retry": {"max_attempts": 3}}),
    );
    let hang_idem = merge(
        http_tool("hang_idem", &mock.url("/hang")),
        json!({"timeout": "250ms", "idempotent": true, "retry": {"max_attempts": 2}}),
    );
    let tools = ToolsDir::new(&[hang, hang_idem]);
    let server = Served::start_dir_without_replay(tools.path()).await;

    let (s, resp, took) = post_timed(&server, "/v1/execute", &execute_body(&[("c1", "hang", json!({}))])).await;
    assert_eq!(s, 200);
    let err = assert_error(result(&resp, 0), "timeout", true, 1);
    assert!(err["message"].as_str().unwrap().contains("did not answer"), "{err}");
    assert!(took >= ms(300) && took < ms(300) + GRACE, "{took:?}");
    assert_eq!(mock.count("/hang"), 1, "sent once, never retried (not idempotent)");

    let (s, resp, took) = post_timed(&server, "/v1/execute", &execute_body(&[("c1", "hang_idem", json!({}))])).await;
    assert_eq!(s, 200);
    let r = result(&resp, 0);
    assert_error(r, "timeout", true, 2);
    assert!(message(r).contains("after 2 attempts"), "{r}");
    assert!(took >= ms(500) && took < ms(500 + 20) + GRACE, "{took:?}");
    assert_eq!(mock.count("/hang"), 3);
    server.stop().await;
}

#[tokio::test]
async fn request_and_call_deadlines_end_as_deadline_exceeded_on_time() {
    let mock = MockBackend::start().await;
    let slow = merge(http_tool("slow", &mock.url("/hang")), json!({"timeout": "5s"}));
    // Retried (idempotent) timeouts: the second attempt is cut by the call deadline.
    let short = merge(
        http_tool("short_deadline", &mock.url("/hang")),
        json!({"timeout": "300ms", "deadline": "500ms", "idempotent": true}),
    );
    let tools = ToolsDir::new(&[slow, short]);
    let server = Served::start_dir_without_replay(tools.path()).await;

    // The request deadline (options.deadline_ms) cuts the attempt.
    let mut body = execute_body(&[("c1", "slow", json!({}))]);
    body["options"] = json!({"deadline_ms": 400});
    let (s, resp, took) = post_timed(&server, "/v1/execute", &body).await;
    assert_eq!(s, 200);
    let r = result(&resp, 0);
    assert_error(r, "deadline_exceeded", true, 1);
    assert!(message(r).contains("deadline"), "{r}");
    assert!(took >= ms(400) && took < ms(400) + GRACE, "{took:?}");

    // So does the tool's own call deadline, over all attempts.
    let (s, resp, took) = post_timed(
        &server,
        "/v1/execute",
        &execute_body(&[("c1", "short_deadline", json!({}))]),
    )
    .await;
    assert_eq!(s, 200);
    assert_error(result(&resp, 0), "deadline_exceeded", true, 2);
    assert!(took >= ms(500) && took < ms(500) + GRACE, "{took:?}");
    server.stop().await;
}

// ---------------------------------------------------------------------------------------------
// backend failures and retries
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_refused_port_is_backend_unreachable_after_the_allowed_retries() {
    let addr = refused_addr().await;
    let tools = ToolsDir::new(&[http_tool("down", &format!("http://{addr}/x"))]);
    let server = Served::start_dir_without_replay(tools.path()).await;
    let (s, resp, took) = post_timed(&server, "/v1/execute", &execute_body(&[("c1", "down", json!({}))])).await;
    assert_eq!(s, 200);
    let r = result(&resp, 0);
    // Nothing was sent, so every attempt is allowed (3).
    assert_error(r, "backend_unreachable", true, 3);
    assert!(message(r).contains("could not connect"), "{r}");
    // Refused connects fail at once; only a hang (a connect timeout per attempt) would take long.
    assert!(took < ms(5000), "{took:?}");
    server.stop().await;
}

#[tokio::test]
async fn status_404_is_never_retried_even_for_idempotent_tools() {
    let mock = MockBackend::start().await;
    let t = merge(
        http_tool("missing", &mock.url("/fail/3/404")),
        json!({"idempotent": true, "retry": {"max_attempts": 5}}),
    );
    let tools = ToolsDir::new(&[t]);
    let server = Served::start_dir_without_replay(tools.path()).await;
    let resp = execute_ok(&server, &execute_body(&[("c1", "missing", json!({}))])).await;
    let r = result(&resp, 0);
    let err = assert_error(r, "backend_status", false, 1);
    assert_eq!(err["status"], json!(404));
    assert!(message(r).contains("scripted failure"), "body excerpt: {r}");
    assert_eq!(mock.count("/fail/3/404"), 1);
    server.stop().await;
}

#[tokio::test]
async fn status_503_is_retried_and_reported_with_a_body_excerpt() {
    let mock = MockBackend::start().await;
    let t = merge(
        http_tool("busy", &mock.url("/status/503?body=the-database-is-overloaded-7731")),
        json!({"retry": {"max_attempts": 2}}),
    );
    let tools = ToolsDir::new(&[t]);
    let server = Served::start_dir_without_replay(tools.path()).await;
    let resp = execute_ok(&server, &execute_body(&[("c1", "busy", json!({}))])).await;
    let r = result(&resp, 0);
    let err = assert_error(r, "backend_status", true, 2);
    assert_eq!(err["status"], json!(503));
    assert!(message(r).contains("the-database-is-overloaded-7731"), "{r}");
    assert!(message(r).contains("after 2 attempts"), "{r}");
    assert_eq!(mock.count("/status/503"), 2);
    server.stop().await;
}

#[tokio::test]
async fn retry_after_longer_than_allowed_is_handed_to_the_agent_at_once() {
    let mock = MockBackend::start().await;
    let t = http_tool("limited", &mock.url("/status/429?retry_after=120"));
    let tools = ToolsDir::new(&[t]);
    let server = Served::start_dir_without_replay(tools.path()).await;
    let (s, resp, took) = post_timed(&server, "/v1/execute", &execute_body(&[("c1", "limited", json!({}))])).await;
    assert_eq!(s, 200);
    let r = result(&resp, 0);
    let err = assert_error(r, "backend_status", true, 1);
    assert_eq!(err["status"], json!(429));
    assert_eq!(err["retry_after_ms"], json!(120_000));
    assert!(message(r).contains("rate-limiting"), "{r}");
    assert!(took < ms(5000), "no waiting (the Retry-After is 120 s): {took:?}");
    assert_eq!(mock.count("/status/429"), 1);
    server.stop().await;
}

#[tokio::test]
async fn a_short_retry_after_is_honoured() {
    let mock = MockBackend::start().await;
    let t = merge(
        http_tool("limited", &mock.url("/status/429?retry_after=1")),
        json!({"retry": {"max_attempts": 2}}),
    );
    let tools = ToolsDir::new(&[t]);
    let server = Served::start_dir_without_replay(tools.path()).await;
    let (s, resp, took) = post_timed(&server, "/v1/execute", &execute_body(&[("c1", "limited", json!({}))])).await;
    assert_eq!(s, 200);
    let err = assert_error(result(&resp, 0), "backend_status", true, 2);
    assert_eq!(err["retry_after_ms"], json!(1000));
    // The 1 s wait replaced the (10 ms) backoff.
    assert!(took >= ms(1000) && took < ms(1000) + GRACE, "{took:?}");
    server.stop().await;
}

#[tokio::test]
async fn retries_to_success_reuse_one_idempotency_key_and_the_same_body() {
    let mock = MockBackend::start().await;
    let tools = ToolsDir::new(&[http_tool("flaky", &mock.url("/fail/2/503"))]);
    let server = Served::start_dir_without_replay(tools.path()).await;
    let args_a = json!({"q": "first", "n": 1, "nested": {"x": [1, 2]}});
    let args_b = json!({"q": "second"});
    let body = execute_body(&[("call_a", "flaky", args_a.clone()), ("call_b", "flaky", args_b.clone())]);
    let resp = execute_ok(&server, &body).await;
    assert_openai_answers(&resp, &["call_a", "call_b"]);
    for i in 0..2 {
        let r = result(&resp, i);
        assert_eq!(r["ok"], json!(true), "{r}");
        assert_eq!(r["attempts"], json!(3), "{r}");
        assert_eq!(r["output"], json!({"ok": true, "attempt": 3}), "{r}");
    }

    let reqs = mock.requests();
    assert_eq!(reqs.len(), 6, "three attempts per call");
    let mut prefixes = BTreeSet::new();
    for (id, args) in [("call_a", &args_a), ("call_b", &args_b)] {
        let mine: Vec<_> = reqs
            .iter()
            .filter(|r| {
                r.header("idempotency-key")
                    .is_some_and(|k| k.ends_with(&format!(":{id}")))
            })
            .collect();
        assert_eq!(mine.len(), 3, "{id}: every attempt carries the same key");
        let key = mine[0].header("idempotency-key").unwrap();
        assert!(mine.iter().all(|r| r.header("idempotency-key") == Some(key)));
        assert!(mine.iter().all(|r| r.method == "POST" && r.body == mine[0].body));
        assert_eq!(&mine[0].body_value(), args, "the arguments are the body");
        prefixes.insert(key.rsplit_once(':').unwrap().0.to_owned());
    }
    assert_eq!(prefixes.len(), 1, "one request id for both calls");

    // Another request gets another key for the same call id.
    mock.reset_records();
    let resp = execute_ok(&server, &execute_body(&[("call_a", "flaky", args_a.clone())])).await;
    assert_eq!(result(&resp, 0)["attempts"], json!(3), "{resp}");
    let key = mock.requests()[0].header("idempotency-key").unwrap().to_owned();
    assert!(key.ends_with(":call_a"));
    assert!(!prefixes.contains(key.rsplit_once(':').unwrap().0), "{key}");
    server.stop().await;
}

#[tokio::test]
async fn status_500_is_retried_only_for_idempotent_tools() {
    let mock = MockBackend::start().await;
    let plain = http_tool("plain", &mock.url("/fail/1/500"));
    let idem = merge(http_tool("idem", &mock.url("/fail/1/500")), json!({"idempotent": true}));
    let tools = ToolsDir::new(&[plain, idem]);
    let server = Served::start_dir_without_replay(tools.path()).await;
    let resp = execute_ok(
        &server,
        &execute_body(&[("c1", "plain", json!({"a": 1})), ("c2", "idem", json!({"a": 1}))]),
    )
    .await;
    let err = assert_error(result(&resp, 0), "backend_status", true, 1);
    assert_eq!(err["status"], json!(500));
    let r = result(&resp, 1);
    assert_eq!(r["ok"], json!(true), "{r}");
    assert_eq!(r["attempts"], json!(2), "{r}");
    let reqs = mock.requests();
    let count = |id: &str| {
        reqs.iter()
            .filter(|r| r.header("idempotency-key").is_some_and(|k| k.ends_with(id)))
            .count()
    };
    assert_eq!((count(":c1"), count(":c2")), (1, 2));
    server.stop().await;
}

#[tokio::test]
async fn huge_json_is_output_too_large_and_long_text_is_truncated_and_marked() {
    let mock = MockBackend::start().await;
    let big = http_tool("big_json", &mock.url("/huge?bytes=1200000&type=json"));
    let text = merge(
        http_tool("long_text", &mock.url("/huge?bytes=5000&type=text")),
        json!({"max_output_bytes": 1000}),
    );
    let tools = ToolsDir::new(&[big, text]);
    let server = Served::start_dir_without_replay(tools.path()).await;
    let resp = execute_ok(
        &server,
        &execute_body(&[("c1", "big_json", json!({})), ("c2", "long_text", json!({}))]),
    )
    .await;
    let r = result(&resp, 0);
    assert_error(r, "output_too_large", false, 1);
    assert!(message(r).contains("Ask for less"), "{r}");
    let r = result(&resp, 1);
    assert_eq!(r["ok"], json!(true), "{r}");
    assert_eq!(r["truncated"], json!(true), "{r}");
    let out = r["output"].as_str().unwrap();
    assert!(out.len() <= 1000, "{}", out.len());
    assert!(out.contains("[toolwire: output truncated"), "{out}");
    assert!(resp.to_string().len() < 20_000, "the huge body is not in the response");
    server.stop().await;
}

// ---------------------------------------------------------------------------------------------
// concurrency and parallelism
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn per_tool_concurrency_rejects_a_call_that_cannot_start_before_the_deadline() {
    let mock = MockBackend::start().await;
    let t = merge(
        http_tool("single", &mock.url("/slow?ms=10000")),
        json!({"concurrency": 1, "timeout": "5s"}),
    );
    let tools = ToolsDir::new(&[t]);
    let server = Served::start_dir_without_replay(tools.path()).await;
    let mut body = execute_body(&[("c1", "single", json!({})), ("c2", "single", json!({}))]);
    body["options"] = json!({"deadline_ms": 500});
    let (s, resp, took) = post_timed(&server, "/v1/execute", &body).await;
    assert_eq!(s, 200);
    assert_openai_answers(&resp, &["c1", "c2"]);
    let kinds: BTreeSet<&str> = (0..2)
        .map(|i| result(&resp, i)["error"]["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, BTreeSet::from(["deadline_exceeded", "rejected"]), "{resp}");
    let rejected = (0..2)
        .map(|i| result(&resp, i))
        .find(|r| r["error"]["kind"] == "rejected")
        .unwrap();
    assert_error(rejected, "rejected", true, 0);
    assert!(message(rejected).contains("tool limit"), "{rejected}");
    assert!(took < ms(500) + GRACE, "{took:?}");
    assert_eq!(mock.count("/slow"), 1, "the rejected call never reached the backend");
    server.stop().await;
}

#[tokio::test]
async fn eight_slow_calls_run_in_parallel_or_in_order_when_asked() {
    let mock = MockBackend::start().await;
    // 8 × 500 ms: ≥ 4 s one after the other, 0.5 s in parallel.
    let tools = ToolsDir::new(&[http_tool("slow", &mock.url("/slow?ms=500"))]);
    let server = Served::start_dir_without_replay(tools.path()).await;
    let ids: Vec<String> = (0..8).map(|i| format!("call_{i}")).collect();
    let calls: Vec<(&str, &str, Value)> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| (id.as_str(), "slow", json!({"i": i})))
        .collect();
    let id_refs: Vec<&str> = ids.iter().map(String::as_str).collect();

    let (s, resp, took) = post_timed(&server, "/v1/execute", &execute_body(&calls)).await;
    assert_eq!(s, 200);
    assert_openai_answers(&resp, &id_refs);
    assert!((0..8).all(|i| result(&resp, i)["ok"] == json!(true)), "{resp}");
    assert!(took < ms(2500), "parallel: {took:?}");

    mock.reset_records();
    let mut body = execute_body(&calls);
    body["options"] = json!({"parallel": false});
    let (s, resp, took) = post_timed(&server, "/v1/execute", &body).await;
    assert_eq!(s, 200);
    assert_openai_answers(&resp, &id_refs);
    assert!(took >= ms(4000), "one by one: {took:?}");
    let arrived: Vec<Value> = mock.requests().iter().map(|r| r.body_value()["i"].clone()).collect();
    assert_eq!(
        arrived,
        (0..8).map(|i| json!(i)).collect::<Vec<_>>(),
        "call order at the backend"
    );
    server.stop().await;
}

// ---------------------------------------------------------------------------------------------
// secrets and state
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn secrets_never_appear_in_error_messages() {
    const SECRET: &str = "s3cr3t-TOKEN-4f9a-from-file";
    const ENV_DEFAULT: &str = "s3cr3t-ENV-default-91bd";
    let mock = MockBackend::start().await;
    let refused = refused_addr().await;
    // A backend that echoes the credential in its error body (many do).
    let echoing = merge(
        http_tool("echoing", &mock.url("/status/401")),
        json!({"http": {
            "query": {"body": "invalid token ${file:secret.txt} for key ${env:TOOLWIRE_TEST_UNSET_9F2:-s3cr3t-ENV-default-91bd}"},
            "headers": {"Authorization": "Bearer ${file:secret.txt}"},
        }}),
    );
    let down = http_tool("down", &format!("http://{refused}/x?token=${{file:secret.txt}}"));
    let tools = ToolsDir::with_files(&[("secret.txt", &format!("{SECRET}\n"))], &[echoing, down]);
    let server = Served::start_dir_without_replay(tools.path()).await;
    let resp = execute_ok(
        &server,
        &execute_body(&[("c1", "echoing", json!({})), ("c2", "down", json!({}))]),
    )
    .await;
    assert_error(result(&resp, 0), "backend_status", false, 1);
    assert_error(result(&resp, 1), "backend_unreachable", true, 3);
    // The secret was used…
    let req = &mock.requests()[0];
    assert_eq!(req.header("authorization"), Some(format!("Bearer {SECRET}").as_str()));
    // …and the error still says what the backend said, without it.
    assert!(message(result(&resp, 0)).contains("invalid token"), "{resp}");
    let text = resp.to_string();
    for s in [SECRET, ENV_DEFAULT] {
        assert!(!text.contains(s), "secret leaked: {text}");
    }
    server.stop().await;
}

#[tokio::test]
async fn state_reaches_the_backend_only_where_injected_and_never_the_response() {
    const USER: &str = "u-STATE-8812";
    const TENANT: &str = "tenant-STATE-5521";
    let mock = MockBackend::start().await;
    let with_state = merge(
        http_tool("with_state", &mock.url("/slow?ms=0")),
        json!({"inject": {"user_id": "state.user_id"}, "http": {"headers": {"X-Tenant": "{state.tenant}"}}}),
    );
    let without_state = http_tool("without_state", &mock.url("/slow?ms=0"));
    let tools = ToolsDir::new(&[with_state, without_state]);
    let server = Served::start_dir_without_replay(tools.path()).await;
    let mut body = execute_body(&[
        ("c1", "with_state", json!({"q": 1})),
        ("c2", "without_state", json!({"q": 2})),
    ]);
    body["state"] = json!({"user_id": USER, "tenant": TENANT});
    let resp = execute_ok(&server, &body).await;
    assert_openai_answers(&resp, &["c1", "c2"]);
    assert!((0..2).all(|i| result(&resp, i)["ok"] == json!(true)), "{resp}");
    // The model's arguments are reported as sent, without the injected value.
    assert_eq!(result(&resp, 0)["arguments"], json!({"q": 1}));
    let text = resp.to_string();
    assert!(!text.contains(USER) && !text.contains(TENANT), "state leaked: {text}");

    let reqs = mock.requests();
    let by_call = |id: &str| {
        reqs.iter()
            .find(|r| r.header("idempotency-key").is_some_and(|k| k.ends_with(id)))
            .unwrap()
            .clone()
    };
    let injected = by_call(":c1");
    assert_eq!(injected.body_value(), json!({"q": 1, "user_id": USER}));
    assert_eq!(injected.header("x-tenant"), Some(TENANT));
    let plain = by_call(":c2");
    assert_eq!(plain.body_value(), json!({"q": 2}));
    let seen = format!("{:?}", plain.headers);
    assert!(!seen.contains(USER) && !seen.contains(TENANT), "{seen}");

    // The call endpoint injects the same way.
    mock.reset_records();
    let (s, r) = server
        .post_json(
            "/v1/tools/with_state/call",
            &json!({"arguments": {"q": 3}, "state": {"user_id": USER, "tenant": TENANT}}),
        )
        .await;
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["ok"], json!(true), "{r}");
    assert_eq!(mock.requests()[0].body_value(), json!({"q": 3, "user_id": USER}));
    assert!(!r.to_string().contains(USER));
    server.stop().await;
}

// ---------------------------------------------------------------------------------------------
// the direct call endpoint
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn the_call_endpoint_returns_one_result_object_ok_or_failed() {
    let mock = MockBackend::start().await;
    let tools = ToolsDir::new(&[
        http_tool("echo", &mock.url("/ok")),
        merge(
            http_tool("broken", &mock.url("/fail/9/503")),
            json!({"retry": {"max_attempts": 2}}),
        ),
    ]);
    let server = Served::start_dir_without_replay(tools.path()).await;
    let (s, r) = server
        .post_json("/v1/tools/echo/call", &json!({"arguments": {"x": 1}}))
        .await;
    assert_eq!(s, 200);
    assert_eq!(r["ok"], json!(true), "{r}");
    assert_eq!(r["id"], Value::Null);
    assert_eq!(r["name"], json!("echo"));
    assert_eq!(r["attempts"], json!(1));
    assert_eq!(r["output"]["body"], json!({"x": 1}));
    assert!(r["duration_ms"].is_u64());
    // No id: the key uses the call's index.
    assert!(
        r["output"]["headers"]["idempotency-key"]
            .as_str()
            .unwrap()
            .ends_with(":#0")
    );

    let (s, r) = server
        .post_json("/v1/tools/broken/call", &json!({"arguments": {}}))
        .await;
    assert_eq!(s, 200, "a tool failure is not an HTTP error");
    let err = assert_error(&r, "backend_status", true, 2);
    assert_eq!(err["status"], json!(503));

    let (s, r) = server.post_json("/v1/tools/nope/call", &json!({"arguments": {}})).await;
    assert_eq!(s, 404);
    assert_eq!(r["error"]["code"], json!("unknown_tool"));
    let (s, r) = server
        .post_json("/v1/tools/echo/call", &json!({"arguments": {}, "state": "x"}))
        .await;
    assert_eq!(s, 422);
    assert_eq!(r["error"]["code"], json!("unprocessable"));
    server.stop().await;
}

// ---------------------------------------------------------------------------------------------
// request errors of /v1/execute
// ---------------------------------------------------------------------------------------------

fn assert_request_error(status: u16, body: &Value, want_status: u16, code: &str) {
    assert_eq!(status, want_status, "{body}");
    assert_eq!(body["error"]["code"], json!(code), "{body}");
    assert!(
        body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
}

#[tokio::test]
async fn request_errors_of_execute_use_the_error_shape_and_run_nothing() {
    let mock = MockBackend::start().await;
    let tools = ToolsDir::new(&[http_tool("t", &mock.url("/ok"))]);
    let server = Served::start_dir_without_replay(tools.path()).await;
    let url = format!("{}/v1/execute", server.base);

    // 415 without a content type.
    let resp = server
        .client
        .post(&url)
        .body(execute_body(&[("c1", "t", json!({}))]).to_string())
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let body: Value = resp.json().await.unwrap();
    assert_request_error(status, &body, 415, "unsupported_media_type");

    // 400 with line and column.
    let resp = server
        .client
        .post(&url)
        .header("content-type", "application/json")
        .body("{\n  \"completion\": {\"a\": tru}\n}")
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let body: Value = resp.json().await.unwrap();
    assert_request_error(status, &body, 400, "invalid_json");
    assert_eq!(body["error"]["details"][0]["line"], json!(2), "{body}");
    assert!(body["error"]["details"][0]["column"].as_u64().unwrap() > 0, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("line 2"), "{body}");

    let completion = openai_completion(&[("c1", "t", json!({}))]);
    let (s, b) = server
        .post_json("/v1/execute", &json!({"provider": "palm2", "completion": completion}))
        .await;
    assert_request_error(s, &b, 422, "unknown_provider");
    assert!(b["error"]["message"].as_str().unwrap().contains("palm2"), "{b}");

    let (s, b) = server
        .post_json(
            "/v1/execute",
            &json!({"provider": "anthropic", "completion": completion}),
        )
        .await;
    assert_request_error(s, &b, 422, "provider_mismatch");
    assert_eq!(b["error"]["details"], json!([{"detected": "openai_chat"}]), "{b}");
    assert!(b["error"]["message"].as_str().unwrap().contains("openai_chat"), "{b}");

    let (s, b) = server
        .post_json(
            "/v1/execute",
            &execute_body(&[("dup", "t", json!({})), ("dup", "t", json!({}))]),
        )
        .await;
    assert_request_error(s, &b, 422, "duplicate_call_id");
    assert!(b["error"]["message"].as_str().unwrap().contains("`dup`"), "{b}");

    for state in [json!([1]), json!("s"), json!(3)] {
        let mut body = execute_body(&[("c1", "t", json!({}))]);
        body["state"] = state;
        let (s, b) = server.post_json("/v1/execute", &body).await;
        assert_request_error(s, &b, 422, "unprocessable");
        assert!(b["error"]["message"].as_str().unwrap().contains("state"), "{b}");
    }
    assert!(mock.requests().is_empty(), "no request error runs a call");
    server.stop().await;
}

#[tokio::test]
async fn too_many_calls_is_a_422_with_the_configured_limit() {
    let mock = MockBackend::start().await;
    let tools = ToolsDir::new(&[http_tool("t", &mock.url("/ok"))]);
    let mut config = config_for(tools.path());
    config.limits.calls_per_request = 2;
    let server = Served::start(config).await;
    let ok = execute_ok(
        &server,
        &execute_body(&[("c1", "t", json!({})), ("c2", "t", json!({}))]),
    )
    .await;
    assert_eq!(ok["results"].as_array().unwrap().len(), 2);
    let started = Instant::now();
    let (s, b) = server
        .post_json(
            "/v1/execute",
            &execute_body(&[("c1", "t", json!({})), ("c2", "t", json!({})), ("c3", "t", json!({}))]),
        )
        .await;
    assert_request_error(s, &b, 422, "too_many_calls");
    let msg = b["error"]["message"].as_str().unwrap();
    assert!(msg.contains('3') && msg.contains('2'), "{msg}");
    // Refused before anything ran (the request count below); the bound only catches a hang.
    assert!(started.elapsed() < ms(5000));
    assert_eq!(mock.requests().len(), 2, "the rejected request ran nothing");
    server.stop().await;
}
