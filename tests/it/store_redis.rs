//! The shared store on a real `redis-server` (docs/scale.md): two toolwire servers sharing it
//! replay each other's results, join each other's concurrent duplicates and share
//! `Idempotency-Key`s; Redis down at start, killed, paused (slow) and restarted mid-run; and the
//! claim semantics of the store itself. A missing `redis-server` fails these tests (see
//! `common::redis`).

use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;
use toolwire::api::idempotency::StoredAnswer;
use toolwire::config::ServerConfig;
use toolwire::store::{Claim, Namespace, Pending, Stores, Waited};

use crate::common::mock_backend::MockBackend;
use crate::common::redis::{RedisServer, free_port};
use crate::common::server::{Served, config_for};

fn tools(dir: &std::path::Path, mock: &MockBackend) {
    std::fs::write(
        dir.join("t.json"),
        json!({"tools": [
            {"name": "create_order", "description": "Creates an order; a side effect that must not repeat.",
             "parameters": {"item": {"type": "string", "description": "Item."}},
             "http": {"method": "POST", "url": mock.url("/ok/orders")}},
            {"name": "slow_create", "description": "Creates something slowly; must not repeat.",
             "parameters": {"item": {"type": "string", "description": "Item."}},
             "http": {"method": "POST", "url": mock.url("/slow?ms=600")}},
            {"name": "read_stock", "description": "Reads the stock level; idempotent.",
             "idempotent": true,
             "parameters": {"item": {"type": "string", "description": "Item."}},
             "http": {"method": "GET", "url": mock.url("/ok/stock/{item}")}}
        ]})
        .to_string(),
    )
    .unwrap();
}

fn completion(calls: &[(&str, &str, Value)]) -> Value {
    let content: Vec<Value> = calls
        .iter()
        .map(|(id, name, input)| json!({"type": "tool_use", "id": id, "name": name, "input": input}))
        .collect();
    json!({"completion": {"type": "message", "role": "assistant", "content": content, "stop_reason": "tool_use"}})
}

fn config(dir: &std::path::Path, url: &str) -> ServerConfig {
    let mut cfg = config_for(dir);
    cfg.store.url = url.to_owned();
    cfg.store.command_timeout = toolwire::config::duration::HumanDuration(Duration::from_millis(300));
    cfg.store.connect_timeout = toolwire::config::duration::HumanDuration(Duration::from_millis(500));
    cfg
}

/// Two replicas on one Redis, and the backend whose hits prove how often a tool ran.
async fn two_replicas(redis: &RedisServer) -> (MockBackend, tempfile::TempDir, Served, Served) {
    let mock = MockBackend::start().await;
    let dir = tempfile::tempdir().unwrap();
    tools(dir.path(), &mock);
    let a = Served::start(config(dir.path(), &redis.url())).await;
    let b = Served::start(config(dir.path(), &redis.url())).await;
    (mock, dir, a, b)
}

async fn post_key(server: &Served, body: &Value, key: &str) -> (u16, Value) {
    let r = server
        .client
        .post(format!("{}/v1/execute", server.base))
        .header("idempotency-key", key)
        .json(body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json::<Value>().await.unwrap_or(Value::Null))
}

/// Polls `/readyz` until its store shows `connected == want` (bounded).
async fn wait_store_connected(server: &Served, want: bool) -> Value {
    wait_store(server, |store| store["connected"] == want).await
}

