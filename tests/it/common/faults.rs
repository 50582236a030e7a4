//! Raw-TCP fault backends the scripted mock does not offer: accept-and-never-read, a
//! slow-drip body, a plain OK server on a chosen address. Every one stops by itself after
//! [`CAP`] or when its handle is dropped.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The longest any fault server keeps a connection.
pub const CAP: Duration = Duration::from_secs(30);

/// A running fault server; dropping it stops it.
pub struct FaultServer {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for FaultServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FaultServer {
    /// `http://ADDR{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

/// Accepts connections and never reads from them (nor answers).
pub async fn blackhole() -> FaultServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        let _ = tokio::time::timeout(CAP, async {
            while let Ok((s, _)) = listener.accept().await {
                held.push(s);
            }
        })
        .await;
    });
    FaultServer { addr, task }
}

/// Reads a request head, answers `200` with a JSON `Content-Length` of `total` bytes, then
/// sends one byte every `every` (a slow-drip body).
pub async fn drip(total: usize, every: Duration) -> FaultServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = tokio::time::timeout(CAP, async {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        let n = s.read(&mut buf).await?;
                        if n == 0 {
                            return Ok::<_, std::io::Error>(());
                        }
                        head.extend_from_slice(&buf[..n]);
                    }
                    let h =
                        format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {total}\r\n\r\n");
                    s.write_all(h.as_bytes()).await?;
                    s.write_all(b"\"").await?;
                    for _ in 1..total {
                        tokio::time::sleep(every).await;
                        s.write_all(b"a").await?;
                    }
                    Ok(())
                })
                .await;
            });
        }
    });
    FaultServer { addr, task }
}

/// A plain server on `addr` answering every request with `200 {"up": true}`.
pub async fn ok_server(addr: SocketAddr) -> FaultServer {
    let listener = TcpListener::bind(addr).await.unwrap();
    let app = axum::Router::new().fallback(|| async { axum::Json(serde_json::json!({"up": true})) });
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    FaultServer { addr, task }
}
