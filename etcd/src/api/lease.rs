// The Lease service: Grant and Revoke go through raft; KeepAlive, TimeToLive and Leases are
// are answered by the leader's lessor (a follower forwards them), Leases by this member's.

use std::pin::Pin;
use std::sync::Arc;

use proto::etcdserverpb::{
    InternalRaftRequest, LeaseGrantRequest, LeaseGrantResponse, LeaseKeepAliveRequest,
    LeaseKeepAliveResponse, LeaseLeasesRequest, LeaseLeasesResponse, LeaseRevokeRequest,
    LeaseRevokeResponse, LeaseStatus, LeaseTimeToLiveRequest, LeaseTimeToLiveResponse,
    lease_server::Lease,
};
use tokio::sync::mpsc;
use tokio_stream::{Stream, StreamExt, wrappers::ReceiverStream};
use tonic::{Request, Response, Status, Streaming};

use super::auth::{header, identity};
use super::errors;
use crate::api::errors::ToStatus;
use crate::auth::Access;
use crate::lease::MAX_LEASE_TTL;
use crate::server::EtcdServer;
use crate::server::apply::Applied;

pub struct LeaseService {
    pub server: Arc<EtcdServer>,
}

fn unexpected() -> Status {
    tracing::error!("apply returned a result of the wrong kind");
    errors::CORRUPT.status()
}

/// Grants a lease through raft (an ID of 0 is picked here), as LeaseGrant does.
pub(crate) async fn grant(
    server: &EtcdServer,
    mut r: LeaseGrantRequest,
) -> Result<LeaseGrantResponse, Status> {
    server.guard_write()?;
    if r.ttl > MAX_LEASE_TTL {
        return Err(errors::LEASE_TTL_TOO_LARGE.status());
    }
    if r.id == 0 {
        r.id = server.next_lease_id();
    }
    server.check_quota(64).await?;
    let out = server
        .propose(InternalRaftRequest {
            lease_grant: Some(r),
            ..Default::default()
        })
        .await?;
    match out.result? {
        Applied::LeaseGrant(mut g) => {
            g.header = server.header(out.revision);
            Ok(g)
        }
        _ => Err(unexpected()),
    }
}

#[tonic::async_trait]
impl Lease for LeaseService {
    async fn lease_grant(
        &self,
        r: Request<LeaseGrantRequest>,
    ) -> Result<Response<LeaseGrantResponse>, Status> {
        grant(&self.server, r.into_inner()).await.map(Response::new)
    }

    async fn lease_revoke(
        &self,
        r: Request<LeaseRevokeRequest>,
    ) -> Result<Response<LeaseRevokeResponse>, Status> {
        self.server.guard_write()?;
        // Revoking deletes the lease's keys: the caller must be able to write every one.
        let ai = identity(&self.server, &r)?;
        let r = r.into_inner();
        if let Some((_, _, keys)) = self.server.lessor().time_to_live(r.id) {
            self.server.auth().check_lease_keys(&ai, &keys)?;
        }
        let out = self
            .server
            .propose(InternalRaftRequest {
                header: header(&ai),
                lease_revoke: Some(r),
                ..Default::default()
            })
            .await?;
        match out.result? {
            Applied::LeaseRevoke(mut g) => {
                g.header = self.server.header(out.revision);
                Ok(Response::new(g))
            }
            _ => Err(unexpected()),
        }
    }

    type LeaseKeepAliveStream =
        Pin<Box<dyn Stream<Item = Result<LeaseKeepAliveResponse, Status>> + Send>>;

    async fn lease_keep_alive(
        &self,
        r: Request<Streaming<LeaseKeepAliveRequest>>,
    ) -> Result<Response<Self::LeaseKeepAliveStream>, Status> {
        self.server.guard(false)?;
        let mut inbound = r.into_inner();
        let (tx, rx) = mpsc::channel(16);
        let server = self.server.clone();
        tokio::spawn(async move {
            while let Some(Ok(req)) = inbound.next().await {
                let resp = server.lease_renew(req.id).await.map_err(|e| e.status());
                let failed = resp.is_err();
                if tx.send(resp).await.is_err() || failed {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn lease_time_to_live(
        &self,
        r: Request<LeaseTimeToLiveRequest>,
    ) -> Result<Response<LeaseTimeToLiveResponse>, Status> {
        self.server.guard(false)?;
        // etcd 3.5's rule: with auth on, the caller must be able to read every key of the
        // lease (or a user could list keys it may not see).
        let ai = identity(&self.server, &r)?;
        let r = r.into_inner();
        let auth = self.server.auth();
        if auth.is_enabled() {
            if ai.revision == 0 {
                return Err(errors::USER_EMPTY.status());
            }
            if let Some((_, _, keys)) = self.server.lessor().time_to_live(r.id) {
                for k in &keys {
                    auth.check(&ai, k, b"", Access::Read)?;
                }
            }
        }
        let resp = self.server.lease_time_to_live(r).await?;
        Ok(Response::new(resp))
    }

    async fn lease_leases(
        &self,
        _r: Request<LeaseLeasesRequest>,
    ) -> Result<Response<LeaseLeasesResponse>, Status> {
        self.server.guard(false)?;
        Ok(Response::new(LeaseLeasesResponse {
            header: self.server.header(self.server.kv().current_rev()),
            leases: self
                .server
                .lessor()
                .ids()
                .into_iter()
                .map(|id| LeaseStatus { id })
                .collect(),
        }))
    }
}

/// Revokes expired leases through raft while this member leads (etcd's lease expiry loop).
pub async fn expire_leases(server: Arc<EtcdServer>) {
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(500));
    let mut was_leader = false;
    loop {
        tick.tick().await;
        let leader = server.is_leader();
        if leader && !was_leader {
            server.lessor().extend_all(server.cfg().election_timeout);
        }
        was_leader = leader;
        if !leader {
            continue;
        }
        for id in server.lessor().expired() {
            // The server revokes as root, as etcd does (its keys may be any user's).
            let req = InternalRaftRequest {
                header: header(&server.auth().root_info()),
                lease_revoke: Some(LeaseRevokeRequest { id }),
                ..Default::default()
            };
            match server.propose(req).await.and_then(|out| out.result) {
                Ok(_) => {
                    crate::metrics::METRICS.lease_expired.inc();
                    tracing::info!(lease_id = %format!("{id:016x}"), "revoked an expired lease")
                }
                Err(e) => {
                    tracing::warn!(lease_id = %format!("{id:016x}"), error = %e, "failed to revoke an expired lease")
                }
            }
        }
    }
}
