// Client connections: writes gathered into fewer syscalls. A flush yields to the runtime before
// it writes, again while the connection's other streams keep adding frames (a few times at most),
// so they go out in one write instead of one TCP segment per message (watch fan-out sends many).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Bytes gathered before a write goes out without waiting for a flush. h2 writes frames of
/// up to 16 KiB and buffers about as much itself; beyond this a bigger write gains nothing.
const GATHER: usize = 64 * 1024;

pub struct Coalesce<S> {
    inner: S,
    buf: Vec<u8>,
    /// Bytes of `buf` already written.
    sent: usize,
    /// Times the flush in progress has yielded, and the bytes gathered at its last yield.
    yielded: u8,
    at_yield: usize,
}

/// A flush yields again while other tasks keep adding bytes, at most this many times.
const YIELDS: u8 = 4;

impl<S> Coalesce<S> {
    pub fn new(inner: S) -> Self {
        Coalesce {
            inner,
            buf: Vec::new(),
            sent: 0,
            yielded: 0,
            at_yield: 0,
        }
    }
}

impl<S: AsyncWrite + Unpin> Coalesce<S> {
    /// Writes out everything gathered.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.buf.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.buf[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        self.buf.clear();
        self.sent = 0;
        // A burst's buffer is not kept by an idle connection.
        if self.buf.capacity() > 4 * GATHER {
            self.buf = Vec::new();
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Coalesce<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Coalesce<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[io::IoSlice::new(data)])
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.buf.len() >= GATHER {
            ready!(this.poll_drain(cx))?;
        }
        let room = GATHER.saturating_sub(this.buf.len()).max(1);
        let mut taken = 0;
        for b in bufs {
            let n = b.len().min(room - taken);
            this.buf.extend_from_slice(&b[..n]);
            taken += n;
            if taken == room {
                break;
            }
        }
        Poll::Ready(Ok(taken))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.sent < this.buf.len()
            && this.yielded < YIELDS
            && (this.yielded == 0 || this.buf.len() > this.at_yield)
        {
            // Let the tasks woken with this one add their frames first.
            this.yielded += 1;
            this.at_yield = this.buf.len();
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        ready!(this.poll_drain(cx))?;
        this.yielded = 0;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn gathers_writes_until_a_flush_and_loses_none() {
        let (a, mut b) = tokio::io::duplex(1 << 20);
        let mut w = Coalesce::new(a);
        let mut expect = Vec::new();
        for i in 0..10_000u32 {
            let chunk = i.to_le_bytes().repeat(1 + (i as usize % 7));
            w.write_all(&chunk).await.unwrap();
            expect.extend_from_slice(&chunk);
        }
        w.flush().await.unwrap();
        w.shutdown().await.unwrap();
        let mut got = Vec::new();
        b.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, expect);
    }

    #[tokio::test]
    async fn nothing_goes_out_before_the_flush_below_the_gather_size() {
        let (a, mut b) = tokio::io::duplex(1 << 20);
        let mut w = Coalesce::new(a);
        w.write_all(b"hello").await.unwrap();
        let mut one = [0u8; 5];
        let early =
            tokio::time::timeout(std::time::Duration::from_millis(50), b.read_exact(&mut one))
                .await;
        assert!(early.is_err(), "bytes went out before the flush");
        w.flush().await.unwrap();
        b.read_exact(&mut one).await.unwrap();
        assert_eq!(&one, b"hello");
    }
}
