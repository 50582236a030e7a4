//! The claim store: "has this already been done, is it being done, or may I do it?".
//!
//! Two features rest on it — call-level replay (`executor::replay`: one result per tool call,
//! whatever the number of times a completion is re-sent) and request-level `Idempotency-Key`
//! (`api::idempotency`: one answer per key). Both need the same operations, so there is one
//! trait, [`ClaimStore`], with one drop guard:
//!
//! - [`ClaimStore::claim`]: atomically either hand the key to the caller ([`Claim::Fresh`]), answer
//!   with the stored value ([`Claim::Done`]), or let the caller wait for the holder
//!   ([`Claim::InFlight`], then [`ClaimStore::wait`]). A `fingerprint` names *what* is claimed:
//!   the same key with another fingerprint is [`Claim::Mismatch`] (an `Idempotency-Key` re-used
//!   with another body). A claim is a *lease*: it lapses by itself after the given duration, so
//!   a holder that crashed cannot block the key for longer than its own deadline.
//! - [`ClaimStore::complete`] stores the holder's value for the TTL and wakes the waiters.
//! - [`ClaimStore::abandon`] releases the key without a value (the work was cancelled): waiters
//!   claim again. Both only act while the claim is still the caller's ([`Lease`]).
//!
//! Two implementations: [`MemoryStore`] (the default: in this process, no I/O, every operation
//! completes without suspending) and [`RedisStore`] (shared by every replica; `docs/scale.md`).
//! They are dispatched through the [`Store`] enum rather than `dyn`, so the in-memory path pays
//! no boxed future per call. Every operation can fail ([`StoreError`]) — only the Redis one does
//! — and callers decide per tool what a failure means (`docs/scale.md#failures`).

pub mod memory;
pub mod redis;

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::json;
use tokio::sync::watch;
use tokio::time::Instant;

pub use self::redis::RedisStore;
pub use memory::MemoryStore;

/// A value a store can keep: cloneable, and able to say roughly how many bytes it holds, so a
/// store can be bounded in bytes and not only in entries.
pub trait Weigh: Clone + Send + Sync + 'static {
    /// Approximate heap bytes of the value.
    fn weight(&self) -> usize;
}

/// A value a shared store can keep: written as bytes, read back from bytes. `decode` treats its
/// input as untrusted (another process wrote it) and answers `None` rather than failing loudly.
pub trait Codec: Sized {
    fn encode(&self) -> Vec<u8>;
    fn decode(bytes: &[u8]) -> Option<Self>;
}

/// What every store can keep.
pub trait Storable: Weigh + Codec {}
impl<T: Weigh + Codec> Storable for T {}

/// The shared store could not answer in time (down, restarting, slow, refusing). The message is
/// safe to log: it never holds the URL or its password.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("the shared store is unavailable: {0}")]
    Unavailable(String),
}

/// Proof that a fresh claim is the caller's: what the holder wrote to the key, so that a late
/// `complete`/`abandon` never settles a claim someone else holds since the lease lapsed. Empty
/// (no allocation) for the in-memory store, where claims cannot lapse.
#[derive(Debug, Default)]
pub struct Lease(Option<Vec<u8>>);

/// The answer to "may I do this?".
#[derive(Debug)]
pub enum Claim<V> {
    /// The caller holds the key: do the work, then complete or abandon it (see [`ClaimGuard`]).
    Fresh(Lease),
    /// Already done: here is the stored value.
    Done(V),
    /// Someone else holds the key: [`ClaimStore::wait`] for it.
    InFlight(Pending<V>),
    /// The key is held or done for a different fingerprint.
    Mismatch,
}

/// How to wait for another holder.
#[derive(Debug)]
pub enum Pending<V> {
    /// In this process: woken when the holder settles (`Some`: done; `None` or closed: released).
    Local(watch::Receiver<Option<V>>),
    /// In another process: the key is polled until it is done, released or the deadline passes.
    Remote,
}

/// How a wait for another holder ended.
#[derive(Debug)]
pub enum Waited<V> {
    /// The holder completed the key with this value.
    Done(V),
    /// The holder gave up (or its lease lapsed): claim again.
    Released,
    /// The deadline passed first.
    TimedOut,
}

/// Where claims and values are kept. `claim` must be atomic: of two concurrent claims of one
/// key (in any process sharing the store), one gets `Fresh` and the others `InFlight`.
pub trait ClaimStore<V: Weigh>: Send + Sync {
    /// Claims `key` for work identified by `fingerprint`, for at most `lease`.
    fn claim(
        &self,
        key: &str,
        fingerprint: &str,
        lease: Duration,
    ) -> impl Future<Output = Result<Claim<V>, StoreError>> + Send;
    /// Waits until the holder of `key` settles it, or until `deadline`.
    fn wait(
        &self,
        key: &str,
        fingerprint: &str,
        pending: Pending<V>,
        deadline: Instant,
    ) -> impl Future<Output = Result<Waited<V>, StoreError>> + Send;
    /// Stores the value of a fresh claim and wakes its waiters.
    fn complete(&self, key: &str, lease: &Lease, value: V) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Releases a fresh claim without a value.
    fn abandon(&self, key: &str, lease: &Lease) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Releases a fresh claim from a destructor (nothing can be awaited there).
    fn abandon_detached(&self, key: String, lease: Lease);
    /// Stored values and their approximate bytes, for metrics and tests (`(0, 0)` where the
    /// store is elsewhere).
    fn usage(&self) -> (usize, usize);
}

