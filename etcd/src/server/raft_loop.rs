// The raft loop: one thread that ticks raft, feeds it proposals, read requests and peers'
// messages, and carries out each Ready in the order raft requires (persist to the WAL, store,
// send, apply, advance).
//
// Applying happens on this thread for now; nothing here waits on a client or a peer: results
// go to waiters through channels that never block, messages to the transport's queues.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use prost::Message as _;
use proto::raftpb::{
    ConfChange, ConfChangeType, ConfState, Entry, EntryType, Message, MessageType, Snapshot,
    SnapshotMetadata,
};
use proto::walpb;
use tokio::sync::oneshot;

use super::Shared;
use super::apply::{self, Applied, Effect, MemberChange};
use super::reconfig;
use crate::api::errors;
use crate::membership::id_hex;
use crate::raft::{MemStorage, RawNode, SnapshotStatus, StateRole, Storage};
use crate::transport::{REMOVED_MESSAGE, Report, Transport};
use common::snap::Snapshotter;
use common::wal::Wal;

/// Answers a linearizable read with the index to wait for (or why it cannot be served).
pub type ReadReply = oneshot::Sender<Result<u64, errors::ApiError>>;

/// The ReadIndex round in flight: its context and the reads it serves.
type ReadRound = Option<(u64, Vec<ReadReply>)>;

/// A ReadIndex request unanswered this long is sent again (a message to or from the leader
/// may have been dropped), as etcd's read loop does.
const READ_INDEX_RETRY: Duration = Duration::from_millis(500);

/// Work handed to the raft loop.
pub enum RaftMsg {
    /// Propose a marshaled InternalRaftRequest whose waiter is registered under `id`.
    Propose {
        id: u64,
        data: Vec<u8>,
    },
    /// Propose a membership change whose waiter is registered under `cc.id`.
    ProposeConfChange(ConfChange),
    /// Confirm leadership for a linearizable read; answers with the index to wait for.
    ReadIndex(ReadReply),
    /// A message from a peer.
    Step(Box<Message>),
    /// What the transport learned about a peer.
    Report(Report),
    /// Raft's view of itself (per-peer progress on the leader).
    Status(oneshot::Sender<crate::raft::Status>),
    /// Hand leadership to another voter.
    TransferLeader(u64),
    Stop,
}

pub struct RaftLoop {
    pub node: RawNode<MemStorage>,
    pub wal: Wal,
    pub snapshotter: Snapshotter,
    pub shared: Arc<Shared>,
    pub rx: Receiver<RaftMsg>,
    pub transport: Arc<Transport>,
    pub snapshot_index: u64,
    /// The membership as of the last applied conf change (or the snapshot).
    pub conf_state: ConfState,
    pub applied_index: u64,
}

