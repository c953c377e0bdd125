// The dialing side of TLS as a tonic connector: TCP, then a rustls handshake; used by etcdctl
// (whose --insecure-skip-tls-verify needs a verifier tonic cannot take) and the server's tests.
// Also the unix-socket connector for etcdctl's unix:// endpoints.

use std::sync::Arc;

use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// Dials `uri`'s host over TCP, then TLS. The endpoint's own URL must be http:// so that
/// tonic does not try TLS itself; `default_port` is used when the URL has none.
#[derive(Clone)]
pub struct Connector {
    tls: Arc<rustls::ClientConfig>,
    default_port: u16,
}

impl Connector {
    pub fn new(tls: Arc<rustls::ClientConfig>, default_port: u16) -> Connector {
        Connector { tls, default_port }
    }
}

// tower's Service<Uri> is what tonic's Endpoint::connect_with_connector takes; implementing it
// directly keeps tonic itself out of this crate.
impl tower_service::Service<http::Uri> for Connector {
    type Response = TokioIo<tokio_rustls::client::TlsStream<TcpStream>>;
    type Error = std::io::Error;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let (tls, port) = (
            self.tls.clone(),
            uri.port_u16().unwrap_or(self.default_port),
        );
        Box::pin(async move {
            let host = uri.host().unwrap_or("127.0.0.1").to_string();
            let stream = connect(tls, &host, port).await?;
            Ok(TokioIo::new(stream))
        })
    }
}

/// Dials one unix socket whatever the URI (etcd's unix://localhost:PORT names a socket file in
/// the working directory); the endpoint's own URL is then only what gRPC's :authority says.
#[derive(Clone)]
pub struct UnixConnector {
    path: String,
}

impl UnixConnector {
    pub fn new(path: impl Into<String>) -> UnixConnector {
        UnixConnector { path: path.into() }
    }
}

impl tower_service::Service<http::Uri> for UnixConnector {
    type Response = TokioIo<tokio::net::UnixStream>;
    type Error = std::io::Error;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _uri: http::Uri) -> Self::Future {
        let path = self.path.clone();
        Box::pin(async move { Ok(TokioIo::new(tokio::net::UnixStream::connect(path).await?)) })
    }
}

/// A TLS stream to `host:port`, the server's certificate checked against `host`.
pub async fn connect(
    tls: Arc<rustls::ClientConfig>,
    host: &str,
    port: u16,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let bare = host.trim_matches(['[', ']']);
    let tcp = TcpStream::connect((bare, port)).await?;
    let _ = tcp.set_nodelay(true);
    let name = rustls_pki_types::ServerName::try_from(bare.to_string())
        .map_err(|e| std::io::Error::other(format!("bad host {host}: {e}")))?;
    TlsConnector::from(tls).connect(name, tcp).await
}
