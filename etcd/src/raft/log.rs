//! The raft log as the algorithm sees it: durable entries (through `Storage`) followed by the
//! unstable tail, plus the commit and applied indexes and the log-matching queries on them.

use proto::raftpb::{Entry, Snapshot};

use super::errors::StorageError;
use super::log_unstable::Unstable;
use super::storage::{Storage, StorageResult, limit_size, snapshot_index_term};

/// Storage plus unstable entries, with `applied <= committed <= last_index()`.
pub struct RaftLog<S: Storage> {
    /// The durable part, written by the caller.
    pub storage: S,
    /// Entries and snapshot not yet persisted.
    pub unstable: Unstable,
    /// Highest index known to be stored on a quorum.
    pub committed: u64,
    /// Highest index the caller has applied to its state machine.
    pub applied: u64,
}

/// `maybe_append` refused because the leader's entries would overwrite a committed one: only a
/// broken or malicious peer can send that.
#[derive(Debug, PartialEq, Eq)]
pub struct ConflictsWithCommitted {
    pub index: u64,
    pub committed: u64,
}

impl<S: Storage> RaftLog<S> {
    /// A log over `storage`, with everything stored considered committed and applied up to the
    /// storage's snapshot; the hard state's commit index is set by the caller afterwards.
    pub fn new(storage: S) -> StorageResult<Self> {
        let first = storage.first_index()?;
        let last = storage.last_index()?;
        Ok(RaftLog {
            storage,
            unstable: Unstable::new(last + 1),
            committed: first - 1,
            applied: first - 1,
        })
    }

    /// The first index that still has an entry (one past the latest snapshot).
    pub fn first_index(&self) -> u64 {
        match self.unstable.maybe_first_index() {
            Some(i) => i,
            None => self
                .storage
                .first_index()
                .expect("raft: storage.first_index failed"),
        }
    }

    /// The index of the last entry (or of the snapshot if no entry follows it).
    pub fn last_index(&self) -> u64 {
        match self.unstable.maybe_last_index() {
            Some(i) => i,
            None => self
                .storage
                .last_index()
                .expect("raft: storage.last_index failed"),
        }
    }

    /// The term of the last entry.
    pub fn last_term(&self) -> u64 {
        self.term(self.last_index())
            .expect("raft: the last entry's term must be known")
    }

    /// The term of the entry at `index`: `Compacted` below the snapshot, `Unavailable` past
    /// the end.
    pub fn term(&self, index: u64) -> StorageResult<u64> {
        if index > self.last_index() {
            return Err(StorageError::Unavailable);
        }
        if let Some(t) = self.unstable.maybe_term(index) {
            return Ok(t);
        }
        let dummy = self.first_index() - 1;
        if index < dummy {
            return Err(StorageError::Compacted);
        }
        self.storage.term(index)
    }

    /// Whether the entry at `index` exists and has `term`.
    pub fn match_term(&self, index: u64, term: u64) -> bool {
        self.term(index) == Ok(term)
    }

    /// Election restriction (§5.4.1): is a log ending at `(last_index, term)` at least as
    /// up-to-date as ours?
    pub fn is_up_to_date(&self, last_index: u64, term: u64) -> bool {
        let our_term = self.last_term();
        term > our_term || (term == our_term && last_index >= self.last_index())
    }

    /// The index of the first entry of `ents` that is absent or has another term here; 0 if
    /// every entry is already present.
    pub fn find_conflict(&self, ents: &[Entry]) -> u64 {
        ents.iter()
            .find(|e| !self.match_term(e.index, e.term))
            .map_or(0, |e| e.index)
    }

    /// The largest index `<= index` whose term is `<= term`, with that term. A follower uses it
    /// to tell a leader how far back to jump after a rejected append, and the leader to find
    /// where the logs can agree; both skip whole terms instead of one entry per round trip.
    pub fn find_conflict_by_term(&self, index: u64, term: u64) -> (u64, u64) {
        let mut i = index.min(self.last_index());
        loop {
            match self.term(i) {
                Ok(t) if t > term && i > 0 => i -= 1,
                Ok(t) => return (i, t),
                Err(_) => return (i, 0),
            }
        }
    }

