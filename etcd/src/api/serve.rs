// Serves the client API on --listen-client-urls: per connection, TLS when the URL is https,
// then HTTP/2 gRPC and HTTP/1.1 (health, metrics, version, the JSON gateway) side by side, as
// etcd does on one port; and the --listen-metrics-urls listeners (/metrics and /health only).

use std::sync::Arc;
use std::time::Duration;

use crate::listener::Listener;
use http::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use proto::etcdserverpb::{
    cluster_server::ClusterServer, kv_server::KvServer, lease_server::LeaseServer,
    maintenance_server::MaintenanceServer,
};
use tonic::codegen::Service;

use super::authority::AuthorityFix;
use super::cluster::ClusterService;
use super::coalesce::Coalesce;
use super::election::ElectionService;
use super::first_bytes::{CLIENT_START_TIMEOUT, FirstBytes, silent_for};
use super::kv::KvService;
use super::lease::LeaseService;
use super::lock::LockService;
use super::maintenance::MaintenanceService;
use super::watch::{WatchServer, WatchService};
use crate::config::Url;
use crate::http::{Body, Ctx, GrpcRoutes};
use crate::metrics::grpc::GrpcMetrics;
use crate::server::EtcdServer;
use crate::tls::{ClientCertCn, TlsServer};

/// gRPC framing and metadata on top of a request (etcd's grpcOverheadBytes).
pub const GRPC_OVERHEAD_BYTES: usize = 512 * 1024;
/// How long a TLS handshake may take before the connection is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a stop waits for open connections (watch streams never end by themselves).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);

/// Binds every URL (http, https, unix, unixs), failing before serving anything if one
/// cannot be bound.
pub async fn bind(urls: &[Url]) -> Result<Vec<(Url, Listener)>, String> {
    let mut out = Vec::new();
    for u in urls {
        let l = Listener::bind(u)
            .await
            .map_err(|e| format!("cannot listen on {u}: {e}"))?;
        out.push((u.clone(), l));
    }
    Ok(out)
}

/// The etcdserverpb services every client port serves, for etcd's zeroed gRPC series.
pub const ETCDSERVERPB_SERVICES: &[&str] = &[
    "etcdserverpb.KV",
    "etcdserverpb.Watch",
    "etcdserverpb.Lease",
    "etcdserverpb.Cluster",
    "etcdserverpb.Maintenance",
    "etcdserverpb.Auth",
];

/// The gRPC services of the client port, behind the metrics layer.
pub fn grpc_routes(server: &Arc<EtcdServer>) -> GrpcRoutes {
    let max = server.cfg().max_request_bytes + GRPC_OVERHEAD_BYTES;
    let s = || server.clone();
    let routes = tonic::service::Routes::new(
        KvServer::new(KvService { server: s() }).max_decoding_message_size(max),
    )
    .add_service(
        MaintenanceServer::new(MaintenanceService { server: s() }).max_decoding_message_size(max),
    )
    .add_service(WatchServer::new(WatchService { server: s() }).max_decoding_message_size(max))
    .add_service(LeaseServer::new(LeaseService { server: s() }).max_decoding_message_size(max))
    .add_service(
        proto::v3lockpb::lock_server::LockServer::new(LockService { server: s() })
            .max_decoding_message_size(max),
    )
    .add_service(
        proto::v3electionpb::election_server::ElectionServer::new(ElectionService { server: s() })
            .max_decoding_message_size(max),
    )
    .add_service(ClusterServer::new(ClusterService { server: s() }).max_decoding_message_size(max))
    .add_service(
        proto::etcdserverpb::auth_server::AuthServer::new(super::auth::AuthService { server: s() })
            .max_decoding_message_size(max),
    )
    .prepare();
    for svc in ETCDSERVERPB_SERVICES {
        crate::metrics::grpc::init_service(svc);
    }
    GrpcMetrics::new(routes)
}

/// Serves the client API on `listener` until `shutdown` resolves.
pub async fn serve(
    server: Arc<EtcdServer>,
    listener: Listener,
    tls: Option<TlsServer>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let grpc = grpc_routes(&server);
    let ctx = Ctx {
        server,
        grpc: Some(grpc),
    };
    accept_loop(ctx, listener, tls, shutdown).await
}

