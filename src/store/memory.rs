//! The default claim store: in memory, bounded by entries and by bytes, values expired after a
//! TTL, oldest evicted first. One mutex; every operation is O(1) amortised (expiry pops from
//! the front of an insertion-ordered queue). Its async operations never suspend and never fail
//! (no I/O), so the per-call cost is the same as a plain function call's. Claims do not lapse
//! here: the holder is in this process and its [`super::ClaimGuard`] releases the key when it
//! goes away.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::{Claim, ClaimStore, Lease, Pending, StoreError, Waited, Weigh};

enum Entry<V> {
    Running {
        fingerprint: String,
        tx: watch::Sender<Option<V>>,
    },
    Done {
        fingerprint: String,
        value: V,
        at: Instant,
        bytes: usize,
    },
}

struct Inner<V> {
    entries: HashMap<String, Entry<V>>,
    /// Completed keys, oldest first, for TTL expiry and eviction.
    order: VecDeque<String>,
    bytes: usize,
}

/// An in-memory [`ClaimStore`].
pub struct MemoryStore<V> {
    ttl: Duration,
    max_entries: usize,
    max_bytes: usize,
    inner: Mutex<Inner<V>>,
}

/// Fixed cost counted per stored entry on top of the value's weight (key, bookkeeping).
const ENTRY_OVERHEAD: usize = 128;

impl<V: Weigh> MemoryStore<V> {
    /// Keeps values for `ttl`, at most `max_entries` of them and `max_bytes` bytes in all. A
    /// single value larger than `max_bytes` is handed to its waiters but not kept.
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

    fn expire(&self, inner: &mut Inner<V>) {
        let now = Instant::now();
        while let Some(front) = inner.order.front() {
            let old = match inner.entries.get(front) {
                Some(Entry::Done { at, .. }) => now.duration_since(*at) >= self.ttl,
                // Re-claimed or removed since it was queued: its queue slot is stale.
                _ => true,
            };
            let over = inner.order.len() > self.max_entries || inner.bytes > self.max_bytes;
            if !(old || over) {
                break;
            }
            if let Some(k) = inner.order.pop_front()
                && let Some(Entry::Done { bytes, .. }) = inner.entries.get(&k)
            {
                inner.bytes = inner.bytes.saturating_sub(*bytes);
                inner.entries.remove(&k);
            }
        }
    }
}

impl<V: Weigh> MemoryStore<V> {
    fn claim_now(&self, key: &str, fingerprint: &str) -> Claim<V> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        self.expire(&mut inner);
        match inner.entries.get(key) {
            Some(Entry::Done { fingerprint: f, .. } | Entry::Running { fingerprint: f, .. }) if f != fingerprint => {
                Claim::Mismatch
            }
            Some(Entry::Done { value, .. }) => Claim::Done(value.clone()),
            Some(Entry::Running { tx, .. }) => Claim::InFlight(Pending::Local(tx.subscribe())),
            None => {
                let (tx, _rx) = watch::channel(None);
                inner.entries.insert(
                    key.to_owned(),
                    Entry::Running {
                        fingerprint: fingerprint.to_owned(),
                        tx,
                    },
                );
                Claim::Fresh(Lease::default())
            }
        }
    }

    fn complete_now(&self, key: &str, value: V) {
        let bytes = value.weight() + key.len() + ENTRY_OVERHEAD;
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(Entry::Running { fingerprint, tx }) = inner.entries.remove(key) else {
            return;
        };
        let _ = tx.send(Some(value.clone()));
        if bytes > self.max_bytes {
            return;
        }
        inner.entries.insert(
            key.to_owned(),
            Entry::Done {
                fingerprint,
                value,
                at: Instant::now(),
                bytes,
            },
        );
        inner.order.push_back(key.to_owned());
        inner.bytes += bytes;
        self.expire(&mut inner);
    }

    fn abandon_now(&self, key: &str) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(Entry::Running { .. }) = inner.entries.get(key)
            && let Some(Entry::Running { tx, .. }) = inner.entries.remove(key)
        {
            // Waiters see `None` and claim again.
            let _ = tx.send(None);
        }
    }
}

