// Auth tokens: etcd's `simple` tokens (random prefix + raft index, kept in memory with a TTL
// renewed on use) and `jwt` tokens (signed claims username/revision/exp), from --auth-token.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};

use super::AuthInfo;

/// etcd's length of a simple token's random part.
const SIMPLE_TOKEN_LENGTH: usize = 16;
/// etcd's default JWT lifetime when `ttl=` is not given.
const DEFAULT_JWT_TTL: Duration = Duration::from_secs(300);

/// The token kind chosen by --auth-token.
pub enum TokenProvider {
    Simple(SimpleTokens),
    Jwt(JwtTokens),
}

impl TokenProvider {
    /// Builds the provider from `--auth-token` (`simple`, or `jwt,pub-key=..,priv-key=..,
    /// sign-method=..,ttl=..`) and `--auth-token-ttl` (seconds, simple tokens only).
    pub fn from_flag(spec: &str, simple_ttl_secs: u64) -> Result<TokenProvider, String> {
        let mut parts = spec.split(',');
        let kind = parts.next().unwrap_or("").trim();
        match kind {
            "simple" | "" => Ok(TokenProvider::Simple(SimpleTokens::new(
                Duration::from_secs(simple_ttl_secs),
            ))),
            "jwt" => JwtTokens::from_options(parts).map(TokenProvider::Jwt),
            other => Err(format!(
                "--auth-token {other:?}: unknown token type (use 'simple' or 'jwt,pub-key=...,priv-key=...,sign-method=...')"
            )),
        }
    }

    /// The random part a member puts in a simple token before proposing Authenticate; None
    /// when the OS gives no randomness (no token is better than a guessable one).
    pub fn gen_prefix(&self) -> Option<String> {
        match self {
            TokenProvider::Simple(_) => random_letters(SIMPLE_TOKEN_LENGTH),
            TokenProvider::Jwt(_) => Some(String::new()),
        }
    }

    /// Makes the token for `user` as the Authenticate entry at raft `index` is applied.
    pub fn assign(
        &self,
        user: &str,
        revision: u64,
        prefix: &str,
        index: u64,
    ) -> Result<String, String> {
        match self {
            TokenProvider::Simple(s) => {
                let token = format!("{prefix}.{index}");
                s.insert(&token, user);
                Ok(token)
            }
            TokenProvider::Jwt(j) => j.sign(user, revision),
        }
    }

    /// Who `token` names, or None when it is unknown, expired or forged. Simple tokens carry
    /// no revision, so they are checked against `current_revision`, as etcd does.
    pub fn info(&self, token: &str, current_revision: u64) -> Option<AuthInfo> {
        match self {
            TokenProvider::Simple(s) => s.lookup(token).map(|username| AuthInfo {
                username,
                revision: current_revision,
            }),
            TokenProvider::Jwt(j) => j.verify(token),
        }
    }

    /// Drops every token (auth disabled).
    pub fn clear(&self) {
        if let TokenProvider::Simple(s) = self {
            s.lock().clear();
        }
    }

    /// Drops the tokens of `user` (deleted, or its password changed).
    pub fn invalidate_user(&self, user: &str) {
        if let TokenProvider::Simple(s) = self {
            s.lock().retain(|_, (u, _)| u != user);
        }
    }
}

/// An EC private key from PEM. etcd (Go) takes both `EC PRIVATE KEY` (SEC1, what
/// `openssl ecparam -genkey` writes) and `PRIVATE KEY` (PKCS#8); jsonwebtoken only the second,
/// so a SEC1 key is wrapped into PKCS#8 first.
fn ec_private_key(pem: &[u8], alg: Algorithm) -> jsonwebtoken::errors::Result<EncodingKey> {
    use base64::Engine;
    let text = String::from_utf8_lossy(pem);
    if !text.contains("-----BEGIN EC PRIVATE KEY-----") {
        return EncodingKey::from_ec_pem(pem);
    }
    let b64: String = text
        .lines()
        .skip_while(|l| !l.starts_with("-----BEGIN EC PRIVATE KEY-----"))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END"))
        .map(str::trim)
        .collect();
    let sec1 = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|_| jsonwebtoken::errors::ErrorKind::InvalidKeyFormat)?;
    // OIDs (DER, with tag and length): id-ecPublicKey, then the curve.
    const EC_PUBLIC_KEY: &[u8] = &[0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
    const P256: &[u8] = &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
    const P384: &[u8] = &[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22];
    let curve = if alg == Algorithm::ES384 { P384 } else { P256 };
    let algo = der(0x30, &[EC_PUBLIC_KEY, curve].concat());
    let body = [&[0x02, 0x01, 0x00][..], &algo, &der(0x04, &sec1)].concat();
    Ok(EncodingKey::from_ec_der(&der(0x30, &body)))
}

