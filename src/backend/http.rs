//! The HTTP backend: one attempt of a tool call as one HTTP request.
//!
//! Everything the request carries comes from the tool definition's templates and the call's
//! arguments (and, with traces on, the `traceparent` of toolwire's own span): nothing from the
//! inbound request is forwarded implicitly. Placeholder values are percent-encoded so a
//! model-chosen value can never change the scheme, host or path structure of the URL; header
//! values may not contain CR/LF; the response is read as a stream with a hard cap, so a backend
//! cannot make us buffer without bound; and the whole attempt (connect, headers, body) is
//! bounded by the attempt's timeout.
//!
//! Errors say whether the request may have reached the backend (`sent`), because that decides
//! whether the executor may retry a non-idempotent tool.

use std::cell::Cell;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use futures_util::StreamExt;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use reqwest::header::{CONTENT_DISPOSITION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER, USER_AGENT};
use reqwest::{StatusCode, Url};
use serde_json::{Map, Value};
use tokio::time::Instant;

use super::egress::{Blocked, EgressPolicy, GuardedResolver};
use super::files::{self, BodyKind};
use super::tls;
use super::{Attempt, BackendError, Output};
use crate::config::server::HttpClientConfig;
use crate::config::tls::TlsMaterial;
use crate::template::{Segment, Template, lookup, scalar_text};
use crate::tool::{HttpBody, HttpSpec};

/// Characters of a placeholder value that are percent-encoded in a URL: everything except the
/// RFC 3986 *unreserved* set (`ALPHA / DIGIT / "-" / "." / "_" / "~"`); non-ASCII is always
/// encoded as UTF-8 bytes. This is path-segment-safe: `/`, `?`, `#`, `%`, `@`, `:`, `;`,
/// spaces and controls are all encoded, so a value stays inside the one path segment (or query
/// value) it was placed in and cannot add segments, start a query or fragment, or smuggle a
/// pre-encoded sequence. Stricter than RFC 3986's `pchar` on purpose: sub-delimiters carry
/// meaning for some servers (matrix parameters, `+` as space), and encoding them costs nothing.
pub const PATH_SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// Sent on every request so backends can tell toolwire's traffic apart.
pub const USER_AGENT_VALUE: &str = concat!("toolwire/", env!("CARGO_PKG_VERSION"));

/// `Retry-After` values longer than this are treated as garbage (absent). Shorter values are
/// kept even when no deadline can honour them: the executor then stops retrying and hands the
/// wait to the agent as `retry_after_ms` (`docs/execution.md#retries`).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(7 * 24 * 3600);

/// How much of a non-2xx response body is read for the error message. More than the
/// [`super::EXCERPT_BYTES`] the model sees: secrets are masked in what was read *before* it is
/// cut, so a secret that straddles the cut is masked whole instead of leaking its start.
const EXCERPT_READ_BYTES: usize = 4 * 1024;

/// Serving workers with an HTTP client of their own; a thread marked with a higher slot uses
/// the common client. Matches `config::server::MAX_WORKERS`.
pub const WORKER_CLIENTS: usize = crate::config::server::MAX_WORKERS;

