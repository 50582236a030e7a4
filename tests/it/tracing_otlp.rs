//! OpenTelemetry traces end to end (`docs/tracing.md`): the real `toolwire serve` binary,
//! configured only by `OTEL_*` variables, exports to a real OTLP/HTTP receiver on 127.0.0.1
//! that decodes the official protobuf definitions (`opentelemetry-proto`); a loopback HTTP
//! backend records the `traceparent` it receives.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use nix::sys::signal::Signal;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode as SpanStatus;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, Span};
use prost::Message as _;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::common::binary::Binary;
use crate::common::mock_backend::{MockBackend, refused_addr};
use crate::common::tools::{ToolsDir, exec_tool, execute_body, http_tool, merge};

/// The caller's trace: `traceparent` = `00-TRACE-PARENT-01` (sampled).
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_ID: &str = "00f067aa0ba902b7";
const TRACESTATE: &str = "vendor=opaque-value";

/// Values that must never leave toolwire in a trace: a tool's secret header, an argument, a
/// request state value, and the collector's own header.
const SECRET: &str = "sk-otel-SECRET-4f1d2c";
const ARGUMENT: &str = "ARGUMENT-VALUE-77a1";
const STATE: &str = "STATE-VALUE-e902";
const COLLECTOR_KEY: &str = "collector-key-93b7";

/// What the receiver got: one entry per `POST /v1/traces`.
#[derive(Default)]
struct Received {
    bodies: Vec<Bytes>,
    headers: Vec<HeaderMap>,
}

/// A real OTLP/HTTP receiver on 127.0.0.1: records every export and answers like a collector
/// (200 with an empty `ExportTraceServiceResponse`). Stops when dropped.
struct Receiver {
    url: String,
    got: Arc<Mutex<Received>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn traces(State(got): State<Arc<Mutex<Received>>>, headers: HeaderMap, body: Bytes) -> (StatusCode, Vec<u8>) {
    let mut g = got.lock().unwrap();
    g.bodies.push(body);
    g.headers.push(headers);
    (StatusCode::OK, Vec::new())
}

impl Receiver {
    async fn start() -> Receiver {
        let got = Arc::new(Mutex::new(Received::default()));
        let app = Router::new()
            .route("/v1/traces", post(traces))
            .with_state(Arc::clone(&got));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver { url, got, task }
    }

    /// Every span received, decoded with the official definitions, with its resource.
    fn spans(&self) -> Vec<(ResourceSpans, Span)> {
        let got = self.got.lock().unwrap();
        let mut out = Vec::new();
        for body in &got.bodies {
            let req = ExportTraceServiceRequest::decode(body.as_ref()).expect("a valid OTLP protobuf export");
            for rs in req.resource_spans {
                for ss in &rs.scope_spans {
                    for span in &ss.spans {
                        out.push((rs.clone(), span.clone()));
                    }
                }
            }
        }
        out
    }

    /// Every byte the receiver got, concatenated.
    fn raw(&self) -> Vec<u8> {
        self.got
            .lock()
            .unwrap()
            .bodies
            .iter()
            .flat_map(|b| b.to_vec())
            .collect()
    }

    fn exports(&self) -> usize {
        self.got.lock().unwrap().bodies.len()
    }
}

fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a Any> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v: &AnyValue| v.value.as_ref())
}

fn str_attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a str> {
    match attr(attrs, key) {
        Some(Any::StringValue(s)) => Some(s),
        _ => None,
    }
}

fn int_attr(attrs: &[KeyValue], key: &str) -> Option<i64> {
    match attr(attrs, key) {
        Some(Any::IntValue(i)) => Some(*i),
        _ => None,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn find<'a>(spans: &'a [(ResourceSpans, Span)], name: &str) -> &'a Span {
    let names: Vec<&str> = spans.iter().map(|(_, s)| s.name.as_str()).collect();
    &spans
        .iter()
        .find(|(_, s)| s.name == name)
        .unwrap_or_else(|| panic!("no span `{name}` among {names:?}"))
        .1
}