/// Polls `/readyz` until its `store` satisfies `done` (bounded).
async fn wait_store(server: &Served, done: impl Fn(&Value) -> bool) -> Value {
    let until = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = server.get_json("/readyz").await;
        assert_eq!(status, 200, "/readyz stays ready whatever the store's state: {body}");
        if done(&body["store"]) {
            return body;
        }
        assert!(
            std::time::Instant::now() < until,
            "the store never reached the expected state: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn bypassed() -> u64 {
    let text = toolwire::telemetry::metrics::render();
    text.lines()
        .find(|l| l.starts_with("toolwire_store_bypassed_total{store=\"replay\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn two_replicas_replay_each_others_results() {
    let redis = RedisServer::start();
    let (mock, _dir, a, b) = two_replicas(&redis).await;
    let ready = wait_store_connected(&a, true).await;
    assert_eq!(
        ready["store"],
        json!({"kind": "redis", "connected": true, "last_error": null})
    );
    let body = completion(&[
        ("toolu_1", "create_order", json!({"item": "book"})),
        ("toolu_2", "create_order", json!({"item": "pen"})),
    ]);
    let (s1, first) = a.post_json("/v1/execute", &body).await;
    let (s2, second) = b.post_json("/v1/execute", &body).await;
    assert_eq!((s1, s2), (200, 200), "{first} {second}");
    assert_eq!(mock.count("/ok/orders"), 2, "each call ran once, on replica A only");
    for i in 0..2 {
        assert!(first["results"][i].get("replayed").is_none());
        assert_eq!(second["results"][i]["replayed"], true, "{second}");
        assert_eq!(second["results"][i]["output"], first["results"][i]["output"]);
    }
    // And back: a result stored by B is replayed by A.
    let other = completion(&[("toolu_3", "create_order", json!({"item": "cup"}))]);
    b.post_json("/v1/execute", &other).await;
    let (_, again) = a.post_json("/v1/execute", &other).await;
    assert_eq!(again["results"][0]["replayed"], true);
    assert_eq!(mock.count("/ok/orders"), 3);
    // Key layout: <prefix>r:<64 hex digits>, each with a TTL of at most replay.ttl.
    let keys = redis.keys("toolwire:r:*");
    assert_eq!(keys.len(), 3, "{keys:?}");
    for k in &keys {
        let digest = k.strip_prefix("toolwire:r:").unwrap();
        assert!(
            digest.len() == 64 && digest.bytes().all(|c| c.is_ascii_hexdigit()),
            "{k}"
        );
        let pttl: i64 = redis
            .command(&["PTTL", k])
            .unwrap()
            .trim_start_matches(':')
            .trim()
            .parse()
            .unwrap();
        assert!(pttl > 0 && pttl <= 600_000, "{k}: PTTL {pttl}");
    }
}

#[tokio::test]
async fn concurrent_duplicates_on_both_replicas_run_the_tool_once() {
    let redis = RedisServer::start();
    let (mock, _dir, a, b) = two_replicas(&redis).await;
    for round in 0..3 {
        let id = format!("toolu_slow_{round}");
        let body = completion(&[(&id, "slow_create", json!({"item": "x"}))]);
        let (ra, rb) = tokio::join!(a.post_json("/v1/execute", &body), b.post_json("/v1/execute", &body));
        assert_eq!((ra.0, rb.0), (200, 200), "{} {}", ra.1, rb.1);
        assert_eq!(
            mock.count("/slow"),
            round + 1,
            "round {round}: the duplicate was joined across replicas"
        );
        let replayed: Vec<bool> = [&ra.1, &rb.1]
            .iter()
            .map(|r| r["results"][0]["replayed"] == true)
            .collect();
        assert_eq!(replayed.iter().filter(|r| **r).count(), 1, "{replayed:?}");
        assert_eq!(ra.1["results"][0]["output"], rb.1["results"][0]["output"]);
    }
}

#[tokio::test]
async fn idempotency_keys_are_shared_across_replicas() {
    let redis = RedisServer::start();
    let (mock, _dir, a, b) = two_replicas(&redis).await;
    let body = completion(&[("toolu_k", "create_order", json!({"item": "cup"}))]);
    let (s1, r1) = post_key(&a, &body, "order-42").await;
    let (s2, r2) = post_key(&b, &body, "order-42").await;
    assert_eq!((s1, s2), (200, 200), "{r1} {r2}");
    assert_eq!(r2["results"][0]["replayed"], true);
    assert_eq!(r2["results"][0]["output"], r1["results"][0]["output"]);
    assert_eq!(mock.count("/ok/orders"), 1);
    let changed = completion(&[("toolu_k", "create_order", json!({"item": "mug"}))]);
    let (s3, r3) = post_key(&b, &changed, "order-42").await;
    assert_eq!(s3, 422, "{r3}");
    assert_eq!(r3["error"]["code"], "idempotency_key_reused");
    assert_eq!(mock.count("/ok/orders"), 1);
    // Concurrent requests with one key on both replicas: one runs, the other gets its answer.
    let slow = completion(&[("toolu_ks", "slow_create", json!({"item": "y"}))]);
    let (ra, rb) = tokio::join!(post_key(&a, &slow, "slow-1"), post_key(&b, &slow, "slow-1"));
    assert_eq!((ra.0, rb.0), (200, 200));
    assert_eq!(mock.count("/slow"), 1);
    assert_eq!(redis.keys("toolwire:k:*").len(), 2);
}

#[tokio::test]
async fn redis_killed_and_restarted_loses_nothing_stored_and_toolwire_recovers() {
    let mut redis = RedisServer::start_persistent();
    let (mock, _dir, a, b) = two_replicas(&redis).await;
    let stored = completion(&[("toolu_p", "create_order", json!({"item": "lamp"}))]);
    let (_, first) = a.post_json("/v1/execute", &stored).await;
    assert_eq!(mock.count("/ok/orders"), 1);

    redis.kill();
    wait_store_connected(&a, false).await;
    // Down mid-run: the non-idempotent tool fails fast (retryable); the idempotent one runs.
    let fresh = completion(&[("toolu_n", "create_order", json!({"item": "desk"}))]);
    let (s, down) = b.post_json("/v1/execute", &fresh).await;
    assert_eq!(s, 200);
    assert_eq!(down["results"][0]["error"]["kind"], "store_unavailable", "{down}");
    assert_eq!(down["results"][0]["error"]["retryable"], true);
    assert_eq!(mock.count("/ok/orders"), 1, "not run without the store");
    let before = bypassed();
    let read = completion(&[("toolu_r", "read_stock", json!({"item": "lamp"}))]);
    let (_, r) = b.post_json("/v1/execute", &read).await;
    assert!(r["results"][0].get("error").is_none(), "{r}");
    assert_eq!(mock.count("/ok/stock/lamp"), 1);
    assert!(bypassed() > before, "the bypass is counted");

    redis.restart();
    wait_store_connected(&a, true).await;
    wait_store_connected(&b, true).await;
    // What was stored before the crash is still there, on either replica.
    let (s, again) = b.post_json("/v1/execute", &stored).await;
    assert_eq!(s, 200);
    assert_eq!(again["results"][0]["replayed"], true, "{again}");
    assert_eq!(again["results"][0]["output"], first["results"][0]["output"]);
    assert_eq!(mock.count("/ok/orders"), 1);
    // And the refused call runs now, once.
    let (_, ran) = a.post_json("/v1/execute", &fresh).await;
    assert!(ran["results"][0].get("error").is_none(), "{ran}");
    let (_, rep) = b.post_json("/v1/execute", &fresh).await;
    assert_eq!(rep["results"][0]["replayed"], true);
    assert_eq!(mock.count("/ok/orders"), 2);
}

/// A restart faster than anything notices (no command and no probe in between): the first
/// command on each replica finds its connection dropped and is sent again on a new one, so the
/// stored result is replayed at once instead of the call running undeduplicated.
#[tokio::test]
async fn a_quick_redis_restart_costs_no_call_its_replay() {
    let mut redis = RedisServer::start_persistent();
    let (mock, _dir, a, b) = two_replicas(&redis).await;
    let stored = completion(&[("toolu_q", "create_order", json!({"item": "vase"}))]);
    let (_, first) = a.post_json("/v1/execute", &stored).await;
    assert_eq!(mock.count("/ok/orders"), 1);
    // Both replicas have used their connection (B replays), so both now hold one to the old
    // server.
    let (_, replayed) = b.post_json("/v1/execute", &stored).await;
    assert_eq!(replayed["results"][0]["replayed"], true, "{replayed}");
    redis.kill();
    redis.restart();
    for server in [&b, &a] {
        let (s, again) = server.post_json("/v1/execute", &stored).await;
        assert_eq!(s, 200);
        assert_eq!(again["results"][0]["replayed"], true, "{again}");
        assert_eq!(again["results"][0]["output"], first["results"][0]["output"]);
    }
    assert_eq!(mock.count("/ok/orders"), 1, "run again after the restart");
}

#[tokio::test]
async fn redis_down_at_start_then_up_without_restarting_toolwire() {
    const PASSWORD: &str = "hunter2-do-not-leak";
    let port = free_port();
    let url = format!("redis://:{PASSWORD}@127.0.0.1:{port}/0");
    let mock = MockBackend::start().await;
    let dir = tempfile::tempdir().unwrap();
    tools(dir.path(), &mock);
    crate::common::logs::capture();
    let server = Served::start(config(dir.path(), &url)).await;

    // The probe's first attempt fails (nothing listens): its error is shown, without the password.
    let ready = wait_store(&server, |s| {
        s["connected"] == false && s["last_error"].as_str().is_some_and(|e| e.contains("PING"))
    })
    .await;
    assert_eq!(ready["store"]["kind"], "redis");
    assert!(!ready.to_string().contains(PASSWORD), "{ready}");

    let before = bypassed();
    let read = completion(&[("toolu_r", "read_stock", json!({"item": "cup"}))]);
    let (s, r) = server.post_json("/v1/execute", &read).await;
    assert_eq!(s, 200);
    assert!(r["results"][0].get("error").is_none(), "idempotent tools run: {r}");
    let (_, r) = server.post_json("/v1/execute", &read).await;
    assert!(r["results"][0].get("error").is_none(), "{r}");
    assert_eq!(bypassed(), before + 2, "every bypass is counted");
    let warned = crate::common::logs::all().matches("run without deduplication").count();
    assert_eq!(warned, 1, "warned once per store.warn_interval, not per call");
    let write = completion(&[("toolu_w", "create_order", json!({"item": "cup"}))]);
    let (_, w) = server.post_json("/v1/execute", &write).await;
    assert_eq!(w["results"][0]["error"]["kind"], "store_unavailable", "{w}");
    assert_eq!(w["results"][0]["error"]["retryable"], true);
    assert_eq!(mock.count("/ok/orders"), 0);
    let (ks, kb) = post_key(&server, &read, "key-1").await;
    assert_eq!(ks, 503, "{kb}");
    assert_eq!(kb["error"]["code"], "store_unavailable");
    let metrics = server.get("/metrics").await;
    assert!(!metrics.body.to_string().contains(PASSWORD));

    let _redis = RedisServer::start_on(port, false, Some(PASSWORD));
    let up = wait_store_connected(&server, true).await;
    let last = up["store"]["last_error"].as_str().unwrap_or_default().to_owned();
    assert!(
        last.contains("refused") && !last.contains(PASSWORD),
        "the last failure is kept: {up}"
    );
    let (_, w) = server.post_json("/v1/execute", &write).await;
    assert!(w["results"][0].get("error").is_none(), "{w}");
    assert_eq!(mock.count("/ok/orders"), 1);
    let (ks, _) = post_key(&server, &read, "key-1").await;
    assert_eq!(ks, 200);
    crate::common::logs::assert_absent(&[PASSWORD]);
}

#[tokio::test]
async fn a_paused_redis_counts_as_unavailable_within_the_command_timeout() {
    let redis = RedisServer::start();
    let (mock, _dir, a, _b) = two_replicas(&redis).await;
    wait_store_connected(&a, true).await;
    // One call first, so the claim script is loaded and the paused claim below is really run
    // by Redis when it wakes up.
    let warm = completion(&[("toolu_warm", "create_order", json!({"item": "warm"}))]);
    a.post_json("/v1/execute", &warm).await;
    assert_eq!(mock.count("/ok/orders"), 1);
    redis.pause(true);
    let write = completion(&[("toolu_w", "create_order", json!({"item": "cup"}))]);
    let (_, w) = a.post_json("/v1/execute", &write).await;
    assert_eq!(w["results"][0]["error"]["kind"], "store_unavailable", "{w}");
    assert_eq!(mock.count("/ok/orders"), 1);
    redis.pause(false);
    wait_store_connected(&a, true).await;
    // The claim Redis ran late was released behind it: the retry runs at once, not after the
    // lease (the call's deadline) has lapsed.
    let (_, w) = a.post_json("/v1/execute", &write).await;
    assert!(w["results"][0].get("error").is_none(), "{w}");
    assert_eq!(mock.count("/ok/orders"), 2);
}

// ---- The store itself, against the real server. ----

fn stores(redis_url: &str, ttl: Duration, max_value_bytes: usize) -> Stores {
    let mut cfg = config_for(std::path::Path::new("."));
    cfg.store.url = redis_url.to_owned();
    cfg.store.prefix = "t:".into();
    cfg.store.max_value_bytes = max_value_bytes;
    cfg.replay.ttl = toolwire::config::duration::HumanDuration(ttl);
    Stores::from_config(&cfg.replay, &cfg.store).unwrap()
}

fn answer(s: &str) -> StoredAnswer {
    StoredAnswer(bytes::Bytes::from(serde_json::to_vec(&json!({"v": s})).unwrap()))
}

#[tokio::test]
async fn claim_semantics_on_real_redis() {
    let redis = RedisServer::start();
    let st = stores(&redis.url(), Duration::from_secs(60), 1 << 20);
    // Two handles, as two replicas would have.
    let one = st.open::<StoredAnswer>(Namespace::Requests);
    let two = stores(&redis.url(), Duration::from_secs(60), 1 << 20).open::<StoredAnswer>(Namespace::Requests);
    let lease = Duration::from_secs(30);

    let Claim::Fresh(held) = one.claim("k1", "fp", lease).await.unwrap() else {
        panic!("fresh")
    };
    assert!(matches!(
        two.claim("k1", "other", lease).await.unwrap(),
        Claim::Mismatch
    ));
    let Claim::InFlight(pending) = two.claim("k1", "fp", lease).await.unwrap() else {
        panic!("in flight")
    };
    assert!(matches!(pending, Pending::Remote));
    let waiter = {
        let two = std::sync::Arc::clone(&two);
        tokio::spawn(async move {
            two.wait("k1", "fp", pending, Instant::now() + Duration::from_secs(10))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    toolwire::store::ClaimGuard::new(std::sync::Arc::clone(&one), "k1".into(), held)
        .complete(answer("first"))
        .await
        .unwrap();
    let Waited::Done(v) = waiter.await.unwrap().unwrap() else {
        panic!("done")
    };
    assert_eq!(v.0, answer("first").0);
    assert!(matches!(two.claim("k1", "fp", lease).await.unwrap(), Claim::Done(v) if v.0 == answer("first").0));
    assert!(matches!(two.claim("k1", "nope", lease).await.unwrap(), Claim::Mismatch));
    assert_eq!(redis.keys("t:k:*"), vec!["t:k:k1".to_owned()]);

    // Abandon releases the waiters, who claim again.
    let Claim::Fresh(held) = one.claim("k2", "", lease).await.unwrap() else {
        panic!("fresh")
    };
    let Claim::InFlight(pending) = two.claim("k2", "", lease).await.unwrap() else {
        panic!("in flight")
    };
    toolwire::store::ClaimGuard::new(std::sync::Arc::clone(&one), "k2".into(), held)
        .abandon()
        .await
        .unwrap();
    let w = two
        .wait("k2", "", pending, Instant::now() + Duration::from_secs(10))
        .await
        .unwrap();
    assert!(matches!(w, Waited::Released));
    assert!(matches!(two.claim("k2", "", lease).await.unwrap(), Claim::Fresh(_)));

    // A dropped guard releases its claim too (detached, within the command timeout).
    let Claim::Fresh(held) = one.claim("k3", "", lease).await.unwrap() else {
        panic!("fresh")
    };
    drop(toolwire::store::ClaimGuard::new(
        std::sync::Arc::clone(&one),
        "k3".into(),
        held,
    ));
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while !redis.keys("t:k:k3").is_empty() {
        assert!(std::time::Instant::now() < until, "dropped claim never released");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // A waiter gives up at its deadline.
    let Claim::Fresh(_held) = one.claim("k4", "", lease).await.unwrap() else {
        panic!("fresh")
    };
    let Claim::InFlight(pending) = two.claim("k4", "", lease).await.unwrap() else {
        panic!("in flight")
    };
    let w = two
        .wait("k4", "", pending, Instant::now() + Duration::from_millis(200))
        .await
        .unwrap();
    assert!(matches!(w, Waited::TimedOut));
}

#[tokio::test]
async fn leases_lapse_and_a_late_holder_never_overwrites_its_successor() {
    let redis = RedisServer::start();
    let st = stores(&redis.url(), Duration::from_secs(60), 1 << 20);
    let s = st.open::<StoredAnswer>(Namespace::Replay);
    // The store adds a fixed margin to every lease; shorten it by expiring the key by hand, as
    // the lease would for a replica that crashed.
    let Claim::Fresh(old) = s.claim("k", "", Duration::ZERO).await.unwrap() else {
        panic!("fresh")
    };
    let pttl: i64 = redis
        .command(&["PTTL", "t:r:k"])
        .unwrap()
        .trim_start_matches(':')
        .trim()
        .parse()
        .unwrap();
    assert!(pttl > 0 && pttl <= 5_000, "the claim is a lease: PTTL {pttl}");
    redis.command(&["PEXPIRE", "t:r:k", "1"]).unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let Claim::Fresh(new) = s.claim("k", "", Duration::from_secs(30)).await.unwrap() else {
        panic!("a lapsed claim is free")
    };
    // The crashed holder comes back late: neither its abandon nor its complete touch the new claim.
    toolwire::store::ClaimGuard::new(std::sync::Arc::clone(&s), "k".into(), old)
        .abandon()
        .await
        .unwrap();
    assert!(matches!(
        s.claim("k", "", Duration::from_secs(30)).await.unwrap(),
        Claim::InFlight(_)
    ));
    toolwire::store::ClaimGuard::new(std::sync::Arc::clone(&s), "k".into(), new)
        .complete(answer("successor"))
        .await
        .unwrap();
    assert!(
        matches!(s.claim("k", "", Duration::from_secs(30)).await.unwrap(), Claim::Done(v) if v.0 == answer("successor").0)
    );
}

#[tokio::test]
async fn values_are_bounded_and_expire_after_the_ttl() {
    let redis = RedisServer::start();
    let st = stores(&redis.url(), Duration::from_millis(300), 64);
    let s = st.open::<StoredAnswer>(Namespace::Replay);
    let lease = Duration::from_secs(30);
    let Claim::Fresh(held) = s.claim("big", "", lease).await.unwrap() else {
        panic!("fresh")
    };
    toolwire::store::ClaimGuard::new(std::sync::Arc::clone(&s), "big".into(), held)
        .complete(answer(&"x".repeat(100)))
        .await
        .unwrap();
    assert!(redis.keys("t:r:big").is_empty(), "over max_value_bytes: not kept");
    assert!(matches!(s.claim("big", "", lease).await.unwrap(), Claim::Fresh(_)));

    let Claim::Fresh(held) = s.claim("small", "", lease).await.unwrap() else {
        panic!("fresh")
    };
    toolwire::store::ClaimGuard::new(std::sync::Arc::clone(&s), "small".into(), held)
        .complete(answer("ok"))
        .await
        .unwrap();
    assert!(matches!(s.claim("small", "", lease).await.unwrap(), Claim::Done(_)));
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        matches!(s.claim("small", "", lease).await.unwrap(), Claim::Fresh(_)),
        "expired after replay.ttl"
    );
}

#[tokio::test]
async fn a_value_that_does_not_decode_is_never_returned() {
    let redis = RedisServer::start();
    let st = stores(&redis.url(), Duration::from_secs(60), 1 << 20);
    let s = st.open::<StoredAnswer>(Namespace::Requests);
    redis
        .command(&["SET", "t:k:bad", "D\nnot json", "PX", "60000"])
        .unwrap();
    let c = s.claim("bad", "", Duration::from_secs(1)).await.unwrap();
    assert!(matches!(c, Claim::InFlight(_)), "{c:?}");
    assert!(st.health().connected());
}

#[tokio::test]
async fn rediss_with_a_private_ca_file_and_without_it() {
    let pki = crate::common::tls_backend::Pki::new("toolwire test redis CA");
    let server_cert = pki.server(&["127.0.0.1", "localhost"]);
    let redis = RedisServer::start_tls(&server_cert.cert_pem, &server_cert.key_pem);
    let mock = MockBackend::start().await;
    let dir = tempfile::tempdir().unwrap();
    tools(dir.path(), &mock);
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, pki.ca_pem()).unwrap();

    let mut trusted = config(dir.path(), &redis.tls_url());
    trusted.store.ca_file = ca.clone();
    let a = Served::start(trusted.clone()).await;
    let b = Served::start(trusted).await;
    wait_store_connected(&a, true).await;
    let body = completion(&[("toolu_tls", "create_order", json!({"item": "tls"}))]);
    a.post_json("/v1/execute", &body).await;
    let (_, again) = b.post_json("/v1/execute", &body).await;
    assert_eq!(again["results"][0]["replayed"], true, "{again}");
    assert_eq!(mock.count("/ok/orders"), 1);

    // Without the CA the certificate is not trusted: the store stays unavailable, fail-fast.
    let untrusted = Served::start(config(dir.path(), &redis.tls_url())).await;
    let down = wait_store(&untrusted, |s| {
        s["connected"] == false && s["last_error"].as_str().is_some_and(|e| e.contains("PING"))
    })
    .await;
    let (_, w) = untrusted
        .post_json(
            "/v1/execute",
            &completion(&[("toolu_u", "create_order", json!({"item": "u"}))]),
        )
        .await;
    assert_eq!(w["results"][0]["error"]["kind"], "store_unavailable", "{w} {down}");
}
