//! The shared claim store: Redis, through redis-rs's auto-reconnecting `ConnectionManager`.
//!
//! One key per claim, `<prefix><ns>:<key>` (`ns` = `r` replay, `k` Idempotency-Key; the key is
//! a SHA-256 digest that already covers the tenant scope). Its value says what state it is in:
//!
//! - `R<token>:<fingerprint>` — claimed; the `PX` is the holder's lease (its call deadline plus a
//!   margin), so a replica that crashed mid-call frees the key by itself.
//! - `D<fingerprint>\n<payload>` — done; the `PX` is `replay.ttl`.
//!
//! Every state change is one atomic Lua script (claim-or-read; complete-if-still-ours;
//! delete-if-still-ours), so two replicas can never both hold a key and a holder whose lease
//! lapsed never overwrites its successor. A duplicate on another replica polls the key with
//! backoff (5 ms doubling to 100 ms) until it is done, released or its deadline passes: no
//! pub/sub connection to keep alive, and a missed notification cannot strand a waiter.
//!
//! Every command is bounded by `store.command_timeout`; a failure is a [`StoreError`] that the
//! caller turns into a per-tool decision. The connection comes back by itself (the manager
//! reconnects on the next command, which is sent once more on the new connection — see
//! `Shared::run`; a background probe every second keeps `/readyz` current and reconnects
//! while idle).

use std::marker::PhantomData;
use std::sync::{Arc, Weak};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::time::Instant;

use super::{Claim, ClaimStore, Codec, Health, Lease, Namespace, Pending, StoreError, Waited, Weigh};

/// How often the background probe pings Redis.
const PROBE_EVERY: Duration = Duration::from_secs(1);
/// Added to a claim's lease beyond the caller's deadline: the holder completes after its own
/// deadline has passed (result bookkeeping), and must still hold the key then.
const LEASE_MARGIN: Duration = Duration::from_secs(5);
/// First and longest pause between two polls of a key held by another replica.
const POLL_FIRST: Duration = Duration::from_millis(5);
const POLL_MAX: Duration = Duration::from_millis(100);

/// Claim the key, or read what is there: one atomic step.
const CLAIM: &str = r"
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then return false end
if v then return v end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return false
";

/// Store the value if the claim is still ours (or lapsed with nobody else holding the key).
const COMPLETE: &str = r"
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] or not v then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
";

/// Release the key if the claim is still ours.
const ABANDON: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

/// The connection and settings both namespaces share.
pub struct Shared {
    manager: ConnectionManager,
    prefix: String,
    ttl: Duration,
    command_timeout: Duration,
    max_value_bytes: usize,
    /// The URL's password, scrubbed from every error text we keep or log.
    password: Option<String>,
    health: Arc<Health>,
    claim: redis::Script,
    complete: redis::Script,
    abandon: redis::Script,
}

