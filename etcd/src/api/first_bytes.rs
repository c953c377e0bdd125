// A client connection must start talking within a deadline: one that connects and sends
// nothing (or never finishes its first request's headers) is closed instead of held forever.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// How long a client may take to send its first bytes, and (HTTP/1.1) a request's headers.
/// A connection that waits longer only holds a descriptor and a task: the slowloris pattern
/// (etcd's 2026 fixes add such timeouts). Generous for any real client.
pub const CLIENT_START_TIMEOUT: Duration = Duration::from_secs(30);

/// Wraps a connection and notes when the client has sent anything.
pub struct FirstBytes<IO> {
    inner: IO,
    seen: Arc<AtomicBool>,
}

impl<IO> FirstBytes<IO> {
    /// The wrapped connection and the flag its first read sets.
    pub fn new(inner: IO) -> (FirstBytes<IO>, Arc<AtomicBool>) {
        let seen = Arc::new(AtomicBool::new(false));
        (
            FirstBytes {
                inner,
                seen: seen.clone(),
            },
            seen,
        )
    }
}

/// Resolves when `seen` is still false `within` from now; never resolves otherwise.
pub async fn silent_for(seen: Arc<AtomicBool>, within: Duration) {
    tokio::time::sleep(within).await;
    if seen.load(Ordering::Relaxed) {
        std::future::pending::<()>().await;
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for FirstBytes<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.seen.store(true, Ordering::Relaxed);
        }
        r
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for FirstBytes<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
