//! `make bench` (`cargo bench --bench overhead`): what toolwire adds on top of calling a backend
//! yourself, measured side by side in one run on one machine, at a fixed load.
//!
//! | cell | what one request is |
//! |---|---|
//! | `a`  | `POST /echo` straight to a loopback axum backend (reqwest) |
//! | `b1` | `POST /v1/execute`: an OpenAI Chat completion with 1 call of an HTTP tool on that backend |
//! | `b8` | the same with 8 parallel calls in one completion |
//! | `c0` | spawning `/bin/echo hello` directly with `tokio::process` (cleared env, piped stdout/stderr) |
//! | `c1` | `POST /v1/tools/exec_echo/call`: an exec tool running that same `/bin/echo hello` |
//! | `e1` | toolwire's subprocess backend alone (`backend::subprocess::call_in`, no HTTP) running `exec_echo`, spawned directly: what a server without privileges does (the exec shim has nothing to do) |
//! | `e2` | the same through the exec shim (`toolwire __exec-shim`): what a server running as root or with capabilities does |
//! | `s`  | in-process, no server: assembling a streamed completion (`provider::stream`) — raw SSE text → events → the non-streamed body, for OpenAI Chat (100,000 argument fragments) and Anthropic (100,000 `input_json_delta`s); reported per event and per MiB of text |
//!
//! Every cell gets a warm-up (not recorded), then a fixed number of requests issued by a fixed
//! number of client tasks, each waiting for its answer before sending the next (closed loop).
//! The whole sequence of cells is repeated `--rounds` times (interleaved, so slow phases of a
//! shared machine hit every cell) and the rounds are pooled. Each latency is recorded;
//! percentiles are exact (nearest rank over the sorted samples). Everything is bounded: a
//! request times out after 30 s and a cell stops issuing requests after `--max-secs`.
//!
//! Besides wall-clock figures, each cell records the **on-CPU time** of the client, toolwire and
//! backend threads (`/proc/self/task/*/schedstat`, attributed by thread name) and of the spawned
//! programs. CPU per call hardly moves when other processes compete for the machine, so it is
//! the figure to trust on a busy or small host; the run's total run-queue wait is printed too.
//!
//! Three runtimes, so no component gets the others' scheduler for free:
//! - **client** (the load generator, the direct spawns of `c0` and the backend calls of `e1` and
//!   `e2`): multi-thread, default size;
//! - **toolwire**: the real server (`server::bind` + `server::serve` on 127.0.0.1:0, as
//!   `toolwire serve` and tests/it/common/server.rs do) on its own multi-thread runtime, default
//!   size, like `toolwire serve`; log filter `warn` (as with `log = "warn"`);
//! - **backend**: a current-thread runtime on its own OS thread (a small, separate service).
//!
//! They still share the machine's cores: on a small machine a toolwire request competes for CPU
//! with the client and the backend, as it would in a sidecar deployment.
//!
//! Options (flags after `--`, or environment): `--requests N` (`BENCH_REQUESTS`, 2000),
//! `--concurrency N` (`BENCH_CONCURRENCY`, 16), `--warmup N` (`BENCH_WARMUP`, 200),
//! `--rounds N` (`BENCH_ROUNDS`, 3), `--max-secs N` (`BENCH_MAX_SECS`, 60),
//! `--only a,b1,…` (`BENCH_ONLY`, all; handy under `perf record`),
//! `--log FILTER` (`BENCH_LOG`, `warn`; `RUST_LOG` wins).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::header::CONTENT_TYPE;
use axum::routing::post;
use axum::serve::ListenerExt as _;
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use toolwire::api::AppState;
use toolwire::backend::Attempt;
use toolwire::backend::shim::ExecShim;
use toolwire::backend::subprocess::ExecContext;
use toolwire::config::ServerConfig;
use toolwire::config::server::LogFormat;
use toolwire::executor::Executor;
use toolwire::registry::Registry;
use toolwire::tool::{BackendSpec, Tool};

/// What the backend answers to every request.
const BACKEND_ANSWER: &str = r#"{"ok":true,"value":42}"#;
/// What a tool call's arguments are, everywhere.
const ARGUMENTS: &str = r#"{"q":"hello"}"#;
/// The program of the exec cells.
const ECHO: &str = "/bin/echo";
/// Client-side bound on one request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

const USAGE: &str = "usage: cargo bench --bench overhead [-- --requests N] [--concurrency N] [--warmup N] [--max-secs N] [--rounds N] [--only a,b1,b8,c0,c1,e1,e2] [--log FILTER]
  environment: BENCH_REQUESTS, BENCH_CONCURRENCY, BENCH_WARMUP, BENCH_MAX_SECS, BENCH_ROUNDS, BENCH_ONLY, BENCH_LOG";

/// The fixed load.
#[derive(Debug, Clone)]
struct Settings {
    requests: usize,
    concurrency: usize,
    warmup: usize,
    max_secs: u64,
    rounds: usize,
    /// Cells to run (empty: all).
    only: Vec<String>,
    log: String,
}

