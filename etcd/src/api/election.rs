// The Election service (v3electionpb), on the same recipe as the Lock service: a candidate's
// key `<name>/<lease hex>` holds its value; the leader is the oldest key under `<name>/`.

use std::pin::Pin;
use std::sync::Arc;

use proto::etcdserverpb::{
    Compare, DeleteRangeRequest, InternalRaftRequest, PutRequest, RequestOp, TxnRequest, compare,
    request_op::Request as Op,
};
use proto::mvccpb::KeyValue;
use proto::v3electionpb::{
    CampaignRequest, CampaignResponse, LeaderKey, LeaderRequest, LeaderResponse, ProclaimRequest,
    ProclaimResponse, ResignRequest, ResignResponse, election_server::Election,
};
use tokio::sync::mpsc;
use tokio_stream::{Stream, wrappers::ReceiverStream};
use tonic::{Request, Response, Status};

use super::auth::{check_recipe, identity};
use super::lock::{create_once, prefix_end, session_lease, wait_oldest};
use crate::auth::AuthInfo;
use crate::mvcc::KeyRange;
use crate::server::EtcdServer;
use crate::server::apply::Applied;

pub struct ElectionService {
    pub server: Arc<EtcdServer>,
}

fn prefix_of(name: &[u8]) -> Vec<u8> {
    let mut p = name.to_vec();
    p.push(b'/');
    p
}

/// The current leader's key-value: the oldest key under the election's prefix.
fn leader_kv(server: &EtcdServer, name: &[u8]) -> Result<Option<KeyValue>, Status> {
    let prefix = prefix_of(name);
    let end = prefix_end(&prefix);
    let kvs = server
        .kv()
        .range(KeyRange::new(&prefix, &end), 0, 0)
        .map_err(crate::apply::kv::mvcc_error)?
        .kvs;
    Ok(kvs.into_iter().min_by_key(|kv| kv.create_revision))
}

/// Runs `op` only while `leader` still holds its key at its revision; false if it does not.
async fn if_leader(
    server: &EtcdServer,
    ai: &AuthInfo,
    leader: &LeaderKey,
    op: Op,
) -> Result<bool, Status> {
    server.guard_write()?;
    let txn = TxnRequest {
        compare: vec![Compare {
            result: compare::CompareResult::Equal as i32,
            target: compare::CompareTarget::Create as i32,
            key: leader.key.clone(),
            target_union: Some(compare::TargetUnion::CreateRevision(leader.rev)),
            range_end: Vec::new(),
        }],
        success: vec![RequestOp { request: Some(op) }],
        failure: Vec::new(),
    };
    let out = server
        .propose(InternalRaftRequest {
            header: super::auth::header(ai),
            txn: Some(txn),
            ..Default::default()
        })
        .await?;
    match out.result? {
        Applied::Txn(t) => Ok(t.succeeded),
        _ => Err(Status::internal("unexpected election apply result")),
    }
}

// etcd's election server returns its recipe's plain errors, which gRPC sends as Unknown.
fn not_leader() -> Status {
    Status::unknown("election: not leader")
}

fn missing_leader_key() -> Status {
    Status::unknown("\"leader\" field must be provided")
}

#[tonic::async_trait]
impl Election for ElectionService {
    async fn campaign(
        &self,
        r: Request<CampaignRequest>,
    ) -> Result<Response<CampaignResponse>, Status> {
        let ai = identity(&self.server, &r)?;
        let mut r = r.into_inner();
        let prefix = prefix_of(&r.name);
        // Permissions first: a refused caller must not leave a session lease behind.
        check_recipe(&self.server, &ai, &prefix, None)?;
        r.lease = session_lease(&self.server, r.lease).await?;
        let mut key = prefix.clone();
        key.extend_from_slice(format!("{:x}", r.lease).as_bytes());
        check_recipe(&self.server, &ai, &prefix, Some(&key))?;
        let (rev, created) = create_once(&self.server, &ai, &key, &r.value, r.lease).await?;
        let leader = LeaderKey {
            name: r.name.clone(),
            key: key.clone(),
            rev,
            lease: r.lease,
        };
        if !created {
            // A candidate that campaigns again with its key in place proclaims the new value.
            let put = Op::RequestPut(PutRequest {
                key: key.clone(),
                value: r.value.clone(),
                lease: r.lease,
                ..Default::default()
            });
            if !if_leader(&self.server, &ai, &leader, put).await? {
                return Err(not_leader());
            }
        }
        wait_oldest(&self.server, &prefix, &key, rev).await?;
        Ok(Response::new(CampaignResponse {
            header: self.server.header(self.server.kv().current_rev()),
            leader: Some(leader),
        }))
    }

