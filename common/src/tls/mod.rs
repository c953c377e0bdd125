// TLS as both ends of etcd's connections set it up: one side's settings (etcd's TLSInfo),
// --cipher-suites, PEM/DER files read with Go's wording, and the dialing side (rustls config and
// connector) that etcdctl and the server's peer transport share.
//
// The listening side (TlsServer, auto TLS, CN checks) stays in the server crate: only it
// accepts connections. This module is behind the `tls` feature so that the file-format users
// of this crate (etcdutl, the benches) build neither rustls nor tokio.

mod dial;
mod p521;

pub use dial::{Connector, UnixConnector, connect};

use std::sync::Arc;

use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, CertificateRevocationListDer, PrivateKeyDer};

/// One side's TLS settings, as etcd's transport.TLSInfo (which Go's etcd also shares between
/// the server and its clients).
#[derive(Debug, Clone, Default)]
pub struct TlsInfo {
    pub cert_file: String,
    pub key_file: String,
    pub trusted_ca_file: String,
    pub client_cert_auth: bool,
    pub crl_file: String,
    /// Required CN of the client certificate (--peer-cert-allowed-cn).
    pub allowed_cn: String,
    /// Required host name among the client certificate's names (--*-cert-allowed-hostname).
    pub allowed_hostname: String,
    pub cipher_suites: Vec<String>,
    pub auto_tls: bool,
}

impl TlsInfo {
    /// No certificate configured (etcd's TLSInfo.Empty).
    pub fn is_empty(&self) -> bool {
        self.cert_file.is_empty() && self.key_file.is_empty()
    }
}

/// Go's names for the TLS 1.2 suites rustls implements (TLS 1.3 suites are always on, as in
/// Go, where --cipher-suites does not apply to TLS 1.3).
const SUITES: &[(&str, rustls::CipherSuite)] = &[
    (
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    ),
    (
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        rustls::CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    ),
    (
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
        rustls::CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
        rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
    (
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
        rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
    (
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
        rustls::CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
    (
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
        rustls::CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
];

/// Go knows these names; rustls does not implement them (CBC, RC4, 3DES, static RSA).
const GO_ONLY_SUITES: &[&str] = &[
    "TLS_RSA_WITH_RC4_128_SHA",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
];

/// The TLS 1.2 suites to keep, or None for rustls's defaults (no --cipher-suites).
pub fn cipher_suite_filter(names: &[String]) -> Result<Option<Vec<rustls::CipherSuite>>, String> {
    if names.is_empty() {
        return Ok(None);
    }
    let mut out = Vec::new();
    for n in names {
        if let Some((_, s)) = SUITES.iter().find(|(name, _)| name == n) {
            out.push(*s);
        } else if GO_ONLY_SUITES.contains(&n.as_str()) {
            return Err(format!(
                "TLS cipher suite {n:?} is not supported by etcd-rs (rustls implements only the ECDHE AEAD suites); remove it from --cipher-suites"
            ));
        } else {
            return Err(format!("unexpected TLS cipher suite {n:?}"));
        }
    }
    Ok(Some(out))
}

/// Go's preference among the suites rustls has (crypto/tls on a machine with AES hardware):
/// AES-128-GCM, then AES-256-GCM, then ChaCha20, ECDSA before RSA. A server that picks by
/// this order (`ServerConfig::ignore_client_order`) negotiates what etcd would.
const GO_PREFERENCE: &[rustls::CipherSuite] = &[
    rustls::CipherSuite::TLS13_AES_128_GCM_SHA256,
    rustls::CipherSuite::TLS13_AES_256_GCM_SHA384,
    rustls::CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
    rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    rustls::CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    rustls::CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    rustls::CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
];

/// ring's provider with the TLS 1.2 suites narrowed to `cipher_suites` (when given), in Go's
/// order of preference.
pub fn provider(cipher_suites: &[String]) -> Result<Arc<CryptoProvider>, String> {
    let mut p = rustls::crypto::ring::default_provider();
    if let Some(keep) = cipher_suite_filter(cipher_suites)? {
        p.cipher_suites
            .retain(|s| s.version() == &rustls::version::TLS13 || keep.contains(&s.suite()));
    }
    p.cipher_suites.sort_by_key(|s| {
        GO_PREFERENCE
            .iter()
            .position(|g| *g == s.suite())
            .unwrap_or(GO_PREFERENCE.len())
    });
    Ok(Arc::new(p))
}

/// Go's wording for a file that cannot be opened ("open <path>: no such file or directory").
fn open_error(path: &str, e: &std::io::Error) -> String {
    let why = match e.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".to_string(),
        std::io::ErrorKind::PermissionDenied => "permission denied".to_string(),
        _ => e.to_string(),
    };
    format!("open {path}: {why}")
}

fn read_file(path: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| open_error(path, &e))
}

pub fn load_certs(path: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = read_file(path)?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{path}: cannot parse the PEM certificates: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{path}: no PEM certificate found"));
    }
    Ok(certs)
}

pub fn load_key(path: &str) -> Result<PrivateKeyDer<'static>, String> {
    let pem = read_file(path)?;
    PrivateKeyDer::from_pem_slice(&pem)
        .map_err(|e| format!("{path}: cannot parse the PEM private key: {e}"))
}

