//! The after-checks of `docs/reliability.md#invariants` (I1–I5) and a per-test fixture that sets
//! them up.
//!
//! - **I1** [`results`]: exactly one result per call, ids preserved, in call order.
//! - **I2** [`Fixture::finish`]: no process carrying this test's marker is left (every exec tool
//!   of a fixture gets `TW_FAULT_MARK=<unique>` in its environment, inherited by descendants),
//!   no zombie child of the test process, and the test process's fd count back near its
//!   baseline.
//! - **I3** [`Hwm`]: growth of the peak RSS (`VmHWM`, reset through `/proc/self/clear_refs`).
//! - **I4** [`assert_within`]: wall time ≤ budget + [`SLACK`].
//! - **I5** [`Fixture::finish`]: the fixture's secret (a `${file:}` value every tool uses) and
//!   its canary argument never appear in the captured logs.
//!
//! Fixtures serialise the tests of a binary (one global async lock): fd counts, process scans
//! and peak RSS are per process, and timing margins hold better on a loaded 2-core machine.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::{Mutex, MutexGuard};
use toolwire::config::ServerConfig;

use super::logs;

/// What I4 allows on top of a budget (scheduling on a loaded 2-core machine). Every budget plus
/// this stays well under what the test would take without the behaviour it checks (a 30 s
/// hang or sleep, a 5 s timeout); a test whose alternative is closer asserts its own bound.
pub const SLACK: Duration = Duration::from_millis(2000);

/// fds the test process may hold above its baseline after a test (runtime internals).
pub const FD_SLACK: usize = 8;

/// The marker variable set on every exec tool of a fixture.
pub const MARK_VAR: &str = "TW_FAULT_MARK";

/// The faultproc fixture binary.
pub use super::faultproc::faultproc;

static SERIAL: Mutex<()> = Mutex::const_new(());

/// One test's temp dir, tools dir, secret, canary and baselines.
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub tools: PathBuf,
    /// Unique per fixture; found in the environment of its tool processes.
    pub mark: String,
    /// The content of `secret.txt` in the tools dir; tools reference it as `${file:secret.txt}`.
    pub secret: String,
    /// A distinctive argument value tests pass to tools.
    pub canary: String,
    fd_baseline: usize,
    _serial: MutexGuard<'static, ()>,
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{:016x}", rand::random::<u64>())
}

impl Fixture {
    /// Takes the serial lock, creates the dirs and records the baselines.
    pub async fn new() -> Self {
        let serial = SERIAL.lock().await;
        logs::capture();
        let dir = tempfile::tempdir().unwrap();
        let tools = dir.path().join("tools.d");
        std::fs::create_dir(&tools).unwrap();
        let secret = unique("sekrit");
        std::fs::write(tools.join("secret.txt"), format!("{secret}\n")).unwrap();
        let fx = Fixture {
            tools,
            mark: unique("mark"),
            secret,
            canary: unique("canary"),
            fd_baseline: fd_count(),
            dir,
            _serial: serial,
        };
        assert!(fx.marked_pids().is_empty());
        fx
    }

    /// Writes `{"tools": tools}` to `tools.d/<file>` (JSON).
    pub fn write_tools(&self, file: &str, tools: &Value) {
        std::fs::write(self.tools.join(file), json!({ "tools": tools }).to_string()).unwrap();
    }

    /// An exec tool: `exec` (at least `command`) gets the marker and the secret in its `env`;
    /// `extra` keys are merged into the tool.
    pub fn exec_tool(&self, name: &str, mut exec: Value, extra: Value) -> Value {
        let env = exec["env"].as_object().cloned().unwrap_or_default();
        let mut env = Value::Object(env);
        env[MARK_VAR] = json!(self.mark);
        env["TW_SECRET"] = json!("${file:secret.txt}");
        exec["env"] = env;
        tool(name, "exec", exec, extra)
    }

    /// An HTTP tool sending the secret as a header; `extra` keys are merged into the tool.
    pub fn http_tool(&self, name: &str, mut http: Value, extra: Value) -> Value {
        let headers = http["headers"].as_object().cloned().unwrap_or_default();
        let mut headers = Value::Object(headers);
        headers["X-Api-Key"] = json!("${file:secret.txt}");
        http["headers"] = headers;
        if http.get("method").is_none() {
            http["method"] = json!("GET");
        }
        tool(name, "http", http, extra)
    }

    /// The embedded defaults with this fixture's tools dir, a short drain, no file watching.
    pub fn config(&self) -> ServerConfig {
        let mut cfg = super::server::config_for(&self.tools);
        cfg.shutdown.drain = toolwire::config::HumanDuration(Duration::from_secs(2));
        cfg.reload.watch = false;
        cfg
    }

