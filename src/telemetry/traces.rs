//! OpenTelemetry traces over OTLP/HTTP protobuf (`docs/tracing.md`), off unless the standard
//! `OTEL_*` variables turn them on.
//!
//! Spans are ordinary `tracing` spans with the target [`TARGET`], bridged to OpenTelemetry by
//! `tracing-opentelemetry`; only that layer sees them (the log layer never does), and that layer
//! sees nothing else, so no log event or log span can leak into an exported trace. Every span
//! site checks [`enabled`] (one relaxed atomic load) first: with traces off no span is created,
//! no attribute is formatted and no layer is installed, so the per-call cost stays what it was.
//!
//! What is recorded is a fixed list of names and numbers (method, route template, status, tool
//! name, call id, error kind, attempt numbers): never arguments, state, outputs, headers, URLs
//! or error messages, which can carry user data and secrets.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator as _};
use opentelemetry::trace::{Status, TraceContextExt as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::resource::{EnvResourceDetector, TelemetryResourceDetector};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

/// The `tracing` target of every span meant for OpenTelemetry (and of nothing else).
pub const TARGET: &str = "toolwire::traces";

/// `service.name` when neither `OTEL_SERVICE_NAME` nor `OTEL_RESOURCE_ATTRIBUTES` names one.
pub const DEFAULT_SERVICE_NAME: &str = "toolwire";

/// Longest call id recorded as `gen_ai.tool.call.id`: ids come from the model, and a span
/// attribute must not grow with whatever it sends.
const MAX_CALL_ID_BYTES: usize = 128;

/// Set once, when the OpenTelemetry layer is installed.
static ON: AtomicBool = AtomicBool::new(false);

/// Whether traces are exported. The gate of every span site; a relaxed load is enough (it flips
/// once, before the server accepts its first connection).
#[inline]
pub fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

/// What the environment asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Export to the configured (or the default `http://localhost:4318`) endpoint.
    On,
    /// No export. `warn` is set when the variables asked for something toolwire cannot do
    /// (another exporter or protocol), so the operator learns why nothing arrives.
    Off { why: &'static str, warn: bool },
}

/// Decides from the `OTEL_*` variables (`var` reads one; tests pass a map). Traces are on when
/// the SDK is not disabled, the traces exporter is `otlp` or unset, and an endpoint is set
/// (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`) or the exporter is
/// named explicitly (`OTEL_TRACES_EXPORTER=otlp`, default endpoint). Unlike the SDKs' own
/// default (`otlp` to localhost), nothing is sent unless asked for: a sidecar should not
/// open connections nobody configured.
pub fn decide(var: impl Fn(&str) -> Option<String>) -> Decision {
    let get = |name: &str| var(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
    if get("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Decision::Off {
            why: "OTEL_SDK_DISABLED=true",
            warn: false,
        };
    }
    let mut named = false;
    if let Some(list) = get("OTEL_TRACES_EXPORTER") {
        let names: Vec<&str> = list.split(',').map(str::trim).collect();
        if names.iter().any(|n| n.eq_ignore_ascii_case("none")) {
            return Decision::Off {
                why: "OTEL_TRACES_EXPORTER=none",
                warn: false,
            };
        }
        if !names.iter().any(|n| n.eq_ignore_ascii_case("otlp")) {
            return Decision::Off {
                why: "OTEL_TRACES_EXPORTER names no exporter toolwire has (only `otlp` and `none`)",
                warn: true,
            };
        }
        named = true;
    }
    let protocol = get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL").or_else(|| get("OTEL_EXPORTER_OTLP_PROTOCOL"));
    if protocol.is_some_and(|p| p != "http/protobuf") {
        return Decision::Off {
            why: "the OTLP protocol is not `http/protobuf`, the only one toolwire speaks",
            warn: true,
        };
    }
    if named || get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some() || get("OTEL_EXPORTER_OTLP_ENDPOINT").is_some() {
        Decision::On
    } else {
        Decision::Off {
            why: "no OTLP endpoint is set",
            warn: false,
        }
    }
}

/// Why traces could not be set up (a bad endpoint URL, an unusable header).
#[derive(Debug, thiserror::Error)]
#[error("cannot set up OpenTelemetry traces: {0}")]
pub struct TracesError(String);

/// The running export pipeline; [`Tracing::shutdown`] flushes it.
#[derive(Debug)]
pub struct Tracing {
    provider: SdkTracerProvider,
}

/// Builds the exporter, the batch processor (on the current tokio runtime: call inside it) and
/// the layer that turns [`TARGET`] spans into OpenTelemetry spans. The exporter reads the
/// standard variables itself (endpoint, headers, timeout, compression), the SDK the sampler
/// (`OTEL_TRACES_SAMPLER`, `_ARG`; default parent-based always-on) and the batch limits
/// (`OTEL_BSP_*`: a bounded queue, 2048 spans by default; spans beyond it are dropped and the
/// drop is logged once).
pub fn build<S>() -> Result<(impl Layer<S>, Tracing), TracesError>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .build()
        .map_err(|e| TracesError(without_settings(&e.to_string(), |k| std::env::var(k).ok())))?;
    let processor = BatchSpanProcessor::builder(exporter, opentelemetry_sdk::runtime::Tokio).build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource(|k| std::env::var(k).ok()))
        .build();
    let tracer = provider.tracer("toolwire");
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        // Only the attributes we set: no source paths, thread names, levels or busy/idle times.
        .with_location(false)
        .with_threads(false)
        .with_level(false)
        .with_target(false)
        .with_tracked_inactivity(false)
        .with_filter(tracing_subscriber::filter::filter_fn(|m| m.target() == TARGET));
    Ok((layer, Tracing { provider }))
}

