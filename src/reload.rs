//! Hot reload of the tools directory (file changes and SIGHUP).
//!
//! A reload validates the whole set with the same code as `toolwire check`, then swaps the
//! registry atomically. Any error keeps the last good set (every error is logged and the last
//! one is shown by `/readyz` and `/v1/tools`). Requests hold the snapshot they started with, so
//! in-flight calls finish on their set.
//!
//! Watching is non-recursive on the directory itself: an editor's rename-replace and a
//! Kubernetes ConfigMap `..data` symlink swap both show up as events there. The directories of
//! the `${file:}` secrets the active set read are watched the same way, and the version covers
//! the resolved secret values, so a rotated secret is swapped in. Events are debounced, so a
//! burst of writes causes one reload.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use notify::{RecursiveMode, Watcher as _};
use serde::Serialize;
use tokio::sync::mpsc;

use crate::config::ServerConfig;
use crate::config::server::ToolDefaults;
use crate::registry::Registry;

/// What the last reloads did; shown by `/readyz` and `/v1/tools`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReloadStatus {
    /// Successful reloads that changed the active set.
    pub reloads: u64,
    /// Rejected reloads.
    pub failures: u64,
    /// Unix milliseconds of the last attempt.
    pub last_attempt_ms: Option<u64>,
    /// Errors of the last attempt when it was rejected; cleared by the next good one.
    pub last_error: Option<Vec<String>>,
}

/// What unauthenticated `/readyz` shows of the reload status: the state and counts only. The
/// messages (which name files, keys and values) stay on the authenticated `GET /v1/tools`.
#[derive(Debug, Clone, Serialize)]
pub struct ReloadSummary {
    /// `ok`, or `rejected` while the last attempt's errors are outstanding.
    pub status: &'static str,
    /// Errors of the last attempt (0 unless `rejected`).
    pub errors: usize,
    pub reloads: u64,
    pub failures: u64,
    pub last_attempt_ms: Option<u64>,
}

impl ReloadStatus {
    /// The `/readyz` view.
    pub fn summary(&self) -> ReloadSummary {
        ReloadSummary {
            status: if self.last_error.is_some() { "rejected" } else { "ok" },
            errors: self.last_error.as_ref().map_or(0, Vec::len),
            reloads: self.reloads,
            failures: self.failures,
            last_attempt_ms: self.last_attempt_ms,
        }
    }
}

/// Shared reload status.
pub type SharedStatus = Arc<Mutex<ReloadStatus>>;

/// Outcome of one reload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reloaded {
    /// A new set is active.
    Swapped { version: String },
    /// The files did not change.
    Unchanged,
    /// The new set is invalid; the old one stays.
    Rejected { errors: usize },
}

/// What reloading needs, and nothing more: the active tool set it swaps, the status it
/// reports, and where the tools come from. The API holds one; reload knows nothing of the API.
#[derive(Clone)]
pub struct Reloader {
    /// The active tool set. Swapped whole; a request keeps the snapshot it started with.
    pub registry: Arc<ArcSwap<Registry>>,
    /// What the last reloads did (`/readyz`, `/v1/tools`).
    pub status: SharedStatus,
    tools_dir: PathBuf,
    defaults: ToolDefaults,
    watch: bool,
    debounce: Duration,
    /// The MCP servers: listed again before every build, and their `list_changed` reloads.
    pub mcp: Option<crate::mcp::McpHub>,
}

impl Reloader {
    /// A reloader around the initial tool set, with the server's settings.
    pub fn new(registry: Registry, config: &ServerConfig) -> Self {
        Reloader {
            registry: Arc::new(ArcSwap::from_pointee(registry)),
            status: Arc::new(Mutex::new(ReloadStatus::default())),
            tools_dir: config.tools_dir.clone(),
            defaults: config.defaults.clone(),
            watch: config.reload.watch,
            debounce: config.reload.debounce.0,
            mcp: None,
        }
    }
}

/// Loads the tools directory again and swaps it in if it is valid and different.
pub async fn reload_now(state: &Reloader) -> Reloaded {
    let dir = state.tools_dir.clone();
    let defaults = state.defaults.clone();
    let loaded = match &state.mcp {
        Some(hub) => Ok(crate::mcp::load_registry(&dir, &defaults, hub).await),
        None => tokio::task::spawn_blocking(move || Registry::load(&dir, &defaults)).await,
    };
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let mut status = state.status.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    status.last_attempt_ms = Some(now_ms);
    match loaded {
        Ok(Ok(registry)) => {
            status.last_error = None;
            if registry.version == state.registry.load().version {
                crate::telemetry::metrics::reload("unchanged", registry.len());
                return Reloaded::Unchanged;
            }
            crate::telemetry::metrics::reload("swapped", registry.len());
            let version = registry.version.clone();
            for w in &registry.warnings {
                tracing::warn!(%w, "Tool definition warning.");
            }
            state.registry.store(Arc::new(registry));
            status.reloads += 1;
            tracing::info!(%version, "Reloaded the tools.");
            Reloaded::Swapped { version }
        }
        Ok(Err(diagnostics)) => {
            let errors: Vec<String> = diagnostics
                .iter()
                .filter(|d| d.is_error())
                .map(ToString::to_string)
                .collect();
            for e in &errors {
                tracing::error!(error = %e, "Reload rejected; keeping the last good tools.");
            }
            status.failures += 1;
            crate::telemetry::metrics::reload("rejected", state.registry.load().len());
            let n = errors.len();
            status.last_error = Some(errors);
            Reloaded::Rejected { errors: n }
        }
        Err(join) => {
            status.failures += 1;
            status.last_error = Some(vec![format!("the reload task failed: {join}")]);
            Reloaded::Rejected { errors: 1 }
        }
    }
}

