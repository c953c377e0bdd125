// The etcd server: boots a member from its data dir, runs the raft loop that persists and
// applies entries, and offers proposals and linearizable reads to the API layer.

pub mod alarms;
pub mod apply;
pub mod apply_loop;
pub mod apply_weight;
pub mod bootstrap;
pub mod cluster_version;
pub mod compactor;
pub mod corrupt;
pub mod downgrade;
pub mod heap;
pub mod inbox;
mod peer_host;
pub mod raft_loop;
pub mod raft_thread;
pub mod reconfig;
pub mod v2_membership;
pub mod wait;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use prost::Message;
use proto::etcdserverpb::{InternalRaftRequest, RequestHeader, ResponseHeader};
use tokio::sync::{oneshot, watch};

use crate::config::Config;
use crate::error::{self, Error};
use crate::lease::Lessor;
use crate::membership::Member;
use crate::mvcc::KvStore;
use crate::transport::{Local, Transport};
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
    removed: RwLock<BTreeSet<u64>>,
    leader: AtomicU64,
    is_leader: AtomicBool,
    term: AtomicU64,
    commit: AtomicU64,
    applied_tx: watch::Sender<u64>,
    /// The term of the last applied entry (a snapshot at the applied index carries it).
    applied_term: AtomicU64,
    /// The membership as of the applied index.
    conf_state: Mutex<proto::raftpb::ConfState>,
    failed: Mutex<Option<String>>,
    /// Woken when `failed` is set. Its own signal: waiting on the applied index instead would
    /// wake the waiter (main's thread) on every applied entry.
    failed_notify: tokio::sync::Notify,
    /// Woken when a leader's empty entry is applied, so the cluster version is decided at
    /// once after an election rather than at the next periodic look (etcd does the same).
    pub version_check: tokio::sync::Notify,
}

impl Shared {
    /// The cluster version recorded in the backend ("" before it is set).
    fn cluster_version(&self) -> String {
        self.kv
            .backend()
            .get(common::backend::buckets::CLUSTER, b"clusterVersion")
            .ok()
            .flatten()
            .map(|v| String::from_utf8_lossy(&v).into_owned())
            .unwrap_or_default()
    }