/// `message` with the values of the endpoint and header variables cut out: an endpoint URL can
/// hold credentials (`https://user:key@…`) and headers hold API keys, and the exporter's errors
/// quote what they reject.
fn without_settings(message: &str, var: impl Fn(&str) -> Option<String>) -> String {
    let mut out = message.to_owned();
    for name in [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        "OTEL_EXPORTER_OTLP_HEADERS",
    ] {
        if let Some(value) = var(name).filter(|v| !v.is_empty()) {
            out = out.replace(&value, &format!("(the value of {name})"));
        }
    }
    out
}

/// Turns the span sites on. Called once the layer is installed.
pub fn set_enabled() {
    ON.store(true, Ordering::Relaxed);
}

/// `service.name` (`OTEL_SERVICE_NAME`, else `OTEL_RESOURCE_ATTRIBUTES`, else `toolwire`),
/// `service.version`, the SDK's own attributes and `OTEL_RESOURCE_ATTRIBUTES`.
fn resource(var: impl Fn(&str) -> Option<String>) -> Resource {
    let mut builder = Resource::builder_empty()
        .with_attributes([
            KeyValue::new("service.name", DEFAULT_SERVICE_NAME),
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
        ])
        .with_detectors(&[
            Box::new(TelemetryResourceDetector),
            Box::new(EnvResourceDetector::new()),
        ]);
    if let Some(name) = var("OTEL_SERVICE_NAME").filter(|n| !n.trim().is_empty()) {
        builder = builder.with_service_name(name);
    }
    builder.build()
}

impl Tracing {
    /// Exports what is still queued, waiting at most `limit`: called after the drain, on the
    /// thread that owns the runtime (not one of its workers, which run the export). An
    /// unreachable collector costs the shutdown `limit`, never more.
    pub fn shutdown(self, limit: Duration) {
        let (tx, rx) = std::sync::mpsc::channel();
        let provider = self.provider;
        let spawned = std::thread::Builder::new()
            .name("otel-flush".to_owned())
            .spawn(move || {
                let _ = tx.send(provider.shutdown());
            });
        if spawned.is_err() {
            tracing::warn!("Cannot start the trace flush; queued spans are dropped.");
            return;
        }
        match rx.recv_timeout(limit) {
            Ok(Ok(())) => tracing::debug!("Traces flushed."),
            Ok(Err(e)) => tracing::warn!(error = %e, "Flushing traces failed; queued spans are dropped."),
            Err(_) => tracing::warn!(
                limit_ms = limit.as_millis() as u64,
                "Flushing traces took too long; queued spans are dropped."
            ),
        }
    }
}

