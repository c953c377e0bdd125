// The apply task: applies the entries the raft thread hands it (in log order), installs the
// leader's snapshots, takes this member's snapshots and builds the db images sent to followers.
//
// Keeping this work off the raft thread is what lets raft tick and heartbeat while a large apply,
// a backend commit or a snapshot install runs (a stalled raft thread costs the cluster its leader).
// It runs on the client runtime; what may take long runs in block_in_place (apply_weight.rs).

use std::sync::Arc;
use std::time::Instant;

use proto::raftpb::{Entry, EntryType, Message, Snapshot, SnapshotMetadata};

use super::Shared;
use super::apply::{self, Effect};
use super::raft_loop::RaftMsg;
use crate::membership::id_hex;
use crate::transport::{Report, Transport};
use common::snap::Snapshotter;

/// Batches the apply queue holds before the raft thread waits for the apply thread. Proposals
/// are refused well before this fills (`MAX_APPLY_GAP`), so it is a backstop, not a throttle.
pub const APPLY_QUEUE: usize = 1024;

/// Committed but unapplied entries beyond which new proposals are refused with "too many
/// requests" (etcd's maxGapBetweenApplyAndCommitIndex).
pub const MAX_APPLY_GAP: u64 = 5000;

/// Work for the apply thread, in log order.
pub enum ApplyTask {
    /// Committed normal entries (conf changes are applied by the raft thread, see `Barrier`).
    Entries(Vec<Entry>),
    /// The leader's snapshot, already durable (.snap file, WAL marker, db image received):
    /// swap the db in and rebuild what derives from it.
    InstallSnapshot(Snapshot),
    /// Build this member's db image as of the applied index and stream it with `MsgSnap`.
    SendSnapshot(Message),
    /// Answer once everything queued before is applied (the raft thread applies a conf change
    /// only then, so it sees the same state every member sees at that index).
    Barrier(tokio::sync::oneshot::Sender<()>),
}

pub struct ApplyLoop {
    pub shared: Arc<Shared>,
    pub rx: tokio::sync::mpsc::Receiver<ApplyTask>,
    pub raft_tx: tokio::sync::mpsc::UnboundedSender<RaftMsg>,
    pub transport: Arc<Transport>,
    pub snapshotter: Snapshotter,
    /// The index of this member's newest snapshot (its own or the leader's).
    pub snapshot_index: u64,
    /// The cluster version last applied ("" while undecided), to log changes as etcd does.
    pub cluster_version: String,
}

impl ApplyLoop {
    /// Runs on the client runtime. A light batch is applied right there, so the requests
    /// it answers run next on the same worker (a thread of its own cost a wake-up per write:
    /// raft → apply thread → client worker); anything that may take long runs in
    /// block_in_place, which hands the worker's other tasks to another thread first.
    pub async fn run(mut self) {
        while let Some(task) = self.rx.recv().await {
            if self.light(&task) {
                self.handle(task);
            } else {
                tokio::task::block_in_place(|| self.handle(task));
            }
        }
    }

    /// Whether `task` is cheap enough to run on a client worker: a batch of light entries
    /// (apply_weight.rs) that neither reaches the backend's batch limit nor takes a snapshot,
    /// while no reader holds the store's index (an unpaginated range of a million keys holds
    /// it for long; a read that starts just after this look can still make the batch wait).
    fn light(&self, task: &ApplyTask) -> bool {
        match task {
            ApplyTask::Entries(entries) => {
                let Some(ops) = super::apply_weight::light_ops(entries) else {
                    return false;
                };
                let last = entries.last().map_or(0, |e| e.index);
                !self.snapshot_due(last)
                    && !self.shared.kv.backend().commit_due(ops)
                    && !self.shared.kv.index_busy()
            }
            ApplyTask::Barrier(_) => true,
            ApplyTask::InstallSnapshot(_) | ApplyTask::SendSnapshot(_) => false,
        }
    }