    fn set_leader(&self, leader: u64, is_leader: bool) {
        let old = self.leader.swap(leader, Ordering::SeqCst);
        self.is_leader.store(is_leader, Ordering::SeqCst);
        if old != leader && leader != 0 {
            crate::metrics::METRICS.leader_changes.inc();
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

    /// Records that the entry at (`index`, `term`) is applied: reads waiting for it go on.
    fn set_applied_entry(&self, index: u64, term: u64) {
        self.applied_term.store(term, Ordering::SeqCst);
        self.applied_tx.send_replace(index);
    }

    /// The index and term of the last applied entry.
    fn applied_entry(&self) -> (u64, u64) {
        let index = *self.applied_tx.borrow();
        (index, self.applied_term.load(Ordering::SeqCst))
    }

    fn conf_state(&self) -> proto::raftpb::ConfState {
        self.conf_state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn set_conf_state(&self, cs: proto::raftpb::ConfState) {
        *self.conf_state.lock().unwrap_or_else(|e| e.into_inner()) = cs;
    }

    fn failure(&self) -> Option<String> {
        self.failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn fail(&self, why: String) {
        *self.failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
        self.failed_notify.notify_waiters();
        // Wake readers waiting on the applied index so they see the failure.
        self.applied_tx.send_modify(|_| {});
    }

    fn members_now(&self) -> Vec<Member> {
        self.members
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Adds a member or replaces its record.
    fn put_member(&self, m: Member) {
        let mut ms = self.members.write().unwrap_or_else(|e| e.into_inner());
        match ms.iter_mut().find(|x| x.id == m.id) {
            Some(x) => *x = m,
            None => ms.push(m),
        }
    }

    fn remove_member(&self, id: u64) {
        self.members
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|m| m.id != id);
        self.removed
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id);
    }

    fn set_members(&self, members: Vec<Member>, removed: BTreeSet<u64>) {
        *self.members.write().unwrap_or_else(|e| e.into_inner()) = members;
        *self.removed.write().unwrap_or_else(|e| e.into_inner()) = removed;
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
    raft_tx: Mutex<tokio::sync::mpsc::UnboundedSender<RaftMsg>>,
    inbox: Arc<inbox::Inbox>,
    applied_rx: watch::Receiver<u64>,
    ids: IdGen,
    /// Says when the raft loop has ended (dropped unsent then).
    raft_done: Mutex<Option<std::sync::mpsc::Receiver<()>>>,
    /// Says when the apply task has ended (dropped unsent if it panicked).
    apply_done: Mutex<Option<std::sync::mpsc::Receiver<()>>>,
    transport: Arc<Transport>,
}

impl EtcdServer {
    /// Boots the member in `cfg.data_dir` (a new member of a running cluster first asks its
    /// peers for the cluster) and starts its raft loop and peer connections, both on
    /// `raft_thread` (raft_thread.rs: outside the client runtime, so a client load that keeps
    /// it busy cannot hold back raft messages).
    pub async fn start(
        cfg: Config,
        raft_thread: &raft_thread::RaftThread,
    ) -> Result<Arc<EtcdServer>, bootstrap::BootError> {
        let peer_rt = raft_thread.handle().clone();
        // A bad --auth-token stops the start before the data dir is touched.
        let tokens =
            crate::auth::token::TokenProvider::from_flag(&cfg.auth_token, cfg.auth_token_ttl)
                .map_err(bootstrap::BootError::Config)?;
        let joined = if bootstrap::needs_join(&cfg) {
            Some(bootstrap::fetch_cluster(&cfg).await?)
        } else {
            None
        };
        let booted = bootstrap::boot(&cfg, joined)?;
        let auth = crate::auth::AuthStore::open(&booted.kv, tokens, cfg.bcrypt_cost);
        let applied_index = booted.kv.consistent_index();
        let applied_term = {
            use crate::raft::Storage;
            booted
                .node
                .storage()
                .term(applied_index)
                .unwrap_or(booted.kv.term())
        };
        let (applied_tx, applied_rx) = watch::channel(applied_index);
        let shared = Arc::new(Shared {
            member_id: booted.member_id,
            cluster_id: booted.cluster_id,
            kv: booted.kv.clone(),
            lessor: booted.lessor.clone(),
            alarms: alarms::Alarms::load(&booted.kv),
            auth,
            wait: Wait::default(),
            members: RwLock::new(booted.members.clone()),
            removed: RwLock::new(booted.removed.clone()),
            leader: AtomicU64::new(0),
            is_leader: AtomicBool::new(false),
            term: AtomicU64::new(0),
            commit: AtomicU64::new(0),
            applied_tx,
            applied_term: AtomicU64::new(applied_term),
            conf_state: Mutex::new(booted.conf_state),
            failed: Mutex::new(None),
            failed_notify: tokio::sync::Notify::new(),
            version_check: tokio::sync::Notify::new(),
            cfg,
        });
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let reports = tx.clone();
        let steps = tx.clone();
        let inbox = Arc::new(inbox::Inbox::default());
        let step_inbox = inbox.clone();
        let transport = Arc::new(Transport::new(
            Local {
                member_id: shared.member_id,
                cluster_id: shared.cluster_id,
                peer_urls: shared
                    .cfg
                    .initial_advertise_peer_urls
                    .iter()
                    .map(|u| u.as_str().to_string())
                    .collect(),
                dial_timeout: std::time::Duration::from_secs(1),
                tls: crate::transport::peer_tls::client_config(&shared.cfg)
                    .map_err(bootstrap::BootError::Config)?,
            },
            peer_rt,
            Arc::new(move |r| {
                let _ = reports.send(RaftMsg::Report(r));
            }),
            Arc::new(move |m: proto::raftpb::Message| {
                let _ = offer_step(&step_inbox, m, |msg| {
                    steps.send(msg).map_err(|_| error::STOPPED)
                });
            }),
        ));
        for m in &booted.members {
            transport.set_peer(m.id, m.peer_urls.clone());
        }
        let (apply_tx, apply_rx) = tokio::sync::mpsc::channel(apply_loop::APPLY_QUEUE);
        let (purge_tx, purge_rx) = std::sync::mpsc::sync_channel(1);
        let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name.into())
                .spawn(f)
                .map_err(|e| bootstrap::BootError::Config(format!("cannot start the {name}: {e}")))
        };
        let al = apply_loop::ApplyLoop {
            shared: shared.clone(),
            rx: apply_rx,
            raft_tx: tx.clone(),
            transport: transport.clone(),
            snapshotter: common::snap::Snapshotter::new(shared.cfg.snap_dir()),
            snapshot_index: booted.snapshot_index,
            cluster_version: shared.cluster_version(),
        };
        let (apply_done_tx, apply_done_rx) = std::sync::mpsc::channel();
        tokio::spawn(async move {
            al.run().await;
            let _ = apply_done_tx.send(());
        });
        let purge_cfg = shared.cfg.clone();
        spawn(
            "purge",
            Box::new(move || {
                while purge_rx.recv().is_ok() {
                    purge_files(&purge_cfg);
                }
            }),
        )?;
        let (node, wal, snapshotter) = (booted.node, booted.wal, booted.snapshotter);
        let (loop_shared, loop_transport) = (shared.clone(), transport.clone());
        let snapshot_index = booted.snapshot_index;
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let started = raft_thread.run(Box::new(move |rt| {
            RaftLoop {
                node,
                wal,
                snapshotter,
                shared: loop_shared,
                rx,
                rt,
                transport: loop_transport,
                apply_tx,
                purge_tx,
                snapshot_index,
            }
            .run();
            let _ = done_tx.send(());
        }));
        if !started {
            return Err(bootstrap::BootError::Config(
                "cannot start the raft loop: its thread is gone".into(),
            ));
        }
        Ok(Arc::new(EtcdServer {
            ids: IdGen::new(shared.member_id),
            shared,
            raft_tx: Mutex::new(tx),
            inbox,
            applied_rx,
            raft_done: Mutex::new(Some(done_rx)),
            apply_done: Mutex::new(Some(apply_done_rx)),
            transport,
        }))
    }

    /// Hands a peer's raft message to the raft loop.
    pub fn step(&self, m: proto::raftpb::Message) -> Result<(), Error> {
        offer_step(&self.inbox, m, |msg| self.send(msg))
    }

    /// Where the db image of the leader's snapshot at `index` is received.
    pub fn snap_db_path(&self, index: u64) -> std::path::PathBuf {
        common::snap::Snapshotter::new(self.shared.cfg.snap_dir()).db_file_path(index)
    }

    pub fn is_removed(&self, id: u64) -> bool {
        self.shared
            .removed
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&id)
    }

    pub fn removed_members(&self) -> Vec<u64> {
        self.shared
            .removed
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .copied()
            .collect()
    }

    /// The cluster version recorded in the backend ("" before it is set).
    pub fn cluster_version(&self) -> String {
        self.shared.cluster_version()
    }

    pub fn transport(&self) -> &Arc<Transport> {
        &self.transport
    }

    /// Raft's view of itself (the leader's has every peer's progress).
    pub async fn raft_status(&self) -> Result<crate::raft::Status, Error> {
        let (tx, rx) = oneshot::channel();
        self.send(RaftMsg::Status(tx))?;
        rx.await.map_err(|_| error::STOPPED)
    }

    /// What etcd refuses before reading: a learner serves only serializable reads (and
    /// Status, MemberList).
    pub fn guard(&self, serializable_read: bool) -> Result<(), Error> {
        if !serializable_read && self.is_learner() {
            return Err(error::NOT_SUPPORTED_FOR_LEARNER);
        }
        Ok(())
    }

    /// What etcd refuses before a change: what `guard` refuses, and, with the CORRUPT alarm
    /// raised, every KV and lease change (reads, watches and renewals go on, as in etcd 3.4).
    pub fn guard_write(&self) -> Result<(), Error> {
        self.guard(false)?;
        if self
            .shared
            .alarms
            .has(proto::etcdserverpb::AlarmType::Corrupt)
        {
            return Err(error::CORRUPT);
        }
        Ok(())
    }

    /// Whether this member is a learner now.
    pub fn is_learner(&self) -> bool {
        // Asked on every request (guard): read in place, no copy of the member list.
        self.shared
            .members
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|m| m.id == self.shared.member_id && m.is_learner)
    }

