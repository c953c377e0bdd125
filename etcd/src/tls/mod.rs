// TLS for the client and peer listeners: etcd's --cert-file/--key-file/--trusted-ca-file/
// --client-cert-auth/--*-crl-file/--cipher-suites (and the --peer-* set) turned into rustls
// configs, --auto-tls/--peer-auto-tls certificates, and the client certificate's CN for auth.
// The settings, PEM loading and the dialing side are common::tls, shared with etcdctl.

pub mod selfsigned;

// Re-exported so the server's modules name one TLS module for both sides.
pub use common::tls::{TlsInfo, client_config};

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::tls::{cipher_suite_filter, load_certs, load_crls, load_key, provider, roots};
use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::CertificateDer;

use crate::config::{Config, Url};

/// The client port's settings.
pub fn client_info(cfg: &Config) -> TlsInfo {
    TlsInfo {
        cert_file: cfg.cert_file.clone(),
        key_file: cfg.key_file.clone(),
        trusted_ca_file: cfg.trusted_ca_file.clone(),
        client_cert_auth: cfg.client_cert_auth,
        crl_file: cfg.client_crl_file.clone(),
        allowed_cn: String::new(),
        allowed_hostname: cfg.client_cert_allowed_hostname.clone(),
        cipher_suites: cfg.cipher_suites.clone(),
        auto_tls: cfg.auto_tls,
    }
}

/// The peer port's settings.
pub fn peer_info(cfg: &Config) -> TlsInfo {
    TlsInfo {
        cert_file: cfg.peer_cert_file.clone(),
        key_file: cfg.peer_key_file.clone(),
        trusted_ca_file: cfg.peer_trusted_ca_file.clone(),
        client_cert_auth: cfg.peer_client_cert_auth,
        crl_file: cfg.peer_crl_file.clone(),
        allowed_cn: cfg.peer_cert_allowed_cn.clone(),
        allowed_hostname: cfg.peer_cert_allowed_hostname.clone(),
        cipher_suites: cfg.cipher_suites.clone(),
        auto_tls: cfg.peer_auto_tls,
    }
}

/// Which listener a setting is for; names the fixtures dir and the error texts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Client,
    Peer,
}

/// The checks etcd makes at start, before anything is written: cipher suite names, and a
/// certificate (or auto TLS) for every https:// URL.
pub fn verify_config(cfg: &Config) -> Result<(), String> {
    cipher_suite_filter(&cfg.cipher_suites)?;
    let client = client_info(cfg);
    for u in &cfg.listen_client_urls {
        if is_tls_scheme(u) && client.is_empty() && !client.auto_tls {
            return Err(format!(
                "TLS key/cert (--cert-file, --key-file) must be provided for client url {u} with HTTPS scheme"
            ));
        }
    }
    let peer = peer_info(cfg);
    for u in &cfg.listen_peer_urls {
        if is_tls_scheme(u) && peer.is_empty() && !peer.auto_tls {
            return Err(format!(
                "cannot listen on TLS for {}: KeyFile and CertFile are not presented",
                u.host
            ));
        }
    }
    for (flag, path) in [
        ("cert-file", &cfg.cert_file),
        ("key-file", &cfg.key_file),
        ("peer-cert-file", &cfg.peer_cert_file),
        ("peer-key-file", &cfg.peer_key_file),
    ] {
        let pair = if flag.starts_with("peer") {
            (&cfg.peer_cert_file, &cfg.peer_key_file)
        } else {
            (&cfg.cert_file, &cfg.key_file)
        };
        if path.is_empty() && !(pair.0.is_empty() && pair.1.is_empty()) {
            return Err(format!(
                "--{flag} is required when the other half of the key pair is given"
            ));
        }
    }
    Ok(())
}

pub fn is_tls_scheme(u: &Url) -> bool {
    u.scheme == "https" || u.scheme == "unixs"
}

/// A listener's TLS: the rustls config plus the checks rustls does not make itself.
#[derive(Clone)]
pub struct TlsServer {
    pub config: Arc<ServerConfig>,
    allowed_cn: String,
    allowed_hostname: String,
}