/// Keeps the watcher alive; dropping it stops watching.
pub struct WatchHandle {
    _watcher: Option<Arc<Watch>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for WatchHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts reloading on file changes (when `reload.watch`) and on SIGHUP.
pub fn spawn(state: Reloader) -> WatchHandle {
    // A full channel only means a reload is already pending: dropping the event is fine.
    let (tx, mut rx) = mpsc::channel::<()>(1);
    let watcher = if state.watch {
        Watch::start(state.tools_dir.clone(), tx.clone()).map(Arc::new)
    } else {
        None
    };
    if let Some(w) = &watcher {
        w.follow_secrets(&state.registry.load().secret_files);
    }
    if let Some(hub) = &state.mcp {
        // A server's tool list changed: reload through the same debounce and swap.
        let tx = tx.clone();
        hub.on_tools_changed(move || {
            let _ = tx.try_send(());
        });
    }
    spawn_sighup(tx);
    let debounce = state.debounce;
    let follow = watcher.clone();
    let task = tokio::spawn(async move {
        while rx.recv().await.is_some() {
            // Wait until the directory has been quiet for `debounce`.
            loop {
                match tokio::time::timeout(debounce, rx.recv()).await {
                    Ok(Some(())) => {}
                    Ok(None) => return,
                    Err(_) => break,
                }
            }
            if let Reloaded::Swapped { .. } = reload_now(&state).await
                && let Some(w) = &follow
            {
                w.follow_secrets(&state.registry.load().secret_files);
            }
        }
    });
    WatchHandle {
        _watcher: watcher,
        task,
    }
}

/// The file watcher: the tools directory, plus the directory of every `${file:}` target of
/// the active set, so that a rotated secret (rewritten, renamed over, or swapped by a
/// Kubernetes Secret's `..data` symlink) reloads like a changed tool file.
struct Watch {
    watcher: Mutex<notify::RecommendedWatcher>,
    tools_dir: PathBuf,
    /// Secret directories watched now → the file names referenced in each.
    secret_dirs: Arc<Mutex<SecretDirs>>,
}

type SecretDirs = HashMap<PathBuf, HashSet<OsString>>;

impl Watch {
    fn start(dir: PathBuf, tx: mpsc::Sender<()>) -> Option<Watch> {
        let secret_dirs: Arc<Mutex<SecretDirs>> = Arc::default();
        let dirs = Arc::clone(&secret_dirs);
        let handler = move |event: notify::Result<notify::Event>| {
            let Ok(e) = event else { return };
            if e.kind.is_access() {
                return;
            }
            // In a secret's directory only that file and the `..data` machinery count: a busy
            // directory (`/run/secrets`, a home) must not cause a reload per unrelated write.
            let relevant = e.paths.is_empty()
                || e.paths.iter().any(|p| {
                    let dirs = dirs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    match (p.parent().and_then(|d| dirs.get(d)), p.file_name()) {
                        (None, _) => true,
                        (Some(names), Some(name)) => names.contains(name) || name.to_string_lossy().starts_with(".."),
                        (Some(_), None) => false,
                    }
                });
            if relevant {
                let _ = tx.try_send(());
            }
        };
        match notify::recommended_watcher(handler) {
            Ok(mut w) => match w.watch(&dir, RecursiveMode::NonRecursive) {
                Ok(()) => Some(Watch {
                    watcher: Mutex::new(w),
                    tools_dir: dir,
                    secret_dirs,
                }),
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "Cannot watch the tools directory; reload with SIGHUP.");
                    None
                }
            },
            Err(e) => {
                tracing::warn!(error = %e, "Cannot start the file watcher; reload with SIGHUP.");
                None
            }
        }
    }

    /// Watches the directories of `files` (and stops watching ones no longer referenced).
    fn follow_secrets(&self, files: &[PathBuf]) {
        let mut wanted: SecretDirs = HashMap::new();
        for f in files {
            if let (Some(dir), Some(name)) = (f.parent(), f.file_name())
                && dir != self.tools_dir
            {
                wanted.entry(dir.to_owned()).or_default().insert(name.to_owned());
            }
        }
        // Never hold `secret_dirs` while calling into the watcher: notify's `watch` waits for
        // its event thread, which may be inside the handler waiting for `secret_dirs`.
        let current: HashSet<PathBuf> = self
            .secret_dirs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .keys()
            .cloned()
            .collect();
        {
            let mut watcher = self.watcher.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            for old in current.iter().filter(|d| !wanted.contains_key(*d)) {
                let _ = watcher.unwatch(old);
            }
            for dir in wanted.keys().filter(|d| !current.contains(*d)) {
                if let Err(e) = watcher.watch(dir, RecursiveMode::NonRecursive) {
                    tracing::warn!(dir = %dir.display(), error = %e, "Cannot watch a secret file's directory; reload with SIGHUP after rotating it.");
                }
            }
        }
        *self
            .secret_dirs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = wanted;
    }
}

#[cfg(unix)]
fn spawn_sighup(tx: mpsc::Sender<()>) {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(mut hup) => {
            tokio::spawn(async move {
                while hup.recv().await.is_some() {
                    tracing::info!("SIGHUP: reloading the tools.");
                    let _ = tx.try_send(());
                }
            });
        }
        Err(e) => tracing::warn!(error = %e, "Cannot listen for SIGHUP."),
    }
}

#[cfg(not(unix))]
fn spawn_sighup(_tx: mpsc::Sender<()>) {}
