//! Issue 10 "Safe by default", secrets and observability (docs/security.md §7, §8, §10, §11,
//! "Log forging", "File secrets"), each through the real server: in-process (`Served`) or the
//! real binary (SIGHUP, logs).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::binary::Binary;
use crate::common::invariants::{Fixture, kind, results};
use crate::common::logs;
use crate::common::mock_backend::MockBackend;
use crate::common::server::{Opts, Served, openai};
use base64::Engine as _;
use nix::sys::signal::Signal;
use serde_json::{Value, json};
use toolwire::config::HumanDuration;
use toolwire::reload::{Reloaded, reload_now};

/// How long a reload may take to land on a loaded machine (a bound on waiting, not a claim).
const SETTLE: Duration = Duration::from_secs(10);

/// An exec tool running `sh -c SCRIPT` with text output; the fixture's secret is `$TW_SECRET`.
fn sh_tool(fx: &Fixture, name: &str, script: &str, extra: Value) -> Value {
    fx.exec_tool(
        name,
        json!({"command": ["/bin/sh", "-c", script], "output": "text"}),
        extra,
    )
}

async fn poll<T>(what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(start.elapsed() < SETTLE, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---- 7. Secrets in diagnostics ----------------------------------------------------------

/// A typo next to a `${file:}` value: the rejected reload's diagnostics quote the reference,
/// `/readyz` (unauthenticated) shows counts only, and neither it, `/v1/tools` nor the logs carry
/// the resolved value.
#[tokio::test]
async fn diagnostics_never_show_resolved_secrets() {
    let fx = Fixture::new().await;
    let mark = logs::mark();
    fx.write_tools(
        "a.json",
        &json!([fx.http_tool("one", json!({"url": "http://127.0.0.1:9/x"}), json!({}))]),
    );
    let server = Served::start(fx.config()).await;
    // Two typos that make the checks quote a resolved value: a string where a number belongs
    // (serde quotes it) and an unsupported method (the check quotes it).
    let mut bad1 = fx.http_tool("two", json!({"url": "http://127.0.0.1:9/y"}), json!({}));
    bad1["retry"] = json!({"max_attempts": "${file:secret.txt}"});
    let mut bad2 = fx.http_tool("three", json!({"url": "http://127.0.0.1:9/z"}), json!({}));
    bad2["http"]["method"] = json!("${file:secret.txt}");
    fx.write_tools("b.json", &json!([bad1, bad2]));
    let out = reload_now(&server.state.reloader).await;
    assert!(matches!(out, Reloaded::Rejected { errors } if errors >= 2), "{out:?}");

    let ready = server.get("/readyz").await;
    assert_eq!(ready.status, 200);
    let text = ready.body.to_string();
    assert!(!text.contains(&fx.secret), "/readyz leaks the secret: {text}");
    assert_eq!(ready.body["reload"]["status"], "rejected", "{text}");
    assert!(ready.body["reload"]["errors"].as_u64().unwrap() >= 2, "{text}");
    assert!(
        ready.body["reload"].get("last_error").is_none(),
        "no messages on /readyz: {text}"
    );
    assert!(!text.contains("b.json"), "no messages on /readyz: {text}");

    let tools = server.get("/v1/tools").await.body;
    let errors = tools["reload"]["last_error"].to_string();
    assert!(!errors.contains(&fx.secret), "/v1/tools leaks the secret: {errors}");
    assert!(
        errors.contains("${file:secret.txt}"),
        "the diagnostic quotes the reference: {errors}"
    );
    assert!(
        errors.contains("max_attempts") && errors.contains("http.method"),
        "{errors}"
    );

    let logged = logs::since(mark);
    assert!(logged.contains("Reload rejected"), "{logged}");
    assert!(!logged.contains(&fx.secret), "the logs leak the secret");
    server.stop().await;
    fx.finish().await;
}

// ---- 8. Redaction gaps --------------------------------------------------------------------

/// A backend that echoes its request (headers, query) sends the secret back in a *successful*
/// output: masked, raw and percent-encoded, in string leaves and in keys.
#[tokio::test]
async fn successful_outputs_mask_echoed_secrets_and_encodings() {
    let fx = Fixture::new().await;
    let mock = MockBackend::start().await;
    let special = "p@ss w0rd/+=&tok3n*~x";
    std::fs::write(fx.tools.join("special.txt"), special).unwrap();
    let echo = fx.http_tool(
        "echo",
        json!({"url": mock.url("/ok"), "query": {"k": "${file:special.txt}"},
               "headers": {"X-Other": "${file:special.txt}"}}),
        json!({}),
    );
    fx.write_tools("a.json", &json!([echo]));
    let server = Served::start(fx.config()).await;
    let a = server
        .execute(&openai(&[("c1", "echo", json!({}))]), &Value::Null)
        .await;
    let r = &results(&a.body, &["c1"])[0];
    assert_eq!(kind(r), "ok", "{r}");
    // The backend really got the secrets (the test would prove nothing otherwise).
    let seen = mock.requests();
    assert_eq!(seen[0].header("x-api-key"), Some(fx.secret.as_str()));
    assert!(
        seen[0].query.as_deref().unwrap_or_default().contains('%'),
        "{:?}",
        seen[0].query
    );
    let out = r["output"].to_string();
    let msgs = a.body["messages"].to_string();
    for text in [&out, &msgs] {
        assert!(!text.contains(&fx.secret), "{text}");
        assert!(!text.contains("tok3n"), "raw or encoded special secret: {text}");
    }
    assert_eq!(r["output"]["headers"]["x-api-key"], "[redacted]", "{out}");
    assert_eq!(r["output"]["query"]["k"], "[redacted]", "{out}");
    server.stop().await;
    drop(mock);
    fx.finish().await;
}

/// base64 forms in a text output (the secret alone, `user:secret`, URL-safe without padding),
/// and a text output cut at `max_read_bytes` in the middle of the secret.
#[tokio::test]
async fn text_outputs_mask_base64_forms_and_a_secret_cut_by_the_read_cap() {
    let fx = Fixture::new().await;
    let b64 = sh_tool(
        &fx,
        "b64",
        r#"printf '%s' "$TW_SECRET" | base64 -w0; echo; printf 'user:%s' "$TW_SECRET" | base64 -w0; echo; printf 'ab%s' "$TW_SECRET" | base64 -w0 | tr '+/' '-_' | tr -d '='"#,
        json!({}),
    );
    // 100 bytes of padding, then the secret: a cap of 110 cuts it after 10 bytes.
    let cut = sh_tool(
        &fx,
        "cut",
        r#"printf '%0100d%s tail' 0 "$TW_SECRET""#,
        json!({"max_read_bytes": 110}),
    );
    fx.write_tools("a.json", &json!([b64, cut]));
    let server = Served::start(fx.config()).await;
    let a = server
        .execute(
            &openai(&[("c1", "b64", json!({})), ("c2", "cut", json!({}))]),
            &Value::Null,
        )
        .await;
    let rs = results(&a.body, &["c1", "c2"]);
    assert_eq!(kind(&rs[0]), "ok", "{}", rs[0]);
    let out = rs[0]["output"].as_str().unwrap();
    let std = base64::engine::general_purpose::STANDARD;
    let encoded = [
        std.encode(&fx.secret),
        std.encode(format!("user:{}", fx.secret)),
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("ab{}", fx.secret)),
    ];
    for e in &encoded {
        // The middle of each encoding depends on the secret alone: it must be gone.
        let mid = &e[e.len() / 2 - 4..e.len() / 2 + 4];
        assert!(!out.contains(mid), "base64 form {e} survives in {out}");
    }
    assert_eq!(out.matches("[redacted]").count(), 3, "{out}");

    assert_eq!(kind(&rs[1]), "ok", "{}", rs[1]);
    assert_eq!(rs[1]["truncated"], true, "{}", rs[1]);
    let cut_out = rs[1]["output"].as_str().unwrap();
    assert!(
        !cut_out.contains(&fx.secret[..8]),
        "the cut secret's start leaks: {cut_out}"
    );
    assert!(cut_out.contains("[redacted]"), "{cut_out}");
    server.stop().await;
    fx.finish().await;
}

/// A secret that straddles the 512-byte body excerpt of a failed HTTP call, and the start of
/// the 2 KiB stderr tail of a failed program: masked whole (redacted before the cut).
#[tokio::test]
async fn secrets_straddling_the_excerpt_and_stderr_cuts_are_masked() {
    let fx = Fixture::new().await;
    let mock = MockBackend::start().await;
    // The error body is 500 `x`, then the secret: the excerpt's 512 bytes end inside it.
    let pad = "x".repeat(500);
    let status = fx.http_tool(
        "status",
        json!({"url": mock.url("/status/400"), "query": {"body": format!("{pad}${{file:secret.txt}}")}}),
        json!({"retry": {"max_attempts": 1}}),
    );
    // stderr: the secret, then 2040 bytes: the 2 KiB tail starts inside it.
    let stderr = sh_tool(
        &fx,
        "stderr",
        r#"printf '%s%02040d' "$TW_SECRET" 0 >&2; exit 3"#,
        json!({}),
    );
    fx.write_tools("a.json", &json!([status, stderr]));
    let server = Served::start(fx.config()).await;
    let a = server
        .execute(
            &openai(&[("c1", "status", json!({})), ("c2", "stderr", json!({}))]),
            &Value::Null,
        )
        .await;
    let rs = results(&a.body, &["c1", "c2"]);
    assert_eq!(kind(&rs[0]), "backend_status", "{}", rs[0]);
    let m1 = rs[0]["error"]["message"].as_str().unwrap();
    assert!(m1.contains("xxxxxxxx"), "the excerpt is there: {m1}");
    assert!(
        !m1.contains(&fx.secret[..8]),
        "the excerpt leaks the secret's start: {m1}"
    );
    assert_eq!(kind(&rs[1]), "nonzero_exit", "{}", rs[1]);
    let m2 = rs[1]["error"]["message"].as_str().unwrap();
    let tail_of_secret = &fx.secret[fx.secret.len() - 8..];
    assert!(m2.contains("0000000"), "the tail is there: {m2}");
    assert!(
        !m2.contains(tail_of_secret),
        "the stderr tail leaks the secret's end: {m2}"
    );
    server.stop().await;
    drop(mock);
    fx.finish().await;
}

// ---- 10. Metric label cardinality ---------------------------------------------------------

/// Model-chosen tool names and client-chosen HTTP methods never become label values; a call
/// whose name is outside `^[a-zA-Z0-9_-]{1,64}$` gets an `unknown_tool` result (the request
/// still answers every call) that does not echo the name.
#[tokio::test]
async fn metric_labels_stay_bounded() {
    let fx = Fixture::new().await;
    fx.write_tools(
        "a.json",
        &json!([fx.http_tool("one", json!({"url": "http://127.0.0.1:9/x"}), json!({}))]),
    );
    let server = Served::start(fx.config()).await;
    let long = "n".repeat(65);
    let weird = "bad name\n\u{1b}[31mINJECTED";
    let made_up = "made_up_tool_7f3a";
    let a = server
        .execute(
            &openai(&[
                ("c1", made_up, json!({})),
                ("c2", weird, json!({})),
                ("c3", &long, json!({})),
            ]),
            &Value::Null,
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let rs = results(&a.body, &["c1", "c2", "c3"]);
    for r in &rs {
        assert_eq!(kind(r), "unknown_tool", "{r}");
    }
    for r in &rs[1..] {
        let m = r["error"]["message"].as_str().unwrap();
        assert!(
            m.contains("not valid") && !m.contains("INJECTED") && !m.contains(&long),
            "{m}"
        );
    }
    assert_eq!(
        a.body["messages"].as_array().unwrap().len(),
        3,
        "every call is answered"
    );

    let method = reqwest::Method::from_bytes(b"FOOBAR123").unwrap();
    let _ = server
        .client
        .request(method, format!("{}/healthz", server.base))
        .send()
        .await
        .unwrap();
    let _ = server.get("/no/such/path/zq9").await;

    let metrics = server
        .client
        .get(format!("{}/metrics", server.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains(r#"tool="_unknown""#), "{metrics}");
    for leaked in [made_up, "INJECTED", long.as_str(), "FOOBAR123", "zq9"] {
        assert!(!metrics.contains(leaked), "`{leaked}` became a label");
    }
    assert!(metrics.contains(r#"method="other""#), "{metrics}");
    server.stop().await;
    fx.finish().await;
}

// ---- 11. Secret rotation ------------------------------------------------------------------

/// The secret `one` sends to the mock, as the mock saw it on its last request.
async fn sent_secret(mock: &MockBackend, call: impl AsyncFnOnce()) -> String {
    mock.reset_records();
    call().await;
    let reqs = mock.requests();
    reqs.last()
        .and_then(|r| r.header("x-api-key"))
        .unwrap_or_default()
        .to_owned()
}

/// A rotated `${file:}` secret is swapped in by SIGHUP (the real binary): the version covers
/// the resolved values.
#[tokio::test]
async fn sighup_picks_up_a_rotated_file_secret() {
    let fx = Fixture::new().await;
    let mock = MockBackend::start().await;
    fx.write_tools(
        "a.json",
        &json!([fx.http_tool("one", json!({"url": mock.url("/ok")}), json!({}))]),
    );
    let config = fx.dir.path().join("toolwire.toml");
    std::fs::write(&config, "[reload]\nwatch = false\n").unwrap();
    let bin = Binary::start(&config, &fx.tools);
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let version = async || -> String {
        let v: Value = client
            .get(bin.url("/readyz"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v["version"].as_str().unwrap().to_owned()
    };
    // A fresh call id each time: a repeated one would be answered from the replay store.
    let call = async || {
        let id = format!("c{}", rand::random::<u32>());
        let body = json!({"provider": "openai_chat", "completion": openai(&[(&id, "one", json!({}))])});
        let r: Value = client
            .post(bin.url("/v1/execute"))
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(kind(&results(&r, &[&id])[0]), "ok", "{r}");
    };
    assert_eq!(sent_secret(&mock, call).await, fx.secret);
    let v0 = version().await;

    let rotated = format!("{}-rotated", fx.secret);
    std::fs::write(fx.tools.join("secret.txt"), format!("{rotated}\n")).unwrap();
    bin.signal(Signal::SIGHUP);
    let v1 = poll("the rotated secret to be swapped in", async || {
        let v = version().await;
        (v != v0).then_some(v)
    })
    .await;
    assert_ne!(v1, v0);
    assert_eq!(sent_secret(&mock, call).await, rotated);
    let mut bin = bin;
    bin.signal(Signal::SIGTERM);
    assert!(bin.wait_exit(Duration::from_secs(10)).unwrap().success());
    let logged = bin.stderr();
    assert!(!logged.contains(&fx.secret), "the logs leak the secret");
    drop(mock);
    fx.finish().await;
}

/// A `${file:}` secret outside the tools directory, mounted like a Kubernetes Secret (the file
/// a symlink through `..data`): the watcher follows its directory and a `..data` swap reloads.
#[tokio::test]
async fn watcher_follows_a_kubernetes_secret_swap() {
    let fx = Fixture::new().await;
    let mock = MockBackend::start().await;
    let mount = fx.dir.path().join("secret-mount");
    std::fs::create_dir(&mount).unwrap();
    let generation = |name: &str, value: &str| {
        std::fs::create_dir(mount.join(name)).unwrap();
        std::fs::write(mount.join(name).join("token"), value).unwrap();
    };
    generation("..2026_01_01_00_00_00.1", "first-token-value-1");
    std::os::unix::fs::symlink("..2026_01_01_00_00_00.1", mount.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/token", mount.join("token")).unwrap();
    let mut t = fx.http_tool("one", json!({"url": mock.url("/ok")}), json!({}));
    t["http"]["headers"]["X-Api-Key"] = json!(format!("${{file:{}}}", mount.join("token").display()));
    fx.write_tools("a.json", &json!([t]));
    let mut cfg = fx.config();
    cfg.reload.watch = true;
    cfg.reload.debounce = HumanDuration(Duration::from_millis(50));
    let server = Served::start_opts(
        cfg,
        Opts {
            reloader: true,
            ..Opts::default()
        },
    )
    .await;
    // A fresh call id each time: a repeated one would be answered from the replay store.
    let call = async || {
        let id = format!("c{}", rand::random::<u32>());
        let a = server.execute(&openai(&[(&id, "one", json!({}))]), &Value::Null).await;
        assert_eq!(kind(&results(&a.body, &[&id])[0]), "ok", "{}", a.body);
    };
    assert_eq!(sent_secret(&mock, call).await, "first-token-value-1");
    let v0 = server.version();

    // The kubelet's swap: a new generation, a temp symlink, renamed over `..data`.
    generation("..2026_01_01_00_01_00.2", "second-token-value-2");
    std::os::unix::fs::symlink("..2026_01_01_00_01_00.2", mount.join("..data_tmp")).unwrap();
    std::fs::rename(mount.join("..data_tmp"), mount.join("..data")).unwrap();
    std::fs::remove_dir_all(mount.join("..2026_01_01_00_00_00.1")).unwrap();
    poll("the watcher to swap the rotated secret in", async || {
        (server.version() != v0).then_some(())
    })
    .await;
    let tools = server.get("/v1/tools").await.body;
    assert_eq!(
        sent_secret(&mock, call).await,
        "second-token-value-2",
        "{}",
        tools["reload"]
    );
    server.stop().await;
    drop(mock);
    fx.finish().await;
}

// ---- Log forging --------------------------------------------------------------------------

/// In the pretty log format, a call id and a tool name carrying a newline and ANSI escapes do
/// not start a new log line or reach the terminal raw.
#[tokio::test]
async fn pretty_logs_escape_model_controlled_strings() {
    let fx = Fixture::new().await;
    fx.write_tools(
        "a.json",
        &json!([fx.http_tool("one", json!({"url": "http://127.0.0.1:9/x"}), json!({}))]),
    );
    let config = fx.dir.path().join("toolwire.toml");
    std::fs::write(&config, "log = \"info\"\n[reload]\nwatch = false\n").unwrap();
    let bin = Binary::start_format(&config, &fx.tools, "pretty");
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let body = json!({"provider": "openai_chat", "completion": openai(&[
        ("id\nFORGED-ID-LINE \u{1b}[2J", "one", json!({})),
        ("c2", "x\nFORGED-NAME-LINE \u{1b}[31m", json!({})),
    ])});
    let r = client.post(bin.url("/v1/execute")).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    poll("the calls to be logged", async || {
        (bin.stderr().matches("Tool call finished").count() >= 2).then_some(())
    })
    .await;
    let mut bin = bin;
    bin.signal(Signal::SIGTERM);
    assert!(bin.wait_exit(Duration::from_secs(10)).unwrap().success());
    let logged = bin.stderr();
    for line in logged.lines() {
        assert!(!line.starts_with("FORGED"), "a forged log line: {line:?}");
    }
    assert!(!logged.contains('\u{1b}'), "a raw escape sequence reached the log");
    assert!(logged.contains("FORGED-ID-LINE"), "the id is logged, escaped: {logged}");
    fx.finish().await;
}

// ---- File secrets -------------------------------------------------------------------------

/// `${file:}` reads regular files of at most 64 KiB: a FIFO, a directory and an oversized file
/// are clear load errors, and a reload that meets a FIFO does not hang.
#[tokio::test]
async fn file_secrets_must_be_small_regular_files() {
    let fx = Fixture::new().await;
    fx.write_tools(
        "a.json",
        &json!([fx.http_tool("one", json!({"url": "http://127.0.0.1:9/x"}), json!({}))]),
    );
    let server = Served::start(fx.config()).await;
    nix::unistd::mkfifo(&fx.tools.join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    std::fs::create_dir(fx.tools.join("adir")).unwrap();
    std::fs::write(fx.tools.join("big"), "k".repeat(64 * 1024 + 1)).unwrap();
    let cases = [
        ("fifo", "not a regular file"),
        ("adir", "not a regular file"),
        ("big", "larger than 65536 bytes"),
    ];
    for (target, want) in cases {
        let mut t = fx.http_tool("two", json!({"url": "http://127.0.0.1:9/y"}), json!({}));
        t["http"]["headers"]["X-Key"] = json!(format!("${{file:{target}}}"));
        fx.write_tools("b.json", &json!([t]));
        // Generous: a FIFO used to block the reload forever.
        let out = tokio::time::timeout(Duration::from_secs(30), reload_now(&server.state.reloader))
            .await
            .unwrap_or_else(|_| panic!("the reload hangs on `{target}`"));
        assert!(matches!(out, Reloaded::Rejected { .. }), "{target}: {out:?}");
        let errors = server.get("/v1/tools").await.body["reload"]["last_error"].to_string();
        assert!(
            errors.contains(&format!("${{file:{target}}}")) && errors.contains(want),
            "{target}: {errors}"
        );
    }
    assert!(Path::new(&fx.tools.join("fifo")).exists());
    std::fs::remove_file(fx.tools.join("fifo")).unwrap();
    server.stop().await;
    fx.finish().await;
}
