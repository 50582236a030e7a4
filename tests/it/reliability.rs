//! The reliability checklist (`docs/reliability.md`) as tests: one test per row of
//! faults F1–F21 and bad inputs B1–B15, named after the row, plus auth and the circuit breaker.
//!
//! Every test runs the real server on 127.0.0.1:0 (in-process, or the real binary where a
//! signal or the subreaper is needed) against real loopback backends and real child processes,
//! asserts the behaviour as built, then the invariants (`crate::common::invariants`):
//! I1 one result per call with ids preserved; I2 no leaked process or zombie and fds back near
//! the baseline; I3 bounded peak RSS (F7, F10); I4 wall time within the budget; I5 neither the
//! fixture's secret nor its canary argument in the logs.
//!
//! Reliability names → ours: `upstream_timeout`/`process_timeout` → `timeout` (with `signal`
//! for processes); `upstream_status`/`upstream_rate_limited` → `backend_status` (`status`,
//! `retry_after_ms`); `upstream_unavailable`/`upstream_reset` → `backend_unreachable`;
//! `process_exit_nonzero`/`process_signaled` → `nonzero_exit` (`exit_code` / `signal`);
//! `ssrf_blocked` → `blocked`; `internal_error` → `internal`; `shutting_down` → `rejected`;
//! `overloaded` → HTTP 503 `overloaded`.
//!
//! Where the build differs from the checklist's wording (asserted as built): F2 has no separate
//! idle-read timeout (the attempt timeout covers headers and body); F13 names the signal but
//! reports no core-dumped flag; F9 (b) is contained only where toolwire is the subreaper (the
//! real binary); B3 arguments nested past serde_json's limit are `args_not_json` (they do not
//! parse), those past `json_depth` are `invalid_arguments`; B11 non-object arguments are
//! `args_not_json` and `""` means `{}`; B15 has no file-root tools (`path_outside_root`), so it
//! checks that a model-chosen value cannot change the destination host (egress rules: F19).

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::common::binary::Binary;
use crate::common::faults;
use crate::common::invariants::{
    Fixture, Hwm, assert_error_shape, assert_within, expect_error, faultproc, kind, marked_pids, results,
};
use crate::common::logs;
use crate::common::mock_backend::{MockBackend, refused_addr};
use crate::common::server::{Opts, Served, openai, openai_raw};
use nix::sys::signal::Signal;
use serde_json::{Value, json};
use toolwire::config::HumanDuration;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn hd(d: Duration) -> HumanDuration {
    HumanDuration(d)
}

/// A fast retry policy: `max_attempts` attempts, 10–50 ms backoff.
fn fast_retry(max_attempts: u32) -> Value {
    json!({"max_attempts": max_attempts, "backoff": "10ms", "max_backoff": "50ms"})
}

