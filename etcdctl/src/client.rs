//! Building the gRPC client from the global flags: endpoints tried in order until one answers
//! within --dial-timeout, the auth token on every call, and --command-timeout on every request.

use std::future::Future;
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
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

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
    if let Some(ep) = g.endpoints.iter().find(|e| e.starts_with("unix")) {
        return Err(CtlError::other(format!(
            "unix socket endpoints are not supported by this etcdctl ({ep})"
        )));
    }
    Ok(())
}

/// Reads a PEM file named by a TLS flag, failing with Go's wording.
fn read_pem(path: &str) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| CtlError::other(crate::util::go_io_error("open", path, &e)))
}

/// The TLS settings for https endpoints, from --cacert, --cert and --key.
fn tls_config(g: &GlobalArgs) -> Result<ClientTlsConfig> {
    if g.insecure_skip_tls_verify {
        return Err(CtlError::other(
            "--insecure-skip-tls-verify is not supported by this etcdctl; pass --cacert",
        ));
    }
    let mut cfg = ClientTlsConfig::new();
    match &g.cacert {
        Some(ca) => cfg = cfg.ca_certificate(Certificate::from_pem(read_pem(ca)?)),
        None => {
            return Err(CtlError::other(
                "https endpoints without --cacert are not supported by this etcdctl (it does not use the system's CA roots)",
            ));
        }
    }
    match (&g.cert, &g.key) {
        (Some(c), Some(k)) => cfg = cfg.identity(Identity::from_pem(read_pem(c)?, read_pem(k)?)),
        (None, None) => {}
        _ => {
            return Err(CtlError::other(
                "KeyFile and CertFile must both be present[key: , cert: ]",
            ));
        }
    }
    Ok(cfg)
}

fn endpoint_for(g: &GlobalArgs, ep: &str) -> Result<Endpoint> {
    let url = endpoint_url(ep);
    let mut e = Endpoint::from_shared(url.clone())
        .map_err(|e| CtlError::other(format!("invalid endpoint {ep:?}: {e}")))?;
    if url.starts_with("https://") {
        e = e
            .tls_config(tls_config(g)?)
            .map_err(|e| CtlError::other(format!("bad TLS settings: {e}")))?;
    }
    Ok(e.connect_timeout(g.dial_timeout)
        .http2_keep_alive_interval(g.keepalive_time)
        .keep_alive_timeout(g.keepalive_timeout)
        .keep_alive_while_idle(true)
        .tcp_nodelay(true))
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
        let deadline = tokio::time::Instant::now() + g.dial_timeout;
        let mut endpoints = Vec::new();
        for ep in eps {
            endpoints.push((ep.clone(), endpoint_for(g, ep)?));
        }
        loop {
            for (_, e) in &endpoints {
                let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
                if remaining.is_zero() {
                    break;
                }
                if let Ok(Ok(channel)) = tokio::time::timeout(remaining, e.connect()).await {
                    let mut c = Client {
                        channel,
                        interceptor: TokenInterceptor::default(),
                        command_timeout: g.command_timeout,
                    };
                    c.login(g).await?;
                    return Ok(c);
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(CtlError::other("context deadline exceeded"));
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

    /// Runs one unary call under --command-timeout and turns its status into etcd's error text.
    pub async fn unary<T>(
        &self,
        fut: impl Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T> {
        match tokio::time::timeout(self.command_timeout, fut).await {
            Ok(Ok(r)) => Ok(r.into_inner()),
            Ok(Err(s)) => Err(CtlError::Other(status_message(&s))),
            Err(_) => Err(CtlError::other("context deadline exceeded")),
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
