//! `HttpBackend::call` against the scripted mock backend on 127.0.0.1.

use std::time::{Duration, Instant};

use crate::common::mock_backend::{MockBackend, refused_addr};
use percent_encoding::percent_decode_str;
use serde_json::{Map, Value, json};
use toolwire::backend::http::HttpBackend;
use toolwire::backend::{Attempt, BackendError, Output};
use toolwire::config::HumanDuration;
use toolwire::config::server::HttpClientConfig;
use toolwire::template::Template;
use toolwire::tool::{HttpBody, HttpSpec, Policy, RetryPolicy};

const KEY: &str = "req-1:call_1";

fn backend() -> HttpBackend {
    HttpBackend::new(&HttpClientConfig {
        connect_timeout: HumanDuration(Duration::from_millis(300)),
        pool_max_idle_per_host: 8,
        ca_file: None,
        client_cert: None,
        client_key: None,
    })
    .unwrap()
}

fn policy(max_read_bytes: usize) -> Policy {
    Policy {
        timeout: Duration::from_millis(500),
        deadline: Duration::from_secs(2),
        idempotent: false,
        replay: true,
        retry: RetryPolicy {
            max_attempts: 1,
            backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(10),
        },
        concurrency: None,
        max_read_bytes,
        max_output_bytes: max_read_bytes,
        kill_grace: Duration::from_millis(100),
    }
}

fn spec(method: reqwest::Method, url: &str) -> HttpSpec {
    HttpSpec {
        method,
        url: Template::parse(url).unwrap(),
        query: vec![],
        headers: vec![],
        body: HttpBody::None,
        egress_allow: vec![],
        egress_deny: vec![],
        tls: None,
        allow_path_traversal: false,
        static_url: None,
    }
}

fn get(url: &str) -> HttpSpec {
    spec(reqwest::Method::GET, url)
}

/// Runs one attempt with `args`, the given read cap and timeout.
async fn run_with(spec: &HttpSpec, args: Value, cap: usize, timeout: Duration) -> Result<Output, BackendError> {
    let args: Map<String, Value> = args.as_object().cloned().unwrap_or_default();
    let state = json!({"user_id": "u-42"});
    let policy = policy(cap);
    let attempt = Attempt {
        call_id: Some("call_1"),
        attempt: 1,
        arguments: &args,
        state: &state,
        idempotency_key: KEY,
        timeout,
        policy: &policy,
    };
    backend().call(spec, &attempt).await
}

async fn run(spec: &HttpSpec, args: Value) -> Result<Output, BackendError> {
    run_with(spec, args, 64 * 1024, Duration::from_millis(500)).await
}

#[tokio::test]
async fn json_stays_json_and_sends_idempotency_key_and_user_agent() {
    let mock = MockBackend::start().await;
    let out = run(&get(&mock.url("/ok")), json!({})).await.unwrap();
    assert!(!out.truncated);
    assert_eq!(out.value["method"], "GET");
    assert_eq!(out.value["path"], "/ok");
    assert_eq!(out.value["headers"]["idempotency-key"], KEY);
    let ua = out.value["headers"]["user-agent"].as_str().unwrap();
    assert!(ua.starts_with("toolwire/"), "{ua}");
    assert_eq!(out.value["body"], Value::Null);
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].header("idempotency-key"), Some(KEY));
    // Nothing is forwarded implicitly: only what reqwest/hyper need, plus ours.
    for (name, _) in &reqs[0].headers {
        assert!(
            ["host", "accept", "user-agent", "idempotency-key"].contains(&name.as_str()),
            "unexpected header {name}"
        );
    }
}

#[tokio::test]
async fn text_stays_text() {
    let mock = MockBackend::start().await;
    let out = run(&get(&mock.url("/text?body=hello%20there")), json!({}))
        .await
        .unwrap();
    assert_eq!(out.value, json!("hello there"));
    assert!(!out.truncated);
}