    /// Live (non-zombie) processes whose environment carries this fixture's marker.
    pub fn marked_pids(&self) -> Vec<u32> {
        marked_pids(&format!("{MARK_VAR}={}", self.mark))
    }

    /// Waits until no process of this fixture is left (I2), within `limit`.
    pub async fn assert_no_processes_within(&self, limit: Duration) {
        let start = Instant::now();
        loop {
            let left = self.marked_pids();
            if left.is_empty() {
                return;
            }
            assert!(
                start.elapsed() < limit,
                "I2: tool processes still alive after {limit:?}: {left:?}"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// The after-checks every test ends with: I2 (no marked process, no zombie child, fds near
    /// the baseline) and I5 (neither the secret nor the canary in the logs).
    pub async fn finish(self) {
        self.assert_no_processes_within(Duration::from_secs(3)).await;
        let me = std::process::id();
        let start = Instant::now();
        loop {
            let zombies = super::procs::zombie_children_of(me);
            let fds = fd_count();
            if zombies.is_empty() && fds <= self.fd_baseline + FD_SLACK {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(3),
                "I2: zombies {zombies:?}; fds {fds} (baseline {}, slack {FD_SLACK})",
                self.fd_baseline
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        logs::assert_absent(&[&self.secret, &self.canary]);
    }
}

/// A tool object: name, a clear description, an open object schema, the backend, `extra`.
pub fn tool(name: &str, kind: &str, backend: Value, extra: Value) -> Value {
    let mut t = json!({
        "name": name,
        "description": format!("Test tool `{name}` for the reliability checklist; returns what its backend returns."),
        "parameters": {"type": "object", "properties": {}},
    });
    t[kind] = backend;
    if let Value::Object(extra) = extra {
        for (k, v) in extra {
            t[k] = v;
        }
    }
    t
}

/// Open file descriptors of the test process.
pub fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd").map(Iterator::count).unwrap_or(0)
}

/// Live processes whose environment has the entry `needle` (`NAME=value`).
pub fn marked_pids(needle: &str) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| super::procs::pid_alive(*pid))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()))
        })
        .collect()
}

/// I1: `body.results` has exactly one result per id, in order; returns them.
pub fn results(body: &Value, ids: &[&str]) -> Vec<Value> {
    let results = body["results"]
        .as_array()
        .unwrap_or_else(|| panic!("no results: {body}"))
        .clone();
    let got: Vec<&str> = results.iter().map(|r| r["id"].as_str().unwrap_or("<none>")).collect();
    assert_eq!(got, ids, "I1: one result per call, ids preserved, in order: {body}");
    results
}

/// The error kind of a result (`"ok"` for a success).
pub fn kind(result: &Value) -> &str {
    if result["ok"] == true {
        "ok"
    } else {
        result["error"]["kind"].as_str().unwrap_or("<none>")
    }
}

/// Asserts an error result of `kind`; returns its `error` object.
pub fn expect_error<'a>(result: &'a Value, want: &str) -> &'a Value {
    assert_eq!(result["ok"], false, "{result}");
    assert_eq!(kind(result), want, "{result}");
    assert!(
        result["error"]["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{result}"
    );
    &result["error"]
}

/// I4: `elapsed` ≤ `budget` + [`SLACK`].
pub fn assert_within(elapsed: Duration, budget: Duration, what: &str) {
    assert!(
        elapsed <= budget + SLACK,
        "I4: {what} took {elapsed:?}, budget {budget:?} + {SLACK:?}"
    );
}

/// I3: the peak RSS of the test process from a reset point.
pub struct Hwm {
    base_kib: u64,
}

impl Hwm {
    /// Resets the peak (`/proc/self/clear_refs` ← 5) and records the current RSS as the base.
    pub fn start() -> Self {
        let _ = std::fs::write("/proc/self/clear_refs", "5");
        Hwm {
            base_kib: status_kib("VmRSS").max(1),
        }
    }

    /// Peak RSS growth since [`Hwm::start`], in MiB.
    pub fn growth_mib(&self) -> u64 {
        status_kib("VmHWM").saturating_sub(self.base_kib) / 1024
    }
}

/// A `kB` field of `/proc/self/status`.
pub fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The request-error shape: `{"error": {"code", "message", …}}` with this code.
pub fn assert_error_shape(body: &Value, code: &str) {
    assert_eq!(body["error"]["code"], code, "{body}");
    assert!(
        body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
}