    fn handle(&mut self, task: ApplyTask) {
        if self.shared.failure().is_some() {
            // A failed member applies nothing more; raft stops on its own.
            return;
        }
        match task {
            ApplyTask::Entries(entries) => {
                let mut last = None;
                // The watch dispatcher is woken once per batch, not once per write (a
                // long batch wakes it now and then: WatchHub::hold_wakes).
                let wakes = self.shared.kv.watch_hub().hold_wakes();
                for e in &entries {
                    if !self.apply_entry(e) {
                        break;
                    }
                    last = Some(e);
                }
                drop(wakes);
                // Once per batch: readers waiting for the applied index are woken once.
                if let Some(last) = last {
                    self.shared.set_applied_entry(last.index, last.term);
                }
                // The backend commits in the background; one that failed would keep
                // acknowledged writes only in the WAL for ever: stop, as etcd does
                // (it panics), and let a restart replay the WAL into the db.
                if let Some(err) = self.shared.kv.backend().last_error() {
                    let why = format!("failed to commit the backend (db) to disk: {err}");
                    tracing::error!(error = %err, "failed to commit the backend; stopping the server");
                    self.shared.fail(why);
                    return;
                }
                self.maybe_snapshot();
            }
            ApplyTask::InstallSnapshot(snap) => {
                if let Err(e) = self.install_snapshot(&snap) {
                    tracing::error!(error = %e, "cannot install the leader's snapshot; stopping the server");
                    self.shared.fail(e);
                }
            }
            ApplyTask::SendSnapshot(m) => self.send_snapshot(m),
            ApplyTask::Barrier(done) => {
                let _ = done.send(());
            }
        }
    }

