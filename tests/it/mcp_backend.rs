//! MCP servers as backends (`docs/mcp.md`), against servers that are not rmcp: the official
//! Python SDK's server API (`tests/fixtures/mcp/fixture_server.py`, misbehaving on purpose) and
//! `mcp-server-time`, over stdio and Streamable HTTP, in both protocol eras.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::oneshot;
use toolwire::api::AppState;
use toolwire::config::ServerConfig;
use toolwire::executor::Executor;
use toolwire::mcp::{HubSettings, McpHub};

use crate::common::server::config_for;
use crate::common::tools::{assert_error, execute_body, result};

fn python() -> PathBuf {
    let py = Path::new(env!("CARGO_MANIFEST_DIR")).join(".cache/sdk-venv/bin/python");
    assert!(
        py.exists(),
        "{} is missing: `make test` installs it (scripts/sdk-venv.sh)",
        py.display()
    );
    py
}

fn fixture() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/mcp/fixture_server.py")
        .display()
        .to_string()
}

/// A stdio `[[mcp]]` entry (TOML) running the fixture server.
fn stdio_entry(name: &str, extra_args: &[&str], more: &str) -> String {
    let mut cmd = vec![python().display().to_string(), fixture(), "stdio".into()];
    cmd.extend(extra_args.iter().map(|s| (*s).to_owned()));
    format!(
        "[[mcp]]\nname = \"{name}\"\ncommand = {}\n{more}\n",
        serde_json::to_string(&cmd).unwrap()
    )
}

/// A Python fixture server over HTTP on a free port; killed on drop.
struct HttpFixture {
    child: std::process::Child,
    url: String,
}

impl HttpFixture {
    async fn start(extra: &[&str]) -> Self {
        Self::start_on(free_port(), extra).await
    }

    async fn start_on(port: u16, extra: &[&str]) -> Self {
        let child = std::process::Command::new(python())
            .arg(fixture())
            .arg("http")
            .arg(port.to_string())
            .args(extra)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            assert!(std::time::Instant::now() < deadline, "the fixture server did not start");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        HttpFixture {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }
}

impl Drop for HttpFixture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The real server with an MCP hub, on 127.0.0.1:0, reloading on `list_changed`.
struct Node {
    base: String,
    client: reqwest::Client,
    state: AppState,
    hub: McpHub,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    _reloader: toolwire::reload::WatchHandle,
}

fn fast_settings() -> HubSettings {
    HubSettings {
        backoff_initial: Duration::from_millis(100),
        backoff_max: Duration::from_millis(500),
        ..HubSettings::default()
    }
}

impl Node {
    async fn start(dir: &Path) -> Self {
        Self::start_config(config_for(dir)).await
    }

    async fn start_config(mut config: ServerConfig) -> Self {
        config.reload.debounce = toolwire::config::HumanDuration(Duration::from_millis(50));
        let executor = Executor::new(&config).unwrap();
        let hub = McpHub::from_config_with(&config, executor.exec_context(), fast_settings()).unwrap();
        let registry = toolwire::mcp::load_registry(&config.tools_dir, &config.defaults, &hub)
            .await
            .unwrap_or_else(|d| panic!("invalid tools: {d:?}"));
        let executor = executor.with_mcp(Some(hub.caller()));
        let listener = toolwire::server::bind("127.0.0.1:0".parse().unwrap(), 128).unwrap();
        let addr = listener.local_addr().unwrap();
        let state = AppState::with_mcp(config, registry, executor, Some(hub.clone()));
        let reloader = toolwire::reload::spawn(state.reloader.clone());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(toolwire::server::serve(listener, state.clone(), async move {
            let _ = stopped.await;
        }));
        Node {
            base: format!("http://{addr}"),
            client: reqwest::Client::builder().no_proxy().build().unwrap(),
            state,
            hub,
            stop: Some(stop),
            task: Some(task),
            _reloader: reloader,
        }
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        let r = self.client.get(format!("{}{path}", self.base)).send().await.unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }

    async fn execute(&self, calls: &[(&str, &str, Value)]) -> Value {
        let r = self
            .client
            .post(format!("{}/v1/execute", self.base))
            .json(&execute_body(calls))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        r.json().await.unwrap()
    }

    /// One call; its result.
    async fn call(&self, name: &str, args: Value) -> Value {
        let resp = self.execute(&[("c1", name, args)]).await;
        result(&resp, 0).clone()
    }

