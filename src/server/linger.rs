//! Lingering close: when toolwire ends a connection whose client is still sending (a 413 for a
//! body over the limit, answered from the declared length before the body is read), closing the
//! socket at once makes the kernel answer the unread bytes with a reset, and a reset can destroy
//! the answer in the client's receive buffer before the client reads it — it sees "broken pipe"
//! or "connection reset" instead of the 413. So, like nginx's `lingering_close`, the server
//! first sends its FIN, then reads and discards what the client still sends, for a bounded time
//! and number of bytes, and only then closes.
//!
//! Connections the client closed (their end of stream was read) close at once, as before.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::net::TcpStream;

/// Longest time a closed connection is drained.
pub const LINGER_TIME: Duration = Duration::from_secs(2);

/// Most bytes drained from a closed connection.
pub const LINGER_BYTES: usize = 16 * 1024 * 1024;

/// Where a connection's socket goes when hyper drops it with its client possibly still sending.
pub type Leftover = Arc<Mutex<Option<TcpStream>>>;

/// A client socket that remembers whether the client's end of stream was seen, and is handed to
/// its [`Leftover`] when dropped before that.
pub struct LingeringStream {
    stream: Option<TcpStream>,
    ended: bool,
    leftover: Leftover,
}

impl LingeringStream {
    /// Wraps `stream`; what is left of it after the connection ends is found in the returned
    /// [`Leftover`].
    pub fn new(stream: TcpStream) -> (Self, Leftover) {
        let leftover: Leftover = Arc::new(Mutex::new(None));
        (
            LingeringStream {
                stream: Some(stream),
                ended: false,
                leftover: Arc::clone(&leftover),
            },
            leftover,
        )
    }

    fn stream(&mut self) -> io::Result<&mut TcpStream> {
        self.stream
            .as_mut()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotConnected))
    }
}

impl Drop for LingeringStream {
    fn drop(&mut self) {
        if !self.ended
            && let Some(stream) = self.stream.take()
        {
            *self.leftover.lock().unwrap_or_else(PoisonError::into_inner) = Some(stream);
        }
    }
}

impl AsyncRead for LingeringStream {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let wanted = buf.remaining() > 0;
        let polled = Pin::new(self.stream()?).poll_read(cx, buf);
        match &polled {
            // End of stream (nothing read into room there was), or a broken connection: the
            // client sends nothing more.
            Poll::Ready(Ok(())) if wanted && buf.filled().len() == before => self.ended = true,
            Poll::Ready(Err(_)) => self.ended = true,
            _ => {}
        }
        polled
    }
}

impl AsyncWrite for LingeringStream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(self.stream()?).poll_write(cx, data)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(self.stream()?).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.as_ref().is_some_and(TcpStream::is_write_vectored)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.stream()?).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.stream()?).poll_shutdown(cx)
    }
}

/// Closes what hyper left behind: FIN first, then read and discard until the client closes its
/// end, [`LINGER_BYTES`] were read or [`LINGER_TIME`] is up.
pub async fn close(leftover: &Leftover) {
    let stream = leftover.lock().unwrap_or_else(PoisonError::into_inner).take();
    let Some(mut stream) = stream else {
        return;
    };
    let _ = stream.shutdown().await;
    let drain = async {
        let mut buf = [0u8; 8 * 1024];
        let mut read = 0usize;
        while read < LINGER_BYTES {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => read += n,
            }
        }
    };
    let _ = tokio::time::timeout(LINGER_TIME, drain).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection whose client had closed is not drained; one dropped while the client is
    /// still sending is, and its client then reads the whole answer and a clean end of stream.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn only_connections_with_a_sending_client_linger() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();

        // Client closes first: the server sees its end of stream, nothing is left over.
        let mut client = TcpStream::connect(addr).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        client.shutdown().await.unwrap();
        let (mut wrapped, leftover) = LingeringStream::new(server);
        let mut buf = [0u8; 16];
        assert_eq!(wrapped.read(&mut buf).await.unwrap(), 0);
        drop(wrapped);
        assert!(leftover.lock().unwrap().is_none());

        // Client still sending 1 MiB: the server answers without reading, and lingers.
        let mut client = TcpStream::connect(addr).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let sender = tokio::spawn(async move {
            let _ = client.write_all(&vec![b'x'; 1024 * 1024]).await;
            let mut answer = Vec::new();
            let read = client.read_to_end(&mut answer).await;
            (read.is_ok(), answer)
        });
        // The client has started sending (and is blocked on full buffers) before the answer.
        server.readable().await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (mut wrapped, leftover) = LingeringStream::new(server);
        wrapped
            .write_all(b"HTTP/1.1 413 Payload Too Large\r\n\r\n")
            .await
            .unwrap();
        drop(wrapped);
        assert!(leftover.lock().unwrap().is_some());
        close(&leftover).await;
        let (clean, answer) = sender.await.unwrap();
        assert!(clean, "the client saw a reset");
        assert_eq!(answer, b"HTTP/1.1 413 Payload Too Large\r\n\r\n");
    }
}
