//! Outbound HTTP safety through the real server (issue 10, item 5 and the egress and path
//! placeholder items): TLS to local HTTPS backends with a generated CA (trust via `ca_file`,
//! certificate errors as a non-retryable `tls_error`, mTLS), the built-in egress denies and
//! IPv4-embedding IPv6 literals, and `..` in URL path placeholders.
//!
//! All traffic goes to 127.0.0.1; the blocked destinations are refused before any connect.

use std::path::Path;

use crate::common::mock_backend::MockBackend;
use crate::common::server::config_for;
use crate::common::server::{Served, openai};
use crate::common::tls_backend::{Pki, TlsBackend, answered_path};
use crate::common::tools::{ToolsDir, http_tool, merge};
use serde_json::{Value, json};
use toolwire::config::{Diagnostic, ServerConfig};
use toolwire::registry::Registry;

/// The results of an execute answer, checked to answer `ids` in order.
fn results<'a>(body: &'a Value, ids: &[&str]) -> &'a [Value] {
    let r = body["results"]
        .as_array()
        .unwrap_or_else(|| panic!("no results: {body}"));
    let got: Vec<&str> = r.iter().map(|x| x["id"].as_str().unwrap_or_default()).collect();
    assert_eq!(got, ids, "{body}");
    r
}

/// Asserts a failed result of `kind`; returns its error object.
fn expect_error<'a>(result: &'a Value, kind: &str) -> &'a Value {
    assert_eq!(result["ok"], json!(false), "{result}");
    assert_eq!(result["error"]["kind"], json!(kind), "{result}");
    &result["error"]
}

/// Asserts a successful result; returns its output.
fn expect_ok(result: &Value) -> &Value {
    assert_eq!(result["ok"], json!(true), "{result}");
    &result["output"]
}

/// A GET tool with fast retries (3 attempts, so a retried failure would show).
fn get_tool(name: &str, url: &str, extra: Value) -> Value {
    merge(
        http_tool(name, url),
        merge(json!({"http": {"method": "GET"}, "idempotent": true}), extra),
    )
}

/// Runs one request with these `(id, tool)` calls (no arguments).
async fn run(server: &Served, calls: &[(&str, &str)]) -> Value {
    let calls: Vec<(&str, &str, Value)> = calls.iter().map(|(id, name)| (*id, *name, json!({}))).collect();
    let a = server.execute(&openai(&calls), &Value::Null).await;
    assert_eq!(a.status, 200, "{}", a.body);
    a.body
}

// ---------------------------------------------------------------------------------------------
// 5. TLS

/// An https:// tool whose `tls.ca_file` (relative to the tools file) holds the backend's CA
/// gets its answer; the server-wide `[http_client] ca_file` does the same for every tool.
/// (Before TLS support every https:// call was a retryable `backend_unreachable`.)
#[tokio::test]
async fn https_tools_trust_their_ca_file_and_the_global_one() {
    let pki = Pki::new("toolwire test CA");
    let backend = TlsBackend::start(&pki.server(&["127.0.0.1", "localhost"]), None).await;
    let tools = ToolsDir::new(&[
        get_tool(
            "per_tool",
            &backend.url("/v1/items/{id}"),
            json!({"parameters": {"type": "object", "properties": {"id": {"type": "string"}}},
                       "http": {"tls": {"ca_file": "certs/ca.pem"}}}),
        ),
        get_tool("plain", &backend.url("/plain"), json!({})),
    ]);
    // Relative to the tools file's folder, in a subfolder.
    std::fs::create_dir(tools.path().join("certs")).unwrap();
    tools.write("certs/ca.pem", &pki.ca_pem());
    let server = Served::start(config_for(tools.path())).await;
    let a = server
        .execute(&openai(&[("a", "per_tool", json!({"id": "42"}))]), &Value::Null)
        .await;
    let r = results(&a.body, &["a"]);
    assert_eq!(answered_path(expect_ok(&r[0])), "/v1/items/42");
    assert_eq!(r[0]["attempts"], 1);
    // The shared client does not trust the tool's CA.
    let body = run(&server, &[("p", "plain")]).await;
    let e = expect_error(&results(&body, &["p"])[0], "tls_error");
    assert_eq!(e["retryable"], false);
    server.stop().await;

    // Server-wide: the same tool without its own settings now works.
    let ca = tools.path().join("certs/ca.pem");
    let mut cfg = config_for(tools.path());
    cfg.http_client.ca_file = Some(ca);
    let server = Served::start(cfg).await;
    let body = run(&server, &[("p", "plain")]).await;
    assert_eq!(answered_path(expect_ok(&results(&body, &["p"])[0])), "/plain");
    server.stop().await;
}