#[tokio::test]
async fn path_placeholder_arrives_as_one_segment() {
    let mock = MockBackend::start().await;
    let mut s = get(&mock.url("/ok/files/{name}/raw"));
    // Opted out of the default `..` refusal (tests/security_tls.rs), to see the encoding.
    s.allow_path_traversal = true;
    for name in ["../../etc/passwd", "a/b?c#d", "x y%", "naïve 日本"] {
        let out = run(&s, json!({"name": name})).await.unwrap();
        let path = out.value["path"].as_str().unwrap();
        let segments: Vec<&str> = path.split('/').collect();
        assert_eq!(segments.len(), 5, "{name}: {path}");
        assert_eq!(segments[2], "files");
        assert_eq!(segments[4], "raw");
        assert_eq!(percent_decode_str(segments[3]).decode_utf8().unwrap(), name);
        assert_eq!(out.value["raw_query"], Value::Null, "{name}");
    }
    assert_eq!(mock.count("/ok/files/..%2F..%2Fetc%2Fpasswd/raw"), 1);
    let err = run(&s, json!({"name": ".."})).await.unwrap_err();
    assert!(matches!(err, BackendError::InvalidArgument(_)), "{err:?}");
}

#[tokio::test]
async fn query_and_header_templates() {
    let mock = MockBackend::start().await;
    let mut s = get(&mock.url("/ok"));
    s.query = vec![
        ("q".into(), Template::parse("{q}").unwrap()),
        ("units".into(), Template::parse("{units}").unwrap()),
        ("user".into(), Template::parse("{state.user_id}").unwrap()),
    ];
    s.headers = vec![
        ("X-Token".into(), Template::parse("Bearer {token}").unwrap()),
        ("X-Optional".into(), Template::parse("{absent}").unwrap()),
        ("Idempotency-Key".into(), Template::parse("spoofed").unwrap()),
    ];
    let out = run(&s, json!({"q": "a&b=c #d", "token": "t-1"})).await.unwrap();
    assert_eq!(out.value["query"], json!({"q": "a&b=c #d", "user": "u-42"}));
    assert_eq!(out.value["headers"]["x-token"], "Bearer t-1");
    assert_eq!(out.value["headers"]["idempotency-key"], KEY);
    assert!(out.value["headers"].get("x-optional").is_none());
}

#[tokio::test]
async fn header_with_line_break_is_refused_before_sending() {
    let mock = MockBackend::start().await;
    let mut s = get(&mock.url("/ok"));
    s.headers = vec![("X-Name".into(), Template::parse("{name}").unwrap())];
    for evil in ["a\r\nX-Injected: 1", "a\nb", "a\rb"] {
        let err = run(&s, json!({"name": evil})).await.unwrap_err();
        assert!(matches!(err, BackendError::InvalidArgument(_)), "{err:?}");
    }
    assert_eq!(mock.requests().len(), 0);
}

#[tokio::test]
async fn post_sends_arguments_as_json() {
    let mock = MockBackend::start().await;
    let mut s = spec(reqwest::Method::POST, &mock.url("/ok"));
    s.body = HttpBody::Arguments;
    let args = json!({"city": "Paris", "days": 3, "tags": ["a"], "nested": {"x": null}});
    let out = run(&s, args.clone()).await.unwrap();
    assert_eq!(out.value["method"], "POST");
    assert_eq!(out.value["body"], args);
    assert_eq!(out.value["headers"]["content-type"], "application/json");
    assert_eq!(out.value["headers"]["idempotency-key"], KEY);
}

#[tokio::test]
async fn body_template_keeps_types() {
    let mock = MockBackend::start().await;
    let mut s = spec(reqwest::Method::PUT, &mock.url("/ok"));
    s.body = HttpBody::Template(json!({
        "count": "{count}",
        "flag": "{flag}",
        "label": "n={count}",
        "user": "{state.user_id}",
        "missing": "{absent}",
        "list": ["{obj}", 7]
    }));
    let out = run(&s, json!({"count": 5, "flag": false, "obj": {"k": [1, 2]}}))
        .await
        .unwrap();
    assert_eq!(
        out.value["body"],
        json!({"count": 5, "flag": false, "label": "n=5", "user": "u-42", "missing": null, "list": [{"k": [1, 2]}, 7]})
    );
}

#[tokio::test]
async fn redirect_is_not_followed() {
    let mock = MockBackend::start().await;
    let target = mock.url("/ok");
    let s = get(&mock.url(&format!("/redirect?to={target}")));
    let err = run(&s, json!({})).await.unwrap_err();
    assert!(matches!(err, BackendError::Status { status: 302, .. }), "{err:?}");
    assert_eq!(mock.count("/ok"), 0);
}

