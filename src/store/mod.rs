//! The claim store: "has this already been done, is it being done, or may I do it?".
//!
//! Two features rest on it — call-level replay (`executor::replay`: one result per tool call,
//! whatever the number of times a completion is re-sent) and request-level `Idempotency-Key`
//! (`api::idempotency`: one answer per key). Both need the same four operations, so there is one
//! store with one drop guard:
//!
//! - [`ClaimStore::claim`]: atomically either hand the key to the caller ([`Claim::Fresh`]), answer
//!   with the stored value ([`Claim::Done`]), or let the caller wait for the holder
//!   ([`Claim::InFlight`]). A `fingerprint` names *what* is claimed: the same key with another
//!   fingerprint is [`Claim::Mismatch`] (an `Idempotency-Key` re-used with another body).
//! - [`ClaimStore::complete`] stores the holder's value for the TTL and wakes the waiters.
//! - [`ClaimStore::abandon`] releases the key without a value (the work was cancelled): waiters
//!   claim again.
//! - Expiry: values live for a TTL and within an entry and a byte bound, oldest evicted first.
//!
//! [`memory::MemoryStore`] is the default, in-process implementation. The trait is the seam a
//! store shared by several replicas implements.

pub mod memory;

use std::sync::Arc;

use tokio::sync::watch;
use tokio::time::Instant;

pub use memory::MemoryStore;

/// A value a store can keep: cloneable, and able to say roughly how many bytes it holds, so a
/// store can be bounded in bytes and not only in entries.
pub trait Weigh: Clone + Send + Sync + 'static {
    /// Approximate heap bytes of the value.
    fn weight(&self) -> usize;
}

/// The answer to "may I do this?".
#[derive(Debug)]
pub enum Claim<V> {
    /// The caller holds the key: do the work, then complete or abandon it (see [`ClaimGuard`]).
    Fresh,
    /// Already done: here is the stored value.
    Done(V),
    /// Someone else holds the key: wait on this until it is `Some` (done). A change to `None`, or
    /// a closed channel, means the holder gave up; claim again.
    InFlight(watch::Receiver<Option<V>>),
    /// The key is held or done for a different fingerprint.
    Mismatch,
}

/// Where claims and values are kept. `claim` must be atomic: of two concurrent claims of one
/// key, one gets `Fresh` and the other `InFlight`.
pub trait ClaimStore<V: Weigh>: Send + Sync {
    /// Claims `key` for work identified by `fingerprint`.
    fn claim(&self, key: &str, fingerprint: &str) -> Claim<V>;
    /// Stores the value of a fresh claim and wakes its waiters.
    fn complete(&self, key: &str, value: V);
    /// Releases a fresh claim without a value.
    fn abandon(&self, key: &str);
    /// Stored values and their approximate bytes, for metrics and tests.
    fn usage(&self) -> (usize, usize);
}

/// A store shared by the tasks of a server.
pub type SharedStore<V> = Arc<dyn ClaimStore<V>>;

/// A fresh claim: completes the key with a value, or abandons it when dropped before that (the
/// request was cancelled or its client went away), so waiters never wait for nothing.
pub struct ClaimGuard<V: Weigh> {
    store: SharedStore<V>,
    key: String,
    settled: bool,
}

impl<V: Weigh> ClaimGuard<V> {
    /// Guards the fresh claim of `key` in `store`.
    pub fn new(store: SharedStore<V>, key: String) -> Self {
        ClaimGuard {
            store,
            key,
            settled: false,
        }
    }

    /// Stores `value` under the key.
    pub fn complete(mut self, value: V) {
        self.settled = true;
        self.store.complete(&self.key, value);
    }

    /// Releases the key without a value.
    pub fn abandon(mut self) {
        self.settled = true;
        self.store.abandon(&self.key);
    }
}

impl<V: Weigh> Drop for ClaimGuard<V> {
    fn drop(&mut self) {
        if !self.settled {
            self.store.abandon(&self.key);
        }
    }
}

/// How a wait for another holder ended.
#[derive(Debug)]
pub enum Waited<V> {
    /// The holder completed the key with this value.
    Done(V),
    /// The holder gave up: claim again.
    Released,
    /// The deadline passed first.
    TimedOut,
}

/// Waits until the holder of a key settles it, or until `deadline`.
pub async fn wait<V: Clone>(rx: &mut watch::Receiver<Option<V>>, deadline: Instant) -> Waited<V> {
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

/// Lower-case hex of a digest.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}