    fn server_status(&self, name: &str) -> toolwire::mcp::ServerStatus {
        self.hub
            .status()
            .into_iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no server {name}"))
    }

    async fn shut_down(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
        self.hub.shut_down().await;
    }
}

/// Polls `f` every 100 ms until it is true (at most 30 s).
async fn eventually(what: &str, mut f: impl AsyncFnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !f().await {
        assert!(std::time::Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_servers_of_both_eras_and_mcp_server_time_serve_execute() {
    let dir = tempfile::tempdir().unwrap();
    let time = serde_json::to_string(&[
        python().display().to_string(),
        "-m".into(),
        "mcp_server_time".into(),
        "--local-timezone".into(),
        "UTC".into(),
    ])
    .unwrap();
    write(
        dir.path(),
        "mcp.toml",
        &format!(
            "{}{}[[mcp]]\nname = \"time\"\ncommand = {time}\n",
            stdio_entry("fx", &[], "env = { FIXTURE_MARK = \"marked\" }"),
            stdio_entry("old", &["--legacy"], "include = [\"echo\", \"sum_*\"]"),
        ),
    );
    let node = Node::start(dir.path()).await;
    assert_eq!(node.server_status("fx").protocol_version.as_deref(), Some("2026-07-28"));
    assert_eq!(
        node.server_status("old").protocol_version.as_deref(),
        Some("2025-11-25")
    );

    // Discovered tools are ordinary tools: listed with their server, filtered by include.
    let (status, tools) = node.get("/v1/tools").await;
    assert_eq!(status, 200);
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"fx__echo") && names.contains(&"time__get_current_time"),
        "{names:?}"
    );
    assert!(
        names.contains(&"old__echo") && names.contains(&"old__sum_points"),
        "{names:?}"
    );
    assert!(!names.contains(&"old__fail"), "include leaves the rest out: {names:?}");
    let echo = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "fx__echo")
        .unwrap();
    assert_eq!(echo["backend"], "mcp");
    assert_eq!(
        echo["mcp"],
        json!({"server": "fx", "tool": "echo", "state": "connected"})
    );
    let servers = tools["mcp"].as_array().unwrap();
    assert_eq!(servers.len(), 3, "{servers:?}");

    let resp = node
        .execute(&[
            ("a", "fx__echo", json!({"text": "hello"})),
            ("b", "old__echo", json!({"text": "from the old era"})),
            ("c", "time__get_current_time", json!({"timezone": "Europe/Paris"})),
            ("d", "fx__env_mark", json!({})),
        ])
        .await;
    assert_eq!(result(&resp, 0)["output"], json!("hello"), "{resp}");
    assert_eq!(result(&resp, 1)["output"], json!("from the old era"), "{resp}");
    assert_eq!(result(&resp, 2)["output"]["timezone"], json!("Europe/Paris"), "{resp}");
    // Exactly the configured environment: the mark, and not the server's HOME.
    assert_eq!(result(&resp, 3)["output"], json!("marked home=False"), "{resp}");
    // The answer is provider-native.
    assert_eq!(resp["messages"][0]["role"], "tool");
    assert_eq!(resp["messages"][0]["tool_call_id"], "a");

    // Arguments are validated against the discovered schema ($defs/$ref included).
    let bad = node.call("old__sum_points", json!({"points": [{"x": 1}]})).await;
    assert_error(&bad, "invalid_arguments", false, 0);
    let ok = node
        .call(
            "old__sum_points",
            json!({"points": [{"x": 1, "y": 2}, {"x": 3, "y": 4}]}),
        )
        .await;
    assert_eq!(ok["output"], json!({"x": 4, "y": 6}), "{ok}");

    // Each provider's declaration rules apply to the inputSchema.
    for provider in ["openai_chat", "anthropic", "gemini"] {
        let (status, decl) = node.get(&format!("/v1/schemas?provider={provider}&strict=true")).await;
        assert_eq!(status, 200, "{provider}: {decl}");
        assert!(decl.to_string().contains("old__sum_points"), "{provider}");
    }
    node.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_servers_of_both_eras_serve_execute_and_map_results() {
    let modern = HttpFixture::start(&[]).await;
    let legacy = HttpFixture::start(&["--legacy"]).await;
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "token", "s3cr3t-token-value");
    write(
        dir.path(),
        "mcp.yaml",
        &format!(
            "mcp:\n  - name: web\n    url: {}\n    headers: {{Authorization: 'Bearer ${{file:token}}'}}\n  - name: old\n    url: {}\n",
            modern.url, legacy.url
        ),
    );
    let node = Node::start(dir.path()).await;
    assert_eq!(
        node.server_status("web").protocol_version.as_deref(),
        Some("2026-07-28")
    );
    assert_eq!(
        node.server_status("old").protocol_version.as_deref(),
        Some("2025-11-25")
    );

    let resp = node
        .execute(&[
            ("a", "web__echo", json!({"text": "modern"})),
            ("b", "old__echo", json!({"text": "legacy"})),
            ("c", "web__image", json!({})),
            ("d", "old__resources", json!({})),
            ("e", "web__fail", json!({"reason": "bad input"})),
            ("f", "old__sum_points", json!({"points": [{"x": 1, "y": 1}]})),
        ])
        .await;
    assert_eq!(result(&resp, 0)["output"], json!("modern"), "{resp}");
    assert_eq!(result(&resp, 1)["output"], json!("legacy"), "{resp}");
    // image → a file beside the text (native image blocks per provider).
    let img = result(&resp, 2);
    assert_eq!(img["output"], json!("a red dot"), "{img}");
    assert_eq!(img["files"][0]["mime_type"], "image/png", "{img}");
    // resource_link / embedded resource → text naming URI and media type.
    let res = result(&resp, 3)["output"].as_str().unwrap().to_owned();
    assert!(
        res.contains("file:///data/report.csv") && res.contains("text/csv"),
        "{res}"
    );
    assert!(res.contains("mem://note") && res.contains("embedded note"), "{res}");
    // isError → a failed result the model reads; not retried.
    let err = assert_error(result(&resp, 4), "tool_error", false, 1);
    assert!(err["message"].as_str().unwrap().contains("bad input"), "{err}");
    // structuredContent → JSON output.
    assert_eq!(result(&resp, 5)["output"], json!({"x": 1, "y": 1}), "{resp}");

    // The Anthropic answer carries the image as a native block.
    let body = json!({
        "provider": "anthropic",
        "completion": {
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
            "stop_reason": "tool_use",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "old__image", "input": {}}],
        },
    });
    let r = node
        .client
        .post(format!("{}/v1/execute", node.base))
        .json(&body)
        .send()
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    assert!(v.to_string().contains("\"type\":\"image\""), "{v}");
    node.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_broken_server_never_takes_the_others_down() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "key", "very-secret-key-42");
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    write(
        dir.path(),
        "mcp.toml",
        &format!(
            "{}[[mcp]]\nname = \"gone\"\ncommand = [\"/nonexistent/mcp-server\"]\n\n[[mcp]]\nname = \"down\"\nurl = \"http://127.0.0.1:{closed}/mcp?key=${{file:key}}\"\n",
            stdio_entry("fx", &[], "")
        ),
    );
    let node = Node::start(dir.path()).await;
    // The good server serves.
    let ok = node.call("fx__echo", json!({"text": "still here"})).await;
    assert_eq!(ok["output"], json!("still here"), "{ok}");
    // The broken ones are failing, shown (messages only when authenticated), and ready stays.
    let (status, ready) = node.get("/readyz").await;
    assert_eq!(status, 200, "{ready}");
    let states: Vec<(String, String)> = ready["mcp"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().to_owned(),
                s["state"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(states.contains(&("gone".into(), "failing".into())), "{ready}");
    assert!(states.contains(&("down".into(), "failing".into())), "{ready}");
    // States only on the unauthenticated /readyz: no MCP error message (the store has its own).
    assert!(!ready["mcp"].to_string().contains("last_error"), "{ready}");
    let (_, tools) = node.get("/v1/tools").await;
    let down = tools["mcp"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "down")
        .unwrap();
    let gone = tools["mcp"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "gone")
        .unwrap();
    assert!(down["failing_since_ms"].is_u64(), "{down}");
    assert!(gone["last_error"].as_str().unwrap().contains("nonexistent"), "{gone}");
    assert!(
        !tools.to_string().contains("very-secret-key-42"),
        "secrets are masked: {tools}"
    );
    node.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_cancel_and_the_connection_lives_on() {
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("cancelled");
    let env = format!(
        "timeout = \"1s\"\nretry = {{ max_attempts = 1 }}\nenv = {{ FIXTURE_CANCELLED = {} }}",
        serde_json::to_string(&mark.display().to_string()).unwrap()
    );
    write(dir.path(), "mcp.toml", &stdio_entry("fx", &[], &env));
    let node = Node::start(dir.path()).await;
    let hung = node.call("fx__hang", json!({})).await;

    assert_error(&hung, "timeout", true, 1);
    // The timeout reached the server as `notifications/cancelled`: its handler was cancelled
    // (the fixture leaves a mark then), not left sleeping for an hour.
    eventually("the server saw the cancellation", async || mark.exists()).await;
    let ok = node.call("fx__echo", json!({"text": "after"})).await;
    assert_eq!(ok["output"], json!("after"), "{ok}");
    assert_eq!(node.server_status("fx").restarts, 0, "the same connection");
    node.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_dies_mid_call_is_restarted_and_its_call_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "mcp.toml", &stdio_entry("fx", &[], ""));
    let node = Node::start(dir.path()).await;
    let died = node.call("fx__die", json!({})).await;
    let err = assert_error(&died, "backend_unavailable", true, 1);
    let msg = err["message"].as_str().unwrap();
    assert!(msg.contains("went away"), "{msg}");
    // Restarted with backoff; meanwhile calls fail fast as backend_unavailable.
    eventually("the server is back", async || {
        let r = node.call("fx__echo", json!({"text": "back"})).await;
        if r["ok"] == json!(false) {
            assert_eq!(r["error"]["kind"], "backend_unavailable", "{r}");
        }
        r["output"] == json!("back")
    })
    .await;
    let st = node.server_status("fx");
    assert!(st.restarts >= 1, "{st:?}");
    assert_eq!(st.state, "connected");
    node.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changed_swaps_the_new_tool_in() {
    // Legacy: the notification on the connection; modern: a `subscriptions/listen` event.
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "mcp.toml",
        &format!(
            "{}{}",
            stdio_entry("old", &["--legacy"], ""),
            stdio_entry("new", &[], "")
        ),
    );
    let node = Node::start(dir.path()).await;
    for server in ["old", "new"] {
        let added = format!("{server}__added_later");
        let before = node.state.registry.load().version.clone();
        assert!(node.state.registry.load().get(&added).is_none());
        let r = node.call(&format!("{server}__add_tool"), json!({})).await;
        assert_eq!(r["output"], json!("added"), "{r}");
        eventually("the new tool is in the registry", async || {
            node.state.registry.load().get(&added).is_some()
        })
        .await;
        assert_ne!(node.state.registry.load().version, before);
        let r = node.call(&added, json!({})).await;
        assert_eq!(r["output"], json!("new"), "{r}");
    }
    node.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_session_is_reinitialised_transparently() {
    let legacy = HttpFixture::start(&["--legacy", "--idle-timeout", "1"]).await;
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "mcp.toml",
        &format!("[[mcp]]\nname = \"old\"\nurl = \"{}\"\n", legacy.url),
    );
    let node = Node::start(dir.path()).await;
    let r = node.call("old__echo", json!({"text": "one"})).await;
    assert_eq!(r["output"], json!("one"), "{r}");
    // The server forgets the idle session; the next call meets a 404 and re-initialises.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let r = node.call("old__echo", json!({"text": "two"})).await;
    assert_eq!(r["output"], json!("two"), "{r}");
    assert_eq!(r["attempts"], json!(1), "{r}");
    node.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floods_and_huge_results_stay_bounded() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "mcp.toml",
        &stdio_entry(
            "fx",
            &[],
            "max_output_bytes = 10000\nmax_read_bytes = 100000\ntimeout = \"5s\"\nretry = { max_attempts = 1 }",
        ),
    );
    let node = Node::start(dir.path()).await;
    let r = node.call("fx__flood", json!({"n": 3000})).await;
    assert_eq!(r["output"], json!("sent 3000"), "{r}");
    // 10 MB of text: read up to max_read_bytes, shown up to max_output_bytes.
    let r = node.call("fx__huge", json!({"mb": 10})).await;
    assert_eq!(r["ok"], json!(true), "{r}");
    assert_eq!(r["truncated"], json!(true), "{r}");
    assert!(r["output"].as_str().unwrap().len() <= 10_000);
    let r = node.call("fx__echo", json!({"text": "fine"})).await;
    assert_eq!(r["output"], json!("fine"), "{r}");
    // A message over the 16 MiB cap is dropped unread: the call ends at its timeout and the
    // connection serves on.
    let r = node.call("fx__huge", json!({"mb": 20})).await;
    assert_error(&r, "timeout", true, 1);
    let r = node.call("fx__echo", json!({"text": "after the giant"})).await;
    assert_eq!(r["output"], json!("after the giant"), "{r}");
    node.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn colliding_names_are_reported_and_the_native_tool_wins() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "mcp.toml",
        &format!(
            "{}\n[[tools]]\nname = \"fx__echo\"\ndescription = \"native\"\nexec = {{ command = [\"echo\", \"native\"] }}\n",
            stdio_entry("fx", &[], "")
        ),
    );
    let node = Node::start(dir.path()).await;
    let reg = node.state.registry.load();
    assert_eq!(reg.get("fx__echo").unwrap().backend.kind(), "exec");
    assert!(
        reg.warnings.iter().any(|w| w.message.contains("maps to `fx__echo`")),
        "{:?}",
        reg.warnings
    );
    assert!(reg.get("fx__fail").is_some(), "the rest of the server's tools load");
    drop(reg);
    node.shut_down().await;
}

