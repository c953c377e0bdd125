//! Building the gRPC client from the global flags: endpoints tried in order until one answers
//! within --dial-timeout, the auth token on every call, and --command-timeout on every request.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use proto::etcdserverpb::AuthenticateRequest;
use proto::etcdserverpb::auth_client::AuthClient;
use proto::etcdserverpb::cluster_client::ClusterClient;
use proto::etcdserverpb::kv_client::KvClient;
use proto::etcdserverpb::lease_client::LeaseClient;
use proto::etcdserverpb::maintenance_client::MaintenanceClient;
use proto::etcdserverpb::watch_client::WatchClient;
use proto::v3electionpb::election_client::ElectionClient;
use proto::v3lockpb::lock_client::LockClient;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

/// gRPC's floor for a client's keepalive ping interval, and its default ping timeout.
const GRPC_MIN_KEEPALIVE_TIME: Duration = Duration::from_secs(10);
const GRPC_DEFAULT_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

use crate::error::{CtlError, Result, status_message};
use crate::global::GlobalArgs;

/// Adds the auth token (when logged in) to every request, as etcd's `token` metadata.
#[derive(Clone, Default)]
pub struct TokenInterceptor {
    token: Option<MetadataValue<Ascii>>,
}

impl Interceptor for TokenInterceptor {
    fn call(
        &mut self,
        mut req: tonic::Request<()>,
    ) -> std::result::Result<tonic::Request<()>, tonic::Status> {
        if let Some(t) = &self.token {
            req.metadata_mut().insert("token", t.clone());
        }
        Ok(req)
    }
}

pub type Svc = InterceptedService<Channel, TokenInterceptor>;

/// A connection to one endpoint of the cluster.
#[derive(Clone)]
pub struct Client {
    channel: Channel,
    interceptor: TokenInterceptor,
    pub command_timeout: Duration,
    /// The first endpoint of the list, as clientv3 names its target in log lines.
    target: String,
}

/// clientv3's balancer target for a list of endpoints: the first one, without its scheme.
fn log_target(eps: &[String]) -> String {
    let first = eps.first().map(String::as_str).unwrap_or_default();
    first
        .split_once("://")
        .map_or(first, |(_, r)| r)
        .to_string()
}

