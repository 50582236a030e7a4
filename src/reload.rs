//! Hot reload of the tools directory (file changes and SIGHUP).
//!
//! A reload validates the whole set with the same code as `toolwire check`, then swaps the
//! registry atomically. Any error keeps the last good set (every error is logged and the last
//! one is shown by `/readyz` and `/v1/tools`). Requests hold the snapshot they started with, so
//! in-flight calls finish on their set.
//!
//! Watching is non-recursive on the directory itself: an editor's rename-replace and a
//! Kubernetes ConfigMap `..data` symlink swap both show up as events there. Events are
//! debounced, so a burst of writes causes one reload.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use notify::{RecursiveMode, Watcher as _};
use serde::Serialize;
use tokio::sync::mpsc;

use crate::api::AppState;
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

/// Loads the tools directory again and swaps it in if it is valid and different.
pub async fn reload_now(state: &AppState) -> Reloaded {
    let dir = state.config.tools_dir.clone();
    let defaults = state.config.defaults.clone();
    let loaded = tokio::task::spawn_blocking(move || Registry::load(&dir, &defaults)).await;
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let mut status = state.reload.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
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
    _watcher: Option<notify::RecommendedWatcher>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for WatchHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts reloading on file changes (when `reload.watch`) and on SIGHUP.
pub fn spawn(state: AppState) -> WatchHandle {
    // A full channel only means a reload is already pending: dropping the event is fine.
    let (tx, mut rx) = mpsc::channel::<()>(1);
    let watcher = if state.config.reload.watch {
        start_watcher(state.config.tools_dir.clone(), tx.clone())
    } else {
        None
    };
    spawn_sighup(tx);
    let debounce = state.config.reload.debounce.0;
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
            reload_now(&state).await;
        }
    });
    WatchHandle {
        _watcher: watcher,
        task,
    }
}

fn start_watcher(dir: PathBuf, tx: mpsc::Sender<()>) -> Option<notify::RecommendedWatcher> {
    let handler = move |event: notify::Result<notify::Event>| {
        if event.is_ok_and(|e| !e.kind.is_access()) {
            let _ = tx.try_send(());
        }
    };
    match notify::recommended_watcher(handler) {
        Ok(mut w) => match w.watch(&dir, RecursiveMode::NonRecursive) {
            Ok(()) => Some(w),
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

/// How long a test should wait for a debounced reload to land.
pub fn settle_time(debounce: Duration) -> Duration {
    debounce * 4 + Duration::from_millis(500)
}