/// One of the two stores.
pub enum Store<V: Storable> {
    Memory(MemoryStore<V>),
    Redis(RedisStore<V>),
}

/// A store shared by the tasks of a server.
pub type SharedStore<V> = Arc<Store<V>>;

impl<V: Storable> Store<V> {
    /// See [`ClaimStore::claim`].
    pub async fn claim(&self, key: &str, fingerprint: &str, lease: Duration) -> Result<Claim<V>, StoreError> {
        match self {
            Store::Memory(s) => s.claim(key, fingerprint, lease).await,
            Store::Redis(s) => s.claim(key, fingerprint, lease).await,
        }
    }

    /// See [`ClaimStore::wait`].
    pub async fn wait(
        &self,
        key: &str,
        fingerprint: &str,
        pending: Pending<V>,
        deadline: Instant,
    ) -> Result<Waited<V>, StoreError> {
        match self {
            Store::Memory(s) => s.wait(key, fingerprint, pending, deadline).await,
            Store::Redis(s) => s.wait(key, fingerprint, pending, deadline).await,
        }
    }

    async fn complete(&self, key: &str, lease: &Lease, value: V) -> Result<(), StoreError> {
        match self {
            Store::Memory(s) => s.complete(key, lease, value).await,
            Store::Redis(s) => s.complete(key, lease, value).await,
        }
    }

    async fn abandon(&self, key: &str, lease: &Lease) -> Result<(), StoreError> {
        match self {
            Store::Memory(s) => s.abandon(key, lease).await,
            Store::Redis(s) => s.abandon(key, lease).await,
        }
    }

    fn abandon_detached(&self, key: String, lease: Lease) {
        match self {
            Store::Memory(s) => s.abandon_detached(key, lease),
            Store::Redis(s) => s.abandon_detached(key, lease),
        }
    }

    /// See [`ClaimStore::usage`].
    pub fn usage(&self) -> (usize, usize) {
        match self {
            Store::Memory(s) => s.usage(),
            Store::Redis(s) => s.usage(),
        }
    }
}

/// A fresh claim: completes the key with a value, or abandons it when dropped before that (the
/// request was cancelled or its client went away), so waiters never wait for nothing.
pub struct ClaimGuard<V: Storable> {
    store: SharedStore<V>,
    key: String,
    /// `None` once settled.
    lease: Option<Lease>,
}

impl<V: Storable> ClaimGuard<V> {
    /// Guards the fresh claim of `key` in `store`.
    pub fn new(store: SharedStore<V>, key: String, lease: Lease) -> Self {
        ClaimGuard {
            store,
            key,
            lease: Some(lease),
        }
    }

    /// Stores `value` under the key.
    pub async fn complete(mut self, value: V) -> Result<(), StoreError> {
        match self.lease.take() {
            Some(lease) => self.store.complete(&self.key, &lease, value).await,
            None => Ok(()),
        }
    }

    /// Releases the key without a value.
    pub async fn abandon(mut self) -> Result<(), StoreError> {
        match self.lease.take() {
            Some(lease) => self.store.abandon(&self.key, &lease).await,
            None => Ok(()),
        }
    }
}

impl<V: Storable> Drop for ClaimGuard<V> {
    fn drop(&mut self) {
        if let Some(lease) = self.lease.take() {
            self.store.abandon_detached(std::mem::take(&mut self.key), lease);
        }
    }
}

/// Waits until an in-process holder settles a key, or until `deadline`.
pub(crate) async fn wait_local<V: Clone>(rx: &mut watch::Receiver<Option<V>>, deadline: Instant) -> Waited<V> {
    let settled = async {
        if let Some(v) = rx.borrow().clone() {
            return Some(v);
        }
        match rx.changed().await {
            Ok(()) => rx.borrow().clone(),
            Err(_) => None,
        }
    };
    match tokio::time::timeout_at(deadline, settled).await {
        Ok(Some(v)) => Waited::Done(v),
        Ok(None) => Waited::Released,
        Err(_) => Waited::TimedOut,
    }
}

/// The namespace of one use of the store: part of every shared key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Namespace {
    /// Call-level replay results (`<prefix>r:<digest>`).
    Replay,
    /// `Idempotency-Key` answers (`<prefix>k:<digest>`).
    Requests,
}

impl Namespace {
    fn tag(self) -> &'static str {
        match self {
            Namespace::Replay => "r",
            Namespace::Requests => "k",
        }
    }

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Namespace::Replay => "replay",
            Namespace::Requests => "idempotency_key",
        }
    }
}

