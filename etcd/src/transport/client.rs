// HTTP/1.1 to peers, as etcd's peers speak it: dialing a peer URL (TCP, TLS for https),
// a few kept-alive connections per URL for one-shot requests, and the etcd headers raft
// requests carry (docs/RAFTHTTP.md §2.2).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, UnixStream};

use super::wire::{
    H_CLUSTER_ID, H_MIN_CLUSTER_VERSION, H_PEER_URLS, H_SERVER_FROM, H_SERVER_VERSION,
    MIN_CLUSTER_VERSION, id_path,
};
use crate::listener::Conn;

/// A request or response body.
pub type Body = BoxBody<Bytes, std::io::Error>;

pub fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).map_err(|never| match never {}).boxed()
}

pub fn empty() -> Body {
    full(Bytes::new())
}

/// Idle connections kept per peer URL.
const POOL: usize = 4;

trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// Why a request to a peer failed before it had an answer.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    #[error("bad peer URL {0}")]
    BadUrl(String),
    #[error("dial {url}: {source}")]
    Dial { url: String, source: std::io::Error },
    #[error("dial {0}: timed out")]
    Timeout(String),
    #[error("request to {url}: {source}")]
    Http { url: String, source: hyper::Error },
    #[error("https peer URL {0} but no peer TLS is configured")]
    NoTls(String),
}

/// Who we are on the peer network (the headers every raft request carries).
#[derive(Clone)]
pub struct Identity {
    pub member_id: u64,
    pub cluster_id: u64,
    pub peer_urls: Vec<String>,
    pub server_version: &'static str,
}

/// Kept-alive connections by the runtime that drives them and the URL they go to.
type Pool = HashMap<(Option<tokio::runtime::Id>, String), Vec<SendRequest<Body>>>;

/// Dials peers and keeps a few connections per URL and runtime: a connection is driven on the
/// runtime that dialed it, and one dialed on the raft thread only moves while the raft loop
/// waits, so a request from the client runtime takes a connection of its own runtime.
pub struct PeerHttp {
    tls: Option<Arc<rustls::ClientConfig>>,
    timeout: Duration,
    idle: Mutex<Pool>,
}

/// `host:port` and whether TLS is needed, from `http://host:port` or `https://host:port`.
fn split_url(url: &str) -> Result<(bool, bool, String), DialError> {
    let (tls, unix, rest) = if let Some(r) = url.strip_prefix("https://") {
        (true, false, r)
    } else if let Some(r) = url.strip_prefix("http://") {
        (false, false, r)
    } else if let Some(r) = url.strip_prefix("unixs://") {
        (true, true, r)
    } else if let Some(r) = url.strip_prefix("unix://") {
        (false, true, r)
    } else {
        return Err(DialError::BadUrl(url.to_string()));
    };
    let host = rest.split('/').next().unwrap_or_default();
    if host.is_empty() {
        return Err(DialError::BadUrl(url.to_string()));
    }
    // A unix socket's "host" is its path (etcd: unix://localhost:PORT is the file
    // "localhost:PORT" in the working directory).
    let host = if unix
        || host
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        host.to_string()
    } else {
        format!("{host}:{}", if tls { 443 } else { 80 })
    };
    Ok((tls, unix, host))
}

impl PeerHttp {
    pub fn new(tls: Option<Arc<rustls::ClientConfig>>, timeout: Duration) -> PeerHttp {
        PeerHttp {
            tls,
            timeout,
            idle: Mutex::new(HashMap::new()),
        }
    }

    async fn dial(&self, url: &str) -> Result<Box<dyn Stream>, DialError> {
        let (tls, unix, host) = split_url(url)?;
        let dial = async {
            let dial_err = |source| DialError::Dial {
                url: url.to_string(),
                source,
            };
            let conn = if unix {
                Conn::Unix(UnixStream::connect(&host).await.map_err(dial_err)?)
            } else {
                let tcp = TcpStream::connect(&host).await.map_err(dial_err)?;
                let _ = tcp.set_nodelay(true);
                Conn::Tcp(tcp)
            };
            if !tls {
                return Ok::<Box<dyn Stream>, DialError>(Box::new(conn));
            }
            let cfg = self
                .tls
                .clone()
                .ok_or_else(|| DialError::NoTls(url.to_string()))?;
            let (name, _) = host.rsplit_once(':').unwrap_or((&host, ""));
            let bare = name.trim_matches(['[', ']']).to_string();
            let server_name =
                rustls_pki_types::ServerName::try_from(bare).map_err(|e| DialError::Dial {
                    url: url.to_string(),
                    source: std::io::Error::other(e.to_string()),
                })?;
            let s = tokio_rustls::TlsConnector::from(cfg)
                .connect(server_name, conn)
                .await
                .map_err(|source| DialError::Dial {
                    url: url.to_string(),
                    source,
                })?;
            Ok(Box::new(s))
        };
        tokio::time::timeout(self.timeout, dial)
            .await
            .map_err(|_| DialError::Timeout(url.to_string()))?
    }

    /// A new HTTP/1.1 connection to `url`, its driver running on the runtime.
    pub async fn connect(&self, url: &str) -> Result<SendRequest<Body>, DialError> {
        let io = self.dial(url).await?;
        // Header names as Go writes them (X-Etcd-Cluster-Id, X-Peerurls): receivers must not
        // care, but captures then read the same as etcd's.
        let (send, conn) = hyper::client::conn::http1::Builder::new()
            .title_case_headers(true)
            .handshake(TokioIo::new(io))
            .await
            .map_err(|source| DialError::Http {
                url: url.to_string(),
                source,
            })?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(send)
    }