impl<V: Weigh> ClaimStore<V> for MemoryStore<V> {
    async fn claim(&self, key: &str, fingerprint: &str, _lease: Duration) -> Result<Claim<V>, StoreError> {
        Ok(self.claim_now(key, fingerprint))
    }

    async fn wait(
        &self,
        _key: &str,
        _fingerprint: &str,
        pending: Pending<V>,
        deadline: Instant,
    ) -> Result<Waited<V>, StoreError> {
        Ok(match pending {
            Pending::Local(mut rx) => super::wait_local(&mut rx, deadline).await,
            // Never handed out by this store: claim again.
            Pending::Remote => Waited::Released,
        })
    }

    async fn complete(&self, key: &str, _lease: &Lease, value: V) -> Result<(), StoreError> {
        self.complete_now(key, value);
        Ok(())
    }

    async fn abandon(&self, key: &str, _lease: &Lease) -> Result<(), StoreError> {
        self.abandon_now(key);
        Ok(())
    }

    fn abandon_detached(&self, key: String, _lease: Lease) {
        self.abandon_now(&key);
    }

    fn usage(&self) -> (usize, usize) {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        (inner.order.len(), inner.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq)]
    struct V(String);
    impl Weigh for V {
        fn weight(&self) -> usize {
            self.0.len()
        }
    }

    #[tokio::test]
    async fn second_claim_waits_for_the_first_then_sees_the_stored_value() {
        let s = MemoryStore::new(Duration::from_secs(60), 100, 1 << 20);
        assert!(matches!(s.claim_now("k", ""), Claim::Fresh(_)));
        let Claim::InFlight(Pending::Local(mut rx)) = s.claim_now("k", "") else {
            panic!("in flight")
        };
        s.complete_now("k", V("1".into()));
        rx.changed().await.unwrap();
        assert_eq!(*rx.borrow(), Some(V("1".into())));
        assert!(matches!(s.claim_now("k", ""), Claim::Done(v) if v == V("1".into())));
    }

    #[tokio::test]
    async fn abandoned_claims_release_waiters() {
        let s: MemoryStore<V> = MemoryStore::new(Duration::from_secs(60), 100, 1 << 20);
        assert!(matches!(s.claim_now("k", ""), Claim::Fresh(_)));
        let Claim::InFlight(Pending::Local(mut rx)) = s.claim_now("k", "") else {
            panic!("in flight")
        };
        s.abandon_now("k");
        rx.changed().await.unwrap();
        assert_eq!(*rx.borrow(), None);
        assert!(matches!(s.claim_now("k", ""), Claim::Fresh(_)));
    }

    #[test]
    fn another_fingerprint_is_a_mismatch_running_or_done() {
        let s = MemoryStore::new(Duration::from_secs(60), 100, 1 << 20);
        assert!(matches!(s.claim_now("k", "a"), Claim::Fresh(_)));
        assert!(matches!(s.claim_now("k", "b"), Claim::Mismatch));
        s.complete_now("k", V("x".into()));
        assert!(matches!(s.claim_now("k", "b"), Claim::Mismatch));
        assert!(matches!(s.claim_now("k", "a"), Claim::Done(_)));
    }

    #[tokio::test(start_paused = true)]
    async fn values_expire_and_the_store_stays_within_its_bounds() {
        let s = MemoryStore::new(Duration::from_secs(10), 50, 20_000);
        for i in 0..1000 {
            let k = format!("k{i}");
            assert!(matches!(s.claim_now(&k, ""), Claim::Fresh(_)));
            s.complete_now(&k, V("x".repeat(200)));
            let (n, bytes) = s.usage();
            assert!(n <= 50 && bytes <= 20_000, "{n} entries, {bytes} bytes");
        }
        tokio::time::advance(Duration::from_secs(11)).await;
        assert!(
            matches!(s.claim_now("k999", ""), Claim::Fresh(_)),
            "expired after the TTL"
        );
    }

    #[test]
    fn a_value_over_the_byte_bound_is_not_kept() {
        let s = MemoryStore::new(Duration::from_secs(60), 100, 1_000);
        assert!(matches!(s.claim_now("big", ""), Claim::Fresh(_)));
        s.complete_now("big", V("x".repeat(2_000)));
        assert_eq!(s.usage(), (0, 0));
        assert!(matches!(s.claim_now("big", ""), Claim::Fresh(_)));
    }
}
