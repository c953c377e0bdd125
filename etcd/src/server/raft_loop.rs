// The raft loop: one thread that ticks raft, feeds it proposals and read requests, and carries
// out each Ready in the order raft requires (persist to the WAL, store, send, apply, advance).
//
// Applying happens on this thread for now; nothing here waits on a client: results go to the
// waiters through channels that never block.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use prost::Message as _;
use proto::raftpb::{ConfChange, ConfChangeType, ConfState, Entry, EntryType, Snapshot};
use proto::walpb;
use tokio::sync::oneshot;

use super::Shared;
use super::apply::{self, Effect};
use crate::api::errors;
use crate::membership::Member;
use crate::raft::{MemStorage, RawNode, StateRole};
use common::snap::Snapshotter;
use common::wal::Wal;

/// Answers a linearizable read with the index to wait for (or why it cannot be served).
pub type ReadReply = oneshot::Sender<Result<u64, errors::ApiError>>;

/// The ReadIndex round in flight: its context and the reads it serves.
type ReadRound = Option<(u64, Vec<ReadReply>)>;

/// Work handed to the raft loop.
pub enum RaftMsg {
    /// Propose a marshaled InternalRaftRequest whose waiter is registered under `id`.
    Propose {
        id: u64,
        data: Vec<u8>,
    },
    /// Confirm leadership for a linearizable read; answers with the index to wait for.
    ReadIndex(ReadReply),
    Stop,
}

pub struct RaftLoop {
    pub node: RawNode<MemStorage>,
    pub wal: Wal,
    pub snapshotter: Snapshotter,
    pub shared: Arc<Shared>,
    pub rx: Receiver<RaftMsg>,
    pub snapshot_index: u64,
    /// The membership as of the last applied conf change (or the snapshot).
    pub conf_state: ConfState,
    pub applied_index: u64,
}

/// Entries kept in the raft log behind a snapshot so a slow follower can catch up without
/// a snapshot transfer (etcd's catch-up entries).
const CATCH_UP_ENTRIES: u64 = 5000;

impl RaftLoop {
    pub fn run(mut self) {
        let tick = self.shared.cfg.heartbeat_interval;
        let mut next_tick = Instant::now() + tick;
        let mut read_seq: u64 = 0;
        // Reads waiting for the next ReadIndex round, and the round in flight.
        let mut waiting_reads: Vec<ReadReply> = Vec::new();
        let mut in_flight: ReadRound = None;
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
            for m in msgs {
                match m {
                    RaftMsg::Propose { id, data } => {
                        if self.node.propose(data).is_err() {
                            self.shared.wait.trigger(
                                id,
                                apply::Outcome {
                                    result: Err(errors::NO_LEADER),
                                    revision: 0,
                                },
                            );
                        }
                    }
                    RaftMsg::ReadIndex(tx) => waiting_reads.push(tx),
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
            if in_flight.is_none() && !waiting_reads.is_empty() {
                if self.node.role() != StateRole::Leader && self.node.leader_id() == 0 {
                    for tx in waiting_reads.drain(..) {
                        let _ = tx.send(Err(errors::NO_LEADER));
                    }
                } else {
                    read_seq += 1;
                    match self.node.read_index(read_seq.to_be_bytes().to_vec()) {
                        Ok(()) => in_flight = Some((read_seq, std::mem::take(&mut waiting_reads))),
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
        let status = self.node.status();
        if status.progress.len() <= 1 && self.shared.cfg.initial_election_tick_advance {
            let _ = self.node.campaign();
        }
    }

    fn handle_ready(&mut self, in_flight: &mut ReadRound) -> Result<(), String> {
        let rd = self.node.ready();
        if let Some(hs) = rd.hard_state {
            self.shared.set_term_commit(hs.term, hs.commit);
        }
        if let Some(ss) = rd.soft_state {
            self.shared
                .set_leader(ss.leader_id, ss.raft_state == StateRole::Leader);
        }
        if rd.snapshot.is_some() {
            return Err(
                "received a snapshot from a leader; snapshots to followers are not supported yet"
                    .into(),
            );
        }
        let hs = rd.hard_state.unwrap_or_default();
        self.wal
            .save(&hs, &rd.entries)
            .map_err(|e| format!("failed to save to the WAL: {e}"))?;
        if let Some(hs) = rd.hard_state {
            self.node.storage_mut().set_hard_state(hs);
        }
        self.node.storage_mut().append(&rd.entries);
        if !rd.messages.is_empty() {
            tracing::debug!(
                count = rd.messages.len(),
                "dropping peer messages: no peer transport yet"
            );
        }
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
        let snap: Snapshot = self
            .node
            .storage_mut()
            .create_snapshot(index, Some(self.conf_state.clone()), Vec::new())
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
        if index > CATCH_UP_ENTRIES {
            let _ = self.node.storage_mut().compact(index - CATCH_UP_ENTRIES);
        }
        self.snapshot_index = index;
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
                if let Some((id, outcome)) = apply::apply_normal(
                    &self.shared.kv,
                    e,
                    &self.shared.lessor,
                    &self.shared.alarms,
                    &self.shared.auth,
                    &mut effects,
                ) && id != 0
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
                let cs = self.node.apply_conf_change(&cc);
                tracing::info!(voters = ?cs.voters, learners = ?cs.learners, "applied a configuration change");
                self.conf_state = cs;
                if cc.r#type == ConfChangeType::ConfChangeAddNode as i32
                    || cc.r#type == ConfChangeType::ConfChangeAddLearnerNode as i32
                {
                    match Member::from_json(cc.context()) {
                        Ok(m) => {
                            apply::apply_member_added(&self.shared.kv, e, &m);
                            self.shared.add_member(m);
                        }
                        Err(err) => {
                            tracing::warn!(error = %err, "conf change without a member in its context")
                        }
                    }
                }
            }
            _ => tracing::warn!(index = e.index, "skipping an entry of an unsupported type"),
        }
    }
}

/// How long a client waits for its proposal to be applied before `request timed out`.
pub fn request_timeout(election: Duration) -> Duration {
    Duration::from_secs(5) + 2 * election
}
