//! A snapshot of a node's raft state for Maintenance.Status, metrics and debugging: ids,
//! term, vote, commit/applied, role, and the leader's view of every follower.

use std::collections::BTreeMap;

use proto::raftpb::HardState;

use super::raft::{Raft, SoftState};
use super::storage::Storage;
use super::tracker::ProgressState;

/// The leader's view of one peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerProgress {
    pub matched: u64,
    pub next_idx: u64,
    pub state: ProgressState,
    pub is_learner: bool,
    pub recent_active: bool,
    pub pending_snapshot: u64,
    /// Whether flow control currently holds back appends to this peer.
    pub paused: bool,
    /// Append messages in flight (replicate state).
    pub inflight: usize,
}

/// Where a node stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub id: u64,
    /// Term, vote and commit index.
    pub hard_state: HardState,
    /// Known leader and this node's role.
    pub soft_state: SoftState,
    pub applied: u64,
    /// Per-peer progress; only a leader has it (empty otherwise).
    pub progress: BTreeMap<u64, PeerProgress>,
    pub lead_transferee: Option<u64>,
}

impl Status {
    pub(crate) fn new<S: Storage>(r: &Raft<S>) -> Self {
        let progress = if r.state == super::raft::StateRole::Leader {
            r.prs
                .progress
                .iter()
                .map(|(&id, p)| {
                    (
                        id,
                        PeerProgress {
                            matched: p.matched,
                            next_idx: p.next_idx,
                            state: p.state,
                            is_learner: p.is_learner,
                            recent_active: p.recent_active,
                            pending_snapshot: p.pending_snapshot,
                            paused: p.is_paused(),
                            inflight: p.ins.count(),
                        },
                    )
                })
                .collect()
        } else {
            BTreeMap::new()
        };
        Status {
            id: r.id,
            hard_state: r.hard_state(),
            soft_state: r.soft_state(),
            applied: r.raft_log.applied,
            progress,
            lead_transferee: r.lead_transferee,
        }
    }
}