/// `last_error` of a shared store before its first answer (not a failure: cleared by it).
const NOT_YET: &str = "not connected yet";

/// What `/readyz` shows of the store, and the once-per-interval warning of bypassed calls.
pub struct Health {
    kind: &'static str,
    connected: AtomicBool,
    /// The outage has been logged (once per outage, including one at start).
    logged_down: AtomicBool,
    last_error: Mutex<Option<String>>,
    warn_interval: Duration,
    last_warned: Mutex<Option<Instant>>,
}

impl Health {
    fn new(kind: &'static str, warn_interval: Duration) -> Self {
        Health {
            kind,
            connected: AtomicBool::new(kind == "memory"),
            logged_down: AtomicBool::new(false),
            // Until the first command or probe answers, a shared store is not known to work.
            last_error: Mutex::new((kind != "memory").then(|| NOT_YET.to_owned())),
            warn_interval,
            last_warned: Mutex::new(None),
        }
    }

    pub(crate) fn ok(&self) {
        if !self.connected.swap(true, Ordering::Relaxed) && self.kind != "memory" {
            self.logged_down.store(false, Ordering::Relaxed);
            let mut last = self.last_error.lock().unwrap_or_else(PoisonError::into_inner);
            if last.as_deref() == Some(NOT_YET) {
                *last = None;
            }
            drop(last);
            tracing::info!(store = self.kind, "The shared store is reachable.");
        }
    }

    pub(crate) fn failed(&self, error: &str) {
        self.connected.store(false, Ordering::Relaxed);
        if !self.logged_down.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                store = self.kind,
                error,
                "The shared store is unreachable; reconnecting in the background."
            );
        }
        *self.last_error.lock().unwrap_or_else(PoisonError::into_inner) = Some(error.to_owned());
    }

    /// Is the store answering (as of its last command or probe)?
    pub fn connected(&self) -> bool {
        self.connected.load(Ordering::Relaxed)
    }

    /// The `/readyz` view: kind, connected, and the last error (already free of secrets).
    pub fn view(&self) -> serde_json::Value {
        let last_error = self.last_error.lock().unwrap_or_else(PoisonError::into_inner).clone();
        json!({"kind": self.kind, "connected": self.connected(), "last_error": last_error})
    }

    /// Counts a call (or request) that ran without deduplication because the store failed, and
    /// warns at most once per `warn_interval`.
    pub fn bypassed(&self, namespace: Namespace, tool: &str, error: &StoreError) {
        crate::telemetry::metrics::store_bypassed(namespace.label());
        let now = Instant::now();
        let mut last = self.last_warned.lock().unwrap_or_else(PoisonError::into_inner);
        if last.is_none_or(|at| now.duration_since(at) >= self.warn_interval) {
            *last = Some(now);
            drop(last);
            tracing::warn!(
                tool,
                %error,
                "The shared store is unavailable: idempotent tools run without deduplication (counted in toolwire_store_bypassed_total; warned once per store.warn_interval)."
            );
        }
    }
}

enum Backing {
    Memory {
        ttl: Duration,
        max_entries: usize,
        max_bytes: usize,
    },
    Redis(Arc<self::redis::Shared>),
}

/// Opens the stores a server uses, all on one backing (one Redis connection for both
/// namespaces), and reports its health.
pub struct Stores {
    backing: Backing,
    health: Arc<Health>,
}

impl Stores {
    /// The stores `[store]` and `[replay]` describe. A Redis URL is checked here, but no
    /// connection is made: the server starts while Redis is down and connects when it can.
    /// Needs a Tokio runtime when the URL is set.
    pub fn from_config(
        replay: &crate::config::server::ReplayConfig,
        store: &crate::config::server::StoreConfig,
    ) -> Result<Self, StoreError> {
        if store.url.is_empty() {
            return Ok(Stores {
                backing: Backing::Memory {
                    ttl: replay.ttl.0,
                    max_entries: replay.max_entries,
                    max_bytes: replay.max_bytes,
                },
                health: Arc::new(Health::new("memory", store.warn_interval.0)),
            });
        }
        let health = Arc::new(Health::new("redis", store.warn_interval.0));
        let shared = self::redis::Shared::connect(store, replay.ttl.0, Arc::clone(&health))?;
        Ok(Stores {
            backing: Backing::Redis(shared),
            health,
        })
    }

    /// The store of one namespace.
    pub fn open<V: Storable>(&self, namespace: Namespace) -> SharedStore<V> {
        Arc::new(match &self.backing {
            Backing::Memory {
                ttl,
                max_entries,
                max_bytes,
            } => Store::Memory(MemoryStore::new(*ttl, *max_entries, *max_bytes)),
            Backing::Redis(shared) => Store::Redis(RedisStore::new(Arc::clone(shared), namespace)),
        })
    }

    /// The store's health (`/readyz`, bypass warnings).
    pub fn health(&self) -> &Arc<Health> {
        &self.health
    }
}

/// Lower-case hex of a digest.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}