#[tokio::test]
async fn non_2xx_is_status_with_excerpt_and_retry_after() {
    let mock = MockBackend::start().await;
    let s = get(&mock.url("/status/429?retry_after=7&body=slow%20down%0Aplease"));
    let err = run(&s, json!({})).await.unwrap_err();
    assert_eq!(
        err,
        BackendError::Status {
            status: 429,
            body_excerpt: "slow down please".into(),
            retry_after: Some(Duration::from_secs(7)),
        }
    );

    let err = run(&get(&mock.url("/status/503?retry_after=garbage")), json!({}))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, BackendError::Status { status: 503, retry_after: None, body_excerpt } if body_excerpt.contains("status 503")),
        "{err:?}"
    );

    // A long error body is read up to 4 KiB (so secrets are masked before the cut), and the
    // model sees a 512-byte excerpt.
    let long = "e".repeat(5000);
    let err = run(&get(&mock.url(&format!("/status/500?body={long}"))), json!({}))
        .await
        .unwrap_err();
    let message = err.to_tool_error().message;
    let BackendError::Status { body_excerpt, .. } = err else {
        panic!("{err:?}")
    };
    assert_eq!(body_excerpt.len(), 4096);
    let shown = message.split(" Response body: ").nth(1).unwrap_or_default();
    assert_eq!(shown, "e".repeat(512), "{message}");
}

#[tokio::test]
async fn fail_endpoint_counts_per_idempotency_key() {
    let mock = MockBackend::start().await;
    let s = get(&mock.url("/fail/2/503"));
    for _ in 0..2 {
        let err = run(&s, json!({})).await.unwrap_err();
        assert!(matches!(err, BackendError::Status { status: 503, .. }), "{err:?}");
    }
    let out = run(&s, json!({})).await.unwrap();
    assert_eq!(out.value, json!({"ok": true, "attempt": 3}));
    assert_eq!(mock.count("/fail/2/503"), 3);
    assert!(mock.requests().iter().all(|r| r.header("idempotency-key") == Some(KEY)));
}

#[tokio::test]
async fn connection_refused_is_connect() {
    let addr = refused_addr().await;
    let err = run(&get(&format!("http://{addr}/ok")), json!({})).await.unwrap_err();
    assert!(matches!(err, BackendError::Connect(_)), "{err:?}");
    assert!(err.is_retryable(false));
    // The message reaches the model: it must not carry the URL.
    assert!(!err.to_string().contains(&addr.port().to_string()), "{err}");
}

#[tokio::test]
async fn hang_times_out_after_sending() {
    let mock = MockBackend::start().await;
    let timeout = Duration::from_millis(300);
    let started = Instant::now();
    let err = run_with(&get(&mock.url("/hang")), json!({}), 1024, timeout)
        .await
        .unwrap_err();
    let elapsed = started.elapsed();
    assert_eq!(
        err,
        BackendError::Timeout {
            timeout,
            sent: true,
            signal: None
        }
    );
    assert!(
        // The upper bound: well under the mock's 30 s hang, with room for a loaded machine.
        elapsed >= timeout && elapsed < timeout + Duration::from_millis(2000),
        "{elapsed:?}"
    );
    assert_eq!(mock.count("/hang"), 1);
}

#[tokio::test]
async fn slow_answer_within_timeout_succeeds_and_beyond_times_out() {
    let mock = MockBackend::start().await;
    let out = run(&get(&mock.url("/slow?ms=50")), json!({})).await.unwrap();
    assert_eq!(out.value, json!({"slept_ms": 50}));
    let err = run_with(
        &get(&mock.url("/slow?ms=400")),
        json!({}),
        1024,
        Duration::from_millis(150),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, BackendError::Timeout { sent: true, .. }), "{err:?}");
}

#[tokio::test]
async fn huge_json_is_too_large() {
    let mock = MockBackend::start().await;
    let cap = 64 * 1024;
    // 500 MB: reading it all would take far longer than the generous bound below, which only
    // has to hold on a loaded 2-core machine.
    let s = get(&mock.url("/huge?bytes=500000000&type=json"));
    let started = Instant::now();
    let err = run_with(&s, json!({}), cap, Duration::from_secs(3)).await.unwrap_err();
    assert_eq!(err, BackendError::OutputTooLarge { limit: cap });
    // Stopped at the cap instead of reading 500 MB.
    assert!(started.elapsed() < Duration::from_millis(2500));

    // Under the cap, the same endpoint is fine.
    let out = run_with(
        &get(&mock.url("/huge?bytes=1000&type=json")),
        json!({}),
        cap,
        Duration::from_millis(500),
    )
    .await
    .unwrap();
    assert_eq!(out.value.as_str().unwrap().len(), 998);
}

