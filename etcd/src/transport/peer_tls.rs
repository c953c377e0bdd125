// TLS on the peer port (--peer-cert-file, --peer-auto-tls, ...): the dialing side's config
// (dialed through tls::Connector), and the listening side as a stream of accepted TLS streams.

use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};

use crate::config::Config;
use crate::tls::{self, Side, TlsInfo, TlsServer};

/// The peer dialer's TLS when the peer URLs are https: our peer certificate (the
/// self-signed one with --peer-auto-tls) and the peer CA; with --peer-auto-tls, as etcd,
/// peers' certificates are not verified.
pub fn client_config(cfg: &Config) -> Result<Option<Arc<rustls::ClientConfig>>, String> {
    let https = cfg
        .listen_peer_urls
        .iter()
        .chain(&cfg.initial_advertise_peer_urls)
        .any(tls::is_tls_scheme)
        || cfg
            .initial_cluster
            .iter()
            .any(|(_, u)| tls::is_tls_scheme(u));
    if !https {
        return Ok(None);
    }
    let mut info = TlsInfo::peer(cfg);
    let auto = info.is_empty() && info.auto_tls;
    if auto {
        // The listener made (or will make) this pair; the dialer shows the same one.
        let (cert, key) = tls::selfsigned::self_cert(
            &cfg.data_dir.join("fixtures").join("peer"),
            &tls::url_hosts(&cfg.listen_peer_urls),
        )?;
        info.cert_file = cert.display().to_string();
        info.key_file = key.display().to_string();
    }
    let mut c = (*tls::client_config(&info, auto)?).clone();
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Some(Arc::new(c)))
}

/// The peer listener's TLS, when its URL is https.
pub fn server_config(cfg: &Config) -> Result<Option<TlsServer>, String> {
    if !cfg.listen_peer_urls.iter().any(tls::is_tls_scheme) {
        return Ok(None);
    }
    TlsServer::new(
        &TlsInfo::peer(cfg),
        Side::Peer,
        &cfg.data_dir,
        &tls::url_hosts(&cfg.listen_peer_urls),
    )
    .map(Some)
}

/// A peer connection after its TLS handshake.
pub struct PeerConn(pub tokio_rustls::server::TlsStream<TcpStream>);

impl tokio::io::AsyncRead for PeerConn {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for PeerConn {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// Accepts connections on `listener` and completes their TLS handshakes; a failed handshake
/// is logged and dropped, never stops the listener.
pub fn incoming(
    listener: TcpListener,
    tls: TlsServer,
) -> tokio_stream::wrappers::ReceiverStream<std::io::Result<PeerConn>> {
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tokio::spawn(async move {
        loop {
            let Ok((tcp, remote)) = listener.accept().await else {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            };
            let _ = tcp.set_nodelay(true);
            if tx.is_closed() {
                return;
            }
            let (tls, tx) = (tls.clone(), tx.clone());
            tokio::spawn(async move {
                let hs =
                    tokio::time::timeout(std::time::Duration::from_secs(5), tls.accept(tcp)).await;
                match hs {
                    Ok(Ok((s, _))) => {
                        let _ = tx.send(Ok(PeerConn(s))).await;
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(remote = %remote, error = %e, "rejected peer connection")
                    }
                    Err(_) => {
                        tracing::warn!(remote = %remote, "rejected peer connection: TLS handshake timed out")
                    }
                }
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}