/// Polls `cond` every 20 ms until it holds, at most `limit`.
async fn eventually(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "timed out after {limit:?} waiting for {what}");
        tokio::time::sleep(ms(20)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// 2.1 Faults
// ---------------------------------------------------------------------------------------------

/// F1: a backend that reads the request and never answers (the mock's `/hang`), and a raw
/// listener that accepts and never reads. The attempt timeout fires; a non-idempotent tool is
/// not retried after sending; an idempotent one is, within its deadline.
#[tokio::test]
async fn f01_backend_hangs() {
    let fx = Fixture::new().await;
    let mock = MockBackend::start().await;
    let hole = faults::blackhole().await;
    fx.write_tools(
        "t.json",
        &json!([
            fx.http_tool(
                "hang",
                json!({"url": mock.url("/hang")}),
                json!({"timeout": "300ms", "deadline": "5s", "retry": fast_retry(3)})
            ),
            fx.http_tool(
                "hang_idem",
                json!({"url": mock.url("/hang")}),
                json!({"timeout": "300ms", "deadline": "5s", "idempotent": true, "retry": fast_retry(2)})
            ),
            fx.http_tool(
                "hole",
                json!({"url": hole.url("/x")}),
                json!({"timeout": "300ms", "retry": fast_retry(3)})
            ),
        ]),
    );
    let server = Served::start(fx.config()).await;
    let a = server
        .execute(
            &openai(&[
                ("c1", "hang", json!({})),
                ("c2", "hang_idem", json!({})),
                ("c3", "hole", json!({})),
            ]),
            &Value::Null,
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let r = results(&a.body, &["c1", "c2", "c3"]);
    let e = expect_error(&r[0], "timeout");
    assert_eq!(e["retryable"], true);
    assert_eq!(r[0]["attempts"], 1, "sent and not idempotent: no retry");
    expect_error(&r[1], "timeout");
    assert_eq!(r[1]["attempts"], 2, "idempotent: retried up to max_attempts");
    expect_error(&r[2], "timeout");
    assert_eq!(r[2]["attempts"], 1);
    assert_eq!(mock.count("/hang"), 3);
    // The calls ran in parallel; the longest is two 300 ms attempts plus ≤ 50 ms backoff.
    assert_within(a.elapsed, ms(650), "F1 request");
    server.stop().await;
    drop((mock, hole));
    fx.finish().await;
}

/// F2: a slow answer and a slow-drip body: the attempt timeout covers the body too, and a
/// partial body is never returned as a success.
#[tokio::test]
async fn f02_slow_drip_body() {
    let fx = Fixture::new().await;
    let mock = MockBackend::start().await;
    let drip = faults::drip(100, ms(100)).await;
    fx.write_tools(
        "t.json",
        &json!([
            fx.http_tool(
                "slow",
                json!({"url": mock.url("/slow?ms=5000")}),
                json!({"timeout": "400ms"})
            ),
            fx.http_tool("drip", json!({"url": drip.url("/drip")}), json!({"timeout": "400ms"})),
            fx.http_tool(
                "quick",
                json!({"url": mock.url("/slow?ms=10")}),
                json!({"timeout": "2s"})
            ),
        ]),
    );
    let server = Served::start(fx.config()).await;
    let a = server
        .execute(
            &openai(&[
                ("s", "slow", json!({})),
                ("d", "drip", json!({})),
                ("q", "quick", json!({})),
            ]),
            &Value::Null,
        )
        .await;
    let r = results(&a.body, &["s", "d", "q"]);
    expect_error(&r[0], "timeout");
    let e = expect_error(&r[1], "timeout");
    assert!(r[1].get("output").is_none(), "no partial body: {}", r[1]);
    assert_eq!(e["retryable"], true);
    assert_eq!(r[1]["attempts"], 1);
    assert_eq!(kind(&r[2]), "ok", "{}", r[2]);
    assert_within(a.elapsed, ms(400), "F2 request");
    server.stop().await;
    drop((mock, drip));
    fx.finish().await;
}

/// F3: 5xx. 503/502 are retried (same `Idempotency-Key` on every attempt) up to
/// `max_attempts`; 500 only for an idempotent tool. A backend error body that echoes a secret
/// reaches the model redacted, and the logs never see it.
#[tokio::test]
async fn f03_5xx() {
    let fx = Fixture::new().await;
    let mock = MockBackend::start().await;
    fx.write_tools(
        "t.json",
        &json!([
            fx.http_tool(
                "flaky",
                json!({"url": mock.url("/fail/2/503")}),
                json!({"retry": fast_retry(3)})
            ),
            fx.http_tool(
                "broken",
                json!({"url": mock.url("/fail/9/500")}),
                json!({"retry": fast_retry(3)})
            ),
            fx.http_tool(
                "broken_idem",
                json!({"url": mock.url("/fail/9/500")}),
                json!({"retry": fast_retry(3), "idempotent": true})
            ),
            fx.http_tool(
                "gateway",
                json!({"url": mock.url("/status/502")}),
                json!({"retry": fast_retry(3)})
            ),
            fx.http_tool(
                "leaky",
                json!({"url": mock.url("/status/500"), "query": {"body": "{q} ${file:secret.txt}"}}),
                json!({"parameters": {"q": "string"}})
            ),
        ]),
    );
    // All five tools share one origin; the breaker (per origin) is tested on its own below.
    let mut cfg = fx.config();
    cfg.breaker.failures = 0;
    let server = Served::start(cfg).await;
    let a = server
        .execute(
            &openai(&[
                ("c1", "flaky", json!({})),
                ("c2", "broken", json!({})),
                ("c3", "broken_idem", json!({})),
                ("c4", "gateway", json!({})),
                ("c5", "leaky", json!({"q": fx.canary})),
            ]),
            &Value::Null,
        )
        .await;
    let r = results(&a.body, &["c1", "c2", "c3", "c4", "c5"]);
    assert_eq!(kind(&r[0]), "ok", "{}", r[0]);
    assert_eq!(r[0]["attempts"], 3);
    assert_eq!(r[0]["output"]["attempt"], 3);
    let keys: Vec<String> = mock
        .requests()
        .iter()
        .filter(|q| q.path == "/fail/2/503")
        .map(|q| q.header("idempotency-key").unwrap().to_owned())
        .collect();
    assert_eq!(keys.len(), 3);
    assert!(keys.iter().all(|k| k == &keys[0] && k.ends_with(":c1")), "{keys:?}");
    let e = expect_error(&r[1], "backend_status");
    assert_eq!((e["status"].as_u64(), r[1]["attempts"].as_u64()), (Some(500), Some(1)));
    let e = expect_error(&r[2], "backend_status");
    assert_eq!((e["status"].as_u64(), r[2]["attempts"].as_u64()), (Some(500), Some(3)));
    let e = expect_error(&r[3], "backend_status");
    assert_eq!((e["status"].as_u64(), r[3]["attempts"].as_u64()), (Some(502), Some(3)));
    assert_eq!(e["retryable"], true);
    let e = expect_error(&r[4], "backend_status");
    let msg = e["message"].as_str().unwrap();
    assert!(
        !a.body.to_string().contains(&fx.secret),
        "secret reached the model: {msg}"
    );
    assert!(msg.contains("[redacted]"), "{msg}");
    // I5 is not vacuous: the calls were logged.
    assert!(logs::all().contains("Tool call finished"));
    server.stop().await;
    drop(mock);
    fx.finish().await;
}

/// F4: 429 with `Retry-After` in seconds and as an HTTP-date is honoured within the deadline;
/// a value longer than the call can wait ends the call at once with `retry_after_ms`; garbage
/// falls back to the normal backoff.
#[tokio::test]
async fn f04_429_retry_after() {
    let fx = Fixture::new().await;
    let mock = MockBackend::start().await;
    let date = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(2));
    let date_q = percent_encoding::utf8_percent_encode(&date, percent_encoding::NON_ALPHANUMERIC).to_string();
    fx.write_tools(
        "t.json",
        &json!([
            fx.http_tool(
                "secs",
                json!({"url": mock.url("/status/429?retry_after=1")}),
                json!({"retry": fast_retry(2), "timeout": "2s", "deadline": "6s"})
            ),
            fx.http_tool(
                "date",
                json!({"url": mock.url(&format!("/status/429?retry_after={date_q}"))}),
                json!({"retry": fast_retry(2), "timeout": "2s", "deadline": "6s"})
            ),
            fx.http_tool(
                "long",
                json!({"url": mock.url("/status/429?retry_after=99999")}),
                json!({"retry": fast_retry(3), "timeout": "2s", "deadline": "6s"})
            ),
            fx.http_tool(
                "garbage",
                json!({"url": mock.url("/status/429?retry_after=garbage")}),
                json!({"retry": fast_retry(3), "timeout": "2s", "deadline": "6s"})
            ),
        ]),
    );
    let server = Served::start(fx.config()).await;
    let started = Instant::now();
    let long_calls = openai(&[("l", "long", json!({})), ("g", "garbage", json!({}))]);
    let slow_calls = openai(&[("s", "secs", json!({})), ("d", "date", json!({}))]);
    let (long, slow) = tokio::join!(
        server.execute(&long_calls, &Value::Null),
        server.execute(&slow_calls, &Value::Null)
    );
    let r = results(&long.body, &["l", "g"]);
    let e = expect_error(&r[0], "backend_status");
    assert_eq!(e["status"], 429);
    assert_eq!(e["retry_after_ms"], 99_999_000u64, "{e}");
    assert_eq!(r[0]["attempts"], 1, "too long to wait: no retry");
    expect_error(&r[1], "backend_status");
    assert_eq!(r[1]["attempts"], 3, "garbage Retry-After: normal backoff");
    // Nowhere near the 99 999 s Retry-After.
    assert!(long.elapsed < Duration::from_secs(5), "{:?}", long.elapsed);
    let r = results(&slow.body, &["s", "d"]);
    for x in &r {
        let e = expect_error(x, "backend_status");
        assert_eq!(
            (e["status"].as_u64(), x["attempts"].as_u64()),
            (Some(429), Some(2)),
            "{x}"
        );
    }
    assert!(
        slow.elapsed >= ms(950),
        "Retry-After: 1 was honoured: {:?}",
        slow.elapsed
    );
    assert_within(started.elapsed(), Duration::from_secs(2), "F4 requests");
    server.stop().await;
    drop(mock);
    fx.finish().await;
}

/// F5: connection refused: retried with backoff (nothing was sent), fails after max attempts
/// as `backend_unreachable`, and counts toward the breaker.
#[tokio::test]
async fn f05_connection_refused() {
    let fx = Fixture::new().await;
    let addr = refused_addr().await;
    fx.write_tools(
        "t.json",
        &json!([fx.http_tool(
            "down",
            json!({"url": format!("http://{addr}/x")}),
            json!({"retry": fast_retry(3)})
        )]),
    );
    let server = Served::start(fx.config()).await;
    let a = server
        .execute(&openai(&[("c1", "down", json!({}))]), &Value::Null)
        .await;
    let r = results(&a.body, &["c1"]);
    let e = expect_error(&r[0], "backend_unreachable");
    assert_eq!(e["retryable"], true);
    assert_eq!(r[0]["attempts"], 3);
    assert_within(a.elapsed, ms(150), "F5 request");
    let tools = server.get("/v1/tools").await.body;
    assert_eq!(
        tools["tools"][0]["breaker"]["status"],
        json!({"state": "closed", "consecutive_failures": 3}),
        "{tools}"
    );
    server.stop().await;
    fx.finish().await;
}

/// F6: the connection is reset mid-body: a failure (the partial body is discarded), retried
/// only for an idempotent tool.
#[tokio::test]
async fn f06_reset_mid_body() {
    let fx = Fixture::new().await;
    let mock = MockBackend::start().await;
    let url = format!("{}?after_bytes=1024", mock.reset_url());
    fx.write_tools(
        "t.json",
        &json!([
            fx.http_tool("reset", json!({"url": url}), json!({"retry": fast_retry(2)})),
            fx.http_tool(
                "reset_idem",
                json!({"url": url}),
                json!({"retry": fast_retry(2), "idempotent": true})
            ),
        ]),
    );
    let server = Served::start(fx.config()).await;
    let a = server
        .execute(
            &openai(&[("a", "reset", json!({})), ("b", "reset_idem", json!({}))]),
            &Value::Null,
        )
        .await;
    let r = results(&a.body, &["a", "b"]);
    for x in &r {
        expect_error(x, "backend_unreachable");
        assert!(x.get("output").is_none(), "{x}");
    }
    assert_eq!(r[0]["attempts"], 1);
    assert_eq!(r[1]["attempts"], 2);
    assert_eq!(mock.count("/reset"), 3);
    assert_within(a.elapsed, ms(300), "F6 request");
    server.stop().await;
    drop(mock);
    fx.finish().await;
}

/// F7: huge output, 200 MiB over HTTP and 100 MiB from a process, through the 1 MiB read cap:
/// JSON → `output_too_large`, text → ok + `truncated`; the process's output keeps being drained;
/// the peak RSS grows by far less than the flood (I3).
#[tokio::test]
async fn f07_huge_output() {
    let fx = Fixture::new().await;
    let mock = MockBackend::start().await;
    let http_bytes = 200 * 1024 * 1024;
    let proc_bytes = (100 * 1024 * 1024).to_string();
    fx.write_tools(
        "t.json",
        &json!([
            fx.http_tool(
                "huge_json",
                json!({"url": mock.url(&format!("/huge?bytes={http_bytes}&type=json"))}),
                json!({})
            ),
            fx.http_tool(
                "huge_text",
                json!({"url": mock.url(&format!("/huge?bytes={http_bytes}&type=text"))}),
                json!({})
            ),
            fx.exec_tool(
                "flood_text",
                json!({"command": [faultproc(), "flood", proc_bytes, "stdout"]}),
                json!({})
            ),
            fx.exec_tool(
                "flood_json",
                json!({"command": [faultproc(), "flood", proc_bytes, "stdout"], "output": "json"}),
                json!({})
            ),
        ]),
    );
    let server = Served::start(fx.config()).await;
    let hwm = Hwm::start();
    let a = server
        .execute(
            &openai(&[
                ("hj", "huge_json", json!({})),
                ("ht", "huge_text", json!({})),
                ("ft", "flood_text", json!({})),
                ("fj", "flood_json", json!({})),
            ]),
            &Value::Null,
        )
        .await;
    let growth = hwm.growth_mib();
    let r = results(&a.body, &["hj", "ht", "ft", "fj"]);
    expect_error(&r[0], "output_too_large");
    for x in [&r[1], &r[2]] {
        assert_eq!(kind(x), "ok", "{x}");
        assert_eq!(x["truncated"], true);
        let out = x["output"].as_str().unwrap();
        assert!(out.len() <= 64 * 1024 + 256, "returned output is capped: {}", out.len());
        assert!(out.contains("truncated"), "marked");
    }
    expect_error(&r[3], "output_too_large");
    // 4 calls × (1 MiB kept + buffers) plus the mock's chunks; the floods were 500 MiB in all.
    eprintln!(
        "F7: peak RSS +{growth} MiB for 400 MiB through the caps, {:?}",
        a.elapsed
    );
    assert!(growth <= 64, "I3: peak RSS grew by {growth} MiB");
    assert_within(a.elapsed, Duration::from_secs(5), "F7 request");
    server.stop().await;
    drop(mock);
    fx.finish().await;
}

/// F8: a process that ignores SIGTERM is killed with SIGKILL after the grace period; one that
/// honours SIGTERM ends with it. The whole group is reaped.
#[tokio::test]
async fn f08_ignores_sigterm() {
    let fx = Fixture::new().await;
    fx.write_tools(
        "t.json",
        &json!([
            fx.exec_tool(
                "stubborn",
                json!({"command": [faultproc(), "ignore-term", "30000"]}),
                json!({"timeout": "300ms", "kill_grace": "300ms"})
            ),
            fx.exec_tool(
                "polite",
                json!({"command": [faultproc(), "sleep", "30000"]}),
                json!({"timeout": "300ms", "kill_grace": "300ms"})
            ),
        ]),
    );
    let server = Served::start(fx.config()).await;
    let a = server
        .execute(
            &openai(&[("s", "stubborn", json!({})), ("p", "polite", json!({}))]),
            &Value::Null,
        )
        .await;
    let r = results(&a.body, &["s", "p"]);
    let e = expect_error(&r[0], "timeout");
    assert_eq!(e["signal"], "SIGKILL", "{e}");
    assert_eq!(r[0]["attempts"], 1);
    let e = expect_error(&r[1], "timeout");
    assert_eq!(e["signal"], "SIGTERM", "{e}");
    eprintln!("F8: timeout 300 ms + grace 300 ms → {:?}", a.elapsed);
    assert!(a.elapsed >= ms(550), "the grace was waited: {:?}", a.elapsed);
    assert_within(a.elapsed, ms(600), "F8 request (timeout + grace)");
    assert!(fx.marked_pids().is_empty(), "I2 right after the answer");
    server.stop().await;
    fx.finish().await;
}

/// F9 (a): a grandchild that keeps stdout open after its parent exits, and one still running
/// at the timeout: the group is killed in both cases and the call does not wait for EOF.
/// F9 (b): a `setsid` + double-fork daemon escapes the group; the real binary, a child
/// subreaper, kills and reaps it (tests/escapees.rs covers the details).
#[tokio::test]
async fn f09_forks_grandchildren() {
    let fx = Fixture::new().await;
    let pids_after_exit = fx.dir.path().join("exit.pids");
    let pids_timeout = fx.dir.path().join("timeout.pids");
    fx.write_tools(
        "t.json",
        &json!([
            fx.exec_tool(
                "exits",
                json!({"command": [faultproc(), "spawn-grandchild", "100", "30000"],
                "env": {"FAULTPROC_PIDS": pids_after_exit}}),
                json!({"timeout": "5s"})
            ),
            fx.exec_tool(
                "hangs",
                json!({"command": [faultproc(), "spawn-grandchild", "30000", "30000"],
                "env": {"FAULTPROC_PIDS": pids_timeout}}),
                json!({"timeout": "400ms", "kill_grace": "200ms"})
            ),
        ]),
    );
    let server = Served::start(fx.config()).await;
    let a = server
        .execute(
            &openai(&[("e", "exits", json!({})), ("h", "hangs", json!({}))]),
            &Value::Null,
        )
        .await;
    let r = results(&a.body, &["e", "h"]);
    assert_eq!(kind(&r[0]), "ok", "{}", r[0]);
    expect_error(&r[1], "timeout");
    // Well under the 2 s pipe-drain bound (which would make it ≥ 2.1 s): the group kill closed
    // the grandchild's pipes. Its own bound, as budget + SLACK would not tell the two apart.
    assert!(a.elapsed < ms(1800), "F9a request took {:?}", a.elapsed);
    for file in [&pids_after_exit, &pids_timeout] {
        let pids: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
        for who in ["parent", "grandchild"] {
            let pid = u32::try_from(pids[who].as_u64().unwrap()).unwrap();
            // SIGKILL was sent to the group before the answer; the kernel may still be tearing
            // the process down when the answer arrives (seen under load). A survivor would live
            // for 30 s, so a short wait still tells the two apart.
            let until = Instant::now() + ms(2000);
            while crate::common::procs::pid_alive(pid) && Instant::now() < until {
                tokio::time::sleep(ms(20)).await;
            }
            assert!(!crate::common::procs::pid_alive(pid), "I2: {who} {pid} survived");
        }
    }
    server.stop().await;

    // (b) through the real binary.
    let pidfile = fx.dir.path().join("daemon.pid");
    let tools_b = fx.dir.path().join("tools_b");
    std::fs::create_dir(&tools_b).unwrap();
    std::fs::write(
        tools_b.join("d.json"),
        json!({"tools": [fx.exec_tool("daemon", json!({"command": [faultproc(), "daemon", "30000", pidfile], "output": "json"}), json!({}))]})
            .to_string(),
    )
    .unwrap();
    std::fs::copy(fx.tools.join("secret.txt"), tools_b.join("secret.txt")).unwrap();
    let config = write_binary_config(&fx, "");
    let mut bin = Binary::start(&config, &tools_b);
    let res: Value = client()
        .post(bin.url("/v1/tools/daemon/call"))
        .json(&json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(res["ok"], true, "{res}");
    let daemon: u32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    // The subreaper sweeps once a second.
    eventually(Duration::from_secs(5), "the escaped daemon to be killed", || {
        !std::path::Path::new(&format!("/proc/{daemon}")).exists()
    })
    .await;
    bin.signal(Signal::SIGTERM);
    assert!(bin.wait_exit(Duration::from_secs(10)).unwrap().success());
    assert_no_secret_in(&bin.stderr(), &fx);
    fx.finish().await;
}

/// F10: a process flooding stdout and stderr at once: both pipes are drained concurrently (no
/// 64 KiB deadlock), each capped; a flood that would run for minutes is still stopped at the
/// timeout.
#[tokio::test]
async fn f10_floods_stdout_and_stderr() {
    let fx = Fixture::new().await;
    let each = (100 * 1024 * 1024).to_string();
    let endless = (100u64 * 1024 * 1024 * 1024).to_string();
    fx.write_tools(
        "t.json",
        &json!([
            fx.exec_tool(
                "both",
                json!({"command": [faultproc(), "flood", each, "both"]}),
                json!({"timeout": "8s"})
            ),
            fx.exec_tool(
                "endless",
                json!({"command": [faultproc(), "flood", endless, "both"]}),
                json!({"timeout": "500ms", "kill_grace": "200ms"})
            ),
        ]),
    );
    let server = Served::start(fx.config()).await;
    let hwm = Hwm::start();
    let a = server
        .execute(
            &openai(&[("b", "both", json!({})), ("e", "endless", json!({}))]),
            &Value::Null,
        )
        .await;
    let growth = hwm.growth_mib();
    let r = results(&a.body, &["b", "e"]);
    assert_eq!(kind(&r[0]), "ok", "{}", r[0]);
    assert_eq!(r[0]["truncated"], true);
    let e = expect_error(&r[1], "timeout");
    assert_eq!(e["signal"], "SIGTERM");
    eprintln!(
        "F10: peak RSS +{growth} MiB for 2 × 100 MiB plus a flood stopped at 500 ms, {:?}",
        a.elapsed
    );
    assert!(growth <= 48, "I3: peak RSS grew by {growth} MiB");
    assert_within(a.elapsed, Duration::from_secs(8), "F10 request");
    server.stop().await;
    fx.finish().await;
}

/// F11: a process that never reads its stdin while the server writes a 1 MiB envelope to it:
/// the write runs in its own task, so the call ends normally.
#[tokio::test]
async fn f11_never_reads_stdin() {
    let fx = Fixture::new().await;
    fx.write_tools(
        "t.json",
        &json!([fx.exec_tool(
            "deaf",
            json!({"command": [faultproc(), "no-stdin", "200"], "stdin": "json", "output": "json"}),
            json!({"timeout": "5s", "parameters": {"blob": "string"}})
        )]),
    );
    let server = Served::start(fx.config()).await;
    let blob = "x".repeat(1024 * 1024);
    let a = server
        .execute(&openai(&[("c1", "deaf", json!({"blob": blob}))]), &Value::Null)
        .await;
    let r = results(&a.body, &["c1"]);
    assert_eq!(kind(&r[0]), "ok", "{}", r[0]);
    assert_eq!(r[0]["output"], json!({"slept": 200}));
    // The point is "no deadlock" (the timeout is 5 s); the margin absorbs a loaded machine.
    assert_within(a.elapsed, ms(3500), "F11 request");
    server.stop().await;
    fx.finish().await;
}

/// F12: a non-zero exit: `nonzero_exit` with `exit_code` and the stderr tail; not retried.
#[tokio::test]
async fn f12_exits_nonzero() {
    let fx = Fixture::new().await;
    fx.write_tools(
        "t.json",
        &json!([fx.exec_tool(
            "fails",
            json!({"command": [faultproc(), "exit", "3"]}),
            json!({"retry": fast_retry(3)})
        )]),
    );
    let server = Served::start(fx.config()).await;
    let a = server
        .execute(&openai(&[("c1", "fails", json!({}))]), &Value::Null)
        .await;
    let r = results(&a.body, &["c1"]);
    let e = expect_error(&r[0], "nonzero_exit");
    assert_eq!(e["exit_code"], 3);
    assert!(e["message"].as_str().unwrap().contains("exiting with code 3"), "{e}");
    assert_eq!(r[0]["attempts"], 1);
    server.stop().await;
    fx.finish().await;
}

/// F13: killed by a signal (SEGV, ABRT): `nonzero_exit` naming the signal, not retried; the
/// server is unaffected. (A core-dumped flag is not reported.)
#[tokio::test]
async fn f13_killed_by_signal() {
    let fx = Fixture::new().await;
    fx.write_tools(
        "t.json",
        &json!([
            fx.exec_tool(
                "segv",
                json!({"command": [faultproc(), "signal", "SEGV"]}),
                json!({"retry": fast_retry(3), "idempotent": true})
            ),
            fx.exec_tool(
                "abrt",
                json!({"command": [faultproc(), "signal", "ABRT"]}),
                json!({"retry": fast_retry(3)})
            ),
        ]),
    );
    let server = Served::start(fx.config()).await;
    let a = server
        .execute(
            &openai(&[("s", "segv", json!({})), ("a", "abrt", json!({}))]),
            &Value::Null,
        )
        .await;
    let r = results(&a.body, &["s", "a"]);
    for (x, sig) in r.iter().zip(["SIGSEGV", "SIGABRT"]) {
        let e = expect_error(x, "nonzero_exit");
        assert_eq!(e["signal"], sig, "{e}");
        assert_eq!(x["attempts"], 1, "crashes are not retried, even when idempotent");
    }
    assert_eq!(server.get("/healthz").await.status, 200);
    server.stop().await;
    fx.finish().await;
}

/// F14: an invalid tool set during hot reload (here: through `reload_now`; the file watcher,
/// rename-replace, duplicates, bad schemas and the ConfigMap symlink swap are in
/// tests/reload.rs): rejected, version unchanged, error in `/v1/tools` (`/readyz` counts only); a call in flight keeps
/// the snapshot it started with even when the next valid set removes its tool.
#[tokio::test]
async fn f14_invalid_config_during_hot_reload() {
    let fx = Fixture::new().await;
    let slow = fx.exec_tool(
        "slow",
        json!({"command": [faultproc(), "sleep", "1500"], "output": "json"}),
        json!({}),
    );
    let quick = fx.exec_tool(
        "quick",
        json!({"command": [faultproc(), "sleep", "1"], "output": "json"}),
        json!({}),
    );
    fx.write_tools("a.json", &json!([slow]));
    fx.write_tools("b.json", &json!([quick]));
    let server = Served::start(fx.config()).await;
    let v0 = server.version();
    let in_flight = {
        let client = server.client.clone();
        let url = format!("{}/v1/execute", server.base);
        tokio::spawn(async move {
            client
                .post(url)
                .json(&json!({"provider": "openai_chat", "completion": openai(&[("c1", "slow", json!({}))])}))
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        })
    };
    let m = fx.mark.clone();
    eventually(Duration::from_secs(5), "the slow call to start", || {
        !marked_pids(&format!("TW_FAULT_MARK={m}")).is_empty()
    })
    .await;
    // Invalid: a syntax error. Rejected; the old set stays.
    std::fs::write(fx.tools.join("b.json"), "{\"tools\": [").unwrap();
    let out = toolwire::reload::reload_now(&server.state.reloader).await;
    assert!(matches!(out, toolwire::reload::Reloaded::Rejected { .. }), "{out:?}");
    assert_eq!(server.version(), v0);
    let ready = server.get("/v1/tools").await.body;
    assert_eq!(ready["reload"]["failures"], 1, "{ready}");
    assert!(
        ready["reload"]["last_error"][0].as_str().unwrap().contains("b.json"),
        "{ready}"
    );
    // Valid, without `slow`: swapped while `slow` is still running.
    std::fs::remove_file(fx.tools.join("a.json")).unwrap();
    fx.write_tools("b.json", &json!([quick]));
    let out = toolwire::reload::reload_now(&server.state.reloader).await;
    assert!(matches!(out, toolwire::reload::Reloaded::Swapped { .. }), "{out:?}");
    assert_ne!(server.version(), v0);
    let body = in_flight.await.unwrap();
    let r = results(&body, &["c1"]);
    assert_eq!(
        kind(&r[0]),
        "ok",
        "the in-flight call finished on its snapshot: {}",
        r[0]
    );
    let a = server
        .execute(&openai(&[("c2", "slow", json!({}))]), &Value::Null)
        .await;
    expect_error(&results(&a.body, &["c2"])[0], "unknown_tool");
    server.stop().await;
    fx.finish().await;
}

/// F15: SIGTERM to the real binary with 20 calls in flight: calls that finish within the drain
/// budget return ok, the rest are cut at the budget as `rejected`; every request is answered,
/// the process exits 0 in about the drain budget, and no tool process is left.
#[tokio::test]
async fn f15_sigterm_with_calls_in_flight() {
    let fx = Fixture::new().await;
    fx.write_tools(
        "t.json",
        &json!([
            fx.exec_tool(
                "short",
                json!({"command": [faultproc(), "sleep", "1500"], "output": "json"}),
                json!({"parameters": {"q": "string?"}})
            ),
            fx.exec_tool(
                "long",
                json!({"command": [faultproc(), "sleep", "30000"], "output": "json"}),
                json!({"timeout": "60s", "deadline": "60s", "kill_grace": "300ms"})
            ),
        ]),
    );
    let config = write_binary_config(&fx, "[shutdown]\ndrain = \"2500ms\"\n");
    let mut bin = Binary::start(&config, &fx.tools);
    let client = client();
    let mut requests = Vec::new();
    for n in 0..5 {
        let ids: Vec<String> = (0..4).map(|i| format!("r{n}c{i}")).collect();
        let completion = openai(&[
            (&ids[0], "short", json!({"q": fx.canary})),
            (&ids[1], "long", json!({})),
            (&ids[2], "short", json!({})),
            (&ids[3], "long", json!({})),
        ]);
        let req = client
            .post(bin.url("/v1/execute"))
            .json(&json!({"provider": "openai_chat", "completion": completion}))
            .send();
        requests.push(tokio::spawn(async move {
            let resp = req.await.unwrap();
            (resp.status().as_u16(), resp.json::<Value>().await.unwrap(), ids)
        }));
    }
    // All ten long calls running (the short ones may be done already: they end within the
    // drain budget either way, and their requests stay open for the long ones).
    let mark = fx.mark.clone();
    eventually(Duration::from_secs(15), "10 long tool processes", || {
        marked_pids(&format!("TW_FAULT_MARK={mark}"))
            .iter()
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.windows(5).any(|w| w == b"30000"))
            })
            .count()
            == 10
    })
    .await;
    let term = Instant::now();
    bin.signal(Signal::SIGTERM);
    let status = bin.wait_exit(Duration::from_secs(15)).expect("exited");
    let took = term.elapsed();
    eprintln!("F15: SIGTERM → exit in {took:?} (drain 2.5 s)");
    assert!(status.success(), "exit status {status:?}\n{}", bin.stderr());
    assert!(took >= ms(2400), "the drain budget was used: {took:?}");
    // Drain + kill grace, plus answering, closing the connections and process teardown.
    assert_within(took, ms(2500 + 300 + 500), "F15 exit (drain + kill grace + teardown)");
    for req in requests {
        let (status, body, ids) = req.await.unwrap();
        assert_eq!(status, 200, "{body}");
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        let r = results(&body, &ids);
        for i in [0, 2] {
            assert_eq!(kind(&r[i]), "ok", "finished within the drain: {}", r[i]);
        }
        for i in [1, 3] {
            let e = expect_error(&r[i], "rejected");
            assert_eq!(e["retryable"], true);
        }
    }
    fx.assert_no_processes_within(ms(3000)).await;
    assert_no_secret_in(&bin.stderr(), &fx);
    fx.finish().await;
}