thread_local! {
    /// The serving worker this thread is, if it is one (see [`set_worker_slot`]).
    static WORKER_SLOT: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Marks the current thread as serving worker `index` (`server::workers`): HTTP calls made on
/// it use that worker's own client, so the backend connections it opens are driven by its own
/// runtime. A connection owned by another runtime would wake that runtime's thread for every
/// read and write — the cross-thread hops the workers exist to avoid.
pub fn set_worker_slot(index: usize) {
    WORKER_SLOT.with(|slot| slot.set(Some(index)));
}

/// Runs HTTP attempts on pooled connections: one client (pool) per serving worker, built on
/// the worker's first call, and a common one for every other thread (plus one per tool with
/// its own TLS settings).
#[derive(Debug, Clone)]
pub struct HttpBackend {
    client: reqwest::Client,
    /// One lazily built client per serving worker (indexed by [`set_worker_slot`]'s slot).
    per_worker: Arc<[OnceLock<reqwest::Client>]>,
    /// The global egress policy (also enforced inside the client's resolver).
    policy: Arc<EgressPolicy>,
    /// What every client is built from, so per-tool clients behave like the shared one.
    cfg: HttpClientConfig,
    /// The server-wide TLS settings (`[http_client] ca_file`, client certificate).
    tls: Arc<TlsMaterial>,
}

impl HttpBackend {
    /// Builds the one client every HTTP tool shares, so connections are pooled across calls
    /// and the per-host idle cap is global.
    ///
    /// - **connect timeout** from config: a blackholed host fails fast, as `sent: false`, even
    ///   when the attempt's own timeout is longer.
    /// - **no redirects**: every hop would be a new, unchecked destination (SSRF, see
    ///   `docs/execution.md#http-backends`); a 3xx comes back as a `Status` error instead.
    /// - **no proxy from the environment**: an inherited `HTTP_PROXY` would silently route
    ///   tool traffic (and its secrets) through a host the tool definitions never named.
    /// - **idle pool** sized from config, large enough for the global in-flight cap, so a
    ///   burst does not pay a new TCP handshake per call.
    /// - **TCP_NODELAY**: requests are small and latency-bound; Nagle only adds delay.
    /// - a connector layer that records whether this attempt's own connection was still being
    ///   established when a timeout hit, so such a timeout is reported as `sent: false`.
    /// - **TLS** from [`super::tls`]: bundled public roots plus `ca_file`, certificates and host
    ///   names always verified, the configured client certificate. Tools with their own TLS
    ///   settings get their own client with everything above unchanged.
    ///
    /// The egress policy is the built-in one ([`EgressPolicy::default`]).
    pub fn new(cfg: &HttpClientConfig) -> Result<Self, BackendError> {
        Self::with_egress(cfg, EgressPolicy::default())
    }

    /// [`HttpBackend::new`] with an egress policy (SSRF guard, see [`super::egress`]): the
    /// client resolves names through [`GuardedResolver`], so the checked address is the one
    /// connected to.
    ///
    /// The server-wide TLS files (`[http_client] ca_file`, `client_cert`, `client_key`) are read
    /// and checked here, so a bad one stops the server at start.
    pub fn with_egress(cfg: &HttpClientConfig, policy: EgressPolicy) -> Result<Self, BackendError> {
        let policy = Arc::new(policy);
        let tls = cfg.tls_paths().load().map_err(|errors| {
            let list: Vec<String> = errors.iter().map(|e| format!("http_client.{e}")).collect();
            BackendError::InvalidArgument(list.join("; "))
        })?;
        let client = build_client(cfg, &policy, &[&tls])?;
        Ok(HttpBackend {
            client,
            per_worker: (0..WORKER_CLIENTS).map(|_| OnceLock::new()).collect(),
            policy,
            cfg: cfg.clone(),
            tls: Arc::new(tls),
        })
    }

    /// The shared client (its resolver applies the egress policy to every host name).
    pub fn client(&self) -> reqwest::Client {
        self.client.clone()
    }

    /// The egress policy, for destinations the resolver never sees (IP literals).
    pub fn egress(&self) -> &EgressPolicy {
        &self.policy
    }

    /// The client for `spec`: this worker's (or the common one), or the tool's own when it has
    /// TLS settings (built on first use with the same resolver, egress policy and limits, then
    /// kept with the tool, so a reload drops it together with the tool; shared by every worker,
    /// as such tools are rare).
    fn client_for(&self, spec: &HttpSpec) -> Result<reqwest::Client, BackendError> {
        let Some(tool_tls) = &spec.tls else {
            return self.worker_client();
        };
        cached(&tool_tls.client, || {
            build_client(&self.cfg, &self.policy, &[&self.tls, &tool_tls.material])
        })
    }

    /// The calling worker's client, built on its first call with the same settings and TLS as
    /// the common one; the common client on any other thread.
    fn worker_client(&self) -> Result<reqwest::Client, BackendError> {
        let Some(cell) = WORKER_SLOT.with(Cell::get).and_then(|i| self.per_worker.get(i)) else {
            return Ok(self.client.clone());
        };
        cached(cell, || build_client(&self.cfg, &self.policy, &[&self.tls]))
    }

    /// Checks the destination before sending: IP literals (which skip the resolver) against the
    /// global and the tool's rules, host names against the tool's own rules when it has any.
    async fn check_egress(&self, spec: &HttpSpec, url: &Url, timeout: Duration) -> Result<(), BackendError> {
        let tool_rules = !(spec.egress_allow.is_empty() && spec.egress_deny.is_empty());
        // The global policy is borrowed, not cloned per call; a tool with rules of its own gets
        // its combined policy.
        let policy = if tool_rules {
            std::borrow::Cow::Owned(self.policy.with_rules(&spec.egress_allow, &spec.egress_deny))
        } else {
            std::borrow::Cow::Borrowed(&*self.policy)
        };
        let port = url.port_or_known_default().unwrap_or(80);
        let blocked = |b: Blocked| BackendError::Blocked(format!("{b}; this destination is not allowed for tools"));
        let Some(host) = url.host_str() else {
            return Ok(());
        };
        let literal = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>();
        match literal {
            Ok(ip) => policy.check(host, &[ip]).map_err(blocked),
            Err(_) if tool_rules => {
                let lookup = tokio::net::lookup_host((host, port));
                let addrs: Vec<std::net::IpAddr> = match tokio::time::timeout(timeout, lookup).await {
                    Ok(Ok(addrs)) => addrs.map(|a| a.ip()).collect(),
                    Ok(Err(e)) => return Err(BackendError::Connect(format!("cannot resolve {host}: {e}"))),
                    Err(_) => {
                        return Err(BackendError::Timeout {
                            timeout,
                            sent: false,
                            signal: None,
                        });
                    }
                };
                policy.check(host, &addrs).map_err(blocked)
            }
            Err(_) => Ok(()),
        }
    }

    /// Runs one attempt: builds the request from `spec` and the attempt's arguments, sends it,
    /// and reads the answer within `attempt.timeout`.
    pub async fn call(&self, spec: &HttpSpec, attempt: &Attempt<'_>) -> Result<Output, BackendError> {
        let client = self.client_for(spec)?;
        let request = self.build_request(&client, spec, attempt)?;
        let timeout = attempt.timeout;
        self.check_egress(spec, request.url(), timeout).await?;
        let deadline = Instant::now() + timeout;
        let probe = Arc::new(ConnectProbe::default());

        // Phase 1: connect, write the request, read the response head.
        let send = CONNECT_PROBE.scope(Arc::clone(&probe), client.execute(request));
        let response = match tokio::time::timeout_at(deadline, send).await {
            Ok(Ok(response)) => response,
            Ok(Err(e)) => return Err(classify_send_error(e, &probe, timeout)),
            Err(_elapsed) => {
                return Err(BackendError::Timeout {
                    timeout,
                    sent: probe.may_have_sent(),
                    signal: None,
                });
            }
        };

        // Phase 2: the body, capped, within what is left of the same budget.
        let status = response.status();
        if !status.is_success() {
            return Err(read_status_error(response, deadline).await);
        }
        let kind = files::classify(response.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()));
        let disposition = response
            .headers()
            .get(CONTENT_DISPOSITION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let cap = attempt.policy.max_read_bytes;
        // JSON and binary bodies cannot be cut, only text can.
        let uncuttable = matches!(kind, BodyKind::Json | BodyKind::Binary(_));
        if uncuttable && response.content_length().is_some_and(|n| n > cap as u64) {
            // No need to read what we would throw away; dropping the response closes the
            // connection.
            return Err(BackendError::OutputTooLarge { limit: cap });
        }
        let mut buf = Vec::new();
        match tokio::time::timeout_at(deadline, read_capped(response, cap.saturating_add(1), &mut buf)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e.into_backend_error(timeout)),
            Err(_elapsed) => {
                return Err(BackendError::Timeout {
                    timeout,
                    sent: true,
                    signal: None,
                });
            }
        }
        decode_body(status, &kind, disposition.as_deref(), buf, cap)
    }

    /// The request for one attempt; fails only on arguments that cannot be sent safely.
    fn build_request(
        &self,
        client: &reqwest::Client,
        spec: &HttpSpec,
        attempt: &Attempt<'_>,
    ) -> Result<reqwest::Request, BackendError> {
        let args = attempt.arguments;
        let state = attempt.state;
        let url = build_url(spec, args, state)?;
        let mut headers = build_headers(spec, attempt)?;
        // The call's trace context (`docs/tracing.md`); nothing when traces are off.
        crate::telemetry::traces::inject(&mut headers);
        let mut builder = client
            .request(spec.method.clone(), url)
            .headers(headers)
            .timeout(attempt.timeout);
        let body = match &spec.body {
            HttpBody::None => None,
            HttpBody::Arguments => Some(Value::Object(args.clone())),
            HttpBody::Template(tpl) => Some(render_body(tpl, args, state)),
        };
        if let Some(body) = body {
            let bytes = serde_json::to_vec(&body)
                .map_err(|e| BackendError::InvalidArgument(format!("the request body cannot be encoded: {e}")))?;
            builder = builder.body(bytes);
            if !spec.headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("content-type")) {
                builder = builder.header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            }
        }
        builder
            .build()
            .map_err(|e| BackendError::InvalidArgument(format!("the request cannot be built: {}", describe(e))))
    }
}

