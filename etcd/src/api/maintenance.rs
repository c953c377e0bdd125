// The Maintenance service: Status, Alarm (through raft; NOSPACE from the quota), Defragment,
// HashKV, Hash, Snapshot (a consistent db image with etcd's sha256 trailer) and MoveLeader (a
// raft leadership transfer). Downgrade (etcd 3.5's, not in 3.4) answers `unimplemented`.

use std::pin::Pin;
use std::sync::Arc;

use proto::etcdserverpb::{
    AlarmRequest, AlarmResponse, DefragmentRequest, DefragmentResponse, DowngradeRequest,
    DowngradeResponse, HashKvRequest, HashKvResponse, HashRequest, HashResponse, MoveLeaderRequest,
    MoveLeaderResponse, SnapshotRequest, SnapshotResponse, StatusRequest, StatusResponse,
    maintenance_server::Maintenance,
};
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use super::errors;
use crate::api::errors::ToStatus;
use crate::server::EtcdServer;
use crate::server::apply::Applied;

pub struct MaintenanceService {
    pub server: Arc<EtcdServer>,
}

fn not_yet(what: &str) -> Status {
    Status::unimplemented(format!("{what} is not supported by etcd-rs yet"))
}

const SNAPSHOT_CHUNK: usize = 32 * 1024;
/// The sha256 trailer the backend image ends with.
const SHA256_LEN: usize = 32;

#[tonic::async_trait]
impl Maintenance for MaintenanceService {
    async fn alarm(&self, r: Request<AlarmRequest>) -> Result<Response<AlarmResponse>, Status> {
        let ai = super::auth::identity(&self.server, &r)?;
        let out = self
            .server
            .propose(proto::etcdserverpb::InternalRaftRequest {
                header: super::auth::header(&ai),
                alarm: Some(r.into_inner()),
                ..Default::default()
            })
            .await?;
        match out.result? {
            // etcd answers alarm calls without a header.
            Applied::Alarm(a) => Ok(Response::new(a)),
            _ => Err(Status::internal(
                "alarm: apply returned another kind of result",
            )),
        }
    }

    async fn status(&self, _r: Request<StatusRequest>) -> Result<Response<StatusResponse>, Status> {
        let s = &self.server;
        let (size, in_use) = db_sizes(s);
        let mut errs = Vec::new();
        if let Some(f) = s.failure() {
            errs.push(f);
        }
        for a in s.alarms() {
            // etcd lists raised alarms among the status errors.
            errs.push(format!(
                "memberID:{} alarm:{}",
                a.member_id,
                proto::etcdserverpb::AlarmType::try_from(a.alarm)
                    .map(|t| t.as_str_name())
                    .unwrap_or("UNKNOWN")
            ));
        }
        Ok(Response::new(StatusResponse {
            header: s.header(s.kv().current_rev()),
            version: crate::version::ETCD_VERSION.to_string(),
            db_size: size,
            leader: s.leader(),
            raft_index: s.commit_index(),
            raft_term: s.term(),
            raft_applied_index: s.applied_index(),
            errors: errs,
            db_size_in_use: in_use,
            is_learner: s.is_learner(),
        }))
    }

    async fn defragment(
        &self,
        _r: Request<DefragmentRequest>,
    ) -> Result<Response<DefragmentResponse>, Status> {
        super::auth::check_maintenance_admin(&self.server, &_r)?;
        let server = self.server.clone();
        tokio::task::spawn_blocking(move || {
            let backend = server.kv().backend();
            let path = backend.db().path().to_path_buf();
            let before = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            tracing::info!(path = %path.display(), "starting defragment");
            let started = std::time::Instant::now();
            let mut writers_waited = std::time::Duration::ZERO;
            let mut note = |step| {
                if let common::backend::DefragStep::Swapped { writers_waited: w } = step {
                    writers_waited = w;
                }
            };
            backend.defrag_with(&mut note).map_err(|e| {
                tracing::error!(error = %e, "failed to defragment");
                Status::internal(format!("defragment failed: {e}"))
            })?;
            let after = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            tracing::info!(
                path = %path.display(),
                current_db_size_bytes = before,
                after_db_size_bytes = after,
                took = ?started.elapsed(),
                // Ours copies online: writes waited only for the last catch-up and the swap.
                writes_waited = ?writers_waited,
                "finished defragmenting directory"
            );
            crate::server::heap::release_soon();
            Ok::<(), Status>(())
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))??;
        // etcd 3.4 answers an empty message, without a header.
        Ok(Response::new(DefragmentResponse { header: None }))
    }