/// The CRLs of a --*-crl-file, PEM or (as Go accepts too) one DER list.
pub fn load_crls(path: &str) -> Result<Vec<CertificateRevocationListDer<'static>>, String> {
    let data = read_file(path)?;
    let pem: Result<Vec<_>, _> = CertificateRevocationListDer::pem_slice_iter(&data).collect();
    match pem {
        Ok(v) if !v.is_empty() => Ok(v),
        // Go accepts a DER CRL too.
        _ => Ok(vec![CertificateRevocationListDer::from(data)]),
    }
}

/// The system's CA roots (SSL_CERT_FILE / SSL_CERT_DIR, or the distribution's bundle).
fn system_roots() -> Result<RootCertStore, String> {
    let found = rustls_native_certs::load_native_certs();
    let mut store = RootCertStore::empty();
    let (added, _) = store.add_parsable_certificates(found.certs);
    if added == 0 {
        let why = found
            .errors
            .first()
            .map(|e| format!(": {e}"))
            .unwrap_or_default();
        return Err(format!(
            "no system CA certificates found{why}; pass a CA bundle (--cacert / --trusted-ca-file)"
        ));
    }
    Ok(store)
}

/// The CA certificates of a --cacert / --*trusted-ca-file.
pub fn roots(path: &str) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    for c in load_certs(path)? {
        store
            .add(c)
            .map_err(|e| format!("{path}: not a usable CA certificate: {e}"))?;
    }
    Ok(store)
}

/// The dialing side built from `info` (etcdctl, and the peer transport's client): trusts
/// `info.trusted_ca_file`, presents `info`'s certificate when there is one, and with
/// `skip_verify` (--insecure-skip-tls-verify, and what etcd does for --peer-auto-tls) accepts
/// any server certificate.
pub fn client_config(
    info: &TlsInfo,
    skip_verify: bool,
) -> Result<Arc<rustls::ClientConfig>, String> {
    let provider = provider(&info.cipher_suites)?;
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?;
    let builder = if skip_verify {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoServerVerification(provider)))
    } else if info.trusted_ca_file.is_empty() {
        // As Go's crypto/tls with no RootCAs: the system's trusted roots.
        builder.with_root_certificates(system_roots()?)
    } else {
        builder.with_root_certificates(roots(&info.trusted_ca_file)?)
    };
    let config = if info.is_empty() {
        builder.with_no_client_auth()
    } else {
        builder
            .with_client_auth_cert(load_certs(&info.cert_file)?, load_key(&info.key_file)?)
            .map_err(|e| {
                format!(
                    "{}: the key does not fit the certificate: {e}",
                    info.key_file
                )
            })?
    };
    Ok(Arc::new(config))
}

/// Go's InsecureSkipVerify: the handshake's signatures are still checked, the chain is not.
#[derive(Debug)]
struct NoServerVerification(Arc<CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoServerVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &rustls_pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &p521::with_p521(&self.0.signature_verification_algorithms),
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &p521::with_p521(&self.0.signature_verification_algorithms),
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        p521::with_p521(&self.0.signature_verification_algorithms).supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// etcdctl and the server print these texts as they are; scripts match on Go's wording.
    #[test]
    fn errors_keep_gos_and_etcds_wording() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.pem").display().to_string();
        assert_eq!(
            load_certs(&missing).unwrap_err(),
            format!("open {missing}: no such file or directory")
        );
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, b"").unwrap();
        let empty = empty.display().to_string();
        assert_eq!(
            load_certs(&empty).unwrap_err(),
            format!("{empty}: no PEM certificate found")
        );
        assert_eq!(
            cipher_suite_filter(&["TLS_RSA_WITH_RC4_128_SHA".into()]).unwrap_err(),
            "TLS cipher suite \"TLS_RSA_WITH_RC4_128_SHA\" is not supported by etcd-rs (rustls implements only the ECDHE AEAD suites); remove it from --cipher-suites"
        );
        assert_eq!(
            cipher_suite_filter(&["nope".into()]).unwrap_err(),
            "unexpected TLS cipher suite \"nope\""
        );
        assert_eq!(cipher_suite_filter(&[]).unwrap(), None);
    }

    /// A narrowed provider keeps TLS 1.3 and only the named TLS 1.2 suites.
    #[test]
    fn cipher_suites_narrow_tls12_only() {
        let p = provider(&["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".into()]).unwrap();
        let tls12: Vec<_> = p
            .cipher_suites
            .iter()
            .filter(|s| s.version() != &rustls::version::TLS13)
            .map(|s| s.suite())
            .collect();
        assert_eq!(
            tls12,
            [rustls::CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]
        );
        assert!(
            p.cipher_suites
                .iter()
                .any(|s| s.version() == &rustls::version::TLS13)
        );
    }
}
