//! A scripted HTTP backend on 127.0.0.1 for backend and executor tests.
//!
//! Endpoints (any method unless noted):
//! - `/ok`, `/ok/{*rest}`: 200 JSON echo of method, path (raw, still percent-encoded), query,
//!   headers and body (JSON when it parses, else a string).
//! - `/fail/{n}/{status}?key=K`: answers `status` n times per key, then 200 JSON. The key is the
//!   `key` query value, else the `Idempotency-Key` header, else empty.
//! - `/status/{code}?retry_after=V&body=B`: that status, with `Retry-After: V` when given.
//! - `/hang`: never answers (capped at [`MAX_WAIT`]).
//! - `/slow?ms=N`: answers 200 JSON after N ms (capped).
//! - `/huge?bytes=N&type=json|text`: N streamed bytes; `json` is one JSON string, `text` is
//!   UTF-8 text with multi-byte characters.
//! - `/text?body=B`: `text/plain`.
//! - `/redirect?to=URL`: 302 to URL.
//! - [`MockBackend::reset_url`]: on a separate raw TCP listener, sends a response head that
//!   promises more than it sends, `after_bytes` (default 1024) body bytes, then resets the
//!   connection (SO_LINGER 0).
//!
//! Every request (also the raw ones) is recorded, so tests can assert headers and attempt
//! counts. Every wait is capped so a broken test cannot hang forever; the servers stop when the
//! `MockBackend` is dropped.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::{Extension, Json, Router};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// The longest any endpoint waits.
pub const MAX_WAIT: Duration = Duration::from_secs(30);

/// Request bodies larger than this are not recorded (the request fails with 413).
const MAX_RECORDED_BODY: usize = 4 * 1024 * 1024;

/// One request as the mock saw it.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub method: String,
    /// Raw path, still percent-encoded.
    pub path: String,
    /// Raw query string, if any.
    pub query: Option<String>,
    /// Header names lower-cased, in arrival order.
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

impl RecordedRequest {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The decoded query pairs.
    pub fn query_pairs(&self) -> Vec<(String, String)> {
        let raw = self.query.clone().unwrap_or_default();
        let uri = format!("/?{raw}").parse::<axum::http::Uri>();
        uri.ok()
            .and_then(|u| Query::<Vec<(String, String)>>::try_from_uri(&u).ok())
            .map(|q| q.0)
            .unwrap_or_default()
    }

    /// The body as JSON (when it parses) or a string; `null` when empty.
    pub fn body_value(&self) -> Value {
        if self.body.is_empty() {
            return Value::Null;
        }
        serde_json::from_slice(&self.body).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&self.body).into()))
    }

    /// The JSON the `/ok` endpoint answers with.
    pub fn echo(&self) -> Value {
        let headers: serde_json::Map<String, Value> = self
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        let query: serde_json::Map<String, Value> = self
            .query_pairs()
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect();
        json!({
            "method": self.method,
            "path": self.path,
            "raw_query": self.query,
            "query": query,
            "headers": headers,
            "body": self.body_value(),
        })
    }
}

#[derive(Default)]
struct Shared {
    requests: Mutex<Vec<RecordedRequest>>,
    failures: Mutex<HashMap<String, u32>>,
}

impl Shared {
    fn record(&self, r: RecordedRequest) {
        if let Ok(mut v) = self.requests.lock() {
            v.push(r);
        }
    }
}