    /// The current leader's id and peer URLs, for a request only the leader can answer.
    fn leader_urls(&self) -> Result<(u64, Vec<String>), Error> {
        let leader = self.leader();
        if leader == 0 {
            return Err(error::NO_LEADER);
        }
        let urls = self
            .members()
            .into_iter()
            .find(|m| m.id == leader)
            .map(|m| m.peer_urls)
            .ok_or(error::NO_LEADER)?;
        Ok((leader, urls))
    }

    /// Renews a lease on the leader, which owns expiry (a follower forwards the renewal).
    pub async fn lease_renew(
        &self,
        id: i64,
    ) -> Result<proto::etcdserverpb::LeaseKeepAliveResponse, Error> {
        if self.is_leader() {
            // An unknown (expired or revoked) lease answers TTL 0, as etcd's.
            let ttl = self.shared.lessor.renew(id).unwrap_or(0);
            return Ok(proto::etcdserverpb::LeaseKeepAliveResponse {
                header: self.header(self.shared.kv.current_rev()),
                id,
                ttl,
            });
        }
        let (leader, urls) = self.leader_urls()?;
        let _ = leader;
        let mut r =
            crate::transport::forward::lease_renew(self.transport.http(), &urls, id).await?;
        r.header = self.header(self.shared.kv.current_rev());
        Ok(r)
    }

