//! Shutdown signals: SIGTERM (orchestrators) and Ctrl-C (terminals).

/// Resolves on the first SIGTERM or Ctrl-C. If a signal handler cannot be installed the
/// other one still works; if neither can, it never resolves (the process is then stopped by
/// SIGKILL, as without a handler).
pub async fn signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!("Received Ctrl-C, shutting down."),
        () = term => tracing::info!("Received SIGTERM, shutting down."),
    }
}