impl Settings {
    /// Defaults, then the environment, then the command line. `cargo bench` adds `--bench`.
    fn parse() -> Result<Self, String> {
        let env_num = |name: &str, default: u64| -> Result<u64, String> {
            std::env::var(name).ok().map_or(Ok(default), |v| {
                v.parse().map_err(|_| format!("{name}={v} is not a number"))
            })
        };
        let mut s = Settings {
            requests: usize::try_from(env_num("BENCH_REQUESTS", 2000)?).map_err(|e| e.to_string())?,
            concurrency: usize::try_from(env_num("BENCH_CONCURRENCY", 16)?).map_err(|e| e.to_string())?,
            warmup: usize::try_from(env_num("BENCH_WARMUP", 200)?).map_err(|e| e.to_string())?,
            max_secs: env_num("BENCH_MAX_SECS", 60)?,
            rounds: usize::try_from(env_num("BENCH_ROUNDS", 3)?).map_err(|e| e.to_string())?,
            only: std::env::var("BENCH_ONLY").map(|v| split_cells(&v)).unwrap_or_default(),
            log: std::env::var("BENCH_LOG").unwrap_or_else(|_| "warn".to_owned()),
        };
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
            let num = |v: String, name: &str| v.parse::<u64>().map_err(|_| format!("{name} {v} is not a number"));
            match flag.as_str() {
                "--bench" => {}
                "-h" | "--help" => return Err(String::new()),
                "--requests" => s.requests = usize::try_from(num(value(&flag)?, &flag)?).map_err(|e| e.to_string())?,
                "--concurrency" => {
                    s.concurrency = usize::try_from(num(value(&flag)?, &flag)?).map_err(|e| e.to_string())?;
                }
                "--warmup" => s.warmup = usize::try_from(num(value(&flag)?, &flag)?).map_err(|e| e.to_string())?,
                "--max-secs" => s.max_secs = num(value(&flag)?, &flag)?,
                "--rounds" => s.rounds = usize::try_from(num(value(&flag)?, &flag)?).map_err(|e| e.to_string())?,
                "--log" => s.log = value(&flag)?,
                "--only" => s.only = split_cells(&value(&flag)?),
                other => return Err(format!("unknown argument `{other}`")),
            }
        }
        if s.requests == 0 || s.concurrency == 0 || s.max_secs == 0 || s.rounds == 0 {
            return Err("--requests, --concurrency, --max-secs and --rounds must be at least 1".to_owned());
        }
        if let Some(bad) = s.only.iter().find(|k| !CELLS.iter().any(|c| c.0 == k.as_str())) {
            return Err(format!("--only: no cell `{bad}` (cells: a, b1, b8, c0, c1, e1, e2)"));
        }
        Ok(s)
    }
}

fn split_cells(v: &str) -> Vec<String> {
    v.split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(str::to_owned)
        .collect()
}

fn main() {
    let settings = match Settings::parse() {
        Ok(s) => s,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("error: {e}");
            }
            eprintln!("{USAGE}");
            std::process::exit(if e.is_empty() { 0 } else { 2 });
        }
    };
    toolwire::telemetry::init(&settings.log, LogFormat::Pretty);

    let backend = Backend::start();
    let tools_dir = tempfile::tempdir().unwrap();
    std::fs::write(tools_dir.path().join("bench.toml"), tools_toml(backend.addr)).unwrap();
    let server_rt = runtime(SERVER_THREADS);
    let server = Server::start(&server_rt, tools_dir.path(), &settings.log);
    let client_rt = runtime(CLIENT_THREADS);

    let cpu_before = cpu_now();
    let (s, backend_addr, server_addr) = (settings.clone(), backend.addr, server.addr);
    let exec_tool = Arc::clone(server.exec_tool.as_ref().unwrap_or_else(|| panic!("no exec_echo tool")));
    // Spawned, not run by `block_on`, so every client poll happens on a `tw-client` thread.
    let rounds = client_rt.block_on(async move {
        tokio::spawn(run_all(s, backend_addr, server_addr, exec_tool))
            .await
            .unwrap()
    });
    let whole_run = cpu_now().since(&cpu_before);
    print_report(&settings, &rounds, &whole_run);
    stream_assembly_cell();

    client_rt.block_on(server.stop());
    server_rt.shutdown_timeout(Duration::from_secs(5));
    backend.stop();
}

/// Thread names (`/proc/self/task/*/comm`), by which CPU time is attributed.
const CLIENT_THREADS: &str = "tw-client";
const SERVER_THREADS: &str = "tw-server";
/// toolwire's serving workers (`server::workers`), started by `serve` itself.
const WORKER_THREADS: &str = "tw-worker";
const BACKEND_THREAD: &str = "tw-backend";

/// A multi-thread runtime of the default size (one worker per CPU, like `toolwire serve`'s
/// `Runtime::new()`), its threads named `name`.
fn runtime(name: &str) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name(name)
        .build()
        .unwrap()
}

// ---------------------------------------------------------------------------------------------
// CPU accounting: on-CPU time per thread from `/proc/self/task/*/schedstat` (ns), attributed by
// thread name; children (the spawned programs, once reaped) from `/proc/self/stat`.