    /// Follower side of AppendEntries: if the entry before `ents` matches `(index, log_term)`,
    /// append `ents` (dropping any conflicting suffix), advance the commit index to
    /// `min(committed, last new index)` and return the last new index; `Ok(None)` if the
    /// consistency check fails.
    pub fn maybe_append(
        &mut self,
        index: u64,
        log_term: u64,
        committed: u64,
        ents: impl Into<Vec<Entry>>,
    ) -> Result<Option<u64>, ConflictsWithCommitted> {
        let mut ents = ents.into();
        if !self.match_term(index, log_term) {
            return Ok(None);
        }
        let last_new = index + ents.len() as u64;
        let ci = self.find_conflict(&ents);
        if ci != 0 {
            if ci <= self.committed {
                return Err(ConflictsWithCommitted {
                    index: ci,
                    committed: self.committed,
                });
            }
            let start = (ci - (index + 1)) as usize;
            ents.drain(..start);
            self.append(ents);
        }
        self.commit_to(committed.min(last_new));
        Ok(Some(last_new))
    }

    /// Appends entries that follow the committed prefix, returning the new last index.
    ///
    /// # Panics
    /// If they would overwrite a committed entry.
    pub fn append(&mut self, ents: impl Into<Vec<Entry>>) -> u64 {
        let ents = ents.into();
        let Some(first) = ents.first() else {
            return self.last_index();
        };
        assert!(
            first.index > self.committed,
            "raft: appending at {} would overwrite committed entries (committed {})",
            first.index,
            self.committed
        );
        self.unstable.truncate_and_append(ents);
        self.last_index()
    }

    /// Raises the commit index.
    ///
    /// # Panics
    /// If `to_commit` is past the last entry: the log would claim entries it does not have.
    pub fn commit_to(&mut self, to_commit: u64) {
        if to_commit > self.committed {
            assert!(
                to_commit <= self.last_index(),
                "raft: commit index {to_commit} is out of range [last index {}]",
                self.last_index()
            );
            self.committed = to_commit;
        }
    }

    /// Leader side: commit `max_index` if it is in the current `term` (§5.4.2: entries of older
    /// terms are only committed indirectly).
    pub fn maybe_commit(&mut self, max_index: u64, term: u64) -> bool {
        if max_index > self.committed && self.term(max_index) == Ok(term) {
            self.commit_to(max_index);
            return true;
        }
        false
    }

    /// Records that the caller applied everything up to `index`.
    ///
    /// # Panics
    /// If `index` is past the commit index: nothing uncommitted may be applied.
    pub fn applied_to(&mut self, index: u64) {
        if index <= self.applied {
            return;
        }
        assert!(
            index <= self.committed,
            "raft: applied index {index} is out of range [committed {}]",
            self.committed
        );
        self.applied = index;
    }

    /// The caller persisted entries through `(index, term)`.
    pub fn stable_to(&mut self, index: u64, term: u64) {
        self.unstable.stable_to(index, term);
    }

    /// The caller installed the snapshot at `index`.
    pub fn stable_snap_to(&mut self, index: u64) {
        self.unstable.stable_snap_to(index);
    }

    /// Entries not yet persisted.
    pub fn unstable_entries(&self) -> &[Entry] {
        &self.unstable.entries
    }

    fn apply_start(&self) -> u64 {
        (self.applied + 1).max(self.first_index())
    }

    /// Whether committed entries wait to be applied.
    pub fn has_next_committed_entries(&self) -> bool {
        self.committed + 1 > self.apply_start()
    }

    /// Committed entries not yet applied, up to `max_size` bytes (at least one).
    pub fn next_committed_entries(&self, max_size: u64) -> Vec<Entry> {
        if !self.has_next_committed_entries() {
            return Vec::new();
        }
        self.slice(self.apply_start(), self.committed + 1, max_size)
            .expect("raft: committed entries after the snapshot must be readable")
    }

    /// Entries from `index` to the end, up to `max_size` bytes (at least one).
    pub fn entries(&self, index: u64, max_size: u64) -> StorageResult<Vec<Entry>> {
        let last = self.last_index();
        if index > last {
            return Ok(Vec::new());
        }
        self.slice(index, last + 1, max_size)
    }