/// A running mock backend.
pub struct MockBackend {
    /// The axum server.
    pub addr: SocketAddr,
    /// The raw listener that resets connections.
    pub reset_addr: SocketAddr,
    shared: Arc<Shared>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for MockBackend {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl MockBackend {
    /// Starts both listeners on ephemeral ports of 127.0.0.1.
    pub async fn start() -> MockBackend {
        let shared = Arc::new(Shared::default());
        let app = Router::new()
            .route("/ok", any(ok))
            .route("/ok/{*rest}", any(ok))
            .route("/fail/{n}/{status}", any(fail))
            .route("/status/{code}", any(status))
            .route("/hang", any(hang))
            .route("/slow", any(slow))
            .route("/huge", any(huge))
            .route("/text", any(text))
            .route("/redirect", any(redirect))
            .layer(middleware::from_fn_with_state(Arc::clone(&shared), record))
            .with_state(Arc::clone(&shared));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind mock backend");
        let addr = listener.local_addr().expect("mock backend address");
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let raw = TcpListener::bind("127.0.0.1:0").await.expect("bind reset listener");
        let reset_addr = raw.local_addr().expect("reset listener address");
        let reset = tokio::spawn(reset_server(raw, Arc::clone(&shared)));
        MockBackend {
            addr,
            reset_addr,
            shared,
            tasks: vec![server, reset],
        }
    }

    /// `http://127.0.0.1:PORT{path_and_query}`.
    pub fn url(&self, path_and_query: &str) -> String {
        format!("http://{}{path_and_query}", self.addr)
    }

    /// The URL of the resetting listener.
    pub fn reset_url(&self) -> String {
        format!("http://{}/reset", self.reset_addr)
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.requests.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// How many requests had exactly this path (query not included).
    pub fn count(&self, path: &str) -> usize {
        self.requests().iter().filter(|r| r.path == path).count()
    }

    /// Forgets recorded requests and failure counters.
    pub fn reset_records(&self) {
        if let Ok(mut v) = self.shared.requests.lock() {
            v.clear();
        }
        if let Ok(mut f) = self.shared.failures.lock() {
            f.clear();
        }
    }
}

/// An address nothing listens on: bound, then released.
pub async fn refused_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("address");
    drop(l);
    addr
}

async fn record(State(shared): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    let (mut parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_RECORDED_BODY).await else {
        return StatusCode::PAYLOAD_TOO_LARGE.into_response();
    };
    let rec = RecordedRequest {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().map(str::to_owned),
        headers: header_pairs(&parts.headers),
        body: bytes.clone(),
    };
    shared.record(rec.clone());
    parts.extensions.insert(rec);
    next.run(Request::from_parts(parts, Body::from(bytes))).await
}

fn header_pairs(h: &HeaderMap) -> Vec<(String, String)> {
    h.iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}

async fn ok(Extension(rec): Extension<RecordedRequest>) -> Json<Value> {
    Json(rec.echo())
}

async fn fail(
    State(shared): State<Arc<Shared>>,
    Path((n, code)): Path<(u32, u16)>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let key = q
        .get("key")
        .cloned()
        .or_else(|| {
            headers
                .get("idempotency-key")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        })
        .unwrap_or_default();
    let seen = {
        let Ok(mut f) = shared.failures.lock() else {
            return StatusCode::INTERNAL_SERVER_ERROR.into_response();
        };
        let c = f.entry(key).or_insert(0);
        *c += 1;
        *c
    };
    if seen <= n {
        let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, Json(json!({"error": "scripted failure", "attempt": seen}))).into_response()
    } else {
        Json(json!({"ok": true, "attempt": seen})).into_response()
    }
}

async fn status(Path(code): Path<u16>, Query(q): Query<HashMap<String, String>>) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = q
        .get("body")
        .cloned()
        .unwrap_or_else(|| json!({"error": format!("status {code}")}).to_string());
    let mut resp = (status, body).into_response();
    if let Some(v) = q.get("retry_after").and_then(|v| HeaderValue::from_str(v).ok()) {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}

async fn hang() -> StatusCode {
    tokio::time::sleep(MAX_WAIT).await;
    StatusCode::GATEWAY_TIMEOUT
}

async fn slow(Query(q): Query<HashMap<String, u64>>) -> Json<Value> {
    let ms = q.get("ms").copied().unwrap_or(100);
    tokio::time::sleep(Duration::from_millis(ms).min(MAX_WAIT)).await;
    Json(json!({"slept_ms": ms}))
}

async fn huge(Query(q): Query<HashMap<String, String>>) -> Response {
    const CHUNK: usize = 64 * 1024;
    const TEXT: &[u8] = "héllo wörld 日本 ".as_bytes();
    let total: usize = q.get("bytes").and_then(|b| b.parse().ok()).unwrap_or(1024 * 1024);
    let json = q.get("type").is_none_or(|t| t == "json");
    let stream = futures_util::stream::unfold(0usize, move |pos| async move {
        if pos >= total {
            return None;
        }
        let end = (pos + CHUNK).min(total);
        let chunk: Vec<u8> = (pos..end)
            .map(|i| {
                if json {
                    if i == 0 || i + 1 == total { b'"' } else { b'a' }
                } else {
                    TEXT[i % TEXT.len()]
                }
            })
            .collect();
        Some((Ok::<_, std::io::Error>(Bytes::from(chunk)), end))
    });
    let content_type = if json {
        "application/json"
    } else {
        "text/plain; charset=utf-8"
    };
    ([(header::CONTENT_TYPE, content_type)], Body::from_stream(stream)).into_response()
}

async fn text(Query(q): Query<HashMap<String, String>>) -> Response {
    let body = q
        .get("body")
        .cloned()
        .unwrap_or_else(|| "plain text, not JSON".to_owned());
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response()
}

async fn redirect(Query(q): Query<HashMap<String, String>>) -> Response {
    let to = q.get("to").cloned().unwrap_or_else(|| "/ok".to_owned());
    let mut resp = StatusCode::FOUND.into_response();
    if let Ok(v) = HeaderValue::from_str(&to) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    resp
}

async fn reset_server(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            let _ = tokio::time::timeout(MAX_WAIT, reset_one(stream, shared)).await;
        });
    }
}

/// Reads one request head, answers with a head promising 1 MiB, sends part of it, resets.
async fn reset_one(mut stream: TcpStream, shared: Arc<Shared>) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 64 * 1024 {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let mut lines = text.split("\r\n");
    let mut request_line = lines.next().unwrap_or("").split(' ');
    let method = request_line.next().unwrap_or("").to_owned();
    let target = request_line.next().unwrap_or("").to_owned();
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p.to_owned(), Some(q.to_owned())),
        None => (target.clone(), None),
    };
    let headers = lines
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let rec = RecordedRequest {
        method,
        path,
        query,
        headers,
        body: Bytes::new(),
    };
    let after: usize = rec
        .query_pairs()
        .iter()
        .find(|(k, _)| k == "after_bytes")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(1024);
    shared.record(rec);
    stream
        .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1048576\r\n\r\n")
        .await?;
    stream.write_all(&vec![b'x'; after]).await?;
    stream.flush().await?;
    // Let the client read what was sent before the reset discards it.
    tokio::time::sleep(Duration::from_millis(50)).await;
    stream.set_zero_linger()?;
    drop(stream);
    Ok(())
}