/// The client kept in `cell`, built by `build` on first use. Two first calls may race to build
/// it: one wins, both use a working client.
fn cached(
    cell: &OnceLock<reqwest::Client>,
    build: impl FnOnce() -> Result<reqwest::Client, BackendError>,
) -> Result<reqwest::Client, BackendError> {
    if let Some(client) = cell.get() {
        return Ok(client.clone());
    }
    let client = build()?;
    Ok(cell.get_or_init(|| client).clone())
}

/// One reqwest client with the settings every client shares (see [`HttpBackend::new`]) and the
/// TLS of `tls_levels` (server-wide, then the tool's).
fn build_client(
    cfg: &HttpClientConfig,
    policy: &Arc<EgressPolicy>,
    tls_levels: &[&TlsMaterial],
) -> Result<reqwest::Client, BackendError> {
    let tls = tls::client_config(tls_levels).map_err(BackendError::Tls)?;
    reqwest::Client::builder()
        .dns_resolver(Arc::new(GuardedResolver {
            policy: Arc::clone(policy),
        }))
        .connect_timeout(cfg.connect_timeout.0)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .pool_max_idle_per_host(cfg.pool_max_idle_per_host)
        .tcp_nodelay(true)
        .user_agent(USER_AGENT_VALUE)
        .connector_layer(ConnectProbeLayer)
        .tls_backend_preconfigured(tls)
        .build()
        .map_err(|e| BackendError::InvalidArgument(format!("cannot build the HTTP client: {}", describe(e))))
}

/// Percent-encodes one placeholder value for a URL (see [`PATH_SEGMENT`]).
pub fn encode_url_value(value: &str) -> String {
    utf8_percent_encode(value, PATH_SEGMENT).to_string()
}

/// The URL of one attempt: the URL template with encoded placeholder values, then the query
/// entries, encoded by the `url` crate's form encoder. A query entry whose template renders
/// empty because a placeholder is absent (an optional argument the model left out) is omitted;
/// a literal empty value or a present empty string is kept.
pub fn build_url(spec: &HttpSpec, args: &Map<String, Value>, state: &Value) -> Result<Url, BackendError> {
    if !spec.allow_path_traversal {
        reject_path_traversal(&spec.url, args, state)?;
    }
    let mut url = match &spec.static_url {
        Some(url) => url.clone(),
        None => parse_url(&spec.url.render(args, state, encode_url_value))?,
    };
    let pairs: Vec<(&str, String)> = spec
        .query
        .iter()
        .filter_map(|(name, tpl)| {
            let value = tpl.render(args, state, str::to_owned);
            let omitted = value.is_empty() && tpl.placeholders().any(|p| lookup(p, args, state).is_none());
            (!omitted).then_some((name.as_str(), value))
        })
        .collect();
    if !pairs.is_empty() {
        url.query_pairs_mut().extend_pairs(pairs);
    }
    Ok(url)
}

