//! The real `toolwire` binary: `check` exit codes and output, env overrides, `schemas`,
//! `serve` on a port chosen by the OS, and a clean exit on SIGTERM.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::binary::Binary;

const BIN: &str = env!("CARGO_BIN_EXE_toolwire");

fn toolwire(args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(args).env_remove("RUST_LOG");
    // Unrelated TOOLWIRE_* variables must never break the server.
    cmd.env("TOOLWIRE_SOMETHING_UNRELATED", "x");
    cmd
}

#[test]
fn version_flag_prints_the_version() {
    let out = toolwire(&["--version"]).output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("toolwire {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn check_on_the_shipped_examples_prints_the_table_and_exits_0() {
    let out = toolwire(&["check", "--config", "config/toolwire.toml", "--tools-dir", "tools.d"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("NAME"), "{stdout}");
    assert!(
        stdout.contains("get_weather") && stdout.contains("convert_units"),
        "{stdout}"
    );
    assert!(stdout.contains("2 tools, 0 errors, 0 warnings"), "{stdout}");
}

#[test]
fn check_on_a_broken_directory_lists_every_error_and_exits_1() {
    let out = toolwire(&["check", "--tools-dir", "tests/fixtures/bad_tools"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let errors = stdout.lines().filter(|l| l.contains(": error:")).count();
    assert_eq!(errors, 18, "{stdout}");
    assert!(stdout.contains("d_broken.json:2:16: error: invalid JSON"), "{stdout}");
    let warnings = stdout.lines().filter(|l| l.contains(": warning:")).count();
    assert!(
        stdout
            .trim_end()
            .ends_with(&format!("0 tools, 18 errors, {warnings} warnings")),
        "{stdout}"
    );
}

#[test]
fn check_json_report_is_machine_readable() {
    let out = toolwire(&["check", "--json", "--tools-dir", "tests/fixtures/bad_tools"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], false);
    let diags = v["diagnostics"].as_array().unwrap();
    assert_eq!(diags.iter().filter(|d| d["severity"] == "error").count(), 18);
    assert_eq!(v["diagnostics"][0]["severity"], "error");
}

#[test]
fn check_reports_quality_warnings_without_failing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("t.toml"),
        "[[tools]]\nname = \"weather\"\ndescription = \"Weather.\"\nparameters = { city = \"string\", units = \"string?\" }\nhttp = { url = \"http://127.0.0.1:1/{city}\" }\n",
    )
    .unwrap();
    let out = toolwire(&["check", "--tools-dir", dir.path().to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    for fragment in [
        "description is vague",
        "does not say what the tool does",
        "parameter `city` has no description",
        "parameter `units` has no description",
    ] {
        assert!(stdout.contains(fragment), "missing {fragment}: {stdout}");
    }
    assert!(stdout.contains("1 tools, 0 errors, 4 warnings"), "{stdout}");
}

#[test]
fn environment_overrides_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, "listen = \"127.0.0.1:9999\"\ntools_dir = \"/nonexistent\"\n").unwrap();
    let out = toolwire(&["check", "--config", cfg.to_str().unwrap()])
        .env("TOOLWIRE_TOOLS_DIR", "tests/fixtures/good_tools")
        .env("TOOLWIRE_LISTEN", "127.0.0.1:7777")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("tools dir: tests/fixtures/good_tools  listen: 127.0.0.1:7777"),
        "{stdout}"
    );
}

#[test]
fn unknown_key_in_the_config_file_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, "[limits]\nbody_byte = 5\n").unwrap();
    let out = toolwire(&["check", "--config", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("body_byte"));
}