#[derive(Debug, Clone, Copy, Default)]
struct Cpu {
    client: u64,
    toolwire: u64,
    backend: u64,
    other: u64,
    /// Reaped children (user + system), at the kernel's 10 ms tick resolution.
    children: u64,
    /// Time our threads were runnable but waiting for a CPU (contention from anything).
    waiting: u64,
}

impl Cpu {
    fn since(&self, before: &Cpu) -> Cpu {
        Cpu {
            client: self.client.saturating_sub(before.client),
            toolwire: self.toolwire.saturating_sub(before.toolwire),
            backend: self.backend.saturating_sub(before.backend),
            other: self.other.saturating_sub(before.other),
            children: self.children.saturating_sub(before.children),
            waiting: self.waiting.saturating_sub(before.waiting),
        }
    }

    fn add(&mut self, o: &Cpu) {
        self.client += o.client;
        self.toolwire += o.toolwire;
        self.backend += o.backend;
        self.other += o.other;
        self.children += o.children;
        self.waiting += o.waiting;
    }

    /// In-process CPU (every thread of this process).
    fn threads(&self) -> u64 {
        self.client + self.toolwire + self.backend + self.other
    }
}

fn cpu_now() -> Cpu {
    let mut cpu = Cpu::default();
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for task in tasks.flatten() {
            let path = task.path();
            let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
            let sched = std::fs::read_to_string(path.join("schedstat")).unwrap_or_default();
            let mut fields = sched.split_whitespace().map(|f| f.parse::<u64>().unwrap_or(0));
            let (on_cpu, waiting) = (fields.next().unwrap_or(0), fields.next().unwrap_or(0));
            cpu.waiting += waiting;
            let comm = comm.trim();
            let slot = if comm.starts_with(CLIENT_THREADS) {
                &mut cpu.client
            } else if comm.starts_with(SERVER_THREADS) || comm.starts_with(WORKER_THREADS) {
                &mut cpu.toolwire
            } else if comm.starts_with(BACKEND_THREAD) {
                &mut cpu.backend
            } else {
                &mut cpu.other
            };
            *slot += on_cpu;
        }
    }
    // Fields 16 and 17 of /proc/self/stat: cutime, cstime, in USER_HZ ticks (100 per second).
    if let Ok(stat) = std::fs::read_to_string("/proc/self/stat")
        && let Some((_, rest)) = stat.rsplit_once(')')
    {
        let f: Vec<u64> = rest.split_whitespace().map(|x| x.parse().unwrap_or(0)).collect();
        cpu.children = (f.get(13).copied().unwrap_or(0) + f.get(14).copied().unwrap_or(0)) * 10_000_000;
    }
    cpu
}

// ---------------------------------------------------------------------------------------------
// The pieces under test.

/// Connections the backend has accepted: shows whether the pools reuse connections.
static BACKEND_CONNECTIONS: AtomicUsize = AtomicUsize::new(0);

/// The loopback backend: a current-thread runtime on its own OS thread.
struct Backend {
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Backend {
    fn start() -> Self {
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(BACKEND_THREAD.to_owned())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async move {
                    // Same bind as toolwire's (explicit backlog): b8 opens up to 8 × concurrency
                    // connections at once during the warm-up.
                    let listener = toolwire::server::bind("127.0.0.1:0".parse().unwrap(), 4096).unwrap();
                    addr_tx.send(listener.local_addr().unwrap()).unwrap();
                    let listener = listener.tap_io(|_| {
                        BACKEND_CONNECTIONS.fetch_add(1, Ordering::Relaxed);
                    });
                    let app = Router::new().route(
                        "/echo",
                        post(|_body: Bytes| async { ([(CONTENT_TYPE, "application/json")], BACKEND_ANSWER) }),
                    );
                    axum::serve(listener, app)
                        .with_graceful_shutdown(async move {
                            let _ = stopped.await;
                        })
                        .await
                        .unwrap();
                });
            })
            .unwrap();
        let addr = addr_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        Backend { addr, stop, thread }
    }

    fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}

/// The tools under test: an HTTP tool on the backend and an exec tool running `/bin/echo`.
fn tools_toml(backend: SocketAddr) -> String {
    format!(
        r#"[[tools]]
name = "backend_echo"
description = "Sends the query to the benchmark's loopback backend and returns its JSON answer."
parameters = {{ q = {{ type = "string", description = "Any text." }} }}
[tools.http]
method = "POST"
url = "http://{backend}/echo"

[[tools]]
name = "exec_echo"
description = "Runs /bin/echo with the query and returns what it printed."
parameters = {{ q = {{ type = "string", description = "Any text." }} }}
[tools.exec]
command = ["{ECHO}"]
args = ["{{q}}"]
"#
    )
}

