// The raft thread: ticks raft, feeds it proposals, read requests and peers' messages, persists
// each Ready to the WAL, sends its messages and hands committed entries to the apply task.
//
// It does only raft's own work so ticks and heartbeats stay on time: applying, snapshot
// creation and install, and snapshot images run in the apply task (apply_loop.rs); WAL and
// snap purges on a purge thread. A leader sends its appends while it fsyncs its own copy.
// While it waits for work, the peer transport's tasks run on its thread (raft_thread.rs).

use std::sync::Arc;
use std::sync::mpsc::SyncSender;
use std::time::{Duration, Instant};

use prost::Message as _;
use proto::raftpb::{ConfChange, ConfChangeType, Entry, EntryType, Message, MessageType, Snapshot};
use proto::walpb;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::mpsc::{Sender, UnboundedReceiver};
use tokio::sync::oneshot;

use super::Shared;
use super::apply::{self, Applied, MemberChange};
use super::apply_loop::ApplyTask;
use super::inbox::Slot;
use super::reconfig;
use super::wait::IdGen;
use crate::error;
use crate::membership::id_hex;
use crate::metrics::METRICS;
use crate::raft::{MemStorage, RawNode, SnapshotStatus, StateRole, Storage as _};
use crate::transport::{REMOVED_MESSAGE, Report, Transport};
use common::snap::Snapshotter;
use common::wal::Wal;

/// Answers a linearizable read with the index to wait for (or why it cannot be served).
pub type ReadReply = oneshot::Sender<Result<u64, error::Error>>;

/// The ReadIndex round in flight: its context and the reads it serves.
type ReadRound = Option<(u64, Vec<ReadReply>)>;

/// A ReadIndex request unanswered this long is sent again (a message to or from the leader
/// may have been dropped), as etcd's read loop does.
const READ_INDEX_RETRY: Duration = Duration::from_millis(500);

/// The peer transport's tasks run on the raft thread while the loop waits; a loop that keeps
/// finding work queued gives them a turn at least this often all the same.
const TRANSPORT_TURN: Duration = Duration::from_millis(1);

/// Client proposals taken in one turn of the loop go to raft as one step of at most this
/// many bytes (raft's own bound on an append message; a bigger proposal goes alone).
const PROPOSAL_BATCH_BYTES: usize = 1024 * 1024;

/// Proposals taken in one turn of the loop, proposed together: a leader then sends each
/// follower one append (and hears one answer) for the batch instead of one per proposal,
/// and a follower forwards the batch to the leader in one message.
#[derive(Default)]
struct ProposalBatch {
    ids: Vec<u64>,
    data: Vec<Vec<u8>>,
    bytes: usize,
}

impl ProposalBatch {
    fn push(&mut self, id: u64, data: Vec<u8>) {
        self.bytes += data.len();
        self.ids.push(id);
        self.data.push(data);
    }

    /// Proposes what is gathered; every waiter hears NO_LEADER if raft refuses it.
    fn flush(&mut self, node: &mut RawNode<MemStorage>, shared: &Shared, leader_gone: bool) {
        if self.ids.is_empty() {
            return;
        }
        let ids = std::mem::take(&mut self.ids);
        let data = std::mem::take(&mut self.data);
        self.bytes = 0;
        if leader_gone || node.propose_batch(data).is_err() {
            ids.into_iter().for_each(|id| refuse(shared, id));
        }
    }
}

/// Answers the waiter of a proposal raft did not take.
fn refuse(shared: &Shared, id: u64) {
    shared.wait.trigger(
        id,
        apply::Outcome {
            result: Err(error::NO_LEADER),
            revision: 0,
        },
    );
}

/// Work handed to the raft loop.
pub enum RaftMsg {
    /// Propose a marshaled InternalRaftRequest whose waiter is registered under `id`.
    Propose {
        id: u64,
        data: Vec<u8>,
        slot: Slot,
    },
    /// Propose a membership change whose waiter is registered under `cc.id`.
    ProposeConfChange(ConfChange),
    /// Confirm leadership for a linearizable read; answers with the index to wait for.
    ReadIndex(ReadReply, Slot),
    /// A message from a peer.
    Step(Box<Message>, Slot),
    /// What the transport learned about a peer.
    Report(Report),
    /// Raft's view of itself (per-peer progress on the leader).
    Status(oneshot::Sender<crate::raft::Status>),
    /// Hand leadership to another voter.
    TransferLeader(u64),
    /// The apply thread committed the backend and wrote this snapshot's .snap file: record
    /// it in the WAL and compact the log behind it.
    SnapshotSaved(Box<Snapshot>),
    Stop,
}