/// F16: more concurrent requests than `limits.concurrent_requests` with a slow backend: the
/// excess is shed at once with 503 `overloaded` + `Retry-After`; accepted requests succeed.
#[tokio::test]
async fn f16_overload() {
    let fx = Fixture::new().await;
    let mock = MockBackend::start().await;
    fx.write_tools(
        "t.json",
        &json!([fx.http_tool("slow", json!({"url": mock.url("/slow?ms=6000")}), json!({}))]),
    );
    let mut cfg = fx.config();
    cfg.limits.concurrent_requests = 2;
    let server = Served::start(cfg).await;
    let completion = openai(&[("c1", "slow", json!({}))]);
    let all = futures_util::future::join_all((0..8).map(|_| server.execute(&completion, &Value::Null))).await;
    let (ok, shed): (Vec<_>, Vec<_>) = all.iter().partition(|a| a.status == 200);
    assert!((1..=2).contains(&ok.len()), "at most 2 accepted: {}", ok.len());
    assert_eq!(ok.len() + shed.len(), 8);
    for a in &ok {
        assert_eq!(kind(&results(&a.body, &["c1"])[0]), "ok");
    }
    for a in &shed {
        assert_eq!(a.status, 503);
        assert_error_shape(&a.body, "overloaded");
        assert_eq!(a.headers.get("retry-after").unwrap(), "1");
        // Queued would mean waiting for a slot, i.e. the backend's 6 s.
        assert!(a.elapsed < ms(2000), "shed at once, not queued: {:?}", a.elapsed);
    }
    assert!(mock.count("/slow") <= 2);
    // Capacity is back once they finish.
    assert_eq!(server.execute(&completion, &Value::Null).await.status, 200);
    server.stop().await;
    drop(mock);
    fx.finish().await;
}