    /// A lease's remaining TTL, as the leader (which owns expiry) knows it.
    pub async fn lease_time_to_live(
        &self,
        req: proto::etcdserverpb::LeaseTimeToLiveRequest,
    ) -> Result<proto::etcdserverpb::LeaseTimeToLiveResponse, Error> {
        use proto::etcdserverpb::LeaseTimeToLiveResponse;
        if self.is_leader() || self.leader() == 0 {
            let header = self.header(self.shared.kv.current_rev());
            // An unknown lease answers TTL -1 (etcdctl prints "already expired").
            return Ok(match self.shared.lessor.time_to_live(req.id) {
                Some((left, granted, keys)) => LeaseTimeToLiveResponse {
                    header,
                    id: req.id,
                    ttl: left,
                    granted_ttl: granted,
                    keys: if req.keys { keys } else { Vec::new() },
                },
                None => LeaseTimeToLiveResponse {
                    header,
                    id: req.id,
                    ttl: -1,
                    granted_ttl: 0,
                    keys: Vec::new(),
                },
            });
        }
        let (leader, urls) = self.leader_urls()?;
        let _ = leader;
        let mut r =
            crate::transport::forward::lease_time_to_live(self.transport.http(), &urls, req)
                .await?;
        r.header = self.header(self.shared.kv.current_rev());
        Ok(r)
    }

    /// Proposes a membership change and waits for its apply: the members after it.
    pub async fn propose_conf_change(
        &self,
        mut cc: proto::raftpb::ConfChange,
    ) -> Result<Vec<Member>, Error> {
        let id = self.ids.next();
        cc.id = id;
        let rx = self.shared.wait.register(id);
        if let Err(e) = self.send(RaftMsg::ProposeConfChange(cc)) {
            self.shared.wait.cancel(id);
            return Err(e);
        }
        match tokio::time::timeout(self.timeout(), rx).await {
            Ok(Ok(outcome)) => match outcome.result? {
                apply::Applied::Members(ms) => Ok(ms),
                _ => Err(error::CORRUPT),
            },
            Ok(Err(_)) => Err(error::STOPPED),
            Err(_) => {
                self.shared.wait.cancel(id);
                Err(error::TIMEOUT)
            }
        }
    }

    /// etcd's --strict-reconfig-check for removals: a quorum of started and connected
    /// voters must remain.
    pub fn may_remove_member(&self, id: u64) -> Result<(), Error> {
        if !self.shared.cfg.strict_reconfig_check {
            return Ok(());
        }
        let members = self.members();
        if members.iter().any(|m| m.id == id && m.is_learner) {
            return Ok(());
        }
        if !reconfig::ready_to_remove_voter(&members, id) {
            return Err(error::MEMBER_NOT_ENOUGH_STARTED);
        }
        // A member that is down is no part of the active quorum: removing it is safe.
        if id != self.member_id() && !self.transport.is_connected(id) {
            return Ok(());
        }
        let voters: Vec<&Member> = members.iter().filter(|m| !m.is_learner).collect();
        let active = voters
            .iter()
            .filter(|m| m.id == self.member_id() || self.transport.is_connected(m.id))
            .count();
        if active.saturating_sub(1) < 1 + (voters.len() - 1) / 2 {
            return Err(error::UNHEALTHY);
        }
        Ok(())
    }