/// A filled-in URL template as a URL: no `.`/`..` path segment, parseable, `http` or `https`.
pub fn parse_url(rendered: &str) -> Result<Url, BackendError> {
    reject_dot_segments(rendered)?;
    let url = Url::parse(rendered)
        .map_err(|e| BackendError::InvalidArgument(format!("the tool's URL is not valid after filling it in: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(BackendError::InvalidArgument(format!(
            "the tool's URL scheme `{}` is not http or https",
            url.scheme()
        )));
    }
    Ok(url)
}

/// Refuses a URL *path* placeholder value that contains a `..` path segment, i.e. `..` next to
/// `/` or `\` (or a value that is exactly `..`), also when percent-encoded (once or more):
/// `../x`, `..\x`, `..%2fx`, `%2e%2e%2f`, `%252e%252e%252f`, `..;/x` (path parameters).
///
/// The value is percent-encoded before it goes into the URL, so for a standards-following
/// backend it stays one segment. But backends and the proxies in front of them often decode
/// `%2F` before routing, or decode twice, and then `..%2F..%2Fadmin` climbs out of the
/// directory the tool was meant to reach. No ID, name or slug a tool takes in its path needs
/// such a value, so it is refused by default; `allow_path_traversal = true` opts a tool out.
/// Query values are not checked: they are never part of a path.
fn reject_path_traversal(url: &Template, args: &Map<String, Value>, state: &Value) -> Result<(), BackendError> {
    for seg in &url.segments {
        let name = match seg {
            // Whatever follows `?` or `#` is no longer the path.
            Segment::Literal(text) if text.contains(['?', '#']) => break,
            Segment::Literal(_) => continue,
            Segment::Arg(name) => name.clone(),
            Segment::State(path) => format!("state.{}", path.join(".")),
        };
        let Some(value) = lookup(seg, args, state) else {
            continue;
        };
        if is_path_traversal(&scalar_text(value)) {
            return Err(BackendError::InvalidArgument(format!(
                "the value of `{name}` is placed in the URL path and must not contain a `..` path segment (`../`, `..\\`, or their percent-encoded forms); pass a plain name or identifier"
            )));
        }
    }
    Ok(())
}

/// Does `value` hold a `..` path segment, as is or after undoing up to three layers of percent
/// encoding? Separators are `/` and `\`; a `;…` suffix (path parameters, which some servers
/// strip before resolving) is ignored.
pub fn is_path_traversal(value: &str) -> bool {
    let has_dot_dot = |s: &str| {
        s.split(['/', '\\'])
            .any(|part| part.split(';').next().is_some_and(|p| p == ".."))
    };
    let mut text = value.to_owned();
    for _ in 0..4 {
        if has_dot_dot(&text) {
            return true;
        }
        let decoded = percent_decode_str(&text).decode_utf8_lossy().into_owned();
        if decoded == text {
            break;
        }
        text = decoded;
    }
    false
}

/// URL parsers resolve `.` and `..` path segments (also as `%2e%2e`), so a value that is
/// exactly `..` would climb out of its place even though `/` is encoded. No legitimate tool
/// URL has such a segment, so any is refused.
fn reject_dot_segments(rendered: &str) -> Result<(), BackendError> {
    let after_scheme = rendered.split_once("://").map_or(rendered, |(_, rest)| rest);
    let Some(slash) = after_scheme.find('/') else {
        return Ok(());
    };
    let path = &after_scheme[slash..];
    let path = path.split(['?', '#']).next().unwrap_or(path);
    for segment in path.split('/') {
        let decoded = percent_decode_str(segment).decode_utf8_lossy();
        if decoded == "." || decoded == ".." {
            return Err(BackendError::InvalidArgument(
                "a URL path segment may not be `.` or `..`".to_owned(),
            ));
        }
    }
    Ok(())
}

/// Headers from the tool's templates, then `Idempotency-Key` and `User-Agent`, which always
/// win. Values are rendered raw (a header value is not a URL), but CR and LF are refused so
/// an argument cannot end the header and start another. A header whose template renders empty
/// because its placeholder is absent is not sent.
fn build_headers(spec: &HttpSpec, attempt: &Attempt<'_>) -> Result<HeaderMap, BackendError> {
    let mut headers = HeaderMap::new();
    for (name, tpl) in &spec.headers {
        let value = tpl.render(attempt.arguments, attempt.state, str::to_owned);
        if value.is_empty()
            && tpl
                .placeholders()
                .any(|p| lookup(p, attempt.arguments, attempt.state).is_none())
        {
            continue;
        }
        if value.contains(['\r', '\n']) {
            return Err(BackendError::InvalidArgument(format!(
                "the value for header `{name}` contains a line break"
            )));
        }
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| BackendError::InvalidArgument(format!("`{name}` is not a valid header name")))?;
        let value = HeaderValue::from_bytes(value.as_bytes()).map_err(|_| {
            BackendError::InvalidArgument(format!("the value for header `{name}` contains control characters"))
        })?;
        headers.append(name, value);
    }
    let key = HeaderValue::from_str(attempt.idempotency_key)
        .map_err(|_| BackendError::InvalidArgument("the idempotency key is not a valid header value".to_owned()))?;
    headers.insert(HeaderName::from_static("idempotency-key"), key);
    headers.insert(USER_AGENT, HeaderValue::from_static(USER_AGENT_VALUE));
    Ok(headers)
}