impl Shared {
    /// Checks the URL and builds a lazy connection manager (nothing is sent until the first
    /// command or probe, so Redis may be down at start). Spawns the probe.
    pub(crate) fn connect(
        cfg: &crate::config::server::StoreConfig,
        ttl: Duration,
        health: Arc<Health>,
    ) -> Result<Arc<Self>, StoreError> {
        let password = password_of(&cfg.url);
        let scrub = |text: String| scrub(text, password.as_deref());
        let unusable = |e: redis::RedisError| {
            StoreError::Unavailable(format!(
                "store.url {} is not usable: {}",
                crate::config::server::redacted_url(&cfg.url),
                scrub(e.to_string())
            ))
        };
        let client = if cfg.ca_file.as_os_str().is_empty() {
            redis::Client::open(cfg.url.as_str()).map_err(unusable)?
        } else {
            let pem = read_ca(&cfg.ca_file)?;
            let certs = redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(pem),
            };
            redis::Client::build_with_tls(cfg.url.as_str(), certs).map_err(unusable)?
        };
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(StoreError::Unavailable(
                "the Redis store needs a Tokio runtime".to_owned(),
            ));
        }
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(cfg.connect_timeout.0))
            .set_response_timeout(Some(cfg.command_timeout.0))
            // Few quick retries inside one reconnect: our own command timeout bounds the wait
            // anyway, and the next command (or probe) starts a new reconnect.
            .set_number_of_retries(2)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_secs(1));
        let manager = ConnectionManager::new_lazy_with_config(client, config)
            .map_err(|e| StoreError::Unavailable(scrub(e.to_string())))?;
        let shared = Arc::new(Shared {
            manager,
            prefix: cfg.prefix.clone(),
            ttl,
            command_timeout: cfg.command_timeout.0,
            max_value_bytes: cfg.max_value_bytes,
            password,
            health,
            claim: redis::Script::new(CLAIM),
            complete: redis::Script::new(COMPLETE),
            abandon: redis::Script::new(ABANDON),
        });
        tracing::info!(url = %crate::config::server::redacted_url(&cfg.url), prefix = %cfg.prefix, "Replay and Idempotency-Key store: Redis.");
        tokio::spawn(probe(Arc::downgrade(&shared)));
        Ok(shared)
    }

    /// Runs one command within the command timeout, recording the outcome in the health.
    ///
    /// A command that fails because its established connection was found dropped (Redis
    /// restarted, a proxy closed an idle connection) is sent once more, on the connection the manager
    /// re-establishes: otherwise the first command after every Redis restart would fail and
    /// its call run undeduplicated, even though Redis is back. Sending twice is safe for every
    /// command here: reads and `PING`, the release and completion scripts (no-ops once done), and
    /// the claim script, which answers "claimed" when the key already holds this very claim
    /// (its token is random per claim), so a claim that ran before its answer was lost is
    /// still ours.
    ///
    /// `command` is given its own handle on the connection each time it is sent.
    async fn run<T, F>(&self, what: &str, mut command: impl FnMut(ConnectionManager) -> F) -> Result<T, StoreError>
    where
        F: Future<Output = redis::RedisResult<T>>,
    {
        let once_more = async {
            match command(self.manager.clone()).await {
                // Not when Redis refused the connection: it is down, and waiting for the
                // manager's reconnect attempts would only make a fast failure slow.
                Err(e) if e.is_connection_dropped() && !e.is_connection_refusal() => {
                    command(self.manager.clone()).await
                }
                other => other,
            }
        };
        let text = match tokio::time::timeout(self.command_timeout, once_more).await {
            Ok(Ok(v)) => {
                self.health.ok();
                return Ok(v);
            }
            Ok(Err(e)) => scrub(format!("{what}: {e}"), self.password.as_deref()),
            Err(_) => format!("{what}: no answer within {:?}", self.command_timeout),
        };
        crate::telemetry::metrics::store_error();
        self.health.failed(&text);
        Err(StoreError::Unavailable(text))
    }

    fn key(&self, namespace: Namespace, key: &str) -> String {
        let mut k = String::with_capacity(self.prefix.len() + 2 + key.len());
        k.push_str(&self.prefix);
        k.push_str(namespace.tag());
        k.push(':');
        k.push_str(key);
        k
    }
}

/// Pings Redis every [`PROBE_EVERY`] while the store exists: keeps `/readyz` current when no
/// traffic flows, and lets the manager reconnect while idle.
async fn probe(shared: Weak<Shared>) {
    let mut tick = tokio::time::interval(PROBE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(s) = shared.upgrade() else { return };
        let _ = s
            .run("PING", |mut con| async move {
                redis::cmd("PING").query_async::<()>(&mut con).await
            })
            .await;
    }
}

/// One namespace of the shared store.
pub struct RedisStore<V> {
    shared: Arc<Shared>,
    namespace: Namespace,
    _values: PhantomData<fn() -> V>,
}

impl<V> RedisStore<V> {
    pub(crate) fn new(shared: Arc<Shared>, namespace: Namespace) -> Self {
        RedisStore {
            shared,
            namespace,
            _values: PhantomData,
        }
    }
}

/// What a key holds.
enum Held<'a> {
    Running { fingerprint: &'a [u8] },
    Done { fingerprint: &'a [u8], payload: &'a [u8] },
}