impl TlsServer {
    /// Builds the server side from `info`; with auto TLS and no certificate, a self-signed
    /// one is made (or reused) under `<data-dir>/fixtures/<client|peer>` for `hosts`.
    pub fn new(
        info: &TlsInfo,
        side: Side,
        data_dir: &Path,
        hosts: &[String],
    ) -> Result<TlsServer, String> {
        let mut info = info.clone();
        if info.is_empty() && info.auto_tls {
            let dir: PathBuf = data_dir.join("fixtures").join(match side {
                Side::Client => "client",
                Side::Peer => "peer",
            });
            let (cert, key) = selfsigned::self_cert(&dir, hosts)?;
            info.cert_file = cert.display().to_string();
            info.key_file = key.display().to_string();
        }
        let provider = provider(&info.cipher_suites)?;
        let certs = load_certs(&info.cert_file)?;
        let key = load_key(&info.key_file)?;
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS setup: {e}"))?;
        let builder = if info.client_cert_auth {
            if info.trusted_ca_file.is_empty() {
                return Err(match side {
                    Side::Client => "--client-cert-auth needs --trusted-ca-file (the CA that signs client certificates)".into(),
                    Side::Peer => "--peer-client-cert-auth needs --peer-trusted-ca-file (the CA that signs peer certificates)".into(),
                });
            }
            let mut vb = WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots(&info.trusted_ca_file)?),
                provider,
            );
            if !info.crl_file.is_empty() {
                vb = vb.with_crls(load_crls(&info.crl_file)?);
            }
            let verifier = vb
                .build()
                .map_err(|e| format!("TLS client verification setup: {e}"))?;
            if info.allowed_cn.is_empty() && info.allowed_hostname.is_empty() {
                builder.with_client_cert_verifier(verifier)
            } else {
                builder.with_client_cert_verifier(Arc::new(AllowedNames {
                    inner: verifier,
                    cn: info.allowed_cn.clone(),
                    hostname: info.allowed_hostname.clone(),
                }))
            }
        } else {
            builder.with_no_client_auth()
        };
        let mut config = builder.with_single_cert(certs, key).map_err(|e| {
            format!(
                "{}: the key does not fit the certificate: {e}",
                info.key_file
            )
        })?;
        // The server's order decides, as Go's does: clients get the suite etcd would give.
        config.ignore_client_order = true;
        // gRPC clients need h2; curl and browsers speak HTTP/1.1 on the same port. The peer
        // port speaks etcd's rafthttp, HTTP/1.1 only.
        config.alpn_protocols = match side {
            Side::Client => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
            Side::Peer => vec![b"http/1.1".to_vec()],
        };
        Ok(TlsServer {
            config: Arc::new(config),
            allowed_cn: info.allowed_cn,
            allowed_hostname: info.allowed_hostname,
        })
    }

    /// Completes the handshake on `io` and applies the CN/host name rules. Returns the stream
    /// and the client certificate's CN (when the client sent one).
    pub async fn accept<IO>(
        &self,
        io: IO,
    ) -> Result<(tokio_rustls::server::TlsStream<IO>, Option<String>), String>
    where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let acceptor = tokio_rustls::TlsAcceptor::from(self.config.clone());
        let stream = acceptor
            .accept(io)
            .await
            .map_err(|e| format!("TLS handshake failed: {e}"))?;
        let leaf = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .cloned();
        let (cn, names) = match &leaf {
            Some(der) => cert_names(der),
            None => (None, Vec::new()),
        };
        if !self.allowed_cn.is_empty() && cn.as_deref() != Some(self.allowed_cn.as_str()) {
            return Err(format!(
                "rejected connection: certificate CN {:?} is not the allowed CN {:?}",
                cn.unwrap_or_default(),
                self.allowed_cn
            ));
        }
        if !self.allowed_hostname.is_empty() && !names.contains(&self.allowed_hostname) {
            return Err(format!(
                "rejected connection: certificate names {names:?} do not include the allowed host name {:?}",
                self.allowed_hostname
            ));
        }
        Ok((stream, cn))
    }
}