    /// Applies one committed entry; false when it stopped the member.
    fn apply_entry(&mut self, e: &Entry) -> bool {
        if EntryType::try_from(e.r#type) != Ok(EntryType::EntryNormal) {
            tracing::warn!(index = e.index, "skipping an entry of an unsupported type");
            return true;
        }
        if e.data().is_empty() {
            self.shared.version_check.notify_one();
        }
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
                Effect::Undecodable(index) => {
                    let why = format!(
                        "committed entry {index} is neither a v3 nor a v2 request: the log is corrupt; stopping before applying it"
                    );
                    tracing::error!(index, "{why}");
                    self.shared.fail(why);
                    return false;
                }
                Effect::Downgrade(info) => {
                    if info.enabled {
                        tracing::info!(
                            target_version = %info.target_version,
                            server_version = crate::version::ETCD_VERSION,
                            "The server is ready to downgrade"
                        );
                    } else {
                        tracing::info!("the downgrade job is cancelled");
                    }
                    // The leader sets the cluster version for the job at once, not at its
                    // next periodic look.
                    self.shared.version_check.notify_one();
                }
                Effect::ClusterVersion(v) => {
                    // The leader re-publishes the same version now and then: log changes only.
                    if self.cluster_version != v {
                        if self.cluster_version.is_empty() {
                            tracing::info!(cluster_version = %v, "set initial cluster version");
                        } else {
                            tracing::info!(from = %self.cluster_version, to = %v, "updated cluster version");
                        }
                        tracing::info!(cluster_version = %v, "enabled capabilities for version");
                        self.cluster_version = v;
                    }
                }
            }
        }
        true
    }

    /// Takes a snapshot every --snapshot-count applied entries: the backend is committed
    /// first (the snapshot promises the db holds everything up to it), then the .snap file is
    /// written here; the raft thread records the WAL marker and compacts its log.
    /// Whether applying up to `index` calls for a snapshot (every --snapshot-count entries).
    fn snapshot_due(&self, index: u64) -> bool {
        index.saturating_sub(self.snapshot_index) > self.shared.cfg.snapshot_count
    }

    fn maybe_snapshot(&mut self) {
        let (index, term) = self.shared.applied_entry();
        if !self.snapshot_due(index) {
            return;
        }
        if let Err(e) = self.shared.kv.backend().force_commit() {
            tracing::error!(error = %e, "backend commit before a snapshot failed; stopping the server");
            self.shared
                .fail(format!("backend commit before a snapshot failed: {e}"));
            return;
        }
        // The data carries the v2 store membership etcd 3.4 reads at boot, so a real etcd
        // can take over this data dir.
        let data = crate::membership::v2store::membership_image(&super::bootstrap::load_members(
            &self.shared.kv,
        ));
        let snap = Snapshot {
            data: Some(data),
            metadata: Some(SnapshotMetadata {
                conf_state: Some(self.shared.conf_state()),
                index,
                term,
            }),
        };
        if let Err(e) = self.snapshotter.save_snap(&snap) {
            tracing::error!(error = %e, "saving the snapshot failed; stopping the server");
            self.shared
                .fail(format!("saving the snapshot at {index} failed: {e}"));
            return;
        }
        self.snapshot_index = index;
        let _ = self.raft_tx.send(RaftMsg::SnapshotSaved(Box::new(snap)));
    }

    /// etcd's merged snapshot: raft's snapshot message re-stamped with the applied index (and
    /// its term and membership), sent with the backend image at exactly that index.
    fn send_snapshot(&mut self, mut m: Message) {
        let to = m.to;
        let backend = self.shared.kv.backend();
        if let Err(e) = backend.force_commit() {
            tracing::warn!(error = %e, "cannot commit the backend for a snapshot; will retry");
            let _ = self
                .raft_tx
                .send(RaftMsg::Report(Report::Snapshot { to, ok: false }));
            return;
        }
        let db = backend.db();
        let tx = db.begin_read();
        let (index, term) = self.shared.applied_entry();
        // The v2 store membership as of the image, not of raft's older snapshot.
        let data = crate::membership::v2store::membership_image(&super::bootstrap::load_members(
            &self.shared.kv,
        ));
        m.snapshot = Some(Snapshot {
            data: Some(data),
            metadata: Some(SnapshotMetadata {
                conf_state: Some(self.shared.conf_state()),
                index,
                term,
            }),
        });
        self.transport.send_snapshot(m, db, tx);
    }

    /// Swaps the leader's db image in for ours and rebuilds everything derived from the db.
    fn install_snapshot(&mut self, snap: &Snapshot) -> Result<(), String> {
        let md = snap.metadata.clone().unwrap_or_default();
        let cfg = &self.shared.cfg;
        // A defrag renaming its copy over the db after this would undo the install.
        let backend = self.shared.kv.backend().clone();
        let _file = backend.hold_file();
        super::bootstrap::install_snapshot_db(&self.snapshotter, md.index, &cfg.backend_path())
            .map_err(|e| e.to_string())?;
        let db = super::bootstrap::open_db(cfg, &cfg.backend_path())
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
        let mut members = super::bootstrap::load_members(kv);
        let mut removed = super::bootstrap::load_removed(kv);
        // The snapshot's v2 store is the membership at its index, as etcd recovers it (the db
        // of a cluster etcd 3.4 restored lists the old cluster's members). It is that of the
        // db only when the db has applied nothing past the snapshot.
        if let Some(v2) = snap
            .data
            .as_deref()
            .and_then(crate::membership::v2store::members_from_image)
            .filter(|m| !m.is_empty())
            && kv.consistent_index() <= md.index
            && !super::v2_membership::same_members(&v2, &members)
        {
            tracing::warn!(
                bucket = ?members.iter().map(|m| id_hex(m.id)).collect::<Vec<_>>(),
                snapshot = ?v2.iter().map(|m| id_hex(m.id)).collect::<Vec<_>>(),
                "the snapshot's db lists other members than its v2 store; taking the v2 store's, as etcd does"
            );
            for m in &members {
                if !v2.iter().any(|x| x.id == m.id) {
                    self.transport.remove_peer(m.id);
                }
            }
            members = v2;
            removed.retain(|id| !members.iter().any(|m| m.id == *id));
            super::bootstrap::replace_members_bucket(kv, &members, &removed);
        }
        for m in &members {
            self.transport.set_peer(m.id, m.peer_urls.clone());
        }
        for id in &removed {
            self.transport.remove_peer(*id);
        }
        self.shared.set_members(members, removed);
        self.shared
            .set_conf_state(md.conf_state.clone().unwrap_or_default());
        self.snapshot_index = md.index;
        self.shared.set_applied_entry(md.index, md.term);
        tracing::info!(
            snapshot_index = md.index,
            revision = kv.current_rev(),
            "applied the leader's snapshot to the backend"
        );
        Ok(())
    }
}
