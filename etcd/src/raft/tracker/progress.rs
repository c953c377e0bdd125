//! What a leader knows about one follower's log, and the flow-control state machine that
//! decides how much to send it next (probe, replicate, snapshot).

use super::inflights::Inflights;

/// How the leader is currently sending to a follower.
///
/// - `Probe`: the leader does not know where the follower's log matches; it sends one append
///   per heartbeat interval and waits for the answer before sending another.
/// - `Replicate`: the logs match up to `matched`; the leader streams appends optimistically,
///   bounded by the inflight window.
/// - `Snapshot`: the follower needs entries the leader has compacted; nothing is sent until the
///   snapshot is reported applied or failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProgressState {
    #[default]
    Probe,
    Replicate,
    Snapshot,
}

/// The leader's view of one peer (voter or learner).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    /// Highest index known to match the leader's log.
    pub matched: u64,
    /// Next index to send.
    pub next_idx: u64,
    pub state: ProgressState,
    /// Index of the snapshot being sent, in `Snapshot` state.
    pub pending_snapshot: u64,
    /// Whether the peer was heard from since the last check-quorum round.
    pub recent_active: bool,
    /// In `Probe` state: one append is out, wait for its answer.
    pub probe_sent: bool,
    pub ins: Inflights,
    pub is_learner: bool,
}

impl Progress {
    pub fn new(next_idx: u64, max_inflight: usize) -> Self {
        Progress {
            matched: 0,
            next_idx,
            state: ProgressState::Probe,
            pending_snapshot: 0,
            recent_active: false,
            probe_sent: false,
            ins: Inflights::new(max_inflight),
            is_learner: false,
        }
    }

    fn reset_state(&mut self, state: ProgressState) {
        self.state = state;
        self.probe_sent = false;
        self.pending_snapshot = 0;
        self.ins.reset();
    }

    /// Back to probing. After a snapshot, the follower will have at least the snapshot, so
    /// probing starts after it.
    pub fn become_probe(&mut self) {
        if self.state == ProgressState::Snapshot {
            let pending = self.pending_snapshot;
            self.reset_state(ProgressState::Probe);
            self.next_idx = (self.matched + 1).max(pending + 1);
        } else {
            self.reset_state(ProgressState::Probe);
            self.next_idx = self.matched + 1;
        }
    }

    pub fn become_replicate(&mut self) {
        self.reset_state(ProgressState::Replicate);
        self.next_idx = self.matched + 1;
    }

    pub fn become_snapshot(&mut self, snapshot_index: u64) {
        self.reset_state(ProgressState::Snapshot);
        self.pending_snapshot = snapshot_index;
    }

    /// The follower acknowledged entries through `n`; returns whether that was news.
    pub fn maybe_update(&mut self, n: u64) -> bool {
        let updated = self.matched < n;
        if updated {
            self.matched = n;
            self.probe_sent = false;
        }
        self.next_idx = self.next_idx.max(n + 1);
        updated
    }

    /// In replicate state the leader assumes an append will succeed and moves on.
    pub fn optimistic_update(&mut self, n: u64) {
        self.next_idx = n + 1;
    }

    /// The follower rejected an append at `rejected`, hinting its log may match up to
    /// `match_hint`. Returns false for a stale rejection (one that says nothing new).
    pub fn maybe_decr_to(&mut self, rejected: u64, match_hint: u64) -> bool {
        if self.state == ProgressState::Replicate {
            if rejected <= self.matched {
                return false;
            }
            self.next_idx = self.matched + 1;
            return true;
        }
        if self.next_idx == 0 || self.next_idx - 1 != rejected {
            return false;
        }
        let next = rejected.min(match_hint + 1).max(self.matched + 1).max(1);
        if next == self.next_idx {
            // Probing the same index again would get the same answer: only a confused or
            // hostile follower rejects at what it acknowledged. Wait for the next heartbeat.
            return false;
        }
        self.next_idx = next;
        self.probe_sent = false;
        true
    }

    /// Whether the leader must not send appends now.
    pub fn is_paused(&self) -> bool {
        match self.state {
            ProgressState::Probe => self.probe_sent,
            ProgressState::Replicate => self.ins.full(),
            ProgressState::Snapshot => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(state: ProgressState, matched: u64, next: u64) -> Progress {
        let mut p = Progress::new(next, 256);
        p.state = state;
        p.matched = matched;
        p
    }

    #[test]
    fn decr_to_cases() {
        use ProgressState::*;
        // (state, matched, next, rejected, hint, want ok, want next)
        let cases = [
            // replicate: stale rejection of an already-matched index
            (Replicate, 5, 10, 5, 5, false, 10),
            (Replicate, 5, 10, 4, 4, false, 10),
            // replicate: real rejection falls back to matched + 1
            (Replicate, 5, 10, 9, 9, true, 6),
            // probe: rejection not for the last probe is stale
            (Probe, 0, 0, 0, 0, false, 0),
            (Probe, 0, 10, 5, 5, false, 10),
            // probe: jump to the hint
            (Probe, 0, 10, 9, 9, true, 9),
            (Probe, 0, 10, 9, 2, true, 3),
            (Probe, 0, 2, 1, 1, true, 1),
            // rejecting what is known to match says nothing new
            (Probe, 0, 1, 0, 0, false, 1),
            (Probe, 8, 9, 8, 8, false, 9),
            // never below matched + 1
            (Probe, 3, 10, 9, 0, true, 4),
        ];
        for (i, (st, m, n, rej, hint, ok, want)) in cases.into_iter().enumerate() {
            let mut p = progress(st, m, n);
            assert_eq!(p.maybe_decr_to(rej, hint), ok, "case {i}");
            assert_eq!(p.next_idx, want, "case {i}");
        }
    }

    #[test]
    fn probe_pauses_until_answered() {
        let mut p = progress(ProgressState::Probe, 0, 1);
        assert!(!p.is_paused());
        p.probe_sent = true;
        assert!(p.is_paused());
        assert!(p.maybe_update(1));
        assert!(!p.is_paused());
        assert_eq!(p.next_idx, 2);
    }

    #[test]
    fn snapshot_to_probe_starts_after_the_snapshot() {
        let mut p = progress(ProgressState::Probe, 1, 2);
        p.become_snapshot(10);
        assert!(p.is_paused());
        p.become_probe();
        assert_eq!(p.next_idx, 11);
        assert_eq!(p.pending_snapshot, 0);
    }
}