/// --peer-cert-allowed-cn / --*-cert-allowed-hostname checked inside the handshake, after the
/// chain: a certificate with another CN or host name gets the bad_certificate alert, as
/// etcd's peers do (accept() checks again for listeners without client certificates).
#[derive(Debug)]
struct AllowedNames {
    inner: Arc<dyn rustls::server::danger::ClientCertVerifier>,
    cn: String,
    hostname: String,
}

impl rustls::server::danger::ClientCertVerifier for AllowedNames {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        let ok = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let (cn, names) = cert_names(end_entity);
        let cn_ok = self.cn.is_empty() || cn.as_deref() == Some(self.cn.as_str());
        let host_ok = self.hostname.is_empty() || names.contains(&self.hostname);
        if cn_ok && host_ok {
            Ok(ok)
        } else {
            tracing::warn!(
                cn = cn.unwrap_or_default(),
                names = ?names,
                allowed_cn = %self.cn,
                allowed_hostname = %self.hostname,
                "rejected connection: the certificate is not for the allowed CN or host name"
            );
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The subject CN and the DNS/IP names of a DER certificate.
fn cert_names(der: &CertificateDer<'_>) -> (Option<String>, Vec<String>) {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der.as_ref()) else {
        return (None, Vec::new());
    };
    let cn = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|a| a.as_str().ok())
        .map(str::to_string);
    let mut names = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            match n {
                x509_parser::extensions::GeneralName::DNSName(d) => names.push(d.to_string()),
                x509_parser::extensions::GeneralName::IPAddress(ip) => {
                    let s = match ip.len() {
                        4 => std::net::IpAddr::from(<[u8; 4]>::try_from(*ip).unwrap_or_default())
                            .to_string(),
                        16 => std::net::IpAddr::from(<[u8; 16]>::try_from(*ip).unwrap_or_default())
                            .to_string(),
                        _ => continue,
                    };
                    names.push(s);
                }
                _ => {}
            }
        }
    }
    if let Some(c) = &cn {
        names.push(c.clone());
    }
    (cn, names)
}

/// The verified client certificate's CN, set on each request of a TLS connection whose
/// client presented a certificate (with --client-cert-auth it has been checked against
/// --trusted-ca-file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCertCn(pub String);

/// The CN of the client certificate behind a gRPC request, if any: auth uses it as the user
/// name when a request carries no token, as etcd does.
pub fn client_cert_cn<T>(req: &tonic::Request<T>) -> Option<&str> {
    req.extensions().get::<ClientCertCn>().map(|c| c.0.as_str())
}

/// The host parts of URLs, for self-signed certificates.
pub fn url_hosts(urls: &[Url]) -> Vec<String> {
    urls.iter()
        .map(|u| match u.host.rsplit_once(':') {
            Some((h, _)) => h.trim_start_matches('[').trim_end_matches(']').to_string(),
            None => u.host.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::tls::connect;

    /// A self-signed peer pair (--peer-auto-tls) and a dialer that skips verification, as
    /// etcd's peers do, complete a handshake and see each other's certificate CN-less.

    #[tokio::test]
    async fn peer_auto_tls_server_and_client_handshake() {
        let dir = tempfile::tempdir().unwrap();
        let info = TlsInfo {
            auto_tls: true,
            ..TlsInfo::default()
        };
        let server = TlsServer::new(&info, Side::Peer, dir.path(), &["127.0.0.1".into()]).unwrap();
        assert!(dir.path().join("fixtures/peer/cert.pem").is_file());
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (seen, mut cns) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = l.accept().await {
                let _ = seen.send(server.accept(tcp).await.map(|(_, cn)| cn).ok());
            }
        });
        let dial = |config: Arc<rustls::ClientConfig>| async move {
            connect(config, "127.0.0.1", addr.port()).await
        };
        dial(client_config(&info, true).unwrap()).await.unwrap();
        assert_eq!(cns.recv().await, Some(Some(None)));
        // Without skipping verification and without a CA, the system's roots are used (as
        // Go does), and they do not know a self-signed certificate. A machine with no roots
        // at all refuses already at setup.
        match client_config(&info, false) {
            Ok(strict) => assert!(dial(strict).await.is_err()),
            Err(e) => assert!(e.contains("no system CA certificates"), "{e}"),
        }
    }
}
