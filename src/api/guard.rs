//! Middleware in front of the work routes: bearer-token auth and load shedding.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq as _;

use super::{ApiError, AppState};

/// Accepted bearer tokens, kept as SHA-256 digests so that comparing them takes the same time
/// whatever the candidate's length or content.
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    digests: Vec<[u8; 32]>,
}

impl Tokens {
    /// Tokens from config (already `${env:}`-resolved and checked for length).
    pub fn new(tokens: &[String]) -> Self {
        Tokens {
            digests: tokens.iter().map(|t| Sha256::digest(t.as_bytes()).into()).collect(),
        }
    }

    /// True when auth is on.
    pub fn enabled(&self) -> bool {
        !self.digests.is_empty()
    }

    /// Checks a candidate against every token without an early exit.
    pub fn accepts(&self, candidate: &str) -> bool {
        self.principal(candidate).is_some()
    }

    /// The principal a candidate token authenticates, checked against every token without an
    /// early exit: a digest of the token's digest (the token itself never leaves this type).
    pub fn principal(&self, candidate: &str) -> Option<Principal> {
        let d: [u8; 32] = Sha256::digest(candidate.as_bytes()).into();
        let mut matched: Option<&[u8; 32]> = None;
        for t in &self.digests {
            if bool::from(t.ct_eq(&d)) {
                matched = Some(t);
            }
        }
        matched.map(|t| {
            let id = Sha256::digest([b"toolwire principal:".as_slice(), t.as_slice()].concat());
            Principal(Arc::from(format!("token:{}", crate::store::hex(&id[..12]))))
        })
    }
}

/// Who sent a request: `token:<digest>` for an authenticated client, `anonymous` when auth is
/// off. Replay results and `Idempotency-Key`s are scoped to it. Set by [`require_token`].
#[derive(Debug, Clone)]
pub struct Principal(pub Arc<str>);

impl Principal {
    /// The principal of every request when auth is off.
    pub fn anonymous() -> Self {
        // One shared string, not a new allocation per request.
        static ANONYMOUS: std::sync::LazyLock<Arc<str>> =
            std::sync::LazyLock::new(|| Arc::from(crate::turn::ANONYMOUS));
        Principal(Arc::clone(&ANONYMOUS))
    }
}

/// Rejects requests without a valid `Authorization: Bearer <token>` when auth is on, and
/// records the request's [`Principal`].
pub async fn require_token(State(state): State<AppState>, mut req: Request, next: Next) -> Result<Response, ApiError> {
    authenticate(&state, &mut req)?;
    Ok(next.run(req).await)
}

/// Everything in front of the work routes, in this order: [`require_token`], [`read_body`],
/// [`shed_load`]. One middleware instead of three nested ones: each layer clones the inner
/// service (a boxed clone) and boxes its future on every request, and this is the hot path.
pub async fn work(State(state): State<AppState>, mut req: Request, next: Next) -> Result<Response, ApiError> {
    authenticate(&state, &mut req)?;
    let req = buffer_body(&state, req).await?;
    shed(&state, req, next).await
}

/// The check of [`require_token`]: records the [`Principal`] or refuses the request.
fn authenticate(state: &AppState, req: &mut Request) -> Result<(), ApiError> {
    let principal = if state.tokens.enabled() {
        let principal = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
            .and_then(|t| state.tokens.principal(t.trim()));
        match principal {
            Some(p) => p,
            None => return Err(ApiError::Unauthorized),
        }
    } else {
        Principal::anonymous()
    };
    req.extensions_mut().insert(principal);
    Ok(())
}

/// Reads the whole request body, within `limits.body_read_timeout` and `limits.body_bytes`,
/// before the request may take a work slot: a client trickling its body holds a connection
/// (bounded by `limits.max_connections`), never a slot. Too slow → 408, too large → 413.
pub async fn read_body(State(state): State<AppState>, req: Request, next: Next) -> Result<Response, ApiError> {
    let req = buffer_body(&state, req).await?;
    Ok(next.run(req).await)
}

/// The work of [`read_body`]: the request with its whole body in memory.
async fn buffer_body(state: &AppState, req: Request) -> Result<Request, ApiError> {
    use futures_util::StreamExt as _;
    let limit = state.config.limits.body_bytes;
    let timeout = state.config.limits.body_read_timeout.0;
    let declared = super::extract::check_declared_length(req.headers(), limit)?;
    let (parts, body) = req.into_parts();
    let read = async {
        let mut buf = bytes::BytesMut::with_capacity(declared.map_or(0, |n| n as usize));
        let mut chunks = body.into_data_stream();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|e| ApiError::InvalidRequest(format!("cannot read the request body: {e}")))?;
            if buf.len() + chunk.len() > limit {
                return Err(ApiError::PayloadTooLarge { limit });
            }
            buf.extend_from_slice(&chunk);
        }
        Ok(buf.freeze())
    };
    let bytes = match tokio::time::timeout(timeout, read).await {
        Ok(r) => r?,
        Err(_) => {
            crate::telemetry::metrics::rejected("body_timeout");
            return Err(ApiError::BodyTimeout {
                seconds: timeout.as_secs().max(1),
            });
        }
    };
    Ok(Request::from_parts(parts, axum::body::Body::from(bytes)))
}

/// Sheds load: when `limits.concurrent_requests` requests are already being worked on, answer
/// 503 with `Retry-After` at once instead of queueing. A streamed answer keeps its slot until
/// its last event is sent (or its client leaves), not only until its headers are.
pub async fn shed_load(State(state): State<AppState>, req: Request, next: Next) -> Result<Response, ApiError> {
    shed(&state, req, next).await
}

/// The work of [`shed_load`].
async fn shed(state: &AppState, req: Request, next: Next) -> Result<Response, ApiError> {
    let Ok(permit) = Arc::clone(&state.work_slots).try_acquire_owned() else {
        crate::telemetry::metrics::rejected("shed");
        return Err(ApiError::Overloaded);
    };
    let resp = next.run(req).await;
    if !super::stream::is_stream(&resp) {
        drop(permit);
        return Ok(resp);
    }
    let (parts, body) = resp.into_parts();
    let held = super::stream::hold_until_end(body, permit);
    Ok(Response::from_parts(parts, held))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_match_exactly() {
        let t = Tokens::new(&["s3cret-s3cret-s3cret".to_owned(), "another-token-0123".to_owned()]);
        assert!(t.enabled());
        assert!(t.accepts("s3cret-s3cret-s3cret"));
        assert!(!t.accepts("s3cret-s3cret-s3cre"));
        assert!(!t.accepts(""));
        assert!(!Tokens::new(&[]).enabled());
        let a = t.principal("s3cret-s3cret-s3cret").unwrap();
        let b = t.principal("another-token-0123").unwrap();
        assert_ne!(a.0, b.0, "each token is its own principal");
        assert!(!a.0.contains("s3cret"));
    }
}