/// F17: the client disconnects mid-request: the handler is dropped and the tool's process group
/// (parent and grandchild) is killed.
#[tokio::test]
async fn f17_client_disconnects() {
    let fx = Fixture::new().await;
    let pids = fx.dir.path().join("pids");
    fx.write_tools(
        "t.json",
        &json!([fx.exec_tool(
            "long",
            json!({"command": [faultproc(), "spawn-grandchild", "30000", "30000"],
            "env": {"FAULTPROC_PIDS": pids}}),
            json!({"timeout": "30s", "kill_grace": "300ms"})
        )]),
    );
    let server = Served::start(fx.config()).await;
    let addr = server.addr;
    let body = json!({"arguments": {}}).to_string();
    let mut sock = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "POST /v1/tools/long/call HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    tokio::io::AsyncWriteExt::write_all(&mut sock, req.as_bytes())
        .await
        .unwrap();
    eventually(Duration::from_secs(5), "the pid file", || {
        std::fs::read_to_string(&pids).is_ok_and(|s| s.contains("grandchild"))
    })
    .await;
    let started: Value = serde_json::from_str(&std::fs::read_to_string(&pids).unwrap()).unwrap();
    drop(sock);
    let gone = Instant::now();
    fx.assert_no_processes_within(Duration::from_secs(3)).await;
    for who in ["parent", "grandchild"] {
        let pid = u32::try_from(started[who].as_u64().unwrap()).unwrap();
        assert!(!crate::common::procs::pid_alive(pid), "{who} {pid} survived");
    }
    assert_within(gone.elapsed(), ms(300), "F17 cleanup (kill grace)");
    assert_eq!(server.get("/healthz").await.status, 200);
    server.stop().await;
    fx.finish().await;
}

