//! Hot reload under load (`docs/reliability.md#hot-reload-under-load`, row F14): the file watcher
//! with a tiny debounce while clients keep calling; valid changes written the way editors do
//! (write a temp file, rename it over the old one) become active; invalid sets (syntax error,
//! duplicate name across files, a schema that does not compile) are rejected and the last good
//! set stays; no in-flight call fails. Also SIGHUP on the real binary and a Kubernetes
//! ConfigMap-style `..data` symlink swap.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::common::binary::Binary;
use crate::common::invariants::{Fixture, kind, results};
use crate::common::mock_backend::MockBackend;
use crate::common::server::{Opts, Served, openai};
use nix::sys::signal::Signal;
use serde_json::{Value, json};
use toolwire::config::HumanDuration;

const DEBOUNCE: Duration = Duration::from_millis(50);

/// How long a debounced reload may take to land on a loaded machine.
const SETTLE: Duration = Duration::from_secs(5);

/// Writes `{"tools": tools}` to `dir/file` the way editors do: a hidden temp file, then a
/// rename over the target (atomic: a reader sees the old or the new file, never half).
fn rename_replace(dir: &Path, file: &str, content: &str) {
    let tmp = dir.join(format!(".{file}.tmp"));
    std::fs::write(&tmp, content).unwrap();
    std::fs::rename(&tmp, dir.join(file)).unwrap();
}

fn tools_json(tools: &[Value]) -> String {
    json!({ "tools": tools }).to_string()
}