    /// etcd's --strict-reconfig-check for adding a voter.
    pub fn may_add_member(&self, learner: bool) -> Result<(), Error> {
        if !self.shared.cfg.strict_reconfig_check || learner {
            return Ok(());
        }
        let members = self.members();
        if !reconfig::ready_to_add_voter(&members) {
            return Err(error::MEMBER_NOT_ENOUGH_STARTED);
        }
        let all_connected = members
            .iter()
            .filter(|m| !m.is_learner && m.id != self.member_id())
            .all(|m| self.transport.is_connected(m.id));
        if !all_connected {
            return Err(error::UNHEALTHY);
        }
        Ok(())
    }

    /// Promotes learner `id` to voter; only the leader knows whether it has caught up, so a
    /// follower forwards the request.
    pub async fn promote_member(&self, id: u64) -> Result<Vec<proto::etcdserverpb::Member>, Error> {
        if !self.is_leader() {
            let (leader, urls) = self.leader_urls()?;
            let _ = leader;
            let ms = crate::transport::forward::promote(self.transport.http(), &urls, id).await?;
            return Ok(ms.iter().map(Member::to_pb).collect());
        }
        let members = self.members();
        match members.iter().find(|m| m.id == id) {
            None => return Err(error::MEMBER_NOT_FOUND),
            Some(m) if !m.is_learner => return Err(error::MEMBER_NOT_LEARNER),
            Some(_) => {}
        }
        if self.shared.cfg.strict_reconfig_check && !reconfig::ready_to_promote(&members) {
            return Err(error::MEMBER_NOT_ENOUGH_STARTED);
        }
        // etcd's readiness: the learner's log within 90% of the leader's.
        let status = self.raft_status().await?;
        let leader_match = status
            .progress
            .get(&self.member_id())
            .map(|p| p.matched)
            .unwrap_or(0);
        let learner_match = status.progress.get(&id).map(|p| p.matched).unwrap_or(0);
        if (learner_match as f64) < (leader_match as f64) * 0.9 {
            return Err(error::LEARNER_NOT_READY);
        }
        let cc = proto::raftpb::ConfChange {
            r#type: proto::raftpb::ConfChangeType::ConfChangeAddNode as i32,
            node_id: id,
            context: Some(reconfig::promote_context(id)),
            ..Default::default()
        };
        let ms = self.propose_conf_change(cc).await?;
        Ok(ms.iter().map(Member::to_pb).collect())
    }

