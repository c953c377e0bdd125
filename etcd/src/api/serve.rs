// Serves the client API on --listen-client-urls: the gRPC services on each listener, until
// the shutdown future resolves.

use std::sync::Arc;

use proto::etcdserverpb::{
    cluster_server::ClusterServer, kv_server::KvServer, lease_server::LeaseServer,
    maintenance_server::MaintenanceServer, watch_server::WatchServer,
};
use tokio::net::TcpListener;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::TcpListenerStream;

use super::authority::AuthorityFix;

use super::cluster::ClusterService;
use super::election::ElectionService;
use super::kv::KvService;
use super::lease::LeaseService;
use super::lock::LockService;
use super::maintenance::MaintenanceService;
use super::watch::WatchService;
use crate::config::Url;
use crate::server::EtcdServer;

/// gRPC framing and metadata on top of a request (etcd's grpcOverheadBytes).
const GRPC_OVERHEAD_BYTES: usize = 512 * 1024;

/// Binds every client URL (http only for now), failing before serving anything if one cannot
/// be bound.
pub async fn bind(urls: &[Url]) -> Result<Vec<(Url, TcpListener)>, String> {
    let mut out = Vec::new();
    for u in urls {
        if u.scheme != "http" {
            return Err(format!(
                "listen URL {u}: only http:// client URLs are supported so far (TLS and unix sockets come later)"
            ));
        }
        let l = TcpListener::bind(&u.host)
            .await
            .map_err(|e| format!("cannot listen on {u}: {e}"))?;
        out.push((u.clone(), l));
    }
    Ok(out)
}

/// Serves the client API on `listener` until `shutdown` resolves.
pub async fn serve(
    server: Arc<EtcdServer>,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    let max = server.cfg().max_request_bytes + GRPC_OVERHEAD_BYTES;
    let cfg = server.cfg();
    let builder = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(cfg.grpc_keepalive_interval).filter(|d| !d.is_zero()))
        .http2_keepalive_timeout(Some(cfg.grpc_keepalive_timeout).filter(|d| !d.is_zero()))
        .max_concurrent_streams(Some(cfg.max_concurrent_streams));
    let mut builder = builder;
    builder
        .add_service(
            KvServer::new(KvService {
                server: server.clone(),
            })
            .max_decoding_message_size(max),
        )
        .add_service(
            MaintenanceServer::new(MaintenanceService {
                server: server.clone(),
            })
            .max_decoding_message_size(max),
        )
        .add_service(
            WatchServer::new(WatchService {
                server: server.clone(),
            })
            .max_decoding_message_size(max),
        )
        .add_service(
            LeaseServer::new(LeaseService {
                server: server.clone(),
            })
            .max_decoding_message_size(max),
        )
        .add_service(
            proto::v3lockpb::lock_server::LockServer::new(LockService {
                server: server.clone(),
            })
            .max_decoding_message_size(max),
        )
        .add_service(
            proto::v3electionpb::election_server::ElectionServer::new(ElectionService {
                server: server.clone(),
            })
            .max_decoding_message_size(max),
        )
        .add_service(
            proto::etcdserverpb::auth_server::AuthServer::new(super::auth::AuthService {
                server: server.clone(),
            })
            .max_decoding_message_size(max),
        )
        .add_service(ClusterServer::new(ClusterService { server }).max_decoding_message_size(max))
        .serve_with_incoming_shutdown(
            TcpListenerStream::new(listener).map(|s| {
                s.map(|s| {
                    // Small gRPC frames must not wait for Nagle's algorithm (40 ms stalls).
                    let _ = s.set_nodelay(true);
                    AuthorityFix::new(s)
                })
            }),
            shutdown,
        )
        .await
}
