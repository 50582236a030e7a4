//! The backend of the out-of-process benchmark (`make bench`, `bench/run.py`): a small HTTP
//! service on 127.0.0.1 that answers every tool request with a small JSON object.
//!
//! - `POST /echo`: answers `{"ok":true,"value":42}` at once (a cheap tool: a lookup, a
//!   calculator, an internal API on the same host).
//! - `POST /slow`: the same answer after 50 ms (a tool whose own work dominates).
//!
//! Usage: `bench-backend [--port N] [--threads N]`. Binds `127.0.0.1:N` (0: any free port) and
//! prints `listening 127.0.0.1:<port>` on stdout once it accepts connections, so the driver
//! learns the port without a race. `--threads 0` (the default) runs on one current-thread
//! runtime: a small, separate service that the load generator and toolwire share the machine
//! with, like a sidecar's neighbour. Stops on SIGTERM or SIGINT, or when stdin closes (so a
//! driver that dies without cleaning up does not leave it behind).

use std::time::Duration;

use axum::Router;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::post;
use axum::serve::ListenerExt as _;

const ANSWER: &str = r#"{"ok":true,"value":42}"#;
const SLOW: Duration = Duration::from_millis(50);

fn main() -> std::process::ExitCode {
    let mut port: u16 = 0;
    let mut threads: usize = 0;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next();
        let parsed = match (arg.as_str(), value.as_deref()) {
            ("--port", Some(v)) => v.parse().map(|v| port = v).is_ok(),
            ("--threads", Some(v)) => v.parse().map(|v| threads = v).is_ok(),
            _ => false,
        };
        if !parsed {
            eprintln!("usage: bench-backend [--port N] [--threads N]");
            return std::process::ExitCode::from(2);
        }
    }
    let runtime = if threads == 0 {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
    };
    // Not waiting for the blocking stdin reader at the end (it may never return).
    let result = runtime.and_then(|rt| {
        let served = rt.block_on(serve(port));
        rt.shutdown_timeout(Duration::from_millis(100));
        served
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench-backend: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn serve(port: u16) -> std::io::Result<()> {
    let app = Router::new().route("/echo", post(echo)).route("/slow", post(slow));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!("listening {}", listener.local_addr()?);
    // TCP_NODELAY on every accepted connection, like toolwire's own listener.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app).with_graceful_shutdown(stopped()).await
}

async fn echo(body: axum::body::Bytes) -> impl IntoResponse {
    drop(body);
    ([(CONTENT_TYPE, "application/json")], ANSWER)
}

async fn slow(body: axum::body::Bytes) -> impl IntoResponse {
    drop(body);
    tokio::time::sleep(SLOW).await;
    ([(CONTENT_TYPE, "application/json")], ANSWER)
}

/// SIGTERM, SIGINT, or stdin reaching its end.
async fn stopped() {
    use tokio::io::AsyncReadExt as _;
    let stdin_closed = async {
        let mut buf = [0u8; 64];
        let mut stdin = tokio::io::stdin();
        while let Ok(n) = stdin.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = stdin_closed => {}
        () = term => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
