// The receiving side of the peer transport: the peerpb.Peer service on --listen-peer-urls.
// Refuses other clusters and removed members; hands raft messages to the raft loop.

use std::io::Write as _;
use std::sync::Arc;

use prost::Message as _;
use proto::etcdserverpb::{
    HashKvRequest, HashKvResponse, LeaseKeepAliveRequest, LeaseKeepAliveResponse,
    LeaseTimeToLiveRequest, LeaseTimeToLiveResponse, MemberPromoteRequest, MemberPromoteResponse,
};
use proto::peerpb::peer_server::{Peer, PeerServer};
use proto::peerpb::{
    MembersRequest, MembersResponse, RaftBatch, SnapshotAck, SnapshotChunk, StreamAck,
};
use proto::raftpb::{Message, MessageType};
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Request, Response, Status, Streaming};

use super::{CLUSTER_ID_HEADER, FROM_HEADER, REMOVED_MESSAGE};
use crate::api::errors::ToStatus;
use crate::membership::id_hex;
use crate::server::EtcdServer;

pub struct PeerService {
    server: Arc<EtcdServer>,
}

fn header_id<T>(req: &Request<T>, name: &str) -> Option<u64> {
    req.metadata()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| u64::from_str_radix(s, 16).ok())
}

impl PeerService {
    /// Checks that a call comes from a current member of our cluster.
    fn check<T>(&self, req: &Request<T>) -> Result<u64, Status> {
        let cluster = header_id(req, CLUSTER_ID_HEADER).unwrap_or(0);
        let from = header_id(req, FROM_HEADER).unwrap_or(0);
        if cluster != self.server.cluster_id() {
            tracing::warn!(
                local_member_cluster_id = %id_hex(self.server.cluster_id()),
                remote_peer_cluster_id = %id_hex(cluster),
                remote_peer_id = %id_hex(from),
                "refused a peer connection from another cluster"
            );
            return Err(Status::failed_precondition(format!(
                "cluster ID mismatch: this member is in cluster {}, the caller in {}",
                id_hex(self.server.cluster_id()),
                id_hex(cluster)
            )));
        }
        if self.server.is_removed(from) {
            tracing::warn!(remote_peer_id = %id_hex(from), "refused a peer connection from a removed member");
            return Err(Status::permission_denied(REMOVED_MESSAGE));
        }
        Ok(from)
    }
}

#[tonic::async_trait]
impl Peer for PeerService {
    async fn stream(
        &self,
        req: Request<Streaming<RaftBatch>>,
    ) -> Result<Response<StreamAck>, Status> {
        let from = self.check(&req)?;
        let mut stream = req.into_inner();
        while let Some(batch) = stream.message().await? {
            if self.server.is_removed(from) {
                tracing::warn!(remote_peer_id = %id_hex(from), "closed the stream of a member that was removed");
                return Err(Status::permission_denied(REMOVED_MESSAGE));
            }
            for b in batch.messages {
                match Message::decode(b.as_slice()) {
                    Ok(m) if m.from == from => {
                        if self.server.step(m).is_err() {
                            return Err(Status::unavailable("etcdserver: server stopped"));
                        }
                    }
                    Ok(m) => {
                        tracing::warn!(from = %id_hex(m.from), stream_of = %id_hex(from), "dropping a raft message whose sender is not the stream's");
                    }
                    Err(e) => {
                        tracing::warn!(remote_peer_id = %id_hex(from), error = %e, "dropping an undecodable raft message");
                    }
                }
            }
        }
        Ok(Response::new(StreamAck {}))
    }