    /// Asks raft to hand leadership to `to` and waits until it has (or the transfer failed).
    pub async fn move_leader(&self, to: u64) -> Result<(), Error> {
        self.send(RaftMsg::TransferLeader(to))?;
        let deadline = tokio::time::Instant::now()
            + self.shared.cfg.election_timeout * 2
            + std::time::Duration::from_secs(1);
        while tokio::time::Instant::now() < deadline {
            if self.leader() == to {
                return Ok(());
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        Err(error::TIMEOUT_LEADER_TRANSFER)
    }

    /// On a graceful stop, a leader hands its leadership to the most up-to-date active voter
    /// first, as etcd does, so the cluster does not wait an election timeout without one.
    pub async fn transfer_leadership_on_stop(&self) {
        if !self.is_leader() {
            return;
        }
        let Ok(st) = self.raft_status().await else {
            return;
        };
        let me = self.shared.member_id;
        let Some((&to, _)) = st
            .progress
            .iter()
            .filter(|(id, p)| **id != me && !p.is_learner && p.recent_active)
            .max_by_key(|(_, p)| p.matched)
        else {
            return;
        };
        tracing::info!(
            local_member_id = %crate::membership::id_hex(me),
            current_leader_member_id = %crate::membership::id_hex(me),
            transferee_member_id = %crate::membership::id_hex(to),
            "leadership transfer starting"
        );
        let started = std::time::Instant::now();
        match self.move_leader(to).await {
            Ok(()) => tracing::info!(
                transferee_member_id = %crate::membership::id_hex(to),
                took = ?started.elapsed(),
                "leadership transfer finished"
            ),
            Err(e) => tracing::warn!(error = %e, "leadership transfer failed"),
        }
    }

    /// Resolves when the server fails for good (e.g. it was removed from the cluster).
    pub async fn wait_failed(&self) -> String {
        loop {
            let notified = self.shared.failed_notify.notified();
            tokio::pin!(notified);
            // Registered before the check, so a failure set in between still wakes it.
            notified.as_mut().enable();
            if let Some(f) = self.failure() {
                return f;
            }
            notified.await;
        }
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
    pub async fn check_quota(&self, request_bytes: usize) -> Result<(), Error> {
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
        Err(error::NO_SPACE)
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
        self.shared.failure()
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

    fn send(&self, m: RaftMsg) -> Result<(), Error> {
        self.raft_tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(m)
            .map_err(|_| error::STOPPED)
    }

    fn timeout(&self) -> std::time::Duration {
        raft_loop::request_timeout(self.shared.cfg.election_timeout)
    }

    /// Proposes `req` through raft and waits for its apply. The request is encoded before
    /// the returned future exists, so no caller's future carries it (it is over 1 KiB, and a
    /// request's futures are moved into their boxes and tasks whole).
    pub fn propose(
        &self,
        mut req: InternalRaftRequest,
    ) -> impl Future<Output = Result<Outcome, Error>> + Send + '_ {
        let id = self.ids.next();
        req.header = Some(RequestHeader {
            id,
            ..req.header.unwrap_or_default()
        });
        let data = req.encode_to_vec();
        async move {
            let m = &crate::metrics::METRICS;
            m.proposals_pending.inc();
            let r = self.propose_data(id, data).await;
            m.proposals_pending.dec();
            // etcd counts the proposals that timed out or met a stopping server.
            if let Err(e) = &r
                && (e.message == error::TIMEOUT.message || e.message == error::STOPPED.message)
            {
                m.proposals_failed.inc();
            }
            r
        }
    }

    /// Proposes one of etcd's v2 requests (member attributes, cluster version: what members
    /// of a cluster below 3.5 apply) and waits for its apply.
    pub async fn propose_v2(
        &self,
        mut req: proto::etcdserverpb::Request,
    ) -> Result<Outcome, Error> {
        let id = self.ids.next();
        req.id = id;
        self.propose_data(id, req.encode_to_vec()).await
    }

    async fn propose_data(&self, id: u64, data: Vec<u8>) -> Result<Outcome, Error> {
        if data.len() > self.shared.cfg.max_request_bytes {
            return Err(error::REQUEST_TOO_LARGE);
        }
        // The apply thread is far behind what raft commits: refuse more work until it
        // catches up, as etcd does.
        if self.commit_index() > self.applied_index() + apply_loop::MAX_APPLY_GAP {
            return Err(error::TOO_MANY_REQUESTS);
        }
        let deadline = tokio::time::Instant::now() + self.timeout();
        let slot = self.request_slot(deadline).await?;
        let rx = self.shared.wait.register(id);
        if let Err(e) = self.send(RaftMsg::Propose { id, data, slot }) {
            self.shared.wait.cancel(id);
            return Err(e);
        }
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(outcome)) => Ok(outcome),
            Ok(Err(_)) => Err(error::STOPPED),
            Err(_) => {
                self.shared.wait.cancel(id);
                Err(error::TIMEOUT)
            }
        }
    }

    /// A place in the raft loop's inbox for a proposal or read, waited for until `deadline`.
    async fn request_slot(&self, deadline: tokio::time::Instant) -> Result<inbox::Slot, Error> {
        match tokio::time::timeout_at(deadline, self.inbox.request_slot()).await {
            Ok(Some(slot)) => Ok(slot),
            Ok(None) => Err(error::STOPPED),
            Err(_) => Err(error::TIMEOUT),
        }
    }

    /// Waits until this member has applied everything committed when the read started, as
    /// confirmed by the leader (ReadIndex): a read after this is linearizable.
    pub async fn linearizable_read(&self) -> Result<(), Error> {
        let deadline = tokio::time::Instant::now() + self.timeout();
        let slot = self.request_slot(deadline).await?;
        let (tx, rx) = oneshot::channel();
        self.send(RaftMsg::ReadIndex(tx, slot))?;
        let index = match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(r)) => r?,
            Ok(Err(_)) => return Err(error::STOPPED),
            Err(_) => return Err(error::TIMEOUT),
        };
        self.wait_applied(index).await
    }

    async fn wait_applied(&self, index: u64) -> Result<(), Error> {
        let mut rx = self.applied_rx.clone();
        let wait = rx.wait_for(|a| *a >= index || self.failure().is_some());
        match tokio::time::timeout(self.timeout(), wait).await {
            Ok(Ok(_)) if self.failure().is_none() => Ok(()),
            Ok(_) => Err(error::STOPPED),
            Err(_) => Err(error::TIMEOUT_WAIT_APPLIED_INDEX),
        }
    }

    /// Waits until a leader is known and everything committed at start is applied, or ends
    /// with the member's failure (a removal among them) when it fails first: the failure, not
    /// a stand-in error, is how a member that never became ready ends.
    pub async fn wait_ready(&self) -> Result<(), String> {
        tokio::select! {
            // A failure wins when both are ready in one poll.
            biased;
            f = self.wait_failed() => Err(f),
            () = self.first_read() => Ok(()),
        }
    }

    /// Tries a linearizable read until one is served.
    async fn first_read(&self) {
        // A member of a cluster waits for its peers as long as it takes, as etcd's does.
        let mut next_log = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            if self.leader() != 0 {
                match self.linearizable_read().await {
                    Ok(()) => return,
                    Err(e) => tracing::debug!(error = %e, "first read not served yet"),
                }
            } else {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            if tokio::time::Instant::now() > next_log {
                tracing::info!("waiting for a leader before serving clients");
                next_log += std::time::Duration::from_secs(5);
            }
        }
    }

    /// Stops the raft thread and the apply task and commits the backend (a clean shutdown).
    pub fn stop(&self) {
        let _ = self.send(RaftMsg::Stop);
        // The raft loop drops the apply queue when it ends; the apply task then finishes
        // what was queued and ends too.
        fn take<T>(m: &Mutex<Option<T>>) -> Option<T> {
            m.lock().unwrap_or_else(|e| e.into_inner()).take()
        }
        if let Some(done) = take(&self.raft_done) {
            let _ = done.recv();
        }
        if let Some(done) = take(&self.apply_done) {
            let _ = done.recv();
        }
        if let Err(e) = self.shared.kv.backend().force_commit() {
            tracing::error!(error = %e, "final backend commit failed");
        }
    }
}