fn parse(v: &[u8]) -> Option<Held<'_>> {
    match v.split_first()? {
        (b'R', rest) => {
            let colon = rest.iter().position(|&b| b == b':')?;
            Some(Held::Running {
                fingerprint: &rest[colon + 1..],
            })
        }
        (b'D', rest) => {
            let nl = rest.iter().position(|&b| b == b'\n')?;
            Some(Held::Done {
                fingerprint: &rest[..nl],
                payload: &rest[nl + 1..],
            })
        }
        _ => None,
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl<V: Weigh + Codec> RedisStore<V> {
    /// Reads what another holder left: the decoded value, a mismatch, or "still running".
    fn read(held: &[u8], fingerprint: &str) -> Claim<V> {
        match parse(held) {
            Some(Held::Running { fingerprint: f }) if f != fingerprint.as_bytes() => Claim::Mismatch,
            Some(Held::Done { fingerprint: f, .. }) if f != fingerprint.as_bytes() => Claim::Mismatch,
            Some(Held::Done { payload, .. }) => match V::decode(payload) {
                Some(v) => Claim::Done(v),
                // Written by something else (another version, a hand edit): never trusted as a
                // result; treated as still held so it lapses with its TTL.
                None => Claim::InFlight(Pending::Remote),
            },
            Some(Held::Running { .. }) | None => Claim::InFlight(Pending::Remote),
        }
    }
}

impl<V> RedisStore<V> {
    /// Releases a claim whose command failed on our side, in the background, for at most
    /// `within`. Not counted as a store error (the failure that caused it was).
    fn release_late(&self, rkey: String, running: Vec<u8>, within: Duration) {
        let shared = Arc::clone(&self.shared);
        tokio::spawn(async move {
            let mut con = shared.manager.clone();
            let mut inv = shared.abandon.key(&rkey);
            inv.arg(&running);
            let _ = tokio::time::timeout(within, inv.invoke_async::<i64>(&mut con)).await;
        });
    }
}

impl<V: Weigh + Codec> ClaimStore<V> for RedisStore<V> {
    async fn claim(&self, key: &str, fingerprint: &str, lease: Duration) -> Result<Claim<V>, StoreError> {
        let s = &self.shared;
        let rkey = s.key(self.namespace, key);
        let token = format!("{:032x}", rand::random::<u128>());
        let mut running = Vec::with_capacity(1 + token.len() + 1 + fingerprint.len());
        running.push(b'R');
        running.extend_from_slice(token.as_bytes());
        running.push(b':');
        running.extend_from_slice(fingerprint.as_bytes());
        let mut inv = s.claim.key(&rkey);
        inv.arg(&running).arg(millis(lease + LEASE_MARGIN));
        let inv = &inv;
        let claimed = s
            .run("claim", |mut con| async move { inv.invoke_async(&mut con).await })
            .await;
        let held: Option<Vec<u8>> = match claimed {
            Ok(held) => held,
            Err(e) => {
                // A slow Redis may still run the claim after we gave up on it, leaving a key
                // that looks held until its lease lapses. Queue a release of exactly this claim
                // behind it (same connection, so it runs after the claim if that ever runs).
                self.release_late(rkey, running, lease + LEASE_MARGIN);
                return Err(e);
            }
        };
        Ok(match held {
            None => Claim::Fresh(Lease(Some(running))),
            Some(v) => Self::read(&v, fingerprint),
        })
    }

    async fn wait(
        &self,
        key: &str,
        fingerprint: &str,
        pending: Pending<V>,
        deadline: Instant,
    ) -> Result<Waited<V>, StoreError> {
        if let Pending::Local(mut rx) = pending {
            return Ok(super::wait_local(&mut rx, deadline).await);
        }
        let s = &self.shared;
        let rkey = s.key(self.namespace, key);
        let mut pause = POLL_FIRST;
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Ok(Waited::TimedOut);
            }
            // The last poll lands on the deadline, not a full pause before it.
            tokio::time::sleep(pause.min(deadline - now)).await;
            pause = (pause * 2).min(POLL_MAX);
            let mut get = redis::cmd("GET");
            get.arg(&rkey);
            let get = &get;
            let held = s
                .run("get", |mut con| async move {
                    get.query_async::<Option<Vec<u8>>>(&mut con).await
                })
                .await?;
            match held {
                None => return Ok(Waited::Released),
                Some(v) => match Self::read(&v, fingerprint) {
                    Claim::Done(v) => return Ok(Waited::Done(v)),
                    // Re-claimed for another fingerprint: let the caller claim and see it.
                    Claim::Mismatch => return Ok(Waited::Released),
                    Claim::Fresh(_) | Claim::InFlight(_) => {}
                },
            }
        }
    }

    async fn complete(&self, key: &str, lease: &Lease, value: V) -> Result<(), StoreError> {
        let Some(running) = &lease.0 else { return Ok(()) };
        let s = &self.shared;
        let payload = value.encode();
        let fingerprint = running
            .iter()
            .position(|&b| b == b':')
            .map_or(&[][..], |i| &running[i + 1..]);
        if payload.len() + fingerprint.len() + 2 > s.max_value_bytes {
            // Too large to keep: the caller has its value; duplicates run again.
            tracing::debug!(
                bytes = payload.len(),
                "Result larger than store.max_value_bytes; not stored."
            );
            return self.abandon(key, lease).await;
        }
        let mut done = Vec::with_capacity(1 + fingerprint.len() + 1 + payload.len());
        done.push(b'D');
        done.extend_from_slice(fingerprint);
        done.push(b'\n');
        done.extend_from_slice(&payload);
        let rkey = s.key(self.namespace, key);
        let mut inv = s.complete.key(&rkey);
        inv.arg(running).arg(&done).arg(millis(s.ttl));
        let inv = &inv;
        let _: i64 = s
            .run("complete", |mut con| async move { inv.invoke_async(&mut con).await })
            .await?;
        Ok(())
    }

    async fn abandon(&self, key: &str, lease: &Lease) -> Result<(), StoreError> {
        let Some(running) = &lease.0 else { return Ok(()) };
        let s = &self.shared;
        let rkey = s.key(self.namespace, key);
        let mut inv = s.abandon.key(&rkey);
        inv.arg(running);
        let inv = &inv;
        let _: i64 = s
            .run("abandon", |mut con| async move { inv.invoke_async(&mut con).await })
            .await?;
        Ok(())
    }

    fn abandon_detached(&self, key: String, lease: Lease) {
        if lease.0.is_none() {
            return;
        }
        // Bounded by the command timeout; if it cannot run, the lease lapses by itself.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let store = RedisStore::<V>::new(Arc::clone(&self.shared), self.namespace);
            rt.spawn(async move {
                let _ = store.abandon(&key, &lease).await;
            });
        }
    }

    fn usage(&self) -> (usize, usize) {
        (0, 0)
    }
}

