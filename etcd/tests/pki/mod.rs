// A test PKI made at run time with rcgen (a CA, server, peer and client certificates, a revoked
// client certificate and a CRL naming it): shared by the TLS and kubeadm tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertificateRevocationListParams, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyIdMethod, KeyPair, KeyUsagePurpose,
    RevokedCertParams, SerialNumber,
};

/// PEM files of one test PKI.
pub struct Pki {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    /// A second server-and-client certificate, as kubeadm's etcd/peer.crt.
    pub peer_cert: PathBuf,
    pub peer_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    pub revoked_cert: PathBuf,
    pub revoked_key: PathBuf,
    pub crl: PathBuf,
}

fn write(dir: &Path, name: &str, data: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, data).unwrap();
    p
}

/// A CA, server and peer certificates for 127.0.0.1 and 127.0.0.2 (a second loopback address
/// stands for a node's own IP, as in kubeadm's certificates), client certificates (CN alice, and CN mallory
/// whose serial the CRL revokes). Test-only keys, made fresh for each run.
pub fn make_pki(dir: &Path) -> Pki {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "etcd-rs test CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_key = KeyPair::generate().unwrap();
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);

    let leaf = |cn: &str, sans: Vec<String>, serial: u64, server: bool| {
        let mut p = CertificateParams::new(sans).unwrap();
        p.distinguished_name.push(DnType::CommonName, cn);
        p.serial_number = Some(SerialNumber::from(serial));
        p.extended_key_usages = if server {
            vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ]
        } else {
            vec![ExtendedKeyUsagePurpose::ClientAuth]
        };
        let k = KeyPair::generate().unwrap();
        let c = p.signed_by(&k, &issuer).unwrap();
        (c.pem(), k.serialize_pem())
    };
    let (server_cert, server_key) = leaf(
        "server",
        vec!["127.0.0.1".into(), "127.0.0.2".into(), "localhost".into()],
        10,
        true,
    );
    let (peer_cert, peer_key) = leaf(
        "peer",
        vec!["127.0.0.1".into(), "127.0.0.2".into(), "localhost".into()],
        13,
        true,
    );
    let (client_cert, client_key) = leaf("alice", vec![], 11, false);
    let (revoked_cert, revoked_key) = leaf("mallory", vec![], 12, false);
    let crl = CertificateRevocationListParams {
        this_update: rcgen::date_time_ymd(2020, 1, 1),
        next_update: rcgen::date_time_ymd(2099, 1, 1),
        crl_number: SerialNumber::from(1u64),
        issuing_distribution_point: None,
        revoked_certs: vec![RevokedCertParams {
            serial_number: SerialNumber::from(12u64),
            revocation_time: rcgen::date_time_ymd(2020, 1, 1),
            reason_code: None,
            invalidity_date: None,
        }],
        key_identifier_method: KeyIdMethod::Sha256,
    }
    .signed_by(&issuer)
    .unwrap();
    Pki {
        ca: write(dir, "ca.pem", &ca_cert.pem()),
        server_cert: write(dir, "server.pem", &server_cert),
        server_key: write(dir, "server-key.pem", &server_key),
        peer_cert: write(dir, "peer.pem", &peer_cert),
        peer_key: write(dir, "peer-key.pem", &peer_key),
        client_cert: write(dir, "client.pem", &client_cert),
        client_key: write(dir, "client-key.pem", &client_key),
        revoked_cert: write(dir, "revoked.pem", &revoked_cert),
        revoked_key: write(dir, "revoked-key.pem", &revoked_key),
        crl: write(dir, "crl.pem", &crl.pem().unwrap()),
    }
}
