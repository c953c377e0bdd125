// The etcd server: boots a member from its data dir, runs the raft loop that persists and
// applies entries, and offers proposals and linearizable reads to the API layer.

pub mod alarms;
pub mod apply;
pub mod bootstrap;
pub mod compactor;
pub mod raft_loop;
pub mod wait;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, RwLock};

use prost::Message;
use proto::etcdserverpb::{InternalRaftRequest, RequestHeader, ResponseHeader};
use tokio::sync::{oneshot, watch};

use crate::api::errors::{self, ApiError};
use crate::config::Config;
use crate::lease::Lessor;
use crate::membership::Member;
use crate::mvcc::KvStore;
use apply::Outcome;
use raft_loop::{RaftLoop, RaftMsg};
use wait::{IdGen, Wait};

/// State shared by the raft loop and the API handlers.
pub struct Shared {
    pub cfg: Config,
    pub member_id: u64,
    pub cluster_id: u64,
    pub kv: Arc<KvStore>,
    pub lessor: Arc<Lessor>,
    pub alarms: alarms::Alarms,
    pub auth: Arc<crate::auth::AuthStore>,
    pub wait: Wait<Outcome>,
    members: RwLock<Vec<Member>>,
    leader: AtomicU64,
    is_leader: AtomicBool,
    term: AtomicU64,
    commit: AtomicU64,
    applied_tx: watch::Sender<u64>,
    failed: Mutex<Option<String>>,
}

impl Shared {
    fn set_leader(&self, leader: u64, is_leader: bool) {
        let old = self.leader.swap(leader, Ordering::SeqCst);
        self.is_leader.store(is_leader, Ordering::SeqCst);
        if old != leader && leader != 0 {
            tracing::info!(
                "raft.node: {:x} elected leader {:x} at term {}",
                self.member_id,
                leader,
                self.term.load(Ordering::SeqCst)
            );
        }
    }

    fn set_term_commit(&self, term: u64, commit: u64) {
        self.term.store(term, Ordering::SeqCst);
        self.commit.store(commit, Ordering::SeqCst);
    }

    fn set_applied(&self, index: u64) {
        self.applied_tx.send_replace(index);
    }

    fn fail(&self, why: String) {
        *self.failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
        // Wake readers waiting on the applied index so they see the failure.
        self.applied_tx.send_modify(|_| {});
    }

    fn add_member(&self, m: Member) {
        let mut ms = self.members.write().unwrap_or_else(|e| e.into_inner());
        if !ms.iter().any(|x| x.id == m.id) {
            ms.push(m);
        }
    }

    fn update_member(&self, id: u64, f: impl Fn(&mut Member)) {
        let mut ms = self.members.write().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = ms.iter_mut().find(|m| m.id == id) {
            f(m);
        }
    }
}