impl RaftLoop {
    pub fn run(mut self) {
        let tick = self.shared.cfg.heartbeat_interval;
        let mut next_tick = Instant::now() + tick;
        let mut read_seq: u64 = 0;
        // Reads waiting for the next ReadIndex round, and the round in flight.
        let mut waiting_reads: Vec<ReadReply> = Vec::new();
        let mut in_flight: ReadRound = None;
        let mut round_started = Instant::now();
        self.maybe_campaign_alone();
        loop {
            let now = Instant::now();
            let wait = next_tick.saturating_duration_since(now);
            let mut msgs = Vec::new();
            match self.rx.recv_timeout(wait) {
                Ok(m) => msgs.push(m),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            // Take everything queued: proposals arriving during an fsync share the next one.
            while let Ok(m) = self.rx.try_recv() {
                msgs.push(m);
            }
            let mut stop = false;
            // Whether raft follows a removed leader: asked once per batch, not per proposal.
            let leader_gone = self.leader_gone();
            for m in msgs {
                match m {
                    RaftMsg::Propose { id, data } => {
                        if leader_gone || self.node.propose(data).is_err() {
                            self.shared.wait.trigger(
                                id,
                                apply::Outcome {
                                    result: Err(errors::NO_LEADER),
                                    revision: 0,
                                },
                            );
                        }
                    }
                    RaftMsg::ProposeConfChange(cc) => {
                        if leader_gone || self.node.propose_conf_change(&cc).is_err() {
                            self.shared.wait.trigger(
                                cc.id,
                                apply::Outcome {
                                    result: Err(errors::NO_LEADER),
                                    revision: 0,
                                },
                            );
                        }
                    }
                    RaftMsg::ReadIndex(tx) => waiting_reads.push(tx),
                    RaftMsg::Step(m) => {
                        // Messages of a stale term or from a removed member are refused by
                        // raft itself; nothing to do about the error.
                        let _ = self.node.step(*m);
                    }
                    RaftMsg::Report(Report::Unreachable(id)) => self.node.report_unreachable(id),
                    RaftMsg::Report(Report::Snapshot { to, ok }) => self.node.report_snapshot(
                        to,
                        if ok {
                            SnapshotStatus::Finish
                        } else {
                            SnapshotStatus::Failure
                        },
                    ),
                    RaftMsg::Report(Report::Removed) => {
                        self.shared.fail(REMOVED_MESSAGE.to_string());
                        stop = true;
                    }
                    RaftMsg::Status(tx) => {
                        let _ = tx.send(self.node.status());
                    }
                    RaftMsg::TransferLeader(to) => self.node.transfer_leader(to),
                    RaftMsg::Stop => stop = true,
                }
            }
            if stop {
                break;
            }
            if Instant::now() >= next_tick {
                self.node.tick();
                next_tick += tick;
                if next_tick < Instant::now() {
                    next_tick = Instant::now() + tick;
                }
            }
            if let Some((seq, _)) = &in_flight
                && round_started.elapsed() >= READ_INDEX_RETRY
            {
                if self.node.role() != StateRole::Leader && self.node.leader_id() == 0 {
                    if let Some((_, txs)) = in_flight.take() {
                        for tx in txs {
                            let _ = tx.send(Err(errors::NO_LEADER));
                        }
                    }
                } else {
                    let _ = self.node.read_index(seq.to_be_bytes().to_vec());
                    round_started = Instant::now();
                }
            }
            if in_flight.is_none() && !waiting_reads.is_empty() {
                if self.node.role() != StateRole::Leader && self.node.leader_id() == 0 {
                    for tx in waiting_reads.drain(..) {
                        let _ = tx.send(Err(errors::NO_LEADER));
                    }
                } else {
                    read_seq += 1;
                    match self.node.read_index(read_seq.to_be_bytes().to_vec()) {
                        Ok(()) => {
                            in_flight = Some((read_seq, std::mem::take(&mut waiting_reads)));
                            round_started = Instant::now();
                        }
                        Err(_) => {
                            for tx in waiting_reads.drain(..) {
                                let _ = tx.send(Err(errors::NO_LEADER));
                            }
                        }
                    }
                }
            }
            while self.node.has_ready() {
                if let Err(e) = self.handle_ready(&mut in_flight) {
                    tracing::error!(error = %e, "raft loop cannot go on; stopping the server");
                    self.shared.fail(e);
                    return;
                }
            }
        }
        if let Err(e) = self.wal.sync() {
            tracing::error!(error = %e, "final WAL sync failed");
        }
    }

    /// A member alone in its cluster need not wait an election timeout (etcd fast-forwards
    /// its election ticks on boot).
    fn maybe_campaign_alone(&mut self) {
        // The bootstrap entries must be applied first so raft knows it is the only voter.
        while self.node.has_ready() {
            let mut none = None;
            if let Err(e) = self.handle_ready(&mut none) {
                tracing::error!(error = %e, "raft loop cannot start");
                self.shared.fail(e);
                return;
            }
        }
        if self.conf_state.voters == [self.shared.member_id]
            && self.shared.cfg.initial_election_tick_advance
        {
            let _ = self.node.campaign();
        }
    }

    fn handle_ready(&mut self, in_flight: &mut ReadRound) -> Result<(), String> {
        let mut rd = self.node.ready();
        if let Some(hs) = rd.hard_state {
            self.shared.set_term_commit(hs.term, hs.commit);
        }
        if let Some(ss) = rd.soft_state {
            self.shared
                .set_leader(ss.leader_id, ss.raft_state == StateRole::Leader);
        }
        if let Some(snap) = &rd.snapshot {
            self.save_received_snapshot(snap)?;
        }
        let hs = rd.hard_state.unwrap_or_default();
        self.wal
            .save(&hs, &rd.entries)
            .map_err(|e| format!("failed to save to the WAL: {e}"))?;
        if let Some(hs) = rd.hard_state {
            self.node.storage_mut().set_hard_state(hs);
        }
        if let Some(snap) = &rd.snapshot {
            self.node
                .storage_mut()
                .apply_snapshot(snap.clone())
                .map_err(|e| format!("cannot install the leader's snapshot: {e}"))?;
            self.install_snapshot(snap)?;
        }
        self.node.storage_mut().append(&rd.entries);
        // Sent only once persisted: a vote or an append acknowledgement must survive a crash.
        self.send(std::mem::take(&mut rd.messages));
        let mut last_applied = None;
        for e in &rd.committed_entries {
            self.apply_entry(e);
            last_applied = Some(e.index);
        }
        for rs in &rd.read_states {
            if let Some((seq, _)) = in_flight
                && rs.request_ctx == seq.to_be_bytes()
                && let Some((_, txs)) = in_flight.take()
            {
                for tx in txs {
                    let _ = tx.send(Ok(rs.index));
                }
            }
        }
        self.node.advance(rd);
        if let Some(i) = last_applied {
            self.applied_index = i;
            self.shared.set_applied(i);
            if i.saturating_sub(self.snapshot_index) > self.shared.cfg.snapshot_count {
                self.snapshot()?;
            }
        }
        Ok(())
    }

    /// Takes a raft snapshot at the applied index (etcd's --snapshot-count): the backend is
    /// committed first (the snapshot promises the db holds everything up to it), then the .snap
    /// file, the WAL marker, the log compaction and the purge of old files.
    fn snapshot(&mut self) -> Result<(), String> {
        let index = self.applied_index;
        self.shared
            .kv
            .backend()
            .force_commit()
            .map_err(|e| format!("backend commit before a snapshot failed: {e}"))?;
        // The data carries the v2 store membership etcd 3.4 reads at boot, so a real etcd
        // can take over this data dir.
        let v2_image = crate::membership::v2store::membership_image(
            &super::bootstrap::load_members(&self.shared.kv),
        );
        let snap: Snapshot = self
            .node
            .storage_mut()
            .create_snapshot(index, Some(self.conf_state.clone()), v2_image)
            .map_err(|e| format!("creating a snapshot at {index} failed: {e}"))?
            .clone();
        let term = snap.metadata.as_ref().map(|m| m.term).unwrap_or(0);
        self.snapshotter
            .save_snap(&snap)
            .map_err(|e| format!("saving the snapshot at {index} failed: {e}"))?;
        self.wal
            .save_snapshot(&walpb::Snapshot {
                index,
                term,
                conf_state: Some(self.conf_state.clone()),
            })
            .map_err(|e| format!("saving the snapshot marker at {index} failed: {e}"))?;
        self.wal.release_lock_to(index);
        // Entries kept behind the snapshot so a slow follower can catch up without a
        // snapshot transfer (--experimental-snapshot-catchup-entries).
        let keep = self.shared.cfg.experimental_snapshot_catchup_entries;
        if index > keep {
            let _ = self.node.storage_mut().compact(index - keep);
        }
        self.snapshot_index = index;
        // The raft log behind the snapshot was just dropped.
        super::heap::release_soon();
        tracing::info!(snapshot_index = index, term, "saved snapshot");
        let cfg = &self.shared.cfg;
        match common::wal::purge(&cfg.wal_dir(), cfg.max_wals) {
            Ok(removed) => {
                for f in removed {
                    tracing::info!(path = %f.display(), "purged file");
                }
            }
            Err(e) => tracing::warn!(error = %e, "failed to purge WAL files"),
        }
        match self.snapshotter.purge(cfg.max_snapshots) {
            Ok(removed) => {
                for f in removed {
                    tracing::info!(path = %f.display(), "purged file");
                }
            }
            Err(e) => tracing::warn!(error = %e, "failed to purge snap files"),
        }
        Ok(())
    }

    fn apply_entry(&mut self, e: &Entry) {
        match EntryType::try_from(e.r#type) {
            Ok(EntryType::EntryNormal) => {
                let mut effects = Vec::new();
                let started = Instant::now();
                let applied = apply::apply_normal(
                    &self.shared.kv,
                    e,
                    &self.shared.lessor,
                    &self.shared.alarms,
                    &self.shared.auth,
                    &mut effects,
                );
                let took = started.elapsed();
                let expected = self.shared.cfg.experimental_warning_apply_duration;
                if !expected.is_zero() && took > expected {
                    tracing::warn!(
                        took = ?took,
                        "expected-duration" = ?expected,
                        index = e.index,
                        request_bytes = e.data().len(),
                        "apply request took too long"
                    );
                }
                if let Some((id, outcome)) = applied
                    && id != 0
                {
                    self.shared.wait.trigger(id, outcome);
                }
                for eff in effects {
                    match eff {
                        Effect::MemberAttributes {
                            id,
                            name,
                            client_urls,
                        } => {
                            self.shared.update_member(id, |m| {
                                m.name = name.clone();
                                m.client_urls = client_urls.clone();
                            });
                        }
                        Effect::ClusterVersion(v) => {
                            tracing::info!(cluster_version = %v, "set initial cluster version");
                            tracing::info!(cluster_version = %v, "enabled capabilities for version");
                        }
                    }
                }
            }
            Ok(EntryType::EntryConfChange) => {
                let cc = match ConfChange::decode(e.data()) {
                    Ok(cc) => cc,
                    Err(err) => {
                        tracing::error!(index = e.index, error = %err, "skipping an undecodable conf change");
                        return;
                    }
                };
                self.apply_conf_change(e, &cc);
            }
            _ => tracing::warn!(index = e.index, "skipping an entry of an unsupported type"),
        }
    }
}

impl RaftLoop {
    /// The leader raft follows was removed from the cluster: a proposal forwarded to it
    /// would be lost, so it is refused until a new leader is elected.
    fn leader_gone(&self) -> bool {
        let leader = self.node.leader_id();
        leader != 0
            && leader != self.shared.member_id
            && self
                .shared
                .removed
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&leader)
    }

