//! `toolwire health`: a dependency-free readiness probe for container HEALTHCHECKs.
//!
//! Plain blocking HTTP/1.1 over std's `TcpStream` with timeouts on connect, write and read, so
//! the check works in a minimal image and can never hang.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Why the probe failed.
#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    #[error("cannot reach {0}: {1}")]
    Io(SocketAddr, std::io::Error),
    #[error("/readyz answered: {0}")]
    NotReady(String),
}

/// `GET /readyz` on `addr`; `Ok` on a 200.
pub fn probe(addr: SocketAddr, timeout: Duration) -> Result<(), HealthError> {
    let io = |e| HealthError::Io(addr, e);
    let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(io)?;
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    stream.set_write_timeout(Some(timeout)).map_err(io)?;
    stream
        .write_all(format!("GET /readyz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes())
        .map_err(io)?;
    let mut buf = Vec::new();
    stream.take(64 * 1024).read_to_end(&mut buf).map_err(io)?;
    let text = String::from_utf8_lossy(&buf);
    let status_line = text.lines().next().unwrap_or_default().to_owned();
    if status_line.split_whitespace().nth(1) == Some("200") {
        Ok(())
    } else {
        Err(HealthError::NotReady(status_line))
    }
}
