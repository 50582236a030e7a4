//! Streaming `POST /v1/execute`: Server-Sent Events or NDJSON.
//!
//! Events arrive as they happen — `call_started`, `attempt_failed` (with the error and the
//! delay before the next attempt), `call_finished` (the result object), in completion order and
//! tied to calls by `index` and `id` — and last a `response` event holding exactly the body the
//! non-streaming request would have returned. The work runs in its own task; when the client
//! disconnects, the response stream is dropped, which cancels the request: running calls are
//! dropped (process groups killed, HTTP requests aborted).

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse as _, Response};
use futures_util::stream::{self, StreamExt as _};
use serde_json::{Value, json};

use super::AppState;
use crate::executor::ExecEvent;
use crate::registry::Registry;
use crate::turn::{self, ExecuteRequest, Prepared};

/// The streaming formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamFormat {
    Sse,
    Ndjson,
}

/// The streaming format the client asked for with `Accept`, if any.
pub fn wanted(headers: &HeaderMap) -> Option<StreamFormat> {
    let accept = headers.get(header::ACCEPT)?.to_str().ok()?.to_ascii_lowercase();
    if accept.contains("text/event-stream") {
        Some(StreamFormat::Sse)
    } else if accept.contains("application/x-ndjson") {
        Some(StreamFormat::Ndjson)
    } else {
        None
    }
}

enum Frame {
    Event(ExecEvent),
    Response(Value),
}

/// Starts the work and returns the streaming response.
pub fn respond(
    state: AppState,
    registry: Arc<Registry>,
    prepared: Prepared,
    req: ExecuteRequest,
    format: StreamFormat,
    principal: String,
) -> Response {
    let (events_tx, mut events_rx) = tokio::sync::mpsc::unbounded_channel::<ExecEvent>();
    let (frames_tx, frames_rx) = tokio::sync::mpsc::unbounded_channel::<Frame>();
    let cancel = state.cancel.child_token();
    // Dropped with the response body (client gone): cancels the request's calls.
    let guard = cancel.clone().drop_guard();
    let forward = frames_tx.clone();
    let forwarder = tokio::spawn(async move {
        while let Some(ev) = events_rx.recv().await {
            if forward.send(Frame::Event(ev)).is_err() {
                break;
            }
        }
    });
    // The calls run in their own task; they stay in the request's trace.
    tokio::spawn(crate::telemetry::traces::in_current_trace(async move {
        let ctx = turn::Context {
            executor: &state.executor,
            registry: &registry,
            principal: &principal,
            cancel: &cancel,
        };
        let resp = turn::run_with_events(ctx, prepared, &req, Some(&events_tx)).await;
        // Closing the event channel ends the forwarder once every event has been passed on, so
        // the `response` frame is always last.
        drop(events_tx);
        let _ = forwarder.await;
        let body = serde_json::to_value(&resp).unwrap_or(Value::Null);
        let _ = frames_tx.send(Frame::Response(body));
    }));
    let frames = stream::unfold((frames_rx, Some(guard), false), |(mut rx, guard, done)| async move {
        if done {
            return None;
        }
        let frame = rx.recv().await?;
        let last = matches!(frame, Frame::Response(_));
        Some((frame, (rx, guard, last)))
    });
    let bytes = frames.map(move |frame| Ok::<Bytes, Infallible>(encode(format, frame)));
    let content_type = match format {
        StreamFormat::Sse => "text/event-stream",
        StreamFormat::Ndjson => "application/x-ndjson",
    };
    let mut resp = Body::from_stream(bytes).into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp.headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}

fn encode(format: StreamFormat, frame: Frame) -> Bytes {
    let (name, value) = match frame {
        Frame::Event(ev) => {
            let v = serde_json::to_value(&ev).unwrap_or(Value::Null);
            (v["event"].as_str().unwrap_or("event").to_owned(), v)
        }
        // SSE names the event on its own line, so its data is exactly the non-streaming body;
        // an NDJSON line needs the `event` key to tell it apart.
        Frame::Response(body) => match format {
            StreamFormat::Sse => ("response".to_owned(), body),
            StreamFormat::Ndjson => ("response".to_owned(), json!({"event": "response", "response": body})),
        },
    };
    match format {
        StreamFormat::Sse => Bytes::from(format!("event: {name}\ndata: {value}\n\n")),
        StreamFormat::Ndjson => Bytes::from(format!("{value}\n")),
    }
}

/// True for a streamed answer (SSE or NDJSON), whose body outlives the handler.
pub fn is_stream(resp: &Response) -> bool {
    resp.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("text/event-stream") || ct.starts_with("application/x-ndjson"))
}

/// `body`, holding `permit` until its last chunk is sent or it is dropped (client gone): a
/// streamed request occupies its work slot for as long as it works.
pub fn hold_until_end(body: Body, permit: tokio::sync::OwnedSemaphorePermit) -> Body {
    let mut permit = Some(permit);
    Body::from_stream(body.into_data_stream().map(move |chunk| {
        // Touch the permit so the closure owns it; it is released with the stream.
        let _held = permit.as_ref();
        if chunk.is_err() {
            permit.take();
        }
        chunk
    }))
}