/// Serves /metrics and /health on a --listen-metrics-urls listener until `shutdown`.
pub async fn serve_metrics(
    server: Arc<EtcdServer>,
    listener: Listener,
    tls: Option<TlsServer>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let ctx = Ctx { server, grpc: None };
    accept_loop(ctx, listener, tls, shutdown).await
}

fn connection_builder(ctx: &Ctx) -> auto::Builder<TokioExecutor> {
    let cfg = ctx.server.cfg();
    let mut b = auto::Builder::new(TokioExecutor::new());
    // A request's headers must arrive within the start timeout (hyper's own timer does it
    // for HTTP/1.1; it needs a timer to run).
    b.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(CLIENT_START_TIMEOUT);
    b.http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(cfg.grpc_keepalive_interval).filter(|d| !d.is_zero()))
        .keep_alive_timeout(cfg.grpc_keepalive_timeout)
        .max_concurrent_streams(Some(cfg.max_concurrent_streams))
        // AuthorityFix refuses bigger frames at their header: the two must agree.
        .max_frame_size(super::authority::MAX_FRAME as u32);
    b
}

async fn accept_loop(
    ctx: Ctx,
    listener: Listener,
    tls: Option<TlsServer>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let builder = Arc::new(connection_builder(&ctx));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (conn, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(v) => v,
                Err(e) => {
                    // Out of descriptors and the like: say so and keep serving.
                    tracing::warn!(error = %e, "cannot accept a client connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let ctx = ctx.clone();
        let tls = tls.clone();
        let builder = builder.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            match tls {
                None => serve_conn(ctx, &builder, watcher, conn, None).await,
                Some(tls) => {
                    // The handshake is held here, not inside a timeout, so a stalled one is
                    // logged before its connection is dropped: whoever sees the close finds
                    // the line already written.
                    let handshake = tls.accept(conn);
                    tokio::pin!(handshake);
                    let accepted = tokio::select! {
                        r = &mut handshake => Some(r),
                        _ = tokio::time::sleep(HANDSHAKE_TIMEOUT) => None,
                    };
                    match accepted {
                        Some(Ok((stream, cn))) => {
                            serve_conn(ctx, &builder, watcher, stream, cn).await
                        }
                        Some(Err(e)) => {
                            tracing::warn!(remote = %peer, error = %e, "rejected connection");
                        }
                        None => {
                            tracing::warn!(remote = %peer, "rejected connection: TLS handshake timed out");
                        }
                    }
                }
            }
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown()).await;
}

async fn serve_conn<IO>(
    ctx: Ctx,
    builder: &auto::Builder<TokioExecutor>,
    watcher: hyper_util::server::graceful::Watcher,
    io: IO,
    cn: Option<String>,
) where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
        let ctx = ctx.clone();
        let cn = cn.clone();
        async move {
            let mut req = req.map(Body::new);
            if let Some(cn) = cn {
                req.extensions_mut().insert(ClientCertCn(cn));
            }
            if is_grpc(&req)
                && let Some(mut grpc) = ctx.grpc.clone()
            {
                return grpc.call(req).await;
            }
            // Boxed: its state (about 2 KB) would otherwise sit in every request's future,
            // gRPC calls too, and be copied each time hyper spawns a stream.
            Box::pin(crate::http::handle(ctx, req)).await
        }
    });
    let (io, seen) = FirstBytes::new(io);
    let conn = builder
        .serve_connection_with_upgrades(TokioIo::new(AuthorityFix::new(Coalesce::new(io))), svc)
        .into_owned();
    tokio::select! {
        r = watcher.watch(conn) => {
            if let Err(e) = r {
                tracing::debug!(error = %e, "client connection ended with an error");
            }
        }
        // Dropping the connection closes it.
        _ = silent_for(seen, CLIENT_START_TIMEOUT) => {
            tracing::debug!("closed a client connection that sent nothing");
        }
    }
}

/// gRPC is HTTP/2 with an application/grpc content type (etcd's test, too).
fn is_grpc(req: &Request<Body>) -> bool {
    req.version() == http::Version::HTTP_2
        && req
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/grpc"))
}
