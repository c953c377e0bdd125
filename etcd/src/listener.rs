// The sockets the client, metrics and peer URLs listen on: TCP for http(s)://host:port, and
// a unix socket for unix(s)://name, as etcd binds them (the name is a path, usually relative).
//
// etcd's test clusters use `unix://localhost:PORT`, a socket file named "localhost:PORT" in
// the working directory; a stale file from a crash is removed before binding, and the file is
// removed again when the listener closes, as Go's unix listener does.

use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

use crate::config::Url;

/// A bound listen URL.
pub enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener, PathBuf),
}

/// One accepted connection.
pub enum Conn {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// Whether `url` names a unix socket (unix:// or unixs://).
pub fn is_unix(scheme: &str) -> bool {
    scheme == "unix" || scheme == "unixs"
}

impl Listener {
    /// Binds `url` (http, https, unix or unixs).
    pub async fn bind(url: &Url) -> io::Result<Listener> {
        if is_unix(&url.scheme) {
            let path = PathBuf::from(&url.host);
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            return Ok(Listener::Unix(UnixListener::bind(&path)?, path));
        }
        Ok(Listener::Tcp(TcpListener::bind(&url.host).await?))
    }

    /// The next connection, and where it came from (for logs).
    pub async fn accept(&self) -> io::Result<(Conn, String)> {
        match self {
            Listener::Tcp(l) => {
                let (s, peer) = l.accept().await?;
                // Small gRPC and raft frames must not wait for Nagle's algorithm.
                let _ = s.set_nodelay(true);
                Ok((Conn::Tcp(s), peer.to_string()))
            }
            Listener::Unix(l, path) => {
                let (s, _) = l.accept().await?;
                Ok((Conn::Unix(s), format!("unix:{}", path.display())))
            }
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix(_, path) = self {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Tcp(s) => Pin::new(s).poll_flush(cx),
            Conn::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Conn::Unix(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Conn::Tcp(s) => s.is_write_vectored(),
            Conn::Unix(s) => s.is_write_vectored(),
        }
    }
}