    /// Applies a committed membership change: validated against the members as of now (the
    /// same on every member), then made in raft, the backend, the member list and the
    /// transport; the proposer learns the outcome.
    fn apply_conf_change(&mut self, e: &Entry, cc: &ConfChange) {
        let kv = self.shared.kv.clone();
        if e.index <= kv.consistent_index() {
            self.replay_conf_change(cc);
            return;
        }
        // Validated against the applied membership in the db, the same on every member.
        let members = super::bootstrap::load_members(&kv);
        let removed = super::bootstrap::load_removed(&kv);
        let verdict = reconfig::validate(&members, &removed, cc);
        let change = verdict.clone().unwrap_or(MemberChange::Nothing);
        if verdict.is_ok() {
            let cs = self.node.apply_conf_change(cc);
            tracing::info!(voters = ?cs.voters, learners = ?cs.learners, "applied a configuration change");
            self.conf_state = cs;
        } else if let Err(err) = &verdict {
            tracing::warn!(node_id = %id_hex(cc.node_id), error = %err.message, "refused a configuration change");
        }
        apply::apply_member_change(&kv, e, &change);
        let mut removed_self = false;
        match &change {
            MemberChange::Put(m) => {
                tracing::info!(member = %id_hex(m.id), peer_urls = ?m.peer_urls, is_learner = m.is_learner, "cluster member added or changed");
                self.transport.set_peer(m.id, m.peer_urls.clone());
                self.shared.put_member(m.clone());
            }
            MemberChange::Removed(id) => {
                tracing::info!(removed_member_id = %id_hex(*id), "removed member");
                self.transport.remove_peer(*id);
                self.shared.remove_member(*id);
                removed_self = *id == self.shared.member_id;
            }
            MemberChange::Nothing => {}
        }
        if cc.id != 0 {
            self.shared.wait.trigger(
                cc.id,
                apply::Outcome {
                    result: verdict.map(|_| Applied::Members(self.shared.members_now())),
                    revision: kv.current_rev(),
                },
            );
        }
        if removed_self {
            tracing::warn!("{REMOVED_MESSAGE}");
            self.shared.fail(REMOVED_MESSAGE.to_string());
        }
    }