/// Renders a JSON body template: a string that is exactly one placeholder becomes the value
/// itself (keeping numbers, booleans, objects), `null` when absent; other strings are
/// interpolated; everything else is copied. Templates were checked at load, so a string that
/// no longer parses is kept literally rather than failing the call.
pub fn render_body(tpl: &Value, args: &Map<String, Value>, state: &Value) -> Value {
    match tpl {
        Value::String(s) => match Template::parse(s) {
            Ok(t) => match t.single_placeholder() {
                Some(seg) => lookup(seg, args, state).cloned().unwrap_or(Value::Null),
                None => Value::String(t.render(args, state, str::to_owned)),
            },
            Err(_) => Value::String(s.clone()),
        },
        Value::Array(items) => Value::Array(items.iter().map(|v| render_body(v, args, state)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), render_body(v, args, state)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Parses a `Retry-After` value (RFC 9110 §10.2.3): delta-seconds or an HTTP-date. A date in
/// the past means "now" (zero); anything unparseable, or longer than [`MAX_RETRY_AFTER`], is
/// `None`, so the executor falls back to its own backoff.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    let wait = if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        Duration::from_secs(value.parse::<u64>().ok()?)
    } else {
        let when = httpdate::parse_http_date(value).ok()?;
        when.duration_since(now).unwrap_or(Duration::ZERO)
    };
    (wait <= MAX_RETRY_AFTER).then_some(wait)
}

/// A failure while reading a response body.
enum ReadError {
    Timeout,
    Io(String),
}

impl ReadError {
    fn into_backend_error(self, timeout: Duration) -> BackendError {
        match self {
            ReadError::Timeout => BackendError::Timeout {
                timeout,
                sent: true,
                signal: None,
            },
            ReadError::Io(msg) => BackendError::Io(msg),
        }
    }
}

/// Reads the body into `buf` until it ends or holds `limit` bytes; never more. `buf` is
/// caller-owned so whatever arrived before a timeout is still there. Dropping `response` with
/// unread data closes the connection instead of returning it to the pool.
async fn read_capped(response: reqwest::Response, limit: usize, buf: &mut Vec<u8>) -> Result<(), ReadError> {
    let mut stream = pin!(response.bytes_stream());
    while buf.len() < limit {
        match stream.next().await {
            None => break,
            Some(Ok(chunk)) => {
                let room = limit - buf.len();
                buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            Some(Err(e)) if e.is_timeout() => return Err(ReadError::Timeout),
            Some(Err(e)) => {
                return Err(ReadError::Io(format!(
                    "reading the response body failed: {}",
                    describe(e)
                )));
            }
        }
    }
    Ok(())
}

/// A non-2xx answer: status, `Retry-After`, and a short excerpt of the body. The excerpt is read
/// within the attempt's budget; if the body stalls or breaks, what arrived is used.
async fn read_status_error(response: reqwest::Response, deadline: Instant) -> BackendError {
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| parse_retry_after(v, SystemTime::now()));
    let mut buf = Vec::new();
    let _ = tokio::time::timeout_at(deadline, read_capped(response, EXCERPT_READ_BYTES, &mut buf)).await;
    BackendError::Status {
        status,
        body_excerpt: excerpt(&buf),
        retry_after,
    }
}

/// At most [`EXCERPT_READ_BYTES`], lossy UTF-8 (cut at a character boundary), on one line.
/// [`BackendError::to_tool_error`] cuts it to [`super::EXCERPT_BYTES`] after redaction.
fn excerpt(bytes: &[u8]) -> String {
    let cut = char_boundary_cut(bytes, EXCERPT_READ_BYTES);
    let text = String::from_utf8_lossy(&bytes[..cut]);
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The largest length `<= max` that does not split a UTF-8 sequence at the end of `bytes[..max]`.
fn char_boundary_cut(bytes: &[u8], max: usize) -> usize {
    if bytes.len() <= max {
        return bytes.len();
    }
    let is_continuation = |b: u8| b & 0xC0 == 0x80;
    if !bytes.get(max).copied().is_some_and(is_continuation) {
        return max;
    }
    // The byte after the cut continues a character: back up to that character's lead byte
    // (at most 3 steps; beyond that the input is not UTF-8 anyway and is cut as-is).
    let mut i = max;
    while i > 0 && max - i < 3 && bytes.get(i).copied().is_some_and(is_continuation) {
        i -= 1;
    }
    if bytes.get(i).copied().is_some_and(is_continuation) {
        max
    } else {
        i
    }
}

/// Turns a 2xx body (at most `cap + 1` bytes) into the output: JSON stays JSON (the JSON files
/// form is split into content and files), text stays text, binary becomes one file with the
/// exact bytes (never text). An over-long body is an error for JSON and binary (they cannot be
/// cut) and truncated for text.
fn decode_body(
    status: StatusCode,
    kind: &BodyKind,
    disposition: Option<&str>,
    buf: Vec<u8>,
    cap: usize,
) -> Result<Output, BackendError> {
    let over = buf.len() > cap;
    let is_json = *kind == BodyKind::Json;
    if buf.is_empty() && (status == StatusCode::NO_CONTENT || is_json) {
        return Ok(Output::new(Value::Null, false));
    }
    if buf.is_empty() {
        return Ok(Output::new(Value::String(String::new()), false));
    }
    let binary = match kind {
        BodyKind::Binary(mime) => Some(mime.as_str()),
        // No type given: UTF-8 (possibly cut mid-character at the cap) is text, the rest a file.
        BodyKind::Unknown if !looks_like_text(&buf, cap) => Some("application/octet-stream"),
        _ => None,
    };
    if let Some(mime) = binary {
        if over {
            return Err(BackendError::OutputTooLarge { limit: cap });
        }
        return Ok(files::binary_output(buf, mime, disposition));
    }
    if is_json {
        if over {
            return Err(BackendError::OutputTooLarge { limit: cap });
        }
        if let Ok(value) = serde_json::from_slice::<Value>(&buf) {
            return files::with_json_files(Output::new(value, false), cap);
        }
        // A backend that labels text as JSON: keep what it said rather than fail the call.
    }
    let cut = if over { char_boundary_cut(&buf, cap) } else { buf.len() };
    let text = match String::from_utf8(buf) {
        Ok(mut s) => {
            s.truncate(cut);
            s
        }
        Err(e) => String::from_utf8_lossy(&e.into_bytes()[..cut]).into_owned(),
    };
    Ok(Output::new(Value::String(text), over))
}

/// Is an untyped body text? Valid UTF-8 up to the cap (a character split by the cap is fine).
fn looks_like_text(buf: &[u8], cap: usize) -> bool {
    let head = &buf[..char_boundary_cut(buf, cap)];
    std::str::from_utf8(head).is_ok()
}

/// Maps a failure before the response head arrived.
fn classify_send_error(e: reqwest::Error, probe: &ConnectProbe, timeout: Duration) -> BackendError {
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        if let Some(b) = s.downcast_ref::<Blocked>() {
            return BackendError::Blocked(format!("{b}; this destination is not allowed for tools"));
        }
        source = s.source();
    }
    // Before `is_connect`: a certificate error happens while connecting, but unlike a refused
    // connection it will not go away on retry. (With TLS 1.3 a refused client certificate is
    // only reported when the response is read; it is the same failure.)
    if let Some(t) = tls::find_tls_error(&e) {
        return BackendError::Tls(t.to_string());
    }
    if e.is_connect() {
        // Connect (and DNS) failures happen before anything is written.
        if e.is_timeout() {
            BackendError::Timeout {
                timeout,
                sent: false,
                signal: None,
            }
        } else {
            BackendError::Connect(describe(e))
        }
    } else if e.is_timeout() {
        BackendError::Timeout {
            timeout,
            sent: probe.may_have_sent(),
            signal: None,
        }
    } else if e.is_builder() {
        BackendError::InvalidArgument(format!("the request cannot be built: {}", describe(e)))
    } else {
        // The connection broke after the request may have been written.
        BackendError::Io(describe(e))
    }
}

/// The error and its causes on one line, without the URL: it can carry state values from
/// templates, and this text reaches the model.
fn describe(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut parts = vec![e.to_string()];
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        let text = s.to_string();
        if parts.last() != Some(&text) {
            parts.push(text);
        }
        source = s.source();
    }
    parts.join(": ")
}

