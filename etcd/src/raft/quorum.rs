//! Majority arithmetic: which index a quorum of voters has, and whether a vote is won.
//! It knows nothing else about raft, so it is tested against a deliberately naive version.

use std::collections::BTreeSet;

/// The outcome of counting votes so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VoteResult {
    /// Not decided: enough voters have not answered.
    Pending,
    /// A quorum said no (or cannot say yes any more).
    Lost,
    /// A quorum said yes.
    Won,
}

/// A set of voters deciding by simple majority.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MajorityConfig {
    pub voters: BTreeSet<u64>,
}

impl MajorityConfig {
    pub fn new(voters: impl IntoIterator<Item = u64>) -> Self {
        MajorityConfig {
            voters: voters.into_iter().collect(),
        }
    }

    /// How many voters make a majority.
    pub fn quorum(&self) -> usize {
        self.voters.len() / 2 + 1
    }

    /// The highest index that a majority has acknowledged (a voter with no answer counts as
    /// 0). With no voters nothing can be committed, so 0.
    pub fn committed_index(&self, acked: impl Fn(u64) -> Option<u64>) -> u64 {
        if self.voters.is_empty() {
            return 0;
        }
        // Small clusters are the norm: a stack array avoids an allocation per commit check.
        let mut small = [0u64; 9];
        let mut big = Vec::new();
        let matched: &mut [u64] = if self.voters.len() <= small.len() {
            &mut small[..self.voters.len()]
        } else {
            big.resize(self.voters.len(), 0);
            &mut big
        };
        for (slot, id) in matched.iter_mut().zip(&self.voters) {
            *slot = acked(*id).unwrap_or(0);
        }
        matched.sort_unstable_by(|a, b| b.cmp(a));
        matched[self.quorum() - 1]
    }

    /// Counts votes: `votes(id)` is `Some(granted)` for a voter that answered. An empty
    /// config wins (there is nobody to ask).
    pub fn vote_result(&self, votes: impl Fn(u64) -> Option<bool>) -> VoteResult {
        if self.voters.is_empty() {
            return VoteResult::Won;
        }
        let (mut yes, mut missing) = (0, 0);
        for id in &self.voters {
            match votes(*id) {
                Some(true) => yes += 1,
                Some(false) => {}
                None => missing += 1,
            }
        }
        let q = self.quorum();
        if yes >= q {
            VoteResult::Won
        } else if yes + missing >= q {
            VoteResult::Pending
        } else {
            VoteResult::Lost
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::config::SplitMix64;

    /// The obvious definition: the largest index that at least a quorum of voters has reached.
    fn naive_committed(matched: &[u64]) -> u64 {
        let q = matched.len() / 2 + 1;
        let mut best = 0;
        for &candidate in matched {
            if matched.iter().filter(|&&m| m >= candidate).count() >= q {
                best = best.max(candidate);
            }
        }
        best
    }

    #[test]
    fn committed_index_matches_the_naive_definition() {
        let mut rng = SplitMix64::new(42);
        for _ in 0..2000 {
            let n = 1 + rng.below(11) as usize;
            let matched: Vec<u64> = (0..n).map(|_| rng.below(20)).collect();
            let cfg = MajorityConfig::new(1..=n as u64);
            let got = cfg.committed_index(|id| Some(matched[id as usize - 1]));
            assert_eq!(got, naive_committed(&matched), "{matched:?}");
        }
    }

    #[test]
    fn committed_index_counts_silent_voters_as_zero() {
        let cfg = MajorityConfig::new([1, 2, 3]);
        assert_eq!(cfg.committed_index(|id| (id == 1).then_some(5)), 0);
        assert_eq!(cfg.committed_index(|id| (id != 3).then_some(5)), 5);
        assert_eq!(MajorityConfig::default().committed_index(|_| Some(5)), 0);
    }

    #[test]
    fn vote_results() {
        let cfg = MajorityConfig::new([1, 2, 3, 4, 5]);
        let cases: Vec<(Vec<Option<bool>>, VoteResult)> = vec![
            (vec![None; 5], VoteResult::Pending),
            (
                vec![Some(true), Some(true), None, None, None],
                VoteResult::Pending,
            ),
            (
                vec![Some(true), Some(true), Some(true), None, None],
                VoteResult::Won,
            ),
            (
                vec![Some(true), Some(false), Some(false), Some(false), None],
                VoteResult::Lost,
            ),
            (
                vec![Some(true), Some(true), Some(false), Some(false), None],
                VoteResult::Pending,
            ),
        ];
        for (votes, want) in cases {
            assert_eq!(
                cfg.vote_result(|id| votes[id as usize - 1]),
                want,
                "{votes:?}"
            );
        }
        assert_eq!(
            MajorityConfig::default().vote_result(|_| None),
            VoteResult::Won
        );
    }
}