/// A backend whose certificate no trusted CA signed is a `tls_error`: not retryable, tried
/// once (one TCP connection although the tool is idempotent with 3 attempts), the message names
/// the certificate problem, and it does not open the circuit breaker (which would turn it into
/// a retryable `backend_unavailable`).
#[tokio::test]
async fn unknown_ca_is_a_non_retryable_tls_error_and_not_a_breaker_failure() {
    let pki = Pki::new("untrusted CA");
    let backend = TlsBackend::start(&pki.server(&["127.0.0.1"]), None).await;
    let tools = ToolsDir::new(&[get_tool("t", &backend.url("/x"), json!({}))]);
    let mut cfg = config_for(tools.path());
    cfg.breaker.failures = 2;
    cfg.replay.enabled = false;
    let server = Served::start(cfg).await;
    for round in 1..=3 {
        let body = run(&server, &[("c", "t")]).await;
        let r = &results(&body, &["c"])[0];
        let e = expect_error(r, "tls_error");
        assert_eq!(e["retryable"], false, "{r}");
        assert_eq!(r["attempts"], 1, "a certificate error is not retried: {r}");
        let msg = e["message"].as_str().unwrap();
        assert!(msg.contains("certificate") && msg.contains("UnknownIssuer"), "{msg}");
        assert_eq!(backend.connections(), round, "one handshake per call");
    }
    assert!(backend.seen().is_empty(), "no request got through");
    server.stop().await;
}

/// A trusted certificate for another name is a `tls_error` naming the mismatch.
#[tokio::test]
async fn wrong_host_name_is_a_tls_error() {
    let pki = Pki::new("toolwire test CA");
    let backend = TlsBackend::start(&pki.server(&["other.example"]), None).await;
    let tools = ToolsDir::with_files(
        &[("ca.pem", &pki.ca_pem())],
        &[get_tool(
            "t",
            &backend.url("/x"),
            json!({"http": {"tls": {"ca_file": "ca.pem"}}}),
        )],
    );
    let server = Served::start(config_for(tools.path())).await;
    let body = run(&server, &[("c", "t")]).await;
    let r = &results(&body, &["c"])[0];
    let e = expect_error(r, "tls_error");
    assert_eq!(e["retryable"], false);
    assert_eq!(r["attempts"], 1);
    let msg = e["message"].as_str().unwrap();
    assert!(msg.contains("not valid for name"), "{msg}");
    assert_eq!(backend.connections(), 1);
    assert!(backend.seen().is_empty());
    server.stop().await;
}