tokio::task_local! {
    /// The probe of the attempt whose future is being polled (set around `execute`).
    static CONNECT_PROBE: Arc<ConnectProbe>;
}

/// Whether a timeout hit while this attempt's own connection was still being established.
///
/// A timeout from the outer per-attempt bound cannot say on its own whether the request was
/// written. The connector layer marks `connecting` when a connect starts inside the attempt's
/// task and clears it when the connect finishes. If the pool hands the request an idle
/// connection while that connect is still running, hyper moves the connect to a background
/// task; the layer notices it is polled outside the attempt (`detached`) and from then on the
/// attempt may have been sent. Any doubt counts as sent, which only costs a retry for
/// non-idempotent tools.
#[derive(Debug, Default)]
struct ConnectProbe {
    connecting: AtomicBool,
    detached: AtomicBool,
}

impl ConnectProbe {
    fn may_have_sent(&self) -> bool {
        !self.connecting.load(Ordering::SeqCst) || self.detached.load(Ordering::SeqCst)
    }
}

/// The connector layer that feeds [`ConnectProbe`].
#[derive(Debug, Clone, Copy)]
struct ConnectProbeLayer;

impl<S> tower::Layer<S> for ConnectProbeLayer {
    type Service = ConnectProbeService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ConnectProbeService { inner }
    }
}

#[derive(Debug, Clone)]
struct ConnectProbeService<S> {
    inner: S,
}