/// One DER element: tag, definite length, contents.
fn der(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let n = content.len();
    if n < 0x80 {
        out.push(n as u8);
    } else {
        let bytes: Vec<u8> = n
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

fn random_letters(n: usize) -> Option<String> {
    const LETTERS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    let mut buf = vec![0u8; n];
    // A token must never be guessable: without OS randomness there is no token at all.
    getrandom::fill(&mut buf).ok()?;
    Some(
        buf.iter()
            .map(|b| LETTERS[*b as usize % LETTERS.len()] as char)
            .collect(),
    )
}

/// Simple tokens: token → (user, deadline). A use renews the deadline, as etcd's keeper does.
pub struct SimpleTokens {
    ttl: Duration,
    tokens: Mutex<HashMap<String, (String, Instant)>>,
}

impl SimpleTokens {
    fn new(ttl: Duration) -> SimpleTokens {
        SimpleTokens {
            ttl,
            tokens: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, Instant)>> {
        self.tokens.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn insert(&self, token: &str, user: &str) {
        let now = Instant::now();
        let mut m = self.lock();
        // Expired tokens go when new ones come, so the map cannot grow without bound.
        m.retain(|_, (_, deadline)| *deadline > now);
        m.insert(token.to_string(), (user.to_string(), now + self.ttl));
    }

    fn lookup(&self, token: &str) -> Option<String> {
        let now = Instant::now();
        let mut m = self.lock();
        let (user, deadline) = m.get_mut(token)?;
        if *deadline <= now {
            m.remove(token);
            return None;
        }
        *deadline = now + self.ttl;
        Some(user.clone())
    }
}

/// JWT tokens signed with the private key and checked with the public one.
pub struct JwtTokens {
    alg: Algorithm,
    ttl: Duration,
    encoding: Option<EncodingKey>,
    decoding: DecodingKey,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Claims {
    username: String,
    revision: u64,
    exp: u64,
}

impl JwtTokens {
    fn from_options<'a>(opts: impl Iterator<Item = &'a str>) -> Result<JwtTokens, String> {
        let (mut pub_key, mut priv_key, mut method, mut ttl) = (None, None, None, DEFAULT_JWT_TTL);
        for o in opts {
            let (k, v) = o
                .split_once('=')
                .ok_or_else(|| format!("--auth-token jwt option {o:?}: expected key=value"))?;
            match k.trim() {
                "pub-key" => pub_key = Some(v.to_string()),
                "priv-key" => priv_key = Some(v.to_string()),
                "sign-method" => method = Some(v.to_string()),
                "ttl" => {
                    ttl = common::gofmt::parse_go_duration(v)
                        .map_err(|e| format!("--auth-token jwt ttl={v}: {e}"))?
                }
                other => return Err(format!("--auth-token jwt: unknown option {other:?}")),
            }
        }
        let method =
            method.ok_or("--auth-token jwt: sign-method is required (e.g. sign-method=RS256)")?;
        let alg: Algorithm = method
            .parse()
            .map_err(|_| format!("--auth-token jwt: unknown sign-method {method:?}"))?;
        let read = |what: &str, p: &str| {
            std::fs::read(p).map_err(|e| format!("--auth-token jwt: cannot read {what} {p}: {e}"))
        };
        let key_err = |what: &str, p: &str, e: jsonwebtoken::errors::Error| {
            format!("--auth-token jwt: {what} {p} is not a valid {method} key: {e}")
        };
        let (encoding, decoding) = match alg {
            Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512 => {
                // HMAC: the private key file holds the shared secret.
                let p = priv_key.ok_or("--auth-token jwt: priv-key is required for HMAC")?;
                let secret = read("priv-key", &p)?;
                let enc =
                    EncodingKey::from_secret(&secret).map_err(|e| key_err("priv-key", &p, e))?;
                let dec =
                    DecodingKey::from_secret(&secret).map_err(|e| key_err("priv-key", &p, e))?;
                (Some(enc), dec)
            }
            _ => {
                let p = pub_key.ok_or("--auth-token jwt: pub-key is required")?;
                let pem = read("pub-key", &p)?;
                let decoding = match alg {
                    Algorithm::ES256 | Algorithm::ES384 => DecodingKey::from_ec_pem(&pem),
                    Algorithm::EdDSA => DecodingKey::from_ed_pem(&pem),
                    _ => DecodingKey::from_rsa_pem(&pem),
                }
                .map_err(|e| key_err("pub-key", &p, e))?;
                // Without a private key a member can verify tokens but not issue them.
                let encoding = match priv_key {
                    None => None,
                    Some(p) => {
                        let pem = read("priv-key", &p)?;
                        Some(
                            match alg {
                                Algorithm::ES256 | Algorithm::ES384 => ec_private_key(&pem, alg),
                                Algorithm::EdDSA => EncodingKey::from_ed_pem(&pem),
                                _ => EncodingKey::from_rsa_pem(&pem),
                            }
                            .map_err(|e| key_err("priv-key", &p, e))?,
                        )
                    }
                };
                (encoding, decoding)
            }
        };
        let j = JwtTokens {
            alg,
            ttl,
            encoding,
            decoding,
        };
        // A key that cannot sign, or a private key that does not match the public one, is a
        // start-up error rather than a failing Authenticate later.
        if j.encoding.is_some() {
            let t = j.sign("etcd-rs-key-check", 0)?;
            if j.verify(&t).is_none() {
                return Err(format!(
                    "--auth-token jwt: tokens signed with the priv-key do not verify with the pub-key ({method})"
                ));
            }
        }
        Ok(j)
    }

    fn sign(&self, user: &str, revision: u64) -> Result<String, String> {
        let key = self
            .encoding
            .as_ref()
            .ok_or("this member has no JWT private key (priv-key) to sign tokens")?;
        let exp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d + self.ttl)
            .unwrap_or(self.ttl)
            .as_secs();
        let claims = Claims {
            username: user.to_string(),
            revision,
            exp,
        };
        jsonwebtoken::encode(&Header::new(self.alg), &claims, key)
            .map_err(|e| format!("cannot sign a JWT: {e}"))
    }

    fn verify(&self, token: &str) -> Option<AuthInfo> {
        let mut v = Validation::new(self.alg);
        v.leeway = 0;
        v.validate_aud = false;
        let data = jsonwebtoken::decode::<Claims>(token, &self.decoding, &v).ok()?;
        Some(AuthInfo {
            username: data.claims.username,
            revision: data.claims.revision,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simple_tokens_name_their_user_until_invalidated() {
        let p = TokenProvider::from_flag("simple", 300).expect("simple");
        let prefix = p.gen_prefix().expect("OS randomness");
        assert_eq!(prefix.len(), 16);
        assert!(prefix.chars().all(|c| c.is_ascii_alphabetic()));
        let t = p.assign("alice", 3, &prefix, 42).expect("assign");
        assert_eq!(t, format!("{prefix}.42"));
        assert_eq!(
            p.info(&t, 7).map(|i| (i.username, i.revision)),
            Some(("alice".into(), 7))
        );
        p.invalidate_user("alice");
        assert!(p.info(&t, 7).is_none());
        assert!(p.info("forged.1", 7).is_none());
    }

    #[test]
    fn simple_tokens_expire() {
        let p = TokenProvider::from_flag("simple", 0).expect("simple");
        let t = p.assign("bob", 1, "abc", 1).expect("assign");
        assert!(p.info(&t, 1).is_none());
    }

    /// A throwaway P-256 key in SEC1 form, as `openssl ecparam -genkey -noout` writes it.
    const TEST_EC_KEY: &str = "-----BEGIN EC PRIVATE KEY-----
MHcCAQEEIEWQu+alzjP43YCmBmRQwOiqqOlRG4YUSbBfuTPjawoOoAoGCCqGSM49
AwEHoUQDQgAEKaOuQ33lxCgDKaMyfHLTU4P+JGx+7kVpzXiKdHOJ8zx8aD7ArFkW
7OZ3XTkI5zsLK2eR8B6LDDS8BHXiXQV5Wg==
-----END EC PRIVATE KEY-----
";
    const TEST_EC_PUB: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEKaOuQ33lxCgDKaMyfHLTU4P+JGx+
7kVpzXiKdHOJ8zx8aD7ArFkW7OZ3XTkI5zsLK2eR8B6LDDS8BHXiXQV5Wg==
-----END PUBLIC KEY-----
";

    #[test]
    fn jwt_with_a_sec1_ec_key_signs_and_verifies() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (k, p) = (dir.path().join("ec.key"), dir.path().join("ec.pub"));
        std::fs::write(&k, TEST_EC_KEY).expect("write key");
        std::fs::write(&p, TEST_EC_PUB).expect("write pub");
        let spec = format!(
            "jwt,pub-key={},priv-key={},sign-method=ES256,ttl=1m",
            p.display(),
            k.display()
        );
        let tp = TokenProvider::from_flag(&spec, 300).expect("ES256 provider");
        let t = tp.assign("alice", 9, "", 5).expect("sign");
        let info = tp.info(&t, 100).expect("verifies");
        assert_eq!((info.username.as_str(), info.revision), ("alice", 9));
        assert!(tp.info(&format!("{t}x"), 100).is_none());
        // The key under the wrong method is refused at start.
        let rs = spec.replace("ES256", "RS256");
        assert!(TokenProvider::from_flag(&rs, 300).is_err());
    }

    #[test]
    fn bad_token_flags_are_refused() {
        assert!(TokenProvider::from_flag("nope", 300).is_err());
        assert!(TokenProvider::from_flag("jwt,sign-method=RS256", 300).is_err());
        assert!(
            TokenProvider::from_flag("jwt,pub-key=/nonexistent,sign-method=RS256", 300).is_err()
        );
    }
}
