// The KV service: Range (linearizable by default, or serializable), Put, DeleteRange, Txn and
// Compact. Writes go through raft; reads are served from the local store.

use std::sync::Arc;

use proto::etcdserverpb::{
    CompactionRequest, CompactionResponse, DeleteRangeRequest, DeleteRangeResponse,
    InternalRaftRequest, PutRequest, PutResponse, RangeRequest, RangeResponse, TxnRequest,
    TxnResponse, kv_server::Kv,
};
use tonic::{Request, Response, Status};

use super::errors::{self, ApiError};
use crate::apply::kv::{self, NoLeases};
use crate::server::EtcdServer;
use crate::server::apply::Applied;

pub struct KvService {
    pub server: Arc<EtcdServer>,
}

fn unexpected() -> Status {
    tracing::error!("apply returned a result of the wrong kind");
    errors::CORRUPT.status()
}

impl KvService {
    async fn propose(&self, req: InternalRaftRequest) -> Result<(Applied, i64), ApiError> {
        let out = self.server.propose(req).await?;
        Ok((out.result?, out.revision))
    }
}

#[tonic::async_trait]
impl Kv for KvService {
    async fn range(
        &self,
        request: Request<RangeRequest>,
    ) -> Result<Response<RangeResponse>, Status> {
        let r = request.into_inner();
        self.server.guard(r.serializable)?;
        kv::check_range(&r)?;
        if !r.serializable {
            self.server.linearizable_read().await?;
        }
        let mut resp = kv::range(self.server.kv(), &r)?;
        let rev = resp.header.as_ref().map(|h| h.revision).unwrap_or(0);
        resp.header = self.server.header(rev);
        Ok(Response::new(resp))
    }

    async fn put(&self, request: Request<PutRequest>) -> Result<Response<PutResponse>, Status> {
        let r = request.into_inner();
        self.server.guard(false)?;
        kv::check_put(&r)?;
        self.server
            .check_quota(prost::Message::encoded_len(&r))
            .await?;
        let (applied, rev) = self
            .propose(InternalRaftRequest {
                put: Some(r),
                ..Default::default()
            })
            .await?;
        match applied {
            Applied::Put(mut p) => {
                p.header = self.server.header(rev);
                Ok(Response::new(p))
            }
            _ => Err(unexpected()),
        }
    }

    async fn delete_range(
        &self,
        request: Request<DeleteRangeRequest>,
    ) -> Result<Response<DeleteRangeResponse>, Status> {
        let r = request.into_inner();
        self.server.guard(false)?;
        kv::check_delete(&r)?;
        let (applied, rev) = self
            .propose(InternalRaftRequest {
                delete_range: Some(r),
                ..Default::default()
            })
            .await?;
        match applied {
            Applied::DeleteRange(mut d) => {
                d.header = self.server.header(rev);
                Ok(Response::new(d))
            }
            _ => Err(unexpected()),
        }
    }

    async fn txn(&self, request: Request<TxnRequest>) -> Result<Response<TxnResponse>, Status> {
        let r = request.into_inner();
        self.server.guard(false)?;
        kv::check_txn(&r, self.server.cfg().max_txn_ops)?;
        if kv::is_read_only_txn(&r) {
            // A txn that only reads is served like a Range, without going through raft.
            self.server.linearizable_read().await?;
            let store = self.server.kv();
            let mut w = store.write();
            let mut t = kv::txn(&mut w, &r, &NoLeases)?;
            drop(w);
            let rev = store.current_rev();
            kv::stamp_txn_headers(&mut t, rev);
            t.header = self.server.header(rev);
            return Ok(Response::new(t));
        }
        self.server
            .check_quota(prost::Message::encoded_len(&r))
            .await?;
        let (applied, rev) = self
            .propose(InternalRaftRequest {
                txn: Some(r),
                ..Default::default()
            })
            .await?;
        match applied {
            Applied::Txn(mut t) => {
                t.header = self.server.header(rev);
                Ok(Response::new(t))
            }
            _ => Err(unexpected()),
        }
    }

    async fn compact(
        &self,
        request: Request<CompactionRequest>,
    ) -> Result<Response<CompactionResponse>, Status> {
        let r = request.into_inner();
        self.server.guard(false)?;
        let (applied, rev) = self
            .propose(InternalRaftRequest {
                compaction: Some(r),
                ..Default::default()
            })
            .await?;
        match applied {
            Applied::Compaction(mut c) => {
                c.header = self.server.header(rev);
                Ok(Response::new(c))
            }
            _ => Err(unexpected()),
        }
    }
}
