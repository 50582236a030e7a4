//! `ApiJson<T>`: the JSON body extractor whose every rejection is an [`ApiError`] in the one
//! error shape — 415 for a wrong content type, 413 over the body limit (from the declared
//! `Content-Length` before reading, else while streaming), 400 with line and column
//! for malformed JSON (the body is never echoed), 422 for a well-formed body of the wrong shape.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::header;
use serde::de::DeserializeOwned;

use super::{ApiError, AppState};

/// A JSON request body.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        // The router's `DefaultBodyLimit` is this same value; it is read here so the 413 can
        // name it.
        let limit = state.config.limits.body_bytes;
        let is_json = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(|mime| {
                let mime = mime.trim().to_ascii_lowercase();
                mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json"))
            })
            .unwrap_or(false);
        if !is_json {
            return Err(ApiError::UnsupportedMediaType);
        }
        // A declared length over the limit is refused from the head alone, before any of the
        // body is read (the stream limit below still covers chunked bodies and lying lengths).
        check_declared_length(req.headers(), limit)?;
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::PayloadTooLarge { limit }
            } else {
                ApiError::InvalidRequest(format!("cannot read the request body: {}", rejection.body_text()))
            }
        })?;
        parse(&bytes).map(ApiJson)
    }
}

/// The body's declared `Content-Length`, refused with 413 from the head alone when it is over
/// `limit` (reading still enforces the limit for chunked bodies and lying lengths).
pub(super) fn check_declared_length(headers: &axum::http::HeaderMap, limit: usize) -> Result<Option<u64>, ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(ApiError::PayloadTooLarge { limit });
    }
    Ok(declared)
}

/// Parses a body: syntax errors (including invalid UTF-8 and nesting past serde_json's
/// recursion limit) → 400 with position; shape errors → 422. Every request body is a JSON
/// object: serde would also fill a struct from an array of its fields in order (`[null, {}]`),
/// which is not part of the API, so anything but an object is a shape error.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    // The usual case, a well-formed object of the right shape, is read straight into `T`:
    // going through a `Value` first would build every node of the completion twice. Anything
    // else (including a valid body that only the `Value` route accepts, such as one with a
    // repeated key) takes the route below, which also classifies the error.
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
        && let Ok(value) = serde_json::from_slice::<T>(bytes)
    {
        return Ok(value);
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::InvalidRequest(
            "the request body is empty; send a JSON object".into(),
        ));
    }
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| ApiError::InvalidJson {
        line: e.line(),
        column: e.column(),
        message: syntax_message(&e),
    })?;
    if !value.is_object() {
        return Err(ApiError::Unprocessable(
            "invalid request: the body must be a JSON object".into(),
        ));
    }
    serde_json::from_value(value).map_err(|e| ApiError::Unprocessable(format!("invalid request: {e}")))
}

/// serde_json's message without its trailing " at line L column C" (given separately).
fn syntax_message(e: &serde_json::Error) -> String {
    let full = e.to_string();
    match full.rfind(" at line ") {
        Some(pos) => full[..pos].to_owned(),
        None => full,
    }
}