/// Hands a peer's raft message to the raft loop if the inbox has room; otherwise it is dropped
/// (with etcd's warning, from `peer_slot`) and raft sends it again.
fn offer_step(
    inbox: &inbox::Inbox,
    m: proto::raftpb::Message,
    send: impl FnOnce(RaftMsg) -> Result<(), Error>,
) -> Result<(), Error> {
    match inbox.peer_slot(m.from) {
        Some(slot) => send(RaftMsg::Step(Box::new(m), slot)),
        None => Ok(()),
    }
}

/// Removes WAL segments beyond --max-wals and .snap files beyond --max-snapshots (oldest
/// first; a WAL segment still locked by the WAL stays).
fn purge_files(cfg: &Config) {
    let log = |what: &str, r: Result<Vec<std::path::PathBuf>, String>| match r {
        Ok(removed) => {
            for f in removed {
                tracing::info!(path = %f.display(), "purged file");
            }
        }
        Err(e) => tracing::warn!(error = %e, "failed to purge {what} files"),
    };
    log(
        "WAL",
        common::wal::purge(&cfg.wal_dir(), cfg.max_wals).map_err(|e| e.to_string()),
    );
    log(
        "snap",
        common::snap::Snapshotter::new(cfg.snap_dir())
            .purge(cfg.max_snapshots)
            .map_err(|e| e.to_string()),
    );
}
