// The Lock service (v3lockpb): a lock is a key `<name>/<lease hex>` created under the caller's
// lease; the holder is the key with the lowest create revision under `<name>/`. Lock waits
// until every older key is gone, so waiters are served in order (etcd's lock recipe).

use std::sync::Arc;

use proto::etcdserverpb::{
    Compare, DeleteRangeRequest, InternalRaftRequest, PutRequest, RangeRequest, RequestOp,
    TxnRequest, compare, request_op::Request as Op, response_op::Response as OpResp,
};
use proto::v3lockpb::{
    LockRequest, LockResponse, UnlockRequest, UnlockResponse, lock_server::Lock,
};
use tonic::{Request, Response, Status};

use super::auth::{check_recipe, identity};
use super::errors;
use crate::api::errors::ToStatus;
use crate::apply::kv::LeaseLookup;
use crate::auth::AuthInfo;
use crate::mvcc::KeyRange;
use crate::server::EtcdServer;
use crate::server::apply::Applied;

pub struct LockService {
    pub server: Arc<EtcdServer>,
}

/// The smallest key greater than every key starting with `prefix`.
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// The TTL of the session lease etcd's lock and election servers open for a caller that
/// names no lease (clientv3 concurrency's default session TTL).
const SESSION_TTL: i64 = 60;

/// The lease a Lock or Campaign runs under: the caller's, which must exist, or for lease 0 a
/// new one of SESSION_TTL seconds that nobody keeps alive, as etcd's servers open a session
/// and orphan it: the lock or candidacy ends when that lease expires unless released first.
pub(crate) async fn session_lease(server: &EtcdServer, lease: i64) -> Result<i64, Status> {
    if lease != 0 {
        if !server.lessor().lease_exists(lease) {
            return Err(errors::LEASE_NOT_FOUND.status());
        }
        return Ok(lease);
    }
    let granted = super::lease::grant(
        server,
        proto::etcdserverpb::LeaseGrantRequest {
            ttl: SESSION_TTL,
            id: 0,
        },
    )
    .await?;
    Ok(granted.id)
}

/// Creates `key` = `value` under `lease` if it is not there yet; returns its create revision
/// and whether this call created it.
pub(crate) async fn create_once(
    server: &EtcdServer,
    ai: &AuthInfo,
    key: &[u8],
    value: &[u8],
    lease: i64,
) -> Result<(i64, bool), Status> {
    server.guard_write()?;
    let txn = TxnRequest {
        compare: vec![Compare {
            result: compare::CompareResult::Equal as i32,
            target: compare::CompareTarget::Create as i32,
            key: key.to_vec(),
            target_union: Some(compare::TargetUnion::CreateRevision(0)),
            range_end: Vec::new(),
        }],
        success: vec![RequestOp {
            request: Some(Op::RequestPut(PutRequest {
                key: key.to_vec(),
                value: value.to_vec(),
                lease,
                ..Default::default()
            })),
        }],
        failure: vec![RequestOp {
            request: Some(Op::RequestRange(RangeRequest {
                key: key.to_vec(),
                ..Default::default()
            })),
        }],
    };
    let out = server
        .propose(InternalRaftRequest {
            header: super::auth::header(ai),
            txn: Some(txn),
            ..Default::default()
        })
        .await?;
    match out.result? {
        Applied::Txn(t) if t.succeeded => Ok((out.revision, true)),
        Applied::Txn(t) => match t.responses.first().and_then(|r| r.response.as_ref()) {
            Some(OpResp::ResponseRange(r)) => r
                .kvs
                .first()
                .map(|kv| (kv.create_revision, false))
                .ok_or_else(|| Status::internal("lock key vanished")),
            _ => Err(Status::internal("unexpected lock txn response")),
        },
        _ => Err(Status::internal("unexpected lock apply result")),
    }
}

/// Waits until `key` (created at `my_rev`) is the oldest key under `prefix`: the lock holder or
/// the elected leader. Fails if the key disappears meanwhile (its lease ended).
pub(crate) async fn wait_oldest(
    server: &EtcdServer,
    prefix: &[u8],
    key: &[u8],
    my_rev: i64,
) -> Result<(), Status> {
    let end = prefix_end(prefix);
    let store = server.kv().clone();
    let mut revs = store.subscribe_rev();
    loop {
        let under = store
            .range(KeyRange::new(prefix, &end), 0, 0)
            .map_err(crate::apply::kv::mvcc_error)?
            .kvs;
        if !under
            .iter()
            .any(|kv| kv.key == key && kv.create_revision == my_rev)
        {
            return Err(errors::LEASE_NOT_FOUND.status());
        }
        if !under.iter().any(|kv| kv.create_revision < my_rev) {
            return Ok(());
        }
        if revs.changed().await.is_err() {
            return Err(errors::STOPPED.status());
        }
    }
}

#[tonic::async_trait]
impl Lock for LockService {
    async fn lock(&self, r: Request<LockRequest>) -> Result<Response<LockResponse>, Status> {
        let ai = identity(&self.server, &r)?;
        let r = r.into_inner();
        let mut prefix = r.name.clone();
        prefix.push(b'/');
        // Permissions first: a refused caller must not leave a session lease behind.
        check_recipe(&self.server, &ai, &prefix, None)?;
        let lease = session_lease(&self.server, r.lease).await?;
        let mut key = prefix.clone();
        key.extend_from_slice(format!("{lease:x}").as_bytes());
        check_recipe(&self.server, &ai, &prefix, Some(&key))?;
        let (my_rev, _) = create_once(&self.server, &ai, &key, b"", lease).await?;
        wait_oldest(&self.server, &prefix, &key, my_rev).await?;
        let store = self.server.kv();
        Ok(Response::new(LockResponse {
            header: self.server.header(store.current_rev()),
            key,
        }))
    }

    async fn unlock(&self, r: Request<UnlockRequest>) -> Result<Response<UnlockResponse>, Status> {
        let ai = identity(&self.server, &r)?;
        let key = r.into_inner().key;
        check_recipe(&self.server, &ai, b"", Some(&key))?;
        self.server.guard_write()?;
        let out = self
            .server
            .propose(InternalRaftRequest {
                header: super::auth::header(&ai),
                delete_range: Some(DeleteRangeRequest {
                    key,
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await?;
        out.result?;
        Ok(Response::new(UnlockResponse {
            header: self.server.header(out.revision),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn prefix_ends() {
        assert_eq!(prefix_end(b"a/"), b"a0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
    }
}