    /// Sends `req` to `base` (a peer URL) on a kept-alive connection, or a new one.
    pub async fn request(
        &self,
        base: &str,
        mut req: http::Request<Body>,
    ) -> Result<http::Response<hyper::body::Incoming>, DialError> {
        split_url(base)?;
        set_host(&mut req, base);
        let key = (
            tokio::runtime::Handle::try_current().ok().map(|h| h.id()),
            base.to_string(),
        );
        let reused = {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            let list = idle.entry(key.clone()).or_default();
            list.retain(|s| !s.is_closed());
            let i = list.iter().position(|s| s.is_ready());
            i.map(|i| list.swap_remove(i))
        };
        let mut send = match reused {
            Some(s) => s,
            None => self.connect(base).await?,
        };
        let resp = tokio::time::timeout(
            self.timeout.max(Duration::from_secs(5)),
            send.send_request(req),
        )
        .await
        .map_err(|_| DialError::Timeout(base.to_string()))?
        .map_err(|source| DialError::Http {
            url: base.to_string(),
            source,
        })?;
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let list = idle.entry(key).or_default();
        if list.len() < POOL {
            list.push(send);
        }
        Ok(resp)
    }

    /// Tries each URL of a peer in turn; the first answer wins.
    pub async fn request_any(
        &self,
        urls: &[String],
        make: impl Fn() -> http::Request<Body>,
    ) -> Result<http::Response<hyper::body::Incoming>, DialError> {
        let mut last = DialError::BadUrl("no peer URLs".into());
        for u in urls {
            match self.request(u, make()).await {
                Ok(r) => return Ok(r),
                Err(e) => last = e,
            }
        }
        Err(last)
    }
}

/// What etcd 3.4 and 3.5 send as User-Agent on every peer request (Go's HTTP client).
pub const USER_AGENT: &str = "Go-http-client/1.1";

/// Sets the request's Host to `url`'s authority, as the first header (Go writes Host first).
pub fn set_host(req: &mut http::Request<Body>, url: &str) {
    let Some(host) = url.split("://").nth(1).and_then(|r| r.split('/').next()) else {
        return;
    };
    let Ok(v) = http::HeaderValue::from_str(host) else {
        return;
    };
    let rest = std::mem::take(req.headers_mut());
    req.headers_mut().insert(http::header::HOST, v);
    req.headers_mut().extend(rest);
}

/// User-Agent, then Content-Length when a body has a known size (and on any POST, as Go),
/// then Content-Type: the order Go's client writes them in. A body of unknown size goes
/// chunked, as etcd sends a snapshot.
fn base_request(
    method: http::Method,
    path: &str,
    content_type: Option<&str>,
    body: &Body,
) -> http::request::Builder {
    let mut b = http::Request::builder()
        .header(http::header::USER_AGENT, USER_AGENT)
        .uri(path);
    if let Some(n) = http_body::Body::size_hint(body).exact()
        && (n > 0 || method == http::Method::POST)
    {
        b = b.header(http::header::CONTENT_LENGTH, n);
    }
    if let Some(ct) = content_type {
        b = b.header(http::header::CONTENT_TYPE, ct);
    }
    b.method(method)
}

/// A request with the headers etcd puts on raft traffic, in the order etcd writes them
/// (sorted, after the ones Go's client puts first); X-Raft-To only on stream dials.
pub fn raft_request(
    me: &Identity,
    method: http::Method,
    path: &str,
    to: Option<u64>,
    content_type: Option<&str>,
    body: Body,
) -> http::Request<Body> {
    let mut b = base_request(method, path, content_type, &body)
        .header(H_CLUSTER_ID, id_path(me.cluster_id))
        .header(H_MIN_CLUSTER_VERSION, MIN_CLUSTER_VERSION)
        .header(H_PEER_URLS, me.peer_urls.join(","));
    if let Some(to) = to {
        b = b.header(super::wire::H_RAFT_TO, id_path(to));
    }
    b.header(H_SERVER_FROM, id_path(me.member_id))
        .header(H_SERVER_VERSION, me.server_version)
        .body(body)
        .unwrap_or_else(|_| unreachable!("static header names and valid values"))
}

/// A plain request (membership, version, leases: etcd sends no raft headers on these).
pub fn plain_request(
    method: http::Method,
    path: &str,
    content_type: Option<&str>,
    body: Body,
) -> http::Request<Body> {
    base_request(method, path, content_type, &body)
        .body(body)
        .unwrap_or_else(|_| unreachable!("static header names and valid values"))
}

/// Reads a whole response body, at most `max` bytes.
pub async fn read_body(
    resp: http::Response<hyper::body::Incoming>,
    max: usize,
) -> Result<(http::StatusCode, http::HeaderMap, Bytes), String> {
    let (parts, mut body) = resp.into_parts();
    let mut out = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| e.to_string())?;
        if let Some(d) = frame.data_ref() {
            if out.len() + d.len() > max {
                return Err(format!("answer larger than {max} bytes"));
            }
            out.extend_from_slice(d);
        }
    }
    Ok((parts.status, parts.headers, out.freeze()))
}
