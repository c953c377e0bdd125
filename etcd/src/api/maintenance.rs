// The Maintenance service: Status, Alarm (through raft; NOSPACE from the quota), Defragment,
// HashKV, Hash, Snapshot (a consistent db image with etcd's sha256 trailer), MoveLeader (a
// raft leadership transfer) and etcd 3.5's Downgrade (server/downgrade.rs).

use std::pin::Pin;
use std::sync::Arc;

use proto::etcdserverpb::{
    AlarmRequest, AlarmResponse, DefragmentRequest, DefragmentResponse, DowngradeRequest,
    DowngradeResponse, HashKvRequest, HashKvResponse, HashRequest, HashResponse, MoveLeaderRequest,
    MoveLeaderResponse, SnapshotRequest, SnapshotResponse, StatusRequest, StatusResponse,
    downgrade_request::DowngradeAction, maintenance_server::Maintenance,
};
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use super::errors;
use crate::api::errors::ToStatus;
use crate::metrics::METRICS;
use crate::server::EtcdServer;
use crate::server::apply::Applied;
use crate::server::downgrade;

pub struct MaintenanceService {
    pub server: Arc<EtcdServer>,
}

const SNAPSHOT_CHUNK: usize = 32 * 1024;
/// Snapshot messages queued ahead of a slow client.
const SNAPSHOT_CHUNKS_IN_FLIGHT: usize = 8;

/// Cuts a snapshot image, as the backend writes it with its sha256 trailer, into
/// Maintenance.Snapshot's messages: as etcd 3.4, the db in 32 KiB messages counting down
/// remaining_bytes, then the sha256 of it alone in a last message; no header on any of them.
struct SnapshotChunks {
    tx: tokio::sync::mpsc::Sender<Result<SnapshotResponse, Status>>,
    buf: Vec<u8>,
    /// Bytes of the db image not yet buffered; what follows them is the trailer.
    db_left: u64,
    trailer: Vec<u8>,
    /// The client stopped reading.
    gone: bool,
}

impl SnapshotChunks {
    fn new(tx: tokio::sync::mpsc::Sender<Result<SnapshotResponse, Status>>, db_len: u64) -> Self {
        SnapshotChunks {
            tx,
            buf: Vec::with_capacity(SNAPSHOT_CHUNK),
            db_left: db_len,
            trailer: Vec::new(),
            gone: false,
        }
    }

    fn emit(&mut self, msg: SnapshotResponse) -> std::io::Result<()> {
        if self.tx.blocking_send(Ok(msg)).is_err() {
            self.gone = true;
            return Err(std::io::Error::other("the snapshot's client went away"));
        }
        Ok(())
    }

    fn flush_chunk(&mut self) -> std::io::Result<()> {
        let blob = std::mem::replace(&mut self.buf, Vec::with_capacity(SNAPSHOT_CHUNK));
        self.emit(SnapshotResponse {
            header: None,
            remaining_bytes: self.db_left,
            blob,
            version: String::new(),
        })
    }

    /// Sends what is buffered and the checksum message.
    fn finish(mut self) -> std::io::Result<()> {
        if !self.buf.is_empty() {
            self.flush_chunk()?;
        }
        let blob = std::mem::take(&mut self.trailer);
        self.emit(SnapshotResponse {
            blob,
            ..Default::default()
        })
    }
}

impl std::io::Write for SnapshotChunks {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let db_part = data
            .len()
            .min(usize::try_from(self.db_left).unwrap_or(usize::MAX));
        let (mut rest, trailer) = data.split_at(db_part);
        while !rest.is_empty() {
            let n = (SNAPSHOT_CHUNK - self.buf.len()).min(rest.len());
            self.buf.extend_from_slice(&rest[..n]);
            self.db_left -= n as u64;
            rest = &rest[n..];
            if self.buf.len() == SNAPSHOT_CHUNK {
                self.flush_chunk()?;
            }
        }
        self.trailer.extend_from_slice(trailer);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

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
            METRICS.defrag_inflight.inc();
            let mut writers_waited = std::time::Duration::ZERO;
            let mut note = |step| {
                if let common::backend::DefragStep::Swapped { writers_waited: w } = step {
                    writers_waited = w;
                }
            };
            let done = backend.defrag_with(&mut note);
            METRICS.defrag_inflight.dec();
            METRICS.defrag.observe(started.elapsed().as_secs_f64());
            done.map_err(|e| {
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
            let started = std::time::Instant::now();
            let backend = server.kv().backend();
            backend.force_commit()?;
            let meta = common::backend::buckets::META;
            let hash = backend
                .db()
                .hash(&[(meta, b"consistent_index"), (meta, b"term")]);
            METRICS.hash.observe(started.elapsed().as_secs_f64());
            hash
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
        // The image streams from one read transaction as the client takes it: a few chunks
        // in flight, never the whole db in memory (a 3 GB db stays a 3 GB file).
        let (tx, rx) = tokio::sync::mpsc::channel(SNAPSHOT_CHUNKS_IN_FLIGHT);
        tokio::task::spawn_blocking(move || {
            let started = std::time::Instant::now();
            let backend = server.kv().backend();
            let fail = |tx: &tokio::sync::mpsc::Sender<_>, e: String| {
                let _ = tx.blocking_send(Err(Status::internal(e)));
            };
            if let Err(e) = backend.force_commit() {
                return fail(&tx, e.to_string());
            }
            let db = backend.db();
            let rtx = db.begin_read();
            let mut out = SnapshotChunks::new(tx.clone(), rtx.size());
            match db.snapshot_of(&rtx, &mut out, true) {
                Ok(_) => {
                    if out.finish().is_ok() {
                        METRICS.snapshot.observe(started.elapsed().as_secs_f64());
                    }
                }
                // A client that went away is no failure to report.
                Err(_) if out.gone => {}
                Err(e) => fail(&tx, e.to_string()),
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
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

    /// etcd 3.5's Downgrade, served by any member (a change goes through raft). Root only
    /// with auth on, as etcd 3.6 checks it (3.5 let any user change the cluster version).
    async fn downgrade(
        &self,
        r: Request<DowngradeRequest>,
    ) -> Result<Response<DowngradeResponse>, Status> {
        super::auth::check_cluster_admin(&self.server, &r)?;
        self.server.guard(false)?;
        let r = r.into_inner();
        let s = &self.server;
        let version = match DowngradeAction::try_from(r.action) {
            Ok(DowngradeAction::Validate) => downgrade::validate(s, &r.version).await,
            Ok(DowngradeAction::Enable) => downgrade::enable(s, &r.version).await,
            Ok(DowngradeAction::Cancel) => downgrade::cancel(s).await,
            Err(_) => Err(errors::UNKNOWN_METHOD),
        }?;
        Ok(Response::new(DowngradeResponse {
            header: s.header(s.kv().current_rev()),
            version,
        }))
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
