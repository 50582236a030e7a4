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
    /// Tokens from config (already `${env:}`-resolved). Empty means auth is off.
    pub fn new(tokens: &[String]) -> Self {
        Tokens {
            digests: tokens
                .iter()
                .filter(|t| !t.is_empty())
                .map(|t| Sha256::digest(t.as_bytes()).into())
                .collect(),
        }
    }

    /// True when auth is on.
    pub fn enabled(&self) -> bool {
        !self.digests.is_empty()
    }

    /// Checks a candidate against every token without an early exit.
    pub fn accepts(&self, candidate: &str) -> bool {
        let d: [u8; 32] = Sha256::digest(candidate.as_bytes()).into();
        self.digests
            .iter()
            .fold(subtle::Choice::from(0), |acc, t| acc | t.ct_eq(&d))
            .into()
    }
}

/// Rejects requests without a valid `Authorization: Bearer <token>` when auth is on.
pub async fn require_token(State(state): State<AppState>, req: Request, next: Next) -> Result<Response, ApiError> {
    if state.tokens.enabled() {
        let ok = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
            .is_some_and(|t| state.tokens.accepts(t.trim()));
        if !ok {
            return Err(ApiError::Unauthorized);
        }
    }
    Ok(next.run(req).await)
}

/// Sheds load: when `limits.concurrent_requests` requests are already being worked on, answer
/// 503 with `Retry-After` at once instead of queueing.
pub async fn shed_load(State(state): State<AppState>, req: Request, next: Next) -> Result<Response, ApiError> {
    let Ok(permit) = Arc::clone(&state.work_slots).try_acquire_owned() else {
        crate::telemetry::metrics::rejected("shed");
        return Err(ApiError::Overloaded);
    };
    let resp = next.run(req).await;
    drop(permit);
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_match_exactly() {
        let t = Tokens::new(&["s3cret".to_owned(), String::new()]);
        assert!(t.enabled());
        assert!(t.accepts("s3cret"));
        assert!(!t.accepts("s3cre"));
        assert!(!t.accepts(""));
        assert!(!Tokens::new(&[]).enabled());
    }
}
