//! `Idempotency-Key` on `POST /v1/execute`: the whole request is answered once per key.
//!
//! Same key and same body → the stored response (every result marked `replayed: true`); same
//! key while the first request still runs → wait for it; same key with a different body → 422
//! `idempotency_key_reused` (the IETF idempotency-key draft). Kept in memory with the replay
//! TTL and entry bound. Call-level replay (`executor::replay`) protects the tools even without
//! a key.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::watch;
use tokio::time::Instant;

/// Longest accepted key (Stripe's limit).
pub const MAX_KEY_LEN: usize = 255;

/// What a key maps to.
pub enum KeyClaim {
    Fresh,
    Done(Value),
    InFlight(watch::Receiver<Option<Value>>),
    Mismatch,
}

enum Entry {
    Running {
        body: String,
        tx: watch::Sender<Option<Value>>,
    },
    Done {
        body: String,
        response: Value,
        at: Instant,
    },
}

/// Request keys seen recently.
pub struct RequestKeys {
    ttl: Duration,
    max_entries: usize,
    inner: Mutex<(HashMap<String, Entry>, VecDeque<String>)>,
}

/// The digest of a request body (canonical JSON).
pub fn body_digest(body: &Value) -> String {
    let canonical = crate::executor::replay::canonical(body);
    Sha256::digest(canonical.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl RequestKeys {
    pub fn new(ttl: Duration, max_entries: usize) -> Self {
        RequestKeys {
            ttl,
            max_entries,
            inner: Mutex::new((HashMap::new(), VecDeque::new())),
        }
    }

    /// Claims `key` for a request whose body digest is `body`.
    pub fn claim(&self, key: &str, body: &str) -> KeyClaim {
        let mut guard = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let (map, order) = &mut *guard;
        let now = Instant::now();
        while let Some(front) = order.front() {
            let expired = match map.get(front) {
                Some(Entry::Done { at, .. }) => now.duration_since(*at) >= self.ttl,
                _ => true,
            };
            if !(expired || order.len() > self.max_entries) {
                break;
            }
            if let Some(k) = order.pop_front() {
                map.remove(&k);
            }
        }
        match map.get(key) {
            Some(Entry::Done { body: b, response, .. }) if b == body => KeyClaim::Done(response.clone()),
            Some(Entry::Running { body: b, tx }) if b == body => KeyClaim::InFlight(tx.subscribe()),
            Some(_) => KeyClaim::Mismatch,
            None => {
                let (tx, _rx) = watch::channel(None);
                map.insert(
                    key.to_owned(),
                    Entry::Running {
                        body: body.to_owned(),
                        tx,
                    },
                );
                KeyClaim::Fresh
            }
        }
    }

    /// Stores the response of a fresh claim.
    pub fn complete(&self, key: &str, response: &Value) {
        let mut guard = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let (map, order) = &mut *guard;
        if let Some(Entry::Running { body, tx }) = map.remove(key) {
            let _ = tx.send(Some(response.clone()));
            map.insert(
                key.to_owned(),
                Entry::Done {
                    body,
                    response: response.clone(),
                    at: Instant::now(),
                },
            );
            order.push_back(key.to_owned());
        }
    }

    /// Releases a fresh claim that produced no response.
    pub fn abandon(&self, key: &str) {
        let mut guard = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(Entry::Running { tx, .. }) = guard.0.remove(key) {
            let _ = tx.send(None);
        }
    }
}

/// Marks every result of a stored response as replayed.
pub fn mark_replayed(mut response: Value) -> Value {
    if let Some(results) = response.get_mut("results").and_then(Value::as_array_mut) {
        for r in results {
            if let Some(obj) = r.as_object_mut() {
                obj.insert("replayed".into(), Value::Bool(true));
            }
        }
    }
    response
}