/// The server span of one HTTP request, child of the caller's `traceparent` (and
/// `tracestate`) when the request carries a valid one. `route` is the matched route template
/// (`None`: no route matched); `method` one of the fixed labels of the request metrics.
pub fn request_span(headers: &HeaderMap, method: &'static str, route: Option<&str>) -> Span {
    if !enabled() {
        return Span::none();
    }
    // Semantic conventions: an unknown method is `_OTHER`, the name `{method} {route}`.
    let method = if method == "other" { "_OTHER" } else { method };
    let name = match route {
        Some(r) => format!("{method} {r}"),
        None => method.to_owned(),
    };
    let span = tracing::info_span!(
        target: TARGET,
        "http_request",
        otel.name = name,
        otel.kind = "server",
        http.request.method = method,
        http.route = tracing::field::Empty,
        url.scheme = "http",
    );
    if let Some(r) = route {
        span.record("http.route", r);
    }
    let parent = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
    if parent.span().span_context().is_valid() {
        let _ = span.set_parent(parent);
    }
    span
}

/// Records the response status on a request span; a 5xx marks it failed.
pub fn finish_request(span: &Span, status: u16) {
    if !enabled() {
        return;
    }
    span.set_attribute("http.response.status_code", i64::from(status));
    if status >= 500 {
        span.set_attribute("error.type", status.to_string());
        span.set_status(Status::error(""));
    }
}

/// The `execute_tool {tool}` span of one call (GenAI semantic conventions). `tool` is a
/// registered name or the unknown-tool label, never a raw model-chosen name.
pub fn tool_span(tool: &str, call_id: Option<&str>) -> Span {
    if !enabled() {
        return Span::none();
    }
    let span = tracing::info_span!(
        target: TARGET,
        "execute_tool",
        otel.name = format!("execute_tool {tool}"),
        otel.kind = "internal",
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = tool,
        gen_ai.tool.type = "function",
        gen_ai.tool.call.id = tracing::field::Empty,
    );
    if let Some(id) = call_id {
        span.record("gen_ai.tool.call.id", bounded(id, MAX_CALL_ID_BYTES));
    }
    span
}

/// Records how a call ended: `error_kind` (toolwire's error kind, e.g. `backend_status`) as
/// `error.type` and an error status, the attempts, and whether it was replayed.
pub fn finish_tool(span: &Span, error_kind: Option<&'static str>, attempts: u32, replayed: bool) {
    if !enabled() {
        return;
    }
    span.set_attribute("toolwire.tool.attempts", i64::from(attempts));
    span.set_attribute("toolwire.tool.replayed", replayed);
    if let Some(kind) = error_kind {
        span.set_attribute("error.type", kind);
        span.set_status(Status::error(""));
    }
}

/// One backend attempt as an `attempt` event of the current tool span: its number, its
/// outcome (`ok` or the error kind) and, when another attempt follows, the backoff before it.
pub fn attempt(number: u32, outcome: &'static str, backoff: Option<Duration>) {
    if !enabled() {
        return;
    }
    let cx = Context::current();
    let span = cx.span();
    if !span.is_recording() {
        return;
    }
    let mut attributes = vec![
        KeyValue::new("toolwire.attempt.number", i64::from(number)),
        KeyValue::new("toolwire.attempt.outcome", outcome),
    ];
    if let Some(delay) = backoff {
        let ms = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
        attributes.push(KeyValue::new("toolwire.attempt.backoff_ms", ms));
    }
    span.add_event("attempt", attributes);
}

/// Adds `traceparent` (and `tracestate`) of the current span to a backend request, so the
/// backend's spans join the trace. A tool that sets `traceparent` itself keeps its own.
pub fn inject(headers: &mut HeaderMap) {
    if !enabled() || headers.contains_key("traceparent") {
        return;
    }
    let cx = Context::current();
    if cx.span().span_context().is_valid() {
        TraceContextPropagator::new().inject_context(&cx, &mut HeaderInjector(headers));
    }
}

/// `TRACEPARENT` (and `TRACESTATE`) of the current span for a subprocess tool's environment
/// (the OpenTelemetry convention for environment-variable carriers); empty when traces are off
/// or there is no span. A tool's own `env` entries of the same names win.
pub fn context_env() -> Vec<(&'static str, String)> {
    if !enabled() {
        return Vec::new();
    }
    let cx = Context::current();
    if !cx.span().span_context().is_valid() {
        return Vec::new();
    }
    let mut headers = HeaderMap::new();
    TraceContextPropagator::new().inject_context(&cx, &mut HeaderInjector(&mut headers));
    let mut env = Vec::with_capacity(2);
    for (header, var) in [("traceparent", "TRACEPARENT"), ("tracestate", "TRACESTATE")] {
        if let Some(v) = headers.get(header).and_then(|v| v.to_str().ok()) {
            env.push((var, v.to_owned()));
        }
    }
    env
}

