//! One span, one log line and the request metrics per HTTP request. Only the method (standard
//! ones by name, the rest as `other`), the matched route template (`unmatched` for any path no
//! route matched), the status and the latency are recorded — never raw paths, bodies, query
//! strings, headers or tool arguments, so label values are a fixed, small set. The same holds
//! for the OpenTelemetry server span, which continues the caller's `traceparent`.

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use tokio::time::Instant;
use tracing::Instrument as _;

use crate::telemetry::{metrics, traces};

/// Wraps every request.
pub(super) async fn observe(req: Request, next: Next) -> Response {
    let started = Instant::now();
    // A cheap clone (the template is shared), so no string is built per request.
    let matched = req.extensions().get::<MatchedPath>().cloned();
    let route = matched.as_ref().map_or("unmatched", MatchedPath::as_str);
    let method = method_label(req.method());
    // `Span::none()` unless OpenTelemetry traces are on (`docs/tracing.md`).
    let trace = traces::request_span(req.headers(), method, matched.as_ref().map(MatchedPath::as_str));
    let span = tracing::info_span!("request", %method, %route);
    let resp = next.run(req).instrument(span.clone()).instrument(trace.clone()).await;
    let status = resp.status().as_u16();
    traces::finish_request(&trace, status);
    let elapsed = started.elapsed();
    span.in_scope(|| {
        tracing::info!(status, latency_ms = elapsed.as_secs_f64() * 1000.0, "Request finished.");
    });
    metrics::http_request(route, method, status, elapsed);
    resp
}

/// The method as a log field and metric label: the standard methods by name, anything else
/// (HTTP allows any token, e.g. `FOO123`) as `other`, so clients cannot mint label values.
fn method_label(method: &axum::http::Method) -> &'static str {
    use axum::http::Method;
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}
