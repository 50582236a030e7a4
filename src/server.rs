//! Binding and serving. The caller binds (or hands in) the listener, so tests can serve on
//! `127.0.0.1:0` and learn the port before the first request.

use std::future::Future;
use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpSocket};

use crate::api::{AppState, router};

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

/// Serves the API on `listener` until `shutdown` resolves, then stops accepting and lets
/// in-flight requests finish.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = router(state);
    axum::serve(listener, app).with_graceful_shutdown(shutdown).await
}