/// `work` running in the current trace context, for work handed to another task (a streamed
/// response's calls): without it, spans created there would start new traces.
pub fn in_current_trace<F: std::future::Future>(work: F) -> futures_util::future::Either<F, WithContext<F>> {
    use opentelemetry::context::FutureExt as _;
    if enabled() {
        futures_util::future::Either::Right(work.with_context(Context::current()))
    } else {
        futures_util::future::Either::Left(work)
    }
}

/// A future that runs with an OpenTelemetry context attached.
pub type WithContext<F> = opentelemetry::context::WithContext<F>;

/// At most `max` bytes of `text`, cut at a character boundary.
fn bounded(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

struct HeaderExtractor<'a>(&'a HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

struct HeaderInjector<'a>(&'a mut HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (HeaderName::try_from(key), HeaderValue::try_from(value)) {
            self.0.insert(name, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::{Decision, decide};

    fn with(vars: &[(&str, &str)]) -> Decision {
        let map: HashMap<String, String> = vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        decide(|k| map.get(k).cloned())
    }

    #[test]
    fn off_unless_an_endpoint_or_the_exporter_is_named() {
        assert!(matches!(with(&[]), Decision::Off { warn: false, .. }));
        assert!(matches!(with(&[("OTEL_SERVICE_NAME", "x")]), Decision::Off { .. }));
        assert_eq!(with(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")]), Decision::On);
        assert_eq!(
            with(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4318/v1/traces")]),
            Decision::On
        );
        assert_eq!(with(&[("OTEL_TRACES_EXPORTER", "otlp")]), Decision::On);
        assert!(matches!(
            with(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "  ")]),
            Decision::Off { .. }
        ));
    }

    #[test]
    fn disabled_none_and_unsupported_settings_turn_it_off() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318");
        assert!(matches!(
            with(&[endpoint, ("OTEL_SDK_DISABLED", "TRUE")]),
            Decision::Off { warn: false, .. }
        ));
        assert_eq!(with(&[endpoint, ("OTEL_SDK_DISABLED", "false")]), Decision::On);
        assert!(matches!(
            with(&[endpoint, ("OTEL_TRACES_EXPORTER", "none")]),
            Decision::Off { warn: false, .. }
        ));
        assert!(matches!(
            with(&[endpoint, ("OTEL_TRACES_EXPORTER", "zipkin")]),
            Decision::Off { warn: true, .. }
        ));
        assert_eq!(
            with(&[endpoint, ("OTEL_TRACES_EXPORTER", "console, otlp")]),
            Decision::On
        );
        assert!(matches!(
            with(&[endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]),
            Decision::Off { warn: true, .. }
        ));
        assert_eq!(
            with(&[endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")]),
            Decision::On
        );
        // The signal-specific protocol wins over the generic one.
        assert_eq!(
            with(&[
                endpoint,
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
            ]),
            Decision::On
        );
    }

    #[test]
    fn setup_errors_do_not_quote_endpoints_or_headers() {
        let vars = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://user:k3y@bad host")];
        let map: HashMap<String, String> = vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        let msg = super::without_settings(
            "invalid endpoint 'http://user:k3y@bad host': invalid uri character",
            |k| map.get(k).cloned(),
        );
        assert_eq!(
            msg,
            "invalid endpoint '(the value of OTEL_EXPORTER_OTLP_ENDPOINT)': invalid uri character"
        );
    }

    #[test]
    fn service_name_defaults_to_toolwire_and_yields_to_the_environment() {
        let name = |vars: &[(&str, &str)]| {
            let map: HashMap<String, String> = vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
            let r = super::resource(|k| map.get(k).cloned());
            r.get(&opentelemetry::Key::new("service.name")).map(|v| v.to_string())
        };
        // (`OTEL_RESOURCE_ATTRIBUTES` is read from the process environment, unset here.)
        assert_eq!(name(&[]).as_deref(), Some(super::DEFAULT_SERVICE_NAME));
        assert_eq!(
            name(&[("OTEL_SERVICE_NAME", "agent-tools")]).as_deref(),
            Some("agent-tools")
        );
        assert_eq!(super::bounded("aé", 2), "a");
        assert_eq!(super::bounded("abc", 8), "abc");
    }
}