#[tokio::test]
async fn huge_text_is_truncated_at_a_char_boundary() {
    let mock = MockBackend::start().await;
    let cap = 10_001; // odd, so the cut lands inside multi-byte characters for some patterns
    let s = get(&mock.url("/huge?bytes=500000000&type=text"));
    let out = run_with(&s, json!({}), cap, Duration::from_secs(3)).await.unwrap();
    assert!(out.truncated);
    let text = out.value.as_str().unwrap();
    assert!(text.len() <= cap && text.len() >= cap - 3, "{}", text.len());
    assert!(text.starts_with("héllo wörld 日本 "));
    assert!(!text.contains('\u{FFFD}'));

    let out = run_with(
        &get(&mock.url("/huge?bytes=100&type=text")),
        json!({}),
        cap,
        Duration::from_millis(500),
    )
    .await
    .unwrap();
    assert!(!out.truncated);
}

#[tokio::test]
async fn reset_mid_body_is_io() {
    let mock = MockBackend::start().await;
    let err = run(&get(&mock.reset_url()), json!({})).await.unwrap_err();
    // Documented: a connection reset after the head arrived is `Io`, never a partial success.
    assert!(matches!(err, BackendError::Io(_)), "{err:?}");
    assert!(!err.is_retryable(false));
    assert!(err.is_retryable(true));
    assert_eq!(mock.count("/reset"), 1);
    assert_eq!(mock.requests()[0].header("idempotency-key"), Some(KEY));
}

#[tokio::test]
async fn empty_204_is_null() {
    let mock = MockBackend::start().await;
    let out = run(&get(&mock.url("/status/204?body=")), json!({})).await.unwrap();
    assert_eq!(out.value, Value::Null);
}

/// A listener whose accept queue is full, so a further connect gets no SYN-ACK and hangs
/// (Linux drops the SYN). Returns the address and the sockets that keep the queue full, or
/// `None` when the platform refuses or completes connects anyway.
async fn connect_blackhole() -> Option<(
    std::net::SocketAddr,
    Vec<tokio::net::TcpStream>,
    tokio::net::TcpListener,
)> {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(1).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut held = Vec::new();
    for _ in 0..8 {
        match tokio::time::timeout(Duration::from_millis(100), tokio::net::TcpStream::connect(addr)).await {
            Ok(Ok(s)) => held.push(s),
            Ok(Err(_)) => return None,
            Err(_) => return Some((addr, held, listener)),
        }
    }
    None
}

/// Linux drops a SYN to a listener whose accept queue is full, so the connect stays pending; other
/// platforms may refuse or complete it, and then there is nothing on 127.0.0.1 that hangs a
/// connect, so the test does not run there (rather than passing without checking anything).
#[tokio::test]
#[cfg_attr(
    not(target_os = "linux"),
    ignore = "needs Linux: a connect to a full accept queue must stay pending"
)]
async fn timeout_while_connecting_is_not_sent() {
    let (addr, _held, _listener) = connect_blackhole()
        .await
        .expect("Linux leaves a connect to a full accept queue pending (the SYN is dropped)");
    let s = get(&format!("http://{addr}/ok"));
    // The attempt timeout (150 ms) fires before the client's connect timeout (300 ms): the
    // connect probe must still report that nothing was sent.
    let timeout = Duration::from_millis(150);
    let err = run_with(&s, json!({}), 1024, timeout).await.unwrap_err();
    assert_eq!(
        err,
        BackendError::Timeout {
            timeout,
            sent: false,
            signal: None
        }
    );
    // The client's connect timeout (300 ms) fires first: also not sent. The attempt timeout is
    // long (5 s) so that "the connect timeout ended it" is well apart from "the attempt did".
    let timeout = Duration::from_secs(5);
    let started = Instant::now();
    let err = run_with(&s, json!({}), 1024, timeout).await.unwrap_err();
    assert!(matches!(err, BackendError::Timeout { sent: false, .. }), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn pooled_connection_is_reused_and_timeout_on_it_counts_as_sent() {
    let mock = MockBackend::start().await;
    let backend = backend();
    let args = Map::new();
    let state = json!({});
    let policy = policy(1024);
    let attempt = Attempt {
        call_id: None,
        attempt: 2,
        arguments: &args,
        state: &state,
        idempotency_key: KEY,
        timeout: Duration::from_millis(200),
        policy: &policy,
    };
    backend.call(&get(&mock.url("/ok")), &attempt).await.unwrap();
    let err = backend.call(&get(&mock.url("/hang")), &attempt).await.unwrap_err();
    assert!(matches!(err, BackendError::Timeout { sent: true, .. }), "{err:?}");
}