/// The real server on 127.0.0.1:0, on its own runtime (as tests/it/common/server.rs starts it).
struct Server {
    addr: SocketAddr,
    /// The loaded `exec_echo` tool, for the cells that call the subprocess backend directly.
    exec_tool: Option<Arc<Tool>>,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    fn start(rt: &tokio::runtime::Runtime, tools_dir: &std::path::Path, log: &str) -> Self {
        let mut config = ServerConfig::from_figment(ServerConfig::figment_without_env(None).unwrap()).unwrap();
        config.tools_dir = tools_dir.to_owned();
        config.log = log.to_owned();
        let registry = match Registry::load(&config.tools_dir, &config.defaults) {
            Ok(r) => r,
            Err(diagnostics) => {
                for d in diagnostics {
                    eprintln!("{d}");
                }
                panic!("the benchmark's tools do not load");
            }
        };
        let exec_tool = registry.get("exec_echo").cloned();
        let _guard = rt.enter();
        let listener = toolwire::server::bind("127.0.0.1:0".parse().unwrap(), config.listen_backlog).unwrap();
        let addr = listener.local_addr().unwrap();
        let executor = Executor::new(&config).unwrap();
        let state = AppState::new(config, registry, executor);
        let (stop, stopped) = oneshot::channel::<()>();
        let task = rt.spawn(toolwire::server::serve(listener, state, async move {
            let _ = stopped.await;
        }));
        Server {
            addr,
            exec_tool,
            stop,
            task,
        }
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        match tokio::time::timeout(Duration::from_secs(10), self.task).await {
            Ok(Ok(Ok(()))) => {}
            other => eprintln!("warning: the server did not stop cleanly: {other:?}"),
        }
    }
}

/// Stands for the request number in [`execute_template`].
const REQ: &str = "__REQ__";

/// Request numbers, so every completion carries new call ids: a repeated id would be answered
/// from the replay store (`replayed: true`) without running the tool.
static NEXT_REQUEST: AtomicUsize = AtomicUsize::new(0);

/// An OpenAI Chat completion with `n` calls of `backend_echo`, as a `POST /v1/execute` body,
/// with [`REQ`] in each call id.
fn execute_template(n: usize) -> String {
    let calls: Vec<Value> = (0..n)
        .map(|i| {
            json!({
                "id": format!("call_{REQ}_{i}"),
                "type": "function",
                "function": {"name": "backend_echo", "arguments": ARGUMENTS},
            })
        })
        .collect();
    let completion = json!({
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-4o-2024-08-06",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": null, "tool_calls": calls, "refusal": null},
            "logprobs": null,
            "finish_reason": "tool_calls",
        }],
        "usage": {"prompt_tokens": 120, "completion_tokens": 18 * n, "total_tokens": 120 + 18 * n},
    });
    json!({"provider": "openai_chat", "completion": completion}).to_string()
}

/// [`execute_template`] with a fresh request number.
fn execute_body(template: &str) -> Bytes {
    let n = NEXT_REQUEST.fetch_add(1, Ordering::Relaxed).to_string();
    Bytes::from(template.replace(REQ, &n))
}

// ---------------------------------------------------------------------------------------------
// One request of each cell. `Ok` only for a complete, successful answer.

type Check = Result<(), String>;

async fn post_json(client: &reqwest::Client, url: &str, body: &Bytes) -> Result<Bytes, String> {
    let resp = client
        .post(url)
        .header(CONTENT_TYPE, "application/json")
        .body(body.clone())
        .send()
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    let status = resp.status();
    let bytes = resp
        .bytes()
        .await
        .map_err(|e| format!("{url}: reading the body: {e}"))?;
    if !status.is_success() {
        return Err(format!("{url}: {status}: {}", String::from_utf8_lossy(&bytes)));
    }
    Ok(bytes)
}