/// The running member, as the API layer sees it.
pub struct EtcdServer {
    shared: Arc<Shared>,
    raft_tx: Mutex<Sender<RaftMsg>>,
    applied_rx: watch::Receiver<u64>,
    ids: IdGen,
    raft_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl EtcdServer {
    /// Boots the member in `cfg.data_dir` and starts its raft loop.
    pub fn start(cfg: Config) -> Result<Arc<EtcdServer>, bootstrap::BootError> {
        // A bad --auth-token stops the start before the data dir is touched.
        let tokens =
            crate::auth::token::TokenProvider::from_flag(&cfg.auth_token, cfg.auth_token_ttl)
                .map_err(bootstrap::BootError::Config)?;
        let booted = bootstrap::boot(&cfg)?;
        let auth = crate::auth::AuthStore::open(&booted.kv, tokens, cfg.bcrypt_cost);
        let (applied_tx, applied_rx) = watch::channel(booted.kv.consistent_index());
        let shared = Arc::new(Shared {
            member_id: booted.member_id,
            cluster_id: booted.cluster_id,
            kv: booted.kv.clone(),
            lessor: booted.lessor.clone(),
            alarms: alarms::Alarms::load(&booted.kv),
            auth,
            wait: Wait::default(),
            members: RwLock::new(booted.members.clone()),
            leader: AtomicU64::new(0),
            is_leader: AtomicBool::new(false),
            term: AtomicU64::new(0),
            commit: AtomicU64::new(0),
            applied_tx,
            failed: Mutex::new(None),
            cfg,
        });
        let (tx, rx) = std::sync::mpsc::channel();
        let lp = RaftLoop {
            node: booted.node,
            wal: booted.wal,
            snapshotter: booted.snapshotter,
            shared: shared.clone(),
            rx,
            snapshot_index: booted.snapshot_index,
            conf_state: booted.conf_state,
            applied_index: booted.snapshot_index,
        };
        let handle = std::thread::Builder::new()
            .name("raft-loop".into())
            .spawn(move || lp.run())
            .map_err(|e| {
                bootstrap::BootError::Config(format!("cannot start the raft loop: {e}"))
            })?;
        Ok(Arc::new(EtcdServer {
            ids: IdGen::new(shared.member_id),
            shared,
            raft_tx: Mutex::new(tx),
            applied_rx,
            raft_thread: Mutex::new(Some(handle)),
        }))
    }

    pub fn cfg(&self) -> &Config {
        &self.shared.cfg
    }

    pub fn kv(&self) -> &Arc<KvStore> {
        &self.shared.kv
    }

    pub fn auth(&self) -> &Arc<crate::auth::AuthStore> {
        &self.shared.auth
    }

    pub fn lessor(&self) -> &Arc<Lessor> {
        &self.shared.lessor
    }

    /// A fresh id for a lease granted without one (positive, unique across restarts).
    pub fn next_lease_id(&self) -> i64 {
        (self.ids.next() & (i64::MAX as u64)) as i64
    }

    pub fn alarms(&self) -> Vec<proto::etcdserverpb::AlarmMember> {
        self.shared.alarms.list()
    }

    /// etcd's quota check before a write that grows the db: when the backend plus this
    /// request would pass --quota-backend-bytes, raise NOSPACE and refuse the request.
    pub async fn check_quota(&self, request_bytes: usize) -> Result<(), ApiError> {
        let size = self.shared.kv.backend().db().size();
        // Room for the request's pages and bookkeeping, as etcd's cost estimate allows.
        let cost = request_bytes as u64 + 512;
        if size + cost <= self.shared.cfg.quota_backend_bytes as u64 {
            return Ok(());
        }
        use proto::etcdserverpb::{AlarmRequest, AlarmType, alarm_request::AlarmAction};
        tracing::warn!(
            quota_size_bytes = self.shared.cfg.quota_backend_bytes,
            current_db_size_bytes = size,
            "database space exceeded; raising the NOSPACE alarm"
        );
        let req = InternalRaftRequest {
            alarm: Some(AlarmRequest {
                action: AlarmAction::Activate as i32,
                member_id: self.shared.member_id,
                alarm: AlarmType::Nospace as i32,
            }),
            ..Default::default()
        };
        let _ = self.propose(req).await;
        Err(errors::NO_SPACE)
    }

    pub fn is_leader(&self) -> bool {
        self.shared.is_leader.load(Ordering::SeqCst)
    }

    pub fn member_id(&self) -> u64 {
        self.shared.member_id
    }

    pub fn cluster_id(&self) -> u64 {
        self.shared.cluster_id
    }

    pub fn leader(&self) -> u64 {
        self.shared.leader.load(Ordering::SeqCst)
    }

    pub fn term(&self) -> u64 {
        self.shared.term.load(Ordering::SeqCst)
    }

    pub fn commit_index(&self) -> u64 {
        self.shared.commit.load(Ordering::SeqCst)
    }

    pub fn applied_index(&self) -> u64 {
        *self.applied_rx.borrow()
    }

    pub fn members(&self) -> Vec<Member> {
        self.shared
            .members
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn failure(&self) -> Option<String> {
        self.shared
            .failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The response header etcd puts on every answer.
    pub fn header(&self, revision: i64) -> Option<ResponseHeader> {
        Some(ResponseHeader {
            cluster_id: self.shared.cluster_id,
            member_id: self.shared.member_id,
            revision,
            raft_term: self.term(),
        })
    }

    fn send(&self, m: RaftMsg) -> Result<(), ApiError> {
        self.raft_tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(m)
            .map_err(|_| errors::STOPPED)
    }

    fn timeout(&self) -> std::time::Duration {
        raft_loop::request_timeout(self.shared.cfg.election_timeout)
    }

    /// Proposes `req` through raft and waits for its apply.
    pub async fn propose(&self, mut req: InternalRaftRequest) -> Result<Outcome, ApiError> {
        let id = self.ids.next();
        req.header = Some(RequestHeader {
            id,
            ..req.header.unwrap_or_default()
        });
        let data = req.encode_to_vec();
        if data.len() > self.shared.cfg.max_request_bytes {
            return Err(errors::REQUEST_TOO_LARGE);
        }
        let rx = self.shared.wait.register(id);
        if let Err(e) = self.send(RaftMsg::Propose { id, data }) {
            self.shared.wait.cancel(id);
            return Err(e);
        }
        match tokio::time::timeout(self.timeout(), rx).await {
            Ok(Ok(outcome)) => Ok(outcome),
            Ok(Err(_)) => Err(errors::STOPPED),
            Err(_) => {
                self.shared.wait.cancel(id);
                Err(errors::TIMEOUT)
            }
        }
    }

    /// Waits until this member has applied everything committed when the read started, as
    /// confirmed by the leader (ReadIndex): a read after this is linearizable.
    pub async fn linearizable_read(&self) -> Result<(), ApiError> {
        let (tx, rx) = oneshot::channel();
        self.send(RaftMsg::ReadIndex(tx))?;
        let index = match tokio::time::timeout(self.timeout(), rx).await {
            Ok(Ok(r)) => r?,
            Ok(Err(_)) => return Err(errors::STOPPED),
            Err(_) => return Err(errors::TIMEOUT),
        };
        self.wait_applied(index).await
    }

    async fn wait_applied(&self, index: u64) -> Result<(), ApiError> {
        let mut rx = self.applied_rx.clone();
        let wait = rx.wait_for(|a| *a >= index || self.failure().is_some());
        match tokio::time::timeout(self.timeout(), wait).await {
            Ok(Ok(_)) if self.failure().is_none() => Ok(()),
            Ok(_) => Err(errors::STOPPED),
            Err(_) => Err(errors::TIMEOUT_WAIT_APPLIED_INDEX),
        }
    }

    /// Waits until a leader is known and everything committed at start is applied.
    pub async fn wait_ready(&self) -> Result<(), ApiError> {
        let deadline = tokio::time::Instant::now() + self.timeout() * 4;
        while self.leader() == 0 {
            if let Some(f) = self.failure() {
                tracing::error!(error = %f, "server failed while starting");
                return Err(errors::STOPPED);
            }
            if tokio::time::Instant::now() > deadline {
                return Err(errors::NO_LEADER);
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        self.linearizable_read().await
    }

    /// Stops the raft loop and commits the backend (a clean shutdown).
    pub fn stop(&self) {
        let _ = self.send(RaftMsg::Stop);
        if let Some(h) = self
            .raft_thread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            let _ = h.join();
        }
        if let Err(e) = self.shared.kv.backend().force_commit() {
            tracing::error!(error = %e, "final backend commit failed");
        }
    }
}

/// Publishes this member's name and client URLs through raft (etcd's publish step) and sets
/// the cluster version when none is set yet.
pub async fn publish(server: &EtcdServer) {
    use proto::etcdserverpb::InternalRaftRequest;
    use proto::membershippb::{Attributes, ClusterMemberAttrSetRequest, ClusterVersionSetRequest};
    let cfg = server.cfg();
    let attrs = Attributes {
        name: cfg.name.clone(),
        client_urls: cfg
            .advertise_client_urls
            .iter()
            .map(|u| u.as_str().to_string())
            .collect(),
    };
    let req = InternalRaftRequest {
        cluster_member_attr_set: Some(ClusterMemberAttrSetRequest {
            member_id: server.member_id(),
            member_attributes: Some(attrs.clone()),
        }),
        ..Default::default()
    };
    match server.propose(req).await {
        Ok(_) => tracing::info!(
            local_member_id = %crate::membership::id_hex(server.member_id()),
            local_member_attributes = %format!("{{Name:{} ClientURLs:[{}]}}", attrs.name, attrs.client_urls.join(" ")),
            "published local member to cluster through raft"
        ),
        Err(e) => {
            tracing::warn!(error = %e, "failed to publish local member to cluster through raft")
        }
    }
    let has_version = server
        .kv()
        .backend()
        .get(common::backend::buckets::CLUSTER, b"clusterVersion")
        .ok()
        .flatten()
        .is_some();
    if !has_version && server.leader() == server.member_id() {
        let req = InternalRaftRequest {
            cluster_version_set: Some(ClusterVersionSetRequest {
                ver: crate::version::CLUSTER_VERSION.to_string(),
            }),
            ..Default::default()
        };
        if let Err(e) = server.propose(req).await {
            tracing::warn!(error = %e, "failed to set the cluster version");
        }
    }
}
