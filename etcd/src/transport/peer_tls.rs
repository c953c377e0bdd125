// TLS on the peer port (--peer-cert-file, --peer-auto-tls, ...): the dialing side's config
// and the listening side's (handshakes done by transport::server's accept loop).

use std::sync::Arc;

use crate::config::Config;
use crate::tls::{self, Side, TlsServer};

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
    let mut info = tls::peer_info(cfg);
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
        &tls::peer_info(cfg),
        Side::Peer,
        &cfg.data_dir,
        &tls::url_hosts(&cfg.listen_peer_urls),
    )
    .map(Some)
}
