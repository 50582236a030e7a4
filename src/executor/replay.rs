//! Replay-safe execution: re-sending the same completion must not repeat side effects.
//!
//! A call's result is stored under (call id, tool, canonical arguments) for a TTL. A repeat
//! gets the stored result (marked `replayed: true`) instead of running again; a repeat that
//! arrives while the first is still running waits for it. Calls without a provider id are not
//! deduplicated (two identical id-less calls may be meant twice), and tools with
//! `replay = false` (allowed for idempotent tools) always run. Argument errors are never
//! stored, so a corrected retry runs.
//!
//! [`ReplayStore`] is the seam for a store shared by several replicas; [`MemoryStore`] is the
//! default: in memory, bounded by entries and bytes, oldest evicted first.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::call::{Outcome, ToolError, ToolFile};

/// What one call produced, and what is stored per call.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    pub outcome: Outcome,
    /// Files returned beside a successful output (a replay returns them too).
    pub files: Vec<ToolFile>,
    pub truncated: bool,
    pub attempts: u32,
}

impl Stored {
    /// A failure that made no backend attempt.
    pub fn err(error: ToolError) -> Self {
        Stored {
            outcome: Outcome::Err(error),
            files: Vec::new(),
            truncated: false,
            attempts: 0,
        }
    }
}

/// The answer to "may this call run?".
#[derive(Debug)]
pub enum Claim {
    /// Run it, then [`ReplayStore::complete`] (or [`ReplayStore::abandon`]).
    Fresh,
    /// Already done: here is the result.
    Stored(Stored),
    /// Running elsewhere: wait for this to become `Some`. `None` after a change means the
    /// first run was abandoned; run it then.
    InFlight(watch::Receiver<Option<Stored>>),
}

/// Where results are kept. Implementations must make `claim` atomic: two concurrent claims
/// of one key give one `Fresh` and one `InFlight`.
pub trait ReplayStore: Send + Sync {
    fn claim(&self, key: &str) -> Claim;
    fn complete(&self, key: &str, result: Stored);
    fn abandon(&self, key: &str);
}

/// The replay key of a call: a digest of its id, tool name and canonical arguments.
pub fn key(call_id: &str, tool: &str, args: &serde_json::Map<String, Value>) -> String {
    let mut h = Sha256::new();
    for part in [call_id.as_bytes(), tool.as_bytes()] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    h.update(canonical(&Value::Object(args.clone())).as_bytes());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// JSON with object keys sorted at every level, so key order does not change the digest.
pub fn canonical(v: &Value) -> String {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let inner: Vec<String> = keys
                .iter()
                .map(|k| format!("{}:{}", Value::String((*k).clone()), canonical(&map[k.as_str()])))
                .collect();
            format!("{{{}}}", inner.join(","))
        }
        Value::Array(items) => format!("[{}]", items.iter().map(canonical).collect::<Vec<_>>().join(",")),
        other => other.to_string(),
    }
}

enum Entry {
    Running(watch::Sender<Option<Stored>>),
    Done { result: Stored, at: Instant, bytes: usize },
}

struct Inner {
    entries: HashMap<String, Entry>,
    /// Completed keys, oldest first, for TTL expiry and eviction.
    order: VecDeque<String>,
    bytes: usize,
}

/// The default, in-memory store.
pub struct MemoryStore {
    ttl: Duration,
    max_entries: usize,
    max_bytes: usize,
    inner: Mutex<Inner>,
}

impl MemoryStore {
    /// A store keeping results for `ttl`, at most `max_entries` results and `max_bytes` bytes.
    pub fn new(ttl: Duration, max_entries: usize, max_bytes: usize) -> Self {
        MemoryStore {
            ttl,
            max_entries,
            max_bytes,
            inner: Mutex::new(Inner {
                entries: HashMap::new(),
                order: VecDeque::new(),
                bytes: 0,
            }),
        }
    }

    /// Stored results and their approximate bytes (for tests and metrics).
    pub fn usage(&self) -> (usize, usize) {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        (inner.order.len(), inner.bytes)
    }

    fn expire(&self, inner: &mut Inner) {
        let now = Instant::now();
        while let Some(front) = inner.order.front() {
            let old = match inner.entries.get(front) {
                Some(Entry::Done { at, .. }) => now.duration_since(*at) >= self.ttl,
                _ => true,
            };
            let over = inner.order.len() > self.max_entries || inner.bytes > self.max_bytes;
            if !(old || over) {
                break;
            }
            if let Some(k) = inner.order.pop_front()
                && let Some(Entry::Done { bytes, .. }) = inner.entries.remove(&k)
            {
                inner.bytes = inner.bytes.saturating_sub(bytes);
            }
        }
    }
}