    async fn snapshot(
        &self,
        req: Request<Streaming<SnapshotChunk>>,
    ) -> Result<Response<SnapshotAck>, Status> {
        let from = self.check(&req)?;
        let mut stream = req.into_inner();
        let first = stream
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("empty snapshot stream"))?;
        let m = Message::decode(first.message.as_slice())
            .map_err(|e| Status::invalid_argument(format!("bad snapshot message: {e}")))?;
        if m.r#type != MessageType::MsgSnap as i32 || m.from != from {
            return Err(Status::invalid_argument(
                "not a snapshot message from the caller",
            ));
        }
        let index = m
            .snapshot
            .as_ref()
            .and_then(|s| s.metadata.as_ref())
            .map(|md| md.index)
            .unwrap_or(0);
        let dest = self.server.snap_db_path(index);
        let part = dest.with_extension("db.part");
        tracing::info!(remote_peer_id = %id_hex(from), snapshot_index = index, "receiving a database snapshot");
        let started = std::time::Instant::now();
        let mut f = std::fs::File::create(&part)
            .map_err(|e| Status::internal(format!("cannot create {}: {e}", part.display())))?;
        let mut bytes = first.data.len() as u64;
        f.write_all(&first.data)
            .map_err(|e| Status::internal(format!("writing {}: {e}", part.display())))?;
        while let Some(c) = stream.message().await? {
            bytes += c.data.len() as u64;
            f.write_all(&c.data)
                .map_err(|e| Status::internal(format!("writing {}: {e}", part.display())))?;
        }
        let finish = || -> std::io::Result<()> {
            f.sync_all()?;
            std::fs::rename(&part, &dest)?;
            if let Some(dir) = dest.parent() {
                std::fs::File::open(dir)?.sync_all()?;
            }
            Ok(())
        };
        finish().map_err(|e| Status::internal(format!("saving {}: {e}", dest.display())))?;
        tracing::info!(remote_peer_id = %id_hex(from), snapshot_index = index, bytes, took = ?started.elapsed(), "received a database snapshot");
        self.server
            .step(m)
            .map_err(|_| Status::unavailable("etcdserver: server stopped"))?;
        Ok(Response::new(SnapshotAck {}))
    }

    async fn members(
        &self,
        _req: Request<MembersRequest>,
    ) -> Result<Response<MembersResponse>, Status> {
        // Asked by members joining the cluster, which do not know its ID yet.
        Ok(Response::new(MembersResponse {
            cluster_id: self.server.cluster_id(),
            members: self.server.members().iter().map(|m| m.to_json()).collect(),
            removed: self.server.removed_members(),
            server_version: crate::version::ETCD_VERSION.to_string(),
            cluster_version: self.server.cluster_version(),
        }))
    }

    async fn lease_renew(
        &self,
        req: Request<LeaseKeepAliveRequest>,
    ) -> Result<Response<LeaseKeepAliveResponse>, Status> {
        self.check(&req)?;
        let r = self
            .server
            .lease_renew(req.into_inner().id)
            .await
            .map_err(|e| e.status())?;
        Ok(Response::new(r))
    }

    async fn lease_time_to_live(
        &self,
        req: Request<LeaseTimeToLiveRequest>,
    ) -> Result<Response<LeaseTimeToLiveResponse>, Status> {
        self.check(&req)?;
        let r = self
            .server
            .lease_time_to_live(req.into_inner())
            .await
            .map_err(|e| e.status())?;
        Ok(Response::new(r))
    }

    async fn hash_kv(
        &self,
        req: Request<HashKvRequest>,
    ) -> Result<Response<HashKvResponse>, Status> {
        self.check(&req)?;
        Ok(Response::new(self.hash(req.into_inner().revision).await?))
    }

    async fn promote(
        &self,
        req: Request<MemberPromoteRequest>,
    ) -> Result<Response<MemberPromoteResponse>, Status> {
        self.check(&req)?;
        let members = self
            .server
            .promote_member(req.into_inner().id)
            .await
            .map_err(|e| e.status())?;
        Ok(Response::new(MemberPromoteResponse {
            header: self.server.header(self.server.kv().current_rev()),
            members,
        }))
    }
}

impl PeerService {
    async fn hash(&self, rev: i64) -> Result<HashKvResponse, Status> {
        crate::server::corrupt::local_hash(&self.server, rev)
            .await
            .map_err(|e| e.status())
    }
}

/// Binds every peer URL before anything is written (a port in use is an error at start).
pub async fn bind(urls: &[crate::config::Url]) -> Result<Vec<TcpListener>, String> {
    let mut out = Vec::new();
    for u in urls {
        if u.scheme != "http" && u.scheme != "https" {
            return Err(format!(
                "listen peer URL {u}: the scheme must be http or https"
            ));
        }
        let l = TcpListener::bind(&u.host)
            .await
            .map_err(|e| format!("cannot listen on peer URL {u}: {e}"))?;
        out.push(l);
    }
    Ok(out)
}

/// Serves the peer service on `listener` (over TLS with `tls`) until `shutdown` resolves.
pub async fn serve(
    server: Arc<EtcdServer>,
    listener: TcpListener,
    tls: Option<crate::tls::TlsServer>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    let svc = PeerServer::new(PeerService { server })
        .max_decoding_message_size(usize::MAX)
        .max_encoding_message_size(usize::MAX);
    let router = tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .http2_keepalive_interval(Some(std::time::Duration::from_secs(1)))
        .http2_keepalive_timeout(Some(std::time::Duration::from_secs(3)))
        .add_service(svc);
    match tls {
        Some(tls) => {
            router
                .serve_with_incoming_shutdown(super::peer_tls::incoming(listener, tls), shutdown)
                .await
        }
        None => {
            router
                .serve_with_incoming_shutdown(TcpListenerStream::new(listener), shutdown)
                .await
        }
    }
}