/// F18: slowloris: partial headers, then silence. The connection is closed after
/// `limits.header_read_timeout`; other clients are served meanwhile.
#[tokio::test]
async fn f18_slowloris() {
    let fx = Fixture::new().await;
    fx.write_tools("t.json", &json!([]));
    let mut cfg = fx.config();
    cfg.limits.header_read_timeout = hd(ms(300));
    let server = Served::start(cfg).await;
    let addr = server.addr;
    let started = Instant::now();
    let socks: Vec<_> = (0..10)
        .map(|_| {
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                s.write_all(b"POST /v1/execute HTTP/1.1\r\nHost: x\r\nContent-Ty").unwrap();
                let t = Instant::now();
                let mut buf = Vec::new();
                // EOF (or a reset) ends the read; a 5 s read timeout would be an error here.
                let res = s.read_to_end(&mut buf);
                let timed_out = matches!(&res, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut);
                (t.elapsed(), timed_out, String::from_utf8_lossy(&buf).into_owned())
            })
        })
        .collect();
    // Not pinned: a normal request is answered while they idle.
    assert_eq!(server.get("/healthz").await.status, 200);
    for s in socks {
        let (took, timed_out, answer) = tokio::task::spawn_blocking(move || s.join().unwrap()).await.unwrap();
        assert!(!timed_out, "the connection was left open");
        assert!(took >= ms(250), "closed too early: {took:?}");
        assert_within(took, ms(300), "F18 close");
        assert!(answer.is_empty() || answer.starts_with("HTTP/1.1 408"), "{answer}");
    }
    assert_within(started.elapsed(), ms(300), "F18 all closed");
    server.stop().await;
    fx.finish().await;
}

/// F19: SSRF: a tool URL to the metadata address is blocked before connecting; a tool whose
/// own `egress_deny` covers the mock (by IP literal and by name) is blocked without a request
/// reaching it; a redirect to a denied address is not followed.
#[tokio::test]
async fn f19_ssrf() {
    let fx = Fixture::new().await;
    let mock = MockBackend::start().await;
    let port = mock.addr.port();
    fx.write_tools(
        "t.json",
        &json!([
            fx.http_tool(
                "metadata",
                json!({"url": "http://169.254.169.254/latest/meta-data/"}),
                json!({"retry": fast_retry(3)})
            ),
            fx.http_tool(
                "denied_ip",
                json!({"url": mock.url("/ok")}),
                json!({"egress_deny": ["127.0.0.1/32"]})
            ),
            fx.http_tool(
                "denied_name",
                json!({"url": format!("http://localhost:{port}/ok")}),
                json!({"egress_deny": ["127.0.0.0/8", "::1/128"]})
            ),
            fx.http_tool(
                "redirect",
                json!({"url": mock.url("/redirect?to=http%3A%2F%2F169.254.169.254%2Flatest")}),
                json!({})
            ),
        ]),
    );
    let server = Served::start(fx.config()).await;
    let a = server
        .execute(
            &openai(&[
                ("m", "metadata", json!({})),
                ("i", "denied_ip", json!({})),
                ("n", "denied_name", json!({})),
                ("r", "redirect", json!({})),
            ]),
            &Value::Null,
        )
        .await;
    let r = results(&a.body, &["m", "i", "n", "r"]);
    for x in &r[..3] {
        let e = expect_error(x, "blocked");
        assert_eq!(e["retryable"], false);
        assert_eq!(x["attempts"], 1, "not retried");
    }
    let e = expect_error(&r[3], "backend_status");
    assert_eq!(e["status"], 302);
    // A connect to 169.254.169.254 would wait for the 5 s connect timeout: none was tried.
    assert_within(a.elapsed, ms(200), "F19 request");
    let paths: Vec<String> = mock.requests().iter().map(|q| q.path.clone()).collect();
    assert_eq!(
        paths,
        ["/redirect"],
        "nothing reached the denied mock; the redirect was not followed"
    );
    server.stop().await;
    drop(mock);
    fx.finish().await;
}

/// F20: spawn failures (missing program, not executable) are `spawn_failed`, never retried,
/// never a 500; a NUL byte in an argument is `invalid_arguments` before spawning.
#[tokio::test]
async fn f20_spawn_failure() {
    let fx = Fixture::new().await;
    let not_exec = fx.dir.path().join("not-executable.sh");
    std::fs::write(&not_exec, "#!/bin/sh\necho hi\n").unwrap();
    fx.write_tools(
        "t.json",
        &json!([
            fx.exec_tool(
                "missing",
                json!({"command": ["/nonexistent/toolwire-missing-program"]}),
                json!({"retry": fast_retry(3), "idempotent": true})
            ),
            fx.exec_tool(
                "noexec",
                json!({"command": [not_exec]}),
                json!({"retry": fast_retry(3)})
            ),
            fx.exec_tool(
                "nul",
                json!({"command": [faultproc(), "echo"], "args": ["{s}"]}),
                json!({"parameters": {"s": "string"}})
            ),
        ]),
    );
    let server = Served::start(fx.config()).await;
    let a = server
        .execute(
            &openai(&[
                ("m", "missing", json!({})),
                ("x", "noexec", json!({})),
                ("n", "nul", json!({"s": "a\u{0}b"})),
            ]),
            &Value::Null,
        )
        .await;
    assert_eq!(a.status, 200);
    let r = results(&a.body, &["m", "x", "n"]);
    for x in &r[..2] {
        let e = expect_error(x, "spawn_failed");
        assert_eq!(e["retryable"], false);
        assert_eq!(x["attempts"], 1);
    }
    expect_error(&r[2], "invalid_arguments");
    server.stop().await;
    fx.finish().await;
}

/// A jitter source that panics: the only way in from outside to make toolwire itself panic
/// inside one call (it is asked for a backoff delay only by a call that retries).
struct PanickingJitter;

impl toolwire::executor::retry::Jitter for PanickingJitter {
    fn unit(&self) -> f64 {
        panic!("injected panic inside one tool call (test)")
    }
}

/// F21: a panic inside one call: only that call gets `internal`; the others are unaffected and
/// the server keeps serving.
#[tokio::test]
async fn f21_panic_in_one_call() {
    let fx = Fixture::new().await;
    let mock = MockBackend::start().await;
    fx.write_tools(
        "t.json",
        &json!([
            fx.http_tool(
                "boom",
                json!({"url": mock.url("/status/503")}),
                json!({"retry": fast_retry(2)})
            ),
            fx.http_tool("fine", json!({"url": mock.url("/ok")}), json!({})),
            fx.exec_tool(
                "also_fine",
                json!({"command": [faultproc(), "sleep", "50"], "output": "json"}),
                json!({})
            ),
        ]),
    );
    let server = Served::start_opts(
        fx.config(),
        Opts {
            jitter: Some(Arc::new(PanickingJitter)),
            ..Opts::default()
        },
    )
    .await;
    let completion = openai(&[
        ("f", "fine", json!({})),
        ("b", "boom", json!({})),
        ("a", "also_fine", json!({})),
    ]);
    for _ in 0..2 {
        let a = server.execute(&completion, &Value::Null).await;
        assert_eq!(a.status, 200, "{}", a.body);
        let r = results(&a.body, &["f", "b", "a"]);
        assert_eq!(kind(&r[0]), "ok", "{}", r[0]);
        let e = expect_error(&r[1], "internal");
        assert!(
            !e["message"].as_str().unwrap().contains("injected"),
            "no panic text to the model: {e}"
        );
        assert_eq!(kind(&r[2]), "ok", "{}", r[2]);
    }
    assert_eq!(server.get("/healthz").await.status, 200);
    server.stop().await;
    drop(mock);
    fx.finish().await;
}

// ---------------------------------------------------------------------------------------------
// 2.2 Bad inputs
// ---------------------------------------------------------------------------------------------

/// A fixture with one HTTP tool `t` (to the mock's `/ok`) and a server.
async fn simple(fx: &Fixture, mock: &MockBackend, extra: Value) -> Served {
    fx.write_tools(
        "t.json",
        &json!([fx.http_tool("t", json!({"url": mock.url("/ok")}), extra)]),
    );
    Served::start(fx.config()).await
}