pub struct RaftLoop {
    pub node: RawNode<MemStorage>,
    pub wal: Wal,
    pub snapshotter: Snapshotter,
    pub shared: Arc<Shared>,
    pub rx: UnboundedReceiver<RaftMsg>,
    /// The raft thread's runtime (raft_thread.rs): the peer transport's tasks run while the
    /// loop waits in it.
    pub rt: Arc<tokio::runtime::Runtime>,
    pub transport: Arc<Transport>,
    /// Committed entries, snapshots to install and snapshot images to send, in log order.
    pub apply_tx: Sender<ApplyTask>,
    /// Wakes the purge thread after a snapshot (old WAL segments and .snap files may go).
    pub purge_tx: SyncSender<()>,
    /// The index of the snapshot the raft log storage starts at.
    pub snapshot_index: u64,
}

impl RaftLoop {
    pub fn run(mut self) {
        let tick = self.shared.cfg.heartbeat_interval;
        let mut next_tick = Instant::now() + tick;
        // A round's context must be unique across members: the leader keeps one pending
        // request per context and ignores a second with the same one, so a follower whose
        // context another member was also using would wait for the retry.
        let read_ids = IdGen::new(self.shared.member_id);
        // Reads waiting for the next ReadIndex round, and the round in flight.
        let mut waiting_reads: Vec<ReadReply> = Vec::new();
        let mut in_flight: ReadRound = None;
        let mut round_started = Instant::now();
        let mut last_turn = Instant::now();
        // One timer for the next tick, kept across waits and moved once per tick: a timer
        // made for each wait would be registered each time, and registering one that is due
        // before the runtime's next wake-up writes to its eventfd, which makes the next wait
        // return at once (an extra write and epoll_wait per loop turn).
        let mut tick_timer = {
            let _rt = self.rt.enter();
            Box::pin(tokio::time::sleep_until(next_tick.into()))
        };
        self.maybe_campaign_alone();
        loop {
            let now = Instant::now();
            let mut msgs = Vec::new();
            let rx = &mut self.rx;
            // With work already queued block_on returns at once without running the
            // transport's tasks: under a steady client load they still get their turn.
            let turn = now.duration_since(last_turn) >= TRANSPORT_TURN;
            if turn {
                last_turn = now;
            }
            if tick_timer.deadline() != next_tick.into() {
                tick_timer.as_mut().reset(next_tick.into());
            }
            let timer = tick_timer.as_mut();
            match self.rt.block_on(async {
                if turn {
                    tokio::task::yield_now().await;
                }
                tokio::select! {
                    biased;
                    m = rx.recv() => Ok(m),
                    _ = timer => Err(()),
                }
            }) {
                Ok(Some(m)) => msgs.push(m),
                Err(()) => {}
                Ok(None) => break,
            }
            // Take everything queued: proposals arriving during an fsync share the next one.
            while let Ok(m) = self.rx.try_recv() {
                msgs.push(m);
            }
            let mut stop = false;
            // Whether raft follows a removed leader: asked once per batch, not per proposal.
            let leader_gone = self.leader_gone();
            let mut batch = ProposalBatch::default();
            for m in msgs {
                if !matches!(m, RaftMsg::Propose { .. }) {
                    // Whatever came after the batched proposals is handled after them.
                    batch.flush(&mut self.node, &self.shared, leader_gone);
                }
                match m {
                    RaftMsg::Propose { id, data, slot } => {
                        drop(slot);
                        if batch.bytes + data.len() > PROPOSAL_BATCH_BYTES {
                            batch.flush(&mut self.node, &self.shared, leader_gone);
                        }
                        batch.push(id, data);
                    }
                    RaftMsg::ProposeConfChange(cc) => {
                        if leader_gone || self.node.propose_conf_change(&cc).is_err() {
                            refuse(&self.shared, cc.id);
                        }
                    }
                    RaftMsg::ReadIndex(tx, _slot) => waiting_reads.push(tx),
                    RaftMsg::Step(m, _slot) => {
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
                    RaftMsg::SnapshotSaved(snap) => {
                        if let Err(e) = self.record_snapshot(&snap) {
                            tracing::error!(error = %e, "raft loop cannot go on; stopping the server");
                            self.shared.fail(e);
                            return;
                        }
                    }
                    RaftMsg::Stop => stop = true,
                }
            }
            batch.flush(&mut self.node, &self.shared, leader_gone);
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
                    METRICS.read_indexes_failed.inc();
                    if let Some((_, txs)) = in_flight.take() {
                        for tx in txs {
                            let _ = tx.send(Err(error::NO_LEADER));
                        }
                    }
                } else {
                    METRICS.slow_read_indexes.inc();
                    tracing::info!(
                        sent_request_id = *seq,
                        retry_timeout = ?READ_INDEX_RETRY,
                        "waiting for ReadIndex response took too long, retrying"
                    );
                    let _ = self.node.read_index(seq.to_be_bytes().to_vec());
                    round_started = Instant::now();
                }
            }
            if in_flight.is_none() && !waiting_reads.is_empty() {
                if self.node.role() != StateRole::Leader && self.node.leader_id() == 0 {
                    METRICS.read_indexes_failed.inc();
                    for tx in waiting_reads.drain(..) {
                        let _ = tx.send(Err(error::NO_LEADER));
                    }
                } else {
                    let seq = read_ids.next();
                    match self.node.read_index(seq.to_be_bytes().to_vec()) {
                        Ok(()) => {
                            in_flight = Some((seq, std::mem::take(&mut waiting_reads)));
                            round_started = Instant::now();
                        }
                        Err(_) => {
                            METRICS.read_indexes_failed.inc();
                            for tx in waiting_reads.drain(..) {
                                let _ = tx.send(Err(error::NO_LEADER));
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
        if self.shared.conf_state().voters == [self.shared.member_id]
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
        // What promises nothing about this member's disk goes out before the fsync: a
        // leader's appends, sent while it writes its own copy (thesis §10.2.1: it counts its
        // own log toward a commit only in a later Ready, taken after this one is persisted),
        // and a follower's forwarded proposals, read requests and heartbeat answers. Acks and
        // votes promise what is on disk, so they wait for it; and nothing goes early when this
        // Ready changes term or vote, which must be on disk before anyone hears of them.
        let persisted = self.node.storage().hard_state();
        let now = rd.take_messages_before_persist(persisted);
        self.send(now)?;
        // Committed entries this member already has on disk are applied while the new ones
        // are written, as etcd applies while it saves: a client waits for its entry's commit,
        // not for the next batch's fsync. Read states need no disk either.
        let on_disk = rd.take_committed_on_disk();
        if rd.snapshot.is_none() {
            self.hand_committed(on_disk)?;
            answer_reads(&rd.read_states, in_flight);
            rd.read_states.clear();
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
        if let Some(snap) = rd.snapshot.take() {
            self.node
                .storage_mut()
                .apply_snapshot(snap.clone())
                .map_err(|e| format!("cannot install the leader's snapshot: {e}"))?;
            self.snapshot_index = snap.metadata.as_ref().map_or(0, |m| m.index);
            self.to_apply(ApplyTask::InstallSnapshot(snap))?;
        }
        self.node.storage_mut().append(&rd.entries);
        // A follower's messages promise what is on disk (votes, acknowledgements): sent only
        // once persisted.
        self.send(std::mem::take(&mut rd.messages))?;
        self.hand_committed(std::mem::take(&mut rd.committed_entries))?;
        answer_reads(&rd.read_states, in_flight);
        self.node.advance(rd);
        self.trim_log();
        Ok(())
    }

    /// Drops applied entries from the log held in memory, keeping
    /// --experimental-snapshot-catchup-entries behind the applied index, and on a leader
    /// everything a member still lacks, up to --snapshot-count entries (what etcd would hold
    /// before its next snapshot). etcd holds every entry since its last snapshot file, 100k
    /// by default, in memory; they are in the WAL for a restart, and a follower lacking
    /// dropped entries is sent a snapshot built at the applied index, as after a snapshot
    /// file. Trimmed in steps of the kept amount, so the remaining entries move rarely.
    fn trim_log(&mut self) {
        let keep = self.shared.cfg.experimental_snapshot_catchup_entries.max(1);
        let applied = self.node.applied();
        let first = self.node.storage().first_index().unwrap_or(1);
        let Some(mut cut) = applied.checked_sub(keep) else {
            return;
        };
        if let Some(lowest) = self.node.lowest_peer_match() {
            let floor = applied.saturating_sub(self.shared.cfg.snapshot_count);
            cut = cut.min(lowest.max(floor));
        }
        if cut < first.saturating_add(keep) {
            return;
        }
        // Their memory is reused by the entries that follow; no heap trim is asked for.
        let _ = self.node.storage_mut().compact_to_mark(cut);
    }

    /// Hands committed entries to the apply thread. A conf change is applied here, to raft
    /// and to the member records, once every entry before it is applied.
    fn hand_committed(&mut self, entries: Vec<Entry>) -> Result<(), String> {
        let mut batch = Vec::new();
        for e in entries {
            if e.r#type != EntryType::EntryConfChange as i32 {
                batch.push(e);
                continue;
            }
            if !batch.is_empty() {
                self.to_apply(ApplyTask::Entries(std::mem::take(&mut batch)))?;
            }
            self.wait_applied()?;
            match ConfChange::decode(e.data()) {
                Ok(cc) => self.apply_conf_change(&e, &cc),
                Err(err) => {
                    tracing::error!(index = e.index, error = %err, "skipping an undecodable conf change")
                }
            }
            self.shared.set_applied_entry(e.index, e.term);
        }
        if !batch.is_empty() {
            self.to_apply(ApplyTask::Entries(batch))?;
        }
        Ok(())
    }

    /// Queues `task` for the apply thread; while its queue is full the transport's tasks keep
    /// running (link heartbeats, snapshot transfers), as they would on a thread of their own.
    fn to_apply(&self, task: ApplyTask) -> Result<(), String> {
        let sent = match self.apply_tx.try_send(task) {
            Err(TrySendError::Full(task)) => self.rt.block_on(self.apply_tx.send(task)).is_ok(),
            other => other.is_ok(),
        };
        if sent {
            Ok(())
        } else {
            Err("the apply thread stopped".to_string())
        }
    }

    /// Waits until the apply thread has applied everything handed to it (the transport's
    /// tasks run meanwhile).
    fn wait_applied(&self) -> Result<(), String> {
        let (tx, rx) = oneshot::channel();
        self.to_apply(ApplyTask::Barrier(tx))?;
        self.rt
            .block_on(rx)
            .map_err(|_| "the apply thread stopped".to_string())
    }

    /// Records a snapshot the apply thread took (its .snap file is written): the WAL marker
    /// makes it the one a restart loads; then the log behind it is compacted, keeping
    /// --experimental-snapshot-catchup-entries for slow followers, and old files are purged.
    fn record_snapshot(&mut self, snap: &Snapshot) -> Result<(), String> {
        let md = snap.metadata.clone().unwrap_or_default();
        let index = md.index;
        if index <= self.snapshot_index {
            // The leader's snapshot, installed meanwhile, is newer.
            return Ok(());
        }
        self.wal
            .save_snapshot(&walpb::Snapshot {
                index,
                term: md.term,
                conf_state: md.conf_state.clone(),
            })
            .map_err(|e| format!("saving the snapshot marker at {index} failed: {e}"))?;
        self.wal.release_lock_to(index);
        // The log in memory may already have been trimmed past this index (trim_log).
        if self.node.storage().snapshot_index() < index {
            self.node
                .storage_mut()
                .create_snapshot(index, md.conf_state.clone(), snap.data().to_vec())
                .map_err(|e| format!("creating a snapshot at {index} failed: {e}"))?;
            let keep = self.shared.cfg.experimental_snapshot_catchup_entries;
            if index > keep {
                let _ = self.node.storage_mut().compact(index - keep);
            }
        }
        self.snapshot_index = index;
        // The raft log behind the snapshot was just dropped.
        super::heap::release_soon();
        tracing::info!(snapshot_index = index, term = md.term, "saved snapshot");
        let _ = self.purge_tx.try_send(());
        Ok(())
    }
}

/// Answers the reads of the round in flight when raft says what index they wait for.
fn answer_reads(read_states: &[crate::raft::ReadState], in_flight: &mut ReadRound) {
    for rs in read_states {
        if let Some((seq, _)) = in_flight
            && rs.request_ctx == seq.to_be_bytes()
            && let Some((_, txs)) = in_flight.take()
        {
            for tx in txs {
                let _ = tx.send(Ok(rs.index));
            }
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
            self.shared.set_conf_state(cs);
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
            let cs = self.node.apply_conf_change(cc);
            self.shared.set_conf_state(cs);
        }
        if cc.r#type == ConfChangeType::ConfChangeRemoveNode as i32
            && cc.node_id == self.shared.member_id
            && apply
        {
            tracing::warn!("{REMOVED_MESSAGE}");
            self.shared.fail(REMOVED_MESSAGE.to_string());
        }
    }

    /// Hands messages to the transport and lets its tasks write them to the sockets now, not
    /// at the loop's next wait (a leader's appends go out before its fsync; an ack is what the
    /// leader waits for); a snapshot message goes to the apply thread, which builds the db
    /// image as of its applied index.
    fn send(&mut self, msgs: Vec<Message>) -> Result<(), String> {
        if msgs.is_empty() {
            return Ok(());
        }
        let mut plain = Vec::with_capacity(msgs.len());
        for m in msgs {
            if m.r#type == MessageType::MsgSnap as i32 {
                self.to_apply(ApplyTask::SendSnapshot(m))?;
            } else {
                plain.push(m);
            }
        }
        if !plain.is_empty() {
            // Queued from inside the runtime: the writer tasks it wakes go on its own run
            // queue, where a wake from outside would also write to its eventfd.
            let transport = &self.transport;
            self.rt.block_on(async {
                transport.send(plain);
                tokio::task::yield_now().await;
            });
        }
        Ok(())
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
}

/// How long a client waits for its proposal to be applied before `request timed out`.
pub fn request_timeout(election: Duration) -> Duration {
    Duration::from_secs(5) + 2 * election
}