/// A random (version 4) UUID, as clientv3 names each client it makes.
fn client_uuid() -> String {
    use std::io::Read;
    let mut b = [0u8; 16];
    // Only a name in a log line: without /dev/urandom the clock's bits do.
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_err()
    {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        b = (t ^ u128::from(std::process::id())).to_le_bytes();
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// The warning Go's clientv3 logs on stderr when a unary call fails (its retry interceptor,
/// before the command prints its own `Error:` line); scripts and people see both.
fn warn_unary_failure(target: &str, code: tonic::Code, desc: &str) {
    static CLIENT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let id = CLIENT.get_or_init(client_uuid);
    let q = |s: &str| serde_json::Value::from(s).to_string();
    eprintln!(
        "{{\"level\":\"warn\",\"ts\":{},\"caller\":\"clientv3/retry_interceptor.go:62\",\"msg\":\"retrying of unary invoker failed\",\"target\":{},\"attempt\":0,\"error\":{}}}",
        q(&common::gofmt::format_ts(std::time::SystemTime::now())),
        q(&format!("endpoint://client-{id}/{target}")),
        q(&format!(
            "rpc error: code = {} desc = {desc}",
            crate::error::go_code_name(code)
        )),
    );
}

/// The URL tonic dials for an endpoint given as etcd accepts it (`host:port` or a URL).
pub fn endpoint_url(ep: &str) -> String {
    if ep.contains("://") {
        ep.to_string()
    } else {
        format!("http://{ep}")
    }
}

/// Refuses what this build cannot do before any network traffic, with a clear message.
pub fn check_supported(g: &GlobalArgs) -> Result<()> {
    if g.discovery_srv.is_some() {
        return Err(CtlError::other(
            "DNS SRV discovery (--discovery-srv) is not supported by this etcdctl; pass --endpoints",
        ));
    }
    if let Some(ep) = g.endpoints.iter().find(|e| e.starts_with("unixs://")) {
        return Err(CtlError::other(format!(
            "TLS over unix sockets (unixs://) is not supported by this etcdctl ({ep})"
        )));
    }
    Ok(())
}

/// Reads a file named by a TLS flag, failing with Go's wording when it cannot be opened.
fn check_readable(path: &str) -> Result<()> {
    std::fs::File::open(path)
        .map(drop)
        .map_err(|e| CtlError::other(crate::util::go_io_error("open", path, &e)))
}

/// The TLS settings for https endpoints: --cacert (else the system's roots), --cert and
/// --key, and --insecure-skip-tls-verify (the chain is not checked, the handshake still is).
pub fn tls_config(g: &GlobalArgs) -> Result<Arc<rustls::ClientConfig>> {
    let mut info = common::tls::TlsInfo::default();
    match (&g.cert, &g.key) {
        (Some(c), Some(k)) => {
            check_readable(c)?;
            check_readable(k)?;
            info.cert_file = c.clone();
            info.key_file = k.clone();
        }
        (None, None) => {}
        (c, k) => {
            return Err(CtlError::other(format!(
                "KeyFile and CertFile must both be present[key: {}, cert: {}]",
                k.as_deref().unwrap_or(""),
                c.as_deref().unwrap_or("")
            )));
        }
    }
    if let Some(ca) = &g.cacert {
        check_readable(ca)?;
        info.trusted_ca_file = ca.clone();
    }
    // As etcdctl 3.4: --insecure-skip-tls-verify applies only to a TLS setup the flags asked
    // for; an https endpoint dialed without one verifies against the system's roots.
    let skip = g.insecure_skip_tls_verify && tls_requested(g);
    let cfg = common::tls::client_config(&info, skip).map_err(CtlError::other)?;
    let mut cfg = (*cfg).clone();
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(cfg))
}

/// Whether the flags ask for TLS (etcdctl 3.4 builds a TLS setup then, used for endpoints
/// without a scheme as well as for https ones).
fn tls_requested(g: &GlobalArgs) -> bool {
    g.cert.is_some() || g.key.is_some() || g.cacert.is_some() || !g.insecure_transport
}

/// How one endpoint is dialed: tonic's own connector for http, ours (TLS) for https, a unix
/// socket for unix://.
struct Dial {
    endpoint: Endpoint,
    tls: Option<Arc<rustls::ClientConfig>>,
    unix: Option<String>,
}

impl Dial {
    async fn connect(&self) -> std::result::Result<Channel, tonic::transport::Error> {
        if let Some(path) = &self.unix {
            let conn = common::tls::UnixConnector::new(path.clone());
            return self.endpoint.connect_with_connector(conn).await;
        }
        match &self.tls {
            Some(tls) => {
                let conn = common::tls::Connector::new(tls.clone(), 2379);
                self.endpoint.connect_with_connector(conn).await
            }
            None => self.endpoint.connect().await,
        }
    }
}

/// The socket path of a unix:// endpoint (the URL's host part, as etcd's clients read it).
fn unix_path(ep: &str) -> Option<String> {
    ep.strip_prefix("unix://")
        .map(|rest| rest.split('/').next().unwrap_or_default().to_string())
}

fn endpoint_for(
    g: &GlobalArgs,
    ep: &str,
    tls: &mut Option<Arc<rustls::ClientConfig>>,
) -> Result<Dial> {
    let mut url = endpoint_url(ep);
    let mut with_tls = None;
    let unix = unix_path(ep);
    if unix.is_some() {
        // The connector dials the socket; the URL only gives gRPC its :authority
        // ("localhost", as Go's gRPC says for unix sockets).
        url = "http://localhost".to_string();
    } else if !ep.contains("://") && tls_requested(g) {
        url = format!("https://{ep}");
    }
    if let Some(rest) = url.strip_prefix("https://") {
        if tls.is_none() {
            *tls = Some(tls_config(g)?);
        }
        with_tls = tls.clone();
        // Our connector does the handshake; tonic must see a plain URL.
        url = format!("http://{rest}");
    }
    let e = Endpoint::from_shared(url)
        .map_err(|e| CtlError::other(format!("invalid endpoint {ep:?}: {e}")))?
        .connect_timeout(if g.dial_timeout.is_zero() {
            g.command_timeout
        } else {
            g.dial_timeout
        })
        .tcp_nodelay(true);
    // As Go's client: --keepalive-time=0 sends no pings; otherwise gRPC pings at most every
    // 10 s, and a 0 timeout is its default 20 s (a ping every 0 s, or one given 0 s to be
    // answered, would have the connection torn down: "http2 error").
    let endpoint = if g.keepalive_time.is_zero() {
        e
    } else {
        let timeout = if g.keepalive_timeout.is_zero() {
            GRPC_DEFAULT_KEEPALIVE_TIMEOUT
        } else {
            g.keepalive_timeout
        };
        e.http2_keep_alive_interval(g.keepalive_time.max(GRPC_MIN_KEEPALIVE_TIME))
            .keep_alive_timeout(timeout)
            .keep_alive_while_idle(true)
    };
    Ok(Dial {
        endpoint,
        tls: with_tls,
        unix,
    })
}

/// An error with its causes, for --debug.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// GETs `path` from an endpoint's HTTP side (the client port serves /metrics next to gRPC),
/// over TLS for https endpoints; the body when the answer is 200.
pub async fn http_get(g: &GlobalArgs, ep: &str, path: &str) -> Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let url = endpoint_url(ep);
    let unix = unix_path(ep);
    let (https, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (scheme == "https", rest.to_string()),
        None => (false, url.clone()),
    };
    let authority = if unix.is_some() {
        "localhost".to_string()
    } else {
        rest.split('/').next().unwrap_or_default().to_string()
    };
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !p.contains(']') => (
            h.to_string(),
            p.parse::<u16>()
                .map_err(|_| CtlError::other(format!("invalid endpoint {ep:?}")))?,
        ),
        _ => (authority.clone(), if https { 443 } else { 80 }),
    };
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: etcdctl\r\nConnection: close\r\n\r\n"
    );
    let fetch = async {
        let mut raw = Vec::new();
        if let Some(sock) = &unix {
            let mut s = tokio::net::UnixStream::connect(sock).await?;
            s.write_all(request.as_bytes()).await?;
            s.read_to_end(&mut raw).await?;
        } else if https {
            let mut s = common::tls::connect(tls_config(g)?, &host, port).await?;
            s.write_all(request.as_bytes()).await?;
            s.read_to_end(&mut raw).await?;
        } else {
            let bare = host.trim_matches(['[', ']']);
            let mut s = tokio::net::TcpStream::connect((bare, port)).await?;
            s.write_all(request.as_bytes()).await?;
            s.read_to_end(&mut raw).await?;
        }
        Ok::<_, CtlError>(raw)
    };
    let raw = tokio::time::timeout(g.dial_timeout + g.command_timeout, fetch)
        .await
        .map_err(|_| {
            CtlError::other(format!("Get \"{url}{path}\": context deadline exceeded"))
        })??;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(raw.len());
    let head = String::from_utf8_lossy(&raw[..split]);
    let body = raw.get(split + 4..).unwrap_or_default();
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(CtlError::other(format!("Get \"{url}{path}\": {status}")));
    }
    let chunked = head
        .lines()
        .any(|l| l.to_ascii_lowercase().replace(' ', "") == "transfer-encoding:chunked");
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_vec()
    };
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// The payload of a chunked HTTP/1.1 body (what arrived of it).
fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = body.windows(2).position(|w| w == b"\r\n") {
        let size = String::from_utf8_lossy(&body[..eol]);
        let Ok(n) = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16) else {
            break;
        };
        let rest = &body[eol + 2..];
        if n == 0 || rest.len() < n {
            break;
        }
        out.extend_from_slice(&rest[..n]);
        body = rest[n..].strip_prefix(b"\r\n").unwrap_or(&rest[n..]);
    }
    out
}