impl ReplayStore for MemoryStore {
    fn claim(&self, key: &str) -> Claim {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        self.expire(&mut inner);
        match inner.entries.get(key) {
            Some(Entry::Done { result, .. }) => Claim::Stored(result.clone()),
            Some(Entry::Running(tx)) => Claim::InFlight(tx.subscribe()),
            None => {
                let (tx, _rx) = watch::channel(None);
                inner.entries.insert(key.to_owned(), Entry::Running(tx));
                Claim::Fresh
            }
        }
    }

    fn complete(&self, key: &str, result: Stored) {
        let bytes = approx_bytes(&result);
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(Entry::Running(tx)) = inner.entries.remove(key) {
            let _ = tx.send(Some(result.clone()));
        }
        if bytes > self.max_bytes {
            return;
        }
        inner.entries.insert(
            key.to_owned(),
            Entry::Done {
                result,
                at: Instant::now(),
                bytes,
            },
        );
        inner.order.push_back(key.to_owned());
        inner.bytes += bytes;
        self.expire(&mut inner);
    }

    fn abandon(&self, key: &str) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(Entry::Running(tx)) = inner.entries.remove(key) {
            // Waiters see the change with `None` and run the call themselves.
            let _ = tx.send(None);
        }
    }
}

fn approx_bytes(s: &Stored) -> usize {
    let payload = match &s.outcome {
        Outcome::Ok(v) => v.to_string().len(),
        Outcome::Err(e) => e.message.len() + e.details.iter().map(|d| d.path.len() + d.message.len()).sum::<usize>(),
    };
    let files: usize = s
        .files
        .iter()
        .map(|f| f.size() + f.filename.len() + f.mime_type.len())
        .sum();
    payload + files + 128
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ok(v: Value) -> Stored {
        Stored {
            outcome: Outcome::Ok(v),
            files: Vec::new(),
            truncated: false,
            attempts: 1,
        }
    }

    #[test]
    fn canonical_ignores_key_order() {
        assert_eq!(
            canonical(&json!({"b": 1, "a": {"d": 2, "c": 3}})),
            canonical(&json!({"a": {"c": 3, "d": 2}, "b": 1}))
        );
        let a = json!({"x": 1, "y": 2});
        let b = json!({"y": 2, "x": 1});
        assert_eq!(
            key("c1", "t", a.as_object().unwrap()),
            key("c1", "t", b.as_object().unwrap())
        );
        assert_ne!(
            key("c1", "t", a.as_object().unwrap()),
            key("c2", "t", a.as_object().unwrap())
        );
    }

    #[tokio::test]
    async fn second_claim_waits_for_the_first_then_sees_the_stored_result() {
        let s = MemoryStore::new(Duration::from_secs(60), 100, 1 << 20);
        assert!(matches!(s.claim("k"), Claim::Fresh));
        let Claim::InFlight(mut rx) = s.claim("k") else {
            panic!("in flight")
        };
        s.complete("k", ok(json!(1)));
        rx.changed().await.unwrap();
        assert_eq!(*rx.borrow(), Some(ok(json!(1))));
        assert!(matches!(s.claim("k"), Claim::Stored(r) if r == ok(json!(1))));
    }

    #[tokio::test]
    async fn abandoned_runs_release_waiters() {
        let s = MemoryStore::new(Duration::from_secs(60), 100, 1 << 20);
        assert!(matches!(s.claim("k"), Claim::Fresh));
        let Claim::InFlight(mut rx) = s.claim("k") else {
            panic!("in flight")
        };
        s.abandon("k");
        rx.changed().await.unwrap();
        assert_eq!(*rx.borrow(), None);
        assert!(matches!(s.claim("k"), Claim::Fresh));
    }

    #[tokio::test(start_paused = true)]
    async fn entries_expire_and_the_store_stays_within_its_bounds() {
        let s = MemoryStore::new(Duration::from_secs(10), 50, 20_000);
        for i in 0..1000 {
            let k = format!("k{i}");
            assert!(matches!(s.claim(&k), Claim::Fresh));
            s.complete(&k, ok(json!("x".repeat(200))));
            let (n, bytes) = s.usage();
            assert!(n <= 50 && bytes <= 20_000, "{n} entries, {bytes} bytes");
        }
        tokio::time::advance(Duration::from_secs(11)).await;
        assert!(matches!(s.claim("k999"), Claim::Fresh), "expired after the TTL");
    }
}