    /// A conf change replayed after a restart whose effect the db already holds. Whether it
    /// was valid then is not known now, but the membership it led to is (the `members`
    /// bucket), so raft is given exactly the changes that lead there.
    fn replay_conf_change(&mut self, cc: &ConfChange) {
        let members = super::bootstrap::load_members(&self.shared.kv);
        let final_of = |id: u64| members.iter().find(|m| m.id == id);
        let apply = match ConfChangeType::try_from(cc.r#type) {
            Ok(ConfChangeType::ConfChangeAddNode) => {
                final_of(cc.node_id).is_some_and(|m| !m.is_learner)
            }
            Ok(ConfChangeType::ConfChangeAddLearnerNode) => final_of(cc.node_id).is_some(),
            Ok(ConfChangeType::ConfChangeRemoveNode) => final_of(cc.node_id).is_none(),
            _ => false,
        };
        if apply {
            self.conf_state = self.node.apply_conf_change(cc);
        }
        if cc.r#type == ConfChangeType::ConfChangeRemoveNode as i32
            && cc.node_id == self.shared.member_id
            && apply
        {
            tracing::warn!("{REMOVED_MESSAGE}");
            self.shared.fail(REMOVED_MESSAGE.to_string());
        }
    }

    /// Hands messages to the transport; a snapshot message gets this member's db image.
    fn send(&mut self, msgs: Vec<Message>) {
        if msgs.is_empty() {
            return;
        }
        let mut plain = Vec::with_capacity(msgs.len());
        for m in msgs {
            if m.r#type == MessageType::MsgSnap as i32 {
                self.send_snapshot(m);
            } else {
                plain.push(m);
            }
        }
        self.transport.send(plain);
    }

    /// etcd's merged snapshot: raft's snapshot message re-stamped with the applied index (and
    /// its term and membership), sent with the backend image at exactly that index.
    fn send_snapshot(&mut self, mut m: Message) {
        let to = m.to;
        let backend = self.shared.kv.backend();
        if let Err(e) = backend.force_commit() {
            tracing::warn!(error = %e, "cannot commit the backend for a snapshot; will retry");
            self.node.report_snapshot(to, SnapshotStatus::Failure);
            return;
        }
        let db = backend.db();
        let tx = db.begin_read();
        let index = self.applied_index;
        let term = match self.node.storage().term(index) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(index, error = %e, "no term for the applied index; snapshot not sent");
                self.node.report_snapshot(to, SnapshotStatus::Failure);
                return;
            }
        };
        // The v2 store membership as of the image, not of raft's older snapshot.
        let data = crate::membership::v2store::membership_image(&super::bootstrap::load_members(
            &self.shared.kv,
        ));
        m.snapshot = Some(Snapshot {
            data: Some(data),
            metadata: Some(SnapshotMetadata {
                conf_state: Some(self.conf_state.clone()),
                index,
                term,
            }),
        });
        self.transport.send_snapshot(m, db, tx);
    }

    /// A follower's first step with the leader's snapshot: its db image (received before the
    /// message) must be there; then the .snap file and the WAL marker make it durable.
    fn save_received_snapshot(&mut self, snap: &Snapshot) -> Result<(), String> {
        let md = snap.metadata.clone().unwrap_or_default();
        self.snapshotter
            .db_file_path_existing(md.index)
            .map_err(|e| format!("the leader's snapshot at {} has no db image: {e}", md.index))?;
        self.snapshotter
            .save_snap(snap)
            .map_err(|e| format!("saving the leader's snapshot at {} failed: {e}", md.index))?;
        self.wal
            .save_snapshot(&walpb::Snapshot {
                index: md.index,
                term: md.term,
                conf_state: md.conf_state.clone(),
            })
            .map_err(|e| format!("saving the snapshot marker at {} failed: {e}", md.index))?;
        Ok(())
    }

    /// Swaps the leader's db image in for ours and rebuilds everything derived from the db.
    fn install_snapshot(&mut self, snap: &Snapshot) -> Result<(), String> {
        let md = snap.metadata.clone().unwrap_or_default();
        let cfg = &self.shared.cfg;
        super::bootstrap::install_snapshot_db(&self.snapshotter, md.index, &cfg.backend_path())
            .map_err(|e| e.to_string())?;
        let db = common::backend::Db::open(cfg.backend_path())
            .map_err(|e| format!("cannot open the db received from the leader: {e}"))?;
        self.shared
            .kv
            .restore(db)
            .map_err(|e| format!("cannot load the db received from the leader: {e}"))?;
        let kv = &self.shared.kv;
        self.shared
            .lessor
            .replace_with(super::bootstrap::leases_of(cfg, kv));
        self.shared.alarms.reload(kv);
        self.shared.auth.reload(kv);
        let members = super::bootstrap::load_members(kv);
        let removed = super::bootstrap::load_removed(kv);
        for m in &members {
            self.transport.set_peer(m.id, m.peer_urls.clone());
        }
        for id in &removed {
            self.transport.remove_peer(*id);
        }
        self.shared.set_members(members, removed);
        self.conf_state = md.conf_state.unwrap_or_default();
        self.snapshot_index = md.index;
        self.applied_index = md.index;
        self.shared.set_applied(md.index);
        tracing::info!(
            snapshot_index = md.index,
            revision = kv.current_rev(),
            "applied the leader's snapshot to the backend"
        );
        Ok(())
    }
}

/// How long a client waits for its proposal to be applied before `request timed out`.
pub fn request_timeout(election: Duration) -> Duration {
    Duration::from_secs(5) + 2 * election
}
