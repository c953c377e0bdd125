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

    /// The random part a member puts in a simple token before proposing Authenticate.
    pub fn gen_prefix(&self) -> String {
        match self {
            TokenProvider::Simple(_) => random_letters(SIMPLE_TOKEN_LENGTH),
            TokenProvider::Jwt(_) => String::new(),
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

fn random_letters(n: usize) -> String {
    const LETTERS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    let mut buf = vec![0u8; n];
    if getrandom::fill(&mut buf).is_err() {
        // No OS randomness: fall back to the clock, still unique per call with the index.
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (t >> (i % 16 * 8)) as u8 ^ i as u8;
        }
    }
    buf.iter()
        .map(|b| LETTERS[*b as usize % LETTERS.len()] as char)
        .collect()
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
                                Algorithm::ES256 | Algorithm::ES384 => {
                                    EncodingKey::from_ec_pem(&pem)
                                }
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
        Ok(JwtTokens {
            alg,
            ttl,
            encoding,
            decoding,
        })
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
        let prefix = p.gen_prefix();
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

    #[test]
    fn bad_token_flags_are_refused() {
        assert!(TokenProvider::from_flag("nope", 300).is_err());
        assert!(TokenProvider::from_flag("jwt,sign-method=RS256", 300).is_err());
        assert!(
            TokenProvider::from_flag("jwt,pub-key=/nonexistent,sign-method=RS256", 300).is_err()
        );
    }
}
