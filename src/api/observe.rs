//! One span, one log line and the request metrics per HTTP request. Only the method, the
//! matched route template, the status and the latency are recorded — never bodies, query
//! strings, headers or tool arguments.

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use tokio::time::Instant;
use tracing::Instrument as _;

use crate::telemetry::metrics;

/// Wraps every request.
pub async fn observe(req: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let method = req.method().as_str().to_owned();
    let span = tracing::info_span!("request", %method, %route);
    let resp = next.run(req).instrument(span.clone()).await;
    let status = resp.status().as_u16();
    let elapsed = started.elapsed();
    span.in_scope(|| {
        tracing::info!(status, latency_ms = elapsed.as_secs_f64() * 1000.0, "Request finished.");
    });
    metrics::http_request(&route, &method, status, elapsed);
    resp
}