/// A backend that requires a client certificate: without one the call is a `tls_error`; with
/// the tool's own `client_cert`/`client_key` it succeeds and the backend saw that certificate;
/// the server-wide pair works for tools without their own, and a tool's own pair wins.
#[tokio::test]
async fn mtls_needs_the_client_certificate() {
    let pki = Pki::new("toolwire test CA");
    let clients = Pki::new("toolwire client CA");
    let backend = TlsBackend::start(&pki.server(&["127.0.0.1"]), Some(&clients)).await;
    let tool_pair = clients.client("tool-client");
    let global_pair = clients.client("global-client");
    let stranger = Pki::new("someone else").client("stranger");
    let tools = ToolsDir::with_files(
        &[
            ("ca.pem", &pki.ca_pem()),
            ("tool.crt", &tool_pair.cert_pem),
            ("tool.key", &tool_pair.key_pem),
            ("stranger.crt", &stranger.cert_pem),
            ("stranger.key", &stranger.key_pem),
        ],
        &[
            get_tool(
                "no_cert",
                &backend.url("/none"),
                json!({"http": {"tls": {"ca_file": "ca.pem"}}}),
            ),
            get_tool(
                "own_cert",
                &backend.url("/own"),
                json!({"http": {"tls": {"ca_file": "ca.pem", "client_cert": "tool.crt", "client_key": "tool.key"}}}),
            ),
            get_tool(
                "wrong_cert",
                &backend.url("/wrong"),
                json!({"http": {"tls": {"ca_file": "ca.pem", "client_cert": "stranger.crt", "client_key": "stranger.key"}}}),
            ),
            get_tool("global_cert", &backend.url("/global"), json!({})),
        ],
    );
    let server = Served::start(config_for(tools.path())).await;
    let body = run(&server, &[("n", "no_cert"), ("o", "own_cert"), ("w", "wrong_cert")]).await;
    let r = results(&body, &["n", "o", "w"]);
    for failed in [&r[0], &r[2]] {
        let e = expect_error(failed, "tls_error");
        assert_eq!(e["retryable"], false, "{failed}");
        assert_eq!(failed["attempts"], 1, "{failed}");
    }
    let out = expect_ok(&r[1]);
    assert_eq!(out["client_cn"], "tool-client", "{out}");
    let seen = backend.seen();
    assert_eq!(
        seen.len(),
        1,
        "only the call with a valid certificate got through: {seen:?}"
    );
    assert_eq!(seen[0].path, "/own");
    assert_eq!(seen[0].client_cn.as_deref(), Some("tool-client"));
    server.stop().await;

    // Server-wide client certificate and CA.
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, pem: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, pem).unwrap();
        p
    };
    let mut cfg = config_for(tools.path());
    cfg.http_client.ca_file = Some(write("ca.pem", &pki.ca_pem()));
    cfg.http_client.client_cert = Some(write("global.crt", &global_pair.cert_pem));
    cfg.http_client.client_key = Some(write("global.key", &global_pair.key_pem));
    let server = Served::start(cfg).await;
    let body = run(&server, &[("g", "global_cert"), ("o", "own_cert")]).await;
    let r = results(&body, &["g", "o"]);
    assert_eq!(expect_ok(&r[0])["client_cn"], "global-client");
    assert_eq!(expect_ok(&r[1])["client_cn"], "tool-client", "the tool's own pair wins");
    server.stop().await;
}

/// Per-tool TLS settings stay with their tool: two backends with different CAs, each trusted by
/// one tool, and a tool without settings (the shared client) trusted by neither, in one request.
#[tokio::test]
async fn per_tool_tls_settings_do_not_leak_between_tools() {
    let (pki_a, pki_b) = (Pki::new("CA A"), Pki::new("CA B"));
    let a = TlsBackend::start(&pki_a.server(&["127.0.0.1"]), None).await;
    let b = TlsBackend::start(&pki_b.server(&["127.0.0.1"]), None).await;
    let tools = ToolsDir::with_files(
        &[("a.pem", &pki_a.ca_pem()), ("b.pem", &pki_b.ca_pem())],
        &[
            get_tool("to_a", &a.url("/a"), json!({"http": {"tls": {"ca_file": "a.pem"}}})),
            get_tool("to_b", &b.url("/b"), json!({"http": {"tls": {"ca_file": "b.pem"}}})),
            get_tool(
                "a_with_b",
                &a.url("/ab"),
                json!({"http": {"tls": {"ca_file": "b.pem"}}}),
            ),
            get_tool("shared", &a.url("/s"), json!({})),
        ],
    );
    let mut cfg = config_for(tools.path());
    cfg.replay.enabled = false;
    let server = Served::start(cfg).await;
    for _ in 0..2 {
        let body = run(
            &server,
            &[("1", "to_a"), ("2", "to_b"), ("3", "a_with_b"), ("4", "shared")],
        )
        .await;
        let r = results(&body, &["1", "2", "3", "4"]);
        assert_eq!(answered_path(expect_ok(&r[0])), "/a");
        assert_eq!(answered_path(expect_ok(&r[1])), "/b");
        expect_error(&r[2], "tls_error");
        expect_error(&r[3], "tls_error");
    }
    server.stop().await;
}