#[test]
fn schemas_prints_the_provider_array() {
    let out = toolwire(&[
        "schemas",
        "--provider",
        "claude",
        "--tools-dir",
        "tests/fixtures/good_tools",
        "--tags",
        "weather",
    ])
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let arr = v.as_array().unwrap();
    assert_eq!(arr.len(), 1);
    assert_eq!(arr[0]["name"], "get_weather");
    assert_eq!(arr[0]["input_schema"]["type"], "object");
    let bad = toolwire(&["schemas", "--provider", "nope", "--tools-dir", "tools.d"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown provider"));
}

/// `serve` with `TOOLWIRE_LISTEN=127.0.0.1:0` binds a free port, answers `/healthz`, and exits
/// 0 on SIGTERM; `TOOLWIRE_WORKERS=3` gives it three serving worker threads.
#[test]
fn serve_binds_from_env_answers_and_stops_on_sigterm() {
    let mut bin = serve(&[("TOOLWIRE_WORKERS", "3")]);
    let listening = bin
        .stderr()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["message"] == "Listening.")
        .expect("a Listening log line");
    assert_eq!(listening["workers"], 3, "{listening}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let body: serde_json::Value = rt.block_on(async {
        reqwest::Client::builder()
            .no_proxy()
            .build()
            .unwrap()
            .get(bin.url("/healthz"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    });
    assert_eq!(body["status"], "ok");
    // Answered, so the workers are running.
    let mut workers: Vec<String> = std::fs::read_dir(format!("/proc/{}/task", bin.pid()))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.unwrap().path().join("comm")).ok())
        .map(|c| c.trim().to_owned())
        .filter(|c| c.starts_with("tw-worker-"))
        .collect();
    workers.sort();
    assert_eq!(workers, ["tw-worker-0", "tw-worker-1", "tw-worker-2"]);
    stop(&mut bin);
}

/// `toolwire serve` with the shipped config and tools, JSON logs, and `env` (plus an unrelated
/// `TOOLWIRE_*` variable, which must never break the server) on `127.0.0.1:0`.
fn serve(env: &[(&str, &str)]) -> Binary {
    let mut env = env.to_vec();
    env.push(("TOOLWIRE_SOMETHING_UNRELATED", "x"));
    Binary::start_with_env(Path::new("config/toolwire.toml"), Path::new("tools.d"), &env)
}

/// SIGTERM, then the exit status: 0, within 10 s.
fn stop(bin: &mut Binary) {
    bin.signal(nix::sys::signal::Signal::SIGTERM);
    let status = bin
        .wait_exit(Duration::from_secs(10))
        .expect("server did not stop on SIGTERM");
    assert!(status.success(), "{status:?}");
}

/// `toolwire_busy_poll_spins_total{outcome="caught"}` + `{outcome="ran_out"}` in a `/metrics`
/// text, as (caught, ran out).
fn spins(metrics: &str) -> (u64, u64) {
    let count = |outcome: &str| {
        let series = format!("toolwire_busy_poll_spins_total{{outcome=\"{outcome}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(series.as_str()))
            .map_or(0, |v| v.trim().parse().unwrap())
    };
    (count("caught"), count("ran_out"))
}

/// Busy polling (docs/operations.md#busy-polling) on the real server, counted by
/// `toolwire_busy_poll_spins_total`: each request arms a spin; spins that never see the next
/// request in time (requests 100 ms apart, a 10 ms window) stop once the last 8 ran out, but
/// for one probe in 16; an idle server does not spin at all (without that rule it would spin
/// ~100 times a second).
#[test]
fn busy_polling_spins_after_requests_stops_when_it_does_not_pay_and_never_when_idle() {
    let mut bin = serve(&[("TOOLWIRE_WORKERS", "1"), ("TOOLWIRE_BUSY_POLL__WINDOW", "10ms")]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let requests = |n: usize| {
        rt.block_on(async {
            for _ in 0..n {
                let resp = client.get(bin.url("/healthz")).send().await.unwrap();
                assert!(resp.status().is_success());
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
    };
    let scrape = || {
        rt.block_on(async {
            let text = client
                .get(bin.url("/metrics"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            spins(&text)
        })
    };
    // A new worker spins until its spins show they do not pay off.
    requests(8);
    let (caught1, ran_out1) = scrape();
    assert!(
        ran_out1 >= 6,
        "8 requests 100 ms apart: {ran_out1} spins ran out, {caught1} caught"
    );
    // Then only the probes.
    requests(16);
    let (caught2, ran_out2) = scrape();
    let probes = (caught2 + ran_out2) - (caught1 + ran_out1);
    assert!(
        probes <= 3,
        "spins that do not pay off went on: {probes} spins for 17 requests"
    );
    // Idle: nothing arms a spin (the scrape before may arm one).
    std::thread::sleep(Duration::from_millis(1000));
    let (caught3, ran_out3) = scrape();
    let idle = (caught3 + ran_out3) - (caught2 + ran_out2);
    assert!(idle <= 1, "an idle worker spun {idle} times in 1 s");
    stop(&mut bin);
}