/// The tools: `ok_tool` (a secret header, an injected state value), `flaky` (503 once, then
/// 200: two attempts), `failing` (400: fails for good) and `run_echo` (a subprocess that prints
/// its environment).
fn tools(backend: &MockBackend) -> ToolsDir {
    let ok = merge(
        http_tool("ok_tool", &backend.url("/ok")),
        json!({
            "inject": {"user": "state.user"},
            "http": {"headers": {"Authorization": "Bearer ${env:OTEL_TEST_SECRET}"}},
        }),
    );
    let flaky = merge(
        http_tool("flaky", &backend.url("/fail/1/503")),
        json!({"idempotent": true, "retry": {"max_attempts": 3, "backoff": "20ms", "max_backoff": "40ms"}}),
    );
    let failing = http_tool("failing", &backend.url("/status/400"));
    ToolsDir::new(&[ok, flaky, failing, exec_tool("run_echo", &["echo"])])
}

fn config(dir: &tempfile::TempDir) -> std::path::PathBuf {
    let path = dir.path().join("toolwire.toml");
    std::fs::write(&path, "[reload]\nwatch = false\n").unwrap();
    path
}

/// `POST /v1/execute` with the three calls, carrying the caller's trace context.
async fn execute(bin: &Binary) -> Value {
    let mut body = execute_body(&[
        ("call_ok", "ok_tool", json!({"q": ARGUMENT})),
        ("call_flaky", "flaky", json!({"q": ARGUMENT})),
        ("call_failing", "failing", json!({"q": ARGUMENT})),
        ("call_exec", "run_echo", json!({"q": ARGUMENT})),
    ]);
    body["state"] = json!({"user": STATE});
    let resp = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .post(bin.url("/v1/execute"))
        .header("traceparent", format!("00-{TRACE_ID}-{PARENT_ID}-01"))
        .header("tracestate", TRACESTATE)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    resp.json().await.unwrap()
}

/// SIGTERM, then wait for the drain and the bounded flush to finish (off the test's runtime,
/// which serves the receiver and the backend meanwhile).
async fn stop(bin: Binary) {
    tokio::task::spawn_blocking(move || stop_blocking(bin)).await.unwrap();
}

fn stop_blocking(mut bin: Binary) {
    bin.signal(Signal::SIGTERM);
    let status = bin
        .wait_exit(Duration::from_secs(60))
        .expect("the server exits after SIGTERM");
    assert!(status.success(), "exit status {status:?}; stderr:\n{}", bin.stderr());
}