/// Longest `store.ca_file` read: a bundle of CA certificates, never more.
const MAX_CA_BYTES: u64 = 1024 * 1024;

/// Reads `store.ca_file`, bounded in size.
fn read_ca(path: &std::path::Path) -> Result<Vec<u8>, StoreError> {
    use std::io::Read as _;
    let fail = |e: std::io::Error| StoreError::Unavailable(format!("store.ca_file {}: {e}", path.display()));
    let mut pem = Vec::new();
    std::fs::File::open(path)
        .map_err(fail)?
        .take(MAX_CA_BYTES + 1)
        .read_to_end(&mut pem)
        .map_err(fail)?;
    if pem.len() as u64 > MAX_CA_BYTES {
        return Err(StoreError::Unavailable(format!(
            "store.ca_file {} is larger than {MAX_CA_BYTES} bytes",
            path.display()
        )));
    }
    Ok(pem)
}

/// The password of a `redis://user:password@host` URL, if any (percent-decoded and raw, the
/// longer first, so either spelling is scrubbed).
fn password_of(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let userinfo = rest.rsplit_once('@')?.0;
    let password = userinfo.split_once(':').map_or(userinfo, |(_, p)| p);
    (!password.is_empty()).then(|| password.to_owned())
}

/// `text` without the password in it (raw or percent-decoded).
fn scrub(text: String, password: Option<&str>) -> String {
    let Some(p) = password else { return text };
    let decoded = percent_encoding::percent_decode_str(p).decode_utf8_lossy().into_owned();
    let mut out = text.replace(p, "***");
    if !decoded.is_empty() {
        out = out.replace(&decoded, "***");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_by_state() {
        assert!(matches!(parse(b"Rabc:fp"), Some(Held::Running { fingerprint }) if fingerprint == b"fp"));
        assert!(
            matches!(parse(b"Dfp\n{\"x\":1}"), Some(Held::Done { fingerprint, payload }) if fingerprint == b"fp" && payload == b"{\"x\":1}")
        );
        assert!(
            matches!(parse(b"D\npayload\nwith newline"), Some(Held::Done { fingerprint, payload }) if fingerprint.is_empty() && payload == b"payload\nwith newline")
        );
        assert!(parse(b"").is_none());
        assert!(parse(b"Xjunk").is_none());
        assert!(parse(b"Rno-colon").is_none());
    }

    #[test]
    fn passwords_are_scrubbed_raw_and_decoded() {
        let p = password_of("redis://user:p%40ss@host:6379/0");
        assert_eq!(p.as_deref(), Some("p%40ss"));
        assert_eq!(
            scrub("auth p@ss failed; p%40ss".into(), p.as_deref()),
            "auth *** failed; ***"
        );
        assert_eq!(password_of("redis://host:6379"), None);
        assert_eq!(password_of("redis://:only@host").as_deref(), Some("only"));
    }
}
