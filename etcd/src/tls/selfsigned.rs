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
    // Valid from today for one year, as etcd's self-signed certificates.
    let (y, m, d) = civil_today();
    params.not_before = rcgen::date_time_ymd(y, m, d);
    params.not_after = rcgen::date_time_ymd(y + 1, m, d.min(28));
    let key_pair =
        rcgen::KeyPair::generate().map_err(|e| format!("auto TLS: cannot generate a key: {e}"))?;
    let c = params
        .self_signed(&key_pair)
        .map_err(|e| format!("auto TLS: cannot sign the certificate: {e}"))?;
    common::fileutil::write_file_atomic(&key, key_pair.serialize_pem().as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", key.display()))?;
    common::fileutil::write_file_atomic(&cert, c.pem().as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", cert.display()))?;
    // The certificate is public (etcd writes it 0644); the key stays 0600.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&cert, std::fs::Permissions::from_mode(0o644))
        .map_err(|e| format!("cannot chmod {}: {e}", cert.display()))?;
    tracing::info!(cert = %cert.display(), key = %key.display(), "created self-signed TLS certificate");
    Ok((cert, key))
}

/// Today's UTC date (year, month, day) from the system clock.
fn civil_today() -> (i32, u8, u8) {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    civil_from_days((secs / 86_400) as i64)
}

/// Days since 1970-01-01 → proleptic Gregorian (year, month, day), by 400-year eras.
fn civil_from_days(days: i64) -> (i32, u8, u8) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u8;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u8;
    let y = (yoe + era * 400 + i64::from(m <= 2)) as i32;
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_to_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_786), (2026, 11, 29));
    }

    #[test]
    fn certificate_is_made_once_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let fx = dir.path().join("fixtures").join("client");
        let (c, k) = self_cert(&fx, &["127.0.0.1".into(), "localhost".into()]).unwrap();
        let first = std::fs::read(&c).unwrap();
        assert!(std::fs::read_to_string(&k).unwrap().contains("PRIVATE KEY"));
        let (c2, _) = self_cert(&fx, &["127.0.0.1".into()]).unwrap();
        assert_eq!(std::fs::read(c2).unwrap(), first);
    }
}
