// The KV service: Range (linearizable by default, or serializable), Put, DeleteRange, Txn and
// Compact. Writes go through raft; reads are served from the local store.

use std::sync::Arc;

use proto::etcdserverpb::{
    CompactionRequest, CompactionResponse, DeleteRangeRequest, DeleteRangeResponse,
    InternalRaftRequest, PutRequest, PutResponse, RangeRequest, RangeResponse, TxnRequest,
    TxnResponse, kv_server::Kv,
};
use tonic::{Request, Response, Status};

use super::auth::{self as api_auth, identity};
use super::errors::{self, ApiError};
use super::range_stream;
use super::validate;
use crate::api::errors::ToStatus;
use crate::apply::kv;
use crate::auth::{Access, AuthInfo};
use crate::server::EtcdServer;
use crate::server::apply::Applied;

pub struct KvService {
    pub server: Arc<EtcdServer>,
}

/// A range without a limit, or with one above this, may read a large part of the store.
const LONG_RANGE: i64 = 10_000;

fn off_the_worker_if_long<T>(r: &RangeRequest, read: impl FnOnce() -> T) -> T {
    off_the_worker_if(may_be_long(r), read)
}

fn may_be_long(r: &RangeRequest) -> bool {
    !r.range_end.is_empty() && (r.limit <= 0 || r.limit > LONG_RANGE)
}

/// Whether a txn that only reads has a range that may be long, in either branch.
fn txn_may_be_long(t: &TxnRequest) -> bool {
    use proto::etcdserverpb::request_op::Request as Op;
    t.success
        .iter()
        .chain(&t.failure)
        .any(|op| match &op.request {
            Some(Op::RequestRange(r)) => may_be_long(r),
            Some(Op::RequestTxn(t)) => txn_may_be_long(t),
            _ => false,
        })
}

/// Runs `read`; a `long` one runs with the worker's other tasks handed to another thread
/// first (block_in_place), since the client runtime may have one worker (main.rs) and a read
/// of a million keys would stall every other client of this member (`listall` bench: put
/// p99 beside unpaginated reads of 100k keys 158 ms without the handoff, 15 ms with it).
fn off_the_worker_if<T>(long: bool, read: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let multi =
        Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
    if long && multi {
        tokio::task::block_in_place(read)
    } else {
        read()
    }
}

fn unexpected() -> Status {
    tracing::error!("apply returned a result of the wrong kind");
    errors::CORRUPT.status()
}

impl KvService {
    /// Proposes `req` as the user `ai`: the apply checks the permissions again at the auth
    /// revision current then.
    fn propose(
        &self,
        ai: &AuthInfo,
        mut req: InternalRaftRequest,
    ) -> impl Future<Output = Result<(Applied, i64), ApiError>> + Send + '_ {
        req.header = api_auth::header(ai);
        // Not held by the future: the server encodes it at once.
        let proposed = self.server.propose(req);
        async move {
            let out = proposed.await?;
            Ok((out.result?, out.revision))
        }
    }

    /// What Range and RangeStream check before reading: the request (and for a stream, that
    /// etcd 3.7 streams it), a linearizable read's ReadIndex round, and the caller's read
    /// permission.
    async fn admit_range(
        &self,
        request: Request<RangeRequest>,
        stream: bool,
    ) -> Result<(AuthInfo, RangeRequest), Status> {
        let ai = identity(&self.server, &request)?;
        let r = request.into_inner();
        self.server.guard(r.serializable)?;
        validate::check_range(&r)?;
        if stream {
            range_stream::check_streamable(&r)?;
        }
        if !r.serializable {
            self.server.linearizable_read().await?;
        }
        self.server
            .auth()
            .check(&ai, &r.key, &r.range_end, Access::Read)?;
        Ok((ai, r))
    }

    /// etcd's doSerialize: a read served locally is refused when the auth store moved on
    /// while it ran (the identity was checked at an older revision).
    fn check_fresh(&self, ai: &AuthInfo) -> Result<(), ApiError> {
        if ai.revision != 0 && ai.revision != self.server.auth().revision() {
            return Err(errors::AUTH_OLD_REVISION);
        }
        Ok(())
    }
}

#[tonic::async_trait]
impl Kv for KvService {
    async fn range(
        &self,
        request: Request<RangeRequest>,
    ) -> Result<Response<RangeResponse>, Status> {
        let (ai, r) = self.admit_range(request, false).await?;
        let mut resp = off_the_worker_if_long(&r, || kv::range(self.server.kv(), &r))?;
        self.check_fresh(&ai)?;
        let rev = resp.header.as_ref().map(|h| h.revision).unwrap_or(0);
        resp.header = self.server.header(rev);
        Ok(Response::new(resp))
    }

