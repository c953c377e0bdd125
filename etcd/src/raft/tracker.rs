//! The leader's (and candidate's) bookkeeping about peers: membership, per-peer progress and
//! votes, with the quorum questions raft asks of them.

pub mod inflights;
pub mod progress;

use std::collections::{BTreeMap, BTreeSet};

use proto::raftpb::ConfState;

pub use self::inflights::Inflights;
pub use self::progress::{Progress, ProgressState};
use super::quorum::{MajorityConfig, VoteResult};

/// Membership, progress of every member, and the votes of the current election.
#[derive(Debug, Clone)]
pub struct ProgressTracker {
    pub voters: MajorityConfig,
    pub learners: BTreeSet<u64>,
    pub progress: BTreeMap<u64, Progress>,
    pub votes: BTreeMap<u64, bool>,
    pub max_inflight: usize,
}

impl ProgressTracker {
    pub fn new(max_inflight: usize) -> Self {
        ProgressTracker {
            voters: MajorityConfig::default(),
            learners: BTreeSet::new(),
            progress: BTreeMap::new(),
            votes: BTreeMap::new(),
            max_inflight,
        }
    }

    /// The membership as raft's wire type.
    pub fn conf_state(&self) -> ConfState {
        ConfState {
            voters: self.voters.voters.iter().copied().collect(),
            learners: self.learners.iter().copied().collect(),
            ..ConfState::default()
        }
    }

    /// Replaces membership and progress with `cs`; every peer starts probing at `next_idx`.
    pub fn reset_to(&mut self, cs: &ConfState, next_idx: u64) {
        self.voters = MajorityConfig::new(cs.voters.iter().copied());
        self.learners = cs
            .learners
            .iter()
            .copied()
            .filter(|id| !self.voters.voters.contains(id))
            .collect();
        self.progress.clear();
        for &id in self.voters.voters.iter().chain(&self.learners) {
            let mut pr = Progress::new(next_idx, self.max_inflight);
            pr.is_learner = self.learners.contains(&id);
            self.progress.insert(id, pr);
        }
        self.votes.clear();
    }

    pub fn is_voter(&self, id: u64) -> bool {
        self.voters.voters.contains(&id)
    }

    /// The index a quorum of voters has replicated.
    pub fn committed(&self) -> u64 {
        self.voters
            .committed_index(|id| self.progress.get(&id).map(|p| p.matched))
    }

    pub fn reset_votes(&mut self) {
        self.votes.clear();
    }

    /// Records a vote; only the first answer of each peer counts.
    pub fn record_vote(&mut self, id: u64, granted: bool) {
        self.votes.entry(id).or_insert(granted);
    }

    /// Counts the votes of voters (learners' answers never count).
    pub fn tally_votes(&self) -> (usize, usize, VoteResult) {
        let (mut granted, mut rejected) = (0, 0);
        for id in &self.voters.voters {
            match self.votes.get(id) {
                Some(true) => granted += 1,
                Some(false) => rejected += 1,
                None => {}
            }
        }
        let result = self.voters.vote_result(|id| self.votes.get(&id).copied());
        (granted, rejected, result)
    }

    /// Whether a quorum of voters has been heard from recently (the leader counts itself by
    /// keeping its own `recent_active` set).
    pub fn quorum_active(&self) -> bool {
        self.voters
            .vote_result(|id| Some(self.progress.get(&id).is_some_and(|p| p.recent_active)))
            == VoteResult::Won
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learners_never_count_in_votes_or_commits() {
        let mut t = ProgressTracker::new(8);
        t.reset_to(
            &ConfState {
                voters: vec![1, 2, 3],
                learners: vec![4, 5],
                ..ConfState::default()
            },
            1,
        );
        t.record_vote(1, true);
        t.record_vote(4, true);
        t.record_vote(5, true);
        assert_eq!(t.tally_votes(), (1, 0, VoteResult::Pending));
        for id in [1, 4, 5] {
            t.progress.get_mut(&id).unwrap().matched = 7;
        }
        assert_eq!(t.committed(), 0);
        t.progress.get_mut(&2).unwrap().matched = 7;
        assert_eq!(t.committed(), 7);
    }
}
