//! The real server, in-process, on 127.0.0.1:0.

use std::net::SocketAddr;
use std::path::Path;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use toolwire::api::AppState;
use toolwire::config::ServerConfig;
use toolwire::registry::Registry;

/// A running server; dropping it stops it.
pub struct TestServer {
    pub addr: SocketAddr,
    pub base: String,
    pub client: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

/// The embedded defaults with `tools_dir` set.
pub fn config_for(tools_dir: &Path) -> ServerConfig {
    let mut cfg = ServerConfig::from_figment(ServerConfig::figment_without_env(None).unwrap()).unwrap();
    cfg.tools_dir = tools_dir.to_owned();
    cfg
}

impl TestServer {
    /// Serves the tools of `tools_dir` with default settings.
    pub async fn start(tools_dir: &Path) -> Self {
        Self::start_with(config_for(tools_dir)).await
    }

    /// Serves `tools_dir` with replay-safe execution off, for tests that send the same
    /// completion more than once on purpose (replay itself is tested in tests/replay.rs).
    pub async fn start_without_replay(tools_dir: &Path) -> Self {
        let mut cfg = config_for(tools_dir);
        cfg.replay.enabled = false;
        Self::start_with(cfg).await
    }

    /// Serves with a given config.
    pub async fn start_with(config: ServerConfig) -> Self {
        let registry = Registry::load(&config.tools_dir, &config.defaults).expect("valid tools");
        let listener = toolwire::server::bind("127.0.0.1:0".parse().unwrap(), 1024).unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let executor = toolwire::executor::Executor::new(&config).unwrap();
        let state = AppState::new(config, registry, executor);
        let task = tokio::spawn(toolwire::server::serve(listener, state, async move {
            let _ = stopped.await;
        }));
        TestServer {
            addr,
            base: format!("http://{addr}"),
            client: reqwest::Client::builder().no_proxy().build().unwrap(),
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// `GET path` → (status, JSON body).
    pub async fn get(&self, path: &str) -> (u16, serde_json::Value) {
        let resp = self.client.get(format!("{}{path}", self.base)).send().await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(serde_json::Value::Null))
    }

    /// `POST path` with a JSON body → (status, JSON body).
    pub async fn post(&self, path: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
        let resp = self
            .client
            .post(format!("{}{path}", self.base))
            .json(body)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(serde_json::Value::Null))
    }

    /// Stops the server and waits for it.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            t.await.unwrap().unwrap();
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}