/// A toolwire answer is 200 even when a call failed; a failed call has `"ok":false`. A
/// `"replayed":true` result did not run (it came from the replay store): also an error here.
fn no_failed_call(bytes: &[u8]) -> Check {
    const FAILED: &[&[u8]] = &[br#""ok":false"#, br#""replayed":true"#];
    for f in FAILED {
        if bytes.windows(f.len()).any(|w| w == *f) {
            return Err(format!(
                "a tool call failed or was not run: {}",
                String::from_utf8_lossy(bytes)
            ));
        }
    }
    Ok(())
}

async fn spawn_echo() -> Check {
    let out = tokio::process::Command::new(ECHO)
        .arg("hello")
        .env_clear()
        .env("PATH", toolwire::backend::subprocess::DEFAULT_PATH)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(REQUEST_TIMEOUT, out).await {
        Ok(Ok(o)) if o.status.success() && o.stdout == b"hello\n" => Ok(()),
        Ok(Ok(o)) => Err(format!("{ECHO}: {} {:?}", o.status, String::from_utf8_lossy(&o.stdout))),
        Ok(Err(e)) => Err(format!("{ECHO}: {e}")),
        Err(_) => Err(format!("{ECHO}: timed out")),
    }
}

/// Cells `e1`/`e2`: one attempt of `exec_echo` through toolwire's subprocess backend, as the
/// executor makes it (the tool's policy, its timeout), and its output checked like `c0`'s.
async fn subprocess_echo(ctx: &ExecContext, tool: &Tool, arguments: &serde_json::Map<String, Value>) -> Check {
    let BackendSpec::Exec(spec) = &tool.backend else {
        return Err("exec_echo is not an exec tool".to_owned());
    };
    let attempt = Attempt {
        call_id: None,
        attempt: 1,
        arguments,
        state: &Value::Null,
        idempotency_key: "bench",
        timeout: tool.policy.timeout,
        policy: &tool.policy,
    };
    let out = toolwire::backend::subprocess::call_in(ctx, spec, &attempt)
        .await
        .map_err(|e| format!("exec_echo: {e}"))?;
    if out.value == json!("hello\n") {
        Ok(())
    } else {
        Err(format!("exec_echo: unexpected output {}", out.value))
    }
}

/// Which request a cell sends.
#[derive(Clone)]
enum Op {
    Direct {
        url: Arc<str>,
        body: Bytes,
    },
    Toolwire {
        url: Arc<str>,
        body: Bytes,
    },
    /// `/v1/execute` with a completion from [`execute_template`], new call ids each time.
    Execute {
        url: Arc<str>,
        template: Arc<str>,
    },
    Spawn,
    /// One attempt of the `exec_echo` tool through toolwire's subprocess backend, no HTTP.
    Backend {
        ctx: ExecContext,
        tool: Arc<Tool>,
        arguments: Arc<serde_json::Map<String, Value>>,
    },
}

impl Op {
    async fn run(&self, client: &reqwest::Client) -> Check {
        match self {
            Op::Direct { url, body } => {
                let bytes = post_json(client, url, body).await?;
                if bytes == BACKEND_ANSWER.as_bytes() {
                    Ok(())
                } else {
                    Err(format!("unexpected backend answer {}", String::from_utf8_lossy(&bytes)))
                }
            }
            Op::Toolwire { url, body } => no_failed_call(&post_json(client, url, body).await?),
            Op::Execute { url, template } => no_failed_call(&post_json(client, url, &execute_body(template)).await?),
            Op::Spawn => spawn_echo().await,
            Op::Backend { ctx, tool, arguments } => subprocess_echo(ctx, tool, arguments).await,
        }
    }
}

/// One full check of each toolwire request before anything is measured, so a misconfigured
/// benchmark fails loudly instead of timing error answers.
async fn verify(client: &reqwest::Client, base: &str) -> Check {
    for n in [1, 8] {
        let body = execute_body(&execute_template(n));
        let bytes = post_json(client, &format!("{base}/v1/execute"), &body).await?;
        let v: Value = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
        let results = v["results"].as_array().ok_or("no results")?;
        let want = json!({"ok": true, "value": 42});
        if results.len() != n || results.iter().any(|r| r["ok"] != json!(true) || r["output"] != want) {
            return Err(format!("/v1/execute with {n} calls: unexpected answer {v}"));
        }
        // The same completion again is answered from the replay store: the timed requests
        // must therefore carry new call ids (they do, see `execute_body`).
        let again: Value = serde_json::from_slice(&post_json(client, &format!("{base}/v1/execute"), &body).await?)
            .map_err(|e| e.to_string())?;
        if again["results"][0]["replayed"] != json!(true) {
            eprintln!("note: a repeated completion was not answered from the replay store");
        }
        if v["messages"].as_array().map(Vec::len) != Some(n) {
            return Err(format!("/v1/execute with {n} calls: expected {n} tool messages: {v}"));
        }
    }
    let body = Bytes::from(format!(r#"{{"arguments":{ARGUMENTS}}}"#));
    let bytes = post_json(client, &format!("{base}/v1/tools/exec_echo/call"), &body).await?;
    let v: Value = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
    if v["ok"] != json!(true) || v["output"].as_str().map(str::trim) != Some("hello") {
        return Err(format!("exec_echo: unexpected answer {v}"));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The load generator.

/// The cells, in the order they run in each round.
const CELLS: &[(&str, &str, usize)] = &[
    ("a", "direct HTTP: reqwest → backend", 1),
    ("b1", "POST /v1/execute, 1 HTTP call", 1),
    ("b8", "POST /v1/execute, 8 parallel HTTP calls", 8),
    ("c0", "direct spawn: tokio::process /bin/echo", 1),
    ("c1", "POST /v1/tools/exec_echo/call (/bin/echo)", 1),
    ("e1", "subprocess backend: exec_echo, spawned directly", 1),
    ("e2", "subprocess backend: exec_echo, through the exec shim", 1),
];

/// One measured cell (one round, or all rounds pooled).
#[derive(Clone)]
struct Row {
    key: &'static str,
    label: &'static str,
    calls_per_request: usize,
    concurrency: usize,
    /// Requests completed (fewer than asked when the time cap hit).
    done: usize,
    errors: usize,
    first_error: Option<String>,
    wall: Duration,
    /// Sorted latencies, in nanoseconds.
    latencies: Vec<u64>,
    capped: bool,
    cpu: Cpu,
    /// Connections the backend accepted (0 when every request reused a pooled one).
    backend_connections: usize,
}

impl Row {
    fn rps(&self) -> f64 {
        self.done as f64 / self.wall.as_secs_f64()
    }

    fn calls(&self) -> f64 {
        (self.done * self.calls_per_request) as f64
    }

    fn calls_per_sec(&self) -> f64 {
        self.rps() * self.calls_per_request as f64
    }

    /// Exact nearest-rank percentile, in nanoseconds.
    fn pct(&self, p: f64) -> u64 {
        if self.latencies.is_empty() {
            return 0;
        }
        let rank = ((p / 100.0) * self.latencies.len() as f64).ceil() as usize;
        self.latencies[rank.clamp(1, self.latencies.len()) - 1]
    }

    /// The same cell's rounds, pooled.
    fn pool(rounds: &[&Row]) -> Row {
        let mut out = rounds[0].clone();
        for r in &rounds[1..] {
            out.done += r.done;
            out.errors += r.errors;
            out.wall += r.wall;
            out.latencies.extend_from_slice(&r.latencies);
            out.capped |= r.capped;
            out.cpu.add(&r.cpu);
            out.backend_connections += r.backend_connections;
            if out.first_error.is_none() {
                out.first_error.clone_from(&r.first_error);
            }
        }
        out.latencies.sort_unstable();
        out
    }
}

/// What one closed-loop run measured.
struct Measured {
    wall: Duration,
    latencies: Vec<u64>,
    errors: usize,
    first_error: Option<String>,
    capped: bool,
}

/// `requests` requests of `op` from `concurrency` closed-loop tasks, for at most `max`.
async fn load(client: &reqwest::Client, op: &Op, requests: usize, concurrency: usize, max: Duration) -> Measured {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let stop_at = started + max;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..concurrency.min(requests) {
        let (client, op, next) = (client.clone(), op.clone(), Arc::clone(&next));
        tasks.spawn(async move {
            let mut lat = Vec::with_capacity(requests / concurrency + 1);
            let (mut errors, mut first_error, mut capped) = (0usize, None, false);
            while next.fetch_add(1, Ordering::Relaxed) < requests {
                if Instant::now() >= stop_at {
                    capped = true;
                    break;
                }
                let t = Instant::now();
                let r = op.run(&client).await;
                lat.push(u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX));
                if let Err(e) = r {
                    errors += 1;
                    first_error.get_or_insert(e);
                }
            }
            (lat, errors, first_error, capped)
        });
    }
    let mut m = Measured {
        wall: Duration::ZERO,
        latencies: Vec::with_capacity(requests),
        errors: 0,
        first_error: None,
        capped: false,
    };
    while let Some(joined) = tasks.join_next().await {
        let (lat, errors, first_error, capped) = joined.unwrap();
        m.latencies.extend(lat);
        m.errors += errors;
        m.capped |= capped;
        if m.first_error.is_none() {
            m.first_error = first_error;
        }
    }
    m.wall = started.elapsed();
    m.latencies.sort_unstable();
    m
}

/// Every round of every cell: `[round][cell]`.
async fn run_all(s: Settings, backend: SocketAddr, toolwire: SocketAddr, exec_tool: Arc<Tool>) -> Vec<Vec<Row>> {
    let client = reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(1024)
        .timeout(REQUEST_TIMEOUT)
        .build()
        .unwrap();
    let base = format!("http://{toolwire}");
    if let Err(e) = verify(&client, &base).await {
        eprintln!("error: the benchmark setup does not work: {e}");
        std::process::exit(1);
    }
    let execute: Arc<str> = Arc::from(format!("{base}/v1/execute"));
    let exec_tool = Arc::clone(&exec_tool);
    let exec_arguments: Arc<serde_json::Map<String, Value>> = Arc::new(serde_json::from_str(ARGUMENTS).unwrap());
    let op = |key: &str| match key {
        "a" => Op::Direct {
            url: Arc::from(format!("http://{backend}/echo")),
            body: Bytes::from_static(ARGUMENTS.as_bytes()),
        },
        "b1" => Op::Execute {
            url: Arc::clone(&execute),
            template: Arc::from(execute_template(1)),
        },
        "b8" => Op::Execute {
            url: Arc::clone(&execute),
            template: Arc::from(execute_template(8)),
        },
        "c0" => Op::Spawn,
        "e1" | "e2" => Op::Backend {
            ctx: ExecContext {
                // `ExecShim::new` always runs the shim, as a privileged server's does.
                shim: (key == "e2").then(|| ExecShim::new(env!("CARGO_BIN_EXE_toolwire"))),
                reaper: None,
            },
            tool: Arc::clone(&exec_tool),
            arguments: Arc::clone(&exec_arguments),
        },
        _ => Op::Toolwire {
            url: Arc::from(format!("{base}/v1/tools/exec_echo/call")),
            body: Bytes::from(format!(r#"{{"arguments":{ARGUMENTS}}}"#)),
        },
    };
    let max = Duration::from_secs(s.max_secs);
    let mut rounds = Vec::new();
    for round in 1..=s.rounds {
        let mut rows = Vec::new();
        for &(key, label, calls_per_request) in CELLS {
            if !s.only.is_empty() && !s.only.iter().any(|k| k == key) {
                continue;
            }
            let op = op(key);
            eprintln!(
                "round {round}/{}: {key}: warm-up {} + {} requests at concurrency {} …",
                s.rounds, s.warmup, s.requests, s.concurrency
            );
            if s.warmup > 0 {
                let w = load(&client, &op, s.warmup, s.concurrency, max).await;
                if w.errors > 0 {
                    eprintln!(
                        "warning: {key}: {} errors during the warm-up; first: {}",
                        w.errors,
                        w.first_error.unwrap_or_default()
                    );
                }
            }
            let (before, conns_before) = (cpu_now(), BACKEND_CONNECTIONS.load(Ordering::Relaxed));
            let m = load(&client, &op, s.requests, s.concurrency, max).await;
            let cpu = cpu_now().since(&before);
            let backend_connections = BACKEND_CONNECTIONS.load(Ordering::Relaxed) - conns_before;
            rows.push(Row {
                key,
                label,
                calls_per_request,
                concurrency: s.concurrency,
                done: m.latencies.len(),
                errors: m.errors,
                first_error: m.first_error,
                wall: m.wall,
                latencies: m.latencies,
                capped: m.capped,
                cpu,
                backend_connections,
            });
        }
        rounds.push(rows);
    }
    rounds
}

// ---------------------------------------------------------------------------------------------
// The report.

/// The machine, for the README: CPU model, CPUs, kernel.
fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".to_owned());
    let load = std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    format!("{cpu}, {cpus} CPUs (nproc), Linux {kernel}; load average before the run: {load}")
}

fn ms(ns: u64) -> String {
    format!("{:.3}", ns as f64 / 1e6)
}

fn us(ns: f64) -> String {
    format!("{:.0}", ns / 1e3)
}

fn signed_us(ns: f64) -> String {
    format!("{:+.0} µs", ns / 1e3)
}

fn ratio(x: f64, base: f64) -> f64 {
    if base > 0.0 { x / base } else { f64::NAN }
}

/// `1.37× (1.21–1.52)`: the pooled ratio, then the lowest and highest of the rounds.
fn ratio_with_range(pooled: f64, per_round: &[f64]) -> String {
    let lo = per_round.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = per_round.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if per_round.len() > 1 {
        format!("{pooled:.2}× ({lo:.2}–{hi:.2})")
    } else {
        format!("{pooled:.2}×")
    }
}

fn print_report(s: &Settings, rounds: &[Vec<Row>], whole_run: &Cpu) {
    let cells = rounds.first().map_or(0, Vec::len);
    let pooled: Vec<Row> = (0..cells)
        .map(|i| Row::pool(&rounds.iter().map(|r| &r[i]).collect::<Vec<_>>()))
        .collect();
    println!();
    println!("machine: {}", machine());
    println!(
        "toolwire {} (release build); per cell and round: warm-up {}, then {} requests at concurrency {}; {} round(s), pooled (cap {} s per cell)",
        env!("CARGO_PKG_VERSION"),
        s.warmup,
        s.requests,
        s.concurrency,
        s.rounds,
        s.max_secs
    );
    println!(
        "runtimes: client multi-thread, toolwire: accepting multi-thread + one serving worker per CPU (as `toolwire serve`), backend current-thread; toolwire log filter `{}`",
        s.log
    );
    println!();
    println!(
        "| cell | scenario | requests | concurrency | calls/req | req/s | calls/s | p50 ms | p99 ms | p99.9 ms | max ms | errors |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &pooled {
        println!(
            "| {} | {} | {}{} | {} | {} | {:.0} | {:.0} | {} | {} | {} | {} | {} |",
            r.key,
            r.label,
            r.done,
            if r.capped { " (capped)" } else { "" },
            r.concurrency,
            r.calls_per_request,
            r.rps(),
            r.calls_per_sec(),
            ms(r.pct(50.0)),
            ms(r.pct(99.0)),
            ms(r.pct(99.9)),
            ms(r.latencies.last().copied().unwrap_or(0)),
            r.errors,
        );
    }
    for r in pooled.iter().filter(|r| r.errors > 0) {
        println!(
            "warning: {}: {} errors; first: {}",
            r.key,
            r.errors,
            r.first_error.as_deref().unwrap_or("")
        );
    }

    println!();
    println!("CPU time per call, µs (on-CPU time of each side's threads; children = the spawned programs):");
    println!();
    println!(
        "| cell | client | toolwire | backend | other threads | all threads | children | backend connections opened |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in &pooled {
        let per = |ns: u64| us(ns as f64 / r.calls());
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            r.key,
            per(r.cpu.client),
            per(r.cpu.toolwire),
            per(r.cpu.backend),
            per(r.cpu.other),
            per(r.cpu.threads()),
            per(r.cpu.children),
            r.backend_connections,
        );
    }

    println!();
    println!("Overhead, as ratios against the direct call: pooled (lowest–highest round); +absolute difference:");
    println!();
    println!(
        "| comparison | p50 | p99 | throughput (calls/s) | CPU per call (all threads) | CPU per call (threads + children) |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    let idx = |k: &str| pooled.iter().position(|r| r.key == k);
    let line = |name: &str, xi: usize, bi: usize| {
        let (x, b) = (&pooled[xi], &pooled[bi]);
        let per_round =
            |f: &dyn Fn(&Row) -> f64| -> Vec<f64> { rounds.iter().map(|r| ratio(f(&r[xi]), f(&r[bi]))).collect() };
        let p50 = |r: &Row| r.pct(50.0) as f64;
        let p99 = |r: &Row| r.pct(99.0) as f64;
        let tput = |r: &Row| r.calls_per_sec();
        let cpu = |r: &Row| r.cpu.threads() as f64 / r.calls();
        // With the spawned programs: the exec shim runs in the child, before the program.
        let with_children = |r: &Row| (r.cpu.threads() + r.cpu.children) as f64 / r.calls();
        println!(
            "| {name} | {} ({}) | {} ({}) | {} | {} ({}) | {} ({}) |",
            ratio_with_range(ratio(p50(x), p50(b)), &per_round(&p50)),
            signed_us(p50(x) - p50(b)),
            ratio_with_range(ratio(p99(x), p99(b)), &per_round(&p99)),
            signed_us(p99(x) - p99(b)),
            ratio_with_range(ratio(tput(x), tput(b)), &per_round(&tput)),
            ratio_with_range(ratio(cpu(x), cpu(b)), &per_round(&cpu)),
            signed_us(cpu(x) - cpu(b)),
            ratio_with_range(ratio(with_children(x), with_children(b)), &per_round(&with_children)),
            signed_us(with_children(x) - with_children(b)),
        );
    };
    if let (Some(a), Some(b1)) = (idx("a"), idx("b1")) {
        line("b1 vs a: /v1/execute, 1 call", b1, a);
    }
    if let (Some(a), Some(b8)) = (idx("a"), idx("b8")) {
        line(
            "b8 vs a: /v1/execute, 8 calls (latency: a request of 8 vs 1 call)",
            b8,
            a,
        );
    }
    if let (Some(c0), Some(c1)) = (idx("c0"), idx("c1")) {
        line("c1 vs c0: exec tool vs direct spawn", c1, c0);
    }
    if let (Some(c0), Some(e1)) = (idx("c0"), idx("e1")) {
        line("e1 vs c0: toolwire's spawn (no shim) vs direct spawn", e1, c0);
    }
    if let (Some(c0), Some(e2)) = (idx("c0"), idx("e2")) {
        line("e2 vs c0: toolwire's spawn through the shim vs direct spawn", e2, c0);
    }
    println!();
    println!(
        "contention: over the whole run this process's threads waited {:.1} s for a CPU while running {:.1} s (a ratio near 0 means the machine was otherwise idle)",
        whole_run.waiting as f64 / 1e9,
        whole_run.threads() as f64 / 1e9
    );
}

/// Cell `s`: the cost of assembling a streamed completion, per event and per MiB of SSE text
/// (decoding included). Linear by construction (each fragment is appended once); this shows
/// the constant. Best of 5 runs, so a busy machine's pauses do not count.
fn stream_assembly_cell() {
    use toolwire::provider::Provider;
    use toolwire::provider::stream;
    const N: usize = 100_000;
    let chunk = |delta: Value| json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": null}]});
    let mut chat = vec![chunk(
        json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "t", "arguments": "{\"k\":\""}}]}),
    )];
    chat.extend((0..N).map(|_| chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "abcd"}}]}))));
    chat.push(chunk(
        json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"}"}}]}),
    ));
    let mut anthropic = vec![
        json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": []}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t", "name": "t", "input": {}}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"k\":\""}}),
    ];
    anthropic.extend((0..N).map(|_| json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "abcd"}})));
    anthropic.push(json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "\"}"}}));
    anthropic.push(json!({"type": "message_stop"}));
    println!();
    println!("Stream assembly (cell s; decode + assemble, best of 5):");
    println!();
    println!("| stream | events | SSE text (MiB) | total (ms) | per event (ns) | per MiB (ms) |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, provider, events) in [
        ("openai_chat", Provider::OpenaiChat, chat),
        ("anthropic", Provider::Anthropic, anthropic),
    ] {
        let text: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
        let mib = text.len() as f64 / (1024.0 * 1024.0);
        let mut best = Duration::MAX;
        for _ in 0..5 {
            let t = Instant::now();
            let decoded = stream::decode(provider, &text).unwrap();
            let assembled = stream::assemble(provider, &decoded).unwrap();
            best = best.min(t.elapsed());
            assert!(assembled.warnings.len() <= 2, "{:?}", assembled.warnings);
        }
        let ms = best.as_secs_f64() * 1e3;
        println!(
            "| {name} | {} | {mib:.2} | {ms:.1} | {:.0} | {:.1} |",
            events.len(),
            best.as_nanos() as f64 / events.len() as f64,
            ms / mib
        );
    }
}
