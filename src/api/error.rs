//! Request errors in the one shape of `docs/api.md#errors`:
//! `{"error": {"code", "message", "details"}}`.
//!
//! A *tool* failure is never an `ApiError`: once a completion is understood the answer is 200
//! and each failed call is an error result. `ApiError` is for requests that cannot be served.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Value, json};

/// Why a request cannot be served. Each variant maps to exactly one status in
/// [`ApiError::status`] (an exhaustive match: a new variant will not compile without one).
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("no route for {0}")]
    NotFound(String),
    #[error("method {method} is not allowed on {path}")]
    MethodNotAllowed { method: String, path: String },
    #[error("{0}")]
    InvalidRequest(String),
    #[error("malformed JSON at line {line}, column {column}: {message}")]
    InvalidJson {
        line: usize,
        column: usize,
        message: String,
    },
    #[error("the request body is larger than {limit} bytes")]
    PayloadTooLarge { limit: usize },
    #[error("the request body was not received within {seconds} s")]
    BodyTimeout { seconds: u64 },
    #[error("expected `Content-Type: application/json`")]
    UnsupportedMediaType,
    #[error("unknown provider `{0}`")]
    UnknownProvider(String),
    #[error("{message}")]
    ProviderMismatch { message: String, detected: Option<String> },
    #[error("{0}")]
    Unprocessable(String),
    /// A `completion_stream` that cannot be assembled (see `docs/streaming.md#outcomes`).
    #[error("{0}")]
    InvalidStream(crate::provider::stream::StreamError),
    #[error("{0}")]
    TooManyCalls(String),
    #[error("{0}")]
    DuplicateCallId(String),
    #[error("this Idempotency-Key was used with a different request body")]
    IdempotencyKeyReused,
    #[error("tool `{0}` does not exist")]
    UnknownTool(String),
    #[error("the server is not ready: {0}")]
    NotReady(String),
    #[error("missing or invalid bearer token")]
    Unauthorized,
    #[error("the server is at capacity; retry after the delay in `Retry-After`")]
    Overloaded,
    /// The shared store did not answer; the detail (free of secrets) is logged, not sent.
    #[error("the Idempotency-Key store is unavailable; retry after the delay in `Retry-After`")]
    StoreUnavailable(String),
    #[error("internal error")]
    Internal(String),
}

/// The JSON body of every request error.
#[derive(Debug, Serialize)]
pub struct ErrorBody {
    pub code: &'static str,
    pub message: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<Value>,
}

impl ApiError {
    /// The HTTP status and stable code of each error.
    pub fn status(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::MethodNotAllowed { .. } => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            ApiError::InvalidRequest(_) => (StatusCode::BAD_REQUEST, "invalid_request"),
            ApiError::InvalidJson { .. } => (StatusCode::BAD_REQUEST, "invalid_json"),
            ApiError::PayloadTooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            ApiError::BodyTimeout { .. } => (StatusCode::REQUEST_TIMEOUT, "body_timeout"),
            ApiError::UnsupportedMediaType => (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type"),
            ApiError::UnknownProvider(_) => (StatusCode::UNPROCESSABLE_ENTITY, "unknown_provider"),
            ApiError::ProviderMismatch { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "provider_mismatch"),
            ApiError::Unprocessable(_) => (StatusCode::UNPROCESSABLE_ENTITY, "unprocessable"),
            ApiError::InvalidStream(_) => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_stream"),
            ApiError::TooManyCalls(_) => (StatusCode::UNPROCESSABLE_ENTITY, "too_many_calls"),
            ApiError::DuplicateCallId(_) => (StatusCode::UNPROCESSABLE_ENTITY, "duplicate_call_id"),
            ApiError::IdempotencyKeyReused => (StatusCode::UNPROCESSABLE_ENTITY, "idempotency_key_reused"),
            ApiError::UnknownTool(_) => (StatusCode::NOT_FOUND, "unknown_tool"),
            ApiError::NotReady(_) => (StatusCode::SERVICE_UNAVAILABLE, "not_ready"),
            ApiError::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized"),
            ApiError::Overloaded => (StatusCode::SERVICE_UNAVAILABLE, "overloaded"),
            ApiError::StoreUnavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "store_unavailable"),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }

    fn details(&self) -> Vec<Value> {
        match self {
            ApiError::InvalidJson { line, column, .. } => vec![json!({"line": line, "column": column})],
            ApiError::ProviderMismatch { detected: Some(d), .. } => vec![json!({"detected": d})],
            ApiError::InvalidStream(e) => vec![stream_error_detail(e)],
            _ => Vec::new(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status();
        if let ApiError::Internal(detail) = &self {
            // The detail is for operators; the client gets the generic message only.
            tracing::error!(%detail, "Request failed with an internal error.");
        }
        if let ApiError::StoreUnavailable(detail) = &self {
            tracing::warn!(%detail, "Idempotency-Key request refused: the shared store is unavailable.");
        }
        let body = ErrorBody {
            code,
            message: self.to_string(),
            details: self.details(),
        };
        let mut resp = (status, Json(json!({ "error": body }))).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if matches!(self, ApiError::PayloadTooLarge { .. } | ApiError::BodyTimeout { .. }) {
            // The body was not read to its end, so the connection cannot carry another request:
            // say so (RFC 9112 §9.6), or a client may put it back in its pool and lose its next
            // request to the close. The server then drains what the client still sends before
            // closing (`server::linger`), so the client reads this answer, not a reset.
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        if status == StatusCode::UNAUTHORIZED {
            // RFC 9110 §15.5.2: a 401 names the scheme to authenticate with.
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp
    }
}

/// `details[0]` of `invalid_stream`: which kind of failure, the provider, and the event index
/// when one event is at fault.
fn stream_error_detail(e: &crate::provider::stream::StreamError) -> Value {
    use crate::provider::stream::StreamError as S;
    match e {
        S::Wire { provider, .. } => json!({"reason": "wire", "provider": provider}),
        S::Event { provider, index, .. } => json!({"reason": "event", "provider": provider, "event": index}),
        S::NoTurn { provider, .. } => json!({"reason": "no_turn", "provider": provider}),
        S::Provider { provider, .. } => json!({"reason": "provider_error", "provider": provider}),
        S::TooManyEvents { max } => json!({"reason": "too_many_events", "max": max}),
        S::Undetectable => json!({"reason": "undetectable"}),
    }
}

impl From<crate::turn::ExecuteError> for ApiError {
    fn from(e: crate::turn::ExecuteError) -> Self {
        use crate::turn::ExecuteError as E;
        let message = e.to_string();
        match e {
            E::UnknownProvider(name) => ApiError::UnknownProvider(name),
            E::Undetectable => ApiError::ProviderMismatch {
                message,
                detected: None,
            },
            E::Mismatch { detected, .. } => ApiError::ProviderMismatch {
                message,
                detected: detected.map(|d| d.as_str().to_owned()),
            },
            E::Shape(_) => ApiError::ProviderMismatch {
                message,
                detected: None,
            },
            E::TooManyCalls { .. } => ApiError::TooManyCalls(message),
            E::DuplicateCallId(_) => ApiError::DuplicateCallId(message),
            E::BadState => ApiError::Unprocessable(message),
            E::CompletionOrStream | E::StreamShape => ApiError::Unprocessable(message),
            E::Stream(e) => ApiError::InvalidStream(e),
        }
    }
}