impl Client {
    /// Connects to the first endpoint that answers, trying them in order, again and again
    /// until --dial-timeout has passed; then logs in when --user is given.
    pub async fn connect(g: &GlobalArgs) -> Result<Client> {
        Self::connect_to(g, &g.endpoints).await
    }

    /// Connects to one given endpoint (used by the per-endpoint commands).
    pub async fn connect_one(g: &GlobalArgs, ep: &str) -> Result<Client> {
        Self::connect_to(g, &[ep.to_string()]).await
    }

    async fn connect_to(g: &GlobalArgs, eps: &[String]) -> Result<Client> {
        check_supported(g)?;
        if eps.is_empty() {
            return Err(CtlError::bad_args("no endpoints given"));
        }
        // A dial timeout of 0 is none in Go: the first call then waits for a connection
        // as long as its own --command-timeout allows.
        let dial_for = if g.dial_timeout.is_zero() {
            g.command_timeout
        } else {
            g.dial_timeout
        };
        let deadline = tokio::time::Instant::now() + dial_for;
        let mut endpoints = Vec::new();
        let mut tls = None;
        for ep in eps {
            endpoints.push((ep.clone(), endpoint_for(g, ep, &mut tls)?));
        }
        loop {
            for (name, e) in &endpoints {
                let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
                if remaining.is_zero() {
                    break;
                }
                let got = tokio::time::timeout(remaining, e.connect()).await;
                if g.debug {
                    match &got {
                        Ok(Ok(_)) => eprintln!("DEBUG: connected to {name}"),
                        Ok(Err(err)) => {
                            eprintln!("DEBUG: cannot connect to {name}: {}", error_chain(err))
                        }
                        Err(_) => eprintln!("DEBUG: timed out connecting to {name}"),
                    }
                }
                if let Ok(Ok(channel)) = got {
                    let mut c = Client {
                        channel,
                        interceptor: TokenInterceptor::default(),
                        command_timeout: g.command_timeout,
                        target: log_target(eps),
                    };
                    c.login(g).await?;
                    return Ok(c);
                }
            }
            if tokio::time::Instant::now() >= deadline {
                // With --user etcd dials (and logs in) before the command, and a failure
                // there is its "bad connection" (exit 2); otherwise the command's call fails.
                let msg = "context deadline exceeded".to_string();
                if g.user.is_none() {
                    // What clientv3 says of the call that found no connection ready.
                    warn_unary_failure(
                        &log_target(eps),
                        tonic::Code::DeadlineExceeded,
                        "latest balancer error: all SubConns are in TransientFailure",
                    );
                }
                return Err(if g.user.is_some() {
                    CtlError::BadConnection(msg)
                } else {
                    CtlError::Other(msg)
                });
            }
            // Refused connections fail at once; a server that is starting gets another chance.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn login(&mut self, g: &GlobalArgs) -> Result<()> {
        let Some(user) = &g.user else {
            return Ok(());
        };
        let (name, password) = match (user.split_once(':'), &g.password) {
            (Some(_), Some(_)) => {
                return Err(CtlError::bad_args(
                    "--user option shouldn't include password when --password is set",
                ));
            }
            (Some((n, p)), None) => (n.to_string(), p.to_string()),
            (None, Some(p)) => (user.clone(), p.clone()),
            (None, None) => (user.clone(), read_password("Password: ")?),
        };
        let mut auth = AuthClient::new(self.channel.clone());
        let req = AuthenticateRequest { name, password };
        match self.unary(auth.authenticate(req)).await {
            Ok(resp) => {
                let token = MetadataValue::try_from(resp.token.as_str())
                    .map_err(|_| CtlError::other("server returned an invalid auth token"))?;
                self.interceptor.token = Some(token);
                Ok(())
            }
            // As etcd's client: logging in to a cluster without auth is not an error.
            Err(CtlError::Other(m)) if m == "etcdserver: authentication is not enabled" => Ok(()),
            // etcd's client fails to come up at all: a connection failure, exit code 2.
            Err(e) => Err(CtlError::BadConnection(e.to_string())),
        }
    }

    fn svc(&self) -> Svc {
        InterceptedService::new(self.channel.clone(), self.interceptor.clone())
    }

    pub fn kv(&self) -> KvClient<Svc> {
        KvClient::new(self.svc()).max_decoding_message_size(usize::MAX)
    }
    pub fn watch(&self) -> WatchClient<Svc> {
        WatchClient::new(self.svc()).max_decoding_message_size(usize::MAX)
    }
    pub fn lease(&self) -> LeaseClient<Svc> {
        LeaseClient::new(self.svc()).max_decoding_message_size(usize::MAX)
    }
    pub fn cluster(&self) -> ClusterClient<Svc> {
        ClusterClient::new(self.svc()).max_decoding_message_size(usize::MAX)
    }
    pub fn maintenance(&self) -> MaintenanceClient<Svc> {
        MaintenanceClient::new(self.svc()).max_decoding_message_size(usize::MAX)
    }
    pub fn auth(&self) -> AuthClient<Svc> {
        AuthClient::new(self.svc()).max_decoding_message_size(usize::MAX)
    }
    pub fn lock(&self) -> LockClient<Svc> {
        LockClient::new(self.svc()).max_decoding_message_size(usize::MAX)
    }
    pub fn election(&self) -> ElectionClient<Svc> {
        ElectionClient::new(self.svc()).max_decoding_message_size(usize::MAX)
    }

    /// Runs one unary call under --command-timeout and turns its status into etcd's error
    /// text, after clientv3's warning line.
    pub async fn unary<T>(
        &self,
        fut: impl Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T> {
        // Go's context with a timeout of 0 has expired before the call starts.
        let result = if self.command_timeout.is_zero() {
            Err(())
        } else {
            tokio::time::timeout(self.command_timeout, fut)
                .await
                .map_err(drop)
        };
        match result {
            Ok(Ok(r)) => Ok(r.into_inner()),
            Ok(Err(s)) => {
                warn_unary_failure(&self.target, s.code(), s.message());
                Err(CtlError::Other(status_message(&s)))
            }
            Err(_) => {
                warn_unary_failure(
                    &self.target,
                    tonic::Code::DeadlineExceeded,
                    "context deadline exceeded",
                );
                Err(CtlError::other("context deadline exceeded"))
            }
        }
    }
}

/// Reads a password from the terminal without echo (or a line from stdin when it is not one).
pub fn read_password(prompt: &str) -> Result<String> {
    use std::io::{BufRead, Write};
    let fd = libc::STDIN_FILENO;
    // Safety: isatty only inspects the descriptor.
    let tty = unsafe { libc::isatty(fd) } == 1;
    let mut saved: Option<libc::termios> = None;
    if tty {
        print!("{prompt}");
        let _ = std::io::stdout().flush();
        // Safety: termios is plain data; tcgetattr fills it for a valid descriptor.
        unsafe {
            let mut t: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(fd, &mut t) == 0 {
                saved = Some(t);
                t.c_lflag &= !libc::ECHO;
                libc::tcsetattr(fd, libc::TCSANOW, &t);
            }
        }
    }
    let mut line = String::new();
    let res = std::io::stdin().lock().read_line(&mut line);
    if let Some(t) = saved {
        // Safety: restoring the settings read above on the same descriptor.
        unsafe {
            libc::tcsetattr(fd, libc::TCSANOW, &t);
        }
        println!();
    }
    res?;
    Ok(line.trim_end_matches(['\n', '\r']).to_string())
}