    async fn put(&self, request: Request<PutRequest>) -> Result<Response<PutResponse>, Status> {
        let ai = identity(&self.server, &request)?;
        let r = request.into_inner();
        self.server.guard_write()?;
        validate::check_put(&r)?;
        self.server.auth().check(&ai, &r.key, b"", Access::Write)?;
        self.server
            .check_quota(prost::Message::encoded_len(&r))
            .await?;
        let (applied, rev) = self
            .propose(
                &ai,
                InternalRaftRequest {
                    put: Some(r),
                    ..Default::default()
                },
            )
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
        let ai = identity(&self.server, &request)?;
        let r = request.into_inner();
        self.server.guard_write()?;
        validate::check_delete(&r)?;
        if r.prev_kv {
            self.server
                .auth()
                .check(&ai, &r.key, &r.range_end, Access::Read)?;
        }
        self.server
            .auth()
            .check(&ai, &r.key, &r.range_end, Access::Write)?;
        let (applied, rev) = self
            .propose(
                &ai,
                InternalRaftRequest {
                    delete_range: Some(r),
                    ..Default::default()
                },
            )
            .await?;
        match applied {
            Applied::DeleteRange(mut d) => {
                d.header = self.server.header(rev);
                Ok(Response::new(d))
            }
            _ => Err(unexpected()),
        }
    }

    type RangeStreamStream = tokio_stream::wrappers::ReceiverStream<
        Result<proto::etcdserverpb::RangeStreamResponse, Status>,
    >;

    /// etcd 3.7's streamed Range: checked and authorized as Range, then read in pages at one
    /// revision (api/range_stream.rs).
    async fn range_stream(
        &self,
        request: Request<RangeRequest>,
    ) -> Result<Response<Self::RangeStreamStream>, Status> {
        let (ai, r) = self.admit_range(request, true).await?;
        self.check_fresh(&ai)?;
        // Cluster, member and term; the stream sets the pinned revision.
        let header = self.server.header(0).unwrap_or_default();
        let chunks = range_stream::spawn(
            self.server.kv().clone(),
            r,
            header,
            self.server.cfg().max_request_bytes,
        );
        Ok(Response::new(tokio_stream::wrappers::ReceiverStream::new(
            chunks,
        )))
    }

    async fn txn(&self, request: Request<TxnRequest>) -> Result<Response<TxnResponse>, Status> {
        let ai = identity(&self.server, &request)?;
        let r = request.into_inner();
        self.server.guard(false)?;
        validate::check_txn(&r, self.server.cfg().max_txn_ops)?;
        let read_only = kv::is_read_only_txn(&r);
        if !read_only {
            self.server.guard_write()?;
        }
        if read_only {
            // A txn that only reads is served like a Range, without going through raft.
            self.server.linearizable_read().await?;
            self.server.auth().check_txn(&ai, &r)?;
            let mut view = self.server.kv().read_view();
            let mut t =
                off_the_worker_if(txn_may_be_long(&r), || kv::read_only_txn(&mut view, &r))?;
            let rev = view.rev();
            kv::stamp_txn_headers(&mut t, rev);
            t.header = self.server.header(rev);
            self.check_fresh(&ai)?;
            return Ok(Response::new(t));
        }
        self.server.auth().check_txn(&ai, &r)?;
        self.server
            .check_quota(prost::Message::encoded_len(&r))
            .await?;
        let (applied, rev) = self
            .propose(
                &ai,
                InternalRaftRequest {
                    txn: Some(r),
                    ..Default::default()
                },
            )
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
        // etcd checks no permission for compaction, only that a token given is valid.
        let ai = identity(&self.server, &request)?;
        let r = request.into_inner();
        self.server.guard_write()?;
        let physical = r.physical;
        let (applied, rev) = self
            .propose(
                &ai,
                InternalRaftRequest {
                    compaction: Some(r),
                    ..Default::default()
                },
            )
            .await?;
        if physical {
            // The answer waits until the old revisions are deleted and that is committed, so
            // a crash cannot bring them back (etcd's physical compaction).
            let store = self.server.kv().clone();
            let done = tokio::task::spawn_blocking(move || {
                store.wait_compactions();
                store.backend().force_commit()
            })
            .await;
            if !matches!(done, Ok(Ok(()))) {
                return Err(errors::CORRUPT.status());
            }
        }
        match applied {
            Applied::Compaction(mut c) => {
                c.header = self.server.header(rev);
                Ok(Response::new(c))
            }
            _ => Err(unexpected()),
        }
    }
}