/// An https:// URL pointing at a plain-HTTP port is a configuration error too: `tls_error`,
/// tried once, and the plain backend never sees a request.
#[tokio::test]
async fn https_to_a_plain_http_port_is_a_tls_error() {
    let mock = MockBackend::start().await;
    let url = mock.url("/ok").replacen("http://", "https://", 1);
    let tools = ToolsDir::new(&[get_tool("t", &url, json!({}))]);
    let server = Served::start(config_for(tools.path())).await;
    let body = run(&server, &[("c", "t")]).await;
    let r = &results(&body, &["c"])[0];
    let e = expect_error(r, "tls_error");
    assert_eq!(e["retryable"], false);
    assert_eq!(r["attempts"], 1);
    assert!(mock.requests().is_empty(), "{:?}", mock.requests());
    server.stop().await;
}

/// The tool set as `toolwire serve` would load it, expected to fail.
fn load_errors(dir: &Path) -> Vec<Diagnostic> {
    let defaults = ServerConfig::from_figment(ServerConfig::figment_without_env(None).unwrap())
        .unwrap()
        .defaults;
    Registry::load(dir, &defaults).expect_err("the tool set must be refused")
}

fn has_error(errs: &[Diagnostic], path: &str, needle: &str) -> bool {
    errs.iter()
        .any(|d| d.is_error() && d.path == path && d.message.contains(needle))
}

/// Unreadable files, files without PEM certificates or keys, a key that does not match its
/// certificate, half a client pair, and TLS settings on an http:// URL are load errors with
/// the tool's key path; nothing is left for the first call to discover.
#[tokio::test]
async fn bad_tool_tls_files_are_load_errors() {
    let pki = Pki::new("toolwire test CA");
    let (one, two) = (pki.client("one"), pki.client("two"));
    let tls = |v: Value| get_tool("t", "https://127.0.0.1:9/x", json!({"http": {"tls": v}}));
    let cases: Vec<(Value, &str, &str)> = vec![
        (
            json!({"ca_file": "missing.pem"}),
            "tools[0].http.tls.ca_file",
            "cannot read",
        ),
        (
            json!({"ca_file": "garbage.pem"}),
            "tools[0].http.tls.ca_file",
            "no PEM certificate",
        ),
        (
            json!({"ca_file": "one.key"}),
            "tools[0].http.tls.ca_file",
            "no PEM certificate",
        ),
        (
            json!({"client_cert": "one.crt", "client_key": "two.key"}),
            "tools[0].http.tls.client_key",
            "cannot be used with the certificate",
        ),
        (
            json!({"client_cert": "one.crt", "client_key": "garbage.pem"}),
            "tools[0].http.tls.client_key",
            "no usable PEM private key",
        ),
        (
            json!({"client_cert": "one.crt"}),
            "tools[0].http.tls.client_key",
            "`client_key` is not",
        ),
        (
            json!({"client_key": "one.key"}),
            "tools[0].http.tls.client_cert",
            "`client_cert` is not",
        ),
        (
            json!({"ca_file": ""}),
            "tools[0].http.tls.ca_file",
            "must name a PEM file",
        ),
    ];
    let files = [
        ("garbage.pem", "not a certificate\n".to_owned()),
        ("one.crt", one.cert_pem.clone()),
        ("one.key", one.key_pem),
        ("two.key", two.key_pem),
    ];
    let files: Vec<(&str, &str)> = files.iter().map(|(n, c)| (*n, c.as_str())).collect();
    for (settings, path, needle) in cases {
        let dir = ToolsDir::with_files(&files, &[tls(settings.clone())]);
        let errs = load_errors(dir.path());
        assert!(has_error(&errs, path, needle), "{settings}: {errs:#?}");
    }
    // TLS settings need an https:// URL.
    let dir = ToolsDir::with_files(
        &files,
        &[get_tool(
            "t",
            "http://127.0.0.1:9/x",
            json!({"http": {"tls": {"ca_file": "one.crt"}}}),
        )],
    );
    let errs = load_errors(dir.path());
    assert!(has_error(&errs, "tools[0].http.tls", "https://"), "{errs:#?}");
    // Unknown keys under `tls` get a suggestion.
    let dir = ToolsDir::with_files(&files, &[tls(json!({"ca_fiel": "one.crt"}))]);
    let errs = load_errors(dir.path());
    assert!(errs.iter().any(|d| d.message.contains("ca_file")), "{errs:#?}");
}