    /// Entries in `[lo, hi)`, from storage and then the unstable tail.
    pub fn slice(&self, lo: u64, hi: u64, max_size: u64) -> StorageResult<Vec<Entry>> {
        if lo < self.first_index() {
            return Err(StorageError::Compacted);
        }
        if hi > self.last_index() + 1 || lo > hi {
            return Err(StorageError::Unavailable);
        }
        if lo == hi {
            return Ok(Vec::new());
        }
        let mut ents = Vec::new();
        let off = self.unstable.offset;
        if lo < off {
            let stored = self.storage.entries(lo, hi.min(off), max_size)?;
            if (stored.len() as u64) < hi.min(off) - lo {
                // The size limit cut the stored part short: no unstable entry can follow.
                return Ok(stored);
            }
            ents = stored;
        }
        if hi > off {
            ents.extend_from_slice(self.unstable.slice(lo.max(off), hi));
        }
        limit_size(&mut ents, max_size);
        Ok(ents)
    }

    /// The snapshot to send a follower: the pending one, or the storage's.
    pub fn snapshot(&self) -> StorageResult<Snapshot> {
        match &self.unstable.snapshot {
            Some(s) => Ok(s.clone()),
            None => self.storage.snapshot(),
        }
    }

    /// Replaces the log by a snapshot from the leader; it becomes committed at once.
    pub fn restore(&mut self, snap: Snapshot) {
        let (index, _) = snapshot_index_term(&snap);
        self.committed = index;
        self.unstable.restore(snap);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::storage::MemStorage;

    fn ent(index: u64, term: u64) -> Entry {
        Entry {
            index,
            term,
            ..Entry::default()
        }
    }

    fn log_with(ents: &[Entry]) -> RaftLog<MemStorage> {
        let mut l = RaftLog::new(MemStorage::new()).unwrap();
        l.append(ents);
        l
    }

    #[test]
    fn find_conflict_cases() {
        let prev = [ent(1, 1), ent(2, 2), ent(3, 3)];
        let cases: Vec<(Vec<Entry>, u64)> = vec![
            // no conflict, empty
            (vec![], 0),
            // no conflict, all present
            (vec![ent(1, 1), ent(2, 2), ent(3, 3)], 0),
            (vec![ent(3, 3)], 0),
            // no conflict, but new entries
            (vec![ent(2, 2), ent(3, 3), ent(4, 4)], 4),
            (vec![ent(4, 4), ent(5, 4)], 4),
            // conflicts with existing entries
            (vec![ent(1, 4), ent(2, 4)], 1),
            (vec![ent(2, 1), ent(3, 4), ent(4, 4)], 2),
            (vec![ent(3, 1), ent(4, 2)], 3),
        ];
        for (i, (ents, want)) in cases.into_iter().enumerate() {
            assert_eq!(log_with(&prev).find_conflict(&ents), want, "case {i}");
        }
    }

    #[test]
    fn find_conflict_by_term_skips_whole_terms() {
        let l = log_with(&[ent(1, 1), ent(2, 1), ent(3, 3), ent(4, 3), ent(5, 5)]);
        let cases = [
            ((5, 5), (5, 5)),
            ((5, 4), (4, 3)),
            ((5, 2), (2, 1)),
            ((5, 0), (0, 0)),
            // an index past the end is clamped
            ((9, 3), (4, 3)),
        ];
        for ((i, t), want) in cases {
            assert_eq!(l.find_conflict_by_term(i, t), want, "({i},{t})");
        }
    }

    #[test]
    fn maybe_append_cases() {
        let prev = [ent(1, 1), ent(2, 2), ent(3, 3)];
        // (index, log_term, committed, ents, want result, want last, want commit)
        type Case = (u64, u64, u64, Vec<Entry>, Option<u64>, u64, u64);
        let cases: Vec<Case> = vec![
            // consistency check fails: wrong term / missing index
            (3, 2, 3, vec![ent(4, 4)], None, 3, 1),
            (4, 3, 3, vec![ent(5, 4)], None, 3, 1),
            // matches, nothing new, commit follows the leader up to the last new index
            (3, 3, 3, vec![], Some(3), 3, 3),
            (3, 3, 4, vec![], Some(3), 3, 3),
            (3, 3, 2, vec![], Some(3), 3, 2),
            // new entries
            (3, 3, 4, vec![ent(4, 4)], Some(4), 4, 4),
            (3, 3, 5, vec![ent(4, 4), ent(5, 4)], Some(5), 5, 5),
            // already present: the log is not truncated by a stale, shorter append
            (1, 1, 3, vec![ent(2, 2)], Some(2), 3, 2),
            // conflicting uncommitted suffix replaced
            (1, 1, 3, vec![ent(2, 4)], Some(2), 2, 2),
            (2, 2, 3, vec![ent(3, 4)], Some(3), 3, 3),
        ];
        for (i, (idx, lt, c, ents, want, last, commit)) in cases.into_iter().enumerate() {
            let mut l = log_with(&prev);
            l.committed = 1;
            assert_eq!(l.maybe_append(idx, lt, c, ents), Ok(want), "case {i}");
            assert_eq!(
                (l.last_index(), l.committed),
                (last, commit),
                "case {i} last/commit"
            );
        }
    }

    #[test]
    fn maybe_append_refuses_to_overwrite_committed() {
        let mut l = log_with(&[ent(1, 1), ent(2, 2), ent(3, 3)]);
        l.committed = 2;
        assert_eq!(
            l.maybe_append(1, 1, 3, &[ent(2, 5)]),
            Err(ConflictsWithCommitted {
                index: 2,
                committed: 2
            })
        );
        assert_eq!(l.last_term(), 3);
    }

    #[test]
    fn commit_only_in_current_term() {
        let mut l = log_with(&[ent(1, 1), ent(2, 2)]);
        assert!(!l.maybe_commit(2, 1), "entry 2 is from term 2");
        assert!(!l.maybe_commit(3, 2), "no entry 3");
        assert!(l.maybe_commit(2, 2));
        assert_eq!(l.committed, 2);
    }

    #[test]
    #[should_panic(expected = "out of range")]
    fn commit_beyond_last_index_panics() {
        log_with(&[ent(1, 1)]).commit_to(2);
    }

    #[test]
    fn up_to_date_compares_last_term_then_length() {
        let l = log_with(&[ent(1, 1), ent(2, 2), ent(3, 3)]);
        let cases = [
            ((2, 4), true),
            ((3, 4), true),
            ((4, 4), true),
            ((2, 2), false),
            ((4, 2), false),
            ((2, 3), false),
            ((3, 3), true),
            ((4, 3), true),
        ];
        for ((i, t), want) in cases {
            assert_eq!(l.is_up_to_date(i, t), want, "({i},{t})");
        }
    }

    #[test]
    fn slices_span_storage_and_unstable() {
        let mut storage = MemStorage::new();
        storage.append(&[ent(1, 1), ent(2, 1), ent(3, 2), ent(4, 2)]);
        storage.compact(1).unwrap();
        let mut l = RaftLog::new(storage).unwrap();
        l.append(&[ent(5, 3), ent(6, 3)]);
        assert_eq!(l.first_index(), 2);
        assert_eq!(l.last_index(), 6);
        assert_eq!(l.slice(1, 3, u64::MAX), Err(StorageError::Compacted));
        assert_eq!(l.slice(2, 8, u64::MAX), Err(StorageError::Unavailable));
        let all: Vec<u64> = l
            .slice(2, 7, u64::MAX)
            .unwrap()
            .iter()
            .map(|e| e.index)
            .collect();
        assert_eq!(all, vec![2, 3, 4, 5, 6]);
        assert_eq!(l.slice(4, 6, 0).unwrap(), vec![ent(4, 2)]);
        assert_eq!(l.slice(5, 7, 0).unwrap(), vec![ent(5, 3)]);
        assert_eq!(l.term(1), Ok(1));
        assert_eq!(l.term(0), Err(StorageError::Compacted));
        assert_eq!(l.term(7), Err(StorageError::Unavailable));

        // Committed entries are handed out once applied moves.
        l.commit_to(5);
        assert_eq!(l.next_committed_entries(u64::MAX).len(), 4);
        l.applied_to(4);
        assert_eq!(l.next_committed_entries(u64::MAX), vec![ent(5, 3)]);
        l.applied_to(5);
        assert!(!l.has_next_committed_entries());
    }
}