/// `GET /v1/tools` → (version, full reload status). (`/readyz` shows counts only.)
async fn ready(client: &reqwest::Client, base: &str) -> (String, Value) {
    let body: Value = client
        .get(format!("{base}/v1/tools"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    (body["version"].as_str().unwrap().to_owned(), body["reload"].clone())
}

/// Tool names of `GET /v1/tools`.
async fn tool_names(client: &reqwest::Client, base: &str) -> Vec<String> {
    let body: Value = client
        .get(format!("{base}/v1/tools"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

/// Polls `GET /v1/tools` until `cond(version, reload)` holds, at most [`SETTLE`].
async fn wait_ready(
    client: &reqwest::Client,
    base: &str,
    what: &str,
    cond: impl Fn(&str, &Value) -> bool,
) -> (String, Value) {
    let start = Instant::now();
    loop {
        let (v, r) = ready(client, base).await;
        if cond(&v, &r) {
            return (v, r);
        }
        assert!(
            start.elapsed() < SETTLE,
            "timed out waiting for {what}: version {v}, reload {r}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_under_load_applies_valid_sets_and_rejects_invalid_ones() {
    let fx = Fixture::new().await;
    let mock = MockBackend::start().await;
    let work = fx.http_tool("work", json!({"url": mock.url("/slow?ms=20")}), json!({}));
    let extra = |n: usize| fx.http_tool(&format!("extra_{n}"), json!({"url": mock.url("/ok")}), json!({}));
    fx.write_tools("a.json", &json!([work]));
    fx.write_tools("b.json", &json!([extra(0)]));
    let mut cfg = fx.config();
    cfg.reload.watch = true;
    cfg.reload.debounce = HumanDuration(DEBOUNCE);
    let server = Served::start_opts(
        cfg,
        Opts {
            reloader: true,
            ..Opts::default()
        },
    )
    .await;
    let (client, base) = (server.client.clone(), server.base.clone());

    // 3 clients calling `work` (twice per request) until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..3)
        .map(|_| {
            let (client, base, stop, served) = (client.clone(), base.clone(), Arc::clone(&stop), Arc::clone(&served));
            tokio::spawn(async move {
                let completion = openai(&[("c1", "work", json!({})), ("c2", "work", json!({}))]);
                let body = json!({"provider": "openai_chat", "completion": completion});
                let started = Instant::now();
                while !stop.load(Ordering::SeqCst) && started.elapsed() < Duration::from_secs(60) {
                    let resp = client
                        .post(format!("{base}/v1/execute"))
                        .json(&body)
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(resp.status().as_u16(), 200);
                    let body: Value = resp.json().await.unwrap();
                    for r in results(&body, &["c1", "c2"]) {
                        assert_eq!(kind(&r), "ok", "an in-flight call failed during a reload: {r}");
                    }
                    served.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();

    let bad_sets: [(&str, String); 3] = [
        ("syntax error", "{\"tools\": [ {\"name\": ".to_owned()),
        (
            "duplicate name across files",
            tools_json(&[fx.http_tool("work", json!({"url": mock.url("/ok")}), json!({}))]),
        ),
        (
            "schema that does not compile",
            tools_json(&[fx.http_tool(
                "bad_schema",
                json!({"url": mock.url("/ok")}),
                json!({"parameters": {"type": "object", "properties": {"x": {"type": "no-such-type"}}}}),
            )]),
        ),
    ];
    let (mut version, status) = ready(&client, &base).await;
    let mut failures = status["failures"].as_u64().unwrap();
    let started = Instant::now();
    let mut rounds = 0;
    let mut rejected = 0;
    while started.elapsed() < Duration::from_secs(3) || rounds < 3 {
        rounds += 1;
        // A valid change: `b.json` now declares `extra_<round>` instead.
        rename_replace(&fx.tools, "b.json", &tools_json(&[extra(rounds)]));
        let (v, _) = wait_ready(&client, &base, "a valid change to become active", |v, _| v != version).await;
        version = v;
        let names = tool_names(&client, &base).await;
        assert!(names.contains(&format!("extra_{rounds}")), "{names:?}");
        assert!(!names.contains(&format!("extra_{}", rounds - 1)), "{names:?}");

        // An invalid set in a new file: rejected, the last good set stays.
        let (what, content) = &bad_sets[rounds % bad_sets.len()];
        rename_replace(&fx.tools, "c.json", content);
        let (v, status) = wait_ready(&client, &base, what, |_, r| r["failures"].as_u64().unwrap() > failures).await;
        failures = status["failures"].as_u64().unwrap();
        rejected += 1;
        assert_eq!(v, version, "{what}: the version must not change");
        let errors = status["last_error"]
            .as_array()
            .unwrap_or_else(|| panic!("{what}: no last_error: {status}"));
        assert!(!errors.is_empty(), "{what}");
        assert!(
            errors.iter().any(|e| e.as_str().unwrap().contains("c.json")),
            "{what}: {errors:?}"
        );
        let names = tool_names(&client, &base).await;
        assert!(
            names.contains(&"work".to_owned()) && names.contains(&format!("extra_{rounds}")),
            "{names:?}"
        );

        // Removing the bad file brings back a valid (unchanged) set; the error clears.
        std::fs::remove_file(fx.tools.join("c.json")).unwrap();
        wait_ready(&client, &base, "the error to clear", |_, r| r["last_error"].is_null()).await;
    }
    stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.await.unwrap();
    }
    let served = served.load(Ordering::SeqCst);
    let (_, status) = ready(&client, &base).await;
    eprintln!(
        "reload under load: {rounds} valid and {rejected} invalid sets in {:?}; {served} requests, all ok; status {status}",
        started.elapsed()
    );
    assert!(served >= 10, "the clients kept calling: {served}");
    assert!(status["reloads"].as_u64().unwrap() >= rounds as u64);
    assert!(failures >= rejected);
    server.stop().await;
    drop(mock);
    fx.finish().await;
}

#[tokio::test]
async fn sighup_reloads_the_real_binary() {
    let fx = Fixture::new().await;
    fx.write_tools(
        "a.json",
        &json!([fx.http_tool("one", json!({"url": "http://127.0.0.1:9/x"}), json!({}))]),
    );
    let config = fx.dir.path().join("toolwire.toml");
    std::fs::write(&config, "[reload]\nwatch = false\n").unwrap();
    let bin = Binary::start(&config, &fx.tools);
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let base = format!("http://{}", bin.addr);
    let (v0, _) = ready(&client, &base).await;

    // Without watching, a change is not picked up until SIGHUP.
    fx.write_tools(
        "b.json",
        &json!([fx.http_tool("two", json!({"url": "http://127.0.0.1:9/y"}), json!({}))]),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(ready(&client, &base).await.0, v0);
    bin.signal(Signal::SIGHUP);
    let (v1, _) = wait_ready(&client, &base, "SIGHUP reload", |v, _| v != v0).await;
    assert_eq!(tool_names(&client, &base).await, ["one", "two"]);

    // An invalid set: rejected on SIGHUP, the version stays.
    std::fs::write(fx.tools.join("c.json"), "not json at all").unwrap();
    bin.signal(Signal::SIGHUP);
    let (v, status) = wait_ready(&client, &base, "a rejected SIGHUP reload", |_, r| r["failures"] == 1).await;
    assert_eq!(v, v1);
    assert!(status["last_error"][0].as_str().unwrap().contains("c.json"), "{status}");
    // The log line is written before the status changes, but the test reads stderr on its own
    // thread: give the reader time to catch up.
    let logged = async {
        while !bin.stderr().contains("Reload rejected") {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    assert!(
        tokio::time::timeout(Duration::from_secs(10), logged).await.is_ok(),
        "the rejection is logged"
    );
    assert_eq!(status["reloads"], 1);
    bin.signal(Signal::SIGTERM);
    let mut bin = bin;
    assert!(bin.wait_exit(Duration::from_secs(10)).unwrap().success());
    assert!(!bin.stderr().contains(&fx.secret), "I5");
    fx.finish().await;
}

#[tokio::test]
async fn configmap_symlink_swap_is_picked_up() {
    let fx = Fixture::new().await;
    let mock = MockBackend::start().await;
    // The kubelet's layout: a timestamped dir, `..data` pointing at it, and the visible file a
    // symlink through `..data`. Hidden entries are not loaded themselves.
    let t = &fx.tools;
    let gen_dir = |name: &str, tool: &str| {
        std::fs::create_dir(t.join(name)).unwrap();
        std::fs::write(
            t.join(name).join("tools.json"),
            tools_json(&[fx.http_tool(tool, json!({"url": mock.url("/ok")}), json!({}))]),
        )
        .unwrap();
    };
    gen_dir("..2026_01_01_00_00_00.1", "gen_one");
    std::os::unix::fs::symlink("..2026_01_01_00_00_00.1", t.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/tools.json", t.join("tools.json")).unwrap();
    let mut cfg = fx.config();
    cfg.reload.watch = true;
    cfg.reload.debounce = HumanDuration(DEBOUNCE);
    let server = Served::start_opts(
        cfg,
        Opts {
            reloader: true,
            ..Opts::default()
        },
    )
    .await;
    let (client, base) = (server.client.clone(), server.base.clone());
    assert_eq!(tool_names(&client, &base).await, ["gen_one"]);
    let v0 = server.version();

    // The swap: a new dir, a temp symlink to it, renamed over `..data` (atomic), old dir removed.
    gen_dir("..2026_01_01_00_01_00.2", "gen_two");
    std::os::unix::fs::symlink("..2026_01_01_00_01_00.2", t.join("..data_tmp")).unwrap();
    std::fs::rename(t.join("..data_tmp"), t.join("..data")).unwrap();
    std::fs::remove_dir_all(t.join("..2026_01_01_00_00_00.1")).unwrap();
    wait_ready(&client, &base, "the ConfigMap swap", |v, r| {
        v != v0 && r["last_error"].is_null()
    })
    .await;
    assert_eq!(tool_names(&client, &base).await, ["gen_two"]);
    let a = server
        .execute(&openai(&[("c", "gen_two", json!({}))]), &Value::Null)
        .await;
    assert_eq!(kind(&results(&a.body, &["c"])[0]), "ok");
    server.stop().await;
    drop(mock);
    fx.finish().await;
}

#[tokio::test]
async fn a_reload_keeps_per_tool_concurrency_counts() {
    let dir = tempfile::tempdir().unwrap();
    let tool = |description: &str| {
        json!({"name": "one_at_a_time", "description": description, "concurrency": 1,
               "parameters": {"type": "object", "properties": {}},
               "exec": {"command": ["sleep", "2"]}})
    };
    std::fs::write(dir.path().join("t.json"), tools_json(&[tool("Sleeps; one at a time.")])).unwrap();
    let mut cfg = crate::common::server::config_for(dir.path());
    cfg.replay.enabled = false;
    let served = Arc::new(Served::start(cfg).await);
    let first = {
        let s = Arc::clone(&served);
        tokio::spawn(async move {
            s.execute(&openai(&[("a", "one_at_a_time", json!({}))]), &Value::Null)
                .await
        })
    };
    // Wait until the first call holds the tool's only slot.
    let mut spawned = false;
    for _ in 0..100 {
        if served.state.executor.in_flight(256) == 1 {
            spawned = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(spawned, "the first call never started");
    rename_replace(
        dir.path(),
        "t.json",
        &tools_json(&[tool("Sleeps; still one at a time.")]),
    );
    assert!(matches!(
        toolwire::reload::reload_now(&served.state.reloader).await,
        toolwire::reload::Reloaded::Swapped { .. }
    ));
    // The new set's tool still counts the call of the old set: no slot before the deadline.
    let second = served
        .execute(
            &openai(&[("b", "one_at_a_time", json!({}))]),
            &json!({"deadline_ms": 300}),
        )
        .await;
    assert_eq!(kind(&results(&second.body, &["b"])[0]), "rejected", "{}", second.body);
    let first = first.await.unwrap();
    assert_eq!(kind(&results(&first.body, &["a"])[0]), "ok", "{}", first.body);
}
