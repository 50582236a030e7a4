//! The `/mcp` route's guards around the MCP handler (`crate::mcp::server`): the same auth,
//! body read (limit and timeout) and load shedding as the work routes, plus a check that the
//! body is one JSON-RPC message, so that malformed input gets a JSON-RPC error object (the SDK
//! would answer a bare text line).

use axum::body::Body;
use axum::extract::{Extension, Request};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};
use serde_json::{Value, json};

use super::ApiError;
use super::guard::Principal;
use crate::mcp::server::Caller;

/// JSON-RPC "parse error".
const PARSE_ERROR: i64 = -32700;
/// JSON-RPC "invalid request".
const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC "internal error".
const INTERNAL_ERROR: i64 = -32603;

/// Passes the caller's principal to the MCP handler and refuses, with a JSON-RPC error and
/// `400`, a POST body that is not JSON or not a single JSON-RPC 2.0 message. Runs after the
/// body was read within its limits (`guard::read_body`), before a work slot is taken.
pub(super) async fn check_message(principal: Option<Extension<Principal>>, req: Request, next: Next) -> Response {
    let principal = principal.map_or_else(Principal::anonymous, |Extension(p)| p);
    let (mut parts, body) = req.into_parts();
    parts.extensions.insert(Caller(principal.0));
    if parts.method != Method::POST {
        // Stateless: no GET stream, no session to DELETE. The API's one 405 shape.
        let mut resp = ApiError::MethodNotAllowed {
            method: parts.method.to_string(),
            path: parts.uri.path().to_owned(),
        }
        .into_response();
        resp.headers_mut()
            .insert(header::ALLOW, header::HeaderValue::from_static("POST"));
        return resp;
    }
    // `read_body` has buffered the body already: this only takes the bytes back out.
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(b) => b,
        Err(e) => return rpc_error(INVALID_REQUEST, &format!("cannot read the request body: {e}")),
    };
    if let Err((code, message)) = check(&bytes) {
        crate::telemetry::metrics::rejected("mcp_malformed");
        return rpc_error(code, &message);
    }
    as_rpc_error(next.run(Request::from_parts(parts, Body::from(bytes))).await).await
}

/// The SDK answers transport-level refusals (a `Host` or `Origin` not allowed → 403, a wrong
/// `Accept` → 406, a wrong content type → 415, …) with a bare text line; such an answer is
/// turned into a JSON-RPC error object with the same status and message, so every error of
/// `/mcp` is JSON. JSON answers (JSON-RPC errors, the guards' errors) pass unchanged.
async fn as_rpc_error(resp: Response) -> Response {
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().to_ascii_lowercase().starts_with("application/json"));
    if resp.status().is_success() || is_json {
        return resp;
    }
    let status = resp.status();
    // These bodies are one short line; anything longer is cut, never buffered whole.
    let text = match axum::body::to_bytes(resp.into_body(), 4096).await {
        Ok(b) => String::from_utf8_lossy(&b).trim().to_owned(),
        Err(_) => String::new(),
    };
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_owned()
    } else {
        text
    };
    let code = if status.is_server_error() {
        INTERNAL_ERROR
    } else {
        INVALID_REQUEST
    };
    let mut out = rpc_error(code, &message);
    *out.status_mut() = status;
    out
}

/// Is `bytes` one JSON-RPC 2.0 message (request, notification or response)?
fn check(bytes: &[u8]) -> Result<(), (i64, String)> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err((
            PARSE_ERROR,
            "Parse error: the request body is empty; send one JSON-RPC message".into(),
        ));
    }
    let value: Value = serde_json::from_slice(bytes).map_err(|e| {
        let full = e.to_string();
        let what = full.rfind(" at line ").map_or(full.as_str(), |p| &full[..p]);
        (
            PARSE_ERROR,
            format!("Parse error: {what} at line {} column {}", e.line(), e.column()),
        )
    })?;
    let Value::Object(msg) = value else {
        let why = if value.is_array() {
            "JSON-RPC batches are not supported; send one message per POST"
        } else {
            "the body must be a JSON-RPC message object"
        };
        return Err((INVALID_REQUEST, format!("Invalid Request: {why}")));
    };
    if msg.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err((INVALID_REQUEST, "Invalid Request: `jsonrpc` must be \"2.0\"".into()));
    }
    match msg.get("method") {
        Some(Value::String(_)) => Ok(()),
        Some(_) => Err((INVALID_REQUEST, "Invalid Request: `method` must be a string".into())),
        None if msg.contains_key("result") || msg.contains_key("error") => Ok(()),
        None => Err((INVALID_REQUEST, "Invalid Request: a message needs a `method`".into())),
    }
}

/// A JSON-RPC error answer with no id (the request's could not be read), status 400.
fn rpc_error(code: i64, message: &str) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}});
    (
        StatusCode::BAD_REQUEST,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_single_jsonrpc_messages_pass() {
        assert!(check(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#).is_ok());
        assert!(check(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).is_ok());
        assert!(check(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#).is_ok());
        assert_eq!(check(b"{").unwrap_err().0, PARSE_ERROR);
        assert_eq!(check(b"  ").unwrap_err().0, PARSE_ERROR);
        assert_eq!(check(b"[]").unwrap_err().0, INVALID_REQUEST);
        assert_eq!(check(br#"{"id":1,"method":"x"}"#).unwrap_err().0, INVALID_REQUEST);
        assert_eq!(
            check(br#"{"jsonrpc":"2.0","id":1,"method":7}"#).unwrap_err().0,
            INVALID_REQUEST
        );
        assert_eq!(check(br#"{"jsonrpc":"2.0","id":1}"#).unwrap_err().0, INVALID_REQUEST);
    }
}
