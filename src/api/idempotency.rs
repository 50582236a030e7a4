//! `Idempotency-Key` on `POST /v1/execute`: the whole request is answered once per key.
//!
//! Same key and same body → the stored answer (every result marked `replayed: true`); same key
//! while the first request still runs → wait for it; same key with a different body → 422
//! `idempotency_key_reused` (the IETF idempotency-key draft). Keys are namespaced per
//! principal (the matched auth token), so one client can neither squat on nor probe another's
//! key. Answers live in the claim store with the replay TTL and its entry and byte bounds (or in
//! Redis, shared by every replica). Call-level replay (`executor::replay`) protects the tools
//! even without a key.
//!
//! When the shared store cannot answer, the request is refused with 503 `store_unavailable`
//! (retryable) whatever its tools: a client that sends a key asks for at-most-once, and that
//! promise cannot be kept without the store.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use super::ApiError;
use crate::store::{Claim, ClaimGuard, Codec, SharedStore, Waited, Weigh};
use crate::turn::{ExecuteRequest, ExecuteResponse};

/// Longest accepted key (Stripe's limit).
pub const MAX_KEY_LEN: usize = 255;

/// A stored answer: the JSON body of the first response, with every result already marked
/// `replayed: true`, ready to send again as is.
#[derive(Debug, Clone)]
pub struct StoredAnswer(pub Bytes);

impl Weigh for StoredAnswer {
    fn weight(&self) -> usize {
        self.0.len()
    }
}

impl Codec for StoredAnswer {
    fn encode(&self) -> Vec<u8> {
        self.0.to_vec()
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        // Sent to the client as JSON as is: only ever a JSON document.
        serde_json::from_slice::<serde::de::IgnoredAny>(bytes).ok()?;
        Some(StoredAnswer(Bytes::copy_from_slice(bytes)))
    }
}

/// The store of request keys.
pub type RequestKeys = SharedStore<StoredAnswer>;

/// The outcome of an `Idempotency-Key` request: a JSON body.
pub enum Answer {
    /// This request ran: its body.
    Ran(Value),
    /// An earlier request with this key ran: its stored body (results marked replayed).
    Replayed(Bytes),
}

/// Checks a header value: 1 to [`MAX_KEY_LEN`] visible ASCII characters.
pub fn check_key(key: &str) -> Result<(), ApiError> {
    if key.is_empty() || key.len() > MAX_KEY_LEN || !key.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
        return Err(ApiError::InvalidRequest(format!(
            "Idempotency-Key must be 1 to {MAX_KEY_LEN} visible ASCII characters"
        )));
    }
    Ok(())
}

/// The digest of what a request asks for: its serialised fields (object keys sorted), never a
/// `Debug` rendering.
pub fn body_digest(req: &ExecuteRequest) -> Result<String, ApiError> {
    let value = serde_json::to_value(req).map_err(|e| ApiError::Internal(e.to_string()))?;
    let canonical = crate::executor::replay::canonical(&value);
    Ok(crate::store::hex(&Sha256::digest(canonical.as_bytes())))
}

/// Runs `work` at most once per (principal, key) within the TTL. `wait_limit` bounds the wait
/// for a duplicate that is still running; past it (or if that one is abandoned) this request
/// claims the key itself.
pub async fn once<F, Fut>(
    store: &RequestKeys,
    principal: &str,
    key: &str,
    req: &ExecuteRequest,
    wait_limit: std::time::Duration,
    work: F,
) -> Result<Answer, ApiError>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ExecuteResponse>,
{
    check_key(key)?;
    let digest = body_digest(req)?;
    // A digest: fixed length whatever the key, and no client bytes in a shared store's key.
    let mut h = Sha256::new();
    h.update(principal.as_bytes());
    h.update([0]);
    h.update(key.as_bytes());
    let scoped = crate::store::hex(&h.finalize());
    let deadline = Instant::now() + wait_limit;
    let unavailable = |e: crate::store::StoreError| {
        crate::telemetry::metrics::rejected("store_unavailable");
        ApiError::StoreUnavailable(e.to_string())
    };
    let lease = loop {
        match store.claim(&scoped, &digest, wait_limit).await.map_err(unavailable)? {
            Claim::Mismatch => return Err(ApiError::IdempotencyKeyReused),
            Claim::Done(stored) => return Ok(Answer::Replayed(stored.0)),
            Claim::InFlight(pending) => match store
                .wait(&scoped, &digest, pending, deadline)
                .await
                .map_err(unavailable)?
            {
                Waited::Done(stored) => return Ok(Answer::Replayed(stored.0)),
                Waited::Released => {}
                Waited::TimedOut => return Err(ApiError::Overloaded),
            },
            Claim::Fresh(lease) => break lease,
        }
    };
    // Abandoned if this request is dropped (client gone) before it stores an answer.
    let guard = ClaimGuard::new(Arc::clone(store), scoped, lease);
    let resp = work().await;
    let value = serde_json::to_value(&resp).map_err(|e| ApiError::Internal(e.to_string()))?;
    let replayed = mark_replayed(value.clone());
    let bytes = serde_json::to_vec(&replayed).map_err(|e| ApiError::Internal(e.to_string()))?;
    if let Err(e) = guard.complete(StoredAnswer(Bytes::from(bytes))).await {
        // The request ran and is answered; a repeat of the key will not find it (and, while
        // the store is down, is refused anyway).
        tracing::warn!(error = %e, "Could not store the Idempotency-Key answer.");
    }
    Ok(Answer::Ran(value))
}

/// Marks every result of a stored response as replayed.
fn mark_replayed(mut response: Value) -> Value {
    if let Some(results) = response.get_mut("results").and_then(Value::as_array_mut) {
        for r in results {
            if let Some(obj) = r.as_object_mut() {
                obj.insert("replayed".into(), Value::Bool(true));
            }
        }
    }
    response
}