    async fn proclaim(
        &self,
        r: Request<ProclaimRequest>,
    ) -> Result<Response<ProclaimResponse>, Status> {
        let ai = identity(&self.server, &r)?;
        let r = r.into_inner();
        let leader = r.leader.ok_or_else(missing_leader_key)?;
        check_recipe(&self.server, &ai, b"", Some(&leader.key))?;
        let put = Op::RequestPut(PutRequest {
            key: leader.key.clone(),
            value: r.value,
            lease: leader.lease,
            ..Default::default()
        });
        if !if_leader(&self.server, &ai, &leader, put).await? {
            return Err(not_leader());
        }
        Ok(Response::new(ProclaimResponse {
            header: self.server.header(self.server.kv().current_rev()),
        }))
    }

    async fn leader(&self, r: Request<LeaderRequest>) -> Result<Response<LeaderResponse>, Status> {
        let ai = identity(&self.server, &r)?;
        let name = r.into_inner().name;
        check_recipe(&self.server, &ai, &prefix_of(&name), None)?;
        match leader_kv(&self.server, &name)? {
            Some(kv) => Ok(Response::new(LeaderResponse {
                header: self.server.header(self.server.kv().current_rev()),
                kv: Some(kv),
            })),
            None => Err(Status::unknown("election: no leader")),
        }
    }

    type ObserveStream = Pin<Box<dyn Stream<Item = Result<LeaderResponse, Status>> + Send>>;

    async fn observe(
        &self,
        r: Request<LeaderRequest>,
    ) -> Result<Response<Self::ObserveStream>, Status> {
        let ai = identity(&self.server, &r)?;
        let name = r.into_inner().name;
        check_recipe(&self.server, &ai, &prefix_of(&name), None)?;
        let server = self.server.clone();
        let (tx, rx) = mpsc::channel(16);
        tokio::spawn(async move {
            let mut revs = server.kv().subscribe_rev();
            let mut last: Option<(Vec<u8>, i64)> = None;
            loop {
                match leader_kv(&server, &name) {
                    Ok(Some(kv)) => {
                        let seen = (kv.key.clone(), kv.mod_revision);
                        if last.as_ref() != Some(&seen) {
                            last = Some(seen);
                            let resp = LeaderResponse {
                                header: server.header(server.kv().current_rev()),
                                kv: Some(kv),
                            };
                            if tx.send(Ok(resp)).await.is_err() {
                                return;
                            }
                        }
                    }
                    Ok(None) => last = None,
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                }
                tokio::select! {
                    changed = revs.changed() => if changed.is_err() { return; },
                    _ = tx.closed() => return,
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn resign(&self, r: Request<ResignRequest>) -> Result<Response<ResignResponse>, Status> {
        let ai = identity(&self.server, &r)?;
        let leader = r.into_inner().leader.ok_or_else(missing_leader_key)?;
        check_recipe(&self.server, &ai, b"", Some(&leader.key))?;
        let del = Op::RequestDeleteRange(DeleteRangeRequest {
            key: leader.key.clone(),
            ..Default::default()
        });
        // Resigning when no longer the leader is not an error (nothing to give up).
        if_leader(&self.server, &ai, &leader, del).await?;
        Ok(Response::new(ResignResponse {
            header: self.server.header(self.server.kv().current_rev()),
        }))
    }
}
