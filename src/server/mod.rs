//! Binding and serving. The caller binds (or hands in) the listener, so tests can serve on
//! `127.0.0.1:0` and learn the port before the first request.
//!
//! Connections are accepted here and served by the [`workers`] (one single-threaded runtime
//! per CPU, which [`busy_poll`] briefly instead of sleeping while lightly loaded), with
//! hyper's HTTP/1.1 server directly (not `axum::serve`) because it lets us bound the time a
//! client may take to send its headers (slowloris), and its graceful shutdown watches every
//! connection.

pub mod busy_poll;
pub mod linger;
pub mod workers;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpSocket};

use crate::api::{AppState, router};

/// Extra time after the drain budget for cancelled calls to write their answers.
const CANCEL_GRACE: Duration = Duration::from_secs(5);

/// How long stopping the workers may take once the drain is over.
const WORKERS_STOP: Duration = Duration::from_secs(2);

/// Binds `addr` with an explicit listen backlog (the std/tokio default of 128 overflows under
/// fan-out load and costs clients 1 s SYN retries).
pub fn bind(addr: SocketAddr, backlog: u32) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.set_nodelay(true)?;
    socket.bind(addr)?;
    socket.listen(backlog)
}

/// Serves the API on `listener` until `shutdown` resolves. Then: readiness turns off, the
/// listener closes, in-flight requests get up to the drain budget, after which the calls still
/// running are cancelled (they end as `rejected` results and their process groups are killed),
/// so every request still gets its answer before this returns.
///
/// Connections are served on `config.workers` threads of their own ([`workers`]); this
/// function's runtime only accepts and drains.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = router(state.clone());
    let header_timeout = state.config.limits.header_read_timeout.0;
    let mut workers = workers::Workers::start(
        state.config.worker_count(),
        &app,
        header_timeout,
        &state.config.busy_poll,
    )?;
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    // One permit per open connection: past the cap, new connections wait in the listen backlog
    // (a slow client holds a connection, never more than its share).
    let connections = std::sync::Arc::new(tokio::sync::Semaphore::new(state.config.limits.max_connections));
    // Bounded metrics memory whether or not anyone scrapes `/metrics`; stops with `serve`.
    let upkeep = tokio::spawn(async {
        let mut every = tokio::time::interval(crate::telemetry::metrics::UPKEEP_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            crate::telemetry::metrics::upkeep();
        }
    });
    loop {
        let permit = tokio::select! {
            p = std::sync::Arc::clone(&connections).acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        tokio::select! {
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _peer)) => stream,
                    Err(e) => {
                        // EMFILE and friends: back off instead of spinning.
                        tracing::warn!(error = %e, "Accept failed.");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                // Deregistered from this runtime; the worker registers it with its own.
                let stream = match stream.into_std() {
                    Ok(stream) => stream,
                    Err(e) => {
                        tracing::warn!(error = %e, "Cannot hand an accepted connection to a worker.");
                        continue;
                    }
                };
                let job = workers::Job { stream, permit, watcher: graceful.watcher() };
                if workers.dispatch(job).is_err() {
                    tracing::error!("No serving worker is running; closing the connection.");
                }
            }
            () = &mut shutdown => break,
        }
    }
    state.draining.store(true, Ordering::SeqCst);
    drop(listener);
    let drain = state.config.shutdown.drain.0;
    tracing::info!(drain_ms = drain.as_millis() as u64, "Draining in-flight requests.");
    let cancel = state.cancel.clone();
    let cancel_timer = tokio::spawn(async move {
        tokio::time::sleep(drain).await;
        tracing::warn!("Drain budget spent; cancelling the calls still running.");
        cancel.cancel();
    });
    if tokio::time::timeout(drain + CANCEL_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("Some connections did not close in time; exiting anyway.");
    }
    cancel_timer.abort();
    workers.stop(WORKERS_STOP).await;
    upkeep.abort();
    Ok(())
}