    /// etcd's Hash (meant for tests): the whole backend, everything committed first, without
    /// the meta keys that move on their own (consistent index, term).
    async fn hash(&self, _r: Request<HashRequest>) -> Result<Response<HashResponse>, Status> {
        super::auth::check_maintenance_admin(&self.server, &_r)?;
        let server = self.server.clone();
        let hash = tokio::task::spawn_blocking(move || {
            let backend = server.kv().backend();
            backend.force_commit()?;
            let meta = common::backend::buckets::META;
            backend
                .db()
                .hash(&[(meta, b"consistent_index"), (meta, b"term")])
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?
        .map_err(|e| Status::internal(format!("hash failed: {e}")))?;
        Ok(Response::new(HashResponse {
            header: self.server.header(self.server.kv().current_rev()),
            hash,
        }))
    }

    async fn hash_kv(&self, r: Request<HashKvRequest>) -> Result<Response<HashKvResponse>, Status> {
        super::auth::check_maintenance_admin(&self.server, &r)?;
        let rev = r.into_inner().revision;
        let resp = crate::server::corrupt::local_hash(&self.server, rev).await?;
        Ok(Response::new(resp))
    }

    type SnapshotStream = Pin<Box<dyn Stream<Item = Result<SnapshotResponse, Status>> + Send>>;

    async fn snapshot(
        &self,
        _r: Request<SnapshotRequest>,
    ) -> Result<Response<Self::SnapshotStream>, Status> {
        super::auth::check_maintenance_admin(&self.server, &_r)?;
        let server = self.server.clone();
        let image = tokio::task::spawn_blocking(move || -> Result<Vec<u8>, String> {
            let backend = server.kv().backend();
            backend.force_commit().map_err(|e| e.to_string())?;
            let mut out = Vec::new();
            backend
                .db()
                .snapshot(&mut out, true)
                .map_err(|e| e.to_string())?;
            Ok(out)
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?
        .map_err(Status::internal)?;
        // As etcd 3.4: the db in 32 KiB messages counting down remaining_bytes, then the
        // sha256 of it alone in a last message; no header on any of them.
        let Some(db_len) = image.len().checked_sub(SHA256_LEN) else {
            return Err(Status::internal("snapshot image shorter than its checksum"));
        };
        let (db, sha) = image.split_at(db_len);
        let mut sent = 0;
        let mut chunks: Vec<Result<SnapshotResponse, Status>> = db
            .chunks(SNAPSHOT_CHUNK)
            .map(|c| {
                sent += c.len();
                Ok(SnapshotResponse {
                    header: None,
                    remaining_bytes: (db_len - sent) as u64,
                    blob: c.to_vec(),
                    version: String::new(),
                })
            })
            .collect();
        chunks.push(Ok(SnapshotResponse {
            blob: sha.to_vec(),
            ..Default::default()
        }));
        Ok(Response::new(Box::pin(tokio_stream::iter(chunks))))
    }

    async fn move_leader(
        &self,
        r: Request<MoveLeaderRequest>,
    ) -> Result<Response<MoveLeaderResponse>, Status> {
        super::auth::check_maintenance_admin(&self.server, &r)?;
        let target = r.into_inner().target_id;
        if !self.server.is_leader() {
            return Err(errors::NOT_LEADER.status());
        }
        if !self
            .server
            .members()
            .iter()
            .any(|m| m.id == target && !m.is_learner)
        {
            return Err(errors::BAD_LEADER_TRANSFEREE.status());
        }
        // Moving the leadership to the member that has it is done at once, as in etcd (a
        // client with several endpoints may well ask the leader itself).
        if target != self.server.member_id() {
            self.server.move_leader(target).await?;
        }
        // etcd 3.4 answers an empty message, without a header.
        Ok(Response::new(MoveLeaderResponse { header: None }))
    }

    async fn downgrade(
        &self,
        _r: Request<DowngradeRequest>,
    ) -> Result<Response<DowngradeResponse>, Status> {
        Err(not_yet("Downgrade"))
    }
}

/// The db file's size and the part of it in use, in bytes (Status and /metrics).
pub fn db_sizes(s: &EtcdServer) -> (i64, i64) {
    let db = s.kv().backend().db();
    let size = std::fs::metadata(db.path())
        .map(|m| m.len() as i64)
        .unwrap_or(0);
    // In use = pages of the image minus free pages, as the db keeps count of them (no page
    // is read: Status and every /metrics scrape ask).
    (size, db.size_in_use() as i64)
}