impl<S, R> tower::Service<R> for ConnectProbeService<S>
where
    S: tower::Service<R>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> Self::Future {
        let probe = CONNECT_PROBE.try_with(Arc::clone).ok();
        if let Some(p) = &probe {
            p.connecting.store(true, Ordering::SeqCst);
        }
        let mut fut = Box::pin(self.inner.call(req));
        Box::pin(std::future::poll_fn(move |cx| {
            if let Some(p) = &probe
                && !CONNECT_PROBE.try_with(|cur| Arc::ptr_eq(cur, p)).unwrap_or(false)
            {
                p.detached.store(true, Ordering::SeqCst);
            }
            let poll = fut.as_mut().poll(cx);
            // Cleared only on completion: when the attempt is dropped by its timeout, the
            // probe must still say the connect was in progress.
            if poll.is_ready()
                && let Some(p) = &probe
            {
                p.connecting.store(false, Ordering::SeqCst);
            }
            poll
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A URL without placeholders is parsed once at load; the call then gets the same URL (with
    /// the query entries) as parsing it per call.
    #[test]
    fn a_static_url_parsed_at_load_builds_the_same_url() {
        let mut per_call = spec("http://example.com/a/b");
        per_call.query = vec![("q".into(), Template::parse("{q}").unwrap())];
        let mut once = per_call.clone();
        once.static_url = Some(parse_url("http://example.com/a/b").unwrap());
        let args = json!({"q": "x y&z"}).as_object().unwrap().clone();
        let a = build_url(&per_call, &args, &json!(null)).unwrap();
        let b = build_url(&once, &args, &json!(null)).unwrap();
        assert_eq!(a, b);
        assert_eq!(b.as_str(), "http://example.com/a/b?q=x+y%26z");
        assert!(parse_url("ftp://example.com/").is_err() && parse_url("http://h/a/../b").is_err());
    }

    fn spec(url: &str) -> HttpSpec {
        HttpSpec {
            method: reqwest::Method::GET,
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

    /// The URL for `template` with `{v}` = `value`, the tool opted out of the `..` check.
    fn url_for(template: &str, value: &str) -> Result<Url, BackendError> {
        let args = json!({ "v": value });
        let mut s = spec(template);
        s.allow_path_traversal = true;
        build_url(&s, args.as_object().unwrap(), &json!({}))
    }

    /// The URL with the default `..` check.
    fn checked_url_for(template: &str, value: &str) -> Result<Url, BackendError> {
        let args = json!({ "v": value });
        build_url(&spec(template), args.as_object().unwrap(), &json!({}))
    }

    #[test]
    fn path_traversal_values_are_refused_by_default_naming_the_parameter() {
        for value in [
            "..",
            "../x",
            "../../etc/passwd",
            "a/../b",
            "a/..",
            "..\\x",
            "x\\..\\y",
            "..%2fx",
            "..%2Fx",
            "%2e%2e%2fx",
            "%2E%2E/x",
            "%2e%2e",
            ".%2e/x",
            "..%5cx",
            "%252e%252e%252fx",
            "..;/x",
            "a/..;jsessionid=1/b",
        ] {
            match checked_url_for("http://h/files/{v}/raw", value) {
                Err(BackendError::InvalidArgument(m)) => assert!(m.contains("`v`"), "{value}: {m}"),
                other => panic!("{value}: {other:?}"),
            }
        }
        for value in ["...", "a..b", "..x", "x..", "v1.2", "a/b", "%2e", ".hidden", "a%2F..b"] {
            assert!(checked_url_for("http://h/files/{v}/raw", value).is_ok(), "{value}");
        }
        // Query placeholders are not path placeholders.
        assert!(checked_url_for("http://h/files?q={v}", "../x").is_ok());
        // The opt-out keeps the value, encoded, in its one segment.
        assert_eq!(url_for("http://h/f/{v}", "../x").unwrap().path(), "/f/..%2Fx");
        // State placeholders are named as such.
        let mut s = spec("http://h/u/{state.user}/x");
        s.allow_path_traversal = false;
        let err = build_url(&s, &Map::new(), &json!({"user": "../admin"})).unwrap_err();
        assert!(err.to_string().contains("`state.user`"), "{err}");
    }

    #[test]
    fn retry_after_seconds() {
        let now = SystemTime::now();
        assert_eq!(parse_retry_after("0", now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after(" 120 ", now), Some(Duration::from_secs(120)));
        assert_eq!(parse_retry_after("3600", now), Some(Duration::from_secs(3600)));
    }

    #[test]
    fn retry_after_http_date_future_and_past() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let future = httpdate::fmt_http_date(now + Duration::from_secs(90));
        assert_eq!(parse_retry_after(&future, now), Some(Duration::from_secs(90)));
        let past = httpdate::fmt_http_date(now - Duration::from_secs(90));
        assert_eq!(parse_retry_after(&past, now), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn retry_after_garbage_and_huge() {
        let now = SystemTime::now();
        for v in ["", "soon", "-1", "1.5", "12abc", "Wed, 99 Foo 2015"] {
            assert_eq!(parse_retry_after(v, now), None, "{v:?}");
        }
        assert_eq!(parse_retry_after("99999", now), Some(Duration::from_secs(99999)));
        assert_eq!(parse_retry_after("604801", now), None);
        assert_eq!(parse_retry_after("99999999999999999999999", now), None);
        let far = httpdate::fmt_http_date(now + Duration::from_secs(8 * 24 * 3600));
        assert_eq!(parse_retry_after(&far, now), None);
    }

    #[test]
    fn url_values_stay_in_one_segment() {
        for value in [
            "../../etc/passwd",
            "a/b?c#d",
            "x y%",
            "naïve/日本",
            "%2e%2e%2fx",
            "user@evil:80",
        ] {
            let url = url_for("http://h.example:8080/files/{v}/raw", value).unwrap();
            assert_eq!(url.host_str(), Some("h.example"), "{value}");
            assert_eq!(url.port(), Some(8080));
            assert_eq!(url.query(), None, "{value}");
            assert_eq!(url.fragment(), None, "{value}");
            let segments: Vec<&str> = url.path_segments().unwrap().collect();
            assert_eq!(segments.len(), 3, "{value}: {segments:?}");
            assert_eq!(segments[0], "files");
            assert_eq!(segments[2], "raw");
            assert_eq!(percent_decode_str(segments[1]).decode_utf8().unwrap(), value);
        }
        assert_eq!(
            url_for("http://h/f/{v}", "../../etc/passwd").unwrap().as_str(),
            "http://h/f/..%2F..%2Fetc%2Fpasswd"
        );
        assert_eq!(url_for("http://h/f/{v}", "x y%").unwrap().path(), "/f/x%20y%25");
    }

    #[test]
    fn dot_segments_are_refused() {
        for value in ["..", "."] {
            assert!(
                matches!(
                    url_for("http://h/a/{v}/b", value),
                    Err(BackendError::InvalidArgument(_))
                ),
                "{value}"
            );
        }
        // With the opt-out, a pre-encoded dot segment is encoded again, so it is just text.
        assert_eq!(url_for("http://h/a/{v}", "%2e%2e").unwrap().path(), "/a/%252e%252e");
        // Dots inside a segment are fine.
        assert_eq!(url_for("http://h/a/{v}", "...").unwrap().path(), "/a/...");
        assert_eq!(url_for("http://h/a/{v}.json", ".").unwrap().path(), "/a/..json");
    }

    #[test]
    fn query_entries_are_encoded_and_absent_ones_omitted() {
        let mut s = spec("http://h/q?fixed=1");
        s.query = vec![
            ("q".into(), Template::parse("{q}").unwrap()),
            ("units".into(), Template::parse("{units}").unwrap()),
            ("empty".into(), Template::parse("{e}").unwrap()),
            ("lit".into(), Template::parse("").unwrap()),
        ];
        let args = json!({"q": "a&b=c d#", "e": ""});
        let url = build_url(&s, args.as_object().unwrap(), &json!({})).unwrap();
        let pairs: Vec<(String, String)> = url.query_pairs().into_owned().collect();
        assert_eq!(
            pairs,
            vec![
                ("fixed".into(), "1".into()),
                ("q".into(), "a&b=c d#".into()),
                ("empty".into(), String::new()),
                ("lit".into(), String::new()),
            ]
        );
        assert_eq!(url.fragment(), None);
    }

    #[test]
    fn body_template_keeps_types() {
        let tpl =
            json!({"n": "{n}", "s": "id-{n}", "missing": "{x}", "nested": ["{obj}", 1, true], "u": "{state.user}"});
        let args = json!({"n": 3, "obj": {"a": [1]}});
        let out = render_body(&tpl, args.as_object().unwrap(), &json!({"user": "u-1"}));
        assert_eq!(
            out,
            json!({"n": 3, "s": "id-3", "missing": null, "nested": [{"a": [1]}, 1, true], "u": "u-1"})
        );
    }

    #[test]
    fn cuts_text_at_char_boundaries() {
        let s = "aé日".as_bytes(); // 1 + 2 + 3 bytes
        assert_eq!(char_boundary_cut(s, 1), 1);
        assert_eq!(char_boundary_cut(s, 2), 1);
        assert_eq!(char_boundary_cut(s, 3), 3);
        assert_eq!(char_boundary_cut(s, 4), 3);
        assert_eq!(char_boundary_cut(s, 5), 3);
        assert_eq!(char_boundary_cut(s, 6), 6);
        assert_eq!(excerpt(b"line one\r\n  line\ttwo\n"), "line one line two");
    }

    #[test]
    fn json_content_types() {
        let is_json = |v| files::classify(Some(v)) == BodyKind::Json;
        assert!(is_json("application/json"));
        assert!(is_json("Application/JSON; charset=utf-8"));
        assert!(is_json("application/problem+json"));
        assert!(!is_json("text/plain"));
        assert!(!is_json("application/jsonl"));
    }

    #[test]
    fn binary_bodies_become_files_never_text() {
        let png = b"\x89PNG\r\n\x1a\n\xff\xfe".to_vec();
        let kind = BodyKind::Binary("image/png".into());
        let out = decode_body(StatusCode::OK, &kind, None, png.clone(), 100).unwrap();
        assert_eq!(&out.files[0].data[..], &png[..]);
        assert_eq!(out.files[0].filename, "file.png");
        assert_eq!(
            decode_body(StatusCode::OK, &kind, None, png.clone(), 4).unwrap_err(),
            BackendError::OutputTooLarge { limit: 4 }
        );
        // Untyped: UTF-8 is text, anything else a file.
        let out = decode_body(StatusCode::OK, &BodyKind::Unknown, None, png, 100).unwrap();
        assert_eq!(out.files[0].mime_type, "application/octet-stream");
        let out = decode_body(StatusCode::OK, &BodyKind::Unknown, None, b"hello".to_vec(), 100).unwrap();
        assert_eq!(out.value, json!("hello"));
        assert!(out.files.is_empty());
    }
}
