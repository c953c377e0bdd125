// Self-signed certificates for --auto-tls and --peer-auto-tls: made once per data dir under
// fixtures/<side>/cert.pem and key.pem (etcd's layout) and reused on restart.

use std::path::{Path, PathBuf};

/// Returns (cert.pem, key.pem) in `dir`, creating them for `hosts` if either is missing.
pub fn self_cert(dir: &Path, hosts: &[String]) -> Result<(PathBuf, PathBuf), String> {
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    if cert.exists() && key.exists() {
        return Ok((cert, key));
    }
    common::fileutil::touch_dir_all(dir)
        .map_err(|e| format!("cannot create {} for auto TLS: {e}", dir.display()))?;
    let mut names: Vec<String> = hosts.to_vec();
    names.sort();
    names.dedup();
    let mut params = rcgen::CertificateParams::new(names)
        .map_err(|e| format!("auto TLS: bad host names {hosts:?}: {e}"))?;
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(rcgen::DnType::OrganizationName, "etcd");
    params.distinguished_name = dn;
    params.extended_key_usages = vec![
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        rcgen::ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::DigitalSignature,
        rcgen::KeyUsagePurpose::KeyEncipherment,
    ];
    let key_pair =
        rcgen::KeyPair::generate().map_err(|e| format!("auto TLS: cannot generate a key: {e}"))?;
    let c = params
        .self_signed(&key_pair)
        .map_err(|e| format!("auto TLS: cannot sign the certificate: {e}"))?;
    common::fileutil::write_file_atomic(&key, key_pair.serialize_pem().as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", key.display()))?;
    common::fileutil::write_file_atomic(&cert, c.pem().as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", cert.display()))?;
    tracing::info!(cert = %cert.display(), key = %key.display(), "created self-signed TLS certificate");
    Ok((cert, key))
}
