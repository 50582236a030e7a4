//! The real server, in-process, on 127.0.0.1:0: the one helper every in-process test starts.
//! It keeps the [`AppState`] (reload status, breakers, registry) and optionally a pinned jitter
//! source and the hot-reload watcher. Requests answer an [`Answer`] (status, headers, body, time
//! taken), or `(status, body)` with the `*_json` methods where that is all a test looks at.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use toolwire::api::AppState;
use toolwire::config::ServerConfig;
use toolwire::executor::Executor;
use toolwire::executor::retry::Jitter;
use toolwire::registry::Registry;

/// Options of [`Served::start_opts`].
#[derive(Default)]
pub struct Opts {
    /// Replaces the executor's jitter source.
    pub jitter: Option<Arc<dyn Jitter>>,
    /// Starts the reloader (file watch when `reload.watch`, and SIGHUP).
    pub reloader: bool,
}

/// A running server; dropping it stops it.
pub struct Served {
    pub addr: SocketAddr,
    pub base: String,
    pub client: reqwest::Client,
    pub state: AppState,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
    reloader: Option<toolwire::reload::WatchHandle>,
}

/// One HTTP answer: status, headers, JSON body (`null` when not JSON), time taken.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
    pub elapsed: Duration,
}

/// The embedded defaults with `tools_dir` set.
pub fn config_for(tools_dir: &Path) -> ServerConfig {
    let mut cfg = ServerConfig::from_figment(ServerConfig::figment_without_env(None).unwrap()).unwrap();
    cfg.tools_dir = tools_dir.to_owned();
    cfg
}

impl Served {
    /// Serves the tools of `tools_dir` with default settings.
    pub async fn start_dir(tools_dir: &Path) -> Self {
        Self::start(config_for(tools_dir)).await
    }

    /// Serves `tools_dir` with replay-safe execution off, for tests that send the same
    /// completion more than once on purpose (replay itself is tested in `replay.rs`).
    pub async fn start_dir_without_replay(tools_dir: &Path) -> Self {
        let mut cfg = config_for(tools_dir);
        cfg.replay.enabled = false;
        Self::start(cfg).await
    }

    /// Serves `config` with the default executor.
    pub async fn start(config: ServerConfig) -> Self {
        Self::start_opts(config, Opts::default()).await
    }

    /// Serves `config` with options.
    pub async fn start_opts(config: ServerConfig, opts: Opts) -> Self {
        let registry = Registry::load(&config.tools_dir, &config.defaults).expect("valid tools");
        let listener = toolwire::server::bind("127.0.0.1:0".parse().unwrap(), 1024).unwrap();
        let addr = listener.local_addr().unwrap();
        let mut executor = Executor::new(&config).unwrap();
        if let Some(j) = opts.jitter {
            executor = executor.with_jitter(j);
        }
        let state = AppState::new(config, registry, executor);
        let reloader = opts.reloader.then(|| toolwire::reload::spawn(state.reloader.clone()));
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(toolwire::server::serve(listener, state.clone(), async move {
            let _ = stopped.await;
        }));
        Served {
            addr,
            base: format!("http://{addr}"),
            client: reqwest::Client::builder().no_proxy().build().unwrap(),
            state,
            stop: Some(stop),
            task: Some(task),
            reloader,
        }
    }

    async fn answer(resp: reqwest::Response, started: Instant) -> Answer {
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let bytes = resp.bytes().await.unwrap_or_default();
        Answer {
            status,
            headers,
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            elapsed: started.elapsed(),
        }
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Answer {
        let started = Instant::now();
        let resp = self.client.get(format!("{}{path}", self.base)).send().await.unwrap();
        Self::answer(resp, started).await
    }

    /// `POST path` with a JSON body.
    pub async fn post(&self, path: &str, body: &Value) -> Answer {
        let started = Instant::now();
        let resp = self
            .client
            .post(format!("{}{path}", self.base))
            .json(body)
            .send()
            .await
            .unwrap();
        Self::answer(resp, started).await
    }

    /// `GET path` → (status, JSON body or `null`).
    pub async fn get_json(&self, path: &str) -> (u16, Value) {
        let a = self.get(path).await;
        (a.status, a.body)
    }

    /// `POST path` with a JSON body → (status, JSON body or `null`).
    pub async fn post_json(&self, path: &str, body: &Value) -> (u16, Value) {
        let a = self.post(path, body).await;
        (a.status, a.body)
    }

    /// `POST path` with raw bytes and an optional content type.
    pub async fn post_raw(&self, path: &str, content_type: Option<&str>, body: impl Into<reqwest::Body>) -> Answer {
        let started = Instant::now();
        let mut req = self.client.post(format!("{}{path}", self.base)).body(body);
        if let Some(ct) = content_type {
            req = req.header(reqwest::header::CONTENT_TYPE, ct);
        }
        let resp = req.send().await.unwrap();
        Self::answer(resp, started).await
    }

    /// `POST /v1/execute` with an openai_chat completion and request options.
    pub async fn execute(&self, completion: &Value, options: &Value) -> Answer {
        let mut body = serde_json::json!({"provider": "openai_chat", "completion": completion});
        if !options.is_null() {
            body["options"] = options.clone();
        }
        self.post("/v1/execute", &body).await
    }

    /// The active tool set's version.
    pub fn version(&self) -> String {
        self.state.registry.load().version.clone()
    }

    /// Stops the server (drain, then cancel) and waits for it.
    pub async fn stop(mut self) {
        self.reloader.take();
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            t.await.unwrap().unwrap();
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// An openai_chat completion whose calls carry `arguments` serialised from JSON values.
pub fn openai(calls: &[(&str, &str, Value)]) -> Value {
    let raw: Vec<(String, String, String)> = calls
        .iter()
        .map(|(id, name, args)| ((*id).to_owned(), (*name).to_owned(), args.to_string()))
        .collect();
    openai_raw_owned(&raw)
}

/// An openai_chat completion whose calls carry these raw `arguments` strings.
pub fn openai_raw(calls: &[(&str, &str, &str)]) -> Value {
    let raw: Vec<(String, String, String)> = calls
        .iter()
        .map(|(id, name, args)| ((*id).to_owned(), (*name).to_owned(), (*args).to_owned()))
        .collect();
    openai_raw_owned(&raw)
}

fn openai_raw_owned(calls: &[(String, String, String)]) -> Value {
    let tool_calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, args)| {
            serde_json::json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}})
        })
        .collect();
    let message = if tool_calls.is_empty() {
        serde_json::json!({"role": "assistant", "content": "done"})
    } else {
        serde_json::json!({"role": "assistant", "content": null, "tool_calls": tool_calls})
    };
    serde_json::json!({
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "model": "gpt-test",
        "choices": [{"index": 0, "message": message,
                     "finish_reason": if calls.is_empty() { "stop" } else { "tool_calls" }}]
    })
}