/// B1: malformed JSON (trailing comma, cut off): 400 `invalid_json` with line and column; the
/// body is never echoed.
#[tokio::test]
async fn b01_malformed_json() {
    let fx = Fixture::new().await;
    let mock = MockBackend::start().await;
    let server = simple(&fx, &mock, json!({})).await;
    let canary = &fx.canary;
    for body in [
        format!("{{\"provider\": \"openai_chat\",\n \"completion\": {{\"x\": \"{canary}\",}}}}"),
        format!("{{\"provider\": \"openai_chat\", \"completion\": {{\"choices\": [\"{canary}"),
    ] {
        let a = server.post_raw("/v1/execute", Some("application/json"), body).await;
        assert_eq!(a.status, 400);
        assert_error_shape(&a.body, "invalid_json");
        assert!(a.body["error"]["details"][0]["line"].as_u64().is_some(), "{}", a.body);
        assert!(a.body["error"]["details"][0]["column"].as_u64().is_some(), "{}", a.body);
        assert!(!a.body.to_string().contains(canary.as_str()), "echoed: {}", a.body);
    }
    assert_eq!(mock.requests().len(), 0);
    server.stop().await;
    drop(mock);
    fx.finish().await;
}

/// B2: bodies over `limits.body_bytes` (2 MiB): with Content-Length, chunked without one, and a
/// 50 MiB Content-Length that is rejected before the body is sent: 413 `payload_too_large`.
#[tokio::test]
async fn b02_huge_body() {
    let fx = Fixture::new().await;
    let mock = MockBackend::start().await;
    let server = simple(&fx, &mock, json!({})).await;
    let big = format!("{{\"completion\": \"{}\"}}", "a".repeat(3 * 1024 * 1024));
    let a = server
        .post_raw("/v1/execute", Some("application/json"), big.clone())
        .await;
    assert_eq!(a.status, 413);
    assert_error_shape(&a.body, "payload_too_large");
    assert!(
        a.body["error"]["message"].as_str().unwrap().contains("2097152"),
        "{}",
        a.body
    );
    // Chunked: no Content-Length, the limit applies to the stream.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        big.into_bytes().chunks(64 * 1024).map(|c| Ok(c.to_vec())).collect();
    let a = server
        .post_raw(
            "/v1/execute",
            Some("application/json"),
            reqwest::Body::wrap_stream(futures_util::stream::iter(chunks)),
        )
        .await;
    assert_eq!(a.status, 413);
    assert_error_shape(&a.body, "payload_too_large");
    // A 50 MiB Content-Length is refused from the head alone.
    let addr = server.addr;
    let (status, took) = tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let t = Instant::now();
        s.write_all(b"POST /v1/execute HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 52428800\r\n\r\n{\"a\":")
            .unwrap();
        let mut buf = [0u8; 512];
        let n = s.read(&mut buf).unwrap();
        (String::from_utf8_lossy(&buf[..n]).into_owned(), t.elapsed())
    })
    .await
    .unwrap();
    assert!(status.starts_with("HTTP/1.1 413"), "{status}");
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert_eq!(mock.requests().len(), 0);
    server.stop().await;
    drop(mock);
    fx.finish().await;
}

/// B3: deep nesting: 100k `[` in the body → 400 without a stack overflow; arguments nested
/// past serde_json's limit → `args_not_json`; past `limits.json_depth` (64) but parseable →
/// `invalid_arguments`. The other call of the request runs.
#[tokio::test]
async fn b03_deep_nesting() {
    let fx = Fixture::new().await;
    let mock = MockBackend::start().await;
    let server = simple(&fx, &mock, json!({})).await;
    let body = format!("{{\"completion\": {}", "[".repeat(100_000));
    let a = server.post_raw("/v1/execute", Some("application/json"), body).await;
    assert_eq!(a.status, 400);
    assert_error_shape(&a.body, "invalid_json");
    let deep = |n: usize| format!("{{\"a\":{}1{}}}", "{\"a\":".repeat(n), "}".repeat(n));
    let a = server
        .execute(
            &openai_raw(&[("x", "t", &deep(10_000)), ("y", "t", &deep(70)), ("z", "t", "{}")]),
            &Value::Null,
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let r = results(&a.body, &["x", "y", "z"]);
    expect_error(&r[0], "args_not_json");
    let e = expect_error(&r[1], "invalid_arguments");
    assert!(e["message"].as_str().unwrap().contains("64"), "{e}");
    assert_eq!(kind(&r[2]), "ok");
    assert_eq!(mock.requests().len(), 1);
    server.stop().await;
    drop(mock);
    fx.finish().await;
}

/// B4: invalid UTF-8 and a lone surrogate in the body → 400 `invalid_json`; a lone surrogate
/// inside the arguments string → that call's `args_not_json`.
#[tokio::test]
async fn b04_invalid_utf8_and_lone_surrogate() {
    let fx = Fixture::new().await;
    let mock = MockBackend::start().await;
    let server = simple(&fx, &mock, json!({"parameters": {"q": "string?"}})).await;
    let mut bytes = b"{\"completion\": \"".to_vec();
    bytes.extend_from_slice(&[0xff, 0xfe, 0xc3]);
    bytes.extend_from_slice(b"\"}");
    let a = server.post_raw("/v1/execute", Some("application/json"), bytes).await;
    assert_eq!(a.status, 400);
    assert_error_shape(&a.body, "invalid_json");
    let a = server
        .post_raw(
            "/v1/execute",
            Some("application/json"),
            r#"{"completion": {"x": "\ud800"}}"#,
        )
        .await;
    assert_eq!(a.status, 400, "{}", a.body);
    assert_error_shape(&a.body, "invalid_json");
    let a = server
        .execute(
            &openai_raw(&[("s", "t", r#"{"q": "\ud800"}"#), ("ok", "t", r#"{"q": "\u00e9"}"#)]),
            &Value::Null,
        )
        .await;
    let r = results(&a.body, &["s", "ok"]);
    expect_error(&r[0], "args_not_json");
    assert_eq!(kind(&r[1]), "ok");
    server.stop().await;
    drop(mock);
    fx.finish().await;
}

/// B5: a completion of the wrong provider (Anthropic and Gemini shapes named as openai), an
/// unknown provider, an undetectable shape: 422, naming the detected shape; nothing runs.
#[tokio::test]
async fn b05_wrong_provider() {
    let fx = Fixture::new().await;
    let mock = MockBackend::start().await;
    let server = simple(&fx, &mock, json!({})).await;
    let anthropic = json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "t", "input": {}}], "stop_reason": "tool_use"});
    let gemini = json!({"candidates": [{"content": {"role": "model", "parts": [{"functionCall": {"name": "t", "args": {}}}]},
        "finishReason": "STOP"}]});
    for (completion, detected) in [(anthropic, "anthropic"), (gemini, "gemini")] {
        let a = server
            .post("/v1/execute", &json!({"provider": "openai", "completion": completion}))
            .await;
        assert_eq!(a.status, 422, "{}", a.body);
        assert_error_shape(&a.body, "provider_mismatch");
        assert_eq!(a.body["error"]["details"][0]["detected"], detected, "{}", a.body);
    }
    let a = server
        .post(
            "/v1/execute",
            &json!({"provider": "nope", "completion": openai(&[("c", "t", json!({}))])}),
        )
        .await;
    assert_eq!(a.status, 422);
    assert_error_shape(&a.body, "unknown_provider");
    let a = server
        .post("/v1/execute", &json!({"completion": {"what": "ever"}}))
        .await;
    assert_eq!(a.status, 422);
    assert_error_shape(&a.body, "provider_mismatch");
    assert_eq!(mock.requests().len(), 0, "nothing executed");
    server.stop().await;
    drop(mock);
    fx.finish().await;
}