#[tokio::test]
async fn spans_links_attributes_and_events_reach_a_real_otlp_receiver() {
    let receiver = Receiver::start().await;
    let backend = MockBackend::start().await;
    let tools = tools(&backend);
    let dir = tempfile::tempdir().unwrap();
    let bin = Binary::start_with_env(
        &config(&dir),
        tools.path(),
        &[
            ("OTEL_TEST_SECRET", SECRET),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.url),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                &format!("x-collector-key={COLLECTOR_KEY}"),
            ),
            ("OTEL_SERVICE_NAME", "tools-sidecar"),
            ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test"),
        ],
    );
    let resp = execute(&bin).await;
    let results = resp["results"].as_array().unwrap();
    assert_eq!(results[0]["ok"], true, "{resp}");
    assert_eq!(results[1]["ok"], true, "{resp}");
    assert_eq!(results[1]["attempts"], 2, "{resp}");
    assert_eq!(results[2]["ok"], false, "{resp}");
    assert_eq!(results[2]["error"]["kind"], "backend_status", "{resp}");
    stop(bin).await;

    let spans = receiver.spans();
    assert!(!spans.is_empty(), "nothing exported");
    // Resource: the configured service name and attributes.
    let (resource, _) = &spans[0];
    let res_attrs = &resource.resource.as_ref().unwrap().attributes;
    assert_eq!(str_attr(res_attrs, "service.name"), Some("tools-sidecar"));
    assert_eq!(str_attr(res_attrs, "deployment.environment.name"), Some("test"));
    assert!(str_attr(res_attrs, "service.version").is_some());
    // The collector's headers came from OTEL_EXPORTER_OTLP_HEADERS, and the payload is protobuf.
    {
        let got = receiver.got.lock().unwrap();
        for h in &got.headers {
            assert_eq!(h["x-collector-key"], COLLECTOR_KEY);
            assert_eq!(h["content-type"], "application/x-protobuf");
        }
    }

    // The request span: a server span, child of the caller's span, in the caller's trace.
    let request = find(&spans, "POST /v1/execute");
    assert_eq!(request.kind, SpanKind::Server as i32);
    assert_eq!(hex(&request.trace_id), TRACE_ID);
    assert_eq!(hex(&request.parent_span_id), PARENT_ID);
    assert_eq!(request.trace_state, TRACESTATE);
    assert_eq!(str_attr(&request.attributes, "http.request.method"), Some("POST"));
    assert_eq!(str_attr(&request.attributes, "http.route"), Some("/v1/execute"));
    assert_eq!(int_attr(&request.attributes, "http.response.status_code"), Some(200));

    // One `execute_tool {tool}` span per call, children of the request span.
    for (tool, id) in [
        ("ok_tool", "call_ok"),
        ("flaky", "call_flaky"),
        ("failing", "call_failing"),
        ("run_echo", "call_exec"),
    ] {
        let span = find(&spans, &format!("execute_tool {tool}"));
        assert_eq!(span.kind, SpanKind::Internal as i32);
        assert_eq!(hex(&span.trace_id), TRACE_ID);
        assert_eq!(
            span.parent_span_id, request.span_id,
            "{tool} is a child of the request span"
        );
        assert_eq!(
            str_attr(&span.attributes, "gen_ai.operation.name"),
            Some("execute_tool")
        );
        assert_eq!(str_attr(&span.attributes, "gen_ai.tool.name"), Some(tool));
        assert_eq!(str_attr(&span.attributes, "gen_ai.tool.call.id"), Some(id));
        assert_eq!(str_attr(&span.attributes, "gen_ai.tool.type"), Some("function"));
    }

    // Attempts as events: the flaky call's first attempt failed and was retried after a
    // backoff, the second succeeded.
    let flaky = find(&spans, "execute_tool flaky");
    let attempts: Vec<_> = flaky.events.iter().filter(|e| e.name == "attempt").collect();
    assert_eq!(attempts.len(), 2, "{:?}", flaky.events);
    assert_eq!(int_attr(&attempts[0].attributes, "toolwire.attempt.number"), Some(1));
    assert_eq!(
        str_attr(&attempts[0].attributes, "toolwire.attempt.outcome"),
        Some("backend_status")
    );
    let backoff = int_attr(&attempts[0].attributes, "toolwire.attempt.backoff_ms").expect("a backoff");
    assert!((0..=40).contains(&backoff), "backoff {backoff} ms");
    assert_eq!(int_attr(&attempts[1].attributes, "toolwire.attempt.number"), Some(2));
    assert_eq!(
        str_attr(&attempts[1].attributes, "toolwire.attempt.outcome"),
        Some("ok")
    );
    assert_eq!(int_attr(&attempts[1].attributes, "toolwire.attempt.backoff_ms"), None);
    assert_eq!(int_attr(&flaky.attributes, "toolwire.tool.attempts"), Some(2));
    assert_eq!(str_attr(&flaky.attributes, "error.type"), None);

    // A failed call: `error.type` is toolwire's error kind, the status an error.
    let failing = find(&spans, "execute_tool failing");
    assert_eq!(str_attr(&failing.attributes, "error.type"), Some("backend_status"));
    assert_eq!(failing.status.as_ref().unwrap().code, SpanStatus::Error as i32);
    let ok = find(&spans, "execute_tool ok_tool");
    assert_ne!(ok.status.as_ref().map_or(0, |s| s.code), SpanStatus::Error as i32);

    // The backend saw the same trace, with the tool span as the parent, and the tracestate.
    let mut checked = 0;
    for r in backend.requests() {
        let tool = match r.path.as_str() {
            "/ok" => "ok_tool",
            "/fail/1/503" => "flaky",
            "/status/400" => "failing",
            other => panic!("unexpected backend request {other}"),
        };
        let traceparent = r.header("traceparent").expect("traceparent sent to the backend");
        let parts: Vec<&str> = traceparent.split('-').collect();
        assert_eq!(parts.len(), 4, "{traceparent}");
        assert_eq!(parts[0], "00");
        assert_eq!(parts[1], TRACE_ID, "the backend joins the caller's trace");
        assert_eq!(parts[2], hex(&find(&spans, &format!("execute_tool {tool}")).span_id));
        assert_eq!(parts[3], "01");
        assert_eq!(r.header("tracestate"), Some(TRACESTATE));
        checked += 1;
    }
    assert_eq!(checked, 4, "ok once, flaky twice, failing once");
    // A subprocess tool gets the same as `TRACEPARENT` / `TRACESTATE` in its environment.
    let env = &results[3]["output"]["env"];
    let exec_span = hex(&find(&spans, "execute_tool run_echo").span_id);
    assert_eq!(env["TRACEPARENT"], format!("00-{TRACE_ID}-{exec_span}-01"), "{resp}");
    assert_eq!(env["TRACESTATE"], TRACESTATE, "{resp}");

    // Never a secret, an argument, a state value or the collector's key in the export.
    let raw = receiver.raw();
    for needle in [SECRET, ARGUMENT, STATE, COLLECTOR_KEY, "Bearer", "Authorization"] {
        assert!(
            !raw.windows(needle.len()).any(|w| w == needle.as_bytes()),
            "`{needle}` found in the exported protobuf"
        );
    }
    // The backend got the secret and the values (so the check above could have failed).
    let ok_request = backend.requests().into_iter().find(|r| r.path == "/ok").unwrap();
    assert_eq!(
        ok_request.header("authorization"),
        Some(format!("Bearer {SECRET}").as_str())
    );
    assert_eq!(ok_request.body_value(), json!({"q": ARGUMENT, "user": STATE}));
}

