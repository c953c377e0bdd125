//! ECDSA P-521 with SHA-512 for TLS handshake signatures: Go's --auto-tls and --peer-auto-tls
//! certificates use P-521 keys, which the ring provider cannot verify.

use std::sync::OnceLock;

use p521::ecdsa::signature::Verifier;
use rustls::SignatureScheme;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls_pki_types::{
    AlgorithmIdentifier, InvalidSignature, SignatureVerificationAlgorithm, alg_id,
};

/// ecdsa_secp521r1_sha512, verified in pure Rust.
#[derive(Debug)]
struct EcdsaP521Sha512;

impl SignatureVerificationAlgorithm for EcdsaP521Sha512 {
    fn verify_signature(
        &self,
        public_key: &[u8],
        message: &[u8],
        signature: &[u8],
    ) -> Result<(), InvalidSignature> {
        let key =
            p521::ecdsa::VerifyingKey::from_sec1_bytes(public_key).map_err(|_| InvalidSignature)?;
        let sig = p521::ecdsa::Signature::from_der(signature).map_err(|_| InvalidSignature)?;
        key.verify(message, &sig).map_err(|_| InvalidSignature)
    }

    fn public_key_alg_id(&self) -> AlgorithmIdentifier {
        alg_id::ECDSA_P521
    }

    fn signature_alg_id(&self) -> AlgorithmIdentifier {
        alg_id::ECDSA_SHA512
    }
}

static P521: EcdsaP521Sha512 = EcdsaP521Sha512;
static P521_ONLY: [&dyn SignatureVerificationAlgorithm; 1] = [&P521];

/// `base` (the provider's algorithms) plus P-521, built once per process.
pub fn with_p521(base: &WebPkiSupportedAlgorithms) -> WebPkiSupportedAlgorithms {
    static ALL: OnceLock<WebPkiSupportedAlgorithms> = OnceLock::new();
    *ALL.get_or_init(|| {
        let mut all = base.all.to_vec();
        all.push(&P521);
        let mut mapping = base.mapping.to_vec();
        mapping.push((SignatureScheme::ECDSA_NISTP521_SHA512, &P521_ONLY));
        WebPkiSupportedAlgorithms {
            all: Box::leak(all.into_boxed_slice()),
            mapping: Box::leak(mapping.into_boxed_slice()),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use p521::ecdsa::signature::Signer;

    #[test]
    fn verifies_p521_signatures_and_refuses_forgeries() {
        // A scalar below the group order (whose top byte is 0x01).
        let mut scalar = [7u8; 66];
        scalar[0] = 0;
        let sk = p521::ecdsa::SigningKey::from_slice(&scalar).expect("key");
        let vk = p521::ecdsa::VerifyingKey::from(&sk);
        let point = vk.to_sec1_point(false);
        let sig: p521::ecdsa::Signature = sk.sign(b"handshake");
        let der = sig.to_der();
        let alg = EcdsaP521Sha512;
        assert!(
            alg.verify_signature(point.as_bytes(), b"handshake", der.as_bytes())
                .is_ok()
        );
        assert!(
            alg.verify_signature(point.as_bytes(), b"handshakE", der.as_bytes())
                .is_err()
        );
    }
}