/// B6: arguments that are not JSON (cut off at `finish_reason: length`): that call fails with
/// `args_not_json`, not retryable, telling the model to send them again; the others run.
#[tokio::test]
async fn b06_arguments_not_json() {
    let fx = Fixture::new().await;
    let mock = MockBackend::start().await;
    let server = simple(&fx, &mock, json!({"parameters": {"q": "string?"}})).await;
    let cut = format!("{{\"q\": \"{}", fx.canary);
    let a = server
        .execute(
            &openai_raw(&[("a", "t", &cut), ("b", "t", r#"{"q": "fine"}"#)]),
            &Value::Null,
        )
        .await;
    let r = results(&a.body, &["a", "b"]);
    let e = expect_error(&r[0], "args_not_json");
    assert_eq!(e["retryable"], false);
    assert!(e["message"].as_str().unwrap().contains("again"), "{e}");
    assert!(
        !e.to_string().contains(&fx.canary),
        "the error does not echo the arguments: {e}"
    );
    assert_eq!(r[0]["attempts"], 0);
    assert_eq!(kind(&r[1]), "ok");
    assert_eq!(mock.requests().len(), 1);
    server.stop().await;
    drop(mock);
    fx.finish().await;
}

/// B7: an unknown tool: `unknown_tool`, listing at most 20 known names.
#[tokio::test]
async fn b07_unknown_tool() {
    let fx = Fixture::new().await;
    let mock = MockBackend::start().await;
    let tools: Vec<Value> = (0..25)
        .map(|i| fx.http_tool(&format!("tool_{i:02}"), json!({"url": mock.url("/ok")}), json!({})))
        .collect();
    fx.write_tools("t.json", &Value::Array(tools));
    let server = Served::start(fx.config()).await;
    let a = server
        .execute(
            &openai(&[("u", "no_such_tool", json!({})), ("k", "tool_00", json!({}))]),
            &Value::Null,
        )
        .await;
    let r = results(&a.body, &["u", "k"]);
    let e = expect_error(&r[0], "unknown_tool");
    let msg = e["message"].as_str().unwrap();
    let listed = (0..25).filter(|i| msg.contains(&format!("tool_{i:02}"))).count();
    assert_eq!(listed, 20, "{msg}");
    assert!(msg.contains("5 more"), "{msg}");
    assert_eq!(kind(&r[1]), "ok");
    server.stop().await;
    drop(mock);
    fx.finish().await;
}

/// B8: schema violations (missing required, wrong type, extra property, pattern, maxLength):
/// never executed; `invalid_arguments` with at most 10 `details` {path, message}; values masked.
#[tokio::test]
async fn b08_schema_violations() {
    let fx = Fixture::new().await;
    let mock = MockBackend::start().await;
    let params = json!({"type": "object", "required": ["name"], "additionalProperties": false,
        "properties": {"name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 8}, "n": {"type": "integer"}}});
    let wide: serde_json::Map<String, Value> = (0..15).map(|i| (format!("n{i}"), json!({"type": "integer"}))).collect();
    fx.write_tools(
        "t.json",
        &json!([
            fx.http_tool("t", json!({"url": mock.url("/ok")}), json!({"parameters": params})),
            fx.http_tool(
                "wide",
                json!({"url": mock.url("/ok")}),
                json!({"parameters": {"type": "object", "properties": wide}})
            ),
        ]),
    );
    let server = Served::start(fx.config()).await;
    let c = fx.canary.as_str();
    let many: serde_json::Map<String, Value> = (0..15).map(|i| (format!("n{i}"), json!(c))).collect();
    let calls = [
        ("missing", json!({"n": 1})),
        ("type", json!({"name": "abc", "n": c})),
        ("extra", json!({"name": "abc", "zzz": c})),
        ("pattern", json!({"name": c})),
        ("long", json!({"name": "abcdefghijklmnop"})),
        ("many", Value::Object(many)),
    ];
    let completion = openai(
        &calls
            .iter()
            .map(|(id, a)| (*id, if *id == "many" { "wide" } else { "t" }, a.clone()))
            .collect::<Vec<_>>(),
    );
    let a = server.execute(&completion, &Value::Null).await;
    let ids: Vec<&str> = calls.iter().map(|(id, _)| *id).collect();
    let r = results(&a.body, &ids);
    for x in &r {
        let e = expect_error(x, "invalid_arguments");
        assert_eq!(x["attempts"], 0);
        let details = e["details"].as_array().unwrap();
        assert!((1..=10).contains(&details.len()), "{e}");
        for d in details {
            assert!(d["path"].is_string() && d["message"].is_string(), "{d}");
        }
        assert!(!e.to_string().contains(c), "the value is masked: {e}");
    }
    assert_eq!(r[1]["error"]["details"][0]["path"], "/n");
    assert_eq!(r[5]["error"]["details"].as_array().unwrap().len(), 10, "capped at 10");
    assert_eq!(mock.requests().len(), 0, "never executed");
    server.stop().await;
    drop(mock);
    fx.finish().await;
}

/// B9: duplicate call ids: 422 `duplicate_call_id` before anything runs.
#[tokio::test]
async fn b09_duplicate_call_ids() {
    let fx = Fixture::new().await;
    let mock = MockBackend::start().await;
    let server = simple(&fx, &mock, json!({})).await;
    let a = server
        .execute(
            &openai(&[
                ("same", "t", json!({})),
                ("other", "t", json!({})),
                ("same", "t", json!({})),
            ]),
            &Value::Null,
        )
        .await;
    assert_eq!(a.status, 422);
    assert_error_shape(&a.body, "duplicate_call_id");
    assert_eq!(mock.requests().len(), 0, "nothing ran");
    server.stop().await;
    drop(mock);
    fx.finish().await;
}

/// B10: traversal and injection strings: a schema pattern rejects them where the tool says so;
/// passed as data, each is exactly one argv element after `--` (no shell, no splitting); a NUL
/// byte is refused.
#[tokio::test]
async fn b10_traversal_and_injection_strings() {
    let fx = Fixture::new().await;
    fx.write_tools(
        "t.json",
        &json!([
            fx.exec_tool("echo", json!({"command": [faultproc(), "echo"], "args": ["--", "{p}"], "output": "json"}),
                json!({"parameters": {"p": "string"}})),
            fx.exec_tool("read_name", json!({"command": [faultproc(), "echo"], "args": ["{p}"], "output": "json"}),
                json!({"parameters": {"type": "object", "required": ["p"],
                    "properties": {"p": {"type": "string", "pattern": "^[A-Za-z0-9_][A-Za-z0-9_.-]*$", "not": {"pattern": "\\.\\."}}}}})),
        ]),
    );
    let server = Served::start(fx.config()).await;
    let values = [
        "../../etc/passwd",
        "/etc/shadow",
        "-o /tmp/x",
        "$(id)",
        "; rm -rf /",
        "%2e%2e/",
        "`id`",
        "a b",
    ];
    let mut calls: Vec<(String, &str, Value)> = values
        .iter()
        .enumerate()
        .map(|(i, v)| (format!("e{i}"), "echo", json!({"p": v})))
        .collect();
    calls.push(("nul".into(), "echo", json!({"p": "a\u{0}b"})));
    for (i, v) in ["../../etc/passwd", "/etc/shadow", "-rf", "x/../../y"]
        .iter()
        .enumerate()
    {
        calls.push((format!("r{i}"), "read_name", json!({"p": v})));
    }
    calls.push(("rok".into(), "read_name", json!({"p": "notes.txt"})));
    let borrowed: Vec<(&str, &str, Value)> = calls.iter().map(|(id, t, a)| (id.as_str(), *t, a.clone())).collect();
    let a = server.execute(&openai(&borrowed), &Value::Null).await;
    let ids: Vec<&str> = calls.iter().map(|(id, _, _)| id.as_str()).collect();
    let r = results(&a.body, &ids);
    for (i, v) in values.iter().enumerate() {
        assert_eq!(kind(&r[i]), "ok", "{}", r[i]);
        let argv = r[i]["output"]["argv"].as_array().unwrap();
        assert_eq!(argv[1..], [json!("echo"), json!("--"), json!(v)], "{}", r[i]);
    }
    expect_error(&r[values.len()], "invalid_arguments");
    for x in &r[values.len() + 1..r.len() - 1] {
        expect_error(x, "invalid_arguments");
    }
    assert_eq!(kind(r.last().unwrap()), "ok");
    server.stop().await;
    fx.finish().await;
}

/// B11: arguments that are valid JSON but not an object: `args_not_json` ("must be a JSON
/// object"). An empty string means `{}` (documented), so it runs.
#[tokio::test]
async fn b11_arguments_not_an_object() {
    let fx = Fixture::new().await;
    let mock = MockBackend::start().await;
    let server = simple(&fx, &mock, json!({})).await;
    let raws = ["[1, 2]", "\"a string\"", "42", "null", "true"];
    let mut calls: Vec<(String, String)> = raws
        .iter()
        .enumerate()
        .map(|(i, r)| (format!("c{i}"), (*r).to_owned()))
        .collect();
    calls.push(("empty".into(), String::new()));
    let borrowed: Vec<(&str, &str, &str)> = calls.iter().map(|(id, raw)| (id.as_str(), "t", raw.as_str())).collect();
    let a = server.execute(&openai_raw(&borrowed), &Value::Null).await;
    let ids: Vec<&str> = calls.iter().map(|(id, _)| id.as_str()).collect();
    let r = results(&a.body, &ids);
    for x in &r[..raws.len()] {
        let e = expect_error(x, "args_not_json");
        assert!(e["message"].as_str().unwrap().contains("must be a JSON object"), "{e}");
    }
    assert_eq!(kind(&r[raws.len()]), "ok", "{}", r[raws.len()]);
    assert_eq!(mock.requests().len(), 1);
    server.stop().await;
    drop(mock);
    fx.finish().await;
}

/// B12: no or wrong Content-Type → 415; an empty body → 400; a completion without tool calls
/// → 200 with `results: []` and `finished: true`.
#[tokio::test]
async fn b12_content_type_empty_body_no_calls() {
    let fx = Fixture::new().await;
    let mock = MockBackend::start().await;
    let server = simple(&fx, &mock, json!({})).await;
    let body = json!({"completion": openai(&[])}).to_string();
    let a = server.post_raw("/v1/execute", None, body.clone()).await;
    assert_eq!(a.status, 415);
    assert_error_shape(&a.body, "unsupported_media_type");
    let a = server.post_raw("/v1/execute", Some("text/plain"), body).await;
    assert_eq!(a.status, 415);
    assert_error_shape(&a.body, "unsupported_media_type");
    let a = server.post_raw("/v1/execute", Some("application/json"), "").await;
    assert_eq!(a.status, 400);
    assert_error_shape(&a.body, "invalid_request");
    let a = server.execute(&openai(&[]), &Value::Null).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.body["results"], json!([]));
    assert_eq!(a.body["finished"], true);
    assert_eq!(mock.requests().len(), 0);
    server.stop().await;
    drop(mock);
    fx.finish().await;
}

/// B13: more calls than `limits.calls_per_request`: 422 `too_many_calls` before any runs.
#[tokio::test]
async fn b13_too_many_calls() {
    let fx = Fixture::new().await;
    let mock = MockBackend::start().await;
    fx.write_tools(
        "t.json",
        &json!([fx.http_tool("t", json!({"url": mock.url("/ok")}), json!({}))]),
    );
    let mut cfg = fx.config();
    cfg.limits.calls_per_request = 4;
    let server = Served::start(cfg).await;
    let ids: Vec<String> = (0..5).map(|i| format!("c{i}")).collect();
    let calls: Vec<(&str, &str, Value)> = ids.iter().map(|id| (id.as_str(), "t", json!({}))).collect();
    let a = server.execute(&openai(&calls), &Value::Null).await;
    assert_eq!(a.status, 422);
    assert_error_shape(&a.body, "too_many_calls");
    let a = server.execute(&openai(&calls[..4]), &Value::Null).await;
    assert_eq!(a.status, 200);
    results(&a.body, &ids[..4].iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(mock.requests().len(), 4, "only the accepted request ran");
    server.stop().await;
    drop(mock);
    fx.finish().await;
}

/// B14: a 10 MiB argument (the body limit raised to 16 MiB) against `maxLength` →
/// `invalid_arguments`; an argv over the kernel's per-argument limit → `spawn_failed` (E2BIG),
/// a result, not a 500.
#[tokio::test]
async fn b14_oversized_argument() {
    let fx = Fixture::new().await;
    fx.write_tools(
        "t.json",
        &json!([
            fx.exec_tool(
                "short",
                json!({"command": [faultproc(), "echo"], "args": ["{s}"]}),
                json!({"parameters": {"type": "object", "properties": {"s": {"type": "string", "maxLength": 1000}}}})
            ),
            fx.exec_tool(
                "argv",
                json!({"command": [faultproc(), "echo"], "args": ["{s}"]}),
                json!({"parameters": {"s": "string"}})
            ),
        ]),
    );
    let mut cfg = fx.config();
    cfg.limits.body_bytes = 16 * 1024 * 1024;
    let server = Served::start(cfg).await;
    let a = server
        .execute(
            &openai(&[
                ("big", "short", json!({"s": "x".repeat(10 * 1024 * 1024)})),
                ("e2big", "argv", json!({"s": "y".repeat(512 * 1024)})),
            ]),
            &Value::Null,
        )
        .await;
    assert_eq!(a.status, 200);
    let r = results(&a.body, &["big", "e2big"]);
    expect_error(&r[0], "invalid_arguments");
    assert_eq!(r[0]["attempts"], 0);
    let e = expect_error(&r[1], "spawn_failed");
    assert!(e["message"].as_str().unwrap().len() < 4096, "no argv echo");
    server.stop().await;
    fx.finish().await;
}

/// B15: values that pass the schema but aim elsewhere: a path placeholder carrying a host, a
/// scheme or `..` stays percent-encoded inside its one segment, so the request still goes to
/// the configured host (the model cannot pick the destination; egress rules are F19). The tool
/// opts out of the default refusal of `..` values (tests/security_tls.rs) to show the encoding.
#[tokio::test]
async fn b15_injected_internal_url() {
    let fx = Fixture::new().await;
    let mock = MockBackend::start().await;
    fx.write_tools(
        "t.json",
        &json!([fx.http_tool(
            "fetch",
            json!({"url": format!("{}/ok/{{p}}", mock.url("")), "allow_path_traversal": true}),
            json!({"parameters": {"p": "string"}})
        )]),
    );
    let server = Served::start(fx.config()).await;
    let values = [
        "169.254.169.254/latest/meta-data",
        "@169.254.169.254",
        "http://127.0.0.1:1/admin",
        "../../admin",
        "a?b#c",
    ];
    let calls: Vec<(String, Value)> = values
        .iter()
        .enumerate()
        .map(|(i, v)| (format!("c{i}"), json!({"p": v})))
        .collect();
    let borrowed: Vec<(&str, &str, Value)> = calls.iter().map(|(id, a)| (id.as_str(), "fetch", a.clone())).collect();
    let a = server.execute(&openai(&borrowed), &Value::Null).await;
    let ids: Vec<&str> = calls.iter().map(|(id, _)| id.as_str()).collect();
    let r = results(&a.body, &ids);
    for (x, v) in r.iter().zip(values) {
        assert_eq!(kind(x), "ok", "{x}");
        let path = x["output"]["path"].as_str().unwrap();
        let segment = path.strip_prefix("/ok/").unwrap();
        assert!(
            !segment.contains('/') && !segment.contains('?') && !segment.contains('#'),
            "{path}"
        );
        assert_eq!(percent_encoding::percent_decode_str(segment).decode_utf8().unwrap(), v);
    }
    assert_eq!(
        mock.requests().len(),
        values.len(),
        "every request went to the configured host"
    );
    server.stop().await;
    drop(mock);
    fx.finish().await;
}

// ---------------------------------------------------------------------------------------------
// Auth and the circuit breaker
// ---------------------------------------------------------------------------------------------

/// Bearer auth: the work and read routes answer 401 in the error shape without a token or with
/// a wrong one; `/healthz` and `/readyz` stay open; the token never reaches the logs.
#[tokio::test]
async fn auth_tokens_guard_the_api() {
    let fx = Fixture::new().await;
    let mock = MockBackend::start().await;
    fx.write_tools(
        "t.json",
        &json!([fx.http_tool("t", json!({"url": mock.url("/ok")}), json!({}))]),
    );
    let mut cfg = fx.config();
    cfg.auth.tokens = vec![fx.secret.clone()];
    let server = Served::start(cfg).await;
    let body = json!({"provider": "openai_chat", "completion": openai(&[("c", "t", json!({}))])});
    let url = format!("{}/v1/execute", server.base);
    for auth in [
        None,
        Some("Bearer wrong-token"),
        Some("Basic abc"),
        Some(fx.secret.as_str()),
    ] {
        let mut req = server.client.post(&url).json(&body);
        if let Some(h) = auth {
            req = req.header("authorization", h);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 401, "{auth:?}");
        assert_error_shape(&resp.json().await.unwrap(), "unauthorized");
    }
    let resp = server
        .client
        .get(format!("{}/v1/tools", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    let resp = server
        .client
        .post(&url)
        .bearer_auth(&fx.secret)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(server.get("/healthz").await.status, 200);
    assert_eq!(server.get("/readyz").await.status, 200);
    assert_eq!(mock.requests().len(), 1, "only the authorised request ran");
    server.stop().await;
    drop(mock);
    fx.finish().await;
}

/// The breaker: after `breaker.failures` consecutive refused connects the next call fails fast
/// with `backend_unavailable` + `retry_after_ms` and `/v1/tools` shows it open; after
/// `open_for`, a successful probe closes it.
#[tokio::test]
async fn breaker_opens_fails_fast_and_recovers() {
    let fx = Fixture::new().await;
    let addr = refused_addr().await;
    fx.write_tools(
        "t.json",
        &json!([fx.http_tool(
            "svc",
            json!({"url": format!("http://{addr}/x")}),
            json!({"retry": fast_retry(1)})
        )]),
    );
    let mut cfg = fx.config();
    cfg.breaker.failures = 3;
    cfg.breaker.open_for = hd(ms(600));
    let server = Served::start(cfg).await;
    let call = openai(&[("c", "svc", json!({}))]);
    for _ in 0..3 {
        let a = server.execute(&call, &Value::Null).await;
        expect_error(&results(&a.body, &["c"])[0], "backend_unreachable");
    }
    let a = server.execute(&call, &Value::Null).await;
    let r = results(&a.body, &["c"]);
    let e = expect_error(&r[0], "backend_unavailable");
    assert_eq!(e["retryable"], true);
    let after = e["retry_after_ms"].as_u64().unwrap();
    assert!(after > 0 && after <= 600, "{e}");
    // The error kind above says the open breaker answered; the bound only catches a hang.
    assert!(a.elapsed < ms(2000), "fails fast: {:?}", a.elapsed);
    let tools = server.get("/v1/tools").await.body;
    assert_eq!(tools["tools"][0]["breaker"]["status"]["state"], "open", "{tools}");
    // The backend comes up; after `open_for` one probe goes through and closes the breaker.
    let up = faults::ok_server(addr).await;
    tokio::time::sleep(ms(700)).await;
    let a = server.execute(&call, &Value::Null).await;
    assert_eq!(kind(&results(&a.body, &["c"])[0]), "ok", "{}", a.body);
    let tools = server.get("/v1/tools").await.body;
    assert_eq!(
        tools["tools"][0]["breaker"]["status"],
        json!({"state": "closed", "consecutive_failures": 0}),
        "{tools}"
    );
    server.stop().await;
    drop(up);
    fx.finish().await;
}

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// A config file for the real binary: debug logs for toolwire, no file watching, `extra` TOML.
fn write_binary_config(fx: &Fixture, extra: &str) -> std::path::PathBuf {
    let path = fx.dir.path().join("toolwire.toml");
    std::fs::write(
        &path,
        format!("log = \"info,toolwire=debug\"\n{extra}\n[reload]\nwatch = false\n"),
    )
    .unwrap();
    path
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// I5 for the binary's stderr.
fn assert_no_secret_in(stderr: &str, fx: &Fixture) {
    assert!(!stderr.is_empty());
    for needle in [&fx.secret, &fx.canary] {
        assert!(!stderr.contains(needle.as_str()), "I5: `{needle}` in the server's logs");
    }
}