#[test]
fn mcp_entries_are_checked_like_tools() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "bad.toml",
        "[[mcp]]\nname = \"a b\"\ncommand = [\"x\"]\nurl = \"http://127.0.0.1/mcp\"\ntimout = \"1s\"\n\n[[mcp]]\nname = \"ok\"\nurl = \"ftp://x\"\n",
    );
    let err = toolwire::registry::Registry::load(dir.path(), &config_for(dir.path()).defaults).unwrap_err();
    let text: Vec<String> = err.iter().map(ToString::to_string).collect();
    let all = text.join("\n");
    assert!(all.contains("did you mean `timeout`"), "{all}");
    assert!(all.contains("not a valid MCP server name"), "{all}");
    assert!(all.contains("both `command` and `url`"), "{all}");
    assert!(all.contains("http:// or https://"), "{all}");
}

#[test]
fn toolwire_check_lists_the_servers_tools() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "mcp.toml", &stdio_entry("fx", &[], ""));
    let out = std::process::Command::new(crate::common::binary::toolwire_bin())
        .args(["check", "--json", "--tools-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["tools"].as_array().unwrap().contains(&json!("fx__echo")), "{v}");
    assert_eq!(v["mcp"][0]["state"], "connected", "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_written_server_that_breaks_the_wire_rules() {
    let dir = tempfile::tempdir().unwrap();
    let raw = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/mcp/raw_server.py")
        .display()
        .to_string();
    let cmd = serde_json::to_string(&[python().display().to_string(), raw]).unwrap();
    write(
        dir.path(),
        "mcp.toml",
        &format!("[[mcp]]\nname = \"raw\"\ncommand = {cmd}\ntimeout = \"2s\"\nretry = {{ max_attempts = 1 }}\n"),
    );
    let node = Node::start(dir.path()).await;
    assert_eq!(
        node.server_status("raw").protocol_version.as_deref(),
        Some("2025-06-18")
    );
    let reg = node.state.registry.load();
    // Both pages; names mapped to the portable pattern; the long one cut with a hash suffix.
    assert!(reg.get("raw__echo").is_some());
    assert!(reg.get("raw__read_file_v2").is_some());
    let long: Vec<&str> = reg
        .tools()
        .iter()
        .map(|t| t.name.as_str())
        .filter(|n| n.starts_with("raw__xxxx"))
        .collect();
    assert_eq!(long.len(), 1, "{long:?}");
    assert_eq!(long[0].len(), 64);
    assert!(toolwire::tool_name::ToolName::is_valid(long[0]));
    // `a.b` and `a_b` both map to `raw__a_b`: the first stays, the second is reported.
    assert!(reg.get("raw__a_b").is_some());
    assert!(
        reg.warnings.iter().any(|w| w.message.contains("maps to `raw__a_b`")),
        "{:?}",
        reg.warnings
    );
    drop(reg);
    // Garbage lines, a stray response and a notification flood before the answer.
    for i in 0..3 {
        let r = node
            .call("raw__echo", json!({"text": format!("through the noise {i}")}))
            .await;
        assert_eq!(r["output"], json!(format!("through the noise {i}")), "{r}");
    }
    // A request that never gets an answer ends at its timeout; the server still serves.
    let r = node.call("raw__silent", json!({})).await;
    assert_error(&r, "timeout", true, 1);
    let r = node.call("raw__echo", json!({"text": "still"})).await;
    assert_eq!(r["output"], json!("still"), "{r}");
    node.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_egress_policy_applies_to_http_servers() {
    let modern = HttpFixture::start(&[]).await;
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "mcp.toml",
        &format!("[[mcp]]\nname = \"web\"\nurl = \"{}\"\n", modern.url),
    );
    let mut config = config_for(dir.path());
    config.egress.deny = vec!["127.0.0.0/8".into()];
    let node = Node::start_config(config).await;
    let st = node.server_status("web");
    assert_eq!(st.state, "failing", "{st:?}");
    assert!(
        st.last_error.as_deref().unwrap_or("").contains("egress policy"),
        "{st:?}"
    );
    assert!(node.state.registry.load().get("web__echo").is_none());
    node.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_server_is_stopped_and_reaped_on_reload() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "mcp.toml", &stdio_entry("fx", &[], "kill_grace = \"1s\""));
    let node = Node::start(dir.path()).await;
    let r = node.call("fx__pid", json!({})).await;
    let pid: i32 = r["output"].as_str().unwrap().parse().unwrap();
    let alive = |pid: i32| {
        // A zombie would still have a /proc entry in state Z: count it as alive.
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok()
    };
    assert!(alive(pid));
    write(dir.path(), "mcp.toml", "tools = []\n");
    let reloaded = toolwire::reload::reload_now(&node.state.reloader).await;
    assert!(
        matches!(reloaded, toolwire::reload::Reloaded::Swapped { .. }),
        "{reloaded:?}"
    );
    assert!(node.state.registry.load().get("fx__echo").is_none());
    assert!(node.hub.status().is_empty());
    eventually("the server process is gone and reaped", async || !alive(pid)).await;
    node.shut_down().await;
}

/// Processes whose command line holds `marker`.
fn processes_with(marker: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().chars().all(|c| c.is_ascii_digit()))
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(marker))
                .unwrap_or(false)
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_the_handshake_is_bounded_and_cleaned_up() {
    // (That it delays no other server is `one_broken_server_never_takes_the_others_down`.)
    let dir = tempfile::tempdir().unwrap();
    // A unique duration marks this test's children.
    let marker = format!("3599.{}", std::process::id());
    write(
        dir.path(),
        "mcp.toml",
        &format!("[[mcp]]\nname = \"mute\"\ncommand = [\"sleep\", \"{marker}\"]\nkill_grace = \"200ms\"\n"),
    );
    let mut config = config_for(dir.path());
    config.reload.debounce = toolwire::config::HumanDuration(Duration::from_millis(50));
    let executor = Executor::new(&config).unwrap();
    let settings = HubSettings {
        connect_timeout: Duration::from_secs(2),
        ..fast_settings()
    };
    let hub = McpHub::from_config_with(&config, executor.exec_context(), settings).unwrap();
    let registry = toolwire::mcp::load_registry(&config.tools_dir, &config.defaults, &hub)
        .await
        .unwrap();
    // The load went on without it; its state says why it has no tools.
    assert!(registry.is_empty());
    let mute = hub.status().into_iter().find(|s| s.name == "mute").unwrap();
    assert_eq!(mute.state, "failing", "{mute:?}");
    assert!(
        mute.last_error
            .as_deref()
            .unwrap_or("")
            .contains("no answer to the MCP handshake"),
        "{mute:?}"
    );
    hub.shut_down().await;
    eventually("every `sleep` child is gone", async || processes_with(&marker) == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_comes_up_after_the_load_joins_the_set() {
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "mcp.toml",
        &format!("[[mcp]]\nname = \"late\"\nurl = \"http://127.0.0.1:{port}/mcp\"\n"),
    );
    let node = Node::start(dir.path()).await;
    assert_eq!(node.server_status("late").state, "failing");
    let r = node.call("late__echo", json!({"text": "x"})).await;
    assert_error(&r, "unknown_tool", false, 0);
    let _server = HttpFixture::start_on(port, &[]).await;
    eventually("its tools are swapped in", async || {
        node.state.registry.load().get("late__echo").is_some()
    })
    .await;
    let r = node.call("late__echo", json!({"text": "made it"})).await;
    assert_eq!(r["output"], json!("made it"), "{r}");
    node.shut_down().await;
}