/// Bad server-wide TLS files stop the server from starting, naming the `http_client` key.
#[tokio::test]
async fn bad_global_tls_files_stop_the_server() {
    let tools = ToolsDir::new(&[]);
    let garbage = tools.write("garbage.pem", "nothing here\n");
    let mut cfg = config_for(tools.path());
    cfg.http_client.ca_file = Some(garbage.clone());
    let err = toolwire::executor::Executor::new(&cfg)
        .err()
        .expect("refused")
        .to_string();
    assert!(
        err.contains("http_client.ca_file") && err.contains("no PEM certificate"),
        "{err}"
    );
    let mut cfg = config_for(tools.path());
    cfg.http_client.client_cert = Some(garbage);
    let err = toolwire::executor::Executor::new(&cfg)
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("http_client.client_key"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// Egress

/// Tool URLs with IPv6 literals that carry a denied IPv4 address (IPv4-mapped,
/// IPv4-compatible, NAT64 well-known and local-use, 6to4) and "this network" addresses
/// (`0.0.0.0/8`) are `blocked` before anything is sent; `0.0.0.0` would reach a local listener.
#[tokio::test]
async fn embedded_ipv4_and_this_network_literals_are_blocked() {
    let mock = MockBackend::start().await;
    let port = mock.addr.port();
    let urls = [
        "http://[64:ff9b::a9fe:a9fe]/latest/meta-data/".to_owned(),
        "http://[64:ff9b:1:a9fe:a9:fe00::]/latest/meta-data/".to_owned(),
        "http://[::ffff:169.254.169.254]/latest/meta-data/".to_owned(),
        "http://[::169.254.169.254]/latest/meta-data/".to_owned(),
        "http://[2002:a9fe:a9fe::1]/latest/meta-data/".to_owned(),
        "http://[64:ff9b::6464:64c8]/latest/".to_owned(),
        "http://0.1.2.3/x".to_owned(),
        format!("http://0.0.0.0:{port}/ok"),
        format!("http://[::ffff:0.0.0.0]:{port}/ok"),
    ];
    let tools: Vec<Value> = urls
        .iter()
        .enumerate()
        .map(|(i, u)| get_tool(&format!("t{i}"), u, json!({})))
        .collect();
    let dir = ToolsDir::new(&tools);
    let server = Served::start(config_for(dir.path())).await;
    let ids: Vec<String> = (0..urls.len()).map(|i| format!("c{i}")).collect();
    let names: Vec<String> = (0..urls.len()).map(|i| format!("t{i}")).collect();
    let calls: Vec<(&str, &str)> = ids
        .iter()
        .map(String::as_str)
        .zip(names.iter().map(String::as_str))
        .collect();
    let body = run(&server, &calls).await;
    let id_refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    for (r, url) in results(&body, &id_refs).iter().zip(&urls) {
        let e = expect_error(r, "blocked");
        assert_eq!(e["retryable"], false, "{url}: {r}");
        assert_eq!(r["attempts"], 1, "{url}: {r}");
    }
    assert!(mock.requests().is_empty(), "nothing reached the local listener");
    server.stop().await;
}

/// A user `egress.deny` adds to the built-in denies instead of replacing them, and
/// `egress.allow` is the explicit opt-out.
#[tokio::test]
async fn user_egress_deny_adds_to_the_builtin_list_and_allow_opts_out() {
    let mock = MockBackend::start().await;
    let port = mock.addr.port();
    let dir = ToolsDir::new(&[
        get_tool("this_network", &format!("http://0.0.0.0:{port}/ok"), json!({})),
        get_tool("metadata", "http://169.254.169.254/latest/meta-data/", json!({})),
        get_tool("loopback", &mock.url("/ok"), json!({})),
    ]);
    let mut cfg = config_for(dir.path());
    cfg.egress.deny = vec!["10.0.0.0/8".into()];
    let server = Served::start(cfg).await;
    let body = run(&server, &[("n", "this_network"), ("m", "metadata"), ("l", "loopback")]).await;
    let r = results(&body, &["n", "m", "l"]);
    expect_error(&r[0], "blocked");
    expect_error(&r[1], "blocked");
    expect_ok(&r[2]);
    assert_eq!(mock.requests().len(), 1, "only the loopback call arrived");
    server.stop().await;

    // The opt-out: allow the built-in-denied 0.0.0.0/8 explicitly.
    let mut cfg = config_for(dir.path());
    cfg.egress.allow = vec!["0.0.0.0/8".into()];
    let server = Served::start(cfg).await;
    let body = run(&server, &[("n", "this_network")]).await;
    expect_ok(&results(&body, &["n"])[0]);
    assert_eq!(mock.requests().len(), 2);
    server.stop().await;
}

// ---------------------------------------------------------------------------------------------
// Path placeholders

/// URL path placeholder values with a `..` segment (plain, backslash, percent-encoded once or
/// twice, or exactly `..`) end as `invalid_arguments` naming the parameter, and the backend
/// never sees them; plain values and query values pass; `allow_path_traversal = true` opts out.
#[tokio::test]
async fn path_traversal_values_never_reach_the_backend() {
    let mock = MockBackend::start().await;
    let params = json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]});
    let dir = ToolsDir::new(&[
        get_tool(
            "read_file",
            &mock.url("/ok/files/{name}/raw?q={name}"),
            json!({"parameters": params}),
        ),
        get_tool(
            "search",
            &mock.url("/ok/search"),
            json!({"parameters": params, "http": {"query": {"q": "{name}"}}}),
        ),
        get_tool(
            "opted_out",
            &mock.url("/ok/any/{name}"),
            json!({"parameters": params, "http": {"allow_path_traversal": true}}),
        ),
    ]);
    let mut cfg = config_for(dir.path());
    cfg.replay.enabled = false;
    let server = Served::start(cfg).await;
    let bad = [
        "../admin",
        "a/../../admin",
        "..\\admin",
        "..%2fadmin",
        "..%2Fadmin",
        "%2e%2e%2fadmin",
        "%252e%252e%252fadmin",
        "..;/admin",
        "..",
    ];
    for value in bad {
        let a = server
            .execute(&openai(&[("c", "read_file", json!({"name": value}))]), &Value::Null)
            .await;
        let r = &results(&a.body, &["c"])[0];
        let e = expect_error(r, "invalid_arguments");
        assert_eq!(e["retryable"], false, "{value}: {r}");
        let msg = e["message"].as_str().unwrap();
        assert!(msg.contains("`name`"), "{value}: {msg}");
    }
    assert!(mock.requests().is_empty(), "{:?}", mock.requests());

    let a = server
        .execute(
            &openai(&[
                ("ok", "read_file", json!({"name": "report..v2.txt"})),
                ("q", "search", json!({"name": "../admin"})),
                ("o", "opted_out", json!({"name": "../admin"})),
            ]),
            &Value::Null,
        )
        .await;
    let r = results(&a.body, &["ok", "q", "o"]);
    for x in r {
        expect_ok(x);
    }
    let mut paths: Vec<String> = mock.requests().iter().map(|r| r.path.clone()).collect();
    paths.sort();
    assert_eq!(
        paths,
        vec!["/ok/any/..%2Fadmin", "/ok/files/report..v2.txt/raw", "/ok/search"],
        "the opted-out value is still encoded into one segment"
    );
    server.stop().await;
}