/// `OTEL_SDK_DISABLED=true` and `OTEL_TRACES_EXPORTER=none` win over an endpoint: nothing is
/// exported and the backend gets no `traceparent` (toolwire forwards nothing of the caller's).
#[tokio::test]
async fn nothing_is_exported_or_propagated_when_traces_are_off() {
    let receiver = Receiver::start().await;
    let backend = MockBackend::start().await;
    let tools = tools(&backend);
    let dir = tempfile::tempdir().unwrap();
    let off: [&[(&str, &str)]; 3] = [
        &[("OTEL_SDK_DISABLED", "true")],
        &[("OTEL_TRACES_EXPORTER", "none")],
        // No endpoint at all: off by default.
        &[("OTEL_SERVICE_NAME", "x")],
    ];
    for extra in off {
        let mut env = vec![("OTEL_TEST_SECRET", SECRET)];
        if extra[0].0 != "OTEL_SERVICE_NAME" {
            env.push(("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url.as_str()));
        }
        env.extend_from_slice(extra);
        let bin = Binary::start_with_env(&config(&dir), tools.path(), &env);
        let resp = execute(&bin).await;
        assert_eq!(resp["results"][0]["ok"], true, "{resp}");
        let env = resp["results"][3]["output"]["env"]
            .as_object()
            .expect("the echo's environment");
        assert!(
            !env.contains_key("TRACEPARENT") && !env.contains_key("TRACESTATE"),
            "{resp}"
        );
        stop(bin).await;
        for r in backend.requests() {
            assert_eq!(r.header("traceparent"), None, "{extra:?}: {}", r.path);
            assert_eq!(r.header("tracestate"), None, "{extra:?}: {}", r.path);
        }
        assert!(!backend.requests().is_empty());
        backend.reset_records();
    }
    assert_eq!(receiver.exports(), 0, "nothing may be exported with traces off");
}

/// A collector that is down never affects requests, and the flush at shutdown is bounded.
#[tokio::test]
async fn an_unreachable_collector_does_not_affect_requests() {
    let backend = MockBackend::start().await;
    let tools = tools(&backend);
    let dir = tempfile::tempdir().unwrap();
    let down = format!("http://{}", refused_addr().await);
    let bin = Binary::start_with_env(
        &config(&dir),
        tools.path(),
        &[("OTEL_TEST_SECRET", SECRET), ("OTEL_EXPORTER_OTLP_ENDPOINT", &down)],
    );
    for _ in 0..3 {
        let resp = execute(&bin).await;
        assert_eq!(resp["results"][0]["ok"], true, "{resp}");
        assert_eq!(resp["results"][1]["ok"], true, "{resp}");
    }
    // Traces were on: the backend still got the trace context.
    let r = backend.requests().into_iter().find(|r| r.path == "/ok").unwrap();
    assert!(r.header("traceparent").is_some_and(|t| t.contains(TRACE_ID)));
    stop(bin).await;
}

/// A collector that accepts connections and never answers: requests are unaffected, and the
/// flush at shutdown gives up after its bound instead of holding the exit.
#[tokio::test]
async fn a_hanging_collector_cannot_hold_the_shutdown() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    // Accepts and holds every connection (no answer), up to the test's end.
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let backend = MockBackend::start().await;
    let tools = tools(&backend);
    let dir = tempfile::tempdir().unwrap();
    let bin = Binary::start_with_env(
        &config(&dir),
        tools.path(),
        &[("OTEL_TEST_SECRET", SECRET), ("OTEL_EXPORTER_OTLP_ENDPOINT", &url)],
    );
    let resp = execute(&bin).await;
    assert_eq!(resp["results"][0]["ok"], true, "{resp}");
    let stderr = tokio::task::spawn_blocking(move || {
        let mut bin = bin;
        bin.signal(Signal::SIGTERM);
        let status = bin
            .wait_exit(Duration::from_secs(60))
            .expect("the server exits after SIGTERM");
        assert!(status.success(), "exit status {status:?}; stderr:\n{}", bin.stderr());
        bin.stderr()
    })
    .await
    .unwrap();
    assert!(stderr.contains("Flushing traces took too long"), "{stderr}");
    hold.abort();
}

/// A streamed `/v1/execute` runs its calls in a task of their own: they stay in the caller's
/// trace, children of the request span.
#[tokio::test]
async fn streamed_calls_stay_in_the_request_trace() {
    let receiver = Receiver::start().await;
    let backend = MockBackend::start().await;
    let tools = tools(&backend);
    let dir = tempfile::tempdir().unwrap();
    let bin = Binary::start_with_env(
        &config(&dir),
        tools.path(),
        &[
            ("OTEL_TEST_SECRET", SECRET),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                &format!("{}/v1/traces", receiver.url),
            ),
        ],
    );
    let mut body = execute_body(&[("call_ok", "ok_tool", json!({"q": ARGUMENT}))]);
    body["state"] = json!({"user": STATE});
    let text = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .post(bin.url("/v1/execute"))
        .header("accept", "application/x-ndjson")
        .header("traceparent", format!("00-{TRACE_ID}-{PARENT_ID}-01"))
        .json(&body)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(text.contains("\"event\":\"response\""), "{text}");
    stop(bin).await;
    let spans = receiver.spans();
    let request = find(&spans, "POST /v1/execute");
    assert_eq!(hex(&request.parent_span_id), PARENT_ID);
    let tool = find(&spans, "execute_tool ok_tool");
    assert_eq!(hex(&tool.trace_id), TRACE_ID);
    assert_eq!(tool.parent_span_id, request.span_id);
    let sent = backend.requests().into_iter().find(|r| r.path == "/ok").unwrap();
    assert!(
        sent.header("traceparent")
            .is_some_and(|t| t.contains(&hex(&tool.span_id)))
    );
}
